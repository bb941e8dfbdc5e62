# -*- test-case-name: tests.test_job_stop -*-
"""
The destination connections of one attempt of a job: those open, those
still opening, and their end with the attempt.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from imapmig.errors import ConnectionLost
from imapmig.imap.session import IMAPSession

__all__ = ["AttemptConnections"]


class AttemptConnections:
    """
    One attempt's connections: when the attempt ends, every one still open
    is dropped, and one that finishes opening afterwards is dropped at
    once.  Connections still opening (perhaps waiting for their grant
    under a server's connection limits, or for a greeting) are given up
    when no work is left for them, when the job stops, or when the
    attempt ends.

    @ivar sessions: the connections open and in use.
    @ivar openings: the connections still opening.
    @ivar over: whether the attempt has ended.
    @ivar givenUp: whether the connections still opening were given up.
    """

    def __init__(self) -> None:
        self.sessions: list[IMAPSession] = []
        self.openings: list[Deferred[IMAPSession] | Deferred[IMAPSession | None]] = []
        self.over = False
        self.givenUp = False

    def adopt(self, session: IMAPSession) -> IMAPSession:
        """
        Take C{session}, just opened, into the attempt.

        @return: C{session}.
        @raise ConnectionLost: the attempt ended while it was opening (it
            is dropped).
        """
        if self.over:
            session.abort()
            raise ConnectionLost("the attempt ended while this connection was opening")
        self.sessions.append(session)
        return session

    def release(self, session: IMAPSession) -> None:
        """
        Let C{session} go: it is logging out, and the attempt's end need
        not drop it.
        """
        if session in self.sessions:
            self.sessions.remove(session)

    def giveUpOpenings(self) -> None:
        """
        Cancel the extra connections still opening: nothing is left for
        them to do.
        """
        self.givenUp = True
        openings, self.openings = self.openings, []
        for opening in openings:
            if not opening.called:
                opening.cancel()

    def end(self) -> None:
        """
        End the attempt: give up the connections still opening and drop
        those open.
        """
        self.over = True
        self.giveUpOpenings()
        sessions, self.sessions = self.sessions, []
        for session in sessions:
            session.abort()
