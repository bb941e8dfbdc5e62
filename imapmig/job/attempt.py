# -*- test-case-name: tests.test_job_stop -*-
"""
The destination connections of one attempt of a job: those open, those
still opening, and their end with the attempt; and the run's stop
(L{RunStop}), the one signal of a run's parts that it is stopping.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure

from imapmig.errors import ConnectionLost
from imapmig.imap.session import IMAPSession

__all__ = ["AttemptConnections", "RunStop", "stoppable"]

_T = TypeVar("_T")


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


class RunStop:
    """
    Whether a job's run was asked to stop (its Deferred cancelled:
    L{imapmig.job.migration.MigrationJob.run}): the one signal its parts
    (listing, sharing units, copying, reading ahead, backing off) read
    before taking more work.  It replaces the C{stopping} callables once
    threaded through their signatures.

    @ivar requested: whether the run was asked to stop.
    """

    def __init__(self) -> None:
        self.requested = False


def stoppable(work: Deferred[_T], stop: Callable[[], None]) -> Deferred[_T]:
    """
    C{work} (a run) as its caller holds it: cancelling it calls C{stop},
    a request to end early, rather than cancelling whatever C{work} waits
    for (an APPEND's reply above all, which must be awaited and recorded);
    it fires with C{work}'s own result once C{work} has one.

    As Twisted cancels a coroutine's Deferred (cancel what it awaits, then
    fire with what it returns), so here, with the wait for C{work} the
    only thing cancelled.
    """
    return Deferred.fromCoroutine(_untilFired(work, stop))


async def _untilFired(work: Deferred[_T], stop: Callable[[], None]) -> _T:
    outcome: list[_T | Failure] = []
    waiting: list[Deferred[None]] = []

    def keep(result: _T | Failure) -> None:
        # Taken here, given (or raised) below: this coroutine is resumed
        # while work still runs its callbacks.
        outcome.append(result)
        for wait in waiting:
            if not wait.called:
                wait.callback(None)

    work.addBoth(keep)
    while not outcome:
        wait: Deferred[None] = Deferred()
        waiting.append(wait)
        try:
            await wait
        except CancelledError:
            stop()
    (result,) = outcome
    if isinstance(result, Failure):
        result.raiseException()
    return result
