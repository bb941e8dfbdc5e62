"""
Tests for L{imapmig.commands.plan} (C{imapmig plan}): the real session and
destination view against L{imapmig.testing.fakeserver} over
L{twisted.test.iosim}, an in-memory source and state store, a L{Clock}.
"""

from __future__ import annotations

import io
from typing import Any, Awaitable, Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import AuthenticationFailed, SourceError
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceFolder
from imapmig.mail.folders import FolderRules
from imapmig.commands.plan import JobPlan, _writePlan, previewJob
from imapmig.sources.imap import IMAPSource
from imapmig.state import FolderFallback, MessageOutcome
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore
from tests.test_job import (
    PASSWORD,
    USER,
    MemoryEndpoint,
    MemorySource,
    RecordingStateStore,
    memoryOpener,
)

JOB = "alice-job"
WRITES = {b"CREATE", b"SUBSCRIBE", b"APPEND", b"SELECT", b"STORE", b"EXPUNGE", b"DELETE"}


def commands(server: FakeIMAPServer) -> set[bytes]:
    """
    The commands C{server} received (the second word of each line).
    """
    return {line.split(b" ")[1].upper() for line in server.received if b" " in line}


class Account:
    """
    A fake server's account behind a L{MemoryEndpoint}, and a way to open
    sessions to it.
    """

    def __init__(self, clock: Clock, mail: FakeMailStore) -> None:
        self.clock = clock
        self.mail = mail
        self.endpoint = MemoryEndpoint(
            clock, lambda attempt: FakeIMAPServer(mail, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        )

    def opener(self, password: str = PASSWORD) -> Callable[[], Awaitable[IMAPSession]]:
        """
        Opens a session logged in as C{USER} with C{password}.
        """

        return memoryOpener(self.endpoint, self.clock, password)


class PreviewTests(SynchronousTestCase):
    """
    L{previewJob}: what a run would copy and create, nothing written.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.destination = Account(self.clock, FakeMailStore({USER: PASSWORD}, "."))
        self.source = MemorySource()
        self.store = RecordingStateStore()

    def drive(self, d: Deferred[Any], *accounts: Account) -> None:
        """
        Pump every connection of C{accounts} and run the calls due, until
        C{d} fires or nothing moves; then let the connections close.
        """
        accounts = accounts or (self.destination,)
        while not d.called:
            for account in accounts:
                account.endpoint.pump(lambda: d.called)
            if d.called or not self.clock.getDelayedCalls():
                break
            self.clock.advance(0)
        for account in accounts:
            account.endpoint.pump()

    def preview(
        self, rules: FolderRules = FolderRules(), password: str = PASSWORD, nameFallback: bool = True
    ) -> Deferred[JobPlan]:
        d = Deferred.fromCoroutine(
            previewJob(
                JOB, self.source, rules, self.destination.opener(password), self.store, nameFallback
            )
        )
        self.drive(d)
        return d

    def assertNothingWritten(self, mailboxes: list[str]) -> None:
        """
        The destination received no command that writes, and holds
        C{mailboxes}, empty.
        """
        for server in self.destination.endpoint.servers:
            self.assertEqual(commands(server) & WRITES, set(), server.received)
        self.assertEqual(self.destination.mail.mailboxes(USER), mailboxes)
        for name in mailboxes:
            self.assertEqual(self.destination.mail.mailbox(USER, name), [])
        self.assertEqual(self.store.batches, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_nothingCopiedYet(self) -> None:
        """
        With no record, every message of every kept folder is to copy; a
        folder the rules leave out is listed with its counts and goes
        nowhere; the mailboxes missing in the destination are to be
        created, parents first, a special-use folder's with its use; the
        destination only read, its session logged out.
        """
        inbox = self.source.addFolder("INBOX")
        self.source.add(inbox, "1", b"a" * 100)
        self.source.add(inbox, "2", b"b" * 50)
        deep = self.source.addFolder("Archive", "2019")
        self.source.add(deep, "3", b"c" * 10)
        junk = self.source.addFolder("Junk")
        self.source.add(junk, "4", b"d" * 7)
        self.source._folders.append(SourceFolder(("Sent Items",), "Sent Items", "\\Sent"))
        self.source._messages["Sent Items"] = []
        plan = self.successResultOf(self.preview(FolderRules(exclude=("Junk",))))
        self.assertEqual(
            [(f.folder, f.messages, f.size, f.mailbox, f.how, f.mailboxExists, f.migrated,
              f.toCopy, f.toCopySize) for f in plan.folders],
            [
                ("INBOX", 2, 150, "INBOX", "name", True, 0, 2, 150),
                ("Archive/2019", 1, 10, "Archive.2019", "name", False, 0, 1, 10),
                ("Junk", 1, 7, None, "excluded", False, 0, 0, 0),
                ("Sent Items", 0, 0, "Sent Items", "name", False, 0, 0, 0),
            ],
        )  # fmt: skip
        self.assertEqual(
            plan.create, (("Archive", None), ("Archive.2019", None), ("Sent Items", "\\Sent"))
        )
        self.assertEqual(plan.namespace.delimiter, ".")
        self.assertEqual(plan.totals()["to_copy"], 3)
        self.assertEqual(plan.totals()["excluded_folders"], 1)
        self.assertEqual(plan.unreadable, [])
        self.assertIn(b"LOGOUT", commands(self.destination.endpoint.servers[0]))
        self.assertNothingWritten(["INBOX"])

    def test_recordedMessages(self) -> None:
        """
        Messages the state store records as in the destination count as
        migrated; one recorded as failed is still to copy, and counted as
        failed before; the store is only read.
        """
        self.destination.mail.create(USER, "Archive")
        folder = self.source.addFolder("Archive")
        for key in "123":
            self.source.add(folder, key, b"x" * 10)
        self.successResultOf(
            self.store.recordOutcomes(
                JOB,
                [
                    MessageOutcome("Archive", "1", "Archive", 10, 7, 1),
                    MessageOutcome("Archive", "2", "Archive", 10, failure="NO too big"),
                ],
            )
        )
        self.store.batches.clear()
        plan = self.successResultOf(self.preview())
        (archive,) = plan.folders
        self.assertEqual(
            (archive.messages, archive.migrated, archive.toCopy, archive.failedBefore,
             archive.mailboxExists),
            (3, 1, 2, 1, True),
        )  # fmt: skip
        self.assertEqual(plan.create, ())
        self.assertNothingWritten(["INBOX", "Archive"])

    def test_recordedFallback(self) -> None:
        """
        A folder whose name an earlier run fell back from goes to the
        recorded fallback, as the run would send it; unless the job's
        C{folder_name_fallback} is off.
        """
        self.source.addFolder("a*b")
        self.successResultOf(
            self.store.recordFolderFallback(JOB, FolderFallback("a*b", "a_b", "NO bad name"))
        )
        plan = self.successResultOf(self.preview())
        self.assertEqual([(f.mailbox, f.how) for f in plan.folders], [("a_b", "fallback")])
        self.assertEqual(plan.create, (("a_b", None),))
        plan = self.successResultOf(self.preview(nameFallback=False))
        self.assertEqual([(f.mailbox, f.how) for f in plan.folders], [("a*b", "name")])
        self.assertNothingWritten(["INBOX"])

    def test_loginRefused(self) -> None:
        """
        A destination that refuses the login: the plan fails with why.
        """
        self.source.addFolder("INBOX")
        failure = self.failureResultOf(self.preview(password="wrong"), AuthenticationFailed)
        self.assertIn("alice at memory", str(failure.value))
        self.assertNothingWritten(["INBOX"])

    def test_unreadableFolder(self) -> None:
        """
        A folder the source cannot list carries its error; the others are
        planned.
        """
        inbox = self.source.addFolder("INBOX")
        self.source.add(inbox, "1", b"x")
        broken = self.source.addFolder("Broken")
        self.source.listingErrors[broken.key] = SourceError("permission denied")
        plan = self.successResultOf(self.preview())
        self.assertEqual([f.folder for f in plan.unreadable], ["Broken"])
        self.assertEqual(plan.unreadable[0].error, "permission denied")
        self.assertEqual(plan.folders[0].toCopy, 1)
        out = io.StringIO()
        _writePlan(plan, out)
        self.assertIn("cannot list Broken: permission denied", out.getvalue())

    def test_imapSourceReadOnly(self) -> None:
        """
        An IMAP source is read with EXAMINE and FETCH, never SELECT, and
        nothing is written to it.
        """
        mail = FakeMailStore({USER: PASSWORD}, "/")
        mail.create(USER, "Lists/twisted")
        mail.append(USER, "INBOX", [(b"Subject: one\r\n\r\nbody\r\n", ("\\Seen",), None)])
        mail.append(USER, "Lists/twisted", [(b"Subject: two\r\n\r\nbody\r\n", (), None)])
        account = Account(self.clock, mail)
        source = IMAPSource(account.opener(), description="source")
        d = Deferred.fromCoroutine(
            previewJob(JOB, source, FolderRules(), self.destination.opener(), self.store)
        )
        self.drive(d, self.destination, account)
        plan = self.successResultOf(d)
        closing = source.close()
        self.drive(closing, account)
        self.successResultOf(closing)
        self.assertEqual(
            [(f.folder, f.messages, f.mailbox, f.toCopy) for f in plan.folders],
            [("INBOX", 1, "INBOX", 1), ("Lists/twisted", 1, "Lists.twisted", 1)],
        )
        received = set().union(*(commands(s) for s in account.endpoint.servers))
        self.assertIn(b"EXAMINE", received)
        self.assertEqual(received & WRITES, set())
        self.assertEqual([m.flags for m in mail.mailbox(USER, "INBOX")], [("\\Seen",)])
        self.assertNothingWritten(["INBOX"])


class TextTests(SynchronousTestCase):
    """
    The text table of C{imapmig plan}.
    """

    def test_table(self) -> None:
        """
        One row per folder with counts, sizes, mailbox (new ones marked),
        why, migrated and to copy; then the mailboxes to create and the
        totals.
        """
        from imapmig.mail.folders import PersonalNamespace
        from imapmig.commands.plan import FolderPlan

        plan = JobPlan(
            JOB,
            PersonalNamespace("", "/"),
            (
                FolderPlan("INBOX", None, 3, 3000, "INBOX", "name", True, 1, 2, 2000),
                FolderPlan("Sent Items", "\\Sent", 1, 2_500_000, "Sent", "special-use", True,
                           0, 1, 2_500_000),
                FolderPlan("Junk", None, 4, 40, None, "excluded", False, 0, 0, 0),
                FolderPlan("New", None, 0, 0, "New", "name", False, 0, 0, 0),
            ),
            (("New", None),),
            ("New",),
        )  # fmt: skip
        out = io.StringIO()
        _writePlan(plan, out)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "  destination namespace: prefix '', delimiter '/'")
        self.assertEqual(lines[1].split(), ["folder", "messages", "size", "mailbox", "how",
                                            "migrated", "to", "copy"])  # fmt: skip
        self.assertEqual(lines[2].split(), ["INBOX", "3", "2.93", "KiB", "INBOX", "name", "1",
                                            "2", "(1.95", "KiB)"])  # fmt: skip
        self.assertIn("Sent Items (\\Sent)", lines[3])
        self.assertIn("special-use", lines[3])
        self.assertIn("left out by the folder rules", lines[4])
        self.assertIn("New (new)", lines[5])
        self.assertEqual(lines[6], "  would create New")
        self.assertEqual(lines[7], "  would subscribe New")
        self.assertEqual(
            lines[8],
            "  total: 4 messages (2.39 MiB) in 3 folders (1 left out): 1 migrated, 3 to copy"
            " (2.39 MiB); 1 mailbox to create",
        )
        self.assertEqual(
            plan.toJSON()["create"], [{"mailbox": "New", "special_use": None}]
        )
