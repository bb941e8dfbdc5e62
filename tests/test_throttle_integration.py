"""
Integration test of the daily upload budget: the daemon (in this process,
on the global reactor) migrates a Maildir into a real private Dovecot
under a C{per_account: {daily_upload: ...}} smaller than the Maildir.

The day is simulated: the daemon is given the reactor with its clock
shifted (L{ShiftedReactor}), to noon UTC of a fixed day, then later that
day, then two seconds before midnight, so that no test waits for more
than those two seconds of the budget's renewal.
"""

from __future__ import annotations

import calendar
import os
from typing import Any, Callable

from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import deferLater
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import TestCase

from imapmig.config import Config, loadConfig
from imapmig.progress import JobProgress, JobState
from imapmig.throttle import UPLOAD
from imapmig.daemon.rootservice import MigrationService
from imapmig.daemon.service import buildService
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.support import (
    deliveries,
    freshUser,
    newDirectory,
    plainServer,
    settleConnections,
    sharedDovecot,
    writeDaemonConfig,
)

reactor: Any = _globalReactor

NOON = float(calendar.timegm((2030, 1, 1, 12, 0, 0)))
EVENING = float(calendar.timegm((2030, 1, 1, 18, 0, 0)))
MIDNIGHT = float(calendar.timegm((2030, 1, 2, 0, 0, 0)))


class ShiftedReactor:
    """
    The global reactor, but its clock says another time: C{seconds()} is
    shifted to start at C{start}; timers, connections and everything else
    are the reactor's own.
    """

    def __init__(self, start: float) -> None:
        now: float = reactor.seconds()
        self._offset = start - now

    def seconds(self) -> float:
        now: float = reactor.seconds()
        return now + self._offset

    def callLater(self, delay: float, f: Callable[..., object], *a: object, **kw: object) -> IDelayedCall:
        call: IDelayedCall = reactor.callLater(delay, f, *a, **kw)
        return call

    def __getattr__(self, name: str) -> Any:
        return getattr(reactor, name)


class Daemon:
    """
    One run of the daemon on a shifted clock.
    """

    def __init__(self, config: Config, start: float) -> None:
        self.clock = ShiftedReactor(start)
        self.finished: Deferred[bool] = Deferred()
        self.service: MigrationService = buildService(
            config, self.clock, whenDone=self.finished.callback
        )
        self.service.startService()

    @property
    def progress(self) -> JobProgress:
        return self.service.progress.job("job")

    async def until(self, condition: Callable[[], bool], timeout: float = 30) -> None:
        """
        Wait until C{condition()} holds, checking every 20 ms.
        """
        for _ in range(int(timeout / 0.02)):
            if condition():
                return
            await deferLater(reactor, 0.02, lambda: None)
        raise AssertionError(f"not reached in {timeout} s: {self.progress.state}")

    async def stop(self) -> float:
        """
        Stop the daemon; how long it took, in seconds.
        """
        started = reactor.seconds()
        await self.service.stopService()
        took = float(reactor.seconds() - started)
        await settleConnections(reactor)
        return took


class DailyUploadBudgetIntegrationTests(TestCase):
    """
    A per-account C{daily_upload} smaller than the Maildir, against Dovecot.
    """

    def daemon(self, config: Config, start: float) -> Daemon:
        """
        Start the daemon at C{start}; stopped when the test ends if it is
        still running (a failed assertion).
        """
        daemon = Daemon(config, start)

        async def stopIfRunning() -> None:
            if daemon.service.running:
                await daemon.stop()

        self.addCleanup(lambda: Deferred.fromCoroutine(stopIfRunning()))
        return daemon

    async def test_budgetAcrossRestartAndMidnight(self) -> None:
        """
        The run stops copying at the budget and pauses until the next UTC
        midnight (stopping then is immediate); a restart the same day
        copies nothing more and says why; after the day changes the rest
        arrives, every message exactly once.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        corpus = writeMaildir(maildir, 40, seed=17, profile="small", folders=(("INBOX",), ("Archive",)))
        total = sum(m.size for m in corpus.messages)
        daily = total * 6 // 10
        server = {
            **plainServer(instance),
            "compress": "off",
            "per_account": {"daily_upload": daily},
        }
        configPath = writeDaemonConfig(
            directory, user, {"maildir": maildir}, server, identity="off"
        )
        config = loadConfig(configPath)

        def held() -> int:
            return sum(len(messages) for messages in instance.fetchAll(user.name).values())

        def used() -> int:
            store = SQLiteStateStore(config.statePath, seconds=reactor.seconds, readOnly=True)
            try:
                return int(self.successResultOf(
                    store.budgetUsed("dovecot", user.name, UPLOAD, "2030-01-01")
                ))
            finally:
                store.close()

        # The first run: up to the budget, then paused until midnight.
        with capturedLogs() as events:
            daemon = self.daemon(config, NOON)
            await daemon.until(lambda: daemon.progress.state is JobState.DEFERRED)
        self.assertTrue(abs((daemon.progress.retryAt or 0) - MIDNIGHT) < 1)
        self.assertIn("daily upload budget", daemon.progress.waitingFor or "")
        paused = [formatEvent(e) for e in events if "paused until" in formatEvent(e)]
        self.assertEqual(len(paused), 1)
        self.assertIn("paused until 2030-01-02 00:00:00 UTC", paused[0])
        took = await daemon.stop()
        self.assertLess(took, 2)
        self.assertFalse(daemon.finished.called)
        first = held()
        self.assertTrue(0 < first < len(corpus.messages), first)
        self.assertLessEqual(used(), daily)

        # A restart the same day copies nothing more, and says why.
        with capturedLogs() as events:
            daemon = self.daemon(config, EVENING)
            await daemon.until(lambda: daemon.progress.state is JobState.DEFERRED)
        paused = [formatEvent(e) for e in events if "paused until" in formatEvent(e)]
        self.assertEqual(len(paused), 1)
        self.assertIn("is used up", paused[0])
        self.assertIn("is used up", daemon.progress.waitingFor or "")
        await daemon.stop()
        self.assertEqual(held(), first)

        # Two seconds before midnight: paused, then the rest arrives.
        daemon = self.daemon(config, MIDNIGHT - 2)
        completed = await daemon.finished.addTimeout(60, reactor)
        self.assertTrue(completed, daemon.progress.error)
        await daemon.stop()
        account = deliveries(instance.fetchAll(user.name), corpus.messages)
        self.assertTrue(account.exactlyOnce, account.summary())
