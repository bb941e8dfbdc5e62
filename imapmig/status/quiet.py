# -*- test-case-name: tests.test_joblog -*-
"""
The status site without twisted.web's chatter at the default log level.

twisted.web logs at info level things an admin of imapmig cannot act on:
"Timing out client: IPv4Address(...)" each time a browser's or a
monitor's idle keep-alive connection is closed (after a minute, by
L{HTTPChannel.timeoutConnection}), "Forcibly timing out client" after
that, and "Using GET to fake a HEAD request" for every C{HEAD} (a load
balancer's health check).  L{quieten} makes a status site log these at
debug level instead (L{QuietSiteMixin} does it for a L{Site} subclass, and
names the site in the one line its port logs when it listens);
twisted.web's warnings and errors are left as they are.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger, LogLevel
from twisted.web.http import HTTPChannel
from twisted.web.server import Request, Site

__all__ = ["DebugLogger", "QuietHTTPChannel", "QuietRequest", "QuietSiteMixin", "quieten"]


class DebugLogger(Logger):
    """
    A L{Logger} whose info events are emitted at debug level; every other
    level is left as it is.
    """

    def emit(self, level: LogLevel, format: str | None = None, **kwargs: object) -> None:
        """
        See L{Logger.emit}; C{info} becomes C{debug}.
        """
        if level is LogLevel.info:
            level = LogLevel.debug
        Logger.emit(self, level, format, **kwargs)


class QuietHTTPChannel(HTTPChannel):
    """
    An L{HTTPChannel} that logs the timing out of an idle client at debug
    level.  (HTTP/1.1 only: the status site has no use for HTTP/2.)
    """

    _log = DebugLogger()


class QuietRequest(Request):
    """
    A L{Request} whose informational notes (a C{HEAD} answered as a
    C{GET}) are logged at debug level.
    """

    _log = DebugLogger()


class QuietSiteMixin:
    """
    Mixed into a L{Site} subclass (C{class StatusSite(QuietSiteMixin,
    Site)}): what L{quieten} does, as class attributes, and the name its
    port gives it when it starts listening ("Status site (HTTP) starting
    on 8025", not the class's name).
    """

    noisy = False
    # Any: twisted.web types these as the factory callables they are
    # called as, which a class is.
    protocol: Any = QuietHTTPChannel
    requestFactory: Any = QuietRequest

    def logPrefix(self) -> str:
        """
        The site's name in the lines its port logs.
        """
        return "Status site (HTTP)"


def quieten(site: Site) -> Site:
    """
    Make C{site} quiet at the default log level: no "Starting factory"
    line, and its connections and requests log twisted.web's
    informational notes at debug level.

    @param site: a status site whose C{requestFactory} is L{Request} (or a
        subclass of L{QuietRequest}).
    @return: C{site}, changed.
    """
    site.noisy = False
    site.protocol = QuietHTTPChannel  # type: ignore[assignment]
    if not (isinstance(site.requestFactory, type) and issubclass(site.requestFactory, QuietRequest)):
        site.requestFactory = QuietRequest
    return site
