# -*- test-case-name: tests.test_sources_local -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.local}: carried names, opening beneath a
source's directory, and reading one message file.
"""

from __future__ import annotations

import errno
import gc
import os
import random
import stat
from typing import Iterator

from twisted.trial.unittest import SynchronousTestCase

import imapmig.sources.local as local
from imapmig.errors import LeavesTree, SourceError
from imapmig.mail.message import StreamedBody, UnreadableMessage, toCRLF
from imapmig.sources.local import (
    OpenTree,
    carriedName,
    fileKind,
    hasUndecodable,
    originalName,
    readListedFile,
    readMessageFile,
)
from tests.localfiles import makeSocket


class CarriedNameTests(SynchronousTestCase):
    """
    L{carriedName} and L{originalName}.
    """

    def test_unchanged(self) -> None:
        """
        Valid UTF-8 names without an ambiguous C{%} are carried as they
        are, C{%} followed by anything but C{25} or C{80}-C{FF} included.
        """
        names = ["INBOX", "Entwürfe", "送信済み", "100% sure", "%41", "%e9", "%7F", "a%", "%"]
        for name in names:
            self.assertIs(carriedName(name), name)
            self.assertEqual(originalName(name), name)

    def test_undecodable(self) -> None:
        """
        Each octet that is not valid UTF-8 is carried as C{%XX}, in upper
        case.
        """
        self.assertEqual(carriedName(os.fsdecode(b"caf\xe9")), "caf%E9")
        self.assertEqual(carriedName(os.fsdecode(b"\xff\xfe.x")), "%FF%FE.x")
        self.assertEqual(carriedName(os.fsdecode("Grüße \xe9".encode("utf-8"))), "Grüße \xe9")
        self.assertEqual(carriedName(os.fsdecode(b"a\xc3")), "a%C3")

    def test_ambiguousPercent(self) -> None:
        """
        A C{%} that would read as a carried octet, or as a carried C{%},
        is carried as C{%25}; so a valid name and an invalid one never give
        the same carried name.
        """
        self.assertEqual(carriedName("caf%E9"), "caf%25E9")
        self.assertEqual(carriedName("%25"), "%2525")
        self.assertEqual(carriedName(os.fsdecode(b"%E9\xe9")), "%25E9%E9")
        self.assertNotEqual(carriedName("caf%E9"), carriedName(os.fsdecode(b"caf\xe9")))

    def test_roundTrip(self) -> None:
        """
        L{originalName} undoes L{carriedName} for names of random octets
        (rich in C{%}, hexadecimal digits and octets above 0x7F), and the
        carried form is always valid UTF-8, so distinct names give distinct
        carried names.
        """
        rng = random.Random(15)
        alphabet = b"%%%25ABCDEF89abcdef0x.\xc3\xa9\xe9\xff\x80"
        seen: dict[str, bytes] = {}
        for _ in range(20000):
            raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 9)))
            name = os.fsdecode(raw)
            carried = carriedName(name)
            carried.encode("utf-8")
            self.assertEqual(os.fsencode(originalName(carried)), raw)
            self.assertEqual(seen.setdefault(carried, raw), raw)

    def test_hasUndecodable(self) -> None:
        """
        L{hasUndecodable} tells names with octets that are not UTF-8.
        """
        self.assertFalse(hasUndecodable("plain"))
        self.assertFalse(hasUndecodable("Grüße"))
        self.assertTrue(hasUndecodable(os.fsdecode(b"caf\xe9")))


class FileKindTests(SynchronousTestCase):
    """
    L{fileKind}.
    """

    def test_kinds(self) -> None:
        """
        Each file type has a name for messages.
        """
        self.assertEqual(fileKind(stat.S_IFIFO | 0o600), "FIFO")
        self.assertEqual(fileKind(stat.S_IFSOCK), "socket")
        self.assertEqual(fileKind(stat.S_IFCHR), "character device")
        self.assertEqual(fileKind(stat.S_IFBLK), "block device")
        self.assertEqual(fileKind(stat.S_IFDIR), "directory")
        self.assertEqual(fileKind(stat.S_IFREG), "regular file")
        self.assertEqual(fileKind(stat.S_IFLNK), "symbolic link")


class OpenTreeTests(SynchronousTestCase):
    """
    L{OpenTree}: opening beneath a root, following only the symbolic
    links that stay inside it.
    """

    def setUp(self) -> None:
        base = os.path.abspath(self.mktemp())
        self.root = os.path.join(base, "root")
        self.outside = os.path.join(base, "outside")
        os.makedirs(os.path.join(self.root, "a", "b"))
        os.makedirs(self.outside)
        for path, content in [
            (os.path.join(self.root, "a", "b", "file"), b"inside"),
            (os.path.join(self.outside, "secret"), b"secret"),
        ]:
            with open(path, "wb") as f:
                f.write(content)
        self.tree = OpenTree(self.root)
        self.addCleanup(self.tree.close)

    def read(self, relative: str) -> bytes:
        """
        The content of C{relative}, opened beneath the root.
        """
        fd = self.tree.open(relative)
        try:
            return os.read(fd, 100)
        finally:
            os.close(fd)

    def test_plain(self) -> None:
        """
        A path without links opens, level by level.
        """
        self.assertEqual(self.read("a/b/file"), b"inside")

    def test_linksInside(self) -> None:
        """
        Links to a file or a directory inside the root, relative or
        absolute, are followed.
        """
        os.symlink("b/file", os.path.join(self.root, "a", "toFile"))
        os.symlink(os.path.join(self.root, "a", "b"), os.path.join(self.root, "toDir"))
        self.assertEqual(self.read("a/toFile"), b"inside")
        self.assertEqual(self.read("toDir/file"), b"inside")
        self.assertEqual(self.tree.resolve("toDir/file"), "a/b/file")

    def test_linksOutside(self) -> None:
        """
        A link leading out of the root, as the file itself or as a
        directory on the way, or by C{..}, raises L{LeavesTree} with its
        target, and nothing outside is opened.
        """
        os.symlink(os.path.join(self.outside, "secret"), os.path.join(self.root, "toSecret"))
        os.symlink(self.outside, os.path.join(self.root, "a", "out"))
        os.symlink("../../outside/secret", os.path.join(self.root, "a", "dotdot"))
        for relative in ("toSecret", "a/out/secret", "a/dotdot"):
            with self.assertRaises(LeavesTree) as caught:
                self.tree.open(relative)
            self.assertEqual(caught.exception.target, os.path.join(self.outside, "secret"))
            self.assertEqual(caught.exception.path, relative)

    def test_loopAndNothing(self) -> None:
        """
        A link loop raises C{ELOOP}; a link to nothing, C{ENOENT}.
        """
        os.symlink("loop", os.path.join(self.root, "loop"))
        os.symlink("missing", os.path.join(self.root, "dangling"))
        with self.assertRaises(OSError) as caught:
            self.tree.open("loop")
        self.assertEqual(caught.exception.errno, errno.ELOOP)
        self.assertRaises(FileNotFoundError, self.tree.open, "dangling")

    def test_rootAndDotDot(self) -> None:
        """
        C{""} opens the root itself; a path with a C{.} or C{..} level is
        refused.
        """
        fd = self.tree.open("", os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.assertEqual(os.fstat(fd).st_ino, os.stat(self.root).st_ino)
        finally:
            os.close(fd)
        for relative in ("..", "a/../..", "./a"):
            with self.assertRaises(OSError) as caught:
                self.tree.open(relative)
            self.assertEqual(caught.exception.errno, errno.EINVAL)

    def test_swappedAfterResolving(self) -> None:
        """
        A directory swapped for a link out of the root between the
        resolution of a link and the opening of its target is refused
        (C{ELOOP}), not followed: the target is opened without following
        any link.
        """
        os.symlink("a/b/file", os.path.join(self.root, "link"))
        realResolve = self.tree.resolve

        def resolveThenSwap(relative: str) -> str:
            resolved = realResolve(relative)
            b = os.path.join(self.root, "a", "b")
            os.rename(b, b + ".moved")
            os.symlink(self.outside, b)
            os.symlink(os.path.join(self.outside, "secret"), os.path.join(self.outside, "file"))
            return resolved

        self.patch(self.tree, "resolve", resolveThenSwap)
        with self.assertRaises(OSError) as caught:
            self.tree.open("link")
        self.assertIn(caught.exception.errno, (errno.ELOOP, errno.ENOTDIR))

    def test_noDescriptorLeak(self) -> None:
        """
        Opening, successful or not, leaves only what it returns open.
        """
        os.symlink(self.outside, os.path.join(self.root, "a", "out"))
        # Whatever earlier tests left for the collector to close is closed
        # now, not while descriptors are being counted.
        gc.collect()
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            os.close(self.tree.open("a/b/file"))
            self.assertRaises(LeavesTree, self.tree.open, "a/out/secret")
            self.assertRaises(FileNotFoundError, self.tree.open, "a/b/missing")
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)


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
        (and one already in CRLF comes back as it is).
        """
        self.write("m", b"a\nb\n")
        self.write("crlf", b"a\r\nb\r\n")
        self.assertEqual(readListedFile("m", 4, self.fd), b"a\r\nb\r\n")
        self.assertEqual(readListedFile("crlf", 6, self.fd), b"a\r\nb\r\n")

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
        self.patch(local, "LARGE_MESSAGE", 4)
        self.patch(local, "READ_CHUNK", 7)
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
        self.patch(local, "LARGE_MESSAGE", 16)
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
        self.patch(local, "LARGE_MESSAGE", 16)
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
        self.patch(local, "LARGE_MESSAGE", 16)
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
        self.patch(local, "LARGE_MESSAGE", 1000)
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


class EntryAndWalkTests(SynchronousTestCase):
    """
    What the local sources share about the entries beneath their root:
    L{local.followEntry}, L{local.walkTree}, L{local.openProblem}.
    """

    def setUp(self) -> None:
        base = os.path.abspath(self.mktemp())
        self.root = os.path.join(base, "root")
        self.outside = os.path.join(base, "outside")
        os.makedirs(os.path.join(self.root, "d", "e"))
        os.makedirs(self.outside)
        for path in (
            os.path.join(self.root, "d", "file"),
            os.path.join(self.root, "d", "e", "deep"),
            os.path.join(self.root, ".hidden"),
            os.path.join(self.outside, "secret"),
        ):
            with open(path, "wb") as f:
                f.write(b"x")
        self.tree = OpenTree(self.root)
        self.addCleanup(self.tree.close)

    def entry(self, name: str) -> os.DirEntry[str]:
        """
        The entry of the root called C{name}.
        """
        with os.scandir(self.root) as entries:
            [found] = [e for e in entries if e.name == name]
        return found

    def follow(self, name: str) -> local.Irregular:
        """
        What L{local.followEntry} says of the root's entry C{name}.
        """
        return local.followEntry(self.tree, name, "shown/" + name, self.entry(name))

    def test_linkToRegularFile(self) -> None:
        """
        A symbolic link to a regular file inside the root is read through:
        no reason, its target relative to the root and the target's status.
        """
        os.symlink("d/file", os.path.join(self.root, "link"))
        found = self.follow("link")
        self.assertEqual((found.reason, found.target, found.toDirectory), (None, "d/file", False))
        assert found.status is not None
        self.assertEqual(found.status.st_size, 1)

    def test_notRead(self) -> None:
        """
        A FIFO, a link leading out of the root, a link to nothing and a
        link to a directory inside the root are not read, each with its
        reason; only the last is marked as leading to a directory.
        """
        os.mkfifo(os.path.join(self.root, "fifo"))
        os.symlink(os.path.join(self.outside, "secret"), os.path.join(self.root, "out"))
        os.symlink("missing", os.path.join(self.root, "dangling"))
        os.symlink("d", os.path.join(self.root, "toDir"))
        secret = os.path.join(self.outside, "secret")
        expected = {
            "fifo": ("not a regular file: FIFO: shown/fifo", False),
            "out": (
                "symbolic link leading out of the source directory, not followed:"
                f" shown/out -> {secret}",
                False,
            ),
            "dangling": ("symbolic link to nothing: shown/dangling", False),
            "toDir": ("not a regular file: symbolic link to a directory: shown/toDir", True),
        }
        for name, (reason, toDirectory) in expected.items():
            found = self.follow(name)
            self.assertEqual(
                (found.reason, found.toDirectory, found.status), (reason, toDirectory, None)
            )

    def test_gone(self) -> None:
        """
        An entry gone since the directory was read raises
        L{FileNotFoundError}.
        """
        os.mkfifo(os.path.join(self.root, "fifo"))
        entry = self.entry("fifo")
        os.unlink(os.path.join(self.root, "fifo"))
        self.assertRaises(FileNotFoundError, local.followEntry, self.tree, "fifo", "fifo", entry)

    def test_walk(self) -> None:
        """
        L{local.walkTree} visits every entry but directories and dotfiles,
        depth first, with what C{descend} made of its directory's names.
        """
        visited = []

        def descend(name: str, path: tuple[str, ...]) -> tuple[str, ...]:
            return path + (name,)

        def visit(entry: os.DirEntry[str], relative: str, path: tuple[str, ...]) -> None:
            visited.append((entry.name, relative, path))

        top: tuple[str, ...] = ()
        local.walkTree(self.tree, top, descend, visit)
        self.assertEqual(
            sorted(visited),
            [("deep", "d/e/deep", ("d", "e")), ("file", "d/file", ("d",))],
        )

    def test_walkUnlistable(self) -> None:
        """
        A directory that cannot be listed fails the walk with
        L{SourceError} naming it.
        """
        unlistable = os.path.join(self.root, "d", "e")
        realScandir = os.scandir

        def scandir(path: str) -> Iterator[os.DirEntry[str]]:
            if path == unlistable:
                raise PermissionError(errno.EACCES, "Permission denied")
            return realScandir(path)

        self.patch(os, "scandir", scandir)
        with self.assertRaises(SourceError) as caught:
            local.walkTree(self.tree, None, lambda name, state: state, lambda *args: None)
        self.assertEqual(str(caught.exception), f"cannot list {unlistable}: Permission denied")

    def test_openProblem(self) -> None:
        """
        Why a file cannot be opened: what is said of a missing file and of
        other errors can be chosen.
        """
        missing = FileNotFoundError(errno.ENOENT, "No such file")
        other = OSError(errno.EIO, "Input/output error")
        self.assertEqual(
            local.openProblem("/m", missing, "no such mbox file"), "no such mbox file: /m"
        )
        self.assertEqual(
            local.openProblem("/m", other, other="cannot open the mbox file"),
            "cannot open the mbox file /m: Input/output error",
        )
        self.assertEqual(
            local.openProblem("/m", LeavesTree("m", "/elsewhere")),
            "symbolic link leading out of the source directory, not followed: /m -> /elsewhere",
        )


class SharedTests(SynchronousTestCase):
    """
    L{local.Memo}, L{local.localFolder} and L{local.inboxFirst}.
    """

    def test_memo(self) -> None:
        """
        A L{local.Memo} works each value out once.
        """
        calls = []

        def double(n: int) -> int:
            calls.append(n)
            return 2 * n

        memo = local.Memo(double)
        self.assertEqual([memo[1], memo[2], memo[1]], [2, 4, 2])
        self.assertEqual(calls, [1, 2])

    def test_folders(self) -> None:
        """
        A top-level folder with a well-known name carries its SPECIAL-USE
        attribute; folders are sorted INBOX first, then by path.
        """
        folders = [
            local.localFolder(("Sent Items",), "s"),
            local.localFolder(("A", "Sent"), "as"),
            local.localFolder(("INBOX",), ""),
            local.localFolder(("A",), "a"),
        ]
        self.assertEqual(
            [(f.key, f.specialUse) for f in local.inboxFirst(folders)],
            [("", None), ("a", None), ("as", None), ("s", "\\Sent")],
        )
