"""
Tests for L{imapmig.queue}: the in-process job queue (L{imapmig.queue.memory}),
and the contract every queue keeps (L{JobQueueContractMixin}, run on the
PostgreSQL queue by L{tests.test_queue_postgresql}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping, Protocol, Sequence

import attrs

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.queue import (
    Heartbeat,
    IJobQueue,
    JobClaim,
    JobOutcome,
    ListChange,
    QueueCounts,
    QueueState,
    Requested,
)
from imapmig.config.model import JobConfig
from imapmig.queue.memory import AsyncJobQueue, InMemoryJobQueue
from imapmig.errors import ConfigError, ControlRefused, LeaseLost, UnknownJob
from tests.test_schedule_service import jobConfig

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object


@attrs.define
class FakeUserList:
    """
    A user list (L{imapmig.config.model.UserList}) of C{count} rows made
    in memory, counting how often its rows are read; with C{readable}
    false, reading them fails the test.
    """

    name: str = "users"
    entry: str = "jobs[0]"
    path: str = "/lists/users.csv"
    fileDigest: str = "f" * 64
    count: int = 3
    settings: object = ("template", 3)
    readable: bool = True
    reads: int = 0
    built: int = 0
    broken: bool = False

    def rows(self, taken: Mapping[str, str]) -> Iterator[tuple[JobConfig, dict[str, object]]]:
        """
        Each row's job and params, unless not C{readable}.
        """
        if not self.readable:
            raise AssertionError("the rows of a user list were read")
        self.reads += 1
        for index in range(self.count):
            params: dict[str, object] = {"row": index + 2, "fields": {"user": f"u{index}"}}
            yield self.job(params), params

    def job(self, params: Mapping[str, object]) -> JobConfig:
        """
        The job of the row of C{params}; with C{broken}, a problem.
        """
        if self.broken:
            raise ConfigError([f"{self.path}: row {params['row']}: destination_password_file: gone"])
        self.built += 1
        fields = params["fields"]
        assert isinstance(fields, dict)
        return jobConfig(f"{self.name}-{fields['user']}", fields["user"])


class ContractQueue(Protocol):
    """
    The methods of a queue the contract checks (a PostgreSQL queue's are
    blocking, the in-memory one's immediate).
    """

    def register(self, host: str, pid: int, version: str, lease: float) -> str: ...
    def heartbeat(self, owner: str, lease: float) -> Heartbeat: ...
    def claim(
        self, owner: str, now: float, lease: float, skipServers: frozenset[str] = frozenset()
    ) -> JobClaim | None: ...
    def renew(self, claim: JobClaim, lease: float) -> JobClaim: ...
    def finish(
        self, claim: JobClaim, outcome: JobOutcome, notBefore: float | None = None
    ) -> None: ...
    def nextDue(self) -> float | None: ...
    def counts(self) -> QueueCounts: ...
    def state(self, name: str) -> QueueState: ...
    def pause(self, name: str) -> QueueState: ...
    def resume(self, name: str) -> QueueState: ...
    def cancel(self, name: str) -> QueueState: ...
    def requeue(self, name: str) -> QueueState: ...
    def add(self, job: JobConfig) -> None: ...
    def remove(self, name: str) -> QueueState: ...
    def replace(self, job: JobConfig) -> QueueState: ...
    def replaceList(self, jobs: Sequence[JobConfig]) -> ListChange: ...


class JobQueueContractMixin(_MixinBase):
    """
    What every job queue does with daemons, claims, leases and takeovers.
    Mixed into a test case that defines L{makeQueue} and L{expire}; its
    daemons register with a lease of L{LONG} seconds, and those whose lease
    a test ends claim with one of L{SHORT} (a claim renews the lease), so a
    slow machine cannot end a lease between registering and claiming.
    """

    LONG = 600.0
    SHORT = 1.0

    def makeQueue(self, count: int) -> ContractQueue:
        """
        A queue of C{count} jobs, C{j0} first.
        """
        raise NotImplementedError()

    def expire(self, queue: ContractQueue, owner: str) -> None:
        """
        Return once the lease of daemon C{owner} (L{SHORT} seconds) has run
        out by the queue's lease clock.
        """
        raise NotImplementedError()

    def daemon(self, queue: ContractQueue, lease: float | None = None) -> str:
        """
        Register a daemon with a lease of C{lease} (L{LONG} if not given).
        """
        return queue.register("host1", 1234, "1.0", self.LONG if lease is None else lease)

    def test_configurationOrder(self) -> None:
        """
        Jobs are claimed in configuration order, then there is none.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        claims = [queue.claim(me, 0.0, self.LONG) for _ in range(3)]
        self.assertEqual([c.job.name for c in claims if c is not None], ["j0", "j1", "j2"])
        self.assertEqual([c.position for c in claims if c is not None], [0, 1, 2])
        self.assertIsNone(queue.claim(me, 0.0, self.LONG))
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=3, finished=0))

    def test_skipServers(self) -> None:
        """
        A claim skips the jobs with a server in its C{skipServers} (a
        daemon's servers without its share), which stay queued at their
        place for a claim without it.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        self.assertIsNone(queue.claim(me, 0.0, self.LONG, frozenset({"s"})))
        first = queue.claim(me, 0.0, self.LONG, frozenset({"t"}))
        self.assertEqual(None if first is None else first.job.name, "j0")
        self.assertIsNone(queue.claim(me, 0.0, self.LONG, frozenset({"t", "s"})))
        claims = [queue.claim(me, 0.0, self.LONG) for _ in range(3)]
        self.assertEqual([c.job.name if c else None for c in claims], ["j1", "j2", None])

    def test_stoppedGoesBackAtItsPlace(self) -> None:
        """
        A stopped job goes back to the queue at its place, claimed before
        the jobs after it; a finished one is counted and not claimed again.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        first = queue.claim(me, 0.0, self.LONG)
        second = queue.claim(me, 0.0, self.LONG)
        assert first is not None and second is not None
        queue.finish(first, JobOutcome.STOPPED)
        queue.finish(second, JobOutcome.COMPLETED)
        again = queue.claim(me, 0.0, self.LONG)
        assert again is not None
        self.assertEqual((again.job.name, again.takenFrom), ("j0", None))
        self.assertGreater(again.generation, first.generation)
        self.assertEqual(queue.state("j1"), QueueState.DONE)
        last = queue.claim(me, 0.0, self.LONG)
        assert last is not None
        self.assertEqual(last.job.name, "j2")

    def test_daemonIdNeverReused(self) -> None:
        """
        Each registration, even from the same host and pid, gets an id of
        its own.
        """
        queue = self.makeQueue(1)
        ids = {self.daemon(queue) for _ in range(20)}
        self.assertEqual(len(ids), 20)

    def test_heartbeatRenewsEveryHeldJob(self) -> None:
        """
        One heartbeat renews the lease of every job the daemon holds, and
        brings back the controls asked of them.
        """
        queue = self.makeQueue(2)
        me = self.daemon(queue)
        first = queue.claim(me, 0.0, self.LONG)
        queue.claim(me, 0.0, self.LONG)
        assert first is not None
        self.assertEqual(queue.pause("j0"), QueueState.CLAIMED)
        beat = queue.heartbeat(me, self.LONG)
        self.assertGreaterEqual(beat.leaseUntil, first.leaseUntil)
        self.assertEqual(beat.requests, (("j0", Requested.PAUSE),))
        self.assertEqual(queue.renew(first, self.LONG).requested, Requested.PAUSE)
        queue.finish(first, JobOutcome.STOPPED)
        self.assertEqual(queue.state("j0"), QueueState.PAUSED)

    def test_expiredLeaseNeverRevived(self) -> None:
        """
        Once a daemon's lease ran out, its heartbeat, its claims and its
        renewals raise L{LeaseLost}, however often tried.
        """
        queue = self.makeQueue(2)
        old = self.daemon(queue)
        held = queue.claim(old, 0.0, self.SHORT)
        assert held is not None
        self.expire(queue, old)
        self.assertRaises(LeaseLost, queue.heartbeat, old, self.LONG)
        self.assertRaises(LeaseLost, queue.heartbeat, old, self.LONG)
        self.assertRaises(LeaseLost, queue.claim, old, 0.0, self.LONG)
        self.assertRaises(LeaseLost, queue.renew, held, self.LONG)

    def test_takeover(self) -> None:
        """
        A job whose owner's lease ran out is claimed by another daemon, as
        a takeover naming the old owner, under a newer generation; the old
        owner's renewal raises L{LeaseLost} and its finish changes nothing.
        """
        queue = self.makeQueue(2)
        old = self.daemon(queue)
        stale = queue.claim(old, 0.0, self.SHORT)
        assert stale is not None
        self.expire(queue, old)
        new = self.daemon(queue)
        taken = queue.claim(new, 0.0, self.LONG)
        assert taken is not None
        self.assertEqual((taken.job.name, taken.owner, taken.takenFrom), ("j0", new, old))
        self.assertGreater(taken.generation, stale.generation)
        self.assertRaises(LeaseLost, queue.renew, stale, self.LONG)
        queue.finish(stale, JobOutcome.COMPLETED)
        self.assertEqual(queue.state("j0"), QueueState.CLAIMED)
        queue.finish(queue.renew(taken, self.LONG), JobOutcome.COMPLETED)
        self.assertEqual(queue.state("j0"), QueueState.DONE)

    def test_staleClaimOfTheSameDaemon(self) -> None:
        """
        Claims are told apart by their generation, not only their owner: a
        daemon's earlier claim of a job it claimed again since is stale,
        its renewal raises L{LeaseLost} and its finish changes nothing.
        """
        queue = self.makeQueue(1)
        me = self.daemon(queue)
        stale = queue.claim(me, 0.0, self.LONG)
        assert stale is not None
        queue.finish(stale, JobOutcome.STOPPED)
        current = queue.claim(me, 0.0, self.LONG)
        assert current is not None
        self.assertRaises(LeaseLost, queue.renew, stale, self.LONG)
        queue.finish(stale, JobOutcome.COMPLETED)
        self.assertEqual(queue.state("j0"), QueueState.CLAIMED)
        self.assertEqual(queue.renew(current, self.LONG).generation, current.generation)

    def test_liveLeaseNotTakenOver(self) -> None:
        """
        A job whose owner's lease lives is not claimed by another daemon.
        """
        queue = self.makeQueue(1)
        queue.claim(self.daemon(queue), 0.0, self.LONG)
        self.assertIsNone(queue.claim(self.daemon(queue), 0.0, self.LONG))

    def test_deferredNotClaimedBeforeDue(self) -> None:
        """
        A deferred job is not claimed before its time (the caller's wall
        clock); C{nextDue} says when; once due it is claimed first.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        first = queue.claim(me, 0.0, self.LONG)
        assert first is not None
        queue.finish(first, JobOutcome.DEFERRED, 100.0)
        self.assertEqual(queue.nextDue(), 100.0)
        self.assertEqual(queue.counts(), QueueCounts(queued=2, claimed=0, finished=0, deferred=1))
        self.assertEqual(queue.state("j0"), QueueState.QUEUED)
        second = queue.claim(me, 50.0, self.LONG)
        assert second is not None
        self.assertEqual(second.job.name, "j1")
        again = queue.claim(me, 100.0, self.LONG)
        assert again is not None
        self.assertEqual(again.job.name, "j0")
        self.assertIsNone(queue.nextDue())


    def test_controlsOnQueuedJobs(self) -> None:
        """
        A paused job is not claimed until resumed, then before the jobs
        never claimed; a cancelled one ends; a done one requeued is claimed
        again; a cancelled one cannot be requeued; unknown names are
        refused.
        """
        queue = self.makeQueue(4)
        me = self.daemon(queue)
        self.assertEqual(queue.pause("j0"), QueueState.PAUSED)
        self.assertRaises(ControlRefused, queue.pause, "j0")
        self.assertEqual(queue.cancel("j1"), QueueState.CANCELLED)
        self.assertRaises(ControlRefused, queue.requeue, "j1")
        self.assertRaises(UnknownJob, queue.pause, "nope")
        first = queue.claim(me, 0.0, self.LONG)
        assert first is not None
        self.assertEqual(first.job.name, "j2")
        self.assertEqual(queue.resume("j0"), QueueState.QUEUED)
        self.assertEqual(
            queue.counts(), QueueCounts(queued=2, claimed=1, finished=1, cancelled=1)
        )
        again = queue.claim(me, 0.0, self.LONG)
        assert again is not None
        self.assertEqual(again.job.name, "j0")
        queue.finish(again, JobOutcome.COMPLETED)
        self.assertEqual(queue.requeue("j0"), QueueState.QUEUED)
        last = queue.claim(me, 0.0, self.LONG)
        assert last is not None
        self.assertEqual(last.job.name, "j0")

    def test_controlsOnClaimedJobs(self) -> None:
        """
        A control on a claimed job is a request its finish applies: a
        cancel ends it once stopped, a rerun queues it again however it
        ended.
        """
        queue = self.makeQueue(2)
        me = self.daemon(queue)
        first = queue.claim(me, 0.0, self.LONG)
        second = queue.claim(me, 0.0, self.LONG)
        assert first is not None and second is not None
        self.assertEqual(queue.cancel("j0"), QueueState.CLAIMED)
        self.assertRaises(ControlRefused, queue.pause, "j0")
        self.assertEqual(queue.requeue("j1"), QueueState.CLAIMED)
        queue.finish(first, JobOutcome.STOPPED)
        queue.finish(second, JobOutcome.COMPLETED)
        self.assertEqual(
            (queue.state("j0"), queue.state("j1")), (QueueState.CANCELLED, QueueState.QUEUED)
        )

    def test_reload(self) -> None:
        """
        A reload adds a job after the others, removes a queued job at once
        and a claimed one when its claim ends, and gives a job a new
        configuration from its next claim.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        held = queue.claim(me, 0.0, self.LONG)
        assert held is not None
        queue.add(jobConfig("new", "u9"))
        self.assertRaises(ValueError, queue.add, jobConfig("j1", "u1"))
        self.assertEqual(queue.remove("j1"), QueueState.QUEUED)
        self.assertEqual(queue.remove("j0"), QueueState.CLAIMED)
        self.assertRaises(UnknownJob, queue.state, "j0")
        self.assertRaises(UnknownJob, queue.state, "j1")
        self.assertEqual(queue.replace(jobConfig("j2", "changed")), QueueState.QUEUED)
        queue.finish(held, JobOutcome.STOPPED)
        claims = [queue.claim(me, 0.0, self.LONG) for _ in range(3)]
        self.assertEqual(
            [(c.job.name, c.job.destination.user) for c in claims if c is not None],
            [("j2", "changed"), ("new", "u9")],
        )

    def test_replaceList(self) -> None:
        """
        A reload's C{replaceList} removes the jobs no longer listed (a
        claimed one when its claim ends), gives a changed job its new
        configuration and adds the new ones after the others, saying so
        with the list's next generation; the same list again changes
        nothing.
        """
        queue = self.makeQueue(3)
        me = self.daemon(queue)
        held = queue.claim(me, 0.0, self.LONG)
        assert held is not None
        jobs = [jobConfig("new", "u9"), jobConfig("j2", "changed")]
        self.assertEqual(
            queue.replaceList(jobs), ListChange(2, added=1, removed=1, leaving=1, changed=1)
        )
        self.assertEqual(queue.replaceList(jobs), ListChange(2, loaded=False))
        self.assertRaises(UnknownJob, queue.state, "j0")
        queue.finish(held, JobOutcome.STOPPED)
        claims = [queue.claim(me, 0.0, self.LONG) for _ in range(3)]
        self.assertEqual(
            [(c.job.name, c.job.destination.user) for c in claims if c is not None],
            [("j2", "changed"), ("new", "u9")],
        )

    def test_removedJobNotTakenOver(self) -> None:
        """
        A claimed job a reload removed leaves the queue when its owner's
        lease runs out: no other daemon takes it over.
        """
        queue = self.makeQueue(1)
        old = self.daemon(queue)
        self.assertIsNotNone(queue.claim(old, 0.0, self.SHORT))
        queue.remove("j0")
        self.expire(queue, old)
        self.assertIsNone(queue.claim(self.daemon(queue), 0.0, self.LONG))
        self.assertEqual(queue.counts(), QueueCounts(queued=0, claimed=0, finished=0))

    def test_removedWhileClaimedAddedBack(self) -> None:
        """
        A claimed job removed, then added again before its claim ended,
        stays, and runs as configured now at its next claim.
        """
        queue = self.makeQueue(1)
        me = self.daemon(queue)
        held = queue.claim(me, 0.0, self.LONG)
        assert held is not None
        queue.remove("j0")
        queue.add(jobConfig("j0", "again"))
        queue.finish(held, JobOutcome.STOPPED)
        claim = queue.claim(me, 0.0, self.LONG)
        assert claim is not None
        self.assertEqual((claim.job.name, claim.job.destination.user), ("j0", "again"))


class InMemoryJobQueueContractTests(JobQueueContractMixin, SynchronousTestCase):
    """
    L{InMemoryJobQueue} keeps the queues' contract, its leases timed by a
    L{Clock}.
    """

    def setUp(self) -> None:
        self.leases = Clock()

    def makeQueue(self, count: int) -> InMemoryJobQueue:
        return queueOf(count, self.leases)

    def expire(self, queue: ContractQueue, owner: str) -> None:
        self.leases.advance(self.SHORT + 1)


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

    def test_asyncJobList(self) -> None:
        """
        Made asynchronous, the in-memory queue replaces its list as a
        reload asks, and its list never differs from the fleet's (it is a
        fleet of one).
        """
        queue = AsyncJobQueue(queueOf(2))
        self.assertEqual(
            self.successResultOf(queue.replaceList([jobConfig("j1", "u1")])),
            ListChange(2, removed=1),
        )
        self.assertIsNone(self.successResultOf(queue.listDiffers()))

    def test_asyncJobListWithUserLists(self) -> None:
        """
        A reload with user lists kept as written lists their rows after
        the jobs (the in-memory queue holds every job).
        """
        queue = AsyncJobQueue(queueOf(1))
        self.assertEqual(
            self.successResultOf(queue.replaceList([jobConfig("j0", "u0")], [FakeUserList(count=2)])),
            ListChange(2, added=2),
        )
        self.assertEqual([queue.queue.state(n) for n in ("users-u0", "users-u1")], [QueueState.QUEUED] * 2)

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
