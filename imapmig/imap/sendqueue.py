# -*- test-case-name: tests.test_imap_sendqueue,tests.test_imap_pipeline -*-
"""
The APPEND pipeline's messages not yet sent, and the choice of the next
batch: within the window, of one mailbox, and held while replies are due
before a synchronizing literal.

Split from L{imapmig.imap.pipeline}'s C{AppendPipeline}, which kept the
queue, the batches to send again and this choice beside the wire: the
pipeline writes and reads, this decides what goes next.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Iterable

from imapmig.imap.outgoing import (
    LITERAL_MINUS_LIMIT,
    LiteralMode,
    OutgoingMessage,
    PipelineSettings,
)

# A narrowed window (SendQueue.resize) holds this many batches: one the
# server stores while the next is on its way (3 measured no better).
NARROW_BATCHES = 2


def _sizeOf(batch: list[OutgoingMessage]) -> int:
    """
    The octets of the bodies of C{batch}.
    """
    return sum([len(message.body) for message in batch])


class SendQueue:
    """
    The messages not yet sent, and which of them go next: first the
    batches to send again (the halves of a refused MULTIAPPEND, a batch
    held until the replies due have arrived before a synchronizing
    literal, or one a "not now" left unsettled), then the queue, in
    batches of one mailbox within the window.

    The queue is a list read from its head (L{_head}), cut back as
    messages are added: a batch is taken as one slice, its cut (by
    mailbox and octets) found by one C call, L{leadingRun}, with no
    statement per message.

    @ivar queuedBytes: the octets of the queue.
    """

    __slots__ = (
        "_settings",
        "_queue",
        "_head",
        "_retry",
        "queuedBytes",
        "_lowWaterMessages",
        "_lowWaterBytes",
        "_sync",
        "_minus",
        "_batchMessages",
        "_windowMessages",
        "_windowBytes",
    )

    def __init__(self, settings: PipelineSettings) -> None:
        """
        @param settings: the pipeline's batch and window sizes and literal
            mode.
        """
        self._settings = settings
        self._queue: list[OutgoingMessage] = []
        self._head = 0
        self._retry: deque[list[OutgoingMessage]] = deque()
        self.queuedBytes = 0
        # One full batch ready for when the window or the socket next has
        # room: the job refills the queue (a step of about 1 MB at a time)
        # while the batch before it is on the wire, which takes longer than
        # reading it.  Two batches held a second one (~8 MB of bodies a
        # connection) read ahead for nothing.
        self._lowWaterMessages = settings.batchMessages
        self._lowWaterBytes = settings.batchBytes
        self._sync = settings.literalMode is LiteralMode.SYNC
        self._minus = settings.literalMode is LiteralMode.MINUS
        self._batchMessages = settings.batchMessages
        self._windowMessages = settings.windowMessages
        self._windowBytes = settings.windowBytes

    @property
    def empty(self) -> bool:
        """
        Whether nothing is queued or waiting to be sent again.
        """
        return self._head == len(self._queue) and not self._retry

    @property
    def hungry(self) -> bool:
        """
        Whether less than one batch is queued (by messages and by
        octets): the next batch would not be full.
        """
        return (
            len(self._queue) - self._head < self._lowWaterMessages
            and self.queuedBytes < self._lowWaterBytes
        )

    def resize(self, batchMessages: int, most: int = sys.maxsize) -> None:
        """
        Cut batches of at most C{batchMessages} from now on (the batch
        grown with the destination mailbox, L{PipelineSettings.batchFor}),
        and keep one such batch read ahead.  If that is C{most}, a cap
        (the end of a job of several connections), the window too holds
        L{NARROW_BATCHES} such batches at most, in messages and in octets
        (at the settings' octets a message of a batch): each connection
        then ends with a few small batches in flight, not the tens of MB
        the socket buffers hold, and the last replies of the connections
        come within a small batch's time of each other.
        """
        narrow = batchMessages == most
        settings = self._settings
        self._batchMessages = batchMessages
        self._lowWaterMessages = batchMessages
        self._windowMessages = settings.windowMessages
        self._windowBytes = settings.windowBytes
        if narrow:
            self._windowMessages = min(self._windowMessages, NARROW_BATCHES * batchMessages)
            self._windowBytes = min(
                self._windowBytes,
                NARROW_BATCHES * settings.batchBytes * batchMessages // settings.batchMessages,
            )

    def add(self, messages: Iterable[OutgoingMessage], mailbox: bytes) -> None:
        """
        Queue C{messages} for C{mailbox} (encoded), after the others.
        """
        queue = self._queue
        if self._head:
            del queue[: self._head]
            self._head = 0
        start = len(queue)
        queue.extend(messages)
        self.queuedBytes += stampMailbox(queue[start:], mailbox)

    def sendFirst(self, batch: list[OutgoingMessage]) -> None:
        """
        Send C{batch} again, before anything else.
        """
        self._retry.appendleft(batch)

    def split(self, batch: list[OutgoingMessage]) -> None:
        """
        Send the halves of C{batch} (a refused MULTIAPPEND, of which
        nothing was stored) one after the other, before anything else.
        """
        middle = len(batch) // 2
        self._retry.appendleft(batch[middle:])
        self._retry.appendleft(batch[:middle])

    def unsettled(self) -> list[OutgoingMessage]:
        """
        The messages waiting to be sent again, then the queued ones.
        """
        result: list[OutgoingMessage] = []
        for batch in self._retry:
            result.extend(batch)
        result.extend(self._queue[self._head :])
        return result

    def next(
        self, messagesInFlight: int, bytesInFlight: int, short: bool = True
    ) -> tuple[list[OutgoingMessage], int] | None:
        """
        The batch to send now, with its octets, or L{None}: nothing
        waits, the window is full, the batch holds a synchronizing
        literal while replies are due, or (unless C{short}) the queue holds
        less than a batch while a batch's worth is in flight.

        @param short: whether a batch cut short by the end of the queue
            may go while a batch's worth is in flight: not while more is
            being read (the server pays its cost per command, and a
            batch in flight keeps it busy meanwhile); always once the
            caller has nothing more to add for now.  With less in
            flight (a source slower than the destination, such as an
            IMAP one read in 4 MB steps) it goes at once: holding it
            would let the server's work run dry at each step.
        """
        if self._retry:
            return self._nextRetry(messagesInFlight, bytesInFlight)
        if self._head == len(self._queue):
            return None
        return self._nextQueued(messagesInFlight, bytesInFlight, short)

    def _nextRetry(
        self, messagesInFlight: int, bytesInFlight: int
    ) -> tuple[list[OutgoingMessage], int] | None:
        """
        The first batch to send again, whole, if the window has room
        for it and it holds no synchronizing literal, or nothing is in
        flight.
        """
        batch = self._retry[0]
        size = _sizeOf(batch)
        if messagesInFlight and not self._fits(batch, size, messagesInFlight, bytesInFlight):
            return None
        return self._retry.popleft(), size

    def _fits(
        self, batch: list[OutgoingMessage], size: int, messagesInFlight: int, bytesInFlight: int
    ) -> bool:
        """
        Whether C{batch} (of C{size} octets) may follow the commands in
        flight: the window has room for it, and it holds no synchronizing
        literal.
        """
        settings = self._settings
        return (
            len(batch) <= self._windowMessages - messagesInFlight
            and size <= self._windowBytes - bytesInFlight
            and not self._holdsSyncLiteral(batch)
        )

    def _nextQueued(
        self, messagesInFlight: int, bytesInFlight: int, short: bool
    ) -> tuple[list[OutgoingMessage], int] | None:
        """
        The next batch of the queue: messages of one mailbox, as many as
        a batch and the window allow (a larger one alone when nothing is
        in flight); unless C{short}, none while a batch's worth (in
        messages or octets) is in flight if the queue ends before a batch
        does.  One holding a synchronizing
        literal while replies are due is held, first in line, until every
        reply due has arrived.
        """
        settings = self._settings
        queue, head = self._queue, self._head
        limit = min(self._batchMessages, self._windowMessages - messagesInFlight)
        if limit <= 0:
            return None
        if not short and self._waitsForMore(messagesInFlight, bytesInFlight, limit):
            return None
        batch = queue[head : head + limit]
        # The most octets taken: a first message above them goes alone,
        # when nothing is in flight.
        limitBytes = min(settings.batchBytes, self._windowBytes - bytesInFlight)
        cut, size = leadingRun(batch, batch[0].mailbox, limitBytes)
        if not cut:
            if messagesInFlight:
                return None
            cut, size = 1, len(batch[0].body)
        del batch[cut:]
        head += len(batch)
        if head == len(queue):
            # Nothing sent is held here once the queue is all taken.
            queue.clear()
            head = 0
        self._head = head
        self.queuedBytes -= size
        if messagesInFlight and self._holdsSyncLiteral(batch):
            self._retry.appendleft(batch)
            return None
        return batch, size

    def _waitsForMore(self, messagesInFlight: int, bytesInFlight: int, limit: int) -> bool:
        """
        Whether the queue holds less than a batch (of at most C{limit}
        messages) while a batch's worth is in flight.
        """
        settings = self._settings
        return (
            messagesInFlight >= self._batchMessages or bytesInFlight >= settings.batchBytes
        ) and (len(self._queue) - self._head < limit and self.queuedBytes < settings.batchBytes)

    def _holdsSyncLiteral(self, batch: list[OutgoingMessage]) -> bool:
        """
        Whether a command of C{batch} would hold a synchronizing literal.
        """
        return self._sync or (
            self._minus and any(len(m.body) > LITERAL_MINUS_LIMIT for m in batch)
        )


def stampMailboxPython(messages: list[OutgoingMessage], mailbox: bytes) -> int:
    """
    Give each of C{messages} C{mailbox}; return the octets of their bodies.

    The reference and the fallback of the C extension's L{stampMailbox}.
    """
    size = 0
    for message in messages:
        message.mailbox = mailbox
        size += len(message.body)
    return size


def leadingRunPython(batch: list[OutgoingMessage], mailbox: bytes, limit: int) -> tuple[int, int]:
    """
    How many messages lead C{batch} for C{mailbox} with no more than
    C{limit} octets of bodies together, and those octets.

    The reference and the fallback of the C extension's L{leadingRun}.
    """
    octets = 0
    for index, message in enumerate(batch):
        size = len(message.body)
        if message.mailbox != mailbox or octets + size > limit:
            return index, octets
        octets += size
    return len(batch), octets


try:
    from imapmig.imap._append import bindOutgoing, leadingRun as leadingRun
    from imapmig.imap._append import stampMailbox as stampMailbox
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    leadingRun = leadingRunPython
    stampMailbox = stampMailboxPython
else:
    bindOutgoing(OutgoingMessage)
