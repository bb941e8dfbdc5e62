"""
Tests for L{imapmig.job.lifecycle} and L{imapmig.job.retry}: the job's state
machine, its waits on the clock, and the retry policy.
"""

from __future__ import annotations

from automat import NoTransition
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobLifecycle, RetryPolicy
from imapmig.progress import JobProgress, JobState


class LifecycleTests(SynchronousTestCase):
    """
    L{JobLifecycle}: the states a job goes through, shown by its progress.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.progress = JobProgress("j", self.clock.seconds)
        self.lifecycle = JobLifecycle(self.progress, self.clock)

    def test_happyPath(self) -> None:
        """
        Queued, connecting, running, done; a finished job may start again.
        """
        lifecycle, progress = self.lifecycle, self.progress
        self.assertIs(progress.state, JobState.QUEUED)
        lifecycle.start()
        self.assertIs(progress.state, JobState.CONNECTING)
        lifecycle.connected()
        self.assertIs(progress.state, JobState.RUNNING)
        lifecycle.succeed()
        self.assertIs(progress.state, JobState.DONE)
        self.assertIsNone(progress.error)
        lifecycle.start()
        self.assertIs(progress.state, JobState.CONNECTING)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_failed(self) -> None:
        """
        A failed job shows its reason, which a new start clears.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.fail("boom")
        self.assertEqual((progress.state, progress.error), (JobState.FAILED, "boom"))
        lifecycle.start()
        self.assertEqual((progress.state, progress.error), (JobState.CONNECTING, None))

    def test_backOff(self) -> None:
        """
        Backing off shows why and until when; its wait fires on the clock,
        then the job connects again.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.connected()
        self.clock.advance(100)
        lifecycle.backOff("connection lost", 4.0)
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.retryAt),
            (JobState.BACKING_OFF, "connection lost", 104.0),
        )
        waited = lifecycle.waited()
        self.clock.advance(3.9)
        self.assertNoResult(waited)
        self.clock.advance(0.1)
        self.successResultOf(waited)
        lifecycle.retry()
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.retryAt),
            (JobState.CONNECTING, None, None),
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pause(self) -> None:
        """
        A paused job shows why; its wait fires on the clock.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.pause("over quota", 3600)
        self.assertEqual((progress.state, progress.waitingFor), (JobState.PAUSED, "over quota"))
        waited = lifecycle.waited()
        self.clock.advance(3600)
        self.successResultOf(waited)
        lifecycle.retry()
        self.assertIs(progress.state, JobState.CONNECTING)

    def test_defer(self) -> None:
        """
        A deferred job shows paused, why and until when, without a timer
        of its own; a stop leaves it so; it may start again, which clears
        the wait.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.defer("daily budget", 5000.0)
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.retryAt),
            (JobState.PAUSED, "daily budget", 5000.0),
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])
        lifecycle.stop()
        self.assertIs(progress.state, JobState.PAUSED)
        lifecycle.start()
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.retryAt),
            (JobState.CONNECTING, None, None),
        )

    def test_stopWhileWaiting(self) -> None:
        """
        Stopping a job that backs off cancels its wait at once: it is
        stopped, and nothing is left on the clock.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.backOff("connection lost", 60)
        waited = lifecycle.waited()
        lifecycle.stop()
        self.failureResultOf(waited, CancelledError)
        self.assertEqual(
            (progress.state, progress.error), (JobState.STOPPED, "stopped before the end")
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopWhileRunning(self) -> None:
        """
        Stopping a running job: stopping until it says it has stopped.
        """
        lifecycle, progress = self.lifecycle, self.progress
        lifecycle.start()
        lifecycle.connected()
        lifecycle.stop()
        self.assertIs(progress.state, JobState.STOPPING)
        lifecycle.stop()
        self.assertIs(progress.state, JobState.STOPPING)
        lifecycle.stopped()
        self.assertIs(progress.state, JobState.STOPPED)
        lifecycle.start()
        self.assertIs(progress.state, JobState.CONNECTING)

    def test_failWhileWaiting(self) -> None:
        """
        A job that fails while it waits drops its timer.
        """
        self.lifecycle.start()
        self.lifecycle.backOff("connection lost", 60)
        waited = self.lifecycle.waited()
        self.lifecycle.fail("gave up")
        self.failureResultOf(waited, CancelledError)
        self.assertIs(self.progress.state, JobState.FAILED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noSuccessWhileWaiting(self) -> None:
        """
        Inputs that make no sense in a state are refused, not ignored.
        """
        self.lifecycle.start()
        self.lifecycle.backOff("connection lost", 1)
        self.assertRaises(NoTransition, self.lifecycle.succeed)
        self.assertRaises(NoTransition, self.lifecycle.connected)
        self.clock.advance(1)


class RetryPolicyTests(SynchronousTestCase):
    """
    L{RetryPolicy.delays}: exponential, capped, with jitter.
    """

    def test_delays(self) -> None:
        """
        1, 2, 4, ... seconds, capped at C{maxDelay}, plus the jitter.
        """
        delays = RetryPolicy(initialDelay=1, maxDelay=10, factor=2).delays(lambda: 0.5)
        self.assertEqual([delays(n) for n in range(6)], [1.5, 2.5, 4.5, 8.5, 10.5, 10.5])
