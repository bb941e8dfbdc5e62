# -*- test-case-name: tests.test_imap_pipeline -*-
"""
The APPEND pipeline: many APPEND commands in flight on one connection.

How it is fast:
  - Non-synchronizing literals (C{{N+}}, RFC 7888) where the server offers
    LITERAL+ (any size) or LITERAL- (up to 4096 octets): the next command
    leaves without waiting for any reply.
  - MULTIAPPEND (RFC 3502) batches: the server pays its per-command cost
    (transaction, index update, fsync) once per batch.
  - Synchronizing literals otherwise (and under LITERAL- above 4096
    octets): a command holding one is written only when no earlier command
    awaits its reply.  Otherwise the server writes that reply and then the
    C{+}; a server that leaves Nagle's algorithm on (Courier-IMAP) holds
    the small C{+} until the reply is acknowledged, and the client, with
    nothing to send until the C{+} arrives, delays its ACK (about 40 ms on
    Linux): a stall per message that a one-by-one client never has.
    Waiting for the reply costs the same round trips (the C{+} cannot
    leave before the ACK anyway), and the next command line carries the
    ACK.  Commands with non-synchronizing literals may still follow a
    synchronizing literal in the same write.
  - Every write is one C{writeSequence} of whole commands (command line,
    literal and CRLF together, gathered up to about L{WRITE_GATHER}
    octets), so no small trailing segment waits on an ACK; on plain TCP
    it is one C{sendmsg} of the pieces themselves, unjoined, and what the
    socket does not take is sent the same way when it has room
    (L{imapmig.imap.gather}).
  - A window bounded by messages and octets in flight, and backpressure
    from the transport (the pipeline is its push producer), so memory stays
    bounded whatever the source size.

How it fails honestly:
  - A tagged C{OK} carrying C{[APPENDUID v uids]} (RFC 4315) gives each
    message its destination UID.
  - A C{NO}/C{BAD} about the message (C{[LIMIT]}, C{[TOOBIG]}, or any
    refusal not below) records that message as refused with the server's
    text; the rest keep flowing.
  - MULTIAPPEND is atomic: a refused batch is split in halves and retried
    until only the messages at fault are refused.
  - A C{NO}/C{BAD} or C{BYE} that says "not now" or "not here" (see
    L{imapmig.imap.signals}: wait, pause, mailbox gone, session over)
    refuses nothing: sending stops, the messages stay unsettled, and the
    pipeline fails with the typed error the job acts on (L{ServerBusy},
    L{QuotaExceeded}, L{MailboxMissing}, L{ConnectionLost}).
  - A lost connection leaves the outcome of in-flight messages unknown: they
    are reported as neither appended nor refused.
  - Given a send deadline (L{SendDeadline}, a fleet's daemon's), it is
    compared with its clock before each write: once it has passed, nothing
    more is written, the connection is aborted and the pipeline fails with
    L{LeaseLost}, whatever a reactor waking late from a stall had ready to
    send.

This module sees bytes and tags only; it knows nothing of folders, jobs or
the state store.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from typing import Callable, Iterable, Iterator

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.errors import ConnectionDropped, ConnectionLost, LeaseLost
from imapmig.imap.appenduid import parseAppendUID
from imapmig.imap.client import MigrationIMAP4Client, describeConnectionLoss
from imapmig.imap.gather import Piece, writerFor
from imapmig.imap.mailboxname import decodeMailboxName, encodeMailboxName
from imapmig.imap.outgoing import (
    LITERAL_MINUS_LIMIT,
    AppendOutcomes,
    LiteralMode,
    OutgoingMessage,
    PipelineSettings,
    SendDeadline,
)
from imapmig.imap.sendqueue import SendQueue
from imapmig.imap.signals import SignalAction, classifyBye, classifyRefusal, excerpt
from imapmig.log.logfields import withFields
from imapmig.mail.message import StreamedBody
from imapmig.progress.telemetry import LatencyHistogram, ServerTelemetry

# A literal larger than this is written in slices of STREAM_SLICE octets,
# each only when the transport has room, so that a 30 MB message is never
# copied whole into the transport's buffer.
STREAM_THRESHOLD = 1024 * 1024
STREAM_SLICE = 256 * 1024

# Whole commands are gathered into one write up to about this many octets;
# then they are written, and the pump goes on only if the transport has not
# paused it.  A transport that copies what it holds (TLS encrypts it into
# records, COMPRESS deflates it, Twisted's own joins it) then copies about
# this much, not the whole window; a plain TCP one holds views
# (imapmig.imap.gather).
WRITE_GATHER = 256 * 1024


class _AppendCommand:
    """
    One APPEND command in flight.

    @ivar sentUpTo: in synchronizing mode, the index of the message whose
        literal awaits the server's continuation.
    @ivar sentAt: when its last octet was written, if it was and telemetry
        measures the APPEND latency.
    """

    __slots__ = ("tag", "messages", "size", "sentUpTo", "sentAt")

    def __init__(self, tag: bytes, messages: list[OutgoingMessage], size: int) -> None:
        self.tag = tag
        self.messages = messages
        self.size = size
        self.sentUpTo = 0
        self.sentAt: float | None = None


def _memorySlices(body: bytes | bytearray) -> Iterator[Piece]:
    """
    A body held in memory, in views of L{STREAM_SLICE} octets, uncopied
    (L{imapmig.imap.gather} copies a view only for a transport that must
    hold it).
    """
    view = memoryview(body)
    for start in range(0, len(body), STREAM_SLICE):
        yield view[start : start + STREAM_SLICE]


class _LiteralStream:
    """
    A large literal being written slice by slice.

    @ivar index: the message of C{command} whose body it is.
    @ivar slices: the rest of the literal.
    @ivar ahead: the next slice, already read (the last slice leaves with
        the rest of the command, so it is known to be the last).
    """

    __slots__ = ("command", "index", "slices", "ahead")

    def __init__(self, command: _AppendCommand, index: int) -> None:
        self.command = command
        self.index = index
        self.ahead: Piece | None = None
        body = command.messages[index].body
        self.slices = (
            body.slices(STREAM_SLICE) if isinstance(body, StreamedBody) else _memorySlices(body)
        )


# The size above which a literal synchronizes, by literal mode.
_SYNC_ABOVE = {
    LiteralMode.PLUS: sys.maxsize,
    LiteralMode.MINUS: LITERAL_MINUS_LIMIT,
    LiteralMode.SYNC: -1,
}


def appendLiteralsPython(
    messages: list[OutgoingMessage], start: int, limit: int, budget: int, out: list[Piece]
) -> tuple[int, bool]:
    """
    Append to C{out} the non-synchronizing literals (plain or binary) of
    C{messages} from C{start} on, each its header and its body, up to the
    first one whose body is not in memory or is larger than C{limit} (a
    synchronizing or large literal, which L{AppendPipeline._writeLiterals}
    writes), or until C{budget} octets of bodies are gathered; return the
    index reached (or C{len(messages)}) and whether the budget stopped it.
    A bytearray body is appended as a view of it (no copy).

    The reference and the fallback of the C extension's
    L{appendLiterals}, which takes no bytecode a message.
    """
    index = start
    for message in messages[start:]:
        if budget <= 0:
            return index, True
        body = message.body
        if not isinstance(body, (bytes, bytearray)):
            return index, False
        size = len(body)
        if size > limit:
            return index, False
        opening = b" ~{" if message.binary else b" {"
        out.append(b"%s%s%d+}\r\n" % (message.arguments, opening, size))
        out.append(body if type(body) is bytes else memoryview(body))
        budget -= size
        index += 1
    return index, False


try:
    # Bound to OutgoingMessage by imapmig.imap.sendqueue.
    from imapmig.imap._append import appendLiterals as appendLiterals
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    appendLiterals = appendLiteralsPython


def _appended(outcomes: AppendOutcomes, messages: list[OutgoingMessage], rest: bytes) -> None:
    """
    The server stored C{messages}: tell C{outcomes}; C{rest} is its reply
    after C{OK}, with their UIDs where it carries an C{APPENDUID} for all of
    them.
    """
    appendUID = parseAppendUID(rest, len(messages))
    if appendUID is not None and len(appendUID[1]) == len(messages):
        outcomes.messagesAppended(messages, appendUID[0], appendUID[1])
    else:
        outcomes.messagesAppended(messages, None, None)


class _Waiters:
    """
    The Deferreds waiting for one condition of the pipeline (hungry,
    flushed, drained).

    @ivar waiting: they, in the order they asked.
    """

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: list[Deferred[None]] = []

    def wait(self) -> Deferred[None]:
        """
        A new waiter.
        """
        waiter: Deferred[None] = Deferred()
        self.waiting.append(waiter)
        return waiter

    def fire(self) -> None:
        """
        The condition holds: fire every waiter.
        """
        waiting, self.waiting = self.waiting, []
        for waiter in waiting:
            waiter.callback(None)

    def fail(self, failure: Failure) -> None:
        """
        The pipeline failed: fail every waiter with C{failure}.
        """
        waiting, self.waiting = self.waiting, []
        for waiter in waiting:
            waiter.errback(failure)


@implementer(IPushProducer)
class AppendPipeline:
    """
    Sends APPEND commands on one connection, as many at once as the
    protocol, the window and the transport allow.

    Use: L{selectMailbox}, L{enqueue} messages for it, wait on L{hungry} to
    enqueue more and on L{drained} for the last replies.  Each message goes
    to the mailbox selected when it was enqueued (which may change while
    earlier ones are queued or in flight); a batch never mixes mailboxes.

    @ivar messagesInFlight: messages sent, awaiting their reply.
    @ivar bytesInFlight: their octets.
    """

    _log = Logger()

    def __init__(
        self,
        client: MigrationIMAP4Client,
        settings: PipelineSettings,
        outcomes: AppendOutcomes,
        telemetry: ServerTelemetry | None = None,
        deadline: SendDeadline | None = None,
    ) -> None:
        """
        @param telemetry: the destination server's telemetry, given the
            window and each command's APPEND latency; L{None}: none.
        @param deadline: past it nothing more is written (a fleet's
            daemon's send deadline); L{None}: none.
        """
        self._client = client
        self._log = withFields(self._log, client.logFields)
        self._telemetry = telemetry
        self._deadline = deadline
        self._seconds: Callable[[], float] | None = None
        self._latency: LatencyHistogram | None = None
        self._settings = settings
        self._outcomes = outcomes
        self._mailbox = b""
        self._pending = SendQueue(settings)
        self._inFlight: dict[bytes, _AppendCommand] = {}
        self.messagesInFlight = 0
        self.bytesInFlight = 0
        self._blocked: _AppendCommand | None = None
        self._stream: _LiteralStream | None = None
        # A command written up to a gather: where the rest of it starts.
        self._resume: tuple[_AppendCommand, int] | None = None
        self._paused = False
        self._failure: Failure | None = None
        self._drained = _Waiters()
        self._hungry = _Waiters()
        self._flushed = _Waiters()
        self._syncAbove = _SYNC_ABOVE[settings.literalMode]
        client.pipeline = self
        client.connection.registerProducer(self, True)
        self._writer = writerFor(client.connection)
        if telemetry is not None:
            self._seconds = telemetry.seconds
            self._latency = telemetry.appendLatency
            telemetry.pipelineOpened(self)
        if settings.literalMode is not LiteralMode.PLUS:
            # Waiting with replies due (before a synchronizing literal),
            # imapmig has nothing to send that would carry the ACK a
            # server that leaves Nagle on waits for.
            client.acknowledgeEachRead()

    @property
    def settings(self) -> PipelineSettings:
        """
        How this pipeline sends.
        """
        return self._settings

    @property
    def busy(self) -> bool:
        """
        Whether commands are in flight.
        """
        return bool(self._inFlight)

    @property
    def idle(self) -> bool:
        """
        Whether nothing is queued, waiting for a retry or in flight.
        """
        return not self._inFlight and self._pending.empty

    def ownsTag(self, tag: bytes) -> bool:
        """
        Whether C{tag} is one of this pipeline's commands.
        """
        return tag in self._inFlight

    def selectMailbox(self, mailbox: str) -> None:
        """
        Send the messages enqueued from now on to C{mailbox}.
        """
        self._mailbox = encodeMailboxName(mailbox)

    def sizeBatchesFor(self, mailboxMessages: int, most: int = sys.maxsize) -> int:
        """Size batches for a mailbox of C{mailboxMessages}, C{most} at most (SendQueue.resize)."""
        self._pending.resize(batch := min(most, self._settings.batchFor(mailboxMessages)), most)
        return batch

    @property
    def betweenCommands(self) -> bool:
        """
        Whether the last command written is complete, so that another
        command may be written now (no synchronizing literal awaits its
        continuation, no large literal is half-written).
        """
        return self._blocked is None and self._stream is None and self._resume is None

    def enqueue(self, messages: Iterable[OutgoingMessage]) -> None:
        """
        Queue C{messages} for the current mailbox and send what the window
        allows.

        @raise ConnectionLost: the connection is gone.
        """
        if self._failure is not None:
            self._failure.raiseException()
        self._pending.add(messages, self._mailbox)
        self._pump([])

    def hungry(self) -> Deferred[None]:
        """
        Fires when fewer messages are queued than keep full batches going,
        so the caller should enqueue more.
        """
        return self._when(self._pending.hungry, self._hungry)

    def flushed(self) -> Deferred[None]:
        """
        Fires when everything queued has been written and the pipeline is
        L{betweenCommands}: then another command may be written.
        """
        return self._when(self._isFlushed(), self._flushed)

    def drained(self) -> Deferred[None]:
        """
        Fires when every queued message has its outcome.
        """
        return self._when(self.idle, self._drained)

    def _when(self, ready: bool, waiters: _Waiters) -> Deferred[None]:
        """
        Fired now if C{ready}, else when C{waiters} fire (a batch held for
        more goes now: SendQueue.next); failed if the pipeline has failed.
        """
        if self._failure is not None:
            return fail(self._failure)
        if ready:
            return succeed(None)
        waiter = waiters.wait()
        if waiters is not self._hungry:
            self._pump([])
        return waiter

    def _isFlushed(self) -> bool:
        """
        Whether everything queued has been written and the pipeline is
        L{betweenCommands}.
        """
        return self._pending.empty and self.betweenCommands

    def close(self) -> None:
        """
        Stop producing on the transport; the pipeline must be idle.
        """
        if self._telemetry is not None:
            self._telemetry.pipelineClosed(self)
        if self._client.pipeline is self:
            self._client.pipeline = None
            if self._failure is None:
                self._client.connection.unregisterProducer()

    # IPushProducer: the transport's backpressure.

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        self._pump([])

    def stopProducing(self) -> None:
        self._paused = True

    # Sending.

    def _pump(self, out: list[Piece]) -> None:
        """
        Send as many commands as allowed, as one write.

        @param out: pieces already due on the wire (the rest of a command
            whose continuation just arrived), written first.
        """
        gathered = 0
        # A short batch waits for more unless the caller waits (SendQueue.next).
        short = bool(self._flushed.waiting or self._drained.waiting)
        while not self._paused:
            if self._stream is not None:
                self._writeSlice(self._stream, out)
                continue
            if self._resume is not None:
                # The rest of a long command, a gather at a time, each only
                # while the transport takes more: its buffer holds one.
                if out:
                    self._write(out)
                    if self._paused:
                        break
                command, index = self._resume
                self._resume = None
                self._writeLiterals(command, index, out)
                continue
            if self._blocked is not None:
                break
            batch = self._pending.next(self.messagesInFlight, self.bytesInFlight, short)
            if batch is None:
                break
            gathered += self._writeCommand(batch[0], batch[1], out)
            if gathered >= WRITE_GATHER:
                self._write(out)
                gathered = 0
        if out:
            self._write(out)
        # Each condition is computed only where some wait: this runs after
        # every write and every reply.
        if self._hungry.waiting and self._pending.hungry:
            self._hungry.fire()
        if self._flushed.waiting and self._isFlushed():
            self._flushed.fire()

    def _writeCommand(self, batch: list[OutgoingMessage], size: int, out: list[Piece]) -> int:
        """
        Append to C{out} a new APPEND command of C{batch} (of C{size}
        octets), now in flight, as far as L{_writeLiterals} goes.

        @return: C{size}.
        """
        tag = self._client.makeTag()
        command = _AppendCommand(tag, batch, size)
        self._inFlight[tag] = command
        self.messagesInFlight += len(batch)
        self.bytesInFlight += size
        self._writeLiterals(command, 0, out)
        return size

    def _writeSlice(self, stream: _LiteralStream, out: list[Piece]) -> None:
        """
        Write the next slice of a large literal (after what C{out} holds);
        after the last slice, append the rest of its command to C{out}.

        A streamed body that can no longer be read as announced cannot be
        completed honestly: that message is refused with the reason and
        the connection is aborted (the server discards the unfinished
        command).
        """
        try:
            piece = stream.ahead
            if piece is None:
                piece = next(stream.slices, b"")
            stream.ahead = next(stream.slices, None)
        except OSError as e:
            self._abandonLiteral(stream, out, f"unreadable in the source: {e.strerror or e}")
            return
        out.append(piece)
        if stream.ahead is None:
            self._stream = None
            self._writeLiterals(stream.command, stream.index + 1, out)
            return
        self._write(out)

    def _abandonLiteral(self, stream: _LiteralStream, out: list[Piece], reason: str) -> None:
        """
        Give up a literal half sent: refuse its message, write what is due
        and abort the connection.
        """
        self._stream = None
        command = stream.command
        message = command.messages.pop(stream.index)
        self.messagesInFlight -= 1
        self.bytesInFlight -= len(message.body)
        command.size -= len(message.body)
        self._log.error(
            "Cannot finish sending a message, aborting the connection: {reason}",
            reason=reason,
            session=self._client.peer,
        )
        self._outcomes.messageRefused(message, reason)
        self._write(out)
        self._paused = True
        self._client.connection.abortConnection()

    def _write(self, out: list[Piece]) -> None:
        """
        Write C{out} and empty it, unless the send deadline has passed.
        """
        deadline = self._deadline
        if deadline is not None and deadline.passed():
            self._deadlinePassed()
        else:
            self._writer.writeSequence(out)
        out.clear()

    def _deadlinePassed(self) -> None:
        """
        The send deadline passed before a write: write nothing, abort the
        connection (an RST, which drops what the kernel has not sent),
        fail with L{LeaseLost}; what is in flight or queued stays
        unsettled, journaled for the job's next owner.
        """
        self._log.warn(
            "The send deadline passed before a write; aborting the connection,"
            " nothing more is sent",
            session=self._client.peer,
        )
        self._fail(LeaseLost("the send deadline passed before a write"))
        self._client.connection.abortConnection()

    def _writeLiterals(self, command: _AppendCommand, start: int, out: list[Piece]) -> None:
        """
        Append to C{out} the part of C{command} from message C{start} on, up
        to its end, to the first synchronizing literal, or to the first
        large literal (which L{_writeSlice} then writes).
        """
        messages = command.messages
        syncAbove = self._syncAbove
        if not start:
            out.append(b"%s APPEND %s" % (command.tag, messages[0].mailbox))
        index, gathered = appendLiterals(
            messages, start, min(syncAbove, STREAM_THRESHOLD), WRITE_GATHER, out
        )
        if gathered:
            self._resume = (command, index)
            return
        if index < len(messages):
            # A synchronizing literal, or a large or streamed one.
            message = messages[index]
            size = len(message.body)
            opening = b" ~{" if message.binary else b" {"
            if size > syncAbove:
                out.append(b"%s%s%d}\r\n" % (message.arguments, opening, size))
                command.sentUpTo = index
                self._blocked = command
                return
            out.append(b"%s%s%d+}\r\n" % (message.arguments, opening, size))
            self._stream = _LiteralStream(command, index)
            return
        out.append(b"\r\n")
        # Written now: out goes to the transport before the reactor runs.
        seconds = self._seconds
        if seconds is not None:
            command.sentAt = seconds()

    # Receiving, called by the client.

    def continuationReceived(self, text: bytes) -> None:
        """
        The server is ready for the literal we are waiting to send.
        """
        command = self._blocked
        if command is None:
            self._log.error(
                "Unexpected continuation request from the server: {text}",
                text=excerpt(text),
                session=self._client.peer,
            )
            self._client.connection.loseConnection()
            return
        self._blocked = None
        index = command.sentUpTo
        body = command.messages[index].body
        if len(body) > STREAM_THRESHOLD or isinstance(body, StreamedBody):
            self._stream = _LiteralStream(command, index)
            self._pump([])
            return
        out: list[Piece] = [body if type(body) is bytes else memoryview(body)]
        self._writeLiterals(command, index + 1, out)
        self._pump(out)

    def untaggedReceived(self, text: bytes) -> None:
        """
        An untagged reply while APPENDs are in flight: C{EXISTS} and
        C{RECENT} are expected and ignored; a C{BYE} fails the pipeline at
        once with what it means (L{classifyBye}: L{ServerBusy},
        L{QuotaExceeded}, or L{ConnectionLost}), the messages in flight
        left unsettled; anything else worth an admin's eye is logged.
        """
        if text.endswith((b" EXISTS", b" RECENT")):
            return
        status, _, rest = text.partition(b" ")
        if status.upper() == b"BYE":
            error = classifyBye(rest).error("APPEND")
            assert error is not None
            self._fail(error)
        elif text.startswith((b"NO", b"BAD")) or b"[ALERT]" in text:
            self._log.warn("Server says: {text}", text=excerpt(text), session=self._client.peer)

    def taggedReceived(self, tag: bytes, text: bytes) -> None:
        """
        The reply to one of our APPEND commands.

        A refusal is classified (L{classifyRefusal}): one that says "not
        now" or "not here" (wait, pause, mailbox gone, session over) keeps
        the command's messages, and everything after them, unsettled and
        fails the pipeline with the error the job acts on; one that is
        about what was sent refuses the message (a MULTIAPPEND batch is
        split first, to find the messages at fault).
        """
        command = self._inFlight.pop(tag)
        self._landed(command)
        status, _, rest = text.partition(b" ")
        if status == b"OK":
            _appended(self._outcomes, command.messages, rest)
        else:
            self._refused(command.messages, status, rest)
        self._pump([])
        if self._drained.waiting and self.idle:
            self._drained.fire()

    def _landed(self, command: _AppendCommand) -> None:
        """
        C{command} was answered: it leaves the window, and its latency is
        observed.
        """
        self.messagesInFlight -= len(command.messages)
        self.bytesInFlight -= command.size
        sentAt = command.sentAt
        if sentAt is not None:
            # LatencyHistogram.observe, inlined: this runs once per command.
            latency = self._latency
            seconds = self._seconds
            assert latency is not None and seconds is not None
            elapsed = seconds() - sentAt
            latency.counts[bisect_left(latency.bounds, elapsed)] += 1
            latency.sum += elapsed
        if self._blocked is command:
            # Refused before the server asked for the rest of it.
            self._blocked = None

    def _refused(self, messages: list[OutgoingMessage], status: bytes, rest: bytes) -> None:
        """
        The server refused the command of C{messages} (C{status} C{NO} or
        C{BAD}, C{rest} its text): see L{taggedReceived}.
        """
        signal = classifyRefusal(status, rest)
        if signal.action is not SignalAction.REFUSE:
            self._pending.sendFirst(messages)
            error = signal.error("APPEND", decodeMailboxName(messages[0].mailbox))
            assert error is not None
            self._fail(error)
        elif len(messages) > 1:
            # MULTIAPPEND is atomic: nothing of this batch was stored.
            # Retry the halves first, before anything still queued.
            self._pending.split(messages)
        else:
            self._outcomes.messageRefused(messages[0], signal.reply)

    def connectionLost(self, reason: Failure) -> None:
        """
        The connection is gone: in-flight messages have an unknown outcome,
        queued ones were never sent; every waiter fails.
        """
        if self._failure is not None:
            return
        assert reason.value is not None
        text = (
            f"connection lost with {self.messagesInFlight} messages awaiting their "
            f"reply: {describeConnectionLoss(reason.value)}"
        )
        # Still a ConnectionDropped when imapmig ended it: the server may
        # then be working through what it read (see MigrationJob._reconcile).
        dropped = isinstance(reason.value, ConnectionDropped)
        self._fail(ConnectionDropped(text) if dropped else ConnectionLost(text))

    def _fail(self, error: Exception) -> None:
        """
        Stop sending, and fail every waiter with C{error}.
        """
        if self._failure is None:
            self._failure = Failure(error)
            if self._telemetry is not None:
                self._telemetry.pipelineClosed(self)
        self._paused = True
        for waiters in (self._drained, self._hungry, self._flushed):
            waiters.fail(self._failure)

    def unsettled(self) -> list[OutgoingMessage]:
        """
        Messages whose outcome is not known: in flight, waiting for a retry,
        or queued.
        """
        result: list[OutgoingMessage] = []
        for command in self._inFlight.values():
            result.extend(command.messages)
        result.extend(self._pending.unsettled())
        return result
