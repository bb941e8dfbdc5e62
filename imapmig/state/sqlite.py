# -*- test-case-name: tests.test_state,tests.test_state_lock,tests.test_state_contract -*-
"""
The embedded state store: one SQLite file, written one transaction per
batch of outcomes, per journal entry or per folder mark.

The standard library's C{sqlite3} module is called synchronously from the
reactor thread.  That is cheap enough here: in WAL mode with
C{synchronous=NORMAL} a commit does not wait for the disk, and a batch of
thousands of outcomes is one C{executemany} in one transaction.

Durability: a committed transaction is in the write-ahead log, in the
operating system's cache, before the call returns, so it survives the
process being killed (SIGKILL, a crash); it may not survive a power loss
or a kernel crash before the next checkpoint, which then rolls the database
back to an earlier, consistent state.

The file is private: created mode 0600 whatever the umask, before SQLite
opens it (by L{StateFileLock}), so that its C{-wal}, C{-shm} and
C{-journal} files, which SQLite creates with the database's mode, are
private too.  An existing database that group or others may read is left
as it is (an admin may have opened it to a reporting group on purpose)
with a warning naming it and its mode.

One daemon owns the file: it holds L{StateFileLock} on the file itself
from open to close.  Readers (C{imapmig report}, C{imapmig verify}) open it
C{readOnly}, without the lock, while the daemon writes.

The store's roles are classes of their own, one module each
(L{imapmig.state._sqloutcomes}, L{imapmig.state._sqlreports},
L{imapmig.state._sqlrecords}) over L{imapmig.state._sqlbase}; this module
opens and closes the file and joins them.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from typing import Callable
from urllib.parse import quote

from twisted.logger import Logger
from zope.interface import implementer

from imapmig.state import IStateStore
from imapmig.state._schema import SCHEMA_VERSION, checkIntegrity, migrate, readVersion
from imapmig.state._sqloutcomes import SQLiteOutcomeJournal
from imapmig.state._sqlrecords import BudgetRecords, SQLiteFolderMarks, SQLiteJobRecords
from imapmig.state._sqlreports import ReportQueries
from imapmig.state.lock import FileKey, StateFileLock, connectionClosed, connectionOpened, fileKey

__all__ = ["SCHEMA_VERSION", "SQLiteStateStore", "warnIfLoose"]

_log = Logger()


def warnIfLoose(path: str, mode: int) -> None:
    """
    Warn if the existing database C{path}, of C{mode}, may be read by
    group or others.

    @param path: the database file.
    @param mode: its mode.
    """
    if mode & 0o077:
        _log.warn(
            "State database {path} may be read by group or others (mode {mode});"
            " it names every account, folder and message copied: run chmod 600"
            " {path} (and its -wal and -shm files) unless that is intended",
            path=path,
            mode=f"{stat.S_IMODE(mode):04o}",
        )


@implementer(IStateStore)
class SQLiteStateStore(
    SQLiteOutcomeJournal,
    SQLiteFolderMarks,
    SQLiteJobRecords,
    BudgetRecords,
    ReportQueries,
):
    """
    An L{IStateStore} in a SQLite database file.

    The schema carries its version in a C{schema_version} table so that a
    later release can upgrade it; a database written by a newer release is
    refused rather than misread.
    """

    def __init__(
        self,
        path: str,
        seconds: Callable[[], float],
        busyTimeout: float = 1.0,
        readOnly: bool = False,
        anyThread: bool = False,
    ) -> None:
        """
        Open the database at C{path}, creating the file and the schema if
        they do not exist, and take its L{StateFileLock}.

        @param path: the database file (or C{":memory:"}, which takes no
            lock); a new one is created mode 0600 (by L{StateFileLock}).
        @param seconds: the clock (e.g. C{reactor.seconds}) that stamps each
            outcome's, journal entry's and folder mark's time, and the lock.
        @param busyTimeout: seconds to wait for another connection's write
            lock before giving up with a L{TransientError}.  The wait blocks
            the reactor, so it stays short.
        @param readOnly: open an existing file to read it only, beside the
            daemon that owns it: no lock, no upgrade, no write.
        @param anyThread: the connection may be used from a thread other
            than the one opening it (C{check_same_thread=False}): the
            daemon opens its store in a thread of its own while it imports
            the rest of itself (L{imapmig.daemon.stateopen}), and then uses
            it from the reactor's thread alone.  Never from two at once.

        @raise PermanentError: another daemon holds the lock; the file
            cannot be opened, created or written (read-only, full); it is
            not a SQLite database; or its schema is newer than
            L{SCHEMA_VERSION}.  The message names the file and the cause.
        """
        self._path = self._where = path
        self._seconds = seconds
        self._lock: StateFileLock | None = None
        self._version = SCHEMA_VERSION
        self._lastEntryId = 0
        # The file this process's connection is open on (see
        # imapmig.state.lock: no descriptor of it may be closed meanwhile).
        self._key: FileKey | None = None
        if path != ":memory:" and not readOnly:
            self._lock = StateFileLock.acquire(path, seconds)
            self._key = self._lock.key
            warnIfLoose(path, self._lock.mode)
        elif path != ":memory:":
            self._key = fileKey(path)
        try:
            self._connection: sqlite3.Connection | None = self._connect(
                busyTimeout, readOnly, anyThread
            )
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        if self._key is not None:
            connectionOpened(self._key)

    def _connect(self, busyTimeout: float, readOnly: bool, anyThread: bool) -> sqlite3.Connection:
        """
        Open the connection; then, unless C{readOnly}, bring its schema up
        to date and check that it can be written.

        @raise PermanentError: see L{__init__}.
        """
        try:
            # isolation_level=None: no implicit transactions; each write
            # below opens and commits its own, explicitly.
            if readOnly:
                connection = sqlite3.connect(
                    "file:" + quote(os.path.abspath(self._path)) + "?mode=ro",
                    timeout=busyTimeout,
                    isolation_level=None,
                    uri=True,
                )
            else:
                connection = sqlite3.connect(
                    self._path,
                    timeout=busyTimeout,
                    isolation_level=None,
                    check_same_thread=not anyThread,
                )
        except sqlite3.Error as e:
            raise self._openError(e) from None
        try:
            if readOnly:
                self._version = readVersion(connection, self._path)
            else:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                checkIntegrity(connection, self._path)
                migrate(connection, self._path)
                self._version = SCHEMA_VERSION
                (self._lastEntryId,) = connection.execute(
                    "SELECT coalesce(max(entry_id), 0) FROM journal"
                ).fetchone()
        except sqlite3.Error as e:
            connection.close()
            raise self._openError(e) from None
        except BaseException:
            connection.close()
            raise
        return connection

    def __repr__(self) -> str:
        return f"<SQLiteStateStore {self._path!r}>"

    def forClaim(self, job: str, owner: str, generation: int) -> IStateStore:
        """
        See L{IStateStore.forClaim}: this store itself (the in-memory one
        too), whose file lock lets one daemon write it.
        """
        return self

    def close(self) -> None:
        """
        See L{IStateStore.close}; releases the lock too.  Closing twice is
        harmless.
        """
        connection, self._connection = self._connection, None
        try:
            if connection is not None:
                connection.close()
        except sqlite3.Error:
            # Every transaction is committed or rolled back already; there
            # is nothing left to lose, and the lock must still go.
            pass
        finally:
            if connection is not None and self._key is not None:
                connectionClosed(self._key)
            if self._lock is not None:
                self._lock.release()
