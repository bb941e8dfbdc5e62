"""
Tests for the rate and budget keys of a server and its C{per_account}
block (L{imapmig.config.limits}).
"""

from __future__ import annotations

from typing import Any

from imapmig.config import parseConfig
from imapmig.config.limits import AccountLimits, ServerLimits
from tests.test_config import ConfigTestCase


class ServerLimitsConfigTests(ConfigTestCase):
    """
    The throttle keys of a server: C{messages_per_second},
    C{bytes_per_second}, and C{per_account}.
    """

    def withServer(self, **keys: Any) -> dict[str, Any]:
        document = self.document()
        document["servers"]["new"].update(keys)
        return document

    def test_defaultNoLimits(self) -> None:
        """
        A server without limit keys has no limits: nothing is throttled.
        """
        server = parseConfig(self.document(), self.configPath).servers[0]
        self.assertEqual(server.limits, ServerLimits())
        self.assertFalse(server.limits.throttled)

    def test_everyKey(self) -> None:
        """
        Every key is read: rates as numbers, sizes with their units, and
        C{max_connections} of the per-account block kept beside them.
        """
        document = self.withServer(
            messages_per_second=50,
            bytes_per_second="20MB",
            per_account={
                "max_connections": 15,
                "messages_per_second": 0.5,
                "bytes_per_second": 1048576,
                "daily_upload": "500MB",
                "daily_download": "2500MB",
            },
        )
        limits = parseConfig(document, self.configPath).servers[0].limits
        self.assertEqual(
            limits,
            ServerLimits(
                maxConnections=None,
                messagesPerSecond=50.0,
                bytesPerSecond=20_000_000,
                perAccount=AccountLimits(
                    maxConnections=15,
                    messagesPerSecond=0.5,
                    bytesPerSecond=1048576,
                    dailyUpload=500_000_000,
                    dailyDownload=2_500_000_000,
                ),
            ),
        )
        self.assertTrue(limits.throttled)

    def test_budgetAloneThrottles(self) -> None:
        """
        A daily budget alone makes the server's jobs throttled; null values
        are no limit.
        """
        document = self.withServer(
            messages_per_second=None, per_account={"daily_upload": "1KiB"}
        )
        limits = parseConfig(document, self.configPath).servers[0].limits
        self.assertEqual(limits.perAccount.dailyUpload, 1024)
        self.assertIsNone(limits.messagesPerSecond)
        self.assertTrue(limits.throttled)

    def test_badRate(self) -> None:
        """
        A rate that is not a positive number is a problem naming the file
        and the key path.
        """
        for value, message in ((0, "must be greater than 0"), ("fast", "expected a number")):
            problems = self.problems(self.withServer(messages_per_second=value))
            self.assertProblem(problems, "servers.new.messages_per_second", message)
            self.assertTrue(all(p.startswith(self.configPath + ": ") for p in problems))

    def test_badSizes(self) -> None:
        """
        A size that cannot be read, or of zero octets, is a problem naming
        its path inside C{per_account}; every problem is reported at once.
        """
        problems = self.problems(
            self.withServer(
                bytes_per_second="fast",
                per_account={"daily_upload": "500 parsecs", "daily_download": 0},
            )
        )
        self.assertProblem(problems, "servers.new.bytes_per_second", "'fast'")
        self.assertProblem(problems, "servers.new.per_account.daily_upload", "'500 parsecs'")
        self.assertProblem(problems, "servers.new.per_account.daily_download", "at least 1 octet")
        self.assertTrue(all(p.startswith(self.configPath + ": ") for p in problems))

    def test_unknownPerAccountKey(self) -> None:
        """
        An unknown key of C{per_account} is a problem with a hint.
        """
        problems = self.problems(self.withServer(per_account={"daily_uploads": "1MB"}))
        self.assertProblem(problems, "servers.new.per_account.daily_uploads", "daily_upload")

    def test_perAccountNotMapping(self) -> None:
        """
        A C{per_account} that is not a mapping is a problem.
        """
        problems = self.problems(self.withServer(per_account=5))
        self.assertProblem(problems, "servers.new.per_account", "expected a mapping")

    def test_badMaxConnections(self) -> None:
        """
        C{max_connections} of C{per_account} must be a positive integer.
        """
        problems = self.problems(self.withServer(per_account={"max_connections": 0}))
        self.assertProblem(problems, "servers.new.per_account.max_connections", "at least 1")
