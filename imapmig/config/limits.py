# -*- test-case-name: tests.test_config_limits_throttle -*-
"""
Limits: how many jobs run at once (C{max_jobs}); and of a server and of
each account on it, shared by every job that uses the server as source or
destination: connections, rates (messages and octets per second) and daily
byte budgets, read from a server's mapping under C{servers:} and its
C{per_account:} block.

    servers:
      gmail:
        endpoint: tls:imap.gmail.com:993
        max_connections: 100          # connections from every job together
        messages_per_second: 50       # every job on this server together
        bytes_per_second: 20MB
        per_account:
          max_connections: 15
          messages_per_second: 10     # each account (user) on it
          bytes_per_second: 2MB
          daily_upload: 500MB         # octets APPENDed per UTC day
          daily_download: 2500MB      # octets FETCHed per UTC day

Sizes are an integer of octets or a number with a suffix: C{KB}, C{MB},
C{GB} (decimal: 1 MB = 1,000,000 octets) or C{KiB}, C{MiB}, C{GiB}.
Every key defaults to null: no limit.
"""

from __future__ import annotations

from typing import Mapping

from attrs import frozen

from imapmig.config.reader import ConfigReader, Key, Step, keyNames
from imapmig.config.sizes import parseSize

DEFAULT_MAX_JOBS = 8
MAX_MAX_JOBS = 1000

__all__ = [
    "LIMIT_KEYS",
    "AccountLimits",
    "LimitsReader",
    "ServerLimits",
]

@frozen
class AccountLimits:
    """
    The limits of each account (user) on a server: the C{per_account}
    block.  L{None} means no limit.

    @ivar maxConnections: connections open at once to one account
        (slice C{sched}).
    @ivar messagesPerSecond: messages appended to, or fetched from, one
        account per second.
    @ivar bytesPerSecond: octets appended to, or fetched from, one account
        per second.
    @ivar dailyUpload: octets appended to one account per UTC day.
    @ivar dailyDownload: octets fetched from one account per UTC day.
    """

    maxConnections: int | None = None
    messagesPerSecond: float | None = None
    bytesPerSecond: int | None = None
    dailyUpload: int | None = None
    dailyDownload: int | None = None

    @property
    def throttled(self) -> bool:
        """
        Whether any rate or budget of this block is set.
        """
        rates = (self.messagesPerSecond, self.bytesPerSecond, self.dailyUpload, self.dailyDownload)
        return any(rate is not None for rate in rates)


@frozen
class ServerLimits:
    """
    The limits of a server, shared by every job that uses it (as source or
    destination).  L{None} means no limit.

    @ivar maxConnections: connections open at once to the server (slice
        C{sched}).
    @ivar messagesPerSecond: messages appended to, or fetched from, the
        server per second, by every job together.
    @ivar bytesPerSecond: octets appended to, or fetched from, the server
        per second, by every job together.
    @ivar perAccount: the limits of each account on it.
    """

    maxConnections: int | None = None
    messagesPerSecond: float | None = None
    bytesPerSecond: int | None = None
    perAccount: AccountLimits = AccountLimits()

    @property
    def throttled(self) -> bool:
        """
        Whether any rate or budget applies to jobs on this server: when not,
        they pay nothing for throttling.
        """
        rates = (self.messagesPerSecond, self.bytesPerSecond)
        return self.perAccount.throttled or any(rate is not None for rate in rates)

    def capConnections(self, wanted: int) -> int:
        """
        The most of C{wanted} connections one job may ever be granted to
        one account on this server: C{max_connections} and
        C{per_account.max_connections} cap it.
        """
        for limit in (self.maxConnections, self.perAccount.maxConnections):
            if limit is not None:
                wanted = min(wanted, limit)
        return wanted


class LimitsReader(ConfigReader):
    """
    Reads C{max_jobs} and a server's limits; each problem names the file
    and the key path (C{servers.gmail.per_account.daily_upload}).
    """

    def _readMaxJobs(self, top: Mapping[str, object]) -> int | None:
        """
        Read C{max_jobs}: jobs running at once, 1 to 1000 (default 8).
        """
        return self._readInteger(
            top.get("max_jobs", DEFAULT_MAX_JOBS), "max_jobs", 1, MAX_MAX_JOBS
        )

    def readServerLimits(self, server: Mapping[str, object], path: str) -> ServerLimits | None:
        """
        Read the limit keys (L{LIMIT_KEYS}) of the server mapping C{server}
        at C{path}.

        @return: the limits (no limit for an absent or null key), or
            L{None} after recording a problem.
        """
        values = self._readKeys(server, path, _SERVER_LIMITS_TABLE)
        if values is None:
            return None
        values["perAccount"] = values["perAccount"] or AccountLimits()
        return ServerLimits(**values)

    def readAccountLimits(self, value: object, path: str) -> AccountLimits | None:
        """
        Read a C{per_account} block at C{path}.
        """
        values = self._readSection(value, path, _ACCOUNT_TABLE)
        return None if values is None else AccountLimits(**values)

    def _readCount(self, value: object, path: str) -> int | None:
        """
        Read a positive integer (connections).
        """
        return self._readInteger(value, path, 1, None)

    def _readRate(self, value: object, path: str) -> float | None:
        """
        Read a positive, finite number of messages per second (C{0.5}: one
        message every two seconds).
        """
        return self._readPositive(value, path, "a number of messages per second", "")

    def _readSize(self, value: object, path: str) -> int | None:
        """
        Read a positive size in octets (L{parseSize}).
        """
        octets, why = parseSize(value)
        if octets is None:
            self._problem(path, why)
        return octets


# The limits of one account on a server: no limit for an absent or null
# key; the keys of a per_account block.
_ACCOUNT_TABLE: tuple[Step, ...] = (
    Key("max_connections", LimitsReader._readCount, "maxConnections", nullIsAbsent=True),
    Key("messages_per_second", LimitsReader._readRate, "messagesPerSecond", nullIsAbsent=True),
    Key("bytes_per_second", LimitsReader._readSize, "bytesPerSecond", nullIsAbsent=True),
    Key("daily_upload", LimitsReader._readSize, "dailyUpload", nullIsAbsent=True),
    Key("daily_download", LimitsReader._readSize, "dailyDownload", nullIsAbsent=True),
)

# The limits of a server, among the server's keys.
_SERVER_LIMITS_TABLE: tuple[Step, ...] = (
    *_ACCOUNT_TABLE[:3],
    Key("per_account", LimitsReader.readAccountLimits, "perAccount", nullIsAbsent=True),
)

LIMIT_KEYS = keyNames(_SERVER_LIMITS_TABLE)
"""
The keys of a server's mapping that L{LimitsReader.readServerLimits}
reads.
"""
