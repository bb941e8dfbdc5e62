# mypy: disallow-untyped-calls=False
"""
Tests for L{imapmig.state.outage}: one line when a database stops
answering, one when it answers again, at most one every 30 s between.
"""

from __future__ import annotations

from typing import cast

from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state.outage import REPEAT, OutageLog


class OutageLogTests(SynchronousTestCase):
    """
    L{OutageLog} on a L{Clock}.
    """

    def test_lines(self) -> None:
        """
        An outage of 84 s with a failure every 0.8 s logs one line at its
        start (the error, what happens next), one every 30 s, and one when
        the database answers (how long it was away).
        """
        events: list[LogEvent] = []
        clock = Clock()
        outage = OutageLog(Logger(observer=cast(ILogObserver, events.append)), "The heartbeat", clock.seconds)
        outage.answered()
        for _ in range(105):
            outage.failed("db1: connection refused", "trying again in 0.8 s")
            clock.advance(0.8)
        outage.answered()
        lines = [formatEvent(e) for e in events]
        self.assertEqual(len(lines), 4, lines)
        self.assertEqual(
            lines[0],
            "The heartbeat: the database cannot be reached (db1: connection refused);"
            f" trying again in 0.8 s; said again at most every {REPEAT:.0f} s until it answers",
        )
        self.assertIn("still cannot be reached after 30 s", lines[1])
        self.assertEqual(
            lines[3], "The heartbeat: the database answers again after 84.0 s (105 attempts failed)"
        )
        outage.failed("db1: connection refused")
        self.assertEqual(len(events), 5)
