# -*- test-case-name: tests.test_job_backoff -*-
"""
What a job's run does when one of its attempts ends early: fail at once (a
permanent error, or too many attempts in a row that migrated nothing), back
off before the next attempt (exponential, with jitter: L{RetryPolicy}; or
as long as a busy server asks), pause (a quota refusal; a used-up daily
budget, until its renewal) or end the run deferred; and the strikes
against the messages first in line when a connection failed, until one
has had too many and is recorded as failed.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from imapmig.errors import (
    CommandFailed,
    ConnectFailed,
    DailyLimitReached,
    ImapmigError,
    LeaseLost,
    QuotaExceeded,
    ServerBusy,
    TransientError,
)
from imapmig.imap.signals import classifyRefusal
from imapmig.job.attempt import RunStop
from imapmig.job.machine import JobInputs
from imapmig.job.retry import RetryPolicy
from imapmig.job.sides import JobSides
from imapmig.log.logfields import AccountName, withFields
from imapmig.progress import JobProgress, JobState
from imapmig.throttle import utcTime
from imapmig.state import IStateStore
from imapmig.units import plural

__all__ = ["RunRetries", "asRetryable"]

# These events were MigrationJob's before they moved here, and keep its
# namespace: log levels are set by namespace, and the journal's MESSAGE_ID
# of an event is made from its namespace and format.
log = Logger(namespace="imapmig.job.migration")


def asRetryable(error: BaseException) -> BaseException:
    """
    C{error}, or, for a command the server refused for now (C{NO
    [UNAVAILABLE]} to a SELECT, a throttling notice to a LIST), the
    L{TransientError} that says what the refusal means, as the APPEND
    pipeline reads its refusals (L{imapmig.imap.signals}).
    """
    if isinstance(error, CommandFailed):
        meant = classifyRefusal(error.status, error.text).error(error.command)
        if meant is not None:
            return meant
    return error


class RunRetries:
    """
    The retry decisions of one job, run after run: whether an attempt that
    ended early ends the run, how long the job waits before the next, and
    the strikes of the messages that were first in line when a connection
    failed.  It moves the job's machine to Failed, BackingOff, PausedByServer or
    Deferred, and out of the wait again (L{JobInputs}).

    @ivar deferredUntil: when the last run ended deferred (the job's
        C{defer}), until when (a time of the clock); else L{None}.
    @ivar overQuota: set when the destination answered that its mailbox is
        full (L{JobSides.destinationFull}): the reason every message left
        to copy in this run is recorded as failed with; else L{None}.
    """

    def __init__(
        self,
        job: str,
        destination: AccountName | None,
        store: IStateStore,
        progress: JobProgress,
        clock: IReactorTime,
        lifecycle: JobInputs,
        sides: JobSides,
        policy: RetryPolicy,
        jitter: Callable[[], float],
        defer: bool,
        stop: RunStop,
    ) -> None:
        """
        @param job: the job's name, for the state store and the log.
        @param destination: the destination account as logs name it
            (L{imapmig.log.logfields}), or L{None}.
        @param store: where the outcome of a run is recorded.
        @param progress: the job's counters (its reconnections).
        @param clock: what the waits are timed by.
        @param lifecycle: the job's state machine.
        @param sides: the job's throttles, told of a server's signals.
        @param policy: how transient failures are retried.
        @param jitter: the backoff's noise, 0 to 1 second.
        @param defer: when a daily budget pauses the job, end the run
            (L{deferredUntil}) instead of waiting in it.
        @param stop: the run's stop.
        """
        self._job = job
        self._destination = (
            "the destination account" if destination is None else destination.description
        )
        # Every line of the job's retries names its destination's server
        # and user as /metrics does (imapmig.log.logfields).
        self._log = withFields(log, {} if destination is None else destination.fields())
        self._store = store
        self._progress = progress
        self._clock = clock
        self._lifecycle = lifecycle
        self._sides = sides
        self._policy = policy
        self._delays = policy.delays(jitter)
        self._defer = defer
        self._stop = stop
        throttles = (sides.destination, sides.source)
        self._budgets = tuple(
            t.budget for t in throttles if t is not None and t.budget is not None
        )
        self.deferredUntil: float | None = None
        self.overQuota: str | None = None
        # Attempts in a row of this run that migrated nothing.
        self._fruitless = 0
        # Per message key, how many times it was first in line, not
        # stored, when a connection failed; and the last such failure.
        self._strikes: dict[tuple[str, str], int] = {}
        self._lastError = ""
        # Whether an attempt of this job connected (reached Running), and
        # whether a wrong endpoint was hinted at: once, at the first
        # failure of the job's first connection.
        self._connectedOnce = False
        self._hinted = False

    def startRun(self) -> None:
        """
        A run begins: no attempt counted, no strike, the destination's
        mailbox not known to be full, the run not deferred.
        """
        self.deferredUntil = None
        self.overQuota = None
        self._fruitless = 0
        self._strikes.clear()

    async def budgetUsedUp(self) -> DailyLimitReached | None:
        """
        A daily budget used up before the attempt (by an earlier run, as
        the store records, or by another job of the account): pause
        without connecting.
        """
        for budget in self._budgets:
            await budget.load()
            if budget.charged >= budget.limit:
                return budget.reached()
        return None

    def strike(self, folderKey: str, messageKey: str) -> str | None:
        """
        Count a strike against a message that was first in line, not
        stored, when a connection of this run failed.

        @return: the reason to record it as failed with, once it has been
            struck the policy's C{messageAttempts} times (it may be what
            makes the server drop the connection); else L{None}.
        """
        key = (folderKey, messageKey)
        strikes = self._strikes[key] = self._strikes.get(key, 0) + 1
        if strikes < self._policy.messageAttempts:
            return None
        return (
            f"not stored after {plural(strikes, 'attempt')}, each ended by a"
            f" failed connection; the last: {self._lastError}"
        )

    async def afterFailure(self, error: BaseException, progressed: bool) -> bool:
        """
        An attempt ended early with C{error}: fail the job (a permanent
        error, or too many attempts in a row that migrated nothing), or
        wait until it is time for the next attempt.

        @param progressed: whether the attempt settled any message.
        @return: whether to attempt again (C{False}: the job failed, was
            stopped while waiting, or its run ends deferred:
            L{deferredUntil}).
        """
        reason = str(error) or type(error).__name__
        error = asRetryable(error)
        self._connectedOnce = self._connectedOnce or self._lifecycle.state() is JobState.RUNNING
        if isinstance(error, ConnectFailed) and not self._connectedOnce:
            self._hintEndpoint(error)
        if not isinstance(error, TransientError):
            return await self._failed(reason)
        if isinstance(error, DailyLimitReached):
            # A day's budget used up is no failure: it is not
            # counted against the attempts.
            self._fruitless = 0
        else:
            self._fruitless = 1 if progressed else self._fruitless + 1
        if self._fruitless > self._policy.attempts:
            return await self._failed(
                f"gave up after {plural(self._policy.attempts, 'attempt')} in a row that"
                f" migrated nothing; the last: {reason}"
            )
        return await self._waitToRetry(error, reason)

    def _hintEndpoint(self, error: ConnectFailed) -> None:
        """
        The job's first connection could not be made: more often a wrong
        endpoint than a server down.  Say once which setting holds it,
        and how to try it without waiting for the backoff.
        """
        if self._hinted or error.setting is None:
            return
        self._hinted = True
        self._log.warn(
            "Job {job}: cannot connect ({why}); check {setting} in the configuration"
            " (`imapmig plan --config FILE` or `imapmig-daemon --config FILE"
            " --check-config --connect` tries it at once); retrying meanwhile",
            job=self._job,
            why=error.why,
            setting=error.setting,
        )

    async def recordOutcome(self, reason: str | None) -> None:
        """
        Record in the state store why this run failed, or (with L{None})
        that it completed, for C{imapmig report}.  A store that cannot
        record it is logged, and the run ends as it would have; one whose
        fence refuses the write raises L{LeaseLost}.
        """
        try:
            await self._store.recordJobFailure(self._job, reason)
        except LeaseLost:
            # Fenced out: the job's claim is lost (MigrationJob._loseClaim).
            raise
        except ImapmigError as e:
            self._log.error(
                "Job {job}: cannot record the job's outcome in the state store: {why}",
                job=self._job,
                why=str(e),
            )

    async def _failed(self, reason: str) -> bool:
        # The run's end line logs the reason, once (JobLog.ended).
        await self.recordOutcome(reason)
        self._lifecycle.fail(reason)
        return False

    async def _waitToRetry(self, error: BaseException, reason: str) -> bool:
        """
        Back off (or pause, when the server says so) before the next
        attempt.

        @return: whether to go on (C{False}: the job was stopped meanwhile,
            or its run ends deferred: L{deferredUntil}).
        """
        self._lastError = reason
        side = self._sides.sideOf(error)
        untilRenewal = None
        full = isinstance(error, QuotaExceeded) and await self._sides.destinationFull(error)
        if full:
            assert isinstance(error, QuotaExceeded)
            self._mailboxFull(error, reason)
        elif isinstance(error, QuotaExceeded) and side is not None:
            untilRenewal = await side.pauseFor(error)
            if self._stop.requested:
                self._lifecycle.stopped()
                return False
        if untilRenewal is not None and self._defer:
            self._deferRun(reason, untilRenewal)
            return False
        if untilRenewal is not None:
            self._pauseUntilRenewal(reason, untilRenewal)
        elif not full:
            self._backOff(error, reason)
        try:
            await self._lifecycle.waited()
        except CancelledError:
            # Stopped while waiting: the run's end line says so.
            if not self._stop.requested:
                # By a control that paused or cancelled the job's machine
                # before its scheduler stops the run: the run ends stopped
                # (not failed), once the transition that cancelled this
                # wait has returned (the scheduler asks the machine then).
                self._stop.requested = True
                await deferLater(self._clock, 0)
            return False
        self._progress.reconnects += 1
        self._lifecycle.retry()
        return True

    def _mailboxFull(self, error: QuotaExceeded, reason: str) -> None:
        """
        The destination's mailbox is full: the next attempt, at once,
        records what is left to copy as failed (L{overQuota}).
        """
        self.overQuota = f"destination over quota: {error.text or reason}"
        self._log.error(
            "Job {job}: the destination account {account} is over quota (its mailbox"
            " is full: {why}); the messages left to copy are recorded as failed",
            job=self._job,
            account=self._destination,
            why=error.text or reason,
        )
        # No wait: the next attempt records what is left as failed.
        self._lifecycle.backOff(reason, 0.0)

    def _deferRun(self, reason: str, untilRenewal: float) -> None:
        """
        A daily budget is used up and the job defers: its run ends, paused
        until the budget's renewal, C{untilRenewal} seconds from now.
        """
        self.deferredUntil = self._clock.seconds() + untilRenewal
        self._lifecycle.defer(f"daily budget: {reason}", self.deferredUntil)
        self._log.warn(
            "Job {job}: {why}; paused until {until}, its job slot and"
            " connections given back meanwhile",
            job=self._job,
            why=reason,
            until=utcTime(self.deferredUntil),
        )

    def _pauseUntilRenewal(self, reason: str, delay: float) -> None:
        """
        A daily budget is used up: pause until its renewal (the next UTC
        midnight), C{delay} seconds from now.
        """
        self._lifecycle.waitForBudget(reason, delay)
        self._log.warn(
            "Job {job}: {why}; paused until {until}",
            job=self._job,
            why=reason,
            until=utcTime(self._clock.seconds() + delay),
            delay=delay,
        )

    def _backOff(self, error: BaseException, reason: str) -> None:
        """
        Wait before the next attempt: the policy's pause after a quota
        refusal, as long as a busy server asks, or the backoff's next
        delay.
        """
        if isinstance(error, QuotaExceeded):
            delay = self._policy.pause
            self._lifecycle.holdByServer(reason, delay)
            what = "pausing"
        else:
            retryAfter = error.retryAfter if isinstance(error, ServerBusy) else None
            delay = retryAfter if retryAfter is not None else self._delays(self._fruitless - 1)
            self._lifecycle.backOff(reason, delay)
            self._progress.retrying(self._fruitless, self._policy.attempts)
            what = "connecting again"
        self._log.warn(
            "Job {job}: {why}; {what} in {delay:.1f} s, at {until} (attempt {attempt}"
            " of {attempts} without progress)",
            job=self._job,
            # Twisted's connection errors end with a full stop.
            why=reason.rstrip(". "),
            what=what,
            delay=delay,
            until=utcTime(self._clock.seconds() + delay),
            attempt=self._fruitless,
            attempts=self._policy.attempts,
        )
