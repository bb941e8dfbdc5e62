# -*- test-case-name: tests.test_job_machine -*-
"""
What can happen to a job (L{JobInputs}): the inputs of its machine,
L{imapmig.job.machine}, grouped by who says them.

Apart from the machine, which re-exports it, so that the machine's module
holds its states and transitions within the size a module may have; the
inputs are also all that the job's run, the scheduler and the controls
need to know of it.
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred

from imapmig.progress import JobState


PAUSED_BY_ADMIN = "paused by the admin"
"""
What a job paused by an admin shows it waits for.
"""

CANCELLED_BY_ADMIN = "cancelled by the admin"
"""
The error a cancelled job shows, and is recorded with in the state store.
"""


class JobInputs(Protocol):
    """
    What can happen to a job, grouped by who says it.
    """

    # -- the scheduler -----------------------------------------------------
    def waitForGrant(self, reason: str) -> None:
        "Claimed, the job waits for a connection grant or a job slot."

    def start(self) -> None:
        "Granted, the job's run begins (or begins again): it connects."

    def requeue(self, cause: str, by: str | None) -> None:
        """
        The job is queued again: retry-failed (C{by} an admin), a reload,
        a deferred job due, a new run of an ended one.
        """

    # -- the run -----------------------------------------------------------
    def connected(self) -> None:
        "The destination is logged in and prepared: messages flow."

    def backOff(self, reason: str, delay: float) -> None:
        "A transient failure: wait C{delay} seconds (L{waited}), then retry."

    def holdByServer(self, reason: str, delay: float) -> None:
        """
        The server refuses for a long while (over quota, bandwidth limit):
        wait C{delay} seconds (L{waited}), then retry.
        """

    def waitForBudget(self, reason: str, delay: float) -> None:
        """
        A daily budget is used up: wait C{delay} seconds (L{waited}) in the
        run, until it is renewed, then retry.
        """

    def defer(self, reason: str, until: float) -> None:
        """
        A daily budget is used up: the run ends and the job waits until
        C{until} (a time of the clock) for the scheduler to start it again.
        """

    def waited(self) -> Deferred[None]:
        """
        While backing off, held by the server or waiting for a budget
        within the run: fires when it is time to
        retry; fails with L{CancelledError} if the wait ends otherwise.
        """

    def retry(self) -> None:
        "The wait is over: connect again."

    def succeed(self) -> None:
        "Every message is in the destination."

    def endWithFailures(self, failed: int) -> None:
        "The run ended with C{failed} messages recorded as failed."

    def fail(self, reason: str) -> None:
        "The job cannot go on: a permanent error, or too many retries."

    def stopped(self) -> None:
        "A stopping job has recorded what was in flight and logged out."

    # -- the admin's controls ----------------------------------------------
    def pause(self, by: str) -> None:
        "An admin pauses the job (a running one stops first)."

    def resume(self, by: str) -> None:
        "An admin resumes a paused job: it is queued again."

    def cancel(self, by: str) -> None:
        "An admin cancels the job (a running one stops first)."

    def retryFailed(self, by: str) -> None:
        """
        An admin asks the job's failed messages retried: an ended job is
        queued again, a claimed one runs again once its run ends.
        """

    def restorePause(self, by: str | None, since: float, across: str) -> None:
        """
        The admin's pause, kept in the state store, is put back across
        C{across} ("the restart", "the reload"): C{by} paused the job at
        C{since}.
        """

    def restoreCancel(self, by: str | None, across: str) -> None:
        """
        The admin's cancel, kept in the state store, is put back across
        C{across}: C{by} cancelled the job.
        """

    # -- the daemon ----------------------------------------------------------
    def stop(self) -> None:
        "The daemon stops: take no new messages, end once in-flight is recorded."

    def leaseLost(self, reason: str) -> None:
        """
        The claim of the job is no longer this daemon's (its lease ran out,
        or was taken over: C{reason}): a run stops abandoning what is in
        flight (nothing more recorded, its claim not finished), a wait
        ends at once; the job ends C{stopped}, cause C{lease lost}.
        """

    # -- what it is ------------------------------------------------------------
    def state(self) -> JobState:
        "Where the job is."
