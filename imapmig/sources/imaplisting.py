# -*- test-case-name: tests.test_sources_imap,tests.test_sources_labelviews -*-
"""
The listing side of an IMAP source: its folders (LIST, with the label
views of L{imapmig.sources.labelviews} applied), their messages (C{UID
FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)}), and what changed in a
folder since a pass (L{FolderChanges}).

Split out of L{imapmig.sources.imap}, whose facade runs these calls on
its pool of connections (L{imapmig.sources.imappool}).
"""

from __future__ import annotations

from typing import Sequence

from attrs import evolve, frozen
from twisted.logger import Logger

from imapmig.errors import CommandFailed, SourceError
from imapmig.imap.fetch import FetchedItem, formatUIDSet
from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.session import METADATA_ITEMS, ExaminedMailbox, IMAPSession
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.sources.imapfolders import LEFT_OUT_SHOWN, sourceFolders
from imapmig.sources.imappool import PooledSession
from imapmig.sources.imapstatus import (
    LISTING_LIMITS,
    FolderMarks,
    FolderStatus,
    fetchParser,
    messageKey,
    parseMessageKey,
)
from imapmig.sources.labelviews import (
    COPY,
    DEDUP,
    FALLBACK_ITEM,
    GMAIL_EXTENSION,
    HEADER_ITEM,
    LABELS_ITEM,
    MESSAGE_ID_ITEM,
    LabelViewFilter,
    folderLabels,
    hasMessageId,
    headerMessageIds,
    planLabelViews,
    resolveLabelViews,
)
from imapmig.units import Count

__all__ = ["FlagChange", "FolderChanges", "FolderListing", "sourceFlags"]

log = Logger()


@frozen
class FlagChange:
    """
    A message whose flags changed since a delta pass's mod-sequence.

    @ivar key: the message's key (see L{messageKey}).
    @ivar flags: its flags now, C{\\Recent} left out.
    """

    key: str
    flags: tuple[str, ...]


@frozen
class FolderChanges:
    """
    What changed in a folder since a given L{FolderStatus}.

    @ivar status: the folder's status now.
    @ivar uidValidityChanged: the server renumbered the folder: every key
        changed, and L{newMessages} lists every message of the folder.
    @ivar newMessages: the messages that arrived since (UID at least the
        old C{uidNext}), oldest first.
    @ivar flagChanges: messages listed before whose flags changed since the
        old mod-sequence, by ascending UID.
    @ivar flagChangesKnown: whether L{flagChanges} is complete: false when
        the server has no CONDSTORE, or when no mod-sequence was given.
    """

    status: FolderStatus
    uidValidityChanged: bool
    newMessages: tuple[SourceMessage, ...]
    flagChanges: tuple[FlagChange, ...]
    flagChangesKnown: bool


def sourceFlags(flags: tuple[str, ...] | None) -> tuple[str, ...]:
    """
    The flags of a source message: every flag but C{\\Recent} (which no
    client may set), system flags and keywords alike.  A flag that is not
    ASCII (invalid in IMAP, but seen in the wild) is left out: it could not
    be sent to the destination.
    """
    if not flags:
        return ()
    return tuple(f for f in flags if f.isascii() and f.lower() != "\\recent")



class FolderListing:
    """
    The folders and messages of one IMAP account, as its listing passes
    find them; each call runs on a connection of the source's pool.

    @ivar leftOut: the folders the last L{listFolders} left out, each with
        why.
    """

    def __init__(
        self,
        marks: FolderMarks,
        description: str,
        include: Sequence[str] = (),
        labelViews: str = COPY,
        archiveFolder: str | None = "Archive",
        job: str | None = None,
    ) -> None:
        """
        @param marks: the status of the source's folders, shared with its
            reading.
        @param description: names the account in errors and logs.
        @param include: see L{imapmig.sources.imap.IMAPSource}.
        @param labelViews: see L{imapmig.sources.imap.IMAPSource}.
        @param archiveFolder: see L{imapmig.sources.imap.IMAPSource}.
        @param job: the name of the job reading, carried by every log
            event as C{job}.
        """
        self._marks = marks
        self._job = job
        self.description = description
        self._include = tuple(include)
        self._spaces: ServerNamespaces | None = None
        self._labelViews = labelViews
        self._archiveFolder = archiveFolder
        # The folders the last listFolders left out, each with why.
        self.leftOut: list[tuple[SourceFolder, str]] = []
        # By UID, the Message-IDs of the messages of All Mail not migrated.
        self._notMigratedIds: dict[int, str | None] = {}
        # The listing pass's de-duplication of label views, if any.
        self._labelFilter: LabelViewFilter | None = None

    def folderStatus(self, folder: SourceFolder) -> FolderStatus | None:
        """
        The status of C{folder} when it was last listed or opened, or
        L{None} if it has not been.  A label view's status carries the
        UIDs of the messages it deferred (L{LabelViewFilter.deferred}), for
        the next pass to list again.
        """
        status = self._marks.status.get(folder.key)
        labels = self._labelFilter
        if status is None or labels is None:
            return status
        deferred = tuple(uid for uid in labels.deferred(folder) if uid < status.uidNext)
        if not deferred:
            return status
        return evolve(status, deferred=deferred)

    async def countMessages(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> int:
        examined = await self._examineForListing(reader, session, folder)
        return examined.exists

    async def listFolders(
        self, reader: PooledSession, session: IMAPSession
    ) -> Sequence[SourceFolder]:
        spaces = await self._namespaces(session)
        try:
            listed = await session.listFolders()
        except CommandFailed as e:
            raise self._marks.refused("LIST", e) or SourceError(
                f"{self.description}: cannot list the folders: {e.status} {e.text}"
            ) from None
        folders, wireNames, leftOut = sourceFolders(listed, spaces, self._include)
        self.leftOut = [
            (
                SourceFolder(path=(name,), key=name),
                f"{where}; a folder rule (include) naming it copies it",
            )
            for where, names in leftOut.items()
            for name in names
        ]
        self._notMigratedIds = {}
        for where, names in leftOut.items():
            log.info(
                "{source}: {mailboxes} {where} left out, among them {names};"
                " a folder rule (include) naming them copies them",
                source=self.description,
                job=self._job,
                count=len(names),
                mailboxes=Count(len(names), "mailbox", "mailboxes"),
                where=where,
                names=names[:LEFT_OUT_SHOWN],
            )
        self._marks.wireNames = wireNames
        folders = self._planLabelViews(session, folders)
        await self._noteViewsAtStart(reader, session, folders)
        return folders

    def _planLabelViews(
        self, session: IMAPSession, folders: list[SourceFolder]
    ) -> list[SourceFolder]:
        """
        Apply the label view behaviour (L{imapmig.sources.labelviews}) to
        the listed folders, starting a new listing pass.
        """
        self._labelFilter = None
        if resolveLabelViews(self._labelViews, session.capabilities) != DEDUP:
            return folders
        messageIds = GMAIL_EXTENSION in session.capabilities
        folders, deduplicated, leftOut = planLabelViews(
            folders, self._include, messageIds, self._archiveFolder
        )
        self.leftOut += [
            (folder, f"{why}; a folder rule (include) naming it, or label_views: copy, copies it")
            for folder, why in leftOut
        ]
        for folder, why in leftOut:
            log.info(
                "{source}: label view {folder} left out: {why}; a folder rule"
                " (include) naming it, or label_views: copy, copies it",
                source=self.description,
                job=self._job,
                folder=folder.key,
                why=why,
            )
        if deduplicated:
            self._labelFilter = LabelViewFilter(deduplicated, byHeader=not messageIds)
        return folders

    async def _noteViewsAtStart(
        self, reader: PooledSession, session: IMAPSession, folders: Sequence[SourceFolder]
    ) -> None:
        """
        Take note of each de-duplicated view's UIDNEXT before any folder
        of the pass is listed (L{LabelViewFilter.began}); a view that
        cannot be opened now is refused when listed.
        """
        labels = self._labelFilter
        if labels is None:
            return
        for folder in folders:
            if folder.key not in labels.deduplicated:
                continue
            try:
                examined = await self._marks.examine(reader, session, folder)
            except CommandFailed:
                continue
            if examined.uidNext is not None:
                labels.began(folder, examined.uidNext)

    def _listingItems(self, folder: SourceFolder) -> bytes:
        """
        What a listing fetches of each message: with X-GM-MSGID while label
        views are de-duplicated, and a view's with X-GM-LABELS.
        """
        labels = self._labelFilter
        if labels is None:
            return METADATA_ITEMS
        if labels.byHeader:
            return METADATA_ITEMS + b" " + HEADER_ITEM
        if folder.key in labels.deduplicated:
            return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM + b" " + LABELS_ITEM
        return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM

    def _labelFiltered(
        self, folder: SourceFolder, items: list[FetchedItem]
    ) -> list[FetchedItem]:
        """
        A folder's listing as the label view de-duplication has it: an
        ordinary folder's whole (its messages noted), a view's without the
        messages seen in other folders.

        @raise SourceError: C{folder} is a view, and a folder listed before
            it could not be: which of its messages are in that folder is
            unknown, so none is copied rather than some twice.
        """
        labels = self._labelFilter
        if labels is None:
            return items
        # The messages left out still move the folder's UIDNEXT on.
        self._noteHighest(folder, items)
        if folder.key in labels.deduplicated and labels.unlisted:
            raise SourceError(
                f"{self.description}: the label view {folder.key!r} is not copied:"
                f" the folder(s) {', '.join(labels.unlisted)} could not be listed,"
                " so which of its messages they hold is unknown"
            )
        wireName = self._marks.wireNames.get(folder.key, folder.key.encode("utf-8"))
        kept, dropped = labels.listed(folder, items, folderLabels(folder, wireName))
        if dropped:
            log.info(
                "{source}: {messages} of {folder} {are} also in other folders"
                " and {are} copied from there only",
                messages=Count(dropped, "message"),
                are="is" if dropped == 1 else "are",
                source=self.description,
                job=self._job,
                count=dropped,
                folder=folder.key,
            )
        if folder.notMigrated is not None:
            self._notMigratedIds.update(headerMessageIds(kept))
        return kept

    def messageIdOf(self, folder: SourceFolder, message: SourceMessage) -> str | None:
        """
        The Message-ID, as the state store records it, of a message listed
        in a folder whose messages are not migrated
        (L{SourceFolder.notMigrated}: its listing read each one's); else
        L{None}.
        """
        parsed = parseMessageKey(message.key)
        if folder.notMigrated is None or parsed is None:
            return None
        return self._notMigratedIds.get(parsed[1])

    async def _namespaces(self, session: IMAPSession) -> ServerNamespaces:
        """
        The account's namespaces (L{IMAPSession.namespaces}), asked once, a
        refusal mapped as for LIST.  Without NAMESPACE, the empty prefix
        (each mailbox's delimiter is LIST's).
        """
        if self._spaces is not None:
            return self._spaces
        if not session.knowsNamespaces:
            self._spaces = ServerNamespaces()
            return self._spaces
        try:
            self._spaces = await session.namespaces()
            return self._spaces
        except CommandFailed as e:
            raise self._marks.refused("NAMESPACE", e) or SourceError(
                f"{self.description}: cannot read the namespaces: {e.status} {e.text}"
            ) from None

    async def _examineForListing(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> ExaminedMailbox:
        try:
            return await self._marks.examine(reader, session, folder)
        except CommandFailed as e:
            raise self._marks.refused("EXAMINE", e) or SourceError(
                f"{self.description}: cannot open the folder {folder.key!r}: "
                f"{e.status} {e.text}"
            ) from None

    async def _fetchMessages(
        self, session: IMAPSession, folder: SourceFolder, uidSet: bytes
    ) -> list[FetchedItem]:
        fetchParser(session).limits = LISTING_LIMITS
        try:
            items = await session.fetchMetadata(uidSet, self._listingItems(folder))
            labels = self._labelFilter
            if labels is None or not labels.byHeader:
                return items
            # Recognised by other header fields (labelviews.headerIdentity).
            missing = [i.uid for i in items if i.uid is not None and not hasMessageId(i)]
            if not missing:
                return items
            more = await session.fetchMetadata(formatUIDSet(missing), b"UID " + FALLBACK_ITEM)
        except CommandFailed as e:
            raise self._marks.refused("UID FETCH", e) or SourceError(
                f"{self.description}: cannot list the messages of {folder.key!r}: "
                f"{e.status} {e.text}"
            ) from None
        fields = {i.uid: i.sections for i in more}
        return [
            evolve(i, sections={**i.sections, **fields[i.uid]}) if i.uid in fields else i
            for i in items
        ]

    def _messages(
        self, folder: SourceFolder, uidValidity: int, items: Sequence[FetchedItem], fromUID: int
    ) -> list[SourceMessage]:
        """
        The L{SourceMessage}s of listing responses with a UID of at least
        C{fromUID}, and the folder's C{uidNext} raised past them.
        """
        messages = [
            SourceMessage(
                key=messageKey(uidValidity, item.uid),
                flags=sourceFlags(item.flags),
                internalDate=item.internalDate,
                size=item.size or 0,
            )
            for item in items
            if item.uid is not None and item.uid >= fromUID
        ]
        self._noteHighest(folder, items)
        return messages

    def _noteHighest(self, folder: SourceFolder, items: Sequence[FetchedItem]) -> None:
        """
        Raise the folder's C{uidNext} past the UIDs of listing responses.
        """
        highest = max((item.uid for item in items if item.uid is not None), default=0)
        status = self._marks.status[folder.key]
        if highest >= status.uidNext:
            self._marks.status[folder.key] = FolderStatus(
                status.uidValidity, highest + 1, status.highestModSeq, status.exists
            )

    async def listMessages(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> Sequence[SourceMessage]:
        try:
            examined = await self._examineForListing(reader, session, folder)
            uidValidity = self._marks.status[folder.key].uidValidity
            items = await self._fetchMessages(session, folder, b"1:*") if examined.exists else []
        except SourceError:
            if self._labelFilter is not None:
                self._labelFilter.failed(folder)
            raise
        return self._messages(folder, uidValidity, self._labelFiltered(folder, items), 1)

    async def listMessagesSince(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        uidValidity: int,
        uidNext: int,
        modSeq: int | None,
        deferred: Sequence[int],
    ) -> FolderChanges:
        # The UIDs below uidNext listed again: only those the last pass
        # left undecided, not the ones it decided between them.
        again = {uid for uid in deferred if 0 < uid < uidNext}
        fromUID = min(again, default=uidNext)
        try:
            examined = await self._examineForListing(reader, session, folder)
            status = self._marks.status[folder.key]
            items = []
            if status.uidValidity != uidValidity:
                if examined.exists:
                    items = await self._fetchMessages(session, folder, b"1:*")
            elif examined.exists and (
                again or examined.uidNext is None or examined.uidNext > uidNext
            ):
                items = await self._fetchMessages(session, folder, b"%d:*" % max(fromUID, 1))
        except SourceError:
            if self._labelFilter is not None:
                self._labelFilter.failed(folder)
            raise
        if status.uidValidity != uidValidity:
            items = self._labelFiltered(folder, items)
            messages = self._messages(folder, status.uidValidity, items, 1)
            return FolderChanges(self._marks.status[folder.key], True, tuple(messages), (), False)
        # "n:*" also gives the last message when n is beyond it: it moves
        # UIDNEXT on (where EXAMINE gave none), but only the new ones count,
        # and are noted for the label views.
        self._noteHighest(folder, items)
        items = [
            item
            for item in items
            if item.uid is not None and (item.uid >= uidNext or item.uid in again)
        ]
        newMessages = self._messages(
            folder, uidValidity, self._labelFiltered(folder, items), max(fromUID, 1)
        )
        changes: list[FlagChange] = []
        known = False
        condstore = bool({b"CONDSTORE", b"QRESYNC"} & session.capabilities)
        if modSeq is not None and condstore and examined.highestModSeq is not None:
            known = True
            if uidNext > 1 and examined.highestModSeq > modSeq:
                fetchParser(session).limits = LISTING_LIMITS
                try:
                    changed = await session.fetchMetadata(
                        b"1:%d" % (uidNext - 1), b"UID FLAGS", changedSince=modSeq
                    )
                except CommandFailed as e:
                    raise self._marks.refused("UID FETCH", e) or SourceError(
                        f"{self.description}: cannot read the flag changes of "
                        f"{folder.key!r}: {e.status} {e.text}"
                    ) from None
                changes = [
                    FlagChange(messageKey(uidValidity, item.uid), sourceFlags(item.flags))
                    for item in changed
                    if item.uid is not None
                    and item.uid < uidNext
                    and item.uid not in again
                    and item.flags is not None
                ]
        return FolderChanges(
            self._marks.status[folder.key], False, tuple(newMessages), tuple(changes), known
        )

