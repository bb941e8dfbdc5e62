# -*- test-case-name: tests.test_state_postgresql,tests.test_state_contract,tests.test_state_pgbatch -*-
"""
What every role of the PostgreSQL state store (L{imapmig.state.postgresql})
shares: two psycopg 3 connections (the writer's and the reader's, each a
L{ConnectionPool} of one, opened by its role's
L{Connector<imapmig.state.pgconnect.Connector>}), used through psycopg's
synchronous API from a Twisted thread pool (C{deferToThreadPool}, with
the reactor and the pool injected) so that the reactor stays the epoll
reactor, and the transaction and the read that turn psycopg's errors
into imapmig's.

The PostgreSQL counterpart of L{imapmig.state._sqlbase}: both give the
means of L{imapmig.state._sqldialect.SQLStore}, over which the roles'
shared classes read and write; SQLite's are called in the reactor's
thread, these in the pool's.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import psycopg
from psycopg import errors as pgerrors
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from imapmig.errors import DatabaseRefused, PermanentError, TransientError
from imapmig.state._sqldialect import POSTGRESQL, SQLStore
from imapmig.state.pgconnect import Connector, mapError, oneLine

_T = TypeVar("_T")

Connection = psycopg.Connection[tuple[Any, ...]]

MAX_CONNECTIONS = 2
"""
The most connections one store opens: the writer's (the batches of
L{imapmig.state._pgbatch}, one at a time) and the reader's (reads, pages
and reports); the queue has the third of a daemon's three.
"""

# Errors worth retrying: the connection or the server went away, or
# another transaction was in the way.
def _refused(e: Exception) -> bool:
    """
    Whether the database answered C{e} with an error of its own (a
    SQLSTATE, not a connection exception nor its shutting down): it was
    reached, and refused.
    """
    state = getattr(e, "sqlstate", None)
    return bool(state) and not str(state).startswith(("08", "57P"))


_TRANSIENT = (
    psycopg.OperationalError,
    pgerrors.SerializationFailure,
    pgerrors.DeadlockDetected,
    pgerrors.LockNotAvailable,
)


class ConnectionPool:
    """
    At most C{maximum} connections, each used by one thread at a time,
    opened when first wanted and again when found broken.  Called from
    the pool's threads only, but L{close}, which the reactor's thread
    calls.

    A thread that finds every connection busy waits on a condition, not
    on the idle queue: a connection given back broken is closed rather
    than queued, and frees a place to open another, which a waiter must
    be woken to take (waiting on the queue, as this did, left threads
    beyond C{maximum} waiting for ever once the busy connections broke).
    """

    def __init__(self, connector: Connector, maximum: int = 1) -> None:
        """
        @param connector: opens the connections, with their role's
            settings (L{imapmig.state.pgconnect}).
        """
        self._connector = connector
        self._maximum = maximum
        self._idle: list[Connection] = []
        self._opened = 0
        self._changed = threading.Condition()
        self.closed = False

    def _connect(self) -> Connection:
        return self._connector.connect()

    def _take(self) -> Connection:
        with self._changed:
            while not self.closed and not self._idle and self._opened >= self._maximum:
                self._changed.wait()
            if self.closed:
                raise PermanentError(f"{self._connector.where}: the state store is closed")
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        try:
            return self._connect()
        except BaseException:
            with self._changed:
                self._opened -= 1
                self._changed.notify()
            raise

    def _give(self, connection: Connection) -> None:
        with self._changed:
            spent = connection.broken or connection.closed or self.closed
            if spent:
                self._opened -= 1
            else:
                self._idle.append(connection)
            self._changed.notify()
        if spent:
            connection.close()

    def run(self, work: Callable[[Connection], _T], again: bool = False) -> _T:
        """
        What C{work} returns, called with a connection of the pool.

        @param again: call C{work} once more, on a new connection, if its
            connection was found broken (a database restarted since it was
            last used): for work that may run twice.
        """
        connection = self._take()
        try:
            return work(connection)
        except psycopg.OperationalError:
            if not (again and connection.broken):
                raise
        finally:
            self._give(connection)
        return self.run(work)

    def close(self) -> None:
        """
        Close the idle connections now, and the others as they come back.
        """
        with self._changed:
            self.closed = True
            idle, self._idle = self._idle, []
            self._opened -= len(idle)
            self._changed.notify_all()
        for connection in idle:
            connection.close()


class PostgreSQLBase(SQLStore):
    """
    The connections to a state database and the means of its roles to
    read and write it (L{SQLStore}'s, in a thread of the pool); the store
    (L{imapmig.state.postgresql}) makes it.

    @ivar _reactor: where the results are delivered.
    @ivar _threadPool: the threads that call psycopg.
    @ivar _reader: the reader's connection: reads, pages, reports.
    @ivar _writer: the writer's connection: the batches, the migration,
        the writes that are not batched.
    """

    _dialect = POSTGRESQL
    _reactor: IReactorFromThreads
    _threadPool: ThreadPool
    _reader: ConnectionPool
    _writer: ConnectionPool

    def _error(self, action: str, e: Exception) -> Exception:
        """
        The imapmig error for C{e}, raised while doing C{action}: a
        L{TransientError} for a lost connection or a conflict, a
        L{PermanentError} naming the database otherwise.
        """
        if isinstance(e, (PermanentError, TransientError)):
            return e
        if isinstance(e, psycopg.Error):
            mapped = mapError(self._where, action, e)
            if isinstance(mapped, PermanentError):
                # Not worth retrying, said as pgconnect says it (a pooler
                # in the way: which, and what to do).
                return mapped
        kind = TransientError if isinstance(e, _TRANSIENT) else PermanentError
        if kind is TransientError and _refused(e):
            kind = DatabaseRefused
        return kind(f"{self._where}: cannot {action}: {oneLine(e)}")

    def _call(
        self,
        action: str,
        work: Callable[[Connection], _T],
        connections: ConnectionPool | None = None,
    ) -> Deferred[_T]:
        """
        What C{work} returns, called with a connection in a thread of the
        pool; its errors as imapmig's.

        @param connections: the reader's (by default) or the writer's.
        @return: a Deferred firing in the reactor's thread, or failing
            with L{PermanentError} at once if the store is closed.
        """
        pool = self._reader if connections is None else connections
        if pool.closed:
            return fail(PermanentError(f"{self._where}: the state store is closed"))

        def inThread() -> _T:
            try:
                return pool.run(work, again=pool is self._reader)
            except (psycopg.Error, OverflowError, UnicodeEncodeError, ValueError) as e:
                raise self._error(action, e) from None

        return deferToThreadPool(self._reactor, self._threadPool, inThread)

    def _ifOpen(self, value: _T) -> Deferred[_T]:
        """
        C{value}, unless the store was closed: the answer of a call that
        has nothing to ask the database.
        """
        if self._reader.closed:
            return fail(PermanentError(f"{self._where}: the state store is closed"))
        return succeed(value)

    def _transaction(self, action: str, write: Callable[[Connection], _T]) -> Deferred[_T]:
        """
        Call C{write} with the writer's connection inside one transaction
        of its own (not batched): all it writes is committed, or none of
        it.
        """

        def transaction(connection: Connection) -> _T:
            with connection.transaction():
                return write(connection)

        return self._call(action, transaction, self._writer)

    def _snapshot(self, action: str, read: Callable[[Connection], _T]) -> Deferred[_T]:
        """
        What C{read} returns, called with the writer's connection in one
        read-only transaction of its own (one snapshot for its
        statements).
        """

        def inSnapshot(connection: Connection) -> _T:
            connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return read(connection)

        return self._transaction(action, inSnapshot)

    def _reading(self, action: str, read: Callable[[Connection], _T]) -> Deferred[_T]:
        """
        What C{read} returns, called with the reader's connection.
        """
        return self._call(action, read)

    def readOnReader(
        self, work: Callable[[Connection], _T], action: str = "read the database"
    ) -> Deferred[_T]:
        """
        What C{work} returns, called with the reader's connection in a
        thread of the store (one read at a time, as the store's own); its
        errors as the store's: a L{TransientError} for a lost connection
        or a statement timed out, a L{PermanentError} naming the database
        and C{action} otherwise.  For a daemon's other readers of the same
        database (the status pages' fleet,
        L{imapmig.queue._pgfleetview}), so that they open no connection of
        their own (docs/fleet-design.md, "The thread pool").  C{work} may
        run twice (again on a new connection if its own was found broken).
        """
        return self._call(action, work)
