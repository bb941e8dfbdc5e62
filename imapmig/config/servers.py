# -*- test-case-name: tests.test_config -*-
"""
The C{servers} section, and endpoint strings: every server's endpoint,
TLS and timeout.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable, Mapping, TypeVar

from attrs import frozen
from twisted.internet.endpoints import clientFromString, serverFromString

from imapmig.config.limits import LIMIT_KEYS, LimitsReader
from imapmig.config.model import ServerConfig
from imapmig.config.presets import PRESETS, Preset, presetNames, withPreset
from imapmig.config.reader import _NAME, _describe, _key
from imapmig.config.endpointstring import splitEndpoint
from imapmig.mail.folders import PersonalNamespace

_T = TypeVar("_T")

_DEFAULT_LISTEN = "tcp:8025:interface=127.0.0.1"


_DEFAULT_TIMEOUT = 120.0

_SERVER_KEYS = (
    "endpoint",
    "starttls",
    "allow_plaintext",
    "tls_ca",
    "tls_hostname",
    "timeout",
    "compress",
    "namespace",
    "preset",
    "label_views",
    "archive_folder",
    "max_message_size",
    *LIMIT_KEYS,
)
_LABEL_VIEWS = ("auto", "dedup", "copy")
_NAMESPACE_KEYS = ("prefix", "separator")

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
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


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
    kind = args[0].lower()
    if kind == "systemd" and isinstance(error, (IndexError, KeyError)):
        which = (
            f"named {kwargs['name']!r}" if "name" in kwargs else f"at index {kwargs.get('index')}"
        )
        return (
            f"systemd passed this process no socket {which} (LISTEN_FDS, LISTEN_FDNAMES):"
            " a systemd: endpoint works only in a service its .socket unit starts"
        )
    if "multiple values for argument 'interface'" in str(error):
        # "interface=::1" splits into "interface=", "" and "1".
        return (
            f"{_twistedMessage(error)}: escape the colons of an IPv6 address with"
            " backslashes (interface=\\:\\:1)"
        )
    return _twistedMessage(error)


@frozen
class _ClientEndpoint:
    """
    What a valid C{servers.*.endpoint} string says.
    """

    implicitTLS: bool
    tcpEndpoint: str
    host: str


class ServersReader(LimitsReader):
    """
    Reads C{servers}, and checks server endpoint strings.
    """

    def _checkServerEndpoint(self, description: str, path: str) -> bool:
        """
        Check a server endpoint string with Twisted's own parser.
        """
        try:
            serverFromString(_NO_REACTOR, description)
        except Exception as e:
            # Parsing may raise anything the endpoint parser or its plugin
            # raises; each is a problem with the string.
            self._problem(
                path,
                f"invalid endpoint {description!r}: {_endpointMessage(description, e)}"
                f" (e.g. {_DEFAULT_LISTEN!r})",
            )
            return False
        args, kwargs = splitEndpoint(description)
        if args[0].lower() in ("tcp", "ssl", "tcp6"):
            port = args[1] if len(args) > 1 else kwargs.get("port", "0")
            if not 0 <= int(port) <= 65535:
                self._problem(path, f"port {port} is out of range (0-65535)")
                return False
        return True

    def _readServers(
        self, top: Mapping[str, object]
    ) -> dict[str, ServerConfig | None] | None:
        """
        Read C{servers}.  The result maps every name declared to its
        configuration, or to L{None} if that is invalid.
        """
        if "servers" not in top:
            self._problem("servers", "missing: at least one server is required")
            return None
        value = top["servers"]
        if not isinstance(value, dict):
            self._problem(
                "servers",
                f"expected a mapping of names to servers, got {_describe(value)}",
            )
            return None
        if not value:
            self._problem("servers", "at least one server is required")
        servers: dict[str, ServerConfig | None] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                self._problem(
                    "servers",
                    f"server name {name!r} is {_describe(name)}, not a string",
                )
                continue
            path = _key("servers", name)
            if not _NAME.fullmatch(name):
                self._problem(
                    path,
                    f"invalid server name {name!r}: use letters, digits and . _ @ -,"
                    " starting with a letter or digit",
                )
            servers[name] = self._readServer(name, item, path)
        return servers

    def _readIfSet(
        self,
        mapping: Mapping[str, object],
        path: str,
        key: str,
        read: Callable[[object, str], _T | None],
    ) -> tuple[_T | None, bool]:
        """
        L{LimitsReader._optional}, and whether the setting is valid (an
        absent or null one is; a reader gives L{None} for an invalid one).
        """
        value = self._optional(mapping, path, key, read)
        return value, value is not None or mapping.get(key) is None

    def _readServer(self, name: str, value: object, path: str) -> ServerConfig | None:
        """
        Read one server.
        """
        server = self._readMapping(value, path, _SERVER_KEYS)
        if server is None:
            return None
        preset = None
        if "preset" in server:
            preset = self._readPreset(server["preset"], _key(path, "preset"))
            if preset is None:
                return None
            server = withPreset(preset, server, _SERVER_KEYS)
        ok = True

        endpoint: _ClientEndpoint | None = None
        written = None
        if "endpoint" not in server:
            self._problem(
                _key(path, "endpoint"),
                "missing: give 'tcp:HOST:PORT' (STARTTLS)"
                " or 'tls:HOST:PORT' (implicit TLS)",
            )
        else:
            written = self._readString(server["endpoint"], _key(path, "endpoint"))
            if written is not None:
                endpoint = self._readClientEndpoint(written, _key(path, "endpoint"))
        ok = ok and endpoint is not None

        starttls: bool | None = None
        if "starttls" in server:
            starttls = self._readStarttls(server["starttls"], _key(path, "starttls"))
            ok = ok and starttls is not None
            if starttls and endpoint is not None and endpoint.implicitTLS:
                self._problem(
                    _key(path, "starttls"),
                    "must be off (or absent) with the implicit TLS endpoint"
                    f" {written!r}; STARTTLS is for tcp: endpoints",
                )
                ok = False
        elif endpoint is not None:
            starttls = not endpoint.implicitTLS

        tlsCA, valid = self._readIfSet(server, path, "tls_ca", self._readCertificates)
        ok = ok and valid
        tlsHostname, valid = self._readIfSet(server, path, "tls_hostname", self._readString)
        ok = ok and valid
        if endpoint is not None and starttls is False and not endpoint.implicitTLS:
            for key in ("tls_ca", "tls_hostname"):
                if server.get(key) is not None:
                    self._problem(
                        _key(path, key),
                        "has no effect without TLS (starttls: off on a tcp: endpoint)",
                    )
                    ok = False

        ok = self._checkPlaintext(server, path, endpoint, starttls) and ok

        timeout = self._readSeconds(
            server.get("timeout", _DEFAULT_TIMEOUT), _key(path, "timeout")
        )
        ok = ok and timeout is not None

        compress = self._readCompress(
            server.get("compress", "auto"),
            _key(path, "compress"),
            None if endpoint is None else endpoint.host,
        )
        ok = ok and compress is not None

        namespace, valid = self._readIfSet(server, path, "namespace", self._readNamespace)
        ok = ok and valid

        labelViews = self._readChoice(
            server.get("label_views", "auto"),
            _key(path, "label_views"),
            _LABEL_VIEWS,
            "label_views setting",
        )
        ok = ok and labelViews is not None
        archiveFolder, valid = self._readArchiveFolder(
            server.get("archive_folder", "Archive"), _key(path, "archive_folder")
        )
        ok = ok and valid

        maxMessageSize, valid = self._readIfSet(server, path, "max_message_size", self._readSize)
        ok = ok and valid
        limits = self.readServerLimits(server, path)
        ok = ok and limits is not None

        if not ok:
            return None
        assert written is not None and endpoint is not None
        assert starttls is not None and timeout is not None and compress is not None
        assert labelViews is not None
        assert limits is not None
        return ServerConfig(
            name=name,
            endpoint=written,
            starttls=starttls,
            implicitTLS=endpoint.implicitTLS,
            tcpEndpoint=endpoint.tcpEndpoint,
            tlsHostname=tlsHostname or endpoint.host,
            tlsCA=tlsCA,
            timeout=timeout,
            compress=compress,
            namespace=namespace,
            preset=None if preset is None else preset.name,
            labelViews=labelViews,
            archiveFolder=archiveFolder,
            maxMessageSize=maxMessageSize,
            limits=limits,
        )

    def _checkPlaintext(
        self,
        server: Mapping[str, object],
        path: str,
        endpoint: _ClientEndpoint | None,
        starttls: bool | None,
    ) -> bool:
        """
        Check C{allow_plaintext} (C{false} by default): a server reached
        without TLS (a C{tcp:} endpoint with C{starttls: off}) whose host
        is not a loopback address would be sent passwords and mail in the
        clear, so it needs C{allow_plaintext: true}; on a TLS connection
        the setting has no effect and is refused, as C{tls_ca} is without
        TLS.

        @param endpoint: the server's endpoint, or L{None} if invalid.
        @param starttls: its C{starttls}, or L{None} if invalid.
        @return: whether the server is acceptable in this respect.
        """
        where = _key(path, "allow_plaintext")
        allow = server.get("allow_plaintext", False)
        if not isinstance(allow, bool):
            self._problem(where, f"must be true or false, not {_describe(allow)}")
            return False
        if endpoint is None or starttls is None:
            return True
        plaintext = not endpoint.implicitTLS and not starttls
        if allow and not plaintext:
            self._problem(
                where, "has no effect with TLS (a tls: endpoint or starttls: required)"
            )
            return False
        if plaintext and not allow and not isLoopbackHost(endpoint.host):
            self._problem(
                _key(path, "starttls"),
                f"off to {endpoint.host}, which is not a loopback address: the"
                " password and the mail would cross the network in the clear;"
                " use starttls: required, a tls: endpoint, or allow_plaintext:"
                " true to accept that",
            )
            return False
        return True

    def _readPreset(self, value: object, path: str) -> Preset | None:
        """
        Read C{preset}: the name of one of L{PRESETS}.
        """
        written = self._readString(value, path)
        if written is None:
            return None
        preset = PRESETS.get(written)
        if preset is None:
            self._problem(
                path,
                f"unknown preset {written!r} (known presets: {', '.join(presetNames())})",
            )
        return preset

    def _readClientEndpoint(
        self, description: str, path: str
    ) -> _ClientEndpoint | None:
        """
        Read a destination server's endpoint string: C{tcp:HOST:PORT} or
        C{tls:HOST:PORT}, with optional C{timeout=} and C{bindAddress=}.
        """
        prefix, colon, rest = description.partition(":")
        if not colon or prefix.lower() not in ("tcp", "tls"):
            instead = ""
            if prefix.lower() == "ssl":
                instead = " (write tls: for implicit TLS)"
            self._problem(
                path,
                f"unsupported endpoint {description!r}{instead}: only 'tcp:HOST:PORT'"
                " (plain TCP, upgraded with STARTTLS unless starttls: off) and"
                " 'tls:HOST:PORT' (implicit TLS) are supported, because TLS is"
                " configured with starttls, tls_ca and tls_hostname",
            )
            return None
        implicitTLS = prefix.lower() == "tls"
        try:
            args, kwargs = splitEndpoint(rest)
        except ValueError as e:
            self._problem(path, f"invalid endpoint {description!r}: {e}")
            return None
        tlsArguments = sorted(_TLS_ENDPOINT_ARGUMENTS.intersection(kwargs))
        if tlsArguments:
            self._problem(
                path,
                "TLS arguments in the endpoint string are not supported"
                f" ({', '.join(a + '=' for a in tlsArguments)}): set the CA"
                " certificates to trust with tls_ca and the name to verify"
                " with tls_hostname",
            )
            return None
        usage = f"expected '{prefix}:HOST:PORT[:timeout=SECONDS][:bindAddress=ADDRESS]'"
        if len(args) > 2:
            self._problem(
                path,
                f"invalid endpoint {description!r}: unexpected argument"
                f" {args[2]!r}; {usage}",
            )
            return None
        tcpEndpoint = "tcp:" + rest
        try:
            # implicit TLS is layered over TCP later; parsing the tcp: form
            # makes Twisted check the port and reject unknown arguments.
            clientFromString(_NO_REACTOR, tcpEndpoint)
        except Exception as e:
            # The parser raises ValueError, TypeError or worse: all mean the
            # string is wrong.
            self._problem(
                path, f"invalid endpoint {description!r}: {_twistedMessage(e)}; {usage}"
            )
            return None
        host = kwargs.get("host", "")
        port = kwargs.get("port", "")
        if len(args) == 2:
            host, port = args
        elif len(args) == 1:
            if "host" in kwargs:
                port = args[0]
            else:
                host = args[0]
        if not host:
            self._problem(
                path, f"invalid endpoint {description!r}: the host is empty; {usage}"
            )
            return None
        if not 1 <= int(port) <= 65535:
            self._problem(
                path,
                f"invalid endpoint {description!r}:"
                f" port {port} is out of range (1-65535)",
            )
            return None
        return _ClientEndpoint(
            implicitTLS=implicitTLS, tcpEndpoint=tcpEndpoint, host=host
        )

    def _readNamespace(self, value: object, path: str) -> PersonalNamespace | None:
        """
        Read C{namespace}: C{{prefix: "INBOX.", separator: "."}}, the
        personal namespace to believe instead of the server's NAMESPACE.
        C{prefix} may be empty; C{separator} is one character, or null for
        a flat server; a non-empty prefix that does not end with the
        separator, or with a null separator, is refused (folders would be
        glued to it).
        """
        namespace = self._readMapping(value, path, _NAMESPACE_KEYS)
        if namespace is None:
            return None
        ok = True
        prefix = namespace.get("prefix", "")
        if not isinstance(prefix, str):
            self._problem(
                _key(path, "prefix"), f"expected a string (\"\" or \"INBOX.\"), got {_describe(prefix)}"
            )
            ok = False
        if "separator" not in namespace:
            self._problem(
                _key(path, "separator"),
                "missing: the hierarchy separator, e.g. \".\" or \"/\" (null for a flat server)",
            )
            return None
        separator = namespace["separator"]
        if separator is not None and (not isinstance(separator, str) or len(separator) != 1):
            described = repr(separator) if isinstance(separator, str) else _describe(separator)
            self._problem(
                _key(path, "separator"),
                f"must be one character (e.g. \".\" or \"/\") or null, not {described}",
            )
            ok = False
        if not ok:
            return None
        assert isinstance(prefix, str) and (separator is None or isinstance(separator, str))
        if prefix and separator is not None and not prefix.endswith(separator):
            self._problem(
                _key(path, "prefix"),
                f"{prefix!r} must end with the separator {separator!r}"
                f" (e.g. {prefix + separator!r})",
            )
            return None
        if prefix and separator is None:
            self._problem(
                _key(path, "prefix"),
                f"{prefix!r} must be empty where the separator is null (a flat server)",
            )
            return None
        return PersonalNamespace(prefix, separator, configured=True)

    def _readArchiveFolder(self, value: object, path: str) -> tuple[str | None, bool]:
        """
        Read C{archive_folder}: a folder path with C{/} between levels
        (C{Archive}, C{Mail/Archive}), or C{off} (which YAML reads as
        C{false} unless quoted).

        @return: the path or L{None} for C{off}, and whether it is valid.
        """
        if value is False or value == "off":
            return None, True
        if not isinstance(value, str):
            self._problem(path, f"must be a folder name or 'off', not {_describe(value)}")
            return None, False
        levels = value.split("/")
        if not value or any(not level.strip() for level in levels):
            self._problem(
                path,
                f"{value!r} has an empty level: write the folder as 'Archive' or 'Mail/Archive'",
            )
            return None, False
        bad = sorted({c for c in value if c in "*%" or ord(c) < 0x20 or ord(c) == 0x7F})
        if bad:
            self._problem(
                path,
                f"{value!r} holds {', '.join(repr(c) for c in bad)}: not in a folder name"
                " (IMAP wildcards and control characters)",
            )
            return None, False
        return value, True

    def _readStarttls(self, value: object, path: str) -> bool | None:
        """
        Read C{starttls}: C{required} or C{off} (which YAML reads as
        C{false} unless quoted).
        """
        if value == "required":
            return True
        if value is False or value == "off":
            return False
        described = repr(value) if isinstance(value, str) else _describe(value)
        self._problem(path, f"must be 'required' or 'off', not {described}")
        return None

    def _readCompress(self, value: object, path: str, host: str | None) -> bool | None:
        """
        Read C{compress}: C{auto}, C{on} or C{off} (YAML reads the last two
        as booleans unless quoted).  C{auto} means on unless C{host}, the
        endpoint's host, is a loopback address: on a local link DEFLATE
        costs more CPU than the octets it saves.

        @param host: the endpoint's host, or L{None} if the endpoint is
            invalid (the result then does not matter).
        """
        if value == "auto":
            return host is not None and not isLoopbackHost(host)
        if value is True or value == "on":
            return True
        if value is False or value == "off":
            return False
        described = repr(value) if isinstance(value, str) else _describe(value)
        self._problem(path, f"must be 'auto', 'on' or 'off', not {described}")
        return None

    def _readCertificates(self, value: object, path: str) -> str | None:
        """
        Read C{tls_ca}: a file of one or more PEM certificates.
        """
        # Imported only for a configuration that uses TLS (imapmig.access.cleartext).
        from twisted.internet.ssl import Certificate

        written = self._readString(value, path)
        if written is None:
            return None
        resolved = self._resolve(written)
        try:
            with open(resolved, "rb") as f:
                pem = f.read()
        except FileNotFoundError:
            self._problem(path, f"no such file: {resolved}")
            return None
        except OSError as e:
            self._problem(path, f"{resolved} cannot be read: {e.strerror}")
            return None
        blocks = re.findall(
            rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", pem, re.DOTALL
        )
        if not blocks:
            self._problem(path, f"{resolved} contains no PEM certificate")
            return None
        for number, block in enumerate(blocks, 1):
            try:
                Certificate.loadPEM(block)
            except Exception:
                # OpenSSL's errors are a list of internal codes; the number
                # of the certificate is what helps.
                self._problem(
                    path,
                    f"certificate {number} in {resolved} is not a valid"
                    " PEM certificate",
                )
                return None
        return resolved
