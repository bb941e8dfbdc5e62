# -*- test-case-name: tests.test_controls -*-
"""
The admin's controls (L{IJobControls}) over a scheduler's job queue.

Pause and cancel are queue states (L{imapmig.schedule.queue}): a queued
job is paused or cancelled in the queue; a claimed one is requested so in
the queue and stopped by its scheduler (L{ControlledScheduler.halt}), and
its claim, once finished, puts it where the control said.  The progress
model shows it meanwhile: C{pausedByAdmin}, then C{paused} with
L{PAUSED_BY_ADMIN}, or C{cancelled}.
"""

from __future__ import annotations

from typing import Callable, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from imapmig.errors import ImapmigError
from imapmig.progress import JobProgress, JobState, MigrationProgress
from imapmig.schedule.controls import PAUSED_BY_ADMIN, ControlRefused, IJobControls, UnknownJob
from imapmig.schedule.queue import ENDED, IJobQueue, QueueState
from imapmig.state import IStateStore

log = Logger()

CANCELLED_BY_ADMIN = "cancelled by the admin"
"""
The error a cancelled job shows, and is recorded with in the state store.
"""


class ControlledScheduler(Protocol):
    """
    What the controls need of the scheduler that runs the queue's jobs.
    """

    def isClaimed(self, name: str) -> bool:
        """
        Whether this scheduler has claimed job C{name} (running it, or
        waiting for its connections).
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
    ) -> None:
        """
        @param store: where retry-failed learns what failed, and where a
            cancelled job is recorded as failed; L{None}: neither.
        """
        self._queue = queue
        self._progress = progress
        self._store = store
        self._scheduler = scheduler

    def _control(
        self, action: str, name: str, by: str, apply: Callable[[str], JobState]
    ) -> Deferred[JobState]:
        """
        Apply a job control, logging one line of what came of it.
        """
        try:
            state = apply(name)
        except (UnknownJob, ControlRefused) as e:
            log.info(
                "Control {action} of job {job} by {client}: refused: {why}",
                action=action,
                job=name,
                client=by,
                why=str(e),
            )
            return fail(e)
        log.info(
            "Control {action} of job {job} by {client}: {state}",
            action=action,
            job=name,
            client=by,
            state=state.value,
        )
        return succeed(state)

    def pause(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.pause}.
        """
        return self._control("pause", job, by, self._pause)

    def _pause(self, name: str) -> JobState:
        state = self._queue.pause(name)
        progress = self._progress.job(name)
        progress.pausedByAdmin = True
        if state is QueueState.CLAIMED:
            self._scheduler.halt(name)
        else:
            showPaused(progress)
        return JobState.PAUSED

    def resume(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.resume}.
        """
        return self._control("resume", job, by, self._resume)

    def _resume(self, name: str) -> JobState:
        state = self._queue.resume(name)
        progress = self._progress.job(name)
        progress.pausedByAdmin = False
        if state is QueueState.QUEUED:
            progress.showState(_queued)
            progress.waiting(None, None)
            self._scheduler.queueChanged()
        return JobState.QUEUED

    def cancel(self, job: str, by: str) -> Deferred[JobState]:
        """
        See L{IJobControls.cancel}.
        """
        return self._control("cancel", job, by, self._cancel)

    def _cancel(self, name: str) -> JobState:
        state = self._queue.cancel(name)
        progress = self._progress.job(name)
        if state is QueueState.CLAIMED:
            self._scheduler.halt(name)
        else:
            showCancelled(progress)
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

                def refuse(name: str) -> JobState:
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

    def _retryFailed(self, name: str) -> JobState:
        before = self._queue.state(name)
        after = self._queue.requeue(name)
        progress = self._progress.job(name)
        if after is QueueState.CLAIMED:
            return progress.state
        if after is QueueState.PAUSED:
            return JobState.PAUSED
        if before in ENDED:
            progress.showState(_queued)
            progress.waiting(None, None)
            self._scheduler.queueChanged()
        return JobState.QUEUED

    def pauseAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.pauseAll}.
        """
        names = self._queue.pauseAll()
        for name in names:
            progress = self._progress.job(name)
            progress.pausedByAdmin = True
            if self._scheduler.isClaimed(name):
                self._scheduler.halt(name)
            else:
                showPaused(progress)
        log.info(
            "Control {action} by {client}: {count} jobs paused",
            action="pause-all",
            client=by,
            count=len(names),
        )
        return succeed(len(names))

    def resumeAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.resumeAll}.
        """
        names = self._queue.resumeAll()
        for name in names:
            progress = self._progress.job(name)
            progress.pausedByAdmin = False
            if not self._scheduler.isClaimed(name):
                progress.showState(_queued)
                progress.waiting(None, None)
        log.info(
            "Control {action} by {client}: {count} jobs resumed",
            action="resume-all",
            client=by,
            count=len(names),
        )
        if names:
            self._scheduler.queueChanged()
        return succeed(len(names))


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


def _queued() -> JobState:
    return JobState.QUEUED


def _paused() -> JobState:
    return JobState.PAUSED


def _cancelled() -> JobState:
    return JobState.CANCELLED


def showPaused(progress: JobProgress) -> None:
    """
    Show a job paused by the admin: no error (its run, stopped, said
    "stopped before the end").
    """
    progress.pausedByAdmin = True
    progress.error = None
    progress.showState(_paused)
    progress.waiting(PAUSED_BY_ADMIN, None)


def showCancelled(progress: JobProgress) -> None:
    """
    Show a job cancelled by the admin.
    """
    progress.pausedByAdmin = False
    progress.showState(_cancelled)
    progress.finished(CANCELLED_BY_ADMIN)


