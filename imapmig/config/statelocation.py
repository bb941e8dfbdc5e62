# -*- test-case-name: tests.test_config_statelocation -*-
"""
Where the state database is: C{state:} as a SQLite file (the default) or
a PostgreSQL libpq URI (C{postgresql://USER@HOST:PORT/DBNAME?sslmode=...},
or C{postgres://}), with the keys that go with a URI:
C{state_password_file}, C{state_password_credential},
C{state_allow_plaintext} and the C{fleet} section (its C{name} and
C{lease}: L{imapmig.config.model.FleetConfig}).

A new module because nothing read a URI before: C{state} was read as a
path by L{imapmig.config}'s parser (that reader moved here).  The
URI is read here once, by libpq's rules, into a
L{imapmig.config.model.PostgreSQLState}; what libpq would take from
elsewhere is refused so that the file alone says where the state goes:
a password in the URI (secrets come from files or credentials), a list of
hosts (a fleet needs the one primary; put several behind one name), the
C{service} parameter (a settings file of its own), a parameter libpq does
not document.  No problem shows the URI itself: it could hold a password.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from typing import Callable, Mapping
from urllib.parse import unquote

from attrs import fields

from imapmig.config.endpoints import isLoopbackHost
from imapmig.config.model import (
    MAX_LEASE,
    MIN_LEASE,
    FleetConfig,
    PostgreSQLState,
    SQLiteState,
    StateLocation,
)
from imapmig.config.reader import _NAME, Key, Step, keyNames
from imapmig.config.secretkeys import SecretsReader, secretKeys
from imapmig.access.secrets import Secret
from imapmig.errors import StateURIProblem

__all__ = ["STATE_KEYS", "StateReader", "parsePostgreSQLURI"]

DEFAULT_STATE_PATH = "/var/lib/imapmig/state.sqlite"

_SCHEMES = ("postgresql://", "postgres://")

SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

STATE_KEYS = ("state", *secretKeys("state_password"), "state_allow_plaintext", "fleet")
"""
The top-level keys about the state database: C{state}, then those that go
with a PostgreSQL one only.
"""

MAX_FLEET_NAME = 63
"""
The longest fleet name, in characters (PostgreSQL's longest identifier:
the name may end up in one).
"""


def _choice(*choices: str) -> Callable[[str], str | None]:
    """
    A check that a parameter's value is one of C{choices}.
    """

    def check(value: str) -> str | None:
        if value in choices:
            return None
        return f"must be one of {', '.join(choices)}, not {value!r}"

    return check


def _count(value: str) -> str | None:
    """
    Why C{value} is not a whole number of seconds or probes, or L{None}.
    """
    return None if value.isascii() and value.isdigit() else f"must be a whole number, not {value!r}"


def _anything(value: str) -> str | None:
    """
    Any text: libpq checks it.
    """
    return None


_BOOLEAN = _choice("0", "1")

# libpq's documented connection parameters a URI's query may give
# (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS),
# each with the check of its value.  Left out, and refused with why, in
# _REFUSED: the secrets, service, and the parts the URI itself writes.
_PARAMETERS: dict[str, Callable[[str], str | None]] = {
    "hostaddr": _anything,
    "connect_timeout": _count,
    "client_encoding": _anything,
    "options": _anything,
    "application_name": _anything,
    "fallback_application_name": _anything,
    "keepalives": _BOOLEAN,
    "keepalives_idle": _count,
    "keepalives_interval": _count,
    "keepalives_count": _count,
    "tcp_user_timeout": _count,
    "sslmode": _choice(*SSL_MODES),
    "sslnegotiation": _choice("postgres", "direct"),
    "sslcompression": _BOOLEAN,
    "sslcert": _anything,
    "sslkey": _anything,
    "sslcertmode": _choice("disable", "allow", "require"),
    "sslrootcert": _anything,
    "sslcrl": _anything,
    "sslcrldir": _anything,
    "sslsni": _BOOLEAN,
    "ssl_min_protocol_version": _choice("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"),
    "ssl_max_protocol_version": _choice("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"),
    "requirepeer": _anything,
    "require_auth": _anything,
    "channel_binding": _choice("disable", "prefer", "require"),
    "gssencmode": _choice("disable", "prefer", "require"),
    "gssdelegation": _BOOLEAN,
    "krbsrvname": _anything,
    "gsslib": _anything,
    "passfile": _anything,
    "target_session_attrs": _choice(
        "any", "read-write", "read-only", "primary", "standby", "prefer-standby"
    ),
    "host": _anything,
}

# The parameters that name a file: made absolute against the
# configuration's directory, as every path in it is (libpq would read
# them against the daemon's working directory).
_FILE_PARAMETERS = ("sslcert", "sslkey", "sslrootcert", "sslcrl", "sslcrldir", "passfile")

_REFUSED = {
    "password": "a password in the URI; give state_password_file or state_password_credential",
    "sslpassword": "a key's password in the URI; use an unencrypted key file only its owner may read",
    "service": "a service file's settings are not read; write them in the URI",
    "port": "write the port in the URI (postgresql://USER@HOST:PORT/DBNAME)",
    "dbname": "write the database in the URI's path (postgresql://USER@HOST:PORT/DBNAME)",
    "user": "write the user in the URI (postgresql://USER@HOST:PORT/DBNAME)",
    "load_balance_hosts": "one host only (a fleet needs its one primary)",
}


def parsePostgreSQLURI(uri: str, resolve: Callable[[str], str]) -> PostgreSQLState:
    """
    Read a libpq URI (C{postgresql://} or C{postgres://}).

    @param resolve: makes a file name absolute.
    @raise StateURIProblem: it has a password, is malformed, names several
        hosts, no database, a port that is not a number, or a parameter
        that is unknown or has a bad value.
    """
    rest = uri.split("://", 1)[1]
    if "#" in rest:
        raise StateURIProblem("a fragment ('#...') has no meaning in a libpq URI")
    authority, pathQuery = _splitAuthority(rest)
    path, _, query = pathQuery.partition("?")
    user, hostPort = _splitUser(authority, pathQuery)
    host, port = _splitHost(hostPort)
    dbname = unquote(path)
    if not dbname:
        raise StateURIProblem("no database name: postgresql://USER@HOST:PORT/DBNAME")
    parameters = _readQuery(query, resolve)
    given = dict(parameters)
    if "host" in given:
        if host is not None:
            raise StateURIProblem("host is given twice, in the URI and as ?host=")
        host = given["host"]
        parameters = tuple(item for item in parameters if item[0] != "host")
    if host is not None and "," in host:
        raise StateURIProblem(_SEVERAL_HOSTS)
    return PostgreSQLState(
        dbname=dbname, host=host, port=port, user=user, parameters=parameters
    )


def _splitAuthority(rest: str) -> tuple[str, str]:
    """
    The authority of a URI after its scheme, and its path (without its
    C{/}) with its query.
    """
    slash, query = rest.find("/"), rest.find("?")
    ends = [index for index in (slash, query) if index >= 0]
    end = min(ends) if ends else len(rest)
    pathQuery = rest[end:]
    return rest[:end], pathQuery[1:] if pathQuery.startswith("/") else pathQuery


_PASSWORD = "a password in the URI; give state_password_file or state_password_credential"


def _splitUser(authority: str, pathQuery: str) -> tuple[str | None, str]:
    """
    The user (L{None}: libpq's default) and the host and port of
    C{authority}, refusing a password: C{USER:PASSWORD@}, or any C{@}
    after the authority (C{USER:PASS/WORD@}, where C{/} or C{?} cut the
    authority short, and a port of digits cannot tell it from a host).
    """
    userInfo, at, hostPort = authority.rpartition("@")
    if ":" in userInfo:
        raise StateURIProblem(_PASSWORD)
    if "@" in pathQuery:
        # USER:12/34@HOST reads as the host USER, the port 12 and the
        # database 34@HOST: an '@' after the authority may end a password,
        # so it is refused wherever it is (written %40, it is taken).
        raise StateURIProblem(
            f"{_PASSWORD}: an '@' after the host is refused, as the end of a password"
            " holding '/' or '?' (an '@' of a database name or a parameter is written %40)"
        )
    return (unquote(userInfo) or None) if at else None, hostPort


def _splitHost(hostPort: str) -> tuple[str | None, int | None]:
    """
    The host (L{None}: libpq's default) and port of C{hostPort}.
    """
    if "," in hostPort:
        raise StateURIProblem(_SEVERAL_HOSTS)
    if hostPort.startswith("["):
        host, bracket, portText = hostPort[1:].partition("]")
        if not bracket or (portText and not portText.startswith(":")):
            raise StateURIProblem("malformed host: an IPv6 address is written [ADDRESS]:PORT")
        portText = portText[1:]
    else:
        host, _, portText = hostPort.partition(":")
        host = unquote(host)
    return host or None, _readPort(portText)


_SEVERAL_HOSTS = (
    "several hosts are not supported: give the one primary"
    " (a fleet's leases need one database; put a failover behind one name)"
)


def _readPort(text: str) -> int | None:
    """
    The port written C{text}, or L{None} when none is.
    """
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
        # Not shown: after a password holding '/', it is part of it.
        raise StateURIProblem("the port is not a number between 1 and 65535")
    return int(text)


def _readQuery(query: str, resolve: Callable[[str], str]) -> tuple[tuple[str, str], ...]:
    """
    The parameters of the URI's C{query}, checked, in order, file names
    made absolute.
    """
    # Not parse_qsl: libpq reads '+' as itself, not as a space.
    items = [item.partition("=") for item in query.split("&")] if query else []
    if not all(name and equals for name, equals, _ in items):
        raise StateURIProblem("malformed parameters: write ?NAME=VALUE&NAME=VALUE")
    pairs = [(unquote(name), unquote(value)) for name, _, value in items]
    names = [name for name, _ in pairs]
    for name in names:
        _checkName(name, names)
    return tuple(_checkedValue(name, value, resolve) for name, value in pairs)


def _checkName(name: str, names: list[str]) -> None:
    """
    Refuse the parameter C{name} if it is not one libpq documents that the
    URI may give, or is given twice.
    """
    if name in _REFUSED:
        raise StateURIProblem(f"parameter {name}: {_REFUSED[name]}")
    if name not in _PARAMETERS:
        close = difflib.get_close_matches(name, _PARAMETERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise StateURIProblem(f"unknown parameter {name!r}{hint}")
    if names.count(name) > 1:
        raise StateURIProblem(f"parameter {name} is given more than once")


def _checkedValue(name: str, value: str, resolve: Callable[[str], str]) -> tuple[str, str]:
    """
    The parameter C{name} with its C{value} checked (file names made
    absolute).
    """
    problem = _PARAMETERS[name](value)
    if problem is None and name == "hostaddr" and "," in value:
        problem = _SEVERAL_HOSTS
    if problem is None and not value:
        problem = "must not be empty"
    if problem is not None:
        raise StateURIProblem(f"parameter {name}: {problem}")
    if name in _FILE_PARAMETERS and not (name == "sslrootcert" and value == "system"):
        value = resolve(value)
    return name, value


_NO_DRIVER = (
    "a PostgreSQL state needs psycopg, which is not installed: install imapmig with its"
    " postgresql extra (pip install 'imapmig[postgresql]')"
)


def driverInstalled() -> bool:
    """
    Whether psycopg, the PostgreSQL driver of the C{imapmig[postgresql]}
    extra, can be imported (it is not imported here).
    """
    return importlib.util.find_spec("psycopg") is not None


def isLocal(state: PostgreSQLState) -> bool:
    """
    Whether C{state} is reached on this machine: through a Unix socket
    (libpq's default, or a directory), or a loopback address (C{hostaddr}
    where given, which is where libpq connects).
    """
    target = state.parameter("hostaddr") or state.host
    return target is None or target.startswith(("/", "@")) or isLoopbackHost(target)


def weakTLSProblem(state: PostgreSQLState) -> str | None:
    """
    Why the connection to C{state} could be read or altered on the
    network, or L{None}: toward a host not on this machine, only
    C{sslmode=verify-full} checks both the certificate and the name.
    """
    if isLocal(state):
        return None
    mode = state.parameter("sslmode")
    if mode == "verify-full":
        return None
    said = "no sslmode (libpq's default is prefer)" if mode is None else f"sslmode={mode}"
    return (
        f"{said} toward {state.host or state.parameter('hostaddr')}, which is not this machine:"
        " the password and the state could be read or altered on the way;"
        " add ?sslmode=verify-full (with sslrootcert=FILE, or system),"
        " or set state_allow_plaintext: true to accept it"
    )


class StateReader(SecretsReader):
    """
    Reads C{state} and the keys that go with a PostgreSQL one
    (L{STATE_KEYS}).
    """

    def _readState(self, top: Mapping[str, object]) -> StateLocation | None:
        """
        Read where the state database is: a SQLite file (C{state} absent:
        L{DEFAULT_STATE_PATH}), or a PostgreSQL URI with its password and
        TLS decision.
        """
        value = top.get("state", DEFAULT_STATE_PATH)
        if isinstance(value, str) and value.startswith(_SCHEMES):
            return self._readPostgreSQL(top, value)
        for key in STATE_KEYS[1:]:
            if key in top:
                self._problem(key, "goes with a PostgreSQL state (state: postgresql://...), not a SQLite file")
        if isinstance(value, str) and "://" in value:
            # Not a file named so: a URI of another kind, or a typo.
            self._problem(
                "state",
                f"a URI of scheme {value.split('://')[0][:20]!r}: give a SQLite file's path"
                " or postgresql://USER@HOST:PORT/DBNAME",
            )
            return None
        path = self._readStatePath(value)
        return None if path is None else SQLiteState(path)

    def _readPostgreSQL(self, top: Mapping[str, object], uri: str) -> PostgreSQLState | None:
        """
        Read the PostgreSQL URI C{uri} of C{state}, with the keys that go
        with it.
        """
        allow = self._readBoolean(top.get("state_allow_plaintext", False), "state_allow_plaintext")
        secret = self._readStatePassword(top)
        try:
            state = parsePostgreSQLURI(uri, self._resolve)
        except StateURIProblem as e:
            self._problem("state", str(e))
            return None
        weak = weakTLSProblem(state)
        if weak is not None and allow is False:
            self._problem("state", weak)
            return None
        if not driverInstalled():
            self._problem("state", _NO_DRIVER)
            return None
        password, passwordPath = (None, None) if secret is None else secret
        passwordKey = next((key for key in secretKeys("state_password") if key in top), None)
        return PostgreSQLState(
            dbname=state.dbname,
            host=state.host,
            port=state.port,
            user=state.user,
            parameters=state.parameters,
            password=password,
            passwordPath=passwordPath,
            passwordKey=None if password is None else passwordKey,
            allowPlaintext=bool(allow),
        )

    def _readStatePassword(
        self, top: Mapping[str, object]
    ) -> tuple[Secret, str | None] | None:
        """
        The password of C{state_password_file} or
        C{state_password_credential} and where it was read, or L{None}:
        neither is given (libpq finds one, or needs none), or a problem.
        """
        keys = secretKeys("state_password")
        if all(key in top for key in keys):
            self._problem(keys[0], f"give one of {' or '.join(keys)}, not both")
            return None
        return self._readSecret(top, "", "state_password", "PostgreSQL password")

    def _readFleet(self, top: Mapping[str, object]) -> FleetConfig | None:
        """
        Read C{fleet}: required with a PostgreSQL C{state} (beside a
        SQLite file, L{_readState} refuses it).
        """
        state = top.get("state")
        if not (isinstance(state, str) and state.startswith(_SCHEMES)):
            return None
        if "fleet" not in top:
            self._problem(
                "fleet",
                "required with a PostgreSQL state: give fleet: {name: NAME}, the same name on"
                " every daemon sharing the database",
            )
            return None
        values = self._readSection(top["fleet"], "fleet", _FLEET_TABLE)
        return None if values is None else FleetConfig(**values)

    def _readFleetName(self, value: object, path: str) -> str | None:
        """
        Read C{fleet.name}: letters, digits and C{. _ @ -}, as a job's
        name, at most L{MAX_FLEET_NAME} characters.
        """
        name = self._readString(value, path)
        if name is None:
            return None
        if not _NAME.fullmatch(name) or len(name) > MAX_FLEET_NAME:
            self._problem(
                path,
                f"invalid fleet name {name!r}: use letters, digits and . _ @ -, starting"
                f" with a letter or digit, at most {MAX_FLEET_NAME} characters",
            )
            return None
        return name

    def _readLease(self, value: object, path: str) -> float | None:
        """
        Read C{fleet.lease}: seconds, from L{MIN_LEASE} to L{MAX_LEASE}.
        """
        seconds = self._readSeconds(value, path)
        if seconds is None:
            return None
        if not MIN_LEASE <= seconds <= MAX_LEASE:
            self._problem(
                path,
                f"must be between {MIN_LEASE:g} and {MAX_LEASE:g} seconds, not {value}"
                " (a daemon renews it every twelfth of it; a dead daemon's jobs wait that long)",
            )
            return None
        return seconds

    def _readStatePath(self, value: object) -> str | None:
        """
        Read C{state} as a SQLite file, in an existing directory.
        """
        return self._accepted(self._readPath(value, "state"), "state", statePathProblem)


def statePathProblem(resolved: str) -> str | None:
    """
    Why the SQLite state database cannot be at C{resolved}, or L{None}: it
    must be a file name in a writable directory.
    """
    parent = os.path.dirname(resolved)
    if os.path.isdir(resolved):
        return f"{resolved} is a directory; give a file name in it"
    if not os.path.isdir(parent):
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


# The keys of fleet, each a field of FleetConfig.
_FLEET_TABLE: tuple[Step, ...] = (
    Key("name", StateReader._readFleetName,
        missing="required: the fleet's name, the same on every daemon sharing the database"),
    Key("lease", StateReader._readLease, default=fields(FleetConfig).lease.default),
)  # fmt: skip
FLEET_KEYS = keyNames(_FLEET_TABLE)
