# -*- test-case-name: tests.test_browser_fleet -*-
"""
The fleet on the dashboard in a real browser (Selenium and headless
Chromium, as L{tests.browser} drives them): the real L{StatusResource}
serves three jobs and a fake fleet of three daemons
(L{tests.test_status_fleet.FakeFleetView}) on a loopback port; the page
shows every daemon (host, version, last heartbeat, jobs, rate, lease) in
its Daemons section and the daemon holding each job in its row, at
desktop and phone sizes without scrolling sideways, and says so when the
fleet cannot be read.  Screenshots go to C{$IMAPMIG_SCREENSHOTS}
(L{tests.browser.screenshotDirectory}).

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser_fleet

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar

from twisted.internet import reactor as _reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IReactorCore, IReactorTCP, IReactorThreads, IReactorTime
from twisted.internet.task import Clock, deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.trial.unittest import TestCase

from imapmig.errors import QueueUnavailable
from imapmig.progress import JobState, MigrationProgress
from imapmig.queue.fleetview import Fleet, Holder, JobRow, JobsPage
from imapmig.state.memory import MemoryStateStore
from imapmig.status.resource import QuietSite, StatusResource, buildStatusSite
from tests.browser import (
    DESKTOP,
    PHONE,
    emulateViewport,
    requireBrowser,
    saveFullPage,
    screenshotDirectory,
    startBrowser,
)
from tests.test_status_fleet import DEAD, MIG1, MIG2, NOW, FakeFleetView

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

    class _Reactor(IReactorCore, IReactorTCP, IReactorThreads, IReactorTime):
        pass


_T = TypeVar("_T")

reactor: _Reactor = _reactor  # type: ignore[assignment]

STEP = 60.0
"""
The bound of each wait for the browser (generous: the test must pass
beside a CPU hog).
"""

READ = """
var rows = Array.prototype.map.call(document.querySelectorAll("#daemons-body tr"), function (tr) {
  function text(c) { return tr.querySelector("." + c).textContent; }
  return {id: tr.getAttribute("data-daemon"), name: text("daemon-name"), version: text("daemon-version"),
    heartbeat: text("daemon-heartbeat"), jobs: text("daemon-jobs"), rate: text("daemon-rate"),
    lease: text("daemon-lease"), dead: tr.classList.contains("is-dead")};
});
var jobs = {};
document.querySelectorAll("#jobs-body tr").forEach(function (tr) {
  var cell = tr.querySelector(".job-daemon");
  jobs[tr.getAttribute("data-job")] = {text: cell.textContent, id: cell.getAttribute("data-value"),
    state: tr.querySelector(".job-state").textContent};
});
var error = document.getElementById("daemons-error");
return {polls: window.imapmigDashboard.polls, daemons: rows, jobs: jobs,
  live: document.getElementById("daemons-live").textContent,
  error: error.hidden ? null : error.textContent,
  pageText: document.getElementById("jobs-page").textContent,
  scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth};
"""


class FleetDashboardTests(TestCase):
    """
    The Daemons section and the jobs' Daemon column, in Chromium.
    """

    timeout = 600

    def setUp(self) -> None:
        requireBrowser(self)

    def inThread(self, f: Callable[..., _T], *args: Any) -> Deferred[_T]:
        """
        Call C{f(*args)} (a blocking call to the browser) in the reactor's
        thread pool, so that the reactor serves the page meanwhile.
        """
        return deferToThreadPool(reactor, reactor.getThreadPool(), f, *args)

    async def serve(self, root: StatusResource) -> int:
        """
        Serve C{root} on a loopback port until the test ends; the port.
        """
        site = buildStatusSite(root, reactor)
        assert isinstance(site, QuietSite)
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
        self.addCleanup(self.closeSite, site, port)
        address = port.getHost()
        assert isinstance(address, IPv4Address)
        return address.port

    async def closeSite(self, site: QuietSite, port: Any) -> None:
        """
        Stop listening and wait (bounded) for the browser's connections
        to close.
        """
        stopped = port.stopListening()
        if stopped is not None:
            await stopped
        for _ in range(int(STEP * 10)):
            if site.openConnections == 0:
                return
            await deferLater(reactor, 0.1)

    def test_fleet(self) -> Deferred[None]:
        """
        L{fleet}.
        """
        return Deferred.fromCoroutine(self.fleet())

    async def fleet(self) -> None:
        """
        The Daemons section lists the three daemons, live ones first: each
        its host and the start of its id (the one serving the page marked),
        its version, the age of its last heartbeat, its jobs, its rate (a
        dash where it reports none) and its lease, the dead one marked; the
        count of live ones is in the heading.  Each job's row names its
        holder (a dash for none, the dead holder's lease said ended), and so
        does the job's panel.  On a
        phone nothing scrolls sideways.  When the fleet cannot be read, the
        section says so and this daemon's jobs are still shown.
        """
        clock = Clock()
        clock.advance(NOW)
        progress = MigrationProgress(clock.seconds)
        for name in ("alice", "bob", "carol"):
            progress.addJob(name)
        progress.job("alice").showState(lambda: JobState.RUNNING)
        view = FakeFleetView(
            Fleet((MIG1, MIG2, DEAD)),
            {"alice": Holder(MIG1.daemonId, "mig1"), "bob": Holder(DEAD.daemonId, "mig3", False)},
        )
        # The fleet's queue: this daemon's three jobs, and dave, which
        # another daemon holds.
        view.page = JobsPage(
            (
                JobRow(0, "alice", "claimed", None, Holder(MIG1.daemonId, "mig1")),
                JobRow(1, "bob", "claimed", None, Holder(DEAD.daemonId, "mig3", False)),
                JobRow(2, "carol", "queued", None, None),
                JobRow(3, "dave", "claimed", None, Holder(MIG2.daemonId, "mig2")),
            ),
            None,
        )
        view.counts = {"claimed": 3, "queued": 1}
        root = StatusResource(progress, clock.seconds, MemoryStateStore(), fleet=view)
        port = await self.serve(root)
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        driver: WebDriver = await self.inThread(startBrowser, self, directory)
        page = await self.inThread(self.look, driver, f"http://127.0.0.1:{port}/", 3, 4)
        self.assertEqual(
            [(d["id"], d["version"], d["heartbeat"], d["jobs"], d["rate"], d["lease"], d["dead"])
             for d in page["daemons"]],
            [
                (MIG1.daemonId, "v1.0", "2 s ago", "2", "31.2 msg/s", "live", False),
                (MIG2.daemonId, "v1.1", "3 s ago", "1", "–", "live", False),
                (DEAD.daemonId, "v1.0", "2 min 0 s ago", "1", "0.0 msg/s", "ended", True),
            ],
        )  # fmt: skip
        self.assertEqual(page["daemons"][0]["name"], "mig1 · 11111111 (pid 101) · this page")
        self.assertEqual(page["daemons"][1]["name"], "mig2 · 22222222 (pid 202)")
        self.assertEqual(page["live"], "2 live, 1 lease ended")
        self.assertEqual(
            {name: (job["text"], job["id"], job["state"]) for name, job in page["jobs"].items()},
            {
                "alice": ("mig1 · 11111111", MIG1.daemonId, "running"),
                "bob": ("mig3 · 33333333 (lease ended)", DEAD.daemonId, "queued"),
                "carol": ("–", "", "queued"),
                "dave": ("mig2 · 22222222", MIG2.daemonId, "running"),
            },
        )
        self.assertEqual(page["pageText"], "1-4 of 4")
        self.assertIsNone(page["error"])
        summary = await self.inThread(self.detail, driver, f"http://127.0.0.1:{port}/#job=bob")
        self.assertTrue(summary.endswith(" · on mig3 · 33333333 (lease ended)"), summary)
        shots = screenshotDirectory()
        await self.inThread(saveFullPage, driver, os.path.join(shots, "fleet-desktop.png"))
        await self.inThread(emulateViewport, driver, PHONE[0], PHONE[1], True)
        phone = await self.inThread(self.look, driver, f"http://127.0.0.1:{port}/", 3, 4)
        self.assertLessEqual(phone["scrollWidth"], phone["width"], phone)
        await self.inThread(saveFullPage, driver, os.path.join(shots, "fleet-phone.png"))
        await self.inThread(emulateViewport, driver, DESKTOP[0], DESKTOP[1], False)
        view.failure = QueueUnavailable("postgresql://db1/mig: connection refused")
        down = await self.inThread(self.look, driver, f"http://127.0.0.1:{port}/", 0)
        self.assertEqual(
            down["error"], "The fleet could not be read: postgresql://db1/mig: connection refused"
        )
        self.assertEqual(sorted(down["jobs"]), ["alice", "bob", "carol"])

    def detail(self, driver: WebDriver, url: str) -> str:
        """
        Open the job panel at C{url} (C{#job=NAME}) afresh; its summary
        line once it names a daemon.
        """
        from selenium.webdriver.support.wait import WebDriverWait

        driver.get("about:blank")
        driver.get(url)

        def summary(driver: WebDriver) -> str | Literal[False]:
            text: str = driver.execute_script(
                'return document.getElementById("job-detail-summary").textContent;'
            )
            return text if " · on " in text else False

        shown: str = WebDriverWait(driver, STEP, poll_frequency=0.05).until(summary)
        return shown

    def look(self, driver: WebDriver, url: str, daemons: int, jobs: int = 3) -> dict[str, Any]:
        """
        Load the page afresh and read it once it rendered a snapshot with
        C{daemons} rows (none: with the fleet's error) and C{jobs} jobs.
        """
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.wait import WebDriverWait

        driver.get(url)
        last: list[dict[str, Any]] = []

        def rendered(driver: WebDriver) -> dict[str, Any] | Literal[False]:
            page: dict[str, Any] = driver.execute_script(READ)
            last[:] = [page]
            ready = page["polls"] >= 1 and len(page["jobs"]) == jobs
            if daemons:
                ready = ready and len(page["daemons"]) == daemons
            else:
                ready = ready and page["error"] is not None
            return page if ready else False

        try:
            result: dict[str, Any] = WebDriverWait(driver, STEP, poll_frequency=0.05).until(
                rendered
            )
            return result
        except TimeoutException:
            raise self.failureException(f"the page did not render the fleet: {last}")
