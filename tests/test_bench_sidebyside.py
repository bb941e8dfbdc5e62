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
from bench.sidebyside import _rawArgv, dovecotSeconds, parseArguments, summary


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
        C{raw} is C{raw:2}: 2 connections, each into a mailbox of its own,
        as imapmig's 2 connections never append into one mailbox (both
        into INBOX, the raw writer's pair is slower than one connection and
        Dovecot spends a third more per message: no reference).
        """
        argv = _rawArgv("raw", invocation())
        self.assertEqual(argv, _rawArgv("raw:2", invocation()))
        self.assertEqual(argv[argv.index("--connections") + 1], "2")
        self.assertIn("--mailbox-per-connection", argv)
        self.assertEqual(argv[argv.index("--batch") + 1], "50")

    def test_shared(self) -> None:
        """
        C{shared} makes every connection append into INBOX.
        """
        argv = _rawArgv("raw:2:shared", invocation())
        self.assertEqual(argv[argv.index("--connections") + 1], "2")
        self.assertNotIn("--mailbox-per-connection", argv)
        self.assertNotIn("shared", argv)

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


class SummaryTests(SynchronousTestCase):
    """
    L{summary}: each client's figures, and each tree against the raw
    writer on as many connections.
    """

    def test_againstRawWithAsMany(self) -> None:
        """
        A tree with N connections is set against C{raw:N} (C{raw} for 2),
        median rate to median rate, each net of its median empty run; a raw
        writer with more arguments is no reference.
        """
        # (seconds, CPU seconds, messages, Dovecot's CPU seconds)
        results = {
            "raw": [((1.1, 0.2, 1000, 0.1), (0.1, 0.0, 0, 0.0))],
            "raw:1": [((2.1, 0.2, 1000, 0.1), (0.1, 0.0, 0, 0.0))],
            "raw:1:--batch,10": [((0.6, 0.2, 1000, 0.1), (0.1, 0.0, 0, 0.0))],
            "/t:2": [((3.0, 0.5, 1000, 0.1), (1.0, 0.1, 0, 0.0))],
            "/t:1": [((3.0, 0.5, 1000, 0.1), (1.0, 0.1, 0, 0.0))],
        }
        lines = summary(results)
        self.assertIn("/t:2 / raw: 0.50x", lines)
        self.assertIn("/t:1 / raw:1: 1.00x", lines)
        self.assertIn(
            "/t:2: net rates [500], median 500/s; CPU per message 400 us;"
            " Dovecot's CPU per message [100], median 100 us",
            lines,
        )


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


class ParseArgumentsTests(SynchronousTestCase):
    """
    C{[--tls MODE] CORPUS ROUNDS CLIENT...}.
    """

    def test_plain(self) -> None:
        """
        Without C{--tls} every client reaches Dovecot over plain TCP.
        """
        self.assertEqual(
            parseArguments(["realistic", "3", "raw:1", "/t:1"]),
            ("none", "realistic", 3, ["raw:1", "/t:1"]),
        )

    def test_tls(self) -> None:
        """
        C{--tls MODE} first sets how every client reaches Dovecot; a mode
        that is none of L{bench.contenders.TLS_MODES} is refused.
        """
        self.assertEqual(
            parseArguments(["--tls", "implicit", "realistic", "3", "raw:1"]),
            ("implicit", "realistic", 3, ["raw:1"]),
        )
        self.assertRaises(SystemExit, parseArguments, ["--tls", "tls", "realistic", "3", "raw:1"])
