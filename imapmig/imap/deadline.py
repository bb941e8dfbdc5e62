# -*- test-case-name: tests.test_imap_deadline -*-
"""
The reply deadline: how long a server may leave imapmig waiting.

Twisted's C{TimeoutMixin} restarts its timer on every octet received, so a
server that drips one octet a second keeps a connection alive for ever;
and it drops the connection with C{loseConnection}, which waits for the
write buffer to drain, for ever if the server stopped reading.  This
deadline instead runs only while something is owed by the server, and
only real progress restarts it; what to do when it expires (log once,
C{abortConnection}) is the client's business.

It never touches the reactor on the hot path: a restart only records the
new expiry time; the one delayed call, when it fires early, reschedules
itself for the remainder.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

PROGRESS_OCTETS = 64 * 1024
"""
Received octets that count as progress: a 30 MB literal on a slow link
restarts the deadline every 64 KiB, a server dripping an octet a second
never does.
"""


class ReplyDeadline:
    """
    A deadline, on an injected clock, for what a server owes.

    The owner calls L{arm} when something becomes owed (it does nothing if
    the deadline already runs: a new command is not progress), L{progress}
    on real progress (a complete reply, a continuation request, the
    greeting, the transport resuming our writes), L{received} with the
    size of each read (every L{PROGRESS_OCTETS} octets is progress), and
    L{disarm} when nothing is owed any more.  If no progress comes within
    C{seconds} of arming or of the last progress, C{expired} is called,
    once; the deadline is then disarmed.
    """

    __slots__ = ("_clock", "seconds", "_expired", "_call", "_expiresAt", "_octets")

    def __init__(self, clock: IReactorTime, seconds: float, expired: Callable[[], None]) -> None:
        """
        @param clock: schedules the expiry and tells the time.
        @param seconds: how long without progress is too long; positive.
        @param expired: called when that happens.
        """
        self._clock = clock
        self.seconds = seconds
        self._expired = expired
        self._call: IDelayedCall | None = None
        self._expiresAt = 0.0
        self._octets = 0

    @property
    def armed(self) -> bool:
        """
        Whether the deadline runs.
        """
        return self._call is not None

    def arm(self) -> None:
        """
        Start the deadline, unless it already runs.
        """
        if self._call is None:
            self._expiresAt = self._clock.seconds() + self.seconds
            self._octets = 0
            self._call = self._clock.callLater(self.seconds, self._check)

    def progress(self, since: float | None = None) -> None:
        """
        Real progress: the full timeout starts again (if the deadline runs),
        from now or from C{since}.

        @param since: when what is owed now began to be owed (the oldest
            command still unanswered was sent), if earlier than now: the
            deadline then runs from that moment, and may be over at once.
        """
        call = self._call
        if call is None:
            return
        now = self._clock.seconds()
        start = now if since is None else min(since, now)
        self._expiresAt = start + self.seconds
        self._octets = 0
        if self._expiresAt < call.getTime():
            call.cancel()
            self._call = self._clock.callLater(max(0.0, self._expiresAt - now), self._check)

    def received(self, octets: int) -> None:
        """
        C{octets} more were received; every L{PROGRESS_OCTETS} of them
        since the last progress are progress.
        """
        if self._call is not None:
            total = self._octets + octets
            if total >= PROGRESS_OCTETS:
                self.progress()
            else:
                self._octets = total

    def disarm(self) -> None:
        """
        Nothing is owed: stop the deadline.
        """
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    def _check(self) -> None:
        remaining = self._expiresAt - self._clock.seconds()
        if remaining > 0:
            self._call = self._clock.callLater(remaining, self._check)
            return
        self._call = None
        self._expired()
