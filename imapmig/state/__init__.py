# -*- test-case-name: tests.test_state -*-
"""
The state store: every source message's outcome, per job.

One interface, L{IStateStore}; SQLite (L{imapmig.state.sqlite}) is the
embedded default, and an in-memory store (L{imapmig.state.memory}) is its
fake.
"""

from __future__ import annotations

from typing import Sequence

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Interface


@frozen
class MessageOutcome:
    """
    What became of one source message.

    @ivar folderKey: the source folder's key (L{imapmig.message.SourceFolder.key}).
    @ivar messageKey: the message's key within that folder.
    @ivar mailbox: the destination mailbox name (decoded).
    @ivar size: octets sent (after CRLF conversion), or the source size if
        it was never sent.
    @ivar uidValidity: the destination mailbox's UIDVALIDITY from
        C{APPENDUID}, if the server has UIDPLUS.
    @ivar uid: the message's UID in the destination, likewise.
    @ivar failure: L{None} when appended; otherwise why not, with the
        server's text verbatim where the server refused it.
    """

    folderKey: str
    messageKey: str
    mailbox: str
    size: int
    uidValidity: int | None = None
    uid: int | None = None
    failure: str | None = None

    @property
    def appended(self) -> bool:
        """
        Whether the message is in the destination.
        """
        return self.failure is None


class IStateStore(Interface):
    """
    Durable record of outcomes.  Methods return Deferreds so that a
    networked store (PostgreSQL) fits the same interface.
    """

    def appendedKeys(job: str, folderKey: str) -> "Deferred[set[str]]":
        """
        The keys of the messages of C{folderKey} recorded as appended for
        C{job}.
        """

    def recordOutcomes(job: str, outcomes: Sequence[MessageOutcome]) -> "Deferred[None]":
        """
        Record C{outcomes} for C{job} in one transaction.  A later outcome
        for the same message replaces an earlier one (a message that failed
        once and was appended by a later run is recorded as appended).
        """

    def failures(job: str) -> "Deferred[list[MessageOutcome]]":
        """
        The messages of C{job} whose latest outcome is a failure, ordered by
        folder key, then message key.
        """

    def summary(job: str) -> "Deferred[tuple[int, int]]":
        """
        How many messages of C{job} are recorded as appended, and as failed.
        """

    def close() -> None:
        """
        Release the store; nothing is recorded afterwards.
        """
