# -*- test-case-name: tests.test_progress -*-
"""
The progress of every job together: totals, the run's start and finish,
the current overall rate and ETA, and the throughput history.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Callable, Iterable, Iterator, Sequence

from imapmig.progress._job import ENDED, HELD, JobProgress, JobState, _percent
from imapmig.progress._rates import (
    HISTORY_SAMPLES,
    STEP_SECONDS,
    WINDOW_SECONDS,
    RateWindow,
    ThroughputHistory,
)


_ENDED_VALUES = frozenset(state.value for state in ENDED)
_HELD_VALUES = frozenset(state.value for state in HELD)

_HELD_ORDER = (JobState.PAUSED, JobState.PAUSED_BY_SERVER, JobState.DEFERRED)

_KIND_OF = {
    **{state.value: "other" for state in JobState},
    **dict.fromkeys(_ENDED_VALUES, "ended"),
    **dict.fromkeys(_HELD_VALUES, "held"),
    # Holding one of the scheduler's slots and able to move: how many
    # such jobs there are is how many run at once.
    **dict.fromkeys(("connecting", "running", "backing_off"), "slot"),
    # Able to move once they get a slot.
    "waiting": "waiting",
    "queued": "queued",
}
"""
What each state of a job tells of what it can do (L{_Tally}), by its value.
"""

# The kinds _Tally sorts the jobs into, one list each.
_KINDS = frozenset(_KIND_OF.values())


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
        # The lifetime messages settled when the run started.
        self._messagesAtStart = 0
        # The mean current rate of the jobs that ran a whole window at the
        # last sample that had any: what a job runs at, for the time left.
        self._typicalRate: float | None = None
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
        self._messagesAtStart = self._messages
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
        # When every job sampled has ended, everything of this step moved
        # before the last of them ended: the step ends there, not diluted
        # by the idle time after (a 3 s run is not 10 s long).
        ended = self._endOfActivity()
        messages, octets = self._sampleJobs(now)
        self._messages += messages
        self._octets += octets
        self._window.add(now, self._messages, self._octets)
        last, self._lastSample = self._lastSample, now
        if last is None:
            return
        if ended is not None and last < ended < now:
            self._history.add(ended, messages / (ended - last), octets / (ended - last))
            self._history.add(now, 0.0, 0.0)
        elif now > last:
            elapsed = now - last
            self._history.add(now, messages / elapsed, octets / elapsed)

    def _sampleJobs(self, now: float) -> tuple[int, int]:
        """
        Sample the counters of the jobs that ran since the last sample into
        their windows, note the typical rate of a job, and sample no more
        the jobs ended more than a window ago.

        @return: the messages settled and octets sent since the last
            sample, every job sampled together.
        """
        messages = octets = 0
        typical: list[float] = []
        for name, job in list(self._active.items()):
            counts = job.lifetimeCounts()
            before = job.sampled
            messages += counts[0] - before[0]
            octets += counts[1] - before[1]
            job.sampled = counts
            window = job.window
            assert window is not None
            window.add(now, *counts)
            if _settledRate(job, now) is not None:
                typical.append(window.rate(now, *counts)[0])
            finishedAt = job.finishedAt
            if job.state in ENDED and (finishedAt is None or now - finishedAt >= WINDOW_SECONDS):
                window.keepLast()
                del self._active[name]
        if typical:
            self._typicalRate = sum(typical) / len(typical)
        return messages, octets

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
        messages, octets = self._unsampled()
        elapsed = finishedAt - last
        return [[finishedAt, round(messages / elapsed, 2), round(octets / elapsed, 1)]]

    @property
    def sampledJobs(self) -> int:
        """
        How many jobs the next L{sample} looks at.
        """
        return len(self._active)

    def _settled(self) -> tuple[int, int]:
        """
        The lifetime messages settled and octets sent, every job together,
        now (the sampled counts and what the jobs sampled did since).
        """
        messages, octets = self._unsampled()
        return self._messages + messages, self._octets + octets

    def _unsampled(self) -> tuple[int, int]:
        """
        The messages settled and octets sent since the last sample, every
        job sampled together.
        """
        messages = octets = 0
        for job in self._active.values():
            counts = job.lifetimeCounts()
            before = job.sampled
            messages += counts[0] - before[0]
            octets += counts[1] - before[1]
        return messages, octets

    def currentRate(self) -> tuple[float, float]:
        """
        Messages settled and octets sent per second, every job together,
        over the last minute.
        """
        return self._window.rate(self._seconds(), *self._settled())

    def _movingRate(self, now: float, held: Iterable[JobProgress]) -> tuple[float, float]:
        """
        The overall rate of the last minute less what the C{held} jobs
        (paused, deferred) did in it: the rate of the jobs that can move.
        """
        messages, octets = self.currentRate()
        for job in held:
            rates = job.currentRate(now)
            if rates is not None:
                messages -= rates[0]
                octets -= rates[1]
        return max(0.0, messages), max(0.0, octets)

    # Views

    def summary(self) -> dict[str, object]:
        """
        A JSON-ready view of everything but the jobs: the time, the run,
        the totals across jobs, and the throughput history.
        """
        now = self._seconds()
        tally = _Tally(list(self._jobs.values()))
        finishedAt = lastEnd = None
        if tally.ended == len(self._jobs):
            lastEnd = tally.finishedAt
            finishedAt = now if lastEnd is None else lastEnd
        totals = tally.totalsView(len(self._jobs))
        if finishedAt is None:
            totals.update(self._pace(now, tally))
        return {
            "time": now,
            "run": self._runView(now, finishedAt),
            "totals": totals,
            "throughput": {
                "step_seconds": self._history.step,
                "samples": self._history.samples() + self._finalStep(lastEnd),
            },
        }

    def _runView(self, now: float, finishedAt: float | None) -> dict[str, object]:
        """
        The run in L{summary}: when it started and finished (L{None}: not
        yet), how long it ran and at what average rate, and its verify.
        """
        elapsed = (now if finishedAt is None else finishedAt) - self.runStartedAt
        settled = self._settled()[0] - self._messagesAtStart
        return {
            "started_at": self.runStartedAt,
            "finished_at": finishedAt,
            "elapsed_seconds": round(elapsed, 3),
            "average_messages_per_second": round(settled / elapsed, 1) if elapsed > 0 else None,
            "verify": self.verifyResult,
        }

    def _pace(self, now: float, tally: _Tally) -> dict[str, object]:
        """
        The totals' rates, time left and hold in L{summary} while the run
        is not over (they are L{None} once it is): the rate of the jobs
        that can move, the time left once every one of them is counted,
        and why nothing moves if nothing can.
        """
        if tally.moving == 0:
            return {"messages_per_second": 0.0, "bytes_per_second": 0.0, "held": tally.heldView()}
        messages, octets = self._movingRate(now, tally.held)
        eta = None
        if tally.uncountedMoving == 0:
            eta = _timeLeft(now, tally.inSlot, tally.inLine, self._typicalRate)
        return {
            "messages_per_second": round(messages, 1),
            "bytes_per_second": round(octets, 1),
            "eta_seconds": eta,
        }

    def snapshot(self) -> dict[str, object]:
        """
        L{summary} and every job's L{JobProgress.snapshot}, in
        configuration order, under C{"jobs"}.
        """
        view = self.summary()
        view["jobs"] = [job.snapshot() for job in self._jobs.values()]
        return view


class _Tally:
    """
    The totals of every job, read in one pass, and the jobs the time left
    is estimated from.

    @ivar moving: how many jobs can move (in a slot or in line: L{_KIND_OF}).
    @ivar inSlot: the jobs holding a slot and able to move.
    @ivar inLine: the messages pending of each counted job waiting for a
        slot, those waiting for a grant (they had one) first, then the
        queued ones in configuration order.
    @ivar held: the jobs held (L{HELD}): paused, paused by the server,
        deferred.
    """

    def __init__(self, jobs: Sequence[JobProgress]) -> None:
        # Read once per job, for 10,000 jobs: the enum's value and hash
        # are Python-level descriptors, its _value_ a plain attribute.
        values = [job.state._value_ for job in jobs]
        self._count(jobs)
        self._sort(jobs, values)

    def _count(self, jobs: Sequence[JobProgress]) -> None:
        """
        Add the jobs' counters.
        """
        counted = total = done = failed = present = migrated = pending = 0
        bytesTotal = bytesDone = bytesFailed = bytesSent = converted = notes = 0
        for job in jobs:
            done += job.messagesDone
            failed += job.messagesFailed
            present += job.messagesAlreadyPresent
            migrated += job.messagesAlreadyMigrated
            bytesSent += job.bytesSent
            converted += job.lineEndingsConverted
            notes += job.messagesWithNotes
            if job.counted:
                counted += 1
                total += job.messagesTotal
                left = job.messagesTotal - job.messagesDone - job.messagesFailed
                if left > 0:
                    pending += left
                bytesTotal += job.bytesTotal or 0
                bytesDone += job.bytesDone
                bytesFailed += job.bytesFailed
        self.counted, self.total, self.done, self.failed = counted, total, done, failed
        self.present, self.migrated, self.pending = present, migrated, pending
        self.bytesTotal, self.bytesDone, self.bytesFailed = bytesTotal, bytesDone, bytesFailed
        self.bytesSent, self.converted, self.notes = bytesSent, converted, notes

    def _sort(self, jobs: Sequence[JobProgress], values: list[str]) -> None:
        """
        Count the jobs by state, and sort them by what they can do, each
        kind in configuration order (L{_KIND_OF}).
        """
        counts = Counter(values)
        self.states = {state.value: counts[state.value] for state in JobState}
        kinds: dict[str, list[JobProgress]] = {kind: [] for kind in _KINDS}
        add = {value: kinds[kind].append for value, kind in _KIND_OF.items()}
        for job, value in zip(jobs, values):
            add[value](job)
        ended = kinds["ended"]
        self.ended = len(ended)
        self.finishedAt = max(
            (job.finishedAt for job in ended if job.finishedAt is not None), default=None
        )
        self.held = kinds["held"]
        inSlot, waiting, queued = kinds["slot"], kinds["waiting"], kinds["queued"]
        self.moving = len(inSlot) + len(waiting) + len(queued)
        self.inSlot = [job for job in inSlot if job.counted]
        self.inLine = _pendingOf(waiting) + _pendingOf(queued)
        # Not counted yet: a time left without them would be wrong.
        self.uncountedMoving = self.moving - len(self.inSlot) - len(self.inLine)

    def totalsView(self, jobs: int) -> dict[str, object]:
        """
        The totals in L{MigrationProgress.summary} of the C{jobs} jobs,
        without rates, time left or hold (L{MigrationProgress._pace}).
        """
        counted = self.counted
        return {
            "jobs": self.states,
            "jobs_total": jobs,
            "jobs_counted": counted,
            "messages_total": self.total,
            "messages_done": self.done,
            "messages_failed": self.failed,
            "messages_already_present": self.present,
            "messages_already_migrated": self.migrated,
            "messages_pending": self.pending,
            "bytes_total": self.bytesTotal,
            "bytes_done": self.bytesDone,
            "bytes_sent": self.bytesSent,
            "bytes_failed": self.bytesFailed,
            "percent_messages": _percent(self.done + self.failed, self.total) if counted else None,
            # Failed messages are settled, in octets as in messages.
            "percent_bytes": (
                _percent(self.bytesDone + self.bytesFailed, self.bytesTotal) if counted else None
            ),
            "messages_per_second": None,
            "bytes_per_second": None,
            "eta_seconds": None,
            "held": None,
            "line_endings_converted": self.converted,
            "messages_with_notes": self.notes,
        }

    def heldView(self) -> dict[str, object]:
        """
        Why nothing can move: the jobs held by kind, and the earliest time
        one of them resumes by itself (L{None} if none will: paused by an
        admin).
        """
        until = [job.retryAt for job in self.held if job.retryAt is not None]
        return {
            "jobs": {state.value: self.states[state.value] for state in _HELD_ORDER},
            "until": min(until, default=None),
        }


def _pendingOf(jobs: list[JobProgress]) -> list[int]:
    """
    The messages pending of each of C{jobs} that is counted, in order.
    """
    return [
        left if (left := job.messagesTotal - job.messagesDone - job.messagesFailed) > 0 else 0
        for job in jobs
        if job.counted
    ]


def _settledRate(job: JobProgress, now: float) -> float | None:
    """
    C{job}'s current rate if it tells how fast the job runs: it is running
    and ran a whole window (a younger window holds its connecting and
    listing), and moved in it; else L{None}.
    """
    started = job.startedAt
    if job.state is not JobState.RUNNING or started is None or now - started < WINDOW_SECONDS:
        return None
    rates = job.currentRate(now)
    if rates is None or rates[0] <= 0:
        return None
    return rates[0]


def _timeLeft(
    now: float, inSlot: list[JobProgress], inLine: list[int], typical: float | None
) -> float | None:
    """
    Seconds until the jobs that can move are done, as the scheduler will
    run them: as many at once as hold a slot now; the jobs in a slot each
    at its own rate (L{_settledRate}), or at the typical rate of a job
    while its own does not tell yet; the jobs waiting, in order, each in
    the first slot to free up, at the typical rate.

    @param now: the time.
    @param inSlot: the jobs holding a slot (connecting, running, backing
        off).
    @param inLine: the messages pending of each job waiting for a slot,
        in the order they will get one.
    @param typical: the typical rate of a job: the mean settled rate of
        the jobs in a slot now, else of those at the last sample that had
        any (L{MigrationProgress.sample}), else the mean current rate of
        the running jobs.
    @return: L{None} without a rate to go by (nothing ran yet).
    """
    if not inLine and all(job.messagesPending == 0 for job in inSlot):
        return 0.0
    rates, typical = _jobRates(now, inSlot, typical)
    if typical <= 0 or not inSlot:
        return None
    slots = [
        _backingOff(job, now) + job.messagesPending / rates.get(job.name, typical)
        for job in inSlot
    ]
    return round(_lastToFinish(slots, inLine, typical), 1)


def _lastToFinish(slots: list[float], inLine: list[int], typical: float) -> float:
    """
    When the last job finishes: the jobs in C{inLine} (their messages
    pending), in order, each in the first of C{slots} to free up (the
    seconds until each is free), at C{typical} messages a second.
    """
    end = max(slots)
    heapq.heapify(slots)
    replace = heapq.heapreplace
    for pending in inLine:
        finish = slots[0] + pending / typical
        replace(slots, finish)
        if finish > end:
            end = finish
    return end


def _backingOff(job: JobProgress, now: float) -> float:
    """
    Seconds until C{job} tries again, if it is backing off; else 0.
    """
    if job.state is JobState.BACKING_OFF and job.retryAt is not None:
        return max(0.0, job.retryAt - now)
    return 0.0


def _jobRates(
    now: float, inSlot: list[JobProgress], typical: float | None
) -> tuple[dict[str, float], float]:
    """
    The settled rates (L{_settledRate}) of the jobs in a slot, by name,
    and the typical rate of a job (see L{_timeLeft}); 0 if none is known.
    """
    rates = {job.name: rate for job in inSlot if (rate := _settledRate(job, now)) is not None}
    if rates:
        return rates, sum(rates.values()) / len(rates)
    if typical is not None:
        return rates, typical
    return rates, _youngRate(now, inSlot)


def _youngRate(now: float, inSlot: list[JobProgress]) -> float:
    """
    The mean current rate of the running jobs of C{inSlot}, whose rates
    do not tell yet (L{_settledRate}); 0 if none has one.
    """
    young = [
        current[0]
        for job in inSlot
        if job.state is JobState.RUNNING and (current := job.currentRate(now)) is not None
    ]
    return sum(young) / len(young) if young else 0.0
