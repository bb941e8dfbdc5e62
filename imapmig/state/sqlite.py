# -*- test-case-name: tests.test_state -*-
"""
The embedded state store: one SQLite file, written one transaction per
batch of outcomes.

The standard library's C{sqlite3} module is called synchronously from the
reactor thread.  That is cheap enough here: in WAL mode with
C{synchronous=NORMAL} a commit does not wait for the disk, and a batch of
thousands of outcomes is one C{executemany} in one transaction.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import PermanentError, TransientError
from imapmig.state import IStateStore, MessageOutcome

SCHEMA_VERSION = 1
"""
The newest schema this code knows; a database with a newer one is refused.
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Each entry upgrades a database from the previous version to its key;
    # version 1 creates the schema in an empty database.
    1: (
        """
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
        ) WITHOUT ROWID
        """,
    ),
}

_UPSERT = """
    INSERT INTO messages (
        job, folder_key, message_key, mailbox, size, uidvalidity, uid,
        failure, updated_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job, folder_key, message_key) DO UPDATE SET
        mailbox = excluded.mailbox,
        size = excluded.size,
        uidvalidity = excluded.uidvalidity,
        uid = excluded.uid,
        failure = excluded.failure,
        updated_at = excluded.updated_at
"""

# SQLITE_BUSY and SQLITE_LOCKED: another connection holds the write lock,
# which may be gone by the next attempt.
_BUSY_CODES = frozenset({5, 6})


@implementer(IStateStore)
class SQLiteStateStore:
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
    ) -> None:
        """
        Open the database at C{path}, creating the file and the schema if
        they do not exist.

        @param path: the database file (or C{":memory:"}).
        @param seconds: the clock (e.g. C{reactor.seconds}) that stamps each
            outcome's C{updated_at}.
        @param busyTimeout: seconds to wait for another connection's write
            lock before giving up with a L{TransientError}.  The wait blocks
            the reactor, so it stays short.

        @raise PermanentError: the file cannot be opened or created, is not a
            SQLite database, or has a schema newer than L{SCHEMA_VERSION}.
        """
        self._path = path
        self._seconds = seconds
        try:
            # isolation_level=None: no implicit transactions; each write
            # below opens and commits its own, explicitly.
            connection = sqlite3.connect(path, timeout=busyTimeout, isolation_level=None)
        except sqlite3.Error as e:
            raise PermanentError(f"{path}: cannot open the state database: {e}") from e
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            _migrate(connection, path)
        except sqlite3.Error as e:
            connection.close()
            raise PermanentError(f"{path}: cannot open the state database: {e}") from e
        except BaseException:
            connection.close()
            raise
        self._connection: sqlite3.Connection | None = connection

    def __repr__(self) -> str:
        return f"<SQLiteStateStore {self._path!r}>"

    def _open(self) -> sqlite3.Connection:
        """
        The connection, unless the store was closed.

        @raise PermanentError: it was.
        """
        if self._connection is None:
            raise PermanentError(f"{self._path}: the state store is closed")
        return self._connection

    def _error(self, action: str, e: sqlite3.Error) -> Exception:
        """
        The imapmig error for C{e}, raised while doing C{action}.
        """
        message = f"{self._path}: cannot {action}: {e}"
        if getattr(e, "sqlite_errorcode", None) in _BUSY_CODES:
            return TransientError(message)
        return PermanentError(message)

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IStateStore.appendedKeys}.
        """
        try:
            rows = self._open().execute(
                "SELECT message_key FROM messages"
                " WHERE job = ? AND folder_key = ? AND failure IS NULL",
                (job, folderKey),
            )
            return succeed({key for (key,) in rows})
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read appended messages", e))

    def recordOutcomes(self, job: str, outcomes: Sequence[MessageOutcome]) -> Deferred[None]:
        """
        See L{IStateStore.recordOutcomes}.  The whole batch is one
        transaction: all of it is recorded, or none of it.
        """
        try:
            connection = self._open()
        except PermanentError as e:
            return fail(e)
        if not outcomes:
            return succeed(None)
        now = self._seconds()
        rows = [
            (
                job,
                outcome.folderKey,
                outcome.messageKey,
                outcome.mailbox,
                outcome.size,
                outcome.uidValidity,
                outcome.uid,
                outcome.failure,
                now,
            )
            for outcome in outcomes
        ]
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(_UPSERT, rows)
                connection.execute("COMMIT")
            except BaseException:
                _rollback(connection)
                raise
        except sqlite3.Error as e:
            return fail(self._error("record outcomes", e))
        except OverflowError as e:
            # A number SQLite's 64-bit INTEGER cannot hold.
            return fail(PermanentError(f"{self._path}: cannot record outcomes: {e}"))
        return succeed(None)

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        try:
            rows = self._open().execute(
                "SELECT folder_key, message_key, mailbox, size, uidvalidity, uid, failure"
                " FROM messages WHERE job = ? AND failure IS NOT NULL"
                " ORDER BY folder_key, message_key",
                (job,),
            )
            return succeed(
                [
                    MessageOutcome(
                        folderKey=folderKey,
                        messageKey=messageKey,
                        mailbox=mailbox,
                        size=size,
                        uidValidity=uidValidity,
                        uid=uid,
                        failure=failure,
                    )
                    for (folderKey, messageKey, mailbox, size, uidValidity, uid, failure) in rows
                ]
            )
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read failures", e))

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as appended and how many as
        failed (each by its latest outcome).

        @return: a Deferred firing with C{(appended, failed)}.
        """
        try:
            ((total, failed),) = self._open().execute(
                "SELECT count(*), count(failure) FROM messages WHERE job = ?",
                (job,),
            )
            return succeed((int(total) - int(failed), int(failed)))
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read the summary", e))

    def close(self) -> None:
        """
        See L{IStateStore.close}.  Closing twice is harmless.
        """
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.close()


def _migrate(connection: sqlite3.Connection, path: str) -> None:
    """
    Bring the schema of the database on C{connection} to L{SCHEMA_VERSION},
    in one transaction.

    @raise PermanentError: the database's schema is newer than this code.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        (hasVersion,) = connection.execute(
            "SELECT count(*) FROM sqlite_master"
            " WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if hasVersion:
            (version,) = connection.execute(
                "SELECT coalesce(max(version), 0) FROM schema_version"
            ).fetchone()
        else:
            connection.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            version = 0
        if version > SCHEMA_VERSION:
            raise PermanentError(
                f"{path}: the state database has schema version {version}, newer"
                f" than this imapmig knows ({SCHEMA_VERSION}); upgrade imapmig"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                connection.execute(statement)
        if version < SCHEMA_VERSION:
            connection.execute("DELETE FROM schema_version")
            connection.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise


def _rollback(connection: sqlite3.Connection) -> None:
    """
    Roll back the transaction open on C{connection}, if SQLite has not
    already done so itself (as it does after some errors).
    """
    if connection.in_transaction:
        connection.execute("ROLLBACK")
