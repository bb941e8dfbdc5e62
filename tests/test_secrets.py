# -*- test-case-name: tests.test_secrets -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.access.secrets}: the size cap on password files.  (The other
rules of L{readPasswordFile} are tested with the configuration, in
L{tests.test_config}.)
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from imapmig.access.secrets import MAX_PASSWORD_FILE, readPasswordFile
from imapmig.errors import PasswordFileError


class PasswordFileSizeTests(SynchronousTestCase):
    """
    A password file larger than L{MAX_PASSWORD_FILE} octets is refused
    without being read into memory.
    """

    def writeFile(self, content: bytes, size: int | None = None) -> str:
        """
        A password file (mode 600) holding C{content}, extended to C{size}
        octets (sparse, so large sizes cost no disk) if given.
        """
        path: str = self.mktemp()
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(content)
            if size is not None:
                f.truncate(size)
        return path

    def tooLarge(self, path: str) -> str:
        """
        The error expected for C{path}.
        """
        return (
            f"password file {path} is larger than 64 KiB (65536 octets):"
            " refused unread (the password is its first line)"
        )

    def test_atTheCap(self) -> None:
        """
        A file of exactly L{MAX_PASSWORD_FILE} octets is read.
        """
        self.assertEqual(MAX_PASSWORD_FILE, 64 * 1024)
        path = self.writeFile(b"s3cret\n" + b"#" * (MAX_PASSWORD_FILE - 7))
        self.assertEqual(os.path.getsize(path), MAX_PASSWORD_FILE)
        self.assertEqual(readPasswordFile(path), "s3cret")

    def test_overTheCap(self) -> None:
        """
        One octet more is refused, naming the file and the cap; so is a
        2 GiB file, at once.
        """
        for size in (MAX_PASSWORD_FILE + 1, 2 * 1024**3):
            path = self.writeFile(b"s3cret\n", size)
            error = self.assertRaises(PasswordFileError, readPasswordFile, path)
            self.assertEqual(str(error), self.tooLarge(path))

    def test_grewAfterCheck(self) -> None:
        """
        A file that grows past the cap after its size was checked is
        refused too: at most the cap and one octet more is read.
        """
        path = self.writeFile(b"s3cret\n", 10 * MAX_PASSWORD_FILE)
        realFstat = os.fstat

        class Small:
            """
            The status of the file as it was before it grew.
            """

            def __init__(self, fd: int) -> None:
                real = realFstat(fd)
                self.st_mode = real.st_mode
                self.st_size = 7

        reads: list[int] = []
        realFdopen = os.fdopen

        def recordingFdopen(fd: int, *args: object, **kwargs: object) -> object:
            f = realFdopen(fd, *args, **kwargs)  # type: ignore[call-overload]
            realRead = f.read

            def read(size: int = -1) -> bytes:
                reads.append(size)
                data: bytes = realRead(size)
                return data

            f.read = read
            return f

        self.patch(os, "fstat", Small)
        self.patch(os, "fdopen", recordingFdopen)
        error = self.assertRaises(PasswordFileError, readPasswordFile, path)
        self.assertEqual(str(error), self.tooLarge(path))
        self.assertEqual(reads, [MAX_PASSWORD_FILE + 1])
