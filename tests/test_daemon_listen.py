"""
The daemon whose status port is taken at start, run as admins run it
(C{imapmig-daemon} and C{twistd -n imapmig}): one critical line naming the
endpoint and the reason, exit status 1, no traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.corpus import writeMaildir
from tests.support import SOURCE_TREE, daemonCommand, sourceTreeEnvironment, twistdCommand


class PortTakenTests(SynchronousTestCase):
    """
    A status port in use stops the start cleanly.
    """

    def setUp(self) -> None:
        held = socket.socket()
        self.addCleanup(held.close)
        held.bind(("127.0.0.1", 0))
        held.listen()
        self.port = held.getsockname()[1]
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        maildir = os.path.join(directory, "Maildir")
        writeMaildir(maildir, 2)
        self.configPath = os.path.join(directory, "imapmig.yaml")
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": {"listen": f"tcp:{self.port}:interface=127.0.0.1"},
            "servers": {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"maildir": maildir},
                    "destination": {"server": "s", "user": "u", "password": "p"},
                }
            ],
        }
        with open(os.open(self.configPath, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            yaml.safe_dump(document, f)

    def exitsOne(self, command: list[str]) -> str:
        """
        Run C{command} from the source tree; it exits with status 1.

        @return: its output and error output.
        """
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
            timeout=60,
        )
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        self.assertEqual(result.returncode, 1, output)
        return output

    def assertCleanExit(self, command: list[str]) -> None:
        """
        C{command} exits 1 with the critical line and no traceback.
        """
        output = self.exitsOne(command)
        self.assertIn(
            f"[imapmig.daemon.listener#critical] The status listener could not listen on"
            f" tcp:{self.port}:interface=127.0.0.1: Couldn't listen on 127.0.0.1:{self.port}:",
            output,
        )
        self.assertIn("Address already in use", output)
        self.assertNotIn("Traceback", output)

    def test_daemon(self) -> None:
        """
        C{imapmig-daemon}.
        """
        self.assertCleanExit(daemonCommand(self.configPath))

    def test_twistd(self) -> None:
        """
        C{twistd -n imapmig}.
        """
        self.assertCleanExit(twistdCommand(self.configPath, exitWhenDone=False))

    def test_twistdDaemonizing(self) -> None:
        """
        C{twistd imapmig} without C{-n}: the parent waiting for the start
        exits 1 naming the reason (twistd's own report of the exception,
        cut at 100 octets, the reason first),
        and leaves no pid file; the log file holds the critical line and
        no traceback.
        """
        directory = os.path.dirname(self.configPath)
        pidFile = os.path.join(directory, "twistd.pid")
        logFile = os.path.join(directory, "twistd.log")
        command = twistdCommand(self.configPath, exitWhenDone=False)
        command[command.index("-n") : command.index("imapmig")] = [
            f"--pidfile={pidFile}",
            f"--logfile={logFile}",
        ]
        output = self.exitsOne(command)
        # twistd's report, cut at 100 octets, still names the reason.
        self.assertIn("StatusListenerFailed: Address already in use (tcp:", output)
        # The child reports to the waiting parent first and removes its pid
        # file after: the parent may exit before the child has done so.
        deadline = time.monotonic() + 30
        while os.path.exists(pidFile) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(os.path.exists(pidFile))
        with open(logFile) as f:
            log = f.read()
        self.assertIn("[imapmig.daemon.listener#critical] The status listener could not listen on", log)
        self.assertNotIn("Traceback", log)
