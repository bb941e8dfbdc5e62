# -*- test-case-name: tests.test_throttle -*-
"""
Throttles: token buckets of messages and octets per second, per server and
per account, and daily byte budgets per account kept in the state store
(reserved there before they are spent, so that a fleet of daemons never
overspends an account's budget).

The service builds one L{ThrottleRegistry}; it holds one bucket of each
kind per server and per account (shared by every job that uses them) and
one L{DailyBudget} per account and direction.  Each side of a job gets a
L{Throttle} from it (L{ThrottleRegistry.throttleFor}): the destination
server and account for APPENDs, the source server and account for IMAP
FETCHes, or L{None} where nothing is configured, so that an unthrottled
job pays one C{is None} test.

A bucket of rate C{r} holds at most C{r} tokens (one second's worth).  A
request for C{n} waits until the bucket holds C{min(n, r)} tokens, then
takes C{n}: a single message larger than the bucket still passes (the
bucket goes into debt, which later requests wait out), and over time no
more than C{r} per second pass.  Waiting is one C{callLater} to the time
the buckets will allow, never a loop; cancelling the wait (a stopping
job) cancels the call.

A server's "wait" (C{Suggested Backoff Time}, C{[THROTTLED]}: a
L{ServerBusy} with a C{retryAfter}) holds the server's and the account's
buckets until then (L{Throttle.signalled}), so that the other jobs on that
server or account wait too.  An C{[OVERQUOTA]} from an account with a
daily budget on that side means the provider counted more than we did:
the budget is taken as used up until the next UTC midnight.

A package of its own below C{imapmig.sources} and C{imapmig.job} (it was
C{imapmig.schedule.throttle}): a job's sides and its source wait on their
throttles, and the scheduler above them only builds the registry; a
package rather than a module, as the top of C{imapmig/} keeps only what
every layer uses.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Sequence

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from twisted.logger import Logger

from imapmig.config.limits import ServerLimits
from imapmig.errors import (
    DailyLimitReached,
    PermanentError,
    QuotaExceeded,
    ServerBusy,
    TransientError,
)
from imapmig.state import IStateStore
from imapmig.progress.telemetry import Telemetry, ThrottleWaits

__all__ = [
    "DOWNLOAD",
    "UPLOAD",
    "DailyBudget",
    "Throttle",
    "ThrottleRegistry",
    "TokenBucket",
    "nextMidnight",
    "utcTime",
    "utcDay",
]

UPLOAD = "upload"
"""The direction of octets APPENDed into an account."""

DOWNLOAD = "download"
"""The direction of octets FETCHed from an account."""

_DAY = 86400.0

_log = Logger()

# A wait shorter than this counts as none: at today's POSIX times a double
# resolves about 0.2 microseconds, and a timer that shorter would fire at
# the same instant, find the buckets as short as before, and start again.
_RESOLUTION = 1e-6


def utcDay(seconds: float) -> str:
    """
    The UTC day of the POSIX time C{seconds}, as C{"YYYY-MM-DD"}.
    """
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d")


def nextMidnight(seconds: float) -> float:
    """
    The POSIX time of the first UTC midnight after C{seconds}.
    """
    return (math.floor(seconds / _DAY) + 1) * _DAY


def utcTime(seconds: float) -> str:
    """
    C{seconds} as a UTC time for a log line: C{2030-01-02 00:00:00 UTC}.
    """
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class TokenBucket:
    """
    Tokens (messages, or octets) refilled at L{rate} per second, up to one
    second's worth; see the module's docstring.

    @ivar rate: tokens per second.
    @ivar capacity: the most tokens held (the burst): L{rate}.
    """

    def __init__(self, clock: IReactorTime, rate: float) -> None:
        """
        @param clock: the time the bucket refills by; it starts full.
        @param rate: tokens per second, greater than 0.
        """
        self.rate = rate
        self.capacity = rate
        self._clock = clock
        self._tokens = rate
        self._stamp = clock.seconds()

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now

    def delay(self, amount: float, now: float) -> float:
        """
        Seconds from C{now} until C{amount} tokens may be taken (0: now).
        """
        self._refill(now)
        short = min(amount, self.capacity) - self._tokens
        return short / self.rate if short > 0 else 0.0

    def take(self, amount: float, now: float) -> None:
        """
        Take C{amount} tokens, going into debt if there are fewer.
        """
        self._refill(now)
        self._tokens -= amount

    def give(self, amount: float) -> None:
        """
        Give back C{amount} tokens taken for a request that was cancelled.
        """
        self._tokens = min(self.capacity, self._tokens + amount)



class _Gate:
    """
    A server's or an account's buckets (L{None} where no rate is set) and
    how long the server asked everyone to wait.
    """

    def __init__(
        self, clock: IReactorTime, messagesPerSecond: float | None, bytesPerSecond: int | None
    ) -> None:
        self.messages = None if messagesPerSecond is None else TokenBucket(clock, messagesPerSecond)
        self.octets = None if bytesPerSecond is None else TokenBucket(clock, bytesPerSecond)
        self.heldUntil = 0.0


class DailyBudget:
    """
    The octets one account may move in one direction per UTC day, and what
    it moved today, as the state store records it.  Shared by every job of
    the account in this daemon and, through the store, with every daemon
    of a fleet.

    What a unit of work will move is I{reserved} in the store before it is
    sent (L{reserve}): the store adds it only if it fits, in one
    transaction whatever other daemon reserves at once, so that no two
    units, of one daemon or of two, share the same remainder.  As a unit's
    messages go, their octets are I{settled} (L{settle}): they stay spent;
    what the unit did not move is I{given back} (L{giveBack}).  A daemon
    that dies leaves its reservations spent: the error is on the safe side.

    In memory, the budget keeps the day's total as the store last answered
    it (with this daemon's own changes since), from which L{fitting} tells
    what is worth reserving; the store's answer to a reservation decides.

    @ivar limit: octets per day.
    """

    def __init__(
        self,
        store: IStateStore,
        clock: IReactorTime,
        server: str,
        user: str,
        direction: str,
        limit: int,
    ) -> None:
        """
        @param server: the server's name under C{servers}.
        @param user: the account's user name.
        @param direction: L{UPLOAD} or L{DOWNLOAD}.
        @param limit: octets per UTC day.
        """
        self._store = store
        self._clock = clock
        self.server = server
        self.user = user
        self.direction = direction
        self.limit = limit
        self._day: str | None = None
        self._used = 0
        # Of _used, what this daemon's reservations hold, not yet settled.
        self._held = 0

    @property
    def used(self) -> int:
        """
        Octets counted on the day last loaded (L{load}), reservations
        included, as of the store's last answer.
        """
        return self._used

    async def load(self) -> None:
        """
        Read today's total from the store, unless it is known already (the
        day has not changed since the last call).
        """
        day = utcDay(self._clock.seconds())
        if day == self._day:
            return
        used = await self._store.budgetUsed(self.server, self.user, self.direction, day)
        if day != self._day:
            self._day, self._used, self._held = day, used, 0

    def fitting(self, sizes: Sequence[int]) -> int:
        """
        How many of C{sizes}, from the first, fit in what is left today
        (after L{load}).  On a day with nothing used yet, the first always
        fits: a message larger than the whole budget must pass some day.
        """
        left = self.limit - self._used
        count = 0
        for size in sizes:
            if size > left:
                break
            left -= size
            count += 1
        if count == 0 and self._used == 0 and sizes:
            return 1
        return count

    @property
    def charged(self) -> int:
        """
        Octets charged on the day last loaded: L{used} without what this
        daemon's reservations still hold (a unit not yet sent does not
        make the budget used up).
        """
        return self._used - self._held

    @property
    def day(self) -> str | None:
        """
        The UTC day last loaded (L{load}), or L{None} before the first.
        """
        return self._day

    async def reserve(self, octets: int) -> bool:
        """
        Reserve C{octets} of the day last loaded in the store, if they fit
        there (or nothing is spent that day yet).  Refused, the day's
        total is read again, for L{fitting} to offer what fits now.

        @return: whether they were reserved: then they are given back
            (L{giveBack}) or settled (L{settle}) on that L{day}.
        """
        day = self._day if self._day is not None else utcDay(self._clock.seconds())
        total = await self._store.reserveBudget(
            self.server, self.user, self.direction, day, octets, self.limit
        )
        if total is None:
            used = await self._store.budgetUsed(self.server, self.user, self.direction, day)
            if day == self._day:
                self._used = used
            return False
        if day == self._day:
            self._used = total
            self._held += octets
        return True

    def settle(self, octets: int, day: str | None) -> None:
        """
        C{octets} reserved on C{day} were moved: they stay spent.
        """
        if day == self._day:
            self._held -= min(octets, self._held)

    async def giveBack(self, octets: int, day: str | None) -> None:
        """
        Give back C{octets} reserved on C{day} and not moved: at once in
        memory, then in the store; nothing if that day is over (the new
        day's total was loaded without them).  A store that cannot take
        them back leaves them spent (logged): the safe side.
        """
        if day != self._day or day is None or octets <= 0:
            return
        given = min(octets, self._held)
        self._held -= given
        self._used -= octets
        try:
            total = await self._store.giveBackBudget(
                self.server, self.user, self.direction, day, octets
            )
        except (TransientError, PermanentError) as e:
            _log.warn(
                "{octets} octets of the daily {direction} budget of {user} at {server}"
                " stay spent: {error}",
                octets=octets, direction=self.direction, user=self.user,
                server=self.server, error=str(e),
            )  # fmt: skip
            return
        if day == self._day:
            self._used = total

    async def spend(self, octets: int) -> None:
        """
        Count C{octets} against today's budget whether they fit or not: at
        once in memory (so that another job of the account sees them),
        then in the store.
        """
        self._used += octets
        day = self._day if self._day is not None else utcDay(self._clock.seconds())
        total = await self._store.addBudgetUse(self.server, self.user, self.direction, day, octets)
        if day == self._day:
            self._used = max(self._used, total)

    async def exhaust(self) -> None:
        """
        Take today's budget as used up: the server refused for a quota it
        counts, and it counts more than was recorded here.
        """
        await self.load()
        if self._used < self.limit:
            await self.spend(self.limit - self._used)

    def reached(self) -> DailyLimitReached:
        """
        The error that pauses a job until the budget is renewed.
        """
        now = self._clock.seconds()
        resumeAt = nextMidnight(now)
        return DailyLimitReached(
            f"the daily {self.direction} budget of {self.user} at {self.server}"
            f" ({self.limit} octets) is used up: {self._used} octets on"
            f" {self._day or utcDay(now)} UTC; resuming at {utcTime(resumeAt)}",
            resumeAt,
            self,
        )


class Throttle:
    """
    What one side of one job must respect: the buckets of its server and
    account, and its account's daily budget in that direction.  Its own
    waits are its own: L{cancelWaits} ends them, not other jobs'.

    @ivar budget: the account's daily budget in this direction, or
        L{None}.
    @ivar rated: whether any bucket applies (else L{admit} never waits).
    @ivar lastSignal: the last error L{signalled}, to tell which side a
        failure came from.
    @ivar closed: whether L{cancelWaits} closed it (its job stops): every
        L{admit} fails at once until L{reopen}.
    """

    def __init__(
        self,
        clock: IReactorTime,
        gates: Sequence[_Gate],
        budget: DailyBudget | None,
        waits: ThrottleWaits | None = None,
    ) -> None:
        """
        @param waits: where its waits are counted (telemetry), or L{None}.
        """
        self._clock = clock
        self._waitsCounted = waits
        self._gates = tuple(gates)
        self._messageBuckets = tuple(g.messages for g in gates if g.messages is not None)
        self._octetBuckets = tuple(g.octets for g in gates if g.octets is not None)
        self.budget = budget
        self.rated = bool(self._messageBuckets or self._octetBuckets)
        self.lastSignal: BaseException | None = None
        self.closed = False
        # Each wait's timer, the tokens it reserved, and when it began.
        self._waits: dict[Deferred[None], tuple[IDelayedCall, int, int, float]] = {}

    def chunkLimits(self, messages: int, octets: int) -> tuple[int, int]:
        """
        C{messages} and C{octets} per read chunk, cut to what the buckets
        let through at once (at least one message), so that a chunk does
        not run the buckets into a long debt.
        """
        for bucket in self._messageBuckets:
            messages = min(messages, max(1, int(bucket.capacity)))
        for bucket in self._octetBuckets:
            octets = min(octets, max(1, int(bucket.capacity)))
        return messages, octets

    def _delay(self, messages: int, octets: int, now: float) -> float:
        wait = max((gate.heldUntil for gate in self._gates), default=0.0) - now
        for bucket in self._messageBuckets:
            wait = max(wait, bucket.delay(messages, now))
        for bucket in self._octetBuckets:
            wait = max(wait, bucket.delay(octets, now))
        return wait if wait > _RESOLUTION else 0.0

    def admit(self, messages: int, octets: int) -> Deferred[None]:
        """
        Wait until every bucket allows C{messages} messages of C{octets}
        octets, and take them.

        The tokens are reserved at once and the wait is to the time they
        would have been taken: requests are served in the order they come,
        whichever job makes them (a job that asks again as soon as it is
        served does not starve another).

        @return: a Deferred that fires when they may go; cancelling it (or
            L{cancelWaits}) ends the wait with
            L{twisted.internet.defer.CancelledError} and gives the tokens
            back.  While L{closed}, it has failed so already.
        """
        if self.closed:
            return fail(CancelledError())
        now = self._clock.seconds()
        delay = self._delay(messages, octets, now)
        for bucket in self._messageBuckets:
            bucket.take(messages, now)
        for bucket in self._octetBuckets:
            bucket.take(octets, now)
        if delay <= 0:
            return succeed(None)
        waiter: Deferred[None] = Deferred(self._cancelled)
        call = self._clock.callLater(delay, self._due, waiter)
        self._waits[waiter] = (call, messages, octets, now)
        if self._waitsCounted is not None:
            self._waitsCounted.count += 1
        return waiter

    def _due(self, waiter: Deferred[None]) -> None:
        # A server's "wait" may have come since the tokens were reserved.
        now = self._clock.seconds()
        held = max(gate.heldUntil for gate in self._gates) - now
        if held > _RESOLUTION:
            _, messages, octets, began = self._waits[waiter]
            call = self._clock.callLater(held, self._due, waiter)
            self._waits[waiter] = (call, messages, octets, began)
            return
        began = self._waits.pop(waiter)[3]
        self._waited(now - began)
        waiter.callback(None)

    def _waited(self, seconds: float) -> None:
        """
        A wait of C{seconds} ended: count them.
        """
        if self._waitsCounted is not None:
            self._waitsCounted.seconds += seconds

    def _cancelled(self, waiter: Deferred[None]) -> None:
        call, messages, octets, began = self._waits.pop(waiter)
        self._waited(self._clock.seconds() - began)
        if call.active():
            call.cancel()
        for bucket in self._messageBuckets:
            bucket.give(messages)
        for bucket in self._octetBuckets:
            bucket.give(octets)

    def cancelWaits(self) -> None:
        """
        End every wait of this throttle with
        L{twisted.internet.defer.CancelledError} (the job stops), and close
        it: a later L{admit} (a read or a chunk that was already on its
        way) fails so at once rather than wait, until L{reopen}.
        """
        self.closed = True
        for waiter in list(self._waits):
            waiter.cancel()

    def reopen(self) -> None:
        """
        Let L{admit} wait again (the job runs again after a stop).
        """
        self.closed = False

    def signalled(self, error: BaseException) -> None:
        """
        C{error} ended an attempt on this side: if the server asked to wait
        (L{ServerBusy} with a C{retryAfter}), hold the server's and the
        account's buckets until then, for every job using them.
        """
        self.lastSignal = error
        if isinstance(error, ServerBusy) and error.retryAfter is not None:
            until = self._clock.seconds() + error.retryAfter
            for gate in self._gates:
                gate.heldUntil = max(gate.heldUntil, until)

    async def pauseFor(self, error: QuotaExceeded) -> float | None:
        """
        How long to pause for C{error}, a quota refusal on this side: until
        the budget's renewal for L{DailyLimitReached}, or, for a server's
        C{[OVERQUOTA]} on an account with a daily budget here, until the
        next UTC midnight (the budget is then taken as used up); L{None}
        when no budget applies (the job's configured pause).
        """
        now = self._clock.seconds()
        if isinstance(error, DailyLimitReached):
            return max(0.0, error.resumeAt - now)
        if self.budget is None:
            return None
        await self.budget.exhaust()
        return nextMidnight(now) - now


class ThrottleRegistry:
    """
    Every server's and account's buckets and budgets, built once by the
    service and shared by its jobs.
    """

    def __init__(
        self, clock: IReactorTime, store: IStateStore, telemetry: Telemetry | None = None
    ) -> None:
        """
        @param clock: refills the buckets and tells the UTC day.
        @param store: keeps the daily budgets' totals.
        @param telemetry: where each server's throttle waits are counted,
            per direction; L{None}: not counted.
        """
        self._clock = clock
        self._store = store
        self._telemetry = telemetry
        self._servers: dict[str, _Gate] = {}
        self._accounts: dict[tuple[str, str], _Gate] = {}
        self._budgets: dict[tuple[str, str, str], DailyBudget] = {}

    def throttleFor(
        self, server: str, limits: ServerLimits, user: str, direction: str
    ) -> Throttle | None:
        """
        The throttle of a job's side: C{user}'s account on C{server} (named
        C{server} under C{servers}, with C{limits}), moving octets in
        C{direction} (L{UPLOAD} or L{DOWNLOAD}).

        @return: a new L{Throttle} over the shared buckets and budget, or
            L{None} when C{limits} sets no rate and no budget.
        """
        if not limits.throttled:
            return None
        serverGate = self._servers.get(server)
        if serverGate is None:
            serverGate = self._servers[server] = _Gate(
                self._clock, limits.messagesPerSecond, limits.bytesPerSecond
            )
        account = limits.perAccount
        accountGate = self._accounts.get((server, user))
        if accountGate is None:
            accountGate = self._accounts[server, user] = _Gate(
                self._clock, account.messagesPerSecond, account.bytesPerSecond
            )
        daily = account.dailyUpload if direction == UPLOAD else account.dailyDownload
        budget = None
        if daily is not None:
            budget = self._budgets.get((server, user, direction))
            if budget is None:
                budget = self._budgets[server, user, direction] = DailyBudget(
                    self._store, self._clock, server, user, direction, daily
                )
        waits = None
        if self._telemetry is not None:
            waits = self._telemetry.server(server).waitsOf(direction)
        return Throttle(self._clock, (serverGate, accountGate), budget, waits)
