# -*- test-case-name: tests.test_sources_mbox -*-
"""
Reading the messages of an mbox file where its listing found them,
checking first that they are still there (taken out of the mbox source's
module, which grew too big to read).
"""

from __future__ import annotations

import os
import zlib
from typing import Sequence

from imapmig.errors import LeavesTree
from imapmig.mail.message import MessageBody, ReadBodies, SourceMessage, UnreadableMessage
from imapmig.mail.octets import UNKNOWN, crlfAndFacts
from imapmig.sources.local import describe, openProblem, unreadableAll
from imapmig.sources.messagefile import LARGE_MESSAGE, READ_CHUNK
from imapmig.sources.mbox.quoting import UNESCAPE, MboxQuoting
from imapmig.sources.mbox.scan import MboxFile, MessageIndex, openFile
from imapmig.sources.mbox.stream import RegionBody
from imapmig.sources.mbox.window import FROM_LINE_LIMIT

__all__ = ["fromLineAt", "readMessage", "readMessages"]


def fromLineAt(root: str, file: MboxFile, offset: int) -> bytes | None:
    """
    The C{From } line at C{offset} in an mbox file, as it is in the file
    (at most 1,000 octets, without its line end); L{None} when the file or
    line cannot be read there.

    @param root: the source's path.
    """
    try:
        fd = openFile(root, file)
    except (LeavesTree, OSError):
        return None
    try:
        head = os.pread(fd, 1000, offset)
    except OSError:
        return None
    finally:
        os.close(fd)
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    return line if line.startswith(b"From ") else None


def readMessages(
    root: str,
    index: MessageIndex,
    messages: Sequence[SourceMessage],
    positions: Sequence[int],
    quoting: MboxQuoting,
) -> list[MessageBody]:
    """
    Read messages of the file C{index} lists (see L{readMessage}).

    @param root: the source's path.
    @param positions: each message's place in C{index}, -1 for one it does
        not hold.
    """
    try:
        fd = openFile(root, index.file)
    except (LeavesTree, OSError) as e:
        return unreadableAll(openProblem(index.file.shown, e), messages)
    bodies = ReadBodies()
    try:
        for message, position in zip(messages, positions):
            if position >= 0:
                bodies.add(*readMessage(fd, index, position, quoting))
            else:
                bodies.add(
                    UnreadableMessage(f"no message at offset {message.key} in {index.file.shown}")
                )
    finally:
        os.close(fd)
    return bodies


def placeProblem(fd: int, index: MessageIndex, position: int) -> str | None:
    """
    Why a message of an open mbox file is no longer where the listing
    found it, if it is not: the file may only have been appended to since,
    so the message's C{From} line, and the next one, must be where they
    were.

    @raise OSError: the file cannot be read.
    """
    if _fromLineMoved(fd, index, position) or _nextMoved(fd, index, position):
        return (
            f"{index.file.shown} changed since it was listed: the message at offset"
            f" {index.offsets[position]} moved"
        )
    return None


def _fromLineMoved(fd: int, index: MessageIndex, position: int) -> bool:
    """
    Whether a message's C{From} line is no longer the one listed at its
    offset (its first L{FROM_LINE_LIMIT} octets, after an LF or at the
    start of the file).

    @raise OSError: the file cannot be read.
    """
    offset = index.offsets[position]
    lineLength = min(index.starts[position] - 1 - offset, FROM_LINE_LIMIT)
    if offset:
        before = os.pread(fd, lineLength + 1, offset - 1)
    else:
        before = b"\n" + os.pread(fd, lineLength, 0)
    return (
        not before.startswith(b"\nFrom ")
        or zlib.crc32(before[1:]) != index.fromLineChecks[position]
    )


def _nextMoved(fd: int, index: MessageIndex, position: int) -> bool:
    """
    Whether the next message's C{From} line, if any, is no longer where it
    was listed.

    @raise OSError: the file cannot be read.
    """
    if position + 1 >= len(index.offsets):
        return False
    return os.pread(fd, 6, index.offsets[position + 1] - 1) != b"\nFrom "


def readMessage(
    fd: int, index: MessageIndex, position: int, quoting: MboxQuoting
) -> tuple[MessageBody, int]:
    """
    Read, check and unescape one message of an open mbox file, and convert
    it to CRLF, noting the facts of its octets (L{crlfAndFacts}); a
    message larger than L{LARGE_MESSAGE} is sent from the file (a
    L{RegionBody} on a duplicate of C{fd}, which carries its own).

    @param index: where the file's messages lie.
    @param position: the message's place in C{index}.
    @return: the body, and its facts (L{UNKNOWN} for any but C{bytes}).
    """
    length = index.lengths[position]
    try:
        problem = placeProblem(fd, index, position)
        if problem is not None:
            return UnreadableMessage(problem), UNKNOWN
        if length - index.escapes[position] > LARGE_MESSAGE:
            return _regionBody(fd, index, position, quoting), UNKNOWN
        data = os.pread(fd, length, index.starts[position])
    except OSError as e:
        return UnreadableMessage(f"cannot read {index.file.shown}: {describe(e)}"), UNKNOWN
    return _unescaped(data, index, position, quoting)


def _unescaped(
    data: bytes, index: MessageIndex, position: int, quoting: MboxQuoting
) -> tuple[MessageBody, int]:
    """
    A message as read from the file, checked, unescaped and converted to
    CRLF, with its facts (see L{readMessage}).
    """
    length = index.lengths[position]
    escapes = index.escapes[position]
    if len(data) < length:
        return _truncated(index, position), UNKNOWN
    if escapes:
        data = UNESCAPE[quoting].sub(rb"\1", data)
        if len(data) != length - escapes:
            return _differs(index, position), UNKNOWN
    return crlfAndFacts(data)


def _regionBody(fd: int, index: MessageIndex, position: int, quoting: MboxQuoting) -> MessageBody:
    """
    A message larger than L{LARGE_MESSAGE}, sent from its region of the
    file (see L{readMessage}).

    @raise OSError: the file cannot be read.
    """
    start = index.starts[position]
    length = index.lengths[position]
    escapes = index.escapes[position]
    if os.fstat(fd).st_size < start + length:
        return _truncated(index, position)
    body = RegionBody.measured(
        os.dup(fd),
        start,
        length,
        length - escapes,
        escapes > 0,
        quoting is MboxQuoting.MBOXO,
        index.file.shown,
        lambda opened: placeProblem(opened, index, position),
        READ_CHUNK,
    )
    return _differs(index, position) if body is None else body


def _truncated(index: MessageIndex, position: int) -> UnreadableMessage:
    """
    A message the file no longer holds whole.
    """
    offset = index.offsets[position]
    end = index.starts[position] + index.lengths[position]
    return UnreadableMessage(
        f"{index.file.shown} was truncated: the message at offset {offset} ends at "
        f"{end}, beyond the end of the file"
    )


def _differs(index: MessageIndex, position: int) -> UnreadableMessage:
    """
    A message that no longer unescapes to the length listed.
    """
    return UnreadableMessage(
        f"{index.file.shown} changed since it was listed: the message at offset"
        f" {index.offsets[position]} differs"
    )
