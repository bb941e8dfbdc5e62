# -*- test-case-name: tests.test_imap_inplace -*-
"""
Plain TCP reads of a FETCH literal straight into its final buffer.

Twisted's TCP transport reads up to C{bufferSize} octets into a fresh
C{bytes} and hands it to the protocol, which copies each literal's octets
out of it into the body (L{imapmig.imap.fetch}).  L{InPlaceReads} replaces
the C{doRead} of one connection: while the protocol (a
L{imapmig.imap.responses.ResponseReader}) reads a literal it can take in
place (C{literalSpace}), the socket is read with C{recv_into} into the
literal's final buffer, the kernel's copy the only one; every other read is
Twisted's.  So the rest of each literal that a read of C{bufferSize} cuts
is read in place, for one more C{recv} per such read.

A short read after each literal (the end of its response and the next
one's first line) would have the next literal read almost all in place
too, but was measured to cost more than the copy it saves: a read through
the protocol's Python costs about as many instructions as copying a
message of 40 kB (bench/results/s2s.md, round 5).

Reads Twisted's C{tcp.Connection} state (C{socket}, C{bufferSize},
C{protocol}, C{disconnected}); C{tests.test_imap_inplace} pins what it
relies on.
"""

from __future__ import annotations

from errno import EWOULDBLOCK
from typing import Any

from twisted.internet import main, tcp
from twisted.internet.endpoints import _WrappingProtocol

__all__ = ["InPlaceReads", "readInPlace"]


class InPlaceReads:
    """
    The C{doRead} of one TCP connection whose protocol reads FETCH
    literals in place (C{literalSpace} and C{literalFilled}).
    """

    def __init__(self, connection: tcp.Connection, reader: Any) -> None:
        """
        @param connection: the TCP transport, whose C{doRead} this becomes.
        @param reader: its protocol (under an endpoint's wrapper, if one
            is its C{protocol}).
        """
        self._connection = connection
        self._protocol = connection.protocol
        self._reader = reader
        self._stock = connection.doRead

    def doRead(self) -> Any:
        """
        Read what the socket holds, up to C{bufferSize} octets in all: the
        literal being read in place, else as Twisted reads.

        @return: as Twisted's C{doRead}: L{None}, or why the connection
            ended.
        """
        connection: Any = self._connection
        reader = self._reader
        if connection.protocol is not self._protocol:
            # STARTTLS put the TLS layer between: its reads are its own.
            return self._stock()
        sock = connection.socket
        budget = connection.bufferSize
        while budget > 0 and not connection.disconnected:
            space = reader.literalSpace()
            if space is None:
                size = connection.bufferSize
                try:
                    data = sock.recv(size)
                except OSError as se:
                    return None if se.args[0] == EWOULDBLOCK else main.CONNECTION_LOST
                if not data:
                    return main.CONNECTION_DONE
                reader.dataReceived(data)
                got = len(data)
            else:
                size = len(space)
                try:
                    got = sock.recv_into(space)
                except OSError as se:
                    return None if se.args[0] == EWOULDBLOCK else main.CONNECTION_LOST
                finally:
                    space.release()
                if not got:
                    return main.CONNECTION_DONE
                reader.literalFilled(got)
            if got < size:
                # The socket is empty (most likely): back to the reactor.
                return None
            budget -= got
        return None


def readInPlace(connection: object) -> bool:
    """
    Have the TCP transport C{connection} read FETCH literals in place, if
    its protocol can take them so.

    @return: whether it will.
    """
    if not isinstance(connection, tcp.Connection):
        return False
    reader = _unwrapped(connection.protocol)
    # The class's own: a TLS layer (a ProtocolWrapper) answers any name
    # with its wrapped protocol's, whose literal is not in the TCP stream.
    if getattr(type(reader), "literalSpace", None) is None:
        return False
    if isinstance(getattr(connection.doRead, "__self__", None), InPlaceReads):
        return True
    connection.doRead = InPlaceReads(connection, reader).doRead  # type: ignore[method-assign]
    return True


def _unwrapped(protocol: object) -> object:
    """
    The protocol an endpoint's connection hands what it reads to: under
    the wrapper a client endpoint puts around it (C{_WrappingProtocol},
    which only forwards), or C{protocol} itself.
    """
    if type(protocol) is _WrappingProtocol:
        return protocol._wrappedProtocol
    return protocol
