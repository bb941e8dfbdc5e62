"""
Tests for L{imapmig.throttle}: token buckets on a simulated clock,
shared between jobs, held by a server's "wait", and daily budgets kept in
the state store across restarts and renewed at UTC midnight.
"""

from __future__ import annotations

import calendar
from typing import Any, Coroutine, TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.errors import DailyLimitReached, QuotaExceeded, ServerBusy
from imapmig.throttle import DOWNLOAD, UPLOAD, Throttle, ThrottleRegistry, nextMidnight, utcDay
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore

_T = TypeVar("_T")

NOON = float(calendar.timegm((2030, 1, 1, 12, 0, 0)))
MIDNIGHT = float(calendar.timegm((2030, 1, 2, 0, 0, 0)))


class Pump:
    """
    A job that sends messages of C{octets} octets as fast as a throttle
    admits them, one at a time; it counts what was admitted.
    """

    def __init__(self, throttle: Throttle, octets: int = 1, messages: int = 1) -> None:
        self.throttle = throttle
        self.octets = octets
        self.messages = messages
        self.admitted = 0
        self.pending: Deferred[None] | None = None
        self.cancelled = False
        self.pump()

    def pump(self) -> None:
        while True:
            waiting = self.throttle.admit(self.messages, self.octets)
            if not waiting.called:
                self.pending = waiting
                waiting.addCallbacks(self._admitted, self._cancelled)
                return
            self.admitted += 1

    def _admitted(self, result: None) -> None:
        self.pending = None
        self.admitted += 1
        self.pump()

    def _cancelled(self, failure: object) -> None:
        self.pending = None
        self.cancelled = True


def run(clock: Clock, seconds: float, step: float = 0.05) -> None:
    """
    Advance C{clock} by C{seconds} in steps, as a reactor would.
    """
    for _ in range(round(seconds / step)):
        clock.advance(step)


def assertAdmittedAfter(
    case: SynchronousTestCase, clock: Clock, waiting: Deferred[None], seconds: float
) -> None:
    """
    Check that the admission C{waiting} is still held a tenth of a second
    before C{seconds} have passed on C{clock}, and granted when they have.
    """
    clock.advance(seconds - 0.1)
    case.assertNoResult(waiting)
    clock.advance(0.1)
    case.successResultOf(waiting)


def limits(
    messagesPerSecond: float | None = None,
    bytesPerSecond: int | None = None,
    account: AccountLimits = AccountLimits(),
) -> ServerLimits:
    return ServerLimits(
        messagesPerSecond=messagesPerSecond, bytesPerSecond=bytesPerSecond, perAccount=account
    )


class TokenBucketTests(SynchronousTestCase):
    """
    Rates held over a simulated minute, bursts, sharing, holding and
    cancelling.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.registry = ThrottleRegistry(self.clock, MemoryStateStore())

    def throttle(
        self, serverLimits: ServerLimits, user: str = "alice", server: str = "gmail"
    ) -> Throttle:
        throttle = self.registry.throttleFor(server, serverLimits, user, UPLOAD)
        assert throttle is not None
        return throttle

    def assertAround(self, count: int, expected: int, tolerance: int = 2) -> None:
        """
        Assert that C{count} is C{expected} within C{tolerance} (the
        rounding of a simulated clock advanced in steps).
        """
        self.assertTrue(abs(count - expected) <= tolerance, f"{count}, expected {expected}")

    def stop(self, *pumps: Pump) -> None:
        for pump in pumps:
            pump.throttle.cancelWaits()
            self.assertTrue(pump.cancelled)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_unlimited(self) -> None:
        """
        A server with no rate and no budget has no throttle: its jobs pay
        nothing.
        """
        self.assertIsNone(self.registry.throttleFor("s", ServerLimits(), "alice", UPLOAD))
        self.assertIsNone(
            self.registry.throttleFor(
                "s", ServerLimits(perAccount=AccountLimits(maxConnections=3)), "alice", UPLOAD
            )
        )

    def test_messagesPerSecond(self) -> None:
        """
        Over a minute at 10 messages per second, 600 messages pass after the
        first second's burst of 10, within one message.
        """
        pump = Pump(self.throttle(limits(messagesPerSecond=10)))
        self.assertEqual(pump.admitted, 10)
        run(self.clock, 60)
        self.assertAround(pump.admitted, 610)
        self.stop(pump)

    def test_fractionalRate(self) -> None:
        """
        A rate below one message per second still lets one message through
        at a time, at that rate: 0.5/s is 30 messages a minute.
        """
        pump = Pump(self.throttle(limits(messagesPerSecond=0.5)))
        run(self.clock, 60)
        self.assertAround(pump.admitted, 30)
        self.stop(pump)

    def test_bytesPerSecond(self) -> None:
        """
        Over a minute at 100,000 octets per second, messages of 3,000
        octets pass at that rate, within the burst and one message.
        """
        pump = Pump(self.throttle(limits(bytesPerSecond=100_000)), octets=3000)
        run(self.clock, 60)
        # The first second's burst, then a minute at the rate.
        self.assertAround(pump.admitted * 3000, 6_100_000, 3000 * 2)
        self.stop(pump)

    def test_oversizeMessagePasses(self) -> None:
        """
        A message larger than the bucket passes when the bucket is full;
        the debt it leaves is waited out by what follows.
        """
        throttle = self.throttle(limits(bytesPerSecond=1000))
        self.assertIsNone(self.successResultOf(throttle.admit(1, 5000)))
        waiting = throttle.admit(1, 1)
        self.assertNoResult(waiting)
        self.clock.advance(3.9)
        self.assertNoResult(waiting)
        self.clock.advance(0.2)
        self.assertIsNone(self.successResultOf(waiting))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_everyBucketApplies(self) -> None:
        """
        A job waits for the slowest of the server's and the account's
        buckets, of messages and of octets.
        """
        throttle = self.throttle(
            limits(
                messagesPerSecond=100,
                bytesPerSecond=1_000_000,
                account=AccountLimits(messagesPerSecond=50, bytesPerSecond=2000),
            )
        )
        pump = Pump(throttle, octets=100)
        run(self.clock, 60)
        # The account's 2,000 octets per second: 20 messages per second.
        self.assertAround(pump.admitted, 1220)
        self.stop(pump)

    def test_serverShared(self) -> None:
        """
        Jobs of two accounts on one server share its bucket: together they
        keep to its rate, each getting a fair part.
        """
        serverLimits = limits(messagesPerSecond=10)
        alice = Pump(self.throttle(serverLimits, "alice"))
        bob = Pump(self.throttle(serverLimits, "bob"))
        run(self.clock, 60)
        total = alice.admitted + bob.admitted
        self.assertAround(total, 610)
        self.assertTrue(abs(alice.admitted - bob.admitted) <= 20, (alice.admitted, bob.admitted))
        self.stop(alice, bob)

    def test_accountShared(self) -> None:
        """
        Two jobs of one account share the account's bucket; another
        account on the server has its own.
        """
        serverLimits = limits(account=AccountLimits(messagesPerSecond=5))
        first = Pump(self.throttle(serverLimits, "alice"))
        second = Pump(self.throttle(serverLimits, "alice"))
        other = Pump(self.throttle(serverLimits, "bob"))
        run(self.clock, 60)
        self.assertAround(first.admitted + second.admitted, 305)
        self.assertAround(other.admitted, 305)
        self.stop(first, second, other)

    def test_cancelOnStop(self) -> None:
        """
        A job stopping while it waits for its throttle ends the wait at
        once, with L{CancelledError}, and leaves no timer behind; another
        job's wait is not affected.
        """
        serverLimits = limits(messagesPerSecond=1)
        mine = self.throttle(serverLimits)
        theirs = self.throttle(serverLimits, "bob")
        self.successResultOf(mine.admit(1, 1))
        waiting = mine.admit(1, 1)
        other = theirs.admit(1, 1)
        mine.cancelWaits()
        self.failureResultOf(waiting, CancelledError)
        self.assertNoResult(other)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        other.cancel()
        self.failureResultOf(other, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_closedByStop(self) -> None:
        """
        After L{Throttle.cancelWaits} (the job stops) a new C{admit} fails
        at once with L{CancelledError}, starting no timer, though its
        buckets are short; after L{Throttle.reopen} it waits again.
        """
        mine = self.throttle(limits(messagesPerSecond=0.001))
        self.successResultOf(mine.admit(1, 1))
        mine.cancelWaits()
        self.failureResultOf(mine.admit(1, 1), CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        mine.reopen()
        waiting = mine.admit(1, 1)
        self.assertNoResult(waiting)
        mine.cancelWaits()
        self.failureResultOf(waiting, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noBusyLoop(self) -> None:
        """
        A wait is one timer to the time the buckets allow, not a poll.
        """
        throttle = self.throttle(limits(messagesPerSecond=2))
        self.successResultOf(throttle.admit(2, 1))
        waiting = throttle.admit(1, 1)
        (call,) = self.clock.getDelayedCalls()
        self.assertAlmostEqual(call.getTime() - self.clock.seconds(), 0.5)
        self.clock.advance(0.5)
        self.successResultOf(waiting)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_suggestedBackoffHoldsServerAndAccount(self) -> None:
        """
        A server's "Suggested Backoff Time" to one job holds the buckets
        of that server and account: the other jobs on the server wait
        until then too, though their buckets are full.
        """
        serverLimits = limits(messagesPerSecond=100, account=AccountLimits(messagesPerSecond=50))
        alice = self.throttle(serverLimits, "alice")
        bob = self.throttle(serverLimits, "bob")
        elsewhere = self.throttle(serverLimits, "alice", server="other")
        busy = ServerBusy("APPEND: wait", "Suggested Backoff Time: 30000 milliseconds", None, 30.0)
        alice.signalled(busy)
        self.assertIs(alice.lastSignal, busy)
        waitingAlice = alice.admit(1, 1)
        waitingBob = bob.admit(1, 1)
        self.successResultOf(elsewhere.admit(1, 1))
        self.clock.advance(29.9)
        self.assertNoResult(waitingAlice)
        self.assertNoResult(waitingBob)
        self.clock.advance(0.1)
        self.successResultOf(waitingAlice)
        self.successResultOf(waitingBob)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_chunkLimits(self) -> None:
        """
        Read chunks are cut to what the buckets let through at once, never
        below one message.
        """
        throttle = self.throttle(limits(messagesPerSecond=0.5, bytesPerSecond=100_000))
        self.assertEqual(throttle.chunkLimits(50, 1_000_000), (1, 100_000))
        budgetOnly = self.throttle(limits(account=AccountLimits(dailyUpload=10)), server="other")
        self.assertFalse(budgetOnly.rated)
        self.assertEqual(budgetOnly.chunkLimits(50, 1_000_000), (50, 1_000_000))


class DailyBudgetTests(SynchronousTestCase):
    """
    Daily budgets: counted in the state store, renewed at UTC midnight,
    and carried across a restart.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.path = self.mktemp()
        self.store = SQLiteStateStore(self.path, seconds=self.clock.seconds)
        self.addCleanup(self.store.close)

    def budgetThrottle(
        self, store: SQLiteStateStore | MemoryStateStore, direction: str = UPLOAD
    ) -> Throttle:
        serverLimits = limits(account=AccountLimits(dailyUpload=1000, dailyDownload=5000))
        throttle = ThrottleRegistry(self.clock, store).throttleFor(
            "gmail", serverLimits, "alice", direction
        )
        assert throttle is not None and throttle.budget is not None
        return throttle

    def test_days(self) -> None:
        """
        L{utcDay} and L{nextMidnight} follow UTC.
        """
        self.assertEqual(utcDay(NOON), "2030-01-01")
        self.assertEqual(utcDay(MIDNIGHT - 0.001), "2030-01-01")
        self.assertEqual(utcDay(MIDNIGHT), "2030-01-02")
        self.assertEqual(nextMidnight(NOON), MIDNIGHT)
        self.assertEqual(nextMidnight(MIDNIGHT), MIDNIGHT + 86400)

    def test_fitting(self) -> None:
        """
        The leading messages that fit in what is left today fit; once
        spent, the rest does not.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.successResultOf(Deferred.fromCoroutine(budget.load()))
        self.assertEqual(budget.fitting([400, 400, 400]), 2)
        self.successResultOf(Deferred.fromCoroutine(budget.spend(800)))
        self.assertEqual(budget.fitting([300]), 0)
        self.assertEqual(budget.fitting([200, 1]), 1)
        self.assertEqual(self.successResultOf(self.store.budgetUsed("gmail", "alice", UPLOAD, "2030-01-01")), 800)

    def test_oversizeOnFreshDay(self) -> None:
        """
        A message larger than the whole budget fits on a day with nothing
        used yet, and only then.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.successResultOf(Deferred.fromCoroutine(budget.load()))
        self.assertEqual(budget.fitting([5000, 1]), 1)
        self.successResultOf(Deferred.fromCoroutine(budget.spend(5000)))
        self.assertEqual(budget.fitting([5000]), 0)

    def test_survivesRestart(self) -> None:
        """
        A restarted daemon (a new store object on the same SQLite file, a
        new registry) goes on from the stored total of the same day.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.successResultOf(Deferred.fromCoroutine(budget.load()))
        self.successResultOf(Deferred.fromCoroutine(budget.spend(900)))
        self.store.close()
        store = SQLiteStateStore(self.path, seconds=self.clock.seconds)
        self.addCleanup(store.close)
        self.clock.advance(3600)
        restarted = self.budgetThrottle(store).budget
        assert restarted is not None
        self.successResultOf(Deferred.fromCoroutine(restarted.load()))
        self.assertEqual(restarted.used, 900)
        self.assertEqual(restarted.fitting([200]), 0)
        self.assertEqual(restarted.fitting([100]), 1)

    def finished(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """
        The result of C{coroutine}, which must have finished.
        """
        return self.successResultOf(Deferred.fromCoroutine(coroutine))

    def test_reserveAndGiveBack(self) -> None:
        """
        A reservation is stored at once (another daemon sees it), and
        refused in the store when it does not fit; given back, it leaves
        the store and the total in memory, but not a new day's total
        loaded since.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.finished(budget.load())
        day = budget.day
        self.assertTrue(self.finished(budget.reserve(600)))
        self.assertEqual(budget.fitting([500]), 0)
        self.assertFalse(self.finished(budget.reserve(500)))
        self.assertEqual(self.used(), 600)
        self.finished(budget.giveBack(600, day))
        self.assertEqual((budget.used, self.used()), (0, 0))
        self.assertTrue(self.finished(budget.reserve(600)))
        self.clock.advance(MIDNIGHT - NOON)
        self.finished(budget.load())
        self.assertEqual(budget.used, 0)
        self.finished(budget.giveBack(600, day))
        self.assertEqual((budget.used, self.used()), (0, 600))

    def test_refusedReadsAgain(self) -> None:
        """
        A reservation the store refuses because another daemon spent the
        budget meanwhile reads the day's total again, so that what fits
        is known.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.finished(budget.load())
        self.successResultOf(self.store.addBudgetUse("gmail", "alice", UPLOAD, "2030-01-01", 700))
        self.assertEqual(budget.fitting([400]), 1)
        self.assertFalse(self.finished(budget.reserve(400)))
        self.assertEqual(budget.used, 700)
        self.assertEqual(budget.fitting([400, 300]), 0)
        self.assertEqual(budget.fitting([300]), 1)

    def used(self) -> int:
        """
        The upload total the store holds for alice today.
        """
        return self.successResultOf(self.store.budgetUsed("gmail", "alice", UPLOAD, "2030-01-01"))

    def test_chargedExcludesReservations(self) -> None:
        """
        L{DailyBudget.charged} counts what was charged, not what
        reservations hold: a budget whose rest another job's unit holds
        is not used up (that unit may yet give it back); settled octets
        stay charged, given back ones leave both.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.finished(budget.load())
        day = budget.day
        self.assertTrue(self.finished(budget.reserve(budget.limit)))
        self.assertEqual((budget.used, budget.charged), (budget.limit, 0))
        budget.settle(100, day)
        self.assertEqual((budget.used, budget.charged), (budget.limit, 100))
        self.finished(budget.giveBack(budget.limit - 100, day))
        self.assertEqual((budget.used, budget.charged), (100, 100))
        self.assertEqual(self.used(), 100)

    def test_dayRollover(self) -> None:
        """
        At UTC midnight the budget is renewed: the next load starts the new
        day from 0, and the error of the used-up budget says when.
        """
        budget = self.budgetThrottle(self.store).budget
        assert budget is not None
        self.clock.advance(MIDNIGHT - 1 - NOON)
        self.successResultOf(Deferred.fromCoroutine(budget.load()))
        self.successResultOf(Deferred.fromCoroutine(budget.spend(1000)))
        self.assertEqual(budget.fitting([1]), 0)
        reached = budget.reached()
        self.assertEqual(reached.resumeAt, MIDNIGHT)
        self.assertIn("resuming at 2030-01-02 00:00:00 UTC", str(reached))
        self.assertIn("daily upload budget of alice at gmail", str(reached))
        self.clock.advance(1)
        self.successResultOf(Deferred.fromCoroutine(budget.load()))
        self.assertEqual(budget.used, 0)
        self.assertEqual(budget.fitting([600, 400]), 2)

    def test_directionsApart(self) -> None:
        """
        Download and upload budgets of an account are counted apart.
        """
        up = self.budgetThrottle(self.store).budget
        down = self.budgetThrottle(self.store, DOWNLOAD).budget
        assert up is not None and down is not None
        self.assertEqual(down.limit, 5000)
        self.successResultOf(Deferred.fromCoroutine(up.load()))
        self.successResultOf(Deferred.fromCoroutine(up.spend(1000)))
        self.successResultOf(Deferred.fromCoroutine(down.load()))
        self.assertEqual(down.used, 0)

    def test_pauseForDailyLimit(self) -> None:
        """
        A used-up budget pauses until its renewal.
        """
        throttle = self.budgetThrottle(self.store)
        assert throttle.budget is not None
        error = throttle.budget.reached()
        self.assertIsInstance(error, QuotaExceeded)
        delay = self.successResultOf(Deferred.fromCoroutine(throttle.pauseFor(error)))
        self.assertEqual(delay, MIDNIGHT - NOON)

    def test_overquotaWithBudget(self) -> None:
        """
        The server's C{[OVERQUOTA]} on an account with a daily budget
        pauses until the next UTC midnight and takes the budget as used up
        (recorded, so a restart the same day waits too).
        """
        throttle = self.budgetThrottle(self.store)
        error = QuotaExceeded("APPEND: over quota", "[OVERQUOTA] Quota exceeded", "OVERQUOTA")
        delay = self.successResultOf(Deferred.fromCoroutine(throttle.pauseFor(error)))
        self.assertEqual(delay, MIDNIGHT - NOON)
        self.assertEqual(
            self.successResultOf(self.store.budgetUsed("gmail", "alice", UPLOAD, "2030-01-01")),
            1000,
        )

    def test_overquotaWithoutBudget(self) -> None:
        """
        Without a daily budget on that side, C{[OVERQUOTA]} is left to the
        job's configured pause.
        """
        throttle = ThrottleRegistry(self.clock, self.store).throttleFor(
            "s", limits(messagesPerSecond=5), "alice", UPLOAD
        )
        assert throttle is not None
        error = QuotaExceeded("APPEND: over quota", "[OVERQUOTA] Quota exceeded", "OVERQUOTA")
        self.assertIsNone(self.successResultOf(Deferred.fromCoroutine(throttle.pauseFor(error))))

    def test_dailyLimitReachedIsQuota(self) -> None:
        """
        L{DailyLimitReached} is a L{QuotaExceeded}: the job pauses rather
        than fails.
        """
        self.assertIsInstance(DailyLimitReached("used up", MIDNIGHT), QuotaExceeded)
