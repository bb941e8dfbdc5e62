"""
The demo's check is C{imapmig verify}, whose result its status page
shows.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.dovecot import requireDovecot
from tests.test_demo_signals import DemoRun


class DemoVerifyTests(SynchronousTestCase):
    """
    C{python -m imapmig.demo --keep} verifies the migration with
    C{imapmig verify}, and the page it keeps serving shows that result.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def test_pageShowsVerify(self) -> None:
        """
        Once the demo serves its page after the check, C{/status.json}'s
        C{run.verify} is the report of the verify it ran: OK, one job, no
        difference (the page said "Verify: not run").
        """
        run = DemoRun(self, "--messages", "30", "--keep")
        run.started()
        run.output.until("== The daemon keeps serving")
        # The URL is the line after, the demo's last until Ctrl-C.
        serving = run.output.until("   http://")
        console = "\n".join(run.output.lines)
        self.assertIn("== imapmig verify --config", console)
        url = re.findall(r"(http://127\.0\.0\.1:\d+/)", serving)[0]
        with urllib.request.urlopen(url + "status.json", timeout=30) as response:
            verify = json.load(response)["run"]["verify"]
        self.assertIsNotNone(verify, console)
        self.assertEqual(
            (verify["ok"], verify["jobs"], verify["differences"]), (True, 1, 0), console
        )
        run.process.send_signal(signal.SIGTERM)
        status, remaining, console = run.ended()
        self.assertEqual((status, remaining), (0, []), console)
