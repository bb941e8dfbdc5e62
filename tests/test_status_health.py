# -*- test-case-name: tests.test_status_health -*-
"""
Tests for L{imapmig.status.health}: C{/healthz} of a daemon whose state
store stops answering and answers again, driven by a L{Clock} and a store
whose pings the test answers.  (tests.test_status_api checks the page
over HTTP; tests.test_daemon_postgresql stops a real database under a
running daemon.)
"""

from __future__ import annotations

import json
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import NOT_DONE_YET, Request
from twisted.web.test.requesthelper import DummyRequest

from imapmig.errors import TransientError
from imapmig.progress import MigrationProgress
from imapmig.state.memory import MemoryStateStore
from imapmig.status.health import PING_TIMEOUT, HealthResource
from imapmig.status.progressview import ProgressView

DATABASE = "postgresql://imapmig@db1.example.org:5432/migration"


class PingedStore(MemoryStateStore):
    """
    A store whose pings wait for the test: each returns a new Deferred,
    kept in L{pings}.
    """

    def __init__(self) -> None:
        super().__init__()
        self.pings: list[Deferred[None]] = []

    def ping(self) -> Deferred[None]:
        pinged: Deferred[None] = Deferred()
        self.pings.append(pinged)
        return pinged


class DegradedTests(SynchronousTestCase):
    """
    C{degraded} while a PostgreSQL store does not answer, C{ok} again once
    it does.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = PingedStore()
        progress = MigrationProgress(self.clock.seconds)
        progress.addJob("a")
        self.health = HealthResource(
            ProgressView(progress, self.clock.seconds),
            self.store,
            lambda: False,
            self.clock,
            DATABASE,
        )

    def check(self) -> DummyRequest:
        """
        Ask C{/healthz}; the request, answered or not yet.
        """
        request = DummyRequest([b""])
        # DummyRequest stands in for a twisted.web Request.
        self.assertEqual(self.health.render(cast(Request, request)), NOT_DONE_YET)
        return request

    def answer(self, request: DummyRequest) -> tuple[int, dict[str, Any]]:
        """
        The status code and JSON body of the answered C{request}.
        """
        self.assertEqual(request.finished, 1)
        return request.responseCode or 200, json.loads(b"".join(request.written))

    def test_degradedThenOk(self) -> None:
        """
        A failed ping: 503, C{degraded}, the database named, the cause
        logged once however often it is asked; a ping answered: 200 again,
        and the recovery logged.
        """
        with capturedLogs() as events:
            for _ in range(3):
                request = self.check()
                self.store.pings[-1].errback(
                    TransientError(f"{DATABASE}: cannot read the state database: connection refused")
                )
                code, body = self.answer(request)
                self.assertEqual(
                    (code, body["status"], body["database"]), (503, "degraded", DATABASE)
                )
            request = self.check()
            self.store.pings[-1].callback(None)
            code, body = self.answer(request)
        self.assertEqual((code, body["status"], body["jobs"]["queued"]), (200, "ok", 1))
        [error] = [e for e in events if e["log_level"] == LogLevel.error]
        self.assertIn("connection refused", error["why"])
        [back] = [e for e in events if e["log_level"] == LogLevel.info]
        self.assertEqual(back["database"], DATABASE)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_noAnswerInTime(self) -> None:
        """
        A ping that does not answer within L{PING_TIMEOUT}: C{degraded}
        then; checks meanwhile wait for the same ping, and the next ping
        starts only once it has answered.
        """
        first = self.check()
        self.clock.advance(1)
        second = self.check()
        self.assertEqual(len(self.store.pings), 1)
        self.clock.advance(PING_TIMEOUT - 1)
        code, body = self.answer(first)
        self.assertEqual((code, body["status"]), (503, "degraded"))
        self.assertFalse(second.finished)
        self.clock.advance(1)
        self.assertEqual(self.answer(second)[0], 503)
        late = self.check()
        self.assertEqual(len(self.store.pings), 1)
        self.store.pings[0].callback(None)
        self.assertEqual(self.answer(late)[0], 200)
        following = self.check()
        self.assertEqual(len(self.store.pings), 2)
        self.store.pings[1].callback(None)
        self.assertEqual(self.answer(following)[0], 200)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_sqliteNamesNothing(self) -> None:
        """
        A store without a database to name (a SQLite file): C{store-error},
        as before.
        """
        health = HealthResource(
            ProgressView(MigrationProgress(self.clock.seconds), self.clock.seconds),
            self.store,
            lambda: False,
            self.clock,
        )
        request = DummyRequest([b""])
        health.render(cast(Request, request))
        self.store.pings[-1].errback(TransientError("/var/lib/imapmig/state.sqlite: disk I/O error"))
        code, body = self.answer(request)
        self.assertEqual((code, body["status"]), (503, "store-error"))
        self.assertNotIn("database", body)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class WritesFailTests(SynchronousTestCase):
    """
    C{degraded} while a PostgreSQL store's writes fail though its ping, a
    read, answers (its disk full, a right revoked).
    """

    def test_degradedWhileWritesFail(self) -> None:
        """
        While the store says its writes fail, C{/healthz} is 503
        C{degraded} naming the database and the database's own reason;
        C{ok} again once they commit.
        """
        clock = Clock()
        store = PingedStore()
        failing: list[str | None] = ["db1: cannot record: No space left on device"]
        health = HealthResource(
            ProgressView(MigrationProgress(clock.seconds), clock.seconds),
            store,
            lambda: False,
            clock,
            DATABASE,
            lambda: failing[0],
        )
        answers = []
        for _ in range(2):
            request = DummyRequest([b""])
            self.assertEqual(health.render(cast(Request, request)), NOT_DONE_YET)
            store.pings[-1].callback(None)
            answers.append((request.responseCode or 200, json.loads(b"".join(request.written))))
            failing[0] = None
        code, body = answers[0]
        self.assertEqual((code, body["status"], body["database"]), (503, "degraded", DATABASE))
        self.assertIn("No space left on device", body["error"])
        self.assertEqual((answers[1][0], answers[1][1]["status"]), (200, "ok"))
