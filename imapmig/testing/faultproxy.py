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

The protocols are thin: all decisions are taken in
L{imapmig.testing.faultrelay.ConnectionRelay}, one
per accepted connection, which a unit test drives with
L{twisted.internet.testing.StringTransport}s and a
L{twisted.internet.task.Clock}.
"""

from __future__ import annotations

import socket
from typing import Callable, Iterable, cast

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    IProtocolFactory,
    IReactorTCP,
    IReactorTime,
    ISystemHandle,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from imapmig.testing.faultrelay import ConnectionRelay, RelayTransport
from imapmig.testing.faults import Direction, Fault, FiredFault



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
        ready = [(c, d) for c, d in self._waiters if c()]
        self._waiters = [waiter for waiter in self._waiters if waiter not in ready]
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
        return [fault for fault in self._faults if self._mayFire(fault, relay)]

    def _mayFire(self, fault: Fault, relay: ConnectionRelay) -> bool:
        """
        Whether C{fault} applies to C{relay}'s connection, has not fired on
        it, and has firings left.
        """
        return (
            (fault.connections is None or relay.number in fault.connections)
            and fault not in relay.fired
            and (fault.times is None or self._firings.get(fault, 0) < fault.times)
        )

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
