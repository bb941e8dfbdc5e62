# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what a reload asks of the queue, the grants and the progress
model: L{InMemoryJobQueue.add}, C{remove} and C{replace};
L{ConnectionGrants.setLimits}; L{MigrationProgress.removeJob}.
"""

from __future__ import annotations

import weakref

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.progress import MigrationProgress
from imapmig.errors import GrantImpossible, UnknownJob
from imapmig.schedule.grants import ConnectionGrants, serverPool
from imapmig.queue import IJobQueue, JobOutcome, QueueState
from imapmig.queue.memory import InMemoryJobQueue
from tests.test_schedule_service import jobConfig


def queueOf(*names: str) -> InMemoryJobQueue:
    return InMemoryJobQueue([jobConfig(name, name) for name in names], lambda: 0.0)


def drain(queue: InMemoryJobQueue) -> list[str]:
    """
    Claim every job left, completing each, and return their names in
    claim order.
    """
    names: list[str] = []
    while True:
        claim = queue.claim("me", 0.0, 60.0)
        if claim is None:
            return names
        names.append(claim.job.name)
        queue.finish(claim, JobOutcome.COMPLETED)


class QueueReloadTests(SynchronousTestCase):
    """
    L{InMemoryJobQueue}'s reload operations.
    """

    def test_interface(self) -> None:
        """
        The queue still provides L{IJobQueue}, reload operations included.
        """
        self.assertTrue(verifyObject(IJobQueue, queueOf("a")))

    def test_addAfterQueued(self) -> None:
        """
        An added job is claimed after every job queued, also after the
        queue had been drained; the counts include it.
        """
        queue = queueOf("a", "b")
        queue.add(jobConfig("c", "c"))
        self.assertEqual(queue.counts().queued, 3)
        self.assertEqual(drain(queue), ["a", "b", "c"])
        queue.add(jobConfig("d", "d"))
        self.assertEqual(queue.state("d"), QueueState.QUEUED)
        self.assertEqual(drain(queue), ["d"])
        self.assertEqual(queue.counts().finished, 4)

    def test_addTwice(self) -> None:
        """
        Adding a job whose name the queue holds is refused.
        """
        queue = queueOf("a")
        self.assertRaises(ValueError, queue.add, jobConfig("a", "other"))

    def test_removeQueuedPausedDeferredEnded(self) -> None:
        """
        A queued, paused, deferred or ended job is removed at once: never
        claimed, unknown to the controls, and out of the counts.
        """
        queue = queueOf("done", "deferred", "paused", "queued", "cancelled", "kept")
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        queue.finish(claim, JobOutcome.COMPLETED)
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        queue.finish(claim, JobOutcome.DEFERRED, notBefore=100.0)
        queue.pause("paused")
        queue.cancel("cancelled")
        self.assertEqual(queue.remove("done"), QueueState.DONE)
        self.assertEqual(queue.remove("deferred"), QueueState.QUEUED)
        self.assertEqual(queue.remove("paused"), QueueState.PAUSED)
        self.assertEqual(queue.remove("queued"), QueueState.QUEUED)
        self.assertEqual(queue.remove("cancelled"), QueueState.CANCELLED)
        self.assertIsNone(queue.nextDue())
        counts = queue.counts()
        self.assertEqual(
            (counts.queued, counts.claimed, counts.finished, counts.paused, counts.cancelled),
            (1, 0, 0, 0, 0),
        )
        self.assertRaises(UnknownJob, queue.state, "paused")
        self.assertRaises(UnknownJob, queue.resume, "paused")
        self.assertRaises(UnknownJob, queue.remove, "paused")
        self.assertEqual(drain(queue), ["kept"])

    def test_removeClaimed(self) -> None:
        """
        A claimed job removed goes on (its renewals succeed, nothing asked
        of it) and leaves the queue when its claim finishes, however it
        ended: a stopped or deferred run is not queued again.
        """
        for outcome in JobOutcome:
            queue = queueOf("a", "b")
            claim = queue.claim("me", 0.0, 60.0)
            assert claim is not None
            self.assertEqual(queue.remove("a"), QueueState.CLAIMED)
            renewed = queue.renew(claim, 60.0)
            self.assertIsNone(renewed.requested)
            self.assertEqual(queue.counts().claimed, 1)
            queue.finish(renewed, outcome, notBefore=0.0)
            self.assertEqual(queue.counts().queued, 1, outcome)
            self.assertEqual(queue.counts().finished, 0, outcome)
            self.assertIsNone(queue.nextDue())
            self.assertEqual(drain(queue), ["b"], outcome)

    def test_removedConfigurationReleased(self) -> None:
        """
        A removed job's configuration is released (at once, or when its
        claim finishes): a daemon reloaded with new jobs, old ones removed,
        for months keeps no configuration of a job it no longer has.
        """
        queue = queueOf("a", "b")
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        added = jobConfig("c", "c")
        queue.add(added)
        runningRef, addedRef = weakref.ref(claim.job), weakref.ref(added)
        del added
        queue.remove("c")
        self.assertIsNone(addedRef())
        queue.remove("a")
        queue.finish(claim, JobOutcome.COMPLETED)
        del claim
        self.assertIsNone(runningRef())
        self.assertEqual(drain(queue), ["b"])

    def test_removeClaimedThenAddedAgain(self) -> None:
        """
        A claimed job removed, then added again before its claim finished,
        stays in the queue, with the configuration it was added with for
        its next claim.
        """
        queue = queueOf("a")
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        queue.remove("a")
        again = evolve(jobConfig("a", "a"), connections=3)
        queue.add(again)
        self.assertEqual(queue.state("a"), QueueState.CLAIMED)
        queue.finish(claim, JobOutcome.STOPPED)
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        self.assertEqual(claim.job, again)

    def test_replace(self) -> None:
        """
        A replaced job's next claim has its new configuration; a claimed
        one keeps the one it was claimed with.
        """
        queue = queueOf("a", "b")
        running = queue.claim("me", 0.0, 60.0)
        assert running is not None
        newA = evolve(jobConfig("a", "a"), connections=2)
        newB = evolve(jobConfig("b", "b"), connections=4)
        self.assertEqual(queue.replace(newA), QueueState.CLAIMED)
        self.assertEqual(queue.replace(newB), QueueState.QUEUED)
        self.assertEqual(queue.renew(running, 60.0).job.connections, 1)
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        self.assertEqual(claim.job, newB)
        queue.finish(running, JobOutcome.STOPPED)
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        self.assertEqual(claim.job, newA)
        self.assertRaises(UnknownJob, queue.replace, jobConfig("z", "z"))


class GrantLimitTests(SynchronousTestCase):
    """
    L{ConnectionGrants.setLimits}: limits changed at runtime.
    """

    def test_lowerKeepsGranted(self) -> None:
        """
        A lower C{max_connections} takes back no connection granted; new
        ones are granted only once the use is below it.
        """
        grants = ConnectionGrants(8, {"s": ServerLimits(maxConnections=3)})
        held = [grants.pools.tryAcquire({serverPool("s"): 1}) for _ in range(3)]
        grants.setLimits(8, {"s": ServerLimits(maxConnections=1)})
        self.assertEqual(grants.connectionsInUse("s"), 3)
        self.assertTrue(all(grant is not None and not grant.released for grant in held))
        waiting = grants.connections([("s", "u")])
        self.assertNoResult(waiting)
        held[0].release()  # type: ignore[union-attr]
        held[1].release()  # type: ignore[union-attr]
        self.assertNoResult(waiting)
        held[2].release()  # type: ignore[union-attr]
        self.successResultOf(waiting).release()
        self.assertEqual(grants.connectionsInUse("s"), 0)

    def test_raiseGrantsWaiters(self) -> None:
        """
        A higher C{max_jobs} grants waiting job slots at once.
        """
        grants = ConnectionGrants(1, {})
        first = self.successResultOf(grants.jobSlot())
        second = grants.jobSlot()
        self.assertNoResult(second)
        grants.setLimits(2, {})
        self.assertEqual(grants.maxJobs, 2)
        self.successResultOf(second).release()
        first.release()

    def test_lowerBelowDemand(self) -> None:
        """
        A waiter whose demand a lowered limit can never grant fails with
        L{GrantImpossible}; younger waiters are then served.
        """
        limits = ServerLimits(perAccount=AccountLimits(maxConnections=2))
        grants = ConnectionGrants(8, {"s": limits})
        held = self.successResultOf(grants.connections([("s", "u"), ("s", "u")]))
        both = grants.connections([("s", "u"), ("s", "u")])
        one = grants.connections([("s", "u")])
        lowered = ServerLimits(perAccount=AccountLimits(maxConnections=1))
        grants.setLimits(8, {"s": lowered})
        self.failureResultOf(both, GrantImpossible)
        self.assertNoResult(one)
        held.release()
        self.successResultOf(one).release()
        self.assertEqual(grants.limitsOf("s"), lowered)


class ProgressRemoveTests(SynchronousTestCase):
    """
    L{MigrationProgress.removeJob}.
    """

    def test_removeJob(self) -> None:
        """
        A removed job leaves the views and the totals.
        """
        progress = MigrationProgress(lambda: 0.0)
        progress.addJob("a")
        progress.addJob("b")
        progress.removeJob("a")
        self.assertNotIn("a", progress)
        self.assertIn("b", progress)
        self.assertEqual([job.name for job in progress], ["b"])
        totals = progress.summary()["totals"]
        assert isinstance(totals, dict)
        self.assertEqual(totals["jobs_total"], 1)
        self.assertRaises(KeyError, progress.removeJob, "a")
