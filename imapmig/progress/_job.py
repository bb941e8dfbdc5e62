# -*- test-case-name: tests.test_progress -*-
"""
One job's progress: its counters, its folders' progress, and its current
rate.  Updating it is a few attribute increments, cheap enough to do once
per tagged reply (L{imapmig.job.recording}).
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, Mapping, Sequence

from attrs import frozen

from imapmig.progress._rates import RateWindow


class JobState(Enum):
    """
    Where a job is in its life, as the status page shows it.
    """

    QUEUED = "queued"
    WAITING = "waiting"
    CONNECTING = "connecting"
    RUNNING = "running"
    BACKING_OFF = "backing_off"
    PAUSED = "paused"
    PAUSED_BY_SERVER = "paused_by_server"
    DEFERRED = "deferred"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DONE = "done"
    DONE_WITH_FAILURES = "done_with_failures"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED = frozenset(
    {
        JobState.STOPPED,
        JobState.DONE,
        JobState.DONE_WITH_FAILURES,
        JobState.FAILED,
        JobState.CANCELLED,
    }
)
"""
The states of a job whose run is over.
"""


@frozen
class Wait:
    """
    Why and until when a job waits (the C{wait} of its JSON), as its
    machine (L{imapmig.job.machine}) entered the waiting state.

    @ivar kind: the waiting state.
    @ivar reason: why, in a few words.
    @ivar since: when it began waiting.
    @ivar until: when it goes on by itself, or L{None}.
    @ivar by: who made it wait (an admin), or L{None}.
    """

    kind: JobState
    reason: str
    since: float
    until: float | None
    by: str | None

    def snapshot(self) -> dict[str, object]:
        """
        The JSON object.
        """
        return {
            "kind": self.kind.value,
            "reason": self.reason,
            "since": self.since,
            "until": self.until,
            "by": self.by,
        }


def _queued() -> JobState:
    return JobState.QUEUED


class FolderState(Enum):
    """
    Where the copy of one source folder is.
    """

    PENDING = "pending"
    COPYING = "copying"
    DONE = "done"


class FolderProgress:
    """
    The progress of one included source folder of a job, as its last
    listing and the outcomes since have it.

    @ivar folder: the source folder's name (levels joined with C{/}).
    @ivar key: the source folder's key (L{imapmig.mail.message.SourceFolder.key}).
    @ivar mailbox: the destination mailbox it goes to: the folder's name
        until the destination is prepared (L{JobProgress.mapped}).
    @ivar state: pending (nothing of it copied since it was listed),
        copying, or done (every message in the destination or failed).
    @ivar messagesTotal: its messages.
    @ivar messagesDone: of these, those in the destination (copied by this
        run or an earlier one, or found there).
    @ivar messagesFailed: of these, those this run recorded as failed.
    @ivar bytesTotal: the source octets of its messages.
    @ivar bytesDone: the source octets of the messages done.
    """

    __slots__ = (
        "folder",
        "key",
        "mailbox",
        "state",
        "messagesTotal",
        "messagesDone",
        "messagesFailed",
        "bytesTotal",
        "bytesDone",
    )

    def __init__(
        self,
        folder: str,
        key: str,
        messagesTotal: int,
        bytesTotal: int,
        messagesDone: int = 0,
        bytesDone: int = 0,
        messagesFailed: int = 0,
        mailbox: str | None = None,
    ) -> None:
        self.folder = folder
        self.key = key
        self.mailbox = folder if mailbox is None else mailbox
        self.messagesTotal = messagesTotal
        self.messagesDone = messagesDone
        self.messagesFailed = messagesFailed
        self.bytesTotal = bytesTotal
        self.bytesDone = bytesDone
        self.state = (
            FolderState.DONE
            if messagesDone + messagesFailed >= messagesTotal
            else FolderState.PENDING
        )

    def appended(self, count: int, octets: int, mailbox: str) -> None:
        """
        C{count} messages of C{octets} source octets in all are now in the
        destination mailbox C{mailbox}.
        """
        self.messagesDone += count
        self.bytesDone += octets
        self.mailbox = mailbox
        self._moved()

    def failed(self, count: int = 1) -> None:
        """
        C{count} messages were recorded as failed.
        """
        self.messagesFailed += count
        self._moved()

    def _moved(self) -> None:
        self.state = (
            FolderState.DONE
            if self.messagesDone + self.messagesFailed >= self.messagesTotal
            else FolderState.COPYING
        )

    def snapshot(self) -> dict[str, object]:
        """
        A JSON-ready copy (the C{folders} items of C{/jobs/NAME.json}).
        """
        return {
            "folder": self.folder,
            "mailbox": self.mailbox,
            "state": self.state.value,
            "messages_total": self.messagesTotal,
            "messages_done": self.messagesDone,
            "messages_failed": self.messagesFailed,
            "bytes_total": self.bytesTotal,
            "bytes_done": self.bytesDone,
        }


def _percent(part: int, whole: int) -> float:
    """
    C{part} of C{whole} in per cent, at most 100; 100 of nothing.
    """
    if whole <= 0:
        return 100.0
    return round(min(100.0, 100.0 * part / whole), 2)


class JobProgress:
    """
    The live counters of one job.

    @ivar counted: whether the job's totals are known: its source was
        listed, by the job itself or by the census
        (L{imapmig.schedule.census}).  Until then C{messagesTotal} and
        C{bytesTotal} mean nothing (the snapshot shows them as L{None}).
    @ivar countedByListing: whether the job's own listing counted it (the
        census then leaves its totals alone).
    @ivar messagesTotal: messages in the included folders of the source.
    @ivar messagesDone: of these, messages in the destination: appended by
        this run or recorded as appended by an earlier one.
    @ivar messagesAlreadyMigrated: of C{messagesDone}, those an earlier run
        appended (not sent again).
    @ivar messagesFailed: messages this run could not migrate, each recorded
        in the state store with its reason.
    @ivar messagesAlreadyPresent: of C{messagesDone}, those this run found
        already in the destination (copied by another tool or by hand,
        recognised by their identity) and did not append.
    @ivar messagesSettled: messages this run gave an outcome (appended,
        found present, or failed): what the current rate counts.
    @ivar lineEndingsConverted: messages this run appended with their bare
        LF line endings converted to CRLF (IMAP requires CRLF).
    @ivar messagesWithNotes: messages this run appended with something not
        carried over exactly (a keyword the destination refuses), each
        recorded in the state store with a note.
    @ivar bytesTotal: the source octets of the messages of the included
        folders; L{None} while unknown (a census of an IMAP server without
        C{STATUS=SIZE}).
    @ivar bytesDone: the source octets of the messages done, earlier runs
        included.
    @ivar bytesSent: octets appended by this run (as sent: CRLF).
    @ivar bytesFailed: the source octets of the messages this run could not
        migrate (C{messagesFailed}): settled, like them, for the octets'
        percentage.
    @ivar folders: the included folders' progress, by folder key, in
        listing order (set by the job's listing).
    @ivar excludedFolders: the names of the source folders the job's
        folder rules leave out.
    @ivar foldersTotal: the included folders.
    @ivar foldersExcluded: the folders left out.
    @ivar pausedByAdmin: the job was paused from the controls (set by the
        scheduler).
    @ivar error: why the job failed, when it did.
    @ivar wait: why and until when the job waits, while its machine has it
        wait (L{waitIn}).
    @ivar retryAttempt: while it backs off, which attempt in a row without
        progress failed (1 for the first); else L{None}.
    @ivar retryAttempts: while it backs off, how many such attempts fail
        the job (its C{retry_attempts}); else L{None}.
    @ivar reconnects: how many times this run connected again after a
        transient failure.
    @ivar window: the current rate's samples, once the job started.
    @ivar sampled: the lifetime counts (L{lifetimeCounts}) at the last
        sample, for L{imapmig.progress.MigrationProgress.sample}.
    """

    __slots__ = (
        "name",
        "_stateOf",
        "wait",
        "retryAttempt",
        "retryAttempts",
        "reconnects",
        "counted",
        "countedByListing",
        "messagesTotal",
        "messagesDone",
        "messagesAlreadyMigrated",
        "messagesFailed",
        "messagesAlreadyPresent",
        "messagesSettled",
        "lineEndingsConverted",
        "messagesWithNotes",
        "bytesTotal",
        "bytesDone",
        "bytesSent",
        "bytesFailed",
        "folders",
        "excludedFolders",
        "foldersTotal",
        "foldersExcluded",
        "currentFolder",
        "pausedByAdmin",
        "error",
        "startedAt",
        "finishedAt",
        "window",
        "sampled",
        "_settledBefore",
        "_sentBefore",
        "_countedBefore",
        "_seconds",
        "_onStart",
    )

    def __init__(
        self,
        name: str,
        seconds: Callable[[], float],
        onStart: Callable[[JobProgress], None] | None = None,
    ) -> None:
        """
        @param seconds: the clock.
        @param onStart: called with this progress each time the job starts
            (L{started}): the migration's progress samples it from then.
        """
        self.name = name
        self._stateOf: Callable[[], JobState] = _queued
        self.wait: Wait | None = None
        self.retryAttempt: int | None = None
        self.retryAttempts: int | None = None
        self.reconnects = 0
        self.counted = False
        self.countedByListing = False
        self.messagesTotal = 0
        self.messagesDone = 0
        self.messagesAlreadyMigrated = 0
        self.messagesFailed = 0
        self.messagesAlreadyPresent = 0
        self.messagesSettled = 0
        self.lineEndingsConverted = 0
        self.messagesWithNotes = 0
        self.bytesTotal: int | None = 0
        self.bytesDone = 0
        self.bytesSent = 0
        self.bytesFailed = 0
        self.folders: dict[str, FolderProgress] = {}
        self.excludedFolders: list[str] = []
        self.foldersTotal = 0
        self.foldersExcluded = 0
        self.currentFolder: str | None = None
        self.pausedByAdmin = False
        self.error: str | None = None
        self.startedAt: float | None = None
        self.finishedAt: float | None = None
        self.window: RateWindow | None = None
        self.sampled = (0, 0)
        self._settledBefore = 0
        self._sentBefore = 0
        self._countedBefore: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
        self._seconds = seconds
        self._onStart = onStart

    @property
    def state(self) -> JobState:
        """
        Where the job is: read from its lifecycle machine, the one owner of
        that state.
        """
        return self._stateOf()

    def showState(self, stateOf: Callable[[], JobState]) -> None:
        """
        Read the job's state from C{stateOf} (its lifecycle machine) from
        now on.
        """
        self._stateOf = stateOf

    @property
    def waitingFor(self) -> str | None:
        """
        Why the job waits, while it does (C{wait.reason}).
        """
        return None if self.wait is None else self.wait.reason

    @property
    def retryAt(self) -> float | None:
        """
        When it goes on by itself, while it waits (C{wait.until}).
        """
        return None if self.wait is None else self.wait.until

    def waitIn(self, wait: Wait | None) -> None:
        """
        The job's machine entered the waiting state C{wait}, or (L{None})
        one that does not wait.  The attempt counts (L{retrying}) are
        cleared.
        """
        self.wait = wait
        self.retryAttempt = self.retryAttempts = None

    def retrying(self, attempt: int, attempts: int) -> None:
        """
        While the job backs off: attempt C{attempt} of C{attempts} in a
        row without progress failed.
        """
        self.retryAttempt = attempt
        self.retryAttempts = attempts

    def started(self) -> None:
        """
        The job began running: this run's counters start from zero, and
        its rate is sampled from now on.
        """
        self._settledBefore += self.messagesSettled
        self._sentBefore += self.bytesSent
        self._countedBefore = self.lifetimeCounters()
        self.messagesSettled = 0
        self.bytesSent = 0
        self.bytesFailed = 0
        self.reconnects = 0
        self.waitIn(None)
        now = self._seconds()
        self.startedAt = now
        self.finishedAt = None
        self.error = None
        self.messagesFailed = 0
        self.messagesAlreadyPresent = 0
        self.lineEndingsConverted = 0
        self.messagesWithNotes = 0
        if self.window is None:
            self.window = RateWindow()
        lifetime = self.lifetimeCounts()
        self.window.add(now, *lifetime)
        self.sampled = lifetime
        if self._onStart is not None:
            self._onStart(self)

    def finished(self, error: str | None = None) -> None:
        """
        The job ended: done, or failed (or was stopped) because of C{error}.
        """
        self.error = error
        self.waitIn(None)
        self.finishedAt = self._seconds()
        self.currentFolder = None

    def lifetimeCounts(self) -> tuple[int, int]:
        """
        The messages settled and octets sent by every run of this job in
        this process: counters that only grow, for the rates.
        """
        return (
            self._settledBefore + self.messagesSettled,
            self._sentBefore + self.bytesSent,
        )

    def runCounters(self) -> tuple[int, int, int, int, int]:
        """
        This run's counters: messages appended, their octets, messages
        failed, messages found already present, reconnects.
        """
        present = self.messagesAlreadyPresent
        octets = self.bytesSent
        # Until a new run has listed its source, messagesDone and
        # messagesAlreadyMigrated are still the last run's; nothing is
        # appended before that listing, and every message appended has
        # octets.
        appended = self.messagesDone - self.messagesAlreadyMigrated - present if octets else 0
        return (max(0, appended), octets, self.messagesFailed, present, self.reconnects)

    def lifetimeCounters(self) -> tuple[int, int, int, int, int]:
        """
        L{runCounters} summed over every run of this job in this process:
        counters that only grow (C{/metrics}), however many runs end
        between two reads.
        """
        before = self._countedBefore
        current = self.runCounters()
        return (
            before[0] + current[0],
            before[1] + current[1],
            before[2] + current[2],
            before[3] + current[3],
            before[4] + current[4],
        )

    # Totals

    def listed(
        self,
        folders: Sequence[FolderProgress],
        excluded: Sequence[str],
        messagesDone: int,
        alreadyMigrated: int,
    ) -> None:
        """
        The job listed its source: its totals and its folders' progress
        are now known (and override a census).

        @param folders: the included folders listed, in order.
        @param excluded: the names of the folders left out.
        @param messagesDone: the messages of these folders in the
            destination.
        @param alreadyMigrated: of these, those an earlier run appended.
        """
        self.folders = {folder.key: folder for folder in folders}
        self.excludedFolders = list(excluded)
        self.foldersExcluded = len(excluded)
        self.messagesTotal = sum(folder.messagesTotal for folder in folders)
        self.bytesTotal = sum(folder.bytesTotal for folder in folders)
        self.bytesDone = sum(folder.bytesDone for folder in folders)
        self.messagesDone = messagesDone
        self.messagesAlreadyMigrated = alreadyMigrated
        self.counted = True
        self.countedByListing = True

    def census(
        self,
        messages: int,
        octets: int | None,
        folders: int,
        excluded: Sequence[str],
        recorded: int = 0,
    ) -> bool:
        """
        The census counted the job's source: take its totals, unless the
        job listed its source itself (its own listing is the truth).

        @param messages: the messages of the included folders.
        @param octets: their source octets, or L{None} if unknown.
        @param folders: the included folders.
        @param excluded: the names of the folders left out.
        @param recorded: messages the state store records as in the
            destination (earlier runs): counted as done, and their octets
            estimated pro rata.
        @return: whether the census's totals were taken.
        """
        if self.countedByListing:
            return False
        done = min(recorded, messages)
        self.messagesTotal = messages
        self.bytesTotal = octets
        self.messagesDone = done
        self.messagesAlreadyMigrated = done
        self.bytesDone = 0 if not octets or not messages else octets * done // messages
        self.foldersTotal = folders
        self.foldersExcluded = len(excluded)
        self.excludedFolders = list(excluded)
        self.counted = True
        return True

    def mapped(self, mailboxes: Mapping[str, str]) -> None:
        """
        The destination mailbox of each folder, by folder key, as the
        destination's preparation decided.
        """
        for key, mailbox in mailboxes.items():
            folder = self.folders.get(key)
            if folder is not None:
                folder.mailbox = mailbox

    @property
    def messagesPending(self) -> int:
        """
        Messages neither in the destination nor recorded as failed (0
        while the job is not counted).
        """
        return max(0, self.messagesTotal - self.messagesDone - self.messagesFailed)

    def currentRate(self, now: float) -> tuple[float, float] | None:
        """
        Messages (settled) and octets (sent) per second over the last
        minute; L{None} if the job has not started in this process.
        """
        window = self.window
        if window is None:
            return None
        messages, octets = self.lifetimeCounts()
        return window.rate(now, messages, octets)

    def folderSnapshots(self) -> list[dict[str, object]]:
        """
        JSON-ready copies of the included folders' progress, in listing
        order (empty until the job lists its source).
        """
        return [folder.snapshot() for folder in self.folders.values()]

    def snapshot(self) -> dict[str, object]:
        """
        A JSON-ready copy of the counters: every key of the C{JOB} object
        of C{/status.json}.
        """
        now = self._seconds()
        state = self.state
        elapsed = None
        average = None
        if self.startedAt is not None:
            elapsed = (now if self.finishedAt is None else self.finishedAt) - self.startedAt
            migrated = (
                self.messagesDone - self.messagesAlreadyMigrated - self.messagesAlreadyPresent
            )
            if elapsed > 0:
                average = round(max(0, migrated) / elapsed, 1)
        # A held job cannot move: its rate now is 0 (as the totals' while
        # nothing can move); an ended one moves no more: no current rate.
        rates = None if state in ENDED else (0.0, 0.0) if state in HELD else self.currentRate(now)
        rate = None if rates is None else round(rates[0], 1)
        counted = self.counted
        # Not counted: its totals are not known yet.
        total = bytesTotal = pending = percent = None
        if counted:
            total, bytesTotal, pending = self.messagesTotal, self.bytesTotal, self.messagesPending
            percent = _percent(self.messagesDone + self.messagesFailed, total)
        return {
            "name": self.name,
            "state": state.value,
            "counted": counted,
            "messages_total": total,
            "messages_done": self.messagesDone,
            "messages_failed": self.messagesFailed,
            "messages_already_present": self.messagesAlreadyPresent,
            "messages_already_migrated": self.messagesAlreadyMigrated,
            "messages_pending": pending,
            "bytes_total": bytesTotal,
            "bytes_done": self.bytesDone,
            "bytes_sent": self.bytesSent,
            "percent": percent,
            "messages_per_second": rate,
            "average_messages_per_second": average,
            "eta_seconds": _eta(pending, None if rates is None else rates[0], state),
            "current_folder": self.currentFolder,
            "folders_total": self.foldersTotal,
            "folders_excluded": self.foldersExcluded,
            "error": self.error,
            "wait": None if self.wait is None else self.wait.snapshot(),
            "waiting_for": self.waitingFor,
            "retry_at": self.retryAt,
            "retry_attempt": self.retryAttempt,
            "retry_attempts": self.retryAttempts,
            "reconnects": self.reconnects,
            "started_at": self.startedAt,
            "finished_at": self.finishedAt,
            "elapsed_seconds": None if elapsed is None else round(elapsed, 3),
            "paused": self.pausedByAdmin,
            "line_endings_converted": self.lineEndingsConverted,
            "messages_with_notes": self.messagesWithNotes,
        }


HELD = frozenset({JobState.PAUSED, JobState.PAUSED_BY_SERVER, JobState.DEFERRED})
"""
The states of a job that cannot move until something happens (an admin
resumes it, the server's hold or the budget's day ends): neither its rate
nor its messages count in the time left.
"""


def _eta(pending: int | None, rate: float | None, state: JobState) -> float | None:
    """
    Seconds until C{pending} messages are settled at C{rate} per second:
    0 with none pending, L{None} when unknown (not counted, not moving,
    held (L{HELD}), or the job's run is over, pending or not).
    """
    if pending is None or state in ENDED:
        return None
    if pending == 0:
        return 0.0
    if state in HELD or not rate or rate <= 0:
        return None
    return round(pending / rate, 1)
