# -*- test-case-name: tests.test_tap -*-
"""
The twistd entry point: C{twistd -n imapmig --config FILE}.

The only module that fetches the global reactor, and only inside
L{makeService}.

Importing this module is cheap: twistd imports it to list its options,
before any configuration is read.  The configuration reader (which needs
Twisted's endpoint parser, and with it most of C{twisted.internet}) is
imported by L{Options.postOptions}, inside the garbage collector's pause
(L{pauseCollection}), and the daemon itself by L{makeService}.  A
configuration that uses no TLS is run without loading OpenSSL
(L{imapmig.access.cleartext}).
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from twisted.application.service import IService
from twisted.internet.error import ReactorNotRunning
from twisted.python import usage

from imapmig.errors import ConfigError, PermanentError
from imapmig.units import plural

if TYPE_CHECKING:
    from imapmig.config import Config

# Exit statuses.
EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_CONFIG = 2
EXIT_START_FAILED = 1
"""
The daemon could not start (its status port in use): the reason is logged.
"""


class Options(usage.Options):
    """
    Command-line options of the imapmig plugin.
    """

    synopsis = "--config FILE [--exit-when-done] [--check-config [--connect]]"
    longdesc = (
        "Drain the configured queue of migration jobs into IMAP accounts with "
        "pipelined APPENDs, serving progress at /status.json on the status "
        "endpoint.  An invalid configuration is reported one problem per line, "
        "with exit status 2."
    )
    optParameters = [
        ["config", "c", None, "The YAML configuration file."],
    ]
    optFlags = [
        [
            "exit-when-done",
            None,
            "Exit when the queue is drained: status 0 if every message was migrated "
            "or recorded as failed with its reason, 1 if a job could not run.",
        ],
        ["check-config", None, "Validate the configuration, print a summary and exit."],
        [
            "connect",
            None,
            "With --check-config: also try every server once (connect, TLS as configured,"
            " greeting, LOGIN with the first password a job uses for it, LOGOUT), one line"
            " each; exit status 1 if one fails.  A PostgreSQL state is connected to and"
            " checked first (exit status 2 if a daemon could not run on it).",
        ],
    ]

    config: Config

    def opt_version(self) -> None:
        """
        Print imapmig's version and exit.
        """
        import imapmig

        print(f"imapmig {imapmig.__version__}")
        sys.exit(0)

    def postOptions(self) -> None:
        path = self["config"]
        if not path:
            raise usage.UsageError("--config FILE is required")
        if self["connect"] and not self["check-config"]:
            raise usage.UsageError("--connect goes with --check-config")
        # Collection resumes at the end of makeService, which twistd calls
        # next; any other way out of here resumes it at once.
        pauseCollection()
        try:
            self._loadConfig(path)
        except BaseException:
            resumeCollection()
            raise

    def _loadConfig(self, path: str) -> None:
        """
        Read the configuration at C{path} into L{config}, or exit with its
        problems; with C{--check-config}, say it is valid (and try its
        servers with C{--connect}) and exit.
        """
        # --check-config checks a fleet's user lists' rows too; a daemon
        # keeps them as written (their rows are in the fleet's database).
        self.config = _readConfig(path, False if self["check-config"] else None)
        if self["check-config"]:
            self._checkConfig(path)

    def _checkConfig(self, path: str) -> NoReturn:
        """
        Say that the configuration at C{path} is valid, try its servers
        with C{--connect}, and exit.
        """
        jobs, servers = len(self.config.jobs), len(self.config.servers)
        sys.stdout.write(
            f"{path}: configuration OK: {plural(jobs, 'job')}, {plural(servers, 'server')}\n"
            f"{path}: state: {self.config.state.describe()}\n"
        )
        if self.config.fleet is not None:
            sys.stdout.write(f"{path}: fleet: {self.config.fleet.describe()}\n")
        sys.stdout.flush()
        if self["connect"]:
            checkDatabaseOnce(path, self.config)
            raise SystemExit(EXIT_OK if checkConnections(self.config) else EXIT_JOB_FAILED)
        raise SystemExit(EXIT_OK)


def _readConfig(path: str, lazyUserLists: bool | None = None) -> Config:
    """
    The configuration at C{path}, read once; exit with its problems if it
    is invalid.

    @param lazyUserLists: see L{imapmig.config.loadConfig}.
    """
    from imapmig.access.cleartext import tlsReason, withoutTLS
    from imapmig.configfile import readConfigFile

    try:
        # Parsed once, bounded (imapmig.configfile): the TLS decision
        # and the reader read the same document.
        read = readConfigFile(path)
    except ConfigError as e:
        _exitWithProblems(e.shown())
    # Decided before the reader is imported: it brings in Twisted's
    # transports, which offer TLS if OpenSSL can be imported.
    withoutOpenSSL = tlsReason(read.document) is None and withoutTLS()
    # Imported here, inside the collector's pause: the reader brings in
    # most of twisted.internet (see the module docstring).
    from imapmig.config import parseConfig

    try:
        config = parseConfig(read.document, path, None, read.looseFileMode, lazyUserLists)
    except ConfigError as e:
        _exitWithProblems(e.shown())
    if withoutOpenSSL:
        _checkWithoutTLS(path, config)
    return config


def _checkWithoutTLS(path: str, config: Config) -> None:
    """
    Exit if C{config}, read as one without TLS, needs it.
    """
    from imapmig.access.cleartext import configNeedsTLS

    if configNeedsTLS(config):
        # tlsReason answers no only where the parsed configuration
        # agrees; should they ever disagree, stop rather than fail at
        # the first TLS connection.
        _exitWithProblems(
            [f"{path}: internal error: the configuration needs TLS, but it was "
             "read as one without (imapmig.access.cleartext)"]
        )


def checkDatabaseOnce(path: str, config: Config) -> None:
    """
    With a PostgreSQL state, connect to it once and check that a daemon
    could run on it, changing nothing
    (L{imapmig.daemon.pgstate.checkDatabase}); say so in one line, or exit
    with the one line that refuses it.
    """
    from imapmig.config.model import PostgreSQLState

    if not isinstance(config.state, PostgreSQLState):
        return
    from imapmig.daemon.pgstate import checkDatabase

    try:
        version = checkDatabase(config, "probe", "imapmig check-config")
    except ConfigError as e:
        _exitWithProblems(e.shown())
    found = f"schema version {version}" if version else "no state yet: the first daemon makes it"
    sys.stdout.write(f"{path}: state: {config.state.uri()}: ok: connected, {found}\n")
    sys.stdout.flush()


def checkConnections(config: Config) -> bool:
    """
    Try every server of C{config} once on the global reactor, writing one
    line per server to standard output (L{imapmig.daemon.connectcheck}).

    @return: whether every server is ok.
    """
    from twisted.internet import reactor

    from imapmig.daemon.connectcheck import checkServers, writeChecks

    results: list[bool] = []

    def done(checks: object) -> None:
        if isinstance(checks, list):
            results.append(writeChecks(checks, sys.stdout))
        else:
            sys.stderr.write(f"{checks}\n")
        sys.stdout.flush()
        reactor.stop()

    reactor.callWhenRunning(lambda: checkServers(reactor, config).addBoth(done))
    reactor.run()
    return results == [True]


def _exitWithProblems(problems: tuple[str, ...] | list[str]) -> NoReturn:
    for problem in problems:
        sys.stderr.write(problem + "\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_BAD_CONFIG)


def _exitStatusAtExit(status: int) -> None:
    # twistd has no way for a service to set the process's exit status:
    # once the reactor has stopped and twistd has cleaned up (pid file,
    # logs), end the process with the status we decided.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def pauseCollection() -> None:
    """
    Stop the cyclic garbage collector while the daemon starts.

    Start-up allocates a few hundred thousand objects (modules, classes,
    the configuration) that all live as long as the process, and the
    collector would scan them over and over as they pile up: one full
    collection and a dozen younger ones cost ~50 ms of a ~0.5 s start, and
    more with a large configuration (bench/startup.py).  Nothing built
    then is garbage in a cycle worth collecting.  L{resumeCollection} ends
    the pause.
    """
    gc.disable()


def resumeCollection() -> None:
    """
    Restart the cyclic garbage collector after L{pauseCollection}, first
    moving every object alive now into the permanent generation: the
    daemon's modules, classes and configuration, which later collections
    then never scan again (C{gc.freeze}).
    """
    gc.freeze()
    gc.enable()


# See limitHeapGrowth.
MMAP_THRESHOLD = 2 * 1024 * 1024


def limitHeapGrowth() -> bool:
    """
    Ask glibc to serve every allocation of 2 MiB or more with its own mmap,
    returned to the system when freed.  By default glibc raises that
    threshold (up to 32 MiB) as large blocks are freed, and message bodies
    of every size then fragment the heap: the daemon's resident memory
    keeps the high mark of all the bodies it ever held.  A lower threshold
    (256 KiB) costs CPU instead: every write buffer and large body then
    page-faults in fresh memory (measured: twice the system time).  (Same
    as setting C{MALLOC_MMAP_THRESHOLD_=2097152}.)

    @return: whether the setting was applied (glibc only).
    """
    import ctypes

    try:
        # The process's own symbols, libc's among them: no search for the
        # library (ctypes.util.find_library runs ldconfig, ~7 ms).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    M_MMAP_THRESHOLD = -3
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def exitWhenDone(reactor: Any) -> Callable[[bool], None]:
    """
    The C{whenDone} of C{--exit-when-done}: stop C{reactor}, and make the
    process exit with L{EXIT_OK} if every job completed, L{EXIT_JOB_FAILED}
    otherwise.

    The queue may drain before the reactor runs: twistd starts the services
    first, and a job can fail without waiting for anything (its state
    database is corrupt, its source cannot be listed).  Stopping a reactor
    that is not running raises L{ReactorNotRunning} and the process would
    run for ever; so the stop waits until the reactor runs.

    Once the queue has drained, the process ends with that status as
    soon as twistd has cleaned up (pid file, logs) and the exit handlers
    registered after start-up have run (the journald writer's flush),
    without tearing the interpreter down: freeing every module and object
    one by one took 10-40 ms of an empty job's 0.3-0.6 s, more after a
    large copy, and nothing of it is needed once the state database is
    closed and the output flushed.  A daemon stopped otherwise (a signal)
    exits as before.

    @param reactor: an L{IReactorCore}.
    """
    decided: list[int] = []

    def exitAsDecided() -> None:
        if decided:
            _exitStatusAtExit(decided[0])

    # Registered now, at start-up, so that it runs after the exit handlers
    # registered later (they run last first).
    atexit.register(exitAsDecided)

    def stop() -> None:
        try:
            reactor.stop()
        except ReactorNotRunning:
            # Already stopping (a signal came first): nothing to add.
            pass

    def whenDone(allCompleted: bool) -> None:
        decided[:] = [EXIT_OK if allCompleted else EXIT_JOB_FAILED]
        reactor.callWhenRunning(stop)

    return whenDone


# Signals that stop the daemon gracefully (systemctl stop, kill, Ctrl-C).
_GRACEFUL_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def exitZeroAfterGracefulStop(reactor: Any) -> None:
    """
    Make a stop by C{SIGTERM} or C{SIGINT} end the process with status 0.

    twistd ends a process stopped by a signal by sending it that signal
    again once it has cleaned up, so that its parent sees it die of it.
    imapmig's stop is graceful (no new messages, the replies in flight
    recorded, every connection logged out or its unit left journaled for
    the next run): it is a success, and says so with its exit status.  Twisted
    keeps the signal in the reactor's C{_exitSignal} (no public API); it is
    cleared after the shutdown, when every service has stopped.

    @param reactor: the global reactor.
    """

    def clear() -> None:
        if getattr(reactor, "_exitSignal", None) in _GRACEFUL_SIGNALS:
            reactor._exitSignal = None

    reactor.addSystemEventTrigger("after", "shutdown", clear)


def installReloadSignal(reactor: Any, service: Any, path: str) -> None:
    """
    Make C{SIGHUP} (C{systemctl reload}) reload the configuration from
    C{path}: the handler only hands the reload to the reactor's thread
    (C{callFromThread}, safe from a signal handler), where
    C{service.reloadFrom(path)} runs (L{imapmig.daemon.reload}).  Nothing is
    installed outside the main thread, where Python refuses signal
    handlers.

    Under C{--exit-when-done} a reload is the same: jobs it adds before
    the queue is drained keep the daemon running until they end too; once
    the queue is drained the daemon is stopping, and a reload then applies
    nothing.

    @param reactor: the global reactor (an L{IReactorFromThreads}).
    @param service: the daemon's root service (L{MigrationService}).
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def reload(signum: int, frame: object) -> None:
        reactor.callFromThread(service.reloadFrom, path)

    signal.signal(signal.SIGHUP, reload)


def quietStartFailures() -> None:
    """
    Let an uncaught L{StatusListenerFailed} end the process (status 1,
    Python's for an uncaught exception) without a traceback: its reason
    is logged already, in one critical line.  twistd has no other way: it
    lets an exception raised by a service's start escape, after reporting
    it to the parent of a daemonizing start and removing the pid file.
    Every other exception is printed as before.  Installed once: called
    again (a second L{makeService} in one process), it adds nothing.
    """
    from imapmig.errors import StatusListenerFailed

    previous = sys.excepthook
    if getattr(previous, "_imapmigQuiet", False):
        return

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if not isinstance(value, StatusListenerFailed):
            previous(kind, value, tb)

    hook._imapmigQuiet = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def makeService(options: Options) -> IService:
    """
    Build the daemon from the parsed options; C{SIGHUP} reloads its
    configuration (L{installReloadSignal}).
    """
    from twisted.internet import reactor

    limitHeapGrowth()
    quietStartFailures()
    from imapmig.daemon.stateopen import openInThread

    # The state database opens (waiting for the disk) while the service's
    # modules are imported (imapmig.daemon.stateopen).
    opening = openInThread(options.config.state, reactor.seconds)
    try:
        from imapmig.daemon.service import buildService

        whenDone = exitWhenDone(reactor) if options["exit-when-done"] else None
        exitZeroAfterGracefulStop(reactor)
    except BaseException:
        # Not left lowering the switch interval, nor holding the lock.
        if opening is not None:
            opening.discard()
        raise
    try:
        store = None if opening is None else opening.store()
        root = buildService(options.config, reactor, whenDone=whenDone, store=store)
        # Config.path: the file as given, made absolute.
        installReloadSignal(reactor, root, options.config.path)
    except (ConfigError, PermanentError) as e:
        _exitWithProblems([str(e)])
        raise
    finally:
        # Paused by Options.postOptions.
        resumeCollection()
    logStart(options["config"], options.config)
    return root


def logStart(path: str, config: Config) -> None:
    """
    Log which imapmig runs which configuration: under twistd, whose own
    start line names twistd's version, the line that names imapmig's.

    @param path: the configuration file.
    @param config: what it holds.
    """
    from twisted.logger import Logger

    import imapmig

    jobs, servers = len(config.jobs), len(config.servers)
    Logger(namespace="imapmig.daemon.tap").info(
        "imapmig {version}: configuration {config}, {jobs} job{jobsPlural}{lists},"
        " {servers} server{serversPlural}",
        version=imapmig.__version__,
        config=path,
        jobs=jobs,
        jobsPlural="" if jobs == 1 else "s",
        # A fleet's user lists, kept as written: their rows are not counted.
        lists=f" and {plural(len(config.userLists), 'user list')}" if config.userLists else "",
        servers=servers,
        serversPlural="" if servers == 1 else "s",
    )
