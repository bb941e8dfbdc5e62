"""
Tests for L{imapmig.job.machine}: a job's one machine, driven through every
state on a L{Clock}, its timeline, and its diagram; and L{imapmig.job.retry}.
"""

from __future__ import annotations

import re
from pathlib import Path

from automat import NoTransition
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import RetryPolicy
from imapmig.job.machine import JobInputs, JobMachine
from imapmig.job.statediagram import DIAGRAM_END, DIAGRAM_START, diagram, transitions, withDiagram
from imapmig.progress import ENDED, JobProgress, JobState, Wait
from imapmig.queue import JobOutcome, QueueState
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.state import Transition
from tests.test_schedule_service import jobConfig


class MachineTests(SynchronousTestCase):
    """
    L{JobMachine}: every state of a job, entered by its inputs alone,
    each move recorded.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.progress = JobProgress("j", self.clock.seconds)
        self.recorded: list[tuple[str, Transition]] = []
        self.machine: JobInputs = JobMachine(
            "j", self.progress, self.clock, lambda job, t: self.recorded.append((job, t))
        )
        self.seen: set[JobState] = set()

    def shows(self, state: JobState) -> None:
        self.assertIs(self.machine.state(), state)
        self.assertIs(self.progress.state, state)
        self.assertEqual(self.progress.snapshot()["state"], state.value)
        self.seen.add(state)

    def moves(self) -> list[tuple[str, str, str, str | None]]:
        return [(t.source, t.target, t.cause, t.by) for job, t in self.recorded]

    def test_done(self) -> None:
        """
        Queued, waiting for a grant, connecting, running, done; every move
        recorded with its time, and a finished job may start again.
        """
        machine = self.machine
        self.shows(JobState.QUEUED)
        machine.waitForGrant("a connection grant")
        self.shows(JobState.WAITING)
        self.assertEqual(
            self.progress.wait, Wait(JobState.WAITING, "a connection grant", 1000.0, None, None)
        )
        self.clock.advance(5)
        machine.start()
        self.shows(JobState.CONNECTING)
        self.assertIsNone(self.progress.snapshot()["wait"])
        machine.connected()
        self.shows(JobState.RUNNING)
        machine.succeed()
        self.shows(JobState.DONE)
        self.assertIsNone(self.progress.error)
        self.assertEqual(
            self.moves(),
            [
                ("queued", "waiting", "a connection grant", None),
                ("waiting", "connecting", "started", None),
                ("connecting", "running", "connected", None),
                ("running", "done", "every message migrated", None),
            ],
        )
        self.assertEqual({job for job, t in self.recorded}, {"j"})
        self.assertEqual([t.time for job, t in self.recorded], [1000.0, 1005.0, 1005.0, 1005.0])
        machine.start()
        self.shows(JobState.CONNECTING)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_doneWithFailures(self) -> None:
        """
        A run that ends with failed messages is done with failures, never
        done; retry-failed queues it again, by whom the timeline says.
        """
        machine = self.machine
        machine.start()
        machine.connected()
        machine.endWithFailures(3)
        self.shows(JobState.DONE_WITH_FAILURES)
        self.assertIn(JobState.DONE_WITH_FAILURES, ENDED)
        machine.requeue("retry-failed", "alice")
        self.shows(JobState.QUEUED)
        self.assertEqual(
            self.moves()[-2:],
            [
                ("running", "done_with_failures", "3 messages failed", None),
                ("done_with_failures", "queued", "retry-failed", "alice"),
            ],
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_failed(self) -> None:
        """
        A failed job shows its reason, which a new start clears.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.fail("boom")
        self.shows(JobState.FAILED)
        self.assertEqual(progress.error, "boom")
        machine.start()
        self.assertEqual((progress.state, progress.error), (JobState.CONNECTING, None))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_backingOff(self) -> None:
        """
        Backing off shows why and until when; its wait fires on the clock,
        then the job connects again.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.connected()
        machine.backOff("connection lost", 4.0)
        self.shows(JobState.BACKING_OFF)
        self.assertEqual(
            progress.snapshot()["wait"],
            {"kind": "backing_off", "reason": "connection lost", "since": 1000.0,
             "until": 1004.0, "by": None},
        )
        self.assertEqual((progress.waitingFor, progress.retryAt), ("connection lost", 1004.0))
        waited = machine.waited()
        self.assertNoResult(waited)
        self.clock.advance(4)
        self.successResultOf(waited)
        machine.retry()
        self.shows(JobState.CONNECTING)
        self.assertIsNone(progress.wait)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pausedByServer(self) -> None:
        """
        A quota hold is paused by the server (not by an admin), with why
        and until when; stopping the daemon meanwhile cancels its wait.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.holdByServer("over quota", 3600)
        self.shows(JobState.PAUSED_BY_SERVER)
        self.assertEqual(
            progress.wait, Wait(JobState.PAUSED_BY_SERVER, "over quota", 1000.0, 4600.0, None)
        )
        waited = machine.waited()
        machine.stop()
        self.shows(JobState.STOPPED)
        self.failureResultOf(waited, CancelledError)
        self.assertEqual(progress.error, "stopped before the end")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_deferred(self) -> None:
        """
        A budget defers the job until a time, without a timer: the
        scheduler starts it again when it is due.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.defer("daily budget: 1 GB", 86400.0)
        self.shows(JobState.DEFERRED)
        self.assertEqual(
            progress.wait, Wait(JobState.DEFERRED, "daily budget: 1 GB", 1000.0, 86400.0, None)
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])
        machine.start()
        self.shows(JobState.CONNECTING)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_waitForBudget(self) -> None:
        """
        A budget used up within a run (no deferring) waits for its renewal
        on the clock, deferred, then connects again; stopping the daemon
        meanwhile cancels the wait.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.waitForBudget("daily budget: 1 GB", 600)
        self.shows(JobState.DEFERRED)
        self.assertEqual(progress.retryAt, 1600.0)
        waited = machine.waited()
        self.clock.advance(600)
        self.successResultOf(waited)
        machine.retry()
        self.shows(JobState.CONNECTING)
        machine.waitForBudget("daily budget: 1 GB", 600)
        waited = machine.waited()
        machine.stop()
        self.shows(JobState.STOPPED)
        self.failureResultOf(waited, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pausedAndResumed(self) -> None:
        """
        An admin's pause says who and when; a running job stops first,
        then, its run over, is paused: two moves, both by who paused it
        (never C{stopped} between); resume queues it again.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.connected()
        machine.pause("alice")
        self.shows(JobState.STOPPING)
        machine.connected()
        machine.pause("alice")
        machine.stop()
        self.shows(JobState.STOPPING)
        self.clock.advance(10)
        machine.stopped()
        self.shows(JobState.PAUSED)
        self.assertEqual(progress.wait, Wait(JobState.PAUSED, "paused by the admin", 1010.0, None, "alice"))
        self.assertIsNone(progress.error)
        self.assertTrue(progress.pausedByAdmin)
        machine.stop()
        self.shows(JobState.PAUSED)
        machine.resume("bob")
        self.shows(JobState.QUEUED)
        self.assertIsNone(progress.wait)
        self.assertEqual(
            self.moves()[-3:],
            [
                ("running", "stopping", "paused by the admin", "alice"),
                ("stopping", "paused", "paused by the admin", "alice"),
                ("paused", "queued", "resumed", "bob"),
            ],
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_resumedWhileStopping(self) -> None:
        """
        A running job paused, then resumed before its run ended, ends
        stopped (to be queued again), not paused.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.pause("alice")
        machine.resume("bob")
        self.shows(JobState.STOPPING)
        self.assertFalse(progress.pausedByAdmin)
        machine.stopped()
        self.shows(JobState.STOPPED)
        self.assertEqual(
            self.moves()[-2:],
            [
                ("connecting", "stopping", "paused by the admin", "alice"),
                ("stopping", "stopped", "stopped", None),
            ],
        )

    def test_pausedWhileTheDaemonStops(self) -> None:
        """
        A job stopping for the daemon's stop, then paused by the admin,
        ends paused; one stopping for a pause, then cancelled, ends
        cancelled, by who cancelled it.
        """
        machine = self.machine
        machine.start()
        machine.stop()
        machine.pause("alice")
        machine.stopped()
        self.shows(JobState.PAUSED)
        self.assertEqual(
            self.moves()[-2:],
            [
                ("connecting", "stopping", "stop", None),
                ("stopping", "paused", "paused by the admin", "alice"),
            ],
        )
        machine.resume("alice")
        machine.start()
        machine.pause("alice")
        machine.cancel("bob")
        machine.pause("alice")
        machine.resume("alice")
        machine.stopped()
        self.shows(JobState.CANCELLED)
        self.assertEqual(self.moves()[-1], ("stopping", "cancelled", "cancelled by the admin", "bob"))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_restoredHolds(self) -> None:
        """
        A hold put back from the state store says who held the job and
        since when (not now, and not imapmig), and that it was kept.
        """
        machine, progress = self.machine, self.progress
        self.clock.advance(50)
        machine.restorePause("192.0.2.7", 900.0, "the restart")
        self.shows(JobState.PAUSED)
        self.assertEqual(
            progress.wait, Wait(JobState.PAUSED, "paused by the admin", 900.0, None, "192.0.2.7")
        )
        self.assertEqual(
            progress.snapshot()["wait"],
            {"kind": "paused", "reason": "paused by the admin", "since": 900.0,
             "until": None, "by": "192.0.2.7"},
        )
        self.assertEqual(
            [(job, t) for job, t in self.recorded],
            [("j", Transition(1050.0, "queued", "paused",
                              "paused by the admin (kept across the restart)", "192.0.2.7"))],
        )
        machine.restorePause("192.0.2.7", 900.0, "the reload")
        machine.restoreCancel("192.0.2.8", "the reload")
        self.shows(JobState.CANCELLED)
        self.assertEqual(progress.error, "cancelled by the admin")
        self.assertEqual(
            self.moves()[-1],
            ("paused", "cancelled", "cancelled by the admin (kept across the reload)", "192.0.2.8"),
        )
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pauseWhileBackingOff(self) -> None:
        """
        Pausing a job that backs off cancels its wait.
        """
        machine = self.machine
        machine.start()
        machine.backOff("connection lost", 60)
        waited = machine.waited()
        machine.pause("alice")
        self.shows(JobState.PAUSED)
        self.failureResultOf(waited, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelled(self) -> None:
        """
        A cancelled job shows why and by whom; a running one stops first.
        """
        machine, progress = self.machine, self.progress
        machine.start()
        machine.cancel("alice")
        self.shows(JobState.STOPPING)
        machine.stopped()
        self.shows(JobState.CANCELLED)
        machine.cancel("alice")
        self.assertEqual(progress.error, "cancelled by the admin")
        self.assertEqual(
            self.moves()[-2:],
            [
                ("connecting", "stopping", "cancelled by the admin", "alice"),
                ("stopping", "cancelled", "cancelled by the admin", "alice"),
            ],
        )
        machine.stop()
        machine.requeue("resumed", "bob")
        self.shows(JobState.QUEUED)
        self.assertIsNone(progress.error)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopWhileWaitingForAGrant(self) -> None:
        """
        A job waiting for a grant when the daemon stops is stopped.
        """
        self.machine.waitForGrant("a job slot")
        self.machine.stop()
        self.shows(JobState.STOPPED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_failWhileBackingOff(self) -> None:
        """
        Failing while waiting cancels the wait and shows the reason.
        """
        self.machine.start()
        self.machine.backOff("connection lost", 60)
        waited = self.machine.waited()
        self.machine.fail("gave up")
        self.shows(JobState.FAILED)
        self.failureResultOf(waited, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_refused(self) -> None:
        """
        Inputs that make no sense in a state are refused, not ignored.
        """
        self.machine.start()
        self.machine.backOff("connection lost", 1)
        self.assertRaises(NoTransition, self.machine.succeed)
        self.assertRaises(NoTransition, self.machine.connected)
        self.assertRaises(NoTransition, self.machine.resume, "alice")
        self.clock.advance(1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_everyState(self) -> None:
        """
        Every L{JobState} is a state of the machine, and the tests above
        enter each.
        """
        for name in dir(self):
            if name.startswith("test_") and name != "test_everyState":
                case = MachineTests(name)
                case.setUp()
                getattr(case, name)()
                self.seen |= case.seen
        self.assertEqual(self.seen, set(JobState))
        reached = {target for source, symbol, target in transitions()}
        self.assertEqual(reached | {JobState.QUEUED}, set(JobState))

    def test_diagram(self) -> None:
        """
        The diagram draws each move of the machine, from its transitions.
        """
        drawn = diagram()
        self.assertTrue(drawn.startswith("stateDiagram-v2\n    [*] --> queued\n"))
        self.assertIn("    running --> done_with_failures: endWithFailures\n", drawn)
        self.assertIn("    paused --> queued: requeue, resume\n", drawn)
        self.assertIn("    stopping --> paused: stopped\n", drawn)
        self.assertIn("    stopping --> cancelled: stopped\n", drawn)
        self.assertNotIn("stopping --> stopping", drawn)


class QueueWriterTests(SynchronousTestCase):
    """
    A job's machine writes the admin's controls it takes into the job
    queue: the queue's held, ended and queued-again states follow from
    its transitions alone.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.queue = InMemoryJobQueue([jobConfig("j", "j"), jobConfig("k", "k")], self.clock.seconds)
        self.machine = JobMachine(
            "j", JobProgress("j", self.clock.seconds), self.clock, queue=self.queue
        )

    def test_queuedJob(self) -> None:
        """
        A queued job paused is paused in the queue (not claimed), resumed
        queued again, cancelled ended there, and resumed queued again.
        """
        self.machine.pause("admin")
        self.assertIs(self.queue.state("j"), QueueState.PAUSED)
        claim = self.queue.claim("me", 0.0, 60.0)
        self.assertEqual(claim.job.name if claim else None, "k")
        self.machine.resume("admin")
        self.assertIs(self.queue.state("j"), QueueState.QUEUED)
        self.machine.cancel("admin")
        self.assertIs(self.queue.state("j"), QueueState.CANCELLED)
        self.machine.resume("admin")
        self.assertIs(self.machine.state(), JobState.QUEUED)
        self.assertIs(self.queue.state("j"), QueueState.QUEUED)

    def test_claimedJob(self) -> None:
        """
        A claimed job's pause is a request on its claim, which its finish
        applies; retry-failed of a failed job queues it again.
        """
        claim = self.queue.claim("me", 0.0, 60.0)
        assert claim is not None
        self.machine.start()
        self.machine.pause("admin")
        self.assertIs(self.machine.state(), JobState.STOPPING)
        self.assertIs(self.queue.state("j"), QueueState.CLAIMED)
        self.queue.finish(self.queue.renew(claim, 60.0), JobOutcome.STOPPED)
        self.machine.stopped()
        self.assertIs(self.machine.state(), JobState.PAUSED)
        self.assertIs(self.queue.state("j"), QueueState.PAUSED)
        self.machine.resume("admin")
        again = self.queue.claim("me", 0.0, 60.0)
        assert again is not None and again.job.name == "j"
        self.machine.start()
        self.machine.fail("broken")
        self.queue.finish(again, JobOutcome.FAILED)
        self.machine.retryFailed("admin")
        self.assertIs(self.machine.state(), JobState.QUEUED)
        self.assertIs(self.queue.state("j"), QueueState.QUEUED)

    def test_heldAlready(self) -> None:
        """
        A machine told of a hold its queue applied already (a claim that
        finished paused or cancelled) moves, and leaves the queue as it is.
        """
        self.queue.pause("j")
        self.machine.pause("admin")
        self.assertIs(self.queue.state("j"), QueueState.PAUSED)
        self.queue.cancel("j")
        self.machine.cancel("admin")
        self.assertIs(self.machine.state(), JobState.CANCELLED)
        self.assertEqual(self.queue.counts().cancelled, 1)


class RetryPolicyTests(SynchronousTestCase):
    """
    L{RetryPolicy.delays}: exponential, capped, with jitter.
    """

    def test_delays(self) -> None:
        """
        1, 2, 4, ... seconds, capped at C{maxDelay}, plus the jitter.
        """
        delays = RetryPolicy(initialDelay=1, maxDelay=10, factor=2).delays(lambda: 0.5)
        self.assertEqual([delays(n) for n in range(6)], [1.5, 2.5, 4.5, 8.5, 10.5, 10.5])


class DocsDiagramTests(SynchronousTestCase):
    """
    The "Job states" diagram of docs/failure-handling.md is the machine's.
    """

    def test_docsDrawTheMachine(self) -> None:
        """
        The mermaid block in docs/failure-handling.md is what L{diagram}
        draws now; when the machine changes, C{python -m
        imapmig.job.statediagram docs/failure-handling.md} draws it again.
        """
        page = (Path(__file__).parent.parent / "docs" / "failure-handling.md").read_text("utf-8")
        self.assertEqual(page, withDiagram(page))
        self.assertIn("```mermaid\n" + diagram() + "```\n", page)

    def test_withDiagram(self) -> None:
        """
        L{withDiagram} replaces what is between the markers, and only that.
        """
        text = f"before\n{DIAGRAM_START}\nold\n{DIAGRAM_END}\nafter\n"
        self.assertEqual(
            withDiagram(text),
            f"before\n{DIAGRAM_START}\n```mermaid\n{diagram()}```\n{DIAGRAM_END}\nafter\n",
        )
        self.assertRaises(ValueError, withDiagram, "no markers")


class OneWriterTests(SynchronousTestCase):
    """
    The machine is the only writer of a job's state.
    """

    def test_noOtherWriter(self) -> None:
        """
        Outside L{imapmig.job.machine} (and the progress model that holds
        the fields), no module of imapmig sets what a job shows of its
        state: its state reader, its wait, its admin pause.
        """
        package = Path(__file__).parent.parent / "imapmig"
        writes = re.compile(r"\.showState\(|\.waitIn\(|\.pausedByAdmin\s*=[^=]")
        allowed = {package / "job" / "machine.py", package / "progress" / "_job.py"}
        found = [
            f"{path.relative_to(package)}:{number}"
            for path in sorted(package.rglob("*.py"))
            if path not in allowed
            for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
            if writes.search(line)
        ]
        self.assertEqual(found, [])

    def test_noOtherQueueWriter(self) -> None:
        """
        Outside L{imapmig.job.machine} (and the queue itself), no module of
        imapmig calls the queue's controls, which change a job's held,
        ended or queued state: the admin's controls are the machine's
        inputs, and its transitions write the queue.  (A scheduler's claim,
        renewal and finish of its own claims, and a reload's add, remove
        and replace, are not controls.)
        """
        package = Path(__file__).parent.parent / "imapmig"
        writes = re.compile(r"queue\w*\.(pause|resume|cancel|requeue|pauseAll|resumeAll)\b", re.I)
        queue = package / "queue"
        allowed = {
            package / "job" / "machine.py",
            queue / "__init__.py",
            queue / "memory.py",
            queue / "postgresql.py",
        }
        found = [
            f"{path.relative_to(package)}:{number}"
            for path in sorted(package.rglob("*.py"))
            if path not in allowed
            for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
            if writes.search(line)
        ]
        self.assertEqual(found, [])
