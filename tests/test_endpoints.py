"""
Tests for L{imapmig.config.endpoints}: endpoint strings judged by
Twisted's own parsers, each refusal said in words (the configuration's
tests check the same through whole files, in L{tests.test_config}).
"""

from __future__ import annotations

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.endpoints import (
    _ClientEndpoint,
    _parseClientEndpoint,
    _serverEndpointProblem,
    isLoopbackHost,
)
from imapmig.config.model import ServerConfig
from imapmig.daemon.service import serverEndpoint


class ClientEndpointTests(SynchronousTestCase):
    """
    L{_parseClientEndpoint} reads a server's C{tcp:} or C{tls:} endpoint.
    """

    def test_tls(self) -> None:
        """
        A C{tls:} endpoint is implicit TLS over its C{tcp:} form.
        """
        self.assertEqual(
            _parseClientEndpoint("tls:imap.example.com:993"),
            _ClientEndpoint(
                written="tls:imap.example.com:993",
                implicitTLS=True,
                tcpEndpoint="tcp:imap.example.com:993",
                host="imap.example.com",
            ),
        )

    def test_connectTimeout(self) -> None:
        """
        A server's TCP endpoint connects within the server's C{timeout}
        where the string sets no C{timeout=} of its own (Twisted's default
        is 30 s: a reactor held longer than that by a big local listing
        lost a connection the kernel had made, reported as the server's
        timeout); one that sets it keeps it; a C{timeout} of 0 leaves
        Twisted's. The reactor's C{connectTCP} gets it.
        """
        plain = _parseClientEndpoint("tls:imap.example.com:993")
        own = _parseClientEndpoint("tcp:imap.example.com:143:timeout=5")
        assert isinstance(plain, _ClientEndpoint) and isinstance(own, _ClientEndpoint)
        self.assertEqual(plain.connectingWithin(120), "tcp:imap.example.com:993:timeout=120")
        self.assertEqual(plain.connectingWithin(0), "tcp:imap.example.com:993")
        self.assertEqual(own.connectingWithin(120), "tcp:imap.example.com:143:timeout=5")
        reactor = MemoryReactorClock()
        server = ServerConfig(name="a", endpoint=plain.written, starttls=False, implicitTLS=False,
                              tcpEndpoint=plain.connectingWithin(120), tlsHostname=plain.host,
                              tlsCA=None, timeout=120.0, compress=False)  # fmt: skip
        endpoint, _ = serverEndpoint(reactor, server)
        endpoint.connect(Factory.forProtocol(Protocol))
        host, port, _, timeout, _ = reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("imap.example.com", 993, 120))

    def test_keywords(self) -> None:
        """
        The host and port may be given by keyword.
        """
        endpoint = _parseClientEndpoint("tcp:port=143:host=imap.example.com")
        assert isinstance(endpoint, _ClientEndpoint)
        self.assertEqual((endpoint.host, endpoint.implicitTLS), ("imap.example.com", False))

    def test_refused(self) -> None:
        """
        Another kind of endpoint, TLS arguments, an empty host and a port
        out of range are refused, saying why.
        """
        cases = [
            ("ssl:imap.example.com:993", "(write tls: for implicit TLS)"),
            ("tls:imap.example.com:993:hostname=x", "TLS arguments in the endpoint string"),
            ("tcp::143", "the host is empty"),
            ("tcp:imap.example.com:70000", "port 70000 is out of range (1-65535)"),
        ]
        for description, said in cases:
            problem = _parseClientEndpoint(description)
            assert isinstance(problem, str), description
            self.assertIn(said, problem)


class ServerEndpointTests(SynchronousTestCase):
    """
    L{_serverEndpointProblem} checks a listener's endpoint string.
    """

    def test_valid(self) -> None:
        """
        A valid TCP listener has no problem.
        """
        self.assertIsNone(_serverEndpointProblem("tcp:8025:interface=127.0.0.1"))

    def test_port(self) -> None:
        """
        A port out of range is refused.
        """
        self.assertEqual(
            _serverEndpointProblem("tcp:70000"), "port 70000 is out of range (0-65535)"
        )

    def test_ipv6Colons(self) -> None:
        """
        An IPv6 interface with unescaped colons is refused with how to
        escape them.
        """
        problem = _serverEndpointProblem("tcp:8025:interface=::1")
        assert problem is not None
        self.assertIn("escape the colons of an IPv6 address", problem)


class LoopbackTests(SynchronousTestCase):
    """
    L{isLoopbackHost} says whether a host as written names this machine.
    """

    def test_loopback(self) -> None:
        """
        localhost, names under .localhost, 127.0.0.0/8, ::1 and IPv4-mapped
        loopback addresses are loopback; other names are not resolved.
        """
        for host in ("localhost", "a.localhost.", "127.1.2.3", "[::1]", "::ffff:127.0.0.1"):
            self.assertTrue(isLoopbackHost(host), host)
        for host in ("imap.example.com", "10.0.0.1", "::ffff:10.0.0.1"):
            self.assertFalse(isLoopbackHost(host), host)
