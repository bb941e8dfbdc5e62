# -*- test-case-name: tests.test_credentials_integration -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The daemon (C{python -m imapmig.daemon}) run as systemd's
C{LoadCredential=} runs it: the destination's password comes from
C{$CREDENTIALS_DIRECTORY}, and the job migrates into a private Dovecot.
"""

from __future__ import annotations

import os
import subprocess
import sys

import yaml
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeEmlDirectory
from imapmig.testing.dovecot import DovecotUser, requireDovecot
from tests.support import (
    daemonCommand,
    SOURCE_TREE,
    DaemonProcess,
    freshUser,
    newDirectory,
    plainServer,
    sharedDovecot,
    sourceTreeEnvironment,
)
from tests.test_credentials import credentialsDirectory


def writeCredentialConfig(directory: str, user: DovecotUser, server: dict[str, object]) -> str:
    """
    Write, mode 0644 as an admin's editor would, a configuration whose one
    job copies five messages into C{user}'s account with its password from
    the credential C{destination}.
    """
    eml = os.path.join(directory, "eml")
    writeEmlDirectory(eml, 5)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"dovecot": server},
        "jobs": [
            {
                "name": "job",
                "source": {"eml_dir": eml},
                "destination": {
                    "server": "dovecot",
                    "user": user.name,
                    "password_credential": "destination",
                },
            }
        ],
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    os.chmod(path, 0o644)
    return path


class CredentialDaemonTests(TestCase):
    """
    The launcher with a C{CREDENTIALS_DIRECTORY}, against a real Dovecot.
    """

    async def test_migratesWithCredential(self) -> None:
        """
        With the password in C{$CREDENTIALS_DIRECTORY/destination} (0400 in
        a 0500 directory, as systemd lays it out), the job migrates every
        message and the daemon exits 0; the password is in no output; the
        state database it created is 0600.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        configPath = writeCredentialConfig(directory, user, plainServer(instance))
        credentials = credentialsDirectory(self, destination=user.password + "\n")
        environment = sourceTreeEnvironment()
        environment["CREDENTIALS_DIRECTORY"] = credentials
        daemon = DaemonProcess()
        reactor.spawnProcess(
            daemon,
            sys.executable,
            daemonCommand(configPath, "--exit-when-done"),
            env=environment,
            path=SOURCE_TREE,
        )

        async def reap() -> None:
            daemon.kill()
            await daemon.whenEnded()

        self.addCleanup(lambda: Deferred.fromCoroutine(reap()))
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 0, daemon.tail())
        self.assertEqual(sum(map(len, instance.fetchAll(user.name).values())), 5)
        self.assertNotIn(user.password.encode(), bytes(daemon.output))
        self.assertEqual(os.stat(os.path.join(directory, "state.sqlite")).st_mode & 0o777, 0o600)

    def test_outsideSystemd(self) -> None:
        """
        The same configuration run without C{CREDENTIALS_DIRECTORY} (by
        hand, outside the unit) is refused with exit status 2, the problem
        naming the key and saying what is missing.
        """
        directory = newDirectory(self)
        configPath = writeCredentialConfig(
            directory, DovecotUser("nobody", "pw"), {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}
        )
        environment = sourceTreeEnvironment()
        environment.pop("CREDENTIALS_DIRECTORY", None)
        done = subprocess.run(
            daemonCommand(configPath, "--check-config"),
            env=environment,
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(
            f"{configPath}: jobs[0].destination.password_credential:"
            " CREDENTIALS_DIRECTORY is not set: imapmig is run outside systemd's"
            " LoadCredential=".encode(),
            done.stderr,
        )
