"""
The client against L{imapmig.testing.hostile}: each misbehaviour of a
server ends in a clean failure (the right error class and text, one log
line naming the server, no traceback, the connection aborted) within
bounded memory; and over real loopback sockets, an aborted connection is
really closed on both sides.
"""

from __future__ import annotations

import tracemalloc
from typing import Any, Sequence, cast

from twisted.internet import reactor as globalReactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent, globalLogPublisher
from twisted.test.iosim import FakeTransport, IOPump, connect
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.errors import (
    AuthenticationFailed,
    ConnectionLost,
    ProtocolError,
    ReplyTimeout,
    ServerBusy,
    ServerBye,
)
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.connection import MAX_LINE_LENGTH
from imapmig.imap.commands import MAX_COLLECTED_RESPONSES
from imapmig.imap.outgoing import LiteralMode, OutgoingMessage, PipelineSettings
from imapmig.imap.pipeline import AppendPipeline
from imapmig.imap.session import IMAPSession
from imapmig.testing.hostile import (
    DEFAULT_GREETING,
    After,
    Drip,
    HostileIMAPServer,
    Reply,
    Send,
    Stall,
    Step,
    Stream,
)

SERVER = "alice at hostile"


class RecordingTransport(FakeTransport):
    """
    An iosim transport that tells an abort from a clean close.
    """

    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        FakeTransport.abortConnection(self)


class Outcomes:
    """
    Records what an APPEND pipeline reports.
    """

    def __init__(self) -> None:
        self.appended: list[object] = []
        self.refused: list[tuple[object, str]] = []

    def messagesAppended(
        self, messages: Sequence[OutgoingMessage], v: int | None, u: Sequence[int] | None
    ) -> None:
        self.appended.extend(message.origin for message in messages)

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        self.refused.append((message.origin, reason))


class Hostile:
    """
    A client and a session, timeout 10 s, wired to a L{HostileIMAPServer}
    over iosim, with the client's log events recorded.
    """

    def __init__(
        self,
        case: SynchronousTestCase,
        script: dict[str, Step] | None = None,
        greeting: Step | None = None,
        logFields: dict[str, object] | None = None,
    ) -> None:
        self.clock = Clock()
        self.server = HostileIMAPServer(self.clock, script, greeting)
        self.client = MigrationIMAP4Client(self.clock, 10, peer=SERVER, logFields=logFields)
        self.clientTransport = RecordingTransport(self.client, isServer=False)
        self.session = IMAPSession(self.client, SERVER)
        self.events: list[LogEvent] = []
        observer = cast(ILogObserver, self._observe)
        globalLogPublisher.addObserver(observer)
        case.addCleanup(globalLogPublisher.removeObserver, observer)
        self.pump: IOPump = connect(
            self.server,
            FakeTransport(self.server, isServer=True),
            self.client,
            self.clientTransport,
            greet=False,
            clock=self.clock,
        )
        self.flush()

    def _observe(self, event: LogEvent) -> None:
        if event.get("log_namespace", "").startswith("imapmig.imap"):
            self.events.append(event)

    def flush(self, rounds: int = 100_000) -> None:
        """
        Move data both ways until nothing moves (a pull producer writes a
        chunk per round).
        """
        for _ in range(rounds):
            if not self.pump.pump():
                return
        raise AssertionError("still moving")

    def run(self, coroutine: Any) -> Deferred[Any]:
        d: Deferred[Any] = Deferred.fromCoroutine(coroutine)
        self.flush()
        return d

    def logged(self, level: LogLevel) -> list[str]:
        return [formatEvent(e) for e in self.events if e["log_level"] is level]


class HostileServerTests(SynchronousTestCase):
    """
    One test per misbehaviour.
    """

    def assertCleanFailure(self, hostile: Hostile, expected: str) -> None:
        """
        One error line naming the server and saying C{expected}, the
        connection aborted and gone, no traceback, no delayed call left.
        """
        errors = hostile.logged(LogLevel.error)
        self.assertEqual(len(errors), 1, errors)
        self.assertTrue(errors[0].startswith(SERVER + ": "), errors[0])
        self.assertIn(expected, errors[0])
        # At most 80 octets of excerpt, each at most 4 characters escaped.
        self.assertLess(len(errors[0]), 500)
        self.assertTrue(hostile.clientTransport.aborted)
        self.assertTrue(hostile.client.closed.called)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(hostile.clock.getDelayedCalls(), [])

    def test_normal(self) -> None:
        """
        Without a script the server behaves: login, listing, logout, with
        nothing logged at error level.
        """
        hostile = Hostile(self)
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        folders = self.successResultOf(hostile.run(hostile.session.listFolders()))
        self.assertEqual([f.name for f in folders], ["INBOX"])
        self.successResultOf(hostile.run(hostile.session.logout()))
        self.assertTrue(hostile.client.closed.called)
        self.assertFalse(hostile.clientTransport.aborted)
        self.assertEqual(hostile.logged(LogLevel.error), [])
        self.assertEqual(hostile.clock.getDelayedCalls(), [])

    def test_hugeLiteralAnnounced(self) -> None:
        """
        A literal of C{{99999999999}} outside a FETCH response is refused
        when announced: nothing of it is read or kept.
        """
        hostile = Hostile(
            self,
            {"LIST": Stream(b'* LIST () "/" {99999999999}\r\n', b"x" * 1024, 1024 * 1024)},
        )
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        error = self.failureResultOf(
            hostile.run(hostile.session.listFolders()), ProtocolError
        ).value
        self.assertIn("a literal of 99999999999 octets outside a FETCH response", str(error))
        self.assertIn("imapmig dropped the connection", str(error))
        self.assertCleanFailure(hostile, "protocol error: a literal of 99999999999 octets")

    def test_overlongLine(self) -> None:
        """
        A line of 100 MB without CRLF is refused as soon as it passes
        L{MAX_LINE_LENGTH}: a few MB read, little memory used.
        """
        hostile = Hostile(self, {"LIST": Stream(b"* LIST ", b"a" * 4096, 25_600)})
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        tracemalloc.start()
        try:
            d = hostile.run(hostile.session.listFolders())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        error = self.failureResultOf(d, ProtocolError).value
        self.assertEqual(error.what, f"a line longer than {MAX_LINE_LENGTH} octets")
        self.assertEqual(error.excerpt, "* LIST " + "a" * 73 + "...")
        self.assertLess(peak, 4 * MAX_LINE_LENGTH)
        self.assertCleanFailure(hostile, "a line longer than")

    def test_garbage(self) -> None:
        """
        Binary garbage instead of a reply: one line with a short escaped
        excerpt, never the binary itself.
        """
        garbage = b"\x00\xff\x1b[31m" + bytes(range(256)) * 4 + b"\r\n"
        hostile = Hostile(self, {"AUTHENTICATE": Send(garbage)})
        failure = self.failureResultOf(
            hostile.run(hostile.session.login("alice", "pw")), ProtocolError
        )
        self.assertEqual(failure.value.what, "a tagged reply that is not OK, NO or BAD")
        self.assertTrue(failure.value.excerpt.startswith("\\x00\\xff\\x1b[31m\\x00\\x01"))
        self.assertCleanFailure(hostile, "\\x00\\xff\\x1b[31m")
        self.assertTrue(all(e.isprintable() for e in hostile.logged(LogLevel.error)))

    def test_unknownTag(self) -> None:
        """
        A reply with a tag never sent fails every pending command.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Send(b"ZZZZ OK welcome\r\n")})
        failure = self.failureResultOf(
            hostile.run(hostile.session.login("alice", "pw")), ProtocolError
        )
        self.assertIn("a reply with an unknown tag: ZZZZ OK welcome", str(failure.value))
        self.assertCleanFailure(hostile, "a reply with an unknown tag: ZZZZ OK welcome")

    def test_continuationNobodyAskedFor(self) -> None:
        """
        A continuation request while no literal waits for one.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Send(b"+ go on\r\n")})
        self.failureResultOf(hostile.run(hostile.session.login("alice", "pw")), ProtocolError)
        self.assertCleanFailure(hostile, "a continuation request nobody asked for: + go on")

    def test_greetingGarbage(self) -> None:
        """
        A greeting that is neither OK, PREAUTH nor BYE.
        """
        hostile = Hostile(self, greeting=Send(b"* HELLO there\r\n"))
        self.failureResultOf(hostile.client.greeted, ProtocolError)
        self.assertCleanFailure(hostile, "a greeting that is not OK, PREAUTH or BYE")

    def test_greetingBye(self) -> None:
        """
        A server that greets with BYE is not an error of the protocol: the
        greeting fails with L{ServerBye} carrying its text (L{ServerBusy}
        when it says there are too many connections: a job waits, then
        tries again), nothing is logged at error level.
        """
        hostile = Hostile(self, greeting=Send(b"* BYE Too many connections\r\n", close=True))
        bye = self.failureResultOf(hostile.client.greeted, ServerBusy).value
        self.assertEqual(bye.text, "Too many connections")
        self.assertEqual(hostile.logged(LogLevel.error), [])
        self.assertTrue(hostile.client.closed.called)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(hostile.clock.getDelayedCalls(), [])

    def test_byeMidAppend(self) -> None:
        """
        BYE in the middle of an APPEND: the pipeline fails saying the
        server said BYE, with its text; one warning, no error line.
        """
        hostile = Hostile(
            self, {"APPEND": After(2, Send(b"* BYE Server shutting down\r\n", True, True))}
        )
        outcomes = Outcomes()
        pipeline = AppendPipeline(
            hostile.client, PipelineSettings(LiteralMode.PLUS, 1, 1 << 20, 1, 1 << 20), outcomes
        )
        pipeline.selectMailbox("INBOX")
        pipeline.enqueue(
            [OutgoingMessage(b"Subject: %d\r\n\r\nhi\r\n" % i, b"", i) for i in range(5)]
        )
        drained = pipeline.drained()
        hostile.flush()
        error = self.failureResultOf(drained, ConnectionLost).value
        self.assertIn("the server ended the connection: BYE Server shutting down", str(error))
        self.assertEqual(outcomes.appended, [0, 1])
        self.assertEqual(hostile.logged(LogLevel.error), [])
        self.assertEqual(
            hostile.logged(LogLevel.warn), [SERVER + " says BYE: Server shutting down"]
        )
        self.assertTrue(hostile.client.closed.called)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(hostile.clock.getDelayedCalls(), [])

    def test_eventsNameTheJob(self) -> None:
        """
        Given log fields (the job the connection works for), every event
        the client, its pipeline and its session log carries them: a BYE
        in the middle of an APPEND, a NO the pipeline reports, an
        unreadable LIST row.
        """
        hostile = Hostile(
            self,
            {
                "LIST": Send(b'* LIST () "/" INBOX\r\n* LIST (((\r\n{tag} OK done\r\n'),
                "APPEND": After(1, Send(b"* BYE Server shutting down\r\n", True, True)),
            },
            logFields={"job": "alice"},
        )
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        hostile.run(hostile.session.listFolders())
        pipeline = AppendPipeline(
            hostile.client,
            PipelineSettings(LiteralMode.PLUS, 1, 1 << 20, 1, 1 << 20),
            Outcomes(),
        )
        pipeline.selectMailbox("INBOX")
        pipeline.enqueue(
            [OutgoingMessage(b"Subject: %d\r\n\r\nhi\r\n" % i, b"", i) for i in range(5)]
        )
        drained = pipeline.drained()
        pipeline.untaggedReceived(b"NO [ALERT] quota nearly full")
        hostile.flush()
        self.failureResultOf(drained, ConnectionLost)
        namespaces = {e["log_namespace"].split(".")[2] for e in hostile.events}
        logged = [formatEvent(e) for e in hostile.events]
        self.assertEqual(namespaces, {"client", "pipeline", "session"}, logged)
        self.assertEqual({e.get("job") for e in hostile.events}, {"alice"})

    def test_dripGreeting(self) -> None:
        """
        A greeting dripped an octet a second does not extend the deadline:
        the connection is dropped 10 s after it opened.
        """
        hostile = Hostile(self, greeting=Drip(DEFAULT_GREETING))
        for _ in range(10):
            hostile.clock.advance(1)
            hostile.flush()
        error = self.failureResultOf(hostile.client.greeted, ReplyTimeout).value
        self.assertEqual((error.awaited, error.seconds), ("the greeting", 10))
        self.assertEqual(str(error), "no greeting within 10 s")
        self.assertCleanFailure(hostile, "no greeting within 10 s; imapmig is dropping")

    def test_dripReply(self) -> None:
        """
        A reply dripped an octet a second: dropped 10 s after the command.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Drip(b"{tag} OK " + b"x" * 100 + b"\r\n")})
        d = hostile.run(hostile.session.login("alice", "pw"))
        for _ in range(10):
            self.assertNoResult(d)
            hostile.clock.advance(1)
            hostile.flush()
        error = self.failureResultOf(d, ReplyTimeout).value
        self.assertEqual(error.awaited, "AUTHENTICATE")
        self.assertIn("LOGIN: imapmig dropped the connection: no reply to AUTHENTICATE", str(error))
        self.assertCleanFailure(hostile, "no reply to AUTHENTICATE within 10 s")

    def test_existsFloodDuringSelect(self) -> None:
        """
        200,000 untagged EXISTS while a SELECT is answered (kept, they would
        take some 10 MB): the SELECT succeeds with the last count, and
        nothing accumulates.
        """
        hostile = Hostile(
            self,
            {"SELECT": Stream(b"", b"* 1 EXISTS\r\n", 200_000, b"* 9 EXISTS\r\n{tag} OK done\r\n")},
        )
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        tracemalloc.start()
        try:
            d = hostile.run(hostile.session.selectEach(["INBOX"]))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertEqual(self.successResultOf(d)["INBOX"].exists, 9)
        self.assertLess(peak, 2 * 1024 * 1024)
        self.assertEqual(hostile.logged(LogLevel.error), [])

    def test_existsFloodWhileIdle(self) -> None:
        """
        EXISTS, RECENT and EXPUNGE flooding an idle connection are
        dropped as they come: nothing accumulates, nothing is logged.
        """
        hostile = Hostile(self, {"NOOP": Stream(b"", b"* 1 EXISTS\r\n* 2 RECENT\r\n* 3 EXPUNGE\r\n", 70_000)})
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        hostile.client.sendPipelined(b"NOOP")
        tracemalloc.start()
        try:
            hostile.flush()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 2 * 1024 * 1024)
        self.assertEqual(hostile.events, [])

    def test_untaggedFloodDuringList(self) -> None:
        """
        More untagged responses to one command than
        L{MAX_COLLECTED_RESPONSES} is a flood: a protocol error.
        """
        hostile = Hostile(
            self, {"LIST": Stream(b"", b'* LIST () "/" x\r\n', MAX_COLLECTED_RESPONSES + 10)}
        )
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        error = self.failureResultOf(hostile.run(hostile.session.listFolders()), ProtocolError)
        self.assertIn("more untagged responses to LIST than imapmig accepts", str(error.value))
        self.assertCleanFailure(hostile, "more untagged responses to LIST")

    def test_startTLSInjection(self) -> None:
        """
        Cleartext after the STARTTLS reply, before the handshake, would be
        taken as coming over TLS: a protocol error, and no handshake.
        """
        hostile = Hostile(
            self,
            {
                "CAPABILITY": Reply(untagged=(b"CAPABILITY IMAP4rev1 STARTTLS",)),
                "STARTTLS": Send(b"{tag} OK begin\r\n* CAPABILITY IMAP4rev1 AUTH=PLAIN\r\n"),
            },
        )
        hostile.client._capCache = None
        d = hostile.run(hostile.session.startTLS(object()))
        self.failureResultOf(d, ProtocolError)
        self.assertCleanFailure(hostile, "data after the STARTTLS reply")

    def test_logoutUnanswered(self) -> None:
        """
        A LOGOUT never answered: C{logout} returns after the timeout, the
        connection aborted.
        """
        hostile = Hostile(self, {"LOGOUT": Stall()})
        d = hostile.run(hostile.session.logout())
        self.assertNoResult(d)
        hostile.clock.advance(10)
        hostile.flush()
        self.successResultOf(d)
        self.assertCleanFailure(hostile, "no reply to LOGOUT within 10 s")

    def test_loginRefusedStillPermanent(self) -> None:
        """
        A refused login stays L{AuthenticationFailed} (the job fails at
        once), not a protocol error.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Reply(b"NO [AUTHENTICATIONFAILED] no")})
        self.failureResultOf(
            hostile.run(hostile.session.login("alice", "pw")), AuthenticationFailed
        )
        self.assertEqual(hostile.logged(LogLevel.error), [])


class RealSocketTests(TestCase):
    """
    Over loopback: a server that stops reading in the middle of an APPEND
    is aborted, and both ends of the connection are really closed.
    """

    @inlineCallbacks
    def test_stalledAppendAborted(self) -> Any:
        """
        The server stops reading while a 32 MB APPEND is written: after the
        timeout (0.5 s here) the client aborts, its socket is closed, and
        the server end sees the connection reset.
        """
        reactor: Any = globalReactor
        servers: list[HostileIMAPServer] = []

        def build() -> HostileIMAPServer:
            server = HostileIMAPServer(reactor, {"APPEND": Stall()})
            servers.append(server)
            return server

        port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
            Factory.forProtocol(build)
        )
        self.addCleanup(port.stopListening)
        client = MigrationIMAP4Client(reactor, 0.5, peer="stalling server")
        yield connectProtocol(
            TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port), client
        )
        yield client.greeted
        transport = client.connection
        pipeline = AppendPipeline(
            client, PipelineSettings(LiteralMode.PLUS, 1, 1 << 26, 1, 1 << 26), Outcomes()
        )
        client.watchWrites(pipeline)
        pipeline.selectMailbox("INBOX")
        pipeline.enqueue([OutgoingMessage(b"x" * (32 * 1024 * 1024), b"", "big")])
        try:
            yield pipeline.drained()
        except ConnectionLost as e:
            self.assertIn("imapmig dropped the connection: no reply to APPEND within 0.5 s", str(e))
        else:
            self.fail("the APPEND was answered")
        yield client.closed
        self.assertEqual(transport.fileno(), -1)
        server = servers[0]
        # The server, reading again, finds the connection reset.
        server.transport.resumeProducing()  # type: ignore[union-attr]
        while not server.lost:
            yield _later(reactor)
        self.assertLess(server.octetsReceived, 32 * 1024 * 1024)


def _later(reactor: Any) -> Deferred[None]:
    d: Deferred[None] = Deferred()
    reactor.callLater(0.01, d.callback, None)
    return d
