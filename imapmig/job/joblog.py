# -*- test-case-name: tests.test_joblog -*-
"""
What a job run tells the admin at the default log level: one line when it
starts, a progress line at most once a minute while it copies, each failed
message once (the first L{FAILURES_SHOWN} of a run one by one, then one
summary line a minute), and one line when it ends with its counts.

Every line is a structured event: a format string with keyword fields,
so a JSON log or the journal can be filtered on them and joined with
C{/metrics}: C{job}, C{server} (the destination server's configured
name, the C{server} label of the job's series) and C{user} (the
destination account) on every line (L{imapmig.log.logfields}); counts as
integers.  Peer data reaches these lines only through the reasons
imapmig recorded (already excerpted where they quote a server) and
through folder names and message keys, which are cut and escaped here.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from imapmig.config.model import (
    ImapSourceConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    SourceConfig,
)
from imapmig.imap.signals import excerpt
from imapmig.log.logfields import AccountName, withFields
from imapmig.progress import JobProgress, JobState
from imapmig.throttle import utcTime
from imapmig.state import MessageOutcome
from imapmig.units import Count

__all__ = [
    "FAILURES_SHOWN",
    "PROGRESS_EVERY",
    "JobLog",
    "describeSource",
    "formatDuration",
]

log = Logger()

PROGRESS_EVERY = 60.0
"""
Seconds between two progress lines of a job (and between two summaries
of the failed messages not logged one by one).
"""

FAILURES_SHOWN = 20
"""
Failed messages of one run logged one by one; the rest are counted in a
summary line once a minute.
"""

_MIB = 1024 * 1024

# How much of a folder name or a message key a line shows.
_NAME_LIMIT = 80
# How much of a recorded reason a line shows: imapmig's own words plus a
# server's excerpt (itself at most 80 characters).
_REASON_LIMIT = 240


def formatDuration(seconds: float) -> str:
    """
    C{seconds} in words an admin reads at a glance: C{"4.2 s"},
    C{"12 min 05 s"}, C{"3 h 07 min"}, C{"2 d 04 h"}.
    """
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"


def describeSource(source: SourceConfig) -> str:
    """
    A job's source as its log lines name it: C{"IMAP bob at
    tls:imap.old.example:993"}, C{"Maildir /srv/mail/bob"}, C{"mbox
    /srv/bob.mbox"}, C{".eml files in /srv/bob"}.
    """
    if isinstance(source, ImapSourceConfig):
        return f"IMAP {source.user} at {source.server.endpoint}"
    if isinstance(source, MaildirSourceConfig):
        return f"Maildir {source.path}"
    if isinstance(source, MboxSourceConfig):
        return f"mbox {source.path}"
    return f".eml files in {source.path}"


class JobLog:
    """
    The log lines of one job's runs.  L{started} and L{ended} bracket a
    run; between them a L{LoopingCall} on the job's clock writes the
    progress line and the summary of failures not yet logged, and
    nothing of it is left on the clock once the run has ended.
    """

    def __init__(
        self,
        job: str,
        progress: JobProgress,
        clock: IReactorTime,
        settled: Callable[[], int],
        source: str = "the source",
        destination: AccountName | None = None,
        every: float = PROGRESS_EVERY,
        failuresShown: int = FAILURES_SHOWN,
    ) -> None:
        """
        @param job: the job's name (the C{job} field of every line).
        @param progress: the job's live counters, read for each line.
        @param clock: the job's clock.
        @param settled: how many messages this run has given an outcome so
            far (appended, found present or failed): the current rate is
            its change over the last interval.
        @param source: the source as the start line names it
            (L{describeSource}).
        @param destination: the destination account: its server and user
            are fields of every line, its description names it in the
            start line; L{None}: unknown (no such fields).
        @param every: seconds between progress lines.
        @param failuresShown: failed messages logged one by one per run.
        """
        self._job = job
        self._progress = progress
        self._clock = clock
        self._settled = settled
        self._source = source
        self._destination = (
            "the destination account" if destination is None else destination.description
        )
        self._log = withFields(log, {} if destination is None else destination.fields())
        self._every = every
        self._failuresShown = failuresShown
        self._loop: LoopingCall | None = None
        self._startedAt = 0.0
        self._lastAt = 0.0
        self._lastSettled = 0
        self._failuresLogged = 0
        self._failuresUnlogged = 0

    def started(self, inDestination: int | None = None, failedBefore: int | None = None) -> None:
        """
        A run begins: log its start line and start the progress lines.

        @param inDestination: messages the state store records as already
            in the destination (from earlier runs), or L{None} if unknown.
        @param failedBefore: messages it records as failed by earlier
            runs (tried again by this one), or L{None} if unknown.
        """
        self._stopLoop()
        now = self._clock.seconds()
        self._startedAt = self._lastAt = now
        self._lastSettled = self._settled()
        self._failuresLogged = self._failuresUnlogged = 0
        if inDestination is None:
            self._log.info(
                "Job {job} started: from {source} to {destination}",
                job=self._job,
                source=self._source,
                destination=self._destination,
            )
        else:
            self._log.info(
                "Job {job} started: from {source} to {destination};"
                " {migrated:,} already migrated by earlier runs,"
                " {failedBefore:,} recorded as failed (tried again)",
                job=self._job,
                source=self._source,
                destination=self._destination,
                migrated=Count(inDestination, "message"),
                failedBefore=failedBefore or 0,
            )
        loop = self._loop = LoopingCall(self.tick)
        loop.clock = self._clock
        loop.start(self._every, now=False)

    def messageFailed(self, outcome: MessageOutcome) -> None:
        """
        A message was recorded as failed: log it, unless this run has
        logged L{FAILURES_SHOWN} already (it is then counted in the next
        summary line).
        """
        if self._failuresLogged >= self._failuresShown:
            self._failuresUnlogged += 1
            return
        self._failuresLogged += 1
        # The folder's name as listed (a key may be empty: a Maildir's
        # INBOX), else where it was going.
        listed = self._progress.folders.get(outcome.folderKey)
        folder = listed.folder if listed is not None else outcome.folderKey or outcome.mailbox
        self._log.warn(
            "Job {job}: message {key} of folder {folder} not migrated: {reason}",
            job=self._job,
            key=excerpt(outcome.messageKey, _NAME_LIMIT),
            folder=excerpt(folder, _NAME_LIMIT),
            mailbox=excerpt(outcome.mailbox, _NAME_LIMIT),
            reason=excerpt(outcome.failure or "", _REASON_LIMIT),
        )
        if self._failuresLogged == self._failuresShown:
            self._log.warn(
                "Job {job}: {shown} messages failed in this run; further failures"
                " are summed up once a minute (each is in `imapmig report` and the"
                " job's manifest)",
                job=self._job,
                shown=self._failuresShown,
            )

    def tick(self) -> None:
        """
        The interval passed: log the failures not yet logged, and, while
        the job copies, its progress.
        """
        self._logUnlogged()
        now = self._clock.seconds()
        settled = self._settled()
        interval = now - self._lastAt
        rate = (settled - self._lastSettled) / interval if interval > 0 else 0.0
        self._lastAt, self._lastSettled = now, settled
        progress = self._progress
        if progress.state is not JobState.RUNNING:
            # Waiting (backing off, paused) or connecting: the line that
            # said why it waits is enough.
            return
        handled = progress.messagesDone + progress.messagesFailed
        fields = dict(
            job=self._job,
            done=progress.messagesDone,
            failed=progress.messagesFailed,
            rate=rate,
            folder=excerpt(progress.currentFolder or "-", _NAME_LIMIT),
            elapsed=formatDuration(now - self._startedAt),
            seconds=round(now - self._startedAt, 3),
        )
        if progress.messagesTotal > 0:
            self._log.info(
                "Job {job}: {done:,} of {total:,} messages done ({percent:.1f}%),"
                " {failed:,} failed; {rate:.1f} messages/s over the last minute;"
                " copying {folder}; running for {elapsed}",
                total=progress.messagesTotal,
                percent=min(100.0, 100.0 * handled / progress.messagesTotal),
                **fields,
            )
        else:
            self._log.info(
                "Job {job}: {done:,} messages done, {failed:,} failed, total not yet"
                " known; {rate:.1f} messages/s over the last minute; copying {folder};"
                " running for {elapsed}",
                **fields,
            )

    def ended(
        self, copied: int, alreadyPresent: int, stopped: bool, deferredUntil: float | None
    ) -> None:
        """
        The run ended: stop the progress lines, sum up the failures not yet
        logged, and log its end line (at error level when it failed).

        The outcome is read from what the run says and from the progress's
        C{error} and C{finishedAt}, not from the job's state: a run may end
        inside a transition of its lifecycle machine (a stop cancelling a
        wait), which cannot be asked for its state then.

        @param copied: messages this run appended.
        @param alreadyPresent: messages this run found already in the
            destination.
        @param stopped: whether the run ended because the job was stopped.
        @param deferredUntil: when the run ended deferred until a daily
            budget's renewal, when that is (a time of the clock).
        """
        self._stopLoop()
        self._logUnlogged()
        progress = self._progress
        seconds = max(0.0, self._clock.seconds() - self._startedAt)
        state, outcome, error = self._outcome(stopped, deferredUntil)
        fields = dict(
            job=self._job,
            state=state.value,
            outcome=outcome,
            duration=formatDuration(seconds),
            seconds=round(seconds, 3),
            copied=copied,
            alreadyPresent=alreadyPresent,
            alreadyMigrated=progress.messagesAlreadyMigrated,
            failed=progress.messagesFailed,
            total=progress.messagesTotal,
            octets=progress.bytesSent,
            mib=progress.bytesSent / _MIB,
            rate=copied / seconds if seconds > 0 else 0.0,
            mibRate=progress.bytesSent / _MIB / seconds if seconds > 0 else 0.0,
        )
        counts = (
            " {copied:,} copied ({mib:.1f} MiB), {alreadyPresent:,} already present,"
            " {alreadyMigrated:,} already migrated, {failed:,} failed;"
            " {rate:.1f} messages/s, {mibRate:.2f} MiB/s"
        )
        if error is not None:
            # The sentence ends here, whether or not the error's own text
            # ended with a full stop.
            error = error.rstrip(". ")
        if state is JobState.FAILED:
            self._log.error(
                "Job {job} failed after {duration}: {error}." + counts,
                error=error or "no reason given",
                **fields,
            )
        else:
            # A run that completed with failed messages is worth a look.
            emit = self._log.warn if progress.messagesFailed else self._log.info
            if error is not None:
                emit("Job {job} {outcome} after {duration} ({error})." + counts, error=error, **fields)
            else:
                emit("Job {job} {outcome} after {duration}." + counts, **fields)

    def _outcome(
        self, stopped: bool, deferredUntil: float | None
    ) -> tuple[JobState, str, str | None]:
        """
        How the run ended, for its end line: the state, the outcome in
        words, and the error to show, if any.
        """
        progress = self._progress
        if stopped:
            # Its error only says it was stopped.
            return JobState.STOPPED, "stopped", None
        if deferredUntil is not None:
            outcome = f"deferred until {utcTime(deferredUntil)}"
            return JobState.DEFERRED, outcome, progress.waitingFor
        if progress.error is None and progress.finishedAt is not None:
            return JobState.DONE, "done", None
        error = progress.error or "ended by an internal error (see the traceback logged with it)"
        return JobState.FAILED, "failed", error

    def _logUnlogged(self) -> None:
        """
        Log how many failed messages went unlogged since the last summary.
        """
        count, self._failuresUnlogged = self._failuresUnlogged, 0
        if count:
            self._log.warn(
                "Job {job}: {count:,} more messages failed ({failed:,} in all in this"
                " run); see `imapmig report` or the job's manifest for each and why",
                job=self._job,
                count=count,
                failed=self._progress.messagesFailed,
            )

    def _stopLoop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and loop.running:
            loop.stop()
