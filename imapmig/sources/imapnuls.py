# -*- test-case-name: tests.test_sources_imap -*-
"""
Putting back the NUL octets an IMAP server replaced in C{BODY[]}: the
C{BINARY.PEEK[]} asked for as bodies holding 0x80 arrive
(L{EarlyBinary}), and the comparison that decides whether it is the
message as stored (L{isBodyButNUL}).

Split out of L{imapmig.sources.imap}.
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred, DeferredList

from imapmig.imap.fetch import formatUIDSet
from imapmig.imap.session import IMAPSession, refusalsOf
from imapmig.imap.spool import SpooledLiteral
from imapmig.sources.imapbodies import Body, BodySink
from imapmig.sources.imapstatus import fetchInto, fetchParser

__all__ = ["EarlyBinary", "holds", "isBodyButNUL"]

# Octets read at a time when comparing spooled bodies.
_COMPARE_STEP = 1024 * 1024


class EarlyBinary:
    """
    The C{BINARY.PEEK[]} of the bodies in memory that hold 0x80 (see
    L{imapmig.sources.imapreading.BodyReader._restoreNULs}), asked for as soon as the last body of
    their body fetch command has arrived: one C{UID FETCH <uids> (UID
    BINARY.PEEK[])} per body fetch command, pipelined behind it while its
    tagged reply is still to come.  The server answers it right after that
    fetch, with no round trip between them.  (One command per body would
    cost the server more: Dovecot's work per command, a mailbox sync
    among it, is about that of decoding a body.)  A body fetch whose
    responses do not name every UID asked for (one expunged meanwhile)
    leaves its candidates to L{imapmig.sources.imapreading.BodyReader._restoreNULs}.

    Each command raises the parser's total bound by twice its bodies'
    sizes (L{FetchResponseParser.allowMore}), as the limits of a separate
    fetch of those bodies would (L{bodyLimits}).

    @ivar asked: the UIDs whose C{BINARY.PEEK[]} was asked for.
    """

    def __init__(self, session: IMAPSession, groups: Sequence[Sequence[int]]) -> None:
        """
        @param session: the connection the body fetch runs on.
        @param groups: the UIDs of each body fetch command, in order.
        """
        self._session = session
        self._sink = BodySink(set())
        self._commands: list[Deferred[bytes]] = []
        self._groupOf = {uid: index for index, group in enumerate(groups) for uid in group}
        self._remaining = [len(set(group)) for group in groups]
        self._candidates: list[list[tuple[int, int]]] = [[] for _ in groups]
        self.asked: set[int] = set()

    def bodyReceived(self, uid: int, body: Body) -> None:
        """
        A body fetch's response for C{uid} arrived: note it if it is in
        memory and holds 0x80 (a spooled one is searched later, off the
        reactor's read path), and once every UID of its command has
        arrived, ask for the C{BINARY[]} of those noted.
        """
        index = self._groupOf.pop(uid, None)
        if index is None:
            # Not asked for, or arrived before: counted once.
            return
        candidates = self._candidates[index]
        if isinstance(body, bytes) and 0x80 in body:
            candidates.append((uid, len(body)))
        self._remaining[index] -= 1
        if self._remaining[index] or not candidates:
            return
        uids = [uid for uid, _ in candidates]
        self.asked.update(uids)
        for asked in uids:
            self._sink.want(asked)
        session = self._session
        fetchParser(session).allowMore(2 * sum(size for _, size in candidates))
        self._commands.append(
            fetchInto(
                session, b"UID FETCH " + formatUIDSet(uids) + b" (UID BINARY.PEEK[])", self._sink
            )
        )

    async def finish(self) -> dict[int, Body]:
        """
        Wait for every C{BINARY.PEEK[]} asked for.

        @return: C{BINARY[]} by UID (a UID refused or answered with no
            body is absent); the caller closes the spooled ones.
        @raise ConnectionLost: the connection was lost, or a response was
            beyond the limits (every spool closed).
        """
        _, error = await refusalsOf(self._commands)
        if error is not None:
            self._sink.close()
            raise error
        return self._sink.bodies

    def abandon(self) -> None:
        """
        The body fetch failed: once the commands sent have ended, close the
        spooled bodies they brought and consume their failures.
        """
        if self._commands:
            DeferredList(self._commands, consumeErrors=True).addCallback(
                lambda _: self._sink.close()
            )



def holds(body: bytes | SpooledLiteral, octet: int) -> bool:
    """
    Whether C{body} holds C{octet}.

    @raise OSError: a spooled body cannot be read.
    """
    if isinstance(body, SpooledLiteral):
        return body.contains(bytes([octet]))
    # An integer needle: CPython tries a bytes needle as an integer first,
    # raising (and formatting) a TypeError it then clears.
    return octet in body


def isBodyButNUL(stored: bytes | SpooledLiteral, body: bytes | SpooledLiteral) -> bool:
    """
    Whether C{stored} (C{BINARY[]}) holds NUL and is C{body} (C{BODY[]})
    exactly but for NUL where C{body} has 0x80.

    @raise OSError: a spooled body cannot be read.
    """
    if len(stored) != len(body):
        return False
    if isinstance(stored, bytes) and isinstance(body, bytes):
        return 0 in stored and stored.replace(b"\0", b"\x80") == body
    sawNUL = False
    for offset in range(0, len(body), _COMPARE_STEP):
        ours = _readAt(stored, offset)
        theirs = _readAt(body, offset)
        if len(ours) != len(theirs):
            return False
        if b"\0" in ours:
            sawNUL = True
            ours = ours.replace(b"\0", b"\x80")
        if ours != theirs:
            return False
    return sawNUL


def _readAt(body: bytes | SpooledLiteral, offset: int) -> bytes:
    if isinstance(body, SpooledLiteral):
        return body.read(offset, _COMPARE_STEP)
    return body[offset : offset + _COMPARE_STEP]


