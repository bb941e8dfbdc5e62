# -*- test-case-name: tests.test_imap_client -*-
"""
The IMAP protocol adapter: Twisted's L{IMAP4Client} with what a migration
needs and it lacks.

It reuses the stock command queue, and adds:
  - C{TCP_NODELAY} on every connection (plain TCP, implicit TLS, and again
    after STARTTLS), so no small segment waits on a delayed ACK;
  - one command table: every tagged reply is matched, in one place, to the
    command it answers (stock queue, pipelined, collecting, fetch, or the
    APPEND pipeline's side of the table, L{imapmig.imap.pipeline}); a tag
    nobody sent is a protocol error;
  - a reply deadline (L{imapmig.imap.deadline}) instead of Twisted's idle
    timeout: it runs while the server owes something and only real
    progress restarts it; on expiry the connection is aborted;
  - bounds on what a server can make it hold (L{MAX_LINE_LENGTH},
    L{MAX_RESPONSE_LENGTH}, L{imapmig.imap.commands.MAX_COLLECTED_RESPONSES})
    and line splitting in linear time (L{imapmig.imap.lines});
  - peer misbehaviour (garbage, an unknown tag, a continuation nobody
    asked for, a limit crossed) is one log line, an aborted connection and
    every pending command failed with L{ProtocolError}: never a traceback;
  - who ended a connection is recorded (L{describeConnectionLoss});
  - COMPRESS=DEFLATE (RFC 4978, L{imapmig.imap.compress});
  - pipelined C{UID FETCH} commands whose untagged FETCH responses, bodies
    included, are read by L{imapmig.imap.fetch.FetchResponseParser}
    (L{MigrationIMAP4Client.fetchInto}).

No migration logic lives here.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from twisted.internet import error as netError
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IHandshakeListener, IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.mail.imap4 import Command, IMAP4Client, IMAP4Exception, parseNestedParens
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.access.cleartext import openSSLLoaded
from imapmig.errors import (
    ConnectionDropped,
    FetchParseError,
    ProtocolError,
    ReplyTimeout,
    ServerBye,
    escapedExcerpt,
)
from imapmig.imap.acks import ImmediateAcks
from imapmig.imap.commands import (
    CollectedCommand,
    CollectingCommand,
    FetchCommand,
    FetchSink,
    PendingCommand,
    StockCommand,
    commandName,
)
from imapmig.imap.compress import (
    DEFAULT_LEVEL,
    CompressionStats,
    DeflateTransport,
    Inflater,
    compressionStats,
)
from imapmig.imap.deadline import ReplyDeadline
from imapmig.imap.signals import SignalAction, classifyBye
from imapmig.imap.fetch import FetchResponseParser, isFetchResponse
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.lines import LinearLineReceiver
from imapmig.log.logfields import withFields

if TYPE_CHECKING:
    from imapmig.imap.pipeline import AppendPipeline

__all__ = [
    "FetchSink",
    "MAX_LINE_LENGTH",
    "MAX_RESPONSE_LENGTH",
    "MigrationIMAP4Client",
    "describeConnectionLoss",
    "setNoDelay",
]

MAX_LINE_LENGTH = 1024 * 1024
"""
The longest line accepted from a server.  The longest real ones are a
FETCH or FLAGS line listing a mailbox's keywords and a LIST line; imapmig
sends no SEARCH.  1 MiB holds some 20,000 keywords of 50 octets (Dovecot's
longest keyword), two orders of magnitude more than seen in practice; a
longer line is a protocol error, detected as soon as the line passes the
limit.
"""

MAX_RESPONSE_LENGTH = 1024 * 1024
"""
The octets of one untagged response other than FETCH (lines and literals
together: a mailbox name sent as a literal): a larger literal announced is
a protocol error before any of it is read.  FETCH responses are read by
L{imapmig.imap.fetch}, with its own limits.
"""

_UNSOLICITED_LOGGED = 10
"""
Unsolicited responses logged per connection; after that they are counted
silently, so a flood cannot flood the log.
"""

_STATUSES = frozenset([b"OK", b"NO", b"BAD"])

# What Twisted's response parser raises on a malformed response.
_PARSE_ERRORS = (IMAP4Exception, ValueError, IndexError, KeyError, TypeError, AttributeError)


def _isTLSConnection(handle: object) -> bool:
    """
    Whether C{handle}, a transport's C{getHandle()}, is an OpenSSL
    connection.  A daemon whose configuration uses no TLS runs without
    OpenSSL (L{imapmig.access.cleartext}): then no handle is one.
    """
    if not openSSLLoaded():
        return False
    from OpenSSL import SSL

    return isinstance(handle, SSL.Connection)


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


def describeConnectionLoss(error: BaseException) -> str:
    """
    A short explanation of why a connection ended, saying who ended it.
    """
    if isinstance(error, ConnectionDropped):
        return f"imapmig dropped the connection: {error.reason}"
    if isinstance(error, ServerBye):
        return str(error)
    if isinstance(error, netError.ConnectionAborted):
        return "imapmig aborted the connection"
    if isinstance(error, netError.ConnectionDone):
        return "the server closed the connection"
    if isinstance(error, netError.ConnectionLost):
        return "the connection was reset by the server"
    return str(error) or type(error).__name__


def _capabilityMap(atoms: list[bytes]) -> dict[bytes, Any]:
    """
    Capability atoms as Twisted maps them: C{AUTH=PLAIN} to
    C{{b"AUTH": [b"PLAIN"]}}, C{IDLE} to C{{b"IDLE": None}}.
    """
    caps: dict[bytes, Any] = {}
    for atom in atoms:
        name, equals, value = atom.partition(b"=")
        caps.setdefault(name, []).append(value if equals else None)
    for name, values in caps.items():
        if values == [None]:
            caps[name] = None
    return caps


def _literalSize(line: bytes) -> int | None:
    """
    The size of the literal announced at the end of C{line} (C{{N}}), or
    L{None} if it announces none.
    """
    start = line.rfind(b"{")
    digits = line[start + 1 : -1]
    if start < 0 or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits)


@implementer(IPushProducer)
class _WatchedProducer:
    """
    A push producer as the transport sees it, telling the client when the
    transport pauses and resumes it: a resume is progress for the deadline
    (the server read what we sent).
    """

    def __init__(self, producer: IPushProducer, client: MigrationIMAP4Client) -> None:
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


@implementer(IHandshakeListener)
class MigrationIMAP4Client(LinearLineReceiver, IMAP4Client):
    """
    An L{IMAP4Client} for migrations.

    Commands with stock Twisted methods go through the stock queue (one at
    a time); L{sendPipelined}, L{sendPipelinedCollecting} and L{fetchInto}
    write at once; the APPEND pipeline makes its own tags.  Continuation
    requests are for the APPEND pipeline only: a stock command that needs
    one (stock C{authenticate}, stock C{append}) is not supported.

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
        # When each command still unanswered was sent, oldest first.
        self._sentAt: dict[bytes, float] = {}
        self.greeted: Deferred[dict[bytes, Any] | None] = Deferred()
        self.closed: Deferred[None] = Deferred()
        self.pipeline: AppendPipeline | None = None
        # The command table, oldest first, and two views of it.
        self._commands: dict[bytes, PendingCommand] = {}
        self._collectors: dict[bytes, CollectedCommand] = {}
        self._fetches: dict[bytes, FetchCommand] = {}
        self._fetchParser = FetchResponseParser(self._fetchedItem)
        self._responseOctets = 0
        self._deflater: DeflateTransport | None = None
        self._inflater: Inflater | None = None
        self._writesPaused = False
        self._closing = False
        self._loggingOut = False
        self._byeText: str | None = None
        self._dropped: ConnectionDropped | None = None
        self._lost: Failure | None = None
        self._unsolicited = 0
        self._handshaking = False
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
        # Under an implicit-TLS wrapper the handshake starts now.
        self._handshaking = _isTLSConnection(self._tlsHandle())
        if self._deadline is not None:
            self._deadline.arm()

    def serverGreeting(self, caps: dict[bytes, Any] | None) -> None:
        if not self.greeted.called:
            self.greeted.callback(caps)

    def handshakeCompleted(self) -> None:
        """
        The TLS handshake (implicit, or after STARTTLS) finished.
        """
        self._handshaking = False

    def _tlsHandle(self) -> object:
        """
        The transport's OpenSSL connection under TLS, its socket (or
        L{None}) otherwise.
        """
        getHandle = getattr(self.transport, "getHandle", None)
        return getHandle() if getHandle is not None else None

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        if self._dropped is not None:
            reason = Failure(self._dropped)
        elif self._byeText is not None and not self._loggingOut:
            reason = Failure(ServerBye(self._byeText))
        elif self._handshaking:
            # Said once here, with what the server sent, rather than by
            # whichever command was waiting (the greeting, CAPABILITY).
            tls = None
            if reason.value is not None:
                from imapmig.imap.tls import handshakeFailure

                tls = handshakeFailure(reason.value, self._tlsHandle())
            if tls is not None:
                reason = Failure(tls)
        self._failAll(reason)
        if self._deadline is not None:
            self._deadline.disarm()
        if not self.closed.called:
            self.closed.callback(None)

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
        deadline = self._deadline
        if deadline is not None and not self.closed.called:
            # The close gets the full timeout of its own.
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
        commands, self._commands = self._commands, {}
        self._collectors = {}
        self._fetches = {}
        queued, self.queued = self.queued, []
        self.waiting = None
        self._fetchParser.reset()
        for command in commands.values():
            command.fail(reason)
        for stock in queued:
            if stock.defer is not None:
                d, stock.defer = stock.defer, None
                d.errback(Failure(reason.value, reason.type, reason.tb))
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
            self._commands
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
                deadline.progress(since=next(iter(self._sentAt.values()), None))
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
        pipeline = self.pipeline
        if self.state is None:
            return "the greeting", f"no greeting within {seconds}"
        if pipeline is not None and pipeline.busy:
            return "APPEND", f"no reply to APPEND within {seconds}"
        if self._commands:
            name = next(iter(self._commands.values())).name.decode("ascii", "replace")
            return name, f"no reply to {name} within {seconds}"
        if self._closing:
            return "the close", f"the connection did not close within {seconds}"
        return "reading", f"the server read nothing imapmig sent for {seconds}"

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
            self._sentAt[tag] = self._clock.seconds()
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
        self._register(entry)
        self.sendLine(cmd.format(tag))

    def _register(self, entry: PendingCommand) -> None:
        tag = entry.tag
        self._commands[tag] = entry
        if entry.collects:
            assert isinstance(entry, CollectedCommand)
            self._collectors[tag] = entry
        elif entry.fetches:
            assert isinstance(entry, FetchCommand)
            self._fetches[tag] = entry

    def _sendNow(self, entry: PendingCommand, command: bytes) -> None:
        self._register(entry)
        self.connection.write(entry.tag + b" " + command + b"\r\n")

    def sendPipelined(self, command: bytes) -> Deferred[bytes]:
        """
        Write C{command} now, without waiting for the replies to earlier
        commands, for commands whose untagged data nobody needs (CREATE,
        SUBSCRIBE, a SELECT whose details are not used).  Only between
        commands: never while an APPEND pipeline is half-way through one
        (see L{AppendPipeline.betweenCommands}).

        @return: fires with the text after C{OK} of the tagged reply, or
            fails with L{CommandRefused} carrying the text after C{NO} or
            C{BAD}, or with why the connection ended.
        """
        if self._lost is not None:
            return self._failed()
        d: Deferred[bytes] = Deferred()
        self._sendNow(PendingCommand(self.makeTag(), commandName(command), d), command)
        return d

    def sendAuthenticate(
        self, command: bytes, respond: Callable[[bytes], bytes | None]
    ) -> Deferred[tuple[list[bytes], bytes]]:
        """
        Write C{command} (an C{AUTHENTICATE}) now, with no other command in
        flight, and answer each continuation request until its tagged reply
        with the line C{respond} returns for the request's text (the text
        after C{+ }).  The line is written as given: encoding is the
        caller's (L{imapmig.imap.auth}).  A request C{respond} has no
        answer for (L{None}) is a protocol violation.

        @return: fires with the untagged responses received meanwhile and
            the tagged reply after the tag (C{b"OK [CAPABILITY ...] ..."}),
            or fails with L{CommandRefused} or with why the connection
            ended.
        """
        if self._lost is not None:
            return self._failed()
        d: Deferred[tuple[list[bytes], bytes]] = Deferred()

        def answered(result: Any) -> Any:
            self._responder = None
            return result

        self._responder = respond
        entry = CollectedCommand(self.makeTag(), commandName(command), d, [], whole=True)
        self._sendNow(entry, command)
        return d.addBoth(answered)

    def sendPipelinedCollecting(self, command: bytes) -> Deferred[tuple[list[bytes], bytes]]:
        """
        Write C{command} now, as L{sendPipelined} does, and hand over its
        untagged responses unparsed, as L{sendCollecting} does: for several
        SELECTs in one round trip.  Servers answer commands that change the
        selected mailbox one after the other, so untagged responses go to
        the oldest command still unanswered that collects them.

        @return: fires with the untagged responses (the text after C{* })
            and the text after C{OK} of the tagged reply; fails with
            L{CommandRefused}.
        """
        if self._lost is not None:
            return self._failed()
        d: Deferred[tuple[list[bytes], bytes]] = Deferred()
        entry = CollectedCommand(self.makeTag(), commandName(command), d, [])
        self._sendNow(entry, command)
        return d

    def fetchInto(self, command: bytes, sink: FetchSink) -> Deferred[bytes]:
        """
        Write C{command} (a C{UID FETCH}, or any command answered with
        FETCH responses) now, without waiting for the replies to earlier
        commands, as L{sendPipelined} does.  Until its tagged reply, every
        untagged FETCH response is read by a L{FetchResponseParser}, not by
        the stock parser, and handed to C{sink} as a L{FetchedItem}.

        Responses cannot say which command they answer: while several
        fetch commands are in flight each response goes to the sink of the
        oldest, so commands whose responses must not be told apart should
        share a sink (it also receives unsolicited FETCH responses, such as
        another client's flag changes, which may lack UID and data).

        @return: fires with the text after C{OK} of the tagged reply, after
            every response before it has reached C{sink}; or fails with
            L{CommandRefused}, with L{ProtocolError} if a response could
            not be read (the connection is then dropped), or with the
            reason the connection was lost.
        """
        if self._lost is not None:
            return self._failed()
        d: Deferred[bytes] = Deferred()
        self._sendNow(FetchCommand(self.makeTag(), commandName(command), d, sink), command)
        return d

    def sendCollecting(
        self, command: bytes, arguments: bytes | None = None
    ) -> Deferred[tuple[list[bytes], bytes]]:
        """
        Send C{command} through the stock queue (one command at a time) and
        hand over its untagged responses unparsed, for commands whose
        replies the stock client does not fully read (EXAMINE with
        CONDSTORE, LIST-EXTENDED).

        @param arguments: the command's arguments, already encoded.
        @return: fires with the untagged responses received meanwhile (the
            text after C{* }, literals inline as C{{N}}, CRLF and their
            octets; see L{imapmig.imap.syntax.parseResponse}) and the tagged
            C{OK} line after the tag; fails with L{CommandRefused}.
        """
        d: Deferred[tuple[list[bytes], bytes]] = self.sendCommand(
            CollectingCommand(command, arguments)
        )
        return d

    def getCapabilities(self, useCache: int = 1) -> Deferred[dict[bytes, Any]]:
        """
        The server's capabilities, as Twisted maps them (see
        L{_capabilityMap}): those of the greeting or of the last
        CAPABILITY command, unless C{useCache} is false.
        """
        if useCache and self._capCache is not None:
            return succeed(self._capCache)
        d = self.sendCollecting(b"CAPABILITY")
        return d.addCallback(self._capabilitiesReceived)

    def _capabilitiesReceived(self, result: tuple[list[bytes], bytes]) -> dict[bytes, Any]:
        atoms: list[bytes] = []
        for line in result[0]:
            if line[:11].upper() == b"CAPABILITY ":
                atoms.extend(line[11:].split())
        self._capCache = _capabilityMap(atoms)
        return self._capCache

    def startTLS(self, contextFactory: object = None) -> Deferred[object]:
        """
        Send C{STARTTLS} and start the TLS handshake when it is accepted;
        the capabilities are then forgotten (ask again after).

        @return: fires when the handshake has started.
        """
        d: Deferred[object] = self.sendCommand(Command(b"STARTTLS"))
        return d.addCallback(self._startedTLS, contextFactory)

    def _startedTLS(self, result: object, context: object) -> object:
        # Anything the server sent after its OK, in cleartext, would be
        # taken as coming over TLS: RFC 3501 forbids it, and an attacker
        # on the path could inject replies this way.
        injected = self.clearLineBuffer()
        if injected:
            self._violation("data after the STARTTLS reply, before the TLS handshake", injected)
            assert self._dropped is not None
            return Failure(self._dropped)
        self._handshaking = True
        from imapmig.imap.tls import watched

        self.connection.startTLS(watched(context))
        self._capCache = None
        self.startedTLS = True
        # STARTTLS swaps the transport's protocol stack; set the option again
        # explicitly rather than relying on the socket keeping it.
        setNoDelay(self.transport)
        return result

    def logout(self) -> Deferred[None]:
        """
        Send C{LOGOUT}; when it is answered, close the connection (bounded:
        see L{close}).  Its C{BYE} is expected, not a L{ServerBye}.
        """
        self._loggingOut = True
        d: Deferred[Any] = self.sendCommand(Command(b"LOGOUT"))
        return d.addCallback(self._loggedOut)

    def _loggedOut(self, result: object) -> None:
        self.close()

    # Receiving.

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

    def dataReceived(self, data: bytes) -> None:
        if self._lost is not None:
            return
        acks = self._acks
        if acks is not None and data:
            acks.rearm()
        deadline = self._deadline
        if deadline is not None:
            deadline.received(len(data))
        try:
            inflater = self._inflater
            if inflater is None or not data:
                # Empty data is resumeProducing asking to go on with what
                # was kept while paused, which is already plain.
                LinearLineReceiver.dataReceived(self, data)
            else:
                self._inflateReceived(inflater, data)
        except Exception:
            self._bug()

    def lineReceived(self, line: bytes) -> None:
        # While a fetch command is in flight, FETCH responses (and the
        # lines that continue one after a literal) go to the incremental
        # parser; every other line, and any FETCH while none is, keeps the
        # stock path.  A stock response already half-way through a literal
        # (self._parts) owns the next line whatever it looks like.
        parser = self._fetchParser
        if parser.inResponse or (self._fetches and self._parts is None and isFetchResponse(line)):
            try:
                parser.lineReceived(line)
            except FetchParseError as e:
                self._violation(f"an unreadable FETCH response ({e})", line)
                return
            if parser.wantsLiteral:
                self.setRawMode()
            return
        parts = self._parts
        if line[-1:] == b"}":
            size = _literalSize(line)
            if size is not None:
                self._literalAnnounced(line, size)
                return
        if parts is None:
            tag, _, rest = line.partition(b" ")
        else:
            if self._responseOctets + len(line) > MAX_RESPONSE_LENGTH:
                self._violation(f"a response longer than {MAX_RESPONSE_LENGTH} octets", line)
                return
            parts.append(line)
            tag, rest = cast(bytes, self._tag), b"".join(parts)
            self._tag = self._parts = None
            self._responseOctets = 0
        if tag == b"*":
            if self.state is None:
                self._greeting(rest)
            else:
                self._untagged(rest)
        elif self.state is None:
            self._violation("a reply before the greeting", line)
        elif tag == b"+":
            self._continuation(rest)
        else:
            self._tagged(tag, rest)

    def _literalAnnounced(self, line: bytes, size: int) -> None:
        """
        A response other than FETCH goes on in a literal of C{size} octets.
        """
        if self._parts is None:
            self._tag, _, text = line.partition(b" ")
            self._responseOctets = 0
        else:
            text = line
        total = self._responseOctets + len(text) + size
        if total > MAX_RESPONSE_LENGTH:
            self._violation(
                f"a literal of {size} octets outside a FETCH response"
                f" (the limit is {MAX_RESPONSE_LENGTH})",
                line,
            )
            return
        self._responseOctets = total
        self._setupForLiteral(text, size)

    def rawDataReceived(self, data: bytes) -> None:
        parser = self._fetchParser
        if not parser.wantsLiteral:
            pending = getattr(self, "_pendingSize", None)
            if pending is not None and len(data) > pending:
                # The stock code strips CR and LF from what follows a
                # literal, so a literal that ends its response (a LIST
                # name sent as a literal) loses the line end, and the next
                # line (perhaps the tagged reply) is taken for the rest of
                # that response.  Hand the rest back untouched instead.
                IMAP4Client.rawDataReceived(self, data[:pending])
                self.setLineMode(data[pending:])
                return
            IMAP4Client.rawDataReceived(self, data)
            return
        try:
            rest = parser.literalReceived(data)
        except FetchParseError as e:
            self._violation(f"an unreadable FETCH response ({e})", data)
            return
        if rest is not None:
            # What follows the literal continues the response: back to
            # lines (and to the parser, which is still in the response).
            self.setLineMode(rest)

    def rawDataFrom(self, data: bytes, pos: int) -> int:
        """
        Literal octets of a FETCH response are taken where they are in the
        read (L{FetchResponseParser.literalAt}), and the lines after the
        literal read from the same buffer: no copy of the rest of the read
        at each literal's end.  Any other raw octets (a literal outside
        FETCH) go to L{rawDataReceived} as before.
        """
        parser = self._fetchParser
        if not parser.wantsLiteral:
            return LinearLineReceiver.rawDataFrom(self, data, pos)
        try:
            end = parser.literalAt(data, pos)
        except FetchParseError as e:
            self._violation(f"an unreadable FETCH response ({e})", data[pos : pos + 1024])
            return len(data)
        if end < 0:
            return len(data)
        # What follows the literal continues the response: back to lines
        # (and to the parser, which is still in the response).
        self.setLineMode()
        return end

    def _greeting(self, rest: bytes) -> None:
        status, _, text = rest.partition(b" ")
        status = status.upper()
        if status == b"BYE":
            self._byeReceived(text)
            return
        if status == b"OK":
            self.state = "unauth"
        elif status == b"PREAUTH":
            self.state = "auth"
        else:
            self._violation("a greeting that is not OK, PREAUTH or BYE", b"* " + rest)
            return
        caps = None
        if text[:12].upper() == b"[CAPABILITY ":
            end = text.find(b"]")
            if end > 0:
                caps = self._capCache = _capabilityMap(text[12:end].split())
        self._settled()
        self.serverGreeting(caps)

    def _tagged(self, tag: bytes, rest: bytes) -> None:
        """
        A tagged reply: find its command in the table, or the APPEND
        pipeline's side of it.
        """
        status, _, text = rest.partition(b" ")
        if status not in _STATUSES:
            status = status.upper()
            if status not in _STATUSES:
                self._violation("a tagged reply that is not OK, NO or BAD", tag + b" " + rest)
                return
        self._sentAt.pop(tag, None)
        command = self._commands.pop(tag, None)
        if command is None:
            pipeline = self.pipeline
            if pipeline is None or not pipeline.ownsTag(tag):
                self._violation("a reply with an unknown tag", tag + b" " + rest)
                return
            pipeline.taggedReceived(tag, rest)
        else:
            if command.collects:
                del self._collectors[tag]
            elif command.fetches:
                del self._fetches[tag]
            try:
                command.complete(status, text, rest)
            except _PARSE_ERRORS:
                # Twisted's parser, reading what a stock command collected.
                lines = command.lines if isinstance(command, CollectedCommand) else []
                self._violation(
                    f"an unparseable response to {command.name.decode('ascii', 'replace')}",
                    lines[0] if lines else rest,
                )
                command.fail(Failure(self._dropped))
                return
            if tag == self.waiting:
                # The stock queue's command: the next one may go.
                self.waiting = None
                self._flushQueue()
        self._settled()

    def _untagged(self, rest: bytes) -> None:
        """
        An untagged response outside FETCH: to the oldest command that
        collects, or handled here.  C{EXISTS} and C{RECENT} never
        accumulate, C{EXPUNGE} and unsolicited C{FETCH} are dropped.
        """
        if rest[:1].isdigit():
            space = rest.find(b" ")
            kind = rest[space + 1 : space + 8].upper()
            if kind in (b"EXISTS", b"RECENT"):
                if self._collectors:
                    next(iter(self._collectors.values())).replace(kind, rest)
                elif rest[:space].isdigit():
                    count = int(rest[:space])
                    if kind == b"EXISTS":
                        self.newMessages(count, None)
                    else:
                        self.newMessages(None, count)
                return
            if kind.startswith(b"EXPUNGE"):
                return
            if kind.startswith(b"FETCH") and not self._collectors:
                self._unsolicitedFetch(rest)
                return
        elif rest[:3].upper() == b"BYE" and rest[3:4] in (b"", b" "):
            self._byeReceived(rest[4:])
            return
        if self._collectors:
            collector = next(iter(self._collectors.values()))
            if not collector.collect(rest):
                self._violation(
                    f"more untagged responses to {collector.name.decode('ascii', 'replace')}"
                    " than imapmig accepts (a flood)",
                    rest,
                )
            return
        self._unsolicitedResponse(rest)

    def _unsolicitedFetch(self, rest: bytes) -> None:
        """
        A FETCH response while no command takes it (another client changed
        flags): Twisted's parser reads it for C{flagsChanged}.
        """
        try:
            IMAP4Client._extraInfo(self, [parseNestedParens(rest)])
        except _PARSE_ERRORS:
            self._violation("an unparseable FETCH response", rest)

    def _unsolicitedResponse(self, rest: bytes) -> None:
        """
        An untagged response no command collects: status responses are
        expected (C{OK [CLOSED]}, keep-alives), alerts and warnings are
        logged, the rest is logged as ignored; at most
        L{_UNSOLICITED_LOGGED} log lines per connection.
        """
        head = rest[:4].upper()
        if head[:3] == b"OK " and rest[3:10].upper() != b"[ALERT]":
            return
        if head.startswith((b"CAPA", b"FLAG", b"PREA", b"ENAB")):
            return
        self._unsolicited += 1
        if self._unsolicited > _UNSOLICITED_LOGGED:
            return
        if head.startswith((b"NO ", b"BAD ", b"OK ")):
            self._log.warn(
                "{session} says: {text}", session=self.peer, text=escapedExcerpt(rest, 200)
            )
        else:
            self._log.info(
                "{session}: unsolicited response ignored: {text}",
                session=self.peer,
                text=escapedExcerpt(rest),
            )
        if self._unsolicited == _UNSOLICITED_LOGGED:
            self._log.info(
                "{session}: further unsolicited responses are not logged", session=self.peer
            )

    def _byeReceived(self, text: bytes) -> None:
        """
        The server said BYE.  After LOGOUT that is expected; otherwise it is
        ending the session: everything pending fails with L{ServerBye} and
        the connection is closed (bounded).
        """
        self._byeText = escapedExcerpt(text, 300)
        if self._loggingOut:
            return
        self._log.warn("{session} says BYE: {text}", session=self.peer, text=self._byeText)
        pipeline = self.pipeline
        if pipeline is not None and pipeline.busy:
            # The APPEND pipeline fails first, with what the BYE means for
            # its messages (wait, pause, or their outcome unknown).
            pipeline.untaggedReceived(b"BYE " + text)
        # A BYE that asks to wait, or says the account is over a limit,
        # fails everything else the same way; any other is a ServerBye.
        error: Exception | None = None
        signal = classifyBye(text)
        if signal.action in (SignalAction.RETRY, SignalAction.PAUSE):
            error = signal.error(self.peer)
        self._failAll(Failure(error if error is not None else ServerBye(self._byeText)))
        self.close()

    def _continuation(self, rest: bytes) -> None:
        responder = self._responder
        if responder is not None:
            response = responder(rest)
            if response is None:
                self._violation("a continuation request nobody asked for", b"+ " + rest)
                return
            if self._deadline is not None:
                self._deadline.progress()
            self.connection.write(response + b"\r\n")
            return
        pipeline = self.pipeline
        if pipeline is None or not pipeline.busy or pipeline.betweenCommands:
            self._violation("a continuation request nobody asked for", b"+ " + rest)
            return
        if self._deadline is not None:
            self._deadline.progress()
        pipeline.continuationReceived(rest)

    def _fetchedItem(self, item: FetchedItem) -> None:
        """
        Hand a FETCH response to the sink of the oldest fetch command.
        """
        for command in self._fetches.values():
            try:
                command.sink(item)
            except Exception:
                self._bug()
            return

    # COMPRESS=DEFLATE.

    def startCompression(self, level: int = DEFAULT_LEVEL) -> Deferred[object]:
        """
        Send C{COMPRESS DEFLATE}.  When its tagged C{OK} arrives, and before
        anything else happens, both directions switch to raw DEFLATE: what
        the server sent after the C{OK} line is inflated from its next
        octet on, and every later write is compressed.

        @param level: the DEFLATE level for what we send.
        @return: fires when compression is on, or fails with the server's
            refusal (the connection then stays uncompressed).
        @raise RuntimeError: compression is already on, or the APPEND
            pipeline has commands in flight.
        """
        if self._deflater is not None:
            raise RuntimeError("compression is already on")
        if self.pipeline is not None and self.pipeline.busy:
            raise RuntimeError("COMPRESS while APPEND commands are in flight")
        d: Deferred[object] = self.sendCommand(Command(b"COMPRESS", b"DEFLATE"))
        # Added before the caller sees the Deferred, so it runs first: the
        # switch happens inside the processing of the OK line, before the
        # rest of that read is parsed and before a queued command is sent.
        d.addCallback(self._compressionAccepted, level)
        return d

    def _compressionAccepted(self, result: object, level: int) -> object:
        self._deflater = DeflateTransport(self.transport, level)
        self.transport = self._deflater
        self._inflater = Inflater()
        # This runs while the line reader is splitting lines: the octets
        # after the OK line, already read, are compressed.  Inflate them and
        # hand them back; the reader, busy, queues them and goes on with
        # them.
        rest = self.clearLineBuffer()
        if rest:
            self._inflateReceived(self._inflater, rest)
        return result

    def compressionStats(self) -> CompressionStats | None:
        """
        Octets before and after compression in each direction, or L{None}
        if the connection is not compressed.
        """
        if self._deflater is None or self._inflater is None:
            return None
        return compressionStats(self._deflater, self._inflater)

    def _inflateReceived(self, inflater: Inflater, data: bytes) -> None:
        """
        Inflate compressed octets from the server and parse the result.
        """
        try:
            plain = inflater.inflate(data)
        except zlib.error as e:
            self._violation(f"the compressed stream is corrupt ({e})", data)
            return
        if plain:
            LinearLineReceiver.dataReceived(self, plain)
