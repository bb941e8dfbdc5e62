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
        An empty table has no oldest command or collector.
        """
        table = TagTable()
        self.assertEqual(table.commands, {})
        self.assertIsNone(table.oldest())
        self.assertIsNone(table.collector())

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
        self.assertEqual(list(table.commands), [b"A1", b"A2", b"A3", b"A4"])
        self.assertIs(table.oldest(), plain)
        self.assertIs(table.collector(), first)
        self.assertEqual(list(table.collectors), [b"A2", b"A3"])
        self.assertEqual(list(table.fetches), [b"A4"])

    def test_answered(self) -> None:
        """
        L{TagTable.answered} takes a command the client popped from
        L{TagTable.commands} out of the views.
        """
        table = TagTable()
        collected, fetch = _collected(b"A1"), _fetch(b"A2", [])
        table.add(collected)
        table.add(fetch)
        table.answered(table.commands.pop(b"A1"))
        self.assertIsNone(table.collector())
        self.assertEqual(list(table.fetches), [b"A2"])
        table.answered(table.commands.pop(b"A2"))
        self.assertEqual((table.commands, table.fetches), ({}, {}))

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
        self.assertEqual(table.commands, {})
        self.assertEqual((dict(table.collectors), dict(table.fetches)), ({}, {}))
