# -*- test-case-name: tests.test_state_journal -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the journal of batches in flight in the SQLite file (its
behaviour, which every store shares, is in L{tests.statecontract}): what
only the SQLite file does (one row per batch, one transaction, surviving SIGKILL,
the upgrade to schema version 3); then the packed form.
"""

from __future__ import annotations

import signal
import sqlite3
import struct

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError, TransientError
from imapmig.state import (
    FolderFallback,
    JournalEntry,
    JournalMessage,
)
from imapmig.state._packing import packMessages, unpackMessages
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.statecontract import BATCH, sent
from tests.statesupport import readLine, startPython
from tests.test_state import MARK, appended

# A child that journals a batch and records another's outcomes, then says
# so and waits to be killed.
_JOURNAL_THEN_WAIT = """
import sys
from imapmig.state import JournalMessage, MessageOutcome
from imapmig.state.sqlite import SQLiteStateStore
store = SQLiteStateStore(sys.argv[1], seconds=lambda: 1000.0)
done = store.journalBatch("job", "INBOX", 7, 1, [JournalMessage("INBOX", "1", 10, b"h1")])
settled = []
done.addCallback(settled.append)
store.journalBatch("job", "INBOX", 7, 2, [JournalMessage("INBOX", "2", 20, b"h2")])
store.recordOutcomes("job", [MessageOutcome("INBOX", "1", "INBOX", 10, 7, 1)], settled)
print("written", flush=True)
sys.stdin.read()
"""


class SQLiteJournalTests(SynchronousTestCase):
    """
    What only L{SQLiteStateStore}'s journal does: one row and one
    transaction per batch, settling in the outcomes' transaction, lasting
    across a reopen and a SIGKILL, and the upgrade that brings it.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = self.mktemp()

    def openStore(self, readOnly: bool = False, busyTimeout: float = 1.0) -> SQLiteStateStore:
        """
        Open a store on L{path}, closed when the test ends.
        """
        store = SQLiteStateStore(
            self.path, seconds=self.clock.seconds, busyTimeout=busyTimeout, readOnly=readOnly
        )
        self.addCleanup(store.close)
        return store

    def inspect(self) -> sqlite3.Connection:
        """
        A separate connection to the database file, as another process
        would have.
        """
        connection = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(connection.close)
        return connection

    def trace(self, store: SQLiteStateStore) -> list[str]:
        """
        The statements C{store} executes from now on.
        """
        statements: list[str] = []
        connection = store._connection
        assert connection is not None
        connection.set_trace_callback(statements.append)
        self.addCleanup(connection.set_trace_callback, None)
        return statements

    def test_oneRowOneTransaction(self) -> None:
        """
        A batch of 50 messages is one row, written in one transaction,
        stamped with the injected clock's time; its messages take a few
        octets beyond their keys and heads.
        """
        store = self.openStore()
        self.clock.advance(3000)
        batch = [sent(".Archive.2019", f"/16000000{i:02d}.M{i}P7.host,S=4000:2,S") for i in range(50)]
        statements = self.trace(store)
        entryId = self.successResultOf(store.journalBatch("job", "Archive/2019", 7, 100, batch))
        self.assertEqual(
            [s.split()[0].upper() for s in statements], ["BEGIN", "INSERT", "COMMIT"]
        )
        rows = self.inspect().execute(
            "SELECT entry_id, job, mailbox, uidvalidity, uid_floor, length(messages),"
            " written_at FROM journal"
        ).fetchall()
        payload = sum(len(m.messageKey) + len(m.head) for m in batch)
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0][:5], (entryId, "job", "Archive/2019", 7, 100))
        self.assertLess(rows[0][5], payload + 20 * len(batch) + 32)
        self.assertEqual(rows[0][6], 3000.0)

    def test_settleInOutcomesTransaction(self) -> None:
        """
        The settled entries are deleted in the transaction that records
        the outcomes.
        """
        store = self.openStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        second = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        statements = self.trace(store)
        self.successResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1")], settled=[first, second])
        )
        self.assertEqual(
            [s.split()[0].upper() for s in statements],
            ["BEGIN", "INSERT", "DELETE", "DELETE", "COMMIT"],
        )

    def test_journalBusy(self) -> None:
        """
        While another connection holds the write lock, journaling fails
        with L{TransientError}, and the batch is not journaled.
        """
        store = self.openStore(busyTimeout=0)
        other = self.inspect()
        other.execute("BEGIN IMMEDIATE")
        self.failureResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH), TransientError)
        other.execute("ROLLBACK")
        self.assertEqual(self.successResultOf(store.journal("job")), [])

    def test_persists(self) -> None:
        """
        Unsettled entries are there after the file is opened again, and new
        entries get higher ids than they have.
        """
        store = self.openStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        second = self.successResultOf(store.journalBatch("job", "INBOX", 7, 5, BATCH[:1]))
        self.successResultOf(store.recordOutcomes("job", [], [first]))
        store.close()
        reopened = self.openStore()
        self.assertEqual(
            self.successResultOf(reopened.journal("job")),
            [JournalEntry(second, "INBOX", 7, 5, BATCH[:1])],
        )
        third = self.successResultOf(reopened.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.assertGreater(third, second)

    def test_survivesSIGKILL(self) -> None:
        """
        What a process journaled and recorded before it was killed with
        SIGKILL is in the file: its unsettled entry, not its settled one,
        and the outcome it recorded.
        """
        child = startPython(self, _JOURNAL_THEN_WAIT, self.path)
        self.assertEqual(readLine(self, child), "written")
        child.send_signal(signal.SIGKILL)
        self.assertEqual(child.wait(), -signal.SIGKILL)
        store = self.openStore()
        self.assertEqual(
            [
                (e.uidFloor, e.messages)
                for e in self.successResultOf(store.journal("job"))
            ],
            [(2, (JournalMessage("INBOX", "2", 20, b"h2"),))],
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})

    def test_malformedEntry(self) -> None:
        """
        An entry whose packed messages cannot be read fails L{journal} with
        L{PermanentError} naming the file and the entry.
        """
        store = self.openStore()
        entryId = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.inspect().execute("UPDATE journal SET messages = x'0102'")
        failure = self.failureResultOf(store.journal("job"), PermanentError)
        self.assertIn(self.path, str(failure.value))
        self.assertIn(f"journal entry {entryId}", str(failure.value))

    def writeVersion2(self) -> sqlite3.Connection:
        """
        Write a database file at L{path} as imapmig with schema version 2
        left it (its schema SQL copied here as it was), holding an appended
        message and a folder mark.

        @return: a connection to it, closed when the test ends.
        """
        connection = self.inspect()
        connection.executescript(
            """
            BEGIN;
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            CREATE TABLE messages (
                job TEXT NOT NULL,
                folder_key TEXT NOT NULL,
                message_key TEXT NOT NULL,
                mailbox TEXT NOT NULL,
                size INTEGER NOT NULL,
                uidvalidity INTEGER,
                uid INTEGER,
                failure TEXT,
                updated_at REAL NOT NULL,
                note TEXT,
                present INTEGER NOT NULL DEFAULT 0,
                converted INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (job, folder_key, message_key)
            ) WITHOUT ROWID;
            CREATE TABLE folders (
                job TEXT NOT NULL,
                folder_key TEXT NOT NULL,
                uidvalidity INTEGER NOT NULL,
                uidnext INTEGER NOT NULL,
                highestmodseq INTEGER,
                messages INTEGER NOT NULL,
                updated_at REAL NOT NULL,
                PRIMARY KEY (job, folder_key)
            ) WITHOUT ROWID;
            INSERT INTO schema_version (version) VALUES (2);
            INSERT INTO messages VALUES ('job', 'INBOX', '1', 'INBOX', 100, 7, 3, NULL, 10.0,
                                         NULL, 0, 0);
            INSERT INTO folders VALUES ('job', 'INBOX', 1700000000, 4711, 4611686018427387904,
                                        4000, 10.0);
            COMMIT;
            """
        )
        return connection

    def test_migrateFromVersion2(self) -> None:
        """
        A version 2 database is upgraded to the newest version (8) when
        opened: its outcomes and folder marks read back as before, its
        journal is empty and takes entries, it has no folder fallbacks and
        takes them, and its schema is a new database's.
        """
        connection = self.writeVersion2()
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.folderFallbacks("job")), [])
        fallback = FolderFallback("Say \"hi\"", "Say _hi_", "Invalid mailbox name")
        self.successResultOf(store.recordFolderFallback("job", fallback))
        self.assertEqual(self.successResultOf(store.folderFallbacks("job")), [fallback])
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {"1": appended("INBOX", "1", uid=3)},
        )
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        entryId = self.successResultOf(store.journalBatch("job", "INBOX", 7, 4, BATCH))
        self.assertEqual(entryId, 1)

        freshPath = self.mktemp()
        SQLiteStateStore(freshPath, seconds=self.clock.seconds).close()
        fresh = sqlite3.connect(freshPath)
        self.addCleanup(fresh.close)
        tables = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        self.assertEqual(connection.execute(tables).fetchall(), fresh.execute(tables).fetchall())
        for (table,) in fresh.execute(tables).fetchall():
            query = f"PRAGMA table_info({table})"
            self.assertEqual(
                connection.execute(query).fetchall(), fresh.execute(query).fetchall()
            )

    def test_readOnlyVersion2(self) -> None:
        """
        A version 2 database opened read-only (by C{imapmig report} before
        the daemon upgraded it) is read as it is, not upgraded: its
        outcomes are there (C{imapmig report} reads them) and its journal
        is empty.
        """
        connection = self.writeVersion2()
        store = self.openStore(readOnly=True)
        self.assertEqual(self.successResultOf(store.summary("job")), (1, 0))
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        [report] = self.successResultOf(store.jobReports(["job"]))
        self.assertEqual((report.counts.copied, report.failure, report.fallbacks), (1, None, ()))
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(2,)]
        )


class PackingTests(SynchronousTestCase):
    """
    L{packMessages} and L{unpackMessages}: the compact form of a batch.
    """

    def test_roundTrip(self) -> None:
        """
        Messages unpack as they were packed, in order.
        """
        self.assertEqual(unpackMessages(packMessages(BATCH)), BATCH)
        self.assertEqual(unpackMessages(packMessages([])), ())

    def test_folderKeyOnce(self) -> None:
        """
        A folder key shared by the messages of a batch is written once; a
        message costs 17 octets beyond its key and head.
        """
        folder = ".Lists.twisted-python.archive"
        one = packMessages([sent(folder, "1", head=b"12345678")])
        many = packMessages([sent(folder, str(n), head=b"12345678") for n in range(10)])
        self.assertEqual(many.count(folder.encode("ascii")), 1)
        self.assertEqual(len(many) - len(one), 9 * (17 + 1 + 8))

    def test_malformed(self) -> None:
        """
        A BLOB that is not a packed batch (truncated, of another format, a
        folder index out of range) raises L{ValueError}.
        """
        packed = packMessages(BATCH)
        for blob in [
            b"",
            packed[:-1],
            packed[:10],
            b"\x02" + packed[1:],
            struct.pack("<BI", 1, 0) + struct.pack("<IIqB", 0, 0, 1, 0),
        ]:
            self.assertRaises(ValueError, unpackMessages, blob)

    def test_refused(self) -> None:
        """
        What cannot be packed raises L{ValueError} saying why.
        """
        error = self.assertRaises(ValueError, packMessages, [sent("INBOX", "1", head=b"x" * 256)])
        self.assertIn("255", str(error))
        error = self.assertRaises(ValueError, packMessages, [sent("INBOX", "1", size=2**63)])
        self.assertIn(str(2**63), str(error))
        self.assertRaises(ValueError, packMessages, [sent("INBOX", "\udcff")])

