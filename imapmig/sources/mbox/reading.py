# -*- test-case-name: tests.test_sources_mbox -*-
"""
Reading the messages of an mbox file where its listing found them,
checking first that they are still there (taken out of the mbox source's
module, which grew too big to read).
"""

from __future__ import annotations

import errno
import os
import zlib

from imapmig.mail.message import MessageBody, UnreadableMessage, toCRLF
from imapmig.sources.local import LARGE_MESSAGE, READ_CHUNK, LeavesTree, linkProblem
from imapmig.sources.mbox.quoting import UNESCAPE, MboxQuoting
from imapmig.sources.mbox.scan import MessageIndex
from imapmig.sources.mbox.stream import RegionBody
from imapmig.sources.mbox.window import FROM_LINE_LIMIT

__all__ = ["offsetOf", "openFailure", "readMessage"]

def offsetOf(key: str) -> int:
    """
    The offset a message key stands for, or -1 if it is not one.
    """
    if key.isascii() and key.isdigit() and len(key) <= 18:
        return int(key)
    return -1


def openFailure(name: str, error: LeavesTree | OSError) -> str:
    """
    Why an mbox file could not be opened, for an L{UnreadableMessage}.

    @param name: the file, as shown to the admin.
    """
    if isinstance(error, LeavesTree) or error.errno == errno.ELOOP:
        return linkProblem(name, error)
    if isinstance(error, FileNotFoundError):
        return f"file vanished: {name}"
    if isinstance(error, PermissionError):
        return f"permission denied: {name}"
    return f"cannot read {name}: {error.strerror or error}"


def placeProblem(fd: int, index: MessageIndex, position: int) -> str | None:
    """
    Why a message of an open mbox file is no longer where the listing
    found it, if it is not: the file may only have been appended to since,
    so the message's C{From} line, and the next one, must be where they
    were.

    @raise OSError: the file cannot be read.
    """
    offset = index.offsets[position]
    start = index.starts[position]
    following = index.offsets[position + 1] if position + 1 < len(index.offsets) else -1
    lineLength = min(start - 1 - offset, FROM_LINE_LIMIT)
    if offset:
        before = os.pread(fd, lineLength + 1, offset - 1)
    else:
        before = b"\n" + os.pread(fd, lineLength, 0)
    after = os.pread(fd, 6, following - 1) if following > 0 else b"\nFrom "
    if (
        not before.startswith(b"\nFrom ")
        or zlib.crc32(before[1:]) != index.fromLineChecks[position]
        or after != b"\nFrom "
    ):
        return (
            f"{index.file.shown} changed since it was listed: the message at offset"
            f" {offset} moved"
        )
    return None


def readMessage(fd: int, index: MessageIndex, position: int, quoting: MboxQuoting) -> MessageBody:
    """
    Read, check and unescape one message of an open mbox file, and convert
    it to CRLF; a message larger than L{LARGE_MESSAGE} is sent from the
    file (a L{RegionBody} on a duplicate of C{fd}).

    @param index: where the file's messages lie.
    @param position: the message's place in C{index}.
    """
    offset = index.offsets[position]
    start = index.starts[position]
    length = index.lengths[position]
    escapes = index.escapes[position]
    name = index.file.shown
    truncated = UnreadableMessage(
        f"{name} was truncated: the message at offset {offset} ends at "
        f"{start + length}, beyond the end of the file"
    )
    differs = UnreadableMessage(
        f"{name} changed since it was listed: the message at offset {offset} differs"
    )
    try:
        problem = placeProblem(fd, index, position)
        if problem is not None:
            return UnreadableMessage(problem)
        if length - escapes > LARGE_MESSAGE:
            if os.fstat(fd).st_size < start + length:
                return truncated
            body = RegionBody.measured(
                os.dup(fd),
                start,
                length,
                length - escapes,
                escapes > 0,
                quoting is MboxQuoting.MBOXO,
                name,
                lambda opened: placeProblem(opened, index, position),
                READ_CHUNK,
            )
            return differs if body is None else body
        data = os.pread(fd, length, start)
    except OSError as e:
        return UnreadableMessage(f"cannot read {name}: {e.strerror or e}")
    if len(data) < length:
        return truncated
    if escapes:
        data = UNESCAPE[quoting].sub(rb"\1", data)
        if len(data) != length - escapes:
            return differs
    return toCRLF(data)
