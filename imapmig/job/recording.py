# -*- test-case-name: tests.test_job_recording -*-
"""
Recording what became of each message: the in-flight journal written
before a batch leaves, and the outcomes written in batches afterwards.

Exactly once rests on one rule: a unit of work (a run of up to a few
thousand messages of one folder, as a connection takes it) is journaled (its
mailbox, the mailbox's UIDVALIDITY, a UID floor, each message's key) in its
own transaction before any of it is written to the server, and its journal
entry is deleted only in the transaction that records the last of its
outcomes.  Whatever happens in between (a lost connection, a SIGKILL), the
entry is still there for L{imapmig.job.reconcile} to settle against the
destination before anything is sent again.  Nothing is computed per message
for the journal on the hot path: reconciling reads the source again for
what it needs to recognise a message (its size and first octets as sent).

In a fleet the store's writes are fenced by the job's claim: a write that
fails with L{LeaseLost} (the claim is no longer this daemon's) is not a
store failure but the end of the job here, told to the job
(C{onLeaseLost}), which abandons its run (L{OutcomeRecorder.abandon}:
nothing more is recorded).
"""

from __future__ import annotations

from typing import Callable, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from imapmig.errors import DatabaseRefused, LeaseLost, PermanentError
from imapmig.imap.outgoing import OutgoingMessage
from imapmig.mail.message import SourceMessage, StreamedBody
from imapmig.mail.messagenames import namesOfBody
from imapmig.mail.octets import EIGHT_BIT, NUL, UNKNOWN
from imapmig.progress import JobProgress
from imapmig.state import AppendedRun, FolderKeys, IStateStore, MessageOutcome, withNames
from imapmig.state.outage import OutageLog

log = Logger()

# Once an attempt's last share is taken (OutcomeRecorder.ending), outcomes
# are recorded this fraction of recordEvery at a time (with the default
# 2,000, 200: a full batch's reply).
ENDING_DIVISOR = 10


class JournalTicket:
    """
    One journal entry of this run: how many of its messages still wait for
    their outcome.
    """

    __slots__ = ("entryId", "remaining")

    def __init__(self, entryId: int, remaining: int) -> None:
        self.entryId = entryId
        self.remaining = remaining


class Target:
    """
    Where a unit's messages go: its source folder's key and the
    destination mailbox, and the unit's journal entry.  One per unit,
    shared by its messages.
    """

    __slots__ = ("folderKey", "mailbox", "ticket")

    def __init__(self, folderKey: str, mailbox: str, ticket: JournalTicket | None = None) -> None:
        self.folderKey = folderKey
        self.mailbox = mailbox
        self.ticket = ticket


class SentMessage(OutgoingMessage):
    """
    A message of a job for the pipeline, with what the job needs back when
    its outcome arrives.

    @ivar target: its unit's L{Target}.
    @ivar source: the source's description of it (also its C{origin}).
    @ivar note: what was not carried over exactly, if anything.
    @ivar converted: C{1} if its line endings were converted to CRLF, else
        C{0} (as an L{AppendedRun} records it).
    """

    __slots__ = ("target", "source", "note", "converted")

    def __init__(
        self,
        body: bytes | bytearray | StreamedBody,
        arguments: bytes,
        binary: bool,
        target: Target,
        source: SourceMessage,
        note: str | None,
        converted: int,
    ) -> None:
        # Every slot of OutgoingMessage is set here rather than through its
        # __init__: one call per message on the hot path, not two.
        self.body = body
        self.arguments = arguments
        self.origin = source
        self.mailbox = b""
        self.binary = binary
        self.target = target
        self.source = source
        self.note = note
        self.converted = converted


def appendedColumnsPython(
    messages: Sequence[OutgoingMessage],
) -> tuple[list[str], list[int], list[int], int, int, int] | None:
    """
    For a tagged reply's L{SentMessage}s (a non-empty list) of one target,
    none with a note, their bodies in memory: the columns of their
    L{AppendedRun} (their source keys, their sizes as sent, their
    conversions) and the sums L{OutcomeRecorder.addAppended} takes (the
    octets sent, the conversions, the octets listed); L{None} for any
    other list, which L{PipelineOutcomes} records run by run.

    The reference and the fallback of the C extension's
    L{appendedColumns} (imapmig/job/_sent.c), which takes no bytecode a
    message.
    """
    if not isinstance(messages, list) or not messages:
        return None
    sent: list[SentMessage] = messages
    target = sent[0].target
    for m in sent:
        if (
            type(m) is not SentMessage
            or m.target is not target
            or m.note is not None
            or type(m.source) is not SourceMessage
            or type(m.converted) is not int
            or type(m.source.size) is not int
            or not isinstance(m.body, (bytes, bytearray))
        ):
            return None
    sizes = [len(m.body) for m in sent]
    converted = [m.converted for m in sent]
    listed = sum([m.source.size for m in sent])
    return [m.source.key for m in sent], sizes, converted, sum(sizes), sum(converted), listed


def sourceKeysPython(messages: Sequence[SourceMessage]) -> list[str] | None:
    """
    The keys of C{messages} (a unit's, for its journal entry), a list or
    tuple of L{SourceMessage}s; L{None} if one is of another type.

    The reference and the fallback of the C extension's L{sourceKeys}
    (imapmig/job/_sent.c).
    """
    if not isinstance(messages, (list, tuple)):
        return None
    if any(type(m) is not SourceMessage for m in messages):
        return None
    return [m.key for m in messages]


try:
    from imapmig.job._sent import appendedColumns as appendedColumns, bindSent
    from imapmig.job._sent import sourceKeys as sourceKeys
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    appendedColumns = appendedColumnsPython
    sourceKeys = sourceKeysPython
else:
    bindSent(SentMessage, SourceMessage, UNKNOWN, NUL | EIGHT_BIT)


class OutcomeRecorder:
    """
    Journals units of work before they leave, and buffers outcomes to record them
    one batch per transaction (once C{recordEvery} outcomes or more are
    buffered, a tagged reply's outcomes being added at once, or
    C{recordInterval} seconds after the first unrecorded one), with the
    journal entries they settle; updates the progress counters as each
    outcome arrives.

    @ivar error: why the store could not record, once it could not.
    @ivar appended: messages appended by this run (this recorder).
    @ivar present: messages this run found already in the destination.
    @ivar failedKeys: C{(folderKey, messageKey)} of the messages recorded
        as failed by this run.
    @ivar unnamed: C{(folderKey, messageKey)} of the messages recorded as
        failed by this run without their names (their header was not
        read), for L{imapmig.job.naming} to name.
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
        onFailed: Callable[[MessageOutcome], None] = lambda outcome: None,
        onLeaseLost: Callable[[LeaseLost], None] = lambda error: None,
    ) -> None:
        """
        @param onError: called once if the store fails to record a batch:
            the job must stop.
        @param onFailed: called with each failed outcome as it is noted,
            to log it (L{imapmig.job.joblog.JobLog.messageFailed}).
        @param onLeaseLost: called with the L{LeaseLost} of a journal or
            outcomes write the store's fence refused (the job's claim is
            no longer this daemon's): the job must be abandoned.
        """
        self._jobName = jobName
        self._onError = onError
        self._onFailed = onFailed
        self._onLeaseLost = onLeaseLost
        self.error: str | None = None
        # Set by abandon: nothing more is written, until the next run.
        self._abandoned = False
        self._store = store
        self._progress = progress
        self._clock = clock
        self._outage = OutageLog(
            log, f"Job {jobName}: recording its outcomes", clock.seconds, level=LogLevel.error
        )
        self._recordEvery = recordEvery
        self._recordInterval = recordInterval
        # Once the attempt's last share is taken (ending): outcomes are
        # recorded as soon as this many are buffered.
        self._endingEvery = max(1, recordEvery // ENDING_DIVISOR)
        self._ending = False
        self._buffer: list[MessageOutcome | AppendedRun] = []
        # How many outcomes _buffer holds (an AppendedRun holds several).
        self._buffered = 0
        self._settled: list[int] = []
        self._timer: IDelayedCall | None = None
        self._writing: Deferred[None] | None = None
        self.appended = 0
        self.present = 0
        self.failedKeys: set[tuple[str, str]] = set()
        self.unnamed: list[tuple[str, str]] = []

    def startRun(self) -> None:
        """
        A new run begins: count its outcomes from zero, and forget a store
        failure of an earlier run (a reload may have fixed it).
        """
        self.appended = 0
        self.present = 0
        self.failedKeys = set()
        self.unnamed = []
        self.error = None
        self._abandoned = False

    def startAttempt(self) -> None:
        """
        An attempt begins: its outcomes are recorded C{recordEvery} at a
        time until its last share is taken (L{ending}).
        """
        self._ending = False

    def ending(self) -> Deferred[None]:
        """
        The attempt's last share is taken: what is left to record is that
        share and what the connections still have in flight, whose replies
        the server is still working on.  Record the outcomes buffered so
        far now, and from now on a reply's worth at a time (a tenth of
        C{recordEvery}, L{ENDING_DIVISOR}) rather than C{recordEvery}; then
        let the store move what it has written to its file
        (L{IStateStore.checkpoint}): all this is done while the server
        stores the last batches, and what the job still records after the
        last reply is that reply's outcomes alone.

        @return: fires once recorded and checkpointed; never fails (the
            recording's failure is the job's, as L{flush}'s).
        """
        self._ending = True
        return self.flush().addCallback(lambda ignored: self._store.checkpoint())

    def abandon(self) -> None:
        """
        The job's claim is lost: record nothing more in this run, the
        outcomes not yet recorded dropped with the journal entries they
        settle (the entries stay, for the job's next owner to settle), and
        every journal write refused.
        """
        self._abandoned = True
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None
        self._buffer = []
        self._buffered = 0
        self._settled = []

    def _fenced(self, failure: Failure) -> Failure:
        """
        A write failed: if the store's fence refused it (L{LeaseLost}), the
        job is told.
        """
        if failure.check(LeaseLost):
            assert isinstance(failure.value, LeaseLost)
            self._onLeaseLost(failure.value)
        return failure

    def unsent(self, ticket: JournalTicket) -> None:
        """
        None of the messages of C{ticket}'s unit was sent (the job stopped
        first): its journal entry is settled with the next flush, with no
        outcome.
        """
        if ticket.remaining:
            ticket.remaining = 0
            self._settled.append(ticket.entryId)

    @property
    def settledCount(self) -> int:
        """
        Messages this run gave an outcome: appended, found present, or
        failed.
        """
        return self.appended + self.present + len(self.failedKeys)

    def journal(
        self,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        folderKey: str,
        messages: Sequence[SourceMessage],
    ) -> Deferred[JournalTicket]:
        """
        Journal C{messages} (a unit about to be sent to C{mailbox}) as one
        entry.

        @param uidFloor: every one of them that the server stores gets a
            UID at least this (the mailbox's UIDNEXT as last known).
        @return: fires with the entry's ticket once it is durable (every
            outcome of these messages must then be added with it); fails
            with the store's error, and then none of them may be sent.
        """
        if self._abandoned:
            return fail(LeaseLost("the job's run was abandoned"))
        keys = FolderKeys(folderKey, sourceKeys(messages) or [m.key for m in messages])
        d = self._store.journalBatch(self._jobName, mailbox, uidValidity, uidFloor, keys)
        return d.addCallbacks(JournalTicket, self._fenced, callbackArgs=(len(keys),))

    def add(
        self,
        outcome: MessageOutcome,
        ticket: JournalTicket | None = None,
        octets: int | None = None,
        named: bool = True,
    ) -> None:
        """
        Note one message's outcome; C{ticket} is its journal entry, if it
        was sent.

        @param octets: the message's size in the source, if not
            C{outcome.size}: what it adds to the octets done.
        @param named: whether a failed C{outcome} carries the names read
            from the message's header; if not, it is noted in
            L{unnamed}.
        """
        progress = self._progress
        progress.messagesSettled += 1
        folder = progress.folders.get(outcome.folderKey)
        if outcome.failure is not None:
            progress.messagesFailed += 1
            progress.bytesFailed += outcome.size if octets is None else octets
            self.failedKeys.add((outcome.folderKey, outcome.messageKey))
            if not named:
                self.unnamed.append((outcome.folderKey, outcome.messageKey))
            if folder is not None:
                folder.failed()
            self._onFailed(outcome)
        else:
            listed = outcome.size if octets is None else octets
            progress.messagesDone += 1
            progress.bytesDone += listed
            if folder is not None:
                folder.appended(1, listed, outcome.mailbox)
            if outcome.alreadyPresent:
                progress.messagesAlreadyPresent += 1
                self.present += 1
            else:
                progress.bytesSent += outcome.size
                self.appended += 1
                if outcome.lineEndingsConverted:
                    progress.lineEndingsConverted += 1
                if outcome.note is not None:
                    progress.messagesWithNotes += 1
        self._buffer.append(outcome)
        self._added(1, ticket)

    def addAppended(
        self,
        outcomes: AppendedRun,
        ticket: JournalTicket | None,
        octets: int,
        converted: int,
        sourceOctets: int | None = None,
    ) -> None:
        """
        Note the outcomes of messages appended with nothing to note, in
        order, all of one journal entry (so of one folder and mailbox): as
        L{add} does for each, in one call for the lot (a tagged reply's
        worth, on the hot path), kept as the one L{AppendedRun} they are.

        @param ticket: their journal entry, if they were sent.
        @param octets: the sum of their sizes as sent.
        @param converted: how many of them had their line endings
            converted.
        @param sourceOctets: the sum of their sizes in the source, if not
            C{octets}.
        """
        count = len(outcomes.keys)
        if not count:
            return
        progress = self._progress
        listed = octets if sourceOctets is None else sourceOctets
        progress.messagesDone += count
        progress.messagesSettled += count
        progress.bytesSent += octets
        progress.bytesDone += listed
        progress.lineEndingsConverted += converted
        folder = progress.folders.get(outcomes.folderKey)
        if folder is not None:
            folder.appended(count, listed, outcomes.mailbox)
        self.appended += count
        self._buffer.append(outcomes)
        self._added(count, ticket)

    def _added(self, count: int, ticket: JournalTicket | None) -> None:
        """
        C{count} outcomes of C{ticket}'s entry were just buffered: settle
        the entry if they were its last, and flush now or later.
        """
        if ticket is not None:
            remaining = ticket.remaining
            ticket.remaining = remaining - count
            if remaining > 0 >= ticket.remaining:
                self._settled.append(ticket.entryId)
        buffered = self._buffered = self._buffered + count
        if buffered >= self._recordEvery or (self._ending and buffered >= self._endingEvery):
            self.flush()
        elif self._timer is None:
            self._timer = self._clock.callLater(self._recordInterval, self.flush)

    def flush(self) -> Deferred[None]:
        """
        Record the buffered outcomes, and delete the journal entries they
        settle, now.

        @return: fires when they are recorded.
        """
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None
        if self._abandoned:
            self._buffer, self._settled = [], []
        if not self._buffer and not self._settled:
            return self._writing if self._writing is not None else succeed(None)
        batch, self._buffer = self._buffer, []
        outcomes, self._buffered = self._buffered, 0
        settled, self._settled = self._settled, []
        d = self._store.recordOutcomes(self._jobName, batch, settled=settled)

        def failed(failure: Failure) -> None:
            if failure.check(LeaseLost):
                self._fenced(failure)
                return
            self._outage.failed(
                str(failure.value),
                f"{outcomes} outcomes not recorded",
                refused=failure.check(DatabaseRefused, PermanentError) is not None,
            )
            if self.error is None:
                self.error = (
                    f"cannot record outcomes in the state database: {failure.value}"
                )
                self._onError()

        d.addCallbacks(lambda ignored: self._outage.answered(), failed)
        self._writing = d
        return d


class PipelineOutcomes:
    """
    Turns what a pipeline reports into recorded outcomes.  Each message is
    a L{SentMessage}: a connection moves on to the next folder while the
    replies for the previous one are still arriving.
    """

    __slots__ = ("recorder", "uidFloors")

    def __init__(self, recorder: OutcomeRecorder, uidFloors: dict[str, int]) -> None:
        """
        @param uidFloors: per destination mailbox, a UID below every UID
            the server will give a message appended from now on; raised as
            APPENDUIDs arrive.
        """
        self.recorder = recorder
        self.uidFloors = uidFloors

    def messagesAppended(
        self,
        messages: Sequence[OutgoingMessage],
        uidValidity: int | None,
        uids: Sequence[int] | None,
    ) -> None:
        if not messages:
            # A command whose one message was abandoned half sent.
            return
        if uids:
            top = max(uids) + 1
            mailbox = messages[-1].target.mailbox  # type: ignore[attr-defined]
            if top > self.uidFloors.get(mailbox, 0):
                self.uidFloors[mailbox] = top
        # Nearly always: the messages of one unit, none with a note, told
        # and recorded as columns made by one C call.
        columns = appendedColumns(messages)
        if columns is not None:
            keys, sizes, converted, octets, conversions, listed = columns
            target: Target = messages[0].target  # type: ignore[attr-defined]
            self.recorder.addAppended(
                AppendedRun(
                    target.folderKey, target.mailbox, uidValidity, keys, sizes, uids, converted
                ),
                target.ticket,
                octets,
                conversions,
                listed,
            )
            return
        self._mixed(messages, uidValidity, uids)

    def _mixed(
        self,
        messages: Sequence[OutgoingMessage],
        uidValidity: int | None,
        uids: Sequence[int] | None,
    ) -> None:
        """
        L{messagesAppended} of messages of two units (two journal entries),
        or with notes: each run of one unit is handed over as it ends (or
        before a message with a note), so that outcomes keep their order.
        """
        recorder = self.recorder
        keys: list[str] = []
        sizes: list[int] = []
        runUIDs: list[int] = []
        flags: list[int] = []
        listed = 0
        target: Target | None = None

        def handOver() -> None:
            nonlocal keys, sizes, runUIDs, flags, listed
            if keys:
                assert target is not None
                run = AppendedRun(
                    target.folderKey, target.mailbox, uidValidity,
                    keys, sizes, None if uids is None else runUIDs, flags,
                )  # fmt: skip
                recorder.addAppended(run, target.ticket, sum(sizes), sum(flags), listed)
                keys, sizes, runUIDs, flags, listed = [], [], [], [], 0

        for index, message in enumerate(messages):
            sent: SentMessage = message  # type: ignore[assignment]
            if sent.target is not target:
                handOver()
                target = sent.target
                folderKey = target.folderKey
                mailbox = target.mailbox
            uid = None if uids is None else uids[index]
            size = len(sent.body)
            if sent.note is not None:
                handOver()
                recorder.add(
                    MessageOutcome(
                        folderKey,
                        sent.source.key,
                        mailbox,
                        size,
                        uidValidity,
                        uid,
                        note=sent.note,
                        lineEndingsConverted=bool(sent.converted),
                    ),
                    target.ticket,
                    sent.source.size,
                )
                continue
            source = sent.source
            keys.append(source.key)
            sizes.append(size)
            if uid is not None:
                runUIDs.append(uid)
            flags.append(sent.converted)
            listed += source.size
        handOver()

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        sent: SentMessage = message  # type: ignore[assignment]
        outcome = MessageOutcome(
            sent.target.folderKey,
            sent.source.key,
            sent.target.mailbox,
            len(message.body),
            failure=f"refused by server: {reason}",
        )
        self.recorder.add(withNames(outcome, namesOfBody(message.body)), sent.target.ticket)
