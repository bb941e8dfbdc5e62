# -*- test-case-name: tests.test_config -*-
"""
Accounts: a server, a user and a password (a password file, a systemd
credential, or inline: L{imapmig.config.secretkeys}), for a destination or
an IMAP source; or, instead of the user's password, an admin credential
(C{admin: {user: NAME, password_file: FILE}}) that logs in on behalf of
the user (a "master user"); or an OAuth 2.0 access token
(C{oauth2: {token_file: FILE}}, C{oauth2: {token_credential: NAME}} or
C{oauth2: {token_command: [ARGV...]}},
checked here and obtained afresh at each login, L{imapmig.oauth.tokens}; or
C{oauth2: {token_endpoint: URL, client_id: ID, refresh_token_file: FILE}}
for the refresh grant that imapmig runs itself, L{imapmig.oauth.tokencache}).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from urllib.parse import SplitResult, urlsplit
from typing import Any, Callable, Mapping

from imapmig.config.model import (
    DestinationConfig,
    ServerConfig,
    TokenCommandConfig,
    TokenFileConfig,
    TokenRefreshConfig,
    TokenSourceConfig,
)
from imapmig.config.reader import Check, Key, Step, _describe, _key, givenKeys, notThese
from imapmig.config.secretkeys import SecretsReader, secretKeys
from imapmig.access.secrets import Secret

# password, password_file, password_credential.
_PASSWORD_KEYS = secretKeys("password", inline=True)

_DESTINATION_KEYS = ("server", "user", *_PASSWORD_KEYS, "admin", "oauth2")

_TOKEN_KEYS = secretKeys("token")

_CLIENT_SECRET_KEYS = secretKeys("client_secret")

_OAUTH2_KEYS = (
    *_TOKEN_KEYS,
    "token_command",
    "timeout",
    "token_endpoint",
    "client_id",
    *_CLIENT_SECRET_KEYS,
    "refresh_token_file",
    "scope",
    "tls_ca",
)

_REFRESH_ONLY_KEYS = (
    "client_id",
    *_CLIENT_SECRET_KEYS,
    "refresh_token_file",
    "scope",
    "tls_ca",
)

_DEFAULT_TOKEN_REQUEST_TIMEOUT = 30.0

_DEFAULT_TOKEN_COMMAND_TIMEOUT = 30.0

_ADMIN_KEYS = ("user", *_PASSWORD_KEYS)

# How an account logs in: the password (the admin's with an admin; None
# with a token), the admin's login name, and the token source.
_Login = tuple[Secret | None, str | None, TokenSourceConfig | None]


class AccountsReader(SecretsReader):
    """
    Reads accounts and their credentials.
    """

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
        return DestinationConfig(*account, credentialKey=credentialKey(destination, path))

    def _readRequiredString(
        self, mapping: Mapping[str, object], key: str, path: str, missing: str
    ) -> str | None:
        """
        Read the string C{key} of C{mapping}, which must be there.

        @param path: the path of C{mapping}.
        @param missing: what the key holds, for the problem when it is
            missing.
        @return: the string, or L{None} after reporting a problem.
        """
        if key not in mapping:
            self._problem(_key(path, key), f"missing: {missing}")
            return None
        return self._readString(mapping[key], _key(path, key))

    def _readAccount(
        self,
        destination: Mapping[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> tuple[ServerConfig, str, Secret | None, str | None, TokenSourceConfig | None] | None:
        """
        Read an account: C{server} (one of C{servers}), C{user}, and the
        user's password, an C{admin} credential, or an C{oauth2} token
        source.

        @return: the server, the user, the password to log in with (the
            admin's when there is an admin; L{None} with a token), the
            admin's login name or L{None}, and the token source or L{None}.
        """
        server = self._readAccountServer(destination, path, servers)
        user = self._readRequiredString(destination, "user", path, "the login name")
        login = self._readLogin(destination, path)
        if server is None or user is None or login is None:
            return None
        return (server, user, *login)

    def _readAccountServer(
        self,
        account: Mapping[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> ServerConfig | None:
        """
        Read an account's C{server}: the name of one of C{servers} (L{None}
        when C{servers} itself is missing or invalid, which is reported).
        """
        name = self._readRequiredString(account, "server", path, "name one of the servers")
        if name is None or servers is None:
            return None
        if name not in servers:
            self._problem(
                _key(path, "server"),
                f"no server named {name!r}"
                f" (servers: {', '.join(servers) or 'none'})",
            )
            return None
        return servers[name]

    def _readLogin(
        self, account: Mapping[str, object], path: str
    ) -> tuple[Secret | None, str | None, TokenSourceConfig | None] | None:
        """
        Read how an account logs in: an C{oauth2} token source, an
        C{admin} credential, or the user's password.

        @return: the password (the admin's with an admin; L{None} with a
            token), the admin's login name or L{None}, and the token source
            or L{None}.
        """
        kind = next((kind for kind in ("oauth2", "admin") if kind in account), "password")
        return _LOGINS[kind](self, account, path)

    def _readOAuth2Login(self, account: Mapping[str, object], path: str) -> _Login | None:
        """
        Read an account's C{oauth2} token source (L{_readOAuth2}).
        """
        oauth2 = self._readOAuth2(account, path)
        return None if oauth2 is None else (None, None, oauth2)

    def _readPasswordLogin(self, account: Mapping[str, object], path: str) -> _Login | None:
        """
        Read the user's own password (L{_readPassword}).
        """
        password = self._readPassword(account, path)
        return None if password is None else (password, None, None)

    def _readOAuth2(
        self, destination: Mapping[str, object], path: str
    ) -> TokenSourceConfig | None:
        """
        Read C{oauth2}: exactly one of C{token_file} or C{token_credential}
        (checked now as a password file is), C{token_command} (a list of
        strings, its program found now), with C{timeout} for the command,
        and C{token_endpoint}; given instead of any password or admin.
        """
        others = givenKeys(destination, (*_PASSWORD_KEYS, "admin"))
        if others:
            self._problem(
                path,
                f"give an OAuth2 token source (oauth2) or {' and '.join(others)},"
                " not both",
            )
            return None
        oauthPath = _key(path, "oauth2")
        oauth2 = self._readMapping(destination["oauth2"], oauthPath, _OAUTH2_KEYS)
        if oauth2 is None:
            return None
        kind = self._tokenKind(oauth2, oauthPath)
        if kind is None:
            return None
        return _TOKEN_SOURCES[kind](self, oauth2, oauthPath)

    def _tokenKind(self, oauth2: Mapping[str, object], path: str) -> str | None:
        """
        Which token source C{oauth2} gives: exactly one of L{_TOKEN_KEYS},
        C{token_command} and C{token_endpoint}, and no key of the refresh
        grant's but with C{token_endpoint}.
        """
        kinds = givenKeys(oauth2, (*_TOKEN_KEYS, "token_command", "token_endpoint"))
        if len(kinds) != 1:
            self._problem(
                path,
                "give exactly one of token_file: FILE, token_credential: NAME,"
                " token_command: [PROGRAM, ARGS...]"
                " or token_endpoint: URL (with client_id and refresh_token_file)"
                + notThese(kinds),
            )
            return None
        misplaced = _misplacedKey(oauth2, kinds[0])
        if misplaced is not None:
            self._problem(_key(path, misplaced), "applies to token_endpoint only")
            return None
        return kinds[0]

    def _readTokenFile(
        self, oauth2: Mapping[str, object], path: str
    ) -> TokenFileConfig | None:
        """
        Read C{token_file} (or C{token_credential}): read now to check it,
        and again at each login (L{TokenFileConfig}).
        """
        if "timeout" in oauth2:
            self._problem(_key(path, "timeout"), "applies to token_command only")
            return None
        token = self._readSecret(oauth2, path, "token", "token")
        if token is None:
            return None
        assert token[1] is not None
        return TokenFileConfig(token[1])

    def _readTokenCommand(
        self, oauth2: Mapping[str, object], path: str
    ) -> TokenCommandConfig | None:
        """
        Read C{token_command} and its C{timeout}.
        """
        values = self._readKeys(oauth2, path, _TOKEN_COMMAND_TABLE)
        if values is None:
            return None
        argv, program = values["command"]
        return TokenCommandConfig(argv, program, values["timeout"])

    def _readTokenRefresh(
        self, oauth2: Mapping[str, object], path: str
    ) -> TokenRefreshConfig | None:
        """
        Read the refresh grant's keys (L{_TOKEN_REFRESH_TABLE}):
        C{token_endpoint} (C{https}, or C{http} to a loopback address),
        C{client_id}, C{refresh_token_file} (a secret file in a directory
        imapmig may write, since a rotated refresh token replaces it), and
        the optional C{client_secret_file} (or C{client_secret_credential}),
        C{scope}, C{timeout} and C{tls_ca}.
        """
        values = self._readKeys(oauth2, path, _TOKEN_REFRESH_TABLE)
        if values is None:
            return None
        return TokenRefreshConfig(**values)

    def _readTokenEndpoint(self, value: object, path: str) -> str | None:
        """
        Read C{token_endpoint}: a URL L{_endpointProblem} accepts.
        """
        return self._accepted(self._readString(value, path), path, _endpointProblem)

    def _readClientSecret(
        self, oauth2: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Read the optional C{client_secret_file} (or
        C{client_secret_credential}).
        """
        values["clientSecret"] = None
        if not any(key in oauth2 for key in _CLIENT_SECRET_KEYS):
            return True
        read = self._readSecret(oauth2, path, "client_secret", "client secret")
        values["clientSecret"] = None if read is None else read[0]
        return read is not None

    def _readRefreshTokenFile(self, value: object, path: str) -> str | None:
        """
        Read C{refresh_token_file}: a secret file (checked as a password
        file is) in a directory imapmig may write.
        """
        refreshFile = self._readPath(value, path)
        if self._readSecretFile(refreshFile, path, "refresh token") is None:
            return None
        return self._accepted(refreshFile, path, _refreshDirectoryProblem)

    def _readTokenCA(self, value: object, path: str) -> str | None:
        """
        Read the token endpoint's C{tls_ca}: an existing file.
        """
        return self._accepted(self._readPath(value, path), path, _noFileProblem)

    def _readCommand(
        self, value: object, path: str
    ) -> tuple[tuple[str, ...], str] | None:
        """
        Read a command: a non-empty list of strings whose first names a
        program (a path, relative to the file's directory when it has a
        C{/}, or a name looked up in C{PATH}).

        @return: the argument vector and the program's absolute path.
        """
        argv = self._readArgv(value, path)
        if argv is None:
            return None
        executable = self._findProgram(argv[0], f"{path}[0]")
        if executable is None:
            return None
        return tuple(argv), executable

    def _readArgv(self, value: object, path: str) -> list[str] | None:
        """
        Read a command's argument vector: a non-empty list of strings (the
        first that is not ends the reading).
        """
        if not isinstance(value, list) or not value:
            self._problem(
                path,
                f"expected a list [PROGRAM, ARGS...], got {_describe(value)}",
            )
            return None
        argv = self._readEach(value, path, self._readString)
        return None if argv is None else list(argv)

    def _findProgram(self, program: str, path: str) -> str | None:
        """
        The absolute path of the executable C{program}: a path, relative to
        the file's directory when it has a C{/}, or a name looked up in
        C{PATH}.
        """
        if "/" in program:
            resolved = self._resolve(program)
            if os.path.isfile(resolved) and os.access(resolved, os.X_OK):
                return resolved
            self._problem(path, f"no executable program {resolved}")
            return None
        found = shutil.which(program)
        if found is None:
            self._problem(path, f"no executable program {program!r} in PATH")
            return None
        return os.path.abspath(found)

    def _readAdminLogin(self, destination: Mapping[str, object], path: str) -> _Login | None:
        """
        Read C{admin}: the admin's C{user} and exactly one of its
        C{password}, C{password_file} and C{password_credential}
        (L{_ADMIN_TABLE}), given instead of the user's password.
        """
        if givenKeys(destination, _PASSWORD_KEYS):
            self._problem(
                path,
                "give the user's password (password, password_file or"
                " password_credential) or an admin credential (admin), not both",
            )
            return None
        adminPath = _key(path, "admin")
        admin = self._readMapping(destination["admin"], adminPath, _ADMIN_KEYS)
        values = None if admin is None else self._readKeys(admin, adminPath, _ADMIN_TABLE)
        return None if values is None else (values["password"], values["user"], None)

    def _readAdminPassword(
        self, admin: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Read the admin's password (L{_readPassword}).
        """
        values["password"] = self._readPassword(admin, path)
        return values["password"] is not None

    def _readPassword(
        self, destination: Mapping[str, object], path: str
    ) -> Secret | None:
        """
        Read exactly one of C{password_file}, C{password_credential} and
        C{password}.  No message shows the password.
        """
        read = self._readSecret(
            destination,
            path,
            "password",
            "password",
            inline=True,
            missing="missing password: give password_file: FILE or"
            " password_credential: NAME (or password: TEXT, discouraged)",
        )
        return None if read is None else read[0]


def _misplacedKey(oauth2: Mapping[str, object], kind: str) -> str | None:
    """
    The first key of the refresh grant's in C{oauth2} when its token
    source C{kind} is not C{token_endpoint}, or L{None}.
    """
    if kind == "token_endpoint":
        return None
    return next((key for key in _REFRESH_ONLY_KEYS if key in oauth2), None)


def _refreshDirectoryProblem(refreshFile: str) -> str | None:
    """
    Why the refresh token file C{refreshFile} cannot be replaced by a
    rotated refresh token, or L{None}: its directory must be writable.
    """
    directory = os.path.dirname(refreshFile)
    if not os.access(directory, os.W_OK | os.X_OK):
        return (
            f"directory {directory} is not writable: a rotated"
            " refresh token replaces the file"
        )
    return None


def _noFileProblem(resolved: str) -> str | None:
    """
    Why C{resolved} is not a file, or L{None}.
    """
    return None if os.path.isfile(resolved) else f"no file {resolved}"


def credentialKey(account: Mapping[str, object], path: str) -> str:
    """
    The key of the account at C{path} that holds its credential, as a
    refused login names it: C{PATH.password_file} (or C{password},
    C{password_credential}), C{PATH.admin.password_file} for an admin's,
    C{PATH.oauth2} for a token.
    """
    if "oauth2" in account:
        return _key(path, "oauth2")
    admin = account.get("admin")
    if isinstance(admin, Mapping):
        account, path = admin, _key(path, "admin")
    given = givenKeys(account, _PASSWORD_KEYS)
    return _key(path, given[0] if given else "password_file")


def _endpointProblem(url: str) -> str | None:
    """
    Why C{url} cannot be a token endpoint, or L{None} (L{urlProblem}).
    """
    return urlProblem(url, "give the client's secret in client_secret_file, not in the URL")


def urlProblem(url: str, secretInURL: str) -> str | None:
    """
    Why C{url} cannot be an endpoint imapmig sends a secret to, or L{None}:
    it must be C{https://HOST...}, or C{http://} to a loopback address (a
    secret never crosses a network in the clear), without a user or
    password in it (C{secretInURL} says where one goes instead).
    """
    parts = _splitURL(url)
    if isinstance(parts, str):
        return parts
    if not _isWebURL(parts):
        return "expected an https:// URL"
    if _holdsCredentials(parts):
        return secretInURL
    if _plainToNetwork(parts):
        return (
            "plain http is allowed to a loopback address only"
            " (127.0.0.0/8, ::1, localhost): use https"
        )
    return None


def _isWebURL(parts: SplitResult) -> bool:
    """
    Whether a URL is C{https:} or C{http:} with a host.
    """
    return parts.scheme in ("https", "http") and bool(parts.hostname)


def _holdsCredentials(parts: SplitResult) -> bool:
    """
    Whether a URL holds a user or a password.
    """
    return parts.username is not None or parts.password is not None


def _plainToNetwork(parts: SplitResult) -> bool:
    """
    Whether a URL is plain C{http:} to a host other than a loopback
    address.
    """
    return parts.scheme == "http" and not isLoopback(parts.hostname or "")


def _splitURL(url: str) -> SplitResult | str:
    """
    The parts of C{url}, or why it is not a URL.
    """
    try:
        parts = urlsplit(url)
        parts.port
    except ValueError as e:
        return f"not a URL: {e}"
    return parts


def isLoopback(host: str) -> bool:
    """
    Whether C{host} (a URL's host name) is C{localhost} or a loopback
    address.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_LOGINS: dict[str, Callable[[AccountsReader, Mapping[str, object], str], _Login | None]] = {
    "oauth2": AccountsReader._readOAuth2Login,
    "admin": AccountsReader._readAdminLogin,
    "password": AccountsReader._readPasswordLogin,
}

# An admin credential: its login name and its password.
_ADMIN_TABLE: tuple[Step, ...] = (
    Key("user", AccountsReader._readString, missing="missing: the admin's login name"),
    Check(AccountsReader._readAdminPassword),
)

_TOKEN_SOURCES: dict[
    str, Callable[[AccountsReader, Mapping[str, object], str], TokenSourceConfig | None]
] = {
    **{key: AccountsReader._readTokenFile for key in _TOKEN_KEYS},
    "token_command": AccountsReader._readTokenCommand,
    "token_endpoint": AccountsReader._readTokenRefresh,
}

_TOKEN_COMMAND_TABLE: tuple[Step, ...] = (
    Key("timeout", AccountsReader._readSeconds, default=_DEFAULT_TOKEN_COMMAND_TIMEOUT),
    Key("token_command", AccountsReader._readCommand, "command"),
)

# The refresh grant's keys, each a field of TokenRefreshConfig.
_TOKEN_REFRESH_TABLE: tuple[Step, ...] = (
    Key("token_endpoint", AccountsReader._readTokenEndpoint, "tokenEndpoint"),
    Key("client_id", AccountsReader._readString, "clientId",
        missing="missing: the OAuth client's identifier"),
    Check(AccountsReader._readClientSecret),
    Key("refresh_token_file", AccountsReader._readRefreshTokenFile, "refreshTokenFile",
        missing="missing: the file holding the refresh token"),
    Key("scope", AccountsReader._readString),
    Key("timeout", AccountsReader._readSeconds, default=_DEFAULT_TOKEN_REQUEST_TIMEOUT),
    Key("tls_ca", AccountsReader._readTokenCA, "tlsCA"),
)  # fmt: skip
