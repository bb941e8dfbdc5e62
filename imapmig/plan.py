# -*- test-case-name: tests.test_plan -*-
"""
Pure planning functions: folder mapping, what is left to copy, how work is
cut into units.  No I/O, no Deferreds.
"""

from __future__ import annotations

from typing import Collection, Iterator, Sequence

from attrs import frozen

from imapmig.message import SourceFolder, SourceMessage


def destinationMailbox(path: tuple[str, ...], delimiter: str | None) -> str:
    """
    The destination mailbox name for a source folder's hierarchy.

    The components are joined with the destination's hierarchy delimiter;
    a delimiter inside a component (a source folder named C{"a.b"} on a
    server whose delimiter is C{"."}) is replaced by C{"_"}, so the folder
    does not turn into a hierarchy.  A top-level C{INBOX} is spelled in
    upper case, as RFC 3501 treats it case-insensitively.

    @param path: the folder's components, e.g. C{("Archive", "2019")}.
    @param delimiter: the destination's delimiter, L{None} on a flat server
        (then C{"_"} joins the components).
    """
    joiner = delimiter or "_"
    parts = [component.replace(joiner, "_") for component in path]
    if parts and parts[0].upper() == "INBOX":
        parts[0] = "INBOX"
    return joiner.join(parts)


def mailboxesToCreate(
    wanted: Sequence[tuple[str, ...]],
    existing: Collection[str],
    delimiter: str | None,
) -> list[str]:
    """
    The mailboxes to create, parents before children, so that every folder
    in C{wanted} exists with its whole hierarchy.

    @param existing: mailbox names the destination already has; C{INBOX}
        always exists.
    """
    have = {name.upper() if name.upper() == "INBOX" else name for name in existing}
    have.add("INBOX")
    result: list[str] = []
    for path in wanted:
        for depth in range(1, len(path) + 1):
            name = destinationMailbox(path[:depth], delimiter)
            if name not in have:
                have.add(name)
                result.append(name)
    return result


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
    A run of pending messages of one folder, taken by one connection.
    """

    folder: SourceFolder
    mailbox: str
    messages: tuple[SourceMessage, ...]


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
    units: Sequence[WorkUnit], current: str | None, inUse: Collection[str]
) -> int:
    """
    Which unit a connection should take next: one of the mailbox it has
    selected (no new SELECT); otherwise one of a mailbox no other connection
    is filling (connections appending into one mailbox contend for its lock
    on the server); otherwise the first.

    @param units: the units left, not empty.
    @param current: the mailbox the connection has selected.
    @param inUse: mailboxes other connections have selected.
    @return: the index of the chosen unit.
    """
    free = None
    for index, unit in enumerate(units):
        if unit.mailbox == current:
            return index
        if free is None and unit.mailbox not in inUse:
            free = index
    return 0 if free is None else free


def chunks(
    messages: Sequence[SourceMessage], chunkMessages: int, chunkBytes: int
) -> Iterator[Sequence[SourceMessage]]:
    """
    Cut C{messages} into read chunks of at most C{chunkMessages} messages
    and about C{chunkBytes} octets (at least one message each).
    """
    start = 0
    count = len(messages)
    while start < count:
        end = start
        size = 0
        while end < count and end - start < chunkMessages:
            size += messages[end].size
            end += 1
            if size >= chunkBytes:
                break
        yield messages[start:end]
        start = end
