"""
Tests for L{imapmig.daemon.stateopen}: the daemon's SQLite state database
opened in a thread while the daemon imports the rest of itself.
"""

from __future__ import annotations

import os
import sys

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.model import PostgreSQLState, SQLiteState
from imapmig.daemon import stateopen
from imapmig.errors import PermanentError
from imapmig.state.lock import StateFileLock
from imapmig.state.sqlite import SQLiteStateStore


class StateOpeningTests(SynchronousTestCase):
    """
    L{stateopen.StateOpening} opens the store in a thread; L{store} hands
    it to the calling thread, or raises what the opening raised.
    """

    def setUp(self) -> None:
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        self.path = os.path.join(directory, "state.sqlite")
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        interval = sys.getswitchinterval()
        self.addCleanup(sys.setswitchinterval, interval)

    def test_openedInThread(self) -> None:
        """
        The store is a L{SQLiteStateStore} on the file, created with its
        schema, its lock held, and usable from this thread although
        another opened it.
        """
        store = stateopen.StateOpening(self.path, self.clock.seconds).store()
        self.addCleanup(store.close)
        self.assertIsInstance(store, SQLiteStateStore)
        self.assertRaises(PermanentError, StateFileLock.acquire, self.path, self.clock.seconds)
        self.successResultOf(store.recordJobFailure("job", "refused"))
        self.assertEqual(self.successResultOf(store.jobFailure("job")), "refused")
        store.close()
        # Closed from this thread: the lock is released.
        StateFileLock.acquire(self.path, self.clock.seconds).release()

    def test_switchIntervalWhileOpening(self) -> None:
        """
        While the database opens, the interpreter's switch interval is at
        most L{stateopen.SWITCH_INTERVAL}; taking the store restores it.
        """
        sys.setswitchinterval(0.005)
        opening = stateopen.StateOpening(self.path, self.clock.seconds)
        self.assertLessEqual(sys.getswitchinterval(), stateopen.SWITCH_INTERVAL * 1.01)
        opening.store().close()
        self.assertAlmostEqual(sys.getswitchinterval(), 0.005)

    def test_failureRaisedWhenTaken(self) -> None:
        """
        A database that cannot be opened (its directory does not exist)
        raises L{PermanentError}, naming the file, when the store is
        taken; the switch interval is restored all the same.
        """
        sys.setswitchinterval(0.005)
        missing = os.path.join(self.path, "nowhere", "state.sqlite")
        opening = stateopen.StateOpening(missing, self.clock.seconds)
        error = self.assertRaises(PermanentError, opening.store)
        self.assertIn(missing, str(error))
        self.assertAlmostEqual(sys.getswitchinterval(), 0.005)

    def test_heldByAnother(self) -> None:
        """
        A database another holder has locked is refused as
        L{SQLiteStateStore} refuses it.
        """
        lock = StateFileLock.acquire(self.path, self.clock.seconds)
        self.addCleanup(lock.release)
        opening = stateopen.StateOpening(self.path, self.clock.seconds)
        error = self.assertRaises(PermanentError, opening.store)
        self.assertIn("in use by another imapmig", str(error))

    def test_takenOnce(self) -> None:
        """
        The store is handed out once.
        """
        opening = stateopen.StateOpening(self.path, self.clock.seconds)
        opening.store().close()
        self.assertRaises(RuntimeError, opening.store)

    def test_discard(self) -> None:
        """
        L{stateopen.StateOpening.discard} (a start that fails before taking
        the store) waits for the opening, closes the store, releasing its
        lock, and restores the switch interval; the store is gone.
        """
        sys.setswitchinterval(0.005)
        opening = stateopen.StateOpening(self.path, self.clock.seconds)
        opening.discard()
        self.assertAlmostEqual(sys.getswitchinterval(), 0.005)
        StateFileLock.acquire(self.path, self.clock.seconds).release()
        self.assertRaises(RuntimeError, opening.store)

    def test_discardFailed(self) -> None:
        """
        Discarding an opening that failed, or whose store was taken, does
        nothing more: no error, the taken store left open.
        """
        missing = os.path.join(self.path, "nowhere", "state.sqlite")
        stateopen.StateOpening(missing, self.clock.seconds).discard()
        opening = stateopen.StateOpening(self.path, self.clock.seconds)
        store = opening.store()
        self.addCleanup(store.close)
        opening.discard()
        self.successResultOf(store.recordJobFailure("job", "refused"))

    def test_threadNotStarted(self) -> None:
        """
        A thread that cannot be started raises, with the switch interval
        as it was.
        """
        import threading

        def refuse(thread: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        self.patch(threading.Thread, "start", refuse)
        sys.setswitchinterval(0.005)
        self.assertRaises(RuntimeError, stateopen.StateOpening, self.path, self.clock.seconds)
        self.assertAlmostEqual(sys.getswitchinterval(), 0.005)

    def test_openInThreadSQLite(self) -> None:
        """
        L{stateopen.openInThread} opens a SQLite state's file.
        """
        opening = stateopen.openInThread(SQLiteState(self.path), self.clock.seconds)
        assert opening is not None
        self.assertEqual(opening.path, self.path)
        opening.store().close()

    def test_openInThreadPostgreSQL(self) -> None:
        """
        L{stateopen.openInThread} leaves a PostgreSQL state alone: the
        service opens it itself.
        """
        state = PostgreSQLState.__new__(PostgreSQLState)
        self.assertIsNone(stateopen.openInThread(state, self.clock.seconds))
