"""
Tests for L{imapmig.testing.oauth2}: the test authorization server's
decisions, on a L{Clock}.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.oauth2 import OAuth2Provider


class OAuth2ProviderTests(SynchronousTestCase):
    """
    L{OAuth2Provider}.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.provider = OAuth2Provider(self.clock.seconds, clientSecret="cs", lifetime=60)

    def grant(self, refreshToken: str, **form: str) -> tuple[int, dict[str, object]]:
        fields = {
            "grant_type": "refresh_token",
            "refresh_token": refreshToken,
            "client_id": "imapmig-test",
            "client_secret": "cs",
        }
        fields.update(form)
        return self.provider.refresh(fields)

    def test_issueRotateIntrospect(self) -> None:
        """
        A refresh issues an access token that introspection reports
        active for its user until its lifetime ends, and rotates the
        refresh token: the old one is refused afterwards.
        """
        first = self.provider.addRefreshToken("alice")
        status, document = self.grant(first)
        self.assertEqual((status, document["expires_in"], document["token_type"]), (200, 60, "Bearer"))
        access = str(document["access_token"])
        self.assertEqual(self.provider.introspect(access)["username"], "alice")
        self.clock.advance(60)
        self.assertEqual(self.provider.introspect(access), {"active": False})
        self.assertEqual(self.grant(first)[1]["error"], "invalid_grant")
        self.assertEqual(self.grant(str(document["refresh_token"]))[0], 200)
        counts = self.provider.counts
        self.assertEqual(
            (counts.refreshRequests, counts.refreshesGranted, counts.refreshesRefused, counts.introspections, counts.inactive),
            (3, 2, 1, 2, 1),
        )

    def test_revokeAndExpire(self) -> None:
        """
        Revoked refresh tokens are refused; expired access tokens are
        inactive at once.
        """
        refreshToken = self.provider.addRefreshToken("alice")
        access = str(self.grant(refreshToken)[1]["access_token"])
        self.provider.expireAccessTokens()
        self.assertEqual(self.provider.introspect(access), {"active": False})
        self.provider.revokeRefreshTokens()
        self.assertEqual(self.grant(refreshToken)[0], 400)

    def test_client(self) -> None:
        """
        A wrong client secret or grant type is refused.
        """
        refreshToken = self.provider.addRefreshToken("alice")
        self.assertEqual(self.grant(refreshToken, client_secret="x")[1]["error"], "invalid_client")
        self.assertEqual(self.grant(refreshToken, grant_type="password")[1]["error"], "unsupported_grant_type")

    def test_reportedLifetime(self) -> None:
        """
        C{reportedLifetime} is what C{expires_in} says; introspection goes
        by C{lifetime}.
        """
        self.provider.reportedLifetime = 3600
        document = self.grant(self.provider.addRefreshToken("alice"))[1]
        self.assertEqual(document["expires_in"], 3600)
        self.clock.advance(60)
        self.assertEqual(self.provider.introspect(str(document["access_token"])), {"active": False})
