# -*- test-case-name: tests.test_state_contract -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The state store's contract (L{tests.statecontract}) held against each
store: memory, SQLite, and PostgreSQL (on a private cluster, a fresh
database per test; on CI a missing PostgreSQL fails these tests).
"""

from __future__ import annotations

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


class MemoryOutcomeJournalTests(OutcomeJournalContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s outcomes and journal keep the contract.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteOutcomeJournalTests(OutcomeJournalContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s outcomes and journal keep the contract.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store


def openPostgreSQLStore(
    testCase: SynchronousTestCase, dsn: str | None = None
) -> PostgreSQLStateStore:
    """
    A new L{PostgreSQLStateStore} in a new database of the shared cluster
    (or C{dsn}'s, new), its calls run at once in the test's thread, opened
    (migrated), closed when C{testCase} ends.
    """
    requirePostgreSQL(testCase)
    if dsn is None:
        dsn = sharedCluster().createDatabase()
    store = PostgreSQLStateStore(
        SynchronousReactor(), SynchronousThreadPool(), dsn, seconds=Clock().seconds
    )
    testCase.addCleanup(store.close)
    testCase.assertEqual(testCase.successResultOf(store.open()), 0)
    return store


class PostgreSQLOutcomeJournalTests(OutcomeJournalContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s outcomes and journal keep the contract.
    """

    def makeStore(self) -> PostgreSQLStateStore:
        """
        A new L{PostgreSQLStateStore} in a new database.
        """
        return openPostgreSQLStore(self)


class MemoryFolderMarksTests(FolderMarksContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s folder marks and fallbacks keep the contract.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteFolderMarksTests(FolderMarksContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s folder marks and fallbacks keep the contract.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store


class PostgreSQLFolderMarksTests(FolderMarksContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s folder marks and fallbacks keep the contract.
    """

    def makeStore(self) -> PostgreSQLStateStore:
        """
        A new L{PostgreSQLStateStore} in a new database.
        """
        return openPostgreSQLStore(self)


class MemoryJobRecordsTests(JobRecordsContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s failures, holds and timelines keep the contract.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteJobRecordsTests(JobRecordsContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s failures, holds and timelines keep the contract.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store


class PostgreSQLJobRecordsTests(JobRecordsContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s failures, holds and timelines keep the contract.
    """

    def makeStore(self) -> PostgreSQLStateStore:
        """
        A new L{PostgreSQLStateStore} in a new database.
        """
        return openPostgreSQLStore(self)


class MemoryBudgetRecordsTests(BudgetRecordsContract, SynchronousTestCase):
    """
    L{MemoryStateStore}'s budget records keep the contract.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteBudgetRecordsTests(BudgetRecordsContract, SynchronousTestCase):
    """
    L{SQLiteStateStore}'s budget records keep the contract.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store


class PostgreSQLBudgetRecordsTests(BudgetRecordsContract, SynchronousTestCase):
    """
    L{PostgreSQLStateStore}'s budget records keep the contract.
    """

    def makeStore(self) -> PostgreSQLStateStore:
        """
        A new L{PostgreSQLStateStore} in a new database.
        """
        return openPostgreSQLStore(self)
