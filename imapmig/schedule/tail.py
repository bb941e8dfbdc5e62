# -*- test-case-name: tests.test_schedule_fleet -*-
"""
A fleet daemon's watch of the queue's last jobs: with nothing left to run
but other daemons' claims, the fleet's scheduler
(L{imapmig.schedule.fleet.FleetScheduler}) reads the queue's counts
L{TAIL_CHECKS} times a heartbeat period and looks again at once when they
change, so that with C{--exit-when-done} every daemon sees the fleet
drained within a tenth of a period of the last job's end, rather than at
its next claim, up to a period later (measured: three daemons exited 0.1-1.2
s after the last job; bench/results/fleet.md).  It watches for a lease
from the first look that found only others' claims: a tail longer than
that (a large mailbox copied for hours elsewhere) costs each idle daemon
its claims a period apart, as before, not ten reads a period.

Its own module beside the scheduler, which is at its size bound; nothing
in the queue could serve: the counts are the queue's, when to read them
is the scheduler's.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import QueueUnavailable
from imapmig.queue import IAsyncJobQueue, QueueCounts

log = Logger()

TAIL_CHECKS = 10
"""
How often, per heartbeat period, the counts are read while only other
daemons' claims are left.
"""


def onlyOthersLeft(counts: QueueCounts) -> bool:
    """
    Whether C{counts} show claims and nothing else left to run: the
    fleet's last jobs (none of them this daemon's when it runs none).
    """
    return bool(counts.claimed) and not (counts.queued or counts.deferred or counts.paused)


class TailWatch:
    """
    Reads the counts every C{period / TAIL_CHECKS} seconds from L{start}
    until they change (then calls C{changed} once) or L{stop}; a count
    that cannot be read ends the watch (the scheduler's period goes on).
    """

    def __init__(
        self, queue: IAsyncJobQueue, clock: IReactorTime, period: float, changed: Callable[[], None]
    ) -> None:
        self._queue = queue
        self._clock = clock
        self._every = period / TAIL_CHECKS
        self._changed = changed
        self._token: object | None = None
        self._timer: IDelayedCall | None = None

    def start(self) -> None:
        """
        Watch, from now.
        """
        self.stop()
        token = self._token = object()

        def seen(counts: QueueCounts) -> None:
            if self._token is not token:
                return
            if onlyOthersLeft(counts):
                self._timer = self._clock.callLater(self._every, look)
            else:
                self._token = None
                self._changed()

        def unread(failure: Failure) -> None:
            if not failure.check(QueueUnavailable):
                log.failure("Reading the queue's counts", failure)

        def look() -> None:
            self._timer = None
            self._queue.counts().addCallbacks(seen, unread)

        self._timer = self._clock.callLater(self._every, look)

    def stop(self) -> None:
        """
        Stop watching; a count being read is then ignored.
        """
        self._token = None
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
