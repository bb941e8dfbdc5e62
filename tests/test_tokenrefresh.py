"""
Tests for L{imapmig.oauth.tokenrefresh}: the refresh grant's request and what
each answer of the endpoint means, against the test authorization server
(L{imapmig.testing.oauth2}) in memory and against scripted answers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from treq.testing import RequestTraversalAgent
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Request
from zope.interface import implementer
from twisted.web.iweb import IAgent

from imapmig.config.model import TokenRefreshConfig
from imapmig.errors import (
    AuthenticationFailed,
    TokenEndpointUnavailable,
    TokenRefreshRefused,
    TransientError,
)
from imapmig.access.secrets import Secret
from imapmig.testing.oauth2 import OAuth2Provider, OAuth2Resource
from imapmig.oauth.tokenrefresh import (
    MAX_TOKEN_RESPONSE,
    IssuedToken,
    RefreshGrantClient,
    agentFor,
    endpointForLogs,
)

ACCOUNT = "alice at tcp:imap.example.com:993"
ENDPOINT = "http://127.0.0.1:9/token?tenant=x"


def config(secret: str | None = None, scope: str | None = None) -> TokenRefreshConfig:
    return TokenRefreshConfig(
        ENDPOINT,
        "imapmig-test",
        None if secret is None else Secret(secret),
        "/nonexistent/refresh",
        scope,
        timeout=10.0,
    )


class _Scripted(Resource):
    """
    Answers every request with a fixed status and body, and keeps the
    requests' forms.
    """

    isLeaf = True

    def __init__(self, status: int, body: bytes) -> None:
        Resource.__init__(self)
        self.status = status
        self.body = body
        self.forms: list[dict[bytes, list[bytes]]] = []

    def render_POST(self, request: Request) -> bytes:
        assert request.content is not None
        self.forms.append(parse_qs(request.content.read()))
        request.setResponseCode(self.status)
        return self.body


@implementer(IAgent)
class _StuckAgent:
    """
    An agent whose request never completes; records its cancellation.
    """

    def __init__(self) -> None:
        self.cancelled = False

    def request(self, method: bytes, uri: bytes, headers: Any = None, bodyProducer: Any = None) -> Deferred[Any]:
        def cancel(d: Deferred[Any]) -> None:
            self.cancelled = True

        return Deferred(cancel)


@implementer(IAgent)
class _RefusedAgent:
    def request(self, method: bytes, uri: bytes, headers: Any = None, bodyProducer: Any = None) -> Deferred[Any]:
        return fail(ConnectionRefusedError("Connection refused"))


class RefreshGrantClientTests(SynchronousTestCase):
    """
    L{RefreshGrantClient.refresh}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.provider = OAuth2Provider(self.clock.seconds, lifetime=600, clientSecret="s3cret")

    def refreshWith(self, resource: Resource, token: str, cfg: TokenRefreshConfig | None = None) -> Deferred[IssuedToken]:
        agent = RequestTraversalAgent(resource)
        client = RefreshGrantClient(cfg or config("s3cret"), agent, self.clock, ACCOUNT)
        d = client.refresh(token)
        agent.flush()
        return d

    def scripted(self, status: int, body: bytes) -> tuple[_Scripted, Deferred[IssuedToken]]:
        resource = _Scripted(status, body)
        return resource, self.refreshWith(resource, "rt-old")

    def test_issued(self) -> None:
        """
        A refresh against the test server returns its access token, its
        lifetime and the rotated refresh token; the server saw one granted
        refresh, with the client's secret.
        """
        refreshToken = self.provider.addRefreshToken("alice")
        d = self.refreshWith(OAuth2Resource(self.provider), refreshToken)
        issued = self.successResultOf(d)
        self.assertTrue(issued.accessToken.startswith("at-"))
        self.assertEqual(issued.expiresIn, 600.0)
        self.assertIsNotNone(issued.refreshToken)
        self.assertNotEqual(issued.refreshToken, refreshToken)
        self.assertEqual(self.provider.counts.refreshesGranted, 1)
        self.assertEqual(self.provider.introspect(issued.accessToken)["username"], "alice")
        self.assertNotIn(issued.accessToken, repr(issued))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_form(self) -> None:
        """
        The request is a form with the grant type, the refresh token, the
        client's id and secret and the scope.
        """
        resource = _Scripted(200, b'{"access_token": "at-1", "token_type": "bearer"}')
        cfg = config("s3cret", scope="https://outlook.office.com/IMAP.AccessAsUser.All offline_access")
        self.successResultOf(self.refreshWith(resource, "rt-1", cfg))
        self.assertEqual(
            resource.forms,
            [
                {
                    b"grant_type": [b"refresh_token"],
                    b"refresh_token": [b"rt-1"],
                    b"client_id": [b"imapmig-test"],
                    b"client_secret": [b"s3cret"],
                    b"scope": [b"https://outlook.office.com/IMAP.AccessAsUser.All offline_access"],
                }
            ],
        )

    def test_publicClient(self) -> None:
        """
        Without a client secret, none is sent.
        """
        resource = _Scripted(200, b'{"access_token": "at-1"}')
        issued = self.successResultOf(self.refreshWith(resource, "rt-1", config()))
        self.assertNotIn(b"client_secret", resource.forms[0])
        self.assertEqual((issued.expiresIn, issued.refreshToken), (None, None))

    def test_invalidGrant(self) -> None:
        """
        A revoked refresh token (C{invalid_grant}) is a permanent failure
        naming the account, the endpoint (without its query), the error
        code and its description, and neither token.
        """
        refreshToken = self.provider.addRefreshToken("alice")
        self.provider.revokeRefreshTokens()
        d = self.refreshWith(OAuth2Resource(self.provider), refreshToken)
        error = self.failureResultOf(d, TokenRefreshRefused).value
        self.assertIsInstance(error, AuthenticationFailed)
        message = str(error)
        self.assertIn(ACCOUNT, message)
        self.assertIn("token endpoint http://127.0.0.1:9/token:", message)
        self.assertNotIn("tenant", message)
        self.assertIn("invalid_grant (refresh token revoked or unknown)", message)
        self.assertNotIn(refreshToken, message)

    def test_errorEscapedAndShort(self) -> None:
        """
        The endpoint's error description is escaped and cut short.
        """
        _, d = self.scripted(
            400, b'{"error": "invalid_client", "error_description": "bad\\r\\nclient ' + b"x" * 300 + b'"}'
        )
        message = str(self.failureResultOf(d, TokenRefreshRefused).value)
        self.assertIn("invalid_client (bad\\r\\nclient xxx", message)
        self.assertIn("...", message)
        self.assertLess(len(message), 300)

    def test_serverErrorTransient(self) -> None:
        """
        A 5xx answer, or 429, is transient.
        """
        for status in (500, 503, 429):
            _, d = self.scripted(status, b"<html>busy</html>")
            error = self.failureResultOf(d, TokenEndpointUnavailable).value
            self.assertIsInstance(error, TransientError)
            self.assertIn(f"HTTP {status}", str(error))

    def test_notJSONTransient(self) -> None:
        """
        A 200 answer that is not a JSON object (a proxy's page) is
        transient, with a short excerpt.
        """
        _, d = self.scripted(200, b"<html>captive portal</html>")
        error = self.failureResultOf(d, TokenEndpointUnavailable).value
        self.assertIn("without a JSON object: <html>captive portal</html>", str(error))

    def test_otherClientErrorPermanent(self) -> None:
        """
        A 4xx answer without an OAuth error is permanent.
        """
        _, d = self.scripted(404, b"not found")
        self.assertIn("HTTP 404 without an OAuth error", str(self.failureResultOf(d, TokenRefreshRefused).value))

    def test_tooLarge(self) -> None:
        """
        An answer larger than L{MAX_TOKEN_RESPONSE} is refused unread.
        """
        _, d = self.scripted(200, b'{"access_token": "' + b"a" * MAX_TOKEN_RESPONSE + b'"}')
        self.assertIn("more than", str(self.failureResultOf(d, TokenRefreshRefused).value))

    def test_badAnswers(self) -> None:
        """
        An answer without an access token, with one a bearer token cannot
        be, or of another token type, is refused.
        """
        for body, said in [
            (b'{"token_type": "Bearer"}', "no access_token"),
            (b'{"access_token": "a b"}', "cannot carry"),
            (b'{"access_token": "at", "token_type": "mac"}', "token_type is mac"),
        ]:
            _, d = self.scripted(200, body)
            self.assertIn(said, str(self.failureResultOf(d, TokenRefreshRefused).value))

    def test_expiresIn(self) -> None:
        """
        C{expires_in} is read as a number or a string of digits; anything
        else is no lifetime.
        """
        for value, expected in [(b"3599", 3599.0), (b'"3599"', 3599.0), (b"true", None), (b"-5", None)]:
            _, d = self.scripted(200, b'{"access_token": "at", "expires_in": ' + value + b"}")
            self.assertEqual(self.successResultOf(d).expiresIn, expected)

    def test_timeout(self) -> None:
        """
        A request without an answer within the timeout is cancelled and
        fails transiently.
        """
        agent = _StuckAgent()
        d = RefreshGrantClient(config(), agent, self.clock, ACCOUNT).refresh("rt")
        self.clock.advance(9.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        error = self.failureResultOf(d, TokenEndpointUnavailable).value
        self.assertIn("no answer within 10 s", str(error))
        self.assertTrue(agent.cancelled)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_unreachable(self) -> None:
        """
        A connection error is transient and says what happened.
        """
        d = RefreshGrantClient(config(), _RefusedAgent(), self.clock, ACCOUNT).refresh("rt")
        error = self.failureResultOf(d, TokenEndpointUnavailable).value
        self.assertIn("cannot reach it: Connection was refused", str(error))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_endpointForLogs(self) -> None:
        """
        The endpoint is shown without its query or fragment.
        """
        self.assertEqual(
            endpointForLogs("https://login.example.com/t/oauth2/v2.0/token?x=1#y"),
            "https://login.example.com/t/oauth2/v2.0/token",
        )


class AgentQuietTests(SynchronousTestCase):
    """
    L{agentFor}'s connections log nothing at the default level.
    """

    def factoryEvents(self, agent: IAgent, reactor: MemoryReactorClock) -> list[Any]:
        """
        The log events of starting and stopping the factory of the
        connection C{agent} opens on C{reactor} for one request.
        """
        d = agent.request(b"POST", ENDPOINT.encode("ascii"))
        [(host, port, factory, timeout, bindAddress)] = reactor.tcpClients
        self.assertEqual((host, port), ("127.0.0.1", 9))
        with capturedLogs() as events:
            factory.doStart()
            factory.doStop()
        d.cancel()
        self.failureResultOf(d)
        return list(events)

    def test_noFactoryChatter(self) -> None:
        """
        The factory of the agent's connections does not log "Starting
        factory" or "Stopping factory".
        """
        reactor = MemoryReactorClock()
        self.assertEqual(self.factoryEvents(agentFor(config(), reactor), reactor), [])

    def test_plainPoolIsNoisy(self) -> None:
        """
        The check of L{test_noFactoryChatter} can fail: an agent with
        Twisted's plain pool logs both.
        """
        reactor = MemoryReactorClock()
        agent = Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))
        formats = [e["log_format"] for e in self.factoryEvents(agent, reactor)]
        self.assertEqual(
            [f.split()[:2] for f in formats],
            [["Starting", "factory"], ["Stopping", "factory"]],
        )
