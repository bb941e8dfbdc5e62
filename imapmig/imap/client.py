# -*- test-case-name: tests.test_imap_client -*-
"""
The IMAP protocol adapter: Twisted's L{IMAP4Client} with what a migration
needs and it lacks.  L{MigrationIMAP4Client} is the wire, in three layers,
each a module of its own:

  - L{imapmig.imap.connection}: the connection's life (C{TCP_NODELAY} on
    every transport, again after STARTTLS; who ended it, see
    L{describeConnectionLoss}), the reply deadline
    (L{imapmig.imap.deadline}) that runs while the server owes something,
    peer misbehaviour (one log line, an aborted connection, every pending
    command failed with L{imapmig.errors.ProtocolError}: never a
    traceback), the stock command queue and the tags;
  - L{imapmig.imap.responses}: what the server sends, to events: lines
    split in linear time (L{imapmig.imap.lines}), FETCH responses, bodies
    included, read by L{imapmig.imap.fetch.FetchResponseParser}, every
    tagged reply matched to its command in the tag table
    (L{imapmig.imap.tags}, or the APPEND pipeline's side of it,
    L{imapmig.imap.pipeline}), bounds on what a server can make it hold;
  - this module: the commands (pipelined, collecting, fetching into a
    sink, AUTHENTICATE, STARTTLS with L{imapmig.imap.starttls}, LOGOUT,
    COMPRESS=DEFLATE with L{imapmig.imap.compress}).

No migration logic lives here.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import error as netError
from twisted.internet.defer import Deferred, succeed
from twisted.mail.imap4 import Command
from twisted.python.failure import Failure

from imapmig.errors import ConnectionDropped
from imapmig.imap.commands import (
    CollectedCommand,
    CollectingCommand,
    FetchCommand,
    FetchSink,
    PendingCommand,
    commandName,
)
from imapmig.imap.compress import DEFAULT_LEVEL, Compression, CompressionStats
from imapmig.imap.connection import setNoDelay
from imapmig.imap.responses import ResponseReader, capabilityMap

__all__ = [
    "FetchSink",
    "MigrationIMAP4Client",
    "describeConnectionLoss",
]


def describeConnectionLoss(error: BaseException) -> str:
    """
    A short explanation of why a connection ended, saying who ended it.
    """
    if isinstance(error, ConnectionDropped):
        return f"imapmig dropped the connection: {error.reason}"
    for kind, description in _ENDINGS:
        if isinstance(error, kind):
            return description
    return str(error) or type(error).__name__


_ENDINGS: tuple[tuple[type[Exception], str], ...] = (
    (netError.ConnectionAborted, "imapmig aborted the connection"),
    (netError.ConnectionDone, "the server closed the connection"),
    (netError.ConnectionLost, "the connection was reset by the server"),
)
"""
Who ended a connection, by how Twisted says it ended, first match first
(L{ConnectionAborted} is a L{ConnectionLost}).
"""


class MigrationIMAP4Client(ResponseReader):
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
        self._capCache = capabilityMap(atoms)
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
        self._tls.start(self.connection, context)
        self._capCache = None
        self.startedTLS = True
        # STARTTLS swaps the transport's protocol stack; set the option again
        # explicitly rather than relying on the socket keeping it.
        setNoDelay(self.transport)
        return result

    def logout(self) -> Deferred[None]:
        """
        Send C{LOGOUT}; when it is answered, close the connection (bounded:
        see L{close}).  Its C{BYE} is expected, not a L{imapmig.errors.ServerBye}.
        """
        self._loggingOut = True
        d: Deferred[Any] = self.sendCommand(Command(b"LOGOUT"))
        return d.addCallback(self._loggedOut)

    def _loggedOut(self, result: object) -> None:
        self.close()

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
        if self._compression is not None:
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
        compression = self._compression = Compression(self.transport, level)
        self.transport = compression.deflater
        # This runs while the line reader is splitting lines: the octets
        # after the OK line, already read, are compressed.  Inflate them and
        # hand them back; the reader, busy, queues them and goes on with
        # them.
        rest = self.clearLineBuffer()
        if rest:
            self._inflateReceived(compression.inflater, rest)
        return result

    def compressionStats(self) -> CompressionStats | None:
        """
        Octets before and after compression in each direction, or L{None}
        if the connection is not compressed.
        """
        compression = self._compression
        return None if compression is None else compression.stats()
