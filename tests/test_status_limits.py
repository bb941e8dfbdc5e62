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
from typing import Callable

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocol, IPushProducer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from imapmig.progress import MigrationProgress
from imapmig.state import reports as stateReports
from imapmig.state.memory import MemoryStateStore
from imapmig.status._http import GRACE, REQUEST_DEADLINE, StatusChannel
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
    within L{REQUEST_DEADLINE} seconds of its accept (a keep-alive
    connection's later request: of its first octet).
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


class _Unanswered(Resource):
    """
    A leaf whose requests are never answered (a slow manifest), for the
    connections that are being answered.
    """

    isLeaf = True

    def render(self, request: Request) -> int:
        return NOT_DONE_YET


@implementer(IPushProducer)
class _Producer:
    """
    A streamed response's producer, calling its C{onResume} when resumed.
    """

    def __init__(self, onResume: Callable[[], None] | None) -> None:
        self.onResume = onResume

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        if self.onResume is not None:
            self.onResume()

    def stopProducing(self) -> None:
        pass


class _Streamed(Resource):
    """
    A leaf streaming a response that never ends (a manifest whose client
    does not read it), its producer registered; C{onResume} says, by
    channel, what resuming its producer does.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.onResume: dict[object, Callable[[], None]] = {}

    def render(self, request: Request) -> int:
        channel = request.channel
        request.registerProducer(_Producer(lambda: self.onResume.get(channel, _nothing)()), True)
        request.write(b"x")
        return NOT_DONE_YET


def _nothing() -> None:
    pass


class ConnectionCapTests(SynchronousTestCase):
    """
    L{QuietSite} holds at most C{maxConnections} connections open; a new
    one closes the one that waited longest without a request.
    """

    def test_silentClosedFromAccept(self) -> None:
        """
        A client that connects and never sends an octet is answered 408 and
        closed L{REQUEST_DEADLINE} seconds after the accept: the deadline
        does not wait for a first octet.
        """
        harness = _Harness()
        protocol, transport = harness.connect()
        harness.clock.advance(REQUEST_DEADLINE - 1)
        self.assertFalse(transport.disconnecting)
        harness.clock.advance(1)
        self.assertTrue(transport.disconnecting)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 408 "))
        harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_oldestSilentClosedForNewcomer(self) -> None:
        """
        With every slot held by a client that sent nothing, a new
        connection is served, and the oldest holder is aborted at once
        (its slot free before the reactor reports it lost).
        """
        harness = _Harness(maxConnections=2)
        first, firstTransport = harness.connect(1)
        second, secondTransport = harness.connect(2)
        harness.clock.advance(GRACE)
        with capturedLogs():
            third, transport = harness.connect(3)
        self.assertIsInstance(third, StatusChannel)
        self.assertTrue(firstTransport.disconnected)
        self.assertFalse(secondTransport.disconnecting)
        self.assertEqual(harness.quiet.openConnections, 2)
        third.dataReceived(_GET)
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
        for protocol in (first, second, third):
            harness.close(protocol)
        self.assertEqual(harness.quiet.openConnections, 0)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_idleKeepAliveFirst(self) -> None:
        """
        An idle keep-alive connection (its request answered) is closed to
        make room before an older one still without a request; a dripping
        one (part of a request sent) goes before a newer silent one.
        """
        harness = _Harness(maxConnections=3)
        dripping, drippingTransport = harness.connect(1)
        dripping.dataReceived(_GET[:5])
        silent, silentTransport = harness.connect(2)
        kept, keptTransport = harness.connect(3)
        kept.dataReceived(_GET)
        self.assertTrue(keptTransport.value().startswith(b"HTTP/1.1 200 "))
        harness.clock.advance(GRACE)
        with capturedLogs():
            fourth, _ = harness.connect(4)
            self.assertTrue(keptTransport.disconnected)
            self.assertFalse(drippingTransport.disconnecting or silentTransport.disconnecting)
            fifth, _ = harness.connect(5)
            self.assertTrue(drippingTransport.disconnected)
            self.assertFalse(silentTransport.disconnecting)
        for protocol in (dripping, silent, kept, fourth, fifth):
            harness.close(protocol)
        self.assertEqual(harness.quiet.openConnections, 0)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_keepAliveNextRequestIsReading(self) -> None:
        """
        A keep-alive connection that begins its next request is no longer
        idle: a connection idle since before it is closed first.
        """
        harness = _Harness(maxConnections=2)
        older, olderTransport = harness.connect(1)
        older.dataReceived(_GET)
        newer, newerTransport = harness.connect(2)
        newer.dataReceived(_GET)
        older.dataReceived(_GET[:5])
        harness.clock.advance(GRACE)
        with capturedLogs():
            third, _ = harness.connect(3)
        self.assertTrue(newerTransport.disconnected)
        self.assertFalse(olderTransport.disconnecting)
        for protocol in (older, newer, third):
            harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_refusedWhenAllAnswering(self) -> None:
        """
        A connection whose request is being answered is never closed for
        another: when twice the limit are, the newcomer is closed at once
        without a byte read or written; once one closes, a new one is
        served.
        """
        clock = MemoryReactorClock()
        site = QuietSite(_Unanswered(), reactor=clock, maxConnections=1)
        site.doStart()
        channels = []
        for port in (1, 2):
            protocol = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
            assert protocol is not None
            transport = StringTransport()
            protocol.makeConnection(transport)
            protocol.dataReceived(_GET)
            channels.append((protocol, transport))
        with capturedLogs():
            refused = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 3))
        assert refused is not None
        self.assertNotIsInstance(refused, StatusChannel)
        transport = StringTransport()
        refused.makeConnection(transport)
        self.assertTrue(transport.disconnected)
        self.assertEqual(transport.value(), b"")
        self.assertFalse(any(t.disconnecting for _, t in channels))
        channels[0][0].connectionLost(Failure(ConnectionDone()))
        served = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 4))
        self.assertIsInstance(served, StatusChannel)
        assert served is not None
        for protocol in (served, channels[1][0]):
            protocol.makeConnection(StringTransport())
            protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(site.openConnections, 0)
        site.doStop()
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_stalledReaderClosedForNewcomer(self) -> None:
        """
        A connection whose answer the client stopped reading (the
        transport paused the channel: a streamed manifest never ends
        meanwhile) may be closed for a newcomer after L{GRACE}, as an idle
        one is: holders that ask for a large download and never read it
        cannot fill the site.  One whose client reads again is protected
        again.
        """
        clock = MemoryReactorClock()
        stream = _Streamed()
        site = QuietSite(stream, reactor=clock, maxConnections=1)
        site.doStart()
        channels = []
        for port in (1, 2):
            protocol = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
            assert isinstance(protocol, StatusChannel)
            transport = StringTransport()
            protocol.makeConnection(transport)
            protocol.dataReceived(_GET)
            channels.append((protocol, transport))
        # The first client stops reading, then reads again; the second
        # stops reading, and when its transport resumes the channel, what
        # the response writes at once fills the buffer again (the
        # transport pauses the channel within its resume).
        channels[0][0].pauseProducing()
        channels[0][0].resumeProducing()
        second = channels[1][0]
        assert isinstance(second, StatusChannel)
        second.pauseProducing()
        stream.onResume[second] = second.pauseProducing
        second.resumeProducing()
        clock.advance(GRACE)
        with capturedLogs():
            served = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 3))
        self.assertIsInstance(served, StatusChannel)
        self.assertTrue(channels[1][1].disconnected)
        self.assertFalse(channels[0][1].disconnecting)
        assert served is not None
        served.makeConnection(StringTransport())
        for protocol in (served, channels[0][0], channels[1][0]):
            protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(site.openConnections, 0)
        site.doStop()
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_probesAnsweredUnderHold(self) -> None:
        """
        64 holders that send nothing or drip a byte at a time, each
        reopened as soon as it is closed, do not keep out a probe: each of
        100 probes is answered 200 even when the holders it displaced
        reconnect before its request arrives, each displacing another that
        reconnects in turn: a connection younger than L{GRACE} is not
        closed for another, and the site admits up to twice its limit
        rather than close one.
        """
        harness = _Harness(maxConnections=64)
        holders: list[tuple[IProtocol, StringTransport]] = []

        def hold() -> None:
            protocol, transport = harness.connect(1)
            if len(holders) % 2:
                protocol.dataReceived(b"G")
            holders.append((protocol, transport))

        def reopenClosed() -> None:
            # Each holder closed reconnects before the probe's request
            # arrives, closing another, which reconnects in turn, until
            # none is closed.
            while any(held[1].disconnecting for held in holders):
                for held in [held for held in holders if held[1].disconnecting]:
                    holders.remove(held)
                    harness.close(held[0])
                    hold()

        with capturedLogs():
            for _ in range(64):
                hold()
            answered = 0
            for _ in range(100):
                probe, transport = harness.connect(2)
                reopenClosed()
                probe.dataReceived(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answered += transport.value().startswith(b"HTTP/1.1 200 ")
                harness.close(probe)
                harness.clock.advance(1)
        self.assertEqual(answered, 100)
        self.assertLessEqual(harness.quiet.openConnections, 2 * 64)
        for protocol, _ in holders:
            harness.close(protocol)
        self.assertEqual(harness.quiet.openConnections, 0)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_youngNotClosed(self) -> None:
        """
        A connection younger than L{GRACE} is not closed for a new one: the
        new one is admitted beyond the limit, up to twice it; past that the
        connection waiting longest is closed, whatever its age.
        """
        harness = _Harness(maxConnections=2)
        opened = [harness.connect(n) for n in range(4)]
        self.assertFalse(any(t.disconnecting for _, t in opened))
        self.assertEqual(harness.quiet.openConnections, 4)
        with capturedLogs():
            opened.append(harness.connect(4))
        self.assertTrue(opened[0][1].disconnected)
        self.assertFalse(any(t.disconnecting for _, t in opened[1:]))
        self.assertEqual(harness.quiet.openConnections, 4)
        for protocol, _ in opened:
            harness.close(protocol)
        harness.stop()
        self.assertEqual(harness.clock.getDelayedCalls(), [])

    def test_closingsLoggedOncePerMinute(self) -> None:
        """
        Connections closed to make room, and refusals, are logged at
        warning level once a minute at most, each line counting those since
        the last.
        """
        harness = _Harness(maxConnections=1)
        held: list[IProtocol] = []
        with capturedLogs() as events:
            held.append(harness.connect(1)[0])
            for _ in range(5):
                harness.clock.advance(GRACE)
                held.append(harness.connect(2)[0])
            harness.clock.advance(LOG_INTERVAL)
            harness.clock.advance(GRACE)
            held.append(harness.connect(3)[0])
        lines = [formatEvent(e) for e in events if e["log_level"] >= LogLevel.info]
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("closed 1 connection(s)", lines[0])
        self.assertIn("closed 5 connection(s)", lines[1])
        self.assertIn("1 connections open", lines[1])
        self.assertTrue(all(e["log_level"] == LogLevel.warn for e in events
                            if e["log_level"] >= LogLevel.info))
        for protocol in held:
            harness.close(protocol)
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
        self.patch(stateReports, "FAILURES_COUNT_LIMIT", 3)
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
        self.patch(stateReports, "FAILURES_COUNT_LIMIT", 3)
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
