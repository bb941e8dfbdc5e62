# -*- test-case-name: tests.test_status -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests for L{imapmig.status.resource}, served in memory by treq's
L{StubTreq}: no sockets, no global reactor.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IResponse
from twisted.web.resource import IResource
from twisted.web.server import Site

import imapmig
from imapmig.job import JobInputs, JobMachine
from imapmig.progress import JobProgress, MigrationProgress
from imapmig.access.secrets import Secret
from imapmig.state.memory import MemoryStateStore
from imapmig.status.controls import ControlResource
from imapmig.status.resource import StatusResource, buildStatusSite



def running(progress: JobProgress, clock: Clock) -> JobInputs:
    """
    Drive C{progress} with a real job lifecycle into its running state.

    @return: the lifecycle, for later inputs.
    """
    lifecycle = JobMachine(progress.name, progress, clock)
    lifecycle.start()
    lifecycle.connected()
    return lifecycle


class StatusResourceTests(SynchronousTestCase):
    """
    L{StatusResource} serves the progress as JSON and HTML.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.store = MemoryStateStore()
        self.treq: Any = StubTreq(StatusResource(self.progress, self.clock.seconds, self.store))

    def request(self, method: str, path: str) -> tuple[IResponse, bytes]:
        """
        Make a request of the resource and return the response and its body.
        """
        response: IResponse = self.successResultOf(
            self.treq.request(method, "http://127.0.0.1:8080" + path)
        )
        body: bytes = self.successResultOf(self.treq.content(response))
        return response, body

    def header(self, response: IResponse, name: bytes) -> list[bytes] | None:
        """
        The values of the response header C{name}.
        """
        values: list[bytes] | None = response.headers.getRawHeaders(name)
        return values

    def runningJobs(self) -> None:
        """
        Two jobs: C{alpha} running for 10 seconds, 40 of 100 done, 2 failed;
        C{beta} queued with 30 messages.
        """
        alpha = self.progress.addJob("alpha")
        beta = self.progress.addJob("beta")
        running(alpha, self.clock)
        alpha.census(100, None, 1, [])
        alpha.messagesDone = 40
        alpha.messagesSettled = 40
        alpha.messagesFailed = 2
        alpha.bytesDone = 4096
        beta.census(30, None, 1, [])
        self.clock.advance(10)

    def test_json(self) -> None:
        """
        C{GET /status.json} returns every job with its name, state and
        counters, and the totals across jobs.
        """
        self.runningJobs()
        response, body = self.request("GET", "/status.json")
        self.assertEqual(response.code, 200)
        status = json.loads(body)
        self.assertEqual(status["time"], 1_700_000_010)
        self.assertEqual(
            [
                {key: job[key] for key in (
                    "name", "state", "messages_total", "messages_done",
                    "messages_failed", "bytes_done", "messages_per_second",
                )}
                for job in status["jobs"]
            ],
            [
                {
                    "name": "alpha", "state": "running", "messages_total": 100,
                    "messages_done": 40, "messages_failed": 2, "bytes_done": 4096,
                    "messages_per_second": 4.0,
                },
                {
                    "name": "beta", "state": "queued", "messages_total": 30,
                    "messages_done": 0, "messages_failed": 0, "bytes_done": 0,
                    "messages_per_second": None,
                },
            ],
        )
        totals = status["totals"]
        self.assertEqual(
            (
                totals["messages_total"],
                totals["messages_done"],
                totals["messages_failed"],
                totals["bytes_done"],
            ),
            (130, 40, 2, 4096),
        )
        self.assertEqual(
            totals["jobs"],
            {
                "queued": 1,
                "waiting": 0,
                "connecting": 0,
                "running": 1,
                "backing_off": 0,
                "paused": 0,
                "paused_by_server": 0,
                "deferred": 0,
                "stopping": 0,
                "stopped": 0,
                "done": 0,
                "done_with_failures": 0,
                "failed": 0,
                "cancelled": 0,
            },
        )
        self.assertEqual((status["schema"], status["version"]), (2, imapmig.__version__))

    def test_controlsEnabled(self) -> None:
        """
        C{controls.enabled} says whether the site's C{/control} can allow
        anything: false without C{/control} or without a token (the page
        then shows no control), true with one.
        """
        _, body = self.request("GET", "/status.json")
        self.assertEqual(json.loads(body)["controls"], {"enabled": False})
        for token, enabled in ((None, False), (Secret("t" * 32), True)):
            # The controls themselves play no part in status.json.
            control = ControlResource(None, token, self.clock)  # type: ignore[arg-type]
            root = StatusResource(self.progress, self.clock.seconds, self.store, control=control)
            self.treq = StubTreq(root)
            _, body = self.request("GET", "/status.json")
            status = json.loads(body)
            self.assertEqual(status["controls"], {"enabled": enabled})

    def test_jsonHeaders(self) -> None:
        """
        C{/status.json} is served as UTF-8 JSON that must not be cached.
        """
        response, body = self.request("GET", "/status.json")
        self.assertEqual(
            self.header(response, b"content-type"), [b"application/json; charset=utf-8"]
        )
        self.assertEqual(self.header(response, b"cache-control"), [b"no-store"])
        self.assertEqual(json.loads(body)["jobs"], [])

    def test_head(self) -> None:
        """
        C{HEAD /status.json} answers with the headers of C{GET}, including
        its length, and no body.
        """
        self.runningJobs()
        _, getBody = self.request("GET", "/status.json")
        response, body = self.request("HEAD", "/status.json")
        self.assertEqual(response.code, 200)
        self.assertEqual(body, b"")
        self.assertEqual(
            self.header(response, b"content-type"), [b"application/json; charset=utf-8"]
        )
        self.assertEqual(
            self.header(response, b"content-length"), [str(len(getBody)).encode("ascii")]
        )

    def test_followsProgress(self) -> None:
        """
        Each response reflects the progress object as it is at that moment.
        """
        job = self.progress.addJob("alpha")
        first = json.loads(self.request("GET", "/status.json")[1])
        lifecycle = running(job, self.clock)
        job.census(10, None, 1, [])
        job.messagesDone = 7
        job.bytesDone = 700
        self.clock.advance(1)
        second = json.loads(self.request("GET", "/status.json")[1])
        self.assertEqual(
            (
                first["jobs"][0]["state"],
                first["jobs"][0]["messages_done"],
                first["totals"]["bytes_done"],
            ),
            ("queued", 0, 0),
        )
        self.assertEqual(
            (
                second["jobs"][0]["state"],
                second["jobs"][0]["messages_done"],
                second["totals"]["bytes_done"],
            ),
            ("running", 7, 700),
        )
        lifecycle.fail("LOGIN failed")
        third = json.loads(self.request("GET", "/status.json")[1])
        self.assertEqual(
            (third["jobs"][0]["state"], third["jobs"][0]["error"]), ("failed", "LOGIN failed")
        )

    def test_backingOff(self) -> None:
        """
        A job that backs off shows it and why, on the page and in the JSON
        (with when it tries again).
        """
        job = self.progress.addJob("alpha")
        lifecycle = running(job, self.clock)
        lifecycle.backOff("connection lost: reset by the server", 8.0)
        status = json.loads(self.request("GET", "/status.json")[1])
        self.assertEqual(
            (status["jobs"][0]["state"], status["jobs"][0]["waiting_for"], status["jobs"][0]["retry_at"]),
            ("backing_off", "connection lost: reset by the server", self.clock.seconds() + 8.0),
        )
        lifecycle.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_dashboard(self) -> None:
        """
        C{GET /} is the dashboard: an HTML page whose scripts and styles
        come from the site itself only (its own tests are in
        L{tests.test_dashboard}).
        """
        response, body = self.request("GET", "/")
        self.assertEqual(response.code, 200)
        self.assertEqual(self.header(response, b"content-type"), [b"text/html; charset=utf-8"])
        self.assertIn(b'id="jobs"', body)
        [policy] = self.header(response, b"content-security-policy") or [b""]
        self.assertIn(b"script-src 'self'", policy)
        response, body = self.request("GET", "/static/dashboard.js")
        self.assertEqual(response.code, 200)

    def test_notFound(self) -> None:
        """
        Any other path is 404.
        """
        for path in ("/nope", "/status", "/status.json/", "/status.json/x", "/index.html"):
            response, _ = self.request("GET", path)
            self.assertEqual((path, response.code), (path, 404))

    def test_methodNotAllowed(self) -> None:
        """
        Methods other than C{GET} and C{HEAD} are answered with 405 and an
        C{Allow} header naming those two.
        """
        for path in ("/status.json", "/"):
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                response, _ = self.request(method, path)
                self.assertEqual((method, path, response.code), (method, path, 405))
                self.assertEqual(self.header(response, b"allow"), [b"GET, HEAD"])


class BuildStatusSiteTests(SynchronousTestCase):
    """
    L{buildStatusSite} makes the site to serve.
    """

    def test_site(self) -> None:
        """
        The site serves a L{StatusResource} of the progress given, on the
        reactor given, without tracebacks for clients.
        """
        reactor = MemoryReactorClock()
        progress = MigrationProgress(reactor.seconds)
        progress.addJob("alpha")
        root = StatusResource(progress, reactor.seconds, MemoryStateStore())
        site = buildStatusSite(root, reactor)
        self.assertIsInstance(site, Site)
        self.assertIs(site.reactor, reactor)
        self.assertFalse(site.displayTracebacks)
        resource: IResource = site.resource
        self.assertIsInstance(resource, StatusResource)
        treq: Any = StubTreq(resource)
        response = self.successResultOf(treq.get("http://127.0.0.1/status.json"))
        status = json.loads(self.successResultOf(treq.content(response)))
        self.assertEqual([job["name"] for job in status["jobs"]], ["alpha"])

    def test_quiet(self) -> None:
        """
        At the default log level the site says nothing: no "Starting
        factory" or "Stopping factory", and no access-log line per
        request; each request is a debug event with its method, path and
        response code.
        """
        reactor = MemoryReactorClock()
        progress = MigrationProgress(reactor.seconds)
        root = StatusResource(progress, reactor.seconds, MemoryStateStore())
        site = buildStatusSite(root, reactor)
        with capturedLogs() as events:
            site.doStart()
            channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
            assert channel is not None
            transport = StringTransport()
            channel.makeConnection(transport)
            channel.dataReceived(b"GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            channel.connectionLost(ConnectionDone())
            site.doStop()
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
        self.assertEqual(
            [e for e in events if e["log_level"] > LogLevel.debug], []
        )
        [request] = [e for e in events if e.get("path") is not None]
        self.assertEqual(
            (request["log_level"], request["method"], request["path"], request["code"]),
            (LogLevel.debug, "GET", "/status.json", 200),
        )
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_plainSiteIsNoisy(self) -> None:
        """
        The check of L{test_quiet} can fail: a plain L{Site} serving the
        same request logs its factory's start and an access-log line at
        the default level.
        """
        reactor = MemoryReactorClock()
        site = Site(
            StatusResource(MigrationProgress(reactor.seconds), reactor.seconds, MemoryStateStore()),
            reactor=reactor,
        )
        with capturedLogs() as events:
            site.doStart()
            channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
            channel.makeConnection(StringTransport())
            channel.dataReceived(b"GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            channel.connectionLost(ConnectionDone())
            site.doStop()
        loud = [e for e in events if e["log_level"] >= LogLevel.info]
        self.assertTrue(any("Starting factory" in e["log_format"] for e in loud))
        self.assertTrue(any("GET /status.json" in str(e.get("log_io", "")) for e in loud))
