"""
imapmig's version where the admin looks for it: the daemon's start line
under twistd (L{imapmig.daemon.tap.logStart}).  (The version in C{/status.json},
C{/healthz} and C{/metrics}' build info is checked by
L{tests.test_status_api} and L{tests.test_metrics}, the dashboard's header
and footer by L{tests.test_dashboard}'s Chromium tests; the
start lines of real runs, under twistd by L{tests.test_demo_signals} and
under C{imapmig-daemon} by L{tests.test_testing_dovecot}.)
"""

from __future__ import annotations

import os

from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

import imapmig
from imapmig.config import loadConfig
from imapmig.daemon.tap import logStart


class StartLineTests(SynchronousTestCase):
    """
    L{logStart}: the line naming imapmig's version and the configuration.
    """

    def writeConfig(self, jobs: int) -> str:
        """
        A configuration of C{jobs} Maildir jobs and one server.
        """
        base = os.path.abspath(self.mktemp())
        lines = [f"state: {base}/state.sqlite", "servers: {s: {endpoint: 'tcp:127.0.0.1:143'}}"]
        lines.append("jobs:")
        password = os.path.join(base, "pw")
        os.makedirs(base)
        with open(os.open(password, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("p\n")
        for n in range(jobs):
            maildir = os.path.join(base, f"Maildir{n}")
            for sub in ("cur", "new", "tmp"):
                os.makedirs(os.path.join(maildir, sub))
            lines.append(
                f"  - {{name: j{n}, source: {{maildir: {maildir}}},"
                f" destination: {{server: s, user: u{n}, password_file: {password}}}}}"
            )
        path = os.path.join(base, "c.yaml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def test_line(self) -> None:
        """
        The line names the version, the configuration file, and its jobs
        and servers, in agreement with their counts; the fields stay
        structured.
        """
        for jobs, expected in [(1, "1 job, 1 server"), (2, "2 jobs, 1 server")]:
            path = self.writeConfig(jobs)
            with capturedLogs() as events:
                logStart(path, loadConfig(path))
            [event] = events
            self.assertEqual(
                formatEvent(event),
                f"imapmig {imapmig.__version__}: configuration {path}, {expected}",
            )
            self.assertEqual(
                (event["version"], event["jobs"], event["servers"]),
                (imapmig.__version__, jobs, 1),
            )
