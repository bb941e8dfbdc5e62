# -*- test-case-name: tests.test_imap_fetch -*-
"""
A literal too large to hold in memory, written to an unlinked temporary
file as its octets arrive (L{imapmig.imap.fetch.FetchResponseParser} makes
them), and read back a slice at a time.

The file is created in the directory given (L{tempfile.gettempdir} by
default: C{$TMPDIR}, else C{/tmp}), readable by its owner only, and
unlinked at once: it has no name, and its space returns to the file
system when the last descriptor on it closes, whatever happens to the
process.  Its full size is reserved when it is created
(C{posix_fallocate}, where the file system can), so a full disk shows
before the server sends the literal, not half-way through it.
"""

from __future__ import annotations

import errno
import os
import tempfile
from typing import Iterator

__all__ = ["SpooledLiteral"]

_UNSUPPORTED = frozenset([errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS])


def _reserve(fd: int, size: int) -> None:
    """
    Reserve C{size} octets for the file C{fd}, where the system and the
    file system can (L{_UNSUPPORTED} errors are ignored).

    @raise OSError: there is no room.
    """
    if not size or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise


class SpooledLiteral:
    """
    The octets of one literal in an unlinked temporary file.

    It owns its file descriptor and closes it in L{close} (or when
    collected), unless L{detach} handed it over.
    """

    __slots__ = ("_fd", "_size", "_written")

    def __init__(self, fd: int, size: int) -> None:
        """
        @param fd: an open, empty, unlinked file, readable and writable; this
            object owns it.
        @param size: the literal's size, as announced.
        """
        self._fd = fd
        self._size = size
        self._written = 0

    @classmethod
    def create(cls, size: int, directory: str | None = None) -> SpooledLiteral:
        """
        An empty spool for a literal of C{size} octets, its space reserved.

        @param directory: where the file goes (L{None}: the default
            temporary directory).
        @raise OSError: the file cannot be created or its space reserved.
        """
        fd, path = tempfile.mkstemp(prefix="imapmig-literal-", dir=directory)
        try:
            os.unlink(path)
            _reserve(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size)

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"<SpooledLiteral of {self._size} octets>"

    def __del__(self) -> None:
        self.close()

    @property
    def complete(self) -> bool:
        """
        Whether every octet announced has been written.
        """
        return self._written == self._size

    def write(self, data: bytes | memoryview) -> None:
        """
        Append C{data} (at most what is still missing).

        @raise OSError: the file cannot be written (a full disk).
        @raise ValueError: more octets than announced, or the spool is
            closed.
        """
        if self._fd < 0:
            raise ValueError("the spool is closed")
        if self._written + len(data) > self._size:
            raise ValueError("more octets than the literal announced")
        view = memoryview(data)
        while view:
            done = os.pwrite(self._fd, view, self._written)
            self._written += done
            view = view[done:]

    def read(self, offset: int, length: int) -> bytes:
        """
        At most C{length} octets from C{offset}.

        @raise OSError: the file cannot be read.
        """
        return os.pread(self._fd, length, offset)

    def slices(self, readSize: int) -> Iterator[bytes]:
        """
        The literal, from its start, in pieces of at most C{readSize}
        octets.

        @raise OSError: the file cannot be read, or ends early.
        @raise ValueError: the literal is not all written.
        """
        if not self.complete:
            raise ValueError("the literal is not all written")
        offset = 0
        while offset < self._size:
            piece = os.pread(self._fd, min(readSize, self._size - offset), offset)
            if not piece:
                raise OSError(errno.EIO, "the spool file ends before the literal")
            offset += len(piece)
            yield piece

    def contains(self, octet: bytes, readSize: int = 1024 * 1024) -> bool:
        """
        Whether the literal holds C{octet} (a single octet).

        @raise OSError: the file cannot be read.
        """
        return any(octet in piece for piece in self.slices(readSize))

    def detach(self) -> int:
        """
        Hand over the file descriptor, positioned at the start: the caller
        owns it from now on.
        """
        fd, self._fd = self._fd, -1
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def close(self) -> None:
        """
        Close the file (its space is freed); done anyway when collected.
        """
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
