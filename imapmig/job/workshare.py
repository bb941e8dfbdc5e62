# -*- test-case-name: tests.test_job_workshare -*-
"""
How one attempt's units of work are shared among its connections: which
unit, or share of one, a connection takes next (L{imapmig.job.units.chooseUnit},
L{imapmig.job.units.guidedShare}), the part of it today's daily budgets allow,
and the budget found used up that ends the taking; which connection holds
each destination mailbox (L{MailboxHolds}), until every APPEND it sent
there is answered.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Callable, Collection, Iterable

from twisted.internet.defer import Deferred

from imapmig.job.attempt import RunStop
from imapmig.job.budgets import UnitBudgets
from imapmig.job.units import WorkUnit, chooseUnit, guidedShare, takeShare
from imapmig.errors import DailyLimitReached

__all__ = ["MailboxHolds", "SharedUnits"]


class MailboxHolds:
    """
    Which connection holds each destination mailbox: the one that took a
    share of it, from then until it has moved to another mailbox I{and}
    every APPEND it sent into this one is answered (L{release}), or until
    it leaves.  No other connection appends into a mailbox held: its
    messages then arrive in the order the one connection sent them (the
    journal's reconciliation matches them in that order), and no two
    connections take turns at its lock.

    A plain record, no I/O: whoever knows when the APPENDs are answered
    (L{imapmig.job.sending}) calls L{release}; a connection that finds
    every mailbox left held waits on L{changed}.
    """

    def __init__(self) -> None:
        # By mailbox, the connection holding it; by connection, the one
        # mailbox it appends to now (a mailbox it holds but has not
        # selected is one it left, with APPENDs there still unanswered).
        self._holders: dict[str, int] = {}
        self._selected: dict[int, str] = {}
        self._waiting: list[Deferred[None]] = []

    def others(self, worker: int) -> set[str]:
        """
        The mailboxes connections other than C{worker} hold.
        """
        return {mailbox for mailbox, holder in self._holders.items() if holder != worker}

    def left(self, worker: int) -> set[str]:
        """
        The mailboxes C{worker} holds but has moved on from.
        """
        selected = self._selected.get(worker)
        return {m for m, holder in self._holders.items() if holder == worker and m != selected}

    def draining(self, mailbox: str) -> bool:
        """
        Whether C{mailbox} is held by a connection that has moved on to
        another, until its APPENDs there are answered (soon free).
        """
        holder = self._holders.get(mailbox)
        return holder is not None and self._selected.get(holder) != mailbox

    def select(self, worker: int, mailbox: str) -> None:
        """
        C{worker} appends into C{mailbox} from now on; it holds it, and
        still holds the one it appended to before until L{release}.
        """
        self._selected[worker] = mailbox
        self._holders[mailbox] = worker

    def release(self, worker: int, mailbox: str) -> None:
        """
        Every APPEND C{worker} sent into C{mailbox}, which it has moved on
        from, is answered: the mailbox is free for another connection.
        """
        if self._holders.get(mailbox) == worker and self._selected.get(worker) != mailbox:
            del self._holders[mailbox]
            self.wake()

    def leave(self, worker: int) -> None:
        """
        C{worker} takes no more (it is done, stopped or lost): whatever it
        held is free, its APPENDs answered or never to be.
        """
        self._selected.pop(worker, None)
        for mailbox in [m for m, holder in self._holders.items() if holder == worker]:
            del self._holders[mailbox]
        self.wake()

    def changed(self) -> Deferred[None]:
        """
        Fires at the next L{release}, L{leave} or L{wake}.
        """
        waiter: Deferred[None] = Deferred()
        self._waiting.append(waiter)
        return waiter

    def wake(self) -> None:
        """
        Fire every L{changed} waiting: what the connections may take has
        changed (a mailbox freed, the units dropped, a limit reached).
        """
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(None)

    def clear(self) -> None:
        """
        Forget every hold (the next attempt), waking those waiting.
        """
        self._holders.clear()
        self._selected.clear()
        self.wake()


class SharedUnits:
    """
    The units of work left to one attempt of a job, taken by its
    connections one share at a time.

    @ivar limitReached: set by a connection that found a daily budget used
        up: no connection takes another unit, and the attempt ends (paused
        until the budget's renewal) once every connection has drained.
    @ivar stop: the run's stop, which every connection reads before it
        takes or reads more.
    """

    def __init__(
        self,
        connections: int,
        minimumShare: int,
        stop: RunStop,
        onExhausted: Callable[[], object] = lambda: None,
        holds: MailboxHolds | None = None,
    ) -> None:
        """
        @param connections: the job's connections (L{guidedShare}).
        @param minimumShare: the smallest share worth taking: the job's
            batch of messages.
        @param stop: the run's stop.
        @param onExhausted: called once an attempt, when the last share
            is taken: what is left to send is that share and what the
            other connections hold.  The job records the outcomes buffered
            so far then, while the server stores the last batches, rather
            than all of them after the last reply.
        @param holds: which connection holds which mailbox; a new record
            if L{None}.
        """
        self._onExhausted = onExhausted
        self._exhausted = False
        self._connections = connections
        self._minimumShare = minimumShare
        self.stop = stop
        self._units: list[WorkUnit] = []
        # Messages in self._units, not yet taken by a connection, and their
        # octets.
        self._untaken = 0
        self._untakenOctets = 0
        self._holds = MailboxHolds() if holds is None else holds
        self.limitReached: DailyLimitReached | None = None

    def __bool__(self) -> bool:
        """
        Whether any unit is left to take.
        """
        return bool(self._units)

    def extend(self, units: Iterable[WorkUnit]) -> None:
        """
        Add C{units} to those left to take.
        """
        self._units.extend(units)
        self._untaken = sum(len(unit.messages) for unit in self._units)
        self._untakenOctets = sum(unit.octets for unit in self._units)

    def ending(self) -> bool:
        """
        Whether the job has other connections and less than a minimum
        share (a batch) for each is left untaken: its connections then
        send in smaller batches with a narrower window
        (L{imapmig.job.sending}, L{imapmig.imap.sendqueue.SendQueue.resize}),
        so that what each still has in flight or queued when the last
        shares are taken is a few small batches: the two connections'
        last replies then come within a few of those of each other.
        """
        return self._connections > 1 and self._untaken < self._connections * self._minimumShare

    def take(self, worker: int, current: str | None) -> WorkUnit | None:
        """
        The next share a connection takes: of its C{current} mailbox if it
        can (with other connections at work, while no free mailbox has
        more octets left than it by a quarter of a share or more:
        L{chooseUnit}), else of a mailbox no other connection is appending
        to; a fair share of what is left, at least the minimum share
        (L{guidedShare}).  Taking it makes its mailbox the connection's own
        (L{MailboxHolds}) until it has taken one of another mailbox and
        every APPEND it sent into this one is answered (L{release}), or it
        leaves.

        What is left is weighed in octets, and the margin is a quarter of
        the share, at the average size of the messages left, however small
        the share: toward the end the connections move to whichever
        mailbox has the most left, so that no mailbox waits, free, while
        the others shrink, until it alone holds more than half of what is
        left (then the connection that ends it ends alone).  The margin
        was once at least a whole minimum share, in messages: realistic
        corpus, 2 connections, a connection kept to the 156 messages left
        of its folder while a free one of about 600 waited, and the other
        connection, which ended that one alone, ended 150 ms after it
        (8% of the copy).

        A connection never shares another's mailbox: two connections
        appending into one Dovecot Maildir mailbox take turns at its lock
        and each re-reads the other's changes, which costs the server more
        the larger the mailbox grows (one folder of 100,000 messages: 244 s
        on two connections, against 34 s on one).

        @param worker: the connection, as L{leave} knows it.
        @param current: the mailbox it has selected, or L{None}.
        @return: the share, or L{None} when what is left belongs to
            mailboxes other connections hold: the connection has no more
            work, unless one of them is soon free (L{waits}).
        """
        units = self._units
        if not units:
            return None
        inUse = self._holds.others(worker)
        share = guidedShare(self._untaken, self._connections, self._minimumShare)
        # With other connections at work, a connection moves to a free
        # mailbox with a quarter of a share's octets more left than its
        # own: the rests stay even, and the last mailboxes end together.
        # Alone, it keeps to its mailbox (no SELECT for nothing).
        margin = None
        if inUse:
            margin = share * self._untakenOctets // (4 * max(self._untaken, 1))
        avoided = self._avoided(worker, current, inUse)
        index = chooseUnit(units, current, avoided, margin, byOctets=True)
        if units[index].mailbox in inUse:
            return None
        if inUse:
            share = self._capped(index, share, inUse)
        unit = takeShare(units, index, share)
        self._untaken -= len(unit.messages)
        self._untakenOctets -= unit.octets
        self._holds.select(worker, unit.mailbox)
        if not units and not self._exhausted:
            self._exhausted = True
            self._onExhausted()
        return unit

    def _avoided(self, worker: int, current: str | None, inUse: set[str]) -> set[str]:
        """
        The mailboxes C{worker} may not move to: those other connections
        hold (C{inUse}) and, while others are at work and its C{current}
        mailbox has messages left, those it left with APPENDs there still
        unanswered.  Moving back and forth between its mailboxes (the
        margin of L{take} weighs them as free) it held them both: on the
        realistic corpus, 2 connections, one connection went INBOX,
        Archive, INBOX, Archive, INBOX while the other, done with its
        folder, waited 500 ms for either.  Once its own is done, it may
        take one it left (its own APPENDs, in order on one connection).
        """
        if not inUse:
            return inUse
        left = self._holds.left(worker)
        if left and any(unit.mailbox == current for unit in self._units):
            return inUse | left
        return inUse

    def _capped(self, index: int, share: int, inUse: Collection[str]) -> int:
        """
        C{share}, cut so that the largest rest of another free mailbox
        stays within what is left over all connections: at most what is
        left, less that rest once for each connection, in octets (at
        least a quarter of the minimum share).  A share larger than that
        left that mailbox waiting, free, while every connection sent
        something else, until it alone held more than a connection's part
        of what was left: one connection then ended it alone (realistic
        corpus, 2 connections: a whole folder of 614 messages taken in one
        share while another of 609 waited; that one's connection ended
        150 ms after the other, 7% of the copy).  Cut this way, the shares
        shrink toward the end of the job with the work left over all
        mailboxes, and the last ones end together; a connection that
        keeps to its mailbox sends them in the same batches.
        """
        units = self._units
        chosen = units[index]
        left: dict[str, int] = {}
        for unit in units:
            if unit.mailbox != chosen.mailbox and unit.mailbox not in inUse:
                left[unit.mailbox] = left.get(unit.mailbox, 0) + unit.octets
        if not left:
            return share
        room = self._untakenOctets - self._connections * max(left.values())
        fitting = bisect_right(list(accumulate(m.size for m in chosen.messages[:share])), room)
        return max(1, self._minimumShare // 4, min(share, fitting))

    def waits(self, worker: int) -> bool:
        """
        Whether the connection C{worker}, which found nothing to take,
        should wait for a mailbox rather than leave: some unit left is of
        a mailbox another connection moved on from, free once that one's
        APPENDs there are answered.  (A unit left only in mailboxes other
        connections append to now is theirs to the end: the connection
        leaves, as it would have no more work.)
        """
        holds = self._holds
        return any(holds.draining(unit.mailbox) for unit in self._units)

    def released(self) -> Deferred[None]:
        """
        Fires once what the connections may take has changed: a mailbox
        is released, a connection leaves, the units are dropped or a
        daily limit is reached.  A connection that L{waits} awaits it, and
        then takes again.
        """
        return self._holds.changed()

    def release(self, worker: int, mailbox: str) -> None:
        """
        Every APPEND the connection C{worker} sent into C{mailbox}, which
        it has moved on from, is answered: another connection may take it.
        """
        self._holds.release(worker, mailbox)

    def leave(self, worker: int) -> None:
        """
        The connection C{worker} takes no more units (it is done, stopped
        or lost): the mailboxes it held are free for another.
        """
        self._holds.leave(worker)

    async def withinBudgets(self, unit: WorkUnit, budgets: UnitBudgets) -> WorkUnit | None:
        """
        The part of C{unit}, from its first message, that today's daily
        budgets still allow, reserved in them (L{UnitBudgets.reserve}, in
        the state store, which no two connections of a fleet get the same
        room from); the rest goes back to the units left.  Reserved before
        the unit is journaled, so that what a budget holds back is never
        half sent.

        @return: that part, or L{None} if not one message fits (then
            L{limitReached} says until when) or the job is stopping.
        """
        await budgets.load()
        sizes = [message.size for message in unit.messages]
        fitting = 0 if self.stop.requested else await budgets.reserve(sizes)
        if fitting and self.stop.requested:
            # Stopped while the store reserved: nothing of it is sent.
            await budgets.release()
            fitting = 0
        if fitting < len(unit.messages):
            rest = WorkUnit(unit.folder, unit.mailbox, unit.messages[fitting:])
            self._units.insert(0, rest)
            self._untaken += len(rest.messages)
            self._untakenOctets += rest.octets
        if fitting == 0:
            if not self.stop.requested and self.limitReached is None:
                self.limitReached = budgets.reached(sizes)
                self._holds.wake()
            return None
        return WorkUnit(unit.folder, unit.mailbox, unit.messages[:fitting])

    def clear(self) -> None:
        """
        Drop the units left: no connection takes another (the job stops,
        or cannot record what it sends); a connection waiting for a
        mailbox wakes to find none.
        """
        self._units.clear()
        self._untaken = 0
        self._untakenOctets = 0
        self._holds.wake()

    def reset(self) -> None:
        """
        Forget the units left, which connection appends where and the limit
        reached: for the next attempt.
        """
        self.clear()
        self._holds.clear()
        self.limitReached = None
        self._exhausted = False
