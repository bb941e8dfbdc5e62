# -*- test-case-name: tests.test_sources_mbox -*-
"""
A large message of an mbox file, sent from its region of the file a slice
at a time (unescaped and converted to CRLF as it is read), so that memory
stays bounded whatever the size of the message.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Iterator

from imapmig.mail.message import StreamedBody, measure

__all__ = ["Unescaper", "RegionBody"]

# The escaped "From " lines of mboxrd (any number of ">") and of mboxo
# (exactly one), each losing its first ">".
_ESCAPED_RD = re.compile(rb"^>(>*From )", re.MULTILINE)
_ESCAPED_O = re.compile(rb"^>(From )", re.MULTILINE)
_FROM = b"From "

# A run of ">" at the start of a line longer than this is given out as it
# comes, all but one ">" (a line of ">" alone must not be held whole).
_LONGEST_RUN = 64


class Unescaper:
    """
    Unescape the C{From } lines of a message given in pieces, as the
    regular expression of the whole message would (every line matching
    C{>+From } loses one C{>} with mboxrd, every line starting with exactly
    C{>From } with mboxo), holding back at most a few octets between
    pieces.

    The message must start at the start of a line.
    """

    __slots__ = ("_pattern", "_mboxo", "_held", "_midLine")

    def __init__(self, mboxo: bool) -> None:
        """
        @param mboxo: unescape as mboxo (exactly one C{>}) rather than
            mboxrd.
        """
        self._mboxo = mboxo
        self._pattern = _ESCAPED_O if mboxo else _ESCAPED_RD
        # The start of a line that may still turn out to be escaped.
        self._held = b""
        # Whether the next octet is inside a line already decided.
        self._midLine = False

    def _undecided(self, start: bytes) -> bool:
        """
        Whether the start of a line may still become an escaped line.
        """
        if start[:1] != b">":
            return False
        rest = start[1:] if self._mboxo else start.lstrip(b">")
        return len(rest) < len(_FROM) and _FROM.startswith(rest)

    def feed(self, data: bytes) -> bytes:
        """
        The unescaped octets of the next piece that can be given now.
        """
        buffer = self._held + data if self._held else data
        self._held = b""
        out = []
        start = 0
        if self._midLine:
            lineEnd = buffer.find(b"\n")
            if lineEnd < 0:
                return buffer
            out.append(buffer[: lineEnd + 1])
            start = lineEnd + 1
            self._midLine = False
        lastLineEnd = buffer.rfind(b"\n", start)
        if lastLineEnd >= 0:
            out.append(self._pattern.sub(rb"\1", buffer[start : lastLineEnd + 1]))
            start = lastLineEnd + 1
        rest = buffer[start:]
        if rest:
            out.append(self._lastLine(rest))
        return b"".join(out)

    def _lastLine(self, rest: bytes) -> bytes:
        """
        What can be given now of the start of a line that did not end in
        the piece: nothing while it may still become an escaped line (it
        is held back, but for a long run of C{>}), else the line so far,
        unescaped.
        """
        if not self._undecided(rest):
            self._midLine = True
            return self._pattern.sub(rb"\1", rest)
        stripped = rest.lstrip(b">")
        run = len(rest) - len(stripped)
        if run <= _LONGEST_RUN:
            self._held = rest
            return b""
        # Escaped or not, all these ">" but one are given out.
        self._held = b">" + stripped
        return b">" * (run - 1)

    def end(self) -> bytes:
        """
        What was held back, once the message has ended (a last line that
        never became an escaped one).
        """
        held, self._held = self._held, b""
        return held


class RegionBody(StreamedBody):
    """
    A message lying in a region of an open mbox file, unescaped and
    converted to CRLF a slice at a time each time it is sent; its sizes are
    counted once, when it is read.

    A message that is no longer where it was when sent (the file rewritten
    or truncated) raises, as L{StreamedBody} does.
    """

    __slots__ = ("_start", "_length", "_mboxo", "_escaped", "_check")

    def __init__(
        self,
        fd: int,
        start: int,
        length: int,
        unescapedLength: int,
        escaped: bool,
        mboxo: bool,
        name: str,
        check: Callable[[int], str | None],
    ) -> None:
        """
        @param fd: the open mbox file; this object owns and closes it.
        @param start: the offset of the message's content.
        @param length: its length in the file.
        @param unescapedLength: its length once unescaped.
        @param escaped: whether it holds escaped lines.
        @param mboxo: whether they are escaped as mboxo (else mboxrd).
        @param name: the file's name, for messages.
        @param check: given the open file, why the message is no longer
            where it was, or L{None}.
        """
        super().__init__(fd, unescapedLength, 0, name)
        self._start = start
        self._length = length
        self._escaped = escaped
        self._mboxo = mboxo
        self._check = check

    @classmethod
    def measured(
        cls,
        fd: int,
        start: int,
        length: int,
        unescapedLength: int,
        escaped: bool,
        mboxo: bool,
        name: str,
        check: Callable[[int], str | None],
        readSize: int,
    ) -> RegionBody | None:
        """
        Read the message once to count its converted size (the arguments
        are those of the initializer).

        @return: the body; L{None} (having closed C{fd}) when the message
            no longer unescapes to the length listed.
        @raise OSError: it cannot be read; C{fd} is then closed.
        """
        body = cls(fd, start, length, unescapedLength, escaped, mboxo, name, check)
        try:
            counted = 0

            def counting() -> Iterator[bytes]:
                nonlocal counted
                for chunk in body._octets(readSize):
                    counted += len(chunk)
                    yield chunk

            body._size, body.hasNUL, body.isASCII = measure(counting())
        except BaseException:
            body.close()
            raise
        if counted != unescapedLength:
            body.close()
            return None
        return body

    def _octets(self, readSize: int) -> Iterator[bytes]:
        """
        The message unescaped, from the file.

        @raise OSError: the file ends before the message does.
        """
        if not self._escaped:
            yield from self._region(readSize)
            return
        unescaper = Unescaper(self._mboxo)
        for chunk in self._region(readSize):
            unescaped = unescaper.feed(chunk)
            if unescaped:
                yield unescaped
        tail = unescaper.end()
        if tail:
            yield tail

    def _region(self, readSize: int) -> Iterator[bytes]:
        """
        The message as it is in the file, C{readSize} octets at a time.

        @raise OSError: the file ends before the message does.
        """
        offset = self._start
        end = self._start + self._length
        while offset < end:
            chunk = os.pread(self._fd, min(readSize, end - offset), offset)
            if not chunk:
                raise OSError(f"{self.name} was truncated")
            offset += len(chunk)
            yield chunk

    def _unchanged(self) -> bool:
        """
        Whether the message's C{From} line, and the next one, are still
        where they were.
        """
        return self._check(self._fd) is None
