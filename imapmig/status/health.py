# -*- test-case-name: tests.test_status_health,tests.test_status_api -*-
"""
C{/healthz}, for load balancers and systemd checks: 200 while the daemon
serves and its state store answers; 503 once it is stopping, or when the
store cannot answer a trivial query: C{store-error} for a SQLite file
(whose path the page does not show), C{degraded} naming the database
for PostgreSQL, whose daemon keeps running and writes again once the
database is back (docs/fleet-design.md, "The thread pool").

One ping of the store at a time, however many checkers ask: a request
that comes while one is in flight waits for its answer; each waits at
most L{PING_TIMEOUT} seconds (a database cut off by the network may take
its connection's timeouts to fail).
"""

from __future__ import annotations

from typing import Callable

from twisted.internet import defer
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import Request

import imapmig
from imapmig.state import IStateStore
from imapmig.status._http import ReadOnlyResource, jsonBody
from imapmig.status.progressview import ProgressView

log = Logger()

__all__ = ["PING_TIMEOUT", "HealthResource"]

PING_TIMEOUT = 3.0
"""
Seconds a check waits for the store's ping before it says the store does
not answer.
"""

_NO_ANSWER = "the state store does not answer; see the daemon's log"


class HealthResource(ReadOnlyResource):
    """
    C{/healthz}: C{{"status": "ok", "version": ..., "jobs": {state: n}}}
    with 200; C{{"status": "stopping"}} with 503 once the service stops;
    when the state store's L{ping<IStateStore.ping>} fails or does not
    answer in time, 503 with C{{"status": "degraded", "database": ...}}
    for a store given its C{database}, else C{{"status": "store-error"}}.
    """

    def __init__(
        self,
        view: ProgressView,
        store: IStateStore,
        stopping: Callable[[], bool],
        clock: IReactorTime | None = None,
        database: str | None = None,
        writesFailing: Callable[[], str | None] = lambda: None,
    ) -> None:
        """
        @param view: the progress, for the count of jobs per state.
        @param store: the state store to ping.
        @param stopping: whether the daemon is stopping.
        @param clock: times each check's wait (L{PING_TIMEOUT}); L{None}:
            a check waits for the ping however long it takes.
        @param database: the store's database as the page may name it
            (a PostgreSQL URI without its password or parameters), or
            L{None} (a SQLite file, whose path a page never shows).
        @param writesFailing: why the store's last writes failed, while
            they do (L{imapmig.state._pgbatch.PostgreSQLWriter.writesFailing}),
            else L{None}: the daemon is then C{degraded} though its
            ping, a read, answers (its disk full, a right revoked).
        """
        super().__init__()
        self._view = view
        self._store = store
        self._stopping = stopping
        self._clock = clock
        self._database = database
        self._writesFailing = writesFailing
        self._lastError: str | None = None
        self._waiting: list[Deferred[None]] = []
        self._pinging = False

    def renderBody(self, request: Request) -> Deferred[bytes]:
        """
        The health, as JSON, with its status code: once the store answered
        the ping (at once, for SQLite), or did not in time.
        """
        if self._stopping():
            request.setResponseCode(http.SERVICE_UNAVAILABLE)
            return succeed(jsonBody({"status": "stopping", "version": imapmig.__version__}))
        return self._pinged().addCallbacks(
            self._healthy, self._unhealthy, callbackArgs=(request,), errbackArgs=(request,)
        )

    def _pinged(self) -> Deferred[None]:
        """
        Fires once the store answered the ping in flight (one is started
        if none is), or fails if it failed or did not answer within
        L{PING_TIMEOUT}.
        """
        waiting: Deferred[None] = Deferred(self._waiting.remove)
        self._waiting.append(waiting)
        if not self._pinging:
            self._pinging = True
            try:
                pinged = self._store.ping()
            except Exception:
                pinged = fail()
            pinged.addBoth(self._answered)
        if not waiting.called and self._clock is not None:
            waiting.addTimeout(PING_TIMEOUT, self._clock)
        return waiting

    def _answered(self, result: object) -> None:
        """
        Give the ping's answer to every check waiting for it.
        """
        self._pinging = False
        waiting, self._waiting = self._waiting, []
        for each in waiting:
            if isinstance(result, Failure):
                each.errback(result)
            else:
                each.callback(None)

    def _healthy(self, _: object, request: Request) -> bytes:
        """
        The body of a healthy daemon: its jobs counted by state; of a
        degraded one while the store's writes fail (L{_writesFail}).
        """
        failing = self._writesFailing()
        if failing is not None and self._database is not None:
            return self._writesFail(failing, request)
        if self._lastError is not None and self._database is not None:
            log.info("Health check: the state database {database} answers again",
                     database=self._database)
        self._lastError = None
        # Every state, zeros included: a check of "failed" finds it.
        counts = dict.fromkeys(sorted(self._view.stateNames()), 0)
        for job in self._view.jobs():
            state = self._view.stateOf(job)
            counts[state] = counts.get(state, 0) + 1
        return jsonBody({"status": "ok", "version": imapmig.__version__, "jobs": counts})

    def _writesFail(self, why: str, request: Request) -> bytes:
        """
        The body of a daemon whose store answers reads but whose writes
        fail: C{degraded}, 503, with the database's own reason (logged
        once per reason; the writer's lines say it too).
        """
        if why != self._lastError:
            log.error("Health check: the state store's writes fail: {why}", why=why)
        self._lastError = why
        request.setResponseCode(http.SERVICE_UNAVAILABLE)
        return jsonBody(
            {
                "status": "degraded",
                "version": imapmig.__version__,
                "database": self._database,
                "error": f"the state database refuses the daemon's writes: {why}",
            }
        )

    def _unhealthy(self, failure: Failure, request: Request) -> bytes:
        """
        The body of a daemon whose store did not answer, logged once per
        cause (a checker polls every few seconds).
        """
        if failure.check(defer.TimeoutError):
            why = f"no answer within {PING_TIMEOUT:g} s"
        else:
            why = str(failure.value) or type(failure.value).__name__
        if why != self._lastError:
            log.error("Health check: the state store does not answer: {why}", why=why)
        self._lastError = why
        request.setResponseCode(http.SERVICE_UNAVAILABLE)
        if self._database is None:
            # The store's own words (they hold the file's path) go to the
            # log only: the check is unauthenticated.
            return jsonBody(
                {"status": "store-error", "version": imapmig.__version__, "error": _NO_ANSWER}
            )
        return jsonBody(
            {
                "status": "degraded",
                "version": imapmig.__version__,
                "database": self._database,
                "error": "the state database does not answer; the daemon retries; see its log",
            }
        )
