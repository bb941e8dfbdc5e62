"""
Tests for L{imapmig.imap.client} and L{imapmig.imap.session} against
in-memory transports: TCP_NODELAY, the line limit, the command timeout,
login and STARTTLS decisions.
"""

from __future__ import annotations

import base64
from typing import cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionAborted, ConnectionDone
from twisted.internet.error import ConnectionLost as TwistedConnectionLost
from twisted.internet.interfaces import IPushProducer
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogEvent, formatEvent, globalLogPublisher
from twisted.mail.imap4 import IMAP4Exception
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from imapmig.errors import (
    AuthenticationFailed,
    CommandFailed,
    CommandRefused,
    FetchParseError,
    FetchSpoolError,
    ImapmigError,
    ProtocolError,
    ReplyTimeout,
    ServerBusy,
    ServerBye,
    TLSRequired,
    escapedExcerpt,
)
from imapmig.imap.client import MigrationIMAP4Client, describeConnectionLoss
from imapmig.imap.connection import MAX_LINE_LENGTH
from imapmig.imap.responses import MAX_RESPONSE_LENGTH
from imapmig.errors import CommandRefused
from imapmig.imap.errormap import parseResponseCode
from imapmig.imap.login import capabilitySet
from imapmig.imap.mailboxes import MailboxState
from imapmig.imap.session import IMAPSession


class NoDelayTransport(StringTransport):
    """
    Records setTcpNoDelay calls, as a TCP transport would take them.
    """

    noDelay = False
    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        StringTransport.abortConnection(self)

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.noDelay = enabled


def greeted(caps: bytes = b"IMAP4rev1 LITERAL+") -> tuple[MigrationIMAP4Client, NoDelayTransport, Clock]:
    clock = Clock()
    client = MigrationIMAP4Client(clock, timeout=30)
    transport = NoDelayTransport()
    client.makeConnection(transport)
    client.dataReceived(b"* OK [CAPABILITY " + caps + b"] ready\r\n")
    return client, transport, clock


class WireErrorsTests(SynchronousTestCase):
    """
    The wire's errors are in L{imapmig.errors}' hierarchy and keep the
    bases the code that catches them relies on.
    """

    def test_commandRefused(self) -> None:
        """
        L{CommandRefused} is an L{ImapmigError} and still the
        L{IMAP4Exception} the session catches.
        """
        refused = CommandRefused("NO", b"[TRYCREATE] no such mailbox")
        self.assertIsInstance(refused, ImapmigError)
        self.assertIsInstance(refused, IMAP4Exception)
        self.assertEqual((refused.status, refused.text), ("NO", b"[TRYCREATE] no such mailbox"))

    def test_fetchErrors(self) -> None:
        """
        L{FetchParseError} and L{FetchSpoolError} are L{ImapmigError}s and
        still L{ValueError}s.
        """
        for error in (FetchParseError("x"), FetchSpoolError("y")):
            self.assertIsInstance(error, ImapmigError)
            self.assertIsInstance(error, ValueError)
        self.assertIsInstance(FetchSpoolError("y"), FetchParseError)


class ClientTests(SynchronousTestCase):
    """
    The protocol adapter.
    """

    def test_noDelayOnConnect(self) -> None:
        """
        TCP_NODELAY is turned on through the transport as soon as the
        connection is made.
        """
        client, transport, clock = greeted()
        self.assertTrue(transport.noDelay)
        client.connection.loseConnection()

    def test_greeting(self) -> None:
        """
        The greeting fires C{greeted} with the advertised capabilities.
        """
        client, transport, clock = greeted(b"IMAP4rev1 LITERAL+ AUTH=PLAIN")
        caps = self.successResultOf(client.greeted)
        self.assertEqual(capabilitySet(caps), {b"IMAP4REV1", b"LITERAL+", b"AUTH=PLAIN"})

    def test_longLineAccepted(self) -> None:
        """
        An untagged line far longer than Twisted's 16 KB default, up to
        L{MAX_LINE_LENGTH}, does not drop the connection; one octet more
        does.
        """
        client, transport, clock = greeted()
        self.assertEqual(MAX_LINE_LENGTH, 1 << 20)
        client.dataReceived(b"* SEARCH " + b"1" * (MAX_LINE_LENGTH - 9) + b"\r\n")
        self.assertFalse(transport.disconnecting)
        client.dataReceived(b"* SEARCH " + b"1" * (MAX_LINE_LENGTH - 8) + b"\r\n")
        self.assertTrue(transport.aborted)

    def test_unsolicitedLoggedShort(self) -> None:
        """
        An unsolicited response the client does not act on is logged by
        its start only, however long it is.
        """
        client, transport, clock = greeted()
        events: list[LogEvent] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        client.dataReceived(b"* SEARCH " + b"123456 " * 100000 + b"\r\n")
        texts = [formatEvent(event) for event in events]
        self.assertFalse(transport.disconnecting)
        self.assertEqual(len(texts), 1, texts)
        self.assertIn("unsolicited response ignored: SEARCH 123456 123456", texts[0])
        self.assertLess(len(texts[0]), 200)

    def test_timeout(self) -> None:
        """
        With no data from the server for C{timeout} seconds the connection
        is dropped and the outstanding command fails.
        """
        client, transport, clock = greeted()
        d = client.noop()
        clock.advance(29)
        self.assertFalse(transport.disconnecting)
        clock.advance(2)
        self.assertTrue(transport.aborted)
        self.failureResultOf(d, ReplyTimeout)

    def test_pipelinedCollecting(self) -> None:
        """
        Commands sent with C{sendPipelinedCollecting} are written at once,
        without waiting for earlier replies; the untagged responses before
        each tagged reply are that command's, and a refusal fails only its
        own command.
        """
        client, transport, clock = greeted()
        first = client.sendPipelinedCollecting(b'SELECT "A"')
        second = client.sendPipelinedCollecting(b'SELECT "B"')
        third = client.sendPipelinedCollecting(b'SELECT "C"')
        self.assertEqual(
            transport.value(), b'0001 SELECT "A"\r\n0002 SELECT "B"\r\n0003 SELECT "C"\r\n'
        )
        client.dataReceived(
            b"* 3 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n0001 OK [READ-WRITE] done\r\n"
            b"0002 NO [NONEXISTENT] no such mailbox\r\n"
            b"* 0 EXISTS\r\n0003 OK done\r\n"
        )
        self.assertEqual(
            self.successResultOf(first),
            ([b"3 EXISTS", b"OK [UIDVALIDITY 7] ok"], b"[READ-WRITE] done"),
        )
        refused = self.failureResultOf(second, CommandRefused)
        self.assertEqual(refused.value.text, b"[NONEXISTENT] no such mailbox")
        self.assertEqual(self.successResultOf(third), ([b"0 EXISTS"], b"done"))

    def test_pipelinedCollectingConnectionLost(self) -> None:
        """
        A collecting command still unanswered when the connection is lost
        fails with the reason; one sent after fails at once.
        """
        client, transport, clock = greeted()
        d = client.sendPipelinedCollecting(b'SELECT "A"')
        client.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(d, ConnectionDone)
        self.failureResultOf(client.sendPipelinedCollecting(b'SELECT "B"'), ConnectionDone)

    def test_connectionLostBeforeGreeting(self) -> None:
        """
        A connection lost before the greeting fails C{greeted}.
        """
        client = MigrationIMAP4Client(Clock())
        client.makeConnection(NoDelayTransport())
        client.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(client.greeted, ConnectionDone)


class SessionTests(SynchronousTestCase):
    """
    The session facade's login and STARTTLS decisions, and error mapping.
    """

    def test_loginSASLIR(self) -> None:
        """
        With SASL-IR and AUTH=PLAIN, login is one AUTHENTICATE PLAIN command
        with the credentials base64-encoded (any octets survive).
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=PLAIN LITERAL+")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.login("alice", 'p"ss wörd'))
        token = base64.b64encode("\0alice\0p\"ss wörd".encode())
        self.assertEqual(transport.value(), b"0001 AUTHENTICATE PLAIN " + token + b"\r\n")
        transport.clear()
        client.dataReceived(b"0001 OK Logged in\r\n")
        self.assertEqual(transport.value(), b"0002 CAPABILITY\r\n")
        client.dataReceived(b"* CAPABILITY IMAP4rev1 LITERAL+ MULTIAPPEND UIDPLUS\r\n0002 OK done\r\n")
        self.successResultOf(d)
        self.assertIn(b"MULTIAPPEND", session.capabilities)

    def test_loginCapabilityCode(self) -> None:
        """
        A CAPABILITY response code in the tagged OK of the login gives the
        session its capabilities: no CAPABILITY command follows (RFC 3501
        6.2.3), a round trip saved on every connection.
        """
        client, transport, clock = greeted(b"IMAP4rev1 SASL-IR AUTH=PLAIN")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.login("alice", "pw"))
        transport.clear()
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1 literal+ MULTIAPPEND] Logged in\r\n")
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"")
        self.assertEqual(session.capabilities, {b"IMAP4REV1", b"LITERAL+", b"MULTIAPPEND"})

    def test_loginQuoted(self) -> None:
        """
        Without SASL-IR, LOGIN sends quoted strings with escapes.
        """
        client, transport, clock = greeted(b"IMAP4rev1")
        session = IMAPSession(client, "alice at test")
        Deferred.fromCoroutine(session.login("alice", 'a"b\\c'))
        self.assertEqual(transport.value(), b'0001 LOGIN "alice" "a\\"b\\\\c"\r\n')

    def test_loginRefusedHidesPassword(self) -> None:
        """
        A refused login raises AuthenticationFailed with the server's text
        and without the password.
        """
        client, transport, clock = greeted(b"IMAP4rev1")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.login("alice", "sekrit"))
        client.dataReceived(b"0001 NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        failure = self.failureResultOf(d, AuthenticationFailed)
        self.assertIn("AUTHENTICATIONFAILED", str(failure.value))
        self.assertNotIn("sekrit", str(failure.value))

    def test_startTLSRequiredButMissing(self) -> None:
        """
        starttls: required against a server without STARTTLS fails with
        TLSRequired and sends nothing in cleartext.
        """
        client, transport, clock = greeted(b"IMAP4rev1 AUTH=PLAIN")
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.startTLS(object()))
        self.failureResultOf(d, TLSRequired)
        self.assertEqual(transport.value(), b"")

    def test_commandFailedCode(self) -> None:
        """
        A NO reply becomes CommandFailed carrying the response code.
        """
        client, transport, clock = greeted()
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.create("Bad"))
        self.assertEqual(transport.value(), b'0001 CREATE "Bad"\r\n')
        client.dataReceived(b"0001 NO [CANNOT] Invalid mailbox name\r\n")
        failure = self.failureResultOf(d, CommandFailed)
        self.assertEqual(failure.value.code, "CANNOT")

    def test_selectEach(self) -> None:
        """
        C{selectEach} SELECTs every mailbox in one round trip and reads
        each one's EXISTS, UIDVALIDITY and PERMANENTFLAGS; a mailbox the
        server refuses comes back as its CommandFailed.
        """
        client, transport, clock = greeted()
        session = IMAPSession(client, "alice at test")
        d = Deferred.fromCoroutine(session.selectEach(["INBOX", "Entwürfe", "Gone"]))
        self.assertEqual(
            transport.value(),
            b'0001 SELECT "INBOX"\r\n0002 SELECT "Entw&APw-rfe"\r\n0003 SELECT "Gone"\r\n',
        )
        client.dataReceived(
            b"* FLAGS (\\Answered \\Seen $Forwarded)\r\n"
            b"* OK [PERMANENTFLAGS (\\Answered \\Seen $Forwarded \\*)] Flags permitted.\r\n"
            b"* 12 EXISTS\r\n* 0 RECENT\r\n* OK [UIDVALIDITY 1700000000] UIDs valid\r\n"
            b"* OK [UIDNEXT 13] Predicted next UID\r\n0001 OK [READ-WRITE] Select completed.\r\n"
            b"* OK [CLOSED] Previous mailbox closed.\r\n* 0 EXISTS\r\n"
            b"* OK [UIDVALIDITY 1700000001] UIDs valid\r\n0002 OK [READ-WRITE] done\r\n"
            b"0003 NO [NONEXISTENT] Mailbox doesn't exist: Gone\r\n"
        )
        states = self.successResultOf(d)
        self.assertEqual(
            states["INBOX"],
            MailboxState(
                "INBOX",
                12,
                1700000000,
                frozenset({"\\Answered", "\\Seen", "$Forwarded", "\\*"}),
                uidNext=13,
            ),
        )
        self.assertEqual(states["Entwürfe"], MailboxState("Entwürfe", 0, 1700000001, None))
        refused = states["Gone"]
        assert isinstance(refused, CommandFailed)
        self.assertEqual(refused.code, "NONEXISTENT")

    def test_parseResponseCode(self) -> None:
        """
        The response code atom is extracted and upper-cased.
        """
        self.assertEqual(parseResponseCode("[TRYCREATE] no"), "TRYCREATE")
        self.assertEqual(parseResponseCode("[appenduid 1 2] ok"), "APPENDUID")
        self.assertIsNone(parseResponseCode("no code"))


class DeadlineTests(SynchronousTestCase):
    """
    The reply deadline as the client drives it.
    """

    def test_idleConnectionNeverTimesOut(self) -> None:
        """
        With nothing owed (greeted, no command in flight) the deadline does
        not run, however long the connection stays idle.
        """
        client, transport, clock = greeted()
        self.assertEqual(clock.getDelayedCalls(), [])
        clock.advance(3600)
        self.assertFalse(transport.disconnecting)

    def test_eachReplyIsDueWithinTheTimeoutOfItsSending(self) -> None:
        """
        With several commands in flight, each reply is due within the
        timeout of its own command's sending, however many replies to
        other commands arrive meanwhile (a server dripping replies cannot
        hold a window of commands for ever); the last reply stops the
        deadline.
        """
        client, transport, clock = greeted()
        first = client.sendPipelined(b"CREATE a")
        clock.advance(10)
        second = client.sendPipelined(b"CREATE b")
        clock.advance(15)
        client.dataReceived(b"0001 OK done\r\n")
        clock.advance(14.9)
        self.assertFalse(transport.disconnecting)
        client.dataReceived(b"0002 OK done\r\n")
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(clock.getDelayedCalls(), [])

        client, transport, clock = greeted()
        first = client.sendPipelined(b"CREATE a")
        second = client.sendPipelined(b"CREATE b")
        clock.advance(25)
        client.dataReceived(b"0001 OK done\r\n")
        self.successResultOf(first)
        clock.advance(5)
        self.assertIsInstance(self.failureResultOf(second).value, ReplyTimeout)
        self.assertTrue(transport.aborted)
        self.flushLoggedErrors()

    def test_untaggedIsNotProgress(self) -> None:
        """
        Untagged responses (keep-alives, EXISTS) do not extend the
        deadline: the command fails with L{ReplyTimeout} naming it.
        """
        client, transport, clock = greeted()
        d = client.sendPipelined(b"SELECT INBOX")
        for _ in range(30):
            clock.advance(1)
            client.dataReceived(b"* OK still here\r\n* 3 EXISTS\r\n")
        error = self.failureResultOf(d, ReplyTimeout).value
        self.assertEqual(str(error), "no reply to SELECT within 30 s")
        self.assertTrue(transport.aborted)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_resumedWritesAreProgress(self) -> None:
        """
        The transport resuming a watched producer (the server read a full
        buffer of a large literal) is progress; a pause alone is owed time.
        """
        client, transport, clock = greeted()
        producer = Producer()
        transport.registerProducer(producer, True)
        client.watchWrites(producer)
        wrapper = transport.producer
        assert wrapper is not None
        d = client.sendPipelined(b"NOOP")
        for _ in range(5):
            clock.advance(20)
            wrapper.pauseProducing()
            wrapper.resumeProducing()
        self.assertEqual(producer.calls, ["pause", "resume"] * 5)
        self.assertNoResult(d)
        client.dataReceived(b"0001 OK done\r\n")
        self.successResultOf(d)
        wrapper.pauseProducing()
        clock.advance(30)
        self.assertTrue(transport.aborted)
        self.assertEqual(
            str(client.dropReason), "the server read nothing imapmig sent for 30 s"
        )

    def test_closeIsBounded(self) -> None:
        """
        C{close} closes cleanly, and aborts if the connection is not gone
        within the timeout (a server that stops reading cannot leave it
        half-closed).
        """
        client, transport, clock = greeted()
        client.close()
        self.assertTrue(transport.disconnecting)
        self.assertFalse(transport.aborted)
        clock.advance(30)
        self.assertTrue(transport.aborted)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_closeDone(self) -> None:
        """
        A connection that closes in time leaves nothing scheduled.
        """
        client, transport, clock = greeted()
        client.close()
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertFalse(transport.aborted)


@implementer(IPushProducer)
class Producer:
    """
    Records pause and resume calls.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def stopProducing(self) -> None:
        self.calls.append("stop")


class ConnectionLossTests(SynchronousTestCase):
    """
    Who ended a connection, and what pending commands fail with.
    """

    def test_describe(self) -> None:
        """
        Each way a connection ends is told apart.
        """
        self.assertEqual(
            describeConnectionLoss(ReplyTimeout("no reply to APPEND within 120 s", "APPEND", 120)),
            "imapmig dropped the connection: no reply to APPEND within 120 s",
        )
        self.assertEqual(
            describeConnectionLoss(ConnectionDone()), "the server closed the connection"
        )
        self.assertEqual(
            describeConnectionLoss(TwistedConnectionLost()),
            "the connection was reset by the server",
        )
        self.assertEqual(
            describeConnectionLoss(ConnectionAborted()), "imapmig aborted the connection"
        )
        self.assertEqual(
            describeConnectionLoss(ServerBye("Server shutting down")),
            "the server said BYE: Server shutting down",
        )

    def test_droppedReasonReplacesAbort(self) -> None:
        """
        After imapmig drops a connection, the transport's ConnectionAborted
        is reported as the reason imapmig recorded.
        """
        client, transport, clock = greeted()
        pipelined = client.sendPipelined(b"NOOP")
        client.dataReceived(b"ZZZZ OK what\r\n")
        self.failureResultOf(pipelined, ProtocolError)
        later = client.sendPipelined(b"NOOP")
        client.connectionLost(Failure(ConnectionAborted()))
        error = self.failureResultOf(later, ProtocolError).value
        self.assertIn("a reply with an unknown tag", describeConnectionLoss(error))

    def test_sharedEndingMadeOwn(self) -> None:
        """
        Twisted ends connections with shared instances
        (C{twisted.internet.main.CONNECTION_DONE}): what each connection's
        pending commands fail with is an error of its own, of the same
        class and text, so that a traceback left on it by one attempt is
        not taken on by the next.
        """
        shared = ConnectionDone("Connection done")
        errors = []
        for _ in range(2):
            client, transport, clock = greeted()
            pending = client.sendPipelined(b"NOOP")
            client.connectionLost(Failure(shared))
            errors.append(self.failureResultOf(pending, ConnectionDone).value)
        self.assertNotIn(shared, errors)
        self.assertIsNot(errors[0], errors[1])
        self.assertEqual([e.args for e in errors], [shared.args, shared.args])

    def test_serverBye(self) -> None:
        """
        A BYE outside LOGOUT fails what is pending with L{ServerBye} at
        once, and closes the connection (bounded); a BYE that asks to
        wait (C{[UNAVAILABLE]}) fails it with L{ServerBusy} instead, for
        the job to wait before it connects again.
        """
        client, transport, clock = greeted()
        d = client.sendPipelined(b"SELECT INBOX")
        client.dataReceived(b"* BYE Server shutting down\r\n")
        self.assertEqual(self.failureResultOf(d, ServerBye).value.text, "Server shutting down")
        self.assertTrue(transport.disconnecting)
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])

        client, transport, clock = greeted()
        d = client.sendPipelined(b"SELECT INBOX")
        client.dataReceived(b"* BYE [UNAVAILABLE] maintenance\r\n")
        busy = self.failureResultOf(d, ServerBusy).value
        self.assertEqual((busy.code, busy.text), ("UNAVAILABLE", "[UNAVAILABLE] maintenance"))
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_logoutByeExpected(self) -> None:
        """
        The BYE of LOGOUT is not a L{ServerBye}: logout succeeds and the
        connection is closed cleanly.
        """
        client, transport, clock = greeted()
        d = client.logout()
        client.dataReceived(b"* BYE bye\r\n0001 OK done\r\n")
        self.successResultOf(d)
        self.assertTrue(transport.disconnecting)
        self.assertFalse(transport.aborted)
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_escapedExcerpt(self) -> None:
        """
        Excerpts of peer data are at most 80 octets, non-printables
        escaped, cut ones marked.
        """
        self.assertEqual(escapedExcerpt(b"OK fine"), "OK fine")
        self.assertEqual(escapedExcerpt(b"a\\b\r\n\x00\xff\t"), "a\\\\b\\r\\n\\x00\\xff\\t")
        self.assertEqual(escapedExcerpt(b"x" * 81), "x" * 80 + "...")
        self.assertEqual(escapedExcerpt(b"\xff" * 1000), "\\xff" * 80 + "...")


class BoundsTests(SynchronousTestCase):
    """
    What a server can make the client hold.
    """

    def test_literalOutsideFetchCapped(self) -> None:
        """
        A literal in a response other than FETCH larger than
        L{MAX_RESPONSE_LENGTH} is refused when announced; one that fits is
        read.
        """
        client, transport, clock = greeted()
        d = client.sendCollecting(b"LIST", b'"" "*"')
        client.dataReceived(b'* LIST () "/" {5}\r\nINBOX\r\n')
        client.dataReceived(b'* LIST () "/" {%d}\r\n' % (MAX_RESPONSE_LENGTH + 1))
        error = self.failureResultOf(d, ProtocolError).value
        self.assertIn(f"a literal of {MAX_RESPONSE_LENGTH + 1} octets outside a FETCH", str(error))

    def test_existsKeptOnce(self) -> None:
        """
        However many EXISTS come during a SELECT, it collects the last one
        only; EXPUNGE not at all.
        """
        client, transport, clock = greeted()
        d = client.sendCollecting(b"SELECT", b"INBOX")
        client.dataReceived(
            b"* 1 EXISTS\r\n* 0 RECENT\r\n* FLAGS ()\r\n" + b"* 2 EXPUNGE\r\n* 5 EXISTS\r\n" * 1000
        )
        client.dataReceived(b"0001 OK done\r\n")
        lines, _ = self.successResultOf(d)
        self.assertEqual(lines, [b"5 EXISTS", b"0 RECENT", b"FLAGS ()"])
