# -*- test-case-name: tests.test_tokenrefresh -*-
"""
The pieces of an HTTP client that the OAuth 2.0 refresh grant
(L{imapmig.oauth.tokenrefresh}) and the webhook (L{imapmig.daemon.webhook}) share: a
connection pool that logs nothing at the default level, a request body
given whole, and a response body read up to a bound.

Moved here from L{imapmig.oauth.tokenrefresh}, which imports pyOpenSSL: a
webhook on plain http to loopback runs in a daemon without OpenSSL
(L{imapmig.access.cleartext}).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool, ResponseDone, _HTTP11ClientFactory
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from imapmig.errors import BodyTooLarge, escapedExcerpt

__all__ = ["BoundedBody", "BytesBody", "QuietConnectionPool", "shortError"]


class _QuietHTTP11ClientFactory(_HTTP11ClientFactory):
    """
    The pool's connection factory, without its "Starting factory" and
    "Stopping factory" lines for every request.
    """

    noisy = False


class QuietConnectionPool(HTTPConnectionPool):
    """
    An L{HTTPConnectionPool} whose connections log nothing at the default
    level.  (Twisted offers no public way to quiet the pool's factory: its
    C{_factory} is the documented hook.)
    """

    _factory = _QuietHTTP11ClientFactory

    def __init__(self, reactor: Any, persistent: bool = True) -> None:
        """
        @param reactor: see L{HTTPConnectionPool}.
        @param persistent: see L{HTTPConnectionPool}.
        """
        HTTPConnectionPool.__init__(self, reactor, persistent)


@implementer(IBodyProducer)
class BytesBody:
    """
    A small request body given whole.
    """

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.length = len(body)

    def startProducing(self, consumer: Any) -> Deferred[None]:
        consumer.write(self._body)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass



class BoundedBody(Protocol):
    """
    Collects a response body of at most C{limit} octets; a longer one is
    abandoned (L{done} fails with L{BodyTooLarge}).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self.done: Deferred[bytes] = Deferred(self._cancel)

    def _cancel(self, done: Deferred[bytes]) -> None:
        transport: Any = self.transport
        if transport is not None:
            transport.stopProducing()

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        self._data += data
        if len(self._data) > self._limit:
            self.done.errback(BodyTooLarge())
            # A response's transport is an IPushProducer: stop reading.
            transport: Any = self.transport
            transport.stopProducing()

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(bytes(self._data))
        else:
            self.done.errback(reason)


def shortError(e: Exception) -> str:
    """
    A network error, short: the first reason of a wrapped Twisted error.
    """
    shown: object = e
    reasons = getattr(e, "reasons", None)
    if reasons:
        first = reasons[0]
        shown = first.value if isinstance(first, Failure) else first
    text = str(shown) or type(shown).__name__
    return escapedExcerpt(text.encode("utf-8"), 120)
