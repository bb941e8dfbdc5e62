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
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Sequence

from twisted.logger import Logger

from imapmig.errors import CommandFailed
from imapmig.fidelity import JOURNAL_HEAD_OCTETS, journalHead
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

    def __init__(self, candidates: Iterable[Candidate]) -> None:
        self._byIdentity: dict[tuple[int, bytes], list[int]] = {}
        self.remaining = 0
        for candidate in candidates:
            self._byIdentity.setdefault((candidate.size, candidate.head), []).append(
                candidate.uid
            )
            self.remaining += 1
        for uids in self._byIdentity.values():
            uids.sort()

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
) -> Reconciliation:
    """
    Settle C{entries} against the destination over C{session}, record the
    messages found there, and delete the entries, in one transaction.

    @param measure: reads journaled messages again from the source.

    @raise ImapmigError: the destination or the store failed; the journal
        is then left as it was, for the next attempt.
    """
    result = Reconciliation()
    outcomes: list[MessageOutcome] = []
    undecided: set[int] = set()
    byMailbox: dict[str, list[JournalEntry]] = {}
    for entry in entries:
        byMailbox.setdefault(entry.mailbox, []).append(entry)
    recordedByFolder: dict[str, dict[str, MessageOutcome]] = {}
    for mailbox, mailboxEntries in byMailbox.items():
        # In the order sent: the messages without an outcome, and those
        # with one but no UID (a server without UIDPLUS), which must claim
        # their copy first lest another message take it for its own.
        pending: list[_Pending] = []
        for entry in mailboxEntries:
            for message in entry.messages:
                recorded = recordedByFolder.get(message.folderKey)
                if recorded is None:
                    recorded = recordedByFolder[message.folderKey] = await store.destinationMap(
                        jobName, message.folderKey
                    )
                outcome = recorded.get(message.messageKey)
                if outcome is None:
                    pending.append(_Pending(entry, message, False))
                elif outcome.uid is None:
                    pending.append(_Pending(entry, message, True))
        if not any(not p.known for p in pending):
            continue
        found = await _arrivals(jobName, session, store, mailbox, pending, measure)
        undecided |= found.undecided
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
    settled = [e.entryId for e in entries if e.entryId not in undecided]
    await store.recordOutcomes(jobName, outcomes, settled=settled)
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
    return result


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
    """

    arrived: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    uidValidity: int | None = None
    undecided: set[int] = field(default_factory=set)


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
    order they were sent) are there.

    @raise CommandFailed: the server refused to EXAMINE the mailbox for a
        reason other than its absence: the journal stays as it is.
    """
    found = _Found()
    try:
        examined = await session.examine(mailbox)
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
        return found
    uidValidity = found.uidValidity = examined.uidValidity
    valid = [p for p in pending if p.entry.uidValidity is None or p.entry.uidValidity == uidValidity]
    if len(valid) < len(pending):
        log.warn(
            "Job {job}: {mailbox!r} has a new UIDVALIDITY since messages were sent to"
            " it; those messages will be sent again",
            job=jobName,
            mailbox=mailbox,
        )
    if not valid or not examined.exists:
        return found
    floor = max(1, min(p.entry.uidFloor or 1 for p in valid))
    held: set[int] = set()
    if uidValidity is not None:
        held = await store.recordedUIDs(jobName, mailbox, uidValidity, floor)
    candidates = []
    for item in await session.fetchMetadata(b"%d:*" % floor, _ITEMS):
        uid = item.uid
        if uid is None or uid < floor or uid in held or item.size is None:
            continue
        start = item.sections.get(_HEAD_SECTION) or b""
        candidates.append(Candidate(uid, item.size, journalHead(start)))
    pool = CandidatePool(candidates)
    for offset in range(0, len(valid), _MEASURE_BATCH):
        if not pool.remaining:
            break
        batch = valid[offset : offset + _MEASURE_BATCH]
        measured: dict[str, dict[str, tuple[int, bytes]]] = {}
        for folderKey in {p.message.folderKey for p in batch}:
            keys = [p.message.messageKey for p in batch if p.message.folderKey == folderKey]
            measured[folderKey] = await measure(folderKey, keys)
        for each in batch:
            message = each.message
            sent = measured[message.folderKey].get(message.messageKey)
            if sent is None:
                if pool.remaining:
                    found.undecided.add(each.entry.entryId)
                continue
            uid = pool.take(sent[0], sent[1], each.entry.uidFloor or 0)
            if uid is not None and not each.known:
                found.arrived[(message.folderKey, message.messageKey)] = (uid, sent[0])
    return found
