# -*- test-case-name: tests.test_progress -*-
"""
The progress model: counters and states that jobs update and the status
resources read.  Updating it is a few attribute increments, cheap enough to
do once per message.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, Iterator


class JobState(Enum):
    """
    Where a job is in its life, as the status page shows it.
    """

    QUEUED = "queued"
    CONNECTING = "connecting"
    RUNNING = "running"
    BACKING_OFF = "backing_off"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


def _queued() -> JobState:
    return JobState.QUEUED


class JobProgress:
    """
    The live counters of one job.

    @ivar messagesTotal: messages in the source, all folders.
    @ivar messagesDone: of these, messages in the destination: appended by
        this run or recorded as appended by an earlier one.
    @ivar messagesAlreadyMigrated: of C{messagesDone}, those an earlier run
        appended (not sent again).
    @ivar messagesFailed: messages this run could not migrate, each recorded
        in the state store with its reason.
    @ivar messagesAlreadyPresent: of C{messagesDone}, those this run found
        already in the destination (copied by another tool or by hand,
        recognised by their identity) and did not append.
    @ivar lineEndingsConverted: messages this run appended with their bare
        LF line endings converted to CRLF (IMAP requires CRLF).
    @ivar messagesWithNotes: messages this run appended with something not
        carried over exactly (a keyword the destination refuses), each
        recorded in the state store with a note.
    @ivar foldersExcluded: source folders the job's folder rules leave out.
    @ivar bytesDone: octets appended by this run.
    @ivar error: why the job failed, when it did.
    @ivar waitingFor: why the job is backing off or paused, while it is.
    @ivar retryAt: when it tries again, while it is.
    @ivar reconnects: how many times this run connected again after a
        transient failure.
    @ivar pausedByAdmin: an admin paused the job (L{imapmig.schedule.controls}):
        it is not claimed, or is stopping, until resumed.
    """

    __slots__ = (
        "name",
        "_stateOf",
        "waitingFor",
        "retryAt",
        "reconnects",
        "pausedByAdmin",
        "messagesTotal",
        "messagesDone",
        "messagesAlreadyMigrated",
        "messagesFailed",
        "messagesAlreadyPresent",
        "lineEndingsConverted",
        "messagesWithNotes",
        "bytesDone",
        "foldersTotal",
        "foldersExcluded",
        "currentFolder",
        "error",
        "startedAt",
        "finishedAt",
        "_seconds",
    )

    def __init__(self, name: str, seconds: Callable[[], float]) -> None:
        self.name = name
        self._stateOf: Callable[[], JobState] = _queued
        self.waitingFor: str | None = None
        self.retryAt: float | None = None
        self.reconnects = 0
        self.pausedByAdmin = False
        self.messagesTotal = 0
        self.messagesDone = 0
        self.messagesAlreadyMigrated = 0
        self.messagesFailed = 0
        self.messagesAlreadyPresent = 0
        self.lineEndingsConverted = 0
        self.messagesWithNotes = 0
        self.bytesDone = 0
        self.foldersTotal = 0
        self.foldersExcluded = 0
        self.currentFolder: str | None = None
        self.error: str | None = None
        self.startedAt: float | None = None
        self.finishedAt: float | None = None
        self._seconds = seconds

    @property
    def state(self) -> JobState:
        """
        Where the job is: read from its lifecycle machine, the one owner of
        that state.
        """
        return self._stateOf()

    def showState(self, stateOf: Callable[[], JobState]) -> None:
        """
        Read the job's state from C{stateOf} (its lifecycle machine) from
        now on.
        """
        self._stateOf = stateOf

    def waiting(self, reason: str | None, until: float | None) -> None:
        """
        The job waits until C{until} (a time of the clock) because of
        C{reason}; L{None} for both when it no longer waits.
        """
        self.waitingFor = reason
        self.retryAt = until

    def started(self) -> None:
        """
        The job began running.
        """
        self.reconnects = 0
        self.waitingFor = None
        self.retryAt = None
        self.startedAt = self._seconds()
        self.finishedAt = None
        self.error = None
        self.messagesFailed = 0
        self.messagesAlreadyPresent = 0
        self.lineEndingsConverted = 0
        self.messagesWithNotes = 0
        self.bytesDone = 0

    def finished(self, error: str | None = None) -> None:
        """
        The job ended: done, or failed (or was stopped) because of C{error}.
        """
        self.error = error
        self.waitingFor = None
        self.retryAt = None
        self.finishedAt = self._seconds()
        self.currentFolder = None

    @property
    def messagesPending(self) -> int:
        """
        Messages neither in the destination nor recorded as failed.
        """
        return max(0, self.messagesTotal - self.messagesDone - self.messagesFailed)

    def snapshot(self) -> dict[str, object]:
        """
        A JSON-ready copy of the counters.
        """
        now = self._seconds()
        elapsed = None
        rate = None
        if self.startedAt is not None:
            elapsed = (self.finishedAt or now) - self.startedAt
            migrated = (
                self.messagesDone - self.messagesAlreadyMigrated - self.messagesAlreadyPresent
            )
            if elapsed > 0:
                rate = round(migrated / elapsed, 1)
        return {
            "name": self.name,
            "state": self.state.value,
            "messages_total": self.messagesTotal,
            "messages_done": self.messagesDone,
            "messages_already_migrated": self.messagesAlreadyMigrated,
            "messages_failed": self.messagesFailed,
            "messages_already_present": self.messagesAlreadyPresent,
            "line_endings_converted": self.lineEndingsConverted,
            "messages_with_notes": self.messagesWithNotes,
            "messages_pending": self.messagesPending,
            "bytes_done": self.bytesDone,
            "folders_total": self.foldersTotal,
            "folders_excluded": self.foldersExcluded,
            "current_folder": self.currentFolder,
            "error": self.error,
            "waiting_for": self.waitingFor,
            "retry_at": self.retryAt,
            "reconnects": self.reconnects,
            "paused": self.pausedByAdmin,
            "started_at": self.startedAt,
            "finished_at": self.finishedAt,
            "elapsed_seconds": None if elapsed is None else round(elapsed, 3),
            "messages_per_second": rate,
        }


_TOTALLED = (
    "messages_total",
    "messages_done",
    "messages_already_migrated",
    "messages_failed",
    "messages_already_present",
    "line_endings_converted",
    "messages_with_notes",
    "messages_pending",
    "bytes_done",
)


class MigrationProgress:
    """
    The progress of every configured job, in configuration order.
    """

    def __init__(self, seconds: Callable[[], float]) -> None:
        self._seconds = seconds
        self._jobs: dict[str, JobProgress] = {}

    def addJob(self, name: str) -> JobProgress:
        """
        Register a job (queued) and return its progress.
        """
        progress = JobProgress(name, self._seconds)
        self._jobs[name] = progress
        return progress

    def __iter__(self) -> Iterator[JobProgress]:
        return iter(self._jobs.values())

    def job(self, name: str) -> JobProgress:
        """
        The progress of the job called C{name}.

        @raise KeyError: no such job.
        """
        return self._jobs[name]

    def snapshot(self) -> dict[str, object]:
        """
        A JSON-ready view: every job, and totals across jobs.
        """
        jobs = [job.snapshot() for job in self._jobs.values()]
        totals: dict[str, object] = {
            key: sum(int(job[key]) for job in jobs)  # type: ignore[call-overload]
            for key in _TOTALLED
        }
        states: dict[str, int] = {state.value: 0 for state in JobState}
        for job in self._jobs.values():
            states[job.state.value] += 1
        totals["jobs"] = states
        return {"time": self._seconds(), "jobs": jobs, "totals": totals}
