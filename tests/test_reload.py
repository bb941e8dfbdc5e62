# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.daemon.reload}: the plan of a reload (L{planReload}), its
application to a running scheduler (L{applyReload}), the reloader
(L{ConfigReloader}: invalid configurations, coalesced requests,
observers), the daemon's L{MigrationService.reloadFrom} and the C{SIGHUP}
handler.
"""

from __future__ import annotations

import builtins
import os
import re
import signal
from typing import Any, Callable, Sequence, cast

from attrs import evolve
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import ILogObserver, LogEvent, LogLevel, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from imapmig.config import loadConfig
from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.config.model import (
    Config,
    FleetConfig,
    JobConfig,
    NotifyConfig,
    PostgreSQLState,
    SQLiteState,
    StatusConfig,
)
from imapmig.errors import SHOWN_PROBLEMS, ConfigError
from imapmig.mail.folders import FolderRules
from imapmig.progress import JobState, Wait
from imapmig.daemon.reload import (
    ConfigReloader,
    ReloadTarget,
    applyReload,
    describeReload,
)
from imapmig.daemon.reloadapply import ReloadApplied
from imapmig.daemon.reloadplan import ReloadPlan, keptForRestart, planReload
from imapmig.errors import JobListStale
from imapmig.queue import ListChange, QueueState
from imapmig.access.secrets import Secret
from imapmig.state import CANCELLED, PAUSED, JobHold
from imapmig.daemon.reload import loadInThread
from imapmig.daemon.service import buildService
from imapmig.state.memory import MemoryStateStore
from imapmig.daemon.tap import installReloadSignal
from tests.support import writePasswordFile
from tests.test_schedule_service import Scheduler, jobConfig, server
from tests.test_service import makeMaildir


def configOf(
    jobs: Sequence[JobConfig],
    maxJobs: int = 1,
    limits: ServerLimits = ServerLimits(),
    **settings: Any,
) -> Config:
    """
    A configuration of C{jobs}, all on server C{s} with C{limits}.
    """
    withLimits = evolve(server("s"), limits=limits)
    return Config(
        path="/etc/imapmig.yaml",
        state=SQLiteState("/var/lib/imapmig/state.sqlite"),
        status=settings.pop("status", None),
        servers=(withLimits,),
        jobs=tuple(
            evolve(job, destination=evolve(job.destination, server=withLimits)) for job in jobs
        ),
        maxJobs=maxJobs,
        **settings,
    )


def capture(testCase: SynchronousTestCase) -> list[LogEvent]:
    """
    Collect the log events from now to the end of the test.
    """
    events: list[LogEvent] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    testCase.addCleanup(globalLogPublisher.removeObserver, observer)
    return events


def texts(events: list[LogEvent], level: LogLevel | None = None) -> list[str]:
    from twisted.logger import formatEvent

    return [
        formatEvent(event)
        for event in events
        if level is None or event.get("log_level") is level
    ]


class PlanTests(SynchronousTestCase):
    """
    L{planReload} compares two configurations, purely.
    """

    def test_jobs(self) -> None:
        """
        Jobs only in the new file are added (in its order), jobs only in the
        old one removed, and jobs in both whose configuration differs in any
        way changed; a job only moved in the file has not changed.
        """
        a, b, c = jobConfig("a", "a"), jobConfig("b", "b"), jobConfig("c", "c")
        newC = evolve(c, folders=FolderRules(include=("INBOX",)))
        e, d = jobConfig("e", "e"), jobConfig("d", "d")
        plan = planReload(configOf([a, b, c]), configOf([e, newC, a, d]))
        self.assertEqual([job.name for job in plan.added], ["e", "d"])
        self.assertEqual(plan.removed, ("b",))
        self.assertEqual(plan.changed, (configOf([newC]).jobs[0],))
        self.assertFalse(plan.grantsChanged)
        self.assertEqual(planReload(configOf([a, b]), configOf([b, a])), ReloadPlan(limits=(("s", ServerLimits()),)))

    def test_limits(self) -> None:
        """
        A changed C{max_jobs} and connection limit are planned as such,
        each limit by its key with its old and new value; a changed rate
        needs a restart, named by its key; C{stop_timeout} is applied.
        """
        a = jobConfig("a", "a")
        old = configOf([a], maxJobs=2)
        lower = ServerLimits(maxConnections=1)
        plan = planReload(old, configOf([a], maxJobs=4, limits=lower, stopTimeout=60.0))
        self.assertEqual(plan.maxJobs, (2, 4))
        self.assertEqual(plan.limitsChanged, ("s",))
        self.assertEqual(plan.limitChanges, (("servers.s.max_connections", None, 1),))
        self.assertEqual(plan.limits, (("s", lower),))
        self.assertEqual(plan.stopTimeout, (30.0, 60.0))
        self.assertEqual(plan.needsRestart, ())
        rated = ServerLimits(
            bytesPerSecond=1000, perAccount=AccountLimits(messagesPerSecond=5.0, maxConnections=2)
        )
        plan = planReload(old, configOf([a], maxJobs=2, limits=rated))
        self.assertEqual(plan.limitsChanged, ("s",))
        self.assertEqual(
            plan.limitChanges, (("servers.s.per_account.max_connections", None, 2),)
        )
        self.assertEqual(
            plan.needsRestart,
            ("servers.s.bytes_per_second", "servers.s.per_account.messages_per_second"),
        )

    def test_limitsAloneChangeNoJob(self) -> None:
        """
        A server's connection limits are the grants', not the jobs': a job
        whose server's C{max_connections} changed has not changed (its
        configuration is taken silently, L{ReloadPlan.refreshed}), unless
        the limit changes the connections it may have, named
        C{connections}.  (It was: every job of the server "changed".)
        """
        a = jobConfig("a", "a")
        b = evolve(jobConfig("b", "b"), connections=3)
        old = configOf([a, b], limits=ServerLimits(maxConnections=4))
        plan = planReload(old, configOf([a, b], limits=ServerLimits(maxConnections=8)))
        self.assertEqual(plan.changed, ())
        self.assertEqual([job.name for job in plan.refreshed], ["a", "b"])
        self.assertEqual(plan.limitChanges, (("servers.s.max_connections", 4, 8),))
        self.assertEqual(
            describeReload(plan, ReloadApplied()), "servers.s.max_connections 4 -> 8"
        )
        plan = planReload(old, configOf([a, b], limits=ServerLimits(maxConnections=2)))
        self.assertEqual([job.name for job in plan.changed], ["b"])
        self.assertEqual(plan.changedKeys, (("connections",),))
        self.assertEqual([job.name for job in plan.refreshed], ["a"])
        self.assertEqual(
            describeReload(plan, ReloadApplied(changedRunning=("b",))),
            "1 job changed (connections; 1 from its next run), servers.s.max_connections 4 -> 2",
        )

    def test_notifyChangesNamed(self) -> None:
        """
        A changed C{notify} key (applied by the webhook's watcher) is named
        in the reload's line, without its value (a webhook URL's path is
        often its secret); before, such a reload said "no change".
        """
        a = jobConfig("a", "a")
        old = evolve(configOf([a]), notify=NotifyConfig("https://hooks.example/secret-path"))
        new = evolve(
            old, notify=NotifyConfig("https://hooks.example/other-path", stalledAfter=600.0)
        )
        plan = planReload(old, new)
        self.assertEqual(plan.notifyChanges, ("notify.webhook_url", "notify.stalled_after"))
        self.assertEqual(
            describeReload(plan, ReloadApplied()), "notify.webhook_url, notify.stalled_after"
        )
        self.assertEqual(planReload(old, old).notifyChanges, ())
        self.assertEqual(planReload(old, evolve(old, notify=None)).needsRestart, ("notify",))
        self.assertEqual(planReload(old, evolve(old, notify=None)).notifyChanges, ())

    def test_changedKeys(self) -> None:
        """
        The keys of a changed job are named as the file writes them: a
        server's settings under C{servers}, the pipeline's and retries'
        at the job's level, a password as C{password}; a job moved to
        another server as C{destination.server}.
        """
        a = jobConfig("a", "a")
        slow = evolve(a.destination.server, timeout=60.0)
        changedA = evolve(
            a,
            destination=evolve(a.destination, server=slow, password=Secret("new")),
            pipeline=evolve(a.pipeline, windowMessages=7),
            retry=evolve(a.retry, attempts=3, quotaPause=60),
            folders=FolderRules(exclude=("Junk",)),
        )
        plan = planReload(configOf([a]), evolve(configOf([a]), jobs=(changedA,)))
        self.assertEqual(
            plan.changedKeys,
            (
                (
                    "servers.s.timeout",
                    "destination.password",
                    "window_messages",
                    "folders.exclude",
                    "retry_attempts",
                    "quota_pause",
                ),
            ),
        )
        moved = evolve(a, destination=evolve(a.destination, server=server("t")))
        plan = planReload(configOf([a]), evolve(configOf([a]), jobs=(moved,)))
        self.assertEqual(plan.changedKeys, (("destination.server",),))

    def test_restartSettings(self) -> None:
        """
        The state database, the status listener, its token, its allowed
        host names and its bound on per-job series need a restart.
        """
        status = StatusConfig("tcp:8025", Secret("t"))
        old = configOf([], status=status)
        new = evolve(
            old,
            state=SQLiteState("/elsewhere.sqlite"),
            status=StatusConfig(
                "tcp:8026", Secret("u"), allowedHosts=("a.example",), maxJobSeries=5
            ),
        )
        self.assertEqual(
            planReload(old, new).needsRestart,
            (
                "state",
                "status.listen",
                "status.token_file",
                "status.allowed_hosts",
                "status.max_job_series",
            ),
        )
        self.assertEqual(planReload(old, old).needsRestart, ())

    def test_postgreSQLStateKept(self) -> None:
        """
        A reload that moves the state to PostgreSQL needs a restart, and
        the running daemon keeps its SQLite file; so does one that changes
        the fleet, whose name and lease the daemon keeps.
        """
        old = configOf([])
        new = evolve(
            old,
            state=PostgreSQLState(dbname="imapmig", host="localhost"),
            fleet=FleetConfig("acme"),
        )
        self.assertEqual(planReload(old, new).needsRestart, ("state", "fleet"))
        kept = keptForRestart(old, new)
        self.assertEqual((kept.statePath, kept.fleet), ("/var/lib/imapmig/state.sqlite", None))
        other = evolve(new, fleet=FleetConfig("acme", lease=30))
        self.assertEqual(planReload(new, other).needsRestart, ("fleet",))

    def test_describe(self) -> None:
        """
        The summary names counts with plurals, limits and what needs a
        restart; a reload that changes nothing says so.
        """
        plan = ReloadPlan(
            added=(jobConfig("a", "a"), jobConfig("b", "b")),
            removed=("c",),
            limitsChanged=("s",),
            limitChanges=(("servers.s.max_connections", None, 4),),
            needsRestart=("status.listen",),
        )
        self.assertEqual(
            describeReload(plan, ReloadApplied()),
            "2 jobs added, 1 removed, servers.s.max_connections none -> 4;"
            " 1 setting needs a restart: status.listen",
        )
        plan = ReloadPlan(
            removed=("c",),
            changed=(jobConfig("d", "d"), jobConfig("e", "e")),
            changedKeys=(("folders.exclude",), ("folders.exclude", "connections")),
            maxJobs=(8, 4),
        )
        self.assertEqual(
            describeReload(plan, ReloadApplied(leaving=("c",), changedRunning=("d", "e"))),
            "1 job removed (1 running to their end), 2 changed (folders.exclude,"
            " connections; 2 from their next run), max_jobs 8 -> 4",
        )
        self.assertEqual(describeReload(ReloadPlan(), ReloadApplied()), "no change")


class Harness:
    """
    A started scheduler of fake jobs, and the L{ReloadTarget} over it.
    """

    def __init__(self, jobs: Sequence[JobConfig], maxJobs: int = 1) -> None:
        self.scheduler = Scheduler(jobs, maxJobs)
        self.config = configOf(jobs, maxJobs)
        self.rules = {job.name: job.folders for job in jobs}
        self.jobServers = {job.name: "s" for job in jobs}
        self.counted: list[list[str]] = []
        self.target = ReloadTarget(
            self.scheduler.queue,
            self.scheduler.grants,
            self.scheduler.progress,
            self.scheduler.service,
            self.rules,
            self.jobServers,
            lambda jobs: self.counted.append([job.name for job in jobs]),
        )
        self.scheduler.service.startService()

    def reload(self, jobs: Sequence[JobConfig], maxJobs: int | None = None) -> ReloadApplied:
        new = configOf(jobs, self.config.maxJobs if maxJobs is None else maxJobs)
        applied = applyReload(planReload(self.config, new), self.target)
        self.config = new
        return applied


class ApplyTests(SynchronousTestCase):
    """
    L{applyReload} on a running scheduler (fake jobs, a L{Clock}).
    """

    def test_addedJobRuns(self) -> None:
        """
        An added job is shown queued, its source counted, and runs after
        the jobs queued before it; also once the queue had been drained.
        """
        h = Harness([jobConfig("a", "a")])
        h.reload([jobConfig("a", "a"), jobConfig("b", "b")])
        self.assertEqual(h.scheduler.progress.job("b").state, JobState.QUEUED)
        self.assertEqual(h.counted, [["b"]])
        self.assertIn("b", h.rules)
        self.assertEqual(h.jobServers["b"], "s")
        self.assertEqual(h.scheduler.started, ["a"])
        h.scheduler.finish("a")
        self.assertEqual(h.scheduler.started, ["a", "b"])
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.done, [True])
        # Drained: a reload that adds a job runs it.
        h.reload([jobConfig("a", "a"), jobConfig("b", "b"), jobConfig("c", "c")])
        self.assertEqual(h.scheduler.started, ["a", "b", "c"])
        h.scheduler.finish("c")
        self.assertEqual(h.scheduler.done, [True, True])
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_removedQueuedDropped(self) -> None:
        """
        A removed job that is queued or paused is dropped: it leaves the
        progress model and the status maps, and never runs; the queue is
        drained without it.
        """
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b"), jobConfig("c", "c")])
        h.scheduler.queue.pause("c")
        applied = h.reload([jobConfig("a", "a")])
        self.assertEqual(applied, ReloadApplied(dropped=("b", "c")))
        self.assertNotIn("b", h.scheduler.progress)
        self.assertNotIn("c", h.rules)
        self.assertNotIn("c", h.jobServers)
        h.scheduler.finish("a")
        self.assertEqual(h.scheduler.started, ["a"])
        self.assertEqual(h.scheduler.done, [True])
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_removedRunningFinishesNotRerun(self) -> None:
        """
        A removed job that is running is not stopped: it goes on to its end
        (logged) and is then not run again, even when its run ended
        deferred; its progress stays, showing how it ended.
        """
        events = capture(self)
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b")])
        applied = h.reload([jobConfig("b", "b")])
        self.assertEqual(applied, ReloadApplied(leaving=("a",)))
        self.assertFalse(h.scheduler.built["a"].stopped)
        self.assertIn(
            "Job a: removed from the configuration while running; it goes on to its end"
            " and is then not run again",
            texts(events),
        )
        # The controls of every job pass over it (no longer queued).
        self.assertEqual(self.successResultOf(h.scheduler.service.controls.pauseAll("admin")), 1)
        self.assertEqual(self.successResultOf(h.scheduler.service.controls.resumeAll("admin")), 1)
        h.scheduler.defer("a", until=h.scheduler.clock.seconds() + 10)
        self.assertIn(
            "Job a: ended (deferred); it was removed from the configuration and is not"
            " run again",
            texts(events),
        )
        self.assertEqual(h.scheduler.started, ["a", "b"])
        h.scheduler.finish("b")
        h.scheduler.clock.advance(20)
        self.assertEqual(h.scheduler.started, ["a", "b"])
        self.assertEqual(h.scheduler.done, [True])
        self.assertIn("a", h.scheduler.progress)
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_removedRunningEndedThenAddedAgain(self) -> None:
        """
        A job removed while running, that has ended since, and is then
        configured again is a new job: shown queued with fresh progress,
        its source counted, run again; not taken for a job still running.
        """
        events = capture(self)
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        h.reload([jobConfig("b", "b")])
        h.scheduler.finish("a")
        h.reload([jobConfig("b", "b"), jobConfig("a", "a")])
        self.assertNotIn(
            "Job a: configured again while running; its new configuration is for its"
            " next run",
            texts(events),
        )
        self.assertEqual(h.counted, [["a"]])
        self.assertEqual(h.scheduler.started, ["a", "b", "a"])
        h.scheduler.finish("a")
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.done, [True])
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_removedRunningAddedAgainWhileRunning(self) -> None:
        """
        A job removed while running and configured again before it ended
        runs on (its progress kept, not counted again), and is then not
        dropped: it stays in the queue for its next run.
        """
        events = capture(self)
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b")], maxJobs=2)
        h.reload([jobConfig("b", "b")])
        h.reload([jobConfig("b", "b"), jobConfig("a", "a")])
        self.assertIn(
            "Job a: configured again while running; its new configuration is for its"
            " next run",
            texts(events),
        )
        self.assertEqual(h.counted, [])
        self.assertEqual(h.scheduler.queue.state("a"), QueueState.CLAIMED)
        h.scheduler.finish("a")
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.started, ["a", "b"])
        self.assertEqual(h.scheduler.done, [True])
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_changedQueuedAndRunning(self) -> None:
        """
        A changed job that is queued runs with its new configuration; a
        running one goes on, its new configuration for its next run.
        """
        built: list[JobConfig] = []
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b")])
        build = h.scheduler.service._build
        h.scheduler.service._build = lambda config, connections: (
            built.append(config) or build(config, connections)  # type: ignore[func-returns-value]
        )
        newA = evolve(jobConfig("a", "a"), connections=2)
        newB = evolve(jobConfig("b", "b"), connections=3)
        applied = h.reload([newA, newB])
        self.assertEqual(applied, ReloadApplied(changedRunning=("a",)))
        self.assertEqual(h.counted, [["b"]])
        h.scheduler.finish("a")
        self.assertEqual([job.connections for job in built], [3])
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_limitsAloneLogNoJob(self) -> None:
        """
        A reload that changes only a server's C{max_connections} says
        nothing of the jobs, running or queued: no "configuration changed
        while running" line, no census of their sources; the queue holds
        their new configuration.
        """
        h = Harness([jobConfig("a", "a"), jobConfig("b", "b")])
        built: list[JobConfig] = []
        build = h.scheduler.service._build
        h.scheduler.service._build = lambda config, connections: (
            built.append(config) or build(config, connections)  # type: ignore[func-returns-value]
        )
        new = configOf(
            [jobConfig("a", "a"), jobConfig("b", "b")], limits=ServerLimits(maxConnections=8)
        )
        events = capture(self)
        applied = applyReload(planReload(h.config, new), h.target)
        self.assertEqual(applied, ReloadApplied())
        self.assertEqual(texts(events), [])
        self.assertEqual(h.counted, [])
        h.scheduler.finish("a")
        self.assertEqual(built, [new.jobs[1]])
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_maxJobs(self) -> None:
        """
        A higher C{max_jobs} starts queued jobs at once; a lower one stops
        no running job, and starts none until fewer run than it allows.
        """
        h = Harness([jobConfig(name, name) for name in "abcde"], maxJobs=1)
        h.reload([jobConfig(name, name) for name in "abcde"], maxJobs=3)
        self.assertEqual(h.scheduler.started, ["a", "b", "c"])
        h.reload([jobConfig(name, name) for name in "abcde"], maxJobs=1)
        self.assertFalse(any(job.stopped for job in h.scheduler.built.values()))
        h.scheduler.finish("a")
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.started, ["a", "b", "c"])
        h.scheduler.finish("c")
        self.assertEqual(h.scheduler.started, ["a", "b", "c", "d"])
        h.scheduler.finish("d")
        h.scheduler.finish("e")
        self.assertEqual(h.scheduler.done, [True])
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])


class HeldTests(SynchronousTestCase):
    """
    The admin's holds recorded for jobs a reload adds.
    """

    def test_addedJobsKeepTheirHolds(self) -> None:
        """
        A job added by a reload whose name the store records as paused or
        cancelled (held before it was removed) is queued paused or
        cancelled, as a restart would have it; a running job is left
        alone whatever its hold.
        """
        h = Harness([jobConfig("a", "a")])
        controls = h.scheduler.service.controls

        class Holds:
            async def readHolds(self) -> dict[str, JobHold]:
                return {
                    "a": JobHold(PAUSED, "192.0.2.7", 5.0),
                    "b": JobHold(PAUSED, "192.0.2.7", 5.0),
                    "c": JobHold(CANCELLED, None, 6.0),
                }

            applyHolds = staticmethod(controls.applyHolds)

        target = evolve(h.target, holds=Holds())
        reloader = ConfigReloader(
            h.config,
            lambda path: succeed(configOf([jobConfig(name, name) for name in "abcd"])),
            target,
        )
        self.assertTrue(self.successResultOf(reloader.reloadFrom("f")))
        queue = h.scheduler.queue
        self.assertEqual(
            [queue.state(name) for name in "abcd"],
            [QueueState.CLAIMED, QueueState.PAUSED, QueueState.CANCELLED, QueueState.QUEUED],
        )
        b = h.scheduler.progress.job("b")
        self.assertEqual(b.state, JobState.PAUSED)
        # Held by the admin the store names, since when it says.
        self.assertEqual(b.wait, Wait(JobState.PAUSED, "paused by the admin", 5.0, None, "192.0.2.7"))
        self.assertEqual(h.scheduler.progress.job("c").state, JobState.CANCELLED)
        self.assertFalse(h.scheduler.built["a"].stopped)
        h.scheduler.finish("a")
        h.scheduler.finish("d")
        self.assertEqual(h.scheduler.started, ["a", "d"])
        h.scheduler.service.stopService()
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])


class Observer:
    """
    Records what it is told.
    """

    def __init__(self) -> None:
        self.told: list[object] = []

    def reloadStarted(self) -> None:
        self.told.append("started")

    def reloadEnded(self, applied: bool) -> None:
        self.told.append(applied)


class ReloaderTests(SynchronousTestCase):
    """
    L{ConfigReloader}: one reload at a time, invalid files, observers.
    """

    def reloader(
        self, load: Callable[[str], Deferred[Config]], **kwargs: Any
    ) -> tuple[ConfigReloader, Harness, Observer]:
        h = Harness([jobConfig("a", "a")])
        reloader = ConfigReloader(h.config, load, h.target, **kwargs)
        observer = Observer()
        reloader.addObserver(observer)
        return reloader, h, observer

    def test_invalidChangesNothing(self) -> None:
        """
        An invalid new configuration is logged one problem per line at error
        level, with a line saying nothing changed; nothing changes, and the
        result is C{False}.
        """
        events = capture(self)
        problems = ["/etc/imapmig.yaml: jobs[1].name: missing", "/etc/imapmig.yaml: max_jobz: unknown key"]
        reloader, h, observer = self.reloader(lambda path: fail(ConfigError(problems)))
        before = reloader.config
        self.assertFalse(self.successResultOf(reloader.reloadFrom("/etc/imapmig.yaml")))
        errors = texts(events, LogLevel.error)
        self.assertEqual(
            errors,
            [f"Configuration reload: {problem}" for problem in problems]
            + [
                "Configuration not reloaded from /etc/imapmig.yaml: 2 problems; nothing"
                " changed, the daemon runs on with its configuration"
            ],
        )
        self.assertIs(reloader.config, before)
        self.assertEqual(observer.told, ["started", False])
        self.assertEqual([job.name for job in h.scheduler.progress], ["a"])
        h.scheduler.finish("a")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_appliedAndLogged(self) -> None:
        """
        A valid configuration is applied and summed up in one line; the
        settings needing a restart are kept as they were, each warned of.
        """
        events = capture(self)
        h = Harness([jobConfig("a", "a")])
        new = evolve(
            configOf([jobConfig("a", "a"), jobConfig("b", "b")]),
            status=StatusConfig("tcp:9999"),
        )
        reloader = ConfigReloader(h.config, lambda path: succeed(new), h.target)
        self.assertTrue(self.successResultOf(reloader.reloadFrom("/etc/imapmig.yaml")))
        self.assertIn(
            "Configuration reloaded from /etc/imapmig.yaml: 1 job added; 1 setting needs a"
            " restart: status.listen",
            texts(events, LogLevel.info),
        )
        self.assertEqual(len(texts(events, LogLevel.warn)), 1)
        self.assertIsNone(reloader.config.status)
        self.assertEqual(len(reloader.config.jobs), 2)
        h.scheduler.finish("a")
        h.scheduler.finish("b")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_fleetListReplacedOnce(self) -> None:
        """
        In a fleet, a reload replaces the fleet's job list with one
        C{replaceList} of the new jobs and user lists (the whole
        difference) before applying the reload; a refusal of it is one
        error line, the reload is reported failed and nothing changes.
        """
        events = capture(self)
        h = Harness([jobConfig("a", "a")])
        calls: list[tuple[list[str], tuple[Any, ...]]] = []
        answers: list[Deferred[ListChange]] = [
            fail(JobListStale("fleet 'x''s job list is no longer this daemon's")),
            succeed(ListChange(generation=3, added=1, removed=1)),
        ]

        class FleetQueue:
            def replaceList(self, jobs: Sequence[JobConfig], userLists: Any = ()) -> Deferred[ListChange]:
                calls.append(([job.name for job in jobs], tuple(userLists)))
                return answers.pop(0)

            def leaving(self, names: Sequence[str]) -> Deferred[frozenset[str]]:
                return succeed(frozenset())

        target = evolve(h.target, fleet=cast(Any, FleetQueue()))
        new = configOf([jobConfig("b", "b")])
        reloader = ConfigReloader(h.config, lambda path: succeed(new), target)
        self.assertFalse(self.successResultOf(reloader.reloadFrom("/etc/imapmig.yaml")))
        self.assertEqual(
            texts(events, LogLevel.error),
            [
                "Configuration not reloaded from /etc/imapmig.yaml: the fleet's job list could"
                " not be replaced (fleet 'x''s job list is no longer this daemon's); nothing"
                " changed, the daemon runs on with its configuration"
            ],
        )
        self.assertEqual([job.name for job in h.scheduler.progress], ["a"])
        self.assertTrue(self.successResultOf(reloader.reloadFrom("/etc/imapmig.yaml")))
        self.assertEqual(calls, [(["b"], ()), (["b"], ())])
        self.assertIn(
            "The fleet's job list is now /etc/imapmig.yaml's (generation 3: 1 added, 1"
            " removed, 0 leaving at the end of their run, 0 changed)",
            texts(events, LogLevel.info),
        )
        self.assertIn("b", [job.name for job in h.scheduler.progress])
        h.scheduler.finish("a")
        h.scheduler.finish("b")

    def test_coalesced(self) -> None:
        """
        Reloads never overlap: requests made while one runs wait for it,
        and share one next reload, whose result they all get.
        """
        loads: list[Deferred[Config]] = []

        def load(path: str) -> Deferred[Config]:
            self.assertTrue(all(d.called for d in loads), "two reloads at once")
            loads.append(Deferred())
            return loads[-1]

        reloader, h, observer = self.reloader(load)
        first = reloader.reloadFrom("f")
        second = reloader.reloadFrom("f")
        third = reloader.reloadFrom("f")
        self.assertEqual(len(loads), 1)
        loads[0].callback(configOf([jobConfig("a", "a"), jobConfig("b", "b")]))
        self.assertTrue(self.successResultOf(first))
        self.assertEqual(len(loads), 2)
        self.assertNoResult(second)
        loads[1].errback(ConfigError(["f: bad"]))
        self.assertFalse(self.successResultOf(second))
        self.assertFalse(self.successResultOf(third))
        self.assertEqual(observer.told, ["started", True, "started", False])
        fourth = reloader.reloadFrom("f")
        self.assertEqual(len(loads), 3)
        loads[2].callback(configOf([jobConfig("a", "a")]))
        self.assertTrue(self.successResultOf(fourth))
        h.scheduler.finish("a")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_stoppingAppliesNothing(self) -> None:
        """
        A reload that ends while the daemon stops applies nothing.
        """
        reloader, h, observer = self.reloader(
            lambda path: succeed(configOf([jobConfig("a", "a"), jobConfig("b", "b")])),
            running=lambda: False,
        )
        self.assertFalse(self.successResultOf(reloader.reloadFrom("f")))
        self.assertNotIn("b", h.scheduler.progress)
        h.scheduler.service.stopService()
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_tlsNeedsRestart(self) -> None:
        """
        A daemon started without TLS refuses a configuration that needs it.
        """
        events = capture(self)
        tls = evolve(server("s"), starttls=True)
        job = jobConfig("b", "b")
        new = configOf([jobConfig("a", "a")])
        new = evolve(new, jobs=new.jobs + (evolve(job, destination=evolve(job.destination, server=tls)),))
        reloader, h, observer = self.reloader(lambda path: succeed(new), withoutTLS=lambda: True)
        # The file itself does not exist: only the parsed one is checked.
        self.assertFalse(self.successResultOf(reloader.reloadFrom(self.mktemp())))
        self.assertIn("needs TLS", " ".join(texts(events, LogLevel.error)))
        self.assertNotIn("b", h.scheduler.progress)
        h.scheduler.finish("a")
        self.assertEqual(h.scheduler.clock.getDelayedCalls(), [])

    def test_observerFailure(self) -> None:
        """
        An observer that raises is logged; the reload and the other
        observers go on.
        """

        class Broken:
            def reloadStarted(self) -> None:
                raise RuntimeError("broken")

            def reloadEnded(self, applied: bool) -> None:
                raise RuntimeError("broken")

        h = Harness([jobConfig("a", "a")])
        reloader = ConfigReloader(h.config, lambda path: succeed(h.config), h.target)
        observer = Observer()
        reloader.addObserver(Broken())
        reloader.addObserver(observer)
        self.assertTrue(self.successResultOf(reloader.reloadFrom("f")))
        self.assertEqual(observer.told, ["started", True])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)
        h.scheduler.finish("a")


class ServiceReloadTests(SynchronousTestCase):
    """
    L{MigrationService.reloadFrom} on a daemon built by L{buildService}.
    """

    def writeConfig(self, jobs: Sequence[str], status: bool = True) -> str:
        directory = self.directory
        path = os.path.join(directory, "reload.yaml")
        password = os.path.join(directory, "password")
        if not os.path.exists(password):
            writePasswordFile(password, "pw")
        lines = [
            f"state: {os.path.join(directory, 'state.sqlite')}",
            "status: {listen: 'tcp:0:interface=127.0.0.1'}" if status else "status: off",
            "servers: {s: {endpoint: 'tcp:127.0.0.1:1143', starttls: 'off'}}",
            # One job at a time: a job added after the first stays queued.
            "max_jobs: 1",
            "jobs:",
        ]
        for name in jobs:
            lines.append(
                f"  - {{name: {name}, source: {{maildir: {self.maildir}}},"
                f" destination: {{server: s, user: {name}, password_file: {password}}}}}"
            )
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(path, 0o600)
        return path

    def test_reloadFrom(self) -> None:
        """
        Reloading adds a job to the running daemon: queued, shown by the
        status resource and counted by a census of its own; observers are
        told; an invalid file changes nothing.
        """
        self.maildir = makeMaildir(self)
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        path = self.writeConfig(["a"])
        reactor = MemoryReactorClock()
        service = buildService(loadConfig(path), reactor, store=MemoryStateStore())
        observer = Observer()
        service.addReloadObserver(observer)
        service.startService()
        self.writeConfig(["a", "b"], status=False)
        self.assertTrue(self.successResultOf(service.reloadFrom(path)))
        self.assertEqual([job.name for job in service.progress], ["a", "b"])
        assert service.config is not None
        self.assertIsNotNone(service.config.status)
        self.assertEqual([job.name for job in service.config.jobs], ["a", "b"])
        reactor.advance(0)
        self.assertEqual(service.progress.job("b").messagesTotal, 1)
        # The reload's census left the service once done.
        self.assertEqual([child.name for child in service if (child.name or "").startswith("census-")], [])
        assert service.reloader is not None
        target = service.reloader.target
        self.assertEqual(sorted(target.jobServers), ["a", "b"])
        self.assertEqual(sorted(target.rules), ["a", "b"])
        # A queued job removed leaves the progress model and the maps
        # the status page and /metrics read.
        self.writeConfig(["a"], status=False)
        self.assertTrue(self.successResultOf(service.reloadFrom(path)))
        self.assertEqual([job.name for job in service.progress], ["a"])
        self.assertEqual(sorted(target.jobServers), ["a"])
        self.assertEqual(sorted(target.rules), ["a"])
        self.writeConfig(["a", "b"], status=False)
        self.assertTrue(self.successResultOf(service.reloadFrom(path)))
        reactor.advance(0)
        self.assertEqual([child.name for child in service if (child.name or "").startswith("census-")], [])
        observer.told.clear()
        with open(path, "a") as f:
            f.write("max_jobz: 3\n")
        self.assertFalse(self.successResultOf(service.reloadFrom(path)))
        self.assertEqual(observer.told, ["started", False])
        self.assertEqual([job.name for job in service.config.jobs], ["a", "b"])
        service.stopService()


class SignalTests(SynchronousTestCase):
    """
    L{installReloadSignal}: C{SIGHUP} hands a reload to the reactor.
    """

    def test_sighup(self) -> None:
        """
        A real C{SIGHUP} makes the handler ask the reactor's thread to call
        C{reloadFrom} with the configuration's path, and nothing more.
        """
        previous = signal.getsignal(signal.SIGHUP)
        self.addCleanup(signal.signal, signal.SIGHUP, previous)
        calls: list[tuple[Any, ...]] = []

        class Reactor:
            def callFromThread(self, f: Any, *args: Any) -> None:
                calls.append((f, *args))

        class Root:
            def reloadFrom(self, path: str) -> None:
                raise AssertionError("called in the signal handler")

        root = Root()
        installReloadSignal(Reactor(), root, "/etc/imapmig/imapmig.yaml")
        os.kill(os.getpid(), signal.SIGHUP)
        self.assertEqual(calls, [(root.reloadFrom, "/etc/imapmig/imapmig.yaml")])


class LoadInThreadTests(SynchronousTestCase):
    """
    L{loadInThread} reads the configuration for a reload off the reactor's
    thread, and refuses what could block that thread.
    """

    def test_fifoRefused(self) -> None:
        """
        A FIFO in place of the configuration file fails the reload at once,
        naming the path, instead of blocking a worker thread (and the
        daemon's stop) until a writer comes.
        """
        path = os.path.abspath(self.mktemp())
        os.mkfifo(path)
        # Without the check, this reads the FIFO in place and hangs until
        # trial's timeout.
        error = self.failureResultOf(loadInThread(MemoryReactorClock(), path), ConfigError).value
        self.assertEqual(
            error.problems, (f"{path}: not a regular file; give the configuration file",)
        )

    def test_missingFileReadByTheReader(self) -> None:
        """
        A missing file is left to the configuration reader, whose problem
        line says so in its words.
        """
        path = os.path.abspath(self.mktemp())
        error = self.failureResultOf(loadInThread(MemoryReactorClock(), path), ConfigError).value
        self.assertEqual(len(error.problems), 1)
        self.assertIn(path, error.problems[0])



@implementer(IReactorThreads)
class ThreadedReactor:
    """
    A reactor whose thread pool runs nothing until the test says so
    (L{runQueued}), and whose C{callFromThread} calls at once.
    """

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[[bool, object], None], Callable[..., object], tuple[Any, ...]]] = []

    def getThreadPool(self) -> Any:
        reactor = self

        class Pool:
            def callInThreadWithCallback(
                self, onResult: Callable[[bool, object], None], f: Callable[..., object], *args: Any
            ) -> None:
                reactor.queued.append((onResult, f, args))

        return Pool()

    def callFromThread(
        self, callable: Callable[..., Any], *args: object, **kwargs: object
    ) -> None:
        callable(*args, **kwargs)

    def callInThread(self, callable: Callable[..., Any], *args: object, **kwargs: object) -> None:
        raise AssertionError("not used")

    def suggestThreadPoolSize(self, size: int) -> None:
        raise AssertionError("not used")

    def runQueued(self) -> None:
        while self.queued:
            onResult, f, args = self.queued.pop(0)
            try:
                result = f(*args)
            except BaseException:
                onResult(False, Failure())
            else:
                onResult(True, result)


class BrokenReloadTests(SynchronousTestCase):
    """
    A reload reads and checks the file off the reactor's thread, bounded,
    and a broken file is refused with what is wrong with it, in a daemon
    without TLS too.
    """

    def reload(self, path: str, reactor: Any = None) -> tuple[Deferred[bool], list[LogEvent]]:
        events = capture(self)
        h = Harness([jobConfig("a", "a")])
        self.addCleanup(h.scheduler.finish, "a")
        reactor = MemoryReactorClock() if reactor is None else reactor
        reloader = ConfigReloader(
            h.config,
            lambda path: loadInThread(reactor, path, withoutTLS=lambda: True),
            h.target,
            withoutTLS=lambda: True,
        )
        return reloader.reloadFrom(path), events

    def write(self, content: bytes) -> str:
        path: str = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(content)
        os.chmod(path, 0o600)
        return path

    def test_realProblem(self) -> None:
        """
        In a daemon started without TLS, a YAML error, an empty file and a
        deleted file are each refused with the problem C{--check-config}
        reports, not as a configuration needing TLS (whose advice, a
        restart, would stop the daemon with the same problem).
        """
        missing = os.path.abspath(self.mktemp())
        for path, problem in (
            (self.write(b"state: [\n"), "invalid YAML"),
            (self.write(b""), "the file is empty"),
            (self.write(b"# nothing but a comment\n"), "the file is empty"),
            (missing, f"{missing}: no such file"),
            (self.write(b"state: a\nstate: b\n"), "state: given twice, on lines 1 and 2"),
        ):
            applied, events = self.reload(path)
            self.assertFalse(self.successResultOf(applied))
            errors = "\n".join(texts(events, LogLevel.error))
            self.assertIn(problem, errors)
            self.assertNotIn("TLS", errors)

    def test_problemsBounded(self) -> None:
        """
        A file with more problems than L{SHOWN_PROBLEMS} logs that many,
        one line counting the rest, and the refusal with the whole count
        (400,000 unknown keys logged 400,000 lines, 113 MB).
        """
        keys = "".join(f"  k{n}: 1\n" for n in range(SHOWN_PROBLEMS + 50))
        applied, events = self.reload(self.write(f"defaults:\n{keys}".encode()))
        self.assertFalse(self.successResultOf(applied))
        errors = texts(events, LogLevel.error)
        self.assertEqual(len(errors), SHOWN_PROBLEMS + 2)
        self.assertIn("defaults.k0: unknown key 'k0'", "\n".join(errors))
        # 50 keys beyond those shown, and the file's other problems (no state:).
        more = re.search(
            rf"\.\.\. and (\d+) more problems, not shown: fix the first {SHOWN_PROBLEMS} first$",
            errors[-2],
        )
        assert more is not None, errors[-2]
        self.assertGreaterEqual(int(more.group(1)), 50)
        self.assertIn(
            f": {SHOWN_PROBLEMS + int(more.group(1))} problems; nothing changed", errors[-1]
        )

    def test_needsTLSSaysWhy(self) -> None:
        """
        A valid file that asks for TLS, in a daemon started without it, is
        refused naming what asks for it.
        """
        path = self.write(b"servers:\n  s: {endpoint: 'tcp:127.0.0.1:143'}\n")
        applied, events = self.reload(path)
        self.assertFalse(self.successResultOf(applied))
        self.assertIn(
            "the new configuration needs TLS (servers.s.starttls is not off)",
            "\n".join(texts(events, LogLevel.error)),
        )

    def test_offTheReactorThread(self) -> None:
        """
        The reactor's thread neither opens nor parses the file: the
        thread pool does, and the result is applied on the reactor's
        thread.  (The TLS probe read and walked it on the reactor's
        thread: an alias bomb froze the daemon for minutes.)
        """
        from tests.test_configfile import aliasBomb

        reactor = ThreadedReactor()
        path = self.write(aliasBomb())
        opened: list[object] = []
        realOpen = builtins.open

        def recordingOpen(file: Any, *args: Any, **kwargs: Any) -> Any:
            opened.append(file)
            return realOpen(file, *args, **kwargs)

        self.patch(builtins, "open", recordingOpen)
        applied, events = self.reload(path, reactor)
        self.assertEqual(opened, [])
        self.assertNoResult(applied)
        self.assertEqual(len(reactor.queued), 1)
        reactor.runQueued()
        self.assertEqual(opened, [path])
        self.assertFalse(self.successResultOf(applied))
        self.assertIn("the document holds more than", "\n".join(texts(events, LogLevel.error)))

    def test_collectionPaused(self) -> None:
        """
        The garbage collector is paused while the file is parsed (its
        passes over the parsed nodes held the interpreter's lock, and the
        reactor's thread stood still up to 0.8 s with 10,000 jobs), and
        resumed after, whether the file was valid or not.
        """
        import gc

        from imapmig import configfile
        seen: list[bool] = []
        read = configfile.readConfigFile

        def recording(path: str) -> configfile.ConfigFile:
            seen.append(gc.isenabled())
            return read(path)

        self.patch(configfile, "readConfigFile", recording)
        self.assertTrue(gc.isenabled())
        applied, events = self.reload(self.write(b"state: [\n"))
        self.assertFalse(self.successResultOf(applied))
        self.assertEqual(seen, [False])
        self.assertTrue(gc.isenabled())

    def test_collectionRunsWhileFilesRead(self) -> None:
        """
        The collector is paused for the YAML parse only (bounded: the file
        is at most 8 MiB, its document 1,000,000 nodes), not while the
        reader reads password files, user lists and certificates, whose
        reads could block (a hung network file system) and leave the whole
        process without cyclic collection meanwhile; that part cost 0.01 s
        of collection with 10,000 jobs, the parse 0.7 s.
        """
        import gc

        import imapmig.config

        seen: list[bool] = []
        parse = imapmig.config.parseConfig

        def recording(*args: Any, **kwargs: Any) -> Config:
            seen.append(gc.isenabled())
            return parse(*args, **kwargs)

        self.patch(imapmig.config, "parseConfig", recording)
        applied, _ = self.reload(self.write(b"state: /nonexistent/state.sqlite\n"))
        self.assertFalse(self.successResultOf(applied))
        self.assertEqual(seen, [True])
        self.assertTrue(gc.isenabled())


class FleetRemovalTests(SynchronousTestCase):
    """
    A reload of a fleet's daemon that removes jobs: those a daemon of the
    fleet runs (this one or another) stay on the page until their run
    ends, then leave it; the others leave at once.
    """

    def setUp(self) -> None:
        from twisted.internet.task import Clock

        from imapmig.daemon.reloadapply import LeavingJobs
        from imapmig.progress import MigrationProgress
        from imapmig.queue.memory import AsyncJobQueue, InMemoryJobQueue
        from imapmig.schedule.grants import ConnectionGrants

        self.clock = Clock()
        self.jobs = [jobConfig(name, name) for name in "abcd"]
        self.fleet = InMemoryJobQueue(self.jobs, self.clock.seconds)
        self.other = self.fleet.register("mig2", 7, "1.0", 60.0)
        self.claims = {}
        for _ in "ab":
            claim = self.fleet.claim(self.other, 0.0, 60.0)
            assert claim is not None
            self.claims[claim.job.name] = claim
        self.progress = MigrationProgress(self.clock.seconds)
        for job in self.jobs:
            self.progress.addJob(job.name)
        self.woken: list[bool] = []
        woken = self.woken

        class Watcher:
            def queueChanged(self) -> None:
                woken.append(True)

        shared = AsyncJobQueue(self.fleet)
        self.target = ReloadTarget(
            InMemoryJobQueue(self.jobs, self.clock.seconds),
            ConnectionGrants(1, {"s": ServerLimits()}),
            self.progress,
            Watcher(),
            {job.name: job.folders for job in self.jobs},
            {job.name: "s" for job in self.jobs},
            lambda jobs: None,
            fleet=shared,
            leaving=LeavingJobs(shared, self.clock),
        )
        self.config = configOf(self.jobs)

    def reload(self, names: str) -> None:
        new = configOf([job for job in self.jobs if job.name in names])
        reloader = ConfigReloader(self.config, lambda path: succeed(new), self.target)
        self.assertTrue(self.successResultOf(reloader.reloadFrom("/etc/imapmig.yaml")))
        self.config = new

    def shown(self) -> list[str]:
        return [job.name for job in self.progress]

    def test_runningStaysUntilItEnds(self) -> None:
        """
        Jobs a and b, which another daemon runs, and c and d, queued, all
        removed: c and d leave the page at once, a and b stay until their
        run ends (found in review: the daemon asked its own queue in
        memory, where no job of a fleet is claimed, and dropped them at
        once while they ran on); then each leaves within L{LEAVING_POLL}
        seconds, and nothing is asked of the queue once none is left.
        """
        from imapmig.daemon.reloadapply import LEAVING_POLL
        from imapmig.queue import JobOutcome

        events = capture(self)
        self.reload("")
        self.assertEqual(self.shown(), ["a", "b"])
        self.assertEqual(sorted(self.target.rules), ["a", "b"])
        self.assertIn(
            "Job a: removed from the configuration while a daemon of the fleet runs it; it goes"
            " on to its end, is shown until then, and is not run again",
            texts(events, LogLevel.info),
        )
        self.clock.advance(LEAVING_POLL)
        self.assertEqual(self.shown(), ["a", "b"])
        self.fleet.finish(self.claims["b"], JobOutcome.COMPLETED)
        self.clock.advance(LEAVING_POLL)
        self.assertEqual(self.shown(), ["a"])
        self.fleet.finish(self.claims["a"], JobOutcome.STOPPED)
        self.clock.advance(LEAVING_POLL)
        self.assertEqual(self.shown(), [])
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertIsNone(self.fleet.claim(self.other, 0.0, 60.0))

    def test_configuredAgainWhileRunning(self) -> None:
        """
        A job removed while another daemon runs it and configured again
        before its run ended keeps its place on the page, and stays after
        its run: it is a job of the list again.
        """
        from imapmig.daemon.reloadapply import LEAVING_POLL
        from imapmig.queue import JobOutcome

        self.reload("bcd")
        self.assertEqual(self.shown(), ["a", "b", "c", "d"])
        self.reload("abcd")
        self.fleet.finish(self.claims["a"], JobOutcome.COMPLETED)
        self.clock.advance(LEAVING_POLL)
        self.assertEqual(self.shown(), ["a", "b", "c", "d"])
        self.assertEqual(self.clock.getDelayedCalls(), [])
