"""
What every read-only status resource shares: C{GET} and C{HEAD} only (405
with C{Allow} otherwise), uncached responses, JSON bodies and JSON errors.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET, Request

log = Logger()

JSON_TYPE = b"application/json; charset=utf-8"

READ_METHODS: Sequence[bytes] = (b"GET", b"HEAD")


class HTTPProblem(Exception):
    """
    A request that cannot be answered as asked: the status code to answer
    with and why, in words for the client.

    @ivar code: the HTTP status code.
    @ivar message: the C{error} of the JSON body.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


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
and body) from its first octet: a client sending a header line every few
seconds would otherwise hold its connection (and a file descriptor of the
daemon) for ever, since each line restarts twisted.web's idle timeout.
"""


class StatusChannel(http.HTTPChannel):
    """
    twisted.web's HTTP channel, answering a request line or header line
    longer than it reads (C{MAX_LENGTH}, 16 KiB: a huge query string) with
    a 400 and a JSON error before closing, where twisted.web closes the
    connection without a word; and answering a request not complete within
    L{REQUEST_DEADLINE} seconds of its first octet with a 408 before
    closing.  The deadline runs on the site's reactor (C{callLater}, set
    by the site as for twisted.web's idle timeout); it does not run while
    a request is answered, nor between requests of a keep-alive
    connection (twisted.web's idle timeout, a minute, closes those).

    @ivar requestDeadline: the seconds allowed for a request.
    @ivar onClose: called once when the connection is lost (the site's
        count of open connections).
    """

    _refusedLong = False
    requestDeadline = REQUEST_DEADLINE
    onClose: Callable[[], None] | None = None
    _deadlineCall: IDelayedCall | None = None

    def dataReceived(self, data: bytes) -> None:
        """
        Start the deadline at the first octet of a request, then read.
        """
        if self._deadlineCall is None and not self._handlingRequest and data:
            self._deadlineCall = self.callLater(  # type: ignore[no-untyped-call]
                self.requestDeadline, self._requestTooSlow
            )
        super().dataReceived(data)  # type: ignore[no-untyped-call]

    def allContentReceived(self) -> None:
        """
        The request is complete (headers and body): stop its deadline, then
        answer it.
        """
        self._stopDeadline()
        super().allContentReceived()  # type: ignore[no-untyped-call]

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        """
        Stop the deadline, and tell the site.
        """
        self._stopDeadline()
        super().connectionLost(reason)  # type: ignore[no-untyped-call]
        onClose, self.onClose = self.onClose, None
        if onClose is not None:
            onClose()

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
        self._answerAndClose(
            b"408 Request Timeout",
            f"the request was not complete within {self.requestDeadline:g} seconds",
        )
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
