# -*- test-case-name: tests.test_imap_auth -*-
"""
How a session logs in: the kinds of credentials, and the SASL mechanisms
(RFC 4422) that carry them, chosen from the server's capabilities.

A credential kind is a frozen value; L{mechanismFor} turns one into the
L{SASLMechanism} to run, or into L{None} for the plain C{LOGIN} command.
An OAuth 2.0 access token (L{TokenLogin}) goes in OAUTHBEARER (RFC 7628)
where the server offers it, else in XOAUTH2 (Google's and Microsoft's
older mechanism, the only one Microsoft 365 offers).

Responses are base64 without line breaks (RFC 4959 and RFC 3501 want one
line; Twisted's stock authenticators wrap every 76 characters, which a
server reads as a broken response).  Nothing here logs, and no C{repr}
shows a password.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Protocol

from attrs import field, frozen

from imapmig.errors import AuthenticationFailed


@frozen
class PasswordLogin:
    """
    The user logs in with their own password.

    @ivar user: the login name.
    @ivar password: the user's password (redacted in C{repr}).
    """

    user: str
    password: str = field(repr=False)


@frozen
class AdminLogin:
    """
    An administrator ("master user") logs in on behalf of a user: SASL
    PLAIN with an authorization identity (RFC 4616), as Dovecot master
    users, Cyrus admins and others accept.

    @ivar user: the user whose mailbox is used (the authorization identity).
    @ivar admin: the administrator's login name (the authentication identity).
    @ivar password: the administrator's password (redacted in C{repr}).
    """

    user: str
    admin: str
    password: str = field(repr=False)


@frozen
class TokenLogin:
    """
    The user logs in with an OAuth 2.0 access token (a bearer token,
    RFC 6750), by OAUTHBEARER or XOAUTH2.

    @ivar user: the login name.
    @ivar token: the access token (redacted in C{repr}).
    @ivar host: the server's host name, sent in OAUTHBEARER, or L{None}.
    @ivar port: the port connected to, sent in OAUTHBEARER, or L{None}.
    """

    user: str
    token: str = field(repr=False)
    host: str | None = None
    port: int | None = None


Credentials = PasswordLogin | AdminLogin | TokenLogin


class SASLMechanism(Protocol):
    """
    One SASL exchange, client side.

    @ivar name: the mechanism's name as in C{AUTH=}: C{b"PLAIN"}.
    """

    name: bytes

    def initialResponse(self) -> bytes:
        """
        The client's first message, not yet base64-encoded.
        """

    def challenged(self, challenge: bytes) -> bytes | None:
        """
        The reply to a server challenge (already base64-decoded), not yet
        encoded, or L{None} when the mechanism expects none (the server
        then broke the protocol).  L{initialResponse} answers the first,
        empty, challenge of a server without SASL-IR; this answers any
        later one.
        """


@frozen
class PlainMechanism:
    """
    SASL PLAIN (RFC 4616): C{authzid NUL authcid NUL password}, in one
    message.

    @ivar authzid: who to act as, or C{""} for the authentication identity
        itself.
    @ivar authcid: who logs in.
    @ivar password: the password of C{authcid} (redacted in C{repr}).
    """

    authzid: str
    authcid: str
    password: str = field(repr=False)
    name = b"PLAIN"

    def initialResponse(self) -> bytes:
        """
        C{authzid NUL authcid NUL password}, UTF-8.
        """
        return b"\0".join(
            part.encode("utf-8") for part in (self.authzid, self.authcid, self.password)
        )

    def challenged(self, challenge: bytes) -> bytes | None:
        """
        PLAIN has one message: a second challenge is not one to answer.

        @return: L{None}.
        """
        return None


_SEPARATOR = b"\x01"


@frozen
class XOAuth2Mechanism:
    """
    XOAUTH2 (Google, Microsoft): C{user=USER ^A auth=Bearer TOKEN ^A ^A}.
    A failure comes as a challenge (base64 JSON) that the client answers
    with an empty response before the tagged C{NO}.

    @ivar user: who logs in.
    @ivar token: the access token (redacted in C{repr}).
    """

    user: str
    token: str = field(repr=False)
    name = b"XOAUTH2"

    def initialResponse(self) -> bytes:
        """
        C{user=USER^Aauth=Bearer TOKEN^A^A}.
        """
        return (
            b"user=" + self.user.encode("utf-8") + _SEPARATOR
            + b"auth=Bearer " + self.token.encode("ascii") + _SEPARATOR + _SEPARATOR
        )  # fmt: skip

    def challenged(self, challenge: bytes) -> bytes | None:
        """
        The error challenge is answered with an empty response.

        @return: C{b""}.
        """
        return b""


def _saslname(user: str) -> bytes:
    """
    A GS2 C{saslname} (RFC 5801): C{,} and C{=} escaped.
    """
    return user.replace("=", "=3D").replace(",", "=2C").encode("utf-8")


@frozen
class OAuthBearerMechanism:
    """
    OAUTHBEARER (RFC 7628): a GS2 header naming the user, then
    C{host}, C{port} and C{auth} key/value pairs, each ended by C{^A}.
    A failure comes as a challenge (base64 JSON) that the client answers
    with C{^A} alone before the tagged C{NO} (RFC 7628 3.2.3).

    @ivar user: who logs in (the GS2 authorization identity).
    @ivar token: the access token (redacted in C{repr}).
    @ivar host: the server's host name, or L{None} to leave it out.
    @ivar port: the port connected to, or L{None} to leave it out.
    """

    user: str
    token: str = field(repr=False)
    host: str | None = None
    port: int | None = None
    name = b"OAUTHBEARER"

    def initialResponse(self) -> bytes:
        """
        C{n,a=USER,^Ahost=HOST^Aport=PORT^Aauth=Bearer TOKEN^A^A}.
        """
        message = b"n,a=" + _saslname(self.user) + b"," + _SEPARATOR
        if self.host is not None:
            message += b"host=" + self.host.encode("utf-8") + _SEPARATOR
        if self.port is not None:
            message += b"port=%d" % (self.port,) + _SEPARATOR
        return message + b"auth=Bearer " + self.token.encode("ascii") + _SEPARATOR + _SEPARATOR

    def challenged(self, challenge: bytes) -> bytes | None:
        """
        The error challenge is answered with C{^A} (RFC 7628 3.2.3).

        @return: C{b"\x01"}.
        """
        return _SEPARATOR


MAX_ERROR_CHALLENGE = 4096
"""
The largest error challenge (decoded) read as JSON, in octets; a longer
one is described by its length alone.
"""


def describeErrorChallenge(challenge: bytes) -> str:
    """
    What an OAuth error challenge (RFC 7628 3.2.2: JSON with C{status},
    C{scope}, C{openid-configuration}) says, for an error message: its
    C{status}, short and escaped.  Nothing of the token is in a challenge.

    @param challenge: the decoded challenge.
    @return: C{"status invalid_token"}, or a short description of a
        challenge that is not such JSON.
    """
    if len(challenge) > MAX_ERROR_CHALLENGE:
        return f"an error challenge of {len(challenge)} octets, not read"
    try:
        document = json.loads(challenge)
    except (UnicodeDecodeError, ValueError):
        return f"an error challenge that is not JSON: {_excerpt(challenge)}"
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(status, str):
        return f"an error challenge without a status: {_excerpt(challenge)}"
    return f"status {_excerpt(status.encode('utf-8'))}"


def _excerpt(data: bytes, limit: int = 80) -> str:
    """
    At most C{limit} octets of C{data}, escaped.
    """
    text = repr(data[:limit])[2:-1]
    return text + ("..." if len(data) > limit else "")


def encodeResponse(response: bytes) -> bytes:
    """
    A SASL response as one line: base64 without line breaks, or C{=} for an
    empty initial response (RFC 4959).
    """
    return base64.b64encode(response) if response else b"="


def decodeChallenge(text: bytes) -> bytes | None:
    """
    The challenge of a continuation request (the text after C{+ }), or
    L{None} when it is not base64.
    """
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def _plainOffered(capabilities: frozenset[bytes]) -> bool:
    return b"AUTH=PLAIN" in capabilities


def mechanismFor(
    credentials: Credentials, capabilities: frozenset[bytes], description: str
) -> SASLMechanism | None:
    """
    The mechanism to log in with C{credentials} on a server with
    C{capabilities}, or L{None} for the C{LOGIN} command.

    A user's password goes in PLAIN where the server offers it with
    SASL-IR (one round trip, any octets), in LOGIN otherwise; an admin
    login needs PLAIN, with or without SASL-IR.

    @param description: names the server in errors.
    @raise AuthenticationFailed: the server offers no mechanism that can
        carry these credentials.
    """
    if isinstance(credentials, TokenLogin):
        return _tokenMechanism(credentials, capabilities, description)
    if isinstance(credentials, AdminLogin):
        return _adminMechanism(credentials, capabilities, description)
    if b"SASL-IR" in capabilities and _plainOffered(capabilities):
        return PlainMechanism("", credentials.user, credentials.password)
    return None


def _adminMechanism(
    credentials: AdminLogin, capabilities: frozenset[bytes], description: str
) -> SASLMechanism:
    """
    PLAIN with the admin's credentials, on behalf of the user.

    @raise AuthenticationFailed: the server does not offer PLAIN.
    """
    if not _plainOffered(capabilities):
        raise AuthenticationFailed(
            f"{description}: the server does not offer AUTH=PLAIN, which an"
            f" admin login (admin {credentials.admin!r} on behalf of"
            f" {credentials.user!r}) needs"
        )
    return PlainMechanism(credentials.user, credentials.admin, credentials.password)


def _checkCarried(token: str, user: str, description: str) -> None:
    """
    Whether an OAuth2 message can carry C{token} and C{user}.

    @raise AuthenticationFailed: it cannot (the token is not shown).
    """
    # A bearer token is b64token (RFC 6750 2.1): visible ASCII; anything
    # else would break the ^A-separated message.
    if not token or not all("\x21" <= c <= "\x7e" for c in token):
        raise AuthenticationFailed(
            f"{description}: the access token for {user!r} is empty or has"
            " characters a bearer token cannot carry"
        )
    if "\x01" in user:
        raise AuthenticationFailed(f"{description}: the user name has a ^A character")


def _tokenMechanism(
    credentials: TokenLogin, capabilities: frozenset[bytes], description: str
) -> SASLMechanism:
    """
    OAUTHBEARER where offered, else XOAUTH2.

    @raise AuthenticationFailed: the server offers neither, or the token
        or user cannot be carried (the token is not shown).
    """
    token, user = credentials.token, credentials.user
    _checkCarried(token, user, description)
    if b"AUTH=OAUTHBEARER" in capabilities:
        return OAuthBearerMechanism(user, token, credentials.host, credentials.port)
    if b"AUTH=XOAUTH2" in capabilities:
        return XOAuth2Mechanism(user, token)
    raise AuthenticationFailed(
        f"{description}: the server offers neither AUTH=OAUTHBEARER nor"
        f" AUTH=XOAUTH2, which an OAuth2 login (user {user!r}) needs"
    )
