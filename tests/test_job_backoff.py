"""
Tests for L{imapmig.job.backoff}: what a job's run does when an attempt
ends early (fail, back off, give up), and the strikes of messages first in
line when a connection failed.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import ConnectFailed, ConnectionLost, PermanentError, ServerBusy
from imapmig.job import JobMachine, RetryPolicy
from imapmig.job.attempt import RunStop
from imapmig.job.backoff import RunRetries
from imapmig.job.sides import JobSides
from imapmig.log.logfields import AccountName
from imapmig.progress import JobProgress, JobState
from imapmig.state.memory import MemoryStateStore
from tests.test_job import MemorySource


class RunRetriesTests(SynchronousTestCase):
    """
    L{RunRetries}: a run's decisions after a failed attempt, on a L{Clock}
    and without jitter.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.progress = JobProgress("j", self.clock.seconds)
        self.lifecycle = JobMachine(self.progress.name, self.progress, self.clock)
        self.store = MemoryStateStore(self.clock.seconds)
        self.stop = RunStop()

    def retries(self, policy: RetryPolicy) -> RunRetries:
        retries = RunRetries(
            "j",
            AccountName("local", "alice", "tcp:localhost:143"),
            self.store,
            self.progress,
            self.clock,
            self.lifecycle,
            JobSides(MemorySource(), None, None),
            policy,
            lambda: 0.0,
            False,
            self.stop,
        )
        retries.startRun()
        self.lifecycle.start()
        return retries

    def afterFailure(
        self, retries: RunRetries, error: BaseException, progressed: bool = False
    ) -> Deferred[bool]:
        return Deferred.fromCoroutine(retries.afterFailure(error, progressed))

    def test_permanentFails(self) -> None:
        """
        A permanent error fails the job at once, with its reason shown and
        recorded in the state store.
        """
        retries = self.retries(RetryPolicy())
        self.assertFalse(self.successResultOf(self.afterFailure(retries, PermanentError("no"))))
        self.assertEqual((self.progress.state, self.progress.error), (JobState.FAILED, "no"))
        self.assertEqual(self.successResultOf(self.store.jobFailure("j")), "no")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_backsOff(self) -> None:
        """
        A transient error backs off for the policy's delay, then the job
        connects again, counted as a reconnection.
        """
        retries = self.retries(RetryPolicy(initialDelay=2.0))
        waiting = self.afterFailure(retries, ConnectionLost("lost"))
        self.assertIs(self.progress.state, JobState.BACKING_OFF)
        self.clock.advance(1.9)
        self.assertNoResult(waiting)
        self.clock.advance(0.1)
        self.assertTrue(self.successResultOf(waiting))
        self.assertIs(self.progress.state, JobState.CONNECTING)
        self.assertEqual(self.progress.reconnects, 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_logLine(self) -> None:
        """
        The backoff's line says why, how long and which attempt, in the
        namespace of the job's other events (L{imapmig.job.migration}),
        from which the journal's C{MESSAGE_ID} is made.
        """
        retries = self.retries(RetryPolicy(initialDelay=2.0, attempts=5))
        with capturedLogs() as events:
            waiting = self.afterFailure(retries, ConnectionLost("lost."))
        self.clock.advance(2.0)
        self.successResultOf(waiting)
        self.assertEqual(
            [(e["log_namespace"], formatEvent(e)) for e in events],
            [
                (
                    "imapmig.job.migration",
                    "Job j: lost; connecting again in 2.0 s, at 1970-01-01 00:00:02 UTC"
                    " (attempt 1 of 5 without progress)",
                )
            ],
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_firstConnectionNamesEndpoint(self) -> None:
        """
        The first failure of a job's first connection is a warning, at
        once, naming the setting that holds the endpoint and how to try it
        without waiting; the failures after it, and a failure after the
        job connected once, add no such line.
        """
        retries = self.retries(RetryPolicy(initialDelay=2.0, attempts=5))
        refused = ConnectFailed(
            "alice at tcp:localhost:1: cannot connect: connection refused",
            "connection refused",
            "servers.dest.endpoint",
        )
        with capturedLogs() as events:
            waiting = self.afterFailure(retries, refused)
        hints = [formatEvent(e) for e in events if "servers.dest.endpoint" in formatEvent(e)]
        self.assertEqual(
            hints,
            [
                "Job j: cannot connect (connection refused); check servers.dest.endpoint in the"
                " configuration (`imapmig plan --config FILE` or `imapmig-daemon --config FILE"
                " --check-config --connect` tries it at once); retrying meanwhile"
            ],
        )
        self.assertEqual(events[0]["log_level"].name, "warn")
        self.clock.advance(2.0)
        self.successResultOf(waiting)
        with capturedLogs() as events:
            waiting = self.afterFailure(retries, refused)
        self.assertEqual([e for e in events if "check servers" in formatEvent(e)], [])
        self.clock.advance(4.0)
        self.successResultOf(waiting)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noHintOnceConnected(self) -> None:
        """
        A job that connected once and then cannot connect is a server
        down, not a wrong endpoint: no hint.
        """
        retries = self.retries(RetryPolicy(initialDelay=2.0))
        self.lifecycle.connected()
        with capturedLogs() as events:
            waiting = self.afterFailure(
                retries, ConnectFailed("cannot connect", "connection refused", "servers.d.endpoint")
            )
        self.assertEqual([e for e in events if "check servers" in formatEvent(e)], [])
        self.clock.advance(2.0)
        self.successResultOf(waiting)

    def test_attemptShown(self) -> None:
        """
        While a job backs off, its progress (and so C{/status.json}) says
        which attempt of how many failed, why, and when the next is; the
        counts clear when it connects again.
        """
        retries = self.retries(RetryPolicy(initialDelay=2.0, attempts=10))
        for attempt, wait in [(1, 2.0), (2, 4.0), (3, 8.0)]:
            waiting = self.afterFailure(retries, ConnectionLost("connection refused"))
            view = self.progress.snapshot()
            self.assertEqual(
                (view["retry_attempt"], view["retry_attempts"], view["waiting_for"], view["retry_at"]),
                (attempt, 10, "connection refused", self.clock.seconds() + wait),
            )
            self.clock.advance(wait)
            self.successResultOf(waiting)
        view = self.progress.snapshot()
        self.assertEqual((view["retry_attempt"], view["retry_attempts"]), (None, None))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_serverSaysHowLong(self) -> None:
        """
        A busy server's own delay is waited instead of the policy's.
        """
        retries = self.retries(RetryPolicy(initialDelay=1.0))
        waiting = self.afterFailure(retries, ServerBusy("busy", "busy", retryAfter=7.0))
        self.clock.advance(6.9)
        self.assertNoResult(waiting)
        self.clock.advance(0.1)
        self.assertTrue(self.successResultOf(waiting))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_givesUp(self) -> None:
        """
        Past the policy's attempts in a row that migrated nothing, each
        waited longer than the last, the job fails saying so and naming
        the last error.
        """
        retries = self.retries(RetryPolicy(attempts=2, initialDelay=1.0, factor=2.0))
        first = self.afterFailure(retries, ConnectionLost("lost"))
        self.clock.advance(1.0)
        self.assertTrue(self.successResultOf(first))
        second = self.afterFailure(retries, ConnectionLost("lost"))
        self.clock.advance(1.0)
        self.assertNoResult(second)
        self.clock.advance(1.0)
        self.assertTrue(self.successResultOf(second))
        self.assertFalse(self.successResultOf(self.afterFailure(retries, ConnectionLost("lost"))))
        self.assertEqual(
            (self.progress.state, self.progress.error),
            (
                JobState.FAILED,
                "gave up after 2 attempts in a row that migrated nothing; the last: lost",
            ),
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_progressCountsAgain(self) -> None:
        """
        An attempt that migrated something starts the count of fruitless
        attempts again, and the backoff from its first delay.
        """
        retries = self.retries(RetryPolicy(attempts=1, initialDelay=1.0, factor=2.0))
        first = self.afterFailure(retries, ConnectionLost("lost"))
        self.clock.advance(1.0)
        self.assertTrue(self.successResultOf(first))
        second = self.afterFailure(retries, ConnectionLost("lost"), progressed=True)
        self.clock.advance(1.0)
        self.assertTrue(self.successResultOf(second))
        self.assertFalse(self.successResultOf(self.afterFailure(retries, ConnectionLost("lost"))))
        self.assertIs(self.progress.state, JobState.FAILED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stoppedWhileWaiting(self) -> None:
        """
        A job stopped while it backs off (its run's stop asked, then its
        machine stopped, as a run's cancellation does) does not attempt
        again.
        """
        retries = self.retries(RetryPolicy(initialDelay=5.0))
        waiting = self.afterFailure(retries, ConnectionLost("lost"))
        self.stop.requested = True
        self.lifecycle.stop()
        self.assertFalse(self.successResultOf(waiting))
        self.assertIs(self.progress.state, JobState.STOPPED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_heldWhileWaiting(self) -> None:
        """
        A job paused by a control while it backs off (its machine moved,
        its run not yet told) does not attempt again, and its run's stop
        is marked asked: the run ends stopped, not failed; it ends once
        the machine's transition has returned.
        """
        retries = self.retries(RetryPolicy(initialDelay=5.0))
        waiting = self.afterFailure(retries, ConnectionLost("lost"))
        self.lifecycle.pause("admin")
        self.assertNoResult(waiting)
        self.clock.advance(0)
        self.assertFalse(self.successResultOf(waiting))
        self.assertTrue(self.stop.requested)
        self.assertIs(self.progress.state, JobState.PAUSED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_strikes(self) -> None:
        """
        A message first in line when connections failed is struck each
        time; at the policy's C{messageAttempts} the reason to record it as
        failed names the last failure.  A new run starts with no strike.
        """
        retries = self.retries(RetryPolicy(messageAttempts=2, initialDelay=1.0))
        waiting = self.afterFailure(retries, ConnectionLost("dropped"))
        self.clock.advance(1.0)
        self.assertTrue(self.successResultOf(waiting))
        self.assertIsNone(retries.strike("INBOX", "m1"))
        self.assertIsNone(retries.strike("INBOX", "m2"))
        self.assertEqual(
            retries.strike("INBOX", "m1"),
            "not stored after 2 attempts, each ended by a failed connection; the last: dropped",
        )
        retries.startRun()
        self.assertIsNone(retries.strike("INBOX", "m1"))
        self.assertEqual(self.clock.getDelayedCalls(), [])
