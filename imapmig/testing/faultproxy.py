# -*- test-case-name: tests.test_testing_faultproxy -*-
"""
A fault-injecting TCP proxy between imapmig and a real server, for the
tests that prove imapmig survives a bad network.

L{FaultProxy} listens on loopback and relays every connection it accepts to
an upstream server (a private Dovecot), octet for octet, until one of its
L{Fault}s fires on that connection:

  - L{Reset}: after N octets in one direction, both connections are aborted
    (the peers see C{ECONNRESET}).
  - L{Close}: after N octets, both connections are closed in order (FIN).
  - L{Stall}: after N octets, relaying stops in one or both directions while
    the sockets stay open; the proxy stops reading them (C{pauseProducing}),
    so the kernel buffers fill and the writers really block.
  - L{Drip}: after N octets, one direction is relayed one octet per
    interval, on the injected clock.
  - L{Discard}: after N octets, what goes in one direction is read and
    dropped (a black hole); the connections stay open, and the proxy still
    notices when the sender goes away.
  - L{CutLiteral}: the first half of the octets of the n-th literal the
    client opens (C{{size}} or C{{size+}} at the end of a line) are relayed,
    then both connections are aborted.

A fault can be limited to some connections (by their number, counted from 1
in the order they were accepted) and to a number of firings in all, so that
the reconnection after it gets through; the test may replace the faults at
any time (L{FaultProxy.setFaults}).  The counters (connections, octets each
way, faults fired) and the L{Deferred}s waiting on them
(L{FaultProxy.whenOctets}, L{FaultProxy.whenFired},
L{FaultProxy.whenIdle}...) let a test wait for an event instead of a delay
and check that a fault really happened.

Octets are counted when the proxy hands them to the transport of the other
side.  A reset first gives Twisted's pending writes to the kernel, as far as
it takes them; what the kernel had not yet delivered is lost with the
connection, as on a real network.

When the client goes away (its process killed, or it closed the
connection), the server sees the end of its input (a FIN) and the proxy waits
for the server to close its side: a test waiting on L{FaultProxy.whenIdle}
then knows the server has finished with every connection.

The protocols are thin: all decisions are taken in L{ConnectionRelay}, one
per accepted connection, which a unit test drives with
L{twisted.internet.testing.StringTransport}s and a
L{twisted.internet.task.Clock}.
"""

from __future__ import annotations

import math
import re
import socket
from enum import Enum
from typing import Callable, Container, Iterable, Protocol as TypingProtocol, Union, cast

from attrs import field, frozen
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IListeningPort,
    IProtocolFactory,
    IPushProducer,
    IReactorTCP,
    IReactorTime,
    ISystemHandle,
    IWriteDescriptor,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

_LITERAL_OPENING = re.compile(rb"~?\{(\d+)[+-]?\}\r\n\Z")
_LINE_TAIL = 64
"""
Octets of an unfinished line kept to recognise a literal opening at its end:
more than C{~{4294967295+}} and its CRLF.
"""


class Direction(Enum):
    """
    Which way octets travel through the proxy.
    """

    TO_SERVER = "client to server"
    TO_CLIENT = "server to client"

    @property
    def reverse(self) -> Direction:
        """
        The other direction.
        """
        return Direction.TO_CLIENT if self is Direction.TO_SERVER else Direction.TO_SERVER


BOTH_WAYS = frozenset(Direction)


def _connectionNumbers(value: Iterable[int] | None) -> Container[int] | None:
    """
    Keep L{None} and a L{range} as they are; freeze any other collection, so
    that a fault stays hashable.
    """
    if value is None or isinstance(value, range):
        return value
    return frozenset(value)


@frozen
class Reset:
    """
    Abort both connections once C{afterOctets} octets went in C{direction}.

    @ivar connections: the numbers (from 1, in the order accepted) of the
        connections it applies to; every one when L{None}.
    @ivar times: on how many connections in all it may fire; no limit when
        L{None}.
    """

    direction: Direction
    afterOctets: int
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


@frozen
class Close:
    """
    Close both connections in order (FIN, after what was relayed) once
    C{afterOctets} octets went in C{direction}.  C{connections} and
    C{times} as for L{Reset}.
    """

    direction: Direction
    afterOctets: int
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


@frozen
class Stall:
    """
    Stop relaying the directions in C{stalled} once C{afterOctets} octets
    went in C{direction}, and stop reading their sources; the connections
    stay open.  C{connections} and C{times} as for L{Reset}.
    """

    direction: Direction
    afterOctets: int
    stalled: frozenset[Direction] = BOTH_WAYS
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


@frozen
class Drip:
    """
    Relay C{direction} one octet per C{interval} seconds once C{afterOctets}
    octets went that way.  C{connections} and C{times} as for L{Reset}.
    """

    direction: Direction
    afterOctets: int
    interval: float = 1.0
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


@frozen
class Discard:
    """
    Once C{afterOctets} octets went in C{direction}, read and drop what
    comes that way; the connections stay open.  C{connections} and
    C{times} as for L{Reset}.
    """

    direction: Direction
    afterOctets: int
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


@frozen
class CutLiteral:
    """
    Relay the first half of the octets of the C{literal}-th literal (from
    1) the client opens on a connection, then abort both connections.
    C{connections} and C{times} as for L{Reset}.
    """

    literal: int
    connections: Container[int] | None = field(default=None, converter=_connectionNumbers)
    times: int | None = None


Fault = Union[Reset, Close, Stall, Drip, Discard, CutLiteral]


@frozen
class FiredFault:
    """
    A fault that fired.

    @ivar connection: the number of the connection it fired on.
    @ivar toServer: the octets relayed to the server on that connection
        when it fired.
    @ivar toClient: likewise to the client.
    """

    connection: int
    fault: Fault
    toServer: int
    toClient: int


class LiteralTracker:
    """
    Follows the octets a client sends and finds its literals: a line ending
    with C{{size}}, C{{size+}} or C{{size-}} (C{~} in front for a binary
    literal) opens one, whose C{size} octets are skipped, never scanned.

    @ivar opened: the literals found, in order: the offset of each one's
        first octet in the stream, and its size.
    """

    def __init__(self) -> None:
        self.opened: list[tuple[int, int]] = []
        self._offset = 0
        self._inLiteral = 0
        self._lineTail = b""

    def feed(self, data: bytes) -> None:
        """
        Follow the next octets of the stream.
        """
        position = 0
        end = len(data)
        while position < end:
            if self._inLiteral:
                taken = min(self._inLiteral, end - position)
                self._inLiteral -= taken
                position += taken
                continue
            newline = data.find(b"\n", position)
            if newline < 0:
                self._lineTail = (self._lineTail + data[position:])[-_LINE_TAIL:]
                break
            start = max(position, newline + 1 - _LINE_TAIL)
            lineEnd = data[start : newline + 1]
            if start == position:
                lineEnd = self._lineTail + lineEnd
            self._lineTail = b""
            position = newline + 1
            match = _LITERAL_OPENING.search(lineEnd)
            if match is not None:
                size = int(match.group(1))
                self.opened.append((self._offset + position, size))
                self._inLiteral = size
        self._offset += end


class RelayTransport(TypingProtocol):
    """
    What a L{ConnectionRelay} needs of each side's transport: Twisted's TCP
    transport, or a L{twisted.internet.testing.StringTransport} with
    C{loseWriteConnection}.
    """

    def write(self, data: bytes) -> None: ...

    def loseConnection(self) -> None: ...

    def abortConnection(self) -> None: ...

    def loseWriteConnection(self) -> None: ...

    def pauseProducing(self) -> None: ...

    def resumeProducing(self) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...


class _Mode(Enum):
    PASS = "pass"
    STALLED = "stalled"
    DRIPPING = "dripping"
    DISCARDING = "discarding"


@implementer(IPushProducer)
class _SinkPressure:
    """
    Registered with the transport one direction writes to: Twisted pauses it
    when that transport's buffer is full, resumes it when it has drained.
    """

    def __init__(self, relay: ConnectionRelay, direction: Direction) -> None:
        self._relay = relay
        self._direction = direction

    def pauseProducing(self) -> None:
        self._relay.sinkFull(self._direction, True)

    def resumeProducing(self) -> None:
        self._relay.sinkFull(self._direction, False)

    def stopProducing(self) -> None:
        pass


class ConnectionRelay:
    """
    One client connection and its connection to the server: relays what each
    side sends to the other and fires the proxy's faults on it.

    @ivar number: the connection's number, from 1, in the order accepted.
    @ivar relayed: the octets relayed each way.
    @ivar receivedOctets: the octets read from each side, by the direction
        they were going.
    @ivar fired: the faults fired on this connection.
    """

    def __init__(
        self, proxy: FaultProxy, number: int, clock: IReactorTime, client: RelayTransport
    ) -> None:
        self.number = number
        self.relayed = {d: 0 for d in Direction}
        self.receivedOctets = {d: 0 for d in Direction}
        self.fired: list[Fault] = []
        self._proxy = proxy
        self._clock = clock
        self._ends: dict[Direction, RelayTransport | None] = {
            Direction.TO_CLIENT: client,
            Direction.TO_SERVER: None,
        }
        self._held = {d: bytearray() for d in Direction}
        self._modes = {d: _Mode.PASS for d in Direction}
        self._dripIntervals = {d: 1.0 for d in Direction}
        self._dripCalls: dict[Direction, IDelayedCall | None] = {d: None for d in Direction}
        self._full = {d: False for d in Direction}
        self._paused = {d: False for d in Direction}
        self._literals = LiteralTracker()
        self._relaying = True
        self._clientOpen = True
        self._serverOpen = False
        self._serverPending = True
        client.registerProducer(_SinkPressure(self, Direction.TO_CLIENT), True)
        self._updateReading(Direction.TO_SERVER)

    def __repr__(self) -> str:
        return (
            f"<ConnectionRelay #{self.number} to server {self.relayed[Direction.TO_SERVER]}"
            f" to client {self.relayed[Direction.TO_CLIENT]}>"
        )

    @property
    def ended(self) -> bool:
        """
        Whether both connections are closed (or the server's never opened).
        """
        return not (self._clientOpen or self._serverOpen or self._serverPending)

    # -- events from the protocols ------------------------------------------

    def serverConnected(self, server: RelayTransport) -> None:
        """
        The connection to the server is up: relay what the client sent
        meanwhile, unless the client has gone already.
        """
        self._serverPending = False
        self._serverOpen = True
        self._ends[Direction.TO_SERVER] = server
        server.registerProducer(_SinkPressure(self, Direction.TO_SERVER), True)
        if not (self._relaying and self._clientOpen):
            # A fault fired, or the client left, before the server answered.
            _reset(server)
            return
        self._pump(Direction.TO_SERVER)
        self._updateReading(Direction.TO_CLIENT)

    def serverUnreachable(self, reason: Failure) -> None:
        """
        The connection to the server could not be made: abort the client's,
        as a refused connection would have ended it.
        """
        self._serverPending = False
        self._relaying = False
        client = self._ends[Direction.TO_CLIENT]
        if self._clientOpen and client is not None:
            client.abortConnection()
        self._checkEnded()

    def received(self, direction: Direction, data: bytes) -> None:
        """
        C{data} arrived, going in C{direction}.
        """
        self.receivedOctets[direction] += len(data)
        if not self._relaying or self._modes[direction] is _Mode.DISCARDING:
            return
        if direction is Direction.TO_SERVER:
            self._literals.feed(data)
        self._held[direction] += data
        self._pump(direction)

    def sinkFull(self, direction: Direction, full: bool) -> None:
        """
        The transport C{direction} writes to is full (or no longer is).
        """
        self._full[direction] = full
        self._updateReading(direction)

    def clientLost(self, reason: Failure) -> None:
        """
        The client's connection is closed.  The server then sees the end of
        its input (what was held back by a stall or a drip is dropped), and
        the server's connection stays open, read from and its data dropped,
        until the server closes it.
        """
        self._clientOpen = False
        self._ends[Direction.TO_CLIENT] = None
        self._cancelDrips()
        server = self._ends[Direction.TO_SERVER]
        if self._relaying and server is not None and self._serverOpen:
            self._relaying = False
            server.loseWriteConnection()
            if self._paused[Direction.TO_CLIENT]:
                self._paused[Direction.TO_CLIENT] = False
                server.resumeProducing()
        self._relaying = False
        self._checkEnded()

    def serverLost(self, reason: Failure) -> None:
        """
        The server's connection is closed: close the client's after what was
        relayed, or abort it when the server's connection was reset.
        """
        self._serverOpen = False
        self._ends[Direction.TO_SERVER] = None
        self._cancelDrips()
        client = self._ends[Direction.TO_CLIENT]
        if self._relaying and client is not None and self._clientOpen:
            self._proxy.closedByServer += 1
            if reason.check(ConnectionDone):
                client.loseConnection()
            else:
                _reset(client)
        self._relaying = False
        self._checkEnded()

    def replan(self) -> None:
        """
        The proxy's faults changed: fire those already due, and relay on.
        """
        for direction in Direction:
            self._pump(direction)

    def abort(self) -> None:
        """
        Abort both connections, e.g. when the test ends.
        """
        self._relaying = False
        self._cancelDrips()
        for end in self._ends.values():
            if end is not None:
                _reset(end)

    # -- relaying ------------------------------------------------------------

    def _pump(self, direction: Direction) -> None:
        """
        Relay what C{direction} holds as far as its mode allows.
        """
        if self._modes[direction] is _Mode.PASS:
            self._forward(direction, math.inf, _Mode.PASS)
        else:
            while self._fireDue():
                pass
        self._scheduleDrip(direction)
        self._updateReading(direction)

    def _forward(self, direction: Direction, limit: float, mode: _Mode) -> None:
        """
        Relay up to C{limit} held octets in C{direction} while it stays in
        C{mode}, stopping at each octet where a fault is due to fire it.
        """
        held = self._held[direction]
        while True:
            if self._fireDue():
                continue
            sink = self._ends[direction]
            if (
                not self._relaying
                or sink is None
                or self._modes[direction] is not mode
                or not held
                or limit <= 0
            ):
                return
            count = int(min(len(held), limit, self._nextTrigger(direction) - self.relayed[direction]))
            chunk = bytes(held[:count])
            del held[:count]
            sink.write(chunk)
            self.relayed[direction] += count
            limit -= count
            self._proxy.octetsRelayed(direction, count)

    def _triggers(self) -> list[tuple[Fault, Direction, int]]:
        """
        The faults that may still fire on this connection, each with the
        direction and offset where it fires; a L{CutLiteral} whose literal
        has not been opened yet is not among them.
        """
        result: list[tuple[Fault, Direction, int]] = []
        for fault in self._proxy.pendingFaults(self):
            if isinstance(fault, CutLiteral):
                if len(self._literals.opened) < fault.literal:
                    continue
                start, size = self._literals.opened[fault.literal - 1]
                result.append((fault, Direction.TO_SERVER, start + size // 2))
            else:
                result.append((fault, fault.direction, fault.afterOctets))
        return result

    def _nextTrigger(self, direction: Direction) -> float:
        """
        The offset in C{direction} where the next fault fires.
        """
        return min(
            (o for _, d, o in self._triggers() if d is direction and o > self.relayed[d]),
            default=math.inf,
        )

    def _fireDue(self) -> bool:
        """
        Fire the faults whose offset has been reached.

        @return: whether any fired.
        """
        if not self._relaying:
            return False
        for fault, direction, offset in self._triggers():
            if offset <= self.relayed[direction]:
                self._fire(fault)
                return True
        return False

    def _fire(self, fault: Fault) -> None:
        self.fired.append(fault)
        self._proxy.faultFired(self, fault)
        if isinstance(fault, (Reset, CutLiteral)):
            self.abort()
        elif isinstance(fault, Close):
            self._relaying = False
            self._cancelDrips()
            for end in self._ends.values():
                if end is not None:
                    end.loseConnection()
        elif isinstance(fault, Stall):
            for direction in fault.stalled:
                self._modes[direction] = _Mode.STALLED
                self._cancelDrip(direction)
                self._updateReading(direction)
        elif isinstance(fault, Discard):
            self._modes[fault.direction] = _Mode.DISCARDING
            self._cancelDrip(fault.direction)
            self._held[fault.direction].clear()
            self._updateReading(fault.direction)
        else:
            self._modes[fault.direction] = _Mode.DRIPPING
            self._dripIntervals[fault.direction] = fault.interval
            self._scheduleDrip(fault.direction)
            self._updateReading(fault.direction)

    # -- reading and dripping ----------------------------------------------

    def _updateReading(self, direction: Direction) -> None:
        """
        Read the source of C{direction} only while what it sends can go on
        (or is discarded): never while stalled, while octets wait to drip
        or to be relayed, or while the other side's buffer is full.
        """
        if not self._relaying:
            return
        source = self._ends[direction.reverse]
        if source is None:
            return
        mode = self._modes[direction]
        held = bool(self._held[direction])
        if mode is _Mode.STALLED:
            pause = True
        elif mode is _Mode.DISCARDING:
            pause = False
        elif mode is _Mode.DRIPPING:
            pause = held
        else:
            pause = held or self._full[direction] or self._ends[direction] is None
        if pause != self._paused[direction]:
            self._paused[direction] = pause
            if pause:
                source.pauseProducing()
            else:
                source.resumeProducing()

    def _scheduleDrip(self, direction: Direction) -> None:
        if (
            self._relaying
            and self._modes[direction] is _Mode.DRIPPING
            and self._held[direction]
            and self._dripCalls[direction] is None
        ):
            self._dripCalls[direction] = self._clock.callLater(
                self._dripIntervals[direction], self._drip, direction
            )

    def _drip(self, direction: Direction) -> None:
        self._dripCalls[direction] = None
        self._forward(direction, 1, _Mode.DRIPPING)
        self._scheduleDrip(direction)
        self._updateReading(direction)

    def _cancelDrip(self, direction: Direction) -> None:
        call = self._dripCalls[direction]
        if call is not None:
            self._dripCalls[direction] = None
            call.cancel()

    def _cancelDrips(self) -> None:
        for direction in Direction:
            self._cancelDrip(direction)

    def _checkEnded(self) -> None:
        if self.ended:
            self._proxy.relayEnded(self)


def _reset(transport: RelayTransport) -> None:
    """
    Abort C{transport}'s connection (the peer sees a reset), after handing
    the kernel what Twisted still holds of what was written to it, as far
    as the kernel takes it: Twisted writes on the next reactor turn, and an
    abort drops its buffer.
    """
    if IWriteDescriptor.providedBy(transport) and not getattr(transport, "disconnected", True):
        cast(IWriteDescriptor, transport).doWrite()
    transport.abortConnection()


class _ClientSide(Protocol):
    """
    A connection the proxy accepted: hands everything to its relay.
    """

    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy
        self._relay: ConnectionRelay | None = None

    def connectionMade(self) -> None:
        self._proxy.tune(self.transport)
        self._relay = self._proxy.accepted(cast(RelayTransport, self.transport))

    def dataReceived(self, data: bytes) -> None:
        assert self._relay is not None
        self._relay.received(Direction.TO_SERVER, data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        assert self._relay is not None
        self._relay.clientLost(reason)


class _ServerSide(Protocol):
    """
    The proxy's connection to the server: hands everything to its relay.
    """

    def __init__(self, proxy: FaultProxy, relay: ConnectionRelay) -> None:
        self._proxy = proxy
        self._relay = relay

    def connectionMade(self) -> None:
        self._proxy.tune(self.transport)
        self._relay.serverConnected(cast(RelayTransport, self.transport))

    def dataReceived(self, data: bytes) -> None:
        self._relay.received(Direction.TO_CLIENT, data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._relay.serverLost(reason)


class _ClientFactory(Factory):
    def __init__(self, proxy: FaultProxy) -> None:
        self._proxy = proxy

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        return _ClientSide(self._proxy)


class FaultProxy:
    """
    A TCP proxy that relays to C{host}:C{port} and injects faults; see the
    module's docstring.

    @ivar upstream: the server's address, C{(host, port)}; a new connection
        goes where it points when accepted (L{retarget} changes it).
    @ivar connections: how many connections were accepted.
    @ivar octets: the octets relayed each way, over every connection.
    @ivar fired: every fault fired, in order.
    @ivar closedByServer: how many connections the server ended (closed
        or reset) while the client's was open, no fault of the proxy's
        having ended them first; an IMAP server closes first after LOGOUT
        too.
    @ivar relays: every connection's relay, in the order accepted.
    """

    def __init__(
        self,
        reactor: IReactorTCP,
        clock: IReactorTime,
        host: str,
        port: int,
        faults: Iterable[Fault] = (),
        socketBuffer: int | None = None,
    ) -> None:
        """
        @param reactor: connects to the server and listens.
        @param clock: paces drips.
        @param host: the server's IPv4 address.
        @param port: the server's port.
        @param faults: the faults, in the order they are tried when several
            are due at the same octet.
        @param socketBuffer: when given, the size in octets of the kernel's
            receive and send buffers of each of the proxy's sockets, instead
            of loopback's autotuned megabytes: a stall then fills the
            buffers, and blocks the writers, after that much rather than
            after the whole migration.
        """
        self.upstream = (host, port)
        self.socketBuffer = socketBuffer
        self.connections = 0
        self.octets = {d: 0 for d in Direction}
        self.fired: list[FiredFault] = []
        self.closedByServer = 0
        self.relays: list[ConnectionRelay] = []
        self._reactor = reactor
        self._clock = clock
        self._faults: tuple[Fault, ...] = tuple(faults)
        self._firings: dict[Fault, int] = {}
        self._open: set[ConnectionRelay] = set()
        self._waiters: list[tuple[Callable[[], bool], Deferred[None]]] = []
        self._listening: IListeningPort | None = None

    def __repr__(self) -> str:
        return (
            f"<FaultProxy to {self.upstream[0]}:{self.upstream[1]}: {self.connections}"
            f" connections, {self.octets[Direction.TO_SERVER]} octets to the server,"
            f" {self.octets[Direction.TO_CLIENT]} to the client, {len(self.fired)} faults fired>"
        )

    # -- what a test controls ------------------------------------------------

    @property
    def faults(self) -> tuple[Fault, ...]:
        """
        The faults in force.
        """
        return self._faults

    def setFaults(self, faults: Iterable[Fault]) -> None:
        """
        Replace the faults, for new connections and open ones alike: a fault
        whose offset an open connection has passed fires at once.  How many
        times a fault fired is remembered by its value.
        """
        self._faults = tuple(faults)
        for relay in list(self._open):
            relay.replan()

    def retarget(self, port: int, host: str | None = None) -> None:
        """
        Relay the next connections to C{port} (on C{host}, or the same host),
        e.g. a server restarted on another port.
        """
        self.upstream = (self.upstream[0] if host is None else host, port)

    def factory(self) -> IProtocolFactory:
        """
        The factory of the protocol for the connections it accepts.
        """
        return _ClientFactory(self)

    async def listen(self, interface: str = "127.0.0.1") -> int:
        """
        Listen on a free port of C{interface}.

        @return: the port.
        """
        endpoint = TCP4ServerEndpoint(self._reactor, 0, interface=interface)
        self._listening = await endpoint.listen(self.factory())
        return cast(IPv4Address, self._listening.getHost()).port

    async def stop(self) -> None:
        """
        Stop listening and abort every open connection.
        """
        listening, self._listening = self._listening, None
        for relay in list(self._open):
            relay.abort()
        if listening is not None:
            stopping = listening.stopListening()
            if stopping is not None:
                await stopping
        await self.whenIdle()

    # -- events to wait for ------------------------------------------------

    def whenOctets(self, direction: Direction, total: int) -> Deferred[None]:
        """
        Fire once C{total} octets in all have been relayed in C{direction}.
        """
        return self._when(lambda: self.octets[direction] >= total)

    def whenFired(self, count: int = 1) -> Deferred[None]:
        """
        Fire once C{count} faults in all have fired.
        """
        return self._when(lambda: len(self.fired) >= count)

    def whenConnections(self, count: int) -> Deferred[None]:
        """
        Fire once C{count} connections in all have been accepted.
        """
        return self._when(lambda: self.connections >= count)

    def whenIdle(self) -> Deferred[None]:
        """
        Fire once no connection is open: both sides of every accepted one are
        closed.
        """
        return self._when(lambda: not self._open)

    def _when(self, condition: Callable[[], bool]) -> Deferred[None]:
        if condition():
            return succeed(None)
        waiting: Deferred[None] = Deferred()
        self._waiters.append((condition, waiting))
        return waiting

    def _wake(self) -> None:
        if not self._waiters:
            return
        ready = [(c, d) for c, d in self._waiters if c()]
        if ready:
            self._waiters = [(c, d) for c, d in self._waiters if (c, d) not in ready]
            for _, waiting in ready:
                waiting.callback(None)

    # -- called by the protocols and the relays ------------------------------

    def tune(self, transport: object) -> None:
        """
        Set the socket buffers of a new connection's socket (see
        C{socketBuffer}), when asked to and it has a socket.
        """
        if self.socketBuffer is None or not ISystemHandle.providedBy(transport):
            return
        handle = transport.getHandle()
        if isinstance(handle, socket.socket):
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                handle.setsockopt(socket.SOL_SOCKET, option, self.socketBuffer)

    def accepted(self, client: RelayTransport) -> ConnectionRelay:
        """
        A client connected: start relaying it to the server.

        @param client: its transport.
        @return: its relay.
        """
        self.connections += 1
        relay = ConnectionRelay(self, self.connections, self._clock, client)
        self.relays.append(relay)
        self._open.add(relay)
        host, port = self.upstream
        connecting = TCP4ClientEndpoint(self._reactor, host, port).connect(
            Factory.forProtocol(lambda: _ServerSide(self, relay))
        )
        connecting.addErrback(relay.serverUnreachable)
        self._wake()
        return relay

    def pendingFaults(self, relay: ConnectionRelay) -> list[Fault]:
        """
        The faults that may still fire on C{relay}'s connection: those that
        apply to it, have not fired on it, and have firings left.
        """
        return [
            fault
            for fault in self._faults
            if (fault.connections is None or relay.number in fault.connections)
            and fault not in relay.fired
            and (fault.times is None or self._firings.get(fault, 0) < fault.times)
        ]

    def faultFired(self, relay: ConnectionRelay, fault: Fault) -> None:
        """
        Count C{fault}, which fired on C{relay}'s connection.
        """
        self._firings[fault] = self._firings.get(fault, 0) + 1
        self.fired.append(
            FiredFault(
                connection=relay.number,
                fault=fault,
                toServer=relay.relayed[Direction.TO_SERVER],
                toClient=relay.relayed[Direction.TO_CLIENT],
            )
        )
        self._wake()

    def octetsRelayed(self, direction: Direction, count: int) -> None:
        """
        Count C{count} octets relayed in C{direction}.
        """
        self.octets[direction] += count
        self._wake()

    def relayEnded(self, relay: ConnectionRelay) -> None:
        """
        Both of C{relay}'s connections are closed.
        """
        self._open.discard(relay)
        self._wake()
