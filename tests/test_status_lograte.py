"""
Tests for L{imapmig.status.lograte}.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.status.lograte import LineBudget


class LineBudgetTests(SynchronousTestCase):
    """
    L{LineBudget} lets one line through at once, then one an interval.
    """

    def test_firstAtOnce(self) -> None:
        """
        The first event is due at once, alone.
        """
        self.assertEqual(LineBudget(Clock()).count(), 1)

    def test_countedUntilDue(self) -> None:
        """
        Events within the interval are counted, not due; the first after
        it is due with every event since the last line.
        """
        clock = Clock()
        budget = LineBudget(clock, interval=60)
        budget.count()
        for _ in range(5):
            clock.advance(10)
            self.assertIsNone(budget.count())
        clock.advance(9.9)
        self.assertIsNone(budget.count())
        clock.advance(0.1)
        self.assertEqual(budget.count(), 7)
        clock.advance(600)
        self.assertEqual(budget.count(), 1)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_burstReportedAfterTheInterval(self) -> None:
        """
        With C{overdue}, the events of a burst that ends within the
        interval are handed to it when the interval after the last line
        ends, once, without waiting for another event; an event after that
        report is counted in the next interval, and one due at once
        cancels the pending report.
        """
        clock = Clock()
        reported: list[int] = []
        budget = LineBudget(clock, interval=60, overdue=reported.append)
        self.assertEqual(budget.count(), 1)
        clock.advance(5)
        for _ in range(999):
            self.assertIsNone(budget.count())
        clock.advance(54.9)
        self.assertEqual(reported, [])
        clock.advance(0.1)
        self.assertEqual(reported, [999])
        clock.advance(600)
        self.assertEqual(reported, [999])
        self.assertEqual(budget.count(), 1)
        clock.advance(1)
        self.assertIsNone(budget.count())
        # Due at once (the reactor ran late): the pending report goes.
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        clock.rightNow += 59
        self.assertEqual(budget.count(), 2)
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual(reported, [999])

    def test_flush(self) -> None:
        """
        L{LineBudget.flush} hands the events not yet reported to
        C{overdue} at once and leaves no delayed call; with none pending it
        does nothing.
        """
        clock = Clock()
        reported: list[int] = []
        budget = LineBudget(clock, interval=60, overdue=reported.append)
        budget.flush()
        self.assertEqual(budget.count(), 1)
        budget.flush()
        self.assertEqual(reported, [])
        budget.count()
        budget.count()
        budget.flush()
        self.assertEqual(reported, [2])
        self.assertEqual(clock.getDelayedCalls(), [])
