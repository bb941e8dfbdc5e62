# -*- test-case-name: tests.test_state_journal,tests.test_state,tests.test_state_contract -*-
"""
The SQL state stores' role of L{IOutcomeJournal}: the messages table's
outcomes and the journal of batches in flight.  Its reads are one class
for SQLite's and PostgreSQL's stores (L{OutcomeJournal}, over
L{imapmig.state._sqldialect}); SQLite's writes, a batch of outcomes per
transaction, are its subclass here (PostgreSQL's, through its batcher,
are in L{imapmig.state._pgoutcomes}).

Taken out of C{imapmig/state/sqlite.py}, whose store had grown to 837
lines; the reads of PostgreSQL's C{_pgoutcomes.py} are merged into it.
"""

from __future__ import annotations

import sqlite3
from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import Any, Iterable, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.state._packing import packMessages, unpackMessages
from imapmig.state._sqlbase import SQLiteBase
from imapmig.state._sqldialect import SQLStore
from imapmig.state.outcomes import (
    AppendedOutcome,
    AppendedRun,
    IOutcomeJournal,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
    OUTCOME_UPSERT,
    outcomeOf,
)

_UPSERT_TEMPLATE = (
    """
    INSERT INTO messages (
        job, folder_key, message_key, mailbox, size, uidvalidity, uid,
        failure, note, present, converted, updated_at, message_id,
        message_date, message_from, message_subject
    ) VALUES ({values})
    """
    + OUTCOME_UPSERT
)
_UPSERT = _UPSERT_TEMPLATE.format(values="?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?")
# For an outcome with no failure, no note and no names.
_UPSERT_PLAIN = _UPSERT_TEMPLATE.format(
    values="?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, NULL, NULL, NULL, NULL"
)
# For AppendedOutcomes (no failure, no note, not present): the upsert of a
# run of them, in rows of at most _APPENDED_ROWS, one statement each.
_UPSERT_APPENDED = "appended"
# For AppendedRuns: the same statements, bound from the runs' columns.
_UPSERT_RUNS = "runs"
_APPENDED_ROWS = 64
_appendedStatements: dict[int, str] = {}
# What an AppendedOutcome binds per row: its message key, size, UID and
# conversion; its folder key, mailbox and UIDVALIDITY are the run's.
_perRow = itemgetter(1, 3, 5, 6)
_perRun = itemgetter(0, 2, 4)
_messageOf = itemgetter(0, 1)


_APPENDED_INSERT = (
    "INSERT INTO messages (job, folder_key, message_key, mailbox, size, uidvalidity, uid,"
    " converted, updated_at) VALUES {values} ON CONFLICT (job, folder_key, message_key)"
    " DO UPDATE SET mailbox = excluded.mailbox, size = excluded.size,"
    " uidvalidity = excluded.uidvalidity, uid = excluded.uid, failure = NULL, note = NULL,"
    " present = 0, converted = excluded.converted, updated_at = excluded.updated_at,"
    " message_id = NULL, message_date = NULL, message_from = NULL, message_subject = NULL"
)
"""
The upsert of appended outcomes: only the columns an appended message
binds (the others take their defaults, NULL and 0, as a new row), so that
SQLite copies 9 values a row through its multi-row C{VALUES}, not 16 (740
instructions a row less, callgrind); a message recorded before (failed,
found present, named) has those columns cleared by the update.
"""


def _upsertAppended(rows: int) -> str:
    """
    The upsert of C{rows} L{AppendedOutcome}s of one folder, mailbox and
    UIDVALIDITY in one statement (L{_APPENDED_INSERT}): parameter 1 is the
    job, 2 the time, 3 the folder key, 4 the mailbox, 5 the UIDVALIDITY,
    then each outcome's message key, size, UID and conversion in turn
    (L{_perRow}), so that what a run shares is bound once, not once per
    row.  SQLite inserts the rows in order: a later row of the same
    message wins.
    """
    statement = _appendedStatements.get(rows)
    if statement is None:
        values = ", ".join(
            f"(?1, ?3, ?{6 + 4 * row}, ?4, ?{7 + 4 * row}, ?5, ?{8 + 4 * row},"
            f" ?{9 + 4 * row}, ?2)"
            for row in range(rows)
        )
        statement = _appendedStatements[rows] = _APPENDED_INSERT.format(values=values)
    return statement


_NAME = """
    UPDATE messages SET message_id = ?, message_date = ?, message_from = ?, message_subject = ?
    WHERE job = ? AND folder_key = ? AND message_key = ? AND failure IS NOT NULL
"""

_INSERT_ENTRY = """
    INSERT INTO journal (entry_id, job, mailbox, uidvalidity, uid_floor, messages, written_at)
    VALUES (?, ?, ?, ?, ?, ?, ?)
"""

_SETTLE = "DELETE FROM journal WHERE entry_id = ? AND job = ?"

JournalRow = tuple[str, int | None, int | None, bytes, float]
"""
A journal entry's mailbox, UIDVALIDITY, UID floor, packed messages and
time.
"""

_FEW_FOLDERS = 64
"""
Up to how many folders L{OutcomeJournal.destinationMaps} names in its
query; for more, it reads every row of the job.
"""


class OutcomeJournal(SQLStore):
    """
    The reads of L{IOutcomeJournal} in the C{messages} and C{journal}
    tables, one class for SQLite's and PostgreSQL's stores; each store's
    subclass writes them.
    """

    def checkpoint(self) -> Deferred[None]:
        """
        See L{IStateStore.checkpoint}: nothing here (the PostgreSQL
        server writes its log to its files itself).
        """
        return succeed(None)

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IStateStore.appendedKeys}.
        """
        return self._select(
            "read appended messages",
            "SELECT message_key FROM imapmig.messages"
            " WHERE job = ? AND folder_key = ? AND failure IS NULL",
            (job, folderKey),
            lambda rows: {key for (key,) in rows},
        )

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        """
        See L{IStateStore.journalBatch}: one row, its messages packed
        (L{packMessages}), written by the store (L{_journalEntry}).
        """
        try:
            blob = packMessages(messages)
        except ValueError as e:
            return fail(PermanentError(f"{self._where}: cannot journal the batch: {e}"))
        return self._journalEntry(job, (mailbox, uidValidity, uidFloor, blob, self._seconds()))

    def _journalEntry(self, job: str, row: JournalRow) -> Deferred[int]:
        """
        Write C{job}'s journal entry C{row}.

        @return: a Deferred firing with the entry's id once it is
            committed.
        """
        raise NotImplementedError()

    def journal(self, job: str) -> Deferred[list[JournalEntry]]:
        """
        See L{IStateStore.journal}.
        """
        if self._version < 3:
            # A version-2 database opened read-only has no journal yet.
            return self._ifOpen([])

        def entries(
            rows: list[tuple[int, str, int | None, int | None, bytes]],
        ) -> list[JournalEntry]:
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

        return self._select(
            "read the journal",
            "SELECT entry_id, mailbox, uidvalidity, uid_floor, messages FROM imapmig.journal"
            " WHERE job = ? ORDER BY entry_id",
            (job,),
            entries,
        )

    def recordedUIDs(
        self, job: str, mailbox: str, uidValidity: int, fromUID: int
    ) -> Deferred[set[int]]:
        """
        See L{IStateStore.recordedUIDs}.  It reads every record of C{job}:
        it is asked after a lost connection, not per batch, and an index
        for it would cost every recorded outcome.
        """
        return self._select(
            "read recorded UIDs",
            "SELECT uid FROM imapmig.messages WHERE job = ? AND mailbox = ?"
            " AND uidvalidity = ? AND uid >= ? AND failure IS NULL",
            (job, mailbox, uidValidity, fromUID),
            lambda rows: {uid for (uid,) in rows},
        )

    def destinationMap(self, job: str, folderKey: str) -> Deferred[dict[str, MessageOutcome]]:
        """
        See L{IStateStore.destinationMap}.
        """
        d = self._outcomes(
            "read the destination map",
            f"SELECT {self._outcomeColumns()} FROM imapmig.messages"
            " WHERE job = ? AND folder_key = ? AND failure IS NULL",
            (job, folderKey),
        )
        return d.addCallback(lambda outcomes: {o.messageKey: o for o in outcomes})

    def destinationMaps(
        self, job: str, folderKeys: Sequence[str]
    ) -> Deferred[dict[str, dict[str, MessageOutcome]]]:
        """
        See L{IStateStore.destinationMaps}: one read of the job's
        outcomes, where L{destinationMap} of each folder was one a folder
        (on PostgreSQL a round trip each, 4.7 a job of the scale-out row).
        """
        # Only the folders asked for, by the primary key, when they are few
        # (a delta pass lists only the folders that changed); every row of
        # the job otherwise, in one statement.
        few = 0 < len(folderKeys) <= _FEW_FOLDERS
        inFolders = f" AND folder_key IN ({', '.join('?' for _ in folderKeys)})" if few else ""
        query = self._dialect.sql(
            f"SELECT {self._outcomeColumns()} FROM imapmig.messages"
            f" WHERE job = ? AND failure IS NULL{inFolders}"
        )
        parameters = (job, *folderKeys) if few else (job,)

        def byFolder(connection: Any) -> dict[str, dict[str, MessageOutcome]]:
            # The rows are read one at a time, never all at once beside the
            # maps, and each folder's key and mailbox name is held once,
            # not once a message (a delta pass over 500,000 messages reads
            # them all: 662 bytes a message at peak before, 363 after).
            maps: dict[str, dict[str, MessageOutcome]] = {key: {} for key in folderKeys}
            shared: dict[str, str] = {}
            for row in connection.execute(query, parameters):
                folderKey, messageKey, mailbox, *rest = row
                folder = maps.get(folderKey)
                if folder is not None:
                    folderKey = shared.setdefault(folderKey, folderKey)
                    mailbox = shared.setdefault(mailbox, mailbox)
                    folder[messageKey] = outcomeOf((folderKey, messageKey, mailbox, *rest))
            return maps

        return self._reading("read the destination maps", byFolder)


@implementer(IOutcomeJournal)
class SQLiteOutcomeJournal(OutcomeJournal, SQLiteBase):
    """
    L{IOutcomeJournal} in SQLite's C{messages} and C{journal} tables, its
    outcomes written a batch per transaction.

    @ivar _lastEntryId: the highest journal entry id written or found.
    """

    _lastEntryId: int

    def checkpoint(self) -> Deferred[None]:
        """
        See L{IStateStore.checkpoint}: the write-ahead log copied into the
        database file now (C{PRAGMA wal_checkpoint(PASSIVE)}: without
        waiting for any other connection, whatever they read or write),
        so that the checkpoint of the store's close has only what is
        written after to copy and sync.  Nothing while a transaction is
        open, or once the store is closed; a checkpoint SQLite cannot make
        now changes nothing (the close's makes it).
        """
        connection = self._connection
        if connection is not None and not connection.in_transaction:
            try:
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                pass
        return succeed(None)

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordOutcomes}.  The outcomes and the deletion
        of the settled journal entries are one transaction: all of it is
        recorded, or none of it.
        """
        if not outcomes and not settled:
            return self._ifOpen(None)
        now = self._seconds()
        runs = _runs(job, outcomes, now)
        entries = [(entryId, job) for entryId in settled]

        def write(connection: sqlite3.Connection) -> None:
            for statement, rows in runs:
                if statement is _UPSERT_RUNS:
                    _writeRuns(connection, job, now, rows)  # type: ignore[arg-type]
                elif statement is _UPSERT_APPENDED:
                    _writeAppended(connection, job, now, rows)  # type: ignore[arg-type]
                else:
                    connection.executemany(statement, rows)  # type: ignore[arg-type]
            if entries:
                connection.executemany(_SETTLE, entries)

        return self._transaction("record outcomes", write)

    def _journalEntry(self, job: str, row: JournalRow) -> Deferred[int]:
        """
        See L{OutcomeJournal._journalEntry}: one transaction.
        """
        # Numbered here, one more than any entry this store wrote or found
        # at open: never the id of an entry settled since, so a stale id
        # cannot settle a newer entry.
        entryId = self._lastEntryId + 1
        values = (entryId, job, *row)

        def write(connection: sqlite3.Connection) -> int:
            connection.execute(_INSERT_ENTRY, values)
            # Even if the commit fails: an id is skipped, never reused.
            self._lastEntryId = entryId
            return entryId

        return self._transaction("journal the batch", write)

    def nameMessages(
        self, job: str, names: Sequence[tuple[str, str, MessageNames]]
    ) -> Deferred[None]:
        """
        See L{IStateStore.nameMessages}: one transaction.
        """
        rows = [
            (n.messageId, n.date, n.sender, n.subject, job, folderKey, messageKey)
            for folderKey, messageKey, n in names
        ]

        def write(connection: sqlite3.Connection) -> None:
            connection.executemany(_NAME, rows)

        return self._transaction("record the names of messages", write)


def _runs(
    job: str, outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun], now: float
) -> list[tuple[str, Sequence[object]]]:
    """
    The rows of C{outcomes} for C{job} at C{now}, in runs of one statement
    each.

    Consecutive outcomes of one kind are one run, and the runs keep the
    order of the outcomes (a later outcome of the same message wins).  An
    AppendedOutcome (nearly all of them) goes through _UPSERT_APPENDED,
    whose NULLs and 0 are in the SQL: the sqlite3 module binds a None
    parameter through its adapter protocol, two failed attribute lookups
    each.  So does a MessageOutcome with neither a failure nor a note,
    through _UPSERT_PLAIN.  The runs are found by C{groupby} (in C, no
    bytecode per outcome): a run of AppendedOutcomes is handed over as
    it is, and so is a run of L{AppendedRun}s (the hot path's form).
    """
    runs: list[tuple[str, Sequence[object]]] = []
    for kind, run in groupby(outcomes, type):
        if kind is AppendedRun:
            runs.append((_UPSERT_RUNS, list(run)))
            continue
        if kind is tuple:
            runs.append((_UPSERT_APPENDED, list(run)))
            continue
        statement = ""
        rows: list[tuple[object, ...]] = []
        for outcome in run:
            assert isinstance(outcome, MessageOutcome)
            wanted, row = _outcomeRow(job, outcome, now)
            if statement is not wanted:
                statement, rows = wanted, []
                runs.append((statement, rows))
            rows.append(row)
    return runs


def _outcomeRow(job: str, outcome: MessageOutcome, now: float) -> tuple[str, tuple[object, ...]]:
    """
    The statement that records C{outcome} for C{job} at C{now}, and its
    row: L{_UPSERT_PLAIN} for an outcome with no failure, no note and no
    names, L{_UPSERT} otherwise.
    """
    head = (
        job,
        outcome.folderKey,
        outcome.messageKey,
        outcome.mailbox,
        outcome.size,
        outcome.uidValidity,
        outcome.uid,
    )
    tail: tuple[object, ...] = (
        1 if outcome.alreadyPresent else 0,
        1 if outcome.lineEndingsConverted else 0,
        now,
    )
    if outcome.failure is None and outcome.note is None and _nameless(outcome):
        return _UPSERT_PLAIN, head + tail
    names = (outcome.messageId, outcome.date, outcome.sender, outcome.subject)
    return _UPSERT, head + (outcome.failure, outcome.note) + tail + names


def _writeAppended(
    connection: sqlite3.Connection, job: str, now: float, outcomes: Sequence[tuple[object, ...]]
) -> None:
    """
    Upsert a run of L{AppendedOutcome}s for C{job} at C{now}, in order:
    each stretch of one folder, mailbox and UIDVALIDITY in statements of
    L{_APPENDED_ROWS} rows, then of halves of that for the rest (a few
    statements, each compiled once per process).  The stretches of a
    folder are written together (L{_stretches}).
    """
    for shared, rows in _stretches(outcomes):
        start = 0
        count = len(rows)
        size = _APPENDED_ROWS
        while start < count:
            while size > count - start:
                size //= 2
            end = start + size
            parameters: list[object] = [job, now, *shared]
            parameters.extend(chain.from_iterable(map(_perRow, rows[start:end])))
            connection.execute(_upsertAppended(size), parameters)
            start = end


def _writeRuns(
    connection: sqlite3.Connection, job: str, now: float, runs: Sequence[AppendedRun]
) -> None:
    """
    Upsert C{runs} for C{job} at C{now}, in order, as L{_writeAppended}
    does a run of L{AppendedOutcome}s: the runs of one folder, mailbox
    and UIDVALIDITY joined (L{_joinedRuns}), each join's parameters one
    flat list made from the runs' columns (C{zip} hands C{chain} one tuple,
    reused, so nothing is made per message), cut into statements of
    L{_APPENDED_ROWS} rows, then of halves of that for the rest.
    """
    for shared, joined in _joinedRuns(runs):
        flat: list[object] = []
        for run in joined:
            uids: Iterable[int | None] = repeat(None) if run.uids is None else run.uids
            flat.extend(chain.from_iterable(zip(run.keys, run.sizes, uids, run.converted)))
        head: list[object] = [job, now, *shared]
        start = 0
        count = len(flat) // 4
        size = _APPENDED_ROWS
        while start < count:
            while size > count - start:
                size //= 2
            end = start + size
            connection.execute(_upsertAppended(size), head + flat[4 * start : 4 * end])
            start = end


def _joinedRuns(
    runs: Sequence[AppendedRun],
) -> list[tuple[tuple[str, str, int | None], list[AppendedRun]]]:
    """
    C{runs} grouped by folder, mailbox and UIDVALIDITY, each group with
    what it shares, as L{_stretches} groups L{AppendedOutcome}s: a job's
    connections reply in turns, so the runs of one folder are joined, in
    their order, unless a message of a folder is there twice; then only
    the runs that follow each other are, so that its later outcome is
    written last.
    """
    joined: dict[tuple[str, str, int | None], list[AppendedRun]] = {}
    for run in runs:
        joined.setdefault((run.folderKey, run.mailbox, run.uidValidity), []).append(run)
    if len(joined) > 1:
        keys: dict[str, set[str]] = {}
        for run in runs:
            keys.setdefault(run.folderKey, set()).update(run.keys)
        if sum(map(len, keys.values())) != sum(map(len, runs)):
            return [
                (shared, list(together))
                for shared, together in groupby(runs, _runShares)
            ]
    return list(joined.items())


def _runShares(run: AppendedRun) -> tuple[str, str, int | None]:
    """
    What the messages of C{run} share: their folder, mailbox and
    UIDVALIDITY.
    """
    return run.folderKey, run.mailbox, run.uidValidity


def _stretches(
    outcomes: Sequence[tuple[object, ...]],
) -> list[tuple[tuple[object, ...], list[tuple[object, ...]]]]:
    """
    C{outcomes} (L{AppendedOutcome}s) in stretches of one folder, mailbox
    and UIDVALIDITY (L{_perRun}), each with what it shares: a job's
    connections append into different folders at once, so a batch
    alternates between them a tagged reply at a time, and each stretch
    alone would be cut into several short statements.  So the stretches
    of one folder, mailbox and UIDVALIDITY are joined, in their order,
    unless a message is in the batch twice: then the stretches stay as
    they come, so that its later outcome is written last.
    """
    stretches = [(shared, list(rows)) for shared, rows in groupby(outcomes, _perRun)]
    if len(stretches) > 1:
        joined: dict[tuple[object, ...], list[tuple[object, ...]]] = {}
        for shared, rows in stretches:
            joined.setdefault(shared, []).extend(rows)
        if len(joined) < len(stretches) and len(set(map(_messageOf, outcomes))) == len(outcomes):
            return list(joined.items())
    return stretches


def _nameless(outcome: MessageOutcome) -> bool:
    """
    Whether C{outcome} carries none of the names of its message.
    """
    return (
        outcome.messageId is None
        and outcome.date is None
        and outcome.sender is None
        and outcome.subject is None
    )
