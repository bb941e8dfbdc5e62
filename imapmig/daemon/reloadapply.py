# -*- test-case-name: tests.test_reload -*-
"""
Applying a L{ReloadPlan} to a running daemon: a few queue operations
(L{IJobQueue.add}, C{remove}, C{replace}), new limits for the grants, and
the views kept in step (the progress model, the status resource's maps,
the census); then the scheduler is woken.

    - an added job is queued after every queued job, shown queued, and its
      source counted;
    - a removed job that is queued, paused, deferred or ended is dropped
      (it leaves the status page); one that is running goes on to its end,
      and is then not run again;
    - a changed job takes its new configuration from its next run: at once
      when it is queued, after this run when it is running (one whose
      servers' limits alone changed takes it silently: the grants apply
      them);
    - new limits never cut a running connection nor stop a running job:
      they apply to the grants made from now on.

In a fleet the jobs are the database's rows and any daemon may run one:
a removed job that a daemon of the fleet runs (its row claimed and
asked to leave, L{fleetLeaving}) is shown on every page until its run
ends, then leaves it (L{LeavingJobs}, which asks the queue every
L{LEAVING_POLL} seconds while such jobs remain); any other is dropped at
once.  The daemon's own queue in memory is not asked: nothing claims from
it in a fleet.

Everything here runs on the reactor's thread, synchronously, between two
events: the scheduler sees the queue either before or after the whole
reload, never half of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Collection, Mapping, Protocol, Sequence

from attrs import frozen
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.config.model import JobConfig
from imapmig.mail.folders import FolderRules
from imapmig.progress import JobState, MigrationProgress
from imapmig.schedule.grants import ConnectionGrants
from imapmig.queue import IAsyncJobQueue, IJobQueue, QueueState
from imapmig.errors import ImapmigError
from imapmig.state import JobHold

if TYPE_CHECKING:
    # Imported by a reload (imapmig.daemon.reload), not by a start.
    from imapmig.daemon.reloadplan import ReloadPlan

__all__ = [
    "LEAVING_POLL",
    "HoldKeeper",
    "LeavingJobs",
    "QueueWatcher",
    "ReloadApplied",
    "ReloadTarget",
    "applyReload",
    "fleetLeaving",
]

log = Logger()


class QueueWatcher(Protocol):
    """
    What runs the queue's jobs (L{imapmig.schedule.scheduler.JobQueueService}).
    """

    def queueChanged(self) -> None:
        """
        Jobs were queued or dropped: claim them, or find the queue drained.
        """


class HoldKeeper(Protocol):
    """
    The admin's holds on jobs (L{imapmig.schedule.jobcontrols.JobControls}).
    """

    async def readHolds(self) -> dict[str, JobHold]:
        """
        Every job's hold as the state store records it, by job name.
        """

    def applyHolds(self, holds: Mapping[str, JobHold], names: Collection[str], across: str) -> None:
        """
        Pause or cancel each of the jobs C{names} that C{holds} holds,
        kept C{across} ("the reload").
        """


LEAVING_POLL = 5.0
"""
Seconds between two looks at the fleet's removed jobs still running (a
heartbeat's, at the default lease).
"""


class LeavingJobs:
    """
    The jobs a reload removed from a fleet while a daemon of it ran them:
    shown until the queue no longer has them leaving (their claim ended,
    or was given up), then forgotten (L{IAsyncJobQueue.leaving}, one
    statement every L{LEAVING_POLL} seconds while any remains; none
    otherwise).
    """

    def __init__(self, queue: IAsyncJobQueue, clock: IReactorTime) -> None:
        self._queue = queue
        self._clock = clock
        self._forget: dict[str, Callable[[str], None]] = {}
        self._next: IDelayedCall | None = None

    def __contains__(self, name: object) -> bool:
        return name in self._forget

    def watch(self, names: Collection[str], forget: Callable[[str], None]) -> None:
        """
        Call C{forget} with each of C{names} once it has left.
        """
        for name in names:
            self._forget[name] = forget
        if self._forget and self._next is None:
            self._next = self._clock.callLater(LEAVING_POLL, self._look)

    def keep(self, name: str) -> None:
        """
        Stop watching job C{name} (configured again while it runs).
        """
        self._forget.pop(name, None)

    def _look(self) -> None:
        self._next = None
        names = sorted(self._forget)
        if not names:
            return

        def left(leaving: frozenset[str]) -> None:
            for name in names:
                if name not in leaving:
                    forget = self._forget.pop(name, None)
                    if forget is not None:
                        log.info("Job {job}: removed from the configuration, its run ended: it leaves", job=name)
                        forget(name)

        def unread(failure: Failure) -> None:
            log.debug("The fleet's jobs leaving could not be read: {why}", why=failure.getErrorMessage())

        def again(ignored: object) -> None:
            if self._forget and self._next is None:
                self._next = self._clock.callLater(LEAVING_POLL, self._look)

        self._queue.leaving(names).addCallbacks(left, unread).addBoth(again)


async def fleetLeaving(plan: ReloadPlan, queue: IAsyncJobQueue) -> frozenset[str]:
    """
    The jobs C{plan} removes that a daemon of the fleet still runs, once
    the fleet's list is replaced (their rows claimed, asked to leave); all
    that it removes when the queue cannot say (those that left are
    forgotten at the next look, L{LeavingJobs}).
    """
    if not plan.removed:
        return frozenset()
    try:
        return await queue.leaving(list(plan.removed))
    except ImapmigError as e:
        log.warn(
            "The fleet's jobs removed by the reload could not be read ({why}): they are"
            " shown until they are known to have left",
            why=str(e),
        )
        return frozenset(plan.removed)


@frozen
class ReloadTarget:
    """
    What a reload changes in a running daemon.

    @ivar queue: the job queue.
    @ivar grants: the job slots and connection pools.
    @ivar progress: every job's progress.
    @ivar scheduler: told once the queue changed.
    @ivar rules: each job's folder rules, by name (the status resource's
        manifests read it).
    @ivar jobServers: each job's destination server, by name (the metrics
        read it).
    @ivar countSources: counts the sources of newly queued jobs (a census
        of their own).
    @ivar holds: the admin's holds, applied to the jobs added (a job
        paused or cancelled before it was removed from the configuration
        stays so when it is added again, as it would at a restart);
        L{None}: none.
    @ivar fleet: a fleet's shared queue, whose list a reload replaces
        first (L{IAsyncJobQueue.replaceList}, the whole difference at
        once) before the daemon applies it; L{None}: not in a fleet.
    @ivar leaving: in a fleet, the removed jobs shown until their run
        ends on whichever daemon runs them.
    """

    queue: IJobQueue
    grants: ConnectionGrants
    progress: MigrationProgress
    scheduler: QueueWatcher
    rules: dict[str, FolderRules]
    jobServers: dict[str, str]
    countSources: Callable[[Sequence[JobConfig]], None]
    holds: HoldKeeper | None = None
    fleet: IAsyncJobQueue | None = None
    leaving: LeavingJobs | None = None


@frozen
class ReloadApplied:
    """
    What came of applying a plan, by the jobs' queue states.

    @ivar dropped: removed jobs that left at once.
    @ivar leaving: removed jobs that were running: they leave when they end.
    @ivar changedRunning: changed jobs that were running: their new
        configuration is for their next run.
    """

    dropped: tuple[str, ...] = ()
    leaving: tuple[str, ...] = ()
    changedRunning: tuple[str, ...] = ()


def _show(target: ReloadTarget, job: JobConfig) -> None:
    """
    Make C{job} known to the views (before its progress exists: a status
    render never finds a job without its maps).
    """
    target.rules[job.name] = job.folders
    target.jobServers[job.name] = job.destination.server.name


def _replaceChanged(
    plan: ReloadPlan, target: ReloadTarget, counted: list[JobConfig]
) -> list[str]:
    """
    Give the changed and refreshed jobs of C{plan} their new configuration
    in C{target}'s queue; add to C{counted} the changed jobs never run,
    whose sources are counted again.

    @return: the changed jobs that are running (their new configuration
        is for their next run).
    """
    for job in plan.refreshed:
        # Only its servers' limits differ: the grants take them (applyReload).
        target.queue.replace(job)
    changedRunning: list[str] = []
    for job, keys in zip(plan.changed, plan.changedKeys):
        state = target.queue.replace(job)
        _show(target, job)
        if state is QueueState.CLAIMED:
            changedRunning.append(job.name)
            log.info(
                "Job {job}: its configuration changed while running ({keys}); this run"
                " goes on with the old one, the new one is for its next run",
                job=job.name,
                keys=", ".join(keys),
            )
            continue
        progress = target.progress.job(job.name)
        if progress.state is JobState.QUEUED and progress.startedAt is None:
            # Never run: its totals come from the census, of its source as
            # configured now (a fresh entry, at the same place).
            target.progress.addJob(job.name)
            counted.append(job)
    return changedRunning


def applyReload(
    plan: ReloadPlan,
    target: ReloadTarget,
    wake: bool = True,
    holds: Mapping[str, JobHold] | None = None,
    leaving: Collection[str] = (),
) -> ReloadApplied:
    """
    Apply C{plan} to C{target} (see the module's docstring), then wake the
    scheduler.

    @param wake: whether to wake the scheduler here; without, the caller
        does (L{QueueWatcher.queueChanged}) once it has logged the reload,
        so that the reload's line comes before those of the jobs it starts.
    @param holds: the admin's holds as the store records them (read by
        the caller beforehand, L{HoldKeeper.readHolds}), applied to the
        jobs added.
    @param leaving: in a fleet, the removed jobs a daemon of the fleet
        still runs (L{fleetLeaving}): shown until their run ends.

    @return: what became of the removed and changed jobs.
    """
    if target.fleet is None:
        dropped, left = _removeJobs(plan, target)
    else:
        dropped, left = _removeFleetJobs(plan, target, leaving)
    counted = _addJobs(plan, target)
    if holds and target.holds is not None and counted:
        # Before the scheduler is woken: a held job is never claimed.
        target.holds.applyHolds(holds, {job.name for job in counted}, "the reload")
    changedRunning = _replaceChanged(plan, target, counted)
    _setLimits(plan, target)
    if counted:
        target.countSources(counted)
    if wake:
        target.scheduler.queueChanged()
    return ReloadApplied(tuple(dropped), tuple(left), tuple(changedRunning))


def _setLimits(plan: ReloadPlan, target: ReloadTarget) -> None:
    """
    Give C{target}'s grants the limits of C{plan}: C{max_jobs} and the
    servers'.  Always: a server added without limits is then counted
    among the servers whose connections the status shows.
    """
    maxJobs = target.grants.maxJobs if plan.maxJobs is None else plan.maxJobs[1]
    target.grants.setLimits(maxJobs, dict(plan.limits))


def _removeJobs(plan: ReloadPlan, target: ReloadTarget) -> tuple[list[str], list[str]]:
    """
    Take the removed jobs of C{plan} out of C{target}: at once, or, those
    running, once they end.

    @return: the jobs dropped at once, and those left running to their end.
    """
    dropped: list[str] = []
    leaving: list[str] = []
    for name in plan.removed:
        if target.queue.remove(name) is QueueState.CLAIMED:
            leaving.append(name)
            log.info(
                "Job {job}: removed from the configuration while running; it goes on to"
                " its end and is then not run again",
                job=name,
            )
            continue
        dropped.append(name)
        _forget(target, name)
    return dropped, leaving


def _forget(target: ReloadTarget, name: str) -> None:
    """
    Take job C{name} off C{target}'s views: it leaves the status page.
    """
    target.progress.removeJob(name)
    target.rules.pop(name, None)
    target.jobServers.pop(name, None)


def _removeFleetJobs(
    plan: ReloadPlan, target: ReloadTarget, running: Collection[str]
) -> tuple[list[str], list[str]]:
    """
    Take the removed jobs of C{plan} out of C{target}, a fleet's daemon:
    at once, or, those that a daemon of the fleet runs (C{running}), once
    their run ends (L{LeavingJobs}).

    @return: the jobs dropped at once, and those left running to their end.
    """
    dropped: list[str] = []
    leaving: list[str] = []
    for name in plan.removed:
        # Kept in step, though nothing claims from it in a fleet.
        target.queue.remove(name)
        if name in running:
            leaving.append(name)
            log.info(
                "Job {job}: removed from the configuration while a daemon of the fleet runs"
                " it; it goes on to its end, is shown until then, and is not run again",
                job=name,
            )
            continue
        dropped.append(name)
        _forget(target, name)
    if leaving and target.leaving is not None:
        target.leaving.watch(leaving, lambda name: _forget(target, name))
    return dropped, leaving


def _addJobs(plan: ReloadPlan, target: ReloadTarget) -> list[JobConfig]:
    """
    Add the added jobs of C{plan} to C{target}.

    @return: the jobs added with progress of their own, whose sources are
        to be counted (not those removed while running and configured
        again before they ended).
    """
    counted: list[JobConfig] = []
    for job in plan.added:
        target.queue.add(job)
        _show(target, job)
        if target.leaving is not None and job.name in target.leaving:
            # Removed while a daemon of the fleet ran it, added again
            # before that run ended: the fleet's row stays (unchanged).
            target.leaving.keep(job.name)
            log.info(
                "Job {job}: configured again while a daemon of the fleet runs it; its new"
                " configuration is for its next run",
                job=job.name,
            )
            continue
        if target.queue.state(job.name) is QueueState.CLAIMED:
            # Removed while running, and added again before it ended.
            log.info(
                "Job {job}: configured again while running; its new configuration is"
                " for its next run",
                job=job.name,
            )
            continue
        if job.name in target.progress:
            # Removed while running, ended since (still shown as it
            # ended): a new job now, with progress of its own.
            target.progress.removeJob(job.name)
        target.progress.addJob(job.name)
        counted.append(job)
    return counted
