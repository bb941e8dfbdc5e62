# -*- test-case-name: tests.test_state_contract,tests.test_state_postgresql -*-
"""
The PostgreSQL state store's role of L{IOutcomeJournal}: the messages
table's outcomes, a batch upserted in one statement of arrays
(C{unnest}), and the journal of batches in flight, whose entry of a unit
is deleted in the transaction that records the unit's last outcomes, as
the SQLite store (L{imapmig.state._sqloutcomes}) does.
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.state._packing import packMessages, unpackMessages
from imapmig.state._pgbase import Connection, PostgreSQLBase
from imapmig.state.outcomes import OUTCOME_COLUMNS, outcomeOf
from imapmig.state.outcomes import (
    AppendedOutcome,
    IOutcomeJournal,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
)

# One statement for a whole batch: fourteen arrays, one per column, and
# the job and the time once.  ON CONFLICT DO UPDATE may not touch a row
# twice in one statement, so the batch is given with each message once
# (its latest outcome).
_UPSERT = f"""
    INSERT INTO imapmig.messages (job, {OUTCOME_COLUMNS}, updated_at)
    SELECT %s, u.*, %s FROM unnest(
        %s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[],
        %s::text[], %s::text[], %s::boolean[], %s::boolean[],
        %s::text[], %s::text[], %s::text[], %s::text[]
    ) AS u
    ON CONFLICT (job, folder_key, message_key) DO UPDATE SET
        mailbox = excluded.mailbox,
        size = excluded.size,
        uidvalidity = excluded.uidvalidity,
        uid = excluded.uid,
        failure = excluded.failure,
        note = excluded.note,
        present = excluded.present,
        converted = excluded.converted,
        updated_at = excluded.updated_at,
        message_id = excluded.message_id,
        message_date = excluded.message_date,
        message_from = excluded.message_from,
        message_subject = excluded.message_subject
"""

_SETTLE = "DELETE FROM imapmig.journal WHERE job = %s AND entry_id = ANY(%s::bigint[])"

_INSERT_ENTRY = """
    INSERT INTO imapmig.journal (entry_id, job, mailbox, uidvalidity, uid_floor, messages, written_at)
    VALUES (nextval('imapmig.journal_ids'), %s, %s, %s, %s, %s, %s)
    RETURNING entry_id
"""

_NAME = """
    UPDATE imapmig.messages AS m SET
        message_id = u.message_id, message_date = u.message_date,
        message_from = u.message_from, message_subject = u.message_subject
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
        AS u (folder_key, message_key, message_id, message_date, message_from, message_subject)
    WHERE m.job = %s AND m.folder_key = u.folder_key AND m.message_key = u.message_key
        AND m.failure IS NOT NULL
"""

Row = tuple[Any, ...]


@implementer(IOutcomeJournal)
class PostgreSQLOutcomeJournal(PostgreSQLBase):
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
        See L{IOutcomeJournal.recordOutcomes}: one transaction of at most
        two statements, the upsert of every outcome and the deletion of
        the settled entries.
        """
        if not outcomes and not settled:
            return self._ifOpen(None)
        now = self._seconds()
        columns = _columns(outcomes)
        entries = list(settled)

        def write(connection: Connection) -> None:
            if columns:
                connection.execute(_UPSERT, (job, now, *columns))
            if entries:
                connection.execute(_SETTLE, (job, entries))

        return self._transaction("record outcomes", write)

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        """
        See L{IOutcomeJournal.journalBatch}: one row, one transaction; its
        id from a sequence, never reused.
        """
        try:
            blob = packMessages(messages)
        except ValueError as e:
            return fail(PermanentError(f"{self._where}: cannot journal the batch: {e}"))
        row = (job, mailbox, uidValidity, uidFloor, blob, self._seconds())

        def write(connection: Connection) -> int:
            found = connection.execute(_INSERT_ENTRY, row).fetchone()
            assert found is not None
            return int(found[0])

        return self._transaction("journal the batch", write)

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
        See L{IOutcomeJournal.nameMessages}: one statement, one
        transaction; of a message named twice, the last names count.
        """
        latest = {(f, k): (f, k, n.messageId, n.date, n.sender, n.subject) for f, k, n in names}
        columns = [list(column) for column in zip(*latest.values())] or [[]] * 6

        def write(connection: Connection) -> None:
            connection.execute(_NAME, (*columns, job))

        return self._transaction("record the names of messages", write)

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


def _columns(outcomes: Sequence[MessageOutcome | AppendedOutcome]) -> list[list[Any]]:
    """
    The fourteen column arrays of L{_UPSERT} for C{outcomes}, each message
    once with its latest outcome; empty if there are none.
    """
    latest: dict[tuple[str, str], Row] = {}
    for outcome in outcomes:
        if type(outcome) is tuple:
            folderKey, messageKey, mailbox, size, uidValidity, uid, converted = outcome
            latest[folderKey, messageKey] = (
                folderKey, messageKey, mailbox, size, uidValidity, uid,
                None, None, False, bool(converted), None, None, None, None,
            )  # fmt: skip
        else:
            assert isinstance(outcome, MessageOutcome)
            latest[outcome.folderKey, outcome.messageKey] = (
                outcome.folderKey, outcome.messageKey, outcome.mailbox, outcome.size,
                outcome.uidValidity, outcome.uid, outcome.failure, outcome.note,
                outcome.alreadyPresent, outcome.lineEndingsConverted, outcome.messageId,
                outcome.date, outcome.sender, outcome.subject,
            )  # fmt: skip
    return [list(column) for column in zip(*latest.values())]
