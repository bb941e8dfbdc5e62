# -*- test-case-name: tests.test_config -*-
"""
Accounts: a server, a user and a password (or password file), for a
destination or an IMAP source; or, instead of the user's password, an
admin credential (C{admin: {user: NAME, password_file: FILE}}) that logs
in on behalf of the user (a "master user").
"""

from __future__ import annotations

from typing import Mapping

from imapmig.config.model import DestinationConfig, ServerConfig
from imapmig.config.reader import ConfigReader, _key
from imapmig.secrets import PasswordFileError, Secret, readPasswordFile


_DESTINATION_KEYS = ("server", "user", "password", "password_file", "admin")

_ADMIN_KEYS = ("user", "password", "password_file")


class AccountsReader(ConfigReader):
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
        return DestinationConfig(*account)

    def _readAccount(
        self,
        destination: Mapping[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> tuple[ServerConfig, str, Secret, str | None] | None:
        """
        Read an account: C{server} (one of C{servers}), C{user}, and the
        user's password or an C{admin} credential.

        @return: the server, the user, the password to log in with (the
            admin's when there is an admin), and the admin's login name
            or L{None}.
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

        admin = None
        if "admin" in destination:
            admin = self._readAdmin(destination, path)
            password = None if admin is None else admin[1]
        else:
            password = self._readPassword(destination, path)
        ok = ok and password is not None

        if not ok:
            return None
        assert server is not None and user is not None and password is not None
        return server, user, password, None if admin is None else admin[0]

    def _readAdmin(
        self, destination: Mapping[str, object], path: str
    ) -> tuple[str, Secret] | None:
        """
        Read C{admin}: the admin's C{user} and exactly one of its
        C{password} and C{password_file}, given instead of the user's
        password.
        """
        if "password" in destination or "password_file" in destination:
            self._problem(
                path,
                "give the user's password (password or password_file) or an admin"
                " credential (admin), not both",
            )
            return None
        adminPath = _key(path, "admin")
        admin = self._readMapping(destination["admin"], adminPath, _ADMIN_KEYS)
        if admin is None:
            return None
        name = None
        if "user" not in admin:
            self._problem(_key(adminPath, "user"), "missing: the admin's login name")
        else:
            name = self._readString(admin["user"], _key(adminPath, "user"))
        password = self._readPassword(admin, adminPath)
        if name is None or password is None:
            return None
        return name, password

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
