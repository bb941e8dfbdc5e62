# -*- test-case-name: tests.test_schedule_service -*-
"""
The scheduler: runs up to C{max_jobs} jobs at once, claimed from the job
queue in configuration order, each once its essential connections are
granted under the servers' limits.

Built by L{imapmig.daemon.service}, which gives it the function that makes a
claimed job's L{imapmig.job.MigrationJob}; this module knows jobs only as
L{ScheduledJob}.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from attrs import evolve
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall, deferLater
from twisted.logger import Logger

from imapmig.errors import GrantImpossible, ImapmigError, LeaseLost, QueueUnavailable, UnknownJob
from imapmig.config.model import AccountConfig, ImapSourceConfig, JobConfig
from imapmig.job.machine import JobInputs, JobMachines
from imapmig.progress import ENDED, JobState, MigrationProgress
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, Grant, JobConnections
from imapmig.schedule.jobcontrols import JobControls, recordFailure
from imapmig.queue import IAsyncJobQueue, IJobQueue, JobClaim, JobOutcome, QueueState, Requested
from imapmig.queue.memory import asAsync
from imapmig.throttle import utcTime
from imapmig.state import IStateStore
from imapmig.state.outage import OutageLog
from imapmig.units import Count

log = Logger()


class ScheduledJob(Protocol):
    """
    What the scheduler runs (a L{MigrationJob}).
    """

    name: str
    # Set when the run ended deferred: the job cannot go on before this
    # time of the clock (a daily budget used up).
    deferredUntil: float | None

    # Whether the last run ended stopped (cancelled, or held by a control).
    stopped: bool

    def run(self) -> Deferred[bool]:
        """
        Run to the end; C{True} if the job completed.  C{False}, with
        C{deferredUntil} set, if it cannot go on before then.  Cancelling
        the run stops it: it takes no new work, and fires (C{False}) once
        what was in flight is settled.  It fails with L{LeaseLost} if it
        found its claim no longer this daemon's (a fenced write, the send
        deadline passed) and abandoned itself.
        """

    def abandon(self) -> None:
        """
        Its claim is lost: stop the run at once, dropping what is in
        flight (its connections aborted, nothing more recorded).
        """


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

    Its C{controls} are the admin's (L{JobControls}): a job paused or
    cancelled while claimed is stopped as a stopping daemon stops it (the
    replies in flight awaited), its grants and slot given back; a paused
    job holds the queue undrained until it is resumed or cancelled.  A
    job the queue requests stopped on a renewal (a control given through
    another daemon of a fleet) is stopped the same way.

    @ivar controls: the admin's controls over this scheduler's queue.
    """

    def __init__(
        self,
        queue: IJobQueue | IAsyncJobQueue,
        grants: ConnectionGrants,
        build: Callable[[JobConfig, JobConnections], ScheduledJob],
        progress: MigrationProgress,
        clock: IReactorTime,
        whenDone: Callable[[bool], None] | None,
        owner: str = "imapmig",
        lease: float = 600.0,
        store: IStateStore | None = None,
        machines: JobMachines | None = None,
    ) -> None:
        """
        @param queue: where the jobs are claimed: an L{IJobQueue} (the one
            daemon's, its claims renewed here every third of C{lease}),
            or a fleet's L{IAsyncJobQueue} (see
            L{imapmig.schedule.fleet.FleetScheduler}).
        @param grants: the job slots and connection pools.
        @param build: makes a claimed job's L{MigrationJob}, its session
            openers asking C{JobConnections} for their grants.
        @param progress: every job's progress (queued jobs included).
        @param owner: the name this scheduler claims jobs under.
        @param lease: seconds a claim lives; renewed every third of it.
        @param store: where a job that fails here (its connections can
            never be granted, a crash building or running it, a
            cancellation) is recorded as failed for C{imapmig report}, and
            where retry-failed learns what failed; L{None}: neither.
        @param machines: the jobs' machines (L{None}: its own), told of
            each job's claim, grants, holds and end; C{build} gives each
            run its job's machine.  They write C{queue}'s holds.
        """
        # One code path: an IJobQueue's answers are fired Deferreds.
        self._queue = asAsync(queue)
        self._renewQueue = None if IAsyncJobQueue.providedBy(queue) else queue
        # Seconds between claims while a slot is free (a fleet's), or None.
        self._poll: float | None = None
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
        # The pause before the queue's last count is read again.
        self._drainWait: list[Deferred[None]] = []
        self._dueTimer: IDelayedCall | None = None
        self._waitingSlot: Deferred[Grant] | None = None
        # The waits of jobs not yet built (a connection grant, a slot
        # again), given up on a stop.
        self._reserving: dict[str, Deferred[Any]] = {}
        # Jobs waiting for their connections without a slot, and jobs
        # granted their connections that wait for a slot again.
        self._slotless = 0
        self._needSlot = 0
        # The runs of the jobs built, each stopped by cancelling it.
        self._runs: dict[str, Deferred[bool]] = {}
        self._built: dict[str, ScheduledJob] = {}
        self._claims: dict[str, JobClaim] = {}
        self._active: dict[str, Deferred[None]] = {}
        self._renewal = LoopingCall(_renewClaims, self)
        self._renewal.clock = clock
        self._running: Deferred[None] | None = None
        if machines is None:
            machines = JobMachines(progress, clock, queue=queue)
        elif machines.queue is not queue:
            # The machines write the queue's holds: this queue's.
            raise ValueError("the jobs' machines must write the scheduler's queue")
        self.machines = machines
        self.controls = JobControls(queue, progress, store, self, self.machines)  # type: ignore[arg-type]
        self._holdsRestored = False

    def startService(self) -> None:
        Service.startService(self)
        self._stopping = False
        self._startRunning()

    def _startRunning(self) -> None:
        if self._renewQueue is not None:
            self._renewal.start(self._lease / 3, now=False)
        self._running = Deferred.fromCoroutine(self._runAll())
        self._running.addErrback(
            lambda failure: log.failure("The claim loop failed: no job is claimed any more", failure)
        )

    def _runAgain(self) -> None:
        """
        Claim again after the queue was drained, if jobs were queued again
        since (retry-failed, resume).
        """
        if self.running and not self._stopping and self._running is not None and self._running.called:
            self._startRunning()

    @property
    def runningJobs(self) -> list[str]:
        """The names of the jobs claimed and not yet ended."""
        return list(self._claims)

    async def _runAll(self) -> None:
        # Before the first claim: a job the admin paused or cancelled
        # before a restart is never claimed.
        if not self._holdsRestored and not await self._restoreHolds():
            return
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
            claim = await self._claimNext()
            if claim is not None:
                self._start(claim, slot)
                continue
            slot.release()
            if await self._nothingLeft():
                break
            try:
                await self._changed()
            except CancelledError:
                break
        while self._active:
            await DeferredList(list(self._active.values()))
        if self._renewal.running:
            self._renewal.stop()
        if not self._stopping:
            await self._drained()

    async def _restoreHolds(self) -> bool:
        """
        Put the jobs the admin held before a restart where their holds say.

        @return: whether it could; if not (the store cannot read the
            holds), no job is started, and the run is over.
        """
        try:
            await self.controls.restoreHolds()
        except ImapmigError as e:
            log.error(
                "Cannot read the admin's holds on jobs from the state store: {why};"
                " no job is started",
                why=str(e),
            )
            if self._renewal.running:
                self._renewal.stop()
            if self._whenDone is not None:
                self._whenDone(False)
            return False
        self._holdsRestored = True
        return True

    def _start(self, claim: JobClaim, slot: Grant) -> None:
        """
        Run a claimed job in C{slot}.
        """
        name = claim.job.name
        self._started.add(name)
        self._claims[name] = claim
        # Entered before its run starts, which leaves _active itself: a run
        # may leave before its first suspension (a job stopped before its
        # grant, then finishing its claim in a fleet's queue), and one
        # entered after it had left stayed for ever, its ended run awaited
        # again and again by the stop without returning to the reactor.
        ended: Deferred[None] = Deferred()
        self._active[name] = ended
        Deferred.fromCoroutine(self._runOne(claim, slot)).chainDeferred(ended)

    async def _nothingLeft(self) -> bool:
        """
        Whether, with nothing to claim, the queue is drained: no job runs,
        none is deferred, none is paused.
        """
        if self._active or await self._queue.nextDue() is not None:
            return False
        return not (await self._queue.counts()).paused

    async def _drained(self) -> None:
        """
        The queue is drained: say so, and whether every job completed.
        """
        cancelled = await _cancelledCount(self._queue, self._clock, self._drainWait)
        if cancelled is None:
            return
        allCompleted = not self._incomplete and not cancelled
        log.info(
            "Job queue drained: {jobs}, {outcome}",
            count=len(self._started),
            jobs=Count(len(self._started), "job"),
            outcome="all completed" if allCompleted else "some failed or were cancelled",
        )
        if self._whenDone is not None:
            self._whenDone(allCompleted)

    async def _changed(self) -> None:
        """
        Fires when a running job ends or the earliest deferred job is due
        (or, for a fleet's scheduler, its next claim).
        """
        wake = self._wake = Deferred()
        try:
            due = await self._queue.nextDue()
        except QueueUnavailable:
            # A fleet's database unreachable (restarting): the next poll
            # asks again.  Raised, it ended the claims for good, silently.
            due = None
        if self._poll is not None:
            due = min(due or float("inf"), self._clock.seconds() + self._poll)
        if due is not None and self._wake is wake:
            self._dueTimer = self._clock.callLater(
                max(0.0, due - self._clock.seconds()), self._wakeUp
            )
        await wake

    def _wakeUp(self) -> None:
        if self._dueTimer is not None and self._dueTimer.active():
            self._dueTimer.cancel()
        self._dueTimer = None
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.callback(None)

    def _claim(self) -> Deferred[JobClaim | None]:
        """
        Claim the next job.
        """
        return self._queue.claim(self._owner, self._clock.seconds(), self._lease)

    async def _claimNext(self) -> JobClaim | None:
        """
        Claim the next job that this scheduler is not already running.
        """
        while True:
            claim = await self._claim()
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
        machine = self.machines.job(name)
        connections = JobConnections(self._grants, essentialConnections(claim.job))
        outcome = JobOutcome.FAILED
        notBefore = None
        _claimed(machine, claim, self._poll is not None)
        try:
            await _afterSameMigration(self, claim.job, machine)
            reserving = connections.reserve()
            slotless = self._waitForGrant(machine, name, reserving, slot)
            if slotless:
                slot = None
            try:
                await reserving
            finally:
                self._reserving.pop(name, None)
                if slotless:
                    self._slotless -= 1
            if self._stopping or name in self._halted:
                raise CancelledError()
            if slot is None:
                slot = await self._slotAgain(name)
            job = self._built[name] = self._build(claim.job, connections)
            # The job's own start line (imapmig.job.joblog) follows.
            log.debug(
                "Job {job}: started ({running} of at most {maxJobs} jobs running)",
                job=name,
                running=self._grants.pools.inUse(JOB_SLOTS),
                maxJobs=self._grants.pools.limit(JOB_SLOTS),
            )
            running = self._runs[name] = job.run()
            completed = await running
            # A control's pause or cancel may end a wait to retry before halt().
            stopped = self._stopping or name in self._halted or job.stopped
            outcome, notBefore = _runOutcome(name, job, completed, stopped)
        except LeaseLost:
            # The run found its claim lost, said why, and abandoned itself.
            outcome = JobOutcome.STOPPED
            self._claimLost(name)
        except CancelledError:
            outcome = JobOutcome.STOPPED
            self._gaveUp(machine)
            log.info("Job {job}: stopped while waiting for a connection grant or a slot", job=name)
        except GrantImpossible as e:
            log.error("Job {job} failed: {reason}", job=name, reason=str(e))
            _fail(machine, str(e))
            await recordFailure(self._store, name, str(e))
        except Exception as e:
            # A bug of ours: this job fails, the others go on.
            log.failure("Job {job} crashed", job=name)
            reason = f"internal error: {e.__class__.__name__}: {e}"
            _fail(machine, reason)
            await recordFailure(self._store, name, reason)
        finally:
            self._runs.pop(name, None)
            self._built.pop(name, None)
            current = self._claims.pop(name, claim)
            self._active.pop(name, None)
            connections.end()
            if await self._finish(current, outcome, notBefore):
                await self._ended(name, outcome, machine)
            if slot is not None:
                slot.release()
            self._wakeUp()

    def _waitForGrant(
        self, machine: JobInputs, name: str, reserving: Deferred[Any], slot: Grant | None
    ) -> bool:
        """
        Job C{name} waits for its essential connections (C{reserving}),
        unless granted at once, giving its C{slot} to the next job if few
        enough jobs wait so.  Whether it gave its slot away.
        """
        if reserving.called:
            return False
        machine.waitForGrant("a connection grant")
        log.info("Job {job}: waiting for a connection grant", job=name)
        self._reserving[name] = reserving
        if slot is None or self._slotless >= (self._grants.pools.limit(JOB_SLOTS) or 0):
            return False
        self._slotless += 1
        slot.release()
        return True

    def _gaveUp(self, machine: JobInputs) -> None:
        """
        A claimed job's wait for its grants or slot was given up: by the
        daemon's stop (the job stops) or a control (L{_ended}).
        """
        if self._stopping:
            machine.stop()

    def _claimLost(self, name: str) -> None:
        """
        Job C{name}'s run found its claim no longer this scheduler's: a
        fleet's is not finished (the one daemon's queue has no fence to
        say so).
        """

    async def _finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None
    ) -> bool:
        """
        Finish C{claim} with C{outcome} in the queue.

        @return: whether it was finished (a fleet's lost claim is not).
        """
        await self._queue.finish(claim, outcome, notBefore)
        return True

    async def _ended(self, name: str, outcome: JobOutcome, machine: JobInputs) -> None:
        """
        After job C{name}'s claim finished with C{outcome}: count it for
        C{whenDone}, and show where a control put it.
        """
        halted = name in self._halted
        self._halted.discard(name)
        try:
            state = await self._queue.state(name)
        except UnknownJob:
            # A reload removed it while it ran: it has left the queue.
            self._incomplete.discard(name)
            log.info(
                "Job {job}: ended ({outcome}); it was removed from the configuration"
                " and is not run again",
                job=name,
                outcome=outcome.value,
            )
            return
        self.controls.settled(name, state)
        if outcome is JobOutcome.COMPLETED:
            self._incomplete.discard(name)
        elif outcome is not JobOutcome.DEFERRED and not (
            halted and state in (QueueState.PAUSED, QueueState.QUEUED)
        ):
            self._incomplete.add(name)
        _showHeld(self.controls, name, state, outcome, halted, self._stopping, machine)

    async def _slotAgain(self, name: str) -> Grant:
        """
        A job slot for job C{name}, granted its connections after it gave
        its slot away: before any job not yet claimed.
        """
        waiting = self._grants.jobSlot()
        if waiting.called:
            return await waiting
        self.machines.job(name).waitForGrant("a job slot")
        self._reserving[name] = waiting
        self._needSlot += 1
        try:
            return await waiting
        finally:
            self._needSlot -= 1
            self._reserving.pop(name, None)

    def queueChanged(self) -> None:
        """
        A job was queued again or cancelled (see L{ControlledScheduler}):
        claim it, now or once a slot is free, or find the queue drained.
        """
        self._wakeUp()
        self._runAgain()

    def halt(self, name: str) -> None:
        """
        Stop the claimed job C{name} for a control: give up its waits, or
        stop it running (the replies in flight awaited); its claim then
        finishes stopped, and the queue puts it where the control said.
        """
        self._halted.add(name)
        waiting = self._reserving.get(name)
        if waiting is not None:
            waiting.cancel()
        running = self._runs.get(name)
        if running is not None:
            running.cancel()

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        return self._stopAll()

    def _stopAll(self) -> Deferred[None] | None:
        """
        Stop every running job, give up every wait.

        @return: fires once every job has ended.
        """
        self._stopping = True
        if self._waitingSlot is not None:
            self._waitingSlot.cancel()
        for reserving in list(self._reserving.values()):
            reserving.cancel()
        for running in list(self._runs.values()):
            running.cancel()
        if self._dueTimer is not None and self._dueTimer.active():
            self._dueTimer.cancel()
        self._dueTimer = None
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.cancel()
        for wait in self._drainWait:
            wait.cancel()
        return self._running


async def _cancelledCount(
    queue: IAsyncJobQueue, clock: IReactorTime, waits: list[Deferred[None]]
) -> int | None:
    """
    How many jobs of C{queue} were cancelled, read again every
    L{DRAIN_RETRY} seconds while it cannot answer (a database that died
    since the queue was found drained), logged as an outage.

    @param waits: holds the pause under way (the scheduler's stop cancels
        it).
    @return: L{None} if the pause was cancelled (the daemon stops).
    """
    outage = OutageLog(log, "The job queue's last count", clock.seconds)
    while True:
        try:
            cancelled = (await queue.counts()).cancelled
        except ImapmigError as e:
            outage.failed(str(e), f"read again in {DRAIN_RETRY:.0f} s")
            waits.append(deferLater(clock, DRAIN_RETRY, lambda: None))
            try:
                await waits[-1]
            except CancelledError:
                return None
            finally:
                waits.clear()
            continue
        outage.answered()
        return cancelled


DRAIN_RETRY = 5.0
"""
Seconds before the drained queue's count of cancelled jobs is read again,
when the queue could not answer.
"""

_AGAIN = ENDED | {JobState.WAITING, JobState.DEFERRED}
"""
The states of a job whose claim ended that may be queued again.
"""


def _renewClaims(self: JobQueueService) -> None:
    """
    Renew each of a one-daemon scheduler's claims (a fleet's daemon renews
    them all with its heartbeat: L{imapmig.schedule.fleet}).
    """
    assert self._renewQueue is not None
    for name, claim in list(self._claims.items()):
        try:
            renewed = self._claims[name] = self._renewQueue.renew(claim, self._lease)
        except LeaseLost:
            log.error(
                "Job {job}: its claim was taken over by another owner; stopping it",
                job=name,
            )
            running = self._runs.get(name)
            if running is not None:
                running.cancel()
            continue
        if renewed.requested in (Requested.PAUSE, Requested.CANCEL) and name not in self._halted:
            # Asked of the queue through another daemon.
            log.info(
                "Job {job}: the queue asks it {what}; stopping it",
                job=name,
                what="paused" if renewed.requested is Requested.PAUSE else "cancelled",
            )
            self.halt(name)


def _showHeld(
    controls: JobControls,
    name: str,
    state: QueueState,
    outcome: JobOutcome,
    halted: bool,
    stopping: bool,
    machine: JobInputs,
) -> None:
    """
    Show where the queue put job C{name} once its claim finished: paused
    or cancelled by a control, or queued again.

    @param halted: whether a control stopped it.
    @param stopping: whether the daemon stops.
    """
    if state is QueueState.PAUSED:
        log.info(
            "Job {job}: paused by the admin; its connections and job slot are"
            " given back until it is resumed",
            job=name,
        )
    elif state is QueueState.CANCELLED:
        log.info("Job {job}: cancelled by the admin", job=name)
        controls.recordCancelled(name)
    elif (
        state is QueueState.QUEUED
        and not stopping
        and (halted or outcome in (JobOutcome.COMPLETED, JobOutcome.FAILED))
        and machine.state() in _AGAIN
    ):
        # Queued again: resumed while it stopped, or to run again
        # (retry-failed while it ran).
        machine.requeue("queued again", None)


def _claimed(machine: JobInputs, claim: JobClaim, fleet: bool) -> None:
    """
    A job is claimed: queued, if its machine is not (deferred before, and
    due; or ended, and run again).  A fleet's claim waits for its grants
    from the start, its cause naming its generation and, for a takeover,
    the daemon whose lease ended (logged as a warning).
    """
    if machine.state() is not JobState.QUEUED:
        machine.requeue("claimed", None)
    cause = f"claimed (generation {claim.generation})"
    if claim.takenFrom is not None:
        log.warn(
            "Job {job}: taken over from daemon {daemon}, whose lease ended; its run"
            " begins with the journal's reconciliation",
            job=claim.job.name,
            daemon=claim.takenFrom,
            generation=claim.generation,
        )
        machine.waitForGrant(f"{cause}, taken over from daemon {claim.takenFrom}")
    elif fleet:
        machine.waitForGrant(cause)


async def _afterSameMigration(self: JobQueueService, job: JobConfig, machine: JobInputs) -> None:
    """
    Wait while a run here of another job is C{job}'s migration
    (L{JobConfig.migrationKey}: renamed by a reload while it ran): at
    once, both copied the same messages.  Given up as a grant's wait.
    """
    key = job.migrationKey()
    while others := [n for n, held in self._claims.items() if n != job.name
                     and n in self._active and held.job.migrationKey() == key]:  # fmt: skip
        log.warn("Job {job}: waits for the run of job {other}, the same source and"
                 " destination, to end", job=job.name, other=others[0])  # fmt: skip
        machine.waitForGrant(f"the run of job {others[0]} (the same migration) to end")
        ended: Deferred[None] = Deferred()
        self._reserving[job.name] = ended
        self._active[others[0]].addBoth(_alsoFire, ended)
        try:
            await ended
        finally:
            self._reserving.pop(job.name, None)


def _alsoFire(result: object, ended: Deferred[None]) -> object:
    """
    Fire C{ended} (unless cancelled), passing C{result} on.
    """
    if not ended.called:
        ended.callback(None)
    return result


def _fail(machine: JobInputs, error: str) -> None:
    """
    A job that the scheduler saw fail fails, with C{error}, unless its run
    had ended already.
    """
    if machine.state() not in ENDED:
        machine.fail(error)


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
        connections = account.server.limits.capConnections(connections)
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


def _runOutcome(
    name: str, job: ScheduledJob, completed: bool, stopped: bool
) -> tuple[JobOutcome, float | None]:
    """
    How job C{name}'s run ended, for the queue: completed, deferred
    (until when), stopped (C{stopped}: by the daemon's stop or a
    control), or failed.
    """
    if completed:
        return JobOutcome.COMPLETED, None
    if job.deferredUntil is not None:
        # Said by the job's end line too (imapmig.job.joblog).
        log.debug(
            "Job {job}: deferred until {until}; its job slot and connections"
            " go to other jobs meanwhile",
            job=name,
            until=utcTime(job.deferredUntil),
        )
        return JobOutcome.DEFERRED, job.deferredUntil
    if stopped:
        return JobOutcome.STOPPED, None
    return JobOutcome.FAILED, None


def essentialConnections(job: JobConfig) -> list[tuple[str, str]]:
    """
    The connections C{(server, user)} a job cannot start without: its first
    destination connection and, for an IMAP source, its first source one.
    """
    essential = [(job.destination.server.name, job.destination.user)]
    if isinstance(job.source, ImapSourceConfig):
        essential.append((job.source.server.name, job.source.user))
    return essential
