# -*- test-case-name: tests.test_state -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state.sqlite} and L{imapmig.state.memory}: one set of
behaviour tests held against both (those of outcomes and the journal
alone, which the PostgreSQL store keeps too, are in L{tests.statecontract}),
then what only the SQLite file does.
"""

from __future__ import annotations

import os
import sqlite3

import attrs
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError, TransientError
from imapmig.state import (
    CANCELLED,
    PAUSED,
    JobHold,
    FolderMark,
    MessageOutcome,
    OutcomeCounts,
)
from imapmig.state._sqloutcomes import _stretches
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore


def appended(folderKey: str, messageKey: str, uid: int | None = None) -> MessageOutcome:
    """
    An outcome saying that message C{messageKey} of C{folderKey} was
    appended.
    """
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=folderKey,
        size=100,
        uidValidity=None if uid is None else 7,
        uid=uid,
    )


def failed(folderKey: str, messageKey: str, why: str = "NO [TOOBIG] too big") -> MessageOutcome:
    """
    An outcome saying that message C{messageKey} of C{folderKey} failed
    because of C{why}.
    """
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=folderKey,
        size=200,
        failure=why,
    )


def present(folderKey: str, messageKey: str, uid: int | None = None) -> MessageOutcome:
    """
    An outcome saying that message C{messageKey} of C{folderKey} was found
    already in the destination (as UID C{uid}, if known) and not appended.
    """
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=folderKey,
        size=100,
        uidValidity=None if uid is None else 7,
        uid=uid,
        alreadyPresent=True,
    )


def noted(
    folderKey: str, messageKey: str, note: str = "keyword 'two words' dropped"
) -> MessageOutcome:
    """
    An outcome saying that message C{messageKey} of C{folderKey} was
    appended, with C{note} on what was not carried over exactly.
    """
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=folderKey,
        size=100,
        note=note,
    )


# Takes a database back from version 12 to 11: no fingerprints of folders.
_DROP_FINGERPRINTS = (
    "ALTER TABLE folders DROP COLUMN fingerprint; ALTER TABLE folders DROP COLUMN octets; "
)

# Takes a database back from version 12 to 10: no timelines.
_DROP_TIMELINES = _DROP_FINGERPRINTS + "DROP TABLE job_transitions; "

# Takes a database back from version 11 to 9: no timelines, no names of
# messages.
_DROP_NAMES = (
    _DROP_TIMELINES
    + "ALTER TABLE messages DROP COLUMN message_date;"
    " ALTER TABLE messages DROP COLUMN message_from;"
    " ALTER TABLE messages DROP COLUMN message_subject; "
)

MARK = FolderMark(uidValidity=1700000000, uidNext=4711, highestModSeq=2**62, messages=4000)


class MessageOutcomeTests(SynchronousTestCase):
    """
    Tests for the L{MessageOutcome} value.
    """

    def test_positionalDefaults(self) -> None:
        """
        An outcome built positionally, as before the fidelity fields were
        added, has no note, was not already present, and had no line
        endings converted.
        """
        outcome = MessageOutcome("", "m1", "INBOX", 10, 5, 1)
        self.assertEqual(
            (outcome.failure, outcome.note, outcome.alreadyPresent, outcome.lineEndingsConverted),
            (None, None, False, False),
        )
        self.assertTrue(outcome.appended)

    def test_appended(self) -> None:
        """
        L{MessageOutcome.appended} is whether the message is in the
        destination: true for one already present or carrying a note, false
        for a failure.
        """
        self.assertTrue(present("INBOX", "1").appended)
        self.assertTrue(noted("INBOX", "1").appended)
        self.assertFalse(failed("INBOX", "1").appended)


class SQLiteStateStoreTests(SynchronousTestCase):
    """
    What only L{SQLiteStateStore} does: persist to its file, version its
    schema, batch its writes, and report files it cannot use.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = self.mktemp()

    def openStore(self, path: str | None = None, busyTimeout: float = 1.0) -> SQLiteStateStore:
        """
        Open a store on C{path} (by default L{path}), closed when the test
        ends.
        """
        store = SQLiteStateStore(
            self.path if path is None else path, seconds=self.clock.seconds, busyTimeout=busyTimeout
        )
        self.addCleanup(store.close)
        return store

    def inspect(self) -> sqlite3.Connection:
        """
        A separate connection to the database file, to look at it as
        another process would.
        """
        connection = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(connection.close)
        return connection

    def test_persists(self) -> None:
        """
        Outcomes recorded before L{SQLiteStateStore.close} are there after
        the file is opened again.
        """
        store = self.openStore()
        self.successResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1", uid=3), failed("INBOX", "2")])
        )
        store.close()
        reopened = self.openStore()
        self.assertEqual(self.successResultOf(reopened.appendedKeys("job", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(reopened.failures("job")), [failed("INBOX", "2")])

    def test_checkpoint(self) -> None:
        """
        L{SQLiteStateStore.checkpoint} copies the write-ahead log into the
        database file: the file alone, without its log, then holds what
        was recorded.  A closed store, or one with a transaction open,
        checkpoints nothing, and the call still fires with L{None}.
        """
        store = self.openStore()
        # The schema, written at the open, into the file.
        self.successResultOf(store.checkpoint())
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=3)]))

        def alone() -> set[str]:
            # A copy of the database file without its -wal file.
            copy = self.mktemp()
            with open(self.path, "rb") as source, open(copy, "wb") as target:
                target.write(source.read())
            connection = sqlite3.connect(copy)
            try:
                return {key for (key,) in connection.execute("SELECT message_key FROM messages")}
            finally:
                connection.close()

        self.assertEqual(alone(), set())
        self.assertIsNone(self.successResultOf(store.checkpoint()))
        self.assertEqual(alone(), {"1"})
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "2", uid=4)]))
        store._open().execute("BEGIN")
        self.assertIsNone(self.successResultOf(store.checkpoint()))
        self.assertEqual(alone(), {"1"})
        store._open().execute("ROLLBACK")
        store.close()
        self.assertIsNone(self.successResultOf(store.checkpoint()))

    def test_schema(self) -> None:
        """
        A new file gets the current schema version and WAL journal mode.
        """
        self.openStore()
        connection = self.inspect()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(connection.execute("PRAGMA journal_mode").fetchone(), ("wal",))

    def test_updatedAtFromClock(self) -> None:
        """
        Each row's C{updated_at} is the injected clock's time when its
        latest outcome was recorded.
        """
        store = self.openStore()
        self.clock.advance(1000)
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "1"), failed("INBOX", "2")])
        )
        self.clock.advance(5)
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "2")]))
        rows = self.inspect().execute(
            "SELECT message_key, updated_at FROM messages ORDER BY message_key"
        )
        self.assertEqual(rows.fetchall(), [("1", 1000.0), ("2", 1005.0)])

    def test_newerSchemaRefused(self) -> None:
        """
        A database whose schema version is newer than this code knows is
        refused with a L{PermanentError} naming the file and the versions,
        and is left as it was.
        """
        self.openStore().close()
        self.inspect().execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertIn(self.path, str(error))
        self.assertIn(f"schema version {SCHEMA_VERSION + 1}", str(error))
        self.assertEqual(
            self.inspect().execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION + 1,)],
        )

    def test_largeBatchOneTransaction(self) -> None:
        """
        A batch of 10,000 outcomes is recorded by one call in one
        transaction: one C{BEGIN}, one C{COMMIT}.
        """
        store = self.openStore()
        statements: list[str] = []
        connection = store._connection
        assert connection is not None
        connection.set_trace_callback(statements.append)
        batch = [appended("INBOX", f"{i:05d}", uid=i + 1) for i in range(9990)]
        batch.extend(failed("Sent", f"{i}") for i in range(10))
        self.successResultOf(store.recordOutcomes("job", batch))
        connection.set_trace_callback(None)
        self.assertEqual(
            [s for s in statements if s.split()[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK")],
            ["BEGIN IMMEDIATE", "COMMIT"],
        )
        self.assertEqual(self.successResultOf(store.summary("job")), (9990, 10))
        self.assertEqual(len(self.successResultOf(store.appendedKeys("job", "INBOX"))), 9990)

    def test_busy(self) -> None:
        """
        While another connection holds the write lock, recording fails with
        L{TransientError} naming the file, and succeeds once the lock is
        released.
        """
        store = self.openStore(busyTimeout=0)
        other = self.inspect()
        other.execute("BEGIN IMMEDIATE")
        failure = self.failureResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1")]), TransientError
        )
        self.assertIn(self.path, str(failure.value))
        other.execute("ROLLBACK")
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})

    def test_missingDirectory(self) -> None:
        """
        A path in a directory that does not exist raises L{PermanentError}
        naming the file.
        """
        path = os.path.join(self.mktemp(), "state.sqlite")
        error = self.assertRaises(PermanentError, SQLiteStateStore, path, self.clock.seconds)
        self.assertIn(path, str(error))

    def test_directory(self) -> None:
        """
        A path that is a directory raises L{PermanentError} naming it.
        """
        os.mkdir(self.path)
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertIn(self.path, str(error))

    def test_notADatabase(self) -> None:
        """
        A file that is not a SQLite database raises L{PermanentError} naming
        it, and is left as it was.
        """
        content = b"jobs:\n  - name: not a database at all, but long enough to have a header\n" * 4
        with open(self.path, "wb") as f:
            f.write(content)
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertIn(self.path, str(error))
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), content)

    def test_folderMarkOneTransaction(self) -> None:
        """
        Recording a folder mark is one upsert in one transaction, stamped
        with the injected clock's time.
        """
        store = self.openStore()
        self.clock.advance(2000)
        statements: list[str] = []
        connection = store._connection
        assert connection is not None
        connection.set_trace_callback(statements.append)
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        connection.set_trace_callback(None)
        self.assertEqual(
            [s.split()[0].upper() for s in statements], ["BEGIN", "INSERT", "COMMIT"]
        )
        rows = self.inspect().execute(
            "SELECT job, folder_key, uidvalidity, uidnext, highestmodseq, messages, updated_at"
            " FROM folders"
        )
        self.assertEqual(
            rows.fetchall(), [("job", "INBOX", 1700000000, 4711, 2**62, 4000, 2000.0)]
        )

    def test_folderMarkBusy(self) -> None:
        """
        While another connection holds the write lock, recording or
        forgetting a folder mark fails with L{TransientError} naming the
        file, and succeeds once the lock is released.
        """
        store = self.openStore(busyTimeout=0)
        other = self.inspect()
        other.execute("BEGIN IMMEDIATE")
        failure = self.failureResultOf(
            store.recordFolderMark("job", "INBOX", MARK), TransientError
        )
        self.assertIn(self.path, str(failure.value))
        self.failureResultOf(store.forgetFolder("job", "INBOX"), TransientError)
        other.execute("ROLLBACK")
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        self.successResultOf(store.forgetFolder("job", "INBOX"))
        self.assertIsNone(self.successResultOf(store.folderMark("job", "INBOX")))

    def writeVersion1(self) -> sqlite3.Connection:
        """
        Write a database file at L{path} as imapmig with schema version 1
        left it (the schema SQL is copied here as it was, not taken from
        the code under test), holding an appended and a failed message.

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
                PRIMARY KEY (job, folder_key, message_key)
            ) WITHOUT ROWID;
            INSERT INTO schema_version (version) VALUES (1);
            INSERT INTO messages VALUES ('job', 'INBOX', '1', 'INBOX', 100, 7, 3, NULL, 10.0);
            INSERT INTO messages VALUES ('job', 'INBOX', '2', 'INBOX', 200, NULL, NULL,
                                         'NO [TOOBIG] too big', 11.0);
            COMMIT;
            """
        )
        return connection

    def test_migrateFromVersion1(self) -> None:
        """
        A version 1 database is upgraded to the current version when
        opened: its rows read back with no note, not already present and no
        line endings converted; it has no folder marks but can record them;
        and its schema is the same as a new database's.
        """
        self.writeVersion1()
        store = self.openStore()
        connection = self.inspect()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {"1": appended("INBOX", "1", uid=3)},
        )
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "2")])
        self.assertEqual(
            self.successResultOf(store.counts("job")), OutcomeCounts(1, 0, 1, 0, 0)
        )
        self.assertEqual(self.successResultOf(store.notes("job")), [])
        self.assertIsNone(self.successResultOf(store.folderMark("job", "INBOX")))
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        self.successResultOf(store.recordOutcomes("job", [present("INBOX", "2", uid=9)]))
        self.assertEqual(self.successResultOf(store.summary("job")), (2, 0))

        freshPath = self.mktemp()
        self.openStore(freshPath)
        fresh = sqlite3.connect(freshPath)
        self.addCleanup(fresh.close)
        for table in ("messages", "folders", "journal"):
            query = f"PRAGMA table_info({table})"
            self.assertEqual(
                connection.execute(query).fetchall(), fresh.execute(query).fetchall()
            )

    def test_migrateFromVersion11(self) -> None:
        """
        A version 11 database (folder marks without fingerprints) reads its
        marks back without any when opened read-only, and left as it is;
        opened to write, it is upgraded and records fingerprints and
        octets.
        """
        first = self.openStore()
        self.successResultOf(first.recordFolderMark("job", "INBOX", MARK))
        first.close()
        connection = self.inspect()
        connection.executescript(_DROP_FINGERPRINTS + "UPDATE schema_version SET version = 11;")
        readOnly = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.folderMark("job", "INBOX")), MARK)
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(11,)]
        )
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        local = attrs.evolve(MARK, fingerprint="cur 1 2 3 new -", octets=5000)
        self.successResultOf(store.recordFolderMark("job", "INBOX", local))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), local)

    def test_migrateFromVersion5(self) -> None:
        """
        A version 5 database (folder marks without deferred UIDs) reads its
        marks back without any when opened read-only, and left as it is;
        opened to write, it is upgraded, its marks read back the same, and
        it records deferred UIDs.
        """
        first = self.openStore()
        self.successResultOf(first.recordFolderMark("job", "INBOX", MARK))
        first.close()
        connection = self.inspect()
        connection.executescript(
            _DROP_NAMES +
            "DROP TABLE job_holds; DROP INDEX messages_not_copied; ALTER TABLE messages DROP COLUMN message_id;"
            " DROP TABLE job_failures; ALTER TABLE folders DROP COLUMN deferred;"
            " UPDATE schema_version SET version = 5;"
        )
        readOnly = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.folderMark("job", "INBOX")), MARK)
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(5,)]
        )
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        deferred = attrs.evolve(MARK, deferred=(12, 15))
        self.successResultOf(store.recordFolderMark("job", "INBOX", deferred))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), deferred)

    def test_migrateFromVersion6(self) -> None:
        """
        A version 6 database (no job failures) records none when opened
        read-only, and is left as it is; opened to write, it is upgraded
        and records job failures.
        """
        self.openStore().close()
        connection = self.inspect()
        connection.executescript(
            _DROP_NAMES +
            "DROP TABLE job_holds; DROP INDEX messages_not_copied; ALTER TABLE messages DROP COLUMN message_id;"
            " DROP TABLE job_failures; UPDATE schema_version SET version = 6;"
        )
        readOnly = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=True)
        self.assertIsNone(self.successResultOf(readOnly.jobFailure("job")))
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(6,)]
        )
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.successResultOf(store.recordJobFailure("job", "login refused"))
        self.assertEqual(self.successResultOf(store.jobFailure("job")), "login refused")

    def test_migrateFromVersion8(self) -> None:
        """
        A version 8 database (no admin's holds) reads none when opened
        read-only, and is left as it is; opened to write, it is upgraded
        with its records kept, and records holds.
        """
        store = self.openStore()
        self.successResultOf(store.recordJobFailure("job", "login refused"))
        store.close()
        connection = self.inspect()
        connection.executescript(
            _DROP_NAMES + "DROP TABLE job_holds; UPDATE schema_version SET version = 8;"
        )
        readOnly = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.jobHolds()), {})
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(8,)]
        )
        self.clock.advance(1700000000)
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.jobFailure("job")), "login refused")
        self.successResultOf(store.recordJobHolds(["job"], PAUSED, "192.0.2.7"))
        self.assertEqual(
            self.successResultOf(store.jobHolds()),
            {"job": JobHold(PAUSED, "192.0.2.7", 1700000000.0)},
        )

    def test_holdsPersist(self) -> None:
        """
        The admin's holds recorded before L{SQLiteStateStore.close} are
        there, with who and when, after the file is opened again; the
        schema refuses a hold that is neither paused nor cancelled.
        """
        self.clock.advance(1000)
        store = self.openStore()
        self.successResultOf(store.recordJobHolds(["a"], PAUSED, "admin"))
        self.clock.advance(5)
        self.successResultOf(store.recordJobHolds(["b"], CANCELLED, None))
        store.close()
        reopened = self.openStore()
        self.assertEqual(
            self.successResultOf(reopened.jobHolds()),
            {"a": JobHold(PAUSED, "admin", 1000.0), "b": JobHold(CANCELLED, None, 1005.0)},
        )
        self.assertRaises(
            sqlite3.IntegrityError,
            self.inspect().execute,
            "INSERT INTO job_holds (job, hold, by, updated_at) VALUES ('c', 'stopped', NULL, 0)",
        )

    def test_migrationAllOrNothing(self) -> None:
        """
        A version 1 database that cannot be upgraded (here: a C{folders}
        table is in the way) is refused with L{PermanentError} naming the
        file, and left at version 1 without any of the new columns.
        """
        connection = self.writeVersion1()
        connection.execute("CREATE TABLE folders (x)")
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertIn(self.path, str(error))
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(1,)]
        )
        columns = [row[1] for row in connection.execute("PRAGMA table_info(messages)")]
        self.assertEqual(
            columns,
            [
                "job",
                "folder_key",
                "message_key",
                "mailbox",
                "size",
                "uidvalidity",
                "uid",
                "failure",
                "updated_at",
            ],
        )


class AppendedStretchesTests(SynchronousTestCase):
    """
    How the SQLite store groups a batch's L{AppendedOutcome}s into
    statements (L{imapmig.state._sqloutcomes._stretches}).
    """

    def test_foldersJoined(self) -> None:
        """
        The stretches of one folder, mailbox and UIDVALIDITY alternating
        with another's (two connections' replies) are joined, in order.
        """
        a = [("A", str(n), "A", 1, 7, n, 0) for n in range(6)]
        b = [("B", str(n), "B", 1, 8, n, 0) for n in range(4)]
        stretches = _stretches(a[:3] + b[:2] + a[3:] + b[2:])
        self.assertEqual(stretches, [(("A", "A", 7), a), (("B", "B", 8), b)])

    def test_repeatedMessageKeepsOrder(self) -> None:
        """
        A message twice in the batch keeps the stretches as they come, so
        its later outcome is written last.
        """
        first = ("A", "x", "A", 1, 7, 1, 0)
        other = ("A", "x", "B", 1, 8, 2, 0)
        last = ("A", "x", "A", 1, 7, 3, 0)
        self.assertEqual(
            _stretches([first, other, last]),
            [(("A", "A", 7), [first]), (("A", "B", 8), [other]), (("A", "A", 7), [last])],
        )
