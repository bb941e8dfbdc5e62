# -*- test-case-name: tests.test_state_copy -*-
"""
The two sides of C{imapmig state copy} (L{imapmig.state.copying}): the
tables copied, and how a SQLite file and a PostgreSQL database are each
opened, guarded against a daemon using them, read in one snapshot,
written in one transaction and counted.

Rows travel between the sides in PostgreSQL's form (booleans, the
deferred UIDs of a folder mark as a list of integers); the SQLite side
converts its columns (C{0}/C{1}, UIDs joined by commas) as it reads and
writes them.  New beside the stores' role modules (L{imapmig.state._sql*},
L{imapmig.state._pg*}): those write a role's rows in a transaction of
their own, through the reactor's thread or a thread pool; these stream
whole tables inside one, blocking.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

import psycopg
from attrs import field, frozen
from psycopg import IsolationLevel
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from imapmig.errors import PermanentError, StateCopyRefused
from imapmig.state import _pgschema
from imapmig.state.pgconnect import displayName
from imapmig.state._schema import checkIntegrity, migrate, readVersion, rollback
from imapmig.state.lock import StateFileLock, connectionClosed, connectionOpened

Row = tuple[Any, ...]
Counts = dict[str, dict[tuple[str, ...], int]]
"""
Rows per table (by L{Table.title}), per job (C{(job,)}) or, for the
budgets, per account (C{(server, user)}).
"""

_T = TypeVar("_T")


@frozen
class Table:
    """
    A table of the state, as both stores have it.

    @ivar name: its SQL name (in PostgreSQL, of schema C{imapmig}).
    @ivar title: its name in the command's counts.
    @ivar columns: the columns copied, in order.
    @ivar types: their PostgreSQL types, for C{COPY}.
    @ivar order: the key the rows are read in.
    @ivar perJob: whether its rows are a job's (else an account's).
    """

    name: str
    title: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    order: str
    perJob: bool = True

    def columnList(self) -> str:
        """
        The columns, quoted (C{user}, C{by} and C{time} are SQL words).
        """
        return ", ".join(f'"{column}"' for column in self.columns)


MESSAGES = Table(
    "messages",
    "outcomes",
    (
        "job", "folder_key", "message_key", "mailbox", "size", "uidvalidity", "uid", "failure",
        "note", "present", "converted", "message_id", "message_date", "message_from",
        "message_subject", "updated_at",
    ),
    (
        "text", "text", "text", "text", "int8", "int8", "int8", "text",
        "text", "bool", "bool", "text", "text", "text", "text", "float8",
    ),
    "job, folder_key, message_key",
)  # fmt: skip
JOURNAL = Table(
    "journal",
    "journal",
    ("entry_id", "job", "mailbox", "uidvalidity", "uid_floor", "messages", "written_at"),
    ("int8", "text", "text", "int8", "int8", "bytea", "float8"),
    "entry_id",
)
HOLDS = Table(
    "job_holds", "holds", ("job", "hold", "by", "updated_at"), ("text", "text", "text", "float8"), "job"
)
TABLES = (
    MESSAGES,
    JOURNAL,
    Table(
        "folders",
        "marks",
        (
            "job", "folder_key", "uidvalidity", "uidnext", "highestmodseq", "messages", "deferred",
            "fingerprint", "octets", "updated_at",
        ),
        ("text", "text", "int8", "int8", "int8", "int8", "int8[]", "text", "int8", "float8"),
        "job, folder_key",
    ),
    Table(
        "folder_fallbacks",
        "fallbacks",
        ("job", "mailbox", "fallback", "reason", "updated_at"),
        ("text", "text", "text", "text", "float8"),
        "job, mailbox",
    ),
    HOLDS,
    Table("job_failures", "failures", ("job", "reason", "updated_at"), ("text", "text", "float8"), "job"),
    Table(
        "job_transitions",
        "timeline",
        ("job", "seq", "time", "source", "target", "cause", "by"),
        ("text", "int8", "float8", "text", "text", "text", "text"),
        "job, seq",
    ),
    Table(
        "budget_use",
        "budgets",
        ("server", "user", "direction", "day", "octets", "updated_at"),
        ("text", "text", "text", "text", "int8", "float8"),
        'server, "user", direction, day',
        perJob=False,
    ),
)
"""
Every table of the state, in the order they are copied.
"""


@frozen
class SQLiteFile:
    """
    A SQLite state database.

    @ivar path: the file.
    @ivar label: the argument that named it (C{--from}, C{--to}).
    """

    path: str
    label: str

    def where(self) -> str:
        """
        The file, for messages.
        """
        return self.path


@frozen
class PostgreSQLDatabase:
    """
    A PostgreSQL state database.

    @ivar conninfo: its libpq URI, without a password.
    @ivar label: the argument that named it (C{--from}, C{--to}).
    @ivar password: its password, or L{None}: libpq finds one
        (C{PGPASSFILE}, C{PGPASSWORD}) or needs none.
    """

    conninfo: str
    label: str
    password: str | None = field(default=None, repr=False)

    def where(self) -> str:
        """
        The database as a URI without its password, for messages.
        """
        return displayName(self.conninfo)


class Side(Protocol):
    """
    One database of a copy, opened as its source or its target.

    @ivar name: the argument and the database, for messages.
    """

    name: str

    def snapshot(self) -> Any:
        """
        A context in which every read sees one state (the source's).
        """

    def transaction(self) -> Any:
        """
        A context that is one transaction, committed at its end unless it
        raises (the target's).
        """

    def holds(self) -> list[Row]:
        """
        The holds on jobs (C{job, hold, by, updated_at}).
        """

    def counts(self, jobs: list[str] | None, accounts: list[tuple[str, ...]] | None) -> Counts:
        """
        The rows of every table per job and account; only of C{jobs} and
        C{accounts} unless L{None}.
        """

    def delete(self, jobs: list[str], accounts: list[tuple[str, ...]]) -> None:
        """
        Delete every row of C{jobs} and C{accounts}.
        """

    def rows(self, table: Table) -> Iterator[Row]:
        """
        Every row of C{table}, in its order.
        """

    def write(self, table: Table, rows: Iterator[Row]) -> None:
        """
        Insert C{rows} into C{table}.
        """

    def journalIds(self, count: int) -> Iterator[int]:
        """
        C{count} journal entry ids that no writer of this database will
        choose again.
        """

    def close(self, failed: bool) -> None:
        """
        Release the database; a target created for a copy that C{failed}
        is removed.
        """


def _uids(text: str | None) -> list[int]:
    return [int(uid) for uid in text.split(",")] if text else []


def _uidText(uids: list[int]) -> str | None:
    return ",".join(str(uid) for uid in uids) or None


# The columns SQLite keeps in another form, with the conversion from it
# and to it.
_FROM_SQLITE: dict[str, Callable[[Any], Any]] = {"present": bool, "converted": bool, "deferred": _uids}
_TO_SQLITE: dict[str, Callable[[Any], Any]] = {"present": int, "converted": int, "deferred": _uidText}


def _converted(
    table: Table, rows: Iterable[Row], conversions: dict[str, Callable[[Any], Any]]
) -> Iterator[Row]:
    """
    C{rows} of C{table} with the columns of C{conversions} converted.
    """
    at = [(index, conversions[column]) for index, column in enumerate(table.columns) if column in conversions]
    if not at:
        yield from rows
        return
    for row in rows:
        values = list(row)
        for index, convert in at:
            values[index] = convert(values[index])
        yield tuple(values)


class SQLiteSide:
    """
    A SQLite state file, its L{StateFileLock} held from open to close.
    """

    def __init__(self, location: SQLiteFile, role: str, seconds: Callable[[], float]) -> None:
        """
        Take the file's lock and bring its schema up to date.

        @param role: C{"source"} (which must exist and be a state
            database) or C{"target"} (created if need be).
        @raise StateCopyRefused: it cannot be opened or locked (a daemon
            holds it), or is not a state database.
        """
        path = location.path
        self.name = f"{location.label} {path}"
        if role == "source" and not os.path.isfile(path):
            raise StateCopyRefused(f"{self.name}: no such file")
        self._path = path
        self._created = role == "target" and not os.path.exists(path)
        # Empty, as the lock leaves a file it creates: no schema to check.
        self._empty = self._created or (os.path.isfile(path) and os.path.getsize(path) == 0)
        try:
            self._lock = StateFileLock.acquire(path, seconds)
        except PermanentError as e:
            raise StateCopyRefused(f"{location.label}: {e}") from None
        try:
            self._connection = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as e:
            self._lock.release()
            self._removeIfCreated(True)
            raise StateCopyRefused(f"{self.name}: cannot open it: {e}") from None
        connectionOpened(self._lock.key)
        try:
            self._prepare(role)
        except BaseException as e:
            self.close(failed=True)
            if isinstance(e, (PermanentError, sqlite3.Error)) and not isinstance(e, StateCopyRefused):
                raise StateCopyRefused(f"{location.label}: {e}") from None
            raise

    def _prepare(self, role: str) -> None:
        """
        Check the file and bring its schema up to date, as a daemon would.
        """
        connection = self._connection
        connection.execute("PRAGMA journal_mode=WAL")
        if not self._empty:
            checkIntegrity(connection, self._path)
        if role == "source" or not self._empty:
            # Not another program's database: no imapmig table goes in.
            readVersion(connection, self._path)
        migrate(connection, self._path)

    def close(self, failed: bool) -> None:
        """
        See L{Side.close}.
        """
        try:
            self._connection.close()
        finally:
            connectionClosed(self._lock.key)
            self._lock.release()
            self._removeIfCreated(failed)

    def _removeIfCreated(self, failed: bool) -> None:
        if not (failed and self._created):
            return
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(self._path + suffix)
            except FileNotFoundError:
                pass

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """
        See L{Side.snapshot}: one read transaction.
        """
        self._connection.execute("BEGIN")
        try:
            yield
        finally:
            rollback(self._connection)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """
        See L{Side.transaction}: the file's write lock from the start.
        """
        self._connection.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._connection.execute("COMMIT")
        except BaseException:
            rollback(self._connection)
            raise

    def _chosen(self, jobs: list[str], accounts: list[tuple[str, ...]]) -> None:
        """
        Put C{jobs} and C{accounts} in temporary tables, for the
        statements that read or delete theirs alone.
        """
        connection = self._connection
        connection.execute("CREATE TEMP TABLE IF NOT EXISTS copied_jobs (job TEXT PRIMARY KEY)")
        connection.execute(
            "CREATE TEMP TABLE IF NOT EXISTS copied_accounts"
            ' (server TEXT, "user" TEXT, PRIMARY KEY (server, "user"))'
        )
        connection.execute("DELETE FROM temp.copied_jobs")
        connection.execute("DELETE FROM temp.copied_accounts")
        connection.executemany("INSERT INTO temp.copied_jobs VALUES (?)", [(job,) for job in jobs])
        connection.executemany("INSERT INTO temp.copied_accounts VALUES (?, ?)", accounts)

    def _run(self, action: str, work: Callable[[], _T]) -> _T:
        """
        What C{work} returns, its SQLite errors as imapmig's naming this
        side.
        """
        try:
            return work()
        except sqlite3.Error as e:
            raise PermanentError(f"{self.name}: cannot {action}: {e}") from None

    def _where(self, table: Table) -> str:
        if table.perJob:
            return " WHERE job IN (SELECT job FROM temp.copied_jobs)"
        return ' WHERE (server, "user") IN (SELECT server, "user" FROM temp.copied_accounts)'

    def counts(self, jobs: list[str] | None, accounts: list[tuple[str, ...]] | None) -> Counts:
        """
        See L{Side.counts}.
        """
        if jobs is not None:
            self._run("count the rows", lambda: self._chosen(jobs, accounts or []))
        result: Counts = {}
        for table in TABLES:
            key = "job" if table.perJob else 'server, "user"'
            where = "" if jobs is None else self._where(table)
            query = f"SELECT {key}, count(*) FROM {table.name}{where} GROUP BY {key}"
            found = self._run("count the rows", lambda: self._connection.execute(query).fetchall())
            result[table.title] = {tuple(row[:-1]): int(row[-1]) for row in found}
        return result

    def delete(self, jobs: list[str], accounts: list[tuple[str, ...]]) -> None:
        """
        See L{Side.delete}.
        """
        self._run("replace the jobs' state", lambda: self._chosen(jobs, accounts))
        for table in TABLES:
            query = f"DELETE FROM {table.name}{self._where(table)}"
            self._run("replace the jobs' state", lambda: self._connection.execute(query))

    def holds(self) -> list[Row]:
        """
        See L{Side.holds}: the C{job_holds} table.
        """
        return list(self.rows(HOLDS))

    def rows(self, table: Table) -> Iterator[Row]:
        """
        See L{Side.rows}.
        """
        query = f"SELECT {table.columnList()} FROM {table.name} ORDER BY {table.order}"
        try:
            yield from _converted(table, self._connection.execute(query), _FROM_SQLITE)
        except sqlite3.Error as e:
            raise PermanentError(f"{self.name}: cannot read {table.name}: {e}") from None

    def write(self, table: Table, rows: Iterator[Row]) -> None:
        """
        See L{Side.write}.
        """
        marks = ", ".join("?" for _ in table.columns)
        statement = f"INSERT INTO {table.name} ({table.columnList()}) VALUES ({marks})"
        self._run(
            f"write {table.name}",
            lambda: self._connection.executemany(statement, _converted(table, rows, _TO_SQLITE)),
        )

    def journalIds(self, count: int) -> Iterator[int]:
        """
        See L{Side.journalIds}: after the largest in the file, as the
        store numbers its entries (from the largest at its open).
        """
        query = "SELECT coalesce(max(entry_id), 0) FROM journal"
        (last,) = self._run("number the journal", lambda: self._connection.execute(query).fetchone())
        return iter(range(int(last) + 1, int(last) + 1 + count))


_LIVE = """
SELECT daemon_id, host, pid FROM imapmig_queue.daemons
 WHERE lease_until > now() AND retired_at IS NULL ORDER BY host, pid
"""

_HOLDS = """
SELECT job, hold, by, updated_at FROM imapmig.job_holds
"""

# A fleet's holds are its jobs' rows (imapmig.state._pgschema.HOLDS_TO_ROWS):
# a job paused or cancelled, or whose claim (a dead daemon's) was asked to
# be, with who held it and when where job_holds agrees; job_holds's rows
# count only for jobs the list does not have (a row that disagrees is a
# hold lifted since, or a job ended).
_QUEUE_HOLDS = """
SELECT j.name, h.hold, k.by, coalesce(k.updated_at, extract(epoch FROM now())::float8)
  FROM imapmig_queue.jobs AS j
 CROSS JOIN LATERAL (SELECT CASE WHEN j.state IN ('paused', 'cancelled') THEN j.state
                                 WHEN j.state <> 'claimed' THEN NULL
                                 WHEN j.requested = 'pause' THEN 'paused'
                                 WHEN j.requested = 'cancel' THEN 'cancelled' END AS hold) AS h
  LEFT JOIN imapmig.job_holds AS k ON k.job = j.name AND k.hold = h.hold
 WHERE h.hold IS NOT NULL
UNION ALL
SELECT job, hold, by, updated_at FROM imapmig.job_holds AS h
 WHERE NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs AS j WHERE j.name = h.job)
"""


class PostgreSQLSide:
    """
    A PostgreSQL state database, on one connection.
    """

    def __init__(self, location: PostgreSQLDatabase, role: str) -> None:
        """
        Connect, and bring the schema up to date (a source must have one).

        @param role: C{"source"} or C{"target"}.
        @raise StateCopyRefused: it cannot be reached, its schema is newer
            than this code, or a source holds no imapmig state.
        """
        self._where = location.where()
        self.name = f"{location.label} {self._where}"
        self._password = location.password
        self._role = role
        given = conninfo_to_dict(location.conninfo)
        keywords: dict[str, Any] = {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": 5000,
            "application_name": "imapmig state copy",
        }
        keywords = {key: value for key, value in keywords.items() if key not in given}
        if location.password is not None:
            keywords["password"] = location.password
        try:
            self._connection: psycopg.Connection[Row] = psycopg.connect(
                make_conninfo(location.conninfo, **keywords), autocommit=True
            )
        except psycopg.Error as e:
            raise StateCopyRefused(f"{self.name}: cannot connect: {self._clean(e)}") from None
        try:
            self._prepare(role)
        except BaseException as e:
            self._connection.close()
            if isinstance(e, psycopg.Error):
                raise StateCopyRefused(f"{self.name}: cannot open the state: {self._clean(e)}") from None
            if isinstance(e, PermanentError) and not isinstance(e, StateCopyRefused):
                raise StateCopyRefused(f"{location.label}: {e}") from None
            raise

    def _clean(self, e: BaseException) -> str:
        """
        What C{e} says, on one line, without the password.
        """
        text = " ".join(str(e).split())
        return text.replace(self._password, "(password)") if self._password else text

    def _exists(self, name: str) -> bool:
        row = self._connection.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(row and row[0])

    def _prepare(self, role: str) -> None:
        """
        Migrate the schema (refusing a source without one) and find the
        queue's tables.
        """
        if role == "source" and not self._exists("imapmig.schema_version"):
            raise StateCopyRefused(f"{self.name}: holds no imapmig state (no imapmig.schema_version)")
        row = self._connection.execute(
            "SELECT coalesce(max(version), 0) FROM imapmig.schema_version"
        ).fetchone() if role == "source" else None
        if row is None or int(row[0]) != _pgschema.SCHEMA_VERSION:
            # A source as a daemon would find it; a target made current.
            _pgschema.migrate(self._connection, self._where, "imapmig state copy")
        # The holds this copy moved into the jobs' rows, per job.
        self._moved: dict[tuple[str, ...], int] = {}
        self._daemons = self._exists("imapmig_queue.daemons")
        self._queueJobs = self._exists("imapmig_queue.jobs")
        self._connection.autocommit = False

    def _run(self, action: str, work: Callable[[], _T]) -> _T:
        """
        What C{work} returns, its psycopg errors as imapmig's naming this
        side.
        """
        try:
            return work()
        except psycopg.Error as e:
            raise PermanentError(f"{self.name}: cannot {action}: {self._clean(e)}") from None

    def _guard(self, mode: str) -> None:
        """
        Lock the queue's daemons in C{mode} for the transaction (no daemon
        registers or renews its lease meanwhile) and refuse if one has a
        live lease.
        """
        self._connection.execute("SET LOCAL lock_timeout = '10s'")
        if not self._daemons:
            return
        self._connection.execute(f"LOCK TABLE imapmig_queue.daemons IN {mode} MODE")
        live = self._connection.execute(_LIVE).fetchall()
        if live:
            named = ", ".join(f"{daemon} on host {host} (pid {pid})" for daemon, host, pid in live)
            raise StateCopyRefused(
                f"{self.name}: in use by {len(live)} daemon(s) with a live lease: {named};"
                " stop them, then copy again"
            )

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """
        See L{Side.snapshot}: a repeatable-read transaction, the daemons
        locked against writes first.
        """
        self._connection.isolation_level = IsolationLevel.REPEATABLE_READ
        try:
            self._run("read the daemons' leases", lambda: self._guard("SHARE"))
            yield
        finally:
            self._connection.rollback()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """
        See L{Side.transaction}.
        """
        try:
            self._run("read the daemons' leases", lambda: self._guard("EXCLUSIVE"))
            yield
            self._run("commit the copy", self._connection.commit)
        except BaseException:
            if not self._connection.broken:
                self._connection.rollback()
            raise

    def close(self, failed: bool) -> None:
        """
        See L{Side.close}.
        """
        self._connection.close()

    def _selected(
        self, table: Table, jobs: list[str] | None, accounts: list[tuple[str, ...]] | None
    ) -> tuple[str, tuple[Any, ...]]:
        """
        The condition choosing the rows of C{jobs} (or C{accounts}) in
        C{table}, and its parameters; none for L{None}.
        """
        if jobs is None:
            return "", ()
        if table.perJob:
            return " WHERE job = ANY(%s::text[])", (jobs,)
        chosen = accounts or []
        return (
            ' WHERE (server, "user") IN (SELECT * FROM unnest(%s::text[], %s::text[]))',
            ([server for server, _ in chosen], [user for _, user in chosen]),
        )

    def counts(self, jobs: list[str] | None, accounts: list[tuple[str, ...]] | None) -> Counts:
        """
        See L{Side.counts}.
        """
        result: Counts = {}
        for table in TABLES:
            key = "job" if table.perJob else 'server, "user"'
            where, parameters = self._selected(table, jobs, accounts)
            query = f"SELECT {key}, count(*) FROM imapmig.{table.name}{where} GROUP BY {key}"
            found = self._run("count the rows", lambda: self._connection.execute(query, parameters).fetchall())
            result[table.title] = {tuple(row[:-1]): int(row[-1]) for row in found}
        held = result[HOLDS.title]
        for job, n in self._moved.items():
            if jobs is None or job[0] in jobs:
                held[job] = held.get(job, 0) + n
        return result

    def delete(self, jobs: list[str], accounts: list[tuple[str, ...]]) -> None:
        """
        See L{Side.delete}.
        """
        for table in TABLES:
            where, parameters = self._selected(table, jobs, accounts)
            query = f"DELETE FROM imapmig.{table.name}{where}"
            self._run("replace the jobs' state", lambda: self._connection.execute(query, parameters))

    def holds(self) -> list[Row]:
        """
        See L{Side.holds}: the C{job_holds} table; in a fleet's database,
        its jobs' rows (L{_QUEUE_HOLDS}: a C{job_holds} row of a job the
        list has is a hold lifted since, or never applied, not read).
        """
        query = (_QUEUE_HOLDS if self._queueJobs else _HOLDS) + " ORDER BY 1"
        return self._run("read the holds", lambda: self._connection.execute(query).fetchall())

    def rows(self, table: Table) -> Iterator[Row]:
        """
        See L{Side.rows}: through a cursor of the server, a few thousand
        rows at a time.
        """
        query = f"SELECT {table.columnList()} FROM imapmig.{table.name} ORDER BY {table.order}"
        try:
            with self._connection.cursor(name=f"copy_{table.name}") as cursor:
                cursor.itersize = 5000
                cursor.execute(query)
                yield from cursor
        except psycopg.Error as e:
            raise PermanentError(f"{self.name}: cannot read {table.name}: {self._clean(e)}") from None

    def write(self, table: Table, rows: Iterator[Row]) -> None:
        """
        See L{Side.write}: one C{COPY}.
        """
        statement = f"COPY imapmig.{table.name} ({table.columnList()}) FROM STDIN"

        def copy() -> None:
            with self._connection.cursor().copy(statement) as copying:
                copying.set_types(list(table.types))
                for row in rows:
                    copying.write_row(row)

        self._run(f"write {table.name}", copy)
        if table.name == "job_holds" and self._queueJobs:
            # A fleet's holds are its jobs' rows: moved there.
            self._run("hold the jobs", self._holdRows)

    def _holdRows(self) -> None:
        """
        Move the holds just written into the fleet's jobs' rows
        (L{_pgschema.HOLDS_TO_ROWS}), counting each moved as a row of
        C{job_holds} for the copy's check.
        """
        *applied, moved = _pgschema.HOLDS_TO_ROWS
        for statement in applied:
            self._connection.execute(statement)
        for (job,) in self._connection.execute(moved).fetchall():
            self._moved[(job,)] = self._moved.get((job,), 0) + 1

    def journalIds(self, count: int) -> Iterator[int]:
        """
        See L{Side.journalIds}: from the store's sequence; where the
        writers choose their ids (their incarnation in the high bits, a
        counter in the low 32), from an incarnation of the copy's own.
        """
        if count == 0:
            return iter(())
        if self._exists("imapmig.journal_ids"):
            query = "SELECT nextval('imapmig.journal_ids') FROM generate_series(1, %s)"
            found = self._run("number the journal", lambda: self._connection.execute(query, (count,)).fetchall())
            return iter(int(row[0]) for row in found)
        if not self._exists("imapmig_queue.incarnations"):
            raise PermanentError(f"{self.name}: cannot number the journal: no sequence to draw from")
        row = self._run(
            "number the journal",
            lambda: self._connection.execute("SELECT nextval('imapmig_queue.incarnations')").fetchone(),
        )
        assert row is not None
        high = int(row[0]) << 32
        return iter(range(high + 1, high + 1 + count))
