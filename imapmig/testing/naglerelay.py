# -*- test-case-name: tests.test_testing_naglerelay -*-
"""
A relay that makes a server behave as one that leaves Nagle's algorithm on
(as Courier-IMAP does: it sets only C{SO_KEEPALIVE} and C{SO_LINGER}).

L{NagleRelay} listens on loopback and relays every connection it accepts to
an upstream server (a private Dovecot), as it reads: each C{recv} is sent on
at once with one C{sendall}, so the server's write boundaries survive.  The
socket facing the client is left with Nagle on: a small write of the server
(a C{+} continuation right after a tagged C{OK}) waits until the client has
acknowledged the earlier one, exactly as it would on the server's own socket.

The socket facing the server has C{TCP_NODELAY}: with Nagle on there too,
the relay would hold back the tail of what the client sent (the last part
of a literal) until the server acknowledged the rest, a stall a client
talking to the server directly never has.  With C{nagle=False} the
client-facing socket gets C{TCP_NODELAY} as well: the same path without the
stall, for comparison.

It uses blocking sockets and two threads per connection, not Twisted:
Twisted's transports send what was written at the reactor's next turn,
where two replies the server wrote one after the other are often merged into
one segment, which hides the stall this relay exists to reproduce.

    python -m imapmig.testing.naglerelay --upstream 127.0.0.1:PORT [--nodelay]

prints C{ready PORT} once listening and relays until terminated.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from types import FrameType, TracebackType

_CHUNK = 65536


class NagleRelay:
    """
    A loopback relay to C{upstream} whose client-facing sockets keep Nagle
    on (see the module docstring).

    @ivar port: the port it listens on (after L{start}).
    @ivar connections: connections accepted so far.
    """

    def __init__(self, upstreamHost: str, upstreamPort: int, *, nagle: bool = True) -> None:
        """
        @param upstreamHost: the server's address.
        @param upstreamPort: its port.
        @param nagle: leave Nagle on towards the client (L{False}: set
            C{TCP_NODELAY}, the same path without the stall).
        """
        self._upstream = (upstreamHost, upstreamPort)
        self._nagle = nagle
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.port = 0
        self.connections = 0

    def __enter__(self) -> NagleRelay:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """
        Listen on a free loopback port and accept connections in a thread.
        """
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept, listener)

    def stop(self) -> None:
        """
        Stop listening, close every connection and wait for the threads.
        """
        listener, self._listener = self._listener, None
        if listener is not None:
            _shutdown(listener)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)
        for thread in list(self._threads):
            thread.join(10)
        for sock in sockets:
            sock.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            if not self._relayConnection(client, server):
                return

    def _relayConnection(self, client: socket.socket, server: socket.socket) -> bool:
        """
        Relay between an accepted C{client} and its C{server} both ways,
        each in a thread of its own.

        @return: C{False} when the relay was stopped meanwhile (both
            sockets are closed then).
        """
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self._nagle:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._listener is None:
                client.close()
                server.close()
                return False
            self._sockets += [client, server]
            self.connections += 1
        self._spawn(_relay, client, server)
        self._spawn(_relay, server, client)
        return True


def _shutdown(sock: socket.socket) -> None:
    """
    End both directions of C{sock}'s connection, if it still has one.
    """
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _relay(source: socket.socket, sink: socket.socket) -> None:
    """
    Send on to C{sink} whatever C{source} gives, a read at a time; at the
    end of C{source}, end C{sink}'s output.
    """
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """
    Relay until SIGTERM or SIGINT (see the module docstring).

    @param argv: the command-line arguments (C{sys.argv[1:]} by default).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    parser.add_argument("--nodelay", action="store_true",
                        help="set TCP_NODELAY towards the client too (no stall)")  # fmt: skip
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    relay = NagleRelay(host, int(port), nagle=not args.nodelay)
    relay.start()
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"ready {relay.port}", flush=True)
    done.wait()
    relay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
