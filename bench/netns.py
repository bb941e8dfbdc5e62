# -*- test-case-name: tests.test_bench_netns -*-
"""
A network path with a real round-trip time (and optionally a bandwidth cap)
between two network namespaces, for the benchmark.

This machine's kernel has no C{sch_netem}, so C{tc ... netem delay} is not
available.  A delaying TCP proxy would terminate TCP and hide exactly what
the benchmark is about (Nagle's algorithm, delayed ACKs, window growth), so
the delay is added below TCP instead: L{delayedLink} creates two namespaces
and starts C{bench/delayline.c}, which creates a TUN device in each of them
and relays raw IP packets between the two after the one-way delay
(C{rttMs / 2} each way), optionally through a token bucket of
C{rateBitsPerSecond} per direction with a drop-tail queue.  Every TCP
connection stays end to end between the two namespaces' kernels.

    with delayedLink(20.0, 20_000_000) as link:
        server = subprocess.Popen(inNamespace(link.serverNamespace, [...]))
        client = subprocess.run(inNamespace(link.clientNamespace, [...]))

The server side has address C{10.77.0.1} (L{Link.serverAddress}), the client
side C{10.77.0.2}; each is a /32 with a point-to-point route to the other, so
several links may exist at once (each pair of namespaces is isolated) and no
packet leaves the machine.  Both namespaces have C{lo} up, so a server may
also listen on C{127.0.0.1} inside its namespace for its own use.

Round-trip time 0 means "no delay line": the benchmark then runs server and
client on plain loopback (C{127.0.0.1}, in the current namespace) and only
uses L{delayedLink} for the 2 ms and 20 ms runs.  L{delayedLink} itself
accepts C{rttMs=0} (a relay without delay, useful to measure the relay's own
cost), but that is not loopback.

MTU: 9000 on an unlimited link (fewer packets than 1500, so the relay
costs less CPU; 65000 made Dovecot's receive window stick at about two
segments, about 5 MB/s at 20 ms), 1500 on a rate-limited
link, where a 64 KB packet would hold the line for 26 ms at 20 Mbit/s and
make the queue coarse.  The drop-tail queue of a rate-limited link holds
100 ms of the rate (at least 64 packets).

Everything is removed on exit, also after an exception or
C{KeyboardInterrupt}: the delay line is stopped, processes left inside the
two namespaces are terminated (TERM, then KILL after two seconds) and the
namespaces deleted.  The delay line also dies with its parent process; if a
run is killed outright, L{cleanupStale} removes the namespaces it left.

Requires root, C{ip} (iproute2), C{/dev/net/tun} and C{gcc}.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from select import select
from typing import Iterator, Sequence

from attrs import frozen

SERVER_ADDRESS = "10.77.0.1"
"""
The address of the server side of every L{Link}.
"""

CLIENT_ADDRESS = "10.77.0.2"
"""
The address of the client side of every L{Link}.
"""

DEVICE = "dl0"
"""
The name of the TUN device in each namespace.
"""

SOURCE = Path(__file__).with_name("delayline.c")
"""
The delay line's source.
"""

_LARGE_MTU = 9000
_SMALL_MTU = 1500
_READY_TIMEOUT = 10.0
_PATH_TIMEOUT = 10.0
_STOP_TIMEOUT = 2.0

_serials = itertools.count()

# Connect to a port nobody listens on: a refusal (the peer kernel's RST)
# proves the path works in both directions without needing a listener.
_PROBE = """
import socket, sys, time
host, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while True:
    try:
        socket.create_connection((host, 9), timeout=0.5).close()
        sys.exit(0)
    except ConnectionRefusedError:
        sys.exit(0)
    except OSError as e:
        if time.monotonic() > deadline:
            sys.exit(f"no path to {host}: {e}")
        time.sleep(0.01)
"""


class NetnsError(RuntimeError):
    """
    Building the delay line or setting up a link failed.
    """


@frozen
class Link:
    """
    A delayed path between two network namespaces, as set up by
    L{delayedLink}.

    @ivar serverNamespace: the namespace to run servers in (see
        L{inNamespace}).
    @ivar clientNamespace: the namespace to run clients in.
    @ivar serverAddress: the server side's address, for clients to connect to.
    @ivar clientAddress: the client side's address.
    @ivar rttMs: the round-trip time the delay line adds, in milliseconds.
    @ivar rateBitsPerSecond: the bandwidth per direction, or L{None} when
        unlimited.
    """

    serverNamespace: str
    clientNamespace: str
    serverAddress: str
    clientAddress: str
    rttMs: float
    rateBitsPerSecond: int | None


def inNamespace(namespace: str, argv: Sequence[str]) -> list[str]:
    """
    The command line running C{argv} inside a network namespace.

    @param namespace: the namespace's name.
    @param argv: the command and its arguments.
    @return: C{["ip", "netns", "exec", namespace, *argv]}.
    """
    return ["ip", "netns", "exec", namespace, *argv]


def compileDelayLine(outputDir: str) -> str:
    """
    Build C{bench/delayline.c}.

    @param outputDir: the directory to write the binary into.
    @return: the binary's path.
    @raise NetnsError: C{gcc} is missing or the build failed.
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        raise NetnsError(
            "gcc not found: the delay line is built from bench/delayline.c "
            "(apt-get install build-essential)"
        )
    binary = os.path.join(outputDir, "delayline")
    result = subprocess.run(
        [gcc, "-O2", "-Wall", "-Wextra", "-o", binary, str(SOURCE)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise NetnsError(f"building {SOURCE} failed:\n{result.stderr}")
    return binary


def _ip(*arguments: str) -> None:
    """
    Run C{ip} with C{arguments}.

    @raise NetnsError: it failed.
    """
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        raise NetnsError(f"ip {' '.join(arguments)}: {result.stderr.strip()}")


def _namespacePids(namespace: str) -> list[int]:
    """
    The processes running inside a namespace.
    """
    result = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True
    )
    return [int(word) for word in result.stdout.split() if word.isdigit()]


def _emptyNamespace(namespace: str) -> None:
    """
    Terminate every process inside a namespace: TERM, then KILL those still
    there after L{_STOP_TIMEOUT} seconds.
    """
    for signum in (signal.SIGTERM, signal.SIGKILL):
        pids = _namespacePids(namespace)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + _STOP_TIMEOUT
        while _namespacePids(namespace) and time.monotonic() < deadline:
            time.sleep(0.05)


def _deleteNamespace(namespace: str) -> None:
    """
    Empty and delete a namespace; a namespace already gone is fine.
    """
    _emptyNamespace(namespace)
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def _stopDelayLine(process: subprocess.Popen[bytes]) -> None:
    """
    Stop the delay line (TERM; KILL if it has not exited after
    L{_STOP_TIMEOUT} seconds) and reap it.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _awaitReady(process: subprocess.Popen[bytes]) -> None:
    """
    Wait for the delay line's C{ready} line.

    @raise NetnsError: it exited or did not become ready in time.
    """
    assert process.stdout is not None and process.stderr is not None
    readable, _, _ = select([process.stdout], [], [], _READY_TIMEOUT)
    line = process.stdout.readline() if readable else b""
    if line != b"ready\n":
        if process.poll() is None:
            process.kill()
        process.wait()
        message = process.stderr.read().decode("utf-8", "replace").strip()
        raise NetnsError(f"the delay line did not start: {message or 'timeout'}")


def _awaitPath(link: Link) -> None:
    """
    Wait until a TCP connection attempt from the client namespace reaches the
    server namespace's kernel and its answer comes back.

    @raise NetnsError: it did not within L{_PATH_TIMEOUT} seconds.
    """
    result = subprocess.run(
        inNamespace(
            link.clientNamespace,
            [sys.executable, "-c", _PROBE, link.serverAddress, str(_PATH_TIMEOUT)],
        ),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise NetnsError(f"the link does not carry TCP: {result.stderr.strip()}")


@contextmanager
def delayedLink(
    rttMs: float,
    rateBitsPerSecond: int | None = None,
    *,
    prefix: str = "imb",
    mtu: int | None = None,
    queueBytes: int | None = None,
    delayLine: str | None = None,
) -> Iterator[Link]:
    """
    Two network namespaces joined by the delay line, for the duration of the
    C{with} block.

    The namespaces are named C{<prefix>-<pid>-<n>-srv} and
    C{<prefix>-<pid>-<n>-cli}.  On exit, however it happens, the delay line
    is stopped, any process still inside either namespace is terminated and
    both namespaces are deleted.

    @param rttMs: the round-trip time to add, in milliseconds (half each
        way).  The benchmark uses plain loopback, not this, for 0.
    @param rateBitsPerSecond: the bandwidth of each direction (IP packet
        bytes), or L{None} for unlimited.
    @param prefix: the start of the namespace names (see L{cleanupStale}).
    @param mtu: the MTU of the link; by default 9000 when unlimited and
        1500 when rate-limited.
    @param queueBytes: the drop-tail limit of the bytes waiting for the rate
        limiter; by default 100 ms of the rate, at least 64 packets.
    @param delayLine: a binary built by L{compileDelayLine}; by default one
        is built into a temporary directory.
    @raise NetnsError: the link could not be set up (not root, no
        C{/dev/net/tun}, no C{gcc}, ...); nothing is left behind.
    """
    if rttMs < 0:
        raise ValueError(f"rttMs must not be negative: {rttMs}")
    if rateBitsPerSecond is not None and rateBitsPerSecond <= 0:
        raise ValueError(f"rateBitsPerSecond must be positive: {rateBitsPerSecond}")
    if mtu is None:
        mtu = _LARGE_MTU if rateBitsPerSecond is None else _SMALL_MTU
    base = f"{prefix}-{os.getpid()}-{next(_serials)}"
    link = Link(
        serverNamespace=f"{base}-srv",
        clientNamespace=f"{base}-cli",
        serverAddress=SERVER_ADDRESS,
        clientAddress=CLIENT_ADDRESS,
        rttMs=rttMs,
        rateBitsPerSecond=rateBitsPerSecond,
    )
    arguments = [f"--delay-us={round(rttMs * 500)}", f"--mtu={mtu}", f"--ifname={DEVICE}"]
    if rateBitsPerSecond is not None:
        if queueBytes is None:
            queueBytes = max(64 * mtu, rateBitsPerSecond // 80)
        arguments += [f"--rate-bps={rateBitsPerSecond}", f"--queue-bytes={queueBytes}"]

    with ExitStack() as cleanup:
        if delayLine is None:
            buildDir = cleanup.enter_context(
                tempfile.TemporaryDirectory(prefix="delayline-")
            )
            delayLine = compileDelayLine(buildDir)
        for namespace in (link.serverNamespace, link.clientNamespace):
            _ip("netns", "add", namespace)
            cleanup.callback(_deleteNamespace, namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        process = subprocess.Popen(
            [delayLine, *arguments, link.serverNamespace, link.clientNamespace],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Not in the terminal's process group: a ^C reaches Python, which
            # then stops the delay line itself, after the programs using it.
            start_new_session=True,
        )
        cleanup.callback(_stopDelayLine, process)
        _awaitReady(process)
        for namespace, local, peer in (
            (link.serverNamespace, SERVER_ADDRESS, CLIENT_ADDRESS),
            (link.clientNamespace, CLIENT_ADDRESS, SERVER_ADDRESS),
        ):
            _ip("-n", namespace, "address", "add", local, "peer", peer, "dev", DEVICE)
        _awaitPath(link)
        yield link


_STALE = re.compile(r"^(?P<prefix>.+)-(?P<pid>\d+)-\d+-(?:srv|cli)$")


def cleanupStale(prefix: str = "imb") -> list[str]:
    """
    Remove the namespaces that L{delayedLink} runs with this prefix left
    behind when their process died without cleaning up (killed outright):
    those whose owning process no longer exists.  Processes still inside them
    are terminated first.  Links of running processes are left alone.

    @param prefix: the prefix given to L{delayedLink}.
    @return: the names of the namespaces removed.
    """
    listing = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    )
    removed = []
    for line in listing.stdout.splitlines():
        name = line.split(" ", 1)[0]
        match = _STALE.match(name)
        if match is None or match.group("prefix") != prefix:
            continue
        try:
            os.kill(int(match.group("pid")), 0)
        except ProcessLookupError:
            _deleteNamespace(name)
            removed.append(name)
        except PermissionError:
            pass
    return removed
