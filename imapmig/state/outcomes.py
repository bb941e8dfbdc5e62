# -*- test-case-name: tests.test_state,tests.test_state_journal,tests.test_state_contract -*-
"""
What the store records of each source message: its outcome
(L{MessageOutcome}), and the journal of batches in flight
(L{JournalEntry}); and L{IOutcomeJournal}, the store's role that writes
and reads them for the job's run.

Taken out of C{imapmig/state/__init__.py}, which held every role of the
store in one 25-method interface.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any, Iterable, NamedTuple, Sequence, overload

from attrs import evolve, frozen
from twisted.internet.defer import Deferred
from zope.interface import Interface


@frozen
class MessageOutcome:
    """
    What became of one source message.

    @ivar folderKey: the source folder's key (L{imapmig.mail.message.SourceFolder.key}).
    @ivar messageKey: the message's key within that folder.
    @ivar mailbox: the destination mailbox name (decoded).
    @ivar size: octets sent (after CRLF conversion), or the source size if
        it was never sent.
    @ivar uidValidity: the destination mailbox's UIDVALIDITY from
        C{APPENDUID}, if the server has UIDPLUS; for a message that was
        C{alreadyPresent}, that of the destination's copy, when known.
    @ivar uid: the message's UID in the destination, likewise.
    @ivar failure: L{None} when the message is in the destination (appended,
        or found there already); otherwise why not, with the server's text
        verbatim where the server refused it.
    @ivar note: what was not carried over exactly although the message is
        in the destination (for instance C{"keyword 'two words' dropped:
        not a valid IMAP keyword"}), or L{None} if nothing was lost.
    @ivar alreadyPresent: the message was found in the destination by its
        identity, and was not appended again.  Meaningful only when
        C{failure} is L{None}.
    @ivar lineEndingsConverted: bare LF line endings were converted to CRLF
        before the message was sent.
    @ivar messageId: the message's C{Message-ID} header (unfolded, at most
        L{MESSAGE_ID_LENGTH} characters), recorded for a message that
        failed or was already present, when the job read its header; for
        the audit manifest.  L{None} for appended messages, and when not
        known.
    @ivar date: the message's C{Date} header as written (unfolded, at most
        L{NAME_LENGTH} characters), recorded like C{messageId}.
    @ivar sender: its C{From} header, decoded from RFC 2047, likewise.
    @ivar subject: its C{Subject} header, decoded from RFC 2047, likewise.
    """

    folderKey: str
    messageKey: str
    mailbox: str
    size: int
    uidValidity: int | None = None
    uid: int | None = None
    failure: str | None = None
    note: str | None = None
    alreadyPresent: bool = False
    lineEndingsConverted: bool = False
    messageId: str | None = None
    date: str | None = None
    sender: str | None = None
    subject: str | None = None

    @property
    def appended(self) -> bool:
        """
        Whether the message is in the destination (appended by us, or
        C{alreadyPresent}).
        """
        return self.failure is None


MESSAGE_ID_LENGTH = 998
"""
The longest C{Message-ID} recorded: a header line's limit (RFC 5322); a
longer one is cut.
"""


NAME_LENGTH = 256
"""
The most characters of a message's Date, From or Subject recorded; a
longer one is cut (its last character then C{…}).
"""


@frozen
class MessageNames:
    """
    What a message's owner knows it by, read from its header
    (L{imapmig.mail.messagenames}) for a message not migrated; each L{None}
    when the header has no such field or was not read.
    """

    messageId: str | None = None
    date: str | None = None
    sender: str | None = None
    subject: str | None = None

    def __bool__(self) -> bool:
        return any((self.messageId, self.date, self.sender, self.subject))


def withNames(outcome: MessageOutcome, names: MessageNames) -> MessageOutcome:
    """
    C{outcome} with the fields of C{names}.
    """
    return evolve(
        outcome,
        messageId=names.messageId,
        date=names.date,
        sender=names.sender,
        subject=names.subject,
    )


AppendedOutcome = tuple[str, str, str, int, "int | None", "int | None", int]
"""
The outcome of a message appended with nothing to note, as the hot path
records it: C{(folderKey, messageKey, mailbox, size, uidValidity, uid,
lineEndingsConverted)}, the last C{1} or C{0}; the same as a
L{MessageOutcome} with those fields (no failure, no note, not
C{alreadyPresent}).  A plain tuple: one is made per message appended, and
a tuple is made and read in a fraction of the time of an attrs instance.
"""


class AppendedRun:
    """
    The outcomes of messages appended with nothing to note, all of one
    folder, mailbox and UIDVALIDITY (a tagged reply's worth, as the hot
    path records them), as columns: the same as one L{AppendedOutcome} per
    message, in order, with nothing made per message (the SQLite store
    binds the columns as they are, L{imapmig.state._sqloutcomes}).

    @ivar keys: the messages' keys.
    @ivar sizes: their sizes as sent, in the same order.
    @ivar uids: their UIDs, or L{None} if the server gave none.
    @ivar converted: for each, C{1} if its line endings were converted,
        else C{0}.
    """

    __slots__ = ("folderKey", "mailbox", "uidValidity", "keys", "sizes", "uids", "converted")

    def __init__(
        self,
        folderKey: str,
        mailbox: str,
        uidValidity: int | None,
        keys: Sequence[str],
        sizes: Sequence[int],
        uids: Sequence[int] | None,
        converted: Sequence[int],
    ) -> None:
        self.folderKey = folderKey
        self.mailbox = mailbox
        self.uidValidity = uidValidity
        self.keys = keys
        self.sizes = sizes
        self.uids = uids
        self.converted = converted

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"<AppendedRun {self.outcomes()!r}>"

    def outcomes(self) -> list[AppendedOutcome]:
        """
        The same, one L{AppendedOutcome} per message.
        """
        uids: Iterable[int | None] = repeat(None) if self.uids is None else self.uids
        folderKey, mailbox, uidValidity = self.folderKey, self.mailbox, self.uidValidity
        return [
            (folderKey, key, mailbox, size, uidValidity, uid, converted)
            for key, size, uid, converted in zip(self.keys, self.sizes, uids, self.converted)
        ]


def flatOutcomes(
    outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun],
) -> list[MessageOutcome | AppendedOutcome]:
    """
    C{outcomes} with each L{AppendedRun} as its L{AppendedOutcome}s, in
    order.
    """
    flat: list[MessageOutcome | AppendedOutcome] = []
    for outcome in outcomes:
        if isinstance(outcome, AppendedRun):
            flat.extend(outcome.outcomes())
        else:
            flat.append(outcome)
    return flat


def asMessageOutcome(outcome: MessageOutcome | AppendedOutcome) -> MessageOutcome:
    """
    The L{MessageOutcome} of C{outcome}, which may be an L{AppendedOutcome}.
    """
    if isinstance(outcome, MessageOutcome):
        return outcome
    folderKey, messageKey, mailbox, size, uidValidity, uid, converted = outcome
    return MessageOutcome(
        folderKey, messageKey, mailbox, size, uidValidity, uid,
        lineEndingsConverted=bool(converted),
    )  # fmt: skip


class JournalMessage(NamedTuple):
    """
    One message of a batch in flight, as the journal records it.  A named
    tuple rather than an attrs class: one is made per message sent, on the
    hot path, and a tuple is made in a third of the time.

    @ivar folderKey: the source folder's key (L{imapmig.mail.message.SourceFolder.key}).
    @ivar messageKey: the message's key within that folder.
    @ivar size: octets as sent.
    @ivar head: a short digest (at most 255 octets; the job passes 4) of
        the first octets as sent, to recognise the message in the
        destination.
    """

    folderKey: str
    messageKey: str
    size: int
    head: bytes


class FolderKeys(Sequence[JournalMessage]):
    """
    A unit's messages for the journal as the job hands them over: one
    folder's message keys, without sizes or heads (reconciling reads the
    source again for those).  A sequence of L{JournalMessage}s to whoever
    reads it, but packed in one step (L{imapmig.state._packing}): nothing
    is made per message on the hot path.
    """

    __slots__ = ("folderKey", "keys")

    def __init__(self, folderKey: str, keys: Sequence[str]) -> None:
        self.folderKey = folderKey
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> JournalMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[JournalMessage]: ...

    def __getitem__(self, index: int | slice) -> JournalMessage | Sequence[JournalMessage]:
        if isinstance(index, slice):
            return FolderKeys(self.folderKey, self.keys[index])
        return JournalMessage(self.folderKey, self.keys[index], 0, b"")


@frozen
class JournalEntry:
    """
    A batch of messages that was about to be sent to the destination and
    has not been settled since: some or all of its messages may be stored
    there without an outcome recorded.

    @ivar entryId: assigned by the store, increasing in write order and
        never reused.
    @ivar mailbox: the destination mailbox (decoded).
    @ivar uidValidity: the destination mailbox's UIDVALIDITY when the batch
        was sent, if known.
    @ivar uidFloor: any message of the batch that was stored has a UID of
        at least this (the UIDNEXT seen before sending), if known.
    @ivar messages: the batch's messages, in the order they were sent.
    """

    entryId: int
    mailbox: str
    uidValidity: int | None
    uidFloor: int | None
    messages: tuple[JournalMessage, ...]


class IOutcomeJournal(Interface):
    """
    The outcomes of the job's messages, and the journal of batches in
    flight: what a run writes as it copies, and reads to know what is
    copied already.

    The journal makes copying exactly-once without recognising content:
    a batch is journaled (L{journalBatch}) before it leaves, and settled in
    the transaction that records its messages' outcomes
    (L{recordOutcomes}'s C{settled}); after a crash or a lost connection
    the entries still in L{journal} are the batches whose fate the
    destination alone knows, to be reconciled against it (with
    L{recordedUIDs}, the UIDs above an entry's floor that are accounted
    for already) before anything is sent again.
    """

    def appendedKeys(job: str, folderKey: str) -> "Deferred[set[str]]":
        """
        The keys of the messages of C{folderKey} recorded as in the
        destination for C{job} (appended, or already present).
        """

    def recordOutcomes(
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun],
        settled: Sequence[int] = (),
    ) -> "Deferred[None]":
        """
        Record C{outcomes} for C{job} and delete the journal entries
        C{settled}, all in one transaction.  A later outcome for the same
        message replaces an earlier one (a message that failed once and was
        appended by a later run is recorded as appended), in C{outcomes}
        as in the store.

        @param outcomes: each a L{MessageOutcome}, or an L{AppendedOutcome}
            (the same, for a message appended with nothing to note), or an
            L{AppendedRun} (a run of those).

        @param settled: the L{entryId<JournalEntry.entryId>}s of C{job}'s
            journal entries whose every message has an outcome (in
            C{outcomes} or recorded before); may be given with no
            C{outcomes}.  An id that is not an unsettled entry of C{job} is
            ignored, so settling twice is harmless.
        """

    def checkpoint() -> "Deferred[None]":
        """
        Most of what a job writes is written, and the job waits for its
        last replies (L{imapmig.job.recording.OutcomeRecorder.ending}): a
        moment to move what the store wrote into its files (SQLite copies
        its write-ahead log into the database file, so that its close
        has little left to copy and sync).  A hint only: what is recorded
        is as durable before as after.

        @return: fires with L{None} once done; never fails.
        """

    def journalBatch(
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> "Deferred[int]":
        """
        Record, in one durable transaction, that C{messages} are about to be
        sent to C{mailbox} for C{job}.  The entry stays in the journal until
        a L{recordOutcomes} settles it.

        @param uidValidity: see L{JournalEntry.uidValidity}.
        @param uidFloor: see L{JournalEntry.uidFloor}.

        @return: a Deferred firing with the new entry's
            L{entryId<JournalEntry.entryId>} once it is recorded; if it
            fails, the batch must not be sent.
        """

    def journal(job: str) -> "Deferred[list[JournalEntry]]":
        """
        The unsettled journal entries of C{job}, by
        L{entryId<JournalEntry.entryId>}.
        """

    def recordedUIDs(job: str, mailbox: str, uidValidity: int, fromUID: int) -> "Deferred[set[int]]":
        """
        The destination UIDs, at least C{fromUID}, that the latest outcomes
        of C{job}'s messages hold in C{mailbox} with C{uidValidity}
        (appended, or already present).
        """

    def destinationMap(job: str, folderKey: str) -> "Deferred[dict[str, MessageOutcome]]":
        """
        The latest outcome of every message of C{folderKey} that is in the
        destination for C{job} (appended, or already present), by message
        key.  Failed messages are left out.
        """

    def destinationMaps(
        job: str, folderKeys: "Sequence[str]"
    ) -> "Deferred[dict[str, dict[str, MessageOutcome]]]":
        """
        L{destinationMap} of each of C{folderKeys} (an empty map for a
        folder with none), read at once: what a job's listing asks of
        all its folders before it copies.
        """

    def nameMessages(
        job: str, names: "Sequence[tuple[str, str, MessageNames]]"
    ) -> "Deferred[None]":
        """
        Record what the owners know messages of C{job} by, each given as
        C{(folderKey, messageKey, names)}, for those whose latest outcome
        is a failure (the others are left as they are): their header was
        read after the failure was recorded (L{imapmig.job.naming}).
        """


OUTCOME_COLUMNS = (
    "folder_key, message_key, mailbox, size, uidvalidity, uid, failure,"
    " note, present, converted, message_id, message_date, message_from, message_subject"
)
"""
The columns a stored outcome is read from, in the order L{outcomeOf} takes.
"""

OUTCOME_UPSERT = "ON CONFLICT (job, folder_key, message_key) DO UPDATE SET " + ", ".join(
    f"{column} = excluded.{column}"
    for column in OUTCOME_COLUMNS.replace(" ", "").split(",")[2:] + ["updated_at"]
)
"""
How an outcome written again replaces the one stored (both stores' upserts
of C{messages}): every column but its key.
"""


def outcomeOf(row: Sequence[Any]) -> MessageOutcome:
    """
    The L{MessageOutcome} of a row of L{OUTCOME_COLUMNS} (the SQLite and the PostgreSQL store's).
    """
    (
        folderKey, messageKey, mailbox, size, uidValidity, uid, failure, note, present,
        converted, messageId, date, sender, subject,
    ) = row  # fmt: skip
    return MessageOutcome(
        folderKey=folderKey,
        messageKey=messageKey,
        mailbox=mailbox,
        size=size,
        uidValidity=uidValidity,
        uid=uid,
        failure=failure,
        note=note,
        alreadyPresent=bool(present),
        lineEndingsConverted=bool(converted),
        messageId=messageId,
        date=date,
        sender=sender,
        subject=subject,
    )
