"""
Tests for L{imapmig.mail.fidelity}: flags the destination can keep, literal8
decisions and message identities.
"""

from __future__ import annotations

import hashlib
import os

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.fidelity import (
    FINGERPRINT_OCTETS,
    FlagDecision,
    MessageIdentity,
    decideFlags,
    fingerprintOf,
    headerEnd,
    identityOf,
    isValidKeyword,
    messageIdOf,
    needsBinary,
)
from imapmig.mail.message import StreamedBody
from imapmig.mail.octets import BARE_CR, BARE_LF, EIGHT_BIT, NUL, UNKNOWN


class KeywordTests(SynchronousTestCase):
    """
    L{isValidKeyword} accepts RFC 3501 atoms only.
    """

    def test_valid(self) -> None:
        """
        Ordinary keywords, with C{$}, digits, dots, dashes and C{_}, are
        atoms.
        """
        for keyword in ("$Forwarded", "Work", "$label1", "a.b-c_d", "NonJunk"):
            self.assertTrue(isValidKeyword(keyword), keyword)

    def test_invalid(self) -> None:
        """
        Empty, non-ASCII, and keywords with a space, a control or an atom
        special are not atoms.
        """
        for keyword in ("", "two words", "tab\t", "a(b", "a)b", "a{b", "a%b", "a*b",
                        'a"b', "a\\b", "a]b", "Entwürfe", "x\x7f"):  # fmt: skip
            self.assertFalse(isValidKeyword(keyword), repr(keyword))


class DecideFlagsTests(SynchronousTestCase):
    """
    L{decideFlags} keeps what the destination can store and says why for
    the rest.
    """

    def test_everythingAllowed(self) -> None:
        """
        With C{\\*} in PERMANENTFLAGS (or PERMANENTFLAGS unknown) every
        system flag and valid keyword goes, the same tuple object when
        nothing is dropped.
        """
        flags = ("\\Seen", "\\Answered", "$Forwarded", "Work")
        for permanent in (None, {"\\Seen", "\\*"}):
            decision = decideFlags(flags, permanent)
            self.assertIs(decision.kept, flags)
            self.assertEqual(decision.dropped, ())

    def test_keywordsNotAllowed(self) -> None:
        """
        Without C{\\*}, only the keywords PERMANENTFLAGS lists (in any case)
        go; the others are dropped with the reason; system flags go anyway.
        """
        decision = decideFlags(
            ("\\Seen", "$Forwarded", "Work", "\\Deleted"),
            {"\\Seen", "\\Deleted", "$forwarded"},
        )
        self.assertEqual(
            decision,
            FlagDecision(
                ("\\Seen", "$Forwarded", "\\Deleted"),
                (("Work", "the destination does not allow this keyword (PERMANENTFLAGS)"),),
            ),
        )

    def test_invalidAndRecent(self) -> None:
        """
        C{\\Recent}, unknown backslash flags and invalid keywords are
        dropped with their reasons; system flags are spelled canonically.
        """
        decision = decideFlags(("\\recent", "\\SEEN", "\\Bogus", "two words"), None)
        self.assertEqual(decision.kept, ("\\Seen",))
        self.assertEqual(
            decision.dropped,
            (
                ("\\recent", "not a system flag a client can set"),
                ("\\Bogus", "not a system flag a client can set"),
                ("two words", "not a valid IMAP keyword"),
            ),
        )


class NeedsBinaryTests(SynchronousTestCase):
    """
    L{needsBinary} finds NUL and 8-bit octets, or takes them from the facts
    a source's reader found.
    """

    def test_bytes(self) -> None:
        """
        ASCII, 8-bit, NUL, and NUL in an otherwise ASCII body.
        """
        self.assertEqual(needsBinary(b"plain\r\n"), 0)
        self.assertEqual(needsBinary("Grüße\r\n".encode()), EIGHT_BIT)
        self.assertEqual(needsBinary(b"a\x00b"), NUL)
        self.assertEqual(needsBinary(bytearray("é\x00".encode())), NUL | EIGHT_BIT)

    def test_facts(self) -> None:
        """
        Facts found by the reader are taken as they are (the body is not
        looked at), less those that do not decide a literal's kind.
        """
        self.assertEqual(needsBinary(b"plain\r\n", NUL | BARE_CR), NUL)
        self.assertEqual(needsBinary(b"a\x00b", EIGHT_BIT | BARE_LF), EIGHT_BIT)
        self.assertEqual(needsBinary(b"a\x00b", UNKNOWN), NUL)

    def test_streamed(self) -> None:
        """
        A streamed body knows from its counting pass.
        """
        for content, expected in (
            (b"ascii\n" * 10, 0),
            ("ü\n".encode() * 10, EIGHT_BIT),
            (b"x\x00\n", NUL),
        ):
            path = self.mktemp()
            with open(path, "wb") as f:
                f.write(content)
            body = StreamedBody.fromDescriptor(os.open(path, os.O_RDONLY), path, 7)
            self.assertEqual(needsBinary(body), expected)
            body.close()


class IdentityTests(SynchronousTestCase):
    """
    Message identities: Message-ID, header fingerprint, size.
    """

    message = (
        b"Received: from a by b\r\n"
        b"Message-ID:\r\n <abc@example.com>\r\n"
        b"Subject: hi\r\n"
        b"\r\n"
        b"body\r\nMessage-ID: <not-this@example.com>\r\n"
    )

    def test_messageId(self) -> None:
        """
        The Message-ID is found in any case, unfolded; in the header only;
        C{b""} without one; a HEADER.FIELDS reply gives the same value.
        """
        header = self.message[: headerEnd(self.message)]
        self.assertEqual(messageIdOf(header), b"<abc@example.com>")
        self.assertEqual(messageIdOf(b"message-id: <x@y>\r\n\r\n"), b"<x@y>")
        self.assertEqual(messageIdOf(b"Subject: a\r\n"), b"")
        self.assertEqual(messageIdOf(b"MESSAGE-ID: <abc@example.com>\r\n\r\n"), b"<abc@example.com>")

    def test_headerEnd(self) -> None:
        """
        The header ends after the CRLF before the blank line; a message
        starting with a blank line has an empty header; without a blank line
        everything is header.
        """
        self.assertEqual(headerEnd(b"A: b\r\n\r\nbody"), 6)
        self.assertEqual(headerEnd(b"\r\nbody"), 0)
        self.assertEqual(headerEnd(b"A: b\r\n"), 6)

    def test_fingerprintFromPrefix(self) -> None:
        """
        The fingerprint of a message equals that of its first
        FINGERPRINT_OCTETS octets (what a partial FETCH returns), and covers
        at most that much of the header.
        """
        longHeader = b"X-Long: " + b"a" * 3000 + b"\r\n\r\nbody"
        self.assertEqual(fingerprintOf(longHeader), fingerprintOf(longHeader[:FINGERPRINT_OCTETS]))
        self.assertEqual(
            fingerprintOf(longHeader), hashlib.sha256(longHeader[:FINGERPRINT_OCTETS]).digest()
        )
        self.assertEqual(
            fingerprintOf(self.message), hashlib.sha256(self.message[: headerEnd(self.message)]).digest()
        )

    def test_identity(self) -> None:
        """
        Same Message-ID with another header start or size is another
        identity; a streamed body has the identity of the same bytes in
        memory.
        """
        identity = identityOf(self.message)
        self.assertEqual(
            identity,
            MessageIdentity(b"<abc@example.com>", fingerprintOf(self.message), len(self.message)),
        )
        other = self.message.replace(b"Subject: hi", b"Subject: ho")
        self.assertNotEqual(identityOf(other), identity)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(self.message.replace(b"\r\n", b"\n"))
        body = StreamedBody.fromDescriptor(os.open(path, os.O_RDONLY), path, 5)
        self.assertEqual(identityOf(body), identity)
        body.close()
