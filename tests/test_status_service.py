# -*- test-case-name: tests.test_status_service -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests that the daemon assembled by L{imapmig.daemon.service.buildService} serves
the status API with its state store, its stopping state, its verify report
and its jobs' folder rules.
"""

from __future__ import annotations

import json
import os
from typing import Any

from treq.testing import StubTreq
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Site

from imapmig.config import parseConfig
from imapmig.daemon.service import buildService
from imapmig.state.memory import MemoryStateStore
from imapmig.status.verifyreport import REPORT_NAME
from tests.test_service import makeMaildir


class ServiceStatusTests(SynchronousTestCase):
    """
    The status site of the assembled daemon.
    """

    def test_wired(self) -> None:
        """
        The daemon's status site answers C{/healthz} with C{ok} while it
        runs and C{stopping} once it stops, shows the verify report beside
        its state database, and serves its jobs' details from its store.
        """
        statePath = os.path.join(os.path.abspath(self.mktemp()), "state.sqlite")
        os.makedirs(os.path.dirname(statePath))
        with open(os.path.join(os.path.dirname(statePath), REPORT_NAME), "w") as f:
            json.dump([{"job": "a", "differences": 0}], f)
        config = parseConfig(
            {
                "state": statePath,
                "status": {"listen": "tcp:8125:interface=127.0.0.1"},
                "servers": {
                    "s": {"endpoint": "tcp:mail.example:1143", "starttls": "off", "allow_plaintext": True}
                },
                "jobs": [
                    {
                        "name": "a@b.example",
                        "source": {"maildir": makeMaildir(self)},
                        "destination": {"server": "s", "user": "u", "password": "p"},
                    }
                ],
            },
            "test.yaml",
        )
        reactor = MemoryReactorClock()
        service = buildService(config, reactor, store=MemoryStateStore())
        service.startService()
        [(_, site, _, _)] = reactor.tcpServers
        assert isinstance(site, Site)
        treq: Any = StubTreq(site.resource)

        def get(path: str) -> tuple[int, Any]:
            response = self.successResultOf(treq.get("http://127.0.0.1:8125" + path))
            return response.code, json.loads(self.successResultOf(treq.content(response)))

        code, health = get("/healthz")
        self.assertEqual((code, health["status"]), (200, "ok"))
        code, status = get("/status.json")
        self.assertEqual(
            (status["run"]["verify"]["ok"], status["run"]["verify"]["jobs"]), (True, 1)
        )
        code, job = get("/jobs/a%40b.example.json")
        self.assertEqual(
            (code, job["job"]["name"], job["failures"]["matched"]), (200, "a@b.example", 0)
        )
        stopped = service.stopService()
        code, health = get("/healthz")
        self.assertEqual((code, health["status"]), (503, "stopping"))
        # The job's connection attempt fails (nothing listens in a memory
        # reactor): the daemon stops whole, leaving no job to log later.
        for (_, _, factory, _, _), connector in zip(reactor.tcpClients, reactor.connectors):
            factory.clientConnectionFailed(connector, Failure(ConnectionRefusedError("test")))
        reactor.advance(600)
        self.successResultOf(stopped)
