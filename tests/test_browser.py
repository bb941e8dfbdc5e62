# -*- test-case-name: tests.test_browser -*-
"""
The dashboard in a real browser: Debian's Chromium, headless, driven by
Selenium against the daemon (C{python -m imapmig.daemon}) running a real,
rate-limited migration of four jobs into a private Dovecot.

It checks, through the dashboard's DOM contract, that the page shows the
numbers of C{/status.json}, that it moves on without a reload, that pause
and resume work from the page with the token and are refused without it
(a paused job holding no IMAP connection, as Dovecot itself reports), and
that the migration still ends with every message in Dovecot exactly once;
it saves screenshots at desktop and phone sizes mid-run into
C{$IMAPMIG_SCREENSHOTS} (default C{_trial_temp/screenshots/}).

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import secrets
import struct
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.testing.dovecot import DovecotInstance, requireDovecot
from tests import browser
from tests.browser import (
    DESKTOP,
    MISSING,
    PHONE,
    BrowserMissing,
    PageReading,
    emulateViewport,
    pngSize,
    readPage,
    requireBrowser,
    saveFullPage,
    saveScreenshot,
    screenshotDirectory,
    setMarker,
    startBrowser,
    waitPage,
)
from tests.liverun import (
    DaemonRun,
    LiveJob,
    LiveMigration,
    StatusClient,
    metricValue,
    pollUntil,
    sessionsOf,
    writeLiveMigration,
)
from tests.support import deliveries, freshUser, newDirectory, sharedDovecot

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

_T = TypeVar("_T")

JOBS = (("alice", 80), ("bob", 80), ("carol", 80), ("dave", 180))
"""
The jobs (name, messages): at L{RATE} messages a second each, the first
three take about 20 s and the last about 45 s, plus the time it is paused:
long enough to watch, to screenshot and to pause (about 20 s in, or 30 s
beside a CPU hog), with room to spare.
"""

CONTROLLED = "dave"
"""
The job the test pauses and resumes: the longest, so it still runs then.
"""

RATE = 4
"""
Each account's C{per_account.messages_per_second}.
"""

STEP = 60.0
"""
The bound of each wait for something the daemon or the page does within a
poll or two (generous: the test must pass beside a CPU hog).
"""

FINISH = 240.0
"""
The bound of the wait for the whole migration to end.
"""

OVERALL_FIELDS = (
    ("overall-done", "messages_done"),
    ("overall-failed", "messages_failed"),
    ("overall-percent", "percent_messages"),
    ("overall-rate", "messages_per_second"),
    ("overall-eta", "eta_seconds"),
    ("overall-bytes-done", "bytes_done"),
)
"""
Each element of the overall progress and the key of C{totals} it shows
(C{overall-total} and C{overall-bytes-total} are compared apart: they
depend on every job having been counted).
"""

JOB_FIELDS = (
    ("job-state", "state"),
    ("job-done", "messages_done"),
    ("job-total", "messages_total"),
    ("job-failed", "messages_failed"),
    ("job-percent", "percent"),
    ("job-rate", "messages_per_second"),
    ("job-eta", "eta_seconds"),
)
"""
Each cell of a job's row and the key of the job's JSON entry it shows.
"""

JOB_STATE_METRIC = "imapmig_job_state"
"""
The gauge of C{/metrics} that is 1 for the state a job is in (labels
C{job}, C{server}, C{state}).
"""

JOB_MIGRATED_METRIC = "imapmig_job_migrated_messages_total"
"""
The counter of C{/metrics} of the messages a job appended (labels C{job},
C{server}).
"""

MOVING = {"overall-rate", "overall-eta", "job-rate", "job-eta"}
"""
What keeps changing after the migration ends (the rate's window moves on).
"""


def shows(shown: str | None, expected: object) -> bool:
    """
    Whether a C{data-value} shows a JSON value: a state as its text, a
    number as the same number (the page's raw JavaScript number), null as
    an empty or absent attribute.
    """
    if shown == MISSING:
        return False
    if expected is None:
        return shown in (None, "")
    if isinstance(expected, str):
        return shown == expected
    if isinstance(expected, bool) or not isinstance(expected, (int, float)):
        return False
    if shown is None:
        return False
    try:
        value = float(shown)
    except ValueError:
        return False
    return math.isclose(value, float(expected), rel_tol=1e-9, abs_tol=1e-9)


def differences(
    reading: PageReading, document: dict[str, Any], skip: frozenset[str] = frozenset()
) -> list[str]:
    """
    Where the page differs from a C{/status.json} document, one line each.

    @param skip: the elements and cells (L{MOVING}) not to compare.
    """
    found: list[str] = []

    def compare(what: str, shown: str | None, expected: object) -> None:
        if shown == MISSING:
            found.append(f"{what}: missing from the page")
        elif not shows(shown, expected):
            found.append(f"{what}: the page shows {shown!r}, the JSON has {expected!r}")

    totals = document.get("totals", {})
    for element, key in OVERALL_FIELDS:
        if element not in skip:
            compare(
                f"#{element}[data-value] (totals.{key})", reading.overall[element], totals.get(key)
            )
    counted = totals.get("jobs_counted") == totals.get("jobs_total")
    # Until every job is counted the total is "" ("not yet counted").
    compare(
        "#overall-total[data-value] (totals.messages_total)",
        reading.overall["overall-total"],
        totals.get("messages_total") if counted else None,
    )
    if counted:
        compare(
            "#overall-bytes-total[data-value] (totals.bytes_total)",
            reading.overall["overall-bytes-total"],
            totals.get("bytes_total"),
        )
    names = [job.get("name") for job in document.get("jobs", ())]
    if sorted(reading.jobs) != sorted(names):
        found.append(f"rows tr[data-job]: the page shows {sorted(reading.jobs)}, the JSON {names}")
    for job in document.get("jobs", ()):
        cells = reading.jobs.get(job.get("name"))
        if cells is None:
            continue
        for cell, key in JOB_FIELDS:
            expected = job.get(key)
            if cell == "job-total" and job.get("counted") is False:
                expected = None  # "" until the job is counted
            if cell not in skip:
                compare(f"tr[data-job={job['name']!r}] .{cell} ({key})", cells[cell], expected)
    return found


def jobEntry(document: dict[str, Any], name: str) -> dict[str, Any]:
    """
    The entry of job C{name} in a C{/status.json} document.
    """
    for job in document.get("jobs", ()):
        if job.get("name") == name:
            assert isinstance(job, dict)
            return job
    raise AssertionError(f"job {name!r} is not in /status.json")


class DashboardBrowserTests(SynchronousTestCase):
    """
    The dashboard, in headless Chromium, over a live migration.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        requireBrowser(self)
        self.instance: DovecotInstance = sharedDovecot()
        self.directory = newDirectory(self)
        self.migration: LiveMigration = writeLiveMigration(
            self.directory,
            self.instance,
            [(name, freshUser(self.instance), count) for name, count in JOBS],
            messagesPerSecond=RATE,
            token=secrets.token_urlsafe(24),
        )
        self.driver: WebDriver = startBrowser(self, self.directory)
        self.daemon = DaemonRun(
            self.migration.configPath, os.path.join(self.directory, "daemon.log")
        )
        self.addCleanup(self.daemon.kill)
        self.shots = screenshotDirectory()
        self.marker: str | None = None

    # -- waiting ---------------------------------------------------------------

    def waitPage(
        self,
        what: str,
        condition: Callable[[WebDriver], _T | None],
        timeout: float = STEP,
        detail: Callable[[], str] = lambda: "",
    ) -> _T:
        """
        Wait until C{condition(driver)} is true, at most C{timeout} seconds
        (L{tests.browser.waitPage}).
        """
        return waitPage(self, self.driver, what, condition, timeout, detail)

    def waitDaemon(
        self,
        what: str,
        condition: Callable[[], _T | None],
        timeout: float = STEP,
        detail: Callable[[], str] = lambda: "",
    ) -> _T:
        """
        Wait until C{condition()} (about the daemon or Dovecot) is true, at
        most C{timeout} seconds.

        @param detail: more for the failure message.
        """
        result: _T = pollUntil(what, condition, timeout, detail=detail)
        return result

    def matchedReading(
        self, what: str, newerThan: float | None = None
    ) -> tuple[PageReading, dict[str, Any]]:
        """
        Read the page until it shows a snapshot of C{/status.json} the
        browser received (newer than C{newerThan}); fail at once if the
        page was reloaded.

        @return: the reading and the JSON document it shows.
        """
        seen: list[PageReading] = []

        def matched(driver: WebDriver) -> tuple[PageReading, dict[str, Any]] | None:
            reading = readPage(driver)
            seen[:] = [reading]
            self.checkNotReloaded(reading)
            document = reading.received()
            if document is None:
                return None
            if newerThan is not None and document["time"] <= newerThan:
                return None
            return reading, document

        def lastSeen() -> str:
            if not seen:
                return "The page could not be read."
            last = seen[0]
            times = [json.loads(body).get("time") for body in last.bodies]
            shown = "absent" if last.time == MISSING else repr(last.time)
            return (
                f"Last seen: #updated[data-time] {shown},"
                f" window.imapmigDashboard.polls {last.polls!r}, /status.json times received"
                f" {times} (is this the dashboard of the DOM contract?)"
            )

        return self.waitPage(
            f"{what}: the page to show a /status.json it received (#updated[data-time] equal to"
            " the JSON's time)",
            matched,
            detail=lastSeen,
        )

    def checkNotReloaded(self, reading: PageReading) -> None:
        """
        Fail if the test's marker (set once, L{setMarker}) is gone.
        """
        if self.marker is not None and reading.marker != self.marker:
            raise self.failureException(
                "the page was reloaded (the marker set on window is gone): it must update"
                " without a reload"
            )

    # -- the steps --------------------------------------------------------------

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[None]:
        """
        Name the check a failure belongs to; on failure save a screenshot
        and the page's HTML beside the screenshots and add the daemon's
        log tail to the message.
        """
        try:
            yield
        except Exception as e:
            slug = name.split(")")[0].strip("(").replace(" ", "")
            artefacts = os.path.join(self.shots, f"failure-check{slug}")
            try:
                saveScreenshot(self.driver, artefacts + ".png")
                with open(artefacts + ".html", "w", encoding="utf-8") as f:
                    f.write(self.driver.page_source)
            except Exception as saving:
                artefacts = f"(could not save the page: {saving})"
            raise self.failureException(
                f"check {name} failed: {e}\n(page saved as {artefacts}.png/.html)\n"
                f"--- the daemon's log ends:\n{self.daemon.tail(25)}"
            ) from e

    def test_liveDashboard(self) -> None:
        """
        Over a live migration of four jobs: (1) the page's numbers are
        those of C{/status.json}; (2) they move on without a reload; (4)
        screenshots at 1280x900 and 390x844 are saved mid-run; (3) pause is
        refused without the token, works with it (the job holds no IMAP
        connection) and resume brings the job back; and the migration ends
        with every message in Dovecot exactly once, the page showing the
        final numbers of C{/status.json}.
        """
        with self.check("(0) the daemon starts and serves the page"):
            self.openDashboard()
        with self.check("(1) the page shows the numbers of /status.json"):
            self.checkPageEqualsJSON()
        with self.check("(2) progress moves without a reload"):
            self.checkLiveUpdates()
        with self.check("(4) screenshots at desktop and phone sizes"):
            self.takeScreenshots()
        with self.check("(3) pause and resume from the page"):
            self.checkControls()
        with self.check("(5) the migration ends, every message in Dovecot exactly once"):
            self.checkFinished()

    def openDashboard(self) -> None:
        """
        Wait for the daemon's status listener, then open the dashboard.
        """
        port = self.waitDaemon(
            "the daemon's status listener", self.daemon.statusPort, detail=self.daemon.tail
        )
        self.client = StatusClient(port)
        self.driver.get(f"http://127.0.0.1:{port}/")

    def checkPageEqualsJSON(self) -> None:
        """
        The page shows the very C{/status.json} it received, number for
        number, while the migration runs; and a plain client's
        C{/status.json} fetched right after is the same run, a moment on.
        """
        reading, shown = self.matchedReading("the first rendering")
        problems = differences(reading, shown)
        self.assertEqual(problems, [], "\n".join(problems))
        fresh = self.client.status()
        self.assertEqual(fresh.get("schema"), 2)
        self.assertGreaterEqual(fresh["time"], shown["time"])
        self.assertEqual(
            [j["name"] for j in fresh["jobs"]], [name for name, _ in JOBS], "the jobs in order"
        )
        totals = fresh["totals"]
        self.assertLess(
            totals["messages_done"] + totals["messages_failed"],
            self.migration.messagesTotal,
            "the migration ended before the page could be watched: slow it further",
        )
        self.assertGreaterEqual(totals["messages_done"], shown["totals"]["messages_done"])
        for job in fresh["jobs"]:
            self.assertGreaterEqual(
                job["messages_done"],
                jobEntry(shown, job["name"])["messages_done"],
                f"job {job['name']}: done went back between the page's JSON and the test's",
            )

    def checkLiveUpdates(self) -> None:
        """
        With a marker set on C{window}, C{#overall-done} grows and
        C{imapmigDashboard.polls} increases, the marker still there (no
        reload), each rendering still showing its JSON.
        """
        self.marker = secrets.token_hex(8)
        setMarker(self.driver, self.marker)
        start, _ = self.matchedReading("before watching")
        self.assertIsNotNone(start.polls, "window.imapmigDashboard.polls is missing")
        assert start.polls is not None
        startDone = float(start.overall["overall-done"] or 0)

        def moved(driver: WebDriver) -> PageReading | None:
            reading = readPage(driver)
            self.checkNotReloaded(reading)
            if reading.polls is None or reading.polls <= start.polls + 1:  # type: ignore[operator]
                return None
            if float(reading.overall["overall-done"] or 0) <= startDone:
                return None
            return reading

        self.waitPage("#overall-done[data-value] to grow and two more polls", moved)
        reading, shown = self.matchedReading("after moving on")
        problems = differences(reading, shown)
        self.assertEqual(problems, [], "\n".join(problems))

    def takeScreenshots(self) -> None:
        """
        Screenshots of the viewport and of the whole page at 1280x900 and
        at 390x844 (a phone: the page must fit its width), while jobs run.
        """
        reading, shown = self.matchedReading("before the screenshots")
        self.assertGreater(
            shown["totals"]["jobs"].get("running", 0), 0, "no job is running for the screenshots"
        )
        for label, (width, height), mobile in (
            ("desktop", DESKTOP, False),
            ("phone", PHONE, True),
        ):
            emulateViewport(self.driver, width, height, mobile)
            self.waitPage(
                f"the {label} viewport to be {width} px wide (a phone needs"
                ' <meta name="viewport" content="width=device-width">)',
                lambda d: d.execute_script("return window.innerWidth") == width,
            )
            self.matchedReading(f"the {label} layout after a poll", newerThan=shown["time"])
            size = saveScreenshot(self.driver, os.path.join(self.shots, f"dashboard-{label}.png"))
            self.assertEqual(size, (width, height), f"the {label} screenshot's size")
            saveFullPage(self.driver, os.path.join(self.shots, f"dashboard-{label}-full.png"))
            overflow = self.driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            self.assertLessEqual(
                overflow, 0, f"at {width} px the page scrolls sideways by {overflow} px"
            )
        emulateViewport(self.driver, DESKTOP[0], DESKTOP[1], False)

    def checkControls(self) -> None:
        """
        Without a token the page's pause is refused and the job keeps
        running; with the token typed into C{#token} and saved, pause makes
        the job C{paused} (in C{/status.json}, on the page and in
        C{/metrics}) holding no connection (Dovecot has no session of its
        account) and making no progress, and resume makes it run on.
        """
        from selenium.webdriver.common.by import By

        job = self.jobOf(CONTROLLED)
        field = self.driver.find_element(By.ID, "token")
        self.assertEqual(field.get_attribute("value"), "", "#token is not empty at first")

        # Refused without the token.
        outcome, text = self.control("pause")
        self.assertEqual(outcome, "refused", f"pause without a token: {text!r}")
        entry = self.client.job(CONTROLLED)
        self.assertFalse(entry["paused"], "paused without a token")
        self.assertNotEqual(entry["state"], "paused", "paused without a token")
        self.waitDaemon(
            f"{CONTROLLED} to keep running after the refused pause",
            lambda: self.client.job(CONTROLLED)["messages_done"] > entry["messages_done"],
        )
        # While it runs Dovecot counts its session: the check below can fail.
        self.waitDaemon(
            f"Dovecot to count a session of {job.user.name} (the running {CONTROLLED})",
            lambda: sessionsOf(self.instance, job.user.name) > 0,
        )

        # With the token.
        field = self.driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(self.migration.token)
        self.click("#token-save")
        outcome, text = self.control("pause")
        self.assertEqual(outcome, "ok", f"pause with the token: {text!r}")
        def paused() -> bool:
            entry = self.client.job(CONTROLLED)
            return entry["state"] == "paused" and entry["paused"] is True

        self.waitDaemon(f"/status.json to show {CONTROLLED} paused", paused)
        self.waitDaemon(
            f"Dovecot to hold no session of {job.user.name} (the paused {CONTROLLED})",
            lambda: sessionsOf(self.instance, job.user.name) == 0,
            detail=lambda: f"doveadm who counts {sessionsOf(self.instance, job.user.name)}",
        )
        doneWhilePaused = self.client.job(CONTROLLED)["messages_done"]
        self.assertLess(doneWhilePaused, len(job.corpus.messages), "nothing left to resume")
        _, shown = self.matchedReading("after the pause")

        def showsPaused(driver: WebDriver) -> bool:
            reading = readPage(driver)
            self.checkNotReloaded(reading)
            document = reading.received()
            return (
                document is not None
                and document["time"] > shown["time"]
                and reading.jobs.get(CONTROLLED, {}).get("job-state") == "paused"
            )

        self.waitPage(f"the row of {CONTROLLED} to show it paused", showsPaused)
        entry = self.client.job(CONTROLLED)
        self.assertEqual(entry["state"], "paused")
        self.assertEqual(entry["messages_done"], doneWhilePaused, "progress while paused")
        self.assertEqual(sessionsOf(self.instance, job.user.name), 0, "a session while paused")
        self.assertEqual(
            metricValue(
                self.client.metrics(), JOB_STATE_METRIC, {"job": CONTROLLED, "state": "paused"}
            ),
            1.0,
            f'/metrics: {JOB_STATE_METRIC}{{job="{CONTROLLED}",state="paused"}} while paused',
        )

        # Resume.
        outcome, text = self.control("resume")
        self.assertEqual(outcome, "ok", f"resume with the token: {text!r}")
        def runsAgain() -> bool:
            entry = self.client.job(CONTROLLED)
            return not entry["paused"] and entry["messages_done"] > doneWhilePaused

        self.waitDaemon(f"{CONTROLLED} to run again and copy more after resume", runsAgain)

    def checkFinished(self) -> None:
        """
        Every job ends C{done} with nothing failed; the page shows the final
        numbers of a plain client's C{/status.json}, and C{/metrics} the
        same counts and states; Dovecot holds every message exactly once;
        C{SIGTERM} stops the daemon with status 0.
        """
        def allDone() -> dict[str, Any] | None:
            document = self.client.status()
            states = {job["state"] for job in document["jobs"]}
            return document if states == {"done"} else None

        final = self.waitDaemon(
            "every job to be done",
            allDone,
            timeout=FINISH,
            detail=lambda: str([(j["name"], j["state"]) for j in self.client.status()["jobs"]]),
        )
        self.assertEqual(final["totals"]["messages_done"], self.migration.messagesTotal)
        self.assertEqual(final["totals"]["messages_failed"], 0)
        reading, _ = self.matchedReading("after the end", newerThan=final["time"])
        problems = differences(reading, final, skip=frozenset(MOVING))
        self.assertEqual(problems, [], "\n".join(problems))
        metrics = self.client.metrics()
        for entry in final["jobs"]:
            labels = {"job": entry["name"]}
            self.assertEqual(
                metricValue(metrics, JOB_MIGRATED_METRIC, labels),
                entry["messages_done"],
                f'/metrics: {JOB_MIGRATED_METRIC}{{job="{entry["name"]}"}} against /status.json',
            )
            self.assertEqual(
                metricValue(metrics, JOB_STATE_METRIC, {**labels, "state": "done"}),
                1.0,
                f'/metrics: {JOB_STATE_METRIC}{{job="{entry["name"]}",state="done"}}',
            )
        for job in self.migration.jobs:
            held = deliveries(self.instance.fetchAll(job.user.name), job.corpus.messages)
            self.assertTrue(held.exactlyOnce, f"job {job.name}: {held.summary()}")
        self.assertEqual(self.daemon.stop(), 0, self.daemon.tail())

    # -- the page's controls ----------------------------------------------------

    def jobOf(self, name: str) -> LiveJob:
        """
        The live job named C{name}.
        """
        return next(job for job in self.migration.jobs if job.name == name)

    def click(self, selector: str) -> None:
        """
        Click the element C{selector} selects, as a user would, trying
        again while the page re-renders it.
        """
        from selenium.common.exceptions import (
            ElementClickInterceptedException,
            ElementNotInteractableException,
            NoSuchElementException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.common.by import By

        def clicked(driver: WebDriver) -> bool:
            try:
                driver.find_element(By.CSS_SELECTOR, selector).click()
            except (
                ElementClickInterceptedException,
                ElementNotInteractableException,
                NoSuchElementException,
                StaleElementReferenceException,
            ):
                return False
            return True

        self.waitPage(f"{selector} to be clickable", clicked)

    def control(self, action: str) -> tuple[str, str]:
        """
        Click the C{action} button of L{CONTROLLED}'s row and wait for
        C{#control-status} to report the outcome.

        @return: C{#control-status[data-outcome]} and its text.
        """
        from selenium.webdriver.common.by import By

        cleared = self.driver.execute_script(
            "const s = document.getElementById('control-status');"
            " if (s === null) return false; s.removeAttribute('data-outcome'); return true;"
        )
        self.assertTrue(cleared, "the page has no #control-status")
        self.click(f'button[data-action="{action}"][data-job="{CONTROLLED}"]')

        def outcome(driver: WebDriver) -> tuple[str, str] | None:
            status = driver.find_element(By.ID, "control-status")
            value = status.get_attribute("data-outcome")
            # The contract's outcomes; the page may show others meanwhile
            # ("pending" while the request is on its way).
            return (value, status.text) if value in ("ok", "refused", "error") else None

        return self.waitPage(f"#control-status[data-outcome] after {action}", outcome)


class BrowserSupportTests(SynchronousTestCase):
    """
    What the browser test relies on, checked without a browser: that its
    comparison can fail, and that a missing browser skips or fails it.
    """

    def document(self) -> dict[str, Any]:
        """
        A C{/status.json} document of two jobs, one not yet counted.
        """
        return {
            "schema": 2,
            "time": 1764100000.25,
            "totals": {
                "jobs_total": 2, "jobs_counted": 1, "messages_total": 80, "messages_done": 12,
                "messages_failed": 1, "percent_messages": 16.25, "messages_per_second": 4.2,
                "eta_seconds": None, "bytes_done": 40960, "bytes_total": 300000,
            },
            "jobs": [
                {"name": "alice", "state": "running", "counted": True, "messages_total": 80,
                 "messages_done": 12, "messages_failed": 1, "percent": 16.25,
                 "messages_per_second": 4.2, "eta_seconds": 16.0},
                {"name": "bob", "state": "queued", "counted": False, "messages_total": None,
                 "messages_done": 0, "messages_failed": 0, "percent": None,
                 "messages_per_second": None, "eta_seconds": None},
            ],
        }

    def reading(self, **overall: str | None) -> PageReading:
        """
        What a page showing L{document} faithfully reads, with C{overall}
        changed.
        """
        values: dict[str, str | None] = {
            "overall-done": "12", "overall-total": "", "overall-failed": "1",
            "overall-percent": "16.25", "overall-rate": "4.2", "overall-eta": "",
            "overall-bytes-done": "40960", "overall-bytes-total": "",
        }
        values.update({k.replace("_", "-"): v for k, v in overall.items()})
        return PageReading(
            time="1764100000.25",
            overall=values,
            jobs={
                "alice": {"job-state": "running", "job-done": "12", "job-total": "80",
                          "job-failed": "1", "job-percent": "16.25", "job-rate": "4.2",
                          "job-eta": "16"},
                "bob": {"job-state": "queued", "job-done": "0", "job-total": "",
                        "job-failed": "0", "job-percent": "", "job-rate": "", "job-eta": ""},
            },
            polls=3,
            marker=None,
            bodies=(json.dumps(self.document()),),
        )

    def test_faithfulPage(self) -> None:
        """
        A page showing the JSON's raw numbers, C{""} for null and for
        totals not yet counted, has no difference, and the JSON it shows is
        found by its time.
        """
        reading = self.reading()
        self.assertEqual(differences(reading, self.document()), [])
        self.assertEqual(reading.received(), self.document())

    def test_differenceFound(self) -> None:
        """
        A number off, a missing element, or a total shown before every job
        is counted is a difference, named.
        """
        found = differences(
            self.reading(overall_done="11", overall_rate=MISSING, overall_total="80"),
            self.document(),
        )
        self.assertEqual(len(found), 3, found)
        self.assertIn(
            "#overall-done[data-value] (totals.messages_done): the page shows '11'", found[0]
        )
        self.assertIn("#overall-rate[data-value] (totals.messages_per_second): missing", found[1])
        self.assertIn("#overall-total", found[2])

    def test_otherSnapshotNotReceived(self) -> None:
        """
        A page whose time matches no received body has no received JSON.
        """
        reading = self.reading()
        other = PageReading(
            reading.time, reading.overall, reading.jobs, reading.polls, None,
            (json.dumps({**self.document(), "time": 1764100002.25}),),
        )
        self.assertIsNone(other.received())

    def test_missingBrowserSkips(self) -> None:
        """
        Outside CI a missing browser skips the test, saying so on stderr.
        """
        self.patch(browser, "findBrowser", _noBrowser)
        self.patch(os, "environ", {})
        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        self.assertRaises(SkipTest, requireBrowser, self)
        self.assertIn("*** SKIPPING real-browser tests: not installed: chromium", stderr.getvalue())

    def test_missingBrowserFailsOnCI(self) -> None:
        """
        With C{CI=true} a missing browser fails the test.
        """
        self.patch(browser, "findBrowser", _noBrowser)
        self.patch(os, "environ", {"CI": "true"})
        self.assertRaises(self.failureException, requireBrowser, self)

    def test_metricValue(self) -> None:
        """
        A sample is found by its name and some of its labels.
        """
        text = (
            "# TYPE imapmig_job_state gauge\n"
            'imapmig_job_state{job="dave",server="dovecot",state="paused"} 1.0\n'
            'imapmig_job_state{job="dave",server="dovecot",state="running"} 0.0\n'
        )
        name = "imapmig_job_state"
        self.assertEqual(metricValue(text, name, {"job": "dave", "state": "paused"}), 1.0)
        self.assertEqual(metricValue(text, name, {"job": "dave", "state": "running"}), 0.0)
        self.assertIsNone(metricValue(text, "imapmig_job_state", {"job": "erin"}))

    def test_pngSize(self) -> None:
        """
        A PNG image's size is read from its header; anything else is refused.
        """
        header = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + struct.pack(">II", 390, 844)
        self.assertEqual(pngSize(header), (390, 844))
        self.assertRaises(AssertionError, pngSize, b"GIF89a" + bytes(20))


def _noBrowser() -> tuple[str, str]:
    raise BrowserMissing("not installed: chromium (apt-get install chromium)")
