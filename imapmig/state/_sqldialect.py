# -*- test-case-name: tests.test_state_dialect,tests.test_state_contract,tests.test_state -*-
"""
What the SQL stores' roles share, whichever the database: the dialect
their shared statements are written in (L{Dialect}: SQLite's and
PostgreSQL's), and L{SQLStore}, the means a role's shared code reads and
writes with, which each store's base gives (L{imapmig.state._sqlbase}
for SQLite, L{imapmig.state._pgbase} for PostgreSQL).

What it replaces: the SQLite and PostgreSQL stores' parallel classes of
one role, which repeated each other's logic and differed by dialect; each
role is now one class over L{SQLStore} (the reports, the budgets, the
reads of the outcomes, marks and job records), and a store's own
subclass adds only what genuinely differs (SQLite's transactions in the
reactor's thread, PostgreSQL's batcher and fence).  The shared statements
use what SQLite has had since 3.35 (an aggregate's C{FILTER}, an upsert's
C{RETURNING}), as Debian 12's 3.40 has.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Sequence, TypeVar

from twisted.internet.defer import Deferred

from imapmig.state._schema import SCHEMA_VERSION
from imapmig.state.outcomes import OUTCOME_COLUMNS, MessageOutcome, outcomeOf

_T = TypeVar("_T")

# The columns of a messages row that make a MessageOutcome, for a SQLite
# database older than version 10 opened read-only, which has no names
# (nor, before version 8, Message-IDs).
_UNNAMED_COLUMNS = (
    OUTCOME_COLUMNS.replace("message_date", "NULL")
    .replace("message_from", "NULL")
    .replace("message_subject", "NULL")
)
_OUTCOME_COLUMNS_OF = {
    8: _UNNAMED_COLUMNS,
    7: _UNNAMED_COLUMNS.replace("message_id", "NULL"),
}

# A named parameter (":needle"), not a cast ("::text"); compiled by re's
# cache at its first use, by PostgreSQL's store only.
_NAMED = r"(?<!:):([a-z_]\w*)"


class Dialect:
    """
    What the SQL of one database differs by, for the statements the
    stores' roles share: each is written once, with its tables in the
    C{imapmig} schema (PostgreSQL's; SQLite's database has one schema)
    and C{?} or C{:name} parameters (SQLite's; psycopg's are C{%s} and
    C{%(name)s}), and L{sql} gives it in this dialect, once per process.

    @ivar name: C{"sqlite"} or C{"postgresql"}.
    @ivar notCopied: the condition of the partial index
        C{messages_not_copied} as its schema writes it (so that the
        database reads that index): messages failed or already present.
    @ivar notCopiedFrom: the messages table, read through the index of
        messages not copied (SQLite, without statistics, would not choose
        it over the primary key).
    @ivar contains: whether the text C{{column}} contains C{:needle}
        (ASCII lower case), folding ASCII letters only.
    @ivar least: the function of the smaller of two values.
    @ivar greatest: the function of the larger of two values.
    @ivar inJobs: whether a row's C{job} is one of the named parameter
        C{:jobs}, given as L{jobSet} makes it: a set of jobs read in one
        statement (as an index's ranges), not a statement per job.
    @ivar jobSet: the value of C{:jobs} for a list of jobs' names.
    """

    def __init__(
        self,
        name: str,
        notCopied: str,
        notCopiedFrom: str,
        contains: str,
        least: str,
        greatest: str,
        inJobs: str,
        jobSet: Callable[[Sequence[str]], object],
    ) -> None:
        self.name = name
        self.notCopied = notCopied
        self.notCopiedFrom = notCopiedFrom
        self.contains = contains
        self.least = least
        self.greatest = greatest
        self.inJobs = inJobs
        self.jobSet = jobSet
        self._statements: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<Dialect {self.name}>"

    def sql(self, statement: str) -> str:
        """
        C{statement}, written as this class says, in this dialect.
        """
        translated = self._statements.get(statement)
        if translated is None:
            if self.name == "sqlite":
                translated = statement.replace("imapmig.", "")
            else:
                translated = re.sub(_NAMED, r"%(\1)s", statement.replace("?", "%s"))
            self._statements[statement] = translated
        return translated


SQLITE = Dialect(
    "sqlite",
    notCopied="(failure IS NOT NULL OR present != 0)",
    notCopiedFrom="messages INDEXED BY messages_not_copied",
    contains="instr(lower({column}), :needle)",
    least="min",
    greatest="max",
    # One text parameter whatever the number of jobs (a statement's
    # variables are limited), read by the index as IN's list.
    inJobs="job IN (SELECT value FROM json_each(:jobs))",
    jobSet=lambda jobs: json.dumps(list(jobs)),
)

POSTGRESQL = Dialect(
    "postgresql",
    notCopied="(failure IS NOT NULL OR present)",
    notCopiedFrom="imapmig.messages",
    # The "C" collation folds ASCII letters only, as SQLite's lower() does.
    contains='strpos(lower({column} COLLATE "C"), :needle) > 0',
    least="least",
    greatest="greatest",
    inJobs="job = ANY(CAST(:jobs AS text[]))",
    jobSet=list,
)


class SQLStore:
    """
    The means of a SQL store's roles to read and write its database,
    which its base (L{imapmig.state._sqlbase.SQLiteBase},
    L{imapmig.state._pgbase.PostgreSQLBase}) gives.

    @ivar _dialect: the SQL of the database.
    @ivar _where: the database, for error messages (SQLite's file, or
        PostgreSQL's URI without its password).
    @ivar _seconds: the clock that stamps what is recorded.
    @ivar _version: the SQLite schema version whose tables and columns
        the database has: older only for a SQLite database opened
        read-only; PostgreSQL's has all of them.
    """

    _dialect: Dialect
    _where: str
    _seconds: Callable[[], float]
    _version: int = SCHEMA_VERSION

    def _reading(self, action: str, read: Callable[[Any], _T]) -> Deferred[_T]:
        """
        What C{read} returns, called with a connection to read with; its
        errors as imapmig's.

        @param action: what C{read} does, for the error message.
        """
        raise NotImplementedError()

    def _read(
        self,
        action: str,
        query: str,
        parameters: Any,
        convert: Callable[[list[Any]], _T],
    ) -> Deferred[_T]:
        """
        What C{convert} makes of the rows C{query}, in the database's own
        SQL, finds.

        @param action: what the query reads, for the error message.
        """
        return self._reading(
            action, lambda connection: convert(connection.execute(query, parameters).fetchall())
        )

    def _transaction(self, action: str, write: Callable[[Any], _T]) -> Deferred[_T]:
        """
        Call C{write} with a connection inside one transaction of its
        own: all it writes is committed, or none of it; its errors as
        imapmig's.

        @param action: what the write does, for the error message.
        """
        raise NotImplementedError()

    def _snapshot(self, action: str, read: Callable[[Any], _T]) -> Deferred[_T]:
        """
        What C{read} returns, called with a connection whose statements
        read one state of the database (none of this store's writes comes
        between them); its errors as imapmig's.

        @param action: what C{read} does, for the error message.
        """
        raise NotImplementedError()

    def _ifOpen(self, value: _T) -> Deferred[_T]:
        """
        C{value}, unless the store was closed: the answer of a call that
        has nothing to ask the database.
        """
        raise NotImplementedError()

    def _select(
        self,
        action: str,
        statement: str,
        parameters: Any,
        convert: Callable[[list[Any]], _T],
    ) -> Deferred[_T]:
        """
        What C{convert} makes of the rows C{statement}, written as
        L{Dialect} says, finds.
        """
        return self._read(action, self._dialect.sql(statement), parameters, convert)

    def _outcomes(
        self, action: str, statement: str, parameters: Any
    ) -> Deferred[list[MessageOutcome]]:
        """
        The outcomes that C{statement}, written as L{Dialect} says and
        selecting L{_outcomeColumns}, finds.
        """
        return self._select(
            action, statement, parameters, lambda rows: [outcomeOf(row) for row in rows]
        )

    def _outcomeColumns(self) -> str:
        """
        The columns that make a L{MessageOutcome}, for this database's
        schema version.
        """
        if self._version >= 10:
            return OUTCOME_COLUMNS
        return _OUTCOME_COLUMNS_OF[max(7, min(8, self._version))]

    def ping(self) -> Deferred[None]:
        """
        See L{IStateStore.ping<imapmig.state.IStateStore.ping>}: reads the
        schema version.
        """
        return self._select(
            "read the state database",
            "SELECT max(version) FROM imapmig.schema_version",
            (),
            lambda rows: None,
        )
