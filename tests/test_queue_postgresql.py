"""
Tests for L{imapmig.queue.postgresql}: the queue's contract on a private
PostgreSQL (L{imapmig.testing.postgresql}, a fresh database per test), and
what only a shared database shows: concurrent claims, takeovers timed by
the database's clock, a heartbeat whose cost does not grow with the jobs
held.  Without PostgreSQL they skip, and fail under C{CI=true}.
"""

from __future__ import annotations

import queue as stdqueue
import threading
import time
from typing import Any, Callable

import psycopg
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import LeaseLost, QueueSchemaTooNew
from imapmig.queue import IJobQueue, JobClaim, JobOutcome, QueueState
from imapmig.queue._pgschema import SCHEMA_VERSION
from imapmig.queue.postgresql import _HEARTBEAT, PostgreSQLJobQueue, ThreadedJobQueue
from imapmig.testing.postgresql import PostgreSQLCluster, requirePostgreSQL
from tests.test_queue import ContractQueue, JobQueueContractMixin
from tests.test_schedule_service import jobConfig

# How long a test waits for the database's clock to pass a lease: far
# beyond the 1 s lease, for a loaded machine.
_LEASE_WAIT = 60.0


class PostgreSQLTestMixin(SynchronousTestCase):
    """
    A private cluster and a fresh database per test.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.cluster = PostgreSQLCluster(self.mktemp())
        self.addCleanup(self.cluster.destroy)
        self.cluster.start()
        self.uri = self.cluster.createDatabase()

    def queueOf(self, count: int) -> PostgreSQLJobQueue:
        """
        A queue of C{count} jobs (C{j0} first) on its own connection.
        """
        queue = PostgreSQLJobQueue.connect(
            self.uri, [jobConfig(f"j{i}", f"u{i}") for i in range(count)]
        )
        self.addCleanup(queue.close)
        return queue

    def sql(self, statement: str, *args: Any) -> list[tuple[Any, ...]]:
        """
        Run C{statement} on a connection of its own; its rows.
        """
        with psycopg.connect(self.uri, autocommit=True) as connection:
            cursor = connection.execute(statement, args or None)
            return cursor.fetchall() if cursor.description else []

    def waitLeaseEnd(self, owner: str) -> None:
        """
        Poll the database's clock until the lease of daemon C{owner} is
        over.
        """
        deadline = time.monotonic() + _LEASE_WAIT
        while not self.sql(
            "SELECT 1 FROM imapmig_queue.daemons WHERE daemon_id = %s AND lease_until < now()",
            owner,
        ):
            if time.monotonic() > deadline:
                self.fail(f"the lease of {owner} did not end in {_LEASE_WAIT} s")
            time.sleep(0.05)


class PostgreSQLJobQueueContractTests(JobQueueContractMixin, PostgreSQLTestMixin):
    """
    L{PostgreSQLJobQueue} keeps the queues' contract, its leases timed by
    the database's clock.
    """

    def makeQueue(self, count: int) -> PostgreSQLJobQueue:
        return self.queueOf(count)

    def test_interface(self) -> None:
        """
        It provides L{IJobQueue}.
        """
        self.assertTrue(verifyObject(IJobQueue, self.queueOf(1)))

    def expire(self, queue: ContractQueue, owner: str) -> None:
        self.waitLeaseEnd(owner)


class PostgreSQLJobQueueTests(PostgreSQLTestMixin):
    """
    What only a shared database shows.
    """

    def test_claimRace(self) -> None:
        """
        Three daemons on three connections, claiming from 100 jobs in three
        threads at once, claim every job once and none twice.
        """
        queues = [self.queueOf(100) for _ in range(3)]
        owners = [q.register("host", n, "1.0", 600.0) for n, q in enumerate(queues)]
        claimed: list[list[JobClaim]] = [[], [], []]
        start = threading.Barrier(3)
        failures: list[BaseException] = []

        def claimAll(n: int) -> None:
            try:
                start.wait()
                while (claim := queues[n].claim(owners[n], 0.0, 600.0)) is not None:
                    claimed[n].append(claim)
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=claimAll, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(failures, [])
        names = [c.job.name for each in claimed for c in each]
        self.assertEqual(sorted(names), sorted(f"j{i}" for i in range(100)))
        self.assertEqual(
            self.sql(
                "SELECT count(*), count(DISTINCT owner), max(generation) FROM imapmig_queue.jobs"
                " WHERE state = 'claimed'"
            ),
            [(100, sum(1 for each in claimed if each), 1)],
        )

    def test_staleWritesAfterTakeoverChangeNothing(self) -> None:
        """
        After a takeover, the old owner's heartbeat, renewal and release
        (of every outcome) leave every row of the queue's tables as it was.
        """
        queue = self.queueOf(2)
        old = queue.register("host", 1, "1.0", 600.0)
        stale = queue.claim(old, 0.0, 1.0)
        assert stale is not None
        self.waitLeaseEnd(old)
        new = queue.register("host", 2, "1.0", 600.0)
        taken = queue.claim(new, 0.0, 600.0)
        assert taken is not None and taken.takenFrom == old
        snapshot = "SELECT * FROM imapmig_queue.{} ORDER BY 1"
        before = [self.sql(snapshot.format(t)) for t in ("jobs", "daemons")]
        self.assertRaises(LeaseLost, queue.heartbeat, old, 600.0)
        self.assertRaises(LeaseLost, queue.renew, stale, 600.0)
        for outcome in JobOutcome:
            queue.finish(stale, outcome, 10.0)
        self.assertEqual([self.sql(snapshot.format(t)) for t in ("jobs", "daemons")], before)

    def test_releaseAfterLeaseEndBeforeTakeover(self) -> None:
        """
        A release by a daemon whose lease ended changes nothing even before
        another daemon took the job: the job is then released by the next
        claim, as a takeover.
        """
        queue = self.queueOf(1)
        old = queue.register("host", 1, "1.0", 600.0)
        stale = queue.claim(old, 0.0, 1.0)
        assert stale is not None
        self.waitLeaseEnd(old)
        queue.finish(stale, JobOutcome.COMPLETED)
        self.assertEqual(queue.state("j0"), QueueState.CLAIMED)
        taken = queue.claim(queue.register("host", 2, "1.0", 600.0), 0.0, 600.0)
        assert taken is not None
        self.assertEqual(taken.takenFrom, old)

    def heartbeatWrites(self, queue: PostgreSQLJobQueue, owner: str) -> dict[str, tuple[int, ...]]:
        """
        The rows one heartbeat of C{owner} inserts, updates and deletes,
        per table: the change of this backend's statistics around it (which
        hold this backend's counts not yet flushed too, hence the
        difference).
        """
        connection = queue._connection
        written = (
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'imapmig_queue'"
        )
        with connection.transaction():
            before = {row[0]: row[1:] for row in connection.execute(written)}
            queue.heartbeat(owner, 600.0)
            after = {row[0]: row[1:] for row in connection.execute(written)}
        changes = {
            name: tuple(a - b for a, b in zip(counts, before[name]))
            for name, counts in after.items()
        }
        return {name: counts for name, counts in changes.items() if any(counts)}

    def test_heartbeatCostFlat(self) -> None:
        """
        A heartbeat updates one row, the daemon's, whether it holds one job
        or a thousand: no job row is written.
        """
        queue = self.queueOf(1001)
        me = queue.register("host", 1, "1.0", 600.0)
        queue.claim(me, 0.0, 600.0)
        one = self.heartbeatWrites(queue, me)
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s, generation = 1"
            " WHERE state = 'queued'",
            me,
        )
        self.assertEqual(queue.counts().claimed, 1001)
        self.assertEqual(self.heartbeatWrites(queue, me), one)
        self.assertEqual(one, {"daemons": (0, 1, 0)})

    def heartbeatBuffers(self, owner: str) -> int:
        """
        The shared buffers one heartbeat of C{owner} touches, by C{EXPLAIN
        (ANALYZE, BUFFERS)} (rolled back), the statistics fresh.
        """
        self.sql("VACUUM ANALYZE imapmig_queue.jobs")
        with psycopg.connect(self.uri) as connection:
            plan = connection.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) " + _HEARTBEAT,
                {"me": owner, "lease": 600.0},
            ).fetchone()
            connection.rollback()
        assert plan is not None
        top = plan[0][0]["Plan"]
        return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])

    def test_heartbeatReadsFlat(self) -> None:
        """
        A heartbeat reads as many buffers whether its daemon holds one job
        or a thousand (of 20,000): the controls asked are read through
        their own index, not among the jobs held.
        """
        queue = self.queueOf(20_000)
        me = queue.register("host", 1, "1.0", 600.0)
        queue.claim(me, 0.0, 600.0)
        one = self.heartbeatBuffers(me)
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s, generation = 1"
            " WHERE position < 1000",
            me,
        )
        self.assertLessEqual(self.heartbeatBuffers(me), one + 2)

    def test_configurationOrderAcrossDaemons(self) -> None:
        """
        Daemons taking turns claim the jobs in configuration order.
        """
        queue = self.queueOf(6)
        owners = [queue.register("host", n, "1.0", 600.0) for n in range(3)]
        names = []
        for n in range(6):
            claim = queue.claim(owners[n % 3], 0.0, 600.0)
            assert claim is not None
            names.append(claim.job.name)
        self.assertEqual(names, [f"j{i}" for i in range(6)])

    def test_loadKeepsRows(self) -> None:
        """
        A second daemon's start with the same list loads no job twice and
        keeps the states of the jobs there (another list is refused:
        L{tests.test_queue_pgjoblist}).
        """
        first = self.queueOf(2)
        me = first.register("host", 1, "1.0", 600.0)
        first.claim(me, 0.0, 600.0)
        self.queueOf(2)
        self.assertEqual(
            self.sql("SELECT name, position, state FROM imapmig_queue.jobs ORDER BY position"),
            [("j0", 0, "claimed"), ("j1", 1, "queued")],
        )

    def test_migrationsRaceToOneSchema(self) -> None:
        """
        Three daemons starting at once on an empty database make one schema
        (the advisory lock), one version row, one row per job.
        """
        start = threading.Barrier(3)
        failures: list[BaseException] = []

        def connect() -> None:
            try:
                start.wait()
                self.queueOf(50)
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=connect) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(failures, [])
        self.assertEqual(
            self.sql("SELECT version FROM imapmig_queue.schema_version"), [(SCHEMA_VERSION,)]
        )
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.jobs"), [(50,)])

    def test_schemaTooNew(self) -> None:
        """
        Tables newer than the code are refused, naming both versions.
        """
        self.queueOf(1)
        self.sql("INSERT INTO imapmig_queue.schema_version VALUES (99, now(), 'test')")
        error = self.assertRaises(QueueSchemaTooNew, self.queueOf, 1)
        self.assertIn(f"schema version 99, newer than this imapmig knows ({SCHEMA_VERSION})", str(error))

    def test_threaded(self) -> None:
        """
        L{ThreadedJobQueue} runs the calls in its thread pool and fires
        their L{Deferred}s from the reactor's thread.
        """
        calls: stdqueue.Queue[Callable[[], object]] = stdqueue.Queue()

        class Reactor:
            def callFromThread(self, f: Callable[..., object], *a: object, **kw: object) -> None:
                calls.put(lambda: f(*a, **kw))

        pool = ThreadPool(1, 1)
        pool.start()
        self.addCleanup(pool.stop)
        threaded = ThreadedJobQueue(self.queueOf(1), Reactor(), pool)  # type: ignore[arg-type]

        def wait(d: Any) -> Any:
            calls.get(timeout=60)()
            return self.successResultOf(d)

        me = wait(threaded.register("host", 1, "1.0", 600.0))
        claim = wait(threaded.claim(me, 0.0, 600.0))
        self.assertEqual(claim.job.name, "j0")
        self.assertEqual(wait(threaded.heartbeat(me, 600.0)).requests, ())
        wait(threaded.finish(claim, JobOutcome.COMPLETED))
        self.assertEqual(threaded.queue.state("j0"), QueueState.DONE)
        self.assertEqual(wait(threaded.replaceList([])).removed, 1)
