# -*- test-case-name: tests.test_imap_session,tests.test_imap_tls,tests.test_imap_quiet,tests.test_connectcheck -*-
"""
Opening a session: connect (TCP or implicit TLS), wait for the greeting,
STARTTLS where required, log in and compress, each bounded by the
timeout; a failure on the way closes the connection before it is raised.

Split from imapmig/imap/session.py, whose L{IMAPSession} is what this
returns.
"""

from __future__ import annotations

from typing import Any, Mapping

from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeout
from twisted.internet.error import (
    ConnectionRefusedError as RefusedError,
    DNSLookupError,
    TCPTimedOutError,
    TimeoutError as ConnectTimeout,
)
from twisted.internet.interfaces import IAddress, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger

from imapmig.errors import ConnectFailed, ConnectionLost, CredentialsRefused, TLSFailed
from imapmig.imap.auth import Credentials, PasswordLogin
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.errormap import mapped, retold
from imapmig.imap.session import IMAPSession
from imapmig.log.logfields import withFields
from imapmig.mail.folders import PersonalNamespace

log = Logger()


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
    await _connect(endpoint, client, clock, timeout, description, endpointKey)
    session = IMAPSession(client, description, namespaceOverride)
    login = (credentials or PasswordLogin(user, password)) if logIn else None
    try:
        await _prepare(session, starttls, tlsOptions, login, credentialKey, compress)
    except BaseException as e:
        session.abort()
        await _closedAfterAbort(client, clock, timeout)
        if isinstance(e, (ConnectionLost, TLSFailed)):
            raise retold(e, f"{description}: {e}") from None
        raise
    return session


async def _connect(
    endpoint: IStreamClientEndpoint,
    client: MigrationIMAP4Client,
    clock: Any,
    timeout: float,
    description: str,
    endpointKey: str | None,
) -> None:
    """
    Connect C{client} through C{endpoint} within C{timeout} seconds (none
    if 0).

    @raise ConnectFailed: it could not, saying why.
    """
    connecting = endpoint.connect(_OneConnection(client))
    if timeout > 0:
        connecting.addTimeout(timeout, clock)
    try:
        await connecting
    except Exception as e:
        why = _whyNoConnection(e, timeout)
        raise ConnectFailed(f"{description}: cannot connect: {why}", why, endpointKey) from None


async def _prepare(
    session: IMAPSession,
    starttls: bool,
    tlsOptions: object,
    credentials: Credentials | None,
    credentialKey: str | None,
    compress: bool,
) -> None:
    """
    Await the greeting, STARTTLS if C{starttls}, then log in with
    C{credentials} and turn on compression if C{compress}; L{None}
    C{credentials}: stop before logging in.
    """
    await mapped("greeting", session.client.greeted)
    if starttls:
        await session.startTLS(tlsOptions)
    if credentials is None:
        return
    await _logIn(session, credentials, credentialKey)
    if compress:
        await session.startCompression()


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
