"""
The tests every private server's C{require} function must pass (see
L{tests.test_testing_privateserver}); kept out of a C{test_} module so
that trial runs them only through the subclasses that name a server.
"""

from __future__ import annotations

import io
import os
import sys
from types import ModuleType

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.errors import ServerNotFound


def _missing() -> str:
    raise ServerNotFound("not here")


class RequireServerTests(SynchronousTestCase):
    """
    One server's C{require} function, with its C{find} function failing.

    @cvar module: the server's module in L{imapmig.testing}.
    @cvar finder: the name of its C{find} function.
    @cvar label: the server's name in the warning.
    """

    module: ModuleType
    finder: str
    label: str

    def require(self, testCase: SynchronousTestCase | None = None) -> str:
        """
        Call the server's C{require} function.
        """
        raise NotImplementedError()

    def setUp(self) -> None:
        self.patch(self.module, self.finder, _missing)
        self.stderr = io.StringIO()
        self.patch(sys, "stderr", self.stderr)

    def test_skipsLoudly(self) -> None:
        """
        Outside CI a missing server skips the test and says so on stderr.
        """
        self.patch(os, "environ", {})
        self.assertRaises(SkipTest, self.require, self)
        self.assertIn(f"*** SKIPPING real-{self.label} tests: not here", self.stderr.getvalue())

    def test_failsOnCI(self) -> None:
        """
        With C{CI=true} a missing server fails the test instead.
        """
        self.patch(os, "environ", {"CI": "true"})
        self.assertRaises(self.failureException, self.require, self)
        self.assertRaises(AssertionError, self.require)
