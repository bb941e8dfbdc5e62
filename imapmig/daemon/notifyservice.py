# -*- test-case-name: tests.test_sdnotify,tests.test_daemon_notify -*-
"""
Tell systemd how the daemon is doing (C{Type=notify}, L{imapmig.daemon.sdnotify}):

    READY=1        once the services have started, the state store is
                   open and the status listener is bound, and the
                   reactor runs
    STATUS=...     every 5 s, a line from the progress model
                   (L{statusLine}): what C{systemctl status} shows
    WATCHDOG=1     every half C{WatchdogSec=}, from a reactor timer: a
                   stuck reactor stops petting, and systemd restarts it
    STOPPING=1     at the start of shutdown
    RELOADING=1    around a reload (C{Type=notify-reload}), then READY=1
                   again with a STATUS saying whether it applied

L{addSystemdNotifier} adds it to the daemon when systemd started it
(moved here from L{imapmig.daemon.service}, at its size bound).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from enum import Enum
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, MutableMapping

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.daemon.sdnotify import Notifier, monotonicMicroseconds

if TYPE_CHECKING:
    from imapmig.daemon.rootservice import MigrationService

log = Logger()

STATUS_INTERVAL = 5.0
"""
Seconds between two C{STATUS=} lines.
"""

STOPPING_STATUS = "stopping: finishing the messages in flight"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _int(mapping: Mapping[str, object], key: str) -> int:
    value = mapping.get(key)
    return value if isinstance(value, int) else 0


def _mapping(mapping: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = mapping.get(key)
    return value if isinstance(value, Mapping) else {}


def formatETA(seconds: float) -> str:
    """
    A time left as C{HH:MM} (minutes rounded up, so that only nothing left
    reads C{00:00}), with days before it past a day: C{1d 03:10}.
    """
    minutes = math.ceil(max(seconds, 0.0) / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours:02d}:{minutes:02d}"
    return f"{days}d {clock}" if days else clock


def formatRate(perSecond: float) -> str:
    """
    A message rate: whole messages per second, one decimal below 10.
    """
    if perSecond >= 10 or perSecond <= 0:
        return f"{perSecond:,.0f} msg/s"
    return f"{perSecond:.1f} msg/s"


_HELD_WORDS = (
    ("paused", "paused by the admin"),
    ("paused_by_server", "paused by the server"),
    ("deferred", "waiting for daily budgets"),
)
"""
What the jobs that cannot move wait for, in the words of the status page
(C{HELD_WORDS} in C{dashboard.js}), by state.
"""


def heldText(held: Mapping[str, object], now: float | None) -> str:
    """
    Why nothing can move, from the status JSON's C{totals.held}: e.g.
    C{3 jobs paused by the admin}, C{2 jobs waiting for daily budgets until
    00:00 UTC} (the earliest time one of them goes on by itself; with its
    date when not within a day of C{now}).
    """
    jobs = _mapping(held, "jobs")
    parts = [
        f"{_plural(_int(jobs, state), 'job')} {words}"
        for state, words in _HELD_WORDS
        if _int(jobs, state)
    ]
    text = ", ".join(parts) or "nothing can move"
    until = held.get("until")
    if isinstance(until, (int, float)):
        text += " until " + _clockTime(until, now)
    return text


def _clockTime(when: float, now: float | None) -> str:
    """
    The time C{when}, in UTC: C{00:00 UTC}, with its date when not within
    a day of C{now}.
    """
    soon = now is not None and 0 <= when - now < 86400
    return datetime.fromtimestamp(when, timezone.utc).strftime(
        "%H:%M UTC" if soon else "%Y-%m-%d %H:%M UTC"
    )


def statusLine(summary: Mapping[str, object]) -> str:
    """
    The one-line C{STATUS=} of the run, e.g. C{3 of 120 jobs done, 41,200
    msgs, 850 msg/s, ETA 02:10}.

    Jobs done are those completed; failed and paused jobs, and failed
    messages, are named when there are any.  While some sources are not
    counted yet, the ETA is not known: the line says C{counting sources}.
    When no job can move (C{totals.held}: every job paused, or waiting for
    a budget or the server), it says why instead of a rate and an ETA, as
    the status page does (L{heldText}).
    Once every job has ended, the line starts with C{finished:} and has no
    rate.

    @param summary: L{imapmig.progress.MigrationProgress.summary}.
    """
    totals = _mapping(summary, "totals")
    run = _mapping(summary, "run")
    jobs = _int(totals, "jobs_total")
    if jobs == 0:
        return "no jobs"
    states = _mapping(totals, "jobs")
    done = _int(states, "done") + _int(states, "done_with_failures")
    held = totals.get("held")
    parts = [f"{done:,} of {_plural(jobs, 'job')} done", *_failedAndPaused(totals, states, held)]
    if run.get("finished_at") is not None:
        return "finished: " + ", ".join(parts)
    if isinstance(held, Mapping):
        now = summary.get("time")
        parts.append(heldText(held, float(now) if isinstance(now, (int, float)) else None))
        return ", ".join(parts)
    return ", ".join(parts + _pace(totals, jobs))


def _failedAndPaused(
    totals: Mapping[str, object], states: Mapping[str, object], held: object
) -> list[str]:
    """
    The status line's counts after the jobs done: jobs failed, jobs
    paused (while others move; when none moves, the end of the line says
    why, L{heldText}), messages done, messages failed.
    """
    paused = 0 if isinstance(held, Mapping) else sum(_int(states, each) for each, _ in _HELD_WORDS)
    return [
        *_ifAny(_int(states, "failed"), "failed"),
        *_ifAny(paused, "paused"),
        _plural(_int(totals, "messages_done"), "msg"),
        *_ifAny(_int(totals, "messages_failed"), "failed"),
    ]


def _ifAny(count: int, what: str) -> list[str]:
    """
    C{["1,234 failed"]}, or nothing if C{count} is 0.
    """
    return [f"{count:,} {what}"] if count else []


def _pace(totals: Mapping[str, object], jobs: int) -> list[str]:
    """
    The end of a moving run's status line: its rate and ETA (C{counting
    sources} while some are not counted, C{ETA unknown} otherwise).
    """
    rate = totals.get("messages_per_second")
    parts = [formatRate(float(rate) if isinstance(rate, (int, float)) else 0.0)]
    eta = totals.get("eta_seconds")
    if isinstance(eta, (int, float)):
        parts.append(f"ETA {formatETA(eta)}")
    elif _int(totals, "jobs_counted") < jobs:
        parts.append("counting sources")
    else:
        parts.append("ETA unknown")
    return parts


class NotifyPhase(Enum):
    """
    What systemd was last told of the daemon's life.
    """

    STARTING = "starting"
    READY = "ready"
    RELOADING = "reloading"
    STOPPING = "stopping"


class SystemdNotifyService(Service):
    """
    Sends the daemon's notifications to systemd (see the module): a child
    of the daemon's root service, added last.

    @ivar phase: what systemd was last told: L{NotifyPhase.STARTING} until
        C{READY=1}, which a reload's C{RELOADING=1} leaves and its end's
        C{READY=1} restores; L{NotifyPhase.STOPPING} from C{STOPPING=1}
        on, for good.
    """

    def __init__(
        self,
        notifier: Notifier,
        reactor: Any,
        summary: Callable[[], Mapping[str, object]],
        whenListening: Callable[[], Deferred[None]] | None = None,
        watchdog: float | None = None,
        monotonic: Callable[[], int] = monotonicMicroseconds,
        statusInterval: float = STATUS_INTERVAL,
    ) -> None:
        """
        @param notifier: where notifications go.
        @param reactor: an L{IReactorTime} and L{IReactorCore}: the timers,
            the shutdown trigger, and when it runs.
        @param summary: the progress summary (L{statusLine}).
        @param whenListening: fires once the status listener is bound
            (L{imapmig.daemon.listener.ListenerService.whenListening}); L{None}
            when there is none.
        @param watchdog: the watchdog timeout in seconds
            (L{imapmig.daemon.sdnotify.watchdogSeconds}), petted every half of
            it; L{None}: no watchdog.
        @param monotonic: C{CLOCK_MONOTONIC} in microseconds, for a
            reload's C{MONOTONIC_USEC=}.
        @param statusInterval: seconds between two C{STATUS=} lines.
        """
        self._notifier = notifier
        self._reactor = reactor
        self._summary = summary
        self._whenListening = whenListening
        self._watchdogTimeout = watchdog
        self._monotonic = monotonic
        self._statusInterval = statusInterval
        self._watchdog: LoopingCall | None = None
        self._status: LoopingCall | None = None
        self.phase = NotifyPhase.STARTING

    def startService(self) -> None:
        """
        Start petting the watchdog, and send C{READY=1} once the reactor
        runs and the status listener is bound.
        """
        Service.startService(self)
        # Before any service's stopService (the launchers add theirs after
        # starting the services): systemd learns of the stop at its
        # start, not once the jobs have stopped.
        self._reactor.addSystemEventTrigger("before", "shutdown", self.stopping)
        if self._watchdogTimeout is not None:
            self._watchdog = LoopingCall(self._notifier.send, {"WATCHDOG": "1"})
            self._watchdog.clock = self._reactor
            self._watchdog.start(self._watchdogTimeout / 2, now=True)
        self._reactor.callWhenRunning(self._reactorRunning)

    def _reactorRunning(self) -> None:
        if not self.running:
            return
        listening = succeed(None) if self._whenListening is None else self._whenListening()
        listening.addCallbacks(self._listening, self._notListening)

    def _listening(self, ignored: object) -> None:
        if not self.running or self.phase is not NotifyPhase.STARTING:
            return
        self.phase = NotifyPhase.READY
        self._notifier.send(self._withStatus({"READY": "1"}))
        self._status = LoopingCall(self._sendStatus)
        self._status.clock = self._reactor
        self._status.start(self._statusInterval, now=False)

    def _notListening(self, failure: Failure) -> None:
        reason = failure.getErrorMessage()
        log.error(
            "systemd is not told the daemon is ready: the status listener is not"
            " listening ({error})",
            error=reason,
        )
        self._notifier.send({"STATUS": f"not ready: the status listener is not listening ({reason})"})

    def _statusLine(self) -> str | None:
        try:
            return statusLine(self._summary())
        except Exception:
            # A bug in the summary must neither end the updates for good
            # nor keep READY=1 from being sent.
            log.failure("Could not build the systemd status line")
            return None

    def _withStatus(self, fields: dict[str, str], prefix: str = "") -> dict[str, str]:
        line = self._statusLine()
        if line is not None:
            fields["STATUS"] = prefix + line
        return fields

    def _sendStatus(self) -> None:
        fields = self._withStatus({})
        if fields:
            self._notifier.send(fields)

    def reloadStarted(self) -> None:
        """
        A reload begins: C{RELOADING=1} with C{MONOTONIC_USEC=}, as
        C{Type=notify-reload} expects (nothing before the daemon was ready
        or once it is stopping).
        """
        if self.phase is not NotifyPhase.READY:
            return
        self.phase = NotifyPhase.RELOADING
        self._notifier.send(
            {
                "RELOADING": "1",
                "MONOTONIC_USEC": str(self._monotonic()),
                "STATUS": "reloading the configuration",
            }
        )

    def reloadEnded(self, applied: bool) -> None:
        """
        The reload begun by L{reloadStarted} is over: C{READY=1} again,
        with a C{STATUS=} saying whether the new configuration applied
        (until the next status line).

        @param applied: whether it applied (L{False}: it was invalid,
            logged, nothing changed).
        """
        if self.phase is not NotifyPhase.RELOADING:
            return
        self.phase = NotifyPhase.READY
        outcome = (
            "configuration reloaded"
            if applied
            else "reload failed: configuration invalid, nothing changed (see the log)"
        )
        fields = self._withStatus({"READY": "1"}, f"{outcome}; ")
        fields.setdefault("STATUS", outcome)
        self._notifier.send(fields)

    def stopping(self) -> None:
        """
        The daemon stops: C{STOPPING=1} (once), and no more status lines
        or watchdog: systemd supervises a stop by its C{TimeoutStopSec=}.
        """
        if self.phase is NotifyPhase.STOPPING:
            return
        self.phase = NotifyPhase.STOPPING
        for loop in (self._watchdog, self._status):
            if loop is not None and loop.running:
                loop.stop()
        self._watchdog = self._status = None
        self._notifier.send({"STOPPING": "1", "STATUS": STOPPING_STATUS})

    def stopService(self) -> None:
        """
        L{stopping}, if the shutdown trigger did not come first; then close
        the socket.
        """
        Service.stopService(self)
        self.stopping()
        self._notifier.close()


def addSystemdNotifier(
    root: MigrationService,
    reactor: Any,
    environ: Mapping[str, str],
    whenListening: Callable[[], Deferred[None]] | None,
) -> None:
    """
    Add the systemd notifier to C{root}, last, when C{environ} names a
    C{NOTIFY_SOCKET}; and take systemd's variables out of C{environ} (see
    L{buildService}).
    """
    from imapmig.daemon.sdnotify import (
        notifierFromEnvironment,
        unsetNotifyEnvironment,
        watchdogSeconds,
    )

    notifier = notifierFromEnvironment(environ)
    watchdog = watchdogSeconds(environ, os.getpid())
    if isinstance(environ, MutableMapping):
        unsetNotifyEnvironment(environ)
    if notifier is None:
        return
    service = SystemdNotifyService(
        notifier, reactor, root.progress.summary, whenListening, watchdog
    )
    # Twisted's service methods are unannotated.
    service.setName("systemd")  # type: ignore[no-untyped-call]
    service.setServiceParent(root)  # type: ignore[no-untyped-call]
    root.addReloadObserver(service)
