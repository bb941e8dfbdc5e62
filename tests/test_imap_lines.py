"""
Tests for L{imapmig.imap.lines}: lines split as L{LineReceiver} splits
them, in linear time.
"""

from __future__ import annotations

import time

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.lines import LinearLineReceiver


class Recorder(LinearLineReceiver):
    """
    Records what it is handed; a line C{RAW n} switches to raw mode for
    C{n} octets, as a literal does.
    """

    MAX_LENGTH = 100

    def __init__(self) -> None:
        LinearLineReceiver.__init__(self)
        self.events: list[tuple[str, bytes]] = []
        self.rawLeft = 0

    def lineReceived(self, line: bytes) -> None:
        self.events.append(("line", line))
        if line.startswith(b"RAW "):
            self.rawLeft = int(line[4:])
            self.setRawMode()

    def rawDataReceived(self, data: bytes) -> None:
        taken, rest = data[: self.rawLeft], data[self.rawLeft :]
        self.rawLeft -= len(taken)
        self.events.append(("raw", taken))
        if self.rawLeft == 0:
            self.setLineMode(rest)

    def lineLengthExceeded(self, line: bytes) -> None:
        self.events.append(("exceeded", line))
        self.transport.loseConnection()  # type: ignore[union-attr]


def connected() -> Recorder:
    protocol = Recorder()
    protocol.makeConnection(StringTransport())
    return protocol


def joinedRaw(events: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """
    C{events} with consecutive raw pieces joined: how raw data is split
    into calls depends on the reads.
    """
    result: list[tuple[str, bytes]] = []
    for kind, value in events:
        if kind == "raw" and result and result[-1][0] == "raw":
            result[-1] = ("raw", result[-1][1] + value)
        else:
            result.append((kind, value))
    return result


WIRE = b"A1 OK one\r\n* 3 EXISTS\r\nRAW 7\r\nab\r\ncdeB2 OK after\r\n\r\nlast\r\n"
EXPECTED = [
    ("line", b"A1 OK one"),
    ("line", b"* 3 EXISTS"),
    ("line", b"RAW 7"),
    ("raw", b"ab\r\ncde"),
    ("line", b"B2 OK after"),
    ("line", b""),
    ("line", b"last"),
]


class InPlaceRecorder(Recorder):
    """
    A L{Recorder} that takes its raw octets in place
    (L{LinearLineReceiver.rawDataFrom}), noting each read it was given and
    where in it the raw octets started.
    """

    def __init__(self) -> None:
        Recorder.__init__(self)
        self.given: list[tuple[bytes, int]] = []

    def rawDataFrom(self, data: bytes, pos: int) -> int:
        self.given.append((data, pos))
        end = min(len(data), pos + self.rawLeft)
        self.events.append(("raw", data[pos:end]))
        self.rawLeft -= end - pos
        if self.rawLeft == 0:
            self.setLineMode()
        return end


class LinearLineReceiverTests(SynchronousTestCase):
    """
    L{LinearLineReceiver}.
    """

    def test_rawInPlaceEverySplit(self) -> None:
        """
        Raw octets taken in place (C{rawDataFrom} returning where it
        stopped, back in line mode) give the same lines and raw data as
        C{rawDataReceived} does, however the octets are split into reads;
        from one read, the raw octets are taken from that read itself, at
        their position, and the lines after them are read from it too.
        """
        protocol = InPlaceRecorder()
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(WIRE)
        self.assertEqual(joinedRaw(protocol.events), EXPECTED)
        self.assertEqual(len(protocol.given), 1)
        [(data, pos)] = protocol.given
        self.assertIs(data, WIRE)
        self.assertEqual(pos, WIRE.index(b"ab\r\ncde"))
        for first in range(1, len(WIRE)):
            for second in range(first, len(WIRE)):
                protocol = InPlaceRecorder()
                protocol.makeConnection(StringTransport())
                protocol.dataReceived(WIRE[:first])
                protocol.dataReceived(WIRE[first:second])
                protocol.dataReceived(WIRE[second:])
                self.assertEqual(joinedRaw(protocol.events), EXPECTED, (first, second))

    def test_rawInPlacePaused(self) -> None:
        """
        Pausing in the line after raw octets taken in place keeps the rest
        of the read for C{resumeProducing}.
        """

        class Pausing(InPlaceRecorder):
            def lineReceived(self, line: bytes) -> None:
                InPlaceRecorder.lineReceived(self, line)
                if line == b"B2 OK after":
                    self.pauseProducing()

        protocol = Pausing()
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(WIRE)
        self.assertEqual(joinedRaw(protocol.events), EXPECTED[:5])
        protocol.resumeProducing()
        self.assertEqual(joinedRaw(protocol.events), EXPECTED)

    def test_everySplit(self) -> None:
        """
        Lines and raw data come out the same however the octets are split
        into reads: in one read, octet by octet, and split at every pair
        of positions (a CRLF split between reads included).
        """
        protocol = connected()
        protocol.dataReceived(WIRE)
        self.assertEqual(joinedRaw(protocol.events), EXPECTED)
        protocol = connected()
        for octet in WIRE:
            protocol.dataReceived(bytes([octet]))
        self.assertEqual(joinedRaw(protocol.events), EXPECTED)
        for first in range(1, len(WIRE)):
            for second in range(first, len(WIRE)):
                protocol = connected()
                protocol.dataReceived(WIRE[:first])
                protocol.dataReceived(WIRE[first:second])
                protocol.dataReceived(WIRE[second:])
                self.assertEqual(joinedRaw(protocol.events), EXPECTED, (first, second))

    def test_lineAtTheLimit(self) -> None:
        """
        A line of exactly C{MAX_LENGTH} octets is handed over, in one read
        or split just before its LF.
        """
        line = b"x" * 100
        protocol = connected()
        protocol.dataReceived(line + b"\r\n")
        protocol.dataReceived(line + b"\r")
        protocol.dataReceived(b"\n")
        self.assertEqual(protocol.events, [("line", line), ("line", line)])

    def test_tooLongInOneRead(self) -> None:
        """
        A complete line over the limit is refused with its start (here the
        whole of it), and nothing after it is handed over.
        """
        protocol = connected()
        protocol.dataReceived(b"ok\r\n" + b"y" * 101 + b"\r\nafter\r\n")
        self.assertEqual(protocol.events, [("line", b"ok"), ("exceeded", b"y" * 101)])

    def test_tooLongUnfinished(self) -> None:
        """
        An unfinished line is refused as soon as it is longer than the
        limit (plus one octet, which may be the CR), not when its CRLF
        comes.
        """
        protocol = connected()
        protocol.dataReceived(b"z" * 60)
        protocol.dataReceived(b"z" * 41)
        self.assertEqual(protocol.events, [])
        protocol.dataReceived(b"z")
        self.assertEqual(protocol.events, [("exceeded", b"z" * 102)])

    def test_tooLongHandsOverItsStartOnly(self) -> None:
        """
        Of a line far too long, only the first KiB is handed over: the
        whole line is never copied.
        """

        class Big(Recorder):
            MAX_LENGTH = 64 * 1024

        protocol = Big()
        protocol.makeConnection(StringTransport())
        for _ in range(3):
            protocol.dataReceived(b"q" * 40_000)
        protocol.dataReceived(b"w" * 200_000 + b"\r\n")
        self.assertEqual(protocol.events, [("exceeded", b"q" * 1024)])

    def test_clearLineBufferInsideLineReceived(self) -> None:
        """
        C{clearLineBuffer} called while a line is handled returns the rest
        of the read and of the reads queued meanwhile, and nothing of them
        is handed over as lines.
        """
        taken: list[bytes] = []

        class Switching(Recorder):
            def lineReceived(self, line: bytes) -> None:
                Recorder.lineReceived(self, line)
                if line == b"SWITCH":
                    self.dataReceived(b"queued")
                    taken.append(self.clearLineBuffer())

        protocol = Switching()
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(b"one\r\nSWITCH\r\nrest\r\n")
        self.assertEqual(protocol.events, [("line", b"one"), ("line", b"SWITCH")])
        self.assertEqual(taken, [b"rest\r\nqueued"])

    def test_stopsWhenDisconnecting(self) -> None:
        """
        Once the transport is disconnecting nothing more is handed over.
        """

        class Closing(Recorder):
            def lineReceived(self, line: bytes) -> None:
                Recorder.lineReceived(self, line)
                self.transport.loseConnection()  # type: ignore[union-attr]

        protocol = Closing()
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(b"one\r\ntwo\r\n")
        protocol.dataReceived(b"three\r\n")
        self.assertEqual(protocol.events, [("line", b"one")])

    def test_linearTime(self) -> None:
        """
        A line of 32 MiB arriving in 64 KiB reads is read in linear time:
        well under a second here, where L{LineReceiver} takes minutes.
        """

        class Big(Recorder):
            MAX_LENGTH = 64 * 1024 * 1024

        protocol = Big()
        protocol.makeConnection(StringTransport())
        piece = b"w" * 65536
        start = time.perf_counter()
        for _ in range(512):
            protocol.dataReceived(piece)
        protocol.dataReceived(b"\r\n")
        elapsed = time.perf_counter() - start
        self.assertEqual([(k, len(v)) for k, v in protocol.events], [("line", 512 * 65536)])
        self.assertLess(elapsed, 3.0)
