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
from typing import Callable, Sequence

from twisted.internet.defer import Deferred

from imapmig.errors import CommandFailed, TransientError
from imapmig.imap.fetch import FetchedItem, formatUIDSet
from imapmig.imap.session import IMAPSession, refusalsOf
from imapmig.imap.spool import SpooledLiteral
from imapmig.mail.messagenames import HEADER_FIELDS
from imapmig.mail.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    toCRLF,
)
from imapmig.sources.imapbodies import (
    COMMAND_BYTES,
    MAX_MESSAGE_BYTES,
    SPOOL_ABOVE,
    Body,
    BodySink,
    bodyLimits,
    commandGroups,
)
from imapmig.sources.imapnuls import EarlyBinary, holds, isBodyButNUL
from imapmig.sources.imappool import PooledSession
from imapmig.sources.imapstatus import (
    LISTING_LIMITS,
    FolderMarks,
    fetchInto,
    fetchParser,
    parseMessageKey,
)
from imapmig.sources.throttling import IThrottle

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
    C{body} with CRLF line endings: exactly what L{toCRLF} gives, for less
    work on what an IMAP server sends (CRLF throughout).

    L{toCRLF} counts LF and CRLF over the whole body (C{bytes.count}: a
    loop over every octet, twice); here a body holding CR is checked by
    deleting its CRs and turning each LF into CRLF (C{bytes.replace} of a
    single octet: C{memchr} from one line end to the next) and comparing
    the result with the body (C{memcmp}).  They are equal exactly when
    every CR is followed by LF and every LF preceded by CR: the body is
    CRLF throughout, and L{toCRLF} would return it unchanged.  Any other
    body (a bare CR or LF) is left to L{toCRLF}.

    @param body: the message as the server sent it.
    @return: the message with CRLF line endings (C{body} itself when it
        has them already).
    """
    if 13 not in body:
        return body.replace(b"\n", b"\r\n")
    if body.replace(b"\r", b"").replace(b"\n", b"\r\n") == body:
        return body
    return toCRLF(body)



class BodyReader:
    """
    Reads the bodies and header fields of an IMAP account's messages; each
    call runs on a connection of the source's pool.
    """

    def __init__(
        self,
        marks: FolderMarks,
        description: str,
        commandBytes: int = COMMAND_BYTES,
        spoolAbove: int | None = SPOOL_ABOVE,
        spoolDirectory: str | None = None,
        maxMessageBytes: int = MAX_MESSAGE_BYTES,
        throttle: IThrottle | None = None,
    ) -> None:
        """
        @param marks: the status of the source's folders, shared with its
            listing.
        @param description: names the account in errors.
        @param commandBytes: see L{imapmig.sources.imapbodies.COMMAND_BYTES}.
        @param spoolAbove: see L{imapmig.sources.imapbodies.SPOOL_ABOVE};
            L{None} holds every body in memory.
        @param spoolDirectory: where spooled bodies go, or L{None}.
        @param maxMessageBytes: see
            L{imapmig.sources.imapbodies.MAX_MESSAGE_BYTES}.
        @param throttle: waited for before each body FETCH, or L{None}.
        """
        self._marks = marks
        self.description = description
        self._commandBytes = commandBytes
        self._spoolAbove = spoolAbove
        self._spoolDirectory = spoolDirectory
        self._maxMessageBytes = maxMessageBytes
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
        if not messages:
            return []
        if reader.examined != folder.key or folder.key not in self._marks.status:
            try:
                await self._marks.examine(reader, session, folder, listing=False)
            except CommandFailed as e:
                transient = self._marks.refused("EXAMINE", e)
                if transient is not None:
                    raise transient from None
                gone = UnreadableMessage(
                    f"the source folder {folder.key!r} cannot be opened: {e.status} {e.text}"
                )
                return [gone] * len(messages)
        uidValidity = self._marks.status[folder.key].uidValidity
        uids: list[int | None] = []
        wanted: list[tuple[int, int]] = []
        tooLarge: dict[int, int] = {}
        for message in messages:
            parsed = parseMessageKey(message.key)
            if parsed is None or parsed[0] != uidValidity:
                uids.append(None)
                continue
            uids.append(parsed[1])
            if message.size > self._maxMessageBytes:
                tooLarge[parsed[1]] = message.size
            else:
                wanted.append((parsed[1], message.size))
        groups = commandGroups(wanted, self._commandBytes) if wanted else []
        throttle = self._throttle
        if throttle is not None and throttle.rated and wanted:
            admitting = throttle.admit(len(wanted), sum(size for _, size in wanted))
            self._admitting.add(admitting)
            try:
                await admitting
            finally:
                self._admitting.discard(admitting)
        early = EarlyBinary(session, groups) if b"BINARY" in session.capabilities else None
        try:
            fetched, refusals = await self._fetchBodies(
                session,
                groups,
                b"BODY.PEEK[]",
                [size for _, size in wanted],
                None if early is None else early.bodyReceived,
            )
        except BaseException:
            if early is not None:
                early.abandon()
            raise
        try:
            if early is not None:
                await self._restoreNULs(session, fetched, early)
            refusalOf: dict[int, CommandFailed] = {}
            for group, refusal in zip(groups, refusals):
                if refusal is None:
                    continue
                transient = self._marks.refused("UID FETCH", refusal)
                if transient is not None:
                    raise transient
                if refusal.status != "NO":
                    raise refusal
                for refused in group:
                    refusalOf[refused] = refusal
            return self._bodies(folder, uids, uidValidity, fetched, refusalOf, tooLarge)
        except OSError as e:
            raise TransientError(
                f"{self.description}: a spooled body cannot be read: {e.strerror or e}"
            ) from None
        finally:
            for body in fetched.values():
                if isinstance(body, SpooledLiteral):
                    body.close()

    async def readHeaders(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        messages: Sequence[SourceMessage],
    ) -> Sequence[bytes | None]:
        try:
            if reader.examined != folder.key or folder.key not in self._marks.status:
                await self._marks.examine(reader, session, folder, listing=False)
            uidValidity = self._marks.status[folder.key].uidValidity
            uids = [_uidOf(message, uidValidity) for message in messages]
            wanted = sorted({uid for uid in uids if uid is not None})
            items = []
            if wanted:
                fetchParser(session).limits = LISTING_LIMITS
                items = await session.fetchMetadata(
                    formatUIDSet(wanted), b"UID BODY.PEEK[HEADER.FIELDS " + HEADER_FIELDS + b"]"
                )
        except CommandFailed:
            return [None] * len(messages)
        headers = dict(_headerOf(item) for item in items)
        return [None if uid is None else headers.get(uid) for uid in uids]

    def _bodies(
        self,
        folder: SourceFolder,
        uids: Sequence[int | None],
        uidValidity: int,
        fetched: dict[int, Body],
        refusalOf: dict[int, CommandFailed],
        tooLarge: dict[int, int],
    ) -> list[MessageBody]:
        """
        What L{imapmig.sources.imap.IMAPSource.readBodies} returns for
        C{uids}, from what was fetched; a spooled body becomes a
        L{StreamedBody} that owns its file.
        """
        bodies: list[MessageBody] = []
        made: dict[int, MessageBody] = {}
        for uid in uids:
            if uid is None:
                bodies.append(
                    UnreadableMessage(
                        f"the source folder was renumbered (UIDVALIDITY {uidValidity}) "
                        "since it was listed"
                    )
                )
                continue
            if uid in made:
                bodies.append(made[uid])
                continue
            if uid in tooLarge:
                bodies.append(
                    UnreadableMessage(
                        f"listed at {tooLarge[uid]} octets, more than the {self._maxMessageBytes} "
                        "read from a source"
                    )
                )
                continue
            if uid in fetched:
                body = made[uid] = self.messageBody(folder, uid, fetched.pop(uid))
                bodies.append(body)
                continue
            refusal = refusalOf.get(uid)
            if refusal is None or refusal.code == "EXPUNGEISSUED":
                bodies.append(UnreadableMessage(EXPUNGED))
            else:
                bodies.append(
                    UnreadableMessage(f"the source server refused to send it: NO {refusal.text}")
                )
        return bodies

    def messageBody(self, folder: SourceFolder, uid: int, body: Body) -> MessageBody:
        """
        One fetched body as a source hands it on: CRLF in memory
        (L{asCRLF}), or a L{StreamedBody} on its spool file (converted to
        CRLF as it is read, as L{toCRLF} would).
        """
        if body is None:
            return UnreadableMessage("the source server sent NIL for its body")
        if isinstance(body, SpooledLiteral):
            fd = body.detach()
            try:
                return StreamedBody.fromDescriptor(fd, f"{folder.key} UID {uid} (spooled)")
            except OSError as e:
                os.close(fd)
                return UnreadableMessage(f"the spooled body cannot be read: {e.strerror or e}")
        return asCRLF(body)

    async def _fetchBodies(
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
            sizes, self._maxMessageBytes, self._spoolAbove, self._spoolDirectory
        )
        sink = BodySink({uid for group in groups for uid in group}, received)
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

    async def _restoreNULs(
        self, session: IMAPSession, bodies: dict[int, Body], early: EarlyBinary
    ) -> None:
        """
        Put back the NUL octets the server replaced in C{BODY[]}.

        A literal cannot carry NUL, so a server sends C{BODY[]} with each
        NUL replaced (Dovecot sends 0x80); only C{BINARY[]} (RFC 3516,
        C{literal8}) carries them.  But C{BINARY[]} also decodes the
        message's Content-Transfer-Encoding, rewriting its headers, so it
        cannot simply replace C{BODY[]}.  For each body holding 0x80 (the
        only ones that can have lost a NUL) C{BINARY.PEEK[]} is fetched
        too, and used only when it holds NUL and is C{BODY[]} exactly but
        for NUL where C{BODY[]} has 0x80: the message as stored.  A body
        in memory had its C{BINARY.PEEK[]} asked for as it arrived
        (C{early}); the others (spooled ones) are searched now and fetched
        together.  Spooled bodies are searched and compared a slice at a
        time.

        @param bodies: C{BODY[]} by UID, updated in place (a spool replaced
            is closed).
        @param early: the C{BINARY.PEEK[]} commands sent as bodies arrived.
        @raise OSError: a spooled body cannot be read.
        @raise ConnectionLost: as L{_fetchBodies}.
        """
        binary = await early.finish()
        try:
            candidates: list[tuple[int, bytes | SpooledLiteral]] = [
                (uid, body)
                for uid, body in sorted(bodies.items(), key=lambda pair: pair[0])
                if body is not None and (uid in early.asked or holds(body, 0x80))
            ]
            late = [(uid, len(body)) for uid, body in candidates if uid not in early.asked]
            if late:
                more, _ = await self._fetchBodies(
                    session,
                    commandGroups(late, self._commandBytes),
                    b"BINARY.PEEK[]",
                    [size for _, size in late],
                )
                for uid, stored in more.items():
                    previous = binary.get(uid)
                    if isinstance(previous, SpooledLiteral):
                        previous.close()
                    binary[uid] = stored
            for uid, body in candidates:
                stored = binary.get(uid)
                if stored is not None and isBodyButNUL(stored, body):
                    del binary[uid]
                    if isinstance(body, SpooledLiteral):
                        body.close()
                    bodies[uid] = stored
        finally:
            for left in binary.values():
                if isinstance(left, SpooledLiteral):
                    left.close()
