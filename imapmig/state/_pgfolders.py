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

from imapmig.state._pgbatch import PostgreSQLWriter
from imapmig.state._pgwrites import FALLBACK, FOLDER
from imapmig.state.folders import FolderFallback, FolderMark, IFolderMarks

@implementer(IFolderMarks)
class PostgreSQLFolderMarks(PostgreSQLWriter):
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
        deferred = "{" + ",".join(str(int(uid)) for uid in mark.deferred) + "}"
        row = (
            job, folderKey, mark.uidValidity, mark.uidNext, mark.highestModSeq,
            mark.messages, deferred, self._seconds(),
        )  # fmt: skip
        return self._enqueue(FOLDER, job, [((job, folderKey), row)])

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IFolderMarks.forgetFolder}.
        """
        return self._enqueue(FOLDER, job, [((job, folderKey), (job, folderKey))])

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IFolderMarks.recordFolderFallback}.
        """
        row = (job, fallback.mailbox, fallback.fallback, fallback.reason, self._seconds())
        return self._enqueue(FALLBACK, job, [((job, fallback.mailbox), row)])

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
