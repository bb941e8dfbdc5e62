# -*- test-case-name: tests.test_sources_imap_throttle,tests.test_job_throttle -*-
"""
What an IMAP source asks of the throttle it is given (L{IThrottle}): the
rates of its server and account, waited for before each body FETCH, and
told of a server's "wait".

The source imported the scheduler's throttle class for this, an import
running upward (sources below schedule); it now names only these three
members, which the scheduler's throttle has.  No logic: nothing to test
beyond the type checker's structural check where a job hands its throttle
to the source.
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred

__all__ = ["IThrottle"]


class IThrottle(Protocol):
    """
    The rates an L{imapmig.sources.imap.IMAPSource} waits for.
    """

    @property
    def rated(self) -> bool:
        """
        Whether any rate applies (else L{admit} never waits).
        """

    def admit(self, messages: int, octets: int) -> Deferred[None]:
        """
        Wait until C{messages} messages of C{octets} octets may be read.

        @return: a Deferred that fires when they may; cancelling it ends
            the wait with L{twisted.internet.defer.CancelledError}.
        """

    def signalled(self, error: BaseException) -> None:
        """
        C{error} ended an attempt on the source (a server's "wait" among
        them).
        """
