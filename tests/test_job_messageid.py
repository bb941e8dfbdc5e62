# -*- test-case-name: tests.test_job_messageid -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests that a job records the Message-ID of each message it does not copy
(refused, too large, not sendable, already present), for the audit
manifest, and none for those it appends.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings
from imapmig.mail.message import UnreadableMessage
from imapmig.mail.messagenames import namesOfBody
from imapmig.state import MESSAGE_ID_LENGTH
from tests.test_job import USER, JobHarness


def withId(messageId: bytes, n: int, extra: bytes = b"") -> bytes:
    """
    A small message with the Message-ID C{messageId}.
    """
    return b"Subject: %d\r\nMessage-ID: %s\r\n\r\nHello %d.%s\r\n" % (n, messageId, n, extra)


class JobMessageIdTests(SynchronousTestCase):
    """
    A job's outcomes carry the Message-IDs of the messages not copied.
    """

    def test_refused(self) -> None:
        """
        A message the server refuses is recorded with its Message-ID; the
        appended ones with none.
        """
        refused = withId(b"<refused@example.com>", 1)
        harness = JobHarness(
            self, refuse=lambda b: "NO [LIMIT] no" if b == refused else None
        )
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m0", withId(b"<ok@example.com>", 0))
        harness.source.add(inbox, "m1", refused)
        self.assertTrue(harness.run(harness.job(JobSettings(connections=1, batchMessages=2))))
        outcomes = harness.store.outcomes()
        self.assertEqual(outcomes["INBOX", "m1"].messageId, "<refused@example.com>")
        self.assertIsNotNone(outcomes["INBOX", "m1"].failure)
        self.assertIsNone(outcomes["INBOX", "m0"].messageId)
        harness.finish()

    def test_alreadyPresent(self) -> None:
        """
        A message found already in the destination is recorded with its
        Message-ID.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        first = withId(b"<present@example.com>", 1)
        harness.mail.append(USER, "INBOX", [(first, (), None)])
        harness.source.add(inbox, "m1", first)
        harness.source.add(inbox, "m2", withId(b"<new@example.com>", 2))
        self.assertTrue(harness.run(harness.job()))
        outcomes = harness.store.outcomes()
        self.assertTrue(outcomes["INBOX", "m1"].alreadyPresent)
        self.assertEqual(outcomes["INBOX", "m1"].messageId, "<present@example.com>")
        self.assertIsNone(outcomes["INBOX", "m2"].messageId)
        harness.finish()

    def test_notSendable(self) -> None:
        """
        A message that cannot be sent (NUL octets without BINARY) is
        recorded with its Message-ID; an unreadable one, whose header was
        never read, with none.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "nul", withId(b"<nul@example.com>", 1, b"\0"))
        harness.source.add(inbox, "bad", UnreadableMessage("permission denied"))
        self.assertTrue(harness.run(harness.job()))
        outcomes = harness.store.outcomes()
        self.assertIn("NUL", outcomes["INBOX", "nul"].failure or "")
        self.assertEqual(outcomes["INBOX", "nul"].messageId, "<nul@example.com>")
        self.assertIsNone(outcomes["INBOX", "bad"].messageId)
        harness.finish()


class NamesOfBodyMessageIdTests(SynchronousTestCase):
    """
    L{namesOfBody} reads the Message-ID from the header alone.
    """

    def test_header(self) -> None:
        """
        The Message-ID, unfolded, from the header; none when the header has
        none, even if the body holds a line like one.
        """
        folded = b"Subject: x\r\nMessage-ID:\r\n <folded@example.com>\r\n\r\nbody\r\n"
        self.assertEqual(namesOfBody(folded).messageId, "<folded@example.com>")
        inBody = b"Subject: x\r\n\r\nMessage-ID: <not@header>\r\n"
        self.assertIsNone(namesOfBody(inBody).messageId)

    def test_cut(self) -> None:
        """
        A Message-ID longer than L{MESSAGE_ID_LENGTH} is cut to it, and
        octets that are not UTF-8 are replaced.
        """
        long = b"<" + b"a" * 5000 + b">"
        self.assertEqual(len(namesOfBody(withId(long, 1)).messageId or ""), MESSAGE_ID_LENGTH)
        self.assertEqual(namesOfBody(withId(b"<\xff@x>", 1)).messageId, "<\ufffd@x>")
