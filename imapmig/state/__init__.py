# -*- test-case-name: tests.test_state -*-
"""
The state store: every source message's outcome, every source folder's mark
for delta passes, the journal of batches in flight, and the timeline of
the job's states, per job.

One interface, L{IStateStore}; SQLite (L{imapmig.state.sqlite}) is the
embedded default, and an in-memory store (L{imapmig.state.memory}) is its
fake.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence, overload

from attrs import evolve, frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
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


@frozen
class OutcomeCounts:
    """
    How many messages of a job ended how, each counted by its latest
    outcome.

    @ivar copied: messages appended to the destination (in the destination,
        and not C{alreadyPresent}).
    @ivar alreadyPresent: messages found in the destination already, and
        not appended again.
    @ivar failed: messages whose latest outcome is a failure.
    @ivar lineEndingsConverted: messages in the destination whose bare LF
        line endings were converted to CRLF.
    @ivar withNotes: messages in the destination with a
        L{note<MessageOutcome.note>}.
    """

    copied: int
    alreadyPresent: int
    failed: int
    lineEndingsConverted: int
    withNotes: int


@frozen
class JobActivity:
    """
    What a job's records say of its work, for the summary of
    C{imapmig report}.

    @ivar copiedOctets: the octets of the messages copied (as sent).
    @ivar firstAt: when the first of the messages copied was recorded, in
        the store's clock's seconds (the epoch); L{None} for none.  (Not
        a failure's time: a later run records its failures again.)
    @ivar lastAt: when the last of them was, likewise.
    @ivar folders: how many source folders have a mark (were listed to
        the end by a run): with no outcome either, the job never ran.
    """

    copiedOctets: int
    firstAt: float | None
    lastAt: float | None
    folders: int


@frozen
class FolderMark:
    """
    Where a pass over one source folder got to, so that the next pass can
    ask only for what changed since (a delta pass).

    @ivar uidValidity: the source folder's UIDVALIDITY; when it changes,
        the mark no longer applies.
    @ivar uidNext: the source folder's UIDNEXT: every message with a lower
        UID was seen, but those of L{deferred}.
    @ivar highestModSeq: the source folder's HIGHESTMODSEQ (CONDSTORE), or
        L{None} if the source does not have one.
    @ivar messages: how many messages the folder held.
    @ivar deferred: UIDs below L{uidNext}, ascending, that the pass left
        undecided and the next pass lists again (a label view's deferred
        messages: L{imapmig.sources.labelviews}); usually none.
    """

    uidValidity: int
    uidNext: int
    highestModSeq: int | None
    messages: int
    deferred: tuple[int, ...] = ()


@frozen
class FolderFallback:
    """
    A destination folder created under a safe spelling because the server
    refused its name (L{imapmig.job.foldernames}).

    @ivar mailbox: the mailbox name the folder would have had.
    @ivar fallback: the mailbox it was created as, and messages go to.
    @ivar reason: the server's refusal of C{mailbox}.
    """

    mailbox: str
    fallback: str
    reason: str


@frozen
class FailuresPage:
    """
    One page of a job's failed messages.

    @ivar matched: how many failed messages match the filter, all pages;
        a lower bound when C{matchedExact} is false.
    @ivar items: the page's messages, ordered by folder key, then message
        key.
    @ivar matchedExact: whether C{matched} is the exact count: false when
        the job has more than L{FAILURES_COUNT_LIMIT} failed messages
        (C{matched} is then that limit), or, with a filter, more than
        L{FAILURES_SEARCH_ROWS} (C{matched} then counts the matches among
        the first of them).
    @ivar next: C{(folderKey, messageKey)} to give as C{after} for the
        next page, or L{None} when this page ends the failures.
    """

    matched: int
    items: tuple[MessageOutcome, ...]
    matchedExact: bool = True
    next: tuple[str, str] | None = None


FAILURES_COUNT_LIMIT = 10_000
"""
The most failed messages a page of failures counts or pages through
(C{offset + limit} beyond it returns no items): a status request costs the
reactor a bounded time (about 20 ms) whatever the size of the job.  The
audit manifest has them all.
"""

FAILURES_SEARCH_ROWS = 5_000
"""
The most failed messages a filtered page of failures searches: the first
ones, in folder then key order (about 25 ms per scan).
"""


PAUSED = "paused"
"""
The hold of a job the admin paused: not claimed until resumed.
"""

CANCELLED = "cancelled"
"""
The hold of a job the admin cancelled: never claimed again.
"""

HOLDS = (PAUSED, CANCELLED)
"""
Every hold a job can be under (L{JobHold.hold}).
"""


@frozen
class JobHold:
    """
    An admin's hold on a job, kept across restarts of the daemon.

    @ivar hold: L{PAUSED} or L{CANCELLED}.
    @ivar by: who asked (the client's address), if known.
    @ivar at: when it was recorded, in the store's clock's seconds (the
        epoch).
    """

    hold: str
    by: str | None
    at: float


@frozen
class Transition:
    """
    One change of a job's state, as the job's machine makes it: an entry
    of the job's timeline.

    @ivar time: when, in the machine's clock's seconds (the epoch).
    @ivar source: the state it left (an L{imapmig.progress.JobState}
        value; C{from} in JSON).
    @ivar target: the state it entered, likewise (C{to} in JSON).
    @ivar cause: why, in words (C{"paused by the admin"}, C{"login
        refused: ..."}, C{"retry 2 of 5 in 30 s: connection lost"}).
    @ivar by: who asked (the client's address), for a change an admin
        asked for; L{None} otherwise.
    """

    time: float
    source: str
    target: str
    cause: str
    by: str | None = None


TIMELINE_FIRST = 20
"""
How many of a job's first transitions its timeline keeps: how it began.
"""

TIMELINE_LATEST = 480
"""
How many of a job's latest transitions its timeline keeps besides the
first ones: a job that backs off for days does not grow the store
without bound; the ones in between are dropped as new ones come.
"""


def asciiLower(text: str) -> str:
    """
    C{text} with its ASCII letters in lower case, others as they are: the
    case folding SQLite's C{lower()} does, so that both stores filter
    alike.
    """
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def outcomeMatches(outcome: MessageOutcome, needle: str) -> bool:
    """
    Whether C{needle} (already L{asciiLower}ed) is in C{outcome}'s folder
    key, mailbox, message key, Message-ID, failure, From or Subject,
    ignoring ASCII case.
    An empty needle matches everything.
    """
    if not needle:
        return True
    return any(
        needle in asciiLower(text)
        for text in (
            outcome.folderKey,
            outcome.mailbox,
            outcome.messageKey,
            outcome.messageId,
            outcome.failure,
            outcome.sender,
            outcome.subject,
        )
        if text is not None
    )


class IStateStore(Interface):
    """
    Durable record of outcomes, folder marks, the journal of batches in
    flight, and each job's timeline.  Methods return Deferreds so that a networked store
    (PostgreSQL) fits the same interface.

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
        outcomes: Sequence[MessageOutcome | AppendedOutcome],
        settled: Sequence[int] = (),
    ) -> "Deferred[None]":
        """
        Record C{outcomes} for C{job} and delete the journal entries
        C{settled}, all in one transaction.  A later outcome for the same
        message replaces an earlier one (a message that failed once and was
        appended by a later run is recorded as appended), in C{outcomes}
        as in the store.

        @param outcomes: each a L{MessageOutcome}, or an L{AppendedOutcome}
            (the same, for a message appended with nothing to note).

        @param settled: the L{entryId<JournalEntry.entryId>}s of C{job}'s
            journal entries whose every message has an outcome (in
            C{outcomes} or recorded before); may be given with no
            C{outcomes}.  An id that is not an unsettled entry of C{job} is
            ignored, so settling twice is harmless.
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

    def failures(job: str) -> "Deferred[list[MessageOutcome]]":
        """
        The messages of C{job} whose latest outcome is a failure, ordered by
        folder key, then message key.
        """

    def failuresPage(
        job: str,
        offset: int,
        limit: int,
        contains: str = "",
        after: "tuple[str, str] | None" = None,
    ) -> "Deferred[FailuresPage]":
        """
        One page of the messages of C{job} whose latest outcome is a
        failure, in the order of L{failures}, at a bounded cost whatever
        the size of the job: only the first L{FAILURES_COUNT_LIMIT} failed
        messages are counted, a page reaches at most that far past its
        start, and with C{contains} a page searches at most
        L{FAILURES_SEARCH_ROWS} failed messages past its start and the
        count only the first ones (L{FailuresPage.matchedExact} tells).
        Deeper pages start from the previous page's L{FailuresPage.next}.

        @param offset: how many matching messages to skip (0 or more).
        @param limit: the most to return (1 or more).
        @param contains: only messages with this text in their folder key,
            mailbox, message key, Message-ID, failure, From or Subject,
            ignoring ASCII case; C{""} for all.
        @param after: start after this C{(folderKey, messageKey)} (a
            L{FailuresPage.next}); L{None} from the first failure.
        """

    def manifestOutcomes(
        job: str, after: "tuple[str, str] | None", limit: int
    ) -> "Deferred[list[MessageOutcome]]":
        """
        The next C{limit} (or fewer, at the end) messages of C{job} not
        copied by imapmig: whose latest outcome is a failure, or that were
        already present; ordered by folder key, then message key, from
        just after C{after}.  Paging by key, not offset: each page costs
        the same however far into the job it is, and a page is stable
        while outcomes are recorded meanwhile.

        @param after: C{(folderKey, messageKey)} of the last message of
            the previous page, or L{None} for the first page.
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

    def ping() -> "Deferred[None]":
        """
        Answer a trivial query: fires with L{None} if the store can read,
        fails (L{PermanentError}, L{TransientError}) if it cannot or is
        closed.  For health checks: cheap, no write.
        """

    def summary(job: str) -> "Deferred[tuple[int, int]]":
        """
        How many messages of C{job} are recorded as in the destination
        (appended or already present), and as failed.

        @return: a Deferred firing with C{(appended, failed)}.
        """

    def counts(job: str) -> "Deferred[OutcomeCounts]":
        """
        How many messages of C{job} were copied, were already present,
        failed, had their line endings converted, and carry a note, each by
        its latest outcome.
        """

    def activity(job: str) -> "Deferred[JobActivity]":
        """
        The octets C{job} copied, the span of time those copies were
        recorded in, and how many of its folders have a mark.
        """

    def notes(job: str) -> "Deferred[list[MessageOutcome]]":
        """
        The messages of C{job} whose latest outcome puts them in the
        destination with a L{note<MessageOutcome.note>}, ordered by folder
        key, then message key.
        """

    def destinationMap(job: str, folderKey: str) -> "Deferred[dict[str, MessageOutcome]]":
        """
        The latest outcome of every message of C{folderKey} that is in the
        destination for C{job} (appended, or already present), by message
        key.  Failed messages are left out.
        """

    def folderMark(job: str, folderKey: str) -> "Deferred[FolderMark | None]":
        """
        The mark recorded for C{folderKey} of C{job}, or L{None} if there is
        none.
        """

    def recordFolderMark(job: str, folderKey: str, mark: FolderMark) -> "Deferred[None]":
        """
        Record C{mark} for C{folderKey} of C{job} in one transaction,
        replacing any earlier mark.
        """

    def forgetFolder(job: str, folderKey: str) -> "Deferred[None]":
        """
        Delete the mark of C{folderKey} of C{job}, if any, so that the next
        pass over it is a full one.  Its messages' outcomes are kept.
        """

    def recordFolderFallback(job: str, fallback: FolderFallback) -> "Deferred[None]":
        """
        Record, in one transaction, that C{job}'s mailbox
        C{fallback.mailbox} lives under the name C{fallback.fallback},
        replacing an earlier record for that mailbox.
        """

    def folderFallbacks(job: str) -> "Deferred[list[FolderFallback]]":
        """
        The fallback names recorded for C{job}, by mailbox.
        """

    def recordJobFailure(job: str, reason: str | None) -> "Deferred[None]":
        """
        Record, in one transaction, that the latest run of C{job} failed
        as a whole because of C{reason} (a refused login, TLS refused,
        retries given up), replacing an earlier record; or, with L{None},
        that it completed, forgetting any record.
        """

    def jobFailure(job: str) -> "Deferred[str | None]":
        """
        Why the latest run of C{job} failed, as L{recordJobFailure}
        recorded it, or L{None} if no failure is recorded.
        """

    def recordJobHolds(
        jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> "Deferred[None]":
        """
        Record, in one transaction, that the admin put each of C{jobs}
        under C{hold}, replacing any hold they were under; or, with
        L{None}, that their holds were lifted.  The store stamps each with
        its clock's time.

        @param hold: L{PAUSED}, L{CANCELLED} or L{None}.
        @param by: who asked (the client's address), for the record.
        @raise ValueError: C{hold} is none of those (raised at once).
        """

    def jobHolds() -> "Deferred[dict[str, JobHold]]":
        """
        Every job's hold, by job name, jobs no longer configured included
        (the caller ignores those).
        """

    def recordTransition(job: str, transition: Transition) -> "Deferred[None]":
        """
        Add C{transition} at the end of C{job}'s timeline, in one
        transaction that does not wait for the disk (as outcomes are
        recorded); the timeline then keeps its first L{TIMELINE_FIRST} and
        its latest L{TIMELINE_LATEST} transitions, dropping those between.
        """

    def timeline(job: str) -> "Deferred[list[Transition]]":
        """
        The transitions kept of C{job}'s timeline, oldest first (in the
        order they were recorded); empty for a job with none.
        """

    def budgetUsed(server: str, user: str, direction: str, day: str) -> "Deferred[int]":
        """
        The octets recorded as moved for the account C{user} on C{server}
        in C{direction} on C{day}; 0 if none.

        @param direction: C{"upload"} (APPENDed into the account) or
            C{"download"} (FETCHed from it).
        @param day: the UTC day, C{"YYYY-MM-DD"}.
        """

    def addBudgetUse(
        server: str, user: str, direction: str, day: str, octets: int
    ) -> "Deferred[int]":
        """
        Add C{octets} to what L{budgetUsed} reports for the same arguments,
        in one transaction.  Records of earlier days may be dropped.

        @return: a Deferred firing with the new total.
        """

    def close() -> None:
        """
        Release the store; nothing is recorded afterwards.
        """


_log = Logger()


def transitionRecorder(store: IStateStore) -> Callable[[str, Transition], None]:
    """
    What a job's machine calls with each of its transitions to record it
    in C{store}'s timeline of the job (L{IStateStore.recordTransition}):
    a store that cannot record it (closed at shutdown, a full disk) is
    logged, once per transition, and the job goes on; the timeline is a
    record, not a condition of the migration.
    """

    def record(job: str, transition: Transition) -> None:
        def failed(failure: Failure) -> None:
            _log.error(
                "Could not record job {job}'s change from {source} to {target} in its"
                " timeline: {why}",
                job=job,
                source=transition.source,
                target=transition.target,
                why=str(failure.value),
            )

        store.recordTransition(job, transition).addErrback(failed)

    return record
