# -*- test-case-name: tests.test_sources_messagefile -*-
"""
Reading one message file of a local source (Maildir, mbox, C{.eml}) whole,
with CRLF line endings, without blocking on a FIFO put in its place; a
file too large to hold is sent from the open file a slice at a time.
(Taken out of L{imapmig.sources.local}, which opens the files.)
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Mapping, Sequence

from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
)
from imapmig.mail.octets import UNKNOWN, crlfAndFacts
from imapmig.sources.local import FILE_FLAGS, describe, notRegular, shownPath

__all__ = [
    "LARGE_MESSAGE",
    "NOT_READ",
    "READ_CHUNK",
    "Table",
    "lookUp",
    "readListedFile",
    "readListedFiles",
    "readListedFilesPython",
    "readMessageFile",
    "readOpenFile",
    "readOpenFileNoting",
]

# Messages larger than this are not read into memory: they are sent from
# the open file, converted a slice at a time (see StreamedBody).
LARGE_MESSAGE = 4 * 1024 * 1024

# Octets per read of a large message.
READ_CHUNK = 1024 * 1024


def readMessageFile(
    name: str, listedSize: int = 0, dirFd: int | None = None, directory: str | None = None
) -> MessageBody | None:
    """
    Open and read one message file that was a regular file when listed
    (see L{readOpenFile}), never following a symbolic link and never
    blocking on a FIFO.

    @param name: the file, relative to C{dirFd} if given.
    @param listedSize: its size as the listing saw it, if known (else 0).
    @param dirFd: the open directory holding it.
    @param directory: that directory as shown to the admin, if any.
    @return: the body; an L{UnreadableMessage} saying why it could not be
        read; or L{None} when the file does not exist (the caller may look
        for it under another name).
    """
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dirFd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return UnreadableMessage(
                "became a symbolic link since it was listed, not followed:"
                f" {shownPath(directory, name)}"
            )
        return _unreadable(shownPath(directory, name), e)
    return readOpenFile(fd, directory, name, listedSize)


def readListedFile(
    name: str, listedSize: int, dirFd: int, flags: int = FILE_FLAGS
) -> tuple[bytes, int] | None:
    """
    The common case of L{readMessageFile}, on the hot path: a regular file
    of C{listedSize} octets (1 to L{LARGE_MESSAGE}) that still has that
    size, read in one C{read} with CRLF line endings, its facts found on
    the way (L{crlfAndFacts}).  A file the listing gave no size (0) is read
    so at the size its C{fstat} gives, if that is one.

    @param name: the file, relative to C{dirFd}.
    @param listedSize: its size as the listing saw it, or 0.
    @param dirFd: the open directory holding it.
    @param flags: how it is opened (L{FILE_FLAGS}).
    @return: the body and its facts (for L{ReadBodies}), or L{None} for
        anything else (the file is gone, or cannot be opened or read, or
        has another size, or is something else than a regular file by
        now): then L{readMessageFile} says what.
    """
    try:
        fd = os.open(name, flags, dir_fd=dirFd)
    except OSError:
        return None
    try:
        if listedSize <= 0:
            status = os.fstat(fd)
            if not (stat.S_ISREG(status.st_mode) and 0 < status.st_size <= LARGE_MESSAGE):
                return None
            listedSize = status.st_size
        data = os.read(fd, listedSize + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != listedSize:
        # It grew (an octet more than expected), shrank, or is not a
        # regular file at all (a FIFO put in its place reads as empty).
        return None
    return crlfAndFacts(data)


NOT_READ = UnreadableMessage("not read by readListedFiles")
"""
What L{readListedFiles} puts where it did not read a body, for its caller
to replace (compared by identity).
"""

_Locate = Callable[[str], "tuple[int, str, object] | None"]
"""
Where the file of a message key is: the index of its directory's
descriptor, its name, and what it is when not a regular file (else
L{None}); L{None} when it was not listed.
"""

Table = tuple[tuple[dict[str, str], ...], Mapping[str, object]]
"""
Where the files of a listing are, as L{readListedFiles} looks them up with
no call per message: per directory (in the order of the descriptors, the
first that has a key wins), key to file name; then the keys whose entry is
not a regular file (what it is).  The same answers as the L{_Locate} of
L{imapmig.sources.maildir.scan.FolderFiles}.
"""


def lookUp(table: Table, key: str) -> tuple[int, str] | None:
    """
    Where the file of C{key} is by C{table}: its directory's index and its
    name; L{None} when it was not listed or is not a regular file.
    """
    names, irregular = table
    for index, directory in enumerate(names):
        name = directory.get(key)
        if name is not None:
            return None if irregular and key in irregular else (index, name)
    return None


def readListedFiles(
    messages: Sequence[SourceMessage],
    locate: _Locate | Table,
    descriptors: list[int | None],
    bodies: ReadBodies,
) -> int:
    """
    The common case of a batch of reads, on the hot path: each message's
    file read as L{readListedFile} reads it, appended to C{bodies} with
    its facts; L{NOT_READ} (and L{UNKNOWN}) where it was not (a size
    above L{LARGE_MESSAGE}, a file not listed or listed as something else
    than a regular file, or anything L{readListedFile} gives L{None} for,
    such as an empty file): the caller reads those by L{readMessageFile},
    which says why.  A message listed at 0 octets (its size not known) is
    read at the size C{fstat} gives; others without one.

    The C extension's (L{imapmig.mail._octets}) reads the whole batch in
    one call, each file into one buffer reused from file to file, where
    L{readListedFilesPython} makes a call to C{os.open}, C{os.read} and
    C{os.close} for each (each releasing and taking back the GIL, the
    C extension once a file) and an object more per body.

    @param messages: the messages listed.
    @param locate: where the file of a message key is: a listing's
        L{Table} (no call per message: the C extension looks the key up in
        its dicts), or a callable.
    @param descriptors: the open directories C{locate}'s indexes name
        (L{None}: not there).
    @param bodies: where the bodies and their facts are appended.
    @return: how many were not read (L{NOT_READ}).
    """
    return _readListed(
        messages, locate, descriptors, LARGE_MESSAGE, FILE_FLAGS, NOT_READ, bodies, bodies.facts
    )


def readListedFilesPython(
    messages: Sequence[SourceMessage],
    locate: _Locate | Table,
    descriptors: list[int | None],
    largest: int,
    flags: int,
    notRead: MessageBody,
    bodies: list[MessageBody],
    facts: bytearray,
) -> int:
    """
    L{readListedFiles} where the C extension was not built (and its
    reference, C{tests.test_sources_messagefile} runs both): C{largest},
    C{flags} and C{notRead} are L{LARGE_MESSAGE}, L{FILE_FLAGS} and
    L{NOT_READ}, the facts appended to C{facts}.
    """
    missed = 0
    for message in messages:
        read = None
        size = message.size
        if 0 <= size <= largest:
            where = _where(locate, message.key)
            if where is not None:
                fd = descriptors[where[0]] if 0 <= where[0] < len(descriptors) else None
                if fd is not None:
                    read = readListedFile(where[1], size, fd, flags)
        if read is None:
            bodies.append(notRead)
            facts.append(UNKNOWN)
            missed += 1
        else:
            bodies.append(read[0])
            facts.append(read[1])
    return missed


def _where(locate: _Locate | Table, key: str) -> tuple[int, str] | None:
    """
    Where the file of C{key} is by C{locate} (L{readListedFilesPython}):
    its directory's index and name, L{None} when it is not read there.
    """
    if isinstance(locate, tuple):
        return lookUp(locate, key)
    located = locate(key)
    if located is None or located[2] is not None:
        return None
    return located[0], located[1]


try:
    from imapmig.mail._octets import readListed as _readListed
except ImportError:
    _readListed = readListedFilesPython


def _unreadable(shown: str, error: OSError) -> UnreadableMessage:
    """
    An L{UnreadableMessage} for a file that could not be opened or read.
    """
    if isinstance(error, PermissionError):
        return UnreadableMessage(f"permission denied: {shown}")
    if error.errno == errno.ENXIO:
        # What opening a socket gives.
        return UnreadableMessage(f"not a regular file: {shown}")
    return UnreadableMessage(f"cannot read {shown}: {describe(error)}")


def readOpenFile(fd: int, directory: str | None, name: str, listedSize: int = 0) -> MessageBody:
    """
    Read one open message file whole, in one read, with CRLF line endings;
    a file larger than L{LARGE_MESSAGE} is returned as a L{StreamedBody}
    that owns C{fd}, else C{fd} is closed.

    A small file of known size is read with no C{fstat}: one C{read} asks
    for one octet more, which shows whether it grew since; a read that
    does not give the size expected is checked with C{fstat} (a FIFO or
    other special file put in place of the message is refused).

    @param fd: the file, opened with C{O_NONBLOCK}; this function owns it.
    @param directory: the directory holding it, as shown to the admin.
    @param name: its name (or path) in that directory.
    @param listedSize: its size as the listing saw it, if known (else 0).
    """
    return readOpenFileNoting(fd, directory, name, listedSize)[0]


def readOpenFileNoting(
    fd: int, directory: str | None, name: str, listedSize: int = 0
) -> tuple[MessageBody, int]:
    """
    L{readOpenFile}, with the facts of the body (L{crlfAndFacts}) when it
    was read whole, else L{UNKNOWN}: for a source's L{ReadBodies}.
    """
    body: MessageBody | None = None
    try:
        try:
            body = _readDescriptor(fd, directory, name, listedSize)
        finally:
            if not isinstance(body, StreamedBody):
                os.close(fd)
    except OSError as e:
        return _unreadable(shownPath(directory, name), e), UNKNOWN
    if isinstance(body, bytes):
        return crlfAndFacts(body)
    return body, UNKNOWN


def _readDescriptor(fd: int, directory: str | None, name: str, listedSize: int) -> MessageBody:
    """
    The content of an open message file as it is (L{readOpenFile}).

    @raise OSError: it cannot be read.
    """
    if 0 < listedSize <= LARGE_MESSAGE:
        size = listedSize
    else:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return UnreadableMessage(notRegular(shownPath(directory, name), status.st_mode))
        size = status.st_size
    if size > LARGE_MESSAGE:
        return StreamedBody.fromDescriptor(fd, shownPath(directory, name), READ_CHUNK)
    data = os.read(fd, size + 1)
    if len(data) == size:
        return data
    return _readChanged(fd, directory, name, size, data)


def _readChanged(fd: int, directory: str | None, name: str, size: int, data: bytes) -> MessageBody:
    """
    The content of a message file whose first read did not give the size
    expected: it grew (an octet more than expected), shrank, or is not a
    regular file at all.

    @param data: what the first read gave.
    @raise OSError: it cannot be read.
    """
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        return UnreadableMessage(notRegular(shownPath(directory, name), status.st_mode))
    if len(data) < size:
        return data
    if status.st_size > LARGE_MESSAGE:
        return StreamedBody.fromDescriptor(fd, shownPath(directory, name), READ_CHUNK)
    rest = [data]
    while chunk := os.read(fd, READ_CHUNK):
        rest.append(chunk)
    return b"".join(rest)
