# -*- test-case-name: tests.test_state_contract -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The state store's contract, continued (L{tests.statecontract}): the
reservations of the daily budgets (L{IBudgetRecords.reserveBudget},
L{IBudgetRecords.giveBackBudget}), which keep a fleet of daemons sharing
one account's budget from overspending it.  L{BudgetReservationContract}
holds every store to them; L{ConcurrentReservations} makes three
connections of one PostgreSQL database reserve at once, each from a
thread of its own.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError
from imapmig.state.postgresql import PostgreSQLStateStore
from tests.statecontract import AnyStore

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object

DAY = "2030-01-01"


class BudgetReservationContract(_MixinBase):
    """
    What every store does of a budget's reservations.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def reserve(self, store: AnyStore, octets: int, limit: int, day: str = DAY) -> int | None:
        """
        What reserving C{octets} of alice's upload budget of C{limit} on
        C{day} answers.
        """
        return self.successResultOf(store.reserveBudget("s", "alice", "upload", day, octets, limit))

    def test_withinLimit(self) -> None:
        """
        Reservations add up while they fit; one that would go over the
        limit is refused and adds nothing; one that fits exactly passes.
        """
        store = self.makeStore()
        self.assertEqual(self.reserve(store, 60, 100), 60)
        self.assertIsNone(self.reserve(store, 41, 100))
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "alice", "upload", DAY)), 60)
        self.assertEqual(self.reserve(store, 40, 100), 100)
        self.assertIsNone(self.reserve(store, 1, 100))

    def test_firstOfTheDayPasses(self) -> None:
        """
        The day's first reservation passes even when larger than the whole
        budget (a message larger than it must pass some day); the next is
        refused.  After everything was given back, the day counts as
        fresh again.
        """
        store = self.makeStore()
        self.assertEqual(self.reserve(store, 500, 100), 500)
        self.assertIsNone(self.reserve(store, 1, 100))
        self.assertEqual(
            self.successResultOf(store.giveBackBudget("s", "alice", "upload", DAY, 500)), 0
        )
        self.assertEqual(self.reserve(store, 300, 100), 300)

    def test_giveBack(self) -> None:
        """
        What is given back comes off the total (never below 0) and makes
        room for later reservations; a give-back on a day without a record
        changes nothing.
        """
        store = self.makeStore()
        self.reserve(store, 80, 100)
        self.assertIsNone(self.reserve(store, 30, 100))
        self.assertEqual(
            self.successResultOf(store.giveBackBudget("s", "alice", "upload", DAY, 25)), 55
        )
        self.assertEqual(self.reserve(store, 30, 100), 85)
        self.assertEqual(
            self.successResultOf(store.giveBackBudget("s", "alice", "upload", DAY, 1000)), 0
        )
        self.assertEqual(
            self.successResultOf(store.giveBackBudget("s", "alice", "upload", "2030-01-05", 5)),
            0,
        )
        self.assertEqual(
            self.successResultOf(store.budgetUsed("s", "alice", "upload", "2030-01-05")), 0
        )

    def test_apart(self) -> None:
        """
        Reservations of other accounts, directions and servers, and uses
        added without a limit, count apart or together as the budget's
        records do; a new day starts from nothing and drops the earlier
        days.
        """
        store = self.makeStore()
        self.reserve(store, 90, 100)
        self.assertEqual(
            self.successResultOf(store.reserveBudget("s", "bob", "upload", DAY, 90, 100)), 90
        )
        self.assertEqual(
            self.successResultOf(store.reserveBudget("s", "alice", "download", DAY, 90, 100)), 90
        )
        self.assertEqual(
            self.successResultOf(store.reserveBudget("t", "alice", "upload", DAY, 90, 100)), 90
        )
        self.successResultOf(store.addBudgetUse("s", "alice", "upload", DAY, 5))
        self.assertIsNone(self.reserve(store, 6, 100))
        self.assertEqual(self.reserve(store, 90, 100, "2030-01-02"), 90)
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "alice", "upload", DAY)), 0)

    def test_reservationClosed(self) -> None:
        """
        A closed store refuses reservations and give-backs with
        L{PermanentError}.
        """
        store = self.makeStore()
        store.close()
        self.failureResultOf(store.reserveBudget("s", "u", "upload", DAY, 1, 10), PermanentError)
        self.failureResultOf(store.giveBackBudget("s", "u", "upload", DAY, 1), PermanentError)


class ConcurrentReservations(_MixinBase):
    """
    Three connections to one shared database reserve on one account at
    once, each in a thread of its own, as three daemons of a fleet do.
    Mixed into a L{SynchronousTestCase} that defines L{openStore}.
    """

    def openStore(self, dsn: str | None) -> tuple[PostgreSQLStateStore, str]:
        """
        A store on C{dsn}'s database (a new one if L{None}) that calls
        the database in the caller's thread, and the database's C{dsn}.
        """
        raise NotImplementedError()

    def test_neverOverspent(self) -> None:
        """
        Three connections reserving on one account at once, with room left
        for one of them, never take it twice: exactly one reservation
        passes and the total is the limit.  The three meet so at the limit
        of each of several accounts (a barrier before each), and before,
        on their way to it.
        """
        first, dsn = self.openStore(None)
        stores = [first] + [self.openStore(dsn)[0] for _ in range(2)]
        accounts = [f"user{i}" for i in range(30)]
        limit, size = 100, 7
        for account in accounts:
            self.successResultOf(first.addBudgetUse("s", account, "upload", DAY, limit - 3 * size))
        together = threading.Barrier(len(stores))
        passed: dict[str, list[int]] = {account: [] for account in accounts}
        errors: list[BaseException] = []

        def reserving(store: PostgreSQLStateStore) -> Callable[[], None]:
            def run() -> None:
                try:
                    for account in accounts:
                        together.wait(timeout=60)
                        for _ in range(3):
                            d = store.reserveBudget("s", account, "upload", DAY, size, limit)
                            d.addCallbacks(passedFor(account), failed)
                except BaseException as e:
                    errors.append(e)

            return run

        def failed(failure: Failure) -> None:
            errors.append(failure.value or Exception(failure))

        def passedFor(account: str) -> Callable[[int | None], None]:
            def reserved(total: int | None) -> None:
                if total is not None:
                    passed[account].append(total)

            return reserved

        threads = [threading.Thread(target=reserving(store)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        self.assertEqual(errors, [])
        for account in accounts:
            used = self.successResultOf(first.budgetUsed("s", account, "upload", DAY))
            self.assertEqual(used, limit)
            # Each reservation that passed saw its own total, one step apart.
            self.assertEqual(sorted(passed[account]), [limit - 2 * size, limit - size, limit])
