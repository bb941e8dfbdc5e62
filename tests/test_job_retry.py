"""
Tests for L{imapmig.job.retry}: a job's retry settings and the waits
between its attempts.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.retry import RetryPolicy


class RetryPolicyTests(SynchronousTestCase):
    """
    L{RetryPolicy.delays} backs off exponentially, bounded, with jitter.
    """

    def test_defaults(self) -> None:
        """
        By default a job gives up after 10 attempts that migrate nothing,
        waits 1 s first and at most 300 s, and pauses an hour when over
        quota.
        """
        policy = RetryPolicy()
        self.assertEqual(
            (policy.attempts, policy.initialDelay, policy.maxDelay, policy.factor),
            (10, 1.0, 300.0, 2.0),
        )
        self.assertEqual((policy.messageAttempts, policy.pause), (3, 3600.0))

    def test_exponentialAndBounded(self) -> None:
        """
        Without jitter, the waits double from C{initialDelay} and stop
        growing at C{maxDelay}.
        """
        delays = RetryPolicy(initialDelay=1.0, maxDelay=20.0).delays(jitter=lambda: 0.0)
        self.assertEqual([delays(n) for n in range(7)], [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0])

    def test_factor(self) -> None:
        """
        C{factor} is how the wait grows from one attempt to the next.
        """
        delays = RetryPolicy(initialDelay=2.0, factor=3.0, maxDelay=1000.0).delays(
            jitter=lambda: 0.0
        )
        self.assertEqual([delays(n) for n in range(4)], [2.0, 6.0, 18.0, 54.0])

    def test_jitter(self) -> None:
        """
        The jitter (up to a second) is added to each wait, so that jobs
        failing together do not come back together; the bound applies
        before it.
        """
        delays = RetryPolicy(initialDelay=1.0, maxDelay=4.0).delays(jitter=lambda: 0.5)
        self.assertEqual([delays(n) for n in range(4)], [1.5, 2.5, 4.5, 4.5])

    def test_frozen(self) -> None:
        """
        A policy is a value: it cannot be changed once made.
        """
        policy = RetryPolicy()
        with self.assertRaises(Exception):
            policy.attempts = 3  # type: ignore[misc]
