# -*- test-case-name: tests.test_state -*-
"""
The embedded state store: one SQLite file, written one transaction per
batch of outcomes or per folder mark.

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
from imapmig.state import FolderMark, IStateStore, MessageOutcome, OutcomeCounts

SCHEMA_VERSION = 2
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
    # Version 2: what a message's copy lost or changed, whether it was
    # found already in the destination, and each folder's mark for delta
    # passes.
    2: (
        "ALTER TABLE messages ADD COLUMN note TEXT",
        "ALTER TABLE messages ADD COLUMN present INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE messages ADD COLUMN converted INTEGER NOT NULL DEFAULT 0",
        """
        CREATE TABLE folders (
            job TEXT NOT NULL,
            folder_key TEXT NOT NULL,
            uidvalidity INTEGER NOT NULL,
            uidnext INTEGER NOT NULL,
            highestmodseq INTEGER,
            messages INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (job, folder_key)
        ) WITHOUT ROWID
        """,
    ),
}

_UPSERT = """
    INSERT INTO messages (
        job, folder_key, message_key, mailbox, size, uidvalidity, uid,
        failure, note, present, converted, updated_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job, folder_key, message_key) DO UPDATE SET
        mailbox = excluded.mailbox,
        size = excluded.size,
        uidvalidity = excluded.uidvalidity,
        uid = excluded.uid,
        failure = excluded.failure,
        note = excluded.note,
        present = excluded.present,
        converted = excluded.converted,
        updated_at = excluded.updated_at
"""

# The columns of a messages row that make a MessageOutcome, in the order
# _outcome takes them.
_OUTCOME_COLUMNS = (
    "folder_key, message_key, mailbox, size, uidvalidity, uid, failure,"
    " note, present, converted"
)

_OutcomeRow = tuple[str, str, str, int, int | None, int | None, str | None, str | None, int, int]

_UPSERT_MARK = """
    INSERT INTO folders (
        job, folder_key, uidvalidity, uidnext, highestmodseq, messages, updated_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job, folder_key) DO UPDATE SET
        uidvalidity = excluded.uidvalidity,
        uidnext = excluded.uidnext,
        highestmodseq = excluded.highestmodseq,
        messages = excluded.messages,
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
            outcome's and each folder mark's C{updated_at}.
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
        if not outcomes:
            try:
                self._open()
            except PermanentError as e:
                return fail(e)
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
                outcome.note,
                int(bool(outcome.alreadyPresent)),
                int(bool(outcome.lineEndingsConverted)),
                now,
            )
            for outcome in outcomes
        ]
        return self._write("record outcomes", _UPSERT, rows)

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        return self._outcomes(
            "read failures",
            f"SELECT {_OUTCOME_COLUMNS} FROM messages"
            " WHERE job = ? AND failure IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as in the destination and
        how many as failed (each by its latest outcome).

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

    def counts(self, job: str) -> Deferred[OutcomeCounts]:
        """
        See L{IStateStore.counts}.
        """
        try:
            ((copied, present, failed, converted, withNotes),) = self._open().execute(
                # sum() of no rows is NULL, hence the coalesce.
                "SELECT"
                " coalesce(sum(failure IS NULL AND present = 0), 0),"
                " coalesce(sum(failure IS NULL AND present != 0), 0),"
                " count(failure),"
                " coalesce(sum(failure IS NULL AND converted != 0), 0),"
                " coalesce(sum(failure IS NULL AND note IS NOT NULL), 0)"
                " FROM messages WHERE job = ?",
                (job,),
            )
            return succeed(
                OutcomeCounts(
                    copied=int(copied),
                    alreadyPresent=int(present),
                    failed=int(failed),
                    lineEndingsConverted=int(converted),
                    withNotes=int(withNotes),
                )
            )
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read the counts", e))

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.notes}.  Ordered by folder key, then message key.
        """
        return self._outcomes(
            "read notes",
            f"SELECT {_OUTCOME_COLUMNS} FROM messages"
            " WHERE job = ? AND failure IS NULL AND note IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )

    def destinationMap(self, job: str, folderKey: str) -> Deferred[dict[str, MessageOutcome]]:
        """
        See L{IStateStore.destinationMap}.
        """
        d = self._outcomes(
            "read the destination map",
            f"SELECT {_OUTCOME_COLUMNS} FROM messages"
            " WHERE job = ? AND folder_key = ? AND failure IS NULL",
            (job, folderKey),
        )
        return d.addCallback(lambda outcomes: {o.messageKey: o for o in outcomes})

    def folderMark(self, job: str, folderKey: str) -> Deferred[FolderMark | None]:
        """
        See L{IStateStore.folderMark}.
        """
        try:
            row = (
                self._open()
                .execute(
                    "SELECT uidvalidity, uidnext, highestmodseq, messages FROM folders"
                    " WHERE job = ? AND folder_key = ?",
                    (job, folderKey),
                )
                .fetchone()
            )
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read the folder mark", e))
        if row is None:
            return succeed(None)
        uidValidity, uidNext, highestModSeq, messages = row
        return succeed(
            FolderMark(
                uidValidity=uidValidity,
                uidNext=uidNext,
                highestModSeq=highestModSeq,
                messages=messages,
            )
        )

    def recordFolderMark(self, job: str, folderKey: str, mark: FolderMark) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderMark}.
        """
        row = (
            job,
            folderKey,
            mark.uidValidity,
            mark.uidNext,
            mark.highestModSeq,
            mark.messages,
            self._seconds(),
        )
        return self._write("record the folder mark", _UPSERT_MARK, [row])

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IStateStore.forgetFolder}.
        """
        return self._write(
            "forget the folder",
            "DELETE FROM folders WHERE job = ? AND folder_key = ?",
            [(job, folderKey)],
        )

    def _write(
        self, action: str, statement: str, rows: Sequence[tuple[object, ...]]
    ) -> Deferred[None]:
        """
        Execute C{statement} once for each of C{rows}, all in one
        transaction: every row is written, or none.

        @param action: what the write does, for the error message.

        @return: a Deferred that fails with L{TransientError} if another
            connection holds the write lock, or with L{PermanentError} if
            the store is closed or SQLite refuses the rows.
        """
        try:
            connection = self._open()
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(statement, rows)
                connection.execute("COMMIT")
            except BaseException:
                _rollback(connection)
                raise
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error(action, e))
        except (OverflowError, UnicodeEncodeError) as e:
            # A number SQLite's 64-bit INTEGER cannot hold, or text that is
            # not Unicode (a lone surrogate from a surrogateescape'd name).
            return fail(PermanentError(f"{self._path}: cannot {action}: {e}"))
        return succeed(None)

    def _outcomes(
        self, action: str, query: str, parameters: tuple[str, ...]
    ) -> Deferred[list[MessageOutcome]]:
        """
        The outcomes that C{query}, selecting L{_OUTCOME_COLUMNS}, finds.

        @param action: what the query reads, for the error message.
        """
        try:
            rows = self._open().execute(query, parameters)
            return succeed([_outcome(row) for row in rows])
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error(action, e))

    def close(self) -> None:
        """
        See L{IStateStore.close}.  Closing twice is harmless.
        """
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.close()


def _outcome(row: _OutcomeRow) -> MessageOutcome:
    """
    The L{MessageOutcome} of a row of L{_OUTCOME_COLUMNS}.
    """
    folderKey, messageKey, mailbox, size, uidValidity, uid, failure, note, present, converted = (
        row
    )
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=mailbox,
        size=size,
        uidValidity=uidValidity,
        uid=uid,
        failure=failure,
        note=note,
        alreadyPresent=bool(present),
        lineEndingsConverted=bool(converted),
    )


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
