"""
Tests for L{imapmig.job.units}: what is left to copy, and how it is cut
into units and chunks and shared between connections.
"""

from __future__ import annotations

import random

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.units import (
    WorkUnit,
    chooseUnit,
    chunks,
    cutUnits,
    guidedShare,
    pendingMessages,
    takeShare,
)
from imapmig.mail.message import SourceFolder, SourceMessage


def messages(*sizes: int) -> list[SourceMessage]:
    return [SourceMessage(str(i), (), None, size) for i, size in enumerate(sizes)]


class WorkTests(SynchronousTestCase):
    """
    What is left to copy, and how it is cut into units and chunks.
    """

    def test_pendingMessages(self) -> None:
        """
        Messages recorded as appended are left out, in order.
        """
        source = messages(1, 1, 1)
        self.assertEqual([m.key for m in pendingMessages(source, {"1"})], ["0", "2"])
        self.assertEqual(pendingMessages(source, set()), source)

    def test_chunksByCountAndBytes(self) -> None:
        """
        A chunk ends at the message count or once it reaches the byte limit,
        and holds at least one message.
        """
        self.assertEqual([len(c) for c in chunks(messages(1, 1, 1, 1, 1), 2, 100)], [2, 2, 1])
        self.assertEqual([len(c) for c in chunks(messages(5, 5, 50, 1), 10, 10)], [2, 1, 1])

    def test_chunksAsStepByStep(self) -> None:
        """
        The chunks are those of a walk adding one message at a time (a
        chunk ends at C{chunkMessages}, or with the message that brings it
        to C{chunkBytes}), for sizes of every kind, zero among them.
        """

        def walked(sizes: list[int], most: int, octets: int) -> list[int]:
            lengths, start = [], 0
            while start < len(sizes):
                end, total = start, 0
                while end < len(sizes) and end - start < most:
                    total += sizes[end]
                    end += 1
                    if total >= octets:
                        break
                lengths.append(end - start)
                start = end
            return lengths

        generator = random.Random(31)
        for _ in range(300):
            sizes = [generator.choice((0, 1, 7, 100, 5000)) for _ in range(generator.randrange(40))]
            most, octets = generator.randrange(1, 9), generator.randrange(-1, 12000)
            self.assertEqual(
                [len(c) for c in chunks(messages(*sizes), most, octets)],
                walked(sizes, most, octets),
                (sizes, most, octets),
            )

    def test_cutUnits(self) -> None:
        """
        Units carry their folder and mailbox.
        """
        folder = SourceFolder(("INBOX",), "")
        units = list(cutUnits(folder, "INBOX", messages(1, 1, 1), 2, 100))
        self.assertEqual([len(u.messages) for u in units], [2, 1])
        self.assertEqual({u.mailbox for u in units}, {"INBOX"})

    def test_chooseUnit(self) -> None:
        """
        A connection keeps to its selected mailbox, else takes a mailbox no
        other connection is filling, else the first unit.
        """
        folder = SourceFolder(("x",), "")
        units = [WorkUnit(folder, name, ()) for name in ("A", "A", "B", "C")]
        self.assertEqual(chooseUnit(units, "B", set()), 2)
        self.assertEqual(chooseUnit(units, None, {"A"}), 2)
        self.assertEqual(chooseUnit(units, None, {"A", "B", "C"}), 0)
        self.assertEqual(chooseUnit(units, "Z", set()), 0)

    def test_chooseLargestMailbox(self) -> None:
        """
        Of the mailboxes no other connection is filling, a connection
        without units of its own mailbox left takes the one with the most
        messages left (summed over its units): with two connections and
        folders of 1,000, 1,000 and 2,000 messages, taken in the listing's
        order they would end at 1,000 and 3,000; the largest first, at
        2,000 each.  Equal mailboxes go in the listing's order.
        """
        folder = SourceFolder(("x",), "")
        units = [
            WorkUnit(folder, name, tuple(messages(*[1] * count)))
            for name, count in (("A", 3), ("B", 2), ("C", 2), ("B", 2), ("D", 4))
        ]
        self.assertEqual(chooseUnit(units, None, set()), 1)
        self.assertEqual(chooseUnit(units, None, {"B"}), 4)
        self.assertEqual(chooseUnit(units, "C", set()), 2)
        self.assertEqual(chooseUnit(units[:3], None, set()), 0)

    def test_chooseUnitMargin(self) -> None:
        """
        With a margin, a connection keeps to its selected mailbox only
        while that has at least as many messages left as the largest free
        one less the margin; without one, while it has any left.
        """
        folder = SourceFolder(("x",), "")
        units = [
            WorkUnit(folder, name, tuple(messages(*[1] * count)))
            for name, count in (("A", 3), ("B", 6), ("C", 9))
        ]
        self.assertEqual(chooseUnit(units, "A", set()), 0)
        self.assertEqual(chooseUnit(units, "A", set(), margin=5), 2)
        self.assertEqual(chooseUnit(units, "A", {"C"}, margin=3), 0)
        self.assertEqual(chooseUnit(units, "A", {"C"}, margin=2), 1)
        self.assertEqual(chooseUnit(units, "B", set(), margin=3), 1)

    def test_chooseUnitByOctets(self) -> None:
        """
        With C{byOctets}, the rests (and the margin) are weighed in octets:
        a mailbox of fewer, larger messages has more left.
        """
        folder = SourceFolder(("x",), "")
        units = [
            WorkUnit(folder, "A", tuple(messages(*[10] * 3))),
            WorkUnit(folder, "B", tuple(messages(*[1] * 9))),
        ]
        self.assertEqual(chooseUnit(units, None, set()), 1)
        self.assertEqual(chooseUnit(units, None, set(), byOctets=True), 0)
        self.assertEqual(chooseUnit(units, "B", set(), margin=21, byOctets=True), 1)
        self.assertEqual(chooseUnit(units, "B", set(), margin=20, byOctets=True), 0)

    def test_unitOctets(self) -> None:
        """
        A unit's C{octets} are its messages' sizes, summed; a share's and
        the rest's add up to the unit's.
        """
        folder = SourceFolder(("x",), "")
        units = [WorkUnit(folder, "A", tuple(messages(1, 2, 3, 4)))]
        self.assertEqual(units[0].octets, 10)
        self.assertEqual(takeShare(units, 0, 3).octets, 6)
        self.assertEqual(units[0].octets, 4)
        self.assertEqual(WorkUnit(folder, "A", ()).octets, 0)

    def test_guidedShare(self) -> None:
        """
        A share is a quarter of what is left with two connections (rounded
        up), never less than the minimum.
        """
        self.assertEqual(guidedShare(5000, 2, 50), 1250)
        self.assertEqual(guidedShare(5001, 2, 50), 1251)
        self.assertEqual(guidedShare(300, 2, 50), 75)
        self.assertEqual(guidedShare(120, 2, 50), 50)
        self.assertEqual(guidedShare(10, 1, 1), 5)
        self.assertEqual(guidedShare(0, 0, 1), 1)

    def test_takeShare(self) -> None:
        """
        A share is the unit's first messages, the rest left in its place;
        a unit no larger than the share is taken whole and removed.
        """
        folder = SourceFolder(("x",), "")
        listed = tuple(messages(1, 2, 3, 4, 5))
        units = [WorkUnit(folder, "A", listed), WorkUnit(folder, "B", listed[:1])]

        taken = takeShare(units, 0, 2)

        self.assertEqual(taken, WorkUnit(folder, "A", listed[:2]))
        self.assertEqual(units, [WorkUnit(folder, "A", listed[2:]), WorkUnit(folder, "B", listed[:1])])
        self.assertEqual(takeShare(units, 0, 3), WorkUnit(folder, "A", listed[2:]))
        self.assertEqual(units, [WorkUnit(folder, "B", listed[:1])])
        self.assertEqual(takeShare(units, 0, 3), WorkUnit(folder, "B", listed[:1]))
        self.assertEqual(units, [])
