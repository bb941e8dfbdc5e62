# -*- test-case-name: tests.test_job_throttle -*-
"""
Which side of a job a server's signal came from: the source or the
destination.  A signal (Suggested Backoff, C{[OVERQUOTA]}, a used-up daily
budget) holds back that side's server and account only, and a
destination's C{[OVERQUOTA]} may mean its mailbox is full
(L{imapmig.job.budgets.mailboxFull}) rather than a daily limit.
"""

from __future__ import annotations

from imapmig.errors import DailyLimitReached, QuotaExceeded
from imapmig.job.budgets import mailboxFull
from imapmig.throttle import Throttle
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource

__all__ = ["JobSides"]


class JobSides:
    """
    A job's two sides as its server signals see them.

    @ivar destination: the destination's throttle, or L{None}.
    @ivar source: the source's throttle (an IMAP source's), or L{None}.
    """

    def __init__(
        self,
        source: IMessageSource,
        sourceThrottle: Throttle | None,
        destination: Throttle | None,
    ) -> None:
        self._source = source
        self.source = sourceThrottle
        self.destination = destination

    def fromSource(self, error: BaseException) -> bool:
        """
        Whether C{error} came from the source side: the source throttle's
        last signal or budget, or raised by the IMAP source.
        """
        source = self.source
        if source is not None and (
            source.lastSignal is error
            or (isinstance(error, DailyLimitReached) and error.budget is source.budget)
        ):
            return True
        return isinstance(self._source, IMAPSource) and self._source.raised(error)

    def sideOf(self, error: BaseException) -> Throttle | None:
        """
        The throttle of the side C{error} came from (the source's, if the
        IMAP source raised it or it is the source's budget, else the
        destination's), after telling it: a server's "wait" holds that
        server's and account's buckets for every job.  A source's signal
        never touches the destination's throttle, even when the source
        has none (L{None}).
        """
        if self.fromSource(error):
            return self.source
        if self.destination is not None:
            self.destination.signalled(error)
        return self.destination

    async def destinationFull(self, error: QuotaExceeded) -> bool:
        """
        Whether C{error} is the destination saying its mailbox is full
        (L{mailboxFull}), not a daily limit nor a source's refusal.
        """
        if self.fromSource(error):
            return False
        budget = self.destination.budget if self.destination is not None else None
        if budget is not None:
            await budget.load()
        return mailboxFull(error, budget)
