# -*- test-case-name: tests.test_imap_client -*-
"""
The IMAP protocol adapter: Twisted's L{IMAP4Client} with what a migration
needs and it lacks.

It reuses the stock parser and commands, and adds:
  - C{TCP_NODELAY} on every connection (plain TCP, implicit TLS, and again
    after STARTTLS), so no small segment waits on a delayed ACK;
  - a line limit large enough for a long C{* SEARCH} or C{* LIST} reply;
  - an injected clock for the command timeout;
  - a seam for the APPEND pipeline (L{imapmig.imap.pipeline}), which keeps
    many tagged commands in flight while the stock client keeps one;
  - COMPRESS=DEFLATE (RFC 4978, L{imapmig.imap.compress});
  - pipelined C{UID FETCH} commands whose untagged FETCH responses, bodies
    included, are read by L{imapmig.imap.fetch.FetchResponseParser}
    instead of the stock parser (L{MigrationIMAP4Client.fetchInto}).

No migration logic lives here.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.mail.imap4 import Command, IMAP4Client, IMAP4Exception
from twisted.python.failure import Failure

from imapmig.imap.compress import (
    DEFAULT_LEVEL,
    CompressionStats,
    DeflateTransport,
    Inflater,
    compressionStats,
)
from imapmig.imap.fetch import (
    FetchedItem,
    FetchParseError,
    FetchResponseParser,
    isFetchResponse,
)

if TYPE_CHECKING:
    from imapmig.imap.pipeline import AppendPipeline

# Long enough for a SEARCH reply listing millions of UIDs; a line is only
# buffered while it is being received.
MAX_LINE_LENGTH = 64 * 1024 * 1024


FetchSink = Callable[[FetchedItem], object]
"""
Takes each untagged FETCH response read while a L{MigrationIMAP4Client.fetchInto}
command is in flight.
"""


class CommandRefused(IMAP4Exception):
    """
    The tagged C{NO} or C{BAD} reply to a command sent with
    L{MigrationIMAP4Client.fetchInto} or
    L{MigrationIMAP4Client.sendCollecting}.

    @ivar status: C{"NO"} or C{"BAD"}.
    @ivar text: the reply's text after the status, response code included.
    """

    def __init__(self, status: str, text: bytes) -> None:
        IMAP4Exception.__init__(self, text)
        self.status = status
        self.text = text


class _CollectingCommand(Command):
    """
    A command whose untagged responses are handed over as the server sent
    them (the text after C{* }, any literal inline), not parsed.
    """

    def finish(self, lastLine: bytes, unusedCallback: object) -> None:
        d: Any = self.defer
        self.defer = None
        d.callback((self.lines, lastLine))


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
    A short explanation of why a connection ended.
    """
    if isinstance(error, ConnectionDone):
        return "the server closed the connection"
    return str(error) or type(error).__name__


class MigrationIMAP4Client(IMAP4Client):
    """
    An L{IMAP4Client} for migrations.

    @ivar greeted: fires with the greeting's capabilities (or L{None}) when
        the server's greeting arrives.
    @ivar pipeline: the APPEND pipeline that owns the tags it sent, or
        L{None}; while it has commands in flight the session sends no other
        command.
    @ivar closed: fires when the connection is lost.
    """

    MAX_LENGTH = MAX_LINE_LENGTH
    _log = Logger()

    def __init__(self, clock: IReactorTime, timeout: float = 0) -> None:
        """
        @param clock: schedules the command timeout.
        @param timeout: seconds without any data from the server, while
            connected, after which the connection is dropped; 0 disables it.
        """
        IMAP4Client.__init__(self)
        self.callLater = clock.callLater  # type: ignore[method-assign,assignment]
        self.timeout = timeout  # type: ignore[assignment]
        self.greeted: Deferred[dict[bytes, Any] | None] = Deferred()
        self.closed: Deferred[None] = Deferred()
        self.pipeline: AppendPipeline | None = None
        self._pipelinedCommands: dict[bytes, Deferred[bytes]] = {}
        self._collectingCommands: dict[bytes, tuple[Deferred[tuple[list[bytes], bytes]], list[bytes]]] = {}
        self._deflater: DeflateTransport | None = None
        self._inflater: Inflater | None = None
        self._fetchCommands: dict[bytes, tuple[Deferred[bytes], FetchSink]] = {}
        self._fetchParser = FetchResponseParser(self._fetchedItem)

    @property
    def connection(self) -> Any:
        """
        The transport.  Typed loosely: a TCP transport and a TLS one offer
        different interfaces (producer registration, TCP options, abort).
        """
        return self.transport

    def connectionMade(self) -> None:
        setNoDelay(self.transport)
        IMAP4Client.connectionMade(self)

    def serverGreeting(self, caps: dict[bytes, Any] | None) -> None:
        if not self.greeted.called:
            self.greeted.callback(caps)

    def _startedTLS(self, result: object, context: object) -> object:
        # STARTTLS swaps the transport's protocol stack; set the option again
        # explicitly rather than relying on the socket keeping it.
        result = IMAP4Client._startedTLS(self, result, context)
        setNoDelay(self.transport)
        return result

    def lineLengthExceeded(self, line: bytes) -> None:
        self._log.error(
            "Server sent a line longer than {limit} octets; dropping the connection",
            limit=self.MAX_LENGTH,
        )
        IMAP4Client.lineLengthExceeded(self, line)

    def timeoutConnection(self) -> None:
        self._log.error(
            "No reply from the server for {timeout} seconds; dropping the connection",
            timeout=self.timeout,
        )
        IMAP4Client.timeoutConnection(self)

    def sendPipelined(self, command: bytes) -> Deferred[bytes]:
        """
        Write C{command} now, without waiting for the replies to earlier
        commands, for commands whose untagged data nobody needs (CREATE,
        SUBSCRIBE, a SELECT whose details are not used).  Only between
        commands: never while an APPEND pipeline is half-way through one
        (see L{AppendPipeline.betweenCommands}).

        @return: fires with the text after C{OK} of the tagged reply, or
            fails with L{IMAP4Exception} carrying the text after C{NO} or
            C{BAD}.
        """
        tag = self.makeTag()
        d: Deferred[bytes] = Deferred()
        self._pipelinedCommands[tag] = d
        self.connection.write(tag + b" " + command + b"\r\n")
        return d

    def sendPipelinedCollecting(self, command: bytes) -> Deferred[tuple[list[bytes], bytes]]:
        """
        Write C{command} now, as L{sendPipelined} does, and hand over its
        untagged responses unparsed, as L{sendCollecting} does: for several
        SELECTs in one round trip.  Servers answer commands that change the
        selected mailbox one after the other, so the untagged responses
        that arrive while no stock command is waiting go to the oldest such
        command still unanswered.  Send these only while no other pipelined
        command is in flight, or that command's untagged responses are
        counted as this one's.

        @return: fires with the untagged responses (the text after C{* })
            and the text after C{OK} of the tagged reply; fails with
            L{CommandRefused}.
        """
        if self.closed.called:
            return fail(ConnectionDone("the connection is closed"))
        tag = self.makeTag()
        d: Deferred[tuple[list[bytes], bytes]] = Deferred()
        self._collectingCommands[tag] = (d, [])
        self.connection.write(tag + b" " + command + b"\r\n")
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
            L{CommandRefused}, with the L{FetchParseError} of a response
            that could not be read (the connection is then dropped), or
            with the reason the connection was lost.
        """
        if self.closed.called:
            return fail(ConnectionDone("the connection is closed"))
        tag = self.makeTag()
        d: Deferred[bytes] = Deferred()
        self._fetchCommands[tag] = (d, sink)
        self.connection.write(tag + b" " + command + b"\r\n")
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
            octets; see L{imapmig.imap.fetch.parseResponse}) and the tagged
            C{OK} line after the tag; fails with L{IMAP4Exception} carrying
            the text after C{NO} or C{BAD}.
        """
        d: Deferred[tuple[list[bytes], bytes]] = self.sendCommand(
            _CollectingCommand(command, arguments)
        )
        return d

    def lineReceived(self, line: bytes) -> object:
        # While a fetch command is in flight, FETCH responses (and the
        # lines that continue one after a literal) go to the incremental
        # parser; every other line, and any FETCH while none is, keeps the
        # stock path.  A stock response already half-way through a literal
        # (self._parts) owns the next line whatever it looks like.
        parser = self._fetchParser
        if parser.inResponse or (
            self._fetchCommands and self._parts is None and isFetchResponse(line)
        ):
            if self.timeout > 0:
                self.resetTimeout()
            try:
                parser.lineReceived(line)
            except FetchParseError as e:
                self._fetchParseFailed(e)
                return None
            if parser.wantsLiteral:
                self.setRawMode()
            return None
        return IMAP4Client.lineReceived(self, line)

    def rawDataReceived(self, data: bytes) -> object:
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
                return None
            return IMAP4Client.rawDataReceived(self, data)
        if self.timeout > 0:
            self.resetTimeout()
        rest = parser.literalReceived(data)
        if rest is not None:
            # What follows the literal continues the response: back to
            # lines (and to the parser, which is still in the response).
            self.setLineMode(rest)
        return None

    def _fetchedItem(self, item: FetchedItem) -> None:
        """
        Hand a FETCH response to the sink of the oldest fetch command.
        """
        for _, sink in self._fetchCommands.values():
            try:
                sink(item)
            except Exception:
                self._log.failure("A fetch sink failed; dropping the connection")
                self.connection.loseConnection()
            return

    def _fetchParseFailed(self, error: FetchParseError) -> None:
        """
        A FETCH response could not be read: nothing after it can be trusted.
        Fail the fetch commands with the reason and drop the connection.
        """
        self._log.error(
            "Unreadable FETCH response from the server ({error}); dropping the connection",
            error=str(error),
        )
        pending, self._fetchCommands = self._fetchCommands, {}
        for d, _ in pending.values():
            d.errback(error)
        self.connection.loseConnection()

    def _defaultHandler(self, tag: bytes, rest: bytes) -> None:
        if self._fetchCommands and tag in self._fetchCommands:
            d, _ = self._fetchCommands.pop(tag)
            status, _, text = rest.partition(b" ")
            if status.upper() == b"OK":
                d.callback(text)
            else:
                d.errback(CommandRefused(status.upper().decode("ascii", "replace"), text))
            return
        if self._pipelinedCommands and tag in self._pipelinedCommands:
            d = self._pipelinedCommands.pop(tag)
            status, _, text = rest.partition(b" ")
            if status == b"OK":
                d.callback(text)
            else:
                d.errback(IMAP4Exception(text))
            return
        pipeline = self.pipeline
        if pipeline is not None and pipeline.busy and self.waiting is None:
            if tag == b"*":
                pipeline.untaggedReceived(rest)
                return
            if tag == b"+":
                pipeline.continuationReceived(rest)
                return
            if pipeline.ownsTag(tag):
                pipeline.taggedReceived(tag, rest)
                return
        collecting = self._collectingCommands
        if collecting:
            if tag == b"*" and self.waiting is None:
                next(iter(collecting.values()))[1].append(rest)
                return
            if tag in collecting:
                collected, lines = collecting.pop(tag)
                status, _, text = rest.partition(b" ")
                if status.upper() == b"OK":
                    collected.callback((lines, text))
                else:
                    collected.errback(CommandRefused(status.upper().decode("ascii", "replace"), text))
                return
        IMAP4Client._defaultHandler(self, tag, rest)

    def _extraInfo(self, lines: list[list[object]]) -> None:
        # Status responses outside a command (OK [CLOSED] after a second
        # SELECT, the BYE of LOGOUT) are expected; the stock client would
        # log each as "unhandled".
        rest = []
        for response in lines:
            if response and response[0] in (b"OK", b"BYE", b"PREAUTH"):
                continue
            if response and response[0] in (b"NO", b"BAD"):
                self._log.warn("Server says: {response}", response=_summary(response))
                continue
            if _understoodByTwisted(response):
                rest.append(response)
            else:
                # The stock client would log the whole response (a SEARCH
                # result can be megabytes): log its start only.
                self._log.info(
                    "Unsolicited response ignored: {response}", response=_summary(response)
                )
        if rest:
            IMAP4Client._extraInfo(self, rest)

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
        # This runs while LineReceiver.dataReceived is splitting lines: the
        # octets after the OK line, already read, are compressed.  Inflate
        # them and hand them back; LineReceiver, busy, appends them to its
        # (now empty) buffer and its loop goes on with them.
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

    def dataReceived(self, data: bytes) -> None:
        inflater = self._inflater
        if inflater is None or not data:
            # Empty data is LineReceiver's resumeProducing asking to parse
            # what it buffered, which is already plain.
            IMAP4Client.dataReceived(self, data)
        else:
            self._inflateReceived(inflater, data)

    def setLineMode(self, extra: bytes = b"") -> object:
        # LineReceiver hands what follows a literal back through
        # self.dataReceived; under compression that is already inflated, so
        # it must bypass the inflater.
        self.line_mode = 1
        if extra:
            return IMAP4Client.dataReceived(self, extra)
        return None

    def _inflateReceived(self, inflater: Inflater, data: bytes) -> None:
        """
        Inflate compressed octets from the server and parse the result.
        """
        try:
            plain = inflater.inflate(data)
        except zlib.error as e:
            self._log.error(
                "The server's compressed stream is corrupt ({error}); dropping the connection",
                error=str(e),
            )
            self.connection.abortConnection()
            return
        if plain:
            IMAP4Client.dataReceived(self, plain)

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        IMAP4Client.connectionLost(self, reason)
        pipeline = self.pipeline
        if pipeline is not None:
            pipeline.connectionLost(reason)
        pending, self._pipelinedCommands = self._pipelinedCommands, {}
        for d in pending.values():
            d.errback(reason)
        collecting, self._collectingCommands = self._collectingCommands, {}
        for collected, _ in collecting.values():
            collected.errback(reason)
        self._fetchParser.reset()
        fetches, self._fetchCommands = self._fetchCommands, {}
        for fetched, _ in fetches.values():
            fetched.errback(reason)
        if not self.greeted.called:
            self.greeted.errback(reason)
        if not self.closed.called:
            self.closed.callback(None)


_SUMMARY_LENGTH = 200


def _summary(response: list[object]) -> str:
    """
    The start of a parsed response, for a log line: at most
    L{_SUMMARY_LENGTH} characters, however large the response.
    """
    parts: list[str] = []
    length = 0
    for element in response:
        if isinstance(element, list):
            text = "(" + _summary(element) + ")"
        elif isinstance(element, bytes):
            text = repr(element[:_SUMMARY_LENGTH])
        else:
            text = repr(element)
        parts.append(text)
        length += len(text)
        if length > _SUMMARY_LENGTH:
            break
    summary = " ".join(parts)
    if len(summary) > _SUMMARY_LENGTH or len(parts) < len(response):
        summary = summary[:_SUMMARY_LENGTH] + " ..."
    return summary


def _understoodByTwisted(response: list[object]) -> bool:
    """
    Whether L{IMAP4Client._extraInfo} acts on an unsolicited response
    (mode, EXISTS, RECENT, FETCH) rather than just log it.
    """
    if len(response) == 1:
        return response[0] in ([b"READ-ONLY"], [b"READ-WRITE"])
    if len(response) == 2:
        return response[1] in (b"EXISTS", b"RECENT")
    return len(response) == 3 and response[1] == b"FETCH"
