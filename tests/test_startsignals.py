"""
Tests for L{imapmig.daemon.startsignals} and the root service's start, which
holds SIGINT and SIGTERM until the reactor runs.
"""

from __future__ import annotations

import signal
from typing import Any

from twisted.application.service import Service
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.progress import MigrationProgress
from imapmig.daemon.rootservice import MigrationService
from imapmig.daemon.startsignals import heldSignals
from imapmig.state.memory import MemoryStateStore


class SignalledService(Service):
    """
    A service that receives C{number} as it starts (as a job's service may,
    before the reactor runs), and notes whether its start went on after.
    """

    def __init__(self, number: int) -> None:
        self.number = number
        self.wentOn = False

    def startService(self) -> None:
        Service.startService(self)
        signal.raise_signal(self.number)
        self.wentOn = True


class SignalTestCase(SynchronousTestCase):
    """
    Sets SIGINT to Python's default handler and SIGTERM to a recording
    one (never the default: it would end the test run) for each test, and
    puts back the handlers before.
    """

    def setUp(self) -> None:
        self.terms: list[int] = []
        for number in (signal.SIGINT, signal.SIGTERM):
            self.addCleanup(signal.signal, number, signal.getsignal(number))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, self._term)

    def _term(self, number: int, frame: Any) -> None:
        self.terms.append(number)


class HeldSignalsTests(SignalTestCase):
    """
    L{heldSignals} holds SIGINT and SIGTERM while its block runs.
    """

    def test_held(self) -> None:
        """
        A SIGINT in the block raises no C{KeyboardInterrupt} and a SIGTERM
        reaches no handler; each is handed over once, after the block,
        with the handlers before put back.
        """
        received: list[int] = []
        with heldSignals(received.append):
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
            self.assertEqual(received, [])
        self.assertEqual(received, [signal.SIGINT, signal.SIGTERM])
        self.assertEqual(self.terms, [])
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
        self.assertEqual(signal.getsignal(signal.SIGTERM), self._term)

    def test_ignoredStaysIgnored(self) -> None:
        """
        A signal ignored (C{SIG_IGN}) is not held: it stays ignored, and
        nothing is handed over.
        """
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        received: list[int] = []
        with heldSignals(received.append):
            self.assertIs(signal.getsignal(signal.SIGINT), signal.SIG_IGN)
            signal.raise_signal(signal.SIGINT)
        self.assertEqual(received, [])


class RootStartTests(SignalTestCase):
    """
    L{MigrationService.startService} holds SIGINT and SIGTERM while its
    children start, and raises them again once the reactor runs.
    """

    def test_signalWhileStarting(self) -> None:
        """
        A SIGINT while a child starts does not break into it (before, the
        C{KeyboardInterrupt} went into whatever ran: a job's first
        Deferred took it as its failure, and the daemon ignored the
        signal); it is logged, and raised again when the reactor runs,
        where the reactor's own handler stops it.
        """
        reactor = MemoryReactorClock()
        root = MigrationService(MemoryStateStore(), MigrationProgress(reactor.seconds), reactor)
        child = SignalledService(signal.SIGINT)
        child.setServiceParent(root)
        with capturedLogs() as events:
            root.startService()
        self.assertTrue(child.wentOn)
        self.assertEqual(
            [formatEvent(e) for e in events],
            ["Signal SIGINT received while the daemon started: stopping once it runs"],
        )
        self.assertEqual(
            reactor.whenRunningHooks, [(signal.raise_signal, (signal.SIGINT,), {})]
        )
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)

    def test_quietStart(self) -> None:
        """
        Without a signal, the start logs nothing of it and leaves nothing
        for the reactor to raise.
        """
        reactor = MemoryReactorClock()
        root = MigrationService(MemoryStateStore(), MigrationProgress(reactor.seconds), reactor)
        with capturedLogs() as events:
            root.startService()
        self.assertEqual(events, [])
        self.assertEqual(reactor.whenRunningHooks, [])
