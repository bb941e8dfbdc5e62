# -*- test-case-name: tests.test_tokens -*-
"""
OAuth 2.0 access tokens, obtained afresh at each login from where the
configuration says: a file that an external refresher rewrites, or a
command that prints one.  A job that reconnects therefore logs in with
the current token without restarting.  (imapmig does not itself run the
RFC 6749 refresh grant against a token endpoint.)

No token, and no command output beyond a short escaped excerpt of its
standard error, appears in an error or a log.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from imapmig.config.model import TokenCommandConfig, TokenFileConfig, TokenSourceConfig
from imapmig.errors import AuthenticationFailed
from imapmig.secrets import PasswordFileError, readPasswordFile


MAX_TOKEN_OUTPUT = 64 * 1024
"""
The most a token command may print on its standard output, in octets.
"""

_STDERR_EXCERPT = 80


class TokenUnavailable(AuthenticationFailed):
    """
    No access token could be obtained: the file cannot be used, or the
    command failed.  Permanent, as a refused login is.
    """


async def obtainToken(source: TokenSourceConfig, reactor: Any) -> str:
    """
    The current access token from C{source}.

    @param reactor: an L{IReactorProcess} and L{IReactorTime}, for a
        command.
    @raise TokenUnavailable: with what went wrong, never the token.
    """
    if isinstance(source, TokenFileConfig):
        try:
            return readPasswordFile(source.path, "token").strip()
        except PasswordFileError as e:
            raise TokenUnavailable(str(e)) from None
    return await runTokenCommand(source, reactor)


def runTokenCommand(command: TokenCommandConfig, reactor: Any) -> Deferred[str]:
    """
    Run C{command} (no shell; the daemon's environment) and read the token
    from the first line of its standard output.

    @return: fires with the token, or fails with L{TokenUnavailable} when
        the command exits non-zero, is killed, runs longer than its
        timeout (it is then killed), prints more than
        L{MAX_TOKEN_OUTPUT} octets, or prints an empty first line.
    """
    protocol = _TokenCommandProtocol(command, reactor)
    reactor.spawnProcess(
        protocol,
        command.executable,
        list(command.argv),
        env=dict(os.environ),
    )
    return protocol.done


def _excerpt(data: bytes) -> str:
    """
    A short escaped excerpt of C{data}.
    """
    text = repr(data[:_STDERR_EXCERPT].strip())[2:-1]
    return text + ("..." if len(data) > _STDERR_EXCERPT else "")


class _TokenCommandProtocol(ProcessProtocol):
    """
    Collects a token command's output, bounded, and kills it at its
    timeout.
    """

    def __init__(self, command: TokenCommandConfig, clock: Any) -> None:
        self._command = command
        self._name = " ".join(command.argv)
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._problem: str | None = None
        self.done: Deferred[str] = Deferred()
        self._timer = clock.callLater(command.timeout, self._expired)

    def outReceived(self, data: bytes) -> None:
        self._stdout += data
        if len(self._stdout) > MAX_TOKEN_OUTPUT:
            self._kill(f"printed more than {MAX_TOKEN_OUTPUT} octets")

    def errReceived(self, data: bytes) -> None:
        if len(self._stderr) <= _STDERR_EXCERPT:
            self._stderr += data[: _STDERR_EXCERPT + 1]

    def _expired(self) -> None:
        self._timer = None
        self._kill(f"did not finish within {self._command.timeout:g} s")

    def _kill(self, problem: str) -> None:
        if self._problem is None:
            self._problem = problem
            assert self.transport is not None
            try:
                self.transport.signalProcess("KILL")
            except Exception:
                # It exited meanwhile: processEnded follows.
                pass

    def processEnded(self, reason: Failure) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        problem = self._problem
        if problem is None and not reason.check(ProcessDone):
            exitCode = getattr(reason.value, "exitCode", None)
            signal = getattr(reason.value, "signal", None)
            problem = (
                f"exited with status {exitCode}"
                if exitCode is not None
                else f"was killed by signal {signal}"
            )
        token = b""
        if problem is None:
            token = bytes(self._stdout).split(b"\n", 1)[0].strip()
            if not token:
                problem = "printed no token (its first line of output is empty)"
        if problem is not None:
            said = f" (stderr: {_excerpt(bytes(self._stderr))})" if self._stderr else ""
            self.done.errback(
                TokenUnavailable(f"token command {self._name!r} {problem}{said}")
            )
            return
        if not token.isascii():
            self.done.errback(
                TokenUnavailable(f"token command {self._name!r} printed a non-ASCII token")
            )
            return
        self.done.callback(token.decode("ascii"))
