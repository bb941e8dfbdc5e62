# -*- test-case-name: tests.test_journald -*-
"""
A journal socket for tests: a datagram socket bound in a private
directory, and a reader of journald's native protocol (written from its
specification, U{https://systemd.io/JOURNAL_NATIVE_PROTOCOL/}, not from
L{imapmig.log.journald}), for what imapmig sends it.
"""

from __future__ import annotations

import array
import os
import shutil
import socket
import struct
import tempfile
import time
from typing import Callable

from twisted.trial.unittest import SynchronousTestCase

# The most a test datagram holds; one descriptor of ancillary data.
_DATAGRAM_LIMIT = 1 << 20
_ANCILLARY = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


def parseEntry(data: bytes) -> dict[str, list[str]]:
    """
    The fields of one native-protocol entry: each name with its values in
    order (a field may repeat).

    @raise ValueError: the entry breaks the protocol.
    """
    fields: dict[str, list[str]] = {}
    at = 0
    while at < len(data):
        end = data.index(b"\n", at)
        line = data[at:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            at = end + 1
        else:
            name = line
            (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
            value = data[end + 9 : end + 9 + size]
            if len(value) != size or data[end + 9 + size : end + 10 + size] != b"\n":
                raise ValueError(f"bad binary-safe field {name!r}")
            at = end + 10 + size
        if not name or not all(c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_" for c in name):
            raise ValueError(f"bad field name {name!r}")
        fields.setdefault(name.decode("ascii"), []).append(value.decode("utf-8"))
    return fields


class JournalSocket:
    """
    A datagram socket standing for journald's, bound at L{path} in a
    private directory under the system's temporary directory (a Unix
    socket's path is short), removed when the test ends.

    @ivar received: per entry read, whether it came through a memory file.
    """

    def __init__(self, testCase: SynchronousTestCase) -> None:
        self.directory = tempfile.mkdtemp(prefix="imapmig-journal-")
        testCase.addCleanup(shutil.rmtree, self.directory, True)
        self.path = os.path.join(self.directory, "socket")
        self.start()
        testCase.addCleanup(lambda: self.socket.close())
        self.viaMemoryFile: list[bool] = []
        self.seals: list[int] = []

    def start(self) -> None:
        """
        Bind a new socket at L{path} (journald started, or started again).
        """
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(self.path)

    def stop(self) -> None:
        """
        Close the socket and remove it (journald stopped).
        """
        self.socket.close()
        os.unlink(self.path)

    def receive(self, timeout: float = 0.0) -> dict[str, list[str]] | None:
        """
        The next entry, parsed (read from its memory file when one came):
        L{None} if none arrives within C{timeout} seconds (none waiting,
        with C{0}).
        """
        if timeout > 0:
            self.socket.settimeout(timeout)
        else:
            self.socket.setblocking(False)
        try:
            data, ancillary, _, _ = self.socket.recvmsg(_DATAGRAM_LIMIT, _ANCILLARY)
        except (BlockingIOError, socket.timeout):
            return None
        descriptors = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                descriptors.frombytes(payload[: len(payload) - len(payload) % descriptors.itemsize])
        if descriptors:
            import fcntl

            assert len(descriptors) == 1 and data == b"", (len(descriptors), data[:40])
            fd = descriptors[0]
            try:
                self.seals.append(fcntl.fcntl(fd, fcntl.F_GET_SEALS))
                size = os.fstat(fd).st_size
                data = os.pread(fd, size, 0)
            finally:
                os.close(fd)
        self.viaMemoryFile.append(bool(descriptors))
        return parseEntry(data)

    def receiveAll(self) -> list[dict[str, list[str]]]:
        """
        Every entry waiting now.
        """
        entries = []
        while (entry := self.receive()) is not None:
            entries.append(entry)
        return entries

    def waitFor(
        self,
        wanted: Callable[[dict[str, list[str]]], bool],
        deadline: float,
        seen: list[dict[str, list[str]]],
    ) -> dict[str, list[str]] | None:
        """
        Read entries into C{seen} until one satisfies C{wanted}, for at most
        C{deadline} seconds in all (a child process writes them).

        @return: that entry, or L{None} when none came in time.
        """
        end = time.monotonic() + deadline
        for entry in seen:
            if wanted(entry):
                return entry
        while (left := end - time.monotonic()) > 0:
            received = self.receive(left)
            if received is None:
                continue
            seen.append(received)
            if wanted(received):
                return received
        return None


class EntryTest:
    """
    A test of an entry: its fields have the given values.
    """

    def __init__(self, **values: str) -> None:
        self.values = values

    def __call__(self, entry: dict[str, list[str]]) -> bool:
        return all(entry.get(k, [None])[0] == v for k, v in self.values.items())

    def __repr__(self) -> str:
        return f"EntryTest({self.values!r})"


def first(entry: dict[str, list[str]], name: str) -> str | None:
    """
    The first value of field C{name} in C{entry}, if any.
    """
    values = entry.get(name)
    return values[0] if values else None
