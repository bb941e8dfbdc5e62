# -*- test-case-name: tests.test_job_throttle -*-
"""
What one connection of a job holds of its accounts' daily budgets
(L{imapmig.throttle.DailyBudget}) while it sends a unit of work.

A unit's octets (by listed size) are reserved in memory when the unit is
taken, before its journal entry is written: every other connection and job
of the account sees them taken at once, with no await between the test of
what fits and the reservation, so that two connections never share the
same remainder.  As each chunk is handed to the append pipeline its part of
the reservation becomes a charge of what actually moves: the messages read
from the source count against the download budget, the messages sent
against the upload budget (a message skipped as already present, or
recorded as failed instead of sent, costs no upload).  What the unit did
not send (a stop, a failure, a cut) is given back at its end.  Only charges
reach the state store; a crash between a chunk's hand-over and its charge
being stored forgets at most that chunk.

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
        # Octets held, and per budget the day they were held on.
        self._held = 0
        self._days: list[str | None] = []

    async def load(self) -> None:
        """
        Know today's totals (L{DailyBudget.load}).
        """
        for budget in self._budgets:
            await budget.load()

    def fitting(self, sizes: Sequence[int]) -> int:
        """
        How many of C{sizes}, from the first, fit in every budget (after
        L{load}).
        """
        return min(budget.fitting(sizes) for budget in self._budgets)

    def reached(self, sizes: Sequence[int]) -> DailyLimitReached:
        """
        The error that pauses the job: of the budget that does not let the
        first of C{sizes} through (the first budget if none refuses it).
        """
        exhausted = [b for b in self._budgets if b.fitting(sizes[:1]) == 0]
        return (exhausted or list(self._budgets))[0].reached()

    def hold(self, octets: int) -> None:
        """
        Reserve C{octets} (a unit's listed size) in every budget, giving
        back first what an earlier unit still held.
        """
        self.release()
        for budget in self._budgets:
            budget.reserve(octets)
        self._held = octets
        self._days = [budget.day for budget in self._budgets]

    async def charge(self, listed: int, read: int, sent: int) -> None:
        """
        One chunk was handed over (or read and dropped): its C{listed}
        octets leave the reservation; C{read} octets (the listed size of
        the messages read) count against the download budget and C{sent}
        octets (of the messages sent) against the upload budget, in memory
        at once, then in the state store.
        """
        listed = min(listed, self._held)
        self._held -= listed
        for budget, day in zip(self._budgets, self._days):
            budget.release(listed, day)
        upload, download = self._upload, self._download
        # Both in memory before either is stored: another connection
        # sees no gap between the release and the charge.
        if download is not None:
            download.count(read)
        if upload is not None:
            upload.count(sent)
        if download is not None and read:
            await download.record(read)
        if upload is not None and sent:
            await upload.record(sent)

    def release(self) -> None:
        """
        Give back what the current unit still holds (not sent: the unit
        ended early, or was cut).
        """
        held, self._held = self._held, 0
        if held:
            for budget, day in zip(self._budgets, self._days):
                budget.release(held, day)
