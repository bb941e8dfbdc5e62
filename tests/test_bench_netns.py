# -*- test-case-name: tests.test_bench_netns -*-
"""
Tests for L{bench.netns}: real network namespaces joined by the delay line.

These need root, C{ip}, C{/dev/net/tun} and C{gcc}.  Without them the tests
skip loudly, except on CI (C{CI=true}), where they fail.  The whole module
takes about two seconds.

Sockets are created inside a namespace by a short-lived thread that
C{setns()}es into it (a socket stays in the namespace it was created in), so
both ends of a connection live in this process and a ping-pong needs no
subprocess.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from typing import Callable, NoReturn

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from bench.netns import (
    Link,
    NetnsError,
    cleanupStale,
    compileDelayLine,
    delayedLink,
    inNamespace,
)

_CLONE_NEWNET = 0x40000000
_PREFIX = "imbtest"
_TIMEOUT = 10.0

_binary: str | None = None


def _delayLine() -> str:
    """
    The delay line binary, built once per test process into a temporary
    directory removed at exit.
    """
    global _binary
    if _binary is None:
        directory = tempfile.mkdtemp(prefix="delayline-test-")
        atexit.register(shutil.rmtree, directory, True)
        _binary = compileDelayLine(directory)
    return _binary


def _unavailable(testCase: SynchronousTestCase, error: Exception) -> NoReturn:
    """
    Namespaces cannot be set up here: skip loudly, or fail on CI.

    @raise SkipTest: not on CI.
    """
    if os.environ.get("CI") == "true":
        raise testCase.failureException(
            f"cannot create network namespaces but CI=true: these tests "
            f"must run on CI (as root, with ip, /dev/net/tun and gcc): {error}"
        )
    sys.stderr.write(f"\n*** SKIPPING network namespace tests: {error} ***\n")
    raise SkipTest(f"cannot create network namespaces: {error}")


def _enterLink(
    testCase: SynchronousTestCase,
    rttMs: float,
    rateBitsPerSecond: int | None = None,
    prefix: str = _PREFIX,
) -> Link:
    """
    Set up a link for the duration of a test, or skip loudly when this
    machine cannot (fail instead on CI).

    @raise SkipTest: namespaces cannot be created here, not on CI.
    """
    stack = ExitStack()
    try:
        link = stack.enter_context(
            delayedLink(rttMs, rateBitsPerSecond, prefix=prefix, delayLine=_delayLine())
        )
    except (NetnsError, OSError) as e:
        stack.close()
        _unavailable(testCase, e)
    testCase.addCleanup(stack.close)
    return link


def _inNamespace(namespace: str, create: Callable[[], socket.socket]) -> socket.socket:
    """
    Call C{create} in a thread that has entered C{namespace}.
    """
    results: list[socket.socket] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, os.strerror(error))
            finally:
                os.close(fd)
            results.append(create())
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


def _connected(testCase: SynchronousTestCase, link: Link) -> tuple[socket.socket, socket.socket]:
    """
    A TCP connection across the link: (client end, server end), both with a
    timeout and closed at the end of the test.
    """

    def listen() -> socket.socket:
        return socket.create_server((link.serverAddress, 0))

    def client() -> socket.socket:
        return socket.socket()

    listener = _inNamespace(link.serverNamespace, listen)
    testCase.addCleanup(listener.close)
    clientEnd = _inNamespace(link.clientNamespace, client)
    testCase.addCleanup(clientEnd.close)
    clientEnd.settimeout(_TIMEOUT)
    clientEnd.connect(listener.getsockname())
    listener.settimeout(_TIMEOUT)
    serverEnd, _ = listener.accept()
    listener.close()
    testCase.addCleanup(serverEnd.close)
    serverEnd.settimeout(_TIMEOUT)
    return clientEnd, serverEnd


def _receive(sock: socket.socket, count: int) -> None:
    """
    Read exactly C{count} bytes.
    """
    while count:
        data = sock.recv(count)
        if not data:
            raise ConnectionError("closed")
        count -= len(data)


def _namespaces() -> list[str]:
    """
    The names of the namespaces that exist.
    """
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split(" ", 1)[0] for line in listing.stdout.splitlines()]


class InNamespaceTests(SynchronousTestCase):
    """
    Tests for L{inNamespace}.
    """

    def test_commandLine(self) -> None:
        """
        The command runs through C{ip netns exec}.
        """
        self.assertEqual(
            inNamespace("ns", ["python3", "-c", "pass"]),
            ["ip", "netns", "exec", "ns", "python3", "-c", "pass"],
        )


class EnterLinkTests(SynchronousTestCase):
    """
    The tests below cannot vanish on CI.
    """

    def test_failsOnCI(self) -> None:
        """
        With C{CI=true}, a link that cannot be set up fails the test.
        """
        self.patch(os, "environ", {"CI": "true"})
        self.assertRaises(
            self.failureException, _enterLink, self, 2.0, prefix="bad/prefix"
        )

    def test_skipsElsewhere(self) -> None:
        """
        Outside CI, a link that cannot be set up skips the test.
        """
        self.patch(os, "environ", {})
        self.patch(sys, "stderr", open(os.devnull, "w"))
        self.addCleanup(sys.stderr.close)
        self.assertRaises(SkipTest, _enterLink, self, 2.0, prefix="bad/prefix")


class DelayedLinkTests(SynchronousTestCase):
    """
    Tests for L{delayedLink} with real namespaces.
    """

    def test_roundTrip(self) -> None:
        """
        A 1-byte ping-pong with C{TCP_NODELAY} takes the configured round-trip
        time: never less, and not much more.
        """
        link = _enterLink(self, 2.0)
        clientEnd, serverEnd = _connected(self, link)
        clientEnd.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        serverEnd.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(20):
            start = time.perf_counter()
            clientEnd.sendall(b"x")
            _receive(serverEnd, 1)
            serverEnd.sendall(b"y")
            _receive(clientEnd, 1)
            times.append((time.perf_counter() - start) * 1000)
        self.assertGreaterEqual(min(times), 2.0)
        self.assertLess(statistics.median(times), 4.0)

    def test_nagleAndDelayedAck(self) -> None:
        """
        Two small writes then a wait for the reply stall on Nagle's algorithm
        and the peer's delayed ACK (40 ms on Linux) across the link, as they
        would across a real network; with C{TCP_NODELAY} they do not.
        """
        link = _enterLink(self, 2.0)

        def exchange(nodelay: bool) -> float:
            clientEnd, serverEnd = _connected(self, link)
            clientEnd.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(nodelay))
            times = []
            for _ in range(5):
                start = time.perf_counter()
                clientEnd.send(b"h" * 100)
                clientEnd.send(b"b" * 100)
                _receive(serverEnd, 200)
                serverEnd.sendall(b"k")
                _receive(clientEnd, 1)
                times.append((time.perf_counter() - start) * 1000)
            clientEnd.close()
            serverEnd.close()
            return statistics.median(times)

        self.assertGreater(exchange(nodelay=False), 30.0)
        self.assertLess(exchange(nodelay=True), 20.0)

    def test_rateLimit(self) -> None:
        """
        A rate-limited link carries no more than its rate (plus one bucket of
        burst), and not much less.
        """
        rate = 80_000_000
        size = 2_000_000
        link = _enterLink(self, 2.0, rate)
        clientEnd, serverEnd = _connected(self, link)
        received: list[int] = []

        def sink() -> None:
            total = 0
            while data := serverEnd.recv(1 << 20):
                total += len(data)
            received.append(total)

        reader = threading.Thread(target=sink)
        start = time.perf_counter()
        reader.start()
        clientEnd.sendall(b"\0" * size)
        clientEnd.shutdown(socket.SHUT_WR)
        reader.join()
        elapsed = time.perf_counter() - start
        self.assertEqual(received, [size])
        # 1500-byte packets carry 1448 bytes of payload; the bucket holds 10 kB.
        fastest = (size * 1500 / 1448 - 10_000) * 8 / rate
        self.assertGreater(elapsed, fastest)
        self.assertLess(elapsed, 4 * fastest)

    def test_nothingLeftBehind(self) -> None:
        """
        Leaving the C{with} block by an exception (here C{KeyboardInterrupt})
        stops the delay line, terminates the processes left in the
        namespaces and deletes the namespaces.
        """
        prefix = f"{_PREFIX}x"
        sleepers = []

        def interrupted() -> None:
            with delayedLink(2.0, prefix=prefix, delayLine=_delayLine()) as link:
                sleeper = subprocess.Popen(inNamespace(link.serverNamespace, ["sleep", "60"]))
                sleepers.append(sleeper)
                self.addCleanup(sleeper.wait)
                self.assertIn(link.serverNamespace, _namespaces())
                raise KeyboardInterrupt()

        try:
            self.assertRaises(KeyboardInterrupt, interrupted)
        except (NetnsError, OSError) as e:
            _unavailable(self, e)
        self.assertEqual(sleepers[0].wait(), -signal.SIGTERM)
        self.assertEqual([n for n in _namespaces() if n.startswith(prefix)], [])

    def test_cleanupStale(self) -> None:
        """
        L{cleanupStale} deletes the namespaces of dead processes with its
        prefix, and no others.
        """
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = f"{_PREFIX}y-{dead.pid}-0-srv"
        alive = f"{_PREFIX}y-{os.getpid()}-999-cli"
        other = f"{_PREFIX}z-{dead.pid}-0-srv"
        for name in (stale, alive, other):
            result = subprocess.run(["ip", "netns", "add", name], capture_output=True)
            if result.returncode != 0:
                _unavailable(self, NetnsError(result.stderr.decode().strip()))
            self.addCleanup(subprocess.run, ["ip", "netns", "delete", name], capture_output=True)
        self.assertEqual(cleanupStale(f"{_PREFIX}y"), [stale])
        names = _namespaces()
        self.assertNotIn(stale, names)
        self.assertIn(alive, names)
        self.assertIn(other, names)
