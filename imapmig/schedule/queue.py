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
"""

from __future__ import annotations

import heapq
from enum import Enum
from typing import Callable, Sequence

from attrs import evolve, frozen
from zope.interface import Interface, implementer

from imapmig.config.model import JobConfig


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


class LeaseLost(Exception):
    """
    A claim's lease expired and another owner took the job over.
    """


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
    """

    job: JobConfig
    position: int
    owner: str
    leaseUntil: float
    generation: int


@frozen
class QueueCounts:
    """
    How many jobs are where, for the status resource.
    """

    queued: int
    claimed: int
    finished: int
    deferred: int = 0


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
        self._jobs = jobs
        self._leaseClock = leaseClock
        # Jobs never claimed start at this position; jobs given back (a
        # stop, an expired lease) wait in a heap, by position.
        self._next = 0
        self._returned: list[int] = []
        # Deferred jobs, (notBefore, position), earliest first: moved to
        # _returned once due.
        self._deferred: list[tuple[float, int]] = []
        self._claims: dict[int, JobClaim] = {}
        self._finished = 0
        self._generation = 0

    def claim(self, owner: str, now: float, lease: float) -> JobClaim | None:
        leaseNow = self._leaseClock()
        for position, held in list(self._claims.items()):
            if held.owner != owner and held.leaseUntil < leaseNow:
                # Taken over: the old owner's renew raises LeaseLost.
                del self._claims[position]
                heapq.heappush(self._returned, position)
        while self._deferred and self._deferred[0][0] <= now:
            heapq.heappush(self._returned, heapq.heappop(self._deferred)[1])
        if self._returned and self._returned[0] < self._next:
            position = heapq.heappop(self._returned)
        elif self._next < len(self._jobs):
            position = self._next
            self._next += 1
        else:
            return None
        self._generation += 1
        claim = JobClaim(self._jobs[position], position, owner, leaseNow + lease, self._generation)
        self._claims[position] = claim
        return claim

    def _isCurrent(self, claim: JobClaim) -> bool:
        held = self._claims.get(claim.position)
        return held is not None and held.generation == claim.generation

    def renew(self, claim: JobClaim, lease: float) -> JobClaim:
        if not self._isCurrent(claim):
            raise LeaseLost(f"job {claim.job.name} was taken over")
        renewed = evolve(claim, leaseUntil=self._leaseClock() + lease)
        self._claims[claim.position] = renewed
        return renewed

    def finish(self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        if not self._isCurrent(claim):
            # Taken over meanwhile: the new claim's outcome counts.
            return
        del self._claims[claim.position]
        if outcome is JobOutcome.STOPPED:
            heapq.heappush(self._returned, claim.position)
        elif outcome is JobOutcome.DEFERRED:
            assert notBefore is not None
            heapq.heappush(self._deferred, (notBefore, claim.position))
        else:
            self._finished += 1

    def nextDue(self) -> float | None:
        return self._deferred[0][0] if self._deferred else None

    def counts(self) -> QueueCounts:
        queued = len(self._jobs) - self._next + len(self._returned)
        return QueueCounts(
            queued=queued,
            claimed=len(self._claims),
            finished=self._finished,
            deferred=len(self._deferred),
        )
