"""
Tests for L{imapmig.imap.acks}: acknowledging each read at once
(C{TCP_QUICKACK}) on the TCP socket under imapmig's transports, and which
pipelines ask for it.
"""

from __future__ import annotations

import socket
from typing import Iterator

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.acks import ImmediateAcks, tcpSocketOf
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.outgoing import LiteralMode, PipelineSettings
from imapmig.imap.pipeline import AppendPipeline
from tests.test_imap_pipeline import RecordingOutcomes

if not hasattr(socket, "TCP_QUICKACK"):
    skip = "TCP_QUICKACK is Linux's"


def _loopbackPair() -> tuple[socket.socket, socket.socket]:
    """
    Two connected TCP sockets on 127.0.0.1 (blocking set-up, no reactor).
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


class SocketTransport(StringTransport):
    """
    An in-memory transport over a real TCP socket, as a TCP transport
    after STARTTLS offers it (its C{socket} attribute).
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.socket = sock


class Wrapper:
    """
    A transport wrapping another, as TLS (C{transport}) or COMPRESS
    (C{_transport}) do, whose handle is not a socket.
    """

    def __init__(self, inner: object, attribute: str) -> None:
        setattr(self, attribute, inner)

    def getHandle(self) -> object:
        return object()


class TcpSocketOfTests(SynchronousTestCase):
    """
    L{tcpSocketOf} finds the TCP socket through the wrappers.
    """

    def setUp(self) -> None:
        self.sock, self.peer = _loopbackPair()
        self.addCleanup(self.sock.close)
        self.addCleanup(self.peer.close)

    def test_wrapped(self) -> None:
        """
        Under COMPRESS over TLS over TCP (after STARTTLS), the socket is
        found.
        """
        transport = Wrapper(Wrapper(SocketTransport(self.sock), "transport"), "_transport")
        self.assertIs(tcpSocketOf(transport), self.sock)

    def test_inMemory(self) -> None:
        """
        An in-memory transport has no socket: no immediate ACKs.
        """
        self.assertIsNone(tcpSocketOf(StringTransport()))
        self.assertIsNone(ImmediateAcks.forTransport(StringTransport()))


class ImmediateAcksTests(SynchronousTestCase):
    """
    L{ImmediateAcks.rearm} on a real socket.
    """

    def test_rearm(self) -> None:
        """
        Re-arming turns quick-ACK mode back on after the kernel left it.
        """
        sock, peer = _loopbackPair()
        self.addCleanup(peer.close)
        self.addCleanup(sock.close)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
        self.assertEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK), 0)
        acks = ImmediateAcks(sock)
        acks.rearm()
        self.assertEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK), 1)
        self.assertTrue(acks.active)

    def test_refused(self) -> None:
        """
        A socket that refuses the option (closed) turns immediate ACKs off
        for good, without an exception.
        """
        sock, peer = _loopbackPair()
        peer.close()
        sock.close()
        acks = ImmediateAcks(sock)
        acks.rearm()
        self.assertFalse(acks.active)
        acks.rearm()


def _connected(sock: socket.socket) -> MigrationIMAP4Client:
    client = MigrationIMAP4Client(Clock())
    client.makeConnection(SocketTransport(sock))
    client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
    return client


class ClientTests(SynchronousTestCase):
    """
    The client re-arms immediate ACKs on every read once asked, and only
    then; pipelines ask for them where literals synchronize.
    """

    def setUp(self) -> None:
        self.sock, self.peer = _loopbackPair()
        self.addCleanup(self.sock.close)
        self.addCleanup(self.peer.close)

    def _quickAck(self) -> int:
        return self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)

    def test_eachRead(self) -> None:
        """
        After L{MigrationIMAP4Client.acknowledgeEachRead}, every read
        re-arms C{TCP_QUICKACK}; before, none does.
        """
        client = _connected(self.sock)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
        client.dataReceived(b"* 1 EXISTS\r\n")
        self.assertEqual(self._quickAck(), 0)
        self.assertFalse(client.acknowledgingEachRead)
        self.assertTrue(client.acknowledgeEachRead())
        self.assertTrue(client.acknowledgingEachRead)
        for _ in self._reads(client):
            self.assertEqual(self._quickAck(), 1)

    def _reads(self, client: MigrationIMAP4Client) -> Iterator[None]:
        for line in (b"* 2 EXISTS\r\n", b"* 3 EXISTS\r\n"):
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
            client.dataReceived(line)
            yield None

    def test_pipelines(self) -> None:
        """
        A pipeline with synchronizing literals (none offered, or LITERAL-)
        asks for immediate ACKs; one with LITERAL+ does not.
        """
        for mode, expected in [
            (LiteralMode.SYNC, True),
            (LiteralMode.MINUS, True),
            (LiteralMode.PLUS, False),
        ]:
            client = _connected(self.sock)
            settings = PipelineSettings(mode, 1, 1 << 20, 100, 1 << 20)
            AppendPipeline(client, settings, RecordingOutcomes())
            self.assertEqual(client.acknowledgingEachRead, expected, mode)
