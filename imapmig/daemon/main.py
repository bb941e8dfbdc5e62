# -*- test-case-name: tests.test_daemon -*-
"""
The daemon without twistd: C{python -m imapmig.daemon --config FILE}
(installed as C{imapmig-daemon}).

It runs the service L{imapmig.daemon.tap.makeService} builds, as C{twistd
--nodaemon --pidfile= imapmig} runs it under systemd: in the foreground,
without a pid file, logging to standard output in twistd's format, stopped
gracefully by C{SIGTERM} or C{SIGINT}, writing events at info level and
above (C{IMAPMIG_LOG_LEVEL} says otherwise: L{imapmig.log.loglevels}), as
text, JSON lines or journal entries (C{IMAPMIG_LOG_FORMAT}, by default
the journal under systemd: L{imapmig.log.logoutput}), with
the same options
(C{--config}, C{--exit-when-done}, C{--check-config}, with C{--connect}
trying every server once: L{imapmig.daemon.connectcheck}) and exit statuses
(L{imapmig.daemon.tap.EXIT_OK}, L{imapmig.daemon.tap.EXIT_JOB_FAILED},
L{imapmig.daemon.tap.EXIT_BAD_CONFIG}; a bad command line also exits with
L{imapmig.daemon.tap.EXIT_BAD_CONFIG}).

What it leaves out is what makes it start faster: twistd's own imports
(its option parser, C{pdb}, its plugin discovery, which imports every
twistd plugin installed), and the cyclic garbage collector's passes over
everything imported before the configuration is read (it is paused from
the first line here, where twistd can only pause it once it reaches
imapmig's options).  C{bench/startup.py} measures both launchers.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING, Any, Sequence, TextIO

if TYPE_CHECKING:
    from twisted.application.service import IService
    from twisted.logger import LogLevelFilterPredicate


def startService(service: IService, reactor: Any) -> None:
    """
    Start C{service} as twistd starts an application's services: at once,
    before the reactor runs, and stop it (and wait for it) when the
    reactor shuts down.

    @param service: the daemon's service.
    @param reactor: the reactor that will run it (an L{IReactorCore}).
    """
    service.privilegedStartService()
    service.startService()
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)


def beginLogging(
    logFile: TextIO,
    levels: LogLevelFilterPredicate | None = None,
    logFormat: str = "text",
) -> None:
    """
    Send the log events C{levels} lets through (by default those at info
    level and above: L{imapmig.log.loglevels}) to C{logFile} in twistd's text
    format (C{2026-11-25T22:45:40+0000 [imapmig.job.migration#info] ...}),
    as JSON lines, or to the journal, as C{logFormat} says
    (L{imapmig.log.logoutput}), with the events logged before (while the
    service was built); standard output and error, and warnings, go to
    the log as under twistd.

    @param logFormat: one of L{imapmig.log.logoutput.FORMATS}.
    """
    from twisted.logger import globalLogBeginner

    from imapmig.log.loglevels import filtered, levelsFrom
    from imapmig.log.logoutput import observerFor

    # The journal's fallback is standard error as it is now, before the
    # log begins and redirects sys.stderr into itself.
    observer = observerFor(logFormat, logFile, sys.stderr)
    globalLogBeginner.beginLoggingTo(
        [filtered(observer, levels if levels is not None else levelsFrom(""))]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the daemon until it stops.

    @param argv: the command-line arguments (default: C{sys.argv[1:]}).
    @return: the exit status (a job that could not run with
        C{--exit-when-done} ends the process with
        L{imapmig.daemon.tap.EXIT_JOB_FAILED} as it exits, as under twistd).
    """
    # Everything imported from here on lives as long as the process: see
    # imapmig.daemon.tap.pauseCollection.  makeService resumes collection.
    gc.disable()
    from twisted.python import usage

    from imapmig.daemon import tap
    # usage.Options is unannotated.
    options = tap.Options()  # type: ignore[no-untyped-call]
    # --help and usage errors name this program, as twistd names itself.
    options.synopsis = f"Usage: imapmig-daemon {tap.Options.synopsis}"
    try:
        options.parseOptions(  # type: ignore[no-untyped-call]
            list(sys.argv[1:] if argv is None else argv)
        )
    except usage.UsageError as e:
        tap.resumeCollection()
        sys.stderr.write(f"{options}\nimapmig-daemon: {e}\n")
        return tap.EXIT_BAD_CONFIG
    from imapmig.log.loglevels import levelsFromEnvironment
    from imapmig.log.logoutput import formatFromEnvironment

    try:
        levels = levelsFromEnvironment()
        logFormat = formatFromEnvironment(os.environ, (sys.stdout, sys.stderr))
    except ValueError as e:
        tap.resumeCollection()
        sys.stderr.write(f"imapmig-daemon: {e}\n")
        return tap.EXIT_BAD_CONFIG
    logFile = sys.stdout
    from twisted.internet import reactor

    service = tap.makeService(options)
    beginLogging(logFile, levels, logFormat)
    from twisted.logger import Logger

    Logger(namespace="imapmig.daemon").info(
        "imapmig {version} (python {python}) starting up; reactor class: {reactor}.",
        version=_version(),
        python=sys.version.split()[0],
        reactor=f"{type(reactor).__module__}.{type(reactor).__qualname__}",
    )
    from imapmig.errors import StatusListenerFailed

    try:
        startService(service, reactor)
    except StatusListenerFailed:
        # Logged by the listener, in one critical line.
        return tap.EXIT_START_FAILED
    reactor.run()
    return tap.EXIT_OK


def _version() -> str:
    from imapmig import __version__

    return __version__


def run() -> None:
    """
    The C{imapmig-daemon} command: L{main}, its result the exit status.
    """
    raise SystemExit(main())


if __name__ == "__main__":
    run()
