"""
Tests for L{imapmig.job.workshare}: how an attempt's units of work are
shared by its connections, and cut to what today's daily budgets allow.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.attempt import RunStop
from imapmig.job.budgets import UnitBudgets
from imapmig.job.workshare import SharedUnits
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.job.units import WorkUnit
from imapmig.throttle import UPLOAD, DailyBudget
from imapmig.errors import DailyLimitReached, TransientError
from imapmig.state.memory import MemoryStateStore

NOON = 1893499200.0  # 2030-01-01T12:00:00Z


def unit(mailbox: str, count: int, size: int = 100, first: int = 0) -> WorkUnit:
    """
    A unit of C{count} messages of C{size} octets for C{mailbox}.
    """
    folder = SourceFolder((mailbox,), mailbox)
    return WorkUnit(
        folder,
        mailbox,
        tuple(SourceMessage(f"m{first + i}", (), None, size) for i in range(count)),
    )


def taken(units: SharedUnits, worker: int, current: str | None) -> WorkUnit:
    """
    What C{worker} takes (L{SharedUnits.take}), which must be something.
    """
    share = units.take(worker, current)
    assert share is not None
    return share


class SharingTests(SynchronousTestCase):
    """
    L{SharedUnits.take}: which unit, and how much of it, a connection
    takes next.
    """

    def test_keepsItsMailbox(self) -> None:
        """
        A connection takes a unit of the mailbox it has selected, wherever
        that unit stands in line.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 10), unit("B", 10)])
        self.assertEqual(taken(units, 1, "B").mailbox, "B")

    def test_avoidsAnotherConnectionsMailbox(self) -> None:
        """
        A connection with no mailbox of its own takes a unit of a mailbox
        no other connection has taken a share of; once that one has left,
        that mailbox too.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 10), unit("A", 10, first=10), unit("B", 10)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "B")
        units.leave(1)
        self.assertEqual(taken(units, 2, None).mailbox, "A")

    def test_neverSharesAMailbox(self) -> None:
        """
        A connection whose only work left is a mailbox another connection
        is appending to takes none of it (two connections in one Maildir
        mailbox make Dovecot re-read it for each batch): it has no more
        work.  Once the other connection has moved to another mailbox and
        its APPENDs there are answered, or once it has left, the mailbox is
        free.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 100), unit("B", 10, first=100)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "B")
        self.assertIsNone(units.take(2, "B"))
        self.assertTrue(units)
        # Connection 1 moves on from A (to a mailbox with more left): its
        # claim goes with it.
        units.extend([unit("C", 200, first=200)])
        self.assertEqual(taken(units, 1, "A").mailbox, "C")
        units.release(1, "A")
        self.assertEqual(taken(units, 2, "B").mailbox, "A")
        self.assertEqual(taken(units, 1, "C").mailbox, "C")
        units.leave(1)
        self.assertEqual(taken(units, 2, "A").mailbox, "A")
        self.assertEqual(taken(units, 2, "A").mailbox, "C")

    def test_leavesALargerRestToTheOthers(self) -> None:
        """
        With another connection at work, a connection moves to the free
        mailbox with the most left when its own has fewer left by more
        than a quarter of a share (however small the share: no whole
        minimum share), and leaves its own, claim and all, to the others:
        the rests stay even, and the last mailboxes end together.  Within
        that margin it keeps to its mailbox.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 45), unit("B", 40, first=100), unit("C", 60, first=200)])
        self.assertEqual(len(taken(units, 1, None).messages), 37)
        self.assertEqual(taken(units, 2, None).mailbox, "A")
        # C, 1's, has 23 left; B, free, 40: more than 23 and the margin
        # by far.  1 moves to B.
        self.assertEqual(taken(units, 1, "C").mailbox, "B")
        units.release(1, "C")
        # A, 2's, has 18 left; C, free since 1 left it, 23: more than the
        # margin (a quarter of a share of 15: 3 messages).  2 moves to C.
        self.assertEqual(taken(units, 2, "A").mailbox, "C")
        units.release(2, "A")
        # B, 1's, has 19 left; A, free, 18: 1 keeps to B.
        self.assertEqual(taken(units, 1, "B").mailbox, "B")
        # C has 8 left, A 18: 2 moves to A.
        self.assertEqual(taken(units, 2, "C").mailbox, "A")
        # B has 7 left, C 8: within the margin (2), 1 keeps to B.
        self.assertEqual(taken(units, 1, "B").mailbox, "B")

    def test_lastFreeMailboxNotLeftWaiting(self) -> None:
        """
        Toward the end, a connection moves to a free mailbox with more
        left than its own by more than a quarter share, even by less than
        a minimum share: the realistic corpus on 2 connections, where a
        connection kept to the 156 messages left of its folder while a
        free folder of 609 waited (within the old margin of a whole
        minimum share and its own rest), the other connection ended that
        folder alone, 150 ms after the first.
        """
        units = SharedUnits(2, 200, RunStop())
        units.extend([unit("INBOX", 210), unit("F2019", 156, first=1000),
                      unit("Archive", 300, first=2000)])  # fmt: skip
        self.assertEqual(taken(units, 1, "INBOX").mailbox, "INBOX")
        self.assertEqual(taken(units, 2, "F2019").mailbox, "Archive")

    def test_sharesLeaveNoMailboxWaiting(self) -> None:
        """
        With other connections at work, a share is cut so that the largest
        rest of another free mailbox stays within a connection's part of
        what is left (what is left less that rest once for each
        connection, in octets): a larger share left that mailbox waiting
        while every connection sent something else, and one connection
        then ended it alone.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 60), unit("B", 80, first=100), unit("C", 85, first=200)])
        self.assertEqual(len(taken(units, 1, "A").messages), 57)
        # Left: A 3 (1's), B 80, C 85.  2 takes of C, the largest free;
        # B waits: of the 168 left, 168 - 2 * 80 = 8, not the guided 42.
        share = taken(units, 2, None)
        self.assertEqual((share.mailbox, len(share.messages)), ("C", 8))
        # 1 moves to B; A (3) waits: 160 - 2 * 3 leaves the guided 40.
        share = taken(units, 1, "A")
        self.assertEqual((share.mailbox, len(share.messages)), ("B", 40))

    def test_sharesShrinkToAQuarterMinimum(self) -> None:
        """
        A cut share is never below a quarter of the minimum share.
        """
        units = SharedUnits(2, 40, RunStop())
        units.extend([unit("A", 60), unit("B", 80, first=100), unit("C", 85, first=200)])
        self.assertEqual(len(taken(units, 1, "A").messages), 57)
        share = taken(units, 2, None)
        self.assertEqual((share.mailbox, len(share.messages)), ("C", 10))

    def test_weighsOctets(self) -> None:
        """
        What is left is weighed in octets, not messages: a free mailbox
        of fewer but larger messages is the larger rest.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 100), unit("B", 50, size=1000, first=100),
                      unit("C", 80, size=100, first=200)])  # fmt: skip
        self.assertEqual(taken(units, 1, "A").mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "B")

    def test_ending(self) -> None:
        """
        L{SharedUnits.ending}: with several connections, once less than a
        minimum share for each is left untaken; never for one connection.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 25)])
        self.assertFalse(units.ending())
        # 15 left of 25: less than 2 * 10.
        taken(units, 1, "A")
        self.assertTrue(units.ending())
        alone = SharedUnits(1, 10, RunStop())
        alone.extend([unit("A", 5)])
        self.assertFalse(alone.ending())

    def test_aloneKeepsItsMailbox(self) -> None:
        """
        A connection alone (no other has a mailbox) keeps to its mailbox
        while it has messages left, however many more another has: no
        SELECT for nothing.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 20), unit("B", 300, first=100)])
        self.assertEqual(taken(units, 1, "A").mailbox, "A")
        self.assertEqual(taken(units, 1, "A").mailbox, "B")

    def test_exhaustedOnceAnAttempt(self) -> None:
        """
        Taking the last share calls C{onExhausted}, once an attempt: the
        job records the outcomes buffered so far while the connections
        send and the server stores the last batches.
        """
        calls: list[None] = []
        units = SharedUnits(2, 10, RunStop(), lambda: calls.append(None))
        units.extend([unit("A", 10), unit("B", 10, first=10)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(calls, [])
        self.assertEqual(taken(units, 2, None).mailbox, "B")
        self.assertEqual(calls, [None])
        self.assertIsNone(units.take(1, "A"))
        self.assertEqual(calls, [None])
        units.reset()
        units.extend([unit("A", 10)])
        taken(units, 1, None)
        self.assertEqual(calls, [None, None])

    def test_nothingLeft(self) -> None:
        """
        With no unit left, a connection takes none.
        """
        self.assertIsNone(SharedUnits(2, 10, RunStop()).take(1, None))

    def test_guidedShares(self) -> None:
        """
        Each take is a fair share of what no connection has taken yet
        (half of it over the connections, rounded up), never below the
        minimum share; the shares cover the unit once, in order.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 100)])
        shares = []
        while units:
            shares.append(taken(units, 1, "A"))
        self.assertEqual([len(u.messages) for u in shares], [25, 19, 14, 11, 10, 10, 10, 1])
        keys = [m.key for u in shares for m in u.messages]
        self.assertEqual(keys, [f"m{i}" for i in range(100)])

    def test_clearAndReset(self) -> None:
        """
        L{SharedUnits.clear} drops the units left; L{SharedUnits.reset}
        also forgets which connection appends where and the limit reached.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 10), unit("B", 10)])
        units.clear()
        self.assertFalse(units)
        units.extend([unit("A", 10), unit("B", 10)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        units.limitReached = DailyLimitReached("used up", NOON)
        units.reset()
        self.assertIsNone(units.limitReached)
        units.extend([unit("A", 10), unit("B", 10)])
        self.assertEqual(taken(units, 2, None).mailbox, "A")


class HandoverTests(SynchronousTestCase):
    """
    A mailbox a connection has moved on from stays its own until every
    APPEND it sent there is answered (L{SharedUnits.release}) or it leaves
    (L{MailboxHolds}): no other connection appends there meanwhile, and
    one that finds nothing else waits for it (L{SharedUnits.waits},
    L{SharedUnits.released}) rather than leave the job.
    """

    def moved(self) -> SharedUnits:
        """
        Connection 1 took a share of A, then moved to B (more left) with
        its APPENDs into A unanswered; connection 2 finished C.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 30), unit("C", 10, first=100)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "C")
        units.extend([unit("B", 100, first=200)])
        self.assertEqual(taken(units, 1, "A").mailbox, "B")
        return units

    def test_heldUntilAnswered(self) -> None:
        """
        A connection that finds only a mailbox another left with APPENDs
        in flight there takes none of it and waits; once they are
        answered, the mailbox is released, the wait ends and it takes it.
        """
        units = self.moved()
        self.assertIsNone(units.take(2, "C"))
        self.assertTrue(units.waits(2))
        released = units.released()
        self.assertNoResult(released)
        units.release(1, "A")
        self.successResultOf(released)
        self.assertEqual(taken(units, 2, "C").mailbox, "A")

    def test_lostReleases(self) -> None:
        """
        A connection lost (or stopped) leaves: what it held is released,
        and a connection waiting for it takes it.
        """
        units = self.moved()
        self.assertIsNone(units.take(2, "C"))
        released = units.released()
        units.leave(1)
        self.successResultOf(released)
        # Both of 1's are free: 2 takes the one with the most left.
        self.assertEqual(taken(units, 2, "C").mailbox, "B")

    def test_noHoppingBack(self) -> None:
        """
        While other connections are at work and its own mailbox has
        messages left, a connection does not move back to a mailbox it
        left with APPENDs there unanswered, however much more that one has
        left (it would hold both while another waits: realistic corpus, 2
        connections, one hopped between INBOX and Archive while the other
        waited 500 ms for either); once its own is done, it takes that one
        back (its own APPENDs, in order on one connection), not waiting
        for their replies; the mailbox it left for that one is held in
        turn.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 200), unit("B", 20, first=500)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "B")
        units.extend([unit("C", 400, first=1000)])
        # 1 moves to C, the largest free; A, which it left, soon has more
        # left than C (145 against 143 and less), but 1 keeps to C.
        self.assertEqual(taken(units, 1, "A").mailbox, "C")
        shares = []
        while any(u.mailbox == "C" for u in units._units):
            shares.append(taken(units, 1, "C").mailbox)
        self.assertEqual(set(shares), {"C"})
        self.assertEqual(taken(units, 1, "C").mailbox, "A")
        # A is 1's again, not released by its old APPENDs' replies; C, done,
        # is no reason to wait.
        units.release(1, "A")
        self.assertIsNone(units.take(2, "B"))
        self.assertFalse(units.waits(2))

    def test_selectedIsNotWaitedFor(self) -> None:
        """
        What is left only in mailboxes other connections append to now is
        theirs to the end: a connection does not wait for them.
        """
        units = SharedUnits(2, 10, RunStop())
        units.extend([unit("A", 100), unit("B", 10, first=100)])
        self.assertEqual(taken(units, 1, None).mailbox, "A")
        self.assertEqual(taken(units, 2, None).mailbox, "B")
        self.assertIsNone(units.take(2, "B"))
        self.assertFalse(units.waits(2))

    def test_releaseOnlyWhatIsHeld(self) -> None:
        """
        A release by a connection of a mailbox it does not hold, or of the
        one it appends to now, changes nothing.
        """
        units = self.moved()
        units.release(2, "A")
        units.release(1, "B")
        self.assertIsNone(units.take(2, "C"))
        self.assertTrue(units.waits(2))

    def test_endsWake(self) -> None:
        """
        A wait ends when the units are dropped (the job stops), when a
        daily limit is reached, and at the next attempt (reset).
        """
        units = self.moved()
        released = units.released()
        units.clear()
        self.successResultOf(released)
        self.assertFalse(units.waits(2))
        units = self.moved()
        released = units.released()
        units.reset()
        self.successResultOf(released)
        self.assertEqual(taken(units, 2, None).mailbox if units else None, None)


class BudgetTests(SynchronousTestCase):
    """
    L{SharedUnits.withinBudgets}: a unit cut to what today's daily budgets
    allow, reserved in them; the rest given back.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.store = MemoryStateStore(self.clock.seconds)
        self.budget = DailyBudget(self.store, self.clock, "s", "alice", UPLOAD, 250)
        self.budgets = UnitBudgets(self.budget, None)

    def within(self, units: SharedUnits, taken: WorkUnit) -> WorkUnit | None:
        return self.successResultOf(Deferred.fromCoroutine(units.withinBudgets(taken, self.budgets)))

    def test_cut(self) -> None:
        """
        A unit larger than what is left today is cut to the messages that
        fit, which are reserved; the rest goes back first in line, counted
        as not taken.
        """
        units = SharedUnits(1, 100, RunStop())
        units.extend([unit("A", 5)])
        allowed = self.within(units, taken(units, 1, None))
        assert allowed is not None
        self.assertEqual([m.key for m in allowed.messages], ["m0", "m1"])
        self.assertEqual(self.budget.used, 200)
        self.assertEqual(self.budget.charged, 0)
        rest = taken(units, 1, "A")
        self.assertEqual([m.key for m in rest.messages], ["m2", "m3", "m4"])
        self.assertFalse(units)
        self.assertIsNone(units.limitReached)
        self.assertEqual(self.used(), 200)
        self.successResultOf(Deferred.fromCoroutine(self.budgets.release()))
        self.assertEqual((self.budget.used, self.used()), (0, 0))

    def used(self) -> int:
        """
        What the store counts of the budget today.
        """
        return self.successResultOf(self.store.budgetUsed("s", "alice", UPLOAD, "2030-01-01"))

    def test_spentElsewhere(self) -> None:
        """
        When another daemon spent part of the budget since this one read
        it, the store refuses the reservation of what seemed to fit, and
        the unit is cut to what fits of the total read again: the budget
        is never overspent.
        """
        units = SharedUnits(1, 100, RunStop())
        units.extend([unit("A", 5)])
        self.successResultOf(Deferred.fromCoroutine(self.budget.load()))
        self.successResultOf(self.store.addBudgetUse("s", "alice", UPLOAD, "2030-01-01", 100))
        allowed = self.within(units, taken(units, 1, None))
        assert allowed is not None
        self.assertEqual([m.key for m in allowed.messages], ["m0"])
        self.assertEqual((self.budget.used, self.used()), (200, 200))
        self.budgets.charge(100, 100, 100)
        self.assertIsNone(self.within(units, taken(units, 1, "A")))
        self.assertIsInstance(units.limitReached, DailyLimitReached)
        self.assertEqual(self.used(), 200)

    def test_nothingFits(self) -> None:
        """
        When not one message fits, nothing is reserved, the unit goes back
        whole, and the limit reached says until when: no connection takes
        another unit.
        """
        self.successResultOf(Deferred.fromCoroutine(self.budget.spend(200)))
        units = SharedUnits(1, 100, RunStop())
        units.extend([unit("A", 3)])
        self.assertIsNone(self.within(units, taken(units, 1, None)))
        self.assertIsInstance(units.limitReached, DailyLimitReached)
        self.assertEqual(self.budget.used, 200)
        self.assertEqual(len(taken(units, 1, None).messages), 3)

    def test_limitWakes(self) -> None:
        """
        A connection that finds the limit reached wakes those waiting for
        a mailbox: they take no more either.
        """
        self.successResultOf(Deferred.fromCoroutine(self.budget.spend(200)))
        units = SharedUnits(2, 100, RunStop())
        units.extend([unit("A", 3)])
        released = units.released()
        self.assertIsNone(self.within(units, taken(units, 1, None)))
        self.successResultOf(released)

    def test_stopping(self) -> None:
        """
        A stopping job takes nothing: the unit goes back, nothing is
        reserved, and no limit is said to be reached.
        """
        stop = RunStop()
        stop.requested = True
        units = SharedUnits(1, 100, stop)
        units.extend([unit("A", 2)])
        self.assertIsNone(self.within(units, taken(units, 1, None)))
        self.assertIsNone(units.limitReached)
        self.assertEqual(self.budget.used, 0)
        self.assertTrue(units)

    def test_stoppedWhileReserving(self) -> None:
        """
        A job stopped while the store reserves its unit sends none of it:
        the reservation is given back, the unit goes back whole, and no
        limit is said to be reached.
        """
        stop = RunStop()
        units = SharedUnits(1, 100, stop)
        units.extend([unit("A", 2)])
        self.successResultOf(Deferred.fromCoroutine(self.budget.load()))
        reserving: list[Deferred[int | None]] = []
        reserve = self.store.reserveBudget

        def later(*args: object) -> Deferred[int | None]:
            d: Deferred[int | None] = Deferred()
            reserving.append(d)
            return d

        self.patch(self.store, "reserveBudget", later)
        within = Deferred.fromCoroutine(units.withinBudgets(taken(units, 1, None), self.budgets))
        stop.requested = True
        reserve("s", "alice", UPLOAD, "2030-01-01", 200, 250).chainDeferred(reserving[0])
        self.assertIsNone(self.successResultOf(within))
        self.assertIsNone(units.limitReached)
        self.assertEqual((self.budget.used, self.used()), (0, 0))
        self.assertEqual(len(taken(units, 1, None).messages), 2)

    def test_giveBackFailed(self) -> None:
        """
        A give-back the store cannot take leaves the octets spent (the
        safe side) and is logged; the unit's end goes on.
        """
        units = SharedUnits(1, 100, RunStop())
        units.extend([unit("A", 2)])
        self.assertIsNotNone(self.within(units, taken(units, 1, None)))

        def unreachable(*args: object) -> Deferred[int]:
            return fail(TransientError("the state database is unreachable"))

        self.patch(self.store, "giveBackBudget", unreachable)
        with capturedLogs() as events:
            self.successResultOf(Deferred.fromCoroutine(self.budgets.release()))
        self.assertEqual(self.used(), 200)
        self.assertEqual(
            [formatEvent(e) for e in events],
            [
                "200 octets of the daily upload budget of alice at s stay spent:"
                " the state database is unreachable"
            ],
        )
