# -*- test-case-name: tests.test_config -*-
"""
The C{defaults} and C{jobs} sections.  A new per-job limit is one
L{_IntSetting} in L{_SETTINGS} and the place L{JobsReader._readJob} puts
it.
"""

from __future__ import annotations

from typing import Mapping

from attrs import frozen

from imapmig.config.model import (
    JobConfig,
    PipelineConfig,
    RetryConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import _NAME, _describe, _key
from imapmig.config.sources import SourcesReader
from imapmig.mail.folders import FolderRules


@frozen
class _IntSetting:
    """
    An integer setting that C{defaults} sets and every job may override.
    """

    key: str
    default: int
    minimum: int
    maximum: int | None


_CONNECTIONS = _IntSetting("connections", 2, 1, 32)
_WINDOW_MESSAGES = _IntSetting("window_messages", 1000, 1, None)
_WINDOW_BYTES = _IntSetting("window_bytes", 32 * 1024 * 1024, 65536, None)
_BATCH_MESSAGES = _IntSetting("batch_messages", 50, 1, 1000)
_BATCH_BYTES = _IntSetting("batch_bytes", 8 * 1024 * 1024, 1, None)
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
    _RETRY_ATTEMPTS,
    _RETRY_MAX_DELAY,
    _MESSAGE_ATTEMPTS,
    _QUOTA_PAUSE,
)


_DEFAULTS_KEYS = tuple(s.key for s in _SETTINGS)
_JOB_KEYS = (
    "name",
    "source",
    "destination",
    "folders",
    "identity",
    "eight_bit",
    "folder_name_fallback",
) + _DEFAULTS_KEYS
_IDENTITIES = ("fingerprint", "message-id", "off")
_EIGHT_BIT = ("literal", "fail")



class JobsReader(SourcesReader):
    """
    Reads the job defaults and the jobs.
    """

    def _readDefaults(self, top: Mapping[str, object]) -> dict[str, int]:
        """
        Read C{defaults}; a setting that is absent or invalid takes its
        built-in default, so jobs can still be checked.
        """
        values = {setting.key: setting.default for setting in _SETTINGS}
        if "defaults" not in top:
            return values
        defaults = self._readMapping(top["defaults"], "defaults", _DEFAULTS_KEYS)
        if defaults is None:
            return values
        for setting in _SETTINGS:
            if setting.key in defaults:
                value = self._readInteger(
                    defaults[setting.key],
                    _key("defaults", setting.key),
                    setting.minimum,
                    setting.maximum,
                )
                if value is not None:
                    values[setting.key] = value
        return values

    def _readJobs(
        self,
        top: Mapping[str, object],
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> tuple[JobConfig, ...] | None:
        """
        Read C{jobs}: a non-empty list with unique names.
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
        jobs: list[JobConfig] = []
        firstUse: dict[str, str] = {}
        for index, item in enumerate(value):
            if isinstance(item, dict) and "jobs_from" in item:
                jobs.extend(
                    self._readUserList(item, f"jobs[{index}]", servers, defaults, firstUse)
                )
                continue
            job = self._readJob(item, f"jobs[{index}]", servers, defaults, firstUse)
            if job is not None:
                jobs.append(job)
        return tuple(jobs)

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
        keys: tuple[str, ...] = _JOB_KEYS,
        source: SourceConfig | None = None,
    ) -> JobConfig | None:
        """
        Read one job, recording where its name is first used in
        C{firstUse}.

        @param keys: the keys the job may have.
        @param source: the job's source when the caller has read it (a
            template's), instead of the job's C{source} key.
        """
        job = self._readMapping(value, path, keys)
        if job is None:
            return None
        ok = True

        name = None
        if "name" not in job:
            self._problem(_key(path, "name"), "missing: every job needs a unique name")
        else:
            name = self._readString(job["name"], _key(path, "name"))
            if name is not None and not _NAME.fullmatch(name):
                self._problem(
                    _key(path, "name"),
                    f"invalid job name {name!r}: use letters, digits and . _ @ -,"
                    " starting with a letter or digit",
                )
                name = None
            if name is not None:
                if name in firstUse:
                    self._problem(
                        _key(path, "name"),
                        f"duplicate job name {name!r} (first used by {firstUse[name]})",
                    )
                    name = None
                else:
                    firstUse[name] = path
        ok = ok and name is not None

        if source is not None:
            pass
        elif "source" not in job:
            self._problem(
                _key(path, "source"),
                "missing: give {maildir: DIR}, {eml_dir: DIR}, {mbox: PATH}"
                " or {server: NAME, user: USER, password_file: FILE}",
            )
        else:
            source = self._readSource(job["source"], _key(path, "source"), servers)
        ok = ok and source is not None

        folders = FolderRules()
        if "folders" in job:
            rules = self._readFolderRules(job["folders"], _key(path, "folders"))
            if rules is None:
                ok = False
            else:
                folders = rules

        identity = "fingerprint"
        if job.get("identity", True) is False:
            # YAML reads an unquoted off (or no, false) as false: the
            # same word as status: off and starttls: off.
            identity = "off"
        elif "identity" in job:
            chosen = self._readChoice(
                job["identity"], _key(path, "identity"), _IDENTITIES, "identity check"
            )
            if chosen is None:
                ok = False
            else:
                identity = chosen

        eightBit = "literal"
        if "eight_bit" in job:
            chosen = self._readChoice(
                job["eight_bit"], _key(path, "eight_bit"), _EIGHT_BIT, "eight_bit choice"
            )
            if chosen is None:
                ok = False
            else:
                eightBit = chosen

        folderNameFallback = True
        if "folder_name_fallback" in job:
            value = job["folder_name_fallback"]
            if isinstance(value, bool):
                folderNameFallback = value
            else:
                self._problem(
                    _key(path, "folder_name_fallback"),
                    f"must be true or false, not {_describe(value)}",
                )
                ok = False

        destination = None
        if "destination" not in job:
            self._problem(
                _key(path, "destination"),
                "missing: give {server: NAME, user: USER, password_file: FILE}",
            )
        else:
            destination = self._readDestination(
                job["destination"], _key(path, "destination"), servers
            )
        ok = ok and destination is not None

        settings = dict(defaults)
        for setting in _SETTINGS:
            if setting.key in job:
                override = self._readInteger(
                    job[setting.key],
                    _key(path, setting.key),
                    setting.minimum,
                    setting.maximum,
                )
                if override is None:
                    ok = False
                else:
                    settings[setting.key] = override

        if not ok:
            return None
        assert name is not None and source is not None and destination is not None
        return JobConfig(
            name=name,
            source=source,
            destination=destination,
            connections=settings[_CONNECTIONS.key],
            pipeline=PipelineConfig(
                windowMessages=settings[_WINDOW_MESSAGES.key],
                windowBytes=settings[_WINDOW_BYTES.key],
                batchMessages=settings[_BATCH_MESSAGES.key],
                batchBytes=settings[_BATCH_BYTES.key],
            ),
            folders=folders,
            identity=identity,
            eightBit=eightBit,
            folderNameFallback=folderNameFallback,
            retry=RetryConfig(
                attempts=settings[_RETRY_ATTEMPTS.key],
                maxDelay=settings[_RETRY_MAX_DELAY.key],
                messageAttempts=settings[_MESSAGE_ATTEMPTS.key],
                quotaPause=settings[_QUOTA_PAUSE.key],
            ),
        )
