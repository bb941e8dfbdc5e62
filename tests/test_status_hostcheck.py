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
from imapmig.status.hostcheck import allowedName, hostName
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

    def setUp(self) -> None:
        self.clock = Clock()
        progress = MigrationProgress(self.clock.seconds)
        progress.addJob("alice@example.org")
        self.site = buildStatusSite(
            StatusResource(progress, self.clock.seconds, MemoryStateStore()), self.clock
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
            self.assertEqual(json.loads(body)["schema"], 1)

    def test_notLoopback(self) -> None:
        """
        On a connection that arrived on a non-loopback address (a listener
        on the network, reached by its DNS name) any name is served.
        """
        code, _ = self.get(b"migration.corp.example:8025", local=IPv4Address("TCP", "10.0.0.5", 8025))
        self.assertEqual(code, 200)


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
