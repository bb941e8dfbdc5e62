# -*- test-case-name: tests.test_status_limits -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what bounds the status site's cost to the daemon: the deadline
of a request, the cap on open connections, and failure pages that say
when their count is a lower bound.
"""

from __future__ import annotations

import json

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Site

from imapmig.progress import MigrationProgress
from imapmig.state import memory as memoryModule
from imapmig.state.memory import MemoryStateStore
from imapmig.status._http import REQUEST_DEADLINE, StatusChannel
from imapmig.status.lograte import LOG_INTERVAL
from imapmig.status.resource import QuietSite, StatusResource, buildStatusSite
from tests.test_state import failed

_GET = b"GET /status.json HTTP/1.1\r\nHost: localhost\r\n\r\n"


class _Harness:
    """
    A status site on a L{MemoryReactorClock}, and clients connected to it
    over L{StringTransport}s.
    """

    def __init__(self, maxConnections: int = 64) -> None:
        self.clock = MemoryReactorClock()
        self.progress = MigrationProgress(self.clock.seconds)
        self.store = MemoryStateStore()
        root = StatusResource(self.progress, self.clock.seconds, self.store)
        site = buildStatusSite(root, self.clock)
        assert isinstance(site, QuietSite)
        site.maxConnections = maxConnections
        self.site: Site = site
        self.quiet = site
        site.doStart()

    def connect(self, port: int = 40000) -> tuple[IProtocol, StringTransport]:
        """
        A new client's protocol and transport.
        """
        address = IPv4Address("TCP", "127.0.0.1", port)
        protocol = self.site.buildProtocol(address)
        assert protocol is not None
        transport = StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        return protocol, transport

    def close(self, protocol: IProtocol) -> None:
        """
        The client's connection is lost.
        """
        protocol.connectionLost(Failure(ConnectionDone()))

    def stop(self) -> None:
        """
        Stop the site (its log-date call).
        """
        self.site.doStop()


class RequestDeadlineTests(SynchronousTestCase):
    """
    L{StatusChannel} closes a connection whose request is not complete
    within L{REQUEST_DEADLINE} seconds of its first octet.
    """

    def test_dripHeaders(self) -> None:
        """
        A client sending a header line every few seconds (each restarting
        twisted.web's idle timeout) is answered 408 with a JSON error and
        closed when the deadline passes, and the timer ends with the
        connection.
        """
        harness = _Harness()
        protocol, transport = harness.connect()
        protocol.dataReceived(b"GET /status.json HTTP/1.1\r\n")
        for n in range(int(REQUEST_DEADLINE // 4)):
            harness.clock.advance(4)
            protocol.dataReceived(b"X-Drip-%d: 1\r\n" % (n,))
            self.assertFalse(transport.disconnecting)
        harness.clock.advance(REQUEST_DEADLINE - 4 * (REQUEST_DEADLINE // 4))
        self.assertTrue(transport.disconnecting)
        head, _, body = transport.value().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 408 "))
        self.assertIn(b"Connection: close", head)
        self.assertIn("not complete within 15 seconds", json.loads(body)["error"])
        harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_slowBody(self) -> None:
        """
        The deadline covers the body too: a POST whose declared body is
        not all sent in time is answered 408.
        """
        harness = _Harness()
        protocol, transport = harness.connect()
        protocol.dataReceived(
            b"POST /control/pause-all HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{"
        )
        harness.clock.advance(REQUEST_DEADLINE)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 408 "))
        self.assertTrue(transport.disconnecting)
        harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_keepAlivePolling(self) -> None:
        """
        A dashboard polling over one keep-alive connection every 2 s for
        longer than the deadline is answered every time and never closed:
        the deadline runs per request, not per connection.
        """
        harness = _Harness()
        protocol, transport = harness.connect()
        for _ in range(int(3 * REQUEST_DEADLINE / 2)):
            transport.clear()
            protocol.dataReceived(_GET)
            self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
            harness.clock.advance(2)
            self.assertFalse(transport.disconnecting)
        harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_splitRequestInTime(self) -> None:
        """
        A request sent in pieces, complete before the deadline, is answered
        and leaves no timer behind once the connection is lost.
        """
        harness = _Harness()
        protocol, transport = harness.connect()
        protocol.dataReceived(_GET[:10])
        harness.clock.advance(REQUEST_DEADLINE - 1)
        protocol.dataReceived(_GET[10:])
        harness.clock.advance(2)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
        self.assertFalse(transport.disconnecting)
        harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_channel(self) -> None:
        """
        The status site's channel is a L{StatusChannel}.
        """
        harness = _Harness()
        protocol, _ = harness.connect()
        self.assertIsInstance(protocol, StatusChannel)
        harness.close(protocol)
        harness.stop()


class ConnectionCapTests(SynchronousTestCase):
    """
    L{QuietSite} holds at most C{maxConnections} connections open.
    """

    def test_refusedPastCap(self) -> None:
        """
        Past the cap a connection is closed as soon as it is made, without
        a byte read or written; once one closes, a new one is served.
        """
        harness = _Harness(maxConnections=2)
        first, _ = harness.connect(1)
        second, _ = harness.connect(2)
        with capturedLogs():
            third, refused = harness.connect(3)
        self.assertNotIsInstance(third, StatusChannel)
        self.assertTrue(refused.disconnected)
        self.assertEqual(refused.value(), b"")
        self.assertEqual(harness.quiet.openConnections, 2)
        harness.close(first)
        self.assertEqual(harness.quiet.openConnections, 1)
        fourth, transport = harness.connect(4)
        fourth.dataReceived(_GET)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
        for protocol in (second, fourth):
            harness.close(protocol)
        self.assertEqual(harness.quiet.openConnections, 0)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_refusalsLoggedOncePerMinute(self) -> None:
        """
        Refusals are logged at warning level once a minute at most, each
        line counting the refusals since the last.
        """
        harness = _Harness(maxConnections=1)
        held, _ = harness.connect(1)
        with capturedLogs() as events:
            for _ in range(5):
                harness.connect(2)
                harness.clock.advance(1)
            harness.clock.advance(LOG_INTERVAL)
            harness.connect(3)
        lines = [formatEvent(e) for e in events if e["log_level"] >= LogLevel.info]
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("refused 1 connection(s)", lines[0])
        self.assertIn("refused 5 connection(s)", lines[1])
        self.assertIn("1 connections open", lines[1])
        self.assertTrue(all(e["log_level"] == LogLevel.warn for e in events
                            if e["log_level"] >= LogLevel.info))
        harness.close(held)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])


class FailuresCountTests(SynchronousTestCase):
    """
    C{/jobs/NAME/failures.json} says when its count is a lower bound.
    """

    def test_matchedExact(self) -> None:
        """
        C{matched_exact} is true for a job within the count limit, false
        (C{matched} being the limit) past it.
        """
        self.patch(memoryModule, "FAILURES_COUNT_LIMIT", 3)
        harness = _Harness()
        harness.progress.addJob("alpha")
        harness.store.recordOutcomes("alpha", [failed("A", str(n)) for n in range(3)])

        def page() -> dict[str, object]:
            protocol, transport = harness.connect()
            protocol.dataReceived(
                b"GET /jobs/alpha/failures.json HTTP/1.0\r\nHost: localhost\r\n\r\n"
            )
            document: dict[str, object] = json.loads(transport.value().partition(b"\r\n\r\n")[2])
            harness.close(protocol)
            return document

        first = page()
        self.assertEqual((first["matched"], first["matched_exact"]), (3, True))
        harness.store.recordOutcomes("alpha", [failed("A", "3")])
        second = page()
        self.assertEqual((second["matched"], second["matched_exact"]), (3, False))
        harness.stop()

    def test_pagesByNext(self) -> None:
        """
        Following each page's C{next} as C{after} reaches every failed
        message, past the count limit; a cursor not made by the site is a
        400 naming the parameter.
        """
        self.patch(memoryModule, "FAILURES_COUNT_LIMIT", 3)
        harness = _Harness()
        harness.progress.addJob("alpha")
        keys = [f"k{n}" for n in range(7)]
        harness.store.recordOutcomes("alpha", [failed("A/é", key) for key in keys])

        def get(query: bytes) -> tuple[bytes, dict[str, object]]:
            protocol, transport = harness.connect()
            protocol.dataReceived(
                b"GET /jobs/alpha/failures.json?" + query + b" HTTP/1.0\r\nHost: localhost\r\n\r\n"
            )
            head, _, body = transport.value().partition(b"\r\n\r\n")
            harness.close(protocol)
            return head, json.loads(body)

        seen: list[object] = []
        query = b"limit=2"
        while True:
            _, document = get(query)
            items = document["items"]
            assert isinstance(items, list)
            seen.extend(item["key"] for item in items)
            if document["next"] is None:
                break
            query = b"limit=2&after=" + str(document["next"]).encode("ascii")
            self.assertEqual(document["matched"], 3)
        self.assertEqual(seen, keys)
        head, error = get(b"after=bm90IGEgY3Vyc29y")
        self.assertIn(b" 400 ", head.split(b"\r\n")[0])
        self.assertIn("after:", str(error["error"]))
        harness.stop()
