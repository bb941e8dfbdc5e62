"""
Tests for L{imapmig.daemon.webhook} and L{imapmig.config.notify}: the C{notify:}
section, the sender's requests, retries, timeouts and queue bound, and
what the run watcher notifies, all on a L{Clock} with a fake agent.
"""

from __future__ import annotations

import json
import os
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import ResponseDone
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IBodyProducer
from zope.interface import implementer
from zope.interface.verify import verifyObject

from imapmig.access import cleartext
from imapmig.config import NotifyConfig, parseConfig
from imapmig.progress import JobState, MigrationProgress
from imapmig.status.redact import withoutPaths
from imapmig.daemon.reloadplan import keptForRestart, planReload
from imapmig.access.secrets import Secret
from imapmig.daemon.webhook import (
    ATTEMPTS,
    CHECK_EVERY,
    QUEUE_LIMIT,
    TIMEOUT,
    RunWatcher,
    WebhookSender,
    agentFor,
    retryDelay,
)
from tests.test_config import ConfigTestCase, writeFile

URL = "https://hooks.example.org/services/T0/B0/SECRETPATH"
TOKEN = "webhook-token-0123456789abcdef"


class _Transport:
    """
    A response body's transport: stopping it is recorded.
    """

    stopped = False

    def stopProducing(self) -> None:
        self.stopped = True


class FakeResponse:
    """
    An L{IResponse} with a code, headers and a body given at once.
    """

    def __init__(
        self, code: int, body: bytes = b"", headers: dict[bytes, list[bytes]] | None = None
    ) -> None:
        self.code = code
        self.headers = Headers(headers or {})
        self._body = body

    def deliverBody(self, protocol: Protocol) -> None:
        protocol.makeConnection(_Transport())
        if self._body:
            protocol.dataReceived(self._body)
        protocol.connectionLost(Failure(ResponseDone()))


@implementer(IAgent)
class FakeAgent:
    """
    An agent whose requests wait for the test: each is recorded with its
    method, URL, headers and body, and its Deferred.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes, Headers, bytes, Deferred[Any]]] = []
        self.cancelled = 0

    def request(
        self,
        method: bytes,
        uri: bytes,
        headers: Headers | None = None,
        bodyProducer: IBodyProducer | None = None,
    ) -> Deferred[Any]:
        assert headers is not None and bodyProducer is not None
        written: list[bytes] = []

        class Consumer:
            def write(self, data: bytes) -> None:
                written.append(data)

        bodyProducer.startProducing(Consumer())

        def cancel(d: Deferred[Any]) -> None:
            self.cancelled += 1

        d: Deferred[Any] = Deferred(cancel)
        self.requests.append((method, uri, headers, b"".join(written), d))
        return d

    def answer(self, code: int, body: bytes = b"", **headers: str) -> None:
        """
        Answer the last request.
        """
        raw = {name.replace("_", "-").encode(): [value.encode()] for name, value in headers.items()}
        self.requests[-1][4].callback(FakeResponse(code, body, raw))

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, _, _, body, _ in self.requests]


class SenderTests(SynchronousTestCase):
    """
    L{WebhookSender}: one request at a time, retried with a backoff,
    bounded in time and in queue.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.agent = FakeAgent()
        verifyObject(IAgent, self.agent)
        self.sender = WebhookSender(self.clock, self.agent, URL, Secret(TOKEN))

    def test_post(self) -> None:
        """
        A notification is a JSON POST to the URL with the token as a
        bearer token; the next waits for its answer.
        """
        self.sender.send("job_failed", {"event": "job_failed", "job": "alice"})
        self.sender.send("run_finished", {"event": "run_finished"})
        self.assertEqual(len(self.agent.requests), 1)
        method, uri, headers, body, _ = self.agent.requests[0]
        self.assertEqual((method, uri), (b"POST", URL.encode()))
        self.assertEqual(headers.getRawHeaders(b"Authorization"), [b"Bearer " + TOKEN.encode()])
        self.assertEqual(headers.getRawHeaders(b"Content-Type"), [b"application/json"])
        self.assertEqual(json.loads(body), {"event": "job_failed", "job": "alice"})
        self.agent.answer(204)
        self.assertEqual(len(self.agent.requests), 2)
        self.agent.answer(200, b"ok")
        self.assertEqual((self.sender.delivered, self.sender.pending), (2, 0))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noToken(self) -> None:
        """
        Without a token, no C{Authorization} header.
        """
        sender = WebhookSender(self.clock, self.agent, URL, None)
        sender.send("stalled", {})
        self.assertIsNone(self.agent.requests[0][2].getRawHeaders(b"Authorization"))
        self.agent.answer(200)

    def test_retries(self) -> None:
        """
        A 5xx answer or a network error is retried after 2, 4, 8, 16 s, up
        to L{ATTEMPTS} requests; then the notification is given up and the
        next is sent.  The first failure and the giving up are warnings
        (naming the receiver by its host only), the retries between them
        debug lines.
        """
        with capturedLogs() as events:
            self.sender.send("job_failed", {"n": 1})
            self.sender.send("job_failed", {"n": 2})
            for attempt in range(1, ATTEMPTS + 1):
                self.assertEqual(len(self.agent.requests), attempt)
                if attempt % 2:
                    self.agent.answer(503, b"down")
                else:
                    self.agent.requests[-1][4].errback(ConnectionRefusedError())
                if attempt < ATTEMPTS:
                    now = self.clock.seconds()
                    self.assertEqual(
                        [call.getTime() - now for call in self.clock.getDelayedCalls()],
                        [retryDelay(attempt)],
                    )
                    self.clock.advance(retryDelay(attempt))
        self.assertEqual([retryDelay(n) for n in range(1, 5)], [2.0, 4.0, 8.0, 16.0])
        self.assertEqual(self.sender.abandoned, 1)
        self.assertEqual(self.agent.bodies()[-1], {"n": 2})
        warnings = [formatEvent(e) for e in events if e["log_level"] == LogLevel.warn]
        self.assertEqual(len(warnings), 2, warnings)
        self.assertEqual(
            warnings[0],
            "Webhook https://hooks.example.org: job_failed notification not taken (HTTP 503:"
            " down); again in 2 s (attempt 1 of 5)",
        )
        self.assertIn(
            "https://hooks.example.org: job_failed notification given up after 5", warnings[1]
        )
        self.assertNotIn("SECRETPATH", " ".join(formatEvent(e) for e in events))
        self.assertNotIn(TOKEN, " ".join(formatEvent(e) for e in events))
        self.agent.answer(200)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_retryAfter(self) -> None:
        """
        A 429's C{Retry-After} (seconds) is waited, at most 60 s.
        """
        self.sender.send("stalled", {})
        self.agent.answer(429, Retry_After="30")
        self.assertEqual([call.getTime() for call in self.clock.getDelayedCalls()], [30.0])
        self.clock.advance(30)
        self.agent.answer(429, Retry_After="3600")
        self.assertEqual([call.getTime() for call in self.clock.getDelayedCalls()], [90.0])
        self.clock.advance(60)
        self.agent.answer(200)
        self.assertEqual(self.sender.delivered, 1)

    def test_refused(self) -> None:
        """
        A 4xx other than 408 and 429 is not retried: the notification is
        given up at once, the log hinting at the token for 401 and 403.
        """
        with capturedLogs() as events:
            self.sender.send("job_failed", {})
            self.agent.answer(401, b"bad token")
        self.assertEqual((len(self.agent.requests), self.sender.abandoned), (1, 1))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        text = " ".join(formatEvent(e) for e in events)
        self.assertIn("HTTP 401: bad token (is notify.token_file the token it expects?)", text)

    def test_timeout(self) -> None:
        """
        A request not answered within L{TIMEOUT} seconds is cancelled and
        retried.
        """
        self.sender.send("job_failed", {})
        self.clock.advance(TIMEOUT - 0.5)
        self.assertEqual(self.agent.cancelled, 0)
        self.clock.advance(0.5)
        self.assertEqual(self.agent.cancelled, 1)
        self.clock.advance(retryDelay(1))
        self.assertEqual(len(self.agent.requests), 2)
        self.agent.answer(200)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_queueBound(self) -> None:
        """
        While the receiver does not answer, at most L{QUEUE_LIMIT}
        notifications wait: each one more drops the oldest waiting, and
        is counted; one warning says so.
        """
        with capturedLogs() as events:
            for n in range(QUEUE_LIMIT + 51):
                self.sender.send("stalled", {"n": n})
        self.assertEqual(self.sender.dropped, 50)
        self.assertEqual(self.sender.pending, QUEUE_LIMIT + 1)
        warnings = [e for e in events if e["log_level"] == LogLevel.warn]
        self.assertEqual(len(warnings), 1)
        # The one in flight, then the newest QUEUE_LIMIT.
        self.agent.answer(200)
        for _ in range(QUEUE_LIMIT):
            self.agent.answer(200)
        self.assertEqual(
            [body["n"] for body in self.agent.bodies()], [0, *range(51, QUEUE_LIMIT + 51)]
        )
        self.assertEqual(self.sender.delivered, QUEUE_LIMIT + 1)

    def test_flush(self) -> None:
        """
        L{WebhookSender.flush} fires once the queue is sent, or after the
        time given, then sends nothing more: the request under way is
        cancelled.
        """
        self.sender.send("run_finished", {})
        flushed = self.sender.flush(5.0)
        self.assertNoResult(flushed)
        self.agent.answer(200)
        self.successResultOf(flushed)
        sender = WebhookSender(self.clock, self.agent, URL, None)
        sender.send("run_finished", {})
        flushed = sender.flush(5.0)
        self.clock.advance(5.0)
        self.successResultOf(flushed)
        self.assertEqual(self.agent.cancelled, 1)
        sender.send("stalled", {})
        self.assertEqual(len(self.agent.requests), 2)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class AgentTests(SynchronousTestCase):
    """
    L{agentFor}: the injected reactor's connections.
    """

    def test_connects(self) -> None:
        """
        The sender's agent connects with the reactor it is given, to the
        URL's host and port, within L{TIMEOUT}; a connection that never
        comes is given up by the request's own timeout.
        """
        reactor = MemoryReactorClock()
        url = "http://127.0.0.1:8099/hook"
        sender = WebhookSender(reactor, agentFor(reactor, url), url, None)
        sender.send("run_finished", {"event": "run_finished"})
        [(host, port, _, timeout, _)] = reactor.tcpClients
        self.assertEqual((host, port, timeout), ("127.0.0.1", 8099, TIMEOUT))
        reactor.advance(TIMEOUT)
        self.assertEqual(len(reactor.tcpClients), 1)
        sender.stop()
        self.assertEqual(reactor.getDelayedCalls(), [])


class FakeSender:
    """
    Records what the watcher sends.
    """

    receiver = "https://hooks.example.org"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.flushed = False

    def send(self, kind: str, payload: dict[str, Any]) -> None:
        self.sent.append(payload)

    def retarget(self, url: str, token: Secret | None) -> None:
        self.receiver = url

    def flush(self, within: float) -> Deferred[None]:
        self.flushed = True
        return succeed(None)


class WatcherTests(SynchronousTestCase):
    """
    L{RunWatcher}: what it notifies, from the progress model, on a clock.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.states: dict[str, JobState] = {}
        for name in ("alice", "bob"):
            job = self.progress.addJob(name)
            self.states[name] = JobState.QUEUED
            job.showState(lambda name=name: self.states[name])  # type: ignore[misc]
        self.sender = FakeSender()
        self.watcher = RunWatcher(
            self.progress,
            self.clock,
            NotifyConfig(URL, None, 600.0),
            {"alice": "dove", "bob": "dove"}.__getitem__,
            self.sender,  # type: ignore[arg-type]
        )
        self.watcher.startService()

    def events(self) -> list[str]:
        return [payload["event"] for payload in self.sender.sent]

    def test_jobFailed(self) -> None:
        """
        A job that enters the failed state is told once, with its server's
        name, its counts, and its reason without the paths in it.
        """
        alice = self.progress.job("alice")
        self.states["alice"] = JobState.RUNNING
        self.clock.advance(CHECK_EVERY)
        alice.finished("Maildir /srv/mail/alice/cur: Permission denied")
        self.states["alice"] = JobState.FAILED
        self.clock.advance(CHECK_EVERY)
        self.clock.advance(CHECK_EVERY)
        self.assertEqual(self.events(), ["job_failed"])
        payload = self.sender.sent[0]
        self.assertEqual(
            {
                key: payload[key]
                for key in ("job", "server", "reason", "messages_done", "messages_failed")
            },
            {
                "job": "alice",
                "server": "dove",
                "reason": "Maildir [path]: Permission denied",
                "messages_done": 0,
                "messages_failed": 0,
            },
        )
        self.assertEqual(payload["time"], "2023-11-14T22:13:30Z")

    def test_runFinished(self) -> None:
        """
        Once every job is done, failed or cancelled, the run's end is told
        once, with the jobs by state; again only after a job ran anew.
        """
        self.states["alice"] = JobState.DONE
        self.clock.advance(CHECK_EVERY)
        self.assertEqual(self.events(), [])
        self.states["bob"] = JobState.CANCELLED
        self.clock.advance(CHECK_EVERY)
        self.clock.advance(CHECK_EVERY)
        self.assertEqual(self.events(), ["run_finished"])
        self.assertEqual(self.sender.sent[0]["jobs"], {"done": 1, "cancelled": 1})
        self.states["bob"] = JobState.RUNNING
        self.clock.advance(CHECK_EVERY)
        self.states["bob"] = JobState.DONE
        self.clock.advance(CHECK_EVERY)
        self.assertEqual(self.events(), ["run_finished", "run_finished"])

    def test_stoppedIsNotFinished(self) -> None:
        """
        Jobs stopped by a stopping daemon did not finish: no run_finished.
        """
        self.states["alice"] = self.states["bob"] = JobState.STOPPED
        self.clock.advance(CHECK_EVERY)
        self.assertEqual(self.events(), [])

    def test_stalled(self) -> None:
        """
        Jobs running or waiting, and no message settled for
        C{stalledAfter} seconds: told once, naming them; a message settled
        arms it again.
        """
        self.states["alice"] = JobState.BACKING_OFF
        self.clock.advance(600 - CHECK_EVERY)
        self.assertEqual(self.events(), [])
        self.clock.advance(CHECK_EVERY)
        self.clock.advance(CHECK_EVERY * 10)
        self.assertEqual(self.events(), ["stalled"])
        payload = self.sender.sent[0]
        self.assertEqual(
            (payload["jobs"], payload["jobs_moving"], payload["seconds_without_progress"]),
            (["alice", "bob"], 2, 600),
        )
        self.progress.job("alice").messagesSettled += 1
        self.clock.advance(CHECK_EVERY)
        self.clock.advance(600)
        self.assertEqual(self.events(), ["stalled", "stalled"])

    def test_pausedIsNotStalled(self) -> None:
        """
        Paused and ended jobs are not expected to move: no stall.
        """
        self.states["alice"] = JobState.PAUSED
        self.states["bob"] = JobState.DONE
        self.clock.advance(3600)
        self.assertEqual(self.events(), [])

    def test_stalledOff(self) -> None:
        """
        With C{stalled_after: off}, no stall is told.
        """
        self.watcher.reconfigure(NotifyConfig(URL, None, None))
        self.clock.advance(3600)
        self.assertEqual(self.events(), [])

    def test_stop(self) -> None:
        """
        Stopping checks once more (a run that just ended is told) and
        flushes the sender; nothing is left on the clock.
        """
        self.states["alice"] = self.states["bob"] = JobState.DONE
        self.successResultOf(self.watcher.stopService())
        self.assertEqual(self.events(), ["run_finished"])
        self.assertTrue(self.sender.flushed)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noSecretInPayload(self) -> None:
        """
        Paths in a reason are replaced; URLs, endpoints and counts stay.
        """
        self.assertEqual(
            withoutPaths("cannot read /etc/imapmig/alice.password or ./x: no; tcp:h:143 5/6"),
            "cannot read [path] or [path]: no; tcp:h:143 5/6",
        )


class NotifyConfigTests(ConfigTestCase):
    """
    C{notify:}.
    """

    def withNotify(self, **notify: object) -> dict[str, object]:
        document = self.document()
        document["notify"] = notify
        return document

    def test_read(self) -> None:
        """
        The URL, the token file's first line as a L{Secret}, and the
        stall time (3600 s by default, C{off} for none).
        """
        tokenFile = writeFile(os.path.join(self.directory, "hook.token"), TOKEN + "\n")
        loaded = parseConfig(
            self.withNotify(webhook_url=URL, token_file="hook.token", stalled_after=900),
            self.configPath,
        )
        self.assertEqual(loaded.notify, NotifyConfig(URL, Secret(TOKEN), 900.0))
        self.assertNotIn("SECRETPATH", repr(loaded.notify))
        self.assertNotIn(TOKEN, repr(loaded.notify))
        loaded = parseConfig(self.withNotify(webhook_url="http://127.0.0.1:9/h"), self.configPath)
        self.assertEqual(loaded.notify, NotifyConfig("http://127.0.0.1:9/h", None, 3600.0))
        loaded = parseConfig(self.withNotify(webhook_url=URL, stalled_after="off"), self.configPath)
        assert loaded.notify is not None
        self.assertIsNone(loaded.notify.stalledAfter)
        self.assertIsNone(parseConfig(self.document(), self.configPath).notify)
        os.chmod(tokenFile, 0o640)
        self.assertOnlyProblem(
            self.withNotify(webhook_url=URL, token_file="hook.token"), "notify.token_file", "chmod"
        )

    def test_invalid(self) -> None:
        """
        Each problem names its key.
        """
        cases: list[tuple[dict[str, object], str, str]] = [
            ({}, "notify.webhook_url", "missing"),
            ({"webhook_url": "http://hooks.example.org/x"}, "notify.webhook_url", "loopback"),
            (
                {"webhook_url": "https://u:p@hooks.example.org/x"},
                "notify.webhook_url",
                "token_file",
            ),
            ({"webhook_url": "ftp://hooks.example.org/x"}, "notify.webhook_url", "https://"),
            ({"webhook_url": "https://h.example/a b"}, "notify.webhook_url", "spaces"),
            ({"webhook_url": URL, "stalled_after": 10}, "notify.stalled_after", "at least 60"),
            ({"webhook_url": URL, "token_file": "nowhere"}, "notify.token_file", "does not exist"),
            ({"webhook_url": URL, "retries": 3}, "notify.retries", "unknown key"),
        ]
        for notify, key, fragment in cases:
            self.assertOnlyProblem(self.withNotify(**notify), key, fragment)
        document = self.document()
        document["notify"] = "https://hooks.example.org"
        self.assertOnlyProblem(document, "notify", "expected a mapping")

    def test_reload(self) -> None:
        """
        A changed C{notify:} applies on reload; one added or taken away
        needs a restart, and is kept as it was meanwhile.
        """
        old = parseConfig(self.withNotify(webhook_url=URL), self.configPath)
        changed = evolve(old, notify=NotifyConfig("https://other.example/h", None, 60.0))
        self.assertEqual(planReload(old, changed).needsRestart, ())
        self.assertEqual(keptForRestart(old, changed).notify, changed.notify)
        none = evolve(old, notify=None)
        self.assertEqual(planReload(old, none).needsRestart, ("notify",))
        self.assertEqual(keptForRestart(old, none).notify, old.notify)
        self.assertEqual(planReload(none, old).needsRestart, ("notify",))
        self.assertIsNone(keptForRestart(none, old).notify)

    def test_needsTLS(self) -> None:
        """
        An https webhook needs TLS (a daemon otherwise runs without
        OpenSSL, L{imapmig.access.cleartext}); http to loopback does not.
        """
        loaded = parseConfig(self.document(), self.configPath)
        bare = evolve(loaded, servers=(), jobs=(), status=None)
        self.assertFalse(cleartext.configNeedsTLS(bare))
        plain = NotifyConfig("http://127.0.0.1:9/h")
        self.assertFalse(cleartext.configNeedsTLS(evolve(bare, notify=plain)))
        self.assertTrue(cleartext.configNeedsTLS(evolve(bare, notify=NotifyConfig(URL))))
        self.assertIsNotNone(cleartext.tlsReason({"notify": {"webhook_url": URL}}))
