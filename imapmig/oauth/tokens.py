# -*- test-case-name: tests.test_tokens -*-
"""
OAuth 2.0 access tokens, from where the configuration says: a file that
an external refresher rewrites or a command that prints one (both read
afresh at each login, so a job that reconnects logs in with the current
token without restarting), or a token endpoint that imapmig asks itself
with a refresh token (RFC 6749 refresh grant; cached and renewed,
L{imapmig.oauth.tokencache}).

L{TokenSources} gives each account its L{AccessTokenSource}, one per
refresh token file in the process; L{loginWithToken} logs in with a
source's token and, when the server refuses it, obtains another and tries
once more.

No token, and no command output beyond a short escaped excerpt of its
standard error, appears in an error or a log.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol, TypeVar

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.internet.error import ProcessDone
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from imapmig.config.model import (
    TokenCommandConfig,
    TokenFileConfig,
    TokenRefreshConfig,
    TokenSourceConfig,
)
from imapmig.errors import (
    CredentialsRefused,
    PasswordFileError,
    TokenCommandTimedOut,
    TokenUnavailable,
)
from imapmig.log.logfields import withFields
from imapmig.access.secrets import readPasswordFile

if TYPE_CHECKING:
    from imapmig.oauth.tokencache import RefreshedTokens


MAX_TOKEN_OUTPUT = 64 * 1024
"""
The most a token command may print on its standard output, in octets.
"""

_STDERR_EXCERPT = 80


log = Logger()

T = TypeVar("T")




async def obtainToken(
    source: TokenFileConfig | TokenCommandConfig, reactor: Any
) -> str:
    """
    The current access token from C{source}.

    @param reactor: an L{IReactorProcess} and L{IReactorTime}, for a
        command.
    @raise TokenUnavailable: with what went wrong, never the token.
    @raise TokenCommandTimedOut: the command ran past its timeout.
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
        the command exits non-zero, is killed, prints more than
        L{MAX_TOKEN_OUTPUT} octets, or prints an empty first line, and
        with L{TokenCommandTimedOut} when it runs longer than its timeout
        (it is then killed).
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
        self._timedOut = False
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
        self._timedOut = self._problem is None
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
        self._stopTimer()
        problem = self._problem or _exitProblem(reason)
        token = self._firstLine() if problem is None else problem
        if isinstance(token, str):
            self._fail(token)
        elif not token.isascii():
            self.done.errback(
                TokenUnavailable(f"token command {self._name!r} printed a non-ASCII token")
            )
        else:
            self.done.callback(token.decode("ascii"))

    def _stopTimer(self) -> None:
        """
        Cancel the timeout, if it is still to come.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _firstLine(self) -> bytes | str:
        """
        The token: the first line of the command's output, stripped; or
        the problem that it is empty.
        """
        token = bytes(self._stdout).split(b"\n", 1)[0].strip()
        return token or "printed no token (its first line of output is empty)"

    def _fail(self, problem: str) -> None:
        """
        Fail with C{problem} and the start of the command's standard error:
        L{TokenCommandTimedOut} if it ran past its timeout, else
        L{TokenUnavailable}.
        """
        said = f" (stderr: {_excerpt(bytes(self._stderr))})" if self._stderr else ""
        kind = TokenCommandTimedOut if self._timedOut else TokenUnavailable
        self.done.errback(kind(f"token command {self._name!r} {problem}{said}"))


def _exitProblem(reason: Failure) -> str | None:
    """
    What was wrong with how the command ended, or L{None} if it exited
    with status 0.
    """
    if reason.check(ProcessDone):
        return None
    exitCode = getattr(reason.value, "exitCode", None)
    if exitCode is not None:
        return f"exited with status {exitCode}"
    return f"was killed by signal {getattr(reason.value, 'signal', None)}"


class AccessTokenSource(Protocol):
    """
    Where an account's access token comes from, at each login.
    """

    def current(self) -> Deferred[str]:
        """
        The token to log in with now.

        @return: fires with it, or fails with an L{AuthenticationFailed}
            (permanent) or a L{TransientError}.
        """

    def invalidate(self, token: str) -> None:
        """
        C{token} was refused by a server: do not give it again.
        """


class ObtainedEachTime:
    """
    A token file or command, read or run afresh at every L{current}.
    """

    def __init__(
        self, source: TokenFileConfig | TokenCommandConfig, reactor: Any, account: str
    ) -> None:
        """
        @param reactor: an L{IReactorProcess} and L{IReactorTime}.
        @param account: names the account in errors.
        """
        self._source = source
        self._reactor = reactor
        self._account = account

    def current(self) -> Deferred[str]:
        """
        The token the file holds or the command prints now.

        @return: fires with it, or fails with L{TokenUnavailable} or
            L{TokenCommandTimedOut}, naming the account.
        """
        return Deferred.fromCoroutine(self._obtain())

    async def _obtain(self) -> str:
        try:
            return await obtainToken(self._source, self._reactor)
        except TokenCommandTimedOut as e:
            raise TokenCommandTimedOut(f"{self._account}: {e}") from None
        except TokenUnavailable as e:
            raise TokenUnavailable(f"{self._account}: {e}") from None

    def invalidate(self, token: str) -> None:
        """
        Nothing is cached: the next L{current} reads or runs again.
        """


class TokenSources:
    """
    The token source of each account of one daemon: file and command
    sources each time anew, and one cached refresh-grant source per
    refresh token file, shared by every session and job that uses it (two
    would each spend, and rotate, the same refresh token).
    """

    def __init__(self, reactor: Any) -> None:
        """
        @param reactor: an L{IReactorProcess}, L{IReactorTCP} and
            L{IReactorTime}.
        """
        self._reactor = reactor
        # The shared source of each refresh token file, and the settings
        # its grant was made with.
        self._refreshed: dict[str, tuple[TokenRefreshConfig, RefreshedTokens]] = {}

    def sourceFor(self, config: TokenSourceConfig, account: str) -> AccessTokenSource:
        """
        The source of C{config}.

        @param account: names the account in logs and errors (C{"alice at
            tcp:imap.example.com:993"}); for a shared source, that of the
            first account that asked.
        """
        if not isinstance(config, TokenRefreshConfig):
            return ObtainedEachTime(config, self._reactor, account)
        known = self._refreshed.get(config.refreshTokenFile)
        if known is not None and known[0] == config:
            return known[1]
        # Imported here: twisted.web costs start-up time that a daemon
        # without a token endpoint need not pay.
        from imapmig.oauth.tokencache import RefreshedTokens
        from imapmig.oauth.tokenrefresh import RefreshGrantClient, agentFor

        client = RefreshGrantClient(config, agentFor(config, self._reactor), self._reactor, account)
        if known is None:
            shared = RefreshedTokens(client, config.refreshTokenFile, self._reactor, account)
        else:
            # A reload changed the client's settings (a rotated client
            # secret): the one source of the file refreshes with them now.
            shared = known[1]
            shared.useGrant(client)
        self._refreshed[config.refreshTokenFile] = (config, shared)
        return shared


async def loginWithToken(
    tokens: AccessTokenSource,
    logIn: Callable[[str], Awaitable[T]],
    account: str,
    logFields: Mapping[str, object] | None = None,
) -> T:
    """
    Log in with the current token of C{tokens}; when the server refuses
    it (L{CredentialsRefused}: revoked, or expired sooner than said),
    invalidate it, obtain another and log in once more.  A second refusal
    is final; so is the first when the token obtained again is the one
    refused (a token file or command that still gives it): it is not
    tried twice.

    @param logIn: opens a session with the token it is given.
    @param account: names the account in the log.
    @param logFields: fields its log event carries (the job it logs in
        for: C{{"job": "alice"}}; L{imapmig.log.logfields}).
    @return: what C{logIn} returned.
    """
    token = await tokens.current()
    try:
        return await logIn(token)
    except CredentialsRefused as e:
        refused = e
        tokens.invalidate(token)
    again = await tokens.current()
    if again == token:
        raise refused
    withFields(log, logFields or {}).info(
        "{account}: the server refused the access token; logging in again with"
        " a new one",
        account=account,
    )
    return await logIn(again)
