"""
Tests for L{imapmig.testing.ports}: the status port a generated
configuration names, and the ports a process listens on.
"""

from __future__ import annotations

import os
import socket

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing import ports


class ListeningPortsTests(SynchronousTestCase):
    """
    L{ports.listeningPorts} reads a process's listening TCP ports from
    C{/proc}.
    """

    def test_bound(self) -> None:
        """
        A socket bound but not listening is not counted; once it listens
        its port is, for this process only.
        """
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        self.assertNotIn(port, ports.listeningPorts(os.getpid()))
        listener.listen()
        self.assertIn(port, ports.listeningPorts(os.getpid()))
        self.assertNotIn(port, ports.listeningPorts(os.getppid()))

    def test_ipv6(self) -> None:
        """
        A listener on C{::1} is found in C{/proc/net/tcp6}.
        """
        listener = socket.socket(socket.AF_INET6)
        self.addCleanup(listener.close)
        try:
            listener.bind(("::1", 0))
        except OSError as e:
            self.skipTest(f"no IPv6 loopback here: {e}")
        listener.listen()
        self.assertIn(listener.getsockname()[1], ports.listeningPorts(os.getpid()))

    def test_noSuchProcess(self) -> None:
        """
        A process that does not exist listens on nothing.
        """
        with open("/proc/sys/kernel/pid_max") as f:
            pidMax = int(f.read())
        self.assertEqual(ports.listeningPorts(pidMax + 1), [])


class StatusPortTests(SynchronousTestCase):
    """
    L{ports.statusPort} names L{ports.STATUS_PORT} when it is free, else 0.
    """

    def test_free(self) -> None:
        """
        L{ports.STATUS_PORT} free: it is named.
        """
        self.patch(ports, "portFree", lambda port: port == ports.STATUS_PORT)
        self.assertEqual(ports.statusPort(), ports.STATUS_PORT)

    def test_taken(self) -> None:
        """
        L{ports.STATUS_PORT} taken: 0, for the kernel to pick.
        """
        self.patch(ports, "portFree", lambda port: False)
        self.assertEqual(ports.statusPort(), 0)

    def test_portFree(self) -> None:
        """
        A port another socket listens on is not free; once it is closed it
        is.
        """
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        self.assertFalse(ports.portFree(port))
        listener.close()
        self.assertTrue(ports.portFree(port))

    def test_freePort(self) -> None:
        """
        L{ports.freePort} names a port that can be bound.
        """
        port = ports.freePort()
        self.assertGreater(port, 0)
        self.assertTrue(ports.portFree(port))
