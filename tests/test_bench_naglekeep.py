"""
Tests for C{bench/naglekeep.c}, the LD_PRELOAD shim that makes a server
leave Nagle's algorithm on, and for L{DovecotInstance}'s C{preload} option
that starts Dovecot with it.
"""

from __future__ import annotations

import imaplib
import os
import shutil
import subprocess
import sys
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from bench.servers import buildNagleShim
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from imapmig.testing.privateserver import processesInSession

# Reports what the kernel holds after asking for TCP_NODELAY, TCP_CORK and
# SO_KEEPALIVE on a fresh TCP socket.
_PROBE = """
import socket
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
print(
    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK),
    s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
)
"""


class NagleShimTests(SynchronousTestCase):
    """
    The shim and a Dovecot started with it.
    """

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="naglekeep-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        if shutil.which("gcc") is None:
            self.fail("gcc is needed to build bench/naglekeep.c")
        self.shim = buildNagleShim(self.directory)

    def _probe(self, preload: str | None) -> str:
        environment = dict(os.environ)
        if preload is not None:
            environment["LD_PRELOAD"] = preload
        completed = subprocess.run(
            [sys.executable, "-c", _PROBE], env=environment, capture_output=True, check=True
        )
        return completed.stdout.decode("ascii").strip()

    def test_ignoresNodelayAndCorkOnly(self) -> None:
        """
        Under the shim, setting C{TCP_NODELAY} and C{TCP_CORK} succeeds but
        leaves both off, while other options (C{SO_KEEPALIVE}) still apply;
        without it, both are set.
        """
        self.assertEqual(self._probe(self.shim), "0 0 True")
        self.assertEqual(self._probe(None), "1 1 True")

    def test_dovecotSessionLoadsTheShim(self) -> None:
        """
        With C{preload}, the Dovecot process serving an IMAP session (the
        C{imap} process, a grandchild of the master, whose environment
        Dovecot rebuilds) has the shim loaded; without it, none has.
        """
        requireDovecot(self)
        for preload, expected in ((self.shim, True), (None, False)):
            base = tempfile.mkdtemp(dir=self.directory)
            instance = DovecotInstance(
                base, users=(DovecotUser("probe", "probe-pw"),), preload=preload
            )
            instance.start()
            try:
                imap = imaplib.IMAP4("127.0.0.1", instance.port)
                imap.login("probe", "probe-pw")
                imap.select("INBOX")
                assert instance.pid is not None
                loaded = {}
                for pid in processesInSession(instance.pid):
                    try:
                        with open(f"/proc/{pid}/comm") as f:
                            name = f.read().strip()
                        with open(f"/proc/{pid}/maps") as f:
                            loaded[name] = self.shim in f.read()
                    except OSError:
                        continue
                imap.logout()
            finally:
                instance.stop()
            self.assertIn("imap", loaded)
            self.assertEqual(loaded["imap"], expected)
