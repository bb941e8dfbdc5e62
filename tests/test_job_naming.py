# -*- test-case-name: tests.test_job_naming -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests that a job names every message it does not migrate with the
Message-ID, Date, From and Subject of its header (L{imapmig.job.naming}),
including those that failed before their body was read, and reads no
header of a message it appends.
"""

from __future__ import annotations

import os

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings
from imapmig.job.naming import nameFailures
from imapmig.job.recording import OutcomeRecorder
from imapmig.mail.message import UnreadableMessage
from imapmig.progress import MigrationProgress
from imapmig.sources import IMessageSource
from imapmig.sources.eml import EmlDirectorySource
from imapmig.sources.messagefile import LARGE_MESSAGE
from imapmig.sources.maildir import MaildirSource
from imapmig.sources.mbox import MboxSource
from imapmig.state import MessageNames, MessageOutcome
from imapmig.state.memory import MemoryStateStore
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES
from tests.test_job import JOB, JobHarness


def message(n: int, padding: int = 0) -> bytes:
    """
    A message with every name, its Subject RFC 2047-encoded, its body
    padded to make it large.
    """
    return (
        b"Message-ID: <m%d@example.com>\r\n"
        b"Date: Tue, 3 Mar 2020 10:00:00 +0100\r\n"
        b"From: =?utf-8?q?J=C3=B6rg?= <j@example.com>\r\n"
        b"Subject: =?utf-8?b?R3LDvMOfZQ==?= %d\r\n"
        b"\r\n" % (n, n)
    ) + b"x" * padding + b"\r\n"


def names(n: int) -> MessageNames:
    """
    The names of L{message}C{(n)}.
    """
    return MessageNames(
        f"<m{n}@example.com>",
        "Tue, 3 Mar 2020 10:00:00 +0100",
        "Jörg <j@example.com>",
        f"Grüße {n}",
    )


class JobNamingTests(SynchronousTestCase):
    """
    The failures a job records carry their messages' names.
    """

    def migrate(
        self, harness: JobHarness, settings: JobSettings = JobSettings(connections=1)
    ) -> dict[str, MessageNames]:
        """
        Run a job; the names of its failures by message key.
        """
        self.assertTrue(harness.run(harness.job(settings, identity="off")))
        harness.finish()
        return {
            f.messageKey: MessageNames(f.messageId, f.date, f.sender, f.subject)
            for f in self.successResultOf(harness.store.failures(JOB))
        }

    def test_tooLargeNamed(self) -> None:
        """
        A message listed larger than the destination's APPENDLIMIT, which
        fails before its body is read, is named from its header once the
        copying is over; the messages appended are read once each.
        """
        harness = JobHarness(self, capabilities=DEFAULT_CAPABILITIES + ("APPENDLIMIT=999",))
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m1", message(1))
        harness.source.add(inbox, "m2", message(2, 2000))
        harness.source.add(inbox, "m3", message(3))
        self.assertEqual(self.migrate(harness), {"m2": names(2)})
        self.assertEqual(sorted(harness.source.keysRead), ["m1", "m2", "m3"])

    def test_namedAfterRetry(self) -> None:
        """
        A message that failed in an attempt that then lost its connection
        is named by the attempt that completes.
        """
        harness = JobHarness(
            self, capabilities=DEFAULT_CAPABILITIES + ("APPENDLIMIT=999",), dropAfterAppends=1
        )
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m1", message(1))
        harness.source.add(inbox, "m2", message(2, 2000))
        harness.source.add(inbox, "m3", message(3))
        harness.source.add(inbox, "m4", message(4))
        settings = JobSettings(connections=1, batchMessages=1, windowMessages=3)
        self.assertEqual(self.migrate(harness, settings), {"m2": names(2)})
        self.assertGreater(harness.progress.reconnects, 0)

    def test_refusedNamed(self) -> None:
        """
        A message the server refuses is named from the body that was sent.
        """
        refused = message(2)
        harness = JobHarness(self, refuse=lambda b: "NO [LIMIT] no" if b == refused else None)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m1", message(1))
        harness.source.add(inbox, "m2", refused)
        self.assertEqual(self.migrate(harness), {"m2": names(2)})
        self.assertEqual(harness.source.keysRead, ["m1", "m2"])

    def test_unreadableUnnamed(self) -> None:
        """
        A message whose file cannot be read stays unnamed, and the job
        completes.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "bad", UnreadableMessage("permission denied"))
        harness.source.add(inbox, "m1", message(1))
        self.assertEqual(self.migrate(harness), {"bad": MessageNames()})

    def test_nothingFailedNothingRead(self) -> None:
        """
        When every message is appended, no message is read twice.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        for n in range(5):
            harness.source.add(inbox, f"m{n}", message(n))
        self.assertEqual(self.migrate(harness), {})
        self.assertEqual(harness.source.keysRead, [f"m{n}" for n in range(5)])


class LocalSourceNamingTests(SynchronousTestCase):
    """
    L{nameFailures} reads the names of failed messages from each local
    source type's files: Maildir, mbox, eml (a large message streamed, its
    start alone read).
    """

    def nameAll(self, source: IMessageSource) -> dict[str, MessageNames]:
        """
        List C{source}, record each of its messages as failed without its
        names, name them, and return the names recorded by key.
        """
        store = MemoryStateStore()
        recorder = OutcomeRecorder(
            JOB, store, MigrationProgress(Clock().seconds).addJob(JOB), Clock(), 1000, 1.0
        )
        listed = []
        for folder in self.successResultOf(source.listFolders()):
            messages = self.successResultOf(source.listMessages(folder))
            listed.append((folder, messages, ()))
            for message in messages:
                recorder.add(
                    MessageOutcome(folder.key, message.key, "INBOX", message.size, failure="x"),
                    named=False,
                )
        self.successResultOf(
            Deferred.fromCoroutine(nameFailures(JOB, source, store, recorder, listed))
        )
        self.assertEqual(recorder.unnamed, [])
        return {
            f.messageKey: MessageNames(f.messageId, f.date, f.sender, f.subject)
            for f in self.successResultOf(store.failures(JOB))
        }

    def test_maildir(self) -> None:
        """
        Maildir: each file's header, a large one's (streamed) included.
        """
        root = self.mktemp()
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(root, sub))
        for n, padding in ((1, 0), (2, 3 * LARGE_MESSAGE)):
            with open(os.path.join(root, "cur", f"17000000{n}.M1P1.h:2,S"), "wb") as f:
                f.write(message(n, padding).replace(b"\r\n", b"\n"))
        self.assertEqual(sorted(self.nameAll(MaildirSource(root)).values(), key=repr),
                         sorted([names(1), names(2)], key=repr))  # fmt: skip

    def test_mbox(self) -> None:
        """
        mbox: each message's header within the file.
        """
        path = self.mktemp()
        with open(path, "wb") as f:
            for n in (1, 2):
                f.write(b"From sender@example.com Tue Mar  3 10:00:00 2020\n")
                f.write(message(n).replace(b"\r\n", b"\n") + b"\n")
        self.assertEqual(sorted(self.nameAll(MboxSource(path)).values(), key=repr),
                         sorted([names(1), names(2)], key=repr))  # fmt: skip

    def test_eml(self) -> None:
        """
        eml: each file's header.
        """
        root = self.mktemp()
        os.makedirs(root)
        with open(os.path.join(root, "one.eml"), "wb") as f:
            f.write(message(1))
        self.assertEqual(list(self.nameAll(EmlDirectorySource(root, ("Archive",))).values()),
                         [names(1)])  # fmt: skip
