# -*- test-case-name: tests.test_browser_onerun -*-
"""
Issue 28's page on ONE real run, in a real browser (headless Chromium
driven by Selenium, as L{tests.test_browser}): the daemon migrating three
Maildirs into a private Dovecot, each through a server entry of its own
(the same Dovecot), goes through every job paused by I{Pause all}, then
resumed; a job deferred by its account's daily upload budget, with its
resume time (the next 00:00 UTC) in its row and its drill-down; a job
whose two largest messages exceed the destination's C{max_message_size},
ending "done, 2 failed", not green; that job's I{Retry failed}, after
which its drill-down's timeline shows done_with_failures -> queued (the
retry, by whom) -> ... -> done_with_failures; and, once the deferred job
is cancelled and the last one done, the finished page without a rate now
or a "done ≈".  L{tests.test_browser_waits} checks the same views on
fixture JSON; this is the proof that the daemon's own run shows them.

Screenshots of each view go to C{$IMAPMIG_SCREENSHOTS} (default
C{_trial_temp/screenshots/}): C{onerun-paused.png},
C{onerun-deferred.png}, C{onerun-retried.png}, C{onerun-finished.png};
C{docs/screenshots.py} copies them into C{docs/}.

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser_onerun

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import calendar
import os
import secrets
import time
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any, Callable, TypeVar
from urllib.parse import quote

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.dovecot import requireDovecot
from tests.browser import (
    readPage,
    requireBrowser,
    saveFullPage,
    saveScreenshot,
    screenshotDirectory,
    startBrowser,
    waitPage,
)
from tests.liverun import DaemonRun, StatusClient, pollUntil, writeLiveMigration
from tests.support import freshUser, newDirectory, sharedDovecot
from tests.test_browser_timeline import READ_TIMELINE
from tests.test_browser_waits import READ

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

_T = TypeVar("_T")

PLAIN = "alice"
BUDGET = "bob"
LARGE = "carol"

JOBS = ((PLAIN, 90), (BUDGET, 80), (LARGE, 60))
"""
The jobs (name, messages of about 2 KB each).  At L{RATE} (and
L{BUDGET_RATE} for C{bob}) none can end, nor C{bob} use up its budget,
within 20 s of the start, so I{Pause all} finds every job before its end.
"""

RATE = 3
BUDGET_RATE = 2
DAILY_UPLOAD = "40KB"
"""
C{bob}'s account's budget: about 20 of its 80 messages.
"""

MAX_MESSAGE_SIZE = "100KB"
LARGE_MESSAGES = 2
LARGE_SIZE = 200_000

STEP = 90.0
"""
The bound of each wait for what the daemon or the page does within a poll
or two (generous: the test must pass beside a CPU hog).
"""

RUN = 300.0
"""
The bound of a wait for the migration itself (messages at L{RATE}).
"""


def writeLargeMessages(maildir: str) -> None:
    """
    Put L{LARGE_MESSAGES} messages of about L{LARGE_SIZE} octets into the
    Maildir's INBOX: over L{MAX_MESSAGE_SIZE}, recorded as failed unsent.
    """
    for n in range(LARGE_MESSAGES):
        message = EmailMessage()
        message["From"] = "Scanner <scanner@example.org>"
        message["To"] = "carol@example.org"
        message["Subject"] = f"Scanned contract, part {n + 1}"
        message["Date"] = "Tue, 03 Mar 2026 09:1%d:00 +0000" % n
        message["Message-ID"] = f"<large-{n}@example.org>"
        message.set_content("The scanned pages are attached.\n")
        message.add_attachment(
            os.urandom(LARGE_SIZE * 3 // 4), maintype="application", subtype="pdf",
            filename=f"contract-{n + 1}.pdf",
        )  # fmt: skip
        with open(os.path.join(maildir, "cur", f"1772529{n:03d}.M{n}P1.onerun:2,S"), "wb") as f:
            f.write(bytes(message))


def nextMidnight(now: float) -> str:
    """
    The next 00:00 UTC after C{now}, as the page writes it
    (C{YYYY-MM-DD 00:00 UTC}).
    """
    day = time.gmtime(now)
    midnight = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0)) + 86400
    return time.strftime("%Y-%m-%d 00:00 UTC", time.gmtime(midnight))


class OneRunBrowserTests(SynchronousTestCase):
    """
    Every view of issue 28 over one live run of the daemon.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        requireBrowser(self)
        instance = sharedDovecot()
        self.directory = newDirectory(self)
        self.migration = writeLiveMigration(
            self.directory,
            instance,
            [(name, freshUser(instance), count) for name, count in JOBS],
            messagesPerSecond=RATE,
            token=secrets.token_urlsafe(24),
        )
        with open(self.migration.configPath) as f:
            document = yaml.safe_load(f)
        servers = document["servers"]
        plain = servers["dovecot"]
        # Budgets and limits belong to a server as named: one entry each.
        servers["budgeted"] = {
            **plain,
            "per_account": {"messages_per_second": BUDGET_RATE, "daily_upload": DAILY_UPLOAD},
        }
        servers["small"] = {**plain, "max_message_size": MAX_MESSAGE_SIZE}
        for job in document["jobs"]:
            if job["name"] == BUDGET:
                job["destination"]["server"] = "budgeted"
            if job["name"] == LARGE:
                job["destination"]["server"] = "small"
                writeLargeMessages(job["source"]["maildir"])
        with open(self.migration.configPath, "w") as f:
            yaml.safe_dump(document, f, sort_keys=False)
        self.driver: WebDriver = startBrowser(self, self.directory)
        self.driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})

    def waitPage(self, what: str, condition: Callable[[WebDriver], _T | None]) -> _T:
        """
        Wait until C{condition(driver)} is true, at most L{STEP} seconds.
        """
        return waitPage(
            self, self.driver, what, condition, STEP,
            lambda: f"The page read {self.driver.execute_script(READ)!r}; the daemon's log"
            " ends:\n" + self.daemon.tail(25),
        )  # fmt: skip

    def waitJson(self, what: str, condition: Callable[[dict[str, Any]], bool], timeout: float = STEP) -> dict[str, Any]:
        """
        Wait until C{condition} holds of C{/status.json}; that document.
        """
        document: dict[str, Any] = pollUntil(
            what,
            lambda: (lambda d: d if condition(d) else None)(self.client.status()),
            timeout,
            interval=0.5,
            detail=lambda: f"{self.states()}; the daemon's log ends:\n{self.daemon.tail(25)}",
        )
        return document

    def states(self) -> dict[str, str]:
        """
        Each job's state in C{/status.json}.
        """
        return {job["name"]: job["state"] for job in self.client.status()["jobs"]}

    def click(self, selector: str) -> None:
        """
        Click what C{selector} selects, trying again while the page
        re-renders it.
        """
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By

        def clicked(driver: WebDriver) -> bool:
            try:
                driver.find_element(By.CSS_SELECTOR, selector).click()
            except WebDriverException:
                return False
            return True

        self.waitPage(f"{selector} to be clickable", clicked)

    def control(self, selector: str, confirm: bool = False) -> str:
        """
        Click the control C{selector} (accepting its confirmation if
        C{confirm}), and wait for C{#control-status} to say it was done.

        @return: what C{#control-status} says.
        """
        from selenium.webdriver.common.by import By

        self.driver.execute_script(
            "document.getElementById('control-status').removeAttribute('data-outcome');"
        )
        self.click(selector)
        if confirm:
            self.waitPage("the confirmation", lambda d: self.alert())
            self.driver.switch_to.alert.accept()

        def outcome(driver: WebDriver) -> tuple[str, str] | None:
            status = driver.find_element(By.ID, "control-status")
            value = status.get_attribute("data-outcome")
            return (value, status.text) if value in ("ok", "refused", "error") else None

        result, text = self.waitPage(f"the outcome of {selector}", outcome)
        self.assertEqual(result, "ok", text)
        return text

    def alert(self) -> bool:
        """
        Whether the page shows a confirmation.
        """
        from selenium.common.exceptions import NoAlertPresentException

        try:
            self.driver.switch_to.alert
        except NoAlertPresentException:
            return False
        return True

    def page(self, condition: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """
        The page (L{READ}) once C{condition} holds of it.
        """
        return self.waitPage(
            what, lambda d: (lambda page: page if condition(page) else None)(d.execute_script(READ))
        )

    def rowRates(self) -> dict[str, str]:
        """
        What each job's row shows for its rate.
        """
        rates: dict[str, str] = self.driver.execute_script(
            "var rates = {}; document.querySelectorAll('#jobs-body tr[data-job]').forEach("
            "function (tr) { rates[tr.getAttribute('data-job')] = tr.querySelector('.job-rate')"
            ".textContent; }); return rates;"
        )
        return rates

    def open(self, job: str | None) -> None:
        """
        Open job C{job}'s drill-down (or close it, with L{None}).
        """
        fragment = "" if job is None else f"#job={quote(job, safe='')}"
        self.driver.get(f"{self.base}{fragment}")
        if job is None:
            self.page(lambda p: not p["detailOpen"] and p["polls"] >= 1, "the panel closed")

    def shoot(self, name: str, whole: bool = False) -> None:
        """
        Save the viewport (the C{whole} page, from its top) as C{NAME.png}
        in the screenshot directory.
        """
        path = os.path.join(screenshotDirectory(), name + ".png")
        if whole:
            self.driver.execute_script("window.scrollTo(0, 0);")
            saveFullPage(self.driver, path)
        else:
            saveScreenshot(self.driver, path)

    def test_oneRun(self) -> None:
        """
        On one run of the daemon: (1) I{Pause all} leaves every job paused
        and the page says so instead of a time left, without a clock; (2)
        after I{Resume all}, C{bob}'s used-up budget defers it until the
        next 00:00 UTC, said in its row and its drill-down; (3) C{carol}
        ends "done, 2 failed", not green; (4) its I{Retry failed} shows in
        its timeline, with who asked; (5) with C{bob} cancelled and
        C{alice} done, the finished page has no rate now and no "done ≈".
        """
        self.daemon = DaemonRun(self.migration.configPath, os.path.join(self.directory, "daemon.log"))
        self.addCleanup(self.daemon.kill)
        port = pollUntil(
            "the daemon's status listener", self.daemon.statusPort, STEP, detail=self.daemon.tail
        )
        self.client = StatusClient(port)
        self.base = f"http://127.0.0.1:{port}/"
        self.driver.get(self.base)
        self.page(lambda p: p["polls"] >= 1 and len(p["rows"]) == len(JOBS), "the rows")
        self.driver.find_element("id", "token").send_keys(self.migration.token)
        self.click("#token-save")
        self.checkEveryJobPaused()
        self.checkBudgetWait()
        self.checkDoneWithFailures()
        self.checkRetriedTimeline()
        self.checkFinished()
        self.assertEqual(self.daemon.stop(), 0, self.daemon.tail())

    def checkEveryJobPaused(self) -> None:
        """
        I{Pause all}: every job paused (none had ended); the JSON's time
        left is null, and the page's I{Time left} says "paused", until
        resumed, without a "done ≈"; each row says "until resumed".
        """
        self.control("#pause-all")
        names = {name for name, _ in JOBS}
        document = self.waitJson(
            "every job paused", lambda d: {j["state"] for j in d["jobs"]} == {"paused"}
        )
        self.assertEqual({job["name"] for job in document["jobs"]}, names)
        self.assertIsNone(document["totals"]["eta_seconds"])
        # A paused job's own rate now is 0 too (its row said "7.3 msg/s").
        self.assertEqual({(j["messages_per_second"], j["eta_seconds"]) for j in document["jobs"]}, {(0.0, None)})
        page = self.page(
            lambda p: {r["state"] for r in p["rows"].values()} == {"paused"} and p["etaValue"] == "",
            "every row paused and no time left",
        )
        self.assertEqual((page["eta"], page["etaClock"]), ("paused", "until resumed"))
        self.assertNotIn("done ≈", page["overview"])
        self.assertEqual(page["rate"], "0.0 msg/s")
        self.assertEqual(self.rowRates(), {name: "0.0 msg/s" for name in names})
        for name, row in page["rows"].items():
            self.assertEqual(
                (row["badge"], row["eta"]), ("paused by admin", "until resumed"), name
            )
            self.assertIn("paused by the admin", row["error"], name)
        self.shoot("onerun-paused", whole=True)
        self.control("#resume-all")

    def checkBudgetWait(self) -> None:
        """
        C{bob} uses up its account's daily upload budget: deferred until
        the next 00:00 UTC, in its row (the wait, and "until 00:00 UTC" for
        its time left) and in its drill-down, with a null time left.
        """
        document = self.waitJson(
            f"{BUDGET} deferred by its budget",
            lambda d: any(j["name"] == BUDGET and j["state"] == "deferred" for j in d["jobs"]),
            RUN,
        )
        job = next(j for j in document["jobs"] if j["name"] == BUDGET)
        self.assertEqual(job["wait"]["kind"], "deferred")
        self.assertIsNone(job["eta_seconds"])
        until = nextMidnight(job["wait"]["since"])
        self.open(BUDGET)
        page = self.page(
            lambda p: p["rows"][BUDGET]["state"] == "deferred" and bool(p["detailWait"]),
            f"{BUDGET}'s row and panel deferred",
        )
        row = page["rows"][BUDGET]
        self.assertEqual((row["badge"], row["eta"]), ("deferred (budget)", "until 00:00 UTC"))
        self.assertTrue(row["error"].startswith("deferred: "), row["error"])
        self.assertIn("daily upload budget", row["error"])
        self.assertTrue(row["error"].endswith(f"(until {until})"), row["error"])
        self.assertEqual((page["detailWaitKind"], page["detailWait"]), ("deferred", row["error"]))
        self.assertTrue(page["detailSummary"].startswith("deferred (budget) · "), page["detailSummary"])
        self.shoot("onerun-deferred")
        self.open(None)

    def checkDoneWithFailures(self) -> None:
        """
        C{carol} ends C{done_with_failures} with its two large messages
        failed; its row says "done, 2 failed" in a badge of its own.
        """
        document = self.waitJson(
            f"{LARGE} ended",
            lambda d: any(j["name"] == LARGE and j["state"] in ("done", "done_with_failures", "failed")
                          for j in d["jobs"]),
            RUN,
        )  # fmt: skip
        job = next(j for j in document["jobs"] if j["name"] == LARGE)
        self.assertEqual((job["state"], job["messages_failed"]), ("done_with_failures", LARGE_MESSAGES))
        page = self.page(
            lambda p: p["rows"][LARGE]["state"] == "done_with_failures", f"{LARGE}'s row ended"
        )
        self.assertEqual(page["rows"][LARGE]["badge"], f"done, {LARGE_MESSAGES} failed")
        self.largeColour = page["rows"][LARGE]["badgeColour"]

    def checkRetriedTimeline(self) -> None:
        """
        I{Retry failed} in C{carol}'s row: its timeline (C{/jobs/carol.json}
        and the drill-down) goes done_with_failures -> queued for the
        retry, by the page's address, then runs and ends
        done_with_failures again (the messages are still too large).
        """
        self.control(f'tr[data-job="{LARGE}"] button[data-action="retry-failed"]')

        def retried() -> list[dict[str, Any]] | None:
            reply = self.client.request("GET", f"/jobs/{quote(LARGE, safe='')}.json")
            timeline: list[dict[str, Any]] = reply.json()["timeline"]
            steps = [(t["from"], t["to"]) for t in timeline]
            if ("done_with_failures", "queued") not in steps:
                return None
            after = steps[steps.index(("done_with_failures", "queued")) :]
            return timeline if after[-1][1] == "done_with_failures" and len(after) > 1 else None

        timeline = pollUntil(
            f"{LARGE}'s retry to end", retried, RUN, interval=0.5, detail=self.daemon.tail
        )
        index = [(t["from"], t["to"]) for t in timeline].index(("done_with_failures", "queued"))
        retry = timeline[index]
        self.assertIn("retry", retry["cause"])
        self.assertEqual(retry["by"], "127.0.0.1")
        self.assertEqual(timeline[index - 1]["to"], "done_with_failures")
        self.assertEqual(
            [t["from"] for t in timeline[index + 1 :]], [t["to"] for t in timeline[index:-1]]
        )
        # The table and the totals have the retry's end too (2 failed again).
        self.waitPage(
            f"{LARGE}'s row and the totals after the retry",
            lambda d: (reading := readPage(d)).jobs.get(LARGE, {}).get("job-state")
            == "done_with_failures"
            and reading.overall["overall-failed"] == str(LARGE_MESSAGES),
        )
        self.open(LARGE)
        # The panel's timeline first (compact beyond 10 changes), then all.
        self.waitPage(
            "the panel's timeline",
            lambda d: [row for row in d.execute_script(READ_TIMELINE) if row["time"]] or None,
        )
        shown = self.driver.find_elements("id", "job-timeline-all")
        if shown and shown[0].is_displayed():
            shown[0].click()
        rows: list[dict[str, Any]] = self.waitPage(
            "the whole timeline",
            lambda d: (lambda rows: rows if len(rows) == len(timeline) else None)(
                [row for row in d.execute_script(READ_TIMELINE) if row["time"]]
            ),
        )
        self.assertEqual(
            [(row["from"], row["to"], row["cause"], row["by"]) for row in rows],
            [(t["from"], t["to"], t["cause"], t["by"] or "–") for t in timeline],
        )
        self.driver.execute_script(
            "document.querySelector('#job-timeline tbody tr[data-from=\"done_with_failures\"]')"
            ".scrollIntoView({block: 'center'});"
        )
        self.shoot("onerun-retried")
        self.open(None)

    def checkFinished(self) -> None:
        """
        C{alice} done and C{bob} cancelled by the admin: the run is over;
        the JSON has no rate and no time left, and the page reads
        I{Average rate} and I{finished}, with no "done ≈"; C{carol}'s badge
        is not C{alice}'s green.
        """
        self.waitJson(
            f"{PLAIN} done", lambda d: any(j["name"] == PLAIN and j["state"] == "done" for j in d["jobs"]), RUN
        )
        self.control(f'tr[data-job="{BUDGET}"] button[data-action="cancel"]', confirm=True)
        document = self.waitJson("the run to end", lambda d: d["run"]["finished_at"] is not None)
        self.assertEqual(
            self.states(), {PLAIN: "done", BUDGET: "cancelled", LARGE: "done_with_failures"}
        )
        self.assertIsNone(document["totals"]["eta_seconds"])
        self.assertEqual(
            (document["totals"]["messages_per_second"], document["totals"]["bytes_per_second"]),
            (None, None),
        )
        # Nor has any ended job a current rate or a time left (its row
        # said "2.1 msg/s" and "0 s", "done ≈ <now>" in its tooltip).
        self.assertEqual(
            {(j["messages_per_second"], j["eta_seconds"]) for j in document["jobs"]}, {(None, None)}
        )
        page = self.page(lambda p: p["eta"] == "finished", "the finished page")
        self.assertEqual((page["rateLabel"], page["rateValue"], page["etaClock"]), ("Average rate", "", ""))
        self.assertNotIn("done ≈", page["overview"])
        self.assertNotEqual(page["rows"][PLAIN]["badgeColour"], page["rows"][LARGE]["badgeColour"])
        self.assertEqual(page["rows"][LARGE]["badgeColour"], self.largeColour)
        self.assertEqual(
            {name: row["eta"] for name, row in page["rows"].items()},
            {PLAIN: "done", BUDGET: "–", LARGE: "–"},
        )
        self.assertEqual(self.rowRates(), {PLAIN: "–", BUDGET: "–", LARGE: "–"})
        self.shoot("onerun-finished", whole=True)
