# -*- test-case-name: tests.test_sources_imap,tests.test_imap_client,tests.test_imap_auth,tests.test_imap_compress -*-
"""
A typed async facade over one IMAP connection.

It connects (TCP or implicit TLS, then STARTTLS where required), logs in,
and offers the few commands a migration needs, returning domain values and
raising L{imapmig.errors} exceptions: this is the one place where IMAP
replies are mapped to the error hierarchy.  Nothing above it sees
L{IMAP4Client}.
"""

from __future__ import annotations

import base64
from contextlib import contextmanager
from typing import Any, Collection, Iterable, Iterator, Mapping, Sequence, TypeVar, cast

from attrs import evolve, frozen
from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeout
from twisted.internet.error import (
    ConnectError,
    ConnectionDone,
    ConnectionRefusedError as RefusedError,
    DNSLookupError,
    TCPTimedOutError,
    TimeoutError as ConnectTimeout,
)
from twisted.internet.interfaces import IAddress, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.mail.imap4 import Command, IMAP4Exception

from imapmig.access.cleartext import openSSLLoaded
from imapmig.errors import (
    AuthenticationFailed,
    CredentialsRefused,
    CommandFailed,
    CommandRefused,
    ConnectFailed,
    ConnectionLost,
    FetchParseError,
    ImapmigError,
    ProtocolError,
    TLSFailed,
    TLSInterrupted,
    TLSRequired,
)
from imapmig.imap.client import (
    FetchSink,
    MigrationIMAP4Client,
    describeConnectionLoss,
)
from imapmig.imap.auth import (
    Credentials,
    PasswordLogin,
    SASLMechanism,
    TokenLogin,
    decodeChallenge,
    describeErrorChallenge,
    encodeResponse,
    mechanismFor,
)
from imapmig.imap.compress import CompressionStats
from imapmig.imap.namespace import ServerNamespaces, namespaceResponse
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.syntax import Value, formatUIDSet, parseResponse
from imapmig.imap.pipeline import (
    AppendOutcomes,
    AppendPipeline,
    PipelineSettings,
    encodeMailboxName,
)
from imapmig.imap.signals import SignalAction, classifyRefusal
from imapmig.log.logfields import withFields
from imapmig.mail.plan import PersonalNamespace
from imapmig.progress.telemetry import ServerTelemetry

T = TypeVar("T")

log = Logger()


@frozen
class MailboxInfo:
    """
    A mailbox as LIST shows it.

    @ivar name: decoded from modified UTF-7.
    @ivar attributes: e.g. C{("\\HasNoChildren", "\\Sent")}.
    """

    name: str
    delimiter: str | None
    attributes: tuple[str, ...]


@frozen
class SelectedMailbox:
    """
    What SELECT tells about a mailbox.
    """

    name: str
    uidValidity: int | None
    exists: int
    permanentFlags: tuple[str, ...]


@frozen
class MailboxState:
    """
    What SELECT tells about a mailbox before messages are appended to it.

    @ivar name: the mailbox, decoded.
    @ivar exists: how many messages it holds.
    @ivar uidValidity: C{UIDVALIDITY}, or L{None} if the server sent none.
    @ivar permanentFlags: its C{PERMANENTFLAGS} (C{"\\*"} among them when
        new keywords may be created), or L{None} when the server did not
        say.
    @ivar uidNext: C{UIDNEXT}, the UID the next message will get at the
        least, or L{None} if the server sent none.
    """

    name: str
    exists: int
    uidValidity: int | None
    permanentFlags: frozenset[str] | None
    uidNext: int | None = None


@frozen
class ExaminedMailbox:
    """
    What EXAMINE tells about a mailbox opened read-only.

    @ivar name: the mailbox, decoded.
    @ivar exists: how many messages it holds.
    @ivar uidValidity: C{UIDVALIDITY}, or L{None} if the server sent none.
    @ivar uidNext: C{UIDNEXT} (the UID the next message will get), or
        L{None} if the server sent none.
    @ivar highestModSeq: C{HIGHESTMODSEQ} (RFC 7162) when the server has
        CONDSTORE and keeps mod-sequences for this mailbox, else L{None}.
    """

    name: str
    exists: int
    uidValidity: int | None
    uidNext: int | None
    highestModSeq: int | None


# RFC 6154 attributes (and RFC 8457's Important), by their lower-case form.
SPECIAL_USE_ATTRIBUTES = {
    attribute.lower(): attribute
    for attribute in (
        "\\All",
        "\\Archive",
        "\\Drafts",
        "\\Flagged",
        "\\Important",
        "\\Junk",
        "\\Sent",
        "\\Trash",
    )
}


@frozen
class ListedMailbox:
    """
    A mailbox as LIST (with LIST-EXTENDED, or LIST and LSUB) shows it.

    @ivar name: decoded from modified UTF-7 (a name that does not decode
        is read as UTF-8, invalid octets replaced); C{INBOX} in any case
        is C{"INBOX"}.
    @ivar wireName: the name exactly as the server sent it, to name the
        mailbox in later commands.
    @ivar delimiter: the hierarchy delimiter, or L{None} for a flat name.
    @ivar attributes: e.g. C{("\\HasChildren", "\\Sent")}, as sent.
    @ivar subscribed: whether the user is subscribed to it.
    """

    name: str
    wireName: bytes
    delimiter: str | None
    attributes: tuple[str, ...]
    subscribed: bool

    @property
    def selectable(self) -> bool:
        """
        Whether the mailbox can hold messages (neither C{\\Noselect} nor
        C{\\NonExistent}).
        """
        return not any(a.lower() in ("\\noselect", "\\nonexistent") for a in self.attributes)

    @property
    def specialUse(self) -> str | None:
        """
        Its RFC 6154 attribute (C{"\\Sent"}, ...) in canonical spelling, or
        L{None}.
        """
        for attribute in self.attributes:
            canonical = SPECIAL_USE_ATTRIBUTES.get(attribute.lower())
            if canonical is not None:
                return canonical
        return None


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


def parseResponseCode(text: str) -> str | None:
    """
    The response code atom of a reply text (C{"[TRYCREATE] No such
    mailbox"} gives C{"TRYCREATE"}), or L{None}.
    """
    if not text.startswith("["):
        return None
    end = text.find("]")
    if end == -1:
        return None
    atom = text[1:end].split(" ", 1)[0]
    return atom.upper() or None


def capabilitySet(caps: dict[bytes, Any] | None) -> frozenset[bytes]:
    """
    Twisted's capability mapping as a flat set: C{{b"AUTH": [b"PLAIN"],
    b"IDLE": None}} becomes C{{b"AUTH=PLAIN", b"IDLE"}}, all upper-case.
    """
    result: set[bytes] = set()
    for name, values in (caps or {}).items():
        name = name.upper()
        if values is None:
            result.add(name)
        else:
            for value in values:
                result.add(name if value is None else name + b"=" + value.upper())
    return frozenset(result)


def capabilitiesInReply(reply: bytes) -> frozenset[bytes] | None:
    """
    The capabilities of a C{CAPABILITY} response code in a tagged C{OK}
    (C{b"OK [CAPABILITY IMAP4rev1 LITERAL+] Logged in"}), upper-cased as
    L{capabilitySet} gives them, or L{None} when the reply has none.
    """
    if reply[:15].upper() != b"OK [CAPABILITY ":
        return None
    end = reply.find(b"]", 15)
    if end == -1:
        return None
    return frozenset(atom.upper() for atom in reply[15:end].split())


async def refusalsOf(
    commands: Sequence[Deferred[bytes]],
) -> tuple[list[CommandFailed | None], BaseException | None]:
    """
    Await every one of C{commands} (already sent, pipelined), in order.

    @return: per command its refusal (L{CommandFailed}) or L{None}; and the
        first other error, to raise once every command has ended.
    """
    refusals: list[CommandFailed | None] = []
    error: BaseException | None = None
    for command in commands:
        try:
            await command
        except CommandFailed as e:
            refusals.append(e)
        except Exception as e:
            refusals.append(None)
            if error is None:
                error = e
        else:
            refusals.append(None)
    return refusals, error


@contextmanager
def _abandonedOnError(commands: Iterable[Deferred[Any]]) -> Iterator[None]:
    """
    Around the awaiting of a pipelined batch of C{commands}, in order:
    when it ends with an error (not a refusal, which the loop handles: the
    connection ended, a BYE, a protocol error), the commands not yet
    awaited fail with that same end, which is raised once; their failures
    are consumed here, or each would be logged as "Unhandled error in
    Deferred" (a critical traceback naming no job) when collected.
    """
    commands = list(commands)
    try:
        yield
    except BaseException:
        for d in commands:
            d.addErrback(lambda _: None)
        raise


async def _mapped(command: str, d: Deferred[T]) -> T:
    """
    Await C{d}, mapping Twisted's IMAP, TLS and connection errors to ours.

    A lost connection keeps its class (L{ReplyTimeout}, L{ProtocolError},
    L{ServerBye} and the other L{ConnectionLost}s) and its attributes, its
    text saying which command it interrupted and who ended it.
    """
    try:
        return await d
    except IMAP4Exception as e:
        text = e.args[0] if e.args else ""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        text = str(text)
        status = e.status if isinstance(e, CommandRefused) else "NO"
        raise CommandFailed(command, status, parseResponseCode(text), text) from None
    except TLSInterrupted:
        # The handshake, not the command waiting for it, was interrupted.
        raise
    except ConnectionLost as e:
        raise _retold(e, f"{command}: {describeConnectionLoss(e)}") from None
    except Exception as e:
        tls = _describeTLSError(e)
        if tls is not None:
            raise TLSFailed(f"TLS handshake failed: {tls}") from None
        if isinstance(e, (ConnectionDone, ConnectError)) or type(e).__module__.startswith(
            "twisted.internet"
        ):
            raise ConnectionLost(
                f"{command}: connection lost: {describeConnectionLoss(e)}"
            ) from None
        raise


def _describeTLSError(error: BaseException) -> str | None:
    """
    L{imapmig.imap.tls.describeTLSError}, without importing OpenSSL where it
    is not loaded (L{imapmig.access.cleartext}): no error is a TLS error there.
    """
    if not openSSLLoaded():
        return None
    from imapmig.imap.tls import describeTLSError

    return describeTLSError(error)


E = TypeVar("E", bound=ImapmigError)


def _retold(error: E, text: str) -> E:
    """
    C{error}, same class and attributes, with C{text} as its message.
    """
    # Not copy.copy: these errors' constructors take more than a message.
    retold = type(error).__new__(type(error))
    retold.__dict__.update(error.__dict__)
    retold.args = (text,)
    return retold


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
        caps = await self._capabilities()
        if b"STARTTLS" not in caps:
            raise TLSRequired(
                f"{self._description}: server does not offer STARTTLS "
                "(set starttls: off to allow cleartext, or use a tls: endpoint)"
            )
        await _mapped("STARTTLS", self._client.startTLS(tlsOptions))

    async def login(self, user: str, password: str) -> None:
        """
        Log in as C{user} with their password (see L{authenticate}).

        @raise AuthenticationFailed: the server refused.
        """
        await self.authenticate(PasswordLogin(user, password))

    async def authenticate(self, credentials: Credentials) -> None:
        """
        Log in with C{credentials}, by the mechanism L{mechanismFor} chooses
        from the server's capabilities: AUTHENTICATE with an initial
        response where the server offers SASL-IR, else answering its
        continuation request; LOGIN for a user's password on a server
        without SASL-IR.  No password appears in an error or a log.

        @raise AuthenticationFailed: the server refused (a refused
            AUTHENTICATE as a refused LOGIN), or offers no way to carry
            C{credentials}.
        @raise ServerBusy: the server refused saying "not now" (C{[UNAVAILABLE]},
            C{[INUSE]}, "try again later", too many connections:
            L{imapmig.imap.signals}): retried, as a lost connection is.
        """
        caps = await self._capabilities()
        if (
            b"LOGINDISABLED" in caps
            and b"AUTH=PLAIN" not in caps
            and not isinstance(credentials, TokenLogin)
        ):
            raise AuthenticationFailed(
                f"{self._description}: server refuses cleartext login (LOGINDISABLED)"
            )
        if isinstance(credentials, TokenLogin) and credentials.port is None:
            credentials = evolve(credentials, port=self._peerPort())
        mechanism = mechanismFor(credentials, caps, self._description)
        errorChallenge: list[bytes] = []
        try:
            if mechanism is None:
                assert isinstance(credentials, PasswordLogin)
                reply = await self._logIn(credentials)
            else:
                reply = await self._saslExchange(
                    mechanism, b"SASL-IR" in caps, errorChallenge
                )
        except CommandFailed as e:
            signal = classifyRefusal(e.status, e.text)
            if signal.action is SignalAction.RETRY:
                # Not the credentials: the server cannot check them now
                # (RFC 5530 [UNAVAILABLE]: the LDAP or RADIUS server behind
                # it is down; Dovecot's "Temporary authentication failure"),
                # or asks to wait (too many connections, throttled).
                busy = signal.error(f"{self._description}: login")
                assert busy is not None
                raise busy from None
            # An OAuth failure's reason is in the challenge answered
            # before the NO (RFC 7628 3.2.2), not in the NO's text.
            said = "".join(
                f" ({describeErrorChallenge(c)})" for c in errorChallenge[-1:] if c
            )
            raise CredentialsRefused(
                f"{self._description}: login refused: {e.text}{said}"
            ) from None
        # RFC 3501 6.2.3: a CAPABILITY code in the tagged OK makes a
        # CAPABILITY command unnecessary (Dovecot sends one): a round trip
        # saved on every connection.
        automatic = capabilitiesInReply(reply)
        if automatic is not None:
            self.capabilities = automatic
        else:
            self.capabilities = await self._capabilities(useCache=False)

    async def _logIn(self, credentials: PasswordLogin) -> bytes:
        """
        The LOGIN command: the tagged reply after C{OK}.
        """
        user, password = credentials.user, credentials.password
        if not (user.isascii() and password.isascii()) or any(
            c in user + password for c in "\r\n\0"
        ):
            raise AuthenticationFailed(
                f"{self._description}: the user name or password has characters "
                "LOGIN cannot carry and the server offers no SASL-IR AUTH=PLAIN"
            )
        command = Command(b"LOGIN", _quoted(user) + b" " + _quoted(password))
        _, reply = await _mapped("LOGIN", self._client.sendCommand(command))
        return cast(bytes, reply)

    def _peerPort(self) -> int | None:
        """
        The port this connection reached, for OAUTHBEARER, or L{None}.
        """
        transport = self._client.transport
        port = getattr(transport.getPeer(), "port", None) if transport else None
        return port if isinstance(port, int) else None

    async def _saslExchange(
        self, mechanism: SASLMechanism, initial: bool, challenges: list[bytes]
    ) -> bytes:
        """
        AUTHENTICATE with C{mechanism}: its first message on the command
        line when C{initial} (SASL-IR, RFC 4959), else in answer to the
        first continuation request.  A challenge the mechanism does not
        expect (or that is not base64) is a protocol violation.

        @param challenges: each decoded challenge answered is appended.

        @return: the tagged reply after C{OK}.
        """
        command = b"AUTHENTICATE " + mechanism.name
        if initial:
            command += b" " + encodeResponse(mechanism.initialResponse())
        answered = initial

        def respond(text: bytes) -> bytes | None:
            nonlocal answered
            if not answered:
                answered = True
                return base64.b64encode(mechanism.initialResponse())
            challenge = decodeChallenge(text)
            if challenge is None:
                return None
            challenges.append(challenge)
            response = mechanism.challenged(challenge)
            return None if response is None else base64.b64encode(response)

        # Mapped as LOGIN: the step, whichever command carries it.
        _, reply = await _mapped("LOGIN", self._client.sendAuthenticate(command, respond))
        return reply

    async def _capabilities(self, useCache: bool = True) -> frozenset[bytes]:
        """
        The server's capabilities: those of the greeting or of the last
        CAPABILITY command, or a new CAPABILITY command.
        """
        caps: dict[bytes, Any] = await _mapped(
            "CAPABILITY", self._client.getCapabilities(useCache=int(useCache))
        )
        return capabilitySet(caps)

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
            await _mapped("COMPRESS", self._client.startCompression())
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
        lines, _ = await _mapped("LIST", self._client.sendCollecting(b"LIST", b'"" "*"'))
        rows = _listRows(lines, b"LIST", self._description, self._log)
        return [_mailboxInfo(row) for row in rows]

    async def hierarchyDelimiter(self) -> str | None:
        """
        The hierarchy delimiter of the personal namespace (C{LIST "" ""}),
        or L{None} for a flat server.
        """
        lines, _ = await _mapped("LIST", self._client.sendCollecting(b"LIST", b'"" ""'))
        for row in _listRows(lines, b"LIST", self._description, self._log):
            info = _mailboxInfo(row)
            if info.delimiter:
                return info.delimiter
        return None

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
        The account's namespaces: the NAMESPACE response (RFC 2342) where
        the server offers it, else the empty prefix with the delimiter of
        C{LIST "" ""}.  The configuration's override, if any, replaces the
        personal namespace only (marked configured), so that other users'
        and shared mailboxes are still known; where the server does not
        offer NAMESPACE, or its response is malformed (one warning), the
        override alone; where it refuses NAMESPACE, the override alone
        too (one warning).

        @raise ProtocolError: the NAMESPACE response is missing or
            malformed, and there is no override.
        @raise CommandFailed: the server refused the command, and there is
            no override.
        """
        override = self.namespaceOverride
        if override is not None:
            override = evolve(override, configured=True)
        if b"NAMESPACE" not in self.capabilities:
            if override is None:
                override = PersonalNamespace("", await self.hierarchyDelimiter())
            return ServerNamespaces(personal=(override,))
        try:
            lines, _ = await _mapped("NAMESPACE", self._client.sendCollecting(b"NAMESPACE"))
        except CommandFailed as e:
            if override is None:
                raise
            # The override is there for a server whose NAMESPACE cannot be
            # believed; one that offers it and then refuses it is one.
            self._log.warn(
                "{session}: the server refused NAMESPACE ({status} {text}); believing the"
                " configured namespace alone (other users' and shared namespaces unknown)",
                session=self._description,
                status=e.status,
                text=e.text,
            )
            return ServerNamespaces(personal=(override,))
        try:
            namespaces = namespaceResponse(lines)
        except ProtocolError as e:
            if override is None:
                raise _retold(
                    e,
                    f"{self._description}: {e}; a namespace: setting for this server"
                    " in the configuration replaces the personal namespace it announces",
                ) from None
            self._log.warn(
                "{session}: {problem}; believing the configured namespace alone"
                " (other users' and shared namespaces unknown)",
                session=self._description,
                problem=str(e),
            )
            return ServerNamespaces(personal=(override,))
        if override is not None:
            return evolve(namespaces, personal=(override,))
        if not namespaces.personal:
            # No personal namespace (NIL): folders are still created at
            # the top, with LIST's delimiter.
            personal = PersonalNamespace("", await self.hierarchyDelimiter())
            namespaces = evolve(namespaces, personal=(personal,))
        return namespaces

    async def create(self, mailbox: str) -> None:
        """
        Create C{mailbox}.
        """
        await _mapped(
            "CREATE", self._client.sendCommand(Command(b"CREATE", encodeMailboxName(mailbox)))
        )

    async def createMailboxes(
        self,
        mailboxes: Sequence[str],
        uses: Mapping[str, str] | None = None,
        subscribe: Collection[str] | None = None,
    ) -> dict[str, str]:
        """
        Create and subscribe C{mailboxes}, in order (parents first), with
        every command pipelined: one round trip in all, not two per mailbox.

        @param uses: the RFC 6154 use to give some of them (C{CREATE name
            (USE (\\Sent))}, RFC 6154 CREATE-SPECIAL-USE), where the server
            offers it.
        @param subscribe: the ones to subscribe to (by default all).
        @return: the mailboxes that could not be created, each with the
            server's reply; a refused SUBSCRIBE is only logged.
        """
        client = self._client
        withUse = b"CREATE-SPECIAL-USE" in self.capabilities and uses
        creates = []
        for name in mailboxes:
            command = b"CREATE " + encodeMailboxName(name)
            use = uses.get(name) if withUse and uses else None
            if use is not None:
                command += b" (USE (" + use.encode("ascii") + b"))"
            creates.append(client.sendPipelined(command))
        toSubscribe = [
            name for name in mailboxes if subscribe is None or name in subscribe
        ]
        subscribes = [
            client.sendPipelined(b"SUBSCRIBE " + encodeMailboxName(name)) for name in toSubscribe
        ]
        failed: dict[str, str] = {}
        with _abandonedOnError(creates + subscribes):
            for name, d in zip(mailboxes, creates):
                try:
                    await _mapped("CREATE", d)
                except CommandFailed as e:
                    failed[name] = e.text
            for name, d in zip(toSubscribe, subscribes):
                try:
                    await _mapped("SUBSCRIBE", d)
                except CommandFailed as e:
                    if name not in failed:
                        self._log.warn(
                            "{session}: cannot subscribe to {mailbox!r}: {why}",
                            session=self._description,
                            mailbox=name,
                            why=e.text,
                        )
        return failed

    async def subscribeMailboxes(self, mailboxes: Sequence[str]) -> None:
        """
        Subscribe to C{mailboxes}, pipelined; a refusal is only logged.
        """
        client = self._client
        pending = [
            (name, client.sendPipelined(b"SUBSCRIBE " + encodeMailboxName(name)))
            for name in mailboxes
        ]
        with _abandonedOnError(d for _, d in pending):
            for name, d in pending:
                try:
                    await _mapped("SUBSCRIBE", d)
                except CommandFailed as e:
                    self._log.warn(
                        "{session}: cannot subscribe to {mailbox!r}: {why}",
                        session=self._description,
                        mailbox=name,
                        why=e.text,
                    )

    async def selectEach(
        self, mailboxes: Sequence[str]
    ) -> dict[str, MailboxState | CommandFailed]:
        """
        SELECT each of C{mailboxes}, every command pipelined: one round trip
        in all, not one per mailbox.  The last one is left selected.  Only
        between APPEND pipelines, with no other command in flight.

        @return: each mailbox's state, or the server's refusal.
        """
        client = self._client
        pending = [
            (name, client.sendPipelinedCollecting(b"SELECT " + encodeMailboxName(name)))
            for name in mailboxes
        ]
        states: dict[str, MailboxState | CommandFailed] = {}
        with _abandonedOnError(d for _, d in pending):
            for name, d in pending:
                try:
                    lines, _ = await _mapped("SELECT", d)
                except CommandFailed as e:
                    states[name] = e
                    continue
                exists, codes, permanentFlags = _openedState(lines)
                states[name] = MailboxState(
                    name, exists, codes.get(b"UIDVALIDITY"), permanentFlags, codes.get(b"UIDNEXT")
                )
        return states

    async def storeFlags(
        self, mailbox: str, changes: Sequence[tuple[int, tuple[str, ...]]]
    ) -> int:
        """
        SELECT C{mailbox} and set each message's flags exactly (C{UID STORE
        uid FLAGS.SILENT (...)}), every command pipelined.

        @param changes: C{(uid, flags)} pairs.
        @return: how many the server accepted; a refusal is logged.
        @raise CommandFailed: the SELECT was refused.
        """
        await _mapped(
            "SELECT", self._client.sendCollecting(b"SELECT", encodeMailboxName(mailbox))
        )
        client = self._client
        pending = [
            (
                uid,
                client.sendPipelined(
                    b"UID STORE %d FLAGS.SILENT (%s)"
                    % (uid, " ".join(flags).encode("ascii"))
                ),
            )
            for uid, flags in changes
        ]
        applied = 0
        with _abandonedOnError(d for _, d in pending):
            for uid, d in pending:
                try:
                    await _mapped("UID STORE", d)
                    applied += 1
                except CommandFailed as e:
                    self._log.warn(
                        "{session}: cannot set the flags of UID {uid} in {mailbox!r}: {why}",
                        session=self._description,
                        uid=uid,
                        mailbox=mailbox,
                        why=e.text,
                    )
        return applied

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
        await _mapped(
            "SUBSCRIBE",
            self._client.sendCommand(Command(b"SUBSCRIBE", encodeMailboxName(mailbox))),
        )

    async def select(self, mailbox: str) -> SelectedMailbox:
        """
        Select C{mailbox}: Dovecot then keeps it open between APPENDs, which
        more than doubles how many it absorbs.
        """
        lines, _ = await _mapped(
            "SELECT", self._client.sendCollecting(b"SELECT", encodeMailboxName(mailbox))
        )
        exists, codes, permanentFlags = _openedState(lines)
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
        argument = encodeMailboxName(mailbox) if wireName is None else _quotedWire(wireName)
        if b"CONDSTORE" in self.capabilities or b"QRESYNC" in self.capabilities:
            argument += b" (CONDSTORE)"
        lines, _ = await _mapped("EXAMINE", self._client.sendCollecting(b"EXAMINE", argument))
        exists, codes, _ = _openedState(lines)
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
        caps = self.capabilities
        client = self._client
        if b"LIST-EXTENDED" in caps:
            options = b"SUBSCRIBED SPECIAL-USE" if b"SPECIAL-USE" in caps else b"SUBSCRIBED"
            lines, _ = await _mapped(
                "LIST", client.sendCollecting(b"LIST", b'"" "*" RETURN (' + options + b")")
            )
            return [
                _listedMailbox(row, None)
                for row in _listRows(lines, b"LIST", self._description, self._log)
            ]
        lines, _ = await _mapped("LIST", client.sendCollecting(b"LIST", b'"" "*"'))
        subscribedLines, _ = await _mapped("LSUB", client.sendCollecting(b"LSUB", b'"" "*"'))
        subscribed = {
            _listedMailbox(row, False).name
            for row in _listRows(subscribedLines, b"LSUB", self._description, self._log)
        }
        mailboxes = []
        for row in _listRows(lines, b"LIST", self._description, self._log):
            mailbox = _listedMailbox(row, False)
            if mailbox.name in subscribed:
                mailbox = evolve(mailbox, subscribed=True)
            mailboxes.append(mailbox)
        return mailboxes

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

        async def mapped() -> bytes:
            return await _mapped("UID FETCH", self._client.fetchInto(command, sink))

        # Started now, not when awaited: the command is written at once.
        return Deferred.fromCoroutine(mapped())

    def appendPipeline(
        self,
        batchMessages: int,
        batchBytes: int,
        windowMessages: int,
        windowBytes: int,
        outcomes: AppendOutcomes,
        telemetry: ServerTelemetry | None = None,
    ) -> AppendPipeline:
        """
        The connection's APPEND pipeline, set up for this server's
        capabilities (LITERAL+/LITERAL-, MULTIAPPEND).  Send no other command
        while it is not idle.

        @param telemetry: the server's telemetry (L{AppendPipeline}).
        """
        if self._pipeline is None:
            settings = PipelineSettings.forServer(
                self.capabilities, batchMessages, batchBytes, windowMessages, windowBytes
            )
            self._pipeline = AppendPipeline(self._client, settings, outcomes, telemetry)
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
            await _mapped("LOGOUT", self._client.logout())
        except Exception:
            pass
        self._client.close()
        stats = self._client.compressionStats()
        if stats is not None:
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


def _openedState(
    lines: Sequence[bytes],
) -> tuple[int, dict[bytes, int | None], frozenset[str] | None]:
    """
    Read the untagged responses to SELECT or EXAMINE.

    @return: C{EXISTS}; the numeric response codes of the C{OK} responses
        (C{UIDVALIDITY}, C{UIDNEXT}, C{HIGHESTMODSEQ}; L{None} for a code
        without a number); and C{PERMANENTFLAGS}, or L{None} if not sent.
    """
    exists = 0
    codes: dict[bytes, int | None] = {}
    permanentFlags: frozenset[str] | None = None
    for line in lines:
        head, _, tail = line.partition(b" ")
        if head.isdigit():
            if tail[:6].upper() == b"EXISTS":
                exists = int(head)
        elif head.upper() == b"OK" and tail.startswith(b"["):
            if tail[:16].upper() == b"[PERMANENTFLAGS ":
                inner = tail[tail.find(b"(") + 1 : tail.find(b")")]
                permanentFlags = frozenset(
                    flag.decode("ascii", "replace") for flag in inner.split()
                )
                continue
            code = tail[1 : tail.find(b"]")].split()
            if code:
                value = code[1] if len(code) > 1 else b""
                codes[code[0].upper()] = int(value) if value.isdigit() else None
    return exists, codes, permanentFlags


def _str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _mailboxInfo(row: list[Value]) -> MailboxInfo:
    """
    A L{MailboxInfo} of a parsed LIST row (see L{_listRows}).
    """
    attributes, delimiter, name = row[0], row[1], row[2]
    assert isinstance(attributes, list) and isinstance(name, bytes)
    return MailboxInfo(
        name=_decodeMailboxName(name),
        delimiter=_str(delimiter) if isinstance(delimiter, bytes) and delimiter else None,
        attributes=tuple(_str(a) for a in attributes if isinstance(a, bytes)),
    )


def _quotedWire(name: bytes) -> bytes:
    """
    A mailbox name as the server sent it, as a quoted string.
    """
    return b'"' + name.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def _decodeMailboxName(name: bytes) -> str:
    """
    A mailbox name from modified UTF-7 (RFC 3501 5.1.3); a name that is
    not valid modified UTF-7 is read as UTF-8.  C{INBOX} is
    case-insensitive and always given as C{"INBOX"}.
    """
    import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

    try:
        decoded = name.decode("imap4-utf-7")
    except (UnicodeError, ValueError):
        decoded = name.decode("utf-8", "replace")
    if len(decoded) == 5 and decoded.upper() == "INBOX":
        return "INBOX"
    return decoded


def _listRows(
    lines: Sequence[bytes], keyword: bytes, description: str, logger: Logger
) -> list[list[Value]]:
    """
    The parsed C{LIST} (or C{LSUB}) responses among C{lines}, each as
    C{[attributes, delimiter, name, ...]}; other untagged responses that
    came meanwhile, and malformed rows (logged), are left out.
    """
    rows = []
    size = len(keyword)
    for line in lines:
        if line[:size].upper() != keyword or line[size : size + 1] != b" ":
            continue
        try:
            row = parseResponse(line)[1:]
        except FetchParseError as e:
            row = []
            logger.warn(
                "{session}: unreadable {keyword} response: {error}",
                session=description,
                keyword=keyword.decode("ascii"),
                error=str(e),
            )
        if len(row) >= 3 and isinstance(row[0], list) and isinstance(row[2], bytes):
            rows.append(row)
    return rows


def _listedMailbox(row: list[Value], subscribed: bool | None) -> ListedMailbox:
    """
    A L{ListedMailbox} of a parsed LIST row.

    @param subscribed: whether it is subscribed, or L{None} to read its
        C{\\Subscribed} attribute (LIST-EXTENDED).
    """
    rawAttributes, delimiter, name = row[0], row[1], row[2]
    assert isinstance(rawAttributes, list) and isinstance(name, bytes)
    attributes = tuple(_str(a) for a in rawAttributes if isinstance(a, bytes))
    if subscribed is None:
        subscribed = any(a.lower() == "\\subscribed" for a in attributes)
    return ListedMailbox(
        name=_decodeMailboxName(name),
        wireName=name,
        delimiter=_str(delimiter) if isinstance(delimiter, bytes) and delimiter else None,
        attributes=attributes,
        subscribed=subscribed,
    )


def _mergedItem(earlier: FetchedItem, later: FetchedItem) -> FetchedItem:
    """
    Two FETCH responses for one message as one: each item from C{later}
    where it has it.
    """
    return FetchedItem(
        sequence=later.sequence,
        uid=later.uid if later.uid is not None else earlier.uid,
        flags=later.flags if later.flags is not None else earlier.flags,
        internalDate=later.internalDate or earlier.internalDate,
        size=later.size if later.size is not None else earlier.size,
        modSeq=later.modSeq if later.modSeq is not None else earlier.modSeq,
        sections={**earlier.sections, **later.sections},
        extra={**earlier.extra, **later.extra},
    )


def _quoted(value: str) -> bytes:
    return b'"' + value.encode("ascii").replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


class _OneConnection(Factory):
    """
    The factory of one connection: it builds the one protocol given, and
    is quiet, where C{connectProtocol}'s logs "Starting factory" and
    "Stopping factory" for every connection (two lines of no use per
    connection; a run of many small jobs makes hundreds).
    """

    noisy = False

    def __init__(self, protocol: Protocol) -> None:
        """
        @param protocol: the connection's protocol.
        """
        self._protocol = protocol

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        """
        The one protocol.

        @param addr: the peer's address (unused).
        """
        return self._protocol


async def openSession(
    endpoint: IStreamClientEndpoint,
    clock: Any,
    *,
    description: str,
    user: str = "",
    password: str = "",
    credentials: Credentials | None = None,
    starttls: bool,
    tlsOptions: object,
    timeout: float,
    compress: bool = False,
    namespaceOverride: PersonalNamespace | None = None,
    logFields: Mapping[str, object] | None = None,
    endpointKey: str | None = None,
    credentialKey: str | None = None,
    logIn: bool = True,
) -> IMAPSession:
    """
    Connect, secure, log in, and compress.

    @param endpoint: where to connect (already TLS-wrapped for implicit TLS).
    @param user: the login name, with C{password}, for a user's own login.
    @param credentials: how to log in (L{imapmig.imap.auth}), in place of
        C{user} and C{password}.
    @param clock: an L{IReactorTime} for the command timeout.
    @param starttls: upgrade with STARTTLS, and refuse a server without it.
    @param tlsOptions: the client TLS options for STARTTLS.
    @param timeout: how long the server may leave us waiting without
        progress at each step: connecting, the greeting (and an implicit
        TLS handshake before it), STARTTLS and its handshake, login, and
        every later command (see L{imapmig.imap.deadline}).
    @param namespaceOverride: the server's configured personal namespace
        (see L{IMAPSession.namespaces}), if any.
    @param compress: turn on COMPRESS=DEFLATE right after login where the
        server offers it.
    @param logFields: fields every log event about the session carries
        (the job it works for; L{MigrationIMAP4Client}).
    @param endpointKey: the configuration key of the server's endpoint,
        carried by a L{ConnectFailed}.
    @param credentialKey: the configuration key of the credential, named
        by a refused login.
    @param logIn: whether to log in (and compress); C{False} stops after
        the greeting and TLS (C{--check-config --connect} without a
        password to try).
    @raise ConnectFailed: connecting failed or timed out.
    @raise ConnectionLost: the connection was lost or dropped on the way
        (L{ReplyTimeout}, L{ProtocolError}, L{ServerBye} among them), the
        text naming the server.
    @raise PermanentError: TLS, or authentication, was refused.
        Whatever fails after the connection is made is raised once the
        aborted connection is closed (at most C{timeout} later).
    """
    client = MigrationIMAP4Client(clock, timeout, peer=description, logFields=logFields)
    connecting = endpoint.connect(_OneConnection(client))
    if timeout > 0:
        connecting.addTimeout(timeout, clock)
    try:
        await connecting
    except Exception as e:
        why = _whyNoConnection(e, timeout)
        raise ConnectFailed(f"{description}: cannot connect: {why}", why, endpointKey) from None
    session = IMAPSession(client, description, namespaceOverride)
    try:
        await _mapped("greeting", client.greeted)
        if starttls:
            await session.startTLS(tlsOptions)
        if logIn:
            await _logIn(session, credentials or PasswordLogin(user, password), credentialKey)
        if logIn and compress:
            await session.startCompression()
    except (ConnectionLost, TLSFailed) as e:
        session.abort()
        await _closedAfterAbort(client, clock, timeout)
        raise _retold(e, f"{description}: {e}") from None
    except BaseException:
        session.abort()
        await _closedAfterAbort(client, clock, timeout)
        raise
    return session


def _whyNoConnection(error: Exception, timeout: float) -> str:
    """
    Why a connection could not be made, in a few words: C{connection
    refused}, C{no connection within 120 s}, C{host not found: ...}, or
    Twisted's own text.
    """
    if isinstance(error, (DeferredTimeout, TCPTimedOutError, ConnectTimeout)):
        return f"no connection within {timeout:g} s"
    if isinstance(error, (RefusedError, ConnectionRefusedError)):
        return "connection refused"
    if isinstance(error, DNSLookupError):
        return f"host not found: {error.args[0] if error.args else ''}".rstrip(": ")
    return str(error).rstrip(". ") or type(error).__name__


async def _logIn(session: IMAPSession, credentials: Credentials, key: str | None) -> None:
    """
    Log in with C{credentials}; a refused login names the configuration
    key C{key} that holds them.
    """
    try:
        await session.authenticate(credentials)
    except CredentialsRefused as e:
        if key is None:
            raise
        raise CredentialsRefused(f"{e} (the credential is {key})") from None


async def _closedAfterAbort(client: MigrationIMAP4Client, clock: Any, timeout: float) -> None:
    """
    Wait until an aborted connection is closed (the client's C{closed},
    fired by C{connectionLost}), at most C{timeout} seconds: an opening
    that fails returns only once its socket is gone, so that whoever
    granted the connection (L{imapmig.schedule.grants}) counts it until
    then, and a second login (a refused token replaced) never overlaps
    the first's socket.
    """
    if client.closed.called:
        return
    gone: Deferred[None] = Deferred()

    def closed(result: object) -> object:
        if not gone.called:
            gone.callback(None)
        return result

    client.closed.addBoth(closed)
    if timeout > 0:
        gone.addTimeout(timeout, clock)
    try:
        await gone
    except DeferredTimeout:
        withFields(log, client.logFields).warn(
            "{session}: the aborted connection did not close within {timeout} s",
            session=client.peer,
            timeout=timeout,
        )
