# -*- test-case-name: tests.test_imap_gather -*-
"""
Tests for L{imapmig.imap.gather}: a plain TCP transport's pieces written
with one C{sendmsg}, unjoined, in order with what the transport holds.
"""

from __future__ import annotations

import errno
import select
import socket
import weakref
from unittest import SkipTest

from twisted.internet import main, tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor, MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.gather import (
    GatherWriter,
    Piece,
    TransportWriter,
    _unsent,
    _Writable,
    gather,
    sendNow,
    writerFor,
)


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


def _drive(transport: tcp.Connection, peer: socket.socket) -> list[bytes]:
    """
    Read what the peer receives and call the transport's C{doWrite} each
    time its socket is writable (as the reactor would), until it holds
    nothing unsent; return what the peer read.
    """
    received = [_readAll(peer)]
    for _ in range(10_000):
        if not (transport._tempDataLen or len(transport.dataBuffer) > transport.offset):
            break
        select.select([], [transport.socket], [], 60)
        transport.doWrite()
        received.append(_readAll(peer))
    return received


def _readRest(sock: socket.socket, received: list[bytes], size: int) -> bytes:
    """
    What C{received} holds and the rest of C{size} octets, waited for (the
    kernel may still hold some for the peer when the transport holds
    none).
    """
    data = b"".join(received)
    sock.settimeout(60)
    while len(data) < size:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    return data


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
        received = _drive(transport, peer)
        self.assertEqual(_readRest(peer, received, 600_002), b"".join(pieces))

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


    def test_pausedAndResumedByGather(self) -> None:
        """
        A pipeline whose write the socket takes only in part is paused by
        its transport, and resumed by L{gather}'s C{doWrite} once what was
        held is sent; every command leaves whole and in order, a
        C{LOGOUT} written with the transport's C{write} after the last
        APPEND behind them all.
        """
        from twisted.internet.task import Clock

        from imapmig.imap.client import MigrationIMAP4Client
        from imapmig.imap.outgoing import LiteralMode, OutgoingMessage, PipelineSettings
        from imapmig.imap.pipeline import AppendPipeline

        transport, sock, writer = _fakeConnection(room=1 << 30)
        client = MigrationIMAP4Client(Clock())
        client.makeConnection(transport)
        client.dataReceived(b"* OK [CAPABILITY IMAP4rev1 LITERAL+] ready\r\n")
        sock.room = 1000
        settings = PipelineSettings(LiteralMode.PLUS, 1, 1 << 20, 100, 1 << 30)
        pipeline = AppendPipeline(client, settings, _NoOutcomes())
        # writerFor gives a real socket's transport this writer.
        pipeline._writer = writer
        pipeline.selectMailbox("INBOX")
        bodies = [bytes([65 + i]) * 200_000 for i in range(3)]
        pipeline.enqueue([OutgoingMessage(body, b"", "m") for body in bodies])
        # Paused after the first write: the rest of it is held.
        self.assertEqual(len(sock.calls), 1)
        self.assertTrue(pipeline._paused)
        self.assertGreater(transport._tempDataLen, transport.bufferSize)
        for piece in transport._tempDataBuffer:
            self.assertTrue(_isUncopied(piece, bodies) or len(piece) < 100)
        for _ in range(10):
            sock.room = 150_000
            transport.doWrite()
        transport.write(b"0004 LOGOUT\r\n")
        sock.room = 1 << 30
        transport.doWrite()
        expected = b"".join(
            b'%04d APPEND "INBOX" {200000+}\r\n%s\r\n' % (i + 1, body)
            for i, body in enumerate(bodies)
        )
        self.assertEqual(sock.wire(), expected + b"0004 LOGOUT\r\n")
        self.assertEqual(transport._tempDataLen, 0)
        self.assertFalse(pipeline._paused)


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
        views as bytes through a L{TransportWriter}; behind octets a plain
        TCP transport has not sent yet, views are held as they are (its
        C{doWrite} is L{gather}'s, which sends them unjoined).
        """
        stringTransport = StringTransport()
        writerFor(stringTransport).writeSequence([b"a", memoryview(b"bcd")[1:]])
        self.assertEqual(stringTransport.value(), b"acd")
        transport, _ = _connection(self)
        writer = writerFor(transport)
        transport.write(b"earlier")
        later = memoryview(b"later")
        writer.writeSequence([later])
        self.assertEqual(transport._tempDataBuffer, [b"earlier", b"later"])
        self.assertIs(transport._tempDataBuffer[1], later)


class _FakeSocket:
    """
    A socket whose C{sendmsg} takes at most C{room} octets a call (refusing
    with C{EAGAIN} when C{room} is 0, or raising C{error}), recording each
    call's buffers and what it took.
    """

    def __init__(self, room: int = 1 << 30) -> None:
        self.room = room
        self.error: OSError | None = None
        self.calls: list[int] = []
        self.received: list[bytes] = []
        self.shutdowns: list[int] = []

    def setblocking(self, flag: bool) -> None:
        pass

    def fileno(self) -> int:
        return 99

    def sendmsg(self, buffers: list[bytes | memoryview]) -> int:
        if self.error is not None:
            raise self.error
        self.calls.append(len(buffers))
        if not self.room:
            raise BlockingIOError()
        data = b"".join(buffers)[: self.room]
        self.room -= len(data)
        self.received.append(data)
        return len(data)

    def shutdown(self, how: int) -> None:
        self.shutdowns.append(how)

    def setsockopt(self, *args: object) -> None:
        pass

    def wire(self) -> bytes:
        return b"".join(self.received)


class _Producer:
    """
    A streaming producer counting its pauses and resumptions.
    """

    def __init__(self) -> None:
        self.pauses = 0
        self.resumptions = 0
        self.stopped = False

    def pauseProducing(self) -> None:
        self.pauses += 1

    def resumeProducing(self) -> None:
        self.resumptions += 1

    def stopProducing(self) -> None:
        self.stopped = True


def _fakeConnection(room: int = 1 << 30) -> tuple[tcp.Connection, _FakeSocket, GatherWriter]:
    """
    A Twisted TCP transport over a L{_FakeSocket}, on a memory reactor,
    with its L{GatherWriter}.
    """
    sock = _FakeSocket(room)
    transport = tcp.Connection(sock, Protocol(), MemoryReactor())  # type: ignore[arg-type]
    transport.connected = 1
    return transport, sock, GatherWriter(transport, sock)  # type: ignore[arg-type]


def _isUncopied(piece: object, originals: list[bytes]) -> bool:
    """
    Whether C{piece} is one of C{originals} or a view of one.
    """
    if isinstance(piece, memoryview):
        piece = piece.obj
    return any(piece is original for original in originals)


class GatherTests(SynchronousTestCase):
    """
    L{gather}: what the socket did not take stays as views in the
    transport's own list, and its C{doWrite} sends them with C{sendmsg},
    unjoined, as much a call as the socket takes.
    """

    def test_restHeldAsViews(self) -> None:
        """
        A partial C{sendmsg}'s rest is held by the transport as the pieces
        themselves and views of them, never copied, and the transport
        writes when its socket is writable.
        """
        transport, sock, writer = _fakeConnection(room=10)
        body = b"x" * 300_000
        pieces = [b"1 APPEND INBOX {300000+}\r\n", body, b"\r\n"]
        writer.writeSequence(pieces)
        self.assertEqual(writer.direct, 10)
        self.assertEqual(transport._tempDataLen, 300_028 - 10)
        held = transport._tempDataBuffer
        self.assertEqual(len(held), 3)
        for piece in held:
            self.assertTrue(_isUncopied(piece, pieces))
        self.assertIn(transport, transport.reactor.writers)  # type: ignore[attr-defined]

    def test_doWriteSendsAllTheSocketTakes(self) -> None:
        """
        One C{doWrite} sends everything held in one C{sendmsg} when the
        socket takes it (Twisted's own sends 128 KiB a call, after a join),
        then stops writing and resumes the paused producer.
        """
        transport, sock, writer = _fakeConnection(room=10)
        producer = _Producer()
        transport.registerProducer(producer, True)
        pieces = [b"1 APPEND INBOX {300000+}\r\n", b"x" * 300_000, b"\r\n"]
        writer.writeSequence(pieces)
        self.assertEqual(producer.pauses, 1)
        sock.room = 1 << 30
        self.assertIsNone(transport.doWrite())
        self.assertEqual(sock.calls, [3, 3])
        self.assertEqual(sock.wire(), b"".join(pieces))
        self.assertEqual((transport._tempDataBuffer, transport._tempDataLen), ([], 0))
        self.assertNotIn(transport, transport.reactor.writers)  # type: ignore[attr-defined]
        self.assertEqual(producer.resumptions, 1)

    def test_partialWrites(self) -> None:
        """
        Each C{doWrite} sends what the socket takes; the piece cut in two
        stays as a view of its rest; the octets leave in order, and the
        producer is resumed only once everything is sent.
        """
        transport, sock, writer = _fakeConnection(room=0)
        producer = _Producer()
        transport.registerProducer(producer, True)
        pieces = [b"a" * 70_000, b"b" * 70_000, b"c" * 70_000]
        writer.writeSequence(pieces)
        for room in (50_000, 50_000, 50_000):
            sock.room = room
            self.assertIsNone(transport.doWrite())
            self.assertEqual(producer.resumptions, 0)
            for piece in transport._tempDataBuffer:
                self.assertTrue(_isUncopied(piece, pieces))
        self.assertEqual(transport._tempDataLen, 60_000)
        sock.room = 60_000
        self.assertIsNone(transport.doWrite())
        self.assertEqual(sock.wire(), b"".join(pieces))
        self.assertEqual(producer.resumptions, 1)

    def test_socketFull(self) -> None:
        """
        A socket that takes nothing (C{EAGAIN}) leaves everything held, and
        the transport still writing.
        """
        transport, sock, writer = _fakeConnection(room=0)
        writer.writeSequence([b"abc", b"def"])
        self.assertIsNone(transport.doWrite())
        self.assertEqual(transport._tempDataBuffer, [b"abc", b"def"])
        self.assertEqual(transport._tempDataLen, 6)
        self.assertIn(transport, transport.reactor.writers)  # type: ignore[attr-defined]

    def test_orderWithTransportWrite(self) -> None:
        """
        A command written with the transport's own C{write} while pieces
        are held goes after them, and later pieces after it: the wire holds
        all three in the order they were written.
        """
        transport, sock, writer = _fakeConnection(room=4)
        writer.writeSequence([b"first ", b"APPEND"])
        transport.write(b" LOGOUT")
        writer.writeSequence([b" last"])
        self.assertEqual(writer.direct, 4)
        sock.room = 1 << 30
        transport.doWrite()
        self.assertEqual(sock.wire(), b"first APPEND LOGOUT last")

    def test_iovMax(self) -> None:
        """
        More pieces than one C{sendmsg} takes go in calls of at most
        C{IOV_MAX} buffers, one after the other while the socket takes all.
        """
        from imapmig.imap.gather import _IOV_MAX

        transport, sock, writer = _fakeConnection(room=0)
        pieces = [b"%d," % i for i in range(2 * _IOV_MAX + 5)]
        writer.writeSequence(pieces)
        sock.room = 1 << 30
        transport.doWrite()
        self.assertEqual(sock.calls[1:], [_IOV_MAX, _IOV_MAX, 5])
        self.assertEqual(sock.wire(), b"".join(pieces))

    def test_loseConnectionWaitsForHeld(self) -> None:
        """
        C{loseConnection} with pieces held closes only once they are sent,
        as Twisted's own C{doWrite} does.
        """
        transport, sock, writer = _fakeConnection(room=0)
        writer.writeSequence([b"abc", b"def"])
        transport.loseConnection()
        writer.writeSequence([b"ghi"])
        sock.room = 4
        self.assertIsNone(transport.doWrite())
        sock.room = 100
        self.assertIs(transport.doWrite(), main.CONNECTION_DONE)
        self.assertEqual(sock.wire(), b"abcdefghi")

    def test_halfClose(self) -> None:
        """
        C{loseWriteConnection} with pieces held shuts the socket's write
        side once they are sent.
        """
        transport, sock, writer = _fakeConnection(room=0)
        writer.writeSequence([b"abc"])
        transport.loseWriteConnection()
        sock.room = 100
        transport.doWrite()
        self.assertEqual((sock.wire(), sock.shutdowns), (b"abc", [socket.SHUT_WR]))
        self.assertTrue(transport._writeDisconnected)

    def test_lostWhileHeld(self) -> None:
        """
        A socket that refuses the write while pieces are held makes
        C{doWrite} report the connection lost, as Twisted's own does.
        """
        transport, sock, writer = _fakeConnection(room=0)
        writer.writeSequence([b"abc"])
        sock.error = ConnectionResetError(errno.ECONNRESET, "reset")
        self.assertIs(transport.doWrite(), main.CONNECTION_LOST)

    def test_noBuffersWaits(self) -> None:
        """
        C{ENOBUFS} waits for the next writable event, as Twisted's own
        C{writeSomeData} does.
        """
        transport, sock, writer = _fakeConnection(room=0)
        writer.writeSequence([b"abc"])
        sock.error = OSError(errno.ENOBUFS, "no buffers")
        self.assertIsNone(transport.doWrite())
        self.assertEqual(transport._tempDataLen, 3)

    def test_abortWins(self) -> None:
        """
        C{abortConnection} replaces the gathering C{doWrite} as it replaces
        Twisted's own, and L{gather} leaves it replaced: nothing more is
        sent.
        """
        sock = _FakeSocket(room=0)
        transport = tcp.Connection(sock, Protocol(), MemoryReactorClock())  # type: ignore[arg-type]
        transport.connected = 1
        writer = GatherWriter(transport, sock)  # type: ignore[arg-type]
        writer.writeSequence([b"abc"])
        transport.abortConnection()
        gather(transport)
        sock.room = 100
        transport.doWrite()
        self.assertEqual(sock.wire(), b"")

    def test_twistedHalfSent(self) -> None:
        """
        What Twisted's own C{doWrite} left half sent goes first, as a view.
        """
        sock = _FakeSocket(room=0)
        transport = tcp.Connection(sock, Protocol(), MemoryReactor())  # type: ignore[arg-type]
        transport.connected = 1
        transport.dataBuffer = b"0123456789"
        transport.offset = 4
        transport.write(b"later")
        gather(transport)
        self.assertEqual(transport._tempDataLen, 11)
        sock.room = 100
        transport.doWrite()
        self.assertEqual(sock.wire(), b"456789later")

    def test_connectionNotKeptAlive(self) -> None:
        """
        The gathering C{doWrite} holds its connection weakly: a connection
        nothing else holds is freed at once, without a cycle for the
        collector.
        """
        transport, sock, writer = _fakeConnection()
        del writer
        ref = weakref.ref(transport)
        del transport
        self.assertIsNone(ref())


class SocketTests(SynchronousTestCase):
    """
    L{gather} over a real loopback TCP connection.
    """

    def test_everyOctetInOrder(self) -> None:
        """
        Pieces the socket did not take, a command written with C{write}
        behind them and more pieces behind that reach the peer whole and
        in order, each C{doWrite} sending what the socket takes.
        """
        transport, peer = _connection(self)
        transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        writer = writerFor(transport)
        assert isinstance(writer, GatherWriter)
        first: list[Piece] = [b"A" * 300_000, memoryview(b"B" * 300_000)[1:], b"\r\n"]
        writer.writeSequence(first)
        self.assertGreater(transport._tempDataLen, 0)
        transport.write(b"2 LOGOUT\r\n")
        writer.writeSequence([b"C" * 100_000])
        received = _drive(transport, peer)
        expected = b"A" * 300_000 + b"B" * 299_999 + b"\r\n2 LOGOUT\r\n" + b"C" * 100_000
        self.assertEqual(_readRest(peer, received, len(expected)), expected)
        self.assertNotIn(transport, transport.reactor.writers)  # type: ignore[attr-defined]


class SendNowTests(SynchronousTestCase):
    """
    L{sendNow}, the TLS sender's way to the socket.
    """

    def test_restCopiedAndGathered(self) -> None:
        """
        What the socket does not take of a buffer about to be reused is
        handed to the transport as bytes, and the connection gathers from
        then on.
        """
        sock = _FakeSocket(room=3)
        transport = tcp.Connection(sock, Protocol(), MemoryReactor())  # type: ignore[arg-type]
        transport.connected = 1
        shared = bytearray(b"recordsXY")
        self.assertEqual(sendNow(sock, [memoryview(shared)], transport), 3)  # type: ignore[arg-type]
        shared[:] = b"overwrite"
        self.assertEqual(transport._tempDataBuffer, [b"ordsXY"])
        self.assertIsInstance(vars(transport)["doWrite"], _Writable)
        sock.room = 100
        transport.doWrite()
        self.assertEqual(sock.wire(), b"recordsXY")


class SendPiecesTests(SynchronousTestCase):
    """
    The C extension's C{sendPieces} (used by L{_sendmsg} for a socket's
    own sendmsg) does what C{socket.sendmsg}, its reference, does.
    """

    def setUp(self) -> None:
        from imapmig.imap import gather

        if gather.sendPieces is None:
            raise SkipTest("the C extension is not built")
        self.sendPieces = gather.sendPieces
        self.ours, self.peer = socket.socketpair()
        self.addCleanup(self.ours.close)
        self.addCleanup(self.peer.close)
        self.ours.setblocking(False)
        self.peer.setblocking(False)

    def received(self) -> bytes:
        """
        What the peer has received so far.
        """
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                return b"".join(chunks)
            chunks.append(chunk)

    def test_sameOctets(self) -> None:
        """
        Bytes, views (of bytes and of a bytearray, cut), empty pieces and
        no pieces at all: the same octets sent, and the same count.
        """
        shared = bytearray(b"0123456789")
        cases: list[list[Piece]] = [
            [],
            [b""],
            [b"a", memoryview(b"bcd")[1:], b"", memoryview(shared)[2:5], b"\0\xff\r\n"],
            [b"x" * 70 for _ in range(70)],
        ]
        for pieces in cases:
            self.assertEqual(self.sendPieces(self.ours.fileno(), pieces), self.ours.sendmsg(pieces))
            whole = b"".join(bytes(piece) for piece in pieces)
            self.assertEqual(self.received(), whole + whole)

    def test_failures(self) -> None:
        """
        A full socket, a view that is not contiguous or released, a
        closed socket, and a peer gone: the same errors; a piece of
        another kind is left to C{socket.sendmsg} (L{NotImplemented}).
        """
        fd = self.ours.fileno()
        other: list[object] = [b"a", bytearray(b"b")]
        self.assertIs(self.sendPieces(fd, other), NotImplemented)  # type: ignore[arg-type]
        self.ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = [b"z" * (1 << 20)]
        while True:
            try:
                self.sendPieces(fd, big)
            except BlockingIOError:
                break
        self.assertRaises(BlockingIOError, self.ours.sendmsg, big)
        self.assertRaises(BlockingIOError, self.sendPieces, fd, big)
        self.received()
        strided = memoryview(bytearray(b"abcdef"))[::2]
        released = memoryview(b"abc")
        released.release()
        for bad, error in ((strided, BufferError), (released, ValueError)):
            self.assertRaises(error, self.ours.sendmsg, [bad])
            self.assertRaises(error, self.sendPieces, fd, [bad])
        self.peer.close()
        self.assertRaises(BrokenPipeError, self.ours.sendmsg, [b"x"])
        self.assertRaises(BrokenPipeError, self.sendPieces, fd, [b"x"])
        self.ours.close()
        self.assertRaises(OSError, self.ours.sendmsg, [b"x"])
        error = self.assertRaises(OSError, self.sendPieces, self.ours.fileno(), [b"x"])
        self.assertEqual(error.errno, errno.EBADF)
