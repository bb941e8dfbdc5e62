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
import os
import shutil
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.iweb import IResponse
from twisted.web.resource import Resource
from twisted.web.server import Site
from twisted.web.static import Data

from imapmig.status.dashboard import (
    CONTENT_SECURITY_POLICY,
    STATIC_FILES,
    DashboardResource,
    loadStaticFiles,
    mountDashboard,
)
from imapmig.errors import ServerNotFound
from imapmig.testing.privateserver import requireServer
from tests.dashboardharness import FIXTURES, FixtureRun, HarnessRoot, attentionRank

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
    "job-timeline": "table",
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
    "wait",
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
        and each snapshot has the contract's top-level keys and schema 2.
        """
        for name in ["status.json", "status-finished.json", "status-held.json"]:
            snapshot = json.loads((FIXTURES / name).read_text("utf-8"))
            self.assertEqual(
                set(snapshot), {"schema", "version", "time", "run", "totals", "throughput", "page", "jobs"}
            )
            self.assertEqual(snapshot["schema"], 2)
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


class RenderedPage(HTMLParser):
    """
    What a test reads of the page as Chromium left it: the attributes and
    text of every element with an id, and of every job row's cells.

    @ivar ids: attributes (and C{"#text"}) by id.
    @ivar rows: the job names of the rows, in order.
    @ivar cells: attributes (and C{"#text"}) by job name and cell class.
    @ivar chartPaths: the C{<path>}s drawn in the throughput chart.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str]] = {}
        self.rows: list[str] = []
        self.cells: dict[str, dict[str, dict[str, str]]] = {}
        self._open: list[tuple[str, dict[str, str]]] = []
        self._job: str | None = None
        self.chartPaths = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """
        Note ids, rows and cells; collect text for them.
        """
        attributes = {name: value or "" for name, value in attrs}
        attributes["#text"] = ""
        if tag == "path" and any(a.get("id") == "throughput" for _, a in self._open):
            self.chartPaths += 1
        if tag == "tr" and "data-job" in attributes:
            self._job = attributes["data-job"]
            self.rows.append(self._job)
            self.cells[self._job] = {}
        if "id" in attributes:
            self.ids[attributes["id"]] = attributes
        if self._job is not None:
            for name in attributes.get("class", "").split():
                self.cells[self._job].setdefault(name, attributes)
        if tag not in ("wbr", "br", "input", "meta", "link", "img"):
            self._open.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        """
        Close the innermost element called C{tag}.
        """
        while self._open:
            if self._open.pop()[0] == tag:
                break
        if tag == "tr":
            self._job = None

    def handle_data(self, data: str) -> None:
        """
        Text belongs to every open element.
        """
        for _, attributes in self._open:
            attributes["#text"] += data


def findChromium() -> str:
    """
    The path of Debian's C{chromium}.

    @raise ServerNotFound: if it is not installed.
    """
    path = shutil.which("chromium")
    if path is None:
        raise ServerNotFound("no chromium on PATH (apt-get install chromium)")
    return path


class DashboardInChromiumTests(TestCase):
    """
    The page as headless Chromium runs it against the fixtures (served by
    the harness on loopback): the script renders the contract's DOM from
    the JSON and logs nothing to the console.
    """

    timeout = 120

    def load(self, run: FixtureRun) -> Deferred[tuple[RenderedPage, list[str]]]:
        """
        Serve C{run}, let Chromium run the page for 5 s of virtual time,
        and return the DOM it left and its console messages.
        """
        requireServer(self, "Chromium", findChromium)
        from twisted.internet import reactor

        port = reactor.listenTCP(
            0, Site(HarnessRoot(run, "t")), interface="127.0.0.1"  # type: ignore[arg-type]
        )
        address = port.getHost()
        assert isinstance(address, IPv4Address)
        self.addCleanup(port.stopListening)
        profile = os.path.abspath(self.mktemp())
        os.makedirs(profile)

        async def browse() -> tuple[RenderedPage, list[str]]:
            out, err, _ = await getProcessOutputAndValue(
                findChromium(),
                [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    f"--user-data-dir={profile}", "--window-size=1280,900",
                    "--enable-logging=stderr", "--v=1", "--virtual-time-budget=5000",
                    "--dump-dom", f"http://127.0.0.1:{address.port}/",
                ],
                env={"HOME": profile, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
            page = RenderedPage()
            page.feed(out.decode("utf-8"))
            page.close()
            console = [
                line for line in err.decode("utf-8", "replace").splitlines() if ":CONSOLE" in line
            ]
            return page, console

        return Deferred.fromCoroutine(browse())

    async def _running(self) -> None:
        run = FixtureRun()
        page, console = await self.load(run)
        self.assertEqual(console, [])
        # Attention first by default: the failed job, then the ones with
        # failed messages, ... (the harness sorts as the daemon does).
        self.assertEqual(
            page.rows, [job["name"] for job in sorted(run.base["jobs"], key=attentionRank)]
        )
        self.assertEqual(page.rows[0], "dave@example.org")
        totals = run.base["totals"]
        self.assertEqual(page.ids["overall-done"]["data-value"], str(totals["messages_done"]))
        self.assertEqual(page.ids["overall-total"]["data-value"], "")
        self.assertEqual(page.ids["overall-total"]["#text"], "not yet counted")
        self.assertIn("Not yet counted: 2 jobs", page.ids["overall-uncounted"]["#text"])
        self.assertIn("hidden", page.ids["daemons-list-differs"])
        self.assertEqual(page.ids["jobs-page"]["#text"], "1-8 of 8")
        # The snapshot shown is one the harness served (a later poll may be in flight).
        shown = float(page.ids["updated"]["data-time"])
        self.assertIn(shown, [run.base["time"] + 2 * n for n in range(1, run.polls + 1)])
        uncounted = page.cells["heidi@example.org"]
        self.assertEqual((uncounted["job-total"]["data-value"], uncounted["job-total"]["#text"]),
                         ("", "not yet counted"))
        failed = page.cells["dave@example.org"]
        self.assertEqual(failed["job-state"]["data-value"], "failed")
        self.assertIn("subjectAltName", failed["job-error"]["#text"])
        self.assertEqual(page.cells["carol@example.org"]["job-failed"]["data-value"], "24")
        self.assertEqual(page.chartPaths, 3)
        self.assertIn("msg/s", page.ids["throughput"]["#text"])
        self.assertGreater(run.polls, 1)

    def test_running(self) -> Deferred[None]:
        """
        Mid-run: every fixture job has its row in order, the overall and
        per-job numbers are the JSON's (uncounted totals say so, with an
        empty C{data-value}), the error is in words, the page polled more
        than once, and the console stays empty.
        """
        return Deferred.fromCoroutine(self._running())

    async def _finished(self) -> None:
        run = FixtureRun(finished=True)
        run.base["fleet_list_differs"] = "its file (digest d1) is not the fleet's list's"
        page, console = await self.load(run)
        self.assertEqual(console, [])
        # A daemon whose job list differs from the fleet's says so.
        differs = page.ids["daemons-list-differs"]
        self.assertNotIn("hidden", differs)
        self.assertIn("differs from the fleet's: its file (digest d1)", differs["#text"])
        self.assertEqual(page.ids["verify-result"]["data-outcome"], "ok")
        self.assertIn("OK: 7 jobs, 0 differences", page.ids["verify-result"]["#text"])
        self.assertIn("Never counted: 1 job", page.ids["overall-uncounted"]["#text"])
        self.assertEqual(page.ids["connection"]["#text"], "Run finished")
        # The version, in the header and the footer.
        self.assertEqual(page.ids["version"]["#text"], "v0.1.0")
        self.assertEqual(page.ids["footer-version"]["#text"], "v0.1.0")

    def test_finished(self) -> Deferred[None]:
        """
        After the run: the verify result is shown as OK, a job list that
        differs from the fleet's is a notice, the job that never
        listed its source is called never counted, the status line says
        the run finished, and the header and the footer show the version.
        """
        return Deferred.fromCoroutine(self._finished())


BROKEN_WORDS = """
var broken = [];
document.querySelectorAll("#job-failures td:not(.failure-message-id)").forEach(function (td) {
  var walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  for (var node = walker.nextNode(); node; node = walker.nextNode()) {
    var word = /\\S+/g, match;
    while ((match = word.exec(node.data))) {
      var range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      var lines = {};
      Array.from(range.getClientRects()).forEach(function (rect) {
        if (rect.width > 0) lines[Math.round(rect.top)] = true;
      });
      if (Object.keys(lines).length > 1) broken.push(match[0]);
    }
  }
});
return [document.querySelectorAll("#job-failures tbody tr").length, broken];
"""


class FailuresLayoutTests(SynchronousTestCase):
    """
    The job panel's failed messages in a real browser (Selenium and
    headless Chromium, as L{tests.browser} drives them), served by the
    harness in a process of its own.
    """

    def test_wordsKeptWhole(self) -> None:
        """
        With a failure's From, Subject and Date under its Message-ID, the
        Folder and Reason columns keep their words whole at 1280 pixels:
        before, the table squeezed them to a few letters ("INBO" / "X",
        "destinat" / "ion").
        """
        import subprocess
        import sys
        import time

        from imapmig.testing.ports import freePort
        from tests.browser import requireBrowser, startBrowser
        from tests.support import SOURCE_TREE, sourceTreeEnvironment

        requireBrowser(self)
        port = freePort()
        harness = subprocess.Popen(
            [sys.executable, "-m", "tests.dashboardharness", "--port", str(port)],
            cwd=SOURCE_TREE, env=sourceTreeEnvironment(), stdout=subprocess.DEVNULL,
        )
        self.addCleanup(harness.wait, 30)
        self.addCleanup(harness.terminate)
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        driver = startBrowser(self, directory)
        deadline = time.monotonic() + 60
        while True:
            try:
                driver.get(f"http://127.0.0.1:{port}/#job=alice%40example.org")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        rows, broken = 0, ["(not read)"]
        while time.monotonic() < deadline:
            rows, broken = driver.execute_script(BROKEN_WORDS)
            if rows == 3:
                break
            time.sleep(0.2)
        self.assertEqual((rows, broken), (3, []))
