# -*- test-case-name: tests.test_dashboard -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests for L{imapmig.status.dashboard}, served in memory by treq's
L{StubTreq}, and for the dashboard's static files and fixtures.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IResponse
from twisted.web.resource import Resource
from twisted.web.static import Data

from imapmig.status.dashboard import (
    CONTENT_SECURITY_POLICY,
    STATIC_FILES,
    DashboardResource,
    loadStaticFiles,
    mountDashboard,
)
from tests.dashboardharness import FIXTURES, FixtureRun, HarnessRoot

ROOT = Path(__file__).parent.parent

#: Every id the DOM contract (api18.md, "Dashboard DOM contract") names,
#: with the element it must be.
CONTRACT_IDS = {
    "updated": "time",
    "overall-done": None, "overall-total": None, "overall-failed": None,
    "overall-percent": None, "overall-rate": None, "overall-eta": None,
    "overall-bytes-done": None, "overall-bytes-total": None,
    "run-started": None, "run-duration": None, "run-finished": None, "verify-result": None,
    "throughput": "svg", "jobs": "table",
    "jobs-filter-state": "select", "jobs-filter-q": "input", "jobs-sort": "select",
    "jobs-prev": "button", "jobs-next": "button", "jobs-page": None,
    "job-detail": None, "job-folders": "table", "job-failures": "table",
    "job-failures-q": "input", "job-failures-prev": "button", "job-failures-next": "button",
    "token": "input", "token-save": "button", "token-clear": "button",
    "pause-all": "button", "resume-all": "button", "control-status": None,
}

#: The classes and attributes the script gives each job row (the contract).
CONTRACT_ROW_NAMES = (
    "job-state", "job-done", "job-total", "job-failed", "job-percent", "job-rate",
    "job-eta", "job-folder", "job-error", "job-link", "data-job", "data-folder",
    "data-action", "data-outcome", "imapmigDashboard",
)

#: The keys of a job in the contract's C{/status.json}.
CONTRACT_JOB_KEYS = {
    "name", "state", "counted", "messages_total", "messages_done", "messages_failed",
    "messages_already_present", "messages_already_migrated", "messages_pending",
    "bytes_total", "bytes_done", "bytes_sent", "percent", "messages_per_second",
    "average_messages_per_second", "eta_seconds", "current_folder", "folders_total",
    "folders_excluded", "error", "waiting_for", "retry_at", "reconnects", "started_at",
    "finished_at", "elapsed_seconds", "paused", "line_endings_converted", "messages_with_notes",
}


class Elements(HTMLParser):
    """
    Collects the tag and attributes of every element with an id, every
    script and stylesheet reference, and anything a strict
    Content-Security-Policy would block (inline scripts, styles, handlers).

    @ivar ids: tag and attributes by id.
    @ivar inline: descriptions of inline code found.
    @ivar references: the C{src} of scripts and C{href} of links.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, tuple[str, dict[str, str | None]]] = {}
        self.inline: list[str] = []
        self.references: list[str] = []
        self._inScript = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """
        Record the element.
        """
        attributes = dict(attrs)
        if "id" in attributes:
            self.ids[str(attributes["id"])] = (tag, attributes)
        if tag == "style" or "style" in attributes:
            self.inline.append(f"style on <{tag}>")
        self.inline.extend(f"{name} on <{tag}>" for name in attributes if name.startswith("on"))
        if tag == "script":
            if attributes.get("src"):
                self.references.append(str(attributes["src"]))
            else:
                self.inline.append("inline <script>")
        if tag == "link" and attributes.get("href"):
            self.references.append(str(attributes["href"]))


def parse(body: bytes) -> Elements:
    """
    Parse the page C{body}.
    """
    parser = Elements()
    parser.feed(body.decode("utf-8"))
    parser.close()
    return parser


class DashboardRoutesTests(SynchronousTestCase):
    """
    L{DashboardResource} serves the page and its files from package data,
    with strict headers, and nothing else.
    """

    def setUp(self) -> None:
        self.static = loadStaticFiles()
        self.treq: Any = StubTreq(DashboardResource(self.static))

    def request(
        self, method: str, path: str, headers: dict[bytes, list[bytes]] | None = None
    ) -> tuple[IResponse, bytes]:
        """
        Make a request and return the response and its body.
        """
        response: IResponse = self.successResultOf(
            self.treq.request(method, "http://127.0.0.1:8080" + path, headers=headers)
        )
        body: bytes = self.successResultOf(self.treq.content(response))
        return response, body

    def header(self, response: IResponse, name: bytes) -> list[bytes] | None:
        """
        The values of the response header C{name}.
        """
        values: list[bytes] | None = response.headers.getRawHeaders(name)
        return values

    def assertStrictHeaders(self, response: IResponse) -> None:
        """
        C{response} carries the Content-Security-Policy and C{nosniff}.
        """
        self.assertEqual(self.header(response, b"Content-Security-Policy"), [CONTENT_SECURITY_POLICY])
        self.assertEqual(self.header(response, b"X-Content-Type-Options"), [b"nosniff"])

    def test_page(self) -> None:
        """
        C{GET /} answers 200 with the packaged C{index.html} as UTF-8 HTML,
        the exact Content-Security-Policy of the contract, C{nosniff}, an
        entity tag and revalidation on every use.
        """
        response, body = self.request("GET", "/")
        self.assertEqual(response.code, 200)
        self.assertEqual(body, (files("imapmig.status") / "static" / "index.html").read_bytes())
        self.assertEqual(self.header(response, b"Content-Type"), [b"text/html; charset=utf-8"])
        self.assertEqual(
            CONTENT_SECURITY_POLICY,
            b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        )
        self.assertStrictHeaders(response)
        self.assertEqual(self.header(response, b"ETag"), [self.static["index.html"].etag])
        self.assertEqual(self.header(response, b"Cache-Control"), [b"no-cache"])

    def test_staticFiles(self) -> None:
        """
        C{/static/dashboard.js} and C{/static/dashboard.css} are served with
        their content types, the strict headers and distinct entity tags.
        """
        etags = set()
        for name, contentType in [
            ("dashboard.js", b"text/javascript; charset=utf-8"),
            ("dashboard.css", b"text/css; charset=utf-8"),
        ]:
            response, body = self.request("GET", "/static/" + name)
            self.assertEqual(response.code, 200, name)
            self.assertEqual(body, self.static[name].body)
            self.assertEqual(self.header(response, b"Content-Type"), [contentType])
            self.assertStrictHeaders(response)
            etags.update(self.header(response, b"ETag") or [])
        self.assertEqual(len(etags), 2)

    def test_head(self) -> None:
        """
        C{HEAD} answers with the headers C{GET} would send, the length of
        the body included, and no body.
        """
        for path, name in [("/", "index.html"), ("/static/dashboard.js", "dashboard.js")]:
            response, body = self.request("HEAD", path)
            self.assertEqual(response.code, 200)
            self.assertEqual(body, b"")
            self.assertEqual(
                self.header(response, b"Content-Length"), [b"%d" % (len(self.static[name].body),)]
            )
            self.assertEqual(self.header(response, b"Content-Type"), [self.static[name].contentType])
            self.assertStrictHeaders(response)

    def test_notModified(self) -> None:
        """
        A request naming the current entity tag in C{If-None-Match} (alone,
        in a list or weak) is answered 304 without a body; a stale tag gets
        the file.
        """
        etag = self.static["dashboard.css"].etag
        for value in [etag, b'"other", ' + etag, b"W/" + etag, b"*"]:
            response, body = self.request(
                "GET", "/static/dashboard.css", headers={b"If-None-Match": [value]}
            )
            self.assertEqual((response.code, body), (304, b""), value)
        response, body = self.request(
            "GET", "/static/dashboard.css", headers={b"If-None-Match": [b'"stale"']}
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(body, self.static["dashboard.css"].body)

    def test_methodNotAllowed(self) -> None:
        """
        Any method but C{GET} and C{HEAD}, standard or not, is answered 405
        with C{Allow: GET, HEAD}.
        """
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PROPFIND"]:
            for path in ["/", "/static/dashboard.js"]:
                response, body = self.request(method, path)
                self.assertEqual(response.code, 405, (method, path))
                self.assertEqual(self.header(response, b"Allow"), [b"GET, HEAD"])
                self.assertNotIn(b"<", body)

    def test_notFound(self) -> None:
        """
        Every other path is 404: the static directory itself, files that
        are not assets (the page is only at C{/}), paths below a file,
        traversal attempts and unknown children.
        """
        for path in [
            "/static/", "/static", "/static/index.html", "/static/nope.js",
            "/static/dashboard.js/x", "/static/../setup.cfg", "/static/%2e%2e/dashboard.py",
            "/index.html", "/nope", "//x",
        ]:
            response, _ = self.request("GET", path)
            self.assertEqual(response.code, 404, path)

    def test_mountDashboard(self) -> None:
        """
        L{mountDashboard} serves the page at C{/} and the files at
        C{/static/} of another root, whose other children keep working.
        """
        root = Resource()
        root.putChild(b"status.json", Data(b"{}", "application/json"))
        dashboard = mountDashboard(root, DashboardResource(self.static))
        treq: Any = StubTreq(root)
        for path, expected in [
            ("/", self.static["index.html"].body),
            ("/static/dashboard.js", self.static["dashboard.js"].body),
            ("/status.json", b"{}"),
        ]:
            response = self.successResultOf(treq.get("http://127.0.0.1" + path))
            self.assertEqual(response.code, 200, path)
            self.assertEqual(self.successResultOf(treq.content(response)), expected)
        self.assertIs(root.children[b"static"], dashboard.static)


class StaticFilesTests(SynchronousTestCase):
    """
    The page holds the whole DOM contract, runs under the strict policy,
    and its files are package data.
    """

    def test_domContract(self) -> None:
        """
        The served page has every id of the DOM contract, each on the
        element the contract expects (the token a password field), and every
        overall value starts with a C{data-value} attribute.
        """
        elements = parse(loadStaticFiles()["index.html"].body)
        missing = sorted(set(CONTRACT_IDS) - set(elements.ids))
        self.assertEqual(missing, [])
        for id, tag in CONTRACT_IDS.items():
            if tag is not None:
                self.assertEqual(elements.ids[id][0], tag, id)
            if id.startswith("overall-"):
                self.assertIn("data-value", elements.ids[id][1], id)
        self.assertEqual(elements.ids["token"][1].get("type"), "password")
        self.assertIn("data-time", elements.ids["updated"][1])
        self.assertIn("aria-live", elements.ids["control-status"][1])

    def test_rowContract(self) -> None:
        """
        The script builds the job rows, folder rows and controls with the
        contract's classes and attributes, and keeps the poll counter.
        """
        script = loadStaticFiles()["dashboard.js"].body.decode("utf-8")
        for name in CONTRACT_ROW_NAMES:
            self.assertIn(name, script)
        for action in ["pause", "resume", "retry-failed", "cancel"]:
            self.assertIn(f'"{action}"', script)

    def test_strictPolicyHolds(self) -> None:
        """
        The page has no inline script, style or event handler (the policy
        would block them) and refers only to its own files, relatively.
        """
        elements = parse(loadStaticFiles()["index.html"].body)
        self.assertEqual(elements.inline, [])
        self.assertEqual(
            sorted(r for r in elements.references if not r.startswith("data:")),
            ["static/dashboard.css", "static/dashboard.js"],
        )

    def test_packageData(self) -> None:
        """
        setup.cfg lists C{imapmig.status.static} as a package whose package
        data covers every file in C{imapmig/status/static/}, and those are
        exactly L{STATIC_FILES}.
        """
        config = configparser.ConfigParser()
        config.read(ROOT / "setup.cfg")
        self.assertIn("imapmig.status.static", config["options"]["packages"].split())
        patterns = config["options.package_data"]["imapmig.status.static"].split()
        folder = ROOT / "imapmig" / "status" / "static"
        present = sorted(path.name for path in folder.iterdir() if path.is_file())
        self.assertEqual(present, sorted(STATIC_FILES))
        for name in present:
            self.assertTrue(
                any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name
            )


class FixtureTests(SynchronousTestCase):
    """
    The fixtures the dashboard is developed against follow the contract,
    and the harness pages and filters them as the contract says.
    """

    def test_fixtureKeys(self) -> None:
        """
        Every job of the fixture snapshots has exactly the contract's keys,
        and each snapshot has the contract's top-level keys and schema 1.
        """
        for name in ["status.json", "status-finished.json"]:
            snapshot = json.loads((FIXTURES / name).read_text("utf-8"))
            self.assertEqual(
                set(snapshot), {"schema", "version", "time", "run", "totals", "throughput", "page", "jobs"}
            )
            self.assertEqual(snapshot["schema"], 1)
            for job in snapshot["jobs"]:
                self.assertEqual(set(job), CONTRACT_JOB_KEYS, job["name"])
            self.assertLessEqual(len(snapshot["throughput"]["samples"]), 360)

    def test_harnessPages(self) -> None:
        """
        The harness answers C{/status.json} with one page of the matching
        jobs and the C{page} object, and serves the dashboard at C{/}.
        """
        treq: Any = StubTreq(HarnessRoot(FixtureRun(jobs=250), "t"))
        response = self.successResultOf(
            treq.get("http://127.0.0.1/status.json?offset=200&limit=100&state=failed")
        )
        snapshot = json.loads(self.successResultOf(treq.content(response)))
        self.assertEqual(snapshot["page"]["matched"], 31)
        self.assertEqual(snapshot["jobs"], [])
        response = self.successResultOf(treq.get("http://127.0.0.1/"))
        self.assertEqual(self.header(response), [CONTENT_SECURITY_POLICY])

    def header(self, response: IResponse) -> list[bytes] | None:
        """
        The Content-Security-Policy of C{response}.
        """
        values: list[bytes] | None = response.headers.getRawHeaders(b"Content-Security-Policy")
        return values
