# -*- test-case-name: tests.test_sources_imap -*-
"""
How an IMAP source fetches bodies: the sizes its commands ask for, the
limits that bound what the server may send (L{bodyLimits}), and the sink
that keeps each body as it arrives (L{BodySink}).

Split out of L{imapmig.sources.imap} as what its reading
(L{imapmig.sources.imapreading}) and its NUL restoring
(L{imapmig.sources.imapnuls}) share.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from attrs import frozen

from imapmig.errors import CommandFailed
from imapmig.imap.fetch import FetchLimits
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.errormap import refusalsOf
from imapmig.imap.session import IMAPSession
from imapmig.imap.spool import SpooledLiteral
from imapmig.sources.imapstatus import fetchInto, fetchParser

__all__ = [
    "COMMAND_BYTES",
    "MAX_MESSAGE_BYTES",
    "SIZE_SLACK",
    "SPOOL_ABOVE",
    "Body",
    "BodyFetcher",
    "BodySink",
    "bodyLimits",
    "closeSpooled",
    "commandGroups",
]

COMMAND_BYTES = 8 * 1024 * 1024
"""
About how many octets of messages (by RFC822.SIZE) one C{UID FETCH}
command asks for; a larger message gets a command of its own.
"""

SPOOL_ABOVE = 4 * 1024 * 1024
"""
A body larger than this many octets is spooled to a temporary file as it
arrives rather than held in memory (as a Maildir source streams files
larger than its C{LARGE_FILE}, the same size).
"""

MAX_MESSAGE_BYTES = 1024 * 1024 * 1024
"""
The largest message read from the source, in octets: one listed larger is
recorded as unreadable without being fetched.  With spooling it costs disk,
not memory; without (C{spoolAbove=None}) it is also the memory one body may
take.
"""

SIZE_SLACK = 64 * 1024
"""
Octets allowed beyond twice the listed sizes (servers that estimate
RFC822.SIZE, such as Exchange, may send a little more than they list).
"""

Body = bytes | SpooledLiteral | None


def commandGroups(
    messages: Sequence[tuple[int, int]], commandBytes: int
) -> list[list[int]]:
    """
    Cut C{(uid, size)} pairs, in order, into UID groups of about
    C{commandBytes} octets each (at least one message per group).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for uid, messageSize in messages:
        if current and size + messageSize > commandBytes:
            groups.append(current)
            current, size = [], 0
        current.append(uid)
        size += messageSize
    if current:
        groups.append(current)
    return groups


def bodyLimits(
    sizes: Sequence[int], maxMessageBytes: int, spoolAbove: int | None, spoolDirectory: str | None
) -> FetchLimits:
    """
    The limits for fetching bodies whose listed sizes are C{sizes}: each
    literal at most twice the largest (and at most C{maxMessageBytes}),
    all of them at most twice their total, both plus L{SIZE_SLACK}; a size
    of 0 (none listed) leaves only C{maxMessageBytes}.
    """
    if sizes and all(size > 0 for size in sizes):
        return FetchLimits(
            maxLiteral=min(maxMessageBytes, 2 * max(sizes) + SIZE_SLACK),
            maxTotal=2 * sum(sizes) + SIZE_SLACK,
            spoolAbove=spoolAbove,
            spoolDirectory=spoolDirectory,
        )
    return FetchLimits(
        maxLiteral=maxMessageBytes, spoolAbove=spoolAbove, spoolDirectory=spoolDirectory
    )


class BodySink:
    """
    Keeps the whole-message body of each UID asked for, from the FETCH
    responses of body fetches; closes every spooled literal it does not
    keep.

    @ivar bodies: by UID, the body in memory, spooled, or L{None} for
        C{NIL}.
    """

    def __init__(
        self, wanted: set[int], received: Callable[[int, Body], object] | None = None
    ) -> None:
        """
        @param wanted: the UIDs whose bodies are kept (L{want} adds more).
        @param received: called with the UID and body of each body kept,
            as it arrives, or L{None}.
        """
        self._wanted = wanted
        self._received = received
        self.bodies: dict[int, Body] = {}

    @classmethod
    def forGroups(
        cls,
        groups: Sequence[Sequence[int]],
        received: Callable[[int, Body], object] | None = None,
    ) -> BodySink:
        """
        A sink keeping the bodies of the UIDs of C{groups}.
        """
        return cls({uid for group in groups for uid in group}, received)

    def want(self, uid: int) -> None:
        """
        Keep the body of C{uid} too, from its next response on.
        """
        self._wanted.add(uid)

    def __call__(self, item: FetchedItem) -> None:
        if item.spooled:
            self._spooledItem(item)
            return
        # A body in memory (one per message read): found with one lookup
        # where the response carried it, L{FetchedItem.hasBody} asked only
        # for a response with no body in memory (NIL, or none at all).
        uid = item.uid
        if uid is None or uid not in self._wanted:
            return
        body = item.body
        if body is None and not item.hasBody:
            return
        self._keep(uid, body)

    def _spooledItem(self, item: FetchedItem) -> None:
        """
        L{__call__} for a response with a spooled section: its body kept
        (spooled or not), every other spool closed.
        """
        uid = item.uid
        spooled = item.spooledBody
        body: Body = spooled if spooled is not None else item.body
        _closeOthers(item, body)
        if uid is None or uid not in self._wanted or not item.hasBody:
            if spooled is not None:
                spooled.close()
            return
        self._keep(uid, body)

    def _keep(self, uid: int, body: Body) -> None:
        """
        Keep C{body} as the body of C{uid} (closing one kept before), and
        say so to C{received}.
        """
        previous = self.bodies.get(uid)
        if isinstance(previous, SpooledLiteral):
            previous.close()
        self.bodies[uid] = body
        if self._received is not None:
            self._received(uid, body)

    def close(self) -> None:
        """
        Close every spooled body kept.
        """
        closeSpooled(self.bodies.values())


def _closeOthers(item: FetchedItem, body: Body) -> None:
    """
    Close every spooled section of C{item} but C{body}.
    """
    for spool in item.spooled.values():
        if spool is not body:
            spool.close()


def closeSpooled(bodies: Iterable[Body]) -> None:
    """
    Close each of C{bodies} that is spooled (its file is let go).
    """
    for body in bodies:
        if isinstance(body, SpooledLiteral):
            body.close()


@frozen
class BodyFetcher:
    """
    Fetches bodies in pipelined C{UID FETCH} commands of about
    C{commandBytes} octets each, within the limits of their listed sizes
    (L{bodyLimits}).

    @ivar commandBytes: see L{COMMAND_BYTES}.
    @ivar maxMessageBytes: see L{MAX_MESSAGE_BYTES}.
    @ivar spoolAbove: see L{SPOOL_ABOVE}; L{None} holds every body in
        memory.
    @ivar spoolDirectory: where spooled bodies go, as unlinked files;
        L{None}: the default temporary directory.
    """

    commandBytes: int = COMMAND_BYTES
    maxMessageBytes: int = MAX_MESSAGE_BYTES
    spoolAbove: int | None = SPOOL_ABOVE
    spoolDirectory: str | None = None

    def groups(self, messages: Sequence[tuple[int, int]]) -> list[list[int]]:
        """
        The UID groups of C{(uid, size)} pairs, one per command
        (L{commandGroups}).
        """
        return commandGroups(messages, self.commandBytes)

    async def fetch(
        self,
        session: IMAPSession,
        groups: Sequence[Sequence[int]],
        section: bytes,
        sizes: Sequence[int],
        received: Callable[[int, Body], object] | None = None,
    ) -> tuple[dict[int, Body], list[CommandFailed | None]]:
        """
        Fetch C{section} of the UIDs of C{groups}, one C{UID FETCH} per
        group, all written at once, within the limits of the listed
        C{sizes} (L{bodyLimits}); C{received}, if given, is called with
        each body kept as it arrives (L{BodySink}).

        @return: the bodies by UID (a UID absent got none), and per group
            its refusal or L{None}.
        @raise ConnectionLost: the connection was lost, or a response could
            not be read or was beyond the limits; raised once every command
            has ended, every spool closed.
        """
        if not groups:
            return {}, []
        fetchParser(session).limits = bodyLimits(
            sizes, self.maxMessageBytes, self.spoolAbove, self.spoolDirectory
        )
        sink = BodySink.forGroups(groups, received)
        commands = [
            fetchInto(
                session, b"UID FETCH " + formatUIDSet(uids) + b" (UID " + section + b")", sink
            )
            for uids in groups
        ]
        refusals, error = await refusalsOf(commands)
        if error is not None:
            sink.close()
            raise error
        return sink.bodies, refusals


