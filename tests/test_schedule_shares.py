"""
Tests for L{imapmig.schedule.shares}: each daemon's fair share of a
server's C{max_connections}, L{ConnectionGrants.setShares} applying it,
and the fleet's scheduler applying it at each heartbeat.
"""

from __future__ import annotations

import attrs
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import ServerLimits
from imapmig.config.model import JobConfig
from imapmig.errors import GrantImpossible
from imapmig.queue import Heartbeat, LiveDaemon
from imapmig.schedule.fleet import FleetScheduler
from imapmig.schedule.grants import ConnectionGrants, JobConnections
from imapmig.schedule.shares import FleetShares, fairShares
from tests.test_schedule_fleet import LEASE, ControlledQueue, Fleet
from tests.test_schedule_service import FakeJob


def live(*ids: str, **connections: tuple[tuple[str, int], ...]) -> tuple[LiveDaemon, ...]:
    """
    Live daemons C{ids}, each with the connections named for it.
    """
    return tuple(LiveDaemon(daemonId, connections.get(daemonId, ())) for daemonId in ids)


class FairSharesTests(SynchronousTestCase):
    """
    L{fairShares}: floor(max / n), one more for the first max mod n
    daemons by id, never more than the others leave.
    """

    def test_dividedByRank(self) -> None:
        """
        The daemons' shares, ranked by id whatever the order given, add up
        to the server's limit, the first ones taking the remainder.
        """
        daemons = live("c", "a", "b")
        shares = [fairShares({"s": 10}, daemons, me)["s"] for me in "abc"]
        self.assertEqual(shares, [4, 3, 3])
        self.assertEqual(sum(shares), 10)

    def test_alone(self) -> None:
        """
        A daemon alone has the whole limit.
        """
        self.assertEqual(fairShares({"s": 7}, live("a"), "a"), {"s": 7})

    def test_moreDaemonsThanConnections(self) -> None:
        """
        With more live daemons than the limit, the last ones by id get no
        share, and no more than the limit is shared out.
        """
        daemons = live("a", "b", "c", "d", "e")
        shares = [fairShares({"s": 3}, daemons, me)["s"] for me in "abcde"]
        self.assertEqual(shares, [1, 1, 1, 0, 0])

    def test_notLive(self) -> None:
        """
        A daemon missing from the live ones (its own lease is stale) has no
        share of any limited server.
        """
        self.assertEqual(fairShares({"s": 10, "t": 2}, live("a", "b"), "z"), {"s": 0, "t": 0})

    def test_othersInUse(self) -> None:
        """
        A share is never more than the limit less what the other daemons
        report in use there: a daemon that joins waits for the others'
        connections to close.
        """
        daemons = live("a", "b", b=(("s", 8), ("t", 1)))
        self.assertEqual(fairShares({"s": 10, "t": 10}, daemons, "a"), {"s": 2, "t": 5})
        # Its own connections do not count against it.
        daemons = live("a", "b", a=(("s", 9),))
        self.assertEqual(fairShares({"s": 10}, daemons, "a"), {"s": 5})

    def test_othersOverReporting(self) -> None:
        """
        Others reporting more than the limit leave a share of 0, never
        less; a negative count reported is taken as none.
        """
        daemons = live("a", "b", "c", b=(("s", 9),), c=(("s", 9), ("t", -4)))
        self.assertEqual(fairShares({"s": 10, "t": 4}, daemons, "a"), {"s": 0, "t": 2})

    def test_unlimitedServer(self) -> None:
        """
        A server without C{max_connections} has no share: it is not named.
        """
        self.assertEqual(fairShares({}, live("a", "b"), "a"), {})


def grants(**maxima: int | None) -> ConnectionGrants:
    """
    Grants with these servers' C{max_connections}.
    """
    return ConnectionGrants(8, {name: ServerLimits(maxConnections=m) for name, m in maxima.items()})


class FleetSharesTests(SynchronousTestCase):
    """
    L{FleetShares.apply} caps the grants at the shares of each heartbeat;
    L{FleetShares.inUse} is what the heartbeat reports.
    """

    def test_capped(self) -> None:
        """
        A share caps the server's grants below its configured limit; the
        servers without a share are named; an unlimited server is not
        capped.
        """
        pools = grants(s=4, t=1, u=None)
        shares = FleetShares(pools)
        heartbeat = Heartbeat(0.0, live=live("a", "b"))
        self.assertEqual(shares.apply(heartbeat, "a"), frozenset())
        self.assertEqual(shares.apply(heartbeat, "b"), frozenset({"t"}))
        self.assertEqual(shares.withoutShare, frozenset({"t"}))
        held = [self.successResultOf(pools.connections([("s", f"user{i}")])) for i in range(2)]
        third = pools.connections([("s", "user3")])
        self.assertNoResult(third)
        unlimited = [self.successResultOf(pools.connections([("u", "x")])) for _ in range(20)]
        self.assertEqual(shares.inUse(), (("s", 2), ("u", 20)))
        for grant in held + unlimited:
            grant.release()
        self.successResultOf(third).release()

    def test_lowerCutsNothingHigherGrants(self) -> None:
        """
        A lower share cuts no connection and grants nothing more until the
        use is below it; a higher one grants the waiters that now fit.
        """
        pools = grants(s=4)
        shares = FleetShares(pools)
        shares.apply(Heartbeat(0.0, live=live("a")), "a")
        held = [self.successResultOf(pools.connections([("s", f"user{i}")])) for i in range(3)]
        shares.apply(Heartbeat(0.0, live=live("a", "b")), "a")
        waiting = pools.connections([("s", "late")])
        self.assertEqual(pools.connectionsInUse("s"), 3)
        held.pop().release()
        self.assertNoResult(waiting)
        shares.apply(Heartbeat(0.0, live=live("a")), "a")
        held.append(self.successResultOf(waiting))
        self.assertEqual(pools.connectionsInUse("s"), 3)
        for grant in held:
            grant.release()

    def test_noShareWaits(self) -> None:
        """
        A share of 0, or below what a job needs at once, makes its
        essential connections wait rather than fail (a limit below them
        would fail them): they are granted when the share comes back.
        """
        pools = grants(s=2)
        shares = FleetShares(pools)
        shares.apply(Heartbeat(0.0, live=live("b")), "a")
        job = JobConnections(pools, [("s", "old"), ("s", "new")])
        reserved = job.reserve()
        self.assertNoResult(reserved)
        shares.apply(Heartbeat(0.0, live=live("a", "b")), "a")
        self.assertNoResult(reserved)
        shares.apply(Heartbeat(0.0, live=live("a")), "a")
        self.successResultOf(reserved)
        job.end()
        self.assertEqual(shares.inUse(), ())

    def test_limitStillImpossible(self) -> None:
        """
        A demand above the configured limit still fails at once.
        """
        pools = grants(s=1)
        FleetShares(pools).apply(Heartbeat(0.0, live=live("a")), "a")
        self.failureResultOf(pools.connections([("s", "old"), ("s", "new")]), GrantImpossible)

    def test_reloadKeepsShares(self) -> None:
        """
        A reload's new limits keep the shares, which the next heartbeat
        computes from the new limits.
        """
        pools = grants(s=4)
        shares = FleetShares(pools)
        heartbeat = Heartbeat(0.0, live=live("a", "b"))
        shares.apply(heartbeat, "a")
        pools.setLimits(8, {"s": ServerLimits(maxConnections=10)})
        held = [self.successResultOf(pools.connections([("s", f"u{i}")])) for i in range(2)]
        waiting = pools.connections([("s", "u2")])
        self.assertNoResult(waiting)
        shares.apply(heartbeat, "a")
        held.append(self.successResultOf(waiting))
        held += [self.successResultOf(pools.connections([("s", f"v{i}")])) for i in range(2)]
        self.assertEqual(shares.inUse(), (("s", 5),))
        for grant in held:
            grant.release()


class LiveQueue(ControlledQueue):
    """
    The controlled in-memory queue, whose heartbeats bring back the live
    daemons the test sets.
    """

    live: tuple[LiveDaemon, ...] = ()

    def heartbeat(
        self, owner: str, lease: float, rate: float | None = None
    ) -> Deferred[Heartbeat]:
        def withLive(heartbeat: Heartbeat) -> Heartbeat:
            return attrs.evolve(heartbeat, live=self.live)

        return ControlledQueue.heartbeat(self, owner, lease).addCallback(withLive)


class FleetSchedulerSharesTests(SynchronousTestCase):
    """
    L{FleetScheduler} applies each heartbeat's shares to its grants.
    """

    def test_eachHeartbeat(self) -> None:
        """
        Each heartbeat answered caps the daemon's grants at its share of
        the live daemons it names; no job of a server where it has none is
        granted a connection until a later heartbeat gives it one.
        """
        fleet = Fleet([], maxJobs=2, limits=ServerLimits(maxConnections=2))
        queue = fleet.queue = LiveQueue(fleet.memory)
        def build(
            config: JobConfig,
            connections: JobConnections,
            store: object,
            deadline: object,
            takeover: object,
        ) -> FakeJob:
            return FakeJob(config.name, connections, fleet.machines.job(config.name))

        service = FleetScheduler(
            queue, fleet.grants, build, fleet.progress, fleet.clock, None, fleet.clock.seconds,
            LEASE, ("mig1", 42, "1.0"), lambda: None,
        )  # fmt: skip
        service.startService()
        me = service.member.owner
        assert me is not None
        queue.live = live(me, "!first", "!second")
        fleet.clock.advance(service.member.period)
        self.assertEqual(service.shares.withoutShare, frozenset({"s"}))
        waiting = fleet.grants.connections([("s", "alice")])
        self.assertNoResult(waiting)
        queue.live = live(me, "!first")
        fleet.clock.advance(service.member.period)
        self.assertEqual(service.shares.withoutShare, frozenset())
        self.successResultOf(waiting).release()
        self.successResultOf(service.stopService())
        self.assertEqual(fleet.clock.getDelayedCalls(), [])
