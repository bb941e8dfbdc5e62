# -*- test-case-name: tests.test_service_stop -*-
"""
The daemon's root service: the parent of every other (L{imapmig.daemon.service}
assembles the tree), the handle a reload goes through, and a stop that
ends, whatever its children do.
"""

from __future__ import annotations

import signal
from typing import Any, Sequence

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, DeferredList, TimeoutError, maybeDeferred, succeed
from twisted.internet.interfaces import IReactorCore, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.config import Config
from imapmig.progress import JobState, MigrationProgress
from imapmig.daemon.reload import ConfigReloader, IReloadObserver
from imapmig.daemon.startsignals import heldSignals
from imapmig.state import IStateStore

log = Logger()

# Seconds a stop may go on after stop_timeout (when the jobs' connections
# are dropped: logging out, recording the last outcomes and closing
# follow) before the daemon stops without waiting for the rest; within
# the unit's TimeoutStopSec=60 with the default stop_timeout of 30.
STOP_MARGIN = 10.0


class MigrationService(MultiService):
    """
    The daemon: the job queue, the status listener, and the state store
    they share (closed when the service stops).

    @ivar reloader: reloads its configuration (set by L{buildService});
        L{None} for a service that cannot reload.
    """

    def __init__(
        self,
        store: IStateStore,
        progress: MigrationProgress,
        clock: IReactorTime | None = None,
    ) -> None:
        """
        @param clock: bounds a stop (L{stopService}); L{None}: unbounded.
        """
        MultiService.__init__(self)
        self.store = store
        self.progress = progress
        self.reloader: ConfigReloader | None = None
        self._clock = clock

    def startService(self) -> None:
        """
        Start every child, holding SIGINT and SIGTERM meanwhile
        (L{imapmig.daemon.startsignals}): one that comes is raised again once the
        reactor (given as C{clock}) runs and handles it.
        """
        held: list[int] = []
        with heldSignals(held.append):
            MultiService.startService(self)
        core = self._clock
        for number in held:
            log.info(
                "Signal {signal} received while the daemon started: stopping once it runs",
                signal=signal.Signals(number).name,
            )
            if IReactorCore.providedBy(core):
                core.callWhenRunning(signal.raise_signal, number)

    @property
    def config(self) -> Config | None:
        """
        The configuration the daemon runs with now (after any reload).
        """
        return None if self.reloader is None else self.reloader.config

    def addReloadObserver(self, observer: IReloadObserver) -> None:
        """
        Tell C{observer} when each reload of the configuration starts and
        how it ended.
        """
        assert self.reloader is not None, "a service built by buildService reloads"
        self.reloader.addObserver(observer)

    def reloadFrom(self, path: str) -> Deferred[bool]:
        """
        Reload the configuration from the file at C{path} (what C{SIGHUP}
        does): see L{imapmig.daemon.reload}.

        @return: fires with whether the new configuration was applied
            (C{False}: it was invalid, each problem logged, nothing
            changed).
        """
        assert self.reloader is not None, "a service built by buildService reloads"
        return self.reloader.reloadFrom(path)

    def stopService(self) -> Deferred[None]:
        """
        Stop every service (the jobs finish what is in flight, within
        C{stop_timeout}), then close the state store.  A last resort
        bounds the whole: whatever has not stopped C{STOP_MARGIN} seconds
        after C{stop_timeout} is logged as an error and not waited for, so
        that a wait that never ends cannot keep the daemon from stopping.
        """
        Service.stopService(self)
        # As MultiService.stopService, each service's stop kept by name.
        stops = [
            (service.name or type(service).__name__, maybeDeferred(service.stopService))
            for service in reversed(list(self))
        ]
        stopped: Deferred[None] = DeferredList([d for _, d in stops]).addCallback(
            lambda _: None
        )
        if not stopped.called and self._clock is not None:
            stopped = self._bounded(stopped, stops, self._clock)

        def closeStore(result: object) -> Deferred[object]:
            self.store.close()
            # A store that commits its queued writes as it closes (the
            # PostgreSQL store's batcher) is waited for: stopping the
            # reactor first would lose them.
            whenClosed = getattr(self.store, "whenClosed", None)
            closed: Deferred[object] = (
                succeed(None) if whenClosed is None else whenClosed()
            )
            if not closed.called and self._clock is not None:
                # Not for ever: a database cut off never answers, and a
                # write not committed is one the journal still covers.
                closed.addTimeout(STOP_MARGIN, self._clock)
                closed.addErrback(self._notClosed)
            return closed.addBoth(lambda _: result)

        stopped.addBoth(closeStore)
        return stopped

    def _notClosed(self, failure: Failure) -> None:
        """
        The state store's last writes were not committed within
        C{STOP_MARGIN} seconds of its close: stop without them.
        """
        failure.trap(TimeoutError)
        log.error(
            "The state store's last writes were not committed {margin} s after its close:"
            " stopping without them (the journal keeps what was in flight)",
            margin=STOP_MARGIN,
        )

    def _bounded(
        self,
        stopped: Deferred[None],
        stops: Sequence[tuple[str, Deferred[Any]]],
        clock: IReactorTime,
    ) -> Deferred[None]:
        """
        C{stopped}, or, if it has not fired C{STOP_MARGIN} seconds after
        C{stop_timeout}, a result then, once the services still stopping
        (of C{stops}, each service's name and stop) are logged.
        """
        # Without a configuration (a service not built by buildService):
        # stop_timeout's default.
        stopTimeout = 30.0 if self.config is None else self.config.stopTimeout
        bound = stopTimeout + STOP_MARGIN
        result: Deferred[None] = Deferred()

        def giveUp() -> None:
            log.error(
                "The stop is not over {bound} s after it began (stop_timeout {stopTimeout} s"
                " and {margin} s more): stopping without waiting for {services}; jobs still"
                " stopping: {jobs}",
                bound=bound,
                stopTimeout=stopTimeout,
                margin=STOP_MARGIN,
                services=", ".join(name for name, d in stops if not d.called) or "nothing",
                jobs=", ".join(
                    job.name for job in self.progress if job.state == JobState.STOPPING
                )
                or "none",
            )
            result.callback(None)

        timer = clock.callLater(bound, giveUp)

        def over(outcome: object) -> None:
            if timer.active():
                timer.cancel()
                # Fired from the reactor's next turn, not from here: the
                # last service often stops inside a connection's
                # dataReceived (the reply to a LOGOUT), and the reactor's
                # shutdown that follows disconnects every connection at
                # once, that one too; a TLS connection whose dataReceived
                # is still running then fails on its torn-down TLS state
                # (an "Unhandled Error" traceback with every stop).
                clock.callLater(0, result.callback, None)

        stopped.addBoth(over)
        return result
