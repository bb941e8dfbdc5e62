"""
Watching child processes from a test, by pid, outside any reactor: what
L{tests.test_demo_signals} and L{tests.test_testing_dovecot} use to check
that a program stopped everything it started.

A process is identified by a pidfd (C{pidfd_open}, Linux 5.3) taken while
it runs: the descriptor becomes readable when that very process exits,
whoever its parent is by then (an orphan's is init), and never names
another process that reuses the pid.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import Sequence

from imapmig.testing.privateserver import processStats

__all__ = ["LineReader", "descendants", "ProcessWatch", "defaultSignals"]


def defaultSignals() -> None:
    """
    A C{preexec_fn}: the stop signals at their default disposition in the
    child, whatever the test runner left ignored (a shell ignores C{INT}
    for a background job; a child inherits what is ignored).
    """
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


class LineReader:
    """
    The lines a child writes to a pipe, read with a deadline.

    @ivar lines: every line read so far, decoded, without line ends.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._fd = process.stdout.fileno()
        self._buffer = b""
        self.lines: list[str] = []
        self._closed = False

    def until(self, prefix: str, timeout: float = 60.0) -> str:
        """
        Read until a line starting with C{prefix}.

        @return: that line.
        @raise AssertionError: the pipe closed or C{timeout} seconds
            passed first; the message holds what was read.
        """
        for line in self.lines:
            if line.startswith(prefix):
                return line
        deadline = time.monotonic() + timeout
        while not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            readable, _, _ = select.select([self._fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                self._closed = True
            self._buffer += chunk
            *complete, self._buffer = self._buffer.split(b"\n")
            fresh = [raw.decode("utf-8", "replace") for raw in complete]
            self.lines.extend(fresh)
            for line in fresh:
                if line.startswith(prefix):
                    return line
        raise AssertionError(
            f"no line starting with {prefix!r} within {timeout} s; read:\n"
            + "\n".join(self.lines + [self._buffer.decode("utf-8", "replace")])
        )

    def rest(self, timeout: float = 60.0) -> str:
        """
        Read to the end of the pipe (the child exited and closed it).

        @return: everything read, lines joined.
        """
        try:
            self.until("\0", timeout)
        except AssertionError:
            pass
        return "\n".join(self.lines)


def descendants(pid: int) -> list[int]:
    """
    The processes below C{pid} (children, theirs, ...), from C{/proc}.
    """
    parents: dict[int, list[int]] = {}
    for entry, fields in processStats():
        parents.setdefault(int(fields[1]), []).append(entry)
    found: list[int] = []
    pending = [pid]
    while pending:
        children = parents.get(pending.pop(), [])
        found.extend(children)
        pending.extend(children)
    return found


class ProcessWatch:
    """
    Processes held by pidfd, to check that they all exit.
    """

    def __init__(self, pids: Sequence[int]) -> None:
        self._fds: dict[int, int] = {}
        for pid in pids:
            try:
                self._fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                # Already gone.
                continue

    def __len__(self) -> int:
        return len(self._fds)

    def remaining(self, timeout: float = 30.0) -> list[int]:
        """
        Wait up to C{timeout} seconds for every process to exit.

        @return: the pids still running then (empty when all exited).
        """
        deadline = time.monotonic() + timeout
        left = dict(self._fds)
        while left:
            wait = max(0.0, deadline - time.monotonic())
            poller = select.poll()
            for fd in left.values():
                poller.register(fd, select.POLLIN)
            ready = poller.poll(wait * 1000)
            for fd, _event in ready:
                for pid, each in list(left.items()):
                    if each == fd:
                        del left[pid]
            if not ready and wait == 0:
                break
        return sorted(left)

    def close(self) -> None:
        """
        Close the descriptors.
        """
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def killRemaining(self) -> None:
        """
        Kill (C{SIGKILL}) every process still running, so that a failed
        test leaves nothing behind; then close the descriptors.
        """
        for pid in self.remaining(0.0):
            try:
                signal.pidfd_send_signal(self._fds[pid], signal.SIGKILL)
            except ProcessLookupError:
                continue
        self.close()
