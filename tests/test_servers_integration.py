# -*- test-case-name: tests.test_servers_integration -*-
"""
End-to-end tests of issue 16 against Cyrus IMAP and Courier-IMAP (Debian's
packages, started privately on loopback by L{imapmig.testing.cyrus} and
L{imapmig.testing.courier}): the realistic corpus (a slice of
L{imapmig.testing.corpus}) and the whole hard-case corpus
(L{imapmig.testing.hardcases}, plus L{SERVER_CASES}) migrated by the real
daemon from Maildirs INTO each server, then back OUT of it, the server as
the IMAP source of a migration into a private Dovecot.

Each direction is run twice, the second run appending nothing (counted on
the server); C{imapmig verify} then finds no difference but the ones the
server itself makes, which each test names exactly, by hard case; C{imapmig
report} records every message the server refused with its reply, and every
folder created under a fallback name.

One migration per server and direction carries both corpora (two jobs, two
accounts), so that each server is started once per test.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import yaml
from attrs import frozen
from twisted.internet import reactor as _globalReactor
from twisted.trial.unittest import TestCase

from imapmig.config import Config, loadConfig
from imapmig.progress import JobState
from imapmig.testing.corpus import Corpus, writeMaildir
from imapmig.testing.courier import CourierInstance, startCourier
from imapmig.testing.cyrus import CyrusInstance, startCyrus
from imapmig.testing.accounts import FetchedMessage, IMAPUser, quoteMailbox
from imapmig.testing.dovecot import DovecotInstance, requireDovecot
from imapmig.testing.hardcases import HardMessage, allKeywords, hardCases
from imapmig.testing.hardfiles import maildirFileName, writeHardMaildir
from imapmig.testing.privateserver import PrivateServer
from tests.support import corpusView, freshUser, migrate, newDirectory, reportJobs, sharedDovecot
from tests.support import runDaemon, verifyDifferences, verifyJobs, writePasswordFile

reactor: Any = _globalReactor

REALISTIC = "realistic"
HARD = "hard"
JOBS = (REALISTIC, HARD)

REALISTIC_MESSAGES = 250
"""
How many messages of the realistic corpus each test migrates: enough for
every folder and the usual mix of sizes, attachments and flags.
"""

USERS = (IMAPUser(REALISTIC, "realistic-pw"), IMAPUser(HARD, "hard-pw"))

_WHEN = datetime(2022, 6, 1, 9, 0, 0, tzinfo=timezone.utc)


def _message(name: str, subject: bytes, body: bytes = b"", eol: bytes = b"\n") -> bytes:
    """
    A small message of case C{name}, its lines ended by C{eol}.
    """
    lines = [
        b"From: Hard Cases <sender@hardcases.example.org>",
        b"To: Alice Example <alice@example.org>",
        b"Subject: " + subject,
        b"Date: Wed, 01 Jun 2022 09:00:00 +0000",
        b"Message-ID: <" + name.encode("ascii") + b"@hardcases.example.org>",
        b"MIME-Version: 1.0",
        b"Content-Type: text/plain; charset=utf-8",
        b"",
        body or b"This is the hard case " + name.encode("ascii") + b".",
    ]
    return eol.join(lines) + eol


SERVER_CASES = (
    HardMessage(
        folder=("Back\\slash",), name="folder-backslash", flags=("\\Seen",),
        internalDate=_WHEN, raw=_message("folder-backslash", b"In a folder named with a backslash"),
    ),
    HardMessage(
        folder=('Say "hi"',), name="folder-quote", flags=("\\Seen",),
        internalDate=_WHEN, raw=_message("folder-quote", b"In a folder named with quotes"),
    ),
    HardMessage(
        folder=("Party \U0001f389",), name="folder-emoji", flags=("\\Seen",),
        internalDate=_WHEN, raw=_message("folder-emoji", b"In a folder named with an emoji"),
    ),
    HardMessage(
        folder=("INBOX",), name="header-8bit", flags=("\\Seen",), internalDate=_WHEN,
        raw=_message("header-8bit", "Grüße aus Köln, raw UTF-8 in a header".encode("utf-8")),
    ),
    HardMessage(
        folder=("INBOX",), name="no-final-eol", flags=("\\Seen",), internalDate=_WHEN,
        raw=_message("no-final-eol", b"The last line has no line ending")[:-1],
    ),
)  # fmt: skip
"""
Hard cases the servers of this module treat differently, beside
L{hardCases}: folder names Cyrus (C{\\}, C{"}) or Courier (emoji) refuse, a
raw 8-bit header (Cyrus's C{munge8bit}), a message without a final line
ending (Courier adds one).
"""


def _cases() -> tuple[HardMessage, ...]:
    """
    The whole hard-case corpus, the 21 MB message included, then
    L{SERVER_CASES}.
    """
    return hardCases(large=True) + SERVER_CASES


def _keysByName(cases: Sequence[HardMessage]) -> dict[str, str]:
    """
    The Maildir source's message key of each case as L{writeHardMaildir}
    writes C{cases}, by case name.
    """
    keywords = allKeywords(cases)
    return {
        case.name: maildirFileName(i, case, keywords).partition(":2,")[0]
        for i, case in enumerate(cases)
    }


def _serverEntry(instance: PrivateServer | DovecotInstance) -> dict[str, object]:
    """
    The C{servers} entry of C{instance}'s plain port, without STARTTLS.
    """
    return {"endpoint": f"tcp:127.0.0.1:{instance.port}", "starttls": "off"}


def _writeConfig(
    testCase: TestCase,
    servers: Mapping[str, Mapping[str, object]],
    jobs: Sequence[tuple[str, dict[str, object], str, IMAPUser]],
) -> Config:
    """
    Write and load a configuration of C{jobs}, each C{(name, source,
    destination server, destination account)}, the status listener off.
    An IMAP source's C{password} key is written to a file of its own.
    """
    directory = newDirectory(testCase)
    jobEntries = []
    for name, source, server, user in jobs:
        source = dict(source)
        if "password" in source:
            source["password_file"] = writePasswordFile(
                os.path.join(directory, f"{name}-source-password"), str(source.pop("password"))
            )
        jobEntries.append(
            {
                "name": name,
                "source": source,
                "destination": {
                    "server": server,
                    "user": user.name,
                    "password_file": writePasswordFile(
                        os.path.join(directory, f"{name}-password"), user.password
                    ),
                },
            }
        )
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {name: dict(entry) for name, entry in servers.items()},
        "jobs": jobEntries,
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(document, f, allow_unicode=True)
    return loadConfig(path)


def _counts(instance: PrivateServer | DovecotInstance, user: str) -> dict[str, int]:
    """
    How many messages each selectable mailbox of C{user} holds, by full
    name, as the server itself answers C{STATUS (MESSAGES)}.
    """
    client = instance.imapClient(user)
    counts = {}
    try:
        for attributes, _, name in instance.listMailboxes(user):
            if {a.lower() for a in attributes} & {"\\noselect", "\\nonexistent"}:
                continue
            typ, data = client.status(quoteMailbox(name), "(MESSAGES)")
            if typ != "OK":
                raise AssertionError(f"STATUS {name!r}: {typ} {data!r}")
            reply = data[0]
            assert isinstance(reply, bytes)
            counts[name] = int(reply.rsplit(b"MESSAGES ", 1)[1].rstrip(b")"))
    finally:
        client.logout()
    return counts


View = tuple[str, tuple[str, ...], datetime]
"""
What is compared of one message: the SHA-256 of its octets, its flags
sorted and its INTERNALDATE in UTC (L{tests.support.MessageView}).
"""


def _view(body: bytes, flags: Sequence[str], when: datetime) -> View:
    """
    One message's L{View}, its flags sorted (as L{corpusView} sorts them).
    """
    return (hashlib.sha256(body).hexdigest(), tuple(sorted(flags)), when.astimezone(timezone.utc))


def _views(
    fetched: Mapping[str, list[FetchedMessage]], prefix: str = "", separator: str = "."
) -> dict[str, Counter[View]]:
    """
    Per mailbox holding a message, the multiset of its messages' L{View}s,
    the mailbox named by its folder levels joined with C{.}: C{prefix}
    stripped, C{separator} replaced (no hard-case folder name has a C{.}
    or a C{/}).  A NUL octet counts as C{0x80}, the octet Dovecot serves
    for a NUL it stores (L{HardMessage.servedBytes}).
    """
    result: dict[str, Counter[View]] = {}
    for name, messages in fetched.items():
        if not messages:
            continue
        result[_folderName(name, prefix, separator)] = Counter(
            _view(m.body.replace(b"\0", b"\x80"), m.flags, m.internalDate) for m in messages
        )
    return result


def _folderName(mailbox: str, prefix: str, separator: str) -> str:
    """
    A server's full mailbox name as L{_views} names it: C{prefix}
    stripped, levels joined with C{.}.
    """
    if mailbox != "INBOX" and mailbox.startswith(prefix):
        mailbox = mailbox[len(prefix) :]
    return ".".join(mailbox.split(separator))


def _bodyOf(fetched: Mapping[str, list[FetchedMessage]], case: str) -> tuple[str, bytes]:
    """
    The mailbox and octets of the one message of C{fetched} whose
    Message-ID is hard case C{case}'s own.
    """
    needle = f"<{case}@hardcases.example.org>".encode("ascii")
    (found,) = [
        (name, m.body) for name, messages in fetched.items() for m in messages if needle in m.body
    ]
    return found


def _munged(message: bytes) -> bytes:
    """
    C{message} as Cyrus stores it with C{munge8bit: yes}: every octet of
    its header above 0x7F replaced by C{X}, its body unchanged.
    """
    head, blank, body = message.partition(b"\r\n\r\n")
    return re.sub(rb"[\x80-\xff]", b"X", head) + blank + body


@frozen
class ServerBehaviour:
    """
    What one server does with the hard cases, as a test expects it.

    @ivar refused: the cases not migrated, by name, each with the reason
        C{imapmig report} records (the server's reply, or imapmig's own).
    @ivar fallbacks: each source folder the server refused, with the
        fallback name it was created under and the server's reply, as
        C{imapmig report --json} lists them.
    @ivar rewritten: the cases the server stores otherwise than sent, by
        name, each with the octets the server holds.
    """

    refused: Mapping[str, str] = {}
    fallbacks: Sequence[Mapping[str, str]] = ()
    rewritten: Mapping[str, bytes] = {}


def _case(cases: Sequence[HardMessage], name: str) -> HardMessage:
    """
    The case of C{cases} called C{name}.
    """
    (found,) = [case for case in cases if case.name == name]
    return found


class ServerRoundTripTests(TestCase):
    """
    The realistic corpus and the hard-case corpus into Cyrus (both
    namespace settings) and Courier, and back out of each into Dovecot.
    """

    async def _roundTrip(
        self, instance: CyrusInstance | CourierInstance, behaviour: ServerBehaviour
    ) -> None:
        """
        Both corpora from Maildirs into C{instance} (two jobs, two
        accounts), twice, then out of it into two fresh Dovecot accounts,
        twice, asserting everything the module docstring says, with the
        hard cases the server treats otherwise as C{behaviour} says.
        """
        requireDovecot(self)
        directory = newDirectory(self)
        realisticDir = os.path.join(directory, "realistic")
        corpus = writeMaildir(realisticDir, REALISTIC_MESSAGES, seed=16)
        cases = _cases()
        hardDir = os.path.join(directory, "hard")
        writeHardMaildir(hardDir, cases)
        config = _writeConfig(
            self,
            {"server": _serverEntry(instance)},
            [
                (REALISTIC, {"maildir": realisticDir}, "server", USERS[0]),
                (HARD, {"maildir": hardDir}, "server", USERS[1]),
            ],
        )
        await self._runTwice(config, instance, USERS)
        self._assertInto(instance, config, corpus, cases, behaviour)
        verified = await verifyJobs(reactor, config, JOBS)
        self._assertVerifiedInto(instance, verified, cases, behaviour)
        await self._assertOutOf(instance)

    async def _runTwice(
        self, config: Config, server: PrivateServer | DovecotInstance, users: Sequence[IMAPUser]
    ) -> None:
        """
        Run the daemon on C{config} twice; assert that the second run
        appended nothing to the C{users} accounts of C{server} (counted on
        the server) and left C{imapmig report} as it was, but for each
        job's timeline, which the rerun's changes extend.
        """
        await migrate(self, reactor, config, timeout=180)
        first = {u.name: _counts(server, u.name) for u in users}
        report = reportJobs(self, config, JOBS)
        await migrate(self, reactor, config, timeout=180)
        again = {u.name: _counts(server, u.name) for u in users}
        self.assertEqual(again, first, "the rerun appended")
        rerun = reportJobs(self, config, JOBS)
        for job in JOBS:
            # A folder's mark is recorded only once its Maildir fingerprint
            # is older than RACY_WINDOW: whether the first pass came within
            # it of the corpus's making is timing (a loaded machine), so the
            # folders marked are not compared.
            report[job].pop("folders")
            rerun[job].pop("folders")
            before, after = report[job].pop("timeline"), rerun[job].pop("timeline")
            self.assertEqual(after[: len(before)], before, f"{job}: the rerun rewrote the timeline")
            self.assertEqual(after[len(before)]["from"], "queued", after[len(before) :])
        self.assertEqual(rerun, report, "the rerun changed the report")

    def _assertInto(
        self,
        instance: CyrusInstance | CourierInstance,
        config: Config,
        corpus: Corpus,
        cases: Sequence[HardMessage],
        behaviour: ServerBehaviour,
    ) -> None:
        """
        Assert C{imapmig report} after the migration into C{instance}, and
        what the server holds, read by an independent client: every
        message but the refused ones, in its mailbox (under the personal
        prefix, or its fallback name), with its octets (or the server's
        rewrite of them), flags and INTERNALDATE.
        """
        report = reportJobs(self, config, JOBS)
        realistic, hard = report[REALISTIC], report[HARD]
        self.assertEqual(
            (realistic["copied"], realistic["failed"], realistic["folder_fallbacks"]),
            (REALISTIC_MESSAGES, 0, []),
            realistic,
        )
        names = {key: name for name, key in _keysByName(cases).items()}
        self.assertEqual(
            {names[f["message_key"]]: f["reason"] for f in hard["failures"]},
            dict(behaviour.refused),
        )
        self.assertEqual(
            (hard["copied"], hard["already_present"], hard["failed"]),
            (len(cases) - len(behaviour.refused), 0, len(behaviour.refused)),
        )
        self.assertEqual(hard["folder_fallbacks"], [dict(f) for f in behaviour.fallbacks])

        prefix, separator = instance.personalPrefix, instance.separator
        self.assertEqual(
            _views(instance.fetchAll(REALISTIC), prefix, separator),
            corpusView(corpus.messages),
            "the realistic corpus in the server",
        )
        # The report names the destination's full mailboxes; the views, folders.
        fallback = {
            _folderName(f["mailbox"], prefix, separator): _folderName(
                f["fallback"], prefix, separator
            )
            for f in behaviour.fallbacks
        }
        expected: dict[str, Counter[View]] = {}
        for case in cases:
            if case.name in behaviour.refused:
                continue
            folder = ".".join(case.folder)
            body = behaviour.rewritten.get(case.name, case.imapBytes)
            view = _view(body.replace(b"\0", b"\x80"), case.flags, case.internalDate)
            expected.setdefault(fallback.get(folder, folder), Counter())[view] += 1
        fetched = instance.fetchAll(HARD)
        self.assertEqual(
            _views(fetched, prefix, separator), expected, "the hard cases in the server"
        )
        # The NUL, where the server took it, stored as a NUL.
        if "nul-byte" not in behaviour.refused:
            self.assertEqual(_bodyOf(fetched, "nul-byte")[1], _case(cases, "nul-byte").imapBytes)
        for name, octets in behaviour.rewritten.items():
            self.assertEqual(_bodyOf(fetched, name)[1], octets, name)
            self.assertNotEqual(octets, _case(cases, name).imapBytes, name)

    def _assertVerifiedInto(
        self,
        instance: CyrusInstance | CourierInstance,
        verified: tuple[int, list[dict[str, Any]], str],
        cases: Sequence[HardMessage],
        behaviour: ServerBehaviour,
    ) -> None:
        """
        Assert that C{imapmig verify} found exactly the server's doing: each
        refused case missing, each rewritten one with other octets, in its
        mailbox, and nothing else; every other message paired.
        """
        status, document, output = verified
        names = {key: name for name, key in _keysByName(cases).items()}
        found = sorted(
            (kind, mailbox, names[key])
            for kind, mailbox, _, key, _ in verifyDifferences(document)
        )

        def where(name: str) -> str:
            return instance.mailboxName(_case(cases, name).folder)

        wanted = sorted(
            [("missing", where(n), n) for n in behaviour.refused]
            + [("content", where(n), n) for n in behaviour.rewritten]
        )
        self.assertEqual(found, wanted, output)
        self.assertEqual(status, 1 if wanted else 0, output)
        totals = {
            entry["job"]: tuple(
                sum(m[key] for m in entry["mailboxes"])
                for key in ("source_messages", "destination_messages", "matched")
            )
            for entry in document
        }
        copied = len(cases) - len(behaviour.refused)
        self.assertEqual(
            totals,
            {
                REALISTIC: (REALISTIC_MESSAGES,) * 3,
                # A rewritten message is paired, and differs.
                HARD: (len(cases), copied, copied),
            },
            output,
        )

    async def _assertOutOf(self, instance: CyrusInstance | CourierInstance) -> None:
        """
        Migrate both accounts of C{instance}, as IMAP sources, into two
        fresh accounts of a Dovecot, twice: assert that the rerun appends
        nothing, C{imapmig report} shows every message copied and no
        failure, C{imapmig verify} finds no difference, and Dovecot holds
        what the server held, folder by folder, its prefix stripped.
        """
        target = sharedDovecot()
        users = [freshUser(target), freshUser(target)]
        config = _writeConfig(
            self,
            {"source": _serverEntry(instance), "dovecot": _serverEntry(target)},
            [
                (job, {"server": "source", "user": u.name, "password": u.password}, "dovecot", d)
                for job, u, d in zip(JOBS, USERS, users)
            ],
        )
        await self._runTwice(config, target, users)
        held = {
            job: _views(instance.fetchAll(u.name), instance.personalPrefix, instance.separator)
            for job, u in zip(JOBS, USERS)
        }
        sizes = {job: sum(sum(c.values()) for c in views.values()) for job, views in held.items()}
        report = reportJobs(self, config, JOBS)
        self.assertEqual(
            {
                job: (r["copied"], r["failed"], r["failures"], r["folder_fallbacks"])
                for job, r in report.items()
            },
            {job: (sizes[job], 0, [], []) for job in JOBS},
        )
        status, document, output = await verifyJobs(reactor, config, JOBS)
        self.assertEqual((status, verifyDifferences(document)), (0, []), output)
        for job, d in zip(JOBS, users):
            self.assertEqual(_views(target.fetchAll(d.name)), held[job], f"job {job} in Dovecot")

    async def test_cyrusAltNamespace(self) -> None:
        """
        Cyrus with C{altnamespace: yes} (folders beside INBOX, separator
        C{/}) and its default C{munge8bit: yes}: both corpora in and out.
        Cyrus refuses the folder names C{Back\\slash} and C{Say "hi"}
        (C{NO Invalid mailbox name}): their messages land in C{Back_slash}
        and C{Say _hi_}, each fallback in the report.  It takes the NUL
        byte (imapmig sends it in a literal8, Cyrus offers BINARY) and
        stores it as a NUL, and takes the emoji folder name.  It rewrites
        the raw 8-bit header of C{header-8bit} (each octet above 0x7F
        becomes C{X}), the one difference verify finds.
        """
        instance = startCyrus(self, altNamespace=True, users=USERS)
        await self._roundTrip(instance, _cyrusBehaviour(instance, munge8bit=True))

    async def test_cyrusStandardNamespace(self) -> None:
        """
        Cyrus with Debian's C{altnamespace: no} (every folder under
        C{INBOX.}, separator C{.}) and C{munge8bit: no}: both corpora in
        and out, the same fallbacks, and no difference at all: the 8-bit
        header is kept as sent.
        """
        instance = startCyrus(self, altNamespace=False, users=USERS, munge8bit=False)
        await self._roundTrip(instance, _cyrusBehaviour(instance, munge8bit=False))

    async def test_courier(self) -> None:
        """
        Courier-IMAP (every folder under C{INBOX.}, synchronizing literals
        only): both corpora in and out.  Courier refuses the folder name
        C{Party 🎉} (a character outside the BMP) with a reply without a
        response code (C{NO Error in IMAP command received by server.}),
        so its messages land under the safe spelling C{Party _}.  imapmig
        itself does not send C{nul-byte}
        (no BINARY). Courier takes C{Back\\slash} and C{Say "hi"} as they
        are; it adds a final CRLF to C{no-final-eol} and drops the bare CR
        of C{bare-cr}, the two differences verify finds.
        """
        instance = startCourier(self, users=USERS)
        cases = _cases()
        noEOL = _case(cases, "no-final-eol").imapBytes
        bareCR = _case(cases, "bare-cr").imapBytes
        behaviour = ServerBehaviour(
            refused={
                "nul-byte": "contains NUL octets, which IMAP carries only in a BINARY literal8"
                " (RFC 3516); the destination does not offer BINARY",
            },
            fallbacks=(
                {
                    "mailbox": instance.mailboxName(("Party \U0001f389",)),
                    "fallback": instance.mailboxName(("Party _",)),
                    "reason": "Error in IMAP command received by server.",
                },
            ),
            rewritten={
                "no-final-eol": noEOL + b"\r\n",
                "bare-cr": bareCR.replace(b"CR\rafter", b"CRafter"),
            },
        )
        await self._roundTrip(instance, behaviour)


def _cyrusBehaviour(instance: CyrusInstance, munge8bit: bool) -> ServerBehaviour:
    """
    What Cyrus 3.6 (C{instance}) does with the hard cases: it refuses
    C{\\} and C{"} in folder names, and rewrites 8-bit header octets when
    C{munge8bit}.
    """
    rewritten = {}
    if munge8bit:
        rewritten["header-8bit"] = _munged(_case(_cases(), "header-8bit").imapBytes)
    return ServerBehaviour(
        fallbacks=(
            {
                "mailbox": instance.mailboxName(("Back\\slash",)),
                "fallback": instance.mailboxName(("Back_slash",)),
                "reason": "Invalid mailbox name",
            },
            {
                "mailbox": instance.mailboxName(('Say "hi"',)),
                "fallback": instance.mailboxName(("Say _hi_",)),
                "reason": "Invalid mailbox name",
            },
        ),
        rewritten=rewritten,
    )


class CourierTLSTests(TestCase):
    """
    TLS with the real Courier-IMAP: STARTTLS works, and a Courier that
    cannot start TLS (its key unreadable by the C{courier} user) answers
    C{OK Begin SSL/TLS negotiation} and ends the handshake with
    C{close_notify}, which fails the job with a clear error naming the
    server, not a crash.
    """

    async def _migrateOverTLS(self, instance: CourierInstance) -> tuple[bool, Any]:
        """
        Run one job of three messages into C{instance} over STARTTLS,
        verifying its certificate with its private CA.
        """
        user = IMAPUser("tlsuser", "tls-password-1")
        instance.addUser(user)
        maildir = os.path.join(newDirectory(self), "Maildir")
        writeMaildir(maildir, 3, seed=16, profile="small")
        server = {
            "endpoint": f"tcp:127.0.0.1:{instance.port}",
            "starttls": "required",
            "tls_ca": instance.caCertificatePath,
            "tls_hostname": "localhost",
        }
        config = _writeConfig(
            self, {"courier": server}, [("tls", {"maildir": maildir}, "courier", user)]
        )
        completed, progress = await runDaemon(reactor, config)
        return completed, progress["tls"]

    async def test_startTLS(self) -> None:
        """
        Over STARTTLS every message arrives.
        """
        instance = startCourier(self)
        completed, progress = await self._migrateOverTLS(instance)
        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (3, 0))

    async def test_handshakeEnded(self) -> None:
        """
        A Courier that cannot start TLS fails the job at once with the
        server's name and what happened; nothing is logged as a crash.
        """
        instance = startCourier(self)
        instance.breakStartTLS()
        completed, progress = await self._migrateOverTLS(instance)
        self.assertFalse(completed)
        self.assertEqual(progress.state, JobState.FAILED)
        self.assertEqual(
            progress.error,
            f"tlsuser at tcp:127.0.0.1:{instance.port}:"
            " the server ended the TLS handshake (close_notify)",
        )
        self.assertEqual(self.flushLoggedErrors(), [])
