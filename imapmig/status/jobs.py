# -*- test-case-name: tests.test_status_api, tests.test_status_fleet -*-
"""
C{/jobs/...}: one job's detail, its failed messages page by page, and its
audit manifest.

    /jobs/NAME.json                 the job (with the daemon holding it), its
                                    folders, its first failures, its timeline
    /jobs/NAME/failures.json        ?offset=&limit=&q=&after= failed messages
    /jobs/NAME/manifest.csv         every message not copied, to download
    /jobs/NAME/manifest.json        the same as JSON
    /manifest.csv, /manifest.json   what was not migrated, every job
                                    (L{runManifest}, mounted at the root)

C{NAME} is one path segment, percent-decoded (twisted.web decodes each
segment, so a C{/} in a name travels as C{%2F}) and then UTF-8.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator, Mapping
from urllib.parse import quote

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET, Request

import imapmig
from imapmig.mail.folders import FolderRules
from imapmig.progress import JobProgress
from imapmig.errors import HTTPProblem, TransientError
from imapmig.queue.fleetview import IFleetView, JobRow, SingleDaemonView
from imapmig.status.redact import withoutPaths
from imapmig.state import FailuresPage, IStateStore, MessageOutcome, Transition
from imapmig.status._http import (
    READ_METHODS,
    JSONNotFound,
    ReadOnlyResource,
    commonHeaders,
    jsonBody,
    refuseMethod,
)
from imapmig.status.manifest import (
    ManifestProducer,
    ManifestSection,
    excludedRows,
    manifestFormat,
)
from imapmig.status.fleet import FleetParts, readFleet, remoteDocument
from imapmig.status.progressview import ProgressView
from imapmig.status.query import FailureQuery, parseFailureQuery

__all__ = ["JobsResource", "runManifest", "failureItem", "timelineItem"]

FIRST_FAILURES = 50
"""
How many failures C{/jobs/NAME.json} carries (its first page).
"""

RulesOf = Callable[[str], "FolderRules | None"]
"""
A job's folder rules by its name (L{None} for an unknown job).
"""

SCHEMA = 2
"""
The version of the JSON documents' layout (C{"schema"}); 2 since a job's
C{state} is its machine's (C{waiting}, C{paused_by_server}, C{deferred},
C{done_with_failures} besides the states of 1) and a job has C{wait}.
"""



def failureItem(outcome: MessageOutcome, folderNames: Mapping[str, str]) -> dict[str, object]:
    """
    The contract's item of a failures page.

    @param folderNames: the job's folder names by key, as listed; a
        folder not among them is shown by its key.
    """
    return {
        "folder": folderNames.get(outcome.folderKey, outcome.folderKey),
        "mailbox": outcome.mailbox,
        "key": outcome.messageKey,
        "size": outcome.size,
        "message_id": outcome.messageId,
        "date": outcome.date,
        "from": outcome.sender,
        "subject": outcome.subject,
        "reason": None if outcome.failure is None else withoutPaths(outcome.failure),
    }


def timelineItem(transition: Transition) -> dict[str, object]:
    """
    The contract's item of a job's C{timeline}; its cause without
    filesystem paths (L{withoutPaths}: the page is unauthenticated).
    """
    return {
        "time": transition.time,
        "from": transition.source,
        "to": transition.target,
        "cause": withoutPaths(transition.cause),
        "by": transition.by,
    }


def _failuresDocument(
    query: FailureQuery, page: FailuresPage, folderNames: Mapping[str, str]
) -> dict[str, object]:
    """
    The contract's C{FAILURES_PAGE}.
    """
    document = query.describe(page.matched, page.matchedExact, page.next)
    document["items"] = [failureItem(outcome, folderNames) for outcome in page.items]
    return document


class _JobContext:
    """
    What every C{/jobs} resource reads: the progress, the store, the
    folder rules, the fleet (L{None}: no holder is shown).
    """

    def __init__(
        self,
        view: ProgressView,
        store: IStateStore,
        rulesOf: RulesOf,
        fleet: IFleetView | None = None,
    ) -> None:
        self.view = view
        self.store = store
        self.rulesOf = rulesOf
        self.fleet = fleet

    def section(self, job: JobProgress, failedOnly: bool = False) -> ManifestSection:
        """
        C{job}'s part of a manifest: its excluded folders, then its
        messages not copied (only the failed ones if C{failedOnly}).
        """
        name = job.name
        store = self.store
        return ManifestSection(
            name,
            excludedRows(name, self.view.excludedFolders(job), self.rulesOf(name)),
            lambda after, limit: store.manifestOutcomes(name, after, limit),
            self.view.folderNames(job),
            failedOnly,
        )

    def header(self) -> dict[str, object]:
        """
        The fields every JSON document starts with.
        """
        return {"schema": SCHEMA, "version": imapmig.__version__, "time": self.view.seconds()}


def _unknown(name: str) -> JSONNotFound:
    return JSONNotFound(f"no job named {name[:200]!r}")


class JobsResource(Resource):
    """
    C{/jobs}: routes C{NAME.json} and C{NAME/...} to the job's resources;
    an unknown job or path is a 404 with a JSON error.
    """

    def __init__(
        self,
        view: ProgressView,
        store: IStateStore,
        rulesOf: RulesOf = lambda name: None,
        fleet: IFleetView | None = None,
    ) -> None:
        """
        @param view: the progress.
        @param store: the state store, for failures and the manifest.
        @param rulesOf: each job's folder rules, to name the rule that
            leaves a folder out in the manifest.
        @param fleet: the fleet, for the daemon holding a job (its
            C{daemon}); L{None}: none is shown.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        self._context = _JobContext(view, store, rulesOf, fleet)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        C{NAME.json} when it is the last segment, else the job C{NAME}.
        """
        try:
            segment = path.decode("utf-8")
        except UnicodeDecodeError:
            return JSONNotFound("a job name is UTF-8")
        if request.postpath:
            return self._jobChild(segment, _JobResource)
        if segment.endswith(".json"):
            name = segment[: -len(".json")]
            fleet = self._context.fleet
            if self._context.view.job(name) is None and _isFleet(fleet):
                return _FleetJobDocument(self._context, name)
            return self._jobChild(name, _JobDocument)
        return JSONNotFound("not found; see /jobs/NAME.json")

    def _jobChild(
        self, name: str, resource: Callable[[_JobContext, JobProgress], IResource]
    ) -> IResource:
        """
        The C{resource} of the job called C{name}, or a 404 naming it.
        """
        job = self._context.view.job(name)
        return _unknown(name) if job is None else resource(self._context, job)

    def render(self, request: Request) -> bytes:
        """
        C{/jobs} itself: 404.
        """
        return JSONNotFound("not found; see /status.json for the jobs").render(request)


class _JobDocument(ReadOnlyResource):
    """
    C{/jobs/NAME.json}: the contract's job detail.
    """

    def __init__(self, context: _JobContext, job: JobProgress) -> None:
        super().__init__()
        self._context = context
        self._job = job

    def renderBody(self, request: Request) -> Deferred[bytes]:
        """
        The job (with the daemon holding it), its folders and excluded
        folders, a first page of its failures (the failures query
        applies), and its timeline.
        """
        query = parseFailureQuery(request.uri, request.args, FIRST_FAILURES)
        view = self._context.view
        job = self._job
        document = self._context.header()
        document["job"] = view.document(job)
        document["folders"] = view.folders(job)
        document["excluded_folders"] = view.excludedFolders(job)
        d = self._context.store.failuresPage(
            job.name, query.offset, query.limit, query.text, query.after
        )

        def failures(page: FailuresPage) -> Deferred[list[Transition]]:
            document["failures"] = _failuresDocument(query, page, view.folderNames(job))
            return self._context.store.timeline(job.name)

        def done(timeline: list[Transition]) -> bytes | Deferred[bytes]:
            document["timeline"] = [timelineItem(transition) for transition in timeline]
            fleet = self._context.fleet
            if fleet is None:
                return jsonBody(document)
            return readFleet(fleet, [job.name], daemons=False).addCallback(held)

        def held(parts: FleetParts) -> bytes:
            detail = document["job"]
            assert isinstance(detail, dict)
            detail["daemon"] = parts.holderOf(job.name)
            return jsonBody(document)

        return d.addCallback(failures).addCallback(done)


def _isFleet(fleet: IFleetView | None) -> bool:
    """
    Whether C{fleet} is a fleet's database (not this daemon alone).
    """
    return fleet is not None and not isinstance(fleet, SingleDaemonView)


class _FleetJobDocument(ReadOnlyResource):
    """
    C{/jobs/NAME.json} of a fleet's job this daemon does not have: what
    the fleet's database knows of it (L{remoteDocument}), its failures and
    timeline from the shared store; a 404 if the fleet has no such job.
    """

    def __init__(self, context: _JobContext, name: str) -> None:
        super().__init__()
        self._context = context
        self._name = name

    def renderBody(self, request: Request) -> Deferred[bytes]:
        """
        The job, its first failures (the failures query applies) and its
        timeline; no folders (its holder lists them).
        """
        query = parseFailureQuery(request.uri, request.args, FIRST_FAILURES)
        context, name = self._context, self._name
        document = context.header()
        fleet = context.fleet
        assert fleet is not None

        def found(row: JobRow | None) -> Deferred[FailuresPage]:
            if row is None:
                raise HTTPProblem(404, f"no job named {name[:200]!r}")
            document["job"] = remoteDocument(row)
            document["folders"] = []
            document["excluded_folders"] = []
            return context.store.failuresPage(name, query.offset, query.limit, query.text, query.after)

        def failures(page: FailuresPage) -> Deferred[list[Transition]]:
            document["failures"] = _failuresDocument(query, page, {})
            return context.store.timeline(name)

        def done(timeline: list[Transition]) -> bytes:
            document["timeline"] = [timelineItem(transition) for transition in timeline]
            return jsonBody(document)

        def unread(failure: Failure) -> Failure:
            if failure.check(TransientError) is not None:
                raise HTTPProblem(503, str(failure.value) or "the fleet could not be read")
            return failure

        d = fleet.jobNamed(name).addErrback(unread)
        return d.addCallback(found).addCallback(failures).addCallback(done)


class _JobResource(Resource):
    """
    C{/jobs/NAME/}: the job's failures and manifests.
    """

    def __init__(self, context: _JobContext, job: JobProgress) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._context = context
        self._job = job

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        C{failures.json}, C{manifest.csv}, C{manifest.json}; else 404.
        """
        if request.postpath:
            return JSONNotFound("not found")
        if path == b"failures.json":
            return _Failures(self._context, self._job)
        if path in (b"manifest.csv", b"manifest.json"):
            return _Manifest(self._context, self._job, path.rpartition(b".")[2].decode())
        return JSONNotFound("not found; see failures.json, manifest.csv, manifest.json")

    def render(self, request: Request) -> bytes:
        """
        C{/jobs/NAME} itself: 404.
        """
        return JSONNotFound("not found; see /jobs/NAME.json").render(request)


class _Failures(ReadOnlyResource):
    """
    C{/jobs/NAME/failures.json?offset=&limit=&q=}.
    """

    def __init__(self, context: _JobContext, job: JobProgress) -> None:
        super().__init__()
        self._context = context
        self._job = job

    def renderBody(self, request: Request) -> Deferred[bytes]:
        """
        One page of the job's failed messages.
        """
        query = parseFailureQuery(request.uri, request.args)
        d = self._context.store.failuresPage(
            self._job.name, query.offset, query.limit, query.text, query.after
        )

        def done(page: FailuresPage) -> bytes:
            document = self._context.header()
            document["job"] = self._job.name
            document.update(
                _failuresDocument(query, page, self._context.view.folderNames(self._job))
            )
            return jsonBody(document)

        return d.addCallback(done)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def attachmentName(job: str | None, extension: str) -> bytes:
    """
    The C{Content-Disposition} value that saves the manifest of C{job} as
    C{imapmig-manifest-JOB.EXT} (of every job, L{None}, as
    C{imapmig-manifest.EXT}): an ASCII C{filename} with every other
    character replaced, and the exact name as RFC 6266's C{filename*}.
    """
    if job is None:
        return f'attachment; filename="imapmig-manifest.{extension}"'.encode("ascii")
    plain = _UNSAFE.sub("_", job).strip("._")[:80] or "job"
    exact = quote(f"imapmig-manifest-{job}.{extension}", safe="")
    value = (
        f'attachment; filename="imapmig-manifest-{plain}.{extension}";'
        f" filename*=UTF-8''{exact}"
    )
    return value.encode("ascii")


class _Manifest(Resource):
    """
    C{/jobs/NAME/manifest.csv} and C{.json}: the audit manifest, streamed;
    with no job (L{runManifest}), what every job did not migrate.
    """

    isLeaf = True

    def __init__(self, context: _JobContext, job: JobProgress | None, kind: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._context = context
        self._job = job
        self._kind = kind

    def sections(self) -> Iterator[ManifestSection]:
        """
        The manifest's parts: the job's, or, with no job, each job's
        failed messages and excluded folders, made as their turn comes.
        """
        if self._job is not None:
            yield self._context.section(self._job)
            return
        for job in self._context.view.jobs():
            yield self._context.section(job, failedOnly=True)

    def render(self, request: Request) -> bytes | int:
        """
        Stream the manifest (C{HEAD}: its headers only).
        """
        refused = refuseMethod(request, READ_METHODS)
        if refused is not None:
            return refused
        form = manifestFormat(self._kind)
        commonHeaders(request, form.contentType)
        name = None if self._job is None else self._job.name
        request.responseHeaders.setRawHeaders(
            b"Content-Disposition", [attachmentName(name, self._kind)]
        )
        if request.method == b"HEAD":
            return b""
        ManifestProducer(request, self.sections(), form).start()
        return NOT_DONE_YET



def runManifest(
    view: ProgressView, store: IStateStore, rulesOf: RulesOf, kind: str
) -> IResource:
    """
    C{/manifest.csv} (C{kind} C{"csv"}) or C{/manifest.json}: one
    manifest of what no job migrated: per job, in the order of
    C{/status.json}, the folders its rules leave out and its failed
    messages (not those already present), with the columns of the job
    manifests.
    """
    return _Manifest(_JobContext(view, store, rulesOf), None, kind)
