# -*- test-case-name: tests.test_reload -*-
"""
Reloading the configuration (C{SIGHUP}, C{systemctl reload imapmig}).

L{ConfigReloader.reloadFrom} reads the configuration file again (in a
worker thread: it reads password files and user lists, which may be
large), compares it with the running one
(L{imapmig.daemon.reloadplan.planReload}), applies the difference
(L{applyReload}) and logs one summary line::

    Configuration reloaded from /etc/imapmig/imapmig.yaml: 2 jobs added,
    1 removed, limits of 1 server changed; 1 setting needs a restart:
    status.listen

An invalid new configuration is logged one problem per line, at error
level, and changes nothing.  Reloads never overlap: a reload asked for
while one is under way runs once that one has ended, and every request
made meanwhile shares that one next reload (two SIGHUPs in a row read the
file twice at most, never in parallel).

Observers (L{IReloadObserver}, e.g. the systemd notifier) are told when
each reload starts and how it ended.
"""

from __future__ import annotations

import gc
import os
import stat
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from twisted.internet.defer import Deferred, fail, maybeDeferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from imapmig.config.model import Config
from imapmig.errors import ConfigError, ImapmigError
from imapmig.daemon.reloadapply import ReloadApplied, ReloadTarget, applyReload, fleetLeaving
from imapmig.state import JobHold
from imapmig.units import plural

if TYPE_CHECKING:
    # Imported by a reload (ConfigReloader.reload), not by a start: its
    # comparisons' regular expressions and classes (bench/results/startup.md).
    from imapmig.daemon.reloadplan import ReloadPlan

__all__ = [
    "ConfigReloader",
    "IReloadObserver",
    "ReloadTarget",
    "applyReload",
    "describeReload",
    "tlsUnavailable",
]

log = Logger()


class IReloadObserver(Protocol):
    """
    Told around every reload of the configuration, in this order.
    """

    def reloadStarted(self) -> None:
        """
        A reload starts (the file is about to be read).
        """

    def reloadEnded(self, applied: bool) -> None:
        """
        The reload ended: C{applied} if the new configuration was applied,
        C{False} if it was invalid (nothing changed).
        """


def tlsUnavailable() -> bool:
    """
    Whether this process runs without TLS (L{imapmig.access.cleartext.withoutTLS}
    made C{import OpenSSL} fail at start-up): a configuration that needs
    TLS then needs a restart.
    """
    return "OpenSSL" in sys.modules and sys.modules["OpenSSL"] is None


def _value(value: object) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


# The most keys of the changed jobs the summary names.
_NAMED_KEYS = 6


def _changedJobs(plan: ReloadPlan, applied: ReloadApplied) -> str:
    """
    What changed in the changed jobs: C{"(folders.exclude; 1 from its next
    run)"}.
    """
    keys = _changedKeys(plan)
    named = ", ".join(keys[:_NAMED_KEYS]) + (", ..." if len(keys) > _NAMED_KEYS else "")
    running = len(applied.changedRunning)
    if running:
        named += f"; {running} from {'its' if running == 1 else 'their'} next run"
    return f" ({named})" if named else ""


def _changedKeys(plan: ReloadPlan) -> list[str]:
    """
    The keys that changed in any of the changed jobs, each once, in order.
    """
    return list(dict.fromkeys(key for keys in plan.changedKeys for key in keys))


def describeReload(plan: ReloadPlan, applied: ReloadApplied) -> str:
    """
    What a reload changed, as the summary line says it: C{"2 jobs added,
    1 removed, 3 changed (folders.exclude; 1 from its next run),
    servers.dove.max_connections 4 -> 8, notify.stalled_after; 1 setting
    needs a restart: status.listen"}, or C{"no change"}.
    """
    parts = _jobParts(plan, applied) + _settingParts(plan)
    text = ", ".join(parts) if parts else "no change"
    if plan.needsRestart:
        count = len(plan.needsRestart)
        text += (
            f"; {plural(count, 'setting')} {'needs' if count == 1 else 'need'} a restart: "
            + ", ".join(plan.needsRestart)
        )
    return text


def _jobParts(plan: ReloadPlan, applied: ReloadApplied) -> list[str]:
    """
    The jobs a reload added, removed and changed, as the summary line
    counts them, the first count naming them: C{["2 jobs added", "1
    removed"]}.
    """
    leaving = f" ({len(applied.leaving)} running to their end)" if applied.leaving else ""
    counts = [
        (len(plan.added), "added"),
        (len(plan.removed), "removed" + leaving),
        (len(plan.changed), "changed" + _changedJobs(plan, applied)),
    ]
    named = [(count, what) for count, what in counts if count]
    return [
        f"{plural(count, 'job') if index == 0 else count} {what}"
        for index, (count, what) in enumerate(named)
    ]


def _settingParts(plan: ReloadPlan) -> list[str]:
    """
    The settings a reload changed, as the summary line says them: each
    limit with its old and new value, the notifications' by name only.
    """
    parts = []
    if plan.maxJobs is not None:
        parts.append(f"max_jobs {plan.maxJobs[0]} -> {plan.maxJobs[1]}")
    parts += [f"{key} {_value(old)} -> {_value(new)}" for key, old, new in plan.limitChanges]
    if plan.stopTimeout is not None:
        parts.append(f"stop_timeout {plan.stopTimeout[0]:g} -> {plan.stopTimeout[1]:g} s")
    # Their values may be secret (a webhook URL's path often is): named only.
    return parts + list(plan.notifyChanges)


class ConfigReloader:
    """
    Reloads the configuration of a running daemon, one reload at a time.

    @ivar config: the configuration the daemon runs with now.
    @ivar target: what a reload changes (the daemon's queue, grants,
        progress model and status maps).
    """

    def __init__(
        self,
        config: Config,
        load: Callable[[str], Deferred[Config]],
        target: ReloadTarget,
        running: Callable[[], bool] = lambda: True,
        withoutTLS: Callable[[], bool] = tlsUnavailable,
    ) -> None:
        """
        @param config: the configuration the daemon started with.
        @param load: reads and validates a configuration file (off the
            reactor's thread), failing with L{ConfigError}.
        @param target: what a reload changes.
        @param running: whether the daemon runs (a reload that ends while
            it stops applies nothing).
        @param withoutTLS: whether this process runs without TLS.
        """
        self.config = config
        self._load = load
        self.target = target
        self._running = running
        self._withoutTLS = withoutTLS
        self._observers: list[IReloadObserver] = []
        self._busy = False
        # The requests made while a reload runs: served by one next reload.
        self._pending: list[Deferred[bool]] = []
        self._pendingPath = ""

    def addObserver(self, observer: IReloadObserver) -> None:
        """
        Tell C{observer} when each reload starts and ends.
        """
        self._observers.append(observer)

    @property
    def observers(self) -> tuple[IReloadObserver, ...]:
        """
        Those told about every reload, in the order they were added.
        """
        return tuple(self._observers)

    def reloadFrom(self, path: str) -> Deferred[bool]:
        """
        Reload the configuration from the file at C{path}, after the reload
        under way if any (requests made meanwhile share one reload).

        @return: fires with C{True} once the new configuration is applied,
            C{False} if it was not (invalid: each problem is logged); never
            fails.
        """
        waiter: Deferred[bool] = Deferred()
        if self._busy:
            if not self._pending:
                log.info(
                    "Configuration reload requested while one is under way: it follows"
                    " that one"
                )
            self._pending.append(waiter)
            self._pendingPath = path
            return waiter
        self._busy = True
        self._run(path, [waiter])
        return waiter

    def _run(self, path: str, waiters: list[Deferred[bool]]) -> None:
        def ended(applied: bool) -> None:
            if self._pending:
                following, self._pending = self._pending, []
                self._run(self._pendingPath, following)
            else:
                self._busy = False
            for waiter in waiters:
                waiter.callback(applied)

        Deferred.fromCoroutine(self._reload(path)).addCallback(ended)

    def _tell(self, what: Callable[[IReloadObserver], None]) -> None:
        for observer in list(self._observers):
            try:
                what(observer)
            except Exception:
                log.failure("A reload observer failed: {observer!r}", observer=observer)

    async def _reload(self, path: str) -> bool:
        self._tell(lambda observer: observer.reloadStarted())
        applied = False
        try:
            applied = await self._readAndApply(path)
        except Exception:
            log.failure("Configuration reload from {path} crashed; nothing changed", path=path)
        self._tell(lambda observer: observer.reloadEnded(applied))
        return applied

    async def _readAndApply(self, path: str) -> bool:
        """
        Read the configuration at C{path}, and apply it unless it is
        refused (L{_refused}) or the daemon stops meanwhile.

        @return: whether it was applied.
        """
        log.info("Reloading the configuration from {path}", path=path)
        from imapmig.daemon.reloadplan import keptForRestart, planReload

        try:
            new = await self._load(path)
            self._checkTLS(path, new)
            plan = planReload(self.config, new)
            holds = await self._holdsFor(plan)
        except ConfigError as e:
            return self._refused(path, e.shown(), len(e.problems))
        if not self._running():
            log.info("Configuration reload from {path} not applied: the daemon is stopping", path=path)
            return False
        leaving: frozenset[str] = frozenset()
        if self.target.fleet is not None:
            if not await self._replaceFleetList(path, new):
                return False
            leaving = await fleetLeaving(plan, self.target.fleet)
        applied = applyReload(plan, self.target, wake=False, holds=holds, leaving=leaving)
        self.config = keptForRestart(self.config, new)
        _logApplied(path, plan, applied)
        self.target.scheduler.queueChanged()
        return True

    async def _replaceFleetList(self, path: str, new: Config) -> bool:
        """
        Make C{new}'s jobs the fleet's list (one C{replaceList}: the whole
        difference, the list's generation raised), before the daemon
        applies the reload; the other daemons see the new generation in
        their heartbeats.

        @return: whether it was replaced (else one line says why, and the
            reload changed nothing).
        """
        assert self.target.fleet is not None
        try:
            change = await self.target.fleet.replaceList(new.jobs, new.userLists)
        except Exception as e:
            log.error(
                "Configuration not reloaded from {path}: the fleet's job list could not be"
                " replaced ({error}); nothing changed, the daemon runs on with its"
                " configuration",
                path=path,
                error=str(e) or type(e).__name__,
            )
            return False
        log.info(
            "The fleet's job list is now {path}'s (generation {generation}: {added} added,"
            " {removed} removed, {leaving} leaving at the end of their run, {changed} changed)",
            path=path,
            generation=change.generation,
            added=change.added,
            removed=change.removed,
            leaving=change.leaving,
            changed=change.changed,
        )
        return True

    def _checkTLS(self, path: str, new: Config) -> None:
        """
        Refuse a configuration that needs TLS in a process without it.

        @raise ConfigError: it does.
        """
        if self._withoutTLS():
            from imapmig.access.cleartext import configNeedsTLS

            if configNeedsTLS(new):
                raise ConfigError([_needsTLS(path, "its servers or accounts")])

    async def _holdsFor(self, plan: ReloadPlan) -> dict[str, JobHold]:
        """
        The admin's holds on jobs, for the jobs C{plan} adds (none if it
        adds none, or without a state store).

        @raise ConfigError: they cannot be read.
        """
        if not plan.added or self.target.holds is None:
            return {}
        try:
            return await self.target.holds.readHolds()
        except ImapmigError as e:
            raise ConfigError(
                [f"cannot read the admin's holds on jobs from the state store: {e}"]
            ) from None

    def _refused(self, path: str, problems: list[str], count: int | None = None) -> bool:
        """
        Log each of C{problems} and the refusal, which counts C{count}
        problems (by default as many as are logged).
        """
        for problem in problems:
            log.error("Configuration reload: {problem}", problem=problem, path=path)
        count = len(problems) if count is None else count
        log.error(
            "Configuration not reloaded from {path}: {count} {problems}; nothing changed,"
            " the daemon runs on with its configuration",
            path=path,
            count=count,
            problems="problem" if count == 1 else "problems",
        )
        return False


def _logApplied(path: str, plan: ReloadPlan, applied: ReloadApplied) -> None:
    """
    Log a reload applied: its summary line (L{describeReload}), and a
    warning for each setting it changed that needs a restart.
    """
    log.info(
        "Configuration reloaded from {path}: {changes}",
        path=path,
        changes=describeReload(plan, applied),
        added=len(plan.added),
        removed=len(plan.removed),
        changed=len(plan.changed),
        servers=len(plan.limitsChanged),
        keys=[key for key, _, _ in plan.limitChanges]
        + _changedKeys(plan)
        + list(plan.notifyChanges),
        needsRestart=list(plan.needsRestart),
    )
    for setting in plan.needsRestart:
        log.warn(
            "Configuration reload: {setting} changed, but takes effect only when the"
            " daemon is restarted; the running daemon keeps its old value",
            setting=setting,
        )


def _needsTLS(path: str, reason: str) -> str:
    return (
        f"{path}: the new configuration needs TLS ({reason}), and this daemon was"
        " started without it (its configuration used none): check the file with"
        f" imapmig-daemon --check-config --config {path}, then restart the daemon to"
        " apply it"
    )


def readForReload(path: str, withoutTLS: bool) -> Config:
    """
    Read and validate the configuration at C{path} for a reload: the file's
    bounded YAML document (L{imapmig.configfile}), then, in a process
    without TLS, a refusal of a document that asks for it (the reader
    could not parse a TLS setting without OpenSSL), else the reader's
    L{parseConfig}.  Its problems are the reader's, as C{--check-config}
    reports them: a missing, empty or invalid file says so.

    @param withoutTLS: whether this process runs without TLS.
    @raise ConfigError: every problem found.
    """
    from imapmig.access.cleartext import tlsReason
    from imapmig.config import parseConfig
    from imapmig.configfile import readConfigFile

    with _collectionPaused():
        read = readConfigFile(path)
    if withoutTLS:
        reason = tlsReason(read.document)
        if reason is not None:
            raise ConfigError([_needsTLS(path, reason)])
    return parseConfig(read.document, path, None, read.looseFileMode, lazyUserLists=None)


@contextmanager
def _collectionPaused() -> Iterator[None]:
    """
    Pause the cyclic garbage collector while a configuration's YAML is
    parsed.

    Parsing allocates a node and two marks per key and value (a million
    objects for 10,000 inline jobs), and the collector's passes over them
    run in the parsing thread holding the interpreter's lock: the reactor's
    thread stood still up to 0.8 s at a time (measured with 10,000 jobs;
    0.06 s paused).  Nothing parsed is garbage in a cycle: it is freed by
    reference counting once read.  Reloads never overlap, so nothing else
    pauses and resumes the collector meanwhile.  The pause is the whole
    process's, so it covers the parse alone (bounded by
    L{imapmig.configfile.MAX_OCTETS} and C{MAX_NODES}), not the reading of
    password files, user lists and certificates that follows (0.01 s of
    collection for 10,000 jobs), a read of which could block.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loadInThread(
    reactor: Any, path: str, withoutTLS: Callable[[], bool] = tlsUnavailable
) -> Deferred[Config]:
    """
    Read and validate the configuration at C{path} (L{readForReload}) in
    one of C{reactor}'s worker threads: it parses the YAML document (up to
    L{imapmig.configfile.MAX_NODES} nodes, a few seconds), reads password
    files and user lists (a user list may hold 10,000 rows), and the
    reactor must go on serving the jobs and the status site meanwhile.
    The reader is safe there: it builds new frozen values from files,
    touches no reactor and logs nothing; the result is applied on the
    reactor's thread.  A reactor without threads (a test's) reads in place.

    @param withoutTLS: whether this process runs without TLS.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        # Missing or unreadable: the reader says so, in its words.
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):
        # A FIFO would block the worker thread until a writer came, and
        # the daemon's stop with it (the thread pool waits for its threads).
        return fail(ConfigError([f"{path}: not a regular file; give the configuration file"]))
    if IReactorThreads.providedBy(reactor):
        return deferToThreadPool(
            reactor, reactor.getThreadPool(), readForReload, path, withoutTLS()
        )
    return maybeDeferred(readForReload, path, withoutTLS())
