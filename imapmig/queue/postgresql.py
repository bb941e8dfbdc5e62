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
fleet's.  A claim takes no job sharing an account (C{'server/user'}, its
C{accounts}) with a job another daemon holds, so one daemon at a time runs
an account's jobs.  A daemon's row is deleted a day after its lease
ended, once no job names it.  The counts are kept by triggers, so that
reading them costs the same at a million jobs as at a thousand.  The
statements are L{imapmig.queue._pgstatements}'.

Not yet here: fencing of journal writes (the state store's), the jobs'
configurations in the database, and the wiring into the daemon.

L{PostgreSQLJobQueue} is synchronous (psycopg 3's synchronous API, one
connection, the daemon's control connection of
L{imapmig.state.pgconnect}, a lock around it); L{ThreadedJobQueue} is
L{IAsyncJobQueue}: its calls run one at a time in a thread pool
(C{deferToThreadPool}, the reactor and pool injected) so the reactor
never blocks.  New beside L{imapmig.queue.memory}: that one holds
the queue in one process, nothing could share it.
"""

from __future__ import annotations

import socket
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

from imapmig.config.model import JobConfig, UserList
from imapmig.errors import (
    ConfigError,
    ControlRefused,
    JobListStale,
    LeaseLost,
    PermanentError,
    QueueUnavailable,
    UnknownJob,
)
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
from imapmig.queue._pgjoblist import (
    JobList,
    ListChange,
    accountsOf,
    changeList,
    joinFleet,
    readFleet,
    replaceJobList,
    staleList,
)
from imapmig.queue._pgcontrols import (
    BULK_PART,
    controlAll,
    controlAllAsync,
    controlMany,
    controlOne,
)
from imapmig.queue._pgschema import migrate
from imapmig.queue._pgstatements import (
    ADD_KEPT,
    ADD_NEW,
    CLAIM,
    COUNTS,
    CURRENT,
    FINISHED,
    FOLD_COUNTS,
    GIVE_BACK,
    HEARTBEAT,
    HELD,
    KNOWN,
    LEAVE,
    LEAVING,
    ORPHANS,
    REGISTER,
    RENEW,
    RENEWED,
    UNBUILT,
    beforeClaim,
)
from imapmig.state.pgconnect import Connection, Connector

_T = TypeVar("_T")

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


def _giveBack(c: Connection, owner: str, known: frozenset[str]) -> list[str]:
    """
    Give back the jobs C{owner} holds whose names are not in C{known}, each
    if still that claim; their names.
    """
    names = []
    for name, generation in c.execute(HELD, {"me": owner}).fetchall():
        if name in known:
            continue
        values = {
            "name": name, "me": owner, "generation": generation,
            "outcome": JobOutcome.STOPPED.value, "notBefore": None,
        }  # fmt: skip
        if c.execute(LEAVE + CURRENT, values).rowcount or c.execute(GIVE_BACK, values).rowcount:
            names.append(name)
    return names


@implementer(IJobQueue)
class PostgreSQLJobQueue:
    """
    The configured jobs as rows of C{imapmig_queue.jobs}, claimed by the
    daemons of a fleet under leases timed by the database's clock.

    Each method blocks on the database: call them through
    L{ThreadedJobQueue}.  The jobs' configurations are this process's
    (C{jobs}, then C{add}, C{replace} and C{replaceList}): the rows hold
    names, places, digests and accounts.

    One connection, the daemon's I{control} connection
    (L{imapmig.state.pgconnect}: statements and lock waits of 5 s at
    most), behind a lock.  It is opened when first needed and again after
    it broke (a database restart, a partition): a call that finds the
    database unreachable, or times out, fails with L{QueueUnavailable}
    naming the database without its password, and the next call connects
    again; other errors of the database are L{PermanentError}s.
    """

    def __init__(
        self,
        connector: Connector,
        jobs: Sequence[JobConfig],
        fleet: str = "imapmig",
        userLists: Sequence[UserList] = (),
    ) -> None:
        """
        @param connector: opens the control connection.
        @param jobs: the configured jobs, in configuration order: the
            claims name them, and L{load} makes their rows.
        @param fleet: the fleet's name (the configuration's C{fleet.name}).
        @param userLists: the user lists not expanded into C{jobs}
            (C{Config.userLists}), after them: their rows are read only
            when L{load} loads them, and a claimed row's job is built from
            its template and params.
        """
        self._connector = connector
        self._connection: Connection | None = None
        self._closed = False
        self._list = JobList.of(jobs, userLists)
        self._fleet = fleet
        self._by = socket.gethostname()
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        uri: str,
        jobs: Sequence[JobConfig],
        fleet: str = "imapmig",
        password: str | None = None,
        userLists: Sequence[UserList] = (),
    ) -> PostgreSQLJobQueue:
        """
        Open the control connection to C{uri} (a libpq URI, without a
        password: C{password} is given apart), migrate the queue's tables
        and load C{jobs} as fleet C{fleet}'s list (L{load}).

        @raise QueueUnavailable: the database could not be reached (at a
            daemon's start, as fatal as any other error).
        @raise PermanentError: it refused (a wrong password or database, no
            permission).
        @raise FleetMismatch: it holds another fleet, or another list.
        """
        queue = cls(Connector(uri, "control", password), jobs, fleet, userLists)
        try:
            queue.load()
        except BaseException:
            queue.close()
            raise
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
        Migrate the queue's tables and, in the same transaction, load the
        configured jobs as the fleet's list, or check that the database
        holds this fleet's with this list (L{joinFleet}).

        @raise FleetMismatch: it holds another fleet, or another list.
        """

        def loaded(c: Connection) -> None:
            # A million rows take longer than a control may (5 s).
            c.execute("SET LOCAL statement_timeout = '10min'")
            migrate(c, "imapmig queue")
            joinFleet(c, self._fleet, self._list, self._by)

        self._run("load the jobs", loaded)

    def replaceList(
        self, jobs: Sequence[JobConfig], userLists: Sequence[UserList] = ()
    ) -> ListChange:
        """
        Make C{jobs} and C{userLists} the fleet's list (a reload of this
        daemon), and this queue's configurations (L{replaceJobList}).

        @raise FleetMismatch: the database holds another fleet.
        """
        new = JobList.of(jobs, userLists)

        def replaced(c: Connection) -> ListChange:
            c.execute("SET LOCAL statement_timeout = '10min'")
            return replaceJobList(c, self._fleet, new, self._by)

        change = self._run("replace the job list", replaced)
        self._list = new
        return change

    def listDiffers(self) -> str | None:
        """
        Why this daemon claims nothing, when a reload elsewhere made the
        fleet's list another than its own (for its log and page at each
        new generation, which its heartbeat brings back); else L{None}.
        """
        return staleList(self._run("read the fleet's list", readFleet), self._list)

    def _job(self, name: str) -> JobConfig:
        return self._list.byName[name]

    def register(self, host: str, pid: int, version: str, lease: float) -> str:
        me = str(uuid.uuid4())
        values = {"me": me, "host": host, "pid": pid, "version": version, "lease": lease}

        def registered(c: Connection) -> None:
            c.execute(REGISTER, values)
            c.execute(ORPHANS)

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
        self, owner: str, lease: float, connections: Mapping[str, int] | None = None,
        rate: float | None = None,
    ) -> Heartbeat:  # fmt: skip
        """
        See L{IJobQueue.heartbeat}.

        @param connections: the connections this daemon has open per
            server, for the other daemons' shares, and C{rate} its messages
            per second over the last minute, for the fleet's pages, both
            recorded (L{None}: as at the last heartbeat).
        """
        values = {
            "me": owner,
            "lease": lease,
            "connections": None if connections is None else Jsonb(dict(connections)),
            "rate": rate,
        }

        row = self._run(
            "renew the daemon's lease", lambda c: c.execute(HEARTBEAT, values).fetchone()
        )
        if row is None:
            raise LeaseLost(f"daemon {owner}'s lease ran out")
        leaseUntil, asked, version, generation, others, mine, stateVersion = row
        requests, requestedBy = _requests(asked)
        return Heartbeat(
            leaseUntil,
            requests,
            requestedBy,
            schemaVersion=version,
            jobsGeneration=generation,
            live=_live(owner, mine, others),
            stateSchemaVersion=stateVersion,
        )

    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> JobClaim | None:
        def claimNext(c: Connection) -> JobClaim | tuple[str, ...] | None:
            beat = c.execute(RENEW, {"me": owner, "lease": lease}).fetchone()
            if beat is None:
                raise LeaseLost(f"daemon {owner}'s lease ran out")
            c.execute(beforeClaim(now))
            row = c.execute(
                CLAIM, {"me": owner, "list": self._list.digest, "skip": sorted(skipServers)}
            ).fetchone()
            if row is None:
                return None
            name, position, generation, takenFrom, digest, template, params, since, cut = row
            try:
                job = self._list.claimed(name, digest, template, params)
            except ConfigError as e:
                # A row whose job cannot be built (its password file
                # gone): failed, not claimed first again at every claim.
                c.execute(UNBUILT, {"name": name})
                return e.problems
            return JobClaim(
                job, position, owner, beat[0], generation,
                takenFrom=None if takenFrom is None else str(takenFrom),
                quietFor=None if since is None else since + (0.0 if cut else lease / 4),
            )  # fmt: skip

        try:
            claimed = self._run("claim a job", claimNext)
        except JobListStale:
            # A reload replaced the list during the claim: rolled back.
            return None
        if isinstance(claimed, tuple):
            raise PermanentError(
                "a job of the fleet's list cannot be built here, and failed (requeue it once"
                f" fixed): {'; '.join(claimed)}"
            )
        return claimed

    def _current(self, claim: JobClaim) -> dict[str, object]:
        return {"name": claim.job.name, "me": claim.owner, "generation": claim.generation}

    def renew(self, claim: JobClaim, lease: float) -> JobClaim:
        def renewed(c: Connection) -> JobClaim:
            beat = c.execute(RENEW, {"me": claim.owner, "lease": lease}).fetchone()
            row = c.execute(RENEWED, self._current(claim)).fetchone()
            if beat is None or row is None:
                raise LeaseLost(f"job {claim.job.name} was taken over")
            return evolve(
                claim, leaseUntil=beat[0], requested=None if row[0] is None else Requested(row[0])
            )

        return self._run("renew a claim", renewed)

    def finish(self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None) -> None:
        values = dict(self._current(claim), outcome=outcome.value, notBefore=notBefore)
        self._use("finish a job", lambda c: c.execute(FINISHED, values))

    def giveBack(self, owner: str, known: frozenset[str]) -> list[str]:
        "See L{IAsyncJobQueue.giveBack<imapmig.queue.IAsyncJobQueue.giveBack>}."
        return self._run("give back unknown claims", lambda c: _giveBack(c, owner, known))

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
            c.execute(FOLD_COUNTS)
            return c.execute(COUNTS).fetchall()

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
                "SELECT state FROM imapmig_queue.jobs WHERE " + KNOWN, {"name": name}
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
        return self._control(name, controlOne("pause"), "is not queued or running", by)

    def resume(self, name: str, by: str | None = None) -> QueueState:
        return self._control(name, controlOne("resume"), "is not paused or cancelled", by)

    def cancel(self, name: str, by: str | None = None) -> QueueState:
        return self._control(name, controlOne("cancel"), "has ended", by)

    def requeue(self, name: str, by: str | None = None) -> QueueState:
        return self._control(name, controlOne("requeue"), "was cancelled", by)

    def controlMany(
        self, control: str, names: Sequence[str] | None, skip: Sequence[str] = (),
        by: str | None = None,
    ) -> int:  # fmt: skip
        """
        See L{IAsyncJobQueue.controlMany<imapmig.queue.IAsyncJobQueue.controlMany>}:
        L{controlPart} after part (L{controlAll}).
        """
        return controlAll(lambda part, after: self.controlPart(control, part, after, skip, by), names)

    def controlPart(
        self, control: str, names: Sequence[str] | None, after: int, skip: Sequence[str],
        by: str | None,
    ) -> tuple[int | None, int]:  # fmt: skip
        """
        One transaction of a bulk control: of the jobs C{names} (at most
        L{BULK_PART}), or of the next L{BULK_PART} jobs of the list after
        position C{after}, one statement (L{controlMany}).

        @return: the last position of the jobs it looked at (L{None}: none
            was left), and how many it changed.
        """
        values = {
            "names": None if names is None else list(names), "after": after,
            "limit": BULK_PART, "skip": list(skip), "by": by,
        }  # fmt: skip
        statement = controlMany(control, names is not None)
        row = self._run("control jobs", lambda c: c.execute(statement, values).fetchone())
        assert row is not None
        return (None if row[0] is None else int(row[0])), int(row[1])

    def leaving(self, names: Sequence[str]) -> frozenset[str]:
        """
        See L{IAsyncJobQueue.leaving<imapmig.queue.IAsyncJobQueue.leaving>}.
        """
        rows = self._run(
            "read the jobs leaving", lambda c: c.execute(LEAVING, {"names": list(names)}).fetchall()
        )
        return frozenset(name for (name,) in rows)

    def _changeJob(
        self, action: str, name: str, new: JobList,
        change: Callable[[Connection, dict[str, Any]], _T],
    ) -> _T:  # fmt: skip
        """
        Change job C{name}'s row by C{change} (given the connection and
        the values C{name}, C{digest} and C{accounts}, its digest and
        accounts in C{new}) in one transaction with the fleet's row
        (L{changeList}), then make C{new} this queue's list.

        @raise JobListStale: this queue's list is no longer the fleet's.
        """
        job = new.byName.get(name)
        values = {
            "name": name,
            "digest": new.digests.get(name),
            "accounts": [] if job is None else accountsOf(job),
        }

        def changed(c: Connection) -> _T:
            changeList(c, self._fleet, self._list, new, self._by)
            return change(c, values)

        result = self._run(action, changed)
        self._list = new
        return result

    def add(self, job: JobConfig) -> None:
        def added(c: Connection, values: dict[str, Any]) -> None:
            kept = c.execute(ADD_KEPT, values).rowcount
            if not kept and not c.execute(ADD_NEW, values).rowcount:
                raise ValueError(f"job {job.name} is queued already")

        self._changeJob("add a job", job.name, self._list.withJob(job), added)

    def remove(self, name: str) -> QueueState:
        def removed(c: Connection, values: dict[str, Any]) -> QueueState:
            row = c.execute(
                "DELETE FROM imapmig_queue.jobs WHERE " + KNOWN + " AND state <> 'claimed'"
                " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                values,
            ).fetchone() or c.execute(
                "UPDATE imapmig_queue.jobs SET requested = 'remove'"
                " WHERE " + KNOWN + " AND state = 'claimed' RETURNING state",
                values,
            ).fetchone()
            if row is None:
                raise UnknownJob(name)
            return QueueState(row[0])

        return self._changeJob("remove a job", name, self._list.without(name), removed)

    def replace(self, job: JobConfig) -> QueueState:
        def replaced(c: Connection, values: dict[str, Any]) -> QueueState:
            row = c.execute(
                "UPDATE imapmig_queue.jobs SET digest = %(digest)s, accounts = %(accounts)s"
                " WHERE " + KNOWN +
                " RETURNING CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
                values,
            ).fetchone()
            if row is None:
                raise UnknownJob(job.name)
            return QueueState(row[0])

        return self._changeJob("replace a job", job.name, self._list.withJob(job), replaced)


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
        self,
        owner: str,
        lease: float,
        connections: Mapping[str, int] | None = None,
        rate: float | None = None,
    ) -> Deferred[Heartbeat]:
        """L{PostgreSQLJobQueue.heartbeat} in a thread."""
        return self._inThread(self.queue.heartbeat, owner, lease, connections, rate)

    def retire(self, owner: str) -> Deferred[None]:
        """L{PostgreSQLJobQueue.retire} in a thread."""
        return self._inThread(self.queue.retire, owner)

    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> Deferred[JobClaim | None]:
        """L{PostgreSQLJobQueue.claim} in a thread."""
        return self._inThread(self.queue.claim, owner, now, lease, skipServers)

    def finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> Deferred[None]:
        """L{PostgreSQLJobQueue.finish} in a thread."""
        return self._inThread(self.queue.finish, claim, outcome, notBefore)

    def giveBack(self, owner: str, known: frozenset[str]) -> Deferred[list[str]]:
        """L{PostgreSQLJobQueue.giveBack} in a thread."""
        return self._inThread(self.queue.giveBack, owner, known)

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

    def controlMany(
        self, control: str, names: Sequence[str] | None, skip: Sequence[str] = (),
        by: str | None = None,
    ) -> Deferred[int]:  # fmt: skip
        """
        L{PostgreSQLJobQueue.controlMany}, each part in a thread of its
        own, so that the heartbeats go on between them
        (L{controlAllAsync}).
        """

        def part(names: Sequence[str] | None, after: int) -> Deferred[tuple[int | None, int]]:
            return self._inThread(self.queue.controlPart, control, names, after, skip, by)

        return Deferred.fromCoroutine(controlAllAsync(part, names))

    def leaving(self, names: Sequence[str]) -> Deferred[frozenset[str]]:
        """L{PostgreSQLJobQueue.leaving} in a thread."""
        return self._inThread(self.queue.leaving, names)

    def add(self, job: JobConfig) -> Deferred[None]:
        """L{PostgreSQLJobQueue.add} in a thread."""
        return self._inThread(self.queue.add, job)

    def remove(self, name: str) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.remove} in a thread."""
        return self._inThread(self.queue.remove, name)

    def replace(self, job: JobConfig) -> Deferred[QueueState]:
        """L{PostgreSQLJobQueue.replace} in a thread."""
        return self._inThread(self.queue.replace, job)

    def replaceList(
        self, jobs: Sequence[JobConfig], userLists: Sequence[UserList] = ()
    ) -> Deferred[ListChange]:
        """L{PostgreSQLJobQueue.replaceList} in a thread."""
        return self._inThread(self.queue.replaceList, jobs, userLists)

    def listDiffers(self) -> Deferred[str | None]:
        """L{PostgreSQLJobQueue.listDiffers} in a thread."""
        return self._inThread(self.queue.listDiffers)

    def close(self) -> None:
        """
        L{PostgreSQLJobQueue.close}: later calls fail with
        L{PermanentError}.
        """
        self.queue.close()
