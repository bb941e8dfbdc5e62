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

    def test_commonSameAsConstructed(self) -> None:
        """
        Once their flags are decided, the common messages are made by
        L{prepareMessages} (the C extension's, where built): the same
        L{SentMessage}s, every slot set as C{SentMessage(...)} sets them.
        """
        when = datetime(2026, 12, 7, 18, 0, 1, tzinfo=timezone.utc)
        chunk = [
            SourceMessage("plain", ("\\Seen",), None, len(ASCII)),
            SourceMessage("dated", ("\\Seen", "$Odd"), when, 3),
            SourceMessage("eight", (), when, len(EIGHT)),
        ]
        bodies = ReadBodies()
        for body, facts in ((ASCII, 0), (b"a\r\nb", BARE_LF), (EIGHT, EIGHT_BIT)):
            bodies.add(body, facts)
        target = Target("INBOX", "INBOX")
        preparation = MessagePreparation(cast(OutcomeRecorder, RecordedOutcomes()), False)
        traits = DestinationTraits(True, frozenset({"\\Seen"}))
        unit = WorkUnit(FOLDER, "INBOX", tuple(chunk))
        first = preparation.prepare(unit, target, chunk, bodies, traits)
        self.assertEqual(len(traits.flagDecisions), 3)
        again = preparation.prepare(unit, target, chunk, bodies, traits)
        slots = [name for cls in SentMessage.__mro__ for name in getattr(cls, "__slots__", ())]
        self.assertEqual(len(again), 3)
        for made, before in zip(again, first):
            self.assertIs(type(made), SentMessage)
            for name in slots:
                self.assertEqual(getattr(made, name), getattr(before, name), name)
        self.assertEqual([m.binary for m in again], [False, False, True])


class PrepareMessagesTests(SynchronousTestCase):
    """
    L{imapmig.job.preparation.prepareMessages} (the C extension's, where
    built) and its Python twin L{prepareMessagesPython} make the same
    messages and stop at the same one.
    """

    def run_both(
        self,
        chunk: Sequence[object],
        bodies: Sequence[object],
        facts: bytes,
        start: int = 0,
        binary: bool = True,
        sizeLimit: int | None = None,
    ) -> tuple[int, list[OutgoingMessage]]:
        """
        Run both on the same arguments; they must agree on the index and on
        every slot of every message made.

        @return: the index, and the messages made.
        """
        from imapmig.job import preparation
        from imapmig.mail.message import withInternalDate

        target = Target("INBOX", "INBOX")
        decisions = {("\\Seen",): (None, b" (\\Seen)", b" (\\Seen) "), (): ("note", b"", b" ")}
        results = []
        for function in (preparation.prepareMessages, preparation.prepareMessagesPython):
            out: list[OutgoingMessage] = []
            index = function(
                chunk, bodies, facts, start, decisions, binary, sizeLimit,  # type: ignore[arg-type]
                target, withInternalDate, out,
            )  # fmt: skip
            results.append((index, out))
        (index, made), (twinIndex, twinMade) = results
        self.assertEqual(index, twinIndex)
        self.assertEqual(len(made), len(twinMade))
        slots = [name for cls in SentMessage.__mro__ for name in getattr(cls, "__slots__", ())]
        for one, other in zip(made, twinMade):
            self.assertIs(type(one), SentMessage)
            for name in slots:
                self.assertEqual(getattr(one, name), getattr(other, name), name)
                self.assertIs(type(getattr(one, name)), type(getattr(other, name)), name)
        return index, made

    def test_common(self) -> None:
        """
        Common messages, dated or not, converted or not, binary or not,
        are all made; C{start} is where they begin.
        """
        when = datetime(2026, 12, 7, 18, 0, 1, tzinfo=timezone.utc)
        chunk = [
            SourceMessage("a", ("\\Seen",), None, len(ASCII)),
            SourceMessage("b", (), when, 2),
            SourceMessage("c", ("\\Seen",), when, len(EIGHT)),
            SourceMessage("d", (), None, 0),
        ]
        bodies = [ASCII, b"b\r\n", EIGHT, b""]
        facts = bytes([0, BARE_LF, EIGHT_BIT, 0])
        index, made = self.run_both(chunk, bodies, facts)
        self.assertEqual(index, 4)
        self.assertEqual([m.converted for m in made], [0, 1, 0, 0])  # type: ignore[attr-defined]
        self.assertEqual(
            made[1].arguments + made[2].arguments,
            b' "07-Dec-2026 18:00:01 +0000" (\\Seen) "07-Dec-2026 18:00:01 +0000"',
        )
        self.assertEqual(self.run_both(chunk, bodies, facts, start=2)[0], 4)
        self.assertEqual(self.run_both(chunk, bodies, facts, start=9)[0], 9)
        self.assertEqual(self.run_both([], [], b"")[0], 0)

    def test_stops(self) -> None:
        """
        Each message that is not common stops the run at its index: an
        unknown body, a body not bytes, a body larger than the limit, one
        needing a literal8 where BINARY is not offered, undecided flags,
        and a message that is not a L{SourceMessage}.
        """
        plain = SourceMessage("a", ("\\Seen",), None, 1)
        cases = [
            ([plain, plain], [b"a", b"b"], bytes([0, UNKNOWN]), {}),
            ([plain, plain], [b"a", bytearray(b"b")], bytes([0, 0]), {}),
            ([plain, plain], [b"a", b"bb"], bytes([0, 0]), {"sizeLimit": 1}),
            ([plain, plain], [b"a", b"\0"], bytes([0, NUL]), {"binary": False}),
            ([plain, plain], [b"a", b"\xe9"], bytes([0, EIGHT_BIT]), {"binary": False}),
            ([plain, SourceMessage("b", ("$Odd",), None, 1)], [b"a", b"b"], bytes([0, 0]), {}),
            ([plain, object()], [b"a", b"b"], bytes([0, 0]), {}),
        ]
        for chunk, bodies, facts, options in cases:
            index, made = self.run_both(chunk, bodies, facts, **options)  # type: ignore[arg-type]
            self.assertEqual((index, len(made)), (1, 1), (chunk, bodies, facts, options))
        # Shorter bodies or facts end it.
        self.assertEqual(self.run_both([plain, plain], [b"a"], bytes([0, 0]))[0], 1)
        self.assertEqual(self.run_both([plain, plain], [b"a", b"b"], bytes([0]))[0], 1)
        self.assertEqual(self.run_both([plain], [b"a"], bytes([0]), sizeLimit=1)[0], 1)
