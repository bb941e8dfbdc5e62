"""
Tests for the C{oauth2} token source of an account
(L{imapmig.config.accounts}).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from imapmig.config import ImapSourceConfig, parseConfig
from imapmig.config.model import TokenCommandConfig, TokenFileConfig, TokenRefreshConfig
from imapmig.access.secrets import Secret
from tests.test_config import ConfigTestCase, writeFile

TOKEN = "ya29.secret-access-token"


class OAuth2ConfigTests(ConfigTestCase):
    """
    C{oauth2: {token_file: FILE}} or C{oauth2: {token_command: [...]}} in
    place of a password.
    """

    def setUp(self) -> None:
        super().setUp()
        self.tokenFile = writeFile(os.path.join(self.directory, "alice.token"), TOKEN + "\n")

    def withOAuth2(self, oauth2: object, job: int = 0) -> dict[str, Any]:
        document = self.document()
        destination = document["jobs"][job]["destination"]
        destination.pop("password_file", None)
        destination.pop("password", None)
        destination["oauth2"] = oauth2
        return document

    def test_tokenFile(self) -> None:
        """
        A token file is checked and kept as its absolute path (relative to
        the configuration's directory); the account has no password.
        """
        document = self.withOAuth2({"token_file": "alice.token"})
        destination = parseConfig(document, self.configPath).jobs[0].destination
        self.assertEqual(destination.oauth2, TokenFileConfig(self.tokenFile))
        self.assertIsNone(destination.password)
        self.assertIsNone(destination.admin)
        self.assertNotIn(TOKEN, repr(destination))

    def test_tokenFileMode(self) -> None:
        """
        A token file others may read is refused, naming the field and the
        file, without the token.
        """
        os.chmod(self.tokenFile, 0o640)
        problems = self.problems(self.withOAuth2({"token_file": self.tokenFile}))
        self.assertProblem(problems, "jobs[0].destination.oauth2.token_file", "chmod 600")
        self.assertProblem(problems, "jobs[0].destination.oauth2.token_file", "token file")
        self.assertNotIn(TOKEN, "\n".join(problems))

    def test_tokenFileMissing(self) -> None:
        """
        A token file that does not exist is a problem naming it.
        """
        self.assertOnlyProblem(
            self.withOAuth2({"token_file": "nowhere"}),
            "jobs[0].destination.oauth2.token_file",
            "token file " + os.path.join(self.directory, "nowhere") + " does not exist",
        )

    def test_tokenCommand(self) -> None:
        """
        A token command is kept with its program's absolute path (looked up
        in PATH for a bare name) and a 30 s timeout by default.
        """
        document = self.withOAuth2({"token_command": ["sh", "-c", "echo x"]})
        destination = parseConfig(document, self.configPath).jobs[0].destination
        oauth2 = destination.oauth2
        assert isinstance(oauth2, TokenCommandConfig)
        self.assertEqual(oauth2.argv, ("sh", "-c", "echo x"))
        self.assertTrue(os.path.isabs(oauth2.executable))
        self.assertEqual(oauth2.timeout, 30.0)
        document = self.withOAuth2({"token_command": [sys.executable], "timeout": 5})
        oauth2 = parseConfig(document, self.configPath).jobs[0].destination.oauth2
        self.assertEqual(oauth2, TokenCommandConfig((sys.executable,), sys.executable, 5.0))

    def test_tokenCommandProblems(self) -> None:
        """
        A command that is not a list of strings, a program that cannot be
        found, and a bad timeout are problems naming their fields.
        """
        self.assertOnlyProblem(
            self.withOAuth2({"token_command": "get-token"}),
            "jobs[0].destination.oauth2.token_command",
            "expected a list",
        )
        self.assertOnlyProblem(
            self.withOAuth2({"token_command": ["no-such-program-imapmig"]}),
            "jobs[0].destination.oauth2.token_command[0]",
            "no executable program 'no-such-program-imapmig' in PATH",
        )
        self.assertOnlyProblem(
            self.withOAuth2({"token_command": ["sh", 3]}),
            "jobs[0].destination.oauth2.token_command[1]",
            "expected a string",
        )
        self.assertOnlyProblem(
            self.withOAuth2({"token_command": ["sh"], "timeout": 0}),
            "jobs[0].destination.oauth2.timeout",
            "greater than 0",
        )
        self.assertOnlyProblem(
            self.withOAuth2({"token_file": self.tokenFile, "timeout": 3}),
            "jobs[0].destination.oauth2.timeout",
            "token_command only",
        )

    def test_exactlyOneSource(self) -> None:
        """
        Both sources, or neither, is a problem naming C{oauth2}.
        """
        self.assertOnlyProblem(
            self.withOAuth2({"token_file": self.tokenFile, "token_command": ["sh"]}),
            "jobs[0].destination.oauth2",
            "exactly one of token_file",
        )
        self.assertOnlyProblem(
            self.withOAuth2({}), "jobs[0].destination.oauth2", "exactly one of token_file"
        )

    def test_notWithPasswordOrAdmin(self) -> None:
        """
        A token source with a password or an admin is a problem naming the
        account.
        """
        document = self.document()
        document["jobs"][0]["destination"]["oauth2"] = {"token_file": self.tokenFile}
        self.assertOnlyProblem(
            document, "jobs[0].destination", "oauth2) or password_file, not both"
        )
        document = self.withOAuth2({"token_file": self.tokenFile})
        document["jobs"][0]["destination"]["admin"] = {"user": "a", "password": "b"}
        self.assertOnlyProblem(document, "jobs[0].destination", "or admin, not both")

    def test_source(self) -> None:
        """
        An IMAP source takes a token source too.
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tls:old.example.org:993"}
        document["jobs"][0]["source"] = {
            "server": "old",
            "user": "alice",
            "oauth2": {"token_file": self.tokenFile},
        }
        source = parseConfig(document, self.configPath).jobs[0].source
        assert isinstance(source, ImapSourceConfig)
        self.assertEqual(source.oauth2, TokenFileConfig(self.tokenFile))
        self.assertIsNone(source.password)


class TokenEndpointConfigTests(ConfigTestCase):
    """
    C{oauth2: {token_endpoint, client_id, refresh_token_file, ...}}: the
    refresh grant.
    """

    def withOAuth2(self, oauth2: object) -> dict[str, Any]:
        document = self.document()
        destination = document["jobs"][0]["destination"]
        destination.pop("password_file", None)
        destination.pop("password", None)
        destination["oauth2"] = oauth2
        return document

    def setUp(self) -> None:
        super().setUp()
        writeFile(os.path.join(self.directory, "alice.token"), TOKEN + "\n")
        self.refreshFile = writeFile(os.path.join(self.directory, "alice.refresh"), "rt-secret\n")
        self.secretFile = writeFile(os.path.join(self.directory, "client.secret"), "cs-secret\n")

    def refresh(self, **keys: object) -> dict[str, Any]:
        oauth2: dict[str, object] = {
            "token_endpoint": "https://login.microsoftonline.com/common/oauth2/v2.0/token",
            "client_id": "app-id",
            "refresh_token_file": "alice.refresh",
        }
        oauth2.update(keys)
        return self.withOAuth2({k: v for k, v in oauth2.items() if v is not None})

    def test_refreshGrant(self) -> None:
        """
        The keys are read with their defaults (no secret, no scope, a 30 s
        timeout, the system trust store), the files as absolute paths;
        no secret shows in C{repr}.
        """
        destination = parseConfig(self.refresh(), self.configPath).jobs[0].destination
        self.assertEqual(
            destination.oauth2,
            TokenRefreshConfig(
                "https://login.microsoftonline.com/common/oauth2/v2.0/token",
                "app-id",
                None,
                self.refreshFile,
                None,
                30.0,
                None,
            ),
        )

    def test_allKeys(self) -> None:
        """
        The client secret is read from its file; scope, timeout and tls_ca
        are kept.
        """
        ca = writeFile(os.path.join(self.directory, "ca.pem"), "x")
        document = self.refresh(
            client_secret_file="client.secret", scope="a b", timeout=5, tls_ca="ca.pem"
        )
        oauth2 = parseConfig(document, self.configPath).jobs[0].destination.oauth2
        assert isinstance(oauth2, TokenRefreshConfig)
        self.assertEqual(oauth2.clientSecret, Secret("cs-secret"))
        self.assertEqual(oauth2.clientSecret.value, "cs-secret")  # type: ignore[union-attr]
        self.assertEqual((oauth2.scope, oauth2.timeout, oauth2.tlsCA), ("a b", 5.0, ca))
        self.assertNotIn("cs-secret", repr(oauth2))

    def test_plainHttpOnlyToLoopback(self) -> None:
        """
        http is refused to a host that is not loopback, allowed to one.
        """
        self.assertOnlyProblem(
            self.refresh(token_endpoint="http://login.example.com/token"),
            "jobs[0].destination.oauth2.token_endpoint",
            "loopback address only",
        )
        for url in ("http://127.0.0.1:8080/token", "http://[::1]/token", "http://localhost/t"):
            parseConfig(self.refresh(token_endpoint=url), self.configPath)
        self.assertOnlyProblem(
            self.refresh(token_endpoint="ftp://x/y"),
            "jobs[0].destination.oauth2.token_endpoint",
            "expected an https:// URL",
        )

    def test_missingKeys(self) -> None:
        """
        client_id and refresh_token_file are required, each named.
        """
        problems = self.problems(self.refresh(client_id=None, refresh_token_file=None))
        self.assertProblem(problems, "jobs[0].destination.oauth2.client_id", "missing")
        self.assertProblem(problems, "jobs[0].destination.oauth2.refresh_token_file", "missing")

    def test_refreshTokenFileChecked(self) -> None:
        """
        The refresh token file is checked as a password file (mode), and
        its directory must be writable; neither message shows a token.
        """
        os.chmod(self.refreshFile, 0o644)
        problems = self.problems(self.refresh())
        self.assertProblem(problems, "jobs[0].destination.oauth2.refresh_token_file", "chmod 600")
        self.assertNotIn("rt-secret", "\n".join(problems))

    def test_exclusive(self) -> None:
        """
        token_endpoint with token_file is refused; a refresh key without
        token_endpoint is named.
        """
        self.assertOnlyProblem(
            self.refresh(token_file="alice.token"),
            "jobs[0].destination.oauth2",
            "not token_file and token_endpoint",
        )
        self.assertOnlyProblem(
            self.withOAuth2({"token_file": "alice.token", "client_id": "x"}),
            "jobs[0].destination.oauth2.client_id",
            "applies to token_endpoint only",
        )

    def test_secretInURL(self) -> None:
        """
        Credentials in the URL are refused.
        """
        self.assertOnlyProblem(
            self.refresh(token_endpoint="https://id:secret@login.example.com/token"),
            "jobs[0].destination.oauth2.token_endpoint",
            "client_secret_file",
        )
