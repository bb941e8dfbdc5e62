# -*- test-case-name: tests.test_imap_gather -*-
"""
Writing a pipeline's pieces (command lines, literals, CRLFs) to a plain TCP
socket as one scatter-gather C{sendmsg}, without the copy Twisted's
transport makes when it joins its write buffer.

A Twisted TCP transport keeps what C{writeSequence} is given in a list and,
when the socket is writable, joins it into one C{bytes} before C{send}
(C{FileDescriptor.doWrite}): a second pass over every octet of every
message.  When the transport holds nothing unsent, nothing can be written
before these pieces, so they go to the kernel at once with C{sendmsg}, the
kernel gathering them from the pieces themselves; whatever the socket does
not take (a full send buffer) is handed to the transport as before, which
sends it when the socket is writable, and pauses its producer as before.
One C{sendmsg} is one flush: a command, its literal and its CRLF still
leave together.

Only a plain TCP transport is written this way: a TLS one (implicit, or
after STARTTLS) must encrypt the octets, and a COMPRESS one deflate them,
so they keep C{writeSequence}, except a TLS transport made by
L{imapmig.imap.tls}: its sender encrypts the pieces in place and sends the
records with L{sendNow}, the same way.  Nothing in Twisted
offered this: its transports join.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Sequence

from twisted.internet import tcp

__all__ = ["GatherWriter", "Piece", "TransportWriter", "idle", "sendNow", "writerFor"]

Piece = bytes | memoryview
"""
A piece of what the pipeline writes: bytes, or a view of a large body's
slice (given to C{sendmsg} as it is; a copy only where a transport must
hold it).
"""

# The most buffers one sendmsg takes (Linux UIO_MAXIOV).
_IOV_MAX: int = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class GatherWriter:
    """
    Writes lists of pieces to one plain TCP transport, straight to its
    socket with C{sendmsg} while the transport holds nothing unsent.

    @ivar direct: octets sent straight to the socket (for tests and
        measurement).
    """

    __slots__ = ("_transport", "_socket", "direct")

    def __init__(self, transport: Any, sock: socket.socket) -> None:
        """
        @param transport: a L{tcp.Connection} without TLS.
        @param sock: its socket.
        """
        self._transport = transport
        self._socket = sock
        self.direct = 0

    def writeSequence(self, pieces: Sequence[Piece]) -> None:
        """
        Write C{pieces}, in order, as the transport's C{writeSequence}
        would.
        """
        transport = self._transport
        if transport.TLS or not idle(transport):
            transport.writeSequence(_asBytes(pieces))
            return
        self.direct += sendNow(self._socket, pieces, transport)


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
    take handed to C{transport}'s C{writeSequence} (which writes the octets
    unchanged to the same socket when it is writable); the caller has
    checked that the connection is L{idle}.

    @return: the octets sent straight to the socket.
    """
    total = 0
    for piece in pieces:
        total += len(piece)
    try:
        if len(pieces) <= _IOV_MAX:
            sent = sock.sendmsg(pieces)
        else:
            sent = sock.sendmsg(pieces[:_IOV_MAX])
    except BlockingIOError:
        sent = 0
    except OSError:
        # The transport finds the error again, and reports the loss as
        # it does for its own writes.
        transport.writeSequence(_asBytes(pieces))
        return 0
    if sent < total:
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
    for index, piece in enumerate(pieces):
        if sent < len(piece):
            rest = [memoryview(piece)[sent:].tobytes() if sent else piece]
            rest.extend(pieces[index + 1 :])
            return _asBytes(rest)
        sent -= len(piece)
    return []


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
