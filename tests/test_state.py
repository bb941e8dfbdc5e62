# -*- test-case-name: tests.test_state -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state.sqlite} and L{imapmig.state.memory}: one set of
behaviour tests held against both, then what only the SQLite file does.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError, TransientError
from imapmig.state import IStateStore, MessageOutcome
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object


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


class StateStoreBehaviourMixin(_MixinBase):
    """
    The behaviour every state store shares.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> SQLiteStateStore | MemoryStateStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_interface(self) -> None:
        """
        The store provides L{IStateStore}.
        """
        self.assertTrue(verifyObject(IStateStore, self.makeStore()))

    def test_empty(self) -> None:
        """
        A new store knows of no appended and no failed messages.
        """
        store = self.makeStore()
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(self.successResultOf(store.failures("job")), [])
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))

    def test_emptyBatch(self) -> None:
        """
        Recording no outcomes succeeds and records nothing.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.recordOutcomes("job", [])))
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))

    def test_appendedKeys(self) -> None:
        """
        L{IStateStore.appendedKeys} returns the keys of the folder's appended
        messages, and not the failed ones.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [appended("INBOX", "1", uid=1), appended("INBOX", "2"), failed("INBOX", "3")],
            )
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "2"})

    def test_appendedKeysPerFolderAndJob(self) -> None:
        """
        Outcomes are kept apart by job and by folder: the same message key
        in another folder or another job is another message.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("a", [appended("INBOX", "1"), appended("Sent", "2")])
        )
        self.successResultOf(
            store.recordOutcomes("b", [appended("INBOX", "3"), failed("Sent", "2")])
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("a", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.appendedKeys("a", "Sent")), {"2"})
        self.assertEqual(self.successResultOf(store.appendedKeys("b", "INBOX")), {"3"})
        self.assertEqual(self.successResultOf(store.appendedKeys("b", "Sent")), set())
        self.assertEqual(self.successResultOf(store.appendedKeys("c", "INBOX")), set())
        self.assertEqual(self.successResultOf(store.failures("a")), [])
        self.assertEqual(self.successResultOf(store.failures("b")), [failed("Sent", "2")])

    def test_failuresOrdered(self) -> None:
        """
        L{IStateStore.failures} returns the failed outcomes as recorded,
        ordered by folder key and then message key, whatever the order they
        were recorded in.
        """
        store = self.makeStore()
        outcomes = [
            failed("Sent", "b", "NO [OVERQUOTA] full"),
            failed("INBOX", "z"),
            appended("INBOX", "m"),
            failed("INBOX", "a"),
            failed("Archive", "q", "unreadable: permission denied"),
        ]
        self.successResultOf(store.recordOutcomes("job", outcomes[:2]))
        self.successResultOf(store.recordOutcomes("job", outcomes[2:]))
        self.assertEqual(
            self.successResultOf(store.failures("job")),
            [outcomes[4], outcomes[3], outcomes[1], outcomes[0]],
        )

    def test_fieldsRoundTrip(self) -> None:
        """
        Every field of an outcome, including non-ASCII text and missing
        UIDs, comes back as recorded.
        """
        store = self.makeStore()
        outcome = MessageOutcome(
            folderKey="Gesendete Objekte/\u00dcbersicht",
            messageKey="1700000000.M1P2.h\u00f6st,S=12:2,S",
            mailbox="\u041e\u0442\u043f\u0440\u0430\u0432\u043b\u0435\u043d\u043d\u044b\u0435",
            size=2**40,
            uidValidity=None,
            uid=None,
            failure="NO [LIMIT] message too large \u2014 35 MB",
        )
        self.successResultOf(store.recordOutcomes("j\u00f6b", [outcome]))
        self.assertEqual(self.successResultOf(store.failures("j\u00f6b")), [outcome])

    def test_laterOutcomeReplacesFailure(self) -> None:
        """
        A message that failed and is later recorded as appended counts as
        appended, no longer as failed.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1")]))
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=5)]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.failures("job")), [])
        self.assertEqual(self.successResultOf(store.summary("job")), (1, 0))

    def test_laterOutcomeReplacesAppended(self) -> None:
        """
        A later failure replaces an earlier success for the same message.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]))
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1", "gone")]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(
            self.successResultOf(store.failures("job")), [failed("INBOX", "1", "gone")]
        )

    def test_lastInBatchWins(self) -> None:
        """
        When one batch holds two outcomes for the same message, the later
        one is recorded.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "1"), appended("INBOX", "1", uid=9)])
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.failures("job")), [])

    def test_summary(self) -> None:
        """
        L{summary} counts a job's appended and failed messages by their
        latest outcome.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1"),
                    appended("Sent", "1"),
                    failed("INBOX", "2"),
                    failed("INBOX", "3"),
                ],
            )
        )
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "3")]))
        self.successResultOf(store.recordOutcomes("other", [failed("INBOX", "1")]))
        self.assertEqual(self.successResultOf(store.summary("job")), (3, 1))
        self.assertEqual(self.successResultOf(store.summary("other")), (0, 1))

    def test_batchAllOrNothing(self) -> None:
        """
        A batch that cannot be recorded whole (here a UID beyond a 64-bit
        integer) fails with L{PermanentError} and records none of its
        outcomes.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1")]))
        batch = [appended("INBOX", "1"), appended("INBOX", "2"), appended("INBOX", "3", uid=2**64)]
        self.failureResultOf(store.recordOutcomes("job", batch), PermanentError)
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "1")])
        self.successResultOf(store.recordOutcomes("job", batch[:2]))
        self.assertEqual(self.successResultOf(store.summary("job")), (2, 0))

    def test_closed(self) -> None:
        """
        After L{IStateStore.close}, every call fails with L{PermanentError};
        closing again is harmless.
        """
        store = self.makeStore()
        store.close()
        store.close()
        self.failureResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]), PermanentError)
        self.failureResultOf(store.appendedKeys("job", "INBOX"), PermanentError)
        self.failureResultOf(store.failures("job"), PermanentError)
        self.failureResultOf(store.summary("job"), PermanentError)


class MemoryStateStoreTests(StateStoreBehaviourMixin, SynchronousTestCase):
    """
    L{MemoryStateStore} behaves as a state store.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteStateStoreBehaviourTests(StateStoreBehaviourMixin, SynchronousTestCase):
    """
    L{SQLiteStateStore} behaves as a state store.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store


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
