"""
Tests for L{imapmig.imap.deadline}: the reply deadline on a L{Clock}.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.deadline import PROGRESS_OCTETS, ReplyDeadline


class ReplyDeadlineTests(SynchronousTestCase):
    """
    L{ReplyDeadline}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.expired: list[float] = []
        self.deadline = ReplyDeadline(
            self.clock, 10, lambda: self.expired.append(self.clock.seconds())
        )

    def test_notArmed(self) -> None:
        """
        A deadline never armed never expires and schedules nothing.
        """
        self.assertFalse(self.deadline.armed)
        self.deadline.progress()
        self.deadline.received(10 * PROGRESS_OCTETS)
        self.clock.advance(100)
        self.assertEqual(self.expired, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_expires(self) -> None:
        """
        Armed and left without progress, it expires once, C{seconds} after
        arming, and is then disarmed.
        """
        self.deadline.arm()
        self.assertTrue(self.deadline.armed)
        self.clock.advance(9.9)
        self.assertEqual(self.expired, [])
        self.clock.advance(0.1)
        self.assertEqual(self.expired, [10])
        self.assertFalse(self.deadline.armed)
        self.clock.advance(100)
        self.assertEqual(self.expired, [10])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_armAgainIsNotProgress(self) -> None:
        """
        Arming a running deadline (another command sent) does not move it.
        """
        self.deadline.arm()
        self.clock.advance(6)
        self.deadline.arm()
        self.clock.advance(4)
        self.assertEqual(self.expired, [10])

    def test_progressRestarts(self) -> None:
        """
        Progress gives the full timeout again, counted from the progress.
        """
        self.deadline.arm()
        self.clock.advance(8)
        self.deadline.progress()
        self.clock.advance(8)
        self.deadline.progress()
        self.clock.advance(9)
        self.assertEqual(self.expired, [])
        self.clock.advance(1)
        self.assertEqual(self.expired, [26])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_dripIsNotProgress(self) -> None:
        """
        An octet a second does not extend the deadline.
        """
        self.deadline.arm()
        for _ in range(10):
            self.clock.advance(1)
            self.deadline.received(1)
        self.assertEqual(self.expired, [10])

    def test_bulkDataIsProgress(self) -> None:
        """
        Every L{PROGRESS_OCTETS} received is progress, however it is split
        into reads: a large literal on a slow link keeps the deadline away.
        """
        self.deadline.arm()
        piece = PROGRESS_OCTETS // 4
        for _ in range(40):
            self.clock.advance(2)
            self.deadline.received(piece)
        self.assertEqual(self.expired, [])
        # Four pieces (8 s) make progress; the last came at 80 s, and three
        # more pieces do not: the deadline runs out 10 s after 80 s.
        for _ in range(3):
            self.clock.advance(2)
            self.deadline.received(piece)
        self.clock.advance(4)
        self.assertEqual(self.expired, [90])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_progressResetsOctetCount(self) -> None:
        """
        Octets counted before another kind of progress do not carry over.
        """
        self.deadline.arm()
        self.deadline.received(PROGRESS_OCTETS - 1)
        self.clock.advance(5)
        self.deadline.progress()
        self.clock.advance(5)
        self.deadline.received(1)
        self.clock.advance(5)
        self.assertEqual(self.expired, [15])

    def test_disarm(self) -> None:
        """
        Disarmed, it never expires and leaves no delayed call; armed again
        it counts from then.
        """
        self.deadline.arm()
        self.clock.advance(9)
        self.deadline.disarm()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(50)
        self.deadline.arm()
        self.clock.advance(10)
        self.assertEqual(self.expired, [69])

    def test_hotPathSchedulesNothing(self) -> None:
        """
        Progress only records the new expiry: the one delayed call stays
        and is rescheduled when it fires early.
        """
        self.deadline.arm()
        calls = self.clock.getDelayedCalls()
        for _ in range(1000):
            self.deadline.progress()
        self.assertEqual(self.clock.getDelayedCalls(), calls)
        self.deadline.disarm()
