# -*- test-case-name: tests.test_state_failures,tests.test_state -*-
"""
What every role of the SQLite state store (L{imapmig.state.sqlite}) shares:
the connection, and the transaction and the read that turn SQLite's
errors into imapmig's (L{imapmig.state._sqldialect.SQLStore}'s means, as
the PostgreSQL store's L{imapmig.state._pgbase} gives them).

Taken out of C{imapmig/state/sqlite.py}, whose store had grown to 837
lines; each role of the store is now a class of its own over this one.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, TypeVar

from twisted.internet.defer import Deferred, fail, succeed

from imapmig.errors import PermanentError, TransientError
from imapmig.state._schema import rollback
from imapmig.state._sqldialect import SQLITE, SQLStore

_T = TypeVar("_T")

# SQLITE_BUSY and SQLITE_LOCKED: another connection holds the write lock,
# which may be gone by the next attempt.
_BUSY_CODES = frozenset({5, 6})

# What a primary result code (the low byte of an extended one) means for
# the admin, for the codes a broken file or disk gives; none of them is
# worth retrying.
_CAUSES = {
    3: "permission denied",  # SQLITE_PERM
    8: "the state database is read-only",  # SQLITE_READONLY
    10: "an I/O error",  # SQLITE_IOERR
    11: "the state database is corrupt",  # SQLITE_CORRUPT
    13: "the disk or the state database is full",  # SQLITE_FULL
    14: "the file cannot be opened",  # SQLITE_CANTOPEN
    26: "the file is not a SQLite database, or is corrupt",  # SQLITE_NOTADB
}


class SQLiteBase(SQLStore):
    """
    The connection to a state database and the means of its roles to read
    and write it (L{SQLStore}'s, in the reactor's thread); the store
    (L{imapmig.state.sqlite.SQLiteStateStore}) opens and closes it.

    @ivar _version: the database's schema version (older only for a
        database opened read-only).
    @ivar _connection: the connection, or L{None} once closed.
    """

    _dialect = SQLITE
    _version: int
    _connection: sqlite3.Connection | None

    def _open(self) -> sqlite3.Connection:
        """
        The connection, unless the store was closed.

        @raise PermanentError: it was.
        """
        if self._connection is None:
            raise PermanentError(f"{self._where}: the state store is closed")
        return self._connection

    def _error(self, action: str, e: sqlite3.Error) -> Exception:
        """
        The imapmig error for C{e}, raised while doing C{action}: a
        L{TransientError} if another connection holds the write lock, a
        L{PermanentError} naming the file and the cause otherwise.
        """
        code = getattr(e, "sqlite_errorcode", None)
        if code is None:
            return PermanentError(f"{self._where}: cannot {action}: {e}")
        if code & 0xFF in _BUSY_CODES:
            return TransientError(f"{self._where}: cannot {action}: {e}")
        cause = _CAUSES.get(code & 0xFF)
        if cause is None:
            return PermanentError(f"{self._where}: cannot {action}: {e}")
        name = getattr(e, "sqlite_errorname", code)
        return PermanentError(f"{self._where}: cannot {action}: {cause} ({name}: {e})")

    def _openError(self, e: sqlite3.Error) -> PermanentError:
        """
        The error for C{e}, raised while opening the database: permanent
        even where a later write would be retried (SQLITE_BUSY: another
        process, not an imapmig that takes the lock, is writing the file),
        since the daemon cannot start without its state.
        """
        error = self._error("open the state database", e)
        if isinstance(error, PermanentError):
            return error
        return PermanentError(f"{error} (another process is writing it)")

    def _transaction(
        self, action: str, write: Callable[[sqlite3.Connection], _T]
    ) -> Deferred[_T]:
        """
        Call C{write} with the connection inside one transaction: all it
        writes is committed, or none of it.

        @param action: what the write does, for the error message.

        @return: a Deferred that fires with what C{write} returns once it
            is committed, or fails with L{TransientError} if another
            connection holds the write lock, or with L{PermanentError} if
            the store is closed or SQLite refuses the write.
        """

        def transaction(connection: sqlite3.Connection) -> _T:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = write(connection)
                connection.execute("COMMIT")
            except BaseException:
                rollback(connection)
                raise
            return result

        return self._reading(action, transaction)

    def _reading(self, action: str, read: Callable[[sqlite3.Connection], _T]) -> Deferred[_T]:
        """
        What C{read} returns, called with the connection; its errors as
        imapmig's.

        @param action: what C{read} does, for the error message.

        @return: a Deferred that fires with what C{read} returns, or fails
            with L{TransientError} if another connection holds the write
            lock, or with L{PermanentError} if the store is closed or
            SQLite refuses the statement.
        """
        try:
            return succeed(read(self._open()))
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error(action, e))
        except (OverflowError, UnicodeEncodeError) as e:
            # A number SQLite's 64-bit INTEGER cannot hold, or text that is
            # not Unicode (a lone surrogate from a surrogateescape'd name).
            return fail(PermanentError(f"{self._where}: cannot {action}: {e}"))

    # In the reactor's thread, no write of the store's comes between the
    # statements of one call.
    _snapshot = _reading

    def _ifOpen(self, value: _T) -> Deferred[_T]:
        """
        C{value}, unless the store was closed: the answer of a call that
        has nothing to ask the database (nothing to record, or a table
        that a database opened read-only is too old to have).
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(value)
