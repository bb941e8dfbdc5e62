# -*- test-case-name: tests.test_credentials -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for systemd credentials: L{imapmig.access.secrets} (credentials), the POSIX ACL rule
of L{imapmig.access.secrets.accessibleToOthers}, and every C{*_credential} key of
the configuration (L{imapmig.config.secretkeys}).
"""

from __future__ import annotations

import os
import struct
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import ImapSourceConfig, loadConfig, parseConfig
from imapmig.config.model import TokenFileConfig, TokenRefreshConfig
from imapmig.errors import ConfigError
from imapmig.access.secrets import (
    Secret,
    _aclGrantsOthers,
    credentialPath,
    readCredential,
    readPasswordFile,
)
from imapmig.errors import CredentialError, PasswordFileError
from tests.test_config import FILE_PASSWORD, ConfigTestCase, writeFile

CREDENTIAL = "systemd-handed-secret"

# Linux's POSIX ACL attribute: version 2, then (tag, permissions, id).
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF


def acl(*entries: tuple[int, int, int]) -> bytes:
    """
    The extended attribute form of a POSIX ACL of C{entries}.
    """
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def systemdACL(uid: int) -> bytes:
    """
    The ACL systemd gives a credential on a file system with ACLs: the
    owner (root) may read, so may the service's user C{uid}; no group,
    no other.
    """
    return acl(
        (_USER_OBJ, 0o4, _NO_ID),
        (_USER, 0o4, uid),
        (_GROUP_OBJ, 0o0, _NO_ID),
        (_MASK, 0o4, _NO_ID),
        (_OTHER, 0o0, _NO_ID),
    )


def credentialsDirectory(testCase: SynchronousTestCase, **credentials: str) -> str:
    """
    A directory laid out as systemd lays out C{$CREDENTIALS_DIRECTORY}:
    each credential a file of mode 0400 holding its value, in a directory
    of mode 0500.
    """
    directory: str = os.path.abspath(testCase.mktemp())
    os.mkdir(directory)
    for name, value in credentials.items():
        writeFile(os.path.join(directory, name), value, 0o400)
    os.chmod(directory, 0o500)
    testCase.addCleanup(os.chmod, directory, 0o700)
    return directory


class CredentialPathTests(SynchronousTestCase):
    """
    L{credentialPath} and L{readCredential}: where a credential is, and
    what is wrong when it is not there.
    """

    def test_reads(self) -> None:
        """
        A credential as systemd writes it (0400 in a 0500 directory) is
        read: its first line.
        """
        directory = credentialsDirectory(self, alice=CREDENTIAL + "\nsecond line\n")
        environ = {"CREDENTIALS_DIRECTORY": directory}
        self.assertEqual(credentialPath("alice", environ), os.path.join(directory, "alice"))
        self.assertEqual(readCredential("alice", "password", environ), CREDENTIAL)

    def test_notSet(self) -> None:
        """
        Without C{CREDENTIALS_DIRECTORY} the error says the daemon runs
        outside systemd's C{LoadCredential=} and what to add.
        """
        for environ in ({}, {"CREDENTIALS_DIRECTORY": ""}):
            error = self.assertRaises(
                CredentialError, readCredential, "alice", "password", environ
            )
            self.assertIn(
                "CREDENTIALS_DIRECTORY is not set: imapmig is run outside systemd's"
                " LoadCredential=",
                str(error),
            )
            self.assertIn("LoadCredential=alice:", str(error))

    def test_missing(self) -> None:
        """
        A credential the directory does not hold: the error names the
        directory and the C{LoadCredential=} line to add.
        """
        directory = credentialsDirectory(self, bob="x")
        error = self.assertRaises(
            CredentialError, credentialPath, "alice", {"CREDENTIALS_DIRECTORY": directory}
        )
        self.assertEqual(
            str(error),
            f"no credential 'alice' in {directory} (CREDENTIALS_DIRECTORY): add"
            " LoadCredential=alice:FILE (or LoadCredentialEncrypted=alice:FILE.cred)"
            " to the unit's [Service] section",
        )

    def test_badNames(self) -> None:
        """
        A name with a C{/}, C{.}, C{..} or a NUL is refused before the
        directory is looked at: a credential cannot name a file elsewhere.
        """
        directory = credentialsDirectory(self, alice="x")
        for name in ("../alice", "sub/alice", "/etc/passwd", ".", "..", "a\0b"):
            error = self.assertRaises(
                CredentialError, credentialPath, name, {"CREDENTIALS_DIRECTORY": directory}
            )
            self.assertIn("invalid credential name", str(error))
            self.assertIn("without '/'", str(error))

    def test_passwordFileChecks(self) -> None:
        """
        A credential gets the checks of a password file: an empty one is
        refused, naming it as a credential; so is one that group or others
        may read (which systemd never writes).
        """
        directory = credentialsDirectory(self, empty="\n", loose="x\n")
        os.chmod(directory, 0o700)
        os.chmod(os.path.join(directory, "loose"), 0o644)
        environ = {"CREDENTIALS_DIRECTORY": directory}
        error = self.assertRaises(PasswordFileError, readCredential, "empty", "password", environ)
        self.assertEqual(
            str(error),
            f"password credential file {directory}/empty is empty"
            " (the password credential is its first line)",
        )
        error = self.assertRaises(PasswordFileError, readCredential, "loose", "token", environ)
        self.assertIn("is accessible to group or others (mode 0644)", str(error))


class AccessControlListTests(SynchronousTestCase):
    """
    A POSIX ACL granting read to this process's user alone, as systemd
    sets one on a credential where the file system has ACLs, keeps the
    file private although C{stat} shows the ACL's mask in the group bits.
    """

    def setACL(self, path: str, value: bytes) -> None:
        """
        Set C{path}'s ACL.
        """
        try:
            os.setxattr(path, "system.posix_acl_access", value)
        except OSError as e:
            # A test machine's temporary directory without ACLs cannot
            # show the case; CI runs where it has them.
            if os.environ.get("CI") == "true":
                raise
            raise self.skipTest(f"no POSIX ACLs here: {e.strerror}")

    def test_systemdACL(self) -> None:
        """
        A 0400 file with systemd's ACL (read for our user, mask r) shows
        mode 0440 and is read.
        """
        path = writeFile(self.mktemp(), CREDENTIAL + "\n", 0o400)
        self.setACL(path, systemdACL(os.geteuid()))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o440)
        self.assertEqual(readPasswordFile(path), CREDENTIAL)

    def test_groupByACL(self) -> None:
        """
        An ACL that lets a group read the file is refused like mode 0640.
        """
        path = writeFile(self.mktemp(), CREDENTIAL + "\n", 0o400)
        self.setACL(
            path,
            acl(
                (_USER_OBJ, 0o4, _NO_ID),
                (_GROUP_OBJ, 0o0, _NO_ID),
                (_GROUP, 0o4, 1234),
                (_MASK, 0o4, _NO_ID),
                (_OTHER, 0o0, _NO_ID),
            ),
        )
        error = self.assertRaises(PasswordFileError, readPasswordFile, path)
        self.assertIn("accessible to group or others (mode 0440)", str(error))

    def test_plainGroupBits(self) -> None:
        """
        Without an ACL, group bits mean the group: mode 0440 is refused.
        """
        path = writeFile(self.mktemp(), CREDENTIAL + "\n", 0o440)
        self.assertRaises(PasswordFileError, readPasswordFile, path)

    def test_parse(self) -> None:
        """
        The ACL rule: named users other than us, groups (owning or named)
        under the mask count; a mask of none hides them; an ACL that
        cannot be parsed counts as granting.
        """
        us = 1000
        self.assertFalse(_aclGrantsOthers(systemdACL(us), us))
        self.assertTrue(_aclGrantsOthers(systemdACL(us + 1), us))
        masked = acl(
            (_USER_OBJ, 0o6, _NO_ID), (_GROUP_OBJ, 0o4, _NO_ID), (_MASK, 0o0, _NO_ID)
        )
        self.assertFalse(_aclGrantsOthers(masked, us))
        unmasked = acl((_USER_OBJ, 0o6, _NO_ID), (_GROUP_OBJ, 0o4, _NO_ID))
        self.assertTrue(_aclGrantsOthers(unmasked, us))
        executeOnly = acl((_GROUP_OBJ, 0o1, _NO_ID), (_MASK, 0o7, _NO_ID))
        self.assertFalse(_aclGrantsOthers(executeOnly, us))
        self.assertTrue(_aclGrantsOthers(b"\x01\x00\x00\x00", us))
        self.assertTrue(_aclGrantsOthers(systemdACL(us)[:-3], us))


class CredentialConfigTests(ConfigTestCase):
    """
    Each C{*_credential} key of the configuration, and each of its
    problems, named by the key's path.
    """

    def setUp(self) -> None:
        super().setUp()
        self.credentials = credentialsDirectory(
            self, alice=CREDENTIAL + "\n", admin="admin-secret\n", token="ya29.token\n"
        )
        self.environ = {"CREDENTIALS_DIRECTORY": self.credentials}

    def parse(self, document: object) -> Any:
        """
        Parse C{document} with the test's credentials directory.
        """
        return parseConfig(document, self.configPath, self.environ)

    def credentialProblems(
        self, document: object, environ: dict[str, str] | None = None
    ) -> list[str]:
        """
        The problems of C{document} parsed with C{environ} (the test's
        credentials directory by default).
        """
        error = self.assertRaises(
            ConfigError,
            parseConfig,
            document,
            self.configPath,
            self.environ if environ is None else environ,
        )
        self.assertNotIn(CREDENTIAL, str(error))
        return list(error.problems)

    def withDestination(self, **destination: object) -> dict[str, Any]:
        """
        The test document with job 0's destination credentials replaced.
        """
        document = self.document()
        target = document["jobs"][0]["destination"]
        del target["password_file"]
        target.update(destination)
        return document

    def test_destinationPassword(self) -> None:
        """
        C{password_credential: NAME} gives the destination's password.
        """
        config = self.parse(self.withDestination(password_credential="alice"))
        destination = config.jobs[0].destination
        self.assertEqual(destination.password, Secret(CREDENTIAL))
        self.assertEqual(destination.password.value, CREDENTIAL)
        self.assertNotIn(CREDENTIAL, repr(config))

    def test_sourcePassword(self) -> None:
        """
        An IMAP source's C{password_credential} gives its password.
        """
        document = self.document()
        document["jobs"][0]["source"] = {
            "server": "new",
            "user": "alice-old",
            "password_credential": "alice",
        }
        source = self.parse(document).jobs[0].source
        assert isinstance(source, ImapSourceConfig)
        self.assertEqual(source.password, Secret(CREDENTIAL))

    def test_adminPassword(self) -> None:
        """
        An admin's C{password_credential} gives the admin's password.
        """
        document = self.withDestination(
            admin={"user": "master", "password_credential": "admin"}
        )
        destination = self.parse(document).jobs[0].destination
        self.assertEqual((destination.admin, destination.password), ("master", Secret("admin-secret")))

    def test_oauth2Token(self) -> None:
        """
        C{oauth2: {token_credential: NAME}} is checked now and kept as the
        credential's path, read again at each login like a token file.
        """
        document = self.withDestination(oauth2={"token_credential": "token"})
        destination = self.parse(document).jobs[0].destination
        self.assertEqual(
            destination.oauth2, TokenFileConfig(os.path.join(self.credentials, "token"))
        )

    def test_oauth2ClientSecret(self) -> None:
        """
        C{client_secret_credential} gives a refresh grant's client secret.
        """
        refresh = writeFile(os.path.join(self.directory, "refresh"), "r\n")
        document = self.withDestination(
            oauth2={
                "token_endpoint": "https://login.example/token",
                "client_id": "id",
                "client_secret_credential": "admin",
                "refresh_token_file": refresh,
            }
        )
        oauth2 = self.parse(document).jobs[0].destination.oauth2
        assert isinstance(oauth2, TokenRefreshConfig)
        self.assertEqual(oauth2.clientSecret, Secret("admin-secret"))

    def test_exactlyOne(self) -> None:
        """
        A password given twice (file and credential, inline and
        credential) is one problem naming the keys; so is a token or a
        client secret given twice.
        """
        document = self.document()
        document["jobs"][0]["destination"]["password_credential"] = "alice"
        document["jobs"][1]["destination"]["password_credential"] = "alice"
        problems = self.credentialProblems(document)
        self.assertEqual(len(problems), 2, problems)
        self.assertProblem(
            problems,
            "jobs[0].destination",
            "give exactly one of password, password_file, password_credential,"
            " not password_file and password_credential",
        )
        self.assertProblem(
            problems, "jobs[1].destination", "not password and password_credential"
        )
        token = writeFile(os.path.join(self.directory, "token"), "t\n")
        document = self.withDestination(
            oauth2={"token_file": token, "token_credential": "token"}
        )
        self.assertProblem(
            self.credentialProblems(document),
            "jobs[0].destination.oauth2",
            "give exactly one of token_file: FILE, token_credential: NAME,",
        )

    def test_notSet(self) -> None:
        """
        A credential key without C{CREDENTIALS_DIRECTORY}: the problem
        names the key and says the daemon runs outside C{LoadCredential=}.
        """
        problems = self.credentialProblems(
            self.withDestination(password_credential="alice"), environ={}
        )
        self.assertEqual(len(problems), 1, problems)
        self.assertProblem(
            problems,
            "jobs[0].destination.password_credential",
            "CREDENTIALS_DIRECTORY is not set: imapmig is run outside systemd's"
            " LoadCredential=",
        )

    def test_processEnvironment(self) -> None:
        """
        Without an environment given, the process's is used.
        """
        self.patch(os, "environ", {"CREDENTIALS_DIRECTORY": self.credentials})
        config = parseConfig(self.withDestination(password_credential="alice"), self.configPath)
        self.assertEqual(config.jobs[0].destination.password, Secret(CREDENTIAL))

    def test_missingAndBadName(self) -> None:
        """
        A credential the directory lacks, and a name that is a path, are
        problems at their keys.
        """
        document = self.withDestination(admin={"user": "m", "password_credential": "nobody"})
        document["jobs"][1]["destination"] = {
            "server": "new",
            "user": "bob",
            "password_credential": "../alice",
        }
        problems = self.credentialProblems(document)
        self.assertEqual(len(problems), 2, problems)
        self.assertProblem(
            problems,
            "jobs[0].destination.admin.password_credential",
            f"no credential 'nobody' in {self.credentials}",
        )
        self.assertProblem(
            problems,
            "jobs[1].destination.password_credential",
            "invalid credential name '../alice'",
        )

    def test_userList(self) -> None:
        """
        A C{credentials} entry's C{password_credential}, and the CSV
        columns C{destination_password_credential} and
        C{source_password_credential}, give passwords from credentials.
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tcp:old.example.org:143"}
        document["credentials"] = {"old-admin": {"user": "admin", "password_credential": "admin"}}
        document["jobs"] = [
            {
                "name": "users",
                "jobs_from": "users.csv",
                "source": {"server": "old"},
                "destination": {"server": "new"},
            }
        ]
        writeFile(
            os.path.join(self.directory, "users.csv"),
            "source_user,destination_user,source_credential,source_password_credential,"
            "destination_password_credential\n"
            "a,a,old-admin,,alice\n"
            "b,b,,alice,admin\n",
        )
        writeFile(self.configPath, yaml.safe_dump(document))
        jobs = loadConfig(self.configPath, self.environ).jobs
        self.assertEqual(
            [
                (job.source.admin, job.source.password, job.destination.password)  # type: ignore[union-attr]
                for job in jobs
            ],
            [
                ("admin", Secret("admin-secret"), Secret(CREDENTIAL)),
                (None, Secret(CREDENTIAL), Secret("admin-secret")),
            ],
        )

    def test_userListProblems(self) -> None:
        """
        A row giving a password file and a password credential is a
        problem; so is a credential the directory lacks, at its column.
        """
        document = self.document()
        document["jobs"] = [
            {"name": "users", "jobs_from": "users.csv", "source": {"maildir": self.maildir},
             "destination": {"server": "new"}}
        ]
        csvPath = writeFile(
            os.path.join(self.directory, "users.csv"),
            "destination_user,destination_password_file,destination_password_credential\n"
            f"a,{self.passwordFile},alice\n"
            "b,,nobody\n",
        )
        writeFile(self.configPath, yaml.safe_dump(document))
        error = self.assertRaises(ConfigError, loadConfig, self.configPath, self.environ)
        self.assertEqual(
            list(error.problems),
            [
                f"{csvPath}: row 2: destination_password_credential: give one of"
                " destination_password_file, destination_password_credential or"
                " destination_credential, not destination_password_file and"
                " destination_password_credential",
                f"{csvPath}: row 3: destination_password_credential: no credential"
                f" 'nobody' in {self.credentials} (CREDENTIALS_DIRECTORY): add"
                " LoadCredential=nobody:FILE (or LoadCredentialEncrypted=nobody:FILE.cred)"
                " to the unit's [Service] section",
            ],
        )
        self.assertNotIn(FILE_PASSWORD, str(error))
