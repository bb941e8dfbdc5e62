"""
Tests for L{imapmig.job.preparation}: each message's literal kind decided
from the facts its source's reader found (L{imapmig.mail.message.ReadBodies}),
the octets looked at only where none were found.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence, cast

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.outgoing import OutgoingMessage
from imapmig.job.preparation import DestinationTraits, MessagePreparation
from imapmig.job.recording import OutcomeRecorder, SentMessage, Target
from imapmig.job.units import WorkUnit
from imapmig.mail.message import MessageBody, ReadBodies, SourceFolder, SourceMessage
from imapmig.mail.octets import BARE_LF, EIGHT_BIT, NUL, UNKNOWN
from imapmig.state import MessageOutcome


class RecordedOutcomes:
    """
    The part of L{OutcomeRecorder} a preparation uses: what it records.
    """

    def __init__(self) -> None:
        self.outcomes: list[MessageOutcome] = []

    def add(self, outcome: MessageOutcome, ticket: object = None, named: bool = True) -> None:
        self.outcomes.append(outcome)


FOLDER = SourceFolder(("INBOX",), "INBOX")
ASCII = b"Subject: a\r\n\r\nplain\r\n"
EIGHT = "Subject: é\r\n\r\nGrüße\r\n".encode()
WITH_NUL = b"Subject: n\r\n\r\na\0b\r\n"


class PreparationTests(SynchronousTestCase):
    """
    L{MessagePreparation.prepare} takes a body's NUL and 8-bit facts from
    what its source's reader found, and looks at the octets only where
    nothing was found.
    """

    def prepare(
        self, bodies: Sequence[MessageBody], binary: bool
    ) -> tuple[list[OutgoingMessage], list[MessageOutcome]]:
        """
        Prepare C{bodies} (one message each) for a destination with or
        without BINARY.

        @return: the messages to send, and the failures recorded.
        """
        recorded = RecordedOutcomes()
        preparation = MessagePreparation(cast(OutcomeRecorder, recorded), eightBitFails=False)
        chunk = [SourceMessage(f"m{i}", (), None, 1) for i in range(len(bodies))]
        unit = WorkUnit(FOLDER, "INBOX", tuple(chunk))
        outgoing = preparation.prepare(
            unit, Target("INBOX", "INBOX"), chunk, bodies, DestinationTraits(binary, None)
        )
        return outgoing, recorded.outcomes

    def read(self, *pairs: tuple[bytes, int]) -> ReadBodies:
        """
        A source's read of bodies with the facts given.
        """
        bodies = ReadBodies()
        for body, facts in pairs:
            bodies.add(body, facts)
        return bodies

    def test_factsDecide(self) -> None:
        """
        The facts carried with a body decide its literal kind: the octets
        are not looked at again (a body said to hold NUL is refused by a
        destination without BINARY, one said to hold 8-bit octets goes in
        a literal8 where BINARY is offered, whatever its octets).
        """
        bodies = self.read((ASCII, NUL), (ASCII, EIGHT_BIT | BARE_LF), (EIGHT, 0))
        outgoing, failed = self.prepare(bodies, binary=False)
        self.assertEqual([o.body for o in outgoing], [ASCII, EIGHT])
        self.assertEqual([o.binary for o in outgoing], [False, False])
        self.assertEqual([o.messageKey for o in failed], ["m0"])
        self.assertIn("contains NUL octets", failed[0].failure or "")
        outgoing, failed = self.prepare(bodies, binary=True)
        self.assertEqual([o.binary for o in outgoing], [True, True, False])
        self.assertEqual(failed, [])

    def test_unknownFactsFound(self) -> None:
        """
        Bodies whose facts were not found (a plain list, as a source that
        keeps none gives, or L{UNKNOWN} in a L{ReadBodies}) are looked at.
        """
        for bodies in (
            [ASCII, EIGHT, WITH_NUL],
            self.read((ASCII, UNKNOWN), (EIGHT, UNKNOWN), (WITH_NUL, UNKNOWN)),
        ):
            outgoing, failed = self.prepare(bodies, binary=False)
            self.assertEqual([o.body for o in outgoing], [ASCII, EIGHT])
            self.assertEqual([o.messageKey for o in failed], ["m2"])
            outgoing, failed = self.prepare(bodies, binary=True)
            self.assertEqual([o.binary for o in outgoing], [False, True, True])

    def test_factsOutOfStep(self) -> None:
        """
        Facts that do not match the bodies one for one (a list changed
        after the read) are not used, and no message is lost.
        """
        bodies = self.read((ASCII, NUL), (WITH_NUL, 0))
        bodies.append(EIGHT)
        outgoing, failed = self.prepare(bodies, binary=True)
        self.assertEqual([o.binary for o in outgoing], [False, True, True])
        self.assertEqual(failed, [])


class SentMessageTests(SynchronousTestCase):
    """
    The messages L{MessagePreparation.prepare} makes are the
    L{SentMessage}s its constructor would make: every slot set, to the
    same value.
    """

    def test_sameAsConstructed(self) -> None:
        """
        Each message prepared (with and without a date, a flag dropped or
        not, converted or not, binary or not) has every slot of
        L{SentMessage} and its bases set as C{SentMessage(...)} sets them.
        """
        when = datetime(2026, 12, 7, 18, 0, 1, tzinfo=timezone.utc)
        chunk = [
            SourceMessage("plain", ("\\Seen",), None, len(ASCII)),
            SourceMessage("dated", ("\\Seen", "$Odd"), when, 3),
            SourceMessage("nul", (), when, len(WITH_NUL)),
        ]
        bodies = ReadBodies()
        for body, facts in ((ASCII, 0), (b"a\r\nb", BARE_LF), (WITH_NUL, NUL)):
            bodies.add(body, facts)
        target = Target("INBOX", "INBOX")
        preparation = MessagePreparation(cast(OutcomeRecorder, RecordedOutcomes()), False)
        traits = DestinationTraits(True, frozenset({"\\Seen"}))
        outgoing = preparation.prepare(
            WorkUnit(FOLDER, "INBOX", tuple(chunk)), target, chunk, bodies, traits
        )
        slots = [name for cls in SentMessage.__mro__ for name in getattr(cls, "__slots__", ())]
        self.assertIn("converted", slots)
        self.assertIn("arguments", slots)
        expected = [
            SentMessage(ASCII, b" (\\Seen)", False, target, chunk[0], None, 0),
            SentMessage(
                b"a\r\nb",
                b' (\\Seen) "07-Dec-2026 18:00:01 +0000"',
                False,
                target,
                chunk[1],
                "flag '$Odd' dropped: the destination does not allow this keyword"
                " (PERMANENTFLAGS)",
                1,
            ),
            SentMessage(WITH_NUL, b' "07-Dec-2026 18:00:01 +0000"', True, target, chunk[2], None, 0),
        ]
        self.assertEqual(len(outgoing), len(expected))
        for made, constructed in zip(outgoing, expected):
            self.assertIs(type(made), SentMessage)
            for name in slots:
                self.assertEqual(getattr(made, name), getattr(constructed, name), name)
