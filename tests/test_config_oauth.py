"""
Tests for the C{oauth2} token source of an account
(L{imapmig.config.accounts}).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from imapmig.config import ImapSourceConfig, parseConfig
from imapmig.config.model import TokenCommandConfig, TokenFileConfig
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
