"""
Support for the state store's tests that need another process: one that
holds a lock, dies by SIGKILL, cannot write a file, or is the daemon.

Everything here is blocking, as the tests that use it are synchronous;
waiting is on a child's own output or exit, never a sleep.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from typing import IO, Sequence

from twisted.trial.unittest import SkipTest, SynchronousTestCase

import imapmig

SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(imapmig.__file__)))

# Generous: a child is a Python interpreter importing part of imapmig, on a
# machine that may be busy; a hang still ends the test.
CHILD_TIMEOUT = 60.0

TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"


def childEnvironment() -> dict[str, str]:
    """
    The environment of a child Python that imports imapmig from this
    source tree.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [SOURCE_TREE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


def runPython(
    script: str, *args: str, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """
    Run C{script} in a child Python, to its end.

    @param prefix: a command line the child runs under (e.g. C{setpriv}).
    @return: its exit status and output, as text.
    """
    return subprocess.run(
        [*prefix, sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=childEnvironment(),
        timeout=CHILD_TIMEOUT,
    )


def startPython(testCase: SynchronousTestCase, script: str, *args: str) -> subprocess.Popen[str]:
    """
    Start C{script} in a child Python that reads its standard input and
    writes its standard output as lines of text; it is killed, if still
    running, when the test ends.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=childEnvironment(),
    )

    def reap() -> None:
        if child.poll() is None:
            child.kill()
        child.wait(CHILD_TIMEOUT)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()

    testCase.addCleanup(reap)
    return child


def readLine(testCase: SynchronousTestCase, child: subprocess.Popen[str]) -> str:
    """
    The next line C{child} writes, which it writes when it has done what
    the test waits for.

    @raise testCase.failureException: it exited instead.
    """
    stdout: IO[str] | None = child.stdout
    assert stdout is not None
    line = stdout.readline()
    if not line:
        testCase.fail(f"the child exited with status {child.wait(CHILD_TIMEOUT)} instead")
    return line.rstrip("\n")


def withoutDACOverride(testCase: SynchronousTestCase) -> list[str]:
    """
    A command prefix under which a child cannot write a file whose mode
    forbids it: nothing for an ordinary user; for root (whom modes do not
    stop), C{setpriv} without the capability C{CAP_DAC_OVERRIDE}, so that
    the kernel refuses, for real, to open a 0444 file for writing.

    @raise SkipTest: root, and no C{setpriv}; with C{CI=true} the test
        fails instead.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        why = "setpriv (util-linux) is needed to run a child without CAP_DAC_OVERRIDE"
        if os.environ.get("CI") == "true":
            testCase.fail(why)
        raise SkipTest(why)
    return [setpriv, "--bounding-set=-dac_override", "--"]


def corruptPages(path: str, pages: Sequence[int], seed: int = 15) -> None:
    """
    Write random octets over C{pages} (numbered from 0) of the database
    file at C{path}, as a failing disk or a stray write would.
    """
    rnd = random.Random(seed)
    with open(path, "r+b") as f:
        # The page size, from the file's header (big-endian; 1 means 65536).
        f.seek(16)
        pageSize = int.from_bytes(f.read(2), "big")
        pageSize = 65536 if pageSize == 1 else pageSize
        for page in pages:
            f.seek(page * pageSize)
            f.write(bytes(rnd.randrange(256) for _ in range(pageSize)))
