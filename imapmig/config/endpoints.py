# -*- test-case-name: tests.test_endpoints,tests.test_config -*-
"""
Endpoint strings judged for the configuration: a server's client
endpoint (C{tcp:HOST:PORT} or C{tls:HOST:PORT}, L{_parseClientEndpoint}),
a listener's server endpoint (L{_serverEndpointProblem}), each by Twisted's
own parser, and whether a host is this machine (L{isLoopbackHost}).
Moved out of L{imapmig.config.servers}, which had grown near 800 lines;
L{imapmig.config.endpointstring} splits the strings, and stays free of
Twisted's endpoints (the status site imports it).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Mapping

from attrs import frozen
from twisted.internet.endpoints import clientFromString, serverFromString

from imapmig.config.endpointstring import splitEndpoint

_DEFAULT_LISTEN = "tcp:8025:interface=127.0.0.1"

# Twisted's endpoint constructors only store the reactor they are given, so
# a placeholder lets Twisted's own parsers validate an endpoint string here
# without fetching the global reactor (only imapmig.daemon.tap may) and without
# listening or connecting.
_NO_REACTOR = object()

_TLS_ENDPOINT_ARGUMENTS = frozenset(
    ["trustRoots", "certificate", "privateKey", "caCertsDir", "certKey", "hostname"]
)


def isLoopbackHost(host: str) -> bool:
    """
    Whether C{host}, as written in an endpoint string, names this machine:
    C{localhost} (or a name under C{.localhost}), an address of
    C{127.0.0.0/8}, or C{::1}.  Other names are not resolved.
    """
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return _unmapped(address).is_loopback


def _unmapped(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """
    The IPv4 address an IPv4-mapped IPv6 C{address} maps, else
    C{address}.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _twistedMessage(error: Exception) -> str:
    """
    The message of an exception raised by Twisted's endpoint parser,
    without the name of the constructor it comes from.
    """
    return re.sub(r"^[\w.]+\(\) ", "", str(error)) or type(error).__name__


def _endpointMessage(description: str, error: Exception) -> str:
    """
    Why Twisted's parser refused the server endpoint string
    C{description}: L{_twistedMessage}, or, where that names only an index
    or an argument, what the admin can do about it.
    """
    try:
        args, kwargs = splitEndpoint(description)
    except ValueError:
        return _twistedMessage(error)
    if args[0].lower() == "systemd" and isinstance(error, (IndexError, KeyError)):
        return _noSystemdSocket(kwargs)
    if "multiple values for argument 'interface'" in str(error):
        # "interface=::1" splits into "interface=", "" and "1".
        return (
            f"{_twistedMessage(error)}: escape the colons of an IPv6 address with"
            " backslashes (interface=\\:\\:1)"
        )
    return _twistedMessage(error)


def _noSystemdSocket(kwargs: Mapping[str, str]) -> str:
    """
    Why a C{systemd:} endpoint string with the arguments C{kwargs} names
    no socket this process was passed.
    """
    which = f"named {kwargs['name']!r}" if "name" in kwargs else f"at index {kwargs.get('index')}"
    return (
        f"systemd passed this process no socket {which} (LISTEN_FDS, LISTEN_FDNAMES):"
        " a systemd: endpoint works only in a service its .socket unit starts"
    )


def _serverEndpointProblem(description: str) -> str | None:
    """
    Why Twisted's own parser refuses the server endpoint string
    C{description}, or its port is out of range; or L{None}.
    """
    try:
        serverFromString(_NO_REACTOR, description)
    except Exception as e:
        # Parsing may raise anything the endpoint parser or its plugin
        # raises; each is a problem with the string.
        return (
            f"invalid endpoint {description!r}: {_endpointMessage(description, e)}"
            f" (e.g. {_DEFAULT_LISTEN!r})"
        )
    return _portProblem(description)


def _portProblem(description: str) -> str | None:
    """
    Why the port of the TCP server endpoint string C{description} is out
    of range, or L{None}.
    """
    args, kwargs = splitEndpoint(description)
    if args[0].lower() not in ("tcp", "ssl", "tcp6"):
        return None
    port = args[1] if len(args) > 1 else kwargs.get("port", "0")
    return None if 0 <= int(port) <= 65535 else f"port {port} is out of range (0-65535)"


@frozen
class _ClientEndpoint:
    """
    What a valid C{servers.*.endpoint} string says.
    """

    written: str
    implicitTLS: bool
    tcpEndpoint: str
    host: str
    connectTimeout: bool = False

    def connectingWithin(self, seconds: float) -> str:
        """
        L{tcpEndpoint}, given a connect timeout of C{seconds} (the server's
        C{timeout}) unless the string sets its own or C{seconds} is 0:
        Twisted's default of 30 s would otherwise end a connection the
        kernel made while the reactor was busy longer than that, and be
        reported as the server's C{timeout}.
        """
        if self.connectTimeout or seconds <= 0:
            return self.tcpEndpoint
        return f"{self.tcpEndpoint}:timeout={seconds:g}"


def _parseClientEndpoint(description: str) -> _ClientEndpoint | str:
    """
    What a destination server's endpoint string C{description} says, or
    why it cannot be used.
    """
    prefix, colon, rest = description.partition(":")
    if not colon or prefix.lower() not in ("tcp", "tls"):
        return _unsupportedEndpoint(description, prefix)
    usage = f"expected '{prefix}:HOST:PORT[:timeout=SECONDS][:bindAddress=ADDRESS]'"
    split = _splitClientEndpoint(description, rest, usage)
    if isinstance(split, str):
        return split
    host, port = _hostAndPort(*split)
    problem = _hostPortProblem(host, port, usage)
    if problem is not None:
        return f"invalid endpoint {description!r}: {problem}"
    return _ClientEndpoint(
        written=description,
        implicitTLS=prefix.lower() == "tls",
        tcpEndpoint="tcp:" + rest,
        host=host,
        connectTimeout="timeout" in split[1],
    )


def _hostPortProblem(host: str, port: str, usage: str) -> str | None:
    """
    Why a client endpoint's C{host} and C{port} cannot be used, or
    L{None}.
    """
    if not host:
        return f"the host is empty; {usage}"
    if not 1 <= int(port) <= 65535:
        return f"port {port} is out of range (1-65535)"
    return None


def _unsupportedEndpoint(description: str, prefix: str) -> str:
    """
    Why an endpoint string of a kind other than C{tcp:} and C{tls:} is
    refused.
    """
    instead = " (write tls: for implicit TLS)" if prefix.lower() == "ssl" else ""
    return (
        f"unsupported endpoint {description!r}{instead}: only 'tcp:HOST:PORT'"
        " (plain TCP, upgraded with STARTTLS unless starttls: off) and"
        " 'tls:HOST:PORT' (implicit TLS) are supported, because TLS is"
        " configured with starttls, tls_ca and tls_hostname"
    )


def _splitClientEndpoint(
    description: str, rest: str, usage: str
) -> tuple[list[str], dict[str, str]] | str:
    """
    The arguments of a C{tcp:} or C{tls:} endpoint string (C{rest}, after
    its prefix) once Twisted's parser accepts its C{tcp:} form, or why it
    cannot be used.
    """
    try:
        args, kwargs = splitEndpoint(rest)
    except ValueError as e:
        return f"invalid endpoint {description!r}: {e}"
    tlsArguments = sorted(_TLS_ENDPOINT_ARGUMENTS.intersection(kwargs))
    if tlsArguments:
        return (
            "TLS arguments in the endpoint string are not supported"
            f" ({', '.join(a + '=' for a in tlsArguments)}): set the CA"
            " certificates to trust with tls_ca and the name to verify"
            " with tls_hostname"
        )
    if len(args) > 2:
        return f"invalid endpoint {description!r}: unexpected argument {args[2]!r}; {usage}"
    try:
        # implicit TLS is layered over TCP later; parsing the tcp: form
        # makes Twisted check the port and reject unknown arguments.
        clientFromString(_NO_REACTOR, "tcp:" + rest)
    except Exception as e:
        # The parser raises ValueError, TypeError or worse: all mean the
        # string is wrong.
        return f"invalid endpoint {description!r}: {_twistedMessage(e)}; {usage}"
    return args, kwargs


def _hostAndPort(args: list[str], kwargs: dict[str, str]) -> tuple[str, str]:
    """
    The host and port of a C{tcp:} endpoint's arguments, given by position
    or by keyword.
    """
    if len(args) == 2:
        return args[0], args[1]
    host, port = kwargs.get("host", ""), kwargs.get("port", "")
    if len(args) == 1 and "host" in kwargs:
        return host, args[0]
    if len(args) == 1:
        return args[0], port
    return host, port
