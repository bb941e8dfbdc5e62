"""
Tests for L{imapmig.job.retry}: a job's retry settings and the waits
between its attempts; and what a failed attempt leaves alive.
"""

from __future__ import annotations

import gc
from typing import Callable

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings
from imapmig.job.retry import RetryPolicy
from imapmig.mail.message import SourceMessage
from imapmig.sources.imap import IMAPSource
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore

from tests.test_job import PASSWORD, USER, JobHarness, MemoryEndpoint, body, memoryOpener


class RetryPolicyTests(SynchronousTestCase):
    """
    L{RetryPolicy.delays} backs off exponentially, bounded, with jitter.
    """

    def test_defaults(self) -> None:
        """
        By default a job gives up after 10 attempts that migrate nothing,
        waits 1 s first and at most 300 s, and pauses an hour when over
        quota.
        """
        policy = RetryPolicy()
        self.assertEqual(
            (policy.attempts, policy.initialDelay, policy.maxDelay, policy.factor),
            (10, 1.0, 300.0, 2.0),
        )
        self.assertEqual((policy.messageAttempts, policy.pause), (3, 3600.0))

    def test_exponentialAndBounded(self) -> None:
        """
        Without jitter, the waits double from C{initialDelay} and stop
        growing at C{maxDelay}.
        """
        delays = RetryPolicy(initialDelay=1.0, maxDelay=20.0).delays(jitter=lambda: 0.0)
        self.assertEqual([delays(n) for n in range(7)], [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0])

    def test_factor(self) -> None:
        """
        C{factor} is how the wait grows from one attempt to the next.
        """
        delays = RetryPolicy(initialDelay=2.0, factor=3.0, maxDelay=1000.0).delays(
            jitter=lambda: 0.0
        )
        self.assertEqual([delays(n) for n in range(4)], [2.0, 6.0, 18.0, 54.0])

    def test_jitter(self) -> None:
        """
        The jitter (up to a second) is added to each wait, so that jobs
        failing together do not come back together; the bound applies
        before it.
        """
        delays = RetryPolicy(initialDelay=1.0, maxDelay=4.0).delays(jitter=lambda: 0.5)
        self.assertEqual([delays(n) for n in range(4)], [1.5, 2.5, 4.5, 4.5])

    def test_frozen(self) -> None:
        """
        A policy is a value: it cannot be changed once made.
        """
        policy = RetryPolicy()
        with self.assertRaises(Exception):
            policy.attempts = 3  # type: ignore[misc]


def _listedAlive() -> int:
    """
    How many L{SourceMessage}s are alive, garbage collected first.
    """
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, SourceMessage))


class _DropsOnRead(FakeIMAPServer):
    """
    A source server that closes the connection, cleanly, on the first
    body read of each of the first C{drops} connections (after their
    listing), counting the listed messages alive when it does.
    """

    def __init__(self, mail: FakeMailStore, drops: int, alive: list[int]) -> None:
        super().__init__(mail, DEFAULT_CAPABILITIES)
        self._drops = drops
        self._alive = alive

    def _uidFetch(self, tag: bytes, uidSet: bytes, items: bytes) -> None:
        if b"BODY" in items.upper() and len(self._alive) < self._drops:
            self._alive.append(_listedAlive())
            self._close()
            return
        super()._uidFetch(tag, uidSet, items)


class FailedAttemptsLeftAliveTests(SynchronousTestCase):
    """
    A job whose IMAP source's connection closes after each listing lists
    again at each attempt; what an attempt listed dies with it.
    """

    def test_listingsDoNotAccumulate(self) -> None:
        """
        After five attempts ended by the source closing its connection
        (as Dovecot's imap process dying does), as many listed messages
        are alive at the fifth as at the first (one listing: neither
        Twisted's shared C{ConnectionDone}, which once gathered each
        attempt's frames on its traceback, nor the attempt loop, which
        held the last attempt's error through the next, keeps an earlier
        one), and none once the job has copied everything.
        """
        harness = JobHarness(self)
        mail = FakeMailStore({USER: PASSWORD})
        mail.append(USER, "INBOX", [(body(n), (), None) for n in range(300)])
        alive: list[int] = []
        source = MemoryEndpoint(harness.clock, lambda attempt: _DropsOnRead(mail, 5, alive))
        harness.source = IMAPSource(memoryOpener(source, harness.clock), job="job")  # type: ignore[assignment]
        destination = harness.endpoint.pump

        def pump(until: Callable[[], bool] = lambda: False) -> None:
            # Each side's bytes move the other's: both, until both are quiet.
            for _ in range(100):
                destination(until)
                source.pump(until)

        harness.endpoint.pump = pump  # type: ignore[method-assign]
        self.assertTrue(harness.run(harness.job(retry=RetryPolicy(attempts=100))))
        # The first in line at each drop is recorded as failed at its third
        # strike; every other message is copied once.
        harness.assertHolds("INBOX", range(1, 300))
        self.assertEqual(harness.progress.messagesFailed, 1)
        self.assertEqual(len(alive), 5)
        self.assertEqual(alive[4], alive[0])
        self.assertEqual(_listedAlive(), 0)
