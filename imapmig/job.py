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
from typing import Awaitable, Callable, Protocol, Sequence

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.task import deferLater
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import ImapmigError, SourceError
from imapmig.fidelity import decideFlags, needsBinary
from imapmig.imap.pipeline import OutgoingMessage, appendArguments
from imapmig.imap.session import IMAPSession
from imapmig.message import MessageBody, SourceFolder, SourceMessage, UnreadableMessage
from imapmig.plan import (
    WorkUnit,
    chooseUnit,
    chunks,
    cutUnits,
    destinationMailbox,
    mailboxesToCreate,
    pendingMessages,
)
from imapmig.progress import JobProgress
from imapmig.sources import IMessageSource
from imapmig.state import IStateStore, MessageOutcome

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
    @ivar flagDecisions: flags to send and the note, by the source's flags,
        as decided for these traits.
    """

    binary: bool
    permanentFlags: frozenset[str] | None
    flagDecisions: dict[tuple[str, ...], tuple[tuple[str, ...], str | None]] = field(
        default_factory=dict
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
    ) -> None:
        self.name = name
        self._source = source
        self._store = store
        self._progress = progress
        self._openSession = openSession
        self._clock = clock
        self._settings = settings
        self._lifecycle = JobLifecycle(progress)
        self._units: list[WorkUnit] = []
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
            await self._copy()
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
        settings = self._settings
        progress = self._progress
        folders = await self._source.listFolders()
        plans: list[tuple[SourceFolder, list[SourceMessage]]] = []
        total = already = 0
        unreadable: list[str] = []
        readable = []
        for folder in folders:
            try:
                messages = await self._source.listMessages(folder)
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
            readable.append(folder)
            appended = await self._store.appendedKeys(self.name, folder.key)
            pending = pendingMessages(messages, appended)
            total += len(messages)
            already += len(messages) - len(pending)
            plans.append((folder, pending))
        progress.messagesTotal = total
        progress.messagesDone = already
        progress.messagesAlreadyMigrated = already
        progress.foldersTotal = len(folders)
        log.info(
            "Job {job}: {total} messages in {folders} folders, {pending} to copy",
            job=self.name,
            total=total,
            folders=len(folders),
            pending=total - already,
        )
        first = await self._openSession()
        self._sessions.append(first)
        delimiter = await first.hierarchyDelimiter()
        existing = {info.name for info in await first.listMailboxes()}
        mailboxes = {folder.key: destinationMailbox(folder.path, delimiter) for folder in readable}
        missing = mailboxesToCreate([folder.path for folder in readable], existing, delimiter)
        uncreatable = await first.createMailboxes(missing)
        for name in missing:
            if name not in uncreatable:
                log.info("Job {job}: created mailbox {mailbox!r}", job=self.name, mailbox=name)
        for folder, pending in plans:
            mailbox = mailboxes[folder.key]
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
        if not self._units:
            await first.logout()
            self._sessions.remove(first)
        else:
            workers = [Deferred.fromCoroutine(self._work(first))]
            extra = min(settings.connections, len(self._units)) - 1
            for _ in range(extra):
                workers.append(Deferred.fromCoroutine(self._connectAndWork()))
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

    async def _connectAndWork(self) -> None:
        try:
            session = await self._openSession()
        except ImapmigError as e:
            # The job goes on with the connections it has; a server that
            # limits connections per account is common.
            log.warn(
                "Job {job}: extra connection refused, continuing with fewer: {why}",
                job=self.name,
                why=str(e),
            )
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
        destination = _DestinationTraits(
            binary=b"BINARY" in session.capabilities, permanentFlags=None
        )
        while units and not self._stopping:
            inUse = {m for w, m in selected.items() if w != worker}
            unit = units.pop(chooseUnit(units, current, inUse))
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
                # 8-bit octets without NUL travel in a plain literal: RFC
                # 3501 literals are CHAR8, every octet but NUL.
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
