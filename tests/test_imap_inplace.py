"""
Tests for L{imapmig.imap.inplace}: a plain TCP connection reads a FETCH
literal into its final buffer with C{recv_into}, and everything else as
Twisted does.
"""

from __future__ import annotations

import socket

from twisted.internet import main, tcp
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import _WrappingProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.inplace import InPlaceReads, readInPlace

from tests.test_imap_fetch import Collected, messageOf


class _Client(MigrationIMAP4Client):
    """
    The migration's client, counting what it reads in place and what
    comes to C{dataReceived}.
    """

    def __init__(self) -> None:
        super().__init__(Clock())
        self.inPlace: list[int] = []
        self.reads: list[int] = []

    def literalFilled(self, octets: int) -> None:
        self.inPlace.append(octets)
        super().literalFilled(octets)

    def dataReceived(self, data: bytes) -> None:
        self.reads.append(len(data))
        super().dataReceived(data)


class InPlaceReadsTests(SynchronousTestCase):
    """
    L{readInPlace} and L{InPlaceReads} on a TCP connection over a socket
    pair.
    """

    def _connected(self, wrapped: bool = False) -> tuple[_Client, tcp.Connection, socket.socket]:
        """
        The client on a TCP connection reading in place, greeted, and the
        server's end of the socket pair.

        @param wrapped: the connection's protocol is the client under the
            wrapper a client endpoint puts around it.
        """
        ours, theirs = _tcpPair(self)
        client = _Client()
        protocol: Protocol = _WrappingProtocol(Deferred(), client) if wrapped else client
        connection = tcp.Connection(ours, protocol, MemoryReactor())
        protocol.makeConnection(connection)
        self.assertTrue(readInPlace(connection))
        self.assertTrue(readInPlace(connection))
        self.assertIsInstance(connection.doRead.__self__, InPlaceReads)  # type: ignore[attr-defined]
        theirs.sendall(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
        self.assertIsNone(connection.doRead())
        return client, connection, theirs

    def test_bodiesInPlace(self) -> None:
        """
        Two body responses, the server's writes cut anywhere: each literal
        after the read that announced it is read in place, the read after
        it short; the bodies arrive exact, the command completes.
        """
        client, connection, server = self._connected()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 1:2 (UID BODY.PEEK[])", sink)
        first, second = messageOf(100_000, 1), b"\x00\xff\r" + messageOf(50_000, 2)
        wire = (
            b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % len(first) + first + b")\r\n"
            b"* 2 FETCH (UID 2 BODY[] {%d}\r\n" % len(second) + second + b")\r\n"
            b"0001 OK done\r\n"
        )
        for start, end in ((0, 40), (40, 70_000), (70_000, 100_100), (100_100, len(wire))):
            server.sendall(wire[start:end])
            while _readable(connection.socket):
                self.assertIsNone(connection.doRead())
        self.successResultOf(d)
        self.assertEqual([(i.uid, i.body) for i in sink.items], [(1, first), (2, second)])
        # All but the few octets of each literal in the read of its
        # response's first line.
        self.assertGreater(sum(client.inPlace), len(first) + len(second) - 100)

    def test_underAnEndpointsWrapper(self) -> None:
        """
        Under the wrapper of a client endpoint (which only forwards), the
        client's literals are read in place too.
        """
        client, connection, server = self._connected(wrapped=True)
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", sink)
        body = messageOf(30_000)
        server.sendall(b"* 1 FETCH (UID 1 BODY[] {30000}\r\n")
        self.assertIsNone(connection.doRead())
        server.sendall(body + b")\r\n0001 OK done\r\n")
        while _readable(connection.socket):
            self.assertIsNone(connection.doRead())
        self.successResultOf(d)
        self.assertEqual([(i.uid, i.body) for i in sink.items], [(1, body)])
        self.assertEqual(sum(client.inPlace), 30_000)

    def test_end(self) -> None:
        """
        The server closing the connection mid-literal ends it as Twisted's
        read does (C{CONNECTION_DONE}).
        """
        client, connection, server = self._connected()
        client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", Collected())
        server.sendall(b"* 1 FETCH (UID 1 BODY[] {100}\r\nabc")
        self.assertIsNone(connection.doRead())
        server.shutdown(socket.SHUT_WR)
        self.assertIs(connection.doRead(), main.CONNECTION_DONE)

    def test_nothingToRead(self) -> None:
        """
        A read with nothing there (a spurious wakeup) returns L{None}.
        """
        client, connection, server = self._connected()
        client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", Collected())
        server.sendall(b"* 1 FETCH (UID 1 BODY[] {100}\r\nabc")
        self.assertIsNone(connection.doRead())
        self.assertIsNone(connection.doRead())

    def test_otherProtocols(self) -> None:
        """
        A connection whose protocol cannot read in place (a TLS layer
        included, though it forwards every name to the protocol it wraps)
        keeps Twisted's read; so one whose protocol became another
        (STARTTLS) after it was set up.
        """
        ours, theirs = _tcpPair(self)
        self.assertFalse(readInPlace(tcp.Connection(ours, Protocol(), MemoryReactor())))
        wrapper = TLSMemoryBIOProtocol(None, _Client())
        self.assertFalse(readInPlace(tcp.Connection(ours, wrapper, MemoryReactor())))
        self.assertFalse(readInPlace(object()))
        client = _Client()
        connection = tcp.Connection(ours, client, MemoryReactor())
        client.makeConnection(connection)
        readInPlace(connection)
        other = Protocol()
        connection.protocol = other
        received: list[bytes] = []
        other.dataReceived = received.append  # type: ignore[method-assign,assignment]
        theirs.sendall(b"hello")
        self.assertIsNone(connection.doRead())
        self.assertEqual(received, [b"hello"])


def _readable(sock: socket.socket) -> bool:
    """
    Whether C{sock} has octets waiting.
    """
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def _tcpPair(case: SynchronousTestCase) -> tuple[socket.socket, socket.socket]:
    """
    Two ends of a TCP connection on the loopback (TCP options work on it,
    as on a server's), closed when C{case} ends.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    case.addCleanup(ours.close)
    case.addCleanup(theirs.close)
    return ours, theirs
