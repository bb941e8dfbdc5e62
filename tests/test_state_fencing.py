# -*- test-case-name: tests.test_state_fencing -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the PostgreSQL store's fence (L{imapmig.state._pgwrites}) and
its writer-chosen ids, on a private cluster with the queue's tables
(L{imapmig.queue._pgschema}) beside the store's: a view of a claim
(C{forClaim}) writes only while its claim is current; a takeover racing
a write lets it land before or not at all; a batch run again after a
lost C{COMMIT} records nothing twice.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

import psycopg
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import LeaseLost, PermanentError
from imapmig.queue import _pgschema as queueschema
from imapmig.state import FolderFallback, MessageNames, Transition
from imapmig.state import _pgwrites
from imapmig.state._pgbatch import WriteBatcher
from imapmig.state._pgwrites import JOURNAL, TRANSITION, Claim, Write, WriterIds, commitBatch
from imapmig.state.postgresql import SCHEMA_VERSION, PostgreSQLStateStore
from imapmig.testing.postgresql import requirePostgreSQL
from tests.statecontract import BATCH, SynchronousReactor, SynchronousThreadPool, sharedCluster
from tests.test_state import MARK, appended, failed
from tests.test_state_contract import openPostgreSQLStore
from tests.test_state_postgresql import query

_TABLES = ("messages", "journal", "folders", "folder_fallbacks", "job_failures", "job_transitions")

# A takeover as a claim makes one: the row locked FOR UPDATE (which waits
# for a writer's FOR KEY SHARE), then given to another daemon.
_TAKEOVER = """
    WITH x AS (SELECT name FROM imapmig_queue.jobs WHERE name = %s FOR UPDATE)
    UPDATE imapmig_queue.jobs j SET owner = %s, generation = j.generation + 1
      FROM x WHERE j.name = x.name
"""


def contents(dsn: str) -> dict[str, object]:
    """
    Every row of the store's tables, as text, by table.
    """
    return {
        table: query(dsn, f"SELECT t::text FROM imapmig.{table} t ORDER BY 1")
        for table in _TABLES
    }


def waitUntilWaiting(dsn: str, case: SynchronousTestCase) -> None:
    """
    Poll until a session of the database C{dsn} waits for a lock.
    """
    for attempt in range(600):
        rows = query(
            dsn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        if rows == [(1,)]:
            return
        threading.Event().wait(0.05)
    case.fail("no session waited for a lock")


class ClaimedJob(SynchronousTestCase):
    """
    A store beside the queue's tables, where job C{job} is claimed by
    daemon C{me} at generation 2 and daemon C{other} is alive too.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.dsn = sharedCluster().createDatabase()
        self.store = openPostgreSQLStore(self, self.dsn)
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            queueschema.migrate(connection, "test")
        self.me = str(uuid.uuid4())
        self.other = str(uuid.uuid4())
        for daemon in (self.me, self.other):
            query(
                self.dsn,
                "INSERT INTO imapmig_queue.daemons (daemon_id, incarnation, host, pid, version,"
                " started_at, heartbeat_at, lease_until) VALUES (%s,"
                " nextval('imapmig_queue.incarnations'), 'h', 1, 'v', now(), now(),"
                " now() + interval '60 s')",
                (daemon,),
            )
        query(
            self.dsn,
            "INSERT INTO imapmig_queue.jobs (name, position, state, owner, generation, digest)"
            " VALUES ('job', 1, 'claimed', %s, 2, '')",
            (self.me,),
        )
        # Something of each table for the stale writes to change.
        self.entry = self.successResultOf(self.store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.successResultOf(self.store.recordOutcomes("job", [failed("INBOX", "1")]))
        self.successResultOf(self.store.recordFolderMark("job", "INBOX", MARK))
        self.successResultOf(
            self.store.recordFolderFallback("job", FolderFallback("a", "INBOX", "NO"))
        )
        self.successResultOf(self.store.recordJobFailure("job", "why"))
        self.successResultOf(self.store.recordTransition("job", Transition(1.0, "a", "b", "c")))


class FenceTests(ClaimedJob):
    """
    A view's writes against the claim in the queue's tables.
    """

    def writes(self, view: PostgreSQLStateStore) -> list[Callable[[], Any]]:
        """
        Every kind of fenced write, by C{view}, each changing the tables if
        made.
        """
        names = MessageNames("<id@x>", "date", "from", "subject")
        return [
            lambda: view.journalBatch("job", "INBOX", 7, 1, BATCH),
            lambda: view.recordOutcomes("job", [appended("INBOX", "2")]),
            lambda: view.recordOutcomes("job", [], [self.entry]),
            lambda: view.nameMessages("job", [("INBOX", "1", names)]),
            lambda: view.recordFolderMark("job", "Sent", MARK),
            lambda: view.forgetFolder("job", "INBOX"),
            lambda: view.recordFolderFallback("job", FolderFallback("b", "INBOX", "NO")),
            lambda: view.recordJobFailure("job", None),
            lambda: view.recordJobFailure("job", "other"),
            lambda: view.recordTransition("job", Transition(2.0, "b", "c", "d")),
        ]

    def assertRefused(self, view: PostgreSQLStateStore) -> None:
        """
        Every write of C{view} fails with L{LeaseLost} and changes no
        table.
        """
        before = contents(self.dsn)
        for each in self.writes(view):
            self.failureResultOf(each(), LeaseLost)
        self.assertEqual(contents(self.dsn), before)

    def test_currentClaimWrites(self) -> None:
        """
        A view of the current claim (owner, generation, a live lease)
        makes every write.
        """
        view = self.store.forClaim("job", self.me, 2)
        before = contents(self.dsn)
        for each in self.writes(view):
            self.successResultOf(each())
        after = contents(self.dsn)
        self.assertTrue(all(after[table] != before[table] for table in _TABLES))

    def test_oldGeneration(self) -> None:
        """
        A view of an older generation of the job's claim, by the same
        daemon, writes nothing and fails with L{LeaseLost}.
        """
        self.assertRefused(self.store.forClaim("job", self.me, 1))

    def test_otherOwner(self) -> None:
        """
        A view of another daemon's claim writes nothing.
        """
        self.assertRefused(self.store.forClaim("job", self.other, 2))

    def test_leaseEnded(self) -> None:
        """
        Once the owner's lease has ended, its claim's writes are refused,
        even before any other daemon took the job.
        """
        query(self.dsn, "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '1 s'")
        self.assertRefused(self.store.forClaim("job", self.me, 2))

    def test_notClaimed(self) -> None:
        """
        A job given back to the queue takes no more writes of its claim.
        """
        query(self.dsn, "UPDATE imapmig_queue.jobs SET state = 'queued', owner = NULL")
        self.assertRefused(self.store.forClaim("job", self.me, 2))

    def test_otherJobRefused(self) -> None:
        """
        A view writes for its claim's job only.
        """
        view = self.store.forClaim("job", self.me, 2)
        self.failureResultOf(view.recordJobFailure("other", "why"), PermanentError)

    def test_storeUnfenced(self) -> None:
        """
        The store itself (no claim) writes whatever the queue's tables say.
        """
        query(self.dsn, "UPDATE imapmig_queue.jobs SET state = 'queued', owner = NULL")
        self.successResultOf(self.store.recordJobFailure("job", "still"))
        self.assertEqual(self.successResultOf(self.store.jobFailure("job")), "still")

    def test_retriedBatchOnce(self) -> None:
        """
        A batch made twice (run again after its C{COMMIT} was lost) holds
        its journal entry and its transition once: their ids are chosen
        before the first attempt and kept.
        """
        ids = WriterIds()
        claim = Claim("job", self.me, 2)
        writes = [
            Write(JOURNAL, "job", ("INBOX", 7, 1, b"", 0.0), 1, claim),
            Write(TRANSITION, "job", (3.0, "x", "y", "z", None), 1, claim),
        ]
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            self.assertEqual(commitBatch(connection, ids, writes), set())
            self.assertEqual(commitBatch(connection, ids, writes), set())
        entry = writes[0].writeId
        self.assertEqual(
            query(self.dsn, "SELECT count(*) FROM imapmig.journal WHERE entry_id = %s", (entry,)),
            [(1,)],
        )
        self.assertEqual(
            query(self.dsn, "SELECT count(*) FROM imapmig.job_transitions WHERE cause = 'z'"),
            [(1,)],
        )

    def test_idsOfTwoStores(self) -> None:
        """
        Two stores on one database (two daemons) choose ids apart: each
        from a block of its own.
        """
        second = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), self.dsn, seconds=lambda: 0.0
        )
        self.addCleanup(second.close)
        self.assertEqual(self.successResultOf(second.open()), SCHEMA_VERSION)
        first = self.successResultOf(self.store.journalBatch("job", "INBOX", 7, 1, BATCH))
        other = self.successResultOf(second.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.assertNotEqual(first >> 32, other >> 32)
        self.assertEqual(len(self.successResultOf(self.store.journal("job"))), 3)


class TakeoverRaceTests(ClaimedJob):
    """
    A write and a takeover of its job at once, on two connections.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ids = WriterIds()

    def write(self, generation: int = 2) -> list[Write]:
        """
        A batch journaling one entry under the claim of C{generation}.
        """
        return [Write(JOURNAL, "job", ("Race", 7, 1, b"", 0.0), 1, Claim("job", self.me, generation))]

    def waitUntilWaiting(self) -> None:
        waitUntilWaiting(self.dsn, self)

    def journaled(self) -> int:
        [(count,)] = query(self.dsn, "SELECT count(*) FROM imapmig.journal WHERE mailbox = 'Race'")
        return int(count)

    def test_writeLandsBeforeTakeover(self) -> None:
        """
        A takeover begun while a write's transaction holds the fence's lock
        waits for its commit: the write lands, before the takeover, whose
        reconciliation then sees it; the same claim's next write is
        refused.
        """
        checked = threading.Event()
        release = threading.Event()

        def hold(connection: Any, writes: Any) -> None:
            checked.set()
            release.wait(60)

        self.patch(_pgwrites, "_WRITERS", (hold, *_pgwrites._WRITERS))
        stale: list[set[Claim]] = []

        def writer() -> None:
            with psycopg.connect(self.dsn, autocommit=True) as connection:
                stale.append(commitBatch(connection, self.ids, self.write()))

        thread = threading.Thread(target=writer)
        thread.start()
        self.assertTrue(checked.wait(60))
        taker = psycopg.connect(self.dsn, autocommit=True)
        self.addCleanup(taker.close)
        done: list[int] = []
        takeover = threading.Thread(
            target=lambda: done.append(taker.execute(_TAKEOVER, ("job", self.other)).rowcount)
        )
        takeover.start()
        self.waitUntilWaiting()
        self.assertEqual(done, [])
        release.set()
        thread.join(60)
        takeover.join(60)
        self.assertEqual((stale, done), ([set()], [1]))
        self.assertEqual(self.journaled(), 1)
        self.patch(_pgwrites, "_WRITERS", _pgwrites._WRITERS[1:])
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            claim = Claim("job", self.me, 2)
            self.assertEqual(commitBatch(connection, self.ids, self.write()), {claim})
        self.assertEqual(self.journaled(), 1)

    def test_takeoverFirst(self) -> None:
        """
        A write whose fence meets a takeover's uncommitted lock waits for
        it, then finds the claim gone: nothing lands.
        """
        taker = psycopg.connect(self.dsn)
        self.addCleanup(taker.close)
        taker.execute(_TAKEOVER, ("job", self.other))
        stale: list[set[Claim]] = []

        def writer() -> None:
            with psycopg.connect(self.dsn, autocommit=True) as connection:
                stale.append(commitBatch(connection, self.ids, self.write()))

        thread = threading.Thread(target=writer)
        thread.start()
        self.waitUntilWaiting()
        taker.commit()
        thread.join(60)
        self.assertEqual(stale, [{Claim("job", self.me, 2)}])
        self.assertEqual(self.journaled(), 0)


class TimelineRaceTests(ClaimedJob):
    """
    Transitions of one job written at once by two transactions (two
    daemons of a fleet): each numbered after the other's, none lost.
    """

    def transitions(self, cause: str, jobs: tuple[str, ...], each: int = 3) -> list[Write]:
        """
        A batch of C{each} transitions of every job of C{jobs}, unfenced.
        """
        return [
            Write(TRANSITION, job, (float(n), "a", "b", f"{cause}{n}", None), 1, None)
            for n in range(each)
            for job in jobs
        ]

    def numbers(self, job: str) -> list[tuple[int, str]]:
        return [
            (int(seq), str(cause))
            for seq, cause in query(
                self.dsn,
                "SELECT seq, cause FROM imapmig.job_transitions WHERE job = %s ORDER BY seq",
                (job,),
            )
        ]

    def test_secondWaitsForFirst(self) -> None:
        """
        A batch writing a job's transitions while another's, uncommitted,
        holds some waits for its commit and numbers its own after them
        (before, it read the same latest number, then failed with
        C{job_transitions_pkey} once the first committed: its transitions
        lost).
        """
        written = threading.Event()
        release = threading.Event()

        def hold(connection: Any, writes: Any) -> None:
            if threading.current_thread().name == "x":
                written.set()
                release.wait(60)

        self.patch(_pgwrites, "_WRITERS", (*_pgwrites._WRITERS, hold))
        outcomes: list[object] = []

        def writer(cause: str) -> None:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as connection:
                    commitBatch(connection, WriterIds(), self.transitions(cause, ("job", "j2")))
            except Exception as e:
                outcomes.append(e)
            else:
                outcomes.append(cause)

        holder = threading.Thread(target=writer, args=("x",), name="x")
        holder.start()
        self.assertTrue(written.wait(60))
        second = threading.Thread(target=writer, args=("y",), name="y")
        second.start()
        waitUntilWaiting(self.dsn, self)
        release.set()
        holder.join(60)
        second.join(60)
        self.assertEqual(outcomes, ["x", "y"])
        self.assertEqual(
            self.numbers("job"),
            [(1, "c"), (2, "x0"), (3, "x1"), (4, "x2"), (5, "y0"), (6, "y1"), (7, "y2")],
        )
        self.assertEqual([seq for seq, _ in self.numbers("j2")], [1, 2, 3, 4, 5, 6])

    def test_manyWriters(self) -> None:
        """
        Four writers (each a daemon's writer connection and ids) making
        batches of transitions of one job and of many at once: every
        transition recorded once, each job's numbered 1 to its count.
        """
        jobs = ("job", *(f"j{n}" for n in range(8)))
        errors: list[Exception] = []

        def writer(name: str) -> None:
            ids = WriterIds()
            try:
                with psycopg.connect(self.dsn, autocommit=True) as connection:
                    for batch in range(10):
                        commitBatch(connection, ids, self.transitions(f"{name}.{batch}.", jobs, 2))
                        commitBatch(connection, ids, self.transitions(f"{name}.{batch}!", ("job",)))
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(str(n),)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(errors, [])
        numbers = self.numbers("job")
        self.assertEqual([seq for seq, _ in numbers], list(range(1, 1 + 1 + 4 * 10 * 5)))
        self.assertEqual(len({cause for _, cause in numbers}), len(numbers))
        for job in jobs[1:]:
            self.assertEqual([seq for seq, _ in self.numbers(job)], list(range(1, 81)))

    def test_twoBatchers(self) -> None:
        """
        Two daemons' write batchers, each committing on its own connection
        in a thread, their transactions at the same time: every
        transition each was given, of one job and of many, is recorded
        once, and each caller's Deferred fires without an error.
        """
        jobs = ("job", *(f"j{n}" for n in range(5)))
        running: list[
            tuple[threading.Thread, Deferred[set[Claim]], list[set[Claim] | Exception]]
        ] = []

        def committer() -> Callable[[list[Write]], Deferred[set[Claim]]]:
            connection = psycopg.connect(self.dsn, autocommit=True)
            self.addCleanup(connection.close)
            ids = WriterIds()

            def commit(batch: list[Write]) -> Deferred[set[Claim]]:
                done: Deferred[set[Claim]] = Deferred()
                outcome: list[set[Claim] | Exception] = []

                def inThread() -> None:
                    try:
                        outcome.append(commitBatch(connection, ids, batch))
                    except Exception as e:
                        outcome.append(e)

                thread = threading.Thread(target=inThread)
                running.append((thread, done, outcome))
                thread.start()
                return done

            return commit

        # Transactions of 7 rows: many of each batcher's, each beside one
        # of the other's.
        batchers = [WriteBatcher(committer(), None, "db", maxRows=7) for _ in range(2)]
        results: list[Deferred[Any]] = []
        for n in range(30):
            for b, batcher in enumerate(batchers):
                for job in jobs:
                    transition = (float(n), "a", "b", f"{b}.{n}", None)
                    results.append(batcher.add(Write(TRANSITION, job, transition, 1, None)))
        while running:
            # The batches under way run at once; their Deferreds fire here,
            # in the test's thread, starting the next ones.
            batch, running[:] = list(running), []
            for thread, done, outcome in batch:
                thread.join(60)
                (answer,) = outcome
                if isinstance(answer, Exception):
                    done.errback(answer)
                else:
                    done.callback(answer)
        for result in results:
            self.assertIsNone(self.successResultOf(result))
        for job in jobs:
            numbers = self.numbers(job)
            expected = 60 + (1 if job == "job" else 0)
            self.assertEqual([seq for seq, _ in numbers], list(range(1, expected + 1)))
