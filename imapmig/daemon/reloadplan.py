# -*- test-case-name: tests.test_reload -*-
"""
What a reload of the configuration changes: a pure comparison of the
configuration the daemon runs with and the one just read, with no I/O and
no knowledge of the queue's state (L{imapmig.daemon.reloadapply} applies it).

A fleet sharing one PostgreSQL queue will compute the same plan and apply
it as a few queue operations, so the plan says only what differs:

  - jobs added (in the new file's order) and removed (by name);
  - jobs in both whose configuration, as a run uses it, differs (source,
    destination, its server's settings, folders, pipeline, retries; the
    connections its servers' limits let it have), each with the keys that
    differ; a job that only moved in the file has not changed, nor has
    one whose server's limits changed without changing what it may have
    (the limits are the grants' and the throttles', named once, under
    C{servers});
  - C{max_jobs}, the servers' connection limits (each key, old and new
    value) and C{stop_timeout};
  - the settings a running daemon cannot take on, which a reload logs
    and leaves as they were.
"""

from __future__ import annotations

import re
from typing import Callable, TypeVar

from attrs import evolve, fields, frozen, has

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.config.model import Config, ImapSourceConfig, JobConfig, NotifyConfig, ServerConfig
from imapmig.access.secrets import Secret

__all__ = ["ReloadPlan", "planReload", "keptForRestart"]


@frozen
class ReloadPlan:
    """
    How a new configuration differs from the running one.

    @ivar added: the new jobs, in the new file's order.
    @ivar removed: the names of the jobs no longer configured, in the old
        file's order.
    @ivar changed: the new configuration of each job in both files whose
        configuration, as a run uses it, differs, in the new file's order.
    @ivar changedKeys: for each of L{changed}, the keys that differ
        (C{folders.exclude}, C{servers.dove.timeout}, C{connections}).
    @ivar refreshed: the new configuration of each job that differs only
        in its servers' limits, which do not change its runs: the queue
        takes it, nothing is said of it.
    @ivar maxJobs: C{(old, new)} when C{max_jobs} changed, else L{None}.
    @ivar limitsChanged: the servers whose connection limits
        (C{max_connections}, C{per_account.max_connections}) changed,
        were added with one, or were removed having had one.
    @ivar limitChanges: each connection limit that changed: its key
        (C{servers.dove.max_connections}), old and new value.
    @ivar limits: every server's limits in the new configuration, by name.
    @ivar stopTimeout: C{(old, new)} when C{stop_timeout} changed.
    @ivar needsRestart: the settings that changed but only take effect
        at the next start (C{state}, C{status.listen}, ...).
    @ivar notifyChanges: the C{notify} keys that changed and apply
        (L{imapmig.daemon.webhook.watchRun}): C{notify.webhook_url},
        C{notify.token_file}, C{notify.stalled_after}.
    """

    added: tuple[JobConfig, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[JobConfig, ...] = ()
    changedKeys: tuple[tuple[str, ...], ...] = ()
    refreshed: tuple[JobConfig, ...] = ()
    maxJobs: tuple[int, int] | None = None
    limitsChanged: tuple[str, ...] = ()
    limitChanges: tuple[tuple[str, object, object], ...] = ()
    limits: tuple[tuple[str, ServerLimits], ...] = ()
    stopTimeout: tuple[float, float] | None = None
    needsRestart: tuple[str, ...] = ()
    notifyChanges: tuple[str, ...] = ()

    @property
    def grantsChanged(self) -> bool:
        """
        Whether the grants' limits (C{max_jobs}, connection limits) change.
        """
        return self.maxJobs is not None or bool(self.limitsChanged)


def _connectionLimits(limits: ServerLimits) -> ServerLimits:
    """
    C{limits} without its rates and budgets: what the grants read.
    """
    return ServerLimits(
        maxConnections=limits.maxConnections,
        perAccount=AccountLimits(maxConnections=limits.perAccount.maxConnections),
    )


def _rates(limits: ServerLimits) -> ServerLimits:
    """
    C{limits} without its connection limits: what the throttles read.
    """
    return evolve(
        limits,
        maxConnections=None,
        perAccount=evolve(limits.perAccount, maxConnections=None),
    )


def _servers(config: Config) -> dict[str, ServerConfig]:
    return {server.name: server for server in config.servers}


def _snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda upper: "_" + upper.group(0).lower(), name)


def differences(old: object, new: object, path: str) -> list[tuple[str, object, object]]:
    """
    The fields that differ between C{old} and C{new} (frozen attrs values
    of one class, or anything comparable), each as its dotted path under
    C{path} (C{snake_case}, as the configuration's keys are written) with
    its old and new value.  A L{Secret} is one field.
    """
    if old == new:
        return []
    if _isOneField(old, new):
        return [(path, old, new)]
    found: list[tuple[str, object, object]] = []
    for field in fields(type(old)):  # type: ignore[arg-type]
        found += differences(
            getattr(old, field.name), getattr(new, field.name), f"{path}.{_snake(field.name)}"
        )
    return found


def _isOneField(old: object, new: object) -> bool:
    """
    Whether C{old} and C{new} differ as one field: values of different
    types, not attrs values, or secrets.
    """
    return type(old) is not type(new) or not has(type(old)) or isinstance(old, Secret)


# How the paths of JobConfig's fields are written in the file.
_JOB_KEYS = (
    (re.compile(r"^(source|destination)\.server\.name$"), r"\1.server"),
    (re.compile(r"^pipeline\."), ""),
    (re.compile(r"^retry\.(attempts|max_delay)$"), r"retry_\1"),
    (re.compile(r"^retry\."), ""),
    (re.compile(r"^source\.(path|quoting|folder)$"), "source"),
)


def _jobKey(path: str, job: JobConfig) -> str:
    """
    The key in the file of a field of C{job}: a server's settings are
    named under C{servers}, e.g. C{servers.dove.timeout}.
    """
    serverKey = _serverKey(path, job)
    if serverKey is not None:
        return serverKey
    for pattern, replacement in _JOB_KEYS:
        path = pattern.sub(replacement, path)
    return path


def _serverKey(path: str, job: JobConfig) -> str | None:
    """
    The key under C{servers} of the field at C{path} of C{job}'s source's
    or destination's server (other than its name), or L{None}.
    """
    for side in ("source", "destination"):
        prefix = f"{side}.server."
        if path.startswith(prefix) and path != f"{prefix}name":
            return f"servers.{getattr(job, side).server.name}.{path[len(prefix):]}"
    return None


def _asRun(job: JobConfig) -> JobConfig:
    """
    C{job} as its runs use it: with the connections its servers' limits
    let it have, and without those limits (the grants and the throttles
    read them, from the servers' configuration).
    """
    connections = job.destination.server.limits.capConnections(job.connections)
    destination = evolve(
        job.destination, server=evolve(job.destination.server, limits=ServerLimits())
    )
    source = job.source
    if isinstance(source, ImapSourceConfig):
        connections = source.server.limits.capConnections(connections)
        source = evolve(source, server=evolve(source.server, limits=ServerLimits()))
    return evolve(job, connections=connections, source=source, destination=destination)


def _jobChanges(
    old: Config, new: Config
) -> tuple[list[JobConfig], list[tuple[str, ...]], list[JobConfig]]:
    """
    The jobs in both C{old} and C{new} that changed as a run uses them,
    with the keys that did; and those that changed only in their servers'
    limits.
    """
    changed: list[JobConfig] = []
    keys: list[tuple[str, ...]] = []
    refreshed: list[JobConfig] = []
    for before, job in _differing(old, new):
        paths = differences(_asRun(before), _asRun(job), "")
        if not paths:
            refreshed.append(job)
            continue
        changed.append(job)
        keys.append(_changedKeys(paths, job))
    return changed, keys, refreshed


def _differing(old: Config, new: Config) -> list[tuple[JobConfig, JobConfig]]:
    """
    Each job of C{new} that C{old} has, configured otherwise, with its old
    configuration, in C{new}'s order.
    """
    oldJobs = {job.name: job for job in old.jobs}
    return [
        (oldJobs[job.name], job)
        for job in new.jobs
        if job.name in oldJobs and oldJobs[job.name] != job
    ]


def _changedKeys(paths: list[tuple[str, object, object]], job: JobConfig) -> tuple[str, ...]:
    """
    The keys in the file of the fields of C{job} that changed (L{paths},
    from L{differences}); a job that names another server has changed its
    server, not that server's settings.
    """
    named = list(dict.fromkeys(_jobKey(path[1:], job) for path, _, _ in paths))
    for side in ("source", "destination"):
        if f"{side}.server" in named:
            named = _notUnder(named, f"servers.{getattr(job, side).server.name}.")
    return tuple(named)


def _notUnder(keys: list[str], prefix: str) -> list[str]:
    """
    The keys of C{keys} that are not under C{prefix}.
    """
    return [key for key in keys if not key.startswith(prefix)]


def _limitChanges(
    oldServers: dict[str, ServerConfig], newServers: dict[str, ServerConfig]
) -> list[tuple[str, object, object]]:
    """
    Each connection limit that differs, by its key, with its old and new
    value (L{None}: none, as for a server added or removed).
    """
    found: list[tuple[str, object, object]] = []
    for name in dict.fromkeys([*newServers, *oldServers]):
        found += differences(
            _connectionLimits(_limitsOf(oldServers, name)),
            _connectionLimits(_limitsOf(newServers, name)),
            f"servers.{name}",
        )
    return found


def _limitsOf(servers: dict[str, ServerConfig], name: str) -> ServerLimits:
    """
    The limits of the server C{name} of C{servers}: none if it has none.
    """
    return servers[name].limits if name in servers else ServerLimits()


def _rateChanges(
    oldServers: dict[str, ServerConfig], newServers: dict[str, ServerConfig]
) -> list[str]:
    """
    The keys of the rates and budgets that changed on servers in both: the
    throttles' buckets and budgets are made once per server and account
    (L{imapmig.throttle}), and shared.
    """
    found: list[str] = []
    for name, server in newServers.items():
        if name in oldServers:
            found += _keys(
                differences(
                    _rates(oldServers[name].limits), _rates(server.limits), f"servers.{name}"
                )
            )
    return found


def _keys(changes: list[tuple[str, object, object]]) -> list[str]:
    """
    The keys of C{changes}.
    """
    return [key for key, _, _ in changes]


def planReload(old: Config, new: Config) -> ReloadPlan:
    """
    Compare the running configuration C{old} with C{new}.

    @return: what differs (see L{ReloadPlan}).
    """
    oldNames = {job.name for job in old.jobs}
    newNames = {job.name for job in new.jobs}
    changed, changedKeys, refreshed = _jobChanges(old, new)
    oldServers, newServers = _servers(old), _servers(new)
    limitChanges = _limitChanges(oldServers, newServers)
    return ReloadPlan(
        added=tuple(_notIn(new.jobs, oldNames)),
        removed=tuple(job.name for job in _notIn(old.jobs, newNames)),
        changed=tuple(changed),
        changedKeys=tuple(changedKeys),
        refreshed=tuple(refreshed),
        maxJobs=_pair(old.maxJobs, new.maxJobs),
        limitsChanged=_serverNames(limitChanges),
        limitChanges=tuple(limitChanges),
        limits=tuple((name, server.limits) for name, server in newServers.items()),
        stopTimeout=_pair(old.stopTimeout, new.stopTimeout),
        needsRestart=(*_restartChanges(old, new), *_rateChanges(oldServers, newServers)),
        notifyChanges=_notifyChanges(old.notify, new.notify),
    )


_T = TypeVar("_T")


def _notIn(jobs: tuple[JobConfig, ...], names: set[str]) -> list[JobConfig]:
    """
    The jobs of C{jobs} whose names are not among C{names}, in order.
    """
    return [job for job in jobs if job.name not in names]


def _serverNames(changes: list[tuple[str, object, object]]) -> tuple[str, ...]:
    """
    The servers of the keys C{servers.NAME....} of C{changes}, each once.
    """
    return tuple(dict.fromkeys(key.split(".")[1] for key, _, _ in changes))


def _restartChanges(old: Config, new: Config) -> list[str]:
    """
    The settings of L{_RESTART_SETTINGS} that differ.
    """
    return [key for key, changes in _RESTART_SETTINGS if changes(old, new)]


def _pair(old: _T, new: _T) -> tuple[_T, _T] | None:
    """
    C{(old, new)} if they differ, else L{None}.
    """
    return None if old == new else (old, new)


@frozen
class _StatusSetting:
    """
    A setting of the status site, which a running daemon cannot take on.

    @ivar field: its field of L{StatusConfig}.
    @ivar absent: its value without a status site.
    """

    field: str
    absent: object

    def changes(self, old: Config, new: Config) -> bool:
        """
        Whether the setting differs between C{old} and C{new}.
        """
        return self._value(old) != self._value(new)

    def _value(self, config: Config) -> object:
        return self.absent if config.status is None else getattr(config.status, self.field)


def _stateChanges(old: Config, new: Config) -> bool:
    """
    Whether the state database differs.
    """
    return old.state != new.state


def _maxJobSeriesChanges(old: Config, new: Config) -> bool:
    """
    Whether C{status.max_job_series} differs (a status site added or taken
    away is C{status.listen}'s change).
    """
    return bool(old.status and new.status and old.status.maxJobSeries != new.status.maxJobSeries)


def _notifyAddedOrRemoved(old: Config, new: Config) -> bool:
    """
    Whether C{notify} was added or taken away (a changed one applies:
    L{imapmig.daemon.webhook.watchRun}).
    """
    return (old.notify is None) != (new.notify is None)


# The settings a running daemon cannot take on: a reload logs them and
# leaves them as they were (then the servers' rates and budgets).
_RESTART_SETTINGS: tuple[tuple[str, Callable[[Config, Config], bool]], ...] = (
    ("state", _stateChanges),
    ("fleet", lambda old, new: old.fleet != new.fleet),
    ("status.listen", _StatusSetting("listen", None).changes),
    ("status.token_file", _StatusSetting("token", None).changes),
    ("status.allowed_hosts", _StatusSetting("allowedHosts", ()).changes),
    ("status.max_job_series", _maxJobSeriesChanges),
    ("notify", _notifyAddedOrRemoved),
)


def _notifyChanges(old: NotifyConfig | None, new: NotifyConfig | None) -> tuple[str, ...]:
    """
    The C{notify} keys that differ between C{old} and C{new}, when both
    notify (one added or taken away needs a restart instead).
    """
    if old is None or new is None:
        return ()
    return tuple(
        key
        for key, before, after in (
            ("notify.webhook_url", old.webhookURL, new.webhookURL),
            ("notify.token_file", old.token, new.token),
            ("notify.stalled_after", old.stalledAfter, new.stalledAfter),
        )
        if before != after
    )


def keptForRestart(old: Config, new: Config) -> Config:
    """
    The configuration the daemon runs with after a reload of C{new}: C{new}
    with the settings a reload cannot change (its state database and
    fleet, its status listener and token, whether it notifies) kept from C{old}, so
    that the next reload says again that they need a restart.
    """
    notify = old.notify if (old.notify is None) != (new.notify is None) else new.notify
    return evolve(new, state=old.state, fleet=old.fleet, status=old.status, notify=notify)
