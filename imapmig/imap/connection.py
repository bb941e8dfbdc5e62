# -*- test-case-name: tests.test_imap_client,tests.test_job_retry -*-
"""
One connection to an IMAP server, as the migration's client holds it: its
life (greeting, TLS handshake, close, abort, who ended it), the reply
deadline, peer misbehaviour, the stock command queue and the tags.

The lowest of the three layers of L{imapmig.imap.client.MigrationIMAP4Client}
(with L{imapmig.imap.responses}, which reads what the server sends, and the
client's commands); taken out of the client's one class of 979 lines.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionClosed
from twisted.internet.interfaces import IHandshakeListener, IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.mail.imap4 import Command, IMAP4Client
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.errors import ConnectionDropped, ProtocolError, ReplyTimeout, ServerBye
from imapmig.imap.acks import ImmediateAcks
from imapmig.imap.commands import (
    CollectedCommand,
    CollectingCommand,
    PendingCommand,
    StockCommand,
    commandName,
)
from imapmig.imap.compress import Compression
from imapmig.imap.deadline import ReplyDeadline
from imapmig.imap.fetch import FetchResponseParser
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.lines import LinearLineReceiver
from imapmig.imap.starttls import TLSHandshake
from imapmig.imap.tags import TagTable
from imapmig.log.logfields import withFields

if TYPE_CHECKING:
    from imapmig.imap.pipeline import AppendPipeline

__all__ = ["IMAPConnection", "MAX_LINE_LENGTH", "setNoDelay"]

MAX_LINE_LENGTH = 1024 * 1024
"""
The longest line accepted from a server.  The longest real ones are a
FETCH or FLAGS line listing a mailbox's keywords and a LIST line; imapmig
sends no SEARCH.  1 MiB holds some 20,000 keywords of 50 octets (Dovecot's
longest keyword), two orders of magnitude more than seen in practice; a
longer line is a protocol error, detected as soon as the line passes the
limit.
"""


def setNoDelay(transport: object) -> bool:
    """
    Turn off Nagle's algorithm on C{transport} (or the TCP transport under a
    TLS wrapper, which forwards the call).

    @return: whether the transport supports it.
    """
    setTcpNoDelay = getattr(transport, "setTcpNoDelay", None)
    if setTcpNoDelay is None:
        return False
    setTcpNoDelay(True)
    return True


@implementer(IPushProducer)
class _WatchedProducer:
    """
    A push producer as the transport sees it, telling the client when the
    transport pauses and resumes it: a resume is progress for the deadline
    (the server read what we sent).
    """

    def __init__(self, producer: IPushProducer, client: IMAPConnection) -> None:
        self._producer = producer
        self._client = client

    def pauseProducing(self) -> None:
        self._client.writesPaused()
        self._producer.pauseProducing()

    def resumeProducing(self) -> None:
        self._client.writesResumed()
        self._producer.resumeProducing()

    def stopProducing(self) -> None:
        self._producer.stopProducing()


_AWAITED = {
    "the greeting": "no greeting within {seconds}",
    "APPEND": "no reply to APPEND within {seconds}",
    "the close": "the connection did not close within {seconds}",
    "reading": "the server read nothing imapmig sent for {seconds}",
}
"""
The sentence saying what the server owed did not come, by what it owed;
any other is the reply to a command of that name.
"""


def _failQueued(queued: list[Command], reason: Failure) -> None:
    """
    Fail the stock commands still queued (never sent) with C{reason}.
    """
    for stock in queued:
        if stock.defer is not None:
            d, stock.defer = stock.defer, None
            d.errback(Failure(reason.value, reason.type, reason.tb))


@implementer(IHandshakeListener)
class IMAPConnection(LinearLineReceiver, IMAP4Client):
    """
    An L{IMAP4Client} connection for migrations: its life, its deadline,
    what happens when the server misbehaves, and the stock command queue
    (one command at a time).  Reading what the server sends is
    L{imapmig.imap.responses.ResponseReader}'s; the commands are
    L{imapmig.imap.client.MigrationIMAP4Client}'s.

    @ivar greeted: fires with the greeting's capabilities (or L{None}) when
        the server's greeting arrives.
    @ivar pipeline: the APPEND pipeline that owns the tags it sent, or
        L{None}; while it has commands in flight the session sends no other
        command.
    @ivar closed: fires when the connection is lost.
    @ivar logFields: the fields of every log event about this connection.
    """

    MAX_LENGTH = MAX_LINE_LENGTH
    _log = Logger()

    def __init__(
        self,
        clock: IReactorTime,
        timeout: float = 0,
        peer: str | None = None,
        logFields: Mapping[str, object] | None = None,
    ) -> None:
        """
        @param clock: schedules the reply deadline.
        @param timeout: seconds the server may leave imapmig waiting for
            what it owes without progress (see L{imapmig.imap.deadline});
            0 disables the deadline.
        @param peer: who the server is, for log lines (C{"alice at
            tcp:mail.example.org:143"}); by default its address.
        @param logFields: fields every log event about this connection
            carries, its own and its pipeline's and session's (the job it
            works for: C{{"job": "alice"}}; L{imapmig.log.logfields}).
        """
        IMAP4Client.__init__(self)
        self.logFields: Mapping[str, object] = dict(logFields or {})
        self._log = withFields(self._log, self.logFields)
        LinearLineReceiver.__init__(self)
        self._clock = clock
        self._peer = peer
        self._deadline = ReplyDeadline(clock, timeout, self._expired) if timeout > 0 else None
        self.greeted: Deferred[dict[bytes, Any] | None] = Deferred()
        self.closed: Deferred[None] = Deferred()
        self.pipeline: AppendPipeline | None = None
        self._table = TagTable()
        self._fetchParser = FetchResponseParser(self._fetchedItem)
        self._responseOctets = 0
        self._compression: Compression | None = None
        self._writesPaused = False
        self._closing = False
        self._loggingOut = False
        self._byeText: str | None = None
        self._dropped: ConnectionDropped | None = None
        self._lost: Failure | None = None
        self._unsolicited = 0
        self._tls = TLSHandshake()
        self._acks: ImmediateAcks | None = None
        # Answers the continuation requests of an AUTHENTICATE in flight.
        self._responder: Callable[[bytes], bytes | None] | None = None

    @property
    def connection(self) -> Any:
        """
        The transport.  Typed loosely: a TCP transport and a TLS one offer
        different interfaces (producer registration, TCP options, abort).
        """
        return self.transport

    @property
    def peer(self) -> str:
        """
        Who the server is, for log lines.
        """
        if self._peer is None:
            address = self.transport.getPeer() if self.transport is not None else None
            host, port = getattr(address, "host", None), getattr(address, "port", None)
            self._peer = f"{host}:{port}" if host is not None else str(address)
        return self._peer

    @property
    def dropReason(self) -> ConnectionDropped | None:
        """
        Why imapmig dropped the connection, if it did.
        """
        return self._dropped

    # Connection life.

    def connectionMade(self) -> None:
        # Not IMAP4Client.connectionMade: it would start TimeoutMixin.
        setNoDelay(self.transport)
        self._tls.connected(self.transport)
        if self._deadline is not None:
            self._deadline.arm()

    def serverGreeting(self, caps: dict[bytes, Any] | None) -> None:
        if not self.greeted.called:
            self.greeted.callback(caps)

    def handshakeCompleted(self) -> None:
        """
        The TLS handshake (implicit, or after STARTTLS) finished.
        """
        self._tls.completed()

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._failAll(self._lossReason(_ownReason(reason)))
        if self._deadline is not None:
            self._deadline.disarm()
        if not self.closed.called:
            self.closed.callback(None)

    def _lossReason(self, reason: Failure) -> Failure:
        """
        Why the connection ended, as its pending commands fail: imapmig
        dropped it, the server said BYE, the TLS handshake failed (said
        once here, with what the server sent), or C{reason} as Twisted
        gives it.
        """
        if self._dropped is not None:
            return Failure(self._dropped)
        if self._byeText is not None and not self._loggingOut:
            return Failure(ServerBye(self._byeText))
        if self._tls.underway:
            return self._tls.failure(reason, self.transport)
        return reason

    def close(self) -> None:
        """
        Close the connection cleanly (C{loseConnection}), and abort it if it
        is not closed within the timeout: a server that stops reading
        cannot leave it half-closed.
        """
        if self._closing or self.closed.called or self._dropped is not None:
            return
        self._closing = True
        self.connection.loseConnection()
        if not self.closed.called:
            self._restartDeadline()

    def _restartDeadline(self) -> None:
        """
        Give the server the full timeout again, from now (for the close).
        """
        deadline = self._deadline
        if deadline is not None:
            deadline.disarm()
            deadline.arm()

    def abort(self, reason: str) -> None:
        """
        Drop the connection now (C{abortConnection}); every pending command
        fails with a L{ConnectionDropped} carrying C{reason}.  Not logged:
        the caller says why, if it must.
        """
        if self._dropped is None and not self.closed.called:
            self._drop(ConnectionDropped(reason))

    def _drop(self, error: ConnectionDropped) -> None:
        """
        Give up on the connection: abort it and fail everything pending.
        """
        self._dropped = error
        if self._deadline is not None:
            self._deadline.disarm()
        self.connection.abortConnection()
        self._failAll(Failure(error))

    def _failAll(self, reason: Failure) -> None:
        """
        Nothing pending will ever be answered: fail it all with C{reason}.
        """
        if self._lost is not None:
            return
        self._lost = reason
        commands = self._table.clear()
        queued, self.queued = self.queued, []
        self.waiting = None
        self._fetchParser.reset()
        for command in commands:
            command.fail(reason)
        _failQueued(queued, reason)
        pipeline = self.pipeline
        if pipeline is not None:
            pipeline.connectionLost(reason)
        if not self.greeted.called:
            self.greeted.errback(Failure(reason.value, reason.type, reason.tb))

    def _failed(self) -> Deferred[Any]:
        """
        A Deferred failed with why the connection ended, for a command
        asked for after that.
        """
        assert self._lost is not None
        return fail(Failure(self._lost.value, self._lost.type, self._lost.tb))

    # The deadline.

    def _owed(self) -> bool:
        pipeline = self.pipeline
        return bool(
            self._table.commands
            or (pipeline is not None and pipeline.busy)
            or self._writesPaused
            or self._closing
        )

    def _settled(self) -> None:
        """
        A reply came: if more is owed, the deadline runs from when the
        oldest command still unanswered was sent (each command's reply is
        due within the timeout of its sending, however many replies to
        other commands arrive meanwhile: a server dripping replies cannot
        hold a window of commands for ever); else stop the deadline.
        """
        deadline = self._deadline
        if deadline is not None:
            if self._owed():
                deadline.progress(since=next(iter(self._table.sentAt.values()), None))
            else:
                deadline.disarm()

    def writesPaused(self) -> None:
        """
        The transport paused our writes (its buffer is full): the server
        owes us reading them.
        """
        self._writesPaused = True
        if self._deadline is not None:
            self._deadline.arm()

    def writesResumed(self) -> None:
        """
        The transport resumed our writes: the server read what was
        buffered, which is progress.
        """
        self._writesPaused = False
        deadline = self._deadline
        if deadline is not None:
            # Not since the oldest command was sent: while its literal is
            # still being written (a large message on a slow link), what is
            # owed is reading it, and reading is progressing.
            if self._owed():
                deadline.progress()
            else:
                deadline.disarm()

    def watchWrites(self, producer: IPushProducer) -> None:
        """
        Register C{producer} (the APPEND pipeline, already registered) with
        the transport again, through a wrapper that tells the deadline when
        the transport pauses and resumes it.
        """
        transport = self.connection
        transport.unregisterProducer()
        transport.registerProducer(_WatchedProducer(producer, self), True)

    def _awaited(self) -> tuple[str, str]:
        """
        What the server owes, and the sentence saying it did not come.
        """
        seconds = f"{self._deadline.seconds:g} s" if self._deadline is not None else ""
        awaited = self._awaitedName()
        sentence = _AWAITED.get(awaited, "no reply to {awaited} within {seconds}")
        return awaited, sentence.format(awaited=awaited, seconds=seconds)

    def _awaitedName(self) -> str:
        """
        What the server owes: the greeting, the reply to APPEND or to the
        oldest command, the close, or reading what was sent.
        """
        if self.state is None:
            return "the greeting"
        pipeline = self.pipeline
        if pipeline is not None and pipeline.busy:
            return "APPEND"
        oldest = self._table.oldest()
        if oldest is not None:
            return oldest.name.decode("ascii", "replace")
        return "the close" if self._closing else "reading"

    def _expired(self) -> None:
        assert self._deadline is not None
        awaited, reason = self._awaited()
        if self._closing and awaited == "the close":
            self._log.warn(
                "{session}: {reason}; imapmig is aborting it", session=self.peer, reason=reason
            )
        else:
            self._log.error(
                "{session}: {reason}; imapmig is dropping the connection",
                session=self.peer,
                reason=reason,
            )
        self._drop(ReplyTimeout(reason, awaited, self._deadline.seconds))

    # Peer misbehaviour, and our own.

    def _violation(self, what: str, data: bytes) -> None:
        """
        The server broke the protocol: one log line, abort, fail everything
        pending with L{ProtocolError}.
        """
        if self._dropped is not None:
            return
        error = ProtocolError(what, data)
        self._log.error(
            "{session}: protocol error: {what}: {excerpt}; imapmig is dropping the connection",
            session=self.peer,
            what=what,
            excerpt=error.excerpt,
        )
        self._drop(error)

    def _bug(self) -> None:
        """
        An exception of ours while handling what the server sent: log it
        with its traceback (from within the C{except} block) and drop the
        connection.
        """
        self._log.failure("{session}: internal error in the IMAP client", session=self.peer)
        if self._dropped is None:
            self._drop(ConnectionDropped("internal error in imapmig's IMAP client (see the log)"))

    def lineLengthExceeded(self, line: bytes) -> None:
        self._violation(f"a line longer than {self.MAX_LENGTH} octets", line)

    # Sending.

    def makeTag(self) -> bytes:
        # Every tag made is a command about to be owed a reply, the APPEND
        # pipeline's included: the deadline starts (if it is not running).
        tag = b"%04X" % self.tagID
        self.tagID += 1
        deadline = self._deadline
        if deadline is not None:
            deadline.arm()
            self._table.sentAt[tag] = self._clock.seconds()
        return tag

    def sendCommand(self, cmd: Command) -> Deferred[Any]:
        """
        Queue a stock command; it is written when the one before it is
        answered.
        """
        if self._lost is not None:
            return self._failed()
        d: Deferred[Any] = Deferred()
        cmd.defer = d  # type: ignore[assignment]
        if self.waiting:
            self.queued.append(cmd)
        else:
            self._sendStock(cmd)
        return d

    def _flushQueue(self) -> None:
        if self.queued:
            self._sendStock(self.queued.pop(0))

    def _sendStock(self, cmd: Command) -> None:
        tag = self.makeTag()
        self.waiting = tag
        entry: PendingCommand
        if isinstance(cmd, CollectingCommand):
            entry = CollectedCommand(
                tag, commandName(cmd.command), cast(Deferred[Any], cmd.defer), cmd.lines, True
            )
        else:
            entry = StockCommand(tag, cmd)
        self._table.add(entry)
        self.sendLine(cmd.format(tag))

    def _sendNow(self, entry: PendingCommand, command: bytes) -> None:
        self._table.add(entry)
        self.connection.write(entry.tag + b" " + command + b"\r\n")

    # Reading.

    def _fetchedItem(self, item: FetchedItem) -> None:
        """
        Hand a FETCH response to the sink of the oldest fetch command.
        """
        for command in self._table.fetches.values():
            try:
                command.sink(item)
            except Exception:
                self._bug()
            return


    def stopReading(self) -> bool:
        return self._lost is not None or LinearLineReceiver.stopReading(self)

    def acknowledgeEachRead(self) -> bool:
        """
        From now on, have the kernel acknowledge each read at once
        (L{imapmig.imap.acks}): for a pipeline that waits with several
        replies due, on a server that may leave Nagle on.

        @return: whether it could (Linux, a TCP socket under the
            transport).
        """
        if self._acks is None:
            self._acks = ImmediateAcks.forTransport(self.transport)
        return self._acks is not None

    @property
    def acknowledgingEachRead(self) -> bool:
        """
        Whether the kernel is told to acknowledge each read at once.
        """
        return self._acks is not None and self._acks.active


def _ownReason(reason: Failure) -> Failure:
    """
    C{reason} with an error of this connection's own.  Twisted ends
    connections with shared instances (C{twisted.internet.main}'s
    C{CONNECTION_DONE} and C{CONNECTION_LOST}); raised where a command
    waited, one keeps that traceback, and the next L{Failure} made of it
    takes it on (and adds to it): every failed attempt's frames (a job's
    listing among their locals) stayed alive for the process's life.
    Only those endings are copied: their constructors take only their
    arguments.
    """
    if not isinstance(reason.value, ConnectionClosed):
        return reason
    return Failure(copy.copy(reason.value).with_traceback(None))
