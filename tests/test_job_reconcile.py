"""
Tests for L{imapmig.job.reconcile.matchArrivals}: which journaled messages
a destination's messages are.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.fidelity import journalHead
from imapmig.job.reconcile import Candidate, matchArrivals
from imapmig.state import JournalEntry, JournalMessage


def message(key: str, body: bytes) -> JournalMessage:
    """
    A journaled message of C{body}.
    """
    return JournalMessage("INBOX", key, len(body), journalHead(body))


def candidate(uid: int, body: bytes) -> Candidate:
    """
    A destination message of C{body} under C{uid}.
    """
    return Candidate(uid, len(body), journalHead(body))


class MatchArrivalsTests(SynchronousTestCase):
    """
    L{matchArrivals} pairs journaled messages with destination messages by
    size and head, in the order they were sent, each at most once.
    """

    def test_arrivedAndMissing(self) -> None:
        """
        Messages found are matched with their UIDs; the others are not.
        """
        entry = JournalEntry(1, "INBOX", 7, 10, (message("a", b"A" * 10), message("b", b"B" * 10)))
        self.assertEqual(
            matchArrivals([entry], [candidate(12, b"A" * 10)]), {("INBOX", "a"): 12}
        )

    def test_identicalMessagesNeedTwoCopies(self) -> None:
        """
        Two identical messages sent, one copy there: only the first sent is
        matched (the second will be sent again).
        """
        same = b"Subject: x\r\n\r\nsame\r\n"
        entry = JournalEntry(1, "INBOX", 7, 1, (message("a", same), message("b", same)))
        self.assertEqual(matchArrivals([entry], [candidate(5, same)]), {("INBOX", "a"): 5})
        self.assertEqual(
            matchArrivals([entry], [candidate(6, same), candidate(5, same)]),
            {("INBOX", "a"): 5, ("INBOX", "b"): 6},
        )

    def test_floor(self) -> None:
        """
        A destination message below an entry's UID floor was there before
        the entry's messages were sent: it is not one of them.
        """
        body = b"Subject: y\r\n\r\nbody\r\n"
        entry = JournalEntry(1, "INBOX", 7, 20, (message("a", body),))
        self.assertEqual(matchArrivals([entry], [candidate(19, body)]), {})
        self.assertEqual(
            matchArrivals([entry], [candidate(19, body), candidate(20, body)]),
            {("INBOX", "a"): 20},
        )

    def test_sizeAndHeadMustBothMatch(self) -> None:
        """
        Same size, other content; or same start, other size: no match.
        """
        entry = JournalEntry(1, "INBOX", 7, 1, (message("a", b"A" * 2000),))
        self.assertEqual(
            matchArrivals([entry], [candidate(3, b"B" * 2000), candidate(4, b"A" * 2001)]), {}
        )

    def test_entriesInOrder(self) -> None:
        """
        Earlier entries take the lower UIDs, whatever order they are given
        in.
        """
        same = b"Subject: z\r\n\r\nz\r\n"
        first = JournalEntry(1, "INBOX", 7, 1, (message("a", same),))
        second = JournalEntry(2, "INBOX", 7, 1, (message("b", same),))
        self.assertEqual(
            matchArrivals([second, first], [candidate(9, same), candidate(8, same)]),
            {("INBOX", "a"): 8, ("INBOX", "b"): 9},
        )
