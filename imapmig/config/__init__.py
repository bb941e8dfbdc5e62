# -*- test-case-name: tests.test_config -*-
"""
The configuration: a YAML file parsed once into a tree of frozen values
(L{imapmig.config.model}).

Every problem found is collected, each with the path of the offending key
(C{jobs[1].destination.server}), and reported together in one
L{ConfigError}; no C{dict} travels past this package.
C{config/imapmig.example.yaml} documents every key.  Each section has its
reader: L{servers}, L{accounts}, L{sources}, L{jobs}, over the plain
value readers of L{reader}.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from attrs import fields

from imapmig.config.accounts import _DESTINATION_KEYS
from imapmig.config.jobs import _DEFAULTS_KEYS, _JOB_KEYS, _SETTINGS
from imapmig.config.model import (
    AccountConfig,
    Config,
    DestinationConfig,
    EmlSourceConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    NotifyConfig,
    PipelineConfig,
    PostgreSQLState,
    RetryConfig,
    ServerConfig,
    SourceConfig,
    SQLiteState,
    StatusConfig,
)
from imapmig.config.notify import NOTIFY_KEYS, NotifyReader
from imapmig.config.reader import Check, Key, Step, _describe, _key, isOff, keyNames
from imapmig.config.endpoints import _DEFAULT_LISTEN, isLoopbackHost
from imapmig.config.servers import _SERVER_KEYS, ServersReader
from imapmig.config.sources import _SOURCE_KEYS
from imapmig.config.statelocation import STATE_KEYS, StateReader
from imapmig.config.userlist import _CREDENTIAL_KEYS, _TEMPLATE_KEYS, UserListReader
from imapmig.config.userrows import _COLUMNS
from imapmig.configfile import readConfigFile
from imapmig.errors import ConfigError
from imapmig.mail.folders import FolderRules
from imapmig.access.secrets import Secret

__all__ = [
    "AccountConfig",
    "Config",
    "DestinationConfig",
    "EmlSourceConfig",
    "FolderRules",
    "ImapSourceConfig",
    "JobConfig",
    "MaildirSourceConfig",
    "MboxSourceConfig",
    "NOTIFY_KEYS",
    "NotifyConfig",
    "PipelineConfig",
    "PostgreSQLState",
    "RetryConfig",
    "Secret",
    "ServerConfig",
    "SourceConfig",
    "SQLiteState",
    "StatusConfig",
    "isLoopbackHost",
    "loadConfig",
    "parseConfig",
    "_DEFAULT_LISTEN",
    "_DEFAULTS_KEYS",
    "_DESTINATION_KEYS",
    "_JOB_KEYS",
    "_COLUMNS",
    "_CREDENTIAL_KEYS",
    "_TEMPLATE_KEYS",
    "_SERVER_KEYS",
    "_SETTINGS",
    "_SOURCE_KEYS",
]


_DEFAULT_STOP_TIMEOUT = 30.0

# The keys of each section; the tests check that the example file uses
# every one of them.
_TOP_KEYS = (
    *STATE_KEYS, "status", "stop_timeout", "max_jobs", "servers", "credentials", "defaults",
    "jobs", "notify",
)  # fmt: skip
# The most status.max_job_series may be: 9 series a job, 9 million series.
_MAX_JOB_SERIES_BOUND = 1_000_000

# A host name of status.allowed_hosts: DNS labels (an IPv4 address
# matches too, harmlessly: addresses are always allowed), or ".NAME" for
# every name under NAME.
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"\.?{_LABEL}(\.{_LABEL})*")


def loadConfig(
    path: str, environ: Mapping[str, str] | None = None, lazyUserLists: bool | None = False
) -> Config:
    """
    Read and validate the configuration file at C{path}.

    @param path: the file's path; it names the file in error messages and
        relative paths inside it are resolved against its directory.
    @param environ: the environment to find systemd credentials with
        (C{CREDENTIALS_DIRECTORY}), or L{None} for the process's.
    @return: the configuration.
    @raise ConfigError: the file cannot be read, is not valid YAML, is past
        a bound or gives a key twice (L{imapmig.configfile}), or any
        problem with its content (every problem found), among them an
        inline password in a file that group or others may read.
    @param lazyUserLists: keep each C{jobs_from} entry as written, in
        C{Config.userLists} (its rows read when loaded into a fleet's
        database, or claimed), instead of a job per row in C{jobs};
        L{None}: so when the state is a PostgreSQL database (a daemon,
        which joins its fleet with the lists as written).
    """
    read = readConfigFile(path)
    return parseConfig(read.document, path, environ, read.looseFileMode, lazyUserLists)


def parseConfig(
    document: object,
    path: str,
    environ: Mapping[str, str] | None = None,
    looseFileMode: int | None = None,
    lazyUserLists: bool | None = False,
) -> Config:
    """
    Validate an already loaded YAML document.

    @param document: the YAML document (L{imapmig.configfile.readConfigFile}).
    @param path: the file it came from: names it in error messages, and
        relative paths are resolved against its directory.
    @param environ: the environment to find systemd credentials with, or
        L{None} for the process's.
    @param looseFileMode: the file's mode if group or others may read it
        (an inline password is then a problem), else L{None}.
    @param lazyUserLists: see L{loadConfig}.
    @return: the configuration.
    @raise ConfigError: every problem found.
    """
    parser = _ConfigParser(path)
    parser._environment = environ
    parser._looseFileMode = looseFileMode
    parser._lazyUserLists = lazyUserLists
    parser._userLists = []
    return parser.parse(document)


MIN_TOKEN_LENGTH = 16
"""
The fewest characters a status token may have: it is all that stands
between anyone who reaches the listener and the controls.
"""


class _ConfigParser(UserListReader, ServersReader, NotifyReader, StateReader):
    """
    Walks a YAML document, building the configuration and collecting every
    problem.
    """

    def parse(self, document: object) -> Config:
        """
        Build the configuration from C{document}.

        @raise ConfigError: every problem found.
        """
        top = self._readTop(document)
        self._checkInlineSecrets(document)
        settings = self._readSettings(top)
        if self._problems:
            raise ConfigError(self._problems)
        return Config(path=os.path.abspath(self._path), **settings)

    def _readSettings(self, top: Mapping[str, object]) -> dict[str, Any]:
        """
        Read the settings of C{top}, in the order their problems are
        reported, by the field of L{Config} each is (L{None} where
        invalid).
        """
        state = self._readState(top)
        if self._lazyUserLists is None:
            self._lazyUserLists = isinstance(state, PostgreSQLState)
        status = self._readStatus(top)
        servers = self._readServers(top)
        defaults = self._readDefaults(top)
        self._readCredentials(top)
        return {
            "state": state,
            "status": status,
            "servers": _validServers(servers),
            "jobs": self._readJobs(top, servers, defaults),
            "stopTimeout": self._readSeconds(
                top.get("stop_timeout", _DEFAULT_STOP_TIMEOUT), "stop_timeout"
            ),
            "maxJobs": self._readMaxJobs(top),
            "notify": self._readNotify(top["notify"]) if "notify" in top else None,
            "userLists": tuple(self._userLists),
            "fleet": self._readFleet(top),
        }

    def _readTop(self, document: object) -> dict[str, object]:
        """
        The settings of C{document}, which must be a mapping.

        @raise ConfigError: it is empty, or not a mapping.
        """
        if document is None:
            raise ConfigError([f"{self._path}: the file is empty"])
        if not isinstance(document, dict):
            raise ConfigError(
                [
                    f"{self._path}: the document must be a mapping of settings"
                    f" ({', '.join(_TOP_KEYS)}), not {_describe(document)}"
                ]
            )
        top = self._readMapping(document, "", _TOP_KEYS)
        assert top is not None
        return top

    def _readStatus(self, top: Mapping[str, object]) -> StatusConfig | None:
        """
        Read C{status}: absent means the default listener, C{off} none.
        """
        # Absent: every key's default (the default listener).
        value = top.get("status", {})
        if isOff(value):
            return None
        if not isinstance(value, dict):
            self._problem(
                "status",
                "expected a mapping {listen: ENDPOINT} or off,"
                f" got {_describe(value)}",
            )
            return None
        values = self._readSection(value, "status", _STATUS_TABLE)
        return None if values is None else StatusConfig(**values)

    def _checkListen(
        self, status: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check C{status.listen} with Twisted's own parser.
        """
        listen = values["listen"]
        return listen is None or self._checkServerEndpoint(listen, _key(path, "listen"))

    def _readMaxJobSeries(self, value: object, path: str) -> int | None:
        """
        Read C{status.max_job_series}: the most job series the status site
        keeps.
        """
        return self._readInteger(value, path, 0, _MAX_JOB_SERIES_BOUND)

    def _readAllowedHosts(self, value: object, path: str) -> tuple[str, ...] | None:
        """
        Read C{status.allowed_hosts}: a list of host names (C{.NAME} for
        every name under NAME), each lower-cased, without a trailing dot.
        """
        if not isinstance(value, list):
            self._problem(path, f"expected a list of host names, got {_describe(value)}")
            return None
        return self._readEach(value, path, self._readHostName)

    def _readHostName(self, value: object, path: str) -> str | None:
        """
        Read a host name of C{status.allowed_hosts}: lower-cased, without a
        trailing dot.
        """
        if not isinstance(value, str):
            self._problem(path, f"expected a host name, got {_describe(value)}")
            return None
        name = value.strip().lower().rstrip(".")
        if not _HOST_NAME.fullmatch(name):
            self._problem(
                path,
                f"{value!r} is not a host name (letters, digits, '-' and '.';"
                " '.corp.example' for every name under corp.example; no port, no scheme)",
            )
            return None
        return name

    def _readStatusToken(self, value: object, path: str) -> Secret | None:
        """
        Read C{status.token_file}: the bearer token of the controls, the
        file's first line with its surrounding whitespace stripped, from a
        file only its owner may read (the checks of a password file).
        """
        resolved = self._readPath(value, path)
        token = self._readSecretFile(resolved, path, "status token")
        problem = None if token is None else _statusTokenProblem(token, resolved)
        if problem is not None:
            self._problem(path, problem)
        return None if token is None or problem is not None else Secret(token)


def _validServers(servers: Mapping[str, ServerConfig | None] | None) -> tuple[ServerConfig, ...]:
    """
    The valid servers of C{servers}, in order.
    """
    return tuple(server for server in (servers or {}).values() if server is not None)


def _statusTokenProblem(token: str, resolved: str | None) -> str | None:
    """
    Why C{token}, read from C{resolved}, cannot be the status token, or
    L{None}: it must have at least L{MIN_TOKEN_LENGTH} characters.
    """
    if not token:
        return f"status token file {resolved} holds only whitespace"
    if len(token) < MIN_TOKEN_LENGTH:
        return (
            f"the status token in {resolved} has {len(token)} characters; at least"
            f" {MIN_TOKEN_LENGTH} are needed (make one with: openssl rand -hex 32)"
        )
    return None


# The keys of status, each a field of StatusConfig, in the order they are
# read; a problem with the token or the series' bound ends the reading.
_STATUS_TABLE: tuple[Step, ...] = (
    Key("listen", _ConfigParser._readString, default=_DEFAULT_LISTEN),
    Key("token_file", _ConfigParser._readStatusToken, "token", stops=True),
    Key("allowed_hosts", _ConfigParser._readAllowedHosts, "allowedHosts", default=[]),
    Key("max_job_series", _ConfigParser._readMaxJobSeries, "maxJobSeries",
        default=fields(StatusConfig).maxJobSeries.default, stops=True),
    Check(_ConfigParser._checkListen),
)  # fmt: skip
_STATUS_KEYS = keyNames(_STATUS_TABLE)
