# -*- test-case-name: tests.test_tokenrefresh -*-
"""
The OAuth 2.0 refresh grant (RFC 6749 section 6): a POST of
C{grant_type=refresh_token} to a token endpoint, and what its answer
means.

L{RefreshGrantClient} makes one request through an L{IAgent} and returns
an L{IssuedToken} or raises: L{TokenRefreshRefused} (permanent: the
endpoint refused the refresh token or the client, e.g. C{invalid_grant})
or L{TokenEndpointUnavailable} (transient: the network, a timeout, a 5xx
or 429).  L{agentFor} builds the production agent: certificates verified
against the system trust store (or the account's C{tls_ca}), no
persistent connections, and no factory chatter in the log.

No token or secret appears in an error or a log; what the endpoint says
(its C{error} code and C{error_description}) is shown short and escaped.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from attrs import field, frozen
from OpenSSL import SSL
from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout
from twisted.python.failure import Failure
from twisted.web.client import Agent
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IResponse

from imapmig.config.model import TokenRefreshConfig
from imapmig.errors import (
    BodyTooLarge,
    TokenEndpointUnavailable,
    TokenRefreshRefused,
    escapedExcerpt,
)
from imapmig.oauth.httpclient import BoundedBody, BytesBody, QuietConnectionPool, shortError
from imapmig.access.tlsidentity import HostnameVerifyingPolicy, trustRootFrom


MAX_TOKEN_RESPONSE = 64 * 1024
"""
The largest token endpoint response body read, in octets.
"""

_EXCERPT = 80

_TRANSIENT_STATUSES = frozenset({408, 429})




@frozen
class IssuedToken:
    """
    A token endpoint's successful answer.

    @ivar accessToken: the access token (redacted in C{repr}).
    @ivar expiresIn: its lifetime in seconds (C{expires_in}), or L{None}
        when the endpoint did not say.
    @ivar refreshToken: the new refresh token when the endpoint rotated
        it, else L{None} (redacted in C{repr}).
    """

    accessToken: str = field(repr=False)
    expiresIn: float | None
    refreshToken: str | None = field(repr=False, default=None)


def endpointForLogs(url: str) -> str:
    """
    C{url} without its query and fragment, for messages.
    """
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def agentFor(config: TokenRefreshConfig, reactor: Any) -> IAgent:
    """
    The agent that talks to C{config}'s endpoint: https verified against
    C{tls_ca} or the system trust store (host name checked), a new
    connection per request (a refresh is rare, and nothing stays open
    when the daemon stops), connecting within the request timeout.

    @param reactor: an L{IReactorTCP} and L{IReactorTime}.
    """
    return Agent(
        reactor,
        HostnameVerifyingPolicy(trustRootFrom(config.tlsCA)),
        connectTimeout=config.timeout,
        pool=QuietConnectionPool(reactor, persistent=False),
    )


class RefreshGrantClient:
    """
    Runs the refresh grant against one token endpoint.
    """

    def __init__(
        self, config: TokenRefreshConfig, agent: IAgent, clock: Any, description: str
    ) -> None:
        """
        @param agent: makes the HTTP request (L{agentFor} in the daemon).
        @param clock: an L{IReactorTime}, for the request timeout.
        @param description: names the account in errors
            (C{"alice at tcp:imap.example.com:993"}).
        """
        self._config = config
        self._agent = agent
        self._clock = clock
        self._description = description
        self.endpoint = endpointForLogs(config.tokenEndpoint)

    def _form(self, refreshToken: str) -> bytes:
        """
        The request body: the client's credentials in the body
        (C{client_secret_post}, which Microsoft and Google both accept).
        """
        fields = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refreshToken),
            ("client_id", self._config.clientId),
        ]
        if self._config.clientSecret is not None:
            fields.append(("client_secret", self._config.clientSecret.value))
        if self._config.scope is not None:
            fields.append(("scope", self._config.scope))
        return urlencode(fields).encode("ascii")

    def refresh(self, refreshToken: str) -> Deferred[IssuedToken]:
        """
        Exchange C{refreshToken} for an access token.

        @return: fires with the L{IssuedToken}, or fails with
            L{TokenRefreshRefused} or L{TokenEndpointUnavailable}.
        """
        request = Deferred.fromCoroutine(self._exchange(refreshToken))
        timeout = self._config.timeout
        request.addTimeout(timeout, self._clock)

        def timedOut(failure: Failure) -> Failure:
            if failure.check(DeferredTimeout):
                return Failure(
                    TokenEndpointUnavailable(
                        self._problem(f"no answer within {timeout:g} s")
                    )
                )
            return failure

        request.addErrback(timedOut)
        return request

    def _problem(self, what: str) -> str:
        return f"{self._description}: token endpoint {self.endpoint}: {what}"

    async def _exchange(self, refreshToken: str) -> IssuedToken:
        headers = Headers(
            {
                b"Content-Type": [b"application/x-www-form-urlencoded"],
                b"Accept": [b"application/json"],
                b"User-Agent": [b"imapmig"],
            }
        )
        try:
            response: IResponse = await self._agent.request(
                b"POST",
                self._config.tokenEndpoint.encode("ascii"),
                headers,
                BytesBody(self._form(refreshToken)),
            )
        except CancelledError:
            # The timeout's: it says so.
            raise
        except Exception as e:
            if _isTLSFailure(e):
                # Like a refused IMAP certificate: a configuration problem
                # (tls_ca) or an impostor, which waiting will not fix.
                raise TokenRefreshRefused(
                    self._problem(
                        f"TLS failed: {shortError(e)} (is its CA in the system"
                        " trust store, or given as oauth2.tls_ca?)"
                    )
                ) from None
            raise TokenEndpointUnavailable(
                self._problem(f"cannot reach it: {shortError(e)}")
            ) from None
        body = await self._readBody(response)
        return self._interpret(response.code, body)

    async def _readBody(self, response: IResponse) -> bytes:
        receiver = BoundedBody(MAX_TOKEN_RESPONSE)
        response.deliverBody(receiver)
        try:
            return await receiver.done
        except BodyTooLarge:
            raise TokenRefreshRefused(
                self._problem(
                    f"answered with more than {MAX_TOKEN_RESPONSE} octets (HTTP"
                    f" {response.code}); not read"
                )
            ) from None
        except CancelledError:
            raise
        except Exception as e:
            raise TokenEndpointUnavailable(
                self._problem(
                    f"the answer (HTTP {response.code}) was cut: {shortError(e)}"
                )
            ) from None

    def _interpret(self, status: int, body: bytes) -> IssuedToken:
        """
        What an answer means (RFC 6749 5.1 and 5.2).
        """
        document = _jsonObject(body)
        if status != 200:
            raise self._refusal(status, document, body)
        if document is None:
            # A proxy's or portal's page in place of the endpoint's.
            raise TokenEndpointUnavailable(
                self._problem(f"HTTP 200 without a JSON object: {escapedExcerpt(body, _EXCERPT)}")
            )
        problem = _tokenProblem(document)
        if problem is not None:
            raise TokenRefreshRefused(self._problem(problem))
        return IssuedToken(
            document["access_token"],
            _lifetime(document.get("expires_in")),
            _rotated(document.get("refresh_token")),
        )

    def _refusal(
        self, status: int, document: dict[str, Any] | None, body: bytes
    ) -> TokenEndpointUnavailable | TokenRefreshRefused:
        """
        What an answer other than C{200} means: unavailable for a server
        error or C{429}, else refused.
        """
        said = _oauthError(document)
        if status >= 500 or status in _TRANSIENT_STATUSES:
            return TokenEndpointUnavailable(
                self._problem(f"HTTP {status}" + (f": {said}" if said else ""))
            )
        if said:
            return TokenRefreshRefused(
                self._problem(f"refused the refresh (HTTP {status}): {said}")
            )
        return TokenRefreshRefused(
            self._problem(
                f"HTTP {status} without an OAuth error: {escapedExcerpt(body, _EXCERPT)}"
            )
        )


def _tokenProblem(document: dict[str, Any]) -> str | None:
    """
    Why a successful answer's token cannot be used, or L{None}: its
    access token is missing or not a bearer token's characters, or its
    C{token_type} is not Bearer.
    """
    token = document.get("access_token")
    if not isinstance(token, str) or not token:
        return "the answer has no access_token"
    if not _bearerCharacters(token):
        return "the access_token has characters a bearer token cannot carry"
    kind = document.get("token_type")
    if not _isBearer(kind):
        return (
            "the token_type is "
            + escapedExcerpt(str(kind).encode("utf-8"), _EXCERPT)
            + ", not Bearer"
        )
    return None


def _bearerCharacters(token: str) -> bool:
    """
    Whether C{token} holds only the characters a bearer token may carry
    (printable ASCII, no space).
    """
    return all("\x21" <= c <= "\x7e" for c in token)


def _isBearer(kind: object) -> bool:
    """
    Whether an answer's C{token_type} is Bearer (or absent, which means
    Bearer).
    """
    return kind is None or (isinstance(kind, str) and kind.lower() == "bearer")


def _lifetime(expiresIn: object) -> float | None:
    """
    An answer's C{expires_in}: seconds, as a number or (older Azure AD) a
    string of digits; L{None} if absent or beyond belief.
    """
    lifetime = _seconds(expiresIn)
    if lifetime is not None and 0 < lifetime < 10**9:
        return lifetime
    return None


def _seconds(value: object) -> float | None:
    """
    C{value} as a number of seconds: a number, or a string of digits.
    """
    if isinstance(value, str):
        return float(value) if value.isdigit() else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _rotated(refreshToken: object) -> str | None:
    """
    An answer's C{refresh_token}, the refresh token that replaces the one
    used, or L{None} if absent or unusable (it is written as one line).
    """
    if not isinstance(refreshToken, str) or not refreshToken:
        return None
    if "\n" in refreshToken or "\r" in refreshToken:
        return None
    return refreshToken


def _jsonObject(body: bytes) -> dict[str, Any] | None:
    """
    C{body} as a JSON object, or L{None}.
    """
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _oauthError(document: dict[str, Any] | None) -> str:
    """
    An error answer's C{error} and C{error_description}, short and
    escaped, or C{""}.
    """
    if document is None:
        return ""
    code = document.get("error")
    if not isinstance(code, str):
        return ""
    return escapedExcerpt(code.encode("utf-8"), 40) + _description(document)


def _description(document: dict[str, Any]) -> str:
    """
    An error answer's C{error_description}, short, escaped and in
    parentheses after a space, or C{""}.
    """
    description = document.get("error_description")
    if isinstance(description, str) and description:
        return f" ({escapedExcerpt(description.encode('utf-8'), _EXCERPT)})"
    return ""


def _isTLSFailure(e: Exception) -> bool:
    """
    Whether a request failed in the TLS handshake (a certificate not
    trusted, a name that does not match).
    """
    reasons = getattr(e, "reasons", None) or [e]
    return any(
        isinstance(r.value if isinstance(r, Failure) else r, SSL.Error) for r in reasons
    )
