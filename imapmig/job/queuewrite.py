# -*- test-case-name: tests.test_job_machine,tests.test_schedule_fleet -*-
"""
One write of a job's machine into a fleet's queue (L{QueueWrite}): the
admin's control a machine took, or a control of a job this daemon does not
hold.  Out of L{imapmig.job.machine}, which is at its module bound.

Its answer comes within L{CONTROL_ANSWER} seconds whatever the database
does, so that the control's HTTP request is answered (503 naming the
database while it is unreachable):

    - a write that must not be lost (a held job's machine has moved) is
      tried again every L{WRITE_RETRY} seconds in the background, and its
      answer says so;
    - a write the admin can send again (a job held elsewhere or by none)
      is tried once: refused, it is not tried again.
"""

from __future__ import annotations

from typing import Any, Callable, cast

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import ControlRefused, ImapmigError, QueueUnavailable, UnknownJob
from imapmig.queue import QueueState

__all__ = ["CONTROL_ANSWER", "WRITE_RETRY", "QueueWrite"]

log = Logger()

WRITE_RETRY = 5.0
"""
Seconds before a write into a fleet's queue that could not reach it is
tried again (a held job's).
"""

CONTROL_ANSWER = 5.0
"""
Seconds within which a write answers: the queue's answer, or that the
database is unreachable.
"""


class QueueWrite:
    """
    One write of job C{job} into a fleet's queue (see the module's
    docstring).
    """

    def __init__(
        self,
        job: str,
        queue: object,
        clock: IReactorTime,
        write: Callable[[Any], Callable[[str], object]],
        retry: bool = True,
    ) -> None:
        """
        @param write: picks the queue's method that writes.
        @param retry: whether a write that cannot reach the queue is
            tried again until it does (its answer says it was queued).
        """
        self._job = job
        self._queue = queue
        self._clock = clock
        self._write = write
        self._retry = retry
        self._answer: Deferred[QueueState | ImapmigError | None] = Deferred()
        self._late: IDelayedCall | None = None
        # Fired once the write is over: written, refused, or given up.
        self._over = False
        self._landing: list[Deferred[None]] = []

    def attempt(self) -> Deferred[QueueState | ImapmigError | None]:
        """
        Write, and answer (the job's state in the queue, its refusal, or
        L{QueueUnavailable}) within L{CONTROL_ANSWER} seconds.
        """
        if self._late is None and not self._answer.called:
            self._late = self._clock.callLater(CONTROL_ANSWER, self._unanswered)
        writing: Deferred[QueueState | None] = self._write(self._queue)(self._job)  # type: ignore[assignment]
        writing.addCallbacks(self._wrote, self._failed)
        return self._answer

    def landed(self) -> Deferred[None]:
        """
        Fires once the write is over (written, refused, or not to be tried
        again), however long the queue was unreachable: a job stopped by
        a control finishes its claim after it, so that the finish finds
        the control in the row (docs/fleet.md "Controls during a database outage").
        """
        if self._over:
            return succeed(None)
        landing: Deferred[None] = Deferred(lambda d: self._landing.remove(d))
        self._landing.append(landing)
        return landing

    def _land(self) -> None:
        self._over = True
        landing, self._landing = self._landing, []
        for each in landing:
            each.callback(None)

    def _wrote(self, answer: QueueState | None) -> None:
        self._land()
        self._tell(answer)

    def _tell(self, answer: QueueState | ImapmigError | None) -> None:
        if self._late is not None and self._late.active():
            self._late.cancel()
        if not self._answer.called:
            self._answer.callback(answer)

    def _unanswered(self) -> None:
        self._tell(self._unavailable(f"the queue did not answer within {CONTROL_ANSWER:.0f} s"))

    def _unavailable(self, why: str) -> QueueUnavailable:
        if self._retry:
            return QueueUnavailable(
                f"{why}: the job took the control here; its row in the queue is written"
                f" when the database answers again (tried every {WRITE_RETRY:.0f} s)"
            )
        return QueueUnavailable(
            f"{why}: the control was not applied; send it again once the database answers"
        )

    def _failed(self, failure: Failure) -> None:
        why = failure.getErrorMessage()
        if failure.check(UnknownJob, ControlRefused):
            log.warn("Job {job}: the queue refuses its machine's move: {why}", job=self._job, why=why)
            self._land()
            self._tell(cast(ImapmigError, failure.value))
        elif failure.check(QueueUnavailable):
            if not self._retry:
                self._land()
                self._tell(self._unavailable(why))
                return
            if not self._answer.called:
                log.warn(
                    "Job {job}: the queue cannot be reached to write its machine's move"
                    " ({why}); trying again every {delay:.0f} s",
                    job=self._job,
                    why=why,
                    delay=WRITE_RETRY,
                )
            self._tell(self._unavailable(why))
            self._clock.callLater(WRITE_RETRY, self.attempt)
        else:
            log.failure("Job {job}: writing its machine's move into the queue", failure, job=self._job)
            self._land()
            self._tell(None)
