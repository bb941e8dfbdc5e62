"""
Tests for L{imapmig.sources.imappool}: which connection of an IMAP
source's pool a call runs on.

The pool's calls against a scripted server (opening, dropping, an extra
connection refused) are tested through the facade in
L{tests.test_sources_imap}; these check the choice alone, on connections
whose sessions are stand-ins.
"""

from __future__ import annotations

from typing import cast

from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.session import IMAPSession
from imapmig.sources.imappool import PooledSession, SessionPool


async def _neverOpened() -> IMAPSession:
    raise AssertionError("choosing opens nothing")


class ChooseTests(SynchronousTestCase):
    """
    L{SessionPool.choose}.
    """

    def pool(
        self, connections: int, *examined: str | None
    ) -> tuple[SessionPool, list[PooledSession]]:
        """
        A pool of C{connections} at most, holding one open connection per
        folder of C{examined} (L{None}: no folder open).
        """
        pool = SessionPool(_neverOpened, "alice", connections, None, None)
        readers = []
        for key in examined:
            # Each busy meanwhile, so that the pool grows.
            reader = pool.choose(key)
            reader.lock.acquire()
            reader.session = cast(IMAPSession, object())
            reader.examined = key
            readers.append(reader)
        for reader in readers:
            reader.lock.release()
        self.assertEqual(len(set(map(id, readers))), len(readers))
        return pool, readers

    def test_folderOpen(self) -> None:
        """
        A call about a folder runs on the idle connection that has it open,
        rather than one with no folder open.
        """
        pool, (_, sent) = self.pool(2, None, "Sent")
        self.assertIs(pool.choose("Sent"), sent)

    def test_noFolderOpen(self) -> None:
        """
        Without one that has its folder open, a call runs on an idle
        connection with no folder open rather than a new one.
        """
        pool, (inbox, unused) = self.pool(3, "INBOX", None)
        self.assertIs(pool.choose("Sent"), unused)

    def test_grows(self) -> None:
        """
        While the pool may grow, a call opens a connection of its own
        rather than close another worker's folder.
        """
        pool, (inbox,) = self.pool(2, "INBOX")
        chosen = pool.choose("Sent")
        self.assertIsNot(chosen, inbox)
        self.assertIsNone(chosen.session)

    def test_anotherFolder(self) -> None:
        """
        At its size, the pool runs a call on an idle connection with
        another folder open rather than one not opened yet.
        """
        pool, (inbox,) = self.pool(2, "INBOX")
        unopened = pool.choose("Sent")
        self.assertIsNone(unopened.session)
        self.assertIs(pool.choose("Drafts"), inbox)

    def test_unopenedIdle(self) -> None:
        """
        An idle connection not opened yet comes before a busy one.
        """
        pool, (inbox,) = self.pool(2, "INBOX")
        unopened = pool.choose("Sent")
        inbox.lock.acquire()
        self.assertIs(pool.choose("INBOX"), unopened)

    def test_noFolder(self) -> None:
        """
        A call about no folder runs on the first idle open connection,
        whatever it has open.
        """
        pool, (inbox, sent) = self.pool(2, "INBOX", "Sent")
        inbox.lock.acquire()
        self.assertIs(pool.choose(None), sent)

    def test_busyWithFolder(self) -> None:
        """
        When every connection is busy, a call waits for the one with its
        folder open, however many wait for it.
        """
        pool, (inbox, sent) = self.pool(2, "INBOX", "Sent")
        for reader in (inbox, sent):
            reader.lock.acquire()
        sent.lock.acquire()
        self.assertIs(pool.choose("Sent"), sent)

    def test_leastBusy(self) -> None:
        """
        When every connection is busy and none has the folder open, a call
        waits for the one with the fewest calls waiting (the first of
        those).
        """
        pool, (inbox, sent, drafts) = self.pool(3, "INBOX", "Sent", "Drafts")
        for reader in (inbox, sent, drafts):
            reader.lock.acquire()
        inbox.lock.acquire()
        self.assertIs(pool.choose("Trash"), sent)
        self.assertIs(pool.choose(None), sent)
