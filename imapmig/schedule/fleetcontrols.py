# -*- test-case-name: tests.test_schedule_fleet -*-
"""
The admin's controls on a daemon of a fleet (docs/fleet-design.md "Holds
and controls from any daemon"): L{FleetControls}, the controls of
L{imapmig.schedule.jobcontrols} whose checks and holds are the shared
queue's rows.

Beside L{JobControls} rather than in it: those check a control against
the one daemon's queue in memory, synchronously, and keep the holds in the
state store; here the queue's row is both the check and the hold (its
C{UPDATE} refuses what does not apply, and a hold is a row state that
outlasts every daemon), so each control is the job's machine's input and
the one write its transition makes, whose refusal
(L{ControlRefused}, L{UnknownJob}) is the control's answer:

  - a job this daemon holds: its machine takes the control (a claimed
    job's row is requested so), and a pause or cancel stops its run;
  - any other job, queued, held by another daemon or ended: one write of
    the row (L{JobMachines.controlElsewhere}); another daemon holding it
    hears of it with its next heartbeat.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from automat import NoTransition
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from imapmig.errors import ControlRefused, ImapmigError, QueueUnavailable, UnknownJob
from imapmig.job.inputs import JobInputs
from imapmig.progress import JobState, MigrationProgress
from imapmig.queue import IAsyncJobQueue, QueueState
from imapmig.job.machine import JobMachines
from imapmig.schedule.jobcontrols import ControlledScheduler, JobControls
from imapmig.state import IStateStore, JobHold

log = Logger()

# What each control writes into the queue, and the state it answers with
# when the queue's answer does not say (a held job's run still stopping).
_CONTROLS: dict[str, tuple[str, JobState]] = {
    "pause": ("pause", JobState.PAUSED),
    "resume": ("resume", JobState.QUEUED),
    "cancel": ("cancel", JobState.CANCELLED),
    "retry-failed": ("requeue", JobState.QUEUED),
}

_SHOWN = {
    QueueState.QUEUED: JobState.QUEUED,
    QueueState.PAUSED: JobState.PAUSED,
    QueueState.CANCELLED: JobState.CANCELLED,
    QueueState.DONE: JobState.DONE,
    QueueState.FAILED: JobState.FAILED,
}


class FleetScheduled(ControlledScheduler, Protocol):
    """
    What the fleet's controls need of its scheduler: also the jobs this
    daemon holds.
    """

    @property
    def runningJobs(self) -> list[str]: ...


class FleetControls(JobControls):
    """
    L{IJobControls} of a daemon of a fleet: each control one write of the
    job's row, through the job's machine.
    """

    def __init__(
        self,
        queue: IAsyncJobQueue,
        progress: MigrationProgress,
        store: IStateStore | None,
        scheduler: FleetScheduled,
        machines: JobMachines,
    ) -> None:
        JobControls.__init__(self, queue, progress, store, scheduler, machines)  # type: ignore[arg-type]
        self._fleet = scheduler
        self._shared = queue
        # Whether the configuration has user lists, whose jobs' names only
        # the queue knows (the daemon sets it): else a name this daemon does
        # not show is no job of the fleet (its list is the fleet's).
        self.userLists = False

    def _known(self, name: str) -> bool:
        """
        Whether job C{name} may be a job of the fleet: a job this daemon
        shows (its configuration's and those it holds), or, with user
        lists, any name but the empty one (the queue decides).
        """
        return bool(name) and (self.userLists or name in self._progress)

    async def readHolds(self) -> dict[str, JobHold]:
        """
        See L{JobControls.readHolds}: none to apply.  A fleet's holds are
        its jobs' rows' states; a hold of the store's C{job_holds} (one
        a copy brought for a job the list did not have) is moved into its
        row by the reload that lists it (L{imapmig.queue._pgjoblist}), so
        that a hold lifted since never comes back from that table.
        """
        return {}

    def pause(self, job: str, by: str) -> Deferred[JobState]:
        return self._apply("pause", job, by, lambda machine: machine.pause(by))

    def resume(self, job: str, by: str) -> Deferred[JobState]:
        return self._apply("resume", job, by, lambda machine: machine.resume(by))

    def cancel(self, job: str, by: str) -> Deferred[JobState]:
        return self._apply("cancel", job, by, lambda machine: machine.cancel(by))

    def retryFailed(self, job: str, by: str) -> Deferred[JobState]:
        return self._apply("retry-failed", job, by, lambda machine: machine.retryFailed(by))

    def _apply(
        self, action: str, name: str, by: str, give: Callable[[JobInputs], None]
    ) -> Deferred[JobState]:
        """
        Control C{action} of job C{name} by C{by}: C{give} it to the job's
        machine if this daemon holds the job, else write it in the row.
        """
        write, shown = _CONTROLS[action]

        async def control() -> JobState:
            if not self._known(name):
                # Refused here: the database is not asked (nor waited for).
                log.info(
                    "Control {action} of job {job} by {client}: refused: no such job",
                    action=action, job=name, client=by,
                )  # fmt: skip
                raise UnknownJob(name)
            held = name in self._fleet.runningJobs
            answer: QueueState | ImapmigError | None
            if not held:
                answer = await self._machines.controlElsewhere(name, write)
            else:
                if action in ("pause", "cancel"):
                    self._by[name] = by
                try:
                    answer = await self._machines.control(name, give)
                except NoTransition:
                    where = self._machines.job(name).state().value
                    answer = ControlRefused(f"job {name} is {where}")
            if isinstance(answer, (ControlRefused, UnknownJob)):
                log.info(
                    "Control {action} of job {job} by {client}: refused: {why}",
                    action=action,
                    job=name,
                    client=by,
                    why=str(answer),
                )
                raise answer
            if held and action in ("pause", "cancel"):
                self._scheduler.halt(name)
            if isinstance(answer, QueueUnavailable):
                # Answered within seconds (L{QueueWrite}): 503, naming it.
                log.warn(
                    "Control {action} of job {job} by {client}: {why}",
                    action=action, job=name, client=by, why=str(answer),
                )  # fmt: skip
                raise answer
            if not held:
                self._scheduler.queueChanged()
            state = _SHOWN.get(answer, shown) if isinstance(answer, QueueState) else shown
            log.info(
                "Control {action} of job {job} by {client}: {state}",
                action=action,
                job=name,
                client=by,
                state=state.value,
                held=held,
            )
            return state

        return Deferred.fromCoroutine(control())

    def applies(self, action: str, job: str) -> bool:
        """
        See L{IJobControls.applies}: whether the job is known (the queue's
        row refuses a control that does not apply).
        """
        return action in _CONTROLS and job in {progress.name for progress in self._progress}

    def bulk(self, action: str, jobs: Sequence[str], by: str, selection: str) -> Deferred[int]:
        """
        See L{IJobControls.bulk}: the jobs this daemon holds each through
        its machine, as their own control; the others, wherever they are,
        in one statement of the queue (L{IAsyncJobQueue.controlMany}),
        which changes each as its own control would; those refused are
        left out of the count.
        """
        return self._many(action, list(jobs), by, selection)

    def pauseAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.pauseAll}: every job of the fleet's list, as
        L{bulk}.
        """
        return self._many("pause", None, by, "all")

    def resumeAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.resumeAll}: every job of the fleet's list, as
        L{bulk}.
        """
        return self._many("resume", None, by, "all")

    def _many(self, action: str, jobs: list[str] | None, by: str, selection: str) -> Deferred[int]:
        """
        Control C{action} by C{by} of C{jobs} (L{None}: every job of the
        list), called C{selection} in the log.

        @raise ImapmigError: the queue's statements failed (its message
            says how many jobs the parts before changed); the jobs this
            daemon holds were not controlled.
        """
        running = set(self._fleet.runningJobs)
        held = sorted(running if jobs is None else running.intersection(jobs))
        others = None if jobs is None else [name for name in jobs if name not in running]

        async def apply() -> int:
            changed = 0
            # The jobs held elsewhere or not at all first: a job stopped
            # here gives its slot to no job this control holds.
            if others is None or others:
                try:
                    many = await self._shared.controlMany(_CONTROLS[action][0], others, held, by)
                except ImapmigError as e:
                    log.error(
                        "Control {action} by {client} of the jobs {selection}: failed for the"
                        " jobs this daemon does not hold: {why}",
                        action=action, client=by, selection=selection, why=str(e),
                    )  # fmt: skip
                    raise
                changed += many
            changed += await self._heldEach(action, held, by)
            if changed:
                self._scheduler.queueChanged()
            log.info(
                "Control {action} by {client} of the jobs {selection}: {count} of {selected}",
                action=action,
                client=by,
                selection=selection,
                count=changed,
                selected="all" if jobs is None else len(jobs),
            )
            return changed

        return Deferred.fromCoroutine(apply())

    async def _heldEach(self, action: str, names: list[str], by: str) -> int:
        """
        Control C{action} by C{by} of each of the jobs C{names}, which this
        daemon holds, through its machine.

        @return: how many took it.
        """
        control = {
            "pause": self.pause,
            "resume": self.resume,
            "cancel": self.cancel,
            "retry-failed": self.retryFailed,
        }[action]
        changed = 0
        for name in names:
            try:
                await control(name, by)
            except (ControlRefused, UnknownJob):
                continue
            except ImapmigError as e:
                log.error(
                    "Control {action} of job {job} by {client}: not applied: {why}",
                    action=action, job=name, client=by, why=str(e),
                )  # fmt: skip
                continue
            changed += 1
        return changed
