# -*- test-case-name: tests.test_connectcheck -*-
"""
Tests for what a new user sees when a server's endpoint or password is
wrong: C{--check-config --connect} (L{imapmig.daemon.connectcheck}), the
daemon's warning at the first failure of a job's first connection
(L{imapmig.job.backoff}), and the configuration keys the errors name
(L{imapmig.imap.opening.openSession}).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import yaml
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.config import loadConfig
from imapmig.errors import ConnectFailed
from imapmig.imap.opening import openSession
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.support import (
    SOURCE_TREE,
    daemonCommand,
    freshUser,
    newDirectory,
    plainServer,
    sharedDovecot,
    sourceTreeEnvironment,
    startDaemon,
    twistdCommand,
    writePasswordFile,
)


def _writeConfig(directory: str, servers: dict[str, Any], jobs: list[tuple[str, str, str]]) -> str:
    """
    A configuration of C{servers} and one job per C{(server, user,
    password)}, each from an empty Maildir; the status site off.
    """
    maildir = os.path.join(directory, "Maildir")
    if not os.path.exists(maildir):
        writeMaildir(maildir, 0)
    entries = []
    for number, (server, user, password) in enumerate(jobs):
        passwordFile = writePasswordFile(os.path.join(directory, f"pw{number}"), password)
        entries.append(
            {
                "name": f"job{number}",
                "source": {"maildir": maildir},
                "destination": {"server": server, "user": user, "password_file": passwordFile},
            }
        )
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": servers,
        "jobs": entries,
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f, sort_keys=False)
    return path


class SettingNamesTests(SynchronousTestCase):
    """
    The errors of a connection that cannot be made, or a login refused,
    name the configuration key to look at.
    """

    def test_credentialKey(self) -> None:
        """
        Each account knows the key that holds its credential: the user's
        password file, an admin's.
        """
        directory = newDirectory(self)
        path = _writeConfig(
            directory,
            {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            [("s", "alice", "pw"), ("s", "bob", "pw")],
        )
        config = loadConfig(path)
        self.assertEqual(
            [job.destination.credentialKey for job in config.jobs],
            ["jobs[0].destination.password_file", "jobs[1].destination.password_file"],
        )

    def test_connectFailedNamesEndpoint(self) -> None:
        """
        A refused connection is a L{ConnectFailed}: transient, saying
        C{connection refused} in so many words, carrying the endpoint's
        key.
        """
        memory = MemoryReactorClock()

        d = Deferred.fromCoroutine(
            openSession(
                TCP4ClientEndpoint(memory, "127.0.0.1", 1),
                memory,
                description="alice at tcp:127.0.0.1:1",
                starttls=False,
                tlsOptions=None,
                timeout=30,
                endpointKey="servers.s.endpoint",
            )
        )
        _, _, factory, _, _ = memory.tcpClients[0]
        factory.clientConnectionFailed(memory.connectors[0], Failure(ConnectionRefusedError()))
        failure = self.failureResultOf(d, ConnectFailed)
        self.assertEqual(
            (str(failure.value), failure.value.why, failure.value.setting),
            (
                "alice at tcp:127.0.0.1:1: cannot connect: connection refused",
                "connection refused",
                "servers.s.endpoint",
            ),
        )

    def test_connectTimeoutSaysSo(self) -> None:
        """
        No connection within the server's timeout is said in seconds.
        """
        clock = Clock()
        never: Deferred[Any] = Deferred()

        class Hanging:
            def connect(self, factory: object) -> Deferred[Any]:
                return never

        d = Deferred.fromCoroutine(
            openSession(
                Hanging(),  # type: ignore[arg-type]
                clock,
                description="a",
                starttls=False,
                tlsOptions=None,
                timeout=7,
                endpointKey="servers.s.endpoint",
            )
        )
        clock.advance(7)
        failure = self.failureResultOf(d, ConnectFailed)
        self.assertEqual(failure.value.why, "no connection within 7 s")
        self.assertEqual(clock.getDelayedCalls(), [])


class CheckConnectTests(TestCase):
    """
    C{imapmig-daemon --check-config --connect} and C{twistd -n imapmig
    --check-config --connect} against a real Dovecot and a port nothing
    listens on.
    """

    def _config(self) -> tuple[str, str, int]:
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        path = _writeConfig(
            directory,
            {
                "good": plainServer(instance),
                "badlogin": plainServer(instance),
                # Nothing listens on port 1.
                "wrong": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"},
            },
            [("good", user.name, user.password), ("badlogin", user.name, "not-it-31337")],
        )
        return path, user.name, instance.port

    def _assertReport(
        self, done: subprocess.CompletedProcess[bytes], path: str, user: str, port: int
    ) -> None:
        self.assertEqual(done.returncode, 1, done.stderr)
        lines = done.stdout.decode().splitlines()
        state = os.path.join(os.path.dirname(path), "state.sqlite")
        self.assertEqual(lines[1], f"{path}: state: SQLite database {state}")
        self.assertEqual(
            lines[2:],
            [
                f"servers.good (tcp:127.0.0.1:{port}): ok: connected, greeting,"
                f" LOGIN as {user}, LOGOUT",
                f"servers.badlogin (tcp:127.0.0.1:{port}): failed: login refused:"
                " [AUTHENTICATIONFAILED] Authentication failed."
                " (the credential is jobs[1].destination.password_file)",
                "servers.wrong (tcp:127.0.0.1:1): failed: connection refused;"
                " check servers.wrong.endpoint",
            ],
        )
        self.assertNotIn(b"not-it-31337", done.stdout + done.stderr)

    def test_launcher(self) -> None:
        """
        The launcher tries every server once and reports each, naming the
        setting of each failure; exit status 1.
        """
        requireDovecot(self)
        path, user, port = self._config()
        done = subprocess.run(
            daemonCommand(path, "--check-config", "--connect"),
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )
        self._assertReport(done, path, user, port)

    def test_twistd(self) -> None:
        """
        The twistd plugin has the same option and report.
        """
        requireDovecot(self)
        path, user, port = self._config()
        done = subprocess.run(
            twistdCommand(path, exitWhenDone=False) + ["--check-config", "--connect"],
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )
        self._assertReport(done, path, user, port)

    def test_connectNeedsCheckConfig(self) -> None:
        """
        C{--connect} alone is refused (status 2): it only adds to
        C{--check-config}.
        """
        directory = newDirectory(self)
        path = _writeConfig(
            directory,
            {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            [("s", "alice", "pw")],
        )
        done = subprocess.run(
            daemonCommand(path, "--connect"),
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(b"--connect goes with --check-config", done.stderr)


class FirstFailureTests(TestCase):
    """
    The daemon with a wrong port names the setting at its first failure,
    not after ten retries.
    """

    async def test_wrongPortNamedAtOnce(self) -> None:
        """
        A job whose server's endpoint has a port nothing listens on logs,
        at its first failure, a warning naming C{servers.NAME.endpoint}
        and C{imapmig plan}, while the daemon keeps retrying (the backoff
        is unchanged: it has not exited).
        """
        directory = newDirectory(self)
        path = _writeConfig(
            directory,
            {"mailhost": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            [("mailhost", "alice", "pw")],
        )
        daemon = startDaemon(
            self, reactor, path, daemonCommand(path, "--exit-when-done")
        )
        hint = b"check servers.mailhost.endpoint in the configuration (`imapmig plan"
        # Generous: the first attempt is at once; the deadline only bounds
        # a slow machine.
        for _ in range(600):
            if hint in daemon.output or daemon.status is not None:
                break
            await deferLater(reactor, 0.1)
        self.assertIn(hint, bytes(daemon.output), daemon.tail())
        self.assertIn(b"cannot connect (connection refused)", bytes(daemon.output))
        self.assertIsNone(daemon.status, daemon.tail())

    def test_planNamesEndpoint(self) -> None:
        """
        C{imapmig plan}, which the warning points to, says at once that the
        connection was refused and which setting holds the endpoint.
        """
        directory = newDirectory(self)
        path = _writeConfig(
            directory,
            {"mailhost": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            [("mailhost", "alice", "pw")],
        )
        done = subprocess.run(
            [sys.executable, "-m", "imapmig.cli", "plan", "--config", path],
            env=sourceTreeEnvironment(),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn(
            b"cannot plan: alice at tcp:127.0.0.1:1: cannot connect: connection refused;"
            b" check servers.mailhost.endpoint",
            done.stdout,
        )

