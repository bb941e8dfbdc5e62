# -*- test-case-name: tests.test_imap_auth -*-
"""
How a session logs in: the kinds of credentials, and the SASL mechanisms
(RFC 4422) that carry them, chosen from the server's capabilities.

A credential kind is a frozen value; L{mechanismFor} turns one into the
L{SASLMechanism} to run, or into L{None} for the plain C{LOGIN} command.
A new kind of login (XOAUTH2, OAUTHBEARER) is one more credential class,
one more mechanism class, and one more branch in L{mechanismFor}.

Responses are base64 without line breaks (RFC 4959 and RFC 3501 want one
line; Twisted's stock authenticators wrap every 76 characters, which a
server reads as a broken response).  Nothing here logs, and no C{repr}
shows a password.
"""

from __future__ import annotations

import base64
import binascii
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


Credentials = PasswordLogin | AdminLogin


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
    if isinstance(credentials, AdminLogin):
        if not _plainOffered(capabilities):
            raise AuthenticationFailed(
                f"{description}: the server does not offer AUTH=PLAIN, which an"
                f" admin login (admin {credentials.admin!r} on behalf of"
                f" {credentials.user!r}) needs"
            )
        return PlainMechanism(credentials.user, credentials.admin, credentials.password)
    if b"SASL-IR" in capabilities and _plainOffered(capabilities):
        return PlainMechanism("", credentials.user, credentials.password)
    return None
