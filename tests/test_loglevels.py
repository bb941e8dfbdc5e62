"""
Tests for L{imapmig.log.loglevels}: the daemon writes info and above by
default, debug only when C{IMAPMIG_LOG_LEVEL} asks.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys

import yaml
from twisted.internet import reactor
from twisted.internet.error import ConnectError
from twisted.internet.task import deferLater
from twisted.web.client import Agent, readBody

from twisted.logger import ILogObserver, LogEvent, LogLevel, Logger
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from imapmig.log.loglevels import filtered, levelsFrom, levelsFromEnvironment
from imapmig.testing.corpus import writeEmlDirectory, writeMaildir
from imapmig.testing.dovecot import DovecotUser, requireDovecot
from tests.support import (
    SOURCE_TREE,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    startDaemon,
    writeDaemonConfig,
)


def freePort() -> int:
    """
    A loopback TCP port nothing listens on now.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@implementer(ILogObserver)
class Collected(list[LogEvent]):
    """
    An observer that keeps every event it is given.
    """

    def __call__(self, event: LogEvent) -> None:
        self.append(event)


def written(levels: str, namespace: str, level: LogLevel) -> bool:
    """
    Whether an event of C{level} in C{namespace} gets through the filter
    C{levels} describes.
    """
    seen = Collected()
    Logger(namespace=namespace, observer=filtered(seen, levelsFrom(levels))).emit(level, "x")
    return len(seen) == 1


class LevelsTests(SynchronousTestCase):
    """
    L{levelsFrom} and L{levelsFromEnvironment}.
    """

    def test_default(self) -> None:
        """
        By default info and above are written, debug is not (a status
        request, twisted.web's timing out of a client).
        """
        self.assertFalse(written("", "imapmig.status.resource", LogLevel.debug))
        self.assertFalse(written("", "imapmig.status.quiet.QuietHTTPChannel", LogLevel.debug))
        for level in (LogLevel.info, LogLevel.warn, LogLevel.error, LogLevel.critical):
            self.assertTrue(written("", "imapmig.job.joblog", level))

    def test_debug(self) -> None:
        """
        C{debug} writes everything.
        """
        self.assertTrue(written("debug", "imapmig.status.resource", LogLevel.debug))
        self.assertTrue(written(" DEBUG ", "twisted.web.http", LogLevel.debug))

    def test_namespace(self) -> None:
        """
        A namespace's level covers its children, and only them.
        """
        levels = "warn,imapmig.status=debug"
        self.assertTrue(written(levels, "imapmig.status.resource", LogLevel.debug))
        self.assertFalse(written(levels, "imapmig.job.joblog", LogLevel.info))
        self.assertTrue(written(levels, "imapmig.job.joblog", LogLevel.warn))

    def test_unknown(self) -> None:
        """
        An unknown level is an error naming it and the levels allowed.
        """
        e = self.assertRaises(ValueError, levelsFrom, "info,imapmig.job=verbose")
        self.assertEqual(
            str(e),
            "IMAPMIG_LOG_LEVEL: unknown log level 'verbose' in 'imapmig.job=verbose'"
            " (one of: debug, info, warn, error, critical)",
        )

    def test_environment(self) -> None:
        """
        L{levelsFromEnvironment} reads C{IMAPMIG_LOG_LEVEL}; info without it.
        """
        seen = Collected()
        log = Logger(namespace="a", observer=filtered(seen, levelsFromEnvironment({})))
        log.debug("hidden")
        log.info("shown")
        self.assertEqual([e["log_format"] for e in seen], ["shown"])
        seen.clear()
        levels = levelsFromEnvironment({"IMAPMIG_LOG_LEVEL": "debug"})
        Logger(namespace="a", observer=filtered(seen, levels)).debug("shown")
        self.assertEqual(len(seen), 1)


class DaemonLevelTests(SynchronousTestCase):
    """
    C{imapmig-daemon} and C{IMAPMIG_LOG_LEVEL}.
    """

    def test_badLevelRefused(self) -> None:
        """
        An unknown level makes the daemon exit with the configuration
        error status (2) and say why, before it starts.
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
        done = subprocess.run(
            [sys.executable, "-m", "imapmig.daemon", "--config", path],
            env=dict(sourceTreeEnvironment(), IMAPMIG_LOG_LEVEL="loud"),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=60,
        )
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"IMAPMIG_LOG_LEVEL: unknown log level 'loud'", done.stderr)
        self.assertEqual(done.stdout, b"")

    def test_beginLoggingFilters(self) -> None:
        """
        L{imapmig.daemon.main.beginLogging}'s observer hides debug events by
        default (checked on the observer it builds, not the global one).
        """
        from twisted.logger import textFileLogObserver

        out = io.StringIO()
        observer = filtered(textFileLogObserver(out), levelsFrom(""))
        Logger(namespace="n", observer=observer).debug("hidden line")
        Logger(namespace="n", observer=observer).info("shown line")
        self.assertNotIn("hidden line", out.getvalue())
        self.assertIn("[n#info] shown line", out.getvalue())


class DaemonRunTests(TestCase):
    """
    What C{imapmig-daemon} writes at the default level in a real run: a
    job migrated into Dovecot, its status polled meanwhile.
    """

    async def test_defaultLevel(self) -> None:
        """
        A run writes one start and one end line for its job, nothing at
        debug level (no line per status request), no traceback.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        eml = os.path.join(directory, "eml")
        writeEmlDirectory(eml, 5)
        path = writeDaemonConfig(
            directory,
            user,
            {"eml_dir": eml},
            {"endpoint": f"tcp:127.0.0.1:{instance.port}", "starttls": "off"},
        )
        port = freePort()
        with open(path) as f:
            document = yaml.safe_load(f)
        document["status"] = {"listen": f"tcp:{port}:interface=127.0.0.1"}
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        daemon = startDaemon(
            self, reactor, path, [sys.executable, "-m", "imapmig.daemon", "--config", path]
        )
        url = f"http://127.0.0.1:{port}/status.json".encode()
        agent = Agent(reactor)
        state = None
        for _ in range(300):
            await deferLater(reactor, 0.1, lambda: None)
            try:
                response = await agent.request(b"GET", url)
                body = await readBody(response)
            except ConnectError:
                continue
            state = json.loads(body)["jobs"][0]["state"]
            if state == "done":
                break
        self.assertEqual(state, "done", daemon.tail())
        os.kill(daemon.pid, signal.SIGTERM)
        status = await daemon.exited(reactor, 60)
        self.assertEqual(status, 0, daemon.tail())
        output = bytes(daemon.output).decode("utf-8", "replace")
        self.assertNotIn("#debug]", output)
        self.assertNotIn("Status request", output)
        self.assertNotIn("Traceback", output)
        self.assertEqual(output.count("Job job started: "), 1, output)
        self.assertEqual(output.count("Job job done after "), 1, output)
        self.assertIn("5 copied", output)
