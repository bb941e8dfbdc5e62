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

The decision is made from the configuration file before the configuration
reader is imported (the reader parses endpoint strings with Twisted's
endpoint parser, which imports the reactor's transports):
L{fileNeedsTLS} reads the YAML document on its own and answers C{False}
only when it can see that nothing in it asks for TLS; anything it does
not recognise counts as asking.  L{configNeedsTLS} answers the same
question exactly from the parsed L{imapmig.config.Config}, to check the
first answer.

This module is a leaf: it imports nothing of imapmig's at run time.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imapmig.config.model import Config

__all__ = [
    "MAX_PROBED_OCTETS",
    "configNeedsTLS",
    "documentNeedsTLS",
    "fileNeedsTLS",
    "openSSLLoaded",
    "withoutTLS",
]

MAX_PROBED_OCTETS = 64 * 1024
"""
The largest configuration file L{fileNeedsTLS} parses: a larger one is
taken to need TLS, so that a large configuration is not parsed twice (its
start-up is not an empty run's anyway).
"""

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


def _mentionsTLS(value: object) -> bool:
    """
    Whether any key or string anywhere in C{value} asks for TLS.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _TLS_KEYS or _mentionsTLS(key) or _mentionsTLS(item):
                return True
        return False
    if isinstance(value, list):
        return any(_mentionsTLS(item) for item in value)
    if isinstance(value, str):
        return value.strip().lower().startswith(_TLS_PREFIXES)
    return False


def documentNeedsTLS(document: object) -> bool:
    """
    Whether the configuration C{document} (as YAML parsed it) may need TLS.

    @return: C{False} only if every server is a C{tcp:} endpoint with
        C{starttls: off}, the status page is off or listens on C{tcp:} or
        C{unix:}, and no key or string anywhere asks for TLS (a preset,
        OAuth 2.0, a CA file, a user list, a C{tls:}, C{ssl:} or C{https:}
        string); C{True} for anything else, a malformed document included
        (the configuration reader reports what is wrong with it).
    """
    if not isinstance(document, dict) or _mentionsTLS(document):
        return True
    servers = document.get("servers")
    if not isinstance(servers, dict):
        return True
    for server in servers.values():
        if not isinstance(server, dict):
            return True
        endpoint = server.get("endpoint")
        if not isinstance(endpoint, str) or not endpoint.strip().lower().startswith("tcp:"):
            return True
        if not _isOff(server.get("starttls")):
            return True
    if "status" in document:
        status = document["status"]
        if isinstance(status, dict):
            listen = status.get("listen")
            if listen is not None and not (
                isinstance(listen, str) and listen.strip().lower().startswith(_PLAIN_LISTENERS)
            ):
                return True
        elif not (status is None or _isOff(status)):
            return True
    return False


def fileNeedsTLS(path: str) -> bool:
    """
    Whether the configuration file at C{path} may need TLS
    (L{documentNeedsTLS}).  A file that cannot be read or parsed, or is
    larger than L{MAX_PROBED_OCTETS}, may.
    """
    try:
        with open(path, "rb") as f:
            content = f.read(MAX_PROBED_OCTETS + 1)
    except OSError:
        return True
    if len(content) > MAX_PROBED_OCTETS:
        return True
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        document = yaml.load(content, Loader=loader)
    except (yaml.YAMLError, ValueError):
        return True
    return documentNeedsTLS(document)


def configNeedsTLS(config: Config) -> bool:
    """
    Whether the parsed C{config} needs TLS: a server reached over TLS
    (STARTTLS or a C{tls:} endpoint), an account that logs in with OAuth
    2.0, a status page listening on anything but C{tcp:} or C{unix:}, or
    an C{https:} webhook.
    """
    for server in config.servers:
        if server.starttls or server.implicitTLS or server.tlsCA is not None:
            return True
    for job in config.jobs:
        for side in (job.source, job.destination):
            # Maildir, mbox and .eml sources have neither.
            account = getattr(side, "server", None)
            if getattr(side, "oauth2", None) is not None:
                return True
            if account is not None and (account.starttls or account.implicitTLS):
                return True
    if config.notify is not None and config.notify.webhookURL.lower().startswith("https:"):
        return True
    if config.status is not None:
        return not config.status.listen.strip().lower().startswith(_PLAIN_LISTENERS)
    return False
