"""
Tests for L{imapmig.imap.literal}: the C type and its Python twin fill and
hand over a literal's octets the same way.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap import literal
from imapmig.imap.literal import LiteralBufferPython

try:
    from imapmig.imap import _literal
except ImportError:  # pragma: no cover
    _cType: Any = None
else:
    _cType = _literal.LiteralBuffer

# Each test runs on the C type and on its Python twin.
_KINDS: list[Any] = [LiteralBufferPython] + ([_cType] if _cType is not None else [])


class LiteralBufferTests(SynchronousTestCase):
    """
    L{literal.LiteralBuffer} and L{LiteralBufferPython}: a writable buffer
    of the literal's size that becomes its C{bytes}.
    """

    kinds = _KINDS

    def test_built(self) -> None:
        """
        The checkout builds the C type, and L{literal.LiteralBuffer} is it.
        """
        self.assertIsNotNone(_cType)
        self.assertIs(literal.LiteralBuffer, _cType)

    def test_fillAndTake(self) -> None:
        """
        Written through a view in pieces (8-bit octets, NUL, a lone CR at a
        piece's edge), then taken: C{bytes} equal to what was written, the
        buffer empty after.
        """
        octets = b"a\r" + b"\x00\xff\r\n" * 1000 + b"\r"
        for kind in self.kinds:
            buffer = kind(len(octets))
            self.assertEqual(len(buffer), len(octets))
            view = memoryview(buffer)
            for start in range(0, len(octets), 7):
                view[start : start + 7] = octets[start : start + 7]
            view.release()
            taken = buffer.take()
            self.assertIs(type(taken), bytes)
            self.assertEqual(taken, octets)
            self.assertEqual(hash(taken), hash(octets))
            self.assertEqual(len(buffer), 0)

    def test_empty(self) -> None:
        """
        A literal of no octets is C{b""}; of one, its octet.
        """
        for kind in self.kinds:
            self.assertEqual(kind(0).take(), b"")
            one = kind(1)
            with memoryview(one) as view:
                view[0] = 0x0D
            self.assertEqual(one.take(), b"\r")

    def test_takePart(self) -> None:
        """
        C{take(size)}: the first C{size} octets as C{bytes} (8-bit, NUL, a
        lone CR at the cut), all of them for a size at or past the end or
        L{None}, C{b""} for 0; the buffer empty after, as with C{take()}.
        """
        octets = b"\x00\xff\r\n" * 20000 + b"x\r"
        for kind in self.kinds:
            for size in (0, 1, 79999, 80000, 80001, len(octets), len(octets) + 1, None):
                buffer = kind(len(octets))
                with memoryview(buffer) as view:
                    view[:] = octets
                taken = buffer.take(size)
                self.assertIs(type(taken), bytes)
                self.assertEqual(taken, octets[:size])
                self.assertEqual(hash(taken), hash(octets[:size]))
                self.assertEqual(len(buffer), 0)
                self.assertRaises(ValueError, buffer.take, size)

    def test_takePartRefused(self) -> None:
        """
        A negative size, or a view still held, is refused and leaves the
        buffer as it was.
        """
        for kind in self.kinds:
            buffer = kind(10)
            self.assertRaises(ValueError, buffer.take, -1)
            view = memoryview(buffer)
            self.assertRaises(BufferError, buffer.take, 5)
            view[:] = b"0123456789"
            view.release()
            self.assertEqual(buffer.take(5), b"01234")

    def test_viewHeld(self) -> None:
        """
        While a view of the buffer is held (a slice of one included), it
        cannot be taken: it could still be written.  Released, it can.
        """
        for kind in self.kinds:
            buffer = kind(4)
            view = memoryview(buffer)
            part = view[2:]
            view[:2] = b"ab"
            part[:] = b"cd"
            view.release()
            self.assertRaises(BufferError, buffer.take)
            part.release()
            self.assertEqual(buffer.take(), b"abcd")

    def test_takenOnce(self) -> None:
        """
        A buffer taken cannot be taken again, nor viewed (C type) or
        viewed empty (the twin).
        """
        for kind in self.kinds:
            buffer = kind(3)
            buffer.take()
            self.assertRaises(ValueError, buffer.take)
        if _cType is not None:
            buffer = _cType(3)
            buffer.take()
            self.assertRaises(BufferError, memoryview, buffer)

    def test_negative(self) -> None:
        """
        A negative size is refused.
        """
        for kind in self.kinds:
            self.assertRaises(ValueError, kind, -1)

    def test_huge(self) -> None:
        """
        A size no memory holds fails with L{MemoryError}, not a crash; one
        beyond C{Py_ssize_t} with L{OverflowError}.
        """
        for kind in self.kinds:
            self.assertRaises(MemoryError, kind, sys.maxsize - 64)
            self.assertRaises(OverflowError, kind, sys.maxsize + 1)

    def test_recvInto(self) -> None:
        """
        A socket reads into it in place (C{recv_into} a view from an
        offset), as the plain TCP path does.
        """
        for kind in self.kinds:
            left, right = socket.socketpair()
            self.addCleanup(left.close)
            self.addCleanup(right.close)
            buffer = kind(10)
            with memoryview(buffer) as view:
                view[:3] = b"abc"
                right.sendall(b"defghij")
                with view[3:] as rest:
                    self.assertEqual(left.recv_into(rest), 7)
            self.assertEqual(buffer.take(), b"abcdefghij")


class FallbackTests(SynchronousTestCase):
    """
    Where the C extension was not built, the parser reads literals into
    the Python twin: the same bodies.
    """

    def test_parserWithTheTwin(self) -> None:
        """
        A literal begun in one read, written in place, and ended in
        another, read with L{LiteralBufferPython}: the body is exact, and
        C{bytes}.
        """
        from imapmig.imap.fetch import FetchResponseParser

        self.patch(literal, "LiteralBuffer", LiteralBufferPython)
        items: list[Any] = []
        parser = FetchResponseParser(items.append)
        body = b"\x00\r\n\xff" * 3000
        parser.lineReceived(b"* 1 FETCH (UID 4 BODY[] {%d}" % len(body))
        self.assertEqual(parser.literalAt(body[:100], 0), -1)
        space = parser.literalSpace()
        assert space is not None
        space[:10_000] = body[100:10_100]
        space.release()
        self.assertFalse(parser.literalFilled(10_000))
        self.assertEqual(parser.literalAt(body[10_100:] + b")\r\n", 0), len(body) - 10_100 + 3)
        [item] = items
        self.assertIs(type(item.body), bytes)
        self.assertEqual(item.body, body)
