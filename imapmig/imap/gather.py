# -*- test-case-name: tests.test_imap_gather -*-
"""
Writing a pipeline's pieces (command lines, literals, CRLFs) to a plain TCP
socket with scatter-gather C{sendmsg}, without the copy Twisted's transport
makes when it joins its write buffer.

A Twisted TCP transport keeps what C{write} and C{writeSequence} are given
in a list and, when the socket is writable, joins it into one C{bytes} and
sends 128 KiB of it a reactor turn (C{FileDescriptor.doWrite}): a second
pass over every octet, and a wakeup per 128 KiB.  When the transport holds
nothing unsent, nothing can be written before the pipeline's pieces, so
they go to the kernel at once with C{sendmsg}, the kernel gathering them
from the pieces themselves.  What the socket does not take (a full send
buffer) stays as views of the pieces in the transport's own list, after
anything written before and before anything written after, and the
transport's C{doWrite} is then L{gather}'s: each time the socket is
writable, one C{sendmsg} of as many of the pieces as C{IOV_MAX} allows, as
much as the socket takes, and nothing joined.  One C{sendmsg} is one
flush: a command, its literal and its CRLF still leave together.

Only a plain TCP transport's pieces are written this way: a TLS one
(implicit, or after STARTTLS) must encrypt the octets, and a COMPRESS one
deflate them, so they keep C{writeSequence}, except a TLS transport made by
L{imapmig.imap.tls}: its sender encrypts the pieces in place and sends the
records with L{sendNow}, the same way (the records' rest copied, its buffer
being reused, and then sent by L{gather}'s C{doWrite}).  Nothing in Twisted
offered this: its transports join.
"""

from __future__ import annotations

import os
import socket
import weakref
from errno import ENOBUFS
from typing import Any, Callable, Sequence

from twisted.internet import main, tcp

__all__ = ["GatherWriter", "Piece", "TransportWriter", "gather", "idle", "sendNow", "writerFor"]

Piece = bytes | memoryview
"""
A piece of what the pipeline writes: bytes, or a view of a large body's
slice (given to C{sendmsg} as it is, and held as it is until sent).
"""

# The most buffers one sendmsg takes (Linux UIO_MAXIOV).
_IOV_MAX: int = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024

# The C extension's sendmsg of pieces (imapmig/imap/_append.c), where
# built: socket.sendmsg is its reference and its fallback.
sendPieces: Callable[[int, Sequence[Piece]], Any] | None
try:
    from imapmig.imap._append import sendPieces
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    sendPieces = None


class GatherWriter:
    """
    Writes lists of pieces to one plain TCP transport, straight to its
    socket with C{sendmsg} while the transport holds nothing unsent, the
    rest held by the transport as views and written by L{gather}'s
    C{doWrite}.

    @ivar direct: octets sent straight to the socket (for tests and
        measurement).
    """

    __slots__ = ("_transport", "_socket", "direct")

    def __init__(self, transport: Any, sock: socket.socket) -> None:
        """
        @param transport: a L{tcp.Connection} without TLS; from now on its
            C{doWrite} is L{gather}'s.
        @param sock: its socket.
        """
        self._transport = transport
        self._socket = sock
        self.direct = 0
        gather(transport)

    def writeSequence(self, pieces: Sequence[Piece]) -> None:
        """
        Write C{pieces}, in order, as the transport's C{writeSequence}
        would (views held as they are: they must not change until sent).
        """
        transport = self._transport
        if transport.TLS:
            transport.writeSequence(_asBytes(pieces))
            return
        if not idle(transport):
            _hold(transport, list(pieces), _total(pieces))
            return
        total = _total(pieces)
        try:
            sent = _sendmsg(self._socket, pieces)
        except OSError:
            # The transport's doWrite finds the error again, and reports
            # the loss as it does for its own writes.
            sent = 0
        self.direct += sent
        if sent < total:
            _hold(transport, _rest(pieces, sent), total - sent)


def gather(connection: Any) -> None:
    """
    Make C{connection}'s C{doWrite} (a L{tcp.Connection}'s, called by the
    reactor when its socket is writable) send the pieces its transport
    holds with C{sendmsg}, unjoined: L{_doWrite}.

    It is set on the instance, as Twisted itself sets C{doWrite} while
    connecting (C{doConnect}) and when aborting (C{abortConnection}, which
    replaces this one too): a connection whose C{doWrite} is already its
    own instance's (connecting, aborted, or gathering) is left as it is.
    What Twisted's own C{doWrite} left half-sent (its C{dataBuffer} from
    C{offset}) goes first in the list, as a view.
    """
    if "doWrite" in vars(connection):
        return
    rest = len(connection.dataBuffer) - connection.offset
    if rest > 0:
        connection._tempDataBuffer.insert(0, memoryview(connection.dataBuffer)[connection.offset :])
        connection._tempDataLen += rest
    connection.dataBuffer = b""
    connection.offset = 0
    connection.doWrite = _Writable(connection)


class _Writable:
    """
    A gathering connection's C{doWrite}: L{_doWrite} on it, held weakly (the
    connection holds this, and nothing must keep a lost connection alive
    but its protocol).
    """

    __slots__ = ("_connection",)

    def __init__(self, connection: Any) -> None:
        self._connection = weakref.ref(connection)

    def __call__(self) -> object:
        connection = self._connection()
        return None if connection is None else _doWrite(connection)


def _doWrite(connection: Any) -> object:
    """
    Send what C{connection} holds, in order, with C{sendmsg} (as many pieces
    a call as C{IOV_MAX} allows, again while the socket takes all it is
    offered); once it is all sent, end as Twisted's
    C{FileDescriptor.doWrite} ends: stop writing, then resume the producer,
    or finish a C{loseConnection} or a C{loseWriteConnection}.

    @return: as C{doWrite}'s: L{None}, or why the connection is lost.
    """
    pieces = connection._tempDataBuffer
    sock = connection.socket
    while pieces:
        offered = pieces if len(pieces) <= _IOV_MAX else pieces[:_IOV_MAX]
        try:
            sent = _sendmsg(sock, offered)
        except OSError as e:
            # As tcp.Connection.writeSomeData: a full socket waits.
            if e.errno == ENOBUFS:
                return None
            return main.CONNECTION_LOST
        connection._tempDataLen -= sent
        if not _consume(pieces, len(offered), sent):
            return None
    connection.stopWriting()
    producer = connection.producer
    if producer is not None and (not connection.streamingProducer or connection.producerPaused):
        connection.producerPaused = False
        producer.resumeProducing()
    elif connection.disconnecting:
        return connection._postLoseConnection()
    elif connection._writeDisconnecting:
        connection._writeDisconnected = True
        return connection._closeWriteConnection()
    return None


def _sendmsg(sock: socket.socket, pieces: Sequence[Piece]) -> int:
    """
    Send what C{sock} takes of the first C{IOV_MAX} of C{pieces} with one
    C{sendmsg}: the octets sent, 0 if the socket is full.

    @raise OSError: the socket refused the write (the peer is gone).
    """
    offered = pieces if len(pieces) <= _IOV_MAX else pieces[:_IOV_MAX]
    try:
        # A socket's own: its descriptor straight to sendmsg(2), without
        # socket.sendmsg's parsing of each piece (C, _append.sendPieces).
        if type(sock) is socket.socket and sendPieces is not None:
            sent = sendPieces(sock.fileno(), offered)
            if sent is not NotImplemented:
                return int(sent)
        return sock.sendmsg(offered)
    except BlockingIOError:
        return 0


def _consume(pieces: list[Piece], offered: int, sent: int) -> bool:
    """
    Remove the C{sent} octets from the head of C{pieces}, the piece cut in
    two left as a view of its rest; return whether all the first
    C{offered} pieces were sent.
    """
    whole = 0
    for piece in pieces:
        size = len(piece)
        if sent < size:
            break
        sent -= size
        whole += 1
    del pieces[:whole]
    if sent:
        pieces[0] = memoryview(pieces[0])[sent:]
    return whole == offered


def _hold(connection: Any, pieces: list[Piece], size: int) -> None:
    """
    Add C{pieces} (of C{size} octets) to what C{connection} holds unsent, as
    its C{writeSequence} does (pausing its producer when it holds more than
    its C{bufferSize}), views and all: L{gather}'s C{doWrite} sends them.
    """
    if not connection.connected or connection._writeDisconnected:
        return
    connection._tempDataBuffer.extend(pieces)
    connection._tempDataLen += size
    connection._maybePauseProducer()
    connection.startWriting()


def _total(pieces: Sequence[Piece]) -> int:
    """
    The octets of C{pieces} (C{map} and C{sum} loop in C: a third of the
    instructions of a Python loop over a write's pieces, two a message).
    """
    return sum(map(len, pieces))


def _rest(pieces: Sequence[Piece], sent: int) -> list[Piece]:
    """
    What is left of C{pieces} after their first C{sent} octets, uncopied
    (the piece cut in two as a view of its rest).
    """
    for index, piece in enumerate(pieces):
        if sent < len(piece):
            rest: list[Piece] = [memoryview(piece)[sent:] if sent else piece]
            rest.extend(pieces[index + 1 :])
            return rest
        sent -= len(piece)
    return []


def idle(connection: Any) -> bool:
    """
    Whether C{connection}, a L{tcp.Connection}, holds nothing unsent and is
    open for writing: then octets sent straight to its socket cannot pass
    any it was given before.
    """
    return not (
        connection._tempDataLen
        or len(connection.dataBuffer) > connection.offset
        or not connection.connected
        or connection.disconnecting
        or connection._writeDisconnected
    )


def sendNow(sock: socket.socket, pieces: Sequence[Piece], transport: Any) -> int:
    """
    Send C{pieces} to C{sock} with one C{sendmsg}, whatever it does not
    take handed to C{transport}'s C{writeSequence} as bytes (the pieces
    may be views of a buffer about to be reused), which holds it for the
    same socket; the caller has checked that the connection is L{idle}.
    The connection below C{transport} (itself, or under STARTTLS the
    connection Twisted's C{_BypassTLS} writes to) then L{gather}s: it sends
    what it holds unjoined, as much a time as the socket takes.

    @return: the octets sent straight to the socket.
    """
    total = _total(pieces)
    try:
        sent = _sendmsg(sock, pieces)
    except OSError:
        # The transport finds the error again, and reports the loss as
        # it does for its own writes.
        sent = 0
    if sent < total:
        connection = getattr(transport, "_connection", transport)
        if isinstance(connection, tcp.Connection):
            gather(connection)
        transport.writeSequence(_unsent(pieces, sent))
    return sent


def _asBytes(pieces: Sequence[Piece]) -> list[bytes]:
    """
    C{pieces} as bytes, for a transport (which holds them): views copied.
    """
    return [piece if type(piece) is bytes else bytes(piece) for piece in pieces]


def _unsent(pieces: Sequence[Piece], sent: int) -> list[bytes]:
    """
    What is left of C{pieces} after their first C{sent} octets, as bytes
    for the transport (the piece cut in two copied from where it was cut).
    """
    return _asBytes(_rest(pieces, sent))


class TransportWriter:
    """
    Writes lists of pieces to any other transport with its own
    C{writeSequence} (looked up at each write).
    """

    __slots__ = ("_transport",)

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def writeSequence(self, pieces: Sequence[Piece]) -> None:
        """
        Write C{pieces}, in order, with the transport's C{writeSequence}
        (views copied: transports take bytes).
        """
        self._transport.writeSequence(_asBytes(pieces))


def writerFor(transport: Any) -> Any:
    """
    What writes the pipeline's pieces to C{transport}: a L{GatherWriter} if
    it is a plain TCP connection (Twisted's own, without TLS); the TLS
    layer's own sender if it has one (L{imapmig.imap.tls.TLSSender}, which
    takes the pieces as they are); else a L{TransportWriter}: written as
    usual.
    """
    if isinstance(transport, tcp.Connection):
        if not transport.TLS:
            sock = transport.getHandle()
            if isinstance(sock, socket.socket):
                return GatherWriter(transport, sock)
        # Under STARTTLS, the TLS layer is the connection's protocol.
        sender = getattr(transport.protocol, "tlsSender", None)
    else:
        sender = getattr(transport, "tlsSender", None)
    return sender if sender is not None else TransportWriter(transport)
