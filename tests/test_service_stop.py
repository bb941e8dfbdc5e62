"""
Tests for L{imapmig.daemon.rootservice.MigrationService.stopService}: the last-resort
bound on a daemon's stop.
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.progress import MigrationProgress
from imapmig.daemon.rootservice import STOP_MARGIN, MigrationService
from imapmig.state.memory import MemoryStateStore


class StuckService(Service):
    """
    A service whose stop never ends (a Deferred that never fires).
    """

    def __init__(self) -> None:
        self.stopping: Deferred[None] = Deferred()

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        return self.stopping


class ClosingStore(MemoryStateStore):
    """
    A memory store that remembers being closed.
    """

    closed = False

    def close(self) -> None:
        self.closed = True


class BoundedStopTests(SynchronousTestCase):
    """
    L{MigrationService.stopService} waits for its services, but not for
    ever.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = ClosingStore()
        self.root = MigrationService(self.store, MigrationProgress(self.clock.seconds), self.clock)
        self.stuck = StuckService()
        self.stuck.setName("scheduler")
        self.stuck.setServiceParent(self.root)
        Service().setServiceParent(self.root)
        self.root.startService()

    def test_stuckServiceBounded(self) -> None:
        """
        A service whose stop never ends is given up C{STOP_MARGIN} seconds
        after the default C{stop_timeout}: the stop ends, an error names
        the service, and the state store is closed.
        """
        with capturedLogs() as events:
            d = self.root.stopService()
            self.clock.advance(30 + STOP_MARGIN - 0.1)
            self.assertNoResult(d)
            self.assertFalse(self.store.closed)
            self.clock.advance(0.1)

        self.assertIsNone(self.successResultOf(d))
        self.assertTrue(self.store.closed)
        errors = [formatEvent(e) for e in events if e["log_level"].name == "error"]
        self.assertEqual(len(errors), 1)
        self.assertIn("without waiting for scheduler", errors[0])
        self.assertEqual(self.clock.getDelayedCalls(), [])
        # Its stop ending later changes nothing.
        self.stuck.stopping.callback(None)

    def test_stopEndsInTime(self) -> None:
        """
        A stop that ends within the bound ends then, at the reactor's next
        turn (not inside the callback of the last service's stop, which is
        often a connection's C{dataReceived}: the reactor's shutdown that
        follows disconnects every connection), logs no error and leaves
        nothing on the clock.
        """
        with capturedLogs() as events:
            d = self.root.stopService()
            self.clock.advance(5)
            self.assertNoResult(d)
            self.stuck.stopping.callback(None)
            self.assertNoResult(d)
            self.clock.advance(0)

        self.assertIsNone(self.successResultOf(d))
        self.assertTrue(self.store.closed)
        self.assertEqual([e for e in events if e["log_level"].name == "error"], [])
        self.assertEqual(self.clock.getDelayedCalls(), [])


class CommittingStore(ClosingStore):
    """
    A store whose close commits queued writes first, as the PostgreSQL
    store's batcher does: L{whenClosed} fires once they are.
    """

    def __init__(self) -> None:
        super().__init__()
        self.committed: Deferred[None] = Deferred()

    def whenClosed(self) -> Deferred[None]:
        return self.committed


class StoreClosedTests(SynchronousTestCase):
    """
    L{MigrationService.stopService} ends only once the state store has
    closed, when the store says when that is.
    """

    def test_waitsForQueuedWrites(self) -> None:
        """
        The stop fires after the store's C{whenClosed}: a daemon that
        stopped its reactor first would lose the writes still queued.
        """
        clock = Clock()
        store = CommittingStore()
        root = MigrationService(store, MigrationProgress(clock.seconds), clock)
        root.startService()
        d = root.stopService()
        clock.advance(0)
        self.assertTrue(store.closed)
        self.assertNoResult(d)
        store.committed.callback(None)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_closeBounded(self) -> None:
        """
        A store whose last writes are never committed (its database cut
        off) is waited for C{STOP_MARGIN} seconds, then the stop ends
        without them, with an error saying so.
        """
        clock = Clock()
        store = CommittingStore()
        root = MigrationService(store, MigrationProgress(clock.seconds), clock)
        root.startService()
        with capturedLogs() as events:
            d = root.stopService()
            clock.advance(0)
            clock.advance(STOP_MARGIN - 0.1)
            self.assertNoResult(d)
            clock.advance(0.1)
        self.assertIsNone(self.successResultOf(d))
        errors = [formatEvent(e) for e in events if e["log_level"].name == "error"]
        self.assertEqual(len(errors), 1)
        self.assertIn("last writes were not committed", errors[0])
        self.assertEqual(clock.getDelayedCalls(), [])
