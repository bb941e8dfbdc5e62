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

from functools import lru_cache
from typing import Awaitable, Callable, Sequence, TypeVar

from attrs import evolve, frozen
from twisted.logger import Logger

from imapmig.errors import CommandFailed, SourceError
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.mailboxes import ExaminedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceFolder, SourceMessage, listedMessage
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
from imapmig.sources.imapviews import CopiedViews, DeduplicatedViews
from imapmig.sources.labelviews import (
    COPY,
    DEDUP,
    FALLBACK_ITEM,
    GMAIL_EXTENSION,
    LabelViewFilter,
    planLabelViews,
    resolveLabelViews,
)
from imapmig.units import Count

__all__ = ["FlagChange", "FolderChanges", "FolderListing", "sourceFlags"]

T = TypeVar("T")

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


@lru_cache(maxsize=256)
def sourceFlags(flags: tuple[str, ...] | None) -> tuple[str, ...]:
    """
    The flags of a source message: every flag but C{\\Recent} (which no
    client may set), system flags and keywords alike.  A flag that is not
    ASCII (invalid in IMAP, but seen in the wild) is left out: it could not
    be sent to the destination.  One per message listed: a folder's
    messages share a few sets of flags, each filtered once (and the
    messages that have it share one tuple).
    """
    if not flags:
        return ()
    return tuple(f for f in flags if f.isascii() and f.lower() != "\\recent")


@frozen
class _Since:
    """
    Where a delta pass starts from: a L{FolderStatus} kept from the pass
    before (see L{FolderListing.listMessagesSince}).

    @ivar again: the UIDs below C{uidNext} listed again: only those the
        last pass left undecided, not the ones it decided between them.
    """

    uidValidity: int
    uidNext: int
    modSeq: int | None
    again: frozenset[int]

    @classmethod
    def of(
        cls, uidValidity: int, uidNext: int, modSeq: int | None, deferred: Sequence[int]
    ) -> _Since:
        """
        Where a pass that left a folder at C{uidValidity}, C{uidNext},
        C{modSeq} and C{deferred} (a L{FolderStatus}) starts the next.
        """
        return cls(
            uidValidity, uidNext, modSeq, frozenset(uid for uid in deferred if 0 < uid < uidNext)
        )

    @property
    def fromUID(self) -> int:
        """
        The lowest UID listed: the lowest listed again, else C{uidNext}.
        """
        return max(min(self.again, default=self.uidNext), 1)

    def uidSet(self, examined: ExaminedMailbox, uidValidity: int) -> bytes | None:
        """
        What to list of a folder now at C{uidValidity}, or L{None}: all of
        it when it was renumbered, else from L{fromUID} if anything may
        have arrived.
        """
        if not examined.exists:
            return None
        if uidValidity != self.uidValidity:
            return b"1:*"
        return b"%d:*" % self.fromUID if self._mayHaveMore(examined) else None

    def _mayHaveMore(self, examined: ExaminedMailbox) -> bool:
        """
        Whether the folder may hold messages to list: some to list again,
        or new ones (UIDNEXT moved on, or unknown).
        """
        return bool(self.again) or examined.uidNext is None or examined.uidNext > self.uidNext

    def newItems(self, items: Sequence[FetchedItem]) -> list[FetchedItem]:
        """
        The listing responses of messages that arrived since, or listed
        again.
        """
        return [
            item
            for item in items
            if item.uid is not None and (item.uid >= self.uidNext or item.uid in self.again)
        ]

    def flagChanges(self, changed: Sequence[FetchedItem]) -> list[FlagChange]:
        """
        The flag changes among C{changed} of the messages listed before
        and not listed again.
        """
        return [
            FlagChange(messageKey(self.uidValidity, item.uid), sourceFlags(item.flags))
            for item in changed
            if item.uid is not None
            and item.uid < self.uidNext
            and item.uid not in self.again
            and item.flags is not None
        ]


def _everything(examined: ExaminedMailbox, uidValidity: int) -> bytes | None:
    """
    What a listing lists of a folder: all of it, unless it is empty.
    """
    return b"1:*" if examined.exists else None


def _merged(items: list[FetchedItem], more: Sequence[FetchedItem]) -> list[FetchedItem]:
    """
    C{items} with the sections of C{more} (responses for some of the same
    UIDs) added to theirs.
    """
    fields = {i.uid: i.sections for i in more}
    return [
        evolve(i, sections={**i.sections, **fields[i.uid]}) if i.uid in fields else i
        for i in items
    ]


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
        self.leftOut: list[tuple[SourceFolder, str]] = []
        # What the listing pass does with label views.
        self._views: CopiedViews = CopiedViews()

    @property
    def inOrder(self) -> bool:
        """
        Whether this pass's folders must be listed one after another, in
        the order L{listFolders} gave: label views are de-duplicated
        against the folders listed before them.
        """
        return isinstance(self._views, DeduplicatedViews)

    def folderStatus(self, folder: SourceFolder) -> FolderStatus | None:
        """
        See L{imapmig.sources.imap.IMAPSource.folderStatus}.
        """
        status = self._marks.status.get(folder.key)
        if status is None:
            return None
        deferred = self._views.deferred(folder, status.uidNext)
        return evolve(status, deferred=deferred) if deferred else status

    def messageIdOf(self, folder: SourceFolder, message: SourceMessage) -> str | None:
        """
        See L{imapmig.sources.imap.IMAPSource.messageIdOf}.
        """
        parsed = parseMessageKey(message.key)
        if folder.notMigrated is None or parsed is None:
            return None
        return self._views.messageIdOf(parsed[1])

    async def countMessages(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> int:
        """
        See L{imapmig.sources.imap.IMAPSource.countMessages}.
        """
        examined = await self._examineForListing(reader, session, folder)
        return examined.exists

    async def listFolders(
        self, reader: PooledSession, session: IMAPSession
    ) -> Sequence[SourceFolder]:
        """
        See L{imapmig.sources.imap.IMAPSource.listFolders}; starts a new
        listing pass.
        """
        spaces = await self._namespaces(session)
        try:
            listed = await session.listFolders()
        except CommandFailed as e:
            raise self._marks.failure("LIST", "list the folders", e) from None
        folders, wireNames, leftOut = sourceFolders(listed, spaces, self._include)
        self._noteLeftOut(leftOut)
        self._marks.wireNames = wireNames
        folders = self._planLabelViews(session, folders)
        await self._views.noteAtStart(reader, session, folders)
        return folders

    def _noteLeftOut(self, leftOut: dict[str, list[str]]) -> None:
        """
        Remember and log the mailboxes L{sourceFolders} left out, by where
        they are.
        """
        self.leftOut = [
            (
                SourceFolder(path=(name,), key=name),
                f"{where}; a folder rule (include) naming it copies it",
            )
            for where, names in leftOut.items()
            for name in names
        ]
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

    def _planLabelViews(
        self, session: IMAPSession, folders: list[SourceFolder]
    ) -> list[SourceFolder]:
        """
        Apply the label view behaviour (L{imapmig.sources.labelviews}) to
        the listed folders, starting a new listing pass.
        """
        self._views = CopiedViews()
        if resolveLabelViews(self._labelViews, session.capabilities) != DEDUP:
            return folders
        messageIds = GMAIL_EXTENSION in session.capabilities
        folders, deduplicated, leftOut = planLabelViews(
            folders, self._include, messageIds, self._archiveFolder
        )
        self._noteViewsLeftOut(leftOut)
        if deduplicated:
            self._views = DeduplicatedViews(
                LabelViewFilter(deduplicated, byHeader=not messageIds),
                self._marks,
                self.description,
                self._job,
            )
        return folders

    def _noteViewsLeftOut(self, leftOut: Sequence[tuple[SourceFolder, str]]) -> None:
        """
        Remember and log the label views L{planLabelViews} left out.
        """
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

    async def _namespaces(self, session: IMAPSession) -> ServerNamespaces:
        """
        The account's namespaces (L{IMAPSession.namespaces}), asked once, a
        refusal mapped as for LIST.  Without NAMESPACE, the empty prefix
        (each mailbox's delimiter is LIST's).
        """
        if self._spaces is None:
            self._spaces = await self._askNamespaces(session)
        return self._spaces

    async def _askNamespaces(self, session: IMAPSession) -> ServerNamespaces:
        if not session.knowsNamespaces:
            return ServerNamespaces()
        try:
            return await session.namespaces()
        except CommandFailed as e:
            raise self._marks.failure("NAMESPACE", "read the namespaces", e) from None

    async def _examineForListing(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> ExaminedMailbox:
        try:
            return await self._marks.examine(reader, session, folder)
        except CommandFailed as e:
            raise self._marks.failure("EXAMINE", f"open the folder {folder.key!r}", e) from None

    async def _listingFetch(
        self,
        session: IMAPSession,
        cannot: str,
        uidSet: bytes,
        items: bytes,
        changedSince: int | None = None,
    ) -> list[FetchedItem]:
        """
        C{UID FETCH uidSet (items)} within the limits of a listing.

        @param cannot: what a refusal says could not be done.
        @raise SourceError: the server refused (or a L{TransientError}:
            L{FolderMarks.failure}).
        """
        fetchParser(session).limits = LISTING_LIMITS
        try:
            return await session.fetchMetadata(uidSet, items, changedSince=changedSince)
        except CommandFailed as e:
            raise self._marks.failure("UID FETCH", cannot, e) from None

    async def _fetchMessages(
        self, session: IMAPSession, folder: SourceFolder, uidSet: bytes
    ) -> list[FetchedItem]:
        cannot = f"list the messages of {folder.key!r}"
        items = await self._listingFetch(session, cannot, uidSet, self._views.listingItems(folder))
        missing = self._views.withoutMessageId(items)
        if not missing:
            return items
        more = await self._listingFetch(
            session, cannot, formatUIDSet(missing), b"UID " + FALLBACK_ITEM
        )
        return _merged(items, more)

    async def _listed(self, folder: SourceFolder, listing: Awaitable[T]) -> T:
        """
        Await C{listing}, of C{folder}: a folder that cannot be listed is
        noted as such for the label views (L{CopiedViews.failed}).
        """
        try:
            return await listing
        except SourceError:
            self._views.failed(folder)
            raise

    async def _examineAndFetch(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        uidSetOf: Callable[[ExaminedMailbox, int], bytes | None],
    ) -> tuple[ExaminedMailbox, FolderStatus, list[FetchedItem]]:
        """
        EXAMINE C{folder} and list what C{uidSetOf} (given what EXAMINE
        said and the folder's UIDVALIDITY) says, if anything.

        @return: what EXAMINE said, the folder's status then, and the
            listing responses.
        """
        examined = await self._examineForListing(reader, session, folder)
        status = self._marks.status[folder.key]
        uidSet = uidSetOf(examined, status.uidValidity)
        items = [] if uidSet is None else await self._fetchMessages(session, folder, uidSet)
        return examined, status, items

    def _messages(
        self, uidValidity: int, items: Sequence[FetchedItem], fromUID: int
    ) -> list[SourceMessage]:
        """
        The L{SourceMessage}s of listing responses with a UID of at least
        C{fromUID}.
        """
        # listedMessage: one per message listed, at less than half the
        # constructor's cost.
        return [
            listedMessage(
                messageKey(uidValidity, item.uid),
                sourceFlags(item.flags),
                item.internalDate,
                item.size or 0,
            )
            for item in items
            if item.uid is not None and item.uid >= fromUID
        ]

    def _noteHighest(self, folder: SourceFolder, items: Sequence[FetchedItem]) -> None:
        """
        Raise the folder's C{uidNext} past the UIDs of listing responses
        (those the label views leave out too).
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
        """
        See L{imapmig.sources.imap.IMAPSource.listMessages}.
        """
        _, status, items = await self._listed(
            folder, self._examineAndFetch(reader, session, folder, _everything)
        )
        self._noteHighest(folder, items)
        return self._messages(status.uidValidity, self._views.filtered(folder, items), 1)

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
        """
        See L{imapmig.sources.imap.IMAPSource.listMessagesSince}.
        """
        since = _Since.of(uidValidity, uidNext, modSeq, deferred)
        examined, status, items = await self._listed(
            folder, self._examineAndFetch(reader, session, folder, since.uidSet)
        )
        # "n:*" also gives the last message when n is beyond it: it moves
        # UIDNEXT on (where EXAMINE gave none), but only the new ones count.
        self._noteHighest(folder, items)
        if status.uidValidity != uidValidity:
            return self._renumbered(folder, status.uidValidity, items)
        newMessages = self._messages(
            uidValidity, self._views.filtered(folder, since.newItems(items)), since.fromUID
        )
        changes, known = await self._flagChanges(session, folder, examined, since)
        return FolderChanges(
            self._marks.status[folder.key], False, tuple(newMessages), tuple(changes), known
        )

    def _renumbered(
        self, folder: SourceFolder, uidValidity: int, items: list[FetchedItem]
    ) -> FolderChanges:
        """
        The changes of a folder renumbered (now at C{uidValidity}): every
        message of its listing C{items} is new.
        """
        messages = self._messages(uidValidity, self._views.filtered(folder, items), 1)
        return FolderChanges(self._marks.status[folder.key], True, tuple(messages), (), False)

    async def _flagChanges(
        self, session: IMAPSession, folder: SourceFolder, examined: ExaminedMailbox, since: _Since
    ) -> tuple[list[FlagChange], bool]:
        """
        The flags changed since C{since}'s mod-sequence on the messages
        listed before (C{UID FETCH 1:<uidNext - 1> (UID FLAGS)
        (CHANGEDSINCE <modSeq>)}), and whether they are known: only where
        the server has CONDSTORE and a mod-sequence was given.
        """
        modSeq, highest = since.modSeq, examined.highestModSeq
        if modSeq is None or highest is None or not _condstore(session):
            return [], False
        if since.uidNext <= 1 or highest <= modSeq:
            return [], True
        changed = await self._listingFetch(
            session,
            f"read the flag changes of {folder.key!r}",
            b"1:%d" % (since.uidNext - 1),
            b"UID FLAGS",
            changedSince=modSeq,
        )
        return since.flagChanges(changed), True


def _condstore(session: IMAPSession) -> bool:
    """
    Whether C{session}'s server has CONDSTORE (QRESYNC implies it).
    """
    return bool({b"CONDSTORE", b"QRESYNC"} & session.capabilities)
