# -*- test-case-name: tests.test_imap_compress -*-
"""
Tests for COMPRESS=DEFLATE (RFC 4978): L{imapmig.imap.compress}, the
client's switch to compression in L{imapmig.imap.client}, the session's
L{IMAPSession.startCompression}, and, against a real Dovecot with its
C{imap_zlib} plugin, migrations with C{compress: on} and C{compress: auto}.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import zlib
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, ITransport
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.compress import Compression, CompressionStats, DeflateTransport, Inflater
from imapmig.imap.outgoing import LiteralMode, OutgoingMessage, PipelineSettings
from imapmig.imap.pipeline import AppendPipeline
from imapmig.imap.session import IMAPSession
from imapmig.daemon.service import sessionOpener
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import newDirectory as _directory
from tests.test_integration import (
    _assertContent,
    _config,
    _runService,
    _serverConfig,
    reactor,
)
from tests.test_imap_pipeline import RecordingOutcomes


def deflate(data: bytes, compressor: Any = None) -> bytes:
    """
    C{data} as a server would send it: raw DEFLATE, sync-flushed.
    """
    if compressor is None:
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return bytes(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))


def inflate(data: bytes) -> bytes:
    """
    Raw-inflate C{data}, as a server would read it.
    """
    decompressor = zlib.decompressobj(-15)
    plain = decompressor.decompress(data)
    return bytes(plain)


class RecordingTransport(StringTransport):
    """
    A L{StringTransport} that also keeps each write separately, takes TCP
    options, and has a handle.
    """

    def __init__(self) -> None:
        StringTransport.__init__(self)
        self.writes: list[bytes] = []
        self.noDelay = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        StringTransport.write(self, data)

    def writeSequence(self, data: Any) -> None:
        self.write(b"".join(data))

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.noDelay = enabled

    def getTcpNoDelay(self) -> bool:
        return self.noDelay

    def getHandle(self) -> object:
        return self

    def abortConnection(self) -> None:
        self.aborted = True
        StringTransport.abortConnection(self)


def greeted(
    caps: bytes = b"IMAP4rev1 LITERAL+ COMPRESS=DEFLATE",
) -> tuple[MigrationIMAP4Client, RecordingTransport]:
    """
    A client connected to a L{RecordingTransport}, greeted, nothing written
    yet.
    """
    client = MigrationIMAP4Client(Clock())
    transport = RecordingTransport()
    client.makeConnection(transport)
    client.dataReceived(b"* OK [CAPABILITY " + caps + b"] ready\r\n")
    return client, transport


def compressing() -> tuple[MigrationIMAP4Client, RecordingTransport, Any]:
    """
    A client that sent C{COMPRESS DEFLATE} (tag 0001) and received its OK:
    the transport is cleared, and the server's compressor is returned for
    further replies.
    """
    client, transport = greeted()
    d = client.startCompression()
    client.dataReceived(b"0001 OK Begin compression\r\n")
    assert d.called
    transport.clear()
    transport.writes.clear()
    return client, transport, zlib.compressobj(6, zlib.DEFLATED, -15)


class DeflateTransportTests(SynchronousTestCase):
    """
    L{DeflateTransport} compresses onto the real transport and forwards the
    rest to it.
    """

    def test_interfaces(self) -> None:
        """
        It provides L{ITransport} and L{IConsumer}.
        """
        wrapper = DeflateTransport(RecordingTransport())
        self.assertTrue(verifyObject(ITransport, wrapper))
        self.assertTrue(verifyObject(IConsumer, wrapper))

    def test_writesInflateToPlaintext(self) -> None:
        """
        Each write leaves as one write of raw DEFLATE, flushed so that what
        arrived so far inflates to everything written so far.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        wrapper.write(b"0002 NOOP\r\n")
        self.assertEqual(len(real.writes), 1)
        self.assertEqual(inflate(real.value()), b"0002 NOOP\r\n")
        wrapper.write(b"0003 LOGOUT\r\n")
        self.assertEqual(len(real.writes), 2)
        self.assertEqual(inflate(real.value()), b"0002 NOOP\r\n0003 LOGOUT\r\n")

    def test_writeSequenceIsOneWrite(self) -> None:
        """
        A C{writeSequence} of many pieces is compressed as a whole and
        leaves as a single write.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        pieces = [b"0002 APPEND INBOX {5+}\r\n", b"hello", b"\r\n"] * 20
        wrapper.writeSequence(pieces)
        self.assertEqual(len(real.writes), 1)
        self.assertEqual(inflate(real.value()), b"".join(pieces))

    def test_emptyWritesSendNothing(self) -> None:
        """
        Empty writes send nothing, not even a flush marker.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        wrapper.write(b"")
        wrapper.writeSequence([])
        wrapper.writeSequence([b"", b""])
        self.assertEqual(real.writes, [])

    def test_counts(self) -> None:
        """
        Plain and wire octets are counted; text compresses.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        text = b"the quick brown fox jumps over the lazy dog\r\n" * 100
        wrapper.writeSequence([text, text])
        wrapper.write(text)
        self.assertEqual(wrapper.plainOctets, 3 * len(text))
        self.assertEqual(wrapper.wireOctets, len(real.value()))
        self.assertLess(wrapper.wireOctets, len(text) // 10)

    def test_producerReachesRealTransport(self) -> None:
        """
        Producer registration and unregistration go to the real transport.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        producer = object()
        wrapper.registerProducer(producer, True)  # type: ignore[arg-type]
        self.assertIs(real.producer, producer)
        self.assertTrue(real.streaming)
        wrapper.unregisterProducer()
        self.assertIsNone(real.producer)

    def test_forwarded(self) -> None:
        """
        TCP options, addresses, the handle and closing are the real
        transport's.
        """
        real = RecordingTransport()
        wrapper = DeflateTransport(real)
        self.assertIs(wrapper.wrappedTransport, real)
        wrapper.setTcpNoDelay(True)
        self.assertTrue(real.noDelay)
        self.assertTrue(wrapper.getTcpNoDelay())
        self.assertEqual(wrapper.getPeer(), real.getPeer())
        self.assertEqual(wrapper.getHost(), real.getHost())
        self.assertIs(wrapper.getHandle(), real)
        self.assertFalse(wrapper.disconnecting)
        wrapper.pauseProducing()
        self.assertEqual(real.producerState, "paused")
        wrapper.resumeProducing()
        self.assertEqual(real.producerState, "producing")
        wrapper.loseConnection()
        self.assertTrue(real.disconnecting)
        self.assertTrue(wrapper.disconnecting)
        wrapper.abortConnection()
        self.assertTrue(real.aborted)


class InflaterTests(SynchronousTestCase):
    """
    L{Inflater} decodes a raw DEFLATE stream in any chunks.
    """

    def test_chunks(self) -> None:
        """
        Fed one octet at a time, it yields the whole plaintext and counts
        both sides.
        """
        plain = b"* 1 EXISTS\r\n0005 OK done\r\n" * 50
        wire = deflate(plain)
        inflater = Inflater()
        out = b"".join(inflater.inflate(wire[i : i + 1]) for i in range(len(wire)))
        self.assertEqual(out, plain)
        self.assertEqual((inflater.wireOctets, inflater.plainOctets), (len(wire), len(plain)))

    def test_corrupt(self) -> None:
        """
        A corrupt stream raises L{zlib.error}.
        """
        self.assertRaises(zlib.error, Inflater().inflate, b"\xff\xff\xff\xff")


class CompressionStatsTests(SynchronousTestCase):
    """
    L{CompressionStats}' ratios.
    """

    def test_ratios(self) -> None:
        """
        The ratios are wire octets per plain octet, 1.0 when nothing went.
        """
        stats = CompressionStats(sentPlain=1000, sentWire=250, receivedWire=30, receivedPlain=60)
        self.assertEqual((stats.sentRatio, stats.receivedRatio), (0.25, 0.5))
        idle = CompressionStats(0, 0, 0, 0)
        self.assertEqual((idle.sentRatio, idle.receivedRatio), (1.0, 1.0))

    def test_compressionCounts(self) -> None:
        """
        A L{Compression} writes through its deflater to the transport
        underneath, and its stats count both directions.
        """
        transport = StringTransport()
        compression = Compression(transport, 1)
        compression.deflater.write(b"a" * 1000)
        peer = zlib.compressobj(1, zlib.DEFLATED, -15)
        wire = peer.compress(b"b" * 100) + peer.flush(zlib.Z_SYNC_FLUSH)
        self.assertEqual(compression.inflater.inflate(wire), b"b" * 100)
        stats = compression.stats()
        self.assertEqual(
            (stats.sentPlain, stats.sentWire, stats.receivedWire, stats.receivedPlain),
            (1000, len(transport.value()), len(wire), 100),
        )


class ClientCompressionTests(SynchronousTestCase):
    """
    The client switches both directions to DEFLATE exactly at the end of
    the tagged OK of C{COMPRESS DEFLATE}.
    """

    def test_command(self) -> None:
        """
        C{startCompression} sends C{COMPRESS DEFLATE} in clear; until the
        reply nothing is compressed and no statistics exist.
        """
        client, transport = greeted()
        d = client.startCompression()
        self.assertEqual(transport.value(), b"0001 COMPRESS DEFLATE\r\n")
        self.assertNoResult(d)
        self.assertIsNone(client.compressionStats())
        self.assertIs(client.connection, transport)

    def test_afterOKWritesAreCompressed(self) -> None:
        """
        After the tagged OK, commands leave compressed through a
        L{DeflateTransport} over the same transport.
        """
        client, transport, _ = compressing()
        self.assertIsInstance(client.connection, DeflateTransport)
        self.assertIs(client.connection.wrappedTransport, transport)
        client.noop()
        self.assertEqual(inflate(transport.value()), b"0002 NOOP\r\n")

    def test_queuedCommandIsCompressed(self) -> None:
        """
        A command queued behind C{COMPRESS} leaves after the OK,
        compressed.
        """
        client, transport = greeted()
        client.startCompression()
        client.noop()
        self.assertEqual(transport.value(), b"0001 COMPRESS DEFLATE\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK Begin compression\r\n")
        self.assertEqual(inflate(transport.value()), b"0002 NOOP\r\n")

    def test_compressedRepliesInAnyChunks(self) -> None:
        """
        The OK line followed by compressed replies (an unsolicited
        response, then the reply of the command queued behind COMPRESS) is
        parsed whatever the chunk boundaries: split at every single
        position, including inside the OK line and right after it, so that
        the OK line and compressed octets arrive in the same read.
        """
        plain = b"* 7 EXISTS\r\n0002 OK NOOP done\r\n"
        stream = b"0001 OK Begin compression\r\n" + deflate(plain)
        for split in range(len(stream) + 1):
            client, transport = greeted()
            compressed = client.startCompression()
            noop = client.noop()
            client.dataReceived(stream[:split])
            client.dataReceived(stream[split:])
            self.successResultOf(compressed)
            self.assertEqual(self.successResultOf(noop), [[b"7", b"EXISTS"]], f"split at {split}")
            self.assertFalse(transport.disconnecting)

    def test_oneOctetAtATime(self) -> None:
        """
        The same stream, one octet per read, is parsed too.
        """
        plain = b"* 7 EXISTS\r\n0002 OK NOOP done\r\n"
        stream = b"0001 OK Begin compression\r\n" + deflate(plain)
        client, transport = greeted()
        compressed = client.startCompression()
        noop = client.noop()
        for i in range(len(stream)):
            client.dataReceived(stream[i : i + 1])
        self.successResultOf(compressed)
        self.assertEqual(self.successResultOf(noop), [[b"7", b"EXISTS"]])

    def test_literalInCompressedReply(self) -> None:
        """
        A compressed reply carrying a literal is parsed, whether the
        literal and the lines after it arrive in one read or many: what
        follows a literal, which the line receiver hands back to itself,
        is not inflated twice.
        """
        for chunk in (1, 3, 1000):
            client, transport, server = compressing()
            client.select("INBOX")
            client.dataReceived(deflate(b"0002 OK selected\r\n", server))
            d = client.fetchMessage("1")
            self.assertEqual(
                inflate(transport.value()), b"0002 SELECT INBOX\r\n0003 FETCH 1 (RFC822)\r\n"
            )
            wire = deflate(
                b"* 1 FETCH (RFC822 {12}\r\nhello\r\nworld)\r\n0003 OK done\r\n", server
            )
            for i in range(0, len(wire), chunk):
                client.dataReceived(wire[i : i + chunk])
            self.assertEqual(self.successResultOf(d), {1: {"RFC822": "hello\r\nworld"}})
            self.assertFalse(transport.disconnecting)

    def test_pausedThenResumed(self) -> None:
        """
        Replies inflated while the client is paused wait, pause reaching
        the real transport, and are parsed when it resumes.
        """
        client, transport, server = compressing()
        d = client.noop()
        client.pauseProducing()
        self.assertEqual(transport.producerState, "paused")
        client.dataReceived(deflate(b"0002 OK NOOP done\r\n", server))
        self.assertNoResult(d)
        client.resumeProducing()
        self.assertEqual(transport.producerState, "producing")
        self.successResultOf(d)

    def test_refused(self) -> None:
        """
        A C{NO} leaves the connection uncompressed.
        """
        client, transport = greeted()
        d = client.startCompression()
        client.dataReceived(b"0001 NO [COMPRESSIONACTIVE] already\r\n")
        self.failureResultOf(d)
        self.assertIs(client.connection, transport)
        self.assertIsNone(client.compressionStats())
        transport.clear()
        client.noop()
        self.assertEqual(transport.value(), b"0002 NOOP\r\n")

    def test_corruptStreamDropsConnection(self) -> None:
        """
        Octets that do not inflate abort the connection.
        """
        client, transport, _ = compressing()
        client.dataReceived(b"\xff\xff\xff\xff")
        self.assertTrue(transport.aborted)

    def test_startTwice(self) -> None:
        """
        Compression cannot be started twice.
        """
        client, transport, _ = compressing()
        self.assertRaises(RuntimeError, client.startCompression)

    def test_stats(self) -> None:
        """
        The statistics count both directions since the switch.
        """
        client, transport, server = compressing()
        client.noop()
        reply = deflate(b"0002 OK NOOP done\r\n", server)
        client.dataReceived(reply)
        self.assertEqual(
            client.compressionStats(),
            CompressionStats(
                sentPlain=len(b"0002 NOOP\r\n"),
                sentWire=len(transport.value()),
                receivedWire=len(reply),
                receivedPlain=len(b"0002 OK NOOP done\r\n"),
            ),
        )

    def test_noDelayStillReachesSocket(self) -> None:
        """
        C{TCP_NODELAY} set through the client's connection after the switch
        reaches the real transport.
        """
        client, transport, _ = compressing()
        transport.noDelay = False
        client.connection.setTcpNoDelay(True)
        self.assertTrue(transport.noDelay)


class PipelineCompressionTests(SynchronousTestCase):
    """
    The APPEND pipeline over a compressed connection.
    """

    def test_pipelinedAppends(self) -> None:
        """
        Pipelined APPENDs leave as one compressed write per pump that
        inflates to exactly the plaintext commands; compressed replies,
        fed in odd chunk sizes, settle every message; the pipeline is the
        real transport's producer, so its backpressure still applies.
        """
        client, transport, server = compressing()
        settings = PipelineSettings(
            literalMode=LiteralMode.PLUS,
            batchMessages=1,
            batchBytes=1 << 20,
            windowMessages=10,
            windowBytes=1 << 20,
        )
        outcomes = RecordingOutcomes()
        pipeline = AppendPipeline(client, settings, outcomes)
        self.assertIs(transport.producer, pipeline)
        self.assertTrue(transport.streaming)
        pipeline.selectMailbox("INBOX")
        bodies = [b"Subject: one\r\n\r\nfirst\r\n", b"Subject: two\r\n\r\nsecond\r\n"]
        pipeline.enqueue(OutgoingMessage(body, b" (\\Seen)", n) for n, body in enumerate(bodies))
        self.assertEqual(len(transport.writes), 1)
        expected = b"".join(
            b'%s APPEND "INBOX" (\\Seen) {%d+}\r\n%s\r\n' % (tag, len(body), body)
            for tag, body in zip([b"0002", b"0003"], bodies)
        )
        self.assertEqual(inflate(transport.value()), expected)

        pipeline.pauseProducing()
        pipeline.enqueue([OutgoingMessage(b"three\r\n", b"", 2)])
        self.assertEqual(len(transport.writes), 1)

        wire = deflate(
            b"* 1 EXISTS\r\n0002 OK [APPENDUID 9 1] done\r\n"
            b"* 2 EXISTS\r\n0003 OK [APPENDUID 9 2] done\r\n",
            server,
        )
        for i in range(0, len(wire), 5):
            client.dataReceived(wire[i : i + 5])
        self.assertEqual(outcomes.appended, [(0, 9, 1), (1, 9, 2)])

        pipeline.resumeProducing()
        self.assertEqual(len(transport.writes), 2)
        self.assertEqual(
            inflate(transport.value()), expected + b'0004 APPEND "INBOX" {7+}\r\nthree\r\n\r\n'
        )
        pipeline.close()
        self.assertIsNone(transport.producer)


class SessionCompressionTests(SynchronousTestCase):
    """
    L{IMAPSession.startCompression} and the statistics at logout.
    """

    def loggedIn(self, caps: bytes) -> tuple[IMAPSession, MigrationIMAP4Client, RecordingTransport]:
        """
        A session whose login reported C{caps}.
        """
        client, transport = greeted(b"IMAP4rev1")
        session = IMAPSession(client, "alice at test")
        session.capabilities = frozenset(caps.split())
        return session, client, transport

    def test_notOffered(self) -> None:
        """
        Without C{COMPRESS=DEFLATE} it sends nothing and reports false.
        """
        session, client, transport = self.loggedIn(b"IMAP4REV1 LITERAL+")
        d = Deferred.fromCoroutine(session.startCompression())
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(transport.value(), b"")
        self.assertIsNone(session.compressionStats())

    def test_offered(self) -> None:
        """
        With C{COMPRESS=DEFLATE} it sends C{COMPRESS DEFLATE} and reports
        true once the server agreed; later commands are compressed.
        """
        session, client, transport = self.loggedIn(b"IMAP4REV1 COMPRESS=DEFLATE")
        d = Deferred.fromCoroutine(session.startCompression())
        self.assertEqual(transport.value(), b"0001 COMPRESS DEFLATE\r\n")
        client.dataReceived(b"0001 OK Begin compression\r\n")
        self.assertTrue(self.successResultOf(d))
        self.assertIsNotNone(session.compressionStats())

    def test_refused(self) -> None:
        """
        A refusal is logged and leaves the session uncompressed.
        """
        session, client, transport = self.loggedIn(b"IMAP4REV1 COMPRESS=DEFLATE")
        with capturedLogs() as events:
            d = Deferred.fromCoroutine(session.startCompression())
            client.dataReceived(b"0001 NO not now\r\n")
        self.assertFalse(self.successResultOf(d))
        self.assertIsNone(session.compressionStats())
        self.assertEqual([e["text"] for e in events], ["not now"])

    def test_logoutLogsStats(self) -> None:
        """
        Logging out of a compressed session logs one line with the octets
        before and after compression.
        """
        session, client, transport = self.loggedIn(b"IMAP4REV1 COMPRESS=DEFLATE")
        Deferred.fromCoroutine(session.startCompression())
        client.dataReceived(b"0001 OK Begin compression\r\n")
        with capturedLogs() as events:
            d = Deferred.fromCoroutine(session.logout())
            sent = transport.value()[len(b"0001 COMPRESS DEFLATE\r\n") :]
            self.assertEqual(inflate(sent), b"0002 LOGOUT\r\n")
            client.dataReceived(deflate(b"* BYE bye\r\n0002 OK done\r\n"))
        self.successResultOf(d)
        [event] = [e for e in events if "sentPlain" in e]
        self.assertEqual(event["session"], "alice at test")
        self.assertEqual(event["sentPlain"], len(b"0002 LOGOUT\r\n"))
        self.assertEqual(event["receivedPlain"], len(b"* BYE bye\r\n0002 OK done\r\n"))


# Against a real Dovecot with the imap_zlib plugin.

_instance: DovecotInstance | None = None
_usersTaken = 0


def _compressingDovecot() -> DovecotInstance:
    """
    A private Dovecot advertising C{COMPRESS=DEFLATE}, started on first use
    and stopped, its files removed, when the process exits.
    """
    global _instance
    if _instance is None:
        root = tempfile.mkdtemp(prefix="imapmig-compress-")
        os.chmod(root, 0o755)
        instance = DovecotInstance(
            os.path.join(root, "dovecot"),
            users=[DovecotUser(f"user{n}", f"password-{n}") for n in range(1, 9)],
            compress=True,
        )

        def stop() -> None:
            instance.stop()
            shutil.rmtree(root, ignore_errors=True)

        atexit.register(stop)
        instance.start()
        _instance = instance
    return _instance


def _freshUser(instance: DovecotInstance) -> DovecotUser:
    """
    An account of the compressing Dovecot no other test has taken.
    """
    global _usersTaken
    user = instance.users[_usersTaken]
    _usersTaken += 1
    return user


class DovecotCompressionTests(TestCase):
    """
    Migrations through COMPRESS=DEFLATE into a real Dovecot.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        self.instance = _compressingDovecot()
        self.stats: list[CompressionStats | None] = []
        originalLogout = IMAPSession.logout

        async def logout(session: IMAPSession) -> None:
            await originalLogout(session)
            self.stats.append(session.compressionStats())

        self.patch(IMAPSession, "logout", logout)

    async def _migrate(self, server: dict[str, object], count: int) -> None:
        """
        Migrate a Maildir of C{count} realistic messages into a fresh
        account through C{server}, and check every message arrived intact.
        """
        user = _freshUser(self.instance)
        maildir = os.path.join(_directory(self), "Maildir")
        corpus = writeMaildir(maildir, count)
        config = _config(self, user, {"maildir": maildir}, server)
        completed, progress = await _runService(config)
        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (count, 0))
        _assertContent(self, self.instance, user, corpus.messages)

    async def test_compressOn(self) -> None:
        """
        With C{compress: on} every connection is compressed, 300 messages
        arrive intact, and fewer octets crossed the wire than were sent.
        """
        await self._migrate(
            {"endpoint": f"tcp:127.0.0.1:{self.instance.port}", "starttls": "off", "compress": "on"},
            300,
        )
        self.assertTrue(self.stats)
        for stats in self.stats:
            assert stats is not None
            self.assertLess(stats.sentWire, stats.sentPlain)
            self.assertLess(stats.receivedWire, stats.receivedPlain)
        sentPlain = sum(s.sentPlain for s in self.stats if s is not None)
        sentWire = sum(s.sentWire for s in self.stats if s is not None)
        self.assertLess(sentWire, 0.8 * sentPlain)

    async def test_compressOnOverTLS(self) -> None:
        """
        Compression runs inside TLS after STARTTLS, and messages arrive
        intact.
        """
        await self._migrate(
            {
                "endpoint": f"tcp:127.0.0.1:{self.instance.port}",
                "starttls": "required",
                "tls_hostname": "localhost",
                "tls_ca": self.instance.caCertificatePath,
                "compress": "on",
            },
            100,
        )
        self.assertTrue(self.stats)
        self.assertNotIn(None, self.stats)

    async def test_autoOnLoopbackDoesNotCompress(self) -> None:
        """
        With C{compress} left at C{auto}, a server on 127.0.0.1 is not
        compressed even though it offers COMPRESS=DEFLATE.
        """
        await self._migrate(
            {"endpoint": f"tcp:127.0.0.1:{self.instance.port}", "starttls": "off"}, 50
        )
        self.assertTrue(self.stats)
        self.assertEqual(set(self.stats), {None})

    async def test_noDelayUnderCompression(self) -> None:
        """
        A compressed session's socket still has C{TCP_NODELAY} set.
        """
        user = _freshUser(self.instance)
        server = _serverConfig(
            self,
            self.instance,
            endpoint=f"tcp:127.0.0.1:{self.instance.port}",
            starttls="off",
            compress="on",
        )
        session = await sessionOpener(reactor, server, user.name, user.password)()
        try:
            self.assertIsInstance(session.client.connection, DeflateTransport)
            self.assertIn(b"COMPRESS=DEFLATE", session.capabilities)
            sock = session.client.connection.getHandle()
            self.assertIsInstance(sock, socket.socket)
            self.assertNotEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)
            # The connection works compressed.
            mailboxes = await session.listMailboxes()
            self.assertIn("INBOX", [m.name for m in mailboxes])
        finally:
            await session.logout()
            await session.client.closed
