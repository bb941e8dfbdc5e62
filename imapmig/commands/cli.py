# -*- test-case-name: tests.test_cli -*-
"""
The imapmig command, for admins.

    imapmig report --config FILE [--job NAME] [--json | --csv] [--failures]

prints what the state database says, per job: how many messages were
copied, found already present and failed, how many had their line endings
converted, why the job's latest run failed (a refused login, TLS refused,
retries given up) if it did, every failed message with its reason and
every message with a note (something not carried over exactly), and the
admin's hold on the job if any (paused or cancelled, by whom, when), and
for a held job or one whose run failed its last change of state with its
cause;
then a summary of the run (jobs done, done with failures, failed, held,
not run; messages, octets, duration, rate).  C{--json} carries each job's
timeline too (every change of state kept); C{--csv} writes one row per
job instead (no summary); C{--failures} lists every failed message of
every job with its Message-ID, Date, From and Subject (with C{--csv}, as
the status site's C{/manifest.csv}).
Exit status 0 when no job and no message is recorded as failed, 1 when
any is (a last line names them), 2 on an invalid configuration or usage.
A cancelled job counts as failed (it did not complete); a paused one
does not (it is listed on a "paused:" line), unless something of it
failed.

    imapmig verify --config FILE [--job NAME] [--report FILE]

compares each job's source with its destination, folder by folder: every
message's SHA-256, flags and INTERNALDATE.  It prints a summary and every
difference, writes the whole report as JSON (default
C{imapmig-verify.json} in the state database's directory, where the
daemon's status shows its result as C{run.verify}), and exits 0 when
there is no difference, 1 when there is any (or a job could not be
verified, or the report could not be written), 2 on an invalid
configuration.

    imapmig plan --config FILE [--job NAME] [--json]

shows, per job, what a run would do now, writing nothing anywhere: the
source's folders with their message counts and sizes, the destination
mailbox each goes to (and why), the messages the state database records
as migrated and those left to copy, and the mailboxes the run would
create.  Exit status 0, 1 when a job could not be planned (each says
why), 2 on an invalid configuration.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Sequence, TextIO, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

import imapmig
from imapmig.config import Config, ImapSourceConfig, JobConfig, loadConfig
from imapmig.errors import ConfigError, ConnectFailed, ImapmigError, PermanentError
from imapmig.commands.reportsummary import (
    failureRows,
    summarise,
    summaryLines,
    writeFailuresCSV,
    writeJobsCSV,
)
from imapmig.state import CANCELLED, PAUSED, IStateStore, JobHold
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.status.manifest import COLUMNS
from imapmig.units import octets, plural

if TYPE_CHECKING:
    from imapmig.commands.preview import FolderPlan, JobPlan

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


def report(
    store: IStateStore,
    jobs: Sequence[str],
    asJSON: bool,
    out: TextIO,
    asCSV: bool = False,
    failures: bool = False,
) -> int:
    """
    Write the report of C{jobs} from C{store} to C{out}: as text, ending
    with the summary of the run (L{summaryLines}); as JSON; or as CSV, one
    row per job (L{writeJobsCSV}).  With C{failures}, every failed message
    instead, with its names (L{writeFailuresCSV} as CSV).

    @return: the exit status: 0 when no job's latest run failed and no
        message is recorded as failed, 1 otherwise.
    """
    document = []
    holds = _now(store.jobHolds())
    for job in jobs:
        hold = holds.get(job)
        jobFailure = _now(store.jobFailure(job))
        counts = _now(store.counts(job))
        activity = _now(store.activity(job))
        failed = _now(store.failures(job))
        notes = _now(store.notes(job))
        fallbacks = _now(store.folderFallbacks(job))
        timeline = _now(store.timeline(job))
        document.append(
            {
                "job": job,
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
                    for f in failed
                ],
                "notes": [
                    {
                        "folder_key": n.folderKey,
                        "message_key": n.messageKey,
                        "mailbox": n.mailbox,
                        "uid": n.uid,
                        "note": n.note,
                    }
                    for n in notes
                ],
                "folder_fallbacks": [
                    {"mailbox": f.mailbox, "fallback": f.fallback, "reason": f.reason}
                    for f in fallbacks
                ],
                "timeline": [
                    {"time": t.time, "from": t.source, "to": t.target, "cause": t.cause, "by": t.by}
                    for t in timeline
                ],
            }
        )
    status = 0 if all(entry["ok"] for entry in document) else 1
    if failures:
        _writeFailures(store, jobs, asJSON, asCSV, out)
        return status
    if asJSON:
        json.dump(document, out, indent=2)
        out.write("\n")
        return status
    if asCSV:
        writeJobsCSV(document, out)
        return status
    _writeText(document, out)
    return status


def _writeText(document: Sequence[dict[str, Any]], out: TextIO) -> None:
    """
    The text report: a line per job with what failed, then the summary.
    """
    for entry in document:
        _writeEntry(entry, out)
    paused = [
        str(entry["job"])
        for entry in document
        if entry["hold"] is not None and entry["hold"]["state"] == PAUSED
    ]
    for line in summaryLines(summarise(document)):
        out.write(line + "\n")
    if paused:
        out.write(f"paused: {_listed(paused)}\n")
    failed = [_whatFailed(entry) for entry in document if not entry["ok"]]
    if failed:
        out.write(f"failed: {_listed(failed)}\n")


LISTED_JOBS = 20
"""
The most jobs the text report's C{paused:} and C{failed:} lines name: the
300-account run's C{failed:} line named 163 jobs, 60 terminal rows that
pushed its summary off the screen.
"""


def _listed(names: Sequence[str]) -> str:
    """
    The first L{LISTED_JOBS} of C{names}, and how many more there are.
    """
    shown = ", ".join(names[:LISTED_JOBS])
    more = len(names) - LISTED_JOBS
    return shown if more <= 0 else f"{shown} and {more:,} more (imapmig report --csv lists every job)"


def _writeEntry(entry: dict[str, Any], out: TextIO) -> None:
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


def _lastChange(change: dict[str, Any]) -> str:
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
    jobs: Sequence[str],
    asJSON: bool,
    asCSV: bool,
    out: TextIO,
) -> None:
    """
    Every failed message of C{jobs}: as CSV, with the status site's
    manifest columns; as JSON, a list of objects with those keys; as text,
    a line each (job, folder/key, Message-ID, Date, From, Subject,
    reason, tab-separated).
    """
    if asCSV:
        writeFailuresCSV(store, jobs, _now, out)
        return
    rows = [row for job in jobs for row in failureRows(store, job, _now)]
    if asJSON:
        json.dump([dict(zip(COLUMNS, row)) for row in rows], out, indent=2)
        out.write("\n")
        return
    for row in rows:
        named = dict(zip(COLUMNS, row))
        out.write(
            "\t".join(
                str(named[column] or "-")
                for column in ("job", "folder", "key", "message_id", "date", "from", "subject", "reason")
            )
            + "\n"
        )
    out.write(f"{plural(len(rows), 'failed message')}\n")


def _whatFailed(entry: dict[str, Any]) -> str:
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


async def verify(
    config: Config,
    jobs: Sequence[str],
    store: IStateStore,
    reactor: Any,
    reportPath: str,
    out: TextIO,
    besideState: bool = False,
) -> int:
    """
    Verify C{jobs}: print a summary and every difference to C{out}, write
    the JSON report to C{reportPath}.

    @param besideState: C{reportPath} is the default one, beside the state
        database (not given with C{--report}).
    @return: the exit status: 0 without differences, 1 otherwise (also
        when the report cannot be written: L{reportNotWritten} says why).
    """
    from imapmig.daemon.service import destinationOpener, sourceFor
    from imapmig.sources.imap import IMAPSource
    from imapmig.oauth.tokens import TokenSources
    from imapmig.commands.verify import verifyJob, writeReport

    document: list[dict[str, object]] = []
    status = 0
    # One refresh-token cache per file for the whole command.
    tokens = TokenSources(reactor)
    for job in config.jobs:
        if job.name not in jobs:
            continue
        openDestination = destinationOpener(job, reactor, tokens=tokens)
        source = sourceFor(job, reactor, tokens=tokens)
        try:
            try:
                result = await verifyJob(job.name, source, job.folders, openDestination, store)
            finally:
                if isinstance(source, IMAPSource):
                    await source.close()
        except ImapmigError as e:
            out.write(f"{job.name}: cannot verify: {e}\n")
            document.append({"job": job.name, "error": str(e)})
            status = 1
            continue
        differences = result.differences
        sourceCount = sum(m.sourceMessages for m in result.mailboxes)
        destinationCount = sum(m.destinationMessages for m in result.mailboxes)
        out.write(
            f"{job.name}: {plural(len(result.mailboxes), 'mailbox', 'mailboxes')},"
            f" {plural(sourceCount, 'source message')}, {destinationCount} in the"
            f" destination: {plural(len(differences), 'difference')}\n"
        )
        for d in differences:
            where = d.folder or "-"
            what = d.messageKey or (f"UID {d.uid}" if d.uid is not None else "-")
            out.write(f"  {d.kind}\t{d.mailbox}\t{where}\t{what}\t{d.detail}\n")
        if differences:
            status = 1
        document.append(result.toJSON())
    try:
        writeReport(reportPath, document)
    except OSError as e:
        out.write(reportNotWritten(reportPath, e, besideState))
        return 1
    out.write(f"report written to {reportPath}\n")
    return status


def reportNotWritten(path: str, error: OSError, besideState: bool) -> str:
    """
    The line saying that C{imapmig verify} could not write its report.

    @param path: where it tried.
    @param error: why not.
    @param besideState: C{path} is the default, beside the state database.
    @return: the line, with what to do about it.
    """
    why = error.strerror or str(error)
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = f"the directory {os.path.dirname(os.path.abspath(path))} is not writable ({why})"
    if besideState:
        return (
            f"cannot write the report {path} beside the state database: {why};"
            " give --report FILE to write it elsewhere\n"
        )
    return f"cannot write the report {path}: {why}\n"


def _sourceDescription(job: JobConfig) -> str:
    """
    The job's source, for the admin: the account or the path.
    """
    source = job.source
    if isinstance(source, ImapSourceConfig):
        return f"IMAP {source.user} at {source.server.endpoint}"
    kind = type(source).__name__.replace("SourceConfig", "").lower()
    return f"{kind} {source.path}"


def _planRow(f: FolderPlan) -> tuple[str, str, str, str, str, str, str]:
    """
    One folder's row of a plan's table (L{_writePlan}).
    """
    folder = f.folder + (f" ({f.specialUse})" if f.specialUse else "")
    if f.error is not None:
        return (folder, "-", "-", f.mailbox or "-", "unreadable", "-", "-")
    if f.why is not None:
        return (folder, str(f.messages), "-", "-", f.how, "-", "-")
    if f.mailbox is None:
        return (folder, str(f.messages), octets(f.size), "-", "left out by the folder rules", "-", "-")
    toCopy = f"{f.toCopy} ({octets(f.toCopySize)})" if f.toCopy else "0"
    mailbox = f.mailbox + ("" if f.mailboxExists else " (new)")
    return (folder, str(f.messages), octets(f.size), mailbox, f.how, str(f.migrated), toCopy)


def _writePlan(preview: JobPlan, out: TextIO) -> None:
    """
    Write one job's plan as a table.
    """
    namespace = preview.namespace
    out.write(
        f"  destination namespace: prefix {namespace.prefix!r},"
        f" delimiter {namespace.delimiter!r}\n"
    )
    rows = [("folder", "messages", "size", "mailbox", "how", "migrated", "to copy")]
    rows.extend(_planRow(f) for f in preview.folders)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    for f in preview.unreadable:
        out.write(f"  cannot list {f.folder}: {f.error}\n")
    for f in preview.folders:
        if f.why is not None:
            out.write(f"  {f.how} {f.folder}: {plural(f.messages, 'message')}: {f.why}\n")
    for name, use in preview.create:
        out.write(f"  would create {name}" + (f" ({use})" if use else "") + "\n")
    for name in preview.subscribe:
        out.write(f"  would subscribe {name}\n")
    totals = preview.totals()
    failedBefore = sum(f.failedBefore for f in preview.folders)
    out.write(
        f"  total: {plural(totals['messages'], 'message')} ({octets(totals['size'])}) in"
        f" {plural(totals['folders'], 'folder')} ({totals['excluded_folders']} left out):"
        f" {totals['migrated']} migrated, {totals['to_copy']} to copy"
        f" ({octets(totals['to_copy_size'])})"
        + (f", {failedBefore} of them failed before" if failedBefore else "")
        + (f", {totals['not_migrated']} not migrated" if totals["not_migrated"] else "")
        + f"; {plural(totals['mailboxes_to_create'], 'mailbox', 'mailboxes')} to create\n"
    )


async def plan(
    config: Config,
    jobs: Sequence[str],
    store: IStateStore,
    reactor: Any,
    asJSON: bool,
    out: TextIO,
) -> int:
    """
    Plan C{jobs} (L{imapmig.commands.preview.previewJob}) and write each plan to
    C{out}, as text tables or one JSON document.  Nothing is written
    anywhere else.

    @return: the exit status: 0 when every job was planned, 1 otherwise.
    """
    from imapmig.commands.preview import previewJob
    from imapmig.daemon.service import destinationOpener, sourceFor
    from imapmig.sources.imap import IMAPSource
    from imapmig.oauth.tokens import TokenSources

    document: list[dict[str, object]] = []
    status = 0
    # One refresh-token cache per file for the whole command.
    tokens = TokenSources(reactor)
    for job in config.jobs:
        if job.name not in jobs:
            continue
        destination = job.destination
        openDestination = destinationOpener(job, reactor, tokens=tokens)
        source = sourceFor(job, reactor, tokens=tokens)
        header = (
            f"{job.name}: {_sourceDescription(job)} -> {destination.user} at"
            f" {destination.server.endpoint}"
        )
        try:
            try:
                preview = await previewJob(
                    job.name,
                    source,
                    job.folders,
                    openDestination,
                    store,
                    job.folderNameFallback,
                )
            finally:
                if isinstance(source, IMAPSource):
                    await source.close()
        except ImapmigError as e:
            status = 1
            why = str(e)
            if isinstance(e, ConnectFailed) and e.setting is not None:
                why = f"{why}; check {e.setting}"
            document.append({"job": job.name, "error": why})
            if not asJSON:
                out.write(f"{header}\n  cannot plan: {why}\n")
            continue
        if preview.unreadable:
            status = 1
        entry = preview.toJSON()
        entry["source"] = _sourceDescription(job)
        entry["destination"] = f"{destination.user} at {destination.server.endpoint}"
        document.append(entry)
        if not asJSON:
            out.write(header + "\n")
            _writePlan(preview, out)
    if asJSON:
        json.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
    return status


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """
    Run the command; return its exit status.
    """
    parser = argparse.ArgumentParser(prog="imapmig", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--version", action="version", version=f"imapmig {imapmig.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    reportParser = commands.add_parser(
        "report", help="messages appended and failed, with every failure's reason"
    )
    reportParser.add_argument("--config", required=True, help="the YAML configuration")
    reportParser.add_argument("--job", action="append", help="only this job (repeatable)")
    reportForm = reportParser.add_mutually_exclusive_group()
    reportForm.add_argument("--json", action="store_true", help="JSON output")
    reportForm.add_argument(
        "--csv", action="store_true", help="CSV output: one row per job, or per failure"
    )
    reportParser.add_argument(
        "--failures",
        action="store_true",
        help="every failed message of every job, with its Message-ID, Date, From and Subject",
    )
    verifyParser = commands.add_parser(
        "verify", help="compare each job's source and destination, message by message"
    )
    verifyParser.add_argument("--config", required=True, help="the YAML configuration")
    verifyParser.add_argument("--job", action="append", help="only this job (repeatable)")
    verifyParser.add_argument(
        "--report",
        default=None,
        help="where to write the JSON report (default: imapmig-verify.json beside the state"
        " database, where the daemon's status page shows its result)",
    )
    planParser = commands.add_parser(
        "plan", help="what a run would copy and create, writing nothing"
    )
    planParser.add_argument("--config", required=True, help="the YAML configuration")
    planParser.add_argument("--job", action="append", help="only this job (repeatable)")
    planParser.add_argument("--json", action="store_true", help="JSON output")
    args = parser.parse_args(argv)
    try:
        config = loadConfig(args.config)
    except ConfigError as e:
        for problem in e.shown():
            sys.stderr.write(problem + "\n")
        return 2
    names = [job.name for job in config.jobs]
    for name in args.job or ():
        if name not in names:
            sys.stderr.write(f"{args.config}: no job named {name!r} (jobs: {', '.join(names)})\n")
            return 2
    store: IStateStore
    try:
        if args.command == "plan" and not os.path.exists(config.statePath):
            # No state database yet: nothing was copied, and plan creates
            # none.
            store = MemoryStateStore()
        else:
            store = SQLiteStateStore(config.statePath, seconds=lambda: 0.0, readOnly=True)
    except PermanentError as e:
        sys.stderr.write(f"{e}\n")
        return 2
    try:
        if args.command == "report":
            return report(
                store, args.job or names, args.json, out, asCSV=args.csv, failures=args.failures
            )
        if args.command == "plan":
            return _runReactor(
                lambda reactor: plan(config, args.job or names, store, reactor, args.json, out)
            )
        from imapmig.status.verifyreport import defaultReportPath

        reportPath = args.report or defaultReportPath(config.statePath)
        return _runReactor(
            lambda reactor: verify(
                config, args.job or names, store, reactor, reportPath, out, args.report is None
            )
        )
    finally:
        store.close()


def _runReactor(main: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    """
    Run C{main(reactor)} on the global reactor until it ends; return its
    result.
    """
    from twisted.internet import reactor

    results: list[int] = []

    def done(result: object) -> None:
        if isinstance(result, Failure):
            sys.stderr.write(result.getTraceback())
            results.append(1)
        else:
            results.append(int(result))  # type: ignore[call-overload]
        reactor.stop()

    def start() -> None:
        Deferred.fromCoroutine(main(reactor)).addBoth(done)

    reactor.callWhenRunning(start)
    reactor.run()
    return results[0] if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
