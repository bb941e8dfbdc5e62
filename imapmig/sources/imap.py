# -*- test-case-name: tests.test_sources_imap -*-
"""
An IMAP account as an L{imapmig.sources.IMessageSource}: migrating from
one server to another.

The source is strictly read-only: it opens folders with EXAMINE, reads
bodies with C{BODY.PEEK[]} (so C{\\Seen} is not set), and never sends
SELECT, STORE, EXPUNGE or anything else that changes the account.

Folders are what LIST shows (with LIST-EXTENDED, one C{LIST ... RETURN
(SUBSCRIBED SPECIAL-USE)}; else LIST and LSUB), less those that cannot hold
messages.  Messages are listed with one C{UID FETCH 1:* (UID FLAGS
INTERNALDATE RFC822.SIZE)} per folder and keyed C{"<UIDVALIDITY>:<UID>"}:
as long as the folder keeps its UIDVALIDITY a key names the same message
for ever.  When the server renumbers a folder (a new UIDVALIDITY, after a
restore or a mailbox rebuild) every message gets a new key, so the state
store no longer recognises the copies already made; recognising them again
by content (Message-ID, digest) is the caller's job, not the source's.

Bodies are read in the caller's batches with pipelined C{UID FETCH <set>
(UID BODY.PEEK[])} commands, each covering about L{COMMAND_BYTES} octets of
messages, through the incremental FETCH reader of
L{imapmig.imap.fetch}: a body arrives as one buffer, never re-parsed.  At
most one batch of bodies is held at a time, and none larger than
L{SPOOL_ABOVE} octets: a larger one is written to an unlinked temporary
file as it arrives and handed on as a L{StreamedBody}, read a slice at a
time as it is sent.

What the server may send is bounded by what it listed: a body literal
larger than twice the largest RFC822.SIZE of the batch (plus
L{SIZE_SLACK}), or bodies adding up to more than twice the batch's listed
total, fail the connection before they are read (the server is broken or
hostile; the call fails with a L{ConnectionLost}).  A message listed
larger than C{maxMessageBytes} is not fetched at all: it is unreadable,
with the reason.  A body holding 0x80 is
fetched again as C{BINARY[]} where the server has BINARY, to put back NUL
octets C{BODY[]} cannot carry (see L{IMAPSource._restoreNULs}).

Calls are served by a small pool of connections, at most as many as the
job has workers, one call at a time on each: a call goes to an idle
connection that has its folder open already, else to an idle one with no
folder open, else to a new one while the pool may grow, else to any idle
one, else it waits its turn on the connection with its folder open (or the
least busy).  So two workers
reading two folders each keep their own folder open instead of
re-EXAMINEing it on every read.  A connection is opened when first needed;
if the server refuses an extra one (many limit connections per account)
the pool stays at the size it has.  A connection is dropped when a call on
it fails with a L{TransientError} (the next call opens a new one) and every
one is logged out by L{IMAPSource.close}.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Awaitable, Callable, Concatenate, Coroutine, ParamSpec, Sequence, TypeVar

from attrs import evolve, frozen
from twisted.internet.defer import Deferred, DeferredList, DeferredLock
from zope.interface import implementer

from twisted.logger import Logger

from imapmig.errors import CommandFailed, ImapmigError, SourceError, TransientError
from imapmig.imap.fetch import FetchLimits, FetchResponseParser
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.session import METADATA_ITEMS, ExaminedMailbox, IMAPSession, refusalsOf
from imapmig.imap.signals import SignalAction, classifyRefusal
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
from imapmig.schedule.throttle import Throttle
from imapmig.sources import IMessageSource
from imapmig.sources.imapfolders import LEFT_OUT_SHOWN, sourceFolders
from imapmig.sources.labelviews import (
    COPY,
    DEDUP,
    FALLBACK_ITEM,
    GMAIL_EXTENSION,
    HEADER_ITEM,
    LABELS_ITEM,
    MESSAGE_ID_ITEM,
    LabelViewFilter,
    folderLabels,
    hasMessageId,
    headerMessageIds,
    planLabelViews,
    resolveLabelViews,
)
from imapmig.units import Count

__all__ = [
    "COMMAND_BYTES",
    "MAX_MESSAGE_BYTES",
    "SIZE_SLACK",
    "SPOOL_ABOVE",
    "FlagChange",
    "FolderChanges",
    "FolderStatus",
    "IMAPSource",
    "asCRLF",
    "messageKey",
    "parseMessageKey",
]

T = TypeVar("T")
P = ParamSpec("P")

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

LISTING_LIMITS = FetchLimits(maxLiteral=1024 * 1024)
"""
What a listing (C{UID FETCH ... (UID FLAGS INTERNALDATE RFC822.SIZE)})
may carry in literals: none is expected.
"""

EXPUNGED = "expunged from the source since it was listed"

# Octets read at a time when comparing spooled bodies.
_COMPARE_STEP = 1024 * 1024

_Body = bytes | SpooledLiteral | None

# Refusals that say the server failed on what it was asked to read (a
# corrupt mail file gives "NO [SERVERBUG] Internal error occurred" on every
# FETCH of it): about those messages or that folder, not "try later", as
# the signals module would have it for a server storing messages.
_ABOUT_WHAT_WAS_ASKED = frozenset(["SERVERBUG", "CORRUPTION"])


log = Logger()


class _Reader:
    """
    One connection of an L{IMAPSource}'s pool.

    @ivar lock: held by the call running on it.
    @ivar session: the logged-in session, or L{None} until opened (or after
        it was dropped).
    @ivar examined: the key of the folder it has open, if any.
    """

    def __init__(self) -> None:
        self.lock = DeferredLock()
        self.session: IMAPSession | None = None
        self.examined: str | None = None


@frozen
class FolderStatus:
    """
    Where a folder stood when it was last listed: what a later delta pass
    (L{IMAPSource.listMessagesSince}) starts from.

    @ivar uidValidity: C{UIDVALIDITY} (0 if the server gave none).
    @ivar uidNext: the UID the next message will get: C{UIDNEXT}, or one
        more than the highest UID listed when the server gave none.
    @ivar highestModSeq: C{HIGHESTMODSEQ} where the server has CONDSTORE,
        else L{None}.
    @ivar exists: how many messages the folder held.
    @ivar deferred: UIDs below C{uidNext}, ascending, that the pass left
        undecided (a label view's deferred messages,
        L{LabelViewFilter.deferred}): the next delta pass lists them again.
    """

    uidValidity: int
    uidNext: int
    highestModSeq: int | None
    exists: int
    deferred: tuple[int, ...] = ()


@frozen
class FlagChange:
    """
    A message whose flags changed since a delta pass's mod-sequence.

    @ivar key: the message's key (see L{messageKey}).
    @ivar flags: its flags now, C{\\Recent} left out.
    """

    key: str
    flags: tuple[str, ...]


@frozen
class FolderChanges:
    """
    What changed in a folder since a given L{FolderStatus}.

    @ivar status: the folder's status now.
    @ivar uidValidityChanged: the server renumbered the folder: every key
        changed, and L{newMessages} lists every message of the folder.
    @ivar newMessages: the messages that arrived since (UID at least the
        old C{uidNext}), oldest first.
    @ivar flagChanges: messages listed before whose flags changed since the
        old mod-sequence, by ascending UID.
    @ivar flagChangesKnown: whether L{flagChanges} is complete: false when
        the server has no CONDSTORE, or when no mod-sequence was given.
    """

    status: FolderStatus
    uidValidityChanged: bool
    newMessages: tuple[SourceMessage, ...]
    flagChanges: tuple[FlagChange, ...]
    flagChangesKnown: bool


def messageKey(uidValidity: int, uid: int) -> str:
    """
    The key of a message of an IMAP folder: C{"<UIDVALIDITY>:<UID>"}.
    """
    return f"{uidValidity}:{uid}"


def parseMessageKey(key: str) -> tuple[int, int] | None:
    """
    The UIDVALIDITY and UID of a key made by L{messageKey}, or L{None} if
    C{key} is not one.
    """
    validity, _, uid = key.partition(":")
    if validity.isdigit() and uid.isdigit() and validity.isascii() and uid.isascii():
        return int(validity), int(uid)
    return None


def sourceFlags(flags: tuple[str, ...] | None) -> tuple[str, ...]:
    """
    The flags of a source message: every flag but C{\\Recent} (which no
    client may set), system flags and keywords alike.  A flag that is not
    ASCII (invalid in IMAP, but seen in the wild) is left out: it could not
    be sent to the destination.
    """
    if not flags:
        return ()
    return tuple(f for f in flags if f.isascii() and f.lower() != "\\recent")


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


def _commandGroups(
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


def _fetchParser(session: IMAPSession) -> FetchResponseParser:
    """
    The FETCH reader of C{session}'s connection, whose limits each call
    sets.  The client offers no accessor yet: this is the one place that
    reaches into it (to be replaced by C{MigrationIMAP4Client.fetchLimits}).
    """
    parser: FetchResponseParser = session.client._fetchParser
    return parser


def _fetchInto(
    session: IMAPSession, command: bytes, sink: Callable[[FetchedItem], object]
) -> Deferred[bytes]:
    """
    Send a fetch command now (pipelined), its responses to C{sink}, its
    errors mapped by the session (L{CommandFailed}, L{ConnectionLost}).
    The session offers this privately only: this is the one place that
    calls it (to be replaced by a public C{IMAPSession.fetchInto}).
    """
    return session._fetch(command, sink)


def _bodyLimits(
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


class _BodySink:
    """
    Keeps the whole-message body of each UID asked for, from the FETCH
    responses of body fetches; closes every spooled literal it does not
    keep.

    @ivar bodies: by UID, the body in memory, spooled, or L{None} for
        C{NIL}.
    """

    def __init__(
        self, wanted: set[int], received: Callable[[int, _Body], object] | None = None
    ) -> None:
        """
        @param wanted: the UIDs whose bodies are kept (L{want} adds more).
        @param received: called with the UID and body of each body kept,
            as it arrives, or L{None}.
        """
        self._wanted = wanted
        self._received = received
        self.bodies: dict[int, _Body] = {}

    def want(self, uid: int) -> None:
        """
        Keep the body of C{uid} too, from its next response on.
        """
        self._wanted.add(uid)

    def __call__(self, item: FetchedItem) -> None:
        uid = item.uid
        spooled = item.spooledBody
        body: _Body = spooled if spooled is not None else item.body
        for spool in item.spooled.values():
            if spool is not body:
                spool.close()
        if uid is None or uid not in self._wanted or not item.hasBody:
            if spooled is not None:
                spooled.close()
            return
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
        for body in self.bodies.values():
            if isinstance(body, SpooledLiteral):
                body.close()


class _EarlyBinary:
    """
    The C{BINARY.PEEK[]} of the bodies in memory that hold 0x80 (see
    L{IMAPSource._restoreNULs}), asked for as soon as the last body of
    their body fetch command has arrived: one C{UID FETCH <uids> (UID
    BINARY.PEEK[])} per body fetch command, pipelined behind it while its
    tagged reply is still to come.  The server answers it right after that
    fetch, with no round trip between them.  (One command per body would
    cost the server more: Dovecot's work per command, a mailbox sync
    among it, is about that of decoding a body.)  A body fetch whose
    responses do not name every UID asked for (one expunged meanwhile)
    leaves its candidates to L{IMAPSource._restoreNULs}.

    Each command raises the parser's total bound by twice its bodies'
    sizes (L{FetchResponseParser.allowMore}), as the limits of a separate
    fetch of those bodies would (L{_bodyLimits}).

    @ivar asked: the UIDs whose C{BINARY.PEEK[]} was asked for.
    """

    def __init__(self, session: IMAPSession, groups: Sequence[Sequence[int]]) -> None:
        """
        @param session: the connection the body fetch runs on.
        @param groups: the UIDs of each body fetch command, in order.
        """
        self._session = session
        self._sink = _BodySink(set())
        self._commands: list[Deferred[bytes]] = []
        self._groupOf = {uid: index for index, group in enumerate(groups) for uid in group}
        self._remaining = [len(set(group)) for group in groups]
        self._candidates: list[list[tuple[int, int]]] = [[] for _ in groups]
        self.asked: set[int] = set()

    def bodyReceived(self, uid: int, body: _Body) -> None:
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
        _fetchParser(session).allowMore(2 * sum(size for _, size in candidates))
        self._commands.append(
            _fetchInto(
                session, b"UID FETCH " + formatUIDSet(uids) + b" (UID BINARY.PEEK[])", self._sink
            )
        )

    async def finish(self) -> dict[int, _Body]:
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


def _holds(body: bytes | SpooledLiteral, octet: int) -> bool:
    """
    Whether C{body} holds C{octet}.

    @raise OSError: a spooled body cannot be read.
    """
    if isinstance(body, SpooledLiteral):
        return body.contains(bytes([octet]))
    # An integer needle: CPython tries a bytes needle as an integer first,
    # raising (and formatting) a TypeError it then clears.
    return octet in body


def _isBodyButNUL(stored: bytes | SpooledLiteral, body: bytes | SpooledLiteral) -> bool:
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


@implementer(IMessageSource)
class IMAPSource:
    """
    The folders and messages of one IMAP account, read-only.

    @ivar description: names the account in errors and logs.
    """

    def __init__(
        self,
        openSession: Callable[[], Awaitable[IMAPSession]],
        description: str = "IMAP source",
        commandBytes: int = COMMAND_BYTES,
        connections: int = 1,
        spoolAbove: int | None = SPOOL_ABOVE,
        spoolDirectory: str | None = None,
        maxMessageBytes: int = MAX_MESSAGE_BYTES,
        include: Sequence[str] = (),
        labelViews: str = COPY,
        archiveFolder: str | None = "Archive",
        job: str | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        """
        @param openSession: opens a new logged-in session to the account
            (as L{imapmig.daemon.service.sessionOpener} makes); called on the
            first call, and again after a call lost the connection.
        @param description: names the account in errors and logs.
        @param commandBytes: see L{COMMAND_BYTES}.
        @param connections: the most connections to open at once (the
            job's workers, so that each can keep its own folder open).
        @param spoolAbove: see L{SPOOL_ABOVE}; L{None} holds every body in
            memory.
        @param spoolDirectory: where spooled bodies go, as unlinked files;
            L{None}: the default temporary directory (L{tempfile.gettempdir}:
            C{$TMPDIR}, else C{/tmp}).
        @param maxMessageBytes: see L{MAX_MESSAGE_BYTES}.
        @param include: the job's C{include} folder patterns: a mailbox
            outside the personal namespace is listed only if one of them
            names it explicitly (L{namesExplicitly}); a label view named
            so is kept (L{imapmig.sources.labelviews}).
        @param labelViews: what becomes of label views (Gmail's All Mail,
            Important, Starred): C{"dedup"}, C{"copy"} or C{"auto"} (see
            L{imapmig.sources.labelviews}).
        @param archiveFolder: where the messages found only in All Mail go
            when label views are de-duplicated without X-GM-EXT-1, or
            L{None}: they are recorded as not migrated.
        @param job: the name of the job reading, carried by every log
            event as C{job}.
        @param throttle: the rates of the source server and account
            (L{imapmig.schedule.throttle}), waited for before each body
            FETCH, and told of a server's "wait"; or L{None}.  (The daily
            download budget is counted by the job, per unit.)
        """
        self._job = job
        self._openSession = openSession
        self.description = description
        self._commandBytes = commandBytes
        self._connections = max(1, connections)
        self._spoolAbove = spoolAbove
        self._spoolDirectory = spoolDirectory
        self._maxMessageBytes = maxMessageBytes
        self._readers: list[_Reader] = []
        self._status: dict[str, FolderStatus] = {}
        self._wireNames: dict[str, bytes] = {}
        self._include = tuple(include)
        self._spaces: ServerNamespaces | None = None
        self._labelViews = labelViews
        self._archiveFolder = archiveFolder
        # The folders the last listFolders left out, each with why.
        self.leftOut: list[tuple[SourceFolder, str]] = []
        # By UID, the Message-IDs of the messages of All Mail not migrated.
        self._notMigratedIds: dict[int, str | None] = {}
        # The listing pass's de-duplication of label views, if any.
        self._labelFilter: LabelViewFilter | None = None
        self._throttle = throttle
        # The errors this source raised (see raised).
        self._raised: weakref.WeakSet[ImapmigError] = weakref.WeakSet()
        # The reads waiting for the throttle (each holding its connection's
        # lock): L{close} ends them rather than wait behind them.
        self._admitting: set[Deferred[None]] = set()
        # The connections still opening: L{abort} gives them up.
        self._openings: set[Deferred[IMAPSession]] = set()

    # IMessageSource

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder that can hold messages, C{INBOX} first, then sorted
        by path (parents before children).  A folder that cannot
        (C{\\Noselect}, C{\\NonExistent}) is left out, its children not.

        Each folder's C{path} is its decoded name split at the account's
        hierarchy delimiter, its C{key} the decoded name as listed, its
        C{specialUse} its RFC 6154 attribute, C{subscribed} from the
        server.

        @return: a Deferred that fails with L{SourceError} when the server
            refuses to list, or with a L{TransientError}.
        """
        return self._call(self._listFolders, None)

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, by ascending UID, without bodies; the
        folder's L{FolderStatus} is remembered (L{folderStatus}).

        @return: a Deferred that fails with L{SourceError} when the folder
            cannot be opened, or with a L{TransientError}.
        """
        return self._call(self._listMessages, folder, folder)

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        The bodies of C{messages}, in the same order, as the server sent
        them (IMAP bodies are CRLF already; L{asCRLF} fixes the rare one
        that is not); one larger than the spool threshold as a
        L{StreamedBody} on its temporary file.  A message that is gone (no
        longer in the folder, or the folder renumbered or gone), or listed
        larger than C{maxMessageBytes}, is an L{UnreadableMessage} saying
        so.

        @return: a Deferred that fails with a L{TransientError} when the
            connection is lost, a response is beyond what was listed, or
            the server will not serve now (L{ServerBusy}, or
            L{QuotaExceeded}: pause).
        """
        return self._call(self._readBodies, folder, folder, messages)

    def readHeaders(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[bytes | None]]:
        """
        The header fields that name C{messages} to their owner
        (L{imapmig.mail.messagenames.HEADER_FIELDS}), in the same order, with
        one C{UID FETCH} of C{BODY.PEEK[HEADER.FIELDS (...)]}: a few
        hundred octets per message, never a body.  For the messages that
        failed (L{imapmig.job.naming}); L{None} for one the server does
        not send (gone, refused).

        @return: a Deferred that fails with a L{TransientError} when the
            connection is lost.
        """
        return self._call(self._readHeaders, folder, folder, messages)

    # Delta passes

    def folderStatus(self, folder: SourceFolder) -> FolderStatus | None:
        """
        The status of C{folder} when it was last listed or opened, or
        L{None} if it has not been.  A label view's status carries the
        UIDs of the messages it deferred (L{LabelViewFilter.deferred}), for
        the next pass to list again.
        """
        status = self._status.get(folder.key)
        labels = self._labelFilter
        if status is None or labels is None:
            return status
        deferred = tuple(uid for uid in labels.deferred(folder) if uid < status.uidNext)
        if not deferred:
            return status
        return evolve(status, deferred=deferred)

    def listMessagesSince(
        self,
        folder: SourceFolder,
        uidValidity: int,
        uidNext: int,
        modSeq: int | None,
        deferred: Sequence[int] = (),
    ) -> Deferred[FolderChanges]:
        """
        What changed in C{folder} since a pass that left it at
        C{uidValidity}, C{uidNext}, C{modSeq} and C{deferred} (a
        L{FolderStatus} kept from then): the messages that arrived (C{UID
        FETCH <uidNext>:*}) and those of C{deferred} still there (listed
        again as new, from the lowest of them), and, where the server has
        CONDSTORE and C{modSeq} is given, the flags changed on the older
        others (C{UID FETCH 1:<uidNext - 1> (UID FLAGS) (CHANGEDSINCE
        <modSeq>)}).  Messages expunged since are not reported.  If the
        folder's UIDVALIDITY changed, every message is new.
        """
        return self._call(
            self._listMessagesSince, folder, folder, uidValidity, uidNext, modSeq, deferred
        )

    def countMessages(self, folder: SourceFolder) -> Deferred[int]:
        """
        How many messages C{folder} holds (EXAMINE), for one that was left
        out (L{leftOut}): nothing is listed.

        @return: a Deferred that fails with L{SourceError} when the folder
            cannot be opened, or with a L{TransientError}.
        """
        return self._call(self._countMessages, folder, folder)

    async def _countMessages(
        self, reader: _Reader, session: IMAPSession, folder: SourceFolder
    ) -> int:
        examined = await self._examineForListing(reader, session, folder)
        return examined.exists

    def raised(self, error: BaseException) -> bool:
        """
        Whether C{error} came from this source (a call of it failed so):
        a throttling signal in it is the source server's, never the
        destination's, whether or not the source has a throttle.
        """
        return isinstance(error, ImapmigError) and error in self._raised

    def close(self) -> Deferred[None]:
        """
        Log out (after the call in progress, if any; a read still waiting
        for the throttle fails at once with
        L{twisted.internet.defer.CancelledError}).  A later call opens a
        new connection.
        """
        return Deferred.fromCoroutine(self._close())

    def abort(self) -> None:
        """
        Drop every connection now, open or still opening (a server that
        never greets, a login never answered): the calls waiting on them
        fail.  For a job whose stop timed out; a later call opens a new
        connection.
        """
        for opening in list(self._openings):
            opening.cancel()
        for reader in self._readers:
            session = reader.session
            if session is None:
                continue
            if not reader.lock.locked:
                # The call running on a locked reader forgets its session
                # itself, as the abort fails it.
                reader.session = None
                reader.examined = None
            session.abort("the job's stop timed out")

    # Implementation

    def _open(self) -> Deferred[IMAPSession]:
        """
        Open a session, given up by L{abort} while it opens.
        """

        async def opened() -> IMAPSession:
            return await self._openSession()

        opening = Deferred.fromCoroutine(opened())
        if not opening.called:
            self._openings.add(opening)

            def over(result: object) -> object:
                self._openings.discard(opening)
                return result

            opening.addBoth(over)
        return opening

    def _call(
        self,
        method: Callable[Concatenate[_Reader, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Deferred[T]:
        """
        L{_onReader}, as a Deferred.
        """
        return Deferred.fromCoroutine(self._onReader(method, folder, *args, **kwargs))

    def _chooseReader(self, folderKey: str | None) -> _Reader:
        """
        The connection a call about C{folderKey} (L{None}: about no folder)
        should run on; see the module's docstring.
        """
        idle = [reader for reader in self._readers if not reader.lock.locked]
        opened = [reader for reader in idle if reader.session is not None]
        for reader in opened:
            if folderKey is None or reader.examined == folderKey:
                return reader
        for reader in opened:
            if reader.examined is None:
                return reader
        if len(self._readers) < self._connections:
            # A connection of its own rather than close another worker's
            # folder.
            reader = _Reader()
            self._readers.append(reader)
            return reader
        if idle:
            return (opened or idle)[0]
        for reader in self._readers:
            if folderKey is not None and reader.examined == folderKey:
                return reader
        return min(self._readers, key=lambda reader: len(reader.lock.waiting))

    async def _onReader(
        self,
        method: Callable[Concatenate[_Reader, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """
        Run C{method(reader, session, *args, **kwargs)} alone on a connection
        of the pool (L{_chooseReader}), opening it first if needed; a
        L{TransientError} drops that connection.  An L{ImapmigError} it
        raises is remembered as this source's (L{raised}).
        """
        try:
            return await self._runOnReader(method, folder, *args, **kwargs)
        except ImapmigError as e:
            self._raised.add(e)
            raise

    async def _runOnReader(
        self,
        method: Callable[Concatenate[_Reader, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        reader = self._chooseReader(None if folder is None else folder.key)
        await reader.lock.acquire()
        try:
            session = reader.session
            if session is None:
                try:
                    session = await self._open()
                except ImapmigError as e:
                    if not any(other.session is not None for other in self._readers):
                        raise
                    # An extra connection refused: carry on with those open.
                    if reader in self._readers:
                        self._readers.remove(reader)
                    self._connections = max(1, len(self._readers))
                    log.warn(
                        "{source}: an extra connection was refused, reading with "
                        "{count} connection(s): {why}",
                        source=self.description,
                        job=self._job,
                        count=self._connections,
                        why=str(e),
                    )
                    reader.lock.release()
                    reader = self._chooseReader(None if folder is None else folder.key)
                    await reader.lock.acquire()
                    session = reader.session
                    if session is None:
                        session = await self._open()
                reader.session = session
                reader.examined = None
            try:
                return await method(reader, session, *args, **kwargs)
            except TransientError as e:
                if self._throttle is not None:
                    self._throttle.signalled(e)
                reader.session = None
                reader.examined = None
                session.abort()
                raise
        finally:
            reader.lock.release()

    async def _close(self) -> None:
        for admitting in list(self._admitting):
            admitting.cancel()
        readers, self._readers = self._readers, []
        for reader in readers:
            await reader.lock.acquire()
            try:
                session, reader.session, reader.examined = reader.session, None, None
                if session is not None:
                    await session.logout()
            finally:
                reader.lock.release()

    def _refused(self, what: str, error: CommandFailed) -> TransientError | None:
        """
        The error to raise for a refusal that says "not now" or "not this
        session" (L{classifyRefusal}: L{ServerBusy}, L{QuotaExceeded},
        L{ConnectionLost}), else L{None}: the refusal is about what was
        asked (a folder, messages).
        """
        signal = classifyRefusal(error.status, error.text)
        if signal.code in _ABOUT_WHAT_WAS_ASKED:
            return None
        if signal.action in (SignalAction.RETRY, SignalAction.PAUSE, SignalAction.RECONNECT):
            return signal.error(f"{self.description}: {what}")
        return None

    async def _listFolders(self, reader: _Reader, session: IMAPSession) -> Sequence[SourceFolder]:
        spaces = await self._namespaces(session)
        try:
            listed = await session.listFolders()
        except CommandFailed as e:
            raise self._refused("LIST", e) or SourceError(
                f"{self.description}: cannot list the folders: {e.status} {e.text}"
            ) from None
        folders, wireNames, leftOut = sourceFolders(listed, spaces, self._include)
        self.leftOut = [
            (
                SourceFolder(path=(name,), key=name),
                f"{where}; a folder rule (include) naming it copies it",
            )
            for where, names in leftOut.items()
            for name in names
        ]
        self._notMigratedIds = {}
        for where, names in leftOut.items():
            log.info(
                "{source}: {mailboxes} {where} left out, among them {names};"
                " a folder rule (include) naming them copies them",
                source=self.description,
                job=self._job,
                count=len(names),
                mailboxes=Count(len(names), "mailbox", "mailboxes"),
                where=where,
                names=names[:LEFT_OUT_SHOWN],
            )
        self._wireNames = wireNames
        folders = self._planLabelViews(session, folders)
        await self._noteViewsAtStart(reader, session, folders)
        return folders

    def _planLabelViews(
        self, session: IMAPSession, folders: list[SourceFolder]
    ) -> list[SourceFolder]:
        """
        Apply the label view behaviour (L{imapmig.sources.labelviews}) to
        the listed folders, starting a new listing pass.
        """
        self._labelFilter = None
        if resolveLabelViews(self._labelViews, session.capabilities) != DEDUP:
            return folders
        messageIds = GMAIL_EXTENSION in session.capabilities
        folders, deduplicated, leftOut = planLabelViews(
            folders, self._include, messageIds, self._archiveFolder
        )
        self.leftOut += [
            (folder, f"{why}; a folder rule (include) naming it, or label_views: copy, copies it")
            for folder, why in leftOut
        ]
        for folder, why in leftOut:
            log.info(
                "{source}: label view {folder} left out: {why}; a folder rule"
                " (include) naming it, or label_views: copy, copies it",
                source=self.description,
                job=self._job,
                folder=folder.key,
                why=why,
            )
        if deduplicated:
            self._labelFilter = LabelViewFilter(deduplicated, byHeader=not messageIds)
        return folders

    async def _noteViewsAtStart(
        self, reader: _Reader, session: IMAPSession, folders: Sequence[SourceFolder]
    ) -> None:
        """
        Take note of each de-duplicated view's UIDNEXT before any folder
        of the pass is listed (L{LabelViewFilter.began}); a view that
        cannot be opened now is refused when listed.
        """
        labels = self._labelFilter
        if labels is None:
            return
        for folder in folders:
            if folder.key not in labels.deduplicated:
                continue
            try:
                examined = await self._examine(reader, session, folder)
            except CommandFailed:
                continue
            if examined.uidNext is not None:
                labels.began(folder, examined.uidNext)

    def _listingItems(self, folder: SourceFolder) -> bytes:
        """
        What a listing fetches of each message: with X-GM-MSGID while label
        views are de-duplicated, and a view's with X-GM-LABELS.
        """
        labels = self._labelFilter
        if labels is None:
            return METADATA_ITEMS
        if labels.byHeader:
            return METADATA_ITEMS + b" " + HEADER_ITEM
        if folder.key in labels.deduplicated:
            return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM + b" " + LABELS_ITEM
        return METADATA_ITEMS + b" " + MESSAGE_ID_ITEM

    def _labelFiltered(
        self, folder: SourceFolder, items: list[FetchedItem]
    ) -> list[FetchedItem]:
        """
        A folder's listing as the label view de-duplication has it: an
        ordinary folder's whole (its messages noted), a view's without the
        messages seen in other folders.

        @raise SourceError: C{folder} is a view, and a folder listed before
            it could not be: which of its messages are in that folder is
            unknown, so none is copied rather than some twice.
        """
        labels = self._labelFilter
        if labels is None:
            return items
        # The messages left out still move the folder's UIDNEXT on.
        self._noteHighest(folder, items)
        if folder.key in labels.deduplicated and labels.unlisted:
            raise SourceError(
                f"{self.description}: the label view {folder.key!r} is not copied:"
                f" the folder(s) {', '.join(labels.unlisted)} could not be listed,"
                " so which of its messages they hold is unknown"
            )
        wireName = self._wireNames.get(folder.key, folder.key.encode("utf-8"))
        kept, dropped = labels.listed(folder, items, folderLabels(folder, wireName))
        if dropped:
            log.info(
                "{source}: {messages} of {folder} {are} also in other folders"
                " and {are} copied from there only",
                messages=Count(dropped, "message"),
                are="is" if dropped == 1 else "are",
                source=self.description,
                job=self._job,
                count=dropped,
                folder=folder.key,
            )
        if folder.notMigrated is not None:
            self._notMigratedIds.update(headerMessageIds(kept))
        return kept

    def messageIdOf(self, folder: SourceFolder, message: SourceMessage) -> str | None:
        """
        The Message-ID, as the state store records it, of a message listed
        in a folder whose messages are not migrated
        (L{SourceFolder.notMigrated}: its listing read each one's); else
        L{None}.
        """
        parsed = parseMessageKey(message.key)
        if folder.notMigrated is None or parsed is None:
            return None
        return self._notMigratedIds.get(parsed[1])

    async def _namespaces(self, session: IMAPSession) -> ServerNamespaces:
        """
        The account's namespaces (L{IMAPSession.namespaces}), asked once, a
        refusal mapped as for LIST.  Without NAMESPACE, the empty prefix
        (each mailbox's delimiter is LIST's).
        """
        if self._spaces is not None:
            return self._spaces
        if not session.knowsNamespaces:
            self._spaces = ServerNamespaces()
            return self._spaces
        try:
            self._spaces = await session.namespaces()
            return self._spaces
        except CommandFailed as e:
            raise self._refused("NAMESPACE", e) or SourceError(
                f"{self.description}: cannot read the namespaces: {e.status} {e.text}"
            ) from None

    async def _examine(
        self, reader: _Reader, session: IMAPSession, folder: SourceFolder, listing: bool = True
    ) -> ExaminedMailbox:
        """
        EXAMINE C{folder} and remember its status.

        @param listing: whether the folder's listing follows.  If not (its
            bodies are read), the UIDNEXT and HIGHESTMODSEQ its listing
            saw are kept: the mark of the pass must not move past
            messages and changes that came after the listing.
        @raise CommandFailed: the server refused.
        """
        reader.examined = None
        examined = await session.examine(folder.key, self._wireNames.get(folder.key))
        reader.examined = folder.key
        previous = self._status.get(folder.key)
        uidValidity = examined.uidValidity or 0
        uidNext = examined.uidNext
        highestModSeq = examined.highestModSeq
        if not listing and previous is not None and previous.uidValidity == uidValidity:
            uidNext, highestModSeq = previous.uidNext, previous.highestModSeq
        if uidNext is None:
            # Until the listing says better: the UIDs seen so far.
            uidNext = previous.uidNext if previous is not None else 1
        self._status[folder.key] = FolderStatus(
            uidValidity=uidValidity,
            uidNext=uidNext,
            highestModSeq=highestModSeq,
            exists=examined.exists,
        )
        return examined

    async def _examineForListing(
        self, reader: _Reader, session: IMAPSession, folder: SourceFolder
    ) -> ExaminedMailbox:
        try:
            return await self._examine(reader, session, folder)
        except CommandFailed as e:
            raise self._refused("EXAMINE", e) or SourceError(
                f"{self.description}: cannot open the folder {folder.key!r}: "
                f"{e.status} {e.text}"
            ) from None

    async def _fetchMessages(
        self, session: IMAPSession, folder: SourceFolder, uidSet: bytes
    ) -> list[FetchedItem]:
        _fetchParser(session).limits = LISTING_LIMITS
        try:
            items = await session.fetchMetadata(uidSet, self._listingItems(folder))
            labels = self._labelFilter
            if labels is None or not labels.byHeader:
                return items
            # Recognised by other header fields (labelviews.headerIdentity).
            missing = [i.uid for i in items if i.uid is not None and not hasMessageId(i)]
            if not missing:
                return items
            more = await session.fetchMetadata(formatUIDSet(missing), b"UID " + FALLBACK_ITEM)
        except CommandFailed as e:
            raise self._refused("UID FETCH", e) or SourceError(
                f"{self.description}: cannot list the messages of {folder.key!r}: "
                f"{e.status} {e.text}"
            ) from None
        fields = {i.uid: i.sections for i in more}
        return [
            evolve(i, sections={**i.sections, **fields[i.uid]}) if i.uid in fields else i
            for i in items
        ]

    def _messages(
        self, folder: SourceFolder, uidValidity: int, items: Sequence[FetchedItem], fromUID: int
    ) -> list[SourceMessage]:
        """
        The L{SourceMessage}s of listing responses with a UID of at least
        C{fromUID}, and the folder's C{uidNext} raised past them.
        """
        messages = [
            SourceMessage(
                key=messageKey(uidValidity, item.uid),
                flags=sourceFlags(item.flags),
                internalDate=item.internalDate,
                size=item.size or 0,
            )
            for item in items
            if item.uid is not None and item.uid >= fromUID
        ]
        self._noteHighest(folder, items)
        return messages

    def _noteHighest(self, folder: SourceFolder, items: Sequence[FetchedItem]) -> None:
        """
        Raise the folder's C{uidNext} past the UIDs of listing responses.
        """
        highest = max((item.uid for item in items if item.uid is not None), default=0)
        status = self._status[folder.key]
        if highest >= status.uidNext:
            self._status[folder.key] = FolderStatus(
                status.uidValidity, highest + 1, status.highestModSeq, status.exists
            )

    async def _listMessages(
        self, reader: _Reader, session: IMAPSession, folder: SourceFolder
    ) -> Sequence[SourceMessage]:
        try:
            examined = await self._examineForListing(reader, session, folder)
            uidValidity = self._status[folder.key].uidValidity
            items = await self._fetchMessages(session, folder, b"1:*") if examined.exists else []
        except SourceError:
            if self._labelFilter is not None:
                self._labelFilter.failed(folder)
            raise
        return self._messages(folder, uidValidity, self._labelFiltered(folder, items), 1)

    async def _listMessagesSince(
        self,
        reader: _Reader,
        session: IMAPSession,
        folder: SourceFolder,
        uidValidity: int,
        uidNext: int,
        modSeq: int | None,
        deferred: Sequence[int],
    ) -> FolderChanges:
        # The UIDs below uidNext listed again: only those the last pass
        # left undecided, not the ones it decided between them.
        again = {uid for uid in deferred if 0 < uid < uidNext}
        fromUID = min(again, default=uidNext)
        try:
            examined = await self._examineForListing(reader, session, folder)
            status = self._status[folder.key]
            items = []
            if status.uidValidity != uidValidity:
                if examined.exists:
                    items = await self._fetchMessages(session, folder, b"1:*")
            elif examined.exists and (
                again or examined.uidNext is None or examined.uidNext > uidNext
            ):
                items = await self._fetchMessages(session, folder, b"%d:*" % max(fromUID, 1))
        except SourceError:
            if self._labelFilter is not None:
                self._labelFilter.failed(folder)
            raise
        if status.uidValidity != uidValidity:
            items = self._labelFiltered(folder, items)
            messages = self._messages(folder, status.uidValidity, items, 1)
            return FolderChanges(self._status[folder.key], True, tuple(messages), (), False)
        # "n:*" also gives the last message when n is beyond it: it moves
        # UIDNEXT on (where EXAMINE gave none), but only the new ones count,
        # and are noted for the label views.
        self._noteHighest(folder, items)
        items = [
            item
            for item in items
            if item.uid is not None and (item.uid >= uidNext or item.uid in again)
        ]
        newMessages = self._messages(
            folder, uidValidity, self._labelFiltered(folder, items), max(fromUID, 1)
        )
        changes: list[FlagChange] = []
        known = False
        condstore = bool({b"CONDSTORE", b"QRESYNC"} & session.capabilities)
        if modSeq is not None and condstore and examined.highestModSeq is not None:
            known = True
            if uidNext > 1 and examined.highestModSeq > modSeq:
                _fetchParser(session).limits = LISTING_LIMITS
                try:
                    changed = await session.fetchMetadata(
                        b"1:%d" % (uidNext - 1), b"UID FLAGS", changedSince=modSeq
                    )
                except CommandFailed as e:
                    raise self._refused("UID FETCH", e) or SourceError(
                        f"{self.description}: cannot read the flag changes of "
                        f"{folder.key!r}: {e.status} {e.text}"
                    ) from None
                changes = [
                    FlagChange(messageKey(uidValidity, item.uid), sourceFlags(item.flags))
                    for item in changed
                    if item.uid is not None
                    and item.uid < uidNext
                    and item.uid not in again
                    and item.flags is not None
                ]
        return FolderChanges(
            self._status[folder.key], False, tuple(newMessages), tuple(changes), known
        )

    async def _readBodies(
        self,
        reader: _Reader,
        session: IMAPSession,
        folder: SourceFolder,
        messages: Sequence[SourceMessage],
    ) -> Sequence[MessageBody]:
        if not messages:
            return []
        if reader.examined != folder.key or folder.key not in self._status:
            try:
                await self._examine(reader, session, folder, listing=False)
            except CommandFailed as e:
                transient = self._refused("EXAMINE", e)
                if transient is not None:
                    raise transient from None
                gone = UnreadableMessage(
                    f"the source folder {folder.key!r} cannot be opened: {e.status} {e.text}"
                )
                return [gone] * len(messages)
        uidValidity = self._status[folder.key].uidValidity
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
        groups = _commandGroups(wanted, self._commandBytes) if wanted else []
        throttle = self._throttle
        if throttle is not None and throttle.rated and wanted:
            admitting = throttle.admit(len(wanted), sum(size for _, size in wanted))
            self._admitting.add(admitting)
            try:
                await admitting
            finally:
                self._admitting.discard(admitting)
        early = _EarlyBinary(session, groups) if b"BINARY" in session.capabilities else None
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
                transient = self._refused("UID FETCH", refusal)
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

    async def _readHeaders(
        self,
        reader: _Reader,
        session: IMAPSession,
        folder: SourceFolder,
        messages: Sequence[SourceMessage],
    ) -> Sequence[bytes | None]:
        try:
            if reader.examined != folder.key or folder.key not in self._status:
                await self._examine(reader, session, folder, listing=False)
            uidValidity = self._status[folder.key].uidValidity
            uids = [_uidOf(message, uidValidity) for message in messages]
            wanted = sorted({uid for uid in uids if uid is not None})
            items = []
            if wanted:
                _fetchParser(session).limits = LISTING_LIMITS
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
        fetched: dict[int, _Body],
        refusalOf: dict[int, CommandFailed],
        tooLarge: dict[int, int],
    ) -> list[MessageBody]:
        """
        What L{readBodies} returns for C{uids}, from what was fetched; a
        spooled body becomes a L{StreamedBody} that owns its file.
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
                body = made[uid] = self._messageBody(folder, uid, fetched.pop(uid))
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

    def _messageBody(self, folder: SourceFolder, uid: int, body: _Body) -> MessageBody:
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
        received: Callable[[int, _Body], object] | None = None,
    ) -> tuple[dict[int, _Body], list[CommandFailed | None]]:
        """
        Fetch C{section} of the UIDs of C{groups}, one C{UID FETCH} per
        group, all written at once, within the limits of the listed
        C{sizes} (L{_bodyLimits}); C{received}, if given, is called with
        each body kept as it arrives (L{_BodySink}).

        @return: the bodies by UID (a UID absent got none), and per group
            its refusal or L{None}.
        @raise ConnectionLost: the connection was lost, or a response could
            not be read or was beyond the limits; raised once every command
            has ended, every spool closed.
        """
        if not groups:
            return {}, []
        _fetchParser(session).limits = _bodyLimits(
            sizes, self._maxMessageBytes, self._spoolAbove, self._spoolDirectory
        )
        sink = _BodySink({uid for group in groups for uid in group}, received)
        commands = [
            _fetchInto(
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
        self, session: IMAPSession, bodies: dict[int, _Body], early: _EarlyBinary
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
                if body is not None and (uid in early.asked or _holds(body, 0x80))
            ]
            late = [(uid, len(body)) for uid, body in candidates if uid not in early.asked]
            if late:
                more, _ = await self._fetchBodies(
                    session,
                    _commandGroups(late, self._commandBytes),
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
                if stored is not None and _isBodyButNUL(stored, body):
                    del binary[uid]
                    if isinstance(body, SpooledLiteral):
                        body.close()
                    bodies[uid] = stored
        finally:
            for left in binary.values():
                if isinstance(left, SpooledLiteral):
                    left.close()
