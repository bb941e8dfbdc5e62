# -*- test-case-name: tests.test_bench_tlsbio -*-
"""
What OpenSSL's memory BIO costs a TLS writer against OpenSSL writing to the
socket itself, in CPU seconds of the writing process (issue 31, third
round: whether a TLS transport on the socket, C{SSL_set_fd}, pays).

    .venv/bin/python -m bench.tlsbio [MESSAGES [ROUNDS [SUITES]]]

A sink process (the standard library's C{ssl}, reading and dropping)
listens on loopback; then, ROUNDS times (default 6), one writer process per
way sends MESSAGES (default 30,000) messages of 48,000 octets over TLS 1.3
and reports its own user and system seconds (C{getrusage}) for the sends
alone, handshake excluded:

  - C{memory}: imapmig's way (L{imapmig.imap.tls.TLSSender}): C{SSL_write}
    of each message into a memory BIO and, every L{BATCH} messages (one of
    the pipeline's flushes), the records read out at once into one buffer
    and sent with one C{send};
  - C{socket}: OpenSSL on the socket (C{SSL_set_fd}): no memory BIO, no
    copy in or out of it, and one C{write} per 16 KiB record, since
    cryptography's bindings offer no buffering BIO.

Both call OpenSSL's C{SSL_write} directly, once a message (partial writes
off, as L{imapmig.imap.tls.streamline} sets them), on a non-blocking
socket that, when full, is waited on with C{select} as a reactor would
(round 5; round 3's socket way was pyOpenSSL's C{sendall}, one Python
call per record, on a blocking socket, and its memory way flushed every
message).

It prints each run, then the median user, system and total seconds of
each way.  SUITES, if given, is the writer's TLS 1.3 cipher suites (e.g.
C{TLS_AES_128_GCM_SHA256}).  Under C{valgrind --tool=callgrind} a writer
run (C{--writer WAY PORT MESSAGES}) counts the instructions of each way.

Why a module of its own: the rest of C{bench/} runs imapmig against
Dovecot; this isolates one question of the TLS transport's design from
everything else imapmig and Dovecot do.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Sequence

MESSAGE_OCTETS = 48_000
BATCH = 5
"""
The messages the memory way writes a flush: about what one of the
pipeline's writes holds (its C{WRITE_GATHER}, 256 KiB).
"""
WAYS = ("copied", "memory", "socket")


def sink(port: int, certificate: str, key: str) -> None:
    """
    Accept TLS connections on C{port} one at a time and read everything
    each sends, until killed.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    listener = socket.create_server(("127.0.0.1", port))
    print("listening", flush=True)
    buffer = bytearray(1 << 18)
    while True:
        accepted, _ = listener.accept()
        try:
            with context.wrap_socket(accepted, server_side=True) as tls:
                while tls.recv_into(buffer):
                    pass
        except (OSError, ssl.SSLError):
            pass


def writer(way: str, port: int, messages: int, suites: str | None = None) -> dict[str, Any]:
    """
    Send C{messages} messages of L{MESSAGE_OCTETS} to the sink on C{port}
    C{way}'s way.

    @return: the way, and the user and system seconds of the sends.
    """
    from OpenSSL import SSL
    from OpenSSL._util import ffi, lib

    context = SSL.Context(SSL.TLS_METHOD)
    if suites is not None:
        context.set_tls13_ciphersuites(suites.encode("ascii"))
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message = os.urandom(MESSAGE_OCTETS)
    pointer = ffi.from_buffer(message)
    if way == "socket":
        connection = SSL.Connection(context, sock)
        connection.set_connect_state()
        connection.do_handshake()
        lib.SSL_clear_mode(connection._ssl, lib.SSL_MODE_ENABLE_PARTIAL_WRITE)
        sock.setblocking(False)
        ssl_ = connection._ssl
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(messages):
            # As a reactor would: a full socket (WANT_WRITE) waits until
            # writable, then the same write is retried.
            while lib.SSL_write(ssl_, pointer, len(message)) <= 0:
                select.select([], [sock], [])
    else:
        connection = SSL.Connection(context, None)
        connection.set_connect_state()
        lib.SSL_clear_mode(connection._ssl, lib.SSL_MODE_ENABLE_PARTIAL_WRITE)
        buffer = bytearray(1 << 18)
        scratch, view = ffi.from_buffer(buffer), memoryview(buffer)
        data = ffi.new("char **")

        def sendAll(records: memoryview) -> None:
            sent = 0
            while sent < len(records):
                try:
                    sent += sock.send(records[sent:])
                except BlockingIOError:
                    select.select([], [sock], [])

        def flush() -> None:
            bio = connection._from_ssl
            if way == "copied":
                while (pending := lib.BIO_get_mem_data(bio, ffi.NULL)) > 0:
                    got = lib.BIO_read(bio, scratch, min(pending, len(buffer)))
                    sendAll(view[:got])
                return
            while (pending := lib.BIO_get_mem_data(bio, data)) > 0:
                pointer = data[0]
                sendAll(memoryview(ffi.buffer(pointer, pending)))
                lib.BIO_read(bio, pointer, pending)

        while True:
            try:
                connection.do_handshake()
                break
            except SSL.WantReadError:
                flush()
                connection.bio_write(sock.recv(1 << 16))
        flush()
        sock.setblocking(False)
        before = resource.getrusage(resource.RUSAGE_SELF)
        ssl_ = connection._ssl
        for done in range(1, messages + 1):
            lib.SSL_write(ssl_, pointer, len(message))
            if done % BATCH == 0 or done == messages:
                flush()
    after = resource.getrusage(resource.RUSAGE_SELF)
    sock.close()
    return {
        "way": way,
        "user": after.ru_utime - before.ru_utime,
        "system": after.ru_stime - before.ru_stime,
    }


def summary(runs: Sequence[dict[str, Any]]) -> list[str]:
    """
    One line per way: the median user, system and total seconds of its
    runs.
    """
    lines = []
    for way in WAYS:
        mine = [run for run in runs if run["way"] == way]
        if not mine:
            continue
        user = statistics.median(run["user"] for run in mine)
        system = statistics.median(run["system"] for run in mine)
        total = statistics.median(run["user"] + run["system"] for run in mine)
        lines.append(f"{way}: user {user:.3f} s, system {system:.3f} s, total {total:.3f} s"
                     f" (median of {len(mine)})")  # fmt: skip
    return lines


def main(arguments: list[str]) -> None:
    if arguments[:1] == ["--sink"]:
        sink(int(arguments[1]), arguments[2], arguments[3])
        return
    if arguments[:1] == ["--writer"]:
        suites = arguments[4] if len(arguments) > 4 else None
        print(json.dumps(writer(arguments[1], int(arguments[2]), int(arguments[3]), suites)))
        return
    messages = int(arguments[0]) if arguments else 30_000
    rounds = int(arguments[1]) if len(arguments) > 1 else 6
    suiteArguments = arguments[2:3]
    from imapmig.testing.privateserver import writeTestCertificates

    tlsDir = tempfile.mkdtemp(prefix="tlsbio-")
    writeTestCertificates(tlsDir)
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    me = [sys.executable, "-m", "bench.tlsbio"]
    server = subprocess.Popen(
        [*me, "--sink", str(port), os.path.join(tlsDir, "server.pem"),
         os.path.join(tlsDir, "server.key")],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        server.stdout.readline()
        runs = []
        for _ in range(rounds):
            for way in WAYS:
                done = subprocess.run([*me, "--writer", way, str(port), str(messages), *suiteArguments],
                                      check=True, capture_output=True)  # fmt: skip
                run = json.loads(done.stdout)
                runs.append(run)
                print(f"{way}: user {run['user']:.3f} s, system {run['system']:.3f} s", flush=True)
        for line in summary(runs):
            print(line)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(tlsDir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
