# -*- test-case-name: tests.test_messagenames -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.mail.messagenames}: a message's Message-ID, Date, From and
Subject read from its header, decoded, bounded, and never an exception.
"""

from __future__ import annotations

import random

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.messagenames import namesOfBody, namesOfHeader
from imapmig.state import NAME_LENGTH, MessageNames


class NamesOfHeaderTests(SynchronousTestCase):
    """
    L{namesOfHeader} and L{namesOfBody}.
    """

    def test_plain(self) -> None:
        """
        Each field's first occurrence, unfolded, white space runs as one
        space, whatever the case of the field names; none from the body.
        """
        header = (
            b"from: Ann <ann@example.com>\r\nSubject: Hello\r\n  world\r\n"
            b"DATE:  Tue, 3 Mar 2020 10:00:00 +0100\r\nMessage-Id:\r\n <id@x>\r\n"
            b"Subject: second\r\n\r\nFrom: body <b@x>\r\n"
        )
        self.assertEqual(
            namesOfBody(header),
            MessageNames("<id@x>", "Tue, 3 Mar 2020 10:00:00 +0100", "Ann <ann@example.com>", "Hello world"),
        )
        self.assertEqual(namesOfBody(b"Subject: x\r\n\r\nMessage-ID: <no@x>\r\n").messageId, None)

    def test_encodedWords(self) -> None:
        """
        RFC 2047 encoded words (B and Q, any charset) are decoded, white
        space between two of them dropped; raw UTF-8 (RFC 6532) is kept.
        """
        header = (
            b"Subject: =?ISO-8859-1?Q?Gr=FC=DFe?= =?utf-8?B?YXVz?= Berlin\r\n"
            b"From: =?utf-8?q?Z=C3=BCrich_B=C3=BCro?= <z@x>\r\n"
        )
        names = namesOfHeader(header)
        self.assertEqual(names.subject, "Grüßeaus Berlin")
        self.assertEqual(names.sender, "Zürich Büro <z@x>")
        self.assertEqual(namesOfHeader("Subject: Grüße\r\n".encode()).subject, "Grüße")

    def test_garbage(self) -> None:
        """
        An unknown charset or broken encoding leaves the word as written;
        octets that are not UTF-8 are read as Latin-1; control characters
        are dropped.
        """
        names = namesOfHeader(
            b"Subject: =?x-unknown?q?abc?= =?utf-8?b?###?= \xe9t\xe9\x1b[31m\x00\r\n"
        )
        self.assertEqual(names.subject, "=?x-unknown?q?abc?= =?utf-8?b?###?= été[31m")

    def test_messageIdControlCharacters(self) -> None:
        """
        A Message-ID is recorded without control characters (an escape
        sequence that would set the title of the terminal showing C{imapmig
        report --failures --csv}, a bidirectional override); one of nothing
        else is none.
        """
        names = namesOfHeader(b"Message-ID: <\x1b]0;pwned\x07\x1b[2J\xe2\x80\xaeid@evil>\r\n")
        self.assertEqual(names.messageId, "<]0;pwned[2Jid@evil>")
        self.assertIsNone(namesOfHeader(b"Message-ID: \x1b\x07\r\n").messageId)

    def test_cutBetweenWords(self) -> None:
        """
        A From of thousands of encoded words is cut between two of them:
        none is left in two and shown as written, and the name ends with
        an ellipsis.
        """
        names = namesOfHeader(b"From: " + b" ".join([b"=?utf-8?q?=41=42?="] * 20_000) + b"\r\n")
        assert names.sender is not None
        self.assertNotIn("=?", names.sender)
        self.assertEqual(names.sender, "AB" * (len(names.sender) // 2) + "\u2026")

    def test_bounded(self) -> None:
        """
        A long Subject or From is cut at L{NAME_LENGTH} characters, ending
        with an ellipsis; a huge header is read only so far.
        """
        long = b"Subject: " + b"a" * 10_000 + b"\r\nFrom: " + b"=?utf-8?q?=C3=A9?= " * 5000 + b"\r\n"
        names = namesOfHeader(long)
        assert names.subject is not None and names.sender is not None
        self.assertEqual(len(names.subject), NAME_LENGTH)
        self.assertTrue(names.subject.endswith("\u2026"))
        self.assertLessEqual(len(names.sender), NAME_LENGTH)
        self.assertEqual(namesOfHeader(b"X: " + b"y" * 200_000 + b"\r\nSubject: late\r\n"), MessageNames())

    def test_neverRaises(self) -> None:
        """
        Random octets, with fragments of header syntax, never raise.
        """
        rng = random.Random(27)
        pieces = [b"Subject:", b"From:", b"=?", b"?=", b"?q?", b"?b?", b"\r\n", b" ", b"\xff", b"utf-8", b"=C3", b"\x00"]
        for _ in range(2000):
            blob = b"".join(rng.choice(pieces) if rng.random() < 0.7 else bytes([rng.randrange(256)]) for _ in range(60))
            namesOfHeader(blob)
