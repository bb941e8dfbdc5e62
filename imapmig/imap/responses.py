# -*- test-case-name: tests.test_imap_client,tests.test_imap_fetch -*-
"""
What an IMAP server sends, turned into events: lines and literals split in
linear time (L{imapmig.imap.lines}), FETCH responses read by
L{imapmig.imap.fetch.FetchResponseParser} (bodies included), every tagged
reply matched to the command it answers, untagged responses to the
command that collects them, continuation requests to whoever asked, and
C{BYE}; what the stock parser reads is bounded (L{MAX_RESPONSE_LENGTH}).

The middle of the three layers of
L{imapmig.imap.client.MigrationIMAP4Client}, above
L{imapmig.imap.connection}; taken out of the client's one class of 979
lines.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, cast

from twisted.mail.imap4 import IMAP4Client, IMAP4Exception, parseNestedParens
from twisted.python.failure import Failure

from imapmig.errors import FetchParseError, ServerBye, escapedExcerpt
from imapmig.imap.commands import CollectedCommand, PendingCommand
from imapmig.imap.compress import Inflater
from imapmig.imap.connection import IMAPConnection
from imapmig.imap.fetch import isFetchResponse
from imapmig.imap.lines import LinearLineReceiver
from imapmig.imap.signals import SignalAction, classifyBye

__all__ = ["MAX_RESPONSE_LENGTH", "ResponseReader", "capabilityMap"]

MAX_RESPONSE_LENGTH = 1024 * 1024
"""
The octets of one untagged response other than FETCH (lines and literals
together: a mailbox name sent as a literal): a larger literal announced is
a protocol error before any of it is read.  FETCH responses are read by
L{imapmig.imap.fetch}, with its own limits.
"""

_UNSOLICITED_LOGGED = 10
"""
Unsolicited responses logged per connection; after that they are counted
silently, so a flood cannot flood the log.
"""

_STATUSES = frozenset([b"OK", b"NO", b"BAD"])

# What Twisted's response parser raises on a malformed response.
_PARSE_ERRORS = (IMAP4Exception, ValueError, IndexError, KeyError, TypeError, AttributeError)


def capabilityMap(atoms: list[bytes]) -> dict[bytes, Any]:
    """
    Capability atoms as Twisted maps them: C{AUTH=PLAIN} to
    C{{b"AUTH": [b"PLAIN"]}}, C{IDLE} to C{{b"IDLE": None}}.
    """
    caps: dict[bytes, Any] = {}
    for atom in atoms:
        name, equals, value = atom.partition(b"=")
        caps.setdefault(name, []).append(value if equals else None)
    for name, values in caps.items():
        if values == [None]:
            caps[name] = None
    return caps


def _literalSize(line: bytes) -> int | None:
    """
    The size of the literal announced at the end of C{line} (C{{N}}), or
    L{None} if it announces none.
    """
    start = line.rfind(b"{")
    digits = line[start + 1 : -1]
    if start < 0 or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits)


_GREETING_STATES = {b"OK": "unauth", b"PREAUTH": "auth"}
"""
The state a greeting's status puts the session in (C{BYE} ends it).
"""


def _greetingCapabilities(text: bytes) -> dict[bytes, Any] | None:
    """
    The capabilities a greeting's text announces (C{[CAPABILITY ...]}), or
    L{None}.
    """
    if text[:12].upper() != b"[CAPABILITY ":
        return None
    end = text.find(b"]")
    return capabilityMap(text[12:end].split()) if end > 0 else None


def _expectedUnsolicited(head: bytes, rest: bytes) -> bool:
    """
    Whether an untagged response no command collects is one to expect
    and not log: a status response other than an alert, CAPABILITY,
    FLAGS, PREAUTH, ENABLED.

    @param head: its first four octets, upper-cased.
    """
    if head[:3] == b"OK " and rest[3:10].upper() != b"[ALERT]":
        return True
    return head.startswith((b"CAPA", b"FLAG", b"PREA", b"ENAB"))


def _byeError(text: bytes, peer: str, shown: str) -> Exception:
    """
    What everything pending fails with after a C{BYE} (outside LOGOUT):
    one that asks to wait, or says the account is over a limit, fails it
    the same way (L{imapmig.imap.signals}); any other is a L{ServerBye}.

    @param shown: C{text}, escaped and cut.
    """
    signal = classifyBye(text)
    error = None
    if signal.action in (SignalAction.RETRY, SignalAction.PAUSE):
        error = signal.error(peer)
    return error if error is not None else ServerBye(shown)


class ResponseReader(IMAPConnection):
    """
    An L{IMAPConnection} that reads what the server sends: greeting,
    tagged replies (matched in the command table, or the APPEND
    pipeline's side of it), untagged responses, continuation requests,
    FETCH responses (to the sink of the oldest fetch command), and
    C{BYE}.  Continuation requests are for an AUTHENTICATE in flight and
    the APPEND pipeline only.
    """

    def dataReceived(self, data: bytes) -> None:
        if self._lost is not None:
            return
        acks = self._acks
        if acks is not None and data:
            acks.rearm()
        deadline = self._deadline
        if deadline is not None:
            deadline.received(len(data))
        try:
            compression = self._compression
            if compression is None or not data:
                # Empty data is resumeProducing asking to go on with what
                # was kept while paused, which is already plain.
                LinearLineReceiver.dataReceived(self, data)
            else:
                self._inflateReceived(compression.inflater, data)
        except Exception:
            self._bug()

    def lineReceived(self, line: bytes) -> None:
        # While a fetch command is in flight, FETCH responses (and the
        # lines that continue one after a literal) go to the incremental
        # parser; every other line, and any FETCH while none is, keeps the
        # stock path.  A stock response already half-way through a literal
        # (self._parts) owns the next line whatever it looks like.
        parser = self._fetchParser
        if parser.inResponse or (self._table.fetches and self._parts is None and isFetchResponse(line)):
            try:
                parser.lineReceived(line)
            except FetchParseError as e:
                self._violation(f"an unreadable FETCH response ({e})", line)
                return
            if parser.wantsLiteral:
                self.setRawMode()
            return
        parts = self._parts
        if line[-1:] == b"}":
            size = _literalSize(line)
            if size is not None:
                self._literalAnnounced(line, size)
                return
        if parts is None:
            tag, _, rest = line.partition(b" ")
        else:
            if self._responseOctets + len(line) > MAX_RESPONSE_LENGTH:
                self._violation(f"a response longer than {MAX_RESPONSE_LENGTH} octets", line)
                return
            parts.append(line)
            tag, rest = cast(bytes, self._tag), b"".join(parts)
            self._tag = self._parts = None
            self._responseOctets = 0
        if tag == b"*":
            if self.state is None:
                self._greeting(rest)
            else:
                self._untagged(rest)
        elif self.state is None:
            self._violation("a reply before the greeting", line)
        elif tag == b"+":
            self._continuation(rest)
        else:
            self._tagged(tag, rest)

    def _literalAnnounced(self, line: bytes, size: int) -> None:
        """
        A response other than FETCH goes on in a literal of C{size} octets.
        """
        if self._parts is None:
            self._tag, _, text = line.partition(b" ")
            self._responseOctets = 0
        else:
            text = line
        total = self._responseOctets + len(text) + size
        if total > MAX_RESPONSE_LENGTH:
            self._violation(
                f"a literal of {size} octets outside a FETCH response"
                f" (the limit is {MAX_RESPONSE_LENGTH})",
                line,
            )
            return
        self._responseOctets = total
        self._setupForLiteral(text, size)

    def rawDataReceived(self, data: bytes) -> None:
        parser = self._fetchParser
        if not parser.wantsLiteral:
            self._stockRawData(data)
            return
        try:
            rest = parser.literalReceived(data)
        except FetchParseError as e:
            self._violation(f"an unreadable FETCH response ({e})", data)
            return
        if rest is not None:
            # What follows the literal continues the response: back to
            # lines (and to the parser, which is still in the response).
            self.setLineMode(rest)

    def _stockRawData(self, data: bytes) -> None:
        """
        Octets of a literal outside FETCH, for the stock parser, and
        perhaps of what follows it.
        """
        pending = getattr(self, "_pendingSize", None)
        if pending is not None and len(data) > pending:
            # The stock code strips CR and LF from what follows a
            # literal, so a literal that ends its response (a LIST
            # name sent as a literal) loses the line end, and the next
            # line (perhaps the tagged reply) is taken for the rest of
            # that response.  Hand the rest back untouched instead.
            IMAP4Client.rawDataReceived(self, data[:pending])
            self.setLineMode(data[pending:])
            return
        IMAP4Client.rawDataReceived(self, data)

    def rawDataFrom(self, data: bytes, pos: int) -> int:
        """
        Literal octets of a FETCH response are taken where they are in the
        read (L{FetchResponseParser.literalAt}), and the lines after the
        literal read from the same buffer: no copy of the rest of the read
        at each literal's end.  Any other raw octets (a literal outside
        FETCH) go to L{rawDataReceived} as before.
        """
        parser = self._fetchParser
        if not parser.wantsLiteral:
            return LinearLineReceiver.rawDataFrom(self, data, pos)
        try:
            end = parser.bodiesAt(data, pos, self._readingOn)
        except FetchParseError as e:
            self._violation(f"an unreadable FETCH response ({e})", data[pos : pos + 1024])
            return len(data)
        if end < 0:
            return len(data)
        # What follows the literal continues the response: back to lines
        # (and to the parser, which is still in the response).
        self.setLineMode()
        return end

    def literalSpace(self) -> memoryview | None:
        """
        Where a transport that can read in place (L{imapmig.imap.inplace})
        puts the next octets it reads: the rest of the FETCH literal being
        read, in its final buffer (L{FetchResponseParser.literalSpace});
        or L{None}, when the next octets are to be handed to
        L{dataReceived}: no such literal, the connection compressed,
        closing or paused, or octets received before still to be handed
        over (which come first).
        """
        if (
            self.line_mode
            or self._compression is not None
            or self._lost is not None
            or self._queued
            or self._receiving
            or self.paused
        ):
            return None
        return self._fetchParser.literalSpace()

    def literalFilled(self, octets: int) -> None:
        """
        C{octets} (at least one) were read into the view L{literalSpace}
        gave, now released: as if they had come to L{dataReceived}.
        """
        acks = self._acks
        if acks is not None:
            acks.rearm()
        deadline = self._deadline
        if deadline is not None:
            deadline.received(octets)
        try:
            # Complete or not, what comes next goes to the parser as raw
            # octets: the end of the literal's response (L{rawDataFrom}).
            self._fetchParser.literalFilled(octets)
        except Exception:
            self._bug()

    def _readingOn(self) -> bool:
        """
        Whether what was received is still to be handed over: not once
        the connection is closing or its reading is paused.
        """
        return not self.paused and not self.stopReading()

    def _greeting(self, rest: bytes) -> None:
        status, _, text = rest.partition(b" ")
        status = status.upper()
        if status == b"BYE":
            self._byeReceived(text)
            return
        state = _GREETING_STATES.get(status)
        if state is None:
            self._violation("a greeting that is not OK, PREAUTH or BYE", b"* " + rest)
            return
        self.state = state
        caps = _greetingCapabilities(text)
        if caps is not None:
            self._capCache = caps
        self._settled()
        self.serverGreeting(caps)

    def _tagged(self, tag: bytes, rest: bytes) -> None:
        """
        A tagged reply: find its command in the table, or the APPEND
        pipeline's side of it.
        """
        status, _, text = rest.partition(b" ")
        if status not in _STATUSES:
            status = status.upper()
            if status not in _STATUSES:
                self._violation("a tagged reply that is not OK, NO or BAD", tag + b" " + rest)
                return
        table = self._table
        table.sentAt.pop(tag, None)
        command = table.commands.pop(tag, None)
        if command is None:
            pipeline = self.pipeline
            if pipeline is None or not pipeline.ownsTag(tag):
                self._violation("a reply with an unknown tag", tag + b" " + rest)
                return
            pipeline.taggedReceived(tag, rest)
        else:
            table.answered(command)
            if not self._commandReply(command, status, text, rest):
                return
        self._settled()

    def _commandReply(
        self, command: PendingCommand, status: bytes, text: bytes, rest: bytes
    ) -> bool:
        """
        The tagged reply to C{command}, of the table: complete it, and let
        the next command of the stock queue go if it was the queue's.

        @return: whether the command could read its responses (else the
            connection is dropped).
        """
        try:
            command.complete(status, text, rest)
        except _PARSE_ERRORS:
            # Twisted's parser, reading what a stock command collected.
            lines = command.lines if isinstance(command, CollectedCommand) else []
            self._violation(
                f"an unparseable response to {command.name.decode('ascii', 'replace')}",
                lines[0] if lines else rest,
            )
            command.fail(Failure(self._dropped))
            return False
        if command.tag == self.waiting:
            # The stock queue's command: the next one may go.
            self.waiting = None
            self._flushQueue()
        return True

    def _untagged(self, rest: bytes) -> None:
        """
        An untagged response outside FETCH: to the oldest command that
        collects, or handled here.  C{EXISTS} and C{RECENT} never
        accumulate, C{EXPUNGE} and unsolicited C{FETCH} are dropped.
        """
        if rest[:1].isdigit():
            if self._numbered(rest):
                return
        elif rest[:3].upper() == b"BYE" and rest[3:4] in (b"", b" "):
            self._byeReceived(rest[4:])
            return
        collector = self._table.collector()
        if collector is None:
            self._unsolicitedResponse(rest)
        elif not collector.collect(rest):
            self._violation(
                f"more untagged responses to {collector.name.decode('ascii', 'replace')}"
                " than imapmig accepts (a flood)",
                rest,
            )

    def _numbered(self, rest: bytes) -> bool:
        """
        An untagged response that starts with a number: C{EXISTS} and
        C{RECENT} are counts, C{EXPUNGE} is dropped, and a C{FETCH} no
        command collects goes to Twisted's parser.

        @return: whether it was handled here; if not, it is collected as
            any other.
        """
        space = rest.find(b" ")
        kind = rest[space + 1 : space + 8].upper()
        if kind in (b"EXISTS", b"RECENT"):
            self._counted(kind, rest, space)
            return True
        if kind.startswith(b"EXPUNGE"):
            return True
        if kind.startswith(b"FETCH") and not self._table.collectors:
            self._unsolicitedFetch(rest)
            return True
        return False

    def _counted(self, kind: bytes, rest: bytes, space: int) -> None:
        """
        C{EXISTS} or C{RECENT}: the latest count replaces the collecting
        command's earlier one; without one, the stock client is told.
        """
        collector = self._table.collector()
        if collector is not None:
            collector.replace(kind, rest)
        elif rest[:space].isdigit():
            count = int(rest[:space])
            if kind == b"EXISTS":
                self.newMessages(count, None)
            else:
                self.newMessages(None, count)

    def _unsolicitedFetch(self, rest: bytes) -> None:
        """
        A FETCH response while no command takes it (another client changed
        flags): Twisted's parser reads it for C{flagsChanged}.
        """
        try:
            IMAP4Client._extraInfo(self, [parseNestedParens(rest)])
        except _PARSE_ERRORS:
            self._violation("an unparseable FETCH response", rest)

    def _unsolicitedResponse(self, rest: bytes) -> None:
        """
        An untagged response no command collects: status responses are
        expected (C{OK [CLOSED]}, keep-alives), alerts and warnings are
        logged, the rest is logged as ignored; at most
        L{_UNSOLICITED_LOGGED} log lines per connection.
        """
        head = rest[:4].upper()
        if _expectedUnsolicited(head, rest):
            return
        self._unsolicited += 1
        if self._unsolicited > _UNSOLICITED_LOGGED:
            return
        if head.startswith((b"NO ", b"BAD ", b"OK ")):
            self._log.warn(
                "{session} says: {text}", session=self.peer, text=escapedExcerpt(rest, 200)
            )
        else:
            self._log.info(
                "{session}: unsolicited response ignored: {text}",
                session=self.peer,
                text=escapedExcerpt(rest),
            )
        if self._unsolicited == _UNSOLICITED_LOGGED:
            self._log.info(
                "{session}: further unsolicited responses are not logged", session=self.peer
            )

    def _byeReceived(self, text: bytes) -> None:
        """
        The server said BYE.  After LOGOUT that is expected; otherwise it is
        ending the session: everything pending fails with L{ServerBye} and
        the connection is closed (bounded).
        """
        self._byeText = escapedExcerpt(text, 300)
        if self._loggingOut:
            return
        self._log.warn("{session} says BYE: {text}", session=self.peer, text=self._byeText)
        pipeline = self.pipeline
        if pipeline is not None and pipeline.busy:
            # The APPEND pipeline fails first, with what the BYE means for
            # its messages (wait, pause, or their outcome unknown).
            pipeline.untaggedReceived(b"BYE " + text)
        self._failAll(Failure(_byeError(text, self.peer, self._byeText)))
        self.close()

    def _continuation(self, rest: bytes) -> None:
        responder = self._responder
        if responder is not None:
            self._challenged(responder, rest)
            return
        pipeline = self.pipeline
        if pipeline is None or not pipeline.busy or pipeline.betweenCommands:
            self._violation("a continuation request nobody asked for", b"+ " + rest)
            return
        if self._deadline is not None:
            self._deadline.progress()
        pipeline.continuationReceived(rest)

    def _challenged(self, responder: Callable[[bytes], bytes | None], rest: bytes) -> None:
        """
        A continuation request of an AUTHENTICATE in flight: answered with
        the line its C{responder} gives, or a protocol error if it has
        none.
        """
        response = responder(rest)
        if response is None:
            self._violation("a continuation request nobody asked for", b"+ " + rest)
            return
        if self._deadline is not None:
            self._deadline.progress()
        self.connection.write(response + b"\r\n")

    def _inflateReceived(self, inflater: Inflater, data: bytes) -> None:
        """
        Inflate compressed octets from the server and parse the result.
        """
        try:
            plain = inflater.inflate(data)
        except zlib.error as e:
            self._violation(f"the compressed stream is corrupt ({e})", data)
            return
        if plain:
            LinearLineReceiver.dataReceived(self, plain)
