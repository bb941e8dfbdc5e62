# -*- test-case-name: tests.test_daemon_config -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Integration tests of the configuration's bounds against the real daemon
(C{python -m imapmig.daemon}, as C{imapmig-daemon} runs): an alias bomb at
start and on C{SIGHUP} while a job copies, keys given twice, and reloads
of a broken file in a daemon that runs without TLS.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from typing import Any

import yaml
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from imapmig.configfile import MAX_NODES
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from imapmig.testing.ports import listeningPorts
from tests.support import (
    SOURCE_TREE,
    DaemonProcess,
    daemonCommand,
    deliveries,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    startDaemon,
    writePasswordFile,
)
from tests.test_configfile import aliasBomb
from tests.test_daemon_reload import DEADLINE, statusJSON, waitForLine, writeReloadConfig

BOMB_REFUSED = f"the document holds more than {MAX_NODES:,} nodes"


def bombBlock() -> str:
    """
    The alias bomb of L{aliasBomb} as a top-level key to append to a
    configuration (2**25 leaves in under a kilobyte).
    """
    return aliasBomb().decode().split("\n", 1)[1]


def writePlainConfig(directory: str, extra: str = "") -> str:
    """
    Write a configuration that uses no TLS (so C{imapmig-daemon} runs
    without OpenSSL): one job into a server where nothing listens (port 1:
    the job keeps retrying, the daemon keeps running), the status site on
    a free loopback port; C{extra} appended as written.
    """
    maildir = os.path.join(directory, "Maildir")
    if not os.path.exists(maildir):
        writeMaildir(maildir, 0)
    password = os.path.join(directory, "password")
    if not os.path.exists(password):
        writePasswordFile(password, "pw")
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": {"listen": "tcp:0:interface=127.0.0.1"},
        "servers": {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
        "jobs": [
            {
                "name": "j",
                "source": {"maildir": maildir},
                "destination": {"server": "s", "user": "u", "password_file": password},
            }
        ],
    }
    path = os.path.join(directory, "imapmig.yaml")
    write(path, yaml.safe_dump(document, sort_keys=False) + extra)
    return path


def write(path: str, content: str) -> None:
    """
    Replace the file at C{path} whole with C{content}, mode 0600, as an
    editor does.
    """
    with open(path + ".new", "w") as f:
        f.write(content)
    os.chmod(path + ".new", 0o600)
    os.replace(path + ".new", path)


def checkConfig(path: str, *arguments: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """
    Run the launcher with C{arguments} on C{path} to its end; return how
    it ended and the seconds it took.
    """
    start = time.monotonic()
    done = subprocess.run(
        daemonCommand(path, *arguments),
        env=sourceTreeEnvironment(),
        cwd=SOURCE_TREE,
        capture_output=True,
        # Without the bound, --check-config ran past 120 s.
        timeout=DEADLINE,
    )
    return done, time.monotonic() - start


async def healthz(port: int) -> int:
    """
    The status code of the daemon's C{/healthz}, which must answer within
    10 s (generous: the machine is shared; a frozen reactor answers
    nothing for minutes).
    """
    import treq

    response = await treq.get(
        f"http://127.0.0.1:{port}/healthz", persistent=False, timeout=10
    )
    await response.content()
    code: int = response.code
    return code


class StartTests(TestCase):
    """
    A configuration past the bounds, or with a key given twice, is refused
    at start as by C{--check-config}: exit status 2, one line naming it.
    """

    def test_aliasBomb(self) -> None:
        """
        A one-kilobyte alias bomb (2**25 leaves) is refused by
        C{--check-config} and by a start, each at once (the process's
        whole run, Python's start-up included, within 30 s on a loaded
        machine; the refusal itself takes under a millisecond).
        """
        directory = newDirectory(self)
        path = writePlainConfig(directory, bombBlock())
        self.assertLess(os.path.getsize(path), 2048)
        for arguments in (("--check-config",), ()):
            done, seconds = checkConfig(path, *arguments)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertRegex(
                done.stderr.decode(), rf"^{re.escape(path)}: line \d+: {BOMB_REFUSED}"
            )
            self.assertLess(seconds, 30)

    def test_duplicateKeys(self) -> None:
        """
        C{state:} given twice (YAML keeps the second: a fresh journal) and
        a server key given twice are refused, each naming both lines.
        """
        directory = newDirectory(self)
        path = writePlainConfig(directory)
        with open(path) as f:
            content = f.read()
        other = os.path.join(directory, "other.sqlite")
        lines = content.splitlines()
        endpoint = next(i for i, line in enumerate(lines) if "endpoint:" in line)
        lines.insert(endpoint + 1, lines[endpoint].replace("tcp:127.0.0.1:1", "tcp:127.0.0.1:2"))
        write(path, "\n".join(lines) + f"\nstate: {other}\n")
        done, _ = checkConfig(path, "--check-config")
        self.assertEqual(done.returncode, 2, done.stderr)
        total = len(lines) + 1
        # In the order the mappings end: the server's, then the document.
        self.assertEqual(
            done.stderr.decode().splitlines(),
            [
                f"{path}: servers.s.endpoint: given twice, on lines {endpoint + 1} and"
                f" {endpoint + 2}; YAML would silently keep the second: give it once",
                f"{path}: state: given twice, on lines 1 and {total}; YAML would"
                " silently keep the second: give it once",
            ],
        )
        self.assertFalse(os.path.exists(other))


class BrokenReloadTests(TestCase):
    """
    C{SIGHUP} with a broken file, in a daemon started without TLS (its
    configuration uses none), logs what is wrong, as C{--check-config}
    says it, and the daemon runs on.
    """

    async def test_brokenReloads(self) -> None:
        """
        A YAML error, an empty file, a deleted file, a key given twice and
        an alias bomb are each refused with the real problem, never "needs
        TLS ... restart it" (a restart then exited with status 2); the
        status site answers throughout.  A valid file then applies, its
        summary naming the limit that changed.
        """
        directory = newDirectory(self)
        path = writePlainConfig(directory)
        daemon = startDaemon(self, reactor, path, daemonCommand(path))
        await waitForLine(daemon, r"Job j started")
        [port] = listeningPorts(daemon.pid)
        valid = open(path).read()
        for content, problem in (
            ("state: [\n", r"line 2, column 1: invalid YAML: .*"),
            ("", r"the file is empty"),
            (None, r"no such file"),
            (valid + "max_jobs: 3\nmax_jobs: 4\n", r"max_jobs: given twice, on lines \d+ and \d+; .*"),
            (valid + bombBlock(), rf"line \d+: {BOMB_REFUSED} .*"),
        ):
            if content is None:
                os.remove(path)
            else:
                write(path, content)
            await self.assertRefused(daemon, path, problem)
            self.assertEqual(await healthz(port), 200)
        write(path, valid.replace("starttls: 'off'", "starttls: 'off'\n    max_connections: 4"))
        before = len(daemon.output)
        os.kill(daemon.pid, signal.SIGHUP)
        reloaded = await waitForLine(daemon, r"Configuration reloaded from .*$", before)
        self.assertTrue(
            reloaded.group(0).endswith(b": servers.s.max_connections none -> 4"),
            reloaded.group(0),
        )
        self.assertNotIn(b"TLS", bytes(daemon.output))
        os.kill(daemon.pid, signal.SIGTERM)
        self.assertEqual(await daemon.exited(reactor, DEADLINE), 0, daemon.tail())

    async def assertRefused(self, daemon: DaemonProcess, path: str, problem: str) -> None:
        """
        Send C{SIGHUP}; the reload is refused with one error line matching
        C{problem} (a regular expression), naming C{path}, and nothing
        about TLS; the daemon runs on.
        """
        before = len(daemon.output)
        os.kill(daemon.pid, signal.SIGHUP)
        await waitForLine(daemon, r"Configuration not reloaded from .*$", before)
        errors = re.findall(
            rb"\[imapmig\.daemon\.reload#error\] Configuration reload: (.*)$",
            bytes(daemon.output)[before:],
            re.M,
        )
        self.assertEqual(len(errors), 1, daemon.tail())
        self.assertRegex(errors[0].decode(), rf"^{re.escape(path)}: {problem}$")
        self.assertNotIn(b"TLS", bytes(daemon.output)[before:])
        self.assertIsNone(daemon.status)


class BombWhileCopyingTests(TestCase):
    """
    An alias bomb reloaded while a job copies pauses neither the copy nor
    the status site.
    """

    async def test_bombWhileCopying(self) -> None:
        """
        C{SIGHUP} with an alias bomb while a job copies: the reload is
        refused with one clear line; C{/healthz} answers every probe
        meanwhile; the job goes on to migrate every message exactly once,
        with no reply deadline fired and no reconnection.  (It froze the
        reactor for minutes: the status site down, then "no reply to
        APPEND within 120 s" for every message in flight.)
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        maildir = os.path.join(directory, "maildir-a")
        # At 8 messages a second (tests.test_daemon_reload.RATE): about 15 s.
        corpus = writeMaildir(maildir, 120, seed=271, folders=(("INBOX",),), profile="small")
        path = writeReloadConfig(directory, instance, [("a", user, maildir)])
        daemon = startDaemon(self, reactor, path, daemonCommand(path))
        await waitForLine(daemon, r"Job a started")
        [port] = listeningPorts(daemon.pid)
        await self.copying(port)
        with open(path, "a") as f:
            f.write(bombBlock())
        before = len(daemon.output)
        os.kill(daemon.pid, signal.SIGHUP)
        probes: list[int] = []
        for _ in range(10):
            probes.append(await healthz(port))
            await deferLater(reactor, 0.2, lambda: None)
        refused = await waitForLine(daemon, r"Configuration reload: .*$", before)
        self.assertRegex(refused.group(0).decode(), rf"{re.escape(path)}: line \d+: {BOMB_REFUSED}")
        self.assertEqual(probes, [200] * 10)
        [progress] = (await statusJSON(port))["jobs"]
        self.assertNotEqual(progress["state"], "done", "the reload came after the copy")
        await waitForLine(daemon, r"Job a done after")
        output = bytes(daemon.output)
        self.assertNotRegex(output, rb"no reply to")
        [progress] = (await statusJSON(port))["jobs"]
        self.assertEqual(progress["reconnects"], 0)
        held = deliveries(instance.fetchAll(user.name), corpus.messages)
        self.assertTrue(held.exactlyOnce, held.summary())
        os.kill(daemon.pid, signal.SIGTERM)
        self.assertEqual(await daemon.exited(reactor, DEADLINE), 0, daemon.tail())

    async def copying(self, port: int) -> None:
        """
        Wait until the job has copied some messages.
        """
        waited = 0.0
        while True:
            jobs: list[dict[str, Any]] = (await statusJSON(port))["jobs"]
            if jobs[0]["messages_done"] > 0:
                return
            self.assertLess(waited, DEADLINE)
            await deferLater(reactor, 0.1, lambda: None)
            waited += 0.1
