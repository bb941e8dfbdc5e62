# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's writes of L{IFolderMarks} (the C{folders}
and C{folder_fallbacks} tables, a mark's deferred UIDs as an array
rather than SQLite's text) and of L{IJobRecords} (the C{job_failures},
C{job_holds} and C{job_transitions} tables, each timeline bounded as
L{imapmig.state._timeline} bounds SQLite's), over their reads shared
with the SQLite store (L{imapmig.state._sqlrecords.FolderMarks},
L{imapmig.state._sqlrecords.JobRecords}).  All but the holds are
writes of the batcher (L{imapmig.state._pgbatch}).

The holds have a table until the claims' C{jobs} table holds them in its
rows' state (docs/fleet-design.md, "The schema").
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbase import Connection
from imapmig.state._pgbatch import PostgreSQLWriter
from imapmig.state._pgwrites import FAILURE, FALLBACK, FOLDER, TRANSITION
from imapmig.state._sqlrecords import FolderMarks, JobRecords
from imapmig.state.folders import FolderFallback, FolderMark, IFolderMarks
from imapmig.state.jobrecords import HOLDS, IJobRecords, Transition


@implementer(IFolderMarks)
class PostgreSQLFolderMarks(FolderMarks, PostgreSQLWriter):
    """
    L{IFolderMarks} in the C{imapmig.folders} and
    C{imapmig.folder_fallbacks} tables.
    """

    def recordFolderMark(self, job: str, folderKey: str, mark: FolderMark) -> Deferred[None]:
        """
        See L{IFolderMarks.recordFolderMark}.
        """
        deferred = "{" + ",".join(str(int(uid)) for uid in mark.deferred) + "}"
        row = (
            job, folderKey, mark.uidValidity, mark.uidNext, mark.highestModSeq,
            mark.messages, deferred, mark.fingerprint, mark.octets, self._seconds(),
        )  # fmt: skip
        return self._enqueue(FOLDER, job, [((job, folderKey), row)])

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IFolderMarks.forgetFolder}.
        """
        return self._enqueue(FOLDER, job, [((job, folderKey), (job, folderKey))])

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IFolderMarks.recordFolderFallback}.
        """
        row = (job, fallback.mailbox, fallback.fallback, fallback.reason, self._seconds())
        return self._enqueue(FALLBACK, job, [((job, fallback.mailbox), row)])


@implementer(IJobRecords)
class PostgreSQLJobRecords(JobRecords, PostgreSQLWriter):
    """
    L{IJobRecords} in the C{imapmig.job_failures}, C{imapmig.job_holds}
    and C{imapmig.job_transitions} tables.
    """

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IJobRecords.recordJobFailure}: a write of the batcher.
        """
        return self._enqueue(FAILURE, job, [(job, (job, reason, self._seconds()))])

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
