# -*- test-case-name: tests.test_status_lograte -*-
"""
At most one log line a minute about something that may come thousands of
times a second (connections refused past the status site's limit, control
requests refused for their token): whoever sends them cannot fill the
log, and the line that is written says how many there were.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime

__all__ = ["LOG_INTERVAL", "LineBudget"]

LOG_INTERVAL = 60.0
"""
Seconds between two lines about the same kind of event.
"""


class LineBudget:
    """
    Counts events of one kind, and says when one may be logged: the first
    at once, then at most one every C{interval} seconds, which names the
    count since the line before.  Only a count and a time are kept.
    """

    def __init__(self, clock: IReactorTime, interval: float = LOG_INTERVAL) -> None:
        """
        @param clock: the reactor, for the time.
        @param interval: the least seconds between two lines.
        """
        self._clock = clock
        self._interval = interval
        self._count = 0
        self._loggedAt: float | None = None

    def count(self) -> int | None:
        """
        Count one event.

        @return: the events since the last line, this one included, when a
            line is due now (the caller logs it); L{None} when not.
        """
        self._count += 1
        now = self._clock.seconds()
        if self._loggedAt is not None and now - self._loggedAt < self._interval:
            return None
        self._loggedAt = now
        count, self._count = self._count, 0
        return count
