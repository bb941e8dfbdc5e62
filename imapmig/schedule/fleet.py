# -*- test-case-name: tests.test_schedule_fleet -*-
"""
A daemon's membership of a fleet (docs/fleet-design.md "The heartbeat",
"Sending stops before the lease can end: the timing rule"): it registers
in the shared queue (L{IAsyncJobQueue}), renews its lease with one
heartbeat every C{H = L/12}, and stops its jobs by its I{send deadline}
C{D = t0 + L - L/4} when the heartbeats stop succeeding.

In a fleet it replaces the scheduler's per-claim renew loop
(L{imapmig.schedule.scheduler.JobQueueService}'s C{_renewLeases}, kept
for the one daemon of an in-memory queue): a daemon's lease is the lease
of every job it holds, so one heartbeat renews them all, whatever their
number.

C{t0} is read on the daemon's monotonic clock I{before} a heartbeat or
registration is handed over: the database sets the lease's end at its
C{now()} plus C{L}, later than C{t0}, so no other daemon may claim the
daemon's jobs before C{t0 + L} in real time, and stopping by C{t0 + L -
L/4} leaves a quarter of the lease for a slow clock and a stalled
reactor.  Past C{D} the daemon never resumes: it tells each job it holds
C{leaseLost} (the jobs' machines, through L{FleetJobs}), retires its id
(best effort: the others then take over at once) and registers again, a
new incarnation that may claim like any daemon.

L{FleetScheduler} is the scheduler of a fleet's daemon: it claims and
finishes through the shared queue (a claim polled every C{H} while a job
slot is free, and at once when one frees), under its member's id, and is
told by it of a lost lease, of the controls asked through other daemons
and of a newer schema; each heartbeat caps its connection grants at its
fair shares of the servers' C{max_connections}
(L{imapmig.schedule.shares}).
"""

from __future__ import annotations

from typing import Callable, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.config.model import JobConfig
from imapmig.errors import LeaseLost, PermanentError, QueueUnavailable
from imapmig.imap.outgoing import SendDeadline
from imapmig.job.machine import JobMachines
from imapmig.progress import MigrationProgress
from imapmig.queue import Heartbeat, IAsyncJobQueue, JobClaim, JobOutcome, Requested
from imapmig.schedule.fleetcontrols import FleetControls
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, Grant, JobConnections
from imapmig.schedule.scheduler import JobQueueService, ScheduledJob
from imapmig.schedule.shares import FleetShares
from imapmig.state import IStateStore
from imapmig.state.outage import OutageLog

log = Logger()

SEND_DEADLINE = "its send deadline passed (no heartbeat answered in time)"
"""
Why a daemon's jobs stop when its heartbeats stop succeeding.
"""

NO_LEASE = float("-inf")
"""
The send deadline while the daemon holds no lease: already passed.
"""

REQUESTED_BY = "imapmig"
"""
Who a control asked through another daemon is said to come from when the
queue does not say.
"""


class FleetJobs(Protocol):
    """
    What a fleet's member needs of the scheduler that runs its jobs.
    """

    def loseLease(self, reason: str) -> None:
        """
        Every job held is no longer this daemon's: tell each machine
        C{leaseLost(reason)}, abandon its run, never finish its claim.
        """

    def asked(self, job: str, requested: Requested, by: str) -> None:
        """
        A control was asked of held job C{job} through another daemon.
        """

    def newerSchema(self, version: int) -> None:
        """
        The database's schema is newer than this code's: claim nothing
        more, stop the jobs, exit 2.
        """

    def registered(self) -> None:
        """
        The daemon is registered (again): it may claim.
        """


class FleetMember:
    """
    A daemon of a fleet: its id in the queue, its heartbeat, its send
    deadline.

    @ivar owner: the daemon's id in the queue (its claims' owner), or
        L{None} while it is not registered (not yet, or between two
        incarnations): it claims nothing then.
    @ivar deadline: the send deadline, on the monotonic clock, of the
        last heartbeat or registration that succeeded (L{None}: none).
    @ivar sendDeadline: the same, as the jobs' APPEND pipelines compare it
        before each write (C{-inf} while there is none).
    @ivar lastHeartbeat: what the last heartbeat brought back.
    @ivar missed: the attempts failed or unanswered since the last that
        succeeded.
    @ivar newerSchema: whether a heartbeat found the database's schema
        (the queue's or the state store's) newer than this code's.
    """

    def __init__(
        self,
        queue: IAsyncJobQueue,
        clock: IReactorTime,
        monotonic: Callable[[], float],
        lease: float,
        jobs: FleetJobs,
        host: str,
        pid: int,
        version: str,
        schemaVersion: int | None = None,
        onHeartbeat: Callable[[Heartbeat, str], object] | None = None,
        stateSchemaVersion: int | None = None,
        rate: Callable[[], float] | None = None,
    ) -> None:
        """
        @param clock: times the heartbeats and the deadline.
        @param monotonic: the seconds of a monotonic clock (the daemon's
            C{time.monotonic}; a test's C{Clock.seconds}), from which
            C{t0} and the deadline are read.
        @param lease: C{L}, the fleet's lease, in seconds.
        @param jobs: the scheduler, told of a lost lease, of the controls
            asked, of a newer schema and of each registration.
        @param host: this daemon's host, pid and version, for the fleet's
            pages.
        @param schemaVersion: the queue's schema version this code knows
            (L{None}: no check).
        @param onHeartbeat: called with each heartbeat that succeeded and
            this daemon's id (the fair shares of the servers' connections
            are computed from its live daemons).
        @param stateSchemaVersion: the state store's schema version this
            code knows (L{None}: no check), compared as C{schemaVersion}
            with L{Heartbeat.stateSchemaVersion}.
        @param rate: this daemon's messages per second over the last
            minute, given to each heartbeat for the other daemons' pages
            (L{None}: none given).
        """
        self._queue = queue
        self._clock = clock
        self._monotonic = monotonic
        self.lease = lease
        self.period = lease / 12
        self._margin = lease / 4
        self._jobs = jobs
        self._identity = (host, pid, version)
        self._schemaVersion = schemaVersion
        self._onHeartbeat = onHeartbeat
        self._stateSchemaVersion = stateSchemaVersion
        self._rate = rate
        self._differs: str | None = None
        self.owner: str | None = None
        self.deadline: float | None = None
        self.sendDeadline = SendDeadline(monotonic)
        self.lastHeartbeat: Heartbeat | None = None
        self._inFlight: Deferred[None] | None = None
        self._tick: IDelayedCall | None = None
        self._deadlineCall: IDelayedCall | None = None
        self._running = False
        # The controls delivered of the requests that still stand: each
        # reaches its job once.
        self._delivered: set[tuple[str, Requested]] = set()
        self.missed = 0
        self.newerSchema = False
        self._generation: int | None = None
        self._outage = OutageLog(log, "The fleet's heartbeat", monotonic)

    def start(self) -> None:
        """
        Register, then beat every C{H}.
        """
        self._running = True
        self._beat()

    def stop(self) -> Deferred[None]:
        """
        Stop beating, and retire this daemon's id (best effort): called
        once its jobs have stopped and their claims are finished.

        @return: fires once the retirement is answered (or failed).
        """
        self._running = False
        self._cancel()
        owner, self.owner = self.owner, None
        self.deadline = None
        self.sendDeadline.at = NO_LEASE
        if owner is None:
            return Deferred.fromCoroutine(_nothing())
        return self._retire(owner)

    def _cancel(self) -> None:
        for call in (self._tick, self._deadlineCall):
            if call is not None and call.active():
                call.cancel()
        self._tick = self._deadlineCall = None

    def _beat(self) -> None:
        """
        One attempt (a registration if the daemon has no id, else a
        heartbeat), unless the last is still unanswered: it counts as
        failed, and the next is tried C{H} later.
        """
        self._tick = None
        if not self._running:
            return
        self._tick = self._clock.callLater(self.period, self._beat)
        if self._inFlight is not None:
            self.missed += 1
            self._outage.failed(
                f"no answer within {self.period:.1f} s, {self.missed} in a row",
                self._deadlineText(),
            )
            return
        t0 = self._monotonic()
        if self.owner is None:
            attempt = self._register(t0)
        else:
            attempt = self._heartbeat(self.owner, t0)
        if not attempt.called:
            self._inFlight = attempt

            def answered(ignored: None) -> None:
                self._inFlight = None

            attempt.addBoth(answered)

    def _deadlineText(self) -> str:
        # Unregistered (a new incarnation, or at start), no lease is held.
        if self.deadline is None:
            return "no lease held"
        return f"the send deadline is in {self._left():.1f} s"

    def _left(self) -> float:
        return float("nan") if self.deadline is None else self.deadline - self._monotonic()

    def _register(self, t0: float) -> Deferred[None]:
        host, pid, version = self._identity
        registering = self._queue.register(host, pid, version, self.lease)

        def registered(owner: str) -> None:
            if not self._running:
                self._retire(owner)
                return
            self.owner = owner
            self.missed = 0
            self._outage.answered()
            self._delivered.clear()
            self._extend(t0)
            log.info(
                "Registered in the fleet's queue as daemon {daemon} (lease {lease:.0f} s,"
                " heartbeat every {period:.1f} s)",
                daemon=owner,
                lease=self.lease,
                period=self.period,
            )
            self._jobs.registered()

        return registering.addCallbacks(registered, self._failed)

    def _heartbeat(self, owner: str, t0: float) -> Deferred[None]:
        def beaten(heartbeat: Heartbeat) -> None:
            if self.owner != owner:
                # An answer for an incarnation given up meanwhile.
                return
            self.missed = 0
            self._outage.answered()
            self.lastHeartbeat = heartbeat
            self._extend(t0)
            if self._onHeartbeat is not None:
                self._onHeartbeat(heartbeat, owner)
            self._heard(heartbeat)

        def failed(failure: Failure) -> None:
            if self.owner != owner:
                return
            if failure.check(LeaseLost):
                self.lose(f"the queue says its lease ran out ({failure.getErrorMessage()})")
                return
            self._failed(failure)

        rate = None if self._rate is None else self._rate()
        return self._queue.heartbeat(owner, self.lease, rate=rate).addCallbacks(beaten, failed)

    def _failed(self, failure: Failure) -> None:
        self.missed += 1
        self._outage.failed(
            failure.getErrorMessage(),
            f"trying again every {self.period:.1f} s, {self._deadlineText()}",
        )

    def _extend(self, t0: float) -> None:
        """
        A lease renewed by a call handed over at C{t0}: the send deadline
        moves to C{t0 + L - L/4}, if that is later.
        """
        deadline = t0 + self.lease - self._margin
        if self.deadline is not None and deadline <= self.deadline:
            return
        self.deadline = self.sendDeadline.at = deadline
        if self._deadlineCall is not None and self._deadlineCall.active():
            self._deadlineCall.cancel()
        self._deadlineCall = self._clock.callLater(
            max(0.0, deadline - self._monotonic()), self._deadlinePassed
        )

    def _deadlinePassed(self) -> None:
        self._deadlineCall = None
        left = self._left()
        if left > 0:
            # The clock the timer ran on is not the monotonic clock.
            self._deadlineCall = self._clock.callLater(left, self._deadlinePassed)
            return
        self.lose(SEND_DEADLINE)

    def lose(self, reason: str) -> None:
        """
        The lease is lost (C{reason}): every job held stops, the id is
        retired, and a new incarnation registers at the next beat.
        """
        owner, self.owner = self.owner, None
        self.deadline = None
        self.sendDeadline.at = NO_LEASE
        if self._deadlineCall is not None and self._deadlineCall.active():
            self._deadlineCall.cancel()
        self._deadlineCall = None
        log.error(
            "Daemon {daemon}: its lease is lost: {why}; its jobs stop, abandoning"
            " what is in flight, and the other daemons take them over",
            daemon=owner,
            why=reason,
        )
        self._jobs.loseLease(reason)
        if owner is not None:
            self._retire(owner)
        if self._running and self._inFlight is None:
            # Register again now rather than at the next beat.
            if self._tick is not None and self._tick.active():
                self._tick.cancel()
            self._beat()

    def _retire(self, owner: str) -> Deferred[None]:
        def failed(failure: Failure) -> None:
            log.info(
                "Daemon {daemon}: could not retire its id ({why}); its lease ends by itself",
                daemon=owner,
                why=failure.getErrorMessage(),
            )

        return self._queue.retire(owner).addErrback(failed)

    def _heard(self, heartbeat: Heartbeat) -> None:
        """
        What a heartbeat brought back: a newer schema, the controls asked.
        """
        newer = _newer("queue", heartbeat.schemaVersion, self._schemaVersion) or _newer(
            "state store", heartbeat.stateSchemaVersion, self._stateSchemaVersion
        )
        if newer is not None:
            if not self.newerSchema:
                # Once; the heartbeats go on while the jobs stop.
                self.newerSchema = True
                which, version, known = newer
                log.critical(
                    "The fleet's database has {which} schema version {found}, newer than"
                    " this imapmig's ({known}): claiming nothing more, stopping the jobs,"
                    " exiting 2",
                    which=which,
                    found=version,
                    known=known,
                )
                self._jobs.newerSchema(version)
            return
        self._newGeneration(heartbeat.jobsGeneration)
        by = dict(heartbeat.requestedBy)
        standing = set(heartbeat.requests)
        self._delivered &= standing
        for job, requested in heartbeat.requests:
            if (job, requested) in self._delivered:
                continue
            self._delivered.add((job, requested))
            self._jobs.asked(job, requested, by.get(job, REQUESTED_BY))


    def listDiffers(self) -> str | None:
        """
        Why this daemon's job list differs from the fleet's (its
        configuration file is not the one the fleet's list was last
        replaced from), as of the last generation it compared; L{None}:
        the same, or not compared.
        """
        return self._differs

    def _newGeneration(self, generation: int | None) -> None:
        """
        At each generation of the fleet's job list this daemon sees (the
        first, for a reload elsewhere since it started; then each reload
        elsewhere), say once whether its own list now differs from the
        fleet's (it then claims nothing).
        """
        if generation is None or generation == self._generation:
            return
        self._generation = generation

        def told(why: str | None) -> None:
            self._differs = why
            if why is not None:
                log.warn("The fleet's job list changed (generation {generation}): {why}",
                         generation=generation, why=why)

        def failed(failure: Failure) -> None:
            log.warn("Could not compare this daemon's job list with the fleet's: {why}",
                     why=failure.getErrorMessage())

        self._queue.listDiffers().addCallbacks(told, failed)


def _newer(which: str, found: int | None, known: int | None) -> tuple[str, int, int] | None:
    """
    C{(which, found, known)} if a heartbeat C{found} the C{which} schema
    newer than the C{known} one; else L{None}.
    """
    if found is None or known is None or found <= known:
        return None
    return (which, found, known)


async def _nothing() -> None:
    return None


class FleetScheduler(JobQueueService):
    """
    The scheduler of a daemon of a fleet: L{JobQueueService} over a shared
    L{IAsyncJobQueue}, its claims under its L{FleetMember}'s id and lease.

    Its queue is drained (C{whenDone}) when nothing is left to run
    anywhere: no job queued, claimed (by any daemon), deferred or paused
    in the database.  A claim lost with the lease is neither finished nor
    counted: its job is the next owner's.

    @ivar member: its membership of the fleet.
    @ivar shares: its shares of the servers' C{max_connections}, applied
        at each heartbeat: L{FleetShares.withoutShare} for its claims,
        L{FleetShares.inUse} for its heartbeats.
    """

    controls: FleetControls

    def __init__(
        self,
        queue: IAsyncJobQueue,
        grants: ConnectionGrants,
        build: Callable[
            [JobConfig, JobConnections, IStateStore | None, SendDeadline, float | None],
            ScheduledJob,
        ],
        progress: MigrationProgress,
        clock: IReactorTime,
        whenDone: Callable[[bool], None] | None,
        monotonic: Callable[[], float],
        lease: float,
        identity: tuple[str, int, str],
        onNewerSchema: Callable[[], None],
        schemaVersion: int | None = None,
        store: IStateStore | None = None,
        machines: JobMachines | None = None,
        stateSchemaVersion: int | None = None,
    ) -> None:
        """
        See L{JobQueueService} and L{FleetMember} (whose heartbeats give
        the queue C{progress}'s rate of messages).

        @param build: makes a claimed job's L{MigrationJob} as
            L{JobQueueService}'s does, given too the store it writes (the
            store's view bound to the claim, C{store.forClaim(job, owner,
            generation)}, where the store has one), the daemon's send
            deadline and, for a takeover, the quiet already passed
            (L{JobClaim.quietFor}, 0 if unknown; L{None}: not a takeover).
        @param identity: this daemon's host, pid and version.
        @param onNewerSchema: called once the jobs have stopped after a
            heartbeat found the schema newer than this code's (the
            daemon then exits 2).
        """
        def buildClaimed(job: JobConfig, connections: JobConnections) -> ScheduledJob:
            claim = self._claims[job.name]
            takeover = None if claim.takenFrom is None else claim.quietFor or 0.0
            # The PostgreSQL store's view fences each write by the claim.
            forClaim = getattr(store, "forClaim", None)
            if forClaim is not None:
                return build(
                    job, connections, forClaim(job.name, claim.owner, claim.generation),
                    self.member.sendDeadline, takeover,
                )  # fmt: skip
            return build(job, connections, store, self.member.sendDeadline, takeover)

        JobQueueService.__init__(
            self, queue, grants, buildClaimed, progress, clock, whenDone, "", lease, store,
            machines,
        )  # fmt: skip
        host, pid, version = identity
        # Each heartbeat caps the grants at this daemon's fair shares of
        # the servers' max_connections among the live daemons.
        self.shares = FleetShares(grants)
        self.member = FleetMember(
            queue, clock, monotonic, lease, self, host, pid, version, schemaVersion,
            onHeartbeat=self.shares.apply, stateSchemaVersion=stateSchemaVersion,
            rate=lambda: progress.currentRate()[0],
        )  # fmt: skip
        self._poll = self.member.period
        self.controls = FleetControls(queue, progress, store, self, self.machines)
        self._onNewerSchema = onNewerSchema
        # The claims lost with the lease, not finished.
        self._lost: set[str] = set()
        # The claims being finished (no longer in _claims).
        self._finishing: set[str] = set()
        # A claim failed unanswered: it may have committed (the COMMIT's
        # answer lost), holding a job this daemon does not know of.
        self._unsure = False

    def startService(self) -> None:
        self.member.start()
        JobQueueService.startService(self)

    def stopService(self) -> Deferred[None]:
        stopping = JobQueueService.stopService(self)

        async def thenRetire() -> None:
            if stopping is not None:
                await stopping
            await self.member.stop()

        return Deferred.fromCoroutine(thenRetire())

    async def _restoreHolds(self) -> bool:
        # The holds are the queue rows' states: nothing to put back.
        return True

    async def _runOne(self, claim: JobClaim, slot: Grant | None) -> None:
        """
        Run a claimed job; one its progress does not list (a row of a user
        list, which a fleet's configuration keeps as written) is listed
        while this daemon holds it, then forgotten with its machine: the
        daemon keeps in memory the jobs it holds, not the fleet's million
        (docs/fleet-design.md "A million jobs").
        """
        name = claim.job.name
        visiting = name not in self._progress
        if visiting:
            self._progress.addJob(name)
        try:
            await JobQueueService._runOne(self, claim, slot)
        finally:
            if visiting and name not in self._claims:
                self.machines.drop(name)
                self._progress.removeJob(name)

    def _claim(self) -> Deferred[JobClaim | None]:
        owner = self.member.owner
        if owner is None or self.member.newerSchema or self._lost & set(self._claims):
            # Unregistered, stopping, or runs abandoned still winding down
            # (claimed again, a job would run twice here).
            return Deferred.fromCoroutine(_none())
        if len(self._claims) >= (self._grants.pools.limit(JOB_SLOTS) or float("inf")):
            # Held, running or waiting for grants, up to max_jobs: the
            # fleet's other daemons run the rest.
            return Deferred.fromCoroutine(_none())
        claiming = self._giveBack(owner).addCallback(
            lambda ignored: self._queue.claim(
                owner, self._clock.seconds(), self._lease, skipServers=self.shares.withoutShare
            )
        )

        def claimed(claim: JobClaim | None) -> JobClaim | None:
            if claim is None or self.member.owner == owner:
                return claim
            # Answered after the lease was lost: the next claim anywhere
            # releases it, as a takeover.
            log.warn(
                "Job {job}: claimed by daemon {daemon}, whose lease was lost meanwhile;"
                " not run",
                job=claim.job.name,
                daemon=owner,
            )
            return None

        def failed(failure: Failure) -> None:
            if failure.check(LeaseLost) and self.member.owner == owner:
                self.member.lose(f"a claim found its lease ended ({failure.getErrorMessage()})")
            elif failure.check(QueueUnavailable, LeaseLost, PermanentError):
                # PermanentError: the database refused the claim (a right
                # revoked, a row it cannot update): tried at the next poll.
                self._unsure = self._unsure or bool(failure.check(QueueUnavailable))
                log.warn("Cannot claim a job: {why}", why=failure.getErrorMessage())
            else:
                log.failure("Claiming a job", failure)

        return claiming.addCallbacks(claimed, failed)

    def _giveBack(self, owner: str) -> Deferred[None]:
        """
        After a claim that failed unanswered, give back the jobs the queue
        says this daemon holds that it does not know of (the claim's
        C{COMMIT} succeeded, its answer lost): held unknown, each would
        stay claimed for as long as this daemon beats.
        """
        if not self._unsure:
            return succeed(None)

        def gave(names: list[str]) -> None:
            self._unsure = False
            for name in names:
                log.warn(
                    "Job {job}: claimed here by a claim whose answer was lost; given back",
                    job=name,
                )

        known = frozenset(self._claims) | self._finishing
        return self._queue.giveBack(owner, known).addCallback(gave)

    async def _changed(self) -> None:
        try:
            await JobQueueService._changed(self)
        except QueueUnavailable:
            # The deferred jobs' next due time unread: the next claim is
            # tried after a heartbeat's period all the same (raised, this
            # ended the daemon's claiming for good).
            wake = self._wake
            if wake is None:
                return
            self._dueTimer = self._clock.callLater(self.member.period, self._wakeUp)
            await wake

    async def _nothingLeft(self) -> bool:
        if self._active or self.member.owner is None or self._whenDone is None:
            # Without --exit-when-done the daemon never drains: it polls on,
            # and claims a job queued again through another daemon (a
            # control on its page, a reload there, state load-jobs).
            return False
        try:
            counts = await self._queue.counts()
        except QueueUnavailable:
            return False
        return not (counts.queued or counts.claimed or counts.deferred or counts.paused)

    async def _finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None
    ) -> bool:
        """
        Finish C{claim} in the queue, tried again every C{H} while the
        queue cannot be reached and the claim's lease lives; a claim lost
        with the lease is not finished.
        """
        name = claim.job.name
        self._finishing.add(name)
        try:
            while name not in self._lost and self.member.owner == claim.owner:
                try:
                    await self._queue.finish(claim, outcome, notBefore)
                    return True
                except (QueueUnavailable, PermanentError) as e:
                    # Refused (PermanentError: a right revoked) as when
                    # unreachable: raised, the claim stayed held for ever.
                    log.warn(
                        "Job {job}: cannot finish its claim ({why});"
                        " trying again in {period:.1f} s",
                        job=name,
                        why=str(e),
                        period=self.member.period,
                    )
                    await deferLater(self._clock, self.member.period)
        finally:
            self._finishing.discard(name)
        self._lost.discard(name)
        self._incomplete.discard(name)
        return False

    def lostClaim(self, job: str) -> bool:
        """
        Whether this daemon lost its claim of C{job} (its lease, or a
        fenced write): the job is another daemon's, and what its machine
        goes through here until the run has ended (stopping, stopped:
        lease lost) is not recorded in its timeline, where it would
        follow the new owner's transitions (the fence's rule).
        """
        return job in self._lost

    def _claimLost(self, name: str) -> None:
        # One job's claim, found lost by its run (a fenced write): the
        # job alone is dropped, unfinished, as at the send deadline.
        self._lost.add(name)

    # -- told by the member (FleetJobs) -------------------------------------

    def loseLease(self, reason: str) -> None:
        names = list(self._claims)
        # Every machine told, and every wait given up, before any run is
        # abandoned: the grants a run gives back go to no job of ours.
        for name in names:
            self._lost.add(name)
            self.machines.job(name).leaseLost(reason)
            waiting = self._reserving.get(name)
            if waiting is not None:
                waiting.cancel()
        for name in names:
            job = self._built.get(name)
            if job is not None:
                job.abandon()

    def asked(self, job: str, requested: Requested, by: str) -> None:
        if job not in self._claims or job in self._lost:
            return
        log.info(
            "Job {job}: {by} asks it {what} through another daemon",
            job=job,
            by=by,
            what=requested.value,
        )
        machine = self.machines.job(job)
        if requested is Requested.RERUN:
            machine.retryFailed(by)
            return
        if requested is Requested.PAUSE:
            machine.pause(by)
        else:
            machine.cancel(by)
        self.halt(job)

    def newerSchema(self, version: int) -> None:
        stopping = self._stopAll()

        async def thenExit() -> None:
            if stopping is not None:
                await stopping
            self._onNewerSchema()

        Deferred.fromCoroutine(thenExit())

    def registered(self) -> None:
        self._wakeUp()


async def _none() -> None:
    return None
