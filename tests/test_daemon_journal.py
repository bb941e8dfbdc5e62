# -*- test-case-name: tests.test_daemon_journal -*-
"""
Integration tests for the daemon's log output (L{imapmig.log.logoutput}): the
daemon, run as systemd runs it (C{JOURNAL_STREAM} naming its standard
output), migrating into a private Dovecot, writes native journal entries
to a datagram socket the test reads (C{IMAPMIG_JOURNAL_SOCKET}); or JSON
lines when asked.

Everything waits on what the daemon writes (an entry, its exit), with
generous deadlines, never on a sleep.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import IO

from twisted.trial.unittest import SynchronousTestCase

from imapmig.log.journald import messageID
from imapmig.testing.dovecot import DovecotUser, requireDovecot
from tests.journalreader import JournalSocket, first
from tests.support import (
    daemonCommand,
    SOURCE_TREE,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    twistdCommand,
    writeEmlJobConfig,
)

DEADLINE = 60.0
"""
Seconds a test waits for an entry or for the daemon's exit.
"""

Entry = dict[str, list[str]]

# The formats of a job's start lines (L{imapmig.job.joblog.JobLog.started}).
_STARTED = (
    "Job {job} started: from {source} to {destination}",
    "Job {job} started: from {source} to {destination};"
    " {migrated:,} already migrated by earlier runs,"
    " {failedBefore:,} recorded as failed (tried again)",
)


def streamID(stream: IO[bytes]) -> str:
    """
    C{stream}'s C{DEVICE:INODE}, as systemd writes it in C{JOURNAL_STREAM}.
    """
    status = os.fstat(stream.fileno())
    return f"{status.st_dev}:{status.st_ino}"


def messageStarts(text: str, **fields: str) -> "EntryMatch":
    """
    A test of an entry whose C{MESSAGE} starts with C{text} and whose
    fields have the given values.
    """
    return EntryMatch(text, fields)


class EntryMatch:
    """
    See L{messageStarts}.
    """

    def __init__(self, text: str, fields: dict[str, str]) -> None:
        self.text = text
        self.fields = fields

    def __call__(self, entry: Entry) -> bool:
        return (first(entry, "MESSAGE") or "").startswith(self.text) and all(
            first(entry, k) == v for k, v in self.fields.items()
        )


class DaemonRun:
    """
    The daemon in a child process, its standard output and error in a
    file, stopped (killed) when the test ends if still running.
    """

    def __init__(
        self,
        testCase: SynchronousTestCase,
        command: list[str],
        environ: dict[str, str],
        journalStream: str | None = None,
    ) -> None:
        """
        @param environ: variables added to the test's environment.
        @param journalStream: C{"stdout"} to set C{JOURNAL_STREAM} to its
            standard output's file, C{"other"} to another file's, L{None}
            to leave it unset.
        """
        directory = newDirectory(testCase)
        self.outputPath = os.path.join(directory, "output")
        output = open(self.outputPath, "wb")
        testCase.addCleanup(output.close)
        env = sourceTreeEnvironment()
        env.pop("JOURNAL_STREAM", None)
        env.pop("IMAPMIG_LOG_FORMAT", None)
        env.update(environ)
        if journalStream == "stdout":
            env["JOURNAL_STREAM"] = streamID(output)
        elif journalStream == "other":
            other = open(os.path.join(directory, "other"), "wb")
            testCase.addCleanup(other.close)
            env["JOURNAL_STREAM"] = streamID(other)
        self.process = subprocess.Popen(
            command,
            cwd=SOURCE_TREE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        testCase.addCleanup(self._reap)

    def _reap(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def output(self) -> str:
        """
        What it wrote to standard output and error so far.
        """
        with open(self.outputPath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def exited(self) -> int:
        """
        Wait for its exit (at most L{DEADLINE} seconds) and return its
        status.
        """
        return self.process.wait(DEADLINE)


class JournalOutputTests(SynchronousTestCase):
    """
    The daemon's entries in the journal, and its JSON lines.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        self.instance = sharedDovecot()
        self.journal = JournalSocket(self)
        self.seen: list[Entry] = []

    def config(self, user: DovecotUser, messages: int, **server: object) -> str:
        return writeEmlJobConfig(self, self.instance, user, messages, **server)

    def daemon(
        self, configPath: str, journalStream: str | None = "stdout", **environ: str
    ) -> DaemonRun:
        command = daemonCommand(configPath)
        return self.start(command + ["--exit-when-done"], journalStream, environ)

    def start(
        self, command: list[str], journalStream: str | None, environ: dict[str, str]
    ) -> DaemonRun:
        environ = dict(environ, IMAPMIG_JOURNAL_SOCKET=self.journal.path)
        return DaemonRun(self, command, environ, journalStream)

    def waitFor(self, run: DaemonRun, match: EntryMatch) -> Entry:
        """
        The first entry C{match} accepts, waiting for it at most
        L{DEADLINE} seconds; fail saying what came instead.
        """
        end = time.monotonic() + DEADLINE
        entry = None
        while entry is None and time.monotonic() < end:
            exited = run.process.poll() is not None
            entry = self.journal.waitFor(match, 1.0, self.seen)
            if exited:
                # Whatever it wrote before exiting has arrived.
                break
        if entry is None:
            self.fail(
                f"no entry starting {match.text!r} with {match.fields} in {DEADLINE} s;"
                f" entries: {[first(e, 'MESSAGE') for e in self.seen]};"
                f" output: {run.output()[-2000:]}"
            )
        return entry

    def assertJobEntry(self, entry: Entry, user: DovecotUser, priority: str) -> None:
        """
        C{entry} is one of job C{job}'s, at C{priority}, naming its
        destination server and account.
        """
        self.assertEqual(first(entry, "JOB"), "job")
        self.assertEqual(first(entry, "PRIORITY"), priority)
        # The server's name under servers (writeDaemonConfig's), as
        # /metrics labels it; not its endpoint.
        self.assertEqual(first(entry, "SERVER"), "dovecot")
        self.assertEqual(first(entry, "ACCOUNT"), user.name)
        self.assertEqual(first(entry, "SYSLOG_IDENTIFIER"), "imapmig")
        self.assertEqual(first(entry, "IMAPMIG_NAMESPACE"), "imapmig.job.joblog")

    def test_journal(self) -> None:
        """
        Under systemd (C{JOURNAL_STREAM} naming its standard output), the
        daemon writes its events to the journal socket: the job's start
        and end at info priority with C{JOB}, C{SERVER} and the event
        type's C{MESSAGE_ID}; nothing of them as text on its output.
        """
        user = freshUser(self.instance)
        run = self.daemon(self.config(user, 5))
        started = self.waitFor(run, messageStarts("Job job started: ", JOB="job"))
        self.assertJobEntry(started, user, "6")
        self.assertIn(
            first(started, "MESSAGE_ID"),
            [messageID("imapmig.job.joblog", format) for format in _STARTED],
        )
        done = self.waitFor(run, messageStarts("Job job done after ", JOB="job"))
        self.assertJobEntry(done, user, "6")
        self.assertIn("5 copied", first(done, "MESSAGE") or "")
        self.assertEqual(run.exited(), 0, run.output())
        self.assertIsNotNone(
            self.journal.waitFor(messageStarts("imapmig 0.1.0 (python "), 0.1, self.seen)
        )
        self.assertNotIn("Job job started", run.output())
        self.assertNotIn("Traceback", run.output())
        self.assertNotIn("dropped", " ".join(first(e, "MESSAGE") or "" for e in self.seen))

    def test_jobFailed(self) -> None:
        """
        A job that fails (its login refused) ends with an entry at error
        priority (3) naming it.
        """
        user = freshUser(self.instance)
        wrong = DovecotUser(user.name, "not-the-password-4711")
        run = self.daemon(self.config(wrong, 2))
        failed = self.waitFor(run, messageStarts("Job job failed after ", JOB="job"))
        self.assertJobEntry(failed, user, "3")
        self.assertIn("login refused", first(failed, "MESSAGE") or "")
        self.assertEqual(run.exited(), 1, run.output())
        everything = json.dumps(self.seen) + run.output()
        self.assertNotIn("not-the-password-4711", everything)

    def test_messageFailed(self) -> None:
        """
        A message the destination refuses is an entry at warning priority
        naming its job, its mailbox and the server; the job's end, with
        failed messages, too.
        """
        user = freshUser(self.instance)
        # Each generated message is larger than this.
        run = self.daemon(self.config(user, 2, max_message_size=100))
        failed = self.waitFor(run, messageStarts("Job job: message ", JOB="job"))
        self.assertJobEntry(failed, user, "4")
        self.assertEqual(first(failed, "MAILBOX"), "INBOX")
        self.assertIn("not migrated", first(failed, "MESSAGE") or "")
        self.assertEqual(
            first(failed, "MESSAGE_ID"),
            messageID(
                "imapmig.job.joblog",
                "Job {job}: message {key} of folder {folder} not migrated: {reason}",
            ),
        )
        done = self.waitFor(run, messageStarts("Job job done after ", JOB="job"))
        self.assertJobEntry(done, user, "4")
        run.exited()

    def test_twistd(self) -> None:
        """
        Under C{twistd --logger=imapmig.log.loglevels.twistdLogObserver} too.
        """
        user = freshUser(self.instance)
        command = twistdCommand(self.config(user, 3))
        command.insert(command.index("imapmig"), "--logger=imapmig.log.loglevels.twistdLogObserver")
        run = self.start(command, "stdout", {})
        started = self.waitFor(run, messageStarts("Job job started: ", JOB="job"))
        self.assertJobEntry(started, user, "6")
        self.waitFor(run, messageStarts("Job job done after ", JOB="job"))
        self.assertEqual(run.exited(), 0, run.output())

    def test_otherStream(self) -> None:
        """
        A C{JOURNAL_STREAM} naming another file than the daemon's output
        (inherited, the output redirected) leaves the log as text on its
        output; nothing goes to the journal socket.
        """
        user = freshUser(self.instance)
        run = self.daemon(self.config(user, 2), journalStream="other")
        self.assertEqual(run.exited(), 0, run.output())
        self.assertIn("[imapmig.job.joblog#info] Job job started: ", run.output())
        self.assertEqual(self.journal.receiveAll(), [])

    def test_json(self) -> None:
        """
        C{IMAPMIG_LOG_FORMAT=json} writes JSON lines, one object per line,
        the job's start and end among them with their fields, even under
        systemd.
        """
        user = freshUser(self.instance)
        run = self.daemon(self.config(user, 4), IMAPMIG_LOG_FORMAT="json")
        self.assertEqual(run.exited(), 0, run.output())
        records = [json.loads(line) for line in run.output().splitlines()]
        started = [r for r in records if r["message"].startswith("Job job started: ")]
        self.assertEqual(len(started), 1, records)
        self.assertEqual(started[0]["job"], "job")
        self.assertEqual(started[0]["level"], "info")
        self.assertEqual(started[0]["namespace"], "imapmig.job.joblog")
        ended = [r for r in records if r["message"].startswith("Job job done after ")]
        self.assertEqual([r["copied"] for r in ended], [4])
        self.assertEqual(self.journal.receiveAll(), [])

    def test_jsonFieldsAreTheMetricLabels(self) -> None:
        """
        In the JSON lines of a real job,
        C{server} is the server's name under C{servers} (the C{server} label
        of the job's C{/metrics} series), never C{USER at ENDPOINT};
        C{user} is the account's user; the job's own lines all carry both;
        and every count is a JSON integer, never text such as
        C{"4 messages"}.
        """
        user = freshUser(self.instance)
        run = self.daemon(self.config(user, 6), IMAPMIG_LOG_FORMAT="json")
        self.assertEqual(run.exited(), 0, run.output())
        records = [json.loads(line) for line in run.output().splitlines()]
        labelled = [r for r in records if "server" in r]
        joblog = [r for r in records if r["namespace"] == "imapmig.job.joblog"]
        self.assertTrue(joblog, records)
        for record in joblog:
            self.assertEqual(
                (record["job"], record["server"], record["user"]),
                ("job", "dovecot", user.name),
                record,
            )
        for record in labelled:
            self.assertEqual(record["server"], "dovecot", record)
            self.assertEqual(record.get("user", user.name), user.name, record)
        counts = (
            "copied", "alreadyPresent", "alreadyMigrated", "failed", "total", "migrated",
            "failedBefore", "messages", "folders", "pending", "count", "done",
        )  # fmt: skip
        seen = set()
        for record in records:
            for key in counts:
                if key in record:
                    seen.add(key)
                    value = record[key]
                    self.assertIs(type(value), int, (key, record))
            for key, value in record.items():
                if isinstance(value, str) and key != "message":
                    # No count written as text ("6 messages", "1 folder").
                    self.assertNotRegex(value, r"^\d[\d,]* \w+s?$", (key, record))
        # The start, listing and end lines were among them.
        self.assertLessEqual({"copied", "migrated", "messages", "folders", "total"}, seen)
        listed = [r for r in records if r["message"].startswith("Job job: 6 messages in 1 folder")]
        self.assertEqual([(r["messages"], r["folders"]) for r in listed], [(6, 1)], records)
