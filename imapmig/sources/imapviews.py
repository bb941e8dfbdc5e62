# -*- test-case-name: tests.test_sources_labelviews,tests.test_sources_imap -*-
"""
What one listing pass of an IMAP source does with label views (Gmail's All
Mail, Important, Starred; L{imapmig.sources.labelviews}): copy them as
folders (L{CopiedViews}), or de-duplicate them against the other folders
of the pass (L{DeduplicatedViews}).

Split out of L{imapmig.sources.imaplisting}, where each step of a listing
asked "are label views de-duplicated?" (seven C{if labels is None}); the
listing now holds one of these two for the pass and calls it.
"""

from __future__ import annotations

from typing import Sequence

from twisted.logger import Logger

from imapmig.errors import CommandFailed, SourceError
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.session import METADATA_ITEMS, IMAPSession
from imapmig.mail.message import SourceFolder
from imapmig.sources.imappool import PooledSession
from imapmig.sources.imapstatus import FolderMarks
from imapmig.sources.labelviews import (
    HEADER_ITEM,
    LABELS_ITEM,
    MESSAGE_ID_ITEM,
    LabelViewFilter,
    folderLabels,
    hasMessageId,
    headerMessageIds,
)
from imapmig.units import Count

__all__ = ["CopiedViews", "DeduplicatedViews"]

log = Logger()


class CopiedViews:
    """
    A pass that does not de-duplicate label views: every folder is listed
    whole, as any other.
    """

    def deferred(self, folder: SourceFolder, uidNext: int) -> tuple[int, ...]:
        """
        The UIDs below C{uidNext} of C{folder} the pass left undecided
        (L{LabelViewFilter.deferred}), for the next pass to list again.
        """
        return ()

    async def noteAtStart(
        self, reader: PooledSession, session: IMAPSession, folders: Sequence[SourceFolder]
    ) -> None:
        """
        Take note of where the views among C{folders} stand before any
        folder of the pass is listed.
        """

    def listingItems(self, folder: SourceFolder) -> bytes:
        """
        What a listing of C{folder} fetches of each message.
        """
        return METADATA_ITEMS

    def withoutMessageId(self, items: Sequence[FetchedItem]) -> list[int]:
        """
        The UIDs of C{items} whose header fields must be fetched besides
        to recognise them.
        """
        return []

    def failed(self, folder: SourceFolder) -> None:
        """
        C{folder} could not be listed.
        """

    def filtered(self, folder: SourceFolder, items: list[FetchedItem]) -> list[FetchedItem]:
        """
        C{folder}'s listing as the pass copies it.
        """
        return items

    def messageIdOf(self, uid: int) -> str | None:
        """
        The Message-ID of the message C{uid} of All Mail listed but not
        migrated, if the pass read it.
        """
        return None


class DeduplicatedViews(CopiedViews):
    """
    A pass that de-duplicates label views: a view is copied without the
    messages seen in the other folders of the pass (L{LabelViewFilter}).
    """

    def __init__(
        self, labels: LabelViewFilter, marks: FolderMarks, description: str, job: str | None
    ) -> None:
        """
        @param labels: the de-duplication of the pass.
        @param marks: the status of the source's folders.
        @param description: names the account in errors and logs.
        @param job: the name of the job reading, carried by every log
            event as C{job}.
        """
        self._labels = labels
        self._marks = marks
        self._description = description
        self._job = job
        # By UID, the Message-IDs of the messages of All Mail not migrated.
        self._notMigratedIds: dict[int, str | None] = {}

    def deferred(self, folder: SourceFolder, uidNext: int) -> tuple[int, ...]:
        return tuple(uid for uid in self._labels.deferred(folder) if uid < uidNext)

    async def noteAtStart(
        self, reader: PooledSession, session: IMAPSession, folders: Sequence[SourceFolder]
    ) -> None:
        """
        Take note of each de-duplicated view's UIDNEXT before any folder
        of the pass is listed (L{LabelViewFilter.began}); a view that
        cannot be opened now is refused when listed.
        """
        for folder in folders:
            if folder.key in self._labels.deduplicated:
                await self._noteViewAtStart(reader, session, folder)

    async def _noteViewAtStart(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> None:
        try:
            examined = await self._marks.examine(reader, session, folder)
        except CommandFailed:
            return
        if examined.uidNext is not None:
            self._labels.began(folder, examined.uidNext)

    def listingItems(self, folder: SourceFolder) -> bytes:
        """
        With X-GM-MSGID (or, without X-GM-EXT-1, the header fields that
        recognise a message), and a view's with X-GM-LABELS.
        """
        if self._labels.byHeader:
            return METADATA_ITEMS + b" " + HEADER_ITEM
        if folder.key in self._labels.deduplicated:
            return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM + b" " + LABELS_ITEM
        return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM

    def withoutMessageId(self, items: Sequence[FetchedItem]) -> list[int]:
        """
        Recognised by header fields: those without a Message-ID are
        recognised by other fields (L{imapmig.sources.labelviews.headerIdentity}).
        """
        if not self._labels.byHeader:
            return []
        return [i.uid for i in items if i.uid is not None and not hasMessageId(i)]

    def failed(self, folder: SourceFolder) -> None:
        self._labels.failed(folder)

    def filtered(self, folder: SourceFolder, items: list[FetchedItem]) -> list[FetchedItem]:
        """
        An ordinary folder's whole (its messages noted), a view's without
        the messages seen in other folders.

        @raise SourceError: C{folder} is a view, and a folder listed before
            it could not be: which of its messages are in that folder is
            unknown, so none is copied rather than some twice.
        """
        self._checkListable(folder)
        wireName = self._marks.wireNames.get(folder.key, folder.key.encode("utf-8"))
        kept, dropped = self._labels.listed(folder, items, folderLabels(folder, wireName))
        self._noteDropped(folder, dropped)
        if folder.notMigrated is not None:
            self._notMigratedIds.update(headerMessageIds(kept))
        return kept

    def _checkListable(self, folder: SourceFolder) -> None:
        """
        @raise SourceError: see L{filtered}.
        """
        labels = self._labels
        if folder.key in labels.deduplicated and labels.unlisted:
            raise SourceError(
                f"{self._description}: the label view {folder.key!r} is not copied:"
                f" the folder(s) {', '.join(labels.unlisted)} could not be listed,"
                " so which of its messages they hold is unknown"
            )

    def _noteDropped(self, folder: SourceFolder, dropped: int) -> None:
        """
        Log how many messages of C{folder} are copied from other folders.
        """
        if dropped:
            log.info(
                "{source}: {messages} of {folder} {are} also in other folders"
                " and {are} copied from there only",
                messages=Count(dropped, "message"),
                are="is" if dropped == 1 else "are",
                source=self._description,
                job=self._job,
                count=dropped,
                folder=folder.key,
            )

    def messageIdOf(self, uid: int) -> str | None:
        return self._notMigratedIds.get(uid)
