"""
The status site of the real daemon (C{python -m imapmig.daemon}, its
status listener on a loopback port), tried as an attacker would: 80
sockets held open without a request (64 silent, 16 dripping a byte every
2 s, each reopened as soon as it is closed) while a monitor probes
C{/healthz}; and control requests with the token in the wrong places and
an error that carries a path, after which no log line and no
unauthenticated page holds any part of the token or the paths.

These tests need no IMAP server: the job's destination is a closed port,
so the daemon backs off and keeps serving.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.corpus import writeEmlDirectory
from imapmig.status.verifyreport import REPORT_NAME
from tests.statushold import probe
from tests.support import SOURCE_TREE, daemonCommand, sourceTreeEnvironment

TOKEN = "Zq3vK9pW2mXr7tYb4nLc8hJd6fGs1aEu0oIiUyTtRrEeWwQqPpLlKkJjHhGgFfDd"

STARTED = b"Status site (HTTP) starting on "


class StatusDaemon:
    """
    The daemon, started for one test with one job copying an EML directory
    to a closed port, its status site on a free loopback port, its control
    token in a file, its output in C{log}.
    """

    def __init__(self, testCase: SynchronousTestCase) -> None:
        self.directory = os.path.abspath(testCase.mktemp())
        os.makedirs(self.directory)
        self.eml = os.path.join(self.directory, "eml")
        writeEmlDirectory(self.eml, 3)
        self.state = os.path.join(self.directory, "state.sqlite")
        self.tokenFile = os.path.join(self.directory, "status.token")
        with open(os.open(self.tokenFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(TOKEN + "\n")
        self.configPath = os.path.join(self.directory, "imapmig.yaml")
        document = {
            "state": self.state,
            "status": {"listen": "tcp:0:interface=127.0.0.1", "token_file": self.tokenFile},
            "servers": {"closed": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"eml_dir": self.eml},
                    "destination": {"server": "closed", "user": "u", "password": "p"},
                }
            ],
        }
        with open(os.open(self.configPath, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            yaml.safe_dump(document, f)
        self.logPath = os.path.join(self.directory, "daemon.log")
        self._output = open(self.logPath, "wb")
        testCase.addCleanup(self._output.close)
        self.process = subprocess.Popen(
            daemonCommand(self.configPath),
            stdin=subprocess.DEVNULL,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
        )
        testCase.addCleanup(self.kill)
        self.port = self._port(testCase)

    def log(self) -> bytes:
        """
        Everything the daemon has written so far.
        """
        with open(self.logPath, "rb") as f:
            return f.read()

    def _port(self, testCase: SynchronousTestCase, timeout: float = 120.0) -> int:
        """
        The status site's port, once its start is logged.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            output = self.log()
            if STARTED in output:
                return int(output.split(STARTED, 1)[1].split()[0])
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.kill()
        testCase.fail(f"the status site did not start; the daemon wrote:\n{self.log()[-3000:]!r}")

    def stop(self, timeout: float = 60.0) -> int:
        """
        Stop it with C{SIGTERM}, as systemd does; its exit status.
        """
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        """
        Kill it, unless it has exited.
        """
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class HoldTests(SynchronousTestCase):
    """
    Idle and dripping sockets do not blind the status site.
    """

    def test_probesAnsweredUnderHold(self) -> None:
        """
        With 64 silent and 16 dripping sockets held (reopened when closed)
        for the whole run, at least 99 of 100 C{/healthz} probes are
        answered 200 within 1 s (each probe may take 30 s before it counts
        as unanswered, so a loaded machine shows as latency, not as a hang);
        the site logs that it closed connections to make room.
        """
        daemon = StatusDaemon(self)
        first, _ = probe(daemon.port)
        self.assertIn(b" 200 ", first)
        holders = subprocess.Popen(
            [sys.executable, "-m", "tests.statushold", str(daemon.port), "64", "16", "600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=SOURCE_TREE,
            env=sourceTreeEnvironment(),
        )
        self.addCleanup(holders.wait)
        self.addCleanup(holders.kill)
        # Let every holder connect, and the silent ones outlast the
        # site's grace.
        time.sleep(3)
        results = []
        for _ in range(100):
            results.append(probe(daemon.port))
            time.sleep(0.1)
        self.assertIsNone(holders.poll(), "the holders stopped")
        answered = [seconds for line, seconds in results if b" 200 " in line]
        prompt = [seconds for seconds in answered if seconds <= 1.0]
        summary = (
            f"{len(answered)} of {len(results)} probes answered, {len(prompt)} within 1 s;"
            f" slowest {max(answered, default=0):.3f} s;"
            f" failed: {[line for line, _ in results if b' 200 ' not in line][:5]}"
        )
        self.assertGreaterEqual(len(prompt), 99, summary)
        self.assertIn(b"closed", daemon.log().split(b"connections open, the most allowed: ", 1)[-1])


def tokenParts(text: bytes, width: int = 8) -> list[str]:
    """
    Each run of C{width} characters of L{TOKEN} found in C{text}.
    """
    return [
        TOKEN[n : n + width]
        for n in range(len(TOKEN) - width + 1)
        if TOKEN[n : n + width].encode("ascii") in text
    ]


class ExposureTests(SynchronousTestCase):
    """
    Neither the token nor a path reaches the log or a page it should not.
    """

    def request(
        self,
        port: int,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, bytes]:
        """
        One request on a new connection; its status and body.
        """
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request(method, path, body=body, headers={"Host": "localhost", **(headers or {})})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def untilFailed(self, port: int, timeout: float = 120.0) -> dict[str, Any]:
        """
        C{/status.json}'s job once it has failed.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, body = self.request(port, "GET", "/status.json")
            [job] = json.loads(body)["jobs"]
            if job["state"] == "failed":
                return dict(job)
            time.sleep(0.2)
        self.fail(f"the job did not fail: {job}")

    def test_noTokenNoPath(self) -> None:
        """
        Control requests with the token in the query string (alone, beside
        a valid bearer token, percent-encoded), as a path segment, in other
        headers and in the body are answered without logging any 8
        characters of it; the job fails because its source directory is
        gone, and the unauthenticated pages (dashboard, C{/status.json},
        the job's JSON, failures and manifests, C{/metrics}, C{/healthz})
        show neither the token nor the daemon's directory, while the log
        names the directory.
        """
        daemon = StatusDaemon(self)
        with open(os.path.join(daemon.directory, REPORT_NAME), "w") as f:
            json.dump([{"job": "a", "differences": 0}], f)
        shutil.rmtree(daemon.eml)
        job = self.untilFailed(daemon.port)
        self.assertIn("[path]", job["error"])
        jsonType = {"Content-Type": "application/json"}
        encoded = "".join(f"%{ord(c):02X}" for c in TOKEN)
        for method, path, headers, body in (
            ("POST", f"/control/pause-all?token={TOKEN}", jsonType, b"{}"),
            ("POST", f"/control/pause-all?token={encoded}", jsonType, b"{}"),
            ("POST", f"/control/jobs/a/pause?x=1&token={TOKEN}", jsonType, b"{}"),
            ("POST", f"/control/jobs/{TOKEN}/pause", jsonType, b"{}"),
            ("POST", f"/control/{TOKEN}", jsonType, b"{}"),
            ("POST", "/control/pause-all", {**jsonType, "Authorization": f"Basic {TOKEN}"}, b"{}"),
            ("POST", "/control/pause-all", {**jsonType, "Authorization": TOKEN}, b"{}"),
            ("POST", "/control/pause-all", {**jsonType, "X-Token": TOKEN, "Cookie": f"t={TOKEN}"}, b"{}"),
            ("POST", "/control/pause-all", jsonType, json.dumps({"token": TOKEN}).encode()),
            ("POST", f"/control/pause-all?token={TOKEN}", {"Content-Type": "text/plain"}, b"{}"),
            ("GET", f"/control/pause-all?token={TOKEN}", {}, None),
            ("GET", f"/status.json?token={TOKEN}", {}, None),
            ("GET", f"/jobs/{TOKEN}.json", {}, None),
            ("POST", f"/control/resume-all?token={TOKEN}",
             {**jsonType, "Authorization": f"Bearer {TOKEN}"}, b"{}"),
        ):  # fmt: skip
            code, _ = self.request(daemon.port, method, path, headers, body)
            self.assertNotEqual(code, 500, path)
        pages = []
        for path in (
            "/",
            "/status.json",
            "/jobs/a.json",
            "/jobs/a/failures.json",
            "/jobs/a/manifest.csv",
            "/jobs/a/manifest.json",
            "/metrics",
            "/healthz",
        ):
            code, page = self.request(daemon.port, "GET", path)
            self.assertIn(code, (200, 503), path)
            pages.append((path, page))
        self.assertEqual(daemon.stop(), 0)
        log = daemon.log()
        self.assertIn(b"Control request /control/pause-all from 127.0.0.1 refused", log)
        self.assertEqual(tokenParts(log), [], log.decode("utf-8", "replace")[-3000:])
        self.assertIn(daemon.eml.encode("utf-8"), log)
        for path, page in pages:
            self.assertEqual(tokenParts(page), [], path)
            self.assertNotIn(daemon.directory.encode("utf-8"), page, path)
