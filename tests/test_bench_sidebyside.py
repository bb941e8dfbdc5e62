"""
Tests for L{bench.sidebyside}: the raw writer's command lines, and the CPU
a server's processes spent, read from C{/proc}.
"""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from bench.contenders import Invocation
from bench.servers import VARIANTS
from bench.sidebyside import _rawArgv, dovecotSeconds


def invocation() -> Invocation:
    """
    A run against a server on 127.0.0.1:143 (nothing is started).
    """
    return Invocation("127.0.0.1", 143, "b00001", "/m", "/run", VARIANTS["default"], "/raw")


class RawArgvTests(SynchronousTestCase):
    """
    C{raw} and C{raw:N[:ARGS]}.
    """

    def test_raw(self) -> None:
        """
        C{raw} is 2 connections into INBOX, as before C{raw:N} existed.
        """
        argv = _rawArgv("raw", invocation())
        self.assertEqual(argv[argv.index("--connections") + 1], "2")
        self.assertNotIn("--mailbox-per-connection", argv)
        self.assertEqual(argv[argv.index("--batch") + 1], "50")

    def test_mailboxEach(self) -> None:
        """
        C{raw:N} with N above 1 gives each connection a mailbox of its own;
        C{raw:1} is one connection; arguments after the second colon are
        appended, split at commas; C{unselected} drops C{--select}.
        """
        two = _rawArgv("raw:2", invocation())
        self.assertIn("--mailbox-per-connection", two)
        one = _rawArgv("raw:1:--batch,10", invocation())
        self.assertNotIn("--connections", one)
        self.assertNotIn("--mailbox-per-connection", one)
        self.assertEqual(one[-2:], ["--batch", "10"])
        self.assertIn("--select", one)
        self.assertNotIn("--select", _rawArgv("raw:1:unselected", invocation()))


class DovecotSecondsTests(SynchronousTestCase):
    """
    L{dovecotSeconds}: a process tree's CPU, reaped children included.
    """

    def test_reapedChild(self) -> None:
        """
        The CPU of a child that has ended and been reaped is counted in its
        parent's tree (as an C{imap} process's is in Dovecot's master's),
        and an ended child is not counted as serving.
        """
        before, _ = dovecotSeconds(os.getpid())
        burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
        subprocess.run([sys.executable, "-c", burn], check=True)
        after, serving = dovecotSeconds(os.getpid())
        self.assertGreaterEqual(after - before, 0.25)
        self.assertEqual(serving, 0)
