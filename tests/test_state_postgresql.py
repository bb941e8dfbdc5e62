# -*- test-case-name: tests.test_state_postgresql -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what only the PostgreSQL state store (L{imapmig.state.postgresql})
does, on a private cluster: its schema's versions and migration under the
advisory lock, its errors, and its thread pool on at most two
connections with the real reactor.  Its behaviour as a store is held to
the contract in L{tests.test_state_contract}.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pgerrors
from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.task import Clock, deferLater
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.errors import DatabaseRefused, PermanentError, StateSchemaTooNew, TransientError
from imapmig.state import FolderFallback, FolderMark, MessageNames, Transition
from imapmig.state import _pgbatch, _pgschema
from imapmig.state._pgwrites import commitBatch
from imapmig.state.pgconnect import applicationName
from imapmig.state.postgresql import SCHEMA_VERSION, PostgreSQLStateStore
from imapmig.testing.postgresql import PASSWORD_ROLE, PostgreSQLCluster, requirePostgreSQL
from tests.statecontract import SynchronousReactor, SynchronousThreadPool, sharedCluster
from tests.test_state import appended, failed
from tests.test_state_contract import openPostgreSQLStore

reactor: Any = _globalReactor


def query(dsn: str, sql: str, parameters: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """
    The rows of C{sql} run on a new connection to C{dsn}, committed.
    """
    with psycopg.connect(dsn, connect_timeout=30) as connection:
        cursor = connection.execute(sql.encode(), parameters)
        return cursor.fetchall() if cursor.description is not None else []


class SchemaTests(SynchronousTestCase):
    """
    The schema's versions, and its migration in one transaction.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.dsn = sharedCluster().createDatabase()

    def store(self) -> PostgreSQLStateStore:
        """
        A store on the test's database, its calls run in the test's thread.
        """
        store = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), self.dsn, seconds=Clock().seconds
        )
        self.addCleanup(store.close)
        return store

    def test_versions(self) -> None:
        """
        Opening a new database creates the schema at L{SCHEMA_VERSION}
        (C{open} fires with 0, the version it had) and records it once;
        opening it again finds that version and records nothing.
        """
        self.assertEqual(self.successResultOf(self.store().open("daemon-1")), 0)
        self.assertEqual(self.successResultOf(self.store().open("daemon-2")), SCHEMA_VERSION)
        self.assertEqual(
            query(self.dsn, "SELECT version, migrated_by FROM imapmig.schema_version"),
            [(SCHEMA_VERSION, "daemon-1")],
        )

    def test_newerRefused(self) -> None:
        """
        A database whose schema is newer than the code is refused with
        L{StateSchemaTooNew} naming the database (without its password)
        and both versions, and is left as it was.
        """
        self.successResultOf(self.store().open())
        query(
            self.dsn,
            "INSERT INTO imapmig.schema_version VALUES (%s, now(), 'later')",
            (SCHEMA_VERSION + 1,),
        )
        query(self.dsn, "DROP TABLE imapmig.journal")
        error = self.failureResultOf(self.store().open(), StateSchemaTooNew).value
        self.assertEqual((error.found, error.known), (SCHEMA_VERSION + 1, SCHEMA_VERSION))
        self.assertIn(f"schema version {SCHEMA_VERSION + 1}, newer", str(error))
        self.assertIn(f"knows ({SCHEMA_VERSION})", str(error))
        self.assertIn("@127.0.0.1:", str(error))
        self.assertEqual(
            query(self.dsn, "SELECT to_regclass('imapmig.journal') IS NULL"), [(True,)]
        )

    def test_migrationAllOrNothing(self) -> None:
        """
        A migration that fails part way leaves nothing behind: not the
        schema, not its first tables, not a version.
        """
        self.patch(
            _pgschema,
            "MIGRATIONS",
            (_pgschema.MIGRATIONS[0] + ("CREATE TABLE imapmig.messages (x int)",),),
        )
        self.failureResultOf(self.store().open(), PermanentError)
        self.assertEqual(
            query(self.dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'imapmig'"),
            [(0,)],
        )

    def test_migrateFromVersion2(self) -> None:
        """
        A version 2 database (folder marks without fingerprints) is brought
        to the current version by C{open} (which fires with 2), its marks
        read back as they were without a fingerprint or octets, so that no
        folder is skipped on their word; it then records both.
        """
        migrations = _pgschema.MIGRATIONS
        self.patch(_pgschema, "MIGRATIONS", migrations[:2])
        self.patch(_pgschema, "SCHEMA_VERSION", 2)
        self.assertEqual(self.successResultOf(self.store().open("daemon-1")), 0)
        query(
            self.dsn,
            "INSERT INTO imapmig.folders VALUES ('job', 'INBOX', 7, 101, 5, 3, '{4,9}', 1.5)",
        )
        self.patch(_pgschema, "MIGRATIONS", migrations)
        self.patch(_pgschema, "SCHEMA_VERSION", SCHEMA_VERSION)
        store = self.store()
        self.assertEqual(self.successResultOf(store.open("daemon-2")), 2)
        self.assertEqual(
            query(self.dsn, "SELECT max(version) FROM imapmig.schema_version"), [(SCHEMA_VERSION,)]
        )
        self.assertEqual(
            self.successResultOf(store.folderMark("job", "INBOX")), FolderMark(7, 101, 5, 3, (4, 9))
        )
        local = FolderMark(0, 0, None, 3, (), "cur 1 2 3 new -", 2**33)
        self.successResultOf(store.recordFolderMark("job", "INBOX", local))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), local)

    def test_unreachableWithoutPassword(self) -> None:
        """
        A database that cannot be opened (here, a wrong password for a
        database that does not exist) fails C{open} with L{PermanentError},
        not to be retried at start, naming it and never the password.
        """
        cluster = sharedCluster()
        dsn = cluster.dsn("missing", user=PASSWORD_ROLE, password="s3cr\u00e9t-pw")
        store = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), dsn, seconds=Clock().seconds
        )
        self.addCleanup(store.close)
        error = str(self.failureResultOf(store.open(), PermanentError).value)
        self.assertIn(f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{cluster.port}/missing", error)
        self.assertNotIn("s3cr", error)

    def test_namesFailedMessages(self) -> None:
        """
        L{nameMessages} records the names of the messages whose latest
        outcome is a failure, the last given for a message named twice.
        """
        store = openPostgreSQLStore(self, self.dsn)
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "1"), appended("INBOX", "2")])
        )
        self.successResultOf(
            store.nameMessages(
                "job",
                [
                    ("INBOX", "1", MessageNames(messageId="<old@x>")),
                    ("INBOX", "1", MessageNames("<a@b>", "Mon", "J\u00f6rg", "Hi")),
                    ("INBOX", "2", MessageNames(messageId="<c@d>")),
                ],
            )
        )
        self.assertEqual(
            query(
                self.dsn,
                "SELECT message_key, message_id, message_date, message_from, message_subject"
                " FROM imapmig.messages ORDER BY message_key",
            ),
            [("1", "<a@b>", "Mon", "J\u00f6rg", "Hi"), ("2", None, None, None, None)],
        )


class ThreadPoolTests(TestCase):
    """
    The store with the real reactor and a real thread pool of three
    threads: its calls run off the reactor's thread, on at most two
    connections.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.dsn = sharedCluster().createDatabase()
        self.pool = ThreadPool(minthreads=0, maxthreads=3, name="imapmig-state")
        self.pool.start()
        self.addCleanup(self.pool.stop)

    def store(self) -> PostgreSQLStateStore:
        """
        A store on the test's database, on the real reactor and pool.
        """
        threads: IReactorFromThreads = reactor
        store = PostgreSQLStateStore(threads, self.pool, self.dsn, seconds=reactor.seconds)
        self.addCleanup(store.close)
        return store

    async def waitFor(self, sql: str, wanted: object) -> None:
        """
        Poll C{sql} until its one value is C{wanted}, for up to 60 s.
        """
        clock: IReactorTime = reactor
        for attempt in range(1200):
            if query(self.dsn, sql) == [(wanted,)]:
                return
            await deferLater(clock, 0.05)
        self.fail(f"{sql} never gave {wanted!r}")

    def test_migrationWaitsForTheLock(self) -> Deferred[None]:
        """
        C{open} migrates under the schema's transaction-level advisory
        lock: while another transaction holds it, the migration waits (and
        creates nothing); once that one ends, it goes on.
        """

        async def run() -> None:
            holder = psycopg.connect(self.dsn, connect_timeout=30)
            self.addCleanup(holder.close)
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (_pgschema.SCHEMA_LOCK,))
            opened = self.store().open()
            await self.waitFor(
                "SELECT count(*) FROM pg_stat_activity"
                f" WHERE application_name = '{applicationName('writer')}'"
                " AND wait_event_type = 'Lock'"
                " AND wait_event = 'advisory'",
                1,
            )
            self.assertNoResult(opened)
            self.assertEqual(
                query(self.dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'imapmig'"),
                [(0,)],
            )
            holder.rollback()
            self.assertEqual(await opened, 0)

        return Deferred.fromCoroutine(run())

    def test_atMostTwoConnections(self) -> Deferred[None]:
        """
        Twenty calls at once are answered in the reactor's thread, right,
        over at most two connections (the writer's and the reader's; the
        queue has a daemon's third), their writes in fewer transactions
        than calls.
        """

        async def run() -> None:
            store = self.store()
            await store.open()
            records = [
                store.recordOutcomes("job", [appended("INBOX", str(n))]) for n in range(10)
            ]
            entries = [store.journalBatch("job", "INBOX", 7, n, []) for n in range(10)]
            await gatherResults(records)
            await gatherResults(entries)
            self.assertEqual(
                await store.appendedKeys("job", "INBOX"), {str(n) for n in range(10)}
            )
            self.assertEqual(len(await store.journal("job")), 10)
            [(connections,)] = query(
                self.dsn,
                "SELECT count(*) FROM pg_stat_activity"
                f" WHERE application_name IN ('{applicationName('reader')}',"
                f" '{applicationName('writer')}')",
            )
            self.assertLessEqual(connections, 2)
            self.assertGreaterEqual(connections, 1)
            self.assertLess(store._batcher.commits, 20)

        return Deferred.fromCoroutine(run())

    def test_budgetAdditionsAtOnce(self) -> Deferred[None]:
        """
        Thirty additions to one account's budget at once, on the
        writer's connection, all count: each is one statement that adds in the
        database, not a read and a write.
        """

        async def run() -> None:
            store = self.store()
            await store.open()
            totals = await gatherResults(
                [store.addBudgetUse("s", "u", "upload", "2030-01-01", 1) for n in range(30)]
            )
            self.assertEqual(sorted(totals), list(range(1, 31)))
            self.assertEqual(await store.budgetUsed("s", "u", "upload", "2030-01-01"), 30)

        return Deferred.fromCoroutine(run())


    def test_closeCommitsQueued(self) -> Deferred[None]:
        """
        Writes queued when the store is closed are committed before its
        writer's connection closes; reads and writes after it fail.
        """

        async def run() -> None:
            store = self.store()
            await store.open()
            writes = [
                store.recordOutcomes("job", [appended("INBOX", str(n))]) for n in range(10)
            ]
            store.close()
            closed = store.whenClosed()
            self.assertEqual(len(await gatherResults(writes)), 10)
            await closed
            self.assertTrue(store._writer.closed)
            await store.whenClosed()
            with self.assertRaises(PermanentError):
                await store.appendedKeys("job", "INBOX")
            with self.assertRaises(PermanentError):
                await store.recordOutcomes("job", [appended("INBOX", "x")])
            other = self.store()
            self.assertEqual(await other.open(), SCHEMA_VERSION)
            self.assertEqual(
                await other.appendedKeys("job", "INBOX"), {str(n) for n in range(10)}
            )

        return Deferred.fromCoroutine(run())

    def test_writesAcrossRestart(self) -> Deferred[None]:
        """
        Writes queued and committing while PostgreSQL restarts (C{-m
        immediate}) are made again on new connections: every one
        succeeds, nothing is lost, nothing is recorded twice.
        """

        async def run() -> None:
            cluster = PostgreSQLCluster(self.mktemp())
            self.addCleanup(cluster.destroy)
            cluster.start()
            threads: IReactorFromThreads = reactor
            store = PostgreSQLStateStore(
                threads, self.pool, cluster.createDatabase(), seconds=reactor.seconds
            )
            self.addCleanup(store.close)
            await store.open()

            def writes(start: int) -> list[Deferred[Any]]:
                return [
                    d
                    for n in range(start, start + 20)
                    for d in (
                        store.journalBatch("job", "INBOX", 7, n, []),
                        store.recordOutcomes("job", [appended("INBOX", str(n))]),
                        store.recordTransition("job", Transition(float(n), "a", "b", str(n))),
                    )
                ]

            before = writes(0)
            cluster.restart("immediate")
            results = await gatherResults(before + writes(20))
            self.assertEqual(len(results), 120)
            self.assertEqual(
                await store.appendedKeys("job", "INBOX"), {str(n) for n in range(40)}
            )
            self.assertEqual(len(await store.journal("job")), 40)
            self.assertEqual(
                [t.cause for t in await store.timeline("job")], [str(n) for n in range(40)]
            )

        return Deferred.fromCoroutine(run())


class CollationTests(SynchronousTestCase):
    """
    Keys in code point order whatever the database's collation.
    """

    def test_codePointOrder(self) -> None:
        """
        In a database whose default collation sorts C{a} before C{B}
        (ICU's en-US), the store orders and pages folder and message keys
        and fallbacks by code point, as SQLite does: C{B} before C{a}.
        """
        requirePostgreSQL(self)
        cluster = sharedCluster()
        name = f"icu{id(self)}"
        cluster.psql(
            f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu"
            " ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
        store = openPostgreSQLStore(self, cluster.dsn(name))
        self.successResultOf(
            store.recordOutcomes("job", [failed(k, m) for k in ("a", "B") for m in ("a", "B")])
        )
        order = [("B", "B"), ("B", "a"), ("a", "B"), ("a", "a")]
        failures = self.successResultOf(store.failures("job"))
        self.assertEqual([(o.folderKey, o.messageKey) for o in failures], order)
        first = self.successResultOf(store.failuresPage("job", 0, 1))
        self.assertEqual(first.next, ("B", "B"))
        rest = self.successResultOf(store.failuresPage("job", 0, 10, after=first.next))
        self.assertEqual([(o.folderKey, o.messageKey) for o in rest.items], order[1:])
        manifest = self.successResultOf(store.manifestOutcomes("job", ("B", "a"), 10))
        self.assertEqual([(o.folderKey, o.messageKey) for o in manifest], order[2:])
        for mailbox in ("a", "B"):
            self.successResultOf(
                store.recordFolderFallback("job", FolderFallback(mailbox, "x", "NO"))
            )
        fallbacks = self.successResultOf(store.folderFallbacks("job"))
        self.assertEqual([f.mailbox for f in fallbacks], ["B", "a"])


class RestartTests(SynchronousTestCase):
    """
    The store after its database restarted.
    """

    def test_reconnects(self) -> None:
        """
        After PostgreSQL restarted (C{-m immediate}, a crash), the write
        whose batch finds the writer's connection broken is made again on
        a new connection, and the read that finds the reader's broken is
        read again: both succeed; nothing committed is lost, nothing is
        recorded twice.
        """
        requirePostgreSQL(self)
        cluster = PostgreSQLCluster(self.mktemp())
        self.addCleanup(cluster.destroy)
        cluster.start()
        store = openPostgreSQLStore(self, cluster.createDatabase())
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        cluster.restart("immediate")
        entry = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, []))
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "2")]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "2"})
        self.assertEqual([e.entryId for e in self.successResultOf(store.journal("job"))], [entry])

    def test_lostCommit(self) -> None:
        """
        A batch whose C{COMMIT} was made but whose answer was lost with
        its connection is made again whole, and records nothing twice:
        one journal entry, one transition, the outcome once.
        """
        store = openPostgreSQLStore(self)
        lost: list[bool] = []

        def commitThenBreak(connection: Any, ids: Any, batch: Any) -> Any:
            stale = commitBatch(connection, ids, batch)
            if not lost:
                lost.append(True)
                connection.close()
                raise psycopg.OperationalError("the connection was lost during COMMIT")
            return stale

        self.patch(_pgbatch, "commitBatch", commitThenBreak)
        entry = store.journalBatch("job", "INBOX", 7, 1, [])
        self.assertEqual(lost, [True])
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]))
        self.successResultOf(store.recordTransition("job", Transition(1.0, "a", "b", "c")))
        self.assertEqual(
            [e.entryId for e in self.successResultOf(store.journal("job"))],
            [self.successResultOf(entry)],
        )
        self.assertEqual(len(self.successResultOf(store.timeline("job"))), 1)


class WritesFailingTests(SynchronousTestCase):
    """
    A store whose writes the database refuses says why
    (L{PostgreSQLStateStore.writesFailing}, for C{/healthz}) in the
    database's own words, and the errors are told apart: a database that
    was reached and refused (its disk full) from one that was not.
    """

    def test_refusedWrites(self) -> None:
        """
        While the database refuses the store's writes (a constraint here,
        as a right revoked would), C{writesFailing} names its reason,
        though a ping (a read) answers; once a write commits, L{None}.
        """
        requirePostgreSQL(self)
        dsn = sharedCluster().createDatabase()
        store = openPostgreSQLStore(self, dsn)
        self.assertIsNone(store.writesFailing())
        query(dsn, "ALTER TABLE imapmig.messages ADD CONSTRAINT no CHECK (false) NOT VALID")
        self.failureResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]), PermanentError)
        self.successResultOf(store.ping())
        self.assertIn('violates check constraint "no"', store.writesFailing() or "")
        query(dsn, "ALTER TABLE imapmig.messages DROP CONSTRAINT no")
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "2")]))
        self.assertIsNone(store.writesFailing())

    def test_kinds(self) -> None:
        """
        A full disk is L{DatabaseRefused} (transient, named as the
        database's refusal), a connection refused or a server shutting
        down a plain L{TransientError}, a right missing a
        L{PermanentError}.
        """
        store = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), "postgresql://x@127.0.0.1:1/db",
            seconds=Clock().seconds,
        )  # fmt: skip
        kinds = [
            type(store._error("record", e))
            for e in (
                pgerrors.DiskFull("could not extend file: No space left on device"),
                psycopg.OperationalError("connection refused"),
                pgerrors.AdminShutdown("terminating connection"),
                pgerrors.InsufficientPrivilege("permission denied for table messages"),
            )
        ]
        self.assertEqual(kinds, [DatabaseRefused, TransientError, TransientError, PermanentError])


class ConnectionSettingsTests(SynchronousTestCase):
    """
    How the store's connections are set.
    """

    def test_settings(self) -> None:
        """
        Each connection ends a transaction left idle after 60 s, names
        itself C{imapmig HOST:PID ROLE} (the reader's here), and notices a dead server or path in seconds
        (TCP keepalives, a 5 s C{tcp_user_timeout}).
        """
        store = openPostgreSQLStore(self)

        def settings(connection: psycopg.Connection[tuple[Any, ...]]) -> tuple[object, ...]:
            row = connection.execute(
                "SELECT current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('application_name')"
            ).fetchone()
            assert row is not None
            parameters = connection.info.get_parameters()
            return (*row, parameters.get("keepalives"), parameters.get("tcp_user_timeout"))

        self.assertEqual(
            self.successResultOf(store._call("read the settings", settings)),
            ("1min", applicationName("reader"), "1", "5000"),
        )
