"""
A TCP relay in front of a test's server that counts the connections open
through it at once, in all and per logged-in user (the limits tests read
what the server really saw).
"""

from __future__ import annotations

import base64
import re
from collections import Counter
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.internet.address import IPv4Address
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.protocols.portforward import ProxyFactory, ProxyServer
from twisted.trial.unittest import SynchronousTestCase

# Only integration tests use this relay: it counts on the global reactor.
reactor: Any = _globalReactor

_LOGIN = re.compile(rb'^\S+ LOGIN "?([^" \r\n]+)', re.MULTILINE)
_PLAIN = re.compile(rb"^\S+ AUTHENTICATE PLAIN ([A-Za-z0-9+/=]+)", re.MULTILINE)


class _CountingServer(ProxyServer):
    """
    One relayed client connection, counted while it is open, and by the
    user it logs in as.
    """

    factory: ConnectionCounter

    def connectionMade(self) -> None:
        self.user: bytes | None = None
        self.sniffed = b""
        self.factory.opened(self)
        ProxyServer.connectionMade(self)

    def dataReceived(self, data: bytes) -> None:
        if self.user is None and len(self.sniffed) < 4096:
            self.sniffed += data
            self.user = _loginName(self.sniffed)
            if self.user is not None:
                self.factory.loggedIn(self)
        ProxyServer.dataReceived(self, data)

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.closed(self)
        ProxyServer.connectionLost(self, reason)


def _loginName(sniffed: bytes) -> bytes | None:
    """
    The user a client's first commands log in as (LOGIN, or AUTHENTICATE
    PLAIN with an initial response), or L{None} until seen.
    """
    match = _LOGIN.search(sniffed)
    if match is not None:
        return match.group(1)
    match = _PLAIN.search(sniffed)
    if match is not None:
        authzid, user, _ = base64.b64decode(match.group(1)).split(b"\0", 2)
        return authzid or user
    return None


class ConnectionCounter(ProxyFactory):
    """
    A TCP relay to a server counting the connections open through it at
    once, in all and per user; the highest counts are kept.
    """

    protocol = _CountingServer

    def __init__(self, host: str, port: int) -> None:
        ProxyFactory.__init__(self, host, port)
        self.open: set[_CountingServer] = set()
        self.most = 0
        self.perUser: Counter[bytes] = Counter()
        self.mostPerUser: Counter[bytes] = Counter()
        self.accepted = 0

    def opened(self, connection: _CountingServer) -> None:
        self.accepted += 1
        self.open.add(connection)
        # Counted at the start of the next reactor turn: a connection the
        # client closed before opening this one may still await its EOF in
        # this turn's events.
        reactor.callLater(0, self._count)

    def _count(self) -> None:
        self.most = max(self.most, len(self.open))

    def loggedIn(self, connection: _CountingServer) -> None:
        assert connection.user is not None
        self.perUser[connection.user] += 1
        self.mostPerUser[connection.user] = max(
            self.mostPerUser[connection.user], self.perUser[connection.user]
        )

    def closed(self, connection: _CountingServer) -> None:
        self.open.discard(connection)
        if connection.user is not None:
            self.perUser[connection.user] -= 1


async def countedRelay(testCase: SynchronousTestCase, port: int) -> tuple[ConnectionCounter, int]:
    """
    Start a counting relay on loopback in front of the server at
    C{127.0.0.1:port}, stopped when C{testCase} ends.

    @param testCase: the test whose cleanup stops the relay.
    @param port: the server's port on 127.0.0.1.
    @return: the relay's counter, and the loopback port it listens on.
    """
    counter = ConnectionCounter("127.0.0.1", port)
    listening: IListeningPort = await TCP4ServerEndpoint(
        reactor, 0, interface="127.0.0.1"
    ).listen(counter)
    testCase.addCleanup(listening.stopListening)
    address = listening.getHost()
    assert isinstance(address, IPv4Address)
    return counter, address.port
