# -*- test-case-name: tests.test_testing_ports -*-
"""
Loopback TCP ports for the demo and C{python -m imapmig.testing.dovecot}:
the status port a configuration names, and the ports a process really
listens on (read from C{/proc}), which is how a launcher learns the port
of the daemon I{it} started, with no race against another process that
picked the same port.
"""

from __future__ import annotations

import os
import socket

STATUS_PORT = 8025
"""
The status port a configuration names when it is free (the demo's).
"""


def statusPort() -> int:
    """
    The status port for a configuration: L{STATUS_PORT} if it is free on
    loopback now, else 0 (the kernel picks one when the daemon listens;
    L{listeningPorts} then tells which).

    Another process may take L{STATUS_PORT} between this check and the
    daemon's listen; the daemon then exits saying so, and a launcher that
    watches it (the demo) tries again with 0.
    """
    return STATUS_PORT if portFree(STATUS_PORT) else 0


def portFree(port: int) -> bool:
    """
    Whether C{port} can be bound on 127.0.0.1 now, as Twisted binds a
    listener (C{SO_REUSEADDR}: a port whose last connections linger in
    C{TIME_WAIT}, a demo run just before, is free).
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def freePort() -> int:
    """
    A port free on 127.0.0.1 now, picked by the kernel, for a
    configuration a person will run by hand (who needs to know the port
    in advance).
    """
    return freePorts(1)[0]


def freePorts(count: int) -> list[int]:
    """
    Ask the kernel for C{count} distinct free TCP ports on 127.0.0.1 (each
    socket kept bound until all are chosen).
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def listeningPorts(pid: int) -> list[int]:
    """
    The TCP ports process C{pid} listens on: its socket inodes (from
    C{/proc/PID/fd}) matched against the listening sockets of
    C{/proc/net/tcp} and C{tcp6}; empty when it has exited or listens on
    none.
    """
    inodes = _socketInodes(pid)
    return sorted({port for table in _TCP_TABLES for port in _listening(table, inodes)})


_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_SOCKET = "socket:["


def _socketInodes(pid: int) -> set[str]:
    """
    The inodes of the sockets process C{pid} holds; none once it exited.
    """
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return set()
    targets = (_readLink(f"/proc/{pid}/fd/{fd}") for fd in descriptors)
    return {target[len(_SOCKET) : -1] for target in targets if target.startswith(_SOCKET)}


def _readLink(path: str) -> str:
    """
    Where the symbolic link C{path} points, or C{""} if it is gone.
    """
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _listening(table: str, inodes: set[str]) -> list[int]:
    """
    The ports of the sockets of C{inodes} that C{table} (C{/proc/net/tcp}
    or C{tcp6}) shows listening.
    """
    try:
        with open(table) as f:
            rows = f.read().splitlines()[1:]
    except FileNotFoundError:
        return []
    # local_address is HEXADDR:HEXPORT; state 0A is LISTEN.
    listening = (row.split() for row in rows)
    return [int(f[1].rsplit(":", 1)[1], 16) for f in listening if f[3] == "0A" and f[9] in inodes]
