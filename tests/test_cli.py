"""
Tests for L{imapmig.commands.cli}: the report of what the state database records.
"""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

import imapmig

from imapmig.commands.cli import main
from imapmig.commands.report import report
from imapmig.commands.sides import PAGE, selectedPages
from imapmig.commands.verify import reportNotWritten, verify
from imapmig.config import loadConfig
from imapmig.state import FolderFallback, MessageOutcome, Transition
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore


class ReportTests(SynchronousTestCase):
    """
    imapmig report.
    """

    def setUp(self) -> None:
        self.store = MemoryStateStore()
        self.store.recordOutcomes(
            "alice",
            [
                MessageOutcome("", "m1", "INBOX", 10, 5, 1, lineEndingsConverted=True),
                MessageOutcome(".Sent", "m2", "Sent", 20, failure="refused by server: NO [LIMIT] too big"),
                MessageOutcome("", "m3", "INBOX", 10, 5, 2, alreadyPresent=True),
                MessageOutcome(
                    "", "m4", "INBOX", 10, 5, 3,
                    note="flag 'a b' dropped: not a valid IMAP keyword",
                ),  # fmt: skip
            ],
        )
        self.store.recordFolderFallback(
            "alice", FolderFallback('Say "hi"', "Say _hi_", "Invalid mailbox name")
        )

    def test_text(self) -> None:
        """
        The text report gives the counts (copied, already present, failed,
        converted, with notes), each failure with its mailbox, key and
        reason, each note, and each folder created under a fallback name
        with the server's refusal.
        """
        out = io.StringIO()
        self.assertEqual(report(self.store, ["alice"], False, out), 1)
        self.assertEqual(
            out.getvalue(),
            "alice: 3 appended (2 copied, 1 already present), 1 failed;"
            " line endings converted in 1, 1 with notes\n"
            "  failed\tSent\t.Sent/m2\trefused by server: NO [LIMIT] too big\n"
            "  note\tINBOX\t/m4\tflag 'a b' dropped: not a valid IMAP keyword\n"
            '  folder\tSay "hi"\t-> Say _hi_\tInvalid mailbox name\n'
            "summary: 1 job: 0 done, 1 done with failures, 0 failed, 0 held (0 paused,"
            " 0 cancelled), 0 not run\n"
            "summary: 3 messages in the destination (2 copied, 1 already present), 1 failed\n"
            "summary: 20 B copied\n"
            "failed: alice (1 message failed)\n",
        )

    def test_json(self) -> None:
        """
        The JSON report carries the same facts.
        """
        out = io.StringIO()
        self.assertEqual(report(self.store, ["alice"], True, out), 1)
        [entry] = json.loads(out.getvalue())
        self.assertEqual((entry["ok"], entry["job_failure"]), (False, None))
        self.assertEqual(
            (entry["appended"], entry["copied"], entry["already_present"], entry["failed"]),
            (3, 2, 1, 1),
        )
        self.assertEqual(entry["notes"][0]["message_key"], "m4")
        self.assertEqual(entry["failures"][0]["reason"], "refused by server: NO [LIMIT] too big")
        self.assertEqual(
            entry["folder_fallbacks"],
            [{"mailbox": 'Say "hi"', "fallback": "Say _hi_", "reason": "Invalid mailbox name"}],
        )

    def test_jobFailed(self) -> None:
        """
        A job whose latest run failed (its login refused) before copying
        anything is reported as failed, with the reason, and the status
        is 1; the JSON tells it apart from failed messages.
        """
        store = MemoryStateStore()
        store.recordJobFailure("bob", "login refused: NO [AUTHENTICATIONFAILED] bad")
        out = io.StringIO()
        self.assertEqual(report(store, ["bob"], False, out), 1)
        self.assertEqual(
            out.getvalue(),
            "bob: 0 appended (0 copied, 0 already present), 0 failed;"
            " line endings converted in 0, 0 with notes\n"
            "  job failed\tlogin refused: NO [AUTHENTICATIONFAILED] bad\n"
            "summary: 1 job: 0 done, 0 done with failures, 1 failed, 0 held (0 paused,"
            " 0 cancelled), 0 not run\n"
            "summary: 0 messages in the destination (0 copied, 0 already present), 0 failed\n"
            "summary: 0 B copied\n"
            "failed: bob (the job failed)\n",
        )
        out = io.StringIO()
        self.assertEqual(report(store, ["bob", "alice"], True, out), 1)
        bob, alice = json.loads(out.getvalue())
        self.assertEqual(
            (bob["ok"], bob["job_failure"], bob["failed"]),
            (False, "login refused: NO [AUTHENTICATIONFAILED] bad", 0),
        )
        self.assertEqual((alice["ok"], alice["job_failure"]), (True, None))

    def test_held(self) -> None:
        """
        A job the admin paused is reported paused, by whom and when, on a
        "paused:" line, and is not failed (status 0 when nothing else
        failed); a cancelled one is reported cancelled and counts as not
        completed (status 1, "cancelled by the admin" on the failed line).
        """
        clock = [1700000000.0]
        store = MemoryStateStore(seconds=lambda: clock[0])
        store.recordJobHolds(["alice"], "paused", "192.0.2.7")
        out = io.StringIO()
        self.assertEqual(report(store, ["alice", "bob"], False, out), 0)
        self.assertEqual(
            out.getvalue(),
            "alice: 0 appended (0 copied, 0 already present), 0 failed;"
            " line endings converted in 0, 0 with notes\n"
            "  paused by 192.0.2.7 at 2023-11-14T22:13:20Z\n"
            "bob: 0 appended (0 copied, 0 already present), 0 failed;"
            " line endings converted in 0, 0 with notes\n"
            "summary: 2 jobs: 0 done, 0 done with failures, 0 failed, 1 held (1 paused,"
            " 0 cancelled), 1 not run\n"
            "summary: 0 messages in the destination (0 copied, 0 already present), 0 failed\n"
            "summary: 0 B copied\n"
            "paused: alice\n",
        )
        store.recordJobHolds(["bob"], "cancelled", "192.0.2.7")
        store.recordJobFailure("bob", "cancelled by the admin")
        out = io.StringIO()
        self.assertEqual(report(store, ["alice", "bob"], False, out), 1)
        self.assertTrue(
            out.getvalue().endswith(
                "  cancelled by 192.0.2.7 at 2023-11-14T22:13:20Z\n"
                "  job failed\tcancelled by the admin\n"
                "summary: 2 jobs: 0 done, 0 done with failures, 0 failed, 2 held (1 paused,"
                " 1 cancelled), 0 not run\n"
                "summary: 0 messages in the destination (0 copied, 0 already present),"
                " 0 failed\n"
                "summary: 0 B copied\n"
                "paused: alice\n"
                "failed: bob (cancelled by the admin)\n"
            ),
            out.getvalue(),
        )
        out = io.StringIO()
        self.assertEqual(report(store, ["alice", "bob"], True, out), 1)
        alice, bob = json.loads(out.getvalue())
        self.assertEqual(
            (alice["ok"], alice["hold"]),
            (True, {"state": "paused", "by": "192.0.2.7", "at": "2023-11-14T22:13:20Z"}),
        )
        self.assertEqual((bob["ok"], bob["hold"]["state"]), (False, "cancelled"))

    def test_timeline(self) -> None:
        """
        The JSON report carries each job's timeline as the store keeps it
        (empty for none); the text report shows the last change of a held
        job or one whose run failed, one line, its cause cut and without
        control characters, and none for a job that ended well or with
        failed messages only.
        """
        store = MemoryStateStore(seconds=lambda: 1700000000.0)
        started = Transition(1700000000.0, "queued", "running", "started")
        store.recordTransition("bob", started)
        store.recordTransition(
            "bob", Transition(1700000060.0, "running", "failed", "login refused: \x1b]0;x\x07 NO")
        )
        store.recordJobFailure("bob", "login refused")
        store.recordTransition("carol", started)
        store.recordTransition("carol", Transition(1700000090.0, "running", "done", "done"))
        store.recordTransition("dave", started)
        store.recordTransition(
            "dave", Transition(1700000120.0, "running", "paused", "paused by the admin " + "x" * 200, "192.0.2.7")
        )
        store.recordJobHolds(["dave"], "paused", "192.0.2.7")
        store.recordOutcomes("frank", [MessageOutcome("", "m1", "INBOX", 10, failure="NO")])
        store.recordTransition(
            "frank", Transition(1700000150.0, "running", "done_with_failures", "1 message failed")
        )
        out = io.StringIO()
        self.assertEqual(report(store, ["bob", "carol", "dave", "erin", "frank"], False, out), 1)
        lines = out.getvalue().splitlines()
        self.assertEqual(
            [line for line in lines if line.startswith("  last change")],
            [
                "  last change\trunning -> failed at 2023-11-14T22:14:20Z\tlogin refused:  ]0;x  NO",
                "  last change\trunning -> paused at 2023-11-14T22:15:20Z\tpaused by the admin "
                + "x" * 99 + "…",
            ],
        )
        self.assertEqual(lines[2], "  last change\trunning -> failed at 2023-11-14T22:14:20Z"
                         "\tlogin refused:  ]0;x  NO")  # fmt: skip
        out = io.StringIO()
        report(store, ["bob", "carol", "erin"], True, out)
        bob, carol, erin = json.loads(out.getvalue())
        self.assertEqual(
            carol["timeline"],
            [
                {"time": 1700000000.0, "from": "queued", "to": "running", "cause": "started", "by": None},
                {"time": 1700000090.0, "from": "running", "to": "done", "cause": "done", "by": None},
            ],
        )
        self.assertEqual(bob["timeline"][-1]["cause"], "login refused: \x1b]0;x\x07 NO")
        self.assertEqual(erin["timeline"], [])

    def test_allGood(self) -> None:
        """
        With no job failed and no message failed, the status is 0 and no
        "failed:" line is written.
        """
        store = MemoryStateStore()
        store.recordOutcomes("alice", [MessageOutcome("", "m1", "INBOX", 10, 5, 1)])
        store.recordJobFailure("alice", "an earlier run failed")
        store.recordJobFailure("alice", None)
        out = io.StringIO()
        self.assertEqual(report(store, ["alice", "carol"], False, out), 0)
        self.assertNotIn("failed:", out.getvalue())
        out = io.StringIO()
        self.assertEqual(report(store, ["alice"], True, out), 0)
        [entry] = json.loads(out.getvalue())
        self.assertEqual((entry["ok"], entry["job_failure"]), (True, None))

    def test_mainFromConfig(self) -> None:
        """
        The command reads the state database the configuration names and
        exits 0 when nothing failed; an unknown job name is an error with
        status 2; a failed job, or a failed message, makes it exit 1.
        """
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        state = os.path.join(base, "state.sqlite")
        store = SQLiteStateStore(state, seconds=lambda: 1.0)
        store.recordOutcomes("alice", [MessageOutcome("", "m1", "INBOX", 10, 5, 1)])
        store.close()
        config = os.path.join(base, "c.yaml")
        # Private: it holds an inline password.
        with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                f"state: {state}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{{name: alice, source: {{maildir: {maildir}}},"
                " destination: {server: s, user: a, password: p}}]\n"
            )
        out = io.StringIO()
        self.assertEqual(main(["report", "--config", config], out), 0)
        self.assertEqual(
            out.getvalue(),
            "alice: 1 appended (1 copied, 0 already present), 0 failed;"
            " line endings converted in 0, 0 with notes\n"
            "summary: 1 job: 1 done, 0 done with failures, 0 failed, 0 held (0 paused,"
            " 0 cancelled), 0 not run\n"
            "summary: 1 message in the destination (1 copied, 0 already present), 0 failed\n"
            "summary: 10 B copied\n",
        )
        self.assertEqual(main(["report", "--config", config, "--job", "bob"], out), 2)
        store = SQLiteStateStore(state, seconds=lambda: 2.0)
        store.recordJobFailure("alice", "login refused: NO [AUTHENTICATIONFAILED]")
        store.close()
        out = io.StringIO()
        self.assertEqual(main(["report", "--config", config], out), 1)
        self.assertTrue(out.getvalue().endswith("failed: alice (the job failed)\n"))
        store = SQLiteStateStore(state, seconds=lambda: 3.0)
        store.recordOutcomes(
            "alice", [MessageOutcome("", "m2", "INBOX", 10, failure="refused: NO too big")]
        )
        store.recordJobFailure("alice", None)
        store.close()
        out = io.StringIO()
        self.assertEqual(main(["report", "--config", config, "--json"], out), 1)
        [entry] = json.loads(out.getvalue())
        self.assertEqual((entry["ok"], entry["job_failure"], entry["failed"]), (False, None, 1))


class VersionTests(SynchronousTestCase):
    """
    C{imapmig --version}, C{imapmig-daemon --version} and C{twistd imapmig
    --version} print the version and exit 0.
    """

    def captured(self, run: Callable[[], object]) -> tuple[object, str]:
        """
        Run C{run}, which must exit; its exit code and what it printed.
        """
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        with self.assertRaises(SystemExit) as exiting:
            run()
        return exiting.exception.code, out.getvalue()

    def test_cli(self) -> None:
        """
        C{imapmig --version}.
        """
        self.assertEqual(
            self.captured(lambda: main(["--version"])), (0, f"imapmig {imapmig.__version__}\n")
        )

    def test_daemonOptions(self) -> None:
        """
        The daemon's options (C{imapmig-daemon} and the twistd plugin).
        """
        from imapmig.daemon.tap import Options

        options = Options()
        self.assertEqual(
            self.captured(lambda: options.parseOptions(["--version"])),
            (0, f"imapmig {imapmig.__version__}\n"),
        )


class VerifyReportPathTests(SynchronousTestCase):
    """
    Where C{imapmig verify} writes its report, and what it says when it
    cannot.
    """

    def writeConfig(self) -> tuple[str, str]:
        """
        A configuration with one job and an empty state database.

        @return: its path and the state database's.
        """
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        state = os.path.join(base, "state.sqlite")
        SQLiteStateStore(state, seconds=lambda: 1.0).close()
        config = os.path.join(base, "c.yaml")
        with open(config, "w") as f:
            f.write(
                f"state: {state}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{{name: alice, source: {{maildir: {maildir}}},"
                " destination: {server: s, user: a, password: p}}]\n"
            )
        # An inline password is refused in a file others may read.
        os.chmod(config, 0o600)
        return config, state

    def verifyNothing(self, reportPath: str, besideState: bool) -> tuple[int, str]:
        """
        Run L{verify} on no job (it only writes the report).

        @return: its exit status and output.
        """
        config, state = self.writeConfig()
        store = SQLiteStateStore(state, seconds=lambda: 0.0, readOnly=True)
        self.addCleanup(store.close)
        out = io.StringIO()
        status = self.successResultOf(
            Deferred.fromCoroutine(
                verify(
                    loadConfig(config), [], store, MemoryReactorClock(), reportPath, out,
                    besideState,
                )  # fmt: skip
            )
        )
        return status, out.getvalue()

    def test_written(self) -> None:
        """
        The report is written where it is asked, and the command says where.
        """
        path = os.path.abspath(self.mktemp())
        status, output = self.verifyNothing(path, False)
        self.assertEqual((status, output), (0, f"report written to {path}\n"))
        with open(path) as f:
            self.assertEqual(json.load(f), [])

    def test_notWritten(self) -> None:
        """
        A report that cannot be written (here its directory is a file)
        makes the command exit 1 saying why, leaving no partial file.
        """
        blocker = os.path.abspath(self.mktemp())
        open(blocker, "w").close()
        path = os.path.join(blocker, "report.json")
        status, output = self.verifyNothing(path, False)
        self.assertEqual(
            (status, output), (1, f"cannot write the report {path}: Not a directory\n")
        )

    def test_notWrittenBesideState(self) -> None:
        """
        When the default place beside the state database fails, the
        message says so and points at C{--report}.
        """
        blocker = os.path.abspath(self.mktemp())
        open(blocker, "w").close()
        path = os.path.join(blocker, "imapmig-verify.json")
        status, output = self.verifyNothing(path, True)
        self.assertEqual(status, 1)
        self.assertEqual(
            output,
            f"cannot write the report {path} beside the state database: Not a directory;"
            " give --report FILE to write it elsewhere\n",
        )

    def test_directoryNotWritable(self) -> None:
        """
        Permission refused (or a read-only file system) is named as the
        directory not being writable.
        """
        for code in (errno.EACCES, errno.EROFS):
            error = OSError(code, os.strerror(code))
            self.assertEqual(
                reportNotWritten("/var/lib/imapmig/imapmig-verify.json", error, True),
                "cannot write the report /var/lib/imapmig/imapmig-verify.json beside the"
                " state database: the directory /var/lib/imapmig is not writable"
                f" ({os.strerror(code)}); give --report FILE to write it elsewhere\n",
            )
        error = OSError(errno.EACCES, os.strerror(errno.EACCES))
        self.assertEqual(
            reportNotWritten("/srv/r.json", error, False),
            f"cannot write the report /srv/r.json: the directory /srv is not writable"
            f" ({os.strerror(errno.EACCES)})\n",
        )

    def test_defaultBesideState(self) -> None:
        """
        Without C{--report}, the report's path is beside the state
        database, whatever the working directory.
        """
        from imapmig.status.verifyreport import defaultReportPath

        self.assertEqual(
            defaultReportPath("/var/lib/imapmig/state.sqlite"),
            "/var/lib/imapmig/imapmig-verify.json",
        )
        here = os.path.abspath(self.mktemp())
        os.makedirs(here)
        self.patch(os, "getcwd", lambda: here)
        self.assertEqual(
            defaultReportPath("state.sqlite"), os.path.join(here, "imapmig-verify.json")
        )


class PostgreSQLStateTests(SynchronousTestCase):
    """
    Every command reads a PostgreSQL state (L{imapmig.daemon.pgstate});
    one it cannot read is refused with status 2 and one line naming
    C{state}.  (tests.test_daemon_postgresql reads a real one.)
    """

    def test_refused(self) -> None:
        """
        C{report}, C{plan} and C{verify} (with or without C{--report})
        exit 2 with one line naming C{state} when the database does not
        answer, and write nothing.
        """
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        config = os.path.join(base, "c.yaml")
        with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                "state: postgresql://imapmig@127.0.0.1:1/imapmig\n"
                "fleet: {name: acme}\n"
                "servers: {s: {endpoint: 'tcp:127.0.0.1:143'}}\n"
                f"jobs: [{{name: alice, source: {{maildir: {maildir}}},"
                " destination: {server: s, user: a, password: p}}]\n"
            )
        line = (
            f"{config}: state: postgresql://imapmig@127.0.0.1:1/imapmig: cannot connect:"
            ' connection to server at "127.0.0.1", port 1 failed: Connection refused Is the'
            " server running on that host and accepting TCP/IP connections?\n"
        )
        report = os.path.join(base, "report.json")
        for argv in (
            ["report", "--config", config],
            ["plan", "--config", config],
            ["verify", "--config", config],
            ["verify", "--config", config, "--report", report],
        ):
            stderr = io.StringIO()
            self.patch(sys, "stderr", stderr)
            out = io.StringIO()
            self.assertEqual((main(argv, out), stderr.getvalue(), out.getvalue()), (2, line, ""))
        self.assertEqual(sorted(os.listdir(base)), ["Maildir", "c.yaml"])


class SelectedPagesTests(SynchronousTestCase):
    """
    L{selectedPages}: the jobs C{plan} and C{verify} run, a page at a time.
    """

    def test_pages(self) -> None:
        """
        The jobs named, in the configuration's order, in pages of at most
        L{PAGE} (whose records the store reads at once); the names are
        looked up as a set, not searched in their list.
        """

        class Unsearched(list[str]):
            def __contains__(self, name: object) -> bool:
                raise AssertionError("names searched as a list")

        class Named:
            def __init__(self, name: str) -> None:
                self.name = name

        class Configured:
            jobs = [Named(f"j{n:04d}") for n in range(PAGE * 2 + 3)]

        names = Unsearched(f"j{n:04d}" for n in range(PAGE * 2 + 3) if n % 2 == 0)
        pages = list(selectedPages(Configured(), names[::-1]))  # type: ignore[arg-type]
        self.assertEqual([len(page) for page in pages], [PAGE, 2])
        self.assertEqual([job.name for page in pages for job in page], list(names))
