# -*- test-case-name: tests.test_sources_maildir_scan -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the scan of a Maildir folder (L{imapmig.sources.maildir.scan}):
the C extension's C{Directory} and C{rowsOf} against their Python twins
(L{DirectoryPython}, C{_rowsPython}), on folders holding every kind of
entry a listing meets.
"""

from __future__ import annotations

import gc
import os
import random
import sys

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.sources import maildir
from imapmig.sources.local import Irregular, carriedName
from imapmig.sources.maildir import MaildirSource, scan
from imapmig.sources.maildir.names import flagsOf
from imapmig.sources.maildir.opened import OpenFolder
from tests.localfiles import makeSocket
from tests.test_sources_maildir import deliver, makeFolder

INBOX = SourceFolder(path=("INBOX",), key="")


def builtOrSkip() -> None:
    """
    Skip where the C extension was not built (fail on CI, which builds it).
    """
    if scan.Directory is scan.DirectoryPython:
        if os.environ.get("CI") == "true":
            raise AssertionError("imapmig.sources._listing is not built")
        raise SkipTest("imapmig.sources._listing is not built")


def oddFolder(testCase: SynchronousTestCase, directory: str) -> str:
    """
    A Maildir folder holding every kind of entry: names with and without
    C{,S=} and info (C{:2,}, C{!2,}, C{;2,}), dotfiles, a subdirectory, a
    FIFO, a socket, symbolic links (to a file inside, to nothing, to a
    directory), unique parts shared within and across C{cur/} and
    C{new/}, names holding a C{%}, not ASCII or not UTF-8.

    @return: C{directory}.
    """
    makeFolder(directory)
    cur, new = os.path.join(directory, "cur"), os.path.join(directory, "new")
    for subdir, name in [
        ("cur", "1700000000.M1P1.host,S=17:2,S"),
        ("cur", "1700000001.M1P1.host:2,FRS"),
        ("cur", "1700000002.M1P1.host"),
        ("cur", "nodate.host,S=5:2,T"),
        ("cur", "nodate-nosize:2,"),
        ("cur", "1700000003.bang!2,S"),
        ("cur", "1700000004.semi;2,R"),
        ("cur", "100%25:2,S"),
        ("cur", "caf\u00e9.1700000005:2,S"),
        ("cur", "dup:2,S"),
        ("new", "dup"),
        ("new", "dup:2,T"),
        ("new", "1700000006.M2P2.host"),
        ("new", "1700000007.x,S=99999999999999999999999"),
        ("cur", ".hidden:2,S"),
        ("new", ".hidden"),
    ]:
        deliver(directory, subdir, name, mtime=1600000000.25)
    # Not UTF-8: the name as bytes.
    with open(os.path.join(os.fsencode(cur), b"1700000008.caf\xe9:2,S"), "wb") as f:
        f.write(b"Subject: x\n\n8-bit name\n")
    os.mkdir(os.path.join(cur, "a-directory:2,S"))
    os.mkdir(os.path.join(cur, ".a-dot-directory"))
    os.mkfifo(os.path.join(new, "1700000009.fifo"))
    makeSocket(testCase, os.path.join(new, "1700000010.socket"))
    os.symlink("1700000001.M1P1.host:2,FRS", os.path.join(cur, "1700000011.link:2,S"))
    os.symlink("nowhere", os.path.join(cur, "1700000012.dangling:2,S"))
    os.symlink("../new", os.path.join(cur, "1700000013.to-directory"))
    return directory


class DirectoryTests(SynchronousTestCase):
    """
    The C extension's C{Directory} (a turn of a folder's scan in one call)
    gives what L{DirectoryPython} gives.
    """

    def setUp(self) -> None:
        builtOrSkip()

    def scanned(self, directory: str, turn: int, status: bool, python: bool) -> tuple[list[scan.Scanned], int]:
        """
        Scan the folder C{directory} in turns of C{turn} entries.

        @param python: whether with the Python twin.
        @return: the files, sorted by key, and how many turns.
        """
        if python:
            self.patch(scan, "Directory", scan.DirectoryPython)
        root, relative = os.path.split(directory)
        scanned: list[scan.Scanned] = []
        with OpenFolder(root, relative) as opened:
            turns = 1 + sum(1 for _ in scan.scanInTurns(opened, scanned, turn, status))
        if python:
            self.patch(scan, "Directory", scan.Directory)
        return sorted(scanned, key=lambda s: s[0]), turns

    def test_sameAsPython(self) -> None:
        """
        Every kind of entry, scanned whole or in turns, with or without
        the status of the files whose names lack a date or a size, gives
        the same files with the same keys (duplicates keyed apart), dates
        and sizes in C as in Python; and so the listing gives the same
        messages.
        """
        directory = oddFolder(self, self.mktemp())
        cPart, _ = self.scanned(directory, sys.maxsize, True, python=False)
        self.assertEqual(
            [s[0] for s in cPart],
            sorted(
                [
                    "1700000000.M1P1.host,S=17", "1700000001.M1P1.host", "1700000002.M1P1.host",
                    "nodate.host,S=5", "nodate-nosize", "1700000003.bang", "1700000004.semi",
                    "100%2525", "caf\u00e9.1700000005", "dup", "dup/new", "dup/new/dup:2,T",
                    "1700000006.M2P2.host", "1700000007.x,S=99999999999999999999999",
                    "1700000008.caf%E9", "a-directory", "1700000009.fifo", "1700000010.socket",
                    "1700000011.link", "1700000012.dangling", "1700000013.to-directory",
                ]
            ),
        )  # fmt: skip
        byKey = {s[0]: s for s in cPart}
        self.assertEqual(byKey["1700000000.M1P1.host,S=17"][6:], (1700000000.0, 17))
        self.assertEqual(byKey["1700000002.M1P1.host"][6:], (1700000002.0, 17))
        self.assertEqual(byKey["nodate-nosize"][6:], (1600000000.25, 17))
        self.assertEqual(byKey["1700000007.x,S=99999999999999999999999"][6:], (1700000007.0, 17))
        self.assertEqual(byKey["1700000011.link"][6:], (1700000011.0, 17))
        self.assertEqual(byKey["1700000009.fifo"][6:], (1700000009.0, None))
        self.assertEqual(byKey["dup/new"][3], "dup")
        for status in (True, False):
            for turn in (1, 2, 3, 7, 2000, sys.maxsize):
                self.assertEqual(
                    self.scanned(directory, turn, status, python=False),
                    self.scanned(directory, turn, status, python=True),
                    (turn, status),
                )
        noStatus, _ = self.scanned(directory, sys.maxsize, False, python=False)
        self.assertEqual({s[0]: s[6:] for s in noStatus}["1700000002.M1P1.host"], (1700000002.0, None))

    def test_listingSameAsPython(self) -> None:
        """
        The listing of the folder is the same with the scan and the rows
        in C as in Python.
        """
        root = oddFolder(self, self.mktemp())
        inC = self.successResultOf(MaildirSource(root).listMessages(INBOX))
        self.patch(scan, "Directory", scan.DirectoryPython)
        self.patch(maildir, "_rowsOf", maildir._rowsPython)
        inPython = self.successResultOf(MaildirSource(root).listMessages(INBOX))
        self.assertEqual(inC, inPython)
        self.assertEqual(len(inC), 21)

    def test_empty(self) -> None:
        """
        An empty subdirectory gives nothing, read at once.
        """
        directory = makeFolder(self.mktemp())
        for python in (False, True):
            self.assertEqual(self.scanned(directory, 5, True, python), ([], 1))

    def test_vanished(self) -> None:
        """
        A file removed between the directory's reading and its status is
        listed with what its name says (no date nor size from a status),
        in C as in Python.
        """
        directory = makeFolder(self.mktemp())
        deliver(directory, "cur", "1700000000.gone%:2,S")
        deliver(directory, "cur", "nodate.gone%:2,S")
        cur = os.path.join(directory, "cur")

        def removing(unique: str) -> str:
            # Called as a name's unique part is carried: after the
            # directory's reading, before the status.
            for name in os.listdir(cur):
                os.unlink(os.path.join(cur, name))
            return carriedName(unique)

        results = []
        for directoryType in (scan.Directory, scan.DirectoryPython):
            for name in ("1700000000.gone%:2,S", "nodate.gone%:2,S"):
                deliver(directory, "cur", name)
            fd = os.open(cur, os.O_RDONLY | os.O_DIRECTORY)
            try:
                first: dict[str, scan.Scanned] = {}
                with directoryType(fd) as reader:
                    read = reader.scan(0, 10, removing, lambda name, link: None, first, {}, True)
            finally:
                os.close(fd)
            results.append((read, sorted(first.values())))
        self.assertEqual(results[0], results[1])
        self.assertEqual(
            results[0][1],
            [
                ("1700000000.gone%", "1700000000.gone%", 0, "1700000000.gone%:2,S", "S", None, 1700000000.0, None),
                ("nodate.gone%", "nodate.gone%", 0, "nodate.gone%:2,S", "S", None, None, None),
            ],
        )  # fmt: skip

    def test_closed(self) -> None:
        """
        A closed C{Directory} refuses to scan; closing it again does
        nothing.
        """
        fd = os.open(makeFolder(self.mktemp()), os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        reader = scan.Directory(fd)
        reader.close()
        reader.close()
        self.assertRaises(ValueError, reader.scan, 0, 1, carriedName, lambda n, l: None, {}, {}, True)
        self.assertRaises(OSError, scan.Directory, -1)

    def test_notADirectory(self) -> None:
        """
        A descriptor of something else than a directory is refused, in C as
        in Python.
        """
        path = self.mktemp()
        with open(path, "wb"):
            pass
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        for directoryType in (scan.Directory, scan.DirectoryPython):
            self.assertRaises(NotADirectoryError, directoryType, fd)

    def test_errorsPropagate(self) -> None:
        """
        An error of the callbacks propagates, the entries of the turn
        released.
        """
        directory = makeFolder(self.mktemp())
        deliver(directory, "cur", "100%:2,S")
        os.mkfifo(os.path.join(directory, "cur", "fifo"))
        fd = os.open(os.path.join(directory, "cur"), os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)

        def failing(*args: object) -> str:
            raise ZeroDivisionError()

        for carry, classify in ((failing, lambda n, l: None), (carriedName, failing)):
            with scan.Directory(fd) as reader:
                self.assertRaises(ZeroDivisionError, reader.scan, 0, 10, carry, classify, {}, {}, True)


class RowsOfTests(SynchronousTestCase):
    """
    The C extension's C{rowsOf} gives what C{_rowsPython} gives.
    """

    def test_sameAsPython(self) -> None:
        """
        Scanned files with and without dates, sizes (0 included) and
        letters give the same rows, and the same flags kept, in C as in
        Python.
        """
        if maildir._rowsOf is maildir._rowsPython:
            builtOrSkip()
        rng = random.Random(31)
        keywords = {"a": "$Label1", "b": "Work"}
        scanned: list[scan.Scanned] = []
        for n in range(2000):
            letters = rng.choice([None, "", "S", "FS", "ab", "Sa", "P", "RSTab"])
            when = rng.choice([None, 0.0, 1700000000.0 + n, -5.5])
            size = rng.choice([None, 0, n, 2**70])
            scanned.append((f"k{n}", f"k{n}", n % 2, f"k{n}:2,{letters}", letters, None, when, size))
        flagsC: dict[str | None, tuple[str, ...]] = {"S": ("\\Seen",)}
        flagsPython = dict(flagsC)
        self.assertEqual(
            maildir._rowsOf(scanned, flagsC, flagsOf, keywords),
            maildir._rowsPython(scanned, flagsPython, flagsOf, keywords),
        )
        self.assertEqual(flagsC, flagsPython)
        self.assertEqual(
            maildir._rowsOf(scanned[:1], {}, flagsOf, keywords)[0][0],
            maildir._rowsPython(scanned[:1], {}, flagsOf, keywords)[0][0],
        )

    def test_badScanned(self) -> None:
        """
        Scanned files that are not 8-tuples are refused.
        """
        if maildir._rowsOf is maildir._rowsPython:
            builtOrSkip()
        for scanned in ([("k", "k", 0, "k", None, None)], [None]):
            self.assertRaises(TypeError, maildir._rowsOf, scanned, {}, flagsOf, {})


class DatesRepeatTests(SynchronousTestCase):
    """
    The C extension's C{datesRepeat} (whether a run sorted by date must be
    sorted again as tuples) says what C{_datesRepeatPython} says.
    """

    def test_sameAsPython(self) -> None:
        """
        Empty, one row, distinct dates, a repeat at the start, the middle
        or the end, undated rows (minus infinity) and negative dates give
        the same answer in C as in Python.
        """
        if maildir._datesRepeat is maildir._datesRepeatPython:
            builtOrSkip()
        inf = float("-inf")
        runs = [[], [1.0], [1.0, 2.0, 3.0], [1.0, 1.0, 3.0], [1.0, 2.0, 2.0], [inf, inf], [inf, 0.0], [-5.5, -5.5, 0.0]]
        rng = random.Random(31)
        runs += [sorted(float(rng.randrange(50)) for _ in range(rng.randrange(12))) for _ in range(500)]
        for dates in runs:
            noFlags: tuple[str, ...] = ()
            rows = [(date, f"k{n}", noFlags, 0) for n, date in enumerate(dates)]
            self.assertEqual(maildir._datesRepeat(rows), maildir._datesRepeatPython(rows), dates)
        self.assertTrue(maildir._datesRepeat([(1.0, "a", ("\\Seen",), 0), (1.0, "b", ("\\Seen",), 0)]))
        self.assertRaises(TypeError, maildir._datesRepeat, [(1, "a", (), 0)])
        self.assertRaises(TypeError, maildir._datesRepeat, [()])
        self.assertRaises(TypeError, maildir._datesRepeat, ((1.0,),))


class AddFilesTests(SynchronousTestCase):
    """
    The C extension's C{addFiles} (L{scan.FolderFiles.add}) does what
    L{scan.addFilesPython} does.
    """

    def test_sameAsPython(self) -> None:
        """
        Files of both subdirectories, regular or not, keyed apart or not,
        are put where the Python twin puts them.
        """
        if scan.addFiles is scan.addFilesPython:
            builtOrSkip()
        irregular = Irregular("a FIFO")
        scanned: list[scan.Scanned] = [
            (f"k{n}", f"k{n}" if n % 5 else "k0", n % 2, f"k{n}:2,S", "S", irregular if n % 7 == 0 else None, None, n)
            for n in range(500)
        ]  # fmt: skip
        inC: tuple[tuple[dict[str, str], ...], dict[str, Irregular]] = (({"old": "x"}, {}), {})
        inPython: tuple[tuple[dict[str, str], ...], dict[str, Irregular]] = (({"old": "x"}, {}), {})
        scan.addFiles(scanned, *inC)
        scan.addFilesPython(scanned, *inPython)
        self.assertEqual(inC, inPython)
        self.assertEqual(len(inC[0][1]), 250)
        self.assertEqual(len(inC[1]), 72)

    def test_refused(self) -> None:
        """
        What is not a scanned file, or names a subdirectory that is not
        there, is refused.
        """
        if scan.addFiles is scan.addFilesPython:
            builtOrSkip()
        self.assertRaises(TypeError, scan.addFiles, [("k", "k", 0)], ({},), {})
        self.assertRaises(TypeError, scan.addFiles, [None], ({},), {})
        bad: scan.Scanned = ("k", "k", 2, "k", None, None, None, None)
        self.assertRaises(ValueError, scan.addFiles, [bad], ({}, {}), {})
        self.assertRaises(ValueError, scan.addFiles, [bad[:2] + (-1,) + bad[3:]], ({}, {}), {})


class UntrackedTests(SynchronousTestCase):
    """
    What the C extension makes of a regular file is left out of the cyclic
    garbage collector's lists (no cycle can go through strings and
    numbers).
    """

    def test_untracked(self) -> None:
        """
        A regular file's scanned tuple and its row are not tracked; an
        irregular entry's tuple is.
        """
        if scan.scannedOf is scan.scannedOfPython:
            builtOrSkip()
        regular = scan.scannedOf("1700000000.x,S=3:2,S", 0, None, carriedName)
        assert regular is not None
        self.assertFalse(gc.is_tracked(regular))
        irregular = scan.scannedOf("1700000000.x:2,S", 0, Irregular("a FIFO"), carriedName)
        self.assertTrue(gc.is_tracked(irregular))
        flags: dict[str | None, tuple[str, ...]] = {"S": ("\\Seen",)}
        gc.collect()
        [row] = maildir._rowsOf([regular], flags, flagsOf, {})
        self.assertFalse(gc.is_tracked(row))
        self.assertEqual(row, (1700000000.0, "1700000000.x,S=3", ("\\Seen",), 3))


# Keep the imports used (SourceMessage for the listing's type).
_ = SourceMessage
