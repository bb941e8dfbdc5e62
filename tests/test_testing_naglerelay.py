"""
Tests for L{imapmig.testing.naglerelay}: it relays both ways, and leaves
Nagle on only on the socket facing the client (unless told not to).
"""

from __future__ import annotations

import socket

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.naglerelay import NagleRelay


class NagleRelayTests(SynchronousTestCase):
    """
    The relay against a plain listening socket on loopback.
    """

    def _relayed(self, nagle: bool) -> tuple[NagleRelay, socket.socket, socket.socket]:
        """
        Start a relay (C{nagle}) in front of a listening socket; return it,
        a client connected through it, and the upstream's end.
        """
        upstream = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(upstream.close)
        relay = NagleRelay("127.0.0.1", upstream.getsockname()[1], nagle=nagle)
        relay.start()
        self.addCleanup(relay.stop)
        client = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        self.addCleanup(client.close)
        upstream.settimeout(10)
        server, _ = upstream.accept()
        self.addCleanup(server.close)
        server.settimeout(10)
        return relay, client, server

    def test_relaysBothWays(self) -> None:
        """
        What the client sends reaches the server and the reverse; the end
        of one side's output ends the other's.
        """
        relay, client, server = self._relayed(nagle=True)
        client.sendall(b"0001 APPEND INBOX {3}\r\n")
        self.assertEqual(server.recv(100), b"0001 APPEND INBOX {3}\r\n")
        server.sendall(b"+ go\r\n")
        self.assertEqual(client.recv(100), b"+ go\r\n")
        server.shutdown(socket.SHUT_WR)
        self.assertEqual(client.recv(100), b"")
        self.assertEqual(relay.connections, 1)

    def test_nagleOnTowardsTheClientOnly(self) -> None:
        """
        The relay's socket facing the client has C{TCP_NODELAY} off; the one
        facing the server has it on.
        """
        relay, client, server = self._relayed(nagle=True)
        client.sendall(b"x")
        server.recv(1)
        towardsClient, towardsServer = relay._sockets
        self.assertEqual(towardsClient.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)
        self.assertNotEqual(towardsServer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)

    def test_withoutNagle(self) -> None:
        """
        With C{nagle=False} the socket facing the client has C{TCP_NODELAY}
        on too: the same path without the stall.
        """
        relay, client, server = self._relayed(nagle=False)
        client.sendall(b"x")
        server.recv(1)
        towardsClient, _ = relay._sockets
        self.assertNotEqual(towardsClient.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)
