"""
Tests for reconciling the journal while the server may still be storing
what a connection that ended had sent (L{imapmig.job.reconcile}'s
C{settle}, L{JobSettings.journalQuiet}).
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock, deferLater
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.fidelity import journalHead
from imapmig.job import JobSettings
from imapmig.job.reconcile import Candidate, CandidatePool, Reconciliation, reconcileJournal
from imapmig.progress import JobState
from imapmig.state import JournalMessage
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore
from tests.test_job import (
    hasResult,
    JOB,
    USER,
    JobHarness,
    MemoryEndpoint,
    appendLines,
    body,
    memoryOpener,
    populate,
)

QUIET = 5.0


class StoresAfterTheCloseServer(FakeIMAPServer):
    """
    A server slow to store: it reads APPEND commands and answers none, so
    the client gives the connection up at its reply deadline; it stores
    the i-th APPEND it read C{delays[i]} seconds after the connection
    closed (never, for L{None}), as Dovecot goes on through the commands it
    had read when the client went away.
    """

    def __init__(
        self, store: FakeMailStore, clock: Clock, delays: Sequence[float | None]
    ) -> None:
        FakeIMAPServer.__init__(self, store, DEFAULT_CAPABILITIES)
        self._clock = clock
        self._delays = delays
        self._read: list[list[Any]] = []

    def _append(self, args: list[Any]) -> bytes | None:
        self._read.append(args)
        return None

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        FakeIMAPServer.connectionLost(self, reason)
        for args, delay in zip(self._read, self._delays):
            if delay is not None:
                self._clock.callLater(delay, self._store, args)

    def _store(self, args: list[Any]) -> None:
        # Nobody is listening any more: no untagged EXISTS.
        self.selected = None
        FakeIMAPServer._append(self, args)


def slowServer(h: JobHarness, count: int, delays: Sequence[float | None]) -> None:
    """
    Give C{h} a source INBOX of C{count} messages and a destination whose
    first connection is a L{StoresAfterTheCloseServer} with C{delays}.
    """

    def makeServer(attempt: int) -> FakeIMAPServer:
        if attempt == 0:
            return StoresAfterTheCloseServer(h.mail, h.clock, delays)
        return FakeIMAPServer(h.mail, DEFAULT_CAPABILITIES)

    h.endpoint = MemoryEndpoint(h.clock, makeServer)
    populate(h.source, h.source.addFolder("INBOX"), count)


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


SETTINGS = JobSettings(connections=1, batchMessages=1, journalQuiet=QUIET)


class SettleTests(SynchronousTestCase):
    """
    After a connection of the run ended early, journaled messages missing
    from the destination are sent again only once it has been quiet for
    L{JobSettings.journalQuiet} seconds: the server may still be storing
    them.
    """

    def test_givenUpConnectionStoresLate(self) -> None:
        """
        A connection given up at its reply deadline, whose server stores
        what it had read only after the job reconnected: the messages are
        found when they arrive during the quiet period, recorded with
        their UIDs, and not sent again; each is held once.
        """
        h = JobHarness(self)
        slowServer(h, 4, [1.5] * 4)

        self.assertTrue(h.run(h.job(SETTINGS, identity="off")))
        # Whatever the server had still to do is done.
        h.clock.advance(60)

        h.assertHolds("INBOX", range(4))
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 4)
        self.assertEqual(appendLines(h.endpoint.servers[1]), [])
        self.assertEqual(sorted(o.uid for o in h.store.outcomes().values()), [1, 2, 3, 4])
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_waitsWhileArrivalsGoOn(self) -> None:
        """
        As long as a quiet period brings journaled messages, another one is
        waited for; those still missing after a period that brought none
        are sent again, and everything is held once.
        """
        h = JobHarness(self)
        # The first look comes 1 s (the backoff) after the close; each
        # next one QUIET seconds later.
        slowServer(h, 4, [0, 3, QUIET + 3, None])

        self.assertTrue(h.run(h.job(SETTINGS, identity="off")))
        h.clock.advance(60)

        h.assertHolds("INBOX", range(4))
        self.assertEqual(len(appendLines(h.endpoint.servers[1])), 1)
        outcomes = h.store.outcomes()
        self.assertEqual([outcomes["INBOX", f"m{n}"].uid for n in range(4)], [1, 2, 3, 4])
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_allThereNoWait(self) -> None:
        """
        When every journaled message is there at the first look, nothing
        is waited for.
        """
        h = JobHarness(self)
        slowServer(h, 2, [0, 0])
        job = h.job(SETTINGS, identity="off")

        with capturedLogs() as events:
            self.assertTrue(h.run(job))

        self.assertEqual([e for e in events if "not in the destination (yet)" in e["log_format"]], [])
        h.assertHolds("INBOX", range(2))
        self.assertEqual(appendLines(h.endpoint.servers[1]), [])
        h.finish()

    def test_noQuiet(self) -> None:
        """
        With a C{journalQuiet} of 0 the destination is looked at once: what
        is missing then is sent again at once (and held twice if the
        server stores it later).
        """
        h = JobHarness(self)
        slowServer(h, 2, [0, 1.5])
        settings = JobSettings(connections=1, batchMessages=1, journalQuiet=0)

        self.assertTrue(h.run(h.job(settings, identity="off")))
        h.clock.advance(60)

        self.assertEqual(len(appendLines(h.endpoint.servers[1])), 1)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 3)
        h.finish()

    def test_serverEndedLooksOnce(self) -> None:
        """
        A connection the server itself closed (not given up by imapmig) is
        over on the server's side: the destination is looked at once, and
        what is missing is sent again at once.
        """
        h = JobHarness(self)

        class ClosesAfterTwo(StoresAfterTheCloseServer):
            def _append(self, args: list[Any]) -> bytes | None:
                self._read.append(args)
                if len(self._read) == 2:
                    self._close()
                return None

        def makeServer(attempt: int) -> FakeIMAPServer:
            if attempt == 0:
                return ClosesAfterTwo(h.mail, h.clock, [0, None])
            return FakeIMAPServer(h.mail, DEFAULT_CAPABILITIES)

        h.endpoint = MemoryEndpoint(h.clock, makeServer)
        populate(h.source, h.source.addFolder("INBOX"), 2)

        with capturedLogs() as events:
            self.assertTrue(h.run(h.job(SETTINGS, identity="off")))

        self.assertEqual([e for e in events if "(yet)" in e["log_format"]], [])
        h.assertHolds("INBOX", range(2))
        self.assertEqual(len(appendLines(h.endpoint.servers[1])), 1)
        h.finish()

    def test_earlierRunLooksOnce(self) -> None:
        """
        Entries left by an earlier run are looked at once, without a wait:
        that run's connections ended with it.
        """
        h = JobHarness(self)
        journalLeft(h, range(2), range(1))

        d = h.start(h.job(SETTINGS, identity="off"))

        self.assertTrue(self.successResultOf(d))
        self.assertEqual(h.clock.seconds(), 0)
        h.assertHolds("INBOX", range(2))
        h.endpoint.pump()
        h.finish()

    def test_stopWhileWaiting(self) -> None:
        """
        A job stopped while it waits for a quiet destination stops at once,
        sending nothing more; the journal is kept for the next run.
        """
        h = JobHarness(self)
        slowServer(h, 2, [None, None])
        job = h.job(SETTINGS, identity="off")
        d: Deferred[bool] = h.start(job)
        with capturedLogs() as events:
            while not any("not in the destination (yet)" in e["log_format"] for e in events):
                calls = h.clock.getDelayedCalls()
                h.clock.advance(min(c.getTime() for c in calls) - h.clock.seconds())
                h.settle(lambda: hasResult(d))
        self.assertNoResult(d)

        d.cancel()
        h.settle(lambda: hasResult(d))

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 2)
        self.assertEqual(h.mail.mailbox(USER, "INBOX"), [])
        self.assertEqual(appendLines(h.endpoint.servers[1]), [])
        h.endpoint.pump()
        h.finish()


class TakeoverTests(SynchronousTestCase):
    """
    A job taken over from a daemon whose lease ran out (that daemon may
    still be alive, its APPENDs read by a slow server) reconciles the old
    owner's journal with the quiet period, its first wait shortened by the
    quiet already passed (C{takeover}).
    """

    def test_shortenedWaitFindsLateArrival(self) -> None:
        """
        Journaled messages missing at the takeover are waited for
        C{journalQuiet} less the quiet passed; one arriving meanwhile is
        recorded, not sent again; the one still missing after a quiet
        period that brought nothing is sent again, then only.
        """
        h = JobHarness(self)
        journalLeft(h, range(3), range(1))
        h.clock.callLater(2, h.mail.append, USER, "INBOX", [(body(1), (), None)])
        job = h.job(SETTINGS, identity="off", takeover=1.5)
        d = h.start(job)

        # The first wait is QUIET - 1.5 = 3.5 s; m1 arrived in it, so
        # another QUIET is waited for: m2 is sent again at 8.5 s.
        for until, sent in [(3.4, 0), (3.5, 0), (8.4, 0), (8.5, 1)]:
            h.clock.advance(until - h.clock.seconds())
            h.settle()
            self.assertEqual(len(appendLines(h.endpoint.servers[0])), sent)
        h.waitFor(d)

        self.assertTrue(self.successResultOf(d))
        h.assertHolds("INBOX", range(3))
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 1)
        self.assertEqual(h.store.outcomes()["INBOX", "m1"].uid, 2)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.endpoint.pump()
        h.finish()

    def test_quietAlreadyPassed(self) -> None:
        """
        With the whole quiet period passed already, the destination is
        looked at again at once: what is still missing is sent again
        without a wait.
        """
        h = JobHarness(self)
        journalLeft(h, range(2), range(1))

        d = h.start(h.job(SETTINGS, identity="off", takeover=QUIET + 1))

        self.assertTrue(self.successResultOf(d))
        self.assertEqual(h.clock.seconds(), 0)
        h.assertHolds("INBOX", range(2))
        h.endpoint.pump()
        h.finish()


class AcrossMailboxesTests(SynchronousTestCase):
    """
    L{reconcileJournal} waits for a destination quiet in every mailbox
    with messages missing, not one mailbox at a time.
    """

    def test_quietInOneMailboxIsNotEnough(self) -> None:
        """
        A server session still storing into Archive, with an INBOX message
        after those in its queue: INBOX is quiet meanwhile, yet its
        missing message is waited for as long as Archive's arrive, and
        found; nothing is left to send again.
        """
        h = JobHarness(self)
        quiet = 6.0
        h.mail.create(USER, "Archive")
        bodies = {f"m{n}": body(n) for n in range(5)}

        def journaled(*keys: str) -> list[JournalMessage]:
            return [JournalMessage("F", k, len(bodies[k]), journalHead(bodies[k])) for k in keys]

        # Another connection's INBOX unit (arrived), then this session's
        # Archive unit and its next INBOX unit.
        store = h.store
        inbox, archive = h.mail.uidValidity(USER, "INBOX"), h.mail.uidValidity(USER, "Archive")
        self.successResultOf(store.journalBatch(JOB, "INBOX", inbox, 1, journaled("m0")))
        self.successResultOf(
            store.journalBatch(JOB, "Archive", archive, 1, journaled("m1", "m2", "m3"))
        )
        self.successResultOf(store.journalBatch(JOB, "INBOX", inbox, 1, journaled("m4")))
        entries = self.successResultOf(store.journal(JOB))
        h.mail.append(USER, "INBOX", [(bodies["m0"], (), None)])
        for at, mailbox, key in [(3, "Archive", "m1"), (8, "Archive", "m2"),
                                 (13, "Archive", "m3"), (17, "INBOX", "m4")]:  # fmt: skip
            h.clock.callLater(at, h.mail.append, USER, mailbox, [(bodies[key], (), None)])

        async def measure(folderKey: str, keys: Sequence[str]) -> dict[str, tuple[int, bytes]]:
            return {k: (len(bodies[k]), journalHead(bodies[k])) for k in keys}

        async def reconcile() -> Reconciliation:
            session = await memoryOpener(h.endpoint, h.clock)()
            try:
                return await reconcileJournal(
                    JOB, session, store, entries, measure, lambda: deferLater(h.clock, quiet)
                )
            finally:
                await session.logout()

        d = Deferred.fromCoroutine(reconcile())
        h.waitFor(d)  # type: ignore[arg-type]

        result = self.successResultOf(d)
        self.assertEqual((result.arrived, result.missing), (5, {}))
        self.assertEqual(self.successResultOf(store.journal(JOB)), [])
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
