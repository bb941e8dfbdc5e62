# -*- test-case-name: tests.test_sources_messagefile -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.messagefile}: reading one message file,
never blocking on or following what is not a regular file, and streaming
a large one (moved from tests.test_sources_local with the code).
"""

from __future__ import annotations

import os
import random
import stat

from twisted.trial.unittest import SkipTest, SynchronousTestCase

import imapmig.sources.messagefile as messagefile
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    toCRLF,
)
from imapmig.mail.octets import BARE_CR, BARE_LF, EIGHT_BIT, NUL, UNKNOWN, compiled
from imapmig.sources.local import FILE_FLAGS
from imapmig.sources.messagefile import (
    LARGE_MESSAGE,
    NOT_READ,
    lookUp,
    readListedFile,
    readListedFiles,
    readListedFilesPython,
    readMessageFile,
)
from tests.localfiles import makeSocket


class SpecialFileTests(SynchronousTestCase):
    """
    L{readMessageFile} never blocks on, reads from, or follows what is not
    a regular file.
    """

    def test_fifo(self) -> None:
        """
        A FIFO (with no writer) is opened without blocking and refused,
        whatever size the listing gave.
        """
        path = self.mktemp()
        os.mkfifo(path)
        for size in (0, 10):
            self.assertEqual(
                readMessageFile(path, size), UnreadableMessage(f"not a regular file: FIFO: {path}")
            )

    def test_fifoWithWriter(self) -> None:
        """
        A FIFO with a writer that sends nothing is not waited for.
        """
        path = self.mktemp()
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        self.addCleanup(os.close, writer)
        body = readMessageFile(path, 10)
        assert isinstance(body, UnreadableMessage)
        self.assertIn(path, body.reason)

    def test_socket(self) -> None:
        """
        A Unix socket is refused.
        """
        path = self.mktemp()
        makeSocket(self, path)
        self.assertEqual(
            readMessageFile(path, 10), UnreadableMessage(f"not a regular file: {path}")
        )

    def test_symbolicLink(self) -> None:
        """
        A symbolic link (put in place after the listing saw a file) is not
        followed.
        """
        target = self.mktemp()
        with open(target, "wb") as f:
            f.write(b"secret\n")
        path = self.mktemp()
        os.symlink(os.path.abspath(target), path)
        self.assertEqual(
            readMessageFile(path, 7),
            UnreadableMessage(f"became a symbolic link since it was listed, not followed: {path}"),
        )

    def test_device(self) -> None:
        """
        A character device (here one made with C{mknod}, where the process
        may) is refused without being read.
        """
        path = self.mktemp()
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except PermissionError:
            raise self.skipTest("mknod needs CAP_MKNOD")
        self.assertEqual(
            readMessageFile(path, 0),
            UnreadableMessage(f"not a regular file: character device: {path}"),
        )
        self.assertEqual(
            readMessageFile(path, 100),
            UnreadableMessage(f"not a regular file: character device: {path}"),
        )

    def test_directory(self) -> None:
        """
        A directory is refused, named as shown in C{directory} if given.
        """
        parent = self.mktemp()
        os.makedirs(os.path.join(parent, "sub"))
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        self.assertEqual(
            readMessageFile("sub", 0, fd, "/shown"),
            UnreadableMessage("not a regular file: directory: /shown/sub"),
        )


class ReadListedFileTests(SynchronousTestCase):
    """
    L{readListedFile}, the hot path's read, gives a body only for a regular
    file of the size listed, and L{None} for anything else (for
    L{readMessageFile} to tell why), never blocking.
    """

    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, self.fd)

    def write(self, name: str, content: bytes) -> None:
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(content)

    def test_regular(self) -> None:
        """
        A regular file of the size listed is read, with CRLF line endings
        (and one already in CRLF comes back as it is), and the facts of its
        octets found on the way.
        """
        self.write("m", b"a\nb\n")
        self.write("crlf", b"a\r\nb\r\n")
        self.write("odd", b"\0\xe9\rz")
        self.assertEqual(readListedFile("m", 4, self.fd), (b"a\r\nb\r\n", BARE_LF))
        self.assertEqual(readListedFile("crlf", 6, self.fd), (b"a\r\nb\r\n", 0))
        self.assertEqual(readListedFile("odd", 4, self.fd), (b"\0\xe9\rz", NUL | EIGHT_BIT | BARE_CR))

    def test_otherSize(self) -> None:
        """
        A file that grew or shrank since it was listed gives L{None}.
        """
        self.write("m", b"0123456789")
        self.assertIsNone(readListedFile("m", 9, self.fd))
        self.assertIsNone(readListedFile("m", 11, self.fd))

    def test_missing(self) -> None:
        """
        A file that is gone gives L{None}.
        """
        self.assertIsNone(readListedFile("gone", 10, self.fd))

    def test_notRegular(self) -> None:
        """
        A FIFO (with or without a writer), a symbolic link or a directory
        put where the listing saw a file gives L{None}, without blocking
        or following the link.
        """
        os.mkfifo(os.path.join(self.directory, "fifo"))
        self.assertIsNone(readListedFile("fifo", 10, self.fd))
        reader = os.open(os.path.join(self.directory, "fifo"), os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(os.path.join(self.directory, "fifo"), os.O_WRONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        self.addCleanup(os.close, writer)
        self.assertIsNone(readListedFile("fifo", 10, self.fd))
        self.write("target", b"secret\n")
        os.symlink("target", os.path.join(self.directory, "link"))
        self.assertIsNone(readListedFile("link", 7, self.fd))
        os.mkdir(os.path.join(self.directory, "sub"))
        self.assertIsNone(readListedFile("sub", 7, self.fd))


class ReadListedFilesTests(SynchronousTestCase):
    """
    L{readListedFiles} reads a batch as L{readListedFile} reads each file,
    the C extension's (one call a batch) as its Python twin
    (L{readListedFilesPython}), leaving L{NOT_READ} where it gives L{None}
    or the file is not a regular one of the size listed.
    """

    def setUp(self) -> None:
        self.directories = [self.mktemp(), self.mktemp()]
        self.descriptors: list[int | None] = []
        for directory in self.directories:
            os.makedirs(directory)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            self.addCleanup(os.close, fd)
            self.descriptors.append(fd)
        self.located: dict[str, tuple[int, str, object]] = {}

    def file(self, key: str, content: bytes, index: int = 0, name: str | None = None) -> None:
        """
        Write C{content} as the file of C{key} in directory C{index}.
        """
        name = name or key
        with open(os.path.join(self.directories[index], name), "wb") as f:
            f.write(content)
        self.located[key] = (index, name, None)

    def readBoth(self, sizes: dict[str, int]) -> tuple[list[MessageBody], bytes, int]:
        """
        The bodies, facts and count not read of the messages of C{sizes}
        (key: listed size), asserted the same by both implementations.
        """
        messages = [SourceMessage(key, (), None, size) for key, size in sizes.items()]
        results = []
        for implementation in (readListedFiles, self.readPython):
            for locate in (self.located.get, self.table()):
                bodies = ReadBodies()
                missed = implementation(messages, locate, self.descriptors, bodies)
                results.append((list(bodies), bytes(bodies.facts), missed))
        for result in results[1:]:
            self.assertEqual(result, results[0])
        return results[0]

    def table(self) -> messagefile.Table:
        """
        Where the files are (C{self.located}), as a listing's L{Table}.
        """
        names: tuple[dict[str, str], ...] = tuple({} for _ in self.descriptors)
        irregular: dict[str, object] = {}
        for key, (index, name, what) in self.located.items():
            names[index][key] = name
            if what is not None:
                irregular[key] = what
        return names, irregular

    def readPython(
        self,
        messages: list[SourceMessage],
        locate: messagefile._Locate | messagefile.Table,
        descriptors: list[int | None],
        bodies: ReadBodies,
    ) -> int:
        return readListedFilesPython(
            messages,
            locate,
            descriptors,
            messagefile.LARGE_MESSAGE,
            FILE_FLAGS,
            NOT_READ,
            bodies,
            bodies.facts,
        )

    def test_compiled(self) -> None:
        """
        Where the C extension is built, L{readListedFiles} is its.
        """
        if not compiled:
            raise SkipTest("the C extension imapmig.mail._octets is not built")
        self.assertIsNot(getattr(messagefile, "_readListed"), readListedFilesPython)

    def test_regular(self) -> None:
        """
        Regular files of their listed sizes, in either directory, are read
        in order, converted to CRLF, with the facts of their octets.
        """
        self.file("lf", b"a\nb\n")
        self.file("crlf", b"a\r\nb\r\n", 1)
        self.file("odd", b"\0\xe9\rz")
        self.file("long", b"x" * 70 + b"\n" + b"y\r\n" * 40 + b"\r", 1)
        self.file("caf\udce9", b"named in Latin-1\n", 0, os.fsdecode(b"caf\xe9"))
        long = b"x" * 70 + b"\r\n" + b"y\r\n" * 40 + b"\r"
        self.assertEqual(
            self.readBoth({"lf": 4, "crlf": 6, "odd": 4, "long": 192, "caf\udce9": 17}),
            (
                [b"a\r\nb\r\n", b"a\r\nb\r\n", b"\0\xe9\rz", long, b"named in Latin-1\r\n"],
                bytes((BARE_LF, 0, NUL | EIGHT_BIT | BARE_CR, BARE_LF | BARE_CR, BARE_LF)),
                0,
            ),
        )

    def test_notRead(self) -> None:
        """
        A file not listed, gone, of another size than listed, listed at 0
        octets or above L{LARGE_MESSAGE}, listed as something else than a
        regular file, or in a directory that is not open, is not read:
        L{NOT_READ} and L{UNKNOWN} in its place.
        """
        self.file("ok", b"ok\n")
        self.file("grew", b"0123456789")
        self.file("shrank", b"0123456789")
        self.file("empty", b"")
        self.file("gone", b"x")
        os.remove(os.path.join(self.directories[0], "gone"))
        self.file("irregular", b"x")
        self.located["irregular"] = (0, "irregular", object())
        self.file("closed", b"x", 1)
        self.descriptors[1] = None
        sizes = {"ok": 3, "unlisted": 5, "gone": 1, "grew": 9, "shrank": 11, "empty": 0}
        sizes.update({"large": LARGE_MESSAGE + 1, "irregular": 1, "closed": 1})
        bodies, facts, missed = self.readBoth(sizes)
        self.assertEqual(bodies, [b"ok\r\n"] + [NOT_READ] * 8)
        self.assertIs(bodies[1], NOT_READ)
        self.assertEqual(facts, bytes((BARE_LF,)) + bytes((UNKNOWN,)) * 8)
        self.assertEqual(missed, 8)

    def test_notRegular(self) -> None:
        """
        A FIFO (with or without a writer), a symbolic link or a directory
        where the listing saw a file is not read, without blocking or
        following the link.
        """
        directory = self.directories[0]
        os.mkfifo(os.path.join(directory, "fifo"))
        self.located["fifo"] = (0, "fifo", None)
        self.file("target", b"secret\n")
        os.symlink("target", os.path.join(directory, "link"))
        self.located["link"] = (0, "link", None)
        os.mkdir(os.path.join(directory, "sub"))
        self.located["sub"] = (0, "sub", None)
        sizes = {"fifo": 10, "link": 7, "sub": 7, "target": 7}
        self.assertEqual(self.readBoth(sizes)[2], 3)
        reader = os.open(os.path.join(directory, "fifo"), os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(os.path.join(directory, "fifo"), os.O_WRONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        self.addCleanup(os.close, writer)
        self.assertEqual(self.readBoth(sizes)[0][:3], [NOT_READ] * 3)

    def test_sizeNotListed(self) -> None:
        """
        A message listed at 0 octets (the listing did not learn its size)
        is read at the size its file's status gives, when a regular file
        of 1 to L{LARGE_MESSAGE} octets; not an empty one, a larger one or
        a FIFO.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 100)
        self.file("unknown", b"a\nb\n")
        self.file("empty", b"")
        self.file("large", b"x" * 101)
        os.mkfifo(os.path.join(self.directories[0], "fifo"))
        self.located["fifo"] = (0, "fifo", None)
        sizes = {"unknown": 0, "empty": 0, "large": 0, "fifo": 0}
        self.assertEqual(
            self.readBoth(sizes),
            (
                [b"a\r\nb\r\n", NOT_READ, NOT_READ, NOT_READ],
                bytes((BARE_LF, UNKNOWN, UNKNOWN, UNKNOWN)),
                3,
            ),
        )

    def test_sizeBeyondAnyFile(self) -> None:
        """
        A message listed at a size no C integer holds (a Maildir name's
        C{,S=} field of 20 digits or more, or below -2**63) is not read, as
        one listed above L{LARGE_MESSAGE}: L{NOT_READ}, not an
        L{OverflowError} that would fail the whole batch; the others are.
        """
        self.file("huge", b"h\n")
        self.file("negative", b"n\n")
        self.file("ok", b"ok\n")
        sizes = {"huge": 10**40, "ok": 3, "negative": -(2**70)}
        self.assertEqual(
            self.readBoth(sizes),
            ([NOT_READ, b"ok\r\n", NOT_READ], bytes((UNKNOWN, BARE_LF, UNKNOWN)), 2),
        )

    def test_appended(self) -> None:
        """
        The bodies are appended to those already there, and their facts
        after theirs.
        """
        self.file("m", b"m\n")
        bodies = ReadBodies()
        bodies.add(b"before", 0)
        message = SourceMessage("m", (), None, 2)
        self.assertEqual(readListedFiles([message], self.located.get, self.descriptors, bodies), 0)
        self.assertEqual((list(bodies), bytes(bodies.facts)), ([b"before", b"m\r\n"], b"\0\x08"))

    def test_tableOrder(self) -> None:
        """
        By a listing's L{Table}, the first directory holding a key wins
        (C{cur/} before C{new/}), a key listed as something else than a
        regular file is not read wherever it is, and a directory index
        beyond the descriptors is not read, as L{lookUp} finds them.
        """
        self.file("both", b"first\n")
        self.file("both", b"second\n", 1)
        self.file("odd", b"x\n", 1)
        names = ({"both": "both"}, {"both": "both", "odd": "odd"}, {"far": "both"})
        table: messagefile.Table = (names, {"odd": object()})
        messages = [SourceMessage(key, (), None, 6) for key in ("both", "far")]
        messages.append(SourceMessage("odd", (), None, 2))
        for implementation in (readListedFiles, self.readPython):
            bodies = ReadBodies()
            self.assertEqual(implementation(messages, table, self.descriptors, bodies), 2)
            self.assertEqual(list(bodies), [b"first\r\n", NOT_READ, NOT_READ])
        self.assertEqual(lookUp(table, "both"), (0, "both"))
        self.assertEqual(lookUp(table, "far"), (2, "both"))
        self.assertIsNone(lookUp(table, "odd"))
        self.assertIsNone(lookUp(table, "none"))

    def test_badTable(self) -> None:
        """
        A table that is not one (its parts of other types) is a
        L{TypeError} of the C extension, not a crash.
        """
        if not compiled:
            raise SkipTest("the C extension imapmig.mail._octets is not built")
        self.file("m", b"m\n")
        message = SourceMessage("m", (), None, 2)
        for table in [(), ({"m": "m"},), ([{"m": "m"}], {}), (({"m": "m"},), []), (("m",), {})]:
            self.assertRaises(
                TypeError,
                readListedFiles,
                [message],
                table,
                self.descriptors,
                ReadBodies(),
            )

    def test_keptBuffer(self) -> None:
        """
        Calls one after another, of files larger and smaller than the
        one before, and a call from the C{locate} of another (which then
        reads into a buffer of its own), read each file whole: the buffer
        kept from call to call holds no octet of another file.
        """
        sizes = [5, 70000, 3, 200000, 1, 131072, 131073]
        for n, size in enumerate(sizes):
            self.file(f"f{n}", bytes([65 + n]) * size)
        for n, size in enumerate(sizes):
            self.assertEqual(self.readBoth({f"f{n}": size})[0], [bytes([65 + n]) * size])
        inner: list[list[object]] = []

        def locate(key: str) -> tuple[int, str, object] | None:
            bodies = ReadBodies()
            readListedFiles([SourceMessage("f3", (), None, sizes[3])], self.located.get,
                            self.descriptors, bodies)  # fmt: skip
            inner.append(list(bodies))
            return self.located.get(key)

        bodies = ReadBodies()
        messages = [SourceMessage(f"f{n}", (), None, size) for n, size in enumerate(sizes)]
        self.assertEqual(readListedFiles(messages, locate, self.descriptors, bodies), 0)
        self.assertEqual(list(bodies), [bytes([65 + n]) * size for n, size in enumerate(sizes)])
        self.assertEqual(inner, [[b"D" * sizes[3]]] * len(sizes))


class LargeFileTests(SynchronousTestCase):
    """
    Very large files are not read into memory: they come back as a
    L{StreamedBody} on the open file.
    """

    def test_streamedSameAsToCRLF(self) -> None:
        """
        Above the large-file threshold, the streamed body has the length
        and, in slices of any size, the octets that L{toCRLF} gives, for
        bare-LF, CRLF and mixed files, with and without a final newline,
        whatever falls on a slice boundary.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 4)
        self.patch(messagefile, "READ_CHUNK", 7)
        rng = random.Random(5)
        path = self.mktemp()
        samples = [
            b"\n\nabc\ndef",
            b"a\r\nb\r\n" * 9,
            b"x\ny\r\nz\n" * 5,
            b"no newline at all here",
            b"\r" * 20 + b"\n" * 20,
            b"abc\r\r\n\n\r" * 7,
        ]
        for _ in range(20):
            lines = [rng.randbytes(rng.randrange(0, 40)) for _ in range(50)]
            samples.append(b"\n".join(lines))
        for data in samples:
            with open(path, "wb") as f:
                f.write(data)
            body = readMessageFile(path)
            assert isinstance(body, StreamedBody)
            expected = toCRLF(data)
            self.assertEqual(len(body), len(expected))
            for size in (1, 2, 3, 7, 64, 1 << 20):
                self.assertEqual(b"".join(body.slices(size)), expected)
            body.close()

    def test_renamedWhileQueued(self) -> None:
        """
        The file stays open: renamed after it was read (a flag change), it
        is still sent whole.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 16)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"line\n" * 10)
        body = readMessageFile(path)
        assert isinstance(body, StreamedBody)
        os.rename(path, path + ":2,S")
        self.assertEqual(b"".join(body.slices(8)), b"line\r\n" * 10)

    def test_changedWhileQueued(self) -> None:
        """
        A file whose content changed after it was read no longer gives the
        size announced: the slices raise OSError naming it, and never give
        more octets than announced.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 16)
        path = self.mktemp()
        for change in (b"line\n" * 12, b"line\n" * 8, b"l\ne\n" * 25):
            with open(path, "wb") as f:
                f.write(b"line\n" * 10)
            body = readMessageFile(path)
            assert isinstance(body, StreamedBody)
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(change)
            given = []
            with self.assertRaises(OSError) as caught:
                for piece in body.slices(8):
                    given.append(piece)
            self.assertIn("changed while being sent", str(caught.exception))
            self.assertIn(path, str(caught.exception))
            self.assertLessEqual(len(b"".join(given)), len(body))

    def test_closedWithTheBody(self) -> None:
        """
        The body owns the file descriptor: closing it (or dropping it)
        closes the file.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 16)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"x\n" * 20)
        before = len(os.listdir("/proc/self/fd"))
        body = readMessageFile(path)
        assert isinstance(body, StreamedBody)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before + 1)
        del body
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)

    def test_fileGrewSinceStat(self) -> None:
        """
        A file that grew between its fstat and its read is read to its end.
        """
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\n" * 100)
        realFstat = os.fstat

        class Shrunk:
            def __init__(self, fd: int) -> None:
                self.st_mode = realFstat(fd).st_mode
                self.st_size = realFstat(fd).st_size - 150

        self.patch(os, "fstat", Shrunk)
        self.assertEqual(readMessageFile(path), b"a\r\n" * 100)

    def test_listedSizeReadWithoutFstat(self) -> None:
        """
        Given the size the listing saw, a small file is read with no
        C{fstat}; a file that shrank since is read as it is now, after one
        C{fstat} that shows it is still a regular file.
        """
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\n" * 100)
        calls = []
        realFstat = os.fstat

        def countedFstat(fd: int) -> os.stat_result:
            calls.append(fd)
            return realFstat(fd)

        self.patch(os, "fstat", countedFstat)
        self.assertEqual(readMessageFile(path, 200), b"a\r\n" * 100)
        self.assertEqual(calls, [])
        self.assertEqual(readMessageFile(path, 5000), b"a\r\n" * 100)
        self.assertEqual(len(calls), 1)

    def test_grewSinceListed(self) -> None:
        """
        A file that grew since it was listed is read to its end; one that
        grew past the large-file threshold is streamed.
        """
        self.patch(messagefile, "LARGE_MESSAGE", 1000)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\n" * 300)
        self.assertEqual(readMessageFile(path, 10), b"a\r\n" * 300)
        with open(path, "wb") as f:
            f.write(b"b\n" * 600)
        body = readMessageFile(path, 10)
        assert isinstance(body, StreamedBody)
        self.assertEqual(b"".join(body.slices(64)), b"b\r\n" * 600)
        body.close()
