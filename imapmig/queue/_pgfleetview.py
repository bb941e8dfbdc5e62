# -*- test-case-name: tests.test_fleetview_postgresql -*-
"""
The fleet's read model on PostgreSQL (L{imapmig.queue.fleetview}): the
queue's tables C{imapmig_queue.daemons} and C{imapmig_queue.jobs}
(L{imapmig.queue._pgschema}) read on the reader connection
(docs/fleet-design.md "The thread pool"), every statement under a
C{statement_timeout}.

Every statement the status pages send about the fleet is here, so that a
column added to the daemons' table is read in one place.  Their cost does
not grow with the jobs queued or ended ("A million jobs"): the daemons
are read from their own table (a row per process start, retired ones
left out, the rest pruned by the queue), each one's jobs counted through
the partial index of claimed jobs (C{jobs_claimed}, on C{owner}), and a
page's holders found through the unique index on a job's name.  A rate
is read where the daemons' table has a C{rate} column (C{to_jsonb(d) ->>
'rate'}: L{None} without one), so the statement holds before and after
the column is added.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar

import psycopg
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from imapmig.errors import QueueUnavailable
from imapmig.queue.fleetview import (
    DaemonRow,
    Fleet,
    FoundJobs,
    Holder,
    IFleetView,
    JobRow,
    JobsPage,
)

__all__ = [
    "COUNTS",
    "DAEMONS",
    "FIND_JOBS",
    "JOB_NAMED",
    "SCAN_ROWS",
    "HOLDERS",
    "JOBS_PAGE",
    "MAX_DAEMONS",
    "SHOWN_AFTER_LEASE",
    "PostgreSQLFleetView",
    "onConnection",
    "throughStore",
]

_T = TypeVar("_T")
Connection = psycopg.Connection[tuple[Any, ...]]

SHOWN_AFTER_LEASE = 3600.0
"""
Seconds a daemon whose lease ended (killed, cut off) is still shown, as
not live, unless it retired its id.
"""

MAX_DAEMONS = 200
"""
The most daemons a page lists (a fleet is a few dozen).
"""

STATEMENT_TIMEOUT = "5s"
"""
The longest a statement of the pages may run (the reader's bound).
"""

DAEMONS = """
SELECT d.daemon_id::text, d.host, d.pid, d.version,
       extract(epoch FROM d.started_at)::float8,
       extract(epoch FROM d.heartbeat_at)::float8,
       extract(epoch FROM now() - d.heartbeat_at)::float8,
       extract(epoch FROM d.lease_until)::float8,
       d.lease_until > now(),
       (SELECT count(*) FROM imapmig_queue.jobs j
         WHERE j.state = 'claimed' AND j.owner = d.daemon_id),
       (to_jsonb(d) ->> 'rate')::float8
  FROM imapmig_queue.daemons d
 WHERE d.retired_at IS NULL
   AND d.lease_until > now() - make_interval(secs => %(shown)s)
 ORDER BY d.lease_until > now() DESC, d.host, d.started_at, d.daemon_id
 LIMIT %(limit)s
"""
"""
Every daemon shown: live, or its lease ended less than
L{SHOWN_AFTER_LEASE} ago; with the jobs it holds, counted by the partial
index C{jobs_claimed}.
"""

HOLDERS = """
SELECT j.name, j.owner::text, d.host, d.lease_until > now()
  FROM imapmig_queue.jobs j JOIN imapmig_queue.daemons d ON d.daemon_id = j.owner
 WHERE j.name = ANY(%(names)s) AND j.state = 'claimed'
"""
"""
The holders of a page of jobs, by the unique index on the job's name.
"""

JOBS_PAGE = """
SELECT j.position, j.name, j.state, j.requested, j.owner::text, d.host, d.lease_until > now()
  FROM imapmig_queue.jobs j
  LEFT JOIN imapmig_queue.daemons d ON j.state = 'claimed' AND d.daemon_id = j.owner
 WHERE j.position > %(after)s
 ORDER BY j.position
 LIMIT %(limit)s
"""
"""
A page of the jobs by keyset, through the index on their position
(C{jobs_position}): the same few pages read wherever the page is among a
million jobs.
"""

SCAN_ROWS = 10_000
"""
The most rows of the list a filtered page (a state, a search) scans from
its start: its cost is bounded whatever the list's length, and its
C{matched} counts the matches among them.
"""

FIND_JOBS = """
WITH scanned AS MATERIALIZED (
  SELECT position, name, state, requested, owner FROM imapmig_queue.jobs
   WHERE position >= %(start)s ORDER BY position LIMIT %(scan)s),
edge AS (SELECT max(position) AS last, count(*) AS n FROM scanned)
SELECT e.last, e.n, m.*
  FROM edge e LEFT JOIN LATERAL (
    SELECT j.position, j.name, j.state, j.requested, j.owner::text, d.host,
           d.lease_until > now(), count(*) OVER ()
      FROM scanned j
      LEFT JOIN imapmig_queue.daemons d ON j.state = 'claimed' AND d.daemon_id = j.owner
     WHERE (cardinality(%(states)s::text[]) = 0 OR j.state = ANY(%(states)s::text[]))
       AND strpos(lower(j.name), %(needle)s) > 0
     ORDER BY j.position LIMIT %(limit)s) m ON true
"""
"""
A page of the jobs a filter selects among at most C{scan} rows from
position C{start} (through C{jobs_position}), with the last position
scanned, the rows scanned and the matches among them: one row even when
none matches.
"""

JOB_NAMED = """
SELECT j.position, j.name, j.state, j.requested, j.owner::text, d.host, d.lease_until > now()
  FROM imapmig_queue.jobs j
  LEFT JOIN imapmig_queue.daemons d ON j.state = 'claimed' AND d.daemon_id = j.owner
 WHERE j.name = %(name)s
"""
"""
One job by its name, through the jobs' key.
"""

COUNTS = "SELECT state, sum(n)::bigint FROM imapmig_queue.job_counts GROUP BY state"
"""
The jobs by state: the sum of C{job_counts}'s rows, a handful (the
claims fold them), not a scan of the jobs.
"""


class ReadRunner(Protocol):
    """
    Runs a read on the reader connection, in a thread, and gives its
    result in the reactor's thread.
    """

    def __call__(self, work: Callable[[Connection], _T]) -> Deferred[_T]:
        """
        What C{work} returns, called with the connection; failing with
        L{QueueUnavailable} when the database cannot be read.
        """


WAIT = 10.0
"""
Seconds a page waits for a read, its wait for a free thread included;
then it is answered without the fleet.
"""


def onConnection(
    reactor: IReactorFromThreads,
    pool: ThreadPool,
    connect: Callable[[], Connection],
    where: str,
    clock: IReactorTime | None = None,
) -> ReadRunner:
    """
    A L{ReadRunner} over one connection (in autocommit mode) made by
    C{connect} when first needed and again when found broken or closed
    (the database restarted), one read at a time, in C{pool}'s threads;
    psycopg's errors become L{QueueUnavailable} naming C{where} (the
    database without its password).

    @param connect: opens the reader connection (docs/fleet-design.md
        "The thread pool": the store's reader, where it lends it).
    @param clock: with it, a read not answered in L{WAIT} seconds fails
        with L{QueueUnavailable} (its thread finishes it unheard).
    """
    lock = threading.Lock()
    opened: list[Connection] = []

    def connection() -> Connection:
        if opened and (opened[0].broken or opened[0].closed):
            opened.pop().close()
        if not opened:
            opened.append(connect())
        return opened[0]

    def run(work: Callable[[Connection], _T]) -> Deferred[_T]:
        def inThread() -> _T:
            try:
                with lock:
                    return _bounded(work)(connection())
            except psycopg.Error as e:
                raise QueueUnavailable(f"{where}: cannot read the fleet: {e}") from None

        return _waited(deferToThreadPool(reactor, pool, inThread), where, clock)

    return run


def throughStore(run: ReadRunner, where: str, clock: IReactorTime | None = None) -> ReadRunner:
    """
    A L{ReadRunner} over another's (a fleet daemon's state store's
    C{readOnReader}, on its reader connection and in its threads, its
    errors as the store maps them), each read in a transaction under
    L{STATEMENT_TIMEOUT} and, with C{clock}, failing with
    L{QueueUnavailable} naming C{where} if not answered in L{WAIT}
    seconds.
    """

    def bounded(work: Callable[[Connection], _T]) -> Deferred[_T]:
        return _waited(run(_bounded(work)), where, clock)

    return bounded


def _bounded(work: Callable[[Connection], _T]) -> Callable[[Connection], _T]:
    """
    C{work} in a transaction of its own under L{STATEMENT_TIMEOUT}.
    """

    def inTransaction(reader: Connection) -> _T:
        with reader.transaction():
            reader.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")
            return work(reader)

    return inTransaction


def _waited(d: Deferred[_T], where: str, clock: IReactorTime | None) -> Deferred[_T]:
    """
    C{d}, failing after L{WAIT} seconds of C{clock} if it has one.
    """
    if clock is not None:
        d.addTimeout(WAIT, clock, onTimeoutCancel=_late(where))
    return d


def _late(where: str) -> Callable[[object, float], object]:
    """
    What a read cancelled after C{timeout} seconds fails with.
    """

    def late(result: object, timeout: float) -> object:
        raise QueueUnavailable(f"{where}: the fleet was not read within {timeout:g} s")

    return late


@implementer(IFleetView)
class PostgreSQLFleetView:
    """
    The fleet as the queue's tables hold it.
    """

    def __init__(
        self,
        run: ReadRunner,
        me: Callable[[], str | None],
        rate: Callable[[], float | None] | None = None,
    ) -> None:
        """
        @param run: runs the reads (L{onConnection}, on the reader
            connection).
        @param me: this daemon's id now (L{None} before it registered): a
            daemon that lost its lease registers under a new one.
        @param rate: this daemon's rate now (messages per second), shown
            for it where the daemons' table has none (no C{rate} column);
            called in the reactor's thread.
        """
        self._run = run
        self._me = me
        self._rate = rate

    def daemons(self) -> Deferred[Fleet]:
        """
        See L{IFleetView.daemons}.
        """
        me = self._me()
        mine = None if self._rate is None else self._rate()

        def read(connection: Connection) -> Fleet:
            rows = connection.execute(
                DAEMONS, {"shown": SHOWN_AFTER_LEASE, "limit": MAX_DAEMONS}
            ).fetchall()
            return Fleet(tuple(_daemon(row, me, mine) for row in rows))

        return self._run(read)

    def holders(self, names: Sequence[str]) -> Deferred[Mapping[str, Holder]]:
        """
        See L{IFleetView.holders}.
        """

        def read(connection: Connection) -> Mapping[str, Holder]:
            rows = connection.execute(HOLDERS, {"names": list(names)}).fetchall()
            return {name: Holder(owner, host, live) for name, owner, host, live in rows}

        return self._run(read)


    def jobsPage(self, after: int | None, limit: int) -> Deferred[JobsPage]:
        """
        See L{IFleetView.jobsPage}.
        """

        def read(connection: Connection) -> JobsPage:
            rows = connection.execute(
                JOBS_PAGE, {"after": -1 if after is None else after, "limit": limit + 1}
            ).fetchall()
            jobs = tuple(_job(row) for row in rows[:limit])
            return JobsPage(jobs, jobs[-1].position if len(rows) > limit else None)

        return self._run(read)

    def jobCounts(self) -> Deferred[Mapping[str, int]]:
        """
        See L{IFleetView.jobCounts}.
        """

        def read(connection: Connection) -> Mapping[str, int]:
            return {state: n for state, n in connection.execute(COUNTS).fetchall() if n}

        return self._run(read)

    def findJobs(
        self, states: Sequence[str], text: str, start: int, limit: int
    ) -> Deferred[FoundJobs]:
        """
        See L{IFleetView.findJobs}: at most L{SCAN_ROWS} rows scanned from
        C{start} when filtered, C{limit} + 1 when not; C{matched} from the
        counts unless a search bounds it (then the matches scanned).
        """
        me = self._me()
        return self._run(lambda connection: _found(connection, states, text, start, limit, me))

    def jobNamed(self, name: str) -> Deferred[JobRow | None]:
        """
        See L{IFleetView.jobNamed}.
        """

        me = self._me()

        def read(connection: Connection) -> JobRow | None:
            row = connection.execute(JOB_NAMED, {"name": name}).fetchone()
            return None if row is None else _job(row, me)

        return self._run(read)


def _found(
    connection: Connection,
    states: Sequence[str],
    text: str,
    start: int,
    limit: int,
    me: str | None,
) -> FoundJobs:
    """
    L{PostgreSQLFleetView.findJobs}'s reads: the page (L{_scanned}); the
    job named C{text} exactly, first on the first page (L{JOB_NAMED}); the
    counts when no search bounds them (L{COUNTS}).
    """
    found, inWindow, following = _scanned(connection, states, text, start, limit, me)
    jobs = found[:limit]
    if text and start == 0:
        named = connection.execute(JOB_NAMED, {"name": text}).fetchone()
        if named is not None and named[1] not in {job.name for job in found}:
            jobs = [_job(named, me), *jobs[: limit - 1]]
            inWindow += 1
    if text:
        return FoundJobs(tuple(jobs), inWindow, following is None, following)
    counts: dict[str, int] = dict(connection.execute(COUNTS).fetchall())
    matched = sum(int(n or 0) for state, n in counts.items() if not states or state in states)
    return FoundJobs(tuple(jobs), matched, True, following)


def _scanned(
    connection: Connection,
    states: Sequence[str],
    text: str,
    start: int,
    limit: int,
    me: str | None,
) -> tuple[list[JobRow], int, int | None]:
    """
    L{FIND_JOBS}: up to C{limit} + 1 matching jobs, the matches among the
    rows scanned, and the position the next page starts from (L{None}
    after the last).
    """
    filtered = bool(states or text)
    rows = connection.execute(
        FIND_JOBS,
        {
            "start": start,
            "scan": SCAN_ROWS if filtered else limit + 1,
            "states": list(states),
            "needle": text.lower(),
            "limit": limit + 1,
        },
    ).fetchall()
    last, scanned = rows[0][0], rows[0][1]
    found = [_job(row[2:9], me) for row in rows if row[2] is not None]
    following: int | None = None
    if len(found) > limit:
        following = found[limit].position
    elif filtered and scanned >= SCAN_ROWS:
        following = last + 1
    return found, rows[0][9] or 0, following


def _job(row: tuple[Any, ...], me: str | None = None) -> JobRow:
    """
    A row of L{JOBS_PAGE} as a L{JobRow}, its holder marked C{this} when
    it is C{me}.
    """
    position, name, state, requested, owner, host, live = row
    holder = None if host is None else Holder(owner, host, live, this=owner == me)
    return JobRow(position, name, state, requested, holder)


def _daemon(row: tuple[Any, ...], me: str | None, mine: float | None = None) -> DaemonRow:
    """
    A row of L{DAEMONS} as a L{DaemonRow}; this daemon's rate C{mine}
    where the row has none.
    """
    daemonId, host, pid, version, started, beat, age, lease, live, jobs, rate = row
    if rate is None and daemonId == me:
        rate = mine
    return DaemonRow(
        daemonId, host, pid, version, started, beat, max(0.0, age), lease, live, jobs, rate,
        this=daemonId == me,
    )  # fmt: skip
