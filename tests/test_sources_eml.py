# -*- test-case-name: tests.test_sources_eml -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.eml}, against directory trees built by hand in
a temporary directory.
"""

from __future__ import annotations

import os
from typing import Sequence

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    utcFromTimestamp,
)
from imapmig.mail.octets import BARE_CR, BARE_LF, EIGHT_BIT, NUL, UNKNOWN
from imapmig.sources import IMessageSource
from imapmig.sources.eml import EmlDirectorySource
from tests.localfiles import describeUnprivileged, makeSocket, makeUnreadable

FOLDER = ("Archive", "2019")


def write(
    root: str, relative: str, body: bytes = b"Subject: x\n\nbody\n", mtime: float | None = None
) -> str:
    """
    Write a file at C{relative} (with C{/} separators) under C{root},
    creating its directories.

    @return: the file's path.
    """
    path = os.path.join(root, *relative.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


class EmlDirectorySourceTests(SynchronousTestCase):
    """
    L{EmlDirectorySource}.
    """

    def directory(self) -> str:
        """
        A fresh empty directory.
        """
        root: str = self.mktemp()
        os.makedirs(root)
        return root

    def messages(self, source: EmlDirectorySource) -> list[SourceMessage]:
        """
        The messages C{source} lists in its folder.
        """
        messages = self.successResultOf(source.listMessages(source.folder))
        return list(messages)

    def bodies(
        self, source: EmlDirectorySource, messages: Sequence[SourceMessage]
    ) -> list[MessageBody]:
        """
        The bodies C{source} reads for C{messages}.
        """
        bodies = self.successResultOf(source.readBodies(source.folder, messages))
        return list(bodies)

    def test_interface(self) -> None:
        """
        L{EmlDirectorySource} provides L{IMessageSource}.
        """
        self.assertTrue(verifyObject(IMessageSource, EmlDirectorySource(self.directory(), FOLDER)))

    def test_factsCarried(self) -> None:
        """
        The bodies come with the facts of their octets, found as they were
        read (L{ReadBodies}); a file that is gone has none.
        """
        root = self.directory()
        write(root, "a.eml", b"A: 1\n\nx\n", mtime=1)
        write(root, "b.eml", b"A: 2\r\n\r\n\0\rz\r\n", mtime=2)
        write(root, "c.eml", "A: é\r\n\r\n".encode(), mtime=3)
        gone = write(root, "d.eml", mtime=4)
        source = EmlDirectorySource(root, FOLDER)
        messages = self.messages(source)
        os.unlink(gone)
        bodies = self.successResultOf(source.readBodies(source.folder, messages))
        assert isinstance(bodies, ReadBodies)
        self.assertEqual(list(bodies.facts), [BARE_LF, NUL | BARE_CR, EIGHT_BIT, UNKNOWN])
        self.assertEqual(bodies[0], b"A: 1\r\n\r\nx\r\n")

    def test_oneFolder(self) -> None:
        """
        The source has one folder, with the path it was given and key C{""}.
        """
        folders = self.successResultOf(EmlDirectorySource(self.directory(), FOLDER).listFolders())
        self.assertEqual(list(folders), [SourceFolder(path=FOLDER, key="")])

    def test_missing(self) -> None:
        """
        A path that does not exist fails with L{SourceError} naming it, on
        listing folders and messages alike.
        """
        root = self.mktemp()
        source = EmlDirectorySource(root, FOLDER)
        for d in (source.listFolders(), source.listMessages(source.folder)):
            failure = self.failureResultOf(d, SourceError)
            self.assertIn(root, str(failure.value))

    def test_notADirectory(self) -> None:
        """
        A path that is a file fails with L{SourceError} naming it.
        """
        root = self.mktemp()
        with open(root, "wb") as f:
            f.write(b"x")
        failure = self.failureResultOf(EmlDirectorySource(root, FOLDER).listFolders(), SourceError)
        self.assertIn(root, str(failure.value))

    def test_recursionAndOrder(self) -> None:
        """
        Every C{.eml} file (suffix in any case) at any depth is a message,
        keyed by its relative path with C{/} separators and sorted by it;
        other files, directories named C{*.eml}, and names starting with
        C{.} (AppleDouble C{._x.eml}, hidden directories) are not.
        """
        root = self.directory()
        for relative in (
            "z.eml",
            "b/d/e.eml",
            "a.eml",
            "b/c.EML",
            "b/x.Eml",
            "notes.txt",
            "b/message.eml.bak",
            "._a.eml",
            ".Trash-1000/files/gone.eml",
            "b/.hidden.eml",
        ):
            write(root, relative)
        os.makedirs(os.path.join(root, "dir.eml"))
        self.assertEqual(
            [m.key for m in self.messages(EmlDirectorySource(root, FOLDER))],
            ["a.eml", "b/c.EML", "b/d/e.eml", "b/x.Eml", "z.eml"],
        )

    def test_description(self) -> None:
        """
        Messages have no flags, the file's mtime as INTERNALDATE (aware,
        UTC) and the file's size.
        """
        root = self.directory()
        write(root, "a.eml", b"12345\n", mtime=1500000000)
        self.assertEqual(
            self.messages(EmlDirectorySource(root, FOLDER)),
            [
                SourceMessage(
                    key="a.eml", flags=(), internalDate=utcFromTimestamp(1500000000), size=6
                )
            ],
        )

    def test_empty(self) -> None:
        """
        A directory without C{.eml} files has no messages.
        """
        self.assertEqual(self.messages(EmlDirectorySource(self.directory(), FOLDER)), [])

    def test_nonUTF8Name(self) -> None:
        """
        A file name that is not UTF-8 gives a key with each undecodable
        octet carried as C{%XX}, and the file is read through that key, by
        this instance and by a fresh one.
        """
        root = self.directory()
        write(root, os.fsdecode(b"caf\xe9/m.eml"), b"x\n")
        source = EmlDirectorySource(root, FOLDER)
        [message] = self.messages(source)
        self.assertEqual(message.key, "caf%E9/m.eml")
        self.assertEqual(self.bodies(source, [message]), [b"x\r\n"])
        self.assertEqual(self.bodies(EmlDirectorySource(root, FOLDER), [message]), [b"x\r\n"])

    def test_bodies(self) -> None:
        """
        Bodies come in the order asked for, with bare LF turned into CRLF.
        """
        root = self.directory()
        write(root, "a.eml", b"Subject: a\n\nline\n")
        write(root, "sub/b.eml", b"Subject: b\r\n\r\nline\r\n")
        source = EmlDirectorySource(root, FOLDER)
        messages = self.messages(source)
        self.assertEqual(
            self.bodies(source, messages[::-1]),
            [b"Subject: b\r\n\r\nline\r\n", b"Subject: a\r\n\r\nline\r\n"],
        )

    def test_withoutListing(self) -> None:
        """
        Bodies can be read for messages listed by another source instance
        (as after a restart).
        """
        root = self.directory()
        write(root, "sub/a.eml", b"a\n")
        messages = self.messages(EmlDirectorySource(root, FOLDER))
        self.assertEqual(self.bodies(EmlDirectorySource(root, FOLDER), messages), [b"a\r\n"])

    def test_badKey(self) -> None:
        """
        A key that cannot name a file under the directory is an
        L{UnreadableMessage}, and nothing outside the directory is read.
        """
        root = self.directory()
        write(root, "a.eml")
        source = EmlDirectorySource(os.path.join(root, "sub"), FOLDER)
        message = SourceMessage(key="../a.eml", flags=(), internalDate=None, size=1)
        [body] = self.bodies(source, [message])
        self.assertIsInstance(body, UnreadableMessage)

    def test_vanished(self) -> None:
        """
        A file deleted between listing and reading is an
        L{UnreadableMessage} naming it; the others are still read.
        """
        root = self.directory()
        gone = write(root, "a.eml")
        write(root, "b.eml", b"b\n")
        source = EmlDirectorySource(root, FOLDER)
        messages = self.messages(source)
        os.unlink(gone)
        self.assertEqual(
            self.bodies(source, messages),
            [UnreadableMessage(f"file vanished: {gone}"), b"b\r\n"],
        )

    def test_unreadableDirectory(self) -> None:
        """
        A subdirectory that cannot be listed fails the listing with
        L{SourceError} naming it, rather than leaving its messages behind
        silently (checked where the kernel refuses: see
        L{tests.localfiles}).
        """
        root = os.path.abspath(self.directory())
        write(root, "locked/a.eml")
        write(root, "b.eml")
        locked = os.path.join(root, "locked")
        makeUnreadable(self, locked)
        self.assertEqual(
            describeUnprivileged(self, "eml", root),
            {"folders": {"": {"error": f"cannot list {locked}: Permission denied"}}},
        )

    def test_unreadableFile(self) -> None:
        """
        A file that cannot be read is an L{UnreadableMessage} saying so;
        the others are read.
        """
        root = os.path.abspath(self.directory())
        locked = write(root, "a.eml")
        write(root, "b.eml", b"b\n")
        makeUnreadable(self, locked)
        self.assertEqual(
            describeUnprivileged(self, "eml", root),
            {"folders": {"": {"a.eml": f"permission denied: {locked}", "b.eml": 3}}},
        )

    def test_special(self) -> None:
        """
        A C{.eml} entry that is a FIFO or a socket, or a link
        leading out of the directory, to nothing or into a loop, and a
        link to a directory out of the directory, are each listed and
        unreadable with the reason; a link to a C{.eml} file inside is
        read; a link to a directory inside is not followed (its files are
        listed once, where they are); other names are no messages.
        """
        base = os.path.abspath(self.directory())
        root = os.path.join(base, "export")
        write(root, "good.eml", b"good\n")
        write(root, "sub/inner.eml", b"inner\n")
        secret = write(base, "secret.eml", b"secret\n")
        write(base, "outsideDir/hidden.eml", b"hidden\n")
        os.mkfifo(os.path.join(root, "fifo.eml"))
        os.mkfifo(os.path.join(root, "fifo.txt"))
        makeSocket(self, os.path.join(root, "socket.eml"))
        write(root, "dir.eml/in.eml", b"in\n")
        os.symlink(secret, os.path.join(root, "outside.eml"))
        os.symlink(os.path.join(base, "outsideDir"), os.path.join(root, "outsideDir"))
        os.symlink("loop.eml", os.path.join(root, "loop.eml"))
        os.symlink("missing.eml", os.path.join(root, "dangling.eml"))
        os.symlink("missing", os.path.join(root, "dangling"))
        os.symlink("good.eml", os.path.join(root, "alias.eml"))
        os.symlink("sub", os.path.join(root, "subAlias"))
        os.symlink(secret, os.path.join(root, "secretButNotEml"))
        source = EmlDirectorySource(root, FOLDER)
        messages = self.messages(source)
        leaves = "symbolic link leading out of the source directory, not followed:"
        self.assertEqual(
            dict(zip([m.key for m in messages], self.bodies(source, messages))),
            {
                "alias.eml": b"good\r\n",
                "dangling.eml": UnreadableMessage(f"symbolic link to nothing: {root}/dangling.eml"),
                "dir.eml/in.eml": b"in\r\n",
                "fifo.eml": UnreadableMessage(f"not a regular file: FIFO: {root}/fifo.eml"),
                "good.eml": b"good\r\n",
                "loop.eml": UnreadableMessage(f"symbolic link loop: {root}/loop.eml"),
                "outside.eml": UnreadableMessage(f"{leaves} {root}/outside.eml -> {secret}"),
                "outsideDir": UnreadableMessage(
                    f"{leaves} {root}/outsideDir -> {base}/outsideDir"
                ),
                "socket.eml": UnreadableMessage(f"not a regular file: socket: {root}/socket.eml"),
                "sub/inner.eml": b"inner\r\n",
            },
        )

    def test_deep(self) -> None:
        """
        Files 300 directories deep are listed (the walk keeps no stack
        frame per level); a directory whose path the system cannot take
        fails the listing with L{SourceError}.
        """
        root = self.directory()
        relative = "/".join(["d"] * 300) + "/m.eml"
        write(root, relative)
        source = EmlDirectorySource(root, FOLDER)
        self.assertEqual([m.key for m in self.messages(source)], [relative])
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(25):
            os.mkdir("l" * 200, dir_fd=fd)
            deeper = os.open("l" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(fd)
        failure = self.failureResultOf(source.listMessages(source.folder), SourceError)
        self.assertIn("File name too long", str(failure.value))
