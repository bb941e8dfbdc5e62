"""
Tests for L{imapmig.progress}: the snapshot keys, counted totals, the
current rates, ETA, the run, the throughput history and its sampler, and
per-folder progress after a real job run.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings, MigrationJob
from imapmig.job.machine import JobInputs, JobMachine
from imapmig.progress import (
    HISTORY_SAMPLES,
    FolderProgress,
    JobProgress,
    JobState,
    MigrationProgress,
    ProgressSampler,
    RateWindow,
)
from imapmig.mail.folders import FolderRules
from tests.test_job import JOB, PASSWORD, JobHarness, body, memoryOpener

JOB_KEYS = {
    "name", "state", "counted", "messages_total", "messages_done", "messages_failed",
    "messages_already_present", "messages_already_migrated", "messages_pending",
    "bytes_total", "bytes_done", "bytes_sent", "percent", "messages_per_second",
    "average_messages_per_second", "eta_seconds", "current_folder", "folders_total",
    "folders_excluded", "error", "wait", "waiting_for", "retry_at", "retry_attempt",
    "retry_attempts", "reconnects", "started_at",
    "finished_at", "elapsed_seconds", "paused", "line_endings_converted", "messages_with_notes",
}  # fmt: skip

TOTALS_KEYS = {
    "jobs", "jobs_total", "jobs_counted", "messages_total", "messages_done",
    "messages_failed", "messages_already_present", "messages_already_migrated",
    "messages_pending", "bytes_total", "bytes_done", "bytes_sent", "bytes_failed", "percent_messages",
    "percent_bytes", "messages_per_second", "bytes_per_second", "eta_seconds", "held",
    "line_endings_converted", "messages_with_notes",
}  # fmt: skip


def running(progress: JobProgress, clock: Clock) -> JobInputs:
    """
    Drive C{progress} with a real job lifecycle into its running state.
    """
    lifecycle = JobMachine(progress.name, progress, clock)
    lifecycle.start()
    lifecycle.connected()
    return lifecycle


def settle(progress: JobProgress, messages: int, octets: int) -> None:
    """
    Count C{messages} appended messages of C{octets} octets, as the
    outcome recorder does.
    """
    progress.messagesDone += messages
    progress.messagesSettled += messages
    progress.bytesSent += octets
    progress.bytesDone += octets


class SnapshotTests(SynchronousTestCase):
    """
    L{JobProgress.snapshot} and L{MigrationProgress.summary}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.progress = MigrationProgress(self.clock.seconds)

    def test_keys(self) -> None:
        """
        A job's snapshot has every key of the C{JOB} object; the summary
        has the time, the run, the totals and the throughput, and no
        jobs; the snapshot is the summary with every job.
        """
        self.progress.addJob("a")
        job = self.progress.job("a").snapshot()
        self.assertEqual(set(job), JOB_KEYS)
        summary = self.progress.summary()
        self.assertEqual(set(summary), {"time", "run", "totals", "throughput"})
        self.assertEqual(set(summary["totals"]), TOTALS_KEYS)  # type: ignore[call-overload]
        self.assertEqual(
            set(summary["run"]),  # type: ignore[call-overload]
            {"started_at", "finished_at", "elapsed_seconds", "average_messages_per_second", "verify"},
        )
        self.assertEqual(
            summary["throughput"], {"step_seconds": 10.0, "samples": []}
        )
        snapshot = self.progress.snapshot()
        self.assertEqual(snapshot["jobs"], [job])
        del snapshot["jobs"]
        self.assertEqual(snapshot, summary)

    def test_uncountedIsNone(self) -> None:
        """
        Until a job is counted its totals, pending, percent and ETA are
        L{None}, never 0; the overall totals cover the counted jobs only,
        the percentages are L{None} while none is, and the overall ETA is
        L{None} until every job is.
        """
        a = self.progress.addJob("a")
        self.progress.addJob("b")
        job = a.snapshot()
        self.assertEqual(
            [job[k] for k in ("counted", "messages_total", "bytes_total", "messages_pending")],
            [False, None, None, None],
        )
        self.assertEqual((job["percent"], job["eta_seconds"]), (None, None))
        totals = self.progress.summary()["totals"]
        self.assertEqual(
            [totals[k] for k in ("jobs_total", "jobs_counted", "percent_messages", "percent_bytes")],  # type: ignore[index]
            [2, 0, None, None],
        )

        self.assertTrue(a.census(100, 5000, 2, ["Spam"], recorded=20))
        job = a.snapshot()
        self.assertEqual(
            [job[k] for k in ("counted", "messages_total", "bytes_total", "messages_pending")],
            [True, 100, 5000, 80],
        )
        self.assertEqual((job["messages_done"], job["bytes_done"], job["percent"]), (20, 1000, 20.0))
        self.assertEqual(a.excludedFolders, ["Spam"])
        totals = self.progress.summary()["totals"]
        self.assertEqual(
            [totals[k] for k in ("jobs_counted", "messages_total", "percent_messages", "eta_seconds")],  # type: ignore[index]
            [1, 100, 20.0, None],
        )

    def test_listingOverridesCensus(self) -> None:
        """
        The job's own listing replaces the census's totals, and a census
        arriving after it changes nothing.
        """
        a = self.progress.addJob("a")
        a.census(100, None, 2, [])
        self.assertIsNone(a.snapshot()["bytes_total"])
        folders = [FolderProgress("INBOX", "INBOX", 3, 300, 1, 100), FolderProgress("Sent", "Sent", 2, 50)]
        a.listed(folders, ["Trash"], 1, 1)
        self.assertFalse(a.census(999, 999, 9, []))
        job = a.snapshot()
        self.assertEqual(
            [job[k] for k in ("messages_total", "bytes_total", "messages_done", "bytes_done")],
            [5, 350, 1, 100],
        )
        self.assertEqual([f["state"] for f in a.folderSnapshots()], ["pending", "pending"])

    def test_pausedAndCancelled(self) -> None:
        """
        C{paused} shows L{JobProgress.pausedByAdmin}; C{cancelled} is a
        state counted in the totals.
        """
        a = self.progress.addJob("a")
        a.pausedByAdmin = True
        a.showState(lambda: JobState.CANCELLED)
        self.assertTrue(a.snapshot()["paused"])
        self.assertEqual(self.progress.summary()["totals"]["jobs"]["cancelled"], 1)  # type: ignore[index]

    def test_run(self) -> None:
        """
        The run started with the progress (or L{MigrationProgress.startRun});
        it is not finished while a job is queued or running, and finishes
        when the last job ends.
        """
        self.progress.startRun()
        a = self.progress.addJob("a")
        b = self.progress.addJob("b")
        self.clock.advance(5)
        run = self.progress.summary()["run"]
        self.assertEqual(
            run,
            {
                "started_at": 1000,
                "finished_at": None,
                "elapsed_seconds": 5,
                "average_messages_per_second": 0.0,
                "verify": None,
            },
        )
        first = running(a, self.clock)
        self.clock.advance(5)
        first.succeed()
        second = running(b, self.clock)
        self.clock.advance(5)
        self.assertIsNone(self.progress.summary()["run"]["finished_at"])  # type: ignore[index]
        second.fail("LOGIN refused")
        self.clock.advance(100)
        run = self.progress.summary()["run"]
        self.assertEqual((run["finished_at"], run["elapsed_seconds"]), (1015, 15))  # type: ignore[index]


class RateTests(SynchronousTestCase):
    """
    The current rate (a moving window), ETA, and the throughput history.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.progress = MigrationProgress(self.clock.seconds)

    def test_window(self) -> None:
        """
        L{RateWindow.rate} is the growth since the latest sample at least
        a window old, over the time since; it keeps a bounded number of
        samples.
        """
        window = RateWindow(60.0)
        self.assertEqual(window.rate(0, 5, 5), (0.0, 0.0))
        for t in range(0, 1000, 10):
            window.add(t, t * 2, t * 20)
        self.assertLessEqual(len(window), 8)
        self.assertEqual(window.rate(1000, 2000, 20000), (2.0, 20.0))
        # Stopped at 990: the rate falls to 0 once the window passed it.
        self.assertEqual(window.rate(1100, 1980, 19800), (0.0, 0.0))

    def test_currentRateAndETA(self) -> None:
        """
        A job's current rate follows the last minute, not its average;
        its ETA is what is pending over that rate.  The overall ETA is
        L{None} until every job is counted.
        """
        sampler = ProgressSampler(self.progress, self.clock)
        a = self.progress.addJob("a")
        b = self.progress.addJob("b")
        sampler.startService()
        a.census(2000, 200_000, 1, [])
        running(a, self.clock)
        # 10 messages a second for two minutes, then 2 a second.
        for _ in range(12):
            settle(a, 100, 10_000)
            self.clock.advance(10)
        for _ in range(6):
            settle(a, 20, 2_000)
            self.clock.advance(10)
        job = a.snapshot()
        self.assertEqual(job["messages_per_second"], 2.0)
        self.assertEqual(job["average_messages_per_second"], 7.3)
        pending = 2000 - a.messagesDone
        self.assertEqual(job["messages_pending"], pending)
        self.assertEqual(job["eta_seconds"], round(pending / 2.0, 1))
        totals = self.progress.summary()["totals"]
        self.assertEqual(totals["messages_per_second"], 2.0)  # type: ignore[index]
        self.assertEqual(totals["bytes_per_second"], 200.0)  # type: ignore[index]
        self.assertIsNone(totals["eta_seconds"])  # type: ignore[index]
        b.census(0, 0, 1, [])
        totals = self.progress.summary()["totals"]
        self.assertEqual(totals["eta_seconds"], round(pending / 2.0, 1))  # type: ignore[index]
        sampler.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_etaNotBeforeSlowestJob(self) -> None:
        """
        The overall ETA is never shorter than the time left of the slowest
        running job at its own rate: jobs held to their own limits (a
        throttled account) cannot lend their speed to another.
        """
        sampler = ProgressSampler(self.progress, self.clock)
        fast = self.progress.addJob("fast")
        slow = self.progress.addJob("slow")
        sampler.startService()
        fast.census(1000, None, 1, [])
        slow.census(200, None, 1, [])
        lifecycles = [running(fast, self.clock), running(slow, self.clock)]
        for _ in range(7):
            settle(fast, 100, 0)
            settle(slow, 10, 0)
            self.clock.advance(10)
        # 11 messages a second together, 1 of them slow's: 530 left
        # overall would take 48 s at 11/s, but slow alone needs 130 s.
        self.assertEqual(slow.snapshot()["eta_seconds"], 130.0)
        totals = self.progress.summary()["totals"]
        self.assertEqual(totals["eta_seconds"], 130.0)  # type: ignore[index]
        for lifecycle in lifecycles:
            lifecycle.stop()
        sampler.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_failedOctetsSettled(self) -> None:
        """
        The octets' percentage counts failed messages as settled, as the
        messages' does: a run that ends with failures ends at 100 % of
        both.
        """
        job = self.progress.addJob("a")
        job.census(4, 400, 1, [])
        settle(job, 3, 300)
        job.messagesFailed += 1
        job.bytesFailed += 100
        totals = self.progress.summary()["totals"]
        self.assertEqual(
            (totals["percent_messages"], totals["percent_bytes"]), (100.0, 100.0)  # type: ignore[index]
        )
        self.assertEqual(totals["bytes_failed"], 100)  # type: ignore[index]

    def test_history(self) -> None:
        """
        The sampler adds one throughput step every 10 s: the messages and
        octets per second of that step; the history keeps the last hour
        (360 steps), oldest first.
        """
        sampler = ProgressSampler(self.progress, self.clock)
        a = self.progress.addJob("a")
        sampler.startService()
        running(a, self.clock)
        for step in range(400):
            settle(a, step, 10 * step)
            self.clock.advance(10)
        samples = self.progress.summary()["throughput"]["samples"]  # type: ignore[index]
        self.assertEqual(len(samples), HISTORY_SAMPLES)
        self.assertEqual(samples[0], [410.0, 4.0, 40.0])
        self.assertEqual(samples[-1], [4000.0, 39.9, 399.0])
        sampler.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_shortRunNotDiluted(self) -> None:
        """
        A run that copies 5,000 messages in 2.5 s and ends: its throughput
        step ends with it, at once in the summary and as the sampler then
        records it, at the rate it ran (2,000 msg/s), not spread over the 10 s
        step (500 msg/s) nor over the time since (1,724 msg/s 0.4 s
        later); the finished run has no current rate.
        """
        sampler = ProgressSampler(self.progress, self.clock)
        a = self.progress.addJob("a")
        # The daemon takes a while to start after the progress is made.
        self.clock.advance(0.5)
        sampler.startService()
        a.census(5000, 5_000_000, 1, [])
        lifecycle = running(a, self.clock)
        self.clock.advance(2.5)
        settle(a, 5000, 5_000_000)
        lifecycle.succeed()
        summary = self.progress.summary()
        self.assertIsNone(summary["totals"]["messages_per_second"])  # type: ignore[index]
        self.assertEqual(
            summary["throughput"]["samples"], [[3.0, 2000.0, 2_000_000.0]]  # type: ignore[index]
        )
        self.clock.advance(0.4)
        later = self.progress.summary()
        self.assertIsNone(later["totals"]["messages_per_second"])  # type: ignore[index]
        self.clock.advance(7.1)
        samples = self.progress.summary()["throughput"]["samples"]  # type: ignore[index]
        self.assertEqual(samples, [[3.0, 2000.0, 2_000_000.0], [10.5, 0.0, 0.0]])
        # The finished run has no current rate; its average stays.
        self.clock.advance(300)
        summary = self.progress.summary()
        self.assertIsNone(summary["totals"]["messages_per_second"])  # type: ignore[index]
        self.assertEqual(summary["run"]["average_messages_per_second"], 2000.0)  # type: ignore[index]
        sampler.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_samplesOnlyActiveJobs(self) -> None:
        """
        Only jobs that started are sampled, and a job ended more than a
        window ago no more: sampling 10,000 queued jobs costs nothing per
        job.
        """
        for n in range(10_000):
            self.progress.addJob(f"job{n}")
        a = self.progress.job("job5")
        lifecycle = running(a, self.clock)
        self.progress.sample()
        self.assertEqual(self.progress.sampledJobs, 1)
        lifecycle.succeed()
        self.clock.advance(61)
        self.progress.sample()
        self.assertEqual(self.progress.sampledJobs, 0)
        # Ended, it has no current rate at all.
        self.assertIsNone(a.snapshot()["messages_per_second"])


class FolderProgressTests(SynchronousTestCase):
    """
    Per-folder progress, set by the job's listing and moved by its
    recorder, after real job runs.
    """

    def test_afterRun(self) -> None:
        """
        After a run every included folder is done with its messages and
        source octets, under its destination mailbox; excluded folders
        are named; a second run counts what the first did as done
        (octets included) and sends nothing.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        archive = h.source.addFolder("Archive", "2019")
        for n in range(3):
            h.source.add(inbox, f"i{n}", body(n))
        for n in range(3, 5):
            h.source.add(archive, f"a{n}", body(n))
        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=2))))
        progress = h.progress
        sizes = [len(body(n)) for n in range(5)]
        self.assertEqual(
            progress.folderSnapshots(),
            [
                {
                    "folder": "INBOX", "mailbox": "INBOX", "state": "done",
                    "messages_total": 3, "messages_done": 3, "messages_failed": 0,
                    "bytes_total": sum(sizes[:3]), "bytes_done": sum(sizes[:3]),
                },
                {
                    "folder": "Archive/2019", "mailbox": "Archive.2019", "state": "done",
                    "messages_total": 2, "messages_done": 2, "messages_failed": 0,
                    "bytes_total": sum(sizes[3:]), "bytes_done": sum(sizes[3:]),
                },
            ],
        )  # fmt: skip
        job = progress.snapshot()
        self.assertEqual(
            [job[k] for k in ("counted", "messages_total", "bytes_total", "bytes_done", "bytes_sent", "percent")],
            [True, 5, sum(sizes), sum(sizes), sum(sizes), 100.0],
        )

        h.source.add(archive, "a5", body(5))
        self.assertTrue(h.run(h.job()))
        self.assertEqual(progress.bytesSent, len(body(5)))
        self.assertEqual(progress.bytesDone, sum(sizes) + len(body(5)))
        self.assertEqual(
            [(f["folder"], f["messages_done"], f["state"]) for f in progress.folderSnapshots()],
            [("INBOX", 3, "done"), ("Archive/2019", 3, "done")],
        )
        h.finish()

    def test_failedAndExcluded(self) -> None:
        """
        A message the server refuses counts as failed in its folder; a
        folder the rules leave out is named in C{excludedFolders}.
        """
        h = JobHarness(self, refuse=lambda b: "NO [LIMIT] too big" if b == body(2) else None)
        inbox = h.source.addFolder("INBOX")
        h.source.addFolder("Spam")
        for n in range(3):
            h.source.add(inbox, f"i{n}", body(n))
        job = MigrationJob(
            JOB, h.source, h.store, h.progress, memoryOpener(h.endpoint, h.clock, PASSWORD),
            h.clock, JobSettings(connections=1), FolderRules(exclude=("Spam",)),
        )  # fmt: skip
        h.run(job)
        progress = h.progress
        self.assertEqual(progress.excludedFolders, ["Spam"])
        self.assertEqual(progress.foldersExcluded, 1)
        (inboxProgress,) = progress.folderSnapshots()
        self.assertEqual(
            (inboxProgress["messages_done"], inboxProgress["messages_failed"], inboxProgress["state"]),
            (2, 1, "done"),
        )
        h.finish()
