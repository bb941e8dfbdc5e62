# -*- test-case-name: tests.test_job -*-
"""
One migration job: a source drained into one destination account.

A run is a series of attempts under the job's lifecycle machine
(L{imapmig.job.machine}).  Each attempt connects, settles the in-flight
journal against the destination (L{imapmig.job.reconcile}), lists the
source (L{imapmig.job.listing}), subtracts what the state store records,
prepares the destination (L{imapmig.job.destination}), then lets each
connection take units of work (a run of messages of one folder), SELECT
the folder and feed its APPEND pipeline (L{imapmig.job.copying},
L{imapmig.job.sending}).  Every batch is journaled before it leaves and
its outcomes are recorded in batches (L{imapmig.job.recording}).

A transient failure (a lost connection, a timeout, a busy server) ends the
attempt: the job backs off (exponential, with jitter: L{RetryPolicy};
L{imapmig.job.backoff}) and tries again, and the next attempt's reconciliation finds out what of the
batches in flight arrived.  A permanent failure (credentials refused, TLS
refused, the state database unwritable) fails the job at once.

Under throttles (L{imapmig.throttle}) each unit is reserved in the
accounts' daily budgets before it is journaled (cut to what is left;
when nothing is, the attempt ends once the connections have drained and
the job pauses until the next UTC midnight), each chunk is charged what it
actually read and sent as it is handed to the pipeline, what a unit did not
send is given back (L{imapmig.job.budgets}, L{imapmig.job.workshare}), and
each read chunk waits for the destination's rates before it is handed to
the pipeline.

In a fleet the job's claim can be lost under a run: a write of the state
store's view for the claim (C{forClaim}) fenced out, or the daemon's send
deadline found passed before a write that changes the destination (an
APPEND pipeline's, or the CREATEs, SUBSCRIBEs and UID STOREs of its
preparation), both L{LeaseLost}.  The job is then abandoned, alone (its
machine told C{leaseLost}, the run stopped at once as
L{MigrationJob.abandon} stops it, nothing more recorded or sent), and its
run fails with that L{LeaseLost}: the claim is not its scheduler's to
finish.
"""

from __future__ import annotations

import random
from typing import Any, Awaitable, Callable, Sequence

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from imapmig.errors import (
    ConnectionDropped,
    ImapmigError,
    LeaseLost,
    PermanentError,
    SourceError,
)
from imapmig.mail.fidelity import journalHead
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.job.attempt import AttemptConnections, RunStop, stoppable
from imapmig.job.backoff import RunRetries, asRetryable
from imapmig.job.copying import EarlyCreation, ListedCopy, connectionsWorthOpening
from imapmig.job.joblog import JobLog
from imapmig.job.machine import JobInputs, JobMachine, forget
from imapmig.job.listing import Listed, SourceListing
from imapmig.job.naming import nameFailures
from imapmig.job.preparation import MessagePreparation
from imapmig.job.readahead import (
    IMAP_READ_STEP_BYTES,
    IMAP_READ_STEP_MESSAGES,
    READ_STEP_BYTES,
    readSteps,
)
from imapmig.job.reconcile import reconcileJournal
from imapmig.job.sending import CopyLoop
from imapmig.job.recording import OutcomeRecorder
from imapmig.job.retry import RetryPolicy
from imapmig.job.settings import JobSettings
from imapmig.job.sides import JobSides
from imapmig.job.workshare import SharedUnits
from imapmig.log.logfields import AccountName
from imapmig.mail.message import UnreadableMessage
from imapmig.mail.folders import FolderRules
from imapmig.job.presence import FINGERPRINT
from imapmig.progress import JobProgress, JobState
from imapmig.throttle import Throttle
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource
from imapmig.sources.maildir import MaildirSource
from imapmig.state import IStateStore, JournalEntry, MessageOutcome, Transition
from imapmig.progress.telemetry import ServerTelemetry

__all__ = [
    # Defined in the modules MigrationJob was split into, and still
    # imported from here.
    "IMAP_READ_STEP_BYTES",
    "IMAP_READ_STEP_MESSAGES",
    "READ_STEP_BYTES",
    "JobSettings",
    "MigrationJob",
    "asRetryable",
    "connectionsWorthOpening",
    "readSteps",
]

log = Logger()


def _consume(opening: Deferred[Any], jobName: str) -> None:
    """
    Let a connection still opening end quietly: the attempt no longer
    needs it (L{AttemptConnections.adopt} drops it when it opens).
    """
    opening.addErrback(
        lambda failure: log.debug(
            "Job {job}: a connection no longer needed failed: {why}",
            job=jobName,
            why=str(failure.value),
        )
    )


async def _ready(session: IMAPSession) -> IMAPSession:
    """
    A session already open, as a coroutine (for C{Deferred.fromCoroutine}).
    """
    return session


def _measurer(
    source: IMessageSource, listed: Sequence[Listed]
) -> Callable[[str, Sequence[str]], Awaitable[dict[str, tuple[int, bytes]]]]:
    """
    How the reconciliation measures journaled messages (L{reconcileJournal}):
    read again from C{source} as C{listed}, each readable one's size and
    journal head by key.
    """
    byFolder = {folder.key: (folder, {m.key: m for m in messages}) for folder, messages, _ in listed}

    async def measure(folderKey: str, keys: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        known = byFolder.get(folderKey)
        if known is None:
            return {}
        folder, messages = known
        wanted = [messages[key] for key in keys if key in messages]
        bodies = await source.readBodies(folder, wanted)
        return {
            message.key: (len(body), journalHead(body))
            for message, body in zip(wanted, bodies)
            if not isinstance(body, UnreadableMessage)
        }

    return measure


async def _closeSource(source: IMessageSource) -> None:
    """
    What a source holds for an attempt, released at its end (whatever
    ended it): an IMAP source's connections, the folders a Maildir source
    holds open between read steps.
    """
    if isinstance(source, IMAPSource):
        await source.close()
    elif isinstance(source, MaildirSource):
        source.close()


class MigrationJob:
    """
    Copies one source into one destination account: runs of attempts
    under the job's lifecycle, each listing the source, settling the
    journal and copying what is left (L{ListedCopy}); what ends an attempt
    early is for L{RunRetries} to weigh.
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
        retry: RetryPolicy = RetryPolicy(),
        jitter: Callable[[], float] = random.random,
        throttle: Throttle | None = None,
        sourceThrottle: Throttle | None = None,
        defer: bool = False,
        destination: AccountName | None = None,
        sourceDescription: str = "the source",
        telemetry: ServerTelemetry | None = None,
        record: Callable[[str, Transition], object] = forget,
        machine: JobInputs | None = None,
        sendDeadline: SendDeadline | None = None,
        takeover: float | None = None,
    ) -> None:
        """
        @param rules: which source folders to migrate, and where.
        @param identity: how messages already in the destination are
            recognised (L{imapmig.job.presence}): C{"fingerprint"},
            C{"message-id"} or C{"off"}.
        @param eightBit: a message with 8-bit octets (no NUL) for a
            destination without BINARY: C{"literal"} sends it in an ordinary
            literal, C{"fail"} records it as failed.
        @param retry: how transient failures are retried.
        @param jitter: the backoff's noise, 0 to 1 second.
        @param throttle: the rates and daily upload budget of the
            destination server and account (L{imapmig.throttle}),
            or L{None}.
        @param sourceThrottle: the same of an IMAP source's server and
            account (the download budget; the source itself waits for its
            rates before each FETCH), or L{None}.
        @param defer: when a daily budget pauses the job, end the run
            (L{deferredUntil} says until when) instead of waiting in it:
            the scheduler's job slot and connections go to other jobs
            meanwhile.
        @param destination: the destination account as logs name it
            (its C{server} and C{user} fields, and C{"alice at
            tcp:mail.example.com:143"} in their text); L{None}: unknown.
        @param sourceDescription: the source as logs name it
            (L{imapmig.job.joblog.describeSource}).
        @param telemetry: the destination server's telemetry, given to each
            APPEND pipeline (L{imapmig.progress.telemetry}); L{None}: none.
        @param record: called with every transition of the job's machine
            (the state store's C{recordTransition}: the job's timeline).
        @param machine: the job's machine, which its scheduler and controls
            share (L{imapmig.job.machine.JobMachines}); L{None}: its own,
            recording with C{record}.
        @param sendDeadline: past it the job writes nothing that changes
            the destination (a fleet's daemon's send deadline); or L{None}.
        @param takeover: taken over, the seconds the old owner has sent
            nothing (C{JobClaim.quietFor}, or 0), taken off the quiet period.
        """
        self.name = name
        self._rules = rules
        self._source = source
        self._store = store
        self._progress = progress
        self._openSession = openSession
        self._clock = clock
        self._settings = settings
        self._lifecycle = JobMachine(name, progress, clock, record) if machine is None else machine
        self._throttles = tuple(t for t in (throttle, sourceThrottle) if t is not None)
        # When the last run ended deferred (see defer), until when; whether stopped.
        self.deferredUntil: float | None = None
        self.stopped = False
        sides = JobSides(source, sourceThrottle, throttle)
        # Asked by cancelling the run's Deferred (run), read by every part.
        self._stop = RunStop()
        self._stopTimer: IDelayedCall | None = None
        self._attempt: AttemptConnections | None = None
        # The reconciliation's wait for a quiet destination, cancelled by a
        # stop (the journal then stays as it is, for the next run).
        self._settling: Deferred[None] | None = None
        # Whether the last attempt of this run ended with a connection
        # imapmig gave up (see _attemptOnce and _reconcile).
        self._connectionsEnded = False
        # A takeover's: since when the old owner has sent nothing.
        self._quietSince = None if takeover is None else clock.seconds() - takeover
        # Nothing in the destination when the run started: what the listing
        # finds is what is left to copy (ListedCopy.listed).
        self._nothingRecorded = False
        # Messages recorded as failed by this run: not tried again by its
        # later attempts.
        self._failedThisRun: set[tuple[str, str]] = set()
        # Why this run's claim was found lost (see _loseClaim), if it was.
        self._lost: LeaseLost | None = None
        self._recorder = OutcomeRecorder(
            name,
            store,
            progress,
            clock,
            settings.recordEvery,
            settings.recordInterval,
            onError=self._storeFailed,
            onFailed=lambda outcome: self._log.messageFailed(outcome),
            onLeaseLost=self._loseClaim,
        )
        self._log = JobLog(
            name,
            progress,
            clock,
            lambda: self._recorder.settledCount,
            sourceDescription,
            destination,
        )
        self._retries = RunRetries(
            name, destination, store, progress, clock, self._lifecycle, sides, retry, jitter,
            defer, self._stop,
        )  # fmt: skip
        self._units = SharedUnits(
            settings.connections, settings.batchMessages, self._stop, self._recorder.ending
        )
        preparation = MessagePreparation(self._recorder, eightBit == "fail")
        loop = CopyLoop(
            name, source, settings, progress, self._recorder, preparation, self._units, sides,
            telemetry, clock, sendDeadline, self._loseClaim,
        )  # fmt: skip
        self._copier = ListedCopy(
            name, store, settings, rules, identity, progress, self._lifecycle, preparation,
            self._units, loop, self._open, sendDeadline,
        )  # fmt: skip

    @property
    def progress(self) -> JobProgress:
        """
        This job's live counters.
        """
        return self._progress

    def _requestStop(self) -> None:
        """
        The run's Deferred was cancelled (L{run}): take no new messages.
        """
        self._stop.requested = True
        self._units.clear()
        for throttle in self._throttles:
            throttle.cancelWaits()
        wasActive = self._lifecycle.state() in (
            JobState.CONNECTING,
            JobState.RUNNING,
            JobState.STOPPING,
        )
        self._lifecycle.stop()
        if wasActive and self._stopTimer is None:
            self._stopTimer = self._clock.callLater(
                self._settings.stopTimeout, self._stopTimedOut
            )
        if self._attempt is not None:
            # Nothing more is sent: a connection still opening (waiting for
            # its grant, a greeting, a TLS handshake the server may never
            # answer) is given up now rather than awaited.
            self._attempt.giveUpOpenings()
        if self._settling is not None:
            # Last: the run goes on, to its end, from here.
            self._settling.cancel()

    def _stopTimedOut(self) -> None:
        self._stopTimer = None
        if isinstance(self._source, IMAPSource):
            # Nothing more is read: a source connection the stop still
            # waits for (a server that never greets) is given up too.
            self._source.abort()
        attempt = self._attempt
        if attempt is None:
            return
        if attempt.sessions:
            log.warn(
                "Job {job}: replies still awaited {timeout} s after the stop; dropping"
                " the connections (what was in flight is journaled for the next run)",
                job=self.name,
                timeout=self._settings.stopTimeout,
            )
        # Whatever the attempt still waits for on its connections ends now.
        attempt.end()

    def abandon(self) -> None:
        """
        The job's claim is lost (its machine was told C{leaseLost}): stop
        the run at once, abandoning what is in flight: the connections are
        aborted now, no reply is awaited, nothing more is sent or read
        (the next owner's reconciliation settles the journal).
        """
        self._requestStop()
        self._recorder.abandon()
        if self._stopTimer is not None and self._stopTimer.active():
            self._stopTimer.cancel()
        self._stopTimer = None
        if isinstance(self._source, IMAPSource):
            self._source.abort()
        if self._attempt is not None:
            self._attempt.end()

    def _loseClaim(self, error: LeaseLost) -> None:
        """
        The job's claim is no longer this daemon's (C{error}: a write the
        store's fence refused, or the send deadline found passed before a
        write): its machine is told C{leaseLost}, and the run abandoned;
        it then fails with C{error}.
        """
        if self._lost is not None:
            return
        self._lost = error
        log.error(
            "Job {job}: its claim is no longer this daemon's ({why}); abandoning the run:"
            " nothing more is sent or recorded, and the job's next owner settles what"
            " was in flight",
            job=self.name,
            why=str(error),
        )
        self._lifecycle.leaseLost(str(error))
        self.abandon()

    def _storeFailed(self) -> None:
        """
        The state store could not record outcomes: nothing more may be sent
        (the journal covers what is in flight), so drop the connections.
        """
        self._units.clear()
        if self._attempt is not None:
            self._attempt.end()

    def run(self) -> Deferred[bool]:
        """
        Run the job to its end, connecting again after transient failures.

        Cancel the returned Deferred to stop the run as a stopping daemon
        does: it takes no new messages, and ends once the replies to the
        messages in flight are recorded, or after the settings'
        C{stopTimeout}, when the connections are dropped (what was in
        flight stays journaled).  Destination connections still opening
        are given up at once; an IMAP source's, at C{stopTimeout}.  The
        cancellation reaches none of the run's own waits (an APPEND's
        reply above all): the Deferred fires, with C{False}, only once the
        run has ended, and the job's machine is then C{stopped}.

        @return: fires with C{True} if the run completed (every message
            migrated or recorded as failed), C{False} if it failed (the
            reason is in the progress), was stopped, or was deferred
            (L{deferredUntil}).
        """
        return stoppable(Deferred.fromCoroutine(self._run()), self._requestStop)

    async def _run(self) -> bool:
        self._lifecycle.start()
        self._stop.requested = False
        self._lost = None
        self.deferredUntil = None
        for throttle in self._throttles:
            throttle.reopen()
        self._retries.startRun()
        self._connectionsEnded = False
        self._recorder.startRun()
        self._failedThisRun = self._recorder.failedKeys
        before = await self._recordedBefore()
        self._nothingRecorded = before[0] == 0
        self._log.started(*before)
        try:
            completed = await self._attempts()
        except LeaseLost as e:
            # Fenced out between two attempts (recording the job's outcome
            # or failure): abandoned as within one.
            self._loseClaim(e)
            if self._lifecycle.state() is JobState.STOPPING:
                self._lifecycle.stopped()
            completed = False
        finally:
            self._runEnded()
        if self._lost is not None:
            raise self._lost
        return completed

    async def _attempts(self) -> bool:
        """
        Attempt until the run completes, fails, is stopped or deferred.

        @return: whether it completed.
        """
        while True:
            before = self._recorder.settledCount
            error = await self._retries.budgetUsedUp() or await self._attemptOnce()
            if isinstance(error, LeaseLost):
                self._loseClaim(error)
            if self._stop.requested:
                # A job whose lease was lost while it waited is stopped.
                if self._lifecycle.state() is JobState.STOPPING:
                    self._lifecycle.stopped()
                return False
            if error is None:
                await self._completed()
                return True
            progressed = self._recorder.settledCount > before
            if not await self._retries.afterFailure(error, progressed):
                self.deferredUntil = self._retries.deferredUntil
                return False
            del error  # Not held through the next attempt: its traceback holds this one's listing.

    async def _completed(self) -> None:
        """
        The run copied everything it could: record that the job completed,
        and end it done, or done with the failures of its messages.
        """
        await self._retries.recordOutcome(None)
        if self._progress.messagesFailed:
            self._lifecycle.endWithFailures(self._progress.messagesFailed)
        else:
            self._lifecycle.succeed()

    def _runEnded(self) -> None:
        """
        However the run ended: no stop timer left, and the run's end line.
        """
        if self._stopTimer is not None and self._stopTimer.active():
            self._stopTimer.cancel()
        self._stopTimer = None
        self.stopped = self._stop.requested  # Cancelled, or held by a control.
        self._log.ended(
            self._recorder.appended,
            self._recorder.present,
            self._stop.requested,
            self.deferredUntil,
        )

    async def _recordedBefore(self) -> tuple[int | None, int | None]:
        """
        What the state store records of earlier runs, for the start line:
        messages in the destination and messages failed, or L{None}s if
        it cannot say.
        """
        try:
            return await self._store.summary(self.name)
        except ImapmigError:
            # The attempt meets the same store and says why.
            return None, None

    async def _attemptOnce(self) -> BaseException | None:
        """
        One attempt: connect, reconcile, list, copy.

        @return: what ended it early, or L{None} when it copied everything.
        """
        attempt = self._attempt = AttemptConnections()
        self._units.reset()
        self._recorder.startAttempt()
        error: BaseException | None = None
        try:
            try:
                await self._copy(attempt)
            finally:
                await _closeSource(self._source)
        except ImapmigError as e:
            error = e
        except CancelledError:
            if not self._stop.requested:
                log.failure("Job {job} crashed", job=self.name)
                error = PermanentError("internal error: a wait was cancelled")
            # Otherwise a wait for a throttle ended by the stop: stopped.
        except Exception as e:
            log.failure("Job {job} crashed", job=self.name)
            error = PermanentError(f"internal error: {e!r}")
        attempt.end()
        # A connection imapmig gave up (no reply in time, a protocol
        # error): the server's session may still be storing what it had
        # read, and the next attempt's reconciliation waits for it.  One
        # the server or the network ended (reset, closed) is over there.
        self._connectionsEnded = isinstance(error, ConnectionDropped)
        self._attempt = None
        self._units.reset()
        await self._recorder.flush()
        if self._recorder.error is not None:
            return PermanentError(self._recorder.error)
        return error

    async def _open(self, attempt: AttemptConnections) -> IMAPSession:
        """
        Open a destination connection for C{attempt}.
        """
        return attempt.adopt(await self._openSession())

    async def _copy(self, attempt: AttemptConnections) -> None:
        # The first destination connection logs in while the source is
        # listed: its greeting and login (about 16 ms on a local Dovecot,
        # two round trips or more over a network) overlap the listing.
        # Units still journaled (being sent when the last attempt or run
        # ended) are then settled, before what is left to copy is known.
        opening = Deferred.fromCoroutine(self._open(attempt))
        # Given up (cancelled) if the job stops before it has opened.
        attempt.openings.append(opening)
        # A first run's extra connections log in as the listing shows them
        # worth it, not once it has ended, and its first connection creates
        # the folders' mailboxes meanwhile; a later run's pending work is
        # known only once the records are read (plan).
        fresh = self._nothingRecorded and self._recorder.settledCount == 0
        early = EarlyCreation(self._copier, opening)
        try:
            listing = SourceListing(
                self.name, self._source, self._store, self._rules, self._progress, self._clock,
                self._stop,
            )  # fmt: skip
            listed, unreadable = await listing.listSource(
                opening,
                (lambda f, m: self._copier.listed(attempt, f, m)) if fresh else None,
                early if fresh else None,
            )
            entries = [] if self._stop.requested else await self._store.journal(self.name)
            if entries:
                first = await early.session(opening)
                await self._reconcile(first, entries, listed)
                opening = Deferred.fromCoroutine(_ready(first))
            # A listing cut short by a stop is not the source's content:
            # neither its totals nor its line are reported.
            listings = (
                []
                if self._stop.requested
                else await listing.plan(listed, self._failedThisRun, self._recorder)
            )
        except BaseException:
            _consume(early.pending(opening), self.name)
            raise
        first = await early.session(opening)
        if not self._stop.requested:
            await self._copier.copy(attempt, first, listings, self._retries.overQuota, early.ready)
        if not self._stop.requested:
            # The source is still open: what failed is named to its owner
            # now (a header per message read; none for those appended).
            # After an attempt that ended early, the next one does it.
            await nameFailures(self.name, self._source, self._store, self._recorder, listed)
        if unreadable:
            raise SourceError(
                f"{len(unreadable)} source folder(s) could not be read (the others were"
                f" migrated): {'; '.join(unreadable)}"
            )
        if not self._stop.requested:
            await listing.recordFolderMarks([each.folder for each in listings])

    async def _reconcile(
        self, session: IMAPSession, entries: Sequence[JournalEntry], listed: Sequence[Listed]
    ) -> None:
        """
        Settle the journal's C{entries}, reading their messages again from
        the source as listed; the first message of each mailbox that had
        not arrived earns a strike, and one with too many strikes is
        recorded as failed (it may be what makes the server drop the
        connection).
        """
        measure = _measurer(self._source, listed)
        # A connection of this run given up may still be storing: wait for
        # a quiet destination; after a takeover too, less the quiet passed
        # (docs/fleet-design.md "Takeover").  An earlier run's: look at once.
        waits = [self._settings.journalQuiet]
        if self._quietSince is not None:
            waits.append(max(0.0, self._quietSince + waits[0] - self._clock.seconds()))

        async def settle() -> None:
            if self._stop.requested:
                raise CancelledError()
            self._settling = deferLater(self._clock, waits.pop() if len(waits) > 1 else waits[0])
            try:
                await self._settling
            finally:
                self._settling = None

        quiet = (self._connectionsEnded or len(waits) > 1) and waits[0] > 0
        result = await reconcileJournal(
            self.name, session, self._store, entries, measure, settle if quiet else None
        )
        self._quietSince = None  # The old owner's entries are settled.
        # Messages found in the destination are this run's work: progress.
        self._recorder.appended += result.arrived
        for mailbox, missing in result.missing.items():
            first = missing[0]
            failure = self._retries.strike(first.folderKey, first.messageKey)
            if failure is not None:
                # Logged with its reason as it is recorded (JobLog).
                self._recorder.add(
                    MessageOutcome(
                        first.folderKey, first.messageKey, mailbox, first.size, failure=failure
                    ),
                    named=False,
                )
        await self._recorder.flush()

