"""
Tests for L{imapmig.mail.message}: line-ending conversion, date formatting and
Maildir flag letters.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from twisted.trial.unittest import SynchronousTestCase

import attrs

from imapmig.mail import message
from imapmig.mail.message import (
    SourceMessage,
    formatInternalDate,
    listedMessage,
    maildirFlags,
    toCRLF,
    utcFromTimestamp,
    withInternalDate,
    withInternalDatePython,
)
from imapmig.mail.octets import compiled


class ToCRLFTests(SynchronousTestCase):
    """
    Bare LF becomes CRLF; nothing else changes.
    """

    def test_bareLF(self) -> None:
        """
        Every bare LF is converted.
        """
        self.assertEqual(toCRLF(b"a\nb\n\nc"), b"a\r\nb\r\n\r\nc")

    def test_alreadyCRLFUncopied(self) -> None:
        """
        A body already in CRLF is returned as the same object, uncopied.
        """
        body = b"a\r\nb\r\n"
        self.assertIs(toCRLF(body), body)
        noLines = b"abc"
        self.assertIs(toCRLF(noLines), noLines)

    def test_mixed(self) -> None:
        """
        A body mixing CRLF and bare LF ends up all CRLF, without doubling
        the CRs already there; a lone CR is left alone.
        """
        self.assertEqual(toCRLF(b"a\r\nb\nc\rd\n"), b"a\r\nb\r\nc\rd\r\n")


class InternalDateTests(SynchronousTestCase):
    """
    INTERNALDATE values for APPEND.
    """

    def test_utc(self) -> None:
        """
        A UTC time is formatted with +0000 and a space-free two-digit day.
        """
        self.assertEqual(
            formatInternalDate(utcFromTimestamp(1600000000)),
            b'"13-Sep-2020 12:26:40 +0000"',
        )

    def test_utcEveryField(self) -> None:
        """
        In UTC, the year has four digits from 0001 to 9999, and the day,
        hour, minute and second two, at both ends of their ranges.
        """
        self.assertEqual(
            formatInternalDate(datetime(5, 1, 9, 0, 0, 0, tzinfo=timezone.utc)),
            b'"09-Jan-0005 00:00:00 +0000"',
        )
        self.assertEqual(
            formatInternalDate(datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)),
            b'"31-Dec-9999 23:59:59 +0000"',
        )
        self.assertEqual(
            formatInternalDate(datetime(1970, 10, 1, 9, 8, 7, tzinfo=timezone.utc)),
            b'"01-Oct-1970 09:08:07 +0000"',
        )

    def test_offsets(self) -> None:
        """
        Offsets east and west of UTC, including half hours, keep their sign.
        """
        east = datetime(2001, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=5, minutes=30)))
        west = datetime(2001, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-8)))
        self.assertEqual(formatInternalDate(east), b'"03-Feb-2001 04:05:06 +0530"')
        self.assertEqual(formatInternalDate(west), b'"31-Dec-2001 23:59:59 -0800"')


class WithInternalDateTests(SynchronousTestCase):
    """
    L{withInternalDate} (the C extension's where it is built) and its
    Python twin append L{formatInternalDate} of a date to a prefix.
    """

    def test_utc(self) -> None:
        """
        A date in UTC, or naive, of any year from 1 to 9999, follows the
        prefix as L{formatInternalDate} formats it.
        """
        dates = [
            utcFromTimestamp(1600000000),
            datetime(5, 1, 9, 0, 0, 0, tzinfo=timezone.utc),
            datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
            datetime(1970, 10, 1, 9, 8, 7),
            *(datetime(2000 + month, month, month * 2, month, month * 4, month * 4,
                       tzinfo=timezone.utc) for month in range(1, 13)),
        ]  # fmt: skip
        self.assertSame(dates)

    def test_otherZones(self) -> None:
        """
        A date in another zone follows the prefix with its offset, as
        L{formatInternalDate} formats it: east and west, in half hours, at
        no offset, and offsets of seconds (truncated, then floored to
        minutes).
        """
        offsets = [
            timedelta(hours=5, minutes=30),
            timedelta(hours=-8),
            timedelta(0),
            timedelta(hours=23, minutes=59, seconds=59),
            -timedelta(hours=23, minutes=59, seconds=59),
            timedelta(seconds=-30),
            timedelta(seconds=90),
            timedelta(microseconds=-1),
            timedelta(minutes=-1, microseconds=1),
        ]
        self.assertSame(
            [datetime(2001, 2, 3, 4, 5, 6, tzinfo=timezone(offset)) for offset in offsets]
        )

    def assertSame(self, dates: list[datetime]) -> None:
        """
        Both implementations give C{prefix + formatInternalDate(when)} of
        each of C{dates}.
        """
        for when in dates:
            for implementation in (withInternalDate, withInternalDatePython):
                self.assertEqual(
                    implementation(b"(\\Seen) ", when), b"(\\Seen) " + formatInternalDate(when)
                )
                self.assertEqual(implementation(b"", when), formatInternalDate(when))

    def test_compiled(self) -> None:
        """
        Where the C extension is built, L{withInternalDate} is its.
        """
        self.assertIs(withInternalDate is withInternalDatePython, not compiled)
        self.assertIs(message.withInternalDate, withInternalDate)


class MaildirFlagTests(SynchronousTestCase):
    """
    Maildir info letters.
    """

    def test_letters(self) -> None:
        """
        Each system flag letter maps to its IMAP flag; others are ignored.
        """
        self.assertEqual(
            maildirFlags("DFPRSTab"),
            ("\\Draft", "\\Flagged", "\\Answered", "\\Seen", "\\Deleted"),
        )
        self.assertEqual(maildirFlags(""), ())


class ListedMessageTests(SynchronousTestCase):
    """
    L{listedMessage} makes the same L{SourceMessage} as its constructor.
    """

    def test_sameAsConstructor(self) -> None:
        """
        The message is a L{SourceMessage} with the fields given, equal to
        (and hashed, shown and evolved like) the one the constructor makes.
        """
        when = utcFromTimestamp(1700000000)
        made = SourceMessage("k", ("\\Seen",), when, 42)
        listed = listedMessage("k", ("\\Seen",), when, 42)
        self.assertIs(type(listed), SourceMessage)
        self.assertEqual(
            (listed.key, listed.flags, listed.internalDate, listed.size),
            ("k", ("\\Seen",), when, 42),
        )
        self.assertEqual(listed, made)
        self.assertEqual(hash(listed), hash(made))
        self.assertEqual(repr(listed), repr(made))
        self.assertEqual(attrs.evolve(listed, size=1), SourceMessage("k", ("\\Seen",), when, 1))
        self.assertEqual(listedMessage("u", (), None, 0), SourceMessage("u", (), None, 0))

    def test_frozen(self) -> None:
        """
        The message is frozen, as any L{SourceMessage}.
        """
        listed = listedMessage("k", (), None, 1)
        with self.assertRaises(attrs.exceptions.FrozenInstanceError):
            listed.size = 2  # type: ignore[misc]
