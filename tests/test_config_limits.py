"""
Tests for L{imapmig.config.limits}: C{max_jobs}, and the servers'
C{max_connections} and C{per_account.max_connections}.
"""

from __future__ import annotations

from imapmig.config import parseConfig
from imapmig.config.limits import AccountLimits, ServerLimits
from tests.test_config import ConfigTestCase


class MaxJobsTests(ConfigTestCase):
    """
    The top-level C{max_jobs}.
    """

    def test_default(self) -> None:
        """
        Without C{max_jobs}, eight jobs run at once.
        """
        self.assertEqual(parseConfig(self.document(), self.configPath).maxJobs, 8)

    def test_given(self) -> None:
        """
        C{max_jobs} becomes L{Config.maxJobs}; 1 and 1000 are the bounds.
        """
        for value in (1, 4, 1000):
            document = self.document()
            document["max_jobs"] = value
            self.assertEqual(parseConfig(document, self.configPath).maxJobs, value)

    def test_outOfRange(self) -> None:
        """
        0 and 1001 are refused, naming the key and the bounds.
        """
        for value in (0, 1001):
            document = self.document()
            document["max_jobs"] = value
            self.assertOnlyProblem(document, "max_jobs", "between 1 and 1000")

    def test_notAnInteger(self) -> None:
        """
        A string or a boolean is not a count of jobs.
        """
        for value in ("8", True, 2.5):
            document = self.document()
            document["max_jobs"] = value
            self.assertOnlyProblem(document, "max_jobs", "expected an integer")


class ServerLimitsTests(ConfigTestCase):
    """
    A server's C{max_connections} and C{per_account}.
    """

    def test_default(self) -> None:
        """
        A server without limits has none.
        """
        server = parseConfig(self.document(), self.configPath).servers[0]
        self.assertEqual(server.limits, ServerLimits(maxConnections=None, perAccount=AccountLimits(maxConnections=None)))

    def test_given(self) -> None:
        """
        C{max_connections} and C{per_account.max_connections} become
        L{ServerConfig.limits}.
        """
        document = self.document()
        document["servers"]["new"]["max_connections"] = 100
        document["servers"]["new"]["per_account"] = {"max_connections": 15}
        server = parseConfig(document, self.configPath).servers[0]
        self.assertEqual(server.limits, ServerLimits(maxConnections=100, perAccount=AccountLimits(maxConnections=15)))

    def test_null(self) -> None:
        """
        Null means no limit, at either level.
        """
        document = self.document()
        document["servers"]["new"]["max_connections"] = None
        document["servers"]["new"]["per_account"] = {"max_connections": None}
        server = parseConfig(document, self.configPath).servers[0]
        self.assertEqual(server.limits, ServerLimits())

    def test_invalidServerMax(self) -> None:
        """
        Zero, a negative number or a string is refused with its key path.
        """
        for value, fragment in ((0, "at least 1"), (-3, "at least 1"), ("ten", "expected an integer")):
            document = self.document()
            document["servers"]["new"]["max_connections"] = value
            self.assertOnlyProblem(document, "servers.new.max_connections", fragment)

    def test_invalidAccountMax(self) -> None:
        """
        A bad C{per_account.max_connections} names its full path.
        """
        document = self.document()
        document["servers"]["new"]["per_account"] = {"max_connections": 0}
        self.assertOnlyProblem(
            document, "servers.new.per_account.max_connections", "at least 1"
        )

    def test_unknownAccountKey(self) -> None:
        """
        An unknown key under C{per_account} is named, with a hint.
        """
        document = self.document()
        document["servers"]["new"]["per_account"] = {"max_connection": 2}
        self.assertOnlyProblem(
            document, "servers.new.per_account.max_connection", "did you mean 'max_connections'?"
        )

    def test_accountNotAMapping(self) -> None:
        """
        C{per_account} must be a mapping.
        """
        document = self.document()
        document["servers"]["new"]["per_account"] = 3
        self.assertOnlyProblem(document, "servers.new.per_account", "expected a mapping")
