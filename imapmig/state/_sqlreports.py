# -*- test-case-name: tests.test_state_manifest,tests.test_state_reports,tests.test_state_contract -*-
"""
The SQL state stores' role of L{IReportQueries}, one class for SQLite's
and PostgreSQL's: counts, failures, notes and the pages of the status
site and the audit manifest, read from the C{messages} table; the
failure pages through L{FailuresQuery}, the logic every store shares, in
the store's dialect (L{imapmig.state._sqldialect}).

Taken out of C{imapmig/state/sqlite.py}, whose store had grown to 837
lines; PostgreSQL's counterpart (C{_pgreports.py}) is merged into it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from imapmig.state._sqldialect import SQLStore
from imapmig.state._timeline import transitionOf
from imapmig.state.folders import FolderFallback
from imapmig.state.outcomes import MessageOutcome, outcomeOf
from imapmig.state.reports import (
    FailuresPage,
    FailuresQuery,
    IReportQueries,
    JobActivity,
    JobReport,
    OutcomeCounts,
)

# The columns a failure page's filter looks for the needle in.
_SEARCHED = (
    "folder_key", "mailbox", "message_key", "coalesce(message_id, '')", "failure",
    "coalesce(message_from, '')", "coalesce(message_subject, '')",
)  # fmt: skip


@implementer(IReportQueries)
class ReportQueries(SQLStore):
    """
    L{IReportQueries} over the C{messages} table.
    """

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        return self._outcomes(
            "read failures",
            f"SELECT {self._outcomeColumns()} FROM imapmig.messages"
            " WHERE job = ? AND failure IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )

    def failuresPage(
        self,
        job: str,
        offset: int,
        limit: int,
        contains: str = "",
        after: tuple[str, str] | None = None,
    ) -> Deferred[FailuresPage]:
        """
        See L{IStateStore.failuresPage}: the statements of L{FailuresQuery}
        over the index of messages not copied, one counting, one reading
        the page (and, filtered, one finding where the search stopped),
        each reading at most L{FAILURES_COUNT_LIMIT} (or, filtered,
        L{FAILURES_SEARCH_ROWS}) rows of it; in one snapshot where the
        database has them (L{SQLStore._snapshot}).
        """
        query = FailuresQuery.of(offset, limit, contains, after)
        counting, reading, ends = map(self._dialect.sql, self._failureStatements(query))
        parameters = query.parameters(job)

        def read(connection: Any) -> FailuresPage:
            ((read, matched),) = connection.execute(counting, parameters).fetchall()
            rows: list[Any] = []
            if query.readsPage(matched):
                rows = connection.execute(reading, parameters).fetchall()
            rows, last = query.cut(rows)
            if query.searchesOn(last):
                last = query.searchEnd(connection.execute(ends, parameters).fetchall())
            return query.page(read, matched, [outcomeOf(row) for row in rows], last)

        return self._snapshot("read failures", read)

    def _failureStatements(self, query: FailuresQuery) -> tuple[str, str, str]:
        """
        The statements of C{query}, written as L{Dialect} says: counting,
        reading the page, and reading where the search stopped.
        """
        base = (
            f"FROM {self._notCopied()} WHERE job = :job AND {self._dialect.notCopied}"
            " AND failure IS NOT NULL"
        )
        fromStart = f"SELECT * {base} ORDER BY folder_key, message_key"
        ordered = fromStart
        if query.after is not None:
            # Two seeks in the index, as in manifestOutcomes.
            ordered = (
                f"SELECT * {base} AND folder_key = :folder AND message_key > :key"
                f" UNION ALL SELECT * {base} AND folder_key > :folder"
                " ORDER BY folder_key, message_key"
            )
        columns = self._outcomeColumns()
        ends = f"SELECT folder_key, message_key FROM ({ordered} LIMIT 2 OFFSET :rows - 1) AS e"
        # Counting one row more than the limit tells whether there are more.
        if not query.needle:
            counting = (
                f"SELECT count(*), {self._dialect.least}(count(*), :rows)"
                f" FROM (SELECT 1 {base} LIMIT :more) AS c"
            )
            reading = (
                f"SELECT {columns} FROM ({ordered} LIMIT :limit OFFSET :offset) AS p"
                " ORDER BY folder_key, message_key"
            )
            return counting, reading, ends
        contained = self._contains()
        # The first rows from the start (the count) or from `after` (the
        # page), then the needle among them: a needle found nowhere would
        # otherwise read every failure.
        counting = (
            f"SELECT (SELECT count(*) FROM (SELECT 1 {base} LIMIT :more) AS c),"
            f" (SELECT count(*) FROM ({fromStart} LIMIT :rows) AS s WHERE {contained})"
        )
        reading = (
            f"SELECT {columns} FROM ({ordered} LIMIT :rows) AS s WHERE {contained}"
            " ORDER BY folder_key, message_key LIMIT :limit OFFSET :offset"
        )
        return counting, reading, ends

    def manifestOutcomes(
        self, job: str, after: tuple[str, str] | None, limit: int
    ) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.manifestOutcomes}: a range of the index of
        messages not copied.
        """
        head = (
            f"SELECT {self._outcomeColumns()} FROM {self._notCopied()}"
            f" WHERE job = ? AND {self._dialect.notCopied}"
        )
        if after is None:
            return self._outcomes(
                "read the manifest",
                f"{head} ORDER BY folder_key, message_key LIMIT ?",
                (job, limit),
            )
        # The rest of the folder of `after`, then the folders after it: two
        # seeks in the index.  (A row-value comparison, (folder_key,
        # message_key) > (?, ?), seeks on the folder alone and reads the
        # folder from its start: a page deep into a large folder cost ten
        # times as much.)
        folderKey, messageKey = after
        d = self._outcomes(
            "read the manifest",
            f"{head} AND folder_key = ? AND message_key > ? ORDER BY message_key LIMIT ?",
            (job, folderKey, messageKey, limit),
        )

        def nextFolders(page: list[MessageOutcome]) -> Deferred[list[MessageOutcome]]:
            if len(page) >= limit:
                return succeed(page)
            rest = self._outcomes(
                "read the manifest",
                f"{head} AND folder_key > ? ORDER BY folder_key, message_key LIMIT ?",
                (job, folderKey, limit - len(page)),
            )
            return rest.addCallback(lambda more: page + more)

        return d.addCallback(nextFolders)

    def _notCopied(self) -> str:
        """
        The messages table, read through its index of messages not copied
        where the database has one (L{Dialect.notCopiedFrom}).
        """
        return self._dialect.notCopiedFrom if self._version >= 8 else "imapmig.messages"

    def _contains(self) -> str:
        """
        Whether a failure's searched columns contain the needle, for this
        database's schema version: an older one opened read-only has no
        names (nor, before version 8, Message-IDs).
        """
        contained = " OR ".join(self._dialect.contains.format(column=c) for c in _SEARCHED)
        if self._version < 10:
            contained = contained.replace("message_from", "NULL").replace(
                "message_subject", "NULL"
            )
        if self._version < 8:
            contained = contained.replace("message_id", "NULL")
        return f"({contained})"

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as in the destination and
        how many as failed (each by its latest outcome).

        @return: a Deferred firing with C{(appended, failed)}.
        """

        def summarise(rows: list[tuple[int, int]]) -> tuple[int, int]:
            ((total, failed),) = rows
            return (int(total) - int(failed), int(failed))

        return self._select(
            "read the summary",
            "SELECT count(*), count(failure) FROM imapmig.messages WHERE job = ?",
            (job,),
            summarise,
        )

    def counts(self, job: str) -> Deferred[OutcomeCounts]:
        """
        See L{IStateStore.counts}.
        """

        def count(rows: list[tuple[int, int, int, int, int]]) -> OutcomeCounts:
            ((copied, present, failed, converted, withNotes),) = rows
            return OutcomeCounts(
                copied=int(copied),
                alreadyPresent=int(present),
                failed=int(failed),
                lineEndingsConverted=int(converted),
                withNotes=int(withNotes),
            )

        return self._select(
            "read the counts",
            "SELECT"
            " count(*) FILTER (WHERE failure IS NULL AND NOT present),"
            " count(*) FILTER (WHERE failure IS NULL AND present),"
            " count(failure),"
            " count(*) FILTER (WHERE failure IS NULL AND converted),"
            " count(*) FILTER (WHERE failure IS NULL AND note IS NOT NULL)"
            " FROM imapmig.messages WHERE job = ?",
            (job,),
            count,
        )

    def activity(self, job: str) -> Deferred[JobActivity]:
        """
        See L{IStateStore.activity}: one scan of the job's messages.
        """

        def read(rows: list[tuple[Any, ...]]) -> JobActivity:
            ((octets, first, last, folders),) = rows
            return JobActivity(int(octets), first, last, int(folders))

        copied = "failure IS NULL AND NOT present"
        return self._select(
            "read the activity",
            f"SELECT coalesce(sum(size) FILTER (WHERE {copied}), 0),"
            f" min(updated_at) FILTER (WHERE {copied}),"
            f" max(updated_at) FILTER (WHERE {copied}),"
            " (SELECT count(*) FROM imapmig.folders WHERE job = ?)"
            " FROM imapmig.messages WHERE job = ?",
            (job, job),
            read,
        )

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.notes}.  Ordered by folder key, then message key.
        """
        return self._outcomes(
            "read notes",
            f"SELECT {self._outcomeColumns()} FROM imapmig.messages"
            " WHERE job = ? AND failure IS NULL AND note IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )

    def jobReports(self, jobs: Sequence[str]) -> Deferred[list[JobReport]]:
        """
        See L{IStateStore.jobReports}: seven statements in one snapshot,
        each over the set of C{jobs} (L{Dialect.inJobs}) by the index of
        each table, whose first column is the job.
        """
        if not jobs:
            return self._ifOpen([])
        statements = [self._dialect.sql(s) for s in self._reportStatements()]
        parameters = {"jobs": self._dialect.jobSet(jobs)}

        def read(connection: Any) -> list[JobReport]:
            tables = [connection.execute(s, parameters).fetchall() for s in statements]
            return _jobReports(jobs, *tables)

        return self._snapshot("read the report", read)

    def _reportStatements(self) -> tuple[str, ...]:
        """
        The statements of L{jobReports}, written as L{Dialect} says, each
        row starting with its job: the counts and activity of the jobs'
        messages, their folders marked, their failures, their notes, their
        jobs' failures, their folders' fallbacks and their timelines (each
        of the last three empty in a read-only database older than its
        table).
        """
        jobs = self._dialect.inJobs
        copied = "failure IS NULL AND NOT present"
        columns = self._outcomeColumns()
        failures = (
            "SELECT job, reason FROM imapmig.job_failures WHERE " + jobs
            if self._version >= 7
            else "SELECT NULL, NULL WHERE 0 = 1"
        )
        timeline = (
            "SELECT job, time, source, target, cause, by FROM imapmig.job_transitions"
            f" WHERE {jobs} ORDER BY job, seq"
            if self._version >= 11
            else "SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0 = 1"
        )
        fallbacks = (
            "SELECT job, mailbox, fallback, reason FROM imapmig.folder_fallbacks"
            f" WHERE {jobs} ORDER BY job, mailbox"
            if self._version >= 4
            else "SELECT NULL, NULL, NULL, NULL WHERE 0 = 1"
        )
        return (
            "SELECT job,"
            f" count(*) FILTER (WHERE {copied}),"
            " count(*) FILTER (WHERE failure IS NULL AND present),"
            " count(failure),"
            " count(*) FILTER (WHERE failure IS NULL AND converted),"
            " count(*) FILTER (WHERE failure IS NULL AND note IS NOT NULL),"
            f" coalesce(sum(size) FILTER (WHERE {copied}), 0),"
            f" min(updated_at) FILTER (WHERE {copied}),"
            f" max(updated_at) FILTER (WHERE {copied})"
            f" FROM imapmig.messages WHERE {jobs} GROUP BY job",
            f"SELECT job, count(*) FROM imapmig.folders WHERE {jobs} GROUP BY job",
            f"SELECT job, {columns} FROM {self._notCopied()}"
            f" WHERE {jobs} AND {self._dialect.notCopied} AND failure IS NOT NULL"
            " ORDER BY job, folder_key, message_key",
            f"SELECT job, {columns} FROM imapmig.messages"
            f" WHERE {jobs} AND failure IS NULL AND note IS NOT NULL"
            " ORDER BY job, folder_key, message_key",
            failures,
            fallbacks,
            timeline,
        )


_NO_COUNTS = OutcomeCounts(0, 0, 0, 0, 0)
_NO_ACTIVITY = (0, None, None)


def _jobReports(
    jobs: Sequence[str],
    totals: list[Any],
    folders: list[Any],
    failures: list[Any],
    notes: list[Any],
    jobFailures: list[Any],
    fallbacks: list[Any],
    timelines: list[Any],
) -> list[JobReport]:
    """
    The reports of C{jobs} from the rows of L{ReportQueries.jobReports}'s
    statements, each starting with its job.
    """
    counts = {row[0]: OutcomeCounts(*(int(n) for n in row[1:6])) for row in totals}
    activity = {row[0]: (int(row[6]), row[7], row[8]) for row in totals}
    marked = {job: int(count) for job, count in folders}
    reasons = {job: str(reason) for job, reason in jobFailures}
    failed = _byJob(failures, outcomeOf)
    noted = _byJob(notes, outcomeOf)
    fellBack = _byJob(fallbacks, lambda row: FolderFallback(*row))
    timeline = _byJob(timelines, transitionOf)
    return [
        JobReport(
            job=job,
            failure=reasons.get(job),
            counts=counts.get(job, _NO_COUNTS),
            activity=JobActivity(*activity.get(job, _NO_ACTIVITY), marked.get(job, 0)),
            failures=tuple(failed.get(job, ())),
            notes=tuple(noted.get(job, ())),
            fallbacks=tuple(fellBack.get(job, ())),
            timeline=tuple(timeline.get(job, ())),
        )
        for job in jobs
    ]


def _byJob(rows: list[Any], convert: Any) -> dict[str, list[Any]]:
    """
    What C{convert} makes of each of C{rows} without its first column,
    the job, by job, in their order.
    """
    byJob: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        byJob[row[0]].append(convert(tuple(row[1:])))
    return byJob
