# -*- test-case-name: tests.test_state_contract -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The state store's contract (L{tests.statecontract},
L{tests.statecontract_reports}, L{tests.statecontract_budgets}) held against each store: memory, SQLite,
and PostgreSQL (on a private cluster, a fresh database per test; on CI a
missing PostgreSQL fails these tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state.memory import MemoryStateStore
from imapmig.state.postgresql import PostgreSQLStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.postgresql import requirePostgreSQL
from tests.statecontract import (
    BudgetRecordsContract,
    FolderMarksContract,
    JobRecordsContract,
    OutcomeJournalContract,
    SynchronousReactor,
    SynchronousThreadPool,
    sharedCluster,
)
from tests.statecontract_budgets import BudgetReservationContract, ConcurrentReservations
from tests.statecontract_reports import (
    FailurePagesContract,
    NamesContract,
    ReportQueriesContract,
)

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object


def openPostgreSQLStore(
    testCase: SynchronousTestCase,
    dsn: str | None = None,
    clock: Clock | None = None,
) -> PostgreSQLStateStore:
    """
    A new L{PostgreSQLStateStore} in a new database of the shared cluster
    (or C{dsn}'s, new), its calls run at once in the test's thread, opened
    (migrated), closed when C{testCase} ends.

    @param clock: its clock; a new L{Clock} if L{None}.
    """
    requirePostgreSQL(testCase)
    if dsn is None:
        dsn = sharedCluster().createDatabase()
    seconds = (clock or Clock()).seconds
    store = PostgreSQLStateStore(SynchronousReactor(), SynchronousThreadPool(), dsn, seconds)
    testCase.addCleanup(store.close)
    testCase.assertEqual(testCase.successResultOf(store.open()), 0)
    return store


class MemoryStores(_MixinBase):
    """
    Makes L{MemoryStateStore}s on the test's L{Clock}.
    """

    clock: Clock

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        self.clock = Clock()
        store = MemoryStateStore(seconds=self.clock.seconds)
        self.addCleanup(store.close)
        return store


class SQLiteStores(_MixinBase):
    """
    Makes L{SQLiteStateStore}s in new files, on the test's L{Clock}.
    """

    clock: Clock

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        self.clock = Clock()
        store = SQLiteStateStore(self.mktemp(), seconds=self.clock.seconds)
        self.addCleanup(store.close)
        return store


class PostgreSQLStores(_MixinBase):
    """
    Makes L{PostgreSQLStateStore}s in new databases, on the test's
    L{Clock}.
    """

    clock: Clock

    def makeStore(self) -> PostgreSQLStateStore:
        """
        A new L{PostgreSQLStateStore} in a new database.
        """
        self.clock = Clock()
        return openPostgreSQLStore(self, clock=self.clock)


class MemoryOutcomeJournalTests(MemoryStores, OutcomeJournalContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s outcomes and journal keep the contract.
    """


class SQLiteOutcomeJournalTests(SQLiteStores, OutcomeJournalContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s outcomes and journal keep the contract.
    """


class PostgreSQLOutcomeJournalTests(PostgreSQLStores, OutcomeJournalContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s outcomes and journal keep the contract.
    """


class MemoryFolderMarksTests(MemoryStores, FolderMarksContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s folder marks and fallbacks keep the contract.
    """


class SQLiteFolderMarksTests(SQLiteStores, FolderMarksContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s folder marks and fallbacks keep the contract.
    """


class PostgreSQLFolderMarksTests(PostgreSQLStores, FolderMarksContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s folder marks and fallbacks keep the contract.
    """


class MemoryJobRecordsTests(MemoryStores, JobRecordsContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s failures, holds and timelines keep the contract.
    """


class SQLiteJobRecordsTests(SQLiteStores, JobRecordsContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s failures, holds and timelines keep the contract.
    """


class PostgreSQLJobRecordsTests(PostgreSQLStores, JobRecordsContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s failures, holds and timelines keep the contract.
    """


class MemoryBudgetRecordsTests(MemoryStores, BudgetRecordsContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s budget records keep the contract.
    """


class SQLiteBudgetRecordsTests(SQLiteStores, BudgetRecordsContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s budget records keep the contract.
    """


class PostgreSQLBudgetRecordsTests(PostgreSQLStores, BudgetRecordsContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s budget records keep the contract.
    """


class MemoryBudgetReservationTests(
    MemoryStores, BudgetReservationContract, SynchronousTestCase
):
    """
    L{MemoryStateStore}'s budget reservations keep the contract.
    """


class SQLiteBudgetReservationTests(
    SQLiteStores, BudgetReservationContract, SynchronousTestCase
):
    """
    L{SQLiteStateStore}'s budget reservations keep the contract.
    """


class PostgreSQLBudgetReservationTests(
    PostgreSQLStores, BudgetReservationContract, SynchronousTestCase
):
    """
    L{PostgreSQLStateStore}'s budget reservations keep the contract.
    """


class PostgreSQLConcurrentReservationTests(ConcurrentReservations, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}s of three daemons never overspend a budget
    they share.
    """

    def openStore(self, dsn: str | None) -> tuple[PostgreSQLStateStore, str]:
        """
        A store on C{dsn}'s database, or on a new one (migrated by the
        first store).
        """
        requirePostgreSQL(self)
        if dsn is None:
            dsn = sharedCluster().createDatabase()
            return openPostgreSQLStore(self, dsn), dsn
        store = PostgreSQLStateStore(SynchronousReactor(), SynchronousThreadPool(), dsn, Clock().seconds)
        self.addCleanup(store.close)
        self.successResultOf(store.open())
        return store, dsn


class MemoryReportQueriesTests(MemoryStores, ReportQueriesContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s outcomes as reports read them keep the contract.
    """


class SQLiteReportQueriesTests(SQLiteStores, ReportQueriesContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s outcomes as reports read them keep the contract.
    """


class PostgreSQLReportQueriesTests(PostgreSQLStores, ReportQueriesContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s outcomes as reports read them keep the contract.
    """


class MemoryFailurePagesTests(MemoryStores, FailurePagesContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s failure and manifest pages keep the contract.
    """


class SQLiteFailurePagesTests(SQLiteStores, FailurePagesContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s failure and manifest pages keep the contract.
    """


class PostgreSQLFailurePagesTests(PostgreSQLStores, FailurePagesContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s failure and manifest pages keep the contract.
    """


class MemoryNamesTests(MemoryStores, NamesContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s names of messages and activity keep the contract.
    """


class SQLiteNamesTests(SQLiteStores, NamesContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s names of messages and activity keep the contract.
    """


class PostgreSQLNamesTests(PostgreSQLStores, NamesContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s names of messages and activity keep the contract.
    """
