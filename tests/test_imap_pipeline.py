"""
Tests for L{imapmig.imap.pipeline}: the exact bytes on the wire for each
literal mode, pipelining before replies, the window, backpressure, and
failure handling.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Sequence

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twisted.internet.error import ConnectionDone

from imapmig.errors import ConnectionLost, MailboxMissing, QuotaExceeded, ServerBusy
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.gather import Piece
from imapmig.mail.message import StreamedBody
from imapmig.imap.appenduid import parseAppendUID, parseUIDSet
from imapmig.imap.mailboxname import encodeMailboxName
from imapmig.imap.outgoing import (
    LiteralMode,
    OutgoingMessage,
    PipelineSettings,
    appendArguments,
    chooseLiteralMode,
)
from imapmig.imap.pipeline import AppendPipeline, WRITE_GATHER
from imapmig.imap.sendqueue import NARROW_BATCHES


class CountingTransport(StringTransport):
    """
    A StringTransport that counts write calls, to check coalescing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writeCalls = 0

    def write(self, data: bytes) -> None:
        self.writeCalls += 1
        super().write(data)

    def writeSequence(self, seq: object) -> None:
        self.writeCalls += 1
        StringTransport.write(self, b"".join(seq))  # type: ignore[arg-type]

    def take(self) -> bytes:
        value: bytes = self.value()
        self.clear()
        return value


class RecordingOutcomes:
    """
    Records what the pipeline reports.
    """

    def __init__(self) -> None:
        self.appended: list[tuple[object, int | None, int | None]] = []
        # How many messages each tagged OK reported at once.
        self.replies: list[int] = []
        self.refused: list[tuple[object, str]] = []

    def messagesAppended(
        self,
        messages: Sequence[OutgoingMessage],
        uidValidity: int | None,
        uids: Sequence[int] | None,
    ) -> None:
        self.replies.append(len(messages))
        for index, message in enumerate(messages):
            uid = None if uids is None else uids[index]
            self.appended.append((message.origin, uidValidity, uid))

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        self.refused.append((message.origin, reason))


def message(name: str, body: bytes, flags: tuple[str, ...] = ()) -> OutgoingMessage:
    return OutgoingMessage(body, appendArguments(flags, None), name)


def connect(
    mode: LiteralMode,
    batchMessages: int = 1,
    windowMessages: int = 100,
    windowBytes: int = 1 << 20,
    batchBytes: int = 1 << 20,
    batchGrowth: int = 0,
) -> tuple[CountingTransport, AppendPipeline, RecordingOutcomes, MigrationIMAP4Client]:
    client = MigrationIMAP4Client(Clock())
    transport = CountingTransport()
    client.makeConnection(transport)
    client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
    outcomes = RecordingOutcomes()
    settings = PipelineSettings(
        mode, batchMessages, batchBytes, windowMessages, windowBytes, batchGrowth
    )
    pipeline = AppendPipeline(client, settings, outcomes)
    pipeline.selectMailbox("INBOX")
    transport.clear()
    transport.writeCalls = 0
    return transport, pipeline, outcomes, client


class HelperTests(SynchronousTestCase):
    """
    The pure helpers of the pipeline module.
    """

    def test_appendLiterals(self) -> None:
        """
        L{imapmig.imap.pipeline.appendLiterals} (the C extension's, where
        built) and its Python twin L{appendLiteralsPython} write the
        non-synchronizing literals from C{start} on, a binary one as a
        literal8, a bytearray body as a view of it (no copy), and stop at
        the first one larger than the limit or not in memory, or once the
        budget is spent, returning the index reached and whether the
        budget stopped it.
        """
        from imapmig.imap import pipeline

        for appendLiterals in {pipeline.appendLiterals, pipeline.appendLiteralsPython}:
            converted = bytearray(b"b\r\n")
            messages = [
                OutgoingMessage(b"skipped", b" ()", None),
                OutgoingMessage(b"a", b" (\\Seen)", None),
                OutgoingMessage(converted, b" ()", None),
                OutgoingMessage(b"c\0", b" ()", None, binary=True),
                OutgoingMessage(b"", b"", None),
                OutgoingMessage(b"d" * 101, b" ()", None),
            ]
            out: list[Piece] = []
            self.assertEqual(appendLiterals(messages, 1, 100, 1000, out), (5, False))
            self.assertEqual(out[:3], [b" (\\Seen) {1+}\r\n", b"a", b" () {3+}\r\n"])
            view = out[3]
            assert isinstance(view, memoryview)
            self.assertIs(view.obj, converted)
            self.assertEqual(out[4:], [b" () ~{2+}\r\n", b"c\0", b" {0+}\r\n", b""])
            self.assertEqual(appendLiterals(messages, 5, 101, 1000, []), (6, False))
            self.assertEqual(appendLiterals(messages, 5, 100, 1000, []), (5, False))
            # Synchronizing mode: every literal stops (limit -1).
            self.assertEqual(appendLiterals(messages, 4, -1, 1000, []), (4, False))
            self.assertEqual(appendLiterals(messages, 6, 100, 1000, []), (6, False))
            # The budget is checked before each message: spent, it stops.
            self.assertEqual(appendLiterals(messages, 1, 100, 0, []), (1, True))
            self.assertEqual(appendLiterals(messages, 1, 100, 4, []), (3, True))
            self.assertEqual(appendLiterals(messages, 1, 1 << 70, 1 << 70, []), (6, False))
            streamed = [OutgoingMessage(object(), b"", None)]  # type: ignore[arg-type]
            self.assertEqual(appendLiterals(streamed, 0, 1 << 40, 10, []), (0, False))
            half = OutgoingMessage(b"h" * (WRITE_GATHER // 2), b" ()", None)
            self.assertEqual(
                appendLiterals([half, half, half], 0, 1 << 40, WRITE_GATHER, []), (2, True)
            )

    def test_appendLiteralsHeaders(self) -> None:
        """
        The C extension's L{appendLiterals} writes the same pieces as its
        Python twin for sizes of every number of digits, binary or not.
        """
        from imapmig.imap import pipeline

        messages = [
            OutgoingMessage(b"x" * size, b' (\\Seen) "01-Jan-2020 00:00:00 +0000"', None, binary)
            for size in (0, 1, 9, 10, 99, 100, 12345, 100000)
            for binary in (False, True)
        ]
        expected: list[Piece] = []
        python = pipeline.appendLiteralsPython(messages, 0, 1 << 20, 1 << 20, expected)
        out: list[Piece] = []
        self.assertEqual(pipeline.appendLiterals(messages, 0, 1 << 20, 1 << 20, out), python)
        self.assertEqual(out, expected)
        self.assertEqual(expected[2:4], [b' (\\Seen) "01-Jan-2020 00:00:00 +0000" ~{0+}\r\n', b""])

    def test_chooseLiteralMode(self) -> None:
        """
        LITERAL+ wins over LITERAL-, and neither means synchronizing.
        """
        self.assertIs(chooseLiteralMode({b"LITERAL+", b"LITERAL-"}), LiteralMode.PLUS)
        self.assertIs(chooseLiteralMode({b"LITERAL-"}), LiteralMode.MINUS)
        self.assertIs(chooseLiteralMode({b"IMAP4REV1"}), LiteralMode.SYNC)

    def test_forServerWithoutMultiappend(self) -> None:
        """
        Without MULTIAPPEND every APPEND carries one message.
        """
        settings = PipelineSettings.forServer({b"LITERAL+"}, 50, 100, 10, 100)
        self.assertEqual(settings.batchMessages, 1)
        settings = PipelineSettings.forServer({b"LITERAL+", b"MULTIAPPEND"}, 50, 100, 10, 100)
        self.assertEqual(settings.batchMessages, 50)

    def test_appendArguments(self) -> None:
        """
        Flags and the INTERNALDATE are formatted with leading spaces; no
        flags means no flag list.
        """
        when = datetime(2020, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=-5)))
        self.assertEqual(
            appendArguments(("\\Seen", "\\Flagged"), when),
            b' (\\Seen \\Flagged) "04-Mar-2020 05:06:07 -0500"',
        )
        self.assertEqual(appendArguments((), None), b"")

    def test_encodeMailboxName(self) -> None:
        """
        Names are quoted, escaped and in modified UTF-7.
        """
        self.assertEqual(encodeMailboxName('a"b\\c'), b'"a\\"b\\\\c"')
        self.assertEqual(encodeMailboxName("Entwürfe"), b'"Entw&APw-rfe"')

    def test_parseAppendUID(self) -> None:
        """
        APPENDUID response codes give the UIDVALIDITY and every UID.
        """
        self.assertEqual(parseAppendUID(b"[APPENDUID 38505 3955] done", 1), (38505, [3955]))
        self.assertEqual(
            parseAppendUID(b"[APPENDUID 7 4:6,9] done", 4), (7, [4, 5, 6, 9])
        )
        self.assertIsNone(parseAppendUID(b"APPEND completed", 1))
        self.assertIsNone(parseAppendUID(b"[APPENDUID x y] bad", 1))
        self.assertEqual(parseUIDSet(b"3:1", 3), [1, 2, 3])

    def test_hostileAppendUID(self) -> None:
        """
        A UID set longer than the command's messages is refused before it
        is expanded (C{1:4294967295} would be billions of integers), and
        numbers that are not UIDs (zero, negative, above 2**32 - 1, too
        many digits for any integer type) make the code malformed: the
        messages are still recorded as appended, without UIDs, and the
        connection goes on.
        """
        self.assertIsNone(parseAppendUID(b"[APPENDUID 1 1:4294967295] done", 50))
        self.assertIsNone(parseAppendUID(b"[APPENDUID 1 1:2,5:9] done", 6))
        for bad in (
            b"[APPENDUID 1 1:99999999999999999999] done",
            b"[APPENDUID 1 0] done",
            b"[APPENDUID 1 -5] done",
            b"[APPENDUID 1 4294967296] done",
            b"[APPENDUID 0 5] done",
            b"[APPENDUID 99999999999999999999 5] done",
        ):
            self.assertIsNone(parseAppendUID(bad, 1), bad)
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue([message("a", b"A\r\n")])
        drained = pipeline.drained()
        client.dataReceived(b"0001 OK [APPENDUID 1 1:99999999999999999999] done\r\n")
        self.assertEqual(outcomes.appended, [("a", None, None)])
        self.successResultOf(drained)


class LiteralPlusTests(SynchronousTestCase):
    """
    With LITERAL+ every APPEND leaves before any reply.
    """

    def test_pipelinedBeforeAnyReply(self) -> None:
        """
        Three APPENDs with non-synchronizing literals are written at once,
        in one write, each command line, literal and CRLF together.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue(
            [
                message("a", b"Hello\r\n", ("\\Seen",)),
                message("b", b"Bye\r\n"),
                message("c", b"x" * 5000),
            ]
        )
        self.assertEqual(
            transport.take(),
            b'0001 APPEND "INBOX" (\\Seen) {7+}\r\nHello\r\n\r\n'
            b'0002 APPEND "INBOX" {5+}\r\nBye\r\n\r\n'
            b'0003 APPEND "INBOX" {5000+}\r\n' + b"x" * 5000 + b"\r\n",
        )
        self.assertEqual(transport.writeCalls, 1)
        self.assertEqual(pipeline.messagesInFlight, 3)

    def test_appendUIDRecorded(self) -> None:
        """
        Each tagged OK with APPENDUID gives its message the UID; untagged
        EXISTS and RECENT are absorbed.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue([message("a", b"A\r\n"), message("b", b"B\r\n")])
        drained = pipeline.drained()
        client.dataReceived(
            b"* 1 EXISTS\r\n* 1 RECENT\r\n0001 OK [APPENDUID 99 1] Append completed.\r\n"
            b"* 2 EXISTS\r\n0002 OK [APPENDUID 99 2] Append completed.\r\n"
        )
        self.assertEqual(outcomes.appended, [("a", 99, 1), ("b", 99, 2)])
        self.successResultOf(drained)
        self.assertTrue(pipeline.idle)

    def test_batchReportedAtOnce(self) -> None:
        """
        A tagged OK for a MULTIAPPEND batch reports its messages in one
        call, in order, with their APPENDUIDs; with no APPENDUID, or one
        whose UID count does not match, in one call without UIDs.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=3)
        pipeline.enqueue([message(name, b"x\r\n") for name in "abcdefghi"])
        client.dataReceived(
            b"0001 OK [APPENDUID 99 4:6] done\r\n"
            b"0002 OK done\r\n"
            b"0003 OK [APPENDUID 99 7:8] done\r\n"
        )
        self.assertEqual(outcomes.replies, [3, 3, 3])
        self.assertEqual(
            outcomes.appended,
            [("a", 99, 4), ("b", 99, 5), ("c", 99, 6)]
            + [(name, None, None) for name in "defghi"],
        )
        self.assertTrue(pipeline.idle)

    def test_withoutUIDPLUS(self) -> None:
        """
        A plain OK records the message as appended, without a UID.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue([message("a", b"A\r\n")])
        client.dataReceived(b"0001 OK APPEND completed\r\n")
        self.assertEqual(outcomes.appended, [("a", None, None)])

    def test_refusedMessageRecordedOthersFlow(self) -> None:
        """
        A NO for one message records it with the server's text; the
        messages around it are appended.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue([message(n, b"m\r\n") for n in "abc"])
        client.dataReceived(
            b"0001 OK [APPENDUID 5 1] ok\r\n"
            b"0002 NO [LIMIT] Message too large\r\n"
            b"0003 OK [APPENDUID 5 2] ok\r\n"
        )
        self.assertEqual(outcomes.appended, [("a", 5, 1), ("c", 5, 2)])
        self.assertEqual(outcomes.refused, [("b", "NO [LIMIT] Message too large")])


class MultiappendTests(SynchronousTestCase):
    """
    MULTIAPPEND batches, and their atomic failure.
    """

    def test_batchInOneCommand(self) -> None:
        """
        Several messages go in one APPEND command, each with its own
        arguments and literal.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=2)
        pipeline.enqueue(
            [
                message("a", b"A\r\n", ("\\Seen",)),
                message("b", b"B\r\n", ("\\Flagged",)),
                message("c", b"C\r\n"),
            ]
        )
        self.assertEqual(
            transport.take(),
            b'0001 APPEND "INBOX" (\\Seen) {3+}\r\nA\r\n (\\Flagged) {3+}\r\nB\r\n\r\n',
        )
        # The last, short batch waits for more, until the caller has none.
        pipeline.flushed()
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {3+}\r\nC\r\n\r\n')
        client.dataReceived(
            b"0001 OK [APPENDUID 7 10:11] ok\r\n0002 OK [APPENDUID 7 12] ok\r\n"
        )
        self.assertEqual(outcomes.appended, [("a", 7, 10), ("b", 7, 11), ("c", 7, 12)])

    def test_batchBytesLimit(self) -> None:
        """
        A batch stops before the message that would exceed batchBytes.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=10, batchBytes=10
        )
        pipeline.enqueue([message("a", b"123456"), message("b", b"123456")])
        pipeline.flushed()
        self.assertEqual(
            transport.take(),
            b'0001 APPEND "INBOX" {6+}\r\n123456\r\n0002 APPEND "INBOX" {6+}\r\n123456\r\n',
        )

    def test_refusedBatchSplitUntilTheCulprit(self) -> None:
        """
        A refused batch is retried in halves, and halves of halves, until
        only the message at fault is recorded as refused.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=4)
        pipeline.enqueue([message(n, n.encode()) for n in "abcd"])
        self.assertEqual(
            transport.take(),
            b'0001 APPEND "INBOX" {1+}\r\na {1+}\r\nb {1+}\r\nc {1+}\r\nd\r\n',
        )
        client.dataReceived(b"0001 NO [LIMIT] too big\r\n")
        self.assertEqual(
            transport.take(),
            b'0002 APPEND "INBOX" {1+}\r\na {1+}\r\nb\r\n'
            b'0003 APPEND "INBOX" {1+}\r\nc {1+}\r\nd\r\n',
        )
        client.dataReceived(b"0002 OK [APPENDUID 1 1:2] ok\r\n0003 NO [LIMIT] too big\r\n")
        self.assertEqual(
            transport.take(),
            b'0004 APPEND "INBOX" {1+}\r\nc\r\n0005 APPEND "INBOX" {1+}\r\nd\r\n',
        )
        drained = pipeline.drained()
        client.dataReceived(b"0004 NO [LIMIT] too big\r\n0005 OK [APPENDUID 1 3] ok\r\n")
        self.successResultOf(drained)
        self.assertEqual(outcomes.appended, [("a", 1, 1), ("b", 1, 2), ("d", 1, 3)])
        self.assertEqual(outcomes.refused, [("c", "NO [LIMIT] too big")])


class BatchGrowthTests(SynchronousTestCase):
    """
    A MULTIAPPEND batch sized by the destination mailbox
    (L{PipelineSettings.batchFor}, L{AppendPipeline.sizeBatchesFor}).
    """

    def test_batchFor(self) -> None:
        """
        A batch carries one message per C{batchGrowth} the mailbox holds,
        never fewer than C{batchMessages} nor more than half the window.
        """
        settings = PipelineSettings(LiteralMode.PLUS, 200, 1 << 23, 1000, 1 << 25, 100)
        self.assertEqual(
            [settings.batchFor(n) for n in (0, 20_000, 20_099, 30_000, 49_999, 50_000, 10**6)],
            [200, 200, 200, 300, 499, 500, 500],
        )

    def test_batchForFixed(self) -> None:
        """
        Without MULTIAPPEND every batch is one message whatever the
        mailbox holds; with no growth every batch is C{batchMessages}.
        """
        without = PipelineSettings.forServer({b"LITERAL+"}, 200, 1 << 23, 1000, 1 << 25, 100)
        self.assertEqual(without.batchFor(10**6), 1)
        fixed = PipelineSettings.forServer({b"MULTIAPPEND"}, 200, 1 << 23, 1000, 1 << 25, 0)
        self.assertEqual(fixed.batchFor(10**6), 200)
        self.assertEqual(PipelineSettings.forServer({b"MULTIAPPEND"}, 2, 1, 1, 1).batchGrowth, 0)

    def test_grownBatches(self) -> None:
        """
        Sized for a mailbox of 600 messages with one message a batch per
        100, the pipeline asks for messages until one batch of 6 is
        queued, and sends a batch of 6 where C{batchMessages} says 2;
        sized for a mailbox of 100, batches of 2 again.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=2, windowMessages=20, batchGrowth=100
        )
        pipeline.sizeBatchesFor(600)
        pipeline.pauseProducing()
        pipeline.enqueue([message(str(n), b"x") for n in range(5)])
        self.assertTrue(pipeline.hungry().called)
        pipeline.enqueue([message("5", b"x")])
        self.assertFalse(pipeline.hungry().called)
        pipeline.resumeProducing()
        written = transport.take()
        self.assertEqual(written.count(b" APPEND "), 1)
        self.assertEqual(written.count(b"{1+}"), 6)
        pipeline.sizeBatchesFor(100)
        pipeline.enqueue([message(str(n), b"x") for n in range(6, 10)])
        self.assertEqual(transport.take().count(b" APPEND "), 2)


    def test_batchesAtMost(self) -> None:
        """
        sizeBatchesFor's C{most} caps the batch, grown or not (the end of a
        job of several connections), what the pipeline asks for, and the
        window: two batches (L{NARROW_BATCHES}).
        """
        self.assertEqual(NARROW_BATCHES, 2)
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=2, windowMessages=20, batchGrowth=100
        )
        self.assertEqual(pipeline.sizeBatchesFor(600, 3), 3)
        pipeline.pauseProducing()
        pipeline.enqueue([message(str(n), b"x") for n in range(3)])
        self.assertFalse(pipeline.hungry().called)
        pipeline.resumeProducing()
        self.assertEqual(transport.take().count(b"{1+}"), 3)
        # Capped at 1, the window holds 2 messages at most.
        self.assertEqual(pipeline.sizeBatchesFor(100, 1), 1)
        pipeline.enqueue([message(str(n), b"x") for n in range(3, 8)])
        self.assertEqual(transport.take(), b"")
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take().count(b" APPEND "), 2)
        client.dataReceived(b"0002 OK ok\r\n")
        self.assertEqual(transport.take().count(b" APPEND "), 1)
        # Uncapped, the settings' window again: 6 to 15 in batches of 2.
        self.assertEqual(pipeline.sizeBatchesFor(100), 2)
        pipeline.enqueue([message(str(n), b"x") for n in range(8, 16)])
        self.assertEqual(transport.take().count(b" APPEND "), 5)


class LiteralMinusTests(SynchronousTestCase):
    """
    LITERAL- allows non-synchronizing literals up to 4096 octets only; a
    command with a larger literal is written only when no reply is due.
    """

    def test_smallNonSyncLargeSync(self) -> None:
        """
        A literal of 4096 octets is non-synchronizing; the command with one
        of 4097 waits for the reply to the earlier command, then for its
        continuation; the next small command follows its literal in the
        same write.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.MINUS)
        small = b"s" * 4096
        large = b"L" * 4097
        pipeline.enqueue([message("a", small), message("b", large), message("c", b"c")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {4096+}\r\n' + small + b"\r\n")
        client.dataReceived(b"0001 OK [APPENDUID 1 1] ok\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {4097}\r\n')
        client.dataReceived(b"+ OK\r\n")
        self.assertEqual(transport.writeCalls, 3)
        self.assertEqual(
            transport.take(), large + b'\r\n0003 APPEND "INBOX" {1+}\r\nc\r\n'
        )
        self.assertEqual(transport.writeCalls, 3)
        client.dataReceived(b"0002 OK [APPENDUID 1 2] ok\r\n0003 OK [APPENDUID 1 3] ok\r\n")
        self.assertEqual(outcomes.appended, [("a", 1, 1), ("b", 1, 2), ("c", 1, 3)])
        self.assertTrue(pipeline.idle)

    def test_smallOnesPipelinedUntilALargeOne(self) -> None:
        """
        Small messages are all written before any reply; the large one
        after them waits until every one of them is answered, not just the
        first.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.MINUS)
        large = b"L" * 5000
        pipeline.enqueue([message("a", b"a"), message("b", b"b"), message("c", large)])
        self.assertEqual(
            transport.take(),
            b'0001 APPEND "INBOX" {1+}\r\na\r\n0002 APPEND "INBOX" {1+}\r\nb\r\n',
        )
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take(), b"")
        client.dataReceived(b"0002 OK ok\r\n")
        self.assertEqual(transport.take(), b'0003 APPEND "INBOX" {5000}\r\n')
        client.dataReceived(b"+ go\r\n0003 OK ok\r\n")
        self.assertEqual(transport.take(), large + b"\r\n")
        self.assertEqual(outcomes.appended, [("a", None, None), ("b", None, None),
                                             ("c", None, None)])  # fmt: skip

    def test_multiappendBatchWithALargeMessage(self) -> None:
        """
        A MULTIAPPEND batch holding one literal above 4096 octets waits,
        whole, for the replies due; its small literals stay
        non-synchronizing, its large one waits for the continuation.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.MINUS, batchMessages=2)
        large = b"L" * 5000
        pipeline.enqueue([message("a", b"a"), message("b", b"b")])
        pipeline.enqueue([message("c", b"c"), message("d", large)])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1+}\r\na {1+}\r\nb\r\n')
        client.dataReceived(b"0001 OK [APPENDUID 4 1:2] ok\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {1+}\r\nc {5000}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), large + b"\r\n")
        client.dataReceived(b"0002 OK [APPENDUID 4 3:4] ok\r\n")
        self.assertEqual(
            outcomes.appended, [("a", 4, 1), ("b", 4, 2), ("c", 4, 3), ("d", 4, 4)]
        )


class BinaryLiteralTests(SynchronousTestCase):
    """
    A message marked binary is sent as a C{literal8} (RFC 3516), in every
    literal mode, and may share a MULTIAPPEND with plain literals.
    """

    def test_literalPlus(self) -> None:
        """
        With LITERAL+ a binary message is C{~{N+}}.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=2)
        pipeline.enqueue(
            [
                OutgoingMessage(b"a\x00b", b"", "nul", binary=True),
                message("plain", b"x"),
            ]
        )
        self.assertEqual(
            transport.take(), b'0001 APPEND "INBOX" ~{3+}\r\na\x00b {1+}\r\nx\r\n'
        )

    def test_synchronizing(self) -> None:
        """
        Without LITERAL+ a binary message is C{~{N}} and waits for its C{+}.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([OutgoingMessage(b"a\x00b", b" (\\Seen)", "nul", binary=True)])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" (\\Seen) ~{3}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"a\x00b\r\n")


class SynchronizingTests(SynchronousTestCase):
    """
    Without LITERAL+ or LITERAL-, every literal waits for its continuation,
    and each command waits for the previous one's tagged reply: a server
    that leaves Nagle on would otherwise hold the next command's C{+}
    behind that reply until the client's delayed ACK (about 40 ms).
    """

    def test_nextCommandAfterTaggedReply(self) -> None:
        """
        After the C{+}, the literal and its CRLF are written alone; the next
        command line leaves only once the first command's tagged reply has
        arrived.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A\r\n", ("\\Seen",)), message("b", b"B\r\n")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" (\\Seen) {3}\r\n')
        client.dataReceived(b"+ Ready for literal data\r\n")
        self.assertEqual(transport.take(), b"A\r\n\r\n")
        self.assertEqual(pipeline.messagesInFlight, 1)
        self.assertEqual([m.origin for m in pipeline.unsettled()], ["a", "b"])
        client.dataReceived(b"0001 OK [APPENDUID 3 1] ok\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {3}\r\n')
        client.dataReceived(b"+ Ready\r\n")
        self.assertEqual(transport.take(), b"B\r\n\r\n")
        drained = pipeline.drained()
        client.dataReceived(b"0002 OK [APPENDUID 3 2] ok\r\n")
        self.successResultOf(drained)
        self.assertEqual(outcomes.appended, [("a", 3, 1), ("b", 3, 2)])
        self.assertEqual(transport.writeCalls, 4)

    def test_refusedAfterLiteral(self) -> None:
        """
        A message refused after its literal is recorded with the server's
        text, and the next command follows that reply.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        transport.take()
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"A\r\n")
        client.dataReceived(b"0001 NO [LIMIT] Too big\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {1}\r\n')
        self.assertEqual(outcomes.refused, [("a", "NO [LIMIT] Too big")])

    def test_heldCommandUnsettledOnLoss(self) -> None:
        """
        A lost connection leaves the command held behind a reply unsettled
        with the one in flight, neither appended nor refused.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        client.dataReceived(b"+ go\r\n")
        drained = pipeline.drained()
        client.connectionLost(Failure(ConnectionLost("gone")))
        self.failureResultOf(drained, ConnectionLost)
        self.assertEqual(sorted(m.origin for m in pipeline.unsettled()), ["a", "b"])
        self.assertEqual((outcomes.appended, outcomes.refused), ([], []))

    def test_flushedWaitsForTheHeldCommand(self) -> None:
        """
        flushed() fires only once the command held behind a reply has been
        written and its literal sent: until then another command may not
        be written.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        flushed = pipeline.flushed()
        client.dataReceived(b"+ go\r\n")
        self.assertTrue(pipeline.betweenCommands)
        self.assertNoResult(flushed)
        client.dataReceived(b"0001 OK ok\r\n+ go\r\n")
        self.successResultOf(flushed)

    def test_multiappendBatchesOneAtATime(self) -> None:
        """
        With MULTIAPPEND each literal of a batch waits for its own C{+}
        (the server sends nothing else meanwhile), and the next batch waits
        for the tagged reply of the previous one; a refused batch is split
        and its halves go one after the other.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC, batchMessages=2)
        pipeline.enqueue([message(n, n.encode()) for n in "abcd"])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"a {1}\r\n")
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"b\r\n")
        client.dataReceived(b"0001 NO [LIMIT] too big\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"a\r\n")
        client.dataReceived(b"0002 OK [APPENDUID 2 1] ok\r\n")
        self.assertEqual(transport.take(), b'0003 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"b\r\n")
        client.dataReceived(b"0003 NO [LIMIT] too big\r\n")
        self.assertEqual(transport.take(), b'0004 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"c {1}\r\n")
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"d\r\n")
        drained = pipeline.drained()
        client.dataReceived(b"0004 OK [APPENDUID 2 2:3] ok\r\n")
        self.successResultOf(drained)
        self.assertEqual(outcomes.appended, [("a", 2, 1), ("c", 2, 2), ("d", 2, 3)])
        self.assertEqual(outcomes.refused, [("b", "NO [LIMIT] too big")])

    def test_multiappendSynchronizing(self) -> None:
        """
        In a MULTIAPPEND command each literal waits for its own C{+}.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC, batchMessages=2)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"A {1}\r\n")
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"B\r\n")

    def test_refusedBeforeContinuation(self) -> None:
        """
        A command refused instead of a continuation is recorded and the
        next command is sent; its literal was never sent.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1}\r\n')
        client.dataReceived(b"0001 NO [TOOBIG] Too big\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {1}\r\n')
        self.assertEqual(outcomes.refused, [("a", "NO [TOOBIG] Too big")])


class FlowControlTests(SynchronousTestCase):
    """
    The window and the transport's backpressure bound what is in flight.
    """

    def test_windowMessages(self) -> None:
        """
        No more than windowMessages messages await replies; each reply lets
        the next one go.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, windowMessages=2)
        pipeline.enqueue([message(n, b"m") for n in "abc"])
        self.assertEqual(transport.take().count(b"APPEND"), 2)
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take(), b'0003 APPEND "INBOX" {1+}\r\nm\r\n')

    def test_windowBytes(self) -> None:
        """
        No more than windowBytes octets await replies, but a single larger
        message still goes when nothing else is in flight.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, windowBytes=10)
        pipeline.enqueue([message("a", b"x" * 20), message("b", b"y")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {20+}\r\n' + b"x" * 20 + b"\r\n")
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "INBOX" {1+}\r\ny\r\n')

    def test_backpressure(self) -> None:
        """
        While the transport has paused the pipeline nothing is written; on
        resume the queue is sent.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        self.assertIs(transport.producer, pipeline)
        pipeline.pauseProducing()
        pipeline.enqueue([message("a", b"A")])
        self.assertEqual(transport.take(), b"")
        pipeline.resumeProducing()
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1+}\r\nA\r\n')


    def pausedAfterEachWrite(self, transport: StringTransport, pipeline: AppendPipeline) -> list[int]:
        """
        Have C{transport} pause C{pipeline} after each write (its buffer
        full), and return the list of the octets of each write.
        """
        written: list[int] = []

        def writeSequence(seq: list[bytes]) -> None:
            written.append(sum(len(piece) for piece in seq))
            StringTransport.write(transport, b"".join(seq))
            pipeline.pauseProducing()  # the transport's buffer is full

        self.patch(transport, "writeSequence", writeSequence)
        return written

    def test_writesAboutOneGatherBeforeBackpressure(self) -> None:
        """
        Commands are gathered into writes of about WRITE_GATHER octets, and
        a transport that pauses the pipeline after a write gets no more
        until it resumes it: what the transport buffers (and joins into one
        copy) stays about one gather, however large the window.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, windowMessages=100, windowBytes=1 << 30
        )
        size = WRITE_GATHER // 3 + 1
        written = self.pausedAfterEachWrite(transport, pipeline)
        pipeline.enqueue([message(str(n), b"x" * size) for n in range(10)])
        self.assertEqual(len(written), 1)
        self.assertEqual(transport.value().count(b" APPEND "), 3)
        pipeline.resumeProducing()
        self.assertEqual(len(written), 2)
        self.assertEqual(transport.value().count(b" APPEND "), 6)
        self.assertLess(max(written), WRITE_GATHER + size + 100)
    def test_longCommandWrittenAGatherAtATime(self) -> None:
        """
        A MULTIAPPEND command longer than WRITE_GATHER is written a gather
        at a time: a transport that pauses the pipeline after a write gets
        no more of it, nor any other command, until it resumes the
        pipeline, which is not between commands meanwhile (so nothing else,
        a SELECT, may be written); the octets are those of one command.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=10, windowMessages=100, windowBytes=1 << 30,
            batchBytes=1 << 30,
        )
        size = WRITE_GATHER // 3 + 1
        written = self.pausedAfterEachWrite(transport, pipeline)
        pipeline.enqueue([message(str(n), b"x" * size) for n in range(10)])
        flushed = pipeline.flushed()
        self.assertEqual(len(written), 1)
        self.assertLess(written[0], WRITE_GATHER + size + 100)
        self.assertFalse(pipeline.betweenCommands)
        while not pipeline.betweenCommands:
            pipeline.resumeProducing()
        self.assertLess(max(written), WRITE_GATHER + size + 100)
        self.assertEqual(len(written), 4)
        self.successResultOf(flushed)
        expected = b'0001 APPEND "INBOX"' + b"".join(
            b" {%d+}\r\n" % size + b"x" * size for n in range(10)
        ) + b"\r\n"
        self.assertEqual(transport.value(), expected)
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(len(outcomes.appended), 10)

    def test_shortBatchWaitsForMore(self) -> None:
        """
        While a batch's worth is in flight, a batch cut short by the end
        of the queue waits: more messages make it whole; with less in
        flight (the replies due arrived), or a caller waiting for what it
        queued, what there is goes.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=3)
        pipeline.enqueue([message(str(n), b"m") for n in range(4)])
        self.assertEqual(transport.take().count(b" APPEND "), 1)
        pipeline.enqueue([message("4", b"m"), message("5", b"m")])
        self.assertEqual(transport.take().count(b" {1+}"), 3)
        pipeline.enqueue([message("6", b"m")])
        self.assertEqual(transport.take(), b"")
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take(), b"")
        client.dataReceived(b"0002 OK ok\r\n")
        self.assertEqual(transport.take(), b'0003 APPEND "INBOX" {1+}\r\nm\r\n')
        pipeline.enqueue([message("7", b"m")])
        self.assertEqual(transport.take(), b'0004 APPEND "INBOX" {1+}\r\nm\r\n')
        pipeline.enqueue([message(str(n), b"m") for n in range(8, 11)])
        self.assertEqual(transport.take().count(b" {1+}"), 3)
        pipeline.enqueue([message("11", b"m")])
        self.assertEqual(transport.take(), b"")
        drained = pipeline.drained()
        self.assertEqual(transport.take(), b'0006 APPEND "INBOX" {1+}\r\nm\r\n')
        client.dataReceived(b"0003 OK ok\r\n0004 OK ok\r\n0005 OK ok\r\n0006 OK ok\r\n")
        self.successResultOf(drained)
        self.assertEqual(len(outcomes.appended), 12)

    def test_hungry(self) -> None:
        """
        hungry() fires once less than a batch is queued: one full batch
        waits for the window, not two.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, windowMessages=1)
        pipeline.enqueue([message(str(n), b"m") for n in range(4)])
        hungry = pipeline.hungry()
        self.assertNoResult(hungry)
        client.dataReceived(b"0001 OK ok\r\n0002 OK ok\r\n")
        self.assertNoResult(hungry)
        client.dataReceived(b"0003 OK ok\r\n")
        self.successResultOf(hungry)

    def test_connectionLost(self) -> None:
        """
        A lost connection fails the waiters with ConnectionLost and leaves
        the in-flight and queued messages unsettled, neither appended nor
        refused.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, windowMessages=1)
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        drained = pipeline.drained()
        client.connectionLost(Failure(ConnectionLost("gone")))
        self.failureResultOf(drained, ConnectionLost)
        self.assertEqual([m.origin for m in pipeline.unsettled()], ["a", "b"])
        self.assertEqual(outcomes.appended, [])
        self.assertEqual(outcomes.refused, [])
        self.assertRaises(ConnectionLost, pipeline.enqueue, [message("c", b"C")])

    def test_selectMailboxWhileBusy(self) -> None:
        """
        The mailbox can change while messages for the previous one are
        queued or in flight: each goes to the mailbox selected when it was
        enqueued, and no batch mixes mailboxes.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=10, windowMessages=2
        )
        pipeline.enqueue([message("a", b"A"), message("b", b"B")])
        pipeline.selectMailbox("Other")
        pipeline.enqueue([message("c", b"C")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {1+}\r\nA {1+}\r\nB\r\n')
        client.dataReceived(b"0001 OK ok\r\n")
        self.assertEqual(transport.take(), b'0002 APPEND "Other" {1+}\r\nC\r\n')

    def test_flushed(self) -> None:
        """
        flushed() fires once everything queued is written and no command is
        half-written (here: a synchronizing literal awaiting its
        continuation).
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("a", b"A")])
        flushed = pipeline.flushed()
        self.assertNoResult(flushed)
        self.assertFalse(pipeline.betweenCommands)
        client.dataReceived(b"+ go\r\n")
        self.successResultOf(flushed)
        self.assertTrue(pipeline.betweenCommands)


class ServerSignalTests(SynchronousTestCase):
    """
    A refusal or a BYE that says "not now" or "not here" stops the
    pipeline with a typed error instead of refusing messages; one about
    the message refuses that message alone.
    """

    def stopped(
        self, reply: bytes
    ) -> tuple[Failure, RecordingOutcomes, AppendPipeline, CountingTransport]:
        """
        Send messages a, b, c with two per batch, let the server answer the
        first batch with C{reply}, and return the failure of L{drained}.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, batchMessages=2, windowMessages=2
        )
        pipeline.enqueue([message(n, b"m") for n in "abc"])
        transport.clear()
        drained = pipeline.drained()
        client.dataReceived(reply)
        return self.failureResultOf(drained), outcomes, pipeline, transport

    def assertNothingSettled(
        self, outcomes: RecordingOutcomes, pipeline: AppendPipeline, transport: CountingTransport
    ) -> None:
        """
        Nothing more was sent, nothing recorded, and a, b, c are unsettled.
        """
        self.assertEqual(transport.value(), b"")
        self.assertEqual(outcomes.refused, [])
        self.assertEqual(outcomes.appended, [])
        self.assertEqual(sorted(str(m.origin) for m in pipeline.unsettled()), ["a", "b", "c"])

    def test_unavailable(self) -> None:
        """
        C{NO [UNAVAILABLE]} (RFC 5530) on a batch records nothing, sends
        nothing more, and fails the waiters with L{ServerBusy} without a
        wait of the server's: the retry policy's applies.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"0001 NO [UNAVAILABLE] User's backend down for maintenance\r\n"
        )
        error = failure.value
        assert isinstance(error, ServerBusy)
        self.assertEqual(error.code, "UNAVAILABLE")
        self.assertIsNone(error.retryAfter)
        self.assertEqual(error.text, "[UNAVAILABLE] User's backend down for maintenance")
        self.assertNothingSettled(outcomes, pipeline, transport)
        self.assertRaises(ServerBusy, pipeline.enqueue, [message("d", b"m")])

    def test_throttled(self) -> None:
        """
        Microsoft 365's throttling notice (a NO to APPEND, as imapsync
        issue 198 quotes it) fails with L{ServerBusy} carrying the wait it
        suggests, in seconds.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"0001 NO Request is throttled. Suggested Backoff Time: 299609 milliseconds\r\n"
        )
        error = failure.value
        assert isinstance(error, ServerBusy)
        self.assertEqual(error.retryAfter, 299.609)
        self.assertIn("299.609 s", str(error))
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_throttledThenBye(self) -> None:
        """
        Microsoft 365 may throttle with a BAD and then say BYE
        (email-oauth2-proxy issue 191 quotes both lines): the throttling,
        which came first, is what the pipeline fails with.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"0001 BAD Request is throttled. Suggested Backoff Time: 89117 milliseconds\r\n"
            b"* BYE Connection closed. 14\r\n"
        )
        error = failure.value
        assert isinstance(error, ServerBusy)
        self.assertEqual(error.retryAfter, 89.117)
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_overQuota(self) -> None:
        """
        C{NO [OVERQUOTA]} (Dovecot's default wording) fails with
        L{QuotaExceeded}: the job pauses; nothing is refused.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"0001 NO [OVERQUOTA] Quota exceeded (mailbox for user is full)\r\n"
        )
        error = failure.value
        assert isinstance(error, QuotaExceeded)
        self.assertEqual(error.code, "OVERQUOTA")
        self.assertEqual(error.text, "[OVERQUOTA] Quota exceeded (mailbox for user is full)")
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_gmailBandwidthBye(self) -> None:
        """
        Gmail's goodbye past its bandwidth limit (as mbsync reports it:
        "unexpected BYE response: [OVERQUOTA] Account exceeded command or
        bandwidth limits.") fails the pipeline at once with
        L{QuotaExceeded}, before the connection closes; the messages in
        flight stay unsettled, and the close changes nothing.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"* BYE [OVERQUOTA] Account exceeded command or bandwidth limits.\r\n"
        )
        self.assertIsInstance(failure.value, QuotaExceeded)
        pipeline.connectionLost(Failure(ConnectionDone()))
        self.assertIsInstance(self.failureResultOf(pipeline.drained()).value, QuotaExceeded)
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_plainBye(self) -> None:
        """
        A BYE that gives no reason fails the pipeline with
        L{ConnectionLost} saying the server ended the connection, and
        what it said.
        """
        failure, outcomes, pipeline, transport = self.stopped(b"* BYE Server shutting down.\r\n")
        error = failure.value
        self.assertIsInstance(error, ConnectionLost)
        self.assertNotIsInstance(error, (ServerBusy, QuotaExceeded))
        self.assertEqual(
            str(error),
            "APPEND: the server ended the connection: BYE Server shutting down.",
        )
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_bareBye(self) -> None:
        """
        A BYE with no text at all, in any case, ends the pipeline too.
        """
        failure, outcomes, pipeline, transport = self.stopped(b"* bye\r\n")
        self.assertEqual(str(failure.value), "APPEND: the server ended the connection: BYE")
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_expiredSession(self) -> None:
        """
        C{NO [EXPIRED]} in the middle of a session refuses nothing: the
        session is over (L{ConnectionLost}), and logging in again decides.
        """
        failure, outcomes, pipeline, transport = self.stopped(
            b"0001 NO [EXPIRED] That password isn't valid any more\r\n"
        )
        self.assertIsInstance(failure.value, ConnectionLost)
        self.assertNothingSettled(outcomes, pipeline, transport)

    def test_mailboxGone(self) -> None:
        """
        C{NO [TRYCREATE]} refuses nothing: the pipeline fails with
        L{MailboxMissing} naming the mailbox, decoded.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.selectMailbox("Entw\u00fcrfe")
        pipeline.enqueue([message("a", b"m")])
        drained = pipeline.drained()
        client.dataReceived(b"0001 NO [TRYCREATE] Mailbox doesn't exist: Entw&APw-rfe\r\n")
        error = self.failureResultOf(drained).value
        assert isinstance(error, MailboxMissing)
        self.assertEqual(error.mailbox, "Entw\u00fcrfe")
        self.assertEqual(error.code, "TRYCREATE")
        self.assertEqual(outcomes.refused, [])
        self.assertEqual([m.origin for m in pipeline.unsettled()], ["a"])

    def test_tooBigBatchSplit(self) -> None:
        """
        C{NO [TOOBIG]} (RFC 7889) on a MULTIAPPEND batch refuses only the
        message at fault, found by splitting; the others are appended.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=4)
        pipeline.enqueue([message(n, b"m") for n in "abcd"])
        client.dataReceived(b"0001 NO [TOOBIG] Message exceeds the APPENDLIMIT\r\n")
        client.dataReceived(
            b"0002 OK [APPENDUID 1 1:2] ok\r\n0003 NO [TOOBIG] Message exceeds the APPENDLIMIT\r\n"
        )
        client.dataReceived(
            b"0004 OK [APPENDUID 1 3] ok\r\n0005 NO [TOOBIG] Message exceeds the APPENDLIMIT\r\n"
        )
        self.successResultOf(pipeline.drained())
        self.assertEqual(outcomes.appended, [("a", 1, 1), ("b", 1, 2), ("c", 1, 3)])
        self.assertEqual(outcomes.refused, [("d", "NO [TOOBIG] Message exceeds the APPENDLIMIT")])

    def test_unprintableReason(self) -> None:
        """
        A refusal's text is recorded as a short excerpt, unprintable
        octets escaped.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        pipeline.enqueue([message("a", b"m")])
        client.dataReceived(b"0001 NO bad\x00\x1b[31m" + b"x" * 500 + b"\r\n")
        [(origin, reason)] = outcomes.refused
        self.assertTrue(reason.startswith("NO bad\\x00\\x1b[31mxxx"), reason)
        self.assertTrue(reason.endswith(" ..."), reason)
        self.assertLess(len(reason), 220)


class LargeLiteralTests(SynchronousTestCase):
    """
    A large literal is written slice by slice, as the transport makes room.
    """

    def test_slicesFollowBackpressure(self) -> None:
        """
        Each slice is written only when the transport asks for more; the
        command line goes with the first slice, and the next command with
        the last one.
        """
        import imapmig.imap.pipeline as module

        self.patch(module, "STREAM_THRESHOLD", 8)
        self.patch(module, "STREAM_SLICE", 4)
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        writes: list[bytes] = []

        def writeSequence(seq: list[bytes]) -> None:
            writes.append(b"".join(seq))
            pipeline.pauseProducing()  # the transport's buffer is full

        self.patch(transport, "writeSequence", writeSequence)
        pipeline.enqueue([message("big", b"0123456789"), message("small", b"x")])
        self.assertEqual(writes, [b'0001 APPEND "INBOX" {10+}\r\n0123'])
        pipeline.resumeProducing()
        self.assertEqual(writes[1:], [b"4567"])
        pipeline.resumeProducing()
        self.assertEqual(writes[2:], [b'89\r\n0002 APPEND "INBOX" {1+}\r\nx\r\n'])
        client.dataReceived(b"0001 OK [APPENDUID 1 1] ok\r\n0002 OK [APPENDUID 1 2] ok\r\n")
        self.assertEqual(outcomes.appended, [("big", 1, 1), ("small", 1, 2)])

    def streamedBody(self, content: bytes) -> tuple[str, StreamedBody]:
        """
        A file holding C{content}, and a L{StreamedBody} on it.
        """
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(content)
        fd = os.open(path, os.O_RDONLY)
        return path, StreamedBody.fromDescriptor(fd, path)

    def test_streamedBody(self) -> None:
        """
        A L{StreamedBody} is read and converted to CRLF slice by slice as
        the transport makes room, whatever its size, and sent again whole
        when its batch is split and retried.
        """
        import imapmig.imap.pipeline as module

        self.patch(module, "STREAM_SLICE", 4)
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS, batchMessages=2)
        path, body = self.streamedBody(b"ab\ncd\nef")
        writes: list[bytes] = []

        def writeSequence(seq: list[bytes]) -> None:
            writes.append(b"".join(seq))
            pipeline.pauseProducing()

        self.patch(transport, "writeSequence", writeSequence)
        pipeline.enqueue([OutgoingMessage(body, b"", "big"), message("small", b"x")])
        while pipeline.busy and not pipeline.betweenCommands:
            pipeline.resumeProducing()
        self.assertEqual(
            b"".join(writes), b'0001 APPEND "INBOX" {10+}\r\nab\r\ncd\r\nef {1+}\r\nx\r\n'
        )
        self.assertEqual(writes[1], b"d\r\nef {1+}\r\nx\r\n")
        del writes[:]
        client.dataReceived(b"0001 NO [TOOBIG] too big\r\n")
        for _ in range(3):
            pipeline.resumeProducing()
        self.assertTrue(
            b"".join(writes).startswith(b'0002 APPEND "INBOX" {10+}\r\nab\r\ncd\r\nef\r\n')
        )

    def test_streamedBodyChanged(self) -> None:
        """
        A streamed file that no longer gives the size announced cannot be
        sent honestly: its message is refused with the reason and the
        connection aborted, and it is not among the unsettled messages.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.PLUS)
        path, body = self.streamedBody(b"ab\ncd\nef")
        with open(path, "ab") as f:
            f.write(b"more")
        pipeline.enqueue([OutgoingMessage(body, b"", "big")])
        self.assertTrue(transport.disconnecting)
        self.assertEqual(len(outcomes.refused), 1)
        self.assertEqual(outcomes.refused[0][0], "big")
        self.assertIn("changed while being sent", outcomes.refused[0][1])
        self.assertEqual(pipeline.unsettled(), [])
        self.assertEqual(pipeline.messagesInFlight, 0)
        self.assertEqual(pipeline.bytesInFlight, 0)
        self.flushLoggedErrors()

    def test_synchronizingLargeLiteral(self) -> None:
        """
        A large synchronizing literal is streamed after its continuation.
        """
        import imapmig.imap.pipeline as module

        self.patch(module, "STREAM_THRESHOLD", 8)
        self.patch(module, "STREAM_SLICE", 4)
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC)
        pipeline.enqueue([message("big", b"0123456789")])
        self.assertEqual(transport.take(), b'0001 APPEND "INBOX" {10}\r\n')
        client.dataReceived(b"+ go\r\n")
        self.assertEqual(transport.take(), b"0123456789\r\n")
