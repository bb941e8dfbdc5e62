# -*- test-case-name: tests.test_sources_local -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.local}: carried names, opening beneath a
source's directory, walking it, and what the local sources share.
"""

from __future__ import annotations

import errno
import gc
import os
import random
import stat
import subprocess
import sys
from datetime import datetime, timezone
from typing import Callable, Iterator

from twisted.trial.unittest import SynchronousTestCase

import imapmig.sources.local as local
from imapmig.errors import LeavesTree, SourceError
from imapmig.sources.local import (
    OpenTree,
    carriedName,
    fileKind,
    hasUndecodable,
    originalName,
)


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

    def test_settled(self) -> None:
        """
        L{local.settled} gives what a call returns as a fired Deferred, a
        L{SourceError} it raises as a failure, and raises anything else.
        """

        def refused() -> int:
            raise SourceError("gone")

        def broken() -> int:
            raise ZeroDivisionError()

        self.assertEqual(self.successResultOf(local.settled(lambda a: a + 1, 1)), 2)
        self.failureResultOf(local.settled(refused), SourceError)
        self.assertRaises(ZeroDivisionError, local.settled, broken)


class SizeAndMtimeTests(SynchronousTestCase):
    """
    L{local.sizeAndMtimePython}, the status the Python twin of the C scan
    takes (L{imapmig.sources._listing.Directory}): a listed file's C{st_size}
    and C{st_mtime}, exactly as C{os.stat} gives them without following a
    symbolic link.
    """

    def functions(self) -> list[Callable[[int, str], tuple[int, float] | None]]:
        """
        The function: the Python twin of the C scan's status
        (tests.test_sources_maildir_scan compares the two scans).
        """
        return [local.sizeAndMtimePython]

    def test_asStat(self) -> None:
        """
        A regular file, one whose name is not UTF-8, a symbolic link (its
        own size, not its target's), a directory, a FIFO: the size and the
        mtime (nanoseconds included, and before 1970) C{os.stat} gives;
        L{None} for a name that is not there.
        """
        directory = self.mktemp()
        os.makedirs(directory)
        names = ["1700000000.M1P2.host:2,S", "caf\udce9", "link", "sub", "fifo"]
        with open(os.path.join(directory, names[0]), "wb") as f:
            f.write(b"x" * 1234)
        with open(os.fsencode(os.path.join(directory, names[1])), "wb") as f:
            f.write(b"y" * 7)
        os.symlink(names[0] + "-and-more", os.path.join(directory, "link"))
        os.mkdir(os.path.join(directory, "sub"))
        os.mkfifo(os.path.join(directory, "fifo"))
        os.utime(os.path.join(directory, names[0]), ns=(0, 1_700_000_000_123_456_789))
        os.utime(os.fsencode(os.path.join(directory, names[1])), ns=(0, -86_400_987_654_321))
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        for function in self.functions():
            for name in names:
                status = os.stat(name, dir_fd=fd, follow_symlinks=False)
                self.assertEqual(
                    function(fd, name), (status.st_size, status.st_mtime), (function, name)
                )
            self.assertIsNone(function(fd, "gone"))
            self.assertIsNone(function(fd, "a\0b"))
            # A lone surrogate the file system encoding cannot take.
            self.assertIsNone(function(fd, "\ud800"))

    def test_maildirWithoutExtension(self) -> None:
        """
        The Maildir source's tests pass with the Python twin as with the C
        function: they are run here again in a process where
        L{imapmig.sources._listing} cannot be imported.
        """
        checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        script = (
            "import sys\n"
            "sys.modules['imapmig.sources._listing'] = None\n"
            "from imapmig.sources import local\n"
            "assert local.utcDatetime is local.utcDatetimePython\n"
            "from twisted.scripts.trial import run\n"
            "sys.argv = ['trial', 'tests.test_sources_maildir']\n"
            "run()\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=checkout,
            env=dict(os.environ, PYTHONPATH=checkout),
            capture_output=True,
            text=True,
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        self.assertIn("PASSED", result.stdout)


class UtcDatetimeTests(SynchronousTestCase):
    """
    L{local.utcDatetime}, in C and in Python (L{local.utcDatetimePython}):
    C{datetime.fromtimestamp(seconds, timezone.utc)}, its errors included.
    """

    def functions(self) -> list[Callable[[float], datetime]]:
        """
        The Python twin and the C extension's function (see
        L{SizeAndMtimeTests.functions}).
        """
        try:
            from imapmig.sources import _listing
        except ImportError:
            if os.environ.get("CI") == "true":
                raise AssertionError("imapmig.sources._listing is not built")
            return [local.utcDatetimePython]
        self.assertIs(local.utcDatetime, _listing.utcDatetime)
        return [local.utcDatetimePython, _listing.utcDatetime]

    def assertSame(self, seconds: float) -> None:
        """
        Each function gives what C{datetime.fromtimestamp} gives for
        C{seconds}, or raises the same error.
        """
        try:
            expected: object = datetime.fromtimestamp(seconds, timezone.utc)
        except (OverflowError, ValueError, OSError) as e:
            expected = type(e)
        for function in self.functions():
            try:
                got: object = function(seconds)
            except (OverflowError, ValueError, OSError) as e:
                got = type(e)
            self.assertEqual(got, expected, (function, seconds))
            if isinstance(got, datetime):
                self.assertIs(got.tzinfo, timezone.utc)

    def test_edges(self) -> None:
        """
        Whole seconds from 1970 to the end of 9999 (each month's and leap
        year's edges), microseconds rounded half to even, a fraction that
        rounds up to the next second (and out of year 9999), before 1970,
        and what no datetime holds.
        """
        for seconds in (
            0.0, 1.0, 59.0, 86399.0, 86400.0, 951782400.0, 951868800.0, 1106145284.0,
            4107542399.0, 4107542400.0, 253402300799.0, 253402300799.9999995,
            253402300799.9999996, 253402300800.0, 1e15, 1.0000005, 1.0000015,
            2.5e-7, 0.9999995, 1700000000.123456789, -0.0, -0.4e-6, -1.0,
            -86400.987654321, -62135596800.0, -1e15, float("inf"), float("-inf"),
            float("nan"),
        ):  # fmt: skip
            self.assertSame(seconds)

    def test_spread(self) -> None:
        """
        Every day from 1970 to 9999 (a random second and fraction in it)
        and random seconds with half-microsecond fractions.
        """
        rng = random.Random(31)
        for day in range(0, 2932897, 31):
            self.assertSame(day * 86400 + rng.randrange(86400) + rng.random())
        for _ in range(20000):
            self.assertSame(rng.randrange(4102444800) + rng.randrange(2000000) / 2e6)
