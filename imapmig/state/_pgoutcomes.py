# -*- test-case-name: tests.test_state_contract,tests.test_state_postgresql -*-
"""
The PostgreSQL state store's role of L{IOutcomeJournal}: the messages
table's outcomes, and the journal of batches in flight, whose entry of a
unit is deleted in the transaction that records the unit's last
outcomes, as the SQLite store (L{imapmig.state._sqloutcomes}) does.  Its
writes are values for the batcher (L{imapmig.state._pgbatch}), whose
statements (L{imapmig.state._pgwrites}) upsert every outcome of a
transaction in one statement of arrays (C{unnest}).
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.state._packing import packMessages, unpackMessages
from imapmig.state._pgbatch import PostgreSQLWriter
from imapmig.state._pgwrites import JOURNAL, NAMES, OUTCOMES
from imapmig.state.outcomes import OUTCOME_COLUMNS, outcomeOf
from imapmig.state.outcomes import (
    AppendedOutcome,
    IOutcomeJournal,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
)

Row = tuple[Any, ...]


@implementer(IOutcomeJournal)
class PostgreSQLOutcomeJournal(PostgreSQLWriter):
    """
    L{IOutcomeJournal} in the C{imapmig.messages} and C{imapmig.journal}
    tables.
    """

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IOutcomeJournal.appendedKeys}.
        """
        return self._read(
            "read appended messages",
            "SELECT message_key FROM imapmig.messages"
            " WHERE job = %s AND folder_key = %s AND failure IS NULL",
            (job, folderKey),
            lambda rows: {key for (key,) in rows},
        )

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        """
        See L{IOutcomeJournal.recordOutcomes}: one write of the batcher
        (L{imapmig.state._pgbatch}), its outcomes upserted and its
        settled entries deleted in the transaction of its batch.
        """
        if not outcomes and not settled:
            return self._ifOpen(None)
        rows = _rows(job, self._seconds(), outcomes)
        return self._enqueue(OUTCOMES, job, rows, max(len(rows), 1), list(settled))

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        """
        See L{IOutcomeJournal.journalBatch}: one row, written by the
        batcher; its id chosen by the writer (a block of the sequence
        C{imapmig.journal_ids} and a counter, L{imapmig.state._pgwrites.WriterIds}),
        never reused, so that the insert run again after a lost C{COMMIT}
        finds its row rather than adding a second.
        """
        try:
            blob = packMessages(messages)
        except ValueError as e:
            return fail(PermanentError(f"{self._where}: cannot journal the batch: {e}"))
        return self._enqueue(JOURNAL, job, (mailbox, uidValidity, uidFloor, blob, self._seconds()))

    def journal(self, job: str) -> Deferred[list[JournalEntry]]:
        """
        See L{IOutcomeJournal.journal}.
        """

        def entries(rows: list[tuple[int, str, int | None, int | None, bytes]]) -> list[JournalEntry]:
            result = []
            for entryId, mailbox, uidValidity, uidFloor, blob in rows:
                try:
                    messages = unpackMessages(bytes(blob))
                except ValueError as e:
                    raise PermanentError(
                        f"{self._where}: cannot read journal entry {entryId}: {e}"
                    ) from None
                result.append(JournalEntry(entryId, mailbox, uidValidity, uidFloor, messages))
            return result

        return self._read(
            "read the journal",
            "SELECT entry_id, mailbox, uidvalidity, uid_floor, messages FROM imapmig.journal"
            " WHERE job = %s ORDER BY entry_id",
            (job,),
            entries,
        )

    def recordedUIDs(
        self, job: str, mailbox: str, uidValidity: int, fromUID: int
    ) -> Deferred[set[int]]:
        """
        See L{IOutcomeJournal.recordedUIDs}.
        """
        return self._read(
            "read recorded UIDs",
            "SELECT uid FROM imapmig.messages WHERE job = %s AND mailbox = %s"
            " AND uidvalidity = %s AND uid >= %s AND failure IS NULL",
            (job, mailbox, uidValidity, fromUID),
            lambda rows: {uid for (uid,) in rows},
        )

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

    def destinationMap(self, job: str, folderKey: str) -> Deferred[dict[str, MessageOutcome]]:
        """
        See L{IOutcomeJournal.destinationMap}.
        """
        return self._read(
            "read the destination map",
            f"SELECT {OUTCOME_COLUMNS} FROM imapmig.messages"
            " WHERE job = %s AND folder_key = %s AND failure IS NULL",
            (job, folderKey),
            lambda rows: {row[1]: outcomeOf(row) for row in rows},
        )


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
