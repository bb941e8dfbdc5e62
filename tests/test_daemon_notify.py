# -*- test-case-name: tests.test_daemon_notify -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The daemon under systemd's notification protocol, end to end: C{python -m
imapmig.daemon} (and C{twistd imapmig}) started in a child process with
C{NOTIFY_SOCKET} naming a datagram socket this test reads, as systemd
starts a C{Type=notify} service, against a private Dovecot.

Every wait is for a datagram or the process's exit, with a generous
deadline: nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, Callable

import yaml
from twisted.internet import defer
from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import DatagramProtocol
from twisted.logger import Logger
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeEmlDirectory
from imapmig.testing.dovecot import requireDovecot
from imapmig.testing.ports import listeningPorts
from tests.support import (
    daemonCommand,
    SOURCE_TREE,
    DaemonProcess,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    twistdCommand,
    writeEmlJobConfig,
)

log = Logger()

# The global reactor, as the test process runs it (typed: the Unix datagram
# listener is not on every reactor's interface).
reactor: Any = _globalReactor

DEADLINE = 30.0
"""
Seconds any one notification may take to arrive: generous, so that the
test passes beside a CPU hog.
"""

Message = dict[str, str]


class NotifyReceiver(DatagramProtocol):
    """
    The socket systemd reads notifications from: each datagram parsed
    into its assignments, with when it arrived (C{time.monotonic}).
    """

    def __init__(self, daemon: Callable[[], DaemonProcess | None]) -> None:
        self.messages: list[tuple[float, Message]] = []
        self._cursor = 0
        self._waiting: list[tuple[Callable[[Message], bool], Deferred[tuple[float, Message]]]] = []
        self._daemon = daemon

    def datagramReceived(self, datagram: bytes, address: Any) -> None:
        lines = datagram.decode("utf-8").splitlines()
        self.messages.append((time.monotonic(), dict(line.split("=", 1) for line in lines)))
        self._match()

    def _match(self) -> None:
        while self._waiting and self._cursor < len(self.messages):
            predicate, waiting = self._waiting[0]
            arrived = self.messages[self._cursor]
            self._cursor += 1
            if predicate(arrived[1]):
                self._waiting.pop(0)
                waiting.callback(arrived)

    async def next(self, predicate: Callable[[Message], bool], what: str) -> tuple[float, Message]:
        """
        The next notification, after the last one returned, that
        C{predicate} accepts (those it skips are not returned again).

        @param what: what is awaited, for the failure message.
        @return: when it arrived, and its assignments.
        """
        waiting: Deferred[tuple[float, Message]] = Deferred()
        self._waiting.append((predicate, waiting))
        self._match()
        try:
            return await waiting.addTimeout(DEADLINE, reactor)
        except defer.TimeoutError:
            daemon = self._daemon()
            raise AssertionError(
                f"no {what} within {DEADLINE} s; received {[m for _, m in self.messages]};"
                f" the daemon's output ends:\n{daemon.tail() if daemon else ''}"
            ) from None


def has(key: str, value: str = "1") -> Callable[[Message], bool]:
    """
    A predicate: the notification assigns C{value} to C{key}.
    """
    return lambda message: message.get(key) == value


_STATUS = re.compile(r"^(finished: )?\d+ of 1 job done, \d+ msgs?")


class NotifyTests(TestCase):
    """
    The daemon tells systemd it is ready, how it is doing, that it is
    alive, and that it stops.
    """

    def setUp(self) -> None:
        self.daemon: DaemonProcess | None = None
        self.receiver = NotifyReceiver(lambda: self.daemon)
        # Unix socket paths are short: not in trial's directory.
        directory = tempfile.mkdtemp(prefix="imapmig-nt-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.socketPath = os.path.join(directory, "notify")
        port = reactor.listenUNIXDatagram(self.socketPath, self.receiver)
        self.addCleanup(port.stopListening)

    def config(self, messages: int = 3) -> str:
        """
        A job of C{messages} into a fresh account of the shared Dovecot,
        with the status listener on a free loopback port.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        path = writeEmlJobConfig(self, instance, user, messages)
        with open(path) as f:
            document = yaml.safe_load(f)
        document["status"] = {"listen": "tcp:0:interface=127.0.0.1"}
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return path

    def start(self, command: list[str], **environment: str) -> tuple[DaemonProcess, float]:
        """
        Start C{command} with C{NOTIFY_SOCKET} naming the test's socket
        and C{environment}; it is killed, if still running, when the test
        ends.

        @return: the process, and when it was spawned (C{time.monotonic}).
        """
        daemon = self.daemon = DaemonProcess()
        env = sourceTreeEnvironment()
        for name in ("WATCHDOG_USEC", "WATCHDOG_PID"):
            env.pop(name, None)
        env.update(NOTIFY_SOCKET=self.socketPath, **environment)
        spawned = time.monotonic()
        reactor.spawnProcess(daemon, sys.executable, command, env=env, path=SOURCE_TREE)

        async def reap() -> None:
            daemon.kill()
            await daemon.whenEnded()

        self.addCleanup(lambda: Deferred.fromCoroutine(reap()))
        return daemon, spawned

    async def ready(self, daemon: DaemonProcess, spawned: float) -> Message:
        """
        Wait for C{READY=1}; by then the status listener listens.  The
        delay from spawning is logged (the acceptance's "within a second"
        is measured, not asserted: see the report).
        """
        arrived, message = await self.receiver.next(has("READY"), "READY=1")
        log.info(
            "READY=1 came {delay:.3f} s after spawning the daemon", delay=arrived - spawned
        )
        self.assertIsNone(daemon.status, daemon.tail())
        self.assertEqual(len(listeningPorts(daemon.pid)), 1, daemon.tail())
        return message

    async def stops(self, daemon: DaemonProcess) -> None:
        """
        C{SIGTERM}: C{STOPPING=1} with a status saying so, and exit status
        0.
        """
        os.kill(daemon.pid, signal.SIGTERM)
        _, stopping = await self.receiver.next(has("STOPPING"), "STOPPING=1")
        self.assertTrue(stopping["STATUS"].startswith("stopping"), stopping)
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 0, daemon.tail())

    async def test_daemon(self) -> None:
        """
        C{imapmig-daemon} sends C{READY=1} (with a first status line) once
        its status listener listens, a C{STATUS=} line every 5 s,
        C{WATCHDOG=1} every 0.2 s with C{WATCHDOG_USEC=400000}, and
        C{STOPPING=1} on C{SIGTERM}, after which it exits with status 0.
        """
        daemon, spawned = self.start(
            daemonCommand(self.config()), WATCHDOG_USEC="400000"
        )
        ready = await self.ready(daemon, spawned)
        self.assertRegex(ready["STATUS"], _STATUS)
        for _ in range(2):
            await self.receiver.next(has("WATCHDOG"), "WATCHDOG=1 after READY=1")
        _, status = await self.receiver.next(
            lambda m: "STATUS" in m and "READY" not in m, "a STATUS= line after READY=1"
        )
        self.assertRegex(status["STATUS"], _STATUS)
        await self.stops(daemon)

    async def test_twistd(self) -> None:
        """
        Under C{twistd -n imapmig} too, C{READY=1} comes once the status
        listener listens, and C{STOPPING=1} on C{SIGTERM}; no watchdog
        without C{WATCHDOG_USEC}.
        """
        daemon, spawned = self.start(twistdCommand(self.config(), exitWhenDone=False))
        await self.ready(daemon, spawned)
        await self.stops(daemon)
        self.assertNotIn("WATCHDOG", [key for _, m in self.receiver.messages for key in m])

    async def test_watchdogOfAnotherProcess(self) -> None:
        """
        A C{WATCHDOG_PID} naming another process: no C{WATCHDOG=1}, READY
        all the same.
        """
        daemon, spawned = self.start(
            daemonCommand(self.config()), WATCHDOG_USEC="400000", WATCHDOG_PID="1"
        )
        await self.ready(daemon, spawned)
        await self.stops(daemon)
        self.assertNotIn("WATCHDOG", [key for _, m in self.receiver.messages for key in m])

    async def test_childrenDoNotInherit(self) -> None:
        """
        A token command the daemon runs does not inherit C{NOTIFY_SOCKET}
        or the watchdog's variables: it could otherwise notify systemd in
        the daemon's name.
        """
        directory = newDirectory(self)
        eml = os.path.join(directory, "eml")
        writeEmlDirectory(eml, 1)
        seen = os.path.join(directory, "environment")
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": "off",
            # Nothing listens on port 1; the command runs before connecting,
            # and fails, which ends the job.
            "servers": {"s": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}},
            "jobs": [
                {
                    "name": "job",
                    "source": {"eml_dir": eml},
                    "destination": {
                        "server": "s",
                        "user": "u",
                        "oauth2": {
                            "token_command": ["/bin/sh", "-c", f"env > '{seen}'; exit 3"]
                        },
                    },
                }
            ],
        }
        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        daemon, spawned = self.start(
            daemonCommand(path, "--exit-when-done"), WATCHDOG_USEC="60000000"
        )
        await self.receiver.next(has("READY"), "READY=1")
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 1, daemon.tail())
        with open(seen) as f:
            names = {line.split("=", 1)[0] for line in f if "=" in line}
        self.assertIn("PATH", names)
        self.assertEqual(names & {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}, set())
        self.assertIn("STOPPING", [key for _, m in self.receiver.messages for key in m])

    def rewrite(self, path: str, change: Callable[[dict[str, Any]], None]) -> None:
        """
        Rewrite the configuration at C{path} through C{change}, replacing
        the file whole as an editor does.
        """
        with open(path) as f:
            document = yaml.safe_load(f)
        change(document)
        with open(path + ".new", "w") as f:
            yaml.safe_dump(document, f)
        os.chmod(path + ".new", 0o600)
        os.replace(path + ".new", path)

    async def reloads(self, daemon: DaemonProcess) -> tuple[Message, Message]:
        """
        Send C{SIGHUP}; return the C{RELOADING=1} notification and the
        C{READY=1} that follows it.  C{MONOTONIC_USEC=} is
        C{CLOCK_MONOTONIC} (the same clock this test reads) between the
        signal and its arrival.
        """
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        os.kill(daemon.pid, signal.SIGHUP)
        _, reloading = await self.receiver.next(has("RELOADING"), "RELOADING=1")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.assertLessEqual(before, int(reloading["MONOTONIC_USEC"]), reloading)
        self.assertLessEqual(int(reloading["MONOTONIC_USEC"]), after, reloading)
        self.assertNotIn("READY", reloading)
        _, ready = await self.receiver.next(has("READY"), "READY=1 after RELOADING=1")
        self.assertNotIn("RELOADING", ready)
        return reloading, ready

    async def test_reload(self) -> None:
        """
        A C{SIGHUP} with a valid new configuration gives C{RELOADING=1}
        with C{MONOTONIC_USEC=}, then C{READY=1} with a status saying it
        was reloaded; one with an invalid configuration gives the same
        pair, the status saying it was not applied; the daemon runs on and
        stops with status 0.
        """
        path = self.config(messages=1)
        daemon, spawned = self.start(daemonCommand(path))
        await self.ready(daemon, spawned)

        self.rewrite(path, lambda document: document.update(max_jobs=3))
        _, ready = await self.reloads(daemon)
        self.assertTrue(ready["STATUS"].startswith("configuration reloaded; "), ready)

        self.rewrite(path, lambda document: document.update(max_jobz=3))
        _, ready = await self.reloads(daemon)
        self.assertTrue(ready["STATUS"].startswith("reload failed: "), ready)
        self.assertIn("nothing changed", ready["STATUS"])
        self.assertIsNone(daemon.status, daemon.tail())
        await self.stops(daemon)
