"""
Tests for the admin's controls (L{imapmig.schedule.controls}) as the
scheduler provides them (L{imapmig.schedule.scheduler.JobQueueService})
over the job queue (L{imapmig.queue.memory.InMemoryJobQueue}).
"""

from __future__ import annotations

from typing import Callable, Sequence

from twisted.internet.defer import Deferred, fail
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.config.model import JobConfig
from imapmig.errors import ControlRefused, PermanentError, UnknownJob
from imapmig.job import JobSettings
from imapmig.job.machine import JobMachines
from imapmig.progress import JobState
from imapmig.schedule.controls import IJobControls
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, JobConnections
from imapmig.queue import JobClaim, JobOutcome, QueueCounts, QueueState, Requested
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.schedule.scheduler import JobQueueService
from imapmig.state import MessageOutcome, Transition
from imapmig.state.memory import MemoryStateStore
from imapmig.progress import MigrationProgress
from tests.test_job import JOB, USER, JobHarness, appendLines, body, populate
from tests.test_schedule_service import FakeJob, Scheduler, jobConfig

ADMIN = "192.0.2.7"


class ControlledScheduler(Scheduler):
    """
    A L{Scheduler} over fake jobs with a memory state store.
    """

    def __init__(
        self,
        jobs: Sequence[JobConfig],
        maxJobs: int,
        limits: ServerLimits = ServerLimits(),
        crash: Sequence[str] = (),
    ) -> None:
        Scheduler.__init__(self, jobs, maxJobs, limits, crash)
        self.store = MemoryStateStore()
        # Every job's timeline, as its machine records it.
        self.timeline: list[tuple[str, Transition]] = []
        self.service = JobQueueService(
            self.queue,
            self.grants,
            self.service._build,
            self.progress,
            self.clock,
            self.done.append,
            store=self.store,
            machines=JobMachines(
                self.progress,
                self.clock,
                lambda job, t: self.timeline.append((job, t)),
                self.queue,
            ),
        )

    def state(self, name: str) -> JobState:
        """
        The state job C{name} shows.
        """
        return self.progress.job(name).state

    def stop(self, test: SynchronousTestCase) -> None:
        """
        Stop the scheduler; check that nothing is left on the clock.
        """
        stopping = self.service.stopService()
        assert stopping is not None
        test.successResultOf(stopping)
        test.assertEqual(self.clock.getDelayedCalls(), [])


class ControlsTests(SynchronousTestCase):
    """
    Each control against a scheduler of fake jobs.
    """

    def scheduler(self, *args: object, **kwargs: object) -> ControlledScheduler:
        """
        A L{ControlledScheduler}, stopped when the test ends if it still
        runs (a suspended scheduler left to the garbage collector would
        resume its waits).
        """
        s = ControlledScheduler(*args, **kwargs)  # type: ignore[arg-type]

        def stop() -> None:
            if s.service.running:
                s.stop(self)

        self.addCleanup(stop)
        return s

    def test_interface(self) -> None:
        """
        The scheduler provides L{IJobControls}.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        self.assertTrue(verifyObject(IJobControls, s.service.controls))

    def test_pauseRunningReleasesGrants(self) -> None:
        """
        Pausing a running job stops it (as a daemon stop does) and gives
        back its connections and job slot: the next job starts; the paused
        one shows C{paused}, "paused by the admin", C{pausedByAdmin}.
        """
        s = self.scheduler([jobConfig("a", "alice"), jobConfig("b", "bob")], maxJobs=1)
        s.service.startService()
        self.assertEqual(s.grants.connectionsInUse("s", "alice"), 1)
        with capturedLogs() as events:
            state = self.successResultOf(s.service.controls.pause("a", ADMIN))
        self.assertEqual(state, JobState.PAUSED)
        self.assertTrue(s.built["a"].stopped)
        self.assertEqual(s.grants.connectionsInUse("s", "alice"), 0)
        self.assertEqual(s.service.runningJobs, ["b"])
        self.assertEqual(s.grants.connectionsInUse("s", "bob"), 1)
        progress = s.progress.job("a")
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.pausedByAdmin),
            (JobState.PAUSED, "paused by the admin", True),
        )
        self.assertEqual(progress.snapshot()["paused"], True)
        controlLines = [e for e in events if "Control" in e.get("log_format", "")]
        self.assertEqual(len(controlLines), 1)
        self.assertEqual(
            (controlLines[0]["action"], controlLines[0]["job"], controlLines[0]["client"]),
            ("pause", "a", ADMIN),
        )
        # The queue is not drained while a job is paused.
        s.finish("b")
        self.assertEqual(s.done, [])
        self.assertEqual(s.queue.counts(), QueueCounts(queued=0, claimed=0, finished=1, paused=1))
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.done, [])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_timeline(self) -> None:
        """
        Each control is an input of the job's machine, which records every
        move: a running job paused stops for the pause of whom asked (the
        stop's cause and who), then, its claim finished, is paused by them
        (not stopped between), at that time; resumed, it is queued and runs
        again.
        """
        s = self.scheduler([jobConfig("a", "alice"), jobConfig("b", "bob")], maxJobs=1)
        s.service.startService()
        s.clock.advance(10)
        self.successResultOf(s.service.controls.pause("a", ADMIN))
        s.clock.advance(5)
        self.successResultOf(s.service.controls.resume("a", "192.0.2.8"))
        s.finish("b")
        s.finish("a")
        moves = [(t.time, t.source, t.target, t.cause, t.by) for job, t in s.timeline if job == "a"]
        self.assertEqual(
            moves,
            [
                (0.0, "queued", "connecting", "started", None),
                (10.0, "connecting", "stopping", "paused by the admin", ADMIN),
                (10.0, "stopping", "paused", "paused by the admin", ADMIN),
                (15.0, "paused", "queued", "resumed", "192.0.2.8"),
                (15.0, "queued", "connecting", "started", None),
                (15.0, "connecting", "done", "every message migrated", None),
            ],
        )
        self.assertIs(s.progress.job("a").state, JobState.DONE)
        s.stop(self)

    def test_resumeContinues(self) -> None:
        """
        A resumed job is queued again before the jobs never claimed, runs
        again (a new run: the state store knows what was copied) and the
        queue drains once it completes.
        """
        s = self.scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=1)
        s.service.startService()
        self.successResultOf(s.service.controls.pause("a", ADMIN))
        self.assertEqual(s.started, ["a", "b"])
        state = self.successResultOf(s.service.controls.resume("a", ADMIN))
        self.assertEqual(state, JobState.QUEUED)
        progress = s.progress.job("a")
        self.assertEqual(
            (progress.state, progress.waitingFor, progress.pausedByAdmin),
            (JobState.QUEUED, None, False),
        )
        s.finish("b")
        # Ahead of c, never claimed.
        self.assertEqual(s.started, ["a", "b", "a"])
        s.finish("a")
        s.finish("c")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_resumeAfterDrainWaited(self) -> None:
        """
        With only a paused job left, the scheduler waits for it (the queue
        is not drained); resumed, it runs at once.
        """
        s = self.scheduler([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        s.service.startService()
        self.successResultOf(s.service.controls.pause("b", ADMIN))
        s.finish("a")
        self.assertEqual(s.done, [])
        self.successResultOf(s.service.controls.resume("b", ADMIN))
        self.assertEqual(s.started, ["a", "b", "b"])
        s.finish("b")
        self.assertEqual(s.done, [True])

    def test_pauseQueued(self) -> None:
        """
        A queued job paused is not claimed; the jobs after it are.
        """
        s = self.scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=1)
        s.service.startService()
        self.successResultOf(s.service.controls.pause("b", ADMIN))
        self.assertEqual(s.state("b"), JobState.PAUSED)
        s.finish("a")
        self.assertEqual(s.started, ["a", "c"])
        s.finish("c")
        self.assertEqual(s.done, [])
        self.successResultOf(s.service.controls.resume("b", ADMIN))
        s.finish("b")
        self.assertEqual(s.done, [True])

    def test_pauseWhileWaitingForGrant(self) -> None:
        """
        A job waiting for its connection grant, paused, gives up the wait
        and shows paused.
        """
        s = self.scheduler(
            [jobConfig("a", "alice"), jobConfig("b", "alice")],
            maxJobs=2,
            limits=ServerLimits(perAccount=AccountLimits(maxConnections=1)),
        )
        s.service.startService()
        self.assertEqual(s.progress.job("b").waitingFor, "a connection grant")
        self.successResultOf(s.service.controls.pause("b", ADMIN))
        self.assertEqual(s.state("b"), JobState.PAUSED)
        self.assertEqual(s.grants.pools.waiting, 0)
        s.finish("a")
        self.assertEqual(s.started, ["a"])
        self.assertEqual(s.done, [])
        s.stop(self)

    def test_cancelRunning(self) -> None:
        """
        A running job cancelled is stopped, shows C{cancelled}, and the
        queue drains without it: C{whenDone} gets C{False}.
        """
        s = self.scheduler([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        s.service.startService()
        state = self.successResultOf(s.service.controls.cancel("a", ADMIN))
        self.assertEqual(state, JobState.CANCELLED)
        self.assertTrue(s.built["a"].stopped)
        self.assertEqual(s.state("a"), JobState.CANCELLED)
        self.assertEqual(s.grants.connectionsInUse("s", "a"), 0)
        s.finish("b")
        self.assertEqual(s.done, [False])
        self.assertEqual(s.queue.counts().cancelled, 1)
        # imapmig report counts it as failed, with why.
        self.assertEqual(self.successResultOf(s.store.jobFailure("a")), "cancelled by the admin")
        self.assertEqual(s.progress.job("a").error, "cancelled by the admin")
        # Cancelled: neither pause nor cancel applies any more.
        for control in (s.service.controls.pause, s.service.controls.cancel):
            self.failureResultOf(control("a", ADMIN), ControlRefused)
        # Resume is the way back: the job is queued and runs again.
        state = self.successResultOf(s.service.controls.resume("a", ADMIN))
        self.assertEqual(state, JobState.QUEUED)
        self.assertEqual(s.queue.counts().cancelled, 0)
        self.assertEqual(s.started, ["a", "b", "a"])
        self.assertIsNone(s.progress.job("a").error)
        s.finish("a")
        self.assertEqual(s.done, [False, True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_cancelQueuedAndPaused(self) -> None:
        """
        A queued job and a paused one, cancelled, are never claimed; the
        queue drains without them.
        """
        s = self.scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=1)
        s.service.startService()
        self.successResultOf(s.service.controls.pause("b", ADMIN))
        self.successResultOf(s.service.controls.cancel("b", ADMIN))
        self.successResultOf(s.service.controls.cancel("c", ADMIN))
        self.assertEqual((s.state("b"), s.state("c")), (JobState.CANCELLED,) * 2)
        self.assertEqual(self.successResultOf(s.store.jobFailure("c")), "cancelled by the admin")
        self.assertEqual(s.progress.job("b").pausedByAdmin, False)
        s.finish("a")
        self.assertEqual(s.started, ["a"])
        self.assertEqual(s.done, [False])

    def test_unknownAndRefused(self) -> None:
        """
        A control of an unknown job fails with L{UnknownJob}; resuming a job
        that is not paused, pausing a paused one, with L{ControlRefused};
        a refusal is logged once, naming who asked.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        for control in (s.service.controls.pause, s.service.controls.resume, s.service.controls.cancel, s.service.controls.retryFailed):
            self.failureResultOf(control("nope", ADMIN), UnknownJob)
        with capturedLogs() as events:
            failure = self.failureResultOf(s.service.controls.resume("a", ADMIN), ControlRefused)
        self.assertEqual(failure.value.reason, "job a is not paused or cancelled")
        self.assertEqual([e["client"] for e in events if "client" in e], [ADMIN])
        self.successResultOf(s.service.controls.pause("a", ADMIN))
        self.failureResultOf(s.service.controls.pause("a", ADMIN), ControlRefused)
        s.stop(self)

    def test_retryFailedRefusedWhenNothingFailed(self) -> None:
        """
        retry-failed of a job with nothing failed is refused.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        s.finish("a")
        failure = self.failureResultOf(s.service.controls.retryFailed("a", ADMIN), ControlRefused)
        self.assertEqual(failure.value.reason, "nothing of job a failed")

    def test_retryFailedRequeuesEnded(self) -> None:
        """
        retry-failed of a job that ended with failed messages recorded
        queues it again; the queue drains again once it has run.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        self.successResultOf(
            s.store.recordOutcomes("a", [MessageOutcome("INBOX", "1", "INBOX", 10, failure="NO")])
        )
        s.finish("a")
        self.assertEqual(s.done, [True])
        state = self.successResultOf(s.service.controls.retryFailed("a", ADMIN))
        self.assertEqual(state, JobState.QUEUED)
        self.assertEqual(s.started, ["a", "a"])
        s.finish("a")
        self.assertEqual(s.done, [True, True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_retryFailedJobFailure(self) -> None:
        """
        retry-failed applies to a job that failed as a whole (recorded in
        the state store): queued again, and the drain reports it completed
        once it does.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        s.finish("a", completed=False)
        self.assertEqual(s.done, [False])
        self.successResultOf(s.store.recordJobFailure("a", "login refused"))
        self.successResultOf(s.service.controls.retryFailed("a", ADMIN))
        s.finish("a")
        self.assertEqual(s.done, [False, True])

    def test_retryFailedWhileRunning(self) -> None:
        """
        retry-failed of a running job with failed messages runs it once
        more after this run.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        s.progress.job("a").messagesFailed = 2
        self.successResultOf(s.service.controls.retryFailed("a", ADMIN))
        s.finish("a")
        self.assertEqual(s.started, ["a", "a"])
        self.assertEqual(s.done, [])
        s.finish("a")
        self.assertEqual(s.done, [True])

    def test_retryFailedCancelled(self) -> None:
        """
        retry-failed of a cancelled job is refused.
        """
        s = self.scheduler([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=1)
        s.service.startService()
        self.successResultOf(s.service.controls.cancel("b", ADMIN))
        self.failureResultOf(s.service.controls.retryFailed("b", ADMIN), ControlRefused)

    def test_pauseAllResumeAll(self) -> None:
        """
        pause-all pauses the running jobs and the queued ones: nothing is
        claimed, no connection held; resume-all queues them all again.
        """
        names = ["a", "b", "c", "d"]
        s = self.scheduler([jobConfig(n, n) for n in names], maxJobs=2)
        s.service.startService()
        s.finish("a")
        self.assertEqual(self.successResultOf(s.service.controls.pauseAll(ADMIN)), 3)
        self.assertEqual(s.service.runningJobs, [])
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.grants.pools.inUse(JOB_SLOTS), 0)
        self.assertEqual(s.queue.state("a"), QueueState.DONE)
        self.assertEqual([s.state(n) for n in names[1:]], [JobState.PAUSED] * 3)
        self.assertEqual(s.started, ["a", "b", "c"])
        self.assertEqual(s.done, [])
        self.assertEqual(self.successResultOf(s.service.controls.resumeAll(ADMIN)), 3)
        self.assertEqual(s.started, ["a", "b", "c", "b", "c"])
        for name in ("b", "c", "d"):
            s.finish(name)
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_grantImpossibleRecorded(self) -> None:
        """
        A job whose connections can never be granted fails, and its
        failure is recorded in the state store for C{imapmig report}.
        """
        s = self.scheduler(
            [jobConfig("a", "alice", sourceUser="alice")],
            maxJobs=1,
            limits=ServerLimits(perAccount=AccountLimits(maxConnections=1)),
        )
        s.service.startService()
        self.assertEqual(s.state("a"), JobState.FAILED)
        reason = self.successResultOf(s.store.jobFailure("a"))
        self.assertIsNotNone(reason)
        self.assertEqual(s.done, [False])

    def test_crashRecorded(self) -> None:
        """
        A job that crashes is recorded as failed with the crash's reason.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1, crash=["a"])
        with capturedLogs():
            s.service.startService()
        self.flushLoggedErrors(RuntimeError)
        self.assertEqual(
            self.successResultOf(s.store.jobFailure("a")), "internal error: RuntimeError: a bug"
        )

    def test_recordFailureStoreError(self) -> None:
        """
        A store that cannot record a scheduler-side failure is logged; the
        job still fails and the queue drains.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1, crash=["a"])
        self.patch(
            s.store,
            "recordJobFailure",
            lambda job, reason: fail(PermanentError("memory: the state store is closed")),
        )
        with capturedLogs() as events:
            s.service.startService()
        self.flushLoggedErrors(RuntimeError)
        self.assertIn(
            "cannot record the job's outcome",
            " ".join(e.get("log_format", "") for e in events),
        )
        self.assertEqual(s.done, [False])

    def test_controlAskedThroughTheQueue(self) -> None:
        """
        A pause asked of the queue (through another daemon of a fleet)
        reaches the running job at its next lease renewal: it is stopped
        and rests paused.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        self.assertEqual(s.queue.pause("a"), QueueState.CLAIMED)
        self.assertFalse(s.built["a"].stopped)
        s.clock.advance(200)
        self.assertTrue(s.built["a"].stopped)
        self.assertEqual(s.state("a"), JobState.PAUSED)
        self.assertEqual(s.queue.state("a"), QueueState.PAUSED)
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_resumeWhileStopping(self) -> None:
        """
        A job resumed while its pause still waits for the replies in flight
        is queued again once stopped, and runs again.
        """
        s = self.scheduler([jobConfig("a", "a")], maxJobs=1)

        class SlowStop(FakeJob):
            def stop(self) -> None:
                self.stopped = True

        s.service._build = lambda config, connections: s.built.setdefault(
            f"{config.name}{len(s.built)}",
            SlowStop(config.name, connections, s.service.machines.job(config.name)),
        )
        s.service.startService()
        self.successResultOf(s.service.controls.pause("a", ADMIN))
        first = s.built["a0"]
        self.assertTrue(first.stopped)
        self.assertEqual(self.successResultOf(s.service.controls.resume("a", ADMIN)), JobState.QUEUED)
        first.result.callback(False)
        self.assertEqual(sorted(s.built), ["a0", "a1"])
        # Queued again, and run again at once.
        self.assertEqual(s.state("a"), JobState.CONNECTING)
        s.built["a1"].result.callback(True)
        self.assertEqual(s.done, [True])


class QueueControlTests(SynchronousTestCase):
    """
    The controls as queue states (L{InMemoryJobQueue}).
    """

    def queue(self, count: int) -> InMemoryJobQueue:
        return InMemoryJobQueue([jobConfig(f"j{i}", f"u{i}") for i in range(count)], lambda: 0.0)

    def test_resumedBeforeNeverClaimed(self) -> None:
        """
        A job paused before its first claim, resumed, is claimed before the
        jobs never claimed, once.
        """
        q = self.queue(4)
        self.assertEqual(q.pause("j2"), QueueState.PAUSED)
        claims = [q.claim("me", 0.0, 60.0) for _ in range(2)]
        self.assertEqual([c.job.name for c in claims if c], ["j0", "j1"])
        self.assertEqual(q.resume("j2"), QueueState.QUEUED)
        self.assertEqual(q.pause("j3"), QueueState.PAUSED)
        self.assertEqual(q.resume("j3"), QueueState.QUEUED)
        names = []
        while (claim := q.claim("me", 0.0, 60.0)) is not None:
            names.append(claim.job.name)
        self.assertEqual(names, ["j2", "j3"])

    def test_requestedOnRenewal(self) -> None:
        """
        A control of a claimed job is a request its owner sees on renewal;
        C{finish} applies it.
        """
        q = self.queue(1)
        claim = q.claim("me", 0.0, 60.0)
        assert claim is not None
        self.assertEqual(q.cancel("j0"), QueueState.CLAIMED)
        renewed = q.renew(claim, 60.0)
        self.assertIs(renewed.requested, Requested.CANCEL)
        from imapmig.queue import JobOutcome

        q.finish(renewed, JobOutcome.STOPPED)
        self.assertEqual(q.state("j0"), QueueState.CANCELLED)
        self.assertIsNone(q.claim("me", 0.0, 60.0))

    def test_pausedDeferredJob(self) -> None:
        """
        A deferred job paused leaves the deferred heap (nothing is due);
        resumed, it waits again for its time (a daily budget's renewal is
        not skipped), then is claimed.
        """
        from imapmig.queue import JobOutcome

        q = self.queue(1)
        claim = q.claim("me", 0.0, 60.0)
        assert claim is not None
        q.finish(claim, JobOutcome.DEFERRED, 100.0)
        self.assertEqual(q.nextDue(), 100.0)
        q.pause("j0")
        self.assertIsNone(q.nextDue())
        self.assertIsNone(q.claim("me", 0.0, 60.0))
        q.resume("j0")
        self.assertEqual(q.nextDue(), 100.0)
        self.assertIsNone(q.claim("me", 50.0, 60.0))
        again = q.claim("me", 100.0, 60.0)
        self.assertEqual(again.job.name if again else None, "j0")


class RetryFailedWithAJobTests(SynchronousTestCase):
    """
    retry-failed with a real L{MigrationJob} against a fake IMAP server.
    """

    def test_refusedMessageRetried(self) -> None:
        """
        A message the server refused is recorded as failed and the job
        ends done; retry-failed queues the job again, and its next run
        appends that message (the server accepts it now) and only it: the
        failure record is replaced by the message's appended outcome.
        """
        refusing = [True]
        h = JobHarness(
            self, refuse=lambda b: "NO [LIMIT] too big" if refusing[0] and b == body(1) else None
        )
        populate(h.source, h.source.addFolder("INBOX"), 3)
        progress = MigrationProgress(h.clock.seconds)
        h.progress = progress.addJob(JOB)
        done: list[bool] = []
        service = JobQueueService(
            InMemoryJobQueue([jobConfig(JOB, USER)], h.clock.seconds),
            ConnectionGrants(1, {}),
            lambda config, connections: h.job(),
            progress,
            h.clock,
            done.append,
            store=h.store,
        )
        service.startService()
        self.waitUntil(h, lambda: len(done) == 1)
        self.assertEqual(done, [True])
        self.assertEqual(h.progress.state, JobState.DONE_WITH_FAILURES)
        self.assertEqual(
            [f.messageKey for f in self.successResultOf(h.store.failures(JOB))], ["m1"]
        )
        h.assertHolds("INBOX", [0, 2])

        refusing[0] = False
        self.assertEqual(
            self.successResultOf(service.controls.retryFailed(JOB, ADMIN)), JobState.QUEUED
        )
        self.waitUntil(h, lambda: len(done) == 2)
        self.assertEqual(done, [True, True])
        self.assertEqual(self.successResultOf(h.store.failures(JOB)), [])
        h.assertHolds("INBOX", [0, 1, 2])
        self.assertEqual(len(appendLines(h.endpoint.servers[-1])), 1)
        self.failureResultOf(service.controls.retryFailed(JOB, ADMIN), ControlRefused)
        stopping = service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        # Let the last session's LOGOUT be answered.
        h.endpoint.pump()
        h.finish()

    def heldWhileBackingOff(self, control: str, held: QueueState) -> None:
        """
        A job backing off (its destination refuses connections) given
        C{control}: its run ends stopped, not failed, and the queue holds
        it C{held}; its end line says so.
        """
        h = JobHarness(self, refuseConnections=range(100))
        populate(h.source, h.source.addFolder("INBOX"), 1)
        progress = MigrationProgress(h.clock.seconds)
        h.progress = progress.addJob(JOB)
        queue = InMemoryJobQueue([jobConfig(JOB, USER)], h.clock.seconds)
        outcomes: list[JobOutcome] = []
        finish = queue.finish

        def finishing(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
            outcomes.append(outcome)
            finish(claim, outcome, notBefore)

        queue.finish = finishing  # type: ignore[method-assign]
        service = JobQueueService(
            queue, ConnectionGrants(1, {}),
            lambda config, connections: h.job(machine=service.machines.job(JOB)),
            progress, h.clock, lambda ok: None, store=h.store,
        )  # fmt: skip
        service.startService()
        h.settle()
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        with capturedLogs() as events:
            self.successResultOf(getattr(service.controls, control)(JOB, ADMIN))
            h.settle()
        self.assertEqual(outcomes, [JobOutcome.STOPPED])
        self.assertEqual(queue.state(JOB), held)
        ends = [e["outcome"] for e in events if e.get("job") == JOB and "outcome" in e]
        self.assertEqual(ends, ["stopped"])
        self.assertEqual([e for e in events if e["log_level"].name in ("error", "critical")], [])
        stopping = service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        h.endpoint.pump()
        self.assertEqual(h.clock.getDelayedCalls(), [])

    def test_cancelWhileBackingOff(self) -> None:
        """
        Cancelled while it backs off, a job's run ends stopped: the queue
        holds it cancelled (a fleet's queue made it failed, and its end
        line said "failed ... ended by an internal error").
        """
        self.heldWhileBackingOff("cancel", QueueState.CANCELLED)

    def test_pauseWhileBackingOff(self) -> None:
        """
        Paused while it backs off, a job's run ends stopped: the queue
        holds it paused.
        """
        self.heldWhileBackingOff("pause", QueueState.PAUSED)

    def waitUntil(self, h: JobHarness, condition: Callable[[], bool]) -> None:
        """
        Pump the harness's connections and move its clock on to the next
        timed call whenever nothing moves, until C{condition()}.
        """
        for _ in range(10000):
            h.settle(condition)
            if condition():
                return
            calls = [c for c in h.clock.getDelayedCalls() if c.getTime() > h.clock.seconds()]
            if not calls:
                break
            h.clock.advance(min(c.getTime() for c in calls) - h.clock.seconds())
        self.fail("the condition never held")
