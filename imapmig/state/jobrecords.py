# -*- test-case-name: tests.test_holds,tests.test_state_timeline,tests.test_state_contract -*-
"""
What the store records of each job as a whole: why its latest run failed,
the admin's hold on it (L{JobHold}), and its timeline of state changes
(L{Transition}); and L{IJobRecords}, the store's role that keeps them.

Taken out of C{imapmig/state/__init__.py}, which held every role of the
store in one 25-method interface.
"""

from __future__ import annotations

from typing import Callable, Sequence

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface


PAUSED = "paused"
"""
The hold of a job the admin paused: not claimed until resumed.
"""

CANCELLED = "cancelled"
"""
The hold of a job the admin cancelled: never claimed again.
"""

HOLDS = (PAUSED, CANCELLED)
"""
Every hold a job can be under (L{JobHold.hold}).
"""


@frozen
class JobHold:
    """
    An admin's hold on a job, kept across restarts of the daemon.

    @ivar hold: L{PAUSED} or L{CANCELLED}.
    @ivar by: who asked (the client's address), if known.
    @ivar at: when it was recorded, in the store's clock's seconds (the
        epoch).
    """

    hold: str
    by: str | None
    at: float


@frozen
class Transition:
    """
    One change of a job's state, as the job's machine makes it: an entry
    of the job's timeline.

    @ivar time: when, in the machine's clock's seconds (the epoch).
    @ivar source: the state it left (an L{imapmig.progress.JobState}
        value; C{from} in JSON).
    @ivar target: the state it entered, likewise (C{to} in JSON).
    @ivar cause: why, in words (C{"paused by the admin"}, C{"login
        refused: ..."}, C{"retry 2 of 5 in 30 s: connection lost"}).
    @ivar by: who asked (the client's address), for a change an admin
        asked for; L{None} otherwise.
    """

    time: float
    source: str
    target: str
    cause: str
    by: str | None = None


TIMELINE_FIRST = 20
"""
How many of a job's first transitions its timeline keeps: how it began.
"""

TIMELINE_LATEST = 480
"""
How many of a job's latest transitions its timeline keeps besides the
first ones: a job that backs off for days does not grow the store
without bound; the ones in between are dropped as new ones come.
"""


class IJobRecords(Interface):
    """
    Each job's failure, hold and timeline.
    """

    def recordJobFailure(job: str, reason: str | None) -> "Deferred[None]":
        """
        Record, in one transaction, that the latest run of C{job} failed
        as a whole because of C{reason} (a refused login, TLS refused,
        retries given up), replacing an earlier record; or, with L{None},
        that it completed, forgetting any record.
        """

    def jobFailure(job: str) -> "Deferred[str | None]":
        """
        Why the latest run of C{job} failed, as L{recordJobFailure}
        recorded it, or L{None} if no failure is recorded.
        """

    def recordJobHolds(
        jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> "Deferred[None]":
        """
        Record, in one transaction, that the admin put each of C{jobs}
        under C{hold}, replacing any hold they were under; or, with
        L{None}, that their holds were lifted.  The store stamps each with
        its clock's time.

        @param hold: L{PAUSED}, L{CANCELLED} or L{None}.
        @param by: who asked (the client's address), for the record.
        @raise ValueError: C{hold} is none of those (raised at once).
        """

    def jobHolds() -> "Deferred[dict[str, JobHold]]":
        """
        Every job's hold, by job name, jobs no longer configured included
        (the caller ignores those).
        """

    def recordTransition(job: str, transition: Transition) -> "Deferred[None]":
        """
        Add C{transition} at the end of C{job}'s timeline, in one
        transaction that does not wait for the disk (as outcomes are
        recorded); the timeline then keeps its first L{TIMELINE_FIRST} and
        its latest L{TIMELINE_LATEST} transitions, dropping those between.
        """

    def timeline(job: str) -> "Deferred[list[Transition]]":
        """
        The transitions kept of C{job}'s timeline, oldest first (in the
        order they were recorded); empty for a job with none.
        """


_log = Logger()


def transitionRecorder(store: IJobRecords) -> Callable[[str, Transition], None]:
    """
    What a job's machine calls with each of its transitions to record it
    in C{store}'s timeline of the job (L{IJobRecords.recordTransition}):
    a store that cannot record it (closed at shutdown, a full disk) is
    logged, once per transition, and the job goes on; the timeline is a
    record, not a condition of the migration.
    """

    def record(job: str, transition: Transition) -> None:
        def failed(failure: Failure) -> None:
            _log.error(
                "Could not record job {job}'s change from {source} to {target} in its"
                " timeline: {why}",
                job=job,
                source=transition.source,
                target=transition.target,
                why=str(failure.value),
            )

        store.recordTransition(job, transition).addErrback(failed)

    return record
