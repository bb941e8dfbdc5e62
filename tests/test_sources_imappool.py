"""
Tests for L{imapmig.sources.imappool}: which connection of an IMAP
source's pool a call runs on.

The pool's calls against a scripted server (opening, dropping, an extra
connection refused) are tested through the facade in
L{tests.test_sources_imap}; these check the choice alone, on connections
whose sessions are stand-ins, and the size of a source connection's reads.
"""

from __future__ import annotations

import socket
from typing import cast

from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.session import IMAPSession
from imapmig.sources.imappool import SOURCE_READ_BYTES, PooledSession, SessionPool, widenReads


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


class _Wrapper:
    """
    A transport wrapping another, as Twisted's TLS and imapmig's COMPRESS
    wrappers do (C{transport}: the wrapped one).
    """

    def __init__(self, transport: object) -> None:
        self.transport = transport


class _Session:
    """
    A stand-in for a logged-in session: its client's transport only.
    """

    def __init__(self, transport: object) -> None:
        self.client = _Wrapper(None)
        self.client.transport = transport


class WidenReadsTests(SynchronousTestCase):
    """
    L{widenReads}: a source connection's reads of L{SOURCE_READ_BYTES}.
    """

    def connection(self) -> tcp.Connection:
        """
        A TCP transport on one end of a socket pair (both closed after the
        test).
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        return tcp.Connection(ours, Protocol(), MemoryReactor())

    def test_underWrappers(self) -> None:
        """
        The TCP transport itself (plain, or after STARTTLS) or under
        wrappers (implicit TLS, COMPRESS) reads L{SOURCE_READ_BYTES} at a
        time; a transport with no TCP transport under it is left alone.
        """
        self.assertGreater(SOURCE_READ_BYTES, tcp.Connection.bufferSize)
        for wrappers in range(3):
            connection = self.connection()
            transport: object = connection
            for _ in range(wrappers):
                transport = _Wrapper(transport)
            self.assertTrue(widenReads(transport))
            self.assertEqual(connection.bufferSize, SOURCE_READ_BYTES)
        memory = StringTransport()
        self.assertFalse(widenReads(memory))
        self.assertFalse(widenReads(_Wrapper(None)))

    def test_poolWidensItsSessions(self) -> None:
        """
        Each session the pool opens reads L{SOURCE_READ_BYTES} at a time.
        """
        connection = self.connection()

        async def opened() -> IMAPSession:
            return cast(IMAPSession, _Session(_Wrapper(connection)))

        pool = SessionPool(opened, "alice", 1, None, None)
        self.successResultOf(pool.open())
        self.assertEqual(connection.bufferSize, SOURCE_READ_BYTES)
