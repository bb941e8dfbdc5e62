"""
Tests for L{imapmig.imap.auth} and the session's AUTHENTICATE exchange.
"""

from __future__ import annotations

import base64

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import AuthenticationFailed, PermanentError, ProtocolError
from imapmig.imap.auth import (
    AdminLogin,
    PasswordLogin,
    PlainMechanism,
    decodeChallenge,
    encodeResponse,
    mechanismFor,
)
from imapmig.imap.session import IMAPSession
from tests.test_imap_client import greeted

LONG_PASSWORD = "p" * 300
"""
Long enough that base64 wrapped every 76 characters would break it.
"""


class MechanismTests(SynchronousTestCase):
    """
    The SASL PLAIN message, its encoding, and the choice of mechanism.
    """

    def test_plainMessage(self) -> None:
        """
        PLAIN is C{authzid NUL authcid NUL password} in UTF-8 (RFC 4616).
        """
        mechanism = PlainMechanism("user01", "admin", "pässword")
        self.assertEqual(
            mechanism.initialResponse(), b"user01\0admin\0p\xc3\xa4ssword"
        )
        self.assertEqual(mechanism.name, b"PLAIN")

    def test_longResponseOneLine(self) -> None:
        """
        A long response is base64 on one line: no line breaks anywhere.
        """
        encoded = encodeResponse(PlainMechanism("user01", "admin", LONG_PASSWORD).initialResponse())
        self.assertGreater(len(encoded), 76 * 4)
        self.assertNotIn(b"\n", encoded)
        self.assertNotIn(b"\r", encoded)
        self.assertEqual(base64.b64decode(encoded), b"user01\0admin\0" + LONG_PASSWORD.encode())

    def test_emptyResponse(self) -> None:
        """
        An empty initial response is C{=} (RFC 4959).
        """
        self.assertEqual(encodeResponse(b""), b"=")

    def test_decodeChallenge(self) -> None:
        """
        A challenge is base64, empty for PLAIN's first; anything else is
        L{None}.
        """
        self.assertEqual(decodeChallenge(b""), b"")
        self.assertEqual(decodeChallenge(base64.b64encode(b"{}")), b"{}")
        self.assertIsNone(decodeChallenge(b"go on"))

    def test_secondChallengeUnanswered(self) -> None:
        """
        PLAIN answers no challenge after its one message.
        """
        self.assertIsNone(PlainMechanism("", "alice", "pw").challenged(b""))

    def test_reprHidesPassword(self) -> None:
        """
        No credential's or mechanism's C{repr} shows the password.
        """
        for value in (
            PasswordLogin("alice", "sekrit"),
            AdminLogin("alice", "admin", "sekrit"),
            PlainMechanism("alice", "admin", "sekrit"),
        ):
            self.assertNotIn("sekrit", repr(value))

    def test_adminNeedsPlain(self) -> None:
        """
        An admin login on a server without AUTH=PLAIN is refused, naming
        the server, the admin and the user.
        """
        error = self.assertRaises(
            AuthenticationFailed,
            mechanismFor,
            AdminLogin("user01", "admin", "pw"),
            frozenset({b"IMAP4REV1", b"SASL-IR", b"AUTH=LOGIN"}),
            "user01 at tcp:127.0.0.1:143",
        )
        self.assertIn("user01 at tcp:127.0.0.1:143", str(error))
        self.assertIn("AUTH=PLAIN", str(error))
        self.assertIn("'admin'", str(error))
        self.assertIsInstance(error, PermanentError)

    def test_adminPlainWithoutSASLIR(self) -> None:
        """
        An admin login takes PLAIN with the user as authorization identity,
        whether or not the server offers SASL-IR.
        """
        for caps in ({b"AUTH=PLAIN"}, {b"AUTH=PLAIN", b"SASL-IR"}):
            self.assertEqual(
                mechanismFor(AdminLogin("user01", "admin", "pw"), frozenset(caps), "s"),
                PlainMechanism("user01", "admin", "pw"),
            )

    def test_userPassword(self) -> None:
        """
        A user's password takes PLAIN (no authorization identity) with
        SASL-IR, LOGIN (L{None}) without.
        """
        login = PasswordLogin("alice", "pw")
        self.assertEqual(
            mechanismFor(login, frozenset({b"AUTH=PLAIN", b"SASL-IR"}), "s"),
            PlainMechanism("", "alice", "pw"),
        )
        self.assertIsNone(mechanismFor(login, frozenset({b"AUTH=PLAIN"}), "s"))


class SessionAuthenticateTests(SynchronousTestCase):
    """
    L{IMAPSession.authenticate} on the wire.
    """

    def test_adminSASLIR(self) -> None:
        """
        With SASL-IR the admin login is one line: AUTHENTICATE PLAIN and
        the whole message, base64 unwrapped, however long.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=PLAIN")
        session = IMAPSession(client, "user01 at test")
        d = Deferred.fromCoroutine(
            session.authenticate(AdminLogin("user01", "admin", LONG_PASSWORD))
        )
        token = base64.b64encode(b"user01\0admin\0" + LONG_PASSWORD.encode())
        self.assertEqual(transport.value(), b"0001 AUTHENTICATE PLAIN " + token + b"\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1 MULTIAPPEND] Logged in\r\n")
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"")
        self.assertEqual(session.capabilities, {b"IMAP4REV1", b"MULTIAPPEND"})
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_adminContinuation(self) -> None:
        """
        Without SASL-IR, AUTHENTICATE PLAIN waits for the server's
        continuation request and answers it with the message on one line.
        """
        client, transport, clock = greeted(b"IMAP4rev1 AUTH=PLAIN")
        session = IMAPSession(client, "user01 at test")
        d = Deferred.fromCoroutine(
            session.authenticate(AdminLogin("user01", "admin", LONG_PASSWORD))
        )
        self.assertEqual(transport.value(), b"0001 AUTHENTICATE PLAIN\r\n")
        transport.clear()
        client.dataReceived(b"+ \r\n")
        token = base64.b64encode(b"user01\0admin\0" + LONG_PASSWORD.encode())
        self.assertEqual(transport.value(), token + b"\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK Logged in\r\n")
        self.assertEqual(transport.value(), b"0002 CAPABILITY\r\n")
        client.dataReceived(b"* CAPABILITY IMAP4rev1 UIDPLUS\r\n0002 OK done\r\n")
        self.successResultOf(d)
        self.assertIn(b"UIDPLUS", session.capabilities)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_refusedIsAuthenticationFailed(self) -> None:
        """
        A refused AUTHENTICATE is a login failure, permanent as a refused
        LOGIN is, with the server's text and without the password.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=PLAIN")
        session = IMAPSession(client, "user01 at test")
        d = Deferred.fromCoroutine(
            session.authenticate(AdminLogin("user01", "admin", "sekrit"))
        )
        client.dataReceived(b"0001 NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        failure = self.failureResultOf(d, AuthenticationFailed)
        self.assertIsInstance(failure.value, PermanentError)
        self.assertIn("user01 at test: login refused", str(failure.value))
        self.assertIn("AUTHENTICATIONFAILED", str(failure.value))
        self.assertNotIn("sekrit", str(failure.value))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_noPlainSendsNothing(self) -> None:
        """
        An admin login against a server without AUTH=PLAIN fails before
        anything is sent.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=CRAM-MD5")
        session = IMAPSession(client, "user01 at test")
        d = Deferred.fromCoroutine(
            session.authenticate(AdminLogin("user01", "admin", "pw"))
        )
        failure = self.failureResultOf(d, AuthenticationFailed)
        self.assertIn("user01 at test", str(failure.value))
        self.assertEqual(transport.value(), b"")

    def test_secondChallengeIsViolation(self) -> None:
        """
        A continuation request after PLAIN's one message is a protocol
        violation: the connection is dropped.
        """
        client, transport, clock = greeted(b"IMAP4rev1 AUTH=PLAIN")
        session = IMAPSession(client, "user01 at test")
        d = Deferred.fromCoroutine(
            session.authenticate(AdminLogin("user01", "admin", "pw"))
        )
        client.dataReceived(b"+ \r\n")
        transport.clear()
        client.dataReceived(b"+ \r\n")
        failure = self.failureResultOf(d, ProtocolError)
        self.assertIn("a continuation request nobody asked for", str(failure.value))
        self.assertEqual(transport.value(), b"")
