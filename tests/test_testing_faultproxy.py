"""
Tests for L{imapmig.testing.faultproxy}: every fault, driven octet by octet
with L{StringTransport}s, a L{MemoryReactorClock} and L{iosim}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost, ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.test.iosim import ConnectionCompleter, FakeTransport, connect
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.faultproxy import FaultProxy
from imapmig.testing.faults import (
    BOTH_WAYS,
    Close,
    CutLiteral,
    Direction,
    Discard,
    Drip,
    FiredFault,
    LiteralTracker,
    Reset,
    Stall,
)

TO_SERVER = Direction.TO_SERVER
TO_CLIENT = Direction.TO_CLIENT
UPSTREAM_PORT = 1143
_ADDRESS = IPv4Address("TCP", "127.0.0.1", 50143)


class _Transport(StringTransport):
    """
    A L{StringTransport} that records a half-close (C{loseWriteConnection}).
    """

    writeClosed = False

    def loseWriteConnection(self) -> None:
        self.writeClosed = True


class _Connection:
    """
    One connection through the proxy under test, both sides held by
    L{_Transport}s: C{client} is what the proxy writes to the client,
    C{server} what it writes to the server; C{fromClient} and C{fromServer}
    deliver octets to the proxy as if each side had sent them.
    """

    def __init__(
        self, proxy: FaultProxy, reactor: MemoryReactorClock, connect: bool = True
    ) -> None:
        self.reactor = reactor
        self.client = _Transport()
        self.server = _Transport()
        clientSide = proxy.factory().buildProtocol(_ADDRESS)
        assert clientSide is not None
        clientSide.makeConnection(self.client)
        self.clientSide: Any = clientSide
        self.serverSide: Any = None
        if connect:
            self.connectServer()

    def connectServer(self) -> None:
        """
        Complete the proxy's pending connection to the server.
        """
        host, port, factory, _, _ = self.reactor.tcpClients[-1]
        self.serverSide = factory.buildProtocol(None)
        self.serverSide.makeConnection(self.server)

    def fromClient(self, data: bytes) -> None:
        self.clientSide.dataReceived(data)

    def fromServer(self, data: bytes) -> None:
        self.serverSide.dataReceived(data)

    def toServer(self) -> bytes:
        """
        What the proxy wrote to the server so far, then forget it.
        """
        value = bytes(self.server.value())
        self.server.clear()
        return value

    def toClient(self) -> bytes:
        value = bytes(self.client.value())
        self.client.clear()
        return value

    def clientGone(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.clientSide.connectionLost(reason)

    def serverGone(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.serverSide.connectionLost(reason)


def _proxy(*faults: Any) -> tuple[FaultProxy, MemoryReactorClock]:
    reactor = MemoryReactorClock()
    return FaultProxy(reactor, reactor, "127.0.0.1", UPSTREAM_PORT, faults), reactor


def _aborted(transport: StringTransport) -> bool:
    """
    Whether C{abortConnection} was called (a reset), not only
    C{loseConnection} (a FIN).
    """
    return bool(transport.disconnected)


class LiteralTrackerTests(SynchronousTestCase):
    """
    L{LiteralTracker} finds the literals a client opens, wherever the reads
    split the stream, and never looks inside them.
    """

    def test_forms(self) -> None:
        """
        C{{n}}, C{{n+}}, C{{n-}} and C{~{n}} at the end of a line open a
        literal; each is reported with the offset of its first octet and
        its size.
        """
        tracker = LiteralTracker()
        stream = (
            b"a APPEND INBOX {3}\r\nabc b APPEND INBOX {2+}\r\nxy"
            b" c APPEND INBOX {1-}\r\nz d APPEND INBOX ~{4}\r\n\x00\x01\x02\x03\r\n"
        )
        tracker.feed(stream)
        self.assertEqual(
            tracker.opened,
            [
                (stream.index(b"abc"), 3),
                (stream.index(b"xy"), 2),
                (stream.index(b"z d"), 1),
                (stream.index(b"\x00"), 4),
            ],
        )

    def test_literalContentSkipped(self) -> None:
        """
        A line inside a literal that looks like a literal opening is message
        content, not an opening.
        """
        tracker = LiteralTracker()
        body = b"Subject: x\r\n\r\nnot an opening {5}\r\nmore\r\n"
        stream = b"a APPEND INBOX {%d}\r\n" % len(body) + body + b" {2}\r\nok\r\n"
        tracker.feed(stream)
        self.assertEqual(
            tracker.opened,
            [(stream.index(b"Subject"), len(body)), (stream.rindex(b"ok"), 2)],
        )

    def test_splitAnywhere(self) -> None:
        """
        Fed one octet at a time, the tracker finds the same literals at the
        same offsets as fed at once.
        """
        stream = b"a APPEND INBOX (\\Seen) {12+}\r\nHello {3}\r\n! b NOOP\r\nc APPEND X {1}\r\nq\r\n"
        whole = LiteralTracker()
        whole.feed(stream)
        split = LiteralTracker()
        for index in range(len(stream)):
            split.feed(stream[index : index + 1])
        self.assertEqual(split.opened, whole.opened)
        self.assertEqual(
            whole.opened, [(stream.index(b"Hello"), 12), (stream.index(b"q\r\n"), 1)]
        )

    def test_longLine(self) -> None:
        """
        A long line without an opening at its end opens nothing, and an
        opening at the end of a long line split across reads is found.
        """
        tracker = LiteralTracker()
        tracker.feed(b"a NOOP " + b"x" * 10_000)
        tracker.feed(b"y" * 10_000 + b" {7}")
        tracker.feed(b"\r\n")
        self.assertEqual(tracker.opened, [(len(b"a NOOP ") + 20_000 + len(b" {7}\r\n"), 7)])


class PassThroughTests(SynchronousTestCase):
    """
    Without faults, the proxy relays both ways unchanged and counts.
    """

    def test_relaysAndCounts(self) -> None:
        """
        What the client sends reaches the server and the reverse, octet for
        octet; the counters of the connection and of the proxy agree.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor)
        connection.fromServer(b"* OK ready\r\n")
        connection.fromClient(b"a LOGIN u p\r\n")
        connection.fromServer(b"a OK\r\n")
        self.assertEqual(connection.toClient(), b"* OK ready\r\na OK\r\n")
        self.assertEqual(connection.toServer(), b"a LOGIN u p\r\n")
        self.assertEqual(proxy.octets, {TO_SERVER: 13, TO_CLIENT: 18})
        self.assertEqual(proxy.relays[0].relayed, proxy.octets)
        self.assertEqual(proxy.connections, 1)
        self.assertEqual(proxy.fired, [])
        self.assertEqual(reactor.tcpClients[0][:2], ("127.0.0.1", UPSTREAM_PORT))

    def test_heldUntilServerConnects(self) -> None:
        """
        Until the server's connection is up, the client is not read from
        and what it sent is held; then it is relayed and reading resumes.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor, connect=False)
        self.assertEqual(connection.client.producerState, "paused")
        connection.fromClient(b"early")
        connection.connectServer()
        self.assertEqual(connection.toServer(), b"early")
        self.assertEqual(connection.client.producerState, "producing")

    def test_backpressure(self) -> None:
        """
        When the server's transport is full, the client is no longer read
        from, until it has drained; and the same the other way.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor)
        toServer: Any = connection.server.producer
        toClient: Any = connection.client.producer
        toServer.pauseProducing()
        self.assertEqual(connection.client.producerState, "paused")
        toServer.resumeProducing()
        self.assertEqual(connection.client.producerState, "producing")
        toClient.pauseProducing()
        self.assertEqual(connection.server.producerState, "paused")
        toClient.resumeProducing()
        self.assertEqual(connection.server.producerState, "producing")

    def test_retarget(self) -> None:
        """
        After L{FaultProxy.retarget}, new connections go to the new port.
        """
        proxy, reactor = _proxy()
        _Connection(proxy, reactor)
        proxy.retarget(2143)
        _Connection(proxy, reactor)
        self.assertEqual(
            [client[:2] for client in reactor.tcpClients],
            [("127.0.0.1", UPSTREAM_PORT), ("127.0.0.1", 2143)],
        )

    def test_throughIOSim(self) -> None:
        """
        Through the real protocols, endpoints and factories (connected in
        memory by L{iosim}), a client's octets reach a server that echoes
        them back, and the client receives them.
        """
        proxy, reactor = _proxy()

        class Echo(Protocol):
            def dataReceived(self, data: bytes) -> None:
                assert self.transport is not None
                self.transport.write(data.upper())

        received: list[bytes] = []

        class Client(Protocol):
            def dataReceived(self, data: bytes) -> None:
                received.append(data)

        reactor.listenTCP(UPSTREAM_PORT, Factory.forProtocol(Echo))
        clientSide = proxy.factory().buildProtocol(_ADDRESS)
        client = Client()
        assert clientSide is not None
        toProxy = connect(
            clientSide, FakeTransport(clientSide, True), client, FakeTransport(client, False)
        )
        toServer = ConnectionCompleter(reactor).succeedOnce()
        assert toServer is not None and client.transport is not None
        client.transport.write(b"hello through the proxy")
        toProxy.flush()
        toServer.flush()
        toProxy.flush()
        self.assertEqual(b"".join(received), b"HELLO THROUGH THE PROXY")
        self.assertEqual(proxy.octets, {TO_SERVER: 23, TO_CLIENT: 23})


class ResetAndCloseTests(SynchronousTestCase):
    """
    L{Reset} aborts, L{Close} closes, both after exactly N octets.
    """

    def test_resetAfterOctetsFromClient(self) -> None:
        """
        After exactly N octets from the client, both connections are aborted
        (not merely closed); nothing more is relayed either way; the fault is
        recorded and L{FaultProxy.whenFired} fires.
        """
        fault = Reset(TO_SERVER, 10)
        proxy, reactor = _proxy(fault)
        fired = proxy.whenFired()
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"0123456")
        self.assertNoResult(fired)
        connection.fromClient(b"789abcdef")
        connection.fromServer(b"late")
        self.assertEqual(connection.toServer(), b"0123456789")
        self.assertEqual(connection.toClient(), b"")
        self.assertTrue(_aborted(connection.client))
        self.assertTrue(_aborted(connection.server))
        self.successResultOf(fired)
        self.assertEqual(proxy.fired, [FiredFault(1, fault, 10, 0)])
        self.assertEqual(proxy.relays[0].receivedOctets, {TO_SERVER: 16, TO_CLIENT: 4})

    def test_resetAfterOctetsFromServer(self) -> None:
        """
        A reset counted on the server's octets fires after exactly that
        many reached the client.
        """
        proxy, reactor = _proxy(Reset(TO_CLIENT, 5))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"a NOOP\r\n")
        connection.fromServer(b"* OK hello\r\n")
        self.assertEqual(connection.toClient(), b"* OK ")
        self.assertEqual(connection.toServer(), b"a NOOP\r\n")
        self.assertTrue(_aborted(connection.client) and _aborted(connection.server))

    def test_resetAtZero(self) -> None:
        """
        A reset after 0 octets fires before the server has even answered:
        the client is aborted, and the server's connection, once made, too.
        """
        proxy, reactor = _proxy(Reset(TO_SERVER, 0))
        connection = _Connection(proxy, reactor, connect=False)
        connection.fromClient(b"x")
        self.assertTrue(_aborted(connection.client))
        connection.connectServer()
        self.assertEqual(connection.toServer(), b"")
        self.assertTrue(_aborted(connection.server))
        self.assertEqual(len(proxy.fired), 1)

    def test_closeAfterOctets(self) -> None:
        """
        L{Close} ends both connections in order (C{loseConnection}, not an
        abort) after exactly N octets.
        """
        proxy, reactor = _proxy(Close(TO_SERVER, 3))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"abcdef")
        self.assertEqual(connection.toServer(), b"abc")
        for transport in (connection.client, connection.server):
            self.assertTrue(transport.disconnecting)
            self.assertFalse(_aborted(transport))


class TargetingTests(SynchronousTestCase):
    """
    Faults for some connections, a number of times, changed at run time.
    """

    def test_kthConnectionOnly(self) -> None:
        """
        A fault for connection 2 leaves connections 1 and 3 alone.
        """
        proxy, reactor = _proxy(Reset(TO_SERVER, 2, connections=[2]))
        connections = [_Connection(proxy, reactor) for _ in range(3)]
        for connection in connections:
            connection.fromClient(b"abcd")
        self.assertEqual(
            [c.toServer() for c in connections], [b"abcd", b"ab", b"abcd"]
        )
        self.assertEqual([f.connection for f in proxy.fired], [2])

    def test_times(self) -> None:
        """
        A fault limited to 2 times fires on the first two connections that
        reach it, whichever they are, and never again.
        """
        proxy, reactor = _proxy(Reset(TO_SERVER, 4, times=2))
        connections = [_Connection(proxy, reactor) for _ in range(3)]
        connections[2].fromClient(b"1234")
        connections[0].fromClient(b"1234")
        connections[1].fromClient(b"1234")
        self.assertEqual([f.connection for f in proxy.fired], [3, 1])
        self.assertFalse(connections[1].server.disconnecting)

    def test_firstConnectionsOnceEach(self) -> None:
        """
        "Reset every connection once it has carried 200 KB, for the first 3
        connections": the fourth is left alone.
        """
        proxy, reactor = _proxy(Reset(TO_SERVER, 200_000, connections=range(1, 4)))
        connections = [_Connection(proxy, reactor) for _ in range(4)]
        for connection in connections:
            connection.fromClient(b"x" * 150_000)
            connection.fromClient(b"x" * 150_000)
        self.assertEqual(
            [len(c.toServer()) for c in connections], [200_000, 200_000, 200_000, 300_000]
        )

    def test_changedAtRunTime(self) -> None:
        """
        A fault set while a connection is open applies to it: one whose
        offset it has passed fires at once; clearing the faults stops them.
        """
        proxy, reactor = _proxy()
        first = _Connection(proxy, reactor)
        first.fromClient(b"0123456789")
        proxy.setFaults([Stall(TO_SERVER, 5)])
        self.assertEqual(len(proxy.fired), 1)
        self.assertEqual(first.client.producerState, "paused")
        proxy.setFaults([])
        second = _Connection(proxy, reactor)
        second.fromClient(b"0123456789")
        self.assertEqual(second.toServer(), b"0123456789")
        self.assertEqual(len(proxy.fired), 1)


class StallTests(SynchronousTestCase):
    """
    L{Stall} stops relaying and reading, keeping the connections open.
    """

    def test_bothWays(self) -> None:
        """
        After N octets from the client, nothing more is relayed either way,
        neither side is read from any more, and neither connection is
        closed.
        """
        proxy, reactor = _proxy(Stall(TO_SERVER, 4))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"abcdef")
        connection.fromServer(b"reply")
        self.assertEqual(connection.toServer(), b"abcd")
        self.assertEqual(connection.toClient(), b"")
        self.assertEqual(connection.client.producerState, "paused")
        self.assertEqual(connection.server.producerState, "paused")
        self.assertFalse(connection.client.disconnecting or connection.server.disconnecting)
        self.assertEqual(proxy.relays[0].relayed, {TO_SERVER: 4, TO_CLIENT: 0})
        fault = proxy.fired[0].fault
        assert isinstance(fault, Stall)
        self.assertEqual(fault.stalled, BOTH_WAYS)

    def test_oneWay(self) -> None:
        """
        A stall of the server's direction only still relays what the client
        sends.
        """
        proxy, reactor = _proxy(Stall(TO_CLIENT, 2, stalled=frozenset({TO_CLIENT})))
        connection = _Connection(proxy, reactor)
        connection.fromServer(b"* OK")
        connection.fromClient(b"a NOOP\r\n")
        self.assertEqual(connection.toClient(), b"* ")
        self.assertEqual(connection.toServer(), b"a NOOP\r\n")
        self.assertEqual(connection.server.producerState, "paused")
        self.assertEqual(connection.client.producerState, "producing")

    def test_clientLeavesWhileStalled(self) -> None:
        """
        When the client goes away during a stall, what it sent beyond the
        stall is dropped, the server sees the end of its input and is read
        from again, and the proxy is idle once the server has closed.
        """
        proxy, reactor = _proxy(Stall(TO_SERVER, 1))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"ab")
        idle = proxy.whenIdle()
        connection.clientGone(Failure(ConnectionLost()))
        self.assertEqual(connection.toServer(), b"a")
        self.assertTrue(connection.server.writeClosed)
        self.assertEqual(connection.server.producerState, "producing")
        self.assertNoResult(idle)
        connection.serverGone()
        self.successResultOf(idle)


class DiscardTests(SynchronousTestCase):
    """
    L{Discard} drops what goes one way, and keeps reading.
    """

    def test_dropsAndKeepsReading(self) -> None:
        """
        After exactly N octets from the client, what it sends is dropped
        (counted as received, not relayed) while it is still read from;
        replies still flow; once the client goes away the server sees the
        end of its input.
        """
        proxy, reactor = _proxy(Discard(TO_SERVER, 5))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"0123456789")
        connection.fromClient(b"more")
        connection.fromServer(b"reply")
        self.assertEqual(connection.toServer(), b"01234")
        self.assertEqual(connection.toClient(), b"reply")
        self.assertEqual(connection.client.producerState, "producing")
        self.assertEqual(proxy.relays[0].receivedOctets[TO_SERVER], 14)
        self.assertEqual(proxy.octets[TO_SERVER], 5)
        connection.clientGone()
        self.assertTrue(connection.server.writeClosed)


class DripTests(SynchronousTestCase):
    """
    L{Drip} relays one octet per interval, on the clock.
    """

    def test_oneOctetPerInterval(self) -> None:
        """
        After N octets, the server's reply reaches the client one octet per
        interval; the server is not read from while octets wait; once all
        have dripped nothing is left scheduled.
        """
        proxy, reactor = _proxy(Drip(TO_CLIENT, 2, interval=0.5))
        connection = _Connection(proxy, reactor)
        connection.fromServer(b"* OK")
        self.assertEqual(connection.toClient(), b"* ")
        self.assertEqual(connection.server.producerState, "paused")
        reactor.advance(0.4)
        self.assertEqual(connection.toClient(), b"")
        reactor.advance(0.1)
        self.assertEqual(connection.toClient(), b"O")
        reactor.advance(0.5)
        self.assertEqual(connection.toClient(), b"K")
        self.assertEqual(connection.server.producerState, "producing")
        self.assertEqual(reactor.getDelayedCalls(), [])
        connection.fromServer(b"\r\n")
        reactor.advance(0.5)
        reactor.advance(0.5)
        self.assertEqual(connection.toClient(), b"\r\n")
        self.assertEqual(proxy.octets[TO_CLIENT], 6)
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_closedWhileDripping(self) -> None:
        """
        A connection lost while octets wait to drip leaves no call behind.
        """
        proxy, reactor = _proxy(Drip(TO_SERVER, 0, interval=1.0))
        connection = _Connection(proxy, reactor)
        connection.fromClient(b"abc")
        self.assertEqual(len(reactor.getDelayedCalls()), 1)
        connection.clientGone()
        self.assertEqual(reactor.getDelayedCalls(), [])
        self.assertEqual(connection.toServer(), b"")
        self.assertTrue(connection.server.writeClosed)


class CutLiteralTests(SynchronousTestCase):
    """
    L{CutLiteral} relays half of a literal, then resets.
    """

    def test_secondLiteralCut(self) -> None:
        """
        The first half of the second literal the client opens is relayed,
        then both connections are aborted; a literal-like line inside the
        first literal does not count.
        """
        proxy, reactor = _proxy(CutLiteral(2))
        connection = _Connection(proxy, reactor)
        first = b"fake {4}\r\nline\r\n"
        second = b"0123456789"
        stream = (
            b"a APPEND INBOX {%d+}\r\n" % len(first)
            + first
            + b" {%d+}\r\n" % len(second)
            + second
            + b"\r\n"
        )
        for index in range(0, len(stream), 7):
            connection.fromClient(stream[index : index + 7])
        self.assertEqual(connection.toServer(), stream[: stream.index(second) + 5])
        self.assertTrue(_aborted(connection.client) and _aborted(connection.server))
        self.assertEqual([f.fault for f in proxy.fired], [CutLiteral(2)])


class EndingTests(SynchronousTestCase):
    """
    How the end of one side is passed to the other, and when the proxy is
    idle.
    """

    def test_clientLeavesServerFinishes(self) -> None:
        """
        When the client closes, the server sees the end of its input (a
        half-close, not an abort) and the proxy stays busy until the server
        closes; what the server still sends is dropped.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor)
        idle = proxy.whenIdle()
        connection.clientGone(Failure(ConnectionLost()))
        self.assertTrue(connection.server.writeClosed)
        self.assertFalse(connection.server.disconnecting)
        connection.fromServer(b"* BYE\r\n")
        self.assertEqual(connection.toClient(), b"")
        self.assertNoResult(idle)
        connection.serverGone()
        self.successResultOf(idle)
        self.assertEqual(proxy.closedByServer, 0)

    def test_serverClosesCleanly(self) -> None:
        """
        A server that closes its connection in order has the client's closed
        in order.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor)
        connection.serverGone()
        self.assertTrue(connection.client.disconnecting)
        self.assertFalse(_aborted(connection.client))
        self.assertEqual(proxy.closedByServer, 1)

    def test_serverReset(self) -> None:
        """
        A server whose connection is reset has the client's aborted.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor)
        connection.serverGone(Failure(ConnectionLost()))
        self.assertTrue(_aborted(connection.client))
        self.assertEqual(proxy.closedByServer, 1)

    def test_serverUnreachable(self) -> None:
        """
        When the server cannot be reached, the client's connection is
        aborted and the proxy is idle once the client's is gone.
        """
        proxy, reactor = _proxy()
        connection = _Connection(proxy, reactor, connect=False)
        _, _, factory, _, _ = reactor.tcpClients[0]
        factory.clientConnectionFailed(reactor.connectors[0], Failure(ConnectionRefusedError()))
        self.assertTrue(_aborted(connection.client))
        idle = proxy.whenIdle()
        self.assertNoResult(idle)
        connection.clientGone(Failure(ConnectionLost()))
        self.successResultOf(idle)

    def test_events(self) -> None:
        """
        L{FaultProxy.whenConnections} and L{FaultProxy.whenOctets} fire when
        their count is reached, not before, and at once when it already is.
        """
        proxy, reactor = _proxy()
        second = proxy.whenConnections(2)
        tenToServer = proxy.whenOctets(TO_SERVER, 10)
        connection = _Connection(proxy, reactor)
        self.assertNoResult(second)
        connection.fromClient(b"123456789")
        self.assertNoResult(tenToServer)
        connection.fromClient(b"0")
        self.successResultOf(tenToServer)
        _Connection(proxy, reactor)
        self.successResultOf(second)
        self.successResultOf(proxy.whenOctets(TO_SERVER, 5))

    def test_stopAbortsEverything(self) -> None:
        """
        L{FaultProxy.stop} aborts every open connection and completes once
        they are closed.
        """
        proxy, reactor = _proxy(Stall(TO_SERVER, 0))
        connection = _Connection(proxy, reactor)
        stopping = Deferred.fromCoroutine(proxy.stop())
        self.assertTrue(_aborted(connection.client) and _aborted(connection.server))
        connection.clientGone(Failure(ConnectionLost()))
        connection.serverGone(Failure(ConnectionLost()))
        self.successResultOf(stopping)
