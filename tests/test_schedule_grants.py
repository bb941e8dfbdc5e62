"""
Tests for L{imapmig.schedule.grants}: FIFO grants over job-slot, server
and account pools.
"""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.schedule.grants import (
    ConnectionGrants,
    Grant,
    GrantPools,
    IGrant,
    JobConnections,
    PoolKey,
    accountPool,
    connectionDemand,
    serverPool,
)
from imapmig.errors import ConnectionNotGranted, GrantImpossible


def limited(server: int | None, account: int | None, maxJobs: int = 8) -> ConnectionGrants:
    """
    Grants for one server C{s} with these limits.
    """
    return ConnectionGrants(maxJobs, {"s": ServerLimits(maxConnections=server, perAccount=AccountLimits(maxConnections=account))})


class GrantPoolsTests(SynchronousTestCase):
    """
    L{GrantPools}: all-or-nothing, oldest first.
    """

    def test_immediate(self) -> None:
        """
        A demand that fits is granted at once; releasing gives the units
        back, and a second release does nothing.
        """
        pools = GrantPools(lambda key: 2)
        grant = self.successResultOf(pools.acquire({"a": 2}))
        self.assertEqual(pools.inUse("a"), 2)
        grant.release()
        grant.release()
        self.assertEqual(pools.inUse("a"), 0)

    def test_fifo(self) -> None:
        """
        Waiters are granted in the order they asked, as units come back.
        """
        pools = GrantPools(lambda key: 1)
        first = self.successResultOf(pools.acquire({"a": 1}))
        waiting = [pools.acquire({"a": 1}) for _ in range(3)]
        order: list[int] = []

        def granted(grant: Grant, index: int) -> Grant:
            order.append(index)
            return grant

        for index, d in enumerate(waiting):
            d.addCallback(granted, index)
        self.assertEqual(order, [])
        first.release()
        self.assertEqual(order, [0])
        self.successResultOf(waiting[0]).release()
        self.successResultOf(waiting[1]).release()
        self.assertEqual(order, [0, 1, 2])
        self.successResultOf(waiting[2]).release()
        self.assertEqual(pools.inUse("a"), 0)

    def test_allOrNothing(self) -> None:
        """
        A demand of two pools takes nothing while one of them is full.
        """
        pools = GrantPools(lambda key: 1)
        held = self.successResultOf(pools.acquire({"b": 1}))
        both = pools.acquire({"a": 1, "b": 1})
        self.assertNoResult(both)
        self.assertEqual(pools.inUse("a"), 0)
        held.release()
        grant = self.successResultOf(both)
        self.assertEqual((pools.inUse("a"), pools.inUse("b")), (1, 1))
        grant.release()

    def test_noStarvation(self) -> None:
        """
        An old waiter that needs two pools is not overtaken forever by
        younger waiters that need one of them: the units it is owed are
        kept for it.
        """
        pools = GrantPools(lambda key: 1)
        holdA = self.successResultOf(pools.acquire({"a": 1}))
        holdB = self.successResultOf(pools.acquire({"b": 1}))
        old = pools.acquire({"a": 1, "b": 1})
        young = pools.acquire({"b": 1})
        holdB.release()
        # b is free, but owed to the older waiter.
        self.assertNoResult(young)
        self.assertEqual(pools.inUse("b"), 0)
        holdA.release()
        grant = self.successResultOf(old)
        self.assertNoResult(young)
        grant.release()
        self.successResultOf(young).release()

    def test_youngerFitsWhereOlderDoesNot(self) -> None:
        """
        A younger waiter whose pools owe nothing to older ones is granted
        while an older one still waits on another pool.
        """
        pools = GrantPools(lambda key: 1)
        holdA = self.successResultOf(pools.acquire({"a": 1}))
        old = pools.acquire({"a": 1})
        other = pools.acquire({"c": 1})
        self.assertNoResult(old)
        self.successResultOf(other).release()
        holdA.release()
        self.successResultOf(old).release()

    def test_cancel(self) -> None:
        """
        Cancelling a waiter removes it: it never gets units, and what it
        was owed goes to the next.
        """
        pools = GrantPools(lambda key: 1)
        hold = self.successResultOf(pools.acquire({"a": 1}))
        cancelled = pools.acquire({"a": 1, "b": 1})
        younger = pools.acquire({"b": 1})
        self.assertNoResult(younger)
        cancelled.cancel()
        self.failureResultOf(cancelled, CancelledError)
        self.assertEqual(pools.waiting, 0)
        grant = self.successResultOf(younger)
        hold.release()
        self.assertEqual(pools.inUse("a"), 0)
        grant.release()

    def test_impossible(self) -> None:
        """
        A demand above a pool's limit fails at once.
        """
        pools = GrantPools(lambda key: 1)
        failure = self.failureResultOf(pools.acquire({"a": 2}), GrantImpossible)
        self.assertIn("limit is 1", str(failure.value))
        self.assertIsNone(pools.tryAcquire({"a": 2}))

    def test_tryAcquire(self) -> None:
        """
        L{GrantPools.tryAcquire} grants only what fits now and is owed to
        no waiter.
        """
        pools = GrantPools(lambda key: 1)
        grant = pools.tryAcquire({"a": 1})
        assert grant is not None
        self.assertIsNone(pools.tryAcquire({"a": 1}))
        waiter = pools.acquire({"a": 1})
        grant.release()
        self.assertIsNone(pools.tryAcquire({"a": 1}))
        self.successResultOf(waiter).release()

    def test_tryAcquireBesideUnrelatedWaiter(self) -> None:
        """
        A waiter on other pools does not stop L{GrantPools.tryAcquire}: a
        demand that fits after what every waiter is owed is granted; one
        that would take a unit a waiter is owed is not.
        """
        pools = GrantPools(lambda key: 2 if key == "a" else 1)
        slot = pools.acquire({"jobs": 1})
        self.successResultOf(slot)
        waitingSlot = pools.acquire({"jobs": 1})
        self.assertNoResult(waitingSlot)
        first = pools.tryAcquire({"a": 1})
        assert first is not None
        waitingA = pools.acquire({"a": 2, "b": 1})
        self.assertNoResult(waitingA)
        # One unit of "a" is free, but the waiter is owed it.
        self.assertIsNone(pools.tryAcquire({"a": 1}))
        # "c" is nobody's: granted beside both waiters.
        other = pools.tryAcquire({"c": 1})
        assert other is not None
        first.release()
        self.successResultOf(waitingA).release()
        other.release()
        waitingSlot.cancel()
        self.failureResultOf(waitingSlot, CancelledError)
        self.assertEqual(pools.waiting, 0)

    def test_neverExceeded(self) -> None:
        """
        Whatever order grants are asked for and released in, no pool ever
        holds more than its limit, and every request is served.
        """
        limits = {"s": 3, "a1": 1, "a2": 1, "a3": 2}
        pools = GrantPools(lambda key: limits[str(key)])
        demands: list[dict[PoolKey, int]] = [
            {"s": 1, "a1": 1}, {"s": 1, "a2": 1}, {"s": 2, "a3": 2}, {"s": 1, "a1": 1},
            {"s": 1, "a3": 1}, {"s": 1, "a2": 1}, {"s": 3}, {"s": 1, "a3": 1},
        ]  # fmt: skip
        held: list[Grant] = []
        served = 0

        def granted(grant: Grant) -> None:
            nonlocal served
            served += 1
            held.append(grant)
            for key, limit in limits.items():
                self.assertLessEqual(pools.inUse(key), limit)

        for demand in demands * 5:
            pools.acquire(demand).addCallback(granted)
        while held:
            # Release the oldest holder first, then the newest: both orders.
            held.pop(0 if served % 2 else -1).release()
        self.assertEqual(served, len(demands) * 5)
        self.assertEqual(pools.waiting, 0)


class ConnectionGrantsTests(SynchronousTestCase):
    """
    L{ConnectionGrants}: job slots, server and account pools.
    """

    def test_jobSlots(self) -> None:
        """
        At most C{maxJobs} job slots are held; the next waits for one.
        """
        grants = limited(None, None, maxJobs=2)
        slots = [self.successResultOf(grants.jobSlot()) for _ in range(2)]
        third = grants.jobSlot()
        self.assertNoResult(third)
        slots[0].release()
        self.successResultOf(third).release()
        slots[1].release()

    def test_serverAndAccount(self) -> None:
        """
        A connection takes a unit of its server's pool and one of its
        account's; the account's limit binds before the server's.
        """
        grants = limited(3, 1)
        alice = self.successResultOf(grants.connections([("s", "alice")]))
        secondAlice = grants.connections([("s", "alice")])
        self.assertNoResult(secondAlice)
        bob = self.successResultOf(grants.connections([("s", "bob")]))
        self.assertEqual(grants.connectionsInUse("s"), 2)
        self.assertEqual(grants.connectionsInUse("s", "alice"), 1)
        alice.release()
        self.successResultOf(secondAlice).release()
        bob.release()
        self.assertEqual(grants.connectionsInUse("s"), 0)

    def test_sameServerTwice(self) -> None:
        """
        A job copying between two accounts of one server counts twice
        against the server's limit.
        """
        self.assertEqual(
            connectionDemand([("s", "old"), ("s", "new")]),
            {serverPool("s"): 2, accountPool("s", "old"): 1, accountPool("s", "new"): 1},
        )
        grants = limited(2, None)
        both = self.successResultOf(grants.connections([("s", "old"), ("s", "new")]))
        self.assertEqual(grants.connectionsInUse("s"), 2)
        other = grants.connections([("s", "carol")])
        self.assertNoResult(other)
        both.release()
        self.successResultOf(other).release()

    def test_unlimitedServer(self) -> None:
        """
        A server with no limits, or not configured, never makes anyone wait.
        """
        grants = limited(None, None)
        held = [self.successResultOf(grants.connections([("s", "a"), ("t", "a")])) for _ in range(50)]
        self.assertEqual(grants.connectionsInUse("s"), 50)
        for grant in held:
            grant.release()


class JobConnectionsTests(SynchronousTestCase):
    """
    L{JobConnections}: a job's essential connections, kept for its run,
    and its extra ones.
    """

    def obtain(self, connections: JobConnections, user: str, wait: bool = True) -> IGrant:
        return self.successResultOf(connections.grantFor("s", user, wait)())

    def test_essentialLentAndReturned(self) -> None:
        """
        The essential connection is lent to each session in turn and comes
        back to the job, not to the pools, until the job ends.
        """
        grants = limited(1, None)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        for _ in range(3):
            self.obtain(job, "alice").release()
        self.assertEqual(grants.connectionsInUse("s"), 1)
        other = JobConnections(grants, [("s", "bob")])
        reserving = other.reserve()
        self.assertNoResult(reserving)
        job.end()
        self.successResultOf(reserving)
        other.end()
        self.assertEqual(grants.connectionsInUse("s"), 0)

    def test_endWaitsForSessions(self) -> None:
        """
        A job that ends while a session still holds its essential
        connection gives it back to the pools only when that session's
        grant is released (its connection closed).
        """
        grants = limited(None, None)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        lent = self.obtain(job, "alice")
        job.end()
        self.assertEqual(grants.connectionsInUse("s"), 1)
        lent.release()
        self.assertEqual(grants.connectionsInUse("s"), 0)

    def test_extraWaits(self) -> None:
        """
        With its essential connection in use, a job's next connection waits
        for the pools, and goes back to them when released.
        """
        grants = limited(2, None)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        self.obtain(job, "alice")
        blocker = self.successResultOf(grants.connections([("s", "bob")]))
        extra = job.grantFor("s", "alice", wait=True)()
        self.assertNoResult(extra)
        blocker.release()
        grant = self.successResultOf(extra)
        self.assertEqual(grants.connectionsInUse("s"), 2)
        grant.release()
        self.assertEqual(grants.connectionsInUse("s"), 1)

    def test_extraWithoutWaiting(self) -> None:
        """
        Asked not to wait, an extra connection not grantable now fails with
        L{ConnectionNotGranted}.
        """
        grants = limited(2, None)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        self.obtain(job, "alice")
        blocker = self.successResultOf(grants.connections([("s", "bob")]))
        self.failureResultOf(job.grantFor("s", "alice", wait=False)(), ConnectionNotGranted)
        blocker.release()
        self.obtain(job, "alice", wait=False).release()

    def test_extraConnectionWhileJobsQueued(self) -> None:
        """
        While more jobs wait for a slot than C{max_jobs}, a running job
        still gets an extra connection granted at once (its IMAP source
        reads on more than one connection).
        """
        grants = limited(4, None, maxJobs=1)
        self.successResultOf(grants.jobSlot())
        queued = grants.jobSlot()
        self.assertNoResult(queued)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        self.obtain(job, "alice")
        extra = self.successResultOf(job.grantFor("s", "alice", wait=False)())
        self.assertEqual(grants.connectionsInUse("s"), 2)
        extra.release()
        queued.cancel()
        self.failureResultOf(queued, CancelledError)

    def test_hopelessExtra(self) -> None:
        """
        An extra connection to an account whose limit the job's own
        essential connection fills is refused at once, not queued (it would
        keep a server unit from other jobs for nothing).
        """
        grants = limited(3, 1)
        job = JobConnections(grants, [("s", "alice")])
        self.successResultOf(job.reserve())
        self.obtain(job, "alice")
        failure = self.failureResultOf(job.grantFor("s", "alice", wait=True)(), ConnectionNotGranted)
        self.assertIn("per_account.max_connections of alice at s (1)", str(failure.value))
        self.assertEqual(grants.pools.waiting, 0)

    def test_impossibleJob(self) -> None:
        """
        A job whose essential connections exceed a limit (source and
        destination on a server allowing one connection) fails to reserve.
        """
        grants = limited(1, None)
        job = JobConnections(grants, [("s", "old"), ("s", "new")])
        self.failureResultOf(job.reserve(), GrantImpossible)
        job.end()
        self.assertEqual(grants.connectionsInUse("s"), 0)

    def test_cancelReserve(self) -> None:
        """
        A job stopped while it waits for its essential connections gives
        up its place; it never takes them.
        """
        grants = limited(1, None)
        holder = self.successResultOf(grants.connections([("s", "x")]))
        job = JobConnections(grants, [("s", "alice")])
        reserving = job.reserve()
        reserving.cancel()
        self.failureResultOf(reserving, CancelledError)
        job.end()
        holder.release()
        self.assertEqual(grants.connectionsInUse("s"), 0)
        self.assertEqual(grants.pools.waiting, 0)
