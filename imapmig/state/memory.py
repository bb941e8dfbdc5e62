# -*- test-case-name: tests.test_state -*-
"""
An in-memory state store: the fake of L{imapmig.state.sqlite} for unit
tests, held to the same behaviour tests.
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.state import IStateStore, MessageOutcome

# The range of SQLite's INTEGER, which the fake enforces too.
_INTEGER_MIN = -(2**63)
_INTEGER_MAX = 2**63 - 1


@implementer(IStateStore)
class MemoryStateStore:
    """
    An L{IStateStore} in dictionaries; nothing survives the process.
    """

    def __init__(self) -> None:
        # job -> folderKey -> messageKey -> latest outcome
        self._jobs: dict[str, dict[str, dict[str, MessageOutcome]]] | None = {}

    def _open(self) -> dict[str, dict[str, dict[str, MessageOutcome]]]:
        """
        The outcomes of every job, unless the store was closed.

        @raise PermanentError: it was.
        """
        if self._jobs is None:
            raise PermanentError("memory: the state store is closed")
        return self._jobs

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IStateStore.appendedKeys}.
        """
        try:
            outcomes = self._open().get(job, {}).get(folderKey, {})
        except PermanentError as e:
            return fail(e)
        return succeed({key for key, outcome in outcomes.items() if outcome.failure is None})

    def recordOutcomes(self, job: str, outcomes: Sequence[MessageOutcome]) -> Deferred[None]:
        """
        See L{IStateStore.recordOutcomes}.
        """
        try:
            jobs = self._open()
        except PermanentError as e:
            return fail(e)
        for outcome in outcomes:
            for number in (outcome.size, outcome.uidValidity, outcome.uid):
                if number is not None and not _INTEGER_MIN <= number <= _INTEGER_MAX:
                    # As SQLite refuses it: the whole batch, nothing recorded.
                    return fail(
                        PermanentError(f"memory: cannot record outcomes: {number} is out of range")
                    )
        if outcomes:
            folders = jobs.setdefault(job, {})
            for outcome in outcomes:
                folders.setdefault(outcome.folderKey, {})[outcome.messageKey] = outcome
        return succeed(None)

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        try:
            folders = self._open().get(job, {})
        except PermanentError as e:
            return fail(e)
        return succeed(
            [
                outcome
                for folderKey in sorted(folders)
                for messageKey, outcome in sorted(folders[folderKey].items())
                if outcome.failure is not None
            ]
        )

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as appended and how many as
        failed (each by its latest outcome).

        @return: a Deferred firing with C{(appended, failed)}.
        """
        try:
            folders = self._open().get(job, {})
        except PermanentError as e:
            return fail(e)
        total = failed = 0
        for outcomes in folders.values():
            total += len(outcomes)
            failed += sum(1 for outcome in outcomes.values() if outcome.failure is not None)
        return succeed((total - failed, failed))

    def close(self) -> None:
        """
        See L{IStateStore.close}.  Closing twice is harmless.
        """
        self._jobs = None
