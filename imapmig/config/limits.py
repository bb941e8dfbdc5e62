# -*- test-case-name: tests.test_config_limits -*-
"""
Limits: how many jobs run at once (C{max_jobs}), and how many connections
a server (C{servers.NAME.max_connections}) and each of its accounts
(C{servers.NAME.per_account.max_connections}) accept from imapmig, shared
by every job that uses the server, as source or destination.

The values are frozen (L{ServerLimits}, L{AccountLimits}); L{LimitsReader}
reads them, naming the file and key path of every problem like the other
section readers.
"""

from __future__ import annotations

from typing import Mapping

from attrs import frozen

from imapmig.config.reader import ConfigReader, _key

DEFAULT_MAX_JOBS = 8
MAX_MAX_JOBS = 1000

_PER_ACCOUNT_KEYS = ("max_connections",)


@frozen
class AccountLimits:
    """
    The limits of each account (user) on a server.

    @ivar maxConnections: connections open at once to one account, by
        every job together; L{None} for no limit.
    """

    maxConnections: int | None = None


@frozen
class ServerLimits:
    """
    The limits of a server, shared by every job that uses it.

    @ivar maxConnections: connections open at once to the server, by every
        job together (as source or destination); L{None} for no limit.
    @ivar perAccount: the limits of each of its accounts.
    """

    maxConnections: int | None = None
    perAccount: AccountLimits = AccountLimits()


class LimitsReader(ConfigReader):
    """
    Reads C{max_jobs} and a server's limits.
    """

    def _readMaxJobs(self, top: Mapping[str, object]) -> int | None:
        """
        Read C{max_jobs}: jobs running at once, 1 to 1000 (default 8).
        """
        return self._readInteger(
            top.get("max_jobs", DEFAULT_MAX_JOBS), "max_jobs", 1, MAX_MAX_JOBS
        )

    def _readServerLimits(
        self, server: Mapping[str, object], path: str
    ) -> ServerLimits | None:
        """
        Read the limits among the keys of the server at C{path}:
        C{max_connections} and C{per_account: {max_connections}}, each
        a positive integer or null (no limit, the default).
        """
        ok = True
        maxConnections = None
        if server.get("max_connections") is not None:
            maxConnections = self._readInteger(
                server["max_connections"], _key(path, "max_connections"), 1, None
            )
            ok = ok and maxConnections is not None
        perAccount = AccountLimits()
        if server.get("per_account") is not None:
            accountPath = _key(path, "per_account")
            account = self._readMapping(server["per_account"], accountPath, _PER_ACCOUNT_KEYS)
            if account is None:
                return None
            accountMax = None
            if account.get("max_connections") is not None:
                accountMax = self._readInteger(
                    account["max_connections"], _key(accountPath, "max_connections"), 1, None
                )
                ok = ok and accountMax is not None
            perAccount = AccountLimits(maxConnections=accountMax)
        if not ok:
            return None
        return ServerLimits(maxConnections=maxConnections, perAccount=perAccount)
