# -*- test-case-name: tests.test_status_hostcheck -*-
"""
A defence of the status site against DNS rebinding.

The status site listens on loopback by default and answers every GET
without a credential: the progress, the folder names, the failures with
the servers' reasons, the manifests with their Message-IDs.  A web page
the admin visits can point a name of its own at 127.0.0.1 (DNS
rebinding); the admin's browser then treats the status site as that
page's own origin, and lets the page read every answer.  What gives such
a request away is its C{Host} header: the attacker's name.  No
legitimate client reaches a loopback listener under a name other than
C{localhost} or an address (a browser on the same host, an SSH tunnel, a
reverse proxy that names its upstream by address).

L{misdirected} refuses, on a connection that arrived on a loopback
address, a C{Host} that is neither an IP address nor C{localhost} (nor a
name under C{.localhost}, which browsers resolve to loopback themselves).
A request without C{Host} (no browser sends one) passes; one with two
is refused.

A listener reached on another address (a LAN address, all interfaces) is
reached under names only the admin knows: C{status.allowed_hosts} lists
them (C{migration.corp.example}, or C{.corp.example} for every name under
it), and then only those, IP addresses and, on loopback, the local names
pass, on every address.  Without the list such a listener answers to any
name (L{reachesBeyondLoopback} tells the daemon when to warn about it).
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import Request

from imapmig.config.endpointstring import splitEndpoint
from imapmig.config.model import StatusConfig
from imapmig.status._http import answerError

_LOCAL_NAMES = ("localhost",)

MISDIRECTED_REQUEST = 421
"""
The status code of a refused request (RFC 9110, 15.5.20).
"""


def _isLoopback(address: str) -> bool:
    """
    Whether C{address} (an IP address, perhaps IPv4-mapped IPv6) is a
    loopback address.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def hostName(header: bytes) -> str:
    """
    The host of a C{Host} header, without its port or a trailing dot,
    lower-cased; an IPv6 address without its brackets.
    """
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    name = text.rpartition(":")[0] if text.count(":") == 1 else text
    return name.rstrip(".")


def allowedName(name: str) -> bool:
    """
    Whether C{name} (from L{hostName}) cannot be a rebound name: an IP
    address, C{localhost}, or a name under C{.localhost}.
    """
    return _isAddress(name) or name in _LOCAL_NAMES or name.endswith(".localhost")


def _isAddress(name: str) -> bool:
    """
    Whether C{name} (from L{hostName}) is an IP address.
    """
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def listedName(name: str, allowedHosts: Sequence[str]) -> bool:
    """
    Whether C{name} (from L{hostName}) is one of C{allowedHosts}: equal to
    one, or under one that starts with a dot (C{.corp.example} allows
    C{corp.example} and every name under it).
    """
    # ".corp.example" ends ".corp.example" and every name under it.
    dotted = "." + name
    return any(
        dotted.endswith(allowed) if allowed.startswith(".") else name == allowed
        for allowed in allowedHosts
    )


def misdirected(request: Request, allowedHosts: Sequence[str] = ()) -> str | None:
    """
    Why C{request} looks like a DNS-rebinding request (see the module's
    docstring), or L{None} if it does not.

    @param allowedHosts: C{status.allowed_hosts}, lower-cased.
    """
    headers = request.requestHeaders.getRawHeaders(b"host")
    if headers is None:
        return None
    if len(headers) > 1:
        # getHeader() reads the last one, another reader the first: two
        # names, one of them unchecked (RFC 9112, 3.2 refuses them).
        return "this site does not answer a request with more than one Host header"
    local = getattr(request.getHost(), "host", None)
    loopback = isinstance(local, str) and _isLoopback(local)
    if not loopback and not allowedHosts:
        return None
    name = hostName(headers[0])
    if _answersTo(name, loopback, allowedHosts):
        return None
    return _refusal(name, allowedHosts)


def _answersTo(name: str, loopback: bool, allowedHosts: Sequence[str]) -> bool:
    """
    Whether the site answers to C{name}: listed in C{allowedHosts}, an IP
    address, or (on a C{loopback} connection) a local name.
    """
    return listedName(name, allowedHosts) or (allowedName(name) if loopback else _isAddress(name))


def _refusal(name: str, allowedHosts: Sequence[str]) -> str:
    """
    Why a request for C{name} is refused.
    """
    if allowedHosts:
        return (
            f"this site does not answer to the name {name[:80]!r}: it is not in"
            " status.allowed_hosts (a DNS-rebinding request?)"
        )
    return (
        f"this site answers only to localhost or an IP address, not to the name {name[:80]!r}"
        " (a DNS-rebinding request?)"
    )


def reachesBeyondLoopback(listen: str) -> bool:
    """
    Whether a status listener on C{listen} (a server endpoint string)
    may be reached on an address other than loopback: a C{tcp:} or
    C{ssl:} endpoint without C{interface=} (every address) or with one
    that is not loopback (an address or C{localhost}).  A C{unix:} socket, or an endpoint whose address
    this cannot tell (C{systemd:}), is not.
    """
    try:
        args, kwargs = splitEndpoint(listen)
    except ValueError:
        return False
    if args[0].lower() not in ("tcp", "ssl", "tcp6", "ssl6"):
        return False
    interface = kwargs.get("interface")
    if interface is None:
        return True
    # The interface may be a name: "localhost" binds the loopback address
    # (the socket's bind() resolves it from /etc/hosts).
    if interface.lower().rstrip(".") in _LOCAL_NAMES:
        return False
    return not _isLoopback(interface)


class MisdirectedResource(Resource):
    """
    The answer to a request L{misdirected} refuses: 421 with a JSON error,
    whatever its method and path.
    """

    isLeaf = True

    def __init__(self, why: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._why = why

    def render(self, request: Request) -> bytes:
        """
        Answer 421 Misdirected Request.
        """
        body = answerError(request, MISDIRECTED_REQUEST, self._why)
        # twisted.web knows no phrase for 421.
        request.setResponseCode(MISDIRECTED_REQUEST, b"Misdirected Request")
        return body


def warnIfRebindable(status: StatusConfig) -> None:
    """
    Warn when the status site can be reached beyond loopback and answers
    to any host name: a web page an admin visits can then read it through
    DNS rebinding (L{imapmig.status.hostcheck}).
    """
    if status.allowedHosts or not reachesBeyondLoopback(status.listen):
        return
    Logger().warn(
        "The status site listens beyond loopback ({listen}) and answers to any host name:"
        " a web page an admin visits could read it by DNS rebinding; list the names"
        " admins use in status.allowed_hosts",
        listen=status.listen,
    )
