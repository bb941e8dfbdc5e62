"""
Tests for L{imapmig.job.recording}: a tagged reply's outcomes recorded in
one call, in order, each once, with the journal entries they settle; a
write the store's fence refuses, and the recorder abandoned.
"""

from __future__ import annotations

from typing import Any, Sequence, cast

from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import LeaseLost, TransientError
from imapmig.job.recording import (
    JournalTicket,
    OutcomeRecorder,
    PipelineOutcomes,
    SentMessage,
    Target,
)
from imapmig.mail.message import SourceMessage
from imapmig.progress import JobProgress
from imapmig.state import MessageOutcome, flatOutcomes
from imapmig.state.memory import MemoryStateStore

JOB = "job"


def journaled(recorder: OutcomeRecorder, test: SynchronousTestCase, *keys: str) -> JournalTicket:
    """
    Journal the messages C{keys} of folder C{"F"} for mailbox C{"Box"}, as
    the job does before sending them.
    """
    messages = [SourceMessage(key, (), None, 10) for key in keys]
    return test.successResultOf(recorder.journal("Box", 7, 1, "F", messages))


def outgoing(target: Target, key: str, body: bytes, note: str | None = None) -> SentMessage:
    """
    A message of C{target}'s unit as the job hands it to the pipeline; its
    line endings were converted when the body is longer than the 10
    octets listed.
    """
    converted = 1 if len(body) != 10 else 0
    return SentMessage(body, b"", False, target, SourceMessage(key, (), None, 10), note, converted)


class PipelineOutcomesTests(SynchronousTestCase):
    """
    L{PipelineOutcomes.messagesAppended} and L{OutcomeRecorder.addAppended}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = MemoryStateStore()
        self.progress = JobProgress(JOB, self.clock.seconds)
        self.recorder = OutcomeRecorder(
            JOB, self.store, self.progress, self.clock, recordEvery=100, recordInterval=5.0
        )
        self.floors: dict[str, int] = {}
        self.outcomes = PipelineOutcomes(self.recorder, self.floors)

    def test_mixedReply(self) -> None:
        """
        One tagged reply whose messages belong to two units (two journal
        entries), one of them with a note: every message is recorded once,
        in order, as what it is; each entry is settled with its last
        outcome, and not before; the progress counters and the mailbox's
        UID floor follow.
        """
        first = journaled(self.recorder, self, "a", "b")
        second = journaled(self.recorder, self, "c", "d")
        one = Target("F", "Box", first)
        two = Target("F", "Box", second)
        messages = [
            outgoing(one, "a", b"0123456789"),
            outgoing(one, "b", b"01234567890", note="flag 'x' dropped"),
            outgoing(two, "c", b"0123456789"),
        ]

        self.outcomes.messagesAppended(messages, 7, [20, 21, 22])

        self.assertEqual(first.remaining, 0)
        self.assertEqual(second.remaining, 1)
        self.assertEqual(self.progress.messagesDone, 3)
        # Sent as 31 octets (one converted to CRLF), listed as 10 each.
        self.assertEqual((self.progress.bytesSent, self.progress.bytesDone), (31, 30))
        self.assertEqual(self.progress.lineEndingsConverted, 1)
        self.assertEqual(self.progress.messagesWithNotes, 1)
        self.assertEqual(self.recorder.appended, 3)
        self.assertEqual(self.floors, {"Box": 23})
        self.assertEqual(self.clock.getDelayedCalls()[0].getTime(), 5.0)

        self.successResultOf(self.recorder.flush())
        self.assertEqual(
            self.successResultOf(self.store.destinationMap(JOB, "F")),
            {
                "a": MessageOutcome("F", "a", "Box", 10, 7, 20),
                "b": MessageOutcome(
                    "F", "b", "Box", 11, 7, 21, note="flag 'x' dropped", lineEndingsConverted=True
                ),
                "c": MessageOutcome("F", "c", "Box", 10, 7, 22),
            },
        )
        entries = self.successResultOf(self.store.journal(JOB))
        self.assertEqual([[m.messageKey for m in e.messages] for e in entries], [["c", "d"]])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_oneUnitReply(self) -> None:
        """
        A tagged reply whose messages are all of one unit, none with a
        note (the common case, recorded without a step per message):
        each is recorded with its own key, size, UID and conversion, the
        counters and the UID floor follow, and the entry is settled with
        its last outcome.
        """
        ticket = journaled(self.recorder, self, "a", "b", "c")
        target = Target("F", "Box", ticket)
        messages = [
            outgoing(target, "a", b"0123456789"),
            outgoing(target, "b", b"01234567890"),
        ]

        self.outcomes.messagesAppended(messages, 7, [30, 29])

        self.assertEqual(ticket.remaining, 1)
        self.assertEqual((self.progress.bytesSent, self.progress.bytesDone), (21, 20))
        self.assertEqual(self.progress.lineEndingsConverted, 1)
        self.assertEqual(self.progress.messagesWithNotes, 0)
        self.assertEqual(self.floors, {"Box": 31})
        self.outcomes.messagesAppended([outgoing(target, "c", b"0123456789")], None, None)
        self.assertEqual(ticket.remaining, 0)
        self.assertEqual(self.recorder.appended, 3)

        self.successResultOf(self.recorder.flush())
        self.assertEqual(
            self.successResultOf(self.store.destinationMap(JOB, "F")),
            {
                "a": MessageOutcome("F", "a", "Box", 10, 7, 30),
                "b": MessageOutcome("F", "b", "Box", 11, 7, 29, lineEndingsConverted=True),
                "c": MessageOutcome("F", "c", "Box", 10),
            },
        )
        self.assertEqual(self.successResultOf(self.store.journal(JOB)), [])

    def test_emptyCommand(self) -> None:
        """
        The reply to a command left with no message (its one message was
        abandoned half sent) records nothing.
        """
        self.outcomes.messagesAppended([], None, None)
        self.assertEqual(self.recorder.appended, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_orderKept(self) -> None:
        """
        Outcomes added one by one (a refusal) and a reply's worth at once
        are recorded in the order they arrived: a later outcome of the same
        message wins.  Each journal entry is settled by its own last
        outcome.
        """
        refused = Target("F", "Box", journaled(self.recorder, self, "a"))
        self.outcomes.messageRefused(outgoing(refused, "a", b"0123456789"), "NO [LIMIT] too big")
        target = Target("F", "Box", journaled(self.recorder, self, "a", "b"))
        self.outcomes.messagesAppended(
            [outgoing(target, "a", b"0123456789"), outgoing(target, "b", b"0123456789")], None, None
        )

        self.successResultOf(self.recorder.flush())
        self.assertEqual(self.successResultOf(self.store.failures(JOB)), [])
        self.assertEqual(
            self.successResultOf(self.store.destinationMap(JOB, "F")),
            {
                "a": MessageOutcome("F", "a", "Box", 10),
                "b": MessageOutcome("F", "b", "Box", 10),
            },
        )
        self.assertEqual(self.floors, {})
        self.assertEqual(self.successResultOf(self.store.journal(JOB)), [])

    def test_recordedOnce(self) -> None:
        """
        Once flushed, a reply's outcomes are not written again: a second
        flush writes nothing, and the threshold counts buffered outcomes
        only.
        """
        self.recorder = OutcomeRecorder(
            JOB, self.store, self.progress, self.clock, recordEvery=2, recordInterval=5.0
        )
        self.outcomes = PipelineOutcomes(self.recorder, self.floors)
        ticket = journaled(self.recorder, self, "a", "b", "c")
        target = Target("F", "Box", ticket)
        written: list[int] = []
        record = self.store.recordOutcomes

        def counting(job, outcomes, settled=()):  # type: ignore[no-untyped-def]
            written.append(len(flatOutcomes(outcomes)))
            return record(job, outcomes, settled)

        self.store.recordOutcomes = counting  # type: ignore[method-assign]
        self.outcomes.messagesAppended(
            [outgoing(target, "a", b"0123456789"), outgoing(target, "b", b"0123456789")], 7, [1, 2]
        )
        self.assertEqual(written, [2])
        self.successResultOf(self.recorder.flush())
        self.assertEqual(written, [2])
        self.outcomes.messagesAppended([outgoing(target, "c", b"0123456789")], 7, [3])
        self.successResultOf(self.recorder.flush())
        self.assertEqual(written, [2, 1])
        self.assertEqual(self.successResultOf(self.store.summary(JOB)), (3, 0))
        self.assertEqual(self.successResultOf(self.store.journal(JOB)), [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_ending(self) -> None:
        """
        Once the attempt's last share is taken (L{OutcomeRecorder.ending}),
        what is buffered is recorded at once and the store checkpointed;
        from then on outcomes are recorded once a tenth of C{recordEvery}
        is buffered, until the next attempt starts
        (L{OutcomeRecorder.startAttempt}).
        """
        self.recorder = OutcomeRecorder(
            JOB, self.store, self.progress, self.clock, recordEvery=20, recordInterval=5.0
        )
        self.outcomes = PipelineOutcomes(self.recorder, self.floors)
        keys = [str(n) for n in range(9)]
        ticket = journaled(self.recorder, self, *keys)
        target = Target("F", "Box", ticket)
        written: list[int] = []
        checkpoints: list[None] = []
        record, checkpoint = self.store.recordOutcomes, self.store.checkpoint

        def counting(job, outcomes, settled=()):  # type: ignore[no-untyped-def]
            written.append(len(flatOutcomes(outcomes)))
            return record(job, outcomes, settled)

        def counted() -> Deferred[None]:
            checkpoints.append(None)
            return checkpoint()

        self.store.recordOutcomes = counting  # type: ignore[method-assign]
        self.store.checkpoint = counted  # type: ignore[method-assign]

        def reply(*sent: str) -> None:
            self.outcomes.messagesAppended(
                [outgoing(target, key, b"0123456789") for key in sent], 7, [1] * len(sent)
            )

        reply("0")
        self.assertEqual((written, checkpoints), ([], []))
        self.assertIsNone(self.successResultOf(self.recorder.ending()))
        self.assertEqual((written, checkpoints), ([1], [None]))
        # A tenth of recordEvery: 2.
        reply("1")
        self.assertEqual(written, [1])
        reply("2", "3")
        self.assertEqual(written, [1, 3])
        reply("4", "5")
        self.assertEqual(written, [1, 3, 2])
        self.recorder.startAttempt()
        reply("6", "7")
        self.assertEqual(written, [1, 3, 2])
        reply("8")
        self.successResultOf(self.recorder.flush())
        self.assertEqual(written, [1, 3, 2, 3])
        self.assertEqual(self.successResultOf(self.store.summary(JOB)), (9, 0))
        self.assertEqual(self.successResultOf(self.store.journal(JOB)), [])

    def test_stoppedBetweenBatches(self) -> None:
        """
        A process that stops after one batch of a unit's outcomes was
        recorded and before the next leaves that unit's journal entry in
        place, holding every message of the unit, for reconciling: only
        the last outcome of an entry settles it.
        """
        self.recorder = OutcomeRecorder(
            JOB, self.store, self.progress, self.clock, recordEvery=2, recordInterval=5.0
        )
        self.outcomes = PipelineOutcomes(self.recorder, self.floors)
        ticket = journaled(self.recorder, self, "a", "b", "c")
        target = Target("F", "Box", ticket)
        self.outcomes.messagesAppended(
            [outgoing(target, "a", b"0123456789"), outgoing(target, "b", b"0123456789")], 7, [1, 2]
        )

        self.assertEqual(self.successResultOf(self.store.appendedKeys(JOB, "F")), {"a", "b"})
        entries = self.successResultOf(self.store.journal(JOB))
        self.assertEqual([[m.messageKey for m in e.messages] for e in entries], [["a", "b", "c"]])
        self.assertEqual(self.clock.getDelayedCalls(), [])


class FencedStore(MemoryStateStore):
    """
    A store whose fence refuses the outcomes' writes once C{fenced}.
    """

    fenced = False
    recorded = 0

    def recordOutcomes(
        self, job: str, outcomes: Sequence[Any], settled: Sequence[int] = ()
    ) -> Deferred[None]:
        self.recorded += 1
        if self.fenced:
            return fail(LeaseLost("the claim is no longer current"))
        return MemoryStateStore.recordOutcomes(self, job, outcomes, settled)


class FencedRecordingTests(SynchronousTestCase):
    """
    A write refused by the store's fence is told to the job
    (C{onLeaseLost}), not taken for a store failure; abandoned, the
    recorder records nothing more.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = FencedStore()
        self.progress = JobProgress(JOB, self.clock.seconds)
        self.lost: list[LeaseLost] = []
        self.errors = 0

        def onError() -> None:
            self.errors += 1

        self.recorder = OutcomeRecorder(
            JOB, self.store, self.progress, self.clock, recordEvery=100, recordInterval=5.0,
            onError=onError, onLeaseLost=self.lost.append,
        )  # fmt: skip

    def tearDown(self) -> None:
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_outcomesFenced(self) -> None:
        """
        Outcomes the fence refuses: the job is told the L{LeaseLost}; the
        recorder has no store error.
        """
        ticket = journaled(self.recorder, self, "a")
        self.recorder.add(MessageOutcome("F", "a", "Box", 10, 7, 20), ticket)
        self.store.fenced = True
        self.successResultOf(self.recorder.flush())
        self.assertEqual(len(self.lost), 1)
        self.assertEqual((self.errors, self.recorder.error), (0, None))

    def test_journalFenced(self) -> None:
        """
        A journal entry the fence refuses fails with the L{LeaseLost}, and
        the job is told.
        """

        def refused(*args: Any) -> Deferred[int]:
            return fail(LeaseLost("not current"))

        self.store.journalBatch = refused  # type: ignore[method-assign,assignment]
        messages = [SourceMessage("a", (), None, 10)]
        self.failureResultOf(self.recorder.journal("Box", 7, 1, "F", messages), LeaseLost)
        self.assertEqual(len(self.lost), 1)

    def test_abandoned(self) -> None:
        """
        Abandoned, the recorder drops what it had not recorded (its
        timer too), writes no outcome and refuses every journal entry,
        until the next run.
        """
        ticket = journaled(self.recorder, self, "a")
        self.recorder.add(MessageOutcome("F", "a", "Box", 10, 7, 20), ticket)
        self.recorder.abandon()
        self.successResultOf(self.recorder.flush())
        self.assertEqual(self.store.recorded, 0)
        messages = [SourceMessage("b", (), None, 10)]
        self.failureResultOf(self.recorder.journal("Box", 7, 1, "F", messages), LeaseLost)
        self.assertEqual(len(self.successResultOf(self.store.journal(JOB))), 1)
        self.recorder.startRun()
        journaled(self.recorder, self, "b")


class OutageRecordingTests(SynchronousTestCase):
    """
    A store that cannot be reached while a job records its outcomes.
    """

    def test_outageLoggedOnce(self) -> None:
        """
        Ten flushes failing in 20 s (the store unreachable) are one error
        line, naming the error; the flush that succeeds then says how long
        the store was away (found from outside: C{Could not record N
        outcomes} about ten times per job).
        """
        events: list[LogEvent] = []
        globalLogPublisher.addObserver(cast(ILogObserver, events.append))
        self.addCleanup(globalLogPublisher.removeObserver, cast(ILogObserver, events.append))
        clock = Clock()
        store = FencedStore()
        recorder = OutcomeRecorder(
            JOB, store, JobProgress(JOB, clock.seconds), clock, recordEvery=100, recordInterval=5.0
        )
        recordOutcomes = store.recordOutcomes
        store.recordOutcomes = (  # type: ignore[method-assign]
            lambda *args, **kwargs: fail(TransientError("db: connection refused"))
        )
        ticket = journaled(recorder, self, *[str(n) for n in range(11)])
        for n in range(10):
            recorder.add(MessageOutcome("F", str(n), "Box", 10, 7, n + 1), ticket)
            self.successResultOf(recorder.flush())
            clock.advance(2)
        store.recordOutcomes = recordOutcomes  # type: ignore[method-assign]
        recorder.add(MessageOutcome("F", "10", "Box", 10, 7, 11), ticket)
        self.successResultOf(recorder.flush())
        said = [(e["log_level"], formatEvent(e)) for e in events if e.get("log_namespace") == "imapmig.job.recording"]
        self.assertEqual(len(said), 2, said)
        self.assertEqual(said[0][0], LogLevel.error)
        self.assertIn("cannot be reached (db: connection refused)", said[0][1])
        self.assertIn("answers again after 20.0 s (10 attempts failed)", said[1][1])


class AppendedColumnsTests(SynchronousTestCase):
    """
    L{imapmig.job.recording.appendedColumns} (the C extension's, where
    built) and its Python twin L{appendedColumnsPython} give the same
    columns and sums, or both L{None}.
    """

    def both(self, messages: Sequence[object]) -> object:
        """
        Both on C{messages}, which must agree (in value and in type).
        """
        from imapmig.job import recording

        made = recording.appendedColumns(messages)
        twin = recording.appendedColumnsPython(messages)  # type: ignore[arg-type]
        self.assertEqual(made, twin)
        self.assertEqual(repr(made), repr(twin))
        return made

    def test_oneTarget(self) -> None:
        """
        Messages of one target without a note: their keys, sizes as sent
        and conversions, the octets sent, the conversions and the octets
        listed.
        """
        target = Target("F", "Box")
        messages = [
            SentMessage(b"abc", b"", False, target, SourceMessage("k1", (), None, 2), None, 1),
            SentMessage(
                bytearray(b"de"), b"", True, target, SourceMessage("k2", (), None, 2), None, 0
            ),
            SentMessage(b"", b"", False, target, SourceMessage("k3", (), None, 0), None, 0),
        ]
        self.assertEqual(
            self.both(messages), (["k1", "k2", "k3"], [3, 2, 0], [1, 0, 0], 5, 1, 4)
        )

    def test_other(self) -> None:
        """
        An empty list, a tuple, two targets, a note, a body not in memory,
        and anything not a L{SentMessage}: L{None}.
        """
        target = Target("F", "Box")
        source = SourceMessage("k", (), None, 1)
        plain = SentMessage(b"a", b"", False, target, source, None, 0)
        other = SentMessage(b"a", b"", False, Target("G", "Box"), source, None, 0)
        noted = SentMessage(b"a", b"", False, target, source, "a note", 0)
        streamed = SentMessage(b"a", b"", False, target, source, None, 0)
        streamed.body = object()  # type: ignore[assignment]
        cases: list[Sequence[object]] = [[], (plain,), [plain, other], [plain, noted]]
        cases += [[streamed], [plain, object()]]
        for messages in cases:
            self.assertIsNone(self.both(messages), messages)

    def test_sourceKeys(self) -> None:
        """
        L{imapmig.job.recording.sourceKeys} (the C extension's, where
        built) and its twin L{sourceKeysPython}: the keys of a list or
        tuple of L{SourceMessage}s, L{None} for anything else.
        """
        from imapmig.job import recording

        messages = [SourceMessage("k1", (), None, 1), SourceMessage("k2", ("\\Seen",), None, 2)]
        cases: list[object] = [messages, tuple(messages), []]
        cases += [[messages[0], object()], iter(messages)]
        for function in {recording.sourceKeys, recording.sourceKeysPython}:
            self.assertEqual(
                [function(case) for case in cases],  # type: ignore[arg-type]
                [["k1", "k2"], ["k1", "k2"], [], None, None],
            )
