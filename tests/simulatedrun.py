# -*- test-case-name: tests.test_progress_eta,tests.test_browser_eta -*-
"""
A run of jobs on a simulated clock, as the scheduler runs them, driving
the real L{MigrationProgress}: shared by the time-left test on the clock
alone (L{tests.test_progress_eta}) and the same run shown by the status
site in a real browser (L{tests.test_browser_eta}).  Moved here from
C{tests/test_progress_eta.py} so that both import one simulation.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from imapmig.progress import JobProgress, JobState, MigrationProgress

Sample = tuple[float, float, "float | None"]
"""
(time, per cent done, time left) of C{totals} at one sampling.
"""


class SimulatedRun:
    """
    A run of jobs on a L{Clock}: C{slots} jobs at once, taken in order,
    each connecting for C{connect} seconds, then settling C{rate} messages
    a second; the progress sampled every 10 s, as the sampler does.

    The jobs' states are set here, as their machines set them in the
    daemon (L{JobProgress.showState}).
    """

    def __init__(self, sizes: list[int], slots: int, rate: int, connect: int = 3) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.progress.startRun()
        self.states: dict[str, JobState] = {}
        self.jobs: list[JobProgress] = []
        for n, size in enumerate(sizes):
            job = self.progress.addJob(f"job{n:02d}")
            job.census(size, size * 1000, 1, [])
            self.show(job, JobState.QUEUED)
            self.jobs.append(job)
        self.slots = slots
        self.rate = rate
        self.connect = connect
        self.running: dict[str, float] = {}

    def show(self, job: JobProgress, state: JobState) -> None:
        """
        Put C{job} in C{state}.
        """
        self.states[job.name] = state
        job.showState(lambda: self.states[job.name])

    def fill(self) -> None:
        """
        Start queued jobs, in order, while a slot is free.
        """
        for job in self.jobs:
            if len(self.running) >= self.slots:
                return
            if self.states[job.name] is JobState.QUEUED:
                self.show(job, JobState.CONNECTING)
                job.started()
                self.running[job.name] = self.clock.seconds()

    def tick(self) -> None:
        """
        One second: each running job settles its messages, ends when none
        is left, and its slot goes to the next queued job.
        """
        self.clock.advance(1)
        now = self.clock.seconds()
        for job in self.jobs:
            if job.name not in self.running:
                continue
            if now - self.running[job.name] < self.connect:
                continue
            self.show(job, JobState.RUNNING)
            count = min(self.rate, job.messagesPending)
            job.messagesDone += count
            job.messagesSettled += count
            job.bytesSent += count * 1000
            job.bytesDone += count * 1000
            if job.messagesPending == 0:
                job.finished()
                self.show(job, JobState.DONE)
                del self.running[job.name]
        self.fill()

    def step(self) -> Sample | None:
        """
        One second (L{tick}); every 10 s the progress is sampled, as the
        sampler does, and the sample (time, per cent done, time left)
        returned.
        """
        self.tick()
        if self.clock.seconds() % 10 != 0:
            return None
        self.progress.sample()
        totals = self.progress.summary()["totals"]
        assert isinstance(totals, dict)
        return (self.clock.seconds(), totals["percent_messages"], totals["eta_seconds"])

    def run(self) -> list[Sample]:
        """
        Run to the end; the samples (time, per cent done, time left) taken
        every 10 s.
        """
        self.fill()
        seen: list[Sample] = []
        while self.running:
            sample = self.step()
            if sample is not None:
                seen.append(sample)
        return seen
