"""
Tests for the time left and the rates of L{MigrationProgress.summary}: when
a job ends without ever being counted; only jobs that can move count, a run
where nothing can move says why and until when instead of a time, a
finished run has no current rate, and the overall time left follows how
the scheduler runs the jobs (a number at once, in order) on a simulated
clock.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.machine import JobMachine
from imapmig.progress import JobState, MigrationProgress, ProgressSampler, Wait
from tests.simulatedrun import SimulatedRun
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


class TimeLeftTests(SynchronousTestCase):
    """
    The overall time left is the scheduler's, not one rate over every
    message left.
    """

    def assertWithin(self, samples: list[tuple[float, float, float | None]], end: float) -> None:
        """
        From 25 % done on, every sample's time left is within 20 % of the
        time really left (or a step of 10 s, near the end).
        """
        checked = 0
        for now, percent, eta in samples:
            left = end - now
            if percent < 25 or left <= 0:
                continue
            self.assertIsNotNone(eta, (now, percent))
            assert eta is not None
            self.assertLessEqual(
                abs(eta - left), max(0.2 * left, 10.0), f"at {percent} %: {eta} s left, really {left} s"
            )
            checked += 1
        self.assertGreater(checked, 10)

    def test_largestJobLast(self) -> None:
        """
        20 jobs, 4 at once at 10 messages a second each, the last ten times
        the size of the others: from 25 % on, the time left is within 20 %
        of the real end.  Before, one overall rate over the messages left
        said 326 s at 25 % where 730 s were left (the largest job runs
        alone at the end), and the largest job's own young rate (its first
        minute, connecting included) overshot once it started.
        """
        run = SimulatedRun([600] * 19 + [6000], slots=4, rate=10)
        samples = run.run()
        end = run.clock.seconds()
        self.assertWithin(samples, end)

    def test_equalJobs(self) -> None:
        """
        Jobs of one size, 3 at once: the time left is within 20 % of the
        real end from 25 % on.
        """
        run = SimulatedRun([900] * 12, slots=3, rate=5)
        samples = run.run()
        self.assertWithin(samples, run.clock.seconds())


class NothingMovesTests(SynchronousTestCase):
    """
    Jobs that cannot move (paused, paused by the server, deferred) count in
    neither the rate nor the time left; when no job can move the totals say
    why and until when instead of a time; a finished run has no current
    rate.
    """

    def setUp(self) -> None:
        self.simulated = SimulatedRun([1200, 1200, 1200], slots=3, rate=10)
        self.simulated.fill()
        for _ in range(90):
            self.simulated.tick()
            if self.simulated.clock.seconds() % 10 == 0:
                self.simulated.progress.sample()

    def totals(self) -> dict[str, object]:
        totals = self.simulated.progress.summary()["totals"]
        assert isinstance(totals, dict)
        return totals

    def test_heldJobsLeftOut(self) -> None:
        """
        A job paused by an admin counts in neither the time left nor the
        rate: the time left is the others'.
        """
        run = self.simulated
        first = run.jobs[0]
        run.show(first, JobState.PAUSED)
        del run.running[first.name]
        totals = self.totals()
        # 2 jobs of 1,200 at 10 msg/s with 320 left each: 32 s.
        self.assertEqual(totals["eta_seconds"], 32.0)
        self.assertEqual(totals["messages_per_second"], 20.0)
        self.assertIsNone(totals["held"])
        self.assertIsNone(first.snapshot()["eta_seconds"])

    def test_everyJobHeld(self) -> None:
        """
        With every job paused, paused by the server or deferred, the time
        left is L{None}, the rate 0, and C{held} counts the jobs by kind
        with the earliest time one resumes by itself.  Before, the page
        said "Time left 10 min 48 s" and "Rate now 18.8 msg/s" with every
        job paused.
        """
        run = self.simulated
        now = run.clock.seconds()
        for job, state, until in zip(
            run.jobs,
            [JobState.PAUSED, JobState.DEFERRED, JobState.PAUSED_BY_SERVER],
            [None, now + 7200, now + 600],
        ):
            run.show(job, state)
            job.waitIn(Wait(state, "held", now, until, None))
        run.running.clear()
        totals = self.totals()
        self.assertIsNone(totals["eta_seconds"])
        self.assertEqual(totals["messages_per_second"], 0.0)
        self.assertEqual(
            totals["held"],
            {"jobs": {"paused": 1, "paused_by_server": 1, "deferred": 1}, "until": now + 600},
        )
        for job in run.jobs:
            self.assertIsNone(job.snapshot()["eta_seconds"])
            # Nor a rate now of its own: its row said "7.3 msg/s", paused.
            self.assertEqual(job.snapshot()["messages_per_second"], 0.0)

    def test_finishedRunHasNoRate(self) -> None:
        """
        Once every job has ended, the current rates are L{None} (nothing
        moves) and the run says its average over its duration.  Before,
        "Rate now" stayed at the rate of the minute before the end.
        """
        run = self.simulated
        while run.running:
            run.tick()
        run.clock.advance(300)
        summary = run.progress.summary()
        totals = summary["totals"]
        assert isinstance(totals, dict)
        self.assertEqual(
            (totals["messages_per_second"], totals["bytes_per_second"], totals["eta_seconds"]),
            (None, None, None),
        )
        self.assertEqual(
            summary["run"],
            {
                "started_at": 1_000_000,
                "finished_at": 1_000_122,
                "elapsed_seconds": 122,
                "average_messages_per_second": round(3600 / 122, 1),
                "verify": None,
            },
        )

    def test_endedJobHasNoRateNorTimeLeft(self) -> None:
        """
        A job that has ended has no current rate and no time left (L{None},
        not C{0}), though it settled messages within the last minute: the
        page's row says "–" and "done", not "2.1 msg/s" and "0 s" with a
        "done ≈ <now>" tooltip, as it did after a live run's end.
        """
        run = self.simulated
        while run.running:
            run.tick()
        for job in run.jobs:
            snapshot = job.snapshot()
            self.assertEqual(
                (snapshot["state"], snapshot["messages_per_second"], snapshot["eta_seconds"]),
                ("done", None, None),
                job.name,
            )
            self.assertIsNotNone(snapshot["average_messages_per_second"])
