"""
Tests for L{imapmig.job.joblog} and L{imapmig.status.quiet}: what a job run
and the status site log at the default level.
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import LogEvent, LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.error import UnsupportedMethod
from twisted.web.server import Request, Site

from imapmig.config.model import (
    EmlSourceConfig,
    ImapSourceConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
)
from imapmig.job import JobSettings, RetryPolicy
from imapmig.job.joblog import JobLog, describeSource, formatDuration
from imapmig.log.logfields import AccountName
from imapmig.progress import FolderProgress, JobProgress, JobState, MigrationProgress, Wait
from imapmig.state import MessageOutcome
from imapmig.state.memory import MemoryStateStore
from imapmig.status.quiet import quieten
from imapmig.status.resource import QuietSite, StatusResource, buildStatusSite
from tests.test_job import JOB, JobHarness, body, populate

MIB = 1024 * 1024


def lines(events: Sequence[LogEvent], level: LogLevel | None = None) -> list[str]:
    """
    The formatted text of C{events} (of C{level} only, if given).
    """
    return [
        formatEvent(e) for e in events if level is None or e.get("log_level") == level
    ]


class Run:
    """
    A L{JobLog} over a progress whose state the test sets, with a counter
    of settled messages the test moves.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.progress = JobProgress(JOB, self.clock.seconds)
        self.state = JobState.RUNNING
        self.progress.showState(lambda: self.state)
        self.settled = 0
        self.log = JobLog(
            JOB,
            self.progress,
            self.clock,
            lambda: self.settled,
            "Maildir /srv/mail/alice",
            AccountName("dove", "alice", "tcp:127.0.0.1:143"),
            **kwargs,
        )

    def copy(self, count: int, octets: int) -> None:
        """
        Count C{count} messages of C{octets} appended.
        """
        self.settled += count
        self.progress.messagesDone += count
        self.progress.bytesDone += octets
        self.progress.bytesSent += octets


def failed(n: int, reason: str = "refused by server: NO [LIMIT] too big") -> MessageOutcome:
    """
    The failed outcome of message C{n} of INBOX.
    """
    return MessageOutcome("INBOX", f"m{n}", "INBOX", 100, failure=reason)


class StartAndEndTests(SynchronousTestCase):
    """
    One line at the start of a run, one at its end.
    """

    def test_startLine(self) -> None:
        """
        The start line names the job, its source and destination, and what
        earlier runs migrated, as fields and in words.
        """
        run = Run()
        with capturedLogs() as events:
            run.log.started(1234, 2)
        [event] = events
        self.assertEqual(event["log_level"], LogLevel.info)
        self.assertEqual(
            formatEvent(event),
            "Job alice-job started: from Maildir /srv/mail/alice to alice at"
            " tcp:127.0.0.1:143; 1,234 messages already migrated by earlier runs,"
            " 2 recorded as failed (tried again)",
        )
        self.assertEqual((event["job"], event["migrated"], event["failedBefore"]), (JOB, 1234, 2))
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_startLineUnknown(self) -> None:
        """
        When the state store could not say what earlier runs did, the start
        line leaves it out.
        """
        run = Run()
        with capturedLogs() as events:
            run.log.started()
        self.assertEqual(
            lines(events),
            ["Job alice-job started: from Maildir /srv/mail/alice to alice at tcp:127.0.0.1:143"],
        )
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_endDone(self) -> None:
        """
        A completed run's end line gives its counts, the MiB copied, the
        duration and the rates, at info level when nothing failed.
        """
        run = Run()
        run.log.started(0, 0)
        run.progress.messagesTotal = 1500
        run.progress.messagesAlreadyMigrated = 300
        run.progress.messagesDone = 300
        run.copy(1000, 50 * MIB)
        run.progress.messagesAlreadyPresent = 200
        run.progress.messagesDone += 200
        run.clock.advance(125)
        run.progress.finished()
        with capturedLogs() as events:
            run.log.ended(1000, 200, False, None)
        progressLines = [e for e in events if "over the last minute" in formatEvent(e)]
        [end] = [e for e in events if e not in progressLines]
        self.assertEqual(end["log_level"], LogLevel.info)
        self.assertEqual(
            formatEvent(end),
            "Job alice-job done after 2 min 05 s. 1,000 copied (50.0 MiB), 200 already"
            " present, 300 already migrated, 0 failed; 8.0 messages/s, 0.40 MiB/s",
        )
        self.assertEqual(
            {k: end[k] for k in ("state", "copied", "alreadyPresent", "alreadyMigrated", "failed")},
            {"state": "done", "copied": 1000, "alreadyPresent": 200, "alreadyMigrated": 300, "failed": 0},
        )
        self.assertEqual((end["seconds"], end["octets"]), (125.0, 50 * MIB))
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_endDoneWithFailures(self) -> None:
        """
        A run that completed with failed messages ends with a warning.
        """
        run = Run()
        run.log.started(0, 0)
        run.progress.messagesFailed = 3
        run.progress.finished()
        with capturedLogs() as events:
            run.log.ended(0, 0, False, None)
        [end] = events
        self.assertEqual(end["log_level"], LogLevel.warn)
        self.assertIn("Job alice-job done after 0.0 s. 0 copied", formatEvent(end))
        self.assertIn("3 failed", formatEvent(end))

    def test_endFailed(self) -> None:
        """
        A failed run's end line is an error with the cause in words, and no
        traceback.
        """
        run = Run()
        run.log.started(0, 0)
        run.clock.advance(3)
        run.progress.finished("TLS handshake failed: the server's certificate does not contain"
                              " any subjectAltName")  # fmt: skip
        with capturedLogs() as events:
            run.log.ended(0, 0, False, None)
        [end] = events
        self.assertEqual(end["log_level"], LogLevel.error)
        self.assertNotIn("log_failure", end)
        self.assertEqual(end["state"], "failed")
        self.assertTrue(
            formatEvent(end).startswith(
                "Job alice-job failed after 3.0 s: TLS handshake failed: the server's"
                " certificate does not contain any subjectAltName. 0 copied (0.0 MiB)"
            ),
            formatEvent(end),
        )

    def test_endStopped(self) -> None:
        """
        A stopped run says so, without the progress's "stopped before the
        end" as if it were a cause.
        """
        run = Run()
        run.log.started(0, 0)
        run.progress.finished("stopped before the end")
        with capturedLogs() as events:
            run.log.ended(0, 0, True, None)
        self.assertEqual(
            lines(events, LogLevel.info),
            [
                "Job alice-job stopped after 0.0 s. 0 copied (0.0 MiB), 0 already present,"
                " 0 already migrated, 0 failed; 0.0 messages/s, 0.00 MiB/s"
            ],
        )

    def test_endDeferred(self) -> None:
        """
        A run deferred by a daily budget says until when, and why.
        """
        run = Run()
        run.log.started(0, 0)
        run.progress.waitIn(
            Wait(JobState.DEFERRED, "daily budget: the daily upload budget is used up", 0.0, 86400.0, None)
        )
        with capturedLogs() as events:
            run.log.ended(0, 0, False, 86400.0)
        [text] = lines(events, LogLevel.info)
        self.assertTrue(
            text.startswith(
                "Job alice-job deferred until 1970-01-02 00:00:00 UTC after 0.0 s"
                " (daily budget: the daily upload budget is used up). 0 copied"
            ),
            text,
        )

    def test_endUnexpected(self) -> None:
        """
        A run that ended with neither an outcome nor a stop (an exception
        escaped it) is logged as failed, not as done.
        """
        run = Run()
        run.log.started(0, 0)
        with capturedLogs() as events:
            run.log.ended(0, 0, False, None)
        [end] = events
        self.assertEqual((end["log_level"], end["state"]), (LogLevel.error, "failed"))
        self.assertIn("internal error", formatEvent(end))


class ProgressLineTests(SynchronousTestCase):
    """
    A progress line a minute while a run copies.
    """

    def test_cadence(self) -> None:
        """
        No progress line within the first minute; one at the minute, with
        done/total, the percentage, the rate over that minute and the
        current folder; the next one a minute later; none left on the
        clock after the run.
        """
        run = Run()
        run.progress.messagesTotal = 1000
        run.progress.currentFolder = "Archive/2019"
        with capturedLogs() as events:
            run.log.started(0, 0)
            run.copy(100, MIB)
            run.clock.advance(59.9)
        self.assertEqual(len(events), 1)
        with capturedLogs() as events:
            run.clock.advance(0.1)
        [event] = events
        self.assertEqual(event["log_level"], LogLevel.info)
        self.assertEqual(
            formatEvent(event),
            "Job alice-job: 100 of 1,000 messages done (10.0%), 0 failed; 1.7 messages/s"
            " over the last minute; copying Archive/2019; running for 1 min 00 s",
        )
        self.assertEqual((event["done"], event["total"], event["percent"]), (100, 1000, 10.0))
        with capturedLogs() as events:
            run.copy(600, MIB)
            run.clock.advance(59)
            self.assertEqual(events, [])
            run.clock.advance(1)
        [event] = events
        self.assertEqual(event["rate"], 10.0)
        self.assertEqual(event["percent"], 70.0)
        run.progress.finished()
        run.log.ended(700, 0, False, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_totalUnknown(self) -> None:
        """
        Before the source is listed, the progress line says the total is
        not yet known (never "0 / 0").
        """
        run = Run()
        run.log.started(0, 0)
        with capturedLogs() as events:
            run.clock.advance(60)
        [text] = lines(events)
        self.assertIn("0 messages done, 0 failed, total not yet known", text)
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_quietWhileWaiting(self) -> None:
        """
        While the job backs off or is paused, no progress line: the line
        that said why it waits stands.
        """
        run = Run()
        run.log.started(0, 0)
        run.state = JobState.BACKING_OFF
        with capturedLogs() as events:
            run.clock.advance(600)
        self.assertEqual(events, [])
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_restart(self) -> None:
        """
        A second run's progress lines follow its own start: one loop at a
        time.
        """
        run = Run()
        run.log.started(0, 0)
        run.clock.advance(30)
        run.log.ended(0, 0, True, None)
        run.log.started(0, 0)
        with capturedLogs() as events:
            run.clock.advance(59)
        self.assertEqual(events, [])
        self.assertEqual(len(run.clock.getDelayedCalls()), 1)
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])


class FailedMessageTests(SynchronousTestCase):
    """
    Each failed message once: one by one up to a cap, then a summary a
    minute.
    """

    def test_oneLine(self) -> None:
        """
        A failed message is a warning with its folder, key and reason as
        fields and in words.
        """
        run = Run()
        run.log.started(0, 0)
        with capturedLogs() as events:
            run.log.messageFailed(failed(3))
        [event] = events
        self.assertEqual(event["log_level"], LogLevel.warn)
        self.assertEqual(
            formatEvent(event),
            "Job alice-job: message m3 of folder INBOX not migrated: refused by server:"
            " NO [LIMIT] too big",
        )
        self.assertEqual((event["folder"], event["key"], event["mailbox"]), ("INBOX", "m3", "INBOX"))
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_folderName(self) -> None:
        """
        The folder is named as listed, not by its key (a Maildir's INBOX
        has the empty key).
        """
        run = Run()
        run.log.started(0, 0)
        run.progress.folders = {"": FolderProgress("INBOX", "", 3, 300)}
        with capturedLogs() as events:
            run.log.messageFailed(MessageOutcome("", "m1", "INBOX", 1, failure="too big"))
        [event] = events
        self.assertEqual(
            formatEvent(event), "Job alice-job: message m1 of folder INBOX not migrated: too big"
        )
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_escaped(self) -> None:
        """
        A key or folder with control characters is escaped, and a long one
        cut.
        """
        run = Run()
        run.log.started(0, 0)
        outcome = MessageOutcome("IN\x1bBOX", "k\r\n" + "x" * 200, "INBOX", 1, failure="r")
        with capturedLogs() as events:
            run.log.messageFailed(outcome)
        [event] = events
        self.assertEqual(event["folder"], "IN\\x1bBOX")
        self.assertTrue(event["key"].startswith("k\\x0d\\x0axxx"), event["key"])
        self.assertTrue(event["key"].endswith(" ..."))
        self.assertNotIn("\n", formatEvent(event))
        run.log.ended(0, 0, True, None)

    def test_cap(self) -> None:
        """
        A whole batch failing: the first 20 messages are logged one by one
        (and a notice that the rest are summed up), the others counted in
        one summary line a minute, and what is left unsaid at the end of
        the run in one more.
        """
        run = Run()
        run.state = JobState.BACKING_OFF
        run.log.started(0, 0)
        with capturedLogs() as events:
            for n in range(25):
                run.progress.messagesFailed += 1
                run.log.messageFailed(failed(n))
        each = [e for e in events if "not migrated" in formatEvent(e)]
        self.assertEqual([e["key"] for e in each], [f"m{n}" for n in range(20)])
        self.assertEqual(len(events), 21)
        self.assertIn("20 messages failed in this run", formatEvent(events[20]))
        with capturedLogs() as events:
            run.clock.advance(59)
            self.assertEqual(events, [])
            run.clock.advance(1)
        self.assertEqual(
            lines(events, LogLevel.warn),
            [
                "Job alice-job: 5 more messages failed (25 in all in this run); see"
                " `imapmig report` or the job's manifest for each and why"
            ],
        )
        with capturedLogs() as events:
            run.clock.advance(60)
            self.assertEqual(events, [])
            for n in range(25, 32):
                run.progress.messagesFailed += 1
                run.log.messageFailed(failed(n))
            self.assertEqual(events, [])
            run.progress.finished("stopped before the end")
            run.log.ended(0, 0, True, None)
        self.assertIn("7 more messages failed (32 in all", formatEvent(events[0]))
        self.assertIn("stopped after", formatEvent(events[1]))
        self.assertEqual(len(events), 2)
        self.assertEqual(run.clock.getDelayedCalls(), [])

    def test_capPerRun(self) -> None:
        """
        The cap counts per run: a new run logs its first failures again.
        """
        run = Run(failuresShown=2)
        run.log.started(0, 0)
        for n in range(3):
            run.log.messageFailed(failed(n))
        run.log.ended(0, 0, True, None)
        run.log.started(0, 0)
        with capturedLogs() as events:
            run.log.messageFailed(failed(9))
        self.assertEqual([e["key"] for e in events], ["m9"])
        run.log.ended(0, 0, True, None)
        self.assertEqual(run.clock.getDelayedCalls(), [])


class WordsTests(SynchronousTestCase):
    """
    The helpers that put a job's facts in words.
    """

    def test_formatDuration(self) -> None:
        """
        Durations read at a glance, from tenths of seconds to days.
        """
        self.assertEqual(
            [formatDuration(s) for s in (0.04, 4.25, 65, 3599, 3600 + 7 * 60 + 5, 2 * 86400 + 4 * 3600)],
            ["0.0 s", "4.2 s", "1 min 05 s", "59 min 59 s", "1 h 07 min", "2 d 04 h"],
        )

    def test_describeSource(self) -> None:
        """
        Each kind of source is named by what it is and where.
        """
        server = ServerConfig(
            name="old", endpoint="tls:imap.old.example:993", starttls=False, implicitTLS=True,
            tcpEndpoint="tcp:imap.old.example:993", tlsHostname="imap.old.example", tlsCA=None,
            timeout=30.0, compress=False,
        )  # fmt: skip
        self.assertEqual(
            [
                describeSource(ImapSourceConfig(server=server, user="bob", password=None)),
                describeSource(MaildirSourceConfig("/srv/mail/bob")),
                describeSource(MboxSourceConfig("/srv/bob.mbox", "mboxrd")),
                describeSource(EmlSourceConfig("/srv/bob", ("INBOX",))),
            ],
            [
                "IMAP bob at tls:imap.old.example:993",
                "Maildir /srv/mail/bob",
                "mbox /srv/bob.mbox",
                ".eml files in /srv/bob",
            ],
        )


class MigrationJobLogTests(SynchronousTestCase):
    """
    What a L{imapmig.job.MigrationJob} run logs, end to end against the
    fake server.
    """

    def test_oneStartOneEnd(self) -> None:
        """
        A completed run logs exactly one start line and one end line with
        its counts; a refused message is logged once, with its reason; no
        traceback; nothing is left on the clock.
        """
        h = JobHarness(self, refuse=lambda b: "NO [LIMIT] too big" if b == body(3) else None)
        populate(h.source, h.source.addFolder("INBOX"), 6)
        with capturedLogs() as events:
            self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=6))))
        texts = lines(events)
        self.assertEqual(len([t for t in texts if " started: " in t]), 1, texts)
        ends = [e for e in events if "copied (" in formatEvent(e)]
        self.assertEqual(len(ends), 1, texts)
        self.assertEqual(
            (ends[0]["state"], ends[0]["copied"], ends[0]["failed"]), ("done", 5, 1)
        )
        failures = [t for t in texts if "not migrated" in t]
        self.assertEqual(
            failures,
            ["Job alice-job: message m3 of folder INBOX not migrated: refused by server:"
             " NO [LIMIT] too big"],
        )  # fmt: skip
        self.assertEqual([e for e in events if "log_failure" in e], [])
        h.finish()

    def test_failedOnce(self) -> None:
        """
        A job that fails logs its failure once, in its end line at error
        level, with the cause in words; retries are warnings with the
        retry time.
        """
        h = JobHarness(self, refuse=lambda b: "NO [UNAVAILABLE] Temporary failure, try later")
        populate(h.source, h.source.addFolder("INBOX"), 4)
        job = h.job(JobSettings(connections=1, batchMessages=4), retry=RetryPolicy(attempts=2))
        with capturedLogs() as events:
            self.assertFalse(h.run(job))
        errors = lines(events, LogLevel.error)
        self.assertEqual(len(errors), 1, lines(events))
        self.assertTrue(errors[0].startswith("Job alice-job failed after "), errors[0])
        self.assertIn("gave up after 2 attempts", errors[0])
        retries = [t for t in lines(events, LogLevel.warn) if "connecting again in" in t]
        self.assertEqual(len(retries), 2, lines(events))
        self.assertIn("connecting again in 1.0 s, at 1970-01-01 00:00:01 UTC (attempt 1 of 2", retries[0])
        self.assertEqual([e for e in events if "log_failure" in e], [])
        h.finish()

    def test_progressWhileCopying(self) -> None:
        """
        A run that copies for over a minute logs one progress line at the
        minute, none before it; and nothing of it is left on the clock at
        the end.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 6)
        h.source.holdAfter = 1
        job = h.job(JobSettings(connections=1, batchMessages=2))
        with capturedLogs() as events:
            d = h.start(job)
            self.assertFalse(d.called)
            h.clock.advance(59)
        self.assertEqual([t for t in lines(events) if "over the last minute" in t], [])
        with capturedLogs() as events:
            h.clock.advance(1)
        [text] = lines(events)
        self.assertIn("Job alice-job: 2 of 6 messages done (33.3%), 0 failed;", text)
        self.assertIn("copying INBOX", text)
        h.source.holdAfter = None
        h.source.release()
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.finish()


class QuietStatusSiteTests(SynchronousTestCase):
    """
    L{imapmig.status.quiet.quieten}: no twisted.web chatter from the status
    site at the default level.
    """

    def connect(self, site: Site, clock: MemoryReactorClock) -> tuple[Protocol, StringTransport]:
        """
        Connect a client to C{site} over a L{StringTransport}.
        """
        protocol = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        assert protocol is not None
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        protocol.makeConnection(transport)
        return protocol, transport

    def idleKeepAlive(self, site: Site, clock: MemoryReactorClock) -> list[LogEvent]:
        """
        A keep-alive client asks for the status, then idles until the site
        times it out; what was logged.
        """
        with capturedLogs() as events:
            site.doStart()
            protocol, transport = self.connect(site, clock)
            protocol.dataReceived(b"GET /status.json HTTP/1.1\r\nHost: localhost\r\n\r\n")
            self.assertIn(b"200 OK", transport.value())
            clock.advance(site.timeOut or 0)
            self.assertTrue(transport.disconnecting)
            protocol.connectionLost(Failure(ConnectionDone()))
            site.doStop()
        self.assertEqual(clock.getDelayedCalls(), [])
        return list(events)

    def test_timingOutQuiet(self) -> None:
        """
        An idle keep-alive client timed out by the status site logs nothing at info level or above ("Timing out client" is a debug
        event).
        """
        clock = MemoryReactorClock()
        root = StatusResource(MigrationProgress(clock.seconds), clock.seconds, MemoryStateStore())
        site = buildStatusSite(root, clock)
        events = self.idleKeepAlive(site, clock)
        self.assertEqual([formatEvent(e) for e in events if e["log_level"] >= LogLevel.info], [])
        self.assertIn(
            "Timing out client: IPv4Address(type='TCP', host='127.0.0.1', port=40000)",
            [formatEvent(e) for e in events if e["log_level"] == LogLevel.debug],
        )

    def test_timingOutLoudWithoutIt(self) -> None:
        """
        Through a plain L{Site}, twisted.web logs the timing out at info
        level (what L{test_timingOutQuiet} guards against).
        """
        clock = MemoryReactorClock()
        progress = MigrationProgress(clock.seconds)
        site = Site(StatusResource(progress, clock.seconds, MemoryStateStore()), reactor=clock)
        events = self.idleKeepAlive(site, clock)
        self.assertIn(
            "Timing out client: IPv4Address(type='TCP', host='127.0.0.1', port=40000)",
            [formatEvent(e) for e in events if e["log_level"] == LogLevel.info],
        )

    def test_headQuiet(self) -> None:
        """
        A HEAD request (a load balancer's check) logs nothing at info level
        ("Using GET to fake a HEAD request" is a debug event), and is
        answered without a body.
        """
        clock = MemoryReactorClock()
        root = StatusResource(MigrationProgress(clock.seconds), clock.seconds, MemoryStateStore())
        site = buildStatusSite(root, clock)
        with capturedLogs() as events:
            site.doStart()
            protocol, transport = self.connect(site, clock)
            protocol.dataReceived(b"HEAD /status.json HTTP/1.1\r\nHost: localhost\r\n\r\n")
            protocol.connectionLost(Failure(ConnectionDone()))
            site.doStop()
        head, _, body = transport.value().partition(b"\r\n\r\n")
        self.assertIn(b"200 OK", head)
        self.assertEqual(body, b"")
        self.assertEqual([formatEvent(e) for e in events if e["log_level"] >= LogLevel.info], [])
        self.assertEqual([e["log_level"] for e in events], [LogLevel.debug])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_fakeHeadQuiet(self) -> None:
        """
        A HEAD request to a resource that answers only GET (twisted.web
        then renders it as a GET, saying so at info level) logs nothing at
        info level through a quietened site.
        """

        class OnlyGet(Resource):
            isLeaf = True

            def render(self, request: Request) -> bytes:
                if request.method != b"GET":
                    raise UnsupportedMethod([b"GET"])
                return b"ok"

        clock = MemoryReactorClock()
        site = quieten(QuietSite(OnlyGet(), reactor=clock))
        with capturedLogs() as events:
            site.doStart()
            protocol, transport = self.connect(site, clock)
            protocol.dataReceived(b"HEAD / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            protocol.connectionLost(Failure(ConnectionDone()))
            site.doStop()
        self.assertIn(b"200 OK", transport.value())
        self.assertEqual([formatEvent(e) for e in events if e["log_level"] >= LogLevel.info], [])
        self.assertTrue(any("fake a HEAD" in formatEvent(e) for e in events))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_mixin(self) -> None:
        """
        The status site, made with L{QuietSiteMixin}, times clients out
        quietly, and its port names it when it starts listening.
        """
        clock = MemoryReactorClock()
        progress = MigrationProgress(clock.seconds)
        site = QuietSite(StatusResource(progress, clock.seconds, MemoryStateStore()), reactor=clock)
        events = self.idleKeepAlive(site, clock)
        self.assertEqual([formatEvent(e) for e in events if e["log_level"] >= LogLevel.info], [])
        self.assertEqual(site.logPrefix(), "Status site (HTTP)")
        self.assertFalse(site.noisy)
