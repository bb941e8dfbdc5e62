"""
Tests for the overall ETA of L{MigrationProgress.summary} when a job ends
without ever being counted.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.machine import JobMachine
from imapmig.progress import MigrationProgress, ProgressSampler
from tests.test_progress import running, settle


class UncountedEndedJobTests(SynchronousTestCase):
    """
    A job that ended before it was counted (it could not log in, or the
    admin cancelled it while queued) never will be: the overall ETA covers
    the other jobs instead of staying unknown for the rest of the run.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.sampler = ProgressSampler(self.progress, self.clock)
        self.a = self.progress.addJob("a")
        self.sampler.startService()
        self.a.census(1000, 100_000, 1, [])
        running(self.a, self.clock)
        for _ in range(6):
            settle(self.a, 20, 2_000)
            self.clock.advance(10)
        self.pending = 1000 - self.a.messagesDone

    def tearDown(self) -> None:
        self.sampler.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def eta(self) -> object:
        """
        The overall C{eta_seconds} of the summary now.
        """
        totals = self.progress.summary()["totals"]
        assert isinstance(totals, dict)
        return totals["eta_seconds"]

    def test_failedUncounted(self) -> None:
        """
        A job that failed before listing its source leaves the overall
        ETA that of the other jobs; while it is queued, it is unknown.
        """
        b = self.progress.addJob("b")
        self.assertIsNone(self.eta())
        lifecycle = JobMachine(b.name, b, self.clock)
        lifecycle.start()
        lifecycle.fail("LOGIN failed: authentication failed")
        self.assertFalse(b.counted)
        self.assertEqual(self.eta(), round(self.pending / 2.0, 1))

    def test_cancelledUncounted(self) -> None:
        """
        A queued job cancelled before it was counted leaves the overall
        ETA that of the other jobs.
        """
        b = self.progress.addJob("b")
        JobMachine(b.name, b, self.clock).cancel("alice")
        self.assertEqual(self.eta(), round(self.pending / 2.0, 1))
