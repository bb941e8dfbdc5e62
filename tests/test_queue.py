"""
Tests for L{imapmig.queue}: the in-process job queue (L{imapmig.queue.memory}).
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.queue import IJobQueue, JobOutcome, QueueCounts
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.errors import LeaseLost
from tests.test_schedule_service import jobConfig


def queueOf(count: int, leases: Clock | None = None) -> InMemoryJobQueue:
    """
    A queue of C{count} jobs, C{j0} first, timing its leases by
    C{leases} (a clock left at 0 if not given).
    """
    leaseClock = (leases or Clock()).seconds
    return InMemoryJobQueue([jobConfig(f"j{i}", f"u{i}") for i in range(count)], leaseClock)


class InMemoryJobQueueTests(SynchronousTestCase):
    """
    L{InMemoryJobQueue}.
    """

    def test_interface(self) -> None:
        """
        It provides L{IJobQueue}.
        """
        self.assertTrue(verifyObject(IJobQueue, queueOf(1)))

    def test_configurationOrder(self) -> None:
        """
        Jobs are claimed in configuration order, then there is none.
        """
        queue = queueOf(3)
        claims = [queue.claim("me", 0.0, 60.0) for _ in range(3)]
        self.assertEqual([c.job.name for c in claims if c is not None], ["j0", "j1", "j2"])
        self.assertIsNone(queue.claim("me", 0.0, 60.0))
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=3, finished=0))

    def test_finish(self) -> None:
        """
        A finished job is counted, and not claimed again.
        """
        queue = queueOf(1)
        claim = queue.claim("me", 0.0, 60.0)
        assert claim is not None
        queue.finish(claim, JobOutcome.FAILED)
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=0, finished=1))
        self.assertIsNone(queue.claim("me", 0.0, 60.0))

    def test_stoppedGoesBack(self) -> None:
        """
        A stopped job goes back to the queue at its place: it is claimed
        before the jobs after it.
        """
        queue = queueOf(3)
        first = queue.claim("me", 0.0, 60.0)
        queue.claim("me", 0.0, 60.0)
        assert first is not None
        queue.finish(first, JobOutcome.STOPPED)
        again = queue.claim("me", 0.0, 60.0)
        assert again is not None
        self.assertEqual(again.job.name, "j0")

    def test_expiredLeaseTakenOver(self) -> None:
        """
        A claim not renewed past its lease (by the queue's lease clock) may
        be claimed by another owner; the old owner's renew then raises
        L{LeaseLost}, and its finish is ignored.
        """
        leases = Clock()
        queue = queueOf(1, leases)
        old = queue.claim("a", 0.0, 60.0)
        assert old is not None
        leases.advance(59)
        self.assertIsNone(queue.claim("b", 59.0, 60.0))
        leases.advance(2)
        new = queue.claim("b", 61.0, 60.0)
        assert new is not None
        self.assertEqual((new.job.name, new.owner), ("j0", "b"))
        self.assertRaises(LeaseLost, queue.renew, old, 60.0)
        queue.finish(old, JobOutcome.COMPLETED)
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=1, finished=0))

    def test_wallClockJumpExpiresNoLease(self) -> None:
        """
        Leases are timed by the queue's lease clock, not the caller's wall
        clock: a jump of the wall clock far past a lease (C{now}) lets no
        other owner take the job over; the lease clock running past it
        does.
        """
        leases = Clock()
        queue = queueOf(1, leases)
        held = queue.claim("a", 0.0, 60.0)
        assert held is not None
        self.assertIsNone(queue.claim("b", 10_000.0, 60.0))
        self.assertEqual(queue.renew(held, 60.0).leaseUntil, 60.0)
        leases.advance(61)
        self.assertIsNotNone(queue.claim("b", 0.0, 60.0))

    def test_renew(self) -> None:
        """
        A renewed claim lives on past its first lease, C{lease} seconds
        from the renewal by the lease clock.
        """
        leases = Clock()
        queue = queueOf(1, leases)
        claim = queue.claim("a", 0.0, 60.0)
        assert claim is not None
        leases.advance(50)
        claim = queue.renew(claim, 60.0)
        self.assertEqual(claim.leaseUntil, 110.0)
        leases.advance(50)
        self.assertIsNone(queue.claim("b", 100.0, 60.0))

    def test_ownClaimsNeverExpireForTheirOwner(self) -> None:
        """
        However late its next claim (a renewal missed past the lease), an
        owner is not given back a job it holds; another owner is.
        """
        leases = Clock()
        queue = queueOf(2, leases)
        held = queue.claim("me", 0.0, 60.0)
        assert held is not None
        leases.advance(1000)
        nextClaim = queue.claim("me", 1000.0, 60.0)
        assert nextClaim is not None
        self.assertEqual(nextClaim.job.name, "j1")
        leases.advance(1000)
        self.assertIsNone(queue.claim("me", 2000.0, 60.0))
        self.assertEqual(queue.renew(held, 60.0).leaseUntil, 2060.0)

    def test_staleClaimOfTheSameOwner(self) -> None:
        """
        Claims are told apart by their generation, not their owner: once an
        owner's claim was taken over and the job claimed again by that same
        owner, the stale claim's renew raises L{LeaseLost} and its finish
        is ignored; the current claim is untouched.
        """
        leases = Clock()
        queue = queueOf(1, leases)
        stale = queue.claim("a", 0.0, 60.0)
        assert stale is not None
        leases.advance(61)
        self.assertIsNotNone(queue.claim("b", 61.0, 60.0))
        leases.advance(139)
        current = queue.claim("a", 200.0, 60.0)
        assert current is not None
        self.assertEqual((current.job.name, current.owner), ("j0", "a"))
        self.assertNotEqual(current.generation, stale.generation)
        self.assertRaises(LeaseLost, queue.renew, stale, 60.0)
        queue.finish(stale, JobOutcome.COMPLETED)
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=1, finished=0))
        current = queue.renew(current, 60.0)
        queue.finish(current, JobOutcome.COMPLETED)
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=0, finished=1))

    def test_deferredNotClaimedBeforeDue(self) -> None:
        """
        A deferred job goes back to the queue but is not claimed before its
        time; L{InMemoryJobQueue.nextDue} says when; once due it is claimed
        before the jobs after it.
        """
        queue = queueOf(3)
        first = queue.claim("me", 0.0, 60.0)
        assert first is not None
        queue.finish(first, JobOutcome.DEFERRED, 100.0)
        self.assertEqual(queue.nextDue(), 100.0)
        self.assertEqual(queue.counts(), QueueCounts(queued=2, claimed=0, finished=0, deferred=1))
        second = queue.claim("me", 50.0, 60.0)
        assert second is not None
        self.assertEqual(second.job.name, "j1")
        again = queue.claim("me", 100.0, 60.0)
        assert again is not None
        self.assertEqual(again.job.name, "j0")
        self.assertIsNone(queue.nextDue())
