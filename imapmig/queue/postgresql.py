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

A claim takes no job sharing an account (C{'server/user'}, its
C{accounts}) with a job another daemon holds, so one daemon at a time runs
an account's jobs.  A daemon's row is deleted a day after its lease
ended, once no job names it.  The counts are kept by triggers, so that
reading them costs the same at a million jobs as at a thousand.

Not yet here: fencing of journal writes (the state store's), the jobs'
configurations in the database (a job another daemon's reload added is
unknown here), and the wiring into the daemon.

L{PostgreSQLJobQueue} is synchronous (psycopg 3's synchronous API, one
connection, the daemon's control connection of
L{imapmig.state.pgconnect}, a lock around it); L{ThreadedJobQueue} is
L{IAsyncJobQueue}: its calls run one at a time in a thread pool
(C{deferToThreadPool}, the reactor and pool injected) so the reactor
never blocks.  New beside L{imapmig.queue.memory}: that one holds
the queue in one process, nothing could share it.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable, Mapping, Sequence, TypeVar

import psycopg
from attrs import evolve
from psycopg.types.json import Jsonb
from twisted.internet.defer import Deferred, DeferredLock, fail
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from imapmig.config.model import ImapSourceConfig, JobConfig
from imapmig.errors import ControlRefused, LeaseLost, PermanentError, QueueUnavailable, UnknownJob
from imapmig.queue import (
    Heartbeat,
    IAsyncJobQueue,
    IJobQueue,
    JobClaim,
    JobOutcome,
    LiveDaemon,
    QueueCounts,
    QueueState,
    Requested,
)
from imapmig.queue._pgschema import migrate
from imapmig.state.pgconnect import Connection, Connector

_T = TypeVar("_T")

_REGISTER = """
INSERT INTO imapmig_queue.daemons
  (daemon_id, incarnation, host, pid, version, started_at, heartbeat_at, lease_until)
VALUES (%(me)s, nextval('imapmig_queue.incarnations'), %(host)s, %(pid)s, %(version)s,
        now(), now(), now() + make_interval(secs => %(lease)s))
"""

# A claim renews its daemon's lease, and only a live one.
_RENEW = """
UPDATE imapmig_queue.daemons
   SET lease_until = now() + make_interval(secs => %(lease)s), heartbeat_at = now()
 WHERE daemon_id = %(me)s AND lease_until > now()
RETURNING extract(epoch FROM lease_until)::float8
"""

# One statement, one row written (the daemon's) however many jobs it holds:
# the controls asked read through jobs_asked (only a claimed job has one;
# a test of the state would let jobs_claimed, all the jobs held, be read),
# the live daemons from their small table, this one's row as the UPDATE
# left it (the snapshot holds it as before).  {fleet}: the job list's
# generation once the fleet's table exists (imapmig.queue._pgjoblist).
_HEARTBEAT = """
WITH beat AS (
  UPDATE imapmig_queue.daemons
     SET lease_until = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
         connections = coalesce(%(connections)s::jsonb, connections)
   WHERE daemon_id = %(me)s AND lease_until > now()
  RETURNING lease_until, connections)
SELECT extract(epoch FROM beat.lease_until)::float8,
       (SELECT jsonb_agg(jsonb_build_array(name, requested, requested_by))
          FROM imapmig_queue.jobs
         WHERE owner = %(me)s AND requested IN ('pause', 'cancel', 'rerun')),
       (SELECT max(version) FROM imapmig_queue.schema_version),
       {fleet},
       (SELECT jsonb_agg(jsonb_build_array(daemon_id, connections)) FROM imapmig_queue.daemons
         WHERE lease_until > now() AND daemon_id <> %(me)s),
       beat.connections
  FROM beat
"""

_FLEET = "(SELECT jobs_generation FROM imapmig_queue.fleet)"

# The jobs of daemons whose lease ran out go back to the queue (or to the
# hold asked of them), found by those daemons' ids in jobs_claimed (the ids
# an InitPlan: as a join, the planner read every claimed job instead).  A
# job whose daemon has no row (deleted by hand): _ORPHANS, at registration.
_RELEASE = """
UPDATE imapmig_queue.jobs j
   SET state = CASE j.requested WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled'
                    ELSE 'queued' END,
       owner = NULL, requested = NULL, requested_by = NULL,
       taken_from = x.owner, taken_lease_until = x.lease_until
  FROM (SELECT c.job_id, c.owner, d.lease_until
          FROM imapmig_queue.jobs c JOIN imapmig_queue.daemons d ON d.daemon_id = c.owner
         WHERE c.state = 'claimed' AND c.owner = ANY (ARRAY(
                 SELECT daemon_id FROM imapmig_queue.daemons WHERE lease_until < now()))
           FOR UPDATE OF c SKIP LOCKED) x
 WHERE j.job_id = x.job_id
"""

_ORPHANS = """
UPDATE imapmig_queue.jobs j
   SET state = CASE j.requested WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled'
                    ELSE 'queued' END,
       owner = NULL, requested = NULL, requested_by = NULL, taken_from = j.owner
 WHERE j.state = 'claimed'
   AND NOT EXISTS (SELECT 1 FROM imapmig_queue.daemons d WHERE d.daemon_id = j.owner)
"""

# A daemon's row goes a day after its lease ended, once no job names it
# (a job names its owner while claimed only): a few rows of a small table.
_PRUNE = """
DELETE FROM imapmig_queue.daemons d
 WHERE d.lease_until < now() - interval '1 day'
   AND NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs j
                    WHERE j.owner = d.daemon_id AND j.state = 'claimed')
"""

_DUE = """
UPDATE imapmig_queue.jobs SET state = 'queued', not_before = NULL
 WHERE state = 'deferred' AND not_before <= to_timestamp(%(now)s)
"""

_CLAIM_LOCK = 7146055301937135412
"""
The advisory lock a claim's last statement runs under: claims one at a
time, so that the account test of each sees every claim committed before
it (two claims racing would each miss the other's).
"""

# The first queued job none of whose accounts another daemon's claimed
# job has (docs/fleet-design.md "Claiming a job": one daemon per account).
_CLAIM = """
WITH next AS (
  SELECT job_id, taken_from FROM imapmig_queue.jobs q
   WHERE state = 'queued'
     AND NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs c
                      WHERE c.state = 'claimed' AND c.owner <> %(me)s
                        AND c.accounts && q.accounts)
   ORDER BY position LIMIT 1
   FOR UPDATE SKIP LOCKED)
UPDATE imapmig_queue.jobs j
   SET state = 'claimed', owner = %(me)s, generation = j.generation + 1,
       requested = NULL, requested_by = NULL, taken_from = NULL, taken_lease_until = NULL
  FROM next WHERE j.job_id = next.job_id
RETURNING j.name, j.position, j.generation, next.taken_from
"""

# The counts by state are the sum of job_counts' rows, which the jobs'
# triggers add to (imapmig.queue._pgschema); this folds them into one row
# per state, so that they stay a handful.
_FOLD_COUNTS = """
WITH gone AS (DELETE FROM imapmig_queue.job_counts RETURNING state, n)
INSERT INTO imapmig_queue.job_counts
SELECT state, sum(n) FROM gone GROUP BY state HAVING sum(n) <> 0
"""

_COUNTS = "SELECT state, sum(n)::bigint FROM imapmig_queue.job_counts GROUP BY state"

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
       owner = NULL, requested = NULL, requested_by = NULL
  FROM imapmig_queue.daemons d WHERE"""
    + _CURRENT
)

_RENEWED = (
    "SELECT nullif(j.requested, 'remove') FROM imapmig_queue.jobs j, imapmig_queue.daemons d"
    " WHERE" + _CURRENT
)

# Rows a reload removed while claimed are unknown to the controls.
_KNOWN = "name = %(name)s AND requested IS DISTINCT FROM 'remove'"


def accountsOf(job: JobConfig) -> list[str]:
    """
    The accounts job C{job} connects to, as C{'server/user'} keys (its
    destination's, and its source's when that is an IMAP account): no two
    daemons run jobs sharing one at once.
    """
    accounts = {f"{job.destination.server.name}/{job.destination.user}"}
    if isinstance(job.source, ImapSourceConfig):
        accounts.add(f"{job.source.server.name}/{job.source.user}")
    return sorted(accounts)


def _requests(rows: list[list[str | None]] | None) -> tuple[
    tuple[tuple[str, Requested], ...], tuple[tuple[str, str], ...]
]:
    """
    The heartbeat's controls asked (C{[name, requested, requested_by]}
    rows) as L{Heartbeat.requests} and L{Heartbeat.requestedBy}.
    """
    asked = sorted((name, requested, by) for name, requested, by in rows or () if name and requested)
    return (
        tuple((name, Requested(requested)) for name, requested, _ in asked),
        tuple((name, by) for name, _, by in asked if by is not None),
    )


def _live(me: str, mine: Mapping[str, int], others: list[list[Any]] | None) -> tuple[LiveDaemon, ...]:
    """
    The live daemons, this one (C{me}, its connections C{mine}) among
    C{others} (C{[daemon_id, connections]} rows), sorted by id.
    """
    daemons = [(me, mine)] + [(str(daemon), connections) for daemon, connections in others or ()]
    return tuple(
        LiveDaemon(daemon, tuple(sorted((server, int(n)) for server, n in connections.items())))
        for daemon, connections in sorted(daemons)
    )


@implementer(IJobQueue)
class PostgreSQLJobQueue:
    """
    The configured jobs as rows of C{imapmig_queue.jobs}, claimed by the
    daemons of a fleet under leases timed by the database's clock.

    Each method blocks on the database: call them through
    L{ThreadedJobQueue}.  The jobs' configurations are this process's
    (C{jobs}, then C{add} and C{replace}): the rows hold names, places and
    accounts.

    One connection, the daemon's I{control} connection
    (L{imapmig.state.pgconnect}: statements and lock waits of 5 s at
    most), behind a lock.  It is opened when first needed and again after
    it broke (a database restart, a partition): a call that finds the
    database unreachable, or times out, fails with L{QueueUnavailable}
    naming the database without its password, and the next call connects
    again; other errors of the database are L{PermanentError}s.
    """

    def __init__(self, connector: Connector, jobs: Sequence[JobConfig]) -> None:
        """
        @param connector: opens the control connection.
        @param jobs: the configured jobs, in configuration order: the
            claims name them, and L{load} makes their rows.
        """
        self._connector = connector
        self._connection: Connection | None = None
        self._closed = False
        self._fleet = False
        self._jobs = jobs
        self._byName: dict[str, JobConfig] | None = None
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls, uri: str, jobs: Sequence[JobConfig], password: str | None = None
    ) -> PostgreSQLJobQueue:
        """
        Open the control connection to C{uri} (a libpq URI, without a
        password: C{password} is given apart), migrate the queue's tables
        and load C{jobs}' rows.

        @raise QueueUnavailable: the database could not be reached (at a
            daemon's start, as fatal as any other error).
        @raise PermanentError: it refused (a wrong password or database, no
            permission).
        """
        queue = cls(Connector(uri, "control", password), jobs)
        queue.load()
        return queue

    def __repr__(self) -> str:
        return f"<PostgreSQLJobQueue {self.where}>"

    @property
    def where(self) -> str:
        """
        The database, as messages name it (no password).
        """
        return self._connector.where

    @property
    def closed(self) -> bool:
        """
        Whether L{close} was called.
        """
        return self._closed

    def close(self) -> None:
        """
        Close the connection (now, or once the call running ends); later
        calls fail with L{PermanentError}.
        """
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._disconnect()
            finally:
                self._lock.release()

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _use(self, action: str, work: Callable[[Connection], _T]) -> _T:
        """
        Call C{work} with the connection, opened if it is not; its errors
        as imapmig's.
        """
        with self._lock:
            try:
                if self._closed:
                    raise PermanentError(f"{self._connector.where}: the job queue is closed")
                if self._connection is None or self._connection.closed:
                    self._connection = self._connector.connect()
                return work(self._connection)
            except psycopg.Error as e:
                if self._connection is not None and self._connection.broken:
                    self._disconnect()
                raise self._connector.error(action, e, QueueUnavailable) from None
            finally:
                if self._closed:
                    self._disconnect()

    def _run(self, action: str, work: Callable[[Connection], _T]) -> _T:
        """
        Run C{work} with the connection, in one transaction.
        """

        def transaction(c: Connection) -> _T:
            with c.transaction():
                return work(c)

        return self._use(action, transaction)

    def load(self) -> None:
        """
        Migrate the queue's tables, and add a row for each configured job
        that has none, at its place in the configuration (one statement).
        """
        self._use("migrate the job queue", lambda c: migrate(c, "imapmig queue"))
        names = [job.name for job in self._jobs]
        accounts = ["{" + ",".join(_quoted(a) for a in accountsOf(job)) + "}" for job in self._jobs]

        def loaded(c: Connection) -> None:
            # A million rows take longer than a control may (5 s).
            c.execute("SET LOCAL statement_timeout = '10min'")
            c.execute(
                "INSERT INTO imapmig_queue.jobs (name, position, accounts)"
                " SELECT n, p, a::text[] FROM unnest(%s::text[], %s::bigint[], %s::text[]) u(n, p, a)"
                " ON CONFLICT (name) DO NOTHING",
                (names, list(range(len(names))), accounts),
            )

        self._run("load the jobs", loaded)

    def _named(self) -> dict[str, JobConfig]:
        """
        The configuration of every job, by name (made on first use).
        """
        if self._byName is None:
            self._byName = {job.name: job for job in self._jobs}
        return self._byName

    def _job(self, name: str) -> JobConfig:
        return self._named()[name]

    def register(self, host: str, pid: int, version: str, lease: float) -> str:
        me = str(uuid.uuid4())
        values = {"me": me, "host": host, "pid": pid, "version": version, "lease": lease}

        def registered(c: Connection) -> None:
            c.execute(_REGISTER, values)
            c.execute(_ORPHANS)
            self._connector.named(me, c)

        self._run("register the daemon", registered)
        return me

    def retire(self, owner: str) -> None:
        """
        End the lease of daemon C{owner} now, so that the other daemons
        take its jobs at once (see
        L{IAsyncJobQueue.retire<imapmig.queue.IAsyncJobQueue.retire>}).
        """
        self._run(
            "retire the daemon",
            lambda c: c.execute(
                "UPDATE imapmig_queue.daemons"
                " SET lease_until = least(lease_until, now()), retired_at = coalesce(retired_at, now())"
                " WHERE daemon_id = %s",
                (owner,),
            ),
        )

    def heartbeat(
        self, owner: str, lease: float, connections: Mapping[str, int] | None = None
    ) -> Heartbeat:
        """
        See L{IJobQueue.heartbeat}.

        @param connections: the connections this daemon has open per
            server, recorded for the other daemons' shares (L{None}: as at
            the last heartbeat).
        """
        values = {
            "me": owner,
            "lease": lease,
            "connections": None if connections is None else Jsonb(dict(connections)),
        }

        def beat(c: Connection) -> tuple[Any, ...] | None:
            if not self._fleet:
                found = c.execute("SELECT to_regclass('imapmig_queue.fleet')").fetchone()
                self._fleet = found is not None and found[0] is not None
            sql = _HEARTBEAT.format(fleet=_FLEET if self._fleet else "NULL::bigint")
            return c.execute(sql, values).fetchone()

        row = self._run("renew the daemon's lease", beat)
        if row is None:
            raise LeaseLost(f"daemon {owner}'s lease ran out")
        leaseUntil, asked, version, generation, others, mine = row
        requests, requestedBy = _requests(asked)
        return Heartbeat(
            leaseUntil,
            requests,
            requestedBy,
            schemaVersion=version,
            jobsGeneration=generation,
            live=_live(owner, mine, others),
        )

    def claim(self, owner: str, now: float, lease: float) -> JobClaim | None:
        def claimNext(c: Connection) -> JobClaim | None:
            beat = c.execute(_RENEW, {"me": owner, "lease": lease}).fetchone()
            if beat is None:
                raise LeaseLost(f"daemon {owner}'s lease ran out")
            c.execute(_LEAVE_EXPIRED)
            c.execute(_RELEASE)
            c.execute(_DUE, {"now": now})
            c.execute(_PRUNE)
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_CLAIM_LOCK,))
            c.execute(_FOLD_COUNTS)
            row = c.execute(_CLAIM, {"me": owner}).fetchone()
            if row is None:
                return None
            name, position, generation, takenFrom = row
            return JobClaim(
                self._job(name), position, owner, beat[0], generation,
                takenFrom=None if takenFrom is None else str(takenFrom),
            )  # fmt: skip

        return self._run("claim a job", claimNext)

    def _current(self, claim: JobClaim) -> dict[str, object]:
        return {"name": claim.job.name, "me": claim.owner, "generation": claim.generation}

    def renew(self, claim: JobClaim, lease: float) -> JobClaim:
        def renewed(c: Connection) -> JobClaim:
            beat = c.execute(_RENEW, {"me": claim.owner, "lease": lease}).fetchone()
            row = c.execute(_RENEWED, self._current(claim)).fetchone()
            if beat is None or row is None:
                raise LeaseLost(f"job {claim.job.name} was taken over")
            return evolve(
                claim, leaseUntil=beat[0], requested=None if row[0] is None else Requested(row[0])
            )

        return self._run("renew a claim", renewed)

    def finish(self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        values = dict(self._current(claim), outcome=outcome.value, notBefore=notBefore)

        def release(c: Connection) -> None:
            if not c.execute(_LEAVE + _CURRENT, values).rowcount:
                c.execute(_FINISH, values)

        self._run("finish a job", release)

    def nextDue(self) -> float | None:
        row = self._run(
            "read the deferred jobs",
            lambda c: c.execute(
                "SELECT extract(epoch FROM min(not_before))::float8 FROM imapmig_queue.jobs"
                " WHERE state = 'deferred'"
            ).fetchone(),
        )
        return None if row is None else row[0]

    def counts(self) -> QueueCounts:
        def counted(c: Connection) -> list[tuple[Any, ...]]:
            c.execute(_FOLD_COUNTS)
            return c.execute(_COUNTS).fetchall()

        by: dict[str, int] = dict(self._run("count the jobs", counted))
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
            "read a job's state",
            lambda c: c.execute(
                "SELECT state FROM imapmig_queue.jobs WHERE " + _KNOWN, {"name": name}
            ).fetchone(),
        )
        if row is None:
            raise UnknownJob(name)
        return QueueState.QUEUED if row[0] == "deferred" else QueueState(row[0])

    def _control(self, name: str, sql: str, refusal: str, by: str | None = None) -> QueueState:
        """
        Apply a control: C{sql} updates the job's row and returns its new
        state, or no row when the control does not apply.

        @param by: who asked (the name an admin gave on a page), kept with
            a request of a claimed job for its owner's heartbeat.
        """
        row = self._run(
            "control a job", lambda c: c.execute(sql, {"name": name, "by": by}).fetchone()
        )
        if row is None:
            self.state(name)
            raise ControlRefused(f"job {name} {refusal}")
        return QueueState(row[0])

    def pause(self, name: str, by: str | None = None) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'paused' END,"
            " requested = CASE state WHEN 'claimed' THEN 'pause' END,"
            " requested_by = CASE state WHEN 'claimed' THEN %(by)s END"
            " WHERE " + _KNOWN + " AND (state IN ('queued', 'deferred')"
            "  OR (state = 'claimed' AND requested IS DISTINCT FROM 'cancel')) RETURNING state",
            "is not queued or running",
            by,
        )

    def resume(self, name: str, by: str | None = None) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed'"
            "   WHEN 'paused' THEN CASE WHEN not_before IS NULL THEN 'queued' ELSE 'deferred' END"
            "   ELSE 'queued' END,"
            " requested = NULL, requested_by = NULL"
            " WHERE " + _KNOWN + " AND (state IN ('paused', 'cancelled')"
            "  OR (state = 'claimed' AND requested = 'pause'))"
            " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
            "is not paused or cancelled",
            by,
        )

    def cancel(self, name: str, by: str | None = None) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'cancelled' END,"
            " requested = CASE state WHEN 'claimed' THEN 'cancel' END,"
            " requested_by = CASE state WHEN 'claimed' THEN %(by)s END,"
            " not_before = CASE state WHEN 'claimed' THEN not_before END"
            " WHERE " + _KNOWN + " AND state IN ('queued', 'deferred', 'paused', 'claimed')"
            " RETURNING state",
            "has ended",
            by,
        )

    def requeue(self, name: str, by: str | None = None) -> QueueState:
        return self._control(
            name,
            "UPDATE imapmig_queue.jobs SET"
            " state = CASE WHEN state IN ('done', 'failed') THEN 'queued' ELSE state END,"
            " requested_by = CASE WHEN state = 'claimed' AND requested IS NULL THEN %(by)s"
            "   ELSE requested_by END,"
            " requested = CASE state WHEN 'claimed' THEN coalesce(requested, 'rerun') END"
            " WHERE " + _KNOWN + " AND state <> 'cancelled'"
            " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
            "was cancelled",
            by,
        )

    def add(self, job: JobConfig) -> None:
        values = {"name": job.name, "accounts": accountsOf(job)}

        def added(c: Connection) -> bool:
            kept = c.execute(
                "UPDATE imapmig_queue.jobs SET requested = NULL, accounts = %(accounts)s"
                " WHERE name = %(name)s AND requested = 'remove'",
                values,
            ).rowcount
            return kept > 0 or (
                c.execute(
                    "INSERT INTO imapmig_queue.jobs (name, position, accounts)"
                    " SELECT %(name)s, coalesce(max(position) + 1, 0), %(accounts)s"
                    " FROM imapmig_queue.jobs ON CONFLICT (name) DO NOTHING",
                    values,
                ).rowcount
                > 0
            )

        if not self._run("add a job", added):
            raise ValueError(f"job {job.name} is queued already")
        self._named()[job.name] = job

    def remove(self, name: str) -> QueueState:
        def removed(c: Connection) -> tuple[Any, ...] | None:
            values = {"name": name}
            return c.execute(
                "DELETE FROM imapmig_queue.jobs WHERE " + _KNOWN + " AND state <> 'claimed'"
                " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                values,
            ).fetchone() or c.execute(
                "UPDATE imapmig_queue.jobs SET requested = 'remove'"
                " WHERE " + _KNOWN + " AND state = 'claimed' RETURNING state",
                values,
            ).fetchone()

        row = self._run("remove a job", removed)
        if row is None:
            raise UnknownJob(name)
        return QueueState(row[0])

    def replace(self, job: JobConfig) -> QueueState:
        row = self._run(
            "replace a job",
            lambda c: c.execute(
                "UPDATE imapmig_queue.jobs SET accounts = %(accounts)s WHERE " + _KNOWN
                + " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                {"name": job.name, "accounts": accountsOf(job)},
            ).fetchone(),
        )  # fmt: skip
        if row is None:
            raise UnknownJob(job.name)
        self._named()[job.name] = job
        return QueueState(row[0])


def _quoted(element: str) -> str:
    """
    C{element} as an element of a PostgreSQL array literal.
    """
    return '"' + element.replace("\\", "\\\\").replace('"', '\\"') + '"'


@implementer(IAsyncJobQueue)
class ThreadedJobQueue:
    """
    A L{PostgreSQLJobQueue} whose calls run in a thread pool, one at a
    time (the queue has one connection: a call waits in the reactor, not
    in a thread the state store needs), each returning a L{Deferred} fired
    in the reactor's thread.
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
        self._turn = DeferredLock()

    def _inThread(self, call: Callable[..., _T], *args: Any) -> Deferred[_T]:
        if self.queue.closed:
            return fail(PermanentError(f"{self.queue.where}: the job queue is closed"))
        return self._turn.run(deferToThreadPool, self._reactor, self._pool, call, *args)

    def register(self, host: str, pid: int, version: str, lease: float) -> Deferred[str]:
        """L{PostgreSQLJobQueue.register} in a thread."""
        return self._inThread(self.queue.register, host, pid, version, lease)

    def heartbeat(
        self, owner: str, lease: float, connections: Mapping[str, int] | None = None
    ) -> Deferred[Heartbeat]:
        """L{PostgreSQLJobQueue.heartbeat} in a thread."""
        return self._inThread(self.queue.heartbeat, owner, lease, connections)

    def retire(self, owner: str) -> Deferred[None]:
        """L{PostgreSQLJobQueue.retire} in a thread."""
        return self._inThread(self.queue.retire, owner)

    def claim(self, owner: str, now: float, lease: float) -> Deferred[JobClaim | None]:
        """L{PostgreSQLJobQueue.claim} in a thread."""
        return self._inThread(self.queue.claim, owner, now, lease)

    def finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> Deferred[None]:
        """L{PostgreSQLJobQueue.finish} in a thread."""
        return self._inThread(self.queue.finish, claim, outcome, notBefore)

    def nextDue(self) -> Deferred[float | None]:
        """L{PostgreSQLJobQueue.nextDue} in a thread."""
        return self._inThread(self.queue.nextDue)

    def counts(self) -> Deferred[QueueCounts]:
        """L{PostgreSQLJobQueue.counts} in a thread."""
        return self._inThread(self.queue.counts)

    def state(self, name: str) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.state} in a thread."""
        return self._inThread(self.queue.state, name)

    def pause(self, name: str, by: str | None = None) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.pause} in a thread."""
        return self._inThread(self.queue.pause, name, by)

    def resume(self, name: str, by: str | None = None) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.resume} in a thread."""
        return self._inThread(self.queue.resume, name, by)

    def cancel(self, name: str, by: str | None = None) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.cancel} in a thread."""
        return self._inThread(self.queue.cancel, name, by)

    def requeue(self, name: str, by: str | None = None) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.requeue} in a thread."""
        return self._inThread(self.queue.requeue, name, by)

    def add(self, job: JobConfig) -> Deferred[None]:
        """L{PostgreSQLJobQueue.add} in a thread."""
        return self._inThread(self.queue.add, job)

    def remove(self, name: str) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.remove} in a thread."""
        return self._inThread(self.queue.remove, name)

    def replace(self, job: JobConfig) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.replace} in a thread."""
        return self._inThread(self.queue.replace, job)

    def close(self) -> None:
        """
        L{PostgreSQLJobQueue.close}: later calls fail with
        L{PermanentError}.
        """
        self.queue.close()
