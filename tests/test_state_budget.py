"""
Tests for the daily budget records of the SQLite store: kept across a
reopening, and the schema upgrade that adds them (their behaviour, which
every store shares, is L{tests.statecontract.BudgetRecordsContract}).
"""

from __future__ import annotations

import sqlite3

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES

class SQLiteBudgetTests(SynchronousTestCase):
    """
    L{SQLiteStateStore} keeps budget records, across a reopening of the
    file, and upgrades a version 4 database to hold them.
    """

    def test_survivesReopening(self) -> None:
        """
        A new store object on the same file (a restarted daemon) reads the
        total the old one recorded, and adds to it.
        """
        path = self.mktemp()
        first = SQLiteStateStore(path, seconds=Clock().seconds)
        self.successResultOf(first.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 400))
        first.close()
        second = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(second.close)
        self.assertEqual(
            self.successResultOf(second.budgetUsed("gmail", "alice", "upload", "2030-01-01")), 400
        )
        self.assertEqual(
            self.successResultOf(second.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 1)),
            401,
        )

    def test_migrateFromVersion4(self) -> None:
        """
        A version 4 database (before budgets) is upgraded when opened: it
        gets the budget table, empty, and takes records; read-only, it is
        left as it is and reports no use.
        """
        path = self.mktemp()
        SQLiteStateStore(path, seconds=Clock().seconds).close()
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.executescript(
            "DROP TABLE job_holds; DROP INDEX messages_not_copied; ALTER TABLE messages DROP COLUMN message_id; DROP TABLE job_failures; DROP TABLE budget_use;"
            " ALTER TABLE folders DROP COLUMN deferred;"
            " "
            + _DROP_NAMES
            + "UPDATE schema_version SET version = 4;"
        )
        readOnly = SQLiteStateStore(path, seconds=Clock().seconds, readOnly=True)
        self.assertEqual(
            self.successResultOf(readOnly.budgetUsed("s", "u", "upload", "2030-01-01")), 0
        )
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(4,)]
        )
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01")), 0)
        self.successResultOf(store.addBudgetUse("s", "u", "upload", "2030-01-01", 3))
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01")), 3)
