# -*- test-case-name: tests.test_sources_mbox -*-
"""
A sliding view of an open mbox file, for its listing: separators, escaped
lines and header bounds found with C{bytes.find} over chunks read with
C{pread} (taken out of the mbox source's module, which grew too big to
read).
"""

from __future__ import annotations

import os

from imapmig.sources.mbox.quoting import MboxQuoting

__all__ = ["FROM_LINE_LIMIT", "HEADER_LIMIT", "SEPARATOR", "Window"]

# Octets read per system call while listing.
_CHUNK = 1024 * 1024

# At most this much of a message's header is examined for flags and a
# Content-Length field.
HEADER_LIMIT = 256 * 1024

# At most this much of a From line is examined for its date.
FROM_LINE_LIMIT = 1000

# Searches over at most this many octets keep their range in view.
_KEEP = HEADER_LIMIT + 2 * FROM_LINE_LIMIT

SEPARATOR = b"\nFrom "
_ESCAPED = b">From "

# Where the next message's From line may start after a message delimited by
# Content-Length: seen in the octets from the one before its end on (at
# that offset in them), that line and how far after the end it starts
# (right there, or after one empty line).
_FOLLOWING = ((0, b"\nFrom ", 0), (1, b"\nFrom ", 1), (1, b"\r\nFrom ", 2))


class Window:
    """
    A sliding view of an open file, read in chunks of L{_CHUNK} octets with
    C{pread}, never beyond the size the file had when the scan started.

    @ivar size: that size.
    @ivar base: the file offset of C{data}'s first octet.
    @ivar data: the octets in view.
    """

    __slots__ = ("_fd", "size", "base", "data")

    def __init__(self, fd: int, size: int) -> None:
        """
        @param fd: the open file (not owned).
        @param size: its size.
        """
        self._fd = fd
        self.size = size
        self.base = 0
        self.data = b""

    def _read(self, offset: int) -> bytes:
        """
        Up to one chunk from C{offset}, not beyond L{size}.

        @raise OSError: the file got shorter than L{size}.
        """
        count = min(_CHUNK, self.size - offset)
        if count <= 0:
            return b""
        data = os.pread(self._fd, count, offset)
        if len(data) < count:
            raise OSError("the file got shorter while being read")
        return data

    def _moveTo(self, offset: int) -> None:
        """
        Make the view start at C{offset} unless it already holds it.
        """
        if not self.base <= offset <= self.base + len(self.data):
            self.base = offset
            self.data = self._read(offset)

    def _extend(self, keepFrom: int) -> bool:
        """
        Read the next chunk into view, dropping what lies before
        C{keepFrom}.

        @return: whether there was more to read.
        """
        end = self.base + len(self.data)
        more = self._read(end)
        if not more:
            return False
        if keepFrom >= end:
            self.data = more
        else:
            self.data = self.data[keepFrom - self.base :] + more
        self.base = keepFrom if keepFrom < end else end
        return True

    def find(self, needle: bytes, start: int, limit: int) -> int:
        """
        The offset of the first C{needle} lying entirely within
        [C{start}, C{limit}), or -1.

        A short search (a header's) keeps its whole range in view, for the
        slices that follow; a long one keeps only what it has not searched
        yet.
        """
        keep = start if limit - start <= _KEEP else -1
        limit = min(limit, self.size)
        self._moveTo(start)
        pos = start
        while True:
            base = self.base
            end = base + len(self.data)
            found = self.data.find(needle, pos - base, min(end, limit) - base)
            if found >= 0:
                return base + found
            if end >= limit:
                return -1
            pos = max(pos, end - len(needle) + 1)
            if not self._extend(pos if keep < 0 else keep):
                return -1

    def slice(self, start: int, end: int) -> bytes:
        """
        The octets in [C{start}, C{end}), cut at the end of the file.
        """
        end = min(end, self.size)
        self._moveTo(start)
        while self.base + len(self.data) < end and self._extend(start):
            pass
        return self.data[start - self.base : end - self.base]

    def _octetAt(self, offset: int) -> int:
        """
        The octet at C{offset}, or -1 past the end.
        """
        if self.base <= offset < self.base + len(self.data):
            return self.data[offset - self.base]
        octet = os.pread(self._fd, 1, offset)
        return octet[0] if octet else -1

    def _isEscape(self, offset: int, quoting: MboxQuoting) -> bool:
        """
        Whether the C{>From } at C{offset} starts an escaped line.
        """
        before = offset - 1
        if quoting is MboxQuoting.MBOXRD:
            while (octet := self._octetAt(before)) == 0x3E:
                before -= 1
            return octet == 0x0A
        return self._octetAt(before) == 0x0A

    def nextSeparator(self, start: int, quoting: MboxQuoting) -> tuple[int, int]:
        """
        Find the next separator: the LF before a line starting with
        C{From }, at or after C{start}; and count the escaped C{From }
        lines before it.

        @param start: an offset holding an LF (the end of a C{From} line),
            so that lines are recognised from the next octet on.
        @return: the separator's offset (-1 at the end of the file) and the
            number of escaped lines between C{start} and it.
        """
        self._moveTo(start)
        pos = start
        escapes = 0
        while True:
            data = self.data
            base = self.base
            separator = data.find(SEPARATOR, pos - base)
            stop = separator if separator >= 0 else len(data)
            escapes += self._escapes(pos - base, stop, quoting)
            if separator >= 0:
                return base + separator, escapes
            # Both needles are 6 octets long: one starting in the last 5
            # octets is found, once, in the next view.  The 3 octets
            # before the search position stay in view too, for trimmedEnd.
            pos = max(pos, base + len(data) - len(SEPARATOR) + 1)
            if not self._extend(max(start, pos - 3)):
                return -1, escapes

    def _escapes(self, start: int, stop: int, quoting: MboxQuoting) -> int:
        """
        The number of escaped C{From } lines starting in C{data[start:stop]}.
        """
        data = self.data
        count = 0
        escaped = data.find(_ESCAPED, start, stop)
        while escaped >= 0:
            count += self._isEscape(self.base + escaped, quoting)
            escaped = data.find(_ESCAPED, escaped + 1, stop)
        return count

    def followingFrom(self, end: int) -> int:
        """
        Where a message delimited by Content-Length and ending at C{end}
        is followed by the next message's C{From } line, optionally after
        one empty line.

        @return: the offset of that line; L{size} when the file ends at
            C{end} (optionally after one empty line); -1 otherwise (the
            Content-Length is wrong).
        """
        if end >= self.size:
            return end if end == self.size else -1
        view = self.slice(end - 1, end + 8)
        rest = view[1:]
        if rest in (b"\n", b"\r\n") and end + len(rest) == self.size:
            return self.size
        for at, line, gap in _FOLLOWING:
            if view.startswith(line, at):
                return end + gap
        return -1

    def trimmedEnd(self, start: int, end: int) -> int:
        """
        Where the content in [C{start}, C{end}) ends once the empty line
        writers put between messages is dropped: one LF of a final
        C{LF LF}, or one CRLF of a final C{CRLF CRLF}.
        """
        tail = self.slice(max(start, end - 4), end)
        if tail.endswith(b"\r\n\r\n"):
            return end - 2
        if tail.endswith(b"\n\n"):
            return end - 1
        return end
