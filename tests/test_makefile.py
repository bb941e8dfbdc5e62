"""
Tests for the Makefile's install steps: C{make demo} installs only what the
demo uses, C{make test} everything the tests use, and every C{apt-get} waits
for the locks another C{apt-get} holds (C{.ci/apt-update}).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from tests.support import SOURCE_TREE, newDirectory


def _dryRun(testCase: SynchronousTestCase, target: str) -> str:
    """
    What C{make -n TARGET} would run, in a copy of the Makefile and
    C{.ci/} (so that nothing of the checkout, such as its C{.venv}, makes
    a step look done).
    """
    make = shutil.which("make")
    if make is None:
        testCase.fail("make is not installed")
    copy = newDirectory(testCase)
    shutil.copy(os.path.join(SOURCE_TREE, "Makefile"), copy)
    shutil.copytree(os.path.join(SOURCE_TREE, ".ci"), os.path.join(copy, ".ci"))
    done = subprocess.run(
        [make, "-n", target], cwd=copy, capture_output=True, text=True, timeout=60
    )
    testCase.assertEqual(done.returncode, 0, done.stderr)
    return done.stdout


class DemoInstallTests(SynchronousTestCase):
    """
    C{make demo}'s chain of prerequisites.
    """

    def test_demoInstallsOnlyWhatItUses(self) -> None:
        """
        C{make demo} installs Dovecot, Python's venv and openssl, imapmig
        without its development tools, and no browser, Cyrus or Courier.
        """
        steps = _dryRun(self, "demo")
        for needed in ["dovecot-imapd", "python3-venv", "openssl", "pip install -q .\n"]:
            self.assertIn(needed, steps)
        unwantedPackages = ["chromium", "cyrus", "courier", "install-servers", ".[dev]", "gcc"]
        for unwanted in [*unwantedPackages, "postgresql"]:
            self.assertNotIn(unwanted, steps.lower())

    def test_testInstallsEverything(self) -> None:
        """
        C{make test} still installs what the tests use: the browser and
        its driver, Cyrus and Courier, PostgreSQL, the development tools.
        """
        steps = _dryRun(self, "test")
        # " postgresql": the private PostgreSQL's server (imapmig.testing.postgresql).
        wanted = ["chromium chromium-driver", ".ci/install-servers", '".[dev]"', "dovecot-imapd"]
        for needed in [*wanted, " postgresql"]:
            self.assertIn(needed, steps)

    def test_aptWaitsForTheLock(self) -> None:
        """
        Every C{apt-get} the demo and the tests run waits for the dpkg lock
        (C{-o DPkg::Lock::Timeout=600}), and C{apt-get update} runs only
        through C{.ci/apt-update}, which waits for the lists' lock; so
        does C{.ci/install-servers}.
        """
        for target in ["demo", "test"]:
            steps = _dryRun(self, target)
            calls = re.findall(r"\bapt-get(?: -o \S+)* (?:install|update|download)\b[^;&|]*", steps)
            self.assertTrue(calls, target)
            for call in calls:
                self.assertIn("-o DPkg::Lock::Timeout=600", call, target)
                self.assertNotIn(" update", call, target)
            self.assertIn(".ci/apt-update && ", steps, target)
        with open(os.path.join(SOURCE_TREE, ".ci", "install-servers")) as f:
            script = f.read()
        for line in script.splitlines():
            code = line.split("#", 1)[0]
            if re.search(r"\bapt-get (install|update)", code):
                self.assertIn("DPkg::Lock::Timeout", code, line)
                self.assertNotIn("update", code, line)


class AptUpdateTests(SynchronousTestCase):
    """
    C{.ci/apt-update} with a stand-in C{apt-get} on C{PATH}.
    """

    def _update(self, answers: list[tuple[int, str]], wait: int = 600) -> tuple[int, str, list[str]]:
        """
        Run C{.ci/apt-update} (no pause between tries) against an
        C{apt-get} that gives C{answers} in turn (exit status, output).

        @return: its exit status, its standard error, and the argument
            lists the stand-in was called with.
        """
        directory = newDirectory(self)
        calls = os.path.join(directory, "calls")
        cases = "\n".join(
            f'    {number}) echo "{text}" >&2; exit {status};;'
            for number, (status, text) in enumerate(answers, 1)
        )
        fake = os.path.join(directory, "apt-get")
        with open(fake, "w") as f:
            f.write(
                "#!/bin/sh\n"
                f'echo "$*" >> {calls}\n'
                f"n=$(wc -l < {calls})\n"
                f'case "$n" in\n{cases}\n    *) exit 0;;\nesac\n'
            )
        os.chmod(fake, 0o755)
        done = subprocess.run(
            [os.path.join(SOURCE_TREE, ".ci", "apt-update")],
            env={
                "PATH": f"{directory}:{os.environ['PATH']}",
                "APT_LOCK_POLL": "0",
                "APT_LOCK_WAIT": str(wait),
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        with open(calls) as f:
            return done.returncode, done.stderr, f.read().splitlines()

    def test_waitsWhileLocked(self) -> None:
        """
        While another C{apt-get} holds the lists' lock, it tries again
        (saying it waits), then succeeds.
        """
        locked = (100, "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 7 (apt-get)")
        status, err, calls = self._update([locked, locked])
        self.assertEqual(status, 0, err)
        self.assertEqual(calls, ["-o DPkg::Lock::Timeout=600 update -qq"] * 3)
        self.assertIn("Waiting up to 600 s for another apt-get", err)

    def test_otherFailureAtOnce(self) -> None:
        """
        Any other failure (no network) ends it at once, with apt-get's
        status and message.
        """
        status, err, calls = self._update([(100, "E: Failed to fetch http://deb.debian.org")])
        self.assertEqual((status, len(calls)), (100, 1))
        self.assertIn("Failed to fetch", err)

    def test_givesUp(self) -> None:
        """
        A lock held longer than C{APT_LOCK_WAIT} ends it with apt-get's
        failure.
        """
        locked = (100, "E: Could not get lock /var/lib/apt/lists/lock.")
        status, err, calls = self._update([locked] * 10, wait=3)
        self.assertEqual((status, len(calls)), (100, 4))
        self.assertIn("Could not get lock", err)
