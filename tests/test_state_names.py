# -*- test-case-name: tests.test_state_names -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests that the state stores record what the owner of a message not
migrated knows it by (Message-ID, Date, From, Subject), name failures
recorded earlier, say what a job's records cover (L{IStateStore.activity}),
and that a version 9 database is upgraded to hold the names.
"""

from __future__ import annotations

import sqlite3

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state import MessageNames, MessageOutcome, withNames
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES

NAMES = MessageNames("<a@example.com>", "Tue, 3 Mar 2020 10:00:00 +0100", "Ann <a@x>", "Hé")


class MigrateFromVersion9Tests(SynchronousTestCase):
    """
    A version 9 database, which has Message-IDs but no Date, From or
    Subject, is read and upgraded.
    """

    def test_migrateFromVersion9(self) -> None:
        """
        Opened read-only, a version 9 database reads its failures with
        their Message-IDs and no other names, and is left as it is;
        opened to write, it is upgraded with its rows kept, and records
        and reads names.
        """
        path = self.mktemp()
        first = SQLiteStateStore(path, seconds=Clock().seconds)
        old = MessageOutcome("INBOX", "1", "INBOX", 10, failure="NO", messageId="<old@x>")
        self.successResultOf(first.recordOutcomes("job", [old]))
        first.close()
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.executescript(
            _DROP_NAMES
            + "UPDATE schema_version SET version = 9;"
        )
        readOnly = SQLiteStateStore(path, seconds=Clock().seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.failures("job")), [old])
        self.assertEqual(self.successResultOf(readOnly.manifestOutcomes("job", None, 5)), [old])
        page = self.successResultOf(readOnly.failuresPage("job", 0, 5, "old@"))
        self.assertEqual(page.items, (old,))
        readOnly.close()
        self.assertEqual(connection.execute("SELECT version FROM schema_version").fetchall(), [(9,)])
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.failures("job")), [old])
        self.successResultOf(store.nameMessages("job", [("INBOX", "1", NAMES)]))
        self.assertEqual(
            self.successResultOf(store.failures("job")), [withNames(old, NAMES)]
        )
