"""
Tests for L{imapmig.oauth.tokencache}: the shared, renewed access token of the
refresh grant, and for L{imapmig.oauth.tokens.loginWithToken}, the second
chance after a refused token.
"""

from __future__ import annotations

import os
import stat
from typing import Awaitable, Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import AuthenticationFailed, CredentialsRefused
from imapmig.oauth.tokencache import RefreshedTokens, replaceSecretFile
from imapmig.errors import TokenEndpointUnavailable, TokenRefreshRefused
from imapmig.oauth.tokenrefresh import IssuedToken
from imapmig.oauth.tokens import TokenSources, loginWithToken
from imapmig.config.model import TokenFileConfig, TokenRefreshConfig

ACCOUNT = "alice at tcp:127.0.0.1:143"


class _Grant:
    """
    A refresh grant whose answers the test gives, one per request.
    """

    endpoint = "https://login.example.com/token"

    def __init__(self) -> None:
        self.requests: list[tuple[str, Deferred[IssuedToken]]] = []

    def refresh(self, refreshToken: str) -> Deferred[IssuedToken]:
        d: Deferred[IssuedToken] = Deferred()
        self.requests.append((refreshToken, d))
        return d

    def answer(self, accessToken: str, expiresIn: float | None = 3600, rotated: str | None = None) -> None:
        self.requests[-1][1].callback(IssuedToken(accessToken, expiresIn, rotated))


class RefreshedTokensTests(SynchronousTestCase):
    """
    L{RefreshedTokens}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.grant = _Grant()
        directory = self.mktemp()
        os.makedirs(directory)
        self.file = os.path.join(directory, "alice.refresh")
        replaceSecretFile(self.file, "rt-1")
        self.tokens = RefreshedTokens(self.grant, self.file, self.clock, ACCOUNT)

    def test_sharedRefresh(self) -> None:
        """
        Logins asking while a refresh is in flight share it: one request,
        with the refresh token of the file, and every one gets its token.
        """
        first, second = self.tokens.current(), self.tokens.current()
        self.assertEqual([r for r, _ in self.grant.requests], ["rt-1"])
        self.assertNoResult(first)
        self.grant.answer("at-1")
        self.assertEqual((self.successResultOf(first), self.successResultOf(second)), ("at-1", "at-1"))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_renewedBeforeExpiry(self) -> None:
        """
        A token is served from the cache until 60 s before its expiry (or
        10% of its life, when shorter), then renewed.
        """
        self.tokens.current()
        self.grant.answer("at-1", expiresIn=3600)
        self.clock.advance(3539)
        self.assertEqual(self.successResultOf(self.tokens.current()), "at-1")
        self.assertEqual(len(self.grant.requests), 1)
        self.clock.advance(1)
        renewed = self.tokens.current()
        self.assertEqual(len(self.grant.requests), 2)
        self.grant.answer("at-2", expiresIn=10)
        self.assertEqual(self.successResultOf(renewed), "at-2")
        self.clock.advance(8.9)
        self.assertEqual(self.successResultOf(self.tokens.current()), "at-2")
        self.clock.advance(0.1)
        self.tokens.current()
        self.assertEqual(len(self.grant.requests), 3)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noLifetime(self) -> None:
        """
        A token without C{expires_in} is kept until a server refuses it.
        """
        self.tokens.current()
        self.grant.answer("at-1", expiresIn=None)
        self.clock.advance(10**6)
        self.assertEqual(self.successResultOf(self.tokens.current()), "at-1")
        self.tokens.invalidate("at-1")
        self.tokens.current()
        self.assertEqual(len(self.grant.requests), 2)

    def test_invalidateOnlyCurrent(self) -> None:
        """
        Invalidating a token already replaced changes nothing.
        """
        self.tokens.current()
        self.grant.answer("at-1")
        self.tokens.invalidate("at-0")
        self.assertEqual(self.successResultOf(self.tokens.current()), "at-1")
        self.assertEqual(len(self.grant.requests), 1)

    def test_rotation(self) -> None:
        """
        A rotated refresh token replaces the file (mode 0600, no temporary
        file left) and is used for the next refresh.
        """
        self.tokens.current()
        self.grant.answer("at-1", rotated="rt-2")
        with open(self.file) as f:
            self.assertEqual(f.read(), "rt-2\n")
        self.assertEqual(stat.S_IMODE(os.stat(self.file).st_mode), 0o600)
        self.assertEqual(os.listdir(os.path.dirname(self.file)), ["alice.refresh"])
        self.tokens.invalidate("at-1")
        self.tokens.current()
        self.assertEqual(self.grant.requests[-1][0], "rt-2")

    def test_rotationNotStored(self) -> None:
        """
        When the rotated refresh token cannot be written, an error is
        logged (without the token) and the new token is used from memory.
        """
        os.chmod(os.path.dirname(self.file), 0o500)
        self.addCleanup(os.chmod, os.path.dirname(self.file), 0o700)
        if os.access(os.path.dirname(self.file), os.W_OK):
            # root writes anyway: make the path unusable instead.
            self.tokens = RefreshedTokens(self.grant, self.file, self.clock, ACCOUNT)
            self.tokens._file = os.path.join(self.file, "not-a-directory", "x")
            self.tokens._refreshToken = "rt-1"
        with capturedLogs() as events:
            self.tokens.current()
            self.grant.answer("at-1", rotated="rt-secret-2")
        errors = [e for e in events if e["log_level"] == LogLevel.error]
        self.assertEqual(len(errors), 1)
        self.assertIn("cannot store the rotated refresh token", errors[0]["log_format"])
        self.assertNotIn("rt-secret-2", repr(errors[0]))
        self.tokens.invalidate("at-1")
        self.tokens.current()
        self.assertEqual(self.grant.requests[-1][0], "rt-secret-2")

    def test_logsNoToken(self) -> None:
        """
        A refresh logs the account, the endpoint and the lifetime, and no
        token.
        """
        with capturedLogs() as events:
            self.tokens.current()
            self.grant.answer("at-secret", expiresIn=3600, rotated="rt-secret")
        (event,) = events
        self.assertEqual((event["account"], event["endpoint"], event["lifetime"]), (ACCOUNT, _Grant.endpoint, "3600"))
        self.assertNotIn("secret", repr(event))

    def test_failureShared(self) -> None:
        """
        A failed refresh fails every waiting login; the next asks again.
        """
        first, second = self.tokens.current(), self.tokens.current()
        self.grant.requests[-1][1].errback(TokenEndpointUnavailable("down"))
        self.failureResultOf(first, TokenEndpointUnavailable)
        self.failureResultOf(second, TokenEndpointUnavailable)
        self.tokens.current()
        self.assertEqual(len(self.grant.requests), 2)

    def test_cancelledWaiter(self) -> None:
        """
        A login that stops waiting leaves the refresh to the others; a
        login asking meanwhile does not start a second one.
        """
        first = self.tokens.current()
        first.cancel()
        self.failureResultOf(first)
        second = self.tokens.current()
        self.assertEqual(len(self.grant.requests), 1)
        self.grant.answer("at-1")
        self.assertEqual(self.successResultOf(second), "at-1")

    def test_unreadableFile(self) -> None:
        """
        A refresh token file that cannot be used fails permanently,
        naming the account and the file.
        """
        os.chmod(self.file, 0o644)
        error = self.failureResultOf(self.tokens.current(), AuthenticationFailed).value
        self.assertIn(ACCOUNT, str(error))
        self.assertIn("refresh token file", str(error))
        self.assertEqual(self.grant.requests, [])


class TokenSourcesTests(SynchronousTestCase):
    """
    L{TokenSources}.
    """

    def test_oneCachePerRefreshTokenFile(self) -> None:
        """
        Accounts naming the same refresh token file share one cache; a
        token file gets a source of its own each time.
        """
        sources = TokenSources(Clock())
        refresh = TokenRefreshConfig("https://login.example.com/token", "id", None, "/etc/a.refresh")
        other = TokenRefreshConfig("https://login.example.com/token", "id", None, "/etc/b.refresh")
        self.assertIs(sources.sourceFor(refresh, "a"), sources.sourceFor(refresh, "a"))
        self.assertIsNot(sources.sourceFor(refresh, "a"), sources.sourceFor(other, "b"))
        self.assertIsInstance(sources.sourceFor(refresh, "a"), RefreshedTokens)
        fileSource = TokenFileConfig("/etc/a.token")
        self.assertIsNot(sources.sourceFor(fileSource, "a"), sources.sourceFor(fileSource, "a"))

    def test_reloadedClientSettings(self) -> None:
        """
        Settings of the same refresh token file changed by a reload (a
        rotated client secret) are used from the next refresh on, by the
        one source of that file (not a second one spending the same
        refresh token); the same settings again change nothing.
        """
        from attrs import evolve

        from imapmig.access.secrets import Secret

        sources = TokenSources(Clock())
        refresh = TokenRefreshConfig(
            "https://login.example.com/token", "id", Secret("old"), "/etc/a.refresh"
        )
        first = sources.sourceFor(refresh, "a")
        assert isinstance(first, RefreshedTokens)
        grant = first._grant
        self.assertIs(sources.sourceFor(evolve(refresh), "a"), first)
        self.assertIs(first._grant, grant)
        rotated = evolve(refresh, clientSecret=Secret("new"))
        self.assertIs(sources.sourceFor(rotated, "a"), first)
        self.assertIsNot(first._grant, grant)
        self.assertIn(b"client_secret=new", first._grant._form("r"))  # type: ignore[attr-defined]


class _Tokens:
    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)
        self.invalidated: list[str] = []

    def current(self) -> Deferred[str]:
        return succeed(self.tokens.pop(0))

    def invalidate(self, token: str) -> None:
        self.invalidated.append(token)


class LoginWithTokenTests(SynchronousTestCase):
    """
    L{loginWithToken}.
    """

    def logIn(self, *refusals: Exception) -> tuple[list[str], Callable[[str], Awaitable[str]]]:
        tried: list[str] = []
        outcomes = list(refusals)

        async def attempt(token: str) -> str:
            tried.append(token)
            if outcomes:
                raise outcomes.pop(0)
            return "session"

        return tried, attempt

    def test_refusedOnce(self) -> None:
        """
        A refused token is invalidated and the login tried once more with
        the next token, which logs in.
        """
        tokens = _Tokens("at-1", "at-2")
        tried, attempt = self.logIn(CredentialsRefused("no"))
        with capturedLogs() as events:
            d: Deferred[str] = Deferred.fromCoroutine(loginWithToken(tokens, attempt, ACCOUNT))
        self.assertEqual(self.successResultOf(d), "session")
        self.assertEqual((tried, tokens.invalidated), (["at-1", "at-2"], ["at-1"]))
        self.assertIn("refused the access token", events[0]["log_format"])

    def test_refusedTwice(self) -> None:
        """
        A second refusal is final.
        """
        tokens = _Tokens("at-1", "at-2")
        tried, attempt = self.logIn(CredentialsRefused("no"), CredentialsRefused("no again"))
        d: Deferred[str] = Deferred.fromCoroutine(loginWithToken(tokens, attempt, ACCOUNT))
        self.assertEqual(str(self.failureResultOf(d, CredentialsRefused).value), "no again")
        self.assertEqual(tried, ["at-1", "at-2"])

    def test_sameTokenNotRetried(self) -> None:
        """
        When the token obtained after a refusal is the one refused (a token
        file or command not yet renewed), the login is not tried again:
        one refusal, failing as usual, and no event saying it logs in
        again.
        """
        tokens = _Tokens("at-1", "at-1")
        tried, attempt = self.logIn(CredentialsRefused("no"))
        with capturedLogs() as events:
            d: Deferred[str] = Deferred.fromCoroutine(loginWithToken(tokens, attempt, ACCOUNT))
        self.assertEqual(str(self.failureResultOf(d, CredentialsRefused).value), "no")
        self.assertEqual((tried, tokens.invalidated), (["at-1"], ["at-1"]))
        self.assertEqual(events, [])

    def test_otherFailureNotRetried(self) -> None:
        """
        A failure other than a refusal (no mechanism, the network) is not
        a reason for another token.
        """
        tokens = _Tokens("at-1", "at-2")
        tried, attempt = self.logIn(AuthenticationFailed("no XOAUTH2"))
        d: Deferred[str] = Deferred.fromCoroutine(loginWithToken(tokens, attempt, ACCOUNT))
        self.failureResultOf(d, AuthenticationFailed)
        self.assertEqual((tried, tokens.invalidated), (["at-1"], []))

    def test_refreshRefusedNotRetried(self) -> None:
        """
        A refused refresh is not a refused login: it fails at once.
        """

        class Refusing(_Tokens):
            def current(self) -> Deferred[str]:
                return Deferred.fromCoroutine(self._fail())

            async def _fail(self) -> str:
                raise TokenRefreshRefused("invalid_grant")

        tried, attempt = self.logIn()
        d: Deferred[str] = Deferred.fromCoroutine(loginWithToken(Refusing(), attempt, ACCOUNT))
        self.failureResultOf(d, TokenRefreshRefused)
        self.assertEqual(tried, [])
