# -*- test-case-name: tests.test_testing_postgresql -*-
"""
Tests for L{imapmig.testing.postgresql}: the private PostgreSQL the
PostgreSQL state store's tests and benchmarks rely on, driven with
psycopg's synchronous API (as the store uses it, in a thread pool).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile

import psycopg
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.errors import PostgreSQLNotFound
from imapmig.testing import postgresql
from imapmig.testing.postgresql import (
    PASSWORD_ROLE,
    PostgreSQLCluster,
    findPostgreSQL,
    requirePostgreSQL,
)
from tests.processwatch import LineReader, ProcessWatch, defaultSignals, descendants
from tests.support import sourceTreeEnvironment


class ClusterTests(SynchronousTestCase):
    """
    L{PostgreSQLCluster}: a real server, copied from the template.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.cluster = self.started()

    def started(self) -> PostgreSQLCluster:
        """
        A new running cluster, destroyed at the end of the test.
        """
        cluster = PostgreSQLCluster(self.mktemp())
        self.addCleanup(cluster.destroy)
        cluster.start()
        return cluster

    def query(self, dsn: str, sql: str) -> list[tuple[object, ...]]:
        """
        Run C{sql} on a new connection to C{dsn}, committed; its rows.
        """
        with psycopg.connect(dsn, connect_timeout=30) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if cursor.description is not None else []

    def test_tableSurvivesImmediateRestart(self) -> None:
        """
        A table created and filled in a new database is there after a
        C{-m immediate} stop (a crash, recovered from the WAL) and a start
        on the same port; the connection open during the crash is broken,
        a new one works.
        """
        dsn = self.cluster.createDatabase()
        self.assertEqual(dsn, f"postgresql://postgres@127.0.0.1:{self.cluster.port}/test1")
        self.query(dsn, "CREATE TABLE jobs (name text PRIMARY KEY, done int NOT NULL)")
        self.query(dsn, "INSERT INTO jobs VALUES ('alice', 3), ('bob', 5)")
        port = self.cluster.port
        before = psycopg.connect(dsn, connect_timeout=30)
        self.addCleanup(before.close)
        self.cluster.restart("immediate")
        self.assertEqual(self.cluster.port, port)
        self.assertRaises(psycopg.OperationalError, before.execute, "SELECT 1")
        self.assertEqual(
            self.query(dsn, "SELECT name, done FROM jobs ORDER BY name"),
            [("alice", 3), ("bob", 5)],
        )
        self.assertIn("database system was interrupted", self.cluster.logTail())

    def test_passwordRole(self) -> None:
        """
        L{PASSWORD_ROLE} logs in with its password over TCP and is refused
        with a wrong one or none, by C{scram-sha-256}.
        """
        right = self.cluster.dsn(user=PASSWORD_ROLE, password=self.cluster.password)
        self.assertEqual(self.query(right, "SELECT current_user"), [(PASSWORD_ROLE,)])
        self.assertEqual(
            self.query(
                self.cluster.dsn(),
                "SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid"
                f" WHERE rolname = '{PASSWORD_ROLE}'",
            ),
            [(True,)],
        )
        for wrong in ("wrong-password", None):
            dsn = self.cluster.dsn(user=PASSWORD_ROLE, password=wrong)
            with self.assertRaises(psycopg.OperationalError) as raised:
                psycopg.connect(dsn, connect_timeout=30)
            expected = "password authentication failed" if wrong else "no password supplied"
            self.assertIn(expected, str(raised.exception))

    def test_sideBySide(self) -> None:
        """
        Two clusters run at once on different ports and socket
        directories, each with its own data.
        """
        other = self.started()
        self.assertNotEqual(other.port, self.cluster.port)
        self.assertNotEqual(other.socketDirectory, self.cluster.socketDirectory)
        self.query(self.cluster.dsn(), "CREATE TABLE onlyHere (x int)")
        tables = "SELECT count(*) FROM pg_tables WHERE tablename = 'onlyhere'"
        self.assertEqual(self.query(self.cluster.dsn(), tables), [(1,)])
        self.assertEqual(self.query(other.dsn(), tables), [(0,)])

    def test_settings(self) -> None:
        """
        A cluster runs with C{fsync} off (safe against a crash of the
        server, not of the machine) but C{synchronous_commit} on, which a
        C{-m immediate} stop would otherwise break; C{settings} changes
        them.
        """
        settings = "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        self.assertEqual(self.query(self.cluster.dsn(), settings), [("off", "on")])
        other = PostgreSQLCluster(self.mktemp(), settings={"synchronous_commit": "off"})
        self.addCleanup(other.destroy)
        other.start()
        self.assertEqual(self.query(other.dsn(), settings), [("off", "off")])

    def test_stopLeavesNoProcess(self) -> None:
        """
        L{PostgreSQLCluster.stop} returns once the postmaster and all its
        children (server processes for open connections too) have exited;
        a stopped cluster has no process.
        """
        connection = psycopg.connect(self.cluster.dsn(), connect_timeout=30)
        self.addCleanup(connection.close)
        pids = self.cluster.processes()
        # The postmaster, its auxiliary processes and this connection's.
        self.assertGreaterEqual(len(pids), 3)
        watch = ProcessWatch(pids)
        self.addCleanup(watch.killRemaining)
        self.cluster.stop()
        self.assertEqual(watch.remaining(0), [])
        self.assertEqual(self.cluster.processes(), [])
        self.assertIsNone(self.cluster.pid)

    def test_destroyRemovesFiles(self) -> None:
        """
        L{PostgreSQLCluster.destroy} stops it and removes its directory
        and socket directory; with C{keepData} it keeps the directory.
        """
        sockets = self.cluster.socketDirectory
        self.cluster.destroy(keepData=True)
        self.assertFalse(os.path.exists(sockets))
        self.assertTrue(os.path.exists(self.cluster.dataDirectory))
        self.cluster.destroy()
        self.assertFalse(os.path.exists(self.cluster.baseDir))

    def test_runsAsPostgres(self) -> None:
        """
        Run by root, the server runs as the C{postgres} user, which owns
        its data directory (C{initdb} and C{postgres} refuse root).
        """
        if os.geteuid() != 0:
            raise SkipTest("only root hands the server to the postgres user")
        self.assertEqual(
            self.query(self.cluster.dsn(), "SELECT current_setting('data_directory')"),
            [(self.cluster.dataDirectory,)],
        )
        pid = self.cluster.pid
        assert pid is not None
        with open(f"/proc/{pid}/status") as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        postgresUid = pwd.getpwnam("postgres").pw_uid
        self.assertEqual(uids, [str(postgresUid)] * 4)
        self.assertEqual(os.stat(self.cluster.dataDirectory).st_uid, postgresUid)


class TemplateTests(SynchronousTestCase):
    """
    The template the clusters copy is at a name anyone can guess in the
    temporary directory: only one this user made is used.
    """

    def test_plantedTemplateIgnored(self) -> None:
        """
        A directory at the template's name that another user owns, or a
        link there, is never copied: the clusters of this process start
        from a private template of their own, with their own settings
        (found from outside: a planted C{postgresql.conf} would have been
        started by the root-run tests).
        """
        requirePostgreSQL(self)
        binDir = findPostgreSQL()
        # A temporary directory of its own, as /tmp is, that the server's
        # user can reach.
        shared = tempfile.mkdtemp(prefix="imapmig-template-test-")
        os.chmod(shared, 0o755)
        self.addCleanup(shutil.rmtree, shared, True)
        self.patch(tempfile, "tempdir", shared)
        name = os.path.basename(postgresql.templateDirectory(binDir))
        shutil.rmtree(os.path.join(shared, name))
        planted = os.path.join(shared, name)
        os.makedirs(os.path.join(planted, "data"))
        for marker in (("password",), ("data", "PG_VERSION")):
            with open(os.path.join(planted, *marker), "w") as f:
                f.write("planted\n")
        os.chmod(planted, 0o777)
        chosen = postgresql.templateDirectory(binDir)
        self.assertNotEqual(chosen, planted)
        with open(os.path.join(chosen, "data", "PG_VERSION")) as f:
            self.assertNotEqual(f.read(), "planted\n")
        shutil.rmtree(planted)
        os.symlink(chosen, planted)
        self.assertNotEqual(postgresql.templateDirectory(binDir), planted)


class MissingTests(SynchronousTestCase):
    """
    L{findPostgreSQL} and L{requirePostgreSQL} without PostgreSQL.
    """

    def setUp(self) -> None:
        empty = os.path.abspath(self.mktemp())
        os.makedirs(empty)
        self.patch(os, "environ", dict(os.environ, IMAPMIG_POSTGRESQL_BIN=empty))

    def test_notFound(self) -> None:
        """
        L{findPostgreSQL} raises L{PostgreSQLNotFound} naming where it
        looked.
        """
        with self.assertRaises(PostgreSQLNotFound) as raised:
            findPostgreSQL()
        self.assertIn(os.environ["IMAPMIG_POSTGRESQL_BIN"], str(raised.exception))

    def test_failsOnCI(self) -> None:
        """
        Under C{CI=true} a missing PostgreSQL fails the test; elsewhere it
        skips it.
        """
        os.environ["CI"] = "true"
        self.assertRaises(self.failureException, requirePostgreSQL, self)
        os.environ["CI"] = ""
        self.patch(sys, "stderr", open(os.devnull, "w"))
        self.addCleanup(sys.stderr.close)
        self.assertRaises(SkipTest, requirePostgreSQL, self)


class CommandLineTests(SynchronousTestCase):
    """
    C{python -m imapmig.testing.postgresql}.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)

    def test_serveUntilTerm(self) -> None:
        """
        It prints the superuser's URI, which connects; C{SIGTERM} stops
        it with status 0, nothing left running and its socket directory
        removed; the C{--dir} it was given stays, with the data, and
        serves it again.
        """
        directory = os.path.abspath(self.mktemp())
        for round in (1, 2):
            process = subprocess.Popen(
                [sys.executable, "-m", "imapmig.testing.postgresql", "--dir", directory],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=sourceTreeEnvironment(),
                preexec_fn=defaultSignals,
            )
            self.addCleanup(_reap, process)
            console = LineReader(process)
            dsn = console.until("== Superuser: ").split(": ", 1)[1]
            sockets = console.until("== Unix socket directory: ").split(": ", 1)[1]
            self.assertTrue(os.path.isdir(sockets))
            console.until("== Serving until")
            with psycopg.connect(dsn, connect_timeout=30) as connection:
                if round == 1:
                    connection.execute("CREATE TABLE kept (x int)")
                kept = "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'"
                count = connection.execute(kept)
                self.assertEqual(count.fetchall(), [(1,)])
            watch = ProcessWatch(descendants(process.pid))
            self.addCleanup(watch.killRemaining)
            process.send_signal(signal.SIGTERM)
            text = console.rest()
            self.assertEqual(process.wait(60), 0, text)
            self.assertEqual(watch.remaining(30), [], text)
            self.assertIn("== Stopped by SIGTERM", text)
            self.assertFalse(os.path.exists(sockets))
        self.assertTrue(os.path.exists(os.path.join(directory, "data", "PG_VERSION")))


def _reap(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
    assert process.stdout is not None
    process.stdout.close()
