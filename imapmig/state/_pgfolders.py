# -*- test-case-name: tests.test_state_contract -*-
"""
The PostgreSQL state store's role of L{IFolderMarks}: the C{folders} and
C{folder_fallbacks} tables, as the SQLite store's
L{imapmig.state._sqlrecords.SQLiteFolderMarks} keeps them (a mark's
deferred UIDs as an array rather than SQLite's text).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbase import Connection, PostgreSQLBase
from imapmig.state.folders import FolderFallback, FolderMark, IFolderMarks

_UPSERT_MARK = """
    INSERT INTO imapmig.folders (
        job, folder_key, uidvalidity, uidnext, highestmodseq, messages, deferred, updated_at
    ) VALUES (%s, %s, %s, %s, %s, %s, %s::bigint[], %s)
    ON CONFLICT (job, folder_key) DO UPDATE SET
        uidvalidity = excluded.uidvalidity,
        uidnext = excluded.uidnext,
        highestmodseq = excluded.highestmodseq,
        messages = excluded.messages,
        deferred = excluded.deferred,
        updated_at = excluded.updated_at
"""

_UPSERT_FALLBACK = """
    INSERT INTO imapmig.folder_fallbacks (job, mailbox, fallback, reason, updated_at)
    VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (job, mailbox) DO UPDATE SET
        fallback = excluded.fallback,
        reason = excluded.reason,
        updated_at = excluded.updated_at
"""


@implementer(IFolderMarks)
class PostgreSQLFolderMarks(PostgreSQLBase):
    """
    L{IFolderMarks} in the C{imapmig.folders} and
    C{imapmig.folder_fallbacks} tables.
    """

    def folderMark(self, job: str, folderKey: str) -> Deferred[FolderMark | None]:
        """
        See L{IFolderMarks.folderMark}.
        """

        def mark(rows: list[tuple[Any, ...]]) -> FolderMark | None:
            if not rows:
                return None
            ((uidValidity, uidNext, highestModSeq, messages, deferred),) = rows
            return FolderMark(uidValidity, uidNext, highestModSeq, messages, tuple(deferred))

        return self._read(
            "read the folder mark",
            "SELECT uidvalidity, uidnext, highestmodseq, messages, deferred"
            " FROM imapmig.folders WHERE job = %s AND folder_key = %s",
            (job, folderKey),
            mark,
        )

    def recordFolderMark(self, job: str, folderKey: str, mark: FolderMark) -> Deferred[None]:
        """
        See L{IFolderMarks.recordFolderMark}.
        """
        row = (
            job, folderKey, mark.uidValidity, mark.uidNext, mark.highestModSeq,
            mark.messages, list(mark.deferred), self._seconds(),
        )  # fmt: skip
        return self._write("record the folder mark", _UPSERT_MARK, row)

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IFolderMarks.forgetFolder}.
        """
        return self._write(
            "forget the folder",
            "DELETE FROM imapmig.folders WHERE job = %s AND folder_key = %s",
            (job, folderKey),
        )

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IFolderMarks.recordFolderFallback}.
        """
        row = (job, fallback.mailbox, fallback.fallback, fallback.reason, self._seconds())
        return self._write("record the folder fallback", _UPSERT_FALLBACK, row)

    def folderFallbacks(self, job: str) -> Deferred[list[FolderFallback]]:
        """
        See L{IFolderMarks.folderFallbacks}: by mailbox, in code point
        order (the column's C{COLLATE "C"}) as SQLite orders them.
        """
        return self._read(
            "read the folder fallbacks",
            "SELECT mailbox, fallback, reason FROM imapmig.folder_fallbacks"
            " WHERE job = %s ORDER BY mailbox",
            (job,),
            lambda rows: [FolderFallback(*row) for row in rows],
        )

    def _write(self, action: str, statement: str, row: tuple[object, ...]) -> Deferred[None]:
        """
        Run C{statement} with C{row} in a transaction of its own.
        """

        def write(connection: Connection) -> None:
            connection.execute(statement, row)

        return self._transaction(action, write)
