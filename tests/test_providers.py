# -*- test-case-name: tests.test_providers -*-
"""
Provider-shaped servers, scripted: Microsoft 365's and Gmail's throttling
replies and dropped sessions, against the fake server in each provider's
shape, on a L{Clock}.  The job backs off or pauses as the server asks
(L{imapmig.imap.signals}, L{imapmig.job.retry}) and then completes, each
message once.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.progress import JobState
from tests.test_job import JobHarness, populate
from tests.test_sources_labelviews import (
    EXPECTED,
    GMAIL_CAPABILITIES,
    GMAIL_USER,
    GmailAccount,
    _populate,
    destinationOf,
)

MICROSOFT365_CAPABILITIES = (
    "IMAP4rev1", "AUTH=PLAIN", "SASL-IR", "UIDPLUS", "ID", "UNSELECT", "CHILDREN",
    "IDLE", "NAMESPACE", "LITERAL+",
)  # fmt: skip
"""
What Exchange Online advertises after login (AUTH=XOAUTH2 aside, which the
fake does not speak; AUTH=PLAIN stands in for it): LITERAL+, no
MULTIAPPEND, no COMPRESS, no APPENDLIMIT.
"""

GMAIL_DESTINATION_CAPABILITIES = GMAIL_CAPABILITIES + ("APPENDLIMIT=35651584",)

THROTTLED = "NO Request is throttled. Suggested Backoff Time: 299609 milliseconds"
OVERQUOTA = "NO [OVERQUOTA] Account exceeded command or bandwidth limits"


def refuseTimes(reply: str, times: int) -> Callable[[bytes], str | None]:
    """
    A C{refuse} callback for L{FakeIMAPServer} that answers the first
    C{times} messages with C{reply}.
    """
    left = [times]

    def refuse(body: bytes) -> str | None:
        if left[0] > 0:
            left[0] -= 1
            return reply
        return None

    return refuse


class ThrottledDestinationTests(SynchronousTestCase):
    """
    A destination that throttles: the job waits as told, then completes.
    """

    def migrate(self, harness: JobHarness, count: int) -> tuple[Deferred[bool], list[str]]:
        """
        Start a job copying C{count} messages into INBOX.
        """
        inbox = harness.source.addFolder("INBOX")
        populate(harness.source, inbox, count)
        with capturedLogs() as events:
            d = harness.start(harness.job())
        return d, [formatEvent(e) for e in events]

    def test_microsoftSuggestedBackoff(self) -> None:
        """
        Microsoft 365's C{NO Request is throttled. Suggested Backoff Time:
        299609 milliseconds} makes the job back off for 299.609 s, then
        go on; every message lands once.
        """
        harness = JobHarness(self, MICROSOFT365_CAPABILITIES, refuse=refuseTimes(THROTTLED, 1))
        d, logged = self.migrate(harness, 20)
        self.assertNoResult(d)
        progress = harness.progress
        self.assertEqual(progress.state, JobState.BACKING_OFF)
        assert progress.retryAt is not None
        self.assertAlmostEqual(progress.retryAt - harness.clock.seconds(), 299.609)
        self.assertTrue(any("connecting again in 299.6 s" in line for line in logged), logged)
        harness.clock.advance(299.0)
        harness.settle()
        self.assertEqual(progress.state, JobState.BACKING_OFF)
        harness.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        harness.assertHolds("INBOX", range(20))
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (20, 0))
        self.assertGreaterEqual(harness.clock.seconds(), 299.609)
        harness.endpoint.pump()
        harness.finish()

    def test_gmailOverQuota(self) -> None:
        """
        Gmail's C{[OVERQUOTA] Account exceeded command or bandwidth limits}
        pauses the job, paused by the server (an hour, the retry policy's
        pause), then it goes on; every message lands once.
        """
        harness = JobHarness(
            self, GMAIL_DESTINATION_CAPABILITIES, refuse=refuseTimes(OVERQUOTA, 1)
        )
        d, logged = self.migrate(harness, 20)
        progress = harness.progress
        self.assertEqual(progress.state, JobState.PAUSED_BY_SERVER)
        assert progress.retryAt is not None
        self.assertEqual(progress.retryAt - harness.clock.seconds(), 3600.0)
        self.assertTrue(any("pausing in 3600.0 s" in line for line in logged), logged)
        harness.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        harness.assertHolds("INBOX", range(20))
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (20, 0))
        harness.endpoint.pump()
        harness.finish()

    def test_gmailDropsTheSession(self) -> None:
        """
        Gmail dropping the session (over its limits it may close the
        connection without a word) makes the job connect again; every
        message lands once, with synchronizing literals where LITERAL-
        forbids the others.
        """
        harness = JobHarness(self, GMAIL_DESTINATION_CAPABILITIES, dropAfterAppends=3)
        inbox = harness.source.addFolder("INBOX")
        populate(harness.source, inbox, 8)
        harness.source.add(inbox, "large", b"Subject: large\r\n\r\n" + b"y" * 5000 + b"\r\n")
        self.assertTrue(harness.run(harness.job()))
        self.assertGreater(harness.progress.reconnects, 0)
        self.assertEqual((harness.progress.messagesDone, harness.progress.messagesFailed), (9, 0))
        stored = sorted(m.body for m in harness.mail.mailbox("alice", "INBOX"))
        self.assertEqual(len(stored), len(set(stored)))
        self.assertEqual(len(stored), 9)
        harness.finish()


class ThrottledSourceTests(SynchronousTestCase):
    """
    A Gmail source over its download limit: the job pauses, then completes.
    """

    def test_gmailSourceOverQuota(self) -> None:
        """
        C{NO [OVERQUOTA]} to a body fetch from the Gmail source pauses the
        job for an hour; it then completes, label views de-duplicated, each
        message once.
        """
        account = GmailAccount(self)
        _populate(account)
        refused: list[bytes] = []

        def refuseFetch(user: str, items: bytes) -> bytes | None:
            if user == GMAIL_USER and b"BODY.PEEK[]" in items and not refused:
                refused.append(items)
                return OVERQUOTA.encode("ascii")
            return None

        account.mail.refuseFetch = refuseFetch
        harness = account.harness
        d = harness.start(account.job(account.source()))
        self.assertEqual(harness.progress.state, JobState.PAUSED_BY_SERVER)
        harness.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        self.assertEqual(len(refused), 1)
        self.assertEqual(destinationOf(account), EXPECTED)
        self.assertGreaterEqual(harness.clock.seconds(), 3600.0)
        harness.endpoint.pump()
        harness.finish()
