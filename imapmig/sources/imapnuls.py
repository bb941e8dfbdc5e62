# -*- test-case-name: tests.test_sources_imapnuls,tests.test_sources_imap -*-
"""
Putting back the NUL octets an IMAP server replaced in C{BODY[]}.

A literal cannot carry NUL, so a server sends C{BODY[]} with each NUL
replaced (Dovecot sends 0x80); only C{BINARY[]} (RFC 3516, C{literal8})
carries them.  But C{BINARY[]} also decodes the message's
Content-Transfer-Encoding, rewriting its headers, so it cannot simply
replace C{BODY[]}.  For each body holding 0x80 (the only ones that can
have lost a NUL) C{BINARY.PEEK[]} is fetched too, and used only when it
holds NUL and is C{BODY[]} exactly but for NUL where C{BODY[]} has 0x80
(L{isBodyButNUL}): the message as stored.  A body in memory has its
C{BINARY.PEEK[]} asked for as it arrives (L{EarlyBinary}); the others
(spooled ones) are searched afterwards and fetched together.  Spooled
bodies are searched and compared a slice at a time.

Split out of L{imapmig.sources.imap}: a server without BINARY gets a
L{NULRestorer} that does nothing, one with it a L{BinaryNULRestorer}
(L{nulRestorerFor}), so the reading has no case of its own for either.
"""

from __future__ import annotations

from typing import Callable, Sequence

from twisted.internet.defer import Deferred, DeferredList

from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.errormap import refusalsOf
from imapmig.imap.session import IMAPSession
from imapmig.imap.spool import SpooledLiteral
from imapmig.sources.imapbodies import Body, BodyFetcher, BodySink, closeSpooled
from imapmig.sources.imapstatus import fetchInto, fetchParser

__all__ = [
    "BinaryNULRestorer",
    "EarlyBinary",
    "NULRestorer",
    "holds",
    "isBodyButNUL",
    "nulRestorerFor",
]

# Octets read at a time when comparing spooled bodies.
_COMPARE_STEP = 1024 * 1024


def nulRestorerFor(
    session: IMAPSession, fetcher: BodyFetcher, groups: Sequence[Sequence[int]]
) -> NULRestorer:
    """
    What puts back the NULs of the bodies C{fetcher} fetches on C{session}
    in C{groups}: nothing, unless the server has BINARY.
    """
    if b"BINARY" in session.capabilities:
        return BinaryNULRestorer(session, fetcher, groups)
    return NULRestorer()


class NULRestorer:
    """
    For a server without BINARY: the bodies stay as they were sent.

    @ivar received: what the body fetch calls with each body as it
        arrives, or L{None}.
    """

    received: Callable[[int, Body], object] | None = None

    def abandon(self) -> None:
        """
        The body fetch failed: let go of what was asked for besides.
        """

    async def restore(self, bodies: dict[int, Body]) -> None:
        """
        Put back the NUL octets the server replaced in C{bodies}.

        @param bodies: C{BODY[]} by UID, updated in place (a spool replaced
            is closed).
        @raise OSError: a spooled body cannot be read.
        @raise ConnectionLost: the connection was lost, or a response was
            beyond the limits.
        """


class BinaryNULRestorer(NULRestorer):
    """
    For a server with BINARY: C{BINARY.PEEK[]} asked for early
    (L{EarlyBinary}), then for the spooled bodies holding 0x80, and kept
    where it is the body as stored.
    """

    def __init__(
        self, session: IMAPSession, fetcher: BodyFetcher, groups: Sequence[Sequence[int]]
    ) -> None:
        """
        @param session: the connection the body fetch runs on.
        @param fetcher: fetches the C{BINARY.PEEK[]} of spooled bodies.
        @param groups: the UIDs of each body fetch command, in order.
        """
        self._session = session
        self._fetcher = fetcher
        self._early = EarlyBinary(session, groups)
        self.received = self._early.bodyReceived

    def abandon(self) -> None:
        self._early.abandon()

    async def restore(self, bodies: dict[int, Body]) -> None:
        binary = await self._early.finish()
        try:
            candidates = self._candidates(bodies)
            await self._fetchLate(candidates, binary)
            _replaceStored(candidates, binary, bodies)
        finally:
            closeSpooled(binary.values())

    def _candidates(self, bodies: dict[int, Body]) -> list[tuple[int, bytes | SpooledLiteral]]:
        """
        The bodies that may have lost a NUL, by UID: those whose
        C{BINARY.PEEK[]} was asked for early, and the spooled ones holding
        0x80.
        """
        asked, clean = self._early.asked, self._early.clean
        return [
            (uid, body)
            for uid, body in sorted(bodies.items(), key=lambda pair: pair[0])
            if body is not None and (uid in asked or (uid not in clean and holds(body, 0x80)))
        ]

    async def _fetchLate(
        self, candidates: Sequence[tuple[int, bytes | SpooledLiteral]], binary: dict[int, Body]
    ) -> None:
        """
        Fetch into C{binary} the C{BINARY.PEEK[]} of the C{candidates} not
        asked for early.
        """
        late = self._late(candidates)
        if not late:
            return
        more, _ = await self._fetcher.fetch(
            self._session, self._fetcher.groups(late), b"BINARY.PEEK[]", [size for _, size in late]
        )
        for uid, stored in more.items():
            closeSpooled([binary.get(uid)])
            binary[uid] = stored


    def _late(
        self, candidates: Sequence[tuple[int, bytes | SpooledLiteral]]
    ) -> list[tuple[int, int]]:
        """
        C{(uid, size)} of the C{candidates} whose C{BINARY.PEEK[]} was not
        asked for early.
        """
        return [(uid, len(body)) for uid, body in candidates if uid not in self._early.asked]


def _replaceStored(
    candidates: Sequence[tuple[int, bytes | SpooledLiteral]],
    binary: dict[int, Body],
    bodies: dict[int, Body],
) -> None:
    """
    Replace in C{bodies} each of C{candidates} whose C{BINARY[]} is the
    body as stored (L{isBodyButNUL}), taking it out of C{binary} and
    closing the body replaced.
    """
    for uid, body in candidates:
        stored = binary.get(uid)
        if stored is not None and isBodyButNUL(stored, body):
            del binary[uid]
            closeSpooled([body])
            bodies[uid] = stored


class EarlyBinary:
    """
    The C{BINARY.PEEK[]} of the bodies in memory that hold 0x80, asked
    for as soon as the last body of their body fetch command has arrived:
    one C{UID FETCH <uids> (UID BINARY.PEEK[])} per body fetch command,
    pipelined behind it while its tagged reply is still to come.  The
    server answers it right after that fetch, with no round trip between
    them.  (One command per body would
    cost the server more: Dovecot's work per command, a mailbox sync
    among it, is about that of decoding a body.)  A body fetch whose
    responses do not name every UID asked for (one expunged meanwhile)
    leaves its candidates to L{BinaryNULRestorer}.

    Each command raises the parser's total bound by twice its bodies'
    sizes (L{FetchResponseParser.allowMore}), as the limits of a separate
    fetch of those bodies would (L{bodyLimits}).

    @ivar asked: the UIDs whose C{BINARY.PEEK[]} was asked for.
    @ivar clean: the UIDs whose body, in memory, was found without 0x80
        as it arrived (and is not searched again).
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
        self.clean: set[int] = set()

    def bodyReceived(self, uid: int, body: Body) -> None:
        """
        A body fetch's response for C{uid} arrived: note it if it is in
        memory and holds 0x80 (a spooled one is searched later, off the
        reactor's read path), and once every UID of its command has
        arrived, ask for the C{BINARY[]} of those noted.
        """
        index = self._groupOf.pop(uid, None)
        if index is None:
            # Not asked for, or arrived before: counted once, and this
            # body, which replaces the one searched, is not searched here.
            self.clean.discard(uid)
            return
        candidates = self._candidates[index]
        if isinstance(body, bytes):
            if 0x80 in body:
                candidates.append((uid, len(body)))
            else:
                self.clean.add(uid)
        self._remaining[index] -= 1
        if self._remaining[index] or not candidates:
            return
        self._ask(candidates)

    def _ask(self, candidates: Sequence[tuple[int, int]]) -> None:
        """
        Ask for the C{BINARY.PEEK[]} of C{candidates}, C{(uid, size)}
        pairs, behind the body fetch.
        """
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
    return _slicesButNUL(stored, body)


def _slicesButNUL(stored: bytes | SpooledLiteral, body: bytes | SpooledLiteral) -> bool:
    """
    L{isBodyButNUL} for bodies of the same length, one of them spooled,
    compared a slice at a time.
    """
    sawNUL = False
    for offset in range(0, len(body), _COMPARE_STEP):
        ours = _readAt(stored, offset)
        if not _isSliceButNUL(ours, _readAt(body, offset)):
            return False
        sawNUL = sawNUL or b"\0" in ours
    return sawNUL


def _isSliceButNUL(ours: bytes, theirs: bytes) -> bool:
    """
    Whether C{ours} is C{theirs} but for NUL where C{theirs} has 0x80.
    """
    return len(ours) == len(theirs) and ours.replace(b"\0", b"\x80") == theirs


def _readAt(body: bytes | SpooledLiteral, offset: int) -> bytes:
    if isinstance(body, SpooledLiteral):
        return body.read(offset, _COMPARE_STEP)
    return body[offset : offset + _COMPARE_STEP]


