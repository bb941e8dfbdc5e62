# -*- test-case-name: tests.test_progress -*-
"""
Rates from cumulative counters: a moving window (the current rate), and
a bounded history of the throughput in fixed steps.
"""

from __future__ import annotations

from collections import deque

WINDOW_SECONDS = 60.0
"""
The span of the current rate: the rate shown is over the last 60 to 70
seconds (the window's oldest sample is the last one at least this old).
"""

STEP_SECONDS = 10.0
"""
How often the sampler samples the counters, and the step of the
throughput history.
"""

HISTORY_SAMPLES = 360
"""
How many steps the throughput history keeps: one hour of 10 s steps.
"""


class RateWindow:
    """
    The current rate of two cumulative counters (messages and octets),
    over a moving window of samples.

    Samples are cumulative counts at a time; the rate at C{now} is the
    counts' growth since the latest sample at least C{span} seconds old
    (the oldest kept, where none is that old), over the time since.
    At most C{span / step + 2} samples are kept.
    """

    __slots__ = ("_span", "_samples")

    def __init__(self, span: float = WINDOW_SECONDS) -> None:
        self._span = span
        self._samples: deque[tuple[float, int, int]] = deque()

    def add(self, when: float, messages: int, octets: int) -> None:
        """
        Sample the counters: C{messages} and C{octets} so far, at C{when}.
        Samples no longer needed for a window ending at C{when} or later are
        dropped.
        """
        samples = self._samples
        samples.append((when, messages, octets))
        horizon = when - self._span
        while len(samples) > 1 and samples[1][0] <= horizon:
            samples.popleft()

    def rate(self, now: float, messages: int, octets: int) -> tuple[float, float]:
        """
        Messages and octets per second over the window ending at C{now},
        where the counters now stand at C{messages} and C{octets}; C{(0.0,
        0.0)} without a sample older than C{now}.
        """
        samples = self._samples
        if not samples:
            return 0.0, 0.0
        horizon = now - self._span
        base = samples[0]
        for sample in samples:
            if sample[0] > horizon:
                break
            base = sample
        elapsed = now - base[0]
        if elapsed <= 0:
            return 0.0, 0.0
        return (messages - base[1]) / elapsed, (octets - base[2]) / elapsed

    def __len__(self) -> int:
        return len(self._samples)

    def keepLast(self) -> None:
        """
        Keep only the newest sample (the counters stopped moving long
        enough ago that older ones no longer matter).
        """
        while len(self._samples) > 1:
            self._samples.popleft()


class ThroughputHistory:
    """
    The throughput of the last hour: per step, its end time and the
    messages and octets per second during it, oldest first; at most
    C{size} steps.
    """

    __slots__ = ("step", "_samples")

    def __init__(self, step: float = STEP_SECONDS, size: int = HISTORY_SAMPLES) -> None:
        self.step = step
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=size)

    def add(self, when: float, messagesPerSecond: float, octetsPerSecond: float) -> None:
        """
        Add the step ending at C{when}; the oldest step goes once the
        history is full.
        """
        self._samples.append((when, messagesPerSecond, octetsPerSecond))

    def samples(self) -> list[list[float]]:
        """
        The steps as JSON-ready C{[time, messages/s, octets/s]} lists,
        oldest first.
        """
        return [
            [when, round(messages, 2), round(octets, 1)]
            for when, messages, octets in self._samples
        ]

    def __len__(self) -> int:
        return len(self._samples)
