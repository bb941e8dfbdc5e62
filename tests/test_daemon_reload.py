# -*- test-case-name: tests.test_daemon_reload -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Integration test of C{SIGHUP}: C{python -m imapmig.daemon --config FILE}
in a child process against a private Dovecot, its configuration rewritten
while a job runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
from typing import Any

import yaml
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from imapmig.testing.ports import listeningPorts
from tests.support import (
    daemonCommand,
    DaemonProcess,
    deliveries,
    freshUser,
    newDirectory,
    sharedDovecot,
    startDaemon,
    twistdCommand,
    writePasswordFile,
)

# Generous: the suite runs beside other work on two shared cores.
DEADLINE = 120.0

# Each account's rate: job "a" (80 messages) runs for about 10 s, long
# enough to be running when the configuration is reloaded.
RATE = 8
SLOW_MESSAGES = 80
NEW_MESSAGES = 15


async def waitForLine(daemon: DaemonProcess, pattern: str, after: int = 0) -> re.Match[bytes]:
    """
    Wait until the daemon's output, from offset C{after}, has a line
    matching C{pattern} (a regular expression), at most L{DEADLINE}
    seconds; fail if it exits first.
    """
    compiled = re.compile(pattern.encode(), re.M)
    waited = 0.0
    while True:
        found = compiled.search(bytes(daemon.output), after)
        if found is not None:
            return found
        if daemon.status is not None:
            raise AssertionError(
                f"the daemon exited ({daemon.status}) before logging {pattern!r}:\n{daemon.tail()}"
            )
        if waited > DEADLINE:
            raise AssertionError(f"no line {pattern!r} after {DEADLINE:g} s:\n{daemon.tail()}")
        await deferLater(reactor, 0.05, lambda: None)
        waited += 0.05


async def statusJSON(port: int) -> Any:
    """
    The daemon's C{/status.json}.
    """
    import treq

    # Not persistent: no connection is left open when the test ends.
    response = await treq.get(f"http://127.0.0.1:{port}/status.json", persistent=False)
    return json.loads(await response.content())


def writeReloadConfig(
    directory: str,
    instance: DovecotInstance,
    jobs: list[tuple[str, DovecotUser, str]],
    extra: dict[str, Any] | None = None,
) -> str:
    """
    Write the daemon's configuration: C{jobs} (name, account, Maildir)
    into C{instance} over plain TCP, each account at L{RATE} messages
    a second, the status listener on a free loopback port.
    """
    configJobs = []
    for name, user, maildir in jobs:
        passwordFile = os.path.join(directory, f"password-{name}")
        if not os.path.exists(passwordFile):
            writePasswordFile(passwordFile, user.password)
        configJobs.append(
            {
                "name": name,
                "source": {"maildir": maildir},
                "destination": {"server": "dovecot", "user": user.name, "password_file": passwordFile},
                "connections": 1,
            }
        )
    document: dict[str, Any] = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": {"listen": "tcp:0:interface=127.0.0.1"},
        "servers": {
            "dovecot": {
                "endpoint": f"tcp:127.0.0.1:{instance.port}",
                "starttls": "off",
                "compress": "off",
                "per_account": {"messages_per_second": RATE},
            }
        },
        "jobs": configJobs,
        **(extra or {}),
    }
    path = os.path.join(directory, "imapmig.yaml")
    # Replaced whole, as an editor or a configuration manager does.
    with open(path + ".new", "w") as f:
        yaml.safe_dump(document, f, sort_keys=False)
    os.chmod(path + ".new", 0o600)
    os.replace(path + ".new", path)
    return path


class ReloadTests(TestCase):
    """
    C{SIGHUP} reloads the configuration of a running daemon.
    """

    async def test_reloadAddsJob(self) -> None:
        """
        A job added by a reload migrates completely while the running job
        goes on undisturbed (no reconnection, started once); each account
        then holds every message exactly once.  A reload of an invalid
        configuration logs each problem at error level and changes
        nothing: the daemon runs on with its jobs.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        userA, userB = freshUser(instance), freshUser(instance)
        directory = newDirectory(self)
        corpusA = writeMaildir(os.path.join(directory, "maildir-a"), SLOW_MESSAGES, seed=191, folders=(("INBOX",),), profile="small")
        corpusB = writeMaildir(os.path.join(directory, "maildir-b"), NEW_MESSAGES, seed=192, folders=(("INBOX",),), profile="small")
        jobA = ("a", userA, os.path.join(directory, "maildir-a"))
        jobB = ("b", userB, os.path.join(directory, "maildir-b"))
        path = writeReloadConfig(directory, instance, [jobA])
        daemon = startDaemon(
            self, reactor, path, daemonCommand(path)
        )
        await waitForLine(daemon, r"Job a started")
        ports = listeningPorts(daemon.pid)
        self.assertEqual(len(ports), 1, ports)
        port = ports[0]
        # Job a is copying: some of its messages are in.
        waited = 0.0
        while True:
            [progress] = (await statusJSON(port))["jobs"]
            if progress["messages_done"] > 0:
                break
            self.assertLess(waited, DEADLINE, daemon.tail())
            await deferLater(reactor, 0.1, lambda: None)
            waited += 0.1

        writeReloadConfig(directory, instance, [jobA, jobB])
        before = len(daemon.output)
        os.kill(daemon.pid, signal.SIGHUP)
        reloaded = await waitForLine(daemon, r"Configuration reloaded from .*$", before)
        self.assertIn(b": 1 job added", reloaded.group(0))
        # Job a was still running when the reload was applied.
        self.assertNotRegex(bytes(daemon.output)[: reloaded.end()], rb"Job a done after")
        await waitForLine(daemon, r"Job b done after")
        await waitForLine(daemon, r"Job a done after")
        output = bytes(daemon.output)
        self.assertEqual(len(re.findall(rb"Job a started", output)), 1, daemon.tail())
        self.assertNotRegex(output, rb"Job a: .*connecting again")
        status = await statusJSON(port)
        jobs = {job["name"]: job for job in status["jobs"]}
        self.assertEqual(sorted(jobs), ["a", "b"])
        self.assertEqual(jobs["a"]["reconnects"], 0)
        self.assertEqual(jobs["b"]["state"], "done")
        for user, corpus in ((userA, corpusA), (userB, corpusB)):
            held = deliveries(instance.fetchAll(user.name), corpus.messages)
            self.assertTrue(held.exactlyOnce, held.summary())

        # An invalid configuration: two problems.
        path = writeReloadConfig(
            directory, instance, [jobA, jobB, ("c", userB, "relative/maildir")], {"max_jobz": 3}
        )
        before = len(daemon.output)
        os.kill(daemon.pid, signal.SIGHUP)
        refused = await waitForLine(daemon, r"Configuration not reloaded from .*$", before)
        self.assertIn(b"nothing changed", refused.group(0))
        errors = re.findall(
            rb"^.*\[imapmig\.daemon\.reload#error\] Configuration reload: (.*)$",
            bytes(daemon.output)[before:],
            re.M,
        )
        self.assertEqual(len(errors), 2, daemon.tail())
        self.assertTrue(any(b"max_jobz" in error for error in errors), errors)
        self.assertTrue(any(b"jobs[2]" in error for error in errors), errors)
        self.assertIsNone(daemon.status)
        status = await statusJSON(port)
        self.assertEqual([job["name"] for job in status["jobs"]], ["a", "b"])
        os.kill(daemon.pid, signal.SIGTERM)
        self.assertEqual(await daemon.exited(reactor, DEADLINE), 0, daemon.tail())


class TwistdReloadTests(TestCase):
    """
    C{SIGHUP} reloads under C{twistd -n imapmig} too.
    """

    async def test_twistdReloads(self) -> None:
        """
        The twistd launcher installs the same C{SIGHUP} handler: a reload
        applies a new C{max_jobs} and is summed up in one line, and the
        daemon keeps running.
        """
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        writeMaildir(maildir, 0)
        path = os.path.join(directory, "imapmig.yaml")
        password = writePasswordFile(os.path.join(directory, "password"), "pw")

        def write(maxJobs: int) -> None:
            document = {
                "state": os.path.join(directory, "state.sqlite"),
                "status": "off",
                # Nothing listens on port 1: the job keeps trying, and the
                # daemon keeps running.
                "servers": {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
                "jobs": [
                    {
                        "name": "j",
                        "source": {"maildir": maildir},
                        "destination": {"server": "s", "user": "u", "password_file": password},
                    }
                ],
                "max_jobs": maxJobs,
            }
            with open(path, "w") as f:
                yaml.safe_dump(document, f)
            os.chmod(path, 0o600)

        write(8)
        command = twistdCommand(path)
        command.remove("--exit-when-done")
        daemon = startDaemon(self, reactor, path, command)
        await waitForLine(daemon, r"Job j started")
        write(4)
        os.kill(daemon.pid, signal.SIGHUP)
        reloaded = await waitForLine(daemon, r"Configuration reloaded from .*$")
        self.assertTrue(reloaded.group(0).endswith(b": max_jobs 8 -> 4"), reloaded.group(0))
        self.assertIsNone(daemon.status)
        os.kill(daemon.pid, signal.SIGTERM)
        self.assertEqual(await daemon.exited(reactor, DEADLINE), 0, daemon.tail())
