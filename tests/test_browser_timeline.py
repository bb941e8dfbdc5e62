# -*- test-case-name: tests.test_browser_timeline -*-
"""
A job's timeline in a real browser (headless Chromium driven by Selenium,
as L{tests.test_browser}): a state database seeded through the store API
with the timeline of a job that was retried, paused, failed, retried again
and cancelled, then the real daemon serving it over a private Dovecot;
C{/jobs/NAME.json} carries the timeline as recorded, followed by the
changes the daemon's own run of the job records, and the job's panel
shows it: each change with its time, how long the job stayed, its cause
and who asked, compact until "Show all".

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser_timeline

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import TYPE_CHECKING, Any, Callable, TypeVar
from urllib.parse import quote

from twisted.trial.unittest import SynchronousTestCase

from imapmig.progress import ENDED
from imapmig.state import TIMELINE_FIRST, TIMELINE_LATEST, Transition
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.dovecot import requireDovecot
from tests.browser import (
    requireBrowser,
    saveScreenshot,
    screenshotDirectory,
    startBrowser,
    waitPage,
)
from tests.liverun import DaemonRun, StatusClient, pollUntil, writeLiveMigration
from tests.support import freshUser, newDirectory, sharedDovecot

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

_T = TypeVar("_T")

JOB = "retried@example.org"

LONG = "flapping@example.org"
"""
A job that backed off and reconnected more often than its timeline
keeps.
"""

STEP = 60.0
"""
The bound of each wait (generous: the test must pass beside a CPU hog).
"""

ADMIN = "192.0.2.7"

ENDED_STATES = frozenset(state.value for state in ENDED)


def seededTimeline(start: float) -> list[Transition]:
    """
    The timeline of a job that backed off and retried, was paused and
    resumed, failed at login, was retried by the admin, ran when the daemon
    was killed, and was cancelled after the next start, from C{start}.
    """
    steps = [
        (0, "queued", "connecting", "started", None),
        (2, "connecting", "running", "connected; 3 folders listed", None),
        (300, "running", "backing_off", "connection lost; retry 1 of 5 in 30 s", None),
        (330, "backing_off", "connecting", "retry 1 of 5", None),
        (332, "connecting", "running", "connected", None),
        (900, "running", "stopping", "paused by the admin", ADMIN),
        (901, "stopping", "paused", "paused by the admin", ADMIN),
        (1500, "paused", "queued", "resumed by the admin", "192.0.2.8"),
        (1501, "queued", "connecting", "started", None),
        (1502.5, "connecting", "failed", "login refused: [AUTHENTICATIONFAILED] no", None),
        (2000, "failed", "queued", "retry failed by the admin", ADMIN),
        (2001, "queued", "connecting", "started", None),
        (2003, "connecting", "running", "connected", None),
        # The daemon was killed while the job ran: nothing recorded until
        # the next start.
        (2500, "queued", "connecting", "started", None),
        (2502, "connecting", "running", "connected", None),
        (3000, "running", "stopping", "cancelled by the admin", "192.0.2.9"),
        (3001, "stopping", "cancelled", "cancelled by the admin", "192.0.2.9"),
    ]
    return [Transition(start + at, source, target, cause, by) for at, source, target, cause, by in steps]


READ_TIMELINE = """
return Array.from(document.querySelectorAll("#job-timeline tbody tr")).map(function (tr) {
  var cell = function (c) { var e = tr.querySelector("." + c); return e ? e.textContent : null; };
  var stay = tr.querySelector(".timeline-for");
  var badge = tr.querySelector(".timeline-change .badge");
  return {
    "class": tr.className, "time": tr.getAttribute("data-time"),
    "from": tr.getAttribute("data-from"), "to": tr.getAttribute("data-to"),
    "badge": badge ? badge.getAttribute("data-state") : null,
    "when": tr.querySelector("time") ? tr.querySelector("time").getAttribute("datetime") : null,
    "stay": stay ? stay.getAttribute("data-value") : null, "stayText": cell("timeline-for"),
    "cause": cell("timeline-cause"), "by": cell("timeline-by"), "text": tr.textContent
  };
});
"""


class TimelineBrowserTests(SynchronousTestCase):
    """
    The timeline of a job, seeded through the store, as the real daemon
    serves it and Chromium shows it.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        requireBrowser(self)
        instance = sharedDovecot()
        self.directory = newDirectory(self)
        self.migration = writeLiveMigration(
            self.directory,
            instance,
            [(JOB, freshUser(instance), 6), (LONG, freshUser(instance), 1)],
            messagesPerSecond=50,
            token=secrets.token_urlsafe(24),
        )
        self.driver: WebDriver = startBrowser(self, self.directory)

    def waitPage(self, what: str, condition: Callable[[WebDriver], _T | None]) -> _T:
        """
        Wait until C{condition(driver)} is true, at most L{STEP} seconds.
        """
        return waitPage(
            self, self.driver, what, condition, STEP,
            lambda: "The daemon's log ends:\n" + self.daemon.tail(25),
        )  # fmt: skip

    def test_timelineShown(self) -> None:
        """
        The daemon's C{/jobs/NAME.json} carries the seeded timeline, oldest
        first, as C{{time, from, to, cause, by}}; the job's panel shows
        its first two changes, how many more, and its latest eight, then
        every change after "Show all": each with its time, the state it
        entered (its badge), how long the job stayed there (the time to
        the next change), its cause, and who asked (the pause, the retry
        and the cancel), the last (cancelled: ended) with no duration.
        """
        start = time.time() - 4000
        seeded = seededTimeline(start)
        store = SQLiteStateStore(os.path.join(self.directory, "state.sqlite"), time.time)
        for transition in seeded:
            self.successResultOf(store.recordTransition(JOB, transition))
        for n in range(TIMELINE_FIRST + TIMELINE_LATEST + 100):
            flap = ("running", "backing_off") if n % 2 else ("backing_off", "running")
            self.successResultOf(
                store.recordTransition(LONG, Transition(start + n, *flap, f"attempt {n}"))
            )
        store.close()
        self.daemon = DaemonRun(self.migration.configPath, os.path.join(self.directory, "daemon.log"))
        self.addCleanup(self.daemon.kill)
        port = pollUntil(
            "the daemon's status listener", self.daemon.statusPort, STEP, detail=self.daemon.tail
        )
        client = StatusClient(port)
        # The daemon runs both jobs (their machines record each change after
        # the seeded ones): read the timelines once they have ended.
        pollUntil(
            "both jobs ended",
            lambda: all(
                job["state"] in ENDED_STATES
                for job in client.request("GET", "/status.json").json()["jobs"]
            )
            or None,
            STEP,
            detail=self.daemon.tail,
        )
        expected = [
            {"time": t.time, "from": t.source, "to": t.target, "cause": t.cause, "by": t.by}
            for t in seeded
        ]
        timeline = self.timeline(client, JOB)
        self.assertEqual(timeline[: len(seeded)], expected)
        run = timeline[len(seeded) :]
        self.assertEqual(
            ((run[0]["from"], run[0]["to"]), run[-1]["to"]), (("queued", "connecting"), "done"), run
        )
        seeded = [
            Transition(t["time"], t["from"], t["to"], t["cause"], t["by"]) for t in timeline
        ]

        self.driver.get(f"http://127.0.0.1:{port}/#job={quote(JOB, safe='')}")
        rows: list[dict[str, Any]] = self.waitPage(
            "the compact timeline",
            lambda driver: [
                row for row in driver.execute_script(READ_TIMELINE) if row["time"]
            ] or None,
        )
        self.assertEqual(
            [float(row["time"]) for row in rows],
            [t.time for t in seeded[:2] + seeded[-8:]],
        )
        more = self.driver.find_element("css selector", "#job-timeline tr.timeline-more")
        self.assertIn(f"{len(seeded) - 10} more changes", more.text)
        saveScreenshot(self.driver, os.path.join(screenshotDirectory(), "timeline-compact.png"))

        self.driver.find_element("id", "job-timeline-all").click()
        rows = self.waitPage(
            "every change after Show all",
            lambda driver: (
                lambda shown: shown if len(shown) == len(seeded) else None
            )([row for row in driver.execute_script(READ_TIMELINE) if row["time"]]),
        )
        for index, (row, transition) in enumerate(zip(rows, seeded)):
            following = seeded[index + 1] if index + 1 < len(seeded) else None
            if following is not None and following.source != transition.target:
                following = None
            self.assertEqual(
                (float(row["time"]), row["from"], row["to"], row["badge"], row["cause"], row["by"]),
                (transition.time, transition.source, transition.target, transition.target,
                 transition.cause, transition.by or "–"),
                f"row {index}",
            )  # fmt: skip
            if following is None:
                self.assertEqual(row["stay"], "")
            else:
                self.assertEqual(float(row["stay"]), following.time - transition.time)
            self.assertTrue(row["when"], f"row {index}")
        # How long it was paused; the change before the restart, the
        # cancel, and the run's end (ended) with no duration; a note where
        # the chain breaks (the kill, and the seeded cancel before this run).
        self.assertEqual(rows[6]["stayText"], "9 min 59 s")
        self.assertEqual(
            (rows[12]["stayText"], rows[16]["stayText"], rows[-1]["stayText"]), ("–", "–", "–")
        )
        self.assertNotIn("timeline-current", rows[-1]["class"])
        self.assertEqual(
            self.gaps(),
            [(13, "⋯ changes between these not recorded"), (17, "⋯ changes between these not recorded")],
        )
        saveScreenshot(self.driver, os.path.join(screenshotDirectory(), "timeline-all.png"))

        # A timeline past its bound: its first 20 and latest 480 changes,
        # a note where the dropped ones were, and no duration across them.
        self.driver.get(f"http://127.0.0.1:{port}/#job={quote(LONG, safe='')}")
        self.waitPage(
            "the long timeline's Show all",
            lambda driver: driver.find_elements("id", "job-timeline-all") or None,
        )[0].click()
        kept = TIMELINE_FIRST + TIMELINE_LATEST
        rows = self.waitPage(
            "the long timeline in full",
            lambda driver: (
                lambda shown: shown if len(shown) == kept else None
            )([row for row in driver.execute_script(READ_TIMELINE) if row["time"]]),
        )
        long = self.timeline(client, LONG)
        self.assertEqual(len(long), kept)
        # This run's changes follow the seeded flapping, which ends without
        # its run's end: a break where this run starts.
        restart = next(
            n for n in range(TIMELINE_FIRST + 1, kept) if long[n]["from"] != long[n - 1]["to"]
        )
        self.assertEqual((long[restart]["from"], long[restart]["to"]), ("queued", "connecting"))
        self.assertEqual([row["cause"] for row in rows], [t["cause"] for t in long])
        # Past the first 20, the next kept is a later one: those between
        # (and, as this run's changes came, a few more) were dropped.
        self.assertEqual(rows[TIMELINE_FIRST - 1]["cause"], f"attempt {TIMELINE_FIRST - 1}")
        self.assertGreaterEqual(
            int(rows[TIMELINE_FIRST]["cause"].split()[1]), 100 + TIMELINE_FIRST
        )
        self.assertEqual(
            (rows[TIMELINE_FIRST - 2]["stay"], rows[TIMELINE_FIRST - 1]["stay"]), ("1", "")
        )
        self.assertEqual(
            self.gaps(),
            [
                (TIMELINE_FIRST, "⋯ changes between these not kept (a job's first 20 and latest 480 are)"),
                (restart, "⋯ changes between these not recorded"),
            ],
        )

    def timeline(self, client: StatusClient, job: str) -> list[dict[str, Any]]:
        """
        Job C{job}'s C{timeline} in its C{/jobs/NAME.json}.
        """
        reply = client.request("GET", f"/jobs/{quote(job, safe='')}.json")
        self.assertEqual(reply.code, 200, reply.body[:300])
        timeline: list[dict[str, Any]] = reply.json()["timeline"]
        return timeline

    def gaps(self) -> list[tuple[int, str]]:
        """
        The notes of the timeline's breaks, each with how many changes
        come before it.
        """
        found: list[list[Any]] = self.driver.execute_script(
            """
            var seen = 0, gaps = [];
            document.querySelectorAll("#job-timeline tbody tr").forEach(function (tr) {
              if (tr.hasAttribute("data-time")) seen += 1;
              else if (tr.classList.contains("timeline-gap")) gaps.push([seen, tr.textContent]);
            });
            return gaps;
            """
        )
        return [(int(seen), str(text)) for seen, text in found]
