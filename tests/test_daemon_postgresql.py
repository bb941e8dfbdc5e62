# -*- test-case-name: tests.test_daemon_postgresql -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.daemon.pgstate}: a daemon, C{--check-config
--connect} and the commands on a PostgreSQL state, against a private
cluster (L{imapmig.testing.postgresql}): what is refused at start, each
with one line naming the setting and never the password, and a run whose
state C{imapmig report} and C{verify} then read.  Without PostgreSQL they
skip, and fail under C{CI=true}.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from typing import Any

import psycopg
import yaml
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.commands import cli
from imapmig.commands import plan as planCommand
from imapmig.commands import verify as verifyCommand
from imapmig.config import Config, PostgreSQLState, loadConfig
from imapmig.config.statelocation import STATE_KEYS
from imapmig.daemon.pgstate import (
    _cutAtTheEnd,
    checkDatabase,
    openCommandStore,
    openFleetState,
)
from imapmig.errors import ConfigError, NoStateYet
from imapmig.state.memory import MemoryStateStore
from imapmig.state.pgconnect import applicationName
from imapmig.state.postgresql import SCHEMA_VERSION, PostgreSQLStateStore
from imapmig.testing.dovecot import requireDovecot
from imapmig.testing.ports import listeningPorts
from imapmig.testing.postgresql import PASSWORD_ROLE, PostgreSQLCluster, requirePostgreSQL
from tests.support import (
    SOURCE_TREE,
    daemonCommand,
    freshUser,
    plainServer,
    settleConnections,
    sharedDovecot,
    sourceTreeEnvironment,
    startDaemon,
    writeEmlJobConfig,
    writePasswordFile,
)
from tests.test_daemon_reload import waitForLine

# A wrong password, which no output may show either.
WRONG = "not-the-pg-password-4711"


def rewritePasswordFile(path: str, password: str) -> None:
    """
    Replace the password file at C{path} with one holding C{password}.
    """
    os.remove(path)
    writePasswordFile(path, password)


class ClusterMixin:
    """
    A private cluster, a database owned by L{PASSWORD_ROLE}, and a
    configuration of one job whose state is that database, its password
    in a file beside it.
    """

    cluster: PostgreSQLCluster
    directory: str

    def startCluster(self, testCase: SynchronousTestCase) -> None:
        requirePostgreSQL(testCase)
        self.cluster = PostgreSQLCluster(testCase.mktemp())
        testCase.addCleanup(self.cluster.destroy)
        self.cluster.start()
        self.cluster.createDatabase("fleet", owner=PASSWORD_ROLE)
        self.directory = os.path.abspath(testCase.mktemp())
        os.makedirs(self.directory)
        self.passwordFile = writePasswordFile(
            os.path.join(self.directory, "pg.pw"), self.cluster.password
        )

    def uri(self, user: str = PASSWORD_ROLE, database: str = "fleet", port: int = 0) -> str:
        """
        The URI of C{database} as C{user}, without a password.
        """
        return f"postgresql://{user}@127.0.0.1:{port or self.cluster.port}/{database}"

    def stateKeys(self, **keys: object) -> dict[str, object]:
        """
        The keys of the state: L{uri}, the password file, the fleet, then
        C{keys} (a key given L{None} is left out).
        """
        top: dict[str, object] = {
            "state": self.uri(),
            "state_password_file": self.passwordFile,
            "fleet": {"name": "acme"},
            **keys,
        }
        return {key: value for key, value in top.items() if value is not None}

    def writeConfig(
        self, configPath: str, environ: dict[str, str] | None = None, **keys: object
    ) -> Config:
        """
        Give the configuration at C{configPath} the state L{stateKeys}; read
        it in C{environ}.
        """
        with open(configPath) as f:
            document = yaml.safe_load(f)
        for key in STATE_KEYS:
            document.pop(key, None)
        document.update(self.stateKeys(**keys))
        with open(configPath, "w") as f:
            yaml.safe_dump(document, f)
        return loadConfig(configPath, environ or {})

    def config(self, **keys: object) -> Config:
        """
        A configuration of one job (never run) on the state L{stateKeys}.
        """
        path = os.path.join(self.directory, "imapmig.yaml")
        export = os.path.join(self.directory, "export")
        os.makedirs(export, exist_ok=True)
        document = {
            "status": "off",
            "servers": {"new": {"endpoint": "tcp:127.0.0.1:143", "starttls": "off"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"eml_dir": export},
                    "destination": {"server": "new", "user": "u", "password_file": self.passwordFile},
                }
            ],
        }
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return self.writeConfig(path, None, **keys)

    def sql(self, statement: str, user: str = "postgres") -> list[tuple[Any, ...]]:
        """
        Run C{statement} in the database as C{user} (trusted on loopback).
        """
        with psycopg.connect(self.cluster.dsn("fleet", user), autocommit=True) as connection:
            cursor = connection.execute(statement)
            return cursor.fetchall() if cursor.description else []


class StartCheckTests(ClusterMixin, SynchronousTestCase):
    """
    L{checkDatabase}: what a daemon checks before it runs on the database.
    """

    def setUp(self) -> None:
        self.startCluster(self)

    def refusal(self, config: Config, mode: str = "migrate") -> str:
        """
        The one line refusing C{config}'s state, which holds no password.
        """
        e = self.assertRaises(ConfigError, checkDatabase, config, mode)
        [line] = e.problems
        assert isinstance(line, str)
        self.assertNotIn(self.cluster.password, line)
        self.assertNotIn(WRONG, line)
        self.assertNotIn("\n", line)
        return line

    def test_migrates(self) -> None:
        """
        A daemon's check makes the state's schema in a new database; the
        next finds it current.
        """
        config = self.config()
        self.assertEqual(checkDatabase(config), 0)
        self.assertEqual(checkDatabase(config), SCHEMA_VERSION)
        self.assertEqual(self.sql("SELECT max(version) FROM imapmig.schema_version"), [(SCHEMA_VERSION,)])

    def test_wrongPassword(self) -> None:
        """
        A password refused is reported under the key that gave it, with
        the database without any password.
        """
        rewritePasswordFile(self.passwordFile, WRONG)
        config = self.config()
        self.assertEqual(
            self.refusal(config),
            f"{config.path}: state_password_file: {self.uri()}: the password was refused:"
            f' connection to server at "127.0.0.1", port {self.cluster.port} failed: FATAL:'
            f'  password authentication failed for user "{PASSWORD_ROLE}"',
        )

    def test_wrongCredential(self) -> None:
        """
        A password from a systemd credential is reported under
        C{state_password_credential}.
        """
        credentials = os.path.join(self.directory, "credentials")
        os.makedirs(credentials)
        writePasswordFile(os.path.join(credentials, "pg"), WRONG)
        path = os.path.join(self.directory, "imapmig.yaml")
        self.config()
        config = self.writeConfig(
            path,
            {"CREDENTIALS_DIRECTORY": credentials},
            state_password_file=None,
            state_password_credential="pg",
        )
        self.assertIn(f"{config.path}: state_password_credential: {self.uri()}: the password was refused:",
                      self.refusal(config))

    def test_noPassword(self) -> None:
        """
        Without any password for a role that needs one, the refusal names
        C{state} and says where a password comes from.
        """
        config = self.config(state_password_file=None)
        self.assertEqual(
            self.refusal(config),
            f"{config.path}: state: {self.uri()}: cannot connect: connection to server at"
            f' "127.0.0.1", port {self.cluster.port} failed: fe_sendauth: no password supplied'
            " (give state_password_file or state_password_credential, or a line for it in"
            " libpq's PGPASSFILE)",
        )

    def test_wrongDatabase(self) -> None:
        """
        A database that does not exist is refused naming C{state}.
        """
        config = self.config(state=self.uri(database="nope"))
        self.assertEqual(
            self.refusal(config),
            f"{config.path}: state: {self.uri(database='nope')}: cannot connect: connection to"
            f' server at "127.0.0.1", port {self.cluster.port} failed: FATAL:  database "nope"'
            " does not exist",
        )

    def test_unreachable(self) -> None:
        """
        A server that does not answer is refused naming C{state}, libpq's
        lines joined into one.
        """
        config = self.config(state=self.uri(port=1))
        self.assertEqual(
            self.refusal(config),
            f"{config.path}: state: {self.uri(port=1)}: cannot connect: connection to server at"
            ' "127.0.0.1", port 1 failed: Connection refused Is the server running on that host'
            " and accepting TCP/IP connections?",
        )

    def test_synchronousCommitOff(self) -> None:
        """
        A role whose C{synchronous_commit} is off is refused, naming it.
        """
        self.sql(f"ALTER ROLE {PASSWORD_ROLE} SET synchronous_commit = off")
        config = self.config()
        self.assertEqual(
            self.refusal(config),
            f"{config.path}: state: {self.uri()}: synchronous_commit is off for role"
            f" {PASSWORD_ROLE}: a crash could lose a committed journal entry whose messages were"
            f" then sent again; run ALTER ROLE {PASSWORD_ROLE} SET synchronous_commit = on",
        )
        self.assertEqual(self.sql("SELECT to_regclass('imapmig.messages')"), [(None,)])

    def test_noPermission(self) -> None:
        """
        A role that may not write the state's tables is refused, naming
        them; one that may not create the schema, naming the grant it
        needs, at a daemon's start as in C{--check-config --connect}.
        """
        checkDatabase(self.config())
        self.sql("CREATE ROLE reader LOGIN")
        self.sql("GRANT USAGE ON SCHEMA imapmig TO reader")
        self.sql("GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA imapmig TO reader")
        config = self.config(state=self.uri(user="reader"), state_password_file=None)
        line = self.refusal(config)
        self.assertTrue(
            line.startswith(
                f"{config.path}: state: {self.uri(user='reader')}: role reader may not read and"
                " write imapmig.budget_use, imapmig.folder_fallbacks,"
            ),
            line,
        )
        self.assertTrue(line.endswith(": grant it SELECT, INSERT, UPDATE, DELETE on the tables"
                                      " (USAGE on the schemas and sequences)"), line)
        self.sql("CREATE DATABASE other")
        other = self.config(state=self.uri(user="reader", database="other"), state_password_file=None)
        # A daemon's start says which grant is missing, as the check does.
        for mode in ("migrate", "probe"):
            self.assertIn(
                "role reader may not create the schema imapmig (version 0 found,"
                f" {SCHEMA_VERSION} needed): grant it CREATE on the database",
                self.refusal(other, mode),
            )

    def test_grantedRoleNeedsNoCreate(self) -> None:
        """
        A role granted the tables but not C{CREATE} runs on a current
        schema.
        """
        checkDatabase(self.config())
        self.sql("CREATE ROLE writer LOGIN")
        self.sql("GRANT USAGE ON SCHEMA imapmig TO writer")
        self.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA imapmig TO writer")
        self.sql("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA imapmig TO writer")
        config = self.config(state=self.uri(user="writer"), state_password_file=None)
        self.assertEqual(checkDatabase(config), SCHEMA_VERSION)

    def test_newerSchema(self) -> None:
        """
        A schema newer than this code's is refused, naming both versions,
        by a daemon and a command.
        """
        config = self.config()
        checkDatabase(config)
        self.sql("INSERT INTO imapmig.schema_version VALUES (99, now(), 'later')")
        expected = (
            f"{config.path}: state: {self.uri()}: the state database has schema version 99,"
            f" newer than this imapmig knows ({SCHEMA_VERSION}); upgrade imapmig"
        )
        self.assertEqual(self.refusal(config), expected)
        self.assertEqual(self.refusal(config, "read"), expected)
        self.assertEqual(self.refusal(config, "probe"), expected)

    def test_commandReads(self) -> None:
        """
        A command refuses a database without a state, or one the daemon
        has not migrated, and changes nothing; C{plan} reads none as
        empty.
        """
        config = self.config()
        e = self.assertRaises(NoStateYet, openCommandStore, config)
        self.assertEqual(
            e.problems,
            (f"{config.path}: state: {self.uri()}: holds no imapmig state yet (no daemon has run on it)",),
        )
        self.assertIsInstance(openCommandStore(config, empty=True), MemoryStateStore)
        self.assertEqual(self.sql("SELECT to_regnamespace('imapmig')"), [(None,)])
        checkDatabase(config)
        store = openCommandStore(config)
        try:
            self.assertEqual(self.successResultOf(store.counts("a")).copied, 0)
            # A report over a whole migration is not held to a daemon
            # page's 5 s statement limit.
            assert isinstance(store, PostgreSQLStateStore)
            limit = self.successResultOf(
                store.readOnReader(
                    lambda c: c.execute("SHOW statement_timeout").fetchone()
                )
            )
            self.assertEqual(limit, ("10min",))
        finally:
            store.close()


class FleetReportTests(ClusterMixin, SynchronousTestCase):
    """
    C{imapmig report} on a fleet's database.
    """

    def setUp(self) -> None:
        self.startCluster(self)

    def test_queueHolds(self) -> None:
        """
        A job the fleet's queue holds paused or cancelled (its row's state:
        a fleet keeps no row of C{job_holds}) is reported held, by whom and
        when its last change of state says.  (The report said "0 held" and
        counted a paused job done and a cancelled one failed.)
        """
        config = self.config()
        checkDatabase(config)
        self.assertEqual(cli.main(["state", "load-jobs", "--config", config.path], out=io.StringIO()), 0)
        self.sql("UPDATE imapmig_queue.jobs SET state = 'paused' WHERE name = 'a'")
        self.sql(
            "INSERT INTO imapmig.job_transitions (job, seq, time, source, target, cause, by)"
            " VALUES ('a', 1, 1796600000, 'stopping', 'paused', 'paused by the admin', '192.0.2.7')"
        )
        out = io.StringIO()
        self.assertEqual(cli.main(["report", "--config", config.path], out=out), 0)
        self.assertIn("  paused by 192.0.2.7 at 2026-12-06T", out.getvalue())
        self.assertIn("1 held (1 paused, 0 cancelled)", out.getvalue())
        self.sql("UPDATE imapmig_queue.jobs SET state = 'cancelled' WHERE name = 'a'")
        out = io.StringIO()
        self.assertEqual(cli.main(["report", "--config", config.path], out=out), 1)
        self.assertIn("1 held (0 paused, 1 cancelled)", out.getvalue())
        self.sql("UPDATE imapmig_queue.jobs SET state = 'queued' WHERE name = 'a'")
        out = io.StringIO()
        self.assertEqual(cli.main(["report", "--config", config.path], out=out), 0)
        self.assertIn("0 held (0 paused, 0 cancelled)", out.getvalue())


class OpenFleetStateTests(ClusterMixin, SynchronousTestCase):
    """
    L{openFleetState}: the store and the fleet's job queue a daemon runs
    on.
    """

    def setUp(self) -> None:
        self.startCluster(self)

    def test_opened(self) -> None:
        """
        The database is checked and migrated, the configured jobs loaded
        into the queue; the queue's control connection has a thread of its
        own, the store two; both pools stop after the reactor's shutdown,
        once the connections still open are cut (L{cutAll}: a thread
        blocked on one would keep its pool's stop waiting).
        """
        clock = MemoryReactorClock()
        fleet = openFleetState(self.config(), clock)
        for pool in fleet.pools:
            self.addCleanup(pool.stop)
        self.addCleanup(fleet.store.close)
        self.addCleanup(fleet.queue.queue.close)
        self.assertEqual([pool.max for pool in fleet.pools], [1, 2])
        self.assertEqual(
            [trigger[0] for trigger in clock.triggers["after"]["shutdown"]],
            [_cutAtTheEnd, *(pool.stop for pool in fleet.pools)],
        )
        self.assertEqual(fleet.where, self.uri())
        self.assertEqual(self.sql("SELECT name FROM imapmig_queue.jobs"), [("a",)])
        self.assertEqual(self.sql("SELECT max(version) FROM imapmig.schema_version"), [(SCHEMA_VERSION,)])


    def test_anotherFleet(self) -> None:
        """
        A database that holds another fleet is refused with one line
        naming C{fleet}, both fleets and the database once.
        """
        first = openFleetState(self.config(), MemoryReactorClock())
        for pool in first.pools:
            self.addCleanup(pool.stop)
        self.addCleanup(first.store.close)
        self.addCleanup(first.queue.queue.close)
        config = self.config(fleet={"name": "beta"})
        e = self.assertRaises(ConfigError, openFleetState, config, MemoryReactorClock())
        [line] = e.problems
        self.assertTrue(
            line.startswith(f"{config.path}: fleet: {self.uri()}: this database holds fleet 'acme' ("),
            line,
        )
        self.assertTrue(
            line.endswith("this configuration is fleet 'beta': give it a database of its own"), line
        )


def runLauncher(*arguments: str) -> subprocess.CompletedProcess[bytes]:
    """
    Run C{python -m imapmig.daemon} to its end.
    """
    return subprocess.run(
        daemonCommand(None, *arguments),
        env=sourceTreeEnvironment(),
        cwd=SOURCE_TREE,
        capture_output=True,
        timeout=120,
    )


class LauncherTests(ClusterMixin, SynchronousTestCase):
    """
    The daemon and C{--check-config --connect} on a PostgreSQL state, run
    as admins run them.
    """

    def setUp(self) -> None:
        self.startCluster(self)

    def assertRefused(
        self, result: subprocess.CompletedProcess[bytes], key: str, printed: int = 0
    ) -> str:
        """
        C{result} is a refusal at start: exit status 2, and one line of
        output after the C{printed} lines of standard output, naming
        C{key} and the database; no password in any.
        """
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 2, output)
        for secret in (self.cluster.password, WRONG):
            self.assertNotIn(secret.encode(), output)
        self.assertEqual(len(result.stdout.splitlines()), printed, output)
        [line] = result.stderr.decode().splitlines() or result.stdout.decode().splitlines()
        self.assertIn(f": {key}: {self.uri()}: ", line)
        return line

    def test_daemonRefusesWrongPassword(self) -> None:
        """
        The daemon refuses a wrong password at start: exit status 2, one
        line naming C{state_password_file}, no password in its whole
        output.
        """
        rewritePasswordFile(self.passwordFile, WRONG)
        config = self.config()
        line = self.assertRefused(runLauncher("--config", config.path), "state_password_file")
        self.assertIn("password authentication failed", line)

    def test_daemonRefusesWrongDatabase(self) -> None:
        """
        A database that does not exist: exit status 2, one line naming
        C{state}.
        """
        config = self.config()
        self.cluster.psql("ALTER DATABASE fleet RENAME TO gone")
        line = self.assertRefused(runLauncher("--config", config.path), "state")
        self.assertIn('database "fleet" does not exist', line)

    def test_checkConfigConnect(self) -> None:
        """
        C{--check-config} names the fleet; with C{--connect} it connects
        to the database, changing nothing, and says so.
        """
        config = self.config(fleet={"name": "acme", "lease": 30})
        result = runLauncher("--config", config.path, "--check-config", "--connect")
        # 1: the job's server, which nothing here answers for, failed.
        self.assertEqual(result.returncode, 1, result.stderr)
        lines = result.stdout.decode().splitlines()
        self.assertEqual(
            lines[:4],
            [
                f"{config.path}: configuration OK: 1 job, 1 server",
                f"{config.path}: state: PostgreSQL database {self.uri()}",
                f"{config.path}: fleet: acme (lease 30 s)",
                f"{config.path}: state: {self.uri()}: ok: connected, no state yet: the first"
                " daemon makes it",
            ],
        )
        self.assertTrue(lines[4].startswith("servers.new (tcp:127.0.0.1:143): failed: "), lines)
        self.assertEqual(self.sql("SELECT to_regnamespace('imapmig')"), [(None,)])
        rewritePasswordFile(self.passwordFile, WRONG)
        self.assertRefused(
            runLauncher("--config", config.path, "--check-config", "--connect"),
            "state_password_file",
            printed=3,
        )


class RunTests(ClusterMixin, TestCase):
    """
    A daemon of a fleet runs a job on a PostgreSQL state, which C{imapmig
    report}, C{plan} and C{verify} then read.
    """

    async def test_runReportVerify(self) -> None:
        """
        The daemon, run as admins run it, migrates its job through the
        fleet's queue, records it in PostgreSQL, and with
        C{--exit-when-done} exits 0 once nothing is left anywhere, no
        password in its whole output; C{imapmig report}, C{plan} and
        C{verify} read that state.
        """
        self.startCluster(self)
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        config = self.writeConfig(writeEmlJobConfig(self, instance, user, 4))
        daemon = startDaemon(self, reactor, config.path, daemonCommand(config.path, "--exit-when-done"))
        self.assertEqual(await daemon.exited(reactor, 120), 0, daemon.tail())
        self.assertNotIn(self.cluster.password.encode(), bytes(daemon.output))
        self.assertEqual(sum(map(len, instance.fetchAll(user.name).values())), 4)
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig.messages WHERE job = 'job'"), [(4,)])
        self.assertEqual(self.sql("SELECT state FROM imapmig_queue.jobs"), [("done",)])
        out = io.StringIO()
        self.assertEqual(cli.main(["report", "--config", config.path, "--json"], out=out), 0)
        [entry] = json.loads(out.getvalue())
        self.assertEqual((entry["job"], entry["copied"]), ("job", 4))
        store = openCommandStore(config)
        self.addCleanup(store.close)
        report = os.path.join(self.directory, "verify.json")
        out = io.StringIO()
        verified = await verifyCommand.verify(config, ["job"], store, reactor, report, out)
        self.assertEqual(verified, 0, out.getvalue())
        out = io.StringIO()
        self.assertEqual(await planCommand.plan(config, ["job"], store, reactor, True, out), 0)
        [planned] = json.loads(out.getvalue())
        totals = planned["totals"]
        self.assertEqual((totals["to_copy"], totals["migrated"]), (0, 4), planned)
        await settleConnections(reactor)
        self.assertIsInstance(config.state, PostgreSQLState)


async def health(port: int) -> tuple[int, dict[str, Any]]:
    """
    The daemon's C{/healthz}: its status code and body.
    """
    import treq

    response = await treq.get(f"http://127.0.0.1:{port}/healthz", persistent=False, timeout=30)
    body = await response.content()
    code: int = response.code
    return code, json.loads(body)


class UserListTests(ClusterMixin, TestCase):
    """
    A fleet's user list, loaded by C{imapmig state load-jobs}, run by a
    daemon that reads it as written (its rows in the database).
    """

    async def test_loadedThenRun(self) -> None:
        """
        The daemon of a configuration whose user list the command loaded
        joins the fleet (the same list's digest: not refused) and runs
        its rows, each built from its params: the real account's message
        arrives, the other rows fail at login, and it exits once nothing
        is left.
        """
        from tests.test_service import makeMaildir

        self.startCluster(self)
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        password = writePasswordFile(os.path.join(self.directory, "user.pw"), user.password)
        with open(os.path.join(self.directory, "users.csv"), "w") as f:
            f.write(f"destination_user\n{user.name}\nnobody-1\nnobody-2\n")
        path = os.path.join(self.directory, "imapmig.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(
                {
                    "status": "off",
                    "servers": {"new": plainServer(instance)},
                    "jobs": [
                        {"name": "users", "jobs_from": "users.csv",
                         "source": {"maildir": makeMaildir(self)},
                         "destination": {"server": "new", "password_file": password},
                         "retry_attempts": 1},
                    ],
                },
                f,
            )  # fmt: skip
        self.writeConfig(path)
        out = io.StringIO()
        self.assertEqual(cli.main(["state", "load-jobs", "--config", path], out=out), 0)
        self.assertIn("3 jobs", out.getvalue())
        # --check-config checks its rows (a row's problem is found there).
        checked = subprocess.run(
            daemonCommand(path, "--check-config"), capture_output=True, text=True,
            env=sourceTreeEnvironment(), cwd=SOURCE_TREE, timeout=120,
        )  # fmt: skip
        self.assertIn("configuration OK: 3 jobs", checked.stdout, checked.stderr)
        daemon = startDaemon(self, reactor, path, daemonCommand(path, "--exit-when-done"))
        # 1: two of its jobs failed.
        self.assertEqual(await daemon.exited(reactor, 120), 1, daemon.tail())
        self.assertIn(b"0 jobs and 1 user list, 1 server", bytes(daemon.output))
        self.assertEqual(sum(map(len, instance.fetchAll(user.name).values())), 1)
        self.assertEqual(
            self.sql("SELECT name, state FROM imapmig_queue.jobs ORDER BY position"),
            [(f"users-{user.name}", "done"), ("users-nobody-1", "failed"),
             ("users-nobody-2", "failed")],
        )  # fmt: skip
        await settleConnections(reactor)


class HealthTests(ClusterMixin, TestCase):
    """
    C{/healthz} of a daemon whose database stops and starts again.
    """

    async def waitForHealth(self, port: int, status: str) -> dict[str, Any]:
        """
        Ask C{/healthz} until it says C{status}, at most 60 s.
        """
        for _ in range(600):
            code, body = await health(port)
            if body["status"] == status:
                return body
            await deferLater(reactor, 0.1, lambda: None)
        raise AssertionError(f"/healthz still says {body} after 60 s")

    async def test_degradedWhileStopped(self) -> None:
        """
        While the database is stopped, C{/healthz} says C{degraded} (503)
        naming it without its password; once it is started again, C{ok}.
        The daemon holds at most 3 connections to it.
        """
        self.startCluster(self)
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        path = writeEmlJobConfig(self, instance, user, 2)
        config = self.writeConfig(path, status={"listen": "tcp:0:interface=127.0.0.1"})
        daemon = startDaemon(self, reactor, config.path, daemonCommand(config.path))
        await waitForLine(daemon, r"Registered in the fleet's queue as daemon")
        [port] = listeningPorts(daemon.pid)
        await self.waitForHealth(port, "ok")
        # The daemon's connections: the queue's and the store's, 3 at most.
        [(connections,)] = self.sql(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = 'fleet' AND application_name LIKE 'imapmig%'"
        )
        self.assertTrue(1 <= connections <= 3, connections)
        self.cluster.stop("immediate")
        body = await self.waitForHealth(port, "degraded")
        self.assertEqual(body["database"], self.uri())
        code, _ = await health(port)
        self.assertEqual(code, 503)
        self.cluster.start()
        await self.waitForHealth(port, "ok")
        self.assertNotIn(self.cluster.password.encode(), bytes(daemon.output))
        self.assertIn(b"Health check: the state store does not answer: " + self.uri().encode(),
                      bytes(daemon.output))



async def page(port: int, path: str) -> bytes:
    """
    The daemon's page C{path} (200 expected).
    """
    import treq

    response = await treq.get(f"http://127.0.0.1:{port}{path}", persistent=False, timeout=30)
    assert response.code == 200, (path, response.code)
    body: bytes = await response.content()
    return body


class FleetPageTests(ClusterMixin, TestCase):
    """
    The pages of a daemon of a fleet show the fleet's daemons, read on its
    state store's reader connection.
    """

    async def test_showsEveryDaemon(self) -> None:
        """
        A daemon of a fleet of two registered daemons shows both on
        C{/status.json} (itself as C{this}) and C{/metrics}, and still
        holds at most 3 connections to the database.  It counts no
        source in a census (each daemon would log in to every source).
        Its connections (control, reader, writer) are named by its host, pid and role.
        """
        self.startCluster(self)
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        path = writeEmlJobConfig(self, instance, user, 2)
        config = self.writeConfig(path, status={"listen": "tcp:0:interface=127.0.0.1"})
        daemon = startDaemon(self, reactor, config.path, daemonCommand(config.path))
        await waitForLine(daemon, r"Registered in the fleet's queue as daemon")
        self.sql(
            "INSERT INTO imapmig_queue.daemons (daemon_id, incarnation, host, pid, version,"
            " started_at, heartbeat_at, lease_until) VALUES ('00000000-0000-0000-0000-00000000beef',"
            " 987654321, 'other-host', 4242, '9.9', now(), now(), now() + interval '1 hour')"
        )
        [port] = listeningPorts(daemon.pid)
        document = json.loads(await page(port, "/status.json"))
        hosts = sorted((d["host"], d["this"], d["live"]) for d in document["daemons"])
        self.assertEqual(len(hosts), 2, document.get("daemons_error"))
        self.assertIn(("other-host", False, True), hosts)
        self.assertIn(True, [this for _, this, _ in hosts])
        # Its own rate, which the daemons' table does not hold.
        [mine] = [d for d in document["daemons"] if d["this"]]
        self.assertIsInstance(mine["messages_per_second"], float)
        metrics = (await page(port, "/metrics")).decode()
        self.assertIn("imapmig_fleet_daemons_live 2.0", metrics)
        self.assertIn('host="other-host"', metrics)
        [(connections,)] = self.sql(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = 'fleet' AND application_name LIKE 'imapmig%'"
        )
        self.assertTrue(1 <= connections <= 3, connections)
        self.assertNotIn(b"Census:", bytes(daemon.output))
        # Every connection is named by the daemon's host, pid and role
        # (pgconnect's applicationName), its password given apart and
        # never in the output.
        names = {name for (name,) in self.sql(
            "SELECT application_name FROM pg_stat_activity WHERE datname = 'fleet'"
        )}  # fmt: skip
        [(host,)] = self.sql(
            f"SELECT DISTINCT host FROM imapmig_queue.daemons WHERE pid = {daemon.pid}"
        )
        wanted = {
            applicationName(role, host, daemon.pid) for role in ("control", "reader", "writer")
        }
        self.assertTrue(wanted <= names, names)
        self.assertNotIn(self.cluster.password.encode(), bytes(daemon.output))
        await self.everyJobListed(port)

    async def everyJobListed(self, port: int) -> None:
        """
        With 5,000 more jobs in the fleet's list (ended, as another daemon
        left them), the daemon's C{/status.json} counts and pages them all,
        finds one by a search, and C{/jobs/NAME.json} shows it.
        """
        self.sql(
            "INSERT INTO imapmig_queue.jobs (name, position, state, digest)"
            " SELECT 't-d' || g, 1000 + g, 'done', '\\x00'::bytea FROM generate_series(0, 4999) g"
        )
        document = json.loads(await page(port, "/status.json?limit=5"))
        self.assertGreaterEqual(document["page"]["matched"], 5000)
        found = json.loads(await page(port, "/status.json?q=t-d4999"))
        self.assertEqual([job["name"] for job in found["jobs"]], ["t-d4999"])
        self.assertEqual(found["jobs"][0]["state"], "done")
        done = json.loads(await page(port, "/status.json?state=done&offset=1000&limit=2"))
        self.assertEqual([job["name"] for job in done["jobs"]], ["t-d0", "t-d1"])
        job = json.loads(await page(port, "/jobs/t-d4999.json"))
        self.assertEqual((job["job"]["name"], job["job"]["daemon"]), ("t-d4999", None))
