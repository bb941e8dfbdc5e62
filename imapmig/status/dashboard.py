# -*- test-case-name: tests.test_dashboard -*-
"""
The dashboard: C{/} and C{/static/<file>}, a static page whose script
polls C{/status.json} and renders it in place.

The files are package data (C{imapmig/status/static/}), read once when the
resources are built, and served with a strict Content-Security-Policy (the
page runs only its own script and stylesheet and talks only to its own
origin), C{nosniff} and an C{ETag} so a browser revalidates instead of
downloading them again every time.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files
from typing import Mapping, Sequence

from attrs import frozen
from twisted.web import http
from twisted.web.pages import notFound
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request

from imapmig.status._http import bodyFor, refuseMethodAsText

CONTENT_SECURITY_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)

#: The files of the dashboard, by name, with their content types.
STATIC_FILES: Mapping[str, bytes] = {
    "index.html": b"text/html; charset=utf-8",
    "dashboard.css": b"text/css; charset=utf-8",
    "dashboard.js": b"text/javascript; charset=utf-8",
}

#: The files served under C{/static/}; the page itself is served at C{/}.
STATIC_ASSETS: Sequence[str] = ("dashboard.css", "dashboard.js")

_ALLOWED_METHODS: Sequence[bytes] = (b"GET", b"HEAD")


@frozen
class StaticFile:
    """
    One file of the dashboard, as served.

    @ivar body: its content.
    @ivar contentType: its C{Content-Type}.
    @ivar etag: its strong entity tag (quoted), a digest of C{body}.
    """

    body: bytes
    contentType: bytes
    etag: bytes


def loadStaticFiles() -> dict[str, StaticFile]:
    """
    Read every file of L{STATIC_FILES} from the package data.

    @return: the files by name.
    @raise FileNotFoundError: if the package was installed without them.
    """
    folder = files("imapmig.status") / "static"
    loaded = {}
    for name, contentType in STATIC_FILES.items():
        body = (folder / name).read_bytes()
        digest = hashlib.sha256(body).hexdigest()[:32]
        loaded[name] = StaticFile(body, contentType, b'"' + digest.encode("ascii") + b'"')
    return loaded


class StaticFileResource(Resource):
    """
    One L{StaticFile}: C{GET} and C{HEAD} only (405 with C{Allow} for any
    other method), 304 when C{If-None-Match} names its entity tag, no
    children (404).
    """

    isLeaf = True

    def __init__(self, static: StaticFile) -> None:
        """
        @param static: what to serve.
        """
        super().__init__()  # type: ignore[no-untyped-call]
        self._static = static

    def render(self, request: Request) -> bytes:
        """
        Serve the file, or 404 for a path below it, or 405.
        """
        if request.postpath:
            return notFound().render(request)  # type: ignore[no-any-return]
        headers = request.responseHeaders
        headers.setRawHeaders(b"Content-Security-Policy", [CONTENT_SECURITY_POLICY])
        headers.setRawHeaders(b"X-Content-Type-Options", [b"nosniff"])
        headers.setRawHeaders(b"Referrer-Policy", [b"no-referrer"])
        refused = refuseMethodAsText(request, _ALLOWED_METHODS, b"405 Method Not Allowed\n")
        if refused is not None:
            return refused
        static = self._static
        # Revalidated every time: an upgraded daemon serves new files at once.
        headers.setRawHeaders(b"Cache-Control", [b"no-cache"])
        headers.setRawHeaders(b"ETag", [static.etag])
        if _matches(request.requestHeaders.getRawHeaders(b"If-None-Match"), static.etag):
            request.setResponseCode(http.NOT_MODIFIED)
            return b""
        headers.setRawHeaders(b"Content-Type", [static.contentType])
        return bodyFor(request, static.body)


def _matches(ifNoneMatch: Sequence[bytes] | None, etag: bytes) -> bool:
    """
    Whether the C{If-None-Match} header values name C{etag} (or C{*}).
    """
    for value in ifNoneMatch or ():
        for candidate in value.split(b","):
            if candidate.strip().removeprefix(b"W/") in (etag, b"*"):
                return True
    return False


class StaticDirectoryResource(Resource):
    """
    C{/static/}: the dashboard's script and stylesheet; anything else,
    the directory itself included, is 404.
    """

    def __init__(self, static: Mapping[str, StaticFile]) -> None:
        """
        @param static: the loaded files (L{loadStaticFiles}).
        """
        super().__init__()  # type: ignore[no-untyped-call]
        for name in STATIC_ASSETS:
            self.putChild(name.encode("ascii"), StaticFileResource(static[name]))

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Anything not registered: 404.
        """
        return notFound()

    def render(self, request: Request) -> bytes:
        """
        No listing: 404.
        """
        return notFound().render(request)  # type: ignore[no-any-return]


class DashboardResource(StaticFileResource):
    """
    C{/}: the dashboard page.  Mounted as a site's root it also serves
    C{/static/}; mounted as the empty child of another root, that root must
    mount L{DashboardResource.static} as C{static} too (L{mountDashboard}).

    @ivar static: the C{/static/} resource.
    """

    isLeaf = False

    def __init__(self, static: Mapping[str, StaticFile] | None = None) -> None:
        """
        @param static: the loaded files; L{None} loads them (L{loadStaticFiles}).
        """
        loaded = loadStaticFiles() if static is None else static
        super().__init__(loaded["index.html"])
        self.static = StaticDirectoryResource(loaded)
        self.putChild(b"static", self.static)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        C{""} is the page itself (C{//}); anything not registered is 404.
        """
        if path == b"" and not request.postpath:
            return self
        return notFound()


def mountDashboard(root: Resource, dashboard: DashboardResource | None = None) -> DashboardResource:
    """
    Serve the dashboard at C{/} and its files at C{/static/} of C{root}.

    @param root: the site's root resource.
    @param dashboard: the dashboard to mount; L{None} builds one.
    @return: the mounted dashboard.
    """
    dashboard = DashboardResource() if dashboard is None else dashboard
    root.putChild(b"", dashboard)
    root.putChild(b"static", dashboard.static)
    return dashboard
