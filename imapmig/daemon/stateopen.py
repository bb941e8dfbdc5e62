# -*- test-case-name: tests.test_stateopen -*-
"""
The daemon's SQLite state database, opened in a thread while the daemon
imports the rest of itself.

Opening the state database is mostly waiting for the disk: creating a
new one syncs its rollback journal, the directory and the file (to turn it
into WAL mode) and then the write-ahead log and the directory again (the
schema's transaction), six C{fdatasync} calls of 0.2-5 ms each on this
project's test machine, more when other processes write to the same disk;
opening an existing one writes a transaction (the schema check) and
starts a new write-ahead log (two).  Meanwhile the daemon's modules are
imported, which only needs the processor.  L{makeService} starts
L{StateOpening} before importing L{imapmig.daemon.service}, and takes
the store from it after: the two overlap, and the start-up waits for the
longer of the two instead of both (bench/results/startup.md, round 7).
Nothing about the database changes: the same store is opened with the
same statements, the same locks and the same syncs, only in another
thread; the reactor's thread alone uses it once it is open.

The C{sqlite3} module lets other threads run while SQLite works (and
waits for the disk); the thread then needs the interpreter back after
each statement, which by default a busy thread gives up only every 5 ms.
So while the opening runs, the interpreter's switch interval is lowered
(L{SWITCH_INTERVAL}); it is restored when the store is taken, or
discarded if the start fails before taking it (L{StateOpening.discard}).
"""

from __future__ import annotations

import sys
import threading
from typing import Callable

from imapmig.state.sqlite import SQLiteStateStore

SWITCH_INTERVAL = 0.0002
"""
The interpreter's switch interval (seconds, L{sys.setswitchinterval})
while the state database opens in its thread: the longest the thread
waits to run again after each statement or system call.
"""


class StateOpening:
    """
    A L{SQLiteStateStore} being opened in a thread of its own.

    @ivar path: the database file.
    """

    def __init__(self, path: str, seconds: Callable[[], float]) -> None:
        """
        Start opening the database at C{path}.

        @param seconds: the store's clock (L{SQLiteStateStore}), read in
            the thread (for the lock's date) and later in the reactor's.
        """
        self.path = path
        self._store: SQLiteStateStore | None = None
        self._error: BaseException | None = None
        self._interval: float | None = sys.getswitchinterval()
        sys.setswitchinterval(min(self._interval, SWITCH_INTERVAL))
        self._thread = threading.Thread(
            target=self._open, args=(seconds,), name="imapmig state open", daemon=True
        )
        try:
            self._thread.start()
        except BaseException:
            # No thread (none may be started): the interval as it was.
            sys.setswitchinterval(self._interval)
            raise

    def _open(self, seconds: Callable[[], float]) -> None:
        try:
            self._store = SQLiteStateStore(self.path, seconds=seconds, anyThread=True)
        except BaseException as e:
            self._error = e

    def store(self) -> SQLiteStateStore:
        """
        Wait until the database is open, and return its store.

        @raise PermanentError: it could not be opened (what
            L{SQLiteStateStore} raises), raised again here; once.
        """
        try:
            self._thread.join()
        finally:
            # Restored however the wait ends (an interrupt included).
            if self._interval is not None:
                sys.setswitchinterval(self._interval)
                self._interval = None
        error, self._error = self._error, None
        if error is not None:
            raise error
        if self._store is None:
            raise RuntimeError(f"{self.path}: the state database was taken already")
        store, self._store = self._store, None
        return store

    def discard(self) -> None:
        """
        The store is not wanted after all (the start failed before taking
        it, L{imapmig.daemon.tap.makeService}): wait for the opening, restore
        the switch interval, and close the store if it opened, releasing
        its lock; an opening that failed, or a store taken already, is
        left as it is.
        """
        try:
            store = self.store()
        except Exception:
            return
        store.close()


def openInThread(state: object, seconds: Callable[[], float]) -> StateOpening | None:
    """
    Start opening the state database of a configuration whose state is
    C{state} (L{imapmig.config.model.Config.state}), if it is a SQLite
    file; L{None} for a PostgreSQL state, which L{buildService} opens
    itself.
    """
    from imapmig.config.model import SQLiteState

    if not isinstance(state, SQLiteState):
        return None
    return StateOpening(state.path, seconds)
