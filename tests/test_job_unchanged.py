"""
Tests for L{imapmig.job.listing}'s unchanged folders: a later pass over a
Maildir leaves a folder unlisted when its fingerprint is the one recorded
after the last completed pass, and lists it whenever that cannot be
trusted (a change since, a change within the racy window of the
recording, a pass that did not copy everything).  The real
L{MigrationJob} over the fake server, as in L{tests.test_job}.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import Cooperator
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings, MigrationJob
from imapmig.job.listing import RACY_WINDOW
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.sources.maildir import LISTING_TURN, MaildirSource
from imapmig.state import JournalMessage
from tests.test_job import JOB, USER, JobHarness, appendLines, memoryOpener
from tests.test_sources_labelviews import ALL_MAIL, GMAIL_USER, GmailAccount, _populate

# Directory mtimes set in the past, well before the clock's time: a
# fingerprint taken then is not racy.  The clock runs an hour ahead of the
# real time, since a directory's ctime, in the fingerprint, is the real
# time of its last change (setting its mtime back is one).
_OLD = 1_700_000_000
_NOW = float(int(time.time()) + 3600)


def _write(directory: str, name: str, body: bytes) -> None:
    with open(os.path.join(directory, name), "wb") as f:
        f.write(body)


def _age(root: str) -> None:
    """
    Set every C{cur/} and C{new/} of the Maildir C{root} to an mtime in the
    past (as they are when nothing was delivered for a while).
    """
    for dirpath, dirnames, _ in os.walk(root):
        for name in dirnames:
            if name in ("cur", "new"):
                os.utime(os.path.join(dirpath, name), ns=(_OLD * 10**9, _OLD * 10**9))


def _body(n: int) -> bytes:
    return b"Subject: m%d\r\nMessage-ID: <m%d@unchanged>\r\n\r\nbody %d\r\n" % (n, n, n)


class _CountingMaildir(MaildirSource):
    """
    A L{MaildirSource} that counts each folder's listings, and whose
    fingerprint may be fixed by the test.

    @ivar listed: the keys of the folders listed, in order.
    @ivar fixed: if set, the fingerprint every folder has.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.listed: list[str] = []
        self.fixed: tuple[str, float] | None = None

    def listMessagesInTurns(
        self, folder: SourceFolder, cooperator: Cooperator, turn: int = LISTING_TURN
    ) -> Deferred[Sequence[SourceMessage]]:
        self.listed.append(folder.key)
        return super().listMessagesInTurns(folder, cooperator, turn)

    def fingerprint(self, folder: SourceFolder) -> tuple[str, float] | None:
        return self.fixed if self.fixed is not None else super().fingerprint(folder)


class UnchangedFolderTests(SynchronousTestCase):
    """
    Later passes over a Maildir source.
    """

    def setUp(self) -> None:
        self.root = self.mktemp()
        for sub in ("cur", "new", "tmp", ".Sent/cur", ".Sent/new", ".Sent/tmp"):
            os.makedirs(os.path.join(self.root, sub))
        for n in range(3):
            _write(os.path.join(self.root, "cur"), f"{_OLD + n}.M{n}P1.host,S=10:2,S", _body(n))
            _write(os.path.join(self.root, ".Sent", "cur"), f"{_OLD + n}.M{n}P2.host:2,", _body(10 + n))
        _age(self.root)
        self.harness = JobHarness(self)
        self.harness.clock.advance(_NOW)
        self.source = _CountingMaildir(self.root)

    def job(self, settings: JobSettings = JobSettings(connections=1)) -> MigrationJob:
        h = self.harness
        return MigrationJob(
            JOB, self.source, h.store, h.progress, memoryOpener(h.endpoint, h.clock), h.clock,
            settings, jitter=lambda: 0.0,
        )  # fmt: skip

    def runAgain(self, job: MigrationJob) -> list[bytes]:
        """
        Run C{job} once more; the APPEND lines of its connection.
        """
        self.source.listed.clear()
        self.assertTrue(self.harness.run(job))
        return appendLines(self.harness.endpoint.servers[-1])

    def test_unchangedNotListed(self) -> None:
        """
        A pass over an unchanged Maildir lists no folder, opens no mailbox
        and appends nothing, and still counts every message and octet as
        in the destination.
        """
        job = self.job()
        self.assertTrue(self.harness.run(job))
        self.assertEqual(self.source.listed, ["", ".Sent"])
        progress = self.harness.progress
        totals = (progress.messagesTotal, progress.bytesTotal)
        self.assertEqual(self.runAgain(job), [])
        self.assertEqual(self.source.listed, [])
        self.assertFalse(
            any(b"SELECT" in line for line in self.harness.endpoint.servers[-1].received)
        )
        self.assertEqual(
            (progress.messagesTotal, progress.bytesTotal, progress.messagesDone,
             progress.bytesDone, progress.messagesAlreadyMigrated),
            (*totals, 6, totals[1], 6),
        )  # fmt: skip
        self.assertEqual(totals[0], 6)
        self.assertEqual(list(progress.folders), ["", ".Sent"])
        self.assertEqual(progress.folders[".Sent"].messagesDone, 3)

    def test_addedMessageCopied(self) -> None:
        """
        A message delivered since the last pass changes its folder's
        fingerprint: that folder alone is listed and the message copied.
        """
        job = self.job()
        self.assertTrue(self.harness.run(job))
        _write(os.path.join(self.root, ".Sent", "new"), "1800000000.M9P2.host", _body(99))
        self.assertEqual(len(self.runAgain(job)), 1)
        self.assertEqual(self.source.listed, [".Sent"])
        self.assertEqual(len(self.harness.mail.mailbox(USER, "Sent")), 4)
        self.assertEqual(self.harness.progress.messagesTotal, 7)

    def test_addedInTheRacyWindow(self) -> None:
        """
        A fingerprint whose newest mtime is within L{RACY_WINDOW} of the
        time it was taken is not recorded: a message delivered in the same
        clock tick, which leaves the fingerprint as it was, is still
        copied by the next pass.
        """
        self.source.fixed = ("same", _NOW - RACY_WINDOW / 2)
        job = self.job()
        self.assertTrue(self.harness.run(job))
        _write(os.path.join(self.root, "new"), "1800000000.M9P1.host", _body(99))
        self.assertEqual(len(self.runAgain(job)), 1)
        self.assertEqual(self.source.listed, ["", ".Sent"])
        self.assertEqual(len(self.harness.mail.mailbox(USER, "INBOX")), 4)

    def test_outsideTheRacyWindow(self) -> None:
        """
        The same fingerprint, older than the racy window when taken, is
        recorded, and the next pass trusts it.
        """
        self.source.fixed = ("same", _NOW - RACY_WINDOW * 2)
        job = self.job()
        self.assertTrue(self.harness.run(job))
        self.assertEqual(self.runAgain(job), [])
        self.assertEqual(self.source.listed, [])

    def test_renamedIntoPlace(self) -> None:
        """
        Two folders of the same counts, names and times swapped (each
        renamed into the other's place) are both listed, and each one's
        messages copied into the other's mailbox: the same times and sizes,
        not the same directories.
        """
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(self.root, ".Archive", sub))
        for n in range(3):
            _write(os.path.join(self.root, ".Archive", "cur"), f"{_OLD + n}.M{n}P3.host:2,", _body(20 + n))
        _age(self.root)
        job = self.job()
        self.assertTrue(self.harness.run(job))
        self.assertEqual(len(self.harness.mail.mailbox(USER, "Archive")), 3)
        swap = os.path.join(self.root, ".Swap")
        os.rename(os.path.join(self.root, ".Sent"), swap)
        os.rename(os.path.join(self.root, ".Archive"), os.path.join(self.root, ".Sent"))
        os.rename(swap, os.path.join(self.root, ".Archive"))
        self.runAgain(job)
        self.assertEqual(sorted(self.source.listed), [".Archive", ".Sent"])
        for mailbox in ("Sent", "Archive"):
            self.assertEqual(len(self.harness.mail.mailbox(USER, mailbox)), 6)

    def test_restoredKeepingTimes(self) -> None:
        """
        A message replaced by another of a name as long, and C{cur/}'s
        mtime set back as it was (a restore that keeps times): the same
        inode, mtime and size, only the ctime changed.  The folder is
        listed and the new message copied.  (The kernel keeps ctimes to
        its clock tick, a few milliseconds: the first pass, between the
        setting of the times in C{setUp} and the change here, takes
        longer.)
        """
        job = self.job()
        self.assertTrue(self.harness.run(job))
        cur = os.path.join(self.root, ".Sent", "cur")
        before = os.stat(cur)
        os.unlink(os.path.join(cur, f"{_OLD}.M0P2.host:2,"))
        _write(cur, f"{_OLD}.M7P2.host:2,", _body(17))
        os.utime(cur, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(cur)
        self.assertEqual(
            (after.st_ino, after.st_mtime_ns, after.st_size),
            (before.st_ino, before.st_mtime_ns, before.st_size),
        )
        self.assertEqual(len(self.runAgain(job)), 1)
        self.assertEqual(self.source.listed, [".Sent"])
        self.assertEqual(len(self.harness.mail.mailbox(USER, "Sent")), 4)

    def test_flagChangeListed(self) -> None:
        """
        A flag change (a file renamed in C{cur/}) changes the folder's
        fingerprint: the folder is listed again, and, as before
        fingerprints, nothing is appended (a Maildir source's flag
        changes are not carried to copies made already).
        """
        job = self.job()
        self.assertTrue(self.harness.run(job))
        cur = os.path.join(self.root, "cur")
        os.rename(
            os.path.join(cur, f"{_OLD}.M0P1.host,S=10:2,S"),
            os.path.join(cur, f"{_OLD}.M0P1.host,S=10:2,FS"),
        )
        self.assertEqual(self.runAgain(job), [])
        self.assertEqual(self.source.listed, [""])

    def test_journalListsEveryFolder(self) -> None:
        """
        A pass that finds messages still journaled (in flight when an
        earlier pass ended) lists every folder, unchanged or not: the
        journal is settled by reading those messages again from the
        listing.
        """
        job = self.job()
        self.assertTrue(self.harness.run(job))
        key = f"{_OLD}.M0P1.host,S=10"
        entry = JournalMessage("", key, len(_body(0)), _body(0)[:4])
        self.successResultOf(self.harness.store.journalBatch(JOB, "INBOX", None, None, [entry]))
        self.assertEqual(self.runAgain(job), [])
        self.assertEqual(self.source.listed, ["", ".Sent"])
        self.assertEqual(self.successResultOf(self.harness.store.journal(JOB)), [])
        self.assertEqual(len(self.harness.mail.mailbox(USER, "INBOX")), 3)

    def test_failedPassListedAgain(self) -> None:
        """
        After a pass in which a message failed, no fingerprint is
        recorded: the next pass lists every folder (and tries the failed
        message again).
        """
        h = self.harness = JobHarness(
            self, refuse=lambda b: "NO [LIMIT] too big" if b == _body(11) else None
        )
        h.clock.advance(_NOW)
        job = self.job()
        self.assertTrue(h.run(job))
        self.assertEqual(h.progress.messagesFailed, 1)
        self.runAgain(job)
        self.assertEqual(self.source.listed, ["", ".Sent"])

    def test_interruptedPassListedAgain(self) -> None:
        """
        A run that ended part way (the connection dropped, no other
        accepted) records no fingerprint; the run after lists the folders
        and copies the rest.
        """
        refused = list(range(1, 1000))
        h = self.harness = JobHarness(self, dropAfterAppends=2, refuseConnections=refused)
        h.clock.advance(_NOW)
        job = self.job(JobSettings(connections=1, batchMessages=1))
        self.assertFalse(h.run(job))
        del refused[:]
        self.source.listed.clear()
        self.assertTrue(h.run(job))
        self.assertEqual(self.source.listed[:2], ["", ".Sent"])
        self.assertEqual(
            len(h.mail.mailbox(USER, "INBOX")) + len(h.mail.mailbox(USER, "Sent")), 6
        )


class UnchangedIMAPFolderTests(SynchronousTestCase):
    """
    Later passes over an IMAP source: a folder whose STATUS is as its mark
    records is not planned (its records are not read).
    """

    def test_unchangedNotPlanned(self) -> None:
        """
        A second pass over an unchanged account reads no folder's records
        and appends nothing, with the same totals; a message delivered
        since into one folder has that folder alone planned, and copied.
        """
        account = GmailAccount(self)
        _populate(account)
        asked = self.recordedReads(account)
        self.assertTrue(account.harness.run(account.job(account.source("copy"))))
        progress = account.harness.progress
        totals = (progress.messagesTotal, progress.bytesTotal)
        self.assertEqual(totals[0], 14)
        del asked[:]
        self.assertTrue(account.harness.run(account.job(account.source("copy"))))
        self.assertEqual(asked, [])
        self.assertEqual((progress.messagesTotal, progress.bytesTotal), totals)
        self.assertEqual((progress.messagesDone, progress.bytesDone), totals)
        account.deliver(7, ["Work"])
        self.assertTrue(account.harness.run(account.job(account.source("copy"))))
        self.assertEqual(asked, [["Work", ALL_MAIL]])
        self.assertEqual(account.numbers("Work"), [2, 4, 7])
        self.assertEqual(progress.messagesTotal, 16)
        account.harness.finish()

    def recordedReads(self, account: GmailAccount) -> list[list[str]]:
        """
        The folders whose records each read of C{account}'s state store asks
        for, sorted, one list per read, as the runs go.
        """
        store = account.harness.store
        asked: list[list[str]] = []
        read = store.destinationMaps

        def destinationMaps(job: str, keys: Sequence[str]) -> Deferred[Any]:
            asked.append(sorted(keys))
            return read(job, keys)

        self.patch(store, "destinationMaps", destinationMaps)
        return asked

    def plannedAgain(self, account: GmailAccount, change: Callable[[], None]) -> list[list[str]]:
        """
        Run a job over C{account} (populated) twice, C{change} between the
        runs; the folders whose records the second run read.
        """
        _populate(account)
        asked = self.recordedReads(account)
        self.assertTrue(account.harness.run(account.job(account.source("copy"))))
        change()
        del asked[:]
        self.assertTrue(account.harness.run(account.job(account.source("copy"))))
        return asked

    def test_expungedAndDeliveredWithoutCondstore(self) -> None:
        """
        On a server without CONDSTORE (no HIGHESTMODSEQ in the marks), a
        message expunged from a folder and another delivered into it
        leave its MESSAGES as it was, but move UIDNEXT: the folder is
        planned, the new message copied.  Also where the server does not
        announce UIDNEXT (it is then the listing's highest UID + 1).
        """
        for announce in (True, False):
            account = GmailAccount(self)
            account.mail.announceUIDNext = announce

            def change() -> None:
                mark = self.successResultOf(account.harness.store.folderMark(JOB, "Work"))
                assert mark is not None
                self.assertEqual((mark.highestModSeq, mark.messages), (None, 2))
                account.mail.expunge(GMAIL_USER, "Work", account.body(2))
                account.deliver(7, ["Work"])

            asked = self.plannedAgain(account, change)
            self.assertIn("Work", sum(asked, []))
            self.assertEqual(account.numbers("Work"), [2, 4, 7])
            mark = self.successResultOf(account.harness.store.folderMark(JOB, "Work"))
            assert mark is not None
            self.assertEqual(mark.messages, 2)
            account.harness.finish()

    def test_renumbered(self) -> None:
        """
        A folder renumbered by its server (a new UIDVALIDITY, the same
        UIDs, UIDNEXT and MESSAGES) is planned whole, and its mark takes
        the new UIDVALIDITY.
        """
        account = GmailAccount(self)
        renumbered: list[int] = []
        asked = self.plannedAgain(
            account, lambda: renumbered.append(account.mail.renumber(GMAIL_USER, "Work"))
        )
        self.assertIn("Work", sum(asked, []))
        mark = self.successResultOf(account.harness.store.folderMark(JOB, "Work"))
        assert mark is not None
        self.assertEqual((mark.uidValidity, mark.uidNext, mark.messages), (renumbered[0], 3, 2))
        self.assertEqual(account.numbers("Work"), [2, 4])
        account.harness.finish()
