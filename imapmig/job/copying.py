# -*- test-case-name: tests.test_job -*-
"""
Copying what one attempt of a job found left to copy, over the attempt's
destination connections: the extra connections log in while the first
prepares the destination (L{imapmig.job.destination}), on a first run from
the listing on, as soon as what it found is worth them; each folder's
pending messages are cut into units of work, shared by the connections
(L{imapmig.job.workshare}), and each connection runs the copy loop
(L{imapmig.job.sending}) until none is left.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from attrs import frozen

from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import ImapmigError
from imapmig.imap.appendlimit import messageSizeLimit
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.job.attempt import AttemptConnections
from imapmig.job.destination import (
    DestinationPreparation,
    FolderToCopy,
    MailboxesCreated,
    PreparedDestination,
    TargetMailbox,
)
from imapmig.job.machine import JobInputs
from imapmig.job.preparation import MessagePreparation
from imapmig.job.sending import CopyLoop
from imapmig.job.settings import JobSettings
from imapmig.job.workshare import SharedUnits
from imapmig.mail.folders import FolderRules
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.job.units import WorkUnit, cutUnits
from imapmig.progress import JobProgress
from imapmig.state import IStateStore

__all__ = ["EarlyCreation", "EarlyDestination", "ListedCopy", "connectionsWorthOpening"]

# These events were MigrationJob's before they moved here, and keep its
# namespace: log levels are set by namespace, and the journal's MESSAGE_ID
# of an event is made from its namespace and format.
log = Logger(namespace="imapmig.job.migration")


def connectionsWorthOpening(
    settings: JobSettings, folders: int, messages: int, octets: int
) -> int:
    """
    How many destination connections a job's pending work is worth: at
    most C{settings.connections}, at most one per folder with pending
    messages, and at most one per whole batch (C{batchMessages} messages
    or C{batchBytes} octets) of it, and at least one.  A connection never
    appends into a mailbox another is appending to
    (L{imapmig.job.workshare.SharedUnits.take}): one more than the
    folders would log in for nothing.  A connection with less than a
    batch of its own to send costs more than it saves: its login (a
    process or two at the server, a few round trips) takes about as long
    as one connection takes to send that batch, and a run of many small
    accounts would open twice the connections for nothing.

    @param settings: the job's settings.
    @param folders: the source folders with messages pending.
    @param messages: the messages pending.
    @param octets: their listed sizes, summed.
    @return: the connections to open, the first included.
    """
    batches = max(messages // settings.batchMessages, octets // settings.batchBytes)
    return max(1, min(settings.connections, folders, batches))


@frozen
class EarlyDestination:
    """
    The first destination connection of an attempt, open, and the
    mailboxes it created while the source was listed
    (L{ListedCopy.createEarly}).
    """

    session: IMAPSession
    preparation: DestinationPreparation
    created: MailboxesCreated


class ListedCopy:
    """
    Copies, attempt after attempt of one job, what the attempt found left
    to copy, over its connections.
    """

    def __init__(
        self,
        job: str,
        store: IStateStore,
        settings: JobSettings,
        rules: FolderRules,
        identity: str,
        progress: JobProgress,
        lifecycle: JobInputs,
        preparation: MessagePreparation,
        units: SharedUnits,
        loop: CopyLoop,
        openSession: Callable[[AttemptConnections], Awaitable[IMAPSession]],
        deadline: SendDeadline | None = None,
    ) -> None:
        """
        @param job: the job's name, for the state store and the log.
        @param store: where folder name fallbacks are recorded.
        @param rules: which source folders go where.
        @param identity: how messages already in the destination are
            recognised (L{imapmig.job.presence}).
        @param progress: the job's counters (its folder mapping).
        @param lifecycle: the job's state machine, told when the
            destination is prepared.
        @param preparation: records the messages that cannot go.
        @param units: the attempt's units of work, shared by its
            connections, and the run's stop.
        @param loop: what each connection runs.
        @param openSession: opens one more destination connection for an
            attempt.
        @param deadline: past it the preparation of the destination writes
            nothing (a fleet's daemon's send deadline), or L{None}.
        """
        self._deadline = deadline
        self._job = job
        self._store = store
        self._settings = settings
        self._rules = rules
        self._identity = identity
        self._progress = progress
        self._lifecycle = lifecycle
        self._preparation = preparation
        self._units = units
        self._loop = loop
        self._openSession = openSession
        self._stop = units.stop
        # The extra connections opened while the source was listed
        # (L{listed}), for the attempt they were opened for; and what the
        # listing found so far: folders with messages, messages, octets.
        self._early: list[Deferred[IMAPSession | None]] = []
        self._earlyFor: AttemptConnections | None = None
        self._found = (0, 0, 0)

    def listed(
        self, attempt: AttemptConnections, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> None:
        """
        The listing of C{attempt} found C{messages} in C{folder}, all left
        to copy (a first run): open the extra connections what was found so
        far is worth (L{connectionsWorthOpening}) now, so that they log in
        while the rest is listed and the destination prepared, rather than
        once the plan is made.
        """
        if attempt is not self._earlyFor:
            self._earlyFor, self._early, self._found = attempt, [], (0, 0, 0)
        if not messages or folder.notMigrated is not None:
            return
        if len(self._early) >= self._settings.connections - 1:
            return
        folders, count, octets = self._found
        self._found = (folders + 1, count + len(messages), octets + sum(m.size for m in messages))
        wanted = connectionsWorthOpening(self._settings, *self._found)
        while len(self._early) < wanted - 1 and not self._stop.requested:
            opening = Deferred.fromCoroutine(self._openExtraSession(attempt))
            attempt.openings.append(opening)
            self._early.append(opening)

    async def copy(
        self,
        attempt: AttemptConnections,
        first: IMAPSession,
        listings: list[FolderToCopy],
        overQuota: str | None,
        early: EarlyDestination | None = None,
    ) -> None:
        """
        Copy what L{imapmig.job.listing.SourceListing.plan} found left to
        copy, over C{first} and the job's other connections.

        @param overQuota: the reason every message left to copy is
            recorded as failed with, without being sent (the destination's
            mailbox is full), or L{None}.
        @param early: what C{first} created while the source was listed
            (L{createEarly}), or L{None}.
        @raise DailyLimitReached: a daily budget was found used up: the
            attempt ended once every connection had drained.
        """
        openings = self._openExtras(attempt, listings)
        prepared = await self._prepare(first, listings, openings, early)
        self._progress.mapped({mapping.folder.key: mapping.mailbox for mapping, _ in prepared.plans})
        if self._stop.requested:
            return
        floors = {
            mailbox: target.uidFloor
            for mailbox, target in prepared.targets.items()
            if target.uidFloor is not None
        }
        units = self._units
        units.extend(self._cutUnits(first, prepared, overQuota))
        self._lifecycle.connected()
        if not units:
            await self._logOut(attempt, first, openings)
            return
        await self._work(attempt, first, openings, prepared.targets, floors)
        if units.limitReached is not None and not self._stop.requested:
            raise units.limitReached

    async def createEarly(
        self, opening: Deferred[IMAPSession], folders: Sequence[SourceFolder]
    ) -> EarlyDestination:
        """
        Once the first connection of an attempt is open, create the
        destination mailboxes of C{folders} while their messages are
        listed: on a first run, whose folders all have their messages
        left to copy, the CREATEs (a few milliseconds of a local server's
        time, a round trip or two over a network) are then done by the
        time the listing ends, and only the SELECTs of the targets are
        left (L{DestinationPreparation.prepare}).

        @param opening: the first connection opening; this takes its
            result.
        """
        session = await opening
        preparation = self._destinationPreparation(session)
        created = await preparation.create(folders)
        return EarlyDestination(session, preparation, created)

    def _destinationPreparation(self, session: IMAPSession) -> DestinationPreparation:
        """
        The preparation of the destination over C{session}.
        """
        return DestinationPreparation(
            self._job,
            session,
            self._rules,
            self._identity,
            self._store,
            self._settings.folderNameFallback,
            self._deadline,
        )

    async def _prepare(
        self,
        first: IMAPSession,
        listings: list[FolderToCopy],
        openings: Sequence[Deferred[IMAPSession | None]],
        early: EarlyDestination | None,
    ) -> PreparedDestination:
        """
        Prepare the destination over C{first} (from what it created early,
        if it did); if that fails, the extra connections being opened are
        given up with the attempt, their failures not left unhandled.
        """
        try:
            if early is not None:
                return await early.preparation.prepare(listings, early.created)
            return await self._destinationPreparation(first).prepare(listings)
        except BaseException:
            for opening in openings:
                opening.addErrback(lambda failure: None)
            raise

    async def _work(
        self,
        attempt: AttemptConnections,
        first: IMAPSession,
        openings: Sequence[Deferred[IMAPSession | None]],
        targets: dict[str, TargetMailbox],
        floors: dict[str, int],
    ) -> None:
        """
        Copy the units over C{first} and each extra connection once open,
        until every one of them has drained; the first failure of any is
        raised.
        """
        workers = [Deferred.fromCoroutine(self._loop.run(attempt, first, targets, floors))]
        workers.extend(
            Deferred.fromCoroutine(self._workOn(attempt, opening, targets, floors))
            for opening in openings
        )
        results = await DeferredList(workers, consumeErrors=True)
        errors = [result for ok, result in results if not ok]
        if errors:
            failure: Failure = errors[0]  # type: ignore[assignment]
            failure.raiseException()

    def _openExtras(
        self, attempt: AttemptConnections, listings: Sequence[FolderToCopy]
    ) -> list[Deferred[IMAPSession | None]]:
        """
        Start opening the extra connections C{listings} are worth
        (L{connectionsWorthOpening}) that the listing has not opened
        already (L{listed}), given up with the attempt's other openings;
        return every extra connection opening or open.
        """
        settings = self._settings
        # The other connections log in while the first prepares the
        # destination (at 20 ms of RTT that overlaps about four round
        # trips), or, on a first run, from the listing on.
        wanted = connectionsWorthOpening(
            settings,
            sum(1 for listing in listings if listing.pending),
            sum(len(listing.pending) for listing in listings),
            sum(m.size for listing in listings for m in listing.pending),
        )
        early = self._early if attempt is self._earlyFor else []
        self._earlyFor, self._early = None, []
        openings = [
            Deferred.fromCoroutine(self._openExtraSession(attempt))
            for _ in range(wanted - 1 - len(early))
        ]
        attempt.openings.extend(openings)
        return early + openings

    def _cutUnits(
        self, first: IMAPSession, prepared: PreparedDestination, overQuota: str | None
    ) -> list[WorkUnit]:
        """
        The units of work of the prepared destination's plans; the messages
        that cannot go (their mailbox could not be created, the mailbox is
        full, larger than the destination accepts) are recorded as failed
        instead.
        """
        settings = self._settings
        preparation = self._preparation
        uncreatable = prepared.uncreatable
        sizeLimit = messageSizeLimit(first.capabilities, settings.maxMessageBytes)
        units: list[WorkUnit] = []
        for mapping, pending in prepared.plans:
            mailbox = mapping.mailbox
            folder = mapping.folder
            if mailbox in uncreatable:
                for message in pending:
                    preparation.recordFailure(
                        folder,
                        mailbox,
                        message,
                        f"cannot create mailbox {mailbox!r}: {uncreatable[mailbox]}",
                    )
                continue
            if overQuota is not None:
                for message in pending:
                    preparation.recordFailure(folder, mailbox, message, overQuota)
                continue
            if sizeLimit is not None:
                pending = preparation.withinSizeLimit(folder, mailbox, pending, sizeLimit)
            units.extend(
                cutUnits(folder, mailbox, pending, settings.unitMessages, settings.unitBytes)
            )
        return units

    async def _logOut(
        self,
        attempt: AttemptConnections,
        first: IMAPSession,
        openings: Sequence[Deferred[IMAPSession | None]],
    ) -> None:
        """
        Nothing is left to copy: log C{first} out, and each extra
        connection once it is open.
        """
        for opening in openings:
            extra = await opening
            if extra is not None:
                attempt.release(extra)
                await extra.logout()
        attempt.release(first)
        await first.logout()

    async def _openExtraSession(self, attempt: AttemptConnections) -> IMAPSession | None:
        """
        Open one more destination connection, or L{None} if the server
        refuses it: the job goes on with the connections it has (a server
        that limits connections per account is common).  While it waits
        for its grant (the servers' connection limits), the job copies
        with the connections it has; once no work is left, the wait is
        given up (L{AttemptConnections.giveUpOpenings}).
        """
        try:
            return await self._openSession(attempt)
        except CancelledError:
            return None
        except ImapmigError as e:
            if not (attempt.over or attempt.givenUp):
                log.warn(
                    "Job {job}: extra connection refused, continuing with fewer: {why}",
                    job=self._job,
                    why=str(e),
                )
            return None

    async def _workOn(
        self,
        attempt: AttemptConnections,
        opening: Deferred[IMAPSession | None],
        targets: dict[str, TargetMailbox],
        floors: dict[str, int],
    ) -> None:
        """
        Work on the session C{opening} gives, once open; a session with no
        unit left to take (the job is small, or stopped) is logged out.
        """
        session = await opening
        if session is None:
            return
        await self._loop.run(attempt, session, targets, floors)



class EarlyCreation:
    """
    On a first run, the first destination connection of an attempt creates
    the folders' mailboxes while their messages are listed
    (L{ListedCopy.createEarly}): called with the folders once they are
    known, this starts it.

    @ivar ready: the first connection and what it created, once
        L{session} has had them; L{None} before, or if this never started.
    """

    def __init__(self, copier: ListedCopy, opening: Deferred[IMAPSession]) -> None:
        """
        @param opening: the first connection opening; once this has
            started, it takes its result.
        """
        self._copier = copier
        self._opening = opening
        self._creating: Deferred[EarlyDestination] | None = None
        self.ready: EarlyDestination | None = None

    def __call__(self, folders: Sequence[SourceFolder]) -> Deferred[EarlyDestination]:
        """
        The folders are known: create their mailboxes once the first
        connection is open.

        @return: the creation, under way.
        """
        self._creating = Deferred.fromCoroutine(self._copier.createEarly(self._opening, folders))
        return self._creating

    async def session(self, opening: Deferred[IMAPSession]) -> IMAPSession:
        """
        The first connection, once open and, if this started, done creating
        (then kept as L{ready}); else C{opening}'s.
        """
        if self._creating is None:
            return await opening
        if self.ready is None:
            self.ready = await self._creating
        return self.ready.session

    def pending(self, opening: Deferred[Any]) -> Deferred[Any]:
        """
        What to let end quietly when the attempt gives up: the creation if
        it started, else C{opening}.
        """
        return opening if self._creating is None else self._creating
