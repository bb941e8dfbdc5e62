# -*- test-case-name: tests.test_status_api -*-
"""
The one place the status resources read the progress model
(L{imapmig.progress}): L{ProgressView} gives a job's JSON document, its
sort and filter keys, its folders, and the run's summary.  Everything else
in L{imapmig.status} goes through it, so that a change of the model is
adapted here alone.

Issue 18's contract (C{JOB}, C{run}, C{totals}, C{throughput}) extends the
progress model in another branch; until it is merged, the keys that model
will provide are derived here from the counters that exist, each marked
C{MERGE:} with what replaces it.
"""

from __future__ import annotations

from typing import Callable, Sequence

from imapmig.progress import JobProgress, JobState, MigrationProgress

__all__ = ["SORT_NAMES", "ProgressView"]

# States in which a job has ended (by value: "cancelled" comes with the
# controls).
_ENDED = frozenset(
    state for state in JobState if state.value in ("done", "failed", "stopped", "cancelled")
)

SORT_NAMES = ("name", "state", "progress", "failed", "rate", "eta")
"""
What C{/status.json} sorts by (C{sort=}), besides C{order}, the
configuration's.
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
        if name == "name":
            return lambda job: (job.name.casefold(), job.name)
        if name == "state":
            return self.stateOf
        if name == "progress":
            return _percent
        if name == "failed":
            return lambda job: job.messagesFailed
        if name == "rate":
            return lambda job: _rate(job, now)
        if name == "eta":
            return lambda job: _eta(job, now)
        raise ValueError(name)

    def document(self, job: JobProgress) -> dict[str, object]:
        """
        The contract's C{JOB} document of C{job}.

        MERGE: C{job.snapshot()} once the progress slice makes it the
        contract's C{JOB}; the keys set below are then its own.
        """
        now = self.seconds()
        document = job.snapshot()
        counted = _counted(job)
        percent = _percent(job)
        document["counted"] = counted
        document["messages_total"] = job.messagesTotal if counted else None
        document["messages_pending"] = job.messagesPending if counted else None
        document["bytes_total"] = None
        document["bytes_sent"] = job.bytesDone
        document["percent"] = None if percent is None else round(percent, 1)
        document["average_messages_per_second"] = _averageRate(job, now)
        document["messages_per_second"] = _rate(job, now)
        document["eta_seconds"] = _eta(job, now)
        document["paused"] = job.state is JobState.PAUSED
        return document

    def folders(self, job: JobProgress) -> list[dict[str, object]]:
        """
        The contract's C{folders} of C{job}: each source folder's progress.

        MERGE: the progress slice's per-folder counters; none until then.
        """
        return []

    def excludedFolders(self, job: JobProgress) -> list[str]:
        """
        The names (levels joined with C{/}) of the source folders the job's
        folder rules leave out.

        MERGE: the progress slice's list of them (the listing knows them:
        L{imapmig.job.listing}); none until then.
        """
        return []

    def summary(self, jobs: Sequence[JobProgress]) -> dict[str, object]:
        """
        The contract's C{time}, C{run} (without C{verify}), C{totals} and
        C{throughput}, over C{jobs} (every job).  Reads a few counters per
        job, not a snapshot of each: it runs on every poll, over every job.

        MERGE: the progress slice's C{summary()}.
        """
        now = self.seconds()
        done = failed = present = migrated = octets = converted = noted = 0
        total = pending = counted = 0
        started: list[float] = []
        finished: list[float] = []
        rate = 0.0
        # Plain attribute reads and identity tests: this loop runs over
        # every job on every poll.
        for job in jobs:
            done += job.messagesDone
            failed += job.messagesFailed
            present += job.messagesAlreadyPresent
            migrated += job.messagesAlreadyMigrated
            octets += job.bytesDone
            converted += job.lineEndingsConverted
            noted += job.messagesWithNotes
            if job.foldersTotal > 0 or job.messagesTotal > 0:
                counted += 1
                total += job.messagesTotal
                pending += max(0, job.messagesTotal - job.messagesDone - job.messagesFailed)
            startedAt = job.startedAt
            if startedAt is not None:
                started.append(startedAt)
                finishedAt = job.finishedAt
                if finishedAt is not None:
                    finished.append(finishedAt)
                elif now > startedAt:
                    rate += (
                        job.messagesDone - job.messagesAlreadyMigrated
                        - job.messagesAlreadyPresent
                    ) / (now - startedAt)  # fmt: skip
        stateList = [job.state for job in jobs]
        states = {state.value: stateList.count(state) for state in JobState}
        ended = sum(states[state.value] for state in _ENDED)
        sums = {
            "messages_done": done, "messages_failed": failed,
            "messages_already_present": present, "messages_already_migrated": migrated,
            "bytes_done": octets, "line_endings_converted": converted,
            "messages_with_notes": noted,
        }  # fmt: skip
        startedAt = min(started) if started else None
        finishedAt = max(finished) if jobs and ended == len(jobs) and finished else None
        percent = None
        if counted:
            done = sums["messages_done"] + sums["messages_failed"]
            percent = round(min(100.0, 100.0 * done / total), 1) if total else 100.0
        totals: dict[str, object] = {
            "jobs": states,
            "jobs_total": len(jobs),
            "jobs_counted": counted,
            "messages_total": total,
            "messages_pending": pending,
            "bytes_total": 0,
            "percent_messages": percent,
            "percent_bytes": None,
            "messages_per_second": round(rate, 1),
            "bytes_per_second": 0.0,
            "eta_seconds": (
                round(pending / rate, 1) if rate and counted == len(jobs) else None
            ),
            **sums,
        }
        elapsed = None
        if startedAt is not None:
            elapsed = round((finishedAt if finishedAt is not None else now) - startedAt, 3)
        return {
            "time": now,
            "run": {"started_at": startedAt, "finished_at": finishedAt, "elapsed_seconds": elapsed},
            "totals": totals,
            "throughput": {"step_seconds": 10, "samples": []},
        }


def _counted(job: JobProgress) -> bool:
    """
    Whether the job's source is listed, so that its total is known.

    MERGE: the progress slice's C{counted} (census or the job's listing).
    """
    return job.foldersTotal > 0 or job.messagesTotal > 0


def _percent(job: JobProgress) -> float | None:
    """
    Messages done or failed over the total, 0 to 100; L{None} until
    counted.
    """
    if not _counted(job):
        return None
    if job.messagesTotal <= 0:
        return 100.0
    return min(100.0, 100.0 * (job.messagesDone + job.messagesFailed) / job.messagesTotal)


def _averageRate(job: JobProgress, now: float) -> float | None:
    """
    Messages migrated per second over the run.

    MERGE: the progress slice's C{average_messages_per_second}.
    """
    if job.startedAt is None:
        return None
    elapsed = (job.finishedAt if job.finishedAt is not None else now) - job.startedAt
    if elapsed <= 0:
        return None
    migrated = job.messagesDone - job.messagesAlreadyMigrated - job.messagesAlreadyPresent
    return round(migrated / elapsed, 1)


def _rate(job: JobProgress, now: float) -> float | None:
    """
    Messages per second now; L{None} unless the job is running.

    MERGE: the progress slice's current rate (a 60 s window); until then
    the run's average.
    """
    if job.startedAt is None or job.finishedAt is not None:
        return None
    return _averageRate(job, now)


def _eta(job: JobProgress, now: float) -> float | None:
    """
    Seconds left at the current rate; L{None} when not counted or not
    moving.

    MERGE: the progress slice's C{eta_seconds}.
    """
    rate = _rate(job, now)
    if not rate or not _counted(job):
        return None
    return round(job.messagesPending / rate, 1)
