# -*- test-case-name: tests.test_queue -*-
"""
The in-process job queue (L{InMemoryJobQueue}): the configured jobs,
claimed by one daemon, its leases timed by a monotonic clock.  Taken out
of C{imapmig/schedule/queue.py} beside the interface it provides
(L{imapmig.queue.IJobQueue}), where a shared queue goes beside it.

L{AsyncJobQueue} gives any L{IJobQueue} as an L{IAsyncJobQueue}, each
call made at once and its answer an already-fired Deferred: the
scheduler and the jobs' machines then have one code path for the one
daemon's queue in memory and the fleet's in PostgreSQL, with no wait
added to the first (and the fleet's tests a queue in memory).
"""

from __future__ import annotations

import heapq
import uuid
from typing import Callable, Collection, Sequence, TypeVar

from attrs import evolve
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.config.model import ImapSourceConfig, JobConfig, UserList
from imapmig.errors import ControlRefused, LeaseLost, UnknownJob
from imapmig.queue import (
    ENDED,
    Heartbeat,
    IAsyncJobQueue,
    IJobQueue,
    JobClaim,
    JobOutcome,
    ListChange,
    QueueCounts,
    QueueState,
    Requested,
)


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
        self._listGeneration = 1
        # Registered daemons' leases (register, heartbeat), and the owner
        # whose lease ran out while it held a job, by position, for the
        # next claim of that job (a takeover).
        self._daemons: dict[str, float] = {}
        self._takenFrom: dict[int, str] = {}

    def register(self, host: str, pid: int, version: str, lease: float) -> str:
        owner = str(uuid.uuid4())
        self._daemons[owner] = self._leaseClock() + lease
        return owner

    def _beat(self, owner: str, lease: float) -> float:
        """
        Renew a registered daemon's lease, never an expired one.

        @return: the new lease end (that of an unregistered owner, whose
            claims are renewed one by one, too).
        @raise LeaseLost: C{owner}'s lease ran out.
        """
        leaseNow = self._leaseClock()
        until = self._daemons.get(owner)
        if until is not None and until < leaseNow:
            raise LeaseLost(f"daemon {owner}'s lease ran out")
        if until is not None:
            self._daemons[owner] = leaseNow + lease
        return leaseNow + lease

    def retire(self, owner: str) -> None:
        """
        End daemon C{owner}'s lease now (see L{IAsyncJobQueue.retire}):
        its jobs go back to the queue at once, each claimed next as a
        takeover.
        """
        if owner in self._daemons:
            self._daemons[owner] = float("-inf")
        for position, held in list(self._claims.items()):
            if held.owner == owner:
                del self._claims[position]
                self._takenFrom[position] = owner
                self._giveBack(position, JobOutcome.STOPPED, None)

    def heartbeat(self, owner: str, lease: float) -> Heartbeat:
        leaseUntil = self._beat(owner, lease)
        requests = []
        for position, held in list(self._claims.items()):
            if held.owner == owner:
                requested = self._requested.get(position)
                self._claims[position] = evolve(held, leaseUntil=leaseUntil, requested=requested)
                if requested is not None:
                    requests.append((held.job.name, requested))
        return Heartbeat(leaseUntil, tuple(requests))

    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> JobClaim | None:
        leaseUntil = self._beat(owner, lease)
        leaseNow = self._leaseClock()
        for expired, held in list(self._claims.items()):
            if held.owner != owner and held.leaseUntil < leaseNow:
                # Taken over: the old owner's renew raises LeaseLost.
                del self._claims[expired]
                self._takenFrom[expired] = held.owner
                self._giveBack(expired, JobOutcome.STOPPED, None)
        while self._deferred and self._deferred[0][0] <= now:
            heapq.heappush(self._returned, heapq.heappop(self._deferred)[1])
        skipped = []
        position = self._nextPosition()
        while position is not None and _servers(self._jobAt(position)) & skipServers:
            # Skipped, claimable again later, in its order.
            skipped.append(position)
            position = self._nextPosition()
        for each in skipped:
            heapq.heappush(self._returned, each)
        if position is None:
            return None
        self._generation += 1
        claim = JobClaim(
            self._jobAt(position),
            position,
            owner,
            leaseUntil,
            self._generation,
            takenFrom=self._takenFrom.pop(position, None),
        )
        self._claims[position] = claim
        return claim

    def _nextPosition(self) -> int | None:
        """
        Take the position of the next job to claim, if any.
        """
        while self._next < len(self._jobs) and self._next in self._placed:
            self._next += 1
        if self._returned:
            return heapq.heappop(self._returned)
        if self._next < len(self._jobs):
            self._next += 1
            return self._next - 1
        return None

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
            leaseUntil=self._beat(claim.owner, lease),
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

    def giveBack(self, owner: str, known: frozenset[str]) -> list[str]:
        """
        See L{IAsyncJobQueue.giveBack<imapmig.queue.IAsyncJobQueue.giveBack>}.
        """
        names = []
        for position, held in list(self._claims.items()):
            if held.owner == owner and held.job.name not in known:
                del self._claims[position]
                self._takenFrom[position] = owner
                self._giveBack(position, JobOutcome.STOPPED, None)
                names.append(held.job.name)
        return names

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

    def names(self) -> list[str]:
        """
        The jobs listed (not those leaving), in their order.
        """
        return list(self._positionOf())

    def leaving(self, names: Collection[str]) -> frozenset[str]:
        """
        Those of C{names} removed while claimed, whose claim has not ended.
        """
        leaving = {self._jobAt(position).name for position in self._leaving}
        return frozenset(name for name in names if name in leaving)

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

    def replaceList(self, jobs: Sequence[JobConfig]) -> ListChange:
        """
        Make C{jobs} the queue's list, as the PostgreSQL queue's
        C{replaceList} does: jobs no longer listed removed (a claimed one
        when its claim ends), changed ones replaced, new ones added last
        in C{jobs}' order (a leaving one listed again stays).
        """
        listed = {job.name: job for job in jobs}
        change = {"added": 0, "removed": 0, "leaving": 0, "changed": 0}
        for name in [name for name in self._positionOf() if name not in listed]:
            change["leaving" if self.remove(name) is QueueState.CLAIMED else "removed"] += 1
        positions = self._positionOf()
        for name, job in listed.items():
            if name not in positions:
                self.add(job)
                change["added"] += 1
            elif self._jobAt(positions[name]) != job:
                self.replace(job)
                change["changed"] += 1
        loaded = any(change.values())
        self._listGeneration += loaded
        return ListChange(self._listGeneration, loaded=loaded, **change)


_T = TypeVar("_T")


def _servers(job: JobConfig) -> set[str]:
    """
    The servers job C{job} connects to (its destination's, and its IMAP
    source's), as a claim's C{skipServers} names them.
    """
    servers = {job.destination.server.name}
    if isinstance(job.source, ImapSourceConfig):
        servers.add(job.source.server.name)
    return servers


def _answer(call: Callable[..., _T], *args: object) -> Deferred[_T]:
    """
    C{call(*args)}'s result as a fired Deferred, or its exception as a
    failed one.
    """
    try:
        return succeed(call(*args))
    except Exception as e:
        return fail(e)


@implementer(IAsyncJobQueue)
class AsyncJobQueue:
    """
    An L{IJobQueue} (an L{InMemoryJobQueue}) as an L{IAsyncJobQueue}: each
    call is made at once, its answer an already-fired Deferred.

    @ivar queue: the queue it answers from.
    """

    def __init__(self, queue: IJobQueue) -> None:
        self.queue = queue

    def register(self, host: str, pid: int, version: str, lease: float) -> Deferred[str]:
        return _answer(self.queue.register, host, pid, version, lease)

    def heartbeat(
        self, owner: str, lease: float, rate: float | None = None
    ) -> Deferred[Heartbeat]:
        # No page reads a memory queue's rates.
        return _answer(self.queue.heartbeat, owner, lease)

    def retire(self, owner: str) -> Deferred[None]:
        # An IJobQueue has no retire of its own, but the in-memory one.
        retire: Callable[[str], None] = getattr(self.queue, "retire", lambda owner: None)
        return _answer(retire, owner)

    def close(self) -> None:
        pass

    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> Deferred[JobClaim | None]:
        return _answer(self.queue.claim, owner, now, lease, skipServers)

    def finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> Deferred[None]:
        return _answer(self.queue.finish, claim, outcome, notBefore)

    def giveBack(self, owner: str, known: frozenset[str]) -> Deferred[list[str]]:
        return _answer(self.queue.giveBack, owner, known)  # type: ignore[attr-defined]

    def nextDue(self) -> Deferred[float | None]:
        return _answer(self.queue.nextDue)

    def counts(self) -> Deferred[QueueCounts]:
        return _answer(self.queue.counts)

    def state(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.state, name)

    def pause(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.pause, name)

    def resume(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.resume, name)

    def cancel(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.cancel, name)

    def requeue(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.requeue, name)

    def controlMany(
        self, control: str, names: Sequence[str] | None, skip: Sequence[str] = (),
        by: str | None = None,
    ) -> Deferred[int]:  # fmt: skip
        # An IJobQueue has no names of its own, but the in-memory one.
        chosen = getattr(self.queue, "names")() if names is None else names
        each = getattr(self.queue, control)
        changed = 0
        for name in chosen:
            if name in skip:
                continue
            try:
                each(name)
            except (ControlRefused, UnknownJob):
                continue
            changed += 1
        return succeed(changed)

    def leaving(self, names: Sequence[str]) -> Deferred[frozenset[str]]:
        return _answer(getattr(self.queue, "leaving"), names)

    def add(self, job: JobConfig) -> Deferred[None]:
        return _answer(self.queue.add, job)

    def remove(self, name: str) -> Deferred[QueueState]:
        return _answer(self.queue.remove, name)

    def replace(self, job: JobConfig) -> Deferred[QueueState]:
        return _answer(self.queue.replace, job)

    def replaceList(
        self, jobs: Sequence[JobConfig], userLists: Sequence[UserList] = ()
    ) -> Deferred[ListChange]:
        # An IJobQueue has no replaceList of its own, but the in-memory one,
        # which holds every job: the user lists' rows read.
        replaceList: Callable[[Sequence[JobConfig]], ListChange] = getattr(
            self.queue, "replaceList"
        )
        taken = {job.name: "jobs" for job in jobs}
        rows = [job for each in userLists for job, _ in each.rows(taken)]
        return _answer(replaceList, [*jobs, *rows])

    def listDiffers(self) -> Deferred[str | None]:
        # One daemon: its list is the only one.
        return succeed(None)


def asAsync(queue: IJobQueue | IAsyncJobQueue) -> IAsyncJobQueue:
    """
    C{queue} as an L{IAsyncJobQueue}: itself if it is one, else an
    L{AsyncJobQueue} over it.
    """
    if IAsyncJobQueue.providedBy(queue):
        return queue
    return AsyncJobQueue(queue)
