"""
Tests for L{imapmig.units}, and for the lines an admin reads that show a
count or a size through it.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.logger import LogLevel, formatEvent
from twisted.web.resource import Resource

from imapmig.job import JobSettings, RetryPolicy
from imapmig.progress import JobState
from imapmig.access.secrets import Secret
from imapmig.status.controls import ControlResource
from imapmig.log.jsonlog import eventAsJSONLine
from imapmig.units import Count, octets, plural
from tests.test_job import JobHarness, populate

TOKEN = "s3cret-t0ken-0123456789"


class OctetsTests(SynchronousTestCase):
    """
    L{octets}: binary units, with the dashboard's precision.
    """

    def test_belowOneKiB(self) -> None:
        """
        Below 1024 octets the size is shown in octets, as a whole number.
        """
        self.assertEqual([octets(0), octets(1), octets(1023)], ["0 B", "1 B", "1023 B"])

    def test_binaryUnits(self) -> None:
        """
        Larger sizes are in KiB, MiB, GiB, TiB, PiB (powers of 1024): two
        decimals below 10, one from 10 on, as the dashboard's C{bytes()}.
        """
        self.assertEqual(
            [
                octets(1024),
                octets(1536),
                octets(10 * 1024),
                octets(35 * 2**20),
                octets(2_503_000),
                octets(3 * 2**30),
                octets(5 * 2**40),
                octets(2**50),
            ],
            [
                "1.00 KiB",
                "1.50 KiB",
                "10.0 KiB",
                "35.0 MiB",
                "2.39 MiB",
                "3.00 GiB",
                "5.00 TiB",
                "1.00 PiB",
            ],
        )

    def test_largestUnit(self) -> None:
        """
        Beyond the largest unit the number grows: 2048 PiB stays in PiB.
        """
        self.assertEqual(octets(2048 * 2**50), "2048.0 PiB")


class PluralTests(SynchronousTestCase):
    """
    L{plural}: the noun agrees with the count.
    """

    def test_one(self) -> None:
        """
        One takes the singular.
        """
        self.assertEqual(plural(1, "job"), "1 job")

    def test_others(self) -> None:
        """
        Zero and more take the plural: the noun with an C{s}, or the one
        given.
        """
        self.assertEqual(
            [plural(0, "job"), plural(2, "job"), plural(3, "mailbox", "mailboxes")],
            ["0 jobs", "2 jobs", "3 mailboxes"],
        )


class CountTests(SynchronousTestCase):
    """
    L{Count}: an integer in a log event's fields, its noun in the text.
    """

    def test_text(self) -> None:
        """
        A format string writes the count with its noun, in agreement, with
        the format's spec applied to the number.
        """
        event = {
            "log_format": "{messages:,} in {folders}, {boxes}",
            "messages": Count(1234, "message"),
            "folders": Count(1, "folder"),
            "boxes": Count(0, "mailbox", "mailboxes"),
        }
        self.assertEqual(formatEvent(event), "1,234 messages in 1 folder, 0 mailboxes")

    def test_json(self) -> None:
        """
        A JSON line holds the count as an integer.
        """
        event = {
            "log_format": "{messages}",
            "log_level": LogLevel.info,
            "log_namespace": "imapmig.test",
            "log_time": 0.0,
            "messages": Count(50, "message"),
        }
        record = json.loads(eventAsJSONLine(event))
        self.assertEqual((record["messages"], record["message"]), (50, "50 messages"))
        self.assertIs(type(record["messages"]), int)


class _OneJobControls:
    """
    Controls whose pause-all and resume-all each touch one job.
    """

    def pauseAll(self, by: str) -> Deferred[int]:
        return succeed(1)

    def resumeAll(self, by: str) -> Deferred[int]:
        return succeed(1)


class ControlMessageTests(SynchronousTestCase):
    """
    The message of C{/control/pause-all} and C{/control/resume-all}.
    """

    def test_oneJob(self) -> None:
        """
        One job paused or resumed is "1 job paused", "1 job resumed".
        """
        root = Resource()
        controls = ControlResource(_OneJobControls(), Secret(TOKEN), Clock())  # type: ignore[arg-type]
        root.putChild(b"control", controls)
        treq: Any = StubTreq(root)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        for action, message in [("pause-all", "1 job paused"), ("resume-all", "1 job resumed")]:
            response = self.successResultOf(
                treq.request(
                    "POST", f"http://127.0.0.1:8025/control/{action}", headers=headers, data=b"{}"
                )
            )
            self.assertEqual(response.code, 200)
            body = json.loads(self.successResultOf(treq.content(response)))
            self.assertEqual(body["message"], message)


class AttemptsTests(SynchronousTestCase):
    """
    A job that gives up says after how many attempts, in agreement.
    """

    def test_oneAttempt(self) -> None:
        """
        With one attempt allowed, the job fails "after 1 attempt in a row".
        """
        h = JobHarness(self, refuse=lambda b: "NO [UNAVAILABLE] Temporary failure, try later")
        populate(h.source, h.source.addFolder("INBOX"), 2)
        result = h.run(
            h.job(JobSettings(connections=1, batchMessages=2), retry=RetryPolicy(attempts=1))
        )
        self.assertFalse(result)
        self.assertEqual(h.progress.state, JobState.FAILED)
        assert h.progress.error is not None
        self.assertIn("gave up after 1 attempt in a row", h.progress.error)
        h.finish()
