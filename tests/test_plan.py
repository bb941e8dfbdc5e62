"""
Tests for L{imapmig.plan}: folder mapping, what is left to copy, and how
work is cut and shared.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.message import SourceFolder, SourceMessage
from imapmig.plan import (
    WorkUnit,
    chooseUnit,
    chunks,
    cutUnits,
    destinationMailbox,
    mailboxesToCreate,
    pendingMessages,
)


def messages(*sizes: int) -> list[SourceMessage]:
    return [SourceMessage(str(i), (), None, size) for i, size in enumerate(sizes)]


class FolderMappingTests(SynchronousTestCase):
    """
    Source hierarchies become destination mailbox names.
    """

    def test_delimiter(self) -> None:
        """
        Components are joined with the destination's delimiter.
        """
        self.assertEqual(destinationMailbox(("Archive", "2019"), "."), "Archive.2019")
        self.assertEqual(destinationMailbox(("Archive", "2019"), "/"), "Archive/2019")

    def test_delimiterInsideComponent(self) -> None:
        """
        A delimiter inside a component is replaced, so it does not create
        hierarchy.
        """
        self.assertEqual(destinationMailbox(("a.b", "c"), "."), "a_b.c")
        self.assertEqual(destinationMailbox(("a.b", "c"), "/"), "a.b/c")

    def test_inbox(self) -> None:
        """
        INBOX is spelled in upper case whatever the source's case.
        """
        self.assertEqual(destinationMailbox(("Inbox",), "."), "INBOX")
        self.assertEqual(destinationMailbox(("inbox", "x"), "/"), "INBOX/x")

    def test_flatServer(self) -> None:
        """
        Without a delimiter, components are joined with underscores.
        """
        self.assertEqual(destinationMailbox(("a", "b"), None), "a_b")

    def test_mailboxesToCreate(self) -> None:
        """
        Missing mailboxes are listed parents first, once each; existing ones
        and INBOX are not.
        """
        self.assertEqual(
            mailboxesToCreate(
                [("INBOX",), ("Archive", "2019"), ("Archive", "2020"), ("Lists", "a", "b")],
                {"Archive", "inbox"},
                ".",
            ),
            ["Archive.2019", "Archive.2020", "Lists", "Lists.a", "Lists.a.b"],
        )


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
