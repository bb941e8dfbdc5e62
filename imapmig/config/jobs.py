# -*- test-case-name: tests.test_config -*-
"""
The C{defaults} and C{jobs} sections.  A new per-job limit is one
L{_IntSetting} in L{_SETTINGS} and the place L{JobsReader._readJob} puts
it.
"""

from __future__ import annotations

from typing import Any, Mapping

from attrs import frozen

from imapmig.config.model import (
    DestinationConfig,
    JobConfig,
    PipelineConfig,
    RetryConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import _NAME, ConfigReader, Key, Step, _describe, keyNames
from imapmig.config.sources import SourcesReader


@frozen
class _IntSetting:
    """
    An integer setting that C{defaults} sets and every job may override.
    """

    key: str
    default: int
    minimum: int
    maximum: int | None

    def read(self, reader: ConfigReader, value: object, path: str) -> int | None:
        """
        Read the setting's value: an integer within its bounds.
        """
        return reader._readInteger(value, path, self.minimum, self.maximum)


_CONNECTIONS = _IntSetting("connections", 2, 1, 32)
_WINDOW_MESSAGES = _IntSetting("window_messages", 1000, 1, None)
_WINDOW_BYTES = _IntSetting("window_bytes", 32 * 1024 * 1024, 65536, None)
_BATCH_MESSAGES = _IntSetting("batch_messages", 200, 1, 1000)
_BATCH_BYTES = _IntSetting("batch_bytes", 8 * 1024 * 1024, 1, None)
_BATCH_GROWTH = _IntSetting("batch_growth", 100, 0, None)
_RETRY_ATTEMPTS = _IntSetting("retry_attempts", 10, 1, None)
_RETRY_MAX_DELAY = _IntSetting("retry_max_delay", 300, 1, None)
_MESSAGE_ATTEMPTS = _IntSetting("message_attempts", 3, 1, None)
_QUOTA_PAUSE = _IntSetting("quota_pause", 3600, 1, None)
_SETTINGS = (
    _CONNECTIONS,
    _WINDOW_MESSAGES,
    _WINDOW_BYTES,
    _BATCH_MESSAGES,
    _BATCH_BYTES,
    _BATCH_GROWTH,
    _RETRY_ATTEMPTS,
    _RETRY_MAX_DELAY,
    _MESSAGE_ATTEMPTS,
    _QUOTA_PAUSE,
)


_DEFAULTS_KEYS = tuple(s.key for s in _SETTINGS)
_IDENTITIES = ("fingerprint", "message-id", "off")
_EIGHT_BIT = ("literal", "fail")



class JobsReader(SourcesReader):
    """
    Reads the job defaults and the jobs.

    @ivar _servers: while a job is read, the servers it may name.
    @ivar _firstUse: while a job is read, the path of the job that first
        used each name.
    """

    _servers: Mapping[str, ServerConfig | None] | None = None
    _firstUse: dict[str, str] = {}

    def _readDefaults(self, top: Mapping[str, object]) -> dict[str, int]:
        """
        Read C{defaults}; a setting that is absent or invalid takes its
        built-in default, so jobs can still be checked.
        """
        builtIn = {setting.key: setting.default for setting in _SETTINGS}
        defaults = self._readMapping(top.get("defaults", {}), "defaults", _DEFAULTS_KEYS)
        if defaults is None:
            return builtIn
        read: dict[str, Any] = {}
        for key in _DEFAULTS_TABLE:
            key.apply(self, defaults, "defaults", read)
        return {key: _given(read[key], default) for key, default in builtIn.items()}

    def _readJobs(
        self,
        top: Mapping[str, object],
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> tuple[JobConfig, ...] | None:
        """
        Read C{jobs}: a non-empty list with unique names.
        """
        items = self._readJobList(top)
        if items is None:
            return None
        jobs: list[JobConfig] = []
        firstUse: dict[str, str] = {}
        for index, item in enumerate(items):
            jobs += self._readJobItem(item, f"jobs[{index}]", servers, defaults, firstUse)
        self._checkTwice(jobs, firstUse)
        return tuple(jobs)

    def _checkTwice(self, jobs: list[JobConfig], firstUse: Mapping[str, str]) -> None:
        """
        Refuse two jobs that are one migration (L{JobConfig.migrationKey}:
        the same source, destination and folder rules), a user list's rows
        included: run together (or one renamed while it ran), each copies
        the same messages.
        """
        first: dict[tuple[object, ...], str] = {}
        for job in jobs:
            other = first.setdefault(job.migrationKey(), job.name)
            if other != job.name:
                self._problem(
                    firstUse[job.name],
                    f"job {job.name!r} has the same source, destination and folders as job"
                    f" {other!r} ({firstUse[other]}): the same messages would be copied twice",
                )

    def _readJobList(self, top: Mapping[str, object]) -> list[object] | None:
        """
        Read C{jobs} as a list, which must not be empty.
        """
        if "jobs" not in top:
            self._problem("jobs", "missing: at least one job is required")
            return None
        value = top["jobs"]
        if not isinstance(value, list):
            self._problem("jobs", f"expected a list of jobs, got {_describe(value)}")
            return None
        if not value:
            self._problem("jobs", "at least one job is required")
            return None
        return value

    def _readJobItem(
        self,
        item: object,
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
        firstUse: dict[str, str],
    ) -> list[JobConfig]:
        """
        Read an item of C{jobs}: a job, or a template with C{jobs_from}
        that makes one job per row of its user list.
        """
        if isinstance(item, dict) and "jobs_from" in item:
            return self._readUserList(item, path, servers, defaults, firstUse)
        job = self._readJob(item, path, servers, defaults, firstUse)
        return [] if job is None else [job]

    def _readUserList(
        self,
        template: dict[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
        firstUse: dict[str, str],
    ) -> list[JobConfig]:
        """
        Read a job template with C{jobs_from}: one job per row of a user
        list (L{imapmig.config.userlist} implements it).
        """
        raise NotImplementedError()

    def _readJob(
        self,
        value: object,
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
        firstUse: dict[str, str],
        keys: tuple[str, ...] | None = None,
        source: SourceConfig | None = None,
    ) -> JobConfig | None:
        """
        Read one job (the keys of L{_JOB_TABLE}), recording where its name
        is first used in C{firstUse}.

        @param keys: the keys the job may have (L{_JOB_KEYS} if L{None}).
        @param source: the job's source when the caller has read it (a
            template's), instead of the job's C{source} key.
        """
        job = self._readMapping(value, path, keys or _JOB_KEYS)
        if job is None:
            return None
        self._servers, self._firstUse = servers, firstUse
        values = self._readKeys(job, path, _JOB_TABLE if source is None else _TEMPLATE_TABLE)
        if values is None:
            return None
        values.setdefault("source", source)
        return _jobConfig(values, defaults)

    def _readJobName(self, value: object, path: str) -> str | None:
        """
        Read a job's C{name}: unique among the jobs.
        """
        name = self._readString(value, path)
        if name is None:
            return None
        if not _NAME.fullmatch(name):
            self._problem(
                path,
                f"invalid job name {name!r}: use letters, digits and . _ @ -,"
                " starting with a letter or digit",
            )
            return None
        if name in self._firstUse:
            self._problem(
                path, f"duplicate job name {name!r} (first used by {self._firstUse[name]})"
            )
            return None
        self._firstUse[name] = path.removesuffix(".name")
        return name

    def _readJobSource(self, value: object, path: str) -> SourceConfig | None:
        """
        Read a job's C{source}, an account naming one of the servers.
        """
        return self._readSource(value, path, self._servers)

    def _readJobDestination(self, value: object, path: str) -> DestinationConfig | None:
        """
        Read a job's C{destination}, an account on one of the servers.
        """
        return self._readDestination(value, path, self._servers)

    def _readIdentity(self, value: object, path: str) -> str | None:
        """
        Read C{identity}: one of L{_IDENTITIES}; YAML reads an unquoted
        off (or no, false) as false: the same word as status: off and
        starttls: off.
        """
        if value is False:
            return "off"
        return self._readChoice(value, path, _IDENTITIES, "identity check")

    def _readEightBit(self, value: object, path: str) -> str | None:
        """
        Read C{eight_bit}: one of L{_EIGHT_BIT}.
        """
        return self._readChoice(value, path, _EIGHT_BIT, "eight_bit choice")


def _jobConfig(values: Mapping[str, Any], defaults: Mapping[str, int]) -> JobConfig:
    """
    The job from the values of L{_JOB_TABLE}; a setting it leaves out
    takes its value in C{defaults}.
    """
    settings = {s.key: _given(values[s.key], defaults[s.key]) for s in _SETTINGS}
    return JobConfig(
        name=values["name"],
        source=values["source"],
        destination=values["destination"],
        connections=settings[_CONNECTIONS.key],
        pipeline=PipelineConfig(
            windowMessages=settings[_WINDOW_MESSAGES.key],
            windowBytes=settings[_WINDOW_BYTES.key],
            batchMessages=settings[_BATCH_MESSAGES.key],
            batchBytes=settings[_BATCH_BYTES.key],
            batchGrowth=settings[_BATCH_GROWTH.key],
        ),
        folders=values["folders"],
        identity=values["identity"],
        eightBit=values["eightBit"],
        folderNameFallback=values["folderNameFallback"],
        retry=RetryConfig(
            attempts=settings[_RETRY_ATTEMPTS.key],
            maxDelay=settings[_RETRY_MAX_DELAY.key],
            messageAttempts=settings[_MESSAGE_ATTEMPTS.key],
            quotaPause=settings[_QUOTA_PAUSE.key],
        ),
    )


def _given(value: int | None, default: int) -> int:
    """
    A setting as the job gives it, else its default.
    """
    return default if value is None else value


_SOURCE_MISSING = (
    "missing: give {maildir: DIR}, {eml_dir: DIR}, {mbox: PATH}"
    " or {server: NAME, user: USER, password_file: FILE}"
)
_DESTINATION_MISSING = "missing: give {server: NAME, user: USER, password_file: FILE}"

# A job's keys, in the order an unknown key's problem lists them.
_JOB_TABLE: tuple[Step, ...] = (
    Key("name", JobsReader._readJobName, missing="missing: every job needs a unique name"),
    Key("source", JobsReader._readJobSource, missing=_SOURCE_MISSING),
    Key("destination", JobsReader._readJobDestination, missing=_DESTINATION_MISSING),
    Key("folders", JobsReader._readFolderRules, default={}),
    Key("identity", JobsReader._readIdentity, default="fingerprint"),
    Key("eight_bit", JobsReader._readEightBit, "eightBit", default="literal"),
    Key("folder_name_fallback", JobsReader._readBoolean, "folderNameFallback", default=True),
    *(Key(setting.key, setting.read) for setting in _SETTINGS),
)
# A template's job, whose source the template reads.
_TEMPLATE_TABLE = tuple(
    step for step in _JOB_TABLE if not (isinstance(step, Key) and step.name == "source")
)
_JOB_KEYS = keyNames(_JOB_TABLE)
# The job settings defaults sets, each with its built-in default.
_DEFAULTS_TABLE = tuple(
    Key(setting.key, setting.read, default=setting.default) for setting in _SETTINGS
)
