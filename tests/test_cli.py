"""
Tests for L{imapmig.cli}: the report of what the state database records.
"""

from __future__ import annotations

import io
import json
import os

from twisted.trial.unittest import SynchronousTestCase

from imapmig.cli import main, report
from imapmig.state import MessageOutcome
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore


class ReportTests(SynchronousTestCase):
    """
    imapmig report.
    """

    def setUp(self) -> None:
        self.store = MemoryStateStore()
        self.store.recordOutcomes(
            "alice",
            [
                MessageOutcome("", "m1", "INBOX", 10, 5, 1),
                MessageOutcome(".Sent", "m2", "Sent", 20, failure="refused by server: NO [LIMIT] too big"),
            ],
        )

    def test_text(self) -> None:
        """
        The text report gives the counts and each failure with its mailbox,
        key and reason.
        """
        out = io.StringIO()
        report(self.store, ["alice"], False, out)
        self.assertEqual(
            out.getvalue(),
            "alice: 1 appended, 1 failed\n"
            "  Sent\t.Sent/m2\trefused by server: NO [LIMIT] too big\n",
        )

    def test_json(self) -> None:
        """
        The JSON report carries the same facts.
        """
        out = io.StringIO()
        report(self.store, ["alice"], True, out)
        [entry] = json.loads(out.getvalue())
        self.assertEqual((entry["appended"], entry["failed"]), (1, 1))
        self.assertEqual(entry["failures"][0]["reason"], "refused by server: NO [LIMIT] too big")

    def test_mainFromConfig(self) -> None:
        """
        The command reads the state database the configuration names; an
        unknown job name is an error with status 2.
        """
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        state = os.path.join(base, "state.sqlite")
        store = SQLiteStateStore(state, seconds=lambda: 1.0)
        store.recordOutcomes("alice", [MessageOutcome("", "m1", "INBOX", 10, 5, 1)])
        store.close()
        config = os.path.join(base, "c.yaml")
        with open(config, "w") as f:
            f.write(
                f"state: {state}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{{name: alice, source: {{maildir: {maildir}}},"
                " destination: {server: s, user: a, password: p}}]\n"
            )
        out = io.StringIO()
        self.assertEqual(main(["report", "--config", config], out), 0)
        self.assertEqual(out.getvalue(), "alice: 1 appended, 0 failed\n")
        self.assertEqual(main(["report", "--config", config, "--job", "bob"], out), 2)
