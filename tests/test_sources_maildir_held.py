"""
Tests for the Maildir folders held open between read steps
(L{imapmig.sources.maildir.opened.HeldFolders}, as
L{imapmig.sources.maildir.MaildirSource.readBodies} uses them): no descriptor
left open when a folder is done, on errors, when a job's attempt ends, and
no more held than the bound however many sources read.
"""

from __future__ import annotations

import os

from imapmig.mail.message import SourceFolder, SourceMessage, UnreadableMessage
from imapmig.sources.maildir import MaildirSource
from imapmig.sources.maildir.opened import HELD_FOLDERS, HeldFolders, OpenFolder
from tests.test_sources_maildir import INBOX, MaildirTestCase, deliver, makeFolder


def openDescriptors() -> int:
    """
    How many descriptors this process has open.
    """
    return len(os.listdir("/proc/self/fd"))


class HeldFoldersTests(MaildirTestCase):
    """
    L{MaildirSource.readBodies} keeps a folder's directories open from one
    read step to the next, and closes them when the folder is done.
    """

    def setUp(self) -> None:
        self.held = HeldFolders(4)
        self.root = self.maildir()
        for n in range(3):
            deliver(self.root, "cur", f"170000000{n}.m{n}.host:2,S", b"m%d\n" % n)
        self.source = MaildirSource(self.root, self.held)
        self.addCleanup(self.source.close)
        self.before = openDescriptors()
        self.listed = self.messages(self.source)

    def test_heldUntilLastMessage(self) -> None:
        """
        After a step that does not read the listing's last message the
        folder stays open (the Maildir, C{cur/} and C{new/}: three
        descriptors), the next step reads with the same descriptors, and
        the step reading the last message closes them.
        """
        self.assertEqual(self.bodies(self.source, self.listed[:1]), [b"m0\r\n"])
        self.assertEqual((len(self.held), openDescriptors()), (1, self.before + 3))
        folder = self.held.take(self.source, "")
        assert folder is not None
        self.held.hold(self.source, "", folder)
        self.assertEqual(self.bodies(self.source, self.listed[1:2]), [b"m1\r\n"])
        self.assertIs(self.held.take(self.source, ""), folder)
        self.held.hold(self.source, "", folder)
        self.assertEqual(self.bodies(self.source, self.listed[2:]), [b"m2\r\n"])
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))

    def test_close(self) -> None:
        """
        L{MaildirSource.close} closes the folders the source holds, not
        another source's.
        """
        other = MaildirSource(self.root, self.held)
        self.addCleanup(other.close)
        self.bodies(other, self.messages(other)[:1])
        self.bodies(self.source, self.listed[:1])
        self.assertEqual(openDescriptors(), self.before + 6)
        self.source.close()
        self.assertEqual((len(self.held), openDescriptors()), (1, self.before + 3))
        other.close()
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))

    def test_listedAgain(self) -> None:
        """
        Listing the folder again (a new pass) closes it: its next reads
        open it afresh.
        """
        self.bodies(self.source, self.listed[:1])
        self.messages(self.source)
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))
        self.assertEqual(self.bodies(self.source, self.listed[1:2]), [b"m1\r\n"])

    def test_error(self) -> None:
        """
        A step that fails with an exception closes the folder, held or
        opened for it.
        """
        self.bodies(self.source, self.listed[:1])

        def fail(*args: object) -> int:
            raise RuntimeError("a bug")

        self.patch(OpenFolder, "readListed", fail)
        self.assertRaises(RuntimeError, self.source.readBodies, INBOX, self.listed[1:2])
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))
        self.assertRaises(RuntimeError, self.source.readBodies, INBOX, self.listed[1:2])
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))

    def test_rescanned(self) -> None:
        """
        A step that scanned the folder again (a file renamed since the
        listing) closes it: the next step opens it afresh; a file renamed
        between two steps of a held folder is found again.
        """
        os.rename(
            os.path.join(self.root, "cur", "1700000000.m0.host:2,S"),
            os.path.join(self.root, "cur", "1700000000.m0.host:2,RS"),
        )
        self.assertEqual(self.bodies(self.source, self.listed[:1]), [b"m0\r\n"])
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))
        self.assertEqual(self.bodies(self.source, self.listed[1:2]), [b"m1\r\n"])
        self.assertEqual(len(self.held), 1)
        os.rename(
            os.path.join(self.root, "cur", "1700000002.m2.host:2,S"),
            os.path.join(self.root, "new", "1700000002.m2.host"),
        )
        self.assertEqual(self.bodies(self.source, self.listed[2:]), [b"m2\r\n"])
        self.assertEqual((len(self.held), openDescriptors()), (0, self.before))

    def test_vanishedBetweenSteps(self) -> None:
        """
        A file deleted between two steps of a held folder is an unreadable
        message naming it, as before.
        """
        self.bodies(self.source, self.listed[:1])
        gone = os.path.join(self.root, "cur", "1700000001.m1.host:2,S")
        os.unlink(gone)
        self.assertEqual(
            self.bodies(self.source, self.listed[1:2]),
            [UnreadableMessage(f"file vanished: {gone}")],
        )

    def test_bounded(self) -> None:
        """
        However many folders (of one source or of many) are read at once,
        no more than the bound are held: the one used least recently is
        closed first.
        """
        held = HeldFolders(2)
        sources = []
        for n in range(4):
            sub = makeFolder(os.path.join(self.root, f".F{n}"))
            for m in range(2):
                deliver(sub, "cur", f"170000000{m}.f{n}m{m}.host:2,S", b"x\n")
            source = MaildirSource(self.root, held)
            self.addCleanup(source.close)
            sources.append((source, SourceFolder(path=(f"F{n}",), key=f".F{n}")))
        before = openDescriptors()
        for source, folder in sources:
            self.bodies(source, self.messages(source, folder)[:1], folder)
            self.assertLessEqual(openDescriptors(), before + 6)
        self.assertEqual(len(held), 2)
        self.assertIsNone(held.take(sources[0][0], ".F0"))
        last = held.take(sources[3][0], ".F3")
        assert last is not None
        last.close()
        self.assertEqual(openDescriptors(), before + 3)

    def test_processBound(self) -> None:
        """
        By default the sources share the process's L{HELD_FOLDERS}, of a
        bound that leaves room under the usual limit of 1,024 descriptors.
        """
        source = MaildirSource(self.root)
        self.addCleanup(source.close)
        self.bodies(source, self.messages(source)[:1])
        folder = HELD_FOLDERS.take(source, "")
        assert folder is not None
        folder.close()
        self.assertLessEqual(HELD_FOLDERS.limit * 3, 128)

    def test_notListed(self) -> None:
        """
        Messages read by a source that did not list them (as after a
        restart) are read: the first step scans the folder (and closes
        it), the next ones find the scan and keep the folder open (the
        listing's last message not known).
        """
        source = MaildirSource(self.root, self.held)
        self.addCleanup(source.close)
        message = SourceMessage("1700000001.m1.host", (), None, 3)
        self.assertEqual(self.bodies(source, [message]), [b"m1\r\n"])
        self.assertEqual(self.bodies(source, [message]), [b"m1\r\n"])
        self.assertEqual(len(self.held), 1)
