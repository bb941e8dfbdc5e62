"""
Tests for the scheduler, L{imapmig.schedule.scheduler.JobQueueService}: up to
C{max_jobs} jobs at once, in configuration order, their connections
granted under the servers' limits; and for the grant-aware session opener
(L{imapmig.daemon.service.grantedOpener}) with a real L{MigrationJob}.
"""

from __future__ import annotations

import os
import random
from typing import Sequence, cast

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.config.model import (
    DestinationConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    PipelineConfig,
    ServerConfig,
)
from imapmig.job import JobInputs, JobSettings, MigrationJob
from imapmig.job.attempt import stoppable
from imapmig.progress import JobState, MigrationProgress
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, JobConnections
from imapmig.errors import QueueUnavailable
from imapmig.queue import JobClaim, JobOutcome, QueueCounts
from imapmig.queue.memory import AsyncJobQueue, InMemoryJobQueue
from imapmig.config import parseConfig
from imapmig.schedule.scheduler import DRAIN_RETRY, JobQueueService, essentialConnections
from imapmig.daemon.rootservice import MigrationService
from imapmig.daemon.service import buildService, grantedOpener
from imapmig.state.memory import MemoryStateStore
from tests.test_job import JobHarness, hasResult, memoryOpener
from tests.test_service import makeMaildir


def server(name: str) -> ServerConfig:
    """
    A server called C{name}, on loopback, without limits of its own (the
    tests give limits to L{ConnectionGrants}).
    """
    return ServerConfig(
        name=name, endpoint="tcp:127.0.0.1:143", starttls=False, implicitTLS=False,
        tcpEndpoint="tcp:127.0.0.1:143", tlsHostname="127.0.0.1", tlsCA=None,
        timeout=30.0, compress=False,
    )  # fmt: skip


def jobConfig(name: str, user: str, serverName: str = "s", sourceUser: str | None = None) -> JobConfig:
    """
    A job into C{user} at C{serverName}, from a Maildir of its own (two
    jobs are never one migration, which a configuration refuses), or
    from C{sourceUser} on the same server.
    """
    source: MaildirSourceConfig | ImapSourceConfig = MaildirSourceConfig(f"/nonexistent/{name}")
    if sourceUser is not None:
        source = ImapSourceConfig(server(serverName), sourceUser, None)
    return JobConfig(
        name=name,
        source=source,
        destination=DestinationConfig(server(serverName), user, None),
        connections=1,
        pipeline=PipelineConfig(1, 1, 1, 1),
    )


class FakeJob:
    """
    A job the test ends by hand.

    @ivar result: fire it with whether the job completed.
    """

    def __init__(
        self, name: str, connections: JobConnections, machine: JobInputs, crash: bool = False
    ) -> None:
        self.name = name
        self.connections = connections
        self.machine = machine
        self.crash = crash
        self.result: Deferred[bool] = Deferred()
        self.stopped = False
        self.abandoned = False
        self.deferredUntil: float | None = None

    def run(self) -> Deferred[bool]:
        """
        Drive the job's machine as a run does: started, then ended as the
        test says; cancelling the run stops the job (L{stop}), and it
        still ends only once C{result} has fired.
        """
        return stoppable(Deferred.fromCoroutine(self._run()), lambda: self.stop())

    async def _run(self) -> bool:
        self.machine.start()
        if self.crash:
            raise RuntimeError("a bug")
        completed = await self.result
        if self.stopped:
            if self.machine.state() is not JobState.STOPPING:
                self.machine.stop()
            self.machine.stopped()
        elif completed:
            self.machine.succeed()
        elif self.deferredUntil is not None:
            self.machine.defer("daily budget: used up", self.deferredUntil)
        else:
            self.machine.fail("failed")
        return completed

    def stop(self) -> None:
        self.stopped = True
        self.machine.stop()
        if not self.result.called:
            self.result.callback(False)

    def abandon(self) -> None:
        """
        Its claim lost: stopped at once, as the test sees it.
        """
        self.abandoned = True
        self.stop()


class Scheduler:
    """
    A L{JobQueueService} over fake jobs, a clock and given limits.
    """

    def __init__(
        self,
        jobs: Sequence[JobConfig],
        maxJobs: int,
        limits: ServerLimits = ServerLimits(),
        crash: Sequence[str] = (),
    ) -> None:
        self.clock = Clock()
        self.progress = MigrationProgress(self.clock.seconds)
        for job in jobs:
            self.progress.addJob(job.name)
        self.grants = ConnectionGrants(maxJobs, {"s": limits})
        self.queue = InMemoryJobQueue(jobs, self.clock.seconds)
        self.built: dict[str, FakeJob] = {}
        self.started: list[str] = []
        self.mostAtOnce = 0
        self.done: list[bool] = []

        def build(config: JobConfig, connections: JobConnections) -> FakeJob:
            job = FakeJob(
                config.name, connections, self.service.machines.job(config.name),
                config.name in crash,
            )  # fmt: skip
            self.built[config.name] = job
            self.started.append(config.name)
            running = sum(1 for j in self.built.values() if not j.result.called)
            self.mostAtOnce = max(self.mostAtOnce, running)
            return job

        self.service = JobQueueService(
            self.queue, self.grants, build, self.progress, self.clock, self.done.append
        )

    def finish(self, name: str, completed: bool = True) -> None:
        """
        End the running job C{name}.
        """
        self.built[name].result.callback(completed)

    def defer(self, name: str, until: float) -> None:
        """
        End the running job C{name}'s run deferred until C{until}.
        """
        job = self.built[name]
        job.deferredUntil = until
        job.result.callback(False)


class ForgetfulQueue(InMemoryJobQueue):
    """
    An L{InMemoryJobQueue} that forgets who claimed what: each claim is made
    as a new owner, as a queue shared with other daemons would see an
    owner whose lease lapsed (its expired claims can be claimed again).
    """

    def __init__(self, queue: InMemoryJobQueue) -> None:
        # A fresh queue's jobs: none removed.
        jobs = [job for job in queue._jobs if job is not None]
        InMemoryJobQueue.__init__(self, jobs, queue._leaseClock)
        self._claimed = 0

    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> JobClaim | None:
        self._claimed += 1
        return InMemoryJobQueue.claim(self, f"{owner}#{self._claimed}", now, lease, skipServers)


class SchedulerTests(SynchronousTestCase):
    """
    L{JobQueueService} as a scheduler.
    """

    def test_maxJobsAndOrder(self) -> None:
        """
        At most C{max_jobs} jobs run at once, started in configuration
        order as others end; once the queue is drained, C{whenDone} is
        called once, with C{True} when every job completed.
        """
        names = [f"j{i}" for i in range(5)]
        s = Scheduler([jobConfig(n, n) for n in names], maxJobs=2)
        s.service.startService()
        self.assertEqual(s.started, ["j0", "j1"])
        self.assertEqual(s.service.runningJobs, ["j0", "j1"])
        s.finish("j1")
        self.assertEqual(s.started, ["j0", "j1", "j2"])
        s.finish("j0")
        s.finish("j2")
        self.assertEqual(s.started, names)
        self.assertEqual(s.done, [])
        s.finish("j3")
        s.finish("j4")
        self.assertEqual(s.mostAtOnce, 2)
        self.assertEqual(s.done, [True])
        self.assertEqual(s.queue.counts().finished, 5)
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_someFailed(self) -> None:
        """
        A job that did not complete makes C{whenDone} say so.
        """
        s = Scheduler([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        s.service.startService()
        s.finish("a", completed=False)
        s.finish("b")
        self.assertEqual(s.done, [False])

    def test_drainedWhileTheQueueDies(self) -> None:
        """
        A queue that cannot answer when the daemon counts its cancelled
        jobs, once drained, is read again every C{DRAIN_RETRY} seconds, one
        warning said, and the drain reported once it answers (it hung the
        daemon, silently).
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)
        counts = s.queue.counts
        calls: list[int] = []

        def dying() -> QueueCounts:
            # Answered for the check that nothing is left, then dead.
            calls.append(1)
            if len(calls) in (2, 3):
                raise QueueUnavailable("db1: connection refused")
            return counts()

        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        s.service.startService()
        s.queue.counts = dying  # type: ignore[method-assign]
        s.finish("a")
        self.assertEqual(s.done, [])
        s.clock.advance(DRAIN_RETRY)
        self.assertEqual(s.done, [])
        s.clock.advance(DRAIN_RETRY)
        self.assertEqual(s.done, [True])
        warned = [e for e in events if e["log_level"] is LogLevel.warn]
        self.assertEqual(len(warned), 1)
        self.assertIn("db1: connection refused", formatEvent(warned[0]))
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_drainWaitStopped(self) -> None:
        """
        A daemon stopped while it waits to count again stops at once.
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        counts = s.queue.counts
        calls: list[int] = []

        def down() -> QueueCounts:
            calls.append(1)
            if len(calls) == 1:
                return counts()
            raise QueueUnavailable("db1: connection refused")

        s.queue.counts = down  # type: ignore[method-assign]
        s.finish("a")
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual((s.done, s.clock.getDelayedCalls()), ([], []))

    def test_claimLoopFailureLogged(self) -> None:
        """
        An exception in the claim loop is logged at once, as a failure.
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)

        def broken() -> float | None:
            raise RuntimeError("a bug")

        s.queue.nextDue = broken  # type: ignore[method-assign]
        s.service.startService()
        s.finish("a")
        [logged] = self.flushLoggedErrors(RuntimeError)
        self.assertEqual(str(logged.value), "a bug")

    def test_noJobs(self) -> None:
        """
        An empty queue is drained at once.
        """
        s = Scheduler([], maxJobs=2)
        s.service.startService()
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_accountLimitMakesAJobWait(self) -> None:
        """
        A job whose account has no connection to spare waits (its progress
        says for what) while a later job on another account starts; it
        starts when the account's connection comes back.
        """
        s = Scheduler(
            [jobConfig("a1", "alice"), jobConfig("a2", "alice"), jobConfig("b", "bob")],
            maxJobs=4,
            limits=ServerLimits(maxConnections=3, perAccount=AccountLimits(maxConnections=1)),
        )
        s.service.startService()
        self.assertEqual(s.started, ["a1", "b"])
        waiting = s.progress.job("a2")
        self.assertEqual(waiting.waitingFor, "a connection grant")
        self.assertEqual(waiting.state, JobState.WAITING)
        s.finish("a1")
        self.assertEqual(s.started, ["a1", "b", "a2"])
        self.assertIsNone(waiting.waitingFor)
        s.finish("a2")
        s.finish("b")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_renamedWhileRunningWaits(self) -> None:
        """
        A job that a reload renamed while it ran (removed, it runs to its
        end; the same source and destination added under a new name) is
        claimed at once but waits, its progress saying for what, until
        the old run has ended: both at once copied the same messages
        twice.  Stopped meanwhile, it gives up its wait.
        """
        old = jobConfig("source12", "alice")
        s = Scheduler([old, jobConfig("b", "bob")], maxJobs=4)
        s.service.startService()
        self.assertEqual(s.started, ["source12", "b"])
        s.queue.remove("source12")
        s.queue.add(evolve(old, name="extra12"))
        s.progress.addJob("extra12")
        s.service.queueChanged()
        self.assertEqual(s.started, ["source12", "b"])
        self.assertEqual(
            s.progress.job("extra12").waitingFor, "the run of job source12 (the same migration) to end"
        )
        s.finish("source12")
        self.assertEqual(s.started, ["source12", "b", "extra12"])
        s.queue.remove("extra12")
        s.queue.add(evolve(old, name="third"))
        s.progress.addJob("third")
        s.service.queueChanged()
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.started, ["source12", "b", "extra12"])
        self.assertEqual(s.grants.pools.waiting, 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_serverLimitAcrossRoles(self) -> None:
        """
        A job copying between two accounts of one server holds two of its
        connections: under C{max_connections: 3}, a second such job waits
        for the first; a later one-connection job does not overtake it (the
        unit left is kept for the older waiter), and both start when the
        first job ends.
        """
        jobs = [
            jobConfig("x", "new1", sourceUser="old1"),
            jobConfig("y", "new2", sourceUser="old2"),
            jobConfig("z", "new3"),
        ]
        self.assertEqual(essentialConnections(jobs[0]), [("s", "new1"), ("s", "old1")])
        s = Scheduler(jobs, maxJobs=3, limits=ServerLimits(3))
        s.service.startService()
        self.assertEqual(s.started, ["x"])
        self.assertEqual(s.grants.connectionsInUse("s"), 2)
        s.finish("x")
        self.assertEqual(s.started, ["x", "y", "z"])
        self.assertEqual(s.grants.connectionsInUse("s"), 3)
        s.finish("y")
        s.finish("z")
        self.assertEqual(s.grants.connectionsInUse("s"), 0)

    def test_stopWhileSeveralRun(self) -> None:
        """
        Stopping the service stops every running job and gives up every
        wait (a job slot, a connection grant); it fires once all have
        ended, without C{whenDone}; the stopped jobs go back to the queue.
        (a2 waits for its grant without a slot: c runs meanwhile.)
        """
        s = Scheduler(
            [jobConfig("a1", "alice"), jobConfig("a2", "alice"), jobConfig("b", "bob"),
             jobConfig("c", "carol")],
            maxJobs=3,
            limits=ServerLimits(maxConnections=None, perAccount=AccountLimits(maxConnections=1)),
        )  # fmt: skip
        s.service.startService()
        self.assertEqual(s.started, ["a1", "b", "c"])
        # a2 waits for its grant, the scheduler for a job slot.
        self.assertEqual(s.service.runningJobs, ["a1", "a2", "b", "c"])
        self.assertEqual(s.grants.pools.waiting, 2)
        stopping = s.service.stopService()
        assert stopping is not None
        self.assertTrue(all(s.built[n].stopped for n in ("a1", "b", "c")))
        self.successResultOf(stopping)
        self.assertEqual(s.started, ["a1", "b", "c"])
        self.assertEqual(s.done, [])
        self.assertEqual(s.queue.counts().queued, 4)
        self.assertEqual(s.grants.pools.waiting, 0)
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_fullServerDoesNotHoldUpOthers(self) -> None:
        """
        A job waiting for a connection to a full server leaves its slot to
        jobs for other servers; once granted, it takes the next slot that
        comes free, before jobs not yet claimed, and shows meanwhile that it
        waits for a job slot.
        """
        jobs = [jobConfig("s1", "u1"), jobConfig("s2", "u2"), jobConfig("t1", "v1", serverName="t"),
                jobConfig("t2", "v2", serverName="t"), jobConfig("t3", "v3", serverName="t")]  # fmt: skip
        s = Scheduler(jobs, maxJobs=2, limits=ServerLimits(1))
        s.service.startService()
        self.assertEqual(s.started, ["s1", "t1"])
        self.assertEqual(s.progress.job("s2").waitingFor, "a connection grant")
        s.finish("t1")
        self.assertEqual(s.started, ["s1", "t1", "t2"])
        # s2 is granted s1's connection while t2 and s1 hold both slots.
        s.finish("s1")
        self.assertEqual(s.started, ["s1", "t1", "t2", "s2"])
        s.finish("t2")
        self.assertEqual(s.started, ["s1", "t1", "t2", "s2", "t3"])
        s.finish("s2")
        s.finish("t3")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.grants.pools.inUse(JOB_SLOTS), 0)
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_grantedWaitsForASlot(self) -> None:
        """
        A job granted its connections after it gave its slot away waits for
        a slot, saying so, ahead of the jobs not yet claimed; a stop gives
        up that wait too.
        """
        jobs = [jobConfig("s1", "u1"), jobConfig("s2", "u2"), jobConfig("t1", "v1", serverName="t"),
                jobConfig("t2", "v2", serverName="t")]  # fmt: skip
        s = Scheduler(jobs, maxJobs=2, limits=ServerLimits(1))
        s.service.startService()
        self.assertEqual(s.started, ["s1", "t1"])
        # s1's connection comes back while s1 still holds its slot.
        s.built["s1"].connections.end()
        self.assertEqual(s.progress.job("s2").waitingFor, "a job slot")
        self.assertEqual(s.grants.connectionsInUse("s"), 1)
        s.finish("t1")
        self.assertEqual(s.started, ["s1", "t1", "s2"])
        self.assertIsNone(s.progress.job("s2").waitingFor)
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.grants.pools.inUse(JOB_SLOTS), 0)
        self.assertEqual(s.grants.pools.waiting, 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_stopWhileWaitingForASlotAgain(self) -> None:
        """
        A stop gives up the wait of a job granted its connections that
        waits for a slot: it goes back to the queue, and nothing is held.
        """
        jobs = [jobConfig("s1", "u1"), jobConfig("s2", "u2"), jobConfig("t1", "v1", serverName="t")]
        s = Scheduler(jobs, maxJobs=2, limits=ServerLimits(1))
        s.service.startService()
        s.built["s1"].connections.end()
        self.assertEqual(s.progress.job("s2").waitingFor, "a job slot")
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.started, ["s1", "t1"])
        self.assertEqual(s.queue.counts().queued, 3)
        self.assertEqual(s.grants.pools.inUse(JOB_SLOTS), 0)
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.grants.pools.waiting, 0)

    def test_manyJobsAcrossLimitedServers(self) -> None:
        """
        Many jobs over three servers, some full, some accounts shared, some
        jobs deferred once, ended in a seeded random order: never more
        than C{max_jobs} run, the scheduler never stalls with jobs left
        (always something runs or is due), every job completes once, and
        nothing is held at the end.
        """
        rng = random.Random(17)
        jobs = [
            jobConfig(f"j{i}", f"u{rng.randrange(4)}", serverName=rng.choice("stu"),
                      sourceUser=f"v{rng.randrange(3)}" if rng.random() < 0.3 else None)
            for i in range(60)
        ]  # fmt: skip
        s = Scheduler(jobs, maxJobs=3, limits=ServerLimits(2, perAccount=AccountLimits(maxConnections=1)))
        s.grants = ConnectionGrants(3, {"s": ServerLimits(2, perAccount=AccountLimits(maxConnections=1)), "t": ServerLimits(2)})
        s.service._grants = s.grants
        s.service.startService()
        completed: set[str] = set()
        deferred: set[str] = set()
        while len(completed) < len(jobs):
            running = [n for n, j in s.built.items() if not j.result.called]
            self.assertLessEqual(len(running), 3)
            if not running:
                due = s.queue.nextDue()
                self.assertIsNotNone(due, f"stalled with {len(jobs) - len(completed)} jobs left")
                assert due is not None
                s.clock.advance(due - s.clock.seconds())
                continue
            name = rng.choice(running)
            if name not in deferred and rng.random() < 0.2:
                deferred.add(name)
                s.defer(name, s.clock.seconds() + rng.choice([10.0, 50.0]))
            else:
                self.assertNotIn(name, completed)
                completed.add(name)
                s.finish(name)
        self.assertEqual(s.done, [True])
        self.assertEqual(s.grants.pools.inUse(JOB_SLOTS), 0)
        for server in "stu":
            self.assertEqual(s.grants.connectionsInUse(server), 0)
        self.assertEqual(s.grants.pools.waiting, 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_stopWaitsForJobs(self) -> None:
        """
        The stop fires only once every job's run has returned.
        """
        s = Scheduler([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        s.service.startService()
        slow = s.built["a"]
        slow.stop = lambda: setattr(slow, "stopped", True)  # type: ignore[method-assign]
        stopping = s.service.stopService()
        assert stopping is not None
        self.assertNoResult(stopping)
        slow.result.callback(False)
        self.successResultOf(stopping)

    def test_crashIsolation(self) -> None:
        """
        A job that crashes (a bug) is logged and fails alone, shown as
        failed with its error; the others start and run, and the queue is
        drained as not all completed.
        """
        s = Scheduler(
            [jobConfig("a", "a"), jobConfig("boom", "b"), jobConfig("c", "c")],
            maxJobs=2,
            crash=["boom"],
        )
        s.service.startService()
        self.assertEqual(s.started, ["a", "boom", "c"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        crashed = s.progress.job("boom")
        self.assertEqual(crashed.state, JobState.FAILED)
        self.assertEqual(crashed.error, "internal error: RuntimeError: a bug")
        self.assertIsNotNone(crashed.finishedAt)
        s.finish("a")
        s.finish("c")
        self.assertEqual(s.done, [False])
        self.assertEqual(s.grants.connectionsInUse("s"), 0)

    def test_impossibleGrantFailsTheJob(self) -> None:
        """
        A job whose first connections exceed a limit fails, saying why;
        the others run.
        """
        s = Scheduler(
            [jobConfig("same", "new", sourceUser="old"), jobConfig("b", "b")],
            maxJobs=2,
            limits=ServerLimits(1),
        )
        s.service.startService()
        failed = s.progress.job("same")
        self.assertEqual(failed.state, JobState.FAILED)
        self.assertIn("limit is 1", str(failed.error))
        self.assertEqual(s.started, ["b"])
        s.finish("b")
        self.assertEqual(s.done, [False])

    def test_leasesRenewed(self) -> None:
        """
        The running jobs' claims are renewed every third of the lease, so
        that they are never taken over; the renewal stops once drained.
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        for _ in range(10):
            s.clock.advance(200)
        # Still ours: nothing to claim, not even by another owner.
        self.assertIsNone(s.queue.claim("other", s.clock.seconds(), 600))
        s.finish("a")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_clockJumpDoesNotRunAJobTwice(self) -> None:
        """
        After the wall clock jumps past the lease (no renewal ran), a
        freed slot goes to the next job, not to a second run of a job
        that is running; every job runs once and the queue drains.
        """
        s = Scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=2)
        s.service.startService()
        s.clock.rightNow += 700
        s.finish("b")
        self.assertEqual(s.started, ["a", "b", "c"])
        self.assertEqual(s.service.runningJobs, ["a", "c"])
        s.finish("a")
        s.finish("c")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.queue.counts().finished, 3)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_runningJobClaimedAgain(self) -> None:
        """
        A shared queue that hands back a job this scheduler is running (its
        own lease lapsed) does not start it again: the running job goes on
        under the new claim, which its end finishes.
        """
        s = Scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=2)
        s.queue = ForgetfulQueue(s.queue)
        s.service._queue = AsyncJobQueue(s.queue)
        s.service._renewQueue = s.queue
        s.service.startService()
        s.clock.rightNow += 700
        s.finish("b")
        self.assertEqual(s.started, ["a", "b", "c"])
        s.finish("a")
        s.finish("c")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.queue.counts().finished, 3)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_finishOutcome(self) -> None:
        """
        The queue hears how each job ended.
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)
        outcomes: list[JobOutcome] = []
        finish = s.queue.finish

        def finishing(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
            outcomes.append(outcome)
            finish(claim, outcome, notBefore)

        s.queue.finish = finishing  # type: ignore[method-assign]
        s.service.startService()
        s.finish("a")
        self.assertEqual(outcomes, [JobOutcome.COMPLETED])


class DeferredJobTests(SynchronousTestCase):
    """
    A job whose run ends deferred (its daily budget used up) gives back its
    slot and connections, and runs again when due.
    """

    def test_deferredJobGivesBackItsSlot(self) -> None:
        """
        With C{max_jobs: 1}, a first job that defers until T gives its slot
        and connections at once to the second; the third follows; the queue
        is not drained while the first waits (C{whenDone} not called, one
        timer armed); at T it runs again, and once it completes the queue
        is drained with every job completed.
        """
        s = Scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=1)
        s.service.startService()
        self.assertEqual(s.started, ["a"])
        self.assertEqual(s.grants.connectionsInUse("s", "a"), 1)
        s.defer("a", 5000.0)
        self.assertEqual(s.started, ["a", "b"])
        self.assertEqual(s.grants.connectionsInUse("s", "a"), 0)
        self.assertEqual(s.grants.connectionsInUse("s"), 1)
        self.assertEqual(s.queue.counts().deferred, 1)
        s.finish("b")
        s.finish("c")
        self.assertEqual(s.started, ["a", "b", "c"])
        self.assertEqual(s.done, [])
        due = [c for c in s.clock.getDelayedCalls() if c.getTime() == 5000.0]
        self.assertEqual(len(due), 1)
        s.clock.advance(4999.0)
        self.assertEqual(s.started, ["a", "b", "c"])
        s.clock.advance(1.0)
        self.assertEqual(s.started, ["a", "b", "c", "a"])
        s.finish("a")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.queue.counts().finished, 3)
        self.assertEqual(s.grants.connectionsInUse("s"), 0)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_dueWhileSlotsTaken(self) -> None:
        """
        A deferred job that becomes due while every slot is taken waits for
        a slot, before the jobs after it in the configuration.
        """
        s = Scheduler([jobConfig(n, n) for n in ("a", "b", "c")], maxJobs=1)
        s.service.startService()
        s.defer("a", 100.0)
        s.clock.advance(200.0)
        self.assertEqual(s.started, ["a", "b"])
        s.finish("b")
        self.assertEqual(s.started, ["a", "b", "a"])
        s.finish("a")
        s.finish("c")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_earliestDueFirst(self) -> None:
        """
        One timer, for the earliest due deferred job: a job deferred to an
        earlier time than another's runs first, at its time.
        """
        s = Scheduler([jobConfig(n, n) for n in ("a", "b")], maxJobs=2)
        s.service.startService()
        s.defer("a", 900.0)
        s.defer("b", 300.0)
        due = [c.getTime() for c in s.clock.getDelayedCalls() if c.getTime() in (300.0, 900.0)]
        self.assertEqual(due, [300.0])
        s.clock.advance(300.0)
        self.assertEqual(s.started, ["a", "b", "b"])
        s.finish("b")
        s.clock.advance(600.0)
        self.assertEqual(s.started, ["a", "b", "b", "a"])
        s.finish("a")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_claimedAgainShowsWaiting(self) -> None:
        """
        A deferred job claimed again at its time shows as waiting for a
        connection grant.
        """
        s = Scheduler(
            [jobConfig("a", "alice"), jobConfig("b", "alice")],
            maxJobs=2,
            limits=ServerLimits(perAccount=AccountLimits(maxConnections=1)),
        )
        s.service.startService()
        progress = s.progress.job("a")
        s.defer("a", 100.0)
        self.assertEqual(s.started, ["a", "b"])
        self.assertEqual(progress.state, JobState.DEFERRED)
        s.clock.advance(100.0)
        self.assertEqual(
            (progress.state, progress.waitingFor), (JobState.WAITING, "a connection grant")
        )
        s.finish("b")
        self.assertEqual(s.started, ["a", "b", "a"])
        s.finish("a")
        self.assertEqual(s.done, [True])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_onlyDeferredJobsStopAtOnce(self) -> None:
        """
        A scheduler whose only job is deferred stays up (the queue is not
        drained), and a stop ends it at once, leaving no timer.
        """
        s = Scheduler([jobConfig("a", "a")], maxJobs=1)
        s.service.startService()
        s.defer("a", 86400.0)
        s.clock.advance(3600.0)
        self.assertEqual(s.done, [])
        self.assertEqual(s.service.runningJobs, [])
        stopping = s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(s.done, [])
        self.assertEqual(s.clock.getDelayedCalls(), [])


class GrantedOpenerTests(SynchronousTestCase):
    """
    A real L{MigrationJob} whose sessions are opened under grants.
    """

    def test_extraWaitGivenUp(self) -> None:
        """
        A job whose extra connections are never granted copies with its
        first connection, gives up the waiting ones when no work is left,
        and leaks no grant: once the job ends the pools are empty.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        for i in range(30):
            harness.source.add(inbox, f"m{i}", b"Subject: %d\r\n\r\nbody\r\n" % i)
        grants = ConnectionGrants(8, {"s": ServerLimits(2)})
        other = self.successResultOf(grants.connections([("s", "someone")]))
        connections = JobConnections(grants, [("s", USER_NAME)])
        self.successResultOf(connections.reserve())
        opener = grantedOpener(
            connections.grantFor("s", USER_NAME, wait=True),
            memoryOpener(harness.endpoint, harness.clock),
        )
        job = harness.job(JobSettings(connections=3, unitMessages=5))
        job._openSession = opener
        self.assertTrue(harness.run(job))
        self.assertEqual(len(harness.mail.mailbox(USER_NAME, "INBOX")), 30)
        self.assertEqual(grants.pools.waiting, 0)
        connections.end()
        other.release()
        self.assertEqual(grants.connectionsInUse("s"), 0)
        self.assertEqual(harness.clock.getDelayedCalls(), [])


USER_NAME = "alice"


class NoLeakTests(SynchronousTestCase):
    """
    Whatever ends a session or its opening, its grant goes back to the
    pools: a refused login, a refused connection, a dropped connection, a
    stop.  Every connection here is an extra one (the job's essential
    connection is on another account), so the pools count them all.
    """

    def harnessAndJob(
        self, harness: JobHarness, messages: int, connections: int = 2, **jobArgs: object
    ) -> tuple[ConnectionGrants, MigrationJob]:
        inbox = harness.source.addFolder("INBOX")
        for i in range(messages):
            harness.source.add(inbox, f"m{i}", b"Subject: %d\r\n\r\nbody\r\n" % i)
        grants = ConnectionGrants(8, {"s": ServerLimits(4)})
        connections_ = JobConnections(grants, [("s", "elsewhere")])
        self.successResultOf(connections_.reserve())
        self.addCleanup(connections_.end)
        job = harness.job(JobSettings(connections=connections, unitMessages=5, batchMessages=2), **jobArgs)  # type: ignore[arg-type]
        job._openSession = grantedOpener(
            connections_.grantFor("s", USER_NAME, wait=True),
            memoryOpener(harness.endpoint, harness.clock, str(jobArgs.get("password", "s3cret-pw"))),
        )
        return grants, job

    def assertNoneHeld(self, grants: ConnectionGrants, harness: JobHarness) -> None:
        harness.endpoint.pump()
        self.assertEqual(grants.connectionsInUse("s", USER_NAME), 0)
        self.assertEqual(grants.pools.waiting, 0)
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_completed(self) -> None:
        """
        A job that completes gives back every connection's grant.
        """
        harness = JobHarness(self)
        grants, job = self.harnessAndJob(harness, 20)
        self.assertTrue(harness.run(job))
        self.assertNoneHeld(grants, harness)

    def test_loginRefused(self) -> None:
        """
        A refused login gives its grant back (the job fails).
        """
        harness = JobHarness(self)
        grants, job = self.harnessAndJob(harness, 3, password="wrong")
        self.assertFalse(harness.run(job))
        self.assertEqual(harness.progress.state, JobState.FAILED)
        self.assertNoneHeld(grants, harness)

    def test_connectionRefusedThenRetried(self) -> None:
        """
        Refused connections (transient: the job backs off and retries) give
        their grants back each time.
        """
        harness = JobHarness(self, refuseConnections=[0, 1])
        grants, job = self.harnessAndJob(harness, 10)
        self.assertTrue(harness.run(job))
        self.assertNoneHeld(grants, harness)

    def test_droppedConnection(self) -> None:
        """
        Connections the server drops mid-copy give their grants back; the
        next attempt's connections are granted again.
        """
        harness = JobHarness(self, dropAfterAppends=4)
        grants, job = self.harnessAndJob(harness, 20)
        harness.run(job)
        self.assertNoneHeld(grants, harness)

    def test_stopped(self) -> None:
        """
        A job stopped mid-copy gives back its connections' grants.
        """
        harness = JobHarness(self)
        grants, job = self.harnessAndJob(harness, 12)
        harness.source.holdAfter = 1
        d = harness.start(job)
        self.assertNoResult(d)
        self.assertGreater(grants.connectionsInUse("s", USER_NAME), 0)
        d.cancel()
        harness.source.release()
        harness.settle(lambda: hasResult(d))
        self.assertFalse(self.successResultOf(d))
        self.assertNoneHeld(grants, harness)


class BuildServiceSchedulingTests(SynchronousTestCase):
    """
    The assembled daemon (L{buildService}) schedules its jobs under the
    configured limits, with a memory reactor.
    """

    def startWith(self, limits: dict[str, object]) -> tuple[MemoryReactorClock, MigrationService]:
        maildir = makeMaildir(self)
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "status": "off",
                "max_jobs": 2,
                "servers": {
                    "s": {
                        "endpoint": "tcp:mail.example:1143",
                        "starttls": "off",
                        "allow_plaintext": True,
                        **limits,
                    }
                },
                "jobs": [
                    {
                        "name": name,
                        "source": {"maildir": maildir},
                        "destination": {"server": "s", "user": name, "password": "p"},
                    }
                    for name in ("a", "b", "c")
                ],
            },
            "test.yaml",
        )
        reactor = MemoryReactorClock()
        service = buildService(config, reactor, store=MemoryStateStore())
        service.startService()
        return reactor, service

    def stop(self, reactor: MemoryReactorClock, service: MigrationService) -> None:
        stopping = service.stopService()
        # The connections never open: their connect timeout ends the jobs.
        reactor.advance(120)
        self.successResultOf(stopping)
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_maxJobs(self) -> None:
        """
        With C{max_jobs: 2}, the first two jobs connect; the third is
        queued, and its source is not even built.
        """
        reactor, service = self.startWith({})
        self.assertEqual(len(reactor.tcpClients), 2)
        states = [job.state for job in service.progress]
        self.assertEqual(states, [JobState.CONNECTING, JobState.CONNECTING, JobState.QUEUED])
        self.stop(reactor, service)

    def test_maxConnections(self) -> None:
        """
        With C{max_connections: 1}, one job connects; the second waits for
        a connection grant, as its progress says.
        """
        reactor, service = self.startWith({"max_connections": 1})
        self.assertEqual(len(reactor.tcpClients), 1)
        self.assertEqual(service.progress.job("b").waitingFor, "a connection grant")
        self.stop(reactor, service)
