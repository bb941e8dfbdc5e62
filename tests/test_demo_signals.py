"""
Tests for how L{imapmig.commands.demo} ends: whatever stops it (a stop signal
during the run or while it keeps serving, C{SIGKILL}, C{make} stopped),
the daemon and the Dovecot it started, and their children, are gone.

Each test runs the demo as a child process on a private Dovecot, reads
its console for the pids it prints, takes every process below it by pid
(L{tests.processwatch}: pidfds, so that tests running beside it cannot
interfere), signals it, and waits, with a generous deadline, for each of
those processes to exit.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

from twisted.trial.unittest import SynchronousTestCase

import imapmig
from imapmig.testing.dovecot import requireDovecot
from tests.processwatch import LineReader, ProcessWatch, defaultSignals, descendants
from tests.support import sourceTreeEnvironment

_PID = re.compile(r"\(pid (\d+)\)")


class DemoRun:
    """
    The demo running as a child process of the test.
    """

    def __init__(
        self,
        testCase: SynchronousTestCase,
        *arguments: str,
        program: tuple[str, ...] = ("-m", "imapmig.demo"),
        stdin: int = subprocess.DEVNULL,
    ) -> None:
        """
        @param stdin: the demo's standard input (not a terminal by
            default: it exits after its check).
        """
        # A short directory: Dovecot's sockets then live inside it, and
        # nothing is left in /tmp even when the demo is killed.
        self.directory = tempfile.mkdtemp(prefix="imapmig-demo-")
        testCase.addCleanup(shutil.rmtree, self.directory, True)
        self.process = subprocess.Popen(
            self.command(program, arguments),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=sourceTreeEnvironment(),
            cwd=self.directory,
            preexec_fn=defaultSignals,
        )  # fmt: skip
        testCase.addCleanup(self._cleanUp)
        self.output = LineReader(self.process)
        self.watch: ProcessWatch | None = None

    def command(self, program: tuple[str, ...], arguments: tuple[str, ...]) -> list[str]:
        """
        The command line that runs the demo in L{directory}.
        """
        demoDirectory = os.path.join(self.directory, "d")
        return [sys.executable, *program, "--directory", demoDirectory, *arguments]

    def started(self) -> tuple[int, int]:
        """
        Wait until the demo has started Dovecot and the daemon, and take
        every process below it.

        @return: the pids of Dovecot's master and of the daemon.
        """
        dovecot = int(_PID.findall(self.output.until("== Dovecot (pid"))[0])
        daemon = int(_PID.findall(self.output.until("== Running (pid"))[0])
        below = descendants(self.process.pid)
        self.watch = ProcessWatch(below)
        assert dovecot in below and daemon in below, (dovecot, daemon, below)
        return dovecot, daemon

    def ended(self) -> tuple[int, list[int], str]:
        """
        Wait for the demo to exit, and for every process taken by
        L{started} to exit.

        @return: the demo's exit status, the pids still running and the
            whole console.
        """
        assert self.watch is not None
        console = self.output.rest()
        status = self.process.wait(60)
        return status, self.watch.remaining(30), console

    def finished(self) -> tuple[int, str]:
        """
        Wait for the demo to end by itself.

        @return: its exit status and its whole console.
        """
        console = self.output.rest()
        return self.process.wait(60), console

    def _cleanUp(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        if self.watch is not None:
            self.watch.killRemaining()


class DemoSignalTests(SynchronousTestCase):
    """
    The demo stops what it started, however it is stopped.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def stopDuringRun(self, signum: int) -> None:
        """
        Send C{signum} to the demo as soon as it has started the daemon
        (long before 300 messages are migrated and checked) and check that
        it exits with 128 + the signal's number, leaving nothing running.
        """
        run = DemoRun(self, "--messages", "300")
        run.started()
        run.process.send_signal(signum)
        status, remaining, console = run.ended()
        self.assertEqual(remaining, [], console)
        self.assertEqual(status, 128 + signum, console)
        self.assertIn(f"== Stopped by {signal.Signals(signum).name}", console)

    def test_sigtermDuringRun(self) -> None:
        """
        C{SIGTERM} (kill, systemd) during the migration stops the daemon
        and Dovecot; the demo exits 143.
        """
        self.stopDuringRun(signal.SIGTERM)

    def test_sigintDuringRun(self) -> None:
        """
        C{SIGINT} (Ctrl-C) during the migration stops the daemon and
        Dovecot; the demo exits 130.
        """
        self.stopDuringRun(signal.SIGINT)

    def test_sighupDuringRun(self) -> None:
        """
        C{SIGHUP} (the terminal closed) during the migration stops the
        daemon and Dovecot; the demo exits 129.
        """
        self.stopDuringRun(signal.SIGHUP)

    def test_sigtermWhileServing(self) -> None:
        """
        With C{--keep}, once the demo has checked the destination and
        serves the status page, C{SIGTERM} is the expected way to end it:
        the daemon and Dovecot stop and the exit status is the check's (0).
        """
        run = DemoRun(self, "--messages", "30", "--keep")
        run.started()
        run.output.until("== The daemon keeps serving")
        self.assertIn("== Demo passed", "\n".join(run.output.lines))
        run.process.send_signal(signal.SIGTERM)
        status, remaining, console = run.ended()
        self.assertEqual(remaining, [], console)
        self.assertEqual(status, 0, console)
        # Under twistd, whose own start line names twistd's version, the
        # daemon names imapmig's.
        with open(os.path.join(run.directory, "d", "imapmig.log")) as f:
            self.assertIn(f"imapmig {imapmig.__version__}: configuration ", f.read())

    def test_sigkill(self) -> None:
        """
        The demo killed (C{SIGKILL}, which it cannot catch): the kernel
        sends its children C{SIGTERM} (C{PR_SET_PDEATHSIG}) and they stop.
        """
        run = DemoRun(self, "--messages", "30", "--keep")
        run.started()
        run.output.until("== The daemon keeps serving")
        run.process.send_signal(signal.SIGKILL)
        status, remaining, console = run.ended()
        self.assertEqual(remaining, [], console)
        self.assertEqual(status, -signal.SIGKILL)

    def test_makeStopped(self) -> None:
        """
        C{make} given C{SIGTERM} while it runs the demo (the recipe of
        C{make demo}) passes it on, and the demo stops what it started.
        """
        make = shutil.which("make")
        if make is None:
            self.fail("make is not installed")
        run = _MakeRun(self, make)
        run.started()
        run.process.send_signal(signal.SIGTERM)
        status, remaining, console = run.ended()
        self.assertEqual(remaining, [], console)
        self.assertIn("== Stopped by SIGTERM", console)
        # make reports the recipe's failure, then ends itself by the
        # signal it received.
        self.assertNotEqual(status, 0, console)


class DemoPortTests(SynchronousTestCase):
    """
    The demo watches the status page of the daemon it started, whatever
    else listens on port 8025.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def test_portTakenMeanwhile(self) -> None:
        """
        When the port the demo found free is taken before its daemon
        listens (another demo started at the same time), the daemon exits
        saying so; the demo says so too, starts it again on a port the
        kernel picks, and watches that one.
        """
        held = socket.socket()
        self.addCleanup(held.close)
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        # The demo as python -m runs it, its free-port check answering a
        # port that is in fact taken.
        program = (
            "-c",
            "import sys, imapmig.commands.demo as demo;"
            f" demo.statusPort = lambda: {port};"
            " sys.argv[0] = 'imapmig.demo';"
            " raise SystemExit(demo.main())",
        )
        run = DemoRun(self, "--messages", "10", program=program)
        status, console = run.finished()
        self.assertEqual(status, 0, console)
        self.assertIn(f"== Port {port} was taken meanwhile", console)
        self.assertEqual(console.count("== Running (pid"), 2, console)
        pages = re.findall(r"== Status page: +http://127\.0\.0\.1:(\d+)/", console)
        self.assertEqual(len(pages), 1, console)
        self.assertNotEqual(int(pages[0]), port)
        self.assertIn("== Demo passed", console)


class _MakeRun(DemoRun):
    """
    The demo run by C{make}, with the recipe of the Makefile's C{demo}
    target (its C{setup} prerequisite aside: it installs packages).
    """

    def __init__(self, testCase: SynchronousTestCase, make: str) -> None:
        self._make = make
        super().__init__(testCase)

    def command(self, program: tuple[str, ...], arguments: tuple[str, ...]) -> list[str]:
        """
        C{make demo} with a Makefile of that one recipe, in L{directory}.
        """
        makefile = os.path.join(self.directory, "Makefile")
        with open(makefile, "w") as f:
            f.write(
                f"BIN = {os.path.dirname(sys.executable)}\n"
                "demo:\n"
                "\t$(BIN)/python -m imapmig.demo --messages 300"
                f" --directory {os.path.join(self.directory, 'd')}\n"
            )
        return [self._make, "-f", makefile, "demo"]
