"""
Tests for L{imapmig.job.migration.readSteps}: the steps a unit is read in.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.migration import IMAP_READ_STEP_MESSAGES, readSteps
from imapmig.mail.message import SourceMessage


def _messages(count: int, size: int = 10) -> list[SourceMessage]:
    return [
        SourceMessage(key=str(n), flags=(), internalDate=None, size=size) for n in range(count)
    ]


class ReadStepsTests(SynchronousTestCase):
    """
    L{readSteps}.
    """

    def test_firstStepOneBatchThenLarger(self) -> None:
        """
        The first step holds at most C{firstMessages} messages; the rest
        are cut at C{stepMessages}; together they are the unit, in order.
        """
        messages = _messages(260)
        steps = readSteps(messages, 50, 100, 1 << 30)
        self.assertEqual([len(step) for step in steps], [50, 100, 100, 10])
        self.assertEqual([m for step in steps for m in step], messages)

    def test_boundedByOctets(self) -> None:
        """
        Every step, the first too, ends once it holds C{stepBytes} octets
        (at least one message each), whatever the message counts allow.
        """
        steps = readSteps(_messages(10, 1000), 50, IMAP_READ_STEP_MESSAGES, 3000)
        self.assertEqual([len(step) for step in steps], [3, 3, 3, 1])
        [one, *rest] = readSteps(_messages(3, 5000), 50, 1000, 3000)
        self.assertEqual((len(one), [len(step) for step in rest]), (1, [1, 1]))

    def test_empty(self) -> None:
        """
        An empty unit has no step.
        """
        self.assertEqual(readSteps([], 50, 1000, 4096), [])
