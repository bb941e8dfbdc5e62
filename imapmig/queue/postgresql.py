# -*- test-case-name: tests.test_queue_postgresql -*-
"""
The job queue of a fleet on PostgreSQL (docs/fleet-design.md "Daemons:
identity, heartbeat, membership", "Claiming a job", "Takeover").

A daemon I{registers} under a fresh id (C{uuid4}) per process start; one
heartbeat statement renews its row of C{imapmig_queue.daemons}, whose
C{lease_until} is the lease of every job it holds (C{jobs} has no lease
column), so its cost is flat in the number of jobs held.  A claim, in
one transaction, renews that lease (none live: L{LeaseLost}), releases the
jobs of daemons whose lease ran out (and the deferred jobs now due), then
takes the first queued job in configuration order with C{FOR UPDATE SKIP
LOCKED}, its generation incremented.  Every lease is timed by the
database's clock (C{now()}).  A released job's next claim is a takeover
(L{JobClaim.takenFrom}).  C{renew} and C{finish} check owner, generation
and a live lease: a stale one changes nothing.  The tables are
L{imapmig.queue._pgschema}'s.

The job list is the fleet's (L{imapmig.queue._pgjoblist}): L{load}
loads it or refuses another fleet's or another list, C{replaceList}
replaces it (a reload), and a daemon claims only while its list is the
fleet's.

Not yet here: fencing of journal writes (the state store's), the
one-daemon-per-account test of the claim, the jobs' configurations in the
database, and the wiring into the daemon.

L{PostgreSQLJobQueue} is synchronous (psycopg 3's synchronous API, one
connection, a lock around it); L{ThreadedJobQueue} runs its calls in a
thread pool (C{deferToThreadPool}, the reactor and pool injected) so the
reactor never blocks.  New beside L{imapmig.queue.memory}: that one holds
the queue in one process, nothing could share it.
"""

from __future__ import annotations

import socket
import threading
import uuid
from typing import Any, Callable, Mapping, Sequence, TypeVar

import psycopg
from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from imapmig.config.model import JobConfig
from imapmig.errors import ControlRefused, JobListStale, LeaseLost, UnknownJob
from imapmig.queue import (
    Heartbeat,
    IJobQueue,
    JobClaim,
    JobOutcome,
    QueueCounts,
    QueueState,
    Requested,
)
from imapmig.queue._pgjoblist import (
    CLAIMABLE,
    JobList,
    ListChange,
    changeList,
    checkClaimed,
    joinFleet,
    readFleet,
    replaceJobList,
    staleList,
)
from imapmig.queue._pgschema import migrate

_T = TypeVar("_T")
Connection = psycopg.Connection[tuple[Any, ...]]

_REGISTER = """
INSERT INTO imapmig_queue.daemons
  (daemon_id, incarnation, host, pid, version, started_at, heartbeat_at, lease_until)
VALUES (%(me)s, nextval('imapmig_queue.incarnations'), %(host)s, %(pid)s, %(version)s,
        now(), now(), now() + make_interval(secs => %(lease)s))
"""

_HEARTBEAT = """
WITH beat AS (
  UPDATE imapmig_queue.daemons
     SET lease_until = now() + make_interval(secs => %(lease)s), heartbeat_at = now()
   WHERE daemon_id = %(me)s AND lease_until > now()
  RETURNING lease_until)
SELECT extract(epoch FROM beat.lease_until)::float8,
       (SELECT jsonb_object_agg(name, requested) FROM imapmig_queue.jobs
         WHERE owner = %(me)s AND requested IS NOT NULL AND state = 'claimed')
  FROM beat
"""

_RELEASE = """
UPDATE imapmig_queue.jobs j
   SET state = CASE j.requested WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled'
                    ELSE 'queued' END,
       owner = NULL, requested = NULL, taken_from = x.owner, taken_lease_until = x.lease_until
  FROM (SELECT c.job_id, c.owner, d.lease_until
          FROM imapmig_queue.jobs c LEFT JOIN imapmig_queue.daemons d ON d.daemon_id = c.owner
         WHERE c.state = 'claimed' AND (d.lease_until IS NULL OR d.lease_until < now())
           FOR UPDATE OF c SKIP LOCKED) x
 WHERE j.job_id = x.job_id
"""

_DUE = """
UPDATE imapmig_queue.jobs SET state = 'queued', not_before = NULL
 WHERE state = 'deferred' AND not_before <= to_timestamp(%(now)s)
"""

_CLAIM = """
WITH next AS (
  SELECT job_id, taken_from FROM imapmig_queue.jobs
   WHERE state = 'queued' AND """ + CLAIMABLE + """ ORDER BY position LIMIT 1
   FOR UPDATE SKIP LOCKED)
UPDATE imapmig_queue.jobs j
   SET state = 'claimed', owner = %(me)s, generation = j.generation + 1,
       requested = NULL, taken_from = NULL, taken_lease_until = NULL
  FROM next WHERE j.job_id = next.job_id
RETURNING j.name, j.position, j.generation, next.taken_from, j.digest
"""

# A claim's own row, while current: its owner and generation, its owner's
# lease live (with imapmig_queue.daemons d in the statement).
_CURRENT = """
 j.name = %(name)s AND j.owner = %(me)s AND j.generation = %(generation)s
   AND j.state = 'claimed' AND d.daemon_id = j.owner AND d.lease_until > now()
"""

# A claimed job removed by a reload leaves when its claim ends.
_LEAVE = "DELETE FROM imapmig_queue.jobs j USING imapmig_queue.daemons d WHERE j.requested = 'remove' AND"

_LEAVE_EXPIRED = """
DELETE FROM imapmig_queue.jobs j
 WHERE j.state = 'claimed' AND j.requested = 'remove' AND NOT EXISTS (
   SELECT 1 FROM imapmig_queue.daemons d WHERE d.daemon_id = j.owner AND d.lease_until >= now())
"""

_FINISH = (
    """
UPDATE imapmig_queue.jobs j
   SET state = CASE
         WHEN j.requested = 'rerun' THEN 'queued'
         WHEN %(outcome)s = 'completed' THEN 'done'
         WHEN %(outcome)s = 'failed' THEN 'failed'
         WHEN j.requested = 'cancel' THEN 'cancelled'
         WHEN j.requested = 'pause' THEN 'paused'
         WHEN %(outcome)s = 'stopped' THEN 'queued'
         ELSE 'deferred' END,
       not_before = CASE WHEN %(outcome)s = 'deferred' AND j.requested IS NULL
                         THEN to_timestamp(%(notBefore)s) END,
       owner = NULL, requested = NULL
  FROM imapmig_queue.daemons d WHERE"""
    + _CURRENT
)

_RENEWED = "SELECT j.requested FROM imapmig_queue.jobs j, imapmig_queue.daemons d WHERE" + _CURRENT

# Rows a reload removed while claimed are unknown to the controls.
_KNOWN = "name = %(name)s AND requested IS DISTINCT FROM 'remove'"


@implementer(IJobQueue)
class PostgreSQLJobQueue:
    """
    The configured jobs as rows of C{imapmig_queue.jobs}, claimed by the
    daemons of a fleet under leases timed by the database's clock.

    Each method blocks on the database: call them through
    L{ThreadedJobQueue}.  The jobs' configurations are this process's
    (C{jobs}, then C{add}, C{replace} and C{replaceList}): the rows hold
    names, places and digests.
    """

    def __init__(
        self, connection: Connection, jobs: Sequence[JobConfig], fleet: str = "imapmig"
    ) -> None:
        """
        @param connection: a psycopg connection in autocommit mode, used
            by this queue alone (behind its lock).
        @param jobs: the configured jobs, in configuration order: the
            claims name them, and L{load} makes their rows.
        @param fleet: the fleet's name (the configuration's C{fleet.name}).
        """
        self._connection = connection
        self._list = JobList.of(jobs)
        self._fleet = fleet
        self._by = socket.gethostname()
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls, uri: str, jobs: Sequence[JobConfig], fleet: str = "imapmig"
    ) -> PostgreSQLJobQueue:
        """
        Open a connection to C{uri} (a libpq URI), migrate the queue's
        tables and load C{jobs}' rows.
        """
        connection: Connection = psycopg.connect(
            uri, autocommit=True, application_name="imapmig queue", connect_timeout=5
        )
        queue = cls(connection, jobs, fleet)
        try:
            queue.load()
        except BaseException:
            connection.close()
            raise
        return queue

    def close(self) -> None:
        """
        Close the connection.
        """
        with self._lock:
            self._connection.close()

    def _run(self, work: Callable[[Connection], _T]) -> _T:
        """
        Run C{work} with the connection, in one transaction.
        """
        with self._lock, self._connection.transaction():
            return work(self._connection)

    def load(self) -> None:
        """
        Migrate the queue's tables and, in the same transaction, load the
        configured jobs as the fleet's list, or check that the database
        holds this fleet's with this list (L{joinFleet}).

        @raise FleetMismatch: it holds another fleet, or another list.
        """
        with self._lock, self._connection.transaction():
            migrate(self._connection, "imapmig queue")
            joinFleet(self._connection, self._fleet, self._list, self._by)

    def replaceList(self, jobs: Sequence[JobConfig]) -> ListChange:
        """
        Make C{jobs} the fleet's list (a reload of this daemon), and this
        queue's configurations (L{replaceJobList}).

        @raise FleetMismatch: the database holds another fleet.
        """
        new = JobList.of(jobs)
        change = self._run(lambda c: replaceJobList(c, self._fleet, new, self._by))
        self._list = new
        return change

    def listDiffers(self) -> str | None:
        """
        Why this daemon claims nothing, when a reload elsewhere made the
        fleet's list another than its own (for its log and page at each
        new generation, which its heartbeat brings back); else L{None}.
        """
        return staleList(self._run(readFleet), self._list)

    def _job(self, name: str) -> JobConfig:
        return self._list.byName[name]

    def register(self, host: str, pid: int, version: str, lease: float) -> str:
        me = str(uuid.uuid4())
        values = {"me": me, "host": host, "pid": pid, "version": version, "lease": lease}
        self._run(lambda c: c.execute(_REGISTER, values))
        return me

    def heartbeat(self, owner: str, lease: float) -> Heartbeat:
        row = self._run(lambda c: c.execute(_HEARTBEAT, {"me": owner, "lease": lease}).fetchone())
        if row is None:
            raise LeaseLost(f"daemon {owner}'s lease ran out")
        requests: Mapping[str, str] = row[1] or {}
        return Heartbeat(
            row[0], tuple((name, Requested(asked)) for name, asked in sorted(requests.items()))
        )

    def claim(self, owner: str, now: float, lease: float) -> JobClaim | None:
        def claimNext(c: Connection) -> JobClaim | None:
            beat = c.execute(_HEARTBEAT, {"me": owner, "lease": lease}).fetchone()
            if beat is None:
                raise LeaseLost(f"daemon {owner}'s lease ran out")
            c.execute(_LEAVE_EXPIRED)
            c.execute(_RELEASE)
            c.execute(_DUE, {"now": now})
            row = c.execute(_CLAIM, {"me": owner, "list": self._list.digest}).fetchone()
            if row is None:
                return None
            name, position, generation, takenFrom, digest = row
            checkClaimed(self._list, name, digest)
            return JobClaim(
                self._job(name), position, owner, beat[0], generation,
                takenFrom=None if takenFrom is None else str(takenFrom),
            )  # fmt: skip

        try:
            return self._run(claimNext)
        except JobListStale:
            # A reload replaced the list during the claim: rolled back.
            return None

    def _current(self, claim: JobClaim) -> dict[str, object]:
        return {"name": claim.job.name, "me": claim.owner, "generation": claim.generation}

    def renew(self, claim: JobClaim, lease: float) -> JobClaim:
        def renewed(c: Connection) -> JobClaim:
            beat = c.execute(_HEARTBEAT, {"me": claim.owner, "lease": lease}).fetchone()
            row = c.execute(_RENEWED, self._current(claim)).fetchone()
            if beat is None or row is None:
                raise LeaseLost(f"job {claim.job.name} was taken over")
            return evolve(
                claim, leaseUntil=beat[0], requested=None if row[0] is None else Requested(row[0])
            )

        return self._run(renewed)

    def finish(self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        values = dict(self._current(claim), outcome=outcome.value, notBefore=notBefore)

        def release(c: Connection) -> None:
            if not c.execute(_LEAVE + _CURRENT, values).rowcount:
                c.execute(_FINISH, values)

        self._run(release)

    def nextDue(self) -> float | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT extract(epoch FROM min(not_before))::float8 FROM imapmig_queue.jobs"
                " WHERE state = 'deferred'"
            ).fetchone()
        )
        return None if row is None else row[0]

    def counts(self) -> QueueCounts:
        rows = self._run(
            lambda c: c.execute(
                "SELECT state, count(*) FROM imapmig_queue.jobs GROUP BY state"
            ).fetchall()
        )
        by: dict[str, int] = dict(rows)
        return QueueCounts(
            queued=by.get("queued", 0),
            claimed=by.get("claimed", 0),
            finished=by.get("done", 0) + by.get("failed", 0) + by.get("cancelled", 0),
            deferred=by.get("deferred", 0),
            paused=by.get("paused", 0),
            cancelled=by.get("cancelled", 0),
        )

    def state(self, name: str) -> QueueState:
        row = self._run(
            lambda c: c.execute(
                "SELECT state FROM imapmig_queue.jobs WHERE " + _KNOWN, {"name": name}
            ).fetchone()
        )
        if row is None:
            raise UnknownJob(name)
        return QueueState.QUEUED if row[0] == "deferred" else QueueState(row[0])

    def _control(self, name: str, sql: str, refusal: str) -> QueueState:
        """
        Apply a control: C{sql} updates the job's row and returns its new
        state, or no row when the control does not apply.
        """
        row = self._run(lambda c: c.execute(sql, {"name": name}).fetchone())
        if row is None:
            self.state(name)
            raise ControlRefused(f"job {name} {refusal}")
        return QueueState(row[0])

    def pause(self, name: str) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'paused' END,"
            " requested = CASE state WHEN 'claimed' THEN 'pause' END"
            " WHERE " + _KNOWN + " AND (state IN ('queued', 'deferred')"
            "  OR (state = 'claimed' AND requested IS DISTINCT FROM 'cancel')) RETURNING state",
            "is not queued or running",
        )

    def resume(self, name: str) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed'"
            "   WHEN 'paused' THEN CASE WHEN not_before IS NULL THEN 'queued' ELSE 'deferred' END"
            "   ELSE 'queued' END,"
            " requested = NULL"
            " WHERE " + _KNOWN + " AND (state IN ('paused', 'cancelled')"
            "  OR (state = 'claimed' AND requested = 'pause'))"
            " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
            "is not paused or cancelled",
        )

    def cancel(self, name: str) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'cancelled' END,"
            " requested = CASE state WHEN 'claimed' THEN 'cancel' END,"
            " not_before = CASE state WHEN 'claimed' THEN not_before END"
            " WHERE " + _KNOWN + " AND state IN ('queued', 'deferred', 'paused', 'claimed')"
            " RETURNING state",
            "has ended",
        )

    def requeue(self, name: str) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE WHEN state IN ('done', 'failed') THEN 'queued' ELSE state END,"
            " requested = CASE state WHEN 'claimed' THEN coalesce(requested, 'rerun') END"
            " WHERE " + _KNOWN + " AND state <> 'cancelled'"
            " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
            "was cancelled",
        )

    def _changeJob(
        self, name: str, new: JobList, change: Callable[[Connection, dict[str, Any]], _T]
    ) -> _T:
        """
        Change job C{name}'s row by C{change} (given the connection and
        the values C{name} and C{digest}, its digest in C{new}) in
        one transaction with the fleet's row (L{changeList}), then make
        C{new} this queue's list.

        @raise JobListStale: this queue's list is no longer the fleet's.
        """

        def changed(c: Connection) -> _T:
            changeList(c, self._fleet, self._list, new, self._by)
            return change(c, {"name": name, "digest": new.digests.get(name)})

        result = self._run(changed)
        self._list = new
        return result

    def add(self, job: JobConfig) -> None:
        def added(c: Connection, values: dict[str, Any]) -> None:
            kept = c.execute(
                "UPDATE imapmig_queue.jobs SET requested = NULL, digest = %(digest)s"
                " WHERE name = %(name)s AND requested = 'remove'",
                values,
            ).rowcount
            if not kept and not c.execute(
                "INSERT INTO imapmig_queue.jobs (name, position, digest)"
                " SELECT %(name)s, coalesce(max(position) + 1, 0), %(digest)s"
                " FROM imapmig_queue.jobs ON CONFLICT (name) DO NOTHING",
                values,
            ).rowcount:
                raise ValueError(f"job {job.name} is queued already")

        self._changeJob(job.name, self._list.withJob(job), added)

    def remove(self, name: str) -> QueueState:
        def removed(c: Connection, values: dict[str, Any]) -> QueueState:
            row = c.execute(
                "DELETE FROM imapmig_queue.jobs WHERE " + _KNOWN + " AND state <> 'claimed'"
                " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                values,
            ).fetchone() or c.execute(
                "UPDATE imapmig_queue.jobs SET requested = 'remove'"
                " WHERE " + _KNOWN + " AND state = 'claimed' RETURNING state",
                values,
            ).fetchone()
            if row is None:
                raise UnknownJob(name)
            return QueueState(row[0])

        return self._changeJob(name, self._list.without(name), removed)

    def replace(self, job: JobConfig) -> QueueState:
        def replaced(c: Connection, values: dict[str, Any]) -> QueueState:
            row = c.execute(
                "UPDATE imapmig_queue.jobs SET digest = %(digest)s WHERE " + _KNOWN +
                " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                values,
            ).fetchone()
            if row is None:
                raise UnknownJob(job.name)
            return QueueState(row[0])

        return self._changeJob(job.name, self._list.withJob(job), replaced)


class ThreadedJobQueue:
    """
    A L{PostgreSQLJobQueue} whose calls run in a thread pool, each
    returning a L{Deferred} fired in the reactor's thread.
    """

    def __init__(
        self, queue: PostgreSQLJobQueue, reactor: IReactorFromThreads, pool: ThreadPool
    ) -> None:
        """
        @param pool: a started thread pool (at most 3 threads: one
            connection each, docs/fleet-design.md "The thread pool").
        """
        self.queue = queue
        self._reactor = reactor
        self._pool = pool

    def _inThread(self, call: Callable[..., _T], *args: Any) -> Deferred[_T]:
        return deferToThreadPool(self._reactor, self._pool, call, *args)

    def register(self, host: str, pid: int, version: str, lease: float) -> Deferred[str]:
        """
        L{PostgreSQLJobQueue.register} in a thread.
        """
        return self._inThread(self.queue.register, host, pid, version, lease)

    def heartbeat(self, owner: str, lease: float) -> Deferred[Heartbeat]:
        """
        L{PostgreSQLJobQueue.heartbeat} in a thread.
        """
        return self._inThread(self.queue.heartbeat, owner, lease)

    def claim(self, owner: str, now: float, lease: float) -> Deferred[JobClaim | None]:
        """
        L{PostgreSQLJobQueue.claim} in a thread.
        """
        return self._inThread(self.queue.claim, owner, now, lease)

    def finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> Deferred[None]:
        """
        L{PostgreSQLJobQueue.finish} in a thread.
        """
        return self._inThread(self.queue.finish, claim, outcome, notBefore)

    def replaceList(self, jobs: Sequence[JobConfig]) -> Deferred[ListChange]:
        """
        L{PostgreSQLJobQueue.replaceList} in a thread.
        """
        return self._inThread(self.queue.replaceList, jobs)
