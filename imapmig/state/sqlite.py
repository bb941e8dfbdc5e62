# -*- test-case-name: tests.test_state -*-
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
"""

from __future__ import annotations

import os
import sqlite3
import stat
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import quote

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from imapmig.errors import PermanentError, TransientError
from imapmig.state import (
    AppendedOutcome,
    FAILURES_COUNT_LIMIT,
    FAILURES_SEARCH_ROWS,
    FailuresPage,
    FolderFallback,
    HOLDS,
    FolderMark,
    IStateStore,
    JobActivity,
    JobHold,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
    OutcomeCounts,
    Transition,
    asciiLower,
)
from imapmig.state._packing import packMessages, unpackMessages
from imapmig.state._schema import SCHEMA_VERSION, checkIntegrity, migrate, readVersion, rollback
from imapmig.state._timeline import READ_TIMELINE, transitionOf, writeTransition
from imapmig.state.lock import FileKey, StateFileLock, connectionClosed, connectionOpened, fileKey

_T = TypeVar("_T")

__all__ = ["SCHEMA_VERSION", "SQLiteStateStore"]

_UPSERT_TEMPLATE = """
    INSERT INTO messages (
        job, folder_key, message_key, mailbox, size, uidvalidity, uid,
        failure, note, present, converted, updated_at, message_id,
        message_date, message_from, message_subject
    ) VALUES ({values})
    ON CONFLICT (job, folder_key, message_key) DO UPDATE SET
        mailbox = excluded.mailbox,
        size = excluded.size,
        uidvalidity = excluded.uidvalidity,
        uid = excluded.uid,
        failure = excluded.failure,
        note = excluded.note,
        present = excluded.present,
        converted = excluded.converted,
        updated_at = excluded.updated_at,
        message_id = excluded.message_id,
        message_date = excluded.message_date,
        message_from = excluded.message_from,
        message_subject = excluded.message_subject
"""
_UPSERT = _UPSERT_TEMPLATE.format(values="?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?")
# For an outcome with no failure, no note and no names.
_UPSERT_PLAIN = _UPSERT_TEMPLATE.format(
    values="?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, NULL, NULL, NULL, NULL"
)
# For AppendedOutcomes (no failure, no note, not present): the upsert of a
# run of them, in rows of at most _APPENDED_ROWS, one statement each.
_UPSERT_APPENDED = "appended"
_APPENDED_ROWS = 64
_appendedStatements: dict[int, str] = {}


def _upsertAppended(rows: int) -> str:
    """
    The upsert of C{rows} L{AppendedOutcome}s in one statement: parameter
    1 is the job, 2 the time, then each outcome's seven fields in turn (so
    the job and the time are bound once, not once per row).  SQLite
    inserts the rows in order: a later row of the same message wins.
    """
    statement = _appendedStatements.get(rows)
    if statement is None:
        values = ", ".join(
            "(?1, {}, NULL, NULL, 0, ?{}, ?2, NULL, NULL, NULL, NULL)".format(
                ", ".join(f"?{3 + 7 * row + column}" for column in range(6)), 9 + 7 * row
            )
            for row in range(rows)
        )
        statement = _appendedStatements[rows] = _UPSERT_TEMPLATE.replace(
            "({values})", values
        )
    return statement

# The columns of a messages row that make a MessageOutcome, in the order
# _outcome takes them; for a database older than version 10 opened
# read-only, which has no names (nor, before version 8, Message-IDs),
# _OUTCOME_COLUMNS_OF its version.
_OUTCOME_COLUMNS = (
    "folder_key, message_key, mailbox, size, uidvalidity, uid, failure,"
    " note, present, converted, message_id, message_date, message_from, message_subject"
)
_UNNAMED_COLUMNS = (
    _OUTCOME_COLUMNS.replace("message_date", "NULL")
    .replace("message_from", "NULL")
    .replace("message_subject", "NULL")
)
_OUTCOME_COLUMNS_OF = {
    8: _UNNAMED_COLUMNS,
    7: _UNNAMED_COLUMNS.replace("message_id", "NULL"),
}

_OutcomeRow = tuple[
    str, str, str, int, int | None, int | None, str | None, str | None, int, int,
    str | None, str | None, str | None, str | None,
]  # fmt: skip

_NAME = """
    UPDATE messages SET message_id = ?, message_date = ?, message_from = ?, message_subject = ?
    WHERE job = ? AND folder_key = ? AND message_key = ? AND failure IS NOT NULL
"""

# What the audit manifest and the failure pages read: messages not copied
# by imapmig (failed or already present).  Written as the partial index
# messages_not_copied's condition, so that SQLite reads that index.
_NOT_COPIED = "(failure IS NOT NULL OR present != 0)"

# The filter of a failure page: the needle (ASCII lower case) in any of
# these columns.
_CONTAINS = (
    "(instr(lower(folder_key), ?1) OR instr(lower(mailbox), ?1)"
    " OR instr(lower(message_key), ?1) OR instr(lower(coalesce(message_id, '')), ?1)"
    " OR instr(lower(failure), ?1) OR instr(lower(coalesce(message_from, '')), ?1)"
    " OR instr(lower(coalesce(message_subject, '')), ?1))"
)

_UPSERT_MARK = """
    INSERT INTO folders (
        job, folder_key, uidvalidity, uidnext, highestmodseq, messages, deferred, updated_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job, folder_key) DO UPDATE SET
        uidvalidity = excluded.uidvalidity,
        uidnext = excluded.uidnext,
        highestmodseq = excluded.highestmodseq,
        messages = excluded.messages,
        deferred = excluded.deferred,
        updated_at = excluded.updated_at
"""

_INSERT_ENTRY = """
    INSERT INTO journal (entry_id, job, mailbox, uidvalidity, uid_floor, messages, written_at)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""

_SETTLE = "DELETE FROM journal WHERE entry_id = ? AND job = ?"

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
        readOnly: bool = False,
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

        @raise PermanentError: another daemon holds the lock; the file
            cannot be opened, created or written (read-only, full); it is
            not a SQLite database; or its schema is newer than
            L{SCHEMA_VERSION}.  The message names the file and the cause.
        """
        self._path = path
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
            self._connection: sqlite3.Connection | None = self._connect(busyTimeout, readOnly)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        if self._key is not None:
            connectionOpened(self._key)

    def _connect(self, busyTimeout: float, readOnly: bool) -> sqlite3.Connection:
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
                    self._path, timeout=busyTimeout, isolation_level=None
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
        The imapmig error for C{e}, raised while doing C{action}: a
        L{TransientError} if another connection holds the write lock, a
        L{PermanentError} naming the file and the cause otherwise.
        """
        code = getattr(e, "sqlite_errorcode", None)
        if code is None:
            return PermanentError(f"{self._path}: cannot {action}: {e}")
        if code & 0xFF in _BUSY_CODES:
            return TransientError(f"{self._path}: cannot {action}: {e}")
        cause = _CAUSES.get(code & 0xFF)
        if cause is None:
            return PermanentError(f"{self._path}: cannot {action}: {e}")
        name = getattr(e, "sqlite_errorname", code)
        return PermanentError(f"{self._path}: cannot {action}: {cause} ({name}: {e})")

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

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IStateStore.appendedKeys}.
        """
        return self._read(
            "read appended messages",
            "SELECT message_key FROM messages"
            " WHERE job = ? AND folder_key = ? AND failure IS NULL",
            (job, folderKey),
            lambda rows: {key for (key,) in rows},
        )

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordOutcomes}.  The outcomes and the deletion
        of the settled journal entries are one transaction: all of it is
        recorded, or none of it.
        """
        if not outcomes and not settled:
            try:
                self._open()
            except PermanentError as e:
                return fail(e)
            return succeed(None)
        now = self._seconds()
        # Consecutive outcomes of one kind are one executemany, and the runs
        # keep the order of the outcomes (a later outcome of the same
        # message wins).  An AppendedOutcome (nearly all of them) goes
        # through _UPSERT_APPENDED, whose NULLs and 0 are in the SQL: the
        # sqlite3 module binds a None parameter through its adapter
        # protocol, two failed attribute lookups each.  So does a
        # MessageOutcome with neither a failure nor a note, through
        # _UPSERT_PLAIN.
        runs: list[tuple[str, list[tuple[object, ...]]]] = []
        statement = ""
        rows: list[tuple[object, ...]] = []
        for outcome in outcomes:
            if type(outcome) is tuple:
                if statement is not _UPSERT_APPENDED:
                    statement, rows = _UPSERT_APPENDED, []
                    runs.append((statement, rows))
                rows.append(outcome)
                continue
            assert isinstance(outcome, MessageOutcome)
            plain = outcome.failure is None and outcome.note is None and _nameless(outcome)
            wanted = _UPSERT_PLAIN if plain else _UPSERT
            if statement is not wanted:
                statement, rows = wanted, []
                runs.append((statement, rows))
            head = (
                job,
                outcome.folderKey,
                outcome.messageKey,
                outcome.mailbox,
                outcome.size,
                outcome.uidValidity,
                outcome.uid,
            )
            tail: tuple[object, ...] = (
                1 if outcome.alreadyPresent else 0,
                1 if outcome.lineEndingsConverted else 0,
                now,
            )
            if not plain:
                tail += (outcome.messageId, outcome.date, outcome.sender, outcome.subject)
            rows.append(head + tail if plain else head + (outcome.failure, outcome.note) + tail)
        entries = [(entryId, job) for entryId in settled]

        def write(connection: sqlite3.Connection) -> None:
            for statement, rows in runs:
                if statement is _UPSERT_APPENDED:
                    _writeAppended(connection, job, now, rows)
                else:
                    connection.executemany(statement, rows)
            if entries:
                connection.executemany(_SETTLE, entries)

        return self._transaction("record outcomes", write)

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        """
        See L{IStateStore.journalBatch}: one row, one transaction.
        """
        try:
            blob = packMessages(messages)
        except ValueError as e:
            return fail(PermanentError(f"{self._path}: cannot journal the batch: {e}"))
        # Numbered here, one more than any entry this store wrote or found
        # at open: never the id of an entry settled since, so a stale id
        # cannot settle a newer entry.
        entryId = self._lastEntryId + 1
        row = (entryId, job, mailbox, uidValidity, uidFloor, blob, self._seconds())

        def write(connection: sqlite3.Connection) -> int:
            connection.execute(_INSERT_ENTRY, row)
            # Even if the commit fails: an id is skipped, never reused.
            self._lastEntryId = entryId
            return entryId

        return self._transaction("journal the batch", write)

    def journal(self, job: str) -> Deferred[list[JournalEntry]]:
        """
        See L{IStateStore.journal}.
        """
        if self._version < 3:
            # A version-2 database opened read-only has no journal yet.
            try:
                self._open()
            except PermanentError as e:
                return fail(e)
            return succeed([])

        def entries(
            rows: list[tuple[int, str, int | None, int | None, bytes]],
        ) -> list[JournalEntry]:
            result = []
            for entryId, mailbox, uidValidity, uidFloor, blob in rows:
                try:
                    messages = unpackMessages(blob)
                except ValueError as e:
                    raise PermanentError(
                        f"{self._path}: cannot read journal entry {entryId}: {e}"
                    ) from None
                result.append(JournalEntry(entryId, mailbox, uidValidity, uidFloor, messages))
            return result

        return self._read(
            "read the journal",
            "SELECT entry_id, mailbox, uidvalidity, uid_floor, messages FROM journal"
            " WHERE job = ? ORDER BY entry_id",
            (job,),
            entries,
        )

    def recordedUIDs(
        self, job: str, mailbox: str, uidValidity: int, fromUID: int
    ) -> Deferred[set[int]]:
        """
        See L{IStateStore.recordedUIDs}.  It reads every record of C{job}:
        it is asked after a lost connection, not per batch, and an index
        for it would cost every recorded outcome.
        """
        return self._read(
            "read recorded UIDs",
            "SELECT uid FROM messages WHERE job = ? AND mailbox = ? AND uidvalidity = ?"
            " AND uid >= ? AND failure IS NULL",
            (job, mailbox, uidValidity, fromUID),
            lambda rows: {uid for (uid,) in rows},
        )

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        return self._outcomes(
            "read failures",
            f"SELECT {self._outcomeColumns()} FROM messages"
            " WHERE job = ? AND failure IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )

    def failuresPage(
        self,
        job: str,
        offset: int,
        limit: int,
        contains: str = "",
        after: tuple[str, str] | None = None,
    ) -> Deferred[FailuresPage]:
        """
        See L{IStateStore.failuresPage}: queries over the index of messages
        not copied, one counting, one reading the page (and, filtered, one
        finding where the search stopped), each reading at most
        L{FAILURES_COUNT_LIMIT} (or, filtered, L{FAILURES_SEARCH_ROWS})
        rows of it.
        """
        needle = asciiLower(contains)
        table = self._notCopied()
        base = f"FROM {table} WHERE job = :job AND {_NOT_COPIED} AND failure IS NOT NULL"
        fromStart = f"SELECT * {base} ORDER BY folder_key, message_key"
        if after is None:
            ordered = fromStart
        else:
            # Two seeks in the index, as in manifestOutcomes.
            ordered = (
                f"SELECT * {base} AND folder_key = :folder AND message_key > :key"
                f" UNION ALL SELECT * {base} AND folder_key > :folder"
                " ORDER BY folder_key, message_key"
            )
        columns = self._outcomeColumns()
        # Counting one row more than the limit tells whether there are more.
        if needle:
            rowsRead = FAILURES_SEARCH_ROWS
            # An older database opened read-only has no Message-IDs.
            contained = self._contains().replace("?1", ":needle")
            # The first rows from the start (the count) or from `after`
            # (the page), then the needle among them: a needle found
            # nowhere would otherwise read every failure.
            counting = (
                f"SELECT (SELECT count(*) FROM (SELECT 1 {base} LIMIT :more)),"
                f" (SELECT count(*) FROM ({fromStart} LIMIT :rows) WHERE {contained})"
            )
            reading = f"SELECT {columns} FROM ({ordered} LIMIT :rows) WHERE {contained}"
        else:
            rowsRead = FAILURES_COUNT_LIMIT
            counting = f"SELECT count(*), min(count(*), :rows) FROM (SELECT 1 {base} LIMIT :more)"
            reading = f"SELECT {columns} FROM ({ordered} LIMIT :limit OFFSET :offset)"
        limit = max(0, min(limit, FAILURES_COUNT_LIMIT - offset))
        parameters = {
            "needle": needle,
            "job": job,
            "rows": rowsRead,
            "more": rowsRead + 1,
            # One more than the page: whether another page follows.
            "limit": limit + 1,
            "offset": offset,
            "folder": None if after is None else after[0],
            "key": None if after is None else after[1],
        }
        last: tuple[str, str] | None = None
        try:
            connection = self._open()
            ((read, matched),) = connection.execute(counting, parameters).fetchall()
            rows: list[_OutcomeRow] = []
            # From the start, nothing to read past the last match counted.
            if limit and (after is not None or matched > offset):
                rows = connection.execute(
                    reading + " ORDER BY folder_key, message_key LIMIT :limit OFFSET :offset"
                    if needle
                    else reading + " ORDER BY folder_key, message_key",
                    parameters,
                ).fetchall()
            if len(rows) > limit:
                del rows[limit:]
                last = (rows[-1][0], rows[-1][1])
            elif limit and needle:
                # The search stopped at its last row with rows after it:
                # the next page searches on from there.
                ends = connection.execute(
                    f"SELECT folder_key, message_key FROM ({ordered} LIMIT 2 OFFSET :rows - 1)",
                    parameters,
                ).fetchall()
                if len(ends) == 2:
                    last = (ends[0][0], ends[0][1])
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error("read failures", e))
        except (OverflowError, UnicodeEncodeError) as e:
            return fail(PermanentError(f"{self._path}: cannot read failures: {e}"))
        exact = int(read) <= rowsRead
        return succeed(
            FailuresPage(int(matched), tuple(_outcome(row) for row in rows), exact, last)
        )

    def manifestOutcomes(
        self, job: str, after: tuple[str, str] | None, limit: int
    ) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.manifestOutcomes}: a range of the index of
        messages not copied.
        """
        columns = self._outcomeColumns()
        table = self._notCopied()
        if after is None:
            return self._outcomes(
                "read the manifest",
                f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
                " ORDER BY folder_key, message_key LIMIT ?",
                (job, limit),
            )
        # The rest of the folder of `after`, then the folders after it: two
        # seeks in the index.  (A row-value comparison, (folder_key,
        # message_key) > (?, ?), seeks on the folder alone and reads the
        # folder from its start: a page deep into a large folder cost ten
        # times as much.)
        folderKey, messageKey = after
        d = self._outcomes(
            "read the manifest",
            f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
            " AND folder_key = ? AND message_key > ? ORDER BY message_key LIMIT ?",
            (job, folderKey, messageKey, limit),
        )

        def nextFolders(page: list[MessageOutcome]) -> Deferred[list[MessageOutcome]]:
            if len(page) >= limit:
                return succeed(page)
            rest = self._outcomes(
                "read the manifest",
                f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
                " AND folder_key > ? ORDER BY folder_key, message_key LIMIT ?",
                (job, folderKey, limit - len(page)),
            )
            return rest.addCallback(lambda more: page + more)

        return d.addCallback(nextFolders)

    def ping(self) -> Deferred[None]:
        """
        See L{IStateStore.ping}: reads the schema version.
        """
        return self._read(
            "read the state database",
            "SELECT version FROM schema_version",
            (),
            lambda rows: None,
        )

    def _notCopied(self) -> str:
        """
        The messages table, read through its index of messages not copied
        (which SQLite, without statistics, would not choose over the
        primary key) where the database has one.
        """
        return "messages INDEXED BY messages_not_copied" if self._version >= 8 else "messages"

    def _contains(self) -> str:
        """
        L{_CONTAINS} for this database's schema version: an older one
        opened read-only has no names (nor, before version 8, Message-IDs).
        """
        contained = _CONTAINS
        if self._version < 10:
            contained = contained.replace("message_from", "NULL").replace(
                "message_subject", "NULL"
            )
        if self._version < 8:
            contained = contained.replace("message_id", "NULL")
        return contained

    def _outcomeColumns(self) -> str:
        """
        The columns that make a L{MessageOutcome}, for this database's
        schema version.
        """
        if self._version >= 10:
            return _OUTCOME_COLUMNS
        return _OUTCOME_COLUMNS_OF[max(7, min(8, self._version))]

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as in the destination and
        how many as failed (each by its latest outcome).

        @return: a Deferred firing with C{(appended, failed)}.
        """

        def summarise(rows: list[tuple[int, int]]) -> tuple[int, int]:
            ((total, failed),) = rows
            return (int(total) - int(failed), int(failed))

        return self._read(
            "read the summary",
            "SELECT count(*), count(failure) FROM messages WHERE job = ?",
            (job,),
            summarise,
        )

    def counts(self, job: str) -> Deferred[OutcomeCounts]:
        """
        See L{IStateStore.counts}.
        """

        def count(rows: list[tuple[int, int, int, int, int]]) -> OutcomeCounts:
            ((copied, present, failed, converted, withNotes),) = rows
            return OutcomeCounts(
                copied=int(copied),
                alreadyPresent=int(present),
                failed=int(failed),
                lineEndingsConverted=int(converted),
                withNotes=int(withNotes),
            )

        return self._read(
            "read the counts",
            # sum() of no rows is NULL, hence the coalesce.
            "SELECT"
            " coalesce(sum(failure IS NULL AND present = 0), 0),"
            " coalesce(sum(failure IS NULL AND present != 0), 0),"
            " count(failure),"
            " coalesce(sum(failure IS NULL AND converted != 0), 0),"
            " coalesce(sum(failure IS NULL AND note IS NOT NULL), 0)"
            " FROM messages WHERE job = ?",
            (job,),
            count,
        )

    def activity(self, job: str) -> Deferred[JobActivity]:
        """
        See L{IStateStore.activity}: one scan of the job's messages.
        """

        def read(rows: list[tuple[Any, ...]]) -> JobActivity:
            ((octets, first, last, folders),) = rows
            return JobActivity(int(octets), first, last, int(folders))

        return self._read(
            "read the activity",
            "SELECT"
            " coalesce(sum(CASE WHEN failure IS NULL AND present = 0 THEN size END), 0),"
            " min(CASE WHEN failure IS NULL AND present = 0 THEN updated_at END),"
            " max(CASE WHEN failure IS NULL AND present = 0 THEN updated_at END),"
            " (SELECT count(*) FROM folders WHERE job = ?1)"
            " FROM messages WHERE job = ?1",
            (job,),
            read,
        )

    def nameMessages(
        self, job: str, names: Sequence[tuple[str, str, MessageNames]]
    ) -> Deferred[None]:
        """
        See L{IStateStore.nameMessages}: one transaction.
        """
        rows = [
            (n.messageId, n.date, n.sender, n.subject, job, folderKey, messageKey)
            for folderKey, messageKey, n in names
        ]

        def write(connection: sqlite3.Connection) -> None:
            connection.executemany(_NAME, rows)

        return self._transaction("record the names of messages", write)

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.notes}.  Ordered by folder key, then message key.
        """
        return self._outcomes(
            "read notes",
            f"SELECT {self._outcomeColumns()} FROM messages"
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
            f"SELECT {self._outcomeColumns()} FROM messages"
            " WHERE job = ? AND folder_key = ? AND failure IS NULL",
            (job, folderKey),
        )
        return d.addCallback(lambda outcomes: {o.messageKey: o for o in outcomes})

    def folderMark(self, job: str, folderKey: str) -> Deferred[FolderMark | None]:
        """
        See L{IStateStore.folderMark}.
        """

        def mark(rows: list[tuple[int, int, int | None, int, str | None]]) -> FolderMark | None:
            if not rows:
                return None
            ((uidValidity, uidNext, highestModSeq, messages, deferred),) = rows
            return FolderMark(
                uidValidity=uidValidity,
                uidNext=uidNext,
                highestModSeq=highestModSeq,
                messages=messages,
                deferred=tuple(int(uid) for uid in deferred.split(",")) if deferred else (),
            )

        # An older database opened read-only has no deferred UIDs yet.
        deferred = "deferred" if self._version >= 6 else "NULL"
        return self._read(
            "read the folder mark",
            f"SELECT uidvalidity, uidnext, highestmodseq, messages, {deferred} FROM folders"
            " WHERE job = ? AND folder_key = ?",
            (job, folderKey),
            mark,
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
            ",".join(str(uid) for uid in mark.deferred) or None,
            self._seconds(),
        )
        return self._transaction(
            "record the folder mark", lambda connection: _execute(connection, _UPSERT_MARK, row)
        )

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IStateStore.forgetFolder}.
        """
        return self._transaction(
            "forget the folder",
            lambda connection: _execute(
                connection,
                "DELETE FROM folders WHERE job = ? AND folder_key = ?",
                (job, folderKey),
            ),
        )

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderFallback}.
        """
        row = (job, fallback.mailbox, fallback.fallback, fallback.reason, self._seconds())
        return self._transaction(
            "record the folder fallback",
            lambda connection: _execute(
                connection,
                "INSERT OR REPLACE INTO folder_fallbacks"
                " (job, mailbox, fallback, reason, updated_at) VALUES (?, ?, ?, ?, ?)",
                row,
            ),
        )

    def folderFallbacks(self, job: str) -> Deferred[list[FolderFallback]]:
        """
        See L{IStateStore.folderFallbacks}.
        """
        return self._read(
            "read the folder fallbacks",
            "SELECT mailbox, fallback, reason FROM folder_fallbacks"
            " WHERE job = ? ORDER BY mailbox",
            (job,),
            lambda rows: [FolderFallback(*row) for row in rows],
        )

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IStateStore.recordJobFailure}.
        """

        def write(connection: sqlite3.Connection) -> None:
            if reason is None:
                connection.execute("DELETE FROM job_failures WHERE job = ?", (job,))
            else:
                connection.execute(
                    "INSERT OR REPLACE INTO job_failures (job, reason, updated_at)"
                    " VALUES (?, ?, ?)",
                    (job, reason, self._seconds()),
                )

        return self._transaction("record the job's failure", write)

    def jobFailure(self, job: str) -> Deferred[str | None]:
        """
        See L{IStateStore.jobFailure}.
        """
        if self._version < 7:
            # An older database opened read-only records no job failure.
            return succeed(None)
        return self._read(
            "read the job's failure",
            "SELECT reason FROM job_failures WHERE job = ?",
            (job,),
            lambda rows: str(rows[0][0]) if rows else None,
        )

    def recordJobHolds(
        self, jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordJobHolds}.
        """
        if hold is not None and hold not in HOLDS:
            raise ValueError(f"not a job hold: {hold!r}")

        def write(connection: sqlite3.Connection) -> None:
            if hold is None:
                connection.executemany(
                    "DELETE FROM job_holds WHERE job = ?", [(job,) for job in jobs]
                )
            else:
                now = self._seconds()
                connection.executemany(
                    "INSERT OR REPLACE INTO job_holds (job, hold, by, updated_at)"
                    " VALUES (?, ?, ?, ?)",
                    [(job, hold, by, now) for job in jobs],
                )

        return self._transaction("record the admin's hold", write)

    def jobHolds(self) -> Deferred[dict[str, JobHold]]:
        """
        See L{IStateStore.jobHolds}.
        """
        if self._version < 9:
            # An older database opened read-only records no hold.
            return succeed({})
        return self._read(
            "read the admin's holds",
            "SELECT job, hold, by, updated_at FROM job_holds",
            (),
            lambda rows: {
                str(job): JobHold(str(hold), None if by is None else str(by), float(at))
                for job, hold, by, at in rows
            },
        )

    def recordTransition(self, job: str, transition: Transition) -> Deferred[None]:
        """
        See L{IStateStore.recordTransition}: one transaction, as a batch of
        outcomes is (in WAL mode with C{synchronous=NORMAL}, its commit
        does not wait for the disk), of an insert and, past the bound, a
        delete (L{imapmig.state._timeline.writeTransition}).
        """
        return self._transaction(
            "record the job's transition",
            lambda connection: writeTransition(connection, job, transition),
        )

    def timeline(self, job: str) -> Deferred[list[Transition]]:
        """
        See L{IStateStore.timeline}.
        """
        if self._version < 11:
            # An older database opened read-only records no timeline.
            try:
                self._open()
            except PermanentError as e:
                return fail(e)
            return succeed([])
        return self._read(
            "read the job's timeline",
            READ_TIMELINE,
            (job,),
            lambda rows: [transitionOf(row) for row in rows],
        )

    def budgetUsed(self, server: str, user: str, direction: str, day: str) -> Deferred[int]:
        """
        See L{IStateStore.budgetUsed}.
        """
        if self._version < 5:
            # An older database opened read-only has no budgets yet.
            return succeed(0)
        return self._read(
            "read the budget use",
            "SELECT octets FROM budget_use"
            " WHERE server = ? AND user = ? AND direction = ? AND day = ?",
            (server, user, direction, day),
            lambda rows: int(rows[0][0]) if rows else 0,
        )

    def addBudgetUse(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IStateStore.addBudgetUse}; the records of the account's
        earlier days in that direction are deleted.
        """
        key = (server, user, direction)

        def write(connection: sqlite3.Connection) -> int:
            connection.execute(
                "DELETE FROM budget_use"
                " WHERE server = ? AND user = ? AND direction = ? AND day < ?",
                (*key, day),
            )
            connection.execute(
                "INSERT INTO budget_use (server, user, direction, day, octets, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (server, user, direction, day)"
                " DO UPDATE SET octets = octets + excluded.octets,"
                " updated_at = excluded.updated_at",
                (*key, day, octets, self._seconds()),
            )
            (total,) = connection.execute(
                "SELECT octets FROM budget_use"
                " WHERE server = ? AND user = ? AND direction = ? AND day = ?",
                (*key, day),
            ).fetchone()
            return int(total)

        return self._transaction("record the budget use", write)

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
        try:
            connection = self._open()
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = write(connection)
                connection.execute("COMMIT")
            except BaseException:
                rollback(connection)
                raise
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error(action, e))
        except (OverflowError, UnicodeEncodeError) as e:
            # A number SQLite's 64-bit INTEGER cannot hold, or text that is
            # not Unicode (a lone surrogate from a surrogateescape'd name).
            return fail(PermanentError(f"{self._path}: cannot {action}: {e}"))
        return succeed(result)

    def _read(
        self,
        action: str,
        query: str,
        parameters: tuple[object, ...],
        convert: Callable[[list[Any]], _T],
    ) -> Deferred[_T]:
        """
        What C{convert} makes of the rows C{query} finds.

        @param action: what the query reads, for the error message.
        """
        try:
            rows = self._open().execute(query, parameters).fetchall()
            return succeed(convert(rows))
        except PermanentError as e:
            return fail(e)
        except sqlite3.Error as e:
            return fail(self._error(action, e))
        except (OverflowError, UnicodeEncodeError) as e:
            return fail(PermanentError(f"{self._path}: cannot {action}: {e}"))

    def _outcomes(
        self, action: str, query: str, parameters: tuple[object, ...]
    ) -> Deferred[list[MessageOutcome]]:
        """
        The outcomes that C{query}, selecting L{_OUTCOME_COLUMNS}, finds.

        @param action: what the query reads, for the error message.
        """
        return self._read(
            action, query, parameters, lambda rows: [_outcome(row) for row in rows]
        )

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


def _writeAppended(
    connection: sqlite3.Connection, job: str, now: float, outcomes: Sequence[tuple[object, ...]]
) -> None:
    """
    Upsert a run of L{AppendedOutcome}s for C{job} at C{now}, in order, in
    statements of L{_APPENDED_ROWS} rows, then of halves of that for the
    rest (a few statements, each compiled once per process).
    """
    start = 0
    count = len(outcomes)
    rows = _APPENDED_ROWS
    while start < count:
        while rows > count - start:
            rows //= 2
        end = start + rows
        parameters: list[object] = [job, now]
        for outcome in outcomes[start:end]:
            parameters.extend(outcome)
        connection.execute(_upsertAppended(rows), parameters)
        start = end


def _nameless(outcome: MessageOutcome) -> bool:
    """
    Whether C{outcome} carries none of the names of its message.
    """
    return (
        outcome.messageId is None
        and outcome.date is None
        and outcome.sender is None
        and outcome.subject is None
    )


def _execute(connection: sqlite3.Connection, statement: str, row: tuple[object, ...]) -> None:
    """
    Execute C{statement} with C{row}'s parameters.
    """
    connection.execute(statement, row)


def _outcome(row: _OutcomeRow) -> MessageOutcome:
    """
    The L{MessageOutcome} of a row of L{_OUTCOME_COLUMNS}.
    """
    (
        folderKey, messageKey, mailbox, size, uidValidity, uid, failure, note, present,
        converted, messageId, date, sender, subject,
    ) = row  # fmt: skip
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
        messageId=messageId,
        date=date,
        sender=sender,
        subject=subject,
    )
