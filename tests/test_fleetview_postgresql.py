# -*- test-case-name: tests.test_fleetview_postgresql -*-
"""
Tests for L{imapmig.queue._pgfleetview}: the fleet's read model on a
private PostgreSQL (L{imapmig.testing.postgresql}, a fresh database per
test), its daemons registered and its jobs claimed through
L{PostgreSQLJobQueue}; and the plans of its statements at 100,000 jobs.
Without PostgreSQL they skip, and fail under C{CI=true}.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError, QueueUnavailable, TransientError
from imapmig.queue import JobOutcome
from imapmig.queue.fleetview import Holder, IFleetView, JobRow
from imapmig.queue._pgfleetview import (
    COUNTS,
    DAEMONS,
    FIND_JOBS,
    HOLDERS,
    JOBS_PAGE,
    MAX_DAEMONS,
    SHOWN_AFTER_LEASE,
    WAIT,
    PostgreSQLFleetView,
    onConnection,
    throughStore,
)
from imapmig.queue.postgresql import PostgreSQLJobQueue
from imapmig.state.postgresql import PostgreSQLStateStore
from tests.statecontract import SynchronousReactor, SynchronousThreadPool
from tests.test_queue_postgresql import PostgreSQLTestMixin


class PostgreSQLFleetViewTests(PostgreSQLTestMixin):
    """
    The view reads the daemons and the holders the queue wrote.
    """

    def setUp(self) -> None:
        super().setUp()
        self.me: str | None = None
        self.connection: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(
            self.uri, autocommit=True
        )
        self.addCleanup(self.connection.close)
        pool: ThreadPool = SynchronousThreadPool()
        self.view = PostgreSQLFleetView(
            onConnection(
                SynchronousReactor(), pool, lambda: self.connection, "postgresql:///fleet"
            ),
            lambda: self.me,
        )

    def register(self, queue: PostgreSQLJobQueue, host: str, pid: int) -> str:
        return queue.register(host, pid, "1.0", 600.0)

    def test_interface(self) -> None:
        """
        It provides L{IFleetView}.
        """
        self.assertTrue(verifyObject(IFleetView, self.view))

    def test_daemonsAndHolders(self) -> None:
        """
        Two daemons on two connections, the first holding two jobs and the
        second one: each daemon's row has its host, pid, version, start,
        heartbeat, live lease and the jobs it holds; the one serving the
        page is marked; each claimed job names its holder, the others
        none.  A daemon whose lease ended is shown not live, after the live
        ones, with the job it still holds; a retired one is not shown.
        """
        a, b, c, d = (self.queueOf(6) for _ in range(4))
        mig1 = self.register(a, "mig1", 11)
        mig2 = self.register(b, "mig2", 22)
        dead = self.register(c, "mig0", 33)
        retired = self.register(d, "mig9", 44)
        self.me = mig2
        claims = [a.claim(mig1, 0.0, 600.0), a.claim(mig1, 0.0, 600.0)]
        claims += [b.claim(mig2, 0.0, 600.0), c.claim(dead, 0.0, 600.0)]
        self.assertEqual([claim and claim.job.name for claim in claims], ["j0", "j1", "j2", "j3"])
        self.sql(
            "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '1 second'"
            " WHERE daemon_id = %s",
            dead,
        )
        self.sql(
            "UPDATE imapmig_queue.daemons SET retired_at = now() WHERE daemon_id = %s", retired
        )
        fleet = self.successResultOf(self.view.daemons())
        self.assertEqual(
            [(r.daemonId, r.host, r.pid, r.version, r.live, r.jobs, r.this) for r in fleet.daemons],
            [
                (mig1, "mig1", 11, "1.0", True, 2, False),
                (mig2, "mig2", 22, "1.0", True, 1, True),
                (dead, "mig0", 33, "1.0", False, 1, False),
            ],
        )
        self.assertEqual(fleet.live, 2)
        [(started, beat, lease)] = self.sql(
            "SELECT extract(epoch FROM started_at)::float8,"
            " extract(epoch FROM heartbeat_at)::float8,"
            " extract(epoch FROM lease_until)::float8 FROM imapmig_queue.daemons"
            " WHERE daemon_id = %s",
            mig1,
        )
        row = fleet.daemons[0]
        self.assertEqual((row.startedAt, row.heartbeatAt, row.leaseUntil), (started, beat, lease))
        self.assertGreaterEqual(row.heartbeatAge, 0.0)
        self.assertLess(row.heartbeatAge, 600.0)
        # No heartbeat has reported a rate yet.
        self.assertEqual(row.rate, 0.0)
        self.assertEqual(
            self.successResultOf(self.view.holders(["j0", "j1", "j2", "j3", "j4", "nosuch"])),
            {
                "j0": Holder(mig1, "mig1"),
                "j1": Holder(mig1, "mig1"),
                "j2": Holder(mig2, "mig2"),
                "j3": Holder(dead, "mig0", live=False),
            },
        )
        # A finished job is held by no one.
        first = claims[0]
        assert first is not None
        a.finish(first, JobOutcome.COMPLETED)
        self.assertEqual(self.successResultOf(self.view.holders(["j0"])), {})
        self.assertEqual(self.successResultOf(self.view.daemons()).daemons[0].jobs, 1)

    def test_jobsPageAndCounts(self) -> None:
        """
        The jobs are paged by position, each with its state, its request
        and its holder (a claimed one), the next page's key given until
        the last page; the counts are the jobs by state.
        """
        queue = self.queueOf(5)
        mig1 = self.register(queue, "mig1", 11)
        queue.claim(mig1, 0.0, 600.0)
        claim = queue.claim(mig1, 0.0, 600.0)
        assert claim is not None
        queue.finish(claim, JobOutcome.COMPLETED)
        queue.pause("j0", by="admin")
        first = self.successResultOf(self.view.jobsPage(None, 2))
        self.assertEqual(
            first.jobs,
            (JobRow(0, "j0", "claimed", "pause", Holder(mig1, "mig1")), JobRow(1, "j1", "done")),
        )
        self.assertEqual(first.after, 1)
        second = self.successResultOf(self.view.jobsPage(first.after, 2))
        self.assertEqual([job.name for job in second.jobs], ["j2", "j3"])
        last = self.successResultOf(self.view.jobsPage(second.after, 2))
        self.assertEqual(([job.name for job in last.jobs], last.after), (["j4"], None))
        self.assertEqual(
            self.successResultOf(self.view.jobCounts()), {"claimed": 1, "done": 1, "queued": 3}
        )

    def test_longDeadNotShown(self) -> None:
        """
        A daemon whose lease ended more than L{SHOWN_AFTER_LEASE} ago is
        not shown.
        """
        queue = self.queueOf(1)
        gone = self.register(queue, "mig0", 1)
        self.sql(
            "UPDATE imapmig_queue.daemons SET lease_until = now() - make_interval(secs => %s)"
            " WHERE daemon_id = %s",
            SHOWN_AFTER_LEASE + 1,
            gone,
        )
        self.assertEqual(self.successResultOf(self.view.daemons()).daemons, ())

    def test_rate(self) -> None:
        """
        Each daemon's heartbeat records its rate, which every daemon's
        page reads, the other daemons' included; a heartbeat without one
        leaves it as it was.
        """
        a, b = self.queueOf(1), self.queueOf(1)
        mig1 = self.register(a, "mig1", 1)
        mig2 = self.register(b, "mig2", 2)
        self.me = mig2
        a.heartbeat(mig1, 600.0, rate=12.5)
        b.heartbeat(mig2, 600.0, rate=3.25)
        b.heartbeat(mig2, 600.0)
        rates = {d.host: d.rate for d in self.successResultOf(self.view.daemons()).daemons}
        self.assertEqual(rates, {"mig1": 12.5, "mig2": 3.25})

    def test_thisDaemonsRate(self) -> None:
        """
        Where the daemons' table has no rate, the daemon serving the page
        shows its own (the others none).
        """
        queue = self.queueOf(1)
        self.sql("ALTER TABLE imapmig_queue.daemons DROP COLUMN rate")
        self.me = self.register(queue, "mig1", 1)
        self.register(queue, "mig2", 2)
        run = onConnection(SynchronousReactor(), SynchronousThreadPool(), lambda: self.connection, "db")
        view = PostgreSQLFleetView(run, lambda: self.me, lambda: 7.5)
        rates = {d.host: d.rate for d in self.successResultOf(view.daemons()).daemons}
        self.assertEqual(rates, {"mig1": 7.5, "mig2": None})

    def test_unavailable(self) -> None:
        """
        A read that cannot connect fails with L{QueueUnavailable} naming
        the database as given.
        """

        def refused() -> psycopg.Connection[tuple[Any, ...]]:
            raise psycopg.OperationalError("connection refused")

        view = PostgreSQLFleetView(
            onConnection(SynchronousReactor(), SynchronousThreadPool(), refused, "postgresql:///x"),
            lambda: None,
        )
        for d in (view.daemons(), view.holders(["j0"])):
            failure = self.failureResultOf(d, QueueUnavailable)
            self.assertEqual(
                str(failure.value), "postgresql:///x: cannot read the fleet: connection refused"
            )

    def test_reconnects(self) -> None:
        """
        A connection found closed (or broken) is made again by the next
        read, which succeeds.
        """
        made: list[psycopg.Connection[tuple[Any, ...]]] = []

        def connect() -> psycopg.Connection[tuple[Any, ...]]:
            made.append(psycopg.connect(self.uri, autocommit=True))
            self.addCleanup(made[-1].close)
            return made[-1]

        self.register(self.queueOf(1), "mig1", 1)
        view = PostgreSQLFleetView(
            onConnection(SynchronousReactor(), SynchronousThreadPool(), connect, "db"),
            lambda: None,
        )
        self.assertEqual(len(self.successResultOf(view.daemons()).daemons), 1)
        self.assertEqual(len(self.successResultOf(view.daemons()).daemons), 1)
        self.assertEqual(len(made), 1)
        made[0].close()
        self.assertEqual(len(self.successResultOf(view.daemons()).daemons), 1)
        self.assertEqual(len(made), 2)

    def test_statementTimeout(self) -> None:
        """
        Every read runs under a C{statement_timeout}.
        """
        seen = self.successResultOf(
            onConnection(
                SynchronousReactor(), SynchronousThreadPool(), lambda: self.connection, "x"
            )(lambda c: c.execute("SHOW statement_timeout").fetchone())
        )
        self.assertEqual(seen, ("5s",))


class ThroughStoreTests(PostgreSQLTestMixin):
    """
    A fleet daemon's view reads on its state store's reader connection
    (L{throughStore} over L{PostgreSQLStateStore.readOnReader}).
    """

    def store(self, uri: str) -> PostgreSQLStateStore:
        store = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), uri, lambda: 0.0
        )
        self.addCleanup(store.close)
        return store

    def test_readsOnTheReader(self) -> None:
        """
        The daemons are read on the store's reader connection, under the
        statement timeout; the writer's is never opened.
        """
        store = self.store(self.uri)
        self.register(self.queueOf(1), "mig1", 1)
        view = PostgreSQLFleetView(throughStore(store.readOnReader, "db"), lambda: None)
        [daemon] = self.successResultOf(view.daemons()).daemons
        self.assertEqual(daemon.host, "mig1")
        run = throughStore(store.readOnReader, "db")
        seen = self.successResultOf(run(lambda c: c.execute("SHOW statement_timeout").fetchone()))
        self.assertEqual(seen, ("5s",))
        self.assertEqual(len(store._reader._idle), 1)
        self.assertEqual(store._writer._opened, 0)

    def test_errorsAsTheStore(self) -> None:
        """
        A read that cannot connect fails as the store's reads do: a
        L{TransientError} naming the database without its password.
        """
        store = self.store("postgresql://u:secret@127.0.0.1:1/x?connect_timeout=2")
        view = PostgreSQLFleetView(throughStore(store.readOnReader, "db"), lambda: None)
        failure = self.failureResultOf(view.daemons(), TransientError)
        self.assertTrue(str(failure.value).startswith("postgresql://u@127.0.0.1:1/x: cannot read"))
        self.assertNotIn("secret", str(failure.value))
        store.close()
        self.failureResultOf(view.daemons(), PermanentError)

    def register(self, queue: PostgreSQLJobQueue, host: str, pid: int) -> str:
        return queue.register(host, pid, "1.0", 600.0)


class _IdlePool(ThreadPool):
    """
    A thread pool that never runs what it is given (every thread busy).
    """

    def callInThreadWithCallback(self, onResult: Any, func: Any, *args: Any, **kw: Any) -> None:
        pass


class WaitTests(SynchronousTestCase):
    """
    A page does not wait for ever for a busy reader.
    """

    def test_timeout(self) -> None:
        """
        With a clock, a read not answered within L{WAIT} seconds (no thread
        free) fails with L{QueueUnavailable}; no call stays scheduled.
        """
        clock = Clock()
        run = onConnection(SynchronousReactor(), _IdlePool(), psycopg.connect, "pg:///f", clock)
        d = PostgreSQLFleetView(run, lambda: None).daemons()
        clock.advance(WAIT - 0.5)
        self.assertNoResult(d)
        clock.advance(1)
        failure = self.failureResultOf(d, QueueUnavailable)
        self.assertEqual(
            str(failure.value), "pg:///f: the fleet was not read within 10 s"
        )
        self.assertEqual(clock.getDelayedCalls(), [])


def _relations(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """
    Every (node type, relation) of a JSON plan, depth first.
    """
    found = [(plan["Node Type"], plan.get("Relation Name", ""))]
    for child in plan.get("Plans", ()):
        found += _relations(child)
    return found


class PlanTests(PostgreSQLTestMixin):
    """
    The view's statements read the jobs by index, so their cost does not
    grow with the jobs queued or ended (docs/fleet-design.md "A million
    jobs").
    """

    def explain(self, statement: str, parameters: dict[str, object]) -> list[tuple[str, str]]:
        """
        The nodes of C{statement}'s plan.
        """
        with psycopg.connect(self.uri, autocommit=True) as connection:
            cursor = psycopg.ClientCursor(connection)
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, parameters)
            row = cursor.fetchone()
        assert row is not None
        document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        return _relations(document[0]["Plan"])

    def timed(self, view: PostgreSQLFleetView, names: list[str]) -> float:
        """
        The best of 20 reads of the daemons and a page's holders, seconds.
        """
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            self.successResultOf(view.daemons())
            self.successResultOf(view.holders(names))
            best = min(best, time.perf_counter() - start)
        return best

    def test_flatAt100000Jobs(self) -> None:
        """
        With 100,000 jobs (half ended, a few claimed by three daemons),
        neither statement scans the jobs' table: the daemons' jobs are
        counted through the partial index of claimed jobs, a page's
        holders found through the index on names.  The reads' time at
        100,000 jobs is printed beside the time at 1,000 (measured, not
        asserted: the machine is shared).
        """
        queues = [self.queueOf(30) for _ in range(3)]
        owners = [q.register(f"mig{n}", n, "1.0", 600.0) for n, q in enumerate(queues)]
        connection: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(self.uri, autocommit=True)
        self.addCleanup(connection.close)
        view = PostgreSQLFleetView(
            onConnection(SynchronousReactor(), SynchronousThreadPool(), lambda: connection, "db"),
            lambda: owners[0],
        )
        page = [f"j{n}" for n in range(30)] + [f"x{n}" for n in range(1, 71)]
        times = {}
        for total in (1_000, 100_000):
            self.sql(
                "INSERT INTO imapmig_queue.jobs (name, position, state, digest)"
                " SELECT 'x' || g, 30 + g, CASE WHEN g %% 2 = 0 THEN 'done' ELSE 'queued' END,"
                " '\\x00'::bytea"
                " FROM generate_series(1, %s) g ON CONFLICT (name) DO NOTHING",
                total,
            )
            for n, (queue, owner) in enumerate(zip(queues, owners)):
                while len(self.sql(
                    "SELECT 1 FROM imapmig_queue.jobs WHERE owner = %s", owner
                )) < 4 * (n + 1):  # fmt: skip
                    queue.claim(owner, 0.0, 600.0)
            self.sql("ANALYZE imapmig_queue.jobs")
            self.sql("ANALYZE imapmig_queue.daemons")
            times[total] = self.timed(view, page)
        daemons = self.explain(DAEMONS, {"shown": SHOWN_AFTER_LEASE, "limit": MAX_DAEMONS})
        holders = self.explain(HOLDERS, {"names": page})
        for plan in (daemons, holders):
            self.assertNotIn(("Seq Scan", "jobs"), plan, plan)
            self.assertTrue(
                any(node.startswith("Index") and rel == "jobs" for node, rel in plan), plan
            )
        fleet = self.successResultOf(view.daemons())
        self.assertEqual([row.jobs for row in fleet.daemons], [4, 8, 12])
        print(
            f"\nfleet view: daemons + a page of 100 holders, best of 20:"
            f" {times[1_000] * 1000:.2f} ms at 1,000 jobs,"
            f" {times[100_000] * 1000:.2f} ms at 100,000"
        )

    def buffers(self, statement: str, parameters: dict[str, object]) -> int:
        """
        The shared buffers C{statement} reads (hit or not), by C{EXPLAIN
        (ANALYZE, BUFFERS)}.
        """
        with psycopg.connect(self.uri, autocommit=True) as connection:
            cursor = psycopg.ClientCursor(connection)
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
            row = cursor.fetchone()
        assert row is not None
        document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
        plan = document[0]["Plan"]
        return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])

    def test_jobsPageFlat(self) -> None:
        """
        A page of 100 jobs reads as many buffers at 1,000 jobs as at
        100,000, at the start of the list or at its end (keyset through
        the index on position, never an offset or a scan); the counts read
        the few rows of C{job_counts}.
        """
        self.queueOf(0)
        read = {}
        for total in (1_000, 100_000):
            self.sql("TRUNCATE imapmig_queue.jobs")
            self.sql(
                "INSERT INTO imapmig_queue.jobs (name, position, state, digest)"
                " SELECT 'x' || g, g, CASE WHEN g %% 3 = 0 THEN 'done' ELSE 'queued' END,"
                " '\\x00'::bytea FROM generate_series(0, %s - 1) g",
                total,
            )
            self.sql("ANALYZE imapmig_queue.jobs")
            for after in (-1, total - 101):
                read[total, after > 0] = self.buffers(JOBS_PAGE, {"after": after, "limit": 101})
            self.assertNotIn(("Seq Scan", "jobs"), self.explain(JOBS_PAGE, {"after": 500, "limit": 101}))
            self.assertLessEqual(self.buffers(COUNTS, {}), 2)
        for end in (False, True):
            self.assertLessEqual(abs(read[1_000, end] - read[100_000, end]), 1, read)
        self.assertLessEqual(max(read.values()), 12, read)


class FindJobsTests(PostgreSQLTestMixin):
    """
    L{PostgreSQLFleetView.findJobs} and L{PostgreSQLFleetView.jobNamed}:
    every job of the fleet is found, a page at a time, at a cost that does
    not grow with the list.
    """

    def load(self, total: int) -> None:
        """
        C{total} jobs C{t-dN} at positions C{N}, every third done.
        """
        # PlanTests' reading of buffers, not its tests.
        self.buffers = lambda statement, parameters: PlanTests.buffers(self, statement, parameters)  # type: ignore[arg-type]
        self.sql("TRUNCATE imapmig_queue.jobs")
        self.sql(
            "INSERT INTO imapmig_queue.jobs (name, position, state, digest)"
            " SELECT 't-d' || g, g, CASE WHEN g %% 3 = 0 THEN 'done' ELSE 'queued' END,"
            " '\\x00'::bytea FROM generate_series(0, %s - 1) g",
            total,
        )
        self.sql("ANALYZE imapmig_queue.jobs")

    def test_everyJob(self) -> None:
        """
        With 50,000 jobs (none held by this daemon), a page lists the
        fleet's jobs by position with C{matched} all of them; a search for
        one name finds it (exactly, through the key, wherever it is) and
        counts the matches scanned as a lower bound; a state filter pages
        on from the position given; a job is found by name, an unknown one
        is not.
        """
        self.queueOf(0)
        self.load(50_000)
        connection: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(self.uri, autocommit=True)
        self.addCleanup(connection.close)
        view = PostgreSQLFleetView(
            onConnection(SynchronousReactor(), SynchronousThreadPool(), lambda: connection, "db"),
            lambda: None,
        )
        page = self.successResultOf(view.findJobs((), "", 0, 3))
        self.assertEqual([job.name for job in page.jobs], ["t-d0", "t-d1", "t-d2"])
        self.assertEqual((page.matched, page.exact, page.next), (50_000, True, 3))
        found = self.successResultOf(view.findJobs((), "t-d4999", 0, 100))
        self.assertEqual(found.jobs[0], JobRow(4999, "t-d4999", "queued"))
        # t-d49990..t-d49999 are past the 10,000 rows scanned.
        self.assertEqual((found.matched, found.exact, found.next), (1, False, 10_000))
        far = self.successResultOf(view.findJobs((), "t-d49999", 0, 100))
        self.assertEqual([job.name for job in far.jobs], ["t-d49999"])
        self.assertFalse(far.exact)
        done = self.successResultOf(view.findJobs(("done",), "", 30_000, 2))
        self.assertEqual([job.name for job in done.jobs], ["t-d30000", "t-d30003"])
        self.assertEqual(done.matched, 16_667)
        self.assertEqual(self.successResultOf(view.jobNamed("t-d49999")), JobRow(49999, "t-d49999", "queued"))
        self.assertIsNone(self.successResultOf(view.jobNamed("nobody")))

    def test_flat(self) -> None:
        """
        A page reads as many buffers at 1,000 jobs as at 100,000; a
        filtered page or a search reads at most L{SCAN_ROWS} rows (fewer
        where the list is shorter): about 200 buffers however long the
        list is past them.
        """
        self.queueOf(0)
        read: dict[tuple[int, str], int] = {}
        for total in (1_000, 100_000):
            self.load(total)
            start = max(0, total - 20_000)
            for kind, states, needle, scan in (
                ("page", [], "", 101),
                ("state", ["done"], "", 10_000),
                ("search", [], "t-d99", 10_000),
            ):
                read[total, kind] = self.buffers(
                    FIND_JOBS,
                    {"start": start, "scan": scan, "states": states, "needle": needle, "limit": 101},
                )
        print(f"\nfindJobs buffers: {read}")
        self.assertLessEqual(abs(read[1_000, "page"] - read[100_000, "page"]), 2, read)
        self.assertLessEqual(max(read.values()), 200, read)


class ThreadPoolTests(PostgreSQLTestMixin):
    """
    With a real thread pool, a read runs in a thread and fires in the
    reactor's.
    """

    def test_inThread(self) -> None:
        """
        The Deferred fires through the reactor's C{callFromThread}, with
        the daemons read in the pool's thread.
        """
        import threading

        calls: list[str] = []

        class Reactor:
            def callFromThread(self, f: Any, *a: Any, **kw: Any) -> None:
                calls.append(threading.current_thread().name)
                f(*a, **kw)

        pool = ThreadPool(1, 1, name="fleetview")
        pool.start()
        self.addCleanup(pool.stop)
        connection: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(self.uri, autocommit=True)
        self.addCleanup(connection.close)
        self.queueOf(1).register("mig1", 1, "1.0", 600.0)
        view = PostgreSQLFleetView(
            onConnection(Reactor(), pool, lambda: connection, "db"),  # type: ignore[arg-type]
            lambda: None,
        )
        done = threading.Event()
        d: Deferred[Any] = view.daemons()

        def fired(result: object) -> object:
            done.set()
            return result

        d.addBoth(fired)
        self.assertTrue(done.wait(60))
        self.assertEqual([row.host for row in self.successResultOf(d).daemons], ["mig1"])
        self.assertTrue(calls and calls[0].startswith("PoolThread-fleetview"), calls)
