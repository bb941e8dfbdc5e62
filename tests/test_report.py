# -*- test-case-name: tests.test_report -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the summary that ends C{imapmig report}, its C{--csv} (one row
per job) and C{--failures --csv} (every failed message, named).
"""

from __future__ import annotations

import csv
import io
import json
import os

from twisted.trial.unittest import SynchronousTestCase

from imapmig.commands.cli import main
from imapmig.commands.report import LISTED_JOBS, REPORT_PAGE, report, writeFailuresCSV
from imapmig.state import MessageNames, MessageOutcome, Transition, withNames
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.status.manifest import outcomeRow

NAMES = MessageNames("<big@x>", "Tue, 3 Mar 2020 10:00:00 +0100", "Jörg <j@x>", "Grüße")


def fill(store: MemoryStateStore | SQLiteStateStore, clock: list[float]) -> None:
    """
    Record jobs a (500 messages of 1 MiB copied over 125 s), b (a named
    failure), c (a failed run), d (nothing), e (paused).
    """
    clock[0] = 1_700_000_000.0
    copied = [MessageOutcome("INBOX", str(i), "INBOX", 1 << 20, 5, i + 1) for i in range(500)]
    store.recordOutcomes("a", copied[:250])
    clock[0] += 125
    store.recordOutcomes("a", copied[250:])
    store.recordOutcomes(
        "b", [withNames(MessageOutcome("INBOX", "9", "INBOX", 10, failure="too big"), NAMES)]
    )
    store.recordJobFailure("c", "login refused")
    store.recordJobHolds(["e"], "paused", "192.0.2.7")


class SummaryTests(SynchronousTestCase):
    """
    The text report ends with the summary of the run.
    """

    def test_summary(self) -> None:
        """
        The jobs by outcome, the messages, and the octets copied with the
        time from the first outcome recorded to the last and the rates.
        """
        clock = [0.0]
        store = MemoryStateStore(seconds=lambda: clock[0])
        fill(store, clock)
        out = io.StringIO()
        self.assertEqual(report(store, ["a", "b", "c", "d", "e"], False, out), 1)
        lines = out.getvalue().splitlines()
        self.assertEqual(
            [line for line in lines if line.startswith("summary:")],
            [
                "summary: 5 jobs: 1 done, 1 done with failures, 1 failed, 1 held (1 paused,"
                " 0 cancelled), 1 not run",
                "summary: 500 messages in the destination (500 copied, 0 already present),"
                " 1 failed",
                "summary: 500.0 MiB copied in 2 min 5 s (first to last copy recorded):"
                " 4 messages/s, 4.00 MiB/s",
            ],
        )
        self.assertTrue(all(line.startswith("summary:") for line in lines[-5:-2]))
        self.assertEqual(
            lines[-2:], ["paused: e", "failed: b (1 message failed), c (the job failed)"]
        )

    def test_namesBounded(self) -> None:
        """
        The last line names at most L{LISTED_JOBS} failed jobs and counts
        the others, so the summary above it stays on the screen.
        """
        store = MemoryStateStore()
        names = [f"u{n:02d}" for n in range(LISTED_JOBS + 5)]
        for name in names:
            store.recordJobFailure(name, "login refused")
        out = io.StringIO()
        report(store, names, False, out)
        last = out.getvalue().splitlines()[-1]
        self.assertEqual(
            last,
            "failed: "
            + ", ".join(f"{name} (the job failed)" for name in names[:LISTED_JOBS])
            + " and 5 more (imapmig report --csv lists every job)",
        )

    def test_thousands(self) -> None:
        """
        Counts are written with thousands separated.
        """
        store = MemoryStateStore()
        store.recordOutcomes("a", [MessageOutcome("", str(i), "INBOX", 1) for i in range(1234)])
        out = io.StringIO()
        report(store, ["a"], False, out)
        self.assertIn("summary: 1,234 messages in the destination (1,234 copied", out.getvalue())

    def test_unfinished(self) -> None:
        """
        A job whose last recorded change of state is not an end (a fleet's
        daemon runs it while the report is read, or its run stopped) is
        counted not finished, not done, whatever it copied so far; one whose
        timeline ends done is done.  (A report read from a fleet's database
        mid-run said "12 jobs: 12 done" while four ran.)
        """
        store = MemoryStateStore()
        for job, states in (("a", ["running", "done"]), ("b", ["connecting", "running"])):
            store.recordOutcomes(job, [MessageOutcome("", "1", "INBOX", 1)])
            previous = "queued"
            for at, state in enumerate(states):
                store.recordTransition(job, Transition(float(at), previous, state, "why"))
                previous = state
        out = io.StringIO()
        self.assertEqual(report(store, ["a", "b"], False, out), 0)
        self.assertIn(
            "summary: 2 jobs: 1 done, 0 done with failures, 0 failed, 0 held (0 paused,"
            " 0 cancelled), 0 not run, 1 not finished (running, or stopped)\n",
            out.getvalue(),
        )
        csvOut = io.StringIO()
        report(store, ["a", "b"], False, csvOut, asCSV=True)
        outcomes = [row["outcome"] for row in csv.DictReader(io.StringIO(csvOut.getvalue()))]
        self.assertEqual(outcomes, ["done", "unfinished"])


class CSVTests(SynchronousTestCase):
    """
    C{imapmig report --csv} and C{--failures --csv}, from the command line.
    """

    def setUp(self) -> None:
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        state = os.path.join(base, "state.sqlite")
        clock = [0.0]
        store = SQLiteStateStore(state, seconds=lambda: clock[0])
        fill(store, clock)
        store.close()
        self.config = os.path.join(base, "c.yaml")
        jobs = ", ".join(
            f"{{name: {name}, source: {{maildir: {maildir}}},"
            f" destination: {{server: s, user: {name}, password: p}}}}"
            for name in "abcde"
        )
        with open(os.open(self.config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                f"state: {state}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{jobs}]\n"
            )

    def command(self, *arguments: str) -> tuple[int, str]:
        """
        C{imapmig report --config CONFIG arguments...}: its status and
        output.
        """
        out = io.StringIO()
        return main(["report", "--config", self.config, *arguments], out), out.getvalue()

    def test_jobsCSV(self) -> None:
        """
        C{--csv}: a header and one row per job, with its outcome, counts,
        octets and times; no summary row.
        """
        status, text = self.command("--csv")
        self.assertEqual(status, 1)
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        self.assertEqual(
            [(r["job"], r["outcome"], r["copied"], r["failed"]) for r in rows],
            [("a", "done", "500", "0"), ("b", "done_with_failures", "0", "1"),
             ("c", "failed", "0", "0"), ("d", "not_run", "0", "0"), ("e", "paused", "0", "0")],
        )  # fmt: skip
        self.assertEqual(
            (rows[0]["copied_octets"], rows[0]["first_at"], rows[2]["job_failure"]),
            (str(500 << 20), "2023-11-14T22:13:20Z", "login refused"),
        )
        self.assertEqual((rows[4]["hold_by"], rows[4]["hold_at"]), ("192.0.2.7", "2023-11-14T22:15:25Z"))
        self.assertNotIn("summary", text)

    def test_failuresCSV(self) -> None:
        """
        C{--failures --csv}: every failed message of every job, with the
        columns of C{/manifest.csv} and the message's names.
        """
        status, text = self.command("--failures", "--csv")
        self.assertEqual(status, 1)
        self.assertTrue(
            text.startswith("job,outcome,folder,mailbox,key,size,message_id,date,from,subject,reason\r\n")
        )
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        self.assertEqual(
            rows,
            [{"job": "b", "outcome": "failed", "folder": "INBOX", "mailbox": "INBOX", "key": "9",
              "size": "10", "message_id": "<big@x>", "date": "Tue, 3 Mar 2020 10:00:00 +0100",
              "from": "Jörg <j@x>", "subject": "Grüße", "reason": "too big"}],
        )  # fmt: skip

    def test_failuresJSONAndText(self) -> None:
        """
        C{--failures --json} gives the same rows as objects; C{--failures}
        alone a tab-separated line each and their count.
        """
        _, text = self.command("--failures", "--json")
        [row] = json.loads(text)
        self.assertEqual((row["job"], row["subject"]), ("b", "Grüße"))
        _, text = self.command("--failures")
        self.assertEqual(
            text,
            "b\tINBOX\t9\t<big@x>\tTue, 3 Mar 2020 10:00:00 +0100\tJörg <j@x>\tGrüße\ttoo big\n"
            "1 failed message\n",
        )

    def test_failuresKeepPaths(self) -> None:
        """
        C{--failures} (CSV, JSON and text) gives each reason whole, its
        filesystem paths included, as the plain report does: the admin
        running it reads the state database, paths and all; only the
        status site's unauthenticated C{/manifest.csv} hides them.
        """
        reason = "unreadable: /srv/mail/b/Maildir/cur/9:2,S: Permission denied"
        store = MemoryStateStore()
        store.recordOutcomes("b", [MessageOutcome("INBOX", "9", "", 10, failure=reason)])
        out = io.StringIO()
        writeFailuresCSV(store, ["b"], lambda d: self.successResultOf(d), out)
        [row] = csv.DictReader(io.StringIO(out.getvalue(), newline=""))
        self.assertEqual(row["reason"], reason)
        for asJSON in (True, False):
            out = io.StringIO()
            report(store, ["b"], asJSON, out, failures=True)
            self.assertIn("/srv/mail/b/Maildir/cur/9:2,S", out.getvalue())
        [failure] = self.successResultOf(store.failures("b"))
        self.assertNotIn("/srv", outcomeRow("b", failure, {})[-1])

    def test_csvAndJSONExclusive(self) -> None:
        """
        C{--csv} and C{--json} together are a usage error.
        """
        self.patch(os, "environ", dict(os.environ))
        with self.assertRaises(SystemExit) as exiting:
            self.command("--csv", "--json")
        self.assertEqual(exiting.exception.code, 2)


class CostTests(SynchronousTestCase):
    """
    The report reads its jobs' records a page at a time, a few statements
    a page, whatever the number of jobs.
    """

    def test_statementsPerPage(self) -> None:
        """
        A report of two and a half pages of jobs (L{REPORT_PAGE}) costs
        the store seven statements a page (in a transaction each) and its
        holds, in each form;
        with C{--failures}, one more per job with failed messages; its
        jobs come in the order asked.  (A job's own reads cost seven
        statements a job: 8,400 here.)
        """
        store = MemoryStateStore()
        jobs = [f"j{n:05d}" for n in range(REPORT_PAGE * 5 // 2)][::-1]
        for job in jobs[:3]:
            store.recordOutcomes(job, [MessageOutcome("INBOX", "1", "INBOX", 10, failure="NO")])
        statements: list[str] = []
        connection = store._connection
        assert connection is not None
        connection.set_trace_callback(statements.append)
        pages = 3
        for asJSON, asCSV, failures, more in [
            (False, False, False, 0), (True, False, False, 0), (False, True, False, 0),
            (False, True, True, 3), (True, False, True, 3), (False, False, True, 3),
        ]:  # fmt: skip
            del statements[:]
            out = io.StringIO()
            self.assertEqual(report(store, jobs, asJSON, out, asCSV, failures), 1)
            selects = [s for s in statements if s.startswith("SELECT")]
            self.assertEqual(len(selects), 1 + 7 * pages + more, [s[:40] for s in statements])
            if asCSV and not failures:
                rows = list(csv.DictReader(io.StringIO(out.getvalue(), newline="")))
                self.assertEqual([row["job"] for row in rows], jobs)

    def test_jsonAsDumped(self) -> None:
        """
        C{--json}, written a job at a time, is what C{json.dump} of the
        whole list with an indent of 2 wrote: byte for byte, and C{[]}
        for no job.
        """
        clock = [0.0]
        store = MemoryStateStore(seconds=lambda: clock[0])
        fill(store, clock)
        for jobs in (["a", "b", "c", "d", "e"], ["b"], []):
            out = io.StringIO()
            report(store, jobs, True, out)
            document = json.loads(out.getvalue())
            self.assertEqual([entry["job"] for entry in document], jobs)
            self.assertEqual(out.getvalue(), json.dumps(document, indent=2) + "\n")
