"""
Tests for the quietness of the IMAP connections' factory
(L{imapmig.imap.opening.openSession}): no Twisted factory chatter at the
default log level.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import TransientError
from imapmig.imap.opening import openSession


class SessionFactoryQuietTests(SynchronousTestCase):
    """
    The factory each IMAP connection is made with.
    """

    def test_noFactoryChatter(self) -> None:
        """
        Starting and stopping the factory of a connection C{openSession}
        opens logs nothing ("Starting factory", "Stopping factory").
        """
        reactor = MemoryReactorClock()
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", 143)
        opening = Deferred.fromCoroutine(
            openSession(
                endpoint, reactor, description="test", user="u", password="p",
                starttls=False, tlsOptions=None, timeout=5.0,
            )
        )  # fmt: skip
        [(host, port, factory, timeout, bindAddress)] = reactor.tcpClients
        self.assertEqual((host, port), ("127.0.0.1", 143))
        with capturedLogs() as events:
            factory.doStart()
            factory.doStop()
        self.assertEqual(list(events), [])
        reactor.advance(5.0)
        self.failureResultOf(opening, TransientError)
        self.assertEqual(reactor.getDelayedCalls(), [])
