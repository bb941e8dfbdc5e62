"""
Tests for the dashboard's text of a job that backs off: the script's
C{retryingText}, run in Node.js on the JSON a job's progress serves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import ConnectionLost
from imapmig.job import JobMachine, RetryPolicy
from imapmig.job.attempt import RunStop
from imapmig.job.backoff import RunRetries
from imapmig.job.sides import JobSides
from imapmig.log.logfields import AccountName
from imapmig.progress import JobProgress
from imapmig.state.memory import MemoryStateStore
from imapmig.status.dashboard import loadStaticFiles
from tests.test_job import MemorySource


def _functions(script: str, names: list[str]) -> str:
    """
    The source of the named one-level functions of C{script} (each ends
    at the first line that is its indentation and a closing brace).
    """
    found = []
    for name in names:
        match = re.search(
            rf"^( *)function {name}\(.*?(?:\{{[^\n]*\}}$|^\1\}}$)", script, re.M | re.S
        )
        assert match is not None, name
        found.append(match.group(0))
    return "\n".join(found)


class RetryingTextTests(SynchronousTestCase):
    """
    The job row's state text while it backs off.
    """

    def test_rowSaysAttemptAndNextTime(self) -> None:
        """
        A job whose third attempt in a row failed shows C{retrying: REASON
        (attempt 3 of 10, next at HH:MM)}, from C{/status.json}'s
        C{waiting_for}, C{retry_attempt}, C{retry_attempts} and
        C{retry_at}.
        """
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            if os.environ.get("CI") == "true":
                self.fail("Node.js is needed to run the dashboard's script")
            raise self.skipTest("no Node.js")
        clock = Clock()
        clock.advance(18 * 3600 + 1 * 60)
        progress = JobProgress("j", clock.seconds)
        lifecycle = JobMachine(progress.name, progress, clock)
        retries = RunRetries(
            "j", AccountName("local", "alice", "tcp:localhost:143"),
            MemoryStateStore(clock.seconds), progress, clock,
            lifecycle, JobSides(MemorySource(), None, None),
            RetryPolicy(initialDelay=15.0, attempts=10), lambda: 0.0, False, RunStop(),
        )  # fmt: skip
        retries.startRun()
        lifecycle.start()
        for _ in range(3):
            waiting = Deferred.fromCoroutine(
                retries.afterFailure(ConnectionLost("connection refused"), False)
            )
            if progress.retryAttempt != 3:
                clock.advance(progress.retryAt - clock.seconds() if progress.retryAt else 0)
                self.successResultOf(waiting)
        job = json.loads(json.dumps(progress.snapshot()))
        script = loadStaticFiles()["dashboard.js"].body.decode("utf-8")
        program = (
            _functions(script, ["pad", "clock", "retryingText"])
            + f"\nprocess.stdout.write(retryingText({json.dumps(job)}));\n"
        )
        done = subprocess.run(
            [node, "-e", program],
            capture_output=True,
            timeout=60,
            env={**os.environ, "TZ": "UTC"},
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        # From 18:01:00, waits of 15 s and 30 s, then the third of 60 s
        # from 18:01:45: next at 18:02:45.
        self.assertEqual(
            done.stdout.decode(), "retrying: connection refused (attempt 3 of 10, next at 18:02)"
        )
        lifecycle.stop()
        # The stopped wait ends its run a turn later (RunRetries: once the
        # transition that cancelled it has returned); no timer stays.
        clock.advance(0)
        self.assertEqual(clock.getDelayedCalls(), [])
