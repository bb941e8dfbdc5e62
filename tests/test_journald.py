# -*- test-case-name: tests.test_journald -*-
"""
Tests for L{imapmig.log.journald}: log events as native journal entries,
checked on the bytes and through a real datagram socket.
"""

from __future__ import annotations

import errno
import fcntl
import io
import os
import re
import subprocess
import sys
from typing import Any

from twisted.logger import LogEvent, Logger, LogLevel
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.log.journald import (
    FIELD_LIMIT,
    TRUNCATED_MESSAGE_LIMIT,
    JournalLogObserver,
    encodeFields,
    journalFields,
    journalSocketPath,
    messageID,
    priorityOf,
)
from tests.journalreader import EntryTest, JournalSocket, first, parseEntry
from tests.support import SOURCE_TREE, sourceTreeEnvironment


def fieldsOf(event: LogEvent) -> dict[str, str]:
    """
    The journal fields of C{event}, by name (each written once).
    """
    pairs = journalFields(event)
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), names
    return dict(pairs)


def event(format: str = "Job {job} started", **fields: Any) -> LogEvent:
    """
    An event as a L{Logger} in C{imapmig.job.joblog} emits it at info level
    (fields override).
    """
    values: dict[str, Any] = dict(
        log_format=format,
        log_namespace="imapmig.job.joblog",
        log_level=LogLevel.info,
        log_time=1764129600.0,
    )
    values.update(fields)
    return values


class EncodingTests(SynchronousTestCase):
    """
    L{encodeFields} writes journald's native protocol.
    """

    def test_simple(self) -> None:
        """
        A value without a newline is C{KEY=value} and a newline.
        """
        self.assertEqual(
            encodeFields([("MESSAGE", "Job alice started"), ("PRIORITY", "6")]),
            b"MESSAGE=Job alice started\nPRIORITY=6\n",
        )

    def test_binarySafe(self) -> None:
        """
        A value holding a newline is the name, a newline, its length in
        octets as a 64-bit little-endian integer, the value and a newline.
        """
        self.assertEqual(
            encodeFields([("MESSAGE", "crashed\nTraceback: \u00e9"), ("PRIORITY", "2")]),
            b"MESSAGE\n\x15\x00\x00\x00\x00\x00\x00\x00crashed\nTraceback: \xc3\xa9\nPRIORITY=2\n",
        )

    def test_unencodable(self) -> None:
        """
        A lone surrogate (a file name's undecodable octet) is escaped, not
        an error.
        """
        self.assertEqual(encodeFields([("MAILBOX", "a\udcffb")]), b"MAILBOX=a\\udcffb\n")

    def test_roundTrip(self) -> None:
        """
        What is written reads back as the fields given, in both forms.
        """
        fields = [("MESSAGE", "one\ntwo\n"), ("JOB", "alice"), ("MESSAGE", "=x=")]
        self.assertEqual(
            parseEntry(encodeFields(fields)),
            {"MESSAGE": ["one\ntwo\n", "=x="], "JOB": ["alice"]},
        )


class FieldTests(SynchronousTestCase):
    """
    L{journalFields}: what an event's entry holds.
    """

    def test_common(self) -> None:
        """
        Every entry has the formatted message, its priority, imapmig's
        identifier, the event type's id and the logger's namespace.
        """
        fields = fieldsOf(event(job="alice"))
        self.assertEqual(fields["MESSAGE"], "Job alice started")
        self.assertEqual(fields["PRIORITY"], "6")
        self.assertEqual(fields["SYSLOG_IDENTIFIER"], "imapmig")
        self.assertEqual(
            fields["MESSAGE_ID"], messageID("imapmig.job.joblog", "Job {job} started")
        )
        self.assertEqual(fields["IMAPMIG_NAMESPACE"], "imapmig.job.joblog")
        self.assertEqual(fields["JOB"], "alice")

    def test_priorities(self) -> None:
        """
        critical 2, error 3, warn 4, info 6, debug 7; an event without a
        level is at info's.
        """
        expected = {
            LogLevel.critical: "2",
            LogLevel.error: "3",
            LogLevel.warn: "4",
            LogLevel.info: "6",
            LogLevel.debug: "7",
        }
        for level, priority in expected.items():
            self.assertEqual(fieldsOf(event(log_level=level))["PRIORITY"], priority, level)
        untagged = event()
        del untagged["log_level"]
        self.assertEqual(fieldsOf(untagged)["PRIORITY"], "6")
        self.assertEqual(priorityOf(None), 6)

    def test_failure(self) -> None:
        """
        A failure's traceback follows the message, and is written
        binary-safe.
        """
        try:
            1 / 0
        except ZeroDivisionError:
            failure = Failure()
        fields = fieldsOf(
            event("Job {job} crashed", job="bob", log_failure=failure, log_level=LogLevel.critical)
        )
        message = fields["MESSAGE"]
        self.assertTrue(message.startswith("Job bob crashed\nTraceback (most recent call last):"))
        self.assertIn("ZeroDivisionError", message)
        self.assertEqual(fields["PRIORITY"], "2")
        self.assertIn(b"MESSAGE\n", encodeFields(journalFields(event(log_failure=failure))))

    def test_mapping(self) -> None:
        """
        C{job} gives C{JOB}; C{mailbox}, else C{folder}, gives C{MAILBOX};
        C{server} (the configured name, as C{/metrics} labels it) gives
        C{SERVER} and C{user} C{ACCOUNT}, as they are: a C{session} or
        C{account} text (C{USER at ENDPOINT}) gives neither.
        """
        fields = fieldsOf(
            event(
                job="alice",
                folder="Sent",
                mailbox="Sent Items",
                server="dove",
                user="alice@example.org",
                session="alice@example.org at tls:imap.example.org:993",
            )
        )
        self.assertEqual(fields["MAILBOX"], "Sent Items")
        self.assertEqual(fields["SERVER"], "dove")
        self.assertEqual(fields["ACCOUNT"], "alice@example.org")
        self.assertEqual(fieldsOf(event(folder="Archive/2020"))["MAILBOX"], "Archive/2020")
        fields = fieldsOf(event(session="bob at tcp:127.0.0.1:143", account="carol at tcp:h:1"))
        self.assertNotIn("SERVER", fields)
        self.assertNotIn("ACCOUNT", fields)
        # A server named without an account.
        fields = fieldsOf(event(server="dove"))
        self.assertEqual(fields["SERVER"], "dove")
        self.assertNotIn("ACCOUNT", fields)

    def test_absent(self) -> None:
        """
        An event without those fields (or with them empty) has no C{JOB},
        C{MAILBOX}, C{SERVER} or C{ACCOUNT}.
        """
        fields = fieldsOf(event("Job queue drained", job="", mailbox=None))
        for name in ("JOB", "MAILBOX", "SERVER", "ACCOUNT"):
            self.assertNotIn(name, fields)

    def test_short(self) -> None:
        """
        A field value is cut to L{FIELD_LIMIT} characters and its control
        characters escaped: one line, whatever a peer named a folder.
        """
        fields = fieldsOf(event(job=12, mailbox="a\nb\x00" + "x" * 1000))
        self.assertEqual(fields["JOB"], "12")
        self.assertTrue(fields["MAILBOX"].startswith("a\\x0ab\\x00xxx"))
        self.assertTrue(fields["MAILBOX"].endswith(" ..."))
        self.assertLessEqual(len(fields["MAILBOX"]), FIELD_LIMIT + 3 * 3 + 4)
        self.assertNotIn(b"MAILBOX\n", encodeFields(journalFields(event(mailbox="a\nb"))))

    def test_messageIDStable(self) -> None:
        """
        An event type's id is a UUID 5 of its namespace and format, 32
        lower-case hex digits, the same in every run and version (these
        values are in the documentation: changing them breaks admins'
        queries).
        """
        self.assertEqual(
            messageID("imapmig.job.joblog", "Job {job} started: from {source} to {destination}"),
            "541a679d0bf95c4b9e1832da62e6e063",
        )
        self.assertRegex(messageID("n", None), "^[0-9a-f]{32}$")
        self.assertEqual(messageID("n", None), messageID("n", ""))
        self.assertNotEqual(messageID("a", "{x}"), messageID("b", "{x}"))
        self.assertNotEqual(messageID("a", "{x}"), messageID("a", "{y}"))
        # Namespace and format cannot be confused with each other.
        self.assertNotEqual(messageID("a.b", "c"), messageID("a", ".bc"))

    def test_messageIDPerType(self) -> None:
        """
        Two events of one type (one format) have one id whatever their
        fields say.
        """
        one = fieldsOf(event(job="alice"))["MESSAGE_ID"]
        other = fieldsOf(event(job="bob", mailbox="INBOX"))["MESSAGE_ID"]
        self.assertEqual(one, other)

    def test_socketPath(self) -> None:
        """
        C{IMAPMIG_JOURNAL_SOCKET} overrides journald's socket.
        """
        self.assertEqual(journalSocketPath({}), "/run/systemd/journal/socket")
        self.assertEqual(journalSocketPath({"IMAPMIG_JOURNAL_SOCKET": "/tmp/j"}), "/tmp/j")


class ObserverTests(SynchronousTestCase):
    """
    L{JournalLogObserver} against a real datagram socket.
    """

    def setUp(self) -> None:
        self.journal = JournalSocket(self)
        self.fallback = io.StringIO()

    def observer(self, **kwargs: Any) -> JournalLogObserver:
        observer = JournalLogObserver(self.journal.path, self.fallback, **kwargs)
        self.addCleanup(observer.close)
        return observer

    def test_entry(self) -> None:
        """
        An event is one datagram: one entry with its fields.
        """
        log = Logger(namespace="imapmig.job.joblog", observer=self.observer())
        log.error(
            "Job {job} failed: {why}", job="alice", why="login refused", server="dove", user="alice"
        )
        entries = self.journal.receiveAll()
        self.assertEqual(len(entries), 1)
        (entry,) = entries
        self.assertEqual(entry["MESSAGE"], ["Job alice failed: login refused"])
        self.assertEqual(entry["PRIORITY"], ["3"])
        self.assertEqual(entry["JOB"], ["alice"])
        self.assertEqual(entry["SERVER"], ["dove"])
        self.assertEqual(entry["ACCOUNT"], ["alice"])
        self.assertEqual(
            entry["MESSAGE_ID"], [messageID("imapmig.job.joblog", "Job {job} failed: {why}")]
        )
        self.assertEqual(self.fallback.getvalue(), "")

    def test_traceback(self) -> None:
        """
        A logged failure arrives whole, its traceback's lines in C{MESSAGE}.
        """
        log = Logger(namespace="imapmig.job.migration", observer=self.observer())
        empty: dict[str, int] = {}
        try:
            empty["missing"]
        except KeyError:
            log.failure("Job {job} crashed", job="carol")
        (entry,) = self.journal.receiveAll()
        (message,) = entry["MESSAGE"]
        self.assertTrue(message.startswith("Job carol crashed\nTraceback"), message)
        self.assertIn("KeyError: 'missing'", message)
        self.assertEqual(entry["PRIORITY"], ["2"])

    def test_bigEntry(self) -> None:
        """
        An entry too big for a datagram comes as a sealed memory file, whole;
        no descriptor is left open.
        """
        observer = self.observer(sendBuffer=4096)
        opened = len(os.listdir("/proc/self/fd"))
        big = "y" * 300_000
        Logger(namespace="n", observer=observer).info("big {x}", x=big, job="dave")
        (entry,) = self.journal.receiveAll()
        self.assertEqual(self.journal.viaMemoryFile, [True])
        (seals,) = self.journal.seals
        wanted = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
        self.assertEqual(seals & wanted, wanted)
        self.assertEqual(entry["MESSAGE"], ["big " + big])
        self.assertEqual(entry["JOB"], ["dave"])
        self.assertEqual(len(os.listdir("/proc/self/fd")), opened)

    def test_bigEntryTruncated(self) -> None:
        """
        When the memory file cannot be sent either, the message is cut with
        a note saying so.
        """
        sock = None

        def sendmsg(buffers: Any, ancillary: Any, flags: int, address: str) -> int:
            if ancillary:
                raise OSError(errno.EPERM, "no descriptors here")
            assert sock is not None
            return sock.sendmsg(buffers, ancillary, flags, address)

        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 100_000)
        observer = self.observer(sendmsg=sendmsg)
        Logger(namespace="n", observer=observer).info("{x}", x="z" * 1_000_000)
        (entry,) = self.journal.receiveAll()
        (message,) = entry["MESSAGE"]
        self.assertTrue(
            message.startswith(
                "z" * TRUNCATED_MESSAGE_LIMIT
                + "\n[imapmig: message truncated from 1,000,000 octets"
            ),
            message[-200:],
        )
        self.assertEqual(self.journal.viaMemoryFile, [False])

    def fillQueue(self, observer: JournalLogObserver) -> int:
        """
        Log until the socket's queue is full (nobody reads it) and the
        observer has an entry waiting; return how many were logged.
        """
        log = Logger(namespace="n", observer=observer)
        sent = 0
        while observer.waiting == 0 and observer.dropped == 0 and sent < 200_000:
            log.info("event {n}", n=sent)
            sent += 1
        self.assertTrue(observer.waiting or observer.dropped, sent)
        return sent

    def test_busy(self) -> None:
        """
        Entries journald cannot take now (its queue full) wait in the
        backlog, without blocking the thread that logs, and arrive in
        order once it reads.
        """
        observer = self.observer()
        sent = self.fillQueue(observer)
        log = Logger(namespace="n", observer=observer)
        for n in range(sent, sent + 50):
            log.info("event {n}", n=n)
        self.assertGreater(observer.waiting, 50)
        seen: list[dict[str, list[str]]] = []
        last = self.journal.waitFor(EntryTest(MESSAGE=f"event {sent + 49}"), 60, seen)
        self.assertIsNotNone(last)
        self.assertEqual(
            [first(e, "MESSAGE") for e in seen], [f"event {n}" for n in range(sent + 50)]
        )
        self.assertTrue(observer.flush(60))
        self.assertEqual(observer.dropped, 0)
        self.assertEqual(self.fallback.getvalue(), "")

    def test_backlogFull(self) -> None:
        """
        Entries that find the backlog full are dropped, counted, and
        reported once, in an entry of their own, when the socket takes
        entries again.
        """
        observer = self.observer(backlog=3)
        sent = self.fillQueue(observer)
        log = Logger(namespace="n", observer=observer)
        for n in range(sent, sent + 10):
            log.info("event {n}", n=n)
        self.assertEqual(observer.dropped, 10 - (3 - 1))
        seen: list[dict[str, list[str]]] = []
        self.journal.waitFor(EntryTest(MESSAGE=f"event {sent + 1}"), 60, seen)
        self.assertTrue(observer.flush(60))
        self.assertEqual(
            [first(e, "MESSAGE") for e in seen], [f"event {n}" for n in range(sent + 2)]
        )
        log.info("after")
        report, after = self.journal.receiveAll()
        self.assertEqual(
            first(report, "MESSAGE"),
            "8 log events were dropped: the journal socket was busy",
        )
        self.assertEqual(first(report, "IMAPMIG_DROPPED"), "8")
        self.assertEqual(first(report, "PRIORITY"), "4")
        self.assertEqual(first(after, "MESSAGE"), "after")
        self.assertEqual(observer.dropped, 0)
        # Reported once.
        log.info("later")
        self.assertEqual([first(e, "MESSAGE") for e in self.journal.receiveAll()], ["later"])

    def test_closeStopsThread(self) -> None:
        """
        Closing the observer stops the backlog's thread: nothing of it
        outlives the test (or the daemon).
        """
        observer = self.observer()
        self.fillQueue(observer)
        sender = observer._sender
        assert sender is not None
        observer.close()
        sender.join(60)
        self.assertFalse(sender.is_alive())

    def test_flushedAtExit(self) -> None:
        """
        Entries still waiting when the process exits are sent before it
        does (for at most L{imapmig.log.journald.EXIT_FLUSH} seconds, made
        generous here).
        """
        script = (
            "import sys, imapmig.log.journald as j\n"
            "from twisted.logger import Logger\n"
            "j.EXIT_FLUSH = 60.0\n"
            "o = j.JournalLogObserver(sys.argv[1])\n"
            "log = Logger(namespace='n', observer=o)\n"
            "n = 0\n"
            "while o.waiting == 0:\n"
            "    log.info('event {n}', n=n); n += 1\n"
            "for _ in range(5):\n"
            "    log.info('event {n}', n=n); n += 1\n"
            "print(n, flush=True)\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script, self.journal.path],
            cwd=SOURCE_TREE,
            env=sourceTreeEnvironment(),
            stdout=subprocess.PIPE,
        )
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        assert child.stdout is not None
        count = int(child.stdout.readline())
        seen: list[dict[str, list[str]]] = []
        self.journal.waitFor(EntryTest(MESSAGE=f"event {count - 1}"), 60, seen)
        self.assertEqual(child.wait(60), 0)
        self.assertEqual([first(e, "MESSAGE") for e in seen], [f"event {n}" for n in range(count)])

    def test_noSocket(self) -> None:
        """
        With no socket (journald not running), events go to the fallback as
        twistd's text lines; once the socket works, how many did is
        reported once.
        """
        self.journal.stop()
        observer = self.observer()
        log = Logger(namespace="imapmig.job.joblog", observer=observer)
        log.warn("Job {job}: message {key} not migrated", job="erin", key="1:2")
        log.info("second")
        text = self.fallback.getvalue()
        self.assertRegex(
            text,
            re.compile(r"^\S+ \[imapmig.job.joblog#warn\] Job erin: message 1:2 not migrated\n"
                       r"\S+ \[imapmig.job.joblog#info\] second\n$"),
        )
        self.assertEqual(observer.diverted, 2)
        # journald is back.
        self.journal.start()
        log.info("third")
        report, third = self.journal.receiveAll()
        self.assertEqual(
            first(report, "MESSAGE"),
            "2 log events were written to standard error: the journal socket was unusable",
        )
        self.assertEqual(first(report, "IMAPMIG_DIVERTED"), "2")
        self.assertEqual(first(third, "MESSAGE"), "third")
        self.assertEqual(observer.diverted, 0)

    def test_socketGone(self) -> None:
        """
        A socket that goes away while the daemon runs (journald stopped)
        sends the following events to the fallback, without an exception
        reaching the code that logs.
        """
        observer = self.observer()
        log = Logger(namespace="n", observer=observer)
        log.info("first")
        self.journal.socket.close()
        log.info("second")
        self.assertIn("[n#info] second\n", self.fallback.getvalue())
        self.assertEqual(observer.diverted, 1)

    def test_neverRaises(self) -> None:
        """
        Whatever goes wrong in the observer, the code that logs does not see
        it: the event is counted as dropped.
        """

        def sendmsg(*args: object) -> int:
            raise RuntimeError("a bug")

        observer = self.observer(sendmsg=sendmsg)
        observer(event())
        self.assertEqual(observer.dropped, 1)

    def test_fallbackFails(self) -> None:
        """
        A fallback that cannot be written to (a closed standard error) is
        no error either.
        """
        self.journal.stop()
        self.fallback.close()
        observer = self.observer()
        observer(event(job="x"))
        self.assertEqual(observer.diverted, 1)
