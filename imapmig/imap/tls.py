# -*- test-case-name: tests.test_imap_tls -*-
"""
TLS handshakes that fail say how, whatever the server did.

Twisted's TLS layer reports a failed handshake in ways that lose what
happened, and one way crashes: a server that answers the ClientHello with
a C{close_notify} alert (Courier-IMAP, after C{OK Begin SSL/TLS
negotiation}) makes pyOpenSSL raise L{SSL.ZeroReturnError}, an
L{SSL.Error} without arguments, and Twisted's C{_representsEOF} reads
C{args[0]} of it: an C{IndexError} escapes from the reactor's read, and
the job ended as an internal error.  A plain-IMAP answer becomes OpenSSL's
C{wrong version number}; a reset and a clean close become the same
C{ConnectionLost}.

L{WatchedClientTLS} wraps the client TLS options: the OpenSSL connection
it makes turns that C{close_notify} into an error Twisted can read, keeps
the first octets the server sent during the handshake, and keeps the
transport's own reason (closed or reset) for an end with no TLS answer.
L{handshakeFailure} maps what ended the connection during a handshake to
L{imapmig.errors}.

L{TLSSender} is the TLS write path, installed on the transports
L{WatchedClientTLS} makes (L{streamline}): the pipeline's pieces go to
OpenSSL without Twisted's joins and slices, and the records leave with one
C{send} per write, straight to the socket as
L{imapmig.imap.gather.sendNow} sends a plain TCP connection's pieces.
L{TLSReceiver} is the read path: OpenSSL reads the records from each read
of the socket in place (not from a copy in pyOpenSSL's memory BIO), and
what one read brings is decrypted into one C{bytes} for the protocol, not
one per 16 KiB record.
Both read Twisted's and pyOpenSSL's private state (C{_tlsConnection},
C{_handshakeDone}, C{_from_ssl}, ...): the tests of this module pin the
behaviour they rely on.
"""

from __future__ import annotations

import socket
from typing import Any, Sequence

from OpenSSL import SSL
from OpenSSL._util import ffi as _ffi, lib as _lib
from service_identity import VerificationError
from twisted.internet import error as netError, tcp
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.errors import ImapmigError, NotTLS, TLSFailed, TLSInterrupted, escapedExcerpt
from imapmig.imap.gather import Piece, idle, sendNow
from imapmig.imap.literal import LiteralBuffer

__all__ = [
    "HandshakeClosed",
    "WatchedClientTLS",
    "WatchedConnection",
    "describeTLSError",
    "handshakeFailure",
    "TLSReceiver",
    "TLSSender",
    "readTLS",
    "readTLSPython",
    "streamline",
    "watched",
]

RECORD_PAYLOAD = 2**14
"""
The most plaintext one TLS record holds, which Twisted's TLS transport hands
OpenSSL at a time: a piece at least this long is written unjoined.
"""


_UNREAD = _ffi.new("char **")
"""
Where C{BIO_get_mem_data} puts the address of a memory BIO's unread
octets, for L{TLSSender.flush} (one for the process: the reactor runs one
flush at a time, and each reads it at once).
"""

SEND_CHUNK = 2**20
"""
The most L{TLSSender.flush} sends from OpenSSL's memory BIO at a time: a
message of many megabytes leaves in chunks of this size.
"""

RECEIVE_MOST = 2**18
"""
The most plaintext L{TLSReceiver} hands the protocol at a time: the most
one read of Twisted's TCP transport brings, decrypted (a source
connection's reads are of L{imapmig.sources.imappool.SOURCE_READ_BYTES}).
"""

_RECORD_MOST = RECORD_PAYLOAD + 256
"""
The most plaintext one record carries (TLS 1.3's padding and type octet
aside, the same in TLS 1.2): a bound on what a record begun in the read
before adds to the next one's plaintext.
"""

HEAD_OCTETS = 81
"""
How much of what the server sent during the handshake is kept, for the
excerpt of a L{NotTLS} error: the 80 octets it shows, and one more to know
whether it was cut.
"""

# A TLS record starts with its content type (change_cipher_spec 20, alert
# 21, handshake 22, application_data 23, heartbeat 24) and the major
# version 3 (SSL 3.0 to TLS 1.3 all say 3).
_RECORD_TYPES = range(20, 25)
_RECORD_MAJOR = 3


class HandshakeClosed(TLSFailed, SSL.Error):
    """
    The server sent C{close_notify} before the handshake finished.  An
    L{SSL.Error}, which Twisted's TLS layer catches, and a L{TLSFailed} of
    imapmig's hierarchy; it stays here rather than in L{imapmig.errors},
    which must not import OpenSSL.

    Its arguments have the shape of OpenSSL's error queue (a list of
    C{(library, function, reason)}), which is what Twisted reads.
    """

    REASON = "the server ended the TLS handshake (close_notify)"

    def __init__(self) -> None:
        super().__init__([("imapmig", "do_handshake", self.REASON)])


class WatchedConnection(SSL.Connection):
    """
    An OpenSSL connection that, until its handshake finishes, keeps the
    first L{HEAD_OCTETS} octets the server sent, raises L{HandshakeClosed}
    for a C{close_notify}, and ignores the end of input (C{bio_shutdown}).

    Instances are made by L{WatchedClientTLS} from the connection the
    wrapped options make (by changing its class): their settings stay, and
    it remains an L{SSL.Connection} for whoever checks.

    @ivar handshakeDone: whether the handshake finished.
    @ivar received: the first octets the server sent during the handshake.
    """

    handshakeDone = False
    received = b""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except SSL.ZeroReturnError:
            raise HandshakeClosed() from None
        self.handshakeDone = True

    def bio_write(self, buf: Any) -> int:
        if not self.handshakeDone and len(self.received) < HEAD_OCTETS:
            self.received += bytes(buf[: HEAD_OCTETS - len(self.received)])
        return super().bio_write(buf)

    def bio_shutdown(self) -> None:
        # Told of the end of input mid-handshake, OpenSSL fails with
        # "unexpected eof", which Twisted reports instead of the
        # transport's reason; with no application data to finish reading
        # there is nothing to gain, and whether the server closed or reset
        # the connection is lost.
        if self.handshakeDone:
            super().bio_shutdown()


@implementer(IOpenSSLClientConnectionCreator)
class WatchedClientTLS:
    """
    Client TLS options whose connections are L{WatchedConnection}s.
    """

    def __init__(self, options: IOpenSSLClientConnectionCreator) -> None:
        """
        @param options: what makes the connections (C{optionsForClientTLS}:
            trust, host name verification).
        """
        self._options = options

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        """
        The wrapped options' connection, watched.
        """
        connection = self._options.clientConnectionForTLS(tlsProtocol)
        # Same object, one more layer of behaviour: its context, SNI and
        # verification callbacks, set by the wrapped options, all stay.
        # Only a plain SSL.Connection: a subclass of the options' own would
        # lose its behaviour, so it is left unwatched.
        if type(connection) is SSL.Connection:
            connection.__class__ = WatchedConnection
        streamline(tlsProtocol, connection)
        return connection


class TLSSender:
    """
    The write side of one of Twisted's TLS transports
    (L{TLSMemoryBIOProtocol}), made by L{streamline}: each
    C{writeSequence} goes to OpenSSL piece by piece (a message body in
    place, the short pieces between bodies joined), and the records OpenSSL
    made are sent from OpenSSL's memory BIO itself, all at once, to the
    socket with one C{send} (L{imapmig.imap.gather.sendNow}) when the TCP
    transport holds nothing unsent, else handed to it (copied), then
    dropped from the BIO without a copy (L{_consume}).

    Twisted's own path copies every octet four more times: the join of the
    sequence, the small-write aggregator's copy and join (and a write put
    off to the next reactor turn), the 16 KiB slices, pyOpenSSL's copy of
    each record into C{bytes}, and the TCP transport's join of the records;
    and it calls Python functions per 16 KiB record.

    It replaces the transport's C{_flushSendBIO} too, so that the
    handshake's and the shutdown's records take the same way, and reads
    Twisted's state (C{_handshakeDone}, C{_appSendBuffer}, ...) to write
    through only where Twisted's own C{write} would reach OpenSSL at once.

    @ivar direct: octets of records sent straight to the socket.
    """

    def __init__(self, protocol: TLSMemoryBIOProtocol) -> None:
        self._protocol = protocol
        self._joined: Any = protocol.writeSequence
        self._flushing = False
        self.direct = 0

    def writeSequence(self, pieces: Sequence[Piece]) -> None:
        """
        Encrypt C{pieces}, in order after what was written before, and send
        the records.
        """
        protocol: Any = self._protocol
        if (
            not protocol._handshakeDone
            or protocol._appSendBuffer
            or protocol._lostTLSConnection
            or protocol._aborted
            or (protocol.disconnecting and protocol._producer is None)
        ):
            # Twisted's way: held until the handshake, after what is held,
            # or dropped.
            self._joined([bytes(piece) for piece in pieces])
            return
        aggregator = getattr(protocol, "_aggregator", None)
        if aggregator is not None and aggregator._buffer:
            aggregator.flush()
        records = _records(pieces)
        connection = protocol._tlsConnection
        for index, record in enumerate(records):
            try:
                held = _sendAll(connection, record)
            except SSL.Error:
                protocol._tlsShutdownFinished(Failure())
                return
            if held is not None:
                # A renegotiation (TLS 1.2) waits for the server: the rest
                # is held, as Twisted holds it, until it answers.
                protocol._bufferedWrite(b"".join([held, *records[index + 1 :]]))
                break
        self.flush()

    def flush(self) -> None:
        """
        Send what OpenSSL has written to its memory BIO (Twisted's
        C{_flushSendBIO}, without a Python call per record or a copy into
        C{bytes}): sent from the BIO's own memory (C{BIO_get_mem_data}),
        not read out of it first (C{BIO_read}, a copy of every octet), then
        dropped from it (L{_consume}).

        A flush called while one runs (the transport calling back into the
        protocol as it takes the records) returns at once: the one running
        sends what was added, after what it was sending.
        """
        protocol: Any = self._protocol
        connection = protocol._tlsConnection
        if connection is None or self._flushing:
            return
        self._flushing = True
        try:
            bio = connection._from_ssl
            pending = _lib.BIO_get_mem_data(bio, _UNREAD)
            while pending > 0:
                pending = min(pending, SEND_CHUNK)
                unread = _UNREAD[0]
                self._send(memoryview(_ffi.buffer(unread, pending)))
                _consume(bio, unread, pending)
                pending = _lib.BIO_get_mem_data(bio, _UNREAD)
        finally:
            self._flushing = False

    def _send(self, records: memoryview) -> None:
        """
        Send C{records} (a view of the memory BIO's buffer, which its next
        write may move or overwrite) to the socket, or hand a copy to the
        TCP transport: nothing keeps the view once this returns.
        """
        transport: Any = self._protocol.transport
        connection = getattr(transport, "_connection", transport)  # under STARTTLS: _BypassTLS
        if isinstance(connection, tcp.Connection) and idle(connection):
            sock = connection.socket
            if isinstance(sock, socket.socket):
                self.direct += sendNow(sock, [records], transport)
                return
        transport.write(records.tobytes())


def _consume(bio: Any, unread: Any, octets: int) -> None:
    """
    Drop the first C{octets} of memory BIO C{bio}'s unread octets, which
    were at C{unread}: with C{BIO_read} into C{unread} itself, whose copy
    of each octet onto itself glibc's C{memcpy} (its C{memmove}) skips
    (ASan allows it too: a copy onto itself overlaps harmlessly), not into
    another buffer, a copy for nothing.  If they were moved meanwhile (the
    BIO written to during the send: its next write moves what is unread to
    the start of its buffer, or grows it elsewhere), they are read out
    into a throwaway buffer instead.
    """
    if _lib.BIO_get_mem_data(bio, _UNREAD) >= octets and _UNREAD[0] == unread:
        _lib.BIO_read(bio, unread, octets)
        return
    _lib.BIO_read(bio, _ffi.new("char[]", octets), octets)


def _sendAll(connection: SSL.Connection, record: Piece) -> Piece | None:
    """
    Hand all of C{record} to OpenSSL, a partial write (possible under
    C{SSL_MODE_ENABLE_PARTIAL_WRITE}) resumed where it stopped.

    OpenSSL's C{SSL_write} is called through L{_write}, not pyOpenSSL's
    C{send}: its Python around the call (a context manager for the
    buffer, the checks of C{_raise_ssl_error} on every success) cost about
    as much as encrypting a command line, twice a message; pyOpenSSL's
    exceptions are raised only when a write fails.

    @return: L{None}, or the part OpenSSL did not take because it waits
        for the server (C{WantReadError}).
    @raise SSL.Error: the write failed.
    """
    ssl = connection._ssl
    view = record
    while len(view):
        sent = _write(ssl, view)
        if sent <= 0:
            if _lib.SSL_get_error(ssl, sent) == _lib.SSL_ERROR_WANT_READ:
                return view
            connection._raise_ssl_error(ssl, sent)
            raise SSL.Error([("imapmig", "SSL_write", f"SSL_write returned {sent}")])
        if sent == len(view):
            return None
        view = memoryview(view)[sent:]
    return None


def _write(ssl: Any, piece: Piece) -> int:
    """
    OpenSSL's C{SSL_write} of C{piece} (read in place) on C{ssl}.

    @return: what it returned: the octets it took, or 0 or less if it
        failed (C{SSL_get_error} says why).
    """
    written: int = _lib.SSL_write(ssl, _ffi.from_buffer(piece), len(piece))
    return written


def _records(pieces: Sequence[Piece]) -> list[Piece]:
    """
    What to hand OpenSSL for C{pieces}: each piece of L{RECORD_PAYLOAD}
    octets or more as it is (read in place), the runs of shorter pieces
    between them joined (one record rather than one each).
    """
    records: list[Piece] = []
    short: list[Piece] = []
    for piece in pieces:
        if len(piece) < RECORD_PAYLOAD:
            short.append(piece)
            continue
        if short:
            records.append(short[0] if len(short) == 1 else b"".join(short))
            short = []
        records.append(piece)
    if short:
        records.append(short[0] if len(short) == 1 else b"".join(short))
    return records


class TLSReceiver:
    """
    The read side of one of Twisted's TLS transports, made by
    L{streamline}: in place of its C{dataReceived}, each read of the socket
    is the connection's read BIO once the handshake is done (read in place,
    not copied); in place of its C{_flushReceiveBIO}, all the plaintext
    OpenSSL can give after one read (up to 256 KiB, sixteen records) is
    read into a shared buffer and handed to the protocol as one C{bytes},
    as plain TCP hands what one C{recv} brought; the end of what there is
    to read is learnt from C{SSL_get_error}, not from an exception.

    Twisted's own loop calls pyOpenSSL's C{recv} once per 16 KiB record
    (a fresh 32 KiB buffer each time, then a copy into C{bytes}) and hands
    each record to the protocol on its own, then calls it once more to
    catch the C{WantReadError} that says nothing is left.
    """

    def __init__(self, protocol: TLSMemoryBIOProtocol) -> None:
        self._protocol = protocol
        # The read the connection's read BIO is made over, and the pointer
        # OpenSSL reads it through: kept until the next read replaces it.
        self._held: tuple[bytes, Any] | None = None

    def dataReceived(self, data: bytes) -> None:
        """
        What one read of the socket brought (Twisted's C{dataReceived} of
        the TLS transport).  After the handshake, OpenSSL reads its records
        from C{data} itself: a read-only memory BIO made over it
        (C{BIO_new_mem_buf}) becomes the connection's read BIO, where
        Twisted's C{bio_write} copies every octet into pyOpenSSL's memory
        BIO, whose growth zeroes every octet first (C{BUF_MEM_grow_clean}):
        a copy and a C{memset} per octet read.  A record cut at the read's
        end is kept by OpenSSL's record layer, not by the BIO, so each read
        is taken whole.  Before the handshake ends, Twisted's own way.
        """
        protocol: Any = self._protocol
        connection = protocol._tlsConnection
        if not protocol._handshakeDone:
            TLSMemoryBIOProtocol.dataReceived(protocol, data)
            return
        if connection is None or protocol._lostTLSConnection or not data:
            # The TLS connection is over: Twisted would write this to the
            # read BIO (read-only now) and read nothing more.
            return
        self._readFrom(connection, data)
        if protocol._appSendBuffer:
            protocol._unbufferPendingWrites()
        self.receive()

    def _readFrom(self, connection: Any, data: bytes) -> None:
        """
        Make a read-only memory BIO over C{data} the read BIO of
        C{connection} (C{SSL_set_bio} frees the one before, and pyOpenSSL's
        C{bio_shutdown} then reaches the new one), after what the one before
        still held (none, unless a reading stopped with the connection).
        """
        current = connection._into_ssl
        left = _lib.BIO_get_mem_data(current, _ffi.NULL)
        if left > 0:
            rest = _ffi.new("char[]", left)
            _lib.BIO_read(current, rest, left)
            data = _ffi.buffer(rest)[:] + data
        pointer = _ffi.from_buffer(data)
        bio = _lib.BIO_new_mem_buf(pointer, len(data))
        if bio == _ffi.NULL:
            raise MemoryError("BIO_new_mem_buf")
        # Empty, it asks for more (as a memory BIO does), not an end.
        _lib.BIO_set_mem_eof_return(bio, -1)
        _lib.SSL_set_bio(connection._ssl, bio, connection._from_ssl)
        connection._into_ssl = bio
        self._held = (data, pointer)

    def _plaintextBound(self) -> int:
        """
        The most plaintext the read held (L{_readFrom}) can give: its own
        octets, and a record OpenSSL's record layer kept the start of from
        the read before (each record's plaintext is shorter than the record),
        at most L{RECEIVE_MOST}.  Only a bound: reading continues while a
        buffer of this size fills.
        """
        held = self._held
        size = len(held[0]) + _RECORD_MOST if held is not None else RECEIVE_MOST
        return min(size, RECEIVE_MOST)

    def receive(self) -> None:
        """
        Hand the protocol the plaintext OpenSSL can give now, then send
        what reading made OpenSSL write (Twisted's C{_flushReceiveBIO}).

        While the protocol reads a FETCH literal it can take in place
        (C{literalSpace}, L{imapmig.imap.responses.ResponseReader}), OpenSSL
        decrypts straight into the literal's final buffer: no copy into the
        shared buffer, none into C{bytes}, none into the body.  That is the
        rest of each literal that the shared buffer's size cut.  (A short
        read after each such literal, to read the next one all in place,
        cost more in Python than the copies it saved: bench/results/s2s.md,
        round 5.)
        """
        protocol: Any = self._protocol
        if not protocol._handshakeDone:
            TLSMemoryBIOProtocol._flushReceiveBIO(protocol)
            return
        connection = protocol._tlsConnection
        wrapped = protocol.wrappedProtocol
        literalSpace = getattr(wrapped, "literalSpace", None)
        while not protocol._lostTLSConnection:
            space = literalSpace() if literalSpace is not None else None
            if space is not None:
                wanted = len(space)
                octets, failure = _decryptedInto(connection, space)
                if octets and not protocol._aborted:
                    wrapped.literalFilled(octets)
            else:
                wanted = self._plaintextBound()
                received, octets, failure = _decryptedBytes(connection, wanted)
                if octets and not protocol._aborted:
                    ProtocolWrapper.dataReceived(protocol, received)
            if failure is None:
                if octets < wanted:
                    break
                continue
            if isinstance(failure.value, SSL.ZeroReturnError):
                # The server's close_notify: Twisted's answer.
                protocol._shutdownTLS()
                protocol._tlsShutdownFinished(None)
            else:
                protocol._tlsShutdownFinished(failure)
        protocol._flushSendBIO()


def _decryptedBytes(connection: Any, size: int) -> tuple[bytes, int, Failure | None]:
    """
    Read all the plaintext C{connection} can give now, up to C{size}
    octets, into the C{bytes} it is handed on as: OpenSSL decrypts into the
    storage of a fresh C{bytes} object (L{LiteralBuffer}), which is then
    cut to what was read, in place (C{take(octets)}): no shared buffer to
    copy out of.

    @return: the C{bytes} read, how many octets they are, and L{None} if
        OpenSSL wants more input (or C{size} were read), else why reading
        failed (pyOpenSSL's exception, as its C{recv} raises it).
    """
    buffer = LiteralBuffer(size)
    octets, failure = _readInto(connection, buffer)
    return buffer.take(octets), octets, failure


def _decryptedInto(connection: Any, space: memoryview) -> tuple[int, Failure | None]:
    """
    Read into C{space} (a writable view, released here) all the plaintext
    C{connection} can give now, up to its size.

    @return: as L{_decryptedBytes}, without the C{bytes}.
    """
    try:
        return _readInto(connection, space)
    finally:
        space.release()


_SSL_READ = int(_ffi.cast("uintptr_t", _ffi.cast("int(*)(SSL *, void *, int)", _lib.SSL_read)))
"""
The address of OpenSSL's C{SSL_read} in cryptography's bindings, for
L{readTLS}.
"""


def readTLSPython(sslRead: int, ssl: int, buffer: Any) -> tuple[int, int]:
    """
    OpenSSL's C{SSL_read} (at address C{sslRead}) on the SSL at address
    C{ssl} into the writable C{buffer}, call after call (a record each)
    while it gives octets and the buffer has room: the twin of
    C{imapmig.imap._literal.readTLS}, and its fallback.

    @return: the octets read, and what the last call returned (more than
        0: the buffer is full; else C{SSL_get_error} says why it stopped).
    """
    read = _ffi.cast("int(*)(SSL *, void *, int)", sslRead)
    connection = _ffi.cast("SSL *", ssl)
    pointer = _ffi.from_buffer(buffer, require_writable=True)
    try:
        size = len(pointer)
        total = 0
        last = 1
        while total < size:
            last = read(connection, pointer + total, min(size - total, 2**31 - 1))
            if last <= 0:
                break
            total += last
        return total, last
    finally:
        _ffi.release(pointer)


try:
    from imapmig.imap._literal import readTLS
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    readTLS = readTLSPython


def _readInto(connection: Any, buffer: Any) -> tuple[int, Failure | None]:
    """
    OpenSSL's C{SSL_read} of C{connection} into the writable C{buffer}, as
    long as it gives octets and the buffer has room (L{readTLS}: one C loop,
    not a Python call a record).

    @return: the octets read, and L{None} if OpenSSL wants more input (or
        the buffer is full), else why reading failed (pyOpenSSL's
        exception, as its C{recv} raises it).
    """
    ssl = connection._ssl
    total, last = readTLS(_SSL_READ, int(_ffi.cast("uintptr_t", ssl)), buffer)
    if last > 0 or _lib.SSL_get_error(ssl, last) == _lib.SSL_ERROR_WANT_READ:
        return total, None
    try:
        connection._raise_ssl_error(ssl, last)
    except SSL.Error:
        return total, Failure()
    return total, None


def streamline(tlsProtocol: object, connection: SSL.Connection) -> None:
    """
    Give Twisted's TLS transport C{tlsProtocol} a L{TLSSender} and a
    L{TLSReceiver}: its C{writeSequence}, C{_flushSendBIO} and
    C{_flushReceiveBIO} are theirs, and the sender is its C{tlsSender}
    (which L{imapmig.imap.gather.writerFor} hands the pipeline's pieces to,
    views and all).  Anything but a L{TLSMemoryBIOProtocol} is left alone.

    @param connection: the OpenSSL connection made for it, whose partial
        writes are turned off: into a memory BIO, which never refuses a
        write, C{SSL_write} then makes all of a body's records in one call
        rather than one call per record.
    """
    if not isinstance(tlsProtocol, TLSMemoryBIOProtocol):
        return
    _lib.SSL_clear_mode(connection._ssl, _lib.SSL_MODE_ENABLE_PARTIAL_WRITE)
    sender = TLSSender(tlsProtocol)
    receiver = TLSReceiver(tlsProtocol)
    protocol: Any = tlsProtocol
    protocol.writeSequence = sender.writeSequence
    protocol._flushSendBIO = sender.flush
    protocol._flushReceiveBIO = receiver.receive
    protocol.dataReceived = receiver.dataReceived
    protocol.tlsSender = sender


def watched(options: object) -> object:
    """
    C{options} as L{WatchedClientTLS}, if it is client TLS options not yet
    watched; else C{options} itself.
    """
    if isinstance(options, WatchedClientTLS) or not IOpenSSLClientConnectionCreator.providedBy(
        options
    ):
        return options
    return WatchedClientTLS(options)


def describeTLSError(error: BaseException) -> str | None:
    """
    A short explanation of a TLS failure, or L{None} if C{error} is not one.
    """
    if isinstance(error, VerificationError):
        names = ", ".join(_mismatchedName(mismatch) for mismatch in error.errors)
        return f"the server's certificate does not match {names}"
    if isinstance(error, SSL.Error):
        return _openSSLReasons(error)
    return None


def _mismatchedName(mismatch: object) -> str:
    """
    The name or address a certificate did not match, as
    C{service_identity} reports it.
    """
    identifier = getattr(mismatch, "mismatched_id", None)
    name = getattr(identifier, "hostname", None) or getattr(identifier, "ip", None)
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    return str(name) if name is not None else str(mismatch)


def _openSSLReasons(error: SSL.Error) -> str:
    """
    The reasons of OpenSSL's error queue an L{SSL.Error} carries, or its
    text (its class name, if it has none).
    """
    queue = error.args[0] if error.args else []
    if not isinstance(queue, list):
        return str(error) or type(error).__name__
    return "; ".join(_queueReasons(queue)) or type(error).__name__


def _queueReasons(queue: list[Any]) -> list[str]:
    """
    The reasons, not empty, of the entries of OpenSSL's error queue
    (C{(library, function, reason)} tuples).
    """
    reasons = [entry[-1] for entry in queue if isinstance(entry, tuple)]
    return [str(reason) for reason in reasons if reason]


def _looksLikeTLS(head: bytes) -> bool:
    """
    Whether C{head}, the first octets of a server's answer, can start a
    TLS record.
    """
    if head[0] not in _RECORD_TYPES:
        return False
    return len(head) < 2 or head[1] == _RECORD_MAJOR


def handshakeFailure(reason: BaseException, handle: object) -> ImapmigError | None:
    """
    What ended a connection during its TLS handshake, as an error of
    imapmig's, or L{None} if C{reason} is none of those known.

    @param reason: why the connection ended.
    @param handle: the transport's C{getHandle()}: a L{WatchedConnection}
        tells what the server sent; any other handle gives less detail.
    """
    notTLS = _notTLS(handle)
    if notTLS is not None:
        return notTLS
    if isinstance(reason, HandshakeClosed):
        return TLSFailed(HandshakeClosed.REASON)
    if isinstance(reason, ImapmigError) and not isinstance(reason, SSL.Error):
        # One of imapmig's own OpenSSL errors (a refused identity) is
        # described from OpenSSL's error queue, as OpenSSL's own are.
        return reason
    tls = describeTLSError(reason)
    if tls is not None:
        return TLSFailed(f"TLS handshake failed: {tls}")
    return _interruption(reason)


def _notTLS(handle: object) -> NotTLS | None:
    """
    A L{NotTLS} quoting what the server sent, if a L{WatchedConnection}
    kept octets that cannot start a TLS record; else L{None}.
    """
    received = handle.received if isinstance(handle, WatchedConnection) else b""
    if not received or _looksLikeTLS(received):
        return None
    excerpt = escapedExcerpt(received)
    return NotTLS(f'not TLS: the server answered "{excerpt}"', excerpt)


_INTERRUPTIONS: tuple[tuple[type[Exception], str | None, bool], ...] = (
    # imapmig ended it (and says why elsewhere).
    (netError.ConnectionAborted, None, False),
    (
        netError.ConnectionDone,
        "the server closed the connection during the TLS handshake (no TLS alert)",
        True,
    ),
    (netError.ConnectionLost, "connection reset during the TLS handshake", False),
)
"""
How a connection that ended during the handshake with no TLS answer
ended, first match first: the message of its L{TLSInterrupted} (L{None}:
not one), and whether the server closed it.
"""


def _interruption(reason: BaseException) -> TLSInterrupted | None:
    """
    A L{TLSInterrupted} for a connection closed or reset during the
    handshake, or L{None}.
    """
    for kind, message, closed in _INTERRUPTIONS:
        if isinstance(reason, kind):
            return None if message is None else TLSInterrupted(message, closed=closed)
    return None
