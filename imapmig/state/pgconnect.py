# -*- test-case-name: tests.test_state_pgconnect -*-
"""
How imapmig connects to PostgreSQL, for every role of a daemon
(docs/fleet-design.md "The thread pool"): the queue's I{control}
connection (register, heartbeat, claims, finish, controls), the store's
I{writer} (the write batcher) and I{reader} (pages, reports).

Every connection gets libpq's keywords that find a dead server or path in
seconds rather than the kernel's minutes (C{connect_timeout=5},
C{tcp_user_timeout=5000}, TCP keepalives), C{application_name = 'imapmig
HOST:PID ROLE'} (L{applicationName}: the process, as the fleet's
C{daemons} table has its host and pid, and the role) so that
C{pg_stat_activity} shows whose connection each is, and its role's session settings
(L{ROLES}: C{statement_timeout}, C{lock_timeout}, read-only for the
reader) with C{idle_in_transaction_session_timeout = 60s}, so a stuck
transaction cannot hold the xmin horizon back.  What the URI sets wins
over each of them: its keywords, its C{application_name} (as a keyword
or in its C{options}), its C{options}' settings (given after ours).  The
password is given apart (C{password=}), never written into the URI, and
no message names it: L{displayName} is the database as messages show it,
L{mapError} the imapmig error for a psycopg one.  L{cutAll}, at a
daemon's very end, cuts the connections still open, so that a thread
blocked on one (a database cut off behind a relay that stalls, whose
kernel still acknowledges every octet: neither C{tcp_user_timeout} nor
the keepalives then fire, and the server's C{statement_timeout} never
hears of the statement) returns and the process can end.

New: the state store's pool (C{imapmig.state._pgbase.ConnectionPool})
and the queue had each their own keywords, and the pool's replaced the
URI's C{application_name} and C{options}; both connect through this
module, and C{_pgbase}'s C{displayName} moved here.
"""

from __future__ import annotations

import os
import socket
import weakref
from typing import Any, Literal

import psycopg
from attrs import frozen
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from imapmig.errors import ImapmigError, PermanentError, TransientError

Connection = psycopg.Connection[tuple[Any, ...]]

Role = Literal["control", "writer", "reader"]


@frozen
class RoleSettings:
    """
    The session settings of one role's connection.

    @ivar statementTimeout: C{statement_timeout}: no statement runs longer.
    @ivar lockTimeout: C{lock_timeout}: no statement waits longer for a
        lock (a row another transaction holds).
    @ivar readOnly: C{default_transaction_read_only}.
    """

    statementTimeout: str
    lockTimeout: str
    readOnly: bool = False

    def options(self) -> str:
        """
        The settings as libpq's C{options} (C{-c NAME=VALUE} each).
        """
        settings = [
            (SESSION_MARK, "on"),
            ("idle_in_transaction_session_timeout", "60s"),
            ("statement_timeout", self.statementTimeout),
            ("lock_timeout", self.lockTimeout),
        ]
        if self.readOnly:
            settings.append(("default_transaction_read_only", "on"))
        return " ".join(f"-c {name}={value}" for name, value in settings)


ROLES: dict[Role, RoleSettings] = {
    # A control waits 5 s at most, behind a statement or a row lock, so
    # that the heartbeat behind it on the same connection renews the lease
    # long before it ends (H = lease / 12, 5 s of the 60 s default).
    "control": RoleSettings("5s", "5s"),
    # A batch of a few thousand rows, behind at most a claim's row locks.
    "writer": RoleSettings("30s", "10s"),
    "reader": RoleSettings("5s", "5s", readOnly=True),
}
"""
The session settings of each role (docs/fleet-design.md "The thread
pool").
"""

SESSION_MARK = "imapmig.session"
"""
A setting of imapmig's own (a placeholder PostgreSQL keeps for any dotted
name) given with the role's settings in libpq's C{options}: read back
once connected, it shows that they reached the server (L{Connector.connect}).
"""

POOLER = (
    "a connection pooler (PgBouncer) between imapmig and PostgreSQL {what} the session"
    " settings imapmig gives each connection in libpq's options (statement_timeout,"
    " lock_timeout, idle_in_transaction_session_timeout), which keep a daemon's"
    " heartbeat and fences in time: connect to PostgreSQL itself (docs/fleet-database.md)"
)
"""
Why a connection through a pooler is refused: C{what} is C{refuses} (the
pooler said so) or C{dropped} (it was told to ignore them).
"""

_KEYWORDS: dict[str, str | int] = {
    "connect_timeout": 5,
    "tcp_user_timeout": 5000,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


NAME_LIMIT = 63
"""
The octets of an C{application_name} PostgreSQL keeps (C{NAMEDATALEN - 1});
it cuts a longer one.
"""


def applicationName(role: str, host: str | None = None, pid: int | None = None) -> str:
    """
    The C{application_name} of a connection of C{role} opened by this
    process: C{imapmig HOST:PID ROLE} (C{imapmig mig1:4242 writer}), the
    host cut so that the whole fits in L{NAME_LIMIT} octets.  The process,
    not the daemon id: a daemon's connections outlive its incarnations
    (a new id after each lease lost), and the store's open before its
    first id is registered; the fleet's C{daemons} table gives each id its
    host and pid.

    @param host: by default this host's name (the daemons table's).
    @param pid: by default this process's.
    """
    host = socket.gethostname() if host is None else host
    pid = os.getpid() if pid is None else pid
    tail = f":{pid} {role}"
    room = NAME_LIMIT - len("imapmig ") - len(tail.encode())
    cut = host.encode()[: max(0, room)].decode(errors="ignore")
    return f"imapmig {cut}{tail}"


_OPENED: weakref.WeakSet[Connection] = weakref.WeakSet()
"""
Every connection a L{Connector} of this process opened and not yet
collected, for L{cutAll}.
"""


def cutAll() -> int:
    """
    Shut the socket of every connection still open down, both ways (the
    socket itself, not its descriptor: nothing is freed under the thread
    that uses it): a thread blocked waiting on one wakes, reads the end
    of the stream, and its call fails with C{OperationalError}.  For the
    daemon's very end (L{imapmig.daemon.pgstate.startedPool}, after every
    service stopped), before its thread pools are joined: a call that
    hangs would keep the process from ever ending.

    @return: how many were cut.
    """
    cut = 0
    for connection in list(_OPENED):
        if connection.closed:
            continue
        try:
            duplicate = socket.socket(fileno=os.dup(connection.fileno()))
        except (OSError, psycopg.Error):
            continue
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            pass
        finally:
            duplicate.close()
    return cut


def displayName(conninfo: str) -> str:
    """
    C{conninfo} as a URI without its password or any other parameter, for
    messages: C{postgresql://USER@HOST:PORT/DBNAME}.
    """
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "postgresql://(unreadable URI)"
    user = parts.get("user")
    host = parts.get("host") or parts.get("hostaddr") or ""
    port = parts.get("port")
    return (
        "postgresql://"
        + (f"{user}@" if user else "")
        + f"{host}"
        + (f":{port}" if port else "")
        + f"/{parts.get('dbname') or ''}"
    )


class Connector:
    """
    Opens the connections of one role to one database.

    @ivar where: the database as messages name it (L{displayName}).
    @ivar role: the role whose settings each connection gets.
    """

    def __init__(self, conninfo: str, role: Role, password: str | None = None) -> None:
        """
        @param conninfo: a libpq URI or connection string, without a
            password.
        @param password: the password (of C{state_password_file} or a
            credential), or L{None}: libpq finds one (C{PGPASSFILE}) or
            needs none.
        @raise PermanentError: C{conninfo} cannot be read.
        """
        self._conninfo = conninfo
        self._password = password
        self.role = role
        self.where = displayName(conninfo)
        self._name = applicationName(role)
        try:
            self._given = conninfo_to_dict(conninfo)
        except psycopg.Error as e:
            raise PermanentError(f"{self.where}: cannot read the URI: {e}") from None

    def __repr__(self) -> str:
        return f"<Connector {self.role} {self.where}>"

    def namesItself(self) -> bool:
        """
        Whether the URI gives the C{application_name} (a keyword, or a
        setting of its C{options}), which is then kept.
        """
        options = str(self._given.get("options") or "")
        return "application_name" in self._given or "application_name" in options

    def applicationName(self) -> str:
        """
        The C{application_name} this connector gives (L{applicationName}):
        C{imapmig HOST:PID ROLE}.
        """
        return self._name

    def keywords(self) -> dict[str, str | int]:
        """
        The keywords added to the URI's, as C{psycopg.connect} takes them:
        ours where the URI gives none, C{options} ours then the URI's.
        """
        added = {key: value for key, value in _KEYWORDS.items() if key not in self._given}
        if not self.namesItself():
            added["application_name"] = self.applicationName()
        options = ROLES[self.role].options()
        given = self._given.get("options")
        added["options"] = f"{options} {given}" if given else options
        if self._password is not None:
            added["password"] = self._password
        return added

    def connect(self) -> Connection:
        """
        A new connection, in autocommit mode (transactions are explicit),
        whose session has the role's settings (L{SESSION_MARK} read back).

        @raise psycopg.Error: it could not be opened (see L{mapError}).
        @raise PermanentError: the settings did not reach the server (a
            PgBouncer told to ignore libpq's C{options}).
        """
        conninfo = make_conninfo(self._conninfo, **self.keywords())
        connection: Connection = psycopg.connect(conninfo, autocommit=True)
        _OPENED.add(connection)
        try:
            row = connection.execute("SELECT current_setting(%s, true)", (SESSION_MARK,)).fetchone()
        except BaseException:
            connection.close()
            raise
        if row != ("on",):
            connection.close()
            raise PermanentError(f"{self.where}: cannot connect: {POOLER.format(what='dropped')}")
        return connection

    def error(
        self, action: str, e: BaseException, unavailable: type[TransientError] = TransientError
    ) -> BaseException:
        """
        L{mapError} for this database, the password kept out.
        """
        return mapError(self.where, action, e, unavailable, self._password)


# Worth retrying: the connection or the server went away (a database
# restart, a partition), a statement or lock wait timed out, or another
# transaction was in the way.  OperationalError covers the first two
# (QueryCanceled and LockNotAvailable are among its subclasses).
_TRANSIENT = (
    psycopg.OperationalError,
    pgerrors.SerializationFailure,
    pgerrors.DeadlockDetected,
)


def mapError(
    where: str,
    action: str,
    e: BaseException,
    unavailable: type[TransientError] = TransientError,
    password: str | None = None,
) -> BaseException:
    """
    The imapmig error for C{e}, raised while doing C{action} on the
    database C{where}: an imapmig error as it is; a lost connection, a
    timeout or a conflict as C{unavailable} (L{QueueUnavailable
    <imapmig.errors.QueueUnavailable>} for the queue); any other psycopg
    error as a L{PermanentError}; anything else as it is.  The message
    names the database without its password, and never holds
    C{password}.
    """
    if isinstance(e, ImapmigError) or not isinstance(e, psycopg.Error):
        return e
    kind = unavailable if isinstance(e, _TRANSIENT) else PermanentError
    message = f"{where}: cannot {action}: {oneLine(e)}"
    if "unsupported startup parameter" in message or "unsupported options startup" in message:
        # PgBouncer's refusal of libpq's options: no retry will pass.
        kind, message = PermanentError, f"{message}: {POOLER.format(what='refuses')}"
    if password:
        message = message.replace(password, "(password)")
    return kind(message)


def oneLine(e: BaseException) -> str:
    """
    C{e}'s message on one line: libpq's messages hold line breaks and tabs
    (C{...Connection refused\n\tIs the server running...}), which split
    a log line in two.
    """
    return " ".join(str(e).split())
