"""
An attacker and a monitor of the status site, over real sockets: holders
that connect and send nothing or drip a byte every few seconds, each
reopened as soon as it is closed (L{holdSockets}, also runnable as
C{python -m tests.statushold PORT IDLE SLOW SECONDS}), and C{/healthz}
probes (L{probe}).  Used by the status integration tests and to reproduce
by hand.
"""

from __future__ import annotations

import selectors
import socket
import sys
import time

__all__ = ["holdSockets", "probe"]


def holdSockets(port: int, idle: int, slow: int, seconds: float, drip: float = 2.0) -> int:
    """
    Hold C{idle} connections that send nothing and C{slow} that send one
    octet every C{drip} seconds to C{127.0.0.1:port}, each reopened as soon
    as the server closes it, for C{seconds}.

    @return: how many connections were opened in all.
    """
    selector = selectors.DefaultSelector()
    held: dict[socket.socket, list[float | bool]] = {}
    opened = 0

    def open(dripping: bool) -> None:
        nonlocal opened
        connection = socket.socket()
        connection.setblocking(False)
        connection.connect_ex(("127.0.0.1", port))
        held[connection] = [dripping, time.monotonic()]
        selector.register(connection, selectors.EVENT_READ)
        opened += 1

    for n in range(idle + slow):
        open(n >= idle)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, _ in selector.select(0.2):
            connection: socket.socket = key.fileobj  # type: ignore[assignment]
            try:
                data = connection.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                dripping = bool(held.pop(connection)[0])
                selector.unregister(connection)
                connection.close()
                open(dripping)
        now = time.monotonic()
        for connection, state in held.items():
            if state[0] and now - float(state[1]) >= drip:
                state[1] = now
                try:
                    connection.send(b"G")
                except OSError:
                    pass
    for connection in held:
        connection.close()
    return opened


def probe(port: int, path: bytes = b"/healthz", timeout: float = 30.0) -> tuple[bytes, float]:
    """
    Send C{GET path} to C{127.0.0.1:port} on a new connection and read the
    status line of the answer.

    @return: the status line (empty when the connection failed or closed
        first) and the seconds it took.
    """
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.settimeout(timeout)
            connection.sendall(
                b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            answer = b""
            while b"\r\n" not in answer:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        answer = b""
    return answer.partition(b"\r\n")[0], time.monotonic() - started


if __name__ == "__main__":
    port, idle, slow, seconds = sys.argv[1:5]
    print(holdSockets(int(port), int(idle), int(slow), float(seconds)), "connections opened")
