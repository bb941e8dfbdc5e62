"""
Tests for L{imapmig.daemon.tap} and L{imapmig.daemon.service}: the plugin, the options,
and what the assembled service listens on and connects to, without I/O.
"""

from __future__ import annotations

import io
import os
import sys

from twisted.application.service import IServiceMaker
from typing import Any, Awaitable

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.interfaces import IProtocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from imapmig.daemon import service
from imapmig.status.hostcheck import warnIfRebindable
from imapmig.config import loadConfig, parseConfig
from imapmig.config.limits import ServerLimits
from imapmig.config.model import ServerConfig, StatusConfig
from imapmig.errors import ConfigError, PermanentError, TransientError
from imapmig.imap.session import IMAPSession
from imapmig.schedule.grants import ConnectionGrants, JobConnections
from imapmig.progress import JobState
from imapmig.daemon.service import buildService
from imapmig.state.memory import MemoryStateStore
from imapmig.daemon.tap import EXIT_BAD_CONFIG, Options


def makeMaildir(testCase: SynchronousTestCase) -> str:
    path: str = os.path.abspath(testCase.mktemp())
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(path, sub))
    with open(os.path.join(path, "cur", "1600000000.M1P1.host:2,S"), "wb") as f:
        f.write(b"Subject: hi\n\nbody\n")
    return path


def writeConfig(testCase: SynchronousTestCase, text: str) -> str:
    """
    Write C{text} to a new configuration file only its owner may read (it
    may hold an inline password) and return its path.
    """
    path: str = os.path.abspath(testCase.mktemp()) + ".yaml"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    return path


class PluginTests(SynchronousTestCase):
    """
    The twistd plugin.
    """

    def test_discoverable(self) -> None:
        """
        twistd finds a plugin called imapmig whose options are ours.
        """
        makers = [m for m in getPlugins(IServiceMaker) if m.tapname == "imapmig"]
        self.assertEqual(len(makers), 1)
        self.assertIs(makers[0].options, Options)


class OptionsTests(SynchronousTestCase):
    """
    Command-line options.
    """

    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.stdout = io.StringIO()
        self.patch(sys, "stderr", self.stderr)
        self.patch(sys, "stdout", self.stdout)

    def test_configRequired(self) -> None:
        """
        Without --config, a usage error.
        """
        self.assertRaises(usage.UsageError, Options().parseOptions, [])

    def test_invalidConfigExits2(self) -> None:
        """
        An invalid configuration exits with status 2 and prints one line per
        problem, each naming the file and the key.
        """
        path = writeConfig(
            self,
            "servers: {new: {endpoint: 'tcp:127.0.0.1:143'}}\n"
            "jobs:\n  - name: a\n    source: {maildir: /nonexistent}\n"
            "    destination: {server: nwe, user: u, password: p}\n",
        )
        e = self.assertRaises(SystemExit, Options().parseOptions, ["--config", path])
        self.assertEqual(e.code, EXIT_BAD_CONFIG)
        lines = self.stderr.getvalue().splitlines()
        self.assertGreaterEqual(len(lines), 2)
        for line in lines:
            self.assertTrue(line.startswith(path + ": "), line)
        self.assertTrue(any("jobs[0].destination.server: no server named 'nwe'" in l for l in lines))

    def test_checkConfig(self) -> None:
        """
        --check-config on a valid configuration prints a summary and exits 0.
        """
        maildir = makeMaildir(self)
        path = writeConfig(
            self,
            f"state: {os.path.abspath(self.mktemp())}\n"
            "servers: {s: {endpoint: 'tcp:127.0.0.1:143', starttls: 'off'}}\n"
            f"jobs: [{{name: a, source: {{maildir: {maildir}}},"
            " destination: {server: s, user: u, password: p}}]\n",
        )
        e = self.assertRaises(
            SystemExit, Options().parseOptions, ["--config", path, "--check-config"]
        )
        self.assertEqual(e.code, 0)
        self.assertIn("configuration OK: 1 job, 1 server", self.stdout.getvalue())


class PostgreSQLStateTests(SynchronousTestCase):
    """
    A daemon on a PostgreSQL state tries the database at start
    (L{imapmig.daemon.pgstate}; tests.test_daemon_postgresql runs one on
    a real one): one that does not answer is refused with one line naming
    C{state}; C{--check-config} names the state and the fleet.
    """

    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.stdout = io.StringIO()
        self.patch(sys, "stderr", self.stderr)
        self.patch(sys, "stdout", self.stdout)
        maildir = makeMaildir(self)
        self.path = writeConfig(
            self,
            'state: "postgresql://imapmig@127.0.0.1:1/imapmig?application_name=a"\n'
            "fleet: {name: acme}\n"
            "servers: {s: {endpoint: 'tcp:127.0.0.1:143', starttls: 'off'}}\n"
            f"jobs: [{{name: a, source: {{maildir: {maildir}}},"
            " destination: {server: s, user: u, password: p}}]\n",
        )

    def test_checkConfig(self) -> None:
        """
        C{--check-config} accepts it and says which state and fleet it
        would use.
        """
        e = self.assertRaises(
            SystemExit, Options().parseOptions, ["--config", self.path, "--check-config"]
        )
        self.assertEqual(e.code, 0)
        self.assertEqual(
            self.stdout.getvalue(),
            f"{self.path}: configuration OK: 1 job, 1 server\n"
            f"{self.path}: state: PostgreSQL database"
            " postgresql://imapmig@127.0.0.1:1/imapmig?application_name=a\n"
            f"{self.path}: fleet: acme (lease 60 s)\n",
        )

    def test_buildServiceRefuses(self) -> None:
        """
        Assembling the daemon on the configuration's own store connects to
        the database, and refuses one that does not answer with one line
        naming C{state}, rather than opening the URI as a file.
        """
        config = loadConfig(self.path)
        e = self.assertRaises(ConfigError, buildService, config, MemoryReactorClock())
        self.assertEqual(
            e.problems,
            (
                f"{self.path}: state: postgresql://imapmig@127.0.0.1:1/imapmig?application_name=a:"
                ' cannot connect: connection to server at "127.0.0.1", port 1 failed: Connection'
                " refused Is the server running on that host and accepting TCP/IP connections?",
            ),
        )


class BuildServiceTests(SynchronousTestCase):
    """
    What the assembled daemon does with a memory reactor.
    """

    def test_listensAndConnects(self) -> None:
        """
        Starting the service listens for status on the configured endpoint
        and connects the first job to its destination server; the job is
        running.
        """
        maildir = makeMaildir(self)
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "status": {"listen": "tcp:8125:interface=127.0.0.1"},
                "servers": {
                    "s": {"endpoint": "tcp:mail.example:1143", "starttls": "off", "allow_plaintext": True}
                },
                "jobs": [
                    {
                        "name": "a",
                        "source": {"maildir": maildir},
                        "destination": {"server": "s", "user": "u", "password": "p"},
                    }
                ],
            },
            "test.yaml",
        )
        reactor = MemoryReactorClock()
        store = MemoryStateStore()
        service = buildService(config, reactor, store=store)
        service.startService()
        self.assertEqual(
            [(port, interface) for port, factory, backlog, interface in reactor.tcpServers],
            [(8125, "127.0.0.1")],
        )
        self.assertEqual([(host, port) for host, port, *_ in reactor.tcpClients], [("mail.example", 1143)])
        # What the connection logs names the job, and the server and user
        # as /metrics labels them (the journal's JOB, SERVER, ACCOUNT).
        wrapping: Any = reactor.tcpClients[0][2].buildProtocol(None)
        self.assertEqual(
            wrapping._wrappedProtocol.logFields, {"job": "a", "server": "s", "user": "u"}
        )
        job = list(service.progress)[0]
        self.assertEqual(job.state, JobState.CONNECTING)
        # The job lets the reactor run between listed folders while its
        # connection is opening.
        reactor.advance(0)
        self.assertEqual(job.messagesTotal, 1)
        service.stopService()


class SettingsForTests(SynchronousTestCase):
    """
    L{imapmig.daemon.service.settingsFor}: a job's configuration as the
    settings it copies with.
    """

    def test_pipeline(self) -> None:
        """
        The batch and window sizes, and how batches grow with the mailbox,
        are the job's.
        """
        from imapmig.daemon.service import settingsFor

        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "servers": {"s": {"endpoint": "tcp:127.0.0.1:1143", "starttls": "off"}},
                "jobs": [
                    {
                        "name": "a",
                        "source": {"maildir": makeMaildir(self)},
                        "destination": {"server": "s", "user": "u", "password": "p"},
                        "batch_messages": 50,
                        "batch_growth": 20,
                        "window_messages": 300,
                    }
                ],
            },
            "test.yaml",
        )
        settings = settingsFor(config.jobs[0])
        self.assertEqual(
            (settings.batchMessages, settings.batchGrowth, settings.windowMessages), (50, 20, 300)
        )


class RebindingWarningTests(SynchronousTestCase):
    """
    L{imapmig.status.hostcheck.warnIfRebindable}: a status site reachable beyond loopback
    without C{status.allowed_hosts} is warned about.
    """

    def warnings(self, status: StatusConfig) -> list[str]:
        with capturedLogs() as events:
            warnIfRebindable(status)
        return [formatEvent(e) for e in events if e["log_level"] is LogLevel.warn]

    def test_warned(self) -> None:
        """
        On every address, or a LAN one, without C{allowed_hosts}: one
        warning naming the listener and the setting.
        """
        for listen in ("tcp:8025", "tcp:8025:interface=10.0.0.5"):
            [warning] = self.warnings(StatusConfig(listen))
            self.assertIn(f"listens beyond loopback ({listen})", warning)
            self.assertIn("status.allowed_hosts", warning)

    def test_notWarned(self) -> None:
        """
        On loopback, on a UNIX socket, or with C{allowed_hosts}: no warning.
        """
        for status in (
            StatusConfig("tcp:8025:interface=127.0.0.1"),
            StatusConfig("unix:/run/imapmig/status.sock"),
            StatusConfig("tcp:8025", allowedHosts=("migration.corp.example",)),
        ):
            self.assertEqual(self.warnings(status), [], status)


class HeapTests(SynchronousTestCase):
    """
    The daemon's malloc setting.
    """

    def test_limitHeapGrowth(self) -> None:
        """
        On glibc (Debian) the mmap threshold is set; elsewhere the call
        says it could not be.
        """
        import platform

        from imapmig.daemon.tap import limitHeapGrowth

        applied = limitHeapGrowth()
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            self.assertTrue(applied)
        else:
            self.assertIsInstance(applied, bool)


class TLSOptionsTests(SynchronousTestCase):
    """
    The TLS options of the session openers: made only for a server that
    uses TLS, and once per server.
    """

    def setUp(self) -> None:
        self.made: list[ServerConfig] = []

        def counting(server: ServerConfig) -> object:
            self.made.append(server)
            return object()

        self.patch(service, "tlsOptionsFor", counting)
        service._sharedTLSOptions.cache_clear()
        self.addCleanup(service._sharedTLSOptions.cache_clear)

    def server(self, name: str, starttls: bool, implicitTLS: bool = False) -> ServerConfig:
        return ServerConfig(name=name, endpoint="tcp:127.0.0.1:143", starttls=starttls,
                            implicitTLS=implicitTLS, tcpEndpoint="tcp:127.0.0.1:143",
                            tlsHostname="127.0.0.1", tlsCA=None, timeout=30.0,
                            compress=False)  # fmt: skip

    def test_plainServer(self) -> None:
        """
        A server with C{starttls: off} and a C{tcp:} endpoint gets no TLS
        options: making them (an OpenSSL context) costs start-up for nothing.
        """
        service.sessionOpener(MemoryReactorClock(), self.server("plain", False), "u", "pw")
        self.assertEqual(self.made, [])

    def test_oncePerServer(self) -> None:
        """
        Every opener of one server shares its options; another server gets
        its own; an implicit-TLS server gets them too.
        """
        reactor = MemoryReactorClock()
        first, second = self.server("one", True), self.server("two", True)
        implicit = self.server("three", False, implicitTLS=True)
        for server in (first, first, second, first, implicit):
            service.sessionOpener(reactor, server, "u", "pw")
        self.assertEqual(self.made, [first, second, implicit])


class GrantUntilClosedTests(SynchronousTestCase):
    """
    A session opened under a connection grant (L{service.sessionOpener}
    with C{grant}) holds the grant until its socket is really closed
    (C{connectionLost}), on every path: more sockets than
    C{max_connections} are never open at once.
    """

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.grants = ConnectionGrants(8, {"s": ServerLimits(2)})
        self.connections = JobConnections(self.grants, [("s", "elsewhere")])
        self.successResultOf(self.connections.reserve())
        self.addCleanup(self.connections.end)
        server = ServerConfig(name="s", endpoint="tcp:127.0.0.1:143", starttls=False,
                              implicitTLS=False, tcpEndpoint="tcp:127.0.0.1:143",
                              tlsHostname="127.0.0.1", tlsCA=None, timeout=30.0,
                              compress=False)  # fmt: skip
        opener = service.sessionOpener(
            self.reactor, server, "u", "pw", grant=self.connections.grantFor("s", "u", wait=True)
        )
        self.opening = Deferred.fromCoroutine(_awaited(opener()))

    def inUse(self) -> int:
        return self.grants.connectionsInUse("s", "u")

    def connect(self) -> tuple[IProtocol, StringTransport]:
        """
        Make the connection the opener asked the reactor for.
        """
        [(host, port, factory, _, _)] = self.reactor.tcpClients
        protocol = factory.buildProtocol(IPv4Address("TCP", host, port))
        assert protocol is not None
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def answer(self, protocol: IProtocol, transport: StringTransport, reply: bytes) -> None:
        """
        Answer the command the client last sent with C{reply} after its tag.
        """
        tag = transport.value().splitlines()[-1].split(b" ", 1)[0]
        transport.clear()
        protocol.dataReceived(tag + b" " + reply + b"\r\n")

    def loggedIn(self) -> tuple[IMAPSession, IProtocol, StringTransport]:
        protocol, transport = self.connect()
        protocol.dataReceived(b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] ready\r\n")
        self.answer(protocol, transport, b"OK [CAPABILITY IMAP4rev1] logged in")
        session = self.successResultOf(self.opening)
        return session, protocol, transport

    def test_failedConnect(self) -> None:
        """
        A connection that is never made holds no socket: the grant goes
        back as the opening fails.
        """
        [(_, _, factory, _, _)] = self.reactor.tcpClients
        self.assertEqual(self.inUse(), 1)
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))  # type: ignore[arg-type]
        self.failureResultOf(self.opening, TransientError)
        self.assertEqual(self.inUse(), 0)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_failedLogin(self) -> None:
        """
        A refused login aborts the connection; the opening fails, and the
        grant goes back, only once the socket is closed.
        """
        protocol, transport = self.connect()
        protocol.dataReceived(b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] ready\r\n")
        self.answer(protocol, transport, b"NO [AUTHENTICATIONFAILED] Authentication failed.")
        self.assertTrue(transport.disconnecting)
        self.assertNoResult(self.opening)
        self.assertEqual(self.inUse(), 1)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(self.opening, PermanentError)
        self.assertEqual(self.inUse(), 0)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_failedLoginNeverClosed(self) -> None:
        """
        An aborted connection that never reports its close holds the grant
        and the opening's failure for the server's timeout, not for ever.
        """
        protocol, transport = self.connect()
        protocol.dataReceived(b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] ready\r\n")
        self.answer(protocol, transport, b"NO [AUTHENTICATIONFAILED] Authentication failed.")
        self.reactor.advance(29)
        self.assertNoResult(self.opening)
        self.assertEqual(self.inUse(), 1)
        self.reactor.advance(1)
        self.failureResultOf(self.opening, PermanentError)
        self.assertEqual(self.inUse(), 0)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_abort(self) -> None:
        """
        An aborted session holds its grant until the socket is closed.
        """
        session, protocol, transport = self.loggedIn()
        self.assertEqual(self.inUse(), 1)
        session.abort()
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.inUse(), 1)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.inUse(), 0)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_logout(self) -> None:
        """
        A session logged out holds its grant until the socket is closed.
        """
        session, protocol, transport = self.loggedIn()
        done = Deferred.fromCoroutine(session.logout())
        protocol.dataReceived(b"* BYE bye\r\n")
        self.answer(protocol, transport, b"OK done")
        self.assertEqual(self.inUse(), 1)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.successResultOf(done)
        self.assertEqual(self.inUse(), 0)
        self.assertEqual(self.reactor.getDelayedCalls(), [])


async def _awaited(awaitable: Awaitable[IMAPSession]) -> IMAPSession:
    return await awaitable
