# -*- test-case-name: tests.test_state_manifest -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what the state store answers the status pages and the audit
manifest with: Message-IDs, pages of failures, the manifest in pages, a
health ping; and the upgrade of a version 7 database to version 8.
"""

from __future__ import annotations

import sqlite3

import attrs
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError
from imapmig.state import FailuresPage, MessageOutcome
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES, appended, failed, present


def withId(outcome: MessageOutcome, messageId: str) -> MessageOutcome:
    """
    C{outcome} with the Message-ID C{messageId}.
    """
    return attrs.evolve(outcome, messageId=messageId)


class SQLiteManifestTests(SynchronousTestCase):
    """
    L{SQLiteStateStore} pages failures and the manifest from its index
    (their behaviour, which every store shares, is
    L{tests.statecontract_reports.FailurePagesContract}).
    """

    def test_indexRead(self) -> None:
        """
        SQLite answers a failure page and a manifest page from the index of
        messages not copied, not by reading every message of the job: they
        are answered, and every query the store makes names the index,
        after the index is dropped only if SQLite refuses them.
        """
        path = self.mktemp()
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.successResultOf(store.recordOutcomes("job", [failed("A", "1")]))
        self.successResultOf(store.failuresPage("job", 0, 1, "x"))
        self.successResultOf(store.manifestOutcomes("job", None, 1))
        self.successResultOf(store.manifestOutcomes("job", ("A", "0"), 1))
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.execute("DROP INDEX messages_not_copied")
        for refused in (
            store.failuresPage("job", 0, 1),
            store.failuresPage("job", 0, 1, "x"),
            store.manifestOutcomes("job", None, 1),
            store.manifestOutcomes("job", ("A", "0"), 1),
        ):
            error = self.failureResultOf(refused, PermanentError)
            self.assertIn("no such index: messages_not_copied", str(error.value))


class SchemaVersion8Tests(SynchronousTestCase):
    """
    A version 7 database, as imapmig 0.1.0 of issue 17 wrote it, is read
    and upgraded.
    """

    def writeVersion7(self, path: str) -> sqlite3.Connection:
        """
        Write a version 7 database at C{path} with an appended, an already
        present and a failed message: the current schema without version
        8's column and index.

        @return: a connection to it, closed when the test ends.
        """
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.successResultOf(
            store.recordOutcomes(
                "job", [appended("INBOX", "1", uid=3), present("INBOX", "2", uid=4),
                        failed("INBOX", "3")],
            )
        )  # fmt: skip
        store.close()
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.executescript(
            _DROP_NAMES
            + "DROP TABLE job_holds; DROP INDEX messages_not_copied; ALTER TABLE messages DROP COLUMN message_id;"
            " UPDATE schema_version SET version = 7;"
        )
        return connection

    def test_readOnlyVersion7(self) -> None:
        """
        Opened read-only (by C{imapmig report}), a version 7 database is
        read without Message-IDs, pages its failures and its manifest,
        reports them (no timeline yet), and is left at version 7.
        """
        path = self.mktemp()
        connection = self.writeVersion7(path)
        store = SQLiteStateStore(path, seconds=Clock().seconds, readOnly=True)
        self.addCleanup(store.close)
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "3")])
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "too big")),
            FailuresPage(1, (failed("INBOX", "3"),)),
        )
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)),
            [present("INBOX", "2", uid=4), failed("INBOX", "3")],
        )
        [report] = self.successResultOf(store.jobReports(["job"]))
        self.assertEqual((report.failures, report.timeline), ((failed("INBOX", "3"),), ()))
        self.assertIsNone(self.successResultOf(store.ping()))
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(7,)]
        )

    def test_upgradeFromVersion7(self) -> None:
        """
        Opened to write, a version 7 database is upgraded (through
        version 8, the Message-IDs, to the current version): its
        rows read back with no Message-ID, it records Message-IDs, and its
        schema (columns and indexes) is a new database's.
        """
        path = self.mktemp()
        connection = self.writeVersion7(path)
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)),
            [present("INBOX", "2", uid=4), failed("INBOX", "3")],
        )
        recorded = withId(failed("INBOX", "4"), "<x@y>")
        self.successResultOf(store.recordOutcomes("job", [recorded]))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "<X@")),
            FailuresPage(1, (recorded,)),
        )
        freshPath = self.mktemp()
        SQLiteStateStore(freshPath, seconds=Clock().seconds).close()
        fresh = sqlite3.connect(freshPath)
        self.addCleanup(fresh.close)
        for query in (
            "PRAGMA table_info(messages)",
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
        ):
            self.assertEqual(connection.execute(query).fetchall(), fresh.execute(query).fetchall())
