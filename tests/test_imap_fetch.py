"""
Tests for L{imapmig.imap.fetch} (the incremental FETCH response reader),
for the client's hook that routes FETCH responses to it
(L{MigrationIMAP4Client.fetchInto}, L{MigrationIMAP4Client.sendCollecting}),
and for the session methods built on them (L{IMAPSession.examine},
L{IMAPSession.listFolders}, L{IMAPSession.fetchMetadata},
L{IMAPSession.fetchBodies}).

Every server reply here is the exact octets a server sends: Dovecot 2.3's
formats where it has one.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.mail.imap4 import IMAP4Exception
from twisted.python.failure import Failure
import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import (
    CommandFailed,
    CommandRefused,
    ConnectionDropped,
    ConnectionLost,
    FetchParseError,
    FetchSpoolError,
    ProtocolError,
    ReplyTimeout,
)
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.fetch import (
    DEFAULT_MAX_LITERAL,
    FetchLimits,
    FetchResponseParser,
    isFetchResponse,
)
from imapmig.imap import fetcheditem
from imapmig.imap.fetcheditem import FetchedItem, parseInternalDate
from imapmig.imap.mailboxes import ListedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.imap.syntax import formatUIDSet, parseResponse
from imapmig.imap.spool import SpooledLiteral
from imapmig.mail.message import formatInternalDate

CET = timezone(timedelta(hours=1))


def messageOf(size: int, seed: int = 0) -> bytes:
    """
    A message of exactly C{size} octets, CRLF line endings, with octets a
    parser must not interpret (parentheses, braces, quotes, a line that
    looks like a FETCH response and one that looks like a tagged reply).
    """
    head = (
        b"Message-ID: <%d@example.org>\r\nSubject: (not) {a} \"literal\"\r\n\r\n"
        b"* 1 FETCH (UID 1)\r\n0001 OK done\r\n" % seed
    )
    filler = b"0123456789abcdef(){}[]\"\\ line\r\n"
    body = head + filler * (size // len(filler) + 1)
    return body[:size]


class Collected:
    """
    A sink that keeps every item.
    """

    def __init__(self) -> None:
        self.items: list[FetchedItem] = []

    def __call__(self, item: FetchedItem) -> None:
        self.items.append(item)


def feedWire(parser: FetchResponseParser, wire: bytes, chunk: int) -> None:
    """
    Feed C{wire} to C{parser} the way the client does, C{chunk} octets per
    read: lines in line mode, literal octets while it wants them.
    """
    buffer = b""
    for i in range(0, len(wire), chunk):
        buffer += wire[i : i + chunk]
        while buffer:
            if parser.wantsLiteral:
                rest = parser.literalReceived(buffer)
                buffer = b"" if rest is None else rest
                continue
            line, sep, after = buffer.partition(b"\r\n")
            if not sep:
                break
            buffer = after
            parser.lineReceived(line)
    assert buffer == b"", buffer


class ParserTests(SynchronousTestCase):
    """
    L{FetchResponseParser} reads FETCH responses fed a line or a piece of
    literal at a time.
    """

    def parse(self, wire: bytes, chunk: int = 1 << 20) -> list[FetchedItem]:
        """
        The items of C{wire}, fed C{chunk} octets per read.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        feedWire(parser, wire, chunk)
        self.assertFalse(parser.inResponse)
        return sink.items

    def test_dovecotResponseWithBody(self) -> None:
        """
        Dovecot's reply to C{UID FETCH (UID RFC822.SIZE FLAGS INTERNALDATE
        BODY.PEEK[])} gives every item, the body octet for octet.
        """
        body = messageOf(1234)
        wire = (
            b"* 1 FETCH (UID 5 RFC822.SIZE 1234 FLAGS (\\Seen $Forwarded) "
            b'INTERNALDATE "22-Nov-2026 10:00:00 +0100" BODY[] {1234}\r\n' + body + b")\r\n"
        )
        [item] = self.parse(wire)
        self.assertEqual(item.sequence, 1)
        self.assertEqual(item.uid, 5)
        self.assertEqual(item.size, 1234)
        self.assertEqual(item.flags, ("\\Seen", "$Forwarded"))
        self.assertEqual(item.internalDate, datetime(2026, 11, 22, 10, 0, 0, tzinfo=CET))
        self.assertIsNone(item.modSeq)
        self.assertEqual(item.body, body)
        self.assertEqual(dict(item.sections), {b"BODY[]": body})

    def test_bodyResponseShortcut(self) -> None:
        """
        The common first line of a body response (C{* N FETCH (UID n
        BODY[] {size}}, or C{BINARY[]} with a literal8) gives the same item
        as the general reader gives for the same response spelled
        otherwise, items after the literal included; a literal beyond the
        limits is refused the same way.
        """
        body = messageOf(300)
        for section, marker in ((b"BODY[]", b"{300}"), (b"BINARY[]", b"~{300}")):
            [fast] = self.parse(
                b"* 7 FETCH (UID 42 " + section + b" " + marker + b"\r\n" + body
                + b" FLAGS (\\Seen))\r\n"
            )  # fmt: skip
            [general] = self.parse(
                b"* 7 FETCH ( UID 42 " + section + b" " + marker + b"\r\n" + body
                + b" FLAGS (\\Seen))\r\n"
            )  # fmt: skip
            self.assertEqual(fast, general)
            self.assertEqual((fast.sequence, fast.uid, fast.body, fast.flags),
                             (7, 42, body, ("\\Seen",)))  # fmt: skip
        [empty] = self.parse(b"* 1 FETCH (UID 2 BODY[] {0}\r\n)\r\n")
        self.assertEqual(dict(empty.sections), {b"BODY[]": b""})
        parser = FetchResponseParser(Collected(), FetchLimits(maxLiteral=100))
        with self.assertRaises(FetchParseError):
            parser.lineReceived(b"* 1 FETCH (UID 2 BODY[] {101}")
        self.assertFalse(parser.inResponse)

    def test_listingResponseShortcut(self) -> None:
        """
        A listing response as servers write it (C{UID FLAGS INTERNALDATE
        RFC822.SIZE}, in that order) gives the same item as the general
        reader gives for the same response spelled otherwise: flags as
        text, C{NIL} among them left out, an unreadable date as L{None}.
        """
        for flags, date in (
            (b"\\Seen $Forwarded", b"22-Nov-2026 10:00:00 +0100"),
            (b"", b" 2-Jan-2020 00:00:00 -0500"),
            (b"\\Seen", b"22-nov-2026 23:59:59 -0930"),
            (b"\\Seen", b"31-Feb-2026 10:00:00 +0100"),
            (b"\\Seen  NIL caf\xc3\xa9", b"not a date"),
        ):
            rest = b"FLAGS (" + flags + b') INTERNALDATE "' + date + b'" RFC822.SIZE 1234)\r\n'
            [fast] = self.parse(b"* 3 FETCH (UID 17 " + rest)
            [general] = self.parse(b"* 3 FETCH ( UID 17 " + rest)
            self.assertEqual(fast, general)
            self.assertEqual((fast.sequence, fast.uid, fast.size), (3, 17, 1234))
        self.assertEqual(fast.flags, ("\\Seen", "caf\xe9"))
        self.assertIsNone(fast.internalDate)

    def test_listedDateFromTheMatch(self) -> None:
        """
        The date of a listing response as servers write it is made from the
        fields its match found, without L{parseInternalDate}.
        """

        def unused(value: bytes) -> datetime:
            raise AssertionError("parsed again")

        self.patch(fetcheditem, "parseInternalDate", unused)
        [item] = self.parse(
            b'* 1 FETCH (UID 5 FLAGS () INTERNALDATE " 2-Jan-2020 07:08:09 -0500" RFC822.SIZE 10)\r\n'
        )
        self.assertEqual(
            item.internalDate,
            datetime(2020, 1, 2, 7, 8, 9, tzinfo=timezone(timedelta(hours=-5))),
        )

    def test_listedDateAsTheGeneralParser(self) -> None:
        """
        The date of a listing response as servers write it (a space-padded
        day, two digits, one digit) is the date the general parser reads.
        """
        for date in (
            b'" 2-Jan-2020 07:08:09 -0500"',
            b'"22-Nov-2026 23:59:59 +0000"',
            b'"2-Jan-2020 07:08:09 +0130"',
        ):
            [item] = self.parse(
                b"* 1 FETCH (UID 5 FLAGS () INTERNALDATE " + date + b" RFC822.SIZE 10)\r\n"
            )
            [general] = self.parse(
                b"* 1 FETCH ( UID 5 FLAGS () INTERNALDATE " + date + b" RFC822.SIZE 10)\r\n"
            )
            assert item.internalDate is not None and general.internalDate is not None
            self.assertEqual(item.internalDate, general.internalDate)
            self.assertEqual(
                formatInternalDate(item.internalDate), formatInternalDate(general.internalDate)
            )

    def test_madeItem(self) -> None:
        """
        L{fetcheditem.madeItem} makes the same item as L{FetchedItem}'s
        constructor, frozen as it.
        """
        when = datetime(2020, 1, 2, tzinfo=timezone.utc)
        made = fetcheditem.madeItem(3, 7, ("\\Seen",), when, 10, {b"BODY[]": b"x"})
        self.assertEqual(
            made,
            FetchedItem(
                sequence=3, uid=7, flags=("\\Seen",), internalDate=when, size=10,
                sections={b"BODY[]": b"x"},
            ),
        )  # fmt: skip
        self.assertEqual(
            fetcheditem.madeItem(1, 2, None, None, None, fetcheditem._NO_SECTIONS),
            FetchedItem(sequence=1, uid=2),
        )
        with self.assertRaises(attrs.exceptions.FrozenInstanceError):
            made.uid = 8  # type: ignore[misc]

    def test_listedFlagsReadOnce(self) -> None:
        """
        Listing responses with the same flags share one tuple of them: a
        folder's few sets of flags are split and decoded once each, not
        once per message.
        """
        first, second = self.parse(
            b'* 1 FETCH (UID 5 FLAGS (\\Seen $Label1) INTERNALDATE "22-Nov-2026 10:00:00 +0100"'
            b" RFC822.SIZE 10)\r\n"
            b'* 2 FETCH (UID 6 FLAGS (\\Seen $Label1) INTERNALDATE "22-Nov-2026 10:00:00 +0100"'
            b" RFC822.SIZE 20)\r\n"
        )
        self.assertEqual(first.flags, ("\\Seen", "$Label1"))
        self.assertIs(first.flags, second.flags)

    def test_anyChunking(self) -> None:
        """
        The same two responses give the same items whatever the read
        boundaries, down to one octet per read.
        """
        first, second = messageOf(300, 1), messageOf(17, 2)
        wire = (
            b"* 1 FETCH (UID 5 BODY[] {300}\r\n" + first + b" FLAGS (\\Seen))\r\n"
            b"* 2 FETCH (UID 6 BODY[] {17}\r\n" + second + b")\r\n"
        )
        expected = self.parse(wire)
        self.assertEqual([i.body for i in expected], [first, second])
        self.assertEqual(expected[0].flags, ("\\Seen",))
        for chunk in (1, 2, 3, 7, 64, 299, 301):
            self.assertEqual(self.parse(wire, chunk), expected, f"chunk {chunk}")

    def test_modSeq(self) -> None:
        """
        C{MODSEQ (n)} (RFC 7162) is read, as Dovecot sends it once
        CONDSTORE is on.
        """
        [item] = self.parse(b"* 3 FETCH (UID 9 MODSEQ (624140003) FLAGS (\\Seen))\r\n")
        self.assertEqual((item.uid, item.modSeq, item.flags), (9, 624140003, ("\\Seen",)))
        self.assertIsNone(item.body)
        self.assertEqual(dict(item.sections), {})

    def test_itemsAfterTheLiteral(self) -> None:
        """
        Items after a literal, on the line that continues the response,
        are read too.
        """
        wire = b"* 2 FETCH (BODY[] {5}\r\nhello FLAGS (\\Answered) UID 7 RFC822.SIZE 5)\r\n"
        [item] = self.parse(wire)
        self.assertEqual(
            (item.uid, item.flags, item.size, item.body), (7, ("\\Answered",), 5, b"hello")
        )

    def test_emptyLiteral(self) -> None:
        """
        A literal of 0 octets is an empty body; the response goes on with
        the next line.
        """
        [item] = self.parse(b"* 4 FETCH (UID 8 BODY[] {0}\r\n)\r\n")
        self.assertEqual(item.body, b"")
        self.assertEqual(item.uid, 8)

    def test_severalLiterals(self) -> None:
        """
        Several literals in one response each land under their own
        section name, written as the server wrote it.
        """
        header = b"Message-ID: <1@example.org>\r\n\r\n"
        body = messageOf(100)
        wire = (
            b"* 1 FETCH (UID 3 BODY[HEADER.FIELDS (MESSAGE-ID)] {%d}\r\n" % len(header)
            + header
            + b" BODY[]<0> {10}\r\n"
            + body[:10]
            + b" BODY[] {100}\r\n"
            + body
            + b")\r\n"
        )
        [item] = self.parse(wire)
        self.assertEqual(
            dict(item.sections),
            {
                b"BODY[HEADER.FIELDS (MESSAGE-ID)]": header,
                b"BODY[]<0>": body[:10],
                b"BODY[]": body,
            },
        )
        self.assertEqual(item.body, body)

    def test_literal8(self) -> None:
        """
        A C{~{N}} literal8 (RFC 3516, BINARY) carries any octets, NUL
        included.
        """
        binary = b"\x00\x01\xff\r\n\x00"
        [item] = self.parse(b"* 1 FETCH (UID 2 BINARY[] ~{6}\r\n" + binary + b")\r\n")
        self.assertEqual(item.sections[b"BINARY[]"], binary)
        self.assertEqual(item.body, binary)

    def test_quotedAndNilSections(self) -> None:
        """
        A section may come as a quoted string (escapes resolved) or as
        C{NIL}.
        """
        [item] = self.parse(
            b'* 1 FETCH (UID 2 BODY[1] "a \\"quoted\\" \\\\ text" BODY[2] NIL)\r\n'
        )
        self.assertEqual(item.sections[b"BODY[1]"], b'a "quoted" \\ text')
        self.assertIsNone(item.sections[b"BODY[2]"])
        self.assertIsNone(item.body)

    def test_nilBody(self) -> None:
        """
        C{BODY[] NIL} is a section present with no content.
        """
        [item] = self.parse(b"* 1 FETCH (UID 2 BODY[] NIL)\r\n")
        self.assertIn(b"BODY[]", item.sections)
        self.assertIsNone(item.body)

    def test_unsolicitedFlagUpdate(self) -> None:
        """
        An unsolicited flag update (another client's STORE) has flags and
        nothing else.
        """
        [item] = self.parse(b"* 12 FETCH (FLAGS (\\Deleted \\Seen))\r\n")
        self.assertEqual(item, FetchedItem(sequence=12, flags=("\\Deleted", "\\Seen")))

    def test_otherItemsKept(self) -> None:
        """
        Items the parser does not know (nested lists, NIL inside) are kept
        unconverted, and do not confuse what follows.
        """
        wire = (
            b'* 1 FETCH (X-GM-LABELS ("\\\\Important" work) BODYSTRUCTURE ("text" "plain" '
            b'("charset" "utf-8") NIL NIL "7bit" 12 1 NIL NIL NIL NIL) UID 4)\r\n'
        )
        [item] = self.parse(wire)
        self.assertEqual(item.uid, 4)
        self.assertEqual(item.extra[b"X-GM-LABELS"], [b"\\Important", b"work"])
        structure = item.extra[b"BODYSTRUCTURE"]
        assert isinstance(structure, list)
        self.assertEqual(structure[:3], [b"text", b"plain", [b"charset", b"utf-8"]])
        self.assertIsNone(structure[3])

    def test_lowerCaseNames(self) -> None:
        """
        Item names are case-insensitive (C{fetch}, C{uid}, C{nil}); section
        keys keep the server's spelling.
        """
        [item] = self.parse(b"* 1 fetch (uid 2 flags () body[] {1}\r\nx rfc822.size 1)\r\n")
        self.assertEqual((item.uid, item.flags), (2, ()))
        self.assertEqual(item.sections, {b"body[]": b"x"})

    def test_bigLiteralInPieces(self) -> None:
        """
        A 20 MB literal fed in 64 KiB reads arrives whole and exact, and
        the parser keeps asking for octets until the last one.
        """
        size = 20 * 1024 * 1024
        body = messageOf(size)
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 1 RFC822.SIZE %d BODY[] {%d}" % (size, size))
        piece = 64 * 1024
        for offset in range(0, size - piece, piece):
            self.assertTrue(parser.wantsLiteral)
            self.assertIsNone(parser.literalReceived(body[offset : offset + piece]))
        self.assertEqual(parser.literalRemaining, size - (size // piece - 1) * piece)
        rest = parser.literalReceived(body[(size // piece - 1) * piece :] + b")\r\n* 2 FE")
        self.assertEqual(rest, b")\r\n* 2 FE")
        self.assertFalse(parser.wantsLiteral)
        self.assertTrue(parser.inResponse)
        parser.lineReceived(b")")
        [item] = sink.items
        body2 = item.body
        assert body2 is not None
        self.assertEqual(len(body2), size)
        self.assertEqual(hashlib.sha256(body2).digest(), hashlib.sha256(body).digest())

    def test_literalInPlace(self) -> None:
        """
        A literal spanning reads is read into its final C{bytes}: the part
        of a read that holds its start is copied in (L{literalAt}), the rest
        written in place through L{literalSpace} in pieces (8-bit octets,
        NUL, a CR at a piece's edge) and counted with L{literalFilled};
        the body is exactly what was sent, and a C{bytes}.
        """
        body = b"\x00\xff\r" + messageOf(40_000) + b"\r"
        sink = Collected()
        parser = FetchResponseParser(sink)
        self.assertIsNone(parser.literalSpace())
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {%d}" % len(body))
        self.assertEqual(parser.literalAt(b"xx" + body[:1000], 2), -1)
        written = 1000
        for size in (1, 4095, 30_000, len(body) - 35_096):
            space = parser.literalSpace()
            assert space is not None
            self.assertEqual(len(space), len(body) - written)
            space[:size] = body[written : written + size]
            space.release()
            written += size
            self.assertEqual(parser.literalFilled(size), written == len(body))
        # All in: the parser waits for what follows, which ends it.
        self.assertTrue(parser.wantsLiteral)
        self.assertEqual(parser.literalRemaining, 0)
        self.assertIsNone(parser.literalSpace())
        self.assertEqual(sink.items, [])
        self.assertEqual(parser.bodiesAt(b")\r\n* 2 FETCH (UID 8 BODY[] {2}\r\nok)\r\n", 0,
                                         lambda: True), 37)  # fmt: skip
        self.assertFalse(parser.inResponse)
        item, second = sink.items
        self.assertEqual(second.body, b"ok")
        self.assertIs(type(item.body), bytes)
        self.assertEqual(item.body, body)

    def test_literalInPlaceFromItsStart(self) -> None:
        """
        A literal announced at the end of a read can be read in place from
        its first octet; the response's end then comes as a line.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {5}")
        space = parser.literalSpace()
        assert space is not None
        space[:] = b"hello"
        space.release()
        self.assertTrue(parser.literalFilled(5))
        # What follows is a line: the literal ends, the line goes on.
        self.assertEqual(parser.literalAt(b" FLAGS ()", 0), 0)
        self.assertFalse(parser.wantsLiteral)
        parser.lineReceived(b" FLAGS ())")
        self.assertEqual([(i.uid, i.body, i.flags) for i in sink.items], [(7, b"hello", ())])

    def test_literalInPlaceThenLiteralAt(self) -> None:
        """
        Part of a literal read in place, the rest in a read with what
        follows it: the rest is copied in after it, and the response ends
        in that read.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {5}")
        space = parser.literalSpace()
        assert space is not None
        space[:2] = b"he"
        space.release()
        self.assertFalse(parser.literalFilled(2))
        self.assertEqual(parser.literalAt(b"llo)\r\n", 0), 6)
        self.assertEqual([(i.uid, i.body) for i in sink.items], [(7, b"hello")])

    def test_spooledLiteralNotInPlace(self) -> None:
        """
        A literal spooled to a file is not read in place.
        """
        parser = FetchResponseParser(Collected(), FetchLimits(spoolAbove=10))
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {50}")
        self.assertIsNone(parser.literalSpace())
        parser.reset()

    def test_resetMidLiteralInPlace(self) -> None:
        """
        A connection lost while a literal was read in place: the parser
        forgets it, and the next response is read afresh.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {5}")
        parser.literalAt(b"ab", 0)
        parser.reset()
        self.assertIsNone(parser.literalSpace())
        self.assertEqual(self.parse(b"* 1 FETCH (UID 8 BODY[] {2}\r\nok)\r\n")[0].body, b"ok")

    def test_restAfterLiteral(self) -> None:
        """
        The octets that follow a literal in the same read are handed back,
        for the line that continues the response.
        """
        parser = FetchResponseParser(Collected())
        parser.lineReceived(b"* 1 FETCH (BODY[] {3}")
        self.assertIsNone(parser.literalReceived(b"ab"))
        self.assertEqual(parser.literalReceived(b"c"), b"")
        self.assertTrue(parser.inResponse)

    def test_literalAt(self) -> None:
        """
        L{FetchResponseParser.literalAt} takes a literal's octets from a
        position in a read, in as many reads as they come: -1 while it is
        incomplete (an empty rest included), then the position just after
        it; the body is the octets taken, and the response goes on with
        the line after it.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {10}")
        first = b"* 1 FETCH (UID 7 BODY[] {10}\r\n0123"
        self.assertEqual(parser.literalAt(first, len(first) - 4), -1)
        self.assertEqual(parser.literalAt(first, len(first)), -1)
        self.assertEqual(parser.literalRemaining, 6)
        second = b"456789 FLAGS (\\Seen))\r\n* 2 FETCH"
        end = parser.literalAt(second, 0)
        self.assertEqual(second[end:], b" FLAGS (\\Seen))\r\n* 2 FETCH")
        self.assertFalse(parser.wantsLiteral)
        parser.lineReceived(b" FLAGS (\\Seen))")
        [item] = sink.items
        self.assertEqual((item.uid, item.body, item.flags), (7, b"0123456789", ("\\Seen",)))

    def test_bodyEndsAsTokenized(self) -> None:
        """
        A body response that is just C{UID}, the section and its literal
        (read without the tokenizer when its closing parenthesis arrives)
        gives the same item as the tokenizer makes of the same response
        spelled so that it takes the general path (a space after the
        parenthesis); and so does the next response, read as usual.
        """
        for section in (b"BODY[]", b"BINARY[]"):
            items = []
            for opening in (b"(", b"( "):
                sink = Collected()
                wire = (
                    b"* 3 FETCH " + opening + b"UID 42 " + section + b" {5}\r\nab\r\nc)\r\n"
                    b"* 4 FETCH (UID 43 FLAGS (\\Seen) " + section + b" {1}\r\nx)\r\n"
                )
                feedWire(FetchResponseParser(sink), wire, len(wire))
                items.append(sink.items)
            self.assertEqual(items[0], items[1])
            self.assertEqual(
                [(i.sequence, i.uid, dict(i.sections), i.flags) for i in items[0]],
                [(3, 42, {section: b"ab\r\nc"}, None), (4, 43, {section: b"x"}, ("\\Seen",))],
            )

    def test_literalAtEndsBodyResponse(self) -> None:
        """
        A body response (C{UID}, the section, the literal) whose closing
        parenthesis and CRLF follow its literal in the same read is ended
        by L{FetchResponseParser.literalAt}: its item is made at once, the
        position returned is after that line, and the parser is idle for
        the next response; split before the CRLF, it ends with its line as
        before, with the same item.
        """
        wire = b"0123456789)\r\n* 2 FETCH"
        items = []
        for cut in (len(wire), 12):
            sink = Collected()
            parser = FetchResponseParser(sink)
            parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {10}")
            end = parser.literalAt(wire[:cut], 0)
            if cut == len(wire):
                self.assertEqual(wire[end:], b"* 2 FETCH")
                self.assertFalse(parser.inResponse)
            else:
                self.assertEqual(end, 10)
                self.assertTrue(parser.inResponse)
                self.assertEqual(sink.items, [])
                parser.lineReceived(b")")
            items.append(sink.items)
        self.assertEqual(items[0], items[1])
        [item] = items[0]
        self.assertEqual((item.sequence, item.uid, item.body), (1, 7, b"0123456789"))

    def test_bodiesAt(self) -> None:
        """
        L{FetchResponseParser.bodiesAt} reads, after the literal under way,
        every body response that follows in the same read (first line,
        literal, closing line) without a line handed to it; it stops where
        the next is not one (here a response that goes on after its
        literal, and a first line cut by the read's end), where a literal
        is incomplete (-1), or where C{proceed} says so; an empty literal
        leaves its line to go on.
        """
        wire = (
            b"abc)\r\n"
            b"* 2 FETCH (UID 8 BODY[] {2}\r\nde)\r\n"
            b"* 3 FETCH (UID 9 BINARY[] ~{1}\r\n\0)\r\n"
            b"* 4 FETCH (UID 10 BODY[] {1}\r\nf FLAGS ())\r\n"
        )
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {3}")
        end = parser.bodiesAt(wire, 0, lambda: True)
        self.assertEqual(wire[end:], b" FLAGS ())\r\n")
        self.assertEqual(
            [(i.sequence, i.uid, dict(i.sections)) for i in sink.items],
            [(1, 7, {b"BODY[]": b"abc"}), (2, 8, {b"BODY[]": b"de"}),
             (3, 9, {b"BINARY[]": b"\0"})],
        )  # fmt: skip
        parser.lineReceived(b" FLAGS ())")
        self.assertEqual(sink.items[-1].body, b"f")

        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {3}")
        rest = b"* 2 FETCH (UID 8 BODY[] {2}\r\nd"
        self.assertEqual(parser.bodiesAt(b"abc)\r\n" + rest, 0, lambda: True), -1)
        self.assertEqual(parser.literalRemaining, 1)
        cut = b"abc)\r\n* 2 FETCH (UID 8 BO"
        parser = FetchResponseParser(Collected())
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {3}")
        self.assertEqual(parser.bodiesAt(cut, 0, lambda: True), 6)
        parser = FetchResponseParser(Collected())
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {3}")
        self.assertEqual(parser.bodiesAt(b"abc)\r\n" + rest, 0, lambda: False), 6)
        self.assertFalse(parser.inResponse)
        empty = b"abc)\r\n* 2 FETCH (UID 8 BODY[] {0}\r\n)\r\n"
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {3}")
        end = parser.bodiesAt(empty, 0, lambda: True)
        self.assertEqual(empty[end:], b")\r\n")
        parser.lineReceived(b")")
        self.assertEqual([i.body for i in sink.items], [b"abc", b""])

    def test_literalAtWholeRead(self) -> None:
        """
        A literal that is a whole read, taken from its start, is kept as
        that read, uncopied.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (UID 7 BODY[] {5000}")
        body = messageOf(5000)
        self.assertEqual(parser.literalAt(body, 0), 5000)
        parser.lineReceived(b")")
        [item] = sink.items
        self.assertIs(item.body, body)

    def test_malformed(self) -> None:
        """
        A malformed response raises L{FetchParseError} and leaves the
        parser idle, ready for the next response.
        """
        for line in [
            b"* 1 FETCH UID 4",
            b"* 1 FETCH (UID 4",
            b"* 1 FETCH (UID 4))",
            b"* 1 FETCH (UID)",
            b"* 1 FETCH (UID x)",
            b'* 1 FETCH (UID 4 BODY[] "unterminated)',
            b"* 1 FETCH (UID 4 BODY[] {3} FLAGS ())",
            b"* 1 FETCH (UID 4 BODY[] {x})",
            b"* 1 FETCH (BODY[HEADER {3}",
            b"* 1 FETCH (MODSEQ 4)",
            b"* 1 FETCH (FLAGS \\Seen)",
            b"* 1 FETCH (BODY[] (a b))",
            b"* x FETCH (UID 4)",
        ]:
            sink = Collected()
            parser = FetchResponseParser(sink)
            self.assertRaises(FetchParseError, parser.lineReceived, line)
            self.assertFalse(parser.inResponse, line)
            parser.lineReceived(b"* 2 FETCH (UID 5)")
            self.assertEqual([i.uid for i in sink.items], [5], line)

    def test_lineWhileLiteralExpected(self) -> None:
        """
        A line given while literal octets are expected is an error.
        """
        parser = FetchResponseParser(Collected())
        parser.lineReceived(b"* 1 FETCH (BODY[] {3}")
        self.assertRaises(FetchParseError, parser.lineReceived, b")")
        self.assertFalse(parser.inResponse)

    def test_reset(self) -> None:
        """
        L{FetchResponseParser.reset} forgets a response half-way through.
        """
        sink = Collected()
        parser = FetchResponseParser(sink)
        parser.lineReceived(b"* 1 FETCH (BODY[] {3}")
        parser.literalReceived(b"a")
        parser.reset()
        self.assertFalse(parser.inResponse)
        parser.lineReceived(b"* 2 FETCH (UID 5)")
        self.assertEqual([i.uid for i in sink.items], [5])

    def test_reprShowsNoOctets(self) -> None:
        """
        An item's C{repr} gives section sizes, never message octets.
        """
        [item] = self.parse(b"* 1 FETCH (UID 2 BODY[] {6}\r\nsecret BODY[1] NIL)\r\n")
        text = repr(item)
        self.assertNotIn("secret", text)
        self.assertIn("<6 octets>", text)


class HelperTests(SynchronousTestCase):
    """
    The module's small functions.
    """

    def test_isFetchResponse(self) -> None:
        """
        Only an untagged C{<number> FETCH} response is recognised, in any
        case.
        """
        for line in [b"* 1 FETCH (UID 1)", b"* 123456 fetch (FLAGS ())", b"* 1 FETCH(UID 1)"]:
            self.assertTrue(isFetchResponse(line), line)
        for line in [
            b"* 1 EXISTS",
            b"* OK [UIDNEXT 4] Predicted next UID",
            b"* FETCH (UID 1)",
            b"0001 FETCH (UID 1)",
            b"* 1 FETCHED",
            b"+ FETCH",
            b"",
        ]:
            self.assertFalse(isFetchResponse(line), line)

    def test_internalDate(self) -> None:
        """
        RFC 3501 date-times are read with their offset; a day may be
        space-padded.
        """
        self.assertEqual(
            parseInternalDate(b"22-Nov-2026 10:00:00 +0100"),
            datetime(2026, 11, 22, 10, 0, 0, tzinfo=CET),
        )
        when = parseInternalDate(b" 2-Jan-2020 23:59:58 -0530")
        self.assertEqual(when.utcoffset(), -timedelta(hours=5, minutes=30))
        self.assertEqual(
            when.astimezone(timezone.utc), datetime(2020, 1, 3, 5, 29, 58, tzinfo=timezone.utc)
        )
        for bad in [b"", b"22-Nov-2026", b"22-Foo-2026 10:00:00 +0100", b"22-Nov-2026 10:00 +0100",
                    b"22-Nov-2026 10:00:00 0100", b"31-Feb-2026 10:00:00 +0100"]:
            self.assertRaises(ValueError, parseInternalDate, bad)

    def test_unreadableDateIsNone(self) -> None:
        """
        A response with an INTERNALDATE that cannot be read gives
        L{None}, the rest of the response intact.
        """
        items: list[FetchedItem] = []
        parser = FetchResponseParser(items.append)
        parser.lineReceived(b'* 1 FETCH (INTERNALDATE "yesterday" UID 3)')
        self.assertEqual((items[0].internalDate, items[0].uid), (None, 3))

    def test_parseResponse(self) -> None:
        """
        L{parseResponse} reads a complete small response, literals inline
        as Twisted's client joins them.
        """
        self.assertEqual(
            parseResponse(b'LIST (\\HasNoChildren \\Sent) "/" {5}\r\na"b c'),
            [b"LIST", [b"\\HasNoChildren", b"\\Sent"], b"/", b'a"b c'],
        )
        self.assertEqual(parseResponse(b'LIST () NIL INBOX'), [b"LIST", [], None, b"INBOX"])
        for bad in [b"LIST (a", b"LIST a)", b"LIST {5}\r\nab", b"LIST {2}ab"]:
            self.assertRaises(FetchParseError, parseResponse, bad)

    def test_formatUIDSet(self) -> None:
        """
        UID sets are compact ranges, in ascending order, duplicates merged.
        """
        self.assertEqual(formatUIDSet([7, 1, 2, 3, 9, 10, 3]), b"1:3,7,9:10")
        self.assertEqual(formatUIDSet([4]), b"4")
        self.assertRaises(ValueError, formatUIDSet, [])
        self.assertRaises(ValueError, formatUIDSet, [0, 1])


# The client hook.


class RecordingTransport(StringTransport):
    """
    A L{StringTransport} with the TCP option the client sets.
    """

    def setTcpNoDelay(self, enabled: bool) -> None:
        pass


def greeted(
    caps: bytes = b"IMAP4rev1 LITERAL+", timeout: float = 0, clock: Clock | None = None
) -> tuple[MigrationIMAP4Client, RecordingTransport]:
    """
    A client connected to a transport and greeted, nothing written yet.
    """
    client = MigrationIMAP4Client(clock or Clock(), timeout)
    transport = RecordingTransport()
    client.makeConnection(transport)
    client.dataReceived(b"* OK [CAPABILITY " + caps + b"] ready\r\n")
    return client, transport


def feedInChunks(client: MigrationIMAP4Client, wire: bytes, chunk: int) -> None:
    """
    Deliver C{wire} to C{client}, C{chunk} octets per read.
    """
    for i in range(0, len(wire), chunk):
        client.dataReceived(wire[i : i + chunk])


class ClientHookTests(SynchronousTestCase):
    """
    L{MigrationIMAP4Client.fetchInto}: FETCH responses go to the
    incremental parser while fetch commands are in flight; everything else
    keeps Twisted's path.
    """

    def test_fetchInto(self) -> None:
        """
        The command is written at once with its own tag; its FETCH
        responses reach the sink; its tagged OK fires the Deferred with the
        text after OK.
        """
        client, transport = greeted()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 5 (UID BODY.PEEK[])", sink)
        self.assertEqual(transport.value(), b"0001 UID FETCH 5 (UID BODY.PEEK[])\r\n")
        body = messageOf(500)
        client.dataReceived(
            b"* 1 FETCH (UID 5 BODY[] {500}\r\n" + body + b")\r\n"
            b"0001 OK Fetch completed (0.001 + 0.000 secs).\r\n"
        )
        self.assertEqual(self.successResultOf(d), b"Fetch completed (0.001 + 0.000 secs).")
        self.assertEqual([(i.uid, i.body) for i in sink.items], [(5, body)])
        self.assertFalse(transport.disconnecting)

    def test_pipelinedPairWithUnsolicitedData(self) -> None:
        """
        Two fetch commands in flight at once: each response goes to the
        sink of the oldest command still in flight; an unsolicited flag
        update goes to a sink too; C{EXISTS} and C{RECENT} in between keep
        the stock path; every read split gives the same result.
        """
        first, second, third = messageOf(70_000, 1), messageOf(3, 2), messageOf(0, 3)
        wire = (
            b"* 1 FETCH (UID 10 BODY[] {70000}\r\n" + first + b")\r\n"
            b"* 7 EXISTS\r\n"
            b"* 1 RECENT\r\n"
            b"* 3 FETCH (FLAGS (\\Seen))\r\n"
            b"0001 OK Fetch completed.\r\n"
            b"* 2 FETCH (UID 11 BODY[] {3}\r\n" + second + b" FLAGS ())\r\n"
            b"* 4 FETCH (UID 13 BODY[] {0}\r\n" + third + b")\r\n"
            b"0002 OK Fetch completed.\r\n"
        )
        for chunk in (1, 5, 4096, 65536, len(wire)):
            client, transport = greeted()
            news: list[tuple[object, object]] = []
            client.newMessages = (  # type: ignore[method-assign]
                lambda exists, recent: news.append((exists, recent))
            )
            sinks = Collected(), Collected()
            d1 = client.fetchInto(b"UID FETCH 10 (UID BODY.PEEK[])", sinks[0])
            d2 = client.fetchInto(b"UID FETCH 11:13 (UID BODY.PEEK[])", sinks[1])
            self.assertEqual(
                transport.value(),
                b"0001 UID FETCH 10 (UID BODY.PEEK[])\r\n"
                b"0002 UID FETCH 11:13 (UID BODY.PEEK[])\r\n",
            )
            feedInChunks(client, wire, chunk)
            self.successResultOf(d1)
            self.successResultOf(d2)
            self.assertEqual(
                [(i.sequence, i.uid, i.body, i.flags) for i in sinks[0].items],
                [(1, 10, first, None), (3, None, None, ("\\Seen",))],
                f"chunk {chunk}",
            )
            self.assertEqual(
                [(i.uid, i.body) for i in sinks[1].items], [(11, second), (13, b"")]
            )
            self.assertIn((7, None), news)
            self.assertIn((None, 1), news)
            self.assertFalse(transport.disconnecting)

    def test_literalsTakenInPlace(self) -> None:
        """
        Several body responses in one read are read from that read in
        place: each literal is given the read itself and a position in it
        (no copy of the rest of the read at each literal's end), and every
        body comes out whole.
        """
        client, transport = greeted()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 1:3 (UID BODY.PEEK[])", sink)
        bodies = [messageOf(size, seed) for seed, size in enumerate((300, 1, 4000), start=1)]
        wire = b"".join(
            b"* %d FETCH (UID %d BODY[] {%d}\r\n" % (n, n, len(body)) + body + b")\r\n"
            for n, body in enumerate(bodies, start=1)
        ) + b"0001 OK done\r\n"
        given: list[tuple[bytes, int]] = []

        class Spying(FetchResponseParser):
            def literalAt(self, data: bytes, pos: int) -> int:
                given.append((data, pos))
                return FetchResponseParser.literalAt(self, data, pos)

        client._fetchParser = Spying(client._fetchedItem)
        client.dataReceived(wire)
        self.successResultOf(d)
        self.assertEqual([i.body for i in sink.items], bodies)
        self.assertEqual(len(given), 3)
        for data, pos in given:
            self.assertIs(data, wire)
        starts = [wire.index(b"}\r\n", wire.index(b"UID %d " % n)) + 3 for n in (1, 2, 3)]
        self.assertEqual([pos for _, pos in given], starts)
        self.assertFalse(transport.disconnecting)

    def test_stockPathWithoutSink(self) -> None:
        """
        With no fetch command in flight a FETCH response keeps Twisted's
        path: an unsolicited one reaches C{flagsChanged}, and a stock FETCH
        command gets its reply.
        """
        client, transport = greeted()
        changed: list[object] = []
        client.flagsChanged = changed.append  # type: ignore[method-assign]
        client.dataReceived(b"* 3 FETCH (FLAGS (\\Seen))\r\n")
        self.assertEqual(changed, [{3: ["\\Seen"]}])
        d = client.fetchMessage("1")
        client.dataReceived(b"* 1 FETCH (RFC822 {5}\r\nhello)\r\n0001 OK done\r\n")
        self.assertEqual(self.successResultOf(d), {1: {"RFC822": "hello"}})

    def test_stockCommandAlongside(self) -> None:
        """
        A stock command (NOOP) queued while fetches are in flight gets its
        own untagged data and reply, and the fetch its responses.
        """
        client, transport = greeted()
        sink = Collected()
        noop = client.noop()
        d = client.fetchInto(b"UID FETCH 1 (UID FLAGS)", sink)
        client.dataReceived(
            b"* 1 FETCH (UID 1 FLAGS (\\Seen))\r\n* 2 EXISTS\r\n"
            b"0001 OK NOOP done\r\n0002 OK Fetch done\r\n"
        )
        self.assertEqual(self.successResultOf(noop), [[b"2", b"EXISTS"]])
        self.successResultOf(d)
        self.assertEqual([i.uid for i in sink.items], [1])

    def test_literal8(self) -> None:
        """
        A C{~{N}} literal8 in a BINARY response is read as a literal.
        """
        client, transport = greeted()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 2 (UID BINARY.PEEK[])", sink)
        client.dataReceived(b"* 1 FETCH (UID 2 BINARY[] ~{4}\r\n\x00\r\n\xff)\r\n0001 OK done\r\n")
        self.successResultOf(d)
        self.assertEqual(sink.items[0].body, b"\x00\r\n\xff")

    def test_refused(self) -> None:
        """
        A tagged NO or BAD fails the Deferred with L{CommandRefused}
        carrying the status and text; responses before it were delivered.
        """
        client, transport = greeted()
        sink = Collected()
        no = client.fetchInto(b"UID FETCH 1:2 (UID BODY.PEEK[])", sink)
        bad = client.fetchInto(b"UID FETCH x (UID)", sink)
        client.dataReceived(
            b"* 1 FETCH (UID 1 BODY[] {1}\r\na)\r\n"
            b"0001 NO [EXPUNGEISSUED] Some of the requested messages no longer exist\r\n"
            b"0002 BAD Error in IMAP command UID FETCH: Invalid uidset\r\n"
        )
        error = self.failureResultOf(no, CommandRefused).value
        self.assertEqual(error.status, "NO")
        self.assertEqual(
            error.text, b"[EXPUNGEISSUED] Some of the requested messages no longer exist"
        )
        self.assertEqual(self.failureResultOf(bad, CommandRefused).value.status, "BAD")
        self.assertEqual([i.uid for i in sink.items], [1])

    def test_connectionLostMidLiteral(self) -> None:
        """
        A connection lost in the middle of a literal fails every fetch in
        flight; a later fetch fails at once.
        """
        client, transport = greeted()
        d1 = client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", Collected())
        d2 = client.fetchInto(b"UID FETCH 2 (UID BODY.PEEK[])", Collected())
        client.dataReceived(b"* 1 FETCH (UID 1 BODY[] {100}\r\nabc")
        client.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(d1, ConnectionDone)
        self.failureResultOf(d2, ConnectionDone)
        self.failureResultOf(client.fetchInto(b"NOOP", Collected()), ConnectionDone)

    def test_unreadableResponse(self) -> None:
        """
        A FETCH response the parser cannot read fails the fetches in flight
        with L{ProtocolError} naming the parser's complaint, and drops the
        connection.
        """
        client, transport = greeted()
        d = client.fetchInto(b"UID FETCH 1 (UID)", Collected())
        client.dataReceived(b"* 1 FETCH (UID 1 (\r\n0001 OK done\r\n")
        error = self.failureResultOf(d, ProtocolError).value
        self.assertIn("unreadable FETCH response", str(error))
        self.assertTrue(transport.disconnecting)

    def test_failingSinkDropsConnection(self) -> None:
        """
        A sink that raises is a bug: it is logged and the connection
        dropped.
        """
        client, transport = greeted()

        def sink(item: FetchedItem) -> None:
            raise RuntimeError("bug")

        d = client.fetchInto(b"UID FETCH 1 (UID)", sink)
        client.dataReceived(b"* 1 FETCH (UID 1)\r\n")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertTrue(transport.disconnecting)
        self.failureResultOf(d, ConnectionDropped)

    def test_bodiesInOneReadStopWithTheConnection(self) -> None:
        """
        Body responses that arrive in one read are each handed to the
        sink; once a sink has paused the connection's reading, the rest of
        the read waits for it to resume; once a sink's failure has dropped
        the connection, the rest is not handed over.
        """
        wire = b"".join(
            b"* %d FETCH (UID %d BODY[] {3}\r\nab%d)\r\n" % (n, n, n) for n in (1, 2, 3)
        )
        client, transport = greeted()
        seen: list[int | None] = []
        d = client.fetchInto(b"UID FETCH 1:3 (UID BODY.PEEK[])", lambda item: seen.append(item.uid))
        client.dataReceived(wire + transport.value().split(b" ")[0] + b" OK done\r\n")
        self.assertEqual(seen, [1, 2, 3])
        self.successResultOf(d)

        client, transport = greeted()
        seen = []

        def pausing(item: FetchedItem) -> None:
            seen.append(item.uid)
            if item.uid == 1:
                client.pauseProducing()

        d = client.fetchInto(b"UID FETCH 1:3 (UID BODY.PEEK[])", pausing)
        client.dataReceived(wire)
        self.assertEqual(seen, [1])
        client.resumeProducing()
        self.assertEqual(seen, [1, 2, 3])

        client, transport = greeted()
        seen = []

        def failing(item: FetchedItem) -> None:
            seen.append(item.uid)
            raise RuntimeError("bug")

        d = client.fetchInto(b"UID FETCH 1:3 (UID BODY.PEEK[])", failing)
        client.dataReceived(wire)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(seen, [1])
        self.assertTrue(transport.disconnecting)
        self.failureResultOf(d, ConnectionDropped)

    def test_literalKeepsConnectionAlive(self) -> None:
        """
        Literal octets are progress for the reply deadline, every 64 KiB of
        them, however long the literal takes; a trickle is not.
        """
        clock = Clock()
        client, transport = greeted(timeout=30, clock=clock)
        d = client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", Collected())
        client.dataReceived(b"* 1 FETCH (UID 1 BODY[] {655360}\r\n")
        for _ in range(10):
            clock.advance(20)
            client.dataReceived(b"x" * 65536)
        clock.advance(20)
        client.dataReceived(b")\r\n0001 OK done\r\n")
        self.successResultOf(d)
        self.assertFalse(transport.disconnecting)
        d = client.fetchInto(b"UID FETCH 2 (UID BODY.PEEK[])", Collected())
        client.dataReceived(b"* 2 FETCH (UID 2 BODY[] {10}\r\n")
        for _ in range(2):
            clock.advance(20)
            client.dataReceived(b"x")
        self.assertTrue(transport.disconnecting)
        self.failureResultOf(d, ReplyTimeout)
        client.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])
    def test_bigBodyThroughClient(self) -> None:
        """
        A 20 MB body read through the client in 64 KiB reads arrives exact.
        """
        size = 20 * 1024 * 1024
        body = messageOf(size)
        client, transport = greeted()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", sink)
        wire = b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % size + body + b")\r\n0001 OK done\r\n"
        feedInChunks(client, wire, 64 * 1024)
        self.successResultOf(d)
        got = sink.items[0].body
        assert got is not None
        self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(body).digest())

    def test_literalSpaceThroughClient(self) -> None:
        """
        The client offers the rest of a body literal to a transport that
        reads in place (C{literalSpace}) only while the literal is being
        read and nothing received waits to be handed over; what it reads
        there (C{literalFilled}) ends the literal as the same octets
        received would, and the lines after it are read as usual.
        """
        body = messageOf(70_000)
        client, transport = greeted()
        sink = Collected()
        d = client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", sink)
        self.assertIsNone(client.literalSpace())
        client.dataReceived(b"* 1 FETCH (UID 1 BODY[] {70000}\r\n" + body[:100])
        for start, end in ((100, 60_000), (60_000, 70_000)):
            space = client.literalSpace()
            assert space is not None
            self.assertEqual(len(space), 70_000 - start)
            space[: end - start] = body[start:end]
            space.release()
            client.literalFilled(end - start)
        self.assertIsNone(client.literalSpace())
        client.dataReceived(b")\r\n0001 OK done\r\n")
        self.successResultOf(d)
        self.assertEqual([(i.uid, i.body) for i in sink.items], [(1, body)])
        self.assertFalse(transport.disconnecting)

    def test_noLiteralSpaceWhilePaused(self) -> None:
        """
        While the client's reading is paused, nothing is read in place
        (what is read meanwhile waits, in order).
        """
        client, transport = greeted()
        client.fetchInto(b"UID FETCH 1 (UID BODY.PEEK[])", Collected())
        client.dataReceived(b"* 1 FETCH (UID 1 BODY[] {10}\r\nab")
        self.assertIsNotNone(client.literalSpace())
        client.pauseProducing()
        self.assertIsNone(client.literalSpace())
        client.resumeProducing()
        space = client.literalSpace()
        assert space is not None
        space.release()

    def test_sendCollecting(self) -> None:
        """
        L{MigrationIMAP4Client.sendCollecting} hands over the untagged
        responses unparsed, a literal inline, and the tagged line.
        """
        client, transport = greeted()
        d = client.sendCollecting(b"LIST", b'"" "*"')
        self.assertEqual(transport.value(), b'0001 LIST "" "*"\r\n')
        client.dataReceived(
            b'* LIST (\\HasNoChildren) "/" {3}\r\na"b\r\n'
            b'* LIST () "/" INBOX\r\n0001 OK List done\r\n'
        )
        lines, tagged = self.successResultOf(d)
        self.assertEqual(lines[1], b'LIST () "/" INBOX')
        self.assertEqual(parseResponse(lines[0])[-1], b'a"b')
        self.assertEqual(tagged, b"OK List done")
        failed = client.sendCollecting(b"LIST", b'"" "*"')
        client.dataReceived(b"0002 NO nope\r\n")
        self.failureResultOf(failed, IMAP4Exception)

    def test_stockLiteralEndingTheLine(self) -> None:
        """
        A literal that ends a stock response (a LIST name sent as a
        literal) ends it there, wherever the read boundaries fall: the
        line after it (here the tagged reply) is not taken for the rest of
        the response, as Twisted's own code, which strips the line end,
        would take it.
        """
        wire = b'* LIST () "/" {3}\r\nabc\r\n* LIST () "/" INBOX\r\n0001 OK done\r\n'
        for split in range(len(wire) + 1):
            client, transport = greeted()
            d = client.list("", "*")
            client.dataReceived(wire[:split])
            client.dataReceived(wire[split:])
            self.assertEqual(
                self.successResultOf(d),
                [((), "/", "abc"), ((), "/", "INBOX")],
                f"split at {split}",
            )


def deflate(data: bytes, compressor: Any) -> bytes:
    """
    C{data} as a compressing server sends it: raw DEFLATE, sync-flushed.
    """
    return bytes(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))


class CompressedFetchTests(SynchronousTestCase):
    """
    FETCH responses read under COMPRESS=DEFLATE.
    """

    def test_compressedBodies(self) -> None:
        """
        Compressed FETCH responses carrying literals give the exact bodies,
        whatever the read boundaries; the command leaves compressed.
        """
        bodies = [messageOf(100_000, 1), messageOf(10, 2)]
        plain = (
            b"* 1 FETCH (UID 1 BODY[] {100000}\r\n" + bodies[0] + b")\r\n"
            b"* 9 EXISTS\r\n"
            b"* 2 FETCH (UID 2 BODY[] {10}\r\n" + bodies[1] + b" FLAGS (\\Seen))\r\n"
            b"0002 OK done\r\n"
        )
        for chunk in (1, 7, 1000, 1 << 20):
            client, transport = greeted(b"IMAP4rev1 COMPRESS=DEFLATE")
            client.startCompression()
            client.dataReceived(b"0001 OK Begin compression\r\n")
            transport.clear()
            sink = Collected()
            d = client.fetchInto(b"UID FETCH 1:2 (UID BODY.PEEK[])", sink)
            self.assertEqual(
                zlib.decompressobj(-15).decompress(transport.value()),
                b"0002 UID FETCH 1:2 (UID BODY.PEEK[])\r\n",
            )
            wire = deflate(plain, zlib.compressobj(6, zlib.DEFLATED, -15))
            feedInChunks(client, wire, chunk)
            self.successResultOf(d)
            self.assertEqual([i.body for i in sink.items], bodies, f"chunk {chunk}")
            self.assertFalse(transport.disconnecting)


# The session.


def connectedSession(caps: bytes) -> tuple[IMAPSession, RecordingTransport]:
    """
    A session over a greeted client whose capabilities after login are
    C{caps}.
    """
    client, transport = greeted(caps)
    session = IMAPSession(client, "test")
    session.capabilities = frozenset(caps.upper().split())
    return session, transport


def reply(session: IMAPSession, transport: StringTransport, expected: bytes, wire: bytes) -> None:
    """
    Check that C{expected} was written, then feed C{wire}.
    """
    written = transport.value()
    transport.clear()
    if written != expected:
        raise AssertionError(f"written {written!r}, expected {expected!r}")
    session.client.dataReceived(wire)


DOVECOT_EXAMINE = (
    b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Forwarded)\r\n"
    b"* OK [PERMANENTFLAGS ()] Read-only mailbox.\r\n"
    b"* 3 EXISTS\r\n"
    b"* 0 RECENT\r\n"
    b"* OK [UIDVALIDITY 1763890000] UIDs valid\r\n"
    b"* OK [UIDNEXT 4] Predicted next UID\r\n"
    b"* OK [HIGHESTMODSEQ 7] Highest\r\n"
    b"0001 OK [READ-ONLY] Examine completed (0.001 + 0.000 secs).\r\n"
)


class SessionTests(SynchronousTestCase):
    """
    The read-side session methods.
    """

    def test_examineWithCondstore(self) -> None:
        """
        With CONDSTORE, EXAMINE carries the CONDSTORE parameter, and
        EXISTS, UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ are read.
        """
        session, transport = connectedSession(b"IMAP4rev1 CONDSTORE")
        d = Deferred.fromCoroutine(session.examine("Entwürfe"))
        reply(session, transport, b'0001 EXAMINE "Entw&APw-rfe" (CONDSTORE)\r\n', DOVECOT_EXAMINE)
        examined = self.successResultOf(d)
        self.assertEqual(
            (
                examined.name,
                examined.exists,
                examined.uidValidity,
                examined.uidNext,
                examined.highestModSeq,
            ),
            ("Entwürfe", 3, 1763890000, 4, 7),
        )

    def test_examineWithoutCondstore(self) -> None:
        """
        Without CONDSTORE the parameter is left out and there is no
        HIGHESTMODSEQ; the wire name, when given, is used as is.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.examine("a\"b", b'a"b'))
        reply(
            session,
            transport,
            b'0001 EXAMINE "a\\"b"\r\n',
            b"* 0 EXISTS\r\n* OK [UIDVALIDITY 5] ok\r\n* OK [NOMODSEQ] none\r\n"
            b"0001 OK [READ-ONLY] done\r\n",
        )
        examined = self.successResultOf(d)
        self.assertEqual(
            (examined.exists, examined.uidValidity, examined.uidNext, examined.highestModSeq),
            (0, 5, None, None),
        )

    def test_examineRefused(self) -> None:
        """
        A refused EXAMINE raises L{CommandFailed}.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.examine("Gone"))
        reply(
            session,
            transport,
            b'0001 EXAMINE "Gone"\r\n',
            b"0001 NO Mailbox doesn't exist: Gone\r\n",
        )
        error = self.failureResultOf(d, CommandFailed).value
        self.assertEqual((error.command, error.status), ("EXAMINE", "NO"))

    def test_listFoldersExtended(self) -> None:
        """
        With LIST-EXTENDED and SPECIAL-USE one LIST with RETURN options
        gives names (decoded), delimiters, attributes and subscriptions.
        """
        session, transport = connectedSession(b"IMAP4rev1 LIST-EXTENDED SPECIAL-USE")
        d = Deferred.fromCoroutine(session.listFolders())
        reply(
            session,
            transport,
            b'0001 LIST "" "*" RETURN (SUBSCRIBED SPECIAL-USE)\r\n',
            b'* LIST (\\HasChildren \\Subscribed) "/" INBOX\r\n'
            b'* LIST (\\HasNoChildren \\Subscribed \\Sent) "/" Sent\r\n'
            b'* LIST (\\HasNoChildren) "/" "Entw&APw-rfe"\r\n'
            b'* LIST (\\Noselect \\HasChildren) "/" Archive\r\n'
            b'* LIST (\\NonExistent \\Subscribed) "/" Old\r\n'
            b'* LIST (\\HasNoChildren) "/" {6}\r\nIN"BOX\r\n'
            b"0001 OK List completed (0.001 + 0.000 secs).\r\n",
        )
        listed = self.successResultOf(d)
        self.assertEqual(
            [(m.name, m.delimiter, m.subscribed, m.selectable, m.specialUse) for m in listed],
            [
                ("INBOX", "/", True, True, None),
                ("Sent", "/", True, True, "\\Sent"),
                ("Entwürfe", "/", False, True, None),
                ("Archive", "/", False, False, None),
                ("Old", "/", True, False, None),
                ('IN"BOX', "/", False, True, None),
            ],
        )
        self.assertEqual(listed[2].wireName, b"Entw&APw-rfe")

    def test_listFoldersWithLsub(self) -> None:
        """
        Without LIST-EXTENDED, LIST then LSUB; subscriptions come from
        LSUB.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.listFolders())
        reply(
            session,
            transport,
            b'0001 LIST "" "*"\r\n',
            b'* LIST (\\HasNoChildren) "." INBOX\r\n'
            b'* LIST (\\HasNoChildren \\Trash) "." Trash\r\n'
            b'* LIST (\\HasNoChildren) "." "a.b"\r\n'
            b"0001 OK done\r\n",
        )
        reply(
            session,
            transport,
            b'0002 LSUB "" "*"\r\n',
            b'* LSUB () "." inbox\r\n* LSUB () "." "a.b"\r\n0002 OK done\r\n',
        )
        listed = self.successResultOf(d)
        self.assertEqual(
            [(m.name, m.subscribed, m.specialUse) for m in listed],
            [("INBOX", True, None), ("Trash", False, "\\Trash"), ("a.b", True, None)],
        )

    def test_listedMailboxAttributesCaseInsensitive(self) -> None:
        """
        Attributes are matched whatever their case.
        """
        mailbox = ListedMailbox("x", b"x", None, ("\\NOSELECT", "\\junk"), False)
        self.assertFalse(mailbox.selectable)
        self.assertEqual(mailbox.specialUse, "\\Junk")

    def test_fetchMetadata(self) -> None:
        """
        C{UID FETCH <set> (UID FLAGS INTERNALDATE RFC822.SIZE)}; the
        responses by UID, an unsolicited flag update merged into its
        message, one without UID left out.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.fetchMetadata(b"1:*"))
        reply(
            session,
            transport,
            b"0001 UID FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)\r\n",
            b'* 2 FETCH (UID 9 FLAGS () INTERNALDATE "01-Jan-2020 00:00:00 +0000" '
            b"RFC822.SIZE 20)\r\n"
            b'* 1 FETCH (UID 3 FLAGS (\\Seen) INTERNALDATE "22-Nov-2026 10:00:00 +0100" '
            b"RFC822.SIZE 1234)\r\n"
            b"* 1 FETCH (UID 3 FLAGS (\\Seen \\Flagged))\r\n"
            b"* 5 FETCH (FLAGS (\\Deleted))\r\n"
            b"0001 OK Fetch completed.\r\n",
        )
        items = self.successResultOf(d)
        self.assertEqual(
            [(i.uid, i.flags, i.size) for i in items],
            [(3, ("\\Seen", "\\Flagged"), 1234), (9, (), 20)],
        )
        self.assertEqual(items[0].internalDate, datetime(2026, 11, 22, 10, 0, tzinfo=CET))

    def test_fetchMetadataChangedSince(self) -> None:
        """
        C{changedSince} adds the CHANGEDSINCE modifier (RFC 7162).
        """
        session, transport = connectedSession(b"IMAP4rev1 CONDSTORE")
        d = Deferred.fromCoroutine(session.fetchMetadata(b"1:99", b"UID FLAGS", changedSince=5))
        reply(
            session,
            transport,
            b"0001 UID FETCH 1:99 (UID FLAGS) (CHANGEDSINCE 5)\r\n",
            b"* 4 FETCH (UID 7 MODSEQ (9) FLAGS (\\Answered))\r\n0001 OK done\r\n",
        )
        [item] = self.successResultOf(d)
        self.assertEqual((item.uid, item.modSeq, item.flags), (7, 9, ("\\Answered",)))

    def test_fetchBodiesPipelined(self) -> None:
        """
        One command per UID set, all written before any reply; bodies kept
        only for the UIDs asked; a refusal reported per set.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.fetchBodies([[1, 2, 3], [7]]))
        one, two = messageOf(50, 1), messageOf(60, 2)
        reply(
            session,
            transport,
            b"0001 UID FETCH 1:3 (UID BODY.PEEK[])\r\n0002 UID FETCH 7 (UID BODY.PEEK[])\r\n",
            b"* 1 FETCH (UID 1 BODY[] {50}\r\n" + one + b")\r\n"
            b"* 2 FETCH (UID 3 BODY[] NIL)\r\n"
            b"* 9 FETCH (UID 20 BODY[] {1}\r\nx)\r\n"
            b"* 3 FETCH (UID 2 FLAGS (\\Seen))\r\n"
            b"0001 OK Fetch completed.\r\n"
            b"* 4 FETCH (UID 7 BODY[] {60}\r\n" + two + b")\r\n"
            b"0002 NO [SERVERBUG] Internal error\r\n",
        )
        result = self.successResultOf(d)
        self.assertEqual(result.bodies, {1: one, 3: None, 7: two})
        self.assertIsNone(result.refusals[0])
        refusal = result.refusals[1]
        assert refusal is not None
        self.assertEqual((refusal.status, refusal.code), ("NO", "SERVERBUG"))

    def test_fetchBodiesBad(self) -> None:
        """
        A C{BAD} reply is reported with its status.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.fetchBodies([[1]]))
        reply(session, transport, b"0001 UID FETCH 1 (UID BODY.PEEK[])\r\n", b"0001 BAD Error\r\n")
        refusal = self.successResultOf(d).refusals[0]
        assert refusal is not None
        self.assertEqual(refusal.status, "BAD")

    def test_fetchBodiesConnectionLost(self) -> None:
        """
        A connection lost while bodies arrive raises L{ConnectionLost},
        once every command has ended.
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.fetchBodies([[1], [2]]))
        session.client.dataReceived(b"* 1 FETCH (UID 1 BODY[] {10}\r\nabc")
        session.client.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(d, ConnectionLost)

    def test_fetchUnreadable(self) -> None:
        """
        An unreadable FETCH response raises L{ConnectionLost} (the
        connection is dropped).
        """
        session, transport = connectedSession(b"IMAP4rev1")
        d = Deferred.fromCoroutine(session.fetchMetadata(b"1:*"))
        session.client.dataReceived(b"* 1 FETCH (UID 1 FLAGS\r\n")
        self.assertIn("unreadable", str(self.failureResultOf(d, ConnectionLost).value))
        self.assertTrue(transport.disconnecting)


class RandomSplitTests(SynchronousTestCase):
    """
    A long pipelined exchange survives random read boundaries.
    """

    def test_randomSplits(self) -> None:
        """
        Fifty responses with bodies of random sizes, EXISTS and flag
        updates among them, split at random places, give every body.
        """
        rng = random.Random(7)
        bodies = {
            uid: messageOf(rng.choice([0, 1, 2, 100, 5000, 70000]), uid) for uid in range(1, 51)
        }
        parts = []
        for uid, body in bodies.items():
            head = b"* %d FETCH (UID %d BODY[] {%d}\r\n" % (uid, uid, len(body))
            parts.append(head + body + b")\r\n")
            if uid % 7 == 0:
                parts.append(b"* %d EXISTS\r\n* %d FETCH (FLAGS (\\Seen))\r\n" % (uid + 100, uid))
        wire = b"".join(parts) + b"0001 OK done\r\n"
        for _ in range(5):
            client, transport = greeted()
            sink = Collected()
            d = client.fetchInto(b"UID FETCH 1:50 (UID BODY.PEEK[])", sink)
            pos = 0
            while pos < len(wire):
                step = rng.randint(1, 20000)
                client.dataReceived(wire[pos : pos + step])
                pos += step
            self.successResultOf(d)
            self.assertEqual({i.uid: i.body for i in sink.items if i.uid is not None}, bodies)


def openDescriptors() -> set[str]:
    """
    What the open file descriptors of this process point to.
    """
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass
    return found


class LimitTests(SynchronousTestCase):
    """
    L{FetchLimits}: a literal beyond the limits fails its response when its
    marker arrives, before any octet of it is read.
    """

    def test_hugeLiteral(self) -> None:
        """
        A body announced as C{{99999999999}} fails at once with the default
        limits, naming the size and the limit; the parser is idle, holding
        nothing.
        """
        parser = FetchResponseParser(Collected())
        with self.assertRaises(FetchParseError) as caught:
            parser.lineReceived(b"* 1 FETCH (UID 5 BODY[] {99999999999}")
        self.assertEqual(
            str(caught.exception),
            "a literal of 99999999999 octets announced, above the limit of "
            f"{DEFAULT_MAX_LITERAL} octets per response",
        )
        self.assertFalse(parser.inResponse)
        self.assertFalse(parser.wantsLiteral)

    def test_atTheLimit(self) -> None:
        """
        A literal of exactly the limit is read.
        """
        sink = Collected()
        parser = FetchResponseParser(sink, FetchLimits(maxLiteral=10))
        feedWire(parser, b"* 1 FETCH (UID 5 BODY[] {10}\r\n0123456789)\r\n", 3)
        self.assertEqual([i.body for i in sink.items], [b"0123456789"])

    def test_perResponse(self) -> None:
        """
        The limit is on all the literals of one response together; the
        next response starts afresh.
        """
        sink = Collected()
        parser = FetchResponseParser(sink, FetchLimits(maxLiteral=10))
        parser.lineReceived(b"* 1 FETCH (UID 5 BODY[1] {6}")
        self.assertEqual(parser.literalReceived(b"abcdef"), b"")
        with self.assertRaises(FetchParseError) as caught:
            parser.lineReceived(b" BODY[2] {5}")
        self.assertIn(
            "a literal of 5 octets announced after 6 in the same response", str(caught.exception)
        )
        feedWire(parser, b"* 2 FETCH (UID 6 BODY[] {10}\r\n0123456789)\r\n", 4)
        self.assertEqual([i.uid for i in sink.items], [6])

    def test_maxTotal(self) -> None:
        """
        C{maxTotal} bounds the literals of every response until the limits
        are set again.
        """
        sink = Collected()
        parser = FetchResponseParser(sink, FetchLimits(maxLiteral=100, maxTotal=15))
        feedWire(parser, b"* 1 FETCH (UID 5 BODY[] {10}\r\n0123456789)\r\n", 100)
        with self.assertRaises(FetchParseError) as caught:
            parser.lineReceived(b"* 2 FETCH (UID 6 BODY[] {10}")
        self.assertEqual(
            str(caught.exception),
            "a literal of 10 octets announced after 10, above the 15 octets expected "
            "for the messages asked for",
        )
        parser.limits = FetchLimits(maxLiteral=100, maxTotal=15)
        feedWire(parser, b"* 2 FETCH (UID 6 BODY[] {10}\r\n0123456789)\r\n", 100)
        self.assertEqual([i.uid for i in sink.items], [5, 6])

    def test_allowMore(self) -> None:
        """
        L{FetchResponseParser.allowMore} raises C{maxTotal} without
        counting afresh: what was announced before still counts, and the
        bound is the old one plus the octets allowed; without a
        C{maxTotal} it changes nothing.
        """
        sink = Collected()
        parser = FetchResponseParser(sink, FetchLimits(maxLiteral=100, maxTotal=15))
        feedWire(parser, b"* 1 FETCH (UID 5 BODY[] {10}\r\n0123456789)\r\n", 100)
        parser.allowMore(10)
        self.assertEqual(parser.limits.maxTotal, 25)
        feedWire(parser, b"* 2 FETCH (UID 6 BODY[] {10}\r\n0123456789)\r\n", 100)
        with self.assertRaises(FetchParseError) as caught:
            parser.lineReceived(b"* 3 FETCH (UID 7 BODY[] {10}")
        self.assertIn("announced after 20, above the 25 octets", str(caught.exception))
        unbounded = FetchResponseParser(sink, FetchLimits(maxLiteral=100))
        unbounded.allowMore(10)
        self.assertIsNone(unbounded.limits.maxTotal)

    def test_throughTheClient(self) -> None:
        """
        Through the client, a huge literal fails the fetch command with a
        L{ProtocolError} naming the limit, and drops the connection, having
        buffered nothing of it.
        """
        client, transport = greeted()
        d = client.fetchInto(b"UID FETCH 5 (UID BODY.PEEK[])", Collected())
        client.dataReceived(b"* 1 FETCH (UID 5 BODY[] {99999999999}\r\n" + b"x" * 65536)
        failure = self.failureResultOf(d, ProtocolError)
        self.assertIn("above the limit", str(failure.value))
        self.assertTrue(transport.disconnecting or transport.disconnected)
        self.flushLoggedErrors()


class SpoolTests(SynchronousTestCase):
    """
    Literals of message data above L{FetchLimits.spoolAbove} go to an
    unlinked temporary file as they arrive.
    """

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.mkdir(self.directory)
        self.sink = Collected()
        self.parser = FetchResponseParser(
            self.sink, FetchLimits(spoolAbove=100, spoolDirectory=self.directory)
        )

    def test_spooled(self) -> None:
        """
        A body above the threshold arrives in a L{SpooledLiteral}, octet
        for octet whatever the read boundaries; it is absent from
        C{sections}; the items after it are read.
        """
        body = messageOf(1000)
        wire = b"* 1 FETCH (UID 5 BODY[] {1000}\r\n" + body + b" FLAGS (\\Seen))\r\n"
        for chunk in (1, 7, 999, 4096):
            del self.sink.items[:]
            feedWire(self.parser, wire, chunk)
            [item] = self.sink.items
            spool = item.spooledBody
            assert spool is not None
            self.assertEqual(len(spool), 1000)
            self.assertEqual(b"".join(spool.slices(64)), body)
            self.assertIsNone(item.body)
            self.assertTrue(item.hasBody)
            self.assertEqual(dict(item.sections), {})
            self.assertEqual(item.flags, ("\\Seen",))
            self.assertIn("<SpooledLiteral of 1000 octets>", repr(item))
            spool.close()

    def test_spooledInPlaceThroughTheClient(self) -> None:
        """
        Through the client, which hands literal octets over where they are
        in a read: a body spooled from the middle of a read, between two
        held in memory, is written octet for octet whatever the read
        boundaries, and the responses around it are read.
        """
        small, large = messageOf(50, 1), messageOf(1000, 2)
        wire = (
            b"* 1 FETCH (UID 1 BODY[] {50}\r\n" + small + b")\r\n"
            b"* 2 FETCH (UID 2 BODY[] {1000}\r\n" + large + b")\r\n"
            b"* 3 FETCH (UID 3 BODY[] {50}\r\n" + small + b")\r\n"
            b"0001 OK done\r\n"
        )
        for chunk in (1, 7, 999, len(wire)):
            client, transport = greeted()
            client._fetchParser.limits = self.parser.limits
            sink = Collected()
            d = client.fetchInto(b"UID FETCH 1:3 (UID BODY.PEEK[])", sink)
            feedInChunks(client, wire, chunk)
            self.successResultOf(d)
            first, second, third = sink.items
            self.assertEqual((first.body, third.body), (small, small), chunk)
            spool = second.spooledBody
            assert spool is not None
            self.assertEqual(b"".join(spool.slices(64)), large, chunk)
            spool.close()
            self.assertFalse(transport.disconnecting)

    def test_smallInMemory(self) -> None:
        """
        A body of the threshold or less stays in memory: one buffer.
        """
        feedWire(self.parser, b"* 1 FETCH (UID 5 BODY[] {100}\r\n" + b"x" * 100 + b")\r\n", 30)
        [item] = self.sink.items
        self.assertEqual(item.body, b"x" * 100)
        self.assertEqual(dict(item.spooled), {})

    def test_memoryPerResponse(self) -> None:
        """
        Literals held in memory for one response stay within the threshold
        together: the one that would go beyond is spooled.
        """
        wire = b"* 1 FETCH (UID 5 BODY[1] {60}\r\n" + b"a" * 60 + b" BODY[2] {60}\r\n" + b"b" * 60
        feedWire(self.parser, wire + b")\r\n", 1000)
        [item] = self.sink.items
        self.assertEqual(dict(item.sections), {b"BODY[1]": b"a" * 60})
        spool = item.spooled[b"BODY[2]"]
        self.assertEqual(b"".join(spool.slices(1000)), b"b" * 60)
        spool.close()

    def test_notMessageData(self) -> None:
        """
        With spooling on, a large literal that is not message data (inside
        an ENVELOPE) is refused: it could only be held in memory.
        """
        with self.assertRaises(FetchParseError) as caught:
            self.parser.lineReceived(b'* 1 FETCH (UID 5 ENVELOPE ("date" {500}')
        self.assertIn("not message data", str(caught.exception))
        self.assertRaises(FetchParseError, self.parser.lineReceived, b"* 1 FETCH (X-NAME {500}")

    def test_unlinkedInTheDirectory(self) -> None:
        """
        The file is made in the spool directory and has no name there,
        even while it is being written.
        """
        before = openDescriptors()
        self.parser.lineReceived(b"* 1 FETCH (UID 5 BODY[] {1000}")
        self.parser.literalReceived(b"x" * 10)
        self.assertEqual(os.listdir(self.directory), [])
        [opened] = openDescriptors() - before
        self.assertIn(os.path.abspath(self.directory) + "/imapmig-literal-", opened)
        self.assertTrue(opened.endswith(" (deleted)"), opened)
        self.parser.reset()
        self.assertEqual(openDescriptors() - before, set())

    def test_filesClosed(self) -> None:
        """
        The files of a response that fails to parse, of a response reset,
        and of a name sent twice, are closed.
        """
        before = openDescriptors()
        body = b"x" * 200
        self.assertRaises(
            FetchParseError,
            feedWire,
            self.parser,
            b"* 1 FETCH (UID 5 BODY[] {200}\r\n" + body + b" FLAGS)\r\n",
            50,
        )
        self.assertEqual(openDescriptors() - before, set())
        feedWire(
            self.parser,
            b"* 1 FETCH (UID 5 BODY[] {200}\r\n" + body + b" BODY[] {200}\r\n" + body + b")\r\n",
            50,
        )
        [item] = self.sink.items
        self.assertEqual(len(openDescriptors() - before), 1)
        spool = item.spooledBody
        assert spool is not None
        spool.close()
        self.assertEqual(openDescriptors() - before, set())

    def test_noDirectory(self) -> None:
        """
        A spool directory that does not exist fails the response at the
        literal's marker with L{FetchSpoolError}, naming the directory.
        """
        missing = os.path.join(self.directory, "missing")
        self.parser.limits = FetchLimits(spoolAbove=100, spoolDirectory=missing)
        with self.assertRaises(FetchSpoolError) as caught:
            self.parser.lineReceived(b"* 1 FETCH (UID 5 BODY[] {1000}")
        self.assertIn(missing, str(caught.exception))
        self.assertFalse(self.parser.inResponse)

    def test_diskFull(self) -> None:
        """
        A disk without room for the literal fails at its marker (its space
        is reserved when the file is made); a write that fails later fails
        the octets that bring it, with L{FetchSpoolError}, and closes the
        file.
        """
        def full(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        self.patch(os, "posix_fallocate", full)
        with self.assertRaises(FetchSpoolError) as caught:
            self.parser.lineReceived(b"* 1 FETCH (UID 5 BODY[] {1000}")
        self.assertIn("No space left on device", str(caught.exception))

        def unsupported(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

        self.patch(os, "posix_fallocate", unsupported)
        before = openDescriptors()
        self.parser.lineReceived(b"* 1 FETCH (UID 5 BODY[] {1000}")

        def failing(fd: int, data: bytes, offset: int) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        self.patch(os, "pwrite", failing)
        self.assertRaises(FetchSpoolError, self.parser.literalReceived, b"x" * 10)
        self.assertFalse(self.parser.inResponse)
        self.assertEqual(openDescriptors() - before, set())


class SpooledLiteralTests(SynchronousTestCase):
    """
    L{SpooledLiteral}: written once, read back in slices.
    """

    def test_roundTrip(self) -> None:
        """
        What is written is read back whole, in slices, at offsets; a
        search finds an octet; L{detach} hands over the descriptor at the
        start of the file.
        """
        spool = SpooledLiteral.create(10)
        spool.write(b"01234")
        self.assertFalse(spool.complete)
        spool.write(memoryview(b"\x806789"))
        self.assertTrue(spool.complete)
        self.assertEqual(list(spool.slices(4)), [b"0123", b"4\x8067", b"89"])
        self.assertEqual(spool.read(3, 4), b"34\x806")
        self.assertTrue(spool.contains(b"\x80", 3))
        self.assertFalse(spool.contains(b"\x00"))
        fd = spool.detach()
        try:
            self.assertEqual(os.read(fd, 100), b"01234\x806789")
            spool.close()
            os.fstat(fd)
        finally:
            os.close(fd)

    def test_overlong(self) -> None:
        """
        More octets than announced are refused.
        """
        spool = SpooledLiteral.create(3)
        self.assertRaises(ValueError, spool.write, b"abcd")
        spool.close()
        self.assertRaises(ValueError, spool.write, b"a")

    def test_incomplete(self) -> None:
        """
        A literal not all written cannot be read as one.
        """
        spool = SpooledLiteral.create(5)
        spool.write(b"ab")
        self.assertRaises(ValueError, list, spool.slices(10))
        spool.close()


def _fuzzFeed(parser: FetchResponseParser, wire: bytes, cuts: list[int]) -> None:
    """
    Feed C{wire} to C{parser} as the client does, cut at C{cuts}: lines
    that start no FETCH response while it is idle are skipped (the client
    gives them to the stock parser); a L{FetchParseError} ends the feed
    (the client drops the connection).  Checks after every step that what
    the parser accepted is within its limits.
    """
    limits = parser.limits
    buffer = b""
    previous = 0
    for cut in sorted(set(cuts)) + [len(wire)]:
        buffer += wire[previous:cut]
        previous = cut
        while buffer:
            assert parser.literalRemaining <= limits.maxLiteral
            if parser.wantsLiteral:
                try:
                    rest = parser.literalReceived(buffer)
                except FetchParseError:
                    return
                buffer = b"" if rest is None else rest
                continue
            line, sep, after = buffer.partition(b"\r\n")
            if not sep:
                break
            buffer = after
            if not parser.inResponse and not isFetchResponse(line):
                continue
            try:
                parser.lineReceived(line)
            except FetchParseError:
                return


_atoms = st.sampled_from(
    [b"UID", b"FLAGS", b"BODY[]", b"BODY[1.2]", b"BINARY[]", b"RFC822.SIZE", b"NIL", b"\\Seen",
     b"MODSEQ", b"INTERNALDATE", b"ENVELOPE", b"X-GM-LABELS", b"12", b"0"]
)  # fmt: skip
_tokens = st.one_of(
    _atoms,
    st.sampled_from([b"(", b")", b" ", b'"', b'"a\\"b"', b"\r\n", b"{", b"}", b"~{", b"[", b"]"]),
    st.integers(min_value=0, max_value=2**40).map(lambda n: b"{%d}\r\n" % n),
    st.binary(max_size=8),
)
# Bytes that look like FETCH responses often enough to go deep.
_fetchish = st.lists(_tokens, max_size=40).map(lambda parts: b"* 1 FETCH (" + b"".join(parts))

_FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=300)


def _cuts(wire: bytes) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=12)


class FuzzTests(SynchronousTestCase):
    """
    Arbitrary input, split anywhere, raises nothing but L{FetchParseError}
    and keeps within the limits; valid responses read the same whatever
    the splits.
    """

    @_FUZZ
    @given(data=st.data(), wire=st.one_of(st.binary(max_size=300), _fetchish))
    def test_arbitraryBytes(self, data: st.DataObject, wire: bytes) -> None:
        """
        Any octets cut anywhere: only L{FetchParseError}; every item
        within the limits, no more than C{spoolAbove} octets of them in
        memory, nothing spooled beyond C{maxLiteral}.
        """
        items: list[FetchedItem] = []
        limits = FetchLimits(maxLiteral=64, maxTotal=200, spoolAbove=16)
        parser = FetchResponseParser(items.append, limits)
        _fuzzFeed(parser, wire, data.draw(_cuts(wire)))
        parser.reset()
        for item in items:
            held = sum(len(value or b"") for value in item.sections.values())
            self.assertLessEqual(held, 16)
            spooled = sum(len(spool) for spool in item.spooled.values())
            self.assertLessEqual(held + spooled, 64)
            for spool in item.spooled.values():
                self.assertTrue(spool.complete)
                spool.close()

    @_FUZZ
    @given(wire=st.one_of(st.binary(max_size=300), _fetchish.map(lambda w: w[10:])))
    def test_parseResponse(self, wire: bytes) -> None:
        """
        L{parseResponse} of any octets gives a list or raises
        L{FetchParseError}.
        """
        try:
            self.assertIsInstance(parseResponse(wire), list)
        except FetchParseError:
            pass

    @_FUZZ
    @given(
        data=st.data(),
        responses=st.lists(
            st.tuples(
                st.integers(min_value=1, max_value=2**32),
                st.lists(st.sampled_from(["\\Seen", "\\Answered", "$Forwarded", "Junk"])),
                st.binary(max_size=200),
                st.booleans(),
            ),
            min_size=1,
            max_size=4,
        ),
        spoolAbove=st.sampled_from([None, 0, 50]),
    )
    def test_validRoundTrip(
        self,
        data: st.DataObject,
        responses: list[tuple[int, list[str], bytes, bool]],
        spoolAbove: int | None,
    ) -> None:
        """
        Valid responses (bodies of any octets, as literals or literal8,
        items before and after them) read back exactly, whatever the cuts,
        in memory or spooled.
        """
        wire = b"".join(
            b"* %d FETCH (UID %d BODY[] %s{%d}\r\n%s FLAGS (%s))\r\n"
            % (n, uid, b"~" if binary else b"", len(body), body, " ".join(flags).encode())
            for n, (uid, flags, body, binary) in enumerate(responses, 1)
        )
        items: list[FetchedItem] = []
        parser = FetchResponseParser(items.append, FetchLimits(spoolAbove=spoolAbove))
        cuts = data.draw(_cuts(wire))
        _fuzzFeed(parser, wire, cuts)
        self.assertFalse(parser.inResponse)
        read = []
        for item in items:
            spool = item.spooledBody
            if spool is not None:
                body = b"".join(spool.slices(17))
                spool.close()
            else:
                body = item.body or b""
            read.append((item.uid, list(item.flags or ()), body))
        self.assertEqual(read, [(uid, flags, body) for uid, flags, body, _ in responses])
