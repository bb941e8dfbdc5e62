# -*- test-case-name: tests.test_sources_imap -*-
"""
The reading side of an IMAP source: message bodies, fetched in pipelined
C{UID FETCH <set> (UID BODY.PEEK[])} commands within the limits of what
was listed (L{imapmig.sources.imapbodies}), their NUL octets put back
(L{imapmig.sources.imapnuls}), and the header fields that name a message
to its owner.

Split out of L{imapmig.sources.imap}, whose facade runs these calls on
its pool of connections (L{imapmig.sources.imappool}).
"""

from __future__ import annotations

import os
from typing import Sequence

from attrs import frozen
from twisted.internet.defer import Deferred

from imapmig.errors import CommandFailed, TransientError
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.session import IMAPSession
from imapmig.imap.spool import SpooledLiteral
from imapmig.mail.messagenames import HEADER_FIELDS
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
)
from imapmig.mail.octets import UNKNOWN, crlfAndFacts
from imapmig.sources.imapbodies import Body, BodyFetcher, closeSpooled
from imapmig.sources.imapnuls import NULRestorer, nulRestorerFor
from imapmig.sources.imappool import PooledSession
from imapmig.sources.imapstatus import LISTING_LIMITS, FolderMarks, fetchParser, parseMessageKey
from imapmig.sources.imapthrottle import IThrottle

__all__ = ["EXPUNGED", "BodyReader", "asCRLF"]

EXPUNGED = "expunged from the source since it was listed"


def _uidOf(message: SourceMessage, uidValidity: int) -> int | None:
    """
    The UID of C{message} in its folder under C{uidValidity}, or L{None}
    if its key is of another UIDVALIDITY (or none of this source's).
    """
    parsed = parseMessageKey(message.key)
    return parsed[1] if parsed is not None and parsed[0] == uidValidity else None


def _headerOf(item: FetchedItem) -> tuple[int | None, bytes | None]:
    """
    The UID and the C{BODY[HEADER.FIELDS (...)]} section of a FETCH
    response (as the server spelled the section's name).
    """
    for name, value in item.sections.items():
        if name.startswith(b"BODY[HEADER.FIELDS"):
            return item.uid, value
    return item.uid, None


def asCRLF(body: bytes) -> bytes:
    """
    C{body} with CRLF line endings: exactly what L{imapmig.mail.message.toCRLF} gives, in one
    pass (L{imapmig.mail.octets.crlfAndFacts}: C{body} itself when it is
    CRLF throughout, as IMAP servers send it).

    @param body: the message as the server sent it.
    @return: the message with CRLF line endings (C{body} itself when it
        has them already).
    """
    return crlfAndFacts(body)[0]


@frozen
class BodyPlan:
    """
    What one read of bodies fetches.

    @ivar uidValidity: the folder's UIDVALIDITY when it was opened.
    @ivar uids: per message asked for, its UID, or L{None} when its key is
        of another UIDVALIDITY (the folder was renumbered).
    @ivar wanted: C{(uid, size)} of each message to fetch.
    @ivar tooLarge: by UID, the listed size of each message larger than
        the source reads.
    @ivar groups: the UIDs of each body fetch command (L{BodyFetcher.groups}).
    """

    uidValidity: int
    uids: list[int | None]
    wanted: list[tuple[int, int]]
    tooLarge: dict[int, int]
    groups: list[list[int]]

    @classmethod
    def of(
        cls, messages: Sequence[SourceMessage], uidValidity: int, fetcher: BodyFetcher
    ) -> BodyPlan:
        """
        The plan for reading C{messages} of a folder now at C{uidValidity}.
        """
        uids: list[int | None] = []
        wanted: list[tuple[int, int]] = []
        tooLarge: dict[int, int] = {}
        for message in messages:
            parsed = parseMessageKey(message.key)
            if parsed is None or parsed[0] != uidValidity:
                uids.append(None)
                continue
            uids.append(parsed[1])
            if message.size > fetcher.maxMessageBytes:
                tooLarge[parsed[1]] = message.size
            else:
                wanted.append((parsed[1], message.size))
        return cls(uidValidity, uids, wanted, tooLarge, fetcher.groups(wanted))

    @property
    def sizes(self) -> list[int]:
        """
        The listed size of each message to fetch.
        """
        return [size for _, size in self.wanted]


class BodyReader:
    """
    Reads the bodies and header fields of an IMAP account's messages; each
    call runs on a connection of the source's pool.
    """

    def __init__(
        self,
        marks: FolderMarks,
        description: str,
        fetcher: BodyFetcher = BodyFetcher(),
        throttle: IThrottle | None = None,
    ) -> None:
        """
        @param marks: the status of the source's folders, shared with its
            listing.
        @param description: names the account in errors.
        @param fetcher: fetches the bodies, within its limits.
        @param throttle: waited for before each body FETCH, or L{None}.
        """
        self._marks = marks
        self.description = description
        self._fetcher = fetcher
        self._throttle = throttle
        # The reads waiting for the throttle (each holding its connection's
        # lock): L{cancelAdmissions} ends them rather than wait behind them.
        self._admitting: set[Deferred[None]] = set()

    def cancelAdmissions(self) -> None:
        """
        Fail every read still waiting for the throttle, with
        L{twisted.internet.defer.CancelledError}.
        """
        for admitting in list(self._admitting):
            admitting.cancel()

    async def readBodies(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        messages: Sequence[SourceMessage],
    ) -> Sequence[MessageBody]:
        """
        See L{imapmig.sources.imap.IMAPSource.readBodies}.
        """
        if not messages:
            return []
        try:
            status = await self._marks.ensureOpen(reader, session, folder)
        except CommandFailed as e:
            return self._folderUnreadable(folder, e, len(messages))
        plan = BodyPlan.of(messages, status.uidValidity, self._fetcher)
        await self._admit(plan.wanted)
        nuls = nulRestorerFor(session, self._fetcher, plan.groups)
        fetched, refusals = await self._fetch(session, plan, nuls)
        return await self._handOver(folder, plan, nuls, fetched, refusals)

    async def _fetch(
        self, session: IMAPSession, plan: BodyPlan, nuls: NULRestorer
    ) -> tuple[dict[int, Body], list[CommandFailed | None]]:
        """
        Fetch the bodies of C{plan}, each handed to C{nuls} as it arrives
        (L{BodyFetcher.fetch}); if that fails, C{nuls} lets go of what it
        asked for besides.
        """
        try:
            return await self._fetcher.fetch(
                session, plan.groups, b"BODY.PEEK[]", plan.sizes, nuls.received
            )
        except BaseException:
            nuls.abandon()
            raise

    async def _handOver(
        self,
        folder: SourceFolder,
        plan: BodyPlan,
        nuls: NULRestorer,
        fetched: dict[int, Body],
        refusals: Sequence[CommandFailed | None],
    ) -> list[MessageBody]:
        """
        The bodies of C{plan} as L{imapmig.sources.imap.IMAPSource.readBodies}
        hands them on, from those C{fetched} (their NULs put back by
        C{nuls}) and the C{refusals} of their commands; every spooled body
        not handed on is closed.

        @raise TransientError: a spooled body cannot be read, or a refusal
            says "not now".
        """
        try:
            await nuls.restore(fetched)
            return self._bodies(folder, plan, fetched, self._refusalsByUID(plan.groups, refusals))
        except OSError as e:
            raise TransientError(
                f"{self.description}: a spooled body cannot be read: {e.strerror or e}"
            ) from None
        finally:
            closeSpooled(fetched.values())

    def _folderUnreadable(
        self, folder: SourceFolder, error: CommandFailed, count: int
    ) -> list[MessageBody]:
        """
        What a read of C{count} messages gives when their folder cannot be
        opened: each unreadable, with why.

        @raise TransientError: the refusal says "not now"
            (L{FolderMarks.refused}).
        """
        transient = self._marks.refused("EXAMINE", error)
        if transient is not None:
            raise transient from None
        gone = UnreadableMessage(
            f"the source folder {folder.key!r} cannot be opened: {error.status} {error.text}"
        )
        return [gone] * count

    async def _admit(self, wanted: Sequence[tuple[int, int]]) -> None:
        """
        Wait for the throttle to let the C{(uid, size)} messages of
        C{wanted} be fetched (cancelled by L{cancelAdmissions}).
        """
        throttle = self._throttle
        if throttle is None or not throttle.rated or not wanted:
            return
        admitting = throttle.admit(len(wanted), sum(size for _, size in wanted))
        self._admitting.add(admitting)
        try:
            await admitting
        finally:
            self._admitting.discard(admitting)

    def _refusalsByUID(
        self, groups: Sequence[Sequence[int]], refusals: Sequence[CommandFailed | None]
    ) -> dict[int, CommandFailed]:
        """
        The refusal of each UID whose body fetch command was refused.

        @raise TransientError: a refusal says "not now"
            (L{FolderMarks.refused}).
        @raise CommandFailed: a refusal is not a C{NO}.
        """
        refusalOf: dict[int, CommandFailed] = {}
        for group, refusal in zip(groups, refusals):
            if refusal is not None:
                self._checkRefusal(refusal)
                refusalOf.update(dict.fromkeys(group, refusal))
        return refusalOf

    def _checkRefusal(self, refusal: CommandFailed) -> None:
        """
        Raise C{refusal}, or what it says, unless it is a C{NO} about the
        messages asked for.
        """
        transient = self._marks.refused("UID FETCH", refusal)
        if transient is not None:
            raise transient
        if refusal.status != "NO":
            raise refusal

    async def readHeaders(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        messages: Sequence[SourceMessage],
    ) -> Sequence[bytes | None]:
        """
        See L{imapmig.sources.imap.IMAPSource.readHeaders}.
        """
        try:
            status = await self._marks.ensureOpen(reader, session, folder)
            uids = [_uidOf(message, status.uidValidity) for message in messages]
            headers = await _fetchHeaders(session, uids)
        except CommandFailed:
            return [None] * len(messages)
        return [None if uid is None else headers.get(uid) for uid in uids]

    def _bodies(
        self,
        folder: SourceFolder,
        plan: BodyPlan,
        fetched: dict[int, Body],
        refusalOf: dict[int, CommandFailed],
    ) -> ReadBodies:
        """
        What L{imapmig.sources.imap.IMAPSource.readBodies} returns for the
        messages of C{plan}, from what was C{fetched}, with the facts of
        each body held in memory (L{ReadBodies}); a spooled body becomes a
        L{StreamedBody} that owns its file.
        """
        bodies = ReadBodies()
        made: dict[int | None, tuple[MessageBody, int]] = {}
        for uid in plan.uids:
            if uid in made:
                body, facts = made[uid]
            elif uid in fetched and uid not in plan.tooLarge:
                body, facts = made[uid] = self.messageBodyAndFacts(folder, uid, fetched.pop(uid))
            else:
                body, facts = self._unread(uid, plan, refusalOf), UNKNOWN
            bodies.add(body, facts)
        return bodies

    def _unread(
        self, uid: int | None, plan: BodyPlan, refusalOf: dict[int, CommandFailed]
    ) -> UnreadableMessage:
        """
        Why the message C{uid} of C{plan} has no body.
        """
        if uid is None:
            return UnreadableMessage(
                f"the source folder was renumbered (UIDVALIDITY {plan.uidValidity}) "
                "since it was listed"
            )
        if uid in plan.tooLarge:
            return UnreadableMessage(
                f"listed at {plan.tooLarge[uid]} octets, more than the "
                f"{self._fetcher.maxMessageBytes} read from a source"
            )
        refusal = refusalOf.get(uid)
        if refusal is None or refusal.code == "EXPUNGEISSUED":
            return UnreadableMessage(EXPUNGED)
        return UnreadableMessage(f"the source server refused to send it: NO {refusal.text}")

    def messageBody(self, folder: SourceFolder, uid: int, body: Body) -> MessageBody:
        """
        One fetched body as a source hands it on: CRLF in memory
        (L{asCRLF}), or a L{StreamedBody} on its spool file (converted to
        CRLF as it is read, as L{imapmig.mail.message.toCRLF} would).
        """
        return self.messageBodyAndFacts(folder, uid, body)[0]

    def messageBodyAndFacts(
        self, folder: SourceFolder, uid: int, body: Body
    ) -> tuple[MessageBody, int]:
        """
        L{messageBody}, and the facts of its octets found as a body held in
        memory was made CRLF (L{crlfAndFacts}), or L{UNKNOWN}.
        """
        if body is None:
            return UnreadableMessage("the source server sent NIL for its body"), UNKNOWN
        if isinstance(body, SpooledLiteral):
            return _streamed(folder, uid, body), UNKNOWN
        return crlfAndFacts(body)


def _streamed(folder: SourceFolder, uid: int, body: SpooledLiteral) -> MessageBody:
    """
    A spooled body as a L{StreamedBody} that owns its file.
    """
    fd = body.detach()
    try:
        return StreamedBody.fromDescriptor(fd, f"{folder.key} UID {uid} (spooled)")
    except OSError as e:
        os.close(fd)
        return UnreadableMessage(f"the spooled body cannot be read: {e.strerror or e}")


async def _fetchHeaders(
    session: IMAPSession, uids: Sequence[int | None]
) -> dict[int | None, bytes | None]:
    """
    The C{BODY.PEEK[HEADER.FIELDS (...)]} of C{uids}, by UID (one the
    server does not send is absent).

    @raise CommandFailed: the server refused.
    """
    wanted = sorted({uid for uid in uids if uid is not None})
    if not wanted:
        return {}
    fetchParser(session).limits = LISTING_LIMITS
    items = await session.fetchMetadata(
        formatUIDSet(wanted), b"UID BODY.PEEK[HEADER.FIELDS " + HEADER_FIELDS + b"]"
    )
    return dict(_headerOf(item) for item in items)
