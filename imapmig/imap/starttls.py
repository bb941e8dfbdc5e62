# -*- test-case-name: tests.test_imap_starttls,tests.test_cleartext -*-
"""
The client's side of TLS, without OpenSSL: whether a connection's TLS
handshake is under way (from the start under an implicit-TLS wrapper,
after the C{OK} to C{STARTTLS} otherwise), starting it, and what ended a
connection during it.

L{imapmig.imap.tls}, which imports OpenSSL, is imported only once a
connection uses TLS: a daemon whose configuration uses none runs without
OpenSSL (L{imapmig.access.cleartext}).  Taken out of
L{imapmig.imap.client.MigrationIMAP4Client}, which held it among its other
concerns.
"""

from __future__ import annotations

from typing import Any

from twisted.python.failure import Failure

from imapmig.access.cleartext import openSSLLoaded

__all__ = ["TLSHandshake", "handleOf", "isTLSConnection"]


def isTLSConnection(handle: object) -> bool:
    """
    Whether C{handle}, a transport's C{getHandle()}, is an OpenSSL
    connection.  A daemon whose configuration uses no TLS runs without
    OpenSSL (L{imapmig.access.cleartext}): then no handle is one.
    """
    if not openSSLLoaded():
        return False
    from OpenSSL import SSL

    return isinstance(handle, SSL.Connection)


def handleOf(transport: object) -> object:
    """
    The transport's OpenSSL connection under TLS, its socket (or L{None})
    otherwise.
    """
    getHandle = getattr(transport, "getHandle", None)
    return getHandle() if getHandle is not None else None


class TLSHandshake:
    """
    The TLS handshake of one connection.

    @ivar underway: whether a handshake has started and not finished.
    """

    def __init__(self) -> None:
        self.underway = False

    def connected(self, transport: object) -> None:
        """
        The connection was made: under an implicit-TLS wrapper the
        handshake starts now.
        """
        self.underway = isTLSConnection(handleOf(transport))

    def start(self, transport: Any, options: object) -> None:
        """
        C{STARTTLS} was accepted: start the handshake on C{transport} with
        C{options}, watched (L{imapmig.imap.tls.watched}) so that a failed
        handshake says how.
        """
        self.underway = True
        from imapmig.imap.tls import watched

        transport.startTLS(watched(options))

    def completed(self) -> None:
        """
        The handshake finished.
        """
        self.underway = False

    def failure(self, reason: Failure, transport: object) -> Failure:
        """
        Why a connection that ended during the handshake ended: said once,
        with what the server sent (L{imapmig.imap.tls.handshakeFailure}),
        rather than by whichever command was waiting; C{reason} itself if
        it is none of the known endings.
        """
        if reason.value is None:
            return reason
        from imapmig.imap.tls import handshakeFailure

        tls = handshakeFailure(reason.value, handleOf(transport))
        return reason if tls is None else Failure(tls)
