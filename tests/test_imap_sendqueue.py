"""
Tests for L{imapmig.imap.sendqueue}: which batch the APPEND pipeline sends
next, without a connection.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.outgoing import (
    LITERAL_MINUS_LIMIT,
    LiteralMode,
    OutgoingMessage,
    PipelineSettings,
)
from imapmig.imap.sendqueue import SendQueue


def settings(
    mode: LiteralMode = LiteralMode.PLUS,
    batchMessages: int = 3,
    batchBytes: int = 1000,
    windowMessages: int = 10,
    windowBytes: int = 10_000,
) -> PipelineSettings:
    """
    Pipeline settings, small enough to reach every limit in a test.
    """
    return PipelineSettings(mode, batchMessages, batchBytes, windowMessages, windowBytes)


def messages(*sizes: int) -> list[OutgoingMessage]:
    """
    Messages of C{sizes} octets, each its own index as origin.
    """
    return [OutgoingMessage(b"x" * size, b"", index) for index, size in enumerate(sizes)]


def origins(batch: tuple[list[OutgoingMessage], int] | None) -> tuple[list[object], int] | None:
    """
    A batch as its messages' origins and its size, for comparison.
    """
    if batch is None:
        return None
    return [m.origin for m in batch[0]], batch[1]


class NextBatchTests(SynchronousTestCase):
    """
    L{SendQueue.next} cuts the queue into batches.
    """

    def test_batchLimits(self) -> None:
        """
        A batch holds at most C{batchMessages} messages and C{batchBytes}
        octets, with its size.
        """
        queue = SendQueue(settings(batchMessages=3, batchBytes=250))
        queue.add(messages(100, 100, 100, 10, 10, 10, 10), b'"INBOX"')
        self.assertEqual(origins(queue.next(0, 0)), ([0, 1], 200))
        self.assertEqual(origins(queue.next(0, 0)), ([2, 3, 4], 120))
        self.assertEqual(origins(queue.next(0, 0)), ([5, 6], 20))
        self.assertIsNone(queue.next(0, 0))
        self.assertTrue(queue.empty)
        self.assertEqual(queue.queuedBytes, 0)

    def test_oneMailboxPerBatch(self) -> None:
        """
        A batch never mixes mailboxes: each message goes to the one given
        when it was added.
        """
        queue = SendQueue(settings())
        queue.add(messages(1, 1), b'"A"')
        queue.add(messages(1), b'"B"')
        first = queue.next(0, 0)
        assert first is not None
        self.assertEqual([m.mailbox for m in first[0]], [b'"A"', b'"A"'])
        second = queue.next(0, 0)
        assert second is not None
        self.assertEqual([m.mailbox for m in second[0]], [b'"B"'])

    def test_mailboxBackAgain(self) -> None:
        """
        A batch stops at the first message of another mailbox, even when
        the queue goes back to the batch's mailbox within a batch's reach.
        """
        queue = SendQueue(settings(batchMessages=5))
        queue.add(messages(1, 1), b'"A"')
        queue.add(messages(1), b'"B"')
        queue.add(messages(1, 1), b'"A"')
        batches = [queue.next(0, 0) for _ in range(3)]
        self.assertEqual(
            [[m.mailbox for m in batch[0]] for batch in batches if batch is not None],
            [[b'"A"', b'"A"'], [b'"B"'], [b'"A"', b'"A"']],
        )
        self.assertTrue(queue.empty)

    def test_takenNotHeld(self) -> None:
        """
        The messages taken are no longer held by the queue, once it is all
        taken or more are added.
        """
        queue = SendQueue(settings(batchMessages=2))
        queue.add(messages(1, 1, 1), b'"A"')
        taken = queue.next(0, 0)
        assert taken is not None
        queue.add(messages(1), b'"A"')
        self.assertEqual(len(queue.unsettled()), 2)
        self.assertFalse(any(m in taken[0] for m in queue._queue))
        queue.next(0, 0)
        self.assertEqual(queue._queue, [])

    def test_window(self) -> None:
        """
        With messages in flight, a batch fits in what the window has left;
        a message larger than the window goes alone once nothing is in
        flight.
        """
        queue = SendQueue(settings(windowMessages=4, windowBytes=500))
        queue.add(messages(10, 10, 10), b'"INBOX"')
        self.assertEqual(origins(queue.next(3, 0)), ([0], 10))
        self.assertIsNone(queue.next(4, 0))
        queue = SendQueue(settings(batchBytes=100, windowBytes=100))
        queue.add(messages(300), b'"INBOX"')
        self.assertIsNone(queue.next(1, 10))
        self.assertEqual(origins(queue.next(0, 0)), ([0], 300))

    def test_hungry(self) -> None:
        """
        The queue is hungry below one batch of messages and of octets:
        one full batch waits, not two.
        """
        queue = SendQueue(settings(batchMessages=2, batchBytes=1000))
        self.assertTrue(queue.hungry)
        queue.add(messages(1), b'"INBOX"')
        self.assertTrue(queue.hungry)
        queue.add(messages(1), b'"INBOX"')
        self.assertFalse(queue.hungry)
        queue = SendQueue(settings(batchMessages=5, batchBytes=1000))
        queue.add(messages(999), b'"INBOX"')
        self.assertTrue(queue.hungry)
        queue.add(messages(1), b'"INBOX"')
        self.assertFalse(queue.hungry)


class ShortBatchTests(SynchronousTestCase):
    """
    A batch cut short by the end of the queue waits for more while
    replies are due, unless the caller says nothing more comes.
    """

    def test_heldWhileRepliesDue(self) -> None:
        """
        Less than a batch queued, with a batch's worth in flight (in
        messages or in octets): nothing goes, unless C{short}.
        """
        queue = SendQueue(settings(batchMessages=3, batchBytes=1000))
        queue.add(messages(1, 1), b'"INBOX"')
        self.assertIsNone(queue.next(3, 10, short=False))
        self.assertIsNone(queue.next(1, 1000, short=False))
        self.assertEqual(origins(queue.next(3, 10, short=True)), ([0, 1], 2))

    def test_goesWithLessInFlight(self) -> None:
        """
        With less than a batch's worth in flight the short batch goes at
        once: a slower source's steps keep the server fed.
        """
        queue = SendQueue(settings(batchMessages=3, batchBytes=1000))
        queue.add(messages(1, 1), b'"INBOX"')
        self.assertEqual(origins(queue.next(2, 999, short=False)), ([0, 1], 2))

    def test_goesWhenNothingInFlight(self) -> None:
        """
        With no reply due the short batch goes at once: the wire is never
        left idle with messages queued.
        """
        queue = SendQueue(settings(batchMessages=3))
        queue.add(messages(1, 1), b'"INBOX"')
        self.assertEqual(origins(queue.next(0, 0, short=False)), ([0, 1], 2))

    def test_fullBatchGoes(self) -> None:
        """
        A batch full by messages, or by octets, goes while replies are due.
        """
        queue = SendQueue(settings(batchMessages=3, batchBytes=1000))
        queue.add(messages(1, 1, 1, 1), b'"INBOX"')
        self.assertEqual(origins(queue.next(2, 10, short=False)), ([0, 1, 2], 3))
        self.assertIsNone(queue.next(5, 13, short=False))
        queue = SendQueue(settings(batchMessages=3, batchBytes=1000))
        queue.add(messages(600, 600), b'"INBOX"')
        self.assertEqual(origins(queue.next(2, 10, short=False)), ([0], 600))


class HeldBatchTests(SynchronousTestCase):
    """
    A batch holding a synchronizing literal waits until no reply is due.
    """

    def test_synchronizingHeld(self) -> None:
        """
        Without LITERAL+ or LITERAL-, a batch is held first in line while
        messages are in flight, and goes once none are.
        """
        queue = SendQueue(settings(LiteralMode.SYNC))
        queue.add(messages(5, 6), b'"INBOX"')
        self.assertIsNone(queue.next(1, 5))
        self.assertFalse(queue.empty)
        self.assertEqual([m.origin for m in queue.unsettled()], [0, 1])
        self.assertEqual(origins(queue.next(0, 0)), ([0, 1], 11))

    def test_literalMinus(self) -> None:
        """
        Under LITERAL-, only a batch with a literal above 4096 octets is
        held while replies are due.
        """
        queue = SendQueue(settings(LiteralMode.MINUS, batchMessages=1, batchBytes=10_000))
        queue.add(messages(LITERAL_MINUS_LIMIT, LITERAL_MINUS_LIMIT + 1), b'"INBOX"')
        self.assertEqual(origins(queue.next(1, 5)), ([0], LITERAL_MINUS_LIMIT))
        self.assertIsNone(queue.next(1, 5))
        self.assertEqual(origins(queue.next(0, 0)), ([1], LITERAL_MINUS_LIMIT + 1))

    def test_literalPlusNeverHeld(self) -> None:
        """
        Under LITERAL+, nothing is held.
        """
        queue = SendQueue(settings(LiteralMode.PLUS, batchBytes=10_000))
        queue.add(messages(LITERAL_MINUS_LIMIT + 1), b'"INBOX"')
        self.assertEqual(origins(queue.next(1, 5)), ([0], LITERAL_MINUS_LIMIT + 1))


class RetryTests(SynchronousTestCase):
    """
    Batches sent again go before the queue, whole.
    """

    def test_splitHalvesFirst(self) -> None:
        """
        The halves of a split batch go one after the other, before the
        queue.
        """
        queue = SendQueue(settings(batchMessages=1))
        queue.add(messages(1), b'"INBOX"')
        queue.split(messages(1, 2, 3))
        self.assertEqual([m.origin for m in queue.unsettled()], [0, 1, 2, 0])
        self.assertEqual(origins(queue.next(0, 0)), ([0], 1))
        self.assertEqual(origins(queue.next(0, 0)), ([1, 2], 5))
        self.assertEqual(origins(queue.next(0, 0)), ([0], 1))

    def test_retryWaitsForRoom(self) -> None:
        """
        A batch sent again waits, whole, for room in the window while
        messages are in flight.
        """
        queue = SendQueue(settings(windowMessages=3, windowBytes=100))
        queue.sendFirst(messages(10, 10))
        self.assertIsNone(queue.next(2, 20))
        self.assertIsNone(queue.next(1, 85))
        self.assertEqual(origins(queue.next(1, 80)), ([0, 1], 20))


class TwinTests(SynchronousTestCase):
    """
    L{imapmig.imap.sendqueue.stampMailbox} and L{leadingRun} (the C
    extension's, where built) do what their Python twins do.
    """

    def test_stampMailbox(self) -> None:
        """
        Each message gets the mailbox; the octets of their bodies (bytes,
        bytearray, anything with a length) come back.
        """
        from imapmig.imap import sendqueue

        for stamp in {sendqueue.stampMailbox, sendqueue.stampMailboxPython}:
            messages = [
                OutgoingMessage(b"abc", b"", None),
                OutgoingMessage(bytearray(b"de"), b"", None),
                OutgoingMessage(b"", b"", None),
            ]
            self.assertEqual(stamp(messages, b"Box"), 5)
            self.assertEqual([m.mailbox for m in messages], [b"Box"] * 3)
            self.assertEqual(stamp([], b"Box"), 0)

    def test_leadingRun(self) -> None:
        """
        The messages that lead a batch for its mailbox (an equal one, or
        the same object) within the limit, and their octets; none when
        the first is over the limit.
        """
        from imapmig.imap import sendqueue

        def message(size: int, mailbox: bytes) -> OutgoingMessage:
            made = OutgoingMessage(b"x" * size, b"", None)
            made.mailbox = mailbox
            return made

        other = bytes(bytearray(b"Box"))
        batch = [message(3, b"Box"), message(4, other), message(0, b"Box"), message(5, b"Two")]
        cases = [
            (batch, 100, (3, 7)),
            (batch, 7, (3, 7)),
            (batch, 6, (1, 3)),
            (batch, 2, (0, 0)),
            (batch, -1, (0, 0)),
            (batch[3:], 5, (1, 5)),
            ([], 10, (0, 0)),
        ]
        for run in {sendqueue.leadingRun, sendqueue.leadingRunPython}:
            for messages, limit, expected in cases:
                mailbox = messages[0].mailbox if messages else b"Box"
                self.assertEqual(run(messages, mailbox, limit), expected, (messages, limit))
