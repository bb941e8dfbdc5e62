"""
Tests for L{imapmig.config.userlist}: job templates with C{jobs_from} and
the C{credentials} map.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from imapmig import config
from imapmig.config import (
    Config,
    DestinationConfig,
    ImapSourceConfig,
    MaildirSourceConfig,
    loadConfig,
)
from imapmig.config import secretkeys, userlist, userrows
from imapmig.errors import ConfigError
from imapmig.access.secrets import Secret
from tests.test_config import EXAMPLE, FILE_PASSWORD, ConfigTestCase, makeMaildir, writeFile


class UserListTestCase(ConfigTestCase):
    """
    A configuration with a template whose rows come from C{users.csv}.
    """

    def setUp(self) -> None:
        super().setUp()
        self.csvPath = os.path.join(self.directory, "users.csv")
        self.adminFile = writeFile(os.path.join(self.directory, "admin.pw"), "adminpw\n")
        self.bobFile = writeFile(os.path.join(self.directory, "bob.pw"), "bobpw\n")

    def userDocument(self) -> dict[str, Any]:
        """
        A configuration: a plain job, then a template from an IMAP source
        (rows use a credential) to a destination (rows give password
        files).
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tcp:old.example.org:143"}
        document["credentials"] = {
            "old-admin": {"user": "admin", "password_file": self.adminFile}
        }
        document["jobs"] = [
            document["jobs"][0],
            {
                "name": "users",
                "jobs_from": "users.csv",
                "source": {"server": "old"},
                "destination": {"server": "new"},
                "connections": 3,
            },
        ]
        return document

    def loadUsers(self, csvText: str, document: dict[str, Any] | None = None) -> Config:
        """
        Write C{csvText} as C{users.csv} and load the configuration.
        """
        writeFile(self.csvPath, csvText)
        return self.load(yaml.safe_dump(document or self.userDocument()))

    def userProblems(
        self, csvText: str | bytes, document: dict[str, Any] | None = None
    ) -> list[str]:
        """
        The problems of a configuration whose C{users.csv} holds C{csvText}.
        """
        writeFile(self.csvPath, csvText)
        writeFile(self.configPath, yaml.safe_dump(document or self.userDocument()))
        error = self.assertRaises(ConfigError, loadConfig, self.configPath)
        self.assertNotIn(FILE_PASSWORD, str(error))
        self.assertNotIn("adminpw", str(error))
        return list(error.problems)


class TemplateTests(UserListTestCase):
    """
    What a template and its rows become.
    """

    def test_threeRows(self) -> None:
        """
        Each row makes one job from the template, after the YAML's jobs
        before it: the row's users, the source's credential (its user
        logs in as the admin of the row's user), the destination's
        password file, the template's settings, a derived or given name,
        and the row's override.
        """
        loaded = self.loadUsers(
            "source_user,destination_user,source_credential,"
            "destination_password_file,name,connections\n"
            "alice,alice@example.org,old-admin,alice.pw,,\n"
            "bob,bob@example.org,old-admin,bob.pw,bob-archive,\n"
            "carol,carol@example.org,old-admin,alice.pw,,1\n"
        )
        self.assertEqual(
            [job.name for job in loaded.jobs],
            ["alice", "users-alice@example.org", "bob-archive", "users-carol@example.org"],
        )
        alice, bob, carol = loaded.jobs[1:]
        old, new = loaded.servers[1], loaded.servers[0]
        self.assertEqual(
            alice.source, ImapSourceConfig(old, "alice", Secret("adminpw"), "admin")
        )
        self.assertEqual(
            alice.destination,
            DestinationConfig(new, "alice@example.org", Secret(FILE_PASSWORD), None),
        )
        self.assertEqual(bob.source.user, "bob")  # type: ignore[union-attr]
        self.assertEqual(bob.destination.password, Secret("bobpw"))
        self.assertEqual([alice.connections, bob.connections, carol.connections], [3, 3, 1])
        self.assertEqual(carol.pipeline, alice.pipeline)
        self.assertEqual(carol.retry, loaded.jobs[0].retry)

    def test_credentialKeys(self) -> None:
        """
        Each row's accounts name where their credential comes from, for a
        refused login to say: the row's password column, or its
        credential column.
        """
        loaded = self.loadUsers(
            "source_user,destination_user,source_credential,destination_password_file\n"
            "alice,alice@example.org,old-admin,alice.pw\n"
        )
        alice = loaded.jobs[1]
        self.assertEqual(
            (alice.source.credentialKey, alice.destination.credentialKey),  # type: ignore[union-attr]
            (
                f"{self.csvPath} row 2: source_credential",
                f"{self.csvPath} row 2: destination_password_file",
            ),
        )
        self.assertEqual(loaded.jobs[0].destination.credentialKey, "jobs[0].destination.password_file")

    def test_templateGivesTheDestinationUser(self) -> None:
        """
        A template's destination user and admin serve every row, which then
        needs no destination column; the name is derived from the source
        user.
        """
        document = self.userDocument()
        document["jobs"][1]["destination"] = {
            "server": "new",
            "user": "shared",
            "admin": {"user": "root", "password_file": self.adminFile},
        }
        loaded = self.loadUsers("source_user,source_credential\nann,old-admin\n", document)
        (job,) = loaded.jobs[1:]
        self.assertEqual(job.name, "users-ann")
        self.assertEqual(job.destination.user, "shared")
        self.assertEqual(job.destination.admin, "root")

    def test_headerVariants(self) -> None:
        """
        Column names are read in any case with spaces around them; a BOM is
        tolerated, fields may be quoted, and empty lines are skipped (but
        counted in row numbers).
        """
        text = (
            "\ufeff Source_User ,DESTINATION_USER,Source_Credential,"
            "destination_password_file\r\n"
            "\r\n"
            '"alice","a,b@example.org",old-admin,"alice.pw"\r\n'
            ",,,\r\n"
            "bob,bob,old-admin,nope.pw\r\n"
        )
        problems = self.userProblems(text)
        self.assertEqual(
            problems,
            [
                f"{self.csvPath}: row 3: destination_user: invalid job name"
                " 'users-a,b@example.org': use letters, digits and . _ @ -;"
                " give the row a name",
                f"{self.csvPath}: row 5: destination_password_file: password file"
                f" {self.directory}/nope.pw does not exist",
            ],
        )
        loaded = self.loadUsers(text.replace("a,b@", "ab@").replace("nope", "bob"))
        self.assertEqual(
            [job.destination.user for job in loaded.jobs[1:]], ["ab@example.org", "bob"]
        )

    def test_localTemplate(self) -> None:
        """
        A Maildir template's path takes the row's C{source_user}; a row's
        C{maildir} replaces it.
        """
        makeMaildir(os.path.join(self.directory, "mail", "ann", "Maildir"))
        document = self.userDocument()
        document["jobs"][1]["source"] = {"maildir": "mail/{source_user}/Maildir"}
        loaded = self.loadUsers(
            "source_user,destination_user,destination_password_file,maildir\n"
            "ann,ann,alice.pw,\n"
            "bo,bo,alice.pw,Maildir\n",
            document,
        )
        self.assertEqual(
            [job.source for job in loaded.jobs[1:]],
            [
                MaildirSourceConfig(os.path.join(self.directory, "mail/ann/Maildir")),
                MaildirSourceConfig(self.maildir),
            ],
        )
        problems = self.userProblems(
            "source_user,destination_user,destination_password_file\n"
            "..,x,alice.pw\n"
            "a/b,y,alice.pw\n"
            "zed,z,alice.pw\n",
            document,
        )
        missing = os.path.join(self.directory, "mail/zed/Maildir")
        self.assertEqual(
            problems,
            [
                f"{self.csvPath}: row 2: source_user: '..' cannot be part of the source's path",
                f"{self.csvPath}: row 3: source_user: 'a/b' cannot be part of the source's path",
                f"{self.csvPath}: row 4: source_user: {missing} does not exist",
            ],
        )


class ErrorTests(UserListTestCase):
    """
    Every problem of a user list is reported, each naming the file, the
    row and the column.
    """

    def test_headerProblems(self) -> None:
        """
        An unknown column (with a hint), a duplicate and a column the
        template needs are reported at row 1, and the rows are not read.
        """
        problems = self.userProblems(
            "sorce_user,destination_user,destination_user,frobnicate\nx,y,z,w\n"
        )
        self.assertEqual(
            problems,
            [
                f"{self.csvPath}: row 1: sorce_user: unknown column"
                " (did you mean 'source_user'?)",
                f"{self.csvPath}: row 1: destination_user: duplicate column",
                f"{self.csvPath}: row 1: frobnicate: unknown column (known columns:"
                f" {', '.join(userrows._COLUMNS)})",
            ],
        )
        problems = self.userProblems("destination_user,maildir\nx,y\n")
        self.assertEqual(
            problems,
            [
                f"{self.csvPath}: row 1: source_user: missing column:"
                " the template's source gives no user",
                f"{self.csvPath}: row 1: source_password_file: missing column:"
                " the template's source gives no password;"
                " add source_password_file, source_password_credential"
                " or source_credential",
                f"{self.csvPath}: row 1: destination_password_file: missing column:"
                " the template's destination gives no password;"
                " add destination_password_file, destination_password_credential"
                " or destination_credential",
                f"{self.csvPath}: row 1: maildir: the template's source is not maildir",
            ],
        )

    def test_rowProblems(self) -> None:
        """
        Each kind of row problem, with its exact message; the YAML's
        problems come with them.
        """
        document = self.userDocument()
        document["jobs"][0]["connections"] = 0
        document["credentials"]["broken"] = {"user": "x", "password_file": "none.pw"}
        problems = self.userProblems(
            "source_user,destination_user,source_credential,source_password_file,"
            "destination_password_file,connections,name\n"
            "a,a,old-admin,alice.pw,alice.pw,,\n"
            "b,,nobody,,alice.pw,,\n"
            "c,c,broken,,alice.pw,,\n"
            "d,d,old-admin,,,x,\n"
            "e,e,old-admin,,alice.pw,99,\n"
            "f,f,old-admin,,alice.pw,,alice\n"
            "g,g,old-admin,,alice.pw,,same\n"
            "h,h,old-admin,,alice.pw,,same\n"
            "i,i\n",
            document,
        )
        csv = self.csvPath
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: credentials.broken.password_file: password file"
                f" {self.directory}/none.pw does not exist",
                f"{self.configPath}: jobs[0].connections: must be between 1 and 32, not 0",
                f"{csv}: row 2: source_credential: give one of source_password_file,"
                " source_password_credential or source_credential,"
                " not source_password_file and source_credential",
                f"{csv}: row 3: destination_user: missing: the mailbox's user",
                f"{csv}: row 3: source_credential: no credential named 'nobody'"
                " (credentials: broken, old-admin)",
                f"{csv}: row 5: destination_password_file: missing: give"
                " destination_password_file, destination_password_credential"
                " or destination_credential",
                f"{csv}: row 5: connections: expected an integer, got 'x'",
                f"{csv}: row 6: connections: must be between 1 and 32, not 99",
                f"{csv}: row 7: name: duplicate job name 'alice' (first used by jobs[0])",
                f"{csv}: row 9: name: duplicate job name 'same'"
                f" (first used by {csv} row 8)",
                f"{csv}: row 10: 2 fields, but the header has 7",
            ],
        )

    def test_duplicateAcrossTemplatesAndYAML(self) -> None:
        """
        A YAML job after a template may not reuse a row's name.
        """
        document = self.userDocument()
        document["jobs"].append(dict(document["jobs"][0], name="users-x"))
        problems = self.userProblems(
            "source_user,destination_user,source_credential,destination_password_file\n"
            "x,x,old-admin,alice.pw\n",
            document,
        )
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: jobs[2].name: duplicate job name 'users-x'"
                f" (first used by {self.csvPath} row 2)"
            ],
        )

    def test_sameMigrationInTwoRows(self) -> None:
        """
        Two rows of a user list naming the same source and destination
        accounts under two job names are one migration twice: a problem
        naming both rows.
        """
        problems = self.userProblems(
            "source_user,destination_user,source_credential,destination_password_file,name\n"
            "x,x,old-admin,alice.pw,first\n"
            "x,x,old-admin,alice.pw,second\n",
            self.userDocument(),
        )
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: {self.csvPath} row 3: job 'second' has the same source,"
                f" destination and folders as job 'first' ({self.csvPath} row 2): the same"
                " messages would be copied twice"
            ],
        )

    def test_fileProblems(self) -> None:
        """
        A missing list, an empty one, one without rows and one that is not
        UTF-8 are one problem each.
        """
        document = self.userDocument()
        document["jobs"][1]["jobs_from"] = "nope.csv"
        writeFile(self.configPath, yaml.safe_dump(document))
        error = self.assertRaises(ConfigError, loadConfig, self.configPath)
        self.assertEqual(
            error.problems,
            (
                f"{self.configPath}: jobs[1].jobs_from: no such file:"
                f" {self.directory}/nope.csv",
            ),
        )
        csv = self.csvPath
        self.assertEqual(
            self.userProblems(""),
            [f"{csv}: the file is empty: a header row is required"],
        )
        self.assertEqual(
            self.userProblems(
                "source_user,destination_user,source_credential,"
                "destination_password_file\n\n"
            ),
            [f"{csv}: no users: the file has a header row but no rows"],
        )
        self.assertEqual(
            self.userProblems(b"source_user\n\xff\n"), [f"{csv}: not UTF-8 text"]
        )

    def test_templateProblems(self) -> None:
        """
        A template is checked as a job is, and its rows are still checked
        against each other.
        """
        document = self.userDocument()
        document["jobs"][1]["destination"] = {"server": "nwe"}
        document["jobs"][1]["frobnicate"] = 1
        problems = self.userProblems(
            "source_user,destination_user,name\na,a,x\nb,b,x\n", document
        )
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: jobs[1].frobnicate: unknown key 'frobnicate'"
                f" (known keys: {', '.join(userlist._TEMPLATE_KEYS)})",
                f"{self.configPath}: jobs[1].destination.server: no server named"
                " 'nwe' (servers: new, old)",
                f"{self.csvPath}: row 3: name: duplicate job name 'x'"
                f" (first used by {self.csvPath} row 2)",
            ],
        )

    def test_thousandRows(self) -> None:
        """
        A list of 1,000 rows with problems in some reports every one of
        them, and nothing else.
        """
        lines = [
            "source_user,destination_user,source_credential,destination_password_file"
        ]
        bad = set(range(7, 1000, 97))
        for index in range(1000):
            credential = "missing" if index in bad else "old-admin"
            lines.append(f"u{index},u{index},{credential},alice.pw")
        problems = self.userProblems("\n".join(lines) + "\n")
        self.assertEqual(
            problems,
            [
                f"{self.csvPath}: row {index + 2}: source_credential: no credential"
                " named 'missing' (credentials: old-admin)"
                for index in sorted(bad)
            ],
        )
        lines = [line.replace(",missing,", ",old-admin,") for line in lines]
        self.assertEqual(len(self.loadUsers("\n".join(lines)).jobs), 1001)


class CostTests(UserListTestCase):
    """
    A list's cost does not grow with what its rows share.
    """

    def test_passwordFilesReadOnce(self) -> None:
        """
        A credential's password file is read once however many rows use
        it, and so is a password file many rows name; rows share the
        template's settings rather than copies of them.
        """
        reads: list[str] = []

        def counting(path: str, kind: str = "password") -> str:
            reads.append(path)
            with open(path) as f:
                return f.readline().rstrip("\n")

        self.patch(secretkeys, "readPasswordFile", counting)
        rows = "".join(f"u{i},u{i},old-admin,alice.pw\n" for i in range(50))
        loaded = self.loadUsers(
            "source_user,destination_user,source_credential,destination_password_file\n"
            + rows
        )
        self.assertEqual(
            sorted(reads), sorted([self.passwordFile, self.adminFile, self.passwordFile])
        )
        jobs = loaded.jobs[1:]
        self.assertEqual(len(jobs), 50)
        self.assertIs(jobs[0].pipeline, jobs[49].pipeline)
        self.assertIs(jobs[0].source.password, jobs[49].source.password)  # type: ignore[union-attr]


class ExampleTests(UserListTestCase):
    """
    The example configuration shows C{credentials} and a template, and its
    sample user list loads with it.
    """

    def test_exampleTemplateLoads(self) -> None:
        """
        The example's commented C{users} template, uncommented, loads with
        C{config/users.example.csv} (paths replaced by the test's own),
        and shows every column the sample uses.
        """
        text = EXAMPLE.read_text("utf-8")
        block = re.search(
            r"^  # - name: users\n((?:  #   .*\n)+)", text, re.MULTILINE
        )
        assert block is not None
        template = yaml.safe_load(
            "- name: users\n" + re.sub(r"(?m)^  #   ", "  ", block.group(1))
        )[0]
        self.assertEqual(set(template), {"name", "jobs_from", "source", "destination", "connections"})
        document = yaml.safe_load(text)
        self.assertEqual(
            {key for entry in document["credentials"].values() for key in entry},
            set(config._CREDENTIAL_KEYS),
        )
        example = self.userDocument()
        example["servers"] = {
            name: {"endpoint": server["endpoint"]}
            for name, server in document["servers"].items()
        }
        example["jobs"] = [template]
        csvText = (EXAMPLE.parent / template["jobs_from"]).read_text("utf-8")
        for written in set(re.findall(r"/etc/imapmig/[a-z]+\.pw", csvText)):
            csvText = csvText.replace(written, self.passwordFile)
        writeFile(os.path.join(self.directory, template["jobs_from"]), csvText)
        writeFile(self.configPath, yaml.safe_dump(example))
        loaded = loadConfig(self.configPath)
        self.assertEqual(
            [job.name for job in loaded.jobs],
            ["users-alice@example.org", "bob-archive"],
        )
        self.assertTrue(all(job.connections == 1 for job in loaded.jobs))


class LazyTests(UserListTestCase):
    """
    A user list kept as written (C{lazyUserLists}, a fleet's daemon): its
    rows read when asked, each job the same as a parse expanding it makes.
    """

    rowsText = (
        "source_user,destination_user,source_credential,destination_password_file,name\n"
        "alice,alice@example.org,old-admin,alice.pw,\n"
        "bob,bob@example.org,old-admin,bob.pw,bob-archive\n"
    )

    def loadLazy(self, csvText: str) -> Config:
        """
        Write C{csvText} as C{users.csv} and load the configuration with
        its user list kept as written.
        """
        writeFile(self.csvPath, csvText)
        writeFile(self.configPath, yaml.safe_dump(self.userDocument()))
        return loadConfig(self.configPath, lazyUserLists=True)

    def test_rowsNotRead(self) -> None:
        """
        The parse reads no row: the configuration's jobs are the YAML's
        alone, the list is kept with its file's digest, and a list whose
        rows are wrong parses (its problems come when it is loaded).
        """
        loaded = self.loadLazy(self.rowsText)
        self.assertEqual([job.name for job in loaded.jobs], ["alice"])
        [users] = loaded.userLists
        self.assertEqual((users.name, users.entry, users.path), ("users", "jobs[1]", self.csvPath))
        self.assertEqual(users.fileDigest, userrows.fileDigest(self.csvPath))
        broken = self.loadLazy(self.rowsText + "carol,,nobody,x.pw,\n")
        self.assertNotEqual(broken.userLists[0].fileDigest, users.fileDigest)

    def test_rowsAndJobsAsExpanded(self) -> None:
        """
        Its rows are the jobs an expanding parse makes, and each row's
        params rebuild that row's job.
        """
        expanded = self.loadUsers(self.rowsText).jobs[1:]
        [users] = self.loadLazy(self.rowsText).userLists
        rows = list(users.rows({"alice": "jobs[0]"}))
        self.assertEqual([job for job, _ in rows], list(expanded))
        self.assertEqual([users.job(params) for _, params in rows], list(expanded))
        self.assertEqual(rows[1][1], {"row": 3, "fields": {
            "source_user": "bob", "destination_user": "bob@example.org",
            "source_credential": "old-admin", "destination_password_file": "bob.pw",
            "name": "bob-archive",
        }})  # fmt: skip

    def test_rowProblemsWhenRead(self) -> None:
        """
        Reading the rows reports their problems as a parse does, a name
        taken by a YAML job among them.
        """
        [users] = self.loadLazy(self.rowsText + "carol,carol,nobody,alice.pw,alice\n").userLists
        error = self.assertRaises(ConfigError, list, users.rows({"alice": "jobs[0]"}))
        self.assertEqual(len(error.problems), 2, error.problems)
        self.assertIn("row 4: source_credential: no credential named 'nobody'", error.problems[0])
        self.assertIn("duplicate job name 'alice'", error.problems[1])

    def test_lazyWithPostgreSQL(self) -> None:
        """
        Asked to keep the lists as written where the state is PostgreSQL
        (C{lazyUserLists=None}, a daemon), a SQLite state's configuration
        expands them and a PostgreSQL one's keeps them.
        """
        writeFile(self.csvPath, self.rowsText)
        writeFile(self.configPath, yaml.safe_dump(self.userDocument()))
        local = loadConfig(self.configPath, lazyUserLists=None)
        self.assertEqual((len(local.jobs), local.userLists), (3, ()))
        document = self.userDocument()
        document["state"] = "postgresql://imapmig@127.0.0.1:5432/migration"
        document["fleet"] = {"name": "acme"}
        writeFile(self.configPath, yaml.safe_dump(document))
        fleet = loadConfig(self.configPath, lazyUserLists=None)
        self.assertEqual((len(fleet.jobs), len(fleet.userLists)), (1, 1))
