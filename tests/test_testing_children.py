"""
Tests for L{imapmig.testing.children}: stop signals turned into
L{Stopped}, and children that the kernel stops when their parent dies.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import Stopped
from imapmig.testing.children import StopSignals
from tests.processwatch import LineReader, ProcessWatch
from tests.support import sourceTreeEnvironment


class StopSignalsTests(SynchronousTestCase):
    """
    L{StopSignals} in this process (C{signal.raise_signal} runs the
    handler before it returns).
    """

    def setUp(self) -> None:
        self.previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
        for signum, handler in self.previous.items():
            self.addCleanup(signal.signal, signum, handler)
        self.signals = StopSignals()

    def test_onceThenIgnored(self) -> None:
        """
        The first stop signal raises L{Stopped} with its number and exit
        status 128 + number; later ones are ignored while the program
        cleans up.
        """
        self.signals.install()
        self.addCleanup(self.signals.uninstall)
        stopped = self.assertRaises(Stopped, signal.raise_signal, signal.SIGTERM)
        self.assertEqual((stopped.signum, stopped.exitStatus), (signal.SIGTERM, 143))
        signal.raise_signal(signal.SIGHUP)
        self.assertEqual(self.signals.received, signal.SIGTERM)

    def test_cleaningUp(self) -> None:
        """
        Once the program cleans up (L{StopSignals.cleaningUp}, in its
        C{finally}), a first stop signal is ignored: it cannot cut the
        stopping of its children short.
        """
        self.signals.install()
        self.addCleanup(self.signals.uninstall)
        self.signals.cleaningUp()
        signal.raise_signal(signal.SIGTERM)
        self.assertIsNone(self.signals.received)

    def test_ignoredStaysIgnored(self) -> None:
        """
        A signal ignored before (C{nohup}) stays ignored; L{uninstall}
        puts back what was there.
        """
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.signals.install()
        self.assertEqual(signal.getsignal(signal.SIGHUP), signal.SIG_IGN)
        self.assertNotEqual(signal.getsignal(signal.SIGTERM), self.previous[signal.SIGTERM])
        self.signals.uninstall()
        self.assertEqual(signal.getsignal(signal.SIGTERM), self.previous[signal.SIGTERM])

    def test_deferred(self) -> None:
        """
        Inside L{StopSignals.deferred} a stop signal waits; it raises as
        the block ends.
        """
        self.signals.install()
        self.addCleanup(self.signals.uninstall)
        reached = []

        def block() -> None:
            with self.signals.deferred():
                signal.raise_signal(signal.SIGTERM)
                reached.append(True)

        self.assertRaises(Stopped, block)
        self.assertEqual(reached, [True])


_PARENT = textwrap.dedent(
    """
    import signal, subprocess, sys
    from imapmig.testing.children import dieWithParent
    # Blocked here, as StopSignals.deferred blocks them around Popen.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=dieWithParent()
    )
    print(child.pid, flush=True)
    signal.pause()
    """
)


class DieWithParentTests(SynchronousTestCase):
    """
    L{dieWithParent}: a child started with it ends when its parent is
    killed, and starts with no signal blocked.
    """

    def startParent(self, script: str) -> tuple[subprocess.Popen[bytes], int, ProcessWatch]:
        """
        Run C{script}, which starts a child and prints its pid, in a Python
        of its own; everything is killed at the test's end.

        @return: the parent, its child's pid, and a watch on the child.
        """
        parent = subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=sourceTreeEnvironment(),
        )
        self.addCleanup(parent.wait)
        self.addCleanup(parent.kill)
        assert parent.stdout is not None
        self.addCleanup(parent.stdout.close)
        child = int(LineReader(parent).until(""))
        watch = ProcessWatch([child])
        self.addCleanup(watch.killRemaining)
        return parent, child, watch

    def test_parentKilled(self) -> None:
        """
        The parent killed with C{SIGKILL}, the child gets C{SIGTERM} and
        exits; its signal mask was empty although its parent's was not.
        """
        parent, child, watch = self.startParent(_PARENT)
        with open(f"/proc/{child}/status") as f:
            blocked = [line for line in f if line.startswith("SigBlk:")]
        self.assertEqual(int(blocked[0].split()[1], 16), 0)
        parent.kill()
        self.assertEqual(parent.wait(30), -signal.SIGKILL)
        self.assertEqual(watch.remaining(30), [])

    def test_withoutIt(self) -> None:
        """
        The same child started without it outlives its killed parent: the
        test above depends on L{dieWithParent}, not on something else.
        """
        parent, child, watch = self.startParent(
            _PARENT.replace("preexec_fn=dieWithParent()", "")
        )
        parent.kill()
        parent.wait(30)
        # Had it been asked, the kernel would have signalled the child as
        # the parent exited, before the parent could be waited for.
        with open(f"/proc/{child}/status") as f:
            pending = [line for line in f if line.startswith("ShdPnd:")]
        self.assertEqual(int(pending[0].split()[1], 16), 0)
        self.assertEqual(watch.remaining(0.0), [child])

    def test_offTheMainThread(self) -> None:
        """
        Called off the main thread, it does not ask for the signal: the
        kernel sends it when the I{thread} that forked ends, and a worker
        thread ending must not stop the child it started.
        """
        import os
        import threading
        import time

        from imapmig.testing.children import dieWithParent

        started: list[subprocess.Popen[bytes]] = []
        tids: list[int] = []

        def spawn() -> None:
            tids.append(threading.get_native_id())
            started.append(
                subprocess.Popen(
                    ["sleep", "60"], stdin=subprocess.DEVNULL, preexec_fn=dieWithParent()
                )
            )

        worker = threading.Thread(target=spawn)
        worker.start()
        worker.join()
        [child] = started
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        # The kernel signals the child (were it asked to) as the thread
        # exits, before the thread leaves /proc: wait for that, not a time.
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/self/task/{tids[0]}"):
            self.assertLess(time.monotonic(), deadline)
            os.sched_yield()
        with open(f"/proc/{child.pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
        self.assertEqual(pending & (1 << (signal.SIGTERM - 1)), 0)
        self.assertIsNone(child.poll())
