# -*- test-case-name: tests.test_state,tests.test_state_contract -*-
"""
An in-memory state store: the fake of L{imapmig.state.sqlite} for unit
tests and for C{imapmig plan} before any state database exists.

It is the SQLite store itself on a private in-memory database, so it
behaves as the real one does by construction (queries, bounds, ordering,
what it refuses), where it used to be 481 lines of dictionaries written
again beside the SQL and held to the same tests.
"""

from __future__ import annotations

from typing import Callable

from imapmig.state.sqlite import SQLiteStateStore


class MemoryStateStore(SQLiteStateStore):
    """
    An L{IStateStore<imapmig.state.IStateStore>} in a SQLite database in
    memory; nothing survives the store, and any number may be open at
    once (an in-memory database takes no lock).  Its errors name it
    C{memory}.
    """

    def __init__(self, seconds: Callable[[], float] = lambda: 0.0) -> None:
        """
        @param seconds: the clock that stamps what is recorded (each
            outcome's time, each admin's hold).
        """
        super().__init__(":memory:", seconds)
        self._where = "memory"

    def __repr__(self) -> str:
        return "<MemoryStateStore>"
