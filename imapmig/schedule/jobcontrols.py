# -*- test-case-name: tests.test_controls -*-
"""
The admin's controls (L{IJobControls}) over a scheduler's job queue.

Each control is an input of the job's machine (L{imapmig.job.machine}),
and nothing else: the machine alone says where the job is (C{stopping}
meanwhile, then C{paused}, by whom, since when, or C{cancelled}), and
alone writes the queue's states (L{imapmig.queue}): a queued job
is paused or cancelled in the queue; a claimed one is requested so in
the queue and stopped by its scheduler (L{ControlledScheduler.halt}), and
its claim, once finished, puts it where the control said.  The controls
read the queue, the state every daemon sharing it sees, to refuse a
control before giving it.

Pause and cancel are also the admin's I{holds}, kept in the state store
(L{IStateStore.recordJobHolds}) so that they outlast a restart: a control
that changes a hold answers only once the store has recorded it, and
changes nothing if the store cannot (the store's error is the answer).
A starting daemon puts every held job back where its hold says
(L{JobControls.restoreHolds}) before its scheduler claims anything.
Pause-all and resume-all record the hold of every job they change;
pause-all's "claim nothing more" itself is not kept: after a restart it
is the holds of the jobs it paused, and a job that had ended runs again
as after any restart.

A fleet sharing a PostgreSQL state store keeps the same holds in the same
database as its queue rows: each control's C{UPDATE} of the queue row
and the write of the hold are one transaction, so a hold is recorded
exactly when the queue applies it.  Here the queue is in memory, so the
control checks first that the queue will take it, records
the hold, then applies it: nothing runs between the two for the
synchronous stores there are.
"""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Protocol, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.errors import ControlRefused, ImapmigError, UnknownJob
from imapmig.job.machine import CANCELLED_BY_ADMIN, JobMachines
from imapmig.progress import JobState, MigrationProgress
from imapmig.schedule.controls import IJobControls
from imapmig.queue import ENDED, IJobQueue, QueueState
from imapmig.state import CANCELLED, PAUSED, IStateStore, JobHold

log = Logger()

RESTORED_BY = "imapmig"
"""
Who a job's machine is told paused or cancelled it when the admin who
asked is not known: a pause or cancel asked through another daemon
sharing the queue.  A hold put back from the state store (at start, on a
reload) names the admin it records, and since when.
"""


class ControlledScheduler(Protocol):
    """
    What the controls need of the scheduler that runs the queue's jobs.
    """

    def halt(self, name: str) -> None:
        """
        Stop the claimed job C{name} as a stopping daemon stops it; its
        claim then finishes stopped.
        """

    def queueChanged(self) -> None:
        """
        A job was queued again or cancelled: claim what is queued, or find
        the queue drained.
        """


@implementer(IJobControls)
class JobControls:
    """
    L{IJobControls} over a job queue, the progress model, the state store
    and the scheduler that runs the jobs.  Each control logs one line:
    the control, the job, who asked, what came of it.
    """

    def __init__(
        self,
        queue: IJobQueue,
        progress: MigrationProgress,
        store: IStateStore | None,
        scheduler: ControlledScheduler,
        machines: JobMachines,
    ) -> None:
        """
        @param store: where retry-failed learns what failed, where a
            cancelled job is recorded as failed, and where the admin's
            holds are kept; L{None}: none of these.
        @param machines: the jobs' machines, told of each control.
        """
        self._queue = queue
        self._progress = progress
        self._machines = machines
        # Who asked the last pause or cancel of each job, for its machine
        # once a claimed job's run has ended (settled).
        self._by: dict[str, str] = {}
        self._store = store
        self._scheduler = scheduler
        # Each job's hold as the store has it (jobs under none left out),
        # to check a control before recording it.
        self._holds: dict[str, str] = {}

    async def restoreHolds(self) -> None:
        """
        Put every configured job the store records a hold for where its
        hold says (paused, cancelled), showing it so; holds of jobs no
        longer configured are ignored, and logged.  Called once, before
        anything is claimed.

        @raise ImapmigError: the store cannot read the holds.
        """
        holds = await self.readHolds()
        configured = {progress.name for progress in self._progress}
        stale = sorted(name for name in holds if name not in configured)
        if stale:
            log.info(
                "The admin's holds on {count} {noun} no longer configured are ignored: {jobs}",
                count=len(stale),
                noun=_jobs(len(stale)),
                jobs=", ".join(stale[:10]) + (", ..." if len(stale) > 10 else ""),
            )
        self.applyHolds(holds, configured, "the restart")

    async def readHolds(self) -> dict[str, JobHold]:
        """
        Every job's hold as the store records it (L{PAUSED} or
        L{CANCELLED}, who asked, when), by job name; none without a store.

        @raise ImapmigError: the store cannot read the holds.
        """
        if self._store is None:
            return {}
        return await self._store.jobHolds()

    def applyHolds(self, holds: Mapping[str, JobHold], names: Collection[str], across: str) -> None:
        """
        Put each of the jobs C{names} that C{holds} (from L{readHolds})
        has a hold for where its hold says (paused, cancelled), showing it
        so, by the admin who held it and since when: at start, and for
        the jobs a reload adds.

        @param across: what the hold was kept across, for the job's
            timeline: C{"the restart"}, C{"the reload"}.
        """
        restored = {PAUSED: 0, CANCELLED: 0}
        for name, kept in holds.items():
            if name not in names:
                continue
            hold = kept.hold
            machine = self._machines.job(name)
            state = self._queue.state(name)
            # A shared queue may hold it so already, or have seen it end.
            if hold == PAUSED:
                if state in (QueueState.QUEUED, QueueState.CLAIMED):
                    machine.restorePause(kept.by, kept.at, across)
            elif state not in ENDED:
                machine.restoreCancel(kept.by, across)
            self._holds[name] = hold
            restored[hold] += 1
        if restored[PAUSED] or restored[CANCELLED]:
            log.info(
                "The admin's holds kept from before: {paused} {noun} paused,"
                " {cancelled} cancelled",
                noun=_jobs(restored[PAUSED]),
                paused=restored[PAUSED],
                cancelled=restored[CANCELLED],
            )

    def hold(self, name: str) -> str | None:
        """
        The hold job C{name} is under, as recorded: L{PAUSED},
        L{CANCELLED}, or L{None}.
        """
        return self._holds.get(name)

    def _record(self, names: Sequence[str], hold: str | None, by: str) -> Deferred[None]:
        """
        Record that jobs C{names} are under C{hold} (L{None}: under none).
        """

        def recorded(result: None) -> None:
            for name in names:
                if hold is None:
                    self._holds.pop(name, None)
                else:
                    self._holds[name] = hold

        if self._store is None or not names:
            recorded(None)
            return succeed(None)
        return self._store.recordJobHolds(names, hold, by).addCallback(recorded)

    def settled(self, name: str, state: QueueState) -> None:
        """
        Job C{name}'s claim finished and the queue put it in C{state}: its
        machine is paused or cancelled if the queue says so; if the
        control asked of it did not take (it completed or failed before it
        stopped), lift its hold, so that the store says what the queue
        does.
        """
        machine = self._machines.job(name)
        if state is QueueState.PAUSED and machine.state() is not JobState.PAUSED:
            machine.pause(self._by.get(name, RESTORED_BY))
        elif state is QueueState.CANCELLED and machine.state() is not JobState.CANCELLED:
            machine.cancel(self._by.get(name, RESTORED_BY))
        hold = self._holds.get(name)
        if hold is None or (hold, state) in (
            (PAUSED, QueueState.PAUSED),
            (CANCELLED, QueueState.CANCELLED),
        ):
            return
        self._record([name], None, "imapmig").addErrback(
            lambda failure: log.error(
                "Job {job}: cannot lift its hold ({hold}) in the state store: {why}",
                job=name,
                hold=hold,
                why=failure.getErrorMessage(),
            )
        )

    def _control(
        self,
        action: str,
        name: str,
        by: str,
        apply: Callable[[str, str], JobState],
        check: Callable[[str], None] | None = None,
        hold: str | None = None,
    ) -> Deferred[JobState]:
        """
        Apply a job control, logging one line of what came of it.

        @param check: raises the control's refusal, changing nothing, if
            the queue would refuse it; with it, the job's hold is recorded
            as C{hold} before the control is applied.
        """

        def refused(e: Exception) -> Deferred[JobState]:
            log.info(
                "Control {action} of job {job} by {client}: refused: {why}",
                action=action,
                job=name,
                client=by,
                why=str(e),
            )
            return fail(e)

        def applied(ignored: object) -> JobState | Deferred[JobState]:
            try:
                state = apply(name, by)
            except (UnknownJob, ControlRefused) as e:
                return refused(e)
            log.info(
                "Control {action} of job {job} by {client}: {state}",
                action=action,
                job=name,
                client=by,
                state=state.value,
            )
            return state

        if check is None:
            return succeed(None).addCallback(applied)
        try:
            check(name)
        except (UnknownJob, ControlRefused) as e:
            return refused(e)

        def notRecorded(failure: Failure) -> Failure:
            failure.trap(ImapmigError)
            log.error(
                "Control {action} of job {job} by {client}: not applied: {why}",
                action=action,
                job=name,
                client=by,
                why=failure.getErrorMessage(),
            )
            return failure

        return self._record([name], hold, by).addCallbacks(applied, notRecorded)

    def _checkPause(self, name: str) -> None:
        state = self._queue.state(name)
        if state is QueueState.CLAIMED and self._holds.get(name) == CANCELLED:
            raise ControlRefused(f"job {name} is being cancelled")
        if state not in (QueueState.QUEUED, QueueState.CLAIMED):
            raise ControlRefused(f"job {name} is {state.value}, not queued or running")

    def _checkResume(self, name: str) -> None:
        state = self._queue.state(name)
        if not (
            state in (QueueState.PAUSED, QueueState.CANCELLED)
            or (state is QueueState.CLAIMED and self._holds.get(name) == PAUSED)
        ):
            raise ControlRefused(f"job {name} is not paused or cancelled")

    def _checkCancel(self, name: str) -> None:
        state = self._queue.state(name)
        if state in ENDED:
            raise ControlRefused(f"job {name} has ended ({state.value})")

    def pause(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.pause}; answers once the hold is recorded.
        """
        return self._control("pause", job, by, self._pause, self._checkPause, PAUSED)

    def _pause(self, name: str, by: str) -> JobState:
        claimed = self._queue.state(name) is QueueState.CLAIMED
        self._by[name] = by
        # The machine first, so that its timeline says who stopped the run
        # and why; then the run is stopped.
        self._machines.job(name).pause(by)
        if claimed:
            self._scheduler.halt(name)
        return JobState.PAUSED

    def resume(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.resume}; answers once the hold is lifted.
        """
        return self._control("resume", job, by, self._resume, self._checkResume, None)

    def _resume(self, name: str, by: str) -> JobState:
        claimed = self._queue.state(name) is QueueState.CLAIMED
        self._machines.job(name).resume(by)
        if not claimed:
            self._scheduler.queueChanged()
        return JobState.QUEUED

    def cancel(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.cancel}; answers once the hold is recorded.
        """
        return self._control("cancel", job, by, self._cancel, self._checkCancel, CANCELLED)

    def _cancel(self, name: str, by: str) -> JobState:
        claimed = self._queue.state(name) is QueueState.CLAIMED
        self._by[name] = by
        self._machines.job(name).cancel(by)
        if claimed:
            self._scheduler.halt(name)
        else:
            self.recordCancelled(name)
            # The queue may be drained now.
            self._scheduler.queueChanged()
        return JobState.CANCELLED

    def recordCancelled(self, name: str) -> None:
        """
        Record a cancelled job as failed as a whole, for C{imapmig report}
        (as C{whenDone} says, not every job completed); a later run that
        completes clears it.
        """
        recording = Deferred.fromCoroutine(recordFailure(self._store, name, CANCELLED_BY_ADMIN))
        recording.addErrback(
            lambda failure: log.failure("Job {job}: recording its cancellation", failure, job=name)
        )

    def retryFailed(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.retryFailed}.
        """

        async def retry() -> JobState:
            try:
                await self._checkFailed(job)
            except (UnknownJob, ControlRefused) as e:
                refusal = e

                def refuse(name: str, by: str) -> JobState:
                    raise refusal

                return await self._control("retry-failed", job, by, refuse)
            return await self._control("retry-failed", job, by, self._retryFailed)

        return Deferred.fromCoroutine(retry())

    async def _checkFailed(self, name: str) -> None:
        """
        Refuse retry-failed unless something of job C{name} failed: a
        message (recorded, or counted by this run), or the job as a whole.
        """
        state = self._queue.state(name)
        if state is QueueState.CANCELLED:
            raise ControlRefused(f"job {name} was cancelled")
        progress = self._progress.job(name)
        if progress.messagesFailed or state is QueueState.FAILED:
            return
        if self._store is not None:
            if (await self._store.counts(name)).failed:
                return
            if await self._store.jobFailure(name) is not None:
                return
        raise ControlRefused(f"nothing of job {name} failed")

    def _retryFailed(self, name: str, by: str) -> JobState:
        before = self._queue.state(name)
        machine = self._machines.job(name)
        machine.retryFailed(by)
        if before is QueueState.CLAIMED:
            return machine.state()
        if before is QueueState.PAUSED:
            return JobState.PAUSED
        if before in ENDED:
            self._scheduler.queueChanged()
        return JobState.QUEUED

    def applies(self, action: str, job: str) -> bool:
        """
        See L{IJobControls.applies}.
        """
        try:
            if action == "retry-failed":
                state = self._queue.state(job)
                progress = self._progress.job(job)
                return state is not QueueState.CANCELLED and (
                    progress.messagesFailed > 0 or state is QueueState.FAILED
                )
            self._bulkControls()[action][0](job)
        except (UnknownJob, ControlRefused, KeyError):
            return False
        return True

    def _bulkControls(
        self,
    ) -> dict[str, tuple[Callable[[str], None], Callable[[str, str], JobState], str | None, str]]:
        """
        Each bulk control's check, application, the hold it records (none
        for retry-failed, which records none) and what it did, in words.
        """
        return {
            "pause": (self._checkPause, self._pause, PAUSED, "paused"),
            "resume": (self._checkResume, self._resume, None, "resumed"),
            "cancel": (self._checkCancel, self._cancel, CANCELLED, "cancelled"),
            "retry-failed": (lambda name: None, self._retryFailed, None, "to retry"),
        }

    def bulk(self, action: str, jobs: Sequence[str], by: str, selection: str) -> Deferred[int]:
        """
        See L{IJobControls.bulk}; answers once the holds of the jobs it
        changes are recorded, and changes none if they cannot be.
        """
        _, apply, hold, done = self._bulkControls()[action]
        names = [name for name in jobs if self.applies(action, name)]
        recording = self._record(names, hold, by) if action != "retry-failed" else succeed(None)

        def applyEach(ignored: None) -> int:
            changed = 0
            for name in names:
                try:
                    apply(name, by)
                except (UnknownJob, ControlRefused):
                    # Changed since the check: nothing else runs between.
                    continue
                changed += 1
            log.info(
                "Control {action} by {client} of the jobs {selection}: {count} {noun} "
                + done
                + " of {selected} selected",
                action=action,
                client=by,
                selection=selection,
                count=changed,
                noun=_jobs(changed),
                selected=len(jobs),
            )
            return changed

        return recording.addCallbacks(applyEach, _notRecorded(action, by))

    def pauseAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.pauseAll}; answers once the holds of the jobs
        it pauses are recorded, and pauses none if they cannot be.
        """
        names = self._jobsWhere(self._wouldPause)

        def apply(ignored: None) -> int:
            paused = self._jobsAmong(names, self._wouldPause)
            claimed = [name for name in paused if self._queue.state(name) is QueueState.CLAIMED]
            # Every job paused before any is stopped: a stopped job's slot
            # goes to no job queued.
            for name in paused:
                self._by[name] = by
                self._machines.job(name).pause(by)
            for name in claimed:
                self._scheduler.halt(name)
            _logAll("pause-all", by, len(paused), "paused")
            return len(paused)

        return self._record(names, PAUSED, by).addCallbacks(
            apply, _notRecorded("pause-all", by)
        )

    def _jobsWhere(self, wanted: Callable[[QueueState, str], bool]) -> list[str]:
        """
        The names of the jobs, in configuration order, whose queue state
        and name C{wanted} accepts.
        """
        return self._jobsAmong([progress.name for progress in self._progress], wanted)

    def _jobsAmong(
        self, names: Sequence[str], wanted: Callable[[QueueState, str], bool]
    ) -> list[str]:
        """
        Those of C{names} whose queue state and name C{wanted} accepts (or,
        once their holds are recorded, still accepts): a job removed by a
        reload (shown, no longer queued) is left out, one changed
        meanwhile left as it is.
        """
        among = []
        for name in names:
            try:
                state = self._queue.state(name)
            except UnknownJob:
                continue
            if wanted(state, name):
                among.append(name)
        return among

    def _wouldPause(self, state: QueueState, name: str) -> bool:
        return state is QueueState.QUEUED or (
            state is QueueState.CLAIMED and self._holds.get(name) != CANCELLED
        )

    def resumeAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.resumeAll}; answers once the holds of the jobs
        it resumes are lifted, and resumes none if they cannot be.
        """
        names = self._jobsWhere(self._wouldResume)

        def apply(ignored: None) -> int:
            # Their holds lifted, a claimed job is told apart no longer.
            resumed = self._jobsAmong(
                names, lambda state, name: state in (QueueState.PAUSED, QueueState.CLAIMED)
            )
            for name in resumed:
                self._machines.job(name).resume(by)
            _logAll("resume-all", by, len(resumed), "resumed")
            if resumed:
                self._scheduler.queueChanged()
            return len(resumed)

        return self._record(names, None, by).addCallbacks(
            apply, _notRecorded("resume-all", by)
        )

    def _wouldResume(self, state: QueueState, name: str) -> bool:
        return state is QueueState.PAUSED or (
            state is QueueState.CLAIMED and self._holds.get(name) == PAUSED
        )


def _notRecorded(action: str, by: str) -> Callable[[Failure], Failure]:
    """
    The errback of a control over every job whose holds could not be
    recorded: it logs the store's error, and passes it on.
    """

    def notRecorded(failure: Failure) -> Failure:
        failure.trap(ImapmigError)
        log.error(
            "Control {action} by {client}: not applied: {why}",
            action=action,
            client=by,
            why=failure.getErrorMessage(),
        )
        return failure

    return notRecorded


def _logAll(action: str, by: str, count: int, done: str) -> None:
    """
    Log a control over every job (pause-all, resume-all): who asked, and
    how many jobs it C{done} (paused, resumed).
    """
    log.info(
        "Control {action} by {client}: {count} {noun} " + done,
        action=action,
        client=by,
        count=count,
        noun=_jobs(count),
    )


def _jobs(count: int) -> str:
    """
    "job" or "jobs", for C{count} of them.
    """
    return "job" if count == 1 else "jobs"


async def recordFailure(store: IStateStore | None, name: str, reason: str) -> None:
    """
    Record in C{store} that job C{name} failed as a whole because of
    C{reason}, for C{imapmig report}; a store that cannot is logged.
    """
    if store is None:
        return
    try:
        await store.recordJobFailure(name, reason)
    except ImapmigError as e:
        log.error(
            "Job {job}: cannot record the job's outcome in the state store: {why}",
            job=name,
            why=str(e),
        )
