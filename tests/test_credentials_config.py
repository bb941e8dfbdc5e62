# -*- test-case-name: tests.test_credentials_config -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the configuration's rules on secrets in the clear: an inline
password in a file that group or others may read, and C{allow_plaintext}
for a server reached without TLS.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from imapmig.config import loadConfig, parseConfig
from imapmig.errors import ConfigError
from tests.test_config import INLINE_PASSWORD, ConfigTestCase, writeFile


class InlinePasswordModeTests(ConfigTestCase):
    """
    An inline C{password:} is allowed only in a configuration file that
    only its owner may read, as a password file must be.
    """

    def write(self, document: object, mode: int) -> str:
        """
        Write C{document} as the configuration file with C{mode}.
        """
        return writeFile(self.configPath, yaml.safe_dump(document), mode)

    def test_looseRefused(self) -> None:
        """
        In a file of mode 0644 (or 0640, or 0604) an inline password is a
        problem at its key, naming the file, its mode and the fix, without
        the password.
        """
        for mode in (0o644, 0o640, 0o604):
            self.write(self.document(), mode)
            error = self.assertRaises(ConfigError, loadConfig, self.configPath)
            self.assertEqual(
                list(error.problems),
                [
                    f"{self.configPath}: jobs[1].destination.password: an inline password"
                    " in a file that group or others may read"
                    f" (mode {mode:04o}): run chmod 600 {self.configPath}, or give"
                    " password_file: FILE or password_credential: NAME instead"
                ],
            )
            self.assertNotIn(INLINE_PASSWORD, str(error))

    def test_privateAccepted(self) -> None:
        """
        In a file of mode 0600 (or 0400) an inline password is read.
        """
        for mode in (0o600, 0o400):
            os.chmod(self.directory, 0o700)
            if os.path.exists(self.configPath):
                os.chmod(self.configPath, 0o600)
            self.write(self.document(), mode)
            config = loadConfig(self.configPath)
            password = config.jobs[1].destination.password
            assert password is not None
            self.assertEqual(password.value, INLINE_PASSWORD)

    def test_looseWithoutInlineSecret(self) -> None:
        """
        A file of mode 0644 that holds no inline secret (passwords in files
        or credentials) is fine: only what it holds decides.
        """
        document = self.document()
        document["jobs"][1]["destination"] = dict(
            document["jobs"][0]["destination"], user="bob"
        )
        self.write(document, 0o644)
        self.assertEqual(len(loadConfig(self.configPath).jobs), 2)

    def test_adminAndSource(self) -> None:
        """
        An admin's inline password, and an IMAP source's, are refused too,
        each at its key.
        """
        document = self.document()
        document["jobs"][0]["destination"] = {
            "server": "new",
            "user": "alice",
            "admin": {"user": "master", "password": "admin-secret"},
        }
        document["jobs"][0]["source"] = {"server": "new", "user": "a", "password": "src-secret"}
        self.write(document, 0o644)
        error = self.assertRaises(ConfigError, loadConfig, self.configPath)
        self.assertEqual(
            sorted(problem.split(": ")[1] for problem in error.problems),
            [
                "jobs[0].destination.admin.password",
                "jobs[0].source.password",
                "jobs[1].destination.password",
            ],
        )
        for secret in ("admin-secret", "src-secret", INLINE_PASSWORD):
            self.assertNotIn(secret, str(error))

    def test_parsedDocument(self) -> None:
        """
        A document parsed as such (not read from a file) has no mode to
        check: its inline password is accepted.
        """
        config = parseConfig(self.document(), self.configPath)
        self.assertEqual(len(config.jobs), 2)


class AllowPlaintextTests(ConfigTestCase):
    """
    A server reached without TLS (C{tcp:} with C{starttls: off}) whose host
    is not a loopback address needs C{allow_plaintext: true}.
    """

    def withServer(self, **server: object) -> dict[str, Any]:
        """
        The test document with the server C{new} replaced by C{server}.
        """
        document = self.document()
        document["servers"]["new"] = server
        return document

    def test_loopbackAllowed(self) -> None:
        """
        Loopback hosts (127.0.0.0/8, ::1, localhost) need no setting.
        """
        for endpoint in (
            "tcp:127.0.0.1:143",
            "tcp:127.8.9.10:143",
            "tcp:host=\\:\\:1:port=143",
            "tcp:localhost:143",
        ):
            config = parseConfig(
                self.withServer(endpoint=endpoint, starttls="off"), self.configPath
            )
            self.assertFalse(config.servers[0].starttls)

    def test_remoteRefused(self) -> None:
        """
        A remote host with C{starttls: off} is one problem at the server's
        C{starttls}, offering STARTTLS, implicit TLS and C{allow_plaintext};
        C{allow_plaintext: false} says the same.
        """
        for extra in ({}, {"allow_plaintext": False}):
            for host in ("mail.example.org", "10.0.0.1", "[2001:db8::1]"):
                endpoint = f"tcp:{host}:143" if not host.startswith("[") else (
                    "tcp:host=2001\\:db8\\:\\:1:port=143"
                )
                self.assertOnlyProblem(
                    self.withServer(endpoint=endpoint, starttls=False, **extra),
                    "servers.new.starttls",
                    "which is not a loopback address: the password and the mail would"
                    " cross the network in the clear; use starttls: required, a tls:"
                    " endpoint, or allow_plaintext: true to accept that",
                )

    def test_remoteAllowed(self) -> None:
        """
        C{allow_plaintext: true} accepts a remote host without TLS.
        """
        config = parseConfig(
            self.withServer(
                endpoint="tcp:mail.example.org:143", starttls="off", allow_plaintext=True
            ),
            self.configPath,
        )
        self.assertFalse(config.servers[0].starttls)
        self.assertFalse(config.servers[0].implicitTLS)

    def test_withTLS(self) -> None:
        """
        C{allow_plaintext: true} where the connection uses TLS (a C{tls:}
        endpoint, STARTTLS by default or required) has no effect and is a
        problem; C{false} there is fine.
        """
        for server in (
            {"endpoint": "tls:mail.example.org:993"},
            {"endpoint": "tcp:mail.example.org:143"},
            {"endpoint": "tcp:mail.example.org:143", "starttls": "required"},
        ):
            self.assertOnlyProblem(
                self.withServer(allow_plaintext=True, **server),
                "servers.new.allow_plaintext",
                "has no effect with TLS",
            )
            parseConfig(self.withServer(allow_plaintext=False, **server), self.configPath)

    def test_notBoolean(self) -> None:
        """
        C{allow_plaintext} is true or false, nothing else.
        """
        self.assertOnlyProblem(
            self.withServer(
                endpoint="tcp:mail.example.org:143", starttls="off", allow_plaintext="yes"
            ),
            "servers.new.allow_plaintext",
            "must be true or false, not a string",
        )

    def test_sourceServer(self) -> None:
        """
        The rule holds for a server used as an IMAP source as well: the
        check is the server's, whatever uses it.
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tcp:old.example.org:143", "starttls": "off"}
        document["jobs"][0]["source"] = {
            "server": "old",
            "user": "a",
            "password_file": self.passwordFile,
        }
        self.assertOnlyProblem(document, "servers.old.starttls", "allow_plaintext: true")
