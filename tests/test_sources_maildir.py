# -*- test-case-name: tests.test_sources_maildir -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.maildir}, against Maildirs built by hand in a
temporary directory.
"""

from __future__ import annotations

import os
import random
import stat
import sys
from datetime import datetime, timezone
from typing import Callable, Sequence

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock, Cooperator
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SkipTest, SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    formatInternalDate,
    utcFromTimestamp,
)
from imapmig.mail.octets import BARE_CR, BARE_LF, EIGHT_BIT, NUL, UNKNOWN, crlfAndFactsPython
from imapmig.sources import IMessageSource
from imapmig.sources.local import originalName
from imapmig.sources.maildir import MaildirSource
from tests.localfiles import describeUnprivileged, makeSocket, makeUnreadable

INBOX = SourceFolder(path=("INBOX",), key="")


def makeFolder(directory: str, subdirs: Sequence[str] = ("cur", "new", "tmp")) -> str:
    """
    Create a Maildir folder's directory with C{subdirs} in it.

    @return: C{directory}.
    """
    for subdir in subdirs:
        os.makedirs(os.path.join(directory, subdir), exist_ok=True)
    return directory


def deliver(
    directory: str,
    subdir: str,
    name: str,
    body: bytes = b"Subject: x\n\nbody\n",
    mtime: float | None = None,
) -> str:
    """
    Write one message file into C{directory/subdir}.

    @return: the file's path.
    """
    path = os.path.join(directory, subdir, name)
    with open(path, "wb") as f:
        f.write(body)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


class MaildirTestCase(SynchronousTestCase):
    """
    Helpers for the tests of L{MaildirSource}.
    """

    def maildir(self) -> str:
        """
        A fresh Maildir with an empty INBOX.
        """
        return makeFolder(self.mktemp())

    def folders(self, root: str) -> list[SourceFolder]:
        """
        The folders L{MaildirSource} lists in C{root}.
        """
        folders = self.successResultOf(MaildirSource(root).listFolders())
        return list(folders)

    def messages(self, source: MaildirSource, folder: SourceFolder = INBOX) -> list[SourceMessage]:
        """
        The messages C{source} lists in C{folder}.
        """
        messages = self.successResultOf(source.listMessages(folder))
        return list(messages)

    def bodies(
        self, source: MaildirSource, messages: Sequence[SourceMessage], folder: SourceFolder = INBOX
    ) -> list[MessageBody]:
        """
        The bodies C{source} reads for C{messages}.
        """
        bodies = self.successResultOf(source.readBodies(folder, messages))
        return list(bodies)


class FolderTests(MaildirTestCase):
    """
    L{MaildirSource.listFolders}.
    """

    def test_interface(self) -> None:
        """
        L{MaildirSource} provides L{IMessageSource}.
        """
        self.assertTrue(verifyObject(IMessageSource, MaildirSource(self.maildir())))

    def test_foldersAndOrder(self) -> None:
        """
        The root is INBOX; each C{.A.B} directory with C{cur/} or C{new/} is
        the folder C{("A", "B")} keyed by its name, with C{.INBOX.x} under
        INBOX; INBOX and its children come first, then the others sorted
        with parents before children; a missing parent is not invented.
        """
        root = self.maildir()
        for name in (".Sent", ".A.B", ".A", ".INBOX.x", ".Archive.2019", ".Z", ".B"):
            makeFolder(os.path.join(root, name))
        makeFolder(os.path.join(root, ".Newonly"), ("new",))
        makeFolder(os.path.join(root, ".Curonly"), ("cur",))
        self.assertEqual(
            [(f.path, f.key) for f in self.folders(root)],
            [
                (("INBOX",), ""),
                (("INBOX", "x"), ".INBOX.x"),
                (("A",), ".A"),
                (("A", "B"), ".A.B"),
                (("Archive", "2019"), ".Archive.2019"),
                (("B",), ".B"),
                (("Curonly",), ".Curonly"),
                (("Newonly",), ".Newonly"),
                (("Sent",), ".Sent"),
                (("Z",), ".Z"),
            ],
        )

    def test_notFolders(self) -> None:
        """
        Directories without C{cur/} or C{new/} (a C{tmp/} alone is not
        enough), dotfiles such as Dovecot's indexes, and directories whose
        names do not start with C{.} are not folders.
        """
        root = self.maildir()
        makeFolder(os.path.join(root, ".Tmponly"), ("tmp",))
        os.makedirs(os.path.join(root, ".Empty"))
        os.makedirs(os.path.join(root, "Plain", "cur"))
        with open(os.path.join(root, ".dovecot.index"), "wb") as f:
            f.write(b"index")
        with open(os.path.join(root, "dovecot-uidlist"), "wb") as f:
            f.write(b"3 V1 N1\n")
        self.assertEqual(self.folders(root), [INBOX])

    def test_modifiedUTF7(self) -> None:
        """
        Each level of a folder name is decoded from modified UTF-7; the key
        stays the directory name as it is on disk.
        """
        root = self.maildir()
        makeFolder(os.path.join(root, ".Entw&APw-rfe"))
        makeFolder(os.path.join(root, ".&AMQ-rger.Gr&APw-&AN8-e"))
        makeFolder(os.path.join(root, ".R&-D"))
        self.assertEqual(
            [(f.path, f.key) for f in self.folders(root)[1:]],
            [
                (("Entwürfe",), ".Entw&APw-rfe"),
                (("R&D",), ".R&-D"),
                (("Ärger", "Grüße"), ".&AMQ-rger.Gr&APw-&AN8-e"),
            ],
        )

    def test_undecodableName(self) -> None:
        """
        A level that is not valid modified UTF-7 keeps its raw form; a name
        already in UTF-8 (Dovecot's UTF-8 layout) stays as it is.
        """
        root = self.maildir()
        makeFolder(os.path.join(root, ".Tom & Jerry"))
        makeFolder(os.path.join(root, ".Gr&ZZZ-.ok"))
        makeFolder(os.path.join(root, ".Grüße"))
        self.assertEqual(
            sorted(f.path for f in self.folders(root)[1:]),
            [("Gr&ZZZ-", "ok"), ("Grüße",), ("Tom & Jerry",)],
        )

    def test_nonUTF8Name(self) -> None:
        """
        A directory name that is not UTF-8 is listed with each undecodable
        octet carried as C{%XX}, in its path and key, with a warning naming
        it; its messages can be listed and read through that key, by this
        instance and by a fresh one that never listed the folders.
        """
        root = self.maildir()
        raw = os.fsdecode(b".caf\xe9")
        folderDir = makeFolder(os.path.join(root, raw))
        deliver(folderDir, "cur", "1700000000.M1P1.host:2,S", b"a\n")
        source = MaildirSource(root)
        with capturedLogs() as events:
            [_, folder] = self.successResultOf(source.listFolders())
        self.assertEqual((folder.path, folder.key), (("caf%E9",), ".caf%E9"))
        self.assertEqual(
            [formatEvent(e) for e in events],
            [
                "Source folder name is not valid UTF-8: carried as .caf%E9"
                f" ({root}/.caf%E9)"
            ],
        )
        self.assertEqual(events[0]["log_level"], LogLevel.warn)
        [message] = self.messages(source, folder)
        self.assertEqual(self.bodies(source, [message], folder), [b"a\r\n"])
        fresh = MaildirSource(root)
        self.assertEqual(self.bodies(fresh, [message], folder), [b"a\r\n"])
        self.assertEqual(self.messages(MaildirSource(root), folder), [message])

    def test_percentInName(self) -> None:
        """
        A valid UTF-8 name holding a C{%} that would read as a carried
        octet is carried with that C{%} as C{%25}, so that it cannot be
        taken for the name of another directory; other names with a C{%}
        stay as they are.
        """
        root = self.maildir()
        makeFolder(os.path.join(root, ".caf%E9"))
        makeFolder(os.path.join(root, os.fsdecode(b".caf\xe9")))
        makeFolder(os.path.join(root, ".100% sure"))
        self.assertEqual(
            sorted(f.key for f in self.folders(root)[1:]),
            [".100% sure", ".caf%25E9", ".caf%E9"],
        )

    def test_specialUse(self) -> None:
        """
        Top-level folders with a well-known name, in any case, carry their
        RFC 6154 attribute; nested ones and others carry none.
        """
        root = self.maildir()
        expected = {
            "Sent": "\\Sent",
            "Sent Messages": "\\Sent",
            "sent items": "\\Sent",
            "Drafts": "\\Drafts",
            "Trash": "\\Trash",
            "Deleted Messages": "\\Trash",
            "Deleted Items": "\\Trash",
            "Junk": "\\Junk",
            "Spam": "\\Junk",
            "Archive": "\\Archive",
            "Other": None,
        }
        for name in expected:
            makeFolder(os.path.join(root, "." + name))
        makeFolder(os.path.join(root, ".Other.Sent"))
        makeFolder(os.path.join(root, ".INBOX.Trash"))
        found = {f.path: f.specialUse for f in self.folders(root)}
        self.assertEqual(
            found,
            {
                ("INBOX",): None,
                ("INBOX", "Trash"): None,
                ("Other", "Sent"): None,
                **{(name,): use for name, use in expected.items()},
            },
        )

    def test_noInbox(self) -> None:
        """
        A root without C{cur/} or C{new/} but with Maildir++ folders lists
        those folders and no INBOX.
        """
        root = self.mktemp()
        makeFolder(os.path.join(root, ".A"))
        self.assertEqual(self.folders(root), [SourceFolder(path=("A",), key=".A")])

    def test_missing(self) -> None:
        """
        A path that does not exist fails with L{SourceError} naming it.
        """
        root = self.mktemp()
        failure = self.failureResultOf(MaildirSource(root).listFolders(), SourceError)
        self.assertIn(root, str(failure.value))

    def test_notADirectory(self) -> None:
        """
        A path that is a file fails with L{SourceError} naming it.
        """
        root = self.mktemp()
        with open(root, "wb") as f:
            f.write(b"not a maildir")
        failure = self.failureResultOf(MaildirSource(root).listFolders(), SourceError)
        self.assertIn(root, str(failure.value))

    def test_notAMaildir(self) -> None:
        """
        A directory with neither C{cur/}, C{new/} nor a Maildir++ folder
        fails with L{SourceError} naming it.
        """
        root = self.mktemp()
        os.makedirs(os.path.join(root, "tmp"))
        os.makedirs(os.path.join(root, ".cache"))
        failure = self.failureResultOf(MaildirSource(root).listFolders(), SourceError)
        self.assertIn(root, str(failure.value))
        self.assertIn("not a Maildir", str(failure.value))


class MessageListingTests(MaildirTestCase):
    """
    L{MaildirSource.listMessages}.
    """

    def test_flags(self) -> None:
        """
        The letters after C{2,} become IMAP flags, S R F D T each; C{P} is
        dropped, and so are Dovecot's lowercase keyword letters when no
        C{dovecot-keywords} file names them; C{!2,} and C{;2,} are
        recognised as well as C{:2,}.
        """
        root = self.maildir()
        names = {
            "1700000001.a.host:2,S": ("\\Seen",),
            "1700000002.a.host:2,R": ("\\Answered",),
            "1700000003.a.host:2,F": ("\\Flagged",),
            "1700000004.a.host:2,D": ("\\Draft",),
            "1700000005.a.host:2,T": ("\\Deleted",),
            "1700000006.a.host:2,DFPRST": (
                "\\Draft",
                "\\Flagged",
                "\\Answered",
                "\\Seen",
                "\\Deleted",
            ),
            "1700000007.a.host:2,Sab": ("\\Seen",),
            "1700000008.a.host:2,": (),
            "1700000009.a.host": (),
            "1700000010.a.host!2,FS": ("\\Flagged", "\\Seen"),
            "1700000011.a.host;2,R": ("\\Answered",),
            "1700000012.a.host:1,S": (),
            "1700000013.b.host:2,S": ("\\Seen",),
        }
        for name in names:
            deliver(root, "cur", name)
        self.assertEqual(
            {m.key: m.flags for m in self.messages(MaildirSource(root))},
            {name.partition(":")[0].split("!")[0].split(";")[0]: f for name, f in names.items()},
        )

    def test_keywords(self) -> None:
        """
        Dovecot's keyword letters become the keywords its
        C{dovecot-keywords} file names (index 0 is C{a}), after the system
        flags and in letter order; a letter the file does not name, and
        malformed lines, are skipped.
        """
        root = self.maildir()
        with open(os.path.join(root, "dovecot-keywords"), "wb") as f:
            f.write(b"0 $Forwarded\n1 Work\nbogus line\n3 $label1\n40 $TooFar\n")
        deliver(root, "cur", "1700000001.a.host:2,Sbad")
        deliver(root, "cur", "1700000002.a.host:2,c")
        self.assertEqual(
            {m.key: m.flags for m in self.messages(MaildirSource(root))},
            {
                "1700000001.a.host": ("\\Seen", "$Forwarded", "Work", "$label1"),
                "1700000002.a.host": (),
            },
        )

    def test_new(self) -> None:
        """
        Files in C{new/} without an info part have no flags (so they are
        not \\Seen); one with an info part, as Dovecot writes when flags
        change before the file moves to C{cur/}, has its flags.  Their key
        is their unique name all the same.
        """
        root = self.maildir()
        deliver(root, "new", "1700000000.M1P2.host,S=18,W=21")
        deliver(root, "new", "1700000001.M3P4.host,S=18,W=21:2,FSa")
        self.assertEqual(
            [(m.key, m.flags) for m in self.messages(MaildirSource(root))],
            [
                ("1700000000.M1P2.host,S=18,W=21", ()),
                ("1700000001.M3P4.host,S=18,W=21", ("\\Flagged", "\\Seen")),
            ],
        )

    def test_keyStableAcrossFlagChanges(self) -> None:
        """
        A message keeps its key when its flags change or it moves from
        C{new/} to C{cur/}.
        """
        root = self.maildir()
        path = deliver(root, "new", "1700000000.a.host")
        source = MaildirSource(root)
        before = self.messages(source)
        moved = os.path.join(root, "cur", "1700000000.a.host:2,S")
        os.rename(path, moved)
        seen = self.messages(source)
        os.rename(moved, os.path.join(root, "cur", "1700000000.a.host:2,FS"))
        flagged = self.messages(source)
        self.assertEqual(
            [(m.key, m.flags) for m in before + seen + flagged],
            [
                ("1700000000.a.host", ()),
                ("1700000000.a.host", ("\\Seen",)),
                ("1700000000.a.host", ("\\Flagged", "\\Seen")),
            ],
        )

    def test_ignored(self) -> None:
        """
        Files in C{tmp/} and dotfiles are not messages; a subdirectory of
        C{cur/} is not skipped silently: it is listed, and reading it says
        it is not a regular file.
        """
        root = self.maildir()
        deliver(root, "tmp", "1700000000.a.host")
        deliver(root, "cur", ".1700000001.b.host:2,S")
        deliver(root, "new", ".hidden")
        subdirectory = os.path.join(root, "cur", "1700000002.c.host:2,S")
        os.makedirs(subdirectory)
        deliver(root, "cur", "1700000003.d.host:2,S")
        source = MaildirSource(root)
        messages = self.messages(source)
        self.assertEqual([m.key for m in messages], ["1700000002.c.host", "1700000003.d.host"])
        self.assertEqual(
            self.bodies(source, messages),
            [
                UnreadableMessage(f"not a regular file: directory: {subdirectory}"),
                b"Subject: x\r\n\r\nbody\r\n",
            ],
        )

    def test_internalDateFromName(self) -> None:
        """
        INTERNALDATE is the leading timestamp of the name, as an aware UTC
        datetime, whatever the file's mtime.
        """
        root = self.maildir()
        deliver(root, "cur", "1600000000.M1P2.host,S=5:2,S", mtime=1000000000)
        [message] = self.messages(MaildirSource(root))
        self.assertEqual(message.internalDate, utcFromTimestamp(1600000000))
        assert message.internalDate is not None
        self.assertEqual(message.internalDate.utcoffset(), utcFromTimestamp(0).utcoffset())

    def test_internalDateAnyYear(self) -> None:
        """
        The name's leading integer is the delivery time at any date an
        INTERNALDATE can express: the epoch itself, 1973, 1979 (before
        1980, once replaced by the mtime), 2100 and the last second of
        the year 9999; never the file's mtime.
        """
        root = self.maildir()
        times = [0, 12, 100000000, 315532799, 5000000000, 253402300799]
        for when in times:
            deliver(root, "cur", f"{when}.M1P2.host:2,S", mtime=1400000000)
        # Leading zeros are read by value, as verify (imapmig.commands.expected) does.
        deliver(root, "cur", "0000000000000000.M1P3.host:2,S", mtime=1400000000)
        self.assertEqual(
            [(m.key, m.internalDate) for m in self.messages(MaildirSource(root))],
            [
                ("0.M1P2.host", utcFromTimestamp(0)),
                ("0000000000000000.M1P3.host", utcFromTimestamp(0)),
            ]
            + [(f"{when}.M1P2.host", utcFromTimestamp(when)) for when in times[1:]],
        )
        last = self.messages(MaildirSource(root))[-1].internalDate
        assert last is not None
        self.assertEqual(formatInternalDate(last), b'"31-Dec-9999 23:59:59 +0000"')

    def test_internalDateFromMtime(self) -> None:
        """
        When the name holds no usable time (no leading integer, one with
        letters attached, one beyond the year 9999: a counter or
        milliseconds), INTERNALDATE is the file's mtime, a date before
        1970 included.
        """
        root = self.maildir()
        names = ["msg.host", "1700000000x.y", "253402300800.x", "1700000000123.x", "9" * 200]
        for i, name in enumerate(names):
            deliver(root, "cur", name + ":2,S", mtime=1400000000 + i)
        deliver(root, "cur", "old.host:2,S", mtime=-315619200)
        self.assertEqual(
            [(m.key, m.internalDate) for m in self.messages(MaildirSource(root))],
            [("old.host", datetime(1960, 1, 1, tzinfo=timezone.utc))]
            + [(name, utcFromTimestamp(1400000000 + i)) for i, name in enumerate(names)],
        )

    def test_size(self) -> None:
        """
        The size is the name's C{,S=} field when present (without reading
        the file), else the file's size.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host,S=12345,W=12400:2,S", b"short\n")
        deliver(root, "cur", "1700000001.b.host:2,S", b"seven\n\n")
        self.assertEqual(
            [(m.key, m.size) for m in self.messages(MaildirSource(root))],
            [("1700000000.a.host,S=12345,W=12400", 12345), ("1700000001.b.host", 7)],
        )

    def test_order(self) -> None:
        """
        Messages come oldest first, ties broken by key, from C{cur/} and
        C{new/} together.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000300.a.host:2,S")
        deliver(root, "new", "1700000100.z.host")
        deliver(root, "cur", "1700000200.b.host:2,S")
        deliver(root, "new", "1700000200.a.host")
        deliver(root, "cur", "noTimestamp:2,S", mtime=1700000150)
        self.assertEqual(
            [m.key for m in self.messages(MaildirSource(root))],
            [
                "1700000100.z.host",
                "noTimestamp",
                "1700000200.a.host",
                "1700000200.b.host",
                "1700000300.a.host",
            ],
        )

    def test_sortRows(self) -> None:
        """
        The rows of a listing are sorted by date, then key: by their dates
        alone where no two are the same, and as tuples (ties broken by
        key, whatever order the directory gave) where some are.
        """
        from imapmig.sources.maildir import _sortRows

        undated = float("-inf")
        Row = tuple[float, str, tuple[str, ...], int]
        distinct: list[Row] = [
            (3.0, "a", (), 1), (undated, "z", (), 1), (-5.5, "m", (), 1), (1.0, "b", (), 1)
        ]  # fmt: skip
        _sortRows(distinct)
        self.assertEqual([row[1] for row in distinct], ["z", "m", "b", "a"])
        tied: list[Row] = [
            (2.0, "c", (), 1), (1.0, "z", (), 1), (2.0, "b", (), 1), (undated, "y", (), 1),
            (undated, "x", (), 1), (2.0, "a", (), 1),
        ]  # fmt: skip
        _sortRows(tied)
        self.assertEqual([row[1] for row in tied], ["x", "y", "z", "a", "b", "c"])

    def test_duplicateUniqueNames(self) -> None:
        """
        Files sharing a unique name are all listed, with distinct keys that
        do not depend on the order the directory lists them in: C{cur/}
        before C{new/}, then by file name, the first keeps the unique name,
        the next ones get the directory appended, then the file name too.
        """
        root = self.maildir()
        deliver(root, "new", "1700000000.a.host")
        deliver(root, "cur", "1700000000.a.host:2,S")
        deliver(root, "cur", "1700000000.a.host:2,FS")
        deliver(root, "cur", "1700000000.a.host:2,RS")
        self.assertEqual(
            sorted((m.key, m.flags) for m in self.messages(MaildirSource(root))),
            [
                ("1700000000.a.host", ("\\Flagged", "\\Seen")),
                ("1700000000.a.host/cur", ("\\Answered", "\\Seen")),
                ("1700000000.a.host/cur/1700000000.a.host:2,S", ("\\Seen",)),
                ("1700000000.a.host/new", ()),
            ],
        )

    def test_duplicatesRead(self) -> None:
        """
        Each of two files sharing a unique name is read under its own key.
        """
        root = self.maildir()
        deliver(root, "new", "1700000000.a.host", b"new\n")
        deliver(root, "cur", "1700000000.a.host:2,S", b"cur\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        self.assertEqual(
            dict(zip([m.key for m in messages], self.bodies(source, messages))),
            {"1700000000.a.host": b"cur\r\n", "1700000000.a.host/new": b"new\r\n"},
        )

    def test_nonUTF8MessageName(self) -> None:
        """
        A file name that is not UTF-8 gives a key with its undecodable
        octets carried as C{%XX}, and the file is read through that key.
        """
        root = self.maildir()
        deliver(root, "cur", os.fsdecode(b"1700000000.caf\xe9:2,S"), b"x\n")
        source = MaildirSource(root)
        [message] = self.messages(source)
        self.assertEqual(message.key, "1700000000.caf%E9")
        self.assertEqual(os.fsencode(originalName(message.key)), b"1700000000.caf\xe9")
        self.assertEqual(self.bodies(source, [message]), [b"x\r\n"])

    def test_subfolder(self) -> None:
        """
        A Maildir++ folder's messages are those of its own directory.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.inbox.host:2,S")
        sub = makeFolder(os.path.join(root, ".Entw&APw-rfe"))
        deliver(sub, "cur", "1700000001.draft.host:2,D")
        source = MaildirSource(root)
        [_, drafts] = self.successResultOf(source.listFolders())
        self.assertEqual(
            [(m.key, m.flags) for m in self.messages(source, drafts)],
            [("1700000001.draft.host", ("\\Draft",))],
        )

    def test_folderWithoutListFolders(self) -> None:
        """
        A folder can be listed by its key without listing the folders first
        (as after a restart).
        """
        root = self.maildir()
        sub = makeFolder(os.path.join(root, ".A.B"))
        deliver(sub, "new", "1700000001.x.host")
        source = MaildirSource(root)
        self.assertEqual(
            [m.key for m in self.messages(source, SourceFolder(path=("A", "B"), key=".A.B"))],
            ["1700000001.x.host"],
        )

    def test_folderGone(self) -> None:
        """
        Listing a folder whose C{cur/} and C{new/} are gone fails with
        L{SourceError} naming its directory.
        """
        root = self.maildir()
        sub = makeFolder(os.path.join(root, ".A"))
        source = MaildirSource(root)
        [_, folder] = self.successResultOf(source.listFolders())
        os.rmdir(os.path.join(sub, "cur"))
        os.rmdir(os.path.join(sub, "new"))
        failure = self.failureResultOf(source.listMessages(folder), SourceError)
        self.assertIn(sub, str(failure.value))

    def test_folderUnreadable(self) -> None:
        """
        Listing a folder whose C{cur/} the process may not read fails with
        L{SourceError} naming it (checked where the kernel refuses: see
        L{tests.unprivileged}).
        """
        root = self.maildir()
        deliver(root, "new", "1700000000.a.host")
        makeUnreadable(self, os.path.join(root, "cur"))
        described = describeUnprivileged(self, "maildir", root)
        self.assertEqual(
            described,
            {
                "folders": {
                    "": {
                        "error": "cannot list the Maildir folder"
                        f" {os.path.abspath(root)}: Permission denied"
                    }
                }
            },
        )

    def test_unreadableSubfolder(self) -> None:
        """
        A Maildir++ folder that the process may not enter (mode 000) is
        listed, not skipped: listing its messages fails with L{SourceError}
        naming it (which fails the job naming it), and the other folders
        are read.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host:2,S", b"a\n")
        locked = makeFolder(os.path.join(root, ".Locked"))
        deliver(locked, "cur", "1700000000.l.host:2,S", b"l\n")
        makeUnreadable(self, locked)
        described = describeUnprivileged(self, "maildir", root)
        self.assertEqual(
            described,
            {
                "folders": {
                    "": {"1700000000.a.host": 3},
                    ".Locked": {
                        "error": "cannot list the Maildir folder"
                        f" {os.path.abspath(locked)}: Permission denied"
                    },
                }
            },
        )

    def test_badFolderKey(self) -> None:
        """
        A key that cannot name a Maildir++ folder of this Maildir fails
        with L{SourceError} instead of reaching outside it.
        """
        source = MaildirSource(self.maildir())
        for key in ("..", "../other", "A", ".A/../.."):
            folder = SourceFolder(path=("x",), key=key)
            self.failureResultOf(source.listMessages(folder), SourceError)

    def test_empty(self) -> None:
        """
        A folder with only C{new/} and nothing in it has no messages.
        """
        root = makeFolder(self.mktemp(), ("new",))
        self.assertEqual(self.messages(MaildirSource(root)), [])


class ReadBodiesTests(MaildirTestCase):
    """
    L{MaildirSource.readBodies}.
    """

    def test_crlf(self) -> None:
        """
        Bodies come in the order asked for, bare LF turned into CRLF, CRLF
        bodies unchanged.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host:2,S", b"Subject: a\n\nline 1\nline 2\n")
        deliver(root, "new", "1700000001.b.host", b"Subject: b\r\n\r\nbody\r\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        self.assertEqual(
            self.bodies(source, messages[::-1]),
            [b"Subject: b\r\n\r\nbody\r\n", b"Subject: a\r\n\r\nline 1\r\nline 2\r\n"],
        )

    def test_factsCarried(self) -> None:
        """
        The bodies come with the facts of their octets, found as they were
        read (L{ReadBodies}): NUL, 8-bit, bare CR, bare LF; a body that
        could not be read has none.
        """
        root = self.maildir()
        stored = [b"a\nb\n", b"a\r\nb\r\n", b"\0\r\n", "é\r\n".encode(), b"a\rb\r\n"]
        for i, body in enumerate(stored):
            deliver(root, "cur", f"170000000{i}.m{i}.host:2,S", body)
        gone = deliver(root, "cur", "1700000009.gone.host:2,S")
        source = MaildirSource(root)
        messages = self.messages(source)
        os.unlink(gone)
        bodies = self.successResultOf(source.readBodies(INBOX, messages))
        assert isinstance(bodies, ReadBodies)
        self.assertEqual(
            list(bodies.facts), [BARE_LF, 0, NUL, EIGHT_BIT, BARE_CR, UNKNOWN]
        )
        self.assertEqual(bodies[:5], [crlfAndFactsPython(body)[0] for body in stored])
        self.assertIsInstance(bodies[5], UnreadableMessage)

    def test_sizeFieldBeyondAnyFile(self) -> None:
        """
        A file whose name's C{,S=} field is too large for any file (beyond
        2**63 - 1, which no SQLite or PostgreSQL integer would hold when
        its outcome is recorded) is listed at its real size, from its
        status, and read with the others of its batch; one just below is
        listed at the name's size, and read from its status.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host,S=" + "9" * 20 + ":2,S", b"a\n")
        deliver(root, "cur", "1700000001.b.host,S=9223372036854775808:2,S", b"bb\n")
        deliver(root, "cur", "1700000002.c.host,S=9223372036854775807:2,S", b"c\n")
        deliver(root, "cur", "1700000003.d.host:2,S", b"d\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        self.assertEqual([m.size for m in messages], [2, 3, 2**63 - 1, 2])
        self.assertEqual(
            self.bodies(source, messages), [b"a\r\n", b"bb\r\n", b"c\r\n", b"d\r\n"]
        )

    def test_nothing(self) -> None:
        """
        Reading no message gives no body.
        """
        self.assertEqual(self.bodies(MaildirSource(self.maildir()), []), [])

    def test_vanished(self) -> None:
        """
        A file deleted between listing and reading is an
        L{UnreadableMessage} naming the file; the others are still read.
        """
        root = self.maildir()
        gone = deliver(root, "cur", "1700000000.a.host:2,S")
        deliver(root, "cur", "1700000001.b.host:2,S", b"b\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        os.unlink(gone)
        self.assertEqual(
            self.bodies(source, messages),
            [UnreadableMessage(f"file vanished: {gone}"), b"b\r\n"],
        )

    def test_renamed(self) -> None:
        """
        A file renamed since the listing (flags changed, or moved from
        C{new/} to C{cur/}) is found again and read.
        """
        root = self.maildir()
        flagged = deliver(root, "cur", "1700000000.a.host:2,S", b"a\n")
        fresh = deliver(root, "new", "1700000001.b.host", b"b\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        os.rename(flagged, os.path.join(root, "cur", "1700000000.a.host:2,RS"))
        os.rename(fresh, os.path.join(root, "cur", "1700000001.b.host:2,S"))
        self.assertEqual(self.bodies(source, messages), [b"a\r\n", b"b\r\n"])

    def test_renamedTwice(self) -> None:
        """
        A file renamed again after a first rescan is found in a later call
        (one rescan per call).
        """
        root = self.maildir()
        path = deliver(root, "cur", "1700000000.a.host:2,S", b"a\n")
        source = MaildirSource(root)
        messages = self.messages(source)
        renamed = os.path.join(root, "cur", "1700000000.a.host:2,RS")
        os.rename(path, renamed)
        self.assertEqual(self.bodies(source, messages), [b"a\r\n"])
        os.rename(renamed, os.path.join(root, "cur", "1700000000.a.host:2,FRS"))
        self.assertEqual(self.bodies(source, messages), [b"a\r\n"])

    def test_withoutListing(self) -> None:
        """
        Bodies can be read for messages listed by another source instance
        (as after a restart).
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host:2,S", b"a\n")
        messages = self.messages(MaildirSource(root))
        self.assertEqual(self.bodies(MaildirSource(root), messages), [b"a\r\n"])

    def test_unknownKey(self) -> None:
        """
        A message that was never in the folder is an L{UnreadableMessage}
        naming its key and the folder's directory.
        """
        root = self.maildir()
        source = MaildirSource(root)
        self.messages(source)
        missing = SourceMessage(key="1700000000.nope.host", flags=(), internalDate=None, size=1)
        self.assertEqual(
            self.bodies(source, [missing]),
            [UnreadableMessage(f"file vanished: 1700000000.nope.host in {root}")],
        )

    def test_folderGone(self) -> None:
        """
        When the whole folder is gone, each message is an
        L{UnreadableMessage}, not an exception.
        """
        root = self.maildir()
        sub = makeFolder(os.path.join(root, ".A"))
        path = deliver(sub, "cur", "1700000000.a.host:2,S")
        source = MaildirSource(root)
        folder = SourceFolder(path=("A",), key=".A")
        messages = self.messages(source, folder)
        os.unlink(path)
        for subdir in ("cur", "new", "tmp"):
            os.rmdir(os.path.join(sub, subdir))
        self.assertEqual(
            self.bodies(source, messages, folder),
            [UnreadableMessage(f"file vanished: {path}")],
        )

    def test_otherError(self) -> None:
        """
        A file that cannot be read for another reason (here a directory
        now stands in its place) is an L{UnreadableMessage} with the path
        and the system's explanation.
        """
        root = self.maildir()
        path = deliver(root, "cur", "1700000000.a.host:2,S")
        source = MaildirSource(root)
        messages = self.messages(source)
        os.unlink(path)
        os.mkdir(path)
        self.assertEqual(
            self.bodies(source, messages),
            [UnreadableMessage(f"cannot read {path}: Is a directory")],
        )

    def test_permissionDenied(self) -> None:
        """
        A file the process may not read is an L{UnreadableMessage} saying
        so, with its path (checked where the kernel refuses: see
        L{tests.unprivileged}).
        """
        root = self.maildir()
        path = deliver(root, "cur", "1700000000.a.host:2,S")
        deliver(root, "cur", "1700000001.b.host:2,S", b"b\n")
        makeUnreadable(self, path)
        self.assertEqual(
            describeUnprivileged(self, "maildir", root),
            {
                "folders": {
                    "": {
                        "1700000000.a.host": f"permission denied: {os.path.abspath(path)}",
                        "1700000001.b.host": 3,
                    }
                }
            },
        )


class OpenFolderTests(SynchronousTestCase):
    """
    L{OpenFolder}: a folder's C{cur/} and C{new/}, opened once.
    """

    def test_descriptors(self) -> None:
        """
        Files are looked up by name in C{cur/} and C{new/}, each opened
        once; a file or a subdirectory that is gone gives L{None}; the
        descriptors (and the Maildir's) are closed on leaving.
        """
        from imapmig.sources.local import sizeAndMtimePython as sizeAndMtime
        from imapmig.sources.maildir.opened import OpenFolder

        folder = self.mktemp()
        os.makedirs(os.path.join(folder, "cur"))
        with open(os.path.join(folder, "cur", "m1:2,S"), "wb") as f:
            f.write(b"x" * 7)
        before = len(os.listdir("/proc/self/fd"))
        with OpenFolder(folder, "") as opened:
            cur = opened.descriptors[0]
            assert cur is not None
            status = sizeAndMtime(cur, "m1:2,S")
            assert status is not None
            self.assertEqual(status[0], 7)
            self.assertIsNone(sizeAndMtime(cur, "gone"))
            self.assertIsNone(opened.descriptors[1])
            self.assertEqual(len(os.listdir("/proc/self/fd")), before + 2)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)


class IrregularEntryTests(MaildirTestCase):
    """
    What is not a regular message file in C{cur/} or C{new/} is listed and
    recorded as unreadable with the reason, never read, followed out of the
    Maildir or skipped silently; a symbolic link inside the Maildir is read.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.root = makeFolder(os.path.join(self.base, "Maildir"))
        self.secret = os.path.join(self.base, "secret")
        with open(self.secret, "wb") as f:
            f.write(b"root:secret\n")
        deliver(self.root, "cur", "1700000000.ok.host:2,S", b"ok\n")

    def listAndRead(self) -> dict[str, MessageBody]:
        """
        Every message of INBOX and what reading it gives.
        """
        source = MaildirSource(self.root)
        messages = self.messages(source)
        return dict(zip([m.key for m in messages], self.bodies(source, messages)))

    def test_linkOutside(self) -> None:
        """
        A symbolic link leading out of the Maildir (absolute, relative, or
        to a device) is listed with the flags its name gives, and not read.
        """
        cur = os.path.join(self.root, "cur")
        os.symlink(self.secret, os.path.join(cur, "1700000001.abs.host:2,S"))
        os.symlink("../../secret", os.path.join(cur, "1700000002.rel.host:2,FS"))
        os.symlink("/dev/zero", os.path.join(cur, "1700000003.zero.host"))
        source = MaildirSource(self.root)
        messages = self.messages(source)
        self.assertEqual(
            [(m.key, m.flags) for m in messages],
            [
                ("1700000000.ok.host", ("\\Seen",)),
                ("1700000001.abs.host", ("\\Seen",)),
                ("1700000002.rel.host", ("\\Flagged", "\\Seen")),
                ("1700000003.zero.host", ()),
            ],
        )
        self.assertEqual(
            self.bodies(source, messages),
            [
                b"ok\r\n",
                UnreadableMessage(
                    "symbolic link leading out of the source directory, not followed:"
                    f" {cur}/1700000001.abs.host:2,S -> {self.secret}"
                ),
                UnreadableMessage(
                    "symbolic link leading out of the source directory, not followed:"
                    f" {cur}/1700000002.rel.host:2,FS -> {self.secret}"
                ),
                UnreadableMessage(
                    "symbolic link leading out of the source directory, not followed:"
                    f" {cur}/1700000003.zero.host -> /dev/zero"
                ),
            ],
        )

    def test_linkInside(self) -> None:
        """
        A symbolic link to a regular file inside the Maildir is read, dated
        and sized by its target when its name does not say.
        """
        other = makeFolder(os.path.join(self.root, ".Other"))
        target = deliver(other, "cur", "target:2,S", b"shared\n", mtime=1600000000)
        os.symlink("../.Other/cur/target:2,S", os.path.join(self.root, "new", "linked"))
        source = MaildirSource(self.root)
        messages = self.messages(source)
        self.assertEqual(
            [(m.key, m.internalDate, m.size) for m in messages],
            [
                ("linked", utcFromTimestamp(1600000000), 7),
                ("1700000000.ok.host", utcFromTimestamp(1700000000), 3),
            ],
        )
        self.assertEqual(self.bodies(source, messages), [b"shared\r\n", b"ok\r\n"])
        self.assertTrue(os.path.exists(target))

    def test_specialFiles(self) -> None:
        """
        A FIFO, a socket, a directory, and a link to a FIFO inside the
        Maildir are each listed and recorded as not a regular file, with
        what they are; a FIFO never blocks.
        """
        cur = os.path.join(self.root, "cur")
        os.mkfifo(os.path.join(cur, "1700000001.fifo.host:2,S"))
        makeSocket(self, os.path.join(cur, "1700000002.sock.host:2,S"))
        os.mkdir(os.path.join(cur, "1700000003.dir.host:2,S"))
        os.symlink("1700000001.fifo.host:2,S", os.path.join(cur, "1700000004.tofifo.host"))
        self.assertEqual(
            self.listAndRead(),
            {
                "1700000000.ok.host": b"ok\r\n",
                "1700000001.fifo.host": UnreadableMessage(
                    f"not a regular file: FIFO: {cur}/1700000001.fifo.host:2,S"
                ),
                "1700000002.sock.host": UnreadableMessage(
                    f"not a regular file: socket: {cur}/1700000002.sock.host:2,S"
                ),
                "1700000003.dir.host": UnreadableMessage(
                    f"not a regular file: directory: {cur}/1700000003.dir.host:2,S"
                ),
                "1700000004.tofifo.host": UnreadableMessage(
                    "not a regular file: symbolic link to a FIFO:"
                    f" {cur}/1700000004.tofifo.host"
                ),
            },
        )

    def test_device(self) -> None:
        """
        A device node (made with C{mknod}, where the process may) is
        listed and recorded as one, never read.
        """
        path = os.path.join(self.root, "new", "1700000001.dev.host")
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except PermissionError:
            raise self.skipTest("mknod needs CAP_MKNOD")
        self.assertEqual(
            self.listAndRead()["1700000001.dev.host"],
            UnreadableMessage(f"not a regular file: character device: {path}"),
        )

    def test_loopAndNothing(self) -> None:
        """
        A symbolic link loop, or a link to nothing, costs only that entry:
        the folder is listed and the others read.
        """
        new = os.path.join(self.root, "new")
        os.symlink("1700000001.loop.host", os.path.join(new, "1700000001.loop.host"))
        os.symlink("a", os.path.join(new, "b"))
        os.symlink("b", os.path.join(new, "a"))
        os.symlink("missing", os.path.join(new, "1700000002.dangling.host"))
        self.assertEqual(
            self.listAndRead(),
            {
                "1700000000.ok.host": b"ok\r\n",
                "1700000001.loop.host": UnreadableMessage(
                    f"symbolic link loop: {new}/1700000001.loop.host"
                ),
                "a": UnreadableMessage(f"symbolic link loop: {new}/a"),
                "b": UnreadableMessage(f"symbolic link loop: {new}/b"),
                "1700000002.dangling.host": UnreadableMessage(
                    f"symbolic link to nothing: {new}/1700000002.dangling.host"
                ),
            },
        )

    def test_swappedForLinkAfterListing(self) -> None:
        """
        A file replaced by a symbolic link out of the Maildir between the
        listing and the reading is not followed.
        """
        source = MaildirSource(self.root)
        messages = self.messages(source)
        path = os.path.join(self.root, "cur", "1700000000.ok.host:2,S")
        os.unlink(path)
        os.symlink(self.secret, path)
        self.assertEqual(
            self.bodies(source, messages),
            [
                UnreadableMessage(
                    f"became a symbolic link since it was listed, not followed: {path}"
                )
            ],
        )

    def test_swappedForFifoAfterListing(self) -> None:
        """
        A file replaced by a FIFO between the listing and the reading is
        refused without blocking.
        """
        source = MaildirSource(self.root)
        messages = self.messages(source)
        path = os.path.join(self.root, "cur", "1700000000.ok.host:2,S")
        os.unlink(path)
        os.mkfifo(path)
        self.assertEqual(
            self.bodies(source, messages),
            [UnreadableMessage(f"not a regular file: FIFO: {path}")],
        )

    def test_changedSizeAfterListing(self) -> None:
        """
        A file that grew or shrank between the listing and the reading is
        read whole as it is now (the quick read of the listed size gives
        way to the full one).
        """
        source = MaildirSource(self.root)
        messages = self.messages(source)
        path = os.path.join(self.root, "cur", "1700000000.ok.host:2,S")
        for content in (b"grown\nmuch longer than before\n", b"x\n"):
            with open(path, "wb") as f:
                f.write(content)
            self.assertEqual(self.bodies(source, messages), [content.replace(b"\n", b"\r\n")])

    def test_curSwappedAfterListing(self) -> None:
        """
        C{cur/} replaced by a link out of the Maildir between the listing
        and the reading gives unreadable messages (the folder cannot be
        opened), and nothing outside is read, though a file of the listed
        name waits there.
        """
        source = MaildirSource(self.root)
        messages = self.messages(source)
        cur = os.path.join(self.root, "cur")
        os.rename(cur, cur + ".moved")
        elsewhere = makeFolder(os.path.join(self.base, "elsewhere"))
        deliver(elsewhere, "cur", "1700000000.ok.host:2,S", b"root:secret\n")
        os.symlink(os.path.join(elsewhere, "cur"), cur)
        [body] = self.bodies(source, messages)
        self.assertEqual(
            body,
            UnreadableMessage(
                f"cannot list the Maildir folder {self.root}: symbolic link leading out of"
                f" the source directory, not followed: {cur} -> {elsewhere}/cur"
            ),
        )


class FolderSafetyTests(MaildirTestCase):
    """
    Folders that cannot be read as they are fail their listing, naming
    them; links between folders inside the Maildir are followed.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.root = makeFolder(os.path.join(self.base, "Maildir"))
        self.elsewhere = makeFolder(os.path.join(self.base, "elsewhere"))
        deliver(self.elsewhere, "cur", "1700000000.x.host:2,S", b"elsewhere\n")

    def listing(self) -> dict[str, object]:
        """
        Per folder key, its messages' keys, or why they cannot be listed.
        """
        source = MaildirSource(self.root)
        result: dict[str, object] = {}
        for folder in self.folders(self.root):
            d = source.listMessages(folder)
            outcome: list[object] = []
            d.addCallbacks(
                lambda ms: outcome.append([m.key for m in ms]),
                lambda f: outcome.append(str(f.trap(SourceError) and f.value)),
            )
            result[folder.key] = outcome[0]
        return result

    def test_folderLinkOutside(self) -> None:
        """
        A Maildir++ folder that is a symbolic link out of the Maildir is
        listed, and listing its messages fails naming it and its target.
        """
        os.symlink(self.elsewhere, os.path.join(self.root, ".Shared"))
        self.assertEqual(
            self.listing(),
            {
                "": [],
                ".Shared": f"cannot list the Maildir folder {self.root}/.Shared: symbolic link"
                " leading out of the source directory, not followed:"
                f" {self.root}/.Shared/cur -> {self.elsewhere}/cur",
            },
        )

    def test_curLinkOutside(self) -> None:
        """
        A folder whose C{cur/} is a symbolic link out of the Maildir fails
        its listing, naming it.
        """
        sub = makeFolder(os.path.join(self.root, ".A"), ("new",))
        os.symlink(os.path.join(self.elsewhere, "cur"), os.path.join(sub, "cur"))
        self.assertEqual(
            self.listing()[".A"],
            f"cannot list the Maildir folder {sub}: symbolic link leading out of the source"
            f" directory, not followed: {sub}/cur -> {self.elsewhere}/cur",
        )

    def test_linksInside(self) -> None:
        """
        A folder, or a C{cur/}, that is a symbolic link inside the Maildir
        is followed.
        """
        real = makeFolder(os.path.join(self.root, ".Real"))
        deliver(real, "cur", "1700000001.r.host:2,S")
        os.symlink(".Real", os.path.join(self.root, ".Alias"))
        sub = makeFolder(os.path.join(self.root, ".B"), ("new",))
        os.symlink("../.Real/cur", os.path.join(sub, "cur"))
        self.assertEqual(
            self.listing(),
            {
                "": [],
                ".Alias": ["1700000001.r.host"],
                ".B": ["1700000001.r.host"],
                ".Real": ["1700000001.r.host"],
            },
        )

    def test_folderLoop(self) -> None:
        """
        A Maildir++ name that is a symbolic link loop is listed, and
        listing it fails naming it; the other folders are listed.
        """
        os.symlink(".Loop", os.path.join(self.root, ".Loop"))
        makeFolder(os.path.join(self.root, ".Fine"))
        self.assertEqual(
            self.listing(),
            {
                "": [],
                ".Fine": [],
                ".Loop": f"cannot list the Maildir folder {self.root}/.Loop: symbolic link loop",
            },
        )

    def test_folderLinkToNothing(self) -> None:
        """
        A Maildir++ name that is a symbolic link to nothing (a shared
        folder not mounted) is listed, and listing it fails saying so; a
        plain C{.X} directory without C{cur/} or C{new/}, or a link to a
        file, is no folder.
        """
        os.symlink(os.path.join(self.base, "unmounted"), os.path.join(self.root, ".Shared"))
        os.makedirs(os.path.join(self.root, ".Trash-1000"))
        with open(os.path.join(self.base, "file"), "wb"):
            pass
        os.symlink(os.path.join(self.base, "file"), os.path.join(self.root, ".linkToFile"))
        self.assertEqual(
            self.listing(),
            {
                "": [],
                ".Shared": "cannot list the Maildir folder"
                f" {self.root}/.Shared: symbolic link to nothing",
            },
        )

    def test_curNotADirectory(self) -> None:
        """
        A folder whose C{cur} is a file (beside a C{new/}) fails its
        listing rather than losing C{cur}'s messages silently.
        """
        sub = makeFolder(os.path.join(self.root, ".A"), ("new",))
        with open(os.path.join(sub, "cur"), "wb"):
            pass
        self.assertEqual(
            self.listing()[".A"],
            f"cannot list the Maildir folder {sub}: cur/ is not a directory",
        )

    def test_keywordsFileNotRegular(self) -> None:
        """
        A C{dovecot-keywords} that is a FIFO, or a link out of the Maildir,
        is not read (no keywords, no blocking).
        """
        deliver(self.root, "cur", "1700000000.a.host:2,Sa")
        with open(os.path.join(self.elsewhere, "keywords"), "wb") as f:
            f.write(b"0 $Leaked\n")
        keywords = os.path.join(self.root, "dovecot-keywords")
        os.symlink(os.path.join(self.elsewhere, "keywords"), keywords)
        [message] = self.messages(MaildirSource(self.root))
        self.assertEqual(message.flags, ("\\Seen",))
        os.unlink(keywords)
        os.mkfifo(keywords)
        [message] = self.messages(MaildirSource(self.root))
        self.assertEqual(message.flags, ("\\Seen",))


class FingerprintTests(MaildirTestCase):
    """
    L{MaildirSource.fingerprint}: the state of a folder's C{cur/} and
    C{new/}, the same until a file in them is delivered, renamed or
    deleted.
    """

    def aged(self) -> tuple[MaildirSource, str]:
        """
        A Maildir with one message, its directories' mtimes set in the
        past (a change now gives them another).
        """
        root = self.maildir()
        deliver(root, "cur", "1.M1P1.host:2,S")
        for subdir in ("cur", "new"):
            os.utime(os.path.join(root, subdir), ns=(10**18, 10**18))
        return MaildirSource(root), root

    def test_sameUntilChanged(self) -> None:
        """
        Taken twice with nothing changed, the fingerprint is the same; its
        newest time is the directories' newest mtime or ctime (here the
        ctime: their mtimes were set back), in seconds.
        """
        source, root = self.aged()
        first = source.fingerprint(INBOX)
        self.assertEqual(source.fingerprint(INBOX), first)
        assert first is not None
        ctimes = [os.stat(os.path.join(root, subdir)).st_ctime_ns for subdir in ("cur", "new")]
        self.assertEqual(first[1], max(ctimes) / 1e9)

    def test_changes(self) -> None:
        """
        A delivery into C{new/}, a flag change (a rename in C{cur/}) and a
        deletion each change the fingerprint.
        """
        source, root = self.aged()
        seen = [source.fingerprint(INBOX)]
        deliver(root, "new", "2.M2P1.host")
        seen.append(source.fingerprint(INBOX))
        os.rename(os.path.join(root, "cur", "1.M1P1.host:2,S"), os.path.join(root, "cur", "1.M1P1.host:2,FS"))
        seen.append(source.fingerprint(INBOX))
        os.unlink(os.path.join(root, "new", "2.M2P1.host"))
        seen.append(source.fingerprint(INBOX))
        self.assertNotIn(None, seen)
        self.assertEqual(len({s[0] for s in seen if s is not None}), 4)

    def test_missingNew(self) -> None:
        """
        A folder without C{new/} has a fingerprint that says so; one whose
        directory cannot be a folder has none.
        """
        root = makeFolder(self.mktemp(), ("cur",))
        fingerprint = MaildirSource(root).fingerprint(INBOX)
        assert fingerprint is not None
        self.assertTrue(fingerprint[0].endswith("new -"))
        self.assertIsNone(MaildirSource(root).fingerprint(SourceFolder(("x",), "x/y")))


class ListingInTurnsTests(MaildirTestCase):
    """
    L{MaildirSource.listMessagesInTurns} lists a large folder in turns,
    the reactor running between them, and gives what L{listMessages}
    gives.
    """

    def cooperator(self) -> tuple[list[Callable[[], object]], Cooperator]:
        """
        A cooperator that runs one step of its task per turn of the
        reactor, each turn given to the returned list to run.
        """
        turns: list[Callable[[], object]] = []
        clock = Clock()

        def schedule(work: Callable[[], object]) -> IDelayedCall:
            turns.append(work)
            return clock.callLater(0, lambda: None)

        cooperator = Cooperator(terminationPredicateFactory=lambda: lambda: True, scheduler=schedule)
        return turns, cooperator

    def described(self, messages: Sequence[SourceMessage]) -> list[tuple[object, ...]]:
        return [(m.key, m.flags, m.internalDate, m.size) for m in messages]

    def test_inTurns(self) -> None:
        """
        A folder of more files than a turn takes is listed over several
        turns of the reactor, not at once; the listing is the one
        L{listMessages} gives (duplicates keyed apart, oldest first), and
        its files are read through it.
        """
        root = self.maildir()
        for n in range(7):
            deliver(root, "cur", f"17000000{n:02d}.m{n}.host,S=17:2,S")
        deliver(root, "new", "1700000003.m3.host,S=17")
        deliver(root, "new", "1700000050.late.host")
        scheduled, cooperator = self.cooperator()
        source = MaildirSource(root)
        listing = source.listMessagesInTurns(INBOX, cooperator, turn=2)
        turns = 0
        while not listing.called:
            self.assertLess(turns, 50)
            scheduled.pop(0)()
            turns += 1
        # Nine files two a turn: a scan of cur/ in four turns and new/ in
        # one, their rows in five, the messages made in five.
        self.assertGreater(turns, 5)
        messages = self.successResultOf(listing)
        self.assertEqual(
            self.described(messages), self.described(self.messages(MaildirSource(root)))
        )
        self.assertEqual(len(messages), 9)
        self.assertEqual(self.bodies(source, messages)[0], b"Subject: x\r\n\r\nbody\r\n")

    def test_smallAtOnce(self) -> None:
        """
        A folder of no more files than a turn takes is listed at once:
        nothing waits for the reactor.
        """
        root = self.maildir()
        deliver(root, "cur", "1700000000.a.host:2,S")
        deliver(root, "new", "1700000001.b.host")
        scheduled, cooperator = self.cooperator()
        listing = MaildirSource(root).listMessagesInTurns(INBOX, cooperator, turn=2)
        self.assertEqual([m.key for m in self.successResultOf(listing)],
                         ["1700000000.a.host", "1700000001.b.host"])  # fmt: skip
        self.assertEqual(scheduled, [])

    def test_missing(self) -> None:
        """
        A folder that is gone fails the listing at once with
        L{SourceError}, as L{listMessages} does.
        """
        _, cooperator = self.cooperator()
        source = MaildirSource(self.maildir())
        missing = SourceFolder(path=("Gone",), key=".Gone")
        self.failureResultOf(source.listMessagesInTurns(missing, cooperator), SourceError)


class NameFieldsTests(SynchronousTestCase):
    """
    L{imapmig.sources.maildir.names.nameFields}, in C (the extension
    L{imapmig.sources._listing}) and in Python (C{nameFieldsPython}): the
    delivery time and the size a unique name gives, as
    L{imapmig.sources.maildir.names.leadingTimestamp} and C{sizeField} read
    them.
    """

    def functions(self) -> list[Callable[[str], tuple[float | None, int | None]]]:
        """
        The Python twin and the C extension's function (the test fails
        where the extension was not built under C{CI=true}).
        """
        from imapmig.sources.maildir import names

        try:
            from imapmig.sources import _listing
        except ImportError:
            # Not built, or kept out on purpose (by
            # tests.test_sources_local's run without it).
            if os.environ.get("CI") == "true" and "imapmig.sources._listing" not in sys.modules:
                raise AssertionError("imapmig.sources._listing is not built")
            return [names.nameFieldsPython]
        self.assertIs(names.nameFields, _listing.nameFields)
        return [names.nameFieldsPython, _listing.nameFields]

    def assertFields(self, unique: str, expected: tuple[float | None, int | None]) -> None:
        """
        Each function gives C{expected} for C{unique}, a date as a float.
        """
        for function in self.functions():
            got = function(unique)
            self.assertEqual(got, expected, (function, unique))
            if got[0] is not None:
                self.assertIs(type(got[0]), float)

    def test_examples(self) -> None:
        """
        The leading integer up to the first dot is the date (leading zeros
        allowed, up to 9999-12-31 23:59:59, ASCII digits only); the first
        C{,S=} followed by digits is the size, however many digits, unless
        beyond 2**63 - 1 (no size then: the file's status gives it).
        """
        for unique, expected in [
            ("1700000000.M1P2.host", (1700000000.0, None)),
            ("1700000000.M1P2.host,S=1234", (1700000000.0, 1234)),
            ("1700000000.M1P2.host,S=1234,W=1300", (1700000000.0, 1234)),
            ("1700000000", (1700000000.0, None)),
            ("0.x", (0.0, None)),
            ("", (None, None)),
            (".x,S=5", (None, 5)),
            ("x1700000000.y", (None, None)),
            ("170000000a.y", (None, None)),
            ("253402300799.y", (253402300799.0, None)),
            ("253402300800.y", (None, None)),
            ("0000000000000001.y", (1.0, None)),
            ("0253402300799.y", (253402300799.0, None)),
            ("1253402300799.y", (None, None)),
            ("99999999999.y", (99999999999.0, None)),
            ("\u0661\u0662.y,S=\u0663", (None, None)),
            ("1.y,S=,S=x,S=7", (1.0, 7)),
            ("1.y,S=", (1.0, None)),
            ("1.y,s=7", (1.0, None)),
            ("1.y,S=" + "9" * 40, (1.0, None)),
            ("1.y,S=9223372036854775807", (1.0, 2**63 - 1)),
            ("1.y,S=9223372036854775808", (1.0, None)),
            ("1.y,S=18446744073709551616,S=5", (1.0, None)),
            ("1.y,S=" + "0" * 30 + "9223372036854775807", (1.0, 2**63 - 1)),
            ("1.y,S=" + "0" * 30, (1.0, 0)),
            ("1.y,S=123456789012345678", (1.0, 123456789012345678)),
            ("1.y,S=1234567890123456789", (1.0, 1234567890123456789)),
            ("1.h\u00e9,S=12", (1.0, 12)),
            ("1.h\U0001f600,S=12", (1.0, 12)),
        ]:
            self.assertFields(unique, expected)

    def test_sameAsPython(self) -> None:
        """
        On names made of digits, dots, commas, C{S}, C{=} and other
        characters, the C function gives what the Python one gives.
        """
        from imapmig.sources.maildir.names import nameFieldsPython

        rng = random.Random(31)
        alphabet = "0123456789" * 3 + "..,,SS==x%\u00e9\u0661"
        for _ in range(20000):
            unique = "".join(rng.choice(alphabet) for _ in range(rng.randrange(30)))
            self.assertFields(unique, nameFieldsPython(unique))


class ListedMessagesTests(SynchronousTestCase):
    """
    The messages of a listing's sorted rows, in C (the extension's
    C{listedMessages}) and in Python (C{_listedPython}).
    """

    def test_sameAsPython(self) -> None:
        """
        Rows dated by their names, by mtimes with nanoseconds, before 1970,
        and undated, give the same L{SourceMessage}s (every field) in C as
        in Python; they are SourceMessage's four fields.
        """
        import attrs

        from imapmig.sources import maildir

        self.assertEqual(
            [field.name for field in attrs.fields(SourceMessage)],
            ["key", "flags", "internalDate", "size"],
        )
        rows = [
            (float("-inf"), "undated", (), 0),
            (-86400.987654321, "old", ("\\Seen",), 7),
            (0.0, "epoch", ("\\Seen", "$Label1"), 1),
            (1700000000.0, "named", ("\\Flagged",), 1234),
            (1700000000.123456789, "mtime", (), 10**12),
            (253402300799.0, "last", (), 5),
        ]
        expected = maildir._listedPython(rows)
        self.assertEqual(expected[0].internalDate, None)
        self.assertEqual(
            expected[3].internalDate, datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
        )
        self.assertEqual(maildir._listed(rows), expected)
        if os.environ.get("CI") == "true" and "imapmig.sources._listing" not in sys.modules:
            self.assertIsNotNone(maildir._listedMessages)

    def test_badRows(self) -> None:
        """
        The C function refuses rows that are not (float, key, flags, size)
        and fields that are not data descriptors, rather than make
        messages of them.
        """
        from imapmig.sources import maildir

        if maildir._listedMessages is None:
            raise SkipTest("imapmig.sources._listing is not built")
        listed = maildir._listedMessages
        for rows in ([(1, "k", (), 0)], [(1.0, "k", ())], [None]):
            self.assertRaises(TypeError, listed, rows, SourceMessage, maildir._FIELDS)
        self.assertRaises(TypeError, listed, [], SourceMessage, (1, 2, 3, 4))
        self.assertRaises(TypeError, listed, [], SourceMessage, maildir._FIELDS[:3])


class ScannedOfTests(SynchronousTestCase):
    """
    C{imapmig.sources.maildir.scan.scannedOf}, in C and in Python
    (C{scannedOfPython}): what the scan keeps of an entry.
    """

    def test_sameAsPython(self) -> None:
        """
        Names with and without info (C{:2,}, C{!2,}, C{;2,}, a C{:} without
        C{2,}, several marks), dotfiles, names that are not ASCII, hold a
        C{%} or undecodable octets give the same in C as in Python, the
        unique part carried by L{carriedName}.
        """
        from imapmig.sources.local import Irregular, carriedName
        from imapmig.sources.maildir import scan

        if scan.scannedOf is scan.scannedOfPython:
            if os.environ.get("CI") == "true" and "imapmig.sources._listing" not in sys.modules:
                raise AssertionError("imapmig.sources._listing is not built")
            raise SkipTest("imapmig.sources._listing is not built")
        irregular = Irregular("a FIFO")
        names = [
            "1700000000.M1P2.host:2,S", "1700000000.M1P2.host:2,", "1700000000.M1P2.host",
            "1700000000.M1P2.host:1,x", "a:2,S:2,T", "a!2,S", "a;2,S", "a!2,S!2,T", "a;2,S!2,T",
            "a!2", "a:", ":2,S", ".hidden", ".", "caf\u00e9:2,S", "caf\udce9:2,S",
            "100%:2,S", "100%25:2,F", "x:2,caf\u00e9", "\U0001f600!2,R", "a:2",
        ]  # fmt: skip
        rng = random.Random(31)
        alphabet = "ab1.:;!2,S%\u00e9\udce9"
        names += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))) for _ in range(20000)]
        for name in names:
            for index, what in ((0, None), (1, irregular)):
                self.assertEqual(
                    scan.scannedOf(name, index, what, carriedName),
                    scan.scannedOfPython(name, index, what, carriedName),
                    name,
                )
        self.assertEqual(
            scan.scannedOf("1700000000.x,S=12:2,S", 1, None, carriedName),
            ("1700000000.x,S=12", "1700000000.x,S=12", 1, "1700000000.x,S=12:2,S", "S", None, 1700000000.0, 12),
        )
        self.assertEqual(
            scan.scannedOf("caf\udce9:2,S", 0, None, carriedName),
            ("caf%E9", "caf%E9", 0, "caf\udce9:2,S", "S", None, None, None),
        )
