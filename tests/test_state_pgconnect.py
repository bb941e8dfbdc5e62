# -*- test-case-name: tests.test_state_pgconnect -*-
"""
Tests for L{imapmig.state.pgconnect}: the keywords and session settings
of every connection to PostgreSQL, the password given apart, and the
errors as imapmig's; the settings checked on a private cluster as the
server applies them.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import psycopg
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError, QueueUnavailable, TransientError
from imapmig.state._pgbase import PostgreSQLBase
from imapmig.state.pgconnect import (
    NAME_LIMIT,
    ROLES,
    Connector,
    applicationName,
    cutAll,
    displayName,
    mapError,
)
from imapmig.testing.postgresql import PASSWORD_ROLE, requirePostgreSQL
from imapmig.state.postgresql import PostgreSQLStateStore
from tests.statecontract import SynchronousReactor, SynchronousThreadPool, sharedCluster


class KeywordTests(SynchronousTestCase):
    """
    The keywords added to a URI's.
    """

    def test_defaults(self) -> None:
        """
        A URI that gives nothing gets the timeouts, keepalives, the
        role's settings and C{imapmig HOST:PID ROLE} as its name.
        """
        keywords = Connector("postgresql://u@db/mig", "control").keywords()
        self.assertEqual(
            keywords,
            {
                "connect_timeout": 5,
                "tcp_user_timeout": 5000,
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
                "application_name": applicationName("control"),
                "options": "-c imapmig.session=on -c idle_in_transaction_session_timeout=60s"
                " -c statement_timeout=5s -c lock_timeout=5s",
            },
        )

    def test_uriWins(self) -> None:
        """
        The URI's own keywords and C{application_name} are kept, and its
        C{options} come after ours (so its settings win).
        """
        keywords = Connector(
            "postgresql://u@db/mig?application_name=mine&connect_timeout=20"
            "&options=-c%20statement_timeout%3D9s",
            "reader",
        ).keywords()
        self.assertNotIn("application_name", keywords)
        self.assertNotIn("connect_timeout", keywords)
        self.assertEqual(
            keywords["options"],
            "-c imapmig.session=on -c idle_in_transaction_session_timeout=60s"
            " -c statement_timeout=5s -c lock_timeout=5s -c default_transaction_read_only=on"
            " -c statement_timeout=9s",
        )

    def test_applicationNameInOptions(self) -> None:
        """
        An C{application_name} set in the URI's C{options} is kept too.
        """
        connector = Connector("postgresql://u@db/mig?options=-c%20application_name%3Dmine", "writer")
        self.assertNotIn("application_name", connector.keywords())

    def test_namedByProcessAndRole(self) -> None:
        """
        A connection is named C{imapmig HOST:PID ROLE}: this host and
        process, and the connector's role; the password is given apart.
        """
        connector = Connector("postgresql://u@db/mig", "writer", password="s3cret")
        keywords = connector.keywords()
        self.assertEqual(
            keywords["application_name"], f"imapmig {socket.gethostname()}:{os.getpid()} writer"
        )
        self.assertEqual(keywords["password"], "s3cret")

    def test_longHostCut(self) -> None:
        """
        A host name too long for PostgreSQL's 63 octets is cut, so that
        the pid and the role stay whole.
        """
        name = applicationName("control", "h" * 80 + ".example.org", 4242)
        self.assertEqual(len(name.encode()), NAME_LIMIT)
        self.assertTrue(name.endswith("h:4242 control"), name)
        self.assertEqual(applicationName("reader", "mig1", 7), "imapmig mig1:7 reader")


class ErrorTests(SynchronousTestCase):
    """
    psycopg's errors as imapmig's.
    """

    def test_poolerRefusesOptions(self) -> None:
        """
        PgBouncer's refusal of libpq's C{options} (as PgBouncer 1.18 says
        it) is permanent, and says what is in the way and what to do.
        """
        e = psycopg.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 6432 failed:'
            " FATAL:  unsupported startup parameter: options"
        )
        mapped = mapError("postgresql://u@db:6432/mig", "connect", e, QueueUnavailable)
        self.assertIsInstance(mapped, PermanentError)
        self.assertIn("unsupported startup parameter: options: a connection pooler", str(mapped))
        self.assertIn("connect to PostgreSQL itself", str(mapped))

    def test_lostConnection(self) -> None:
        """
        A lost connection or a timeout is the given transient kind, naming
        the database without its password.
        """
        error = mapError(
            displayName("postgresql://u:pw@db:5433/mig"),
            "heartbeat",
            psycopg.OperationalError("server closed the connection; pw"),
            QueueUnavailable,
            "pw",
        )
        self.assertIsInstance(error, QueueUnavailable)
        self.assertEqual(
            str(error),
            "postgresql://u@db:5433/mig: cannot heartbeat: server closed the connection; (password)",
        )
        timedOut = mapError("db", "pause", psycopg.errors.QueryCanceled("timeout"), QueueUnavailable)
        self.assertIsInstance(timedOut, QueueUnavailable)
        self.assertIsInstance(mapError("db", "x", psycopg.errors.LockNotAvailable("l")), TransientError)

    def test_oneLine(self) -> None:
        """
        libpq's message of several lines is on one line: a log line says
        the whole problem, undivided.
        """
        error = mapError(
            "db",
            "claim a job",
            psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 5432 failed:'
                " Connection refused\n\tIs the server running on that host?\n"
            ),
            QueueUnavailable,
        )
        self.assertEqual(
            str(error),
            'db: cannot claim a job: connection failed: connection to server at "127.0.0.1",'
            " port 5432 failed: Connection refused Is the server running on that host?",
        )
        store = PostgreSQLBase()
        store._where = "db"
        stored = store._error("record", psycopg.OperationalError("closed\n\tunexpectedly\n"))
        self.assertEqual(str(stored), "db: cannot record: closed unexpectedly")

    def test_unreadableURI(self) -> None:
        """
        A URI libpq cannot read is a L{PermanentError}, not psycopg's.
        """
        error = self.assertRaises(PermanentError, Connector, "postgresql://u@db/x?nokey=1", "control")
        self.assertIn("postgresql://(unreadable URI): cannot read the URI", str(error))

    def test_permanent(self) -> None:
        """
        Another psycopg error is permanent; an imapmig error or another
        exception is left as it is.
        """
        self.assertIsInstance(mapError("db", "x", psycopg.ProgrammingError("no")), PermanentError)
        kept = QueueUnavailable("kept")
        self.assertIs(mapError("db", "x", kept), kept)
        other = KeyError("k")
        self.assertIs(mapError("db", "x", other), other)


class ServerTests(SynchronousTestCase):
    """
    The settings as a real server applies them.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.cluster = sharedCluster()
        self.uri = self.cluster.createDatabase(owner=PASSWORD_ROLE)
        self.dbname = self.uri.rsplit("/", 1)[1]

    def settings(self, connection: psycopg.Connection[tuple[object, ...]]) -> list[object]:
        names = (
            "application_name",
            "statement_timeout",
            "lock_timeout",
            "idle_in_transaction_session_timeout",
            "default_transaction_read_only",
        )
        return [connection.execute(f"SHOW {name}").fetchone()[0] for name in names]  # type: ignore[index]

    def test_passwordApart(self) -> None:
        """
        The password, given apart from the URI, logs in; the session has
        its role's settings and C{imapmig HOST:PID ROLE} as its name.
        """
        connector = Connector(
            self.cluster.dsn(self.dbname, PASSWORD_ROLE), "control", self.cluster.password
        )
        with connector.connect() as connection:
            self.assertEqual(
                self.settings(connection), [applicationName("control"), "5s", "5s", "1min", "off"]
            )

    def test_readerAndURIOptions(self) -> None:
        """
        The reader's sessions are read-only; the URI's options and name
        win over ours.
        """
        connector = Connector(
            self.cluster.dsn(self.dbname) + "?options=-c%20lock_timeout%3D7s%20-c%20application_name%3Dmine",
            "reader",
        )
        with connector.connect() as connection:
            self.assertEqual(self.settings(connection), ["mine", "5s", "7s", "1min", "on"])

    def test_wrongPassword(self) -> None:
        """
        A wrong password is refused; the error names the database without
        the password given.
        """
        connector = Connector(self.cluster.dsn(self.dbname, PASSWORD_ROLE), "writer", "Wr0ngPass")
        try:
            connector.connect()
        except psycopg.Error as e:
            error = connector.error("connect", e, QueueUnavailable)
        else:
            self.fail("connected with a wrong password")
        where = f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{self.cluster.port}/{self.dbname}"
        self.assertIn(f"{where}: cannot connect", str(error))
        self.assertNotIn("Wr0ngPass", str(error))

    def test_rolesKnown(self) -> None:
        """
        Every role's settings are accepted by the server.
        """
        for role in ROLES:
            with Connector(self.uri, role).connect() as connection:
                self.assertEqual(self.settings(connection)[0], applicationName(role))

    def store(self, conninfo: str, password: str | None = None) -> PostgreSQLStateStore:
        store = PostgreSQLStateStore(
            SynchronousReactor(), SynchronousThreadPool(), conninfo, lambda: 0.0, password=password
        )
        self.addCleanup(store.close)
        return store

    def test_settingsDropped(self) -> None:
        """
        A connection whose session lacks the role's settings (libpq's
        C{options} dropped on the way, as a PgBouncer with
        C{ignore_startup_parameters = options} drops them) is closed and
        refused, a L{PermanentError} naming the pooler and what to do,
        without the password.
        """

        class Dropping(Connector):
            def keywords(self) -> dict[str, str | int]:
                keywords = Connector.keywords(self)
                del keywords["options"]
                return keywords

        connector = Dropping(
            self.cluster.dsn(self.dbname, PASSWORD_ROLE), "control", self.cluster.password
        )
        error = self.assertRaises(PermanentError, connector.connect)
        self.assertIn("PgBouncer", str(error))
        self.assertIn("connect to PostgreSQL itself", str(error))
        self.assertNotIn(self.cluster.password, str(error))

    def test_cutAll(self) -> None:
        """
        L{cutAll} wakes a thread blocked on a connection that does not
        answer (here, a statement that sleeps; at a daemon's end, the
        database cut off behind a stalled relay): its call fails with
        C{OperationalError} at once, and the connection is broken.
        """
        # Named apart: its backend sleeps on once cut, and other tests
        # count the connections named by role.
        dsn = self.cluster.dsn(self.dbname)
        connection = Connector(dsn + "?application_name=cut", "writer").connect()
        self.addCleanup(connection.close)

        def terminate() -> None:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'cut'"
                )

        self.addCleanup(terminate)
        outcome: list[BaseException | None] = []

        def blocked() -> None:
            try:
                connection.execute("SELECT pg_sleep(25)")
                outcome.append(None)
            except BaseException as e:
                outcome.append(e)

        thread = threading.Thread(target=blocked)
        thread.start()
        for _ in range(200):
            if connection.pgconn.transaction_status == psycopg.pq.TransactionStatus.ACTIVE:
                break
            time.sleep(0.05)
        self.assertGreaterEqual(cutAll(), 1)
        thread.join(10)
        self.assertFalse(thread.is_alive())
        [error] = outcome
        self.assertIsInstance(error, psycopg.OperationalError)
        self.assertTrue(connection.broken)

    def test_storeConnections(self) -> None:
        """
        The state store's connections are opened by L{Connector}s: the
        password given apart logs in, the writer has its timeouts, the
        reader its timeouts and is read-only, each named by its role.
        """
        store = self.store(self.cluster.dsn(self.dbname, PASSWORD_ROLE), self.cluster.password)
        self.successResultOf(store.open())
        self.assertEqual(
            self.successResultOf(store.readOnReader(self.settings)),
            [applicationName("reader"), "5s", "5s", "1min", "on"],
        )
        self.assertEqual(
            self.successResultOf(store._call("read", self.settings, store._writer)),
            [applicationName("writer"), "30s", "10s", "1min", "off"],
        )

    def test_storeKeepsURIOptions(self) -> None:
        """
        The URI's C{application_name} and C{options} are kept on the
        store's connections.
        """
        store = self.store(
            self.cluster.dsn(self.dbname)
            + "?options=-c%20lock_timeout%3D7s&application_name=mine"
        )
        self.successResultOf(store.open())
        for pool in (store._reader, store._writer):
            settings = self.successResultOf(store._call("read", self.settings, pool))
            self.assertEqual((settings[0], settings[2]), ("mine", "7s"))
