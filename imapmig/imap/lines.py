# -*- test-case-name: tests.test_imap_lines -*-
# mypy: disallow-untyped-calls=False
# (LineReceiver's lineLengthExceeded and rawDataReceived are unannotated.)
"""
Line splitting in linear time.

Twisted's L{LineReceiver} appends every read to its buffer and splits the
whole buffer again, and copies the rest of the buffer for every line: a
long line arriving in many reads costs time quadratic in its length (a
100 MB line without CRLF was read at about 1 MB/s), and a read holding
many short lines costs time quadratic in their number.
L{LinearLineReceiver} keeps the same interface (C{lineReceived},
C{rawDataReceived}, C{setLineMode}, C{setRawMode}, C{clearLineBuffer},
C{lineLengthExceeded}, C{MAX_LENGTH}) but scans each octet for the
delimiter once: a read is searched from where the last line ended, and
the start of an unfinished line is kept as a list of the reads that
brought it, joined once when its CRLF arrives.  Raw octets in the middle of
a read (a literal followed by more lines) can be taken in place
(L{LinearLineReceiver.rawDataFrom}), so that the rest of the read is not
copied at each switch between raw data and lines.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from twisted.protocols.basic import LineReceiver


_START = 1024
"""
How much of a line too long is handed to C{lineLengthExceeded}.
"""


def _startOf(pieces: list[bytes]) -> bytes:
    """
    The first L{_START} octets of the concatenation of C{pieces}, joining
    only as many as needed.
    """
    taken = []
    size = 0
    for piece in pieces:
        taken.append(piece)
        size += len(piece)
        if size >= _START:
            break
    return b"".join(taken)[:_START]


def _partialEnd(partial: list[bytes], data: bytes, pos: int) -> tuple[int, int, int] | None:
    """
    Where the line begun in C{partial} ends in C{data}, from C{pos}: the
    end of its octets in C{data}, the position after its CRLF, and -1 if
    its CR ended C{partial} (to be cut off the joined line), else 0; or
    L{None} if it does not end in C{data}.
    """
    if partial[-1][-1:] == b"\r" and data[pos : pos + 1] == b"\n":
        return pos, pos + 1, -1
    end = data.find(b"\r\n", pos)
    return None if end < 0 else (end, end + 2, 0)


class LinearLineReceiver(LineReceiver):
    """
    A L{LineReceiver} whose line splitting is linear in the octets received.

    The delimiter is always CRLF.  Pausing (C{pauseProducing} on the
    protocol) works as in L{LineReceiver}: what arrives meanwhile is kept
    and handled on C{resumeProducing}.

    @ivar MAX_LENGTH: the longest line accepted; for a longer one, as soon
        as it is known to be too long, its first L{_START} octets are handed
        to L{lineLengthExceeded}, and nothing more is read.
    """

    delimiter = b"\r\n"
    _receiving = False
    _data = b""
    _pos = 0
    _partialSize = 0

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        self._queued: deque[bytes] = deque()

    def stopReading(self) -> bool:
        """
        Whether to stop handing over what was received (the connection is
        being closed); the rest is discarded.
        """
        transport: Any = self.transport
        return transport is not None and bool(transport.disconnecting)

    def dataReceived(self, data: bytes) -> None:
        """
        Split C{data} into lines (or hand it over raw), after what is
        already buffered.  Data received while this runs (from a callback
        of C{lineReceived}) or while paused is queued and handled in order.
        """
        queued = self._queued
        if data:
            queued.append(data)
        if self._receiving:
            return
        self._receiving = True
        try:
            while queued and not self.paused and not self.stopReading():
                self._consume(queued.popleft())
        finally:
            self._receiving = False

    def _consume(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        while self._pos < len(self._data):
            if self.stopReading():
                break
            if self.paused:
                # Kept for resumeProducing, before anything queued.
                self._queued.appendleft(self._data[self._pos :])
                break
            if self.line_mode:
                self._lines()
            else:
                data, pos = self._data, self._pos
                self._data, self._pos = b"", 0
                end = self.rawDataFrom(data, pos)
                if end < len(data):
                    # Taken in place up to there: the rest is still this
                    # read, for lines (or more raw octets) from there.
                    self._data, self._pos = data, end
        self._data = b""
        self._pos = 0

    def rawDataFrom(self, data: bytes, pos: int) -> int:
        """
        Raw octets arrived: C{data} from C{pos} on, the rest of a read.

        By default they all go to C{rawDataReceived} (sliced off C{data}
        unless C{pos} is 0).  A subclass that can take its raw octets
        where they are (a literal of known size, with more lines after it
        in the same read) overrides this: it takes what it needs, perhaps
        switches back to line mode (C{setLineMode()}, with no extra), and
        says where it stopped; the rest of C{data} is then handled from
        there, as if it had just arrived, without being copied.

        @param data: the current read.
        @param pos: where the raw octets start in it.
        @return: the position in C{data} after the octets taken:
            C{len(data)} when all were.
        """
        self.rawDataReceived(data[pos:] if pos else data)
        return len(data)

    def _lines(self) -> None:
        """
        Hand over the complete lines of the current read, from C{_pos}, as
        long as in line mode; keep the start of an unfinished line.
        """
        data = self._data
        pos = self._pos
        limit = self.MAX_LENGTH
        if self._partial and not self._finishPartial(data):
            return
        pos = self._pos
        while self.line_mode:
            end = data.find(b"\r\n", pos)
            if end < 0:
                self._keepPartial(data[pos:] if pos else data)
                return
            if end - pos > limit:
                self._exceeded(data[pos : min(end, pos + _START)])
                return
            line = data[pos:end]
            self._pos = pos = end + 2
            self.lineReceived(line)
            if self._data is not data or self.paused or self.stopReading():
                # clearLineBuffer took the rest, the protocol was paused,
                # or the connection is closing.
                return
            pos = self._pos

    def _finishPartial(self, data: bytes) -> bool:
        """
        Complete the line begun in earlier reads with the start of C{data}.

        @return: whether a line was completed (and handed over).
        """
        partial = self._partial
        pos = self._pos
        found = _partialEnd(partial, data, pos)
        if found is None:
            self._keepPartial(data[pos:] if pos else data)
            return False
        end, after, tail = found
        size = self._partialSize + (end - pos) + tail
        if size > self.MAX_LENGTH:
            self._exceeded(_startOf(partial))
            return False
        partial.append(data[pos:end])
        line = b"".join(partial)
        if tail:
            line = line[:tail]
        self._partial = []
        self._partialSize = 0
        self._pos = after
        self.lineReceived(line)
        return self._data is data and not self.paused and not self.stopReading()

    def _keepPartial(self, piece: bytes) -> None:
        self._pos = len(self._data)
        if not piece:
            # The read ended on a line's end: nothing is begun.
            return
        size = self._partialSize + len(piece)
        # One octet over the limit may be the CR of the delimiter.
        if size > self.MAX_LENGTH + 1:
            self._exceeded(_startOf(self._partial + [piece]))
            return
        self._partial.append(piece)
        self._partialSize = size

    def _exceeded(self, start: bytes) -> None:
        """
        A line is too long: drop everything buffered and hand its start
        (about L{_START} octets: never a copy of the whole line) to
        C{lineLengthExceeded}.
        """
        self._partial = []
        self._partialSize = 0
        self._queued.clear()
        self._data = b""
        self._pos = 0
        self.lineLengthExceeded(start)

    def setLineMode(self, extra: bytes = b"") -> None:
        """
        Back to lines; C{extra} (what followed raw data, handed back by
        C{rawDataReceived}) is split into lines before anything received
        later.
        """
        self.line_mode = 1
        if extra:
            if self._receiving:
                self._queued.appendleft(extra)
            else:
                # Not self.dataReceived: a subclass may decode what it
                # receives (decompress), and C{extra} is already decoded.
                LinearLineReceiver.dataReceived(self, extra)

    def clearLineBuffer(self) -> bytes:
        """
        Forget everything received and not yet handed over (the start of an
        unfinished line, the rest of the current read, queued reads).

        @return: those octets, in order.
        """
        pieces = self._partial
        pieces.append(self._data[self._pos :])
        pieces.extend(self._queued)
        self._partial = []
        self._partialSize = 0
        self._queued.clear()
        self._data = b""
        self._pos = 0
        return b"".join(pieces)
