# -*- test-case-name: tests.test_queue -*-
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

A fleet of daemons shares the PostgreSQL implementation,
L{imapmig.queue.postgresql} (docs/fleet-design.md "Claiming a job"): a
daemon I{registers} under a fresh id, one I{heartbeat} statement renews
its lease, which is the lease of every job it holds, a claim takes the
next queued job with C{FOR UPDATE SKIP LOCKED} under a new generation,
and a job whose owner's lease ran out is claimed by another daemon as a
I{takeover} (L{JobClaim.takenFrom}): the new owner's first attempt settles
the journal left by the old owner against the destination (the
reconciliation of L{imapmig.job.reconcile}).  C{renew} and C{finish} by a
claim that is no longer current (owner and generation) change nothing.
C{renew} stays while the scheduler renews per claim; the fleet's daemons
call C{heartbeat} instead.

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

A package of its own below C{imapmig.job} (it was C{imapmig.schedule.queue}):
the job's machine writes its holds into the queue, and a lease is one more
input of that machine, so the queue's interface must sit below the job
while the scheduler, which claims and renews, sits above it.  Not in
C{imapmig.state}: the queue is made of the configured jobs
(L{imapmig.config.model.JobConfig}), and the state store sits below the
configuration.  Here the interface and its values; its in-memory queue is
L{imapmig.queue.memory}, and a PostgreSQL one goes beside it.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from attrs import frozen
from zope.interface import Interface

if TYPE_CHECKING:
    from typing import Sequence

    from twisted.internet.defer import Deferred

from imapmig.config.model import JobConfig, UserList


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
    @ivar takenFrom: for a takeover, the owner whose lease ran out while
        it held the job: the run must reconcile the job's journal first.
    @ivar quietFor: for a takeover, the seconds the old owner has sent
        nothing, at least, as of the claim by the queue's clock: since its
        lease ended, plus the margin C{lease / 4} its send deadline kept
        before that end unless its own retirement cut the lease short
        (docs/fleet-design.md "Takeover"); L{None}: unknown (the whole
        quiet period is waited for).
    """

    job: JobConfig
    position: int
    owner: str
    leaseUntil: float
    generation: int
    requested: Requested | None = None
    takenFrom: str | None = None
    quietFor: float | None = None


@frozen
class LiveDaemon:
    """
    A daemon of the fleet whose lease is live, as a heartbeat saw it.

    @ivar daemonId: its id (a C{uuid4} per process start).
    @ivar connections: the connections it had open per server, as
        C{(server, count)} pairs sorted by server, at its last heartbeat.
    """

    daemonId: str
    connections: tuple[tuple[str, int], ...] = ()


@frozen
class Heartbeat:
    """
    What a daemon's heartbeat brought back: its renewed lease, which is
    the lease of every job it holds (docs/fleet-design.md "The
    heartbeat").

    @ivar leaseUntil: when the daemon's lease runs out, in the seconds of
        the queue's lease clock.
    @ivar requests: the controls asked of the jobs it holds, by job name.
    @ivar requestedBy: who asked each of C{requests} (the admin's name from
        the page it was given on), by job name, where known.
    @ivar schemaVersion: the database's schema version as of this
        heartbeat, L{None} for a queue without one: a version newer than
        the code's makes the daemon stop claiming, stop its jobs and exit 2.
    @ivar jobsGeneration: the generation of the fleet's job list, raised by
        every reload that changed it (L{None}: no shared list).
    @ivar live: the live daemons (this one included), sorted by id, each
        with the connections it reported in use per server: the fair
        shares of the servers' C{max_connections} are computed from it.
    @ivar stateSchemaVersion: the state store's schema version (the
        C{imapmig.schema_version} table beside the queue's) as of this
        heartbeat, L{None} where there is none: newer than the code's, it
        stops the daemon as a newer C{schemaVersion} does.
    """

    leaseUntil: float
    requests: tuple[tuple[str, Requested], ...] = ()
    requestedBy: tuple[tuple[str, str], ...] = ()
    schemaVersion: int | None = None
    jobsGeneration: int | None = None
    live: tuple[LiveDaemon, ...] = ()
    stateSchemaVersion: int | None = None


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


@frozen
class ListChange:
    """
    What loading a job list changed (a reload's C{replaceList}).

    @ivar generation: the list's generation afterwards.
    @ivar added: jobs added (a job leaving listed again included).
    @ivar removed: jobs removed at once.
    @ivar leaving: claimed jobs removed when their claim ends.
    @ivar changed: jobs whose configuration changed.
    @ivar loaded: whether the list was loaded or replaced (not the same
        list already).
    """

    generation: int
    added: int = 0
    removed: int = 0
    leaving: int = 0
    changed: int = 0
    loaded: bool = True


class IJobQueue(Interface):
    """
    The jobs waiting to run, shared by whoever runs them.
    """

    def claim(
        owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> JobClaim | None:
        """
        Claim the next job, in configuration order, that no live lease
        holds (leases timed by the queue's own clock), and none of whose
        servers is in C{skipServers} (a fleet's daemon's servers without
        its share, L{imapmig.schedule.shares.FleetShares.withoutShare}).

        @param now: the wall clock's seconds, against which deferred jobs'
            C{notBefore} is compared.
        @param lease: seconds the claim lives unless renewed.
        @return: the claim, or L{None} when no job is left to claim.
        @raise LeaseLost: C{owner} is a registered daemon whose lease ran
            out (it must register again).
        """

    def register(host: str, pid: int, version: str, lease: float) -> str:
        """
        Register a daemon under a fresh id (a C{uuid4}, never reused,
        whatever the host and pid) with a lease of C{lease} seconds.

        @return: the daemon's id, the C{owner} of its claims.
        """

    def heartbeat(owner: str, lease: float) -> Heartbeat:
        """
        Renew the lease of the daemon C{owner}, which is the lease of every
        job it holds, to C{lease} seconds from now by the queue's lease
        clock; an expired lease is never revived.

        A shared queue's heartbeat takes a third argument, optional:
        C{connections}, a C{Mapping[str, int]} of the connections the
        daemon has open per server, recorded for the other daemons' fair
        shares and brought back in L{Heartbeat.live} (L{None}, the default:
        as at its last heartbeat); L{InMemoryJobQueue
        <imapmig.queue.memory.InMemoryJobQueue>}, a fleet of one, does not
        take it yet.

        @raise LeaseLost: its lease ran out: its jobs may be another's; it
            must stop them and register again.
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


class IAsyncJobQueue(Interface):
    """
    A job queue shared through a database (L{imapmig.queue.postgresql}'s
    C{ThreadedJobQueue}): every method of L{IJobQueue}, each returning a
    L{Deferred<twisted.internet.defer.Deferred>} of what that one returns
    (or failing with what it raises), so that the reactor never waits for
    the database; a lost connection is retried by the queue, and a call
    that cannot reach the database fails with
    L{QueueUnavailable<imapmig.errors.QueueUnavailable>}.  Plus
    C{retire}, for a daemon past its send deadline (docs/fleet-design.md
    "Sending stops before the lease can end"), and C{close}.

    The methods are those of L{IJobQueue} (C{register}, C{heartbeat},
    C{claim}, C{finish}, C{nextDue}, C{counts}, C{state}, C{pause},
    C{resume}, C{cancel}, C{requeue}, C{add}, C{remove}, C{replace});
    C{renew} is not one: a fleet's daemon renews all its claims with its
    C{heartbeat}, which takes the optional C{connections} (a
    C{Mapping[str, int]}, default L{None}) of L{IJobQueue.heartbeat}, and
    C{rate}, this daemon's messages per second over the last minute
    (L{None}: none to record; a queue without the fleet's pages ignores
    it).
    Plus the fleet's job list: C{replaceList} (a reload) and
    C{listDiffers}.
    """

    def register(host: str, pid: int, version: str, lease: float) -> Deferred[str]:
        "L{IJobQueue.register}."

    def heartbeat(owner: str, lease: float, *, rate: float | None = None) -> Deferred[Heartbeat]:
        "L{IJobQueue.heartbeat}."

    def claim(
        owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> Deferred[JobClaim | None]:
        "L{IJobQueue.claim}."

    def finish(
        claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> Deferred[None]:
        "L{IJobQueue.finish}."

    def giveBack(owner: str, known: frozenset[str]) -> Deferred[list[str]]:
        """
        Give back the jobs the queue says C{owner} holds whose names are
        not in C{known} (a claim whose C{COMMIT} succeeded but whose answer
        was lost): each finished as L{JobOutcome.STOPPED} if still that
        claim (its owner and generation), and marked taken over from
        C{owner}, so that the next claim waits the quiet period; the names
        given back.
        """

    def nextDue() -> Deferred[float | None]:
        "L{IJobQueue.nextDue}."

    def counts() -> Deferred[QueueCounts]:
        "L{IJobQueue.counts}."

    def state(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.state}."

    def pause(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.pause}."

    def resume(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.resume}."

    def cancel(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.cancel}."

    def requeue(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.requeue}."

    def controlMany(
        control: str, names: Sequence[str] | None, skip: Sequence[str] = (), by: str | None = None
    ) -> Deferred[int]:
        """
        The admin's control C{control} (C{"pause"}, C{"resume"},
        C{"cancel"}, C{"requeue"}) of the jobs C{names} (L{None}: every
        job of the list) but those of C{skip}, by C{by}, at once: each
        job changed as its own control would change it (a claimed one
        asked, for its owner), those it does not apply to left as they
        are.

        @return: how many it applied to.
        """

    def leaving(names: Sequence[str]) -> Deferred[frozenset[str]]:
        """
        Those of the jobs C{names} a reload removed while claimed whose
        claim has not ended: they leave the list when it does.
        """

    def add(job: JobConfig) -> Deferred[None]:
        "L{IJobQueue.add}."

    def remove(name: str) -> Deferred[QueueState]:
        "L{IJobQueue.remove}."

    def replace(job: JobConfig) -> Deferred[QueueState]:
        "L{IJobQueue.replace}."

    def replaceList(
        jobs: Sequence[JobConfig], userLists: Sequence[UserList] = ()
    ) -> Deferred[ListChange]:
        """
        Make C{jobs} and the rows of C{userLists} (a configuration's user
        lists kept as written, C{Config.userLists}) the fleet's job list
        and this daemon's (a reload): jobs no longer listed removed (a
        claimed one when its claim ends), changed ones replaced, new ones
        added after the last, in C{jobs}' order.

        @return: what changed.
        @raise FleetMismatch: the database holds another fleet.
        """

    def listDiffers() -> Deferred[str | None]:
        """
        Why this daemon claims nothing, when a reload elsewhere made the
        fleet's list another than its own, in one line for its log and
        page; else L{None}.
        """

    def retire(owner: str) -> Deferred[None]:
        """
        End the lease of daemon C{owner} now (C{lease_until} no later than
        the database's C{now()}, C{retired_at} set), so that the other
        daemons take its jobs at once rather than when the lease would have
        ended.  Harmless if it ended already.
        """

    def close() -> None:
        """
        Close the queue's connections; later calls fail.
        """
