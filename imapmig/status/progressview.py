# -*- test-case-name: tests.test_status_api -*-
"""
The one place the status resources read the progress model
(L{imapmig.progress}): L{ProgressView} gives a job's JSON document, its
sort and filter keys, its folders, and the run's summary.  Everything else
in L{imapmig.status} goes through it, so that a change of the model is
adapted here alone.
"""

from __future__ import annotations

from typing import Callable, Sequence

from imapmig.progress import ENDED, JobProgress, JobState, MigrationProgress
from imapmig.status.redact import withoutPaths

__all__ = ["SORT_NAMES", "ProgressView"]

SORT_NAMES = ("attention", "name", "state", "progress", "failed", "rate", "eta")
"""
What C{/status.json} sorts by (C{sort=}), besides C{order}, the
configuration's.
"""

_ATTENTION = {
    JobState.FAILED: 0,
    JobState.BACKING_OFF: 2,
    JobState.PAUSED: 2,
    JobState.PAUSED_BY_SERVER: 2,
    JobState.DEFERRED: 2,
    JobState.CONNECTING: 3,
    JobState.RUNNING: 3,
    JobState.STOPPING: 3,
    JobState.WAITING: 3,
    JobState.DONE_WITH_FAILURES: 1,
}
"""
The rank of each state in C{sort=attention} (others: 4); a job with
failed messages, in any other state, ranks 1.
"""


class ProgressView:
    """
    What the status resources read of a L{MigrationProgress}.
    """

    def __init__(self, progress: MigrationProgress, seconds: Callable[[], float]) -> None:
        """
        @param progress: the model.
        @param seconds: its clock (the reactor's).
        """
        self._progress = progress
        self.seconds = seconds

    def jobs(self) -> list[JobProgress]:
        """
        Every job, in configuration order.
        """
        return list(self._progress)

    def job(self, name: str) -> JobProgress | None:
        """
        The job called C{name}, or L{None}.
        """
        try:
            return self._progress.job(name)
        except KeyError:
            return None

    @staticmethod
    def stateNames() -> frozenset[str]:
        """
        Every job state's value, as C{state=} accepts them.
        """
        return frozenset(state.value for state in JobState)

    @staticmethod
    def stateOf(job: JobProgress) -> str:
        """
        The job's state's value.
        """
        return job.state.value

    @staticmethod
    def nameOf(job: JobProgress) -> str:
        """
        The job's name.
        """
        return job.name

    @staticmethod
    def hasErrors(job: JobProgress) -> bool:
        """
        Whether the job failed or has failed messages (C{errors=1}).
        """
        return job.error is not None or job.messagesFailed > 0

    def sortKey(self, name: str) -> Callable[[JobProgress], object | None]:
        """
        The key of the sort C{name} (one of L{SORT_NAMES}): a function of a
        job, L{None} for a job without a value (sorted last either way).
        """
        now = self.seconds()
        keys: dict[str, Callable[[JobProgress], object | None]] = {
            "attention": _attention,
            "name": lambda job: (job.name.casefold(), job.name),
            "state": self.stateOf,
            "progress": _percent,
            "failed": lambda job: job.messagesFailed,
            "rate": lambda job: _rate(job, now),
            "eta": lambda job: _eta(job, now),
        }
        if name not in keys:
            raise ValueError(name)
        return keys[name]

    def document(self, job: JobProgress) -> dict[str, object]:
        """
        The contract's C{JOB} document of C{job}; its C{error} and
        C{waiting_for} without filesystem paths (L{withoutPaths}: the page
        is unauthenticated; the log has them).
        """
        document = job.snapshot()
        for field in ("error", "waiting_for"):
            text = document.get(field)
            if isinstance(text, str):
                document[field] = withoutPaths(text)
        return document

    def folders(self, job: JobProgress) -> list[dict[str, object]]:
        """
        The contract's C{folders} of C{job}: each source folder's progress.
        """
        return job.folderSnapshots()

    def folderNames(self, job: JobProgress) -> dict[str, str]:
        """
        C{job}'s folder names by key, as its listing found them (none
        before it lists its source).
        """
        return {key: folder.folder for key, folder in job.folders.items()}

    def excludedFolders(self, job: JobProgress) -> list[str]:
        """
        The names (levels joined with C{/}) of the source folders the job's
        folder rules leave out.
        """
        return list(job.excludedFolders)

    def summary(self, jobs: Sequence[JobProgress]) -> dict[str, object]:
        """
        The contract's C{time}, C{run}, C{totals} and C{throughput}.
        """
        return self._progress.summary()


def _attention(job: JobProgress) -> int:
    """
    What an admin must see first (C{sort=attention}): 0 failed jobs, 1
    jobs with failed messages, 2 jobs waiting to retry, paused or
    deferred, 3 jobs running or waiting for a grant, 4 the rest (queued,
    done, stopped, cancelled).
    """
    rank = _ATTENTION.get(job.state, 4)
    if rank and job.messagesFailed > 0:
        return 1
    return rank


def _percent(job: JobProgress) -> float | None:
    """
    Messages done or failed over the total, 0 to 100; L{None} until
    counted.
    """
    if not job.counted:
        return None
    if job.messagesTotal <= 0:
        return 100.0
    return min(100.0, 100.0 * (job.messagesDone + job.messagesFailed) / job.messagesTotal)


def _rate(job: JobProgress, now: float) -> float | None:
    """
    Messages per second now (the job's 60 s window); L{None} unless the
    job is running.
    """
    if job.state in ENDED:
        return None
    rates = job.currentRate(now)
    return None if rates is None else rates[0]


def _eta(job: JobProgress, now: float) -> float | None:
    """
    Seconds left at the current rate; L{None} when not counted or not
    moving.
    """
    rate = _rate(job, now)
    if not rate or not job.counted:
        return None
    return job.messagesPending / rate
