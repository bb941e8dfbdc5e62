# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's role of L{IReportQueries}: counts, failures,
notes and the pages of the status site and the audit manifest, read from
the C{messages} table; the failure pages through L{FailuresQuery}, the
logic every store shares, in PostgreSQL's SQL.  The counterpart of
L{imapmig.state._sqlreports}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbase import Connection, PostgreSQLBase
from imapmig.state.outcomes import OUTCOME_COLUMNS, outcomeOf
from imapmig.state.outcomes import MessageOutcome
from imapmig.state.reports import (
    FailuresPage,
    FailuresQuery,
    IReportQueries,
    JobActivity,
    OutcomeCounts,
)

# Messages not copied by imapmig (failed or already present): the
# condition of the partial index messages_not_copied.
_NOT_COPIED = "(failure IS NOT NULL OR present)"

# The filter of a failure page: the needle (ASCII lower case) in any of
# these columns, each folded in the "C" collation, which folds ASCII
# letters only, as SQLite's lower() does.
_CONTAINS = " OR ".join(
    f'strpos(lower({column} COLLATE "C"), %(needle)s) > 0'
    for column in (
        "folder_key", "mailbox", "message_key", "coalesce(message_id, '')", "failure",
        "coalesce(message_from, '')", "coalesce(message_subject, '')",
    )
)  # fmt: skip

_BASE = (
    f"FROM imapmig.messages WHERE job = %(job)s AND {_NOT_COPIED} AND failure IS NOT NULL"
)
_FROM_START = f"SELECT * {_BASE} ORDER BY folder_key, message_key"
# Two seeks in the index, as in manifestOutcomes.
_AFTER = (
    f"SELECT * {_BASE} AND folder_key = %(folder)s AND message_key > %(key)s"
    f" UNION ALL SELECT * {_BASE} AND folder_key > %(folder)s"
    " ORDER BY folder_key, message_key"
)

_MANIFEST = f"SELECT {OUTCOME_COLUMNS} FROM imapmig.messages WHERE job = %s AND {_NOT_COPIED}"


def _failureStatements(query: FailuresQuery) -> tuple[str, str, str]:
    """
    The statements of C{query} in PostgreSQL's SQL: counting, reading the
    page, and reading where the search stopped.
    """
    ordered = _FROM_START if query.after is None else _AFTER
    ends = (
        f"SELECT folder_key, message_key FROM ({ordered} LIMIT 2 OFFSET %(rows)s - 1) AS e"
    )
    if not query.needle:
        counting = (
            "SELECT count(*), least(count(*), %(rows)s)"
            f" FROM (SELECT 1 {_BASE} LIMIT %(more)s) AS c"
        )
        reading = (
            f"SELECT {OUTCOME_COLUMNS} FROM ({ordered} LIMIT %(limit)s OFFSET %(offset)s) AS p"
            " ORDER BY folder_key, message_key"
        )
        return counting, reading, ends
    # The first rows from the start (the count) or from `after` (the page),
    # then the needle among them: a needle found nowhere would otherwise
    # read every failure.
    counting = (
        f"SELECT (SELECT count(*) FROM (SELECT 1 {_BASE} LIMIT %(more)s) AS c),"
        f" (SELECT count(*) FROM ({_FROM_START} LIMIT %(rows)s) AS s WHERE {_CONTAINS})"
    )
    reading = (
        f"SELECT {OUTCOME_COLUMNS} FROM ({ordered} LIMIT %(rows)s) AS s WHERE {_CONTAINS}"
        " ORDER BY folder_key, message_key LIMIT %(limit)s OFFSET %(offset)s"
    )
    return counting, reading, ends


@implementer(IReportQueries)
class PostgreSQLReportQueries(PostgreSQLBase):
    """
    L{IReportQueries} over the C{imapmig.messages} table.
    """

    def _outcomes(
        self, action: str, query: str, parameters: tuple[object, ...]
    ) -> Deferred[list[MessageOutcome]]:
        """
        The outcomes that C{query}, selecting L{OUTCOME_COLUMNS}, finds.
        """
        return self._read(action, query, parameters, lambda rows: [outcomeOf(r) for r in rows])

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IReportQueries.failures}.
        """
        return self._outcomes(
            "read failures",
            f"SELECT {OUTCOME_COLUMNS} FROM imapmig.messages"
            " WHERE job = %s AND failure IS NOT NULL ORDER BY folder_key, message_key",
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
        See L{IReportQueries.failuresPage}: the statements of
        L{FailuresQuery} over the index of messages not copied, in one
        read-only transaction (one snapshot for the count and the page).
        """
        query = FailuresQuery.of(offset, limit, contains, after)
        counting, reading, ends = _failureStatements(query)
        parameters = query.parameters(job)

        def read(connection: Connection) -> FailuresPage:
            connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = connection.execute(counting, parameters).fetchone()
            assert row is not None
            read, matched = row
            rows: list[tuple[Any, ...]] = []
            if query.readsPage(matched):
                rows = connection.execute(reading, parameters).fetchall()
            rows, last = query.cut(rows)
            if query.searchesOn(last):
                last = query.searchEnd(connection.execute(ends, parameters).fetchall())
            return query.page(read, matched, [outcomeOf(row) for row in rows], last)

        return self._transaction("read failures", read)

    def manifestOutcomes(
        self, job: str, after: tuple[str, str] | None, limit: int
    ) -> Deferred[list[MessageOutcome]]:
        """
        See L{IReportQueries.manifestOutcomes}: a range of the index of
        messages not copied, by keyset (the rest of the folder of
        C{after}, then the folders after it).
        """
        if after is None:
            return self._outcomes(
                "read the manifest",
                f"{_MANIFEST} ORDER BY folder_key, message_key LIMIT %s",
                (job, limit),
            )
        folderKey, messageKey = after
        return self._outcomes(
            "read the manifest",
            f"({_MANIFEST} AND folder_key = %s AND message_key > %s"
            " ORDER BY message_key LIMIT %s)"
            f" UNION ALL ({_MANIFEST} AND folder_key > %s"
            " ORDER BY folder_key, message_key LIMIT %s)"
            " ORDER BY folder_key, message_key LIMIT %s",
            (job, folderKey, messageKey, limit, job, folderKey, limit, limit),
        )

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        See L{IReportQueries.summary}.
        """

        def summarise(rows: list[tuple[int, int]]) -> tuple[int, int]:
            ((total, failed),) = rows
            return (int(total) - int(failed), int(failed))

        return self._read(
            "read the summary",
            "SELECT count(*), count(failure) FROM imapmig.messages WHERE job = %s",
            (job,),
            summarise,
        )

    def counts(self, job: str) -> Deferred[OutcomeCounts]:
        """
        See L{IReportQueries.counts}.
        """

        def count(rows: list[tuple[int, int, int, int, int]]) -> OutcomeCounts:
            ((copied, present, failed, converted, withNotes),) = rows
            return OutcomeCounts(copied, present, failed, converted, withNotes)

        return self._read(
            "read the counts",
            "SELECT"
            " count(*) FILTER (WHERE failure IS NULL AND NOT present),"
            " count(*) FILTER (WHERE failure IS NULL AND present),"
            " count(failure),"
            " count(*) FILTER (WHERE failure IS NULL AND converted),"
            " count(*) FILTER (WHERE failure IS NULL AND note IS NOT NULL)"
            " FROM imapmig.messages WHERE job = %s",
            (job,),
            count,
        )

    def activity(self, job: str) -> Deferred[JobActivity]:
        """
        See L{IReportQueries.activity}: one scan of the job's messages.
        """

        def read(rows: list[tuple[Any, ...]]) -> JobActivity:
            ((octets, first, last, folders),) = rows
            return JobActivity(int(octets), first, last, int(folders))

        copied = "failure IS NULL AND NOT present"
        return self._read(
            "read the activity",
            f"SELECT coalesce(sum(size) FILTER (WHERE {copied}), 0),"
            f" min(updated_at) FILTER (WHERE {copied}),"
            f" max(updated_at) FILTER (WHERE {copied}),"
            " (SELECT count(*) FROM imapmig.folders WHERE job = %s)"
            " FROM imapmig.messages WHERE job = %s",
            (job, job),
            read,
        )

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IReportQueries.notes}.
        """
        return self._outcomes(
            "read notes",
            f"SELECT {OUTCOME_COLUMNS} FROM imapmig.messages"
            " WHERE job = %s AND failure IS NULL AND note IS NOT NULL"
            " ORDER BY folder_key, message_key",
            (job,),
        )
