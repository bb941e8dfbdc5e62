# -*- test-case-name: tests.test_sdnotify -*-
"""
The service that listens for the status site, and says when it does.
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, fail, maybeDeferred, succeed
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from imapmig.daemon.listenreason import listenFailureReason, shortListenReason
from imapmig.errors import StatusListenerFailed

log = Logger()


def listenerFailed(endpoint: str, reason: Failure) -> StatusListenerFailed:
    """
    The daemon's start failing because the status listener on C{endpoint}
    could not listen: the reason first, short (see
    L{StatusListenerFailed}), then the endpoint.
    """
    return StatusListenerFailed(f"{shortListenReason(reason)} ({endpoint})", reason)


class ListenerService(Service):
    """
    Listens on an endpoint while it runs, as C{strports.service} does,
    and tells who asks when the port is bound (L{whenListening}).

    A port that cannot be bound at once (in use, no permission) is logged
    at critical level, naming the endpoint and the reason, and fails
    C{privilegedStartService} (and so the daemon's start) with
    L{StatusListenerFailed}; an endpoint that fails later is logged as an
    error, and L{whenListening} fails.

    @ivar port: the listening port, once bound.
    """

    def __init__(
        self, endpoint: IStreamServerEndpoint, factory: IProtocolFactory, description: str
    ) -> None:
        """
        @param endpoint: where to listen (C{serverFromString}).
        @param factory: the protocols' factory (the status site).
        @param description: the endpoint as configured, for a log.
        """
        self._description = description
        self._starting = False
        self._endpoint = endpoint
        self._factory = factory
        self._listening: Deferred[IListeningPort] | None = None
        self._failure: Failure | None = None
        self._waiting: list[Deferred[None]] = []
        self.port: IListeningPort | None = None

    def privilegedStartService(self) -> None:
        """
        Start listening (before privileges are shed, under twistd).

        @raise StatusListenerFailed: the endpoint failed at once.
        """
        Service.privilegedStartService(self)
        self._starting = True
        try:
            self._listening = self._endpoint.listen(self._factory)
            self._listening.addCallbacks(self._bound, self._notBound)
        finally:
            self._starting = False
        if self._failure is not None:
            log.critical(
                "The status listener could not listen on {endpoint}: {error}",
                endpoint=self._description,
                error=listenFailureReason(self._failure),
            )
            raise listenerFailed(self._description, self._failure)

    def startService(self) -> None:
        """
        Start listening, unless L{privilegedStartService} did.
        """
        Service.startService(self)
        if self._listening is None:
            self.privilegedStartService()

    def _bound(self, port: IListeningPort) -> IListeningPort:
        self.port = port
        waiting, self._waiting = self._waiting, []
        for each in waiting:
            each.callback(None)
        return port

    def _notBound(self, failure: Failure) -> None:
        self._failure = failure
        if not self._starting and not failure.check(CancelledError):
            log.error(
                "The status listener could not listen on {endpoint}: {error}",
                endpoint=self._description,
                error=listenFailureReason(failure),
            )
        waiting, self._waiting = self._waiting, []
        for each in waiting:
            each.errback(failure)

    def whenListening(self) -> Deferred[None]:
        """
        Fire once the port is bound (at once if it is), or fail with the
        reason it could not be.
        """
        if self.port is not None:
            return succeed(None)
        if self._failure is not None:
            return fail(self._failure)
        waiting: Deferred[None] = Deferred()
        self._waiting.append(waiting)
        return waiting

    def stopService(self) -> Deferred[None]:
        """
        Stop listening (or give up trying).
        """
        Service.stopService(self)
        listening, self._listening = self._listening, None
        port, self.port = self.port, None
        if port is not None:
            return maybeDeferred(port.stopListening).addCallback(lambda _: None)
        if listening is not None:
            listening.cancel()
        return succeed(None)
