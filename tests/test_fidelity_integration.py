# -*- test-case-name: tests.test_fidelity_integration -*-
"""
Acceptance tests of "Every source and every folder, byte for byte": the
hard-case corpus (L{imapmig.testing.hardcases}) migrated by the real daemon
from each kind of source (Maildir, mbox, another IMAP server) into real,
private Dovecots, then checked three ways:

  - C{imapmig verify} (the L{imapmig.commands.cli.verify} coroutine, on the global
    reactor as the daemon runs here) must exit 0 with no difference in its
    JSON report, having compared every message;
  - C{imapmig report} (L{imapmig.commands.cli.main}) must list every message that
    was not migrated, with its reason: into Dovecot, none;
  - an independent client (L{imaplib}, in
    L{DovecotInstance.fetchAll}) must find every message in its mailbox,
    under a readable name, with its octets, flags and INTERNALDATE
    (L{expectedByMailbox}, L{expectedFromMbox}).

Then the harder situations: SPECIAL-USE mailboxes named differently on
each side, folder rules, messages already in the destination, a second
IMAP pass after new mail and a flag change, differences verify must find
although imapmig did not cause them, and a source folder renumbered (new
UIDVALIDITY).

Two Dovecots serve these tests: the shared one of L{tests.support} (hierarchy
separator C{.}), which holds the accounts of the IMAP sources of some
tests and the destinations of others, and a private one started here with
the separator C{/} and, besides the usual special-use mailboxes,
C{Gesendet} (C{\\Sent}) and C{Papierkorb} (C{\\Trash}), which only the
accounts that create them have.  Every test takes fresh accounts.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import attrs
import yaml
from twisted.internet import reactor as _globalReactor
from twisted.trial.unittest import TestCase

from imapmig.config import Config, loadConfig
from imapmig.testing.dovecot import (
    DovecotInstance,
    DovecotUser,
    requireDovecot,
)
from imapmig.testing.accounts import FetchedMessage, quoteMailbox
from imapmig.testing.hardcases import HardMessage, allKeywords, hardCases
from imapmig.testing.hardfiles import (
    expectedByMailbox,
    expectedFromMbox,
    loadIntoDovecot,
    maildirFileName,
    writeHardMaildir,
    writeHardMbox,
)
from tests.support import freshUser, migrate, reportJobs, sharedDovecot, verifyDifferences
from tests.support import verifyJobs, writePasswordFile
from tests.support import newDirectory as _directory
from tests.support import plainServer as _plainServer

# Only the integration tests use the global reactor: they run the daemon
# and the verify command for real.
reactor: Any = _globalReactor

JOB = "fidelity"

SPECIAL_FOLDERS = {
    "Sent": "\\Sent",
    "Drafts": "\\Drafts",
    "Trash": "\\Trash",
    "Junk": "\\Junk",
    "Archive": "\\Archive",
}
"""
The corpus's special-use folders, each with its RFC 6154 use.
"""

_SLASH_SPECIAL_USE = tuple(SPECIAL_FOLDERS.items()) + (
    ("Gesendet", "\\Sent"),
    ("Papierkorb", "\\Trash"),
)
_SLASH_USERS = 12

View = tuple[str, tuple[str, ...], datetime]
"""
What is compared of one message in the destination: the SHA-256 of its
octets, its flags in canonical order (C{\\Recent} left out) and its
INTERNALDATE in UTC.
"""


# The private Dovecot with the separator "/".

_slash: list[DovecotInstance] = []
_slashTaken: list[int] = [0]


def _stopSlash(instance: DovecotInstance, root: str) -> None:
    """
    Stop the private instance and remove its files, when the test process
    exits.
    """
    instance.stop()
    shutil.rmtree(root, ignore_errors=True)


def slashDovecot() -> DovecotInstance:
    """
    The private Dovecot whose hierarchy separator is C{/}, with the
    special-use mailboxes of L{SPECIAL_FOLDERS} and C{Gesendet} and
    C{Papierkorb} declared (none pre-created), started on first use and
    stopped when the process exits.
    """
    if not _slash:
        # Under the system's temporary directory, not trial's: Unix socket
        # paths must stay short.
        root = tempfile.mkdtemp(prefix="imapmig-fidelity-")
        os.chmod(root, 0o755)
        instance = DovecotInstance(
            os.path.join(root, "slash"),
            users=[
                DovecotUser(f"slash{n:02d}", f"slash-password-{n:02d}")
                for n in range(1, _SLASH_USERS + 1)
            ],
            separator="/",
            specialUse=_SLASH_SPECIAL_USE,
        )
        atexit.register(_stopSlash, instance, root)
        instance.start()
        _slash.append(instance)
    return _slash[0]


def freshSlashUser() -> DovecotUser:
    """
    An account of L{slashDovecot} no other test has taken.
    """
    instance = slashDovecot()
    taken = _slashTaken[0]
    if taken >= len(instance.users):
        raise RuntimeError(f"all {taken} accounts of {instance!r} are taken")
    _slashTaken[0] = taken + 1
    return instance.users[taken]


# Configuring and running the daemon and the commands.




def _writeConfig(
    testCase: TestCase,
    destination: tuple[DovecotInstance, DovecotUser],
    source: dict[str, object] | None = None,
    sourceAccount: tuple[DovecotInstance, DovecotUser] | None = None,
    **jobSettings: object,
) -> Config:
    """
    Write and load the configuration file of one job, C{JOB}, migrating
    into the C{destination} account, the status listener off, the state
    database and the password files beside the file in a new directory.

    @param source: the job's C{source} for a file source (C{{"maildir":
        DIR}}, C{{"mbox": DIR, "quoting": "mboxrd"}}).
    @param sourceAccount: for an IMAP source instead, the server and
        account to read.
    @param jobSettings: more keys of the job (C{folders}, ...).
    """
    directory = _directory(testCase)
    instance, user = destination
    servers: dict[str, object] = {"destination": _plainServer(instance)}
    if sourceAccount is not None:
        sourceInstance, sourceUser = sourceAccount
        servers["source"] = _plainServer(sourceInstance)
        source = {
            "server": "source",
            "user": sourceUser.name,
            "password_file": writePasswordFile(
                os.path.join(directory, "source-password"), sourceUser.password
            ),
        }
    assert source is not None
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": servers,
        "jobs": [
            {
                "name": JOB,
                "source": source,
                "destination": {
                    "server": "destination",
                    "user": user.name,
                    "password_file": writePasswordFile(
                        os.path.join(directory, "destination-password"), user.password
                    ),
                },
                **jobSettings,
            }
        ],
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(document, f, allow_unicode=True)
    return loadConfig(path)


# What to expect.


def _digest(body: bytes) -> str:
    """
    The hex SHA-256 of C{body}.
    """
    return hashlib.sha256(body).hexdigest()


def _fetchedViews(fetched: Mapping[str, list[FetchedMessage]]) -> dict[str, list[View]]:
    """
    Per mailbox holding any message, the sorted L{View}s of its messages.
    Empty mailboxes (parents created for a hierarchy, an untouched INBOX)
    are left out.
    """
    return {
        name: sorted(
            (_digest(m.body), m.flags, m.internalDate.astimezone(timezone.utc))
            for m in messages
        )
        for name, messages in fetched.items()
        if messages
    }


def _expectedViews(expected: Mapping[str, Sequence[View]]) -> dict[str, list[View]]:
    """
    L{expectedByMailbox}'s result, each mailbox's list sorted like
    L{_fetchedViews}: a migration need not keep the source's UID order.
    """
    return {name: sorted(views) for name, views in expected.items() if views}


def _notMigrated(
    fetched: Mapping[str, list[View]], expected: Mapping[str, list[View]]
) -> int:
    """
    How many expected messages the destination does not hold at all: whose
    octets are in none of its mailboxes (as multisets: two identical
    messages need two copies).  A message in another mailbox, or with
    other flags, is held, and wrong: the per-mailbox comparison says so.
    """
    held = Counter(view[0] for views in fetched.values() for view in views)
    wanted = Counter(view[0] for views in expected.values() for view in views)
    return sum((wanted - held).values())


def _renamed(cases: Sequence[HardMessage], renames: Mapping[str, str]) -> list[HardMessage]:
    """
    C{cases} with their top-level folder renamed per C{renames} (C{"Sent"}
    to C{"Gesendet"}); other folders, and subfolders, unchanged.
    """
    return [
        attrs.evolve(case, folder=(renames[case.folder[0]],) + case.folder[1:])
        if len(case.folder) == 1 and case.folder[0] in renames
        else case
        for case in cases
    ]


def _case(cases: Sequence[HardMessage], name: str) -> HardMessage:
    """
    The case of C{cases} called C{name}.
    """
    (found,) = [case for case in cases if case.name == name]
    return found


def _uidOf(messages: Mapping[int, FetchedMessage], digest: str) -> int:
    """
    The UID of the one message of C{messages} whose octets have the
    SHA-256 C{digest}.
    """
    (uid,) = [uid for uid, m in messages.items() if _digest(m.body) == digest]
    return uid


def _maildirKey(cases: Sequence[HardMessage], name: str) -> str:
    """
    The Maildir source's key of case C{name} as L{writeHardMaildir} writes
    C{cases}: its file name's unique part, before C{:2,}.
    """
    index = [case.name for case in cases].index(name)
    return maildirFileName(index, cases[index], allKeywords(cases)).partition(":2,")[0]


def _extraMessage(subject: str) -> bytes:
    """
    A small CRLF message that is not in the corpus.
    """
    return (
        b"From: Carol <carol@example.net>\r\n"
        b"To: Alice Example <alice@example.org>\r\n"
        b"Subject: " + subject.encode("ascii") + b"\r\n"
        b"Message-ID: <" + subject.replace(" ", ".").encode("ascii") + b"@example.net>\r\n"
        b"\r\n"
        b"Not part of the hard-case corpus.\r\n"
    )


# Assertions.


def _assertDestination(
    testCase: TestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    expected: Mapping[str, Sequence[View]],
    report: Mapping[str, Any],
) -> None:
    """
    Assert that the C{user} account holds exactly C{expected}: each
    message, by its octets as Dovecot serves them over C{BODY[]}, its
    flags and its INTERNALDATE, in its mailbox, and nothing else; and that
    C{imapmig report} lists every expected message the destination does
    not hold (none, for a Dovecot destination) as failed, with a reason.
    """
    fetched = _fetchedViews(instance.fetchAll(user.name))
    wanted = _expectedViews(expected)
    notMigrated = _notMigrated(fetched, wanted)
    testCase.assertEqual(
        (report["failed"], len(report["failures"])),
        (notMigrated, notMigrated),
        f"every message not migrated must be reported: {report}",
    )
    for failure in report["failures"]:
        testCase.assertTrue(failure["reason"], failure)
    testCase.assertEqual(notMigrated, 0, f"messages not migrated: {report['failures']}")
    testCase.assertEqual(
        {name: len(views) for name, views in fetched.items()},
        {name: len(views) for name, views in wanted.items()},
        "messages per mailbox",
    )
    for name in wanted:
        testCase.assertEqual(fetched[name], wanted[name], f"mailbox {name!r} differs")


def _assertNames(
    testCase: TestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    names: Sequence[str],
) -> None:
    """
    Assert that the C{user} account has a mailbox of each of these
    decoded C{names}, spelled exactly so (it may have others).
    """
    have = {name for _, _, name in instance.listMailboxes(user.name)}
    testCase.assertEqual(sorted(set(names) - have), [], f"mailboxes: {sorted(have)}")


def _assertReadableNames(
    testCase: TestCase, instance: DovecotInstance, user: DovecotUser, separator: str
) -> None:
    """
    Assert that the corpus's awkward folder names arrived readable, their
    levels joined with the destination's C{separator}.
    """
    _assertNames(
        testCase,
        instance,
        user,
        [
            "INBOX",
            "Entwürfe",
            "送信済み",
            "Ärger",
            separator.join(["Ärger", "Ünter"]),
            separator.join(["Archive", "2019", "Q1", "Jan", "Week1"]),
            "Sent Items",
            "Tom & Jerry",
        ],
    )


def _assertSpecialUse(
    testCase: TestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    uses: Mapping[str, str],
) -> None:
    """
    Assert that each mailbox named in C{uses} exists in the C{user}
    account with that special-use attribute.
    """
    listed = {
        name: {a.lower() for a in attributes}
        for attributes, _, name in instance.listMailboxes(user.name)
    }
    for mailbox, use in uses.items():
        testCase.assertIn(mailbox, listed)
        testCase.assertIn(use.lower(), listed[mailbox], f"attributes of {mailbox!r}")


def _assertExactInbox(
    testCase: TestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    cases: Sequence[HardMessage],
) -> None:
    """
    Assert that the C{user} account's INBOX stores the exact octets of the
    INBOX cases, the NUL byte included: C{BINARY.PEEK[]} returns them as
    stored, and no INBOX case has a base64 or quoted-printable part it
    would decode.
    """
    stored = instance.fetchMailbox(user.name, "INBOX", "BINARY.PEEK[]")
    testCase.assertEqual(
        sorted(_digest(m.body) for m in stored.values()),
        sorted(case.sha256 for case in cases if case.folder == ("INBOX",)),
    )


def _assertVerified(
    testCase: TestCase,
    result: tuple[int, list[dict[str, Any]], str],
    messages: int,
    excluded: Sequence[str] = (),
) -> None:
    """
    Assert that C{imapmig verify} exited 0, its report listing no
    difference and no error, after comparing C{messages} source messages
    with as many in the destination, every one of them paired; and that
    the folder rules left out exactly the folders C{excluded}.
    """
    status, document, output = result
    testCase.assertEqual(len(document), 1, output)
    (entry,) = document
    testCase.assertNotIn("error", entry, output)
    testCase.assertEqual((entry["job"], entry["differences"]), (JOB, 0), output)
    testCase.assertEqual(verifyDifferences(document), [], output)
    testCase.assertEqual(status, 0, output)
    mailboxes = entry["mailboxes"]
    totals = tuple(
        sum(m[key] for m in mailboxes)
        for key in ("source_messages", "destination_messages", "matched")
    )
    testCase.assertEqual(totals, (messages, messages, messages), output)
    testCase.assertEqual(sorted(entry["excluded_folders"]), sorted(excluded), output)


def _assertCounts(
    testCase: TestCase, report: Mapping[str, Any], copied: int, alreadyPresent: int
) -> None:
    """
    Assert C{imapmig report}'s counts: C{copied} appended, C{alreadyPresent}
    found in the destination already, none failed.
    """
    testCase.assertEqual(
        (report["copied"], report["already_present"], report["failed"]),
        (copied, alreadyPresent, 0),
        report,
    )


# The tests.


class EverySourceTests(TestCase):
    """
    The hard-case corpus from each kind of source into a fresh Dovecot
    account: verify finds no difference, report no failure, and an
    independent client finds every message as it was.
    """

    async def test_maildir(self) -> None:
        """
        The whole corpus, the 21 MB message included, migrated from a
        Maildir into a Dovecot whose separator is C{/}: every folder
        arrives under its readable name with the levels joined by C{/}
        (C{Sent Items} too, a mailbox of its own beside C{Sent}), the
        special-use folders in mailboxes of the same use, every
        message with its octets (the NUL byte stored as a NUL), flags and
        INTERNALDATE; C{imapmig report} counts every message copied and
        none failed; C{imapmig verify} exits 0 with no difference.
        """
        requireDovecot(self)
        cases = hardCases(large=True)
        instance = slashDovecot()
        user = freshSlashUser()
        maildir = os.path.join(_directory(self), "Maildir")
        writeHardMaildir(maildir, cases)
        config = _writeConfig(self, (instance, user), {"maildir": maildir})

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(cases, "/"), report)
        _assertReadableNames(self, instance, user, "/")
        _assertSpecialUse(self, instance, user, SPECIAL_FOLDERS)
        _assertExactInbox(self, instance, user, cases)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))

    async def test_mbox(self) -> None:
        """
        The corpus migrated from a directory of mboxrd files (Thunderbird's
        layout, C{.sbd} directories for children) into a Dovecot whose
        separator is C{/}: every folder arrives under its readable name
        (C{Sent Items} beside C{Sent}), every message with the octets an mbox keeps (the C{From } lines
        unquoted, the NUL byte stored as a NUL), no flags and the
        INTERNALDATE of its C{From } line; report and verify as for a
        Maildir.
        """
        requireDovecot(self)
        cases = hardCases(large=True)
        instance = slashDovecot()
        user = freshSlashUser()
        mbox = os.path.join(_directory(self), "mbox")
        writeHardMbox(mbox, cases, "mboxrd")
        expected = expectedFromMbox(cases, "mboxrd")
        config = _writeConfig(self, (instance, user), {"mbox": mbox, "quoting": "mboxrd"})

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(expected, "/"), report)
        _assertReadableNames(self, instance, user, "/")
        _assertExactInbox(self, instance, user, expected)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))

    async def test_mboxWithStatusFields(self) -> None:
        """
        The corpus as mboxo files whose messages carry their flags in
        C{Status}, C{X-Status} and C{X-Keywords} fields (as mutt and
        Dovecot write them): every message arrives with those flags, and
        with its octets, the status fields kept.
        """
        requireDovecot(self)
        cases = hardCases(large=True)
        instance = slashDovecot()
        user = freshSlashUser()
        mbox = os.path.join(_directory(self), "mbox")
        writeHardMbox(mbox, cases, "mboxo", withStatusHeaders=True)
        expected = expectedFromMbox(cases, "mboxo", withStatusHeaders=True, keepStatusFields=True)
        self.assertTrue(any("\\Seen" in case.flags for case in expected))
        config = _writeConfig(self, (instance, user), {"mbox": mbox, "quoting": "mboxo"})

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(expected, "/"), report)
        _assertExactInbox(self, instance, user, expected)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))

    async def test_imap(self) -> None:
        """
        The corpus served by one Dovecot (separator C{.}) migrated into an
        account of another (separator C{/}): the hierarchy is translated
        (C{Archive.2019.Q1.Jan.Week1} becomes C{Archive/2019/Q1/Jan/Week1}),
        the special-use folders land in mailboxes of the same use, every
        message arrives with the octets the source stores (the NUL byte,
        served as 0x80 in C{BODY[]}, read back from C{BINARY[]}), its flags
        and its INTERNALDATE; report and verify as for a Maildir.
        """
        requireDovecot(self)
        cases = hardCases(large=True)
        source = sharedDovecot()
        sourceUser = freshUser(source)
        loadIntoDovecot(source, sourceUser.name, cases)
        instance = slashDovecot()
        user = freshSlashUser()
        config = _writeConfig(self, (instance, user), sourceAccount=(source, sourceUser))

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(cases, "/"), report)
        _assertExactInbox(self, instance, user, cases)
        _assertReadableNames(self, instance, user, "/")
        _assertSpecialUse(self, instance, user, SPECIAL_FOLDERS)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))


class FolderMappingTests(TestCase):
    """
    Where folders land: by SPECIAL-USE when the destination names its
    special mailboxes differently, and by the job's folder rules.
    """

    async def test_specialUseMappedByUse(self) -> None:
        """
        A destination account whose sent and trash mailboxes are
        C{Gesendet} (C{\\Sent}) and C{Papierkorb} (C{\\Trash}) receives the
        IMAP source's C{Sent} into C{Gesendet} and its C{Trash} into
        C{Papierkorb}; no C{Sent} or C{Trash} mailbox is created, the
        other folders keep their names, and verify, which maps folders the
        same way, finds no difference.
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        source = sharedDovecot()
        sourceUser = freshUser(source)
        loadIntoDovecot(source, sourceUser.name, cases)
        instance = slashDovecot()
        user = freshSlashUser()
        client = instance.imapClient(user.name)
        try:
            for name in ("Gesendet", "Papierkorb"):
                typ, data = client.create(quoteMailbox(name))
                self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        config = _writeConfig(self, (instance, user), sourceAccount=(source, sourceUser))

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        moved = _renamed(cases, {"Sent": "Gesendet", "Trash": "Papierkorb"})
        _assertDestination(self, instance, user, expectedByMailbox(moved, "/"), report)
        names = {name for _, _, name in instance.listMailboxes(user.name)}
        self.assertNotIn("Sent", names)
        self.assertNotIn("Trash", names)
        _assertSpecialUse(
            self,
            instance,
            user,
            {
                "Gesendet": "\\Sent",
                "Papierkorb": "\\Trash",
                "Drafts": "\\Drafts",
                "Junk": "\\Junk",
                "Archive": "\\Archive",
            },
        )
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))

    async def test_folderRules(self) -> None:
        """
        A Maildir job with C{folders: {exclude: [Junk], rename: {Archive:
        Old/Archive}}}: no C{Junk} mailbox is created and none of its
        messages migrated; C{Archive} and every folder below it land under
        C{Old/Archive}, nothing under C{Archive}; verify, applying the same
        rules, reports C{Junk} as excluded and no difference.
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        instance = slashDovecot()
        user = freshSlashUser()
        maildir = os.path.join(_directory(self), "Maildir")
        writeHardMaildir(maildir, cases)
        config = _writeConfig(
            self,
            (instance, user),
            {"maildir": maildir},
            folders={"exclude": ["Junk"], "rename": {"Archive": "Old/Archive"}},
        )

        await migrate(self, reactor, config)

        kept = [
            attrs.evolve(case, folder=("Old",) + case.folder)
            if case.folder[0] == "Archive"
            else case
            for case in cases
            if case.folder != ("Junk",)
        ]
        self.assertLess(len(kept), len(cases))
        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(kept), 0)
        _assertDestination(self, instance, user, expectedByMailbox(kept, "/"), report)
        names = {name for _, _, name in instance.listMailboxes(user.name)}
        self.assertNotIn("Junk", names)
        self.assertEqual(
            sorted(n for n in names if n == "Archive" or n.startswith("Archive/")), []
        )
        _assertNames(
            self, instance, user, ["Old/Archive", "Old/Archive/2019/Q1/Jan/Week1"]
        )
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(kept), excluded=["Junk"])


class AlreadyPresentTests(TestCase):
    """
    Messages the destination holds before imapmig ever ran are recognised
    and not appended again.
    """

    async def test_copiedByHandFirst(self) -> None:
        """
        Six of the Maildir's messages appended to the destination by hand
        first (the same octets, flags and INTERNALDATE; among them one of
        two byte-identical messages and one of two sharing a Message-ID)
        are not appended again: the destination holds every message
        exactly once (the identical pair twice), C{imapmig report} counts
        those six already present and the rest copied, and verify finds no
        difference.
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        instance = slashDovecot()
        user = freshSlashUser()
        maildir = os.path.join(_directory(self), "Maildir")
        writeHardMaildir(maildir, cases)
        byHand = [
            _case(cases, name)
            for name in (
                "flag-flagged",
                "keywords-all",
                "duplicate-1",
                "same-message-id-2",
                "folder-entwuerfe",
                "folder-aerger-uenter",
            )
        ]
        client = instance.imapClient(user.name)
        try:
            for name in ("Entwürfe", "Ärger", "Ärger/Ünter"):
                typ, data = client.create(quoteMailbox(name))
                self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        for case in byHand:
            instance.appendMessage(
                user.name, "/".join(case.folder), case.imapBytes, case.flags, case.internalDate
            )
        config = _writeConfig(self, (instance, user), {"maildir": maildir})

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases) - len(byHand), len(byHand))
        _assertDestination(self, instance, user, expectedByMailbox(cases, "/"), report)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))


class IMAPPassesTests(TestCase):
    """
    An IMAP source migrated again: after new mail and a flag change, and
    after a folder was renumbered.  The source is the private Dovecot
    (separator C{/}), the destination the shared one (separator C{.}).
    """

    async def test_secondPass(self) -> None:
        """
        After a first pass, three messages arrive in the source (two in
        INBOX, one in C{Ärger/Ünter}) and a migrated message gains
        C{\\Flagged}; the second pass appends exactly those three (nothing
        twice), carries the flag change over (Dovecot has CONDSTORE), and
        verify then finds no difference.
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        source = slashDovecot()
        sourceUser = freshSlashUser()
        loadIntoDovecot(source, sourceUser.name, cases)
        instance = sharedDovecot()
        user = freshUser(instance)
        config = _writeConfig(self, (instance, user), sourceAccount=(source, sourceUser))

        await migrate(self, reactor, config)
        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(cases, "."), report)
        before = {name: len(m) for name, m in instance.fetchAll(user.name).items()}

        when = datetime(2023, 3, 14, 15, 9, 26, tzinfo=timezone.utc)
        extra = [
            HardMessage(
                folder=folder, name=name, raw=_extraMessage(name), flags=flags,
                internalDate=when.replace(minute=index),
            )  # fmt: skip
            for index, (folder, name, flags) in enumerate(
                [
                    (("INBOX",), "extra one", ("\\Seen",)),
                    (("INBOX",), "extra two", ()),
                    (("Ärger", "Ünter"), "extra three", ("\\Flagged", "$label1")),
                ]
            )
        ]
        for message in extra:
            source.appendMessage(
                sourceUser.name,
                "/".join(message.folder),
                message.raw,
                message.flags,
                message.internalDate,
            )
        flagged = _case(cases, "flag-seen")
        uid = _uidOf(source.fetchMailbox(sourceUser.name, "INBOX"), flagged.servedSha256)
        client = source.imapClient(sourceUser.name)
        try:
            client.select("INBOX")
            typ, data = client.uid("STORE", str(uid), "+FLAGS.SILENT", "(\\Flagged)")
            self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        now = [
            attrs.evolve(case, flags=("\\Flagged", "\\Seen")) if case is flagged else case
            for case in cases
        ] + extra

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases) + 3, 0)
        after = {name: len(m) for name, m in instance.fetchAll(user.name).items()}
        self.assertEqual(
            {name: after[name] - count for name, count in before.items() if after[name] != count},
            {"INBOX": 2, "Ärger.Ünter": 1},
        )
        _assertDestination(self, instance, user, expectedByMailbox(now, "."), report)
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(now))

    async def test_uidValidityChanged(self) -> None:
        """
        After a first pass, a source folder is recreated with the same
        messages (DELETE, CREATE, APPEND of the same octets, flags and
        dates), so it has a new UIDVALIDITY and its messages new keys; the
        next pass appends nothing (the destination holds every message
        once), C{imapmig report} counts the folder's messages already
        present, and verify finds no difference.
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        source = slashDovecot()
        sourceUser = freshSlashUser()
        loadIntoDovecot(source, sourceUser.name, cases)
        instance = sharedDovecot()
        user = freshUser(instance)
        config = _writeConfig(self, (instance, user), sourceAccount=(source, sourceUser))

        await migrate(self, reactor, config)
        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)

        folder = "Tom & Jerry"
        recreated = [case for case in cases if case.folder == (folder,)]
        self.assertEqual(len(recreated), 2)
        oldValidity = source.uidValidity(sourceUser.name, folder)
        client = source.imapClient(sourceUser.name)
        try:
            for command in (client.delete, client.create):
                typ, data = command(quoteMailbox(folder))
                self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        for case in recreated:
            source.appendMessage(
                sourceUser.name, folder, case.imapBytes, case.flags, case.internalDate
            )
        self.assertNotEqual(source.uidValidity(sourceUser.name, folder), oldValidity)

        await migrate(self, reactor, config)

        report = reportJobs(self, config, [JOB])[JOB]
        _assertDestination(self, instance, user, expectedByMailbox(cases, "."), report)
        _assertCounts(self, report, len(cases), len(recreated))
        _assertVerified(self, await verifyJobs(reactor, config, [JOB]), len(cases))


class VerifyFindsDifferencesTests(TestCase):
    """
    Verify reports what differs, whoever caused it.
    """

    async def test_changedBehindImapmig(self) -> None:
        """
        After a clean Maildir migration, a message is
        deleted from the destination (STORE C{\\Deleted}, EXPUNGE),
        another gains C{\\Flagged}, and a message that is in no source
        folder is appended; verify then exits 1 and its JSON report lists
        exactly three differences: the deleted message C{missing} (with its
        source folder and key), the other one's C{flags} (with its key and
        destination UID), and the extra one C{unexpected} (with its UID).
        """
        requireDovecot(self)
        cases = hardCases(large=False)
        instance = slashDovecot()
        user = freshSlashUser()
        maildir = os.path.join(_directory(self), "Maildir")
        writeHardMaildir(maildir, cases)
        config = _writeConfig(self, (instance, user), {"maildir": maildir})
        await migrate(self, reactor, config)
        report = reportJobs(self, config, [JOB])[JOB]
        _assertCounts(self, report, len(cases), 0)
        _assertDestination(self, instance, user, expectedByMailbox(cases, "/"), report)

        deleted = _case(cases, "folder-entwuerfe")
        self.assertEqual(deleted.folder, ("Entwürfe",))
        deletedUID = _uidOf(instance.fetchMailbox(user.name, "Entwürfe"), deleted.servedSha256)
        flagged = _case(cases, "flag-seen")
        flaggedUID = _uidOf(instance.fetchMailbox(user.name, "INBOX"), flagged.servedSha256)
        client = instance.imapClient(user.name)
        try:
            client.select(quoteMailbox("Entwürfe"))
            typ, data = client.uid("STORE", str(deletedUID), "+FLAGS.SILENT", "(\\Deleted)")
            self.assertEqual(typ, "OK", data)
            # No other message of "Entwürfe" is \Deleted: EXPUNGE removes
            # this one only.
            typ, data = client.expunge()
            self.assertEqual(typ, "OK", data)
            client.select("INBOX")
            typ, data = client.uid("STORE", str(flaggedUID), "+FLAGS.SILENT", "(\\Flagged)")
            self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        _, extraUID = instance.appendMessage(
            user.name,
            "Tom & Jerry",
            _extraMessage("Appended behind imapmig"),
            ("\\Seen",),
            datetime(2023, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        )

        status, document, output = await verifyJobs(reactor, config, [JOB])

        self.assertEqual(
            verifyDifferences(document),
            [
                ("flags", "INBOX", "INBOX", _maildirKey(cases, "flag-seen"), flaggedUID),
                (
                    "missing",
                    "Entwürfe",
                    "Entwürfe",
                    _maildirKey(cases, "folder-entwuerfe"),
                    None,
                ),
                ("unexpected", "Tom & Jerry", None, None, extraUID),
            ],
            output,
        )
        self.assertEqual(status, 1, output)
        self.assertEqual(document[0]["differences"], 3, output)
