# -*- test-case-name: tests.test_state_manifest,tests.test_state -*-
"""
The SQLite state store's role of L{IReportQueries}: counts, failures,
notes and the pages of the status site and the audit manifest, read from
the C{messages} table.

Taken out of C{imapmig/state/sqlite.py}, whose store had grown to 837
lines.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from imapmig.state._sqlbase import OutcomeRow, SQLiteBase
from imapmig.state.outcomes import outcomeOf
from imapmig.state.outcomes import MessageOutcome
from imapmig.state.reports import (
    FailuresPage,
    FailuresQuery,
    IReportQueries,
    JobActivity,
    OutcomeCounts,
)

# What the audit manifest and the failure pages read: messages not copied
# by imapmig (failed or already present).  Written as the partial index
# messages_not_copied's condition, so that SQLite reads that index.
_NOT_COPIED = "(failure IS NOT NULL OR present != 0)"

# The filter of a failure page: the needle (ASCII lower case) in any of
# these columns.
_CONTAINS = (
    "(instr(lower(folder_key), :needle) OR instr(lower(mailbox), :needle)"
    " OR instr(lower(message_key), :needle)"
    " OR instr(lower(coalesce(message_id, '')), :needle)"
    " OR instr(lower(failure), :needle) OR instr(lower(coalesce(message_from, '')), :needle)"
    " OR instr(lower(coalesce(message_subject, '')), :needle))"
)


@implementer(IReportQueries)
class SQLiteReportQueries(SQLiteBase):
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
            f"SELECT {self._outcomeColumns()} FROM messages"
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
        L{FAILURES_SEARCH_ROWS}) rows of it.
        """
        query = FailuresQuery.of(offset, limit, contains, after)
        return self._reading(
            "read failures", lambda connection: self._failuresPage(connection, query, job)
        )

    def _failuresPage(
        self, connection: sqlite3.Connection, query: FailuresQuery, job: str
    ) -> FailuresPage:
        """
        The page C{query} asks for, read from C{job}'s failures.
        """
        counting, reading, ends = self._failureStatements(query)
        parameters = query.parameters(job)
        ((read, matched),) = connection.execute(counting, parameters).fetchall()
        rows: list[OutcomeRow] = []
        if query.readsPage(matched):
            rows = connection.execute(reading, parameters).fetchall()
        rows, last = query.cut(rows)
        if query.searchesOn(last):
            last = query.searchEnd(connection.execute(ends, parameters).fetchall())
        return query.page(read, matched, [outcomeOf(row) for row in rows], last)

    def _failureStatements(self, query: FailuresQuery) -> tuple[str, str, str]:
        """
        The statements of C{query}, in this database's SQL: counting,
        reading the page, and reading where the search stopped.
        """
        base = (
            f"FROM {self._notCopied()} WHERE job = :job AND {_NOT_COPIED}"
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
        ends = f"SELECT folder_key, message_key FROM ({ordered} LIMIT 2 OFFSET :rows - 1)"
        # Counting one row more than the limit tells whether there are more.
        if not query.needle:
            counting = f"SELECT count(*), min(count(*), :rows) FROM (SELECT 1 {base} LIMIT :more)"
            reading = (
                f"SELECT {columns} FROM ({ordered} LIMIT :limit OFFSET :offset)"
                " ORDER BY folder_key, message_key"
            )
            return counting, reading, ends
        # An older database opened read-only has no Message-IDs.
        contained = self._contains()
        # The first rows from the start (the count) or from `after` (the
        # page), then the needle among them: a needle found nowhere would
        # otherwise read every failure.
        counting = (
            f"SELECT (SELECT count(*) FROM (SELECT 1 {base} LIMIT :more)),"
            f" (SELECT count(*) FROM ({fromStart} LIMIT :rows) WHERE {contained})"
        )
        reading = (
            f"SELECT {columns} FROM ({ordered} LIMIT :rows) WHERE {contained}"
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
        columns = self._outcomeColumns()
        table = self._notCopied()
        if after is None:
            return self._outcomes(
                "read the manifest",
                f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
                " ORDER BY folder_key, message_key LIMIT ?",
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
            f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
            " AND folder_key = ? AND message_key > ? ORDER BY message_key LIMIT ?",
            (job, folderKey, messageKey, limit),
        )

        def nextFolders(page: list[MessageOutcome]) -> Deferred[list[MessageOutcome]]:
            if len(page) >= limit:
                return succeed(page)
            rest = self._outcomes(
                "read the manifest",
                f"SELECT {columns} FROM {table} WHERE job = ? AND {_NOT_COPIED}"
                " AND folder_key > ? ORDER BY folder_key, message_key LIMIT ?",
                (job, folderKey, limit - len(page)),
            )
            return rest.addCallback(lambda more: page + more)

        return d.addCallback(nextFolders)

    def _notCopied(self) -> str:
        """
        The messages table, read through its index of messages not copied
        (which SQLite, without statistics, would not choose over the
        primary key) where the database has one.
        """
        return "messages INDEXED BY messages_not_copied" if self._version >= 8 else "messages"

    def _contains(self) -> str:
        """
        L{_CONTAINS} for this database's schema version: an older one
        opened read-only has no names (nor, before version 8, Message-IDs).
        """
        contained = _CONTAINS
        if self._version < 10:
            contained = contained.replace("message_from", "NULL").replace(
                "message_subject", "NULL"
            )
        if self._version < 8:
            contained = contained.replace("message_id", "NULL")
        return contained

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as in the destination and
        how many as failed (each by its latest outcome).

        @return: a Deferred firing with C{(appended, failed)}.
        """

        def summarise(rows: list[tuple[int, int]]) -> tuple[int, int]:
            ((total, failed),) = rows
            return (int(total) - int(failed), int(failed))

        return self._read(
            "read the summary",
            "SELECT count(*), count(failure) FROM messages WHERE job = ?",
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

        return self._read(
            "read the counts",
            # sum() of no rows is NULL, hence the coalesce.
            "SELECT"
            " coalesce(sum(failure IS NULL AND present = 0), 0),"
            " coalesce(sum(failure IS NULL AND present != 0), 0),"
            " count(failure),"
            " coalesce(sum(failure IS NULL AND converted != 0), 0),"
            " coalesce(sum(failure IS NULL AND note IS NOT NULL), 0)"
            " FROM messages WHERE job = ?",
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

        return self._read(
            "read the activity",
            "SELECT"
            " coalesce(sum(CASE WHEN failure IS NULL AND present = 0 THEN size END), 0),"
            " min(CASE WHEN failure IS NULL AND present = 0 THEN updated_at END),"
            " max(CASE WHEN failure IS NULL AND present = 0 THEN updated_at END),"
            " (SELECT count(*) FROM folders WHERE job = ?1)"
            " FROM messages WHERE job = ?1",
            (job,),
            read,
        )

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.notes}.  Ordered by folder key, then message key.
        """
        return self._outcomes(
            "read notes",
            f"SELECT {self._outcomeColumns()} FROM messages"
            " WHERE job = ? AND failure IS NULL AND note IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )
