# -*- test-case-name: tests.test_sources_local -*-
"""
Helpers for the tests of the local sources (Maildir, mbox, C{.eml}):
special files, and running a source where the kernel denies what it
denies any user.

Root reads files whatever their mode, so a test that needs a file or
directory the daemon may not read cannot get one in the test process when
it runs as root.  Mocking C{open} or C{scandir} would show only that the
code handles an error from the call that was mocked, not that the kernel
raises it there: the mode-000 Maildir folder that was skipped silently was
lost in an C{isdir} that swallowed the kernel's C{EACCES}, a call no mock
of C{open} reaches.  So these tests run the source in a child process
whose modes the kernel enforces: when the test runs as root, the child
drops the two capabilities that let root ignore modes (C{CAP_DAC_OVERRIDE}
and C{CAP_DAC_READ_SEARCH}) from its bounding set before it executes
Python, and so runs as a root that modes stop like any owner; otherwise it
runs as the test's own user.  The child prints what the source gave, as
JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
from typing import Any

from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

# The worktree's root, so that the child imports this imapmig.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# prctl(2) and capabilities(7).
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _dropModeOverrides() -> None:
    """
    Drop the capabilities that let root ignore modes from the bounding set
    of this (child) process, so that the program it executes next does not
    have them.  Runs between C{fork} and C{exec}.
    """
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def makeSocket(testCase: SynchronousTestCase, path: str) -> None:
    """
    Make a Unix socket at C{path}, for the rest of the test.  It is bound
    through its directory's descriptor, so that a long path (trial's) does
    not exceed the length a socket address may have.
    """
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    testCase.addCleanup(os.close, directory)
    server = socket.socket(socket.AF_UNIX)
    testCase.addCleanup(server.close)
    server.bind(f"/proc/self/fd/{directory}/{os.path.basename(path)}")


def makeUnreadable(testCase: SynchronousTestCase, path: str) -> None:
    """
    Take every permission off C{path} for the rest of the test.
    """
    mode = os.stat(path).st_mode & 0o7777
    os.chmod(path, 0)
    testCase.addCleanup(os.chmod, path, mode)


def describeSource(kind: str, path: str) -> dict[str, Any]:
    """
    Everything a source gives: its folders, each folder's messages (or why
    they cannot be listed) and each message's body (its length, or why it
    cannot be read).  Run in the child.

    @param kind: C{"maildir"}, C{"mbox"} or C{"eml"}.
    """
    from imapmig.sources.eml import EmlDirectorySource
    from imapmig.sources.maildir import MaildirSource
    from imapmig.sources.mbox import MboxSource

    def result(d: Any) -> Any:
        got: list[Any] = []
        d.addBoth(got.append)
        return got[0]

    source: Any
    if kind == "maildir":
        source = MaildirSource(path)
    elif kind == "mbox":
        source = MboxSource(path)
    else:
        source = EmlDirectorySource(path, ("Imported",))
    folders = result(source.listFolders())
    if isinstance(folders, Failure):
        return {"error": str(folders.value)}
    described: dict[str, Any] = {}
    for folder in folders:
        messages = result(source.listMessages(folder))
        if isinstance(messages, Failure):
            described[folder.key] = {"error": str(messages.value)}
            continue
        bodies = result(source.readBodies(folder, messages))
        described[folder.key] = {
            m.key: (getattr(b, "reason", None) or len(b)) for m, b in zip(messages, bodies)
        }
    return {"folders": described}


def describeUnprivileged(testCase: SynchronousTestCase, kind: str, path: str) -> dict[str, Any]:
    """
    L{describeSource}, run in a child process that modes stop (see the
    module's documentation).

    @return: what the child printed.
    """
    code = (
        "import json, sys\n"
        "from tests.localfiles import describeSource\n"
        "print(json.dumps(describeSource(sys.argv[1], sys.argv[2])))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, kind, os.path.abspath(path)],
        cwd=_ROOT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        timeout=60,
        preexec_fn=_dropModeOverrides if os.geteuid() == 0 else None,
    )
    if done.returncode != 0:
        testCase.fail(f"the child failed ({done.returncode}): {done.stderr.decode()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result
