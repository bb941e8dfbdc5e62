# -*- test-case-name: tests.test_status_api -*-
"""
The summary of C{imapmig verify}'s JSON report for C{/status.json}'s
C{run.verify}: read again only when the file changes, and L{None} while it
is missing or cannot be read; and where the report is by default
(L{defaultReportPath}), which the daemon's assembly asks without importing
the verify command.
"""

from __future__ import annotations

import json
import os

from twisted.logger import Logger

log = Logger()

__all__ = ["REPORT_NAME", "VerifyReportSummary", "defaultReportPath", "summarise"]

REPORT_NAME = "imapmig-verify.json"
"""
The file name of C{imapmig verify}'s JSON report, by default beside the
state database, where the daemon's status finds it.
"""


def defaultReportPath(statePath: str) -> str:
    """
    Where C{imapmig verify} writes its report unless told otherwise: the
    directory of the state database C{statePath}, under L{REPORT_NAME}.
    """
    return os.path.join(os.path.dirname(os.path.abspath(statePath)), REPORT_NAME)


# A report larger than this is not read on the reactor thread; verify's
# reports are a few kilobytes per job.
_MAX_OCTETS = 64 * 1024 * 1024


def summarise(document: object) -> tuple[bool, int, int, int]:
    """
    C{(ok, jobs, differences, unverified)} of a verify report (the list C{imapmig
    verify} writes: one entry per job, with its C{differences} count, or an
    C{error} when the job could not be verified).

    @raise ValueError: C{document} is not such a report.
    """
    if not isinstance(document, list):
        raise ValueError("not a list of jobs")
    counts = [_differencesOf(entry) for entry in document]
    differences = sum(count for count in counts if count is not None)
    unverified = counts.count(None)
    return differences == unverified == 0, len(document), differences, unverified


def _differencesOf(entry: object) -> int | None:
    """
    The differences a job's entry of a verify report counts; L{None} if
    the job could not be verified (its C{error}).

    @raise ValueError: C{entry} is not a job's report.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("job"), str):
        raise ValueError("an entry is not a job's report")
    if entry.get("error") is not None:
        return None
    count = entry.get("differences")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"job {entry['job'][:80]!r} has no count of differences")
    return count


class VerifyReportSummary:
    """
    The summary of the verify report at one path.
    """

    def __init__(self, path: str) -> None:
        """
        @param path: where C{imapmig verify} writes its report.
        """
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._summary: dict[str, object] | None = None
        self._warned: object = None

    def current(self) -> dict[str, object] | None:
        """
        The contract's C{run.verify}: C{time} (the report's modification
        time), C{ok}, C{jobs}, C{differences} and C{unverified} (the jobs
        that could not be verified; not the report's path: the page is
        unauthenticated); L{None} when there is no readable
        report.  The file is read again only when its
        modification time or size changed since the last call.
        """
        try:
            status = os.stat(self.path)
        except OSError as e:
            self._seen = None
            self._summary = None
            self._warnOnce("missing", e)
            return None
        seen = (status.st_mtime_ns, status.st_size)
        if seen == self._seen:
            return self._summary
        self._seen = seen
        self._summary = None
        try:
            if status.st_size > _MAX_OCTETS:
                raise ValueError(f"{status.st_size} octets, too large to be a verify report")
            with open(self.path, "rb") as f:
                ok, jobs, differences, unverified = summarise(json.load(f))
        except (OSError, ValueError) as e:
            self._warnOnce(seen, e)
            return None
        self._warned = None
        self._summary = {
            "time": status.st_mtime_ns / 1e9,
            "ok": ok,
            "jobs": jobs,
            "differences": differences,
            "unverified": unverified,
        }
        return self._summary

    def _warnOnce(self, what: object, error: Exception) -> None:
        """
        Log why the report cannot be shown, once per missing spell or per
        version of an unreadable file.
        """
        if self._warned == what:
            return
        self._warned = what
        if what == "missing":
            log.info(
                "No verify report at {path} ({why}); run imapmig verify to write one",
                path=self.path,
                why=error.strerror if isinstance(error, OSError) else str(error),
            )
        else:
            log.warn(
                "Cannot read the verify report {path}: {why}; the status shows none",
                path=self.path,
                why=str(error)[:200],
            )
