# -*- test-case-name: tests.test_job, tests.test_job_listing, tests.test_job_readsteps, tests.test_job_unchanged -*-
"""
What a job finds in its source and has left to copy: the included folders
listed (on a later pass of an IMAP source, only what changed since its
recorded mark; a folder unchanged since its mark, IMAP or Maildir, not at
all), set against the state store's records, and each folder's mark
recorded after a completed pass.
"""

from __future__ import annotations

from collections import Counter, deque
from operator import attrgetter
from typing import AbstractSet, Any, Callable, Iterator, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import Cooperator, deferLater
from twisted.logger import Logger

from imapmig.errors import SourceError
from imapmig.job.attempt import RunStop
from imapmig.job.destination import FolderToCopy
from imapmig.job.recording import OutcomeRecorder
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.mail.folders import FolderRules, folderName, isIncluded, renamedPath
from imapmig.job.units import pendingMessages
from imapmig.progress import FolderProgress, JobProgress
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource
from imapmig.sources.imaplisting import FlagChange, FolderChanges
from imapmig.sources.imapstatus import FolderStatus
from imapmig.sources.maildir import MaildirSource
from imapmig.state import FolderMark, IStateStore, MessageOutcome
from imapmig.units import Count

__all__ = ["RACY_WINDOW", "Listed", "SourceListing", "folderOctets"]

log = Logger()

_size = attrgetter("size")

_FolderListed = tuple[Sequence[SourceMessage], Sequence[FlagChange]]

Listed = tuple[SourceFolder, Sequence[SourceMessage], Sequence[FlagChange]]
"""
A listed source folder: its messages and, on a delta pass, the flag
changes of messages already copied.
"""

RACY_WINDOW = 2.0
"""
Seconds: a Maildir folder's fingerprint whose newest directory time (mtime
or ctime) is less than this before the fingerprint was taken is not
recorded, since a change right after the listing could leave the times as
they were (the same
clock tick, a file system with coarse timestamps, a server's clock a
little behind ours); the next pass lists the folder.
"""


class SourceListing:
    """
    The listing of one job's source, for one run.

    @ivar _deltaCounts: by folder key, the server's message count of a
        folder listed as a delta (only its new messages), until L{plan}
        takes it.
    @ivar _unchanged: by folder key, the folders found unchanged since
        their marks (not listed, nothing to copy), with their marks.
    @ivar _fingerprints: by folder key, the fingerprints of the Maildir
        folders listed, taken before each was listed, to be recorded after
        a completed pass; none for a folder whose fingerprint was racy
        (L{RACY_WINDOW}).
    @ivar _totals: by folder key, the messages and octets of each folder
        planned, for its mark.
    @ivar _marked: the keys of the Maildir folders listed that had a mark.
    @ivar _skipping: whether folders unchanged since their marks are left
        unlisted: not while the journal holds messages in flight, which
        the reconciliation reads again from the listing.
    """

    def __init__(
        self,
        job: str,
        source: IMessageSource,
        store: IStateStore,
        rules: FolderRules,
        progress: JobProgress,
        clock: IReactorTime,
        stop: RunStop,
    ) -> None:
        """
        @param job: the job's name, for the state store and the log.
        @param stop: the run's stop: no more folders are listed once asked.
        """
        self._job = job
        self._source = source
        self._store = store
        self._rules = rules
        self._progress = progress
        self._clock = clock
        # Lists a large Maildir folder in turns, the reactor running between.
        self._cooperator = Cooperator(scheduler=lambda work: clock.callLater(0, work))
        self._stop = stop
        self._deltaCounts: dict[str, int] = {}
        self._excluded: list[str] = []
        self._unchanged: dict[str, tuple[SourceFolder, FolderMark]] = {}
        self._fingerprints: dict[str, str] = {}
        self._totals: dict[str, tuple[int, int]] = {}
        self._order: dict[str, int] = {}
        self._skipping = False
        self._marked: set[str] = set()

    async def listSource(
        self,
        opening: Deferred[Any],
        onListed: Callable[[SourceFolder, Sequence[SourceMessage]], object] | None = None,
        onFolders: Callable[[Sequence[SourceFolder]], Deferred[Any] | None] | None = None,
    ) -> tuple[list[Listed], list[str]]:
        """
        List the included source folders and their messages.

        @param opening: the first destination connection, logging in
            meanwhile: while it is, the reactor runs between folders (an
            mbox is listed without yielding, a Maildir folder in turns of
            L{imapmig.sources.maildir.LISTING_TURN} files), so that its
            greeting and login go on.
        @param onListed: called with each folder listed and its messages,
            as soon as it is (the job opens its extra connections as the
            listing shows them worth it), or L{None}.
        @param onFolders: called with the included folders to migrate once
            they are known, before their messages are listed, or L{None}; what it
            returns (the job creating their mailboxes meanwhile), while
            pending, has the reactor run between folders as C{opening}
            does.
        @return: each folder's messages (and, on a delta pass, flag
            changes), and the folders that could not be read.
        """
        progress = self._progress
        folders = await self._source.listFolders()
        included: list[SourceFolder] = []
        excluded: list[SourceFolder] = []
        for folder in folders:
            (included if isIncluded(folder.path, self._rules) else excluded).append(folder)
        progress.foldersTotal = len(included)
        progress.foldersExcluded = len(excluded)
        self._excluded = [folderName(f.path) for f in excluded]
        for folder in excluded:
            log.info(
                "Job {job}: folder {folder} left out by the folder rules",
                job=self._job,
                folder="/".join(folder.path),
            )
        self._order = {folder.key: index for index, folder in enumerate(included)}
        busy = [opening]
        if onFolders is not None:
            # A folder not migrated (L{SourceFolder.notMigrated}) gets no
            # mailbox.
            busy.append(onFolders([f for f in included if f.notMigrated is None]) or opening)
        self._skipping = not await self._store.journal(self._job)
        return await self._listFolders(included, busy, onListed)

    async def _listFolders(
        self,
        folders: Sequence[SourceFolder],
        busy: Sequence[Deferred[Any]],
        onListed: Callable[[SourceFolder, Sequence[SourceMessage]], object] | None,
    ) -> tuple[list[Listed], list[str]]:
        """
        List the messages of C{folders} (see L{listSource}): an IMAP
        source's next folders are asked for while one is listed, up to its
        listing window (L{IMAPSource.listingWindow}: one per connection), so
        that its connections list side by side.
        """
        window = self._source.listingWindow if isinstance(self._source, IMAPSource) else 1
        asked: deque[tuple[SourceFolder, Deferred[_FolderListed | None]]] = deque()
        following = iter(folders)
        unreadable: list[str] = []
        listed: list[Listed] = []
        try:
            while True:
                if not all(d.called for d in busy):
                    # The reactor runs before each folder, the first too:
                    # the connection's connect() is issued on the reactor's
                    # next turn (Twisted's TCP client), and a Maildir
                    # folder is listed without yielding, so the first
                    # folder's listing (the largest, INBOX, about half of
                    # the listing) would hold it back; the greeting and the
                    # login then go on between folders, and so do the
                    # round trips of the mailboxes' early creation.
                    await deferLater(self._clock, 0)
                self._askAhead(asked, following, window)
                if not asked or self._stop.requested:
                    break
                folder, listing = asked.popleft()
                try:
                    found = await listing
                except SourceError as e:
                    # The other folders are still migrated; the job ends as
                    # failed, naming this one.
                    log.error(
                        "Job {job}: cannot list the source folder {folder}: {why}",
                        job=self._job,
                        folder="/".join(folder.path),
                        why=str(e),
                    )
                    unreadable.append(f"{'/'.join(folder.path)}: {e}")
                    continue
                if found is not None:
                    listed.append((folder, *found))
                    if onListed is not None:
                        onListed(folder, found[0])
        finally:
            # Asked ahead and no longer wanted (a stop, a failure): their
            # outcome is dropped.
            for _, listing in asked:
                listing.addErrback(lambda _: None)
        return listed, unreadable

    def _askAhead(
        self,
        asked: deque[tuple[SourceFolder, Deferred[_FolderListed | None]]],
        following: Iterator[SourceFolder],
        window: int,
    ) -> None:
        """
        Ask for the listings of the C{following} folders until C{window}
        are C{asked} and not yet taken, unless the run is stopping.
        """
        while len(asked) < window and not self._stop.requested:
            folder = next(following, None)
            if folder is None:
                return
            asked.append((folder, Deferred.fromCoroutine(self._listFolder(folder))))

    async def plan(
        self,
        listed: Sequence[Listed],
        failedThisRun: AbstractSet[tuple[str, str]],
        recorder: OutcomeRecorder,
    ) -> list[FolderToCopy]:
        """
        What of each listed folder is left to copy, by the state store's
        records; set the progress totals.

        @param listed: what L{listSource} listed.
        @param failedThisRun: the messages (folder key, message key)
            recorded as failed by an earlier attempt of this run.
        @param recorder: the job's outcome recorder, for what this run
            stored already.
        """
        progress = self._progress
        listings: list[FolderToCopy] = []
        folders: list[FolderProgress] = []
        total = already = 0
        notMigrated: list[tuple[SourceFolder, list[SourceMessage]]] = []
        failedIn = Counter(folderKey for folderKey, _ in failedThisRun)
        # One read for every folder: on PostgreSQL one round trip a folder
        # was a fifth of a small job's statements.  None when every folder
        # is unchanged since its mark.
        maps = (
            await self._store.destinationMaps(self._job, [f.key for f, _, _ in listed])
            if listed
            else {}
        )
        for folder, messages, flagChanges in listed:
            recorded = maps[folder.key]
            pending = pendingMessages(messages, recorded)
            delta = folder.key in self._deltaCounts
            listedCount = self._listedCount(folder, messages)
            total += listedCount
            done = listedCount - len(pending)
            already += done
            if failedThisRun:
                # Recorded as failed by an earlier attempt of this run: not
                # tried again until the next run.
                pending = [m for m in pending if (folder.key, m.key) not in failedThisRun]
            accounted = _accounted(messages, recorded, delta)
            if folder.notMigrated is None:
                listings.append(FolderToCopy(folder, pending, flagChanges, recorded, accounted))
            else:
                notMigrated.append((folder, pending))
            octets, octetsDone = folderOctets(messages, recorded, delta)
            self._totals[folder.key] = (listedCount, octets)
            folders.append(
                FolderProgress(
                    folderName(folder.path),
                    folder.key,
                    listedCount,
                    octets,
                    done,
                    octetsDone,
                    failedIn[folder.key],
                    mailbox=_mailboxName(folder, self._rules),
                )
            )
        for folder, mark in self._unchanged.values():
            folders.append(self._unchangedProgress(folder, mark))
            total += mark.messages
            already += mark.messages
        folders.sort(key=lambda f: self._order.get(f.key, 0))
        progress.listed(
            folders, self._excluded, already, already - recorder.appended - recorder.present
        )
        for folder, pending in notMigrated:
            self._recordNotMigrated(folder, pending, recorder)
        log.info(
            "Job {job}: {messages} in {inFolders}, {pending} to copy",
            job=self._job,
            total=total,
            messages=Count(total, "message"),
            folders=len(folders),
            inFolders=Count(len(folders), "folder"),
            pending=total - already,
        )
        return listings

    def _recordNotMigrated(
        self, folder: SourceFolder, pending: Sequence[SourceMessage], recorder: OutcomeRecorder
    ) -> None:
        """
        Record the messages of a folder the source lists but does not
        migrate (L{SourceFolder.notMigrated}) as failed with its reason:
        nothing is read, nor sent, and no mailbox created for them.
        """
        why = folder.notMigrated
        assert why is not None
        source = self._source
        for message in pending:
            messageId = (
                source.messageIdOf(folder, message) if isinstance(source, IMAPSource) else None
            )
            # Not named here: the naming step (imapmig.job.naming) reads
            # its Date, From and Subject from this folder, as for any
            # message not migrated; the Message-ID the listing read stays
            # if that cannot be done.
            recorder.add(
                MessageOutcome(
                    folder.key, message.key, "", message.size, failure=why, messageId=messageId
                ),
                named=False,
            )
        if pending:
            log.warn(
                "Job {job}: {messages} of {folder} not migrated: {why}",
                job=self._job,
                count=len(pending),
                messages=Count(len(pending), "message"),
                folder="/".join(folder.path),
                why=why,
            )

    async def _listFolder(self, folder: SourceFolder) -> _FolderListed | None:
        """
        The messages of a source folder, and the flag changes to apply to
        copies made by an earlier run; L{None} for a folder unchanged since
        the last completed pass (see L{_unchangedSince}).

        An IMAP source whose folder is unchanged since the last completed
        run (same UIDVALIDITY) lists only the messages that arrived since,
        and the flag changes since (with CONDSTORE); otherwise every
        message is listed.  A Maildir folder whose directories are as they
        were (L{MaildirSource.fingerprint}) is not listed.
        """
        source = self._source
        if isinstance(source, MaildirSource):
            return await self._listLocal(source, folder)
        if isinstance(source, IMAPSource):
            mark = await self._store.folderMark(self._job, folder.key)
            if mark is not None:
                changes = await source.listMessagesSince(
                    folder, mark.uidValidity, mark.uidNext, mark.highestModSeq, mark.deferred
                )
                if not changes.uidValidityChanged:
                    if self._unchangedSince(folder, mark, changes):
                        return None
                    self._deltaCounts[folder.key] = changes.status.exists
                    return changes.newMessages, changes.flagChanges
                log.warn(
                    "Job {job}: the source folder {folder} has a new UIDVALIDITY: its"
                    " messages are listed again and recognised by content in the destination",
                    job=self._job,
                    folder="/".join(folder.path),
                )
                await self._store.forgetFolder(self._job, folder.key)
        return await source.listMessages(folder), ()

    def _unchangedSince(
        self, folder: SourceFolder, mark: FolderMark, changes: FolderChanges
    ) -> bool:
        """
        Whether an IMAP folder is as its mark says (the same UIDVALIDITY,
        UIDNEXT, MESSAGES and HIGHESTMODSEQ, nothing new, no flag changed,
        nothing deferred): if so it is remembered as unchanged, and neither
        its records are read nor its mailbox opened.  Without CONDSTORE
        both HIGHESTMODSEQs are L{None}: a flag change goes unseen, as it
        did before marks had octets (the delta listing cannot ask for flag
        changes without a mod-sequence).
        """
        status = changes.status
        unchanged = (
            self._skipping
            and mark.octets is not None
            and not mark.deferred
            and not changes.newMessages
            and not changes.flagChanges
            and (status.uidValidity, status.uidNext, status.exists, status.highestModSeq)
            == (mark.uidValidity, mark.uidNext, mark.messages, mark.highestModSeq)
        )
        if unchanged:
            self._unchanged[folder.key] = (folder, mark)
        return unchanged

    async def _listLocal(self, source: MaildirSource, folder: SourceFolder) -> _FolderListed | None:
        """
        List a Maildir folder, unless its fingerprint is the one recorded
        after the last completed pass: then it is remembered as unchanged.
        The fingerprint is taken before the listing (a change during it
        changes it again), and kept for the mark only if it is not racy
        (L{RACY_WINDOW}).
        """
        mark = await self._store.folderMark(self._job, folder.key)
        if mark is not None:
            self._marked.add(folder.key)
        taken = source.fingerprint(folder)
        if (
            taken is not None
            and mark is not None
            and self._skipping
            and mark.fingerprint == taken[0]
            and mark.octets is not None
        ):
            self._unchanged[folder.key] = (folder, mark)
            return None
        if taken is not None and taken[1] < self._clock.seconds() - RACY_WINDOW:
            self._fingerprints[folder.key] = taken[0]
        return await source.listMessagesInTurns(folder, self._cooperator), ()

    def _unchangedProgress(self, folder: SourceFolder, mark: FolderMark) -> FolderProgress:
        """
        The progress of a folder unchanged since its mark: every message
        in the destination, as the mark counts them.
        """
        octets = mark.octets or 0
        return FolderProgress(
            folderName(folder.path),
            folder.key,
            mark.messages,
            octets,
            mark.messages,
            octets,
            0,
            mailbox=_mailboxName(folder, self._rules),
        )

    def _listedCount(self, folder: SourceFolder, messages: Sequence[SourceMessage]) -> int:
        """
        How many messages the folder holds: all of them when listed whole,
        the server's count on a delta pass.
        """
        return max(self._deltaCounts.pop(folder.key, 0), len(messages))

    async def recordFolderMarks(self, folders: Sequence[SourceFolder]) -> None:
        """
        After a completed pass, remember where each source folder listed
        stood, for the next pass: an IMAP folder's status, a Maildir
        folder's fingerprint (a folder without a fingerprint to trust
        loses its mark), each with the folder's messages and octets.
        Nothing after a pass in which messages failed: they are retried
        by listing their folders.
        """
        source = self._source
        if self._stop.requested or self._progress.messagesFailed:
            return
        if isinstance(source, IMAPSource):
            for folder in folders:
                status = source.folderStatus(folder)
                if status is not None:
                    await self._store.recordFolderMark(
                        self._job, folder.key, self._imapMark(folder, status)
                    )
        elif isinstance(source, MaildirSource):
            for folder in folders:
                fingerprint = self._fingerprints.get(folder.key)
                messages, octets = self._totals.get(folder.key, (0, 0))
                if fingerprint is not None:
                    mark = FolderMark(0, 0, None, messages, (), fingerprint, octets)
                    await self._store.recordFolderMark(self._job, folder.key, mark)
                elif folder.key in self._marked:
                    await self._store.forgetFolder(self._job, folder.key)

    def _imapMark(self, folder: SourceFolder, status: FolderStatus) -> FolderMark:
        """
        The mark of an IMAP folder whose status is C{status}, with its
        octets as planned (none if it was not).
        """
        totals = self._totals.get(folder.key)
        return FolderMark(
            status.uidValidity,
            status.uidNext,
            status.highestModSeq,
            status.exists,
            status.deferred,
            None,
            None if totals is None else totals[1],
        )


def _mailboxName(folder: SourceFolder, rules: FolderRules) -> str:
    """
    The destination mailbox a listed folder goes to, for the progress (as
    L{imapmig.mail.folders.mapFolders} decides it, less the namespace and the
    special uses); C{"-"} for one not migrated.
    """
    if folder.notMigrated is not None:
        return "-"
    path = renamedPath(folder.path, rules) or folder.destination or folder.path
    return folderName(path)


def _accounted(
    messages: Sequence[SourceMessage], recorded: dict[str, MessageOutcome], delta: bool
) -> list[MessageOutcome]:
    """
    The records of a folder that account for messages the source lists.
    On a delta pass every record is of a message still there; otherwise
    records of messages the source no longer lists under these keys (a
    new UIDVALIDITY, a rewritten mbox) account for nothing: their copies
    are found again by identity.
    """
    if delta:
        return list(recorded.values())
    return [recorded[m.key] for m in messages if m.key in recorded]


def folderOctets(
    messages: Sequence[SourceMessage], recorded: dict[str, MessageOutcome], delta: bool
) -> tuple[int, int]:
    """
    A listed folder's source octets, and those of its messages in the
    destination.

    @param messages: its messages as listed: all of them, or on a
        C{delta} pass those new since the last.
    @param recorded: the records of its messages in the destination.
    @param delta: whether C{messages} are only the new ones: the others
        are those C{recorded}, counted by their recorded size.
    """
    if delta:
        octetsDone = sum(outcome.size for outcome in recorded.values())
        new = sum(m.size for m in messages if m.key not in recorded)
        return octetsDone + new, octetsDone
    octets = sum(map(_size, messages))
    if not recorded:
        return octets, 0
    return octets, sum(m.size for m in messages if m.key in recorded)
