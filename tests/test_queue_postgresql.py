"""
Tests for L{imapmig.queue.postgresql}: the queue's contract on a private
PostgreSQL (L{imapmig.testing.postgresql}, a fresh database per test), and
what only a shared database shows: concurrent claims, takeovers timed by
the database's clock, a heartbeat whose cost does not grow with the jobs
held; the control connection opened again after a restart and its waits
bounded, L{ThreadedJobQueue} as L{IAsyncJobQueue}, the heartbeat's
answer, costs flat in the jobs (by the server's statistics and plans,
never by times) and one daemon per account.  Without PostgreSQL they
skip, and fail under C{CI=true}.
"""

from __future__ import annotations

import queue as stdqueue
import threading
import time
from typing import Any, Callable, TypeVar

import psycopg
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import (
    ControlRefused,
    LeaseLost,
    PermanentError,
    QueueSchemaTooNew,
    QueueUnavailable,
    UnknownJob,
)
from imapmig.queue import (
    IAsyncJobQueue,
    IJobQueue,
    JobClaim,
    JobOutcome,
    ListChange,
    LiveDaemon,
    QueueCounts,
    QueueState,
    Requested,
)
from imapmig.queue import _pgcontrols
from imapmig.queue._pgjoblist import JobList, accountsOf
from imapmig.queue import _pgschema
from imapmig.queue._pgschema import SCHEMA_VERSION
from imapmig.queue._pgstatements import CLAIM, CLAIM_LOCK, HEARTBEAT, RELEASE
from imapmig.queue.postgresql import PostgreSQLJobQueue, ThreadedJobQueue
from imapmig.state._pgschema import SCHEMA_VERSION as STATE_SCHEMA_VERSION
from imapmig.state._pgschema import migrate as migrateState
from imapmig.state.pgconnect import applicationName
from imapmig.testing.postgresql import PASSWORD_ROLE, PostgreSQLCluster, requirePostgreSQL
from tests.test_queue import ContractQueue, JobQueueContractMixin
from tests.test_schedule_service import jobConfig

# How long a test waits for the database's clock to pass a lease: far
# beyond the 1 s lease, for a loaded machine.
_LEASE_WAIT = 60.0
_T = TypeVar("_T")
_COLUMNS = (
    "SELECT column_name FROM information_schema.columns"
    " WHERE table_schema = 'imapmig_queue' AND table_name = 'jobs'"
)


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

    def test_claimRoundTrips(self) -> None:
        """
        A claim sends three statements in its transaction: the lease's
        renewal, what runs before the claim as one script (a deferred job
        now due is queued by it), and the claim; each was one more round
        trip of every job's claim.
        """
        queue = self.queueOf(3)
        owner = queue.register("host", 1, "1.0", 600.0)
        first = queue.claim(owner, 0.0, 600.0)
        assert first is not None
        queue.finish(first, JobOutcome.DEFERRED, notBefore=50.0)
        connection = queue._connection
        assert connection is not None
        sent: list[object] = []
        execute = connection.execute

        def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(query)
            return execute(query, *args, **kwargs)

        connection.execute = counted  # type: ignore[method-assign]
        due = queue.claim(owner, 100.0, 600.0)
        self.assertEqual(len(sent), 3)
        assert due is not None
        self.assertEqual(due.job.name, "j0")

    def test_finishOneStatement(self) -> None:
        """
        A finish is one statement and no transaction of its own (it was
        two statements in one, four round trips): the job is done, and a
        job a reload removed while claimed leaves the queue.
        """
        queue = self.queueOf(2)
        owner = queue.register("host", 1, "1.0", 600.0)
        first = queue.claim(owner, 0.0, 600.0)
        second = queue.claim(owner, 0.0, 600.0)
        assert first is not None and second is not None
        self.sql("UPDATE imapmig_queue.jobs SET requested = 'remove' WHERE name = 'j1'")
        connection = queue._connection
        assert connection is not None
        sent: list[object] = []
        execute, transaction = connection.execute, connection.transaction

        def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(query)
            return execute(query, *args, **kwargs)

        def begun(*args: Any, **kwargs: Any) -> Any:
            sent.append("BEGIN")
            return transaction(*args, **kwargs)

        connection.execute = counted  # type: ignore[method-assign]
        connection.transaction = begun  # type: ignore[method-assign]
        queue.finish(first, JobOutcome.COMPLETED)
        queue.finish(second, JobOutcome.COMPLETED)
        self.assertEqual(len(sent), 2)
        self.assertEqual(
            self.sql("SELECT name, state, owner FROM imapmig_queue.jobs"), [("j0", "done", None)]
        )

    def test_claimAnswerLostGivenBack(self) -> None:
        """
        A claim whose C{COMMIT} succeeded but whose connection was killed
        before its answer fails with L{QueueUnavailable} and holds the job;
        C{giveBack} then finds it (not the claims the daemon knows, nor
        another daemon's) and queues it again as taken over from this
        daemon, so that the next claim waits the quiet period.
        """
        queue = self.queueOf(3)
        me = queue.register("host", 1, "1.0", 600.0)
        other = queue.register("host", 2, "1.0", 600.0)
        known = queue.claim(me, 0.0, 600.0)
        theirs = queue.claim(other, 0.0, 600.0)
        assert known is not None and theirs is not None
        run = queue._run

        def committedThenKilled(action: str, work: Callable[[Any], _T]) -> _T:
            run(action, work)
            connection = queue._connection
            assert connection is not None
            self.sql("SELECT pg_terminate_backend(%s)", connection.info.backend_pid)
            raise QueueUnavailable("the connection broke during COMMIT")

        queue._run = committedThenKilled  # type: ignore[method-assign]
        self.assertRaises(QueueUnavailable, queue.claim, me, 0.0, 600.0)
        queue._run = run  # type: ignore[method-assign]
        self.assertEqual(
            self.sql("SELECT owner::text FROM imapmig_queue.jobs WHERE name = 'j2'"), [(me,)]
        )
        try:
            given = queue.giveBack(me, frozenset({known.job.name}))
        except QueueUnavailable:
            # The killed connection found broken: the next call reconnects.
            given = queue.giveBack(me, frozenset({known.job.name}))
        self.assertEqual(given, ["j2"])
        self.assertEqual(queue.giveBack(me, frozenset({known.job.name})), [])
        self.assertEqual(
            self.sql("SELECT name, state, owner::text FROM imapmig_queue.jobs ORDER BY name"),
            [("j0", "claimed", me), ("j1", "claimed", other), ("j2", "queued", None)],
        )
        again = queue.claim(other, 0.0, 600.0)
        assert again is not None
        self.assertEqual((again.job.name, again.generation, again.takenFrom), ("j2", 2, me))

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

    def test_takeoverQuietFor(self) -> None:
        """
        A takeover's claim says how long the old owner has sent nothing,
        by the database's clock: since its lease ended, plus the margin
        C{lease / 4} of its send deadline when the lease ran out by itself;
        none when its retirement cut the lease short.  A job not taken over
        says nothing.
        """
        queue = self.queueOf(3)
        ranOut, retired = (queue.register("host", n, "1.0", 600.0) for n in (1, 2))
        for owner in (ranOut, retired):
            self.assertIsNotNone(queue.claim(owner, 0.0, 600.0))
        self.sql(
            "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '30 seconds'"
            " WHERE daemon_id = %s",
            ranOut,
        )
        queue.retire(retired)
        me = queue.register("host", 3, "1.0", 40.0)
        claims = [queue.claim(me, 0.0, 40.0) for _ in range(3)]
        found = [(c.job.name, c.takenFrom) for c in claims if c is not None]
        self.assertEqual(found, [("j0", ranOut), ("j1", retired), ("j2", None)])
        quiet = [c.quietFor for c in claims if c is not None]
        assert quiet[0] is not None and quiet[1] is not None
        self.assertTrue(30 + 10 <= quiet[0] < 30 + 10 + _LEASE_WAIT, quiet[0])
        self.assertTrue(0 <= quiet[1] < _LEASE_WAIT, quiet[1])
        self.assertIsNone(quiet[2])

    def heartbeatWrites(self, queue: PostgreSQLJobQueue, owner: str) -> dict[str, tuple[int, ...]]:
        """
        The rows one heartbeat of C{owner} inserts, updates and deletes,
        per table: the change of this backend's statistics around it (which
        hold this backend's counts not yet flushed too, hence the
        difference).
        """
        connection = queue._connection
        assert connection is not None
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

    def heartbeatPlan(self, owner: str) -> tuple[int, list[tuple[str, ...]]]:
        """
        The shared buffers one heartbeat of C{owner} touches and its plan's
        nodes (type, relation, index), by C{EXPLAIN (ANALYZE, BUFFERS)}
        (rolled back), the statistics fresh.
        """
        self.sql("VACUUM ANALYZE imapmig_queue.jobs")
        with psycopg.connect(self.uri) as connection:
            plan = connection.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) "
                + HEARTBEAT,
                {"me": owner, "lease": 600.0, "connections": None, "rate": None},
            ).fetchone()
            connection.rollback()
        assert plan is not None
        top = plan[0][0]["Plan"]
        nodes: list[tuple[str, ...]] = []

        def walk(node: dict[str, Any]) -> None:
            nodes.append(
                tuple(str(node.get(k, "")) for k in ("Node Type", "Relation Name", "Index Name"))
            )
            for child in node.get("Plans", ()):
                walk(child)

        walk(top)
        return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"]), nodes

    def test_heartbeatReadsFlat(self) -> None:
        """
        A heartbeat (the fleet's row and the live daemons read too) reads
        as many buffers, by the same plan, whether its daemon holds one job
        or a thousand (of 20,000): the controls asked are read through
        their own index, not among the jobs held.
        """
        queue = self.queueOf(20_000)
        me = queue.register("host", 1, "1.0", 600.0)
        queue.register("host", 2, "1.0", 600.0)
        queue.claim(me, 0.0, 600.0)
        queue.pause("j0")
        oneBuffers, onePlan = self.heartbeatPlan(me)
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s, generation = 1"
            " WHERE position < 1000",
            me,
        )
        self.assertEqual(queue.counts().claimed, 1000)
        buffers, plan = self.heartbeatPlan(me)
        self.assertEqual(plan, onePlan)
        self.assertLessEqual(buffers, oneBuffers + 2)

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
            self.sql("SELECT version FROM imapmig_queue.schema_version ORDER BY version"),
            [(version,) for version in range(1, SCHEMA_VERSION + 1)],
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


def inThread(call: Callable[[], object], wait: float = 120.0) -> object:
    """
    What C{call} returns or raises, called in a thread of its own; fails
    if it is still running after C{wait} seconds (waiting for ever).
    """
    result: list[object] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        raise AssertionError(f"{call} still waits after {wait} s")
    return result[0]


class ConnectionTests(PostgreSQLTestMixin):
    """
    The control connection: opened again after the database restarted,
    its errors imapmig's, its waits bounded.
    """

    def passwordQueue(self) -> PostgreSQLJobQueue:
        """
        A queue of two jobs on a database of L{PASSWORD_ROLE}, its password
        given apart from the URI.
        """
        dbname = self.cluster.createDatabase(owner=PASSWORD_ROLE).rsplit("/", 1)[1]
        queue = PostgreSQLJobQueue.connect(
            self.cluster.dsn(dbname, PASSWORD_ROLE),
            [jobConfig(f"j{i}", f"u{i}") for i in range(2)],
            password=self.cluster.password,
        )
        self.addCleanup(queue.close)
        return queue

    def test_reconnectsAfterRestart(self) -> None:
        """
        After the database restarted (C{-m immediate}), a call fails with
        L{QueueUnavailable} at most once and the next one connects again;
        while the database is down each call fails so, naming the database
        without the password; once it is back the queue carries on.
        """
        queue = self.passwordQueue()
        me = queue.register("host", 1, "1.0", 600.0)
        self.cluster.restart("immediate")
        try:
            queue.heartbeat(me, 600.0)
        except QueueUnavailable:
            pass
        self.assertEqual(queue.heartbeat(me, 600.0).requests, ())
        self.cluster.stop("immediate")
        for call in (lambda: queue.heartbeat(me, 600.0), lambda: queue.claim(me, 0.0, 600.0)):
            error = self.assertRaises(QueueUnavailable, call)
            self.assertIn(f"{queue.where}: cannot ", str(error))
            self.assertNotIn(self.cluster.password, str(error))
        self.assertEqual(queue.where, f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{self.cluster.port}/test2")
        self.cluster.start()
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job.name, "j0")
        self.assertRaises(ControlRefused, queue.resume, "j1")

    def test_controlWaitsForALockNoLonger(self) -> None:
        """
        A control waits for a row lock another transaction holds no longer
        than the control connection's C{lock_timeout} (5 s), failing with
        L{QueueUnavailable}; the heartbeat goes on meanwhile, and waits no
        longer either for its own row.
        """
        queue = self.queueOf(2)
        me = queue.register("host", 1, "1.0", 600.0)
        assert queue._connection is not None
        self.assertEqual(
            [
                queue._connection.execute(f"SHOW {name}").fetchone()
                for name in ("statement_timeout", "lock_timeout")
            ],
            [("5s",), ("5s",)],
        )
        with psycopg.connect(self.uri) as other:
            other.execute("SELECT 1 FROM imapmig_queue.jobs WHERE name = 'j0' FOR UPDATE")
            error = inThread(lambda: queue.pause("j0"))
            self.assertIsInstance(error, QueueUnavailable)
            self.assertRegex(str(error), "due to (statement|lock) timeout")
            self.assertEqual(queue.heartbeat(me, 600.0).requests, ())
            other.execute(
                "SELECT 1 FROM imapmig_queue.daemons WHERE daemon_id = %s FOR UPDATE", (me,)
            )
            self.assertIsInstance(inThread(lambda: queue.heartbeat(me, 600.0)), QueueUnavailable)
        self.assertEqual(queue.pause("j0"), QueueState.PAUSED)


class Reactor:
    """
    A reactor whose C{callFromThread} queues the call for the test's
    thread (L{pump}).
    """

    def __init__(self) -> None:
        self.calls: stdqueue.Queue[Callable[[], object]] = stdqueue.Queue()

    def callFromThread(self, f: Callable[..., object], *a: object, **kw: object) -> None:
        self.calls.put(lambda: f(*a, **kw))

    def pump(self, d: Deferred[_T]) -> _T:
        """
        Run the calls from the threads until C{d} has fired; its result.
        """
        results: list[_T | Failure] = []
        d.addBoth(results.append)
        while not results:
            self.calls.get(timeout=60)()
        if isinstance(results[0], Failure):
            results[0].raiseException()
        return results[0]


class ThreadedTests(PostgreSQLTestMixin):
    """
    L{ThreadedJobQueue}, the queue as a fleet's daemon uses it.
    """

    def threaded(self, count: int = 3, threads: int = 3) -> tuple[ThreadedJobQueue, Reactor]:
        pool = ThreadPool(1, threads)
        pool.start()
        self.addCleanup(pool.stop)
        reactor = Reactor()
        return ThreadedJobQueue(self.queueOf(count), reactor, pool), reactor  # type: ignore[arg-type]

    def test_interface(self) -> None:
        """
        It provides L{IAsyncJobQueue}: every method of L{IJobQueue} but
        C{renew}, with C{retire} and C{close}, each returning a
        L{Deferred}.
        """
        threaded, reactor = self.threaded()
        self.assertTrue(verifyObject(IAsyncJobQueue, threaded))
        me = reactor.pump(threaded.register("host", 1, "1.0", 600.0))
        claim = reactor.pump(threaded.claim(me, 0.0, 600.0))
        assert claim is not None
        self.assertEqual(claim.job.name, "j0")
        beat = reactor.pump(threaded.heartbeat(me, 600.0, {"s": 1}))
        self.assertEqual(beat.live, (LiveDaemon(me, (("s", 1),)),))
        self.assertEqual(reactor.pump(threaded.pause("j1", "alice")), QueueState.PAUSED)
        self.assertEqual(reactor.pump(threaded.resume("j1")), QueueState.QUEUED)
        self.assertEqual(reactor.pump(threaded.cancel("j2")), QueueState.CANCELLED)
        self.assertEqual(reactor.pump(threaded.requeue("j0")), QueueState.CLAIMED)
        self.assertEqual(reactor.pump(threaded.state("j0")), QueueState.CLAIMED)
        self.assertIsNone(reactor.pump(threaded.add(jobConfig("j3", "u3"))))
        self.assertEqual(reactor.pump(threaded.replace(jobConfig("j3", "v3"))), QueueState.QUEUED)
        self.assertEqual(reactor.pump(threaded.remove("j3")), QueueState.QUEUED)
        self.assertIsNone(reactor.pump(threaded.finish(claim, JobOutcome.COMPLETED)))
        self.assertEqual(reactor.pump(threaded.counts()).queued, 2)
        self.assertIsNone(reactor.pump(threaded.nextDue()))
        self.assertIsNone(reactor.pump(threaded.retire(me)))
        self.assertRaises(UnknownJob, reactor.pump, threaded.state("j3"))

    def test_oneConnection(self) -> None:
        """
        Calls made at once run one after the other on one connection,
        named for its process and role, never on more, whatever the
        pool's threads.
        """
        threaded, reactor = self.threaded()
        me = reactor.pump(threaded.register("host", 1, "1.0", 600.0))
        asked: list[Deferred[Any]] = [threaded.heartbeat(me, 600.0) for _ in range(10)]
        asked += [threaded.claim(me, 0.0, 600.0) for _ in range(3)]
        for d in asked:
            reactor.pump(d)
        self.assertEqual(
            self.sql(
                "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'imapmig %%'"
            ),
            [(applicationName("control"),)],
        )

    def test_retire(self) -> None:
        """
        A retired daemon's jobs are taken over at once by the next claim;
        its heartbeat is refused; retiring it again changes nothing.
        """
        threaded, reactor = self.threaded()
        old = reactor.pump(threaded.register("host", 1, "1.0", 600.0))
        reactor.pump(threaded.claim(old, 0.0, 600.0))
        reactor.pump(threaded.retire(old))
        new = reactor.pump(threaded.register("host", 2, "1.0", 600.0))
        taken = reactor.pump(threaded.claim(new, 0.0, 600.0))
        assert taken is not None
        self.assertEqual((taken.job.name, taken.takenFrom), ("j0", old))
        self.assertRaises(LeaseLost, reactor.pump, threaded.heartbeat(old, 600.0))
        retired = "SELECT lease_until, retired_at FROM imapmig_queue.daemons WHERE daemon_id = %s"
        before = self.sql(retired, old)
        self.assertIsNotNone(before[0][1])
        reactor.pump(threaded.retire(old))
        self.assertEqual(self.sql(retired, old), before)

    def test_close(self) -> None:
        """
        Once closed, its connection is closed and every call fails with a
        L{PermanentError}.
        """
        threaded, reactor = self.threaded()
        reactor.pump(threaded.register("host", 1, "1.0", 600.0))
        threaded.close()
        self.assertIsNone(threaded.queue._connection)
        self.failureResultOf(threaded.counts(), PermanentError)
        self.assertRaises(PermanentError, threaded.queue.counts)


class HeartbeatTests(PostgreSQLTestMixin):
    """
    What a heartbeat brings back.
    """

    def test_enriched(self) -> None:
        """
        A heartbeat records the connections its daemon reports and brings
        back the controls asked of its jobs with who asked them, the
        queue's schema version, the job list's generation (raised by a
        reload's change), and the live daemons sorted by id with their
        connections (a retired one left out).
        """
        queue = self.queueOf(3)
        daemons = sorted(queue.register("host", n, "1.0", 600.0) for n in range(3))
        me, other, gone = daemons[1], daemons[0], daemons[2]
        queue.retire(gone)
        queue.heartbeat(other, 600.0, {"imap.b": 2, "imap.a": 1})
        queue.claim(me, 0.0, 600.0)
        queue.claim(me, 0.0, 600.0)
        queue.pause("j0", by="alice")
        queue.cancel("j1")
        beat = queue.heartbeat(me, 600.0, {"imap.a": 3})
        self.assertEqual(beat.requests, (("j0", Requested.PAUSE), ("j1", Requested.CANCEL)))
        self.assertEqual(beat.requestedBy, (("j0", "alice"),))
        self.assertEqual(beat.schemaVersion, SCHEMA_VERSION)
        self.assertEqual(beat.jobsGeneration, 1)
        self.assertEqual(
            beat.live,
            (
                LiveDaemon(other, (("imap.a", 1), ("imap.b", 2))),
                LiveDaemon(me, (("imap.a", 3),)),
            ),
        )
        queue.add(jobConfig("j3", "u3"))
        again = queue.heartbeat(me, 600.0)
        self.assertEqual(again.jobsGeneration, 2)
        # No state store beside the queue: no state schema.
        self.assertIsNone(again.stateSchemaVersion)
        self.assertEqual(again.live, beat.live)

    def test_stateSchemaVersion(self) -> None:
        """
        A heartbeat brings back the state store's schema version (the
        newest of C{imapmig.schema_version}) once the store shares the
        database: a later daemon's migration is seen at the next beat.
        """
        with psycopg.connect(self.uri, autocommit=True) as connection:
            migrateState(connection, "db", "test")
        queue = self.queueOf(1)
        me = queue.register("host", 1, "1.0", 600.0)
        self.assertEqual(queue.heartbeat(me, 600.0).stateSchemaVersion, STATE_SCHEMA_VERSION)
        self.sql(
            "INSERT INTO imapmig.schema_version VALUES (%s, now(), 'later')",
            STATE_SCHEMA_VERSION + 1,
        )
        self.assertEqual(
            queue.heartbeat(me, 600.0).stateSchemaVersion, STATE_SCHEMA_VERSION + 1
        )

    def test_removedWhileClaimed(self) -> None:
        """
        A claimed job a reload removed is no control of its owner's: the
        heartbeat and the renewal bring back none.
        """
        queue = self.queueOf(1)
        me = queue.register("host", 1, "1.0", 600.0)
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        queue.pause("j0")
        self.assertEqual(queue.remove("j0"), QueueState.CLAIMED)
        self.assertEqual(queue.heartbeat(me, 600.0).requests, ())
        self.assertIsNone(queue.renew(claim, 600.0).requested)


    def test_removedWhileClaimedEndsThere(self) -> None:
        """
        A job one daemon's reload removes while another runs it goes on
        there: its owner's renewals hold, it is leaving until its owner
        finishes it, which deletes its row; then no daemon claims it.
        A row deleted by hand under a claim ends that claim: its renewal
        fails with L{LeaseLost}, and its finish changes nothing, silently.
        """
        owner, reloading = self.queueOf(3), self.queueOf(3)
        me = owner.register("host1", 1, "1.0", 600.0)
        claims = [owner.claim(me, 0.0, 600.0) for _ in range(2)]
        assert claims[0] is not None and claims[1] is not None
        change = reloading.replaceList([jobConfig("j2", "u2")])
        self.assertEqual((change.removed, change.leaving), (0, 2))
        self.assertEqual(reloading.leaving(["j0", "j1", "j2"]), {"j0", "j1"})
        self.assertIsNone(owner.renew(claims[0], 600.0).requested)
        owner.finish(claims[0], JobOutcome.COMPLETED)
        self.assertEqual(reloading.leaving(["j0", "j1"]), {"j1"})
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.jobs WHERE name = 'j0'"), [(0,)])
        self.sql("DELETE FROM imapmig_queue.jobs WHERE name = 'j1'")
        self.assertRaises(LeaseLost, owner.renew, claims[1], 600.0)
        owner.finish(claims[1], JobOutcome.COMPLETED)
        self.assertEqual(reloading.leaving(["j0", "j1"]), frozenset())
        other = reloading.register("host2", 2, "1.0", 600.0)
        self.assertEqual([c.job.name if c else None for c in [reloading.claim(other, 0.0, 600.0)]], ["j2"])


class ScaleTests(PostgreSQLTestMixin):
    """
    What keeps the queue's costs flat in the number of jobs: read from
    the server's statistics and plans, never from times.
    """

    def reads(self, queue: PostgreSQLJobQueue, call: Callable[[], object]) -> dict[str, int]:
        """
        The scans of C{imapmig_queue.jobs} C{call} made on the queue's
        connection (C{seq_scan}, C{idx_scan}).
        """
        connection = queue._connection
        assert connection is not None
        scans = (
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'imapmig_queue' AND relname = 'jobs'"
        )
        with connection.transaction():
            before = connection.execute(scans).fetchone()
            call()
            after = connection.execute(scans).fetchone()
        assert before is not None and after is not None
        return {"seq_scan": after[0] - before[0], "idx_scan": after[1] - before[1]}

    def test_countsReadNoJob(self) -> None:
        """
        The counts are read from the counts the triggers keep, not from
        the jobs, and follow every change (by the queue or by hand).
        """
        queue = self.queueOf(2000)
        me = queue.register("host", 1, "1.0", 600.0)
        queue.claim(me, 0.0, 600.0)
        queue.pause("j1")
        queue.cancel("j2")
        self.sql("UPDATE imapmig_queue.jobs SET state = 'done' WHERE position BETWEEN 10 AND 19")
        self.sql("DELETE FROM imapmig_queue.jobs WHERE position BETWEEN 20 AND 24")
        self.sql("UPDATE imapmig_queue.jobs SET requested = 'rerun' WHERE position = 0")
        self.assertEqual(self.reads(queue, queue.counts), {"seq_scan": 0, "idx_scan": 0})
        self.assertEqual(
            queue.counts(),
            QueueCounts(queued=1982, claimed=1, finished=11, paused=1, cancelled=1),
        )
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.job_counts"), [(5,)])

    def test_countsStayBounded(self) -> None:
        """
        The counts' rows stay a handful however many statements changed
        the jobs, with no call of C{counts}: each claim folds the rows the
        triggers added (300 claims and finishes by three daemons, and
        controls between them, leave no more rows than the jobs' seven
        states).
        """
        queue = self.queueOf(300)
        daemons = [queue.register("host", n, "1.0", 600.0) for n in range(3)]
        for i in range(100):
            for me in daemons:
                claim = queue.claim(me, 0.0, 600.0)
                assert claim is not None
                queue.pause(claim.job.name)
                queue.finish(claim, JobOutcome.COMPLETED)
        self.assertLessEqual(
            self.sql("SELECT count(*) FROM imapmig_queue.job_counts")[0][0], 7  # the states
        )
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=0, finished=300))

    def test_addReadsByIndex(self) -> None:
        """
        A job added is placed after the last by an index, not by a scan of
        the jobs.
        """
        queue = self.queueOf(5000)
        self.sql("ANALYZE imapmig_queue.jobs")
        self.assertEqual(self.reads(queue, lambda: queue.add(jobConfig("new", "n")))["seq_scan"], 0)
        self.assertEqual(
            self.sql("SELECT position FROM imapmig_queue.jobs WHERE name = 'new'"), [(5000,)]
        )

    def claimPlan(self, queue: PostgreSQLJobQueue, me: str) -> dict[str, Any]:
        """
        The plan of the claim's statement as it runs (its work rolled
        back), as C{EXPLAIN (ANALYZE, FORMAT JSON)} gives it.
        """
        with psycopg.connect(self.uri) as connection:
            row = connection.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) " + CLAIM,
                {"me": me, "list": queue._list.digest, "skip": []},
            ).fetchone()
            connection.rollback()
        assert row is not None
        return dict(row[0][0]["Plan"])

    def test_claimHeadByQueuedIndex(self) -> None:
        """
        The claim finds the head of the queue through C{jobs_queued}, the
        index of the queued jobs only, while the statistics still say
        every job is queued (a fresh list, 60 claims and finishes later):
        before schema step 5 it read C{jobs_position}, of every job, past
        each job finished since, a cost growing with the jobs done.
        """
        queue = self.queueOf(1000)
        self.sql("VACUUM ANALYZE imapmig_queue.jobs")
        daemons = [queue.register("host", n, "1.0", 600.0) for n in range(3)]
        for n in range(60):
            claim = queue.claim(daemons[n % 3], 0.0, 600.0)
            assert claim is not None
            queue.finish(claim, JobOutcome.COMPLETED)
        me = daemons[0]
        scans: list[tuple[str, int]] = []

        def walk(node: dict[str, Any]) -> None:
            if node.get("Alias") == "q":
                scans.append((str(node.get("Index Name")), int(node.get("Rows Removed by Filter", 0))))
            for child in node.get("Plans", ()):
                walk(child)

        walk(self.claimPlan(queue, me))
        self.assertEqual(scans, [("jobs_queued", 0)])

    def test_claimUpdatesFewIndexes(self) -> None:
        """
        A claim writes its row's entries in the indexes of all the jobs
        that need one, each one B-tree level deeper at a million jobs:
        the job's name (its key) and its position; no other key.
        """
        self.queueOf(1)
        self.assertEqual(
            self.sql(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'imapmig_queue.jobs'::regclass AND i.indpred IS NULL"
                " ORDER BY 1"
            ),
            [("jobs_pkey",), ("jobs_position",)],
        )
        self.assertEqual(
            self.sql(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
                " ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)"
                " WHERE i.indrelid = 'imapmig_queue.jobs'::regclass AND i.indisprimary"
            ),
            [("name",)],
        )

    def test_migratedFromVersion4(self) -> None:
        """
        Step 5 migrates a queue of version 4 in use: its jobs keep their
        states, owners and generations, the claims go on, and C{job_id}
        is gone.
        """
        self.patch(_pgschema, "SCHEMA_VERSION", 4)
        old = self.queueOf(5)
        me = old.register("host", 1, "1.0", 600.0)
        first = old.claim(me, 0.0, 600.0)
        assert first is not None
        old.pause("j3")
        self.assertIn(("job_id",), self.sql(_COLUMNS))
        old.close()
        self.patch(_pgschema, "SCHEMA_VERSION", 5)
        queue = self.queueOf(5)
        self.assertEqual(
            self.sql("SELECT max(version) FROM imapmig_queue.schema_version"), [(5,)]
        )
        self.assertNotIn(("job_id",), self.sql(_COLUMNS))
        self.assertEqual(
            self.sql("SELECT name, state, generation FROM imapmig_queue.jobs ORDER BY position"),
            [("j0", "claimed", 1), ("j1", "queued", 0), ("j2", "queued", 0),
             ("j3", "paused", 0), ("j4", "queued", 0)],
        )  # fmt: skip
        second = queue.claim(me, 0.0, 600.0)
        assert second is not None
        self.assertEqual((second.job.name, second.generation), ("j1", 1))
        queue.finish(first, JobOutcome.COMPLETED)
        self.assertEqual(queue.counts(), QueueCounts(queued=2, claimed=1, finished=1, paused=1))

    def test_releaseByExpiredOwner(self) -> None:
        """
        The jobs of a daemon whose lease ended are found by its id in the
        index of claimed jobs, not among all the claimed jobs.
        """
        queue = self.queueOf(2000)
        live = queue.register("host", 1, "1.0", 600.0)
        dead = queue.register("host", 2, "1.0", 600.0)
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s WHERE position < 300", live
        )
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s"
            " WHERE position BETWEEN 300 AND 301",
            dead,
        )
        self.sql("UPDATE imapmig_queue.daemons SET lease_until = now() WHERE daemon_id = %s", dead)
        self.sql("VACUUM ANALYZE imapmig_queue.jobs")
        with psycopg.connect(self.uri) as connection:
            plan = connection.execute(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) " + RELEASE
            ).fetchone()
            connection.rollback()
        assert plan is not None
        scans: list[dict[str, Any]] = []

        def walk(node: dict[str, Any]) -> None:
            if node.get("Index Name") == "jobs_claimed":
                scans.append(node)
            for child in node.get("Plans", ()):
                walk(child)

        walk(plan[0][0]["Plan"])
        self.assertEqual(
            [
                (str(n.get("Index Cond")).startswith("(owner = ANY "), n["Actual Rows"] * n["Actual Loops"])
                for n in scans
            ],
            [(True, 2)],
        )

    def test_daemonsPruned(self) -> None:
        """
        A claim deletes the rows of daemons whose lease ended more than a
        day ago once no job names them (their jobs released first); a
        row whose job could not be released yet stays, as do the others.
        """
        queue = self.queueOf(3)
        old, held, recent, me = (queue.register("host", n, "1.0", 600.0) for n in range(4))
        for n, owner in enumerate((old, held)):
            self.sql(
                "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s WHERE position = %s",
                owner,
                n,
            )
        self.sql(
            "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '25 hours'"
            " WHERE daemon_id IN (%s, %s)",
            old,
            held,
        )
        self.sql(
            "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '23 hours'"
            " WHERE daemon_id = %s",
            recent,
        )
        with psycopg.connect(self.uri) as other:
            other.execute("SELECT 1 FROM imapmig_queue.jobs WHERE position = 1 FOR UPDATE")
            claim = queue.claim(me, 0.0, 600.0)
            assert claim is not None
            self.assertEqual((claim.job.name, claim.takenFrom), ("j0", old))
            self.assertEqual(
                sorted(self.sql("SELECT daemon_id::text FROM imapmig_queue.daemons")),
                sorted([(held,), (recent,), (me,)]),
            )
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual((claim.job.name, claim.takenFrom), ("j1", held))
        self.assertEqual(
            sorted(self.sql("SELECT daemon_id::text FROM imapmig_queue.daemons")),
            sorted([(recent,), (me,)]),
        )

    def test_orphansReleasedAtRegistration(self) -> None:
        """
        A claimed job whose daemon's row is gone (deleted by hand) is queued
        again when a daemon registers, as a takeover.
        """
        queue = self.queueOf(2)
        gone = queue.register("host", 1, "1.0", 600.0)
        queue.claim(gone, 0.0, 600.0)
        self.sql("DELETE FROM imapmig_queue.daemons WHERE daemon_id = %s", gone)
        me = queue.register("host", 2, "1.0", 600.0)
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual((claim.job.name, claim.takenFrom), ("j0", gone))


class AccountTests(PostgreSQLTestMixin):
    """
    One daemon per account (docs/fleet-design.md "Claiming a job").
    """

    def test_accountsOf(self) -> None:
        """
        A job's accounts are its destination's and, from IMAP, its
        source's, as C{server/user} keys.
        """
        self.assertEqual(accountsOf(jobConfig("a", "u1")), ["s/u1"])
        self.assertEqual(accountsOf(jobConfig("a", "u1", "t", "u2")), ["t/u1", "t/u2"])

    def accountQueue(self) -> PostgreSQLJobQueue:
        jobs = [
            jobConfig("a", "u0"),
            jobConfig("b", "u0"),
            jobConfig("c", "u2"),
            jobConfig("d", "u3", sourceUser="u0"),
            jobConfig("e", 'we"ird,user}'),
        ]
        queue = PostgreSQLJobQueue.connect(self.uri, jobs)
        self.addCleanup(queue.close)
        return queue

    def claimed(self, queue: PostgreSQLJobQueue, owner: str) -> str | None:
        claim = queue.claim(owner, 0.0, 600.0)
        return None if claim is None else claim.job.name

    def test_oneDaemonPerAccount(self) -> None:
        """
        A daemon does not claim a job sharing an account (destination or
        source) with a job another daemon holds; the holder may, and the
        job is claimable again once the other's claim is finished.
        """
        queue = self.accountQueue()
        self.assertEqual(
            self.sql("SELECT name, accounts FROM imapmig_queue.jobs ORDER BY position"),
            [
                ("a", ["s/u0"]),
                ("b", ["s/u0"]),
                ("c", ["s/u2"]),
                ("d", ["s/u0", "s/u3"]),
                ("e", ['s/we"ird,user}']),
            ],
        )
        first, second = (queue.register("host", n, "1.0", 600.0) for n in range(2))
        claim = queue.claim(first, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(
            [self.claimed(queue, second) for _ in range(3)], ["c", "e", None]
        )
        self.assertEqual([self.claimed(queue, first) for _ in range(3)], ["b", "d", None])
        queue.add(jobConfig("f", "u2"))
        self.assertIsNone(self.claimed(queue, first))
        self.assertEqual(self.claimed(queue, second), "f")

    def test_listChangesWriteAccounts(self) -> None:
        """
        A reload (C{replaceList}), C{add} and C{replace} write each row's
        accounts with its digest: the claims test a changed job's new
        accounts (C{g} shares C{a}'s old one, C{c} its new one).
        """
        queue = self.accountQueue()
        jobs = [jobConfig("a", "u5"), jobConfig("c", "u2"), jobConfig("g", "u0")]
        self.assertEqual(queue.replaceList(jobs), ListChange(2, added=1, removed=3, changed=1))
        queue.add(jobConfig("h", "u6", sourceUser="u8"))
        queue.replace(jobConfig("c", "u5"))
        digests = JobList.of(
            jobs[:1] + [jobConfig("c", "u5"), jobs[2], jobConfig("h", "u6", sourceUser="u8")]
        ).digests
        self.assertEqual(
            self.sql("SELECT name, accounts, digest FROM imapmig_queue.jobs ORDER BY position"),
            [
                ("a", ["s/u5"], digests["a"]),
                ("c", ["s/u5"], digests["c"]),
                ("g", ["s/u0"], digests["g"]),
                ("h", ["s/u6", "s/u8"], digests["h"]),
            ],
        )
        first, second = (queue.register("host", n, "1.0", 600.0) for n in range(2))
        self.assertEqual(self.claimed(queue, first), "a")
        self.assertEqual(self.claimed(queue, second), "g")

    def test_accountRace(self) -> None:
        """
        Three daemons claiming at once from jobs of one account: one daemon
        holds them all.
        """
        queues = [self.queueOf(0) for _ in range(3)]
        for i in range(30):
            queues[0].add(jobConfig(f"j{i}", "u0"))
        owners = [q.register("host", n, "1.0", 600.0) for n, q in enumerate(queues)]
        start = threading.Barrier(3)

        def claimAll(n: int) -> object:
            start.wait()
            while queues[n].claim(owners[n], 0.0, 600.0) is not None:
                pass
            return None

        threads = [threading.Thread(target=inThread, args=(lambda n=n: claimAll(n),)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        self.assertEqual(
            self.sql(
                "SELECT count(*), count(DISTINCT owner) FROM imapmig_queue.jobs WHERE state = 'claimed'"
            ),
            [(30, 1)],
        )

    def test_claimInFlight(self) -> None:
        """
        A claim waits for another daemon's claim in flight (not yet
        committed) before it tests the accounts, so it never takes a job of
        the account that claim takes, whichever commits first.
        """
        queue = self.queueOf(0)
        for i in range(3):
            queue.add(jobConfig(f"j{i}", "u0"))
        other, me = (queue.register("host", n, "1.0", 600.0) for n in range(2))
        with psycopg.connect(self.uri) as inFlight:
            inFlight.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK,))
            inFlight.execute(CLAIM, {"me": other, "list": queue._list.digest, "skip": []})
            mine: list[object] = []
            claiming = threading.Thread(
                target=lambda: mine.append(inThread(lambda: queue.claim(me, 0.0, 600.0)))
            )
            claiming.start()
            time.sleep(0.5)
            inFlight.commit()
        claiming.join(180)
        self.assertEqual(mine, [None])


class BulkControlTests(PostgreSQLTestMixin):
    """
    A bulk control (L{PostgreSQLJobQueue.controlMany}) is one statement
    that changes each job as its own control would.
    """

    COLUMNS = "name, state, requested, requested_by, not_before"

    def fleetOfEveryState(self) -> PostgreSQLJobQueue:
        """
        A queue of 12 jobs in every state a control meets: j0 and j1
        claimed by another daemon (j1 asked to pause), j2 claimed and
        leaving (a reload removed it), j3 done, j4 failed, j5 deferred,
        j6 paused, j7 cancelled, j8 paused while deferred, the rest queued.
        """
        queue = self.queueOf(12)
        other = queue.register("host2", 2, "1.0", 600.0)
        claims = {}
        for _ in range(6):
            claim = queue.claim(other, 0.0, 600.0)
            assert claim is not None
            claims[claim.job.name] = claim
        queue.finish(claims["j3"], JobOutcome.COMPLETED)
        queue.finish(claims["j4"], JobOutcome.FAILED)
        queue.finish(claims["j5"], JobOutcome.DEFERRED, time.time() + 3600)
        queue.pause("j1", "bob")
        queue.remove("j2")
        queue.pause("j6")
        queue.cancel("j7")
        queue.add(jobConfig("j2", "u2"))
        queue.remove("j2")
        self.sql(
            "UPDATE imapmig_queue.jobs SET state = 'paused', not_before = now() + interval '1 h'"
            " WHERE name = 'j8'"
        )
        return queue

    def rows(self) -> list[tuple[Any, ...]]:
        return self.sql(f"SELECT {self.COLUMNS} FROM imapmig_queue.jobs ORDER BY name")

    def restore(self, rows: list[tuple[Any, ...]]) -> None:
        for name, state, requested, by, notBefore in rows:
            self.sql(
                "UPDATE imapmig_queue.jobs SET state = %s, requested = %s, requested_by = %s,"
                " not_before = %s WHERE name = %s",
                state, requested, by, notBefore, name,
            )  # fmt: skip

    def test_sameAsEachJobsControl(self) -> None:
        """
        Of a selection (every job but j9, and j0 skipped) and of every
        job, each control changes the rows as each job's own control, by
        the same admin, does, and counts the jobs that took it as those
        controls did not refuse.
        """
        queue = self.fleetOfEveryState()
        before = self.rows()
        names = [f"j{i}" for i in range(12) if i != 9] + ["nope"]
        for control in ("pause", "resume", "cancel", "requeue"):
            for chosen in (names, None):
                each = 0
                for name in chosen or [f"j{i}" for i in range(12)]:
                    if name == "j0":
                        continue
                    try:
                        getattr(queue, control)(name, "alice")
                    except (ControlRefused, UnknownJob):
                        continue
                    each += 1
                expected = self.rows()
                self.restore(before)
                many = queue.controlMany(control, chosen, ["j0"], "alice")
                self.assertEqual((control, many, self.rows()), (control, each, expected))
                self.restore(before)

    def test_selection(self) -> None:
        """
        A bulk control of every job, or of some, but those skipped, counts
        the jobs it changed, whatever the parts it is cut into.
        """
        queue = self.queueOf(1000)
        self.assertEqual(queue.controlMany("pause", None, (), "alice"), 1000)
        self.assertEqual(queue.counts().paused, 1000)
        self.patch(_pgcontrols, "BULK_PART", 7)
        self.assertEqual(queue.controlMany("resume", [f"j{i}" for i in range(500)], ("j0",), "alice"), 499)
        self.assertEqual(queue.counts().paused, 501)
        self.assertEqual(queue.controlMany("resume", None, ("j999",), "alice"), 500)
        self.assertEqual(queue.counts().paused, 1)

    def test_partsBetweenHeartbeats(self) -> None:
        """
        Through L{ThreadedJobQueue}, a bulk control runs each part as a
        call of its own: a heartbeat asked meanwhile is answered between
        two parts, not after the last.
        """
        pool = ThreadPool(1, 3)
        pool.start()
        self.addCleanup(pool.stop)
        reactor = Reactor()
        threaded = ThreadedJobQueue(self.queueOf(100), reactor, pool)  # type: ignore[arg-type]
        me = reactor.pump(threaded.register("host", 1, "1.0", 600.0))
        self.patch(_pgcontrols, "BULK_PART", 10)
        answered: list[str] = []
        pausing = threaded.controlMany("pause", None, (), "alice")
        pausing.addCallback(lambda n: answered.append(f"paused {n}"))
        threaded.heartbeat(me, 600.0).addCallback(lambda beat: answered.append("heartbeat"))
        reactor.pump(pausing)
        self.assertEqual(answered, ["heartbeat", "paused 100"])
