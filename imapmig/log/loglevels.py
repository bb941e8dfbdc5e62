# -*- test-case-name: tests.test_loglevels -*-
"""
Which log events the daemon writes: those at C{info} level and above by
default; debug events (a line per status request, twisted.web's timing
out of idle clients, the details of each IMAP connection) only when asked.

The level comes from the environment variable C{IMAPMIG_LOG_LEVEL}: a
level (C{debug}, C{info}, C{warn}, C{error}, C{critical}), optionally
followed by levels for namespaces, comma-separated:
C{IMAPMIG_LOG_LEVEL=info,imapmig.status=debug} writes the status site's
debug events and nothing else below info.  A namespace covers its
children (C{imapmig.job} covers C{imapmig.job.migration}).

C{imapmig-daemon} filters its log this way; under C{twistd}, pass
C{--logger=imapmig.log.loglevels.twistdLogObserver}.  Both then write the
format C{IMAPMIG_LOG_FORMAT} asks for (text, JSON lines or the journal:
L{imapmig.log.logoutput}), the filter in front of it.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    InvalidLogLevelError,
    LogLevel,
    LogLevelFilterPredicate,
    Logger,
)

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "filtered",
    "levelsFrom",
    "levelsFromEnvironment",
    "twistdLogObserver",
]

ENVIRONMENT_VARIABLE = "IMAPMIG_LOG_LEVEL"


def levelsFrom(text: str) -> LogLevelFilterPredicate:
    """
    The filter a C{IMAPMIG_LOG_LEVEL} value describes.

    @param text: C{LEVEL[,NAMESPACE=LEVEL...]}; empty for the default
        (C{info}).
    @raise ValueError: a level is unknown, or an item is malformed; the
        message says which and what is allowed.
    """
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    for item in filter(None, (part.strip() for part in text.split(","))):
        namespace, _, name = item.rpartition("=")
        # The namespace "" sets the default level (LogLevelFilterPredicate).
        predicate.setLogLevelForNamespace(namespace.strip(), _level(name.strip(), item))
    return predicate


def _level(name: str, item: str) -> LogLevel:
    """
    The log level called C{name}, in any case.

    @param item: the item of C{IMAPMIG_LOG_LEVEL} that names it.
    @raise ValueError: there is none (the message says which are).
    """
    try:
        level: LogLevel = LogLevel.levelWithName(name.lower())
    except InvalidLogLevelError:
        allowed = ", ".join(level.name for level in LogLevel.iterconstants())
        raise ValueError(
            f"{ENVIRONMENT_VARIABLE}: unknown log level {name!r} in {item!r} (one of: {allowed})"
        ) from None
    return level


def levelsFromEnvironment(environ: Mapping[str, str] = os.environ) -> LogLevelFilterPredicate:
    """
    The filter C{IMAPMIG_LOG_LEVEL} in C{environ} describes (L{levelsFrom}).

    @raise ValueError: see L{levelsFrom}.
    """
    return levelsFrom(environ.get(ENVIRONMENT_VARIABLE, ""))


def filtered(observer: ILogObserver, levels: LogLevelFilterPredicate) -> ILogObserver:
    """
    C{observer}, given only the events C{levels} lets through.
    """
    return FilteringLogObserver(observer, [levels])


def twistdLogObserver() -> ILogObserver:
    """
    The log observer for C{twistd --logger=imapmig.log.loglevels.twistdLogObserver}:
    the format C{IMAPMIG_LOG_FORMAT} asks for (twistd's text on standard
    output by default, the journal under systemd: L{imapmig.log.logoutput}),
    filtered by C{IMAPMIG_LOG_LEVEL} (an unknown level is reported in the
    log, and C{info} used).

    @raise SystemExit: with status 2 (L{imapmig.daemon.tap.EXIT_BAD_CONFIG}) when
        C{IMAPMIG_LOG_FORMAT} is unknown, said on standard error: twistd
        then stops before it starts anything.
    """
    from imapmig.log.logoutput import observerFromEnvironment

    try:
        observer = observerFromEnvironment()
    except ValueError as e:
        sys.stderr.write(f"twistd: {e}\n")
        raise SystemExit(2) from None
    try:
        levels = levelsFromEnvironment()
    except ValueError as e:
        levels = levelsFrom("")
        Logger(namespace=__name__, observer=observer).warn(
            "{problem}; logging at info level", problem=str(e)
        )
    return filtered(observer, levels)
