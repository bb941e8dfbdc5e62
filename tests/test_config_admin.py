"""
Tests for the C{admin} credential of an account (L{imapmig.config.accounts}).
"""

from __future__ import annotations

import os

from imapmig.config import ImapSourceConfig, parseConfig
from imapmig.access.secrets import Secret
from tests.test_config import INLINE_PASSWORD, ConfigTestCase, writeFile

ADMIN_PASSWORD = "admin-secret-password"


class AdminCredentialTests(ConfigTestCase):
    """
    C{admin: {user: NAME, password_file: FILE}} in place of the user's
    password.
    """

    def setUp(self) -> None:
        super().setUp()
        self.adminFile = writeFile(
            os.path.join(self.directory, "admin.pw"), ADMIN_PASSWORD + "\n"
        )

    def test_destinationAdmin(self) -> None:
        """
        A destination with an admin logs in as the admin on behalf of its
        user: the account keeps the user, and carries the admin's name and
        password.
        """
        document = self.document()
        destination = document["jobs"][0]["destination"]
        del destination["password_file"]
        destination["admin"] = {"user": "admin", "password_file": self.adminFile}
        loaded = parseConfig(document, self.configPath).jobs[0].destination
        self.assertEqual(loaded.user, "alice")
        self.assertEqual(loaded.admin, "admin")
        self.assertEqual(loaded.password, Secret(ADMIN_PASSWORD))
        self.assertNotIn(ADMIN_PASSWORD, repr(loaded))

    def test_userPasswordHasNoAdmin(self) -> None:
        """
        An account with the user's own password has no admin.
        """
        loaded = parseConfig(self.document(), self.configPath)
        self.assertIsNone(loaded.jobs[0].destination.admin)

    def test_sourceAdmin(self) -> None:
        """
        An IMAP source takes an admin too (an inline password here).
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tls:old.example.org:993"}
        document["jobs"][0]["source"] = {
            "server": "old",
            "user": "alice",
            "admin": {"user": "root", "password": INLINE_PASSWORD},
        }
        source = parseConfig(document, self.configPath).jobs[0].source
        assert isinstance(source, ImapSourceConfig)
        self.assertEqual((source.user, source.admin), ("alice", "root"))
        self.assertEqual(source.password, Secret(INLINE_PASSWORD))

    def test_adminAndPassword(self) -> None:
        """
        The user's password and an admin together are a problem naming the
        account.
        """
        document = self.document()
        document["jobs"][0]["destination"]["admin"] = {
            "user": "admin",
            "password_file": self.adminFile,
        }
        self.assertOnlyProblem(
            document, "jobs[0].destination", "or an admin credential (admin), not both"
        )

    def test_adminProblems(self) -> None:
        """
        An admin without a user name or password, or with an unknown key,
        is a problem naming the field; none shows a password.
        """
        document = self.document()
        del document["jobs"][0]["destination"]["password_file"]
        document["jobs"][0]["destination"]["admin"] = {"password_file": self.adminFile}
        del document["jobs"][1]["destination"]["password"]
        document["jobs"][1]["destination"]["admin"] = {"user": "admin", "pasword": "x"}
        problems = self.problems(document)
        self.assertEqual(len(problems), 3, problems)
        self.assertProblem(problems, "jobs[0].destination.admin.user", "missing")
        self.assertProblem(
            problems, "jobs[1].destination.admin.pasword", "did you mean 'password'?"
        )
        self.assertProblem(problems, "jobs[1].destination.admin", "missing password")
        self.assertNotIn(ADMIN_PASSWORD, "\n".join(problems))

    def test_adminNotMapping(self) -> None:
        """
        An admin that is not a mapping is a problem naming it.
        """
        document = self.document()
        del document["jobs"][0]["destination"]["password_file"]
        document["jobs"][0]["destination"]["admin"] = "admin"
        self.assertOnlyProblem(document, "jobs[0].destination.admin", "expected a mapping")

    def test_adminPasswordFileMode(self) -> None:
        """
        The admin's password file is refused when others may read it, the
        problem naming its field.
        """
        os.chmod(self.adminFile, 0o644)
        document = self.document()
        del document["jobs"][0]["destination"]["password_file"]
        document["jobs"][0]["destination"]["admin"] = {
            "user": "admin",
            "password_file": self.adminFile,
        }
        self.assertOnlyProblem(
            document, "jobs[0].destination.admin.password_file", "chmod 600"
        )
