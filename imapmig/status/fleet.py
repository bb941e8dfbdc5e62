# -*- test-case-name: tests.test_status_fleet,tests.test_status_api -*-
"""
The fleet on the status pages: what C{/status.json} and C{/jobs/NAME.json}
say of the daemons and of the daemon holding each job, read through an
L{IFleetView<imapmig.queue.fleetview.IFleetView>} (the daemon alone, or
the fleet's PostgreSQL).

A page whose fleet cannot be read (the database unreachable) is still
served: its daemons are L{None}, with the reason in C{daemons_error},
and no job names a holder.

New beside L{imapmig.status.progressview}, which reads the progress model:
the fleet comes from another source, asynchronously.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from attrs import frozen
from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import TransientError
from imapmig.progress import MigrationProgress
from imapmig.queue.fleetview import DaemonRow, Fleet, Holder, IFleetView, SingleDaemonView

__all__ = ["FleetParts", "daemonDocument", "holderDocument", "readFleet", "singleDaemon"]

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
    """

    fleet: Fleet | None
    holders: Mapping[str, Holder]
    error: str | None = None

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
    view: IFleetView, names: Sequence[str], daemons: bool = True
) -> Deferred[FleetParts]:
    """
    The daemons (unless not C{daemons}: then C{fleet} is an empty
    L{Fleet}), and the holders of the jobs C{names}, read at once.  A
    failure to read is answered, never raised: a transient one (the
    database unreachable) in C{error}, anything else logged as a bug and
    answered alike.
    """
    held: dict[str, Holder] = {}

    def keep(holders: Mapping[str, Holder]) -> None:
        held.update(holders)

    reads: list[Deferred[Any]] = [view.daemons() if daemons else succeed(Fleet(()))]
    if names:
        reads.append(view.holders(names).addCallback(keep))

    def read(results: list[Any]) -> FleetParts:
        return FleetParts(results[0], held)

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
