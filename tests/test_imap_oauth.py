"""
Tests for the OAuth 2.0 logins of L{imapmig.imap.auth} (XOAUTH2 and
OAUTHBEARER) and their exchange in L{IMAPSession.authenticate}.
"""

from __future__ import annotations

import base64
import json

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import AuthenticationFailed, PermanentError
from imapmig.imap.auth import (
    MAX_ERROR_CHALLENGE,
    OAuthBearerMechanism,
    TokenLogin,
    XOAuth2Mechanism,
    describeErrorChallenge,
    mechanismFor,
)
from imapmig.imap.session import IMAPSession
from tests.test_imap_client import greeted

JWT = "eyJhbGciOiJSUzI1NiJ9." + "A" * 1200 + ".sig-_~+/"
"""
A token the size of a Microsoft 365 JWT: far beyond 76 base64 characters.
"""

ERROR_JSON = b'{"status":"invalid_token","scope":"https://outlook.office.com/.default"}'

BOTH = frozenset({b"IMAP4REV1", b"SASL-IR", b"AUTH=XOAUTH2", b"AUTH=OAUTHBEARER"})


class TokenMechanismTests(SynchronousTestCase):
    """
    The messages of XOAUTH2 and OAUTHBEARER, and the choice between them.
    """

    def test_xoauth2Message(self) -> None:
        """
        XOAUTH2 is C{user=USER^Aauth=Bearer TOKEN^A^A}.
        """
        self.assertEqual(
            XOAuth2Mechanism("alice@example.org", "tok.en").initialResponse(),
            b"user=alice@example.org\x01auth=Bearer tok.en\x01\x01",
        )

    def test_oauthbearerMessage(self) -> None:
        """
        OAUTHBEARER is a GS2 header, then host, port and auth, each ended
        by ^A, and a final ^A (RFC 7628 4.1); C{,} and C{=} in the user
        are escaped (RFC 5801).
        """
        self.assertEqual(
            OAuthBearerMechanism("a=b,c", "tok", "imap.example.org", 993).initialResponse(),
            b"n,a=a=3Db=2Cc,\x01host=imap.example.org\x01port=993\x01auth=Bearer tok\x01\x01",
        )
        self.assertEqual(
            OAuthBearerMechanism("alice", "tok").initialResponse(),
            b"n,a=alice,\x01auth=Bearer tok\x01\x01",
        )

    def test_errorResponses(self) -> None:
        """
        The error challenge is answered with an empty response in XOAUTH2
        and with ^A alone in OAUTHBEARER (RFC 7628 3.2.3).
        """
        self.assertEqual(XOAuth2Mechanism("a", "t").challenged(ERROR_JSON), b"")
        self.assertEqual(OAuthBearerMechanism("a", "t").challenged(ERROR_JSON), b"\x01")

    def test_preferOAuthBearer(self) -> None:
        """
        OAUTHBEARER is chosen where offered, XOAUTH2 otherwise.
        """
        login = TokenLogin("alice", "tok", "imap.example.org", 143)
        self.assertEqual(
            mechanismFor(login, BOTH, "s"),
            OAuthBearerMechanism("alice", "tok", "imap.example.org", 143),
        )
        self.assertEqual(
            mechanismFor(login, frozenset({b"AUTH=XOAUTH2", b"AUTH=PLAIN"}), "s"),
            XOAuth2Mechanism("alice", "tok"),
        )

    def test_neitherOffered(self) -> None:
        """
        A server offering neither mechanism is a permanent login failure
        naming the server, without the token.
        """
        error = self.assertRaises(
            AuthenticationFailed,
            mechanismFor,
            TokenLogin("alice", "sekrit-token"),
            frozenset({b"IMAP4REV1", b"AUTH=PLAIN", b"SASL-IR"}),
            "alice at tcp:127.0.0.1:143",
        )
        self.assertIsInstance(error, PermanentError)
        self.assertIn("alice at tcp:127.0.0.1:143", str(error))
        self.assertIn("AUTH=XOAUTH2", str(error))
        self.assertNotIn("sekrit", str(error))

    def test_badTokenCharacters(self) -> None:
        """
        A token with characters outside a bearer token's (a line break, a
        space, ^A) is refused before anything is sent, without showing it.
        """
        for token in ("", "sekrit\n", "sek rit", "sek\x01rit"):
            error = self.assertRaises(
                AuthenticationFailed, mechanismFor, TokenLogin("alice", token), BOTH, "s"
            )
            self.assertNotIn("sekrit", str(error))
            self.assertNotIn("sek", str(error))

    def test_reprHidesToken(self) -> None:
        """
        No credential's or mechanism's C{repr} shows the token.
        """
        for value in (
            TokenLogin("alice", "sekrit"),
            XOAuth2Mechanism("alice", "sekrit"),
            OAuthBearerMechanism("alice", "sekrit"),
        ):
            self.assertNotIn("sekrit", repr(value))

    def test_describeErrorChallenge(self) -> None:
        """
        An error challenge is described by its JSON C{status}, escaped and
        short; anything else by a short escaped excerpt; a huge one by its
        length alone.
        """
        self.assertEqual(describeErrorChallenge(ERROR_JSON), "status invalid_token")
        self.assertEqual(
            describeErrorChallenge(b'{"status":"bad\\n' + b"x" * 200 + b'"}'),
            "status bad\\n" + "x" * 76 + "...",
        )
        self.assertIn("not JSON: \\xff", describeErrorChallenge(b"\xff\x00"))
        self.assertIn("without a status", describeErrorChallenge(b'{"status": 1}'))
        self.assertIn("without a status", describeErrorChallenge(b"[1]"))
        huge = b'{"status":"' + b"x" * MAX_ERROR_CHALLENGE + b'"}'
        self.assertEqual(
            describeErrorChallenge(huge),
            f"an error challenge of {len(huge)} octets, not read",
        )


class TokenSessionTests(SynchronousTestCase):
    """
    OAuth logins on the wire.
    """

    def test_xoauth2SASLIR(self) -> None:
        """
        With SASL-IR, XOAUTH2 is one line whatever the token's length.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=XOAUTH2")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.authenticate(TokenLogin("alice", JWT)))
        encoded = base64.b64encode(b"user=alice\x01auth=Bearer " + JWT.encode() + b"\x01\x01")
        self.assertGreater(len(encoded), 1000)
        self.assertEqual(transport.value(), b"0001 AUTHENTICATE XOAUTH2 " + encoded + b"\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1 UIDPLUS] Logged in\r\n")
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_oauthbearerContinuation(self) -> None:
        """
        Without SASL-IR, OAUTHBEARER's message answers the continuation
        request, on one line; host and port are those given, the port
        otherwise the connection's.
        """
        client, transport, clock = greeted(b"IMAP4rev1 AUTH=OAUTHBEARER AUTH=XOAUTH2")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(
            session.authenticate(TokenLogin("alice", JWT, host="imap.example.org"))
        )
        self.assertEqual(transport.value(), b"0001 AUTHENTICATE OAUTHBEARER\r\n")
        transport.clear()
        client.dataReceived(b"+ \r\n")
        port = transport.getPeer().port
        message = (
            b"n,a=alice,\x01host=imap.example.org\x01port=%d\x01auth=Bearer " % (port,)
            + JWT.encode() + b"\x01\x01"
        )  # fmt: skip
        self.assertEqual(transport.value(), base64.b64encode(message) + b"\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1] Logged in\r\n")
        self.successResultOf(d)
        self.assertEqual(clock.getDelayedCalls(), [])

    def _refused(self, caps: bytes, answer: bytes) -> None:
        """
        The server answers the token with an error challenge: the client
        sends C{answer}, and the tagged NO is a permanent login failure
        with the challenge's status, without the token.
        """
        client, transport, clock = greeted(caps)
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.authenticate(TokenLogin("alice", "sekrit")))
        transport.clear()
        client.dataReceived(b"+ " + base64.b64encode(ERROR_JSON) + b"\r\n")
        self.assertEqual(transport.value(), answer + b"\r\n")
        self.assertNoResult(d)
        client.dataReceived(b"0001 NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        failure = self.failureResultOf(d, AuthenticationFailed)
        self.assertIsInstance(failure.value, PermanentError)
        message = str(failure.value)
        self.assertIn("alice at test: login refused", message)
        self.assertIn("AUTHENTICATIONFAILED", message)
        self.assertIn("status invalid_token", message)
        self.assertNotIn("sekrit", message)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_xoauth2ErrorChallenge(self) -> None:
        """
        XOAUTH2's error challenge is answered with an empty line.
        """
        self._refused(b"IMAP4rev1 SASL-IR AUTH=XOAUTH2", b"")

    def test_oauthbearerErrorChallenge(self) -> None:
        """
        OAUTHBEARER's error challenge is answered with ^A (C{AQ==}).
        """
        self._refused(b"IMAP4rev1 SASL-IR AUTH=OAUTHBEARER", base64.b64encode(b"\x01"))

    def test_neitherSendsNothing(self) -> None:
        """
        A server without either mechanism: nothing is sent.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=PLAIN")
        transport.clear()
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.authenticate(TokenLogin("alice", "tok")))
        failure = self.failureResultOf(d, AuthenticationFailed)
        self.assertIn("alice at test", str(failure.value))
        self.assertEqual(transport.value(), b"")

    def test_loginDisabledAllowsToken(self) -> None:
        """
        LOGINDISABLED forbids passwords in clear, not a token mechanism.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR LOGINDISABLED AUTH=XOAUTH2")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.authenticate(TokenLogin("alice", "tok")))
        self.assertIn(b"AUTHENTICATE XOAUTH2 ", transport.value())
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1] Logged in\r\n")
        self.successResultOf(d)
