# -*- test-case-name: tests.test_state_contract,tests.test_state_postgresql -*-
"""
The PostgreSQL state store's writes of L{IOutcomeJournal}, over its
reads shared with the SQLite store
(L{imapmig.state._sqloutcomes.OutcomeJournal}): the messages table's
outcomes, and the journal of batches in flight, whose entry of a unit is
deleted in the transaction that records the unit's last outcomes, as the
SQLite store does.  Its writes are values for the batcher
(L{imapmig.state._pgbatch}), whose statements (L{imapmig.state._pgwrites})
upsert every outcome of a transaction in one statement of arrays
(C{unnest}).
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.state._pgbatch import PostgreSQLWriter
from imapmig.state._pgwrites import JOURNAL, NAMES, OUTCOMES
from imapmig.state._sqloutcomes import JournalRow, OutcomeJournal
from imapmig.state.outcomes import (
    AppendedOutcome,
    AppendedRun,
    IOutcomeJournal,
    MessageNames,
    MessageOutcome,
    flatOutcomes,
)

Row = tuple[Any, ...]


@implementer(IOutcomeJournal)
class PostgreSQLOutcomeJournal(OutcomeJournal, PostgreSQLWriter):
    """
    L{IOutcomeJournal} in the C{imapmig.messages} and C{imapmig.journal}
    tables.
    """

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        """
        See L{IOutcomeJournal.recordOutcomes}: one write of the batcher
        (L{imapmig.state._pgbatch}), its outcomes upserted and its
        settled entries deleted in the transaction of its batch.
        """
        if not outcomes and not settled:
            return self._ifOpen(None)
        rows = _rows(job, self._seconds(), flatOutcomes(outcomes))
        return self._enqueue(OUTCOMES, job, rows, max(len(rows), 1), list(settled))

    def _journalEntry(self, job: str, row: JournalRow) -> Deferred[int]:
        """
        See L{OutcomeJournal._journalEntry}: written by the batcher; its id
        chosen by the writer (a block of the sequence
        C{imapmig.journal_ids} and a counter,
        L{imapmig.state._pgwrites.WriterIds}), never reused, so that the
        insert run again after a lost C{COMMIT} finds its row rather than
        adding a second.
        """
        return self._enqueue(JOURNAL, job, row)

    def nameMessages(
        self, job: str, names: Sequence[tuple[str, str, MessageNames]]
    ) -> Deferred[None]:
        """
        See L{IOutcomeJournal.nameMessages}: one write of the batcher; of
        a message named twice, the last names count.
        """
        rows = [
            ((job, f, k), (job, f, k, n.messageId, n.date, n.sender, n.subject))
            for f, k, n in names
        ]
        return self._enqueue(NAMES, job, rows, max(len(rows), 1))


def _rows(
    job: str, now: float, outcomes: Sequence[MessageOutcome | AppendedOutcome]
) -> list[tuple[tuple[str, str, str], Row]]:
    """
    The rows of the messages table for C{outcomes}, each keyed by its
    message, in order (the batch keeps the latest of each).
    """
    rows: list[tuple[tuple[str, str, str], Row]] = []
    for outcome in outcomes:
        if type(outcome) is tuple:
            folderKey, messageKey, mailbox, size, uidValidity, uid, converted = outcome
            rows.append(((job, folderKey, messageKey), (
                job, folderKey, messageKey, mailbox, size, uidValidity, uid,
                None, None, False, bool(converted), None, None, None, None, now,
            )))  # fmt: skip
        else:
            assert isinstance(outcome, MessageOutcome)
            rows.append(((job, outcome.folderKey, outcome.messageKey), (
                job, outcome.folderKey, outcome.messageKey, outcome.mailbox, outcome.size,
                outcome.uidValidity, outcome.uid, outcome.failure, outcome.note,
                outcome.alreadyPresent, outcome.lineEndingsConverted, outcome.messageId,
                outcome.date, outcome.sender, outcome.subject, now,
            )))  # fmt: skip
    return rows
