# -*- test-case-name: tests.test_imap_fetch -*-
"""
Reading untagged C{FETCH} responses incrementally, message bodies included.

Twisted's L{IMAP4Client} joins a literal into its response line and parses
the result a character at a time (C{parseNestedParens}): fine for a flag
list, hopeless for a body of megabytes.  L{FetchResponseParser} instead
takes the short, non-literal parts of a response line by line, and the
octets of each literal as they arrive, in as many pieces as the transport
delivers.  Literal octets are never looked at: a literal within one read
is sliced off it (its one copy; none when it is the whole read), one that
spans reads is read into its final C{bytes}, allocated once at its size
(L{imapmig.imap.literal.LiteralBuffer}): the parts of reads that hold it
are copied in, and the rest can be read straight into it by the
transport (L{FetchResponseParser.literalSpace}: C{recv_into}, OpenSSL's
C{SSL_read}), with no copy in Python at all; the lines
around them are split by a small tokenizer (L{imapmig.imap.syntax}: atoms,
quoted strings with backslash escapes, parenthesised lists, C{NIL}, C{{N}}
and C{~{N}} literals); each response becomes a L{FetchedItem}
(L{imapmig.imap.fetcheditem}).

A FETCH response looks like this on the wire (RFC 3501 7.4.2, RFC 3516 and
RFC 7162 for literal8 and MODSEQ)::

    * 1 FETCH (UID 5 RFC822.SIZE 1234 FLAGS (\\Seen) BODY[] {1234}\\r\\n
    <1234 octets> FLAGS (\\Seen $Forwarded))\\r\\n

The parser does no network I/O: the client (L{imapmig.imap.client})
decides which lines it gets and switches the transport to raw mode while it
asks for literal octets.  A reply to a body fetch, response after response
of C{UID}, the section and its literal, is read a read at a time
(L{FetchResponseParser.bodiesAt}): no line of it goes back through the
client.

Bounded whatever the server sends (L{FetchLimits}): a literal is checked
against the limits when its marker arrives, before any of its octets is
read, and a response announcing more literal octets than allowed fails
with L{FetchParseError} (the client then drops the connection).  A
literal of message data larger than L{FetchLimits.spoolAbove} is written
to an unlinked temporary file as it arrives (a L{SpooledLiteral}, in
L{FetchedItem.spooled}), never held in memory; literals up to that size
stay one buffer each.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any, Callable

from attrs import evolve, frozen

from imapmig.errors import FetchParseError, FetchSpoolError
from imapmig.imap.fetcheditem import FetchedItem, isMessageData, itemOf, listedItem, madeItem
from imapmig.imap.literal import LiteralReading
from imapmig.imap.spool import SpooledLiteral
from imapmig.imap.syntax import Value, scan

__all__ = [
    "DEFAULT_MAX_LITERAL",
    "FetchLimits",
    "FetchResponseParser",
    "isFetchResponse",
]

_SP = 0x20
_LPAREN = 0x28

DEFAULT_MAX_LITERAL = 256 * 1024 * 1024
"""
The most literal octets one FETCH response may announce, unless the
parser's L{FetchLimits} say otherwise: well above the largest message
common servers accept (Microsoft 365: 150 MB; Gmail: 25 MB), far below
what would exhaust a small machine.
"""


@frozen
class FetchLimits:
    """
    What a L{FetchResponseParser} accepts, and what it keeps in memory.

    @ivar maxLiteral: the most literal octets one response may announce
        (one literal or several together); more fails the response before
        any of them is read.
    @ivar maxTotal: the most literal octets all responses together may
        announce from when these limits were set on the parser, or L{None}
        for no such bound: a caller that knows what it asked for (the
        listed sizes of the messages it fetches) bounds what a server can
        make it store.
    @ivar spoolAbove: literals of message data (C{BODY[...]},
        C{BINARY[...]}, C{RFC822...}) larger than this go to a temporary
        file, as do those that would take the literals of one response
        held in memory above it; L{None}: every literal is held in memory.
        With spooling on, a literal that is not message data and would
        take a response above it is refused.
    @ivar spoolDirectory: where temporary files go; L{None}: the default
        temporary directory (L{tempfile.gettempdir}: C{$TMPDIR}, else
        C{/tmp}).
    """

    maxLiteral: int = DEFAULT_MAX_LITERAL
    maxTotal: int | None = None
    spoolAbove: int | None = None
    spoolDirectory: str | None = None

def isFetchResponse(line: bytes) -> bool:
    """
    Whether C{line} starts an untagged C{FETCH} response (C{* <n> FETCH}).
    Only the first few octets are looked at.
    """
    if not line.startswith(b"* "):
        return False
    space = line.find(b" ", 2, 24)
    if space < 3 or not line[2:space].isdigit():
        return False
    return line[space + 1 : space + 7].upper() in (b"FETCH ", b"FETCH(")

_IDLE = 0
_LINE = 1
_LITERAL = 2

# The first line of the response to a body fetch as servers write it
# (C{* 12 FETCH (UID 34 BODY[] {5678}}): read without the tokenizer, which
# would find the same elements.  Anything else takes the general path.
_BODY_LINE_PATTERN = (
    rb"\* ([0-9]{1,10}) FETCH \((UID) ([0-9]{1,10}) (BODY\[\]|BINARY\[\]) ~?\{([0-9]{1,18})\}"
)
_BODY_START = re.compile(_BODY_LINE_PATTERN + rb"\Z")

# The same line at a position in a read, its CRLF behind it: where one body
# response ends in a read and the next begins (L{FetchResponseParser.bodiesAt}).
_BODY_LINE = re.compile(_BODY_LINE_PATTERN + rb"\r\n")


# A whole response to a listing (C{UID FETCH ... (UID FLAGS INTERNALDATE
# RFC822.SIZE)}) as servers write it, flags made of atoms only, the date
# spelled as RFC 3501 shows it (the month capitalised): read without the
# tokenizer, the date's fields found by the same match, into the same item.
_LISTING = re.compile(
    rb"\* ([0-9]{1,10}) FETCH \(UID ([0-9]{1,10}) FLAGS \(([^\x00-\x1f()\"{}\[\]\x7f]*)\) "
    rb'INTERNALDATE "( ?[0-9]{1,2})-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-([0-9]{4}) '
    rb'([0-9]{2}):([0-9]{2}):([0-9]{2}) ([-+][0-9]{4})" RFC822\.SIZE ([0-9]{1,18})\)\Z'
)


def _tooLarge(size: int, before: int, limit: int) -> FetchParseError:
    """
    The error for a literal of C{size} octets announced after C{before}
    in the same response, above the C{limit} per response.
    """
    after = f" after {before} in the same response" if before else ""
    return FetchParseError(
        f"a literal of {size} octets announced{after}, "
        f"above the limit of {limit} octets per response"
    )


def _literalEnd(literal: LiteralReading | None, data: bytes, pos: int, end: int) -> bytes:
    """
    A literal held in memory that ends at C{end} in C{data}, its octets in
    this read from C{pos}: the rest of one begun in an earlier read (or
    read in place) copied into its final buffer, which becomes its
    C{bytes}; else the read itself (uncopied) or its one slice.
    """
    if literal is not None:
        if end > pos:
            literal.copy(data, pos, end - pos)
        return literal.take()
    if pos == 0 and end == len(data):
        return data
    return data[pos:end]


class FetchResponseParser:
    """
    Turns untagged C{FETCH} responses, fed a line or a piece of literal at a
    time, into L{FetchedItem}s.

    The feeder gives it a line that starts a FETCH response
    (L{isFetchResponse}) with L{lineReceived}; while L{wantsLiteral} it
    gives the following octets to L{literalReceived}, in pieces of any
    size, which hands back what follows the literal; while L{inResponse}
    (after a literal) the next line continues the same response.  Each
    complete response goes to C{itemReceived}.

    Each literal is checked against L{limits} when its marker arrives, and
    held in memory or spooled to a temporary file as they say.  A response
    that cannot be parsed, or is beyond the limits, raises
    L{FetchParseError} and leaves the parser idle (any file of that
    response closed); the connection cannot be trusted after that.
    """

    __slots__ = (
        "_itemReceived",
        "_limits",
        "_state",
        "_sequence",
        "_stack",
        "_root",
        "_literal",
        "_remaining",
        "_spool",
        "_spooled",
        "_responseOctets",
        "_memoryOctets",
        "_totalOctets",
        "_bodyOnly",
    )

    def __init__(
        self, itemReceived: Callable[[FetchedItem], object], limits: FetchLimits = FetchLimits()
    ) -> None:
        """
        @param itemReceived: called with each complete response.
        @param limits: what is accepted and what is spooled; see
            L{limits}.
        """
        self._itemReceived = itemReceived
        self._limits = limits
        self._state = _IDLE
        self._sequence = 0
        self._root: list[Value] = []
        self._stack: list[list[Value]] = []
        # The literal in progress, read into its final bytes (when it does
        # not lie within one read).
        self._literal: LiteralReading | None = None
        self._remaining = 0
        self._spool: SpooledLiteral | None = None
        self._spooled: list[tuple[int, bytes, SpooledLiteral]] = []
        self._responseOctets = 0
        self._memoryOctets = 0
        self._totalOctets = 0
        # Whether the response in progress began as _BODY_START matches.
        self._bodyOnly = False

    @property
    def limits(self) -> FetchLimits:
        """
        What the parser accepts and spools.  Setting new limits starts
        counting L{FetchLimits.maxTotal} afresh; they apply from the next
        literal marker on.
        """
        return self._limits

    @limits.setter
    def limits(self, limits: FetchLimits) -> None:
        self._limits = limits
        self._totalOctets = 0

    def allowMore(self, octets: int) -> None:
        """
        Raise L{FetchLimits.maxTotal} of the current limits by C{octets},
        still counting from when they were set: for a command sent while
        the responses of those the limits were set for are still arriving.

        @param octets: how many more literal octets the responses may
            announce in all; nothing changes when there is no C{maxTotal}.
        """
        limits = self._limits
        if limits.maxTotal is not None:
            self._limits = evolve(limits, maxTotal=limits.maxTotal + octets)

    @property
    def inResponse(self) -> bool:
        """
        Whether a response has started and not ended: the next line, or
        the next octets, belong to it.
        """
        return self._state != _IDLE

    @property
    def wantsLiteral(self) -> bool:
        """
        Whether the next octets are literal octets, for L{literalReceived}.
        """
        return self._state == _LITERAL

    @property
    def literalRemaining(self) -> int:
        """
        How many octets of the current literal are still to come.
        """
        return self._remaining if self._state == _LITERAL else 0

    def reset(self) -> None:
        """
        Forget a response in progress (the connection was lost), closing
        the files of its spooled literals.
        """
        self._state = _IDLE
        self._root = []
        self._stack = []
        literal, self._literal = self._literal, None
        if literal is not None:
            literal.drop()
        self._remaining = 0
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.close()
        spooled, self._spooled = self._spooled, []
        for _, _, done in spooled:
            done.close()
        self._responseOctets = 0
        self._memoryOctets = 0

    def lineReceived(self, line: bytes) -> None:
        """
        A line (without its CRLF): the start of a FETCH response when idle,
        else the continuation of the current one after its literal.

        @raise FetchParseError: the line is malformed, or announces a
            literal beyond the limits (the parser is then idle again).
        """
        try:
            if self._state == _IDLE:
                match = _BODY_START.match(line)
                if match is not None:
                    self._startBody(match)
                    return
                match = _LISTING.match(line)
                if match is not None:
                    self._itemReceived(listedItem(match))
                    return
                pos = self._start(line)
            elif self._state == _LINE:
                if line == b")" and self._bodyEnds():
                    return
                pos = 0
            else:
                raise FetchParseError("a line where literal octets were expected")
            self._continue(line, pos)
        except FetchParseError:
            self.reset()
            raise

    def literalReceived(self, data: bytes) -> bytes | None:
        """
        Octets of the current literal, and perhaps of what follows it.

        @return: L{None} while the literal is incomplete; once complete,
            the octets that followed it in C{data} (perhaps empty), which
            belong to the line that continues the response (or follow
            the response, when L{literalAt} ended it).
        @raise FetchSpoolError: a spooled literal could not be written (the
            parser is then idle again).
        """
        end = self.literalAt(data, 0)
        if end < 0:
            return None
        return data[end:] if end else data

    def literalAt(self, data: bytes, pos: int) -> int:
        """
        Octets of the current literal: C{data} from C{pos} on, and perhaps
        what follows the literal.  Only the literal's octets are copied
        (into its final buffer, or sliced off C{data}): a reader that
        keeps its read and a position in it hands the rest over without
        slicing.

        @param pos: where the literal's octets start in C{data} (at most
            C{len(data)}).
        @return: -1 while the literal is incomplete (all of C{data} taken);
            once complete, the position in C{data} just after it, where
            the line that continues the response starts; or, for a
            response that is just C{UID}, the section and its literal
            held in memory (as L{_BODY_START} starts one) ending right
            behind it in C{data} (C{)} CRLF), the position after that
            line, the response done (its item made) and the parser idle.
        @raise FetchSpoolError: a spooled literal could not be written (the
            parser is then idle again).
        """
        remaining = self._remaining
        available = len(data) - pos
        spool = self._spool
        if available < remaining:
            if available:
                if spool is None:
                    self._reading().copy(data, pos, available)
                else:
                    self._write(spool, memoryview(data)[pos:] if pos else data)
            self._remaining = remaining - available
            return -1
        end = pos + remaining
        if spool is None:
            self._stack[-1].append(_literalEnd(self._literal, data, pos, end))
            self._literal = None
            self._remaining = 0
            self._state = _LINE
            if self._bodyOnly and data.startswith(b")\r\n", end) and self._bodyEnds():
                # The response ends right behind its literal, in this read:
                # its item is made here, with no trip through line mode.
                return end + 3
        else:
            self._remaining = 0
            self._write(spool, memoryview(data)[pos:end] if pos or end < len(data) else data)
            self._spool = None
            root = self._root
            name = root[-1]
            assert isinstance(name, bytes)
            self._spooled.append((len(root), name, spool))
            root.append(b"")
        self._state = _LINE
        return end

    def literalSpace(self) -> memoryview | None:
        """
        Where the rest of the current literal goes, for a reader that can
        read it in place (C{recv_into} on the socket, OpenSSL's
        C{SSL_read}): a writable view of the literal's final buffer from
        the first octet still to come, as long as what is still to come;
        or L{None} when no literal held in memory is being read, or all of
        it is in (the next octets go to L{literalAt}).  The reader writes
        some of the view from its start, releases the view (C{release()}:
        the buffer cannot become C{bytes} while a view of it is held),
        then says how many octets it wrote (L{literalFilled}).
        """
        if self._state != _LITERAL or self._spool is not None or not self._remaining:
            return None
        return self._reading().space()

    def literalFilled(self, octets: int) -> bool:
        """
        C{octets} (at least one, at most L{literalRemaining}) were written
        at the start of the view L{literalSpace} gave, now released.

        A literal read in place to its end is still awaited
        (L{wantsLiteral}, none of it L{literalRemaining}): the octets that
        follow it go to L{literalAt} (or L{bodiesAt}), which ends it there,
        and ends a body response whose C{)} follows at once, and reads the
        body responses after it, as for a literal read in a read.

        @return: whether all of the literal is in.
        """
        literal = self._literal
        assert literal is not None
        literal.filled += octets
        remaining = self._remaining - octets
        self._remaining = remaining
        return not remaining

    def _reading(self) -> LiteralReading:
        """
        The final buffer of the literal being read, allocated when first
        needed (all of its L{_remaining} octets then still to come).
        """
        literal = self._literal
        if literal is None:
            literal = self._literal = LiteralReading(self._remaining)
        return literal

    def bodiesAt(self, data: bytes, pos: int, proceed: Callable[[], bool]) -> int:
        """
        L{literalAt}; then, while the response is done and C{proceed()}
        says so, each body response that begins next in C{data} with a
        whole first line as L{_BODY_START} reads one, taken in place: its
        line and its literal read here, and its closing line where
        L{literalAt} can end it, with no line handed to L{lineReceived}.
        A server's reply to a body fetch (C{* 1 FETCH (UID 5 BODY[]
        {1234}}, the body, C{)}, the next) is read so a read at a time.

        @param proceed: whether to go on to the next response (not when
            the connection is closing, or its reading paused, by what an
            item's receiver did).
        @return: as L{literalAt}: -1 while the literal last begun is
            incomplete (all of C{data} taken), else the position in
            C{data} after what was taken, the parser idle or within a
            response (its next line from there).
        @raise FetchParseError: a response is beyond the limits (the
            parser is then idle again).
        """
        end = self.literalAt(data, pos)
        while end >= 0 and self._state == _IDLE and proceed():
            match = _BODY_LINE.match(data, end)
            if match is None:
                return end
            try:
                self._startBody(match)
            except FetchParseError:
                self.reset()
                raise
            end = match.end()
            if self._state != _LITERAL:
                # An empty literal, already taken: the line goes on.
                return end
            end = self.literalAt(data, end)
        return end

    def _write(self, spool: SpooledLiteral, data: bytes | memoryview) -> None:
        try:
            spool.write(data)
        except OSError as e:
            self.reset()
            raise FetchSpoolError(
                f"cannot write a literal of {len(spool)} octets to a temporary file: "
                f"{e.strerror or e}"
            ) from None

    def _start(self, line: bytes) -> int:
        """
        Read C{* <n> FETCH (} and open the attribute list.

        @return: the position after the opening parenthesis.
        """
        if not isFetchResponse(line):
            raise FetchParseError("not a FETCH response")
        space = line.index(b" ", 2)
        self._sequence = int(line[2:space])
        pos = space + 6
        while pos < len(line) and line[pos] == _SP:
            pos += 1
        if pos >= len(line) or line[pos] != _LPAREN:
            raise FetchParseError("FETCH without a parenthesised list")
        self._bodyOnly = False
        self._root = []
        self._stack = [self._root]
        self._spooled = []
        self._responseOctets = 0
        self._memoryOctets = 0
        return pos + 1

    def _startBody(self, match: re.Match[bytes]) -> None:
        """
        Start a response whose first line matched L{_BODY_START}: its
        attribute list so far is C{UID <uid> <section>}, and a literal
        follows.
        """
        sequence, uidName, uid, section, size = match.groups()
        self._sequence = int(sequence)
        self._bodyOnly = True
        self._root = root = [uidName, uid, section]
        self._stack = [root]
        self._spooled = []
        self._responseOctets = 0
        self._memoryOctets = 0
        self._literalFollows(int(size))

    def _bodyEnds(self) -> bool:
        """
        The closing parenthesis of a response that is C{UID <uid>
        <section> <literal>} (as L{_BODY_START} starts one), its literal
        held in memory: its item is made without the tokenizer, as L{itemOf}
        would make it.

        @return: whether the response was such a one (and is done);
            otherwise nothing is changed.
        """
        # _BODY_START matched the name, the UID and the section (bytes);
        # the literal, not spooled, is in memory.
        root: list[Any] = self._root
        if not self._bodyOnly or len(root) != 4 or self._spooled or len(self._stack) != 1:
            return False
        _, uid, section, body = root
        sequence = self._sequence
        self._state = _IDLE
        self._root = []
        self._stack = []
        self._responseOctets = 0
        self._memoryOctets = 0
        self._itemReceived(madeItem(sequence, int(uid), None, None, None, {section: body}))
        return True

    def _literalFollows(self, size: int) -> None:
        """
        A literal of C{size} octets is announced: admit it and wait for its
        octets (or take an empty one at once).
        """
        if size == 0:
            self._stack[-1].append(b"")
            self._state = _LINE
        else:
            self._admit(size)
            self._remaining = size
            self._state = _LITERAL

    def _continue(self, line: bytes, pos: int) -> None:
        end = len(line)
        stack = self._stack
        pos, size = scan(line, pos, end, stack)
        if size < 0:
            if stack:
                raise FetchParseError("the line ends inside a parenthesised list")
            self._finish()
            return
        if line[pos:].strip(b" ") or not stack:
            raise FetchParseError("a literal marker that does not end the line")
        self._literalFollows(size)

    def _admit(self, size: int) -> None:
        """
        Check a literal of C{size} octets against the limits, before any of
        it is read, and decide where it goes: memory, or a new spool.

        @raise FetchParseError: it is beyond the limits.
        @raise FetchSpoolError: its spool cannot be created.
        """
        limits = self._limits
        before = self._responseOctets
        if before + size > limits.maxLiteral:
            raise _tooLarge(size, before, limits.maxLiteral)
        total = self._totalOctets
        if limits.maxTotal is not None and total + size > limits.maxTotal:
            raise FetchParseError(
                f"a literal of {size} octets announced after {total}, "
                f"above the {limits.maxTotal} octets expected for the messages asked for"
            )
        spoolAbove = limits.spoolAbove
        if spoolAbove is not None and self._memoryOctets + size > spoolAbove:
            self._startSpool(size, limits, spoolAbove)
        else:
            self._memoryOctets += size
        self._responseOctets = before + size
        self._totalOctets = total + size

    def _startSpool(self, size: int, limits: FetchLimits, spoolAbove: int) -> None:
        """
        The literal about to be read goes to a new spool: it is message
        data too large to hold in memory (else it is refused).

        @raise FetchParseError: it is not message data.
        @raise FetchSpoolError: its spool cannot be created.
        """
        if not self._atMessageData():
            raise FetchParseError(
                f"a literal of {size} octets that is not message data, "
                f"above the {spoolAbove} octets held in memory"
            )
        try:
            self._spool = SpooledLiteral.create(size, limits.spoolDirectory)
        except OSError as e:
            raise FetchSpoolError(
                f"cannot create a temporary file for a literal of {size} octets "
                f"in {limits.spoolDirectory or tempfile.gettempdir()}: {e.strerror or e}"
            ) from None

    def _atMessageData(self) -> bool:
        """
        Whether the literal about to be read is the value of a message data
        item (C{BODY[]}, C{BINARY[1]}, C{RFC822}) of the attribute list.
        """
        stack = self._stack
        if len(stack) != 1:
            return False
        root = stack[0]
        if len(root) % 2 != 1:
            return False
        name = root[-1]
        if not isinstance(name, bytes):
            return False
        return isMessageData(name.upper())

    def _finish(self) -> None:
        root, sequence, spooled = self._root, self._sequence, self._spooled
        self._spooled = []
        self.reset()
        try:
            item = itemOf(sequence, root, spooled)
        except FetchParseError:
            for _, _, spool in spooled:
                spool.close()
            raise
        self._itemReceived(item)
