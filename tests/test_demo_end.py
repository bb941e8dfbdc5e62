"""
Tests for how L{imapmig.commands.demo} ends: a short summary and the dashboard's
URL last; from a terminal it keeps serving the dashboard until Ctrl-C,
otherwise it exits.
"""

from __future__ import annotations

import os
import pty
import signal
import urllib.request

from twisted.trial.unittest import SynchronousTestCase

from imapmig.commands.demo import summary
from imapmig.testing.dovecot import requireDovecot
from tests.test_demo_signals import DemoRun


class DemoEndTests(SynchronousTestCase):
    """
    The demo's last lines, run as a child process on a private Dovecot.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def test_notATerminal(self) -> None:
        """
        With its standard input not a terminal (tests, CI) the demo ends
        with the check, a two-line summary, and the dashboard's URL on the
        last line, saying the daemon stops; no JSON; exit status 0.
        """
        run = DemoRun(self, "--messages", "30")
        status, console = run.finished()
        self.assertEqual(status, 0, console)
        lines = console.splitlines()
        url = lines[-1].rsplit(" ", 1)[-1]
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/$", console)
        self.assertIn("== Not a terminal: the daemon stops now", lines[-1])
        self.assertEqual(lines[-4], "== Demo passed: every message is in Dovecot.", console)
        self.assertRegex(lines[-3], r"^   30 messages copied into 5 folders, 0 failed, ", console)
        self.assertNotIn('"jobs"', console)
        self.assertLess(len(lines), 30, console)
        with open(os.path.join(run.directory, "d", "status.json")) as f:
            self.assertIn('"jobs"', f.read())

    def test_terminalKeepsServing(self) -> None:
        """
        From a terminal the demo keeps the daemon serving after its check,
        says that Ctrl-C stops it, and prints the URL last; the dashboard
        answers there; Ctrl-C (C{SIGINT}) then ends it with the check's
        result, leaving nothing running.
        """
        terminal, other = pty.openpty()
        self.addCleanup(os.close, terminal)
        try:
            run = DemoRun(self, "--messages", "30", stdin=other)
        finally:
            os.close(other)
        run.started()
        run.output.until("== The daemon keeps serving the dashboard; Ctrl-C (or SIGTERM) stops it:")
        url = run.output.until("   http://").strip()
        with urllib.request.urlopen(url, timeout=30) as response:
            self.assertEqual(response.status, 200)
        run.process.send_signal(signal.SIGINT)
        status, remaining, console = run.ended()
        self.assertEqual(remaining, [], console)
        self.assertEqual(status, 0, console)

    def test_exitFromATerminal(self) -> None:
        """
        C{--exit} makes a demo run from a terminal exit after its check.
        """
        terminal, other = pty.openpty()
        self.addCleanup(os.close, terminal)
        try:
            run = DemoRun(self, "--messages", "10", "--exit", stdin=other)
        finally:
            os.close(other)
        status, console = run.finished()
        self.assertEqual(status, 0, console)
        self.assertIn("its dashboard was http://", console.splitlines()[-1])


class SummaryTests(SynchronousTestCase):
    """
    L{summary}: the demo's result in two lines.
    """

    def test_lines(self) -> None:
        """
        What was copied, failed, how much and how fast (the job's average
        rate), and where the files are.
        """
        job: dict[str, object] = {
            "messages_done": 5000,
            "messages_failed": 0,
            "bytes_done": 25_000_000,
            "average_messages_per_second": 2175.4,
        }
        self.assertEqual(
            summary(job, 5, 4.25, "/root/imapmig/demo"),
            [
                "   5000 messages copied into 5 folders, 0 failed, 23.8 MiB in 4.2 s"
                " (2,175 messages/s)",
                "   in /root/imapmig/demo: the daemon's log imapmig.log, the last"
                " status.json, the configuration imapmig.yaml",
            ],
        )
