# -*- test-case-name: tests.test_state_dialect -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state._sqldialect}: a statement the SQL stores' roles
share, written once, in SQLite's and in PostgreSQL's SQL.  (What the
statements do on each database is L{tests.statecontract}'s, run on both.)
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.state._sqldialect import POSTGRESQL, SQLITE

_STATEMENT = (
    "SELECT reason FROM imapmig.job_failures WHERE job = ? AND reason::text = :needle"
)


class DialectTests(SynchronousTestCase):
    """
    L{Dialect.sql<imapmig.state._sqldialect.Dialect.sql>}.
    """

    def test_sqlite(self) -> None:
        """
        SQLite's statement has its tables in the database's one schema
        and keeps its parameters.
        """
        self.assertEqual(
            SQLITE.sql(_STATEMENT),
            "SELECT reason FROM job_failures WHERE job = ? AND reason::text = :needle",
        )

    def test_postgresql(self) -> None:
        """
        PostgreSQL's statement keeps the C{imapmig} schema and takes
        psycopg's parameters, C{%s} and C{%(name)s}; a cast is not a
        named parameter.
        """
        self.assertEqual(
            POSTGRESQL.sql(_STATEMENT),
            "SELECT reason FROM imapmig.job_failures WHERE job = %s"
            " AND reason::text = %(needle)s",
        )

    def test_once(self) -> None:
        """
        A statement is translated once: its translation is the same
        string each time it is asked for.
        """
        self.assertIs(POSTGRESQL.sql(_STATEMENT), POSTGRESQL.sql(_STATEMENT))
