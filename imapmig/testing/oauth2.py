# -*- test-case-name: tests.test_testing_oauth2 -*-
"""
A private OAuth 2.0 authorization server for the tests: a token endpoint
that answers the refresh grant (RFC 6749 section 6) and an introspection
endpoint (RFC 7662) that a private Dovecot's C{oauth2} passdb asks
whether an access token is valid.

L{OAuth2Provider} holds the state and the decisions (plain, driven by a
clock): which refresh tokens and access tokens exist, for which user,
until when, and counters of what was asked.  L{OAuth2Resource} serves it
over twisted.web:

    POST /token        grant_type=refresh_token&refresh_token=...&client_id=...
    POST /introspect   token=...   ->  {"active": true, "username": ...}

L{OAuth2Server} listens on loopback in the test's reactor: Dovecot's auth
process makes its HTTP requests without blocking, so the reactor that
runs the code under test serves them too.  Every response closes its
connection, so that no socket of the server outlives a request (the
integration tests check that none is left open).
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any, Callable

from attrs import define
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IListeningPort
from twisted.internet.ssl import PrivateCertificate
from twisted.protocols.policies import WrappingFactory
from twisted.web.resource import Resource
from twisted.web.server import Request, Site


@define
class _AccessToken:
    user: str
    expiresAt: float


@define
class ProviderCounts:
    """
    What an L{OAuth2Provider} was asked.

    @ivar refreshRequests: requests to the token endpoint.
    @ivar refreshesGranted: those that issued an access token.
    @ivar refreshesRefused: those answered with an OAuth error.
    @ivar introspections: introspection requests.
    @ivar inactive: introspections answered C{active: false}.
    """

    refreshRequests: int = 0
    refreshesGranted: int = 0
    refreshesRefused: int = 0
    introspections: int = 0
    inactive: int = 0


def _refused(status: int, error: str, description: str) -> tuple[int, dict[str, object]]:
    """
    A refused token request's HTTP status and JSON error document.
    """
    return status, {"error": error, "error_description": description}


class OAuth2Provider:
    """
    The authorization server's state.

    @ivar counts: what it was asked.
    @ivar clientId: the one client it knows.
    @ivar clientSecret: that client's secret, or L{None} for a public
        client (then any secret given is refused).
    @ivar lifetime: the seconds an access token is valid, as introspection
        sees it.
    @ivar reportedLifetime: the C{expires_in} it tells the client, by
        default L{lifetime}; a longer one makes a token expire before the
        client expects (as a revoked token does).
    @ivar rotate: whether each refresh issues a new refresh token and
        retires the one used.
    """

    def __init__(
        self,
        seconds: Callable[[], float],
        *,
        clientId: str = "imapmig-test",
        clientSecret: str | None = None,
        lifetime: float = 3600.0,
        reportedLifetime: float | None = None,
        rotate: bool = True,
    ) -> None:
        """
        @param seconds: the clock (C{reactor.seconds}).
        """
        self._seconds = seconds
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.lifetime = lifetime
        self.reportedLifetime = reportedLifetime
        self.rotate = rotate
        self.counts = ProviderCounts()
        self._refreshTokens: dict[str, str] = {}
        self._accessTokens: dict[str, _AccessToken] = {}

    def addRefreshToken(self, user: str) -> str:
        """
        A new refresh token for C{user}, as a consent would give.
        """
        token = "rt-" + secrets.token_urlsafe(24)
        self._refreshTokens[token] = user
        return token

    def revokeRefreshTokens(self) -> None:
        """
        Revoke every refresh token: a refresh is answered C{invalid_grant}.
        """
        self._refreshTokens.clear()

    def expireAccessTokens(self) -> None:
        """
        Make every access token issued so far inactive.
        """
        for token in self._accessTokens.values():
            token.expiresAt = min(token.expiresAt, self._seconds())

    def refresh(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        """
        Answer a token request (its form fields).

        @return: the HTTP status and the JSON document.
        """
        self.counts.refreshRequests += 1
        refusal = self._refusal(form)
        if refusal is not None:
            self.counts.refreshesRefused += 1
            return refusal
        user = self._refreshTokens[form.get("refresh_token", "")]
        access = "at-" + secrets.token_urlsafe(24)
        self._accessTokens[access] = _AccessToken(user, self._seconds() + self.lifetime)
        document: dict[str, object] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.lifetime if self.reportedLifetime is None else self.reportedLifetime,
        }
        if "scope" in form:
            document["scope"] = form["scope"]
        if self.rotate:
            del self._refreshTokens[form["refresh_token"]]
            document["refresh_token"] = self.addRefreshToken(user)
        self.counts.refreshesGranted += 1
        return 200, document

    def _refusal(self, form: dict[str, str]) -> tuple[int, dict[str, object]] | None:
        """
        Why the token request C{form} is refused (the HTTP status and the
        JSON error document), or L{None}.
        """
        if form.get("grant_type") != "refresh_token":
            return _refused(400, "unsupported_grant_type", "only refresh_token")
        if form.get("client_id") != self.clientId or form.get("client_secret") != self.clientSecret:
            return _refused(401, "invalid_client", "unknown client or wrong secret")
        if form.get("refresh_token", "") not in self._refreshTokens:
            return _refused(400, "invalid_grant", "refresh token revoked or unknown")
        return None

    def introspect(self, token: str) -> dict[str, object]:
        """
        Answer an introspection request (RFC 7662 2.2).
        """
        self.counts.introspections += 1
        issued = self._accessTokens.get(token)
        if issued is None or self._seconds() >= issued.expiresAt:
            self.counts.inactive += 1
            return {"active": False}
        return {
            "active": True,
            "username": issued.user,
            "token_type": "Bearer",
            "exp": int(issued.expiresAt),
        }


def _form(request: Request) -> dict[str, str]:
    """
    A form-encoded request body's fields, the first of each.
    """
    return {
        key.decode("utf-8", "replace"): values[0].decode("utf-8", "replace")
        for key, values in (request.args or {}).items()
        if values
    }


def _answer(request: Request, status: int, document: dict[str, object]) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    # One request per connection: nothing stays open between requests.
    request.setHeader(b"connection", b"close")
    request.channel.persistent = False
    return json.dumps(document).encode("utf-8")


class _TokenEndpoint(Resource):
    isLeaf = True

    def __init__(self, provider: OAuth2Provider) -> None:
        Resource.__init__(self)
        self._provider = provider

    def render_POST(self, request: Request) -> bytes:
        status, document = self._provider.refresh(_form(request))
        return _answer(request, status, document)


class _IntrospectionEndpoint(Resource):
    isLeaf = True

    def __init__(self, provider: OAuth2Provider) -> None:
        Resource.__init__(self)
        self._provider = provider

    def render_POST(self, request: Request) -> bytes:
        return _answer(request, 200, self._provider.introspect(_form(request).get("token", "")))


class OAuth2Resource(Resource):
    """
    The provider's endpoints: C{/token} and C{/introspect}.
    """

    def __init__(self, provider: OAuth2Provider) -> None:
        Resource.__init__(self)
        self.putChild(b"token", _TokenEndpoint(provider))
        self.putChild(b"introspect", _IntrospectionEndpoint(provider))


class OAuth2Server:
    """
    An L{OAuth2Resource} served over HTTP on 127.0.0.1.

    @ivar provider: the state it serves.
    @ivar port: the port, once L{listen} has run.
    """

    def __init__(self, reactor: Any, provider: OAuth2Provider) -> None:
        """
        @param reactor: an L{IReactorTCP}.
        """
        self._reactor = reactor
        self.provider = provider
        self._factory = WrappingFactory(Site(OAuth2Resource(provider)))
        self._listening: IListeningPort | None = None
        self.port = 0
        self._scheme = "http"

    def listen(self, tlsDirectory: str | None = None) -> int:
        """
        Listen on a free port of 127.0.0.1, over TLS with the certificate
        of C{tlsDirectory} when given.

        @param tlsDirectory: a directory written by
            L{imapmig.testing.dovecot.writeTestCertificates} (the
            certificate names C{localhost} and C{127.0.0.1}).
        @return: the port.
        """
        if tlsDirectory is None:
            self._listening = self._reactor.listenTCP(0, self._factory, interface="127.0.0.1")
        else:
            with open(os.path.join(tlsDirectory, "server.pem"), "rb") as f:
                pem = f.read()
            with open(os.path.join(tlsDirectory, "server.key"), "rb") as f:
                pem += f.read()
            options = PrivateCertificate.loadPEM(pem).options()
            self._listening = self._reactor.listenSSL(
                0, self._factory, options, interface="127.0.0.1"
            )
            self._scheme = "https"
        self.port = int(getattr(self._listening.getHost(), "port"))
        return self.port

    def url(self, path: str) -> str:
        """
        The URL of an endpoint: C{url("token")}; C{https://localhost:...}
        over TLS.
        """
        if self._scheme == "https":
            return f"https://localhost:{self.port}/{path}"
        return f"http://127.0.0.1:{self.port}/{path}"

    async def stop(self) -> None:
        """
        Stop listening and drop the connections still open.
        """
        if self._listening is not None:
            stopped = self._listening.stopListening()
            if stopped is not None:
                await stopped
            self._listening = None
        lost: list[Deferred[None]] = []
        for protocol in list(self._factory.protocols):
            ended: Deferred[None] = Deferred()
            protocol.connectionLost = _chained(protocol.connectionLost, ended)
            lost.append(ended)
            protocol.transport.abortConnection()
        await DeferredList(lost)


def _chained(lost: Callable[[Any], None], ended: Deferred[None]) -> Callable[[Any], None]:
    def connectionLost(reason: Any) -> None:
        lost(reason)
        ended.callback(None)

    return connectionLost

