# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's role of L{IBudgetRecords}: the C{budget_use}
table, as the SQLite store's L{imapmig.state._sqlrecords.SQLiteBudgetRecords}
keeps it.  The addition is one upsert whose row lock serializes daemons
adding to one account at once; reserving before use, so that a fleet never
overspends, is the shared limits' work (docs/fleet-design.md, "Daily
budgets reserved in the database").
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbase import Connection, PostgreSQLBase
from imapmig.state.budgets import IBudgetRecords

_ADD = """
    INSERT INTO imapmig.budget_use AS b (server, "user", direction, day, octets, updated_at)
    VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (server, "user", direction, day)
    DO UPDATE SET octets = b.octets + excluded.octets, updated_at = excluded.updated_at
    RETURNING octets
"""


@implementer(IBudgetRecords)
class PostgreSQLBudgetRecords(PostgreSQLBase):
    """
    L{IBudgetRecords} in the C{imapmig.budget_use} table.
    """

    def budgetUsed(self, server: str, user: str, direction: str, day: str) -> Deferred[int]:
        """
        See L{IBudgetRecords.budgetUsed}.
        """
        return self._read(
            "read the budget use",
            'SELECT octets FROM imapmig.budget_use WHERE server = %s AND "user" = %s'
            " AND direction = %s AND day = %s",
            (server, user, direction, day),
            lambda rows: int(rows[0][0]) if rows else 0,
        )

    def addBudgetUse(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IBudgetRecords.addBudgetUse}; the records of the account's
        earlier days in that direction are deleted.
        """
        key = (server, user, direction)
        now = self._seconds()

        def write(connection: Connection) -> int:
            connection.execute(
                'DELETE FROM imapmig.budget_use WHERE server = %s AND "user" = %s'
                " AND direction = %s AND day < %s",
                (*key, day),
            )
            total = connection.execute(_ADD, (*key, day, octets, now)).fetchone()
            assert total is not None
            return int(total[0])

        return self._transaction("record the budget use", write)
