# -*- test-case-name: tests.test_status_api -*-
"""
The audit manifest of a job: every message imapmig did not copy (failed,
or already present in the destination) and every source folder its folder
rules left out, as CSV (RFC 4180) or JSON, written to the response page
by page as the state store reads them, never built whole.

Columns: job, outcome (C{failed}, C{already_present}, C{excluded}),
folder, mailbox, key, size, message_id, date, from, subject, reason.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Callable, Iterable, Mapping, Sequence

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Request
from zope.interface import implementer

from imapmig.mail.folders import FolderRules, isIncluded
from imapmig.state import MessageOutcome
from imapmig.status.redact import withoutPaths

log = Logger()

__all__ = [
    "COLUMNS",
    "ManifestProducer",
    "ManifestRow",
    "ManifestSection",
    "exclusionReason",
    "excludedRows",
    "inertCell",
    "outcomeRow",
]

COLUMNS = (
    "job", "outcome", "folder", "mailbox", "key", "size", "message_id", "date", "from",
    "subject", "reason",
)  # fmt: skip
"""
The manifest's columns, in order: the CSV header, the JSON objects' keys.
"""

PAGE_ROWS = 500
"""
How many rows are read from the store, and written, at a time.
"""

ManifestRow = tuple[
    str, str, str, str, str, "int | None", "str | None", "str | None", "str | None",
    "str | None", str,
]  # fmt: skip
"""
One row of the manifest, in the order of L{COLUMNS}.
"""


def outcomeRow(
    job: str, outcome: MessageOutcome, folderNames: Mapping[str, str], paths: bool = False
) -> ManifestRow:
    """
    The manifest row of a message not copied.

    @param folderNames: the job's folder names by key, as listed; a
        folder not among them is shown by its key.
    @param paths: keep the filesystem paths in a failure's reason: for
        C{imapmig report}, whose reader has the state database (and the
        paths in it) already.  The status site's page is unauthenticated:
        there each path is L{withoutPaths}'s placeholder (the log has it).
    """
    if outcome.failure is not None:
        kind = "failed"
        reason = outcome.failure if paths else withoutPaths(outcome.failure)
    else:
        kind, reason = "already_present", _presentReason(outcome)
    return (
        job,
        kind,
        folderNames.get(outcome.folderKey, outcome.folderKey),
        outcome.mailbox,
        outcome.messageKey,
        outcome.size,
        outcome.messageId,
        outcome.date,
        outcome.sender,
        outcome.subject,
        reason,
    )


def _presentReason(outcome: MessageOutcome) -> str:
    """
    Why an already present message was not copied, in words.
    """
    where = "" if outcome.uid is None else f" as UID {outcome.uid}"
    return f"already in the destination{where} (found by its identity); not copied again"


def exclusionReason(folder: str, rules: FolderRules) -> str:
    """
    Which folder rule leaves out C{folder} (levels joined with C{/}), in
    words.
    """
    path = tuple(folder.split("/"))
    for pattern in rules.exclude:
        if not isIncluded(path, FolderRules(exclude=(pattern,))):
            return f"left out by the folder rules: matches exclude pattern {pattern!r}"
    if rules.include and not isIncluded(path, FolderRules(include=rules.include)):
        patterns = ", ".join(repr(p) for p in rules.include)
        return f"left out by the folder rules: matches no include pattern ({patterns})"
    return "left out by the folder rules"


def excludedRows(job: str, folders: Sequence[str], rules: FolderRules | None) -> list[ManifestRow]:
    """
    The manifest rows of the source folders C{folders} that C{job}'s folder
    C{rules} leave out: one per folder, with no key.
    """
    return [
        (
            job,
            "excluded",
            folder,
            "",
            "",
            None,
            None,
            None,
            None,
            None,
            "left out by the folder rules" if rules is None else exclusionReason(folder, rules),
        )
        for folder in folders
    ]


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inertCell(value: object) -> object:
    """
    C{value} as a CSV cell a spreadsheet will not run: a text starting
    with C{=}, C{+}, C{-}, C{@}, a tab or a carriage return (a folder name
    or a server's reason such as C{=HYPERLINK(...)}) gets a leading C{'},
    as OWASP advises for CSV injection.  Numbers and L{None} are left as
    they are; the JSON manifest is never changed.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


class _CSVFormat:
    """
    Rows as RFC 4180 CSV: CRLF line ends, fields with a comma, a quote or
    a line end quoted, quotes doubled.
    """

    contentType = b"text/csv; charset=utf-8; header=present"

    def start(self) -> bytes:
        return self.rows([COLUMNS])  # type: ignore[list-item]

    def rows(self, rows: Sequence[ManifestRow]) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        # The csv module writes None as an empty field.
        writer.writerows([tuple(map(inertCell, row)) for row in rows])
        return out.getvalue().encode("utf-8")

    def end(self) -> bytes:
        return b""


class _JSONFormat:
    """
    Rows as one JSON array of objects with the keys of L{COLUMNS}.
    """

    contentType = b"application/json; charset=utf-8"

    def __init__(self) -> None:
        self._first = True

    def start(self) -> bytes:
        return b"["

    def rows(self, rows: Sequence[ManifestRow]) -> bytes:
        text = ",".join(
            json.dumps(dict(zip(COLUMNS, row)), ensure_ascii=False, separators=(",", ":"))
            for row in rows
        )
        if not self._first:
            text = "," + text
        self._first = False
        return text.encode("utf-8")

    def end(self) -> bytes:
        return b"]\n"


def manifestFormat(kind: str) -> _CSVFormat | _JSONFormat:
    """
    The writer of the manifest as C{kind}: C{"csv"} or C{"json"}.
    """
    return _CSVFormat() if kind == "csv" else _JSONFormat()


OutcomePages = Callable[["tuple[str, str] | None", int], "Deferred[list[MessageOutcome]]"]
"""
The store's pages of a job's messages not copied: given the key after
which to start and how many, a Deferred list of outcomes
(L{imapmig.state.IStateStore.manifestOutcomes} with the job bound).
"""


@frozen
class ManifestSection:
    """
    One job's part of a manifest.

    @ivar job: the job's name, the first column of every row.
    @ivar excluded: the rows of its excluded folders, written first.
    @ivar pages: the store's pages of its messages not copied.
    @ivar folderNames: its folder names by key (L{outcomeRow}).
    @ivar failedOnly: only the failed messages, not those already present
        (the manifest of every job: what was not migrated).
    """

    job: str
    excluded: Sequence[ManifestRow]
    pages: OutcomePages
    folderNames: Mapping[str, str] = {}
    failedOnly: bool = False


@implementer(IPushProducer)
class ManifestProducer:
    """
    Writes a manifest to a request: per section (one job's), its excluded
    folders, then the store's messages not copied, one page of
    L{PAGE_ROWS} at a time, each read only once the previous one is
    written and while the client is not pausing the response.
    """

    def __init__(
        self,
        request: Request,
        sections: Iterable[ManifestSection],
        form: _CSVFormat | _JSONFormat,
        pageRows: int = PAGE_ROWS,
    ) -> None:
        """
        @param request: the response to write to; its headers are set.
        @param sections: the jobs' parts, in order (taken one at a time:
            a generator makes each when its turn comes).
        @param form: the format to write.
        @param pageRows: rows per page.
        """
        self._request = request
        self._sections = iter(sections)
        self._section: ManifestSection | None = None
        self._form = form
        self._pageRows = pageRows
        self._after: tuple[str, str] | None = None
        self._paused = False
        self._reading = False
        self._done = False

    def start(self) -> None:
        """
        Begin writing: the start of the document, then the sections as
        the client takes them.
        """
        self._request.registerProducer(self, True)
        self._request.notifyFinish().addErrback(lambda _: self.stopProducing())
        self._request.write(self._form.start())
        self._run()

    def _nextSection(self) -> ManifestSection | None:
        """
        Move on to the next section, writing its excluded folders.

        @return: the section; L{None} at the end of the manifest (which is
            then ended).
        """
        section = self._section = next(self._sections, None)
        self._after = None
        if section is None:
            self._request.write(self._form.end())
            self._finish(complete=True)
        elif section.excluded:
            self._request.write(self._form.rows(section.excluded))
        return section

    def _run(self) -> None:
        """
        Read and write pages until the client pauses, a read is pending,
        or the manifest is done.
        """
        while not (self._paused or self._reading or self._done):
            section = self._nextSection() if self._section is None else self._section
            if section is None:
                return
            answered = self._read(section)
            if not answered:
                return
            self._page(answered[0])

    def _read(self, section: ManifestSection) -> list[object]:
        """
        Ask the store for the next page of C{section}.

        @return: the store's answer if it answered at once (a list of one
            page or failure); else empty, and the writing goes on from
            its answer when it comes.
        """
        self._reading = True
        synchronous = True
        answered: list[object] = []

        def got(result: object) -> None:
            if synchronous:
                answered.append(result)
            else:
                # The store answered later: go on from its answer.
                self._page(result)
                self._run()

        section.pages(self._after, self._pageRows).addBoth(got)
        synchronous = False
        return answered

    def _page(self, result: object) -> None:
        """
        Write one page the store read (or end the response if it could
        not).
        """
        self._reading = False
        section = self._section
        if self._done or section is None:
            return
        if isinstance(result, Failure):
            log.error(
                "Cannot read the manifest of job {job}: {why}; the download is cut short",
                job=section.job,
                why=str(result.value),
            )
            self._finish(complete=False)
        elif not result:
            self._section = None
        else:
            self._writePage(section, result)  # type: ignore[arg-type]

    def _writePage(self, section: ManifestSection, outcomes: list[MessageOutcome]) -> None:
        """
        Write the rows of C{outcomes}, a page of C{section}, and note where
        the next page starts.
        """
        last = outcomes[-1]
        self._after = (last.folderKey, last.messageKey)
        rows = [
            outcomeRow(section.job, o, section.folderNames)
            for o in outcomes
            if not (section.failedOnly and o.failure is None)
        ]
        if rows:
            self._request.write(self._form.rows(rows))

    def _finish(self, complete: bool) -> None:
        """
        End the response: finished if C{complete}, else the connection is
        dropped so that the client sees a truncated download, not a short
        manifest that looks whole.
        """
        self._done = True
        self._request.unregisterProducer()
        if complete:
            self._request.finish()
        else:
            channel = self._request.channel
            if channel is not None and channel.transport is not None:
                channel.transport.loseConnection()

    def pauseProducing(self) -> None:
        """
        The client's buffer is full: stop reading pages.
        """
        self._paused = True

    def resumeProducing(self) -> None:
        """
        The client takes more: go on.
        """
        self._paused = False
        self._run()

    def stopProducing(self) -> None:
        """
        The client is gone: stop.
        """
        self._done = True
