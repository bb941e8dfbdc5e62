# -*- test-case-name: tests.test_testing_faultproxy -*-
"""
One connection through L{imapmig.testing.faultproxy.FaultProxy}: the
L{ConnectionRelay} that takes every decision (what to relay, hold, drip or
drop, when a fault fires), driven by the thin protocols of C{faultproxy.py}
or by a unit test with L{twisted.internet.testing.StringTransport}s and a
L{twisted.internet.task.Clock}.  Taken out of C{faultproxy.py}, which keeps
the listener, its counters and the protocols.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING, Protocol as TypingProtocol, cast

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime, IWriteDescriptor
from twisted.python.failure import Failure
from zope.interface import implementer

from imapmig.testing.faults import CutLiteral, Direction, Fault, LiteralTracker

if TYPE_CHECKING:
    from imapmig.testing.faultproxy import FaultProxy

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
        self.relayed = dict.fromkeys(Direction, 0)
        self.receivedOctets = dict.fromkeys(Direction, 0)
        self.fired: list[Fault] = []
        self._proxy = proxy
        self._clock = clock
        self._ends: dict[Direction, RelayTransport | None] = {
            Direction.TO_CLIENT: client,
            Direction.TO_SERVER: None,
        }
        self._held = {d: bytearray() for d in Direction}
        self._modes = dict.fromkeys(Direction, _Mode.PASS)
        self._dripIntervals = dict.fromkeys(Direction, 1.0)
        self._dripCalls: dict[Direction, IDelayedCall | None] = dict.fromkeys(Direction)
        self._full = dict.fromkeys(Direction, False)
        self._paused = dict.fromkeys(Direction, False)
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
            if sink is None or not self._forwarding(direction, mode, limit):
                return
            count = int(min(len(held), limit, self._nextTrigger(direction) - self.relayed[direction]))
            chunk = bytes(held[:count])
            del held[:count]
            sink.write(chunk)
            self.relayed[direction] += count
            limit -= count
            self._proxy.octetsRelayed(direction, count)

    def _forwarding(self, direction: Direction, mode: _Mode, limit: float) -> bool:
        """
        Whether octets held for C{direction} may go on in C{mode}, up to
        C{limit}.
        """
        return (
            self._relaying
            and self._modes[direction] is mode
            and bool(self._held[direction])
            and limit > 0
        )

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
        fault.applyTo(self)

    # -- what the faults do (Fault.applyTo) ------------------------------------

    def close(self) -> None:
        """
        Stop relaying and close both connections in order (FIN).
        """
        self._relaying = False
        self._cancelDrips()
        for end in self._ends.values():
            if end is not None:
                end.loseConnection()

    def stall(self, direction: Direction) -> None:
        """
        Stop relaying in C{direction} and stop reading its source.
        """
        self._modes[direction] = _Mode.STALLED
        self._cancelDrip(direction)
        self._updateReading(direction)

    def discard(self, direction: Direction) -> None:
        """
        Drop what goes in C{direction} from now on, and what is held.
        """
        self._modes[direction] = _Mode.DISCARDING
        self._cancelDrip(direction)
        self._held[direction].clear()
        self._updateReading(direction)

    def drip(self, direction: Direction, interval: float) -> None:
        """
        Relay C{direction} one octet per C{interval} seconds.
        """
        self._modes[direction] = _Mode.DRIPPING
        self._dripIntervals[direction] = interval
        self._scheduleDrip(direction)
        self._updateReading(direction)

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
        pause = self._shouldPause(direction)
        if pause != self._paused[direction]:
            self._paused[direction] = pause
            if pause:
                source.pauseProducing()
            else:
                source.resumeProducing()

    def _shouldPause(self, direction: Direction) -> bool:
        """
        Whether the source of C{direction} must not be read, by its mode.
        """
        mode = self._modes[direction]
        held = bool(self._held[direction])
        if mode is _Mode.STALLED:
            return True
        if mode is _Mode.DISCARDING:
            return False
        if mode is _Mode.DRIPPING:
            return held
        return held or self._full[direction] or self._ends[direction] is None

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
