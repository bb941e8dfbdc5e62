# -*- test-case-name: tests.test_connectcheck -*-
"""
C{--check-config --connect}: every configured server tried once, before
any job runs, each reported ok or failed with the setting to look at.

Nothing else could do it: C{imapmig plan} connects only for the jobs it
plans, and lists their folders; a job connects only when the queue
reaches it, and then backs off for minutes.  The connection itself is the
jobs' own (L{imapmig.daemon.service.serverEndpoint},
L{imapmig.imap.opening.openSession}): the same endpoint, TLS and timeout.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence, TextIO

from attrs import frozen
from twisted.internet.defer import Deferred, gatherResults

from imapmig.config import Config
from imapmig.config.model import AccountConfig, ImapSourceConfig, ServerConfig
from imapmig.errors import (
    AuthenticationFailed,
    ConnectFailed,
    ImapmigError,
    TLSFailed,
    TLSRequired,
)
from imapmig.imap.auth import AdminLogin, Credentials, PasswordLogin

__all__ = ["CONNECT_TIMEOUT", "ServerCheck", "checkServers", "writeChecks"]

CONNECT_TIMEOUT = 30.0
"""
The longest a check waits at each step (a server's C{timeout} when
shorter): a firewall that drops the connection is reported in 30 s, not
the 120 s a job waits.
"""


@frozen
class ServerCheck:
    """
    What trying one server found.

    @ivar server: its name under C{servers}.
    @ivar endpoint: its endpoint string.
    @ivar ok: whether every step worked.
    @ivar steps: what was done, in order (C{"connected"}, C{"STARTTLS"},
        C{"LOGIN as dest1"}).
    @ivar problem: why it failed, naming the setting to look at; L{None}
        when it did not.
    """

    server: str
    endpoint: str
    ok: bool
    steps: tuple[str, ...]
    problem: str | None = None


def _accountFor(server: ServerConfig, config: Config) -> AccountConfig | None:
    """
    The first account of C{server} a job logs in to with a password
    (its own or an admin's), or L{None} (none, or only OAuth 2.0 tokens,
    which a check does not fetch).
    """
    for account in _accounts(config):
        if account.server == server and account.password is not None:
            return account
    return None


def _accounts(config: Config) -> Iterator[AccountConfig]:
    """
    The IMAP accounts of C{config}'s jobs, in order: each job's source
    (if IMAP), then its destination.
    """
    for job in config.jobs:
        if isinstance(job.source, ImapSourceConfig):
            yield job.source
        yield job.destination


def _credentials(account: AccountConfig) -> Credentials:
    assert account.password is not None
    if account.admin is not None:
        return AdminLogin(account.user, account.admin, account.password.value)
    return PasswordLogin(account.user, account.password.value)


def _steps(server: ServerConfig, account: AccountConfig | None) -> tuple[str, ...]:
    opened = ("connected", "TLS", "greeting") if server.implicitTLS else ("connected", "greeting")
    starttls = ("STARTTLS",) if server.starttls else ()
    login = ("no LOGIN (no password to try)",) if account is None else (
        f"LOGIN as {account.user}" + (f" (admin {account.admin})" if account.admin else ""),
    )
    return (*opened, *starttls, *login)


def _problem(server: ServerConfig, error: ImapmigError, description: str) -> str:
    """
    What failed, and the setting that decides it.

    @param description: how the error's text names the server, left out.
    """
    key = f"servers.{server.name}"
    text = str(error).removeprefix(f"{description}: ")
    if isinstance(error, ConnectFailed):
        return f"{error.why}; check {key}.endpoint"
    if isinstance(error, TLSRequired):
        return f"{text}; check {key}.starttls and {key}.endpoint"
    if isinstance(error, TLSFailed):
        return f"{text}; check {key}.tls_ca, {key}.tls_hostname and {key}.endpoint"
    if isinstance(error, AuthenticationFailed):
        # A refused login names the credential's key itself.
        return text
    return f"{text}; check {key}.endpoint"


async def checkServer(reactor: Any, server: ServerConfig, config: Config) -> ServerCheck:
    """
    Connect to C{server} as its jobs do (TLS as configured), wait for the
    greeting, log in with the first password one of its jobs uses (none:
    no login), and log out.

    @param reactor: connects, and times each step.
    """
    from imapmig.imap.opening import openSession
    from imapmig.daemon.service import serverEndpoint

    account = _accountFor(server, config)
    description, credentials, credentialKey = server.endpoint, None, None
    if account is not None:
        description = f"{account.user} at {server.endpoint}"
        credentials, credentialKey = _credentials(account), account.credentialKey
    try:
        endpoint, tlsOptions = serverEndpoint(reactor, server)
        session = await openSession(
            endpoint,
            reactor,
            description=description,
            credentials=credentials,
            starttls=server.starttls,
            tlsOptions=tlsOptions,
            timeout=_timeout(server),
            endpointKey=f"servers.{server.name}.endpoint",
            credentialKey=credentialKey,
            logIn=account is not None,
        )
    except ImapmigError as e:
        return ServerCheck(
            server.name, server.endpoint, False, (), _problem(server, e, description)
        )
    try:
        await session.logout()
    except ImapmigError:
        session.abort()
    return ServerCheck(server.name, server.endpoint, True, _steps(server, account))


def _timeout(server: ServerConfig) -> float:
    """
    How long a check waits at each step: L{CONNECT_TIMEOUT}, or the
    server's C{timeout} when shorter.
    """
    return min(server.timeout, CONNECT_TIMEOUT) if server.timeout > 0 else CONNECT_TIMEOUT


def checkServers(reactor: Any, config: Config) -> Deferred[list[ServerCheck]]:
    """
    Try every server of C{config} at once (L{checkServer}).
    """
    return gatherResults(
        [Deferred.fromCoroutine(checkServer(reactor, server, config)) for server in config.servers]
    )


def writeChecks(checks: Sequence[ServerCheck], out: TextIO) -> bool:
    """
    Write one line per server: C{servers.NAME (ENDPOINT): ok: ...} or
    C{...: failed: ...}.

    @return: whether every server is ok.
    """
    for check in checks:
        where = f"servers.{check.server} ({check.endpoint})"
        if check.ok:
            out.write(f"{where}: ok: {', '.join(check.steps)}, LOGOUT\n")
        else:
            out.write(f"{where}: failed: {check.problem}\n")
    return all(check.ok for check in checks)
