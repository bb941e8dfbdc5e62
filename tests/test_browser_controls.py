# -*- test-case-name: tests.test_browser_controls -*-
"""
The dashboard's order and controls in a real browser (headless Chromium
driven by Selenium, as L{tests.test_browser}), over the real daemon
migrating into a private Dovecot: what needs attention comes first and
the order chosen outlasts a reload; the jobs a filter selects are paused
and resumed in bulk after a confirmation of their count, logged once;
the throughput chart spans the run and peaks where its steps do; and a
daemon without C{status.token_file} shows no control, only how to enable
them.

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser_controls

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.dovecot import DovecotInstance, requireDovecot
from tests.browser import readPage, requireBrowser, startBrowser, waitPage
from tests.liverun import DaemonRun, LiveMigration, StatusClient, pollUntil, writeLiveMigration
from tests.support import (
    deliveries,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
)

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

_T = TypeVar("_T")

JOBS = (("alice", 20), ("bob", 160), ("carol", 20), ("dave", 160), ("mallory", 10))
"""
The jobs (name, messages), at L{RATE} messages a second each: C{alice}
and C{carol} end within seconds, C{bob} and C{dave} run for about 40 s,
long enough to pause C{dave} in bulk (the one job running whose name
holds "a"); C{mallory}'s password is wrong, so it fails at once.
"""

FAILING = "mallory"

RATE = 4

STEP = 60.0
"""
The bound of each wait for something the daemon or the page does within a
poll or two (generous: the test must pass beside a CPU hog).
"""

FINISH = 240.0


class BrowserTestCase(SynchronousTestCase):
    """
    A daemon over a private Dovecot and Chromium, and waits on both.
    """

    def startRun(self, jobs: tuple[tuple[str, int], ...], token: bool) -> None:
        """
        Write the migration of C{jobs} (the password of L{FAILING} wrong),
        with a control token or without one, start the daemon and open
        its page.
        """
        requireDovecot(self)
        requireBrowser(self)
        self.instance: DovecotInstance = sharedDovecot()
        directory = newDirectory(self)
        self.migration: LiveMigration = writeLiveMigration(
            directory,
            self.instance,
            [(name, freshUser(self.instance), count) for name, count in jobs],
            messagesPerSecond=RATE,
            token=secrets.token_urlsafe(24),
        )
        for index, (name, _) in enumerate(jobs):
            if name == FAILING:
                with open(os.path.join(directory, f"password-{index}"), "w") as f:
                    f.write("not-the-password\n")
        if not token:
            with open(self.migration.configPath) as f:
                document = yaml.safe_load(f)
            del document["status"]["token_file"]
            with open(self.migration.configPath, "w") as f:
                yaml.safe_dump(document, f, sort_keys=False)
        self.driver: WebDriver = startBrowser(self, directory)
        self.logPath = os.path.join(directory, "daemon.log")
        self.daemon = DaemonRun(self.migration.configPath, self.logPath)
        self.addCleanup(self.daemon.kill)
        port = pollUntil(
            "the daemon's status listener", self.daemon.statusPort, STEP, detail=self.daemon.tail
        )
        self.client = StatusClient(port)
        self.driver.get(f"http://127.0.0.1:{port}/")

    def waitPage(self, what: str, condition: Callable[[WebDriver], _T | None]) -> _T:
        """
        Wait until C{condition(driver)} is true, at most L{STEP} seconds.
        """
        return waitPage(self, self.driver, what, condition, STEP, lambda: self.daemon.tail(20))

    def rows(self) -> list[str]:
        """
        The job names of the table's rows, in order.
        """
        names: list[str] = self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#jobs-body tr[data-job]'),"
            " r => r.getAttribute('data-job'));"
        )
        return names

    def shown(self, selector: str) -> list[Any]:
        """
        The elements C{selector} selects that are displayed.
        """
        from selenium.webdriver.common.by import By

        return [e for e in self.driver.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()]

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


class ControlsBrowserTests(BrowserTestCase):
    """
    Order, bulk controls and the chart, over a live migration with a
    control token.
    """

    def test_attentionBulkAndChart(self) -> None:
        """
        (1) The failed job is the first row by default; (2) another order
        chosen outlasts a reload; (3) the jobs whose name holds "a" are
        paused in bulk once the count is confirmed (one log line), and
        resumed; (4) the run ends with every message in Dovecot exactly
        once, and the chart spans the run, its peak that of its steps; (5)
        the verify result shows, its path wrapping at its slashes.
        """
        self.startRun(JOBS, token=True)
        self.checkAttentionFirst()
        self.checkSortKept()
        self.checkBulk()
        self.checkChartAfterTheRun()
        self.checkVerify()

    def checkAttentionFirst(self) -> None:
        """
        By default the table is sorted attention first: once C{mallory}
        failed, it is the first row, though configured last.
        """
        from selenium.webdriver.support.ui import Select

        select = Select(self.driver.find_element("id", "jobs-sort"))
        self.assertEqual(select.first_selected_option.get_attribute("value"), "attention")
        self.waitPage(
            f"{FAILING} (failed) to be the first row",
            lambda d: (rows := self.rows()) and rows[0] == FAILING and len(rows) == len(JOBS),
        )
        self.assertEqual(self.client.job(FAILING)["state"], "failed")

    def checkSortKept(self) -> None:
        """
        Sorting by name (Z to A) puts the rows in that order, and a reload
        keeps it; then back to attention first.
        """
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element("id", "jobs-sort")).select_by_value("-name")
        byName = sorted((name for name, _ in JOBS), reverse=True)
        self.waitPage("the rows sorted Z to A", lambda d: self.rows() == byName)
        self.driver.refresh()
        self.waitPage("the rows sorted Z to A after a reload", lambda d: self.rows() == byName)
        select = Select(self.driver.find_element("id", "jobs-sort"))
        self.assertEqual(select.first_selected_option.get_attribute("value"), "-name")
        select.select_by_value("attention")
        self.waitPage("attention first again", lambda d: self.rows()[:1] == [FAILING])

    def checkBulk(self) -> None:
        """
        With the token saved and "a" typed as the name filter, the bulk
        Pause asks to confirm how many jobs it pauses; accepted, those
        jobs (the ones not ended: dave at least) are paused, the others
        untouched, and the log has one line for them; bulk Resume brings
        them back.
        """
        from selenium.webdriver.common.by import By

        for name in ("alice", "carol"):
            pollUntil(f"{name} to be done", lambda: self.client.job(name)["state"] == "done", STEP)
        token = self.driver.find_element(By.ID, "token")
        token.send_keys(self.migration.token)
        self.click("#token-save")
        search = self.driver.find_element(By.ID, "jobs-filter-q")
        search.send_keys("a")
        selected = sorted(name for name, _ in JOBS if "a" in name)
        self.waitPage("the filter's rows", lambda d: sorted(self.rows()) == selected)
        question = self.bulk("pause")
        self.assertEqual(question, "Pause 1 job (of the 4 jobs whose name contains “a”)?")
        paused = sorted(job["name"] for job in self.client.status()["jobs"] if job["paused"])
        self.assertEqual(paused, ["dave"])
        with open(self.logPath, encoding="utf-8") as f:
            lines = [line for line in f if "Control pause" in line]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("of the jobs whose name holds a: 1 job paused of 1 selected", lines[0])
        self.bulk("resume")
        pollUntil("dave to run again", lambda: not self.client.job("dave")["paused"], STEP)
        search.clear()

    def bulk(self, action: str) -> str:
        """
        Click the bulk C{action}, accept its confirmation and wait for
        C{#control-status} to say it was done.

        @return: the confirmation's question.
        """
        from selenium.common.exceptions import NoAlertPresentException
        from selenium.webdriver.common.by import By

        self.driver.execute_script(
            "document.getElementById('control-status').removeAttribute('data-outcome');"
        )
        self.click(f'button[data-bulk="{action}"]')

        def alert(driver: WebDriver) -> Any:
            try:
                return driver.switch_to.alert
            except NoAlertPresentException:
                return None

        confirmation = self.waitPage(f"the confirmation of bulk {action}", alert)
        question: str = confirmation.text
        confirmation.accept()

        def outcome(driver: WebDriver) -> tuple[str, str] | None:
            status = driver.find_element(By.ID, "control-status")
            value = status.get_attribute("data-outcome")
            return (value, status.text) if value in ("ok", "refused", "error") else None

        result, text = self.waitPage(f"the outcome of bulk {action}", outcome)
        self.assertEqual(result, "ok", text)
        return question

    def checkChartAfterTheRun(self) -> None:
        """
        Every job but the failing one ends done with its messages in
        Dovecot exactly once; the chart then spans the run, from its start
        to its end, and its peak is the highest step of the run in the
        C{/status.json} the page shows.
        """

        def ended() -> dict[str, Any] | None:
            document = self.client.status()
            return document if document["run"]["finished_at"] is not None else None

        final = pollUntil("the run to end", ended, FINISH, detail=self.daemon.tail)
        states = {job["name"]: job["state"] for job in final["jobs"]}
        self.assertEqual(states, {name: "failed" if name == FAILING else "done" for name, _ in JOBS})
        for job in self.migration.jobs:
            if job.name != FAILING:
                held = deliveries(self.instance.fetchAll(job.user.name), job.corpus.messages)
                self.assertTrue(held.exactlyOnce, f"job {job.name}: {held.summary()}")

        def chart(driver: WebDriver) -> tuple[dict[str, Any], dict[str, str]] | None:
            document = readPage(driver).received()
            if document is None or document["run"]["finished_at"] is None:
                return None
            attributes: dict[str, str] = driver.execute_script(
                "const c = document.getElementById('throughput');"
                " return {start: c.getAttribute('data-start'), end: c.getAttribute('data-end'),"
                " peak: c.getAttribute('data-peak')};"
            )
            return document, attributes

        document, attributes = self.waitPage("the chart of the finished run", chart)
        run = document["run"]
        self.assertEqual(float(attributes["start"]), run["started_at"])
        self.assertEqual(float(attributes["end"]), run["finished_at"])
        steps = [s[1] for s in document["throughput"]["samples"] if s[0] <= run["finished_at"]]
        self.assertEqual(float(attributes["peak"]), max(steps))

    def checkVerify(self) -> None:
        """
        After C{imapmig verify}, the page shows its result, the job it
        could not verify (C{mallory}'s login is refused) counted, and the
        report's path in parts that each end at a C{/}, so that it wraps
        there and never inside a name.
        """
        verify = subprocess.run(
            [sys.executable, "-c", "from imapmig.commands.cli import main; raise SystemExit(main())",
             "verify", "--config", self.migration.configPath],
            env=sourceTreeEnvironment(), capture_output=True, text=True, timeout=FINISH,
        )  # fmt: skip
        self.assertEqual(verify.returncode, 1, verify.stdout + verify.stderr)
        report = self.client.status()["run"]["verify"]
        self.assertEqual((report["jobs"], report["differences"], report["unverified"]), (5, 0, 1))

        def shown(driver: WebDriver) -> str | None:
            text: str = driver.find_element("id", "verify-result").text
            return text if "not verified" in text else None

        text = self.waitPage("the verify result on the page", shown)
        self.assertIn("5 jobs, 0 differences, 1 not verified", text)
        parts: list[str] = self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#verify-result .path .part'),"
            " p => p.textContent);"
        )
        # The path is shown where status.json gives it.
        self.assertEqual("".join(parts), report.get("path") or "")
        self.assertTrue(all(part.endswith("/") for part in parts[:-1]), parts)
        self.assertNotIn("/", parts[-1] if parts else "")
        self.assertEqual(self.daemon.stop(), 0, self.daemon.tail())


class ReadOnlyBrowserTests(BrowserTestCase):
    """
    A daemon without C{status.token_file}: the page shows no control.
    """

    def test_noControlsWithoutToken(self) -> None:
        """
        Without a token the daemon refuses every control, so the page
        shows none (no token field, no Pause all, no bulk or row buttons,
        no Actions column), only one line saying how to enable them.
        """
        from selenium.webdriver.common.by import By

        self.startRun((("alice", 40), (FAILING, 10)), token=False)
        off = self.waitPage(
            "#controls-off to be shown",
            lambda d: (shown := self.shown("#controls-off")) and shown[0],
        )
        self.assertIn("status.token_file", off.text)
        self.waitPage("the rows", lambda d: len(self.rows()) == 2)
        for selector in (
            "#token-form", "#pause-all", "#resume-all", "#bulk", "button[data-bulk]",
            "button[data-action]", "#jobs thead th.needs-token", "td.job-actions",
        ):  # fmt: skip
            self.assertEqual(self.shown(selector), [], f"{selector} is shown without a token")
        body = self.driver.find_element(By.TAG_NAME, "body")
        self.assertEqual(body.get_attribute("data-controls"), "off")
        self.assertEqual(self.client.status()["controls"], {"enabled": False})
        self.assertEqual(self.daemon.stop(), 0, self.daemon.tail())
