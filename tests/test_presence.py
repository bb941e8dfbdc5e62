"""
Tests for L{imapmig.job.presence}: the index of what a destination mailbox
already holds.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.fidelity import identityOf
from imapmig.job.presence import FINGERPRINT, MESSAGE_ID, PresenceIndex, holdsOthers

A = b"Message-ID: <a@x>\r\nSubject: a\r\n\r\nbody a\r\n"
A_ALTERED = b"X-TUID: 123\r\nMessage-ID: <a@x>\r\nSubject: a\r\n\r\nbody a\r\n"
B = b"Message-ID: <a@x>\r\nSubject: b\r\n\r\nbody b\r\n"
NO_ID = b"Subject: none\r\n\r\nbody\r\n"


class PresenceIndexTests(SynchronousTestCase):
    """
    L{PresenceIndex}.
    """

    def test_fingerprint(self) -> None:
        """
        By fingerprint, a message is found by its whole identity; another
        message with the same Message-ID is not; each destination copy
        answers once, so two identical source messages need two copies.
        """
        index = PresenceIndex("INBOX", FINGERPRINT, 7)
        index.add(identityOf(A), 10)
        index.add(identityOf(NO_ID), 11)
        self.assertEqual(len(index), 2)
        self.assertIsNone(index.take(B))
        self.assertIsNone(index.take(A_ALTERED))
        self.assertEqual(index.take(A), 10)
        self.assertIsNone(index.take(A))
        self.assertEqual(index.take(NO_ID), 11)
        self.assertEqual(len(index), 0)

    def test_messageId(self) -> None:
        """
        By Message-ID alone, an altered copy is found; messages without a
        Message-ID are never matched.
        """
        index = PresenceIndex("INBOX", MESSAGE_ID, 7)
        index.add(identityOf(A_ALTERED), 10)
        index.add(identityOf(NO_ID), 11)
        self.assertEqual(len(index), 1)
        self.assertEqual(index.take(A), 10)
        self.assertIsNone(index.take(NO_ID))


class HoldsOthersTests(SynchronousTestCase):
    """
    L{holdsOthers}: whether a mailbox may hold messages no record places
    there, from what SELECT told.
    """

    def test_holdsOthers(self) -> None:
        """
        Only records under the mailbox's current UIDVALIDITY count; a
        mailbox holding more messages than they place may hold others.
        """
        self.assertFalse(holdsOthers(0, 7, []))
        self.assertFalse(holdsOthers(2, 7, [(7, 1), (7, 2)]))
        self.assertTrue(holdsOthers(3, 7, [(7, 1), (7, 2)]))
        self.assertTrue(holdsOthers(2, 8, [(7, 1), (7, 2)]))
        self.assertTrue(holdsOthers(1, None, [(7, 1)]))
