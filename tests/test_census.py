"""
Tests for L{imapmig.schedule.census} and L{imapmig.sources.counting}: the
sources of queued jobs counted before they run, Maildir ones by listing,
IMAP ones over census sessions (at most two at once, only when a
connection is free at once) against fakes and a real Dovecot.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from twisted.internet import reactor
from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.daemon import service
from imapmig.config import Config, JobConfig, MaildirSourceConfig, parseConfig
from imapmig.config.limits import ServerLimits
from imapmig.imap.session import IMAPSession
from imapmig.progress import JobState, MigrationProgress
from imapmig.schedule.census import SourceCensus
from imapmig.schedule.grants import ConnectionGrants, connectionDemand
from imapmig.errors import ConnectionNotGranted
from imapmig.sources.counting import SourceCount, countListedSource, statusCounts
from imapmig.sources import IMessageSource
from imapmig.sources.maildir import MaildirSource
from imapmig.state.memory import MemoryStateStore
from imapmig.testing.dovecot import requireDovecot
from tests.support import freshUser, sharedDovecot, writePasswordFile


def writeMaildir(path: str, folders: dict[str, Sequence[bytes]]) -> None:
    """
    A Maildir++ at C{path} whose folders (C{""} for INBOX, else C{".Name"})
    hold the given messages.
    """
    for folder, bodies in folders.items():
        base = os.path.join(path, folder) if folder else path
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(base, sub), exist_ok=True)
        for n, message in enumerate(bodies):
            with open(os.path.join(base, "cur", f"16000000{n:02d}.M{n}P1.host:2,S"), "wb") as f:
                f.write(message)


def configOf(test: SynchronousTestCase, jobs: list[dict[str, Any]], servers: dict[str, Any] | None = None) -> Config:
    """
    A loaded configuration of C{jobs} (each given its destination).
    """
    passwordFile = writePasswordFile(os.path.abspath(test.mktemp()), "pw")
    for job in jobs:
        job.setdefault(
            "destination", {"server": "dest", "user": "u", "password_file": passwordFile}
        )
    document = {
        "state": os.path.abspath(test.mktemp()),
        "servers": {"dest": {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"}, **(servers or {})},
        "jobs": jobs,
    }
    return parseConfig(document, os.path.abspath(test.mktemp()) + ".yaml")


def countLocal(job: JobConfig, stopping: Callable[[], bool]) -> Deferred[SourceCount]:
    """
    A local source counted in place (as a reactor without threads has it).
    """
    config = job.source
    assert isinstance(config, MaildirSourceConfig)
    source: IMessageSource = MaildirSource(config.path)
    return maybeDeferred(countListedSource, source, job.folders, stopping)


def noIMAP(job: JobConfig) -> Deferred[IMAPSession]:
    raise AssertionError("no IMAP source here")


def noRecords(name: str) -> Deferred[int]:
    return succeed(0)


class StatusParsingTests(SynchronousTestCase):
    """
    L{statusCounts}.
    """

    def test_parse(self) -> None:
        """
        The items of the STATUS response are read whatever the mailbox
        name holds; other responses are ignored.
        """
        self.assertEqual(
            statusCounts([b"OK x", b'STATUS "a (b)" (MESSAGES 3 SIZE 1234)']),
            {b"MESSAGES": 3, b"SIZE": 1234},
        )
        self.assertEqual(statusCounts([b"STATUS {3}\r\nabc (messages 0)\r\n"]), {b"MESSAGES": 0})
        self.assertEqual(statusCounts([b"FLAGS ()"]), {})


class LocalCensusTests(SynchronousTestCase):
    """
    The census of Maildir sources.
    """

    def test_countsBeforeRunning(self) -> None:
        """
        The census counts every queued job's Maildir by the job's folder
        rules (messages, source octets, folders, the folders left out),
        with earlier runs' records counted as done; the jobs are counted
        before any of them runs.
        """
        first = os.path.abspath(self.mktemp())
        writeMaildir(first, {"": [b"a" * 10, b"b" * 20], ".Archive": [b"c" * 30], ".Spam": [b"d" * 40]})
        second = os.path.abspath(self.mktemp())
        writeMaildir(second, {"": [b"e" * 5]})
        config = configOf(
            self,
            [
                {"name": "one", "source": {"maildir": first}, "folders": {"exclude": ["Spam"]}},
                {"name": "two", "source": {"maildir": second}},
            ],
        )
        progress = MigrationProgress(Clock().seconds)
        for job in config.jobs:
            progress.addJob(job.name)
        recorded = {"one": 1, "two": 0}
        census = SourceCensus(
            config.jobs, progress, countLocal, noIMAP, lambda name: succeed(recorded[name]), Clock()
        )
        census.startService()
        one = progress.job("one").snapshot()
        self.assertEqual(
            [one[k] for k in ("counted", "messages_total", "bytes_total", "messages_done", "folders_total", "folders_excluded")],
            [True, 3, 60, 1, 2, 1],
        )
        self.assertEqual(progress.job("one").excludedFolders, ["Spam"])
        two = progress.job("two").snapshot()
        self.assertEqual((two["messages_total"], two["bytes_total"]), (1, 5))
        self.assertEqual(progress.summary()["totals"]["jobs_counted"], 2)  # type: ignore[index]
        self.assertEqual(census.counted, 2)
        self.successResultOf(census.stopService())  # type: ignore[arg-type]

    def test_failureLeavesUncounted(self) -> None:
        """
        A source that cannot be listed is logged once as a warning and its
        job left uncounted; the others are counted.
        """
        good = os.path.abspath(self.mktemp())
        writeMaildir(good, {"": [b"x"]})
        gone = os.path.abspath(self.mktemp())
        writeMaildir(gone, {"": []})
        config = configOf(
            self,
            [{"name": "gone", "source": {"maildir": gone}}, {"name": "good", "source": {"maildir": good}}],
        )
        os.rename(gone, gone + ".moved")
        progress = MigrationProgress(Clock().seconds)
        for job in config.jobs:
            progress.addJob(job.name)
        with capturedLogs() as events:
            census = SourceCensus(config.jobs, progress, countLocal, noIMAP, noRecords, Clock())
            census.startService()
        warnings = [e for e in events if "cannot count" in e.get("log_format", "")]
        self.assertEqual([e["job"] for e in warnings], ["gone"])
        self.assertFalse(progress.job("gone").counted)
        self.assertTrue(progress.job("good").counted)
        self.assertEqual(census.failed, 1)

    def test_skipsStartedJobs(self) -> None:
        """
        A job already running (it lists its source itself) or counted is
        not counted by the census.
        """
        path = os.path.abspath(self.mktemp())
        writeMaildir(path, {"": [b"x"]})
        config = configOf(self, [{"name": "a", "source": {"maildir": path}}])
        clock = Clock()
        progress = MigrationProgress(clock.seconds)
        progress.addJob("a").started()
        progress.job("a").showState(lambda: JobState.RUNNING)
        counted: list[str] = []

        def counting(job: JobConfig, stopping: Callable[[], bool]) -> Deferred[SourceCount]:
            counted.append(job.name)
            return countLocal(job, stopping)

        census = SourceCensus(config.jobs, progress, counting, noIMAP, noRecords, clock)
        census.startService()
        self.assertEqual(counted, [])


class IMAPCensusTests(SynchronousTestCase):
    """
    The census of IMAP sources: connections, grants, timeouts, stopping.
    """

    def setUp(self) -> None:
        pw = writePasswordFile(os.path.abspath(self.mktemp()), "pw")
        self.config = configOf(
            self,
            [
                {"name": f"j{n}", "source": {"server": "old", "user": f"u{n}", "password_file": pw}}
                for n in range(5)
            ],
            servers={"old": {"endpoint": "tcp:127.0.0.1:2", "starttls": "off"}},
        )
        self.clock = Clock()
        self.progress = MigrationProgress(self.clock.seconds)
        for job in self.config.jobs:
            self.progress.addJob(job.name)
        self.opening: list[tuple[str, Deferred[IMAPSession]]] = []

    def openIMAP(self, job: JobConfig) -> Deferred[IMAPSession]:
        d: Deferred[IMAPSession] = Deferred()
        self.opening.append((job.name, d))
        return d

    def test_twoAtATimeAndStop(self) -> None:
        """
        At most two census connections are opened at once, in
        configuration order; stopping the census gives them up and leaves
        nothing scheduled.
        """
        census = SourceCensus(
            self.config.jobs, self.progress, countLocal, self.openIMAP, noRecords, self.clock
        )
        census.startService()
        self.assertEqual([name for name, _ in self.opening], ["j0", "j1"])
        stopped = census.stopService()
        self.successResultOf(stopped)  # type: ignore[arg-type]
        self.assertTrue(all(d.called for _, d in self.opening))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertFalse(any(job.counted for job in self.progress))

    def test_timeout(self) -> None:
        """
        A census connection that does not answer within the timeout is
        given up, its job left uncounted with a warning, and the next job
        is counted.
        """
        census = SourceCensus(
            self.config.jobs, self.progress, countLocal, self.openIMAP, noRecords, self.clock,
            timeout=60.0,
        )  # fmt: skip
        with capturedLogs() as events:
            census.startService()
            self.clock.advance(60)
        self.assertEqual([name for name, _ in self.opening], ["j0", "j1", "j2", "j3"])
        self.assertEqual(census.failed, 2)
        self.assertIn("no answer within 60 s", [e.get("why") for e in events][-1])
        self.successResultOf(census.stopService())  # type: ignore[arg-type]
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_onlyFreeConnections(self) -> None:
        """
        A census connection is taken only when the servers' limits have
        one free at once (never one a waiting job is owed); otherwise the
        job is tried again later, while it is still queued, and no
        connection is attempted meanwhile.
        """
        grants = ConnectionGrants(2, {"old": ServerLimits(maxConnections=1)})
        held = grants.pools.tryAcquire(connectionDemand([("old", "u0")]))
        assert held is not None
        memory = MemoryReactorClock()

        def openIMAP(job: JobConfig) -> Any:
            source = job.source
            return service.censusOpener(source, memory, grants)()  # type: ignore[arg-type]

        census = SourceCensus(
            self.config.jobs[:2], self.progress, countLocal, openIMAP, noRecords, memory,
            retryDelay=30.0,
        )  # fmt: skip
        census.startService()
        self.assertEqual(memory.tcpClients, [])
        held.release()
        memory.advance(30)
        # Free now: the first census connection is taken (the server's
        # limit of one keeps the second waiting for the next round).
        self.assertEqual(len(memory.tcpClients), 1)
        self.assertEqual(grants.connectionsInUse("old"), 1)
        self.successResultOf(census.stopService())  # type: ignore[arg-type]
        self.assertEqual(grants.connectionsInUse("old"), 0)


class DovecotCensusTests(TestCase):
    """
    The census of an IMAP source against a real Dovecot.
    """

    async def test_countsIMAPSource(self) -> None:
        """
        The census counts a real account's included folders with LIST
        and STATUS (MESSAGES SIZE): the same messages and octets the
        job's listing finds, the excluded folder left out, before the
        job runs; its connection is released.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        instance.createMailbox(user.name, "Archive")
        instance.createMailbox(user.name, "Spam")
        bodies = {
            "INBOX": [b"Subject: %d\r\n\r\nhello\r\n" % n for n in range(3)],
            "Archive": [b"Subject: a\r\n\r\n" + b"x" * 100 + b"\r\n"],
            "Spam": [b"Subject: spam\r\n\r\nbuy\r\n"],
        }
        for mailbox, messages in bodies.items():
            for message in messages:
                instance.appendMessage(user.name, mailbox, message)
        pw = writePasswordFile(os.path.abspath(self.mktemp()), user.password)
        config = configOf(
            self,
            [
                {
                    "name": "imap",
                    "source": {"server": "old", "user": user.name, "password_file": pw},
                    "folders": {"exclude": ["Spam"]},
                }
            ],
            servers={"old": {"endpoint": f"tcp:127.0.0.1:{instance.port}", "starttls": "off"}},
        )
        progress = MigrationProgress(reactor.seconds)
        progress.addJob("imap")
        grants = ConnectionGrants(1, {})
        store = MemoryStateStore()
        census = service.censusFor(config, progress, store, grants, None, reactor)
        census.startService()
        await census.whenDone()
        census.stopService()
        job = progress.job("imap")
        self.assertEqual(census.failed, 0)
        self.assertTrue(job.counted)
        self.assertEqual(
            (job.messagesTotal, job.bytesTotal, job.foldersTotal, job.excludedFolders),
            (4, sum(len(b) for b in bodies["INBOX"] + bodies["Archive"]), 2, ["Spam"]),
        )
        self.assertEqual(grants.connectionsInUse("old"), 0)
