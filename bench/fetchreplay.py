# -*- test-case-name: tests.test_bench -*-
"""
The CPU cost of reading message bodies from an IMAP source, without a
network or a busy machine's scheduling in the way.

    .venv/bin/python -m bench.fetchreplay [CORPUS] [--runs N]

It starts a private Dovecot on tmpfs holding CORPUS (a corpus directory
under C{bench/work/corpus}, default C{realistic-5000-seed1}) in one
account, records the octets Dovecot sends for C{UID FETCH 1:* (UID
BODY.PEEK[])} of each folder, then replays them into imapmig's client
(L{imapmig.imap.client.MigrationIMAP4Client} on a C{StringTransport}) in
reads of 64 KiB, as the reactor would deliver them, with the IMAP
source's body sink, limits and spooling, and the source's hand-over of
each body (L{imapmig.sources.imapreading.BodyReader.messageBody}: the CRLF
check).  It prints the CPU time (C{time.process_time}) per message, the
best of C{--runs}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from bench.servers import PASSWORD, BenchServer
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.mail.message import SourceFolder
from imapmig.sources.imapbodies import BodySink, bodyLimits, SPOOL_ABOVE, MAX_MESSAGE_BYTES
from imapmig.sources.imapreading import BodyReader
from imapmig.sources.imapstatus import FolderMarks

_READ = 64 * 1024


def _record(port: int, user: str) -> list[tuple[bytes, int]]:
    """
    What Dovecot sends for each folder's body fetch (up to and including
    the tagged reply, whose tag is C{TAG}), and the folder's message count.
    """
    sock = socket.create_connection(("127.0.0.1", port))

    def until(marker: bytes) -> bytes:
        data = b""
        while not data.endswith(marker) and marker + b" " not in data:
            data += sock.recv(1 << 20)
        return data

    def command(text: bytes) -> bytes:
        sock.sendall(b"A " + text + b"\r\n")
        data = b""
        while b"\r\nA OK" not in data and not data.startswith(b"A OK"):
            data += sock.recv(1 << 20)
        return data

    sock.recv(4096)
    command(b'LOGIN "%s" "%s"' % (user.encode(), PASSWORD.encode()))
    names = [
        line.rsplit(b" ", 1)[1]
        for line in command(b'LIST "" "*"').split(b"\r\n")
        if line.startswith(b"* LIST") and b"\\Noselect" not in line
    ]
    streams = []
    for name in names:
        examined = command(b"EXAMINE " + name)
        exists = int(examined.split(b" EXISTS")[0].rsplit(b"* ", 1)[1])
        sock.sendall(b"TAG UID FETCH 1:* (UID BODY.PEEK[])\r\n")
        data = bytearray()
        while not data.endswith(b"\r\n") or b"\r\nTAG OK" not in data[-200:]:
            data += sock.recv(1 << 20)
        streams.append((bytes(data), exists))
    sock.close()
    return streams


def replay(streams: list[tuple[bytes, int]], spoolDirectory: str) -> tuple[float, int]:
    """
    Feed the recorded streams to a client; return the CPU seconds and the
    bodies handed over.
    """
    client = MigrationIMAP4Client(Clock(), timeout=0)
    client.makeConnection(StringTransport())  # type: ignore[no-untyped-call]
    client.dataReceived(b"* OK [CAPABILITY IMAP4rev1 LITERAL+] ready\r\n")
    source = BodyReader(FolderMarks("IMAP source"), "IMAP source")
    folder = SourceFolder(path=("INBOX",), key="INBOX")
    handed = 0
    tags = [b"%04X" % (client.tagID + i) for i in range(len(streams))]
    streams = [
        (stream.replace(b"\r\nTAG OK", b"\r\n" + tag + b" OK"), exists)
        for (stream, exists), tag in zip(streams, tags)
    ]
    started = time.process_time()
    for stream, exists in streams:
        sink = BodySink(set(range(1, exists * 4 + 10)))
        client._fetchParser.limits = bodyLimits([], MAX_MESSAGE_BYTES, SPOOL_ABOVE,
                                                spoolDirectory)  # fmt: skip
        done = client.fetchInto(b"UID FETCH 1:* (UID BODY.PEEK[])", sink)
        for offset in range(0, len(stream), _READ):
            client.dataReceived(stream[offset : offset + _READ])
        assert done.called, "the replayed fetch did not complete"
        for uid, body in sink.bodies.items():
            source.messageBody(folder, uid, body)
            handed += 1
    return time.process_time() - started, handed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default="realistic-5000-seed1")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
    base = tempfile.mkdtemp(prefix="fetchreplay-", dir="/dev/shm")
    server = BenchServer(base, accounts=1, fsync=False, mailRoot=os.path.join(base, "mail"),
                         capabilities=None, compress=False, namespace=None,
                         address="127.0.0.1", inNamespace=None)  # fmt: skip
    server.start()
    try:
        user = server.freshAccount()
        server.loadMaildir(user, os.path.join(work, "corpus", args.corpus, "Maildir"))
        streams = _record(server.port, user)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    best = None
    for _ in range(args.runs):
        seconds, handed = replay(streams, "/dev/shm")
        best = seconds if best is None else min(best, seconds)
    assert best is not None
    octets = sum(len(s) for s, _ in streams)
    print(f"{handed} bodies, {octets / 1e6:.1f} MB: best of {args.runs} "
          f"{best:.3f} s CPU, {best / handed * 1e6:.1f} µs per message")  # fmt: skip


if __name__ == "__main__":
    main()
