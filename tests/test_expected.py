"""
Tests for L{imapmig.commands.expected} and its use by L{imapmig.commands.verify}: the
INTERNALDATE verify expects is read from the source independently of the
source readers, so a reader's dating mistake shows as a difference.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Sequence

import attrs
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.commands.expected import fromLineDate, maildirDeliveryDate
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.sources.maildir import MaildirSource
from imapmig.sources.mbox import MboxSource
from imapmig.commands.verify import MessageFacts, _readSource, compareMailbox
from tests.support import newDirectory

UTC = timezone.utc


class MaildirDeliveryDateTests(SynchronousTestCase):
    """
    L{maildirDeliveryDate}.
    """

    def test_anyDate(self) -> None:
        """
        The leading number is seconds since 1970 UTC at any date up to the
        year 9999: the epoch, before 1980, today, the last second of 9999.
        """
        self.assertEqual(maildirDeliveryDate("0.M1P2.host"), datetime(1970, 1, 1, tzinfo=UTC))
        self.assertEqual(
            maildirDeliveryDate("315532799.M1P2.host,S=5"),
            datetime(1979, 12, 31, 23, 59, 59, tzinfo=UTC),
        )
        self.assertEqual(
            maildirDeliveryDate("1700000000"), datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
        )
        self.assertEqual(
            maildirDeliveryDate("253402300799.x"), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
        )
        # By value: leading zeros are allowed, as the Maildir reader allows
        # them.
        self.assertEqual(
            maildirDeliveryDate("0000000000000000.x"), datetime(1970, 1, 1, tzinfo=UTC)
        )

    def test_noTime(self) -> None:
        """
        A name with no leading number, a number with letters attached, or a
        number past the year 9999 gives no date.
        """
        for name in ["msg.host", "", ".x", "17x.host", "253402300800.x", "1" * 40, "١٢.x"]:
            self.assertIsNone(maildirDeliveryDate(name), name)


class FromLineDateTests(SynchronousTestCase):
    """
    L{fromLineDate}.
    """

    def test_asctime(self) -> None:
        """
        An asctime date ending the line is read, UTC or at the numeric
        offset after the year, at any four-digit year.
        """
        cases = {
            b"From MAILER-DAEMON Thu Jan  1 00:00:00 1970": datetime(1970, 1, 1, tzinfo=UTC),
            b"From a@b Mon Jun  3 12:00:00 1974 +0200": datetime(
                1974, 6, 3, 12, tzinfo=timezone(timedelta(hours=2))
            ),
            b"From a Wed Dec 31 23:59 1969": datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
            b"From a Tue Nov 22 10:00:00 2026 remote from uucp": datetime(
                2026, 11, 22, 10, tzinfo=UTC
            ),
        }
        for line, expected in cases.items():
            self.assertEqual(fromLineDate(line), expected, line)

    def test_otherSpellings(self) -> None:
        """
        Spellings it does not read (a zone name, the RFC 5322 order, no
        year, an impossible day, a year before 1000, as the mbox reader
        has it) give no expectation.
        """
        for line in [
            b"From a Tue Nov 22 10:00:00 CET 2026",
            b"From a Sat, 22 Nov 2026 10:00:00 +0100",
            b"From a Tue Nov 22 10:00:00",
            b"From a Tue Nov 31 10:00:00 2026",
            b"From a Mon Jan  1 00:00:00 0001 +0100",
            b"From a",
        ]:
            self.assertIsNone(fromLineDate(line), line)


class _ShiftedDates:
    """
    A source reader with a dating bug: every INTERNALDATE one day late,
    and none for the first message.
    """

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        d: Deferred[Sequence[SourceMessage]] = super().listMessages(folder)  # type: ignore[misc]

        def shifted(messages: Sequence[SourceMessage]) -> Sequence[SourceMessage]:
            return [
                attrs.evolve(
                    m,
                    internalDate=None
                    if i == 0 or m.internalDate is None
                    else m.internalDate + timedelta(days=1),
                )
                for i, m in enumerate(messages)
            ]

        return d.addCallback(shifted)


class _BuggyMaildir(_ShiftedDates, MaildirSource):
    pass


class _BuggyMbox(_ShiftedDates, MboxSource):
    pass


class VerifyIndependentDateTests(SynchronousTestCase):
    """
    L{imapmig.commands.verify} expects the date the source file holds, not the
    reader's: a destination holding what a buggy reader said is a date
    difference with both values.
    """

    def _compare(
        self, source: MaildirSource | MboxSource, expected: list[datetime]
    ) -> list[str]:
        """
        Read C{source}'s INBOX as verify does, check the expected dates,
        and compare it with a destination holding the same octets dated as
        the source's reader said (UIDs from 1, in order).

        @return: the details of the differences.
        """
        folder = self.successResultOf(source.listFolders())[0]
        messages = self.successResultOf(source.listMessages(folder))
        side = self.successResultOf(Deferred.fromCoroutine(_readSource(source, "INBOX", [folder])))
        self.assertEqual(
            [side.facts[folder.key, m.key].internalDate for m in messages], expected
        )
        destination = {}
        for uid, message in enumerate(messages, 1):
            facts = side.facts[folder.key, message.key]
            readerDate = message.internalDate or datetime(2030, 1, 1, tzinfo=UTC)
            destination[uid] = MessageFacts(
                facts.sha256, facts.flags, readerDate.astimezone(UTC), facts.size
            )
        report = compareMailbox("INBOX", side, 1, destination, {}, {})
        self.assertTrue(all(d.kind == "date" for d in report.differences))
        return [d.detail for d in report.differences]

    def test_maildir(self) -> None:
        """
        Maildir messages delivered at the epoch and in 1975 are expected at
        those instants, whatever the reader says; each message the reader
        dated otherwise is a date difference naming the Maildir name as
        the origin and showing the destination's value.
        """
        root = newDirectory(self)
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(root, sub))
        for name in ["0.M1P1.host:2,S", "157766400.M2P2.host:2,S"]:
            with open(os.path.join(root, "cur", name), "wb") as f:
                f.write(b"Subject: old\n\nbody\n")
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        seventyFive = datetime(1975, 1, 1, tzinfo=UTC)
        self.assertEqual(self._compare(MaildirSource(root), [epoch, seventyFive]), [])
        self.assertEqual(
            self._compare(_BuggyMaildir(root), [epoch, seventyFive]),
            [
                "source INTERNALDATE 1970-01-01T00:00:00+00:00 (from its Maildir name),"
                " destination 2030-01-01T00:00:00+00:00",
                "source INTERNALDATE 1975-01-01T00:00:00+00:00 (from its Maildir name),"
                " destination 1975-01-02T00:00:00+00:00",
            ],
        )

    def test_mbox(self) -> None:
        """
        mbox messages are expected at their C{From } line's date (the
        epoch, 1974 at +0200), whatever the reader says.
        """
        path = os.path.join(newDirectory(self), "inbox.mbox")
        with open(path, "wb") as f:
            f.write(
                b"From MAILER-DAEMON Thu Jan  1 00:00:00 1970\nSubject: a\n\nbody\n\n"
                b"From b@example Mon Jun  3 12:00:00 1974 +0200\nSubject: b\n\nbody\n"
            )
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        seventyFour = datetime(1974, 6, 3, 10, tzinfo=UTC)
        self.assertEqual(self._compare(MboxSource(path), [epoch, seventyFour]), [])
        self.assertEqual(
            self._compare(_BuggyMbox(path), [epoch, seventyFour]),
            [
                "source INTERNALDATE 1970-01-01T00:00:00+00:00 (from its From_ line),"
                " destination 2030-01-01T00:00:00+00:00",
                "source INTERNALDATE 1974-06-03T10:00:00+00:00 (from its From_ line),"
                " destination 1974-06-04T10:00:00+00:00",
            ],
        )
