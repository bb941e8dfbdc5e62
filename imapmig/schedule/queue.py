# -*- test-case-name: tests.test_schedule_queue -*-
"""
The job queue: which configured job runs next, and who runs it.

A scheduler I{claims} the next job (the first, in configuration order,
that no live lease holds), I{renews} its lease while the job runs, and
I{finishes} it with its outcome.  A job whose lease expires may be
claimed by another owner (a takeover); a stopped job goes back to the
queue at its place; a deferred job (its daily budget used up) goes back
too, but is not claimed before the time it gave (C{notBefore}).

Leases are timed by the queue, on its own clock, never by the caller's
wall clock: L{InMemoryJobQueue} by a monotonic clock of the process (a
jump of the wall clock, forward or back, neither expires a lease nor
stretches one), a shared queue by the database's clock (one clock for
every daemon, whatever theirs say).  The caller's C{now} is the wall
clock, used only for what is wall-clock time by nature: a deferred job's
C{notBefore} (the next UTC midnight of a daily budget).

L{InMemoryJobQueue} serves one daemon from the configured job list: the
state store's lock already makes that daemon the only owner, so leases
only matter across a stop.  Queued jobs cost an index into the
configuration's tuple of jobs; a L{JobClaim} is made only when claimed.

A fleet of daemons will share a PostgreSQL implementation of the same
interface, with a table C{job_claims(job, position, owner, lease_until,
generation, state)}:

  - C{claim}: C{SELECT job FROM job_claims WHERE state = 'queued' OR
    (state = 'claimed' AND lease_until < now()) ORDER BY position LIMIT 1
    FOR UPDATE SKIP LOCKED}, then C{UPDATE ... SET owner, lease_until,
    generation = generation + 1, state = 'claimed'} in the same transaction: two daemons never claim
    one job, and neither waits for the other's row lock.
  - C{renew}: C{UPDATE ... SET lease_until = now() + lease WHERE job AND
    generation} (C{now()} is the database's clock, as in C{claim}); no row
    updated means the lease expired and another daemon took the job over:
    L{LeaseLost}, and the job must stop.
  - a takeover is an ordinary claim of an expired lease: the new owner
    runs the job from the start, and its first attempt settles the journal
    left by the old owner against the destination (the reconciliation of
    L{imapmig.job.reconcile}), which makes a half-sent unit exact.
  - C{finish}: C{UPDATE ... SET state = 'done' | 'failed' WHERE job AND
    generation} (or back to C{'queued'} for a stopped job, and for a
    deferred one with C{not_before}, a column that C{claim} then also
    requires to be past: the caller's wall-clock C{now}, as here).

An admin's controls (L{imapmig.schedule.controls}) are queue states, so
that they reach whichever daemon runs the job, written by the job's
machine alone (L{imapmig.job.machine}: the controls are its inputs, its
transitions call L{IJobQueue.pause} and the like; the scheduler only
claims, renews and finishes its own claims): a queued job I{paused} is
not claimed until I{resumed} (then claimed before the jobs never
claimed); I{cancelled}, it ends for good; an ended job I{requeued} (its
failed messages retried) is queued again.  A claimed job keeps its claim
while it stops: the control is a I{request} on its row (C{requested =
'pause' | 'cancel' | 'rerun'}), which the owner sees on its next renewal
(L{JobClaim.requested}), and which C{finish} applies: a stopped job
requested paused rests C{'paused'}, one requested cancelled
C{'cancelled'}, and a job requested to run again (C{'rerun'}) is queued
again however its run ended.  In PostgreSQL each control is one
C{UPDATE ... WHERE job = $1 AND state IN (...)}; no row updated is a
refusal.

A reload of the configuration (L{imapmig.daemon.reload}) changes the queue with
three operations: I{add} a new job (after every job queued, C{INSERT}
at the next position), I{remove} one (a queued, paused, deferred or
ended job at once, C{DELETE ... WHERE state <> 'claimed'}; a claimed one
when its claim finishes, however its run ended: C{requested = 'remove'},
which C{finish} turns into the C{DELETE}), and I{replace} a job's
configuration (C{UPDATE ... SET config}: a claimed job runs on with the
configuration it was claimed with, the new one is for its next claim).
"""

from __future__ import annotations

import heapq
from enum import Enum
from typing import Callable, Sequence

from attrs import evolve, frozen
from zope.interface import Interface, implementer

from imapmig.config.model import JobConfig
from imapmig.errors import ControlRefused, LeaseLost, UnknownJob


class JobOutcome(Enum):
    """
    How a claimed job ended.
    """

    COMPLETED = "completed"
    FAILED = "failed"
    # Stopped before the end: back to the queue, for a later run or owner.
    STOPPED = "stopped"
    # Cannot go on before a given time (a daily budget used up): back to
    # the queue, not claimed before then.
    DEFERRED = "deferred"


class QueueState(Enum):
    """
    Where a job is in the queue.
    """

    # Waiting to be claimed (a deferred job included).
    QUEUED = "queued"
    CLAIMED = "claimed"
    # Paused by an admin: not claimed until resumed.
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED = frozenset({QueueState.DONE, QueueState.FAILED, QueueState.CANCELLED})
"""
The states a job rests in once it has ended.
"""


class Requested(Enum):
    """
    A control asked of a claimed job, applied when its claim finishes.
    """

    PAUSE = "pause"
    CANCEL = "cancel"
    # Queue it again however this run ends (retry-failed while running).
    RERUN = "rerun"


@frozen
class JobClaim:
    """
    A job claimed by an owner until its lease runs out.

    @ivar job: the job's configuration.
    @ivar position: its place in the configuration (0 is first).
    @ivar owner: who claimed it.
    @ivar leaseUntil: when the lease runs out, in the seconds of the
        queue's lease clock (not the wall clock).
    @ivar generation: which claim of the job this is: each claim of a job
        has a new one, kept by its renewals, so that an owner's stale
        claim (its lease lost, the job claimed again since, even by the
        same owner) is never taken for the current one.
    @ivar requested: a control asked of the job while claimed, as of the
        claim or its last renewal: with L{Requested.PAUSE} or
        L{Requested.CANCEL} the owner must stop the job.
    """

    job: JobConfig
    position: int
    owner: str
    leaseUntil: float
    generation: int
    requested: Requested | None = None


@frozen
class QueueCounts:
    """
    How many jobs are where, for the status resource.
    """

    queued: int
    claimed: int
    finished: int
    deferred: int = 0
    paused: int = 0
    cancelled: int = 0


class IJobQueue(Interface):
    """
    The jobs waiting to run, shared by whoever runs them.
    """

    def claim(owner: str, now: float, lease: float) -> JobClaim | None:
        """
        Claim the next job, in configuration order, that no live lease
        holds (leases timed by the queue's own clock).

        @param now: the wall clock's seconds, against which deferred jobs'
            C{notBefore} is compared.
        @param lease: seconds the claim lives unless renewed.
        @return: the claim, or L{None} when no job is left to claim.
        """

    def renew(claim: JobClaim, lease: float) -> JobClaim:
        """
        Extend C{claim}'s lease to C{lease} seconds from now, by the
        queue's lease clock.

        @raise LeaseLost: C{claim} is no longer the job's current claim
            (another one took the job over).
        """

    def finish(claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        """
        Record how a claimed job ended; a stopped one is queued again, a
        deferred one too, claimed not before C{notBefore}.  Ignored unless
        C{claim} is the job's current claim.
        """

    def nextDue() -> float | None:
        """
        When the earliest deferred job may be claimed, or L{None} if none
        is deferred.
        """

    def counts() -> QueueCounts:
        """
        How many jobs are queued, claimed and finished.
        """

    def state(name: str) -> QueueState:
        """
        Where the job C{name} is.

        @raise UnknownJob: no such job.
        """

    def pause(name: str) -> QueueState:
        """
        Pause a queued job (not claimed until resumed), or request a
        claimed one paused once stopped.

        @return: L{QueueState.PAUSED}, or L{QueueState.CLAIMED} for a
            claimed job (paused when its claim finishes stopped).
        @raise UnknownJob: no such job.
        @raise ControlRefused: paused already, or ended.
        """

    def resume(name: str) -> QueueState:
        """
        Queue a paused or cancelled job again, before every job never
        claimed; or withdraw the pause requested of a claimed job.

        @return: L{QueueState.QUEUED}, or L{QueueState.CLAIMED}.
        @raise UnknownJob: no such job.
        @raise ControlRefused: neither paused nor cancelled.
        """

    def cancel(name: str) -> QueueState:
        """
        End a queued or paused job for good, or request a claimed one
        cancelled once stopped.

        @return: L{QueueState.CANCELLED}, or L{QueueState.CLAIMED}.
        @raise UnknownJob: no such job.
        @raise ControlRefused: ended already.
        """

    def requeue(name: str) -> QueueState:
        """
        Queue an ended job (done or failed) again, before every job never
        claimed; request a claimed one queued again however its run ends.
        A queued or paused job is left as it is.

        @return: the job's state afterwards.
        @raise UnknownJob: no such job.
        @raise ControlRefused: cancelled.
        """

    def add(job: JobConfig) -> None:
        """
        Queue a new job after every job queued (a reload added it).  A
        claimed job being removed (L{remove}) under that name is kept
        instead, C{job} its configuration from its next claim.

        @raise ValueError: a job of that name is queued already.
        """

    def remove(name: str) -> QueueState:
        """
        Take job C{name} out of the queue (a reload removed it): at once
        unless it is claimed; a claimed job runs on, and leaves the queue
        when its claim finishes, however it ended (it is not claimed
        again).  Its name is unknown to the queue's controls from now on.

        @return: the state the job was in: L{QueueState.CLAIMED} when it
            leaves only once its claim finishes.
        @raise UnknownJob: no such job.
        """

    def replace(job: JobConfig) -> QueueState:
        """
        Give the job named like C{job} the configuration C{job}, from its
        next claim on; a claimed job runs on with the one it was claimed
        with.

        @return: the job's state.
        @raise UnknownJob: no such job.
        """


@implementer(IJobQueue)
class InMemoryJobQueue:
    """
    The configured jobs, claimed by one daemon.

    An owner's own claims never expire for that owner: the one daemon
    renews them while their jobs run, and a late renewal must not make it
    claim (and run) a job it is running.
    """

    def __init__(self, jobs: Sequence[JobConfig], leaseClock: Callable[[], float]) -> None:
        """
        @param jobs: every job, in configuration order.
        @param leaseClock: the seconds of a monotonic clock (the daemon
            gives C{time.monotonic}), by which leases are timed.
        """
        # Copied into a list only by the first reload that adds, removes
        # or replaces a job.  A removed job's place stays (positions are
        # never renumbered: claims hold them) but holds None, so that a
        # daemon reloaded for months keeps an int per job it ever had,
        # not its configuration.
        self._jobs: Sequence[JobConfig | None] = jobs
        self._ownJobs: list[JobConfig | None] | None = None
        # Positions of jobs removed (their place stays, never claimed),
        # and of claimed jobs removed once their claim finishes.
        self._removed: set[int] = set()
        self._leaving: set[int] = set()
        self._leaseClock = leaseClock
        # Made on the first control: a daemon never controlled does not
        # pay for a map of 10,000 names.
        self._positions: dict[str, int] | None = None
        # Jobs never claimed start at this position; jobs given back (a
        # stop, an expired lease, a resume) wait in a heap, by position,
        # and are claimed first.  A job controlled before its first claim
        # is _placed: the claims of never-claimed jobs skip it.
        self._next = 0
        self._placed: set[int] = set()
        self._returned: list[int] = []
        # Deferred jobs, (notBefore, position), earliest first: moved to
        # _returned once due.
        self._deferred: list[tuple[float, int]] = []
        # A deferred job paused keeps the time it may go on (its daily
        # budget or quota wait), so resuming does not skip that wait.
        self._pausedNotBefore: dict[int, float] = {}
        self._claims: dict[int, JobClaim] = {}
        self._requested: dict[int, Requested] = {}
        self._paused: set[int] = set()
        self._ended: dict[int, QueueState] = {}
        self._cancelled = 0
        self._generation = 0

    def claim(self, owner: str, now: float, lease: float) -> JobClaim | None:
        leaseNow = self._leaseClock()
        for position, held in list(self._claims.items()):
            if held.owner != owner and held.leaseUntil < leaseNow:
                # Taken over: the old owner's renew raises LeaseLost.
                del self._claims[position]
                self._giveBack(position, JobOutcome.STOPPED, None)
        while self._deferred and self._deferred[0][0] <= now:
            heapq.heappush(self._returned, heapq.heappop(self._deferred)[1])
        while self._next < len(self._jobs) and self._next in self._placed:
            self._next += 1
        if self._returned:
            position = heapq.heappop(self._returned)
        elif self._next < len(self._jobs):
            position = self._next
            self._next += 1
        else:
            return None
        self._generation += 1
        claim = JobClaim(self._jobAt(position), position, owner, leaseNow + lease, self._generation)
        self._claims[position] = claim
        return claim

    def _jobAt(self, position: int) -> JobConfig:
        """
        The configuration of the job at C{position}, which is not removed.
        """
        job = self._jobs[position]
        assert job is not None, position
        return job

    def _isCurrent(self, claim: JobClaim) -> bool:
        held = self._claims.get(claim.position)
        return held is not None and held.generation == claim.generation

    def renew(self, claim: JobClaim, lease: float) -> JobClaim:
        if not self._isCurrent(claim):
            raise LeaseLost(f"job {claim.job.name} was taken over")
        renewed = evolve(
            claim,
            leaseUntil=self._leaseClock() + lease,
            requested=self._requested.get(claim.position),
        )
        self._claims[claim.position] = renewed
        return renewed

    def finish(self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        if not self._isCurrent(claim):
            # Taken over meanwhile: the new claim's outcome counts.
            return
        del self._claims[claim.position]
        self._giveBack(claim.position, outcome, notBefore)

    def _giveBack(self, position: int, outcome: JobOutcome, notBefore: float | None) -> None:
        """
        Put a job whose claim ended where C{outcome} and the control
        requested of it say.
        """
        requested = self._requested.pop(position, None)
        if position in self._leaving:
            self._leaving.discard(position)
            self._drop(position)
        elif requested is Requested.RERUN:
            heapq.heappush(self._returned, position)
        elif outcome is JobOutcome.COMPLETED:
            self._ended[position] = QueueState.DONE
        elif outcome is JobOutcome.FAILED:
            self._ended[position] = QueueState.FAILED
        elif requested is Requested.CANCEL:
            self._ended[position] = QueueState.CANCELLED
            self._cancelled += 1
        elif requested is Requested.PAUSE:
            self._paused.add(position)
        elif outcome is JobOutcome.STOPPED:
            heapq.heappush(self._returned, position)
        else:
            assert outcome is JobOutcome.DEFERRED and notBefore is not None
            heapq.heappush(self._deferred, (notBefore, position))

    def nextDue(self) -> float | None:
        return self._deferred[0][0] if self._deferred else None

    def counts(self) -> QueueCounts:
        queued = (
            len(self._jobs)
            - len(self._removed)
            - len(self._claims)
            - len(self._paused)
            - len(self._ended)
            - len(self._deferred)
        )
        return QueueCounts(
            queued=queued,
            claimed=len(self._claims),
            finished=len(self._ended),
            deferred=len(self._deferred),
            paused=len(self._paused),
            cancelled=self._cancelled,
        )

    def _position(self, name: str) -> int:
        try:
            return self._positionOf()[name]
        except KeyError:
            raise UnknownJob(name) from None

    def _stateAt(self, position: int) -> QueueState:
        if position in self._claims:
            return QueueState.CLAIMED
        if position in self._paused:
            return QueueState.PAUSED
        return self._ended.get(position, QueueState.QUEUED)

    def state(self, name: str) -> QueueState:
        return self._stateAt(self._position(name))

    def _unqueue(self, position: int) -> None:
        """
        Take a queued job out of the heap it waits in, if any (one never
        claimed waits in none: the claims skip it).
        """
        if position in self._returned:
            self._returned.remove(position)
            heapq.heapify(self._returned)
        deferred = [entry for entry in self._deferred if entry[1] != position]
        if len(deferred) != len(self._deferred):
            self._deferred = deferred
            heapq.heapify(self._deferred)

    def _requeue(self, position: int) -> None:
        """
        Queue a job that waits nowhere (paused, ended) before every job
        never claimed; a job paused while deferred goes back to waiting
        for its time.
        """
        notBefore = self._pausedNotBefore.pop(position, None)
        if notBefore is not None:
            heapq.heappush(self._deferred, (notBefore, position))
        else:
            heapq.heappush(self._returned, position)

    def _keepNotBefore(self, position: int) -> None:
        """
        Note when a deferred job at C{position}, about to be paused, may go
        on.
        """
        for notBefore, deferred in self._deferred:
            if deferred == position:
                self._pausedNotBefore[position] = notBefore

    def pause(self, name: str) -> QueueState:
        position = self._position(name)
        state = self._stateAt(position)
        if state is QueueState.CLAIMED:
            if self._requested.get(position) is Requested.CANCEL:
                raise ControlRefused(f"job {name} is being cancelled")
            self._requested[position] = Requested.PAUSE
            return state
        if state is not QueueState.QUEUED:
            raise ControlRefused(f"job {name} is {state.value}, not queued or running")
        self._keepNotBefore(position)
        self._unqueue(position)
        self._placed.add(position)
        self._paused.add(position)
        return QueueState.PAUSED

    def resume(self, name: str) -> QueueState:
        position = self._position(name)
        state = self._stateAt(position)
        if state is QueueState.CLAIMED and self._requested.get(position) is Requested.PAUSE:
            del self._requested[position]
            return state
        if state is QueueState.CANCELLED:
            # The admin's way back from a cancel: the job is queued again.
            del self._ended[position]
            self._cancelled -= 1
            self._requeue(position)
            return QueueState.QUEUED
        if state is not QueueState.PAUSED:
            raise ControlRefused(f"job {name} is not paused or cancelled")
        self._paused.discard(position)
        self._requeue(position)
        return QueueState.QUEUED

    def cancel(self, name: str) -> QueueState:
        position = self._position(name)
        state = self._stateAt(position)
        if state is QueueState.CLAIMED:
            self._requested[position] = Requested.CANCEL
            return state
        if state in ENDED:
            raise ControlRefused(f"job {name} has ended ({state.value})")
        self._unqueue(position)
        self._placed.add(position)
        self._paused.discard(position)
        self._pausedNotBefore.pop(position, None)
        self._ended[position] = QueueState.CANCELLED
        self._cancelled += 1
        return QueueState.CANCELLED

    def requeue(self, name: str) -> QueueState:
        position = self._position(name)
        state = self._stateAt(position)
        if state is QueueState.CANCELLED:
            raise ControlRefused(f"job {name} was cancelled")
        if state is QueueState.CLAIMED:
            if position not in self._requested:
                self._requested[position] = Requested.RERUN
            return state
        if state in ENDED:
            del self._ended[position]
            self._requeue(position)
            return QueueState.QUEUED
        return state

    def _mutableJobs(self) -> list[JobConfig | None]:
        """
        The queue's own list of jobs, copied from the caller's sequence
        (never changed) on first use.
        """
        if self._ownJobs is None:
            self._ownJobs = list(self._jobs)
            self._jobs = self._ownJobs
        return self._ownJobs

    def _positionOf(self) -> dict[str, int]:
        """
        The position of every job the queue holds, by name (made on first
        use: a daemon never controlled does not pay for 10,000 names).
        """
        if self._positions is None:
            self._positions = {
                job.name: i for i, job in enumerate(self._jobs) if job is not None
            }
        return self._positions

    def add(self, job: JobConfig) -> None:
        positions = self._positionOf()
        for position in self._leaving:
            if self._jobAt(position).name == job.name:
                # Removed while claimed, added again before its claim
                # finished: it stays, and runs as configured now when
                # it is next claimed.
                self._leaving.discard(position)
                self._mutableJobs()[position] = job
                positions[job.name] = position
                return
        if job.name in positions:
            raise ValueError(f"job {job.name} is queued already")
        jobs = self._mutableJobs()
        positions[job.name] = len(jobs)
        jobs.append(job)

    def remove(self, name: str) -> QueueState:
        position = self._position(name)
        state = self._stateAt(position)
        del self._positionOf()[name]
        if state is QueueState.CLAIMED:
            self._leaving.add(position)
            return state
        self._drop(position)
        return state

    def _drop(self, position: int) -> None:
        """
        Forget the job at C{position}, which no claim holds: it waits
        nowhere, and is never claimed.
        """
        self._unqueue(position)
        self._placed.add(position)
        self._paused.discard(position)
        self._pausedNotBefore.pop(position, None)
        if self._ended.pop(position, None) is QueueState.CANCELLED:
            self._cancelled -= 1
        self._removed.add(position)
        self._mutableJobs()[position] = None

    def replace(self, job: JobConfig) -> QueueState:
        position = self._position(job.name)
        self._mutableJobs()[position] = job
        return self._stateAt(position)
