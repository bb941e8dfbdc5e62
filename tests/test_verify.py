"""
Tests for L{imapmig.commands.verify}: how messages are paired and what counts as a
difference.  (The whole command against real Dovecots is in
L{tests.test_fidelity_integration}.)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from twisted.trial.unittest import SynchronousTestCase

from imapmig.state import MessageOutcome
from imapmig.commands.verify import (
    Difference,
    MessageFacts,
    _SourceSide,
    _sortedFlags,
    _utc,
    compareMailbox,
)

UTC = timezone.utc
WHEN = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)


def facts(
    content: str, flags: tuple[str, ...] = (), when: datetime | None = WHEN
) -> MessageFacts:
    return MessageFacts(content * 4, flags, when, len(content))


def side(messages: dict[str, MessageFacts], folder: str = "F") -> _SourceSide:
    result = _SourceSide()
    result.folderNames[folder] = folder
    for key, value in messages.items():
        result.facts[folder, key] = value
    return result


class CompareMailboxTests(SynchronousTestCase):
    """
    L{compareMailbox}.
    """

    def test_identical(self) -> None:
        """
        The same messages on both sides, paired by content (the state store
        knows nothing), give no difference.
        """
        source = side({"a": facts("a"), "b": facts("b", ("\\Seen",))})
        report = compareMailbox(
            "M", source, 7, {1: facts("b", ("\\Seen",)), 2: facts("a")}, {}, {}
        )
        self.assertEqual((report.matched, report.differences), (2, ()))

    def test_pairedByStateStore(self) -> None:
        """
        The state store's UID pairs a message even when its content changed
        in the destination, which is then a content difference for that
        UID; a UIDVALIDITY that changed makes the record useless.
        """
        source = side({"a": facts("a")})
        recorded = {"F": {"a": MessageOutcome("F", "a", "M", 1, 7, 2)}}
        report = compareMailbox("M", source, 7, {2: facts("z")}, recorded, {})
        self.assertEqual([d.kind for d in report.differences], ["content"])
        self.assertEqual(report.differences[0].uid, 2)
        report = compareMailbox("M", source, 8, {2: facts("z")}, recorded, {})
        self.assertEqual(
            sorted(d.kind for d in report.differences), ["missing", "unexpected"]
        )

    def test_flagsAndDates(self) -> None:
        """
        A flag or an INTERNALDATE that differs is a difference; a source
        without a date (the server chose one) is not compared on it.
        """
        source = side(
            {"a": facts("a", ("\\Seen",)), "b": facts("b"), "c": facts("c", when=None)}
        )
        later = datetime(2021, 1, 1, tzinfo=UTC)
        report = compareMailbox(
            "M",
            source,
            1,
            {1: facts("a", ("\\Seen", "$X")), 2: facts("b", when=later), 3: facts("c", when=later)},
            {},
            {},
        )
        self.assertEqual(sorted(d.kind for d in report.differences), ["date", "flags"])

    def test_datesBeyondUTC(self) -> None:
        """
        A date UTC cannot hold (9999-12-31 23:30 -0500 is in the year 10000
        there) is kept as it is, not an error, and still compares as an
        instant; others are put in UTC.
        """
        late = datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
        self.assertEqual(_utc(late), late)
        self.assertEqual(_utc(late).utcoffset(), timedelta(hours=-5))  # type: ignore[union-attr]
        early = datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
        self.assertEqual(_utc(early), early)
        plain = datetime(2020, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1)))
        self.assertEqual(_utc(plain), WHEN)
        self.assertEqual(_utc(plain).tzinfo, UTC)  # type: ignore[union-attr]
        report = compareMailbox(
            "M", side({"a": facts("a", when=_utc(late))}), 1, {1: facts("a", when=late)}, {}, {}
        )
        self.assertEqual(report.differences, ())

    def test_flagsCaseInsensitive(self) -> None:
        """
        Flags and keywords are compared without regard to ASCII case (RFC
        3501): a server that returns C{\\seen} and C{$forwarded} for
        C{\\Seen} and C{$Forwarded} shows no difference, and such pairs
        are paired as exact; a flag really missing still is a difference,
        its detail showing each side's spelling.
        """
        source = side(
            {
                "a": facts("a", ("\\Seen", "$Forwarded")),
                "b": facts("a", ("\\Flagged",)),
                "c": facts("c", ("\\Answered", "NonJunk")),
            }
        )
        destination = {
            1: facts("a", ("\\FLAGGED",)),
            2: facts("a", ("$forwarded", "\\seen")),
            3: facts("c", ("\\answered",)),
        }
        report = compareMailbox("M", source, 1, destination, {}, {})
        self.assertEqual(report.matched, 3)
        self.assertEqual(
            [(d.kind, d.messageKey, d.detail) for d in report.differences],
            [("flags", "c", "source flags (\\Answered NonJunk), destination flags (\\answered)")],
        )

    def test_sortedFlags(self) -> None:
        """
        The flags kept for comparison leave out C{\\Recent} in any case and
        keep one spelling (the first) of a flag given twice in different
        cases, sorted without regard to case.
        """
        self.assertEqual(
            _sortedFlags(["\\seen", "\\RECENT", "$b", "\\Seen", "$A", "\\recent"]),
            ("$A", "$b", "\\seen"),
        )

    def test_missingWithRecordedFailure(self) -> None:
        """
        A source message not in the destination is missing, with the
        failure imapmig recorded for it if any; a destination message no
        source message pairs with is unexpected.
        """
        source = side({"a": facts("a"), "b": facts("b")})
        report = compareMailbox(
            "M", source, 1, {5: facts("x")}, {}, {("F", "a"): "refused by server: NO too big"}
        )
        self.assertEqual(
            report.differences,
            (
                Difference(
                    "missing", "M", "F", "a", None,
                    "not in the destination (imapmig recorded it as failed:"
                    " refused by server: NO too big)",
                ),  # fmt: skip
                Difference("missing", "M", "F", "b", None, "not in the destination"),
                Difference(
                    "unexpected", "M", None, None, 5,
                    "in the destination (1 octets, SHA-256 xxxx…) but in no source"
                    " folder mapped to it",
                ),  # fmt: skip
            ),
        )

    def test_duplicatesCounted(self) -> None:
        """
        Two identical source messages need two destination copies: one copy
        leaves one missing.
        """
        source = side({"a": facts("d"), "b": facts("d")})
        report = compareMailbox("M", source, 1, {1: facts("d")}, {}, {})
        self.assertEqual([d.kind for d in report.differences], ["missing"])
        report = compareMailbox("M", source, 1, {1: facts("d"), 2: facts("d")}, {}, {})
        self.assertEqual(report.differences, ())

    def test_exactPairsFirst(self) -> None:
        """
        Among identical contents, pairs with the same flags and date are
        made first, so a flag difference is reported for the right pair
        only.
        """
        source = side({"a": facts("d", ("\\Seen",)), "b": facts("d")})
        report = compareMailbox(
            "M", source, 1, {1: facts("d"), 2: facts("d", ("\\Seen",))}, {}, {}
        )
        self.assertEqual(report.differences, ())

    def test_nulAsServed(self) -> None:
        """
        A source message with NUL octets matches a destination copy served
        with each NUL as 0x80 (as Dovecot serves BODY[]), and only that.
        """
        served = MessageFacts("served" * 4, (), WHEN, 3)
        source = side(
            {"n": MessageFacts("exact" * 4, (), WHEN, 3, servedSha256="served" * 4)}
        )
        report = compareMailbox("M", source, 1, {1: served}, {}, {})
        self.assertEqual((report.matched, report.differences), (1, ()))
        report = compareMailbox("M", source, 1, {1: facts("other")}, {}, {})
        self.assertEqual(sorted(d.kind for d in report.differences), ["missing", "unexpected"])
