# -*- test-case-name: tests.test_imap_acks -*-
"""
Acknowledging each read at once (Linux C{TCP_QUICKACK}), for connections
where the server's small replies would otherwise wait for imapmig's
delayed ACK.

A server that leaves Nagle's algorithm on (Courier-IMAP and Cyrus set no
C{TCP_NODELAY}) holds a small reply while an earlier one is unacknowledged.
When imapmig has several replies due and nothing to send until they have
arrived (under LITERAL-, a message above 4096 octets waits for the replies
to the small ones sent before it), the kernel delays the ACK of the first
reply (40 ms on Linux), and the server holds the next reply until then:
one stall per such wait.  C{TCP_QUICKACK} is not sticky: set after each
read, it sends the ACK that read scheduled at once and leaves the
delayed-ACK mode, so the server's next reply leaves without waiting.

It costs one system call per read, so it is turned on only where
synchronizing literals make imapmig wait with replies due (see
L{imapmig.imap.pipeline}); a server with LITERAL+ never needs it.
Elsewhere than Linux the option does not exist and nothing is done.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["ImmediateAcks", "tcpSocketOf"]

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)

# Wrappers between the protocol and the TCP transport: COMPRESS, TLS.
_MAX_WRAPPERS = 4


def tcpSocketOf(transport: Any) -> socket.socket | None:
    """
    The TCP socket under C{transport}, through the wrappers imapmig uses: a
    TCP transport's own (C{getHandle}); under an implicit-TLS wrapper, the
    wrapped transport's; after STARTTLS, the TCP transport's C{socket}
    (its C{getHandle} then gives the OpenSSL connection); under COMPRESS,
    the compressed transport's.  L{None} for a transport with no socket (a
    test's in-memory transport).
    """
    for _ in range(_MAX_WRAPPERS + 1):
        if transport is None:
            return None
        sock = _ownSocket(transport)
        if sock is not None:
            return sock
        transport = getattr(transport, "transport", None) or getattr(
            transport, "_transport", None
        )
    return None


def _ownSocket(transport: Any) -> socket.socket | None:
    """
    The TCP socket of C{transport} itself, not of one it wraps: its
    handle, or (after STARTTLS) its C{socket}.
    """
    getHandle = getattr(transport, "getHandle", None)
    handle = getHandle() if getHandle is not None else None
    if isinstance(handle, socket.socket):
        return handle
    sock = getattr(transport, "socket", None)
    return sock if isinstance(sock, socket.socket) else None


class ImmediateAcks:
    """
    Re-arms C{TCP_QUICKACK} on one socket, after each read.
    """

    def __init__(self, sock: socket.socket) -> None:
        """
        @param sock: the connection's TCP socket.
        """
        self._socket: socket.socket | None = sock

    @classmethod
    def forTransport(cls, transport: Any) -> ImmediateAcks | None:
        """
        Immediate ACKs for the TCP socket under C{transport}, or L{None}
        where there is no such socket or no C{TCP_QUICKACK} (not Linux).
        """
        if _QUICKACK is None:
            return None
        sock = tcpSocketOf(transport)
        return None if sock is None else cls(sock)

    @property
    def active(self) -> bool:
        """
        Whether ACKs are still being sent at once (not after a failure of
        the option, which turns it off for good).
        """
        return self._socket is not None

    def rearm(self) -> None:
        """
        Acknowledge what was just read now, and the next segment as it
        arrives.  A socket that refuses the option (closed meanwhile) is
        left alone from then on.
        """
        sock = self._socket
        if sock is None or _QUICKACK is None:
            return
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        except OSError:
            self._socket = None
