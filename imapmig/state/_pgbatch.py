# -*- test-case-name: tests.test_state_pgbatch -*-
"""
The PostgreSQL state store's write batcher: every write of the store
(outcomes, the journal and its settling, names, folder marks, fallbacks,
failures, the timeline) is queued with its Deferred, and the queue is
committed in one transaction (L{imapmig.state._pgwrites.commitBatch}) on
the writer's connection when its oldest write is L{BATCH_DELAY} old or
L{BATCH_ROWS} rows are queued; one transaction at a time, the next
batch gathering while one commits.  Each caller's Deferred fires after
the commit of its write, in the order the writes were queued.

What it replaces: a transaction per call (200 jobs of 20 messages cost
1,141 transactions, issue 30; one commit per job step would make the
database the limit of a fleet).

Faults: a batch failing for want of its connection or for a conflict
(L{TransientError}: a lost C{COMMIT} among them) runs again whole, since
every statement of it is idempotent, at once and then after growing
pauses, for up to L{RETRY_FOR} seconds (a database restart); a batch
refused for its content (L{PermanentError}: a value the database cannot
hold) is split, each write again in a transaction of its own, so that
only the refused write's caller fails.  A write whose claim is no longer
current fails with L{LeaseLost} after the commit of the others.

Bounded: a transaction takes at most L{MAX_ROWS} rows (and at least one
write); the writes beyond wait for the next, and so do their callers
(the journal of the next unit before it may be sent): back-pressure.
Closing commits the writes queued at once, then ends.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import DatabaseRefused, LeaseLost, PermanentError, TransientError
from imapmig.state._pgbase import PostgreSQLBase
from imapmig.state._pgwrites import Claim, Write, WriterIds, commitBatch
from imapmig.state.outage import OutageLog

log = Logger()

BATCH_DELAY = 0.010
"""
Seconds a write waits at most for others to join its transaction.
"""

BATCH_ROWS = 2_000
"""
Rows queued that start a transaction at once.
"""

MAX_ROWS = 50_000
"""
The most rows one transaction takes.
"""

RETRY_FOR = 30.0
"""
Seconds a batch failing for want of its database is tried again.
"""

_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 2.0
_TRIES_WITHOUT_CLOCK = 3


class WriteBatcher:
    """
    Gathers writes into one transaction at a time.

    @ivar commits: transactions committed so far.
    @ivar queuedRows: rows queued and not yet taken by a transaction.
    """

    def __init__(
        self,
        commit: Callable[[list[Write]], Deferred[set[Claim]]],
        clock: IReactorTime | None,
        where: str,
        delay: float = BATCH_DELAY,
        rowsAtOnce: int = BATCH_ROWS,
        maxRows: int = MAX_ROWS,
        retryFor: float = RETRY_FOR,
    ) -> None:
        """
        @param commit: makes a batch in one transaction (in a thread),
            firing with the claims found not current, or failing with
            L{TransientError} or L{PermanentError}.
        @param clock: times the delay and the pauses between attempts; if
            L{None}, a batch starts as soon as none commits, and a failed
            one is tried again at once, a few times.
        @param where: the database, without its password, for errors.
        """
        self._commit = commit
        self._clock = clock
        self._where = where
        self._delay = delay
        self._rowsAtOnce = rowsAtOnce
        self._maxRows = maxRows
        self._retryFor = retryFor
        self._queue: deque[Write] = deque()
        self._busy = False
        self._timer: IDelayedCall | None = None
        self._closed = False
        self._drained: list[Deferred[None]] = []
        self.commits = 0
        self.queuedRows = 0
        self._outage = OutageLog(log, "The state store's writes", self._now)
        # The database's refusal of the last write refused for good (a
        # right revoked), until a write commits again.
        self._refusal: str | None = None

    @property
    def failing(self) -> str | None:
        """
        Why the last writes failed, while they do (the database cannot be
        reached, or refuses them: its own reason); L{None} once a write
        commits again.
        """
        return self._outage.lastError or self._refusal

    def _now(self) -> float:
        return self._clock.seconds() if self._clock is not None else 0.0

    def add(self, write: Write) -> Deferred[Any]:
        """
        Queue C{write}.

        @return: its Deferred, fired after its commit with what its caller
            gets, or failing with L{LeaseLost}, L{TransientError} or
            L{PermanentError} (at once if the store is closed).
        """
        if self._closed:
            return fail(PermanentError(f"{self._where}: the state store is closed"))
        write.queuedAt = self._now()
        self._queue.append(write)
        self.queuedRows += write.rows
        self._schedule()
        return write.deferred

    def _schedule(self) -> None:
        """
        Start a transaction if one is due and none commits, or set the
        timer for when one will be.
        """
        if self._busy:
            return
        if not self._queue:
            drained, self._drained = self._drained, []
            for d in drained:
                d.callback(None)
            return
        wait = self._wait()
        if wait <= 0:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._start()
        elif self._timer is None and self._clock is not None:
            self._timer = self._clock.callLater(wait, self._due)

    def _wait(self) -> float:
        """
        Seconds before the queue's transaction is due: none without a
        clock, while closing, or with L{BATCH_ROWS} rows queued.
        """
        if self._clock is None or self._closed or self.queuedRows >= self._rowsAtOnce:
            return 0.0
        return self._queue[0].queuedAt + self._delay - self._now()

    def _due(self) -> None:
        self._timer = None
        self._schedule()

    def _start(self) -> None:
        batch = [self._queue.popleft()]
        rows = batch[0].rows
        while self._queue and rows + self._queue[0].rows <= self._maxRows:
            write = self._queue.popleft()
            rows += write.rows
            batch.append(write)
        self.queuedRows -= rows
        self._busy = True
        Deferred.fromCoroutine(self._run(batch)).addErrback(
            lambda failure: log.failure("The state store's batch failed", failure)
        )

    async def _run(self, batch: list[Write]) -> None:
        """
        Commit C{batch}, fire its writes' Deferreds in order, then start
        the next batch if due.
        """
        try:
            try:
                stale = await self._attempts(batch)
            except PermanentError as e:
                if len(batch) == 1:
                    self._refusal = str(e)
                    batch[0].deferred.errback()
                    return
                # One write the database refuses must not fail the others.
                for write in batch:
                    await self._alone(write)
                return
            except Exception:
                failure = Failure()
                for write in batch:
                    write.deferred.errback(failure)
                return
            self._fire(batch, stale)
        finally:
            self._busy = False
            self._schedule()

    async def _alone(self, write: Write) -> None:
        """
        Commit C{write} in a transaction of its own and fire its Deferred.
        """
        try:
            stale = await self._attempts([write])
        except Exception as e:
            if isinstance(e, PermanentError):
                self._refusal = str(e)
            write.deferred.errback()
        else:
            self._fire([write], stale)

    async def _attempts(self, batch: list[Write]) -> set[Claim]:
        """
        Commit C{batch}, again after a L{TransientError} (at once, then
        after pauses doubling up to 2 s) while L{RETRY_FOR} allows.
        """
        deadline = self._now() + self._retryFor
        pause = 0.0
        tries = 0
        while True:
            try:
                stale = await self._commit(batch)
            except TransientError as e:
                tries += 1
                if self._closed or not self._again(tries, pause, deadline):
                    raise
                self._outage.failed(
                    str(e),
                    f"a batch of {len(batch)} writes is tried again",
                    refused=isinstance(e, DatabaseRefused),
                )
                if self._clock is not None and pause:
                    await deferLater(self._clock, pause)
                pause = min(max(pause * 2, _FIRST_PAUSE), _LONGEST_PAUSE)
                continue
            self.commits += 1
            self._refusal = None
            self._outage.answered()
            return stale

    def _again(self, tries: int, pause: float, deadline: float) -> bool:
        """
        Whether a batch that failed C{tries} times is tried again after
        C{pause} seconds.
        """
        if self._clock is None:
            return tries < _TRIES_WITHOUT_CLOCK
        return self._now() + pause <= deadline

    def _fire(self, batch: list[Write], stale: set[Claim]) -> None:
        """
        Fire the Deferreds of C{batch}, committed, in order: L{LeaseLost}
        for the writes of C{stale} claims.
        """
        for write in batch:
            claim = write.claim
            if claim is not None and claim in stale:
                write.deferred.errback(
                    LeaseLost(
                        f"{self._where}: job {claim.job}'s claim (generation"
                        f" {claim.generation} by {claim.owner}) is no longer current:"
                        " not recorded"
                    )
                )
            else:
                write.deferred.callback(write.result())

    def close(self) -> Deferred[None]:
        """
        Refuse new writes; commit those queued at once, without waiting
        for the delay, and without trying a failing batch again.

        @return: fires once every write queued has been committed or has
            failed, and no transaction is under way.
        """
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self.whenDrained()

    def whenDrained(self) -> Deferred[None]:
        """
        Fires once no write is queued and no transaction is under way.
        """
        drained: Deferred[None] = Deferred()
        self._drained.append(drained)
        self._schedule()
        return drained


class PostgreSQLWriter(PostgreSQLBase):
    """
    What the store's roles that write share: their writes go to the
    batcher, fenced by the claim the store's view is bound to, if any
    (L{imapmig.state.postgresql.PostgreSQLStateStore.forClaim}).

    @ivar _batcher: the store's batcher, shared by its views.
    @ivar _ids: the ids the writer chooses, shared by its views.
    @ivar _claim: the claim this view's writes are fenced by; L{None} for
        the store itself, whose writes are not fenced.
    """

    _batcher: WriteBatcher
    _ids: WriterIds
    _claim: Claim | None = None

    def writesFailing(self) -> str | None:
        """
        Why the store's last writes failed, while they do (the database's
        own reason), or L{None}: for C{/healthz}
        (L{imapmig.status.health}), which a read alone would find healthy.
        """
        return self._batcher.failing

    def _makeBatcher(self, clock: IReactorTime | None) -> None:
        """
        Make the batcher, committing on the writer's connection.
        """
        self._ids = WriterIds()

        def commit(batch: list[Write]) -> Deferred[set[Claim]]:
            return self._call(
                "record in the state database",
                lambda connection: commitBatch(connection, self._ids, batch),
                self._writer,
            )

        self._batcher = WriteBatcher(commit, clock, self._where)

    def _enqueue(
        self, kind: str, job: str, payload: Any, rows: int = 1, settled: Sequence[int] = ()
    ) -> Deferred[Any]:
        """
        Queue a write of C{kind} for C{job}.

        @return: fires after its commit (see L{WriteBatcher.add}); fails
            with L{PermanentError} at once for a job other than the one
            this view's claim holds.
        """
        claim = self._claim
        if claim is not None and claim.job != job:
            return fail(
                PermanentError(
                    f"{self._where}: a view of job {claim.job}'s claim cannot write for job {job}"
                )
            )
        return self._batcher.add(Write(kind, job, payload, rows, claim, settled))
