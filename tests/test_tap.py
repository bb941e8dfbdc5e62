# -*- test-case-name: tests.test_tap -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.tap.exitWhenDone}: C{--exit-when-done} stops the
reactor whenever the queue drains, even before the reactor runs.

The daemon itself is run in a child process by
L{tests.test_state_failures.DaemonTests} and L{tests.test_integration}.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
from typing import Callable

from twisted.internet.error import ReactorNotRunning
from twisted.trial.unittest import SynchronousTestCase

from imapmig import tap


class _CoreReactor:
    """
    The part of L{IReactorCore} that L{tap.exitWhenDone} uses, as a real
    reactor behaves: C{stop} raises L{ReactorNotRunning} unless the reactor
    runs and was not stopped yet; C{callWhenRunning} calls at once while it
    runs, and at start-up otherwise.
    """

    def __init__(self) -> None:
        self.running = False
        self.stopping = False
        self.stops = 0
        self._atStartup: list[Callable[[], object]] = []

    def callWhenRunning(self, f: Callable[[], object]) -> None:
        "Call C{f} now if running, else at start-up."
        if self.running:
            f()
        else:
            self._atStartup.append(f)

    def stop(self) -> None:
        "Begin stopping, or raise L{ReactorNotRunning}."
        if not self.running or self.stopping:
            raise ReactorNotRunning("Can't stop reactor that isn't running.")
        self.stopping = True
        self.stops += 1

    def run(self) -> None:
        "Start: run the start-up calls."
        self.running = True
        for f in self._atStartup:
            f()


class ExitWhenDoneTests(SynchronousTestCase):
    """
    L{tap.exitWhenDone}.
    """

    def setUp(self) -> None:
        self.reactor = _CoreReactor()
        self.atExit: list[tuple[object, ...]] = []
        self.patch(atexit, "register", lambda *args: self.atExit.append(args))

    def test_beforeReactorRuns(self) -> None:
        """
        A queue that drains before the reactor runs (twistd starts the
        services first) stops the reactor as soon as it runs, raising
        nothing.
        """
        tap.exitWhenDone(self.reactor)(False)
        self.assertEqual(self.reactor.stops, 0)
        self.reactor.run()
        self.assertEqual(self.reactor.stops, 1)
        self.assertEqual(self.atExit, [(tap._exitStatusAtExit, tap.EXIT_JOB_FAILED)])

    def test_whileRunning(self) -> None:
        """
        A queue that drains while the reactor runs stops it at once; when
        every job completed, the exit status is left at 0.
        """
        self.reactor.run()
        tap.exitWhenDone(self.reactor)(True)
        self.assertEqual(self.reactor.stops, 1)
        self.assertEqual(self.atExit, [])

    def test_alreadyStopping(self) -> None:
        """
        A queue that drains while the reactor is already stopping (a
        signal came first) adds nothing and raises nothing.
        """
        self.reactor.run()
        self.reactor.stop()
        tap.exitWhenDone(self.reactor)(False)
        self.assertEqual(self.reactor.stops, 1)
        self.assertEqual(self.atExit, [(tap._exitStatusAtExit, tap.EXIT_JOB_FAILED)])


class _TriggerReactor:
    """
    A reactor's system event triggers and its C{_exitSignal}, as twistd
    reads it after the reactor stopped.
    """

    def __init__(self) -> None:
        self._exitSignal: int | None = None
        self.triggers: list[tuple[str, str, Callable[[], None]]] = []

    def addSystemEventTrigger(self, phase: str, event: str, f: Callable[[], None]) -> None:
        self.triggers.append((phase, event, f))

    def shutDown(self) -> None:
        for phase, event, f in self.triggers:
            if (phase, event) == ("after", "shutdown"):
                f()


class ExitZeroAfterGracefulStopTests(SynchronousTestCase):
    """
    L{tap.exitZeroAfterGracefulStop}: stopped by SIGTERM or SIGINT, the
    daemon exits 0 rather than dying of the signal again.
    """

    def test_sigterm(self) -> None:
        """
        After a shutdown caused by C{SIGTERM} (or C{SIGINT}), the signal
        twistd would send again is cleared.
        """
        import signal

        for number in (signal.SIGTERM, signal.SIGINT):
            reactor = _TriggerReactor()
            tap.exitZeroAfterGracefulStop(reactor)
            reactor._exitSignal = number
            reactor.shutDown()
            self.assertIsNone(reactor._exitSignal)

    def test_otherSignal(self) -> None:
        """
        Any other signal (C{SIGHUP}) is left for twistd to report.
        """
        import signal

        reactor = _TriggerReactor()
        tap.exitZeroAfterGracefulStop(reactor)
        reactor._exitSignal = signal.SIGHUP
        reactor.shutDown()
        self.assertEqual(reactor._exitSignal, signal.SIGHUP)


class CollectionPauseTests(SynchronousTestCase):
    """
    The cyclic garbage collector is paused while the daemon starts
    (L{tap.Options.postOptions} to the end of L{tap.makeService}).
    """

    def setUp(self) -> None:
        # Leave the collector as the other tests expect it: running, with
        # nothing frozen out of its reach.
        self.addCleanup(gc.enable)
        self.addCleanup(gc.unfreeze)

    def test_pauseAndResume(self) -> None:
        """
        L{tap.pauseCollection} disables the collector;
        L{tap.resumeCollection} freezes what is alive and enables it again.
        """
        tap.pauseCollection()
        self.assertFalse(gc.isenabled())
        tap.resumeCollection()
        self.assertTrue(gc.isenabled())
        self.assertGreater(gc.get_freeze_count(), 0)

    def test_badConfigurationResumes(self) -> None:
        """
        Parsing that ends in an exit (a configuration that cannot be read)
        leaves the collector running.
        """
        directory = self.mktemp()
        os.makedirs(directory)
        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            f.write("state: [\n")
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        self.assertRaises(SystemExit, tap.Options().parseOptions, ["--config", path])
        self.assertTrue(gc.isenabled())
        self.assertIn("invalid YAML", stderr.getvalue())
