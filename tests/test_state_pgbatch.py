# -*- test-case-name: tests.test_state_pgbatch -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the PostgreSQL store's write batcher
(L{imapmig.state._pgbatch.WriteBatcher}) on a L{Clock}, its transactions
given by the test; and for the connection pool
(L{imapmig.state._pgbase.ConnectionPool}) with connections of the test.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import DatabaseRefused, LeaseLost, PermanentError, TransientError
from imapmig.state._pgbase import ConnectionPool
from imapmig.state.pgconnect import Connector
from imapmig.state._pgbatch import WriteBatcher
from imapmig.state._pgwrites import JOURNAL, OUTCOMES, Claim, Write

CLAIM = Claim("job", "00000000-0000-0000-0000-000000000001", 2)


def write(rows: int = 1, claim: Claim | None = None, kind: str = OUTCOMES) -> Write:
    """
    A write of C{rows} rows.
    """
    return Write(kind, "job", [], rows, claim)


class Commits:
    """
    The transactions a batcher asked for, each answered by the test.
    """

    def __init__(self) -> None:
        self.batches: list[list[Write]] = []
        self.pending: list[Deferred[set[Claim]]] = []

    def __call__(self, batch: list[Write]) -> Deferred[set[Claim]]:
        self.batches.append(list(batch))
        d: Deferred[set[Claim]] = Deferred()
        self.pending.append(d)
        return d

    def answer(self, stale: set[Claim] | None = None) -> None:
        """
        Commit the oldest transaction asked for.
        """
        self.pending.pop(0).callback(stale or set())

    def refuse(self, error: Exception) -> None:
        """
        Fail the oldest transaction asked for with C{error}.
        """
        self.pending.pop(0).errback(error)


class WriteBatcherTests(SynchronousTestCase):
    """
    Writes gathered into one transaction at a time.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.commits = Commits()
        self.batcher = WriteBatcher(
            self.commits, self.clock, "postgresql://db/x", rowsAtOnce=100, maxRows=250
        )

    def tearDown(self) -> None:
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_waitsForTheDelay(self) -> None:
        """
        A write waits 10 ms for others; then one transaction takes them
        all, and each caller's Deferred fires only after its commit.
        """
        first = self.batcher.add(write())
        self.clock.advance(0.004)
        second = self.batcher.add(write())
        self.clock.advance(0.005)
        self.assertEqual(self.commits.batches, [])
        self.clock.advance(0.001)
        self.assertEqual(len(self.commits.batches), 1)
        self.assertEqual(len(self.commits.batches[0]), 2)
        self.assertNoResult(first)
        self.assertNoResult(second)
        self.commits.answer()
        self.assertIsNone(self.successResultOf(first))
        self.assertIsNone(self.successResultOf(second))
        self.assertEqual(self.batcher.commits, 1)

    def test_manyRowsAtOnce(self) -> None:
        """
        Once as many rows as C{rowsAtOnce} are queued, their transaction
        starts without waiting for the delay.
        """
        self.batcher.add(write(60))
        self.assertEqual(self.commits.batches, [])
        self.batcher.add(write(40))
        self.assertEqual([len(b) for b in self.commits.batches], [2])
        self.commits.answer()

    def test_oneAtATime(self) -> None:
        """
        While one transaction commits, the next gathers the writes queued
        meanwhile, and starts only after it; the Deferreds fire in the
        order their writes were queued.
        """
        fired: list[int] = []
        self.batcher.add(write()).addCallback(lambda _: fired.append(1))
        self.clock.advance(0.010)
        for n in (2, 3, 4):
            self.batcher.add(write()).addCallback(lambda _, n: fired.append(n), n)
        self.clock.advance(0.050)
        self.assertEqual(len(self.commits.batches), 1)
        self.commits.answer()
        self.assertEqual(fired, [1])
        self.assertEqual([len(b) for b in self.commits.batches], [1, 3])
        self.commits.answer()
        self.assertEqual(fired, [1, 2, 3, 4])

    def test_bounded(self) -> None:
        """
        A transaction takes at most C{maxRows} rows (at least one write):
        the writes beyond wait for the next.
        """
        writes = [self.batcher.add(write(100)) for n in range(3)]
        self.assertEqual([[w.rows for w in b] for b in self.commits.batches], [[100]])
        self.commits.answer()
        self.assertEqual([[w.rows for w in b] for b in self.commits.batches], [[100], [100, 100]])
        self.assertNoResult(writes[1])
        self.commits.answer()
        for d in writes:
            self.successResultOf(d)
        huge = self.batcher.add(write(1000))
        self.assertEqual([w.rows for w in self.commits.batches[-1]], [1000])
        self.commits.answer()
        self.successResultOf(huge)

    def test_journalEntryId(self) -> None:
        """
        A journal write's caller gets the id chosen for its entry.
        """
        journaled = write(kind=JOURNAL)
        d = self.batcher.add(journaled)
        self.clock.advance(0.010)
        journaled.writeId = (5 << 32) + 1
        self.commits.answer()
        self.assertEqual(self.successResultOf(d), (5 << 32) + 1)

    def test_staleClaim(self) -> None:
        """
        The writes of a claim the fence found not current fail with
        L{LeaseLost}; the others of the batch succeed.
        """
        stale = self.batcher.add(write(claim=CLAIM))
        other = Claim("job", CLAIM.owner, 3)
        current = self.batcher.add(write(claim=other))
        unfenced = self.batcher.add(write())
        self.clock.advance(0.010)
        self.commits.answer({CLAIM})
        self.failureResultOf(stale, LeaseLost)
        self.successResultOf(current)
        self.successResultOf(unfenced)

    def test_transientRetriedWhole(self) -> None:
        """
        A batch failing with L{TransientError} (its connection broken, its
        COMMIT perhaps lost) is tried again whole, at once and then after
        growing pauses; its writes' Deferreds fire once, after the commit
        that succeeds.
        """
        writes = [self.batcher.add(write()) for n in range(3)]
        self.clock.advance(0.010)
        self.commits.refuse(TransientError("connection lost"))
        self.assertEqual(len(self.commits.batches), 2)
        self.assertEqual(self.commits.batches[1], self.commits.batches[0])
        self.commits.refuse(TransientError("connection refused"))
        self.assertEqual(len(self.commits.batches), 2)
        self.clock.advance(0.05)
        self.assertEqual(len(self.commits.batches), 3)
        self.commits.refuse(TransientError("connection refused"))
        self.clock.advance(0.1)
        self.commits.answer()
        for d in writes:
            self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.batcher.commits, 1)

    def test_outageLoggedOnce(self) -> None:
        """
        A database unreachable for 84 s, the batch tried again every 2 s,
        is one warning when the first try fails (the error), one every
        30 s, and one line when it answers again, how long it was away
        (found from outside: a warning about every second).
        """
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        batcher = WriteBatcher(self.commits, self.clock, "postgresql://db/x", retryFor=300.0)
        d = batcher.add(write())
        self.clock.advance(0.010)
        while self.clock.seconds() < 84:
            self.commits.refuse(TransientError("db: connection refused"))
            self.clock.advance(2)
        self.commits.answer()
        self.successResultOf(d)
        said = [
            formatEvent(e) for e in events if e.get("log_namespace") == "imapmig.state._pgbatch"
        ]
        self.assertEqual(len(said), 4, said)
        self.assertIn("cannot be reached (db: connection refused)", said[0])
        self.assertIn("still cannot be reached after 3", said[1])
        self.assertIn("answers again after 8", said[3])

    def test_refusalNamed(self) -> None:
        """
        A batch the database refuses for a reason of its own (its disk
        full: L{DatabaseRefused}) is logged with that reason, not as a
        database that cannot be reached; the batcher says its writes fail
        (C{failing}, for C{/healthz}) until one commits; so does a write
        refused for good (a right revoked: L{PermanentError}).
        """
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        full = "db: cannot record: could not extend file: No space left on device"
        self.assertIsNone(self.batcher.failing)
        d = self.batcher.add(write())
        self.clock.advance(0.010)
        self.commits.refuse(DatabaseRefused(full))
        self.assertEqual(self.batcher.failing, full)
        said = [
            formatEvent(e) for e in events if e.get("log_namespace") == "imapmig.state._pgbatch"
        ]
        self.assertIn(f"the database refuses them ({full})", said[0])
        self.assertNotIn("cannot be reached", said[0])
        self.clock.advance(0.1)
        self.commits.answer()
        self.successResultOf(d)
        self.assertIsNone(self.batcher.failing)
        revoked = self.batcher.add(write())
        self.clock.advance(0.010)
        self.commits.refuse(PermanentError("db: permission denied for table outcomes"))
        self.failureResultOf(revoked, PermanentError)
        self.assertEqual(self.batcher.failing, "db: permission denied for table outcomes")

    def test_transientGivesUp(self) -> None:
        """
        A batch still failing with L{TransientError} after C{retryFor}
        seconds fails its writes with it.
        """
        d = self.batcher.add(write())
        self.clock.advance(0.010)
        while self.commits.pending:
            self.commits.refuse(TransientError("connection refused"))
            self.clock.advance(2)
        self.failureResultOf(d, TransientError)
        self.assertGreater(self.clock.seconds(), 30)

    def test_permanentSplit(self) -> None:
        """
        A batch refused for its content (L{PermanentError}) is made again
        one write per transaction: only the refused write's caller fails.
        """
        writes = [self.batcher.add(write()) for n in range(3)]
        self.clock.advance(0.010)
        self.commits.refuse(PermanentError("value out of range"))
        self.commits.answer()
        self.commits.refuse(PermanentError("value out of range"))
        self.commits.answer()
        self.assertEqual([len(b) for b in self.commits.batches], [3, 1, 1, 1])
        self.successResultOf(writes[0])
        self.failureResultOf(writes[1], PermanentError)
        self.successResultOf(writes[2])

    def test_close(self) -> None:
        """
        Closing refuses new writes and commits those queued at once, after
        the transaction under way, without waiting for the delay; its
        Deferred fires once they are committed.
        """
        committing = self.batcher.add(write(100))
        queued = self.batcher.add(write())
        closed = self.batcher.close()
        self.failureResultOf(self.batcher.add(write()), PermanentError)
        self.commits.answer()
        self.assertNoResult(closed)
        self.assertEqual([len(b) for b in self.commits.batches], [1, 1])
        self.commits.answer()
        self.successResultOf(committing)
        self.successResultOf(queued)
        self.assertIsNone(self.successResultOf(closed))

    def test_closeNotRetried(self) -> None:
        """
        While closing, a batch failing with L{TransientError} is not tried
        again: its writes fail, and the close ends.
        """
        queued = self.batcher.add(write())
        closed = self.batcher.close()
        self.commits.refuse(TransientError("connection refused"))
        self.failureResultOf(queued, TransientError)
        self.successResultOf(closed)

    def test_closeIdle(self) -> None:
        """
        Closing a batcher with nothing queued ends at once.
        """
        self.successResultOf(self.batcher.close())

    def test_withoutClock(self) -> None:
        """
        Without a clock a write's transaction starts at once if none
        commits, and a failing one is tried again at once, three times.
        """
        commits: list[int] = []

        def commit(batch: list[Write]) -> Deferred[set[Claim]]:
            commits.append(len(batch))
            if len(commits) < 3:
                return fail(TransientError("connection lost"))
            return succeed(set())

        batcher = WriteBatcher(commit, None, "postgresql://db/x")
        self.successResultOf(batcher.add(write()))
        self.assertEqual(commits, [1, 1, 1])
        commits.clear()
        commits.extend([0, 0, 0, 0])
        self.successResultOf(batcher.add(write()))


class BrokenConnection:
    """
    A connection of the test, broken when it says so.
    """

    def __init__(self) -> None:
        self.broken = False
        self.closed = False

    def close(self) -> None:
        self.closed = True


class TestPool(ConnectionPool):
    """
    A pool opening L{BrokenConnection}s.
    """

    def __init__(self, maximum: int) -> None:
        super().__init__(Connector("postgresql://db/x", "writer"), maximum)
        self.made: list[BrokenConnection] = []

    def _connect(self) -> Any:
        connection = BrokenConnection()
        self.made.append(connection)
        return connection


class ConnectionPoolTests(SynchronousTestCase):
    """
    More threads than connections.
    """

    def test_waitersGetNewConnections(self) -> None:
        """
        Threads waiting for a connection while every one is busy get a new
        one when the busy ones come back broken (they waited for ever).
        """
        pool = TestPool(maximum=2)
        held: list[Any] = [pool._take(), pool._take()]
        got: list[Any] = []
        waiting = threading.Event()
        original = pool._changed.wait

        def wait(timeout: float | None = None) -> bool:
            waiting.set()
            return original(timeout)

        pool._changed.wait = wait  # type: ignore[method-assign]
        threads = [threading.Thread(target=lambda: got.append(pool._take())) for n in range(3)]
        for thread in threads:
            thread.start()
        self.assertTrue(waiting.wait(30))
        for connection in held:
            connection.broken = True
            pool._give(connection)
        threads[0].join(30)
        for connection in list(got):
            pool._give(connection)
        for thread in threads:
            thread.join(30)
            self.assertFalse(thread.is_alive())
        self.assertEqual(len(got), 3)
        self.assertTrue(all(c.closed for c in held))
        self.assertLessEqual(pool._opened, 2)
        pool.close()

    def test_closeWakesWaiters(self) -> None:
        """
        Threads waiting for a connection when the pool is closed fail with
        L{PermanentError} at once, rather than opening one or waiting for
        ever (the daemon's thread pool then joined them for ever at stop).
        """
        pool = TestPool(maximum=1)
        busy = pool._take()
        failures: list[BaseException] = []
        waiting = threading.Event()
        original = pool._changed.wait

        def wait(timeout: float | None = None) -> bool:
            waiting.set()
            return original(timeout)

        pool._changed.wait = wait  # type: ignore[method-assign]

        def take() -> None:
            try:
                pool._take()
            except BaseException as e:
                failures.append(e)

        thread = threading.Thread(target=take)
        thread.start()
        self.assertTrue(waiting.wait(30))
        pool.close()
        thread.join(30)
        self.assertFalse(thread.is_alive())
        self.assertEqual([type(e) for e in failures], [PermanentError])
        pool._give(busy)
        self.assertTrue(busy.closed)
        self.assertEqual((pool._opened, len(pool.made)), (0, 1))
