"""
Tests for L{imapmig.oauth.tokens}: access tokens from a file or a command.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from twisted.internet import reactor as globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.config.model import TokenCommandConfig, TokenFileConfig
from imapmig.errors import (
    AuthenticationFailed,
    TokenCommandTimedOut,
    TokenUnavailable,
    TransientError,
)
from imapmig.oauth.tokens import obtainToken, runTokenCommand
from tests.test_config import writeFile


class _FakeProcess:
    """
    The transport of a process that never runs: records signals.
    """

    def __init__(self) -> None:
        self.signals: list[str] = []

    def signalProcess(self, signal: str) -> None:
        self.signals.append(signal)


class _ProcessClock(Clock):
    """
    A clock that records spawned processes instead of running them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[Any, str, list[str]]] = []
        self.process = _FakeProcess()

    def spawnProcess(self, protocol: Any, executable: str, args: list[str], env: Any) -> Any:
        self.spawned.append((protocol, executable, args))
        protocol.makeConnection(self.process)
        return self.process


COMMAND = TokenCommandConfig(("get-token", "--user", "alice"), "/usr/bin/get-token", 30.0)


class TokenCommandClockTests(SynchronousTestCase):
    """
    The command's output, exit and timeout, on a L{Clock}.
    """

    def test_firstLine(self) -> None:
        """
        The token is the first line of standard output; the command is run
        by its absolute path with its argument vector, and the timeout is
        cancelled.
        """
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        ((protocol, executable, args),) = clock.spawned
        self.assertEqual((executable, args), ("/usr/bin/get-token", list(COMMAND.argv)))
        protocol.outReceived(b"tok")
        protocol.outReceived(b"en\r\nsecond line\n")
        protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d), "token")
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_exitStatus(self) -> None:
        """
        A command that exits non-zero gives no token, whatever it printed.
        """
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        clock.spawned[0][0].outReceived(b"token\n")
        clock.spawned[0][0].processEnded(Failure(ProcessTerminated(exitCode=1)))
        self.assertIn("exited with status 1", str(self.failureResultOf(d, TokenUnavailable).value))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_timeout(self) -> None:
        """
        A command still running at its timeout is killed, and obtaining
        the token fails transiently (the job retries later), naming the
        command and the timeout.
        """
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        protocol = clock.spawned[0][0]
        clock.advance(29.9)
        self.assertEqual(clock.process.signals, [])
        clock.advance(0.1)
        self.assertEqual(clock.process.signals, ["KILL"])
        self.assertNoResult(d)
        protocol.processEnded(Failure(ProcessTerminated(signal=9)))
        error = self.failureResultOf(d, TokenCommandTimedOut).value
        self.assertIsInstance(error, TransientError)
        self.assertNotIsInstance(error, AuthenticationFailed)
        self.assertIn("token command 'get-token --user alice'", str(error))
        self.assertIn("did not finish within 30 s", str(error))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_failureExcerpt(self) -> None:
        """
        A non-zero exit names the command and status, with a short escaped
        excerpt of standard error and nothing of standard output.
        """
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        protocol = clock.spawned[0][0]
        protocol.outReceived(b"half-a-token")
        protocol.errReceived(b"refresh failed\n\x1b[31m" + b"e" * 500)
        protocol.processEnded(Failure(ProcessTerminated(exitCode=2)))
        message = str(self.failureResultOf(d, TokenUnavailable).value)
        self.assertIn("exited with status 2", message)
        self.assertIn("refresh failed\\n\\x1b[31m", message)
        self.assertNotIn("half-a-token", message)
        self.assertLess(len(message), 250)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_emptyOrHugeOutput(self) -> None:
        """
        An empty first line, and output beyond the limit (the command is
        killed), are failures.
        """
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        clock.spawned[0][0].outReceived(b"\nlater\n")
        clock.spawned[0][0].processEnded(Failure(ProcessDone(0)))
        self.assertIn("printed no token", str(self.failureResultOf(d).value))
        clock = _ProcessClock()
        d = runTokenCommand(COMMAND, clock)
        clock.spawned[0][0].outReceived(b"x" * (64 * 1024 + 1))
        self.assertEqual(clock.process.signals, ["KILL"])
        clock.spawned[0][0].processEnded(Failure(ProcessTerminated(signal=9)))
        self.assertIn("printed more than", str(self.failureResultOf(d).value))
        self.assertEqual(clock.getDelayedCalls(), [])


class TokenFileTests(SynchronousTestCase):
    """
    A token file is read at each call, so a rewritten file gives the new
    token.
    """

    def test_reReadEachTime(self) -> None:
        """
        Each call reads the file again; a file others may read is refused
        without its content.
        """
        path = writeFile(self.mktemp(), "first-token\n")
        source = TokenFileConfig(path)
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(obtainToken(source, None))), "first-token")
        writeFile(path, "second-token\n")
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(obtainToken(source, None))), "second-token")
        os.chmod(path, 0o644)
        failure = self.failureResultOf(Deferred.fromCoroutine(obtainToken(source, None)), TokenUnavailable)
        self.assertIn(f"token file {path} is accessible", str(failure.value))
        self.assertNotIn("second-token", str(failure.value))


class TokenCommandProcessTests(TestCase):
    """
    A real command (a tiny Python script) run through the reactor.
    """

    def command(self, script: str, timeout: float = 30.0) -> TokenCommandConfig:
        return TokenCommandConfig((sys.executable, "-c", script), sys.executable, timeout)

    async def test_success(self) -> None:
        """
        The script's first line of output is the token.
        """
        token = await runTokenCommand(
            self.command("print('eyJ-token'); print('more')"), globalReactor
        )
        self.assertEqual(token, "eyJ-token")

    async def test_failure(self) -> None:
        """
        A non-zero exit fails with the status and standard error's excerpt.
        """
        with self.assertRaises(TokenUnavailable) as caught:
            await runTokenCommand(
                self.command("import sys; print('stdout' + '-secret'); sys.stderr.write('no refresh token'); sys.exit(3)"),
                globalReactor,
            )
        message = str(caught.exception)
        self.assertIn("exited with status 3", message)
        self.assertIn("no refresh token", message)
        self.assertNotIn("stdout-secret", message)

    async def test_timeout(self) -> None:
        """
        A script that outlives its timeout is killed.
        """
        with self.assertRaises(TokenCommandTimedOut) as caught:
            await runTokenCommand(
                self.command("import time; time.sleep(30)", timeout=0.5), globalReactor
            )
        self.assertIn("did not finish within 0.5 s", str(caught.exception))
