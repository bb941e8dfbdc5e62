# -*- test-case-name: tests.test_status -*-
"""
The status resources: C{/status.json}, the machine-readable progress of
every job, and C{/}, a small HTML page of the same numbers.

Both render L{MigrationProgress.snapshot}, so the page never says anything
the JSON does not.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from html import escape
from typing import Sequence

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web import http
from twisted.web.pages import notFound
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site

from imapmig.errors import escapedExcerpt
from imapmig.progress import MigrationProgress

log = Logger()

_NOT_ALLOWED_BODY = b"405 Method Not Allowed\n"


class _ReadOnlyResource(Resource):
    """
    A resource that answers C{GET} and C{HEAD} with a fresh, uncached
    rendering, any other method with 405, and any child path with 404.
    """

    allowedMethods: Sequence[bytes] = (b"GET", b"HEAD")
    contentType = b"application/octet-stream"

    def __init__(self, progress: MigrationProgress) -> None:
        """
        @param progress: what to show.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        self._progress = progress

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        No children: 404.
        """
        return notFound()

    def render(self, request: Request) -> bytes:
        """
        Answer C{GET} and C{HEAD} with L{renderBody}, anything else with
        405 and the C{Allow} header.
        """
        # Answered here rather than by raising UnsupportedMethod, which
        # twisted.web turns into 501 for methods other than GET, HEAD, POST.
        if request.method not in self.allowedMethods:
            request.setResponseCode(http.NOT_ALLOWED)
            request.responseHeaders.setRawHeaders(b"Allow", [b", ".join(self.allowedMethods)])
            request.responseHeaders.setRawHeaders(b"Content-Type", [b"text/plain; charset=utf-8"])
            return _NOT_ALLOWED_BODY
        request.responseHeaders.setRawHeaders(b"Content-Type", [self.contentType])
        request.responseHeaders.setRawHeaders(b"Cache-Control", [b"no-store"])
        request.responseHeaders.setRawHeaders(b"X-Content-Type-Options", [b"nosniff"])
        body = self.renderBody(request)
        if request.method == b"HEAD":
            # The length GET would have, without twisted.web logging that a
            # HEAD response carried a body.
            request.responseHeaders.setRawHeaders(b"Content-Length", [b"%d" % (len(body),)])
            return b""
        return body

    def renderBody(self, request: Request) -> bytes:
        """
        The response body; the common headers are set already.
        """
        raise NotImplementedError()


class StatusJSONResource(_ReadOnlyResource):
    """
    C{/status.json}: L{MigrationProgress.snapshot} as JSON.
    """

    contentType = b"application/json; charset=utf-8"

    def renderBody(self, request: Request) -> bytes:
        """
        The snapshot, as JSON.
        """
        return json.dumps(self._progress.snapshot()).encode("utf-8")


class StatusPageResource(_ReadOnlyResource):
    """
    C{/}: an HTML table of the jobs and their totals, refreshed every five
    seconds.  Self-contained: no scripts, no external assets.
    """

    contentType = b"text/html; charset=utf-8"

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
    The root of the status site: C{/} is L{StatusPageResource},
    C{/status.json} is L{StatusJSONResource}, anything else is 404.
    """

    def __init__(self, progress: MigrationProgress) -> None:
        """
        @param progress: what to show.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        self._page = StatusPageResource(progress)
        self.putChild(b"", self._page)
        self.putChild(b"status.json", StatusJSONResource(progress))

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Anything not registered: 404.
        """
        return notFound()

    def render(self, request: Request) -> bytes:
        """
        Reached only for an empty path; render the page.
        """
        return self._page.render(request)


class QuietSite(Site):
    """
    A L{Site} that says nothing at the default log level: no "Starting
    factory" when it listens, and each request a structured debug event
    instead of an access-log line (a page polled every few seconds would
    otherwise fill the log).
    """

    noisy = False

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


def buildStatusSite(progress: MigrationProgress, reactor: IReactorTime | None = None) -> Site:
    """
    The HTTP site serving L{StatusResource}, quiet at the default log
    level (L{QuietSite}).

    @param progress: what to show.
    @param reactor: the reactor for the site's timeouts; pass it (L{None}
        makes twisted.web fetch the global reactor).
    """
    site = QuietSite(StatusResource(progress), reactor=reactor)
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
