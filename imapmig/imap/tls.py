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

L{writeUnjoined} is the TLS write path's one change: Twisted's TLS
transport joins a C{writeSequence} into one string (a copy of every
message body it holds) and then slices it into 16 KiB records (a second
copy); the connections L{WatchedClientTLS} makes hand a body of a record or
more to OpenSSL as a C{memoryview}, read in place.
"""

from __future__ import annotations

from typing import Any

from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import error as netError
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.protocols.tls import TLSMemoryBIOProtocol
from zope.interface import implementer

from imapmig.errors import ImapmigError, NotTLS, TLSFailed, TLSInterrupted, escapedExcerpt

__all__ = [
    "HandshakeClosed",
    "WatchedClientTLS",
    "WatchedConnection",
    "describeTLSError",
    "handshakeFailure",
    "watched",
    "writeUnjoined",
]

RECORD_PAYLOAD = 2**14
"""
The most plaintext one TLS record holds, which Twisted's TLS transport hands
OpenSSL at a time: a piece at least this long is written unjoined.
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
        writeUnjoined(tlsProtocol)
        return connection


def writeUnjoined(tlsProtocol: object) -> None:
    """
    Give Twisted's TLS transport C{tlsProtocol} a C{writeSequence} that
    does not copy large pieces: a sequence holding a piece of
    L{RECORD_PAYLOAD} octets or more (a message body) is written in order,
    each such piece as a C{memoryview} that the transport cuts into records
    without copying and OpenSSL encrypts in place, the short pieces between
    them (command lines, the CRLF) joined; a sequence of short pieces only
    goes the transport's own way (joined, then gathered with the writes of
    the same reactor turn).  Anything but a L{TLSMemoryBIOProtocol} is left
    alone.

    The transport's small-write aggregator (Twisted's
    C{BufferingTLSTransport}) is flushed first, so that what was written
    before stays before.
    """
    if not isinstance(tlsProtocol, TLSMemoryBIOProtocol):
        return
    protocol = tlsProtocol
    joined: Any = protocol.writeSequence
    write: Any = TLSMemoryBIOProtocol.write

    def writeSequence(pieces: Any) -> None:
        pieces = list(pieces)
        if all(len(piece) < RECORD_PAYLOAD for piece in pieces):
            joined(pieces)
            return
        aggregator = getattr(protocol, "_aggregator", None)
        if aggregator is not None:
            aggregator.flush()
        short: list[Any] = []
        for piece in pieces:
            if len(piece) < RECORD_PAYLOAD:
                short.append(piece)
                continue
            if short:
                write(protocol, b"".join(short))
                short = []
            write(protocol, memoryview(piece))
        if short:
            write(protocol, b"".join(short))

    protocol.writeSequence = writeSequence  # type: ignore[method-assign]


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
