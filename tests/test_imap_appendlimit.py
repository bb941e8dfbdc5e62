# -*- test-case-name: tests.test_imap_appendlimit -*-
"""
Tests for L{imapmig.imap.appendlimit}, and for a job's refusal to send a
message larger than its destination accepts.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.appendlimit import advertisedAppendLimit, messageSizeLimit
from imapmig.job import JobSettings
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES
from tests.test_job import JOB, USER, JobHarness, appendLines, body


class AppendLimitTests(SynchronousTestCase):
    """
    L{advertisedAppendLimit} and L{messageSizeLimit}.
    """

    def test_advertised(self) -> None:
        """
        C{APPENDLIMIT=n} gives n; C{APPENDLIMIT} alone (per-mailbox
        limits), a value that is not a number, or none, give L{None}.
        """
        self.assertEqual(advertisedAppendLimit({b"IMAP4REV1", b"APPENDLIMIT=35651584"}), 35651584)
        self.assertIsNone(advertisedAppendLimit({b"APPENDLIMIT"}))
        self.assertIsNone(advertisedAppendLimit({b"APPENDLIMIT=X"}))
        self.assertIsNone(advertisedAppendLimit({b"IMAP4REV1"}))

    def test_smallerWins(self) -> None:
        """
        The smaller of APPENDLIMIT and the configured size is the limit,
        with where it comes from.
        """
        caps = {b"APPENDLIMIT=1000"}
        self.assertEqual(messageSizeLimit(caps, None), (1000, "the server's APPENDLIMIT"))
        self.assertEqual(messageSizeLimit(caps, 5000), (1000, "the server's APPENDLIMIT"))
        self.assertEqual(
            messageSizeLimit(caps, 500), (500, "the server's max_message_size setting")
        )
        self.assertEqual(
            messageSizeLimit(set(), 500), (500, "the server's max_message_size setting")
        )
        self.assertIsNone(messageSizeLimit(set(), None))


class JobSizeLimitTests(SynchronousTestCase):
    """
    A message larger than the destination accepts is recorded as failed,
    with the reason, and never sent; the others go.
    """

    def migrate(
        self,
        capabilities: tuple[str, ...],
        maxMessageBytes: int | None,
        listedSize: int | None = None,
    ) -> JobHarness:
        """
        Migrate messages 1 (small), 2 (1,000 octets; listed at
        C{listedSize} if given) and 3 (small) with C{capabilities} and
        C{maxMessageBytes}.
        """
        harness = JobHarness(self, capabilities=capabilities)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m1", body(1))
        harness.source.add(inbox, "m2", body(2, 1000), size=listedSize)
        harness.source.add(inbox, "m3", body(3))
        settings = JobSettings(connections=1, maxMessageBytes=maxMessageBytes)
        self.assertTrue(harness.run(harness.job(settings)))
        harness.finish()
        return harness

    def assertRefused(self, harness: JobHarness, reason: str) -> None:
        harness.assertHolds("INBOX", [1, 3])
        self.assertFalse(any(b"{1000" in line for line in appendLines(harness.endpoint.servers[0])))
        [failed] = self.successResultOf(harness.store.failures(JOB))
        self.assertEqual(failed.messageKey, "m2")
        assert failed.failure is not None
        self.assertIn(reason, failed.failure)
        self.assertEqual(harness.progress.messagesFailed, 1)

    def test_appendLimit(self) -> None:
        """
        The server's APPENDLIMIT is honoured.
        """
        harness = self.migrate(DEFAULT_CAPABILITIES + ("APPENDLIMIT=999",), None)
        self.assertRefused(
            harness, "1000 octets, larger than the 999 the destination accepts"
            " (the server's APPENDLIMIT); not sent"
        )

    def test_neverRead(self) -> None:
        """
        A message whose listed size is beyond the limit is recorded as
        failed before anything is read: its body is not fetched to be
        sent, only read once the copying is over, for the names in its
        header (L{imapmig.job.naming}).
        """
        harness = self.migrate(DEFAULT_CAPABILITIES + ("APPENDLIMIT=999",), None)
        self.assertEqual(harness.source.keysRead, ["m1", "m3", "m2"])
        [failed] = self.successResultOf(harness.store.failures(JOB))
        assert failed.failure is not None
        self.assertIn("listed at 1000 octets", failed.failure)

    def test_largerThanListed(self) -> None:
        """
        A message listed within the limit whose body, once read, is larger
        (the source converted it) is still refused, after the read.
        """
        harness = self.migrate(DEFAULT_CAPABILITIES + ("APPENDLIMIT=999",), None, 900)
        self.assertEqual(harness.source.keysRead, ["m1", "m2", "m3"])
        self.assertRefused(
            harness, "1000 octets, larger than the 999 the destination accepts"
            " (the server's APPENDLIMIT); not sent"
        )

    def test_configured(self) -> None:
        """
        The configured C{max_message_size} is honoured where the server
        advertises no smaller APPENDLIMIT.
        """
        harness = self.migrate(DEFAULT_CAPABILITIES + ("APPENDLIMIT=5000",), 999)
        self.assertRefused(harness, "(the server's max_message_size setting)")

    def test_withinLimits(self) -> None:
        """
        A message of exactly the limit goes.
        """
        harness = self.migrate(DEFAULT_CAPABILITIES + ("APPENDLIMIT=1000",), 1000)
        self.assertEqual(
            sorted(m.body for m in harness.mail.mailbox(USER, "INBOX")),
            sorted([body(1), body(2, 1000), body(3)]),
        )
        self.assertEqual(harness.progress.messagesFailed, 0)
