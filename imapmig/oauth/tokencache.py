# -*- test-case-name: tests.test_tokencache -*-
"""
An account's access token obtained with the refresh grant, cached and
shared: every session of the account (of every job, in this process)
logs in with the same token until it nears its expiry, and at most one
refresh is in flight.

The refresh token is read from its file at the first refresh; a rotated
one (the endpoint sent a new C{refresh_token}) replaces the file
atomically (a new file of mode 0600 renamed over it), so that a restart
uses the newest, and is kept in memory for the next refresh even when
the file cannot be written.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.errors import AuthenticationFailed, PasswordFileError
from imapmig.access.secrets import readPasswordFile
from imapmig.oauth.tokenrefresh import IssuedToken


log = Logger()

RENEWAL_MARGIN = 60.0
"""
At most this many seconds before its expiry a cached token is renewed.
"""

RENEWAL_FRACTION = 0.1
"""
And at most this fraction of its lifetime before: a short-lived token is
renewed at 90% of its life, not 60 s before it was issued.
"""


class RefreshGrant(Protocol):
    """
    What runs the refresh grant (L{imapmig.oauth.tokenrefresh.RefreshGrantClient}).

    @ivar endpoint: the endpoint's URL for messages (no query).
    """

    endpoint: str

    def refresh(self, refreshToken: str) -> Deferred[IssuedToken]:
        """
        Exchange C{refreshToken} for an access token.
        """


def replaceSecretFile(path: str, value: str) -> None:
    """
    Replace the file at C{path} with one holding C{value} and a line end,
    mode 0600, atomically: a new file in the same directory, flushed to
    disk, renamed over the old one, and the directory flushed.

    @raise OSError: it could not be written; the old file is untouched.
    """
    directory = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(prefix=".imapmig-", dir=directory)
    try:
        # mkstemp creates it 0600; fchmod makes sure whatever the umask.
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(value.encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    directoryFd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directoryFd)
    finally:
        os.close(directoryFd)


class RefreshedTokens:
    """
    The access token of one account, from the refresh grant: cached,
    renewed before it expires, shared by concurrent logins.
    """

    def __init__(
        self,
        grant: RefreshGrant,
        refreshTokenFile: str,
        clock: Any,
        account: str,
    ) -> None:
        """
        @param grant: runs the refresh grant.
        @param refreshTokenFile: the file holding the refresh token.
        @param clock: an L{IReactorTime}.
        @param account: names the account in logs and errors.
        """
        self._grant = grant
        self._file = refreshTokenFile
        self._clock = clock
        self._account = account
        self._refreshToken: str | None = None
        self._token: str | None = None
        # When the cached token is to be renewed; None: until refused.
        self._renewAt: float | None = None
        self._waiters: list[Deferred[str]] = []
        self._refreshing: Deferred[str] | None = None

    def current(self) -> Deferred[str]:
        """
        The access token to log in with: the cached one while it is fresh,
        else a new one (one refresh for every caller waiting meanwhile).

        @return: fires with the token, or fails with
            L{imapmig.oauth.tokenrefresh.TokenRefreshRefused} (permanent),
            L{imapmig.oauth.tokenrefresh.TokenEndpointUnavailable} (transient)
            or L{AuthenticationFailed} (the refresh token file cannot be
            read).  Cancelling it leaves the refresh running for others.
        """
        if self._token is not None and self._fresh():
            return succeed(self._token)
        waiter: Deferred[str] = Deferred(self._waiters.remove)
        self._waiters.append(waiter)
        if self._refreshing is None:
            refreshing = Deferred.fromCoroutine(self._refresh())
            self._refreshing = refreshing
            refreshing.addBoth(self._settle)
        return waiter

    def _fresh(self) -> bool:
        """
        Whether the cached token is not yet to be renewed.
        """
        return self._renewAt is None or self._clock.seconds() < self._renewAt

    def useGrant(self, grant: RefreshGrant) -> None:
        """
        Refresh with C{grant} from the next refresh on (a reload changed
        the client's settings: its secret, its id, the endpoint).  The
        refresh token and the access token cached stay: one source still
        spends and rotates the file's refresh token.
        """
        self._grant = grant

    def invalidate(self, token: str) -> None:
        """
        Forget C{token}, which a server refused: the next L{current}
        refreshes.  A token already replaced is left alone, so that one
        refused login among many does not cause a refresh per login.
        """
        if token == self._token:
            self._token = None
            self._renewAt = None

    def _settle(self, result: str | Failure) -> None:
        self._refreshing = None
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)

    async def _refresh(self) -> str:
        refreshToken = self._refreshToken
        if refreshToken is None:
            refreshToken = self._readRefreshToken()
        issuedAt = self._clock.seconds()
        issued = await self._grant.refresh(refreshToken)
        rotated = issued.refreshToken not in (None, refreshToken)
        self._refreshToken = issued.refreshToken if rotated else refreshToken
        if rotated:
            assert issued.refreshToken is not None
            self._storeRotated(issued.refreshToken)
        self._token = issued.accessToken
        self._renewAt = _renewAt(issuedAt, issued.expiresIn)
        log.info(
            "{account}: access token obtained from {endpoint}"
            " (valid {lifetime} s, refresh token {rotation})",
            account=self._account,
            endpoint=self._grant.endpoint,
            lifetime=_lifetimeText(issued.expiresIn),
            rotation="rotated" if rotated else "kept",
        )
        return issued.accessToken

    def _readRefreshToken(self) -> str:
        """
        The refresh token in the file, read once (then kept, or replaced
        by a rotated one).

        @raise AuthenticationFailed: the file cannot be read.
        """
        try:
            return readPasswordFile(self._file, "refresh token").strip()
        except PasswordFileError as e:
            raise AuthenticationFailed(f"{self._account}: {e}") from None

    def _storeRotated(self, refreshToken: str) -> None:
        try:
            replaceSecretFile(self._file, refreshToken)
        except OSError as e:
            # The new refresh token is still used from memory; a restart
            # would read the old one, which the endpoint may refuse.
            log.error(
                "{account}: cannot store the rotated refresh token in {file}:"
                " {reason}; a restart will use the old one",
                account=self._account,
                file=self._file,
                reason=e.strerror or str(e),
            )


def _lifetimeText(lifetime: float | None) -> str:
    """
    A token's lifetime in seconds, for a log line (C{?} if unknown).
    """
    return "?" if lifetime is None else f"{lifetime:g}"


def _renewAt(issuedAt: float, lifetime: float | None) -> float | None:
    """
    When a token issued at C{issuedAt} for C{lifetime} seconds is to be
    renewed: a margin before it expires (L{RENEWAL_MARGIN}, or
    L{RENEWAL_FRACTION} of a short lifetime); L{None} (until refused)
    without a lifetime.
    """
    if lifetime is None:
        return None
    return issuedAt + lifetime - min(RENEWAL_MARGIN, lifetime * RENEWAL_FRACTION)
