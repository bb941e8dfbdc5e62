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
from typing import Mapping

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
    RetryConfig,
    ServerConfig,
    SourceConfig,
    StatusConfig,
)
from imapmig.config.notify import NOTIFY_KEYS, NotifyReader
from imapmig.config.reader import _describe
from imapmig.config.servers import _DEFAULT_LISTEN, _SERVER_KEYS, ServersReader, isLoopbackHost
from imapmig.config.sources import _SOURCE_KEYS
from imapmig.config.userlist import _COLUMNS, _CREDENTIAL_KEYS, _TEMPLATE_KEYS, UserListReader
from imapmig.configfile import readConfigFile
from imapmig.errors import ConfigError
from imapmig.mail.folders import FolderRules
from imapmig.access.secrets import PasswordFileError, Secret, readPasswordFile

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
    "RetryConfig",
    "Secret",
    "ServerConfig",
    "SourceConfig",
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


_DEFAULT_STATE_PATH = "/var/lib/imapmig/state.sqlite"
_DEFAULT_STOP_TIMEOUT = 30.0

# The keys of each section; the tests check that the example file uses
# every one of them.
_TOP_KEYS = (
    "state", "status", "stop_timeout", "max_jobs", "servers", "credentials", "defaults",
    "jobs", "notify",
)  # fmt: skip
_STATUS_KEYS = ("listen", "token_file", "allowed_hosts", "max_job_series")
# The most status.max_job_series may be: 9 series a job, 9 million series.
_MAX_JOB_SERIES_BOUND = 1_000_000

# A host name of status.allowed_hosts: DNS labels (an IPv4 address
# matches too, harmlessly: addresses are always allowed), or ".NAME" for
# every name under NAME.
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"\.?{_LABEL}(\.{_LABEL})*")


def loadConfig(path: str, environ: Mapping[str, str] | None = None) -> Config:
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
    """
    read = readConfigFile(path)
    return parseConfig(read.document, path, environ, read.looseFileMode)


def parseConfig(
    document: object,
    path: str,
    environ: Mapping[str, str] | None = None,
    looseFileMode: int | None = None,
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
    @return: the configuration.
    @raise ConfigError: every problem found.
    """
    parser = _ConfigParser(path)
    parser._environment = environ
    parser._looseFileMode = looseFileMode
    return parser.parse(document)


MIN_TOKEN_LENGTH = 16
"""
The fewest characters a status token may have: it is all that stands
between anyone who reaches the listener and the controls.
"""


class _ConfigParser(UserListReader, ServersReader, NotifyReader):
    """
    Walks a YAML document, building the configuration and collecting every
    problem.
    """

    def parse(self, document: object) -> Config:
        """
        Build the configuration from C{document}.

        @raise ConfigError: every problem found.
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
        self._checkInlineSecrets(document)

        statePath = self._readStatePath(top.get("state", _DEFAULT_STATE_PATH))
        status = self._readStatus(top)
        servers = self._readServers(top)
        defaults = self._readDefaults(top)
        self._readCredentials(top)
        jobs = self._readJobs(top, servers, defaults)
        stopTimeout = self._readSeconds(
            top.get("stop_timeout", _DEFAULT_STOP_TIMEOUT), "stop_timeout"
        )
        maxJobs = self._readMaxJobs(top)
        notify = self._readNotify(top["notify"]) if "notify" in top else None

        if self._problems:
            raise ConfigError(self._problems)
        assert statePath is not None and servers is not None and jobs is not None
        assert stopTimeout is not None and maxJobs is not None
        return Config(
            maxJobs=maxJobs,
            stopTimeout=stopTimeout,
            path=os.path.abspath(self._path),
            statePath=statePath,
            status=status,
            servers=tuple(s for s in servers.values() if s is not None),
            jobs=jobs,
            notify=notify,
        )

    def _readStatePath(self, value: object) -> str | None:
        """
        Read C{state}: the SQLite database, in an existing directory.
        """
        written = self._readString(value, "state")
        if written is None:
            return None
        resolved = self._resolve(written)
        parent = os.path.dirname(resolved)
        if os.path.isdir(resolved):
            self._problem("state", f"{resolved} is a directory; give a file name in it")
        elif not os.path.isdir(parent):
            self._problem("state", f"directory {parent} does not exist")
        elif not os.access(parent, os.W_OK | os.X_OK):
            self._problem("state", f"directory {parent} is not writable")
        else:
            return resolved
        return None

    def _readStatus(self, top: Mapping[str, object]) -> StatusConfig | None:
        """
        Read C{status}: absent means the default listener, C{off} none.
        """
        if "status" not in top:
            return StatusConfig(listen=_DEFAULT_LISTEN)
        value = top["status"]
        if value is False or value == "off":
            return None
        if not isinstance(value, dict):
            self._problem(
                "status",
                "expected a mapping {listen: ENDPOINT} or off,"
                f" got {_describe(value)}",
            )
            return None
        status = self._readMapping(value, "status", _STATUS_KEYS)
        assert status is not None
        listen = self._readString(
            status.get("listen", _DEFAULT_LISTEN), "status.listen"
        )
        token = None
        if "token_file" in status:
            token = self._readStatusToken(status["token_file"])
            if token is None:
                return None
        allowedHosts = self._readAllowedHosts(status.get("allowed_hosts", []))
        series = {}
        if "max_job_series" in status:
            bound = self._readInteger(
                status["max_job_series"], "status.max_job_series", 0, _MAX_JOB_SERIES_BOUND
            )
            if bound is None:
                return None
            series["maxJobSeries"] = bound
        if listen is None or not self._checkServerEndpoint(listen, "status.listen"):
            return None
        if allowedHosts is None:
            return None
        return StatusConfig(listen=listen, token=token, allowedHosts=allowedHosts, **series)

    def _readAllowedHosts(self, value: object) -> tuple[str, ...] | None:
        """
        Read C{status.allowed_hosts}: a list of host names (C{.NAME} for
        every name under NAME), each lower-cased, without a trailing dot.
        """
        path = "status.allowed_hosts"
        if not isinstance(value, list):
            self._problem(path, f"expected a list of host names, got {_describe(value)}")
            return None
        names: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self._problem(f"{path}[{index}]", f"expected a host name, got {_describe(item)}")
                return None
            name = item.strip().lower().rstrip(".")
            if not _HOST_NAME.fullmatch(name):
                self._problem(
                    f"{path}[{index}]",
                    f"{item!r} is not a host name (letters, digits, '-' and '.';"
                    " '.corp.example' for every name under corp.example; no port, no scheme)",
                )
                return None
            names.append(name)
        return tuple(names)

    def _readStatusToken(self, value: object) -> Secret | None:
        """
        Read C{status.token_file}: the bearer token of the controls, the
        file's first line with its surrounding whitespace stripped, from a
        file only its owner may read (the checks of a password file).
        """
        path = "status.token_file"
        written = self._readString(value, path)
        if written is None:
            return None
        resolved = self._resolve(written)
        try:
            token = readPasswordFile(resolved, "status token").strip()
        except PasswordFileError as e:
            self._problem(path, str(e))
            return None
        if not token:
            self._problem(path, f"status token file {resolved} holds only whitespace")
            return None
        if len(token) < MIN_TOKEN_LENGTH:
            self._problem(
                path,
                f"the status token in {resolved} has {len(token)} characters; at least"
                f" {MIN_TOKEN_LENGTH} are needed (make one with: openssl rand -hex 32)",
            )
            return None
        return Secret(token)
