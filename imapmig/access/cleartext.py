# -*- test-case-name: tests.test_cleartext -*-
"""
A daemon whose configuration uses no TLS runs without loading OpenSSL.

Twisted's reactor imports pyOpenSSL (and with it C{cryptography} and
C{service_identity}) whenever it is installed, to offer TLS on every TCP
connection; that is about a fifth of the instructions of a daemon's
start-up (C{bench/results/startup.md}).  A configuration in which no
server is reached over TLS (every endpoint C{tcp:} with C{starttls: off}),
no account logs in with OAuth 2.0 (its token endpoint is HTTPS) and the
status page listens on plain TCP needs none of it.  For such a
configuration, L{withoutTLS} makes C{import OpenSSL} fail in this process
before the reactor is imported, and Twisted then builds its transports
without TLS, as it does where pyOpenSSL is not installed.

The decision is made from the configuration's YAML document
(L{imapmig.configfile}) before the configuration reader is imported (the
reader parses endpoint strings with Twisted's endpoint parser, which
imports the reactor's transports): L{tlsReason} answers L{None} only when
it can see that nothing in the document asks for TLS, and otherwise names
what does.  L{configNeedsTLS} answers the same question exactly from the
parsed L{imapmig.config.Config}, to check the first answer.  A reload
(L{imapmig.daemon.reload}) asks both, off the reactor's thread.

This module is a leaf: it imports nothing of imapmig's at run time.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imapmig.config.model import Config, JobConfig, ServerConfig

__all__ = [
    "configNeedsTLS",
    "openSSLLoaded",
    "tlsReason",
    "withoutTLS",
]

# Keys that ask for TLS wherever they appear: presets name providers
# reached over TLS, OAuth 2.0 token endpoints are HTTPS, a CA file or a
# certificate name only matter to TLS; a user list's rows are not read
# here, so it counts as asking too.
_TLS_KEYS = frozenset({"preset", "oauth2", "tls_ca", "tls_hostname", "jobs_from"})

# String values that name a TLS endpoint or URL.
_TLS_PREFIXES = ("tls:", "ssl:", "https:")

# Status page listeners without TLS.
_PLAIN_LISTENERS = ("tcp:", "unix:")

# The modules whose import decides whether Twisted offers TLS: once one of
# them is loaded, the decision is made.
_TLS_DECIDED = (
    "OpenSSL",
    "twisted.internet.tcp",
    "twisted.internet.ssl",
    "twisted.internet.endpoints",
    "twisted.protocols.tls",
)


def openSSLLoaded() -> bool:
    """
    Whether pyOpenSSL's C{SSL} module is loaded in this process.  When it
    is not, no object can be an OpenSSL connection or error: code that
    asks whether one is can answer without importing it.
    """
    return sys.modules.get("OpenSSL.SSL") is not None


def withoutTLS() -> bool:
    """
    Make C{import OpenSSL} fail in this process from now on, if nothing
    has imported it or decided on TLS yet (Twisted's transports, its
    endpoints).

    @return: whether it was done; C{False} when it was too late (a test
        process, where the reactor is loaded already, is left alone).
    """
    if any(name in sys.modules for name in _TLS_DECIDED):
        return False
    # A None entry makes the import raise ImportError (ModuleNotFoundError):
    # Twisted takes that for pyOpenSSL not being installed.
    sys.modules["OpenSSL"] = None  # type: ignore[assignment]
    return True


def _isOff(value: object) -> bool:
    # YAML 1.1 reads an unquoted off as False; quoted, it stays a string.
    return value is False or (isinstance(value, str) and value.strip().lower() == "off")


def _mentionsTLS(document: object) -> str | None:
    """
    The path of the first key or string anywhere in C{document} that asks
    for TLS, or L{None}.  Each mapping and list is visited once however
    many aliases share it (a document is a graph, not a tree).
    """
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("", document)]
    while stack:
        path, value = stack.pop()
        found = _visit(path, value, seen, stack)
        if found is not None:
            return found
    return None


def _visit(
    path: str, value: object, seen: set[int], stack: list[tuple[str, object]]
) -> str | None:
    """
    Visit C{value} at C{path}: the path if it is a string that asks for
    TLS, or of a key that does; else push a mapping's or list's children
    not seen before onto C{stack}.
    """
    if isinstance(value, str):
        return (path or "the document") if _namesTLS(value) else None
    if _firstVisit(value, seen):
        return _pushChildren(path, value, stack)
    return None


def _namesTLS(value: str) -> bool:
    """
    Whether the string C{value} names a TLS endpoint or URL.
    """
    return value.strip().lower().startswith(_TLS_PREFIXES)


def _firstVisit(value: object, seen: set[int]) -> bool:
    """
    Whether C{value} is a mapping or a list not seen before (it is seen
    now).
    """
    if not isinstance(value, (dict, list)) or id(value) in seen:
        return False
    seen.add(id(value))
    return True


def _pushChildren(path: str, value: object, stack: list[tuple[str, object]]) -> str | None:
    """
    Push the items of the list or mapping C{value} (at C{path}), and a
    mapping's keys, onto C{stack}; or return the path of a key of
    L{_TLS_KEYS} in it.
    """
    if isinstance(value, list):
        stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        return None
    assert isinstance(value, dict)
    return _pushMapping(path, value, stack)


def _pushMapping(
    path: str, mapping: dict[object, object], stack: list[tuple[str, object]]
) -> str | None:
    """
    Push the keys and values of C{mapping} (at C{path}) onto C{stack}; or
    return the path of a key of L{_TLS_KEYS} in it.
    """
    for key, item in mapping.items():
        where = f"{path}.{key}" if path else str(key)
        if key in _TLS_KEYS:
            return where
        stack.append((where, key))
        stack.append((where, item))
    return None


def _serverTLSReason(name: object, server: object) -> str | None:
    """
    Why the server C{name} (a value under C{servers}) asks for TLS, or
    L{None} if it does not or is malformed (the reader reports that).
    """
    if not isinstance(server, dict):
        return None
    if _notTCP(server.get("endpoint")):
        return f"servers.{name}.endpoint is not a tcp: endpoint"
    if not _isOff(server.get("starttls")):
        return f"servers.{name}.starttls is not off"
    return None


def _notTCP(endpoint: object) -> bool:
    """
    Whether C{endpoint}, as written, is an endpoint string other than
    C{tcp:}.
    """
    return isinstance(endpoint, str) and not endpoint.strip().lower().startswith("tcp:")


def tlsReason(document: object) -> str | None:
    """
    What in the configuration C{document} (as YAML parsed it) asks for
    TLS, or L{None} if nothing does.

    @return: L{None} only if every server is a C{tcp:} endpoint with
        C{starttls: off}, the status page is off or listens on C{tcp:} or
        C{unix:}, and no key or string anywhere asks for TLS (a preset,
        OAuth 2.0, a CA file, a user list, a C{tls:}, C{ssl:} or C{https:}
        string); else the key that asks, e.g. C{"servers.new.starttls is
        not off"}.  A malformed document that asks for none (not a
        mapping, a server that is not a mapping ...) needs none: the
        configuration reader reports what is wrong with it, and
        L{configNeedsTLS} checks its result.
    """
    if not isinstance(document, dict):
        return None
    mentioned = _mentionsTLS(document)
    if mentioned is not None:
        return f"{mentioned} asks for TLS"
    return _serversTLSReason(document.get("servers")) or _statusTLSReason(document.get("status"))


def _serversTLSReason(servers: object) -> str | None:
    """
    Why the first server of C{servers} that asks for TLS does, or L{None}.
    """
    if not isinstance(servers, dict):
        return None
    reasons = (_serverTLSReason(name, server) for name, server in servers.items())
    return next((reason for reason in reasons if reason is not None), None)


def _statusTLSReason(status: object) -> str | None:
    """
    Why C{status} asks for TLS (a listener other than C{tcp:} or
    C{unix:}), or L{None}.
    """
    listen = status.get("listen") if isinstance(status, dict) else None
    if isinstance(listen, str) and not listen.strip().lower().startswith(_PLAIN_LISTENERS):
        return "status.listen is not a tcp: or unix: endpoint"
    return None


def configNeedsTLS(config: Config) -> bool:
    """
    Whether the parsed C{config} needs TLS: a server reached over TLS
    (STARTTLS or a C{tls:} endpoint), an account that logs in with OAuth
    2.0, a status page listening on anything but C{tcp:} or C{unix:}, or
    an C{https:} webhook.
    """
    return (
        any(_serverNeedsTLS(server) for server in config.servers)
        or any(_jobNeedsTLS(job) for job in config.jobs)
        or _notifyNeedsTLS(config)
        or _statusNeedsTLS(config)
    )


def _jobNeedsTLS(job: JobConfig) -> bool:
    """
    Whether C{job}'s source or destination needs TLS.
    """
    return _sideNeedsTLS(job.source) or _sideNeedsTLS(job.destination)


def _notifyNeedsTLS(config: Config) -> bool:
    """
    Whether C{config} notifies an C{https:} webhook.
    """
    return config.notify is not None and config.notify.webhookURL.lower().startswith("https:")


def _serverNeedsTLS(server: ServerConfig) -> bool:
    """
    Whether C{server} is reached over TLS, or trusts a CA file.
    """
    return server.starttls or server.implicitTLS or server.tlsCA is not None


def _sideNeedsTLS(side: object) -> bool:
    """
    Whether a job's source or destination needs TLS: an account that logs
    in with OAuth 2.0 or whose server is reached over TLS (Maildir, mbox
    and .eml sources have neither).
    """
    if getattr(side, "oauth2", None) is not None:
        return True
    server = getattr(side, "server", None)
    return server is not None and (server.starttls or server.implicitTLS)


def _statusNeedsTLS(config: Config) -> bool:
    """
    Whether the status site listens on anything but C{tcp:} or C{unix:}.
    """
    if config.status is None:
        return False
    return not config.status.listen.strip().lower().startswith(_PLAIN_LISTENERS)
