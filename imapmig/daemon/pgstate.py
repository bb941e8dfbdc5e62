# -*- test-case-name: tests.test_daemon_postgresql -*-
"""
A PostgreSQL state (C{state: postgresql://...}) opened from the
configuration, by the daemon and by the commands.

At start, on a connection of its own and before anything else opens the
database, L{checkDatabase} makes sure the daemon can run on it: the
database answers and takes the password, C{synchronous_commit} is not
C{off} for the role (a crash could lose a committed journal entry whose
unit was then sent: docs/fleet-design.md, "Writes batched"), the schema
is this code's (migrated first, unless the version is current already)
and the role may read and write every table.  Each refusal is one line
naming the setting to fix (C{state}, C{state_password_file},
C{state_password_credential}) and the database without its password,
and no line holds the password (L{_scrubbed}).  L{openFleetState} then
builds the store and the fleet's job queue on three threads, one
connection each (docs/fleet-design.md, "The thread pool"): the queue's
control connection on a thread of its own, so that a heartbeat never
waits for a thread behind the store's work; L{openCommandStore} the store
a command reads.

The password is given to psycopg apart (its C{password} keyword), never
written into a URI.

New: nothing opened a PostgreSQL state from a configuration before (the
daemon and the commands refused one), and L{imapmig.daemon.service} is at
its size bound.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, ParamSpec, TypeVar

import psycopg
from attrs import frozen
from psycopg.conninfo import make_conninfo
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from imapmig.config import Config, PostgreSQLState
from imapmig.errors import ConfigError, FleetMismatch, ImapmigError, NoStateYet
from imapmig.progress import MigrationProgress
from imapmig.queue._pgfleetview import PostgreSQLFleetView, throughStore
from imapmig.queue.postgresql import PostgreSQLJobQueue, ThreadedJobQueue
from imapmig.schedule.member import FleetMember
from imapmig.state import IStateStore
from imapmig.state.memory import MemoryStateStore
from imapmig.state.pgconnect import cutAll
from imapmig.state.postgresql import SCHEMA_VERSION, PostgreSQLStateStore

__all__ = [
    "FleetState",
    "StartCheck",
    "checkDatabase",
    "fleetView",
    "openCommandStore",
    "openFleetState",
]

log = Logger()

_P = ParamSpec("_P")
_R = TypeVar("_R")

STORE_CONNECTIONS = 2
"""
The threads, and so the connections, of a daemon's state store: its
writer and its reader.  The queue has one more, its control connection:
three in all.
"""

# Words of libpq's messages for a password refused or missing.
_PASSWORD_REFUSED = ("password authentication failed", "no password supplied")

# The tables (and sequences) of the state and of the queue the role may
# not use, by name: every one must be readable and writable (each right
# asked apart: given several, has_table_privilege asks for any of them).
_NOT_PERMITTED = """
SELECT n.nspname || '.' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN ('imapmig', 'imapmig_queue')
   AND NOT (has_schema_privilege(n.oid, 'USAGE') AND CASE c.relkind
         WHEN 'r' THEN has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
                   AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE')
         ELSE has_sequence_privilege(c.oid, 'USAGE') AND has_sequence_privilege(c.oid, 'UPDATE') END)
   AND c.relkind IN ('r', 'S')
 ORDER BY 1
"""


def connectKeywords(state: PostgreSQLState, application: str) -> dict[str, Any]:
    """
    The keywords C{psycopg.connect} takes for C{state}: the URI's, a
    C{connect_timeout} of 5 s and the C{application_name} C{application}
    where the URI gives none, and the password.
    """
    keywords: dict[str, Any] = state.keywords()
    keywords.setdefault("connect_timeout", "5")
    keywords.setdefault("application_name", application)
    if state.password is not None:
        keywords["password"] = state.password.value
    return keywords


def _scrubbed(text: str, state: PostgreSQLState) -> str:
    """
    C{text} on one line (libpq's messages run over several), without the
    password.
    """
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    if state.password is not None and state.password.value:
        line = line.replace(state.password.value, "(password)")
    return line


@frozen
class StartCheck:
    """
    How a program refuses a PostgreSQL state it cannot run on.

    @ivar config: the configuration (its file names each line).
    @ivar state: its PostgreSQL state.
    """

    config: Config
    state: PostgreSQLState

    def refused(self, key: str, why: str) -> ConfigError:
        """
        The one line refusing the state: the file, the setting C{key},
        the database without its password, and C{why}.
        """
        line = f"{self.config.path}: {key}: {self.state.uri()}: {why}"
        return ConfigError([_scrubbed(line, self.state)])

    def connectionRefused(self, e: psycopg.Error) -> ConfigError:
        """
        The refusal of a connection that could not be opened: under the
        key that gave the password when the password was refused or
        missing, else under C{state}.
        """
        # str(e) only: e.pgconn holds the password.
        why = str(e).removeprefix("connection failed: ")
        if any(words in why for words in _PASSWORD_REFUSED):
            key = self.state.passwordKey
            if key is None:
                return self.refused(
                    "state",
                    f"cannot connect: {why} (give state_password_file or"
                    " state_password_credential, or a line for it in libpq's PGPASSFILE)",
                )
            return self.refused(key, f"the password was refused: {why}")
        return self.refused("state", f"cannot connect: {why}")

    def connect(self, application: str) -> psycopg.Connection[tuple[Any, ...]]:
        """
        A connection to the database, in autocommit mode.

        @raise ConfigError: it could not be opened (L{connectionRefused}).
        """
        try:
            return psycopg.connect(
                **connectKeywords(self.state, application), autocommit=True
            )
        except psycopg.Error as e:
            raise self.connectionRefused(e) from None


Mode = Literal["migrate", "read", "probe"]
"""
What L{checkDatabase} makes of a schema older than this code's: a daemon
migrates it (C{"migrate"}), a command that reads refuses it (C{"read"}),
C{--check-config --connect} changes nothing and accepts it if the daemon
could migrate it (C{"probe"}).
"""


def checkDatabase(config: Config, mode: Mode = "migrate", application: str = "imapmig start") -> int:
    """
    Check that a daemon (or a command, L{Mode}) can run on C{config}'s
    PostgreSQL state, on a connection of its own that is closed again:
    see the module's docstring.

    @return: the schema version the database had (0: none).
    @raise ConfigError: one line saying what to fix.
    """
    state = config.state
    assert isinstance(state, PostgreSQLState)
    check = StartCheck(config, state)
    with check.connect(application) as connection:
        try:
            role, version = _checkOn(connection, check)
            if version != SCHEMA_VERSION:
                _migrate(connection, check, role, version, mode)
            _checkPermissions(connection, check, role)
        except psycopg.Error as e:
            raise check.refused("state", f"cannot check the database: {e}") from None
    return version


def _checkOn(
    connection: psycopg.Connection[tuple[Any, ...]], check: StartCheck
) -> tuple[str, int]:
    """
    Refuse C{synchronous_commit = off} for the role.

    @return: the role, and the schema version of the state in the
        database (0: none).
    """
    row = connection.execute(
        "SELECT current_user, current_setting('synchronous_commit'),"
        " to_regclass('imapmig.schema_version') IS NOT NULL"
    ).fetchone()
    assert row is not None
    role, synchronous, versioned = row
    if synchronous == "off":
        raise check.refused(
            "state",
            f"synchronous_commit is off for role {role}: a crash could lose a committed journal"
            f" entry whose messages were then sent again; run ALTER ROLE {role} SET"
            " synchronous_commit = on",
        )
    if not versioned:
        return role, 0
    row = connection.execute("SELECT coalesce(max(version), 0) FROM imapmig.schema_version").fetchone()
    return role, 0 if row is None else int(row[0])


def _migrate(
    connection: psycopg.Connection[tuple[Any, ...]],
    check: StartCheck,
    role: str,
    version: int,
    mode: Mode,
) -> None:
    """
    Bring the schema from C{version} to this code's through the store's
    own migration (L{PostgreSQLStateStore.open}), or refuse it, as
    C{mode} says.  Not called for a current schema, whose role then needs
    no right to create one.
    """
    if version < SCHEMA_VERSION and mode in ("migrate", "probe"):
        # The daemon's migration would fail with the database's bare
        # "permission denied for database": name the grant, as the probe.
        if not _mayCreate(connection, version):
            raise check.refused(
                "state",
                f"role {role} may not create the schema imapmig (version {version} found,"
                f" {SCHEMA_VERSION} needed): grant it CREATE on the database, or start a"
                " daemon as a role that may",
            )
    if version > SCHEMA_VERSION or mode == "migrate":
        store = _inPlaceStore(check.state, "imapmig start")
        failures: list[Failure] = []
        try:
            # Refuses a newer schema, naming both versions.
            store.open("imapmig start").addErrback(failures.append)
        finally:
            store.close()
        if failures:
            raise check.refused("state", _withoutDatabase(str(failures[0].value)))
    elif mode == "read":
        if version == 0:
            raise NoStateYet(
                check.refused("state", "holds no imapmig state yet (no daemon has run on it)").problems
            )
        raise check.refused(
            "state",
            f"its state has schema version {version}, this imapmig knows {SCHEMA_VERSION}:"
            " start a daemon of this version on it first (it migrates the schema)",
        )


def _mayCreate(connection: psycopg.Connection[tuple[Any, ...]], version: int) -> bool:
    """
    Whether the role may make the state's schema (a database without
    one: C{CREATE} on it) or change it (its owner's rights).
    """
    query = (
        "SELECT has_database_privilege(current_database(), 'CREATE')"
        if version == 0
        else "SELECT pg_has_role(nspowner, 'USAGE') FROM pg_namespace WHERE nspname = 'imapmig'"
    )
    row = connection.execute(query).fetchone()
    return bool(row and row[0])


def _checkPermissions(
    connection: psycopg.Connection[tuple[Any, ...]], check: StartCheck, role: str
) -> None:
    """
    Refuse a role that may not read and write every table of the state
    and of the queue.
    """
    denied = [name for (name,) in connection.execute(_NOT_PERMITTED).fetchall()]
    if denied:
        raise check.refused(
            "state",
            f"role {role} may not read and write"
            f" {', '.join(denied)}: grant it SELECT, INSERT, UPDATE, DELETE on the tables"
            " (USAGE on the schemas and sequences)",
        )


COMMAND_STATEMENT_TIMEOUT = "statement_timeout=10min"
"""
The statement limit of a command's store (report, plan, verify), whatever
its connections' role gives.
"""


def _inPlaceStore(state: PostgreSQLState, application: str) -> PostgreSQLStateStore:
    """
    A store of C{state} on one connection whose calls run in place
    (L{InPlaceThreadPool}): each returns its result at once.
    """
    keywords = connectKeywords(state, application)
    password = keywords.pop("password", None)
    # A command reads a whole migration (imapmig report over a million
    # jobs): the reader's 5 s statement limit is a daemon page's, not
    # its.  The URI's options come last and win over a role's.
    given = str(keywords.get("options") or "")
    keywords["options"] = f"{given} -c {COMMAND_STATEMENT_TIMEOUT}".strip()
    return PostgreSQLStateStore(
        _NoReactor(), InPlaceThreadPool(), make_conninfo("", **keywords), lambda: 0.0,
        password=password,
    )  # fmt: skip


@implementer(IReactorFromThreads)
class _NoReactor:
    """
    The reactor of a store whose calls run in place (L{InPlaceThreadPool}):
    calls at once what it is given.
    """

    def callFromThread(self, callable: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        callable(*args, **kwargs)


class InPlaceThreadPool(ThreadPool):
    """
    A thread pool that runs its work in the calling thread, at once: the
    PostgreSQL store of a command that blocks anyway (C{imapmig report}),
    whose results are then ready when its calls return, as the SQLite
    store's are.
    """

    def callInThreadWithCallback(
        self,
        onResult: Callable[[bool, _R], object] | None,
        func: Callable[_P, _R],
        *args: _P.args,
        **kw: _P.kwargs,
    ) -> None:
        """
        Call C{func} now, then C{onResult} with whether it returned and
        what (its L{Failure} if it raised), as a worker thread would.
        """
        try:
            result = func(*args, **kw)
        except BaseException:
            if onResult is not None:
                onResult(False, Failure())  # type: ignore[arg-type]
            return
        if onResult is not None:
            onResult(True, result)


def _withoutDatabase(message: str) -> str:
    """
    C{message} without the database it starts with (C{postgresql://...: }),
    which the refusal names already.
    """
    if message.startswith("postgresql://") and ": " in message:
        return message.partition(": ")[2]
    return message


@frozen
class FleetState:
    """
    What a daemon of a fleet runs on: its state store and the fleet's
    job queue, each on its started thread pool (L{openFleetState}).

    @ivar where: the database as pages name it, without its password or
        parameters.
    """

    store: PostgreSQLStateStore
    queue: ThreadedJobQueue
    pools: tuple[ThreadPool, ThreadPool]
    where: str


def startedPool(reactor: Any, threads: int, name: str) -> ThreadPool:
    """
    A started pool of at most C{threads} threads, stopped once the reactor
    has shut down (after every service stopped) if it is a real one.
    """
    pool = ThreadPool(minthreads=0, maxthreads=threads, name=name)
    pool.start()
    if hasattr(reactor, "addSystemEventTrigger"):
        reactor.addSystemEventTrigger("after", "shutdown", pool.stop)
    return pool


def _cutAtTheEnd() -> None:
    """
    Cut the connections still open once the reactor has shut down, before
    the pools are stopped (L{cutAll}): a thread blocked on one (the
    database cut off in a partition, behind a relay that stalls) then
    ends, rather than keep the process from ending while its pool joins
    it.
    """
    cut = cutAll()
    if cut:
        log.warn("Cut {cut} connection(s) to the database still open at the end", cut=cut)


def openFleetState(config: Config, reactor: Any) -> FleetState:
    """
    Check the database (L{checkDatabase}), then open the job queue (its
    control connection, its tables migrated and the configured jobs
    loaded) on a thread of its own, and the store (its writer and reader)
    on L{STORE_CONNECTIONS} threads.

    @param reactor: delivers the results, and times the outcomes.
    @raise ConfigError: the database cannot be used (one line).
    """
    state = config.state
    assert isinstance(state, PostgreSQLState)
    checkDatabase(config)
    check = StartCheck(config, state)
    assert config.fleet is not None, "the configuration requires a fleet with PostgreSQL"
    password = None if state.password is None else state.password.value
    conninfo = make_conninfo("", **state.keywords())
    try:
        queue = PostgreSQLJobQueue.connect(
            conninfo, config.jobs, config.fleet.name, password, config.userLists
        )
    except FleetMismatch as e:
        raise check.refused("fleet", _withoutDatabase(str(e))) from None
    except ImapmigError as e:
        raise check.refused("state", _withoutDatabase(str(e))) from None
    if hasattr(reactor, "addSystemEventTrigger"):
        # Before the pools' own triggers: run first.
        reactor.addSystemEventTrigger("after", "shutdown", _cutAtTheEnd)
    controlPool = startedPool(reactor, 1, "imapmig-postgresql-control")
    storePool = startedPool(reactor, STORE_CONNECTIONS, "imapmig-postgresql-store")
    # Its threads bound its connections: one each, never one waiting.
    store = PostgreSQLStateStore(reactor, storePool, conninfo, reactor.seconds, password=password)
    return FleetState(
        store,
        ThreadedJobQueue(queue, reactor, controlPool),
        (controlPool, storePool),
        state.shortURI(),
    )


def openCommandStore(config: Config, empty: bool = False) -> IStateStore:
    """
    The store a command reads C{config}'s PostgreSQL state with, once
    L{checkDatabase} accepts it for reading: one connection, its calls
    run in place (L{InPlaceThreadPool}), so that each returns its result
    at once as the SQLite store's do.

    @param empty: a database without an imapmig state is read as an empty
        store in memory (C{imapmig plan}: nothing was copied yet), not
        refused.
    @raise ConfigError: the database cannot be read (one line).
    """
    state = config.state
    assert isinstance(state, PostgreSQLState)
    try:
        checkDatabase(config, "read", "imapmig command")
    except NoStateYet:
        if not empty:
            raise
        return MemoryStateStore()
    return _inPlaceStore(state, "imapmig command")


def fleetView(
    store: IStateStore,
    member: FleetMember,
    config: Config,
    reactor: Any,
    progress: MigrationProgress | None = None,
) -> PostgreSQLFleetView | None:
    """
    The fleet as a daemon's status pages show it: every daemon of the
    fleet and the jobs each holds, read on C{store}'s reader connection
    and in its threads (L{PostgreSQLStateStore.readOnReader}: no
    connection more than the store's two and the queue's one), this
    daemon being C{member}'s id of the moment, its rate the one
    C{progress} measures where the daemons' table has no rate (a queue
    before schema 4; since, each heartbeat records it); L{None} for a
    store that is not a fleet's (a test's in memory).
    """
    if not isinstance(store, PostgreSQLStateStore):
        return None
    state = config.state
    assert isinstance(state, PostgreSQLState)
    run = throughStore(store.readOnReader, state.shortURI(), reactor)
    rate = None if progress is None else (lambda: progress.currentRate()[0])
    return PostgreSQLFleetView(run, lambda: member.owner, rate)
