# -*- test-case-name: tests.test_state -*-
"""
An in-memory state store: the fake of L{imapmig.state.sqlite} for unit
tests, held to the same behaviour tests.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.state import (
    AppendedOutcome,
    FAILURES_COUNT_LIMIT,
    FAILURES_SEARCH_ROWS,
    FailuresPage,
    FolderFallback,
    HOLDS,
    FolderMark,
    IStateStore,
    JobActivity,
    JobHold,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
    OutcomeCounts,
    Transition,
    asciiLower,
    asMessageOutcome,
    outcomeMatches,
    withNames,
)
from imapmig.state._packing import packMessages
from imapmig.state._timeline import appendBounded

# The range of SQLite's INTEGER, which the fake enforces too.
_INTEGER_MIN = -(2**63)
_INTEGER_MAX = 2**63 - 1


def _outOfRange(numbers: Iterable[int | None]) -> int | None:
    """
    The first of C{numbers} that SQLite's INTEGER cannot hold, or L{None}
    if they all fit.
    """
    for number in numbers:
        if number is not None and not _INTEGER_MIN <= number <= _INTEGER_MAX:
            return number
    return None


def _unencodable(texts: Iterable[str | None]) -> UnicodeEncodeError | None:
    """
    Why SQLite would refuse one of C{texts} (it holds a lone surrogate, as
    C{surrogateescape} decoding leaves), or L{None} if it would take them
    all.
    """
    for text in texts:
        if text is not None:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                return e
    return None


@implementer(IStateStore)
class MemoryStateStore:
    """
    An L{IStateStore} in dictionaries; nothing survives the process.
    """

    def __init__(self, seconds: Callable[[], float] = lambda: 0.0) -> None:
        """
        @param seconds: the clock that stamps each admin's hold.
        """
        self._seconds = seconds
        # job -> folderKey -> messageKey -> latest outcome
        self._jobs: dict[str, dict[str, dict[str, MessageOutcome]]] | None = {}
        # job -> (folderKey, messageKey) -> when its latest outcome was
        # recorded
        self._recordedAt: dict[str, dict[tuple[str, str], float]] = {}
        # job -> folderKey -> mark
        self._marks: dict[str, dict[str, FolderMark]] = {}
        # job -> entryId -> unsettled entry
        self._journal: dict[str, dict[int, JournalEntry]] = {}
        self._lastEntryId = 0
        self._fallbacks: dict[str, dict[str, FolderFallback]] = {}
        self._jobFailures: dict[str, str] = {}
        self._holds: dict[str, JobHold] = {}
        # (server, user, direction) -> day -> octets
        self._budgets: dict[tuple[str, str, str], dict[str, int]] = {}
        # job -> its timeline, oldest first, bounded as SQLite's
        self._timelines: dict[str, list[Transition]] = {}

    def _open(self) -> dict[str, dict[str, dict[str, MessageOutcome]]]:
        """
        The outcomes of every job, unless the store was closed.

        @raise PermanentError: it was.
        """
        if self._jobs is None:
            raise PermanentError("memory: the state store is closed")
        return self._jobs

    def _latest(self, job: str) -> Iterator[MessageOutcome]:
        """
        The latest outcome of every message of C{job}, ordered by folder
        key, then message key.

        @raise PermanentError: the store was closed.
        """
        folders = self._open().get(job, {})
        return (
            outcome
            for folderKey in sorted(folders)
            for _, outcome in sorted(folders[folderKey].items())
        )

    def appendedKeys(self, job: str, folderKey: str) -> Deferred[set[str]]:
        """
        See L{IStateStore.appendedKeys}.
        """
        try:
            outcomes = self._open().get(job, {}).get(folderKey, {})
        except PermanentError as e:
            return fail(e)
        return succeed({key for key, outcome in outcomes.items() if outcome.failure is None})

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordOutcomes}.
        """
        try:
            jobs = self._open()
        except PermanentError as e:
            return fail(e)
        recorded = [asMessageOutcome(outcome) for outcome in outcomes]
        for outcome in recorded:
            number = _outOfRange((outcome.size, outcome.uidValidity, outcome.uid))
            if number is not None:
                # As SQLite refuses it: the whole batch, nothing recorded.
                return fail(
                    PermanentError(f"memory: cannot record outcomes: {number} is out of range")
                )
            error = _unencodable(
                (
                    job,
                    outcome.folderKey,
                    outcome.messageKey,
                    outcome.mailbox,
                    outcome.failure,
                    outcome.note,
                    outcome.messageId,
                    outcome.date,
                    outcome.sender,
                    outcome.subject,
                )
            )
            if error is not None:
                return fail(PermanentError(f"memory: cannot record outcomes: {error}"))
        number = _outOfRange(settled)
        if number is not None:
            return fail(PermanentError(f"memory: cannot record outcomes: {number} is out of range"))
        if recorded:
            folders = jobs.setdefault(job, {})
            times = self._recordedAt.setdefault(job, {})
            now = self._seconds()
            for outcome in recorded:
                folders.setdefault(outcome.folderKey, {})[outcome.messageKey] = outcome
                times[outcome.folderKey, outcome.messageKey] = now
        entries = self._journal.get(job, {})
        for entryId in settled:
            entries.pop(entryId, None)
        return succeed(None)

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        """
        See L{IStateStore.journalBatch}.
        """
        try:
            self._open()
            # What SQLite's store refuses to pack, this one refuses too.
            packMessages(messages)
        except PermanentError as e:
            return fail(e)
        except ValueError as e:
            return fail(PermanentError(f"memory: cannot journal the batch: {e}"))
        number = _outOfRange((uidValidity, uidFloor))
        if number is not None:
            return fail(
                PermanentError(f"memory: cannot journal the batch: {number} is out of range")
            )
        error = _unencodable((job, mailbox))
        if error is not None:
            return fail(PermanentError(f"memory: cannot journal the batch: {error}"))
        self._lastEntryId += 1
        entry = JournalEntry(self._lastEntryId, mailbox, uidValidity, uidFloor, tuple(messages))
        self._journal.setdefault(job, {})[entry.entryId] = entry
        return succeed(entry.entryId)

    def journal(self, job: str) -> Deferred[list[JournalEntry]]:
        """
        See L{IStateStore.journal}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        entries = self._journal.get(job, {})
        return succeed([entries[entryId] for entryId in sorted(entries)])

    def recordedUIDs(
        self, job: str, mailbox: str, uidValidity: int, fromUID: int
    ) -> Deferred[set[int]]:
        """
        See L{IStateStore.recordedUIDs}.
        """
        try:
            folders = self._open().get(job, {})
        except PermanentError as e:
            return fail(e)
        number = _outOfRange((uidValidity, fromUID))
        if number is not None:
            return fail(
                PermanentError(f"memory: cannot read recorded UIDs: {number} is out of range")
            )
        return succeed(
            {
                outcome.uid
                for outcomes in folders.values()
                for outcome in outcomes.values()
                if outcome.failure is None
                and outcome.mailbox == mailbox
                and outcome.uidValidity == uidValidity
                and outcome.uid is not None
                and outcome.uid >= fromUID
            }
        )

    def failures(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.failures}.  Ordered by folder key, then message
        key.
        """
        try:
            return succeed([o for o in self._latest(job) if o.failure is not None])
        except PermanentError as e:
            return fail(e)

    def failuresPage(
        self,
        job: str,
        offset: int,
        limit: int,
        contains: str = "",
        after: tuple[str, str] | None = None,
    ) -> Deferred[FailuresPage]:
        """
        See L{IStateStore.failuresPage}.
        """
        needle = asciiLower(contains)
        rowsRead = FAILURES_SEARCH_ROWS if needle else FAILURES_COUNT_LIMIT
        try:
            failed = [o for o in self._latest(job) if o.failure is not None]
        except PermanentError as e:
            return fail(e)
        exact = len(failed) <= rowsRead
        counted = sum(1 for o in failed[:rowsRead] if outcomeMatches(o, needle))
        if after is not None:
            failed = [o for o in failed if (o.folderKey, o.messageKey) > after]
        window = failed[:rowsRead] if needle else failed
        matching = [o for o in window if outcomeMatches(o, needle)]
        end = offset + max(0, min(limit, FAILURES_COUNT_LIMIT - offset))
        items = matching[offset:end]
        last: MessageOutcome | None = None
        if end > offset:
            if len(matching) > end:
                last = items[-1]
            elif needle and len(failed) > rowsRead:
                last = window[-1]
        return succeed(
            FailuresPage(
                counted,
                tuple(items),
                exact,
                None if last is None else (last.folderKey, last.messageKey),
            )
        )

    def manifestOutcomes(
        self, job: str, after: tuple[str, str] | None, limit: int
    ) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.manifestOutcomes}.
        """
        try:
            notCopied = (
                o
                for o in self._latest(job)
                if (o.failure is not None or o.alreadyPresent)
                and (after is None or (o.folderKey, o.messageKey) > after)
            )
            page: list[MessageOutcome] = []
            for outcome in notCopied:
                if len(page) == limit:
                    break
                page.append(outcome)
        except PermanentError as e:
            return fail(e)
        return succeed(page)

    def ping(self) -> Deferred[None]:
        """
        See L{IStateStore.ping}: fails once the store is closed.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(None)

    def summary(self, job: str) -> Deferred[tuple[int, int]]:
        """
        How many messages of C{job} are recorded as in the destination and
        how many as failed (each by its latest outcome).

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

    def counts(self, job: str) -> Deferred[OutcomeCounts]:
        """
        See L{IStateStore.counts}.
        """
        try:
            latest = list(self._latest(job))
        except PermanentError as e:
            return fail(e)
        present = [o for o in latest if o.failure is None]
        return succeed(
            OutcomeCounts(
                copied=sum(1 for o in present if not o.alreadyPresent),
                alreadyPresent=sum(1 for o in present if o.alreadyPresent),
                failed=len(latest) - len(present),
                lineEndingsConverted=sum(1 for o in present if o.lineEndingsConverted),
                withNotes=sum(1 for o in present if o.note is not None),
            )
        )

    def activity(self, job: str) -> Deferred[JobActivity]:
        """
        See L{IStateStore.activity}.
        """
        try:
            latest = list(self._latest(job))
        except PermanentError as e:
            return fail(e)
        copied = [o for o in latest if o.failure is None and not o.alreadyPresent]
        recordedAt = self._recordedAt.get(job, {})
        times = [recordedAt[o.folderKey, o.messageKey] for o in copied]
        return succeed(
            JobActivity(
                copiedOctets=sum(o.size for o in copied),
                firstAt=min(times, default=None),
                lastAt=max(times, default=None),
                folders=len(self._marks.get(job, {})),
            )
        )

    def nameMessages(
        self, job: str, names: Sequence[tuple[str, str, MessageNames]]
    ) -> Deferred[None]:
        """
        See L{IStateStore.nameMessages}.
        """
        try:
            folders = self._open().get(job, {})
        except PermanentError as e:
            return fail(e)
        for _, _, each in names:
            error = _unencodable((each.messageId, each.date, each.sender, each.subject))
            if error is not None:
                return fail(PermanentError(f"memory: cannot record the names: {error}"))
        for folderKey, messageKey, each in names:
            outcome = folders.get(folderKey, {}).get(messageKey)
            if outcome is not None and outcome.failure is not None:
                folders[folderKey][messageKey] = withNames(outcome, each)
        return succeed(None)

    def notes(self, job: str) -> Deferred[list[MessageOutcome]]:
        """
        See L{IStateStore.notes}.  Ordered by folder key, then message key.
        """
        try:
            return succeed(
                [o for o in self._latest(job) if o.failure is None and o.note is not None]
            )
        except PermanentError as e:
            return fail(e)

    def destinationMap(self, job: str, folderKey: str) -> Deferred[dict[str, MessageOutcome]]:
        """
        See L{IStateStore.destinationMap}.
        """
        try:
            outcomes = self._open().get(job, {}).get(folderKey, {})
        except PermanentError as e:
            return fail(e)
        return succeed({key: o for key, o in outcomes.items() if o.failure is None})

    def folderMark(self, job: str, folderKey: str) -> Deferred[FolderMark | None]:
        """
        See L{IStateStore.folderMark}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(self._marks.get(job, {}).get(folderKey))

    def recordFolderMark(self, job: str, folderKey: str, mark: FolderMark) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderMark}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        number = _outOfRange((mark.uidValidity, mark.uidNext, mark.highestModSeq, mark.messages))
        if number is not None:
            return fail(
                PermanentError(f"memory: cannot record the folder mark: {number} is out of range")
            )
        error = _unencodable((job, folderKey))
        if error is not None:
            return fail(PermanentError(f"memory: cannot record the folder mark: {error}"))
        self._marks.setdefault(job, {})[folderKey] = mark
        return succeed(None)

    def forgetFolder(self, job: str, folderKey: str) -> Deferred[None]:
        """
        See L{IStateStore.forgetFolder}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        self._marks.get(job, {}).pop(folderKey, None)
        return succeed(None)

    def recordFolderFallback(self, job: str, fallback: FolderFallback) -> Deferred[None]:
        """
        See L{IStateStore.recordFolderFallback}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        error = _unencodable((job, fallback.mailbox, fallback.fallback, fallback.reason))
        if error is not None:
            return fail(PermanentError(f"memory: cannot record the folder fallback: {error}"))
        self._fallbacks.setdefault(job, {})[fallback.mailbox] = fallback
        return succeed(None)

    def folderFallbacks(self, job: str) -> Deferred[list[FolderFallback]]:
        """
        See L{IStateStore.folderFallbacks}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        recorded = self._fallbacks.get(job, {})
        return succeed([recorded[mailbox] for mailbox in sorted(recorded)])

    def recordJobFailure(self, job: str, reason: str | None) -> Deferred[None]:
        """
        See L{IStateStore.recordJobFailure}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        if reason is None:
            self._jobFailures.pop(job, None)
            return succeed(None)
        error = _unencodable((job, reason))
        if error is not None:
            return fail(PermanentError(f"memory: cannot record the job's failure: {error}"))
        self._jobFailures[job] = reason
        return succeed(None)

    def jobFailure(self, job: str) -> Deferred[str | None]:
        """
        See L{IStateStore.jobFailure}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(self._jobFailures.get(job))

    def recordJobHolds(
        self, jobs: Sequence[str], hold: str | None, by: str | None = None
    ) -> Deferred[None]:
        """
        See L{IStateStore.recordJobHolds}.
        """
        if hold is not None and hold not in HOLDS:
            raise ValueError(f"not a job hold: {hold!r}")
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        if hold is None:
            for job in jobs:
                self._holds.pop(job, None)
            return succeed(None)
        error = _unencodable((*jobs, by))
        if error is not None:
            return fail(PermanentError(f"memory: cannot record the admin's hold: {error}"))
        record = JobHold(hold, by, self._seconds())
        for job in jobs:
            self._holds[job] = record
        return succeed(None)

    def jobHolds(self) -> Deferred[dict[str, JobHold]]:
        """
        See L{IStateStore.jobHolds}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(dict(self._holds))

    def recordTransition(self, job: str, transition: Transition) -> Deferred[None]:
        """
        See L{IStateStore.recordTransition}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        t = transition
        error = _unencodable((job, t.source, t.target, t.cause, t.by))
        if error is not None:
            return fail(PermanentError(f"memory: cannot record the job's transition: {error}"))
        if t.time != t.time:
            # SQLite stores a NaN as NULL, which the column refuses.
            return fail(PermanentError("memory: cannot record the job's transition: no time"))
        appendBounded(self._timelines.setdefault(job, []), transition)
        return succeed(None)

    def timeline(self, job: str) -> Deferred[list[Transition]]:
        """
        See L{IStateStore.timeline}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(list(self._timelines.get(job, ())))

    def budgetUsed(self, server: str, user: str, direction: str, day: str) -> Deferred[int]:
        """
        See L{IStateStore.budgetUsed}.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        return succeed(self._budgets.get((server, user, direction), {}).get(day, 0))

    def addBudgetUse(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        """
        See L{IStateStore.addBudgetUse}; as in SQLite, the records of the
        account's earlier days in that direction are dropped.
        """
        try:
            self._open()
        except PermanentError as e:
            return fail(e)
        if _unencodable((server, user, direction, day)) is not None:
            return fail(PermanentError("memory: cannot record the budget use: not Unicode"))
        days = self._budgets.setdefault((server, user, direction), {})
        total = days.get(day, 0) + octets
        if _outOfRange((total,)) is not None:
            return fail(PermanentError("memory: cannot record the budget use: too large"))
        for earlier in [d for d in days if d < day]:
            del days[earlier]
        days[day] = total
        return succeed(total)

    def close(self) -> None:
        """
        See L{IStateStore.close}.  Closing twice is harmless.
        """
        self._jobs = None
        self._marks = {}
        self._journal = {}
        self._fallbacks = {}
        self._jobFailures = {}
        self._holds = {}
        self._timelines = {}
