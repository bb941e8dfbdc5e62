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

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings
from imapmig.message import UnreadableMessage
from imapmig.state import MessageNames
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

    def migrate(self, harness: JobHarness) -> dict[str, MessageNames]:
        """
        Run a job; the names of its failures by message key.
        """
        self.assertTrue(harness.run(harness.job(JobSettings(connections=1))))
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
