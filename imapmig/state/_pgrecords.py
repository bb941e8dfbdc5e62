# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's role of L{IJobRecords}: the C{job_failures},
C{job_holds} and C{job_transitions} tables, as the SQLite store's
L{imapmig.state._sqlrecords.SQLiteJobRecords} keeps them, each timeline
bounded as L{imapmig.state._timeline} bounds SQLite's.

The holds have a table until the claims' C{jobs} table holds them in its
rows' state (docs/fleet-design.md, "The schema").
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbase import Connection
from imapmig.state._pgbatch import PostgreSQLWriter
from imapmig.state._pgwrites import FAILURE, TRANSITION
from imapmig.state.jobrecords import (
    HOLDS,
    IJobRecords,
    JobHold,
    Transition,
)

@implementer(IJobRecords)
class PostgreSQLJobRecords(PostgreSQLWriter):
    """
    L{IJobRecords} in the C{imapmig.job_failures}, C{imapmig.job_holds}
    and C{imapmig.job_transitions} tables.
    """

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IJobRecords.recordJobFailure}: a write of the batcher.
        """
        return self._enqueue(FAILURE, job, [(job, (job, reason, self._seconds()))])

    def jobFailure(self, job: str) -> Deferred[str | None]:
        """
        See L{IJobRecords.jobFailure}.
        """
        return self._read(
            "read the job's failure",
            "SELECT reason FROM imapmig.job_failures WHERE job = %s",
            (job,),
            lambda rows: str(rows[0][0]) if rows else None,
        )

    def recordJobHolds(
        self, jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> Deferred[None]:
        """
        See L{IJobRecords.recordJobHolds}: one statement for every job.
        """
        if hold is not None and hold not in HOLDS:
            raise ValueError(f"not a job hold: {hold!r}")
        names = list(jobs)
        now = self._seconds()

        def write(connection: Connection) -> None:
            if hold is None:
                connection.execute(
                    "DELETE FROM imapmig.job_holds WHERE job = ANY(%s::text[])", (names,)
                )
            else:
                connection.execute(
                    "INSERT INTO imapmig.job_holds (job, hold, by, updated_at)"
                    " SELECT DISTINCT job, %s, %s::text, %s::double precision"
                    " FROM unnest(%s::text[]) AS job"
                    " ON CONFLICT (job) DO UPDATE SET hold = excluded.hold,"
                    " by = excluded.by, updated_at = excluded.updated_at",
                    (hold, by, now, names),
                )

        return self._transaction("record the admin's hold", write)

    def jobHolds(self) -> Deferred[dict[str, JobHold]]:
        """
        See L{IJobRecords.jobHolds}.
        """
        return self._read(
            "read the admin's holds",
            "SELECT job, hold, by, updated_at FROM imapmig.job_holds",
            (),
            lambda rows: {job: JobHold(hold, by, float(at)) for job, hold, by, at in rows},
        )

    def recordTransition(self, job: str, transition: Transition) -> Deferred[None]:
        """
        See L{IJobRecords.recordTransition}: a write of the batcher,
        numbered after the job's latest in the order recorded (under a
        lock of the job's held to the commit, so that another daemon's
        transaction numbering the same job waits for it) and, past
        the bound, the middle of the timeline deleted; its write id
        (C{write_id}, chosen by the writer) keeps a batch run again from
        recording it twice.
        """
        t = transition
        return self._enqueue(TRANSITION, job, (t.time, t.source, t.target, t.cause, t.by))

    def timeline(self, job: str) -> Deferred[list[Transition]]:
        """
        See L{IJobRecords.timeline}.
        """

        def transitions(rows: list[tuple[Any, ...]]) -> list[Transition]:
            return [Transition(float(time), *rest) for time, *rest in rows]

        return self._read(
            "read the job's timeline",
            "SELECT time, source, target, cause, by FROM imapmig.job_transitions"
            " WHERE job = %s ORDER BY seq",
            (job,),
            transitions,
        )
