# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests for L{imapmig.status.controls}: the C{/control} resource, served in
memory by treq's L{StubTreq} over a scheduler of fake jobs.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IResponse
from twisted.web.resource import Resource
from twisted.web.server import Site
from zope.interface import implementer

from imapmig.errors import PermanentError
from imapmig.progress import JobState
from imapmig.schedule.controls import IJobControls
from imapmig.access.secrets import Secret
from imapmig.status.bodylimit import MAX_REQUEST_BODY, BoundedRequest
from imapmig.status.controls import MAX_BODY, ControlResource
from tests.test_controls import ControlledScheduler
from tests.test_schedule_service import jobConfig

TOKEN = "s3cret-t0ken-0123456789"
SITE = "http://127.0.0.1:8025"
JSON = {"Content-Type": "application/json"}


def siteWith(
    controls: Any, token: str | None, clock: Clock | None = None, progress: Any = None
) -> Any:
    """
    A StubTreq over a root with C{/control} mounted as the lead mounts it,
    its refusals timed by C{clock} (a new one if not given), its bulk
    controls selecting from C{progress}.
    """
    root = Resource()
    secret = None if token is None else Secret(token)
    root.putChild(b"control", ControlResource(controls, secret, clock or Clock(), progress))
    return StubTreq(root)


class ControlResourceTests(SynchronousTestCase):
    """
    L{ControlResource}: authorisation, cross-site checks, routing, answers.
    """

    def setUp(self) -> None:
        self.s = ControlledScheduler(
            [jobConfig("a", "alice"), jobConfig("b/ü x", "bob"), jobConfig("c", "carol")],
            maxJobs=2,
        )
        self.s.service.startService()
        self.treq = siteWith(self.s.service.controls, TOKEN)

    def tearDown(self) -> None:
        stopping = self.s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)
        self.assertEqual(self.s.clock.getDelayedCalls(), [])

    def post(
        self,
        path: str,
        headers: dict[str, str] | None = None,
        token: str | None = TOKEN,
        data: bytes = b"{}",
        method: str = "POST",
        treq: Any = None,
    ) -> tuple[IResponse, Any]:
        """
        Make a request; return the response and its body parsed as JSON.
        """
        sent = dict(JSON)
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        sent.update(headers or {})
        response: IResponse = self.successResultOf(
            (treq or self.treq).request(method, SITE + path, headers=sent, data=data)
        )
        body: bytes = self.successResultOf((treq or self.treq).content(response))
        self.assertEqual(
            response.headers.getRawHeaders(b"Content-Type"), [b"application/json; charset=utf-8"]
        )
        self.assertEqual(response.headers.getRawHeaders(b"Cache-Control"), [b"no-store"])
        for name, _ in response.headers.getAllRawHeaders():
            self.assertFalse(name.lower().startswith(b"access-control-"), name)
        return response, json.loads(body)

    def test_pause(self) -> None:
        """
        A POST with the token pauses the job: 200, the new state.
        """
        response, body = self.post("/control/jobs/a/pause")
        self.assertEqual(response.code, 200)
        self.assertEqual(
            body, {"ok": True, "job": "a", "state": "paused", "message": "job a paused"}
        )
        self.assertEqual(self.s.state("a"), JobState.PAUSED)
        self.assertEqual(self.s.grants.connectionsInUse("s", "alice"), 0)

    def test_eachControl(self) -> None:
        """
        resume, cancel, retry-failed, pause-all and resume-all answer with
        what they did; a job name is percent-decoded (one segment, even a
        slash).
        """
        quoted = "b%2F%C3%BC%20x"
        response, body = self.post(f"/control/jobs/{quoted}/pause")
        self.assertEqual((response.code, body["job"]), (200, "b/ü x"))
        response, body = self.post(f"/control/jobs/{quoted}/resume")
        self.assertEqual((response.code, body["state"]), (200, "queued"))
        response, body = self.post("/control/pause-all")
        self.assertEqual(
            (response.code, body),
            (200, {"ok": True, "action": "pause-all", "jobs": 3, "message": "3 jobs paused"}),
        )
        response, body = self.post("/control/resume-all")
        self.assertEqual((response.code, body["jobs"]), (200, 3))
        response, body = self.post("/control/jobs/c/cancel")
        self.assertEqual((response.code, body["state"]), (200, "cancelled"))
        self.s.progress.job("a").messagesFailed = 1
        response, body = self.post("/control/jobs/a/retry-failed")
        self.assertEqual((response.code, body["ok"]), (200, True))

    def test_emptyBody(self) -> None:
        """
        An empty body is as good as C{{}}; a charset parameter is allowed.
        """
        response, _ = self.post(
            "/control/jobs/a/pause",
            headers={"Content-Type": "application/json; charset=utf-8"},
            data=b"",
        )
        self.assertEqual(response.code, 200)

    def test_badBody(self) -> None:
        """
        A body that is not a JSON object: 400.
        """
        for data in (b"pause", b"[1]"):
            response, body = self.post("/control/jobs/a/pause", data=data)
            self.assertEqual(response.code, 400)
            self.assertIn("error", body)
        # Claimed and started, not paused.
        self.assertEqual(self.s.state("a"), JobState.CONNECTING)

    def test_missingToken(self) -> None:
        """
        Without a token: 401 with C{WWW-Authenticate: Bearer}; nothing
        done; the refusal logged with the client.
        """
        with capturedLogs() as events:
            response, body = self.post("/control/jobs/a/pause", token=None)
        self.assertEqual(response.code, 401)
        self.assertEqual(body, {"error": "a valid bearer token is required"})
        challenge = response.headers.getRawHeaders(b"WWW-Authenticate")
        assert challenge is not None
        self.assertTrue(challenge[0].startswith(b"Bearer "))
        self.assertFalse(self.s.built["a"].stopped)
        self.assertEqual([e["client"] for e in events if "client" in e], ["127.0.0.1"])

    def test_wrongToken(self) -> None:
        """
        A wrong token, another scheme, or a token that only starts right:
        401, nothing done.
        """
        for headers in (
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": TOKEN},
        ):
            response, body = self.post("/control/jobs/a/pause", headers=headers, token=None)
            self.assertEqual(response.code, 401, headers)
        self.assertFalse(self.s.built["a"].stopped)

    def test_refusalsLoggedOnceAMinute(self) -> None:
        """
        Whoever tries tokens cannot fill the log: the first refusal is a
        warning at once, the next ones within a minute none; a minute after
        the first, one warning names how many were refused since and the
        latest of them, though no request came after them; then nothing
        until the next refusal, which, within the next minute, is reported
        a minute after that line.
        """
        clock = Clock()
        treq = siteWith(self.s.service.controls, TOKEN, clock)
        wrong = {"Authorization": "Bearer wrong"}
        with capturedLogs() as events:
            for _ in range(1000):
                response, _ = self.post(
                    "/control/jobs/a/pause", headers=wrong, token=None, treq=treq
                )
                self.assertEqual(response.code, 401)
            clock.advance(59)
            self.post("/control/jobs/b/pause", headers={"Origin": "http://evil.example"}, treq=treq)
            clock.advance(0.9)
        lines = [formatEvent(e) for e in events if "client" in e]
        self.assertEqual(
            lines, ["Control request /control/jobs/a/pause from 127.0.0.1 refused: wrong token"]
        )
        with capturedLogs() as events:
            clock.advance(0.1)
            clock.advance(600)
        lines = [formatEvent(e) for e in events if "client" in e]
        self.assertEqual(
            lines,
            [
                "Control request /control/jobs/b/pause from 127.0.0.1 refused: cross-origin"
                " request refused (1000 control requests refused for their token or origin"
                " since the last such line; at most one line a minute)"
            ],
        )
        self.assertEqual([e["log_level"] for e in events if "client" in e], [LogLevel.warn])
        with capturedLogs() as events:
            self.post("/control/jobs/a/pause", headers=wrong, token=None, treq=treq)
            clock.advance(1)
            self.post("/control/jobs/a/pause", headers=wrong, token=None, treq=treq)
            clock.advance(59)
        lines = [formatEvent(e) for e in events if "client" in e]
        self.assertEqual(
            lines,
            [
                "Control request /control/jobs/a/pause from 127.0.0.1 refused: wrong token",
                "Control request /control/jobs/a/pause from 127.0.0.1 refused: wrong token",
            ],
        )
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertFalse(self.s.built["a"].stopped)
        self.assertFalse(self.s.built["b/ü x"].stopped)

    def test_unconfiguredRefusalsLoggedOnceAMinute(self) -> None:
        """
        Without C{status.token_file}, whoever posts to C{/control} cannot
        fill the log either: the first refusal is logged at once (at info
        level: read-only by configuration), the next ones within a minute
        not then; a minute after the first, one line names how many were
        refused since.
        """
        clock = Clock()
        treq = siteWith(self.s.service.controls, None, clock)
        with capturedLogs() as events:
            for _ in range(1000):
                response, _ = self.post("/control/pause-all", treq=treq)
                self.assertEqual(response.code, 403)
            clock.advance(59)
        lines = [formatEvent(e) for e in events if "client" in e]
        self.assertEqual(
            lines,
            [
                "Control request /control/pause-all from 127.0.0.1 refused:"
                " controls are disabled: no status.token_file"
            ],
        )
        with capturedLogs() as events:
            clock.advance(1)
        lines = [formatEvent(e) for e in events if "client" in e]
        self.assertEqual(
            lines,
            [
                "Control request /control/pause-all from 127.0.0.1 refused: controls are"
                " disabled: no status.token_file (999 control requests refused since the"
                " last such line; at most one line a minute)"
            ],
        )
        self.assertEqual([e["log_level"] for e in events if "client" in e], [LogLevel.info])
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertFalse(self.s.built["a"].stopped)

    def test_unconfigured(self) -> None:
        """
        Without C{status.token_file}: 403 whatever the token.
        """
        treq = siteWith(self.s.service.controls, None)
        response, body = self.post("/control/jobs/a/pause", treq=treq)
        self.assertEqual(response.code, 403)
        self.assertEqual(body, {"error": "controls are disabled: no status.token_file"})
        self.assertFalse(self.s.built["a"].stopped)

    def test_crossSite(self) -> None:
        """
        A foreign or opaque C{Origin}, a cross-site C{Sec-Fetch-Site}, or a
        form's content type: 403, even with the right token.
        """
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "http://127.0.0.1:8026"},
            {"Origin": "https://127.0.0.1:8025"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
            {"Content-Type": "application/x-www-form-urlencoded"},
            {"Content-Type": "text/plain"},
            {"Content-Type": "multipart/form-data; boundary=x"},
        ):
            data = b"{}"
            if "multipart" in headers.get("Content-Type", ""):
                data = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n'
            response, body = self.post("/control/jobs/a/pause", headers=headers, data=data)
            self.assertEqual(response.code, 403, headers)
            self.assertIn("error", body)
        self.assertFalse(self.s.built["a"].stopped)

    def test_sameOrigin(self) -> None:
        """
        The site's own C{Origin} (the default port spelt or not) and
        C{Sec-Fetch-Site: same-origin} pass.
        """
        response, _ = self.post(
            "/control/jobs/a/pause",
            headers={"Origin": "http://127.0.0.1:8025", "Sec-Fetch-Site": "same-origin"},
        )
        self.assertEqual(response.code, 200)
        response, _ = self.post(
            "/control/jobs/a/resume", headers={"Host": "example.org", "Origin": "http://example.org:80"}
        )
        self.assertEqual(response.code, 200)

    def test_oversizeBody(self) -> None:
        """
        A body over L{MAX_BODY} octets: 413, nothing done.
        """
        data = b'{"x": "' + b"a" * MAX_BODY + b'"}'
        response, body = self.post("/control/jobs/a/pause", data=data)
        self.assertEqual(response.code, 413)
        self.assertFalse(self.s.built["a"].stopped)

    def test_methods(self) -> None:
        """
        GET, PUT, OPTIONS: 405 with C{Allow: POST} (no CORS preflight).
        """
        for method in ("GET", "PUT", "OPTIONS", "DELETE"):
            response, body = self.post("/control/jobs/a/pause", method=method)
            self.assertEqual(response.code, 405, method)
            self.assertEqual(response.headers.getRawHeaders(b"Allow"), [b"POST"])

    def test_notFound(self) -> None:
        """
        An unknown job, an unknown action, a path of the wrong shape: 404.
        """
        response, body = self.post("/control/jobs/nope/pause")
        self.assertEqual((response.code, body), (404, {"error": "no job named 'nope'"}))
        for path in (
            "/control/jobs/a/explode",
            "/control/jobs/a",
            "/control/jobs/a/pause/",
            "/control",
            "/control/pause-all/",
        ):
            response, body = self.post(path)
            self.assertEqual(response.code, 404, path)

    def test_notApplicable(self) -> None:
        """
        A control that does not apply: 409 with the reason.
        """
        response, body = self.post("/control/jobs/a/resume")
        self.assertEqual((response.code, body), (409, {"error": "job a is not paused or cancelled"}))
        response, body = self.post("/control/jobs/a/retry-failed")
        self.assertEqual((response.code, body), (409, {"error": "nothing of job a failed"}))


class BulkControlTests(SynchronousTestCase):
    """
    C{/control/bulk/ACTION}: a control over the jobs a filter selects,
    applied only as confirmed from its preview, logged once.
    """

    def setUp(self) -> None:
        self.s = ControlledScheduler(
            [jobConfig(name, name) for name in ("a", "b", "c1", "c2", "c3")], maxJobs=2
        )
        self.s.service.startService()
        self.treq = siteWith(self.s.service.controls, TOKEN, progress=self.s.progress)
        self.post = ControlResourceTests.post.__get__(self)

    def tearDown(self) -> None:
        self.s.stop(self)

    def bulk(self, action: str, body: dict[str, Any], **kwargs: Any) -> tuple[IResponse, Any]:
        """
        POST C{body} as JSON to C{/control/bulk/ACTION}.
        """
        response, answer = self.post(
            f"/control/bulk/{action}", data=json.dumps(body).encode("utf-8"), **kwargs
        )
        return response, answer

    def test_pauseConfirmed(self) -> None:
        """
        The preview counts the jobs the filter selects that the control
        applies to, changing nothing; the control confirmed with its count
        and selection pauses exactly those, logging one line (who, the
        filter, how many), not one per job.
        """
        response, preview = self.bulk("pause/preview", {"q": "C", "state": ["queued", "paused"]})
        self.assertEqual((response.code, preview["matched"], preview["jobs"]), (200, 3, 3))
        self.assertEqual(self.s.state("c1"), JobState.QUEUED)
        with capturedLogs() as events:
            response, body = self.bulk(
                "pause",
                {
                    "q": "C",
                    "state": ["queued", "paused"],
                    "count": 3,
                    "selection": preview["selection"],
                },
            )
        self.assertEqual((response.code, body["jobs"]), (200, 3))
        self.assertEqual(
            [self.s.state(n) for n in ("a", "b", "c1", "c2", "c3")],
            [JobState.CONNECTING] * 2 + [JobState.PAUSED] * 3,
        )
        lines = [formatEvent(e) for e in events if e.get("log_level") == LogLevel.info]
        self.assertEqual(
            lines,
            [
                "Control pause by 127.0.0.1 of the jobs in state queued or paused, whose name"
                " holds C: 3 jobs paused of 3 selected"
            ],
        )
        # Resumed alike: of all jobs, the paused ones.
        _, preview = self.bulk("resume/preview", {})
        self.assertEqual((preview["matched"], preview["jobs"]), (5, 3))
        response, body = self.bulk("resume", {"count": 3, "selection": preview["selection"]})
        self.assertEqual((response.code, body["jobs"]), (200, 3))
        self.assertEqual(self.s.state("c3"), JobState.QUEUED)

    def test_selectionChanged(self) -> None:
        """
        A control whose filter selects other jobs than its preview (a job
        paused meanwhile, or another selection of as many) is refused
        (409), changing nothing.
        """
        # c1, c2 and c3: a and b are claimed, and started.
        _, preview = self.bulk("cancel/preview", {"state": "queued"})
        self.assertEqual(preview["jobs"], 3)
        self.post("/control/jobs/c1/pause")
        confirmed = {"state": "queued", "count": 3, "selection": preview["selection"]}
        response, body = self.bulk("cancel", confirmed)
        self.assertEqual(response.code, 409)
        self.assertIn("preview again", body["error"])
        _, preview = self.bulk("cancel/preview", {"state": "queued"})
        for selection in ("0" * 32, "é" * 32, ""):
            forged = {"state": "queued", "count": preview["jobs"], "selection": selection}
            response, _ = self.bulk("cancel", forged)
            self.assertEqual(response.code, 409, selection)
        self.assertEqual(self.s.state("c2"), JobState.QUEUED)

    def test_refused(self) -> None:
        """
        Unconfirmed (no count or selection): 400; a bad filter: 400 naming
        it; no such action: 404; without the token: 401; on a site without
        a token: 403.  Nothing is changed.
        """
        response, body = self.bulk("pause", {"state": "queued"})
        self.assertEqual(response.code, 400)
        self.assertIn("preview", body["error"])
        response, body = self.bulk("pause/preview", {"state": "sleeping"})
        self.assertEqual(response.code, 400)
        self.assertIn("state", body["error"])
        response, _ = self.bulk("pause/preview", {"q": 3})
        self.assertEqual(response.code, 400)
        response, _ = self.bulk("delete/preview", {})
        self.assertEqual(response.code, 404)
        response, _ = self.bulk("pause/preview", {}, token=None)
        self.assertEqual(response.code, 401)
        readOnly = siteWith(self.s.service.controls, None, progress=self.s.progress)
        response, _ = self.bulk("pause/preview", {}, treq=readOnly)
        self.assertEqual(response.code, 403)
        self.assertEqual(self.s.state("c1"), JobState.QUEUED)

    def test_retryFailed(self) -> None:
        """
        Retry-failed applies to the jobs that failed or have failed
        messages.
        """
        self.s.progress.job("c2").messagesFailed = 2
        _, preview = self.bulk("retry-failed/preview", {"errors": True})
        self.assertEqual((preview["matched"], preview["jobs"]), (1, 1))
        response, body = self.bulk(
            "retry-failed", {"errors": True, "count": 1, "selection": preview["selection"]}
        )
        self.assertEqual((response.code, body["jobs"]), (200, 1))


@implementer(IJobControls)
class BrokenControls:
    """
    Controls whose store is closed, or that crash.
    """

    def pause(self, job: str, by: str) -> Deferred[JobState]:
        return Deferred.fromCoroutine(self._storeClosed())

    async def _storeClosed(self) -> JobState:
        raise PermanentError("the state store is closed")

    def resume(self, job: str, by: str) -> Deferred[JobState]:
        raise RuntimeError("a bug")

    cancel = retryFailed = resume

    def pauseAll(self, by: str) -> Deferred[int]:
        raise RuntimeError("a bug")

    resumeAll = pauseAll

    def applies(self, action: str, job: str) -> bool:
        return True

    def bulk(self, action: str, jobs: Sequence[str], by: str, selection: str) -> Deferred[int]:
        raise RuntimeError("a bug")


class ControlErrorTests(SynchronousTestCase):
    """
    Errors of the controls themselves.
    """

    def test_errors(self) -> None:
        """
        A store error: 503 with its message; a crash: 500 "internal error",
        logged with its traceback.
        """
        treq = siteWith(BrokenControls(), TOKEN)
        headers = {**JSON, "Authorization": f"Bearer {TOKEN}"}
        response = self.successResultOf(
            treq.request("POST", SITE + "/control/jobs/a/pause", headers=headers, data=b"{}")
        )
        self.assertEqual(response.code, 503)
        self.assertEqual(
            json.loads(self.successResultOf(treq.content(response))),
            {"error": "the state store is closed"},
        )
        response = self.successResultOf(
            treq.request("POST", SITE + "/control/jobs/a/resume", headers=headers, data=b"{}")
        )
        self.assertEqual(response.code, 500)
        self.assertEqual(
            json.loads(self.successResultOf(treq.content(response))), {"error": "internal error"}
        )
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class BoundedRequestTests(SynchronousTestCase):
    """
    L{BoundedRequest}: the status site reads no body larger than
    L{MAX_REQUEST_BODY}.
    """

    def setUp(self) -> None:
        self.s = ControlledScheduler([jobConfig("a", "alice")], maxJobs=1)
        self.s.service.startService()
        root = Resource()
        root.putChild(b"control", ControlResource(self.s.service.controls, Secret(TOKEN), Clock()))
        site = Site(root)
        site.requestFactory = BoundedRequest
        self.transport = StringTransport()
        self.channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.channel.makeConnection(self.transport)

    def tearDown(self) -> None:
        self.channel.connectionLost(Failure(ConnectionDone()))
        stopping = self.s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)

    def head(self, length: int | None) -> bytes:
        """
        A control request's head, its body C{length} octets long (chunked
        if L{None}).
        """
        framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
        return (
            b"POST /control/jobs/a/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\n"
            + framing
            + b"\r\n\r\n"
        )

    def test_declaredTooLarge(self) -> None:
        """
        A body declared larger than the bound is refused (413) before it
        is read, the connection closed, and the request never rendered.
        """
        self.channel.dataReceived(self.head(MAX_REQUEST_BODY + 1) + b"{" * 1000)
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 413 "))
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse(self.s.built["a"].stopped)

    def test_chunkedTooLarge(self) -> None:
        """
        A chunked body that grows past the bound is refused as it arrives.
        """
        chunk = b"%x\r\n%s\r\n" % (4096, b" " * 4096)
        self.channel.dataReceived(self.head(None))
        for _ in range(MAX_REQUEST_BODY // 4096 + 1):
            self.channel.dataReceived(chunk)
        # Refused before the body ends.
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 413 "))
        self.assertTrue(self.transport.disconnecting)
        self.channel.dataReceived(b"0\r\n\r\n")
        self.assertEqual(self.transport.value().count(b"HTTP/1.1"), 1)
        self.assertFalse(self.s.built["a"].stopped)

    def test_smallBody(self) -> None:
        """
        A body within the bound reaches the resource.
        """
        self.channel.dataReceived(self.head(2) + b"{}")
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 200 "), self.transport.value())
        self.assertTrue(self.s.built["a"].stopped)


class SiteStopTests(SynchronousTestCase):
    """
    The status site (L{buildStatusSite}) that stops listening logs the
    control requests refused and not yet logged.
    """

    def test_refusalsLoggedAtStop(self) -> None:
        """
        Refusals counted within the minute after the last line are logged
        when the site stops, not lost, and no delayed call is left.
        """
        from imapmig.progress import MigrationProgress
        from imapmig.state.memory import MemoryStateStore
        from imapmig.status.resource import StatusResource, buildStatusSite

        clock = Clock()
        scheduler = ControlledScheduler([jobConfig("a", "alice")], maxJobs=1)
        root = StatusResource(
            MigrationProgress(clock.seconds),
            clock.seconds,
            MemoryStateStore(),
            control=ControlResource(scheduler.service.controls, Secret(TOKEN), clock),
        )
        site = buildStatusSite(root, clock)
        site.doStart()
        with capturedLogs() as events:
            for _ in range(3):
                channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
                assert channel is not None
                transport = StringTransport(
                    hostAddress=IPv4Address("TCP", "127.0.0.1", 8025),
                    peerAddress=IPv4Address("TCP", "127.0.0.1", 40000),
                )
                channel.makeConnection(transport)
                channel.dataReceived(
                    b"POST /control/pause-all HTTP/1.0\r\nHost: localhost\r\n"
                    b"Content-Type: application/json\r\nAuthorization: Bearer wrong\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                channel.connectionLost(None)
                self.assertTrue(transport.value().startswith(b"HTTP/1.0 401 "))
            site.doStop()
        lines = [formatEvent(e) for e in events if "why" in e]
        self.assertEqual(
            lines,
            [
                "Control request /control/pause-all from 127.0.0.1 refused: wrong token",
                "Control request /control/pause-all from 127.0.0.1 refused: wrong token (2"
                " control requests refused for their token or origin since the last such"
                " line; at most one line a minute)",
            ],
        )
        self.assertEqual(clock.getDelayedCalls(), [])
