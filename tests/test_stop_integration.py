# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Integration tests of a daemon stopped (C{SIGTERM}, as C{systemctl stop}
sends it) while its job's destination connection is still opening: a real
C{imapmig-daemon} child process against a loopback listener that accepts
and never says a word (no greeting, no TLS handshake).  The stop must end
the process with status 0 well within C{stop_timeout} plus the daemon's
margin, whatever the server's C{timeout}.
"""

from __future__ import annotations

import os
import signal
from typing import Callable

import yaml
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from imapmig.testing.corpus import writeEmlDirectory, writeMaildir
from imapmig.testing.dovecot import DovecotUser, requireDovecot
from tests.support import (
    DaemonProcess,
    daemonCommand,
    freshUser,
    newDirectory,
    sharedDovecot,
    startDaemon,
    writeDaemonConfig,
    writePasswordFile,
)

# The exit is awaited this long at most: far more than the stop needs
# (stop_timeout 2 s plus the 10 s margin), so that a loaded machine
# does not fail the test.
EXIT_DEADLINE = 60.0


async def stoppedOnceReady(
    testCase: TestCase, daemon: DaemonProcess, ready: Callable[[], bool]
) -> bytes:
    """
    Wait until C{ready()} (the daemon still running), send the daemon
    C{SIGTERM}, and check that it exits with status 0.

    @return: its output.
    """
    for _ in range(int(EXIT_DEADLINE / 0.05)):
        if ready() or daemon.status is not None:
            break
        await deferLater(reactor, 0.05, lambda: None)
    testCase.assertTrue(ready(), daemon.tail())
    testCase.assertIsNone(daemon.status, daemon.tail())
    os.kill(daemon.pid, signal.SIGTERM)
    status = await daemon.exited(reactor, EXIT_DEADLINE)
    testCase.assertEqual(status, 0, daemon.tail())
    return bytes(daemon.output)


class SilentPeer(Protocol):
    """
    Accepts and never says a word; notes when its connection ends.
    """

    def __init__(self, listener: SilentListener) -> None:
        self.listener = listener

    def connectionMade(self) -> None:
        self.listener.accepted += 1

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        self.listener.closed += 1


class SilentListener(Factory):
    """
    Makes a L{SilentPeer} for each connection and counts them.

    @ivar accepted: connections accepted.
    @ivar closed: connections that ended since.
    """

    def __init__(self) -> None:
        self.accepted = 0
        self.closed = 0

    def buildProtocol(self, addr: object) -> Protocol:
        return SilentPeer(self)


class StopWhileConnectingTests(TestCase):
    """
    C{SIGTERM} while the job's first destination connection waits for a
    server that accepted it and never speaks.
    """

    async def _listen(self) -> tuple[SilentListener, int]:
        listener = SilentListener()
        port: IListeningPort = await TCP4ServerEndpoint(
            reactor, 0, interface="127.0.0.1"
        ).listen(listener)
        self.addCleanup(port.stopListening)
        return listener, port.getHost().port  # type: ignore[attr-defined]

    def _config(
        self, server: dict[str, object], sourceServer: dict[str, object] | None = None
    ) -> str:
        """
        Write the configuration of one job into C{server} (as the
        C{dovecot} server), from an EML directory or, given
        C{sourceServer}, from an IMAP account there; with a short
        C{stop_timeout}.
        """
        directory = newDirectory(self)
        eml = os.path.join(directory, "eml")
        writeEmlDirectory(eml, 3)
        path = writeDaemonConfig(
            directory, DovecotUser("alice", "silent-peer-pw-1"), {"eml_dir": eml}, server
        )
        with open(path) as f:
            document = yaml.safe_load(f)
        if sourceServer is not None:
            document["servers"]["source"] = sourceServer
            document["jobs"][0]["source"] = {
                "server": "source",
                "user": "bob",
                "password_file": os.path.join(directory, "password"),
            }
        # Short: the stop must not wait for the server's timeout (left at
        # its default of 120 s) either way.
        document["stop_timeout"] = 2
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return path

    async def _stopWhileConnecting(
        self, listener: SilentListener, server: dict[str, object]
    ) -> None:
        await self._stopped(listener, self._config(server))

    async def _stopped(
        self, listener: SilentListener, configPath: str, connections: int = 1
    ) -> None:
        """
        Start the daemon on C{configPath}, send it C{SIGTERM} once
        C{listener} has accepted C{connections} connections, and check
        that it exits with status 0, having stopped its job itself (the
        last resort, the daemon's bound on its whole stop, not needed),
        and that every connection is closed.
        """
        daemon = startDaemon(self, reactor, configPath, daemonCommand(configPath))
        output = await stoppedOnceReady(self, daemon, lambda: listener.accepted >= connections)
        self.assertEqual(listener.accepted, connections, daemon.tail())
        self.assertNotIn(b"The stop is not over", output)
        self.assertIn(b"Job job stopped", output)
        for _ in range(100):
            if listener.closed == listener.accepted:
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(listener.closed, listener.accepted)

    async def test_sourceServerSilent(self) -> None:
        """
        A job whose IMAP source's server never greets (nor its
        destination's) gives its source connection up at C{stop_timeout}:
        the daemon exits with status 0 without needing its last resort.
        """
        listener, port = await self._listen()
        silent: dict[str, object] = {"endpoint": f"tcp:127.0.0.1:{port}", "starttls": "off"}
        await self._stopped(listener, self._config(silent, dict(silent)), connections=2)

    async def test_plainTCP(self) -> None:
        """
        A C{tcp:} endpoint without STARTTLS, on loopback: the connection
        waits for a greeting that never comes.
        """
        listener, port = await self._listen()
        await self._stopWhileConnecting(
            listener, {"endpoint": f"tcp:127.0.0.1:{port}", "starttls": "off"}
        )

    async def test_implicitTLS(self) -> None:
        """
        A C{tls:} endpoint: the connection waits for a TLS handshake that
        never comes.
        """
        listener, port = await self._listen()
        await self._stopWhileConnecting(listener, {"endpoint": f"tls:127.0.0.1:{port}"})



class StopMidTransferTests(TestCase):
    """
    C{SIGTERM} while a job copies over STARTTLS (Dovecot): the daemon
    stops with status 0 and logs no traceback.  (The last service's stop
    ends in a TLS connection's C{dataReceived}, the reply to its LOGOUT;
    the reactor's shutdown, had it followed at once, would have torn that
    connection's TLS state down under it: an "Unhandled Error" with
    every such stop.)
    """

    async def test_startTLS(self) -> None:
        """
        A server-to-server job (an IMAP source and the destination, both
        over STARTTLS) stopped while it copies.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        source, destination = freshUser(instance), freshUser(instance)
        writeMaildir(instance.maildirPath(source.name), 600)
        instance.chownHome(source.name)
        directory = newDirectory(self)
        sourcePassword = writePasswordFile(
            os.path.join(directory, "source-password"), source.password
        )
        server = {
            "endpoint": f"tcp:127.0.0.1:{instance.port}",
            "starttls": "required",
            "tls_ca": instance.caCertificatePath,
            "tls_hostname": "localhost",
            # Slow enough that the connections are busy when the stop comes.
            "per_account": {"messages_per_second": 30},
        }
        configPath = writeDaemonConfig(
            directory,
            destination,
            {"server": "dovecot", "user": source.name, "password_file": sourcePassword},
            server,
        )
        daemon = startDaemon(self, reactor, configPath, daemonCommand(configPath))
        # The destination session is up (over TLS) once its folders are
        # mapped.
        output = await stoppedOnceReady(self, daemon, lambda: b" goes to " in daemon.output)
        self.assertIn(b" goes to ", output)
        self.assertIn(b"Job job stopped", output)
        self.assertNotIn(b"Unhandled", output)
        self.assertNotIn(b"Traceback", output)
