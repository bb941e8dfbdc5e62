# -*- test-case-name: tests.test_state_reports,tests.test_state_manifest,tests.test_state_contract -*-
"""
What the store answers about a job's outcomes for C{imapmig report}, the
status site and the audit manifest (L{OutcomeCounts}, L{JobActivity},
L{FailuresPage}); L{IReportQueries}, the store's role that answers; and
L{FailuresQuery}, the logic of the failure pages every store shares.

Taken out of C{imapmig/state/__init__.py}, which held every role of the
store in one 25-method interface.
"""

from __future__ import annotations

from typing import Any, Sequence

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Interface

from imapmig.state.folders import FolderFallback
from imapmig.state.jobrecords import Transition
from imapmig.state.outcomes import MessageOutcome


@frozen
class OutcomeCounts:
    """
    How many messages of a job ended how, each counted by its latest
    outcome.

    @ivar copied: messages appended to the destination (in the destination,
        and not C{alreadyPresent}).
    @ivar alreadyPresent: messages found in the destination already, and
        not appended again.
    @ivar failed: messages whose latest outcome is a failure.
    @ivar lineEndingsConverted: messages in the destination whose bare LF
        line endings were converted to CRLF.
    @ivar withNotes: messages in the destination with a
        L{note<MessageOutcome.note>}.
    """

    copied: int
    alreadyPresent: int
    failed: int
    lineEndingsConverted: int
    withNotes: int


@frozen
class JobActivity:
    """
    What a job's records say of its work, for the summary of
    C{imapmig report}.

    @ivar copiedOctets: the octets of the messages copied (as sent).
    @ivar firstAt: when the first of the messages copied was recorded, in
        the store's clock's seconds (the epoch); L{None} for none.  (Not
        a failure's time: a later run records its failures again.)
    @ivar lastAt: when the last of them was, likewise.
    @ivar folders: how many source folders have a mark (were listed to
        the end by a run): with no outcome either, the job never ran.
    """

    copiedOctets: int
    firstAt: float | None
    lastAt: float | None
    folders: int


@frozen
class JobReport:
    """
    Everything C{imapmig report} says of one job, as the store records
    it (L{IReportQueries.jobReports}).

    @ivar job: the job's name.
    @ivar failure: why its latest run failed (L{IJobRecords.jobFailure
        <imapmig.state.jobrecords.IJobRecords.jobFailure>}), or L{None}.
    @ivar counts: its messages by their latest outcome.
    @ivar activity: its copies' octets and span, and its folders marked.
    @ivar failures: its failed messages, as L{IReportQueries.failures}.
    @ivar notes: its messages with a note, as L{IReportQueries.notes}.
    @ivar fallbacks: its folders' fallback names, by mailbox.
    @ivar timeline: its changes of state, oldest first.
    """

    job: str
    failure: str | None
    counts: OutcomeCounts
    activity: JobActivity
    failures: tuple[MessageOutcome, ...]
    notes: tuple[MessageOutcome, ...]
    fallbacks: tuple[FolderFallback, ...]
    timeline: tuple[Transition, ...]


@frozen
class FailuresPage:
    """
    One page of a job's failed messages.

    @ivar matched: how many failed messages match the filter, all pages;
        a lower bound when C{matchedExact} is false.
    @ivar items: the page's messages, ordered by folder key, then message
        key.
    @ivar matchedExact: whether C{matched} is the exact count: false when
        the job has more than L{FAILURES_COUNT_LIMIT} failed messages
        (C{matched} is then that limit), or, with a filter, more than
        L{FAILURES_SEARCH_ROWS} (C{matched} then counts the matches among
        the first of them).
    @ivar next: C{(folderKey, messageKey)} to give as C{after} for the
        next page, or L{None} when this page ends the failures.
    """

    matched: int
    items: tuple[MessageOutcome, ...]
    matchedExact: bool = True
    next: tuple[str, str] | None = None


FAILURES_COUNT_LIMIT = 10_000
"""
The most failed messages a page of failures counts or pages through
(C{offset + limit} beyond it returns no items): a status request costs the
reactor a bounded time (about 20 ms) whatever the size of the job.  The
audit manifest has them all.
"""

FAILURES_SEARCH_ROWS = 5_000
"""
The most failed messages a filtered page of failures searches: the first
ones, in folder then key order (about 25 ms per scan).
"""


@frozen
class FailuresQuery:
    """
    What one page of failures (L{IReportQueries.failuresPage}) asks a store
    for, and how the rows it reads make the page: the logic of the failure
    pages, written once for every store, each of which only says it in its
    own SQL.

    A store runs up to three statements over its failed messages in folder
    then key order, each with L{parameters}: one counting them (at most
    L{FAILURES_COUNT_LIMIT} plus one, or L{FAILURES_SEARCH_ROWS} with a
    filter) and the matches among the first of them; one reading the page
    and one more row (L{readsPage} says whether it is needed); and, when a
    filtered page ends the search short of the failures' end
    (L{searchesOn}), one reading the search's last row and the row after
    it.

    @ivar needle: the filter, its ASCII letters in lower case (as SQLite's
        C{lower()} folds the columns it is matched against); C{""} for
        none.
    @ivar offset: the matches to skip.
    @ivar limit: the most to return, cut so that no page reaches past
        L{FAILURES_COUNT_LIMIT}; 0 for none.
    @ivar after: the key to start after, or L{None}.
    @ivar rowsRead: the most failed messages counted or searched.
    """

    needle: str
    offset: int
    limit: int
    after: tuple[str, str] | None
    rowsRead: int

    @classmethod
    def of(
        cls, offset: int, limit: int, contains: str, after: tuple[str, str] | None
    ) -> FailuresQuery:
        """
        The query of L{IReportQueries.failuresPage}'s arguments.
        """
        needle = contains.translate(_ASCII_LOWER)
        rowsRead = FAILURES_SEARCH_ROWS if needle else FAILURES_COUNT_LIMIT
        limit = max(0, min(limit, FAILURES_COUNT_LIMIT - offset))
        return cls(needle, offset, limit, after, rowsRead)

    def parameters(self, job: str) -> dict[str, object]:
        """
        The named parameters of the statements, for C{job}: C{needle},
        C{job}, C{rows} (the rows counted or searched), C{more} (one more:
        whether there are more), C{limit} (one more than the page: whether
        another follows), C{offset}, and C{folder} and C{key} (those of
        C{after}, or L{None}).
        """
        folder, key = (None, None) if self.after is None else self.after
        return {
            "needle": self.needle,
            "job": job,
            "rows": self.rowsRead,
            "more": self.rowsRead + 1,
            "limit": self.limit + 1,
            "offset": self.offset,
            "folder": folder,
            "key": key,
        }

    def readsPage(self, matched: int) -> bool:
        """
        Whether the page has rows to read, C{matched} failures matching
        from the start: from the start, none past the last match counted.
        """
        return bool(self.limit) and (self.after is not None or matched > self.offset)

    def cut(self, rows: list[_Row]) -> tuple[list[_Row], tuple[str, str] | None]:
        """
        The page of C{rows} (the page and one row more, each starting with
        its folder key and message key), and the L{FailuresPage.next} that
        the row more calls for, if it was read.
        """
        if len(rows) <= self.limit:
            return rows, None
        page = rows[: self.limit]
        return page, (page[-1][0], page[-1][1])

    def searchesOn(self, next: tuple[str, str] | None) -> bool:
        """
        Whether, the page having found C{next}, the store must read where
        the search stopped: a filtered page that found no more matches may
        end short of the failures' end, and the next page searches on.
        """
        return next is None and bool(self.limit) and bool(self.needle)

    def searchEnd(self, ends: list[_Row]) -> tuple[str, str] | None:
        """
        The L{FailuresPage.next} of a search that stopped at the first of
        C{ends} (the search's last row and the one after it, if any).
        """
        if len(ends) == 2:
            return (ends[0][0], ends[0][1])
        return None

    def page(
        self,
        read: int,
        matched: int,
        items: Sequence[MessageOutcome],
        next: tuple[str, str] | None,
    ) -> FailuresPage:
        """
        The page of C{items}, C{read} failures having been counted (at most
        L{rowsRead} plus one) and C{matched} of them matching.
        """
        return FailuresPage(int(matched), tuple(items), int(read) <= self.rowsRead, next)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}

_Row = tuple[Any, ...]


class IReportQueries(Interface):
    """
    Read-only queries over a job's latest outcomes: counts, failures,
    notes, and the pages of the status site and the audit manifest.
    """

    def failures(job: str) -> "Deferred[list[MessageOutcome]]":
        """
        The messages of C{job} whose latest outcome is a failure, ordered by
        folder key, then message key.
        """

    def failuresPage(
        job: str,
        offset: int,
        limit: int,
        contains: str = "",
        after: "tuple[str, str] | None" = None,
    ) -> "Deferred[FailuresPage]":
        """
        One page of the messages of C{job} whose latest outcome is a
        failure, in the order of L{failures}, at a bounded cost whatever
        the size of the job: only the first L{FAILURES_COUNT_LIMIT} failed
        messages are counted, a page reaches at most that far past its
        start, and with C{contains} a page searches at most
        L{FAILURES_SEARCH_ROWS} failed messages past its start and the
        count only the first ones (L{FailuresPage.matchedExact} tells).
        Deeper pages start from the previous page's L{FailuresPage.next}.

        @param offset: how many matching messages to skip (0 or more).
        @param limit: the most to return (1 or more).
        @param contains: only messages with this text in their folder key,
            mailbox, message key, Message-ID, failure, From or Subject,
            ignoring ASCII case; C{""} for all.
        @param after: start after this C{(folderKey, messageKey)} (a
            L{FailuresPage.next}); L{None} from the first failure.
        """

    def manifestOutcomes(
        job: str, after: "tuple[str, str] | None", limit: int
    ) -> "Deferred[list[MessageOutcome]]":
        """
        The next C{limit} (or fewer, at the end) messages of C{job} not
        copied by imapmig: whose latest outcome is a failure, or that were
        already present; ordered by folder key, then message key, from
        just after C{after}.  Paging by key, not offset: each page costs
        the same however far into the job it is, and a page is stable
        while outcomes are recorded meanwhile.

        @param after: C{(folderKey, messageKey)} of the last message of
            the previous page, or L{None} for the first page.
        """

    def summary(job: str) -> "Deferred[tuple[int, int]]":
        """
        How many messages of C{job} are recorded as in the destination
        (appended or already present), and as failed.

        @return: a Deferred firing with C{(appended, failed)}.
        """

    def counts(job: str) -> "Deferred[OutcomeCounts]":
        """
        How many messages of C{job} were copied, were already present,
        failed, had their line endings converted, and carry a note, each by
        its latest outcome.
        """

    def activity(job: str) -> "Deferred[JobActivity]":
        """
        The octets C{job} copied, the span of time those copies were
        recorded in, and how many of its folders have a mark.
        """

    def jobReports(jobs: "Sequence[str]") -> "Deferred[list[JobReport]]":
        """
        What the store records of each of C{jobs} (a L{JobReport} each, in
        their order, read in one snapshot where the database has them),
        in a few statements whatever their number, each reading the set
        of C{jobs} at once: C{imapmig report} reads a fleet's 50,000 jobs
        a page of them at a time, where a job's seven reads each cost it
        350,000 statements.  A job with nothing recorded has its zeros.
        """

    def notes(job: str) -> "Deferred[list[MessageOutcome]]":
        """
        The messages of C{job} whose latest outcome puts them in the
        destination with a L{note<MessageOutcome.note>}, ordered by folder
        key, then message key.
        """
