"""
Tests for the admin's holds across a restart of the daemon: a job paused
or cancelled stays so when the daemon is built again on the same state
database (L{imapmig.daemon.service.buildService}, L{imapmig.schedule.jobcontrols}).
"""

from __future__ import annotations

import os

from typing import Sequence

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import Config, parseConfig
from imapmig.errors import ControlRefused, PermanentError
from imapmig.progress import JobState
from imapmig.queue import QueueState
from imapmig.schedule.jobcontrols import JobControls
from imapmig.schedule.scheduler import JobQueueService
from imapmig.daemon.rootservice import MigrationService
from imapmig.daemon.service import buildService
from imapmig.state import CANCELLED, PAUSED, JobHold, Transition
from imapmig.state.sqlite import SQLiteStateStore
from tests.test_controls import ControlledScheduler
from tests.test_schedule_service import jobConfig
from tests.test_service import makeMaildir

ADMIN = "192.0.2.7"


class RestartTests(SynchronousTestCase):
    """
    The daemon built twice on one SQLite state file, with a memory
    reactor: what the admin held in the first stays held in the second.
    """

    def setUp(self) -> None:
        self.answered: dict[int, int] = {}
        self.statePath = os.path.abspath(self.mktemp())
        maildir = makeMaildir(self)
        self.config: Config = parseConfig(
            {
                "state": self.statePath,
                "max_jobs": 1,
                "servers": {
                    "s": {"endpoint": "tcp:mail.example:1143", "starttls": "off", "allow_plaintext": True}
                },
                "jobs": [
                    {
                        "name": name,
                        "source": {"maildir": maildir},
                        "destination": {"server": "s", "user": name, "password": "p"},
                    }
                    for name in ("a", "b", "c")
                ],
            },
            "test.yaml",
        )

    def start(
        self, at: float = 1700000000
    ) -> tuple[MigrationService, MemoryReactorClock, JobControls]:
        """
        Build the daemon on the state file, with a new memory reactor at
        time C{at}, and start it; it is stopped when the test ends.
        """
        reactor = MemoryReactorClock()
        reactor.advance(at)
        service = buildService(self.config, reactor)
        service.startService()

        def stop() -> None:
            if service.running:
                self.stop(service, reactor)

        self.addCleanup(stop)
        (scheduler,) = [s for s in service if isinstance(s, JobQueueService)]
        return service, reactor, scheduler.controls

    def refuseConnections(self, reactor: MemoryReactorClock, count: int | None = None) -> None:
        """
        Refuse the next C{count} connection attempts that C{reactor} has
        not answered yet (L{None}: all), as a server that is down does.
        """
        answered = self.answered.setdefault(id(reactor), 0)
        end = len(reactor.tcpClients) if count is None else answered + count
        for _, _, factory, _, _ in reactor.tcpClients[answered:end]:
            self.answered[id(reactor)] += 1
            factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))  # type: ignore[arg-type]
        reactor.advance(0)

    def stop(self, service: MigrationService, reactor: MemoryReactorClock) -> None:
        """
        Stop the daemon, which closes its state store.
        """
        stopping = service.stopService()
        self.refuseConnections(reactor)
        self.successResultOf(stopping)
        self.assertEqual(reactor.getDelayedCalls(), [])

    def connectedUsers(self, service: MigrationService) -> list[str]:
        """
        The jobs that are claimed (running, or connecting).
        """
        (scheduler,) = [s for s in service if isinstance(s, JobQueueService)]
        return scheduler.runningJobs

    def heldBefore(self) -> None:
        """
        Run the daemon once: pause the running job C{a}, then cancel
        C{b}, running next; then stop it while C{c} runs.
        """
        service, reactor, controls = self.start()
        self.assertEqual(self.connectedUsers(service), ["a"])
        self.assertEqual(self.successResultOf(controls.pause("a", ADMIN)), JobState.PAUSED)
        self.refuseConnections(reactor, 1)
        self.assertEqual(self.connectedUsers(service), ["b"])
        self.assertEqual(self.successResultOf(controls.cancel("b", ADMIN)), JobState.CANCELLED)
        self.refuseConnections(reactor, 1)
        self.assertEqual(self.connectedUsers(service), ["c"])
        self.assertEqual(service.progress.job("b").state, JobState.CANCELLED)
        self.stop(service, reactor)

    def test_heldAfterRestart(self) -> None:
        """
        A job paused and a job cancelled before a restart are never
        claimed after it, and show C{paused} ("paused by the admin") and
        C{cancelled} from the start; the other job runs.
        """
        self.heldBefore()
        with capturedLogs() as events:
            service, reactor, controls = self.start()
        self.assertEqual(self.connectedUsers(service), ["c"])
        a = service.progress.job("a").snapshot()
        b = service.progress.job("b").snapshot()
        self.assertEqual(
            (a["state"], a["waiting_for"], a["paused"]), ("paused", "paused by the admin", True)
        )
        self.assertEqual((b["state"], b["error"]), ("cancelled", "cancelled by the admin"))
        self.assertEqual((controls.hold("a"), controls.hold("b")), (PAUSED, CANCELLED))
        restored = [e for e in events if "kept from before" in e.get("log_format", "")]
        self.assertEqual(
            [(e["paused"], e["cancelled"]) for e in restored], [(1, 1)]
        )
        # The cancelled job stays refused to retry-failed.
        self.failureResultOf(controls.retryFailed("b", ADMIN))
        self.stop(service, reactor)

    def test_restoredByTheAdmin(self) -> None:
        """
        After a restart, the timeline of a job held before it says that
        the admin's hold was kept, by that admin (not by imapmig), and its
        wait is since the admin held it, not since the restart.  Before
        the restart, the running job paused went stopping, then paused:
        never stopped between.
        """
        self.heldBefore()
        service, reactor, controls = self.start(at=1700000600)
        a = service.progress.job("a").snapshot()
        self.assertEqual(
            a["wait"],
            {"kind": "paused", "reason": "paused by the admin", "since": 1700000000.0,
             "until": None, "by": ADMIN},
        )
        self.stop(service, reactor)
        timelines = self.storedTimelines()
        self.assertEqual(
            timelines["a"],
            [
                Transition(1700000000.0, "queued", "connecting", "started", None),
                Transition(1700000000.0, "connecting", "stopping", "paused by the admin", ADMIN),
                Transition(1700000000.0, "stopping", "paused", "paused by the admin", ADMIN),
                Transition(
                    1700000600.0, "queued", "paused",
                    "paused by the admin (kept across the restart)", ADMIN,
                ),
            ],
        )
        self.assertEqual(
            timelines["b"][-2:],
            [
                Transition(1700000000.0, "stopping", "cancelled", "cancelled by the admin", ADMIN),
                Transition(
                    1700000600.0, "queued", "cancelled",
                    "cancelled by the admin (kept across the restart)", ADMIN,
                ),
            ],
        )

    def storedTimelines(self) -> dict[str, list[Transition]]:
        """
        The timelines of jobs C{a} and C{b} in the state file.
        """
        store = SQLiteStateStore(self.statePath, seconds=lambda: 0.0, readOnly=True)
        try:
            return {name: self.successResultOf(store.timeline(name)) for name in "ab"}
        finally:
            store.close()

    def storedHolds(self) -> dict[str, JobHold]:
        """
        The holds in the state file, read as C{imapmig report} reads it,
        beside the daemon.
        """
        store = SQLiteStateStore(self.statePath, seconds=lambda: 0.0, readOnly=True)
        try:
            return self.successResultOf(store.jobHolds())
        finally:
            store.close()

    def test_holdsRecorded(self) -> None:
        """
        Pause and cancel record each job's hold, with who asked and when,
        in the state file before they answer.
        """
        self.heldBefore()
        self.assertEqual(
            self.storedHolds(),
            {
                "a": JobHold(PAUSED, ADMIN, 1700000000.0),
                "b": JobHold(CANCELLED, ADMIN, 1700000000.0),
            },
        )

    def test_resumeAfterRestart(self) -> None:
        """
        Resuming after a restart a job paused before it lifts its hold
        (in the state file too) and queues it: it runs once a job slot is
        free.
        """
        self.heldBefore()
        service, reactor, controls = self.start()
        self.assertEqual(self.successResultOf(controls.resume("a", ADMIN)), JobState.QUEUED)
        self.assertIsNone(controls.hold("a"))
        self.assertEqual(service.progress.job("a").snapshot()["waiting_for"], None)
        self.assertEqual(sorted(self.storedHolds()), ["b"])
        # c holds the one job slot; once it is cancelled, a runs.
        self.assertEqual(self.successResultOf(controls.cancel("c", ADMIN)), JobState.CANCELLED)
        self.refuseConnections(reactor, 1)
        self.assertEqual(self.connectedUsers(service), ["a"])
        self.assertEqual(service.progress.job("a").state, JobState.CONNECTING)
        self.assertEqual(sorted(self.storedHolds()), ["b", "c"])
        self.stop(service, reactor)

    def test_staleHoldIgnored(self) -> None:
        """
        A hold on a job no longer configured is ignored, logged once at
        info, and kept in the store (the job may be configured again).
        """
        store = SQLiteStateStore(self.statePath, seconds=lambda: 5.0)
        self.successResultOf(store.recordJobHolds(["gone"], PAUSED, ADMIN))
        store.close()
        with capturedLogs() as events:
            service, reactor, controls = self.start()
        self.assertEqual(self.connectedUsers(service), ["a"])
        stale = [e for e in events if "no longer configured" in e.get("log_format", "")]
        self.assertEqual([(e["count"], e["jobs"], e["log_level"]) for e in stale], [(1, "gone", LogLevel.info)])
        self.assertIsNone(controls.hold("gone"))
        self.stop(service, reactor)
        self.assertEqual(self.storedHolds(), {"gone": JobHold(PAUSED, ADMIN, 5.0)})


class HoldControlsTests(SynchronousTestCase):
    """
    The controls record holds before they apply, against a scheduler of
    fake jobs and a memory store.
    """

    def scheduler(self, names: str, maxJobs: int = 1) -> ControlledScheduler:
        """
        A started L{ControlledScheduler} over jobs C{names}, stopped when
        the test ends.
        """
        s = ControlledScheduler([jobConfig(name, name) for name in names], maxJobs=maxJobs)
        s.service.startService()

        def stop() -> None:
            if s.service.running:
                s.stop(self)

        self.addCleanup(stop)
        return s

    def failRecording(self, s: ControlledScheduler) -> None:
        """
        Make C{s}'s store fail every hold it is asked to record.
        """

        def refuse(
            jobs: Sequence[str], hold: str | None, by: str | None = None
        ) -> Deferred[None]:
            return fail(PermanentError("state.sqlite: cannot record the admin's hold: disk full"))

        self.patch(s.store, "recordJobHolds", refuse)

    def test_storeFailureChangesNothing(self) -> None:
        """
        When the store cannot record the hold, pause, cancel, resume,
        pause-all and resume-all fail with the store's error, logged, and
        change nothing: the running job runs, the queued one stays queued,
        the paused one stays paused.
        """
        s = self.scheduler("abc")
        self.successResultOf(s.service.controls.pause("c", ADMIN))
        self.failRecording(s)
        with capturedLogs() as events:
            for control in (
                lambda: s.service.controls.pause("a", ADMIN),
                lambda: s.service.controls.cancel("b", ADMIN),
                lambda: s.service.controls.resume("c", ADMIN),
                lambda: s.service.controls.pauseAll(ADMIN),
                lambda: s.service.controls.resumeAll(ADMIN),
            ):
                self.failureResultOf(control(), PermanentError)
        self.assertEqual(
            [s.queue.state(name) for name in "abc"],
            [QueueState.CLAIMED, QueueState.QUEUED, QueueState.PAUSED],
        )
        self.assertFalse(s.built["a"].stopped)
        self.assertEqual(s.state("c"), JobState.PAUSED)
        self.assertEqual(s.state("b"), JobState.QUEUED)
        errors = [e for e in events if e["log_level"] is LogLevel.error]
        self.assertEqual(len(errors), 5)
        self.assertTrue(all("disk full" in e["why"] for e in errors))
        self.assertEqual(
            self.successResultOf(s.store.jobHolds()), {"c": JobHold(PAUSED, ADMIN, 0.0)}
        )

    def test_refusedRecordsNothing(self) -> None:
        """
        A refused control records no hold: cancelling a cancelled job
        leaves its hold as it was, and pausing it records none.
        """
        s = self.scheduler("ab")
        self.successResultOf(s.service.controls.cancel("b", ADMIN))
        self.failureResultOf(s.service.controls.cancel("b", "other"), ControlRefused)
        self.failureResultOf(s.service.controls.pause("b", "other"), ControlRefused)
        self.failureResultOf(s.service.controls.resume("a", "other"), ControlRefused)
        self.assertEqual(
            self.successResultOf(s.store.jobHolds()), {"b": JobHold(CANCELLED, ADMIN, 0.0)}
        )

    def test_pauseAllResumeAll(self) -> None:
        """
        Pause-all records the hold of every job it pauses (running and
        queued, not the ended ones); resume-all lifts them all.
        """
        s = self.scheduler("abcd")
        s.finish("a")
        self.successResultOf(s.service.controls.cancel("c", ADMIN))
        self.assertEqual(self.successResultOf(s.service.controls.pauseAll(ADMIN)), 2)
        self.assertEqual(
            self.successResultOf(s.store.jobHolds()),
            {
                "b": JobHold(PAUSED, ADMIN, 0.0),
                "c": JobHold(CANCELLED, ADMIN, 0.0),
                "d": JobHold(PAUSED, ADMIN, 0.0),
            },
        )
        self.assertEqual(self.successResultOf(s.service.controls.resumeAll("other")), 2)
        self.assertEqual(
            self.successResultOf(s.store.jobHolds()), {"c": JobHold(CANCELLED, ADMIN, 0.0)}
        )

    def test_controlDidNotTake(self) -> None:
        """
        A running job paused that completes before it stops is done, not
        paused: its hold is lifted, as the queue says.
        """
        s = self.scheduler("a")
        # A job that finishes its run rather than stop at once.
        self.patch(s.built["a"], "stop", lambda: None)
        self.successResultOf(s.service.controls.pause("a", ADMIN))
        self.assertEqual(
            self.successResultOf(s.store.jobHolds()), {"a": JobHold(PAUSED, ADMIN, 0.0)}
        )
        s.finish("a", True)
        self.assertEqual(s.queue.state("a"), QueueState.DONE)
        self.assertEqual(self.successResultOf(s.store.jobHolds()), {})
        self.assertIsNone(s.service.controls.hold("a"))

    def test_holdsUnreadable(self) -> None:
        """
        A store that cannot read the holds at start starts no job: the
        error is logged, and the scheduler reports that not every job
        completed.
        """
        s = ControlledScheduler([jobConfig("a", "a")], maxJobs=1)
        s.store.close()
        with capturedLogs() as events:
            s.service.startService()
        self.assertEqual(s.built, {})
        self.assertEqual(s.done, [False])
        errors = [e for e in events if e["log_level"] is LogLevel.error]
        self.assertEqual([e["why"] for e in errors], ["memory: the state store is closed"])
        s.stop(self)
