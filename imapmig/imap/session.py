# -*- test-case-name: tests.test_imap_session -*-
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
from typing import Any, Sequence, TypeVar

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.error import ConnectError, ConnectionDone
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.logger import Logger
from OpenSSL import SSL
from service_identity import VerificationError
from twisted.mail.imap4 import Command, IMAP4Exception

from imapmig.errors import (
    AuthenticationFailed,
    CommandFailed,
    ConnectionLost,
    TLSFailed,
    TLSRequired,
    TransientError,
)
from imapmig.imap.client import MigrationIMAP4Client, describeConnectionLoss
from imapmig.imap.compress import CompressionStats
from imapmig.imap.pipeline import (
    AppendOutcomes,
    AppendPipeline,
    PipelineSettings,
    encodeMailboxName,
)

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


def describeTLSError(error: BaseException) -> str | None:
    """
    A short explanation of a TLS failure, or L{None} if C{error} is not one.
    """
    if isinstance(error, VerificationError):
        names = []
        for mismatch in error.errors:
            identifier = getattr(mismatch, "mismatched_id", None)
            name = getattr(identifier, "hostname", None) or getattr(identifier, "ip", None)
            if isinstance(name, bytes):
                name = name.decode("ascii", "replace")
            names.append(str(name) if name is not None else str(mismatch))
        return f"the server's certificate does not match {', '.join(names)}"
    if isinstance(error, SSL.Error):
        reasons = [
            entry[-1] for entry in (error.args[0] if error.args else []) if isinstance(entry, tuple)
        ]
        return "; ".join(str(r) for r in reasons if r) or str(error)
    return None


async def _mapped(command: str, d: Deferred[T]) -> T:
    """
    Await C{d}, mapping Twisted's IMAP, TLS and connection errors to ours.
    """
    try:
        return await d
    except IMAP4Exception as e:
        text = e.args[0] if e.args else ""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        text = str(text)
        raise CommandFailed(command, "NO", parseResponseCode(text), text) from None
    except ConnectionLost as e:
        raise ConnectionLost(f"{command}: {e}") from None
    except Exception as e:
        tls = describeTLSError(e)
        if tls is not None:
            raise TLSFailed(f"TLS handshake failed: {tls}") from None
        if isinstance(e, (ConnectionDone, ConnectError)) or type(e).__module__.startswith(
            "twisted.internet"
        ):
            raise ConnectionLost(
                f"{command}: connection lost: {describeConnectionLoss(e)}"
            ) from None
        raise


class IMAPSession:
    """
    One logged-in IMAP connection.

    @ivar capabilities: the server's capabilities after login.
    """

    def __init__(self, client: MigrationIMAP4Client, description: str) -> None:
        self._client = client
        self._description = description
        self.capabilities: frozenset[bytes] = frozenset()
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
        caps = capabilitySet(await _mapped("CAPABILITY", self._client.getCapabilities()))
        if b"STARTTLS" not in caps:
            raise TLSRequired(
                f"{self._description}: server does not offer STARTTLS "
                "(set starttls: off to allow cleartext, or use a tls: endpoint)"
            )
        try:
            await _mapped("STARTTLS", self._client.startTLS(tlsOptions))
        except TLSFailed as e:
            raise TLSFailed(f"{self._description}: {e}") from None

    async def login(self, user: str, password: str) -> None:
        """
        Log in: AUTHENTICATE PLAIN with an initial response where the server
        offers SASL-IR (any password octets, one round trip), LOGIN
        otherwise.  The password never appears in an error or a log.

        @raise AuthenticationFailed: the server refused.
        """
        caps = capabilitySet(await _mapped("CAPABILITY", self._client.getCapabilities()))
        if b"LOGINDISABLED" in caps and b"AUTH=PLAIN" not in caps:
            raise AuthenticationFailed(
                f"{self._description}: server refuses cleartext login (LOGINDISABLED)"
            )
        if b"SASL-IR" in caps and b"AUTH=PLAIN" in caps:
            token = base64.b64encode(
                b"\0" + user.encode("utf-8") + b"\0" + password.encode("utf-8")
            )
            command = Command(b"AUTHENTICATE", b"PLAIN " + token)
        else:
            if not (user.isascii() and password.isascii()) or any(
                c in user + password for c in "\r\n\0"
            ):
                raise AuthenticationFailed(
                    f"{self._description}: the user name or password has characters "
                    "LOGIN cannot carry and the server offers no SASL-IR AUTH=PLAIN"
                )
            command = Command(b"LOGIN", _quoted(user) + b" " + _quoted(password))
        try:
            await _mapped("LOGIN", self._client.sendCommand(command))
        except CommandFailed as e:
            raise AuthenticationFailed(
                f"{self._description}: login refused: {e.text}"
            ) from None
        self.capabilities = capabilitySet(
            await _mapped("CAPABILITY", self._client.getCapabilities(useCache=0))
        )

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
            log.warn(
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
        rows = await _mapped("LIST", self._client.list("", "*"))
        return [_mailboxInfo(row) for row in rows]

    async def hierarchyDelimiter(self) -> str | None:
        """
        The hierarchy delimiter of the personal namespace (C{LIST "" ""}),
        or L{None} for a flat server.
        """
        rows = await _mapped("LIST", self._client.list("", ""))
        for row in rows:
            info = _mailboxInfo(row)
            if info.delimiter:
                return info.delimiter
        return None

    async def create(self, mailbox: str) -> None:
        """
        Create C{mailbox}.
        """
        await _mapped(
            "CREATE", self._client.sendCommand(Command(b"CREATE", encodeMailboxName(mailbox)))
        )

    async def createMailboxes(self, mailboxes: Sequence[str]) -> dict[str, str]:
        """
        Create and subscribe C{mailboxes}, in order (parents first), with
        every command pipelined: one round trip in all, not two per mailbox.

        @return: the mailboxes that could not be created, each with the
            server's reply; a refused SUBSCRIBE is only logged.
        """
        client = self._client
        creates = [
            client.sendPipelined(b"CREATE " + encodeMailboxName(name)) for name in mailboxes
        ]
        subscribes = [
            client.sendPipelined(b"SUBSCRIBE " + encodeMailboxName(name)) for name in mailboxes
        ]
        failed: dict[str, str] = {}
        for name, d in zip(mailboxes, creates):
            try:
                await _mapped("CREATE", d)
            except CommandFailed as e:
                failed[name] = e.text
        for name, d in zip(mailboxes, subscribes):
            try:
                await _mapped("SUBSCRIBE", d)
            except CommandFailed as e:
                if name not in failed:
                    log.warn(
                        "{session}: cannot subscribe to {mailbox!r}: {why}",
                        session=self._description,
                        mailbox=name,
                        why=e.text,
                    )
        return failed

    def selectPipelined(self, mailbox: str) -> Deferred[bytes]:
        """
        SELECT C{mailbox} without waiting for the APPENDs before it to be
        answered (the APPEND pipeline must be between commands).  Dovecot
        then keeps the mailbox open for the APPENDs that follow; those name
        their mailbox anyway, so a refused SELECT costs only speed.
        """
        d = self._client.sendPipelined(b"SELECT " + encodeMailboxName(mailbox))

        def refused(failure: Any) -> None:
            log.warn(
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
        info = await _mapped("SELECT", self._client.select(mailbox))
        flags = info.get("PERMANENTFLAGS") or ()
        return SelectedMailbox(
            name=mailbox,
            uidValidity=info.get("UIDVALIDITY"),
            exists=int(info.get("EXISTS") or 0),
            permanentFlags=tuple(_str(f) for f in flags),
        )

    def appendPipeline(
        self,
        batchMessages: int,
        batchBytes: int,
        windowMessages: int,
        windowBytes: int,
        outcomes: AppendOutcomes,
    ) -> AppendPipeline:
        """
        The connection's APPEND pipeline, set up for this server's
        capabilities (LITERAL+/LITERAL-, MULTIAPPEND).  Send no other command
        while it is not idle.
        """
        if self._pipeline is None:
            settings = PipelineSettings.forServer(
                self.capabilities, batchMessages, batchBytes, windowMessages, windowBytes
            )
            self._pipeline = AppendPipeline(self._client, settings, outcomes)
        return self._pipeline

    async def logout(self) -> None:
        """
        Say goodbye and close; errors on the way out are ignored.
        """
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        try:
            await _mapped("LOGOUT", self._client.logout())
        except Exception:
            pass
        self._client.connection.loseConnection()
        stats = self._client.compressionStats()
        if stats is not None:
            log.info(
                "{session}: compression sent {sentPlain} octets as {sentWire}"
                " ({sentPercent}%), received {receivedWire} octets as {receivedPlain}",
                session=self._description,
                sentPlain=stats.sentPlain,
                sentWire=stats.sentWire,
                sentPercent=round(100 * stats.sentRatio),
                receivedWire=stats.receivedWire,
                receivedPlain=stats.receivedPlain,
            )

    def abort(self) -> None:
        """
        Drop the connection now.
        """
        self._client.connection.abortConnection()


def _str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _mailboxInfo(row: Any) -> MailboxInfo:
    attributes, delimiter, name = row
    return MailboxInfo(
        name=_str(name),
        delimiter=_str(delimiter) if delimiter not in (None, b"NIL", "NIL") else None,
        attributes=tuple(_str(a) for a in attributes),
    )


def _quoted(value: str) -> bytes:
    return b'"' + value.encode("ascii").replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


async def openSession(
    endpoint: IStreamClientEndpoint,
    clock: Any,
    *,
    description: str,
    user: str,
    password: str,
    starttls: bool,
    tlsOptions: object,
    timeout: float,
    compress: bool = False,
) -> IMAPSession:
    """
    Connect, secure, log in, and compress.

    @param endpoint: where to connect (already TLS-wrapped for implicit TLS).
    @param clock: an L{IReactorTime} for the command timeout.
    @param starttls: upgrade with STARTTLS, and refuse a server without it.
    @param tlsOptions: the client TLS options for STARTTLS.
    @param timeout: seconds without any reply before the connection is
        dropped.
    @param compress: turn on COMPRESS=DEFLATE right after login where the
        server offers it.
    @raise TransientError: connecting failed or the connection was lost.
    @raise PermanentError: TLS, or authentication, was refused.
    """
    client = MigrationIMAP4Client(clock, timeout)
    try:
        await connectProtocol(endpoint, client)
    except Exception as e:
        raise TransientError(f"{description}: cannot connect: {e}") from None
    session = IMAPSession(client, description)
    try:
        try:
            await _mapped("greeting", client.greeted)
        except TLSFailed as e:
            raise TLSFailed(f"{description}: {e}") from None
        if starttls:
            await session.startTLS(tlsOptions)
        await session.login(user, password)
        if compress:
            await session.startCompression()
    except BaseException:
        session.abort()
        raise
    return session
