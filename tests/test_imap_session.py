"""
Tests for L{imapmig.imap.session.IMAPSession} and the rooms it asks
(L{imapmig.imap.opening}, L{imapmig.imap.errormap},
L{imapmig.imap.listing}, L{imapmig.imap.batches}), driven over a
L{StringTransport} with a L{Clock}: the exact commands written, and what
the replies become.
"""

from __future__ import annotations

from typing import Any, Coroutine, TypeVar, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError, DNSLookupError
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from imapmig.errors import (
    CommandFailed,
    ConnectFailed,
    ConnectionLost,
    CredentialsRefused,
    LeaseLost,
    ServerBusy,
)
from imapmig.imap.auth import PasswordLogin
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.mailboxes import ExaminedMailbox, ListedMailbox, SelectedMailbox
from imapmig.imap.opening import openSession
from imapmig.imap.outgoing import LiteralMode, SendDeadline
from imapmig.imap.session import IMAPSession
from tests.test_imap_client import NoDelayTransport, greeted
from tests.test_imap_pipeline import RecordingOutcomes

T = TypeVar("T")


def started(coroutine: Coroutine[Any, Any, T]) -> Deferred[T]:
    """
    C{coroutine} running: what it writes is on the transport at once.
    """
    return Deferred.fromCoroutine(coroutine)


def session(caps: bytes = b"IMAP4rev1 LITERAL+") -> tuple[IMAPSession, NoDelayTransport]:
    """
    A session on a greeted connection whose capabilities are C{caps}, its
    transport cleared.
    """
    client, transport, clock = greeted(caps)
    result = IMAPSession(client, "alice at test")
    result.capabilities = frozenset(caps.upper().split())
    transport.clear()
    return result, transport


def logged(testCase: SynchronousTestCase) -> list[dict[str, Any]]:
    """
    Every event logged from now on, until C{testCase} ends.
    """
    events: list[dict[str, Any]] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    testCase.addCleanup(globalLogPublisher.removeObserver, observer)
    return events


def warned(events: list[dict[str, Any]]) -> list[str]:
    """
    The text of each warning among C{events}.
    """
    return [formatEvent(e) for e in events if e.get("log_level") is LogLevel.warn]


@implementer(IStreamClientEndpoint)
class HeldEndpoint:
    """
    An endpoint whose connection attempt the test ends: C{connected} (a
    transport made for the protocol), or C{attempt.errback(...)}.
    """

    def __init__(self) -> None:
        self.attempt: Deferred[IProtocol] = Deferred()
        self.transport = NoDelayTransport()

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        self.factory = protocolFactory
        return self.attempt

    def made(self) -> MigrationIMAP4Client:
        """
        The connection is made.
        """
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "192.0.2.1", 143))
        assert isinstance(protocol, MigrationIMAP4Client)
        protocol.makeConnection(self.transport)
        self.attempt.callback(protocol)
        return protocol

    def connected(self, greeting: bytes) -> MigrationIMAP4Client:
        """
        The connection is made and the server says C{greeting}.
        """
        protocol = self.made()
        protocol.dataReceived(greeting)
        return protocol


def opening(
    endpoint: HeldEndpoint, clock: Clock, **kwargs: Any
) -> Deferred[IMAPSession]:
    """
    L{openSession} through C{endpoint}, with a 10-second timeout, no TLS.
    """
    options: dict[str, Any] = dict(
        description="alice at tcp:mail.test:143",
        credentials=PasswordLogin("alice", "sekrit"),
        starttls=False,
        tlsOptions=None,
        timeout=10,
    )
    options.update(kwargs)
    return started(openSession(endpoint, clock, **options))


class OpenSessionTests(SynchronousTestCase):
    """
    L{openSession} connects, logs in and compresses, each step bounded,
    and closes what it opened when a step fails.
    """

    def test_noConnectionInTime(self) -> None:
        """
        A connection not made within the timeout is a L{ConnectFailed}
        saying so and naming the endpoint's key.
        """
        clock = Clock()
        endpoint = HeldEndpoint()
        d = opening(endpoint, clock, endpointKey="servers.old.endpoint")
        clock.advance(9.9)
        self.assertNoResult(d)
        clock.advance(0.1)
        error = self.failureResultOf(d, ConnectFailed).value
        self.assertEqual(error.why, "no connection within 10 s")
        self.assertEqual(error.setting, "servers.old.endpoint")
        self.assertEqual(
            str(error), "alice at tcp:mail.test:143: cannot connect: no connection within 10 s"
        )
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_whyNoConnection(self) -> None:
        """
        A refused connection and an unknown host are said in a few words.
        """
        for error, why in (
            (ConnectionRefusedError(), "connection refused"),
            (DNSLookupError("mail.test"), "host not found: mail.test"),
        ):
            clock = Clock()
            endpoint = HeldEndpoint()
            d = opening(endpoint, clock)
            endpoint.attempt.errback(error)
            self.assertEqual(self.failureResultOf(d, ConnectFailed).value.why, why)
            self.assertEqual(clock.getDelayedCalls(), [])

    def test_logsIn(self) -> None:
        """
        After the greeting the session logs in (AUTHENTICATE PLAIN with
        SASL-IR), takes the capabilities of the tagged OK, and turns on
        no compression the server does not offer.
        """
        clock = Clock()
        endpoint = HeldEndpoint()
        d = opening(endpoint, clock, compress=True)
        client = endpoint.connected(b"* OK [CAPABILITY IMAP4rev1 SASL-IR AUTH=PLAIN] hi\r\n")
        self.assertEqual(
            endpoint.transport.value(), b"0001 AUTHENTICATE PLAIN AGFsaWNlAHNla3JpdA==\r\n"
        )
        self.assertNoResult(d)
        client.dataReceived(b"0001 OK [CAPABILITY IMAP4rev1 MULTIAPPEND] Logged in\r\n")
        opened = self.successResultOf(d)
        self.assertEqual(opened.capabilities, {b"IMAP4REV1", b"MULTIAPPEND"})
        self.assertEqual(opened.description, "alice at tcp:mail.test:143")
        self.assertIs(opened.client, client)
        self.assertTrue(endpoint.transport.noDelay)

    def test_withoutLogin(self) -> None:
        """
        C{logIn=False} stops after the greeting: nothing is written.
        """
        endpoint = HeldEndpoint()
        d = opening(endpoint, Clock(), logIn=False)
        endpoint.connected(b"* OK [CAPABILITY IMAP4rev1 SASL-IR AUTH=PLAIN] hi\r\n")
        self.successResultOf(d)
        self.assertEqual(endpoint.transport.value(), b"")

    def test_refusedLoginClosesFirst(self) -> None:
        """
        A refused login names the credential's key, and is raised only once
        the aborted connection is closed, never before.
        """
        clock = Clock()
        endpoint = HeldEndpoint()
        d = opening(endpoint, clock, credentialKey="jobs[0].destination.password_file")
        client = endpoint.connected(b"* OK [CAPABILITY IMAP4rev1 SASL-IR AUTH=PLAIN] hi\r\n")
        client.dataReceived(b"0001 NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        self.assertTrue(endpoint.transport.aborted)
        self.assertNoResult(d)
        client.connectionLost(Failure(ConnectionDone()))
        error = self.failureResultOf(d, CredentialsRefused).value
        self.assertEqual(
            str(error),
            "alice at tcp:mail.test:143: login refused: [AUTHENTICATIONFAILED] Authentication"
            " failed. (the credential is jobs[0].destination.password_file)",
        )
        self.assertNotIn("sekrit", str(error))

    def test_unclosedAbortBounded(self) -> None:
        """
        A connection that does not close after the abort holds the failure
        back for the timeout at most, with one warning.
        """
        clock = Clock()
        endpoint = HeldEndpoint()
        events = logged(self)
        d = opening(endpoint, clock)
        client = endpoint.connected(b"* OK [CAPABILITY IMAP4rev1 SASL-IR AUTH=PLAIN] hi\r\n")
        client.dataReceived(b"0001 NO [UNAVAILABLE] Temporary authentication failure\r\n")
        clock.advance(9)
        self.assertNoResult(d)
        clock.advance(1)
        self.failureResultOf(d, ServerBusy)
        self.assertEqual(
            warned(events),
            [
                "alice at tcp:mail.test:143: the aborted connection did not close within 10 s"
            ],
        )

    def test_lostConnectionRetold(self) -> None:
        """
        A connection lost before the greeting is a L{ConnectionLost} whose
        text names the session first, then the step it interrupted.
        """
        endpoint = HeldEndpoint()
        d = opening(endpoint, Clock())
        endpoint.made().connectionLost(Failure(ConnectionDone()))
        text = str(self.failureResultOf(d, ConnectionLost).value)
        self.assertTrue(text.startswith("alice at tcp:mail.test:143: greeting: "), text)


class MailboxTests(SynchronousTestCase):
    """
    SELECT, EXAMINE and the pipelined mailbox batches: the commands
    written and what their replies become.
    """

    def test_select(self) -> None:
        """
        C{select} reads EXISTS, UIDVALIDITY and PERMANENTFLAGS (sorted).
        """
        imap, transport = session()
        d = started(imap.select("Entwürfe"))
        self.assertEqual(transport.value(), b'0001 SELECT "Entw&APw-rfe"\r\n')
        imap.client.dataReceived(
            b"* 3 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n"
            b"* OK [PERMANENTFLAGS (\\Seen \\Answered)] ok\r\n0001 OK done\r\n"
        )
        self.assertEqual(
            self.successResultOf(d),
            SelectedMailbox("Entwürfe", 7, 3, ("\\Answered", "\\Seen")),
        )

    def test_examineCondstore(self) -> None:
        """
        C{examine} asks CONDSTORE where the server has it, names the
        mailbox as the server listed it, and reads HIGHESTMODSEQ.
        """
        imap, transport = session(b"IMAP4rev1 CONDSTORE")
        d = started(imap.examine("a\"b", wireName=b'a"b'))
        self.assertEqual(transport.value(), b'0001 EXAMINE "a\\"b" (CONDSTORE)\r\n')
        imap.client.dataReceived(
            b"* 2 EXISTS\r\n* OK [UIDNEXT 9] x\r\n* OK [HIGHESTMODSEQ 55] x\r\n"
            b"* OK [UIDVALIDITY 4] x\r\n0001 OK [READ-ONLY] done\r\n"
        )
        self.assertEqual(self.successResultOf(d), ExaminedMailbox('a"b', 2, 4, 9, 55))

    def test_examinePlain(self) -> None:
        """
        Without CONDSTORE, EXAMINE has no parameter and no HIGHESTMODSEQ
        is read.
        """
        imap, transport = session()
        d = started(imap.examine("INBOX"))
        self.assertEqual(transport.value(), b'0001 EXAMINE "INBOX"\r\n')
        imap.client.dataReceived(b"* 0 EXISTS\r\n0001 OK done\r\n")
        self.assertEqual(self.successResultOf(d), ExaminedMailbox("INBOX", 0, None, None, None))

    def test_createMailboxesWithUse(self) -> None:
        """
        Every CREATE (with its special use, under CREATE-SPECIAL-USE), then
        the SUBSCRIBEs asked for, leave in one write; a refused CREATE is
        returned, and the SUBSCRIBE of a mailbox not created is not also
        logged; another refused SUBSCRIBE is.
        """
        imap, transport = session(b"IMAP4rev1 CREATE-SPECIAL-USE")
        events = logged(self)
        d = started(
            imap.createMailboxes(
                ["Sent", "Bad", "Other"], uses={"Sent": "\\Sent"}, subscribe={"Sent", "Bad"}
            )
        )
        self.assertEqual(
            transport.value(),
            b'0001 CREATE "Sent" (USE (\\Sent))\r\n0002 CREATE "Bad"\r\n0003 CREATE "Other"\r\n'
            b'0004 SUBSCRIBE "Sent"\r\n0005 SUBSCRIBE "Bad"\r\n',
        )
        imap.client.dataReceived(
            b"0001 OK\r\n0002 NO [CANNOT] bad name\r\n0003 OK\r\n"
            b"0004 NO no subscriptions here\r\n0005 NO [NONEXISTENT] no\r\n"
        )
        self.assertEqual(self.successResultOf(d), {"Bad": "[CANNOT] bad name"})
        self.assertEqual(
            warned(events),
            ["alice at test: cannot subscribe to 'Sent': no subscriptions here"],
        )

    def test_createWithoutSpecialUse(self) -> None:
        """
        Without CREATE-SPECIAL-USE no use is asked for; every mailbox is
        subscribed by default.
        """
        imap, transport = session()
        started(imap.createMailboxes(["Sent"], uses={"Sent": "\\Sent"}))
        self.assertEqual(transport.value(), b'0001 CREATE "Sent"\r\n0002 SUBSCRIBE "Sent"\r\n')

    def test_storeFlagsCounted(self) -> None:
        """
        C{storeFlags} SELECTs, then sets each message's flags exactly,
        pipelined; it counts what the server accepted and logs a refusal.
        """
        imap, transport = session()
        events = logged(self)
        d = started(imap.storeFlags("INBOX", [(4, ("\\Seen",)), (5, ("\\Flagged", "$Work"))]))
        imap.client.dataReceived(b"0001 OK selected\r\n")
        self.assertEqual(
            transport.value(),
            b'0001 SELECT "INBOX"\r\n0002 UID STORE 4 FLAGS.SILENT (\\Seen)\r\n'
            b"0003 UID STORE 5 FLAGS.SILENT (\\Flagged $Work)\r\n",
        )
        imap.client.dataReceived(b"0002 OK\r\n0003 NO read-only\r\n")
        self.assertEqual(self.successResultOf(d), 1)
        self.assertEqual(
            warned(events), ["alice at test: cannot set the flags of UID 5 in 'INBOX': read-only"]
        )

    def test_storeFlagsPastTheDeadline(self) -> None:
        """
        Given a send deadline that passes while the SELECT is answered (a
        reactor waking late from a stall), C{storeFlags} writes no
        C{UID STORE}: it fails with L{LeaseLost}, nothing stored.
        """
        imap, transport = session()
        clock = Clock()
        deadline = SendDeadline(clock.seconds, 45.0)
        d = started(imap.storeFlags("INBOX", [(4, ("\\Seen",))], deadline))
        self.assertEqual(transport.value(), b'0001 SELECT "INBOX"\r\n')
        clock.advance(50)
        imap.client.dataReceived(b"0001 OK selected\r\n")
        self.assertEqual(transport.value(), b'0001 SELECT "INBOX"\r\n')
        self.assertIn("send deadline", str(self.failureResultOf(d, LeaseLost).value))

    def test_storeFlagsBeforeTheDeadline(self) -> None:
        """
        Before the deadline, the C{UID STORE}s go as without one.
        """
        imap, transport = session()
        clock = Clock()
        d = started(imap.storeFlags("INBOX", [(4, ())], SendDeadline(clock.seconds, 45.0)))
        imap.client.dataReceived(b"0001 OK selected\r\n")
        self.assertEqual(
            transport.value(), b'0001 SELECT "INBOX"\r\n0002 UID STORE 4 FLAGS.SILENT ()\r\n'
        )
        imap.client.dataReceived(b"0002 OK\r\n")
        self.assertEqual(self.successResultOf(d), 1)

    def test_refusalMapped(self) -> None:
        """
        A C{BAD} keeps its status; the response code is read.
        """
        imap, transport = session()
        d = started(imap.subscribe("X"))
        imap.client.dataReceived(b"0001 BAD [CLIENTBUG] what\r\n")
        error = self.failureResultOf(d, CommandFailed).value
        self.assertEqual(
            (error.command, error.status, error.code), ("SUBSCRIBE", "BAD", "CLIENTBUG")
        )

    def test_lostConnectionNamesCommand(self) -> None:
        """
        A connection lost while a command waits is a L{ConnectionLost}
        naming that command.
        """
        imap, transport = session()
        d = started(imap.select("INBOX"))
        imap.client.connectionLost(Failure(ConnectionDone()))
        text = str(self.failureResultOf(d, ConnectionLost).value)
        self.assertTrue(text.startswith("SELECT: "), text)


class ListingTests(SynchronousTestCase):
    """
    LIST, LSUB and the hierarchy delimiter.
    """

    def test_listExtended(self) -> None:
        """
        With LIST-EXTENDED and SPECIAL-USE, one LIST returns subscriptions
        and special uses; other untagged responses (an XLIST among them) are
        left out.
        """
        imap, transport = session(b"IMAP4rev1 LIST-EXTENDED SPECIAL-USE")
        d = started(imap.listFolders())
        self.assertEqual(
            transport.value(), b'0001 LIST "" "*" RETURN (SUBSCRIBED SPECIAL-USE)\r\n'
        )
        imap.client.dataReceived(
            b'* LIST (\\HasNoChildren \\Subscribed \\Sent) "/" "Sent"\r\n'
            b'* LIST (\\Noselect) "/" "Archiv&APw-"\r\n'
            b'* XLIST (\\HasNoChildren) "/" "Stray"\r\n* 4 EXISTS\r\n0001 OK done\r\n'
        )
        self.assertEqual(
            self.successResultOf(d),
            [
                ListedMailbox(
                    "Sent", b"Sent", "/", ("\\HasNoChildren", "\\Subscribed", "\\Sent"), True
                ),
                ListedMailbox("Archivü", b"Archiv&APw-", "/", ("\\Noselect",), False),
            ],
        )

    def test_listAndLsub(self) -> None:
        """
        Without LIST-EXTENDED, LIST and then LSUB: a mailbox LSUB names is
        subscribed; C{inbox} in any case is C{INBOX}.
        """
        imap, transport = session()
        d = started(imap.listFolders())
        self.assertEqual(transport.value(), b'0001 LIST "" "*"\r\n')
        imap.client.dataReceived(
            b'* LIST () "." "inbox"\r\n* LIST () NIL "Flat"\r\n0001 OK done\r\n'
        )
        self.assertEqual(transport.value(), b'0001 LIST "" "*"\r\n0002 LSUB "" "*"\r\n')
        imap.client.dataReceived(b'* LSUB () "." "INBOX"\r\n0002 OK done\r\n')
        self.assertEqual(
            [(m.name, m.delimiter, m.subscribed) for m in self.successResultOf(d)],
            [("INBOX", ".", True), ("Flat", None, False)],
        )

    def test_hierarchyDelimiter(self) -> None:
        """
        The delimiter is read from C{LIST "" ""}; a flat server gives
        L{None}.
        """
        for reply, delimiter in (
            (b'* LIST (\\Noselect) "/" ""\r\n', "/"),
            (b'* LIST () NIL ""\r\n', None),
        ):
            imap, transport = session()
            d = started(imap.hierarchyDelimiter())
            self.assertEqual(transport.value(), b'0001 LIST "" ""\r\n')
            imap.client.dataReceived(reply + b"0001 OK done\r\n")
            self.assertEqual(self.successResultOf(d), delimiter)


class FetchTests(SynchronousTestCase):
    """
    Message listings and bodies.
    """

    def test_metadataMerged(self) -> None:
        """
        An unsolicited FETCH for a message is merged into its response
        (the later items winning), responses without UID are left out, and
        the result is by ascending UID.
        """
        imap, transport = session()
        d = started(imap.fetchMetadata(b"1:*", changedSince=12))
        self.assertEqual(
            transport.value(),
            b"0001 UID FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE) (CHANGEDSINCE 12)\r\n",
        )
        imap.client.dataReceived(
            b"* 2 FETCH (UID 9 FLAGS () RFC822.SIZE 30)\r\n"
            b"* 1 FETCH (UID 4 FLAGS (\\Seen) RFC822.SIZE 10)\r\n"
            b"* 2 FETCH (UID 9 FLAGS (\\Flagged))\r\n"
            b"* 3 FETCH (FLAGS (\\Seen))\r\n0001 OK done\r\n"
        )
        items = self.successResultOf(d)
        self.assertEqual(
            [(i.uid, i.flags, i.size) for i in items],
            [(4, ("\\Seen",), 10), (9, ("\\Flagged",), 30)],
        )

    def test_bodiesPerSet(self) -> None:
        """
        One pipelined UID FETCH per set; only the bodies asked for are
        kept, and each set's refusal comes back in order.
        """
        imap, transport = session()
        d = started(imap.fetchBodies([[1, 2], [7]]))
        self.assertEqual(
            transport.value(),
            b"0001 UID FETCH 1:2 (UID BODY.PEEK[])\r\n0002 UID FETCH 7 (UID BODY.PEEK[])\r\n",
        )
        imap.client.dataReceived(
            b"* 1 FETCH (UID 1 BODY[] {2}\r\nhi)\r\n* 5 FETCH (UID 5 BODY[] {2}\r\nno)\r\n"
            b"0001 OK done\r\n0002 NO [EXPUNGEISSUED] gone\r\n"
        )
        fetched = self.successResultOf(d)
        self.assertEqual(fetched.bodies, {1: b"hi"})
        self.assertIsNone(fetched.refusals[0])
        refusal = fetched.refusals[1]
        assert refusal is not None
        self.assertEqual(refusal.code, "EXPUNGEISSUED")


class LifecycleTests(SynchronousTestCase):
    """
    The APPEND pipeline the session keeps, compression, and the goodbye.
    """

    def test_onePipeline(self) -> None:
        """
        The session's APPEND pipeline is set up once, for the server's
        capabilities (MULTIAPPEND batches, LITERAL+).
        """
        imap, transport = session(b"IMAP4rev1 LITERAL+ MULTIAPPEND")
        outcomes = RecordingOutcomes()
        pipeline = imap.appendPipeline(50, 10_000, 200, 100_000, outcomes)
        self.assertIs(imap.appendPipeline(1, 1, 1, 1, outcomes), pipeline)
        self.assertEqual(pipeline.settings.batchMessages, 50)
        self.assertIs(pipeline.settings.literalMode, LiteralMode.PLUS)
        other, _ = session(b"IMAP4rev1")
        settings = other.appendPipeline(50, 10_000, 200, 100_000, outcomes).settings
        self.assertEqual((settings.batchMessages, settings.literalMode), (1, LiteralMode.SYNC))

    def test_logoutClosesPipeline(self) -> None:
        """
        Logging out closes the pipeline (the client has none afterwards),
        says LOGOUT and closes the connection once it is answered.
        """
        imap, transport = session()
        imap.appendPipeline(1, 1000, 1, 1000, RecordingOutcomes())
        d = started(imap.logout())
        self.assertIsNone(imap.client.pipeline)
        self.assertEqual(transport.value(), b"0001 LOGOUT\r\n")
        imap.client.dataReceived(b"* BYE bye\r\n0001 OK done\r\n")
        self.successResultOf(d)
        self.assertTrue(transport.disconnecting)

    def test_logoutIgnoresErrors(self) -> None:
        """
        A LOGOUT the server refuses still ends the session.
        """
        imap, transport = session()
        d = started(imap.logout())
        imap.client.dataReceived(b"0001 BAD no\r\n")
        self.successResultOf(d)
        self.assertTrue(transport.disconnecting)

    def test_compressionRefused(self) -> None:
        """
        A refused COMPRESS leaves the connection as it was, with one
        warning; where the server does not offer it nothing is sent.
        """
        imap, transport = session(b"IMAP4rev1 COMPRESS=DEFLATE")
        events = logged(self)
        d = started(imap.startCompression())
        self.assertEqual(transport.value(), b"0001 COMPRESS DEFLATE\r\n")
        imap.client.dataReceived(b"0001 NO not now\r\n")
        self.assertFalse(self.successResultOf(d))
        self.assertIsNone(imap.compressionStats())
        self.assertEqual(
            warned(events), ["alice at test: the server refused COMPRESS DEFLATE: not now"]
        )
        plain, plainTransport = session()
        self.assertFalse(self.successResultOf(started(plain.startCompression())))
        self.assertEqual(plainTransport.value(), b"")

    def test_knowsNamespaces(self) -> None:
        """
        The session knows namespaces where the server offers NAMESPACE or
        the configuration names one.
        """
        imap, _ = session(b"IMAP4rev1 NAMESPACE")
        self.assertTrue(imap.knowsNamespaces)
        imap, _ = session()
        self.assertFalse(imap.knowsNamespaces)

    def test_abort(self) -> None:
        """
        C{abort} drops the connection; what waits fails with the reason.
        """
        imap, transport = session()
        d = started(imap.select("INBOX"))
        imap.abort("the job was cancelled")
        self.assertTrue(transport.aborted)
        self.assertIn("the job was cancelled", str(self.failureResultOf(d, ConnectionLost).value))
