# -*- test-case-name: tests.test_state_timeline -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for each job's timeline in the SQLite file (its behaviour, which
every store shares, is L{tests.statecontract.JobRecordsContract}): what
only the SQLite file does (keep it, bound it on disk, write it without waiting for the disk,
upgrade a version 10 database to hold it).
"""

from __future__ import annotations

import sqlite3

from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state import (
    TIMELINE_FIRST,
    TIMELINE_LATEST,
    Transition,
    transitionRecorder,
)
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_TIMELINES

PAUSED = Transition(1700000100.5, "running", "paused", "paused by the admin", "192.0.2.7")
RESUMED = Transition(1700000200.25, "paused", "queued", "resumed by the admin", "192.0.2.7")


def numbered(n: int) -> Transition:
    """
    The C{n}th transition of a job that backs off and retries, again and
    again: each a second after the one before, its cause naming C{n}.
    """
    source, target = ("running", "backing_off") if n % 2 else ("backing_off", "running")
    return Transition(1700000000.0 + n, source, target, f"attempt {n}")


class SQLiteTimelineTests(SynchronousTestCase):
    """
    L{SQLiteStateStore} keeps timelines in its file: across a reopening,
    bounded on disk, one transaction each that does not wait for the
    disk; and upgrades a version 10 database to hold them.
    """

    def setUp(self) -> None:
        self.path = self.mktemp()

    def openStore(self) -> SQLiteStateStore:
        store = SQLiteStateStore(self.path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store

    def inspect(self) -> sqlite3.Connection:
        """
        A separate connection to the file, as another process would look.
        """
        connection = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(connection.close)
        return connection

    def test_survivesReopening(self) -> None:
        """
        A new store object on the same file (a restarted daemon, or
        C{imapmig report} reading it read-only) reads the timeline the
        old one recorded, and adds to it.
        """
        first = self.openStore()
        self.successResultOf(first.recordTransition("job", PAUSED))
        first.close()
        readOnly = SQLiteStateStore(self.path, seconds=Clock().seconds, readOnly=True)
        self.addCleanup(readOnly.close)
        self.assertEqual(self.successResultOf(readOnly.timeline("job")), [PAUSED])
        second = self.openStore()
        self.successResultOf(second.recordTransition("job", RESUMED))
        self.assertEqual(self.successResultOf(second.timeline("job")), [PAUSED, RESUMED])

    def test_boundedOnDisk(self) -> None:
        """
        The file holds no more rows of a job's timeline than it keeps: the
        transitions dropped are deleted, not hidden.
        """
        store = self.openStore()
        for n in range(1, 2 * (TIMELINE_FIRST + TIMELINE_LATEST) + 1):
            self.successResultOf(store.recordTransition("job", numbered(n)))
        ((rows,),) = self.inspect().execute(
            "SELECT count(*) FROM job_transitions WHERE job = 'job'"
        ).fetchall()
        self.assertEqual(rows, TIMELINE_FIRST + TIMELINE_LATEST)

    def test_oneTransactionNoWaitForDisk(self) -> None:
        """
        A transition is recorded in one transaction, as a batch of
        outcomes is, on a connection in WAL mode with C{synchronous=NORMAL}
        (a commit that does not wait for the disk): no fsync per
        transition.  At the bound, the insert and the delete share it.
        """
        store = self.openStore()
        connection = store._connection
        assert connection is not None
        self.assertEqual(connection.execute("PRAGMA journal_mode").fetchone(), ("wal",))
        # 1: NORMAL (2 would be FULL, an fsync at each commit).
        self.assertEqual(connection.execute("PRAGMA synchronous").fetchone(), (1,))
        for n in range(1, TIMELINE_FIRST + TIMELINE_LATEST + 1):
            self.successResultOf(store.recordTransition("job", numbered(n)))
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        self.successResultOf(store.recordTransition("job", PAUSED))
        connection.set_trace_callback(None)
        self.assertEqual(
            [s.split()[0].upper() for s in statements],
            ["BEGIN", "SELECT", "INSERT", "DELETE", "COMMIT"],
        )

    def test_migrateFromVersion10(self) -> None:
        """
        A version 10 database (no timelines) reads an empty timeline when
        opened read-only, and is left as it is; opened to write, it is
        upgraded with its records kept, and records and reads timelines.
        """
        store = self.openStore()
        self.successResultOf(store.recordJobFailure("job", "login refused"))
        store.close()
        connection = self.inspect()
        connection.executescript(_DROP_TIMELINES + "UPDATE schema_version SET version = 10;")
        readOnly = SQLiteStateStore(self.path, seconds=Clock().seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.timeline("job")), [])
        self.assertEqual(self.successResultOf(readOnly.jobFailure("job")), "login refused")
        readOnly.close()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(10,)]
        )
        store = self.openStore()
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(SCHEMA_VERSION, 12)
        self.assertEqual(self.successResultOf(store.jobFailure("job")), "login refused")
        self.successResultOf(store.recordTransition("job", PAUSED))
        self.assertEqual(self.successResultOf(store.timeline("job")), [PAUSED])


class TransitionRecorderTests(SynchronousTestCase):
    """
    L{transitionRecorder}: what a job's machine calls with each transition.
    """

    def test_records(self) -> None:
        """
        Each transition it is called with is recorded in the store's
        timeline of the job, and nothing is logged.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        record = transitionRecorder(store)
        with capturedLogs() as events:
            record("job", PAUSED)
            record("job", RESUMED)
        self.assertEqual(self.successResultOf(store.timeline("job")), [PAUSED, RESUMED])
        self.assertEqual(list(events), [])

    def test_storeFailureLogged(self) -> None:
        """
        A store that cannot record (here: closed, as at shutdown) is logged
        as an error naming the job and the change, and the failure goes no
        further (no unhandled error, no exception to the machine).
        """
        store = MemoryStateStore()
        store.close()
        with capturedLogs() as events:
            transitionRecorder(store)("job", PAUSED)
        [event] = events
        self.assertEqual(
            (event["log_level"], event["job"], event["source"], event["target"]),
            (LogLevel.error, "job", "running", "paused"),
        )
        self.assertIn("closed", event["why"])

