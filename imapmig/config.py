# -*- test-case-name: tests.test_config -*-
"""
The configuration: a YAML file parsed once into a tree of frozen values.

Every problem found is collected, each with the path of the offending key
(C{jobs[1].destination.server}), and reported together in one
L{ConfigError}; no C{dict} travels past this module.
C{config/imapmig.example.yaml} documents every key.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
from typing import Collection, Mapping, Sequence

import yaml
from attrs import frozen
from twisted.internet.endpoints import clientFromString, serverFromString
from twisted.internet.ssl import Certificate

from imapmig.errors import ConfigError
from imapmig.plan import FolderRules
from imapmig.secrets import PasswordFileError, Secret, readPasswordFile

__all__ = [
    "Config",
    "DestinationConfig",
    "EmlSourceConfig",
    "FolderRules",
    "ImapSourceConfig",
    "JobConfig",
    "MaildirSourceConfig",
    "MboxSourceConfig",
    "PipelineConfig",
    "Secret",
    "ServerConfig",
    "StatusConfig",
    "isLoopbackHost",
    "loadConfig",
    "parseConfig",
]


@frozen
class ServerConfig:
    """
    A destination IMAP server.

    @ivar name: its name under C{servers}.
    @ivar endpoint: the endpoint string as written (C{tcp:HOST:PORT} or
        C{tls:HOST:PORT}).
    @ivar starttls: whether to upgrade the connection with STARTTLS before
        logging in, refusing servers that do not offer it.
    @ivar implicitTLS: whether TLS starts as soon as the connection is made
        (a C{tls:} endpoint).
    @ivar tcpEndpoint: the description to give C{clientFromString}: the
        endpoint itself for C{tcp:}, rewritten to C{tcp:} for C{tls:} (TLS
        is then layered on it with L{tlsHostname} and L{tlsCA}).
    @ivar tlsHostname: the name the server's certificate must carry.
    @ivar tlsCA: a PEM file of the certificates to trust, or L{None} for
        the system trust store.
    @ivar timeout: seconds a command may stay outstanding without any reply
        before the connection is dropped.
    @ivar compress: whether to turn on COMPRESS=DEFLATE (RFC 4978) where
        the server offers it: the C{compress} key, its C{auto} resolved to
        true unless the endpoint's host is a loopback address.
    """

    name: str
    endpoint: str
    starttls: bool
    implicitTLS: bool
    tcpEndpoint: str
    tlsHostname: str
    tlsCA: str | None
    timeout: float
    compress: bool


@frozen
class PipelineConfig:
    """
    Limits of one connection's APPEND pipeline.

    @ivar windowMessages: messages in flight awaiting their reply.
    @ivar windowBytes: octets in flight awaiting their reply.
    @ivar batchMessages: messages per MULTIAPPEND command (1: no MULTIAPPEND).
    @ivar batchBytes: octets per MULTIAPPEND command.
    """

    windowMessages: int
    windowBytes: int
    batchMessages: int
    batchBytes: int


@frozen
class MaildirSourceConfig:
    """
    A Maildir (with Maildir++ subfolders) to migrate.

    @ivar path: the Maildir's absolute path.
    """

    path: str


@frozen
class EmlSourceConfig:
    """
    A directory of C{.eml} files to migrate into one folder.

    @ivar path: the directory's absolute path.
    @ivar folder: the destination folder's hierarchy, one component per
        level: C{("INBOX",)}, C{("Archive", "2019")}.
    """

    path: str
    folder: tuple[str, ...]


@frozen
class MboxSourceConfig:
    """
    An mbox file (one folder, INBOX), or a directory of mbox files (one
    folder each), to migrate.

    @ivar path: the file's or directory's absolute path.
    @ivar quoting: how C{From } lines in bodies were escaped: C{"mboxrd"}
        (every C{>*From } got one more C{>}) or C{"mboxo"} (only
        C{From } became C{>From }).
    """

    path: str
    quoting: str


@frozen
class AccountConfig:
    """
    An account on an IMAP server.

    @ivar server: the server holding the account.
    @ivar user: the login name.
    @ivar password: the password (redacted in C{repr}).
    """

    server: ServerConfig
    user: str
    password: Secret


@frozen
class ImapSourceConfig(AccountConfig):
    """
    An account on an IMAP server to migrate from (read-only).
    """


SourceConfig = MaildirSourceConfig | EmlSourceConfig | MboxSourceConfig | ImapSourceConfig


@frozen
class DestinationConfig(AccountConfig):
    """
    The account a job migrates into.
    """


@frozen
class JobConfig:
    """
    One migration: a source into a destination account.

    @ivar name: unique among jobs; names the job in logs, the status
        resource and the state store.
    @ivar connections: parallel connections to the destination.
    @ivar pipeline: the APPEND pipeline's limits for each connection.
    @ivar folders: which folders to migrate, and where.
    @ivar identity: how messages already in the destination are recognised:
        C{"fingerprint"} (Message-ID, a digest of the first header octets,
        and the size), C{"message-id"} (Message-ID alone, for messages some
        tool altered), or C{"off"} (the state store only).
    @ivar eightBit: what becomes of a message with 8-bit octets (and no
        NUL) when the destination lacks BINARY: C{"literal"} (sent in an
        ordinary literal, which RFC 3501 allows) or C{"fail"} (recorded as
        failed with the reason).
    """

    name: str
    source: SourceConfig
    destination: DestinationConfig
    connections: int
    pipeline: PipelineConfig
    folders: FolderRules = FolderRules()
    identity: str = "fingerprint"
    eightBit: str = "literal"


@frozen
class StatusConfig:
    """
    The status web resource.

    @ivar listen: a server endpoint string (C{tcp:8025:interface=127.0.0.1}).
    """

    listen: str


@frozen
class Config:
    """
    The whole configuration.

    @ivar path: the configuration file's absolute path.
    @ivar statePath: the SQLite state database's absolute path.
    @ivar status: the status resource, or L{None} when disabled.
    @ivar servers: every configured server, in file order.
    @ivar jobs: every job, in file order.
    """

    path: str
    statePath: str
    status: StatusConfig | None
    servers: tuple[ServerConfig, ...]
    jobs: tuple[JobConfig, ...]


_DEFAULT_STATE_PATH = "/var/lib/imapmig/state.sqlite"
_DEFAULT_LISTEN = "tcp:8025:interface=127.0.0.1"
_DEFAULT_TIMEOUT = 120.0
_DEFAULT_FOLDER = "INBOX"


@frozen
class _IntSetting:
    """
    An integer setting that C{defaults} sets and every job may override.
    """

    key: str
    default: int
    minimum: int
    maximum: int | None


_CONNECTIONS = _IntSetting("connections", 2, 1, 32)
_WINDOW_MESSAGES = _IntSetting("window_messages", 1000, 1, None)
_WINDOW_BYTES = _IntSetting("window_bytes", 32 * 1024 * 1024, 65536, None)
_BATCH_MESSAGES = _IntSetting("batch_messages", 50, 1, 1000)
_BATCH_BYTES = _IntSetting("batch_bytes", 8 * 1024 * 1024, 1, None)
_SETTINGS = (
    _CONNECTIONS,
    _WINDOW_MESSAGES,
    _WINDOW_BYTES,
    _BATCH_MESSAGES,
    _BATCH_BYTES,
)

# The keys of each section; the tests check that the example file uses
# every one of them.
_TOP_KEYS = ("state", "status", "servers", "defaults", "jobs")
_STATUS_KEYS = ("listen",)
_SERVER_KEYS = ("endpoint", "starttls", "tls_ca", "tls_hostname", "timeout", "compress")
_DEFAULTS_KEYS = tuple(s.key for s in _SETTINGS)
_JOB_KEYS = ("name", "source", "destination", "folders", "identity", "eight_bit") + _DEFAULTS_KEYS
_SOURCE_KEYS = (
    "maildir", "eml_dir", "folder", "mbox", "quoting",
    "server", "user", "password", "password_file",
)  # fmt: skip
_SOURCE_KINDS = ("maildir", "eml_dir", "mbox", "server")
_FOLDERS_KEYS = ("include", "exclude", "rename")
_IDENTITIES = ("fingerprint", "message-id", "off")
_EIGHT_BIT = ("literal", "fail")
_QUOTINGS = ("mboxrd", "mboxo")
_DESTINATION_KEYS = ("server", "user", "password", "password_file")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")

# Twisted's endpoint constructors only store the reactor they are given, so
# a placeholder lets Twisted's own parsers validate an endpoint string here
# without fetching the global reactor (only imapmig.tap may) and without
# listening or connecting.
_NO_REACTOR = object()

_TLS_ENDPOINT_ARGUMENTS = frozenset(
    ["trustRoots", "certificate", "privateKey", "caCertsDir", "certKey", "hostname"]
)


def loadConfig(path: str) -> Config:
    """
    Read and validate the configuration file at C{path}.

    @param path: the file's path; it names the file in error messages and
        relative paths inside it are resolved against its directory.
    @return: the configuration.
    @raise ConfigError: the file cannot be read or is not valid YAML (one
        problem), or any problem with its content (every problem found).
    """
    try:
        with open(path, "rb") as f:
            content = f.read()
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a file"]) from None
    except OSError as e:
        raise ConfigError([f"{path}: cannot be read: {e.strerror}"]) from None
    try:
        document = yaml.safe_load(content)
    except yaml.MarkedYAMLError as e:
        raise ConfigError([f"{path}: {_describeYAMLError(e)}"]) from None
    except yaml.YAMLError as e:
        # e.g. a ReaderError (bad encoding): its text spans lines.
        oneLine = " ".join(str(e).split())
        raise ConfigError([f"{path}: invalid YAML: {oneLine}"]) from None
    return parseConfig(document, path)


def parseConfig(document: object, path: str) -> Config:
    """
    Validate an already loaded YAML document.

    @param document: what C{yaml.safe_load} returned.
    @param path: the file it came from: names it in error messages, and
        relative paths are resolved against its directory.
    @return: the configuration.
    @raise ConfigError: every problem found.
    """
    return _ConfigParser(path).parse(document)


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


def _describeYAMLError(error: yaml.MarkedYAMLError) -> str:
    """
    Describe a YAML syntax error in one line: where, what, and where the
    construct it interrupted began.
    """

    def position(mark: yaml.Mark) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    mark = error.problem_mark or error.context_mark
    where = "" if mark is None else f"{position(mark)}: "
    what = error.problem or error.context or "syntax error"
    context = ""
    if error.problem and error.context:
        context = f" ({error.context}"
        if error.context_mark is not None and error.context_mark is not mark:
            context += f" at {position(error.context_mark)}"
        context += ")"
    return f"{where}invalid YAML: {what}{context}"


def _describe(value: object) -> str:
    """
    Name the YAML type of C{value}, for an error message.  Never the value
    itself: it may be a password.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _key(path: str, key: str) -> str:
    """
    The path of C{key} inside the mapping at C{path}.
    """
    return f"{path}.{key}" if path else key


def _splitEndpoint(description: str) -> tuple[list[str], dict[str, str]]:
    """
    Split an endpoint string the way Twisted's parser does: C{:} separates
    arguments, the first C{=} of an argument separates a keyword from its
    value, and a backslash makes the next character literal (C{\\:}).

    @return: the positional arguments (the prefix first, if C{description}
        has one) and the keyword
        arguments.
    @raise ValueError: the string ends with a lone backslash.
    """
    args: list[str] = []
    kwargs: dict[str, str] = {}
    # The argument being read: its keyword, once its "=" is seen, and the
    # characters read so far.
    keyword: str | None = None
    current = ""

    def endArgument() -> None:
        if keyword is None:
            args.append(current)
        else:
            kwargs[keyword] = current

    characters = iter(description)
    for c in characters:
        if c == ":":
            endArgument()
            keyword, current = None, ""
        elif c == "=" and keyword is None:
            keyword, current = current, ""
        elif c == "\\":
            try:
                current += next(characters)
            except StopIteration:
                raise ValueError("it ends with a lone backslash") from None
        else:
            current += c
    endArgument()
    return args, kwargs


def _twistedMessage(error: Exception) -> str:
    """
    The message of an exception raised by Twisted's endpoint parser,
    without the name of the constructor it comes from.
    """
    return re.sub(r"^[\w.]+\(\) ", "", str(error)) or type(error).__name__


@frozen
class _ClientEndpoint:
    """
    What a valid C{servers.*.endpoint} string says.
    """

    implicitTLS: bool
    tcpEndpoint: str
    host: str


class _ConfigParser:
    """
    Walks a YAML document, building the configuration and collecting every
    problem.

    Each C{_read*} method returns the value it read, or L{None} after
    recording why it could not.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._directory = os.path.dirname(os.path.abspath(path))
        self._problems: list[str] = []

    def parse(self, document: object) -> Config:
        """
        Build the configuration from C{document}.

        @raise ConfigError: every problem found.
        """
        if document is None:
            raise ConfigError([f"{self._path}: the file is empty"])
        if not isinstance(document, dict):
            raise ConfigError(
                [
                    f"{self._path}: the document must be a mapping of settings"
                    f" ({', '.join(_TOP_KEYS)}), not {_describe(document)}"
                ]
            )
        top = self._readMapping(document, "", _TOP_KEYS)
        assert top is not None

        statePath = self._readStatePath(top.get("state", _DEFAULT_STATE_PATH))
        status = self._readStatus(top)
        servers = self._readServers(top)
        defaults = self._readDefaults(top)
        jobs = self._readJobs(top, servers, defaults)

        if self._problems:
            raise ConfigError(self._problems)
        assert statePath is not None and servers is not None and jobs is not None
        return Config(
            path=os.path.abspath(self._path),
            statePath=statePath,
            status=status,
            servers=tuple(s for s in servers.values() if s is not None),
            jobs=jobs,
        )

    def _problem(self, path: str, message: str) -> None:
        """
        Record a problem with the key at C{path} (the whole document if
        empty).
        """
        where = f"{path}: " if path else ""
        self._problems.append(f"{self._path}: {where}{message}")

    def _resolve(self, path: str) -> str:
        """
        The absolute form of a path written in the file: relative paths are
        relative to the file's directory.
        """
        return os.path.abspath(os.path.join(self._directory, path))

    # Generic readers

    def _readMapping(
        self, value: object, path: str, keys: Collection[str]
    ) -> dict[str, object] | None:
        """
        Read a mapping whose keys must be among C{keys}.  Unknown keys are
        problems, with a hint when one is close to a known key; the known
        keys are returned even then, so their values are checked too.
        """
        if not isinstance(value, dict):
            self._problem(path, f"expected a mapping, got {_describe(value)}")
            return None
        result: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self._problem(path, f"key {key!r} is {_describe(key)}, not a string")
            elif key not in keys:
                close = difflib.get_close_matches(key, keys, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else f"known keys: {', '.join(keys)}"
                )
                self._problem(_key(path, key), f"unknown key {key!r} ({hint})")
            else:
                result[key] = item
        return result

    def _readString(self, value: object, path: str) -> str | None:
        """
        Read a non-empty string.
        """
        if not isinstance(value, str):
            hint = (
                " (quote it to make YAML read it as text)"
                if isinstance(value, (bool, int, float))
                else ""
            )
            self._problem(path, f"expected a string, got {_describe(value)}{hint}")
            return None
        if not value:
            self._problem(path, "must not be empty")
            return None
        return value

    def _readInteger(
        self, value: object, path: str, minimum: int, maximum: int | None
    ) -> int | None:
        """
        Read an integer within bounds.  YAML's C{true} and C{false} are
        booleans, not integers, whatever Python thinks.
        """
        if isinstance(value, bool) or not isinstance(value, int):
            self._problem(path, f"expected an integer, got {_describe(value)}")
            return None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = (
                f"at least {minimum}"
                if maximum is None
                else f"between {minimum} and {maximum}"
            )
            self._problem(path, f"must be {bounds}, not {value}")
            return None
        return value

    def _readSeconds(self, value: object, path: str) -> float | None:
        """
        Read a finite, positive number of seconds.
        """
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._problem(path, f"expected a number of seconds, got {_describe(value)}")
            return None
        if not (math.isfinite(value) and value > 0):
            self._problem(path, f"must be greater than 0 seconds, not {value}")
            return None
        return float(value)

    def _readDirectory(self, value: object, path: str) -> str | None:
        """
        Read the path of an existing, readable directory.
        """
        written = self._readString(value, path)
        if written is None:
            return None
        resolved = self._resolve(written)
        if not os.path.exists(resolved):
            self._problem(path, f"no such directory: {resolved}")
        elif not os.path.isdir(resolved):
            self._problem(path, f"not a directory: {resolved}")
        elif not os.access(resolved, os.R_OK | os.X_OK):
            self._problem(path, f"{resolved} cannot be read (permission denied)")
        else:
            return resolved
        return None

    # Sections

    def _readStatePath(self, value: object) -> str | None:
        """
        Read C{state}: the SQLite database, in an existing directory.
        """
        written = self._readString(value, "state")
        if written is None:
            return None
        resolved = self._resolve(written)
        parent = os.path.dirname(resolved)
        if os.path.isdir(resolved):
            self._problem("state", f"{resolved} is a directory; give a file name in it")
        elif not os.path.isdir(parent):
            self._problem("state", f"directory {parent} does not exist")
        elif not os.access(parent, os.W_OK | os.X_OK):
            self._problem("state", f"directory {parent} is not writable")
        else:
            return resolved
        return None

    def _readStatus(self, top: Mapping[str, object]) -> StatusConfig | None:
        """
        Read C{status}: absent means the default listener, C{off} none.
        """
        if "status" not in top:
            return StatusConfig(listen=_DEFAULT_LISTEN)
        value = top["status"]
        if value is False or value == "off":
            return None
        if not isinstance(value, dict):
            self._problem(
                "status",
                "expected a mapping {listen: ENDPOINT} or off,"
                f" got {_describe(value)}",
            )
            return None
        status = self._readMapping(value, "status", _STATUS_KEYS)
        assert status is not None
        listen = self._readString(
            status.get("listen", _DEFAULT_LISTEN), "status.listen"
        )
        if listen is None or not self._checkServerEndpoint(listen, "status.listen"):
            return None
        return StatusConfig(listen=listen)

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
                f"invalid endpoint {description!r}: {_twistedMessage(e)}"
                f" (e.g. {_DEFAULT_LISTEN!r})",
            )
            return False
        args, kwargs = _splitEndpoint(description)
        if args[0].lower() in ("tcp", "ssl"):
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

    def _readServer(self, name: str, value: object, path: str) -> ServerConfig | None:
        """
        Read one server.
        """
        server = self._readMapping(value, path, _SERVER_KEYS)
        if server is None:
            return None
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

        tlsCA = None
        if server.get("tls_ca") is not None:
            tlsCA = self._readCertificates(server["tls_ca"], _key(path, "tls_ca"))
            ok = ok and tlsCA is not None
        tlsHostname = None
        if server.get("tls_hostname") is not None:
            tlsHostname = self._readString(
                server["tls_hostname"], _key(path, "tls_hostname")
            )
            ok = ok and tlsHostname is not None
        if endpoint is not None and starttls is False and not endpoint.implicitTLS:
            for key in ("tls_ca", "tls_hostname"):
                if server.get(key) is not None:
                    self._problem(
                        _key(path, key),
                        "has no effect without TLS (starttls: off on a tcp: endpoint)",
                    )
                    ok = False

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

        if not ok:
            return None
        assert written is not None and endpoint is not None
        assert starttls is not None and timeout is not None and compress is not None
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
        )

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
            args, kwargs = _splitEndpoint(rest)
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

    def _readDefaults(self, top: Mapping[str, object]) -> dict[str, int]:
        """
        Read C{defaults}; a setting that is absent or invalid takes its
        built-in default, so jobs can still be checked.
        """
        values = {setting.key: setting.default for setting in _SETTINGS}
        if "defaults" not in top:
            return values
        defaults = self._readMapping(top["defaults"], "defaults", _DEFAULTS_KEYS)
        if defaults is None:
            return values
        for setting in _SETTINGS:
            if setting.key in defaults:
                value = self._readInteger(
                    defaults[setting.key],
                    _key("defaults", setting.key),
                    setting.minimum,
                    setting.maximum,
                )
                if value is not None:
                    values[setting.key] = value
        return values

    def _readJobs(
        self,
        top: Mapping[str, object],
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> tuple[JobConfig, ...] | None:
        """
        Read C{jobs}: a non-empty list with unique names.
        """
        if "jobs" not in top:
            self._problem("jobs", "missing: at least one job is required")
            return None
        value = top["jobs"]
        if not isinstance(value, list):
            self._problem("jobs", f"expected a list of jobs, got {_describe(value)}")
            return None
        if not value:
            self._problem("jobs", "at least one job is required")
            return None
        jobs: list[JobConfig] = []
        firstIndex: dict[str, int] = {}
        for index, item in enumerate(value):
            job = self._readJob(
                item, f"jobs[{index}]", index, servers, defaults, firstIndex
            )
            if job is not None:
                jobs.append(job)
        return tuple(jobs)

    def _readJob(
        self,
        value: object,
        path: str,
        index: int,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
        firstIndex: dict[str, int],
    ) -> JobConfig | None:
        """
        Read one job, recording its name in C{firstIndex}.
        """
        job = self._readMapping(value, path, _JOB_KEYS)
        if job is None:
            return None
        ok = True

        name = None
        if "name" not in job:
            self._problem(_key(path, "name"), "missing: every job needs a unique name")
        else:
            name = self._readString(job["name"], _key(path, "name"))
            if name is not None and not _NAME.fullmatch(name):
                self._problem(
                    _key(path, "name"),
                    f"invalid job name {name!r}: use letters, digits and . _ @ -,"
                    " starting with a letter or digit",
                )
                name = None
            if name is not None:
                if name in firstIndex:
                    self._problem(
                        _key(path, "name"),
                        f"duplicate job name {name!r}"
                        f" (first used by jobs[{firstIndex[name]}])",
                    )
                    name = None
                else:
                    firstIndex[name] = index
        ok = ok and name is not None

        source = None
        if "source" not in job:
            self._problem(
                _key(path, "source"),
                "missing: give {maildir: DIR}, {eml_dir: DIR}, {mbox: PATH}"
                " or {server: NAME, user: USER, password_file: FILE}",
            )
        else:
            source = self._readSource(job["source"], _key(path, "source"), servers)
        ok = ok and source is not None

        folders = FolderRules()
        if "folders" in job:
            rules = self._readFolderRules(job["folders"], _key(path, "folders"))
            if rules is None:
                ok = False
            else:
                folders = rules

        identity = "fingerprint"
        if "identity" in job:
            chosen = self._readChoice(
                job["identity"], _key(path, "identity"), _IDENTITIES, "identity check"
            )
            if chosen is None:
                ok = False
            else:
                identity = chosen

        eightBit = "literal"
        if "eight_bit" in job:
            chosen = self._readChoice(
                job["eight_bit"], _key(path, "eight_bit"), _EIGHT_BIT, "eight_bit choice"
            )
            if chosen is None:
                ok = False
            else:
                eightBit = chosen

        destination = None
        if "destination" not in job:
            self._problem(
                _key(path, "destination"),
                "missing: give {server: NAME, user: USER, password_file: FILE}",
            )
        else:
            destination = self._readDestination(
                job["destination"], _key(path, "destination"), servers
            )
        ok = ok and destination is not None

        settings = dict(defaults)
        for setting in _SETTINGS:
            if setting.key in job:
                override = self._readInteger(
                    job[setting.key],
                    _key(path, setting.key),
                    setting.minimum,
                    setting.maximum,
                )
                if override is None:
                    ok = False
                else:
                    settings[setting.key] = override

        if not ok:
            return None
        assert name is not None and source is not None and destination is not None
        return JobConfig(
            name=name,
            source=source,
            destination=destination,
            connections=settings[_CONNECTIONS.key],
            pipeline=PipelineConfig(
                windowMessages=settings[_WINDOW_MESSAGES.key],
                windowBytes=settings[_WINDOW_BYTES.key],
                batchMessages=settings[_BATCH_MESSAGES.key],
                batchBytes=settings[_BATCH_BYTES.key],
            ),
            folders=folders,
            identity=identity,
            eightBit=eightBit,
        )

    def _readSource(
        self,
        value: object,
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> SourceConfig | None:
        """
        Read a job's C{source}: exactly one of C{maildir}, C{eml_dir},
        C{mbox} and C{server}, with the keys that kind takes.
        """
        source = self._readMapping(value, path, _SOURCE_KEYS)
        if source is None:
            return None
        kinds = [kind for kind in _SOURCE_KINDS if kind in source]
        if len(kinds) != 1:
            self._problem(
                path,
                "give exactly one of maildir: DIR, eml_dir: DIR, mbox: PATH"
                " or server: NAME" + (f", not {' and '.join(kinds)}" if kinds else ""),
            )
            return None
        (kind,) = kinds
        allowed = {
            "maildir": {"maildir"},
            "eml_dir": {"eml_dir", "folder"},
            "mbox": {"mbox", "quoting"},
            "server": {"server", "user", "password", "password_file"},
        }[kind]
        extra = sorted(set(source) - allowed)
        if extra:
            for key in extra:
                self._problem(
                    _key(path, key),
                    f"does not apply to a {kind} source (it takes: {', '.join(sorted(allowed))})",
                )
            return None
        if kind == "maildir":
            return self._readMaildir(source["maildir"], _key(path, "maildir"))
        if kind == "mbox":
            return self._readMbox(source, path)
        if kind == "server":
            account = self._readAccount(source, path, servers)
            if account is None:
                return None
            return ImapSourceConfig(*account)
        directory = self._readDirectory(source["eml_dir"], _key(path, "eml_dir"))
        folder = self._readFolder(
            source.get("folder", _DEFAULT_FOLDER), _key(path, "folder")
        )
        if directory is None or folder is None:
            return None
        return EmlSourceConfig(path=directory, folder=folder)

    def _readMbox(self, source: Mapping[str, object], path: str) -> MboxSourceConfig | None:
        """
        Read an mbox source: an existing file or directory, and its quoting.
        """
        written = self._readString(source["mbox"], _key(path, "mbox"))
        quoting = "mboxrd"
        ok = written is not None
        if "quoting" in source:
            chosen = self._readChoice(
                source["quoting"], _key(path, "quoting"), _QUOTINGS, "mbox quoting"
            )
            if chosen is None:
                ok = False
            else:
                quoting = chosen
        if written is None or not ok:
            return None
        resolved = self._resolve(written)
        if not os.path.exists(resolved):
            self._problem(_key(path, "mbox"), f"{resolved} does not exist")
            return None
        if not (os.path.isfile(resolved) or os.path.isdir(resolved)):
            self._problem(
                _key(path, "mbox"), f"{resolved} is neither an mbox file nor a directory"
            )
            return None
        if not os.access(resolved, os.R_OK):
            self._problem(_key(path, "mbox"), f"{resolved} is not readable")
            return None
        return MboxSourceConfig(path=resolved, quoting=quoting)

    def _readChoice(
        self, value: object, path: str, choices: Sequence[str], what: str
    ) -> str | None:
        """
        Read one of C{choices} (the first being the default).
        """
        written = self._readString(value, path)
        if written is None:
            return None
        if written not in choices:
            self._problem(
                path,
                f"unknown {what} {written!r}: use {choices[0]} (the default)"
                f" or {', '.join(choices[1:])}",
            )
            return None
        return written

    def _readFolderRules(self, value: object, path: str) -> FolderRules | None:
        """
        Read a job's C{folders}: C{include} and C{exclude} lists of
        patterns, and a C{rename} mapping, all with C{/} between levels.
        """
        rules = self._readMapping(value, path, _FOLDERS_KEYS)
        if rules is None:
            return None
        ok = True
        patterns: dict[str, tuple[str, ...]] = {}
        for key in ("include", "exclude"):
            if key not in rules:
                patterns[key] = ()
                continue
            items = rules[key]
            if isinstance(items, str):
                items = [items]
            if not isinstance(items, list):
                self._problem(
                    _key(path, key), f"expected a list of folder patterns, not {_describe(items)}"
                )
                ok = False
                continue
            read = []
            for index, item in enumerate(items):
                pattern = self._readString(item, f"{_key(path, key)}[{index}]")
                if pattern is None:
                    ok = False
                elif not pattern.strip("/"):
                    self._problem(f"{_key(path, key)}[{index}]", "an empty folder pattern")
                    ok = False
                else:
                    read.append(pattern.strip("/"))
            patterns[key] = tuple(read)
        renames: list[tuple[str, str]] = []
        if "rename" in rules:
            mapping = rules["rename"]
            if not isinstance(mapping, dict):
                self._problem(
                    _key(path, "rename"),
                    "expected a mapping of source folder to destination folder"
                    f" (e.g. {{Sent Items: Sent}}), not {_describe(mapping)}",
                )
                ok = False
            else:
                for source, target in mapping.items():
                    where = f"{_key(path, 'rename')}[{source!r}]"
                    sourcePath = self._readFolder(source, where)
                    targetPath = self._readFolder(target, where)
                    if sourcePath is None or targetPath is None:
                        ok = False
                    else:
                        renames.append(("/".join(sourcePath), "/".join(targetPath)))
        if not ok:
            return None
        return FolderRules(
            include=patterns["include"], exclude=patterns["exclude"], rename=tuple(renames)
        )

    def _readMaildir(self, value: object, path: str) -> MaildirSourceConfig | None:
        """
        Read a Maildir's path: a directory with C{cur} and C{new} in it.
        """
        directory = self._readDirectory(value, path)
        if directory is None:
            return None
        missing = [
            sub
            for sub in ("cur", "new")
            if not os.path.isdir(os.path.join(directory, sub))
        ]
        if missing:
            self._problem(
                path,
                f"{directory} is not a Maildir: it has no"
                f" {' or '.join(m + '/' for m in missing)} subdirectory",
            )
            return None
        return MaildirSourceConfig(path=directory)

    def _readFolder(self, value: object, path: str) -> tuple[str, ...] | None:
        """
        Read a folder name, its hierarchy written with C{/}.
        """
        written = self._readString(value, path)
        if written is None:
            return None
        components = tuple(written.split("/"))
        if not all(components):
            self._problem(
                path,
                f"invalid folder {written!r}: an empty name between slashes"
                " (write the hierarchy as e.g. Archive/2019)",
            )
            return None
        return components

    def _readDestination(
        self,
        value: object,
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> DestinationConfig | None:
        """
        Read a job's C{destination}.
        """
        destination = self._readMapping(value, path, _DESTINATION_KEYS)
        if destination is None:
            return None
        account = self._readAccount(destination, path, servers)
        if account is None:
            return None
        return DestinationConfig(*account)

    def _readAccount(
        self,
        destination: Mapping[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> tuple[ServerConfig, str, Secret] | None:
        """
        Read an account: C{server} (one of C{servers}), C{user}, and the
        password.
        """
        ok = True

        server = None
        if "server" not in destination:
            self._problem(_key(path, "server"), "missing: name one of the servers")
            ok = False
        else:
            name = self._readString(destination["server"], _key(path, "server"))
            if name is None:
                ok = False
            elif servers is None:
                # servers itself is missing or invalid, which is reported.
                ok = False
            elif name not in servers:
                self._problem(
                    _key(path, "server"),
                    f"no server named {name!r}"
                    f" (servers: {', '.join(servers) or 'none'})",
                )
                ok = False
            else:
                server = servers[name]
                ok = ok and server is not None

        user = None
        if "user" not in destination:
            self._problem(_key(path, "user"), "missing: the login name")
        else:
            user = self._readString(destination["user"], _key(path, "user"))
        ok = ok and user is not None

        password = self._readPassword(destination, path)
        ok = ok and password is not None

        if not ok:
            return None
        assert server is not None and user is not None and password is not None
        return server, user, password

    def _readPassword(
        self, destination: Mapping[str, object], path: str
    ) -> Secret | None:
        """
        Read exactly one of C{password} and C{password_file}.  No message
        shows the password.
        """
        if "password" in destination and "password_file" in destination:
            self._problem(
                path, "give exactly one of password or password_file, not both"
            )
            return None
        if "password_file" in destination:
            written = self._readString(
                destination["password_file"], _key(path, "password_file")
            )
            if written is None:
                return None
            try:
                return Secret(readPasswordFile(self._resolve(written)))
            except PasswordFileError as e:
                self._problem(_key(path, "password_file"), str(e))
                return None
        if "password" in destination:
            password = self._readString(destination["password"], _key(path, "password"))
            return None if password is None else Secret(password)
        self._problem(
            path,
            "missing password: give password_file: FILE"
            " (or password: TEXT, discouraged)",
        )
        return None
