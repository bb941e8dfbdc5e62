# -*- test-case-name: tests.test_job,tests.test_job_handover -*-
"""
One destination connection's copy loop.

The connection takes a share of a unit of work at a time
(L{imapmig.job.workshare}; never of a mailbox another connection holds:
one it appends to, or one it left whose APPENDs are not all answered yet,
for which it waits), SELECTs its mailbox behind the APPENDs still in flight,
journals it before a single octet of it leaves (L{imapmig.job.recording}),
reads it from the source in steps, the next read while the one before is
sent (L{imapmig.job.readahead}), waits for the destination's rates,
charges the daily budgets (L{imapmig.job.budgets}) and feeds its APPEND
pipeline; once no unit is left to it it lets the pipeline drain and logs
out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from imapmig.errors import LeaseLost
from imapmig.imap.appendlimit import messageSizeLimit
from imapmig.imap.mailboxname import encodeMailboxName
from imapmig.imap.outgoing import AppendOutcomes, OutgoingMessage, SendDeadline
from imapmig.imap.pipeline import AppendPipeline
from imapmig.imap.session import IMAPSession
from imapmig.job.attempt import AttemptConnections
from imapmig.job.budgets import UnitBudgets
from imapmig.job.destination import TargetMailbox
from imapmig.job.preparation import DestinationTraits, MessagePreparation
from imapmig.job.readahead import (
    IMAP_READ_AHEAD,
    IMAP_READ_STEP_BYTES,
    IMAP_READ_STEP_MESSAGES,
    READ_STEP_BYTES,
    ReadAhead,
    closeBodies,
    readSteps,
)
from imapmig.job.recording import (
    JournalTicket,
    OutcomeRecorder,
    PipelineOutcomes,
    SentMessage,
    Target,
)
from imapmig.job.settings import JobSettings
from imapmig.job.sides import JobSides
from imapmig.job.workshare import SharedUnits
from imapmig.mail.message import MessageBody, SourceMessage, UnreadableMessage
from imapmig.job.units import WorkUnit
from imapmig.progress import JobProgress
from imapmig.throttle import Throttle
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource
from imapmig.progress.telemetry import ServerTelemetry

__all__ = ["CopyLoop"]

# Toward the end of a job of several connections (SharedUnits.ending), its
# batches hold this fraction of the batch at most.
END_BATCH_DIVISOR = 4


def _listed(chunk: Sequence[SourceMessage]) -> int:
    """
    The listed octets of C{chunk}.
    """
    return sum(message.size for message in chunk)


def _readOf(chunk: Sequence[SourceMessage], bodies: Sequence[MessageBody]) -> int:
    """
    The listed octets of the messages of C{chunk} that were read (not the
    unreadable ones).
    """
    return sum(
        message.size
        for message, body in zip(chunk, bodies)
        if not isinstance(body, UnreadableMessage)
    )


def _sentOf(outgoing: Sequence[OutgoingMessage]) -> int:
    """
    The listed octets of the messages of C{outgoing}.
    """
    return sum(m.source.size for m in outgoing if isinstance(m, SentMessage))


class _MailboxAppends:
    """
    The outcomes of one connection's APPEND pipeline, passed on to
    C{outcomes}, and counted by mailbox: once every message the connection
    enqueued for a mailbox it has moved on from has its outcome (stored or
    refused), C{released} is called with that mailbox, which another
    connection may then take (L{SharedUnits.release}).  A message whose
    connection is lost never has one: the connection's leaving releases
    its mailboxes then.

    @ivar unsettled: by mailbox (encoded, as the pipeline stamps it), the
        messages enqueued without an outcome yet.
    @ivar current: the mailbox enqueued to now (encoded).
    @ivar names: the mailboxes' names, by their encoded form.
    """

    __slots__ = ("outcomes", "released", "unsettled", "current", "names")

    def __init__(self, outcomes: AppendOutcomes, released: Callable[[str], None]) -> None:
        self.outcomes = outcomes
        self.released = released
        self.unsettled: dict[bytes, int] = {}
        self.current = b""
        self.names: dict[bytes, str] = {}

    def select(self, mailbox: str) -> None:
        """
        What is enqueued from now on goes to C{mailbox}; the mailbox before
        is released now if nothing sent there awaits its outcome.
        """
        before = self.current
        self.current = encoded = encodeMailboxName(mailbox)
        self.names[encoded] = mailbox
        if before and before != encoded and not self.unsettled.get(before):
            self.released(self.names[before])

    def enqueued(self, count: int) -> None:
        """
        C{count} messages are enqueued for the current mailbox.
        """
        current = self.current
        self.unsettled[current] = self.unsettled.get(current, 0) + count

    def messagesAppended(
        self,
        messages: Sequence[OutgoingMessage],
        uidValidity: int | None,
        uids: Sequence[int] | None,
    ) -> None:
        self.outcomes.messagesAppended(messages, uidValidity, uids)
        if messages:
            # A command's messages are of one mailbox.
            self._settled(messages[0].mailbox, len(messages))

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        self.outcomes.messageRefused(message, reason)
        self._settled(message.mailbox, 1)

    def _settled(self, mailbox: bytes, count: int) -> None:
        """
        C{count} messages of C{mailbox} have their outcome.
        """
        left = self.unsettled[mailbox] - count
        self.unsettled[mailbox] = left
        if not left and mailbox != self.current:
            self.released(self.names[mailbox])


def _firstOf(first: Deferred[None], second: Deferred[None]) -> Deferred[None]:
    """
    Fires (or fails) as the first of C{first} and C{second} does; the
    other's result, later, is dropped (neither is cancelled: they are
    waiters their owners fire).
    """
    either: Deferred[None] = Deferred()

    def fire(result: None | Failure) -> None:
        if not either.called:
            either.callback(result)

    first.addBoth(fire)
    second.addBoth(fire)
    return either


@dataclass
class _Connection:
    """
    One destination connection as it copies.

    @ivar targets: the mailboxes the attempt appends to.
    @ivar floors: by mailbox, a UID at or below the next one (raised by
        each APPENDUID).
    @ivar appends: its pipeline's outcomes, counted by mailbox.
    @ivar worker: the connection, as L{SharedUnits} knows it.
    @ivar budgets: what it holds of the daily budgets, or L{None} when
        the job has none.
    @ivar rated: the destination's throttle when it has rates to wait
        for, else L{None}.
    @ivar steps: the messages of a unit's first step, of each later step,
        and the octets of each step (L{readSteps}).
    @ivar binary: whether the destination offers BINARY.
    @ivar sizeLimit: the largest message it accepts, and why, or L{None}.
    @ivar batch: the messages of its batches, at most (grown with the
        mailbox: L{AppendPipeline.sizeBatchesFor}), or 0 before its first
        unit.
    @ivar current: the mailbox it has selected, or L{None}.
    @ivar target: that mailbox, as the preparation found it.
    @ivar traits: by mailbox, what the destination can store.
    """

    session: IMAPSession
    pipeline: AppendPipeline
    appends: _MailboxAppends
    targets: dict[str, TargetMailbox]
    floors: dict[str, int]
    worker: int
    budgets: UnitBudgets | None
    rated: Throttle | None
    steps: tuple[int, int, int]
    binary: bool
    sizeLimit: tuple[int, str] | None
    batch: int = 0
    current: str | None = None
    target: TargetMailbox = field(default_factory=TargetMailbox)
    traits: dict[str, DestinationTraits] = field(default_factory=dict)


class CopyLoop:
    """
    The copy loop a job runs on each connection of its attempts (L{run}).
    """

    def __init__(
        self,
        job: str,
        source: IMessageSource,
        settings: JobSettings,
        progress: JobProgress,
        recorder: OutcomeRecorder,
        preparation: MessagePreparation,
        units: SharedUnits,
        sides: JobSides,
        telemetry: ServerTelemetry | None,
        clock: IReactorTime,
        deadline: SendDeadline | None = None,
        onLeaseLost: Callable[[LeaseLost], None] = lambda error: None,
    ) -> None:
        """
        @param job: the job's name, for the log.
        @param source: where the messages are read.
        @param progress: the job's counters (its current folder).
        @param recorder: where the journal and the outcomes are recorded.
        @param preparation: turns what the source read into messages for
            the pipeline.
        @param units: the attempt's units of work, shared by its
            connections, and the run's stop.
        @param sides: the job's throttles: the destination's rates, and
            both sides' read steps and daily budgets.
        @param telemetry: the destination server's telemetry, given to each
            APPEND pipeline, or L{None}.
        @param clock: lets the reactor run between two steps.
        @param deadline: past it no pipeline writes (a fleet's daemon's
            send deadline), or L{None}.
        @param onLeaseLost: called with the L{LeaseLost} that ends a
            connection's copy (its pipeline found the deadline passed, or
            a journal write was fenced out), so that the whole job stops
            at once, not this connection alone.
        """
        self._job = job
        self._source = source
        self._settings = settings
        self._progress = progress
        self._recorder = recorder
        self._preparation = preparation
        self._units = units
        self._sides = sides
        self._throttles = tuple(t for t in (sides.destination, sides.source) if t is not None)
        self._budgeted = any(t.budget is not None for t in self._throttles)
        self._telemetry = telemetry
        self._clock = clock
        self._deadline = deadline
        self._onLeaseLost = onLeaseLost
        self._stop = units.stop
        # An IMAP source's reads wait on the network, not the CPU: they are
        # made in larger steps, each read while the step before is sent.
        self._overNetwork = isinstance(source, IMAPSource)
        self._readAhead = IMAP_READ_AHEAD if self._overNetwork else 0

    async def run(
        self,
        attempt: AttemptConnections,
        session: IMAPSession,
        targets: dict[str, TargetMailbox],
        floors: dict[str, int],
    ) -> None:
        """
        Copy units over C{session} until none is left (or the job stops,
        or a daily budget is used up), let its pipeline drain, and log it
        out.

        @param targets: the mailboxes the attempt appends to.
        @param floors: by mailbox, a UID at or below the next one; raised
            by each APPENDUID.
        """
        connection = self._connectionFor(session, targets, floors)
        try:
            if not await self._copyUnits(attempt, connection):
                return
            # No unit left to take: connections still opening (waiting for
            # a grant, perhaps) would only log out.
            attempt.giveUpOpenings()
            await connection.pipeline.drained()
        except LeaseLost as e:
            self._onLeaseLost(e)
            raise
        finally:
            self._units.leave(connection.worker)
            if connection.budgets is not None:
                # A unit ended early (its journal entry failed, the
                # attempt ended): what it held is not sent.
                await connection.budgets.release()
        attempt.release(session)
        await session.logout()

    def _connectionFor(
        self, session: IMAPSession, targets: dict[str, TargetMailbox], floors: dict[str, int]
    ) -> _Connection:
        """
        Set C{session} up to copy: its APPEND pipeline, the steps its units
        are read in, the rates it waits for and the budgets it counts
        against.
        """
        settings = self._settings
        units = self._units
        appends = _MailboxAppends(
            PipelineOutcomes(self._recorder, floors),
            lambda mailbox: units.release(id(appends), mailbox),
        )
        pipeline = session.appendPipeline(
            settings.batchMessages,
            settings.batchBytes,
            settings.windowMessages,
            settings.windowBytes,
            appends,
            telemetry=self._telemetry,
            deadline=self._deadline,
            batchGrowth=settings.batchGrowth,
        )
        # The destination's rates are waited for here; an IMAP source waits
        # for its own before each FETCH.
        destination, source = self._sides.destination, self._sides.source
        rated = destination if destination is not None and destination.rated else None
        budgets = None
        if self._budgeted:
            budgets = UnitBudgets(
                None if destination is None else destination.budget,
                None if source is None else source.budget,
            )
        return _Connection(
            session,
            pipeline,
            appends,
            targets,
            floors,
            id(appends),
            budgets,
            rated,
            self._readSteps(pipeline, pipeline.settings.batchMessages),
            b"BINARY" in session.capabilities,
            messageSizeLimit(session.capabilities, settings.maxMessageBytes),
        )

    def _readSteps(self, pipeline: AppendPipeline, batchMessages: int) -> tuple[int, int, int]:
        """
        The messages of a unit's first step, of each later step, and the
        octets of each step (L{readSteps}), for batches of C{batchMessages}.
        """
        # Read in steps of about one batch, at most READ_STEP_BYTES, and let
        # the reactor run between steps: reading blocks it, and the socket
        # must be kept fed meanwhile.  An IMAP source is read in larger
        # steps (IMAP_READ_STEP_BYTES).
        overNetwork = self._overNetwork
        stepMessages = max(IMAP_READ_STEP_MESSAGES, batchMessages) if overNetwork else batchMessages
        chunkBytes = min(
            pipeline.settings.batchBytes,
            IMAP_READ_STEP_BYTES if overNetwork else READ_STEP_BYTES,
        )
        for throttle in self._throttles:
            stepMessages, chunkBytes = throttle.chunkLimits(stepMessages, chunkBytes)
        return min(batchMessages, stepMessages), stepMessages, chunkBytes

    async def _copyUnits(self, attempt: AttemptConnections, connection: _Connection) -> bool:
        """
        Take units over C{connection} and send them, until none is left,
        the job stops or a daily budget is used up.

        @return: C{False} if the attempt ended meanwhile.
        """
        units = self._units
        while units and not self._stop.requested and units.limitReached is None:
            taken = units.take(connection.worker, connection.current)
            if taken is None:
                if not units.waits(connection.worker):
                    # What is left is other connections' mailboxes: theirs.
                    break
                # A mailbox another connection left, its APPENDs there not
                # all answered: free soon.
                await self._released(connection)
                continue
            unit = taken
            if connection.budgets is not None:
                allowed = await units.withinBudgets(unit, connection.budgets)
                if allowed is None:
                    break
                unit = allowed
            if unit.mailbox != connection.current:
                # SELECT behind the APPENDs still in flight, without
                # waiting for their replies.
                await connection.pipeline.flushed()
                connection.session.selectPipelined(unit.mailbox)
                connection.pipeline.selectMailbox(unit.mailbox)
                connection.appends.select(unit.mailbox)
                connection.current = unit.mailbox
                self._progress.currentFolder = unit.mailbox
                connection.target = connection.targets.get(unit.mailbox) or TargetMailbox()
            # Batches grow with the mailbox, as Dovecot's cost a command does.
            # Smaller, with a narrower window, toward the end of a job of
            # several connections (SharedUnits.ending): each then ends with
            # a few small batches in flight, and the connections together.
            most = max(1, self._settings.batchMessages // END_BATCH_DIVISOR)
            batch = connection.pipeline.sizeBatchesFor(
                connection.target.messages, most if units.ending() else sys.maxsize
            )
            if batch != connection.batch:
                connection.batch = batch
                connection.steps = self._readSteps(connection.pipeline, batch)
            connection.target.messages += len(unit.messages)
            # The unit is journaled before a single octet of it leaves.
            ticket = await self._recorder.journal(
                unit.mailbox,
                connection.target.uidValidity,
                connection.floors.get(unit.mailbox),
                unit.folder.key,
                unit.messages,
            )
            if attempt.over:
                return False
            await self._send(connection, unit, ticket)
        return True

    async def _released(self, connection: _Connection) -> None:
        """
        Wait until what the connections may take changes (a mailbox is
        released: L{SharedUnits.released}), or C{connection}'s own
        pipeline drains or fails (lost, it leaves at once and releases
        what it holds).  Waiting for its drain also sends at once a short
        batch held for more: it has nothing more to add meanwhile.
        """
        released = self._units.released()
        pipeline = connection.pipeline
        if pipeline.idle:
            await released
        else:
            await _firstOf(released, pipeline.drained())

    async def _send(self, connection: _Connection, unit: WorkUnit, ticket: JournalTicket) -> None:
        """
        Read C{unit} from the source, a step at a time, and hand it to the
        connection's pipeline, until it is all handed over or the job
        stops.
        """
        sent = Target(unit.folder.key, unit.mailbox, ticket)
        destination = self._traits(connection, unit.mailbox)
        pipeline, rated, budgets = connection.pipeline, connection.rated, connection.budgets
        enqueued = False
        steps = ReadAhead(
            self._source,
            unit.folder,
            readSteps(unit.messages, *connection.steps),
            ahead=self._readAhead,
            stop=self._stop,
            job=self._job,
        )
        try:
            while not self._stop.requested:
                try:
                    read = await steps.next()
                except CancelledError:
                    if self._stop.requested:
                        # Stopped while the source waited for its throttle.
                        break
                    raise
                if read is None:
                    break
                chunk, bodies = read
                stopped: bool = self._stop.requested
                if rated is not None and not stopped:
                    try:
                        await rated.admit(len(chunk), sum(m.size for m in chunk))
                    except CancelledError:
                        stopped = True
                if stopped:
                    # Stopped while the read was under way, or while waiting
                    # for the throttle: what was read is not sent.
                    closeBodies(bodies)
                    if budgets is not None:
                        budgets.charge(_listed(chunk), _readOf(chunk, bodies), 0)
                    break
                outgoing = self._preparation.prepare(unit, sent, chunk, bodies, destination)
                connection.appends.enqueued(len(outgoing))
                pipeline.enqueue(outgoing)
                firstStep, enqueued = not enqueued, True
                if budgets is not None:
                    budgets.charge(_listed(chunk), _readOf(chunk, bodies), _sentOf(outgoing))
                hungry = pipeline.hungry()
                if hungry.called:
                    await self._yieldToReactor(firstStep)
                await hungry
        finally:
            steps.discard()
            if budgets is not None:
                await budgets.release()
        if not enqueued:
            # Stopped before any of it left: nothing to reconcile.
            self._recorder.unsent(ticket)

    async def _yieldToReactor(self, firstStep: bool) -> None:
        """
        Let the reactor run between two read steps; after a unit's first
        step, until it has polled its sockets once: a call made during the
        reactor's I/O runs at its next timed calls, before it polls again,
        and the step's APPEND, held by the transport behind the SELECT just
        written, would leave only once the next step is read.  A second
        call runs after a poll, which writes it.
        """
        await deferLater(self._clock, 0)
        if firstStep:
            await deferLater(self._clock, 0)

    def _traits(self, connection: _Connection, mailbox: str) -> DestinationTraits:
        """
        What the destination can store in C{mailbox}, the connection's
        selected mailbox, decided once per mailbox and connection.
        """
        traits = connection.traits.get(mailbox)
        if traits is None:
            target = connection.target
            traits = connection.traits[mailbox] = DestinationTraits(
                connection.binary,
                target.permanentFlags,
                target.presence,
                sizeLimit=connection.sizeLimit,
            )
        return traits
