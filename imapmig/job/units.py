# -*- test-case-name: tests.test_job_units -*-
"""
The units of work a job cuts its pending messages into, and how its
connections share them: what is left to copy, units, shares, read chunks.
Pure functions, no I/O, no Deferreds.  Taken out of C{imapmig/mail/plan.py}
(whose folder rules are L{imapmig.mail.folders}), as only job planning
and the commands above it use them.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import Collection, Iterator, Sequence

from attrs import field, frozen

from imapmig.mail.message import SourceFolder, SourceMessage


def pendingMessages(
    messages: Sequence[SourceMessage], appended: Collection[str]
) -> list[SourceMessage]:
    """
    The messages whose key is not among those recorded as C{appended}.
    """
    if not appended:
        return list(messages)
    return [message for message in messages if message.key not in appended]


@frozen
class WorkUnit:
    """
    A run of pending messages of one folder; a connection takes it, or a
    share of it (L{takeShare}).

    @ivar octets: its messages' listed sizes, summed (counted once, when
        the unit is made: L{chooseUnit} weighs mailboxes by it).
    """

    folder: SourceFolder
    mailbox: str
    messages: tuple[SourceMessage, ...]
    octets: int = field(init=False, eq=False)

    @octets.default
    def _octets(self) -> int:
        return sum(message.size for message in self.messages)


def cutUnits(
    folder: SourceFolder,
    mailbox: str,
    messages: Sequence[SourceMessage],
    unitMessages: int,
    unitBytes: int,
) -> Iterator[WorkUnit]:
    """
    Cut C{messages} into units of at most C{unitMessages} messages and
    about C{unitBytes} octets (a unit holds at least one message), so
    several connections can share a large folder.
    """
    for run in chunks(messages, unitMessages, unitBytes):
        yield WorkUnit(folder, mailbox, tuple(run))


def chooseUnit(
    units: Sequence[WorkUnit],
    current: str | None,
    inUse: Collection[str],
    margin: int | None = None,
    byOctets: bool = False,
) -> int:
    """
    Which unit a connection should take next: one of the mailbox it has
    selected (no new SELECT); otherwise the first unit of the mailbox with
    the most messages left among those no other connection is filling
    (connections appending into one mailbox contend for its lock on the
    server, so a mailbox is one connection's: the largest first, so that
    no connection is left alone with a large one at the end while the
    others have nothing to take); otherwise the first.

    With a C{margin} (other connections are at work), the connection keeps
    to its mailbox only while that has at least as many messages left as
    the largest free one less C{margin}: otherwise it moves to that one
    and leaves its own, larger than what the others could take, free for
    them.  Sticking to its mailbox to the end, a connection in the largest
    folder left the last folder to the other alone (realistic corpus:
    INBOX of 2,481 messages against four of about 620, one connection
    alone for the last 6-12% of the copy); moving to whichever free
    mailbox has the most left keeps the mailboxes' rests even, so that
    the last ones end together.

    C{byOctets} weighs what is left by octets, not messages: a connection
    sends octets, and mailboxes of small messages (an INBOX) and of large
    ones (an archive) with as many messages left do not take as long.

    @param units: the units left, not empty.
    @param current: the mailbox it has selected.
    @param inUse: mailboxes other connections have selected.
    @param margin: how many more messages (octets with C{byOctets})
        another free mailbox must have left than its own for the
        connection to move there; L{None}: it keeps to its own while that
        has any left.
    @param byOctets: weigh what is left by octets.
    @return: the index of the chosen unit.
    """
    first: dict[str, int] = {}
    left: dict[str, int] = {}
    for index, unit in enumerate(units):
        mailbox = unit.mailbox
        if mailbox == current and margin is None:
            return index
        if mailbox not in inUse:
            first.setdefault(mailbox, index)
            weight = unit.octets if byOctets else len(unit.messages)
            left[mailbox] = left.get(mailbox, 0) + weight
    if not first:
        return 0
    best = max(first, key=lambda mailbox: (left[mailbox], -first[mailbox]))
    if current in first and margin is not None and left[current] + margin >= left[best]:
        return first[current]
    return first[best]


def guidedShare(remaining: int, connections: int, minimum: int) -> int:
    """
    How many messages a connection takes next (guided self-scheduling):
    a fair share of what is left, C{remaining / (2 * connections)} rounded
    up, but at least C{minimum}.  Large shares early keep each connection
    in its mailbox; small ones at the end let the connections finish
    together, where whole units would leave one connection alone with the
    last of them while the others wait.

    @param remaining: messages not yet taken by any connection.
    @param connections: the job's connections.
    @param minimum: the smallest share worth taking (a batch).
    """
    return max(minimum, -(-remaining // (2 * max(connections, 1))))


def takeShare(units: list[WorkUnit], index: int, share: int) -> WorkUnit:
    """
    Take the first C{share} messages of C{units[index]}; the rest stays in
    its place.  A unit of C{share} messages or fewer is taken whole, and
    removed from C{units}.
    """
    unit = units[index]
    if len(unit.messages) <= share:
        return units.pop(index)
    units[index] = WorkUnit(unit.folder, unit.mailbox, unit.messages[share:])
    return WorkUnit(unit.folder, unit.mailbox, unit.messages[:share])


def chunks(
    messages: Sequence[SourceMessage], chunkMessages: int, chunkBytes: int
) -> Iterator[Sequence[SourceMessage]]:
    """
    Cut C{messages} into read chunks of at most C{chunkMessages} messages
    and about C{chunkBytes} octets (at least one message each): a chunk
    ends with the message that brings it to C{chunkBytes} or more.

    Each cut is found on the running sums of the sizes (C{accumulate},
    C{bisect} on a comprehension's sizes), not by a step per message: a job cuts
    every message into units, counts them, and cuts each unit into
    read steps.
    """
    count = len(messages)
    sums = list(accumulate([message.size for message in messages]))
    start = 0
    before = 0
    while start < count:
        limit = min(count, start + chunkMessages)
        end = min(bisect_left(sums, before + chunkBytes, start, limit) + 1, limit)
        yield messages[start:end]
        before = sums[end - 1]
        start = end
