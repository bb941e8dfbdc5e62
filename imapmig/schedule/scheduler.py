# -*- test-case-name: tests.test_schedule_service -*-
"""
The scheduler: runs up to C{max_jobs} jobs at once, claimed from the job
queue in configuration order, each once its essential connections are
granted under the servers' limits.

Built by L{imapmig.service}, which gives it the function that makes a
claimed job's L{imapmig.job.MigrationJob}; this module knows jobs only as
L{ScheduledJob}.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from attrs import evolve
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from imapmig.config.model import AccountConfig, ImapSourceConfig, JobConfig
from imapmig.errors import ImapmigError
from imapmig.progress import JobProgress, JobState, MigrationProgress
from imapmig.schedule.controls import PAUSED_BY_ADMIN, ControlRefused, IJobControls, UnknownJob
from imapmig.schedule.grants import (
    JOB_SLOTS,
    ConnectionGrants,
    Grant,
    GrantImpossible,
    JobConnections,
)
from imapmig.schedule.queue import (
    ENDED,
    IJobQueue,
    JobClaim,
    JobOutcome,
    LeaseLost,
    QueueState,
    Requested,
)
from imapmig.schedule.throttle import utcTime
from imapmig.state import IStateStore

log = Logger()

CANCELLED_BY_ADMIN = "cancelled by the admin"
"""
The error a cancelled job shows, and is recorded with in the state store.
"""

class ScheduledJob(Protocol):
    """
    What the scheduler runs (a L{MigrationJob}).
    """

    name: str
    # Set when the run ended deferred: the job cannot go on before this
    # time of the clock (a daily budget used up).
    deferredUntil: float | None

    async def run(self) -> bool:
        """
        Run to the end; C{True} if the job completed.  C{False}, with
        C{deferredUntil} set, if it cannot go on before then.
        """

    def stop(self) -> None:
        """
        Take no new work; L{run} returns soon.
        """


@implementer(IJobControls)
class JobQueueService(Service):
    """
    The scheduler: runs up to C{max_jobs} jobs at once, claimed from the
    job queue in configuration order; each waits for its essential
    connections to be granted (L{JobConnections.reserve}), is built only
    then, and runs.  A job is claimed with a job slot; while it waits for
    its connections (a full server), it gives its slot to the next job
    (up to C{max_jobs} jobs wait so at once; more keep their slot), and
    takes a slot again once granted, before any job not yet claimed: a
    full server does not hold up the jobs for other servers.  Once the
    queue is drained, C{whenDone} is called with C{True} if every job
    completed.

    A job whose run ends deferred (its daily budget used up) gives back its
    slot and connections to the other jobs, and goes back to the queue
    until it is due; one timer wakes the scheduler for the earliest due.
    The queue is drained only once no job is left, deferred ones included.

    A job that crashes (a bug of ours) fails alone; the others go on.
    Stopping the service stops every running job, gives up every wait,
    and fires once all of them have ended.

    It provides the admin's controls (L{IJobControls}) over the queue: a
    job paused or cancelled while claimed is stopped as a stopping daemon
    stops it (the replies in flight awaited), its grants and slot given
    back; a paused job holds the queue undrained until it is resumed or
    cancelled.  A job the queue requests stopped on a renewal (a control
    given through another daemon of a fleet) is stopped the same way.
    """

    def __init__(
        self,
        queue: IJobQueue,
        grants: ConnectionGrants,
        build: Callable[[JobConfig, JobConnections], ScheduledJob],
        progress: MigrationProgress,
        clock: IReactorTime,
        whenDone: Callable[[bool], None] | None,
        owner: str = "imapmig",
        lease: float = 600.0,
        store: IStateStore | None = None,
    ) -> None:
        """
        @param queue: where the jobs are claimed.
        @param grants: the job slots and connection pools.
        @param build: makes a claimed job's L{MigrationJob}, its session
            openers asking C{JobConnections} for their grants.
        @param progress: every job's progress (queued jobs included).
        @param owner: the name this scheduler claims jobs under.
        @param lease: seconds a claim lives; renewed every third of it.
        @param store: where a job that fails here (its connections can
            never be granted, a crash building or running it) is recorded
            as failed for C{imapmig report}, and where retry-failed learns
            what failed; L{None}: neither.
        """
        self._queue = queue
        self._grants = grants
        self._build = build
        self._progress = progress
        self._clock = clock
        self._whenDone = whenDone
        self._owner = owner
        self._lease = lease
        self._store = store
        self._stopping = False
        # The jobs whose latest run did not complete (failed, cancelled,
        # taken over), for whenDone.
        self._incomplete: set[str] = set()
        # Claimed jobs being stopped by a control (pause, cancel).
        self._halted: set[str] = set()
        self._started: set[str] = set()
        # Fired when a running job ends or the earliest deferred job is
        # due (_dueTimer), while there is nothing to claim.
        self._wake: Deferred[None] | None = None
        self._dueTimer: IDelayedCall | None = None
        self._waitingSlot: Deferred[Grant] | None = None
        # The waits of jobs not yet built (a connection grant, a slot
        # again), given up on a stop.
        self._reserving: dict[str, Deferred[Any]] = {}
        # Jobs waiting for their connections without a slot, and jobs
        # granted their connections that wait for a slot again.
        self._slotless = 0
        self._needSlot = 0
        self._jobs: dict[str, ScheduledJob] = {}
        self._claims: dict[str, JobClaim] = {}
        self._active: dict[str, Deferred[None]] = {}
        self._renewal = LoopingCall(self._renewLeases)
        self._renewal.clock = clock
        self._running: Deferred[None] | None = None

    def startService(self) -> None:
        Service.startService(self)
        self._stopping = False
        self._startRunning()

    def _startRunning(self) -> None:
        self._renewal.start(self._lease / 3, now=False)
        self._running = Deferred.fromCoroutine(self._runAll())

    def _runAgain(self) -> None:
        """
        Claim again after the queue was drained, if jobs were queued again
        since (retry-failed, resume).
        """
        if self.running and not self._stopping and self._running is not None and self._running.called:
            self._startRunning()

    @property
    def runningJobs(self) -> list[str]:
        """
        The names of the jobs claimed and not yet ended.
        """
        return list(self._claims)

    async def _runAll(self) -> None:
        while not self._stopping:
            waiting = self._waitingSlot = self._grants.jobSlot()
            try:
                slot = await waiting
            except CancelledError:
                break
            finally:
                self._waitingSlot = None
            if self._needSlot:
                # A job granted its connections waits for a slot: it goes
                # first (releasing grants it to the oldest slot waiter).
                slot.release()
                continue
            claim = self._claimNext()
            if claim is None:
                slot.release()
                if (
                    not self._active
                    and self._queue.nextDue() is None
                    and not self._queue.counts().paused
                ):
                    break
                try:
                    await self._changed()
                except CancelledError:
                    break
                continue
            name = claim.job.name
            self._started.add(name)
            self._claims[name] = claim
            running = Deferred.fromCoroutine(self._runOne(claim, slot))
            if not running.called:
                # (A job that ended at once has already left _active.)
                self._active[name] = running
        while self._active:
            await DeferredList(list(self._active.values()))
        if self._renewal.running:
            self._renewal.stop()
        if self._stopping:
            return
        allCompleted = not self._incomplete
        log.info(
            "Job queue drained: {count} jobs, {outcome}",
            count=len(self._started),
            outcome="all completed" if allCompleted else "some failed or were cancelled",
        )
        if self._whenDone is not None:
            self._whenDone(allCompleted)

    def _changed(self) -> Deferred[None]:
        """
        Fires when a running job ends or the earliest deferred job is due.
        """
        due = self._queue.nextDue()
        if due is not None:
            self._dueTimer = self._clock.callLater(
                max(0.0, due - self._clock.seconds()), self._wakeUp
            )
        wake = self._wake = Deferred()
        return wake

    def _wakeUp(self) -> None:
        if self._dueTimer is not None and self._dueTimer.active():
            self._dueTimer.cancel()
        self._dueTimer = None
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.callback(None)

    def _claimNext(self) -> JobClaim | None:
        """
        Claim the next job that this scheduler is not already running.
        """
        while True:
            claim = self._queue.claim(self._owner, self._clock.seconds(), self._lease)
            if claim is None or claim.job.name not in self._claims:
                return claim
            # Our own lease on a running job lapsed unrenewed (a renewal
            # too late, where a queue lets an owner's claims expire) and
            # the queue gave the job back: it goes on
            # running, under the new claim.
            log.warn("Job {job}: claimed again while running; kept running", job=claim.job.name)
            self._claims[claim.job.name] = claim

    async def _runOne(self, claim: JobClaim, slot: Grant | None) -> None:
        """
        Run one claimed job: wait for its essential connections (without
        its slot, if few enough jobs wait so), build it, run it; whatever
        happens, give back its grants and its slot.
        """
        name = claim.job.name
        progress = self._progress.job(name)
        connections = JobConnections(self._grants, essentialConnections(claim.job))
        outcome = JobOutcome.FAILED
        notBefore = None
        # Queued again, if deferred before: its last run's lifecycle showed
        # it paused.
        progress.showState(_queued)
        try:
            reserving = connections.reserve()
            slotless = False
            if not reserving.called:
                progress.waiting("a connection grant", None)
                log.info("Job {job}: waiting for a connection grant", job=name)
                self._reserving[name] = reserving
                if slot is not None and self._slotless < (self._grants.pools.limit(JOB_SLOTS) or 0):
                    slotless = True
                    self._slotless += 1
                    slot.release()
                    slot = None
            try:
                await reserving
            finally:
                self._reserving.pop(name, None)
                progress.waiting(None, None)
                if slotless:
                    self._slotless -= 1
            if self._stopping or name in self._halted:
                raise CancelledError()
            if slot is None:
                slot = await self._slotAgain(name)
            job = self._build(claim.job, connections)
            self._jobs[name] = job
            log.info(
                "Job {job}: started ({running} of at most {maxJobs} jobs running)",
                job=name,
                running=self._grants.pools.inUse(JOB_SLOTS),
                maxJobs=self._grants.pools.limit(JOB_SLOTS),
            )
            completed = await job.run()
            if completed:
                outcome = JobOutcome.COMPLETED
            elif job.deferredUntil is not None:
                outcome, notBefore = JobOutcome.DEFERRED, job.deferredUntil
                log.info(
                    "Job {job}: deferred until {until}; its job slot and connections"
                    " go to other jobs meanwhile",
                    job=name,
                    until=utcTime(notBefore),
                )
            elif self._stopping or name in self._halted:
                outcome = JobOutcome.STOPPED
        except CancelledError:
            outcome = JobOutcome.STOPPED
            log.info("Job {job}: stopped while waiting for a connection grant or a slot", job=name)
        except GrantImpossible as e:
            log.error("Job {job} failed: {reason}", job=name, reason=str(e))
            _showFailed(progress, str(e))
            await self._recordFailure(name, str(e))
        except Exception as e:
            # A bug of ours: this job fails, the others go on.
            log.failure("Job {job} crashed", job=name)
            reason = f"internal error: {e.__class__.__name__}: {e}"
            _showFailed(progress, reason)
            await self._recordFailure(name, reason)
        finally:
            self._jobs.pop(name, None)
            current = self._claims.pop(name, claim)
            self._active.pop(name, None)
            connections.end()
            self._queue.finish(current, outcome, notBefore)
            self._ended(name, outcome, progress)
            if slot is not None:
                slot.release()
            self._wakeUp()

    def _ended(self, name: str, outcome: JobOutcome, progress: JobProgress) -> None:
        """
        After job C{name}'s claim finished with C{outcome}: count it for
        C{whenDone}, and show where a control put it.
        """
        halted = name in self._halted
        self._halted.discard(name)
        state = self._queue.state(name)
        if outcome is JobOutcome.COMPLETED:
            self._incomplete.discard(name)
        elif outcome is not JobOutcome.DEFERRED and not (
            halted and state in (QueueState.PAUSED, QueueState.QUEUED)
        ):
            self._incomplete.add(name)
        if state is QueueState.PAUSED:
            _showPaused(progress)
            log.info(
                "Job {job}: paused by the admin; its connections and job slot are"
                " given back until it is resumed",
                job=name,
            )
        elif state is QueueState.CANCELLED:
            _showCancelled(progress)
            log.info("Job {job}: cancelled by the admin", job=name)
            self._recordCancelled(name)
        else:
            progress.pausedByAdmin = False
            if state is QueueState.QUEUED and not self._stopping and (
                halted or outcome in (JobOutcome.COMPLETED, JobOutcome.FAILED)
            ):
                # Queued again: resumed while it stopped, or to run again
                # (retry-failed while it ran).
                progress.showState(_queued)
                progress.waiting(None, None)

    async def _recordFailure(self, name: str, reason: str) -> None:
        """
        Record in the state store that job C{name} failed as a whole
        because of C{reason}, for C{imapmig report}.
        """
        if self._store is None:
            return
        try:
            await self._store.recordJobFailure(name, reason)
        except ImapmigError as e:
            log.error(
                "Job {job}: cannot record the job's outcome in the state store: {why}",
                job=name,
                why=str(e),
            )

    async def _slotAgain(self, name: str) -> Grant:
        """
        A job slot for job C{name}, granted its connections after it gave
        its slot away: before any job not yet claimed.
        """
        waiting = self._grants.jobSlot()
        if waiting.called:
            return await waiting
        self._progress.job(name).waiting("a job slot", None)
        self._reserving[name] = waiting
        self._needSlot += 1
        try:
            return await waiting
        finally:
            self._needSlot -= 1
            self._reserving.pop(name, None)
            self._progress.job(name).waiting(None, None)

    def _renewLeases(self) -> None:
        for name, claim in list(self._claims.items()):
            try:
                renewed = self._claims[name] = self._queue.renew(claim, self._lease)
            except LeaseLost:
                log.error(
                    "Job {job}: its claim was taken over by another owner; stopping it",
                    job=name,
                )
                job = self._jobs.get(name)
                if job is not None:
                    job.stop()
                continue
            if renewed.requested in (Requested.PAUSE, Requested.CANCEL) and name not in self._halted:
                # Asked of the queue through another daemon.
                log.info(
                    "Job {job}: the queue asks it {what}; stopping it",
                    job=name,
                    what="paused" if renewed.requested is Requested.PAUSE else "cancelled",
                )
                self._halt(name)

    def _halt(self, name: str) -> None:
        """
        Stop the claimed job C{name} for a control: give up its waits, or
        stop it running (the replies in flight awaited); its claim then
        finishes stopped, and the queue puts it where the control said.
        """
        self._halted.add(name)
        waiting = self._reserving.get(name)
        if waiting is not None:
            waiting.cancel()
        job = self._jobs.get(name)
        if job is not None:
            job.stop()

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
            self._halt(name)
        else:
            _showPaused(progress)
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
            self._queuedAgain()
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
            self._halt(name)
        else:
            _showCancelled(progress)
            self._incomplete.add(name)
            self._recordCancelled(name)
            # The queue may be drained now.
            self._wakeUp()
        return JobState.CANCELLED

    def _recordCancelled(self, name: str) -> None:
        """
        Record a cancelled job as failed as a whole, for C{imapmig report}
        (as C{whenDone} says, not every job completed); a later run that
        completes clears it.
        """
        recording = Deferred.fromCoroutine(self._recordFailure(name, CANCELLED_BY_ADMIN))
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
            self._queuedAgain()
        return JobState.QUEUED

    def pauseAll(self, by: str) -> Deferred[int]:
        """
        See L{IJobControls.pauseAll}.
        """
        names = self._queue.pauseAll()
        for name in names:
            progress = self._progress.job(name)
            progress.pausedByAdmin = True
            if name in self._claims:
                self._halt(name)
            else:
                _showPaused(progress)
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
            if name not in self._claims:
                progress.showState(_queued)
                progress.waiting(None, None)
        log.info(
            "Control {action} by {client}: {count} jobs resumed",
            action="resume-all",
            client=by,
            count=len(names),
        )
        if names:
            self._queuedAgain()
        return succeed(len(names))

    def _queuedAgain(self) -> None:
        """
        A job was queued again: claim it, now or once a slot is free.
        """
        self._wakeUp()
        self._runAgain()

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        self._stopping = True
        if self._waitingSlot is not None:
            self._waitingSlot.cancel()
        for reserving in list(self._reserving.values()):
            reserving.cancel()
        for job in list(self._jobs.values()):
            job.stop()
        if self._dueTimer is not None and self._dueTimer.active():
            self._dueTimer.cancel()
        self._dueTimer = None
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.cancel()
        return self._running


def _queued() -> JobState:
    return JobState.QUEUED


def _paused() -> JobState:
    return JobState.PAUSED


def _cancelled() -> JobState:
    return JobState.CANCELLED


def _showPaused(progress: JobProgress) -> None:
    """
    Show a job paused by the admin.
    """
    progress.pausedByAdmin = True
    progress.showState(_paused)
    progress.waiting(PAUSED_BY_ADMIN, None)


def _showCancelled(progress: JobProgress) -> None:
    """
    Show a job cancelled by the admin.
    """
    progress.pausedByAdmin = False
    progress.showState(_cancelled)
    progress.finished(CANCELLED_BY_ADMIN)


def _showFailed(progress: JobProgress, error: str) -> None:
    """
    Show a job that the scheduler saw fail as failed, with C{error}.
    """
    progress.showState(lambda: JobState.FAILED)
    progress.finished(error)


def withinLimits(job: JobConfig) -> JobConfig:
    """
    C{job} with its C{connections} lowered to what its destination server
    and account (and an IMAP source's) may ever grant it: a job does not
    ask for connections it could only wait for.
    """
    accounts: list[AccountConfig] = [job.destination]
    if isinstance(job.source, ImapSourceConfig):
        accounts.append(job.source)
    connections = job.connections
    for account in accounts:
        limits = account.server.limits
        for limit in (limits.maxConnections, limits.perAccount.maxConnections):
            if limit is not None:
                connections = min(connections, limit)
    if connections == job.connections:
        return job
    log.info(
        "Job {job}: {connections} connections instead of {configured}, the most"
        " its servers' max_connections and per_account.max_connections allow",
        job=job.name,
        connections=connections,
        configured=job.connections,
    )
    return evolve(job, connections=connections)


def essentialConnections(job: JobConfig) -> list[tuple[str, str]]:
    """
    The connections C{(server, user)} a job cannot start without: its first
    destination connection and, for an IMAP source, its first source one.
    """
    essential = [(job.destination.server.name, job.destination.user)]
    if isinstance(job.source, ImapSourceConfig):
        essential.append((job.source.server.name, job.source.user))
    return essential
