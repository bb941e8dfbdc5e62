# -*- test-case-name: tests.test_job_machine -*-
"""
A job's machine: the one holder and writer of a job's state.

It replaces C{imapmig.job.lifecycle}, whose machine knew only the run's
own states while the scheduler and the controls wrote theirs beside it.
Here every state of issue 28's contract is a state of one typed automat
machine (L{automat.TypeMachineBuilder}, as Twisted's
C{application/_client_service.py}), and whatever moves a job is one of its
inputs (L{JobInputs}): the scheduler (a grant, a start, queued again), the
run (connected, backing off, held by the server, deferred by a budget, its
end), the admin's controls (pause, resume, cancel, retry-failed, each with
who), a reload and the daemon's stop.  A fleet's lease is one more input
of the daemon's group, L{JobInputs.leaseLost} (docs/fleet-design.md "The
lease in the job's machine"): a running job stops I{abandoning} what is
in flight (state C{Abandoning}, shown C{stopping}), a waiting one is
stopped at once, and either ends C{stopped}, its cause C{lease lost}.

Every transition is recorded, through the L{_Core}'s C{record}, as a
L{Transition} (time, from, to, cause, who): the job's timeline.  The
machine shows where the job waits, why and until when on its
L{JobProgress} (L{Wait}); L{JobProgress.state} reads the machine.

The machine alone writes the job's place in the queue (held, ended,
queued again), which a scheduler's claim reads: the admin's controls are
its inputs, its transitions write the L{_Core}'s C{queue}.

L{imapmig.job.statediagram} draws the machine from its own transitions,
for the "Job states" section of docs/failure-handling.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from imapmig.errors import ControlRefused, ImapmigError, UnknownJob
from imapmig.job.queuewrite import QueueWrite
from imapmig.job.inputs import CANCELLED_BY_ADMIN, PAUSED_BY_ADMIN, JobInputs
from imapmig.progress import JobProgress, JobState, MigrationProgress, Wait
from imapmig.queue import IAsyncJobQueue, IJobQueue, QueueState
from imapmig.state import Transition

__all__ = ["CANCELLED_BY_ADMIN", "PAUSED_BY_ADMIN", "JobInputs", "JobMachine", "JobMachines", "MACHINE", "forget"]

log = Logger()


def forget(job: str, transition: Transition) -> None:
    "A C{record} that keeps nothing."


@dataclass
class _Core:
    """
    What a job's machine works with.

    @ivar job: the job's name.
    @ivar progress: where the machine shows the job's state and wait.
    @ivar clock: times the waits, and the transitions.
    @ivar record: called with every transition (the state store's
        C{recordTransition}).
    @ivar queue: the job queue, where the admin's controls the machine
        takes are written (L{None}: a machine outside any queue).
    @ivar written: the answer of its last write into a fleet's queue (see
        L{JobMachines.control}); C{writing}, that write (L{JobMachines.landed}).
    @ivar current: the state entered last: written by L{enter} alone.
    @ivar stopBy: who asked the pause or cancel a stopping job stops for.
    """

    job: str
    progress: JobProgress
    clock: IReactorTime
    record: Callable[[str, Transition], object] = forget
    queue: IJobQueue | IAsyncJobQueue | None = None
    written: Deferred[QueueState | ImapmigError | None] | None = None
    writing: QueueWrite | None = None
    current: JobState = JobState.QUEUED
    stopBy: str | None = None
    timer: IDelayedCall | None = None
    waiters: list[Deferred[None]] = field(default_factory=list)

    def enter(self, target: JobState, cause: str, by: str | None = None) -> None:
        """
        Record the move from L{current} to C{target}.
        """
        transition = Transition(self.clock.seconds(), self.current.value, target.value, cause, by)
        self.current = target
        self.record(self.job, transition)

    def hold(
        self,
        write: Callable[[Any], Callable[[str], object]],
        already: QueueState | None = None,
    ) -> None:
        """
        Write a control the machine took into the queue (the method
        C{write} picks of it), unless the queue has the job in C{already}
        (its claim finished so, or another daemon did it).  The controls
        check first, so the queue takes it; if not (changed meanwhile
        through another daemon), the machine still moves, and says so.
        Queue methods are plain updates: nothing re-enters the machine.

        A fleet's queue (an L{IAsyncJobQueue}) is written at once, without
        the read of C{already} (its refusal is the answer): the write's
        answer is L{written} (within seconds, L{QueueWrite}), a failure to
        reach the queue is logged and the write tried again, never lost.
        """
        if self.queue is None:
            return
        if IAsyncJobQueue.providedBy(self.queue):
            self.writing = QueueWrite(self.job, self.queue, self.clock, write)
            self.written = self.writing.attempt()
            return
        try:
            if already is None or self.queue.state(self.job) is not already:
                write(self.queue)(self.job)
        except (UnknownJob, ControlRefused) as e:
            log.warn("Job {job}: the queue refuses its machine's move: {why}", job=self.job, why=str(e))

    def wait(
        self,
        target: JobState,
        reason: str,
        until: float | None,
        by: str | None = None,
        since: float | None = None,
        cause: str | None = None,
    ) -> None:
        """
        Enter C{target}, a state that waits for C{reason} (recorded as
        C{cause}, by default the reason) until C{until}, since C{since}
        (by default now).
        """
        self.enter(target, reason if cause is None else cause, by)
        since = self.clock.seconds() if since is None else since
        self.progress.waitIn(Wait(target, reason, since, until, by))

    def pause(self, by: str | None, since: float | None = None, cause: str | None = None) -> None:
        """
        Enter L{JobState.PAUSED}, by the admin C{by}.
        """
        self.cancelTimer()
        self.wait(JobState.PAUSED, PAUSED_BY_ADMIN, None, by, since, cause)
        self.progress.error = None
        self.progress.pausedByAdmin = True

    def timed(self, target: JobState, reason: str, delay: float) -> None:
        """
        Enter C{target} and wait C{delay} seconds (L{waited}).
        """
        self.wait(target, reason, self.clock.seconds() + delay)
        self.timer = self.clock.callLater(delay, self.endTimer, None)

    def waited(self) -> Deferred[None]:
        if self.timer is None:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self.waiters.append(waiter)
        return waiter

    def endTimer(self, error: CancelledError | None) -> None:
        self.timer = None
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if error is None:
                waiter.callback(None)
            else:
                waiter.errback(error)

    def cancelTimer(self) -> None:
        """
        End a wait early: whoever waits gets L{CancelledError}.
        """
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
            self.endTimer(CancelledError())

    def ended(self, target: JobState, cause: str, error: str | None, by: str | None = None) -> None:
        """
        Enter C{target}, a state where the run is over.
        """
        self.cancelTimer()
        self.enter(target, cause, by)
        self.progress.finished(error)


_builder = TypeMachineBuilder(JobInputs, _Core)
queued = _builder.state("Queued")
waiting = _builder.state("Waiting")
connecting = _builder.state("Connecting")
running = _builder.state("Running")
backingOff = _builder.state("BackingOff")
paused = _builder.state("Paused")
pausedByServer = _builder.state("PausedByServer")
deferred = _builder.state("Deferred")
stopping = _builder.state("Stopping")
# A stopping job knows why it stops: for the admin's pause or cancel, it
# ends paused or cancelled; for the daemon's stop, stopped.
stoppingForPause = _builder.state("StoppingForPause")
stoppingForCancel = _builder.state("StoppingForCancel")
# Its lease lost, a stopping job abandons what is in flight, and ends
# stopped whatever its run says.
abandoning = _builder.state("Abandoning")
stopped = _builder.state("Stopped")
done = _builder.state("Done")
doneWithFailures = _builder.state("DoneWithFailures")
failed = _builder.state("Failed")
cancelled = _builder.state("Cancelled")

_ALL = (
    queued, waiting, connecting, running, backingOff, paused, pausedByServer, deferred,
    stopping, stoppingForPause, stoppingForCancel, abandoning, stopped, done, doneWithFailures,
    failed, cancelled,
)

for _state in _ALL:
    @_state.upon(JobInputs.state).loop()
    def _where(inputs: JobInputs, core: _Core) -> JobState:
        return core.current


# -- the scheduler ---------------------------------------------------------------

@queued.upon(JobInputs.waitForGrant).to(waiting)
def _waitForGrant(inputs: JobInputs, core: _Core, reason: str) -> None:
    core.wait(JobState.WAITING, reason, None)


@waiting.upon(JobInputs.waitForGrant).loop()
def _waitForAnother(inputs: JobInputs, core: _Core, reason: str) -> None:
    # Granted its connections, it waits for a job slot: the same wait.
    core.progress.waitIn(Wait(JobState.WAITING, reason, core.clock.seconds(), None, None))


@queued.upon(JobInputs.start).to(connecting)
@waiting.upon(JobInputs.start).to(connecting)
@deferred.upon(JobInputs.start).to(connecting)
@stopped.upon(JobInputs.start).to(connecting)
@done.upon(JobInputs.start).to(connecting)
@doneWithFailures.upon(JobInputs.start).to(connecting)
@failed.upon(JobInputs.start).to(connecting)
def _start(inputs: JobInputs, core: _Core) -> None:
    core.enter(JobState.CONNECTING, "started")
    core.progress.started()


@waiting.upon(JobInputs.requeue).to(queued)
@paused.upon(JobInputs.requeue).to(queued)
@deferred.upon(JobInputs.requeue).to(queued)
@stopped.upon(JobInputs.requeue).to(queued)
@done.upon(JobInputs.requeue).to(queued)
@doneWithFailures.upon(JobInputs.requeue).to(queued)
@failed.upon(JobInputs.requeue).to(queued)
@cancelled.upon(JobInputs.requeue).to(queued)
def _requeue(inputs: JobInputs, core: _Core, cause: str, by: str | None) -> None:
    core.enter(JobState.QUEUED, cause, by)
    core.progress.waitIn(None)
    core.progress.error = None
    core.progress.pausedByAdmin = False


@queued.upon(JobInputs.requeue).loop()
def _stillQueued(inputs: JobInputs, core: _Core, cause: str, by: str | None) -> None:
    pass


# -- the run -------------------------------------------------------------------------

@connecting.upon(JobInputs.connected).to(running)
def _connected(inputs: JobInputs, core: _Core) -> None:
    core.enter(JobState.RUNNING, "connected")
    core.progress.waitIn(None)


@stopping.upon(JobInputs.connected).loop()
@abandoning.upon(JobInputs.connected).loop()
@stoppingForPause.upon(JobInputs.connected).loop()
@stoppingForCancel.upon(JobInputs.connected).loop()
def _connectedWhileStopping(inputs: JobInputs, core: _Core) -> None:
    pass


@connecting.upon(JobInputs.backOff).to(backingOff)
@running.upon(JobInputs.backOff).to(backingOff)
def _backOff(inputs: JobInputs, core: _Core, reason: str, delay: float) -> None:
    core.timed(JobState.BACKING_OFF, reason, delay)


@connecting.upon(JobInputs.holdByServer).to(pausedByServer)
@running.upon(JobInputs.holdByServer).to(pausedByServer)
def _holdByServer(inputs: JobInputs, core: _Core, reason: str, delay: float) -> None:
    core.timed(JobState.PAUSED_BY_SERVER, reason, delay)


@connecting.upon(JobInputs.waitForBudget).to(deferred)
@running.upon(JobInputs.waitForBudget).to(deferred)
def _waitForBudget(inputs: JobInputs, core: _Core, reason: str, delay: float) -> None:
    core.timed(JobState.DEFERRED, reason, delay)


@connecting.upon(JobInputs.defer).to(deferred)
@running.upon(JobInputs.defer).to(deferred)
def _defer(inputs: JobInputs, core: _Core, reason: str, until: float) -> None:
    core.wait(JobState.DEFERRED, reason, until)


@backingOff.upon(JobInputs.waited).loop()
@pausedByServer.upon(JobInputs.waited).loop()
@deferred.upon(JobInputs.waited).loop()
def _waited(inputs: JobInputs, core: _Core) -> Deferred[None]:
    return core.waited()


@backingOff.upon(JobInputs.retry).to(connecting)
@pausedByServer.upon(JobInputs.retry).to(connecting)
@deferred.upon(JobInputs.retry).to(connecting)
def _retry(inputs: JobInputs, core: _Core) -> None:
    core.cancelTimer()
    core.enter(JobState.CONNECTING, "retried")
    core.progress.waitIn(None)


@connecting.upon(JobInputs.succeed).to(done)
@running.upon(JobInputs.succeed).to(done)
@stopping.upon(JobInputs.succeed).to(done)
@stoppingForPause.upon(JobInputs.succeed).to(done)
@stoppingForCancel.upon(JobInputs.succeed).to(done)
def _succeed(inputs: JobInputs, core: _Core) -> None:
    core.ended(JobState.DONE, "every message migrated", None)


@connecting.upon(JobInputs.endWithFailures).to(doneWithFailures)
@running.upon(JobInputs.endWithFailures).to(doneWithFailures)
@stopping.upon(JobInputs.endWithFailures).to(doneWithFailures)
@stoppingForPause.upon(JobInputs.endWithFailures).to(doneWithFailures)
@stoppingForCancel.upon(JobInputs.endWithFailures).to(doneWithFailures)
def _endWithFailures(inputs: JobInputs, core: _Core, failed: int) -> None:
    core.ended(JobState.DONE_WITH_FAILURES, f"{failed} messages failed", None)


@queued.upon(JobInputs.fail).to(failed)
@waiting.upon(JobInputs.fail).to(failed)
@connecting.upon(JobInputs.fail).to(failed)
@running.upon(JobInputs.fail).to(failed)
@stopping.upon(JobInputs.fail).to(failed)
@stoppingForPause.upon(JobInputs.fail).to(failed)
@stoppingForCancel.upon(JobInputs.fail).to(failed)
@backingOff.upon(JobInputs.fail).to(failed)
@pausedByServer.upon(JobInputs.fail).to(failed)
@deferred.upon(JobInputs.fail).to(failed)
@paused.upon(JobInputs.fail).to(failed)
def _fail(inputs: JobInputs, core: _Core, reason: str) -> None:
    core.ended(JobState.FAILED, reason, reason)


@stopping.upon(JobInputs.stopped).to(stopped)
def _stopped(inputs: JobInputs, core: _Core) -> None:
    core.ended(JobState.STOPPED, "stopped", "stopped before the end")


@stoppingForPause.upon(JobInputs.stopped).to(paused)
def _stoppedForPause(inputs: JobInputs, core: _Core) -> None:
    # Its run over, a job stopped for the admin's pause is paused: one
    # move, by whom asked it.
    core.progress.finished(None)
    core.pause(core.stopBy)


@stoppingForCancel.upon(JobInputs.stopped).to(cancelled)
def _stoppedForCancel(inputs: JobInputs, core: _Core) -> None:
    core.ended(JobState.CANCELLED, CANCELLED_BY_ADMIN, CANCELLED_BY_ADMIN, core.stopBy)
    core.progress.pausedByAdmin = False


# -- the admin's controls and the daemon's stop -----------------------------------

@queued.upon(JobInputs.pause).to(paused)
@waiting.upon(JobInputs.pause).to(paused)
@backingOff.upon(JobInputs.pause).to(paused)
@pausedByServer.upon(JobInputs.pause).to(paused)
@deferred.upon(JobInputs.pause).to(paused)
@stopped.upon(JobInputs.pause).to(paused)
@done.upon(JobInputs.pause).to(paused)
@doneWithFailures.upon(JobInputs.pause).to(paused)
@failed.upon(JobInputs.pause).to(paused)
def _pause(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.pause, QueueState.PAUSED)
    core.pause(by)


@queued.upon(JobInputs.restorePause).to(paused)
@waiting.upon(JobInputs.restorePause).to(paused)
@deferred.upon(JobInputs.restorePause).to(paused)
@stopped.upon(JobInputs.restorePause).to(paused)
@done.upon(JobInputs.restorePause).to(paused)
@doneWithFailures.upon(JobInputs.restorePause).to(paused)
@failed.upon(JobInputs.restorePause).to(paused)
def _restorePause(
    inputs: JobInputs, core: _Core, by: str | None, since: float, across: str
) -> None:
    core.hold(lambda queue: queue.pause, QueueState.PAUSED)
    core.pause(by, since, f"{PAUSED_BY_ADMIN} (kept across {across})")


@connecting.upon(JobInputs.pause).to(stoppingForPause)
@running.upon(JobInputs.pause).to(stoppingForPause)
def _pauseRunning(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.pause)
    core.stopBy = by
    core.enter(JobState.STOPPING, PAUSED_BY_ADMIN, by)
    core.progress.pausedByAdmin = True


@stopping.upon(JobInputs.pause).to(stoppingForPause)
def _pauseWhileStopping(inputs: JobInputs, core: _Core, by: str) -> None:
    # Already stopping (the daemon stops): it ends paused.
    core.hold(lambda queue: queue.pause)
    core.stopBy = by
    core.progress.pausedByAdmin = True


@stoppingForPause.upon(JobInputs.resume).to(stopping)
def _resumeWhileStopping(inputs: JobInputs, core: _Core, by: str) -> None:
    # Resumed before its run ended: it ends stopped, and is queued again.
    core.hold(lambda queue: queue.resume, QueueState.QUEUED)
    core.stopBy = None
    core.progress.pausedByAdmin = False


@stopping.upon(JobInputs.cancel).to(stoppingForCancel)
@stoppingForPause.upon(JobInputs.cancel).to(stoppingForCancel)
def _cancelWhileStopping(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.cancel)
    core.stopBy = by
    core.progress.pausedByAdmin = False


@paused.upon(JobInputs.pause).loop()
@stoppingForPause.upon(JobInputs.pause).loop()
@stoppingForCancel.upon(JobInputs.pause).loop()
@stopping.upon(JobInputs.resume).loop()
@stoppingForCancel.upon(JobInputs.resume).loop()
@stoppingForCancel.upon(JobInputs.cancel).loop()
@cancelled.upon(JobInputs.cancel).loop()
@cancelled.upon(JobInputs.retryFailed).loop()
def _alreadyHeld(inputs: JobInputs, core: _Core, by: str) -> None:
    pass


@paused.upon(JobInputs.restorePause).loop()
def _alreadyPaused(
    inputs: JobInputs, core: _Core, by: str | None, since: float, across: str
) -> None:
    pass


@paused.upon(JobInputs.resume).to(queued)
@cancelled.upon(JobInputs.resume).to(queued)
def _resume(inputs: JobInputs, core: _Core, by: str) -> None:
    # A cancelled job resumed no longer shows why it ended.
    core.hold(lambda queue: queue.resume, QueueState.QUEUED)
    core.enter(JobState.QUEUED, "resumed", by)
    core.progress.waitIn(None)
    core.progress.error = None
    core.progress.pausedByAdmin = False


@done.upon(JobInputs.retryFailed).to(queued)
@doneWithFailures.upon(JobInputs.retryFailed).to(queued)
@failed.upon(JobInputs.retryFailed).to(queued)
def _retryFailed(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.requeue)
    core.enter(JobState.QUEUED, "retry-failed", by)
    core.progress.waitIn(None)
    core.progress.error = None
    core.progress.pausedByAdmin = False


@queued.upon(JobInputs.retryFailed).loop()
@waiting.upon(JobInputs.retryFailed).loop()
@connecting.upon(JobInputs.retryFailed).loop()
@running.upon(JobInputs.retryFailed).loop()
@backingOff.upon(JobInputs.retryFailed).loop()
@paused.upon(JobInputs.retryFailed).loop()
@pausedByServer.upon(JobInputs.retryFailed).loop()
@deferred.upon(JobInputs.retryFailed).loop()
@stopping.upon(JobInputs.retryFailed).loop()
@stoppingForPause.upon(JobInputs.retryFailed).loop()
@stoppingForCancel.upon(JobInputs.retryFailed).loop()
@stopped.upon(JobInputs.retryFailed).loop()
def _retryLater(inputs: JobInputs, core: _Core, by: str) -> None:
    # Claimed: run again once this run ends, however it ends; queued or
    # paused: it runs anyway, and the queue leaves it as it is.
    core.hold(lambda queue: queue.requeue)


@queued.upon(JobInputs.cancel).to(cancelled)
@waiting.upon(JobInputs.cancel).to(cancelled)
@backingOff.upon(JobInputs.cancel).to(cancelled)
@pausedByServer.upon(JobInputs.cancel).to(cancelled)
@deferred.upon(JobInputs.cancel).to(cancelled)
@paused.upon(JobInputs.cancel).to(cancelled)
@stopped.upon(JobInputs.cancel).to(cancelled)
@done.upon(JobInputs.cancel).to(cancelled)
@doneWithFailures.upon(JobInputs.cancel).to(cancelled)
@failed.upon(JobInputs.cancel).to(cancelled)
def _cancel(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.cancel, QueueState.CANCELLED)
    core.ended(JobState.CANCELLED, "cancelled", CANCELLED_BY_ADMIN, by)
    core.progress.pausedByAdmin = False


@queued.upon(JobInputs.restoreCancel).to(cancelled)
@waiting.upon(JobInputs.restoreCancel).to(cancelled)
@deferred.upon(JobInputs.restoreCancel).to(cancelled)
@paused.upon(JobInputs.restoreCancel).to(cancelled)
@stopped.upon(JobInputs.restoreCancel).to(cancelled)
@done.upon(JobInputs.restoreCancel).to(cancelled)
@doneWithFailures.upon(JobInputs.restoreCancel).to(cancelled)
@failed.upon(JobInputs.restoreCancel).to(cancelled)
def _restoreCancel(inputs: JobInputs, core: _Core, by: str | None, across: str) -> None:
    core.hold(lambda queue: queue.cancel, QueueState.CANCELLED)
    core.ended(
        JobState.CANCELLED, f"{CANCELLED_BY_ADMIN} (kept across {across})", CANCELLED_BY_ADMIN, by
    )
    core.progress.pausedByAdmin = False


@cancelled.upon(JobInputs.restoreCancel).loop()
def _alreadyCancelled(inputs: JobInputs, core: _Core, by: str | None, across: str) -> None:
    pass


@connecting.upon(JobInputs.cancel).to(stoppingForCancel)
@running.upon(JobInputs.cancel).to(stoppingForCancel)
def _cancelRunning(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.cancel)
    core.stopBy = by
    core.enter(JobState.STOPPING, CANCELLED_BY_ADMIN, by)


@connecting.upon(JobInputs.stop).to(stopping)
@running.upon(JobInputs.stop).to(stopping)
def _stop(inputs: JobInputs, core: _Core) -> None:
    core.enter(JobState.STOPPING, "stop")


@waiting.upon(JobInputs.stop).to(stopped)
@backingOff.upon(JobInputs.stop).to(stopped)
@pausedByServer.upon(JobInputs.stop).to(stopped)
@deferred.upon(JobInputs.stop).to(stopped)
def _stopWaiting(inputs: JobInputs, core: _Core) -> None:
    core.ended(JobState.STOPPED, "stop", "stopped before the end")


@queued.upon(JobInputs.stop).loop()
@paused.upon(JobInputs.stop).loop()
@stopping.upon(JobInputs.stop).loop()
@stoppingForPause.upon(JobInputs.stop).loop()
@stoppingForCancel.upon(JobInputs.stop).loop()
@abandoning.upon(JobInputs.stop).loop()
@stopped.upon(JobInputs.stop).loop()
@done.upon(JobInputs.stop).loop()
@doneWithFailures.upon(JobInputs.stop).loop()
@failed.upon(JobInputs.stop).loop()
@cancelled.upon(JobInputs.stop).loop()
def _alreadyStill(inputs: JobInputs, core: _Core) -> None:
    pass


# -- the lease -------------------------------------------------------------------------

LEASE_LOST = "lease lost"
"""
The cause of the move to C{stopped} of a job whose lease was lost.
"""


@connecting.upon(JobInputs.leaseLost).to(abandoning)
@running.upon(JobInputs.leaseLost).to(abandoning)
def _leaseLostRunning(inputs: JobInputs, core: _Core, reason: str) -> None:
    core.enter(JobState.STOPPING, f"{LEASE_LOST}: {reason}")


@stopping.upon(JobInputs.leaseLost).to(abandoning)
@stoppingForPause.upon(JobInputs.leaseLost).to(abandoning)
@stoppingForCancel.upon(JobInputs.leaseLost).to(abandoning)
def _leaseLostStopping(inputs: JobInputs, core: _Core, reason: str) -> None:
    # The stop in progress becomes an abandon: the pause or cancel it
    # stopped for is written in the queue already, which applies it.
    log.info("Job {job}: its lease is lost while it stops ({why})", job=core.job, why=reason)
    core.stopBy = None


@waiting.upon(JobInputs.leaseLost).to(stopped)
@backingOff.upon(JobInputs.leaseLost).to(stopped)
@pausedByServer.upon(JobInputs.leaseLost).to(stopped)
def _leaseLostWaiting(inputs: JobInputs, core: _Core, reason: str) -> None:
    core.ended(JobState.STOPPED, f"{LEASE_LOST}: {reason}", f"stopped: {LEASE_LOST}")


@queued.upon(JobInputs.leaseLost).loop()
@paused.upon(JobInputs.leaseLost).loop()
@deferred.upon(JobInputs.leaseLost).loop()
@abandoning.upon(JobInputs.leaseLost).loop()
@stopped.upon(JobInputs.leaseLost).loop()
@done.upon(JobInputs.leaseLost).loop()
@doneWithFailures.upon(JobInputs.leaseLost).loop()
@failed.upon(JobInputs.leaseLost).loop()
@cancelled.upon(JobInputs.leaseLost).loop()
def _notHeld(inputs: JobInputs, core: _Core, reason: str) -> None:
    pass


@abandoning.upon(JobInputs.stopped).to(stopped)
@abandoning.upon(JobInputs.succeed).to(stopped)
def _abandoned(inputs: JobInputs, core: _Core) -> None:
    # However its run ended, the claim is not this daemon's: its outcome
    # is the next owner's to find out.
    core.ended(JobState.STOPPED, LEASE_LOST, f"stopped: {LEASE_LOST}")


@abandoning.upon(JobInputs.endWithFailures).to(stopped)
def _abandonedWithFailures(inputs: JobInputs, core: _Core, failed: int) -> None:
    _abandoned(inputs, core)


@abandoning.upon(JobInputs.fail).to(stopped)
def _abandonedFailing(inputs: JobInputs, core: _Core, reason: str) -> None:
    _abandoned(inputs, core)


@abandoning.upon(JobInputs.pause).loop()
def _pauseWhileAbandoning(inputs: JobInputs, core: _Core, by: str) -> None:
    # For the row, which the next claim releases as it asks.
    core.hold(lambda queue: queue.pause)


@abandoning.upon(JobInputs.cancel).loop()
def _cancelWhileAbandoning(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.cancel)


@abandoning.upon(JobInputs.resume).loop()
def _resumeWhileAbandoning(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.resume)


@abandoning.upon(JobInputs.retryFailed).loop()
def _retryWhileAbandoning(inputs: JobInputs, core: _Core, by: str) -> None:
    core.hold(lambda queue: queue.requeue)


MACHINE: TypeMachine[JobInputs, _Core] = _builder.build()
"""
The machine of every job (L{JobMachine} makes one).
"""


class JobMachines:
    """
    Every job's machine, made when first asked for: the scheduler, the
    controls and each run of a job share its one machine.
    """

    def __init__(
        self,
        progress: MigrationProgress,
        clock: IReactorTime,
        record: Callable[[str, Transition], object] = forget,
        queue: IJobQueue | IAsyncJobQueue | None = None,
    ) -> None:
        """
        @param progress: every job's progress, where each machine shows its
            job's state.
        @param clock: times the waits and the transitions.
        @param record: called with every transition of every job.
        @param queue: the job queue, where each machine writes the
            admin's controls it takes.
        """
        self._progress = progress
        self._clock = clock
        self._record = record
        self.queue = queue
        self._machines: dict[str, tuple[JobInputs, _Core]] = {}

    def job(self, name: str) -> JobInputs:
        "Job C{name}'s machine."
        made = self._machines.get(name)
        if made is None:
            core = _Core(name, self._progress.job(name), self._clock, self._record, self.queue)
            made = self._machines[name] = (_made(core), core)
        return made[0]

    def drop(self, name: str) -> None:
        "Drop job C{name}'s machine (a fleet's daemon keeps those of the jobs it holds)."
        self._machines.pop(name, None)

    def control(
        self, name: str, give: Callable[[JobInputs], object]
    ) -> Deferred[QueueState | ImapmigError | None]:
        """
        Give job C{name}'s machine a control (C{give} calls its input), and
        the answer of the write its transition made into a fleet's queue:
        the job's state there, or the queue's refusal (L{ControlRefused},
        L{UnknownJob}); L{None} if it wrote none.  It never fails.
        """
        self.job(name)
        core = self._machines[name][1]
        core.written = None
        give(self._machines[name][0])
        written, core.written = core.written, None
        return succeed(None) if written is None else written

    def landed(self, name: str) -> Deferred[None]:
        """
        Fires once job C{name}'s last write into a fleet's queue is over
        (L{QueueWrite.landed}); at once if it made none.
        """
        made = self._machines.get(name)
        writing = None if made is None else made[1].writing
        return succeed(None) if writing is None else writing.landed()

    def controlElsewhere(
        self, name: str, control: str
    ) -> Deferred[QueueState | ImapmigError | None]:
        """
        A control (C{"pause"}, C{"resume"}, C{"cancel"}, C{"requeue"}) of
        job C{name}, which this daemon does not hold: one write into the
        fleet's queue, answered as L{control} answers; the job's machine
        here is not moved (the queue's row is the job's state).
        """
        write = QueueWrite(
            name, self.queue, self._clock, lambda queue: getattr(queue, control), retry=False
        )
        return write.attempt()

def JobMachine(
    job: str,
    progress: JobProgress,
    clock: IReactorTime,
    record: Callable[[str, Transition], object] = forget,
    queue: IJobQueue | IAsyncJobQueue | None = None,
) -> JobInputs:
    """
    Job C{job}'s machine, starting Queued; C{progress} shows its state.

    @param clock: times the waits and the transitions.
    @param record: called with every transition (the job's timeline).
    @param queue: where it writes the admin's controls it takes.
    """
    return _made(_Core(job, progress, clock, record, queue))


def _made(core: _Core) -> JobInputs:
    """
    The machine working with C{core}, its state shown on its progress.
    """
    machine = MACHINE(core)
    core.progress.showState(machine.state)
    return machine

