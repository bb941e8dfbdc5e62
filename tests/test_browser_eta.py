# -*- test-case-name: tests.test_browser_eta -*-
"""
The overall time left as the dashboard shows it, in a real browser
(Selenium and headless Chromium, as L{tests.browser} drives them), over a
run on a simulated clock (L{tests.simulatedrun}) whose largest job starts
last: the real L{StatusResource} serves the real L{MigrationProgress} on a
loopback port, the test advances the L{Clock} and reloads the page between
samples, and what the page shows for the time left (and its "done ≈"
clock) is compared with the time really left.

The server's state changes only when the test advances the clock (in the
reactor's thread, between the browser's calls, which run in a thread of
their own), so nothing depends on how fast the browser polls.

Run it alone with::

    CI=true .venv/bin/python -m twisted.trial tests.test_browser_eta

Without Chromium, chromedriver or Selenium it is skipped, except under
C{CI=true}, where it fails.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar

from attrs import frozen
from twisted.internet import reactor as _reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import (
    IListeningPort,
    IReactorCore,
    IReactorTCP,
    IReactorThreads,
    IReactorTime,
)
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.trial.unittest import TestCase

from imapmig.state.memory import MemoryStateStore
from imapmig.status.resource import QuietSite, StatusResource, buildStatusSite
from tests.browser import requireBrowser, startBrowser
from tests.simulatedrun import SimulatedRun

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

EVERY = 50
"""
Simulated seconds between two looks at the page.
"""

SIZES = [600] * 19 + [6000]
"""
The run of L{tests.test_progress_eta.TimeLeftTests.test_largestJobLast}:
20 jobs, the last ten times the size of the others.
"""

READ = """
var eta = document.getElementById("overall-eta");
var percent = document.getElementById("overall-percent");
return {
  polls: window.imapmigDashboard ? window.imapmigDashboard.polls : 0,
  time: document.getElementById("updated").getAttribute("data-time"),
  percent: percent.getAttribute("data-value"),
  eta: eta.textContent, etaValue: eta.getAttribute("data-value"),
  etaClock: document.getElementById("overall-eta-clock").textContent
};
"""


def shownSeconds(text: str) -> float:
    """
    The seconds a duration shows as the page writes it ("1 d 2 h",
    "1 h 5 min", "12 min 3 s", "40 s").

    @raise ValueError: it is not such a duration.
    """
    units = {"d": 86400, "h": 3600, "min": 60, "s": 1}
    parts = re.fullmatch(r"(\d+) (d|h|min|s)(?: (\d+) (h|min|s))?", text.strip())
    if parts is None:
        raise ValueError(f"not a duration: {text!r}")
    total = float(parts.group(1)) * units[parts.group(2)]
    if parts.group(3) is not None:
        total += float(parts.group(3)) * units[parts.group(4)]
    return total


def shownClock(text: str, day: float) -> float:
    """
    The time a "done ≈ HH:MM:SS" says, on the UTC day of C{day} (the page
    writes the date only for another day than its snapshot's).

    @raise ValueError: it is not such a clock.
    """
    parts = re.fullmatch(r"done ≈ (\d\d):(\d\d):(\d\d)", text.strip())
    if parts is None:
        raise ValueError(f"not a clock of the same day: {text!r}")
    hours, minutes, seconds = (int(p) for p in parts.groups())
    return day - day % 86400 + hours * 3600 + minutes * 60 + seconds


@frozen
class Look:
    """
    What the page showed at one moment of the simulated run, beside the
    truth.

    @ivar elapsed: simulated seconds since the run started.
    @ivar percent: the per cent done the page showed.
    @ivar text: the time left the page showed, as it showed it.
    @ivar shown: that time left, in seconds.
    @ivar left: the time really left, in seconds.
    @ivar clock: the "done ≈" the page showed.
    @ivar end: the end that "done ≈" says, in seconds after the run started.
    """

    elapsed: float
    percent: float
    text: str
    shown: float
    left: float
    clock: str
    end: float

    def describe(self) -> str:
        """
        One line for the test's output and its failures.
        """
        error = (self.shown - self.left) / self.left * 100
        return (
            f"t={self.elapsed:.0f} s {self.percent:.1f} %: page {self.text!r} ({self.shown:.0f} s),"
            f" {self.clock!r} (t={self.end:.0f} s), really {self.left:.0f} s ({error:+.1f} %)"
        )


class TimeLeftInChromiumTests(TestCase):
    """
    The dashboard's time left over a simulated run served by the real
    status resource.
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

    async def serve(self, run: SimulatedRun) -> int:
        """
        Serve the real status site over C{run}'s progress and clock on a
        loopback port, closed, with any connection the browser left, when
        the test ends.

        @return: the port.
        """
        root = StatusResource(run.progress, run.clock.seconds, MemoryStateStore())
        site = buildStatusSite(root, reactor)
        assert isinstance(site, QuietSite)
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
        self.addCleanup(self.closeSite, site, port)
        address = port.getHost()
        assert isinstance(address, IPv4Address)
        return address.port

    async def closeSite(self, site: QuietSite, port: IListeningPort) -> None:
        """
        Stop listening and wait (bounded) until the browser, gone, has
        closed its connections.
        """
        stopped = port.stopListening()
        if stopped is not None:
            await stopped
        for _ in range(int(STEP * 10)):
            if site.openConnections == 0:
                return
            await deferLater(reactor, 0.1)
        self.fail(f"{site.openConnections} connections still open after the browser quit")

    def test_largestJobLast(self) -> Deferred[None]:
        """
        20 jobs, 4 at once at 10 messages a second each, the last ten times
        the size of the others (the run of
        L{tests.test_progress_eta.TimeLeftTests.test_largestJobLast}): from
        25 % done on, the time left the page shows, and the end its "done ≈"
        says (on the snapshot's clock, not the browser's), are within 20 %
        of the time really left.  With one rate over the messages left (the
        estimate before the scheduler's was), the page said "5 min 1 s" at
        33.1 % where 700 s were left.
        """
        return Deferred.fromCoroutine(self.largestJobLast())

    async def largestJobLast(self) -> None:
        """
        L{test_largestJobLast}: the real end from a reference run first,
        then the same run served and looked at every L{EVERY} seconds.
        """
        reference = SimulatedRun(SIZES, slots=4, rate=10)
        start = reference.clock.seconds()
        reference.run()
        end = reference.clock.seconds()
        run = SimulatedRun(SIZES, slots=4, rate=10)
        self.assertEqual(run.clock.seconds(), start)
        port = await self.serve(run)
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        driver: WebDriver = await self.inThread(startBrowser, self, directory)
        await self.inThread(
            driver.execute_cdp_cmd, "Emulation.setTimezoneOverride", {"timezoneId": "UTC"}
        )
        url = f"http://127.0.0.1:{port}/"
        looks: list[Look] = []
        run.fill()
        while run.running:
            run.step()
            now = run.clock.seconds()
            if (now - start) % EVERY != 0 or not run.running:
                continue
            page = await self.inThread(self.look, driver, url, now)
            looks.append(self.judge(page, now, start, end))
        checked = [look for look in looks if look.percent >= 25]
        report = "\n".join(look.describe() for look in looks)
        self.assertGreaterEqual(len(checked), 10, report)
        for look in checked:
            self.assertLessEqual(abs(look.shown - look.left), 0.2 * look.left, report)
            self.assertLessEqual(abs(look.end - (end - start)), 0.2 * look.left, report)

    def look(self, driver: WebDriver, url: str, now: float) -> dict[str, Any]:
        """
        Load the page afresh and read it once it rendered the snapshot of
        C{now} (the server's state does not change meanwhile).
        """
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.wait import WebDriverWait

        driver.get(url)
        last: list[dict[str, Any]] = []

        def rendered(driver: WebDriver) -> dict[str, Any] | Literal[False]:
            page: dict[str, Any] = driver.execute_script(READ)
            last[:] = [page]
            if page["polls"] >= 1 and page["time"] is not None and float(page["time"]) == now:
                return page
            return False

        try:
            return WebDriverWait(driver, STEP, poll_frequency=0.05).until(rendered)
        except TimeoutException:
            raise self.failureException(f"the page did not render the snapshot of {now}: {last}")

    def judge(self, page: dict[str, Any], now: float, start: float, end: float) -> Look:
        """
        What C{page} showed at C{now}, parsed, beside the truth; the shown
        time left agrees with its C{data-value} and its "done ≈" with the
        snapshot's time plus it.
        """
        shown = shownSeconds(page["eta"])
        self.assertLessEqual(abs(shown - float(page["etaValue"])), 1.0, page)
        ends = shownClock(page["etaClock"], now)
        self.assertLessEqual(abs(ends - (now + float(page["etaValue"]))), 1.0, page)
        return Look(
            elapsed=now - start,
            percent=float(page["percent"]),
            text=page["eta"],
            shown=shown,
            left=end - now,
            clock=page["etaClock"],
            end=ends - start,
        )
