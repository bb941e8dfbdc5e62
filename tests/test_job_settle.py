"""
Tests for reconciling the journal while the server may still be storing
what a connection that ended had sent (L{imapmig.job.reconcile}'s
C{settle}, L{JobSettings.journalQuiet}).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.fidelity import journalHead
from imapmig.job import JobSettings
from imapmig.job.reconcile import Candidate, CandidatePool
from imapmig.progress import JobState
from imapmig.state import JournalMessage
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer, FakeMailStore
from tests.test_job import (
    JOB,
    USER,
    JobHarness,
    MemoryEndpoint,
    appendLines,
    body,
    populate,
)

QUIET = 5.0


class StoresAfterTheCloseServer(FakeIMAPServer):
    """
    A server slow to store: it reads APPEND commands and answers none, so
    the client gives the connection up at its reply deadline; it stores
    what it had read C{delay} seconds after the connection closed, as
    Dovecot goes on through the commands it had read when the client went
    away.
    """

    def __init__(self, store: FakeMailStore, clock: Clock, delay: float) -> None:
        FakeIMAPServer.__init__(self, store, DEFAULT_CAPABILITIES)
        self._clock = clock
        self._delay = delay
        self._read: list[list[Any]] = []

    def _append(self, args: list[Any]) -> bytes | None:
        self._read.append(args)
        return None

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        FakeIMAPServer.connectionLost(self, reason)
        self._clock.callLater(self._delay, self._storeWhatWasRead)

    def _storeWhatWasRead(self) -> None:
        # Nobody is listening any more: no untagged EXISTS.
        self.selected = None
        for args in self._read:
            FakeIMAPServer._append(self, args)


def journalLeft(h: JobHarness, keys: range, present: range) -> None:
    """
    Leave the journal as a run killed while sending messages C{keys} of
    INBOX would have, the destination holding C{present} of them.
    """
    inbox = h.source.addFolder("INBOX")
    populate(h.source, inbox, len(keys))
    validity = h.mail.uidValidity(USER, "INBOX")
    h.mail.append(USER, "INBOX", [(body(n), (), None) for n in present])
    h.test.successResultOf(
        h.store.journalBatch(
            JOB, "INBOX", validity, 1,
            [JournalMessage("INBOX", f"m{n}", len(body(n)), journalHead(body(n))) for n in keys],
        )
    )  # fmt: skip


class SettleTests(SynchronousTestCase):
    """
    Journaled messages missing from the destination are sent again only
    once the destination has been quiet for L{JobSettings.journalQuiet}
    seconds: the server may still be storing them.
    """

    def test_givenUpConnectionStoresLate(self) -> None:
        """
        A connection given up at its reply deadline, whose server stores
        what it had read only after the job reconnected: the messages are
        found when they arrive during the quiet period, recorded with
        their UIDs, and not sent again; each is held once.
        """
        h = JobHarness(self)

        def makeServer(attempt: int) -> FakeIMAPServer:
            if attempt == 0:
                return StoresAfterTheCloseServer(h.mail, h.clock, 1.5)
            return FakeIMAPServer(h.mail, DEFAULT_CAPABILITIES)

        h.endpoint = MemoryEndpoint(h.clock, makeServer)
        populate(h.source, h.source.addFolder("INBOX"), 4)
        settings = JobSettings(connections=1, batchMessages=1, journalQuiet=QUIET)

        self.assertTrue(h.run(h.job(settings, identity="off")))
        # Whatever the server had still to do is done.
        h.clock.advance(60)

        h.assertHolds("INBOX", range(4))
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 4)
        self.assertEqual(appendLines(h.endpoint.servers[1]), [])
        self.assertEqual(
            sorted(o.uid for o in h.store.outcomes().values()), [1, 2, 3, 4]
        )
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_waitsWhileArrivalsGoOn(self) -> None:
        """
        As long as a quiet period brings journaled messages, another one is
        waited for; the messages still missing after a period that brought
        none are sent again, and everything is held once.
        """
        h = JobHarness(self)
        journalLeft(h, range(4), range(1))
        h.clock.callLater(1, h.mail.append, USER, "INBOX", [(body(1), (), None)])
        h.clock.callLater(QUIET + 1, h.mail.append, USER, "INBOX", [(body(2), (), None)])

        self.assertTrue(h.run(h.job(JobSettings(connections=1, journalQuiet=QUIET), identity="off")))
        h.clock.advance(60)

        h.assertHolds("INBOX", range(4))
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 1)
        self.assertEqual(h.store.outcomes()["INBOX", "m2"].uid, 3)
        self.assertEqual(h.store.outcomes()["INBOX", "m3"].uid, 4)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_allThereNoWait(self) -> None:
        """
        When every journaled message is there, nothing is waited for.
        """
        h = JobHarness(self)
        journalLeft(h, range(2), range(2))

        d = h.start(h.job(JobSettings(connections=1, journalQuiet=QUIET), identity="off"))

        self.assertTrue(self.successResultOf(d))
        self.assertEqual(h.clock.seconds(), 0)
        h.assertHolds("INBOX", range(2))
        h.endpoint.pump()
        h.finish()

    def test_noQuiet(self) -> None:
        """
        With a C{journalQuiet} of 0 the destination is looked at once: what
        is missing then is sent again at once.
        """
        h = JobHarness(self)
        journalLeft(h, range(2), range(1))

        d = h.start(h.job(JobSettings(connections=1, journalQuiet=0), identity="off"))

        self.assertTrue(self.successResultOf(d))
        self.assertEqual(h.clock.seconds(), 0)
        h.assertHolds("INBOX", range(2))
        h.endpoint.pump()
        h.finish()

    def test_stopWhileWaiting(self) -> None:
        """
        A job stopped while it waits for a quiet destination stops at once,
        sending nothing; the journal is kept for the next run.
        """
        h = JobHarness(self)
        journalLeft(h, range(2), range(1))
        job = h.job(JobSettings(connections=1, journalQuiet=QUIET), identity="off")
        d: Deferred[bool] = h.start(job)
        self.assertNoResult(d)

        job.stop()
        h.settle(lambda: d.called)

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        h.assertHolds("INBOX", range(1))
        self.assertEqual(appendLines(h.endpoint.servers[0]), [])
        h.endpoint.pump()
        h.finish()


class CandidatePoolTests(SynchronousTestCase):
    """
    L{CandidatePool.add}.
    """

    def test_addedLater(self) -> None:
        """
        Candidates added later are taken as those given at first: the
        lowest UID at or above the floor first.
        """
        pool = CandidatePool([Candidate(7, 10, b"h")])
        pool.add([Candidate(9, 10, b"h"), Candidate(8, 10, b"h")])

        self.assertEqual(pool.remaining, 3)
        self.assertEqual(
            [pool.take(10, b"h", 8), pool.take(10, b"h", 0), pool.take(10, b"h", 0)],
            [8, 7, 9],
        )
        self.assertEqual(pool.remaining, 0)
