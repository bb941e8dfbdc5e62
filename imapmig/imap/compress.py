# -*- test-case-name: tests.test_imap_compress -*-
"""
COMPRESS=DEFLATE (RFC 4978): raw DEFLATE in both directions of an IMAP
connection, once the server has accepted C{COMPRESS DEFLATE}.

L{DeflateTransport} stands in for the connection's transport: everything
written through it is compressed and followed by a sync flush
(C{Z_SYNC_FLUSH}), so the server can decode each write as soon as it
arrives; a C{writeSequence} of many pieces (the APPEND pipeline's coalesced
commands) leaves as one write of compressed octets.  Producer registration
and the connection's other operations are forwarded to the real transport,
so backpressure still comes from the socket and C{TCP_NODELAY} still
applies to it.

L{Inflater} decompresses what the server sends; a L{Compression} pairs the
two for one connection.

Both count octets before and after compression; L{CompressionStats} is
their sum for one connection.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable

from attrs import frozen
from twisted.internet.interfaces import IConsumer, IProducer, IPushProducer, ITransport
from zope.interface import implementer

DEFAULT_LEVEL = 1
"""
The DEFLATE level for what we send.  On the realistic test corpus (5,000
messages, 172 MB, a fifth with base64 attachments) level 1 sends 69% of the
octets at about 48 MB/s of one core; level 6 sends 67% at 29 MB/s.  Text
compresses well at any level; base64 attachments gain about a quarter
whatever the level.
"""

# Raw DEFLATE, no zlib header or checksum (RFC 4978 section 3), with the
# largest window.
_WINDOW_BITS = -15


@frozen
class CompressionStats:
    """
    Octets through one compressed connection, since compression started.

    @ivar sentPlain: octets we wrote, before compression.
    @ivar sentWire: the compressed octets they became on the wire.
    @ivar receivedWire: compressed octets the server sent.
    @ivar receivedPlain: the octets they inflated to.
    """

    sentPlain: int
    sentWire: int
    receivedWire: int
    receivedPlain: int

    @property
    def sentRatio(self) -> float:
        """
        Wire octets per plain octet sent (0.25: a quarter of the size), 1.0
        when nothing was sent.
        """
        return self.sentWire / self.sentPlain if self.sentPlain else 1.0

    @property
    def receivedRatio(self) -> float:
        """
        Wire octets per plain octet received, 1.0 when nothing was received.
        """
        return self.receivedWire / self.receivedPlain if self.receivedPlain else 1.0


@implementer(ITransport, IConsumer, IPushProducer)
class DeflateTransport:
    """
    A transport that compresses what is written through it onto another.

    @ivar plainOctets: octets written through it, before compression.
    @ivar wireOctets: the compressed octets written to the real transport.
    """

    def __init__(self, transport: Any, level: int = DEFAULT_LEVEL) -> None:
        """
        @param transport: the real transport (TCP, or TLS over TCP).
        @param level: the DEFLATE level, 0 (store) to 9.
        """
        self._transport = transport
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, _WINDOW_BITS)
        self.plainOctets = 0
        self.wireOctets = 0

    @property
    def wrappedTransport(self) -> Any:
        """
        The real transport underneath.
        """
        return self._transport

    @property
    def disconnecting(self) -> bool:
        """
        Whether the real transport is closing.
        """
        return bool(self._transport.disconnecting)

    @property
    def connected(self) -> bool:
        """
        Whether the real transport is connected.
        """
        return bool(self._transport.connected)

    def write(self, data: bytes) -> None:
        """
        Compress C{data} and write it, flushed, to the real transport.
        """
        if not data:
            return
        compressor = self._compressor
        compressed = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
        self.plainOctets += len(data)
        self.wireOctets += len(compressed)
        self._transport.write(compressed)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        """
        Compress every piece of C{data} and write the result, flushed once
        at the end, as a single write to the real transport.
        """
        compress = self._compressor.compress
        out = []
        size = 0
        for piece in data:
            size += len(piece)
            out.append(compress(piece))
        if not size:
            return
        out.append(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        compressed = b"".join(out)
        self.plainOctets += size
        self.wireOctets += len(compressed)
        self._transport.write(compressed)

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        """
        Register C{producer} with the real transport, whose buffer pauses
        and resumes it.
        """
        self._transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        """
        Unregister the producer from the real transport.
        """
        self._transport.unregisterProducer()

    def pauseProducing(self) -> None:
        """
        Stop reading from the real transport.
        """
        self._transport.pauseProducing()

    def resumeProducing(self) -> None:
        """
        Resume reading from the real transport.
        """
        self._transport.resumeProducing()

    def stopProducing(self) -> None:
        """
        Stop reading from the real transport for good.
        """
        self._transport.stopProducing()

    def loseConnection(self) -> None:
        """
        Close the real transport once its buffer is written.  Every write
        was already flushed, so nothing is left in the compressor.
        """
        self._transport.loseConnection()

    def abortConnection(self) -> None:
        """
        Close the real transport now.
        """
        self._transport.abortConnection()

    def getPeer(self) -> Any:
        """
        The real transport's peer address.
        """
        return self._transport.getPeer()

    def getHost(self) -> Any:
        """
        The real transport's own address.
        """
        return self._transport.getHost()

    def getHandle(self) -> Any:
        """
        The real transport's handle (a socket, or the OpenSSL connection
        under TLS).
        """
        return self._transport.getHandle()

    def setTcpNoDelay(self, enabled: bool) -> None:
        """
        Set C{TCP_NODELAY} on the real transport.
        """
        self._transport.setTcpNoDelay(enabled)

    def getTcpNoDelay(self) -> bool:
        """
        Whether the real transport has C{TCP_NODELAY} set.
        """
        return bool(self._transport.getTcpNoDelay())


class Inflater:
    """
    Decompresses the raw DEFLATE stream a server sends.

    @ivar wireOctets: compressed octets received.
    @ivar plainOctets: the octets they inflated to.
    """

    def __init__(self) -> None:
        self._decompressor = zlib.decompressobj(_WINDOW_BITS)
        self.wireOctets = 0
        self.plainOctets = 0

    def inflate(self, data: bytes) -> bytes:
        """
        Decompress the next octets of the stream.

        @return: what they decompress to, possibly nothing yet.
        @raise zlib.error: the stream is corrupt.
        """
        self.wireOctets += len(data)
        plain = self._decompressor.decompress(data)
        self.plainOctets += len(plain)
        return plain


class Compression:
    """
    Both directions of one compressed connection, as the client switches
    them on when the server accepts C{COMPRESS DEFLATE}.

    @ivar deflater: what the client writes to from then on; it writes the
        compressed octets to the transport underneath.
    @ivar inflater: what the client hands what it reads.
    """

    def __init__(self, transport: Any, level: int = DEFAULT_LEVEL) -> None:
        """
        @param transport: the connection's transport until now.
        @param level: the DEFLATE level for what the client sends.
        """
        self.deflater = DeflateTransport(transport, level)
        self.inflater = Inflater()

    def stats(self) -> CompressionStats:
        """
        The counts of the connection's two directions.
        """
        deflater, inflater = self.deflater, self.inflater
        return CompressionStats(
            sentPlain=deflater.plainOctets,
            sentWire=deflater.wireOctets,
            receivedWire=inflater.wireOctets,
            receivedPlain=inflater.plainOctets,
        )
