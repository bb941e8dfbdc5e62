# -*- test-case-name: tests.test_state -*-
"""
The state store: every source message's outcome, every source folder's mark
for delta passes, the journal of batches in flight, and the timeline of
the job's states, per job.

One interface, L{IStateStore}, the union of the store's roles, each in its
own module with the values it records:

  - L{imapmig.state.outcomes}: outcomes and the journal (L{IOutcomeJournal});
  - L{imapmig.state.folders}: folder marks and fallbacks (L{IFolderMarks});
  - L{imapmig.state.jobrecords}: each job's failure, hold and timeline
    (L{IJobRecords});
  - L{imapmig.state.budgets}: the accounts' daily budgets (L{IBudgetRecords});
  - L{imapmig.state.reports}: the queries of reports and the status site
    (L{IReportQueries}).

SQLite (L{imapmig.state.sqlite}) is the embedded default, and an
in-memory store (L{imapmig.state.memory}) is its fake.  This module is
their face: the names other packages import from C{imapmig.state}.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from imapmig.state.budgets import IBudgetRecords
from imapmig.state.folders import FolderFallback, FolderMark, IFolderMarks
from imapmig.state.jobrecords import (
    CANCELLED,
    HOLDS,
    PAUSED,
    TIMELINE_FIRST,
    TIMELINE_LATEST,
    IJobRecords,
    JobHold,
    Transition,
    transitionRecorder,
)
from imapmig.state.outcomes import (
    MESSAGE_ID_LENGTH,
    NAME_LENGTH,
    AppendedOutcome,
    AppendedRun,
    FolderKeys,
    IOutcomeJournal,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
    asMessageOutcome,
    flatOutcomes,
    withNames,
)
from imapmig.state.reports import (
    FAILURES_COUNT_LIMIT,
    FAILURES_SEARCH_ROWS,
    FailuresPage,
    IReportQueries,
    JobActivity,
    JobReport,
    OutcomeCounts,
)

__all__ = [
    "AppendedOutcome",
    "AppendedRun",
    "CANCELLED",
    "FAILURES_COUNT_LIMIT",
    "FAILURES_SEARCH_ROWS",
    "FailuresPage",
    "FolderFallback",
    "FolderKeys",
    "FolderMark",
    "HOLDS",
    "IBudgetRecords",
    "IFolderMarks",
    "IJobRecords",
    "IOutcomeJournal",
    "IReportQueries",
    "IStateStore",
    "JobActivity",
    "JobHold",
    "JobReport",
    "JournalEntry",
    "JournalMessage",
    "MESSAGE_ID_LENGTH",
    "MessageNames",
    "MessageOutcome",
    "NAME_LENGTH",
    "OutcomeCounts",
    "PAUSED",
    "TIMELINE_FIRST",
    "TIMELINE_LATEST",
    "Transition",
    "asMessageOutcome",
    "flatOutcomes",
    "transitionRecorder",
    "withNames",
]


class IStateStore(IOutcomeJournal, IFolderMarks, IJobRecords, IBudgetRecords, IReportQueries):
    """
    Durable record of outcomes, folder marks, the journal of batches in
    flight, and each job's timeline: every role of the store, as one
    store (SQLite, memory, later PostgreSQL) provides them.  Methods
    return Deferreds so that a networked store (PostgreSQL) fits the same
    interface.
    """

    def ping() -> "Deferred[None]":
        """
        Answer a trivial query: fires with L{None} if the store can read,
        fails (L{PermanentError}, L{TransientError}) if it cannot or is
        closed.  For health checks: cheap, no write.
        """

    def forClaim(job: str, owner: str, generation: int) -> "IStateStore":
        """
        This store as seen by one claim of C{job} (the fleet's queue's
        C{JobClaim}: its daemon id C{owner} and its C{generation}; the
        state layer sits below the queue and takes them as plain values).

        The PostgreSQL store's view makes each write for C{job} (journal,
        outcomes and their settling, names, folder marks, fallbacks,
        failure, timeline) only while that claim is current (the job
        claimed by C{owner} at C{generation}, C{owner}'s lease not
        ended), checked in the write's own transaction, and fails it with
        L{LeaseLost<imapmig.errors.LeaseLost>} otherwise; it refuses
        writes for another job.  The SQLite and in-memory stores return
        themselves: one daemon per file is their fence
        (L{imapmig.state.lock}).
        """

    def close() -> None:
        """
        Release the store; nothing is recorded afterwards.
        """
