"""
Tests for L{bench.tlsbio}: a TLS writer's CPU seconds through a memory BIO
and on the socket.
"""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from bench.tlsbio import summary

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SummaryTests(SynchronousTestCase):
    """
    L{summary}.
    """

    def test_medians(self) -> None:
        """
        Each way's line gives the median user, system and total seconds of
        its runs; a way without runs has no line.
        """
        runs = [
            {"way": "memory", "user": 0.4, "system": 0.2},
            {"way": "memory", "user": 0.5, "system": 0.1},
            {"way": "memory", "user": 0.3, "system": 0.3},
        ]
        self.assertEqual(
            summary(runs),
            ["memory: user 0.400 s, system 0.200 s, total 0.600 s (median of 3)"],
        )


class RunTests(SynchronousTestCase):
    """
    The command against its own sink, in real processes.
    """

    def test_bothWays(self) -> None:
        """
        A small run writes through both ways to the sink and prints a
        median line for each, and leaves no certificate behind.
        """
        temporary = os.path.abspath(self.mktemp())
        os.makedirs(temporary)
        done = subprocess.run(
            [sys.executable, "-m", "bench.tlsbio", "20", "1"],
            cwd=_ROOT,
            env=dict(os.environ, PYTHONPATH=_ROOT, TMPDIR=temporary),
            capture_output=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.decode().splitlines()
        self.assertEqual([line.split(":")[0] for line in lines[-2:]], ["memory", "socket"])
        self.assertIn("(median of 1)", lines[-1])
        self.assertEqual(os.listdir(temporary), [], "the certificates are left behind")
