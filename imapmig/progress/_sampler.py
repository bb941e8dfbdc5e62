# -*- test-case-name: tests.test_progress -*-
"""
The service that samples the progress every step, for the current rates
and the throughput history.
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from imapmig.progress._migration import MigrationProgress


class ProgressSampler(Service):
    """
    Starts the run when started, then samples C{progress} every C{step}
    seconds of C{clock} until stopped (L{MigrationProgress.sample}).
    """

    name = "progress-sampler"

    def __init__(self, progress: MigrationProgress, clock: IReactorTime) -> None:
        self._progress = progress
        self._loop = LoopingCall(progress.sample)
        self._loop.clock = clock

    def startService(self) -> None:
        Service.startService(self)
        self._progress.startRun()
        self._loop.start(self._progress.step, now=False)

    def stopService(self) -> None:
        Service.stopService(self)
        if self._loop.running:
            self._loop.stop()
