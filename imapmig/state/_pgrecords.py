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

from imapmig.state._pgbase import Connection, PostgreSQLBase
from imapmig.state.jobrecords import (
    HOLDS,
    TIMELINE_FIRST,
    TIMELINE_LATEST,
    IJobRecords,
    JobHold,
    Transition,
)

_INSERT_TRANSITION = """
    INSERT INTO imapmig.job_transitions (job, seq, time, source, target, cause, by)
    SELECT %s, coalesce(max(seq), 0) + 1, %s, %s, %s, %s, %s
    FROM imapmig.job_transitions WHERE job = %s
    RETURNING seq
"""


@implementer(IJobRecords)
class PostgreSQLJobRecords(PostgreSQLBase):
    """
    L{IJobRecords} in the C{imapmig.job_failures}, C{imapmig.job_holds}
    and C{imapmig.job_transitions} tables.
    """

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IJobRecords.recordJobFailure}.
        """
        now = self._seconds()

        def write(connection: Connection) -> None:
            if reason is None:
                connection.execute("DELETE FROM imapmig.job_failures WHERE job = %s", (job,))
            else:
                connection.execute(
                    "INSERT INTO imapmig.job_failures (job, reason, updated_at)"
                    " VALUES (%s, %s, %s) ON CONFLICT (job) DO UPDATE SET"
                    " reason = excluded.reason, updated_at = excluded.updated_at",
                    (job, reason, now),
                )

        return self._transaction("record the job's failure", write)

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
        See L{IJobRecords.recordTransition}: one transaction that does not
        wait for the disk (C{synchronous_commit} off for it alone; a
        timeline is a record, not a condition of the migration), of an
        insert and, past the bound, a delete.
        """
        t = transition
        row = (job, t.time, t.source, t.target, t.cause, t.by, job)

        def write(connection: Connection) -> None:
            connection.execute("SET LOCAL synchronous_commit = off")
            found = connection.execute(_INSERT_TRANSITION, row).fetchone()
            assert found is not None
            seq = int(found[0])
            if seq > TIMELINE_FIRST + TIMELINE_LATEST:
                connection.execute(
                    "DELETE FROM imapmig.job_transitions"
                    " WHERE job = %s AND seq > %s AND seq <= %s",
                    (job, TIMELINE_FIRST, seq - TIMELINE_LATEST),
                )

        return self._transaction("record the job's transition", write)

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
