# -*- test-case-name: tests.test_status_lograte -*-
"""
At most one log line a minute about something that may come thousands of
times a second (connections refused past the status site's limit, control
requests refused for their token): whoever sends them cannot fill the
log, and the line that is written says how many there were; the events
of a burst that ends are reported a minute after the line before them, not
held back until the next such event (which may never come).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["LOG_INTERVAL", "LineBudget"]

LOG_INTERVAL = 60.0
"""
Seconds between two lines about the same kind of event.
"""


class LineBudget:
    """
    Counts events of one kind, and says when one may be logged: the first
    at once, then at most one every C{interval} seconds, which names the
    count since the line before.  Only a count, a time and, while events
    wait to be reported, one delayed call are kept.
    """

    def __init__(
        self,
        clock: IReactorTime,
        interval: float = LOG_INTERVAL,
        overdue: Callable[[int], None] | None = None,
    ) -> None:
        """
        @param clock: the reactor, for the time and the delayed report.
        @param interval: the least seconds between two lines.
        @param overdue: called with the count of events not yet reported,
            C{interval} seconds after the last line, when no event since
            has been due (the caller logs that count); L{None} to report
            them only with the next event due.
        """
        self._clock = clock
        self._interval = interval
        self._overdue = overdue
        self._count = 0
        self._loggedAt: float | None = None
        self._report: IDelayedCall | None = None

    def count(self) -> int | None:
        """
        Count one event.

        @return: the events since the last line, this one included, when a
            line is due now (the caller logs it); L{None} when not.
        """
        self._count += 1
        now = self._clock.seconds()
        if self._loggedAt is not None and now - self._loggedAt < self._interval:
            self._reportLater(self._loggedAt + self._interval - now)
            return None
        if self._report is not None:
            self._report.cancel()
            self._report = None
        self._loggedAt = now
        count, self._count = self._count, 0
        return count

    def _reportLater(self, delay: float) -> None:
        """
        Hand the events counted to C{overdue} in C{delay} seconds, unless
        that is already due, or there is no C{overdue}.
        """
        if self._overdue is not None and self._report is None:
            self._report = self._clock.callLater(delay, self._reportOverdue)

    def _reportOverdue(self) -> None:
        """
        Hand the events counted since the last line to C{overdue}, as the
        line of this interval.
        """
        self._report = None
        assert self._overdue is not None
        count, self._count = self._count, 0
        self._loggedAt = self._clock.seconds()
        self._overdue(count)

    def flush(self) -> None:
        """
        Hand the events not yet reported to C{overdue} now, if a report of
        them is pending (the events' source stops: none is lost, and no
        delayed call is left).
        """
        if self._report is not None:
            self._report.cancel()
            self._reportOverdue()
