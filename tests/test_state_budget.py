"""
Tests for the daily budget records of the state stores
(L{IStateStore.budgetUsed}, L{IStateStore.addBudgetUse}) and the schema
upgrade that adds them.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError
from imapmig.state import IStateStore
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object


class BudgetBehaviourMixin(_MixinBase):
    """
    What every state store does with budget records.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> IStateStore:
        raise NotImplementedError()

    def test_interface(self) -> None:
        """
        The store provides L{IStateStore}, budget methods included.
        """
        self.assertTrue(verifyObject(IStateStore, self.makeStore()))

    def test_addsUp(self) -> None:
        """
        Uses of one account, direction and day add up; other accounts,
        servers, directions and days are apart; nothing recorded is 0.
        """
        store = self.makeStore()
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-01")), 0
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 10)),
            10,
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 5)),
            15,
        )
        self.successResultOf(store.addBudgetUse("gmail", "alice", "download", "2030-01-01", 7))
        self.successResultOf(store.addBudgetUse("gmail", "bob", "upload", "2030-01-01", 3))
        self.successResultOf(store.addBudgetUse("other", "alice", "upload", "2030-01-01", 4))
        for (server, user, direction), expected in {
            ("gmail", "alice", "upload"): 15,
            ("gmail", "alice", "download"): 7,
            ("gmail", "bob", "upload"): 3,
            ("other", "alice", "upload"): 4,
        }.items():
            self.assertEqual(
                self.successResultOf(store.budgetUsed(server, user, direction, "2030-01-01")),
                expected,
            )

    def test_newDay(self) -> None:
        """
        A new day starts from 0; writing it drops the earlier days of that
        account and direction, not those of others.
        """
        store = self.makeStore()
        self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 10))
        self.successResultOf(store.addBudgetUse("gmail", "bob", "upload", "2030-01-01", 9))
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-02")), 0
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-02", 2)),
            2,
        )
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-01")), 0
        )
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "bob", "upload", "2030-01-01")), 9
        )

    def test_closed(self) -> None:
        """
        A closed store refuses budget reads and writes with
        L{PermanentError}.
        """
        store = self.makeStore()
        store.close()
        self.failureResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01"), PermanentError)
        self.failureResultOf(
            store.addBudgetUse("s", "u", "upload", "2030-01-01", 1), PermanentError
        )

    def test_tooLarge(self) -> None:
        """
        A total SQLite's INTEGER cannot hold is refused with
        L{PermanentError}, and the earlier total is kept.
        """
        store = self.makeStore()
        self.successResultOf(store.addBudgetUse("s", "u", "upload", "2030-01-01", 1))
        self.failureResultOf(
            store.addBudgetUse("s", "u", "upload", "2030-01-01", 2**63), PermanentError
        )
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01")), 1)


class MemoryBudgetTests(BudgetBehaviourMixin, SynchronousTestCase):
    """
    L{MemoryStateStore} keeps budget records as SQLite does.
    """

    def makeStore(self) -> IStateStore:
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteBudgetTests(BudgetBehaviourMixin, SynchronousTestCase):
    """
    L{SQLiteStateStore} keeps budget records, across a reopening of the
    file, and upgrades a version 4 database to hold them.
    """

    def makeStore(self) -> IStateStore:
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store

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
