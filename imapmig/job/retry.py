# -*- test-case-name: tests.test_job_retry -*-
"""
How a job retries after a transient failure: exponential backoff with
jitter, in the manner of L{twisted.application.internet.backoffPolicy},
bounded by consecutive attempts that migrate nothing.
"""

from __future__ import annotations

import random
from typing import Callable

from attrs import frozen
from twisted.application.internet import backoffPolicy


@frozen
class RetryPolicy:
    """
    A job's retry settings.

    @ivar attempts: consecutive attempts without a single message
        migrated after which the job fails (an attempt that migrates
        anything starts the count again: a week-long job survives any
        number of isolated drops).
    @ivar initialDelay: seconds before the first retry.
    @ivar maxDelay: the longest wait between attempts, before jitter.
    @ivar factor: how the wait grows from one attempt to the next.
    @ivar messageAttempts: how many times a message may be first in line
        when a connection fails before it is recorded as failed with the
        last error (a message that makes the server drop the connection).
    @ivar pause: seconds a job waits when the server says it is over quota
        or over its bandwidth limit, before it tries again.
    """

    attempts: int = 10
    initialDelay: float = 1.0
    maxDelay: float = 300.0
    factor: float = 2.0
    messageAttempts: int = 3
    pause: float = 3600.0

    def delays(self, jitter: Callable[[], float] = random.random) -> Callable[[int], float]:
        """
        The wait before retry number C{n} (0 for the first), with up to a
        second of jitter so that many jobs failing together do not come
        back together.
        """
        return backoffPolicy(self.initialDelay, self.maxDelay, self.factor, jitter)
