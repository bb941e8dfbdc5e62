"""
The dashboard says only what is true about waits, rates and time left, in
a real browser (Selenium and headless Chromium, as L{tests.browser} drives
them) over the harness's fixtures (L{tests.dashboardharness}), served in a
process of its own: every job held (paused, paused by the server, deferred
by a daily budget) shows why and until when instead of a time left; each
wait has its reason and resume time in the row, the drill-down and the
phone layout, with a badge of its own; a job done with failed messages is
"done, N failed" and not green; the finished page has no rate now and no
"done ≈".  Screenshots go to C{$IMAPMIG_SCREENSHOTS} (default
C{_trial_temp/screenshots/}).

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from twisted.trial.unittest import SynchronousTestCase

from tests.browser import (
    DESKTOP,
    PHONE,
    emulateViewport,
    requireBrowser,
    saveScreenshot,
    screenshotDirectory,
    startBrowser,
)

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

READ = """
var text = function (id) { var e = document.getElementById(id); return e ? e.textContent : null; };
var value = function (id) { var e = document.getElementById(id); return e ? e.getAttribute("data-value") : null; };
var rows = {};
document.querySelectorAll("#jobs-body tr[data-job]").forEach(function (tr) {
  var badge = tr.querySelector(".job-state"), error = tr.querySelector(".job-error");
  var box = error.getBoundingClientRect();
  rows[tr.getAttribute("data-job")] = {
    badge: badge.textContent, state: badge.getAttribute("data-state"),
    badgeColour: getComputedStyle(badge).backgroundColor,
    eta: tr.querySelector(".job-eta").textContent, error: error.textContent,
    label: error.getAttribute("data-label"), wait: error.getAttribute("data-wait"),
    shown: box.width > 0 && box.left >= 0 && box.right <= window.innerWidth
  };
});
var wait = document.getElementById("job-detail-wait");
return {
  polls: window.imapmigDashboard.polls,
  eta: text("overall-eta"), etaValue: value("overall-eta"), etaClock: text("overall-eta-clock"),
  rate: text("overall-rate"), rateValue: value("overall-rate"), rateLabel: text("overall-rate-label"),
  byteRate: text("overall-byte-rate"), overview: document.querySelector(".overview").textContent,
  detailOpen: !document.getElementById("job-detail").hidden,
  detailWait: wait.hidden ? null : wait.textContent, detailWaitKind: wait.getAttribute("data-wait"),
  detailSummary: text("job-detail-summary"),
  scrollsSideways: document.documentElement.scrollWidth > window.innerWidth,
  rows: rows
};
"""

DEFERRED = "bob@example.org"
SERVER = "eve.with.a.rather.long.mailbox.name@subdomain.example.org"
ADMIN = "frank@example.org"


class WaitsInChromiumTests(SynchronousTestCase):
    """
    The page over the held, running and finished fixtures.
    """

    def serve(self, *flags: str) -> int:
        """
        Start the harness with C{flags}; its port.
        """
        from imapmig.testing.ports import freePort
        from tests.support import SOURCE_TREE, sourceTreeEnvironment

        port = freePort()
        harness = subprocess.Popen(
            [sys.executable, "-m", "tests.dashboardharness", "--port", str(port), *flags],
            cwd=SOURCE_TREE, env=sourceTreeEnvironment(), stdout=subprocess.DEVNULL,
        )
        self.addCleanup(harness.wait, 30)
        self.addCleanup(harness.terminate)
        return port

    def browse(self, *flags: str, fragment: str = "") -> tuple[WebDriver, dict[str, Any]]:
        """
        Open the page over the harness started with C{flags}, in UTC, and
        read it once it rendered (and its drill-down, with C{fragment}).
        """
        requireBrowser(self)
        port = self.serve(*flags)
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        driver = startBrowser(self, directory)
        driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
        deadline = time.monotonic() + 60
        while True:
            try:
                driver.get(f"http://127.0.0.1:{port}/{fragment}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return driver, self.read(driver, deadline, bool(fragment))

    def read(self, driver: WebDriver, deadline: float, detail: bool = False) -> dict[str, Any]:
        """
        The page, once it rendered a poll (and its drill-down's wait, if
        C{detail}).
        """
        while True:
            page: dict[str, Any] = driver.execute_script(READ)
            if page["polls"] >= 1 and (not detail or page["detailSummary"]):
                return page
            if time.monotonic() > deadline:
                self.fail(f"the page did not render: {page}")
            time.sleep(0.2)

    def screenshot(self, driver: WebDriver, name: str) -> None:
        """
        Save the viewport as C{name}.png in the screenshot directory.
        """
        saveScreenshot(driver, os.path.join(screenshotDirectory(), name + ".png"))

    def test_everyJobHeld(self) -> None:
        """
        With every job that has not ended paused, paused by the server or
        deferred: no time left and no "done ≈", but why (the kinds and
        their counts) and until when (the earliest resume: the budgets'
        midnight); each held row has its own badge, its reason and resume
        time, in the row's wait cell and the time left column, on a phone
        too.  Before, the page said "Time left 10 min 48 s, done ≈ 18:11:10"
        with every job paused, and a budget wait's reason was only in a
        tooltip, with the admin pause's badge.
        """
        driver, page = self.browse("--held", fragment=f"#job={DEFERRED}")
        self.assertEqual(
            (page["eta"], page["etaValue"], page["etaClock"]),
            (
                "2 paused, 1 paused by the server, 3 waiting for daily budgets",
                "",
                "until 2025-11-27 00:00 UTC",
            ),
        )
        self.assertNotIn("done ≈", page["overview"])
        self.assertEqual((page["rate"], page["rateLabel"]), ("0.0 msg/s", "Rate now"))
        rows = page["rows"]
        deferred, server, admin = rows[DEFERRED], rows[SERVER], rows[ADMIN]
        self.assertEqual(
            [(row["state"], row["badge"], row["wait"], row["label"]) for row in (deferred, server, admin)],
            [
                ("deferred", "deferred (budget)", "deferred", "Waiting"),
                ("paused_by_server", "paused by server", "paused_by_server", "Waiting"),
                ("paused", "paused by admin", "paused", "Waiting"),
            ],
        )
        self.assertEqual(
            deferred["error"],
            "deferred: daily budget: 2,000 messages a day "
            "(servers.dove.per_account.daily_messages) (until 2025-11-27 00:00 UTC)",
        )
        self.assertEqual(deferred["eta"], "until 00:00 UTC")
        self.assertIn("over quota", server["error"])
        self.assertIn("until 2025-11-27 02:00 UTC", server["error"])
        self.assertEqual(admin["error"], "paused by the admin (until resumed, by admin)")
        self.assertEqual(admin["eta"], "until resumed")
        # Three badges, three colours.
        self.assertEqual(
            len({deferred["badgeColour"], server["badgeColour"], admin["badgeColour"]}), 3
        )
        # The drill-down says it too.
        self.assertTrue(page["detailOpen"])
        self.assertEqual(page["detailWaitKind"], "deferred")
        self.assertEqual(page["detailWait"], deferred["error"])
        self.assertTrue(page["detailSummary"].startswith("deferred (budget) · "))
        self.screenshot(driver, "held-detail")
        driver.execute_script("document.getElementById('job-detail-close').click();")
        self.screenshot(driver, "held-desktop")
        driver.execute_script("document.getElementById('jobs-section').scrollIntoView();")
        self.screenshot(driver, "held-desktop-jobs")
        emulateViewport(driver, PHONE[0], PHONE[1], True)
        time.sleep(0.5)
        phone = self.read(driver, time.monotonic() + 30)
        self.assertFalse(phone["scrollsSideways"])
        for name in (DEFERRED, SERVER, ADMIN):
            row = phone["rows"][name]
            self.assertTrue(row["shown"], name)
            self.assertIn("until", row["error"])
        self.screenshot(driver, "held-phone")
        driver.execute_script(
            "document.querySelector('#jobs-body tr[data-job=\"bob@example.org\"]').scrollIntoView();"
        )
        self.screenshot(driver, "held-phone-job")
        emulateViewport(driver, DESKTOP[0], DESKTOP[1], False)

    def test_doneWithFailures(self) -> None:
        """
        A job done with failed messages is "done, N failed" with a badge
        that is not the done one's green, whether the daemon says
        C{done_with_failures} (carol, mid-run) or, as before the state
        machine, C{done} with failed messages (alice, finished).  Before,
        a job with 3 failed messages showed a green "✓ done".
        """
        driver, page = self.browse()
        carol = page["rows"]["carol@example.org"]
        self.assertEqual((carol["state"], carol["badge"]), ("done_with_failures", "done, 24 failed"))
        done = page["rows"]["bob@example.org"]
        self.assertNotEqual(carol["badgeColour"], done["badgeColour"])
        self.assertIn("done ≈", page["overview"]) if page["etaValue"] else None
        finishedDriver, finished = self.browse("--finished")
        alice = finished["rows"]["alice@example.org"]
        self.assertEqual((alice["state"], alice["badge"]), ("done_with_failures", "done, 3 failed"))
        green = finished["rows"]["bob@example.org"]
        self.assertEqual(green["state"], "done")
        self.assertNotEqual(alice["badgeColour"], green["badgeColour"])

    def test_finishedPage(self) -> None:
        """
        After the run: no rate now and no "done ≈", but the run's average
        over its duration, and "finished" for the time left.  Before,
        "Rate now 19.7 msg/s" and "done ≈ <now>" stood beside "Finished".
        """
        driver, page = self.browse("--finished")
        self.assertEqual(
            (page["rateLabel"], page["rate"], page["rateValue"], page["byteRate"]),
            ("Average rate", "21.9 msg/s", "", "over 2 h 20 min"),
        )
        self.assertEqual((page["eta"], page["etaClock"]), ("finished", ""))
        self.assertNotIn("done ≈", page["overview"])
        self.screenshot(driver, "finished-desktop")
