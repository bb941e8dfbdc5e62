"""
Tests for the lease in a job's machine (L{imapmig.job.machine}'s
C{leaseLost}): every row of docs/fleet-design.md "The lease in the job's
machine", on a L{Clock}; the run it abandons (L{MigrationJob.abandon});
and a run that finds its claim lost itself: a write the store's fence
refuses, or its send deadline passed before a write.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import LeaseLost
from imapmig.imap.outgoing import SendDeadline
from imapmig.job import JobSettings, MigrationJob
from imapmig.job.machine import JobInputs, JobMachine
from imapmig.job.statediagram import diagram
from imapmig.progress import JobProgress, JobState
from imapmig.queue import QueueState, Requested
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.state import Transition
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from tests.test_job import (
    JOB,
    USER,
    JobHarness,
    MemoryEndpoint,
    RecordingStateStore,
    appendLines,
    hasResult,
    populate,
)
from tests.test_job_stop import HeldRepliesServer
from tests.test_schedule_service import jobConfig


class LeaseLostTests(SynchronousTestCase):
    """
    C{leaseLost(reason)}: a running job abandons, a waiting one stops at
    once, the others are left as they are.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.progress = JobProgress("j", self.clock.seconds)
        self.recorded: list[Transition] = []
        self.queue = InMemoryJobQueue([jobConfig("j", "j")], self.clock.seconds)
        self.machine: JobInputs = JobMachine(
            "j", self.progress, self.clock, lambda job, t: self.recorded.append(t), self.queue
        )

    def tearDown(self) -> None:
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def moves(self) -> list[tuple[str, str, str]]:
        return [(t.source, t.target, t.cause) for t in self.recorded]

    def test_running(self) -> None:
        """
        A running job whose lease is lost is stopping (abandoning), and
        ends stopped, cause C{lease lost}, once its run has ended.
        """
        machine = self.machine
        machine.start()
        machine.connected()
        machine.leaseLost("send deadline passed")
        self.assertIs(machine.state(), JobState.STOPPING)
        self.assertIs(self.progress.state, JobState.STOPPING)
        # What the run does as it ends changes nothing.
        machine.stop()
        machine.connected()
        machine.leaseLost("again")
        self.assertIs(machine.state(), JobState.STOPPING)
        machine.stopped()
        self.assertIs(machine.state(), JobState.STOPPED)
        self.assertEqual(self.progress.error, "stopped: lease lost")
        self.assertEqual(
            self.moves()[-2:],
            [
                ("running", "stopping", "lease lost: send deadline passed"),
                ("stopping", "stopped", "lease lost"),
            ],
        )

    def test_connectingEndsAnyway(self) -> None:
        """
        A connecting job whose lease is lost ends stopped (C{lease lost})
        however its run ends: completed, with failures or failed, its
        outcome is the next owner's to find.
        """
        ends: list[Callable[[JobInputs], None]] = [
            lambda machine: machine.succeed(),
            lambda machine: machine.endWithFailures(2),
            lambda machine: machine.fail("connection lost"),
            lambda machine: machine.stopped(),
        ]
        for end in ends:
            machine = JobMachine("j", JobProgress("j", self.clock.seconds), self.clock)
            machine.start()
            machine.leaseLost("taken over")
            self.assertIs(machine.state(), JobState.STOPPING)
            end(machine)
            self.assertIs(machine.state(), JobState.STOPPED)

    def test_stopping(self) -> None:
        """
        A job stopping for the daemon's stop whose lease is lost stays
        stopping, and ends stopped by the lease.
        """
        machine = self.machine
        machine.start()
        machine.connected()
        machine.stop()
        machine.leaseLost("send deadline passed")
        self.assertIs(machine.state(), JobState.STOPPING)
        machine.stopped()
        self.assertIs(machine.state(), JobState.STOPPED)
        self.assertEqual(self.moves()[-1], ("stopping", "stopped", "lease lost"))

    def test_stoppingForPause(self) -> None:
        """
        A job stopping for the admin's pause whose lease is lost ends
        stopped, not paused: the pause is in the queue, which applies it
        when the job is released; a pause or cancel meanwhile goes to
        the queue too.
        """
        claim = self.queue.claim("me", 0.0, 60.0)
        assert claim is not None
        machine = self.machine
        machine.start()
        machine.pause("alice")
        machine.leaseLost("send deadline passed")
        self.assertIs(machine.state(), JobState.STOPPING)
        machine.resume("alice")
        self.assertIsNone(self.queue.renew(claim, 60.0).requested)
        machine.cancel("bob")
        self.assertIs(self.queue.renew(claim, 60.0).requested, Requested.CANCEL)
        machine.pause("alice")
        machine.retryFailed("alice")
        machine.stopped()
        self.assertIs(machine.state(), JobState.STOPPED)
        self.assertIs(self.queue.state("j"), QueueState.CLAIMED)

    def test_stoppingForCancel(self) -> None:
        """
        A job stopping for the admin's cancel whose lease is lost ends
        stopped.
        """
        machine = self.machine
        machine.start()
        machine.cancel("alice")
        machine.leaseLost("taken over")
        machine.stopped()
        self.assertIs(machine.state(), JobState.STOPPED)

    def test_waiting(self) -> None:
        """
        A job waiting for its grants whose lease is lost is stopped at once.
        """
        self.machine.waitForGrant("a connection grant")
        self.machine.leaseLost("send deadline passed")
        self.assertIs(self.machine.state(), JobState.STOPPED)
        self.assertIsNone(self.progress.wait)
        self.assertEqual(
            self.moves()[-1], ("waiting", "stopped", "lease lost: send deadline passed")
        )

    def test_timedWaits(self) -> None:
        """
        A job backing off or held by the server whose lease is lost is
        stopped at once: its timer is cancelled, its waiter told so.
        """
        for hold in (
            lambda machine: machine.backOff("connection lost", 30),
            lambda machine: machine.holdByServer("over quota", 300),
        ):
            machine = JobMachine("j", JobProgress("j", self.clock.seconds), self.clock)
            machine.start()
            hold(machine)
            waited = machine.waited()
            machine.leaseLost("send deadline passed")
            self.assertIs(machine.state(), JobState.STOPPED)
            self.failureResultOf(waited, CancelledError)
            self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_notHeld(self) -> None:
        """
        A job queued, paused, deferred, stopped or ended is not held (or
        no longer): C{leaseLost} changes nothing, and records nothing.
        """
        def start(then: Callable[[JobInputs], None]) -> Callable[[JobInputs], None]:
            def started(machine: JobInputs) -> None:
                machine.start()
                then(machine)

            return started

        def waitThenStop(machine: JobInputs) -> None:
            machine.waitForGrant("a job slot")
            machine.stop()

        into: list[Callable[[JobInputs], None]] = [
            lambda machine: None,
            lambda machine: machine.pause("alice"),
            start(lambda machine: machine.defer("budget", 5000.0)),
            waitThenStop,
            start(lambda machine: machine.succeed()),
            start(lambda machine: machine.endWithFailures(1)),
            start(lambda machine: machine.fail("boom")),
            lambda machine: machine.cancel("alice"),
        ]
        seen: set[JobState] = set()
        for put in into:
            recorded: list[Transition] = []
            machine = JobMachine(
                "j", JobProgress("j", self.clock.seconds), self.clock, lambda j, t: recorded.append(t)
            )
            put(machine)
            before, count = machine.state(), len(recorded)
            machine.leaseLost("send deadline passed")
            self.assertIs(machine.state(), before)
            self.assertEqual(len(recorded), count)
            seen.add(before)
        self.assertEqual(
            seen,
            {
                JobState.QUEUED,
                JobState.PAUSED,
                JobState.DEFERRED,
                JobState.STOPPED,
                JobState.DONE,
                JobState.DONE_WITH_FAILURES,
                JobState.FAILED,
                JobState.CANCELLED,
            },
        )

    def test_diagram(self) -> None:
        """
        The diagram draws C{leaseLost}'s moves.
        """
        drawn = diagram()
        self.assertIn("    running --> stopping: cancel, leaseLost, pause, stop\n", drawn)
        self.assertIn("    waiting --> stopped: leaseLost, stop\n", drawn)

    def test_pausedQueuedAgain(self) -> None:
        """
        A job paused here and resumed through another daemon (the fleet's
        queue row queued again) is queued again when claimed here.
        """
        self.machine.pause("alice")
        self.machine.requeue("claimed", None)
        self.assertIs(self.machine.state(), JobState.QUEUED)
        self.assertFalse(self.progress.pausedByAdmin)


class AbandonTests(SynchronousTestCase):
    """
    L{MigrationJob.abandon}: the run of a job whose lease was lost ends at
    once, its replies in flight not awaited.
    """

    def test_abandonWhileRepliesAwaited(self) -> None:
        """
        A run abandoned while the replies to its APPENDs are held ends at
        once, without the stop's timeout: its connection aborted, the
        replies neither awaited nor recorded, the unit sent still
        journaled for the next owner, the job stopped (lease lost), and
        nothing left on the clock.
        """
        h = JobHarness(self)
        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: HeldRepliesServer(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("INBOX"), 20)
        job = h.job(
            JobSettings(connections=1, batchMessages=2, windowMessages=4, stopTimeout=300.0)
        )
        d = h.start(job)
        server = h.endpoint.servers[0]
        assert isinstance(server, HeldRepliesServer)
        self.assertTrue(server.held)
        recorded = self.successResultOf(h.store.summary(JOB))
        job._lifecycle.leaseLost("send deadline passed")
        job.abandon()
        h.settle(lambda: hasResult(d))
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.clock.seconds(), 0)
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.progress.error, "stopped: lease lost")
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), recorded)
        self.assertTrue(self.successResultOf(h.store.journal(JOB)))
        self.assertEqual(h.clock.getDelayedCalls(), [])


class FencedStore(RecordingStateStore):
    """
    A state store whose fence refuses, from the C{after}th call of its
    write C{fenceAt} on, every write with L{LeaseLost}, as a store's view
    for a claim does once the claim is no longer current; each write
    asked is noted in C{writes}, and C{onFence} is called at the first
    refusal.
    """

    def __init__(self, fenceAt: str, after: int = 0) -> None:
        RecordingStateStore.__init__(self)
        self.writes: list[str] = []
        self.refused: int | None = None
        self.onFence: Callable[[], None] = lambda: None
        self._fenceAt = fenceAt
        self._after = after

    def _write(self, name: str, *args: Any, **kwargs: Any) -> Deferred[Any]:
        self.writes.append(name)
        if self.refused is None and name == self._fenceAt:
            if self.writes.count(name) > self._after:
                self.refused = len(self.writes) - 1
                self.onFence()
        if self.refused is not None:
            return fail(LeaseLost(f"job {JOB}: its claim (generation 3) is no longer current"))
        written: Deferred[Any] = getattr(RecordingStateStore, name)(self, *args, **kwargs)
        return written

    def journalBatch(self, *args: Any, **kwargs: Any) -> Deferred[int]:
        return self._write("journalBatch", *args, **kwargs)

    def recordOutcomes(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("recordOutcomes", *args, **kwargs)

    def nameMessages(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("nameMessages", *args, **kwargs)

    def recordJobFailure(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("recordJobFailure", *args, **kwargs)

    def recordFolderMark(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("recordFolderMark", *args, **kwargs)

    def recordFolderFallback(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("recordFolderFallback", *args, **kwargs)

    def forgetFolder(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return self._write("forgetFolder", *args, **kwargs)


class FencedWriteTests(SynchronousTestCase):
    """
    A run whose write the store's fence refuses (L{LeaseLost}: the claim
    is no longer this daemon's) is abandoned, alone: its machine told
    C{leaseLost}, nothing more written or sent, its run failing with the
    L{LeaseLost} (which its scheduler does not finish).
    """

    def fenced(
        self, fenceAt: str, after: int = 0, messages: int = 20
    ) -> tuple[JobHarness, FencedStore]:
        h = JobHarness(self)
        store = h.store = FencedStore(fenceAt, after)
        populate(h.source, h.source.addFolder("INBOX"), messages)
        return h, store

    def settings(self) -> JobSettings:
        return JobSettings(
            connections=1, batchMessages=2, windowMessages=4, unitMessages=4, recordEvery=2
        )

    def assertAbandoned(self, h: JobHarness, store: FencedStore, d: Deferred[bool]) -> None:
        """
        The run failed with the store's L{LeaseLost}, its job stopped
        (lease lost), the refused write its last, nothing left on the
        clock, every connection closed.
        """
        h.waitFor(d)
        self.failureResultOf(d, LeaseLost)
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.progress.error, "stopped: lease lost")
        self.assertIsNotNone(store.refused)
        self.assertEqual(len(store.writes), (store.refused or 0) + 1, store.writes)
        h.endpoint.pump()
        h.finish()

    def test_journalFenced(self) -> None:
        """
        A unit whose journal entry the fence refuses is not sent: no
        APPEND at all, nothing more written.
        """
        h, store = self.fenced("journalBatch")
        d = h.start(h.job(self.settings()))
        self.assertAbandoned(h, store, d)
        self.assertEqual(appendLines(h.endpoint.servers[0]), [])
        self.assertEqual(store.writes, ["journalBatch"])

    def test_laterJournalFenced(self) -> None:
        """
        The second unit's journal entry refused: the first unit's APPENDs
        went, none of the second's, and the first unit's outcomes still
        unrecorded are dropped (its journal entry stays for the next
        owner).
        """
        h, store = self.fenced("journalBatch", after=1)
        d = h.start(h.job(self.settings()))
        self.assertAbandoned(h, store, d)
        self.assertEqual(store.writes.count("journalBatch"), 2)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 4)
        self.assertEqual(len(self.successResultOf(store.journal(JOB))), 1)

    def test_outcomesFenced(self) -> None:
        """
        A batch of outcomes the fence refuses stops the sending at once:
        no APPEND after it (those already written are the next owner's to
        settle), nothing more written.
        """
        h, store = self.fenced("recordOutcomes", messages=40)
        sent: list[int] = []

        def count() -> None:
            server = h.endpoint.servers[0]
            pending = b"".join(h.endpoint.pumps[0].clientIO.stream)
            sent.append(len(appendLines(server)) + pending.count(b" APPEND "))

        store.onFence = count
        d = h.start(h.job(self.settings()))
        self.assertAbandoned(h, store, d)
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), sent[0])
        self.assertLess(len(h.mail.mailbox(USER, "INBOX")), 40)
        self.assertTrue(self.successResultOf(store.journal(JOB)))

    def test_jobOutcomeFenced(self) -> None:
        """
        A run that copied everything, whose record of the job's outcome
        the fence refuses, ends stopped (lease lost), not done: its
        outcome is the next owner's to find.
        """
        h, store = self.fenced("recordJobFailure", messages=4)
        d = h.start(h.job(self.settings()))
        self.assertAbandoned(h, store, d)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 4)


class StalledPastTheDeadlineTests(SynchronousTestCase):
    """
    A run whose send deadline passes while its reactor is stalled sends
    nothing when it wakes: its pipeline finds the deadline passed before
    its next write, and the job is abandoned as by a fenced write.
    """

    def test_noAppendAfterTheStall(self) -> None:
        """
        Replies held past the deadline free the window when they arrive,
        but no APPEND follows them: the connection is aborted, the run
        fails with L{LeaseLost}, the job stopped (lease lost), the unit
        in flight still journaled, nothing left on the clock.
        """
        h = JobHarness(self)
        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: HeldRepliesServer(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("INBOX"), 20)
        deadline = SendDeadline(h.clock.seconds, 45.0)
        job: MigrationJob = h.job(
            JobSettings(connections=1, batchMessages=2, windowMessages=4, stopTimeout=300.0),
            sendDeadline=deadline,
        )
        d = h.start(job)
        server = h.endpoint.servers[0]
        assert isinstance(server, HeldRepliesServer)
        before = len(appendLines(server))
        self.assertTrue(server.held)
        h.clock.rightNow = 50.0
        server.release()
        h.waitFor(d)
        self.failureResultOf(d, LeaseLost)
        h.endpoint.pump()
        self.assertEqual(len(appendLines(server)), before)
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.progress.error, "stopped: lease lost")
        self.assertTrue(self.successResultOf(h.store.journal(JOB)))
        h.finish()


class HeldListServer(FakeIMAPServer):
    """
    A fake server that holds every line it says from its first C{LIST}
    on until L{release}: the reply to the preparation's listing of the
    destination, which a stalled reactor would read late.
    """

    holding = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        FakeIMAPServer.__init__(self, *args, **kwargs)  # type: ignore[arg-type]
        self.held: list[bytes] = []
        self.released = False

    def _list(self, args: list[Any]) -> bytes:
        self.holding = not self.released
        return FakeIMAPServer._list(self, args)

    def sendLine(self, line: bytes) -> None:
        if self.holding:
            self.held.append(line)
        else:
            FakeIMAPServer.sendLine(self, line)

    def release(self) -> None:
        """
        Say the lines held, and hold no more.
        """
        self.holding = False
        self.released = True
        held, self.held = self.held, []
        for line in held:
            FakeIMAPServer.sendLine(self, line)


class DeadlineBeforePreparationTests(SynchronousTestCase):
    """
    The send deadline is checked before every write of a job that changes
    the destination, not only the APPEND pipeline's: a run whose deadline
    passes while its reactor is stalled in the preparation of the
    destination creates and subscribes nothing when it wakes.
    """

    def test_noCreateAfterTheStall(self) -> None:
        """
        The destination's listing answered past the deadline: no CREATE
        or SUBSCRIBE of the folder missing there is written, no APPEND;
        the run fails with L{LeaseLost}, the job stopped (lease lost),
        nothing left on the clock.
        """
        h = JobHarness(self)
        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: HeldListServer(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("Work"), 3)
        job: MigrationJob = h.job(
            JobSettings(connections=1, stopTimeout=300.0),
            sendDeadline=SendDeadline(h.clock.seconds, 45.0),
        )
        d = h.start(job)
        server = h.endpoint.servers[0]
        assert isinstance(server, HeldListServer)
        self.assertTrue(server.held)
        h.clock.rightNow = 50.0
        server.release()
        h.waitFor(d)
        self.assertIn("send deadline", str(self.failureResultOf(d, LeaseLost).value))
        h.endpoint.pump()
        commands = [line.split(b" ")[1] for line in server.received if b" " in line]
        self.assertNotIn(b"CREATE", commands)
        self.assertNotIn(b"SUBSCRIBE", commands)
        self.assertEqual(appendLines(server), [])
        self.assertNotIn("Work", h.mail.mailboxes(USER))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.progress.error, "stopped: lease lost")
        h.finish()

    def test_createBeforeTheDeadline(self) -> None:
        """
        Before the deadline the same run creates the folder and copies.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Work"), 3)
        job: MigrationJob = h.job(
            JobSettings(connections=1), sendDeadline=SendDeadline(h.clock.seconds, 45.0)
        )
        self.assertTrue(h.run(job))
        self.assertEqual(len(h.mail.mailbox(USER, "Work")), 3)
        h.finish()
