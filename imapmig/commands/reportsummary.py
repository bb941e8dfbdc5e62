# -*- test-case-name: tests.test_reportsummary -*-
"""
The end of C{imapmig report}: what became of each job (its outcome) and
the summary of the run (jobs done, done with failures, failed, held, not
run; messages, octets, duration, rate); and its machine-readable forms:
one CSV row per job (C{--csv}), and one CSV of every failed message with
the names its owner knows it by (C{--failures --csv}), with the columns of
the status site's manifests.

A module of its own beside L{imapmig.commands.cli}, which parses the command line
and builds each job's entry: the summary is one function over those
entries (L{summarise}), so that a new count (say, of messages found only
in a label view) is one field here and one line in L{summaryLines}.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence, TextIO

from attrs import frozen

from imapmig.state import CANCELLED, PAUSED, IStateStore, MessageOutcome
from imapmig.status.manifest import COLUMNS, ManifestRow, inertCell, outcomeRow
from imapmig.units import octets

__all__ = [
    "DONE",
    "DONE_WITH_FAILURES",
    "FAILED",
    "JOB_COLUMNS",
    "NOT_RUN",
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
"""
A job's outcome (L{jobOutcome}): also L{PAUSED} and L{CANCELLED}, the
holds.
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
    What became of the job of a report C{entry} (as L{imapmig.commands.cli.report}
    builds it), one of: L{CANCELLED}, L{PAUSED} (the admin's holds, first),
    L{FAILED} (its latest run failed), L{DONE_WITH_FAILURES} (some
    messages failed), L{NOT_RUN} (nothing recorded of it), L{DONE}.
    """
    hold = entry["hold"]
    if hold is not None:
        return str(hold["state"])
    if entry["job_failure"] is not None:
        return FAILED
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


def summarise(entries: Sequence[Mapping[str, Any]]) -> RunSummary:
    """
    The summary of the report's C{entries}.
    """
    outcomes = {name: 0 for name in (DONE, DONE_WITH_FAILURES, FAILED, PAUSED, CANCELLED, NOT_RUN)}
    for entry in entries:
        outcomes[jobOutcome(entry)] += 1
    firsts = [entry["first_at"] for entry in entries if entry["first_at"] is not None]
    lasts = [entry["last_at"] for entry in entries if entry["last_at"] is not None]
    return RunSummary(
        outcomes=outcomes,
        copied=sum(entry["copied"] for entry in entries),
        alreadyPresent=sum(entry["already_present"] for entry in entries),
        failed=sum(entry["failed"] for entry in entries),
        copiedOctets=sum(entry["copied_octets"] for entry in entries),
        firstAt=min(firsts, default=None),
        lastAt=max(lasts, default=None),
    )


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
        f" {o[CANCELLED]:,} cancelled), {o[NOT_RUN]:,} not run",
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


def writeJobsCSV(entries: Sequence[Mapping[str, Any]], out: TextIO) -> None:
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
        after = (page[-1].folderKey, page[-1].messageKey)


def writeFailuresCSV(store: IStateStore, jobs: Sequence[str], now: Any, out: TextIO) -> int:
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
