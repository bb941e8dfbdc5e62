# -*- test-case-name: tests.test_imap_session,tests.test_imap_client,tests.test_sources_imap -*-
"""
A typed async facade over one IMAP connection.

It offers the few commands a migration needs on a connection opened by
L{imapmig.imap.opening.openSession}, returning domain values
(L{imapmig.imap.mailboxes}) and raising L{imapmig.errors} exceptions (as
L{imapmig.imap.errormap} maps them: the one place where IMAP replies are
mapped to the error hierarchy).  Nothing above it sees L{IMAP4Client}.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence, TypeVar

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.mail.imap4 import Command, IMAP4Exception

from imapmig.errors import CommandFailed, TLSRequired
from imapmig.imap.client import FetchSink, MigrationIMAP4Client
from imapmig.imap.auth import Credentials, PasswordLogin
from imapmig.imap.batches import MailboxBatches
from imapmig.imap.compress import CompressionStats
from imapmig.imap.errormap import mapped, refusalsOf
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import formatUIDSet
from imapmig.imap.listing import MailboxListing
from imapmig.imap.login import logIn, serverCapabilities
from imapmig.imap.mailboxes import (
    ExaminedMailbox,
    ListedMailbox,
    MailboxInfo,
    MailboxState,
    SelectedMailbox,
    openedState,
)
from imapmig.imap.mailboxname import encodeMailboxName, mailboxArgument
from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.outgoing import AppendOutcomes, PipelineSettings, SendDeadline
from imapmig.imap.pipeline import AppendPipeline
from imapmig.log.logfields import withFields
from imapmig.mail.folders import PersonalNamespace
from imapmig.progress.telemetry import ServerTelemetry

log = Logger()

T = TypeVar("T")


@frozen
class FetchedBodies:
    """
    What pipelined C{UID FETCH} commands for bodies brought back.

    @ivar bodies: by UID, the message octets as the server sent them, or
        L{None} where it sent C{NIL}.  A UID absent here got no body.
    @ivar refusals: per UID set, in the order given, the L{CommandFailed}
        of its tagged C{NO} or C{BAD}, or L{None} for C{OK}.
    """

    bodies: dict[int, bytes | None]
    refusals: tuple[CommandFailed | None, ...]


METADATA_ITEMS = b"UID FLAGS INTERNALDATE RFC822.SIZE"
"""
The FETCH items of a message listing.
"""


class IMAPSession:
    """
    One logged-in IMAP connection.

    @ivar capabilities: the server's capabilities after login.
    @ivar namespaceOverride: the personal namespace the configuration
        gives the server (its C{namespace} key), believed instead of the
        personal namespace of its NAMESPACE response (see L{namespaces});
        L{None} for the server's.
    """

    def __init__(
        self,
        client: MigrationIMAP4Client,
        description: str,
        namespaceOverride: PersonalNamespace | None = None,
    ) -> None:
        self._client = client
        self._log = withFields(log, client.logFields)
        self._description = description
        self.capabilities: frozenset[bytes] = frozenset()
        self.namespaceOverride = namespaceOverride
        self._pipeline: AppendPipeline | None = None
        self._listing = MailboxListing(client, description, self._log)
        self._batches = MailboxBatches(client, description, self._log)

    @property
    def description(self) -> str:
        """
        Who this session is: C{"alice at tcp:mail.example.org:143"}.
        """
        return self._description

    @property
    def client(self) -> MigrationIMAP4Client:
        """
        The protocol, for tests that inspect the transport.
        """
        return self._client

    async def startTLS(self, tlsOptions: object) -> None:
        """
        Upgrade the connection with STARTTLS.

        @raise TLSRequired: the server does not offer it.
        """
        caps = await serverCapabilities(self._client)
        if b"STARTTLS" not in caps:
            raise TLSRequired(
                f"{self._description}: server does not offer STARTTLS "
                "(set starttls: off to allow cleartext, or use a tls: endpoint)"
            )
        await mapped("STARTTLS", self._client.startTLS(tlsOptions))

    async def login(self, user: str, password: str) -> None:
        """
        Log in as C{user} with their password (see L{authenticate}).

        @raise AuthenticationFailed: the server refused.
        """
        await self.authenticate(PasswordLogin(user, password))

    async def authenticate(self, credentials: Credentials) -> None:
        """
        Log in with C{credentials} (L{imapmig.imap.login.logIn}), and learn
        the server's capabilities after login.

        @raise AuthenticationFailed: the server refused, or offers no way
            to carry C{credentials}.
        @raise ServerBusy: the server refused saying "not now".
        """
        self.capabilities = await logIn(self._client, self._description, credentials)

    async def startCompression(self) -> bool:
        """
        Turn on COMPRESS=DEFLATE (RFC 4978) if the server offers it; call it
        after login, before any other command.  A refusal leaves the
        connection uncompressed and is only logged.

        @return: whether the connection is now compressed.
        """
        if b"COMPRESS=DEFLATE" not in self.capabilities:
            return False
        try:
            await mapped("COMPRESS", self._client.startCompression())
        except CommandFailed as e:
            self._log.warn(
                "{session}: the server refused COMPRESS DEFLATE: {text}",
                session=self._description,
                text=e.text,
            )
            return False
        return True

    def compressionStats(self) -> CompressionStats | None:
        """
        Octets before and after compression in each direction, or L{None}
        if the connection is not compressed.
        """
        return self._client.compressionStats()

    async def listMailboxes(self) -> list[MailboxInfo]:
        """
        Every mailbox (C{LIST "" "*"}).
        """
        return await self._listing.mailboxes()

    async def hierarchyDelimiter(self) -> str | None:
        """
        The hierarchy delimiter of the personal namespace (C{LIST "" ""}),
        or L{None} for a flat server.
        """
        return await self._listing.hierarchyDelimiter()

    @property
    def knowsNamespaces(self) -> bool:
        """
        Whether L{namespaces} has more to say than the empty prefix: the
        server offers NAMESPACE, or the configuration overrides it.
        Without, a caller that LISTs anyway reads the delimiter from
        there, saving L{namespaces}' C{LIST "" ""}.
        """
        return self.namespaceOverride is not None or b"NAMESPACE" in self.capabilities

    async def namespaces(self) -> ServerNamespaces:
        """
        The account's namespaces, with the configuration's override
        (L{MailboxListing.namespaces}, which says how a server without
        NAMESPACE, or one that refuses or garbles it, is read, and what it
        raises).
        """
        return await self._listing.namespaces(self.capabilities, self.namespaceOverride)

    async def create(self, mailbox: str) -> None:
        """
        Create C{mailbox}.
        """
        await mapped(
            "CREATE", self._client.sendCommand(Command(b"CREATE", encodeMailboxName(mailbox)))
        )

    async def createMailboxes(
        self,
        mailboxes: Sequence[str],
        uses: Mapping[str, str] | None = None,
        subscribe: Collection[str] | None = None,
    ) -> dict[str, str]:
        """
        Create and subscribe C{mailboxes}, in order (parents first), in one
        round trip (L{MailboxBatches.createMailboxes}, which says how).
        """
        return await self._batches.createMailboxes(
            mailboxes, uses if b"CREATE-SPECIAL-USE" in self.capabilities else None, subscribe
        )

    async def subscribeMailboxes(self, mailboxes: Sequence[str]) -> None:
        """
        Subscribe to C{mailboxes}, pipelined; a refusal is only logged.
        """
        await self._batches.subscribeMailboxes(mailboxes)

    async def selectEach(
        self, mailboxes: Sequence[str]
    ) -> dict[str, MailboxState | CommandFailed]:
        """
        SELECT each of C{mailboxes}, every command pipelined: one round trip
        in all, not one per mailbox.  The last one is left selected.  Only
        between APPEND pipelines, with no other command in flight.

        @return: each mailbox's state, or the server's refusal.
        """
        return await self._batches.selectEach(mailboxes)

    async def storeFlags(
        self,
        mailbox: str,
        changes: Sequence[tuple[int, tuple[str, ...]]],
        deadline: SendDeadline | None = None,
    ) -> int:
        """
        SELECT C{mailbox} and set each message's flags exactly (C{UID STORE
        uid FLAGS.SILENT (...)}), every command pipelined; none once
        C{deadline} has passed (L{MailboxBatches.storeFlags}).

        @param changes: C{(uid, flags)} pairs.
        @return: how many the server accepted; a refusal is logged.
        @raise CommandFailed: the SELECT was refused.
        @raise LeaseLost: C{deadline} had passed when the SELECT was
            answered: nothing was stored.
        """
        return await self._batches.storeFlags(mailbox, changes, deadline)

    def selectPipelined(self, mailbox: str) -> Deferred[bytes]:
        """
        SELECT C{mailbox} without waiting for the APPENDs before it to be
        answered (the APPEND pipeline must be between commands).  Dovecot
        then keeps the mailbox open for the APPENDs that follow; those name
        their mailbox anyway, so a refused SELECT costs only speed.
        """
        d = self._client.sendPipelined(b"SELECT " + encodeMailboxName(mailbox))

        def refused(failure: Any) -> None:
            if not failure.check(IMAP4Exception):
                # The connection ended: the APPEND pipeline says so.
                return
            self._log.warn(
                "{session}: SELECT {mailbox!r} refused: {why}",
                session=self._description,
                mailbox=mailbox,
                why=str(failure.value),
            )

        d.addErrback(refused)
        return d

    async def subscribe(self, mailbox: str) -> None:
        """
        Subscribe to C{mailbox}.
        """
        await mapped(
            "SUBSCRIBE",
            self._client.sendCommand(Command(b"SUBSCRIBE", encodeMailboxName(mailbox))),
        )

    async def select(self, mailbox: str) -> SelectedMailbox:
        """
        Select C{mailbox}: Dovecot then keeps it open between APPENDs, which
        more than doubles how many it absorbs.
        """
        lines, _ = await mapped(
            "SELECT", self._client.sendCollecting(b"SELECT", encodeMailboxName(mailbox))
        )
        exists, codes, permanentFlags = openedState(lines)
        return SelectedMailbox(
            name=mailbox,
            uidValidity=codes.get(b"UIDVALIDITY"),
            exists=exists,
            permanentFlags=tuple(sorted(permanentFlags or ())),
        )

    async def examine(self, mailbox: str, wireName: bytes | None = None) -> ExaminedMailbox:
        """
        Open C{mailbox} read-only (EXAMINE; with the C{CONDSTORE} parameter
        where the server has CONDSTORE, so HIGHESTMODSEQ is reported and
        later FETCH responses carry MODSEQ).

        @param wireName: the name as the server listed it (see
            L{ListedMailbox.wireName}); encoded from C{mailbox} when
            L{None}.
        @raise CommandFailed: the server refused (no such mailbox, ...).
        """
        argument = mailboxArgument(mailbox, wireName)
        if b"CONDSTORE" in self.capabilities or b"QRESYNC" in self.capabilities:
            argument += b" (CONDSTORE)"
        lines, _ = await mapped("EXAMINE", self._client.sendCollecting(b"EXAMINE", argument))
        exists, codes, _ = openedState(lines)
        return ExaminedMailbox(
            name=mailbox,
            exists=exists,
            uidValidity=codes.get(b"UIDVALIDITY"),
            uidNext=codes.get(b"UIDNEXT"),
            highestModSeq=codes.get(b"HIGHESTMODSEQ"),
        )

    async def listFolders(self) -> list[ListedMailbox]:
        """
        Every mailbox with its attributes and subscription: one C{LIST ""
        "*" RETURN (SUBSCRIBED SPECIAL-USE)} where the server has
        LIST-EXTENDED (C{SPECIAL-USE} only where it has SPECIAL-USE),
        else C{LIST "" "*"} and C{LSUB "" "*"}.  Mailboxes that cannot be
        selected (C{\\Noselect}, C{\\NonExistent}) are listed too.

        @raise CommandFailed: the server refused.
        """
        return await self._listing.folders(self.capabilities)

    async def fetchMetadata(
        self,
        uidSet: bytes,
        items: bytes = METADATA_ITEMS,
        changedSince: int | None = None,
    ) -> list[FetchedItem]:
        """
        C{UID FETCH uidSet (items)} in the mailbox opened last, with
        C{(CHANGEDSINCE n)} when C{changedSince} is given (RFC 7162; the
        server must have CONDSTORE).

        An unsolicited FETCH for a message (another client changed its
        flags) is merged into that message's response, the later value of
        each item winning; responses without UID are left out.

        @param uidSet: e.g. C{b"1:*"}, C{b"120:*"}, C{b"1:3,7"}; note that
            C{n:*} also gives the last message when C{n} is beyond it.
        @return: the responses, by ascending UID.
        @raise CommandFailed: the server refused.
        @raise ConnectionLost: the connection was lost, or a response could
            not be read (the connection is then dropped).
        """
        command = b"UID FETCH " + uidSet + b" (" + items + b")"
        if changedSince is not None:
            command += b" (CHANGEDSINCE %d)" % changedSince
        byUID: dict[int, FetchedItem] = {}

        def received(item: FetchedItem) -> None:
            uid = item.uid
            if uid is None:
                return
            earlier = byUID.get(uid)
            byUID[uid] = item if earlier is None else _mergedItem(earlier, item)

        await self._fetch(command, received)
        return [byUID[uid] for uid in sorted(byUID)]

    async def fetchBodies(
        self, uidSets: Sequence[Sequence[int]], section: bytes = b"BODY.PEEK[]"
    ) -> FetchedBodies:
        """
        Fetch message bodies in the mailbox opened last: one C{UID FETCH
        <set> (UID <section>)} per UID set, all written at once
        (pipelined), their responses read as they come.  Only the bodies of
        the UIDs asked for are kept.

        @param section: C{BODY.PEEK[]} leaves C{\\Seen} alone; the
            response item is then C{BODY[]}.
        @return: the bodies and, per UID set, whether it was refused; a
            refusal is for the caller to judge (a message expunged
            meanwhile gives C{NO [EXPUNGEISSUED]} on some servers, and no
            response at all on others).
        @raise ConnectionLost: the connection was lost, or a response could
            not be read; raised once every command has ended.
        """
        wanted = {uid for uids in uidSets for uid in uids}
        bodies: dict[int, bytes | None] = {}

        def received(item: FetchedItem) -> None:
            uid = item.uid
            if uid is not None and item.sections and uid in wanted:
                bodies[uid] = item.body

        commands = [
            self._fetch(
                b"UID FETCH " + formatUIDSet(uids) + b" (UID " + section + b")", received
            )
            for uids in uidSets
        ]
        refusals, error = await refusalsOf(commands)
        if error is not None:
            raise error
        return FetchedBodies(bodies, tuple(refusals))

    def _fetch(self, command: bytes, sink: FetchSink) -> Deferred[bytes]:
        """
        Send a fetch command now (pipelined) with its responses going to
        C{sink}, and map its errors.
        """

        async def sent() -> bytes:
            return await mapped("UID FETCH", self._client.fetchInto(command, sink))

        # Started now, not when awaited: the command is written at once.
        return Deferred.fromCoroutine(sent())

    def appendPipeline(
        self,
        batchMessages: int,
        batchBytes: int,
        windowMessages: int,
        windowBytes: int,
        outcomes: AppendOutcomes,
        telemetry: ServerTelemetry | None = None,
        deadline: SendDeadline | None = None,
        batchGrowth: int = 0,
    ) -> AppendPipeline:
        """
        The connection's APPEND pipeline, set up for this server's
        capabilities (LITERAL+/LITERAL-, MULTIAPPEND).  Send no other command
        while it is not idle.

        @param telemetry: the server's telemetry (L{AppendPipeline}).
        @param deadline: past it the pipeline writes nothing more
            (L{AppendPipeline}).
        @param batchGrowth: see L{PipelineSettings.batchGrowth}.
        """
        if self._pipeline is None:
            settings = PipelineSettings.forServer(
                self.capabilities, batchMessages, batchBytes, windowMessages, windowBytes,
                batchGrowth,
            )  # fmt: skip
            self._pipeline = AppendPipeline(
                self._client, settings, outcomes, telemetry, deadline
            )
            # The transport resuming the pipeline (the server read what was
            # buffered) is progress for the reply deadline: a large APPEND
            # on a slow link is not a stall.
            self._client.watchWrites(self._pipeline)
        return self._pipeline

    async def logout(self) -> None:
        """
        Say goodbye and close; errors on the way out are ignored.  Bounded:
        an unanswered LOGOUT is given up after the timeout, and a
        connection that does not close within the timeout is aborted.
        """
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        try:
            await mapped("LOGOUT", self._client.logout())
        except Exception:
            pass
        self._client.close()
        stats = self._client.compressionStats()
        if stats is not None:
            self._logCompression(stats)

    def _logCompression(self, stats: CompressionStats) -> None:
        """
        Log what compression saved on this connection.
        """
        self._log.info(
            "{session}: compression sent {sentPlain} octets as {sentWire}"
            " ({sentPercent}%), received {receivedWire} octets as {receivedPlain}",
            session=self._description,
            sentPlain=stats.sentPlain,
            sentWire=stats.sentWire,
            sentPercent=round(100 * stats.sentRatio),
            receivedWire=stats.receivedWire,
            receivedPlain=stats.receivedPlain,
        )

    def abort(self, reason: str = "the session was abandoned") -> None:
        """
        Drop the connection now (C{abortConnection}); what is pending fails
        with L{ConnectionDropped} carrying C{reason}.
        """
        self._client.abort(reason)


def _mergedItem(earlier: FetchedItem, later: FetchedItem) -> FetchedItem:
    """
    Two FETCH responses for one message as one: each item from C{later}
    where it has it.
    """
    return FetchedItem(
        sequence=later.sequence,
        uid=_known(later.uid, earlier.uid),
        flags=_known(later.flags, earlier.flags),
        internalDate=later.internalDate or earlier.internalDate,
        size=_known(later.size, earlier.size),
        modSeq=_known(later.modSeq, earlier.modSeq),
        sections={**earlier.sections, **later.sections},
        extra={**earlier.extra, **later.extra},
    )


def _known(later: T | None, earlier: T | None) -> T | None:
    """
    C{later} where the later response has the item, else C{earlier}.
    """
    return earlier if later is None else later
