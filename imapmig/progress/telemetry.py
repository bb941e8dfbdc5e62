# -*- test-case-name: tests.test_telemetry -*-
"""
Telemetry: the live numbers of the daemon's machinery that the progress
model does not hold, kept per server as plain counters for the status
resources to read (L{imapmig.status.metrics} turns them into Prometheus
metrics at scrape time).

    - each server's APPEND latency (L{LatencyHistogram}: seconds from a
      command's last octet written to its tagged reply), observed by the
      APPEND pipeline once per command;
    - each server's APPEND window: the pipelines register themselves and
      their messages and octets in flight are summed when read;
    - each server's throttle waits (L{ThrottleWaits}), per direction;
    - the connections granted and open per server, read from whatever
      L{Telemetry.watchConnections} was given (the connection grants).

Updating it costs a few attribute increments (and, per APPEND command, two
clock reads and a bisection), never a lock or a log line; everything else
happens when it is read.  This is a leaf:
it imports nothing of imapmig.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterator, Mapping, NamedTuple, Protocol
from weakref import WeakSet

__all__ = [
    "LATENCY_BUCKETS",
    "ConnectionCounts",
    "InFlightWindow",
    "LatencyHistogram",
    "ServerConnections",
    "ServerTelemetry",
    "Telemetry",
    "ThrottleWaits",
]

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""
The upper bounds, in seconds, of the APPEND latency buckets: 1 ms (a
loopback server) to 60 s (a large MULTIAPPEND on a slow link, or a server
that stalls).
"""


class LatencyHistogram:
    """
    Counts of observed durations in buckets, as a Prometheus histogram
    holds them (but not cumulative: L{cumulative} makes them so when read).

    @ivar bounds: the buckets' upper bounds, ascending (inclusive, as
        Prometheus's C{le}); a last bucket, unbounded, follows them.
    @ivar counts: observations per bucket, the unbounded one last.
    @ivar sum: the sum of every observation, in seconds.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        """
        Count one duration of C{seconds}.
        """
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        """
        How many durations were observed.
        """
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """
        Each bucket's upper bound (C{float("inf")} last) with the number of
        observations at or below it.
        """
        result = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            result.append((bound, running))
        return result


class ThrottleWaits:
    """
    How often, and how long, the requests of one side of the jobs on one
    server waited for its throttle's rates.

    @ivar count: waits begun.
    @ivar seconds: seconds waited by the waits that ended (served or
        cancelled).
    """

    __slots__ = ("count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0


class InFlightWindow(Protocol):
    """
    An APPEND pipeline's window, as telemetry reads it.
    """

    @property
    def messagesInFlight(self) -> int:
        """
        Messages sent, awaiting their reply.
        """

    @property
    def bytesInFlight(self) -> int:
        """
        Their octets.
        """


class ServerConnections(NamedTuple):
    """
    The connections to one server.

    @ivar granted: connections granted under its limits: open, opening,
        and those the running jobs keep reserved between two sessions.
    @ivar open: of these, those a session holds (open or opening).
    @ivar limit: its C{max_connections}, or L{None} for none.
    """

    granted: int
    open: int
    limit: int | None


ConnectionCounts = Callable[[], Mapping[str, ServerConnections]]
"""
Reads the connections to every server, by server name.
"""


class ServerTelemetry:
    """
    The telemetry of one server (named as under C{servers}).

    @ivar name: the server's name.
    @ivar seconds: the clock the APPEND latency is measured by.
    @ivar appendLatency: seconds from an APPEND command's last octet written
        to its tagged reply.
    @ivar throttleWaits: per direction (C{"upload"}, C{"download"}), the
        waits for this server's throttle.
    """

    __slots__ = ("name", "seconds", "appendLatency", "throttleWaits", "_windows")

    def __init__(self, name: str, seconds: Callable[[], float]) -> None:
        self.name = name
        self.seconds = seconds
        self.appendLatency = LatencyHistogram()
        self.throttleWaits: dict[str, ThrottleWaits] = {}
        # Weak: a pipeline that is dropped without being closed is not
        # counted forever.
        self._windows: WeakSet[InFlightWindow] = WeakSet()

    def waitsOf(self, direction: str) -> ThrottleWaits:
        """
        The throttle waits of C{direction}, made at the first call.
        """
        waits = self.throttleWaits.get(direction)
        if waits is None:
            waits = self.throttleWaits[direction] = ThrottleWaits()
        return waits

    def pipelineOpened(self, window: InFlightWindow) -> None:
        """
        Count C{window}'s messages and octets in flight from now on.
        """
        self._windows.add(window)

    def pipelineClosed(self, window: InFlightWindow) -> None:
        """
        Stop counting C{window} (closed, or failed: what it still had in
        flight has an unknown outcome and awaits no reply).
        """
        self._windows.discard(window)

    def inFlight(self) -> tuple[int, int]:
        """
        Messages, and octets, sent to this server and awaiting their reply,
        over every open pipeline.
        """
        messages = octets = 0
        for window in list(self._windows):
            messages += window.messagesInFlight
            octets += window.bytesInFlight
        return messages, octets


class Telemetry:
    """
    The daemon's telemetry: one L{ServerTelemetry} per server, and where
    the connection counts come from.
    """

    def __init__(self, seconds: Callable[[], float]) -> None:
        """
        @param seconds: the clock (the reactor's C{seconds}).
        """
        self._seconds = seconds
        self._servers: dict[str, ServerTelemetry] = {}
        self._connections: ConnectionCounts | None = None

    def server(self, name: str) -> ServerTelemetry:
        """
        The telemetry of server C{name}, made at the first call.
        """
        server = self._servers.get(name)
        if server is None:
            server = self._servers[name] = ServerTelemetry(name, self._seconds)
        return server

    def __iter__(self) -> Iterator[ServerTelemetry]:
        """
        Every server's telemetry, in the order they were first asked for.
        """
        return iter(list(self._servers.values()))

    def watchConnections(self, counts: ConnectionCounts) -> None:
        """
        Read the connections per server from C{counts} (the connection
        grants' L{imapmig.schedule.grants.ConnectionGrants.connectionCounts}).
        """
        self._connections = counts

    def connections(self) -> Mapping[str, ServerConnections]:
        """
        The connections per server; empty when nothing is watched.
        """
        if self._connections is None:
            return {}
        return self._connections()
