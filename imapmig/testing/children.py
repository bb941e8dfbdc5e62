# -*- test-case-name: tests.test_demo_signals -*-
"""
Child processes that cannot outlive the process that started them: what
the demo and C{python -m imapmig.testing.dovecot} use for the servers they
run, so that nothing is left behind however they end.

A stop signal (C{SIGTERM}, C{SIGINT}, C{SIGHUP}) is caught and the
children are stopped from a C{finally} (L{StopSignals}).  C{SIGKILL}
cannot be caught: for it each child asks the kernel, before it runs its
program, to send it C{SIGTERM} when its parent dies
(C{prctl(PR_SET_PDEATHSIG)}, Linux only: L{dieWithParent}).

Like L{imapmig.testing.dovecot}, this runs outside any reactor, in a
single-threaded program (C{PR_SET_PDEATHSIG} fires when the I{thread} that
started the child ends).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator

from imapmig.errors import Stopped

_PR_SET_PDEATHSIG = 1

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""
The signals that ask a foreground program to stop: C{kill} and systemd
(C{TERM}), Ctrl-C (C{INT}), the terminal closed (C{HUP}).
"""


def dieWithParent() -> Callable[[], None]:
    """
    A C{preexec_fn} for L{subprocess.Popen} that makes the child receive
    C{SIGTERM} when this process (the thread calling C{Popen}) dies, even
    by C{SIGKILL}, and unblocks every signal (L{StopSignals.deferred}
    blocks them around C{Popen}; a child inherits the mask).

    Where C{prctl} is missing (not Linux) only the mask is reset, and so
    it is when called off the main thread: the kernel would signal the
    child as soon as that thread ended (a worker thread of a pool), not
    when this process dies.

    @return: the function, which resolves nothing after the fork.
    """
    parent = os.getpid()
    prctl: Callable[..., int] | None = None
    if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl = libc.prctl
    allSignals = signal.valid_signals()

    def inChild() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, allSignals)
        if prctl is None:
            return
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            os._exit(127)
        # The parent may have died between the fork and the prctl: the
        # signal would then never come.
        if os.getppid() != parent:
            os._exit(127)

    return inChild


class StopSignals:
    """
    Turn the stop signals into L{Stopped} raised in the main thread, once:
    later signals are ignored while the program cleans up (its waits are
    bounded).  A signal ignored when the program started (C{nohup} ignores
    C{HUP}, a shell ignores C{INT} for a background job) stays ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._cleaningUp = False
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        """
        Install the handlers.
        """
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        """
        Put back the handlers L{install} replaced.
        """
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def cleaningUp(self) -> None:
        """
        The program is stopping what it started (its C{finally}): a stop
        signal from now on asks for nothing more and is ignored, so that
        it cannot cut the clean-up short (its waits are bounded) and leave
        a child running.
        """
        self._cleaningUp = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None or self._cleaningUp:
            return
        self.received = signum
        raise Stopped(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """
        Hold the stop signals back while the block runs (starting a child
        and keeping its handle: a signal in between would leave the child
        unknown, so never stopped); one that came meanwhile is handled as
        the block ends.
        """
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
