# -*- test-case-name: tests.test_job_lifecycle -*-
"""
A job's lifecycle: an automat machine that owns the job's state.

    Queued --start--> Connecting --connected--> Running --succeed--> Done
                          ^  |                    |  |
                          |  +----backOff---------+  +--fail--> Failed
                          |  |        |              |
                          |  v        v              |
                        retry  BackingOff <--------+ |
                          |  Paused (pause: a quota, a server's hold)
                          |
    stop: Connecting/Running -> Stopping --stopped--> Stopped;
          BackingOff/Paused  -> Stopped at once (the wait is cancelled).

    defer: Connecting/Running -> Deferred: paused as well (a daily budget
          used up), but the run ends, without a timer: the scheduler
          starts the job again when it is due.

Done, Failed, Stopped and Deferred may be started again (a later run, a
reload).
The machine is the only writer of the job's state as the status page shows
it (L{JobProgress.state} reads the machine), and the waiting states own
their timer: stopping a job that backs off cancels its wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IReactorTime

from imapmig.progress import JobProgress, JobState


class JobInputs(Protocol):
    """
    What can happen to a job.
    """

    def start(self) -> None:
        "The job begins (or begins again): it connects and lists its source."

    def connected(self) -> None:
        "The destination is logged in and prepared: messages flow."

    def backOff(self, reason: str, delay: float) -> None:
        """
        A transient failure (a lost connection, a busy server): wait
        C{delay} seconds (see L{waited}), then try again.
        """

    def pause(self, reason: str, delay: float) -> None:
        """
        The server refuses for a long while (over quota, bandwidth limit):
        wait C{delay} seconds (see L{waited}), showing why, then try again.
        """

    def defer(self, reason: str, until: float) -> None:
        """
        The job cannot go on before C{until} (a time of the clock), and its
        run ends meanwhile: show it paused, why and until when.
        """

    def waited(self) -> Deferred[None]:
        """
        While backing off or paused: fires when it is time to retry; fails
        with L{CancelledError} if the job is stopped meanwhile.
        """

    def retry(self) -> None:
        "The wait is over: connect again."

    def stop(self) -> None:
        "Take no new messages; end once the replies in flight are recorded."

    def stopped(self) -> None:
        "A stopping job has recorded what was in flight and logged out."

    def succeed(self) -> None:
        "Every message was migrated or recorded as failed with its reason."

    def fail(self, reason: str) -> None:
        "The job cannot go on: a permanent error, or too many retries."

    def state(self) -> JobState:
        "Where the job is, as the status page shows it."


@dataclass
class _Core:
    progress: JobProgress
    clock: IReactorTime


class _Wait:
    """
    The timer of a waiting state, and whoever waits for it.
    """

    def __init__(self, clock: IReactorTime, delay: float) -> None:
        self._waiters: list[Deferred[None]] = []
        self._over = False
        self._timer = clock.callLater(delay, self._end, None)

    def waited(self) -> Deferred[None]:
        """
        Fires when the wait is over; fails with L{CancelledError} if it is
        cancelled first.
        """
        if self._over:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._waiters.append(waiter)
        return waiter

    def cancel(self) -> None:
        """
        End the wait early: whoever waits gets L{CancelledError}.
        """
        if self._timer.active():
            self._timer.cancel()
            self._end(CancelledError())

    def _end(self, error: CancelledError | None) -> None:
        self._over = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if error is None:
                waiter.callback(None)
            else:
                waiter.errback(error)


def _startWaiting(inputs: JobInputs, core: _Core, reason: str, delay: float) -> _Wait:
    """
    Enter BackingOff or Paused: start the timer, and show why and until
    when.
    """
    core.progress.waiting(reason, core.clock.seconds() + delay)
    return _Wait(core.clock, delay)


def _shows(shown: JobState) -> Callable[[JobInputs, _Core], JobState]:
    def state(inputs: JobInputs, core: _Core) -> JobState:
        return shown

    return state


def _showsWaiting(shown: JobState) -> Callable[[JobInputs, _Core, _Wait], JobState]:
    def state(inputs: JobInputs, core: _Core, wait: _Wait) -> JobState:
        return shown

    return state


def _buildLifecycle() -> Callable[[_Core], JobInputs]:
    machine = TypeMachineBuilder(JobInputs, _Core)
    queued = machine.state("Queued")
    connecting = machine.state("Connecting")
    running = machine.state("Running")
    backingOff = machine.state("BackingOff", _startWaiting)
    paused = machine.state("Paused", _startWaiting)
    deferred = machine.state("Deferred")
    stopping = machine.state("Stopping")
    stopped = machine.state("Stopped")
    done = machine.state("Done")
    failed = machine.state("Failed")

    for state, shown in (
        (queued, JobState.QUEUED),
        (connecting, JobState.CONNECTING),
        (running, JobState.RUNNING),
        (deferred, JobState.PAUSED),
        (stopping, JobState.STOPPING),
        (stopped, JobState.STOPPED),
        (done, JobState.DONE),
        (failed, JobState.FAILED),
    ):
        state.upon(JobInputs.state).loop()(_shows(shown))
    backingOff.upon(JobInputs.state).loop()(_showsWaiting(JobState.BACKING_OFF))
    paused.upon(JobInputs.state).loop()(_showsWaiting(JobState.PAUSED))

    @queued.upon(JobInputs.start).to(connecting)
    @done.upon(JobInputs.start).to(connecting)
    @failed.upon(JobInputs.start).to(connecting)
    @stopped.upon(JobInputs.start).to(connecting)
    @deferred.upon(JobInputs.start).to(connecting)
    def begin(inputs: JobInputs, core: _Core) -> None:
        core.progress.started()

    @connecting.upon(JobInputs.connected).to(running)
    def flowing(inputs: JobInputs, core: _Core) -> None:
        core.progress.waiting(None, None)

    @connecting.upon(JobInputs.backOff).to(backingOff)
    @running.upon(JobInputs.backOff).to(backingOff)
    @connecting.upon(JobInputs.pause).to(paused)
    @running.upon(JobInputs.pause).to(paused)
    def wait(inputs: JobInputs, core: _Core, reason: str, delay: float) -> None:
        # The new state's _Wait, built from the same arguments, holds the
        # timer: see waited.
        pass

    @connecting.upon(JobInputs.defer).to(deferred)
    @running.upon(JobInputs.defer).to(deferred)
    def deferUntil(inputs: JobInputs, core: _Core, reason: str, until: float) -> None:
        core.progress.waiting(reason, until)

    @backingOff.upon(JobInputs.waited).loop()
    @paused.upon(JobInputs.waited).loop()
    def timer(inputs: JobInputs, core: _Core, wait: _Wait) -> Deferred[None]:
        return wait.waited()

    @backingOff.upon(JobInputs.retry).to(connecting)
    @paused.upon(JobInputs.retry).to(connecting)
    def again(inputs: JobInputs, core: _Core, wait: _Wait) -> None:
        core.progress.waiting(None, None)

    @connecting.upon(JobInputs.stop).to(stopping)
    @running.upon(JobInputs.stop).to(stopping)
    def toStopping(inputs: JobInputs, core: _Core) -> None:
        pass

    @stopping.upon(JobInputs.connected).loop()
    def stillStopping(inputs: JobInputs, core: _Core) -> None:
        pass

    @queued.upon(JobInputs.stop).loop()
    @stopping.upon(JobInputs.stop).loop()
    @stopped.upon(JobInputs.stop).loop()
    @done.upon(JobInputs.stop).loop()
    @failed.upon(JobInputs.stop).loop()
    @deferred.upon(JobInputs.stop).loop()
    def alreadyStill(inputs: JobInputs, core: _Core) -> None:
        pass

    @backingOff.upon(JobInputs.stop).to(stopped)
    @paused.upon(JobInputs.stop).to(stopped)
    def cancelWait(inputs: JobInputs, core: _Core, wait: _Wait) -> None:
        core.progress.finished("stopped before the end")
        wait.cancel()

    @stopping.upon(JobInputs.stopped).to(stopped)
    def haveStopped(inputs: JobInputs, core: _Core) -> None:
        core.progress.finished("stopped before the end")

    @connecting.upon(JobInputs.succeed).to(done)
    @running.upon(JobInputs.succeed).to(done)
    def finish(inputs: JobInputs, core: _Core) -> None:
        core.progress.finished()

    @connecting.upon(JobInputs.fail).to(failed)
    @running.upon(JobInputs.fail).to(failed)
    @stopping.upon(JobInputs.fail).to(failed)
    def abandon(inputs: JobInputs, core: _Core, reason: str) -> None:
        core.progress.finished(reason)

    @backingOff.upon(JobInputs.fail).to(failed)
    @paused.upon(JobInputs.fail).to(failed)
    def abandonWaiting(inputs: JobInputs, core: _Core, wait: _Wait, reason: str) -> None:
        wait.cancel()
        core.progress.finished(reason)

    return machine.build()


_lifecycleFactory = _buildLifecycle()


def JobLifecycle(progress: JobProgress, clock: IReactorTime) -> JobInputs:
    """
    A job's lifecycle machine, starting Queued; C{progress} shows its state.

    @param clock: times the waits of BackingOff and Paused.
    """
    lifecycle = _lifecycleFactory(_Core(progress, clock))
    progress.showState(lifecycle.state)
    return lifecycle
