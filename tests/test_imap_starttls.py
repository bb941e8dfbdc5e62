"""
Tests for L{imapmig.imap.starttls}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import TLSInterrupted
from imapmig.imap.starttls import TLSHandshake, handleOf, isTLSConnection


class _StartingTransport(StringTransport):
    """
    Records what C{startTLS} was given.
    """

    started: Any = None

    def startTLS(self, options: Any) -> None:
        self.started = options


class TLSHandshakeTests(SynchronousTestCase):
    """
    L{TLSHandshake} says whether a handshake is under way, starts one, and
    says what ended a connection during it.
    """

    def test_plainConnection(self) -> None:
        """
        A connection whose handle is not an OpenSSL connection has no
        handshake under way when it is made.
        """
        handshake = TLSHandshake()
        handshake.connected(StringTransport())
        self.assertFalse(handshake.underway)
        self.assertFalse(isTLSConnection(object()))

    def test_handle(self) -> None:
        """
        L{handleOf} is the transport's C{getHandle()}, or L{None} for a
        transport without one.
        """
        handle = object()
        transport = StringTransport()
        transport.getHandle = lambda: handle  # type: ignore[attr-defined]
        self.assertIs(handleOf(transport), handle)
        self.assertIsNone(handleOf(StringTransport()))

    def test_startAndComplete(self) -> None:
        """
        L{TLSHandshake.start} starts TLS on the transport with the options
        (watched when they are client TLS options; others as they are), and
        the handshake is under way until L{TLSHandshake.completed}.
        """
        handshake, transport, options = TLSHandshake(), _StartingTransport(), object()
        handshake.start(transport, options)
        self.assertIs(transport.started, options)
        self.assertTrue(handshake.underway)
        handshake.completed()
        self.assertFalse(handshake.underway)

    def test_failure(self) -> None:
        """
        A connection closed during the handshake fails with what that
        means (L{TLSInterrupted}); an ending that is none of the known ones
        is left as it is.
        """
        handshake = TLSHandshake()
        closed = handshake.failure(Failure(ConnectionDone()), StringTransport())
        self.assertIsInstance(closed.value, TLSInterrupted)
        unknown = Failure(ValueError("x"))
        self.assertIs(handshake.failure(unknown, StringTransport()), unknown)
