# -*- test-case-name: tests.test_progress -*-
"""
The progress model: counters and states that jobs update and the status
resources read.  A leaf: it imports nothing else of imapmig.

    JobProgress        one job: counters, folders, current rate, ETA
    MigrationProgress  every job: totals, the run, the overall rate and
                       ETA, the throughput history
    ProgressSampler    the service that samples it every 10 s
"""

from imapmig.progress._job import (
    ENDED,
    FolderProgress,
    FolderState,
    JobProgress,
    JobState,
    Wait,
)
from imapmig.progress._migration import MigrationProgress
from imapmig.progress._rates import (
    HISTORY_SAMPLES,
    STEP_SECONDS,
    WINDOW_SECONDS,
    RateWindow,
    ThroughputHistory,
)
from imapmig.progress._sampler import ProgressSampler

__all__ = [
    "ENDED",
    "HISTORY_SAMPLES",
    "STEP_SECONDS",
    "WINDOW_SECONDS",
    "FolderProgress",
    "FolderState",
    "JobProgress",
    "JobState",
    "MigrationProgress",
    "ProgressSampler",
    "RateWindow",
    "ThroughputHistory",
    "Wait",
]
