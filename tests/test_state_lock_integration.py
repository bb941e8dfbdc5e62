# -*- test-case-name: tests.test_state_lock_integration -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Integration tests of the state database's lock: two real daemons, the
first migrating into a private Dovecot, the second started on a
configuration whose C{state:} reaches the first's database through another
name (a symbolic link, a hard link) or after the first's old lock file was
removed.  The second must be refused, naming the first, and the account
must hold every message exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from datetime import datetime, timezone
from typing import Any, Callable

from twisted.internet import reactor as _globalReactor
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.support import (
    daemonCommand,
    deliveries,
    freshUser,
    newDirectory,
    plainServer,
    sharedDovecot,
    startDaemon,
    twistdCommand,
    writeDaemonConfig,
)
from tests.test_daemon_reload import waitForLine

# These tests run the daemon for real, on the global reactor.
reactor: Any = _globalReactor

# Generous: the suite runs beside other work on two shared cores.
DEADLINE = 120.0

MESSAGES = 40
# The first daemon copies at this rate, so that it is still copying when
# the second starts (which the test does not depend on: the first serves
# on after its job is done, until it is stopped).
RATE = 10


class SecondDaemonTests(TestCase):
    """
    A second daemon reaching a running daemon's state database through
    any name is refused at start, with exit status 2 and one line naming
    the first's pid, host and start time.
    """

    # Each test may wait for two daemons, each for up to DEADLINE.
    timeout = 3 * DEADLINE

    async def refusedBeside(
        self, alias: Callable[[str, str], str], launcher: bool = False
    ) -> None:
        """
        Start a daemon migrating a Maildir into a fresh account; once its
        job has started, make C{alias(firstDirectory, secondDirectory)}
        name its database and start a second daemon on a configuration
        naming the same account whose C{state:} is that name; check that
        the second is refused, then that the first copies every message
        exactly once and stops cleanly.

        @param alias: makes the second configuration, returning its path.
        @param launcher: run the second with C{python -m imapmig.daemon}
            rather than C{twistd -n imapmig}.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        first = newDirectory(self)
        maildir = os.path.join(first, "Maildir")
        corpus = writeMaildir(maildir, MESSAGES, seed=27, folders=(("INBOX",),), profile="small")
        server = {**plainServer(instance), "per_account": {"messages_per_second": RATE}}
        firstConfig = writeDaemonConfig(first, user, {"maildir": maildir}, server, connections=1)
        before = time.time()
        daemon = startDaemon(self, reactor, firstConfig, daemonCommand(firstConfig))
        await waitForLine(daemon, r"Job job started")
        after = time.time()

        secondConfig = alias(first, firstConfig)
        with open(secondConfig) as f:
            secondState = re.search(r"^state: (.*)$", f.read(), re.M)
        assert secondState is not None
        command = (
            daemonCommand(secondConfig, "--exit-when-done")
            if launcher
            else twistdCommand(secondConfig)
        )
        second = startDaemon(self, reactor, secondConfig, command)
        self.assertEqual(await second.exited(reactor, DEADLINE), 2, second.tail())
        lines = bytes(second.output).decode("utf-8", "replace").splitlines()
        self.assertEqual(len(lines), 1, lines)
        refusal = re.fullmatch(
            re.escape(secondState.group(1)) + r" is in use by another imapmig"
            r" \(pid (\d+) on host (.*), since (.*) UTC\); one daemon per state database",
            lines[0],
        )
        self.assertIsNotNone(refusal, lines[0])
        assert refusal is not None
        self.assertEqual(
            (int(refusal.group(1)), refusal.group(2)), (daemon.pid, socket.gethostname())
        )
        since = datetime.strptime(refusal.group(3), "%Y-%m-%d %H:%M:%S")
        since = since.replace(tzinfo=timezone.utc)
        self.assertTrue(int(before) <= since.timestamp() <= after, (before, since, after))

        await waitForLine(daemon, r"Job job done after")
        os.kill(daemon.pid, signal.SIGTERM)
        self.assertEqual(await daemon.exited(reactor, DEADLINE), 0, daemon.tail())
        held = deliveries(instance.fetchAll(user.name), corpus.messages)
        self.assertTrue(held.exactlyOnce, held.summary())

    def secondConfig(self, first: str, link: Callable[[str, str], None]) -> str:
        """
        Write, in a new directory, the configuration of the same job as
        the one in C{first}, its C{state:} in that directory made by
        C{link(firstDatabase, secondDatabase)}.
        """
        second = newDirectory(self)
        link(os.path.join(first, "state.sqlite"), os.path.join(second, "state.sqlite"))
        with open(os.path.join(first, "imapmig.yaml")) as f:
            text = f.read()
        path = os.path.join(second, "imapmig.yaml")
        moved = text.replace(f"state: {first}/", f"state: {second}/")
        self.assertNotEqual(moved, text)
        with open(path, "w") as f:
            f.write(moved)
        return path

    async def test_symbolicLink(self) -> None:
        """
        C{state:} a symbolic link to the running daemon's database:
        refused (C{twistd -n imapmig}).
        """
        await self.refusedBeside(lambda first, _: self.secondConfig(first, os.symlink))

    async def test_hardLink(self) -> None:
        """
        C{state:} a hard link to the running daemon's database: refused
        (C{imapmig-daemon}).
        """
        await self.refusedBeside(lambda first, _: self.secondConfig(first, os.link), launcher=True)

    async def test_removedLockFile(self) -> None:
        """
        The same configuration again, after C{<state>.lock} (what an
        earlier imapmig locked) was removed under the running daemon:
        refused.
        """

        def removeLockFile(first: str, config: str) -> str:
            lockFile = os.path.join(first, "state.sqlite.lock")
            if os.path.exists(lockFile):
                os.unlink(lockFile)
            return config

        await self.refusedBeside(removeLockFile)
