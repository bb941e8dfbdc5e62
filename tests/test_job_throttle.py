"""
Tests for L{MigrationJob} under throttles (L{imapmig.throttle}):
rates on the destination, daily upload budgets that pause the job until
UTC midnight and carry across a restart, and the composition with the
server's C{[OVERQUOTA]} and C{Suggested Backoff Time}.  The real job,
session and pipeline against the fake server, on a L{Clock}.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.errors import DailyLimitReached, QuotaExceeded
from imapmig.job import JobSettings, MigrationJob, RetryPolicy
from imapmig.job.budgets import mailboxFull
from imapmig.log.logfields import AccountName
from imapmig.mail.message import SourceFolder
from imapmig.progress import JobState
from imapmig.throttle import DOWNLOAD, UPLOAD, ThrottleRegistry
from imapmig.sources.imap import IMAPSource
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from tests.test_job import (
    hasResult,
    JOB,
    USER,
    JobHarness,
    MemoryEndpoint,
    RecordingStateStore,
    body,
    memoryOpener,
)
from tests.test_throttle import MIDNIGHT, NOON, assertAdmittedAfter
from tests.test_sources_imap import Harness as SourceHarness
from tests.test_sources_imap import ScriptedAccount
from tests.test_sources_imap import body as sourceBody

SIZE = 100

_T = TypeVar("_T")


class ThrottledHarness:
    """
    A L{JobHarness} at noon UTC on 2030-01-01, with a registry of
    throttles over its state store (a daemon's; a new one is a restart).
    """

    def __init__(self, test: SynchronousTestCase, limits: ServerLimits) -> None:
        self.h = JobHarness(test)
        self.h.clock.advance(NOON)
        self.limits = limits
        self.restart()

    def restart(self) -> None:
        """
        Forget every bucket and in-memory total, as a restarted daemon
        does; the state store is kept.
        """
        self.registry = ThrottleRegistry(self.h.clock, self.h.store)

    def job(
        self,
        settings: JobSettings = JobSettings(connections=1),
        retry: RetryPolicy = RetryPolicy(),
        sourceLimits: ServerLimits | None = None,
        defer: bool = False,
    ) -> MigrationJob:
        h = self.h
        sourceThrottle = None
        if sourceLimits is not None:
            sourceThrottle = self.registry.throttleFor("src", sourceLimits, USER, DOWNLOAD)
        return MigrationJob(
            JOB,
            h.source,
            h.store,
            h.progress,
            memoryOpener(h.endpoint, h.clock),
            h.clock,
            settings,
            identity="off",
            retry=retry,
            jitter=lambda: 0.0,
            throttle=self.registry.throttleFor("dest", self.limits, USER, UPLOAD),
            sourceThrottle=sourceThrottle,
            defer=defer,
            destination=AccountName("dest", USER, "tcp:dest:143"),
        )

    def populate(self, count: int) -> SourceFolder:
        inbox = self.h.source.addFolder("INBOX")
        for n in range(count):
            self.h.source.add(inbox, f"m{n}", body(n, SIZE))
        return inbox

    def used(self, day: str = "2030-01-01") -> int:
        return self.h.test.successResultOf(self.h.store.budgetUsed("dest", USER, UPLOAD, day))

    def assertHolds(self, numbers: range) -> None:
        """
        Check that INBOX holds exactly the messages C{numbers}, once each.
        """
        self.h.test.assertEqual(
            sorted(m.body for m in self.h.mail.mailbox(USER, "INBOX")),
            sorted(body(n, SIZE) for n in numbers),
        )

    def held(self) -> int:
        return len(self.h.mail.mailbox(USER, "INBOX"))

    def completeRun(self, run: Deferred[bool]) -> None:
        """
        Run a started job to its end, check that its run C{run} finished,
        and let the server see the connection close.
        """
        self.h.waitFor(run)
        self.h.test.assertTrue(self.h.test.successResultOf(run))
        self.h.endpoint.pump()

    def stopRun(self, run: Deferred[bool]) -> None:
        """
        Stop a job's run C{run} (cancel it), let the stop take its course,
        check that the run ended unfinished, and let the server see the
        connection close.
        """
        run.cancel()
        self.h.settle()
        self.h.test.assertFalse(self.h.test.successResultOf(run))
        self.h.endpoint.pump()


class SlowBudgetStore(RecordingStateStore):
    """
    A state store whose budget writes (reservations, give-backs, uses)
    complete only when the test says (L{flush}), as a store in a thread
    would, some time later.
    """

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[Deferred[Any], Callable[[], Deferred[Any]]]] = []

    def _later(self, write: Callable[[], Deferred[_T]]) -> Deferred[_T]:
        d: Deferred[_T] = Deferred()
        self.pending.append((d, write))
        return d

    def addBudgetUse(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        "See L{IStateStore.addBudgetUse}; held until L{flush}."
        add = super().addBudgetUse
        return self._later(lambda: add(server, user, direction, day, octets))

    def reserveBudget(
        self, server: str, user: str, direction: str, day: str, octets: int, limit: int
    ) -> Deferred[int | None]:
        "See L{IStateStore.reserveBudget}; held until L{flush}."
        reserve = super().reserveBudget
        return self._later(lambda: reserve(server, user, direction, day, octets, limit))

    def giveBackBudget(
        self, server: str, user: str, direction: str, day: str, octets: int
    ) -> Deferred[int]:
        "See L{IStateStore.giveBackBudget}; held until L{flush}."
        giveBack = super().giveBackBudget
        return self._later(lambda: giveBack(server, user, direction, day, octets))

    def flush(self) -> None:
        """
        Complete the budget writes held, in order.
        """
        while self.pending:
            d, write = self.pending.pop(0)
            write().chainDeferred(d)


def budget(octets: int) -> ServerLimits:
    return ServerLimits(perAccount=AccountLimits(dailyUpload=octets))


class DailyUploadBudgetTests(SynchronousTestCase):
    """
    A daily upload budget smaller than the source.
    """

    def test_pausesUntilMidnight(self) -> None:
        """
        The run copies up to the day's budget and pauses until the next UTC
        midnight, saying so once, with the time, in the job's log event
        and its status.
        """
        t = ThrottledHarness(self, budget(6 * SIZE))
        h = t.h
        t.populate(10)
        job = t.job()
        with capturedLogs() as events:
            d = h.start(job)
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.progress.retryAt, MIDNIGHT)
        self.assertIn("daily upload budget", h.progress.waitingFor or "")
        self.assertEqual(t.held(), 6)
        self.assertEqual(t.used(), 6 * SIZE)
        messages = [formatEvent(e) for e in events]
        paused = [m for m in messages if "paused until" in m]
        self.assertEqual(len(paused), 1, messages)
        self.assertIn("paused until 2030-01-02 00:00:00 UTC", paused[0])
        self.assertIn(JOB, paused[0])
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        d.cancel()
        self.assertFalse(self.successResultOf(d))
        h.endpoint.pump()
        h.finish()

    def test_restartSameDayThenNextDay(self) -> None:
        """
        A restart the same day (a new registry over the same store) copies
        nothing more and says why; after the day changes the rest arrives
        exactly once, and the job completes.
        """
        t = ThrottledHarness(self, budget(6 * SIZE))
        h = t.h
        t.populate(10)
        first = t.job()
        d = h.start(first)
        self.assertEqual(t.held(), 6)
        d.cancel()
        h.settle()
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.clock.getDelayedCalls(), [])

        h.clock.advance(3600)
        t.restart()
        with capturedLogs() as events:
            d = h.start(t.job())
        self.assertEqual(t.held(), 6)
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.progress.retryAt, MIDNIGHT)
        why = [formatEvent(e) for e in events if "paused until" in formatEvent(e)]
        self.assertEqual(len(why), 1)
        self.assertIn("used up: 600 octets on 2030-01-01 UTC", why[0])

        t.completeRun(d)
        t.assertHolds(range(10))
        self.assertEqual(t.used("2030-01-02"), 4 * SIZE)
        self.assertEqual(h.progress.state, JobState.DONE)
        h.finish()

    def test_deferredUntilMidnight(self) -> None:
        """
        A job run with C{defer} that uses up its budget ends its run
        instead of waiting in it: L{MigrationJob.deferredUntil} is the next
        UTC midnight, its status shows it paused for its daily budget until
        then, and no timer is left.  Run again before midnight (the
        daemon restarted: the total is read from the store), it defers
        again without connecting; after midnight it completes.
        """
        t = ThrottledHarness(self, budget(6 * SIZE))
        h = t.h
        t.populate(10)
        first = t.job(defer=True)
        with capturedLogs() as events:
            d = h.start(first)
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(first.deferredUntil, MIDNIGHT)
        self.assertEqual(t.held(), 6)
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.progress.retryAt, MIDNIGHT)
        self.assertTrue((h.progress.waitingFor or "").startswith("daily budget: the daily upload budget"))
        paused = [formatEvent(e) for e in events if "paused until" in formatEvent(e)]
        self.assertEqual(len(paused), 1)
        self.assertIn("paused until 2030-01-02 00:00:00 UTC, its job slot", paused[0])
        h.endpoint.pump()
        h.finish()

        h.clock.advance(3600)
        t.restart()
        connections = h.endpoint.attempts
        again = t.job(defer=True)
        d = h.start(again)
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(again.deferredUntil, MIDNIGHT)
        self.assertEqual(h.endpoint.attempts, connections)
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.clock.getDelayedCalls(), [])

        h.clock.advance(MIDNIGHT - h.clock.seconds())
        last = t.job(defer=True)
        d = h.start(last)
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        self.assertIsNone(last.deferredUntil)
        h.endpoint.pump()
        t.assertHolds(range(10))
        self.assertEqual(h.progress.state, JobState.DONE)
        h.finish()

    def test_unitSplitAtBudget(self) -> None:
        """
        A unit larger than what is left of the budget is cut: what fits is
        sent, the rest waits for the next day; nothing is sent twice or
        recorded as failed.
        """
        t = ThrottledHarness(self, budget(3 * SIZE + SIZE // 2))
        h = t.h
        t.populate(5)
        d = h.start(t.job(JobSettings(connections=2, batchMessages=50)))
        self.assertEqual(t.held(), 3)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        t.completeRun(d)
        t.assertHolds(range(5))
        self.assertEqual(self.successResultOf(h.store.failures(JOB)), [])
        h.finish()

    def test_doneWithinBudget(self) -> None:
        """
        A run that ends within the budget ends: nothing waits for midnight.
        """
        t = ThrottledHarness(self, budget(10 * SIZE))
        h = t.h
        t.populate(10)
        self.assertTrue(h.run(t.job()))
        t.assertHolds(range(10))
        self.assertEqual(t.used(), 10 * SIZE)
        self.assertEqual(h.clock.seconds(), NOON)
        h.finish()

    def test_oversizedNotCounted(self) -> None:
        """
        A message listed larger than the destination accepts is recorded
        as failed and never counted against the daily budget.
        """
        t = ThrottledHarness(self, budget(10 * SIZE))
        h = t.h
        inbox = t.populate(3)
        h.source.add(inbox, "big", body(99, 10 * SIZE))
        self.assertTrue(h.run(t.job(JobSettings(connections=1, maxMessageBytes=2 * SIZE))))
        t.assertHolds(range(3))
        self.assertEqual(t.used(), 3 * SIZE)
        self.assertEqual(h.progress.messagesFailed, 1)
        h.finish()

    def test_downloadBudget(self) -> None:
        """
        The source account's daily download budget pauses the job as the
        destination's upload budget does, the smaller of the two deciding.
        """
        t = ThrottledHarness(self, budget(10 * SIZE))
        h = t.h
        t.populate(5)
        sourceLimits = ServerLimits(perAccount=AccountLimits(dailyDownload=3 * SIZE))
        d = h.start(t.job(sourceLimits=sourceLimits))
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertIn("daily download budget", h.progress.waitingFor or "")
        self.assertEqual(t.held(), 3)
        self.assertEqual(
            self.successResultOf(h.store.budgetUsed("src", USER, DOWNLOAD, "2030-01-01")),
            3 * SIZE,
        )
        t.completeRun(d)
        t.assertHolds(range(5))
        h.finish()

    def test_noOvershootBetweenConnections(self) -> None:
        """
        With an upload and a download budget and two connections, the
        second connection sees what the first took of both budgets though
        the state store has recorded none of it yet: together they never
        take more than the smaller budget allows.
        """
        t = ThrottledHarness(self, budget(100 * SIZE))
        h = t.h
        store = h.store = SlowBudgetStore()
        t.restart()
        t.populate(8)
        sourceLimits = ServerLimits(perAccount=AccountLimits(dailyDownload=4 * SIZE))
        job = t.job(
            JobSettings(connections=2, batchMessages=4, unitMessages=4), sourceLimits=sourceLimits
        )
        d = h.start(job)
        for _ in range(20):
            store.flush()
            h.settle(lambda: hasResult(d))
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(t.held(), 4)
        self.assertEqual(
            self.successResultOf(store.budgetUsed("src", USER, DOWNLOAD, "2030-01-01")),
            4 * SIZE,
        )
        self.assertEqual(t.used(), 4 * SIZE)
        d.cancel()
        self.assertFalse(self.successResultOf(d))
        h.endpoint.pump()
        h.finish()

    def test_stopRefundsUnsent(self) -> None:
        """
        A job stopped in the middle of a unit is charged only what it sent:
        the rest of the unit's reservation is given back, in memory and in
        the state store.
        """
        t = ThrottledHarness(
            self,
            ServerLimits(messagesPerSecond=0.1, perAccount=AccountLimits(dailyUpload=100 * SIZE)),
        )
        h = t.h
        t.populate(5)
        job = t.job()
        d = h.start(job)
        self.assertEqual(t.held(), 1)
        t.stopRun(d)
        self.assertEqual(t.used(), SIZE)
        throttle = t.registry.throttleFor("dest", t.limits, USER, UPLOAD)
        assert throttle is not None and throttle.budget is not None
        self.assertEqual(throttle.budget.used, SIZE)
        h.finish()

    def test_skippedNotCharged(self) -> None:
        """
        A message read but not sent (here: NUL octets, and a destination
        without BINARY) is not charged to the upload budget, but to the
        download budget, since it was read.
        """
        t = ThrottledHarness(self, budget(100 * SIZE))
        h = t.h
        inbox = t.populate(3)
        nul = body(7, SIZE).replace(b"\r\n\r\n", b"\r\n\r\n\0", 1)
        h.source.add(inbox, "nul", nul)
        sourceLimits = ServerLimits(perAccount=AccountLimits(dailyDownload=100 * SIZE))
        self.assertTrue(h.run(t.job(sourceLimits=sourceLimits)))
        t.assertHolds(range(3))
        self.assertEqual(h.progress.messagesFailed, 1)
        self.assertEqual(t.used(), 3 * SIZE)
        self.assertEqual(
            self.successResultOf(h.store.budgetUsed("src", USER, DOWNLOAD, "2030-01-01")),
            3 * SIZE + len(nul),
        )
        h.finish()

    def test_stopWhilePaused(self) -> None:
        """
        Stopping the job while it waits for midnight stops it at once.
        """
        t = ThrottledHarness(self, budget(2 * SIZE))
        h = t.h
        t.populate(4)
        job = t.job()
        d = h.start(job)
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        d.cancel()
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.clock.seconds(), NOON)
        h.endpoint.pump()
        h.finish()


class RateTests(SynchronousTestCase):
    """
    Rates of the destination server and account.
    """

    def test_messagesPerSecond(self) -> None:
        """
        At 2 messages per second, 20 messages take about 9 s of the clock
        (after the first second's burst).
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=2))
        h = t.h
        t.populate(20)
        self.assertTrue(h.run(t.job(JobSettings(connections=2, batchMessages=50))))
        t.assertHolds(range(20))
        elapsed = h.clock.seconds() - NOON
        self.assertTrue(8.5 <= elapsed <= 9.5, elapsed)
        h.finish()

    def test_stopWhileThrottled(self) -> None:
        """
        A job waiting for its throttle stops at once when told: the wait is
        cancelled, no timer is left, and what was sent is recorded.
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=0.1))
        h = t.h
        t.populate(5)
        job = t.job()
        d = h.start(job)
        self.assertNoResult(d)
        self.assertEqual(t.held(), 1)
        t.stopRun(d)
        self.assertEqual(t.held(), 1)
        # The rest of the unit stays journaled, settled by the next run.
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        h.finish()


    def test_stopDuringReadThenThrottle(self) -> None:
        """
        A stop while a source read is under way, the throttle's wait not
        yet begun: when the read completes the job sends nothing more and
        does not wait for the throttle (it would wait about 1,000 s at
        0.001 messages per second); the run ends within the stop timeout
        with no timer left.
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=0.001))
        h = t.h
        t.populate(5)
        h.source.holdAfter = 1
        job = t.job(JobSettings(connections=1, stopTimeout=30))
        d = h.start(job)
        self.assertEqual(t.held(), 1)
        self.assertEqual(len(h.source.held), 1)
        d.cancel()
        h.source.release()
        h.settle(lambda: hasResult(d))
        h.clock.advance(30)
        h.settle(lambda: hasResult(d))
        self.assertFalse(self.successResultOf(d))
        h.endpoint.pump()
        self.assertEqual(t.held(), 1)
        self.assertEqual(h.progress.state, JobState.STOPPED)
        h.finish()

    def test_runAgainAfterStop(self) -> None:
        """
        A job stopped while throttled, run again, waits for its throttle
        as before (the stop closed it; the new run opens it) and copies
        the rest.
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=1))
        h = t.h
        t.populate(3)
        job = t.job()
        d = h.start(job)
        self.assertEqual(t.held(), 1)
        t.stopRun(d)
        self.assertTrue(h.run(job))
        t.assertHolds(range(3))
        h.finish()


class SignalCompositionTests(SynchronousTestCase):
    """
    Throttles and the server's signals together.
    """

    def refusingFirst(self, h: JobHarness, reply: str) -> None:
        count = [0]

        def refuse(message: bytes) -> str | None:
            count[0] += 1
            return reply if count[0] <= 1 else None

        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: FakeIMAPServer(h.mail, DEFAULT_CAPABILITIES, refuse)
        )

    def test_overquotaWithBudgetPausesToMidnight(self) -> None:
        """
        C{[OVERQUOTA]} from an account with a daily upload budget pauses
        until the next UTC midnight (not the configured pause) and takes
        the day's budget as used up; then the job finishes.
        """
        t = ThrottledHarness(self, budget(1_000_000))
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Account exceeded command or bandwidth limits")
        t.populate(3)
        d = h.start(t.job(retry=RetryPolicy(pause=600)))
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.progress.retryAt, MIDNIGHT)
        self.assertEqual(t.used(), 1_000_000)
        t.completeRun(d)
        t.assertHolds(range(3))
        h.finish()

    def test_overquotaWithBudgetDefers(self) -> None:
        """
        Run with C{defer}, C{[OVERQUOTA]} from an account with a daily
        upload budget ends the run deferred until the next UTC midnight,
        leaving no timer; without a budget it pauses within the run as
        before (L{test_overquotaWithoutBudget}).
        """
        t = ThrottledHarness(self, budget(1_000_000))
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Account exceeded command or bandwidth limits")
        t.populate(3)
        job = t.job(retry=RetryPolicy(pause=600), defer=True)
        d = h.start(job)
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(job.deferredUntil, MIDNIGHT)
        self.assertEqual((h.progress.state, h.progress.retryAt), (JobState.DEFERRED, MIDNIGHT))
        self.assertIn("OVERQUOTA", h.progress.waitingFor or "")
        h.endpoint.pump()
        h.finish()

    def test_overquotaWithoutBudgetNotDeferred(self) -> None:
        """
        Without a daily budget, a bandwidth limit's C{[OVERQUOTA]} pauses
        within the run for the configured pause even with C{defer}: only a
        daily budget ends the run.
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=100))
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Account exceeded command or bandwidth limits")
        t.populate(2)
        job = t.job(retry=RetryPolicy(pause=600), defer=True)
        d = h.start(job)
        self.assertEqual(h.progress.state, JobState.PAUSED_BY_SERVER)
        self.assertEqual(h.progress.retryAt, NOON + 600)
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        self.assertIsNone(job.deferredUntil)
        h.endpoint.pump()
        h.finish()

    def test_overquotaWithoutBudget(self) -> None:
        """
        Without a daily budget, a bandwidth limit's C{[OVERQUOTA]} pauses
        for the configured pause, throttled or not.
        """
        t = ThrottledHarness(self, ServerLimits(messagesPerSecond=100))
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Account exceeded command or bandwidth limits")
        t.populate(2)
        d = h.start(t.job(retry=RetryPolicy(pause=600)))
        self.assertEqual(h.progress.state, JobState.PAUSED_BY_SERVER)
        self.assertEqual(h.progress.retryAt, NOON + 600)
        t.completeRun(d)
        h.finish()

    def assertFullMailbox(self, t: ThrottledHarness, count: int) -> None:
        """
        Run a job whose destination refuses the first message as over
        quota (Dovecot's full-mailbox reply): the run ends completed at
        once, with no pause, no deferral and no budget marked used up,
        every message recorded as failed with "destination over quota",
        and one error naming the account.
        """
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Quota exceeded (mailbox for user is full)")
        t.populate(count)
        job = t.job(retry=RetryPolicy(pause=600), defer=True)
        usedBefore = t.used()
        with capturedLogs() as events:
            d = h.start(job)
            h.settle()
        self.assertTrue(self.successResultOf(d))
        self.assertIsNone(job.deferredUntil)
        self.assertEqual(h.clock.seconds(), NOON)
        self.assertEqual(t.held(), 0)
        failures = self.successResultOf(h.store.failures(JOB))
        self.assertEqual(len(failures), count)
        for failure in failures:
            self.assertIn("destination over quota", failure.failure or "")
            self.assertIn("mailbox for user is full", failure.failure or "")
        self.assertLessEqual(t.used(), usedBefore + count * SIZE)
        errors = [e for e in events if e.get("log_level") == LogLevel.error]
        self.assertEqual(len(errors), 1, [formatEvent(e) for e in events])
        self.assertEqual(
            (errors[0]["job"], errors[0]["server"], errors[0]["user"], errors[0]["account"]),
            (JOB, "dest", USER, f"{USER} at tcp:dest:143"),
        )
        self.assertIn("over quota", formatEvent(errors[0]))
        h.endpoint.pump()
        h.finish()

    def test_overquotaFullMailboxWithoutBudget(self) -> None:
        """
        Without a daily budget, C{[OVERQUOTA]} that does not speak of
        bandwidth means the mailbox is full: the messages left are recorded
        as failed (L{assertFullMailbox}), the job does not pause.
        """
        self.assertFullMailbox(ThrottledHarness(self, ServerLimits()), 3)

    def test_overquotaFullMailboxFarBelowBudget(self) -> None:
        """
        With a daily upload budget charged far below its limit today,
        C{[OVERQUOTA]} means the mailbox is full, not the provider's daily
        limit: no pause until midnight, the messages left fail.
        """
        self.assertFullMailbox(ThrottledHarness(self, budget(100 * SIZE)), 3)

    def test_overquotaNearBudgetPausesToMidnight(self) -> None:
        """
        With a daily upload budget charged near its limit today (half or
        more), the same C{[OVERQUOTA]} is taken for the provider's daily
        limit: the budget is marked used up, the job pauses until the next
        UTC midnight, then copies every message.
        """
        t = ThrottledHarness(self, budget(10 * SIZE))
        h = t.h
        self.refusingFirst(h, "NO [OVERQUOTA] Quota exceeded (mailbox for user is full)")
        t.populate(6)
        d = h.start(t.job(retry=RetryPolicy(pause=600)))
        self.assertEqual(h.progress.state, JobState.DEFERRED)
        self.assertEqual(h.progress.retryAt, MIDNIGHT)
        self.assertEqual(t.used(), 10 * SIZE)
        t.completeRun(d)
        t.assertHolds(range(6))
        self.assertEqual(self.successResultOf(h.store.failures(JOB)), [])
        h.finish()

    def test_suggestedBackoffHoldsOtherJobs(self) -> None:
        """
        A server's C{Suggested Backoff Time} to one job holds the server's
        and the account's buckets: another job of the account waits as
        long, though its buckets are full.
        """
        limits = ServerLimits(messagesPerSecond=100, perAccount=AccountLimits(messagesPerSecond=50))
        t = ThrottledHarness(self, limits)
        h = t.h
        self.refusingFirst(h, "NO Request is throttled. Suggested Backoff Time: 5000 milliseconds")
        t.populate(3)
        d = h.start(t.job(JobSettings(connections=1, batchMessages=3)))
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        other = t.registry.throttleFor("dest", limits, USER, UPLOAD)
        assert other is not None
        assertAdmittedAfter(self, h.clock, other.admit(1, 1), 5)
        t.completeRun(d)
        t.assertHolds(range(3))
        h.finish()


class MailboxFullTests(SynchronousTestCase):
    """
    L{mailboxFull} tells a full mailbox from a daily limit by the reply,
    without a budget.
    """

    def test_replies(self) -> None:
        """
        C{[OVERQUOTA]} and code-less quota wordings are a full mailbox;
        bandwidth wordings, C{[CONTACTADMIN]} and a budget imapmig found
        used up are not.
        """
        full = [
            QuotaExceeded("x", "[OVERQUOTA] Quota exceeded (mailbox for user is full)", "OVERQUOTA"),
            QuotaExceeded("x", "Over quota", None),
            QuotaExceeded("x", "You exceeded your mail quota.", None),
        ]
        notFull = [
            QuotaExceeded("x", "[OVERQUOTA] Account exceeded command or bandwidth limits", "OVERQUOTA"),
            QuotaExceeded("x", "[CONTACTADMIN] Account suspended", "CONTACTADMIN"),
            QuotaExceeded("x", "bandwidth limit exceeded", None),
            DailyLimitReached("daily upload budget used up", MIDNIGHT),
        ]
        self.assertEqual([mailboxFull(e, None) for e in full], [True] * 3)
        self.assertEqual([mailboxFull(e, None) for e in notFull], [False] * 4)


class SourceSignalTests(SynchronousTestCase):
    """
    A throttling signal from an IMAP source (to a body FETCH) is the
    source server's: it never holds or exhausts the destination's
    throttle, though the source has no throttle of its own.
    """

    def migrate(self, refusal: bytes, limits: ServerLimits) -> ThrottledHarness:
        """
        Start a job from an IMAP source without a throttle, whose first
        body FETCH is refused with C{refusal}, into a destination
        throttled by C{limits}, and run it up to its first wait (L{finish}
        runs it to its end).
        """
        t = ThrottledHarness(self, limits)
        h = t.h
        account = ScriptedAccount()
        for n in range(1, 3):
            account.folders["INBOX"].add(sourceBody(n))
        refused = [False]

        def refuse(tag: bytes, command: bytes) -> bytes | None:
            if b"BODY.PEEK[]" in command and not refused[0]:
                refused[0] = True
                return tag + b" " + refusal + b"\r\n"
            return None

        account.interceptors.append(refuse)
        reading = SourceHarness(account)
        source = IMAPSource(reading.open, "alice at source")
        job = MigrationJob(
            JOB,
            source,
            h.store,
            h.progress,
            memoryOpener(h.endpoint, h.clock),
            h.clock,
            JobSettings(connections=1),
            identity="off",
            retry=RetryPolicy(pause=600),
            jitter=lambda: 0.0,
            throttle=t.registry.throttleFor("dest", t.limits, USER, UPLOAD),
        )
        self.d = job.run()
        self.reading = reading
        self.pumpBoth(h, lambda: refused[0] and h.progress.state != JobState.RUNNING)
        return t

    def pumpBoth(self, h: JobHarness, until: Callable[[], bool]) -> None:
        """
        Carry the source's and the destination's exchanges until
        C{until()} or nothing moves.
        """
        reading = self.reading
        for _ in range(100):
            reading.pump()
            h.settle(until)
            if until():
                return

    def finish(self, t: ThrottledHarness) -> None:
        """
        Run the job to its end (both messages copied) and check that no
        timer is left.
        """
        h = t.h
        for _ in range(100):
            self.pumpBoth(h, lambda: hasResult(self.d))
            calls = h.clock.getDelayedCalls()
            if hasResult(self.d) or not calls:
                break
            h.clock.advance(min(c.getTime() for c in calls) - h.clock.seconds())
        self.assertTrue(self.successResultOf(self.d))
        h.endpoint.pump()
        self.assertEqual(t.held(), 2)
        self.assertEqual(h.clock.getDelayedCalls(), [])

    def test_backoffNotHeldOnDestination(self) -> None:
        """
        A source's C{Suggested Backoff Time} backs the job off as asked,
        but another job of the destination account is not held.
        """
        limits = ServerLimits(messagesPerSecond=100)
        t = self.migrate(
            b"NO Request is throttled. Suggested Backoff Time: 5000 milliseconds", limits
        )
        h = t.h
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        self.assertEqual(h.progress.retryAt, NOON + 5)
        other = t.registry.throttleFor("dest", limits, USER, UPLOAD)
        assert other is not None
        self.successResultOf(other.admit(1, 1))
        self.finish(t)

    def test_overquotaNotDestinationBudget(self) -> None:
        """
        A source's C{[OVERQUOTA]} pauses the job for the configured pause;
        the destination's daily upload budget is not taken as used up.
        """
        t = self.migrate(b"NO [OVERQUOTA] Account exceeded bandwidth limits", budget(100 * SIZE))
        h = t.h
        self.assertEqual(h.progress.state, JobState.PAUSED_BY_SERVER)
        self.assertEqual(h.progress.retryAt, NOON + 600)
        self.assertEqual(t.used(), 0)
        self.finish(t)
