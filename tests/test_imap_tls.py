"""
Tests for L{imapmig.imap.tls}: every way a TLS handshake fails ends in a
clear error of imapmig's, naming the server, never an internal error; a
message body is written to OpenSSL in place, and what a write made leaves
in one piece; what one read brings reaches the protocol in one piece; a
stall, a reset mid-record, a renegotiation, a close_notify and a short
write lose nothing and hang nothing.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Callable

from OpenSSL import SSL
from OpenSSL._util import ffi as _ffi, lib as _lib
from twisted.internet import reactor as globalReactor, tcp
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, wrapClientTLS
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.ssl import (
    Certificate,
    CertificateOptions,
    PrivateCertificate,
    TLSVersion,
    optionsForClientTLS,
)
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.test.iosim import connectedServerAndClient
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from imapmig.config import parseConfig
from imapmig.errors import (
    ImapmigError,
    NotTLS,
    PermanentError,
    TLSFailed,
    TLSInterrupted,
    TransientError,
)
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.opening import openSession
from imapmig.imap import _literal, tls
from imapmig.imap.literal import LiteralBuffer
from imapmig.imap.tls import (
    SEND_CHUNK,
    HandshakeClosed,
    TLSReceiver,
    WatchedClientTLS,
    WatchedConnection,
    describeTLSError,
    handshakeFailure,
    watched,
    streamline,
)
from imapmig.progress import JobState
from imapmig.daemon.service import buildService
from imapmig.testing.hostile import (
    CLOSE_NOTIFY,
    STARTTLS_GREETING,
    BreakHandshake,
    HostileIMAPServer,
    Send,
)
from imapmig.testing.privateserver import writeTestCertificates
from tests.support import newDirectory, writePasswordFile

# A TLS alert record, fatal, handshake_failure: a server that speaks TLS
# and refuses this client's offer.
HANDSHAKE_FAILURE_ALERT = bytes.fromhex("15030300020228")

PLAIN_GREETING = b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] plain IMAP here\r\n"


class _OneProtocolFactory(Factory):
    """
    Builds the one protocol it was given.
    """

    def __init__(self, protocol: Protocol) -> None:
        self._protocol = protocol

    def buildProtocol(self, addr: object) -> Protocol:
        return self._protocol


def _implicitTLS(
    options: Any = None,
) -> tuple[MigrationIMAP4Client, TLSMemoryBIOProtocol, StringTransport]:
    """
    A client under an implicit-TLS wrapper, in memory: its ClientHello is
    in the transport, and what the server sends is fed to the wrapper.
    """
    client = MigrationIMAP4Client(Clock(), 0, peer="alice at tls:127.0.0.1:993")
    if options is None:
        options = WatchedClientTLS(optionsForClientTLS("imap.example"))
    factory = TLSMemoryBIOFactory(options, True, _OneProtocolFactory(client))
    wrapper = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 993))
    transport = StringTransport()
    wrapper.makeConnection(transport)
    return client, wrapper, transport


class ImplicitTLSMemoryTests(SynchronousTestCase):
    """
    A client under Twisted's TLS wrapper with watched options, over a
    memory transport, against each way a server can break the handshake.
    """

    def _lost(
        self, answer: bytes, ending: Failure, options: Any = None
    ) -> ImapmigError:
        """
        Start the handshake, feed C{answer} as the server's, end the
        connection with C{ending}, and return the error the greeting
        failed with (no other error logged).
        """
        client, wrapper, transport = _implicitTLS(options)
        self.assertTrue(transport.value(), "no ClientHello was sent")
        if answer:
            wrapper.dataReceived(answer)
        wrapper.connectionLost(ending)
        failure = self.failureResultOf(client.greeted, ImapmigError)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertTrue(client.closed.called)
        error = failure.value
        assert isinstance(error, ImapmigError)
        return error

    def test_closeNotify(self) -> None:
        """
        A C{close_notify} alert instead of a ServerHello (what Courier
        sent) is a permanent L{TLSFailed} saying so, not an C{IndexError}
        from Twisted's TLS layer.
        """
        error = self._lost(CLOSE_NOTIFY, Failure(ConnectionDone()))
        self.assertIsInstance(error, TLSFailed)
        self.assertIsInstance(error, PermanentError)
        self.assertEqual(str(error), "the server ended the TLS handshake (close_notify)")

    def test_closeNotifyUnwatched(self) -> None:
        """
        Without the watch, the same C{close_notify} makes Twisted's TLS
        layer raise C{IndexError} (the defect the watch exists for): if
        this test fails, Twisted fixed it and the watch's conversion may
        go.
        """
        client, wrapper, transport = _implicitTLS(optionsForClientTLS("imap.example"))
        self.assertRaises(IndexError, wrapper.dataReceived, CLOSE_NOTIFY)

    def test_alert(self) -> None:
        """
        A TLS alert (the server speaks TLS and refuses the handshake) is a
        permanent L{TLSFailed} with OpenSSL's reason, not L{NotTLS}.
        """
        error = self._lost(HANDSHAKE_FAILURE_ALERT, Failure(ConnectionDone()))
        self.assertIsInstance(error, TLSFailed)
        self.assertNotIsInstance(error, NotTLS)
        self.assertIn("TLS handshake failed", str(error))
        self.assertIn("handshake failure", str(error))

    def test_plainIMAP(self) -> None:
        """
        An implicit-TLS port that answers in plain IMAP is a permanent
        L{NotTLS} quoting the start of the answer, escaped.
        """
        error = self._lost(PLAIN_GREETING, Failure(ConnectionDone()))
        self.assertIsInstance(error, NotTLS)
        assert isinstance(error, NotTLS)
        self.assertEqual(error.excerpt, "* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] plain IMAP here\\r\\n")
        self.assertEqual(
            str(error),
            'not TLS: the server answered "* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN]'
            ' plain IMAP here\\r\\n"',
        )

    def test_binaryGarbage(self) -> None:
        """
        Octets that are neither TLS nor text are quoted escaped and cut at
        80 octets.
        """
        error = self._lost(b"\x00\xff" * 100, Failure(ConnectionDone()))
        self.assertIsInstance(error, NotTLS)
        assert isinstance(error, NotTLS)
        self.assertEqual(error.excerpt, "\\x00\\xff" * 40 + "...")

    def test_reset(self) -> None:
        """
        A reset during the handshake is a transient L{TLSInterrupted}
        saying so.
        """
        error = self._lost(b"", Failure(ConnectionLost()))
        self.assertIsInstance(error, TLSInterrupted)
        self.assertIsInstance(error, TransientError)
        assert isinstance(error, TLSInterrupted)
        self.assertFalse(error.closed)
        self.assertEqual(str(error), "connection reset during the TLS handshake")

    def test_closed(self) -> None:
        """
        A clean close during the handshake, with no TLS alert, is a
        transient L{TLSInterrupted} saying the server closed it.
        """
        error = self._lost(b"", Failure(ConnectionDone()))
        self.assertIsInstance(error, TLSInterrupted)
        assert isinstance(error, TLSInterrupted)
        self.assertTrue(error.closed)
        self.assertEqual(
            str(error),
            "the server closed the connection during the TLS handshake (no TLS alert)",
        )

    def test_partialRecordThenClose(self) -> None:
        """
        The start of a TLS record and then a close is an interrupted
        handshake, not L{NotTLS}.
        """
        error = self._lost(b"\x16\x03\x03\x00", Failure(ConnectionDone()))
        self.assertIsInstance(error, TLSInterrupted)

    def test_watchedConnectionIsAnOpenSSLConnection(self) -> None:
        """
        The wrapper's handle stays an L{SSL.Connection} (code that checks
        for TLS by its type still sees it), now a L{WatchedConnection},
        and keeps the host name the wrapped options set up.
        """
        client, wrapper, transport = _implicitTLS()
        handle = wrapper.getHandle()
        self.assertIsInstance(handle, SSL.Connection)
        self.assertIsInstance(handle, WatchedConnection)
        self.assertEqual(handle.get_servername(), b"imap.example")
        wrapper.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(client.greeted)


class MappingTests(SynchronousTestCase):
    """
    L{handshakeFailure}, L{describeTLSError} and L{watched} alone.
    """

    def test_unwatchedHandle(self) -> None:
        """
        Without a L{WatchedConnection} the mapping still classifies by the
        reason, only without an excerpt.
        """
        closed = handshakeFailure(ConnectionDone(), None)
        reset = handshakeFailure(ConnectionLost(), object())
        self.assertIsInstance(closed, TLSInterrupted)
        self.assertIsInstance(reset, TLSInterrupted)
        self.assertIsInstance(handshakeFailure(HandshakeClosed(), None), TLSFailed)

    def test_handshakeClosedInHierarchy(self) -> None:
        """
        L{HandshakeClosed} is an L{SSL.Error} (what Twisted's TLS layer
        catches) and a L{TLSFailed} of imapmig's hierarchy; mapped, it
        becomes a plain L{TLSFailed} saying what happened, not itself.
        """
        closed = HandshakeClosed()
        self.assertIsInstance(closed, SSL.Error)
        self.assertIsInstance(closed, TLSFailed)
        mapped = handshakeFailure(closed, None)
        self.assertIs(type(mapped), TLSFailed)
        self.assertEqual(str(mapped), HandshakeClosed.REASON)

    def test_unknown(self) -> None:
        """
        A reason that is none of the known endings is left alone
        (L{None}); an error of imapmig's is kept as it is.
        """
        self.assertIsNone(handshakeFailure(ValueError("x"), None))
        error = TLSFailed("the server's certificate does not match x")
        self.assertIs(handshakeFailure(error, None), error)

    def test_emptyOpenSSLError(self) -> None:
        """
        An OpenSSL error without arguments (the shape that crashed
        Twisted) is described by its type, never an C{IndexError}.
        """
        self.assertEqual(describeTLSError(SSL.ZeroReturnError()), "ZeroReturnError")
        self.assertEqual(describeTLSError(SSL.Error([])), "Error")
        self.assertEqual(
            describeTLSError(SSL.Error([("SSL routines", "", "certificate verify failed")])),
            "certificate verify failed",
        )

    def test_watchedOnce(self) -> None:
        """
        L{watched} wraps client TLS options once, and leaves anything else
        (no options, a test's stand-in) alone.
        """
        options = optionsForClientTLS("imap.example")
        once = watched(options)
        self.assertIsInstance(once, WatchedClientTLS)
        self.assertIs(watched(once), once)
        self.assertIsNone(watched(None))


class _Listening:
    """
    A hostile server listening on loopback for one test.
    """

    def __init__(self, greeting: bytes | BreakHandshake, script: dict[str, Any]) -> None:
        self.greeting = greeting
        self.script = script
        self.servers: list[HostileIMAPServer] = []

    def build(self) -> HostileIMAPServer:
        greeting = (
            self.greeting if isinstance(self.greeting, BreakHandshake) else Send(self.greeting)
        )
        server = HostileIMAPServer(globalReactor, self.script, greeting=greeting)
        self.servers.append(server)
        return server

    async def listen(self, testCase: TestCase) -> int:
        endpoint = TCP4ServerEndpoint(globalReactor, 0, interface="127.0.0.1")
        port = await endpoint.listen(Factory.forProtocol(self.build))
        testCase.addCleanup(port.stopListening)
        number: int = port.getHost().port
        return number


class LoopbackHandshakeTests(TestCase):
    """
    L{openSession} over real loopback sockets against a server that breaks
    the TLS handshake: each way ends in an error of imapmig's naming the
    server (C{user at endpoint}), and nothing is logged as unhandled.
    """

    async def _open(
        self,
        greeting: bytes | BreakHandshake,
        script: dict[str, Any],
        implicit: bool = False,
    ) -> ImapmigError:
        listening = _Listening(greeting, script)
        port = await listening.listen(self)
        options = WatchedClientTLS(optionsForClientTLS("localhost"))
        endpoint: Any = TCP4ClientEndpoint(globalReactor, "127.0.0.1", port)
        if implicit:
            endpoint = wrapClientTLS(options, endpoint)
        description = f"alice at {'tls' if implicit else 'tcp'}:127.0.0.1:{port}"
        try:
            await openSession(
                endpoint,
                globalReactor,
                description=description,
                user="alice",
                password="secret",
                starttls=not implicit,
                tlsOptions=options,
                timeout=10,
            )
        except ImapmigError as e:
            error = e
        else:
            self.fail("the session opened")
        self.assertTrue(str(error).startswith(description + ": "), str(error))
        self.assertEqual(self.flushLoggedErrors(), [])
        for server in listening.servers:
            self.assertNotIn(b"LOGIN", b" ".join(server.received).upper())
        await _closed(listening)
        return error

    async def test_starttlsCloseNotify(self) -> None:
        """
        STARTTLS accepted, then C{close_notify} instead of a ServerHello
        (Courier-IMAP's behaviour): a permanent L{TLSFailed} saying the
        server ended the handshake.
        """
        error = await self._open(
            STARTTLS_GREETING, {"STARTTLS": BreakHandshake(CLOSE_NOTIFY, "close")}
        )
        self.assertIsInstance(error, TLSFailed)
        self.assertTrue(str(error).endswith(": the server ended the TLS handshake (close_notify)"))

    async def test_starttlsCloseNotifyLeftOpen(self) -> None:
        """
        C{close_notify} with the connection left open fails the same way
        (the client ends the connection).
        """
        error = await self._open(
            STARTTLS_GREETING, {"STARTTLS": BreakHandshake(CLOSE_NOTIFY, "open")}
        )
        self.assertIsInstance(error, TLSFailed)
        self.assertIn("close_notify", str(error))

    async def test_starttlsReset(self) -> None:
        """
        A reset during the STARTTLS handshake: a transient
        L{TLSInterrupted}.
        """
        error = await self._open(STARTTLS_GREETING, {"STARTTLS": BreakHandshake(b"", "reset")})
        self.assertIsInstance(error, TLSInterrupted)
        self.assertTrue(str(error).endswith(": connection reset during the TLS handshake"))

    async def test_starttlsClosed(self) -> None:
        """
        A clean close during the STARTTLS handshake: a transient
        L{TLSInterrupted} saying the server closed it.
        """
        error = await self._open(STARTTLS_GREETING, {"STARTTLS": BreakHandshake(b"", "close")})
        self.assertIsInstance(error, TLSInterrupted)
        self.assertIn("the server closed the connection during the TLS handshake", str(error))

    async def test_starttlsPlainAnswer(self) -> None:
        """
        Plain text instead of a ServerHello after STARTTLS: a permanent
        L{NotTLS} quoting it.
        """
        error = await self._open(
            STARTTLS_GREETING,
            {"STARTTLS": BreakHandshake(b"* BAD I do not speak TLS\r\n", "open")},
        )
        self.assertIsInstance(error, NotTLS)
        self.assertIn('not TLS: the server answered "* BAD I do not speak TLS\\r\\n"', str(error))

    async def test_implicitTLSPlainIMAP(self) -> None:
        """
        An implicit-TLS endpoint whose port speaks plain IMAP: a permanent
        L{NotTLS} quoting its greeting.
        """
        error = await self._open(PLAIN_GREETING, {}, implicit=True)
        self.assertIsInstance(error, NotTLS)
        self.assertIn('not TLS: the server answered "* OK [CAPABILITY', str(error))

    async def test_implicitTLSCloseNotify(self) -> None:
        """
        An implicit-TLS port that answers the ClientHello with
        C{close_notify}: a permanent L{TLSFailed}.
        """
        error = await self._open(BreakHandshake(CLOSE_NOTIFY, "close"), {}, implicit=True)
        self.assertIsInstance(error, TLSFailed)
        self.assertIn("close_notify", str(error))


async def _closed(listening: _Listening) -> None:
    """
    Wait until every server connection of C{listening} is gone (trial
    fails a test that leaves a socket behind).
    """
    for server in listening.servers:
        if not server.lost:
            done: Deferred[None] = Deferred()
            original = server.connectionLost

            def lost(reason: object = None, original: Any = original, done: Any = done) -> None:
                original(reason)
                done.callback(None)

            server.connectionLost = lost  # type: ignore[method-assign]
            await done


class JobTLSFailureTests(TestCase):
    """
    The daemon's job, against a server whose STARTTLS handshake ends in
    C{close_notify}, fails with a clear TLS error naming the server: not a
    crash, no retry.
    """

    async def test_closeNotifyFailsTheJob(self) -> None:
        """
        The job's state is failed, its error names the server and says
        the server ended the TLS handshake, nothing is logged as a crash,
        and there was one connection (a permanent failure: no retry).
        """
        listening = _Listening(
            STARTTLS_GREETING, {"STARTTLS": BreakHandshake(CLOSE_NOTIFY, "close")}
        )
        port = await listening.listen(self)
        directory = newDirectory(self)
        emlDirectory = os.path.join(directory, "eml")
        os.mkdir(emlDirectory)
        with open(os.path.join(emlDirectory, "1.eml"), "wb") as f:
            f.write(b"Subject: one\r\n\r\nbody\r\n")
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": "off",
            "servers": {
                "courier": {
                    "endpoint": f"tcp:127.0.0.1:{port}",
                    "starttls": "required",
                    "tls_hostname": "localhost",
                }
            },
            "jobs": [
                {
                    "name": "tls",
                    "source": {"eml_dir": emlDirectory},
                    "destination": {
                        "server": "courier",
                        "user": "alice",
                        "password_file": writePasswordFile(
                            os.path.join(directory, "password"), "secret"
                        ),
                    },
                }
            ],
        }
        config = parseConfig(document, os.path.join(directory, "imapmig.yaml"))
        finished: Deferred[bool] = Deferred()
        service = buildService(config, globalReactor, whenDone=finished.callback)
        service.startService()
        try:
            completed = await finished.addTimeout(30, globalReactor)
        finally:
            await service.stopService()
        await _closed(listening)
        progress = service.progress.job("tls")
        self.assertFalse(completed)
        self.assertEqual(progress.state, JobState.FAILED)
        self.assertEqual(
            progress.error,
            f"alice at tcp:127.0.0.1:{port}: the server ended the TLS handshake (close_notify)",
        )
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(len(listening.servers), 1)


class _Received(Protocol):
    """
    Keeps what arrives.
    """

    def __init__(self) -> None:
        self.received = b""

    def dataReceived(self, data: bytes) -> None:
        self.received += data


def _certificates(test: SynchronousTestCase) -> tuple[PrivateCertificate, Certificate]:
    """
    The test CA's server certificate with its key, and the CA's.
    """
    tlsDir = os.path.abspath(test.mktemp())
    writeTestCertificates(tlsDir)
    with open(os.path.join(tlsDir, "server.pem")) as f, \
            open(os.path.join(tlsDir, "server.key")) as k:
        serverCertificate = PrivateCertificate.loadPEM(f.read() + k.read())
    with open(os.path.join(tlsDir, "ca.pem"), "rb") as f:
        trust = Certificate.loadPEM(f.read())
    return serverCertificate, trust


def _recordingSends(test: SynchronousTestCase, connection: Any) -> list[object]:
    """
    What C{connection}, an OpenSSL connection, is handed to encrypt, from
    now on: by Twisted (pyOpenSSL's C{send}) or by L{TLSSender} (its
    C{SSL_write}, L{tls._write}).
    """
    sent: list[object] = []
    send = connection.send
    write = tls._write

    def recordingSend(data: Any, flags: int = 0) -> int:
        sent.append(data)
        taken: int = send(data, flags)
        return taken

    def recordingWrite(ssl: Any, piece: Any) -> int:
        sent.append(piece)
        return write(ssl, piece)

    connection.send = recordingSend
    test.patch(tls, "_write", recordingWrite)
    return sent


class _TLSPairCase(SynchronousTestCase):
    """
    Tests of a client TLS transport with watched options against a TLS
    server, in memory.
    """

    def _connected(
        self, clientProtocol: Protocol | None = None, highest: TLSVersion | None = None
    ) -> tuple[TLSMemoryBIOProtocol, _Received, Any, Clock]:
        """
        A client TLS transport with watched options and a TLS server (of at
        most TLS version C{highest} if given), in memory, handshake done;
        the server's protocol keeps what arrives.
        """
        serverCertificate, trust = _certificates(self)
        clock = Clock()
        received = _Received()
        clientOptions = WatchedClientTLS(optionsForClientTLS("localhost", trustRoot=trust))
        clientFactory = TLSMemoryBIOFactory(
            clientOptions, True, _OneProtocolFactory(clientProtocol or Protocol()), clock=clock
        )
        serverOptions = CertificateOptions(
            privateKey=serverCertificate.privateKey.original,
            certificate=serverCertificate.original,
            lowerMaximumSecurityTo=highest,
        )
        serverFactory = TLSMemoryBIOFactory(serverOptions, False,
                                            _OneProtocolFactory(received), clock=clock)  # fmt: skip
        address = IPv4Address("TCP", "127.0.0.1", 993)
        client, server, pump = connectedServerAndClient(
            lambda: serverFactory.buildProtocol(address),
            lambda: clientFactory.buildProtocol(address),
        )
        pump.flush()
        return client, received, pump, clock


class SenderTests(_TLSPairCase):
    """
    L{TLSSender}: the connections L{WatchedClientTLS} makes hand a message
    body to OpenSSL in place and send what a write made in one piece, in
    order, the bytes unchanged.
    """

    def test_bodyInPlace(self) -> None:
        """
        A C{writeSequence} holding a body of 16 KiB or more reaches OpenSSL
        with the body itself (no join, no slice copied), the short pieces
        around it joined, after what was written before it; the server
        reads every octet in order.
        """
        client, received, pump, clock = self._connected()
        sent = _recordingSends(self, client._tlsConnection)
        body = bytes(range(256)) * 200  # 51,200 octets: four records
        client.write(b"A0 NOOP\r\n")
        client.writeSequence([b"A1 APPEND INBOX {51200+}\r\n", body, b"\r\n", b"A2 NOOP\r\n"])
        client.writeSequence([b"A3 NOOP", b"\r\n"])
        pump.flush()
        self.assertEqual(received.received, b"A0 NOOP\r\nA1 APPEND INBOX {51200+}\r\n" + body
                         + b"\r\nA2 NOOP\r\nA3 NOOP\r\n")  # fmt: skip
        self.assertEqual(sent, [b"A0 NOOP\r\n", b"A1 APPEND INBOX {51200+}\r\n", body,
                                b"\r\nA2 NOOP\r\n", b"A3 NOOP\r\n"])  # fmt: skip
        self.assertIs(sent[2], body)
        clock.advance(0)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_viewInPlace(self) -> None:
        """
        A body given as a C{memoryview} (of a C{bytearray}, or a slice of a
        large literal) reaches OpenSSL as that view, and the server reads
        it.
        """
        client, received, pump, clock = self._connected()
        sent = _recordingSends(self, client._tlsConnection)
        body = memoryview(bytearray(b"x" * 40000))[1000:]
        sender = client.tlsSender
        sender.writeSequence([b"A1 APPEND INBOX {39000+}\r\n", body, b"\r\n"])
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {39000+}\r\n" + b"x" * 39000
                         + b"\r\n")  # fmt: skip
        self.assertIs(sent[1], body)

    def test_notThroughPyOpenSSLSend(self) -> None:
        """
        The pieces of a C{writeSequence} reach OpenSSL's C{SSL_write}
        directly (L{tls._write}), not through pyOpenSSL's C{send} and the
        Python around it; the server reads every octet in order.
        """
        client, received, pump, clock = self._connected()

        def refused(data: Any, flags: int = 0) -> int:
            raise AssertionError("pyOpenSSL's send was called")

        connection: Any = client._tlsConnection
        connection.send = refused
        body = bytes(range(256)) * 100
        client.writeSequence([b"A1 APPEND INBOX {25600+}\r\n", body, b"\r\n"])
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {25600+}\r\n" + body + b"\r\n")

    def test_emptyPieces(self) -> None:
        """
        Empty pieces, alone or beside others, write nothing and fail
        nothing (C{SSL_write} of no octets is not called: it returns 0,
        which reads as a failure).
        """
        client, received, pump, clock = self._connected()
        sent = _recordingSends(self, client._tlsConnection)
        client.writeSequence([b""])
        client.writeSequence([b"", b"x" * 20000, b""])
        pump.flush()
        self.assertEqual(received.received, b"x" * 20000)
        self.assertNotIn(b"", sent)

    def test_writeFailed(self) -> None:
        """
        A write OpenSSL refuses (the client already sent its close_notify)
        raises pyOpenSSL's error for it.
        """
        client, received, pump, clock = self._connected()
        connection = client._tlsConnection
        connection.shutdown()
        self.assertRaises(SSL.Error, tls._sendAll, connection, b"A1 NOOP\r\n")

    def test_oneWritePerSequence(self) -> None:
        """
        The records OpenSSL made for one C{writeSequence} reach the
        transport in one write, not one per 16 KiB record.
        """
        client, received, pump, clock = self._connected()
        transport: Any = client.transport
        writes: list[bytes] = []
        write = transport.write

        def recordingWrite(data: bytes) -> None:
            writes.append(data)
            write(data)

        transport.write = recordingWrite
        body = b"y" * 100000
        client.writeSequence([b"A1 APPEND INBOX {100000+}\r\n", body, b"\r\n"])
        self.assertEqual(len(writes), 1)
        self.assertGreater(len(writes[0]), 100000)
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {100000+}\r\n" + body + b"\r\n")

    def test_largeWriteChunked(self) -> None:
        """
        The records of a message of several megabytes leave OpenSSL's
        memory BIO in writes of at most L{SEND_CHUNK} octets, so the buffer
        shared by every connection never grows to the message's size; the
        server reads every octet in order.
        """
        client, received, pump, clock = self._connected()
        transport: Any = client.transport
        writes: list[int] = []
        write = transport.write

        def recordingWrite(data: bytes) -> None:
            writes.append(len(data))
            write(data)

        transport.write = recordingWrite
        body = bytes(range(256)) * (3 * 2**20 // 256)
        client.writeSequence([b"A1 APPEND INBOX {3145728+}\r\n", body, b"\r\n"])
        self.assertGreaterEqual(len(writes), 3)
        self.assertLessEqual(max(writes), SEND_CHUNK)
        self.assertEqual(_lib.BIO_get_mem_data(client._tlsConnection._from_ssl, _ffi.NULL), 0)
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {3145728+}\r\n" + body + b"\r\n")

    def test_writtenDuringTheSend(self) -> None:
        """
        A write made while the records of the one before are being handed
        to the transport (the transport calling back into the protocol)
        is sent after them, once, and the records handed over are dropped
        from the memory BIO though the write moved them: the server reads
        every octet once, in order.
        """
        client, received, pump, clock = self._connected()
        transport: Any = client.transport
        write = transport.write
        writes: list[bytes] = []

        def reentrantWrite(data: bytes) -> None:
            writes.append(data)
            if len(writes) == 1:
                client.writeSequence([b"A2 APPEND INBOX {20000+}\r\n", b"z" * 20000, b"\r\n"])
            write(data)

        transport.write = reentrantWrite
        client.writeSequence([b"A1 APPEND INBOX {30000+}\r\n", b"y" * 30000, b"\r\n"])
        self.assertEqual(len(writes), 2)
        self.assertEqual(_lib.BIO_get_mem_data(client._tlsConnection._from_ssl, _ffi.NULL), 0)
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {30000+}\r\n" + b"y" * 30000
                         + b"\r\nA2 APPEND INBOX {20000+}\r\n" + b"z" * 20000 + b"\r\n")  # fmt: skip

    def test_beforeHandshake(self) -> None:
        """
        Pieces written before the handshake finished are held, as Twisted
        holds them, and sent after it, in order.
        """
        serverCertificate, trust = _certificates(self)
        clock = Clock()
        received = _Received()
        clientOptions = WatchedClientTLS(optionsForClientTLS("localhost", trustRoot=trust))
        clientFactory = TLSMemoryBIOFactory(clientOptions, True, _OneProtocolFactory(Protocol()),
                                            clock=clock)  # fmt: skip
        serverFactory = TLSMemoryBIOFactory(serverCertificate.options(), False,
                                            _OneProtocolFactory(received), clock=clock)  # fmt: skip
        address = IPv4Address("TCP", "127.0.0.1", 993)
        client, server, pump = connectedServerAndClient(
            lambda: serverFactory.buildProtocol(address),
            lambda: clientFactory.buildProtocol(address),
            greet=False,
        )
        self.assertFalse(client._handshakeDone)
        body = b"z" * 20000
        client.writeSequence([b"A1 APPEND INBOX {20000+}\r\n", body, b"\r\n"])
        clock.advance(0)
        pump.flush()
        clock.advance(0)
        pump.flush()
        self.assertEqual(received.received, b"A1 APPEND INBOX {20000+}\r\n" + body + b"\r\n")

    def _overSocket(
        self, sendBuffer: int = 0
    ) -> tuple[TLSMemoryBIOProtocol, tcp.Connection, SSL.Connection, socket.socket]:
        """
        A client TLS transport with watched options over a real TCP
        connection on loopback (its socket non-blocking, C{SO_SNDBUF} set
        to C{sendBuffer} if not 0), handshake done with an in-memory OpenSSL
        server whose ciphertext goes through the peer socket, also
        returned.
        """
        serverCertificate, trust = _certificates(self)
        listener = socket.create_server(("127.0.0.1", 0))
        if sendBuffer:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sendBuffer)
        ours = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if sendBuffer:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sendBuffer)
        ours.connect(listener.getsockname())
        theirs, _ = listener.accept()
        listener.close()
        ours.setblocking(False)
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        theirs.settimeout(10)
        clientOptions = WatchedClientTLS(optionsForClientTLS("localhost", trustRoot=trust))
        factory = TLSMemoryBIOFactory(clientOptions, True, _OneProtocolFactory(Protocol()),
                                      clock=Clock())  # fmt: skip
        client = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 993))
        connection = tcp.Connection(ours, client, MemoryReactor())
        connection.connected = 1
        client.makeConnection(connection)
        server = SSL.Connection(serverCertificate.options().getContext(), None)
        server.set_accept_state()
        while not client._handshakeDone:
            server.bio_write(theirs.recv(1 << 16))
            try:
                server.do_handshake()
            except SSL.WantReadError:
                pass
            client.dataReceived(_drained(server))
        return client, connection, server, theirs

    def test_straightToSocket(self) -> None:
        """
        Over a TCP connection holding nothing unsent, the records go
        straight to its socket (the transport's buffer stays empty), and
        the server decrypts what was written; the handshake's records go
        the same way.
        """
        client, connection, server, theirs = self._overSocket()
        sender = client.tlsSender
        self.assertGreater(sender.direct, 0)
        body = bytes(range(256)) * 300
        sender.writeSequence([b"A1 APPEND INBOX {76800+}\r\n", body, b"\r\n"])
        self.assertEqual(connection.dataBuffer, b"")
        self.assertEqual(connection._tempDataBuffer, [])
        expected = b"A1 APPEND INBOX {76800+}\r\n" + body + b"\r\n"
        plain = b""
        while len(plain) < len(expected):
            server.bio_write(theirs.recv(1 << 16))
            plain += _decrypted(server)
        self.assertEqual(plain, expected)

    def test_shortWrite(self) -> None:
        """
        A peer that stalls: the socket takes part of the records (the rest
        would block), the rest waits in the TCP transport, whose producer
        (the writer's, through the TLS transport) is paused, so nothing
        more piles up; once the peer reads again, every octet arrives in
        order and the producer is resumed.
        """
        client, connection, server, theirs = self._overSocket(sendBuffer=4096)
        producer = _Producer()
        client.registerProducer(producer, True)
        sender = client.tlsSender
        body = bytes(range(256)) * 4096  # 1 MiB
        sender.writeSequence([b"A1 APPEND INBOX {1048576+}\r\n", body, b"\r\n"])
        self.assertGreater(sender.direct, 0)
        self.assertGreater(len(connection.dataBuffer) + connection._tempDataLen, 0)
        self.assertTrue(producer.paused)
        expected = b"A1 APPEND INBOX {1048576+}\r\n" + body + b"\r\n"
        plain = b""
        while len(plain) < len(expected):
            server.bio_write(theirs.recv(1 << 16))
            plain += _decrypted(server)
            connection.doWrite()
        self.assertEqual(plain, expected)
        self.assertFalse(producer.paused)


@implementer(IPushProducer)
class _Producer:
    """
    A writer's producer: paused or not.
    """

    paused = False

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        pass


class _Reads(Protocol):
    """
    Keeps each piece that arrives, and why the connection ended.
    """

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.reason: Failure | None = None

    def dataReceived(self, data: bytes) -> None:
        self.pieces.append(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.reason = reason


class _LiteralReads(_Reads):
    """
    A L{_Reads} that takes a literal it was told to expect in place, as
    L{imapmig.imap.responses.ResponseReader} does: each piece written in
    place is kept in C{inPlace}.
    """

    def __init__(self) -> None:
        super().__init__()
        self.inPlace: list[int] = []
        self.literal: bytes | None = None
        self._buffer: LiteralBuffer | None = None
        self._view: memoryview | None = None
        self._filled = 0

    def expect(self, size: int) -> None:
        self._buffer = LiteralBuffer(size)
        self._view = memoryview(self._buffer)
        self._filled = 0

    def literalSpace(self) -> memoryview | None:
        if self._view is None:
            return None
        return self._view[self._filled :]

    def literalFilled(self, octets: int) -> None:
        assert self._view is not None and self._buffer is not None
        self.inPlace.append(octets)
        self._filled += octets
        if self._filled == len(self._view):
            self._view.release()
            self.literal = self._buffer.take()
            self._view = self._buffer = None


class ReceiverTests(_TLSPairCase):
    """
    L{TLSReceiver}: what one read brings reaches the protocol as one piece,
    whatever the number of records; the server's close_notify after it
    still ends the connection cleanly.
    """

    def test_recordsTogether(self) -> None:
        """
        Four records' worth of data from the server, arriving in one read,
        reach the protocol in one C{dataReceived}, intact.
        """
        reads = _Reads()
        client, received, pump, clock = self._connected(reads)
        data = bytes(range(256)) * 200  # 51,200 octets: four records
        pump.server.write(data)
        clock.advance(0)
        pump.flush()
        self.assertEqual(reads.pieces, [data])

    def test_readsOfEverySize(self) -> None:
        """
        Records cut anywhere by the reads (a read holding less than a record,
        one holding a record's end and several more): each read's plaintext
        reaches the protocol whole and in order, however much of it a record
        begun in the read before adds (the buffer each read is decrypted
        into is sized by the read, L{TLSReceiver._plaintextBound}).
        """
        reads = _Reads()
        data = bytes(range(256)) * 1200 + b"\x00\r"
        client, wire = self._wire(reads, data)
        cuts = [0, 5, 16000, 16500, 16501, 50000, 50100, 120000, len(wire)]
        for start, end in zip(cuts, cuts[1:]):
            client.dataReceived(wire[start:end])
        self.assertEqual(b"".join(reads.pieces), data)
        self.assertTrue(all(type(piece) is bytes and piece for piece in reads.pieces))

    def test_moreThanTheMost(self) -> None:
        """
        A read whose plaintext is more than L{tls.RECEIVE_MOST}: handed on
        in pieces of that size, in order, the last one shorter.
        """
        self.patch(tls, "RECEIVE_MOST", 5000)
        reads = _Reads()
        data = bytes(range(256)) * 100
        client, wire = self._wire(reads, data)
        client.dataReceived(wire)
        self.assertEqual([len(piece) for piece in reads.pieces], [5000] * 5 + [600])
        self.assertEqual(b"".join(reads.pieces), data)

    def test_closeNotifyAfterData(self) -> None:
        """
        Data and the server's close_notify in one read: the protocol gets
        the data, then a clean end (L{ConnectionDone}).
        """
        reads = _Reads()
        client, received, pump, clock = self._connected(reads)
        pump.server.write(b"* BYE bye\r\n")
        pump.server.loseConnection()
        clock.advance(0)
        pump.flush()
        self.assertEqual(reads.pieces, [b"* BYE bye\r\n"])
        assert reads.reason is not None
        self.assertIsInstance(reads.reason.value, ConnectionDone)

    def _wire(self, reads: _Reads, data: bytes) -> tuple[TLSMemoryBIOProtocol, bytes]:
        """
        The client transport, and the records the server made for C{data},
        not yet delivered.
        """
        client, received, pump, clock = self._connected(reads)
        pump.server.write(data)
        clock.advance(0)
        wire: bytes = pump.serverIO.getOutBuffer()
        return client, wire

    def test_stalledMidRecord(self) -> None:
        """
        A server that stops in the middle of a record (even of its
        header): nothing is handed on and nothing fails until the rest
        comes, then every record is, in order.
        """
        reads = _Reads()
        data = bytes(range(256)) * 200
        client, wire = self._wire(reads, data)
        client.dataReceived(wire[:3])
        client.dataReceived(wire[3:16000])
        self.assertEqual(reads.pieces, [])
        client.dataReceived(wire[16000:17000])
        self.assertEqual(reads.pieces, [data[:16384]])
        for start in range(17000, len(wire), 7000):
            client.dataReceived(wire[start : start + 7000])
        self.assertEqual(b"".join(reads.pieces), data)
        self.assertIsNone(reads.reason)

    def test_readInPlace(self) -> None:
        """
        After the handshake, OpenSSL reads the records from each read
        itself (a read-only BIO over it), not from a copy written into
        pyOpenSSL's memory BIO: nothing goes through C{bio_write}, and
        records cut at any read's end arrive whole and in order.
        """
        reads = _Reads()
        data = bytes(range(256)) * 200
        client, wire = self._wire(reads, data)
        connection: Any = client._tlsConnection
        written: list[bytes] = []
        connection.bio_write = written.append
        for start in range(0, len(wire), 5000):
            client.dataReceived(wire[start : start + 5000])
        self.assertEqual(written, [])
        self.assertEqual(b"".join(reads.pieces), data)
        self.assertIsNone(reads.reason)

    def test_literalInPlace(self) -> None:
        """
        While the protocol reads a literal in place, OpenSSL decrypts into
        its buffer (nothing of it handed to C{dataReceived}), across
        records and reads cut anywhere; what follows it comes as usual.
        """
        reads = _LiteralReads()
        body = bytes(range(256)) * 200 + b"\r"
        after = b")\r\n" + b"x" * 2000
        client, wire = self._wire(reads, body + after)
        reads.expect(len(body))
        for start in range(0, len(wire), 5000):
            client.dataReceived(wire[start : start + 5000])
        self.assertEqual(reads.literal, body)
        self.assertIs(type(reads.literal), bytes)
        self.assertEqual(sum(reads.inPlace), len(body))
        self.assertEqual(b"".join(reads.pieces), after)
        self.assertIsNone(reads.reason)

    def test_afterTheEnd(self) -> None:
        """
        What arrives once the TLS connection has ended (its shutdown
        finished, or the connection lost) is dropped without an error:
        nothing more is read from it, as in Twisted's own reading.
        """
        reads = _Reads()
        data = bytes(range(256)) * 200
        client, wire = self._wire(reads, data)
        client.dataReceived(wire[:20000])
        self.assertEqual(reads.pieces, [data[:16384]])
        internal: Any = client
        internal._lostTLSConnection = True
        client.dataReceived(wire[20000:])
        internal._tlsConnection = None
        client.dataReceived(wire[20000:])
        self.assertEqual(reads.pieces, [data[:16384]])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_resetMidRecord(self) -> None:
        """
        The connection ending in the middle of a record, even cleanly: the
        whole records before it are handed on, the part is not, and the
        protocol learns the data was cut (L{ConnectionLost}, not
        L{ConnectionDone}).
        """
        reads = _Reads()
        data = bytes(range(256)) * 200
        client, wire = self._wire(reads, data)
        client.dataReceived(wire[:20000])
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(reads.pieces, [data[:16384]])
        assert reads.reason is not None
        self.assertIsInstance(reads.reason.value, ConnectionLost)

    def test_renegotiation(self) -> None:
        """
        A TLS 1.2 server asking to renegotiate in the middle of the
        conversation: the client answers, the data after it and the
        client's writes arrive intact.
        """
        reads = _Reads()
        client, received, pump, clock = self._connected(reads, TLSVersion.TLSv1_2)
        server = pump.server
        server.write(b"* OK before\r\n")
        clock.advance(0)
        server._tlsConnection.renegotiate()
        server._tlsConnection.do_handshake()  # the HelloRequest
        server._flushSendBIO()
        data = bytes(range(256)) * 200
        server.write(data)
        client.write(b"A1 NOOP\r\n")
        clock.advance(0)
        pump.flush()
        clock.advance(0)
        pump.flush()
        self.assertEqual(b"".join(reads.pieces), b"* OK before\r\n" + data)
        self.assertEqual(received.received, b"A1 NOOP\r\n")
        self.assertFalse(server._tlsConnection.renegotiate_pending())
        self.assertEqual(server._tlsConnection.total_renegotiations(), 1)
        self.assertIsNone(reads.reason)


def _readAll(read: Callable[[int], bytes]) -> bytes:
    """
    What C{read} (an in-memory OpenSSL connection's C{bio_read} or C{recv})
    gives until OpenSSL wants more input.
    """
    out = b""
    while True:
        try:
            out += read(1 << 16)
        except SSL.WantReadError:
            return out


def _drained(connection: SSL.Connection) -> bytes:
    """
    What an in-memory OpenSSL connection has to send.
    """
    return _readAll(connection.bio_read)


def _decrypted(connection: SSL.Connection) -> bytes:
    """
    The plaintext an in-memory OpenSSL connection can read now.
    """
    return _readAll(connection.recv)


class ConsumeTests(SynchronousTestCase):
    """
    L{tls._consume}: the first octets of a memory BIO, already sent from
    its own buffer, are dropped; the rest stay, in order.
    """

    def _bio(self, octets: bytes) -> Any:
        """
        A memory BIO holding C{octets}, freed after the test.
        """
        bio = _lib.BIO_new(_lib.BIO_s_mem())
        self.addCleanup(_lib.BIO_free, bio)
        _lib.BIO_write(bio, octets, len(octets))
        return bio

    def _unread(self, bio: Any) -> tuple[Any, bytes]:
        """
        The address of C{bio}'s unread octets, and those octets.
        """
        where = _ffi.new("char **")
        size = _lib.BIO_get_mem_data(bio, where)
        return where[0], _ffi.buffer(where[0], size)[:]

    def test_inPlace(self) -> None:
        """
        Octets still where they were are dropped in place: the octets
        there are unchanged, and the BIO holds the rest.
        """
        bio = self._bio(bytes(range(256)) * 40)
        unread, octets = self._unread(bio)
        tls._consume(bio, unread, 10000)
        self.assertEqual(_ffi.buffer(unread, 10240)[:], octets)
        self.assertEqual(self._unread(bio)[1], octets[10000:])
        tls._consume(bio, self._unread(bio)[0], 240)
        self.assertEqual(self._unread(bio)[1], b"")

    def test_moved(self) -> None:
        """
        Octets moved since they were sent (the BIO written to meanwhile)
        are dropped from where they are now, what was written after them
        kept.
        """
        bio = self._bio(b"a" * 5000)
        unread, octets = self._unread(bio)
        tls._consume(bio, unread, 1000)
        sentFrom = self._unread(bio)[0]
        _lib.BIO_write(bio, b"b" * 100000, 100000)
        tls._consume(bio, sentFrom, 4000)
        self.assertEqual(self._unread(bio)[1], b"b" * 100000)


def _memoryPair(test: SynchronousTestCase) -> tuple[SSL.Connection, SSL.Connection]:
    """
    A TLS server and client on memory BIOs (pyOpenSSL alone), handshake
    done.
    """
    serverCertificate, _ = _certificates(test)
    serverContext = SSL.Context(SSL.TLS_METHOD)
    serverContext.use_certificate(serverCertificate.original)
    serverContext.use_privatekey(serverCertificate.privateKey.original)
    server = SSL.Connection(serverContext, None)
    server.set_accept_state()
    client = SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)
    client.set_connect_state()
    for _ in range(10):
        for one, other in ((client, server), (server, client)):
            try:
                one.do_handshake()
            except SSL.WantReadError:
                pass
            wire = _drained(one)
            if wire:
                other.bio_write(wire)
    return server, client


class ReadTLSTests(SynchronousTestCase):
    """
    C{imapmig.imap._literal.readTLS} and its twin L{tls.readTLSPython}:
    C{SSL_read} record after record into one buffer, while it gives octets
    and the buffer has room.
    """

    kinds: list[Callable[[int, int, Any], tuple[int, int]]] = [tls.readTLSPython, _literal.readTLS]

    def test_built(self) -> None:
        """
        The checkout builds the C function, and L{tls} uses it.
        """
        self.assertIs(tls.readTLS, _literal.readTLS)

    def _reads(self, kind: Callable[[int, int, Any], tuple[int, int]],
               plain: bytes, cuts: list[int], sizes: list[int]) -> list[tuple[bytes, bool]]:  # fmt: skip
        """
        What C{kind} reads, buffer size after buffer size, from a client fed
        the records of C{plain} cut at C{cuts}: each read's octets, and
        whether it stopped because its buffer was full.
        """
        server, client = _memoryPair(self)
        for start in range(0, len(plain), 5000):
            server.send(plain[start : start + 5000])
        wire = _drained(server)
        edges = [0, *cuts, len(wire)]
        address = int(_ffi.cast("uintptr_t", client._ssl))
        out: list[tuple[bytes, bool]] = []
        for start, end in zip(edges, edges[1:]):
            client.bio_write(wire[start:end])
            for size in sizes:
                buffer = LiteralBuffer(size)
                octets, last = kind(tls._SSL_READ, address, buffer)
                full = last > 0
                if not full:
                    self.assertEqual(_lib.SSL_get_error(client._ssl, last),
                                     _lib.SSL_ERROR_WANT_READ)  # fmt: skip
                out.append((buffer.take(octets), full))
        return out

    def test_sameReads(self) -> None:
        """
        Both read the same octets in the same pieces, stopping at a full
        buffer (with more to read) or when OpenSSL wants input (a record cut
        mid-header or mid-body, or nothing left), and between them all of
        it: 8-bit octets, NUL, a lone CR at a record's edge, an empty
        buffer.
        """
        plain = (b"\x00\xff\r" + bytes(range(256)) * 7) * 40
        cuts = [3, 5000, 5001, 30000, 61000]
        sizes = [0, 1, 4999, 20000, 1 << 20]
        results = [self._reads(kind, plain, cuts, sizes) for kind in self.kinds]
        self.assertEqual(results[0], results[-1])
        self.assertEqual(b"".join(octets for octets, _ in results[0]), plain)
        self.assertIn((b"", True), results[0])  # the empty buffer: full at once
        self.assertTrue(any(full and octets for octets, full in results[0]))

    def test_refused(self) -> None:
        """
        A read-only buffer is refused by both before anything is read, and
        a null address by the C function.
        """
        for kind in self.kinds:
            self.assertRaises((TypeError, BufferError), kind, tls._SSL_READ, 1, b"read-only")
        self.assertRaises(ValueError, self.kinds[-1], 0, 1, LiteralBuffer(1))
        self.assertRaises(ValueError, self.kinds[-1], tls._SSL_READ, 0, LiteralBuffer(1))


class OtherTransportTests(SynchronousTestCase):
    """
    L{streamline} touches Twisted's TLS transports only.
    """

    def test_otherTransportsUntouched(self) -> None:
        """
        Anything but Twisted's TLS transport keeps its own C{writeSequence}.
        """
        transport = StringTransport()
        streamline(transport, SSL.Connection(SSL.Context(SSL.TLS_METHOD)))
        self.assertNotIn("writeSequence", vars(transport))


class DovecotReadTests(TestCase):
    """
    L{TLSReceiver} against the private Dovecot: an account holding a 5 MB
    message and others (C{tests.test_sources_imap}'s) read with
    L{imapmig.sources.imap.IMAPSource} over implicit TLS and after
    STARTTLS, every body exact.
    """

    def setUp(self) -> None:
        """
        Skip without a Dovecot binary.
        """
        from imapmig.testing.dovecot import requireDovecot

        requireDovecot(self)

    async def _readOver(self, starttls: bool) -> None:
        """
        Load a fresh account, read it back over TLS (STARTTLS on the plain
        port if C{starttls}, else the implicit-TLS port), and check it; the
        plaintext came through L{TLSReceiver}.
        """
        from twisted.internet import reactor

        from imapmig.access.tlsidentity import HostnameVerifyingTLS, trustRootFrom
        from imapmig.sources.imap import IMAPSource
        from tests import test_sources_imap as sourceTests
        from tests.support import freshUser, sharedDovecot

        instance = sharedDovecot()
        user = freshUser(instance)
        plan = sourceTests._load(instance, user)
        options = WatchedClientTLS(
            HostnameVerifyingTLS("localhost", trustRootFrom(instance.caCertificatePath))
        )
        calls: list[object] = []
        receive = TLSReceiver.receive

        def counted(receiver: TLSReceiver) -> None:
            calls.append(receiver)
            receive(receiver)

        self.patch(TLSReceiver, "receive", counted)

        async def open() -> Any:
            if starttls:
                endpoint: Any = TCP4ClientEndpoint(reactor, "127.0.0.1", instance.port)
            else:
                endpoint = wrapClientTLS(
                    options, TCP4ClientEndpoint(reactor, "127.0.0.1", instance.tlsPort)
                )
            session = await openSession(endpoint, reactor, description="dovecot",
                                        user=user.name, password=user.password,
                                        starttls=starttls, tlsOptions=options, timeout=60)  # fmt: skip
            sessions.append(session)
            return session

        sessions: list[Any] = []
        source = IMAPSource(open, "dovecot", commandBytes=1024 * 1024)
        try:
            checks: Any = sourceTests.DovecotSourceTests.readAndCheck
            await checks(self, source, plan, condstore=True)
        finally:
            await source.close()
            # Logging out closes TLS (close_notify), then waits for the
            # server to close the connection.
            for session in sessions:
                await session.client.closed
        self.assertGreater(len(calls), 0)

    async def test_implicitTLS(self) -> None:
        """
        Over implicit TLS, every body read is exact.
        """
        await self._readOver(starttls=False)

    async def test_starttls(self) -> None:
        """
        After STARTTLS, every body read is exact.
        """
        await self._readOver(starttls=True)
