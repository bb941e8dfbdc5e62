# -*- test-case-name: tests.test_state,tests.test_state_budget,tests.test_state_timeline,tests.test_state_contract -*-
"""
The SQL state stores' smaller roles: L{IFolderMarks} (the C{folders}
and C{folder_fallbacks} tables), L{IJobRecords} (C{job_failures},
C{job_holds}, C{job_transitions}) and L{IBudgetRecords} (C{budget_use}).
Each role's reads are one class for SQLite's and PostgreSQL's stores
(L{FolderMarks}, L{JobRecords}), over L{imapmig.state._sqldialect};
SQLite's writes, a transaction each, are its subclasses here
(PostgreSQL's, through its batcher, are in L{imapmig.state._pgrecords});
L{BudgetRecords}, whose writes are transactions in both, is whole.

Taken out of C{imapmig/state/sqlite.py}, whose store had grown to 837
lines; PostgreSQL's C{_pgbudgets.py}, and the reads of its
C{_pgfolders.py} and C{_pgrecords.py}, are merged into it.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Sequence

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from imapmig.state._sqlbase import SQLiteBase
from imapmig.state._sqldialect import SQLStore
from imapmig.state._timeline import transitionOf, writeTransition
from imapmig.state.budgets import IBudgetRecords
from imapmig.state.folders import FolderFallback, FolderMark, IFolderMarks
from imapmig.state.jobrecords import HOLDS, IJobRecords, JobHold, Transition

_UPSERT_MARK = """
    INSERT INTO folders (
        job, folder_key, uidvalidity, uidnext, highestmodseq, messages, deferred, fingerprint,
        octets, updated_at
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job, folder_key) DO UPDATE SET
        uidvalidity = excluded.uidvalidity,
        uidnext = excluded.uidnext,
        highestmodseq = excluded.highestmodseq,
        messages = excluded.messages,
        deferred = excluded.deferred,
        fingerprint = excluded.fingerprint,
        octets = excluded.octets,
        updated_at = excluded.updated_at
"""


class FolderMarks(SQLStore):
    """
    The reads of L{IFolderMarks} in the C{folders} and
    C{folder_fallbacks} tables, one class for SQLite's and PostgreSQL's
    stores; each store's subclass writes them.
    """

    def folderMark(self, job: str, folderKey: str) -> Deferred[FolderMark | None]:
        """
        See L{IStateStore.folderMark}.
        """

        def mark(
            rows: list[tuple[int, int, int | None, int, Any, str | None, int | None]],
        ) -> FolderMark | None:
            if not rows:
                return None
            ((uidValidity, uidNext, highestModSeq, messages, deferred, fingerprint, octets),) = rows
            return FolderMark(
                uidValidity, uidNext, highestModSeq, messages, _uids(deferred), fingerprint, octets
            )

        # An older database opened read-only has no deferred UIDs yet, nor
        # fingerprints.
        deferred = "deferred" if self._version >= 6 else "NULL"
        fingerprint = "fingerprint, octets" if self._version >= 12 else "NULL, NULL"
        return self._select(
            "read the folder mark",
            f"SELECT uidvalidity, uidnext, highestmodseq, messages, {deferred}, {fingerprint}"
            " FROM imapmig.folders WHERE job = ? AND folder_key = ?",
            (job, folderKey),
            mark,
        )

    def folderFallbacks(self, job: str) -> Deferred[list[FolderFallback]]:
        """
        See L{IStateStore.folderFallbacks}: by mailbox, in code point order
        (PostgreSQL's column is C{COLLATE "C"}).
        """
        return self._select(
            "read the folder fallbacks",
            "SELECT mailbox, fallback, reason FROM imapmig.folder_fallbacks"
            " WHERE job = ? ORDER BY mailbox",
            (job,),
            lambda rows: [FolderFallback(*row) for row in rows],
        )


def _uids(deferred: str | Sequence[int] | None) -> tuple[int, ...]:
    """
    A folder mark's deferred UIDs, from SQLite's text (C{"3,7"}) or
    PostgreSQL's array.
    """
    if not deferred:
        return ()
    if isinstance(deferred, str):
        return tuple(int(uid) for uid in deferred.split(","))
    return tuple(deferred)


@implementer(IFolderMarks)
class SQLiteFolderMarks(FolderMarks, SQLiteBase):
    """
    L{IFolderMarks} in SQLite's C{folders} and C{folder_fallbacks} tables,
    each write a transaction of its own.
    """

    def recordFolderMark(self, job: str, folderKey: str, mark: FolderMark) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderMark}.
        """
        row = (
            job,
            folderKey,
            mark.uidValidity,
            mark.uidNext,
            mark.highestModSeq,
            mark.messages,
            ",".join(str(uid) for uid in mark.deferred) or None,
            mark.fingerprint,
            mark.octets,
            self._seconds(),
        )
        return self._transaction(
            "record the folder mark", lambda connection: _execute(connection, _UPSERT_MARK, row)
        )

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IStateStore.forgetFolder}.
        """
        return self._transaction(
            "forget the folder",
            lambda connection: _execute(
                connection,
                "DELETE FROM folders WHERE job = ? AND folder_key = ?",
                (job, folderKey),
            ),
        )

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderFallback}.
        """
        row = (job, fallback.mailbox, fallback.fallback, fallback.reason, self._seconds())
        return self._transaction(
            "record the folder fallback",
            lambda connection: _execute(
                connection,
                "INSERT OR REPLACE INTO folder_fallbacks"
                " (job, mailbox, fallback, reason, updated_at) VALUES (?, ?, ?, ?, ?)",
                row,
            ),
        )


class JobRecords(SQLStore):
    """
    The reads of L{IJobRecords} in the C{job_failures}, C{job_holds} and
    C{job_transitions} tables, one class for SQLite's and PostgreSQL's
    stores; each store's subclass writes them.
    """

    def jobFailure(self, job: str) -> Deferred[str | None]:
        """
        See L{IStateStore.jobFailure}.
        """
        if self._version < 7:
            # An older database opened read-only records no job failure.
            return succeed(None)
        return self._select(
            "read the job's failure",
            "SELECT reason FROM imapmig.job_failures WHERE job = ?",
            (job,),
            lambda rows: str(rows[0][0]) if rows else None,
        )

    def jobHolds(self) -> Deferred[dict[str, JobHold]]:
        """
        See L{IStateStore.jobHolds}.
        """
        if self._version < 9:
            # An older database opened read-only records no hold.
            return succeed({})
        return self._select(
            "read the admin's holds",
            "SELECT job, hold, by, updated_at FROM imapmig.job_holds",
            (),
            lambda rows: {
                str(job): JobHold(str(hold), None if by is None else str(by), float(at))
                for job, hold, by, at in rows
            },
        )

    def timeline(self, job: str) -> Deferred[list[Transition]]:
        """
        See L{IStateStore.timeline}: oldest first.
        """
        if self._version < 11:
            # An older database opened read-only records no timeline.
            return self._ifOpen([])
        return self._select(
            "read the job's timeline",
            "SELECT time, source, target, cause, by FROM imapmig.job_transitions"
            " WHERE job = ? ORDER BY seq",
            (job,),
            lambda rows: [transitionOf(row) for row in rows],
        )


@implementer(IJobRecords)
class SQLiteJobRecords(JobRecords, SQLiteBase):
    """
    L{IJobRecords} in SQLite's C{job_failures}, C{job_holds} and
    C{job_transitions} tables, each write a transaction of its own.
    """

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IStateStore.recordJobFailure}.
        """

        def write(connection: sqlite3.Connection) -> None:
            if reason is None:
                connection.execute("DELETE FROM job_failures WHERE job = ?", (job,))
            else:
                connection.execute(
                    "INSERT OR REPLACE INTO job_failures (job, reason, updated_at)"
                    " VALUES (?, ?, ?)",
                    (job, reason, self._seconds()),
                )

        return self._transaction("record the job's failure", write)

    def recordJobHolds(
        self, jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordJobHolds}.
        """
        if hold is not None and hold not in HOLDS:
            raise ValueError(f"not a job hold: {hold!r}")

        def write(connection: sqlite3.Connection) -> None:
            if hold is None:
                connection.executemany(
                    "DELETE FROM job_holds WHERE job = ?", [(job,) for job in jobs]
                )
            else:
                now = self._seconds()
                connection.executemany(
                    "INSERT OR REPLACE INTO job_holds (job, hold, by, updated_at)"
                    " VALUES (?, ?, ?, ?)",
                    [(job, hold, by, now) for job in jobs],
                )

        return self._transaction("record the admin's hold", write)

    def recordTransition(self, job: str, transition: Transition) -> Deferred[None]:
        """
        See L{IStateStore.recordTransition}: one transaction, as a batch of
        outcomes is (in WAL mode with C{synchronous=NORMAL}, its commit
        does not wait for the disk), of an insert and, past the bound, a
        delete (L{imapmig.state._timeline.writeTransition}).
        """
        return self._transaction(
            "record the job's transition",
            lambda connection: writeTransition(connection, job, transition),
        )


@implementer(IBudgetRecords)
class BudgetRecords(SQLStore):
    """
    L{IBudgetRecords} in the C{budget_use} table, one class for SQLite's
    and PostgreSQL's stores.  An addition is one upsert, whose row lock
    serializes PostgreSQL's daemons adding to one account at once.  A
    reservation (L{reserveBudget}) is the same upsert made conditional
    (docs/fleet-design.md, "Daily budgets reserved in the database"):
    its C{DO UPDATE ... WHERE} is evaluated on the row as it is once the
    lock is taken (PostgreSQL re-reads a row that another transaction
    changed meanwhile, in READ COMMITTED as in stronger isolation), so no
    two daemons both see room for their units; an insert (the day's
    first reservation) always passes, as the first message of a day does
    however large.  (SQLite's one daemon holds the database's lock.)
    """

    def budgetUsed(self, server: str, user: str, direction: str, day: str) -> Deferred[int]:
        """
        See L{IStateStore.budgetUsed}.
        """
        if self._version < 5:
            # An older database opened read-only has no budgets yet.
            return succeed(0)
        return self._select(
            "read the budget use",
            'SELECT octets FROM imapmig.budget_use WHERE server = ? AND "user" = ?'
            " AND direction = ? AND day = ?",
            (server, user, direction, day),
            lambda rows: int(rows[0][0]) if rows else 0,
        )

    def addBudgetUse(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IStateStore.addBudgetUse}; the records of the account's
        earlier days in that direction are deleted.
        """
        total = self._addBudget(
            "record the budget use", _BUDGET_ADD, (server, user, direction, day, octets), ()
        )
        return total.addCallback(lambda total: 0 if total is None else total)

    def reserveBudget(
        self, server: str, user: str, direction: str, day: str, octets: int, limit: int
    ) -> Deferred[int | None]:
        """
        See L{IBudgetRecords.reserveBudget}: one conditional upsert (no row
        returned: it does not fit); the records of the account's earlier
        days in that direction are deleted.
        """
        return self._addBudget(
            "reserve the budget", _BUDGET_RESERVE, (server, user, direction, day, octets), (limit,)
        )

    def _addBudget(
        self,
        action: str,
        statement: str,
        use: tuple[str, str, str, str, int],
        more: tuple[int, ...],
    ) -> Deferred[int | None]:
        """
        Delete the account's earlier days in that direction, then run
        C{statement}, an upsert of C{use} (and C{more}'s parameters), in
        one transaction.

        @return: a Deferred firing with the day's total, or L{None} if the
            upsert left the row as it was.
        """
        earlier = self._dialect.sql(_BUDGET_DROP_EARLIER)
        upsert = self._dialect.sql(statement)
        row = (*use, self._seconds(), *more)

        def write(connection: Any) -> int | None:
            connection.execute(earlier, use[:4])
            total = connection.execute(upsert, row).fetchall()
            return int(total[0][0]) if total else None

        return self._transaction(action, write)

    def giveBackBudget(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IBudgetRecords.giveBackBudget}.
        """
        statement = self._dialect.sql(_BUDGET_GIVE_BACK.format(greatest=self._dialect.greatest))
        row = (octets, self._seconds(), server, user, direction, day)

        def write(connection: Any) -> int:
            total = connection.execute(statement, row).fetchall()
            return int(total[0][0]) if total else 0

        return self._transaction("give back the budget", write)


_BUDGET_ADD = """
    INSERT INTO imapmig.budget_use AS b (server, "user", direction, day, octets, updated_at)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (server, "user", direction, day)
    DO UPDATE SET octets = b.octets + excluded.octets, updated_at = excluded.updated_at
    RETURNING octets
"""

_BUDGET_RESERVE = _BUDGET_ADD.replace(
    "RETURNING", "WHERE b.octets + excluded.octets <= ? OR b.octets = 0 RETURNING"
)

_BUDGET_GIVE_BACK = """
    UPDATE imapmig.budget_use SET octets = {greatest}(octets - ?, 0), updated_at = ?
    WHERE server = ? AND "user" = ? AND direction = ? AND day = ?
    RETURNING octets
"""

_BUDGET_DROP_EARLIER = """
    DELETE FROM imapmig.budget_use
    WHERE server = ? AND "user" = ? AND direction = ? AND day < ?
"""


def _execute(connection: sqlite3.Connection, statement: str, row: tuple[object, ...]) -> None:
    """
    Execute C{statement} with C{row}'s parameters.
    """
    connection.execute(statement, row)
