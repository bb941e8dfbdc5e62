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
