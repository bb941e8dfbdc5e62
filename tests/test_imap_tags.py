"""
Tests for L{imapmig.imap.tags}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.commands import CollectedCommand, FetchCommand, PendingCommand
from imapmig.imap.tags import TagTable


def _pending(tag: bytes) -> PendingCommand:
    return PendingCommand(tag, b"NOOP", Deferred())


def _collected(tag: bytes) -> CollectedCommand:
    return CollectedCommand(tag, b"SELECT", Deferred(), [])


def _fetch(tag: bytes, sink: list[Any]) -> FetchCommand:
    return FetchCommand(tag, b"UID FETCH", Deferred(), sink.append)


class TagTableTests(SynchronousTestCase):
    """
    L{TagTable} keeps the commands awaiting their replies, oldest first,
    with the views the client reads.
    """

    def test_empty(self) -> None:
        """
        An empty table is false and has no oldest command, collector or
        sending time.
        """
        table = TagTable()
        self.assertFalse(table)
        self.assertIsNone(table.oldest())
        self.assertIsNone(table.collector())
        self.assertIsNone(table.oldestSent())
        self.assertIsNone(table.answered(b"0001"))

    def test_views(self) -> None:
        """
        A command that collects is among the collectors, a fetch command
        among the fetches, any other in neither; the oldest of each comes
        first.
        """
        table = TagTable()
        plain, first, second, fetch = (
            _pending(b"A1"),
            _collected(b"A2"),
            _collected(b"A3"),
            _fetch(b"A4", []),
        )
        for entry in (plain, first, second, fetch):
            table.add(entry)
        self.assertTrue(table)
        self.assertIs(table.oldest(), plain)
        self.assertIs(table.collector(), first)
        self.assertEqual(list(table.collectors), [b"A2", b"A3"])
        self.assertEqual(list(table.fetches), [b"A4"])

    def test_answered(self) -> None:
        """
        L{TagTable.answered} takes the command out of the table and its
        views, and forgets when it was sent; a tag the table does not hold
        (the APPEND pipeline's) gives L{None} and only its sending time is
        forgotten.
        """
        table = TagTable()
        table.sent(b"A1", 10.0)
        table.sent(b"P1", 11.0)
        table.sent(b"A2", 12.0)
        collected, fetch = _collected(b"A1"), _fetch(b"A2", [])
        table.add(collected)
        table.add(fetch)
        self.assertEqual(table.oldestSent(), 10.0)
        self.assertIs(table.answered(b"A1"), collected)
        self.assertEqual(table.oldestSent(), 11.0)
        self.assertIsNone(table.collector())
        self.assertIsNone(table.answered(b"P1"))
        self.assertEqual(table.oldestSent(), 12.0)
        self.assertIs(table.answered(b"A2"), fetch)
        self.assertEqual(dict(table.fetches), {})
        self.assertFalse(table)
        self.assertIsNone(table.oldestSent())

    def test_clear(self) -> None:
        """
        L{TagTable.clear} hands over every command, oldest first, and
        leaves the table and its views empty.
        """
        table = TagTable()
        entries = [_pending(b"A1"), _collected(b"A2"), _fetch(b"A3", [])]
        for entry in entries:
            table.add(entry)
        self.assertEqual(table.clear(), entries)
        self.assertFalse(table)
        self.assertEqual((dict(table.collectors), dict(table.fetches)), ({}, {}))
