# -*- test-case-name: tests.test_status, tests.test_status_limits -*-
"""
What every read-only status resource shares: C{GET} and C{HEAD} only (405
with C{Allow} otherwise), uncached responses, JSON bodies and JSON errors;
and what every connection of the status site shares: its channel
(L{StatusChannel}: the request deadline, the 400 for an over-long line) and
the site's bound on open connections (L{ConnectionSlots}).  Text without
filesystem paths is L{imapmig.status.redact}'s.
"""

from __future__ import annotations

import json
import math
import re
from typing import Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET, Request

from imapmig.errors import HTTPProblem

log = Logger()

JSON_TYPE = b"application/json; charset=utf-8"

READ_METHODS: Sequence[bytes] = (b"GET", b"HEAD")


def jsonBody(document: object) -> bytes:
    """
    C{document} as compact UTF-8 JSON.
    """
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def commonHeaders(request: Request, contentType: bytes) -> None:
    """
    Set the headers of every status response: its type, no caching, no
    sniffing.
    """
    headers = request.responseHeaders
    headers.setRawHeaders(b"Content-Type", [contentType])
    headers.setRawHeaders(b"Cache-Control", [b"no-store"])
    headers.setRawHeaders(b"X-Content-Type-Options", [b"nosniff"])


def answerError(request: Request, code: int, message: str) -> bytes:
    """
    Answer C{request} with C{code} and the JSON body C{{"error": message}}.

    @return: the body (empty for C{HEAD}, whose length is still given).
    """
    request.setResponseCode(code)
    commonHeaders(request, JSON_TYPE)
    return bodyFor(request, jsonBody({"error": message}))


def bodyFor(request: Request, body: bytes) -> bytes:
    """
    C{body} for a C{GET}; for a C{HEAD}, nothing, and the length C{GET}
    would have (without twisted.web logging that a HEAD response carried a
    body).
    """
    if request.method == b"HEAD":
        request.responseHeaders.setRawHeaders(b"Content-Length", [b"%d" % (len(body),)])
        return b""
    return body


def refuseMethod(request: Request, allowed: Sequence[bytes]) -> bytes | None:
    """
    If C{request}'s method is not one of C{allowed}, answer 405 with the
    C{Allow} header and a JSON error, and return the body; otherwise
    L{None}.  (Answered here rather than by raising UnsupportedMethod,
    which twisted.web turns into 501 for methods other than GET, HEAD,
    POST.)
    """
    if request.method in allowed:
        return None
    request.responseHeaders.setRawHeaders(b"Allow", [b", ".join(allowed)])
    return answerError(
        request,
        http.NOT_ALLOWED,
        f"method not allowed; use {', '.join(m.decode('ascii') for m in allowed)}",
    )


def refuseMethodAsText(request: Request, allowed: Sequence[bytes], text: bytes) -> bytes | None:
    """
    As L{refuseMethod}, with C{text} as a plain-text body (the dashboard's
    files and C{/metrics}, which answer in their own types).
    """
    if request.method in allowed:
        return None
    request.setResponseCode(http.NOT_ALLOWED)
    headers = request.responseHeaders
    headers.setRawHeaders(b"Allow", [b", ".join(allowed)])
    headers.setRawHeaders(b"Content-Type", [b"text/plain; charset=utf-8"])
    return text


class ReadOnlyResource(Resource):
    """
    A leaf that answers C{GET} and C{HEAD} with a fresh, uncached
    rendering of L{renderBody}, any other method with 405, an
    L{HTTPProblem} with its code and a JSON error, and any child path with
    404.
    """

    isLeaf = False
    contentType = JSON_TYPE

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        No children: 404.
        """
        return JSONNotFound("not found")

    def render(self, request: Request) -> bytes | int:
        """
        Answer C{GET} and C{HEAD} with L{renderBody}, anything else with
        405.
        """
        refused = refuseMethod(request, READ_METHODS)
        if refused is not None:
            return refused
        try:
            result = self.renderBody(request)
        except HTTPProblem as problem:
            return answerError(request, problem.code, problem.message)
        if isinstance(result, Deferred):
            finished: list[object] = []
            request.notifyFinish().addBoth(finished.append)

            def answer(body: bytes) -> None:
                if not finished:
                    commonHeaders(request, self.contentType)
                    request.write(bodyFor(request, body))
                    request.finish()

            def failed(failure: Failure) -> None:
                if finished:
                    return
                if failure.check(HTTPProblem):
                    problem: HTTPProblem = failure.value  # type: ignore[assignment]
                    code, message = problem.code, problem.message
                else:
                    log.failure("Status request failed", failure)
                    code, message = http.INTERNAL_SERVER_ERROR, "internal error"
                request.write(answerError(request, code, message))
                request.finish()

            result.addCallbacks(answer, failed)
            return NOT_DONE_YET
        commonHeaders(request, self.contentType)
        return bodyFor(request, result)

    def renderBody(self, request: Request) -> bytes | Deferred[bytes]:
        """
        The response body, now or later; raise (or fail with)
        L{HTTPProblem} to answer with an error.
        """
        raise NotImplementedError()


class JSONNotFound(ReadOnlyResource):
    """
    404 with a JSON error, for any method and any child.
    """

    def __init__(self, message: str) -> None:
        super().__init__()
        self._message = message

    def render(self, request: Request) -> bytes:
        """
        404 and the message.
        """
        return answerError(request, http.NOT_FOUND, self._message)

    def getChild(self, path: bytes, request: Request) -> IResource:
        """
        Itself: whatever lies below is not found either.
        """
        return self


REQUEST_DEADLINE = 15.0
"""
Seconds a client has to send a complete request (its request line, headers
and body): from the connection's accept for its first request, from the
first octet for each later request of a keep-alive connection.  A client
that connects and sends nothing, or sends a header line every few seconds
(each restarting twisted.web's idle timeout), would otherwise hold its
connection (and a file descriptor of the daemon) for a minute or for ever.
"""


GRACE = 1.0
"""
Seconds a connection is never closed to make room for another: from its
accept, to send its request; from its answer, to read it.
"""


class ConnectionSlots:
    """
    The status site's open connections, and which one to close when a new
    connection finds L{limit} of them open (L{admit}): a connection waiting
    between the requests of a keep-alive connection (or closing after its
    answer), the one waiting longest first, else the connection that has
    waited longest for a complete request (one that sent nothing, or drips
    it).  A connection whose request is being answered is never closed for
    another (unless the client stopped reading it: L{StatusChannel.pauseProducing}),
    nor one that has waited less than L{GRACE} seconds: a monitor's
    probe sends its request at once, and reads its answer at once.  When
    every connection is so protected, the newcomer is admitted beyond
    L{limit}, up to twice it; past that, the one waiting longest is closed
    whatever its age (and only when every connection is being answered is
    the newcomer refused).  Whoever holds sockets without completing a
    request thus holds them at most until the next connection arrives, and
    cannot close a probe's by reconnecting as fast as it is closed.

    @ivar limit: the connections open at once beyond which one is closed
        for each new one.
    """

    def __init__(self, limit: int, seconds: Callable[[], float], grace: float = GRACE) -> None:
        """
        @param limit: see L{limit}.
        @param seconds: the clock (the site's reactor's).
        @param grace: see L{GRACE}.
        """
        self.limit = limit
        self._seconds = seconds
        self._grace = grace
        # Every open connection; those between requests (or closing after
        # their answer), and those reading a request, each with the time
        # it began waiting, in that order.
        self._open: dict[StatusChannel, None] = {}
        self._idle: dict[StatusChannel, float] = {}
        self._reading: dict[StatusChannel, float] = {}

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, channel: StatusChannel) -> None:
        """
        C{channel} was accepted: it waits for its first request.
        """
        self._open[channel] = None
        self._reading[channel] = self._seconds()

    def reading(self, channel: StatusChannel) -> None:
        """
        C{channel} received an octet of a request (an idle keep-alive
        connection begins its next one).
        """
        if channel in self._open and channel not in self._reading:
            self._idle.pop(channel, None)
            self._reading[channel] = self._seconds()

    def answering(self, channel: StatusChannel) -> None:
        """
        C{channel}'s request is complete: it is answered, and never closed
        for another connection meanwhile.
        """
        self._idle.pop(channel, None)
        self._reading.pop(channel, None)

    def idle(self, channel: StatusChannel) -> None:
        """
        C{channel} is done with its request (kept alive, or closing).
        """
        if channel in self._open:
            self._reading.pop(channel, None)
            self._idle.pop(channel, None)
            self._idle[channel] = self._seconds()

    def closed(self, channel: StatusChannel) -> None:
        """
        C{channel} is gone (or being aborted): its slot is free.
        """
        self._open.pop(channel, None)
        self._idle.pop(channel, None)
        self._reading.pop(channel, None)

    def admit(self) -> tuple[bool, StatusChannel | None]:
        """
        Whether one more connection may be opened, and the connection to
        close first to make room for it, if any (see the class).
        """
        if len(self._open) < self.limit:
            return True, None
        overdue = _waitingLongest(self._idle, self._reading, self._seconds() - self._grace)
        if overdue is not None:
            return True, overdue
        if len(self._open) < 2 * self.limit:
            return True, None
        oldest = _waitingLongest(self._reading, self._idle, math.inf)
        return oldest is not None, oldest


def _waitingLongest(
    first: dict[StatusChannel, float], then: dict[StatusChannel, float], before: float
) -> StatusChannel | None:
    """
    The connection of C{first} that has waited longest, if since
    C{before} or earlier, else that of C{then}, if so; L{None} if neither
    has waited that long.  Each dict holds its connections by the time
    they started waiting, in that order.
    """
    for waiting in (first, then):
        for channel, since in waiting.items():
            if since <= before:
                return channel
            break
    return None


class StatusChannel(http.HTTPChannel):
    """
    twisted.web's HTTP channel, answering a request line or header line
    longer than it reads (C{MAX_LENGTH}, 16 KiB: a huge query string) with
    a 400 and a JSON error before closing, where twisted.web closes the
    connection without a word; and answering a request not complete within
    L{REQUEST_DEADLINE} seconds (of the accept, for the first; of its first
    octet, for a later one) with a 408 before closing.  The deadline runs
    on the site's reactor (C{callLater}, set by the site as for
    twisted.web's idle timeout); it does not run while a request is
    answered, nor between requests of a keep-alive connection
    (twisted.web's idle timeout, a minute, closes those, or the site
    closes them first to make room).

    @ivar requestDeadline: the seconds allowed for a request.
    @ivar slots: the site's open connections, told what this one does
        (L{ConnectionSlots}); L{None} outside a site that counts them.
    """

    _refusedLong = False
    requestDeadline = REQUEST_DEADLINE
    slots: ConnectionSlots | None = None
    _deadlineCall: IDelayedCall | None = None

    def connectionMade(self) -> None:
        """
        Start the deadline of the first request at the accept: a client
        that sends nothing is closed as one that drips.
        """
        super().connectionMade()  # type: ignore[no-untyped-call]
        self._startDeadline()

    def dataReceived(self, data: bytes) -> None:
        """
        Start the deadline at the first octet of a later request, then
        read.
        """
        if data and not self._handlingRequest:
            self._startDeadline()
            if self.slots is not None:
                self.slots.reading(self)
        super().dataReceived(data)  # type: ignore[no-untyped-call]

    def allContentReceived(self) -> None:
        """
        The request is complete (headers and body): stop its deadline, then
        answer it.
        """
        self._stopDeadline()
        if self.slots is not None:
            self.slots.answering(self)
        super().allContentReceived()  # type: ignore[no-untyped-call]

    def requestDone(self, request: http.Request) -> None:
        """
        The answer is sent: the connection waits for its next request (or
        closes), and may be closed first to make room.
        """
        if self.slots is not None:
            self.slots.idle(self)
        super().requestDone(request)  # type: ignore[no-untyped-call]

    def pauseProducing(self) -> None:
        """
        The transport's buffer is full: the client is not reading.  A
        response stalled so (a streamed manifest, which never ends while
        paused, and which twisted.web's idle timeout does not watch) may
        be closed to make room, as an idle connection is, until the client
        reads again: holders that ask for a manifest and never read it
        cannot keep every other client out.
        """
        super().pauseProducing()  # type: ignore[no-untyped-call]
        if self._handlingRequest and self.slots is not None:
            self.slots.idle(self)

    def resumeProducing(self) -> None:
        """
        The client reads again: a response under way is protected again.
        (Before the response's producer resumes: what it writes may fill
        the transport's buffer at once, and pause this channel again
        within this call.)
        """
        if self._handlingRequest and self.slots is not None:
            self.slots.answering(self)
        super().resumeProducing()  # type: ignore[no-untyped-call]

    def evict(self) -> None:
        """
        Close the connection at once to make room for a newer one
        (L{ConnectionSlots.victim}); its slot is free now, not when the
        reactor reports the connection lost.
        """
        self._stopDeadline()
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        slots, self.slots = self.slots, None
        if slots is not None:
            slots.closed(self)
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        """
        Stop the deadline, and free the slot.
        """
        self._stopDeadline()
        super().connectionLost(reason)  # type: ignore[no-untyped-call]
        slots, self.slots = self.slots, None
        if slots is not None:
            slots.closed(self)

    def _startDeadline(self) -> None:
        if self._deadlineCall is None:
            self._deadlineCall = self.callLater(  # type: ignore[no-untyped-call]
                self.requestDeadline, self._requestTooSlow
            )

    def _stopDeadline(self) -> None:
        call, self._deadlineCall = self._deadlineCall, None
        if call is not None and call.active():
            call.cancel()

    def _requestTooSlow(self) -> None:
        """
        The deadline passed before the request was complete: answer 408 and
        close (aborting after twisted.web's C{abortTimeout} if the client
        does not read).
        """
        self._deadlineCall = None
        log.debug(
            "Status request not complete within {deadline} s from {client}; closing",
            deadline=self.requestDeadline,
            client=str(getattr(self.transport.getPeer(), "host", "")),  # type: ignore[union-attr]
        )
        if self.slots is not None:
            # Closing: the first to go if room is needed.
            self.slots.idle(self)
        self._answerAndClose(
            b"408 Request Timeout",
            f"the request was not complete within {self.requestDeadline:g} seconds",
        )
        # The abort below (after abortTimeout) ends it; the idle timeout
        # would only close it a second time.
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        self.timeoutConnection()  # type: ignore[no-untyped-call]

    def _answerAndClose(self, status: bytes, message: str) -> None:
        """
        Write a complete response with C{status} and the JSON error
        C{message}, asking the client to close.
        """
        body = jsonBody({"error": message})
        self.transport.write(  # type: ignore[union-attr]
            b"HTTP/1.1 " + status + b"\r\nContent-Type: " + JSON_TYPE
            + b"\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: %d"
            b"\r\n\r\n" % (len(body),) + body
        )  # fmt: skip

    def lineLengthExceeded(self, line: bytes) -> None:
        """
        Answer 400, once, and close.
        """
        if not self._refusedLong:
            self._refusedLong = True
            self._answerAndClose(
                b"400 Bad Request",
                f"request line or header longer than {self.MAX_LENGTH} octets",
            )
        self.loseConnection()  # type: ignore[no-untyped-call]
