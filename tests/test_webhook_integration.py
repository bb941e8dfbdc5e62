"""
Integration tests for the webhook (L{imapmig.daemon.webhook}): the real daemon
(C{imapmig-daemon --exit-when-done}) migrating into a private Dovecot,
one of its two jobs failing (a wrong password), posting to a real HTTP
receiver on loopback run by the test (the standard library's server, in
a thread); and to a receiver that is not there.

Everything waits on the daemon's exit, with a generous deadline, never
on a sleep.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.dovecot import DovecotUser, requireDovecot
from tests.support import (
    SOURCE_TREE,
    daemonCommand,
    freshUser,
    sharedDovecot,
    sourceTreeEnvironment,
    writeEmlJobConfig,
    writePasswordFile,
)

DEADLINE = 120.0
"""
Seconds the daemon may take to run both jobs and exit.
"""

TOKEN = "integration-webhook-token-4711abcdef"
WRONG = "not-the-password-0815"


class Receiver:
    """
    An HTTP server on loopback recording every request (its path,
    headers and JSON body) and answering C{status}.
    """

    def __init__(self, testCase: SynchronousTestCase, status: int = 204) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                requests.append((self.path, dict(self.headers.items()), json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/imapmig"
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()

        def stop() -> None:
            self.server.shutdown()
            self.server.server_close()
            thread.join()

        testCase.addCleanup(stop)

    def events(self) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for _, _, body in self.requests:
            found.setdefault(body["event"], []).append(body)
        return found


class WebhookDaemonTests(SynchronousTestCase):
    """
    The daemon with C{notify:}, one job done and one failed.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        self.instance = sharedDovecot()

    def config(self, url: str) -> tuple[str, str]:
        """
        Two jobs into two accounts: C{good}, and C{bad} whose password is
        wrong; C{notify:} posting to C{url} with a token file.

        @return: the configuration's path and its directory.
        """
        good, bad = freshUser(self.instance), freshUser(self.instance)
        path = writeEmlJobConfig(self, self.instance, good, 3)
        directory = os.path.dirname(path)
        with open(path) as f:
            document = yaml.safe_load(f)
        [job] = document["jobs"]
        job["name"] = "good"
        wrong = writePasswordFile(os.path.join(directory, "wrong"), WRONG)
        document["jobs"].append(
            {
                "name": "bad",
                "source": job["source"],
                "destination": {**job["destination"], "user": bad.name, "password_file": wrong},
            }
        )
        document["notify"] = {
            "webhook_url": url,
            "token_file": writePasswordFile(os.path.join(directory, "hook.token"), TOKEN),
            "stalled_after": 600,
        }
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        self.good = good
        return path, directory

    def runDaemon(self, path: str) -> subprocess.CompletedProcess[str]:
        env = sourceTreeEnvironment()
        env.pop("JOURNAL_STREAM", None)
        env["IMAPMIG_LOG_FORMAT"] = "text"
        return subprocess.run(
            daemonCommand(path, "--exit-when-done"),
            cwd=SOURCE_TREE,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )

    def test_failedJobAndRunEnd(self) -> None:
        """
        The receiver is told, with the token as a bearer token, that job
        C{bad} failed (naming its server as C{/metrics} does) and that the
        run finished (one job done, one failed); no password, token or
        path is in any notification.
        """
        receiver = Receiver(self)
        path, directory = self.config(receiver.url)
        result = self.runDaemon(path)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        events = receiver.events()
        self.assertEqual(sorted(events), ["job_failed", "run_finished"], receiver.requests)
        [failed] = events["job_failed"]
        self.assertEqual((failed["job"], failed["server"]), ("bad", "dovecot"))
        self.assertIn("login", failed["reason"])
        [finished] = events["run_finished"]
        self.assertEqual(finished["jobs"], {"done": 1, "failed": 1})
        self.assertEqual(finished["messages_done"], 3)
        for requestPath, headers, body in receiver.requests:
            self.assertEqual(requestPath, "/hooks/imapmig")
            self.assertEqual(headers["Authorization"], f"Bearer {TOKEN}")
            self.assertEqual(headers["Content-Type"], "application/json")
            text = json.dumps(body)
            for secret in (TOKEN, WRONG, self.good.password, directory, SOURCE_TREE):
                self.assertNotIn(secret, text)
        self.assertNotIn(TOKEN, result.stdout + result.stderr)
        self.assertNotIn("Traceback", result.stdout + result.stderr)

    def test_receiverDown(self) -> None:
        """
        With nothing listening at the webhook's address, the run is not
        held up: the daemon exits as it would, within the stop's bound,
        saying what it could not send.
        """
        receiver = Receiver(self)
        url = receiver.url
        receiver.server.shutdown()
        receiver.server.server_close()
        path, _ = self.config(url)
        result = self.runDaemon(path)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 1, output)
        self.assertIn("Job good done after", output)
        self.assertIn("notifications not sent (the daemon stops)", output)
        self.assertNotIn("/hooks/imapmig", output)
        self.assertNotIn("Traceback", output)
