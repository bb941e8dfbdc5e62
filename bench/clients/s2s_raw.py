# -*- test-case-name: tests.test_bench -*-
"""
A raw server-to-server copier: the practical ceiling of reading one IMAP
account and writing another with plain IMAP, fetch then MULTIAPPEND.

    python -m bench.clients.s2s_raw --source-host H --source-port P \\
        --source-user U --host H --port P --user U --password PW [--batch 50]

One connection to each server, TCP_NODELAY, blocking sockets, no parsing
beyond what is needed.  For each folder of the source (C{LIST "" "*"},
less C{\\Noselect}): EXAMINE it, read the whole folder with one C{UID FETCH
1:* (FLAGS INTERNALDATE BODY.PEEK[])} into memory, then CREATE it on the
destination (not INBOX) and write every message with back-to-back
MULTIAPPEND commands of C{--batch} messages (LITERAL+), all sent before
any reply is read.  Fetch and append do not overlap: one folder is fetched
whole, then appended whole.

Prints C{{"messages": N, "octets": N}} as JSON; exits 1 on any refusal.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys

_LIST_LINE = re.compile(rb'^\* LIST \((?P<attributes>[^)]*)\) (?:NIL|"(?:\\.|[^"\\])*") (?P<name>.*)$')
_FETCH_HEAD = re.compile(
    rb'FLAGS \((?P<flags>[^)]*)\).*?INTERNALDATE "(?P<date>[^"]*)".*?\{(?P<size>\d+)\}$'
)


class Connection:
    """
    A blocking IMAP connection that reads whole tagged responses.
    """

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.tag = 0
        self.readUntil(b"\r\n")

    def readUntil(self, marker: bytes, start: int = 0) -> int:
        """
        Read until C{marker} appears in the buffer at or after C{start};
        return the position after it.
        """
        while True:
            found = self.buffer.find(marker, start)
            if found >= 0:
                return found + len(marker)
            start = max(start, len(self.buffer) - len(marker) + 1)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk

    def command(self, text: bytes) -> bytes:
        """
        Send one command and return everything up to and including its
        tagged reply (raises on NO/BAD).
        """
        self.tag += 1
        tag = b"T%d" % self.tag
        self.sock.sendall(tag + b" " + text + b"\r\n")
        return self.response(tag)

    def response(self, tag: bytes) -> bytes:
        """
        Read up to the tagged reply of C{tag} (no literals expected).
        """
        pos = 0
        while True:
            end = self.readUntil(b"\r\n", pos)
            if self.buffer.startswith(tag + b" ", pos):
                break
            pos = end
        data = bytes(self.buffer[:end])
        del self.buffer[:end]
        if data[pos + len(tag) + 1 : pos + len(tag) + 4] != b"OK ":
            raise RuntimeError(data[pos:end][:200].decode("ascii", "replace"))
        return data

    def fetchFolder(self) -> list[tuple[bytes, bytes, memoryview]]:
        """
        C{UID FETCH 1:* (FLAGS INTERNALDATE BODY.PEEK[])} of the open folder:
        (flags, date, body) of each message, literals found by their size
        (a body may hold a line that looks like a tagged reply).
        """
        self.tag += 1
        tag = b"T%d" % self.tag
        self.sock.sendall(tag + b" UID FETCH 1:* (FLAGS INTERNALDATE BODY.PEEK[])\r\n")
        messages = []
        pos = 0
        while True:
            end = self.readUntil(b"\r\n", pos)
            line = bytes(self.buffer[pos : end - 2])
            if line.startswith(tag + b" "):
                if not line.startswith(tag + b" OK"):
                    raise RuntimeError(line[:200].decode("ascii", "replace"))
                break
            match = _FETCH_HEAD.search(line)
            if match is None:
                pos = end
                continue
            size = int(match.group("size"))
            while len(self.buffer) < end + size:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                self.buffer += chunk
            messages.append((match.group("flags"), match.group("date"), (end, size)))
            pos = self.readUntil(b"\r\n", end + size)
        data = memoryview(bytes(self.buffer[:pos]))
        del self.buffer[: self.readUntil(b"\r\n", pos)]
        return [(flags, date, data[start : start + size]) for flags, date, (start, size) in messages]


def _folders(source: Connection) -> list[bytes]:
    names = []
    for line in source.command(b'LIST "" "*"').split(b"\r\n"):
        match = _LIST_LINE.match(line)
        if match and b"\\noselect" not in match.group("attributes").lower():
            names.append(match.group("name"))
    return names


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-host", required=True)
    parser.add_argument("--source-port", type=int, required=True)
    parser.add_argument("--source-user", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    login = b'LOGIN "%s" "%s"'
    source = Connection(args.source_host, args.source_port)
    source.command(login % (args.source_user.encode(), args.password.encode()))
    destination = Connection(args.host, args.port)
    destination.command(login % (args.user.encode(), args.password.encode()))
    count = octets = 0
    for name in _folders(source):
        source.command(b"EXAMINE " + name)
        messages = source.fetchFolder()
        if name.strip(b'"').upper() != b"INBOX":
            destination.command(b"CREATE " + name)
        tags = []
        for first in range(0, len(messages), args.batch):
            destination.tag += 1
            tag = b"T%d" % destination.tag
            pieces: list[bytes | memoryview] = [tag, b" APPEND ", name]
            for flags, date, body in messages[first : first + args.batch]:
                flags = b" ".join(f for f in flags.split() if f.lower() != b"\\recent")
                pieces.append(b' (%s) "%s" {%d+}\r\n' % (flags, date, len(body)))
                pieces.append(body)
                octets += len(body)
            pieces.append(b"\r\n")
            destination.sock.sendall(b"".join(pieces))
            tags.append(tag)
        for tag in tags:
            destination.response(tag)
        count += len(messages)
    source.command(b"LOGOUT")
    destination.command(b"LOGOUT")
    json.dump({"messages": count, "octets": octets}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
