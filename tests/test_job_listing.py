"""
Tests for L{imapmig.job.listing.SourceListing}: an IMAP source's folders
listed side by side over its connections.
"""

from __future__ import annotations

import os
from typing import Sequence

from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.internet.task import Clock, Cooperator
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import SourceError
from imapmig.imap.session import IMAPSession
from imapmig.job.attempt import RunStop
from imapmig.job.listing import SourceListing
from imapmig.mail.folders import FolderRules
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.progress import JobProgress
from imapmig.sources.imap import IMAPSource
from imapmig.sources.maildir import MaildirSource
from imapmig.state.memory import MemoryStateStore


async def _neverOpened() -> IMAPSession:
    raise AssertionError("the fake source opens no connection")


class _AnsweredSource(IMAPSource):
    """
    An L{IMAPSource} whose listings are answered by the test: each
    L{listMessages} is recorded with the Deferred it returns.
    """

    def __init__(self, folders: Sequence[str], connections: int, inOrder: bool = False) -> None:
        super().__init__(_neverOpened, connections=connections)
        self.folders = [SourceFolder(path=(name,), key=name) for name in folders]
        self.asked: list[tuple[str, Deferred[Sequence[SourceMessage]]]] = []
        self._inOrder = inOrder

    @property
    def listingWindow(self) -> int:
        return 1 if self._inOrder else super().listingWindow

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        return succeed(self.folders)

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        answer: Deferred[Sequence[SourceMessage]] = Deferred()
        self.asked.append((folder.key, answer))
        return answer


def _message(key: str) -> SourceMessage:
    return SourceMessage(key=key, flags=(), internalDate=None, size=10)


class SideBySideListingTests(SynchronousTestCase):
    """
    L{SourceListing.listSource} on an IMAP source.
    """

    def listing(
        self, source: IMAPSource, stop: RunStop | None = None, clock: Clock | None = None
    ) -> SourceListing:
        clock = clock or Clock()
        return SourceListing(
            "j",
            source,
            MemoryStateStore(),
            FolderRules(),
            JobProgress("j", clock.seconds),
            clock,
            stop or RunStop(),
        )

    def test_nextFolderAskedWhileOneIsListed(self) -> None:
        """
        With two connections, the second folder is asked for before the
        first's listing is answered, never more than two at once; the
        result keeps the folders' order whatever order the answers come
        in.
        """
        source = _AnsweredSource(["INBOX", "Sent", "Trash"], connections=2)
        result = Deferred.fromCoroutine(self.listing(source).listSource(succeed(None)))
        self.assertEqual([key for key, _ in source.asked], ["INBOX", "Sent"])
        source.asked[1][1].callback([_message("s1")])
        self.assertEqual(len(source.asked), 2)
        source.asked[0][1].callback([_message("i1")])
        self.assertEqual([key for key, _ in source.asked], ["INBOX", "Sent", "Trash"])
        source.asked[2][1].callback([])
        listed, unreadable = self.successResultOf(result)
        self.assertEqual(
            [(folder.key, [m.key for m in messages]) for folder, messages, _ in listed],
            [("INBOX", ["i1"]), ("Sent", ["s1"]), ("Trash", [])],
        )
        self.assertEqual(unreadable, [])

    def test_oneAtATimeInOrder(self) -> None:
        """
        Where the source says its folders are listed in order (label views
        de-duplicated), or it has one connection, the next folder is asked
        for only once the one before is listed.
        """
        for source in [
            _AnsweredSource(["INBOX", "Sent"], connections=2, inOrder=True),
            _AnsweredSource(["INBOX", "Sent"], connections=1),
        ]:
            result = Deferred.fromCoroutine(self.listing(source).listSource(succeed(None)))
            self.assertEqual([key for key, _ in source.asked], ["INBOX"])
            source.asked[0][1].callback([])
            self.assertEqual([key for key, _ in source.asked], ["INBOX", "Sent"])
            source.asked[1][1].callback([])
            self.assertEqual(len(self.successResultOf(result)[0]), 2)

    def test_unreadableFolderInPlace(self) -> None:
        """
        A folder whose listing fails is named unreadable; the folders
        asked for beside it are still listed.
        """
        source = _AnsweredSource(["INBOX", "Sent", "Trash"], connections=2)
        result = Deferred.fromCoroutine(self.listing(source).listSource(succeed(None)))
        source.asked[1][1].callback([])
        source.asked[0][1].errback(SourceError("no"))
        source.asked[2][1].callback([])
        listed, unreadable = self.successResultOf(result)
        self.assertEqual([folder.key for folder, _, _ in listed], ["Sent", "Trash"])
        self.assertEqual(unreadable, ["INBOX: no"])

    def test_stopDropsWhatWasAskedAhead(self) -> None:
        """
        A stop ends the listing once the folder being listed is: a listing
        asked for ahead is dropped, and its failure afterwards is not left
        unhandled.
        """
        stop = RunStop()
        source = _AnsweredSource(["INBOX", "Sent", "Trash"], connections=2)
        result = Deferred.fromCoroutine(self.listing(source, stop).listSource(succeed(None)))
        stop.requested = True
        source.asked[0][1].callback([])
        listed, unreadable = self.successResultOf(result)
        self.assertEqual(([folder.key for folder, _, _ in listed], unreadable), (["INBOX"], []))
        source.asked[1][1].errback(SourceError("late"))
        self.assertEqual(len(source.asked), 2)
        self.flushLoggedErrors(SourceError)

    def test_connectionTurnBeforeFirstFolder(self) -> None:
        """
        While the destination connection is still opening, the reactor
        runs once before the first folder is listed, not only between
        folders: Twisted's TCP client issues its connect() on the
        reactor's next turn, and a Maildir folder is listed without
        yielding, so the first (largest) folder's listing would otherwise
        hold the connection back.
        """
        clock = Clock()
        source = _AnsweredSource(["INBOX", "Sent"], connections=1)
        opening: Deferred[None] = Deferred()
        result = Deferred.fromCoroutine(self.listing(source, clock=clock).listSource(opening))
        self.assertEqual(source.asked, [])
        clock.advance(0)
        self.assertEqual([key for key, _ in source.asked], ["INBOX"])
        source.asked[0][1].callback([])
        self.assertEqual(len(source.asked), 1)
        clock.advance(0)
        self.assertEqual([key for key, _ in source.asked], ["INBOX", "Sent"])
        opening.callback(None)
        source.asked[1][1].callback([])
        self.assertEqual(len(self.successResultOf(result)[0]), 2)
        self.assertEqual(clock.getDelayedCalls(), [])


class _InTurnsMaildir(MaildirSource):
    """
    A Maildir source listing one file a turn.
    """

    def listMessagesInTurns(
        self, folder: SourceFolder, cooperator: Cooperator, turn: int = 1
    ) -> Deferred[Sequence[SourceMessage]]:
        return super().listMessagesInTurns(folder, cooperator, 1)


class MaildirInTurnsTests(SynchronousTestCase):
    """
    L{SourceListing.listSource} lists a Maildir folder in turns of the
    job's reactor.
    """

    def test_reactorRunsWhileListing(self) -> None:
        """
        A Maildir folder of more files than a turn takes is listed over
        turns of the job's reactor: the listing is not done until it has
        run.
        """
        root = self.mktemp()
        for subdir in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(root, subdir))
        for n in range(3):
            with open(os.path.join(root, "cur", f"170000000{n}.m{n}.host:2,S"), "wb") as f:
                f.write(b"Subject: x\n\nbody\n")
        clock = Clock()
        listing = SourceListing(
            "j",
            _InTurnsMaildir(root),
            MemoryStateStore(),
            FolderRules(),
            JobProgress("j", clock.seconds),
            clock,
            RunStop(),
        )
        listed = ensureDeferred(listing.listSource(succeed(None)))
        self.assertNoResult(listed)
        clock.advance(0)
        [(folder, messages, changes)], unreadable = self.successResultOf(listed)
        self.assertEqual(folder.key, "")
        self.assertEqual(len(messages), 3)
        self.assertEqual((changes, unreadable), ((), []))
