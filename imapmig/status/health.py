# -*- test-case-name: tests.test_status_api -*-
"""
C{/healthz}, for load balancers and systemd checks: 200 while the daemon
serves and its state store answers; 503 once it is stopping, or when the
store cannot answer a trivial query.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import Request

import imapmig
from imapmig.state import IStateStore
from imapmig.status._http import ReadOnlyResource, jsonBody
from imapmig.status.progressview import ProgressView

log = Logger()

__all__ = ["HealthResource"]


class HealthResource(ReadOnlyResource):
    """
    C{/healthz}: C{{"status": "ok", "version": ..., "jobs": {state: n}}}
    with 200; C{{"status": "stopping"}} with 503 once the service stops;
    C{{"status": "store-error", "error": ...}} with 503 when the state
    store's L{ping<IStateStore.ping>} fails.
    """

    def __init__(
        self, view: ProgressView, store: IStateStore, stopping: Callable[[], bool]
    ) -> None:
        """
        @param view: the progress, for the count of jobs per state.
        @param store: the state store to ping.
        @param stopping: whether the daemon is stopping.
        """
        super().__init__()
        self._view = view
        self._store = store
        self._stopping = stopping
        self._lastError: str | None = None

    def renderBody(self, request: Request) -> Deferred[bytes]:
        """
        The health, as JSON, with its status code: once the store answered
        the ping (at once, for SQLite).
        """
        if self._stopping():
            request.setResponseCode(http.SERVICE_UNAVAILABLE)
            return succeed(jsonBody({"status": "stopping", "version": imapmig.__version__}))

        def healthy(_: object) -> bytes:
            self._lastError = None
            # Every state, zeros included: a check of "failed" finds it.
            counts = dict.fromkeys(sorted(self._view.stateNames()), 0)
            for job in self._view.jobs():
                state = self._view.stateOf(job)
                counts[state] = counts.get(state, 0) + 1
            return jsonBody({"status": "ok", "version": imapmig.__version__, "jobs": counts})

        def storeError(failure: Failure) -> bytes:
            why = str(failure.value)
            if why != self._lastError:
                # Once per cause: a checker polls every few seconds.
                log.error("Health check: the state store does not answer: {why}", why=why)
            self._lastError = why
            request.setResponseCode(http.SERVICE_UNAVAILABLE)
            # The store's own words (they hold the database's path) go to
            # the log only: the check is unauthenticated.
            return jsonBody(
                {
                    "status": "store-error",
                    "version": imapmig.__version__,
                    "error": "the state store does not answer; see the daemon's log",
                }
            )

        try:
            pinged = self._store.ping()
        except Exception:
            pinged = fail()
        return pinged.addCallbacks(healthy, storeError)
