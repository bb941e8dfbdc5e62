"""
Tests for L{imapmig.schedule.fleet}: a daemon's membership of a fleet (its
registration, heartbeat, send deadline and new incarnation), on a
L{Clock} over the in-memory queue made asynchronous
(L{imapmig.queue.memory.AsyncJobQueue}).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence, cast

from attrs import evolve
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.config import parseConfig
from imapmig.config.limits import ServerLimits
from imapmig.daemon.service import _ServiceTree
from imapmig.schedule.census import SourceCensus
from imapmig.config.model import JobConfig
from imapmig.errors import (
    ControlRefused,
    LeaseLost,
    PermanentError,
    QueueUnavailable,
    UnknownJob,
)
from imapmig.imap.outgoing import SendDeadline
from imapmig.job.machine import JobMachines
from imapmig.job.queuewrite import CONTROL_ANSWER, WRITE_RETRY
from imapmig.progress import JobState, MigrationProgress
from imapmig.queue import (
    Heartbeat,
    IAsyncJobQueue,
    JobClaim,
    JobOutcome,
    QueueCounts,
    QueueState,
    Requested,
)
from imapmig.queue.memory import AsyncJobQueue, InMemoryJobQueue
from imapmig.schedule import scheduler
from imapmig.schedule.fleet import FleetScheduler
from imapmig.schedule.member import SEND_DEADLINE, FleetMember
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, JobConnections
from imapmig.state import IStateStore, Transition
from imapmig.state.memory import MemoryStateStore
from tests.test_schedule_service import FakeJob, jobConfig
from tests.test_service import makeMaildir

LEASE = 60.0


class ControlledQueue(AsyncJobQueue):
    """
    The in-memory queue, whose heartbeats a test can hold unanswered, make
    fail, or answer with more than the in-memory queue says.
    """

    def __init__(self, queue: InMemoryJobQueue) -> None:
        AsyncJobQueue.__init__(self, queue)
        self.hold = False
        self.failure: Exception | None = None
        self.pending: list[Deferred[Heartbeat]] = []
        self.beats = 0
        self.retired: list[str] = []
        self.schemaVersion: int | None = None
        self.requestedBy: tuple[tuple[str, str], ...] = ()
        self.jobsGeneration: int | None = None
        self.differs: str | None = None
        self.stateSchemaVersion: int | None = None
        self.rates: list[float | None] = []
        # Retirements held unanswered (a partition), while holdRetire.
        self.holdRetire = False
        self.pendingRetires: list[Deferred[None]] = []

    def heartbeat(
        self, owner: str, lease: float, rate: float | None = None
    ) -> Deferred[Heartbeat]:
        self.beats += 1
        self.rates.append(rate)
        if self.failure is not None:
            return fail(self.failure)
        if self.hold:
            pending: Deferred[Heartbeat] = Deferred()
            self.pending.append(pending)
            return pending

        def more(heartbeat: Heartbeat) -> Heartbeat:
            return Heartbeat(
                heartbeat.leaseUntil,
                heartbeat.requests,
                self.requestedBy,
                self.schemaVersion,
                self.jobsGeneration,
                stateSchemaVersion=self.stateSchemaVersion,
            )

        return AsyncJobQueue.heartbeat(self, owner, lease).addCallback(more)

    def listDiffers(self) -> Deferred[str | None]:
        return succeed(self.differs)

    def retire(self, owner: str) -> Deferred[None]:
        self.retired.append(owner)
        if self.holdRetire:
            pending: Deferred[None] = Deferred()
            self.pendingRetires.append(pending)
            return pending
        return AsyncJobQueue.retire(self, owner)


class Member:
    """
    A L{FleetMember} over a controlled in-memory queue and a clock.
    """

    def __init__(
        self,
        schemaVersion: int | None = None,
        stateSchemaVersion: int | None = None,
        rate: Callable[[], float] | None = None,
    ) -> None:
        self.clock = Clock()
        self.memory = InMemoryJobQueue([jobConfig("j", "j"), jobConfig("k", "k")], self.clock.seconds)
        self.queue = ControlledQueue(self.memory)
        self.jobs = Jobs()
        self.member = FleetMember(
            self.queue, self.clock, self.clock.seconds, LEASE, self.jobs, "mig1", 42, "1.0",
            schemaVersion, stateSchemaVersion=stateSchemaVersion, rate=rate,
        )  # fmt: skip


class Jobs:
    """
    A L{FleetJobs} that notes what it is told.
    """

    def __init__(self) -> None:
        self.lost: list[str] = []
        self.requests: list[tuple[str, Requested, str]] = []
        self.newer: list[int] = []
        self.registrations = 0

    def loseLease(self, reason: str) -> None:
        self.lost.append(reason)

    def asked(self, job: str, requested: Requested, by: str) -> None:
        self.requests.append((job, requested, by))

    def newerSchema(self, version: int) -> None:
        self.newer.append(version)

    def registered(self) -> None:
        self.registrations += 1


class FleetMemberTests(SynchronousTestCase):
    """
    L{FleetMember}: registered, beating every C{L/12}, its send deadline
    C{t0 + L - L/4} of the last heartbeat answered.
    """

    def setUp(self) -> None:
        self.m = Member(schemaVersion=1)
        self.clock = self.m.clock
        self.member = self.m.member

    def tearDown(self) -> None:
        self.successResultOf(self.member.stop())
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_asyncQueue(self) -> None:
        """
        The in-memory queue made asynchronous provides L{IAsyncJobQueue}.
        """
        self.assertTrue(verifyObject(IAsyncJobQueue, self.m.queue))

    def test_beats(self) -> None:
        """
        Started, it registers at once (its deadline C{45 s} later for a
        lease of 60 s), then beats every 5 s, each success moving the
        deadline to 45 s after it was sent.
        """
        self.member.start()
        self.assertIsNotNone(self.member.owner)
        self.assertEqual(self.m.jobs.registrations, 1)
        self.assertEqual(self.member.deadline, 45.0)
        self.clock.advance(5)
        self.assertEqual(self.m.queue.beats, 1)
        self.assertEqual(self.member.deadline, 50.0)
        self.clock.pump([5] * 20)
        self.assertEqual(self.m.queue.beats, 21)
        self.assertEqual(self.member.deadline, 150.0)
        self.assertEqual(self.m.jobs.lost, [])

    def test_sendDeadline(self) -> None:
        """
        The send deadline the jobs' pipelines compare before each write
        follows the member's: passed before the registration, moved by
        each heartbeat answered, passed again once the lease is lost or
        the member stopped.
        """
        deadline = self.member.sendDeadline
        self.assertTrue(deadline.passed())
        self.member.start()
        self.assertEqual(deadline.at, 45.0)
        self.assertFalse(deadline.passed())
        self.clock.advance(5)
        self.assertEqual(deadline.at, 50.0)
        register = self.m.queue.register

        def refused(host: str, pid: int, version: str, lease: float) -> Deferred[str]:
            return fail(QueueUnavailable("db1: connection refused"))

        self.m.queue.register = refused  # type: ignore[method-assign]
        self.member.lose("a test")
        self.assertTrue(deadline.passed())
        self.m.queue.register = register  # type: ignore[method-assign]
        self.clock.advance(5)
        self.assertEqual(deadline.at, 55.0)
        self.successResultOf(self.member.stop())
        self.assertTrue(deadline.passed())

    def test_listDiffersOncePerGeneration(self) -> None:
        """
        At each new generation of the fleet's job list it sees (a reload on
        another daemon), the daemon says once, at warning level, why its
        own list now differs from the fleet's; a generation after which its
        list is the fleet's says nothing.
        """
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        self.m.queue.jobsGeneration = 1
        self.member.start()
        self.clock.pump([5] * 3)
        self.m.queue.jobsGeneration = 2
        self.m.queue.differs = "this daemon's job list (digest d1) is not the one of fleet 'x'"
        self.clock.pump([5] * 3)
        self.m.queue.jobsGeneration = 3
        self.m.queue.differs = None
        self.clock.pump([5] * 3)
        warned = [formatEvent(e) for e in events if e["log_level"] is LogLevel.warn]
        self.assertEqual(
            warned,
            [
                "The fleet's job list changed (generation 2): this daemon's job list"
                " (digest d1) is not the one of fleet 'x'"
            ],
        )

    def test_t0BeforeTheCall(self) -> None:
        """
        The deadline counts from when the heartbeat was handed over, not
        from its answer: one answered 4 s late gives no more time.
        """
        self.member.start()
        self.m.queue.hold = True
        self.clock.advance(5)
        self.clock.advance(4)
        (pending,) = self.m.queue.pending
        pending.callback(Heartbeat(0.0))
        self.assertEqual(self.member.deadline, 50.0)

    def test_oneInFlight(self) -> None:
        """
        A heartbeat not answered within C{H} counts as failed, and no
        other is sent while it is in flight.
        """
        self.member.start()
        self.m.queue.hold = True
        self.clock.pump([5, 5, 5])
        self.assertEqual(len(self.m.queue.pending), 1)
        self.assertEqual(self.member.missed, 2)
        self.m.queue.pending[0].callback(Heartbeat(0.0))
        self.assertEqual(self.member.missed, 0)
        self.m.queue.hold = False
        self.clock.advance(5)
        self.assertEqual(self.m.queue.beats, 2)

    def test_deadline(self) -> None:
        """
        With no heartbeat answered, at the send deadline every job held is
        told its lease is lost, the id is retired, and a new incarnation
        registers once the queue answers again.
        """
        self.member.start()
        first = self.member.owner
        self.m.queue.failure = QueueUnavailable("db1: connection refused")
        self.clock.pump([5] * 8)
        self.assertEqual(self.m.jobs.lost, [])
        self.assertEqual(self.member.missed, 8)
        self.clock.advance(4.9)
        self.assertEqual(self.m.jobs.lost, [])
        self.clock.advance(0.1)
        self.assertEqual(self.m.jobs.lost, [SEND_DEADLINE])
        self.assertEqual(self.m.queue.retired, [first])
        # Registered again at once: the in-memory queue answers that.
        self.assertNotIn(self.member.owner, (None, first))
        self.assertEqual(self.m.jobs.registrations, 2)
        self.assertEqual(self.member.deadline, 90.0)

    def test_deadlineWhileACallHangs(self) -> None:
        """
        A heartbeat that never answers: the deadline passes all the same,
        and the new incarnation registers once that call has ended.
        """
        self.member.start()
        self.m.queue.hold = True
        self.clock.pump([5] * 9)
        self.assertEqual(self.m.jobs.lost, [SEND_DEADLINE])
        self.assertIsNone(self.member.owner)
        self.m.queue.pending[0].errback(QueueUnavailable("statement timeout"))
        self.clock.advance(5)
        self.assertIsNotNone(self.member.owner)
        self.assertEqual(self.m.jobs.lost, [SEND_DEADLINE])

    def test_lateAnswerAfterTheDeadline(self) -> None:
        """
        A heartbeat answered after the deadline passed does not bring the
        old incarnation back.
        """
        self.member.start()
        self.m.queue.hold = True
        self.clock.pump([5] * 9)
        self.m.queue.pending[0].callback(Heartbeat(1000.0))
        self.assertIsNone(self.member.owner)
        self.assertIsNone(self.member.deadline)

    def test_leaseLost(self) -> None:
        """
        A heartbeat refused with L{LeaseLost} is the deadline now.
        """
        self.member.start()
        first = self.member.owner
        self.m.queue.failure = LeaseLost("daemon's lease ran out")
        self.clock.advance(5)
        self.assertEqual(len(self.m.jobs.lost), 1)
        self.assertIn("lease ran out", self.m.jobs.lost[0])
        self.assertEqual(self.m.queue.retired, [first])

    def test_requests(self) -> None:
        """
        The controls asked of the jobs held reach them once each while
        they stand, with who asked them.
        """
        self.member.start()
        owner = self.member.owner
        assert owner is not None
        claim = self.m.memory.claim(owner, 0.0, LEASE)
        assert claim is not None
        self.m.memory.pause("j")
        self.m.queue.requestedBy = (("j", "alice"),)
        self.clock.pump([5, 5])
        self.assertEqual(self.m.jobs.requests, [("j", Requested.PAUSE, "alice")])
        self.m.memory.resume("j")
        self.clock.advance(5)
        self.m.memory.cancel("j")
        self.m.queue.requestedBy = ()
        self.clock.advance(5)
        self.assertEqual(
            self.m.jobs.requests,
            [("j", Requested.PAUSE, "alice"), ("j", Requested.CANCEL, "imapmig")],
        )

    def test_newerSchema(self) -> None:
        """
        A heartbeat that finds the schema newer than the code's says so
        once; the heartbeats go on while the jobs stop.
        """
        self.member.start()
        self.m.queue.schemaVersion = 2
        self.clock.pump([5, 5])
        self.assertEqual(self.m.jobs.newer, [2])
        self.assertTrue(self.member.newerSchema)
        self.assertEqual(self.member.deadline, 55.0)

    def test_newerStateSchema(self) -> None:
        """
        A heartbeat that finds the state store's schema newer than the
        code's stops the jobs as a newer queue schema does; one as old as
        the code's does not.
        """
        m = Member(schemaVersion=1, stateSchemaVersion=7)
        m.member.start()
        m.queue.stateSchemaVersion = 7
        m.clock.advance(5)
        self.assertEqual(m.jobs.newer, [])
        self.assertFalse(m.member.newerSchema)
        m.queue.stateSchemaVersion = 8
        m.clock.pump([5, 5])
        self.assertEqual(m.jobs.newer, [8])
        self.assertTrue(m.member.newerSchema)

    def test_rateGiven(self) -> None:
        """
        Each heartbeat gives the queue the daemon's rate of the moment;
        without one, L{None}.
        """
        rates = iter([1.5, 2.5])
        m = Member(rate=lambda: next(rates))
        m.member.start()
        m.clock.pump([5, 5])
        self.assertEqual(m.queue.rates, [1.5, 2.5])
        self.m.member.start()
        self.m.clock.advance(5)
        self.assertEqual(self.m.queue.rates, [None])

    def test_listDiffersShown(self) -> None:
        """
        Why the daemon's job list differs from the fleet's is kept for its
        pages, and forgotten once a later generation finds them the same.
        """
        self.m.member.start()
        self.m.queue.jobsGeneration = 1
        self.m.queue.differs = "its file differs"
        self.m.clock.advance(5)
        self.assertEqual(self.m.member.listDiffers(), "its file differs")
        self.m.queue.jobsGeneration = 2
        self.m.queue.differs = None
        self.m.clock.advance(5)
        self.assertIsNone(self.m.member.listDiffers())

    def test_registrationRetried(self) -> None:
        """
        A registration the queue cannot answer is tried again C{H} later.
        """
        calls = []
        register = self.m.queue.register

        def failOnce(host: str, pid: int, version: str, lease: float) -> Deferred[str]:
            calls.append((host, pid, version, lease))
            if len(calls) == 1:
                return fail(QueueUnavailable("db1: connection refused"))
            return register(host, pid, version, lease)

        self.m.queue.register = failOnce  # type: ignore[method-assign]
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        self.member.start()
        self.assertIsNone(self.member.owner)
        # Unregistered, it holds no lease (not "the send deadline is in nan s").
        [said] = [e for e in events if "cannot be reached" in e.get("log_format", "")]
        self.assertIn("no lease held", said["then"])
        self.assertIn("db1: connection refused", said["why"])
        self.clock.advance(5)
        self.assertIsNotNone(self.member.owner)
        self.assertEqual(calls, [("mig1", 42, "1.0", LEASE)] * 2)
        self.assertEqual(self.member.deadline, 50.0)

    def test_outageLoggedOnce(self) -> None:
        """
        A database unreachable for 40 s (within the send deadline; a
        heartbeat every 5 s failing) is one warning when it stops answering
        (the error, naming the database), one repeat after 30 s, and one
        line when it answers again, how long it was away (found from
        outside: a warning at every heartbeat).
        """
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        self.member.start()
        self.m.queue.failure = QueueUnavailable("db1: connection refused")
        self.clock.pump([1.0] * 40)
        self.m.queue.failure = None
        self.clock.pump([5.0] * 2)
        said = [
            formatEvent(e) for e in events
            if e.get("log_namespace") == "imapmig.schedule.member"
            and e["log_level"] in (LogLevel.warn, LogLevel.info)
            and "database" in formatEvent(e)
        ]  # fmt: skip
        self.assertEqual(len(said), 3, said)
        self.assertIn("cannot be reached (db1: connection refused)", said[0])
        self.assertIn("still cannot be reached after 30 s", said[1])
        self.assertIn("answers again after 40", said[2])

    def test_stop(self) -> None:
        """
        Stopped, it beats no more and retires its id.
        """
        self.member.start()
        owner = self.member.owner
        self.successResultOf(self.member.stop())
        self.assertEqual(self.m.queue.retired, [owner])
        self.assertIsNone(self.member.owner)


class PartitionedStopTests(SynchronousTestCase):
    """
    A daemon stopped while the queue's calls hang (its one connection cut
    off in a partition: a heartbeat unanswered, the calls behind it
    queued): its stop does not wait for the database.
    """

    def test_retireAtStopBounded(self) -> None:
        """
        A retirement at stop that is not answered is waited for C{H} at
        most (its lease then ends by itself), and is cancelled.
        """
        m = Member()
        m.member.start()
        m.queue.holdRetire = True
        stopping = m.member.stop()
        self.assertNoResult(stopping)
        m.clock.advance(LEASE / 12)
        self.successResultOf(stopping)
        self.assertTrue(m.queue.pendingRetires[0].called)
        self.assertEqual(m.clock.getDelayedCalls(), [])

    def hangingFinishes(self, fleet: Fleet) -> list[Deferred[None]]:
        """
        Make every finish, heartbeat and retirement of C{fleet} hang.

        @return: the finishes, as they are asked.
        """
        pending: list[Deferred[None]] = []

        def hanging(
            claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
        ) -> Deferred[None]:
            d: Deferred[None] = Deferred()
            pending.append(d)
            return d

        fleet.queue.finish = hanging  # type: ignore[method-assign]
        fleet.queue.hold = True
        fleet.queue.holdRetire = True
        return pending

    def test_stopWhileTheQueueHangs(self) -> None:
        """
        A job ends while its heartbeats and its finish hang; the daemon is
        told to stop (SIGTERM): its stop ends C{H} later, its retirement
        not waited for, the claim left as it is.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        pending = self.hangingFinishes(fleet)
        fleet.clock.advance(LEASE / 12)
        fleet.built["a"].result.callback(True)
        self.assertEqual(len(pending), 1)
        stopping = fleet.service.stopService()
        self.assertNoResult(stopping)
        fleet.clock.advance(LEASE / 12)
        self.successResultOf(stopping)
        self.assertIs(fleet.memory.state("a"), QueueState.CLAIMED)
        self.assertEqual(fleet.clock.getDelayedCalls(), [])

    def test_finishHangingGivenUpAtTheDeadline(self) -> None:
        """
        A finish that hangs is given up (cancelled) when the lease is lost
        at the send deadline: the job's slot is free again, the claim the
        next owner's, and the daemon's stop then ends.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        pending = self.hangingFinishes(fleet)
        fleet.clock.advance(LEASE / 12)
        fleet.built["a"].result.callback(True)
        fleet.clock.pump([LEASE / 12] * 7)
        self.assertNoResult(pending[0])
        self.assertEqual(fleet.grants.pools.inUse(JOB_SLOTS), 1)
        fleet.clock.advance(LEASE / 12)
        self.assertEqual(fleet.member.deadline, None)
        self.assertTrue(pending[0].called)
        self.assertEqual(fleet.grants.pools.inUse(JOB_SLOTS), 0)
        self.assertIs(fleet.memory.state("a"), QueueState.CLAIMED)
        stopping = fleet.service.stopService()
        for beat in fleet.queue.pending:
            beat.errback(QueueUnavailable("partitioned"))
        fleet.clock.advance(LEASE / 12)
        self.successResultOf(stopping)
        self.assertEqual(fleet.clock.getDelayedCalls(), [])


class TakeoverTests(SynchronousTestCase):
    """
    Two members of one fleet: the jobs of one that loses its lease are
    the other's at once, its retirement ending its lease.
    """

    def test_takenOverAtTheDeadline(self) -> None:
        """
        A daemon whose heartbeats fail stops its jobs at its deadline and
        retires: another daemon's next claim takes its job over.
        """
        a = Member()
        clock = a.clock
        b = FleetMember(
            AsyncJobQueue(a.memory), clock, clock.seconds, LEASE, Jobs(), "mig2", 7, "1.0"
        )
        a.member.start()
        b.start()
        owner = a.member.owner
        assert owner is not None and b.owner is not None
        claim = a.memory.claim(owner, 0.0, LEASE)
        assert claim is not None
        a.queue.failure = QueueUnavailable("partitioned")
        clock.pump([5] * 8)
        before = a.memory.claim(b.owner, 0.0, LEASE)
        self.assertEqual(before.job.name if before else None, "k")
        clock.advance(5)
        self.assertEqual(a.jobs.lost, [SEND_DEADLINE])
        taken = a.memory.claim(b.owner, 0.0, LEASE)
        assert taken is not None
        self.assertEqual((taken.job.name, taken.takenFrom), ("j", owner))
        a.queue.failure = None
        self.successResultOf(a.member.stop())
        self.successResultOf(b.stop())
        self.assertEqual(clock.getDelayedCalls(), [])


class Fleet:
    """
    A L{FleetScheduler} over fake jobs, a clock and the controlled
    in-memory queue, whose other daemons the test plays by hand.
    """

    def __init__(
        self,
        names: Sequence[str],
        maxJobs: int,
        limits: ServerLimits = ServerLimits(),
        store: IStateStore | None = None,
        listed: Sequence[str] | None = None,
        exitWhenDone: bool = True,
    ) -> None:
        self.clock = Clock()
        self.progress = MigrationProgress(self.clock.seconds)
        # The jobs the progress lists at start (all of them by default).
        for name in names if listed is None else listed:
            self.progress.addJob(name)
        self.memory = InMemoryJobQueue([jobConfig(n, n) for n in names], self.clock.seconds)
        self.queue = ControlledQueue(self.memory)
        self.grants = ConnectionGrants(maxJobs, {"s": limits})
        self.built: dict[str, FakeJob] = {}
        # The store and the send deadline each job was built with.
        self.stores: dict[str, IStateStore | None] = {}
        self.deadlines: dict[str, SendDeadline] = {}
        self.takeovers: dict[str, float | None] = {}
        self.done: list[bool] = []
        self.exits = 0
        self.transitions: list[tuple[str, Transition]] = []
        self.machines = JobMachines(
            self.progress, self.clock, lambda job, t: self.transitions.append((job, t)), self.queue
        )

        def build(
            config: JobConfig,
            connections: JobConnections,
            store: IStateStore | None,
            deadline: SendDeadline,
            takeover: float | None,
        ) -> FakeJob:
            job = FakeJob(config.name, connections, self.machines.job(config.name))
            self.built[config.name] = job
            self.stores[config.name] = store
            self.deadlines[config.name] = deadline
            self.takeovers[config.name] = takeover
            return job

        def exit() -> None:
            self.exits += 1

        self.service = FleetScheduler(
            self.queue, self.grants, build, self.progress, self.clock,
            self.done.append if exitWhenDone else None,
            self.clock.seconds, LEASE, ("mig1", 42, "1.0"), exit, schemaVersion=1,
            store=store, machines=self.machines,
        )  # fmt: skip
        self.member = self.service.member

    def other(self) -> str:
        """
        Register another daemon, which beats by hand.
        """
        return self.memory.register("mig2", 7, "1.0", LEASE)

    def causes(self, job: str) -> list[str]:
        return [t.cause for name, t in self.transitions if name == job]


class FleetSchedulerTests(SynchronousTestCase):
    """
    L{FleetScheduler}: claims and finishes through the shared queue under
    its member's id; a lost lease abandons its jobs, unfinished.
    """

    def stop(self, fleet: Fleet) -> None:
        self.successResultOf(fleet.service.stopService())
        self.assertEqual(fleet.clock.getDelayedCalls(), [])

    def test_claimsAndFinishes(self) -> None:
        """
        Jobs are claimed under the daemon's id, each claim a transition
        naming its generation; finished, they are done in the queue, and
        with nothing left to run anywhere the queue is drained.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        fleet.service.startService()
        self.assertEqual(sorted(fleet.built), ["a", "b"])
        self.assertEqual(fleet.causes("a")[:2], ["claimed (generation 1)", "started"])
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        self.assertEqual(fleet.done, [])
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.done, [True])
        owner = fleet.member.owner
        self.stop(fleet)
        self.assertEqual(fleet.queue.retired, [owner])

    def test_unlistedJobHeldOnly(self) -> None:
        """
        A claimed job the progress does not list (a user list's row, kept
        as written) is listed while this daemon holds it, and forgotten
        with its machine once its claim finished; a listed job stays.
        """
        fleet = Fleet(["a", "b"], maxJobs=2, listed=["a"])
        fleet.service.startService()
        self.assertEqual(sorted(fleet.built), ["a", "b"])
        self.assertEqual(sorted(job.name for job in fleet.progress), ["a", "b"])
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.memory.state("b"), QueueState.DONE)
        self.assertEqual([job.name for job in fleet.progress], ["a"])
        self.assertIn("started", fleet.causes("b"))
        fleet.transitions.clear()
        fleet.machines.job("a")
        self.assertEqual(sorted(fleet.machines._machines), ["a"])
        fleet.built["a"].result.callback(True)
        self.assertEqual([job.name for job in fleet.progress], ["a"])
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_notDrainedWhileAnotherRuns(self) -> None:
        """
        Nothing to claim here is not drained while another daemon holds a
        job; claims are polled every C{H}, and its job, released when that
        daemon's lease ends, is taken over here, logged as a warning.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, 0.0, LEASE)
        assert held is not None
        fleet.service.startService()
        self.assertEqual(sorted(fleet.built), ["b"])
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.done, [])
        warnings: list[LogEvent] = []
        observer = cast(ILogObserver, warnings.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        fleet.clock.pump([5] * 13)
        self.assertIn("a", fleet.built)
        self.assertIn(f"claimed (generation 3), taken over from daemon {other}", fleet.causes("a"))
        self.assertTrue(
            any(e.get("log_level") == LogLevel.warn and e.get("daemon") == other for e in warnings)
        )
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_drainedSoonAfterTheLastJobElsewhere(self) -> None:
        """
        With nothing left but another daemon's claim, the daemon watches
        the queue's counts ten times a period: the other's last job done,
        it sees the queue drained within a tenth of a period, not at its
        next claim a period later; the watch reads nothing more once the
        queue is drained, and stops with the daemon.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, 0.0, LEASE)
        assert held is not None
        fleet.service.startService()
        fleet.built["b"].result.callback(True)
        period = fleet.member.period
        self.assertEqual(period, LEASE / 12)
        fleet.clock.advance(period / 10)
        self.assertEqual(fleet.done, [])
        fleet.memory.finish(held, JobOutcome.COMPLETED)
        fleet.clock.advance(period / 10)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_tailWatchedForALease(self) -> None:
        """
        The counts are watched for a lease from the first look that found
        only other daemons' claims; after that, a daemon looks once a
        period, at its claim.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, 0.0, LEASE)
        assert held is not None
        fleet.service.startService()
        fleet.built["b"].result.callback(True)
        period = fleet.member.period
        reads: list[float] = []
        counts = fleet.queue.counts

        def counted() -> Deferred[QueueCounts]:
            reads.append(fleet.clock.seconds())
            return counts()

        self.patch(fleet.queue, "counts", counted)
        fleet.clock.pump([period / 10] * 10)
        self.assertGreaterEqual(len(reads), 10)
        for _ in range(12):
            fleet.memory.heartbeat(other, LEASE)
            fleet.clock.pump([period / 10] * 10)
        del reads[:]
        fleet.memory.heartbeat(other, LEASE)
        fleet.clock.pump([period / 10] * 10)
        self.assertLessEqual(len(reads), 2, reads)
        fleet.memory.finish(held, JobOutcome.COMPLETED)
        fleet.clock.advance(period)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_tailWatchEndsUnread(self) -> None:
        """
        Counts the watch cannot read (the database restarting) end the
        watch quietly: the queue is seen drained at the period's claim.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, 0.0, LEASE)
        assert held is not None
        fleet.service.startService()
        fleet.built["b"].result.callback(True)
        period = fleet.member.period
        counts = fleet.queue.counts
        self.patch(fleet.queue, "counts", lambda: fail(QueueUnavailable("restarting")))
        fleet.clock.advance(period / 10)
        self.patch(fleet.queue, "counts", counts)
        fleet.memory.finish(held, JobOutcome.COMPLETED)
        fleet.clock.advance(period / 10)
        self.assertEqual(fleet.done, [])
        fleet.clock.advance(period)
        self.assertEqual(fleet.done, [True])
        self.assertEqual(self.flushLoggedErrors(), [])
        self.stop(fleet)

    def test_tailWatchEndsWithAChange(self) -> None:
        """
        A job queued again while others' claims were the only ones left
        (a rerun asked) ends the watch at once: the daemon claims it
        within a tenth of a period.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, 0.0, LEASE)
        assert held is not None
        fleet.service.startService()
        fleet.built["b"].result.callback(True)
        fleet.memory.finish(held, JobOutcome.STOPPED)
        self.assertEqual(fleet.memory.state("a"), QueueState.QUEUED)
        fleet.clock.advance(fleet.member.period / 10)
        self.assertIn("a", fleet.built)
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_claimsAfterEverythingEnded(self) -> None:
        """
        Without C{--exit-when-done} (a daemon under systemd), a daemon
        whose fleet's jobs have all ended goes on polling: a job queued
        again through another daemon (its page's retry-failed or resume, a
        reload there, C{state load-jobs}) is claimed here at the next poll.
        (It stopped claiming for good: a daemon started on a fleet whose
        jobs had all failed never ran the jobs another daemon's bulk
        retry-failed queued again, which that one daemon ran alone.)
        """
        fleet = Fleet(["a", "b"], maxJobs=2, exitWhenDone=False)
        fleet.service.startService()
        fleet.built["a"].result.callback(True)
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        first = fleet.built.pop("a")
        fleet.memory.requeue("a")
        fleet.clock.pump([fleet.member.period] * 2)
        self.assertIn("a", fleet.built)
        self.assertIsNot(fleet.built["a"], first)
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        self.stop(fleet)

    def test_leaseLostRunning(self) -> None:
        """
        At the send deadline a running job abandons its run and ends
        stopped (lease lost); its claim is not finished, and the new
        incarnation takes it over once the abandoned run has ended.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        first = fleet.member.owner
        job = fleet.built["a"]
        finished: list[JobOutcome] = []
        finish = fleet.memory.finish

        def finishing(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
            finished.append(outcome)
            finish(claim, outcome, notBefore)

        fleet.memory.finish = finishing  # type: ignore[method-assign]
        fleet.queue.failure = QueueUnavailable("partitioned")
        fleet.clock.pump([5] * 9)
        self.assertTrue(job.abandoned)
        self.assertEqual(finished, [])
        causes = fleet.causes("a")
        self.assertEqual(causes[causes.index("lease lost") - 1], f"lease lost: {SEND_DEADLINE}")
        fleet.queue.failure = None
        again = fleet.built["a"]
        self.assertIsNot(again, job)
        self.assertIn(f"claimed (generation 2), taken over from daemon {first}", fleet.causes("a"))
        again.result.callback(True)
        self.assertEqual(finished, [JobOutcome.COMPLETED])
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_claimAnswerLost(self) -> None:
        """
        A claim that committed but failed unanswered (C{QueueUnavailable})
        holds a job this daemon does not know of: the next claim first gives
        it back, as taken over from this daemon, and claims it again.
        """
        fleet = Fleet(["a"], maxJobs=1)
        claim = fleet.memory.claim
        lost = [True]

        def claiming(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> JobClaim | None:
            claimed = claim(owner, now, lease, skipServers)
            if lost.pop() if lost else False:
                raise QueueUnavailable("the connection broke during COMMIT")
            return claimed

        fleet.memory.claim = claiming  # type: ignore[method-assign]
        fleet.service.startService()
        owner = fleet.member.owner
        self.assertNotIn("a", fleet.built)
        self.assertEqual(fleet.memory.state("a"), QueueState.CLAIMED)
        fleet.clock.pump([5] * 3)
        self.assertIn("a", fleet.built)
        self.assertIn(f"claimed (generation 2), taken over from daemon {owner}", fleet.causes("a"))
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_claimAndFinishAnswersLost(self) -> None:
        """
        In one outage a claim commits unanswered and a finish commits
        unanswered: the finish, tried again, changes nothing more (the job
        done once, its generation still 1), the unknown claim is given back
        by the next claim and run, and nothing is left claimed.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        claimNext, finish = fleet.memory.claim, fleet.memory.finish
        claims: list[str] = []
        finishes: list[str] = []

        def claiming(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> JobClaim | None:
            claimed = claimNext(owner, now, lease, skipServers)
            if claimed is not None:
                claims.append(claimed.job.name)
                if claims == ["a", "b"]:
                    raise QueueUnavailable("the connection broke during COMMIT")
            return claimed

        def finishing(
            claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
        ) -> None:
            finishes.append(claim.job.name)
            finish(claim, outcome, notBefore)
            if len(finishes) == 1:
                raise QueueUnavailable("the connection broke during COMMIT")

        fleet.memory.claim = claiming  # type: ignore[method-assign]
        fleet.memory.finish = finishing  # type: ignore[method-assign]
        fleet.service.startService()
        owner = fleet.member.owner
        self.assertEqual(sorted(fleet.built), ["a"])
        fleet.built["a"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        fleet.clock.pump([LEASE / 12] * 3)
        self.assertEqual(finishes[:2], ["a", "a"])
        self.assertIn("b", fleet.built)
        self.assertIn(f"taken over from daemon {owner}", " ".join(fleet.causes("b")))
        self.assertEqual(claims.count("a"), 1)
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.memory.state("b"), QueueState.DONE)
        self.assertEqual(fleet.memory.counts().claimed, 0)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_claimAnswerLostThenStopped(self) -> None:
        """
        A daemon stopped before its next claim could give back a claim
        whose answer was lost retires its id: another daemon takes that
        job over at once, not when the lease would have ended.
        """
        fleet = Fleet(["a"], maxJobs=1)
        claim = fleet.memory.claim

        def claiming(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> JobClaim | None:
            claim(owner, now, lease, skipServers)
            raise QueueUnavailable("the connection broke during COMMIT")

        fleet.memory.claim = claiming  # type: ignore[method-assign]
        fleet.service.startService()
        owner = fleet.member.owner
        self.assertEqual(fleet.memory.state("a"), QueueState.CLAIMED)
        self.stop(fleet)
        taken = claim(fleet.other(), fleet.clock.seconds(), LEASE)
        assert taken is not None
        self.assertEqual((taken.job.name, taken.takenFrom), ("a", owner))

    def test_giveBackKeepsKnownClaims(self) -> None:
        """
        The queue's C{giveBack} leaves the claims the daemon knows, and
        those of other daemons.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        me = fleet.memory.register("mig1", 1, "1.0", LEASE)
        other = fleet.other()
        a = fleet.memory.claim(me, 0.0, LEASE)
        b = fleet.memory.claim(other, 0.0, LEASE)
        assert a is not None and b is not None
        self.assertEqual(self.successResultOf(fleet.queue.giveBack(me, frozenset({"a"}))), [])
        self.assertEqual(self.successResultOf(fleet.queue.giveBack(me, frozenset())), ["a"])
        self.assertEqual(fleet.memory.state("a"), QueueState.QUEUED)
        self.assertEqual(fleet.memory.state("b"), QueueState.CLAIMED)

    def test_ghostClaimGivenBack(self) -> None:
        """
        A row claimed by this daemon's id that it does not run (set by
        hand, or by a bug) is given back, with a warning, at the first
        claim a lease after the last look, then claimed and run: held, it
        stayed claimed while this daemon beat and C{--exit-when-done}
        never exited (found from outside); the jobs it runs are never
        given back.
        """
        fleet = Fleet(["a", "b"], maxJobs=1)
        warnings: list[str] = []

        def observe(event: LogEvent) -> None:
            if event.get("log_level") is LogLevel.warn:
                warnings.append(formatEvent(event))

        globalLogPublisher.addObserver(cast(ILogObserver, observe))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, observe))
        fleet.service.startService()
        owner = fleet.member.owner
        assert owner is not None
        ghost = fleet.memory.claim(owner, fleet.clock.seconds(), LEASE)
        assert ghost is not None and ghost.job.name == "b"
        fleet.built["a"].result.callback(True)
        fleet.clock.pump([LEASE / 12] * 11)
        self.assertNotIn("b", fleet.built)
        self.assertEqual(fleet.memory.state("b"), QueueState.CLAIMED)
        fleet.clock.pump([LEASE / 12] * 2)
        self.assertIn("b", fleet.built)
        self.assertIn(
            "Job b: claimed in the queue by this daemon, which does not run it; given back",
            warnings,
        )
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.memory.state("a"), QueueState.DONE)
        self.assertEqual(fleet.memory.state("b"), QueueState.DONE)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_builtForItsClaim(self) -> None:
        """
        A claimed job is built with the store's view for its claim
        (C{forClaim(job, owner, generation)}), where the store has one, and
        with the member's send deadline.
        """
        views: list[tuple[str, str, int]] = []

        class FencingStore(MemoryStateStore):
            def forClaim(self, job: str, owner: str, generation: int) -> IStateStore:
                views.append((job, owner, generation))
                return view

        view = MemoryStateStore()
        store = FencingStore()
        fleet = Fleet(["a"], maxJobs=1, store=store)
        fleet.service.startService()
        owner = fleet.member.owner
        assert owner is not None
        self.assertEqual(views, [("a", owner, 1)])
        self.assertIs(fleet.stores["a"], view)
        self.assertIs(fleet.deadlines["a"], fleet.member.sendDeadline)
        self.assertEqual(fleet.deadlines["a"].at, fleet.member.deadline)
        fleet.built["a"].result.callback(True)
        self.stop(fleet)

    def test_takeoverBuiltWithItsQuiet(self) -> None:
        """
        A job taken over is built with the quiet its claim says already
        passed (L{JobClaim.quietFor}; 0 when the queue cannot tell), a job
        claimed from the queue with none (L{None}: not a takeover).
        """
        fleet = Fleet(["a", "b", "c"], maxJobs=3)
        other = fleet.other()
        for _ in range(2):
            self.assertIsNotNone(fleet.memory.claim(other, 0.0, LEASE))
        claim = fleet.memory.claim

        def quietFor(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> JobClaim | None:
            claimed = claim(owner, now, lease, skipServers)
            if claimed is None or claimed.job.name != "b":
                return claimed
            return evolve(claimed, quietFor=4.5)

        fleet.memory.claim = quietFor  # type: ignore[method-assign]
        fleet.service.startService()
        self.assertEqual(fleet.takeovers, {"c": None})
        fleet.clock.pump([5] * 13)
        self.assertEqual(fleet.takeovers, {"a": 0.0, "b": 4.5, "c": None})
        for job in fleet.built.values():
            job.result.callback(True)
        self.stop(fleet)

    def test_builtWithTheStore(self) -> None:
        """
        A store without C{forClaim} is given to the job as it is.
        """
        store = MemoryStateStore()
        fleet = Fleet(["a"], maxJobs=1, store=store)
        fleet.service.startService()
        self.assertIs(fleet.stores["a"], store)
        fleet.built["a"].result.callback(True)
        self.stop(fleet)

    def test_claimLostByItsRun(self) -> None:
        """
        A run that found its claim lost (a fenced write: its machine told
        C{leaseLost}, the run failing with L{LeaseLost}) is dropped alone:
        its claim not finished, its job stopped (lease lost), nothing
        counted as failed; the daemon keeps its lease and its other job.
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        fleet.service.startService()
        owner = fleet.member.owner
        finished: list[str] = []
        finish = fleet.memory.finish

        def finishing(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
            finished.append(claim.job.name)
            finish(claim, outcome, notBefore)

        fleet.memory.finish = finishing  # type: ignore[method-assign]
        a = fleet.built["a"]
        a.machine.leaseLost("job a: its claim (generation 1) is no longer current")
        a.machine.stopped()
        a.result.errback(LeaseLost("job a: its claim (generation 1) is no longer current"))
        self.assertEqual(finished, [])
        self.assertEqual(fleet.service.runningJobs, ["b"])
        self.assertIs(fleet.machines.job("a").state(), JobState.STOPPED)
        self.assertEqual(fleet.progress.job("a").error, "stopped: lease lost")
        self.assertEqual(fleet.member.owner, owner)
        fleet.built["b"].result.callback(True)
        self.assertEqual(finished, ["b"])
        self.assertEqual(fleet.done, [])
        self.stop(fleet)

    def test_leaseLostWaiting(self) -> None:
        """
        A job waiting for its connections when the lease is lost is
        stopped at once, its wait given up, its claim not finished: the
        new incarnation claims it again, a takeover.
        """
        fleet = Fleet(["a", "b"], maxJobs=2, limits=ServerLimits(maxConnections=1))
        fleet.service.startService()
        first = fleet.member.owner
        self.assertEqual(fleet.machines.job("b").state(), JobState.WAITING)
        fleet.member.lose("a test")
        causes = [(t.source, t.target, t.cause) for job, t in fleet.transitions if job == "b"]
        lost = causes.index(("waiting", "stopped", "lease lost: a test"))
        self.assertEqual(causes[lost + 1][:2], ("stopped", "queued"))
        self.assertEqual(
            causes[-1][2], f"claimed (generation 4), taken over from daemon {first}"
        )
        self.stop(fleet)

    def test_requestFromAnotherDaemon(self) -> None:
        """
        A pause asked through another daemon reaches the running job's
        machine at the next heartbeat, by whom asked it; the job stops and
        rests paused in the queue.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        fleet.memory.pause("a")
        fleet.queue.requestedBy = (("a", "alice"),)
        fleet.clock.advance(5)
        self.assertTrue(fleet.built["a"].stopped)
        self.assertIs(fleet.machines.job("a").state(), JobState.PAUSED)
        self.assertEqual(fleet.progress.job("a").wait.by, "alice")  # type: ignore[union-attr]
        self.assertIs(fleet.memory.state("a"), QueueState.PAUSED)
        self.stop(fleet)

    def test_newerSchema(self) -> None:
        """
        A newer schema stops the jobs (the machine's stop), claims nothing
        more, and calls for the exit once they have ended.
        """
        fleet = Fleet(["a", "b"], maxJobs=1)
        fleet.service.startService()
        fleet.queue.schemaVersion = 2
        fleet.clock.advance(5)
        self.assertTrue(fleet.built["a"].stopped)
        self.assertEqual(fleet.exits, 1)
        self.assertNotIn("b", fleet.built)
        self.assertIs(fleet.memory.state("a"), QueueState.QUEUED)
        self.stop(fleet)

    def test_finishRetried(self) -> None:
        """
        A finish the queue cannot take is tried again every C{H}.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        calls = []
        finish = fleet.queue.finish

        def failOnce(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> Deferred[None]:
            calls.append(outcome)
            if len(calls) == 1:
                return fail(QueueUnavailable("db1: connection refused"))
            return finish(claim, outcome, notBefore)

        fleet.queue.finish = failOnce  # type: ignore[method-assign]
        fleet.built["a"].result.callback(True)
        self.assertIs(fleet.memory.state("a"), QueueState.CLAIMED)
        fleet.clock.advance(5)
        self.assertIs(fleet.memory.state("a"), QueueState.DONE)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_finishRefusedGivenBack(self) -> None:
        """
        A finish that fails otherwise than as unreachable or refused (an
        unexpected error: the daemon cannot tell whether its claim still
        stands) does not
        leave the job claimed by this live daemon that no longer runs it:
        the next claim gives it back first, as for a claim whose answer
        was lost, and the job runs again (here, at once); its slot is free.
        """
        fleet = Fleet(["a"], maxJobs=1)
        fleet.service.startService()
        finish = fleet.queue.finish
        refused = [True]

        def refuseOnce(
            claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
        ) -> Deferred[None]:
            if refused.pop() if refused else False:
                return fail(RuntimeError("db1: cannot finish a job: a bug"))
            return finish(claim, outcome, notBefore)

        fleet.queue.finish = refuseOnce  # type: ignore[method-assign]
        first = fleet.built["a"]
        first.result.callback(True)
        self.flushLoggedErrors(RuntimeError)
        fleet.clock.advance(LEASE / 12)
        again = fleet.built["a"]
        self.assertIsNot(again, first)
        self.assertIn("claimed (generation 2)", " ".join(fleet.causes("a")))
        again.result.callback(True)
        self.assertIs(fleet.memory.state("a"), QueueState.DONE)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)

    def test_finishRefusedRetried(self) -> None:
        """
        A finish the database refuses (the role's UPDATE on the queue's
        table revoked, then granted again) is tried again every C{H}, as
        an unreachable queue's is; the job's slot is not lost meanwhile.
        (It raised out of the job's run, unhandled: the claim stayed the
        daemon's for ever, its slot gone, and C{--exit-when-done} never
        exited.)
        """
        fleet = Fleet(["a", "b"], maxJobs=1)
        fleet.service.startService()
        calls = []
        finish = fleet.queue.finish

        def refusedOnce(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> Deferred[None]:
            calls.append(outcome)
            if len(calls) == 1:
                return fail(PermanentError("db1: cannot finish a job: permission denied for table jobs"))
            return finish(claim, outcome, notBefore)

        fleet.queue.finish = refusedOnce  # type: ignore[method-assign]
        fleet.built["a"].result.callback(True)
        self.assertIs(fleet.memory.state("a"), QueueState.CLAIMED)
        fleet.clock.advance(5)
        self.assertIs(fleet.memory.state("a"), QueueState.DONE)
        self.assertIn("b", fleet.built)
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.done, [True])
        self.assertEqual(self.flushLoggedErrors(), [])
        self.stop(fleet)

    def test_claimRefusedLoggedWithoutTraceback(self) -> None:
        """
        A claim the database refuses (a permission revoked, a row it
        cannot update) is a warning naming why, tried again at the next
        poll; not a traceback logged as a bug at every poll.
        """
        fleet = Fleet(["a"], maxJobs=1)
        claim = fleet.queue.claim
        refused = [True]

        def refusing(*args: Any, **kwargs: Any) -> Deferred[JobClaim | None]:
            if refused[0]:
                return fail(PermanentError("db1: cannot claim a job: bigint out of range"))
            return claim(*args, **kwargs)

        fleet.queue.claim = refusing  # type: ignore[method-assign]
        events: list[LogEvent] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        fleet.service.startService()
        self.assertEqual(fleet.built, {})
        self.assertEqual([e for e in events if e.get("log_level") == LogLevel.critical], [])
        self.assertTrue(
            any("bigint out of range" in str(e.get("why")) for e in events
                if e.get("log_level") == LogLevel.warn)
        )
        refused[0] = False
        fleet.clock.advance(fleet.member.period)
        self.assertIn("a", fleet.built)
        fleet.built["a"].result.callback(True)
        self.stop(fleet)

    def test_claimsAgainAfterTheQueueWasUnreachable(self) -> None:
        """
        The queue unreachable while the daemon waits for its next claim
        (its deferred jobs' next due time unread) does not end its
        claiming: once the queue answers again, it takes over the job of
        a daemon whose lease ran out meanwhile (found from outside: after
        PostgreSQL was down longer than the lease, no daemon of the fleet
        claimed any job again).
        """
        fleet = Fleet(["a", "b"], maxJobs=2)
        other = fleet.other()
        held = fleet.memory.claim(other, fleet.clock.seconds(), LEASE)
        self.assertEqual(held is not None and held.job.name, "a")
        nextDue = fleet.queue.nextDue
        failures: list[int] = []

        def failOnce() -> Deferred[float | None]:
            if not failures:
                failures.append(1)
                return fail(QueueUnavailable("db1: connection refused"))
            return nextDue()

        fleet.queue.nextDue = failOnce  # type: ignore[method-assign]
        fleet.service.startService()
        self.assertEqual(failures, [1])
        self.assertEqual(sorted(fleet.built), ["b"])
        # The other daemon never beats again: its lease runs out.
        fleet.clock.pump([fleet.member.period] * int(LEASE / fleet.member.period + 2))
        self.assertEqual(sorted(fleet.built), ["a", "b"])
        for job in fleet.built.values():
            job.result.callback(True)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)


    def test_heldAtMostMaxJobs(self) -> None:
        """
        A daemon holds at most C{max_jobs} claimed jobs, running or
        waiting for their connections (a standalone daemon claims more
        while they wait): the rest stay queued for the fleet's other
        daemons, and are claimed here as its jobs end.
        """
        fleet = Fleet(["a", "b", "c"], maxJobs=2, limits=ServerLimits(maxConnections=1))
        # The in-memory queue's heartbeats name no live daemon: no shares.
        fleet.service.member._onHeartbeat = None
        fleet.service.startService()
        self.assertEqual(sorted(fleet.service.runningJobs), ["a", "b"])
        self.assertEqual(fleet.memory.state("c"), QueueState.QUEUED)
        fleet.clock.advance(5)
        self.assertEqual(fleet.memory.state("c"), QueueState.QUEUED)
        fleet.built["a"].result.callback(True)
        fleet.clock.advance(5)
        self.assertEqual(sorted(fleet.service.runningJobs), ["b", "c"])
        self.stop(fleet)

    def test_noShareNoClaim(self) -> None:
        """
        A daemon claims no job of a server where its last heartbeat gave
        it no share (L{FleetShares.withoutShare}), and claims it once it
        has one again.
        """
        fleet = Fleet(["a"], maxJobs=1)
        applied = fleet.service.shares.apply
        without = {"now": frozenset({"s"})}

        def apply(heartbeat: Heartbeat, me: str) -> frozenset[str]:
            applied(heartbeat, me)
            fleet.service.shares.withoutShare = without["now"]
            return without["now"]

        fleet.service.member._onHeartbeat = apply
        fleet.service.shares.withoutShare = without["now"]
        fleet.service.startService()
        fleet.clock.advance(5)
        self.assertEqual(fleet.built, {})
        self.assertEqual(fleet.memory.state("a"), QueueState.QUEUED)
        without["now"] = frozenset()
        fleet.clock.pump([5] * 3)
        self.assertEqual(list(fleet.built), ["a"])
        self.stop(fleet)

    def test_databaseRestarting(self) -> None:
        """
        A slot freed while the queue's database is unreachable (a claim and
        the deferred jobs' read both fail with L{QueueUnavailable}) is
        claimed into at a later poll once it answers again.
        """
        fleet = Fleet(["a", "b"], maxJobs=1)
        fleet.service.startService()
        self.assertEqual(sorted(fleet.built), ["a"])
        claim, nextDue = fleet.queue.claim, fleet.queue.nextDue
        unavailable = QueueUnavailable("db1: the database system is starting up")
        fleet.queue.claim = lambda *args, **kwargs: fail(unavailable)  # type: ignore[method-assign]
        fleet.queue.nextDue = lambda: fail(unavailable)  # type: ignore[method-assign]
        fleet.built["a"].result.callback(True)
        fleet.queue.claim, fleet.queue.nextDue = claim, nextDue  # type: ignore[method-assign]
        fleet.clock.advance(5)
        self.assertEqual(sorted(fleet.built), ["a", "b"])
        fleet.built["b"].result.callback(True)
        self.assertEqual(fleet.done, [True])
        self.stop(fleet)


class FleetControlsTests(SynchronousTestCase):
    """
    L{FleetControls}: a control on any job is one write of its row,
    through its machine; the queue's refusal is the control's answer.
    """

    def setUp(self) -> None:
        self.fleet = Fleet(["a", "b", "c"], maxJobs=1)
        self.other = self.fleet.other()
        held = self.fleet.memory.claim(self.other, 0.0, LEASE)
        assert held is not None and held.job.name == "a"
        self.fleet.service.startService()
        self.controls = self.fleet.service.controls

    def tearDown(self) -> None:
        self.successResultOf(self.fleet.service.stopService())
        self.assertEqual(self.fleet.clock.getDelayedCalls(), [])

    def test_heldElsewhere(self) -> None:
        """
        A pause of a job another daemon holds is a request on its row,
        which that daemon's next heartbeat brings it.
        """
        self.assertEqual(self.successResultOf(self.controls.pause("a", "alice")), JobState.PAUSED)
        heartbeat = self.fleet.memory.heartbeat(self.other, LEASE)
        self.assertEqual(heartbeat.requests, (("a", Requested.PAUSE),))

    def test_refusalReachesThePage(self) -> None:
        """
        A control the queue's row refuses fails with its refusal, and
        changes nothing.
        """
        failure = self.failureResultOf(self.controls.resume("c", "alice"), ControlRefused)
        self.assertIn("not paused", str(failure.value))
        self.failureResultOf(self.controls.pause("nope", "alice"), UnknownJob)
        self.assertIs(self.fleet.memory.state("c"), QueueState.QUEUED)

    def test_unknownNameRefusedHere(self) -> None:
        """
        A control of a name that is no job of this daemon's configuration
        (its list is the fleet's), or of the empty name, fails with
        L{UnknownJob} (the page's 404) without asking the queue (found
        from outside: C{POST /control/jobs//pause} was sent to the queue
        and tried again for as long as the database was down); with user
        lists, whose jobs only the queue knows, the queue decides, but
        never for the empty name.
        """
        asked: list[str] = []
        pause = self.fleet.queue.pause

        def noted(name: str) -> Deferred[QueueState]:
            asked.append(name)
            return pause(name)

        self.fleet.queue.pause = noted  # type: ignore[method-assign]
        self.failureResultOf(self.controls.pause("", "alice"), UnknownJob)
        self.failureResultOf(self.controls.pause("nope", "alice"), UnknownJob)
        self.assertEqual(asked, [])
        self.controls.userLists = True
        self.failureResultOf(self.controls.pause("", "alice"), UnknownJob)
        self.failureResultOf(self.controls.pause("nope", "alice"), UnknownJob)
        self.assertEqual(asked, ["nope"])

    def test_queuedJob(self) -> None:
        """
        A queued job paused here is paused in the queue (no daemon claims
        it); resumed, this daemon claims it once a slot is free.
        """
        self.assertEqual(self.successResultOf(self.controls.pause("c", "alice")), JobState.PAUSED)
        self.assertIs(self.fleet.memory.state("c"), QueueState.PAUSED)
        self.fleet.built["b"].result.callback(True)
        self.assertNotIn("c", self.fleet.built)
        self.assertEqual(self.successResultOf(self.controls.resume("c", "bob")), JobState.QUEUED)
        self.assertIn("c", self.fleet.built)

    def test_heldHere(self) -> None:
        """
        A job this daemon runs, paused here, is stopped by its machine and
        rests paused in the queue; a control its machine takes not in its
        state is refused.
        """
        refused = self.controls.resume("b", "alice")
        self.failureResultOf(refused, ControlRefused)
        self.assertEqual(self.successResultOf(self.controls.pause("b", "alice")), JobState.PAUSED)
        self.assertTrue(self.fleet.built["b"].stopped)
        self.assertIs(self.fleet.machines.job("b").state(), JobState.PAUSED)
        self.assertIs(self.fleet.memory.state("b"), QueueState.PAUSED)

    def test_unreachableQueue(self) -> None:
        """
        A control of a job this daemon does not hold, which the queue
        cannot take, fails at once with L{QueueUnavailable} naming the
        database (the page's 503), and is not tried again: the admin was
        told it failed (found from outside: a pause during an outage got no
        answer in 60 s).
        """
        calls: list[str] = []

        def refused(name: str) -> Deferred[QueueState]:
            calls.append(name)
            return fail(QueueUnavailable("db1: connection refused"))

        self.fleet.queue.pause = refused  # type: ignore[method-assign]
        failure = self.failureResultOf(self.controls.pause("c", "alice"), QueueUnavailable)
        self.assertIn("db1: connection refused", str(failure.value))
        self.assertIn("not applied", str(failure.value))
        self.fleet.clock.advance(60)
        self.assertEqual(calls, ["c"])
        self.assertIs(self.fleet.memory.state("c"), QueueState.QUEUED)

    def test_unansweredQueue(self) -> None:
        """
        A control the queue does not answer (a database stalled) fails
        with L{QueueUnavailable} after C{CONTROL_ANSWER} seconds.
        """
        self.fleet.queue.pause = lambda name: Deferred()  # type: ignore[method-assign]
        pausing = self.controls.pause("c", "alice")
        self.assertNoResult(pausing)
        self.fleet.clock.advance(CONTROL_ANSWER)
        failure = self.failureResultOf(pausing, QueueUnavailable)
        self.assertIn("did not answer within 5 s", str(failure.value))

    def test_heldHereUnreachable(self) -> None:
        """
        A job this daemon runs, paused while the queue cannot be reached,
        is stopped here, and the control fails at once with
        L{QueueUnavailable} saying its row is written when the database
        answers: it is tried again until it is.
        """
        pause = self.fleet.queue.pause
        calls: list[str] = []

        def failOnce(name: str) -> Deferred[QueueState]:
            calls.append(name)
            if len(calls) == 1:
                return fail(QueueUnavailable("db1: connection refused"))
            return pause(name)

        self.fleet.queue.pause = failOnce  # type: ignore[method-assign]
        failure = self.failureResultOf(self.controls.pause("b", "alice"), QueueUnavailable)
        self.assertIn("written when the database answers again", str(failure.value))
        self.fleet.clock.advance(WRITE_RETRY)
        self.assertEqual(calls, ["b", "b"])
        # Stopped here at once; its claim's end may reach the queue first
        # (claimed again), the pause then comes back with a heartbeat.
        self.fleet.clock.pump([self.fleet.member.period] * 3)
        self.assertIs(self.fleet.memory.state("b"), QueueState.PAUSED)

    def test_pauseDuringOutageWins(self) -> None:
        """
        A job this daemon runs, paused while the database is away, finishes
        its claim only once the pause is written: the finish puts it
        paused, never queued, and it is not claimed again (found from
        outside: the finish reached the database first, the row went back
        to queued, this daemon claimed it again and copied for 1.7 s
        before the retried pause took).
        """
        memory, queue = self.fleet.memory, self.fleet.queue
        pause, finish = queue.pause, queue.finish
        downUntil = {"pause": 22.0, "finish": 18.0}
        written: list[str] = []

        def pausing(name: str) -> Deferred[QueueState]:
            if self.fleet.clock.seconds() < downUntil["pause"]:
                return fail(QueueUnavailable("db1: connection refused"))
            written.append("pause")
            return pause(name)

        def finishing(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> Deferred[None]:
            if self.fleet.clock.seconds() < downUntil["finish"]:
                return fail(QueueUnavailable("db1: connection refused"))
            written.append(f"finish {memory.state(claim.job.name).value}")
            return finish(claim, outcome, notBefore)

        queue.pause = pausing  # type: ignore[method-assign]
        queue.finish = finishing  # type: ignore[method-assign]
        first = self.fleet.built["b"]
        self.failureResultOf(self.controls.pause("b", "alice"), QueueUnavailable)
        self.assertTrue(first.stopped)
        self.fleet.clock.pump([1.0] * 60)
        self.assertEqual(written, ["pause", "finish claimed"])
        self.assertIs(memory.state("b"), QueueState.PAUSED)
        self.assertIs(self.fleet.built["b"], first)
        self.assertNotIn("claimed (generation 3)", self.fleet.causes("b"))

    def test_holdsAreTheRows(self) -> None:
        """
        The holds a reload applies to the jobs it adds are none: a fleet's
        holds are its rows' states, and a row of the store's C{job_holds}
        (a copy's, for a job the list did not have) is the list's to apply
        (L{imapmig.queue._pgjoblist.replaceJobList}), never again a
        daemon's (found in review: a reload adding a job the fleet had
        resumed cancelled it again from a stale C{job_holds} row).
        """
        store = MemoryStateStore()
        self.successResultOf(store.recordJobHolds(["c"], "cancelled", "alice"))
        fleet = Fleet(["a", "b", "c"], maxJobs=1, store=store)
        self.assertEqual(self.successResultOf(fleet.service.controls.readHolds()), {})

    def test_bulk(self) -> None:
        """
        Pause-all pauses every job that takes it: the job this daemon holds
        through its machine (stopped here), every other in one call of the
        queue (L{IAsyncJobQueue.controlMany}), whoever holds it, by the
        admin who asked, before the held job's slot is given to another
        (found in review: one queue statement per job, 100,000 round trips
        to pause 100,000 jobs).
        """
        asked: list[tuple[object, ...]] = []
        queue = self.fleet.queue
        for control in ("pause", "resume", "cancel", "requeue"):

            def each(name: str, control: str = control) -> Deferred[QueueState]:
                asked.append((control, name))
                answer: Deferred[QueueState] = getattr(AsyncJobQueue, control)(queue, name)
                return answer

            setattr(queue, control, each)
        many = queue.controlMany

        def noted(control: str, names: Sequence[str] | None, skip: Sequence[str] = (),
                  by: str | None = None) -> Deferred[int]:  # fmt: skip
            asked.append((control, names, tuple(skip), by))
            return many(control, names, skip, by)

        queue.controlMany = noted  # type: ignore[method-assign]
        self.assertEqual(self.successResultOf(self.controls.pauseAll("alice")), 3)
        self.assertEqual(asked, [("pause", None, ("b",), "alice"), ("pause", "b")])
        self.assertEqual(
            [self.fleet.memory.state(name) for name in "abc"],
            [QueueState.CLAIMED, QueueState.PAUSED, QueueState.PAUSED],
        )
        self.assertTrue(self.fleet.built["b"].stopped)
        self.assertEqual(self.fleet.memory.heartbeat(self.other, LEASE).requests, (("a", Requested.PAUSE),))
        del asked[:]
        self.assertEqual(self.successResultOf(self.controls.bulk("resume", ["a", "c", "nope"], "bob", "q=x")), 2)
        self.assertEqual(asked, [("resume", ["a", "c", "nope"], (), "bob")])
        self.assertIn("c", self.fleet.built)


    def test_bulkUnreachable(self) -> None:
        """
        A bulk control the queue cannot take fails with the queue's error,
        and the job this daemon holds is left running: the others' rows
        are written first.
        """
        self.fleet.queue.controlMany = (  # type: ignore[method-assign]
            lambda *args: fail(QueueUnavailable("db1: connection refused (after 10000 jobs changed)"))
        )
        failure = self.failureResultOf(self.controls.pauseAll("alice"), QueueUnavailable)
        self.assertIn("after 10000 jobs changed", str(failure.value))
        self.assertFalse(self.fleet.built["b"].stopped)
        self.assertIs(self.fleet.memory.state("c"), QueueState.QUEUED)


class ServiceTreeTests(SynchronousTestCase):
    """
    The daemon's service tree (L{imapmig.daemon.service}) given a fleet's
    queue runs a L{FleetScheduler} over it.
    """

    def test_addScheduler(self) -> None:
        """
        Given an L{IAsyncJobQueue}, C{addScheduler} builds the fleet's
        scheduler, whose jobs are claimed from that queue under its
        daemon's id and connect as the one daemon's do, each writing the
        store's view for its claim.
        """
        views: list[tuple[str, str]] = []

        class FencingStore(MemoryStateStore):
            def forClaim(self, job: str, owner: str, generation: int) -> IStateStore:
                views.append((job, owner))
                return self

        maildir = makeMaildir(self)
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "status": "off",
                "max_jobs": 2,
                "servers": {
                    "s": {"endpoint": "tcp:mail.example:1143", "starttls": "off", "allow_plaintext": True}
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
        tree = _ServiceTree(config, reactor, FencingStore())
        memory = InMemoryJobQueue(config.jobs, reactor.seconds)
        scheduler = tree.addScheduler(None, AsyncJobQueue(memory))
        assert isinstance(scheduler, FleetScheduler)
        tree.root.startService()
        owner = scheduler.member.owner
        self.assertEqual(scheduler.member.lease, 60.0)
        self.assertEqual(len(reactor.tcpClients), 2)
        self.assertEqual(memory.counts().claimed, 2)
        self.assertEqual(views, [("a", owner), ("b", owner)])
        self.assertEqual(sorted(memory.heartbeat(owner or "", 60.0).requests), [])
        stopping = tree.root.stopService()
        reactor.advance(120)
        self.successResultOf(stopping)
        self.assertEqual(memory.counts().claimed, 0)
        self.assertEqual(reactor.getDelayedCalls(), [])


    def test_noCensusInAFleet(self) -> None:
        """
        A fleet's daemon counts no sources after a reload that added jobs:
        its census would log in to the source of jobs other daemons run.
        """
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "status": "off",
                "servers": {"s": {"endpoint": "tcp:127.0.0.1:1143", "starttls": "off"}},
                "jobs": [
                    {
                        "name": "a",
                        "source": {"maildir": makeMaildir(self)},
                        "destination": {"server": "s", "user": "a", "password": "p"},
                    }
                ],
            },
            "test.yaml",
        )
        reactor = MemoryReactorClock()
        tree = _ServiceTree(config, reactor, MemoryStateStore())
        tree.addScheduler(None, AsyncJobQueue(InMemoryJobQueue(config.jobs, reactor.seconds)))
        counted: list[object] = []

        def census(config: object) -> SourceCensus:
            counted.append(config)
            raise RuntimeError("a fleet's daemon counted sources")

        tree.census = census  # type: ignore[method-assign]
        tree.countSources(config.jobs)
        self.assertEqual(counted, [])

    def test_lostJobsNotRecorded(self) -> None:
        """
        The transitions of the jobs whose claims the daemon lost (stopping,
        then stopped: lease lost) are not recorded in their timelines,
        where they would follow their new owner's; its next claim's are.
        """
        store = MemoryStateStore()
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "status": "off",
                "max_jobs": 1,
                "servers": {
                    "s": {"endpoint": "tcp:mail.example:1143", "starttls": "off", "allow_plaintext": True}
                },
                "jobs": [
                    {
                        "name": "a",
                        "source": {"maildir": makeMaildir(self)},
                        "destination": {"server": "s", "user": "a", "password": "p"},
                    }
                ],
            },
            "test.yaml",
        )
        reactor = MemoryReactorClock()
        tree = _ServiceTree(config, reactor, store)
        memory = InMemoryJobQueue(config.jobs, reactor.seconds)
        scheduler = tree.addScheduler(None, AsyncJobQueue(memory))
        assert isinstance(scheduler, FleetScheduler)
        tree.root.startService()
        before = self.successResultOf(store.timeline("a"))
        self.assertEqual(before[0].cause, "claimed (generation 1)")
        scheduler.loseLease("its send deadline passed")
        reactor.advance(120)
        causes = [t.cause for t in self.successResultOf(store.timeline("a"))]
        self.assertEqual([c for c in causes if c.startswith("lease lost")], [])
        # Its new incarnation's claim of the job is its own, recorded.
        self.assertGreater(len(causes), len(before))
        stopping = tree.root.stopService()
        reactor.advance(120)
        self.successResultOf(stopping)


class StaleClaimTests(SynchronousTestCase):
    """
    A claim answered after the lease it was made under was lost.
    """

    def test_staleClaimNotRun(self) -> None:
        """
        A claim the queue answers after the daemon's lease was lost is not
        run; the new incarnation claims the job at its next poll, a
        takeover.
        """
        fleet = Fleet(["a"], maxJobs=1)
        pending: list[Deferred[JobClaim | None]] = []
        claim = fleet.queue.claim

        def held(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> Deferred[JobClaim | None]:
            if pending:
                return claim(owner, now, lease, skipServers)
            d: Deferred[JobClaim | None] = Deferred()
            pending.append(d)
            return d

        fleet.queue.claim = held  # type: ignore[method-assign]
        fleet.service.startService()
        first = fleet.member.owner
        assert first is not None
        stale = fleet.memory.claim(first, 0.0, LEASE)
        fleet.member.lose("a test")
        pending[0].callback(stale)
        self.assertEqual(fleet.built, {})
        fleet.clock.advance(5)
        self.assertEqual(list(fleet.built), ["a"])
        self.assertIn(f"claimed (generation 2), taken over from daemon {first}", fleet.causes("a"))
        self.successResultOf(fleet.service.stopService())
        self.assertEqual(fleet.clock.getDelayedCalls(), [])



class StopWhileClaimingTests(SynchronousTestCase):
    """
    A stop while a claim is in flight: the job claimed after it ends at
    once, and the stop completes.
    """

    def test_claimAnsweredAfterTheStop(self) -> None:
        """
        A claim answered after the stop began gives up its job before
        waiting for anything (stopped while waiting for a connection
        grant or a slot) and finishes its claim in the queue (the finish
        queued before the daemon's retirement); the stop completes.
        Before, the job left
        the scheduler's running jobs before it was entered among them
        (its run suspended first on the finish), so that the stop awaited
        its ended run again and again without ever returning to the
        reactor: the daemon ignored SIGTERM.
        """
        fleet = Fleet(["a"], maxJobs=1)
        answers: list[tuple[JobClaim | None, Deferred[JobClaim | None]]] = []
        finishes: list[Deferred[None]] = []
        claimNow = fleet.queue.claim
        finish = fleet.queue.finish

        def heldClaim(
            owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
        ) -> Deferred[JobClaim | None]:
            held: Deferred[JobClaim | None] = Deferred()
            answers.append((self.successResultOf(claimNow(owner, now, lease, skipServers)), held))
            return held

        def heldFinish(
            claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
        ) -> Deferred[None]:
            held: Deferred[None] = Deferred()
            finishes.append(held)
            return held.addCallback(lambda _: finish(claim, outcome, notBefore))

        fleet.queue.claim = heldClaim  # type: ignore[method-assign]
        fleet.queue.finish = heldFinish  # type: ignore[method-assign]
        # The stop's waits for the jobs, bounded: the loop this fixes spun
        # for ever inside the finish's callback.
        waits: list[int] = []

        def boundedList(deferreds: list[Deferred[Any]]) -> Any:
            waits.append(len(deferreds))
            if len(waits) > 100:
                raise RuntimeError("the stop waits on the same ended run again and again")
            return DeferredList(deferreds)

        self.patch(scheduler, "DeferredList", boundedList)
        fleet.service.startService()
        self.assertEqual(len(answers), 1)
        stopping = fleet.service.stopService()
        self.assertNoResult(stopping)
        answered, held = answers[0]
        held.callback(answered)
        self.assertNotIn("a", fleet.built)
        self.assertEqual(len(finishes), 1)
        self.successResultOf(stopping)
        finishes[0].callback(None)
        self.assertLess(len(waits), 100)
        self.assertIs(fleet.memory.state("a"), QueueState.QUEUED)
        self.assertEqual(fleet.clock.getDelayedCalls(), [])
