"""
Tests for the send deadline of L{imapmig.imap.pipeline.AppendPipeline}
(L{imapmig.imap.outgoing.SendDeadline}, docs/fleet-design.md "Sending
stops before the lease can end: the timing rule"): compared with its
clock before each write, so that a reactor waking late from a stall
writes nothing once it has passed, whatever the deadline's timer has not
yet said.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import LeaseLost
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.outgoing import LiteralMode, PipelineSettings, SendDeadline
from imapmig.imap.pipeline import AppendPipeline
from tests.test_imap_pipeline import CountingTransport, RecordingOutcomes, message

DEADLINE = 45.0


class Stalled:
    """
    A pipeline on a L{StringTransport}, its send deadline at C{DEADLINE} on
    a L{Clock}, with the deadline's timer (the daemon's, which tells the
    jobs their lease is lost) on the same clock.
    """

    def __init__(self, mode: LiteralMode = LiteralMode.PLUS, windowMessages: int = 2) -> None:
        self.clock = Clock()
        self.client = MigrationIMAP4Client(self.clock)
        self.transport = CountingTransport()
        self.client.makeConnection(self.transport)
        self.client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
        self.outcomes = RecordingOutcomes()
        self.deadline = SendDeadline(self.clock.seconds, DEADLINE)
        settings = PipelineSettings(mode, 1, 1 << 20, windowMessages, 1 << 24)
        self.pipeline = AppendPipeline(self.client, settings, self.outcomes, deadline=self.deadline)
        self.pipeline.selectMailbox("INBOX")
        self.told: list[float] = []
        self.timer = self.clock.callLater(DEADLINE, lambda: self.told.append(self.clock.seconds()))
        self.transport.clear()

    def stall(self, until: float) -> None:
        """
        The reactor was stalled (a long GC, SIGSTOP) until C{until}: the
        clock moved on, and no timed call has run yet.
        """
        self.clock.rightNow = until


class SendDeadlineTests(SynchronousTestCase):
    """
    A pipeline given a send deadline writes nothing once it has passed: the
    connection is aborted and the pipeline fails with L{LeaseLost}.
    """

    def test_stalledPastTheDeadline(self) -> None:
        """
        Replies read after a stall that outlasted the deadline free the
        window, but nothing more is written, before the deadline's timer
        has run: the transport is aborted, what was queued or in flight is
        left unsettled, and every wait fails with L{LeaseLost}.
        """
        s = Stalled()
        s.pipeline.enqueue([message(f"m{n}", b"body %d" % n) for n in range(4)])
        self.assertEqual(s.transport.take().count(b" APPEND "), 2)
        hungry = s.pipeline.hungry()
        s.stall(DEADLINE + 5)
        s.client.dataReceived(b"0001 OK APPEND completed\r\n0002 OK APPEND completed\r\n")
        self.assertEqual(s.transport.value(), b"")
        self.assertTrue(s.transport.disconnected)
        self.assertEqual(s.told, [])
        self.failureResultOf(hungry, LeaseLost)
        self.failureResultOf(s.pipeline.drained(), LeaseLost)
        self.assertRaises(LeaseLost, s.pipeline.enqueue, [message("late", b"late")])
        # The reply read before the abort is recorded; the message whose
        # reply the abort dropped, and the two never sent, are unsettled.
        self.assertEqual([origin for origin, _, _ in s.outcomes.appended], ["m0"])
        self.assertEqual(sorted(str(m.origin) for m in s.pipeline.unsettled()), ["m1", "m2", "m3"])
        s.clock.advance(0)
        self.assertEqual(s.told, [DEADLINE + 5])
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_enqueuedPastTheDeadline(self) -> None:
        """
        Messages enqueued after the deadline passed are not written.
        """
        s = Stalled()
        s.stall(DEADLINE)
        s.pipeline.enqueue([message("m0", b"body")])
        self.assertEqual(s.transport.value(), b"")
        self.assertTrue(s.transport.disconnected)
        self.failureResultOf(s.pipeline.flushed(), LeaseLost)
        s.timer.cancel()

    def test_movedDeadline(self) -> None:
        """
        A deadline moved later (a heartbeat answered) lets the writes go on
        past the old one.
        """
        s = Stalled()
        s.deadline.at = DEADLINE + 60
        s.stall(DEADLINE + 5)
        s.pipeline.enqueue([message("m0", b"body")])
        self.assertIn(b' APPEND "INBOX" {4+}\r\nbody\r\n', s.transport.value())
        self.assertFalse(s.transport.disconnected)
        s.timer.cancel()

    def test_continuationPastTheDeadline(self) -> None:
        """
        A synchronizing literal whose continuation arrives after the
        deadline is not written.
        """
        s = Stalled(LiteralMode.SYNC)
        s.pipeline.enqueue([message("m0", b"body")])
        self.assertEqual(s.transport.take(), b'0001 APPEND "INBOX" {4}\r\n')
        s.stall(DEADLINE + 1)
        s.client.dataReceived(b"+ go ahead\r\n")
        self.assertEqual(s.transport.value(), b"")
        self.assertTrue(s.transport.disconnected)
        self.failureResultOf(s.pipeline.drained(), LeaseLost)
        s.timer.cancel()

    def test_largeLiteralPastTheDeadline(self) -> None:
        """
        A large literal written slice by slice stops at the first slice
        after the deadline.
        """
        import imapmig.imap.pipeline as module

        self.patch(module, "STREAM_THRESHOLD", 8)
        self.patch(module, "STREAM_SLICE", 4)
        s = Stalled()
        writes: list[bytes] = []

        def writeSequence(seq: list[bytes]) -> None:
            writes.append(b"".join(seq))
            s.pipeline.pauseProducing()  # the transport's buffer is full

        self.patch(s.transport, "writeSequence", writeSequence)
        s.pipeline.enqueue([message("big", b"0123456789")])
        s.pipeline.resumeProducing()
        self.assertEqual(writes, [b'0001 APPEND "INBOX" {10+}\r\n0123', b"4567"])
        s.stall(DEADLINE + 1)
        s.pipeline.resumeProducing()
        self.assertEqual(len(writes), 2)
        self.assertTrue(s.transport.disconnected)
        self.failureResultOf(s.pipeline.drained(), LeaseLost)
        s.timer.cancel()
