"""
Tests for L{imapmig.sources.imapnuls}: when a C{BINARY[]} is the message as
stored, a C{BODY[]} but for the NUL octets the server replaced.

The fetching (early and late C{BINARY.PEEK[]}) is tested against a
scripted server through the facade in L{tests.test_sources_imap}.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.spool import SpooledLiteral
from imapmig.sources import imapnuls
from imapmig.sources.imapnuls import holds, isBodyButNUL


class IsBodyButNULTests(SynchronousTestCase):
    """
    L{isBodyButNUL}, in memory and spooled.
    """

    def spooled(self, data: bytes) -> SpooledLiteral:
        """
        C{data} spooled to a temporary file, closed at the end of the test.
        """
        spool = SpooledLiteral.create(len(data))
        spool.write(data)
        self.addCleanup(spool.close)
        return spool

    def test_inMemory(self) -> None:
        """
        A C{BINARY[]} holding NUL where C{BODY[]} has 0x80, and equal
        elsewhere, is the message; one without NUL, of another length, or
        otherwise different is not.
        """
        body = b"a\x80b\x80c"
        self.assertTrue(isBodyButNUL(b"a\0b\x80c", body))
        self.assertFalse(isBodyButNUL(body, body))
        self.assertFalse(isBodyButNUL(b"a\0b\x80", body))
        self.assertFalse(isBodyButNUL(b"a\0b\x80d", body))

    def test_spooled(self) -> None:
        """
        The same holds with either side spooled, compared a slice at a
        time: a NUL in a later slice counts, a difference in any slice
        does not match.
        """
        self.patch(imapnuls, "_COMPARE_STEP", 2)
        body = b"ab\x80cd\x80"
        stored = b"ab\x80cd\0"
        self.assertTrue(isBodyButNUL(self.spooled(stored), body))
        self.assertTrue(isBodyButNUL(stored, self.spooled(body)))
        self.assertFalse(isBodyButNUL(self.spooled(body), body))
        self.assertFalse(isBodyButNUL(self.spooled(b"xb\x80cd\0"), body))
        self.assertFalse(isBodyButNUL(self.spooled(stored + b"!"), body))

    def test_holds(self) -> None:
        """
        L{holds} finds an octet in memory and spooled.
        """
        self.assertTrue(holds(b"a\x80", 0x80))
        self.assertFalse(holds(b"ab", 0x80))
        self.assertTrue(holds(self.spooled(b"a\x80"), 0x80))
        self.assertFalse(holds(self.spooled(b"ab"), 0x80))
