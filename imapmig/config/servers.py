# -*- test-case-name: tests.test_config -*-
"""
The C{servers} section: every server's endpoint (judged by
L{imapmig.config.endpoints}), TLS and timeout.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, TypeVar

from imapmig.config.limits import LIMIT_KEYS, LimitsReader
from imapmig.config.model import ServerConfig
from imapmig.config.presets import PRESETS, Preset, presetNames, withPreset
from imapmig.config.reader import _NAME, Check, Key, Step, _describe, _key, isOff, keyNames
from imapmig.config.endpoints import (
    _ClientEndpoint,
    _parseClientEndpoint,
    _serverEndpointProblem,
    isLoopbackHost,
)
from imapmig.mail.folders import PersonalNamespace

_DEFAULT_TIMEOUT = 120.0

_LABEL_VIEWS = ("auto", "dedup", "copy")

_W = TypeVar("_W", bool, "bool | str")

# What the words of starttls and compress mean (YAML reads an unquoted on
# or off as a boolean).
_STARTTLS_WORDS: dict[object, bool] = {"required": True, False: False, "off": False}
_COMPRESS_WORDS: dict[object, bool | str] = {
    "auto": "auto",
    True: True,
    "on": True,
    False: False,
    "off": False,
}


def _describeWord(value: object) -> str:
    """
    A refused word, quoted; or the YAML type of a value that is not one.
    """
    return repr(value) if isinstance(value, str) else _describe(value)


def _isWord(value: object, word: object) -> bool:
    """
    Whether C{value} is C{word}: the same string, or the same YAML boolean
    (never a number equal to it).
    """
    return value is word or (isinstance(value, str) and value == word)


class ServersReader(LimitsReader):
    """
    Reads C{servers}, and checks server endpoint strings.
    """

    def _checkServerEndpoint(self, description: str, path: str) -> bool:
        """
        Check a server endpoint string with Twisted's own parser.
        """
        return self._accepted(description, path, _serverEndpointProblem) is not None

    def _readServers(
        self, top: Mapping[str, object]
    ) -> dict[str, ServerConfig | None] | None:
        """
        Read C{servers}.  The result maps every name declared to its
        configuration, or to L{None} if that is invalid.
        """
        value = self._readServerMapping(top)
        if value is None:
            return None
        servers: dict[str, ServerConfig | None] = {}
        for name, item in value.items():
            self._readNamedServer(name, item, servers)
        return servers

    def _readServerMapping(self, top: Mapping[str, object]) -> dict[object, object] | None:
        """
        Read C{servers} as a mapping of names to servers, which should not
        be empty (an empty one is reported, and read).
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
        return value

    def _readNamedServer(
        self, name: object, value: object, servers: dict[str, ServerConfig | None]
    ) -> None:
        """
        Read the server C{name} into C{servers} (L{None} if invalid).
        """
        if not isinstance(name, str):
            self._problem(
                "servers",
                f"server name {name!r} is {_describe(name)}, not a string",
            )
            return
        path = _key("servers", name)
        if not _NAME.fullmatch(name):
            self._problem(
                path,
                f"invalid server name {name!r}: use letters, digits and . _ @ -,"
                " starting with a letter or digit",
            )
        servers[name] = self._readServer(name, value, path)

    def _readServer(self, name: str, value: object, path: str) -> ServerConfig | None:
        """
        Read one server: its preset first (whose defaults fill the keys
        the server leaves out), then the keys of L{_SERVER_TABLE}.
        """
        server = self._readMapping(value, path, _SERVER_KEYS)
        if server is not None and "preset" in server:
            server = self._withPreset(server, path)
        if server is None:
            return None
        values = self._readKeys(server, path, _SERVER_TABLE)
        if values is None:
            return None
        return _serverConfig(name, values)

    def _withPreset(
        self, server: dict[str, object], path: str
    ) -> dict[str, object] | None:
        """
        The server's keys with its preset's defaults for those it leaves
        out, or L{None} if the preset is unknown.
        """
        preset = self._readPreset(server["preset"], _key(path, "preset"))
        return None if preset is None else withPreset(preset, server, _SERVER_KEYS)

    def _readEndpoint(self, value: object, path: str) -> _ClientEndpoint | None:
        """
        Read C{endpoint}: a string L{_readClientEndpoint} accepts.
        """
        written = self._readString(value, path)
        return None if written is None else self._readClientEndpoint(written, path)

    def _checkStarttls(
        self, server: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check C{starttls} against the endpoint: STARTTLS is for C{tcp:}
        endpoints; absent, it is required on those and off on C{tls:}.
        """
        endpoint: _ClientEndpoint | None = values["endpoint"]
        if endpoint is None:
            return True
        if "starttls" not in server:
            values["starttls"] = not endpoint.implicitTLS
        elif values["starttls"] and endpoint.implicitTLS:
            self._problem(
                _key(path, "starttls"),
                "must be off (or absent) with the implicit TLS endpoint"
                f" {endpoint.written!r}; STARTTLS is for tcp: endpoints",
            )
            return False
        return True

    def _checkTLSKeys(
        self, server: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check that C{tls_ca} and C{tls_hostname} are not given for a
        connection without TLS (C{starttls: off} on a C{tcp:} endpoint).
        """
        if not _withoutTLS(values):
            return True
        given = [key for key in ("tls_ca", "tls_hostname") if server.get(key) is not None]
        for key in given:
            self._problem(
                _key(path, key),
                "has no effect without TLS (starttls: off on a tcp: endpoint)",
            )
        return not given

    def _checkPlaintext(
        self, server: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check C{allow_plaintext} (C{false} by default): a server reached
        without TLS (a C{tcp:} endpoint with C{starttls: off}) whose host
        is not a loopback address would be sent passwords and mail in the
        clear, so it needs C{allow_plaintext: true}; on a TLS connection
        the setting has no effect and is refused, as C{tls_ca} is without
        TLS.

        @return: whether the server is acceptable in this respect.
        """
        allow = values["allowPlaintext"]
        endpoint: _ClientEndpoint | None = values["endpoint"]
        if allow is None or endpoint is None or values["starttls"] is None:
            return True
        problem = _plaintextProblem(allow, _withoutTLS(values), endpoint.host)
        if problem is not None:
            self._problem(_key(path, problem[0]), problem[1])
        return problem is None

    def _resolveCompress(
        self, server: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Resolve C{compress: auto}: on unless the endpoint's host is a
        loopback address (on a local link DEFLATE costs more CPU than the
        octets it saves).
        """
        if values["compress"] == "auto":
            endpoint: _ClientEndpoint | None = values["endpoint"]
            values["compress"] = endpoint is not None and not isLoopbackHost(endpoint.host)
        return True

    def _checkLimits(
        self, server: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Read the server's limit keys (L{LIMIT_KEYS}).
        """
        values["limits"] = self.readServerLimits(server, path)
        return values["limits"] is not None

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
        endpoint = _parseClientEndpoint(description)
        if isinstance(endpoint, str):
            self._problem(path, endpoint)
            return None
        return endpoint

    def _readNamespace(self, value: object, path: str) -> PersonalNamespace | None:
        """
        Read C{namespace}: C{{prefix: "INBOX.", separator: "."}}, the
        personal namespace to believe instead of the server's NAMESPACE.
        C{prefix} may be empty; C{separator} is one character, or null for
        a flat server; a non-empty prefix that does not end with the
        separator, or with a null separator, is refused (folders would be
        glued to it).
        """
        values = self._readSection(value, path, _NAMESPACE_TABLE)
        if values is None:
            return None
        return PersonalNamespace(values["prefix"], values["separator"] or None, configured=True)

    def _readPrefix(self, value: object, path: str) -> str | None:
        """
        Read a namespace's C{prefix}: a string, maybe empty.
        """
        if not isinstance(value, str):
            self._problem(path, f"expected a string (\"\" or \"INBOX.\"), got {_describe(value)}")
            return None
        return value

    def _readSeparator(self, value: object, path: str) -> str | None:
        """
        Read a namespace's C{separator}: one character, or null for a flat
        server (read as C{""}).
        """
        if value is None:
            return ""
        if not isinstance(value, str) or len(value) != 1:
            self._problem(
                path,
                f"must be one character (e.g. \".\" or \"/\") or null, not {_describeWord(value)}",
            )
            return None
        return value

    def _checkPrefix(
        self, namespace: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check that a non-empty prefix ends with the separator, and that a
        flat server's is empty.
        """
        prefix, separator = values["prefix"], values["separator"]
        problem = None if prefix is None or separator is None else _prefixProblem(prefix, separator)
        if problem is not None:
            self._problem(_key(path, "prefix"), problem)
        return problem is None

    def _readArchiveFolder(self, value: object, path: str) -> str | bool | None:
        """
        Read C{archive_folder}: a folder path with C{/} between levels
        (C{Archive}, C{Mail/Archive}), or C{off} (which YAML reads as
        C{false} unless quoted).

        @return: the path, C{False} for C{off}, or L{None} if invalid.
        """
        if isOff(value):
            return False
        if not isinstance(value, str):
            self._problem(path, f"must be a folder name or 'off', not {_describe(value)}")
            return None
        return self._accepted(value, path, _folderProblem)

    def _readStarttls(self, value: object, path: str) -> bool | None:
        """
        Read C{starttls}: C{required} or C{off} (which YAML reads as
        C{false} unless quoted).
        """
        return self._readWord(value, path, _STARTTLS_WORDS, "must be 'required' or 'off'")

    def _readCompress(self, value: object, path: str) -> bool | str | None:
        """
        Read C{compress}: C{auto}, C{on} or C{off} (YAML reads the last two
        as booleans unless quoted); C{auto} is resolved with the endpoint
        (L{_resolveCompress}).
        """
        return self._readWord(value, path, _COMPRESS_WORDS, "must be 'auto', 'on' or 'off'")

    def _readWord(
        self, value: object, path: str, words: Mapping[object, _W], expected: str
    ) -> _W | None:
        """
        Read one of the words (or YAML booleans) of C{words}, as what it
        means there.
        """
        for word, meaning in words.items():
            if _isWord(value, word):
                return meaning
        self._problem(path, f"{expected}, not {_describeWord(value)}")
        return None

    def _readLabelViews(self, value: object, path: str) -> str | None:
        """
        Read C{label_views}: one of L{_LABEL_VIEWS}.
        """
        return self._readChoice(value, path, _LABEL_VIEWS, "label_views setting")

    def _readPresetName(self, value: object, path: str) -> str:
        """
        The name of the server's preset, read before the other keys
        (L{_readServer}).
        """
        return str(value)

    def _readCertificates(self, value: object, path: str) -> str | None:
        """
        Read C{tls_ca}: a file of one or more PEM certificates.
        """
        return self._accepted(self._readPath(value, path), path, _certificatesProblem)


def _folderProblem(value: str) -> str | None:
    """
    Why C{value} cannot be the archive folder's path, or L{None}.
    """
    if _hasEmptyLevel(value):
        return f"{value!r} has an empty level: write the folder as 'Archive' or 'Mail/Archive'"
    bad = _unfitCharacters(value)
    if bad:
        return (
            f"{value!r} holds {', '.join(repr(c) for c in bad)}: not in a folder name"
            " (IMAP wildcards and control characters)"
        )
    return None


def _hasEmptyLevel(value: str) -> bool:
    """
    Whether the folder path C{value} is empty or has an empty level
    between its C{/}.
    """
    return not value or any(not level.strip() for level in value.split("/"))


def _unfitCharacters(value: str) -> list[str]:
    """
    The characters of C{value} that cannot be in a folder's name, each
    once, sorted: IMAP wildcards and control characters.
    """
    return sorted({c for c in value if c in "*%" or ord(c) < 0x20 or ord(c) == 0x7F})


_PLAINTEXT_WITH_TLS = (
    "allow_plaintext",
    "has no effect with TLS (a tls: endpoint or starttls: required)",
)


def _plaintextProblem(allow: bool, plaintext: bool, host: str) -> tuple[str, str] | None:
    """
    The key and problem of a server's C{allow_plaintext} (C{allow}) for a
    connection to C{host}, C{plaintext} or not, or L{None}.
    """
    if allow:
        return None if plaintext else _PLAINTEXT_WITH_TLS
    if plaintext and not isLoopbackHost(host):
        return "starttls", (
            f"off to {host}, which is not a loopback address: the"
            " password and the mail would cross the network in the clear;"
            " use starttls: required, a tls: endpoint, or allow_plaintext:"
            " true to accept that"
        )
    return None


def _certificatesProblem(resolved: str) -> str | None:
    """
    Why the file C{resolved} is not a file of PEM certificates, or L{None}.
    """
    pem = _readFile(resolved)
    if isinstance(pem, str):
        return pem
    blocks = re.findall(
        rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", pem, re.DOTALL
    )
    if not blocks:
        return f"{resolved} contains no PEM certificate"
    invalid = _firstInvalid(blocks)
    if invalid is not None:
        return f"certificate {invalid} in {resolved} is not a valid PEM certificate"
    return None


def _readFile(resolved: str) -> bytes | str:
    """
    The content of the file C{resolved}, or why it cannot be read.
    """
    try:
        with open(resolved, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return f"no such file: {resolved}"
    except OSError as e:
        return f"{resolved} cannot be read: {e.strerror}"


def _firstInvalid(blocks: list[bytes]) -> int | None:
    """
    The number (from 1) of the first of the PEM certificate C{blocks}
    that OpenSSL does not load, or L{None}.
    """
    return next((n for n, block in enumerate(blocks, 1) if not _loadsPEM(block)), None)


def _loadsPEM(block: bytes) -> bool:
    """
    Whether OpenSSL loads the PEM certificate C{block}.
    """
    # Imported only for a configuration that uses TLS (imapmig.access.cleartext).
    from twisted.internet.ssl import Certificate

    try:
        Certificate.loadPEM(block)
    except Exception:
        # OpenSSL's errors are a list of internal codes; the number of the
        # certificate is what helps.
        return False
    return True


def _prefixProblem(prefix: str, separator: str) -> str | None:
    """
    Why a namespace's C{prefix} does not go with its C{separator} (C{""}
    for a flat server), or L{None}.
    """
    if not prefix:
        return None
    if not separator:
        return f"{prefix!r} must be empty where the separator is null (a flat server)"
    if not prefix.endswith(separator):
        return f"{prefix!r} must end with the separator {separator!r} (e.g. {prefix + separator!r})"
    return None


def _withoutTLS(values: Mapping[str, Any]) -> bool:
    """
    Whether a server's valid C{endpoint} and C{starttls} make a connection
    without TLS (C{starttls: off} on a C{tcp:} endpoint).
    """
    endpoint: _ClientEndpoint | None = values["endpoint"]
    return endpoint is not None and values["starttls"] is False and not endpoint.implicitTLS


def _serverConfig(name: str, values: Mapping[str, Any]) -> ServerConfig:
    """
    The server C{name} from the values of L{_SERVER_TABLE}.
    """
    endpoint: _ClientEndpoint = values["endpoint"]
    return ServerConfig(
        name=name,
        endpoint=endpoint.written,
        starttls=values["starttls"],
        implicitTLS=endpoint.implicitTLS,
        tcpEndpoint=endpoint.connectingWithin(values["timeout"]),
        tlsHostname=values["tlsHostname"] or endpoint.host,
        tlsCA=values["tlsCA"],
        timeout=values["timeout"],
        compress=values["compress"],
        namespace=values["namespace"],
        preset=values["preset"],
        labelViews=values["labelViews"],
        archiveFolder=values["archiveFolder"] or None,
        maxMessageSize=values["maxMessageSize"],
        limits=values["limits"],
    )


_ENDPOINT_MISSING = "missing: give 'tcp:HOST:PORT' (STARTTLS) or 'tls:HOST:PORT' (implicit TLS)"

# The keys of a server, in the order their problems are reported (the
# checks where what they look at has been read), then the limit keys.
_SERVER_TABLE: tuple[Step, ...] = (
    Key("endpoint", ServersReader._readEndpoint, missing=_ENDPOINT_MISSING),
    Key("starttls", ServersReader._readStarttls),
    Check(ServersReader._checkStarttls),
    Key("allow_plaintext", ServersReader._readBoolean, "allowPlaintext", default=False),
    Key("tls_ca", ServersReader._readCertificates, "tlsCA", nullIsAbsent=True),
    Key("tls_hostname", ServersReader._readString, "tlsHostname", nullIsAbsent=True),
    Check(ServersReader._checkTLSKeys),
    Check(ServersReader._checkPlaintext),
    Key("timeout", ServersReader._readSeconds, default=_DEFAULT_TIMEOUT),
    Key("compress", ServersReader._readCompress, default="auto"),
    Check(ServersReader._resolveCompress),
    Key("namespace", ServersReader._readNamespace, nullIsAbsent=True),
    Key("preset", ServersReader._readPresetName),
    Key("label_views", ServersReader._readLabelViews, "labelViews", default="auto"),
    Key("archive_folder", ServersReader._readArchiveFolder, "archiveFolder", default="Archive"),
    Key("max_message_size", ServersReader._readSize, "maxMessageSize", nullIsAbsent=True),
    Check(ServersReader._checkLimits),
)
_SERVER_KEYS = keyNames(_SERVER_TABLE) + LIMIT_KEYS

_SEPARATOR_MISSING = 'missing: the hierarchy separator, e.g. "." or "/" (null for a flat server)'

# The keys of a server's namespace.
_NAMESPACE_TABLE: tuple[Step, ...] = (
    Key("prefix", ServersReader._readPrefix, default=""),
    Key("separator", ServersReader._readSeparator, missing=_SEPARATOR_MISSING),
    Check(ServersReader._checkPrefix),
)
