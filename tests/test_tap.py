# -*- test-case-name: tests.test_tap -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.daemon.tap.exitWhenDone}: C{--exit-when-done} stops the
reactor whenever the queue drains, even before the reactor runs.

The daemon itself is run in a child process by
L{tests.test_state_failures.DaemonTests} and L{tests.test_integration}.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import subprocess
import sys
from typing import Callable

from twisted.internet.error import ReactorNotRunning
from twisted.trial.unittest import SynchronousTestCase

from imapmig.daemon import tap

def _writePlainConfig(directory: str) -> str:
    """
    Write into C{directory} a configuration of one plain-TCP job from an
    empty Maildir, with its password file and a SQLite state database.

    @return: the configuration file's path.
    """
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(directory, "Maildir", sub))
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        f.write(
            f"state: {directory}/state.sqlite\n"
            "status: off\n"
            "servers:\n  s:\n    endpoint: 'tcp:127.0.0.1:1143'\n    starttls: 'off'\n"
            "jobs:\n  - name: j\n"
            f"    source: {{maildir: {directory}/Maildir}}\n"
            f"    destination: {{server: s, user: u, password_file: {directory}/pw}}\n"
        )
    with open(os.open(os.path.join(directory, "pw"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("pw\n")
    return path

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
        self.atExit: list[Callable[[], None]] = []
        self.patch(atexit, "register", self.atExit.append)
        self.exits: list[int] = []
        self.patch(tap, "_exitStatusAtExit", self.exits.append)

    def exited(self) -> list[int]:
        """
        Run the exit handlers L{tap.exitWhenDone} registered (one, at
        once), as the interpreter does at exit; return the statuses the
        process ended with.
        """
        self.assertEqual(len(self.atExit), 1)
        self.atExit[0]()
        return self.exits

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
        self.assertEqual(self.exited(), [tap.EXIT_JOB_FAILED])

    def test_whileRunning(self) -> None:
        """
        A queue that drains while the reactor runs stops it at once; when
        every job completed, the process ends with status 0 at exit,
        without tearing the interpreter down.
        """
        self.reactor.run()
        tap.exitWhenDone(self.reactor)(True)
        self.assertEqual(self.reactor.stops, 1)
        self.assertEqual(self.exited(), [tap.EXIT_OK])

    def test_exitHandlerRegisteredAtStart(self) -> None:
        """
        The exit handler is registered when C{--exit-when-done} is set up
        (so that handlers registered later, the journald writer's flush,
        run before it); a process that never drained its queue (stopped
        by a signal) exits as Python does.
        """
        tap.exitWhenDone(self.reactor)
        self.assertEqual(self.exited(), [])

    def test_alreadyStopping(self) -> None:
        """
        A queue that drains while the reactor is already stopping (a
        signal came first) adds nothing and raises nothing.
        """
        self.reactor.run()
        self.reactor.stop()
        tap.exitWhenDone(self.reactor)(False)
        self.assertEqual(self.reactor.stops, 1)
        self.assertEqual(self.exited(), [tap.EXIT_JOB_FAILED])


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


# Modules that importing imapmig.daemon.tap must not bring in: twistd imports it
# to list its options, before any configuration is read, and the daemon
# imports them later only if its configuration needs them.
_NOT_AT_TAP_IMPORT = (
    "OpenSSL",
    "service_identity",
    "twisted.web",
    "twisted.internet.reactor",
    "twisted.internet.endpoints",
    "yaml",
    "sqlite3",
    "imapmig.config",
    "imapmig.daemon.service",
)

# Modules that building the daemon of a plain Maildir job with its status
# page off does not need.
_NOT_FOR_PLAIN_DAEMON = (
    "twisted.web",
    "imapmig.status",
    "imapmig.sources.mbox",
    "imapmig.sources.eml",
    # A fleet's scheduler and its view of the fleet (round 7: ~24 M
    # instructions of the plain start).
    "imapmig.queue.fleetview",
    "imapmig.schedule.fleet",
    # What a reload compares (its regular expressions and classes).
    "imapmig.daemon.reloadplan",
)


def _importedBy(statement: str) -> set[str]:
    """
    The modules a fresh Python process has imported once it has run
    C{statement}: a child process, so that what this test process already
    imported does not hide anything.

    @param statement: Python source to run in the child.
    @return: the names in the child's C{sys.modules}.
    """
    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))\n"
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=True, cwd=tree
    )
    return set(done.stdout.decode().split())


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """
    The names in C{modules} that are one of C{packages} or inside one.
    """
    return sorted(
        m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)
    )


class LeanImportTests(SynchronousTestCase):
    """
    Start-up imports only what the daemon's configuration needs (issue 17,
    point 6: start-up time is mostly imports).
    """

    def test_tapImportIsLean(self) -> None:
        """
        Importing L{imapmig.daemon.tap} imports neither the configuration reader
        nor the reactor, TLS, the web server, YAML or SQLite: twistd
        imports it before the configuration is read, and
        L{tap.Options.postOptions} imports the reader inside the
        collector's pause.
        """
        modules = _importedBy("import imapmig.daemon.tap")
        self.assertIn("imapmig.daemon.tap", modules)
        self.assertEqual(_loaded(modules, _NOT_AT_TAP_IMPORT), [])

    def test_serviceImportIsLean(self) -> None:
        """
        Importing L{imapmig.daemon.service} (what L{tap.makeService} imports)
        brings in neither twisted.web nor the status resources, which only
        a status page needs, nor the mbox and C{.eml} sources, which only
        jobs reading them need, nor a fleet's scheduler.
        """
        modules = _importedBy("import imapmig.daemon.service")
        self.assertIn("imapmig.sources.maildir", modules)
        self.assertEqual(_loaded(modules, _NOT_FOR_PLAIN_DAEMON), [])

    def test_configImportedOnParse(self) -> None:
        """
        L{tap.Options.parseOptions} imports the configuration reader itself
        and reads the file: a valid configuration is loaded into
        C{options.config}.
        """
        directory = os.path.abspath(self.mktemp())
        path = _writePlainConfig(directory)
        self.addCleanup(gc.enable)
        self.addCleanup(gc.unfreeze)
        options = tap.Options()
        options.parseOptions(["--config", path])
        tap.resumeCollection()
        self.assertEqual([job.name for job in options.config.jobs], ["j"])


class StateOpeningStartTests(SynchronousTestCase):
    """
    L{tap.makeService} opens a SQLite state database in a thread
    (L{imapmig.daemon.stateopen}) before it imports the service.
    """

    def test_failureBeforeTakingStore(self) -> None:
        """
        A start that fails between starting the opening and taking its
        store (here L{tap.exitZeroAfterGracefulStop}; an import could as
        well) restores the interpreter's switch interval and closes the
        store, releasing its lock: the process is not left switching
        threads every 0.2 ms, nor the file locked by a store nobody holds.
        """
        from imapmig.state.lock import StateFileLock

        directory = os.path.abspath(self.mktemp())
        path = _writePlainConfig(directory)
        self.addCleanup(gc.enable)
        self.addCleanup(gc.unfreeze)
        self.addCleanup(sys.setswitchinterval, sys.getswitchinterval())
        options = tap.Options()
        options.parseOptions(["--config", path])
        self.addCleanup(tap.resumeCollection)

        def refuse(reactor: object) -> None:
            raise RuntimeError("refused")

        self.patch(tap, "limitHeapGrowth", lambda: True)
        self.patch(tap, "quietStartFailures", lambda: None)
        self.patch(tap, "exitZeroAfterGracefulStop", refuse)
        sys.setswitchinterval(0.005)
        self.assertRaises(RuntimeError, tap.makeService, options)
        self.assertAlmostEqual(sys.getswitchinterval(), 0.005)
        StateFileLock.acquire(
            os.path.join(directory, "state.sqlite"), lambda: 1_700_000_000.0
        ).release()


class QuietStartFailuresTests(SynchronousTestCase):
    """
    L{tap.quietStartFailures} keeps an uncaught L{StatusListenerFailed}
    from printing a traceback, once however often it is called.
    """

    def setUp(self) -> None:
        self.patch(sys, "excepthook", self.recordingHook)
        self.seen: list[BaseException] = []

    def recordingHook(self, kind: type[BaseException], value: BaseException, tb: object) -> None:
        self.seen.append(value)

    def test_others(self) -> None:
        """
        A L{StatusListenerFailed} reaches no earlier hook; any other
        exception reaches the hook installed before, once.
        """
        from twisted.python.failure import Failure

        from imapmig.daemon.listener import listenerFailed
        from imapmig.errors import StatusListenerFailed

        tap.quietStartFailures()
        failed = listenerFailed("tcp:8025", Failure(OSError(98, "Address already in use")))
        sys.excepthook(StatusListenerFailed, failed, None)
        other = ValueError("x")
        sys.excepthook(ValueError, other, None)
        self.assertEqual(self.seen, [other])

    def test_once(self) -> None:
        """
        Called again (a second L{tap.makeService} in one process), it
        installs nothing more: the hook does not wrap itself.
        """
        tap.quietStartFailures()
        installed = sys.excepthook
        tap.quietStartFailures()
        self.assertIs(sys.excepthook, installed)
