"""
Tests for L{imapmig.schedule.fleet.FleetMember} against the real queue of
a fleet, L{imapmig.queue.postgresql.ThreadedJobQueue}, on a private
PostgreSQL (L{imapmig.testing.postgresql}): its registration and
heartbeats renew the daemon's row, the heartbeat brings the controls asked
of its jobs, and past its send deadline it retires and registers a new
incarnation, whose claim takes its old job over.  Without PostgreSQL they
skip, and fail under C{CI=true}.

The member's timers run on a L{Clock}; the queue's calls run in a real
thread pool, and fire in the test's thread when it lets them (a reactor
whose C{callFromThread} queues them), so a heartbeat the test does not let
through is one the database has not answered.
"""

from __future__ import annotations

import queue as stdqueue
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.threadpool import ThreadPool

from imapmig.queue import JobClaim, QueueState, Requested
from imapmig.queue._pgschema import SCHEMA_VERSION
from imapmig.queue.postgresql import ThreadedJobQueue
from imapmig.schedule.member import SEND_DEADLINE, FleetMember
from tests.test_queue_postgresql import PostgreSQLTestMixin
from tests.test_schedule_fleet import LEASE, Jobs


class Reactor:
    """
    A reactor for the thread pool's results: each is queued until the test
    runs it (L{FleetMemberPostgreSQLTests.answer}).
    """

    def __init__(self) -> None:
        self.calls: stdqueue.Queue[Callable[[], object]] = stdqueue.Queue()

    def callFromThread(self, f: Callable[..., object], *a: object, **kw: object) -> None:
        self.calls.put(lambda: f(*a, **kw))


class FleetMemberPostgreSQLTests(PostgreSQLTestMixin):
    """
    L{FleetMember} over L{ThreadedJobQueue} and a private PostgreSQL.
    """

    def setUp(self) -> None:
        PostgreSQLTestMixin.setUp(self)
        self.reactor = Reactor()
        pool = ThreadPool(1, 1)
        pool.start()
        self.addCleanup(pool.stop)
        self.pg = self.queueOf(2)
        threaded = ThreadedJobQueue(self.pg, self.reactor, pool)  # type: ignore[arg-type]
        self.threaded = threaded
        self.clock = Clock()
        self.jobs = Jobs()
        self.member = FleetMember(
            threaded, self.clock, self.clock.seconds, LEASE, self.jobs, "mig1", 42, "1.0",
            SCHEMA_VERSION,
        )

    def answer(self) -> None:
        """
        Let the database's next answer through.
        """
        self.reactor.calls.get(timeout=60)()

    def wait(self, d: Deferred[Any]) -> Any:
        self.answer()
        return self.successResultOf(d)

    def test_heartbeatsAndTakeover(self) -> None:
        """
        Registered and beating, the daemon's lease lives in the database
        past the send deadline it keeps, and a pause asked of its job
        reaches it; with its heartbeats unanswered, at the deadline it
        stops its jobs, retires (its lease over in the database once the
        heartbeats in flight are answered: one statement at a time on the
        queue's connection) and registers again, and the new incarnation's claim takes the old
        one's job over.
        """
        self.member.start()
        self.answer()
        first = self.member.owner
        assert first is not None
        self.assertEqual(self.member.deadline, 45.0)
        claims: list[JobClaim] = [
            self.wait(self.threaded.claim(first, 0.0, LEASE)) for i in range(2)
        ]
        self.assertEqual([claim.job.name for claim in claims], ["j0", "j1"])
        self.pg.pause("j1")
        self.clock.advance(5)
        self.answer()
        self.assertEqual(self.member.deadline, 50.0)
        self.assertEqual(self.jobs.requests, [("j1", Requested.PAUSE, "imapmig")])
        # The database's lease outlives the deadline the daemon keeps.
        self.assertTrue(
            self.sql(
                "SELECT 1 FROM imapmig_queue.daemons WHERE daemon_id = %s"
                " AND lease_until > now() + interval '40 seconds'",
                first,
            )
        )
        retiredIds: list[str] = []
        retire = self.threaded.retire

        def retired(owner: str) -> Deferred[None]:
            return retire(owner).addCallback(lambda _: retiredIds.append(owner))

        self.threaded.retire = retired  # type: ignore[method-assign]
        # No answer let through from here: the heartbeats go unanswered.
        self.clock.pump([5] * 9)
        self.assertEqual(self.jobs.lost, [SEND_DEADLINE])
        self.assertIsNone(self.member.owner)
        # The heartbeats in flight answer late: they revive nothing; the
        # retirement, behind them on the queue's one connection, then runs.
        for _ in range(5):
            self.answer()
            self.assertIsNone(self.member.owner)
            if retiredIds:
                break
        self.assertTrue(
            self.sql(
                "SELECT 1 FROM imapmig_queue.daemons WHERE daemon_id = %s AND lease_until <= now()",
                first,
            )
        )
        self.clock.advance(5)
        self.answer()
        second = self.member.owner
        self.assertNotIn(second, (None, first))
        assert second is not None
        taken = self.wait(self.threaded.claim(second, 0.0, LEASE))
        self.assertEqual((taken.job.name, taken.takenFrom), ("j0", first))
        self.assertIs(self.pg.state("j1"), QueueState.PAUSED)
        stopped: list[None] = []
        self.member.stop().addCallback(stopped.append)
        for _ in range(5):
            if stopped:
                break
            self.answer()
        self.assertEqual(stopped, [None])
        self.assertEqual(self.clock.getDelayedCalls(), [])


class UserListFleetSchedulerTests(PostgreSQLTestMixin):
    """
    A fleet's scheduler over the real queue and a user list kept as
    written: it runs the rows its progress does not list, and keeps them
    only while it holds them.
    """

    def test_rowsRunAndDropped(self) -> None:
        """
        The scheduler claims the user list's rows (built from their
        params), lists each while it runs and drops it once finished; the
        queue then has them done.
        """
        from imapmig.job.machine import JobMachines
        from imapmig.progress import MigrationProgress
        from imapmig.queue.postgresql import PostgreSQLJobQueue
        from imapmig.schedule.fleet import FleetScheduler
        from imapmig.schedule.grants import ConnectionGrants, JobConnections
        from tests.statecontract import SynchronousReactor, SynchronousThreadPool
        from tests.test_queue import FakeUserList
        from tests.test_schedule_service import FakeJob

        queue = PostgreSQLJobQueue.connect(self.uri, [], "acme", userLists=[FakeUserList(count=2)])
        self.addCleanup(queue.close)
        threaded = ThreadedJobQueue(queue, SynchronousReactor(), SynchronousThreadPool())
        clock = Clock()
        progress = MigrationProgress(clock.seconds)
        machines = JobMachines(progress, clock, queue=threaded)
        built: dict[str, FakeJob] = {}
        listed: list[list[str]] = []

        def build(
            config: Any, connections: JobConnections, store: Any, deadline: Any, takeover: Any
        ) -> FakeJob:
            job = built[config.name] = FakeJob(config.name, connections, machines.job(config.name))
            listed.append([each.name for each in progress])
            return job

        done: list[bool] = []
        service = FleetScheduler(
            threaded, ConnectionGrants(2, {}), build, progress, clock, done.append,
            clock.seconds, LEASE, ("mig1", 42, "1.0"), lambda: None,
            schemaVersion=SCHEMA_VERSION, machines=machines,
        )  # fmt: skip
        service.startService()
        self.assertEqual(sorted(built), ["users-u0", "users-u1"])
        self.assertEqual(listed[-1], ["users-u0", "users-u1"])
        for job in built.values():
            job.result.callback(True)
        self.assertEqual(list(progress), [])
        self.assertEqual(
            self.sql("SELECT name, state FROM imapmig_queue.jobs ORDER BY position"),
            [("users-u0", "done"), ("users-u1", "done")],
        )
        self.assertEqual(done, [True])
        self.successResultOf(service.stopService())
        self.assertEqual(clock.getDelayedCalls(), [])
