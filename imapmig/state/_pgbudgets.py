# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's role of L{IBudgetRecords}: the C{budget_use}
table, as the SQLite store's L{imapmig.state._sqlrecords.SQLiteBudgetRecords}
keeps it.  The addition is one upsert whose row lock serializes daemons
adding to one account at once.  A reservation (L{reserveBudget}) is the
same upsert made conditional (docs/fleet-design.md, "Daily budgets
reserved in the database"): its C{DO UPDATE ... WHERE} is evaluated on
the row as it is once the lock is taken (PostgreSQL re-reads a row that
another transaction changed meanwhile, in READ COMMITTED as in stronger
isolation), so no two daemons both see room for their units; an insert
(the day's first reservation) always passes, as the first message of a
day does however large.
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

_RESERVE = """
    INSERT INTO imapmig.budget_use AS b (server, "user", direction, day, octets, updated_at)
    VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (server, "user", direction, day)
    DO UPDATE SET octets = b.octets + excluded.octets, updated_at = excluded.updated_at
    WHERE b.octets + excluded.octets <= %s OR b.octets = 0
    RETURNING octets
"""

_GIVE_BACK = """
    UPDATE imapmig.budget_use SET octets = GREATEST(octets - %s, 0), updated_at = %s
    WHERE server = %s AND "user" = %s AND direction = %s AND day = %s
    RETURNING octets
"""

_DROP_EARLIER = """
    DELETE FROM imapmig.budget_use
    WHERE server = %s AND "user" = %s AND direction = %s AND day < %s
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
            connection.execute(_DROP_EARLIER, (*key, day))
            total = connection.execute(_ADD, (*key, day, octets, now)).fetchone()
            assert total is not None
            return int(total[0])

        return self._transaction("record the budget use", write)

    def reserveBudget(
        self, server: str, user: str, direction: str, day: str, octets: int, limit: int
    ) -> Deferred[int | None]:
        """
        See L{IBudgetRecords.reserveBudget}: one conditional upsert (no row
        returned: it does not fit); the records of the account's earlier
        days in that direction are deleted.
        """
        key = (server, user, direction)
        now = self._seconds()

        def write(connection: Connection) -> int | None:
            connection.execute(_DROP_EARLIER, (*key, day))
            total = connection.execute(_RESERVE, (*key, day, octets, now, limit)).fetchone()
            return None if total is None else int(total[0])

        return self._transaction("reserve the budget", write)

    def giveBackBudget(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IBudgetRecords.giveBackBudget}.
        """
        row = (octets, self._seconds(), server, user, direction, day)

        def write(connection: Connection) -> int:
            total = connection.execute(_GIVE_BACK, row).fetchone()
            return 0 if total is None else int(total[0])

        return self._transaction("give back the budget", write)
