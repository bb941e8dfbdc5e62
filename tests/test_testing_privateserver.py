# -*- test-case-name: tests.test_testing_privateserver -*-
"""
Tests for what L{imapmig.testing.privateserver} gives Cyrus and Courier
alike: a missing server skips loudly, or fails under C{CI=true}.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing import courier, cyrus
from tests import requireserver


class RequireCyrusTests(requireserver.RequireServerTests):
    """
    L{cyrus.requireCyrus}.
    """

    module = cyrus
    finder = "findCyrus"
    label = "Cyrus"

    def require(self, testCase: SynchronousTestCase | None = None) -> str:
        return cyrus.requireCyrus(testCase)


class RequireCourierTests(requireserver.RequireServerTests):
    """
    L{courier.requireCourier}.
    """

    module = courier
    finder = "findCourier"
    label = "Courier"

    def require(self, testCase: SynchronousTestCase | None = None) -> str:
        return courier.requireCourier(testCase)
