"""
Tests for L{imapmig.status.hostcheck}: the status site refuses requests
that reach a loopback listener under a foreign name (DNS rebinding).
"""

from __future__ import annotations

import json

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.progress import MigrationProgress
from imapmig.state.memory import MemoryStateStore
from imapmig.status.hostcheck import allowedName, hostName, listedName, reachesBeyondLoopback
from imapmig.status.resource import StatusResource, buildStatusSite


def response(raw: bytes) -> tuple[int, bytes]:
    """
    The status code and body of one non-chunked HTTP response.
    """
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


class StatusSiteHostTests(SynchronousTestCase):
    """
    Requests to the status site (L{buildStatusSite}) over a loopback
    connection, by their C{Host} header.
    """

    allowedHosts: tuple[str, ...] = ()

    def setUp(self) -> None:
        self.clock = Clock()
        progress = MigrationProgress(self.clock.seconds)
        progress.addJob("alice@example.org")
        self.site = buildStatusSite(
            StatusResource(progress, self.clock.seconds, MemoryStateStore()),
            self.clock,
            self.allowedHosts,
        )

    def get(
        self,
        host: bytes | None,
        path: bytes = b"/status.json",
        local: IPv4Address | IPv6Address = IPv4Address("TCP", "127.0.0.1", 8025),
    ) -> tuple[int, bytes]:
        """
        C{GET path} with C{Host: host} (none if L{None}) on a connection
        that arrived at C{local}.
        """
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        assert channel is not None
        transport = StringTransport(hostAddress=local)
        channel.makeConnection(transport)
        request = b"GET " + path + b" HTTP/1.0\r\n"
        if host is not None:
            request += b"Host: " + host + b"\r\n"
        channel.dataReceived(request + b"\r\n")
        channel.connectionLost(None)
        return response(transport.value())

    def test_rebound(self) -> None:
        """
        A request under a name other than C{localhost} that arrived on a
        loopback address is answered 421 with a JSON error, whatever its
        path: a page of another site, its name rebound to 127.0.0.1, can
        read neither the status, nor a manifest, nor the metrics.
        """
        for path in (b"/status.json", b"/jobs/alice@example.org/manifest.json", b"/", b"/healthz"):
            code, body = self.get(b"attacker.example:8025", path)
            self.assertEqual(code, 421, path)
            self.assertIn("DNS-rebinding", json.loads(body)["error"])
        code, _ = self.get(b"attacker.example.", local=IPv6Address("TCP", "::1", 8025))
        self.assertEqual(code, 421)

    def test_twoHostHeaders(self) -> None:
        """
        A request with two C{Host} headers is answered 421, whichever of
        them is foreign and even when both are allowed: the check must not
        read one name while another reader (a proxy, a log) reads the
        other.
        """
        for first, second in (
            (b"attacker.example", b"localhost"),
            (b"localhost", b"attacker.example"),
            (b"localhost", b"127.0.0.1"),
        ):
            channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
            assert channel is not None
            transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 8025))
            channel.makeConnection(transport)
            channel.dataReceived(
                b"GET /status.json HTTP/1.0\r\nHost: " + first + b"\r\nHost: " + second + b"\r\n\r\n"
            )
            channel.connectionLost(None)
            code, body = response(transport.value())
            self.assertEqual(code, 421, (first, second))
            self.assertIn("more than one Host header", json.loads(body)["error"])

    def test_local(self) -> None:
        """
        C{localhost}, a name under C{.localhost}, an IP address, or no
        C{Host} at all is served.
        """
        for host in (
            b"localhost:8025",
            b"LOCALHOST",
            b"dash.localhost:8025",
            b"127.0.0.1:8025",
            b"[::1]:8025",
            b"10.1.2.3",
            None,
        ):
            code, body = self.get(host)
            self.assertEqual(code, 200, host)
            self.assertEqual(json.loads(body)["schema"], 2)

    def test_notLoopback(self) -> None:
        """
        On a connection that arrived on a non-loopback address (a listener
        on the network, reached by its DNS name) any name is served.
        """
        code, _ = self.get(b"migration.corp.example:8025", local=IPv4Address("TCP", "10.0.0.5", 8025))
        self.assertEqual(code, 200)


class AllowedHostsTests(StatusSiteHostTests):
    """
    With C{status.allowed_hosts}, the site answers on every address to the
    names listed, IP addresses and, on loopback, the local names; to no
    other name.
    """

    allowedHosts = ("migration.corp.example", ".dash.example")
    lan = IPv4Address("TCP", "10.0.0.5", 8025)

    def test_notLoopback(self) -> None:
        """
        On a LAN address the names listed and IP addresses are served; a
        name under a listed C{.NAME} is; any other name is refused 421.
        """
        for host in (
            b"migration.corp.example:8025",
            b"MIGRATION.corp.example.",
            b"dash.example",
            b"eu.dash.example:8025",
            b"10.0.0.5:8025",
            b"[fd00::5]:8025",
            None,
        ):
            code, _ = self.get(host, local=self.lan)
            self.assertEqual(code, 200, host)
        for host in (b"attacker.example", b"localhost", b"corp.example", b"xdash.example"):
            code, body = self.get(host, local=self.lan)
            self.assertEqual(code, 421, host)
            self.assertIn("not in status.allowed_hosts", json.loads(body)["error"])

    def test_loopbackNames(self) -> None:
        """
        On loopback the local names stay allowed beside the names listed.
        """
        for host in (b"localhost:8025", b"migration.corp.example", b"127.0.0.1"):
            self.assertEqual(self.get(host)[0], 200, host)


class ReachesBeyondLoopbackTests(SynchronousTestCase):
    """
    L{reachesBeyondLoopback} tells a status listener on the network from
    one on loopback.
    """

    def test_endpoints(self) -> None:
        """
        C{tcp:} or C{ssl:} without an interface, or on a non-loopback
        one, reaches beyond loopback; on a loopback interface (IPv6
        escaped as Twisted's strings escape it), a UNIX socket, or
        C{systemd:} does not.
        """
        for listen in (
            "tcp:8025",
            "tcp:port=8025",
            "tcp:8025:interface=0.0.0.0",
            "tcp:8025:interface=10.0.0.5",
            "ssl:8443:privateKey=k.pem:certKey=c.pem",
            "tcp6:8025:interface=\\:\\:",
        ):
            self.assertTrue(reachesBeyondLoopback(listen), listen)
        for listen in (
            "tcp:8025:interface=127.0.0.1",
            "tcp:8025:interface=127.0.0.2",
            "tcp6:8025:interface=\\:\\:1",
            "ssl:8443:privateKey=k.pem:interface=127.0.0.1",
            "unix:/run/imapmig/status.sock",
            "systemd:domain=INET:index=0",
        ):
            self.assertFalse(reachesBeyondLoopback(listen), listen)

    def test_localhostInterface(self) -> None:
        """
        An interface named C{localhost} (any case, with or without a
        trailing dot) is loopback: the listener binds the address the name
        resolves to, and is not warned about; another name is not known to
        be loopback.
        """
        for listen in (
            "tcp:8025:interface=localhost",
            "tcp:8025:interface=LocalHost.",
            "tcp6:8025:interface=localhost",
            "ssl:8443:privateKey=k.pem:interface=localhost",
        ):
            self.assertFalse(reachesBeyondLoopback(listen), listen)
        self.assertTrue(reachesBeyondLoopback("tcp:8025:interface=status.corp.example"))

    def test_listedName(self) -> None:
        """
        A name equal to one listed, or under one that starts with a dot.
        """
        allowed = ("a.example", ".b.example")
        self.assertTrue(listedName("a.example", allowed))
        self.assertFalse(listedName("x.a.example", allowed))
        self.assertTrue(listedName("b.example", allowed))
        self.assertTrue(listedName("x.y.b.example", allowed))
        self.assertFalse(listedName("xb.example", allowed))
        self.assertFalse(listedName("a.example", ()))


class HostNameTests(SynchronousTestCase):
    """
    L{hostName} and L{allowedName}.
    """

    def test_hostName(self) -> None:
        """
        The port, brackets and a trailing dot go; the name is lower-cased.
        """
        self.assertEqual(hostName(b"Example.ORG.:80"), "example.org")
        self.assertEqual(hostName(b"[::1]:8025"), "::1")
        self.assertEqual(hostName(b"::1"), "::1")
        self.assertEqual(hostName(b"localhost"), "localhost")

    def test_allowedName(self) -> None:
        """
        Addresses and C{localhost} names are allowed; other names are not,
        including one that merely starts with C{localhost}.
        """
        for name in ("127.0.0.1", "::1", "192.0.2.1", "localhost", "a.localhost"):
            self.assertTrue(allowedName(name), name)
        for name in ("example.org", "localhost.example.org", "127.0.0.1.nip.io", ""):
            self.assertFalse(allowedName(name), name)
