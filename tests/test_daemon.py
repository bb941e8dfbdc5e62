# -*- test-case-name: tests.test_daemon -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.daemon}: C{python -m imapmig.daemon}, the launcher
without twistd, run in a child process as admins run it.
"""

from __future__ import annotations

import os
import re
import subprocess

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import (
    daemonCommand,
    SOURCE_TREE,
    DaemonProcess,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    startDaemon,
    writeDaemonConfig,
    writeEmlJobConfig,
)

# twistd's text log format, which the launcher keeps.
_LOG_LINE = re.compile(rb"^\d{4}-\d\d-\d\dT?[ ]?\d\d:\d\d:\d\d[+-]\d{4} \[[^]]*\] ", re.M)


def runDaemon(configPath: str | None, *arguments: str) -> subprocess.CompletedProcess[bytes]:
    """
    Run the launcher to its end (for runs that need no reactor of ours:
    no server to talk to, or one in another process).
    """
    return subprocess.run(
        daemonCommand(configPath, *arguments),
        env=sourceTreeEnvironment(),
        cwd=SOURCE_TREE,
        capture_output=True,
        timeout=120,
    )


class OptionsTests(TestCase):
    """
    The launcher's command line is imapmig's twistd plugin's.
    """

    def test_configRequired(self) -> None:
        """
        Without C{--config} it prints its usage and the problem, and exits
        with status 2.
        """
        done = runDaemon(None)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(b"--config FILE is required", done.stderr)
        self.assertIn(b"--exit-when-done", done.stderr)

    def test_unknownOption(self) -> None:
        """
        An unknown option is a usage error: exit status 2.
        """
        done = runDaemon(None, "--nodaemon")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(b"nodaemon", done.stderr)

    def test_invalidConfiguration(self) -> None:
        """
        An invalid configuration is reported one problem per line, each
        naming the file and the key, with exit status 2.
        """
        directory = newDirectory(self)
        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            f.write("state: s.sqlite\nservers: {}\njobs: []\nstatus: off\nmax_jobz: 3\n")
        done = runDaemon(path, "--exit-when-done")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(f"{path}: max_jobz".encode(), done.stderr)

    def test_checkConfig(self) -> None:
        """
        C{--check-config} validates the configuration, prints a summary and
        exits with status 0 without connecting to anything.
        """
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        writeMaildir(maildir, 0)
        path = writeDaemonConfig(
            directory,
            DovecotUser("nobody", "pw"),
            {"maildir": maildir},
            # Nothing listens on port 1: a connection would fail.
            {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"},
        )
        done = runDaemon(path, "--check-config")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(
            done.stdout,
            f"{path}: configuration OK: 1 job, 1 server\n"
            f"{path}: state: SQLite database {directory}/state.sqlite\n".encode(),
        )


class RunTests(TestCase):
    """
    The launcher runs the daemon's jobs against a real Dovecot.
    """

    def _config(self, instance: DovecotInstance, user: DovecotUser, messages: int) -> str:
        return writeEmlJobConfig(self, instance, user, messages)

    def _start(self, configPath: str, *arguments: str) -> DaemonProcess:
        return startDaemon(self, reactor, configPath, daemonCommand(configPath, *arguments))

    async def test_exitWhenDone(self) -> None:
        """
        With C{--exit-when-done} it migrates the job and exits with status
        0, logging to standard output in twistd's format.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        daemon = self._start(self._config(instance, user, 5), "--exit-when-done")
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 0, daemon.tail())
        self.assertEqual(sum(map(len, instance.fetchAll(user.name).values())), 5)
        output = bytes(daemon.output)
        self.assertIn(b"imapmig 0.1.0", output)
        self.assertRegex(output, _LOG_LINE)

    async def test_exitOneWhenLoginRefused(self) -> None:
        """
        A job whose login is refused makes it exit with status 1.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        wrong = DovecotUser(user.name, "not-the-password-31337")
        daemon = self._start(self._config(instance, wrong, 2), "--exit-when-done")
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 1, daemon.tail())
        self.assertIn(b"login refused", bytes(daemon.output))
        self.assertNotIn(b"not-the-password-31337", bytes(daemon.output))

    async def test_sigtermStops(self) -> None:
        """
        Without C{--exit-when-done} it keeps running once its queue is
        drained; C{SIGTERM} stops it gracefully, with exit status 0.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        daemon = self._start(self._config(instance, user, 3))
        # Running, its job done: the messages are in the account.
        for _ in range(600):
            if sum(map(len, instance.fetchAll(user.name).values())) == 3:
                break
            await _later(0.1)
        self.assertIsNone(daemon.status, daemon.tail())
        self.assertEqual(sum(map(len, instance.fetchAll(user.name).values())), 3)
        os.kill(daemon.pid, 15)
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 0, daemon.tail())


def _later(seconds: float) -> Deferred[None]:
    from twisted.internet.task import deferLater

    return deferLater(reactor, seconds, lambda: None)
