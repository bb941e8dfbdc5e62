# -*- test-case-name: tests.test_browser -*-
"""
A real browser for the dashboard's tests: Debian's C{chromium}, headless,
driven by Selenium through Debian's C{chromium-driver}, never anything
Selenium Manager would download; and reading the dashboard through its DOM
contract (C{/work/notes/api18.md}, "Dashboard DOM contract"): the raw
numbers in C{data-value} attributes, C{#updated[data-time]}, and
C{window.imapmigDashboard.polls}.

The page is read in one script, so what one read returns is one rendering.
A script added before the page's own (L{RECORDER}) keeps the last few
C{/status.json} bodies the page received, by their C{time}, so that the
test compares the page with the very JSON it rendered, not with a later
one that may differ.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from attrs import frozen
from twisted.trial import unittest

from tests.support import SOURCE_TREE

_T = TypeVar("_T")

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

CHROMEDRIVER = "/usr/bin/chromedriver"
"""
Debian's C{chromium-driver}; C{IMAPMIG_CHROMEDRIVER} names another.
"""

CHROMIUM = "/usr/bin/chromium"
"""
Debian's C{chromium}; C{IMAPMIG_CHROMIUM} names another.
"""

DESKTOP = (1280, 900)
PHONE = (390, 844)

OVERALL_IDS = (
    "overall-done",
    "overall-total",
    "overall-failed",
    "overall-percent",
    "overall-rate",
    "overall-eta",
    "overall-bytes-done",
    "overall-bytes-total",
)
"""
The elements of the overall progress whose C{data-value} the test reads.
"""

JOB_CELLS = (
    "job-state",
    "job-done",
    "job-total",
    "job-failed",
    "job-percent",
    "job-rate",
    "job-eta",
)
"""
The cells (classes) of a job's row whose C{data-value} the test reads.
"""

MISSING = "\0missing"
"""
What L{PageReading} holds for an element the page lacks.
"""

MARKER_NAME = "__imapmigBrowserTestMarker"
"""
A property the test sets on C{window}: gone after a reload.
"""

RECORDER = r"""
(() => {
  const kept = [];
  const record = (text) => {
    try {
      const time = JSON.parse(text).time;
      if (typeof time !== "number") return;
      kept.push(text);
      while (kept.length > 8) kept.shift();
    } catch (e) {}
  };
  const isStatus = (url) => {
    try { return new URL(url, location.href).pathname === "/status.json"; }
    catch (e) { return false; }
  };
  Object.defineProperty(window, "__imapmigStatusBodies", {value: kept});
  const realFetch = window.fetch;
  window.fetch = function (...args) {
    return realFetch.apply(this, args).then((response) => {
      if (isStatus(response.url)) response.clone().text().then(record, () => {});
      return response;
    });
  };
  const realSend = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    this.addEventListener("load", () => {
      if (!isStatus(this.responseURL)) return;
      if (this.responseType === "" || this.responseType === "text") record(this.responseText);
      else if (this.responseType === "json") record(JSON.stringify(this.response));
    });
    return realSend.apply(this, args);
  };
})();
"""
"""
Run in the page before its own scripts: keeps the bodies of the last 8
C{/status.json} replies the page received (by C{fetch} or
C{XMLHttpRequest}) in C{window.__imapmigStatusBodies}.
"""

_READ_PAGE = """
const MISSING = arguments[0], overallIds = arguments[1], cells = arguments[2];
const value = (el) => el === null ? MISSING : el.getAttribute("data-value");
const updated = document.getElementById("updated");
const reading = {
  time: updated === null ? MISSING : updated.getAttribute("data-time"),
  overall: {}, jobs: {},
  polls: window.imapmigDashboard ? window.imapmigDashboard.polls : null,
  marker: window.%(marker)s === undefined ? null : window.%(marker)s,
  bodies: window.__imapmigStatusBodies ? window.__imapmigStatusBodies.slice() : [],
};
for (const id of overallIds) reading.overall[id] = value(document.getElementById(id));
for (const row of document.querySelectorAll("tr[data-job]")) {
  const job = {};
  for (const cell of cells) job[cell] = value(row.querySelector("." + cell));
  reading.jobs[row.getAttribute("data-job")] = job;
}
return JSON.stringify(reading);
""" % {"marker": MARKER_NAME}


class BrowserMissing(Exception):
    """
    Chromium, its driver or Selenium is not installed.
    """


def findBrowser() -> tuple[str, str]:
    """
    Locate Chromium and its driver and import Selenium.

    @return: the paths of C{chromium} and C{chromedriver}.
    @raise BrowserMissing: one of them is missing.
    """
    missing = []
    chromium = os.environ.get("IMAPMIG_CHROMIUM") or shutil.which("chromium") or CHROMIUM
    driver = os.environ.get("IMAPMIG_CHROMEDRIVER") or shutil.which("chromedriver") or CHROMEDRIVER
    if not os.access(chromium, os.X_OK):
        missing.append("chromium (apt-get install chromium)")
    if not os.access(driver, os.X_OK):
        missing.append("chromedriver (apt-get install chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[dev]')")
    if missing:
        raise BrowserMissing("not installed: " + ", ".join(missing))
    return chromium, driver


def requireBrowser(testCase: unittest.SynchronousTestCase | None = None) -> tuple[str, str]:
    """
    Chromium and its driver for a test that needs a real browser: skip the
    test loudly when one (or Selenium) is missing, or fail it on CI
    (C{CI=true}), as L{imapmig.testing.dovecot.requireDovecot} does.

    @param testCase: the test asking, whose C{failureException} is raised
        on CI; L{AssertionError} without one.
    @return: the paths of C{chromium} and C{chromedriver}.
    @raise twisted.trial.unittest.SkipTest: missing, not on CI.
    """
    try:
        return findBrowser()
    except BrowserMissing as e:
        problem = str(e)
    if os.environ.get("CI") == "true":
        failure = AssertionError if testCase is None else testCase.failureException
        raise failure(
            f"the browser is not usable but CI=true: the real-browser test must run on CI"
            f" (make test installs it as root): {problem}"
        )
    sys.stderr.write(f"\n*** SKIPPING real-browser tests: {problem}; run `make test` ***\n")
    raise unittest.SkipTest(f"browser not usable: {problem}")


def startBrowser(testCase: unittest.SynchronousTestCase, directory: str) -> WebDriver:
    """
    Start headless Chromium under Debian's chromedriver, with a fresh
    profile, a 1280x900 window and L{RECORDER} in every page, quit when
    the test ends.  Selenium Manager is never consulted (the driver's path
    is given and C{SE_OFFLINE} is set), and Chromium reaches nothing but
    loopback.

    @param directory: where its profile and chromedriver's log go.
    """
    chromium, driverPath = requireBrowser(testCase)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    previous = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    testCase.addCleanup(_restoreEnvironment, "SE_OFFLINE", previous)
    options = Options()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="chromium-", dir=directory)
    for argument in [
        "--headless=new",
        f"--user-data-dir={profile}",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-sync",
        "--disable-component-update",
        "--disable-background-networking",
        "--disable-default-apps",
        # Keep the page's 2 s poll on time while nothing has focus.
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
        # Only loopback may be a target of test traffic.
        "--no-proxy-server",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ] + (["--no-sandbox"] if os.geteuid() == 0 else []):
        options.add_argument(argument)
    service = Service(
        executable_path=driverPath,
        log_output=os.path.join(directory, "chromedriver.log"),
        env={**os.environ, "SE_OFFLINE": "true"},
    )
    driver = webdriver.Chrome(service=service, options=options)
    testCase.addCleanup(driver.quit)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
    return driver


def _restoreEnvironment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@frozen
class PageReading:
    """
    What the dashboard showed at one moment (one script run).

    @ivar time: C{#updated[data-time]}, or L{MISSING}.
    @ivar overall: C{data-value} of each of L{OVERALL_IDS} (L{None} for
        an element without the attribute, L{MISSING} for a missing one).
    @ivar jobs: per C{tr[data-job]}, C{data-value} of each of L{JOB_CELLS}.
    @ivar polls: C{window.imapmigDashboard.polls}, or L{None}.
    @ivar marker: the value of the test's marker on C{window}, or L{None}.
    @ivar bodies: the C{/status.json} bodies the page received last
        (L{RECORDER}), oldest first.
    """

    time: str | None
    overall: dict[str, str | None]
    jobs: dict[str, dict[str, str | None]]
    polls: int | None
    marker: str | None
    bodies: tuple[str, ...]

    def received(self) -> dict[str, Any] | None:
        """
        The C{/status.json} body the page received whose C{time} is the
        page's C{#updated[data-time]}: the snapshot the page shows, or
        L{None} when it has not been recorded.
        """
        if self.time in (None, MISSING, ""):
            return None
        assert self.time is not None
        shown = float(self.time)
        for body in reversed(self.bodies):
            document = json.loads(body)
            if document.get("time") == shown:
                assert isinstance(document, dict)
                return document
        return None


def readPage(driver: WebDriver) -> PageReading:
    """
    Read the dashboard's numbers, in one script.
    """
    raw = driver.execute_script(_READ_PAGE, MISSING, list(OVERALL_IDS), list(JOB_CELLS))
    data = json.loads(raw)
    return PageReading(
        time=data["time"],
        overall=data["overall"],
        jobs=data["jobs"],
        polls=data["polls"],
        marker=data["marker"],
        bodies=tuple(data["bodies"]),
    )


def setMarker(driver: WebDriver, value: str) -> None:
    """
    Set the test's marker on C{window}; a reload loses it.
    """
    driver.execute_script(f"window.{MARKER_NAME} = arguments[0];", value)


def waitPage(
    testCase: unittest.SynchronousTestCase,
    driver: WebDriver,
    what: str,
    condition: Callable[[WebDriver], _T | None],
    timeout: float,
    detail: Callable[[], str] = lambda: "",
) -> _T:
    """
    Wait until C{condition(driver)} is true, at most C{timeout} seconds (a
    L{WebDriverWait}; an L{AssertionError} raised by the condition ends the
    wait at once).

    @param detail: more for the failure message (the daemon's log).
    @return: what C{condition} returned.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    try:
        result = WebDriverWait(driver, timeout, poll_frequency=0.25).until(condition)
        # until() returns only a true value.
        assert result is not None
        return result
    except TimeoutException:
        raise testCase.failureException(
            f"timed out after {timeout} s waiting for {what}. {detail()}"
        ) from None


def screenshotDirectory() -> str:
    """
    Where screenshots go: C{$IMAPMIG_SCREENSHOTS}, by default
    C{_trial_temp/screenshots/} of the source tree; created if missing.
    """
    directory = os.environ.get("IMAPMIG_SCREENSHOTS") or os.path.join(
        SOURCE_TREE, "_trial_temp", "screenshots"
    )
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    return directory


def emulateViewport(driver: WebDriver, width: int, height: int, mobile: bool) -> None:
    """
    Make the page's viewport exactly C{width} x C{height} CSS pixels at
    device scale 1, as a phone (C{mobile}: the viewport meta tag applies)
    or a desktop browser.
    """
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


def saveScreenshot(driver: WebDriver, path: str) -> tuple[int, int]:
    """
    Save what the viewport shows as a PNG file at C{path}.

    @return: the image's width and height in pixels.
    """
    png = driver.get_screenshot_as_png()
    with open(path, "wb") as f:
        f.write(png)
    return pngSize(png)


def saveFullPage(driver: WebDriver, path: str) -> tuple[int, int]:
    """
    Save the whole page, beyond the viewport, as a PNG file at C{path}.

    @return: the image's width and height in pixels.
    """
    import base64

    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    png = base64.b64decode(shot["data"])
    with open(path, "wb") as f:
        f.write(png)
    return pngSize(png)


def pngSize(png: bytes) -> tuple[int, int]:
    """
    The width and height of a PNG image (from its IHDR chunk).

    @raise AssertionError: it is not a PNG image.
    """
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise AssertionError(f"not a PNG image: {png[:16]!r}")
    width, height = struct.unpack(">II", png[16:24])
    return width, height
