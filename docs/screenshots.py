"""
Take the manual's screenshots of the dashboard in the middle of a real
migration: C{docs/dashboard.png} (desktop, 1280 px wide) and
C{docs/dashboard-phone.png} (an emulated 390x844 phone); and those of one
run through every wait (L{ONE_RUN}): every job paused, a job deferred by
its daily budget, a retried job's timeline, the finished page.

It runs the daemon (C{python -m imapmig.daemon}) from this source tree over
eight jobs of different sizes into a private Dovecot, with the harness of
the real-browser test (L{tests.liverun}, L{tests.browser}): each account
rate-limited to 2 messages a second so the run lasts about four minutes,
C{max_jobs: 6} so that a job waits queued, a C{max_message_size} of 1 MB
on the destination with three ~1.5 MB messages in one job's Maildir (they
are recorded as failed, not sent), and a control token configured (never
typed into the page, so it is not shown).  After about 110 s (at least
10 throughput samples, one every 10 s) it saves both screenshots, then
stops the daemon, the browser and Dovecot.

Run it from the top of the source tree, with Dovecot, Debian's C{chromium}
and C{chromium-driver} and Selenium installed (C{make test} installs them)::

    .venv/bin/python docs/screenshots.py

It takes about three minutes.  C{optipng} (if installed) shrinks the PNGs.
Set C{IMAPMIG_SHOTS_KEEP=1} to keep the run's directory (config, daemon
log) for a look.  C{--only dashboard} or C{--only onerun} takes one set.

The one-run set is the real-browser test L{tests.test_browser_onerun}'s
own screenshots, so what the docs show is what that test checked: this
runs the test (C{CI=true}) with C{IMAPMIG_SCREENSHOTS} set to a directory
of its own and copies its PNGs here.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from email.message import EmailMessage
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, TOP)

import yaml  # noqa: E402

from imapmig.testing.dovecot import requireDovecot  # noqa: E402
from tests.browser import emulateViewport, pngSize, startBrowser  # noqa: E402
from tests.liverun import DaemonRun, StatusClient, pollUntil, writeLiveMigration  # noqa: E402
from tests.support import freshUser, sharedDovecot  # noqa: E402

JOBS = (
    ("alice", 300),
    ("bob", 420),
    ("carol", 50),
    ("dave", 360),
    ("erin", 240),
    ("frank", 330),
    ("grace", 200),
    ("heidi", 150),
)
"""
The jobs (name, messages), in configuration order.  At L{RATE} each, carol
is done after ~25 s and grace takes its slot; heidi waits queued until erin
is done (~120 s), after the screenshots.
"""

RATE = 2
MAX_JOBS = 6
MAX_MESSAGE_SIZE = "1MB"
LARGE_JOB = "dave"
LARGE_MESSAGES = 3
LARGE_SIZE = 1_500_000
SAMPLES = 10
ONE_RUN = ("onerun-paused", "onerun-deferred", "onerun-retried", "onerun-finished")
"""
The screenshots of L{tests.test_browser_onerun}, copied as C{docs/NAME.png}.
"""
DESKTOP = (1280, 1000)
PHONE = (390, 844)


class _Cleanups:
    """
    What L{startBrowser} needs of a test case: C{addCleanup} (run in
    reverse order by L{run}) and C{failureException}.
    """

    failureException = AssertionError

    def __init__(self) -> None:
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def addCleanup(self, f: Callable[..., object], *args: Any) -> None:
        self._calls.append((f, args))

    def run(self) -> None:
        while self._calls:
            f, args = self._calls.pop()
            try:
                f(*args)
            except Exception as e:
                print(f"cleanup {f!r} failed: {e}", file=sys.stderr)


def writeLargeMessages(maildir: str) -> None:
    """
    Put L{LARGE_MESSAGES} messages of about L{LARGE_SIZE} octets (a PDF-ish
    attachment of random octets) into the Maildir's INBOX: larger than
    L{MAX_MESSAGE_SIZE}, so the job records them as failed without sending.
    """
    for n in range(LARGE_MESSAGES):
        message = EmailMessage()
        message["From"] = "Scanner <scanner@example.org>"
        message["To"] = "dave@example.org"
        message["Subject"] = f"Scanned contract, part {n + 1}"
        message["Date"] = "Tue, 03 Mar 2026 09:1%d:00 +0000" % n
        message["Message-ID"] = f"<large-{n}@example.org>"
        message.set_content("The scanned pages are attached.\n")
        message.add_attachment(
            os.urandom(LARGE_SIZE * 3 // 4),
            maintype="application",
            subtype="pdf",
            filename=f"contract-{n + 1}.pdf",
        )
        name = f"1772529{n:03d}.M{n}P1.shots:2,S"
        with open(os.path.join(maildir, "cur", name), "wb") as f:
            f.write(bytes(message))


def shrink(path: str) -> None:
    """
    Shrink the PNG at C{path} with C{optipng}, if installed.
    """
    if shutil.which("optipng"):
        subprocess.run(["optipng", "-quiet", "-o5", "-strip", "all", path], check=True)


def oneRun() -> None:
    """
    Run L{tests.test_browser_onerun} and copy its screenshots (L{ONE_RUN})
    into C{docs/}.
    """
    directory = tempfile.mkdtemp(prefix="imapmig-shots-onerun-")
    try:
        environment = {**os.environ, "CI": "true", "IMAPMIG_SCREENSHOTS": directory}
        subprocess.run(
            [sys.executable, "-m", "twisted.trial", "--temp-directory",
             os.path.join(directory, "_trial_temp"), "tests.test_browser_onerun"],
            cwd=TOP, env=environment, check=True,
        )  # fmt: skip
        for name in ONE_RUN:
            path = os.path.join(HERE, name + ".png")
            shutil.copyfile(os.path.join(directory, name + ".png"), path)
            shrink(path)
            with open(path, "rb") as f:
                print(f"{path}: {pngSize(f.read(32))}, {os.path.getsize(path)} octets")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def shoot(driver: Any, path: str, width: int, height: int, mobile: bool) -> None:
    """
    Emulate a C{width} x C{height} viewport, let the page poll once more at
    that size, save the viewport as a PNG at C{path} and shrink it.
    """
    emulateViewport(driver, width, height, mobile)
    polls = driver.execute_script("return window.imapmigDashboard.polls")
    pollUntil(
        f"a poll at {width} px",
        lambda: driver.execute_script("return window.innerWidth") == width
        and driver.execute_script("return window.imapmigDashboard.polls") > polls + 1,
        timeout=15,
    )
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    png = base64.b64decode(shot["data"])
    with open(path, "wb") as f:
        f.write(png)
    shrink(path)
    print(f"{path}: {pngSize(png)}, {os.path.getsize(path)} octets")


def main() -> None:
    """
    Take the screenshots: both sets, or the one C{--only} names.
    """
    only = sys.argv[2] if sys.argv[1:2] == ["--only"] and len(sys.argv) == 3 else None
    if sys.argv[1:] and only not in ("dashboard", "onerun"):
        raise SystemExit("usage: docs/screenshots.py [--only dashboard|onerun]")
    if only != "onerun":
        dashboard()
    if only != "dashboard":
        oneRun()


def dashboard() -> None:
    """
    Run the migration and take the dashboard's screenshots.
    """
    requireDovecot()
    cleanups = _Cleanups()
    directory = tempfile.mkdtemp(prefix="imapmig-shots-")
    try:
        instance = sharedDovecot()
        migration = writeLiveMigration(
            directory,
            instance,
            [(name, freshUser(instance), count) for name, count in JOBS],
            messagesPerSecond=RATE,
            token=secrets.token_urlsafe(24),
        )
        with open(migration.configPath) as f:
            document = yaml.safe_load(f)
        document["max_jobs"] = MAX_JOBS
        document["servers"]["dovecot"]["max_message_size"] = MAX_MESSAGE_SIZE
        for job in document["jobs"]:
            if job["name"] == LARGE_JOB:
                writeLargeMessages(job["source"]["maildir"])
        with open(migration.configPath, "w") as f:
            yaml.safe_dump(document, f, sort_keys=False)

        driver = startBrowser(cleanups, directory)  # type: ignore[arg-type]
        daemon = DaemonRun(migration.configPath, os.path.join(directory, "daemon.log"))
        cleanups.addCleanup(daemon.kill)
        started = time.monotonic()
        port = pollUntil("the status listener", daemon.statusPort, 30, detail=daemon.tail)
        client = StatusClient(port)
        driver.get(f"http://127.0.0.1:{port}/")

        def enough() -> bool:
            samples = client.status().get("throughput", {}).get("samples", [])
            return len(samples) >= SAMPLES

        pollUntil(f"{SAMPLES} throughput samples", enough, 180, interval=1, detail=daemon.tail)
        print(f"{SAMPLES} samples after {time.monotonic() - started:.0f} s")
        shoot(driver, os.path.join(HERE, "dashboard.png"), *DESKTOP, mobile=False)
        shoot(driver, os.path.join(HERE, "dashboard-phone.png"), *PHONE, mobile=True)
        status = client.status()
        print("totals:", status.get("totals"))
        print("daemon stopped with status", daemon.stop())
    finally:
        cleanups.run()
        if os.environ.get("IMAPMIG_SHOTS_KEEP"):
            print("kept", directory)
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
