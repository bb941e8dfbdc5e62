# -*- test-case-name: tests.test_status_fleet,tests.test_status_api -*-
"""
The fleet on the status pages: what C{/status.json} and C{/jobs/NAME.json}
say of the daemons and of the daemon holding each job, read through an
L{IFleetView<imapmig.queue.fleetview.IFleetView>} (the daemon alone, or
the fleet's PostgreSQL).

A page whose fleet cannot be read (the database unreachable) is still
served: its daemons are L{None}, with the reason in C{daemons_error},
and no job names a holder.

C{/fleet/jobs.json?after=POSITION&limit=N} (L{FleetJobsResource}) lists
every job of the fleet by keyset from the database, with its state and
holder, and the counts by state.  C{/status.json} and C{/jobs/NAME.json}
of a fleet's daemon read the fleet's jobs alike (L{readFleetJobs},
L{remoteDocument}), a bounded page at a time: the fleet's million is never
read whole (docs/fleet-design.md "A million jobs").

New beside L{imapmig.status.progressview}, which reads the progress model:
the fleet comes from another source, asynchronously.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from attrs import frozen
from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from twisted.web.server import Request

from imapmig.errors import HTTPProblem, TransientError
from imapmig.progress import MigrationProgress
from imapmig.queue.fleetview import (
    DaemonRow,
    Fleet,
    FoundJobs,
    Holder,
    IFleetView,
    JobRow,
    JobsPage,
    SingleDaemonView,
)
from imapmig.status._http import ReadOnlyResource, jsonBody

__all__ = [
    "QUEUE_STATES",
    "FleetJobsResource",
    "FleetParts",
    "daemonDocument",
    "holderDocument",
    "readFleet",
    "remoteDocument",
    "singleDaemon",
]

log = Logger()


def singleDaemon(progress: MigrationProgress, seconds: Callable[[], float]) -> SingleDaemonView:
    """
    The fleet of a daemon alone (its state a SQLite file or in memory): it
    holds each of C{progress}'s jobs, at the rate C{progress} measures.
    """
    return SingleDaemonView(seconds, progress.__len__, lambda: progress.currentRate()[0])


def daemonDocument(daemon: DaemonRow) -> dict[str, object]:
    """
    The contract's C{DAEMON} object of C{/status.json}'s C{daemons}.
    """
    return {
        "id": daemon.daemonId,
        "host": daemon.host,
        "pid": daemon.pid,
        "version": daemon.version,
        "started_at": daemon.startedAt,
        "heartbeat_at": daemon.heartbeatAt,
        "heartbeat_age_seconds": round(daemon.heartbeatAge, 3),
        "lease_until": daemon.leaseUntil,
        "live": daemon.live,
        "jobs": daemon.jobs,
        "messages_per_second": None if daemon.rate is None else round(daemon.rate, 1),
        "this": daemon.this,
    }


def holderDocument(holder: Holder | None) -> dict[str, object] | None:
    """
    A job's C{daemon}: the daemon holding it, L{None} when none does.
    """
    if holder is None:
        return None
    return {"id": holder.daemonId, "host": holder.host, "live": holder.live}


@frozen
class FleetParts:
    """
    What a page shows of the fleet.

    @ivar fleet: the daemons, L{None} when they could not be read.
    @ivar holders: the holder of each job of the page that one holds.
    @ivar error: why the fleet could not be read, L{None} if it was.
    @ivar counts: the fleet's jobs by state, when asked and read, else
        L{None}.
    """

    fleet: Fleet | None
    holders: Mapping[str, Holder]
    error: str | None = None
    counts: Mapping[str, int] | None = None

    def daemonsDocument(self) -> list[dict[str, object]] | None:
        """
        C{daemons}: every daemon's document, L{None} if unread.
        """
        if self.fleet is None:
            return None
        return [daemonDocument(daemon) for daemon in self.fleet.daemons]

    def holderOf(self, name: str) -> dict[str, object] | None:
        """
        The C{daemon} of the job C{name}.
        """
        return holderDocument(self.holders.get(name))


def readFleet(
    view: IFleetView, names: Sequence[str], daemons: bool = True, counts: bool = False
) -> Deferred[FleetParts]:
    """
    The daemons (unless not C{daemons}: then C{fleet} is an empty
    L{Fleet}), the holders of the jobs C{names}, and with C{counts} the
    fleet's jobs by state (L{IFleetView.jobCounts}), read at once.  A
    failure to read is answered, never raised: a transient one (the
    database unreachable) in C{error}, anything else logged as a bug and
    answered alike.
    """
    held: dict[str, Holder] = {}
    counted: dict[str, int] = {}

    def keep(holders: Mapping[str, Holder]) -> None:
        held.update(holders)

    reads: list[Deferred[Any]] = [view.daemons() if daemons else succeed(Fleet(()))]
    if names:
        reads.append(view.holders(names).addCallback(keep))
    if counts:
        reads.append(view.jobCounts().addCallback(counted.update))

    def read(results: list[Any]) -> FleetParts:
        return FleetParts(results[0], held, counts=counted if counts else None)

    def unread(failure: Failure) -> FleetParts:
        if isinstance(failure.value, FirstError):
            failure = failure.value.subFailure
        if failure.check(TransientError) is None:
            log.failure("Status: the fleet could not be read", failure)
        else:
            # At debug level: a page polled every 2 s would repeat what the
            # queue's own lines say of the database.
            log.debug("Status: the fleet could not be read: {why}", why=str(failure.value))
        return FleetParts(None, {}, str(failure.value) or "the fleet could not be read")

    return gatherResults(reads, consumeErrors=True).addCallbacks(read, unread)


QUEUE_STATES: Mapping[str, str] = {
    "queued": "queued",
    "deferred": "deferred",
    "paused": "paused",
    "done": "done",
    "done_with_failures": "done",
    "failed": "failed",
    "cancelled": "cancelled",
    "waiting": "claimed",
    "connecting": "claimed",
    "running": "claimed",
    "backing_off": "claimed",
    "paused_by_server": "claimed",
    "stopping": "claimed",
    "stopped": "claimed",
}
"""
The queue state (the fleet's database) of each job state a page's
C{state=} names: a job some daemon runs is C{claimed} whatever its
machine's state.
"""

_PAGE_STATES = {"claimed": "running"}
"""
The page's state of a job another daemon runs (its machine's state is
that daemon's to know); every other queue state is a page state.
"""


def remoteDocument(job: JobRow) -> dict[str, object]:
    """
    The contract's C{JOB} document of a job this daemon does not run: what
    the fleet's database knows (its state, its holder); its counts
    L{None} (they are its holder's).
    """
    return {
        "name": job.name,
        "state": _PAGE_STATES.get(job.state, job.state),
        "counted": False,
        "messages_total": None,
        "messages_done": None,
        "messages_failed": None,
        "messages_pending": None,
        "percent": None,
        "messages_per_second": None,
        "eta_seconds": None,
        "error": None,
        "paused": job.state == "paused" or job.requested == "pause",
        "daemon": holderDocument(job.holder),
    }


def readFleetJobs(
    view: IFleetView,
    states: Sequence[str],
    text: str,
    start: int,
    limit: int,
    errorsOnly: bool = False,
) -> Deferred[FoundJobs | None]:
    """
    The fleet's jobs a page asks (L{IFleetView.findJobs}), the page
    states C{states} as queue states (L{QUEUE_STATES}), C{errorsOnly} as
    the failed ones (the database does not count a job's failed messages
    per job cheaply); L{None} when they cannot be read (the page then
    lists the jobs this daemon runs).
    """
    queue = tuple(dict.fromkeys(QUEUE_STATES[state] for state in states))
    if errorsOnly:
        # No state matches a filter for other states and errors: "none"
        # selects no job.
        queue = ("failed",) if not queue or "failed" in queue else ("none",)

    def unread(failure: Failure) -> None:
        if failure.check(TransientError) is None:
            log.failure("Status: the fleet's jobs could not be read", failure)
        else:
            log.debug("Status: the fleet's jobs could not be read: {why}", why=str(failure.value))
        return None

    found: Deferred[FoundJobs] = view.findJobs(queue, text, start, limit)
    return found.addErrback(unread)


FLEET_PAGE = 100
"""
The jobs a page of C{/fleet/jobs.json} lists unless its C{limit} says.
"""

MAX_FLEET_PAGE = 500
"""
The most jobs one page of C{/fleet/jobs.json} lists.
"""


def _pageQuery(args: Mapping[bytes, Sequence[bytes]]) -> tuple[int | None, int]:
    """
    The C{after} and C{limit} of a C{/fleet/jobs.json} request.

    @raise HTTPProblem: 400, either is not a number in its bounds.
    """
    try:
        after = int(args[b"after"][0]) if b"after" in args else None
        limit = int(args[b"limit"][0]) if b"limit" in args else FLEET_PAGE
    except ValueError:
        raise HTTPProblem(400, "after and limit are whole numbers") from None
    if not 1 <= limit <= MAX_FLEET_PAGE:
        raise HTTPProblem(400, f"limit is between 1 and {MAX_FLEET_PAGE}")
    return after, limit


def jobDocument(job: JobRow) -> dict[str, object]:
    """
    One job of C{/fleet/jobs.json}.
    """
    return {
        "position": job.position,
        "name": job.name,
        "state": job.state,
        "requested": job.requested,
        "daemon": holderDocument(job.holder),
    }


class FleetJobsResource(ReadOnlyResource):
    """
    C{/fleet/jobs.json?after=POSITION&limit=N}: the fleet's jobs after
    C{POSITION} (from the first without it), C{N} of them (L{FLEET_PAGE}
    by default, at most L{MAX_FLEET_PAGE}), with C{after} for the next
    page (C{null} on the last) and the jobs counted by state; 503 while
    the database cannot be read.
    """

    def __init__(self, view: IFleetView) -> None:
        super().__init__()
        self._view = view

    def renderBody(self, request: Request) -> Deferred[bytes]:
        after, limit = _pageQuery(request.args or {})
        reads: list[Deferred[Any]] = [self._view.jobsPage(after, limit), self._view.jobCounts()]

        def read(results: list[Any]) -> bytes:
            page: JobsPage = results[0]
            return jsonBody(
                {
                    "jobs": [jobDocument(job) for job in page.jobs],
                    "after": page.after,
                    "counts": dict(results[1]),
                }
            )

        def unread(failure: Failure) -> Failure:
            if isinstance(failure.value, FirstError):
                failure = failure.value.subFailure
            if failure.check(TransientError) is not None:
                raise HTTPProblem(503, str(failure.value) or "the fleet could not be read")
            return failure

        return gatherResults(reads, consumeErrors=True).addCallbacks(read, unread)
