# -*- test-case-name: tests.test_hostile -*-
# mypy: disallow-untyped-calls=False
# (LineReceiver's setRawMode and setLineMode are unannotated.)
"""
A scripted hostile IMAP server, to show that imapmig's client fails
cleanly (the right error, one log line, no traceback) and stays within
its memory bounds whatever a server does.

L{HostileIMAPServer} greets, then answers each command as a minimal,
well-behaved server would, except for the commands its script names: for
those it plays a L{Step} instead (announce a huge literal, send an
overlong line, garbage, a reply with an unknown tag, BYE in the middle of
an APPEND, drip octets on a clock, flood untagged EXISTS, stop reading).
Large output is written as a pull producer, as fast as the client reads
it and never held whole in memory.  It runs over L{twisted.test.iosim}
(with a L{Clock}) in unit tests and on a real socket for the few tests
that need one.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

from attrs import frozen
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IPullProducer, IReactorTime
from twisted.protocols.basic import LineReceiver
from zope.interface import implementer

DEFAULT_GREETING = (
    b"* OK [CAPABILITY IMAP4rev1 LITERAL+ MULTIAPPEND UIDPLUS SASL-IR AUTH=PLAIN]"
    b" hostile server ready\r\n"
)

STARTTLS_GREETING = (
    b"* OK [CAPABILITY IMAP4rev1 STARTTLS LITERAL+ MULTIAPPEND UIDPLUS SASL-IR AUTH=PLAIN]"
    b" hostile server ready\r\n"
)

CLOSE_NOTIFY = bytes.fromhex("15030300020100")
"""
A TLS alert record (TLS 1.2 framing), warning level, C{close_notify}: what
Courier-IMAP sent right after C{OK Begin SSL/TLS negotiation}.
"""

_LITERAL = re.compile(rb"\{(\d+)(\+?)\}$")
_CHUNK = 64 * 1024


class Step:
    """
    What the server does with one command instead of answering it.

    @cvar early: whether it acts as soon as the command's first line
        arrives (before the literals of an APPEND), not when the command
        is complete.
    """

    early = False

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        """
        Act on the command tagged C{tag}.
        """
        raise NotImplementedError


@frozen
class Reply(Step):
    """
    Answer with C{untagged} lines (each without C{* } and CRLF), then the
    tagged C{text}.
    """

    text: bytes = b"OK done"
    untagged: tuple[bytes, ...] = ()

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        server.transport.write(  # type: ignore[union-attr]
            b"".join(b"* " + line + b"\r\n" for line in self.untagged)
            + tag
            + b" "
            + self.text
            + b"\r\n"
        )


@frozen
class Send(Step):
    """
    Send C{data} as it is (garbage, a reply with a tag never sent, a
    continuation nobody asked for); C{{tag}} in it is replaced by the
    command's tag.  Then close the connection if C{close}.
    """

    data: bytes
    close: bool = False
    early: bool = False

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        server.transport.write(self.data.replace(b"{tag}", tag))  # type: ignore[union-attr]
        if self.close:
            server.transport.loseConnection()  # type: ignore[union-attr]


@frozen
class Stream(Step):
    """
    Send C{head}, then C{unit} C{count} times, then C{tail}, as fast as the
    client reads (a pull producer writing about 64 KiB at a time): a huge
    literal announced and sent (C{head} ending in C{{99999999999}}), a line
    of 100 MB without CRLF, a flood of C{* 1 EXISTS}.
    """

    head: bytes
    unit: bytes
    count: int
    tail: bytes = b""

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        transport = server.transport
        assert transport is not None
        transport.write(self.head.replace(b"{tag}", tag))
        producer = _Repeater(server, self.unit, self.count, self.tail.replace(b"{tag}", tag))
        transport.registerProducer(producer, False)  # type: ignore[attr-defined]


@frozen
class Drip(Step):
    """
    Send C{data} one octet every C{interval} seconds on the server's clock.
    """

    data: bytes
    interval: float = 1.0

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        data = self.data.replace(b"{tag}", tag)

        def drip(index: int) -> None:
            transport = server.transport
            if index >= len(data) or transport is None or server.lost:
                return
            transport.write(data[index : index + 1])
            server.dripping = server.clock.callLater(self.interval, drip, index + 1)

        drip(0)


@frozen
class Stall(Step):
    """
    Stop reading (the client's writes back up) and never answer.
    """

    early = True

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        server.stall()


@frozen
class After(Step):
    """
    Answer the first C{count} such commands normally, then play C{step}.
    """

    count: int
    step: Step

    @property
    def early(self) -> bool:  # type: ignore[override]
        return self.step.early

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        raise AssertionError("resolved by the server")


@frozen
class BreakHandshake(Step):
    """
    Accept STARTTLS (C{OK Begin SSL/TLS negotiation now.}), then, when the
    client's first TLS octets (its ClientHello) arrive, send C{answer}
    instead of a ServerHello and end the connection as C{end} says:
    C{"close"} (FIN), C{"reset"} (RST) or C{"open"} (leave it open).
    Played as the greeting (C{tag} C{*}) it does the same without the
    OK: an implicit-TLS port that misbehaves.
    """

    answer: bytes = b""
    end: str = "close"

    def play(self, server: HostileIMAPServer, tag: bytes) -> None:
        if tag != b"*":
            server.transport.write(  # type: ignore[union-attr]
                tag + b" OK Begin SSL/TLS negotiation now.\r\n"
            )
        server.handshake = self

    def clientHello(self, server: HostileIMAPServer) -> None:
        """
        The client's first TLS octets arrived.
        """
        transport = server.transport
        assert transport is not None
        if self.answer:
            transport.write(self.answer)
        if self.end == "close":
            transport.loseConnection()
        elif self.end == "reset":
            transport.abortConnection()  # type: ignore[attr-defined]


@implementer(IPullProducer)
class _Repeater:
    """
    Writes a unit many times, then a tail, a chunk per C{resumeProducing}.
    """

    def __init__(self, server: HostileIMAPServer, unit: bytes, count: int, tail: bytes) -> None:
        self._server = server
        self._left = count
        self._tail = tail
        perChunk = max(1, _CHUNK // max(1, len(unit)))
        self._unit = unit
        self._chunk = unit * perChunk
        self._perChunk = perChunk

    def resumeProducing(self) -> None:
        transport = self._server.transport
        if transport is None or self._server.lost:
            return
        if self._left >= self._perChunk:
            self._left -= self._perChunk
            transport.write(self._chunk)
        elif self._left > 0:
            transport.write(self._unit * self._left)
            self._left = 0
        else:
            transport.unregisterProducer()  # type: ignore[attr-defined]
            if self._tail:
                transport.write(self._tail)

    def stopProducing(self) -> None:
        self._left = 0
        self._tail = b""


class HostileIMAPServer(LineReceiver):
    """
    One connection of the scripted server.

    @ivar received: the command lines received (without literals).
    @ivar lost: whether the connection is gone.
    @ivar lostReason: why, once it is.
    @ivar octetsReceived: how many octets the client sent.
    """

    MAX_LENGTH = 1 << 30

    def __init__(
        self,
        clock: IReactorTime,
        script: Mapping[str, Step] | None = None,
        greeting: Step | None = None,
    ) -> None:
        """
        @param clock: for L{Drip}.
        @param script: the step to play for each command name
            (C{"APPEND"}, C{"UID FETCH"}, C{"LOGIN"}); every other command
            gets a normal reply.
        @param greeting: played instead of the usual greeting.
        """
        self.clock = clock
        self.script = dict(script or {})
        self.greeting = greeting
        self.received: list[bytes] = []
        self.lost = False
        self.lostReason: object = None
        self.octetsReceived = 0
        self.dripping: object = None
        self._seen: dict[str, int] = {}
        self._literalLeft = 0
        self._command: tuple[bytes, str, Step | None] | None = None
        self._uidNext = 1
        self.handshake: BreakHandshake | None = None
        self._deaf = False

    def connectionMade(self) -> None:
        if self.greeting is None:
            self.transport.write(DEFAULT_GREETING)  # type: ignore[union-attr]
        else:
            self.greeting.play(self, b"*")

    def connectionLost(self, reason: object = None) -> None:
        self.lost = True
        self.lostReason = reason
        dripping = self.dripping
        if isinstance(dripping, DelayedCall) and dripping.active():
            dripping.cancel()

    def stall(self) -> None:
        """
        Stop reading from the client.
        """
        self.transport.pauseProducing()  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.octetsReceived += len(data)
        if self._deaf:
            return
        if self.handshake is not None:
            # TLS from here on, which this server does not speak.
            self._deaf = True
            self.handshake.clientHello(self)
            return
        LineReceiver.dataReceived(self, data)

    def lineReceived(self, line: bytes) -> None:
        self.received.append(line)
        if self._command is None:
            self._begin(line)
        marker = _LITERAL.search(line)
        if marker is None:
            self._complete()
            return
        size, synchronizing = int(marker.group(1)), marker.group(2) == b""
        assert self._command is not None
        step = self._command[2]
        if synchronizing and (step is None or not step.early):
            self.transport.write(b"+ go ahead\r\n")  # type: ignore[union-attr]
        self._literalLeft = size
        self.setRawMode()
        if size == 0:
            self.rawDataReceived(b"")

    def _begin(self, line: bytes) -> None:
        """
        A command starts with C{line}: find the step of the script that
        answers it, and play it now if it answers early.
        """
        tag, _, rest = line.partition(b" ")
        command = _commandName(rest)
        step = self._stepFor(command)
        self._command = (tag, command, step)
        if step is not None and step.early:
            step.play(self, tag)

    def rawDataReceived(self, data: bytes) -> None:
        left = self._literalLeft
        self._literalLeft = max(0, left - len(data))
        if self._literalLeft == 0:
            self.setLineMode(data[left:])

    def _stepFor(self, command: str) -> Step | None:
        step = self.script.get(command)
        seen = self._seen.get(command, 0)
        self._seen[command] = seen + 1
        if isinstance(step, After):
            return step.step if seen >= step.count else None
        return step

    def _complete(self) -> None:
        assert self._command is not None
        tag, command, step = self._command
        self._command = None
        if step is None:
            self._normal(tag, command)
        elif not step.early:
            step.play(self, tag)

    def _normal(self, tag: bytes, command: str) -> None:
        """
        Answer as a minimal, well-behaved server.
        """
        answer: Callable[[bytes, str], None] = getattr(
            self, _NORMAL_ANSWERS.get(command, "_answerOK")
        )
        answer(tag, command)

    def _write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def _answerOK(self, tag: bytes, command: str) -> None:
        self._write(tag + b" OK done\r\n")

    def _answerCapability(self, tag: bytes, command: str) -> None:
        self._write(b"* CAPABILITY IMAP4rev1 LITERAL+ MULTIAPPEND UIDPLUS SASL-IR AUTH=PLAIN\r\n")
        self._answerOK(tag, command)

    def _answerSelect(self, tag: bytes, command: str) -> None:
        self._write(
            b"* 0 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n* OK [UIDNEXT %d] ok\r\n" % self._uidNext
        )
        self._answerOK(tag, command)

    def _answerList(self, tag: bytes, command: str) -> None:
        self._write(b'* %s () "/" INBOX\r\n' % command.encode("ascii"))
        self._answerOK(tag, command)

    def _answerAppend(self, tag: bytes, command: str) -> None:
        self._write(b"%s OK [APPENDUID 7 %d] done\r\n" % (tag, self._uidNext))
        self._uidNext += 1

    def _answerLogout(self, tag: bytes, command: str) -> None:
        self._write(b"* BYE logging out\r\n%s OK done\r\n" % tag)
        self.transport.loseConnection()  # type: ignore[union-attr]


_NORMAL_ANSWERS = {
    "CAPABILITY": "_answerCapability",
    "SELECT": "_answerSelect",
    "EXAMINE": "_answerSelect",
    "LIST": "_answerList",
    "LSUB": "_answerList",
    "APPEND": "_answerAppend",
    "LOGOUT": "_answerLogout",
}
"""
The methods of L{HostileIMAPServer} that answer a command the script
leaves alone, by its name (L{HostileIMAPServer._answerOK} for the rest).
"""


def _commandName(rest: bytes) -> str:
    """
    The name of the command of a line after its tag, upper case: C{"UID
    FETCH"} for a UID command.
    """
    words = rest.split(b" ", 2)
    name = words[0].upper()
    if name == b"UID":
        name += b" " + words[1].upper()
    return name.decode("ascii", "replace")
