# -*- test-case-name: tests.test_schedule_fleet,tests.test_schedule_fleet_postgresql -*-
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

Split from L{imapmig.schedule.fleet} (the fleet's scheduler, which it
serves) when that module reached the layout's 800 lines; its log lines'
namespace is C{imapmig.schedule.member}.
"""

from __future__ import annotations

from typing import Callable, Protocol

from twisted.internet.defer import Deferred, TimeoutError, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import LeaseLost
from imapmig.imap.outgoing import SendDeadline
from imapmig.queue import Heartbeat, IAsyncJobQueue, Requested
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
        self._lostWaiters: list[Deferred[None]] = []

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

        @return: fires once the retirement is answered, failed, or not
            answered within C{H} (a call that hangs in a partition holds
            the queue's one connection): the lease then ends by itself.
        """
        self._running = False
        self._cancel()
        owner, self.owner = self.owner, None
        self.deadline = None
        self.sendDeadline.at = NO_LEASE
        if owner is None:
            return Deferred.fromCoroutine(_nothing())
        return self._retire(owner, self.period)

    def whenLost(self) -> Deferred[None]:
        """Fires when this incarnation's lease is lost (at once if none is held)."""
        if self.owner is None:
            return succeed(None)
        waiter: Deferred[None] = Deferred(self._lostWaiters.remove)
        self._lostWaiters.append(waiter)
        return waiter

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
        waiters, self._lostWaiters = self._lostWaiters, []
        for waiter in waiters:
            waiter.callback(None)
        if owner is not None:
            self._retire(owner)
        if self._running and self._inFlight is None:
            # Register again now rather than at the next beat.
            if self._tick is not None and self._tick.active():
                self._tick.cancel()
            self._beat()

    def _retire(self, owner: str, bound: float | None = None) -> Deferred[None]:
        """Retire C{owner}, its answer awaited C{bound} seconds at most."""

        def failed(failure: Failure) -> None:
            timedOut = failure.check(TimeoutError)
            why = f"no answer within {bound} s" if timedOut else failure.getErrorMessage()
            log.info(
                "Daemon {daemon}: could not retire its id ({why}); its lease ends by itself",
                daemon=owner,
                why=why,
            )

        retiring = self._queue.retire(owner)
        if bound is not None:
            retiring.addTimeout(bound, self._clock)
        return retiring.addErrback(failed)

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
