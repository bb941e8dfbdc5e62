# -*- test-case-name: tests.test_sources_maildir -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.maildir}, against Maildirs built by hand in a
temporary directory.
"""

from __future__ import annotations

import os
from typing import Sequence

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import SourceError
from imapmig.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    utcFromTimestamp,
)
from imapmig.sources import IMessageSource
from imapmig.sources.maildir import MaildirSource, displayableName
from tests.support import denyAccess

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
        A directory name that is not UTF-8 is listed with its undecodable
        bytes shown as C{\\xNN}, in its path and key, and its messages can
        still be listed and read through that key.
        """
        root = self.maildir()
        raw = os.fsdecode(b".caf\xe9")
        folderDir = makeFolder(os.path.join(root, raw))
        deliver(folderDir, "cur", "1700000000.M1P1.host:2,S", b"a\n")
        source = MaildirSource(root)
        [_, folder] = self.successResultOf(source.listFolders())
        self.assertEqual((folder.path, folder.key), (("caf\\xe9",), ".caf\\xe9"))
        [message] = self.messages(source, folder)
        self.assertEqual(self.bodies(source, [message], folder), [b"a\r\n"])

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
        Files in C{tmp/}, dotfiles, and subdirectories of C{cur/} and
        C{new/} are not messages.
        """
        root = self.maildir()
        deliver(root, "tmp", "1700000000.a.host")
        deliver(root, "cur", ".1700000001.b.host:2,S")
        deliver(root, "new", ".hidden")
        os.makedirs(os.path.join(root, "cur", "1700000002.c.host:2,S"))
        deliver(root, "cur", "1700000003.d.host:2,S")
        self.assertEqual([m.key for m in self.messages(MaildirSource(root))], ["1700000003.d.host"])

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

    def test_internalDateFromMtime(self) -> None:
        """
        When the name has no plausible leading timestamp (none, a counter, a
        time before 1980 or after 2099), INTERNALDATE is the file's mtime.
        """
        root = self.maildir()
        names = ["msg.host", "12", "100000000.x", "5000000000.x", "1700000000x.y"]
        for i, name in enumerate(names):
            deliver(root, "cur", name + ":2,S", mtime=1400000000 + i)
        self.assertEqual(
            [(m.key, m.internalDate) for m in self.messages(MaildirSource(root))],
            [(name, utcFromTimestamp(1400000000 + i)) for i, name in enumerate(names)],
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
        A file name that is not UTF-8 gives a key with its undecodable bytes
        shown as C{\\xNN}, and the file is read through that key.
        """
        root = self.maildir()
        deliver(root, "cur", os.fsdecode(b"1700000000.caf\xe9:2,S"), b"x\n")
        source = MaildirSource(root)
        [message] = self.messages(source)
        self.assertEqual(message.key, "1700000000.caf\\xe9")
        self.assertEqual(displayableName(message.key), message.key)
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
        Listing a folder whose C{cur/} cannot be read fails with
        L{SourceError} naming it.
        """
        root = self.maildir()
        cur = os.path.join(root, "cur")
        denyAccess(self, cur)
        failure = self.failureResultOf(MaildirSource(root).listMessages(INBOX), SourceError)
        self.assertIn(root, str(failure.value))
        self.assertIn("Permission denied", str(failure.value))

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
        so, with its path.
        """
        root = self.maildir()
        path = deliver(root, "cur", "1700000000.a.host:2,S")
        denyAccess(self, path)
        source = MaildirSource(root)
        self.assertEqual(
            self.bodies(source, self.messages(source)),
            [UnreadableMessage(f"permission denied: {path}")],
        )


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
        import random

        import imapmig.sources.maildir as module
        from imapmig.message import StreamedBody, toCRLF
        from imapmig.sources.maildir import readMessageFile

        self.patch(module, "LARGE_FILE", 4)
        self.patch(module, "_CHUNK", 7)
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
        import imapmig.sources.maildir as module
        from imapmig.message import StreamedBody
        from imapmig.sources.maildir import readMessageFile

        self.patch(module, "LARGE_FILE", 16)
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
        import imapmig.sources.maildir as module
        from imapmig.message import StreamedBody
        from imapmig.sources.maildir import readMessageFile

        self.patch(module, "LARGE_FILE", 16)
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
        import imapmig.sources.maildir as module
        from imapmig.message import StreamedBody
        from imapmig.sources.maildir import readMessageFile

        self.patch(module, "LARGE_FILE", 16)
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
        from imapmig.sources.maildir import readMessageFile

        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\n" * 100)
        realFstat = os.fstat

        class Shrunk:
            def __init__(self, fd: int) -> None:
                self.st_size = realFstat(fd).st_size - 150

        self.patch(os, "fstat", Shrunk)
        self.assertEqual(readMessageFile(path), b"a\r\n" * 100)

    def test_listedSizeReadWithoutFstat(self) -> None:
        """
        Given the size the listing saw, a small file is read with no
        C{fstat}; a file that shrank since is read as it is now.
        """
        from imapmig.sources.maildir import readMessageFile

        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\n" * 100)

        def noFstat(fd: int) -> os.stat_result:
            raise AssertionError("fstat called")

        self.patch(os, "fstat", noFstat)
        self.assertEqual(readMessageFile(path, 200), b"a\r\n" * 100)
        self.assertEqual(readMessageFile(path, 5000), b"a\r\n" * 100)

    def test_grewSinceListed(self) -> None:
        """
        A file that grew since it was listed is read to its end; one that
        grew past the large-file threshold is streamed.
        """
        import imapmig.sources.maildir as module
        from imapmig.message import StreamedBody
        from imapmig.sources.maildir import readMessageFile

        self.patch(module, "LARGE_FILE", 1000)
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

    def test_subdirectoryDescriptors(self) -> None:
        """
        Files are looked up by name in C{cur/} and C{new/}, each opened
        once; a file or a subdirectory that is gone gives L{None}; the
        descriptors are closed on leaving.
        """
        from imapmig.sources.maildir import _SubdirectoryDescriptors

        folder = self.mktemp()
        os.makedirs(os.path.join(folder, "cur"))
        with open(os.path.join(folder, "cur", "m1:2,S"), "wb") as f:
            f.write(b"x" * 7)
        before = len(os.listdir("/proc/self/fd"))
        with _SubdirectoryDescriptors(folder) as descriptors:
            status = descriptors.stat(0, "m1:2,S")
            assert status is not None
            self.assertEqual(status.st_size, 7)
            self.assertIsNone(descriptors.stat(0, "gone"))
            self.assertIsNone(descriptors.stat(1, "m2"))
            self.assertEqual(len(os.listdir("/proc/self/fd")), before + 1)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)
