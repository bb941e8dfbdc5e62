# -*- test-case-name: tests.test_status, tests.test_status_fleet -*-
"""
The status site's root: C{/status.json} (schema 2: the run's summary and
one page of jobs), C{/jobs/...} and C{/manifest.csv}
(L{imapmig.status.jobs}), C{/healthz}
(L{imapmig.status.health}), C{/} and C{/static/} (the dashboard,
L{imapmig.status.dashboard}), C{/metrics} (L{imapmig.status.metrics}) and
C{/control} (L{imapmig.status.controls}), the last two given to
L{StatusResource} as resources.  The fleet's daemons and the daemon
holding each job come from an L{IFleetView} (L{imapmig.status.fleet}).
"""

from __future__ import annotations

from typing import Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site

import imapmig
from imapmig.errors import escapedExcerpt
from imapmig.mail.folders import FolderRules
from imapmig.progress import MigrationProgress
from imapmig.queue.fleetview import FoundJobs, IFleetView, JobRow, SingleDaemonView
from imapmig.state import IStateStore
from imapmig.status._http import (
    ConnectionSlots,
    JSONNotFound,
    ReadOnlyResource,
    StatusChannel,
    jsonBody,
)
from imapmig.status.bodylimit import BoundedRequest
from imapmig.status.health import HealthResource
from imapmig.status.controls import ControlResource
from imapmig.status.fleet import (
    FleetJobsResource,
    FleetParts,
    holderDocument,
    readFleet,
    readFleetJobs,
    remoteDocument,
    singleDaemon,
)
from imapmig.status.hostcheck import MisdirectedResource, misdirected
from imapmig.status.jobs import SCHEMA, JobsResource, runManifest
from imapmig.status.lograte import LineBudget
from imapmig.status.progressview import ProgressView
from imapmig.status.query import parseJobQuery, selectJobs
from imapmig.status.quiet import QuietHTTPChannel, QuietRequest, QuietSiteMixin
from imapmig.status.verifyreport import VerifyReportSummary

log = Logger()



class StatusJSONResource(ReadOnlyResource):
    """
    C{/status.json}: the run, its totals and throughput, the fleet's
    daemons, and the page of jobs its query asks for
    (L{imapmig.status.query}), each with the daemon holding it.
    """

    def __init__(
        self,
        view: ProgressView,
        verifyReport: VerifyReportSummary | None,
        controlsEnabled: bool = False,
        fleet: IFleetView | None = None,
        listDiffers: Callable[[], str | None] | None = None,
    ) -> None:
        """
        @param view: what to show.
        @param verifyReport: the verify report to summarise, if any.
        @param controlsEnabled: whether C{/control} can allow anything (a
            token is configured): C{controls.enabled}, so that the page
            shows no control the daemon would refuse.
        @param fleet: the daemons; L{None}: none is shown.
        @param listDiffers: why this daemon's job list differs from the
            fleet's, or L{None} (C{fleet_list_differs}); L{None}: never.
        """
        super().__init__()
        self._view = view
        self._verifyReport = verifyReport
        self._controls = {"enabled": controlsEnabled}
        self._fleet = fleet
        self._listDiffers = listDiffers

    def renderBody(self, request: Request) -> bytes | Deferred[bytes]:
        """
        The document, as JSON; only the page's jobs are rendered.  The
        progress is read now; the fleet when it answers.
        """
        view = self._view
        query = parseJobQuery(request.uri, request.args, view.stateNames())
        jobs = view.jobs()
        matched, page = selectJobs(view, jobs, query)
        summary = view.summary(jobs)
        run = summary["run"]
        assert isinstance(run, dict)
        run["verify"] = None if self._verifyReport is None else self._verifyReport.current()
        document: dict[str, object] = {"schema": SCHEMA, "version": imapmig.__version__}
        document.update(summary)
        document["controls"] = self._controls
        document["fleet_list_differs"] = None if self._listDiffers is None else self._listDiffers()
        document["page"] = query.describe(matched)
        shown = document["jobs"] = [view.document(job) for job in page]
        if self._fleet is None:
            return jsonBody(document)

        # A fleet's daemon lists the fleet's jobs from its database, a page
        # at a time (those it runs with their progress); the jobs it holds
        # when the database cannot be read.
        fleet = not isinstance(self._fleet, SingleDaemonView)
        fleetView = self._fleet

        def withFleet(parts: FleetParts) -> bytes | Deferred[bytes]:
            document["daemons"] = parts.daemonsDocument()
            document["daemons_error"] = parts.error
            if fleet:
                document["fleet_jobs"] = parts.counts
            for job in shown:
                job["daemon"] = parts.holderOf(str(job["name"]))
            if not fleet or parts.error is not None:
                return jsonBody(document)
            found = readFleetJobs(
                fleetView, query.states, query.text, query.offset, query.limit, query.errorsOnly
            )
            return found.addCallback(withJobs)

        def withJobs(found: FoundJobs | None) -> bytes:
            if found is not None:
                document["jobs"] = [self._fleetDocument(row) for row in found.jobs]
                described = document["page"]
                assert isinstance(described, dict)
                described.update(
                    matched=found.matched, matched_exact=found.exact, next=found.next
                )
            return jsonBody(document)

        # The holders of this daemon's page too: it is shown while the
        # fleet's jobs cannot be read.
        names = [job.name for job in page]
        return readFleet(self._fleet, names, counts=fleet).addCallback(withFleet)

    def _fleetDocument(self, row: JobRow) -> dict[str, object]:
        """
        The document of a job of the fleet's page: this daemon's progress
        of it where it runs it, else what the database knows.
        """
        job = self._view.job(row.name)
        if job is None or row.holder is None or not row.holder.this:
            return remoteDocument(row)
        document = self._view.document(job)
        document["daemon"] = holderDocument(row.holder)
        return document



class StatusResource(Resource):
    """
    The root of the status site.  Anything not routed is a 404.
    """

    def __init__(
        self,
        progress: MigrationProgress,
        seconds: Callable[[], float],
        store: IStateStore,
        stopping: Callable[[], bool] = lambda: False,
        verifyReportPath: str | None = None,
        rulesOf: Callable[[str], FolderRules | None] = lambda name: None,
        dashboard: IResource | None = None,
        metrics: IResource | None = None,
        control: IResource | None = None,
        fleet: IFleetView | None = None,
        health: IResource | None = None,
        listDiffers: Callable[[], str | None] | None = None,
    ) -> None:
        """
        @param progress: what to show.
        @param seconds: the clock (the reactor's) for C{"time"}.
        @param store: the state store: failures, manifests, health.
        @param stopping: whether the daemon is stopping (C{/healthz}).
        @param verifyReportPath: where C{imapmig verify} writes its report,
            summarised as C{run.verify}; L{None} for none.
        @param rulesOf: each job's folder rules by name, for the manifest.
        @param dashboard: the resource serving C{/} and its static files
            (its children, e.g. C{/static/...}, are the root's); L{None}
            serves L{imapmig.status.dashboard.DashboardResource}.
        @param metrics: C{/metrics}, if served.
        @param control: C{/control}, if served.
        @param fleet: the daemons of the fleet and the jobs each holds
            (L{imapmig.queue.fleetview}); L{None}: this daemon alone
            (L{singleDaemon}), holding every job.
        @param health: C{/healthz}; L{None}: a L{HealthResource} of
            C{store} whose checks wait for its ping however long it takes.
        @param listDiffers: why this daemon's job list differs from the
            fleet's, or L{None}, for C{status.json} and the page (a fleet's
            L{FleetMember.listDiffers<imapmig.schedule.member.FleetMember>});
            L{None}: never.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        view = ProgressView(progress, seconds)
        if fleet is None:
            fleet = singleDaemon(progress, seconds)
        report = None if verifyReportPath is None else VerifyReportSummary(verifyReportPath)
        if dashboard is None:
            # Imported here: a site built with a dashboard of its own need
            # not load the page's files.
            from imapmig.status.dashboard import DashboardResource

            dashboard = DashboardResource()
        self._page: IResource = dashboard
        self.putChild(b"", self._page)
        enabled = isinstance(control, ControlResource) and control.enabled
        self.putChild(b"status.json", StatusJSONResource(view, report, enabled, fleet, listDiffers))
        self.putChild(b"jobs", JobsResource(view, store, rulesOf, fleet))
        fleetJobs = Resource()
        fleetJobs.putChild(b"jobs.json", FleetJobsResource(fleet))
        self.putChild(b"fleet", fleetJobs)
        for kind in ("csv", "json"):
            self.putChild(b"manifest." + kind.encode(), runManifest(view, store, rulesOf, kind))
        self.putChild(b"healthz", health or HealthResource(view, store, stopping))
        if metrics is not None:
            self.putChild(b"metrics", metrics)
        if control is not None:
            self.putChild(b"control", control)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Anything not registered: C{/static/} (the dashboard's files), else
        a JSON 404.
        """
        if path == b"static":
            child: IResource = self._page.getChildWithDefault(path, request)
            return child
        return JSONNotFound("not found")

    def render(self, request: Request) -> bytes | int:
        """
        Reached only for an empty path; render the page.
        """
        result: bytes | int = self._page.render(request)
        return result


class QuietStatusChannel(StatusChannel, QuietHTTPChannel):
    """
    The status site's HTTP/1.1 channel (no HTTP/2 negotiation wrapper):
    answers an over-long request line, closes a request not complete in
    time (L{StatusChannel}) and times idle clients out at debug level
    (L{QuietHTTPChannel}).
    """


class QuietStatusRequest(BoundedRequest, QuietRequest):
    """
    The status site's request: its body bounded (L{BoundedRequest}), its
    informational notes at debug level (L{QuietRequest}).
    """


MAX_CONNECTIONS = 64
"""
The most connections the status site holds open at once (its file
descriptors are the daemon's, shared with every IMAP connection).
"""

class _Refused(Protocol):
    """
    A connection past the site's limit: closed as soon as it is made
    (through any TLS wrapper alike).
    """

    def connectionMade(self) -> None:
        """
        Close at once: nothing was read, nothing is owed.
        """
        self.transport.abortConnection()  # type: ignore[union-attr]


class QuietSite(QuietSiteMixin, Site):
    """
    A L{Site} that says nothing at the default log level: no "Starting
    factory" when it listens, twisted.web's informational notes at debug
    level (L{imapmig.status.quiet}), and each request a structured debug
    event instead of an access-log line (a page polled every few seconds
    would otherwise fill the log).  Request bodies are bounded before they
    are read (L{BoundedRequest}): only C{/control} takes one.  A request
    must be complete within L{imapmig.status._http.REQUEST_DEADLINE}
    seconds of the accept (L{StatusChannel}), and at most
    C{maxConnections} connections are open at once: the daemon's file
    descriptors and reactor are its migrations' first.  A connection that
    finds them all taken closes the one that waited longest without a
    request (L{ConnectionSlots}), so that idle or dripping clients cannot
    keep a monitor out.
    """

    protocol = QuietStatusChannel  # type: ignore[assignment]
    requestFactory = QuietStatusRequest

    def __init__(
        self,
        resource: IResource,
        reactor: IReactorTime | None = None,
        maxConnections: int = MAX_CONNECTIONS,
        allowedHosts: Sequence[str] = (),
    ) -> None:
        """
        @param resource: the root resource.
        @param reactor: see L{Site}.
        @param maxConnections: the most connections open at once (see
            L{ConnectionSlots} for which is closed to admit one more).
        @param allowedHosts: C{status.allowed_hosts} (see
            L{imapmig.status.hostcheck}).
        """
        Site.__init__(self, resource, reactor=reactor)
        self.slots = ConnectionSlots(maxConnections, self.reactor.seconds)
        self._refusals = LineBudget(self.reactor)
        self._evictions = LineBudget(self.reactor)
        self._allowedHosts = tuple(allowedHosts)

    @property
    def maxConnections(self) -> int:
        """
        The most connections open at once.
        """
        return self.slots.limit

    @maxConnections.setter
    def maxConnections(self, limit: int) -> None:
        self.slots.limit = limit

    @property
    def openConnections(self) -> int:
        """
        The connections open now.
        """
        return len(self.slots)

    def buildProtocol(self, addr: IAddress | None) -> Protocol | None:  # type: ignore[override]
        """
        A channel for the connection from C{addr}, counted while it is
        open.  When L{maxConnections} are open, the one that waited longest
        without a request is closed to make room (logged once a minute at
        most); only when every one is being answered is the new one closed
        at once instead.
        """
        admitted, victim = self.slots.admit()
        if not admitted:
            self._refuse(addr)
            return _Refused()
        if victim is not None:
            self._evict(victim, addr)
        channel: Protocol | None = Site.buildProtocol(self, addr)
        if isinstance(channel, StatusChannel):
            self.slots.opened(channel)
            channel.slots = self.slots
        return channel

    def _evict(self, victim: StatusChannel, addr: IAddress | None) -> None:
        """
        Close C{victim} for the newcomer from C{addr}; log the closings,
        once a minute at most.
        """
        victim.evict()
        closed = self._evictions.count()
        if closed is None:
            return
        log.warn(
            "Status site: {limit} connections open, the most allowed: closed {closed}"
            " connection(s) idle or without a complete request, the longest waiting first,"
            " to admit new ones since the last such line, the latest for {client}",
            limit=self.maxConnections,
            closed=closed,
            client=str(getattr(addr, "host", "")),
        )

    def _refuse(self, addr: IAddress | None) -> None:
        """
        Count a refused connection; log the refusals, once a minute at
        most.
        """
        refused = self._refusals.count()
        if refused is None:
            return
        log.warn(
            "Status site: {limit} connections open, the most allowed, each answering a"
            " request: refused {refused} connection(s) since the last such line, the"
            " latest from {client}",
            limit=self.maxConnections,
            refused=refused,
            client=str(getattr(addr, "host", "")),
        )

    def stopFactory(self) -> None:
        """
        The site stops listening: the control requests refused and not yet
        logged are logged now (L{ControlResource.flushRefusals}).
        """
        control = getattr(self.resource, "children", {}).get(b"control")
        if isinstance(control, ControlResource):
            control.flushRefusals()
        Site.stopFactory(self)

    def getResourceFor(self, request: Request) -> IResource:
        """
        The resource for C{request}, unless it looks like a DNS-rebinding
        request (L{imapmig.status.hostcheck}): then a 421.
        """
        why = misdirected(request, self._allowedHosts)
        if why is not None:
            return MisdirectedResource(why)
        resource: IResource = Site.getResourceFor(self, request)
        return resource

    def log(self, request: Request) -> None:  # type: ignore[override]
        """
        Log C{request} at debug level: its method, path (without its
        query string, nothing past C{/control/}; escaped, cut to 80
        octets), response code and client.
        """
        path = request.path.split(b"?", 1)[0]
        if path.startswith(b"/control/"):
            # Whatever follows may hold a token put in the wrong place; the
            # control resource logs what it refuses, redacted.
            path = b"/control/..."
        log.debug(
            "Status request: {method} {path} {code} from {client}",
            method=escapedExcerpt(request.method, 16),
            path=escapedExcerpt(path),
            code=request.code,
            client=str(getattr(request.getClientAddress(), "host", "")),
        )


def buildStatusSite(
    root: IResource, reactor: IReactorTime, allowedHosts: Sequence[str] = ()
) -> Site:
    """
    The HTTP site serving C{root} (a L{StatusResource}), quiet at the
    default log level (L{QuietSite}).

    @param root: the site's root resource.
    @param reactor: the reactor for the site's timeouts.
    @param allowedHosts: C{status.allowed_hosts}, the names the site
        answers to (L{imapmig.status.hostcheck}).
    """
    site = QuietSite(root, reactor=reactor, allowedHosts=allowedHosts)
    site.displayTracebacks = False
    return site
