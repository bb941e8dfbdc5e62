# -*- test-case-name: tests.test_sdnotify -*-
"""
Tests for L{imapmig.daemon.sdnotify}, L{imapmig.daemon.notifyservice} and
L{imapmig.daemon.listener}: systemd's notifications, sent to a real C{AF_UNIX}
datagram socket, timed by a memory reactor's clock.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.error import CannotListenError, ConnectionRefusedError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import parseConfig
from imapmig.daemon.listener import ListenerService
from imapmig.errors import StatusListenerFailed
from imapmig.daemon.notifyservice import (
    STOPPING_STATUS,
    NotifyPhase,
    SystemdNotifyService,
    formatETA,
    heldText,
    statusLine,
)
from imapmig.job.machine import JobMachines
from imapmig.progress import JobState, MigrationProgress
from imapmig.daemon.sdnotify import (
    Notifier,
    encodeMessage,
    notifierFromEnvironment,
    socketAddress,
    unsetNotifyEnvironment,
    watchdogSeconds,
)
from imapmig.daemon.service import buildService
from imapmig.state.memory import MemoryStateStore
from tests.test_service import makeMaildir


class NotifySocket:
    """
    A datagram socket systemd would listen on, bound in a fresh short
    directory (Unix socket paths are short), read without blocking.
    """

    def __init__(self, testCase: SynchronousTestCase, abstract: bool = False) -> None:
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        testCase.addCleanup(self.socket.close)
        if abstract:
            name = f"imapmig-test-{os.getpid()}-{id(self)}"
            self.socket.bind("\0" + name)
            self.environment = "@" + name
        else:
            directory = tempfile.mkdtemp(prefix="imapmig-sd-")
            testCase.addCleanup(shutil.rmtree, directory, True)
            self.environment = os.path.join(directory, "notify")
            self.socket.bind(self.environment)
        self.socket.setblocking(False)

    def received(self) -> list[bytes]:
        """
        Every datagram received since the last call.
        """
        datagrams = []
        while True:
            try:
                datagrams.append(self.socket.recv(65536))
            except BlockingIOError:
                return datagrams

    def messages(self) -> list[dict[str, str]]:
        """
        L{received}, each datagram parsed into its assignments.
        """
        parsed = []
        for datagram in self.received():
            lines = datagram.decode("utf-8").splitlines()
            parsed.append(dict(line.split("=", 1) for line in lines))
        return parsed


class EncodingTests(SynchronousTestCase):
    """
    L{encodeMessage} and L{socketAddress}.
    """

    def test_fieldsInOrder(self) -> None:
        """
        Each field is a C{KEY=VALUE} line, in the mapping's order.
        """
        self.assertEqual(
            encodeMessage({"READY": "1", "STATUS": "3 of 5 jobs done"}),
            b"READY=1\nSTATUS=3 of 5 jobs done\n",
        )

    def test_lineBreaksFlattened(self) -> None:
        """
        A line break in a value becomes a space: a value cannot add an
        assignment of its own.
        """
        self.assertEqual(
            encodeMessage({"STATUS": "a\nREADY=1\r\nb\rc"}), b"STATUS=a READY=1 b c\n"
        )

    def test_utf8(self) -> None:
        """
        Values are sent in UTF-8.
        """
        self.assertEqual(encodeMessage({"STATUS": "j\u00f6b"}), "STATUS=j\u00f6b\n".encode())

    def test_badKeys(self) -> None:
        """
        A key that is not upper-case letters, digits and underscores, or
        no field at all, is a L{ValueError}.
        """
        for bad in ("ready", "STATUS=X", "A\nB", "", "1A"):
            self.assertRaises(ValueError, encodeMessage, {bad: "1"})
        self.assertRaises(ValueError, encodeMessage, {})

    def test_addresses(self) -> None:
        """
        An absolute path is a path; C{@name} an abstract name; anything
        else no address.
        """
        self.assertEqual(socketAddress("/run/systemd/notify"), "/run/systemd/notify")
        self.assertEqual(socketAddress("@sd-notify"), "\0sd-notify")
        for other in ("@", "relative/path", "vsock:2:1234", ""):
            self.assertIsNone(socketAddress(other))


class NotifierTests(SynchronousTestCase):
    """
    L{Notifier} sends one datagram per notification and never raises.
    """

    def test_path(self) -> None:
        """
        A notification arrives as one datagram at a socket path.
        """
        listener = NotifySocket(self)
        notifier = notifierFromEnvironment({"NOTIFY_SOCKET": listener.environment})
        assert notifier is not None
        self.addCleanup(notifier.close)
        self.assertTrue(notifier.send({"READY": "1", "STATUS": "ok"}))
        self.assertTrue(notifier.send({"WATCHDOG": "1"}))
        self.assertEqual(listener.received(), [b"READY=1\nSTATUS=ok\n", b"WATCHDOG=1\n"])

    def test_abstract(self) -> None:
        """
        C{@name} reaches the abstract socket C{name}.
        """
        listener = NotifySocket(self, abstract=True)
        notifier = notifierFromEnvironment({"NOTIFY_SOCKET": listener.environment})
        assert notifier is not None
        self.addCleanup(notifier.close)
        self.assertTrue(notifier.send({"READY": "1"}))
        self.assertEqual(listener.received(), [b"READY=1\n"])

    def test_unset(self) -> None:
        """
        Without C{NOTIFY_SOCKET} (or with it empty) there is no notifier.
        """
        self.assertIsNone(notifierFromEnvironment({}))
        self.assertIsNone(notifierFromEnvironment({"NOTIFY_SOCKET": ""}))

    def test_notAUnixSocket(self) -> None:
        """
        A C{NOTIFY_SOCKET} that names no Unix socket gives no notifier, and
        a warning naming it.
        """
        with capturedLogs() as events:
            self.assertIsNone(notifierFromEnvironment({"NOTIFY_SOCKET": "vsock:2:99"}))
        [event] = events
        self.assertEqual((event["log_level"], event["socket"]), (LogLevel.warn, "vsock:2:99"))

    def test_sendErrorLoggedOnce(self) -> None:
        """
        A notification that cannot be sent (no socket there) is dropped:
        C{send} returns L{False}; the first failure is logged as an error
        naming the socket, the next ones are not, until one gets through.
        """
        directory = tempfile.mkdtemp(prefix="imapmig-sd-")
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "notify")
        notifier = Notifier(path)
        self.addCleanup(notifier.close)
        with capturedLogs() as events:
            self.assertFalse(notifier.send({"READY": "1"}))
            self.assertFalse(notifier.send({"WATCHDOG": "1"}))
        [event] = events
        self.assertEqual(event["log_level"], LogLevel.error)
        self.assertEqual(event["socket"], path)
        self.assertEqual(event["fields"], "READY")
        self.assertIn("No such file", event["error"])
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(listener.close)
        listener.bind(path)
        with capturedLogs() as events:
            self.assertTrue(notifier.send({"WATCHDOG": "1"}))
        self.assertEqual(list(events), [])
        listener.close()
        os.unlink(path)
        with capturedLogs() as events:
            self.assertFalse(notifier.send({"WATCHDOG": "1"}))
            self.assertFalse(notifier.send({"WATCHDOG": "1"}))
        self.assertEqual(len(events), 1)

    def test_fullQueueDoesNotBlock(self) -> None:
        """
        When the receiver does not read and its queue fills up, sending
        fails at once (dropped, logged once) rather than blocking.
        """
        listener = NotifySocket(self)
        listener.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        notifier = Notifier(listener.environment)
        self.addCleanup(notifier.close)
        with capturedLogs() as events:
            sent = [notifier.send({"STATUS": "x" * 200}) for _ in range(2000)]
        self.assertIn(False, sent)
        self.assertTrue(sent[0])
        self.assertEqual([event["log_level"] for event in events], [LogLevel.error])

    def test_closed(self) -> None:
        """
        Nothing is sent once closed.
        """
        listener = NotifySocket(self)
        notifier = Notifier(listener.environment)
        notifier.send({"READY": "1"})
        notifier.close()
        self.assertFalse(notifier.send({"WATCHDOG": "1"}))
        self.assertEqual(listener.received(), [b"READY=1\n"])


class EnvironmentTests(SynchronousTestCase):
    """
    L{watchdogSeconds} and L{unsetNotifyEnvironment}.
    """

    def test_watchdog(self) -> None:
        """
        C{WATCHDOG_USEC} is the timeout in microseconds, for this process
        when C{WATCHDOG_PID} is unset or names it.
        """
        self.assertEqual(watchdogSeconds({"WATCHDOG_USEC": "400000"}, 42), 0.4)
        self.assertEqual(
            watchdogSeconds({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "42"}, 42), 60.0
        )

    def test_noWatchdog(self) -> None:
        """
        Without C{WATCHDOG_USEC} there is no watchdog.
        """
        self.assertIsNone(watchdogSeconds({}, 42))
        self.assertIsNone(watchdogSeconds({"WATCHDOG_PID": "42"}, 42))

    def test_watchdogOfAnotherProcess(self) -> None:
        """
        A C{WATCHDOG_PID} naming another process (a parent that exec'd a
        wrapper, say) means this process does not pet the watchdog.
        """
        with capturedLogs() as events:
            self.assertIsNone(
                watchdogSeconds({"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "41"}, 42)
            )
        self.assertEqual(list(events), [])

    def test_invalidWatchdog(self) -> None:
        """
        Values that are not positive integers give no watchdog, and a
        warning.
        """
        for environ in (
            {"WATCHDOG_USEC": "soon"},
            {"WATCHDOG_USEC": "0"},
            {"WATCHDOG_USEC": "-5"},
            {"WATCHDOG_USEC": "400000", "WATCHDOG_PID": "me"},
        ):
            with capturedLogs() as events:
                self.assertIsNone(watchdogSeconds(environ, 42))
            self.assertEqual([e["log_level"] for e in events], [LogLevel.warn], environ)

    def test_unset(self) -> None:
        """
        systemd's three variables are removed, nothing else.
        """
        environ = {
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WATCHDOG_USEC": "1",
            "WATCHDOG_PID": "2",
            "PATH": "/usr/bin",
        }
        unsetNotifyEnvironment(environ)
        self.assertEqual(environ, {"PATH": "/usr/bin"})
        unsetNotifyEnvironment(environ)
        self.assertEqual(environ, {"PATH": "/usr/bin"})


def _summary(
    jobs: dict[str, int] | None = None,
    counted: int | None = None,
    done: int = 0,
    failed: int = 0,
    rate: float = 0.0,
    eta: float | None = None,
    finished: bool = False,
) -> dict[str, object]:
    states = {state.value: 0 for state in JobState}
    states.update(jobs or {})
    total = sum(states.values())
    return {
        "run": {"finished_at": 1000.0 if finished else None},
        "totals": {
            "jobs": states,
            "jobs_total": total,
            "jobs_counted": total if counted is None else counted,
            "messages_done": done,
            "messages_failed": failed,
            "messages_per_second": rate,
            "eta_seconds": eta,
        },
    }


class StatusLineTests(SynchronousTestCase):
    """
    L{statusLine}: what C{systemctl status} shows.
    """

    def test_running(self) -> None:
        """
        Jobs done of all, messages migrated, the rate and the ETA in hours
        and minutes.
        """
        summary = _summary(
            {"done": 3, "running": 2, "queued": 115}, done=41200, rate=850.4, eta=7800
        )
        self.assertEqual(
            statusLine(summary), "3 of 120 jobs done, 41,200 msgs, 850 msg/s, ETA 02:10"
        )

    def test_noJobs(self) -> None:
        """
        A configuration without jobs says so.
        """
        self.assertEqual(statusLine(_summary()), "no jobs")

    def test_notCounted(self) -> None:
        """
        While some sources are being counted there is no ETA yet.
        """
        summary = _summary({"running": 1, "queued": 1}, counted=1, done=5, rate=2.5)
        self.assertEqual(
            statusLine(summary), "0 of 2 jobs done, 5 msgs, 2.5 msg/s, counting sources"
        )

    def test_paused(self) -> None:
        """
        Paused jobs are counted while others move; without a rate to go
        by, the ETA is unknown.
        """
        summary = _summary({"done": 1, "paused": 1, "running": 1}, done=1)
        self.assertEqual(
            statusLine(summary), "1 of 3 jobs done, 1 paused, 1 msg, 0 msg/s, ETA unknown"
        )

    def test_everyJobPaused(self) -> None:
        """
        With every job paused by the admin the line says so, as the page
        does, reading the status JSON's C{totals.held}: no rate, no ETA.
        """
        clock = Clock()
        clock.advance(1700000000)
        progress = MigrationProgress(clock.seconds)
        machines = JobMachines(progress, clock)
        for name in ("a", "b", "c"):
            progress.addJob(name)
            machines.job(name).pause("192.0.2.7")
        progress.addJob("d")
        machines.job("d").start()
        machines.job("d").succeed()
        self.assertEqual(
            statusLine(progress.summary()),
            "1 of 4 jobs done, 0 msgs, 3 jobs paused by the admin",
        )

    def test_waitingForBudgets(self) -> None:
        """
        Jobs waiting for their daily budgets say until when (UTC, with the
        date past a day), beside those paused.
        """
        clock = Clock()
        clock.advance(1700000000)  # 2023-11-14 22:13:20 UTC
        progress = MigrationProgress(clock.seconds)
        machines = JobMachines(progress, clock)
        for name in ("a", "b"):
            progress.addJob(name)
            machines.job(name).start()
            machines.job(name).defer("daily budget: 1 GB", 1700006400)
        self.assertEqual(
            statusLine(progress.summary()),
            "0 of 2 jobs done, 0 msgs, 2 jobs waiting for daily budgets until 00:00 UTC",
        )
        progress.addJob("c")
        machines.job("c").pause("192.0.2.7")
        self.assertEqual(
            statusLine(progress.summary()),
            "0 of 3 jobs done, 0 msgs, 1 job paused by the admin,"
            " 2 jobs waiting for daily budgets until 00:00 UTC",
        )
        self.assertEqual(
            heldText({"jobs": {"deferred": 1}, "until": 1700092800.0}, 1700000000.0),
            "1 job waiting for daily budgets until 2023-11-16 00:00 UTC",
        )

    def test_allDone(self) -> None:
        """
        Once every job has ended the line says the run finished, without a
        rate.
        """
        summary = _summary({"done": 1}, done=12345, finished=True)
        self.assertEqual(statusLine(summary), "finished: 1 of 1 job done, 12,345 msgs")

    def test_failures(self) -> None:
        """
        Failed jobs and failed messages are counted.
        """
        summary = _summary({"done": 2, "failed": 1, "running": 1}, done=900, failed=7,
                           rate=12, eta=30)  # fmt: skip
        self.assertEqual(
            statusLine(summary),
            "2 of 4 jobs done, 1 failed, 900 msgs, 7 failed, 12 msg/s, ETA 00:01",
        )

    def test_fromProgress(self) -> None:
        """
        The line reads L{MigrationProgress.summary} as it is.
        """
        progress = MigrationProgress(lambda: 100.0)
        job = progress.addJob("a")
        job.showState(lambda: JobState.RUNNING)
        job.census(10, None, 1, [])
        job.messagesDone = 4
        progress.addJob("b").showState(lambda: JobState.DONE)
        self.assertEqual(
            statusLine(progress.summary()),
            "1 of 2 jobs done, 4 msgs, 0 msg/s, counting sources",
        )

    def test_eta(self) -> None:
        """
        ETAs are rounded up to the minute, with days past a day.
        """
        self.assertEqual(
            [formatETA(s) for s in (0, 1, 60, 61, 3599, 7800, 86400, 90000 + 600)],
            ["00:00", "00:01", "00:01", "00:02", "01:00", "02:10", "1d 00:00", "1d 01:10"],
        )


class _Listening:
    """
    A status listener's L{whenListening}, fired by the test.
    """

    def __init__(self) -> None:
        self.waiting: list[Deferred[None]] = []

    def __call__(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.waiting.append(d)
        return d


class NotifyServiceTests(SynchronousTestCase):
    """
    L{SystemdNotifyService} with a memory reactor's clock.
    """

    def setUp(self) -> None:
        self.listener = NotifySocket(self)
        self.notifier = Notifier(self.listener.environment)
        self.reactor = MemoryReactorClock()
        self.summary = _summary({"running": 1}, done=10, rate=1.0, eta=90)
        self.listening = _Listening()

    def service(self, watchdog: float | None = None) -> SystemdNotifyService:
        return SystemdNotifyService(
            self.notifier,
            self.reactor,
            lambda: self.summary,
            self.listening,
            watchdog,
            monotonic=lambda: 123456789,
        )

    def shutdown(self) -> None:
        """
        Run the reactor's before-shutdown triggers, as a shutdown does.
        """
        for f, args, kwargs in self.reactor.triggers["before"]["shutdown"]:
            f(*args, **kwargs)

    def test_readyOnceRunningAndListening(self) -> None:
        """
        C{READY=1}, with a first status line, comes once the reactor runs
        and the status listener is bound: not before either.
        """
        service = self.service()
        service.startService()
        self.assertEqual(self.listening.waiting, [])
        self.reactor.run()
        self.assertEqual(self.listener.received(), [])
        [listening] = self.listening.waiting
        listening.callback(None)
        self.assertEqual(
            self.listener.messages(),
            [{"READY": "1", "STATUS": "0 of 1 job done, 10 msgs, 1.0 msg/s, ETA 00:02"}],
        )
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_readyWithoutListener(self) -> None:
        """
        Without a status listener, C{READY=1} comes as the reactor runs.
        """
        service = SystemdNotifyService(self.notifier, self.reactor, lambda: self.summary)
        service.startService()
        self.reactor.run()
        self.assertEqual([m["READY"] for m in self.listener.messages()], ["1"])
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_notListening(self) -> None:
        """
        A listener that fails to bind means no C{READY=1}: a C{STATUS=}
        saying why, and an error logged.
        """
        service = SystemdNotifyService(
            self.notifier,
            self.reactor,
            lambda: self.summary,
            lambda: fail(CannotListenError("127.0.0.1", 8025, OSError("in use"))),
        )
        service.startService()
        with capturedLogs() as events:
            self.reactor.run()
        [message] = self.listener.messages()
        self.assertEqual(list(message), ["STATUS"])
        self.assertIn("not ready: the status listener is not listening", message["STATUS"])
        self.assertEqual([e["log_level"] for e in events], [LogLevel.error])
        self.reactor.advance(60)
        self.assertEqual(self.listener.received(), [])
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_statusCadence(self) -> None:
        """
        After C{READY=1}, a C{STATUS=} line every 5 s, from the summary as
        it is then.
        """
        service = self.service()
        service.startService()
        self.reactor.run()
        self.listening.waiting[0].callback(None)
        self.listener.received()
        self.reactor.advance(4.9)
        self.assertEqual(self.listener.received(), [])
        self.summary = _summary({"done": 1}, done=11, finished=True)
        self.reactor.advance(0.1)
        self.assertEqual(
            self.listener.messages(), [{"STATUS": "finished: 1 of 1 job done, 11 msgs"}]
        )
        self.reactor.pump([5.0] * 3)
        self.assertEqual(len(self.listener.received()), 3)
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_statusBugDoesNotStopUpdates(self) -> None:
        """
        A summary that raises (a bug) is logged with its traceback; no
        status line then, but C{READY=1} is sent all the same, and the
        next line comes.
        """
        broken = [True]

        def summary() -> dict[str, object]:
            if broken:
                broken.pop()
                raise ZeroDivisionError()
            return self.summary

        service = SystemdNotifyService(self.notifier, self.reactor, summary)
        service.startService()
        with capturedLogs() as events:
            self.reactor.run()
        self.assertEqual(self.listener.messages(), [{"READY": "1"}])
        broken.append(True)
        with capturedLogs() as more:
            self.reactor.advance(5)
        self.assertEqual([e["log_level"] for e in [*events, *more]], [LogLevel.critical] * 2)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 2)
        self.assertEqual(self.listener.received(), [])
        self.reactor.advance(5)
        self.assertEqual(len(self.listener.received()), 1)
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_watchdogInterval(self) -> None:
        """
        With a watchdog timeout, C{WATCHDOG=1} comes at once and every
        half of it, from the reactor's clock.
        """
        service = self.service(watchdog=0.4)
        service.startService()
        self.assertEqual(self.listener.received(), [b"WATCHDOG=1\n"])
        self.reactor.advance(0.19)
        self.assertEqual(self.listener.received(), [])
        self.reactor.advance(0.01)
        self.assertEqual(self.listener.received(), [b"WATCHDOG=1\n"])
        self.reactor.pump([0.2] * 5)
        self.assertEqual(self.listener.received(), [b"WATCHDOG=1\n"] * 5)
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_noWatchdog(self) -> None:
        """
        Without a watchdog timeout, no C{WATCHDOG=1}.
        """
        service = self.service()
        service.startService()
        self.reactor.advance(100)
        self.assertEqual(self.listener.received(), [])
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_stopping(self) -> None:
        """
        The start of shutdown (a before-shutdown trigger) sends
        C{STOPPING=1} with a status saying so, once; the watchdog and
        status timers stop.
        """
        service = self.service(watchdog=2)
        service.startService()
        self.reactor.run()
        self.listening.waiting[0].callback(None)
        self.listener.received()
        self.shutdown()
        self.assertIs(service.phase, NotifyPhase.STOPPING)
        self.assertEqual(
            self.listener.messages(), [{"STOPPING": "1", "STATUS": STOPPING_STATUS}]
        )
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        service.stopService()
        self.shutdown()
        self.assertEqual(self.listener.received(), [])
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_stopServiceAlone(self) -> None:
        """
        Stopped without a reactor shutdown, the service says
        C{STOPPING=1} all the same, and sends nothing after.
        """
        service = self.service(watchdog=2)
        service.startService()
        self.listener.received()
        service.stopService()
        self.assertEqual(self.listener.messages()[0]["STOPPING"], "1")
        self.reactor.run()
        self.assertEqual(self.listening.waiting, [])
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_listeningAfterStop(self) -> None:
        """
        A listener bound after the stop began sends no C{READY=1}.
        """
        service = self.service()
        service.startService()
        self.reactor.run()
        service.stopService()
        self.listener.received()
        self.listening.waiting[0].callback(None)
        self.assertEqual(self.listener.received(), [])
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_reload(self) -> None:
        """
        A reload sends C{RELOADING=1} with C{MONOTONIC_USEC}, then
        C{READY=1} with a status saying whether it applied.
        """
        service = self.service()
        service.startService()
        self.reactor.run()
        self.listening.waiting[0].callback(None)
        self.listener.received()
        service.reloadStarted()
        self.assertIs(service.phase, NotifyPhase.RELOADING)
        service.reloadEnded(True)
        self.assertIs(service.phase, NotifyPhase.READY)
        service.reloadStarted()
        service.reloadEnded(False)
        line = statusLine(self.summary)
        self.assertEqual(
            self.listener.messages(),
            [
                {"RELOADING": "1", "MONOTONIC_USEC": "123456789",
                 "STATUS": "reloading the configuration"},
                {"READY": "1", "STATUS": f"configuration reloaded; {line}"},
                {"RELOADING": "1", "MONOTONIC_USEC": "123456789",
                 "STATUS": "reloading the configuration"},
                {"READY": "1", "STATUS": "reload failed: configuration invalid, nothing"
                 f" changed (see the log); {line}"},
            ],
        )  # fmt: skip
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_reloadBeforeReady(self) -> None:
        """
        A reload before the daemon was ready, or while it stops, sends
        nothing: systemd still waits for the first C{READY=1}, or the
        stop.
        """
        service = self.service()
        service.startService()
        self.reactor.run()
        service.reloadStarted()
        service.reloadEnded(True)
        self.assertEqual(self.listener.received(), [])
        self.listening.waiting[0].callback(None)
        self.listener.received()
        self.shutdown()
        self.listener.received()
        service.reloadStarted()
        service.reloadEnded(True)
        self.assertEqual(self.listener.received(), [])
        service.stopService()
        self.assertEqual(self.reactor.getDelayedCalls(), [])


class _Endpoint:
    """
    A server endpoint whose C{listen} returns what the test says.
    """

    def __init__(self, result: Deferred[IListeningPort]) -> None:
        self.result = result

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        return self.result


class _Port:
    """
    A listening port that records its stop.
    """

    stopped = False

    def stopListening(self) -> None:
        self.stopped = True


class ListenerServiceTests(SynchronousTestCase):
    """
    L{ListenerService}.
    """

    factory = Factory.forProtocol(Protocol)

    def test_bound(self) -> None:
        """
        L{ListenerService.whenListening} fires once the port is bound (at
        once, after); stopping the service stops listening.
        """
        pending: Deferred[IListeningPort] = Deferred()
        service = ListenerService(_Endpoint(pending), self.factory, "tcp:8025")  # type: ignore[arg-type]
        service.startService()
        before = service.whenListening()
        self.assertNoResult(before)
        port = _Port()
        pending.callback(port)  # type: ignore[arg-type]
        self.successResultOf(before)
        self.successResultOf(service.whenListening())
        self.successResultOf(service.stopService())
        self.assertTrue(port.stopped)

    def test_failsAtOnce(self) -> None:
        """
        A port that cannot be bound at once fails the start with
        L{StatusListenerFailed} carrying the endpoint's error, after a
        critical log line naming the endpoint and the reason.
        """
        error = CannotListenError("127.0.0.1", 8025, OSError("Address already in use"))
        service = ListenerService(_Endpoint(fail(error)), self.factory, "tcp:8025")  # type: ignore[arg-type]
        with capturedLogs() as events:
            failed = self.assertRaises(StatusListenerFailed, service.privilegedStartService)
        self.assertIs(failed.reason.value, error)
        [event] = events
        self.assertEqual((event["log_level"], event["endpoint"]), (LogLevel.critical, "tcp:8025"))
        self.assertIn("Address already in use", formatEvent(event))
        # The exception's text, all a daemonizing twistd's parent shows (its
        # first 100 octets), puts the reason first.
        self.assertEqual(str(failed), "Address already in use (tcp:8025)")
        self.failureResultOf(service.whenListening(), CannotListenError)

    def test_failsLater(self) -> None:
        """
        An endpoint that fails later is logged as an error naming it, and
        L{ListenerService.whenListening} fails.
        """
        pending: Deferred[IListeningPort] = Deferred()
        service = ListenerService(_Endpoint(pending), self.factory, "unix:/x")  # type: ignore[arg-type]
        service.startService()
        waiting = service.whenListening()
        with capturedLogs() as events:
            pending.errback(Failure(CannotListenError(None, "/x", OSError("denied"))))
        [event] = events
        self.assertEqual((event["log_level"], event["endpoint"]), (LogLevel.error, "unix:/x"))
        self.failureResultOf(waiting, CannotListenError)
        self.successResultOf(service.stopService())

    def test_stopWhilePending(self) -> None:
        """
        Stopping before the port is bound gives up listening, quietly.
        """
        pending: Deferred[IListeningPort] = Deferred()
        service = ListenerService(_Endpoint(pending), self.factory, "tcp:8025")  # type: ignore[arg-type]
        service.startService()
        waiting = service.whenListening()
        with capturedLogs() as events:
            self.successResultOf(service.stopService())
        self.assertEqual(list(events), [])
        self.failureResultOf(waiting, CancelledError)


def _config(testCase: SynchronousTestCase, status: bool) -> Any:
    """
    A configuration of one job to a server nothing listens for, with or
    without a status listener.
    """
    return parseConfig(
        {
            "state": os.path.abspath(testCase.mktemp()),
            "status": {"listen": "tcp:8125:interface=127.0.0.1"} if status else "off",
            "servers": {"s": {"endpoint": "tcp:127.0.0.1:1143", "starttls": "off"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"maildir": makeMaildir(testCase)},
                    "destination": {"server": "s", "user": "u", "password": "p"},
                }
            ],
        },
        "test.yaml",
    )


class BuildServiceTests(SynchronousTestCase):
    """
    L{buildService} adds the notifier when systemd asks for it.
    """

    def test_notifies(self) -> None:
        """
        With C{NOTIFY_SOCKET} and C{WATCHDOG_USEC} for this process, the
        daemon pets the watchdog from its start and is ready once its
        status listener listens and the reactor runs; systemd's variables
        are taken out of the environment (children do not inherit them);
        the notifier observes reloads.
        """
        listener = NotifySocket(self)
        environ = {
            "NOTIFY_SOCKET": listener.environment,
            "WATCHDOG_USEC": "400000",
            "WATCHDOG_PID": str(os.getpid()),
            "HOME": "/root",
        }
        reactor = MemoryReactorClock()
        root = buildService(_config(self, True), reactor, store=MemoryStateStore(), environ=environ)
        self.assertEqual(environ, {"HOME": "/root"})
        notify = root.getServiceNamed("systemd")
        assert root.reloader is not None
        self.assertEqual(root.reloader.observers, (notify,))
        root.privilegedStartService()
        root.startService()
        self.assertEqual(len(reactor.tcpServers), 1)
        self.assertEqual(listener.received(), [b"WATCHDOG=1\n"])
        reactor.run()
        [ready] = listener.messages()
        self.assertEqual(ready["READY"], "1")
        self.assertIn("0 of 1 job done", ready["STATUS"])
        reactor.advance(0.2)
        self.assertEqual(listener.received(), [b"WATCHDOG=1\n"])
        stopped = root.stopService()
        self.assertEqual(listener.messages(), [{"STOPPING": "1", "STATUS": STOPPING_STATUS}])
        # The job's connection attempt fails (nothing listens in a memory
        # reactor): the daemon stops whole.
        for (_, _, factory, _, _), connector in zip(reactor.tcpClients, reactor.connectors):
            factory.clientConnectionFailed(connector, Failure(ConnectionRefusedError("test")))
        reactor.advance(600)
        self.successResultOf(stopped)
        self.assertEqual(listener.received(), [])
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_withoutSystemd(self) -> None:
        """
        Without C{NOTIFY_SOCKET} there is no notifier (a stray
        C{WATCHDOG_USEC} is removed all the same).
        """
        environ = {"WATCHDOG_USEC": "400000"}
        root = buildService(
            _config(self, False), MemoryReactorClock(), store=MemoryStateStore(), environ=environ
        )
        self.assertEqual(environ, {})
        self.assertRaises(KeyError, root.getServiceNamed, "systemd")
        assert root.reloader is not None
        self.assertEqual(root.reloader.observers, ())


class UnsetForChildrenTests(SynchronousTestCase):
    """
    Children the daemon spawns (a token command) inherit
    C{os.environ} as it is when spawned: without systemd's variables once
    L{buildService} has read them.
    """

    def test_osEnviron(self) -> None:
        """
        L{buildService} with the process's own environment removes
        C{NOTIFY_SOCKET} from it.
        """
        listener = NotifySocket(self)
        os.environ["NOTIFY_SOCKET"] = listener.environment
        self.addCleanup(os.environ.pop, "NOTIFY_SOCKET", None)
        root = buildService(_config(self, False), MemoryReactorClock(), store=MemoryStateStore())
        self.assertNotIn("NOTIFY_SOCKET", os.environ)
        root.getServiceNamed("systemd")
