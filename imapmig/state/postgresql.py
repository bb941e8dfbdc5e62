# -*- test-case-name: tests.test_state_postgresql,tests.test_state_contract,tests.test_state_fencing -*-
"""
The state store on PostgreSQL, for a fleet of daemons sharing one
database (issue 30; docs/fleet-design.md).

Its roles: outcomes and the journal (L{IOutcomeJournal}, its writes in
L{imapmig.state._pgoutcomes}); folder marks and fallbacks
(L{IFolderMarks}) and each job's failure, holds and timeline
(L{IJobRecords}), their writes in L{imapmig.state._pgrecords}; the
accounts' daily budget use (L{IBudgetRecords}) and the queries of reports
and the status site (L{IReportQueries}): every role of L{IStateStore},
each one class with the SQLite store's where their logic is the same
(its reads, in L{imapmig.state._sqloutcomes},
L{imapmig.state._sqlrecords} and L{imapmig.state._sqlreports}, written
once in the dialect table of L{imapmig.state._sqldialect}).  Its writes
are gathered by a batcher into one transaction at a time
(L{imapmig.state._pgbatch}); a view of a claim
(L{PostgreSQLStateStore.forClaim}) fences each of its writes by the
queue's tables (L{imapmig.state._pgwrites}).

psycopg 3's synchronous API is called from a Twisted thread pool given
by the caller, through two connections, the writer's and the reader's
(L{imapmig.state._pgbase}); the schema is migrated at open in one
transaction under an advisory lock (L{imapmig.state._pgschema}).  What
it replaces: nothing; it is the third implementation beside
L{imapmig.state.sqlite} and L{imapmig.state.memory}.
"""

from __future__ import annotations

import copy
from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from imapmig.errors import PermanentError, TransientError
from imapmig.state._pgbase import Connection, ConnectionPool
from imapmig.state.pgconnect import Connector, displayName
from imapmig.state._pgoutcomes import PostgreSQLOutcomeJournal
from imapmig.state._pgrecords import PostgreSQLFolderMarks, PostgreSQLJobRecords
from imapmig.state._pgschema import SCHEMA_VERSION, migrate
from imapmig.state._sqlrecords import BudgetRecords
from imapmig.state._sqlreports import ReportQueries
from imapmig.state._pgwrites import Claim
from imapmig.state import IStateStore

__all__ = ["SCHEMA_VERSION", "PostgreSQLStateStore"]


@implementer(IStateStore)
class PostgreSQLStateStore(
    PostgreSQLOutcomeJournal,
    PostgreSQLFolderMarks,
    PostgreSQLJobRecords,
    BudgetRecords,
    ReportQueries,
):
    """
    An L{IStateStore} in a PostgreSQL database's C{imapmig} schema.
    """

    def __init__(
        self,
        reactor: IReactorFromThreads,
        threadPool: ThreadPool,
        conninfo: str,
        seconds: Callable[[], float],
        clock: IReactorTime | None = None,
        password: str | None = None,
    ) -> None:
        """
        Make the store; nothing is opened until L{open} or the first call.

        @param reactor: where results are delivered (C{callFromThread}).
        @param threadPool: the threads that call psycopg, started by the
            caller; at most C{connections} of them are busy with the store
            at once.
        @param conninfo: a libpq URI or connection string (its password is
            never shown: errors name L{displayName}'s form); its
            connections are opened by L{Connector}s, the writer's and the
            reader's (L{imapmig.state.pgconnect.ROLES}: their timeouts,
            the reader read-only), keeping the URI's C{application_name}
            and C{options}.
        @param seconds: the clock that stamps each outcome's and journal
            entry's time.
        @param password: given to libpq apart, never in C{conninfo};
            L{None}: libpq finds one (C{PGPASSFILE}) or needs none.
        @param clock: what times the write batches (their 10 ms) and the
            pauses between a failed batch's attempts; by default
            C{reactor} if it provides L{IReactorTime}, else none: a batch
            then starts as soon as none commits.
        """
        self._reactor = reactor
        self._threadPool = threadPool
        self._where = displayName(conninfo)
        self._seconds = seconds
        self._closeWaiters: list[Deferred[None]] = []
        self._reader = ConnectionPool(Connector(conninfo, "reader", password))
        self._writer = ConnectionPool(Connector(conninfo, "writer", password))
        if clock is None and IReactorTime.providedBy(reactor):
            clock = reactor
        self._makeBatcher(clock)

    def __repr__(self) -> str:
        return f"<PostgreSQLStateStore {self._where}>"

    def open(self, migratedBy: str = "imapmig") -> Deferred[int]:
        """
        Connect and bring the schema to L{SCHEMA_VERSION}.

        @param migratedBy: recorded with a new version (the daemon id).
        @return: a Deferred firing with the version the database had (0
            for a new one), or failing with
            L{StateSchemaTooNew<imapmig.errors.StateSchemaTooNew>} for a
            database newer than this code, L{PermanentError} if it cannot
            be reached or written (a lost connection too: a daemon cannot
            start without its state), naming the database without password.
        """

        def migrateOn(connection: Connection) -> int:
            version = migrate(connection, self._where, migratedBy)
            self._ids.draw(connection)
            return version

        def atStart(failure: Failure) -> Failure:
            # A daemon cannot start without its state: whatever the cause
            # (a wrong password, host or database), it is not retried.
            error = failure.check(TransientError)
            if error is None:
                return failure
            return Failure(PermanentError(str(failure.value)))

        return self._call("open the state database", migrateOn, self._writer).addErrback(
            atStart
        )

    def forClaim(self, job: str, owner: str, generation: int) -> PostgreSQLStateStore:
        """
        See L{IStateStore.forClaim}: a view of this store sharing its
        connections and batcher, whose every write for C{job} is made
        only while the claim is current (the fence of
        L{imapmig.state._pgwrites}) and fails with
        L{LeaseLost<imapmig.errors.LeaseLost>} otherwise.
        """
        view = copy.copy(self)
        view._claim = Claim(job, owner, generation)
        return view

    def close(self) -> None:
        """
        Release the connections; nothing is recorded afterwards.  The
        writes queued are committed first (at once, each batch tried
        once), after the one under way, then the writer's connection
        closes (L{whenClosed}).  Closing a view closes the store.
        """
        self._reader.close()

        def closeWriter(result: object) -> None:
            self._writer.close()
            waiting = list(self._closeWaiters)
            self._closeWaiters.clear()
            for d in waiting:
                d.callback(None)

        self._batcher.close().addBoth(closeWriter)

    def whenClosed(self) -> Deferred[None]:
        """
        Fires once the store was closed (L{close}) and its writer's
        connection closed: a caller that stops the reactor after L{close}
        waits for it, or the writes queued at the close may never be
        committed (SQLite's store has nothing to wait for).
        """
        if self._writer.closed:
            return succeed(None)
        closed: Deferred[None] = Deferred()
        self._closeWaiters.append(closed)
        return closed
