# -*- test-case-name: tests.test_imap_literal -*-
"""
A FETCH literal read into its final bytes: L{LiteralBuffer}, a writable
buffer of the literal's announced size that the socket's reads (plain
TCP's C{recv_into}, TLS's C{SSL_read}) or the copy of a part of one read
fill in place, and that becomes the body's C{bytes} with no copy
(C{take()}).

L{LiteralBuffer} is the C extension's (C{imapmig/imap/_literal.c}) where
it was built; L{LiteralBufferPython} is the same type in Python, the
reference and the fallback, whose C{take()} copies its octets into
C{bytes} once (a C{bytearray} cannot become C{bytes} without a copy).
"""

from __future__ import annotations

__all__ = ["LiteralBuffer", "LiteralBufferPython", "LiteralReading"]


class LiteralBufferPython(bytearray):
    """
    A writable buffer of C{size} octets that becomes, filled, the C{bytes}
    of a literal: what C{imapmig.imap._literal.LiteralBuffer} is, in
    Python.

    Its octets are written through the buffer protocol (a C{memoryview},
    C{recv_into}, cffi's C{from_buffer}); C{len()} is its size until it is
    taken.
    """

    _taken = False

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError("a literal's size cannot be negative")
        super().__init__(size)

    def take(self, size: int | None = None, /) -> bytes:
        """
        The literal's octets as C{bytes}, handed over once.

        @param size: if given, only the first C{size} octets (all of them if
            it has no more): the C type keeps them without a copy.

        @raise BufferError: a view of the buffer is still held (it could
            still be written).
        @raise ValueError: the literal was taken already, or C{size} is
            negative.
        """
        if self._taken:
            raise ValueError("the literal was taken already")
        if size is not None and size < 0:
            raise ValueError("cannot keep fewer than 0 octets")
        octets = bytes(self) if size is None or size >= len(self) else bytes(self[:size])
        # Fails, as the C type's take() does, while a view is held.
        del self[:]
        self._taken = True
        return octets


try:
    from imapmig.imap._literal import LiteralBuffer
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    LiteralBuffer = LiteralBufferPython  # type: ignore[misc,assignment]


class LiteralReading:
    """
    A literal being read into its final buffer: the buffer, a view of it,
    and how many of its octets are in.
    """

    __slots__ = ("_buffer", "_view", "filled")

    def __init__(self, size: int) -> None:
        """
        @param size: the literal's size, all of it still to come.
        """
        self._buffer = LiteralBuffer(size)
        self._view = memoryview(self._buffer)
        self.filled = 0

    def copy(self, data: bytes, pos: int, count: int) -> None:
        """
        Copy C{count} octets of C{data} from C{pos} in, after those
        already in.
        """
        filled = self.filled
        end = filled + count
        if pos or count < len(data):
            self._view[filled:end] = memoryview(data)[pos : pos + count]
        else:
            self._view[filled:end] = data
        self.filled = end

    def space(self) -> memoryview:
        """
        A writable view of the octets still to come (released by whoever
        writes it, before L{take}).
        """
        return self._view[self.filled :]

    def take(self) -> bytes:
        """
        The complete literal as C{bytes}: uncopied (the C type's; its
        Python twin copies once).
        """
        self._view.release()
        return self._buffer.take()

    def drop(self) -> None:
        """
        Let the buffer go unfinished (the connection was lost).
        """
        self._view.release()
