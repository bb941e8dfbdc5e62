# -*- test-case-name: tests.test_state_outage -*-
"""
What one component logs while a database cannot be reached
(L{OutageLog}): a line when it stops answering, naming it and the error, a
line when it answers again, saying how long it was away, and meanwhile at
most one line every L{REPEAT} seconds, where each failed attempt logged
one (found from outside: 135 to 207 warnings per daemon in an outage of
84 s).  In the state layer, the lowest that every component writing a
database (the write batcher, the outcome recorder, the fleet's heartbeat)
imports; nothing before it counted failures across attempts.
"""

from __future__ import annotations

from typing import Callable

from twisted.logger import Logger, LogLevel

__all__ = ["REPEAT", "OutageLog"]

REPEAT = 30.0
"""
The least seconds between two lines about one outage.
"""


class OutageLog:
    """
    The lines of one component about the outages of its database.

    @ivar since: when the current outage began (L{None}: none).
    @ivar lastError: the last attempt's error during an outage (L{None}:
        none).
    """

    def __init__(
        self,
        log: Logger,
        what: str,
        now: Callable[[], float],
        repeat: float = REPEAT,
        level: LogLevel = LogLevel.warn,
    ) -> None:
        """
        @param log: the component's logger (its namespace).
        @param what: what cannot be done, for the lines
            (C{"The fleet's heartbeat"}).
        @param now: the seconds of the clock the outage is timed on.
        @param level: the level of the lines about failures.
        """
        self._level = level
        self._log = log
        self._what = what
        self._now = now
        self._repeat = repeat
        self.since: float | None = None
        self.lastError: str | None = None
        self._loggedAt = 0.0
        self._failures = 0

    def failed(self, why: str, then: str = "", refused: bool = False) -> None:
        """
        An attempt failed because the database could not be reached
        (C{why}: the error, which names it), or, with C{refused}, because
        it refused it for a reason of its own (its disk full, a right
        revoked: C{why} says which, and the line does not say it cannot be
        reached); C{then}: what happens next, for the line.
        """
        now = self._now()
        self._failures += 1
        self.lastError = why
        suffix = f"; {then}" if then else ""
        status = "refuses them" if refused else "cannot be reached"
        if self.since is None:
            self.since, self._loggedAt = now, now
            self._log.emit(
                self._level,
                "{what}: the database " + status + " ({why}){then}; said again at most"
                " every {repeat:.0f} s until it answers",
                what=self._what, why=why, then=suffix, repeat=self._repeat,
            )  # fmt: skip
        elif now - self._loggedAt >= self._repeat:
            self._loggedAt = now
            self._log.emit(
                self._level,
                "{what}: the database still " + status + " after {away:.0f} s"
                " ({failures} attempts failed; {why}){then}",
                what=self._what, away=now - self.since, failures=self._failures, why=why,
                then=suffix,
            )  # fmt: skip

    def answered(self) -> None:
        """
        An attempt succeeded: the end of the outage, if there was one.
        """
        if self.since is None:
            return
        away, failures = self._now() - self.since, self._failures
        self.since, self._failures, self.lastError = None, 0, None
        self._log.info(
            "{what}: the database answers again after {away:.1f} s ({failures} attempts"
            " failed)",
            what=self._what, away=away, failures=failures,
        )  # fmt: skip
