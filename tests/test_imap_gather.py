# -*- test-case-name: tests.test_imap_gather -*-
"""
Tests for L{imapmig.imap.gather}: a plain TCP transport's pieces written
with one C{sendmsg}, unjoined, in order with what the transport holds.
"""

from __future__ import annotations

import socket

from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.gather import GatherWriter, TransportWriter, _unsent, writerFor


def _connection(test: SynchronousTestCase) -> tuple[tcp.Connection, socket.socket]:
    """
    A Twisted TCP transport over one end of a loopback TCP connection (on
    a memory reactor), and the other end.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    ours = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    listener.close()
    ours.setblocking(False)
    theirs.setblocking(False)
    test.addCleanup(ours.close)
    test.addCleanup(theirs.close)
    transport = tcp.Connection(ours, Protocol(), MemoryReactor())
    transport.connected = 1
    return transport, theirs


def _readAll(sock: socket.socket) -> bytes:
    """
    Everything the peer has received so far.
    """
    received = []
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        received.append(chunk)
    return b"".join(received)


class WriterForTests(SynchronousTestCase):
    """
    L{writerFor} writes plain TCP transports only.
    """

    def test_plainTCP(self) -> None:
        """
        A Twisted TCP connection without TLS gets a L{GatherWriter}.
        """
        transport, _ = _connection(self)
        self.assertIsInstance(writerFor(transport), GatherWriter)

    def test_tls(self) -> None:
        """
        A TCP connection that has started TLS is written as before: its
        octets must be encrypted.
        """
        transport, _ = _connection(self)
        transport.TLS = True
        self.assertIsInstance(writerFor(transport), TransportWriter)

    def test_notTCP(self) -> None:
        """
        Any other transport (a test's, a COMPRESS or TLS wrapper) is
        written as before.
        """
        transport = StringTransport()
        writerFor(transport).writeSequence([b"a", b"b"])
        self.assertEqual(transport.value(), b"ab")


class GatherWriterTests(SynchronousTestCase):
    """
    L{GatherWriter.writeSequence}.
    """

    def test_straightToSocket(self) -> None:
        """
        With nothing unsent in the transport, the pieces go to the socket
        at once, in order, and the transport's buffer stays empty (no
        join).
        """
        transport, peer = _connection(self)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        pieces = [b"1 APPEND INBOX {5+}\r\n", b"hello", b" {3+}\r\n", b"abc", b"\r\n"]
        writer.writeSequence(pieces)
        self.assertEqual(_readAll(peer), b"".join(pieces))
        self.assertEqual(writer.direct, len(b"".join(pieces)))
        self.assertEqual((transport._tempDataBuffer, transport._tempDataLen), ([], 0))

    def test_behindUnsent(self) -> None:
        """
        While the transport holds octets not yet sent, the pieces queue
        behind them in the transport, so the order on the wire holds.
        """
        transport, peer = _connection(self)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        transport.write(b"earlier")
        writer.writeSequence([b"later", b"\r\n"])
        self.assertEqual(_readAll(peer), b"")
        self.assertEqual(transport._tempDataBuffer, [b"earlier", b"later", b"\r\n"])
        self.assertEqual(writer.direct, 0)

    def test_fullSocket(self) -> None:
        """
        What the socket does not take is handed to the transport, which
        sends it when it can: the peer receives every octet in order.
        """
        transport, peer = _connection(self)
        transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        pieces = [b"A" * 300_000, b"B" * 300_000, b"\r\n"]
        writer.writeSequence(pieces)
        self.assertGreater(transport._tempDataLen, 0)
        self.assertEqual(writer.direct + transport._tempDataLen, 600_002)
        received = [_readAll(peer)]
        for _ in range(10_000):
            if not (transport._tempDataLen or len(transport.dataBuffer) > transport.offset):
                break
            transport.doWrite()
            received.append(_readAll(peer))
        self.assertEqual(b"".join(received), b"".join(pieces))

    def test_closedPeer(self) -> None:
        """
        A socket that refuses the write (the peer is gone) leaves the
        pieces to the transport, which reports the loss as it does for its
        own writes.
        """
        transport, peer = _connection(self)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        peer.close()
        transport.socket.shutdown(socket.SHUT_WR)
        writer.writeSequence([b"x", b"y"])
        self.assertEqual(transport._tempDataBuffer, [b"x", b"y"])


class UnsentTests(SynchronousTestCase):
    """
    L{_unsent}: what is left of pieces after a partial send.
    """

    def test_cuts(self) -> None:
        """
        The pieces after the octets sent, the one cut copied from the cut.
        """
        pieces = [b"abc", b"de", b"fgh"]
        self.assertEqual(_unsent(pieces, 0), pieces)
        self.assertEqual(_unsent(pieces, 2), [b"c", b"de", b"fgh"])
        self.assertEqual(_unsent(pieces, 3), [b"de", b"fgh"])
        self.assertEqual(_unsent(pieces, 6), [b"gh"])
        self.assertEqual(_unsent(pieces, 8), [])


class PipelineTests(SynchronousTestCase):
    """
    L{imapmig.imap.pipeline.AppendPipeline} writes a plain TCP transport
    with a L{GatherWriter}.
    """

    def test_appendReachesSocket(self) -> None:
        """
        An APPEND's command line, literal and CRLF reach the socket in the
        write that queued them, without passing through the transport's
        buffer.
        """
        from twisted.internet.task import Clock

        from imapmig.imap.client import MigrationIMAP4Client
        from imapmig.imap.outgoing import LiteralMode, OutgoingMessage, PipelineSettings
        from imapmig.imap.pipeline import AppendPipeline

        transport, peer = _connection(self)
        client = MigrationIMAP4Client(Clock())
        client.makeConnection(transport)
        client.dataReceived(b"* OK [CAPABILITY IMAP4rev1 LITERAL+] ready\r\n")
        settings = PipelineSettings(LiteralMode.PLUS, 1, 1 << 20, 100, 1 << 20)
        pipeline = AppendPipeline(client, settings, _NoOutcomes())
        pipeline.selectMailbox("INBOX")
        pipeline.enqueue([OutgoingMessage(b"Subject: x\r\n\r\nbody\r\n", b"", "m")])
        self.assertEqual(
            _readAll(peer), b'0001 APPEND "INBOX" {20+}\r\nSubject: x\r\n\r\nbody\r\n\r\n'
        )
        self.assertEqual(transport._tempDataLen, 0)


class _NoOutcomes:
    """
    Outcomes nobody reads.
    """

    def messagesAppended(self, *args: object) -> None:
        pass

    def messageRefused(self, *args: object) -> None:
        pass


class ViewTests(SynchronousTestCase):
    """
    A large body's slices travel as views of it, copied only for a
    transport that must hold them.
    """

    def test_slicesAreViews(self) -> None:
        """
        L{imapmig.imap.pipeline._memorySlices} gives views of the body
        itself, not copies.
        """
        from imapmig.imap.pipeline import STREAM_SLICE, _memorySlices

        body = b"x" * (STREAM_SLICE * 2 + 5)
        slices = list(_memorySlices(body))
        self.assertEqual([len(s) for s in slices], [STREAM_SLICE, STREAM_SLICE, 5])
        for piece in slices:
            self.assertIsInstance(piece, memoryview)
            assert isinstance(piece, memoryview)
            self.assertIs(piece.obj, body)

    def test_viewsToSocket(self) -> None:
        """
        Views go to the socket as they are.
        """
        transport, peer = _connection(self)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        body = b"0123456789"
        writer.writeSequence([b"{10+}\r\n", memoryview(body)[:4], memoryview(body)[4:], b"\r\n"])
        self.assertEqual(_readAll(peer), b"{10+}\r\n0123456789\r\n")

    def test_viewsCopiedForTransport(self) -> None:
        """
        A transport that holds what it is given (it takes bytes only) gets
        views as bytes: through a L{TransportWriter}, and behind octets a
        plain TCP transport has not sent yet.
        """
        stringTransport = StringTransport()
        writerFor(stringTransport).writeSequence([b"a", memoryview(b"bcd")[1:]])
        self.assertEqual(stringTransport.value(), b"acd")
        transport, _ = _connection(self)
        writer = writerFor(transport)
        transport.write(b"earlier")
        writer.writeSequence([memoryview(b"later")])
        self.assertEqual(transport._tempDataBuffer, [b"earlier", b"later"])
        self.assertEqual([type(p) for p in transport._tempDataBuffer], [bytes, bytes])
