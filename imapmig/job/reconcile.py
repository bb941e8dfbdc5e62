# -*- test-case-name: tests.test_job_reconcile -*-
"""
Settling the in-flight journal against the destination, before anything
is sent again.

An entry of the journal is a unit of work that was being sent when the job
lost track of it (a lost connection, a crash): some, all or none of its
messages may be in the destination.  For each mailbox, the messages whose
UID is at least the entry's UID floor, under the same UIDVALIDITY, and not
held by a recorded outcome, are fetched back (size and the first
L{JOURNAL_HEAD_OCTETS} octets: about a kilobyte each, never a body).  The
journaled messages are then read again from the source, in the order they
were sent, a batch at a time, and matched by their size and head digest as
sent; reading stops as soon as every candidate is matched (a connection's
messages arrive in the order it sent them, so what arrived is a prefix).  A
match is recorded as appended with its UID; the others are left
unrecorded, so the job lists them as still to copy.  This never depends on
the job's identity check: it holds with C{identity: off}.

A message missing is not yet a message lost: the server may still be
working through the commands it had read when the connection ended (Dovecot
goes on with them after the client's close, storing each), and what is
sent again would then be held twice.  So while journaled messages are
missing, the mailbox is looked at again after each quiet period (the
caller's C{settle}: the destination server's C{timeout}, the longest the
job lets a live server go without a reply); only once a period brought
none of them are the rest taken as lost.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Sequence

from twisted.logger import Logger

from imapmig.errors import CommandFailed
from imapmig.mail.fidelity import JOURNAL_HEAD_OCTETS, journalHead
from imapmig.imap.mailboxes import ExaminedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.state import IStateStore, JournalEntry, JournalMessage, MessageOutcome

log = Logger()

_ITEMS = b"UID RFC822.SIZE BODY.PEEK[]<0.%d>" % JOURNAL_HEAD_OCTETS
_HEAD_SECTION = b"BODY[]<0>"


@dataclass(frozen=True)
class Candidate:
    """
    A destination message that may be one of the journaled ones.
    """

    uid: int
    size: int
    head: bytes


class CandidatePool:
    """
    The destination messages that may be journaled ones, each to be taken
    once, by size and head digest, the lowest UID at or above a floor
    first.
    """

    def __init__(self, candidates: Iterable[Candidate] = ()) -> None:
        self._byIdentity: dict[tuple[int, bytes], list[int]] = {}
        self.remaining = 0
        self.add(candidates)

    def add(self, candidates: Iterable[Candidate]) -> None:
        """
        Add C{candidates} (messages that arrived since) to the pool.
        """
        for candidate in candidates:
            insort(self._byIdentity.setdefault((candidate.size, candidate.head), []), candidate.uid)
            self.remaining += 1

    def take(self, size: int, head: bytes, floor: int) -> int | None:
        """
        The UID of an unclaimed candidate of this size and head at or above
        C{floor}, now claimed; or L{None}.
        """
        uids = self._byIdentity.get((size, head))
        if not uids:
            return None
        at = bisect_left(uids, floor)
        if at == len(uids):
            return None
        self.remaining -= 1
        return uids.pop(at)


def matchArrivals(
    entries: Sequence[JournalEntry], candidates: Iterable[Candidate]
) -> dict[tuple[str, str], int]:
    """
    Which journaled messages arrived, and under which UID.

    Entries are taken in the order they were written and their messages in
    the order they were sent; each takes the lowest unclaimed candidate of
    its size and head digest at or above its entry's UID floor.  Each
    candidate answers for one message at most: two identical messages sent
    need two copies.

    @param entries: the journal entries of one mailbox, all under the
        mailbox's current UIDVALIDITY, each message with its size and head
        as sent.
    @param candidates: the mailbox's messages at or above the lowest floor
        that no recorded outcome holds.
    @return: by C{(folderKey, messageKey)}, the UID of its copy.
    """
    pool = CandidatePool(candidates)
    arrived: dict[tuple[str, str], int] = {}
    for entry in sorted(entries, key=lambda e: e.entryId):
        floor = entry.uidFloor or 0
        for message in entry.messages:
            uid = pool.take(message.size, message.head, floor)
            if uid is not None:
                arrived[(message.folderKey, message.messageKey)] = uid
    return arrived


MeasureSent = Callable[[str, Sequence[str]], Awaitable[dict[str, tuple[int, bytes]]]]
"""
Reads messages of a source folder again: given the folder's key and
message keys, their size and head digest as they are sent
(L{journalHead}), by key; a message the source no longer has, or cannot
read, is left out.
"""

# Journaled messages read again from the source at a time.
_MEASURE_BATCH = 50


@dataclass
class Reconciliation:
    """
    What reconciling the journal found.

    @ivar arrived: journaled messages found in the destination (recorded
        as appended).
    @ivar missing: journaled messages not there, to be sent again, by
        mailbox, in the order they were sent.
    """

    arrived: int = 0
    missing: dict[str, list[JournalMessage]] = field(default_factory=dict)


async def reconcileJournal(
    jobName: str,
    session: IMAPSession,
    store: IStateStore,
    entries: Sequence[JournalEntry],
    measure: MeasureSent,
    settle: Callable[[], Awaitable[object]] | None = None,
) -> Reconciliation:
    """
    Settle C{entries} against the destination over C{session}, record the
    messages found there, and delete the entries, in one transaction.

    @param measure: reads journaled messages again from the source.
    @param settle: waits one quiet period: while journaled messages of a
        mailbox are missing, the mailbox is looked at again after each
        such wait, until one brings none of them (the server may still be
        storing what a connection that ended had sent).  L{None}: look
        once.

    @raise ImapmigError: the destination or the store failed; the journal
        is then left as it was, for the next attempt.
    """
    byMailbox: dict[str, list[JournalEntry]] = {}
    for entry in entries:
        byMailbox.setdefault(entry.mailbox, []).append(entry)
    recordedByFolder: dict[str, dict[str, MessageOutcome]] = {}
    looks: list[tuple[str, list[_Pending], _Found]] = []
    for mailbox, mailboxEntries in byMailbox.items():
        pending = await _journaled(jobName, store, mailboxEntries, recordedByFolder)
        if any(not p.known for p in pending):
            found = await _arrivals(jobName, session, store, mailbox, pending, measure)
            looks.append((mailbox, pending, found))
    if settle is not None:
        await _settle(jobName, session, [found for _, _, found in looks], measure, settle)
    result = Reconciliation()
    outcomes: list[MessageOutcome] = []
    undecided: set[int] = set()
    for mailbox, pending, found in looks:
        outcomes.extend(_decided(mailbox, pending, found, result))
        undecided |= found.undecided
    settled = [e.entryId for e in entries if e.entryId not in undecided]
    await store.recordOutcomes(jobName, outcomes, settled=settled)
    _logReconciled(jobName, entries, result, undecided)
    return result


def _logReconciled(
    jobName: str, entries: Sequence[JournalEntry], result: Reconciliation, undecided: set[int]
) -> None:
    """
    Log what reconciling C{entries} found, and the entries kept.
    """
    log.info(
        "Job {job}: reconciled {count} journaled messages (being sent when the last"
        " run or connection ended): {arrived} had arrived, {missing} will be sent again",
        job=jobName,
        count=sum(len(e.messages) for e in entries),
        arrived=result.arrived,
        missing=sum(len(m) for m in result.missing.values()),
    )
    if undecided:
        log.warn(
            "Job {job}: {count} journal entries kept: some of their messages could not be"
            " read again from the source to be recognised (a folder that cannot be listed);"
            " they are reconciled again on the next attempt",
            job=jobName,
            count=len(undecided),
        )


async def _journaled(
    jobName: str,
    store: IStateStore,
    entries: Sequence[JournalEntry],
    recordedByFolder: dict[str, dict[str, MessageOutcome]],
) -> list[_Pending]:
    """
    The journaled messages of one mailbox's C{entries} to recognise, in
    the order sent: those without an outcome, and those with one but no
    UID (a server without UIDPLUS), which must claim their copy first
    lest another message take it for its own.

    @param recordedByFolder: the store's records, by folder key, read
        once per folder and kept here.
    """
    pending: list[_Pending] = []
    for entry in entries:
        for message in entry.messages:
            recorded = recordedByFolder.get(message.folderKey)
            if recorded is None:
                recorded = recordedByFolder[message.folderKey] = await store.destinationMap(
                    jobName, message.folderKey
                )
            outcome = recorded.get(message.messageKey)
            if outcome is None or outcome.uid is None:
                pending.append(_Pending(entry, message, outcome is not None))
    return pending


async def _settle(
    jobName: str,
    session: IMAPSession,
    looks: Sequence[_Found],
    measure: MeasureSent,
    settle: Callable[[], Awaitable[object]],
) -> None:
    """
    Look at the mailboxes again after each quiet period while it brings
    journaled messages still missing to any of them.

    The server may still be storing what a connection that ended had
    sent (it goes on with the commands it had read when the connection
    closed, as Dovecot does): a message missing now could arrive after
    it is sent again, and be held twice.  A server session stores in the
    order sent, into one mailbox or another, each message under a UID
    above those seen; so wait as long as each quiet period brings
    journaled messages to any of the mailboxes, and take what is still
    missing as lost only after one brought none anywhere.
    """
    while waiting := [found for found in looks if found.missing()]:
        log.info(
            "Job {job}: {count} journaled messages are not in the destination (yet);"
            " waiting for what the server may still be storing from a connection"
            " that ended",
            job=jobName,
            count=sum(found.missing() for found in waiting),
        )
        await settle()
        gained = 0
        for found in waiting:
            gained += await _lookAgain(session, found, measure)
        if not gained:
            return


def _decided(
    mailbox: str, pending: Sequence[_Pending], found: _Found, result: Reconciliation
) -> list[MessageOutcome]:
    """
    The outcomes of C{mailbox}'s journaled messages without one that
    arrived; count them in C{result}, and add those that did not to its
    C{missing}, in the order sent.
    """
    outcomes: list[MessageOutcome] = []
    for each in pending:
        if each.known:
            continue
        message = each.message
        arrival = found.arrived.get((message.folderKey, message.messageKey))
        if arrival is None:
            result.missing.setdefault(mailbox, []).append(message)
            continue
        result.arrived += 1
        uid, size = arrival
        outcomes.append(
            MessageOutcome(
                message.folderKey, message.messageKey, mailbox, size, found.uidValidity, uid
            )
        )
    return outcomes


@dataclass(frozen=True)
class _Pending:
    """
    A journaled message to recognise.

    @ivar known: it already has an outcome (without a UID): it claims its
        copy, and nothing is recorded for it.
    """

    entry: JournalEntry
    message: JournalMessage
    known: bool


@dataclass
class _Found:
    """
    What the destination showed of one mailbox's journaled messages.

    @ivar arrived: by C{(folderKey, messageKey)}, the UID and size of its
        copy.
    @ivar uidValidity: the mailbox's UIDVALIDITY.
    @ivar undecided: entries some of whose messages could not be measured
        while copies were still unaccounted for: not to be settled.
    @ivar mailbox: the mailbox.
    @ivar held: the UIDs of its recorded outcomes, at or above the floor.
    @ivar seen: the highest UID looked at: a new look starts above it.
    @ivar pool: its messages not claimed yet.
    @ivar sizes: what the source said of each journaled message measured so
        far (L{_claim}).
    @ivar unmatched: the journaled messages without a copy yet, in the
        order sent; empty when nothing more can come (no such mailbox, a
        new UIDVALIDITY).
    """

    arrived: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    uidValidity: int | None = None
    undecided: set[int] = field(default_factory=set)
    mailbox: str = ""
    held: set[int] = field(default_factory=set)
    seen: int = 0
    pool: CandidatePool = field(default_factory=CandidatePool)
    sizes: dict[tuple[str, str], tuple[int, bytes] | None] = field(default_factory=dict)
    unmatched: list[_Pending] = field(default_factory=list)

    def missing(self) -> int:
        """
        How many of the journaled messages without an outcome have not
        been found (yet).
        """
        return sum(1 for p in self.unmatched if not p.known)


# Response codes of an EXAMINE refusal that mean the mailbox is not there
# (so nothing of what was sent to it is there either).
_ABSENT = frozenset({"NONEXISTENT", "TRYCREATE"})


async def _arrivals(
    jobName: str,
    session: IMAPSession,
    store: IStateStore,
    mailbox: str,
    pending: Sequence[_Pending],
    measure: MeasureSent,
) -> _Found:
    """
    Which of the messages journaled for C{mailbox} (C{pending}, in the
    order they were sent) are there, at a first look.

    @raise CommandFailed: the server refused to EXAMINE the mailbox for a
        reason other than its absence: the journal stays as it is.
    """
    found = _Found(mailbox=mailbox)
    examined = await _examined(jobName, session, mailbox)
    if examined is None:
        return found
    uidValidity = found.uidValidity = examined.uidValidity
    valid = _sameValidity(jobName, mailbox, pending, uidValidity)
    if not valid:
        return found
    floor = max(1, min(p.entry.uidFloor or 1 for p in valid))
    held: set[int] = set()
    if uidValidity is not None:
        held = await store.recordedUIDs(jobName, mailbox, uidValidity, floor)
    found.held = held
    found.seen = floor - 1
    if examined.exists:
        candidates, found.seen = await _candidates(session, floor, held)
        found.pool.add(candidates)
    found.unmatched = await _claim(found.pool, valid, measure, found.sizes, found)
    return found


async def _examined(jobName: str, session: IMAPSession, mailbox: str) -> ExaminedMailbox | None:
    """
    EXAMINE C{mailbox}; L{None} (logged) if it is not in the destination,
    so that nothing of what was sent to it is there either.

    @raise CommandFailed: the server refused to EXAMINE it for another
        reason.
    """
    try:
        return await session.examine(mailbox)
    except CommandFailed as e:
        if e.code not in _ABSENT:
            raise
        log.warn(
            "Job {job}: {mailbox!r} is not in the destination ({why}); its messages"
            " in flight will be sent again",
            job=jobName,
            mailbox=mailbox,
            why=e.text,
        )
        return None


def _sameValidity(
    jobName: str, mailbox: str, pending: Sequence[_Pending], uidValidity: int | None
) -> list[_Pending]:
    """
    Those of C{pending} sent under the mailbox's current C{uidValidity}
    (or under an unknown one); the others, sent before it changed, are
    sent again, and that is logged.
    """
    valid = [p for p in pending if p.entry.uidValidity in (None, uidValidity)]
    if len(valid) < len(pending):
        log.warn(
            "Job {job}: {mailbox!r} has a new UIDVALIDITY since messages were sent to"
            " it; those messages will be sent again",
            job=jobName,
            mailbox=mailbox,
        )
    return valid


async def _lookAgain(session: IMAPSession, found: _Found, measure: MeasureSent) -> int:
    """
    Look at C{found}'s mailbox again: let its journaled messages still
    missing claim the messages that arrived since the last look.

    @return: how many of them claimed one.
    """
    # EXAMINE again, not NOOP: the mailbox is opened afresh, with every
    # message other sessions stored by now.
    again = await session.examine(found.mailbox)
    if again.uidValidity != found.uidValidity:
        found.unmatched = []
        return 0
    if not again.exists or (again.uidNext is not None and again.uidNext <= found.seen + 1):
        return 0
    arrivals, found.seen = await _candidates(session, found.seen + 1, found.held)
    before = len(found.arrived)
    found.pool.add(arrivals)
    found.unmatched = await _claim(found.pool, found.unmatched, measure, found.sizes, found)
    return len(found.arrived) - before


async def _candidates(
    session: IMAPSession, floor: int, held: set[int]
) -> tuple[list[Candidate], int]:
    """
    The messages of the mailbox open on C{session} at or above UID
    C{floor}, but those in C{held} (the UIDs of recorded outcomes).

    @return: those messages, and the highest UID at or above C{floor}
        that was looked at (C{floor - 1} if none).
    """
    candidates = []
    seen = floor - 1
    for item in await session.fetchMetadata(b"%d:*" % floor, _ITEMS):
        uid = item.uid
        if uid is None or uid < floor:
            continue
        seen = max(seen, uid)
        if uid in held or item.size is None:
            continue
        start = item.sections.get(_HEAD_SECTION) or b""
        candidates.append(Candidate(uid, item.size, journalHead(start)))
    return candidates, seen


async def _claim(
    pool: CandidatePool,
    pending: Sequence[_Pending],
    measure: MeasureSent,
    sizes: dict[tuple[str, str], tuple[int, bytes] | None],
    found: _Found,
) -> list[_Pending]:
    """
    Let each of C{pending}, in the order sent, claim its copy from
    C{pool}; record the claims in C{found}.

    @param sizes: what the source said of each message measured so far
        (size and head digest, or L{None} if it could not be read), by
        C{(folderKey, messageKey)}: filled in as messages are measured,
        each once.
    @return: those of C{pending} that claimed no copy, in the order sent.
    """
    unmatched: list[_Pending] = []
    for offset in range(0, len(pending), _MEASURE_BATCH):
        batch = pending[offset : offset + _MEASURE_BATCH]
        if not pool.remaining:
            unmatched.extend(batch)
            continue
        await _measure(batch, measure, sizes)
        for each in batch:
            message = each.message
            sent = sizes[(message.folderKey, message.messageKey)]
            if sent is None:
                if pool.remaining:
                    found.undecided.add(each.entry.entryId)
                unmatched.append(each)
                continue
            uid = pool.take(sent[0], sent[1], each.entry.uidFloor or 0)
            if uid is None:
                unmatched.append(each)
            elif not each.known:
                found.arrived[(message.folderKey, message.messageKey)] = (uid, sent[0])
    return unmatched


async def _measure(
    batch: Sequence[_Pending],
    measure: MeasureSent,
    sizes: dict[tuple[str, str], tuple[int, bytes] | None],
) -> None:
    """
    Read again from the source the messages of C{batch} not measured yet,
    folder by folder, into C{sizes} (L{None} for one it cannot read).
    """
    unmeasured: dict[str, list[str]] = {}
    for each in batch:
        key = (each.message.folderKey, each.message.messageKey)
        if key not in sizes:
            unmeasured.setdefault(key[0], []).append(key[1])
    for folderKey, keys in unmeasured.items():
        measured = await measure(folderKey, keys)
        for messageKey in keys:
            sizes[(folderKey, messageKey)] = measured.get(messageKey)
