# -*- test-case-name: tests.test_status_fleet,tests.test_fleetview_postgresql -*-
"""
The fleet as the status pages read it: every daemon with its host,
version, last heartbeat, lease and the jobs it holds (L{IFleetView.daemons}),
and which daemon holds each job of a page (L{IFleetView.holders}), both
as Deferreds so that no resource waits on a database.

Two implementations, one code path for the pages: L{SingleDaemonView}
answers from this daemon alone (a daemon on a SQLite or in-memory state
is the only one that may run its jobs: the state file's lock makes it so;
it holds every job, and the fleet is one row, itself); the PostgreSQL
reader, L{imapmig.queue._pgfleetview}, reads the queue's tables
C{imapmig_queue.daemons} and C{imapmig_queue.jobs} on the reader
connection (docs/fleet-design.md "The thread pool"), by the unique index
on a job's name and the partial index of claimed jobs, so that its cost
does not grow with the jobs queued or ended ("A million jobs").

New: nothing read the daemons before; the queue's interfaces
(L{imapmig.queue}) are the writers' (claims and heartbeats), this is the
read side the pages need.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from attrs import frozen
from twisted.internet.defer import succeed
from zope.interface import Interface, implementer

import imapmig

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

__all__ = [
    "DaemonRow",
    "Fleet",
    "FoundJobs",
    "Holder",
    "IFleetView",
    "JobRow",
    "JobsPage",
    "SingleDaemonView",
]


@frozen
class DaemonRow:
    """
    One daemon of the fleet, as the database (or the daemon itself) saw it.

    @ivar daemonId: its id (a C{uuid4} per process start).
    @ivar host: the host it runs on.
    @ivar pid: its process id there.
    @ivar version: the imapmig version it runs.
    @ivar startedAt: when it registered, seconds since the epoch.
    @ivar heartbeatAt: its last heartbeat, seconds since the epoch.
    @ivar heartbeatAge: seconds since its last heartbeat, by the clock that
        stamped it (the database's for a fleet): not skewed by this host's.
    @ivar leaseUntil: when its lease ends (L{None}: no lease, a single
        daemon).
    @ivar live: whether its lease is live (a single daemon: always).
    @ivar jobs: how many jobs it holds.
    @ivar rate: messages per second it reported, L{None} where unknown.
    @ivar this: whether it is the daemon serving the page.
    """

    daemonId: str
    host: str
    pid: int
    version: str
    startedAt: float
    heartbeatAt: float
    heartbeatAge: float
    leaseUntil: float | None
    live: bool
    jobs: int
    rate: float | None = None
    this: bool = False


@frozen
class Fleet:
    """
    The daemons of the fleet, live ones first, each host's in order of
    start.

    @ivar daemons: the live daemons and those whose lease ended recently
        (L{imapmig.queue._pgfleetview.SHOWN_AFTER_LEASE}), retired ones
        left out.
    """

    daemons: tuple[DaemonRow, ...]

    @property
    def live(self) -> int:
        """
        How many daemons have a live lease.
        """
        return sum(1 for daemon in self.daemons if daemon.live)


@frozen
class Holder:
    """
    The daemon that holds a job.

    @ivar daemonId: its id.
    @ivar host: its host.
    @ivar live: whether its lease is live (a claim of a daemon whose lease
        ended is released by the next claim anywhere).
    @ivar this: whether it is the daemon serving the page (set by
        L{IFleetView.findJobs} and L{IFleetView.jobNamed}).
    """

    daemonId: str
    host: str
    live: bool = True
    this: bool = False


@frozen
class JobRow:
    """
    A job of the fleet's list, as a page lists it from the database.

    @ivar position: its place in the list (the key of the next page).
    @ivar name: its name.
    @ivar state: its queue state (C{queued}, C{deferred}, C{claimed},
        C{paused}, C{done}, C{failed}, C{cancelled}).
    @ivar requested: a control asked of its holder, or L{None}.
    @ivar holder: the daemon holding it (claimed), or L{None}.
    """

    position: int
    name: str
    state: str
    requested: str | None = None
    holder: Holder | None = None


@frozen
class JobsPage:
    """
    One page of the fleet's jobs, in the list's order.

    @ivar jobs: its jobs.
    @ivar after: the position to ask the next page after, or L{None}: this
        is the last.
    """

    jobs: tuple[JobRow, ...]
    after: int | None


@frozen
class FoundJobs:
    """
    The fleet's jobs a page's filter selects (L{IFleetView.findJobs}).

    @ivar jobs: the page of them, in the list's order.
    @ivar matched: how many the filter selects: exact when C{exact}, else
        the matches among the rows scanned (a lower bound).
    @ivar exact: whether C{matched} is exact.
    @ivar next: the position to start the next page from, L{None} after
        the last.
    """

    jobs: tuple[JobRow, ...]
    matched: int
    exact: bool = True
    next: int | None = None


class IFleetView(Interface):
    """
    What the status pages read of the fleet.
    """

    def daemons() -> Deferred[Fleet]:
        """
        Every daemon of the fleet (L{Fleet}).

        @return: a Deferred failing with
            L{QueueUnavailable<imapmig.errors.QueueUnavailable>} when the
            database cannot be read.
        """

    def holders(names: Sequence[str]) -> Deferred[Mapping[str, Holder]]:
        """
        The daemon holding each of the jobs C{names} (a page of them, at
        most a few hundred) that one holds; a job no daemon holds (queued,
        paused, ended) is not in the answer.

        @return: a Deferred failing as L{daemons}'s.
        """

    def jobsPage(after: int | None, limit: int) -> Deferred[JobsPage]:
        """
        The fleet's jobs after position C{after} (L{None}: from the first),
        at most C{limit}, each with its state and holder: a page of a
        million jobs by keyset, whatever its place.

        @return: a Deferred failing as L{daemons}'s.
        """

    def jobCounts() -> Deferred[Mapping[str, int]]:
        """
        How many of the fleet's jobs are in each queue state (those with
        none left out).

        @return: a Deferred failing as L{daemons}'s.
        """

    def findJobs(
        states: Sequence[str], text: str, start: int, limit: int
    ) -> Deferred[FoundJobs]:
        """
        The fleet's jobs from position C{start} on, at most C{limit}, in
        one of the queue states C{states} (any when empty) and whose name
        holds C{text} ignoring case (any when empty), each with its state
        and holder; how many match.  Its cost does not grow with the
        fleet's jobs: a filtered page scans a bounded number of rows.

        @return: a Deferred failing as L{daemons}'s.
        """

    def jobNamed(name: str) -> Deferred[JobRow | None]:
        """
        The fleet's job C{name} with its state and holder, L{None} if the
        fleet has none by that name.

        @return: a Deferred failing as L{daemons}'s.
        """


@implementer(IFleetView)
class SingleDaemonView:
    """
    The fleet of a daemon alone: one row, itself, live, holding every job
    it has.

    @ivar daemonId: its id, drawn once per process start as a fleet
        daemon's is.
    """

    def __init__(
        self,
        seconds: Callable[[], float],
        jobs: Callable[[], int],
        rate: Callable[[], float | None] = lambda: None,
        host: str | None = None,
        pid: int | None = None,
        version: str = imapmig.__version__,
        states: Callable[[], Sequence[tuple[str, str]]] = lambda: (),
    ) -> None:
        """
        @param seconds: the clock (the reactor's).
        @param jobs: how many jobs the daemon has (all of them are its).
        @param states: each job's name and queue state, in the
            configuration's order (the pages' L{jobsPage}).
        @param rate: its messages per second now, L{None} if unknown.
        @param host: its host name (L{None}: this host's).
        @param pid: its process id (L{None}: this process's).
        @param version: its version.
        """
        self._seconds = seconds
        self._jobs = jobs
        self._rate = rate
        self.daemonId = str(uuid.uuid4())
        self._host = socket.gethostname() if host is None else host
        self._pid = os.getpid() if pid is None else pid
        self._version = version
        self._states = states
        self._startedAt = seconds()

    def _row(self) -> DaemonRow:
        now = self._seconds()
        return DaemonRow(
            self.daemonId,
            self._host,
            self._pid,
            self._version,
            self._startedAt,
            heartbeatAt=now,
            heartbeatAge=0.0,
            leaseUntil=None,
            live=True,
            jobs=self._jobs(),
            rate=self._rate(),
            this=True,
        )

    def daemons(self) -> Deferred[Fleet]:
        """
        One row: this daemon, its heartbeat now.
        """
        return succeed(Fleet((self._row(),)))

    def holders(self, names: Sequence[str]) -> Deferred[Mapping[str, Holder]]:
        """
        This daemon, for every job named.
        """
        holder = Holder(self.daemonId, self._host)
        return succeed({name: holder for name in names})


    def jobsPage(self, after: int | None, limit: int) -> Deferred[JobsPage]:
        """
        This daemon's jobs after position C{after}, each held by it when
        claimed.
        """
        start = 0 if after is None else after + 1
        listed = self._states()[start : start + limit]
        holder = Holder(self.daemonId, self._host)
        rows = tuple(
            JobRow(start + index, name, state, holder=holder if state == "claimed" else None)
            for index, (name, state) in enumerate(listed)
        )
        last = start + len(rows) - 1
        return succeed(JobsPage(rows, last if last + 1 < len(self._states()) and rows else None))

    def jobCounts(self) -> Deferred[Mapping[str, int]]:
        """
        This daemon's jobs by state.
        """
        counts: dict[str, int] = {}
        for _, state in self._states():
            counts[state] = counts.get(state, 0) + 1
        return succeed(counts)

    def findJobs(
        self, states: Sequence[str], text: str, start: int, limit: int
    ) -> Deferred[FoundJobs]:
        """
        This daemon's jobs the filter selects (its pages read its memory
        instead: this answers the interface).
        """
        holder = Holder(self.daemonId, self._host, this=True)
        needle = text.casefold()
        rows = [
            JobRow(position, name, state, holder=holder if state == "claimed" else None)
            for position, (name, state) in enumerate(self._states())
            if position >= start
            and (not states or state in states)
            and needle in name.casefold()
        ]
        following = rows[limit].position if len(rows) > limit else None
        return succeed(FoundJobs(tuple(rows[:limit]), len(rows), True, following))

    def jobNamed(self, name: str) -> Deferred[JobRow | None]:
        """
        This daemon's job C{name}, if it has one.
        """
        holder = Holder(self.daemonId, self._host, this=True)
        for position, (each, state) in enumerate(self._states()):
            if each == name:
                return succeed(JobRow(position, name, state, holder=holder))
        return succeed(None)
