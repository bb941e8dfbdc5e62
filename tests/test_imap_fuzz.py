"""
L{MigrationIMAP4Client} fuzzed with hypothesis: whatever octets a server
sends, split into reads at whatever points, the client never raises out of
C{dataReceived}, never logs a traceback, and either goes on or drops the
connection with L{ProtocolError}, failing every pending command with it.
"""

from __future__ import annotations

from typing import Any, Sequence, cast

from hypothesis import HealthCheck, given, settings, strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import CommandRefused, ProtocolError
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.errors import CommandRefused
from imapmig.imap.outgoing import LiteralMode, OutgoingMessage, PipelineSettings
from imapmig.imap.pipeline import AppendPipeline

# Fragments of real replies, so that the fuzzer reaches literals, FETCH
# responses, continuations and tagged replies, mixed with any octets.
FRAGMENTS = [
    b"* ",
    b"+ ",
    b"0001 ",
    b"0002 ",
    b"0003 ",
    b"0004 ",
    b"0005 ",
    b"ZZZZ ",
    b"OK ",
    b"NO ",
    b"BAD ",
    b"BYE ",
    b"[ALERT] ",
    b"[APPENDUID 7 5] ",
    b"done",
    b"\r\n",
    b"\r",
    b"\n",
    b"1 FETCH (",
    b"UID 5 ",
    b"FLAGS (\\Seen) ",
    b"BODY[] ",
    b"BINARY[] ",
    b"{0}\r\n",
    b"{3}\r\n",
    b"~{2}\r\n",
    b"{99999999999}\r\n",
    b")",
    b"(",
    b'"',
    b"\\",
    b"NIL",
    b"3 EXISTS",
    b"2 EXPUNGE",
    b'LIST () "/" ',
    b"CAPABILITY IMAP4rev1",
    b"}",
    b"{",
]

# Whole replies, so that some examples get far.
LINES = [
    b"* 1 FETCH (UID 5 BODY[] {3}\r\nabc)\r\n",
    b"* 2 FETCH (UID 6 FLAGS (\\Seen) BINARY[] ~{2}\r\n\x00\xff)\r\n",
    b'* LIST () "/" {5}\r\nINBOX\r\n',
    b"* 3 EXISTS\r\n",
    b"* 4 RECENT\r\n",
    b"* 2 EXPUNGE\r\n",
    b"* 3 FETCH (FLAGS (\\Seen))\r\n",
    b"* OK [ALERT] mind the gap :-(\r\n",
    b"* NO [OVERQUOTA] almost full\r\n",
    b"* OK [UIDVALIDITY 7] ok\r\n",
    b"* FLAGS (\\Seen $Junk)\r\n",
    b"* CAPABILITY IMAP4rev1 LITERAL+\r\n",
    b"* BYE going away\r\n",
    b"+ go ahead\r\n",
    b"0001 OK done\r\n",
    b"0002 NO [TRYCREATE] no\r\n",
    b"0003 OK [READ-WRITE] done\r\n",
    b"0004 OK fetched\r\n",
    b"0005 OK [APPENDUID 7 5] done\r\n",
]

line = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=12)), max_size=8
).map(b"".join)
streams = st.lists(
    st.one_of(
        st.sampled_from(LINES),
        st.sampled_from(LINES),
        st.tuples(line, st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"", b"\n"])).map(
            b"".join
        ),
    ),
    max_size=12,
).map(b"".join)


class Recorder:
    """
    Records every outcome, so no failure goes unhandled.
    """

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self.pending: list[Deferred[Any]] = []

    def watch(self, d: Deferred[Any]) -> None:
        self.pending.append(d)
        d.addErrback(self.failures.append)


class Outcomes:
    def messagesAppended(
        self, messages: Sequence[OutgoingMessage], v: int | None, u: Sequence[int] | None
    ) -> None:
        pass

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        pass


class FuzzTests(SynchronousTestCase):
    """
    Arbitrary octets, split arbitrarily.
    """

    def setUp(self) -> None:
        self.tracebacks: list[LogEvent] = []

        def observe(event: LogEvent) -> None:
            if "log_failure" in event:
                self.tracebacks.append(event)

        observer = cast(ILogObserver, observe)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)

    @settings(
        max_examples=800,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        stream=streams,
        cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
        greeted=st.booleans(),
        sync=st.booleans(),
    )
    def test_anyOctets(self, stream: bytes, cuts: list[int], greeted: bool, sync: bool) -> None:
        """
        Every command kind in flight (stock queue, pipelined, collecting,
        fetch, an APPEND pipeline awaiting a continuation), then any
        octets in any reads: no exception, no traceback; the client either
        goes on or has dropped the connection with L{ProtocolError} and
        failed every pending command with it (or a refusal that came
        before).
        """
        clock = Clock()
        client = MigrationIMAP4Client(clock, 30, peer="fuzz")
        transport = StringTransport()
        client.makeConnection(transport)
        recorder = Recorder()
        if greeted:
            client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] hi\r\n")
            recorder.watch(client.sendCollecting(b"LIST", b'"" "*"'))
            recorder.watch(client.sendPipelined(b"CREATE x"))
            recorder.watch(client.sendPipelinedCollecting(b"SELECT x"))
            recorder.watch(client.fetchInto(b"UID FETCH 1:* (UID BODY.PEEK[])", lambda item: None))
            mode = LiteralMode.SYNC if sync else LiteralMode.PLUS
            pipeline = AppendPipeline(
                client, PipelineSettings(mode, 1, 1 << 20, 4, 1 << 20), Outcomes()
            )
            pipeline.selectMailbox("INBOX")
            pipeline.enqueue([OutgoingMessage(b"hello\r\n", b"", 1)])
            recorder.watch(pipeline.drained())
        recorder.watch(client.greeted)
        positions = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
        for start, end in zip(positions, positions[1:]):
            client.dataReceived(stream[start:end])
        self.assertEqual(self.tracebacks, [])
        self.assertEqual(self.flushLoggedErrors(), [])
        dropped = client.dropReason
        if dropped is not None:
            self.assertIsInstance(dropped, ProtocolError)
            self.assertTrue(transport.disconnecting)
            for d in recorder.pending:
                self.assertTrue(d.called)
            for failure in recorder.failures:
                self.assertTrue(
                    failure.check(ProtocolError, CommandRefused)
                    or "imapmig dropped the connection" in str(failure.value),
                    failure,
                )
        client.connectionLost(Failure(ProtocolError("end of the example")))
        self.assertEqual(clock.getDelayedCalls(), [])
