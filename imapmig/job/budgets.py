# -*- test-case-name: tests.test_job_throttle -*-
"""
What one connection of a job holds of its accounts' daily budgets
(L{imapmig.throttle.DailyBudget}) while it sends a unit of work.

A unit's octets (by listed size) are reserved in the state store when the
unit is taken, before its journal entry is written
(L{UnitBudgets.reserve}): the store adds them to the day's total only if
they fit, so that two connections, of this daemon or of another daemon of
a fleet, never share the same remainder.  A reservation refused (another
connection took the room first) is tried again with what fits of the
total read again.  As each chunk is handed to the append pipeline its part
of the reservation is settled (L{UnitBudgets.charge}, in memory): the
messages read from the source stay spent from the download budget, the
messages sent from the upload budget (a message skipped as already
present, or recorded as failed instead of sent, costs no upload).  What
the unit did not move (a stop, a failure, a cut, a skipped message) is
given back at its end (L{UnitBudgets.release}), in one write per budget,
none when everything went.  A crash leaves the unit's reservation spent:
the budget is under-used by at most a unit, never overspent.

Messages are counted by their listed size (an IMAP source's RFC822.SIZE,
which is what it sends; a Maildir or mbox file's size), the measure the
reservation is made in, so that what is charged never exceeds what fitted:
a Maildir message whose line endings are converted to CRLF on the way is
sent a little larger than it is counted.
"""

from __future__ import annotations

from typing import Sequence

from imapmig.errors import DailyLimitReached, QuotaExceeded
from imapmig.throttle import DailyBudget

__all__ = ["NEAR_BUDGET", "UnitBudgets", "mailboxFull"]

NEAR_BUDGET = 0.5
"""
The share of a daily upload budget charged today from which a
destination's C{[OVERQUOTA]} is taken for the provider's daily limit
(Gmail's, which counts more than imapmig sent: other clients, its own
rounding) rather than a full mailbox.
"""

# A provider's daily bandwidth limit says so (Gmail: "[ALERT] Account
# exceeded command or bandwidth limits"): never a full mailbox.
_BANDWIDTH_WORDINGS = ("bandwidth",)


def mailboxFull(error: QuotaExceeded, budget: DailyBudget | None) -> bool:
    """
    Whether a destination's quota refusal means its mailbox is full (no
    later day helps: the job records its remaining messages as failed)
    rather than a daily limit (the job pauses until it is renewed).

    The refusal is a full mailbox when it is C{[OVERQUOTA]} or a
    code-less "over quota" wording (Dovecot's "Quota exceeded", Cyrus's
    "Over quota", Courier's "You exceeded your mail quota"), does not
    speak of bandwidth, and the account has no daily upload budget, or
    has one charged today below L{NEAR_BUDGET} of its limit.
    C{[CONTACTADMIN]} and a budget imapmig itself found used up are never
    a full mailbox.

    @param budget: the destination account's daily upload budget, loaded
        for today (L{DailyBudget.load}), or L{None}.
    """
    if isinstance(error, DailyLimitReached):
        return False
    if error.code not in (None, "OVERQUOTA"):
        return False
    text = error.text.lower()
    if any(wording in text for wording in _BANDWIDTH_WORDINGS):
        return False
    if error.code is None and "quota" not in text:
        return False
    if budget is None:
        return True
    return budget.charged < budget.limit * NEAR_BUDGET


_RESERVE_ATTEMPTS = 8
"""
How many times a connection tries to reserve a unit whose reservation the
store refused (other connections took the room its total showed): after
that, the budget counts as used up for the day.
"""


class UnitBudgets:
    """
    The daily budgets one connection of a job counts its units against,
    and what it holds of them for its current unit.
    """

    def __init__(self, upload: DailyBudget | None, download: DailyBudget | None) -> None:
        """
        @param upload: the destination account's daily upload budget, or
            L{None}.
        @param download: the source account's daily download budget, or
            L{None}.
        """
        self._upload = upload
        self._download = download
        self._budgets = tuple(b for b in (upload, download) if b is not None)
        # The current unit's reservation not yet settled, per budget what
        # it moved none of (to give back), and the day it was made on.
        self._held = 0
        self._unused = [0 for _ in self._budgets]
        self._days: list[str | None] = []

    async def load(self) -> None:
        """
        Know today's totals (L{DailyBudget.load}).
        """
        for budget in self._budgets:
            await budget.load()

    def fitting(self, sizes: Sequence[int]) -> int:
        """
        How many of C{sizes}, from the first, fit in every budget as their
        totals were last known (after L{load}).
        """
        return min(budget.fitting(sizes) for budget in self._budgets)

    def reached(self, sizes: Sequence[int]) -> DailyLimitReached:
        """
        The error that pauses the job: of the budget that does not let the
        first of C{sizes} through (the first budget if none refuses it).
        """
        exhausted = [b for b in self._budgets if b.fitting(sizes[:1]) == 0]
        return (exhausted or list(self._budgets))[0].reached()

    async def reserve(self, sizes: Sequence[int]) -> int:
        """
        Reserve, in every budget, the octets of as many of C{sizes}, from
        the first, as fit (after L{load}), giving back first what an
        earlier unit still holds.

        @return: how many were reserved: 0 if not one fits (L{reached}
            says until when).
        """
        await self.release()
        for _ in range(_RESERVE_ATTEMPTS):
            fitting = self.fitting(sizes)
            if fitting == 0:
                return 0
            octets = sum(sizes[:fitting])
            days = [budget.day for budget in self._budgets]
            taken: list[DailyBudget] = []
            for budget in self._budgets:
                if not await budget.reserve(octets):
                    break
                taken.append(budget)
            else:
                self._held = octets
                self._unused = [0 for _ in self._budgets]
                self._days = days
                return fitting
            for budget, day in zip(taken, days):
                await budget.giveBack(octets, day)
        return 0

    def charge(self, listed: int, read: int, sent: int) -> None:
        """
        One chunk was handed over (or read and dropped): its C{listed}
        octets leave the reservation; C{read} octets (the listed size of
        the messages read) stay spent from the download budget and C{sent}
        octets (of the messages sent) from the upload budget, the rest of
        C{listed} is to be given back (L{release}).
        """
        listed = min(listed, self._held)
        self._held -= listed
        for index, (budget, day) in enumerate(zip(self._budgets, self._days)):
            spent = min(listed, sent if budget is self._upload else read)
            budget.settle(spent, day)
            self._unused[index] += listed - spent

    async def release(self) -> None:
        """
        Give back what the current unit still holds and what it did not
        move (the unit ended, early or not).
        """
        held, self._held = self._held, 0
        unused, self._unused = self._unused, [0 for _ in self._budgets]
        for budget, day, more in zip(self._budgets, self._days, unused):
            if held + more:
                await budget.giveBack(held + more, day)
