# -*- test-case-name: tests.test_report, tests.test_cli -*-
"""
The end of C{imapmig report}: what became of each job (its outcome) and
the summary of the run (jobs done, done with failures, failed, held, not
run; messages, octets, duration, rate); and its machine-readable forms:
one CSV row per job (C{--csv}), and one CSV of every failed message with
the names its owner knows it by (C{--failures --csv}), with the columns of
the status site's manifests.

L{report} builds each job's entry; the summary is one function over those
entries (L{summarise}), so that a new count (say, of messages found only
in a label view) is one field here and one line in L{summaryLines}.
"""

from __future__ import annotations

import csv
import json
import textwrap
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping, Sequence, TextIO, TypeVar

from attrs import frozen
from twisted.internet.defer import Deferred

from imapmig.state import CANCELLED, PAUSED, IStateStore, JobHold, JobReport, MessageOutcome
from imapmig.status.manifest import COLUMNS, ManifestRow, inertCell, outcomeRow
from imapmig.units import octets, plural

__all__ = [
    "DONE",
    "DONE_WITH_FAILURES",
    "FAILED",
    "JOB_COLUMNS",
    "NOT_RUN",
    "UNFINISHED",
    "RunSummary",
    "failureRows",
    "jobOutcome",
    "summarise",
    "summaryLines",
    "writeFailuresCSV",
    "writeJobsCSV",
]

DONE = "done"
DONE_WITH_FAILURES = "done_with_failures"
FAILED = "failed"
NOT_RUN = "not_run"
UNFINISHED = "unfinished"
"""
A job's outcome (L{jobOutcome}): also L{PAUSED} and L{CANCELLED}, the
holds.
"""

_ENDS = frozenset({"done", "done_with_failures", "failed", "cancelled", "paused"})
"""
The states a job's timeline ends in when it has ended (or an admin holds
it); any other last change leaves it unfinished: a daemon runs it now (a
fleet's, while the report is read), or its run stopped before its end.
"""

JOB_COLUMNS = (
    "job", "outcome", "appended", "copied", "already_present", "failed",
    "line_endings_converted", "with_notes", "copied_octets", "first_at", "last_at",
    "job_failure", "hold_by", "hold_at",
)  # fmt: skip
"""
The columns of C{imapmig report --csv}, one row per job.
"""

_PAGE = 500


def jobOutcome(entry: Mapping[str, Any]) -> str:
    """
    What became of the job of a report C{entry} (as L{report}
    builds it), one of: L{CANCELLED}, L{PAUSED} (the admin's holds, first),
    L{FAILED} (its latest run failed), L{UNFINISHED} (its last change
    of state, if any is recorded, is not an end: running, waiting to run,
    or stopped), L{DONE_WITH_FAILURES} (some messages failed), L{NOT_RUN}
    (nothing recorded of it), L{DONE}.
    """
    hold = entry["hold"]
    if hold is not None:
        return str(hold["state"])
    if entry["job_failure"] is not None:
        return FAILED
    timeline = entry.get("timeline")
    if timeline and timeline[-1]["to"] not in _ENDS:
        return UNFINISHED
    if entry["failed"]:
        return DONE_WITH_FAILURES
    if not (entry["appended"] or entry["folders"]):
        return NOT_RUN
    return DONE


@frozen
class RunSummary:
    """
    The run as the report sums it up.

    @ivar outcomes: how many jobs ended each way (L{jobOutcome}).
    @ivar copied: messages copied; C{alreadyPresent}: found in the
        destination already; C{failed}: failed.
    @ivar copiedOctets: the octets of the messages copied.
    @ivar firstAt: when the first message copied was recorded (seconds
        since the epoch), L{None} for none; C{lastAt}: the last.
    """

    outcomes: Mapping[str, int]
    copied: int
    alreadyPresent: int
    failed: int
    copiedOctets: int
    firstAt: float | None
    lastAt: float | None

    @property
    def jobs(self) -> int:
        """
        How many jobs.
        """
        return sum(self.outcomes.values())

    @property
    def seconds(self) -> float:
        """
        From the first copy recorded to the last (0 for none).
        """
        if self.firstAt is None or self.lastAt is None:
            return 0.0
        return self.lastAt - self.firstAt


class _Tally:
    """
    The report's totals, added up as its entries are read a page at a
    time (L{REPORT_PAGE}): what L{summarise} and the text report's last
    lines need, in memory bounded whatever the number of jobs.
    """

    def __init__(self) -> None:
        self.outcomes = {
            name: 0
            for name in (DONE, DONE_WITH_FAILURES, FAILED, PAUSED, CANCELLED, UNFINISHED, NOT_RUN)
        }
        self.copied = self.alreadyPresent = self.failed = self.copiedOctets = 0
        self.firstAt: float | None = None
        self.lastAt: float | None = None
        self.ok = True
        self.paused = _Named()
        self.notOk = _Named()

    def add(self, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """
        Count C{entry} in; return it.
        """
        self.outcomes[jobOutcome(entry)] += 1
        self.copied += entry["copied"]
        self.alreadyPresent += entry["already_present"]
        self.failed += entry["failed"]
        self.copiedOctets += entry["copied_octets"]
        first, last = entry["first_at"], entry["last_at"]
        if first is not None and (self.firstAt is None or first < self.firstAt):
            self.firstAt = first
        if last is not None and (self.lastAt is None or last > self.lastAt):
            self.lastAt = last
        if entry["hold"] is not None and entry["hold"]["state"] == PAUSED:
            self.paused.add(str(entry["job"]))
        if not entry["ok"]:
            self.ok = False
            self.notOk.add(_whatFailed(entry))
        return entry

    def summary(self) -> RunSummary:
        """
        The summary of the entries counted.
        """
        return RunSummary(
            outcomes=self.outcomes,
            copied=self.copied,
            alreadyPresent=self.alreadyPresent,
            failed=self.failed,
            copiedOctets=self.copiedOctets,
            firstAt=self.firstAt,
            lastAt=self.lastAt,
        )


class _Named:
    """
    The first L{LISTED_JOBS} names of a list the text report ends with,
    and how many there are.
    """

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.count = 0

    def add(self, name: str) -> None:
        """
        Count C{name}, kept if it is among the first.
        """
        self.count += 1
        if len(self.shown) < LISTED_JOBS:
            self.shown.append(name)


def summarise(entries: Iterable[Mapping[str, Any]]) -> RunSummary:
    """
    The summary of the report's C{entries}.
    """
    tally = _Tally()
    for entry in entries:
        tally.add(entry)
    return tally.summary()


def _duration(seconds: float) -> str:
    """
    C{seconds} for a reader: C{"42 s"}, C{"8 min 3 s"}, C{"2 h 5 min"}.
    """
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _counted(count: int, noun: str) -> str:
    """
    C{count} with thousands separated, and C{noun}, plural unless 1.
    """
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def summaryLines(summary: RunSummary) -> list[str]:
    """
    The summary as the text report ends with it, each line starting with
    C{summary:}: the jobs by outcome, the messages, and the octets with
    the time and rates.
    """
    o = summary.outcomes
    held = o[PAUSED] + o[CANCELLED]
    lines = [
        f"summary: {_counted(summary.jobs, 'job')}: {o[DONE]:,} done, {o[DONE_WITH_FAILURES]:,}"
        f" done with failures, {o[FAILED]:,} failed, {held:,} held ({o[PAUSED]:,} paused,"
        f" {o[CANCELLED]:,} cancelled), {o[NOT_RUN]:,} not run"
        + (f", {o[UNFINISHED]:,} not finished (running, or stopped)" if o[UNFINISHED] else ""),
        f"summary: {_counted(summary.copied + summary.alreadyPresent, 'message')} in the"
        f" destination ({summary.copied:,} copied, {summary.alreadyPresent:,} already"
        f" present), {summary.failed:,} failed",
    ]
    copied = f"summary: {octets(summary.copiedOctets)} copied"
    seconds = summary.seconds
    if seconds > 0:
        copied += (
            f" in {_duration(seconds)} (first to last copy recorded):"
            f" {summary.copied / seconds:,.0f} messages/s,"
            f" {octets(summary.copiedOctets / seconds)}/s"
        )
    lines.append(copied)
    return lines


def _stamp(seconds: float | None) -> str | None:
    """
    C{seconds} since the epoch as ISO 8601 UTC, or L{None}.
    """
    if seconds is None:
        return None
    at = datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")
    return at.replace("+00:00", "Z")


def writeJobsCSV(entries: Iterable[Mapping[str, Any]], out: TextIO) -> None:
    """
    Write one RFC 4180 CSV row per job (L{JOB_COLUMNS}) to C{out}, after a
    header; nothing else (no summary row).
    """
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(JOB_COLUMNS)
    for entry in entries:
        hold = entry["hold"]
        row = (
            entry["job"], jobOutcome(entry), entry["appended"], entry["copied"],
            entry["already_present"], entry["failed"], entry["line_endings_converted"],
            entry["with_notes"], entry["copied_octets"], _stamp(entry["first_at"]),
            _stamp(entry["last_at"]), entry["job_failure"],
            None if hold is None else hold["by"], None if hold is None else hold["at"],
        )  # fmt: skip
        writer.writerow([inertCell(cell) for cell in row])


def failureRows(store: IStateStore, job: str, now: Any) -> Iterator[ManifestRow]:
    """
    The manifest rows of C{job}'s failed messages, read a page at a time
    (L{IStateStore.manifestOutcomes}), their reasons whole (paths kept:
    whoever reads the database reads them anyway).

    @param now: gives the result of a Deferred that has fired (the SQLite
        store answers at once).
    """
    after: tuple[str, str] | None = None
    while True:
        page: list[MessageOutcome] = now(store.manifestOutcomes(job, after, _PAGE))
        if not page:
            return
        for outcome in page:
            if outcome.failure is not None:
                yield outcomeRow(job, outcome, {}, paths=True)
        if len(page) < _PAGE:
            # The last page: asking for the next would read nothing.
            return
        after = (page[-1].folderKey, page[-1].messageKey)


def writeFailuresCSV(store: IStateStore, jobs: Iterable[str], now: Any, out: TextIO) -> int:
    """
    Write every failed message of C{jobs} to C{out} as the status site's
    C{/manifest.csv} lists it (its columns; the folder by its key, as the
    database knows it; no excluded folders, which only a listing knows).

    @return: how many rows were written.
    """
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    count = 0
    for job in jobs:
        for row in failureRows(store, job, now):
            writer.writerow([inertCell(cell) for cell in row])
            count += 1
    return count


T = TypeVar("T")


def _now(d: Deferred[T]) -> T:
    """
    The result of a Deferred that has already fired (the SQLite store
    answers synchronously).
    """
    results: list[T] = []
    failures: list[object] = []
    d.addCallbacks(results.append, failures.append)
    if failures:
        failures[0].raiseException()  # type: ignore[attr-defined]
    return results[0]


REPORT_PAGE = 500
"""
The jobs whose records the report reads at once
(L{IStateStore.jobReports}): seven statements a page, where a job's seven
reads cost 350,000 statements for a fleet's 50,000 jobs (54 s); its
memory is a page's entries, not the jobs'.
"""


def report(
    store: IStateStore,
    jobs: Sequence[str],
    asJSON: bool,
    out: TextIO,
    asCSV: bool = False,
    failures: bool = False,
    holds: Mapping[str, JobHold] | None = None,
) -> int:
    """
    Write the report of C{jobs} from C{store} to C{out}: as text, ending
    with the summary of the run (L{summaryLines}); as JSON; or as CSV, one
    row per job (L{writeJobsCSV}).  With C{failures}, every failed message
    instead, with its names (L{writeFailuresCSV} as CSV).  Each is written
    as the jobs' records are read, L{REPORT_PAGE} jobs at a time.

    @param holds: the admin's holds, where the store does not keep them (a
        fleet's are its queue's rows: L{imapmig.commands.cli}); L{None}:
        the store's.

    @return: the exit status: 0 when no job's latest run failed and no
        message is recorded as failed, 1 otherwise.
    """
    if holds is None:
        holds = _now(store.jobHolds())
    tally = _Tally()
    entries = (tally.add(entry) for entry in _entries(store, jobs, holds))
    if failures:
        failed = (str(entry["job"]) for entry in entries if entry["failed"])
        _writeFailures(store, failed, asJSON, asCSV, out)
    elif asJSON:
        _writeJSON(entries, out)
    elif asCSV:
        writeJobsCSV(entries, out)
    else:
        _writeText(entries, tally, out)
    return 0 if tally.ok else 1


def _entries(
    store: IStateStore, jobs: Sequence[str], holds: Mapping[str, JobHold]
) -> Iterator[dict[str, Any]]:
    """
    The report's entries of C{jobs}, read L{REPORT_PAGE} jobs at a time.
    """
    for start in range(0, len(jobs), REPORT_PAGE):
        for record in _now(store.jobReports(jobs[start : start + REPORT_PAGE])):
            yield _jobEntry(record, holds.get(record.job))


def _writeJSON(items: Iterable[Mapping[str, Any]], out: TextIO) -> None:
    """
    Write C{items} to C{out} as one JSON list, as C{json.dump(list(items),
    out, indent=2)} and a newline would, an item at a time.
    """
    written = False
    for item in items:
        out.write(",\n" if written else "[\n")
        out.write(textwrap.indent(json.dumps(item, indent=2), "  "))
        written = True
    out.write("\n]\n" if written else "[]\n")


def _jobEntry(record: JobReport, hold: JobHold | None) -> dict[str, Any]:
    """
    One job's entry of the report, from what the store records of it.
    """
    jobFailure = record.failure
    counts = record.counts
    activity = record.activity
    return {
        "job": record.job,
        "ok": (
            jobFailure is None
            and counts.failed == 0
            and (hold is None or hold.hold != CANCELLED)
        ),
        "job_failure": jobFailure,
        "hold": _holdEntry(hold),
        "appended": counts.copied + counts.alreadyPresent,
        "copied": counts.copied,
        "already_present": counts.alreadyPresent,
        "failed": counts.failed,
        "line_endings_converted": counts.lineEndingsConverted,
        "with_notes": counts.withNotes,
        "copied_octets": activity.copiedOctets,
        "first_at": activity.firstAt,
        "last_at": activity.lastAt,
        "folders": activity.folders,
        "failures": [
            {
                "folder_key": f.folderKey,
                "message_key": f.messageKey,
                "mailbox": f.mailbox,
                "size": f.size,
                "message_id": f.messageId,
                "date": f.date,
                "from": f.sender,
                "subject": f.subject,
                "reason": f.failure,
            }
            for f in record.failures
        ],
        "notes": [
            {
                "folder_key": n.folderKey,
                "message_key": n.messageKey,
                "mailbox": n.mailbox,
                "uid": n.uid,
                "note": n.note,
            }
            for n in record.notes
        ],
        "folder_fallbacks": [
            {"mailbox": f.mailbox, "fallback": f.fallback, "reason": f.reason}
            for f in record.fallbacks
        ],
        "timeline": [
            {"time": t.time, "from": t.source, "to": t.target, "cause": t.cause, "by": t.by}
            for t in record.timeline
        ],
    }


def _writeText(entries: Iterable[Mapping[str, Any]], tally: _Tally, out: TextIO) -> None:
    """
    The text report: a line per job with what failed, then the summary,
    of the C{entries} that C{tally} counts as they are read.
    """
    for entry in entries:
        _writeEntry(entry, out)
    for line in summaryLines(tally.summary()):
        out.write(line + "\n")
    if tally.paused.count:
        out.write(f"paused: {_listed(tally.paused)}\n")
    if tally.notOk.count:
        out.write(f"failed: {_listed(tally.notOk)}\n")


LISTED_JOBS = 20
"""
The most jobs the text report's C{paused:} and C{failed:} lines name: the
300-account run's C{failed:} line named 163 jobs, 60 terminal rows that
pushed its summary off the screen.
"""


def _listed(names: _Named) -> str:
    """
    The first L{LISTED_JOBS} of C{names}, and how many more there are.
    """
    shown = ", ".join(names.shown)
    more = names.count - LISTED_JOBS
    return shown if more <= 0 else f"{shown} and {more:,} more (imapmig report --csv lists every job)"


def _writeEntry(entry: Mapping[str, Any], out: TextIO) -> None:
    """
    One job's lines of the text report.
    """
    out.write(
        f"{entry['job']}: {entry['appended']} appended ({entry['copied']} copied,"
        f" {entry['already_present']} already present), {entry['failed']} failed;"
        f" line endings converted in {entry['line_endings_converted']},"
        f" {entry['with_notes']} with notes\n"
    )
    held = entry["hold"]
    if held is not None:
        by = "" if held["by"] is None else f" by {held['by']}"
        out.write(f"  {held['state']}{by} at {held['at']}\n")
    if entry["job_failure"] is not None:
        out.write(f"  job failed\t{entry['job_failure']}\n")
    if entry["timeline"] and (held is not None or entry["job_failure"] is not None):
        out.write(_lastChange(entry["timeline"][-1]))
    for failure in entry["failures"]:
        out.write(
            f"  failed\t{failure['mailbox']}\t{failure['folder_key']}/{failure['message_key']}"
            f"\t{failure['reason']}\n"
        )
    for note in entry["notes"]:
        out.write(
            f"  note\t{note['mailbox']}\t{note['folder_key']}/{note['message_key']}"
            f"\t{note['note']}\n"
        )
    for fallback in entry["folder_fallbacks"]:
        out.write(
            f"  folder\t{fallback['mailbox']}\t-> {fallback['fallback']}"
            f"\t{fallback['reason']}\n"
        )


LAST_CAUSE_LENGTH = 120
"""
The most characters of the cause the text report's C{last change} line
shows; a longer one is cut (its last character then C{…}).
"""


def _lastChange(change: Mapping[str, Any]) -> str:
    """
    The text report's line on the last change of state of a held job or
    one whose latest run failed: from and to, when (ISO 8601, UTC), and its cause, on one line
    (control characters as spaces) and cut at L{LAST_CAUSE_LENGTH}.
    """
    at = datetime.fromtimestamp(change["time"], timezone.utc).isoformat(timespec="seconds")
    cause = "".join(c if c.isprintable() else " " for c in str(change["cause"]))
    if len(cause) > LAST_CAUSE_LENGTH:
        cause = cause[: LAST_CAUSE_LENGTH - 1] + "…"
    return (
        f"  last change\t{change['from']} -> {change['to']}"
        f" at {at.replace('+00:00', 'Z')}\t{cause}\n"
    )


def _writeFailures(
    store: IStateStore,
    jobs: Iterable[str],
    asJSON: bool,
    asCSV: bool,
    out: TextIO,
) -> None:
    """
    Every failed message of C{jobs} (those with failed messages: the
    others cost no statement): as CSV, with the status site's manifest
    columns; as JSON, a list of objects with those keys; as text, a line
    each (job, folder/key, Message-ID, Date, From, Subject, reason,
    tab-separated).
    """
    if asCSV:
        writeFailuresCSV(store, jobs, _now, out)
        return
    rows = (row for job in jobs for row in failureRows(store, job, _now))
    if asJSON:
        _writeJSON((dict(zip(COLUMNS, row)) for row in rows), out)
        return
    count = 0
    for row in rows:
        named = dict(zip(COLUMNS, row))
        out.write(
            "\t".join(
                str(named[column] or "-")
                for column in ("job", "folder", "key", "message_id", "date", "from", "subject", "reason")
            )
            + "\n"
        )
        count += 1
    out.write(f"{plural(count, 'failed message')}\n")


def _whatFailed(entry: Mapping[str, Any]) -> str:
    """
    What failed in a job's report C{entry}: the job, its messages, or both.
    """
    what = []
    if entry["hold"] is not None and entry["hold"]["state"] == CANCELLED:
        what.append("cancelled by the admin")
    elif entry["job_failure"] is not None:
        what.append("the job failed")
    if entry["failed"]:
        what.append(f"{entry['failed']} {'message' if entry['failed'] == 1 else 'messages'} failed")
    return f"{entry['job']} ({', '.join(what)})"


def _holdEntry(hold: JobHold | None) -> dict[str, object] | None:
    """
    The report's C{hold} member for C{hold}: the state the admin put the
    job in, who asked and when (ISO 8601, UTC).
    """
    if hold is None:
        return None
    at = datetime.fromtimestamp(hold.at, timezone.utc).isoformat(timespec="seconds")
    return {"state": hold.hold, "by": hold.by, "at": at.replace("+00:00", "Z")}
