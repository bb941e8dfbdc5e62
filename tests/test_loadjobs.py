"""
Tests for L{imapmig.commands.loadjobs}: C{imapmig state load-jobs} on a
private PostgreSQL (L{imapmig.testing.postgresql}).
"""

from __future__ import annotations

import io
import os
import sys

from imapmig.commands.cli import main
from imapmig.config import loadConfig
from imapmig.queue._pgjoblist import CHANGE_HINT
from imapmig.queue.postgresql import PostgreSQLJobQueue
from tests.test_queue_postgresql import PostgreSQLTestMixin


class LoadJobsTests(PostgreSQLTestMixin):
    """
    C{imapmig state load-jobs --config FILE}.
    """

    def configure(
        self, jobs: dict[str, str], state: str | None = None, fleet: str | None = "acme"
    ) -> str:
        """
        Write a configuration of C{jobs} (name to password), each from its
        own Maildir, with the state in this test's database, of the fleet
        C{fleet} (L{None}: no C{fleet}) unless C{state} gives a SQLite
        file.

        @return: its path.
        """
        base = os.path.abspath("base")
        entries = []
        for name, password in jobs.items():
            maildir = os.path.join(base, name)
            for sub in ("cur", "new", "tmp"):
                os.makedirs(os.path.join(maildir, sub), exist_ok=True)
            entries.append(
                f"{{name: {name}, source: {{maildir: {maildir}}},"
                f" destination: {{server: s, user: {name}, password: {password}}}}}"
            )
        path: str = os.path.abspath(self.mktemp())
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                f"state: {state or self.uri}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                + (f"fleet: {{name: {fleet}}}\n" if fleet and state is None else "")
                + f"jobs: [{', '.join(entries)}]\n"
            )
        return path

    def command(self, *argv: str) -> tuple[int, str, str]:
        """
        Run C{imapmig} with C{argv}: its status, output and errors.
        """
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        out = io.StringIO()
        return main(list(argv), out), out.getvalue(), stderr.getvalue()

    def test_loadAndReplace(self) -> None:
        """
        The command loads the list, then finds it loaded, then replaces it
        with another file's, saying what changed; a daemon of that file
        then starts on it (the command and the daemon digest alike); a
        password changed changes no job.
        """
        first = self.configure({"alice": "p", "bob": "p"})
        self.assertEqual(
            self.command("state", "load-jobs", "--config", first, "--fleet", "acme"),
            (0, "fleet 'acme': job list loaded (generation 1, 2 jobs): 2 added, 0 removed,"
                " 0 removed when their claim ends, 0 changed\n", ""),
        )  # fmt: skip
        self.assertEqual(
            self.command("state", "load-jobs", "--config", first, "--fleet", "acme"),
            (0, "fleet 'acme': the database holds this job list already (generation 1)\n", ""),
        )
        second = self.configure({"alice": "rotated", "carol": "p"})
        self.assertEqual(
            self.command("state", "load-jobs", "--config", second, "--fleet", "acme"),
            (0, "fleet 'acme': job list loaded (generation 2, 2 jobs): 1 added, 1 removed,"
                " 0 removed when their claim ends, 0 changed\n", ""),
        )  # fmt: skip
        queue = PostgreSQLJobQueue.connect(self.uri, loadConfig(second).jobs, "acme")
        self.addCleanup(queue.close)
        self.assertEqual(
            self.sql("SELECT name, position FROM imapmig_queue.jobs ORDER BY position"),
            [("alice", 0), ("carol", 1)],
        )

    def test_loadVacuumsAndAnalyzes(self) -> None:
        """
        A list loaded is vacuumed and analyzed by the command, so that no
        autovacuum does it while the fleet's daemons start; a list found
        loaded already is left alone.
        """
        vacuumed = (
            "SELECT vacuum_count, analyze_count FROM pg_stat_user_tables"
            " WHERE schemaname = 'imapmig_queue' AND relname = 'jobs'"
        )
        config = self.configure({"alice": "p", "bob": "p"})
        self.command("state", "load-jobs", "--config", config, "--fleet", "acme")
        self.assertEqual(self.sql(vacuumed), [(1, 1)])
        self.command("state", "load-jobs", "--config", config, "--fleet", "acme")
        self.assertEqual(self.sql(vacuumed), [(1, 1)])

    def test_otherFleetRefused(self) -> None:
        """
        A database holding another fleet is refused: status 2, the
        refusal's one line, nothing changed.
        """
        config = self.configure({"alice": "p"})
        self.command("state", "load-jobs", "--config", config, "--fleet", "acme")
        status, out, err = self.command("state", "load-jobs", "--config", config, "--fleet", "beta")
        self.assertEqual((status, out), (2, ""))
        self.assertIn(": this database holds fleet 'acme' (1 jobs, loaded by ", err)
        self.assertIn("this configuration is fleet 'beta': give it a database of its own\n", err)
        self.assertEqual(self.sql("SELECT name FROM imapmig_queue.fleet"), [("acme",)])

    def test_notAFleet(self) -> None:
        """
        A SQLite state, or no fleet's name, is refused with status 2 (a
        PostgreSQL state without C{fleet} is an invalid configuration).
        """
        sqlite = self.configure({"alice": "p"}, state=os.path.abspath("state.sqlite"))
        status, out, err = self.command("state", "load-jobs", "--config", sqlite, "--fleet", "acme")
        self.assertEqual((status, out), (2, ""))
        self.assertIn("state load-jobs needs a PostgreSQL state database and a fleet's name", err)
        noFleet = self.configure({"a": "p"}, fleet=None)
        status, out, err = self.command("state", "load-jobs", "--config", noFleet)
        self.assertEqual((status, out), (2, ""))
        self.assertIn(f"{noFleet}: fleet: required with a PostgreSQL state", err)

    def test_hint(self) -> None:
        """
        A daemon refused for another list is told of this command.
        """
        self.assertIn("imapmig state load-jobs --config FILE", CHANGE_HINT)


class UserListLoadTests(PostgreSQLTestMixin):
    """
    C{imapmig state load-jobs} with a user list: its rows loaded as its
    template and their params, which a daemon of the same file then
    starts on without reading them.
    """

    def configure(self, rows: str) -> str:
        """
        Write a configuration whose one entry is a user list of C{rows}
        (after the header), its state in this test's database.

        @return: its path.
        """
        base = os.path.abspath(self.mktemp())
        os.makedirs(base)
        with open(os.path.join(base, "users.csv"), "w") as f:
            f.write("destination_user,destination_password_file\n" + rows)
        with open(os.open(os.path.join(base, "pw"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("secret\n")
        maildir = os.path.join(base, "maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        path = os.path.join(base, "imapmig.yaml")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(
                f"state: {self.uri}\nfleet: {{name: acme}}\n"
                f"servers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{{name: users, jobs_from: users.csv, source: {{maildir: {maildir}}},"
                " destination: {server: s}}]\n"
            )
        return path

    def command(self, *argv: str) -> tuple[int, str, str]:
        """
        Run C{imapmig} with C{argv}: its status, output and errors.
        """
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        out = io.StringIO()
        return main(list(argv), out), out.getvalue(), stderr.getvalue()

    def test_loadedThenJoined(self) -> None:
        """
        The command loads one row per user and the template once; a
        daemon of the lazily read file joins without reading a row and
        claims the first row's job, the job an expanding parse makes.
        """
        path = self.configure("alice,pw\nbob,pw\n")
        status, out, err = self.command("state", "load-jobs", "--config", path, "--fleet", "acme")
        self.assertEqual((status, err), (0, ""))
        self.assertIn("job list loaded (generation 1, 2 jobs): 2 added", out)
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.templates"), [(1,)])
        config = loadConfig(path, lazyUserLists=True)
        self.patch(type(config.userLists[0]), "rows", lambda *a: self.fail("rows read"))
        queue = PostgreSQLJobQueue.connect(self.uri, config.jobs, "acme", userLists=config.userLists)
        self.addCleanup(queue.close)
        me = queue.register("host", 1, "1.0", 600.0)
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job, loadConfig(path).jobs[0])

    def test_rowProblems(self) -> None:
        """
        A row's problem, found as the rows are loaded, is refused with
        exit 2 naming the file and row; nothing is written (the queue's
        tables neither: one transaction).
        """
        path = self.configure("alice,pw\nbob,missing.pw\n")
        status, out, err = self.command("state", "load-jobs", "--config", path, "--fleet", "acme")
        self.assertEqual((status, out), (2, ""))
        self.assertIn("users.csv: row 3: destination_password_file", err)
        self.assertEqual(self.sql("SELECT to_regclass('imapmig_queue.jobs')"), [(None,)])
