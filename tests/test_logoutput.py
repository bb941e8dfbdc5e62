# -*- test-case-name: tests.test_logoutput -*-
"""
Tests for L{imapmig.log.logoutput}: which log format the daemon writes, from
its environment, in both launchers.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile

from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

from imapmig.log.logoutput import (
    connectedToJournal,
    formatFromEnvironment,
    observerFor,
    observerFromEnvironment,
)
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotUser
from tests.journalreader import JournalSocket, first
from tests.support import (
    daemonCommand,
    SOURCE_TREE,
    newDirectory,
    sourceTreeEnvironment,
    twistdCommand,
    writeDaemonConfig,
)


def streamOf(testCase: SynchronousTestCase) -> tuple[io.TextIOWrapper, str]:
    """
    A file opened for writing, and its C{DEVICE:INODE} as systemd writes
    it in C{JOURNAL_STREAM}.
    """
    stream = tempfile.TemporaryFile("w+")
    testCase.addCleanup(stream.close)
    status = os.fstat(stream.fileno())
    return stream, f"{status.st_dev}:{status.st_ino}"


class FormatTests(SynchronousTestCase):
    """
    L{formatFromEnvironment} and L{connectedToJournal}.
    """

    def setUp(self) -> None:
        self.journal = JournalSocket(self)
        self.stdout, self.stdoutID = streamOf(self)
        self.stderr, self.stderrID = streamOf(self)
        self.streams = (self.stdout, self.stderr)

    def choose(self, **environ: str) -> str:
        environ.setdefault("IMAPMIG_JOURNAL_SOCKET", self.journal.path)
        return formatFromEnvironment(environ, self.streams)

    def test_text(self) -> None:
        """
        Outside systemd (no C{JOURNAL_STREAM}) the log is text.
        """
        self.assertEqual(self.choose(), "text")

    def test_journalStream(self) -> None:
        """
        When C{JOURNAL_STREAM} names standard output's or standard error's
        file and the journal socket exists, the log goes to the journal.
        """
        self.assertEqual(self.choose(JOURNAL_STREAM=self.stdoutID), "journal")
        self.assertEqual(self.choose(JOURNAL_STREAM=self.stderrID), "journal")
        self.assertTrue(connectedToJournal({"JOURNAL_STREAM": self.stderrID}, self.streams))

    def test_otherStream(self) -> None:
        """
        A C{JOURNAL_STREAM} inherited by a process whose output goes
        elsewhere (another file) does not choose the journal.
        """
        other, otherID = streamOf(self)
        self.assertEqual(self.choose(JOURNAL_STREAM=otherID), "text")
        self.assertEqual(self.choose(JOURNAL_STREAM="garbage"), "text")
        self.assertFalse(connectedToJournal({"JOURNAL_STREAM": otherID}, self.streams))
        # A stream without a file descriptor is never the journal's.
        self.assertFalse(connectedToJournal({"JOURNAL_STREAM": otherID}, [io.StringIO()]))

    def test_noSocket(self) -> None:
        """
        Without the journal socket (or with something else at its path),
        the log stays text even under systemd.
        """
        self.journal.stop()
        self.assertEqual(self.choose(JOURNAL_STREAM=self.stdoutID), "text")
        with open(self.journal.path, "w"):
            pass
        self.assertEqual(self.choose(JOURNAL_STREAM=self.stdoutID), "text")

    def test_explicit(self) -> None:
        """
        C{IMAPMIG_LOG_FORMAT} chooses, whatever C{JOURNAL_STREAM} says;
        case and spaces do not matter.
        """
        stream = self.stdoutID
        self.assertEqual(self.choose(IMAPMIG_LOG_FORMAT="json", JOURNAL_STREAM=stream), "json")
        self.assertEqual(self.choose(IMAPMIG_LOG_FORMAT=" Text ", JOURNAL_STREAM=stream), "text")
        self.assertEqual(self.choose(IMAPMIG_LOG_FORMAT="journal"), "journal")
        self.assertEqual(self.choose(IMAPMIG_LOG_FORMAT=""), "text")

    def test_unknown(self) -> None:
        """
        An unknown format is an error naming it and the formats allowed.
        """
        e = self.assertRaises(ValueError, self.choose, IMAPMIG_LOG_FORMAT="syslog")
        self.assertEqual(
            str(e),
            "IMAPMIG_LOG_FORMAT: unknown log format 'syslog' (one of: text, json, journal)",
        )


class ObserverTests(SynchronousTestCase):
    """
    L{observerFor} and L{observerFromEnvironment} write what they say.
    """

    def test_each(self) -> None:
        """
        C{text} writes twistd's line to standard output, C{json} a JSON line
        there, C{journal} an entry to the journal socket.
        """
        journal = JournalSocket(self)
        environ = {"IMAPMIG_JOURNAL_SOCKET": journal.path}
        written = {}
        for name in ("text", "json", "journal"):
            out, err = io.StringIO(), io.StringIO()
            observer = observerFor(name, out, err, environ)
            Logger(namespace="imapmig.x", observer=observer).info("Job {job} started", job="a")
            written[name] = (out.getvalue(), err.getvalue())
        self.assertRegex(written["text"][0], r"^\S+ \[imapmig.x#info\] Job a started\n$")
        self.assertEqual(json.loads(written["json"][0])["job"], "a")
        self.assertEqual(written["journal"], ("", ""))
        (entry,) = journal.receiveAll()
        self.assertEqual(first(entry, "JOB"), "a")

    def test_fromEnvironment(self) -> None:
        """
        L{observerFromEnvironment} writes the format the environment asks
        for to the streams given.
        """
        out, err = io.StringIO(), io.StringIO()
        observer = observerFromEnvironment({"IMAPMIG_LOG_FORMAT": "json"}, out, err)
        Logger(namespace="n", observer=observer).warn("w")
        self.assertEqual(json.loads(out.getvalue())["level"], "warn")
        self.assertRaises(
            ValueError, observerFromEnvironment, {"IMAPMIG_LOG_FORMAT": "xml"}, out, err
        )


class TwistdObserverTests(SynchronousTestCase):
    """
    L{imapmig.log.loglevels.twistdLogObserver} writes the format asked for,
    the level filter in front.
    """

    def setEnvironment(self, **values: str) -> None:
        """
        Set C{values} in this process's environment until the test ends.
        """
        saved = {name: os.environ.get(name) for name in values}

        def restore() -> None:
            for name, old in saved.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old

        self.addCleanup(restore)
        os.environ.update(values)

    def test_jsonFiltered(self) -> None:
        """
        With C{IMAPMIG_LOG_FORMAT=json}, the observer writes JSON lines to
        standard output, debug events left out; an unknown level is
        reported as a warning in that format.
        """
        from imapmig.log.loglevels import twistdLogObserver

        out = io.StringIO()
        self.patch(sys, "stdout", out)
        self.setEnvironment(IMAPMIG_LOG_FORMAT="json", IMAPMIG_LOG_LEVEL="loud")
        observer = twistdLogObserver()
        log = Logger(namespace="imapmig.x", observer=observer)
        log.debug("hidden")
        log.info("shown {job}", job="a")
        records = [json.loads(line) for line in out.getvalue().splitlines()]
        self.assertEqual([r["level"] for r in records], ["warn", "info"])
        self.assertIn("IMAPMIG_LOG_LEVEL: unknown log level 'loud'", records[0]["message"])
        self.assertTrue(records[0]["message"].endswith("; logging at info level"))
        self.assertEqual(records[1]["job"], "a")


class LauncherTests(SynchronousTestCase):
    """
    Both launchers refuse an unknown C{IMAPMIG_LOG_FORMAT} before they start.
    """

    def _config(self) -> str:
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        writeMaildir(maildir, 0)
        return writeDaemonConfig(
            directory,
            DovecotUser("nobody", "pw"),
            {"maildir": maildir},
            # Nothing listens on port 1: a connection would fail.
            {"endpoint": "tcp:127.0.0.1:1", "starttls": "off"},
        )

    def _launch(self, command: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            command,
            env=dict(sourceTreeEnvironment(), IMAPMIG_LOG_FORMAT="syslog"),
            cwd=SOURCE_TREE,
            capture_output=True,
            timeout=120,
        )

    def test_daemonRefuses(self) -> None:
        """
        C{imapmig-daemon} exits with the configuration error status (2),
        saying why on standard error, writing nothing else.
        """
        path = self._config()
        done = self._launch(daemonCommand(path))
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(b"IMAPMIG_LOG_FORMAT: unknown log format 'syslog'", done.stderr)
        self.assertEqual(done.stdout, b"")

    def test_twistdRefuses(self) -> None:
        """
        Under C{twistd --logger=imapmig.log.loglevels.twistdLogObserver} too:
        status 2 and the reason, nothing started.
        """
        path = self._config()
        command = twistdCommand(path)
        command.insert(command.index("imapmig"), "--logger=imapmig.log.loglevels.twistdLogObserver")
        done = self._launch(command)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(b"IMAPMIG_LOG_FORMAT: unknown log format 'syslog'", done.stderr)
        self.assertNotIn(b"started", done.stdout + done.stderr)
