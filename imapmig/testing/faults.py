# -*- test-case-name: tests.test_testing_faultproxy -*-
"""
The faults L{imapmig.testing.faultproxy.FaultProxy} injects (L{Reset},
L{Close}, L{Stall}, L{Drip}, L{Discard}, L{CutLiteral}: see
L{imapmig.testing.faultproxy}), the record of one that fired
(L{FiredFault}), the two directions octets travel, and the
L{LiteralTracker} that finds the client's literals for L{CutLiteral}.
Values only, taken out of C{faultproxy.py}.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING, Container, Iterable, Union

from attrs import field, frozen

if TYPE_CHECKING:
    from imapmig.testing.faultrelay import ConnectionRelay

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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        relay.abort()


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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        relay.close()


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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        for direction in self.stalled:
            relay.stall(direction)


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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        relay.drip(self.direction, self.interval)


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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        relay.discard(self.direction)


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

    def applyTo(self, relay: ConnectionRelay) -> None:
        """
        Fire on C{relay}.
        """
        relay.abort()


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
            position = self._endLine(data, position, newline)
        self._offset += end

    def _endLine(self, data: bytes, position: int, newline: int) -> int:
        """
        The line that started before C{position} ends at C{data[newline]}:
        note the literal its end opens, if any.

        @return: the position after the line.
        """
        start = max(position, newline + 1 - _LINE_TAIL)
        lineEnd = data[start : newline + 1]
        if start == position:
            lineEnd = self._lineTail + lineEnd
        self._lineTail = b""
        match = _LITERAL_OPENING.search(lineEnd)
        if match is not None:
            size = int(match.group(1))
            self.opened.append((self._offset + newline + 1, size))
            self._inLiteral = size
        return newline + 1
