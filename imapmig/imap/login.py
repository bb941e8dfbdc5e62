# -*- test-case-name: tests.test_imap_session,tests.test_imap_auth,tests.test_imap_oauth,tests.test_login_busy -*-
"""
Logging in on one connection: the server's capabilities, and the
LOGIN or AUTHENTICATE exchange that carries a user's credentials.

Split from imapmig/imap/session.py; the mechanisms themselves are
L{imapmig.imap.auth}'s.
"""

from __future__ import annotations

import base64
from typing import Any, cast

from attrs import evolve
from twisted.mail.imap4 import Command

from imapmig.errors import AuthenticationFailed, CommandFailed, CredentialsRefused, ImapmigError
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
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.errormap import mapped
from imapmig.imap.signals import SignalAction, classifyRefusal


def capabilitySet(caps: dict[bytes, Any] | None) -> frozenset[bytes]:
    """
    Twisted's capability mapping as a flat set: C{{b"AUTH": [b"PLAIN"],
    b"IDLE": None}} becomes C{{b"AUTH=PLAIN", b"IDLE"}}, all upper-case.
    """
    result: set[bytes] = set()
    for name, values in (caps or {}).items():
        result.update(_capabilityAtoms(name.upper(), values))
    return frozenset(result)


def _capabilityAtoms(name: bytes, values: list[bytes | None] | None) -> list[bytes]:
    """
    The capabilities named C{name}: C{name} alone, or C{name=value} for
    each of its C{values} (C{AUTH=PLAIN}).
    """
    if values is None:
        return [name]
    return [name if value is None else name + b"=" + value.upper() for value in values]


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


def _quoted(value: str) -> bytes:
    return b'"' + value.encode("ascii").replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


async def serverCapabilities(
    client: MigrationIMAP4Client, useCache: bool = True
) -> frozenset[bytes]:
    """
    The server's capabilities: those of the greeting or of the last
    CAPABILITY command, or a new CAPABILITY command.
    """
    caps: dict[bytes, Any] = await mapped(
        "CAPABILITY", client.getCapabilities(useCache=int(useCache))
    )
    return capabilitySet(caps)


async def logIn(
    client: MigrationIMAP4Client, description: str, credentials: Credentials
) -> frozenset[bytes]:
    """
    Log in with C{credentials}, by the mechanism L{mechanismFor} chooses
    from the server's capabilities: AUTHENTICATE with an initial
    response where the server offers SASL-IR, else answering its
    continuation request; LOGIN for a user's password on a server
    without SASL-IR.  No password appears in an error or a log.

    @param description: who the session is, for the errors' text.
    @return: the server's capabilities after login.
    @raise AuthenticationFailed: the server refused (a refused
        AUTHENTICATE as a refused LOGIN), or offers no way to carry
        C{credentials}.
    @raise ServerBusy: the server refused saying "not now" (C{[UNAVAILABLE]},
        C{[INUSE]}, "try again later", too many connections:
        L{imapmig.imap.signals}): retried, as a lost connection is.
    """
    caps = await serverCapabilities(client)
    if _cleartextRefused(caps, credentials):
        raise AuthenticationFailed(
            f"{description}: server refuses cleartext login (LOGINDISABLED)"
        )
    credentials = _withPort(client, credentials)
    errorChallenge: list[bytes] = []
    try:
        reply = await _exchange(client, description, credentials, caps, errorChallenge)
    except CommandFailed as e:
        raise _refusal(e, description, errorChallenge) from None
    # RFC 3501 6.2.3: a CAPABILITY code in the tagged OK makes a
    # CAPABILITY command unnecessary (Dovecot sends one): a round trip
    # saved on every connection.
    automatic = capabilitiesInReply(reply)
    if automatic is not None:
        return automatic
    return await serverCapabilities(client, useCache=False)


async def _exchange(
    client: MigrationIMAP4Client,
    description: str,
    credentials: Credentials,
    caps: frozenset[bytes],
    challenges: list[bytes],
) -> bytes:
    """
    LOGIN or AUTHENTICATE with C{credentials}, as L{mechanismFor} chooses
    from C{caps}.

    @param challenges: each decoded challenge answered is appended.
    @return: the tagged reply after C{OK}.
    """
    mechanism = mechanismFor(credentials, caps, description)
    if mechanism is None:
        assert isinstance(credentials, PasswordLogin)
        return await _passwordLogin(client, description, credentials)
    return await _saslExchange(client, mechanism, b"SASL-IR" in caps, challenges)


def _withPort(client: MigrationIMAP4Client, credentials: Credentials) -> Credentials:
    """
    C{credentials}, a token login that names no port given the port this
    connection reached (OAUTHBEARER says it).
    """
    if isinstance(credentials, TokenLogin) and credentials.port is None:
        return evolve(credentials, port=_peerPort(client))
    return credentials


def _cleartextRefused(caps: frozenset[bytes], credentials: Credentials) -> bool:
    """
    Whether the server refuses the cleartext login C{credentials} would
    need (LOGINDISABLED, and no AUTH=PLAIN; a token is never cleartext).
    """
    return (
        b"LOGINDISABLED" in caps
        and b"AUTH=PLAIN" not in caps
        and not isinstance(credentials, TokenLogin)
    )


def _refusal(
    refused: CommandFailed, description: str, errorChallenge: list[bytes]
) -> ImapmigError:
    """
    What a refused login means: L{ServerBusy} where the server said "not
    now", else L{CredentialsRefused}.

    @param errorChallenge: the challenges answered before the refusal.
    """
    signal = classifyRefusal(refused.status, refused.text)
    if signal.action is SignalAction.RETRY:
        # Not the credentials: the server cannot check them now
        # (RFC 5530 [UNAVAILABLE]: the LDAP or RADIUS server behind
        # it is down; Dovecot's "Temporary authentication failure"),
        # or asks to wait (too many connections, throttled).
        busy = signal.error(f"{description}: login")
        assert busy is not None
        return busy
    said = _oauthReason(errorChallenge)
    return CredentialsRefused(f"{description}: login refused: {refused.text}{said}")


def _oauthReason(challenges: list[bytes]) -> str:
    """
    An OAuth failure's reason, in parentheses after a space, or C{""}: it
    is in the last challenge answered before the C{NO} (RFC 7628 3.2.2),
    not in the C{NO}'s text.
    """
    return "".join(f" ({describeErrorChallenge(c)})" for c in challenges[-1:] if c)


async def _passwordLogin(
    client: MigrationIMAP4Client, description: str, credentials: PasswordLogin
) -> bytes:
    """
    The LOGIN command: the tagged reply after C{OK}.
    """
    user, password = credentials.user, credentials.password
    if not _loginCarries(user + password):
        raise AuthenticationFailed(
            f"{description}: the user name or password has characters "
            "LOGIN cannot carry and the server offers no SASL-IR AUTH=PLAIN"
        )
    command = Command(b"LOGIN", _quoted(user) + b" " + _quoted(password))
    _, reply = await mapped("LOGIN", client.sendCommand(command))
    return cast(bytes, reply)


def _loginCarries(text: str) -> bool:
    """
    Whether LOGIN's quoted strings can carry C{text}: ASCII, without CR,
    LF or NUL.
    """
    return text.isascii() and not any(c in text for c in "\r\n\0")


def _peerPort(client: MigrationIMAP4Client) -> int | None:
    """
    The port this connection reached, for OAUTHBEARER, or L{None}.
    """
    transport = client.transport
    port = getattr(transport.getPeer(), "port", None) if transport else None
    return port if isinstance(port, int) else None


async def _saslExchange(
    client: MigrationIMAP4Client,
    mechanism: SASLMechanism,
    initial: bool,
    challenges: list[bytes],
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
    _, reply = await mapped("LOGIN", client.sendAuthenticate(command, respond))
    return reply
