# -*- test-case-name: tests.test_controls_resource -*-
"""
A bound on the request bodies the status site reads.

twisted.web reads a request's whole body before any resource sees it,
into memory, or into a temporary file when it is 100,000 octets or more
(or its length is not declared): a client could fill a disk with one POST
that no resource would ever accept.  No route of the status site takes a
body but C{/control}'s (at most L{imapmig.status.controls.MAX_BODY}
octets); L{BoundedRequest}, the site's C{requestFactory}, answers 413 and
closes the connection as soon as a body is declared or found to be larger
than L{MAX_REQUEST_BODY}, and keeps what it reads in memory.
"""

from __future__ import annotations

from io import BytesIO

from twisted.web.server import Request

MAX_REQUEST_BODY = 64 * 1024
"""
The largest request body the status site reads, in octets.
"""

_TOO_LARGE_BODY = b'{"error": "the request body is too large"}\n'
_TOO_LARGE = (
    b"HTTP/1.1 413 Content Too Large\r\n"
    b"Content-Type: application/json; charset=utf-8\r\n"
    b"Cache-Control: no-store\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n"
    b"\r\n" % (len(_TOO_LARGE_BODY),)
) + _TOO_LARGE_BODY


class BoundedRequest(Request):
    """
    A L{Request} whose body may not exceed L{MAX_REQUEST_BODY} octets: a
    larger one, declared by its C{Content-Length} or counted as it
    arrives, is answered 413 and the connection closed; the request is
    never rendered.
    """

    _refused = False
    _received = 0

    def gotLength(self, length: int | None) -> None:
        """
        Refuse a body declared too large; read the others into memory.
        """
        # In memory: at most MAX_REQUEST_BODY octets are ever kept.
        self.content = BytesIO()
        if length is not None and length > MAX_REQUEST_BODY:
            self._refuse()

    def handleContentChunk(self, data: bytes) -> None:
        """
        Keep C{data}, unless the body grows too large.
        """
        if self._refused:
            return
        self._received += len(data)
        if self._received > MAX_REQUEST_BODY:
            self._refuse()
            return
        Request.handleContentChunk(self, data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        """
        Render the request, unless it was refused.
        """
        if self._refused:
            return
        Request.requestReceived(self, command, path, version)

    def _refuse(self) -> None:
        self._refused = True
        channel = self.channel
        if channel is not None and channel.transport is not None:
            channel.transport.write(_TOO_LARGE)
            channel.loseConnection()
