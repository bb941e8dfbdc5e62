# -*- test-case-name: tests.test_sources_mbox -*-
"""
The listing of one mbox file: its messages (key, flags, date, size) and
an index of where each lies, for reading them later (taken out of the mbox
source's module, which grew too big to read).
"""

from __future__ import annotations

import os
import stat
import zlib
from array import array
from bisect import bisect_left
from typing import Sequence

from attrs import frozen

from imapmig.errors import LeavesTree, SourceError
from imapmig.mail.message import SourceMessage
from imapmig.sources.local import FILE_FLAGS, Memo, OpenTree, describe, notRegular, openProblem
from imapmig.sources.mbox.dates import parseFromLineDate
from imapmig.sources.mbox.flags import FLAG_FIELDS, contentLength, fieldValues, flagsOf
from imapmig.sources.mbox.quoting import MboxQuoting
from imapmig.sources.mbox.window import FROM_LINE_LIMIT, HEADER_LIMIT, SEPARATOR, Window

__all__ = ["MboxFile", "MessageIndex", "offsetOf", "openFile", "scanFile"]


def offsetOf(key: str) -> int:
    """
    The offset a message key stands for, or -1 if it is not one.
    """
    if key.isascii() and key.isdigit() and len(key) <= 18:
        return int(key)
    return -1


class MessageIndex:
    """
    Where each message of one mbox file lies, as the last listing found:
    per message, in file order, the offset of its C{From} line (its key),
    of its content (one past the end of the file for a C{From} line that
    ends the file without a line end), the content's length in the file,
    the number of escaped lines in it, and a CRC-32 of its C{From} line
    (its first L{FROM_LINE_LIMIT} octets).  Compact arrays: a listing of
    a large file costs 36 octets per message here.

    @ivar file: the file.
    """

    __slots__ = ("file", "offsets", "starts", "lengths", "escapes", "fromLineChecks")

    def __init__(self, file: MboxFile) -> None:
        """
        @param file: the file.
        """
        self.file = file
        self.offsets: array[int] = array("q")
        self.starts: array[int] = array("q")
        self.lengths: array[int] = array("q")
        self.escapes: array[int] = array("q")
        self.fromLineChecks: array[int] = array("I")

    def add(self, offset: int, start: int, length: int, escapes: int, fromLine: bytes) -> None:
        """
        Record the next message (offsets must increase).

        @param fromLine: its C{From} line, cut at L{FROM_LINE_LIMIT}
            octets, without its line end.
        """
        self.offsets.append(offset)
        self.starts.append(start)
        self.lengths.append(length)
        self.escapes.append(escapes)
        self.fromLineChecks.append(zlib.crc32(fromLine))

    def places(self, messages: Sequence[SourceMessage]) -> list[int]:
        """
        The place of each of C{messages} in the index (-1 where it is
        not).
        """
        return [self.find(offsetOf(m.key)) for m in messages]

    def find(self, offset: int) -> int:
        """
        The index of the message whose C{From} line is at C{offset}, or -1.
        """
        index = bisect_left(self.offsets, offset)
        if index < len(self.offsets) and self.offsets[index] == offset:
            return index
        return -1


def headerBounds(window: Window, lineEnd: int, crlf: bool) -> tuple[int, int | None]:
    """
    Where the header section of the message whose C{From} line ends at
    C{lineEnd} ends: at its first empty line, or at the next separator if
    that comes first (a message with no body), and at most
    L{HEADER_LIMIT} octets on.

    @param crlf: whether the C{From} line ended with CRLF (to look for an
        empty CRLF line first).
    @return: the end of the header section (after the line end of its last
        field) and the offset of the body (L{None} without an empty line).
    """
    limit = min(window.size, lineEnd + 1 + HEADER_LIMIT)
    blank, needle = _firstEmptyLine(window, lineEnd, limit, crlf)
    separator = window.find(SEPARATOR, lineEnd, limit if blank < 0 else blank)
    if separator >= 0:
        return separator + 1, None
    if blank >= 0:
        return blank + 1, blank + len(needle)
    return limit, None


def _firstEmptyLine(window: Window, lineEnd: int, limit: int, crlf: bool) -> tuple[int, bytes]:
    """
    Where the first empty line (LF or CRLF) after C{lineEnd} and before
    C{limit} starts (the offset of the line end before it; -1 if there is
    none), and that line end with the empty line.

    @param crlf: whether to look for an empty CRLF line first.
    """
    first, second = (b"\n\r\n", b"\n\n") if crlf else (b"\n\n", b"\n\r\n")
    blank = window.find(first, lineEnd, limit)
    other = window.find(second, lineEnd, limit if blank < 0 else blank + len(second) - 1)
    if other >= 0 and (blank < 0 or other < blank):
        return other, second
    return blank, first


@frozen
class MboxFile:
    """
    Where the file of one folder is.

    @ivar relative: its path relative to the source's directory, as the
        system takes it; L{None} when the source is this one file.
    @ivar shown: its path as shown to the admin.
    @ivar problem: why it is not read (not a regular file, a symbolic link
        leading out of the directory...), if so.
    """

    relative: str | None
    shown: str
    problem: str | None = None


def openFile(root: str, file: MboxFile) -> int:
    """
    Open the mbox file of a folder (with C{O_NONBLOCK}: a FIFO must not
    block), beneath the source's directory.

    @param root: the source's path.
    @raise LeavesTree: it is a symbolic link leading out of the directory.
    @raise OSError: it cannot be opened.
    """
    if file.relative is None:
        return os.open(root, FILE_FLAGS & ~os.O_NOFOLLOW)
    with OpenTree(root) as tree:
        return tree.open(file.relative)


def scanFile(
    root: str, file: MboxFile, quoting: MboxQuoting
) -> tuple[list[SourceMessage], MessageIndex]:
    """
    List the messages of one mbox file.

    @param root: the source's path.
    @return: the messages, in file order, and where they lie.
    @raise SourceError: the file cannot be opened or read, or is not an
        mbox.
    """
    fd = _openListed(root, file)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise SourceError(f"not an mbox file: {notRegular(file.shown, status.st_mode)}")
        return _Scan(Window(fd, status.st_size), file, quoting).messages()
    except OSError as e:
        raise SourceError(f"cannot read the mbox file {file.shown}: {describe(e)}") from e
    finally:
        os.close(fd)


def _openListed(root: str, file: MboxFile) -> int:
    """
    Open an mbox file to list its messages.

    @raise SourceError: it is not read (see L{MboxFile.problem}), or cannot
        be opened.
    """
    if file.problem is not None:
        raise SourceError(file.problem)
    try:
        return openFile(root, file)
    except (LeavesTree, OSError) as e:
        problem = openProblem(file.shown, e, "no such mbox file", "cannot open the mbox file")
        raise SourceError(problem) from e


class _Scan:
    """
    The scan of L{scanFile}, over the open file's view: one message after
    the other, from the C{From } line of each to where the next starts.
    """

    def __init__(self, window: Window, file: MboxFile, quoting: MboxQuoting) -> None:
        self._window = window
        self._quoting = quoting
        self._index = MessageIndex(file)
        self._messages: list[SourceMessage] = []
        self._flags = Memo(flagsOf)

    def messages(self) -> tuple[list[SourceMessage], MessageIndex]:
        """
        The messages, in file order, and where they lie.

        @raise OSError: the file cannot be read.
        @raise SourceError: the file is not an mbox.
        """
        window = self._window
        if window.size and window.slice(0, 5) != b"From ":
            raise SourceError(
                f"not an mbox file: {self._index.file.shown} does not start with a 'From ' line"
            )
        fromOffset = 0
        while fromOffset < window.size:
            fromOffset = self._message(fromOffset)
        return self._messages, self._index

    def _message(self, fromOffset: int) -> int:
        """
        List the message whose C{From} line is at C{fromOffset}.

        @return: where the next one starts (the size of the file after the
            last).
        """
        window = self._window
        lineEnd, fromLine = self._fromLine(fromOffset)
        when = parseFromLineDate(fromLine)
        if lineEnd < 0:
            # A From line ending the file: an empty message.
            self._index.add(fromOffset, window.size + 1, 0, 0, fromLine)
            self._messages.append(SourceMessage(str(fromOffset), (), when, 0))
            return window.size
        contentStart = lineEnd + 1
        headerEnd, bodyStart = headerBounds(window, lineEnd, fromLine.endswith(b"\r"))
        header = b"\n" + window.slice(contentStart, headerEnd)
        lowered = header.lower()
        contentEnd, nextFrom, escapes = self._extent(lineEnd, bodyStart, header, lowered)
        length = contentEnd - contentStart
        self._index.add(fromOffset, contentStart, length, escapes, fromLine)
        flags = self._flagsIn(header, lowered)
        self._messages.append(SourceMessage(str(fromOffset), flags, when, length - escapes))
        return nextFrom

    def _fromLine(self, fromOffset: int) -> tuple[int, bytes]:
        """
        Where the C{From} line at C{fromOffset} ends (-1 at the end of the
        file), and the line, cut at L{FROM_LINE_LIMIT} octets.
        """
        window = self._window
        limit = fromOffset + FROM_LINE_LIMIT
        lineEnd = window.find(b"\n", fromOffset, limit)
        if lineEnd < 0:
            lineEnd = window.find(b"\n", fromOffset, window.size)
        return lineEnd, window.slice(
            fromOffset, min(window.size if lineEnd < 0 else lineEnd, limit)
        )

    def _flagsIn(self, header: bytes, lowered: bytes) -> tuple[str, ...]:
        """
        The flags of a message's header (with an LF prepended; and
        lower-cased).
        """
        # Every name in FLAG_FIELDS ends with one of these.
        if b"status:" in lowered or b"keywords:" in lowered or b"-keys:" in lowered:
            return self._flags[tuple(tuple(fieldValues(header, lowered, f)) for f in FLAG_FIELDS)]
        return ()

    def _extent(
        self, lineEnd: int, bodyStart: int | None, header: bytes, lowered: bytes
    ) -> tuple[int, int, int]:
        """
        Where the content of the message whose C{From} line ends at
        C{lineEnd} ends: as its C{Content-Length} says if the next message
        (or the end of the file) follows there, else at the next separator.

        @return: the end of its content, where the next message starts, and
            the number of escaped lines in it.
        """
        if bodyStart is not None:
            delimited = self._delimited(bodyStart, contentLength(header, lowered))
            if delimited is not None:
                return delimited
        window = self._window
        separator, escapes = window.nextSeparator(lineEnd, self._quoting)
        nextFrom = window.size if separator < 0 else separator + 1
        return window.trimmedEnd(lineEnd + 1, nextFrom), nextFrom, escapes

    def _delimited(self, bodyStart: int, length: int | None) -> tuple[int, int, int] | None:
        """
        L{_extent} by a C{Content-Length} of C{length}, if it holds.
        """
        if length is None:
            return None
        contentEnd = bodyStart + length
        nextFrom = self._window.followingFrom(contentEnd)
        return None if nextFrom < 0 else (contentEnd, nextFrom, 0)
