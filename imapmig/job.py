# -*- test-case-name: tests.test_job -*-
"""
One migration job: a source drained into one destination account.

The lifecycle (queued, running, done, failed) is an automat machine,
L{JobLifecycle}; the copying is L{MigrationJob.run}: list the source,
subtract what the state store records as appended, create the missing
destination folders, then let each connection take units of work (a run of
messages of one folder), SELECT the folder and feed its APPEND pipeline.
Outcomes are recorded in the state store in batches, never one transaction
per message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.task import deferLater
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import CommandFailed, ImapmigError, SourceError
from imapmig.fidelity import decideFlags, needsBinary
from imapmig.imap.pipeline import OutgoingMessage, appendArguments
from imapmig.imap.session import IMAPSession
from imapmig.presence import FINGERPRINT, OFF, PresenceIndex, holdsOthers, indexMailbox
from imapmig.message import MessageBody, SourceFolder, SourceMessage, UnreadableMessage
from imapmig.plan import (
    FolderMapping,
    FolderRules,
    WorkUnit,
    chooseUnit,
    chunks,
    cutUnits,
    guidedShare,
    isIncluded,
    mailboxesToCreate,
    mapFolders,
    pendingMessages,
    takeShare,
)
from imapmig.progress import JobProgress
from imapmig.sources import IMessageSource
from imapmig.sources.imap import FlagChange, IMAPSource
from imapmig.state import FolderMark, IStateStore, MessageOutcome

_T = TypeVar("_T")
_U = TypeVar("_U")

# A source folder, what is left to copy of it, and (on a delta pass) the
# flag changes of messages already copied.
_FolderToCopy = tuple[SourceFolder, list[SourceMessage], Sequence[FlagChange]]

log = Logger()

# The most octets read from the source in one step without letting the
# reactor run.
READ_STEP_BYTES = 1024 * 1024


@dataclass(frozen=True)
class JobSettings:
    """
    How a job copies.

    @ivar connections: parallel connections to the destination.
    @ivar batchMessages: messages per MULTIAPPEND command.
    @ivar batchBytes: octets per MULTIAPPEND command.
    @ivar windowMessages: messages in flight per connection.
    @ivar windowBytes: octets in flight per connection.
    @ivar recordEvery: outcomes buffered before a state-store transaction.
    @ivar recordInterval: seconds after which buffered outcomes are
        recorded anyway.
    """

    connections: int = 2
    batchMessages: int = 50
    batchBytes: int = 8 * 1024 * 1024
    windowMessages: int = 1000
    windowBytes: int = 32 * 1024 * 1024
    recordEvery: int = 2000
    recordInterval: float = 1.0
    unitMessages: int = 2000
    unitBytes: int = 64 * 1024 * 1024


# The lifecycle.


class JobInputs(Protocol):
    """
    What can happen to a job.
    """

    def start(self) -> None:
        "The job begins (or begins again) copying."

    def succeed(self) -> None:
        "Every message was migrated or recorded as failed with its reason."

    def fail(self, reason: str) -> None:
        "The job could not run to its end."


@dataclass
class _LifecycleCore:
    progress: JobProgress


def _buildLifecycle() -> Callable[[_LifecycleCore], JobInputs]:
    machine = TypeMachineBuilder(JobInputs, _LifecycleCore)
    queued = machine.state("Queued")
    running = machine.state("Running")
    done = machine.state("Done")
    failed = machine.state("Failed")

    @queued.upon(JobInputs.start).to(running)
    @done.upon(JobInputs.start).to(running)
    @failed.upon(JobInputs.start).to(running)
    def begin(inputs: JobInputs, core: _LifecycleCore) -> None:
        core.progress.started()

    @running.upon(JobInputs.succeed).to(done)
    def finish(inputs: JobInputs, core: _LifecycleCore) -> None:
        core.progress.finished()

    @running.upon(JobInputs.fail).to(failed)
    def abandon(inputs: JobInputs, core: _LifecycleCore, reason: str) -> None:
        core.progress.finished(reason)

    return machine.build()


_lifecycleFactory = _buildLifecycle()


def JobLifecycle(progress: JobProgress) -> JobInputs:
    """
    A job's lifecycle machine, reflected in C{progress}: Queued -> Running
    -> Done or Failed; a finished job may be started again.
    """
    return _lifecycleFactory(_LifecycleCore(progress))


# Recording outcomes.


class OutcomeRecorder:
    """
    Buffers outcomes and records them in the state store one batch per
    transaction (every C{recordEvery} outcomes, or C{recordInterval}
    seconds after the first unrecorded one), updating the progress counters
    as each arrives.
    """

    def __init__(
        self,
        jobName: str,
        store: IStateStore,
        progress: JobProgress,
        clock: IReactorTime,
        recordEvery: int,
        recordInterval: float,
        onError: Callable[[], None] = lambda: None,
    ) -> None:
        """
        @param onError: called once if the store fails to record a batch:
            the job must stop, since what it appends from then on would not
            be known to the next run.
        """
        self._jobName = jobName
        self._onError = onError
        self.error: str | None = None
        self._store = store
        self._progress = progress
        self._clock = clock
        self._recordEvery = recordEvery
        self._recordInterval = recordInterval
        self._buffer: list[MessageOutcome] = []
        self._timer: IDelayedCall | None = None
        self._writing: Deferred[None] | None = None

    def add(self, outcome: MessageOutcome) -> None:
        """
        Note one message's outcome.
        """
        progress = self._progress
        if outcome.failure is not None:
            progress.messagesFailed += 1
        elif outcome.alreadyPresent:
            progress.messagesDone += 1
            progress.messagesAlreadyPresent += 1
        else:
            progress.messagesDone += 1
            progress.bytesDone += outcome.size
            if outcome.lineEndingsConverted:
                progress.lineEndingsConverted += 1
            if outcome.note is not None:
                progress.messagesWithNotes += 1
        buffer = self._buffer
        buffer.append(outcome)
        if len(buffer) >= self._recordEvery:
            self.flush()
        elif self._timer is None:
            self._timer = self._clock.callLater(self._recordInterval, self.flush)

    def flush(self) -> Deferred[None]:
        """
        Record the buffered outcomes now.

        @return: fires when they are recorded.
        """
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return self._writing if self._writing is not None else succeed(None)
        batch, self._buffer = self._buffer, []
        d = self._store.recordOutcomes(self._jobName, batch)

        def failed(failure: Failure) -> None:
            log.error(
                "Could not record {count} outcomes for job {job}: {why}",
                count=len(batch),
                job=self._jobName,
                why=str(failure.value),
            )
            if self.error is None:
                self.error = (
                    f"cannot record outcomes in the state database: {failure.value}"
                )
                self._onError()

        d.addErrback(failed)
        self._writing = d
        return d


@dataclass
class _DestinationTraits:
    """
    What the destination can store, as far as preparing a message goes.

    @ivar binary: it offers BINARY (RFC 3516): literal8 APPENDs.
    @ivar permanentFlags: the PERMANENTFLAGS of the selected mailbox, or
        L{None} when unknown.
    @ivar presence: what the mailbox already holds that no record accounts
        for, or L{None}.
    @ivar flagDecisions: flags to send and the note, by the source's flags,
        as decided for these traits.
    """

    binary: bool
    permanentFlags: frozenset[str] | None
    presence: PresenceIndex | None = None
    flagDecisions: dict[tuple[str, ...], tuple[tuple[str, ...], str | None]] = field(
        default_factory=dict
    )


@dataclass(frozen=True)
class _DestinationView:
    """
    The destination's mailboxes as LIST shows them.

    @ivar delimiter: its hierarchy delimiter.
    @ivar existing: every mailbox (C{INBOX} spelled so).
    @ivar subscribed: the subscribed ones.
    @ivar uses: a selectable mailbox per special use.
    """

    delimiter: str | None
    existing: frozenset[str]
    subscribed: frozenset[str]
    uses: dict[str, str]

    @classmethod
    async def read(cls, session: IMAPSession) -> _DestinationView:
        """
        LIST the destination's mailboxes.
        """
        listed = await session.listFolders()
        delimiter = next((m.delimiter for m in listed if m.delimiter), None)
        if delimiter is None:
            delimiter = await session.hierarchyDelimiter()
        uses: dict[str, str] = {}
        for m in listed:
            if m.specialUse is not None and m.selectable:
                uses.setdefault(m.specialUse, m.name)
        return cls(
            delimiter,
            frozenset("INBOX" if m.name.upper() == "INBOX" else m.name for m in listed),
            frozenset(m.name for m in listed if m.subscribed),
            uses,
        )


class _Target:
    """
    Where a unit's messages go: its source folder's key and the
    destination mailbox.  One per unit, shared by its messages.
    """

    __slots__ = ("folderKey", "mailbox")

    def __init__(self, folderKey: str, mailbox: str) -> None:
        self.folderKey = folderKey
        self.mailbox = mailbox


class _Sent:
    """
    What the job needs back when a sent message's outcome arrives: the
    message's origin (each OutgoingMessage carries one).

    @ivar note: what was not carried over exactly, if anything.
    @ivar converted: whether its line endings were converted to CRLF.
    """

    __slots__ = ("target", "source", "note", "converted")

    def __init__(
        self, target: _Target, source: SourceMessage, note: str | None, converted: bool
    ) -> None:
        self.target = target
        self.source = source
        self.note = note
        self.converted = converted


class _PipelineOutcomes:
    """
    Turns what a pipeline reports into recorded outcomes.  Each message's
    origin is a L{_Sent}: a connection moves on to the next folder while
    the replies for the previous one are still arriving.
    """

    __slots__ = ("recorder",)

    def __init__(self, recorder: OutcomeRecorder) -> None:
        self.recorder = recorder

    def messageAppended(
        self, message: OutgoingMessage, uidValidity: int | None, uid: int | None
    ) -> None:
        sent: _Sent = message.origin  # type: ignore[assignment]
        self.recorder.add(
            MessageOutcome(
                sent.target.folderKey,
                sent.source.key,
                sent.target.mailbox,
                len(message.body),
                uidValidity,
                uid,
                note=sent.note,
                lineEndingsConverted=sent.converted,
            )
        )

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        sent: _Sent = message.origin  # type: ignore[assignment]
        self.recorder.add(
            MessageOutcome(
                sent.target.folderKey,
                sent.source.key,
                sent.target.mailbox,
                len(message.body),
                failure=f"refused by server: {reason}",
            )
        )


# The copying.


async def _bothOf(first: Deferred[_T], second: Deferred[_U]) -> tuple[_T, _U]:
    """
    The results of two commands (or runs of commands) already sent
    together, once both have their replies.  If either failed, the first
    failure is raised and the other's is consumed, not left unhandled.
    """
    sent: list[Deferred[Any]] = [first, second]
    results: list[tuple[bool, Any]] = await DeferredList(sent, consumeErrors=True)
    for ok, value in results:
        if not ok:
            value.raiseException()
    return results[0][1], results[1][1]


def _abandonSession(session: IMAPSession | None) -> None:
    """
    Drop a session the job no longer needs (it failed before the session
    could work).
    """
    if session is not None:
        session.abort()


class MigrationJob:
    """
    Copies one source into one destination account.
    """

    def __init__(
        self,
        name: str,
        source: IMessageSource,
        store: IStateStore,
        progress: JobProgress,
        openSession: Callable[[], Awaitable[IMAPSession]],
        clock: IReactorTime,
        settings: JobSettings,
        rules: FolderRules = FolderRules(),
        identity: str = FINGERPRINT,
        eightBit: str = "literal",
    ) -> None:
        """
        @param rules: which source folders to migrate, and where.
        @param identity: how messages already in the destination are
            recognised (L{imapmig.presence}): C{"fingerprint"},
            C{"message-id"} or C{"off"}.
        @param eightBit: a message with 8-bit octets (no NUL) for a
            destination without BINARY: C{"literal"} sends it in an ordinary
            literal, C{"fail"} records it as failed.
        """
        self.name = name
        self._rules = rules
        self._identity = identity
        self._eightBitFails = eightBit == "fail"
        self._presence: dict[str, PresenceIndex] = {}
        self._permanentFlags: dict[str, frozenset[str] | None] = {}
        self._deltaCounts: dict[str, int] = {}
        self._source = source
        self._store = store
        self._progress = progress
        self._openSession = openSession
        self._clock = clock
        self._settings = settings
        self._lifecycle = JobLifecycle(progress)
        self._units: list[WorkUnit] = []
        # Messages in self._units, not yet taken by a connection.
        self._untaken = 0
        self._selected: dict[int, str] = {}
        self._stopping = False
        self._recorder = OutcomeRecorder(
            name,
            store,
            progress,
            clock,
            settings.recordEvery,
            settings.recordInterval,
            onError=self.stop,
        )
        self._sessions: list[IMAPSession] = []

    @property
    def progress(self) -> JobProgress:
        """
        This job's live counters.
        """
        return self._progress

    def stop(self) -> None:
        """
        Take no new work; the run ends once in-flight messages have their
        outcomes.
        """
        self._stopping = True
        self._units.clear()
        self._untaken = 0

    async def run(self) -> bool:
        """
        Run the job to its end.

        @return: C{True} if it completed (every message migrated or recorded
            as failed), C{False} if it failed (the reason is in the
            progress).
        """
        self._lifecycle.start()
        self._stopping = False
        try:
            try:
                await self._copy()
            finally:
                if isinstance(self._source, IMAPSource):
                    await self._source.close()
        except ImapmigError as e:
            reason = str(e)
        except Exception as e:
            log.failure("Job {job} crashed", job=self.name)
            reason = f"internal error: {e!r}"
        else:
            await self._recorder.flush()
            if self._recorder.error is not None:
                return self._failed(self._recorder.error)
            if self._stopping:
                self._lifecycle.fail("stopped before the end")
                return False
            self._lifecycle.succeed()
            log.info(
                "Job {job} done: {done} of {total} messages in the destination, "
                "{failed} failed",
                job=self.name,
                done=self._progress.messagesDone,
                total=self._progress.messagesTotal,
                failed=self._progress.messagesFailed,
            )
            return True
        await self._recorder.flush()
        return self._failed(self._recorder.error or reason)

    def _failed(self, reason: str) -> bool:
        for session in self._sessions:
            session.abort()
        self._sessions = []
        log.error("Job {job} failed: {reason}", job=self.name, reason=reason)
        self._lifecycle.fail(reason)
        return False

    async def _copy(self) -> None:
        # The first destination connection logs in while the source is
        # listed: its greeting and login (about 16 ms on a local Dovecot,
        # two round trips or more over a network) overlap the listing.
        opening = Deferred.fromCoroutine(self._openFirstSession())
        try:
            listed = await self._listSource(opening)
        except BaseException:
            opening.addCallback(_abandonSession).addErrback(
                lambda failure: log.failure(
                    "Job {job}: the first connection failed", failure, job=self.name
                )
            )
            raise
        first = await opening
        self._sessions.append(first)
        await self._copyListed(first, *listed)

    async def _openFirstSession(self) -> IMAPSession:
        """
        Open the first destination connection, as a coroutine (the
        C{openSession} given may return any awaitable, and
        C{Deferred.fromCoroutine} needs a coroutine).
        """
        return await self._openSession()

    async def _listSource(
        self, opening: Deferred[IMAPSession]
    ) -> tuple[
        list[_FolderToCopy],
        dict[str, dict[str, MessageOutcome]],
        dict[str, list[MessageOutcome]],
        list[str],
    ]:
        """
        List the included source folders and what of each is left to copy;
        set the progress totals.

        @param opening: the first destination connection, logging in
            meanwhile: while it is, the reactor runs between folders (a
            Maildir or mbox is listed without yielding), so that its
            greeting and login go on.
        @return: per folder what is left to copy (and, on a delta pass, the
            flag changes); per folder the records of its messages, and
            those that account for messages still in the source; and the
            folders that could not be read.
        """
        progress = self._progress
        source = self._source
        folders = await source.listFolders()
        included = [f for f in folders if isIncluded(f.path, self._rules)]
        progress.foldersTotal = len(included)
        progress.foldersExcluded = len(folders) - len(included)
        for folder in folders:
            if folder not in included:
                log.info(
                    "Job {job}: folder {folder} left out by the folder rules",
                    job=self.name,
                    folder="/".join(folder.path),
                )

        # What is left to copy, folder by folder.
        unreadable: list[str] = []
        listings: list[_FolderToCopy] = []
        recordedByFolder: dict[str, dict[str, MessageOutcome]] = {}
        accountedByFolder: dict[str, list[MessageOutcome]] = {}
        total = already = 0
        for folder in included:
            try:
                messages, flagChanges = await self._listFolder(folder)
            except SourceError as e:
                # The other folders are still migrated; the job ends as
                # failed, naming this one.
                log.error(
                    "Job {job}: cannot list the source folder {folder}: {why}",
                    job=self.name,
                    folder="/".join(folder.path),
                    why=str(e),
                )
                unreadable.append(f"{'/'.join(folder.path)}: {e}")
                continue
            recorded = await self._store.destinationMap(self.name, folder.key)
            recordedByFolder[folder.key] = recorded
            pending = pendingMessages(messages, recorded)
            if folder.key in self._deltaCounts:
                # A delta pass: every record is of a message still there.
                accountedByFolder[folder.key] = list(recorded.values())
            else:
                # Records of messages the source no longer lists under these
                # keys (a new UIDVALIDITY, a rewritten mbox) account for
                # nothing: their copies are found again by identity.
                accountedByFolder[folder.key] = [
                    recorded[m.key] for m in messages if m.key in recorded
                ]
            listedCount = self._listedCount(folder, messages)
            total += listedCount
            already += listedCount - len(pending)
            listings.append((folder, pending, flagChanges))
            if not opening.called:
                await deferLater(self._clock, 0)
        progress.messagesTotal = total
        progress.messagesDone = already
        progress.messagesAlreadyMigrated = already
        log.info(
            "Job {job}: {total} messages in {folders} folders, {pending} to copy",
            job=self.name,
            total=total,
            folders=len(included),
            pending=total - already,
        )
        return listings, recordedByFolder, accountedByFolder, unreadable

    async def _copyListed(
        self,
        first: IMAPSession,
        listings: list[_FolderToCopy],
        recordedByFolder: dict[str, dict[str, MessageOutcome]],
        accountedByFolder: dict[str, list[MessageOutcome]],
        unreadable: list[str],
    ) -> None:
        """
        Copy what L{_listSource} found left to copy, over C{first} and the
        job's other connections.
        """
        settings = self._settings
        # Where each folder goes.
        # The other connections log in while this one prepares the
        # destination: at 20 ms of RTT that overlaps about four round trips.
        expectedUnits = sum(
            sum(1 for _ in chunks(pending, settings.unitMessages, settings.unitBytes))
            for _, pending, _ in listings
        )
        openings = [
            Deferred.fromCoroutine(self._openExtraSession())
            for _ in range(min(settings.connections, expectedUnits) - 1)
        ]
        try:
            view = await _DestinationView.read(first)
            sourceFolders = [folder for folder, _, _ in listings]
            renames = FolderRules(rename=self._rules.rename)
            mappings, _ = mapFolders(sourceFolders, renames, view.delimiter, view.uses)
            # A folder with a use the destination lacks: its mailbox is created
            # first, alone; the server may give it the use (by its configuration,
            # or CREATE-SPECIAL-USE), and then every folder of that use goes
            # there, as it will on every later run and for verify.
            claiming: dict[str, FolderMapping] = {}
            for mapping in mappings:
                use = mapping.specialUse
                if use is not None and mapping.mailbox not in view.existing:
                    claiming.setdefault(use, mapping)
            if claiming:
                # The LIST goes right behind the CREATEs: one round trip.
                claimed = Deferred.fromCoroutine(
                    self._createMailboxes(first, view, list(claiming.values()))
                )
                listed = Deferred.fromCoroutine(_DestinationView.read(first))
                _, view = await _bothOf(claimed, listed)
                mappings, _ = mapFolders(sourceFolders, renames, view.delimiter, view.uses)
            plans: list[tuple[FolderMapping, list[SourceMessage]]] = []
            accounted: dict[str, list[MessageOutcome]] = {}
            for mapping, (folder, pending, flagChanges) in zip(mappings, listings):
                if mapping.how != "name":
                    log.info(
                        "Job {job}: folder {folder} goes to {mailbox} ({how})",
                        job=self.name,
                        folder="/".join(folder.path),
                        mailbox=mapping.mailbox,
                        how=mapping.how,
                    )
                recorded = recordedByFolder[folder.key]
                plans.append((mapping, pending))
                accounted.setdefault(mapping.mailbox, []).extend(accountedByFolder[folder.key])
                if flagChanges:
                    await self._applyFlagChanges(first, mapping.mailbox, flagChanges, recorded)

            # The destination folders: created where missing (with their use
            # where the server can), subscribed as in the source; and what
            # each target mailbox can store and already holds (SELECT).  All
            # these commands go in one flight: one round trip in all.
            targets = sorted({m.mailbox for m, pending in plans if pending})
            creating = Deferred.fromCoroutine(self._createMailboxes(first, view, mappings))
            selecting = Deferred.fromCoroutine(first.selectEach(targets))
            uncreatable, states = await _bothOf(creating, selecting)
            existing = view.existing
            for mailbox in targets:
                if mailbox in uncreatable:
                    continue
                state = states[mailbox]
                if isinstance(state, CommandFailed):
                    log.warn(
                        "Job {job}: cannot SELECT {mailbox!r} ({why}); its keywords go unchecked",
                        job=self.name,
                        mailbox=mailbox,
                        why=state.text,
                    )
                    self._permanentFlags[mailbox] = None
                else:
                    self._permanentFlags[mailbox] = state.permanentFlags
                if self._identity == OFF or mailbox not in existing:
                    continue
                placed = [
                    (r.uidValidity, r.uid) for r in accounted.get(mailbox, []) if r.uid is not None
                ]
                if not isinstance(state, CommandFailed) and not holdsOthers(
                    state.exists, state.uidValidity, placed
                ):
                    continue
                index = await indexMailbox(first, mailbox, self._identity, placed)
                if index is not None:
                    log.info(
                        "Job {job}: {mailbox} already holds {count} messages no record"
                        " accounts for; those found in the source will not be appended again",
                        job=self.name,
                        mailbox=mailbox,
                        count=len(index),
                    )
                    self._presence[mailbox] = index

            for mapping, pending in plans:
                mailbox = mapping.mailbox
                folder = mapping.folder
                if mailbox in uncreatable:
                    for message in pending:
                        self._recorder.add(
                            MessageOutcome(
                                folder.key,
                                message.key,
                                mailbox,
                                message.size,
                                failure=f"cannot create mailbox {mailbox!r}: {uncreatable[mailbox]}",
                            )
                        )
                    continue
                self._units.extend(
                    cutUnits(folder, mailbox, pending, settings.unitMessages, settings.unitBytes)
                )
        except BaseException:
            for opening in openings:
                opening.addCallback(_abandonSession).addErrback(
                    lambda failure: log.failure(
                        "Job {job}: an extra connection failed", failure, job=self.name
                    )
                )
            raise
        self._untaken = sum(len(unit.messages) for unit in self._units)
        if not self._units:
            for opening in openings:
                extra = await opening
                if extra is not None:
                    await extra.logout()
            await first.logout()
            self._sessions.remove(first)
        else:
            workers = [Deferred.fromCoroutine(self._work(first))]
            workers.extend(Deferred.fromCoroutine(self._workOn(opening)) for opening in openings)
            results = await DeferredList(workers, consumeErrors=True)
            errors = [result for ok, result in results if not ok]
            if errors:
                self.stop()
                failure: Failure = errors[0]  # type: ignore[assignment]
                failure.raiseException()
        if unreadable:
            raise SourceError(
                f"{len(unreadable)} source folder(s) could not be read (the others were"
                f" migrated): {'; '.join(unreadable)}"
            )
        await self._recordFolderMarks([m.folder for m, _ in plans])

    async def _createMailboxes(
        self, session: IMAPSession, view: _DestinationView, mappings: Sequence[FolderMapping]
    ) -> dict[str, str]:
        """
        Create the destination mailboxes C{mappings} need that C{view} does
        not show (parents first, with their use where the server can), and
        subscribe those whose source folder is subscribed.

        @return: the mailboxes that could not be created, with why.
        """
        missing = mailboxesToCreate([m.path for m in mappings], view.existing, view.delimiter)
        uses = {m.mailbox: m.specialUse for m in mappings if m.specialUse is not None}
        toSubscribe = {m.mailbox for m in mappings if m.folder.subscribed}
        # Every command is written before the first reply is awaited.
        creating = Deferred.fromCoroutine(
            session.createMailboxes(
                missing,
                {name: use for name, use in uses.items() if name in missing},
                subscribe=toSubscribe,
            )
        )
        unsubscribed = sorted(
            name
            for name in toSubscribe
            if name in view.existing and name not in view.subscribed
        )
        subscribing = Deferred.fromCoroutine(session.subscribeMailboxes(unsubscribed))
        uncreatable, _ = await _bothOf(creating, subscribing)
        for name in missing:
            if name not in uncreatable:
                log.info("Job {job}: created mailbox {mailbox!r}", job=self.name, mailbox=name)
        return uncreatable

    async def _listFolder(
        self, folder: SourceFolder
    ) -> tuple[Sequence[SourceMessage], Sequence[FlagChange]]:
        """
        The messages of a source folder, and the flag changes to apply to
        copies made by an earlier run.

        An IMAP source whose folder is unchanged since the last completed
        run (same UIDVALIDITY) lists only the messages that arrived since,
        and the flag changes since (with CONDSTORE); otherwise every
        message is listed.
        """
        source = self._source
        if isinstance(source, IMAPSource):
            mark = await self._store.folderMark(self.name, folder.key)
            if mark is not None:
                changes = await source.listMessagesSince(
                    folder, mark.uidValidity, mark.uidNext, mark.highestModSeq
                )
                if not changes.uidValidityChanged:
                    self._deltaCounts[folder.key] = changes.status.exists
                    return changes.newMessages, changes.flagChanges
                log.warn(
                    "Job {job}: the source folder {folder} has a new UIDVALIDITY: its"
                    " messages are listed again and recognised by content in the destination",
                    job=self.name,
                    folder="/".join(folder.path),
                )
                await self._store.forgetFolder(self.name, folder.key)
        return await source.listMessages(folder), ()

    def _listedCount(self, folder: SourceFolder, messages: Sequence[SourceMessage]) -> int:
        """
        How many messages the folder holds: all of them when listed whole,
        the server's count on a delta pass.
        """
        return max(self._deltaCounts.pop(folder.key, 0), len(messages))

    async def _applyFlagChanges(
        self,
        session: IMAPSession,
        mailbox: str,
        changes: Sequence[FlagChange],
        recorded: dict[str, MessageOutcome],
    ) -> None:
        """
        Set the flags of destination copies to their source's current
        flags (a delta pass with CONDSTORE).
        """
        examined = await session.examine(mailbox)
        stores: list[tuple[int, tuple[str, ...]]] = []
        for change in changes:
            outcome = recorded.get(change.key)
            if (
                outcome is None
                or outcome.uid is None
                or outcome.uidValidity != examined.uidValidity
            ):
                continue
            stores.append((outcome.uid, decideFlags(change.flags, None).kept))
        if stores:
            applied = await session.storeFlags(mailbox, stores)
            log.info(
                "Job {job}: {count} flag changes applied in {mailbox}",
                job=self.name,
                count=applied,
                mailbox=mailbox,
            )

    async def _recordFolderMarks(self, folders: Sequence[SourceFolder]) -> None:
        """
        After a completed pass, remember where each IMAP source folder
        stood, for the next pass's delta.
        """
        source = self._source
        if not isinstance(source, IMAPSource) or self._stopping:
            return
        if self._progress.messagesFailed:
            # Failed messages are retried by listing the folder whole.
            return
        for folder in folders:
            status = source.folderStatus(folder)
            if status is not None:
                await self._store.recordFolderMark(
                    self.name,
                    folder.key,
                    FolderMark(status.uidValidity, status.uidNext, status.highestModSeq, status.exists),
                )

    async def _openExtraSession(self) -> IMAPSession | None:
        """
        Open one more destination connection, or L{None} if the server
        refuses it: the job goes on with the connections it has (a server
        that limits connections per account is common).
        """
        try:
            return await self._openSession()
        except ImapmigError as e:
            log.warn(
                "Job {job}: extra connection refused, continuing with fewer: {why}",
                job=self.name,
                why=str(e),
            )
            return None

    async def _workOn(self, opening: Deferred[IMAPSession | None]) -> None:
        """
        Work on the session C{opening} gives, once open; a session with no
        unit left to take (the job is small, or stopped) is logged out.
        """
        session = await opening
        if session is None:
            return
        self._sessions.append(session)
        await self._work(session)

    async def _work(self, session: IMAPSession) -> None:
        settings = self._settings
        outcomes = _PipelineOutcomes(self._recorder)
        pipeline = session.appendPipeline(
            settings.batchMessages,
            settings.batchBytes,
            settings.windowMessages,
            settings.windowBytes,
            outcomes,
        )
        # Read in steps of about one batch, at most READ_STEP_BYTES, and let
        # the reactor run between steps: reading blocks it, and the socket
        # must be kept fed meanwhile.
        chunkMessages = pipeline.settings.batchMessages
        chunkBytes = min(pipeline.settings.batchBytes, READ_STEP_BYTES)
        units = self._units
        current: str | None = None
        source = self._source
        selected = self._selected
        worker = id(outcomes)
        binary = b"BINARY" in session.capabilities
        traits: dict[str, _DestinationTraits] = {}
        while units and not self._stopping:
            inUse = {m for w, m in selected.items() if w != worker}
            share = guidedShare(self._untaken, settings.connections, settings.batchMessages)
            unit = takeShare(units, chooseUnit(units, current, inUse), share)
            self._untaken -= len(unit.messages)
            if unit.mailbox != current:
                # SELECT behind the APPENDs still in flight, without
                # waiting for their replies.
                await pipeline.flushed()
                session.selectPipelined(unit.mailbox)
                pipeline.selectMailbox(unit.mailbox)
                current = unit.mailbox
                selected[worker] = current
                self._progress.currentFolder = unit.mailbox
            target = _Target(unit.folder.key, unit.mailbox)
            destination = traits.get(unit.mailbox)
            if destination is None:
                destination = traits[unit.mailbox] = _DestinationTraits(
                    binary,
                    self._permanentFlags.get(unit.mailbox),
                    self._presence.get(unit.mailbox),
                )
            for chunk in chunks(unit.messages, chunkMessages, chunkBytes):
                if self._stopping:
                    break
                bodies = await source.readBodies(unit.folder, chunk)
                pipeline.enqueue(self._prepare(unit, target, chunk, bodies, destination))
                hungry = pipeline.hungry()
                if hungry.called:
                    await deferLater(self._clock, 0)
                await hungry
        await pipeline.drained()
        selected.pop(worker, None)
        self._sessions.remove(session)
        await session.logout()

    def _prepare(
        self,
        unit: WorkUnit,
        target: _Target,
        chunk: Sequence[SourceMessage],
        bodies: Sequence[MessageBody],
        destination: _DestinationTraits,
    ) -> list[OutgoingMessage]:
        """
        Turn what the source read into messages for the pipeline, deciding
        per message its flags and literal kind, and recording at once the
        messages that cannot go.
        """
        outgoing = []
        flagCache = destination.flagDecisions
        for message, body in zip(chunk, bodies):
            if isinstance(body, UnreadableMessage):
                self._recordFailure(unit, message, f"unreadable in the source: {body.reason}")
                continue
            presence = destination.presence
            if presence is not None:
                uid = presence.take(body)
                if uid is not None:
                    self._recorder.add(
                        MessageOutcome(
                            unit.folder.key,
                            message.key,
                            unit.mailbox,
                            len(body),
                            presence.uidValidity,
                            uid,
                            alreadyPresent=True,
                        )
                    )
                    continue
            hasNUL, has8bit = needsBinary(body)
            binary = False
            if hasNUL or has8bit:
                if destination.binary:
                    binary = True
                elif hasNUL:
                    self._recordFailure(
                        unit,
                        message,
                        "contains NUL octets, which IMAP carries only in a BINARY"
                        " literal8 (RFC 3516); the destination does not offer BINARY",
                    )
                    continue
                elif self._eightBitFails:
                    self._recordFailure(
                        unit,
                        message,
                        "contains 8-bit octets and the destination does not offer BINARY"
                        " (RFC 3516); the job's eight_bit setting is 'fail'",
                    )
                    continue
                # Otherwise 8-bit octets without NUL travel in a plain
                # literal: RFC 3501 literals are CHAR8, every octet but NUL.
            # Few distinct flag sets: decide each once per folder.
            decided = flagCache.get(message.flags)
            if decided is None:
                decision = decideFlags(message.flags, destination.permanentFlags)
                note = None
                if decision.dropped:
                    note = "; ".join(
                        f"flag {flag!r} dropped: {why}" for flag, why in decision.dropped
                    )
                decided = flagCache[message.flags] = (decision.kept, note)
            kept, note = decided
            converted = len(body) != message.size
            outgoing.append(
                OutgoingMessage(
                    body,
                    appendArguments(kept, message.internalDate),
                    _Sent(target, message, note, converted),
                    binary,
                )
            )
        return outgoing

    def _recordFailure(self, unit: WorkUnit, message: SourceMessage, reason: str) -> None:
        self._recorder.add(
            MessageOutcome(unit.folder.key, message.key, unit.mailbox, message.size, failure=reason)
        )
