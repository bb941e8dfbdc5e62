# -*- test-case-name: tests.test_reload -*-
"""
What a reload of the configuration changes: a pure comparison of the
configuration the daemon runs with and the one just read, with no I/O and
no knowledge of the queue's state (L{imapmig.reloadapply} applies it).

A fleet sharing one PostgreSQL queue will compute the same plan and apply
it as a few queue operations, so the plan says only what differs:

  - jobs added (in the new file's order) and removed (by name);
  - jobs in both whose configuration differs in any way (source,
    destination, its server's settings, folders, pipeline, retries);
    a job that only moved in the file has not changed;
  - C{max_jobs}, the servers' connection limits and C{stop_timeout};
  - the settings a running daemon cannot take on (L{RESTART_SETTINGS}),
    which a reload logs and leaves as they were.
"""

from __future__ import annotations

from attrs import evolve, frozen

from imapmig.config.limits import ServerLimits
from imapmig.config.model import Config, JobConfig, ServerConfig

__all__ = ["ReloadPlan", "planReload", "keptForRestart"]


@frozen
class ReloadPlan:
    """
    How a new configuration differs from the running one.

    @ivar added: the new jobs, in the new file's order.
    @ivar removed: the names of the jobs no longer configured, in the old
        file's order.
    @ivar changed: the new configuration of each job in both files whose
        configuration differs, in the new file's order.
    @ivar maxJobs: C{(old, new)} when C{max_jobs} changed, else L{None}.
    @ivar limitsChanged: the servers whose connection limits
        (C{max_connections}, C{per_account.max_connections}) changed,
        were added with one, or were removed having had one.
    @ivar limits: every server's limits in the new configuration, by name.
    @ivar stopTimeout: C{(old, new)} when C{stop_timeout} changed.
    @ivar needsRestart: the settings that changed but only take effect
        at the next start (C{state}, C{status.listen}, ...).
    """

    added: tuple[JobConfig, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[JobConfig, ...] = ()
    maxJobs: tuple[int, int] | None = None
    limitsChanged: tuple[str, ...] = ()
    limits: tuple[tuple[str, ServerLimits], ...] = ()
    stopTimeout: tuple[float, float] | None = None
    needsRestart: tuple[str, ...] = ()

    @property
    def grantsChanged(self) -> bool:
        """
        Whether the grants' limits (C{max_jobs}, connection limits) change.
        """
        return self.maxJobs is not None or bool(self.limitsChanged)


def _connectionLimits(limits: ServerLimits | None) -> tuple[int | None, int | None]:
    if limits is None:
        return (None, None)
    return (limits.maxConnections, limits.perAccount.maxConnections)


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


def planReload(old: Config, new: Config) -> ReloadPlan:
    """
    Compare the running configuration C{old} with C{new}.

    @return: what differs (see L{ReloadPlan}).
    """
    oldJobs = {job.name: job for job in old.jobs}
    newNames = {job.name for job in new.jobs}
    added = tuple(job for job in new.jobs if job.name not in oldJobs)
    removed = tuple(job.name for job in old.jobs if job.name not in newNames)
    changed = tuple(
        job for job in new.jobs if job.name in oldJobs and oldJobs[job.name] != job
    )
    oldServers, newServers = _servers(old), _servers(new)
    limitsChanged = tuple(
        name
        for name in [*newServers, *(name for name in oldServers if name not in newServers)]
        if _connectionLimits(oldServers[name].limits if name in oldServers else None)
        != _connectionLimits(newServers[name].limits if name in newServers else None)
    )
    needsRestart: list[str] = []
    if old.statePath != new.statePath:
        needsRestart.append("state")
    oldListen = None if old.status is None else old.status.listen
    newListen = None if new.status is None else new.status.listen
    if oldListen != newListen:
        needsRestart.append("status.listen")
    oldToken = None if old.status is None else old.status.token
    newToken = None if new.status is None else new.status.token
    if oldToken != newToken:
        needsRestart.append("status.token_file")
    oldHosts = () if old.status is None else old.status.allowedHosts
    newHosts = () if new.status is None else new.status.allowedHosts
    if oldHosts != newHosts:
        needsRestart.append("status.allowed_hosts")
    # A status site added or taken away is status.listen's change.
    if old.status and new.status and old.status.maxJobSeries != new.status.maxJobSeries:
        needsRestart.append("status.max_job_series")
    # A changed notify: applies (imapmig.webhook.watchRun); one added or
    # taken away needs a restart.
    if (old.notify is None) != (new.notify is None):
        needsRestart.append("notify")
    for name, server in newServers.items():
        before = oldServers.get(name)
        if before is not None and _rates(before.limits) != _rates(server.limits):
            # The throttles' buckets and budgets are made once per server
            # and account (imapmig.schedule.throttle), and shared.
            needsRestart.append(f"servers.{name} rates and daily budgets")
    return ReloadPlan(
        added=added,
        removed=removed,
        changed=changed,
        maxJobs=None if old.maxJobs == new.maxJobs else (old.maxJobs, new.maxJobs),
        limitsChanged=limitsChanged,
        limits=tuple((name, server.limits) for name, server in newServers.items()),
        stopTimeout=(
            None if old.stopTimeout == new.stopTimeout else (old.stopTimeout, new.stopTimeout)
        ),
        needsRestart=tuple(needsRestart),
    )


def keptForRestart(old: Config, new: Config) -> Config:
    """
    The configuration the daemon runs with after a reload of C{new}: C{new}
    with the settings a reload cannot change (its state database, its
    status listener and token, whether it notifies) kept from C{old}, so
    that the next reload says again that they need a restart.
    """
    notify = old.notify if (old.notify is None) != (new.notify is None) else new.notify
    return evolve(new, statePath=old.statePath, status=old.status, notify=notify)
