# -*- test-case-name: tests.test_status -*-
"""
The status site's root: C{/status.json} (schema 1: the run's summary and
one page of jobs), C{/jobs/...} (L{imapmig.status.jobs}), C{/healthz}
(L{imapmig.status.health}), and C{/}, for now a small HTML page of the same
numbers.

The routes other branches serve (C{/} as the dashboard, C{/static},
C{/metrics}, C{/control}) are given to L{StatusResource} as resources.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site

import imapmig
from imapmig.errors import escapedExcerpt
from imapmig.plan import FolderRules
from imapmig.progress import MigrationProgress
from imapmig.state import IStateStore
from imapmig.status._http import JSONNotFound, ReadOnlyResource, StatusChannel, jsonBody
from imapmig.status.health import HealthResource
from imapmig.status.jobs import JobsResource
from imapmig.status.progressview import ProgressView
from imapmig.status.query import parseJobQuery, selectJobs
from imapmig.status.verifyreport import VerifyReportSummary

log = Logger()

SCHEMA = 1
"""
The version of the JSON documents' layout (C{"schema"}).
"""


class StatusJSONResource(ReadOnlyResource):
    """
    C{/status.json}: the run, its totals and throughput, and the page of
    jobs its query asks for (L{imapmig.status.query}).
    """

    def __init__(self, view: ProgressView, verifyReport: VerifyReportSummary | None) -> None:
        """
        @param view: what to show.
        @param verifyReport: the verify report to summarise, if any.
        """
        super().__init__()
        self._view = view
        self._verifyReport = verifyReport

    def renderBody(self, request: Request) -> bytes:
        """
        The document, as JSON; only the page's jobs are rendered.
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
        document["page"] = query.describe(matched)
        document["jobs"] = [view.document(job) for job in page]
        return jsonBody(document)


class StatusPageResource(ReadOnlyResource):
    """
    C{/}: an HTML table of the jobs and their totals, refreshed every five
    seconds.  Self-contained: no scripts, no external assets.  Served until
    the dashboard takes its place.
    """

    contentType = b"text/html; charset=utf-8"

    def __init__(self, progress: MigrationProgress) -> None:
        super().__init__()
        self._progress = progress

    def renderBody(self, request: Request) -> bytes:
        """
        The page.
        """
        request.responseHeaders.setRawHeaders(
            b"Content-Security-Policy",
            [b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"],
        )
        return renderStatusPage(self._progress.snapshot()).encode("utf-8")


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
            serves the plain page.
        @param metrics: C{/metrics}, if served.
        @param control: C{/control}, if served.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        view = ProgressView(progress, seconds)
        report = None if verifyReportPath is None else VerifyReportSummary(verifyReportPath)
        self._page: IResource = dashboard if dashboard is not None else StatusPageResource(progress)
        self._dashboard = dashboard
        self.putChild(b"", self._page)
        self.putChild(b"status.json", StatusJSONResource(view, report))
        self.putChild(b"jobs", JobsResource(view, store, rulesOf))
        self.putChild(b"healthz", HealthResource(view, store, stopping))
        if metrics is not None:
            self.putChild(b"metrics", metrics)
        if control is not None:
            self.putChild(b"control", control)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Anything not registered: the dashboard's children if it has some,
        else 404.
        """
        if self._dashboard is not None:
            child: IResource = self._dashboard.getChildWithDefault(path, request)
            return child
        return JSONNotFound("not found")

    def render(self, request: Request) -> bytes | int:
        """
        Reached only for an empty path; render the page.
        """
        result: bytes | int = self._page.render(request)
        return result


class QuietSite(Site):
    """
    A L{Site} that says nothing at the default log level: no "Starting
    factory" when it listens, and each request a structured debug event
    instead of an access-log line (a page polled every few seconds would
    otherwise fill the log).
    """

    noisy = False
    # A plain HTTP/1.1 channel (no HTTP/2 negotiation wrapper: the status
    # site speaks HTTP/1.1) that answers an over-long request line.
    protocol = StatusChannel  # type: ignore[assignment]

    def __init__(self, resource: IResource, reactor: IReactorTime | None = None) -> None:
        """
        @param resource: the root resource.
        @param reactor: see L{Site}.
        """
        Site.__init__(self, resource, reactor=reactor)

    def log(self, request: Request) -> None:  # type: ignore[override]
        """
        Log C{request} at debug level: its method, path (escaped, cut to
        80 octets), response code and client.
        """
        log.debug(
            "Status request: {method} {path} {code} from {client}",
            method=escapedExcerpt(request.method, 16),
            path=escapedExcerpt(request.uri),
            code=request.code,
            client=str(getattr(request.getClientAddress(), "host", "")),
        )


def buildStatusSite(
    progress: MigrationProgress,
    reactor: IReactorTime,
    store: IStateStore,
    stopping: Callable[[], bool] = lambda: False,
    verifyReportPath: str | None = None,
    rulesOf: Callable[[str], FolderRules | None] = lambda name: None,
    dashboard: IResource | None = None,
    metrics: IResource | None = None,
    control: IResource | None = None,
) -> Site:
    """
    The HTTP site serving L{StatusResource}, quiet at the default log
    level (L{QuietSite}).

    @param progress: what to show.
    @param reactor: the reactor for the site's timeouts and the clock.
    @param store: see L{StatusResource}.
    @param stopping: see L{StatusResource}.
    @param verifyReportPath: see L{StatusResource}.
    @param rulesOf: see L{StatusResource}.
    @param dashboard: see L{StatusResource}.
    @param metrics: see L{StatusResource}.
    @param control: see L{StatusResource}.
    """
    root = StatusResource(
        progress,
        reactor.seconds,
        store,
        stopping=stopping,
        verifyReportPath=verifyReportPath,
        rulesOf=rulesOf,
        dashboard=dashboard,
        metrics=metrics,
        control=control,
    )
    site = QuietSite(root, reactor=reactor)
    site.displayTracebacks = False
    return site


_PAGE = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>imapmig status</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; }}
table {{ border-collapse: collapse; }}
caption {{ text-align: left; padding-bottom: 0.5rem; }}
th, td {{ padding: 0.3rem 0.8rem; border-bottom: 1px solid #aaa; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
tfoot th, tfoot td {{ font-weight: bold; }}
</style>
</head>
<body>
<main>
<h1>imapmig status</h1>
<p>{summary} Updated {updated}.</p>
<table>
<caption>Migration jobs</caption>
<thead>
<tr><th scope="col">Job</th><th scope="col">State</th><th scope="col">Done / total</th>\
<th scope="col">Failed</th><th scope="col">Bytes</th><th scope="col">Rate</th>\
<th scope="col">Error</th></tr>
</thead>
<tbody>
{rows}
</tbody>
<tfoot>
{totals}
</tfoot>
</table>
<p><a href="status.json">status.json</a></p>
</main>
</body>
</html>
"""


def _state(job: dict[str, object]) -> str:
    """
    A job's state, in words, with why it waits while it backs off or is
    paused.
    """
    state = str(job.get("state") or "").replace("_", " ")
    waiting = job.get("waiting_for")
    if waiting:
        return _text(f"{state}: {waiting}")
    return _text(state or None)


def renderStatusPage(snapshot: dict[str, object]) -> str:
    """
    The HTML page for C{snapshot} (as L{MigrationProgress.snapshot} returns
    it), every value escaped.
    """
    jobs = [job for job in _list(snapshot.get("jobs")) if isinstance(job, dict)]
    totals = snapshot.get("totals")
    totals = totals if isinstance(totals, dict) else {}
    rows = [
        "<tr>"
        f'<th scope="row">{_text(job.get("name"))}</th>'
        f'<td>{_state(job)}</td>'
        f'<td class="n">{_doneOfTotal(job)}</td>'
        f'<td class="n">{_count(job.get("messages_failed"))}</td>'
        f'<td class="n">{_bytes(job.get("bytes_done"))}</td>'
        f'<td class="n">{_rate(job.get("messages_per_second"))}</td>'
        f'<td>{_text(job.get("error"))}</td>'
        "</tr>"
        for job in jobs
    ]
    if not rows:
        rows = ['<tr><td colspan="7">No jobs configured.</td></tr>']
    states = totals.get("jobs")
    states = states if isinstance(states, dict) else {}
    stateCounts = ", ".join(
        f"{_count(count)} {_text(state)}" for state, count in states.items() if count
    )
    totalsRow = (
        "<tr>"
        '<th scope="row">Total</th>'
        f"<td>{stateCounts}</td>"
        f'<td class="n">{_doneOfTotal(totals)}</td>'
        f'<td class="n">{_count(totals.get("messages_failed"))}</td>'
        f'<td class="n">{_bytes(totals.get("bytes_done"))}</td>'
        "<td></td><td></td>"
        "</tr>"
    )
    summary = f"{len(jobs)} job{'' if len(jobs) == 1 else 's'}" + (
        f": {stateCounts}." if stateCounts else "."
    )
    return _PAGE.format(
        summary=summary,
        updated=_time(snapshot.get("time")),
        rows="\n".join(rows),
        totals=totalsRow,
    )


def _list(value: object) -> list[object]:
    """
    C{value} if it is a list, else an empty one.
    """
    return list(value) if isinstance(value, list) else []


def _text(value: object) -> str:
    """
    C{value} as escaped HTML text; a dash for L{None}.
    """
    return "\u2013" if value is None else escape(str(value), quote=True)


def _count(value: object) -> str:
    """
    A count with thousands separators.
    """
    return f"{value:,}" if isinstance(value, int) else _text(value)


def _doneOfTotal(counters: dict[object, object]) -> str:
    """
    C{"done / total"} messages of a job (or of the totals).
    """
    return f"{_count(counters.get('messages_done'))} / {_count(counters.get('messages_total'))}"


def _bytes(value: object) -> str:
    """
    An octet count in binary units.
    """
    if not isinstance(value, int):
        return _text(value)
    if value < 1024:
        return f"{value}\u00a0B"
    amount = float(value)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        amount /= 1024
        if amount < 1024:
            break
    return f"{amount:.1f}\u00a0{unit}"


def _rate(value: object) -> str:
    """
    Messages per second, or a dash when not known.
    """
    if isinstance(value, (int, float)):
        return f"{value:.1f}\u00a0msg/s"
    return _text(value)


def _time(value: object) -> str:
    """
    A C{<time>} element for seconds since the epoch.
    """
    if not isinstance(value, (int, float)):
        return _text(value)
    moment = datetime.fromtimestamp(value, timezone.utc)
    return f'<time datetime="{moment.isoformat()}">{moment:%Y-%m-%d %H:%M:%S} UTC</time>'
