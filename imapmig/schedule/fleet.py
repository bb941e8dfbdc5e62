# -*- test-case-name: tests.test_schedule_fleet -*-
"""
L{FleetScheduler} is the scheduler of a fleet's daemon: it claims and
finishes through the shared queue (a claim polled every C{H} while a job
slot is free, and at once when one frees), under its member's id
(L{imapmig.schedule.member.FleetMember}: the daemon's registration,
heartbeat and send deadline, docs/fleet-design.md), and is told by it of
a lost lease, of the controls asked through other daemons and of a newer
schema; each heartbeat caps its connection grants at its fair shares of
the servers' C{max_connections} (L{imapmig.schedule.shares}).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, DeferredList, FirstError, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.config.model import JobConfig
from imapmig.errors import LeaseLost, PermanentError, QueueUnavailable
from imapmig.imap.outgoing import SendDeadline
from imapmig.job.machine import JobMachines
from imapmig.progress import MigrationProgress
from imapmig.queue import IAsyncJobQueue, JobClaim, JobOutcome, Requested
from imapmig.schedule.fleetcontrols import FleetControls
from imapmig.schedule.grants import JOB_SLOTS, ConnectionGrants, Grant, JobConnections
from imapmig.schedule.member import FleetMember
from imapmig.schedule.scheduler import JobQueueService, ScheduledJob
from imapmig.schedule.shares import FleetShares
from imapmig.schedule.tail import TailWatch, onlyOthersLeft
from imapmig.state import IStateStore

log = Logger()


class FleetScheduler(JobQueueService):
    """
    The scheduler of a daemon of a fleet: L{JobQueueService} over a shared
    L{IAsyncJobQueue}, its claims under its L{FleetMember}'s id and lease.

    Its queue is drained (C{whenDone}) when nothing is left to run
    anywhere: no job queued, claimed (by any daemon), deferred or paused
    in the database (the last jobs, others', watched: L{TailWatch}).  A
    claim lost with the lease is neither finished nor counted: its job is
    the next owner's.

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
        # When the queue was last asked which jobs it says this daemon holds.
        self._looked: float | None = None
        # Nothing left but other daemons' claims at the last look, since
        # when (watched for a lease from then: TailWatch).
        self._tail = TailWatch(queue, clock, self.member.period, self._wakeUp)
        self._onlyOthersLeft: float | None = None

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
        Give back the jobs the queue says this daemon holds that it does
        not run: after a claim that failed unanswered (its C{COMMIT}
        succeeded, its answer lost), and once a lease before a claim (a
        row set claimed by hand or by a bug: one statement, the index
        C{jobs_claimed}); held unknown, each would stay claimed for as
        long as this daemon beats, and C{--exit-when-done} never exit.
        Called before a claim only, so no claim's answer is on its way.
        """
        now, unsure = self._clock.seconds(), self._unsure
        if not unsure and self._looked is not None and now - self._looked < self._lease:
            return succeed(None)
        self._looked = now

        def gave(names: list[str]) -> None:
            self._unsure = False
            for name in names:
                log.warn(
                    "Job {job}: claimed here by a claim whose answer was lost; given back"
                    if unsure
                    else "Job {job}: claimed in the queue by this daemon, which does not run it;"
                    " given back",
                    job=name,
                )

        known = frozenset(self._claims) | self._finishing
        return self._queue.giveBack(owner, known).addCallback(gave)

    async def _changed(self) -> None:
        since = self._onlyOthersLeft
        if since is not None and self._clock.seconds() - since < self._lease:
            self._tail.start()
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
        finally:
            self._tail.stop()

    async def _nothingLeft(self) -> bool:
        since, self._onlyOthersLeft = self._onlyOthersLeft, None
        if self._active or self.member.owner is None or self._whenDone is None:
            # Without --exit-when-done the daemon never drains: it polls on,
            # and claims a job queued again through another daemon (a
            # control on its page, a reload there, state load-jobs).
            return False
        try:
            counts = await self._queue.counts()
        except QueueUnavailable:
            return False
        # The fleet's last jobs, running elsewhere: watched (TailWatch).
        if onlyOthersLeft(counts):
            self._onlyOthersLeft = self._clock.seconds() if since is None else since
        return not (counts.queued or counts.claimed or counts.deferred or counts.paused)

    async def _finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None
    ) -> bool:
        """
        Finish C{claim} in the queue, tried again every C{H} while the
        queue cannot be reached or refuses it (a right revoked) and the
        claim's lease lives; a claim lost with the lease is not finished,
        one whose finish failed otherwise (the daemon cannot tell whether
        its claim still stands) is given back at the next claim
        (L{_giveBack}).
        """
        name = claim.job.name
        self._finishing.add(name)
        try:
            # Stopped by a control taken here: its write into the row
            # first (tried again while the database is away), so that the
            # finish puts the job where the control says, never queued
            # (then claimed again before the control landed).
            landed = name not in self._halted or await self._whileLeased(self.machines.landed(name))
            while landed and name not in self._lost and self.member.owner == claim.owner:
                try:
                    if await self._whileLeased(self._queue.finish(claim, outcome, notBefore)):
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
                except Exception as e:
                    # Unsure whether the claim stands: _giveBack's to settle.
                    log.error("Job {job}: cannot finish its claim ({why}); given back at the next"
                              " claim", job=name, why=str(e))  # fmt: skip
                    self._unsure = True
                    break
        finally:
            self._finishing.discard(name)
        self._lost.discard(name)
        self._incomplete.discard(name)
        return False

    async def _whileLeased(self, call: Deferred[None]) -> bool:
        """
        Whether C{call} (a finish) answered while the lease lived: one that
        hangs (the queue's connection cut off) is cancelled at its loss.
        """
        lost = self.member.whenLost()
        try:
            _, first = await DeferredList(
                [call, lost], fireOnOneCallback=True, fireOnOneErrback=True, consumeErrors=True
            )
        except FirstError as e:
            lost.cancel()
            e.subFailure.raiseException()
        (lost if first == 0 else call).cancel()
        return first == 0

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
