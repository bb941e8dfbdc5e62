# -*- test-case-name: tests.test_progress -*-
"""
The progress of every job together: totals, the run's start and finish,
the current overall rate and ETA, and the throughput history.
"""

from __future__ import annotations

from typing import Callable, Iterator

from imapmig.progress._job import ENDED, JobProgress, JobState, _eta, _percent
from imapmig.progress._rates import (
    HISTORY_SAMPLES,
    STEP_SECONDS,
    WINDOW_SECONDS,
    RateWindow,
    ThroughputHistory,
)


_ENDED_VALUES = frozenset(state.value for state in ENDED)


class MigrationProgress:
    """
    The progress of every configured job, in configuration order.

    Rates come from samples (L{sample}, every C{step} seconds, driven by
    L{imapmig.progress.ProgressSampler}) of the jobs that ran since the
    last one: sampling costs nothing for the jobs still queued or long
    ended, however many there are.

    @ivar runStartedAt: when the run (the daemon) started.
    @ivar verifyResult: the verify result to show with the run, if a
        verify was run (C{{"time", "ok", "jobs", "differences", "path"}}).
    """

    def __init__(
        self,
        seconds: Callable[[], float],
        step: float = STEP_SECONDS,
        historySize: int = HISTORY_SAMPLES,
    ) -> None:
        """
        @param seconds: the clock.
        @param step: the sampling step, in seconds.
        @param historySize: how many steps of throughput to keep.
        """
        self._seconds = seconds
        self._jobs: dict[str, JobProgress] = {}
        # The jobs sampled: started since, and not ended for a window.
        self._active: dict[str, JobProgress] = {}
        self._history = ThroughputHistory(step, historySize)
        self._window = RateWindow()
        # Lifetime counts of every job together at the last sample.
        self._messages = 0
        self._octets = 0
        self._lastSample: float | None = None
        # The overall rate over the minute before the jobs ended, and when.
        self._endRate: tuple[float, tuple[float, float]] | None = None
        self.verifyResult: dict[str, object] | None = None
        self.runStartedAt = seconds()
        self._window.add(self.runStartedAt, 0, 0)

    def startRun(self) -> None:
        """
        The daemon starts: the run starts now.
        """
        now = self._seconds()
        self.runStartedAt = now
        self._lastSample = now
        # The rate's window starts with the run, as its throughput does.
        self._window = RateWindow()
        self._window.add(now, self._messages, self._octets)

    @property
    def step(self) -> float:
        """
        The sampling step, in seconds (that of the throughput history).
        """
        return self._history.step

    def addJob(self, name: str) -> JobProgress:
        """
        Register a job (queued) and return its progress.
        """
        progress = JobProgress(name, self._seconds, self._activate)
        self._jobs[name] = progress
        return progress

    def removeJob(self, name: str) -> None:
        """
        Forget the job called C{name} (a reload removed it from the
        configuration): it leaves the totals and the views.  What it
        migrated stays counted in the run's throughput history and overall
        rate.

        @raise KeyError: no such job.
        """
        job = self._jobs.pop(name)
        if self._active.pop(name, None) is not None:
            # Sampled once more, so that the overall counts keep what it
            # did since the last sample.
            counts = job.lifetimeCounts()
            self._messages += counts[0] - job.sampled[0]
            self._octets += counts[1] - job.sampled[1]

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def _activate(self, job: JobProgress) -> None:
        self._active[job.name] = job

    def __iter__(self) -> Iterator[JobProgress]:
        return iter(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def job(self, name: str) -> JobProgress:
        """
        The progress of the job called C{name}.

        @raise KeyError: no such job.
        """
        return self._jobs[name]

    # Sampling

    def sample(self) -> None:
        """
        Sample the counters of the jobs that ran since the last sample:
        their current rates' windows, the overall window, and one step of
        the throughput history.  A job ended more than a window ago is
        sampled no more.
        """
        now = self._seconds()
        messages = octets = 0
        # When every job sampled has ended, everything of this step moved
        # before the last of them ended: the step ends there, not diluted
        # by the idle time after (a 3 s run is not 10 s long).
        ended = self._endOfActivity()
        for name, job in list(self._active.items()):
            counts = job.lifetimeCounts()
            before = job.sampled
            messages += counts[0] - before[0]
            octets += counts[1] - before[1]
            job.sampled = counts
            window = job.window
            assert window is not None
            window.add(now, *counts)
            finishedAt = job.finishedAt
            if job.state in ENDED and (finishedAt is None or now - finishedAt >= WINDOW_SECONDS):
                window.keepLast()
                del self._active[name]
        self._messages += messages
        self._octets += octets
        if ended is not None and ended < now:
            # While the window still reaches back a minute before the end.
            self._endRate = (ended, self._window.rate(ended, self._messages, self._octets))
        self._window.add(now, self._messages, self._octets)
        last, self._lastSample = self._lastSample, now
        if last is not None and ended is not None and last < ended < now:
            self._history.add(ended, messages / (ended - last), octets / (ended - last))
            self._history.add(now, 0.0, 0.0)
        elif last is not None and now > last:
            elapsed = now - last
            self._history.add(now, messages / elapsed, octets / elapsed)

    def _endOfActivity(self) -> float | None:
        """
        When the last of the jobs sampled ended, if every one of them has
        ended; L{None} if any has not (or none is sampled).
        """
        end: float | None = None
        for job in self._active.values():
            finishedAt = job.finishedAt
            if job.state not in ENDED or finishedAt is None:
                return None
            if end is None or finishedAt > end:
                end = finishedAt
        return end

    def _finalStep(self, finishedAt: float | None) -> list[list[float]]:
        """
        The throughput step from the last sample to the run's end, if the
        run ended since (as the next L{sample} will record it), so that
        a finished run's chart is whole at once.

        @param finishedAt: when the last job ended, if every job has.
        """
        last = self._lastSample
        if finishedAt is None or last is None or not last < finishedAt:
            return []
        messages = octets = 0
        for job in self._active.values():
            counts = job.lifetimeCounts()
            messages += counts[0] - job.sampled[0]
            octets += counts[1] - job.sampled[1]
        elapsed = finishedAt - last
        return [[finishedAt, round(messages / elapsed, 2), round(octets / elapsed, 1)]]

    @property
    def sampledJobs(self) -> int:
        """
        How many jobs the next L{sample} looks at.
        """
        return len(self._active)

    def currentRate(self) -> tuple[float, float]:
        """
        Messages settled and octets sent per second, every job together,
        over the last minute.
        """
        messages, octets = self._messages, self._octets
        for job in self._active.values():
            counts = job.lifetimeCounts()
            before = job.sampled
            messages += counts[0] - before[0]
            octets += counts[1] - before[1]
        return self._window.rate(self._seconds(), messages, octets)

    def _rateAtEnd(self, end: float) -> tuple[float, float]:
        """
        The overall rate over the minute before C{end}, when every job
        ended: what a finished run shows (and its throughput chart ends
        with), rather than a rate falling as idle time passes.
        """
        if self._endRate is None or self._endRate[0] != end:
            messages, octets = self._messages, self._octets
            for job in self._active.values():
                counts = job.lifetimeCounts()
                messages += counts[0] - job.sampled[0]
                octets += counts[1] - job.sampled[1]
            self._endRate = (end, self._window.rate(end, messages, octets))
        return self._endRate[1]

    def _slowestRunningJob(self, now: float) -> float | None:
        """
        The longest time left of the jobs sampled now (L{sample}) that
        have not ended, at each one's own current rate; L{None} if none is
        known.
        """
        slowest: float | None = None
        for job in self._active.values():
            if not job.counted or job.state in ENDED:
                continue
            rates = job.currentRate(now)
            left = job.messagesTotal - job.messagesDone - job.messagesFailed
            if rates is None or left <= 0:
                continue
            eta = _eta(left, rates[0], JobState.RUNNING)
            if eta is not None and (slowest is None or eta > slowest):
                slowest = eta
        return slowest

    # Views

    def summary(self) -> dict[str, object]:
        """
        A JSON-ready view of everything but the jobs: the time, the run,
        the totals across jobs, and the throughput history.
        """
        now = self._seconds()
        states: dict[str, int] = {state.value: 0 for state in JobState}
        counted = 0
        total = done = failed = present = migrated = pending = remaining = 0
        bytesTotal = bytesDone = bytesFailed = bytesSent = converted = notes = 0
        ended = uncountedLive = 0
        finishedAt: float | None = None
        # Read once per job, for 10,000 jobs: the enum's value and hash
        # are Python-level descriptors, its _value_ a plain attribute.
        endedValues = _ENDED_VALUES
        for job in self._jobs.values():
            value = job.state._value_
            states[value] += 1
            done += job.messagesDone
            failed += job.messagesFailed
            present += job.messagesAlreadyPresent
            migrated += job.messagesAlreadyMigrated
            bytesSent += job.bytesSent
            converted += job.lineEndingsConverted
            notes += job.messagesWithNotes
            isEnded = value in endedValues
            if isEnded:
                ended += 1
                jobFinished = job.finishedAt
                if jobFinished is not None and (finishedAt is None or jobFinished > finishedAt):
                    finishedAt = jobFinished
            if not job.counted and not isEnded:
                # An ended job never counted (it failed before listing, or
                # was cancelled) will not be: it holds back no ETA.
                uncountedLive += 1
            if job.counted:
                counted += 1
                total += job.messagesTotal
                left = job.messagesTotal - job.messagesDone - job.messagesFailed
                if left > 0:
                    pending += left
                    if not isEnded:
                        remaining += left
                bytesTotal += job.bytesTotal or 0
                bytesDone += job.bytesDone
                bytesFailed += job.bytesFailed
        jobs = len(self._jobs)
        lastEnd = finishedAt
        if ended < jobs:
            finishedAt = lastEnd = None
        elif finishedAt is None:
            finishedAt = now
        if lastEnd is None:
            messagesRate, octetsRate = self.currentRate()
        else:
            messagesRate, octetsRate = self._rateAtEnd(lastEnd)
        eta = None
        if uncountedLive == 0:
            eta = _eta(remaining, messagesRate, JobState.RUNNING)
            slowest = self._slowestRunningJob(now)
            if eta is not None and slowest is not None and slowest > eta:
                # Each job has its own limits (a throttled account): the
                # run cannot end before its slowest job does.
                eta = slowest
        return {
            "time": now,
            "run": {
                "started_at": self.runStartedAt,
                "finished_at": finishedAt,
                "elapsed_seconds": round(
                    (now if finishedAt is None else finishedAt) - self.runStartedAt, 3
                ),
                "verify": self.verifyResult,
            },
            "totals": {
                "jobs": states,
                "jobs_total": jobs,
                "jobs_counted": counted,
                "messages_total": total,
                "messages_done": done,
                "messages_failed": failed,
                "messages_already_present": present,
                "messages_already_migrated": migrated,
                "messages_pending": pending,
                "bytes_total": bytesTotal,
                "bytes_done": bytesDone,
                "bytes_sent": bytesSent,
                "bytes_failed": bytesFailed,
                "percent_messages": _percent(done + failed, total) if counted else None,
                # Failed messages are settled, in octets as in messages.
                "percent_bytes": _percent(bytesDone + bytesFailed, bytesTotal) if counted else None,
                "messages_per_second": round(messagesRate, 1),
                "bytes_per_second": round(octetsRate, 1),
                "eta_seconds": eta,
                "line_endings_converted": converted,
                "messages_with_notes": notes,
            },
            "throughput": {
                "step_seconds": self._history.step,
                "samples": self._history.samples() + self._finalStep(lastEnd),
            },
        }

    def snapshot(self) -> dict[str, object]:
        """
        L{summary} and every job's L{JobProgress.snapshot}, in
        configuration order, under C{"jobs"}.
        """
        view = self.summary()
        view["jobs"] = [job.snapshot() for job in self._jobs.values()]
        return view
