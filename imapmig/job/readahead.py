# -*- test-case-name: tests.test_job_readahead -*-
"""
Reading one unit of work from the source in steps (L{readSteps}), each a
step ahead of sending it.

A source that waits on a network (an IMAP source) would otherwise leave
both ends idle in turn: the source server while imapmig prepares and sends
a step, imapmig while the source server produces the next.  L{ReadAhead}
starts the read of the next step as soon as a step is handed over, so it
overlaps the preparing and sending of the step before; with the append
pipeline's own window this keeps the fetch and the append going at once.

Memory stays bounded: at most C{ahead} steps are read ahead (one for a
source that blocks the reactor, L{IMAP_READ_AHEAD} for an IMAP source),
never beyond the unit (whose messages are journaled before any is read or
sent), so the bodies held per connection are the step being sent and
those being read.  What a large message costs is the source's business
(the IMAP source spools a body above its C{spoolAbove} to a file, not
memory).
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import ImapmigError
from imapmig.job.attempt import RunStop
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage, StreamedBody
from imapmig.job.units import chunks
from imapmig.sources import IMessageSource

__all__ = [
    "IMAP_READ_AHEAD",
    "IMAP_READ_STEP_BYTES",
    "IMAP_READ_STEP_MESSAGES",
    "READ_STEP_BYTES",
    "ReadAhead",
    "closeBodies",
    "readSteps",
]

log = Logger()

# The most octets read from the source in one step without letting the
# reactor run.
READ_STEP_BYTES = 1024 * 1024

# The most octets (by listed size) of one step read from an IMAP source:
# its reads do not block the reactor, and each step is one round trip.
# One step is read ahead while the one before is sent (see ReadAhead):
# besides what its append pipeline holds, a connection holds at most that
# one step of bodies in memory (bodies above the source's spoolAbove go to
# a file instead).
IMAP_READ_STEP_BYTES = 4 * 1024 * 1024

# The most messages of one step read from an IMAP source.  Its steps are
# bounded by octets (IMAP_READ_STEP_BYTES), not by the destination's batch:
# each step costs the source server a FETCH command (two, with the
# BINARY.PEEK[] of bodies holding 0x80) and, for Dovecot, a mailbox sync
# per command; and each step read is a round trip.  A unit's first step,
# which nothing reads ahead of, is still one batch (readSteps).
IMAP_READ_STEP_MESSAGES = 1000

# How many steps of an IMAP source are read ahead of the one being sent.
# Reading a step takes longer than appending it (issue 31: per connection
# pair, the source's FETCH, its BINARY fetch and the hand-over against the
# destination's APPENDs), so with one step ahead the destination connection
# waited for each read; with two, the source reads two steps at once, on
# two of its connections (it has one more than the destination:
# imapmig.sources.imap.READ_AHEAD_CONNECTIONS), while one is sent.
IMAP_READ_AHEAD = 2


def readSteps(
    messages: Sequence[SourceMessage], firstMessages: int, stepMessages: int, stepBytes: int
) -> list[Sequence[SourceMessage]]:
    """
    Cut a unit's C{messages} into the steps it is read in: the first of at
    most C{firstMessages} messages, so the destination has something to
    send soon, then steps of at most C{stepMessages}; each of about
    C{stepBytes} octets at most (L{chunks}).
    """
    first = next(chunks(messages, firstMessages, stepBytes), None)
    if first is None:
        return []
    return [first, *chunks(messages[len(first) :], stepMessages, stepBytes)]


def closeBodies(bodies: Sequence[MessageBody]) -> None:
    """
    Close the files of the streamed bodies among C{bodies} (read, but never
    sent).
    """
    for body in bodies:
        if isinstance(body, StreamedBody):
            body.close()


class ReadAhead:
    """
    The steps of one unit, each read from the source while the one before
    is being sent.

    Call L{next} until it returns L{None}; call L{discard} when giving up
    early (stopping, or an error), so that a read still in flight has its
    result released and its failure consumed.
    """

    def __init__(
        self,
        source: IMessageSource,
        folder: SourceFolder,
        steps: Sequence[Sequence[SourceMessage]],
        ahead: int = 1,
        stop: RunStop | None = None,
        job: str | None = None,
    ) -> None:
        """
        @param source: where the bodies are read.
        @param folder: the unit's folder.
        @param steps: the unit's messages, cut into steps (in order).
        @param ahead: how many steps to read ahead of the one handed over;
            0 reads each step only when asked (for a source whose reads
            block the reactor, such as a Maildir, reading ahead only
            delays the sending).
        @param stop: the run's stop (L{None}: none): once asked, no read is
            started ahead (it would only hold the source, perhaps waiting
            for its throttle, while the job winds down).
        @param job: the name of the job reading, for its log events.
        """
        self._source = source
        self._folder = folder
        self._steps = steps
        self._ahead = int(ahead)
        self._stop = stop
        self._job = job
        # The next step to hand over, and the next one to start reading.
        self._index = 0
        self._started = 0
        # The reads in flight, of the steps from _index on, in order.
        self._reading: deque[Deferred[Sequence[MessageBody]]] = deque()

    async def next(self) -> tuple[Sequence[SourceMessage], Sequence[MessageBody]] | None:
        """
        The next step and its bodies, or L{None} when the unit is done; the
        reads of the steps after it (up to C{ahead}) start before this
        returns.

        @raise ImapmigError: the source failed (as its C{readBodies} does).
        """
        if self._index >= len(self._steps):
            return None
        step = self._steps[self._index]
        self._index += 1
        if self._reading:
            reading = self._reading.popleft()
        else:
            reading = self._read(step)
            self._started = self._index
        bodies = await reading
        if not (self._stop is not None and self._stop.requested):
            while len(self._reading) < self._ahead and self._started < len(self._steps):
                self._reading.append(self._read(self._steps[self._started]))
                self._started += 1
        return step, bodies

    def discard(self) -> None:
        """
        Give up the reads in flight, if any: their bodies are closed when
        they complete, their failures consumed.
        """
        reading, self._reading = self._reading, deque()
        for read in reading:
            read.addCallbacks(closeBodies, self._ignore)

    def _ignore(self, failure: Failure) -> None:
        """
        Consume the failure of a read nobody waits for any more: the
        attempt is ending (stopped, or failed for another reason); the next
        attempt reads those messages again.  A failure that is neither an
        operational one (L{ImapmigError}) nor a cancelled wait is a bug,
        and logged as one.
        """
        if not failure.check(ImapmigError, CancelledError):
            log.failure("Job {job}: a read given up failed", failure, job=self._job)

    def _read(self, step: Sequence[SourceMessage]) -> Deferred[Sequence[MessageBody]]:
        return ensureDeferred(self._source.readBodies(self._folder, step))
