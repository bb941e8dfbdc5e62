# -*- test-case-name: tests.test_state_copy -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for C{imapmig state copy} (L{imapmig.commands.statecopy},
L{imapmig.state.copying}): a SQLite state copied to a private PostgreSQL
and back, read back through the stores' own methods; the refusals; a
copy whose counts disagree rolled back.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import sys
from typing import Any

import psycopg
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.commands.cli import main
from imapmig.queue import QueueState
from imapmig.queue import _pgschema as queueschema
from imapmig.queue.postgresql import PostgreSQLJobQueue
from imapmig.state import (
    CANCELLED,
    PAUSED,
    FolderFallback,
    FolderMark,
    IStateStore,
    JournalMessage,
    MessageOutcome,
    Transition,
)
from imapmig.state.postgresql import PostgreSQLStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.postgresql import PASSWORD_ROLE, requirePostgreSQL
from tests.statecontract import SynchronousReactor, SynchronousThreadPool, sharedCluster
from tests.statesupport import readLine, startPython
from tests.test_schedule_service import jobConfig

JOBS = ("alice", "bob \u00e9t\u00e9")
FOLDERS = ("INBOX", ".Archive.Gr\u00fc\u00dfe")
DAY = "2026-12-07"
ACCOUNTS = (("imap1", "alice"), ("imap2", "bob"))

# A child that holds a SQLite state store open, as a daemon does, until
# its standard input closes.
_DAEMON = """
import os, sys
from imapmig.state.sqlite import SQLiteStateStore
store = SQLiteStateStore(sys.argv[1], seconds=lambda: 1764085212.0)
print("open", os.getpid(), flush=True)
sys.stdin.read()
"""


def fill(testCase: SynchronousTestCase, store: IStateStore) -> None:
    """
    Record something in every table of C{store}, through its own methods:
    outcomes (appended, failed with names and a note, present, converted),
    journal entries, folder marks (with and without deferred UIDs and a
    HIGHESTMODSEQ), fallbacks, holds, budgets, failures, timelines.
    """
    done = testCase.successResultOf
    for n, job in enumerate(JOBS):
        outcomes: list[Any] = [
            MessageOutcome(FOLDERS[0], "1", "INBOX", 100, 7, 11),
            MessageOutcome(
                FOLDERS[1], "/1600000000.M1P2.host,S=99:2,S", "Archive/Gr\u00fc\u00dfe", 2**40,
                failure="too large", messageId="<x@example>", date="Mon, 7 Dec 2026",
                sender="Z\u00fcrich <z@example>", subject="\u00e9t\u00e9",
            ),
            MessageOutcome(FOLDERS[0], "2", "INBOX", 5, 7, 12, note="keyword dropped"),
            MessageOutcome(FOLDERS[0], "3", "INBOX", 6, 7, 13, alreadyPresent=True, messageId="<p@x>"),
            (FOLDERS[1], "4", "Archive/Gr\u00fc\u00dfe", 9, 8, 1, 1),
        ]
        done(store.recordOutcomes(job, outcomes))
        for floor in (100, None):
            messages = (
                JournalMessage(FOLDERS[0], f"j{floor}", 10, b"From: a@\r\n"),
                JournalMessage(FOLDERS[1], "k", 0, b"\x00\xff" * 100),
            )
            done(store.journalBatch(job, "INBOX", 7 if floor else None, floor, messages))
        done(store.recordFolderMark(job, FOLDERS[0], FolderMark(7, 101 + n, 5, 3, (4, 9))))
        done(store.recordFolderMark(job, FOLDERS[1], FolderMark(0, 0, None, 1, (), "cur 5 1765 4096 new -", 2**33)))
        done(store.recordFolderFallback(job, FolderFallback("Bad/Name", "Bad_Name", "NO [CANNOT]")))
        done(store.recordJobFailure(job, f"login refused for {job}"))
        done(store.recordTransition(job, Transition(1700000100.5, "running", "paused", "by admin", "192.0.2.7")))
        done(store.recordTransition(job, Transition(1700000200.25, "paused", "queued", "resumed")))
    done(store.recordJobHolds([JOBS[0]], PAUSED, "192.0.2.7"))
    done(store.recordJobHolds([JOBS[1]], CANCELLED, None))
    for server, user in ACCOUNTS:
        done(store.addBudgetUse(server, user, "upload", DAY, 1000))
        done(store.addBudgetUse(server, user, "download", DAY, 2**33))


def contents(testCase: SynchronousTestCase, store: IStateStore) -> dict[str, Any]:
    """
    Everything C{store} says of L{JOBS} and L{ACCOUNTS} through its
    methods, the journal's entries without their ids (a copy renumbers
    them) but in their order.
    """
    done = testCase.successResultOf
    seen: dict[str, Any] = {"holds": done(store.jobHolds())}
    for job in JOBS:
        seen[job] = {
            "destination": [done(store.destinationMap(job, folder)) for folder in FOLDERS],
            "failures": done(store.failures(job)),
            "notes": done(store.notes(job)),
            "counts": done(store.counts(job)),
            "journal": [
                (e.mailbox, e.uidValidity, e.uidFloor, e.messages) for e in done(store.journal(job))
            ],
            "marks": [done(store.folderMark(job, folder)) for folder in FOLDERS],
            "fallbacks": done(store.folderFallbacks(job)),
            "failure": done(store.jobFailure(job)),
            "timeline": done(store.timeline(job)),
        }
    for server, user in ACCOUNTS:
        for direction in ("upload", "download"):
            seen[f"{server} {user} {direction}"] = done(store.budgetUsed(server, user, direction, DAY))
    return seen


class CopyCase(SynchronousTestCase):
    """
    Helpers: SQLite files, PostgreSQL databases, the command.
    """

    def setUp(self) -> None:
        requirePostgreSQL(self)
        self.clock = Clock()
        self.clock.advance(1764000000)
        self.stderr = io.StringIO()
        self.patch(sys, "stderr", self.stderr)

    def sqlite(self, path: str | None = None) -> SQLiteStateStore:
        """
        A SQLite store (in a new file unless C{path}), closed at the end.
        """
        store = SQLiteStateStore(path or self.mktemp(), seconds=self.clock.seconds)
        self.addCleanup(store.close)
        return store

    def filled(self) -> tuple[str, dict[str, Any]]:
        """
        A SQLite file with every table filled (L{fill}), closed, and what
        it holds.
        """
        path = self.mktemp()
        store = self.sqlite(path)
        fill(self, store)
        seen = contents(self, store)
        store.close()
        return path, seen

    def postgresql(self, dsn: str) -> PostgreSQLStateStore:
        """
        A PostgreSQL store on C{dsn}'s database, opened, closed at the end.
        """
        store = PostgreSQLStateStore(SynchronousReactor(), SynchronousThreadPool(), dsn, self.clock.seconds)
        self.addCleanup(store.close)
        self.successResultOf(store.open())
        return store

    def copy(self, *arguments: str) -> tuple[int, str]:
        """
        Run C{imapmig state copy ARGUMENTS}: its status and output.
        """
        out = io.StringIO()
        status = main(["state", "copy", *arguments], out=out)
        return status, out.getvalue()

    def execute(self, dsn: str, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """
        Run C{sql} on C{dsn}'s database, committed; its rows, if any.
        """
        with psycopg.connect(dsn, autocommit=True) as connection:
            cursor = connection.execute(sql, parameters)
            return cursor.fetchall() if cursor.description else []


class RoundTripTests(CopyCase):
    """
    A SQLite state copied to PostgreSQL and back holds the same.
    """

    def test_roundTrip(self) -> None:
        """
        Every table of a SQLite state (outcomes, journal, marks,
        fallbacks, holds, budgets, failures, timelines), copied to a new
        PostgreSQL database and from there to a new SQLite file, reads back
        equal through each store's methods; the command prints the rows of
        each table per job.
        """
        path, seen = self.filled()
        dsn = sharedCluster().createDatabase()
        status, output = self.copy("--from", path, "--to", dsn)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        self.assertIn(f"copied 2 jobs from {os.path.abspath(path)} to postgresql://postgres@", output)
        lines = output.splitlines()
        self.assertEqual(
            lines[1].split(),
            ["job", "outcomes", "journal", "marks", "fallbacks", "holds", "failures", "timeline"],
        )
        self.assertEqual(lines[2].split(), ["alice", "5", "2", "2", "1", "1", "1", "2"])
        self.assertEqual(lines[4].split(), ["total", "10", "4", "4", "2", "2", "2", "4"])
        self.assertEqual(lines[6].split(), ["imap1", "alice", "2"])
        self.assertEqual(contents(self, self.postgresql(dsn)), seen)
        back = self.mktemp()
        status, output = self.copy("--from", dsn, "--to", back)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        self.assertEqual(contents(self, self.sqlite(back)), seen)
        self.assertEqual(os.stat(back).st_mode & 0o777, 0o600)

    def test_journalIdsValidInTarget(self) -> None:
        """
        The journal's copied entries are given ids of the target: a new
        entry journaled there afterwards gets an id after them, in
        PostgreSQL (from the block the store drew) and in SQLite, and
        never one of theirs.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        # The target's sequence has moved on: copied ids must come after.
        self.postgresql(dsn).close()
        self.execute(dsn, "SELECT setval('imapmig.journal_ids', 499)")
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        ids = [row[0] for row in self.execute(dsn, "SELECT entry_id FROM imapmig.journal ORDER BY 1")]
        self.assertEqual(ids, [500, 501, 502, 503])
        store = self.postgresql(dsn)
        # The writer's ids: a block of the sequence (504) in the high bits.
        entry = self.successResultOf(store.journalBatch(JOBS[0], "INBOX", 7, 1, ()))
        self.assertEqual(entry, (504 << 32) + 1)
        store.close()
        back = self.mktemp()
        self.assertEqual(self.copy("--from", dsn, "--to", back)[0], 0)
        copied = self.sqlite(back)
        ids = [e.entryId for job in JOBS for e in self.successResultOf(copied.journal(job))]
        self.assertEqual(sorted(ids), [1, 2, 3, 4, 5])
        self.assertEqual(self.successResultOf(copied.journalBatch(JOBS[0], "INBOX", 7, 1, ())), 6)

    def test_queueStatesToSQLite(self) -> None:
        """
        From PostgreSQL to SQLite, a job the fleet's queue has paused or
        cancelled (without a row of job_holds) becomes a job_holds row; a
        claimed job (its owner's lease over) becomes queued: no hold.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        with psycopg.connect(dsn, autocommit=True) as connection:
            queueschema.migrate(connection, "test")
        self.execute(dsn, "DELETE FROM imapmig.job_holds")
        self.execute(
            dsn,
            "INSERT INTO imapmig_queue.jobs (name, position, state, owner, digest) VALUES"
            " (%s, 1, 'paused', NULL, '\\x00'), (%s, 2, 'claimed', gen_random_uuid(), '\\x00'),"
            " ('carol', 3, 'cancelled', NULL, '\\x00')",
            JOBS,
        )
        back = self.mktemp()
        status, output = self.copy("--from", dsn, "--to", back)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        holds = self.successResultOf(self.sqlite(back).jobHolds())
        self.assertEqual({job: hold.hold for job, hold in holds.items()}, {JOBS[0]: PAUSED, "carol": CANCELLED})
        self.assertIn("copied 3 jobs", output)


class FleetHoldsTests(CopyCase):
    """
    The holds of a SQLite state copied to PostgreSQL reach the fleet's
    jobs' rows, whichever comes first: the copy or the fleet's list.
    """

    def fleetQueue(self, dsn: str) -> PostgreSQLJobQueue:
        """
        A fleet's queue on C{dsn} of the copied jobs and one more, C{free}.
        """
        jobs = [jobConfig(name, f"u{i}") for i, name in enumerate(JOBS)] + [jobConfig("free", "u9")]
        queue = PostgreSQLJobQueue.connect(dsn, jobs)
        self.addCleanup(queue.close)
        return queue

    def assertHeld(self, queue: PostgreSQLJobQueue) -> None:
        """
        Neither held job is claimed; the paused one is, once resumed.
        """
        me = queue.register("host1", 1234, "1.0", 600.0)
        claims = [queue.claim(me, 0.0, 600.0) for _ in range(2)]
        self.assertEqual([c.job.name if c else None for c in claims], ["free", None])
        self.assertEqual((queue.state(JOBS[0]), queue.state(JOBS[1])), (QueueState.PAUSED, QueueState.CANCELLED))
        self.assertEqual(queue.resume(JOBS[0]), QueueState.QUEUED)
        again = queue.claim(me, 0.0, 600.0)
        self.assertEqual(again.job.name if again else None, JOBS[0])

    def test_copyThenLoad(self) -> None:
        """
        The first load of a fleet's list holds the jobs the copy held.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        self.assertHeld(self.fleetQueue(dsn))

    def test_loadThenCopy(self) -> None:
        """
        A copy into a database with a fleet's list holds its jobs' rows.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.fleetQueue(dsn).close()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        self.assertHeld(self.fleetQueue(dsn))

    def test_liftedHoldStaysLifted(self) -> None:
        """
        A hold the copy brought that the fleet lifts is lifted for good: a
        copy back to SQLite holds only what the fleet's rows hold (the
        resumed job none, the cancelled one still), and so does the
        store's record of holds (the rows are the holds: the copy's
        C{job_holds} rows are moved into them).
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.fleetQueue(dsn).close()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        self.assertHeld(self.fleetQueue(dsn))
        self.assertEqual(self.execute(dsn, "SELECT job FROM imapmig.job_holds"), [])
        self.execute(dsn, "UPDATE imapmig_queue.daemons SET lease_until = now()")
        back = self.mktemp()
        status, output = self.copy("--from", dsn, "--to", back)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        holds = self.successResultOf(self.sqlite(back).jobHolds())
        self.assertEqual({job: hold.hold for job, hold in holds.items()}, {JOBS[1]: CANCELLED})

    def test_holdOfJobListedLater(self) -> None:
        """
        A hold the copy brought for a job the fleet's list did not have is
        applied by the reload that lists it, once: lifted since, it is not
        applied again when the job is removed and listed again.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        jobs = [jobConfig(name, f"u{i}") for i, name in enumerate(JOBS)]
        queue = PostgreSQLJobQueue.connect(dsn, jobs[1:])
        self.addCleanup(queue.close)
        queue.close()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        queue = PostgreSQLJobQueue.connect(dsn, jobs[1:])
        self.addCleanup(queue.close)
        queue.replaceList(jobs)
        self.assertEqual(queue.state(JOBS[0]), QueueState.PAUSED)
        self.assertEqual(queue.resume(JOBS[0]), QueueState.QUEUED)
        queue.replaceList(jobs[1:])
        queue.replaceList(jobs)
        self.assertEqual(queue.state(JOBS[0]), QueueState.QUEUED)

    def test_copyHoldsStaleClaim(self) -> None:
        """
        A hold copied onto a job whose row a dead daemon still claims is
        asked of the claim: the job rests in its hold when released, not
        queued; the copy's counts agree.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        queue = self.fleetQueue(dsn)
        me = queue.register("host1", 1234, "1.0", 600.0)
        self.assertEqual([queue.claim(me, 0.0, 600.0).job.name for _ in range(2)], list(JOBS))  # type: ignore[union-attr]
        self.execute(dsn, "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '1 s'")
        queue.close()
        status, output = self.copy("--from", path, "--to", dsn)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        queue = self.fleetQueue(dsn)
        other = queue.register("host2", 1, "1.0", 600.0)
        claimed = queue.claim(other, 0.0, 600.0)
        self.assertEqual(claimed.job.name if claimed else None, "free")
        self.assertEqual((queue.state(JOBS[0]), queue.state(JOBS[1])), (QueueState.PAUSED, QueueState.CANCELLED))


class RefusalTests(CopyCase):
    maxDiff = None
    """
    The copy refuses, writing nothing, while a side is in use, into a
    target holding the jobs, and on bad input; and a copy whose counts
    disagree is rolled back.
    """

    def assertRefused(self, *arguments: str, status: int = 2) -> str:
        """
        The command exits C{status} writing nothing but one line of
        error, which is returned.
        """
        self.stderr.seek(0)
        self.stderr.truncate(0)
        result = self.copy(*arguments)
        self.assertEqual(result, (status, ""))
        message = self.stderr.getvalue()
        self.assertEqual(len(message.splitlines()), 1, message)
        return message

    def daemon(self, path: str) -> int:
        """
        Start a child holding C{path} open as a daemon does; its pid.
        """
        child = startPython(self, _DAEMON, path)
        self.assertEqual(readLine(self, child).split(), ["open", str(child.pid)])
        self.addCleanup(child.send_signal, signal.SIGKILL)
        return child.pid

    def test_sourceHeldByDaemon(self) -> None:
        """
        A SQLite source a daemon holds open is refused, naming the file and
        the daemon's pid; the target is not created.
        """
        path, _ = self.filled()
        pid = self.daemon(path)
        dsn = sharedCluster().createDatabase()
        message = self.assertRefused("--from", path, "--to", dsn)
        self.assertIn(f"--from: {os.path.abspath(path)} is in use by another imapmig (pid {pid} on host", message)
        self.assertEqual(self.execute(dsn, "SELECT to_regclass('imapmig.messages')::text"), [(None,)])

    def test_targetHeldByDaemon(self) -> None:
        """
        A SQLite target a daemon holds open is refused likewise.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        target = self.mktemp()
        pid = self.daemon(target)
        message = self.assertRefused("--from", dsn, "--to", target)
        self.assertIn(f"(pid {pid} on host", message)
        self.assertTrue(message.startswith("--to: "), message)

    def test_liveLease(self) -> None:
        """
        A PostgreSQL side where a daemon has a live lease is refused,
        naming the daemon and its host; once its lease is over, the copy
        runs.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        with psycopg.connect(dsn, autocommit=True) as connection:
            queueschema.migrate(connection, "test")
        self.execute(
            dsn,
            "INSERT INTO imapmig_queue.daemons VALUES ('6f1c0f5e-0000-4000-8000-000000000001', 1,"
            " 'mail7', 4242, '1.0', now(), now(), now() + interval '1 minute', NULL)",
        )
        message = self.assertRefused("--from", path, "--to", dsn)
        self.assertIn("in use by 1 daemon(s) with a live lease: 6f1c0f5e-0000-4000-8000-000000000001 on host mail7 (pid 4242)", message)
        self.assertEqual(self.execute(dsn, "SELECT count(*) FROM imapmig.messages"), [(0,)])
        self.execute(dsn, "UPDATE imapmig_queue.daemons SET lease_until = now() - interval '1 second'")
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        self.execute(dsn, "UPDATE imapmig_queue.daemons SET lease_until = now() + interval '1 minute'")
        target = self.mktemp()
        message = self.assertRefused("--from", dsn, "--to", target)
        self.assertFalse(os.path.exists(target))
        self.assertIn("--from postgresql://", message)
        self.assertIn("on host mail7 (pid 4242)", message)

    def test_targetHoldsJobs(self) -> None:
        """
        A target already holding state of the jobs copied is refused,
        naming them; with C{--replace} their state there is replaced (not
        added to).
        """
        path, seen = self.filled()
        dsn = sharedCluster().createDatabase()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        message = self.assertRefused("--from", path, "--to", dsn)
        self.assertIn("already holds state of 4 of the jobs or accounts copied (alice, bob \u00e9t\u00e9, imap1 alice,", message)
        self.assertIn("--replace", message)
        self.stderr.seek(0)
        self.stderr.truncate(0)
        status, output = self.copy("--from", path, "--to", dsn, "--replace")
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        self.assertIn("(their state there replaced)", output)
        self.assertEqual(contents(self, self.postgresql(dsn)), seen)
        back = self.mktemp()
        self.assertEqual(self.copy("--from", dsn, "--to", back)[0], 0)
        self.assertRefused("--from", dsn, "--to", back)

    def test_mismatchRollsBack(self) -> None:
        """
        A copy whose counts disagree (a trigger of the target drops one
        outcome) exits 1 naming the difference, and leaves the target as
        it was.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.postgresql(dsn).close()
        self.execute(
            dsn,
            "CREATE FUNCTION imapmig.drop_one() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN IF NEW.message_key = '2' AND NEW.job = 'alice' THEN RETURN NULL; END IF;"
            " RETURN NEW; END $$;"
            " CREATE TRIGGER drop_one BEFORE INSERT ON imapmig.messages"
            " FOR EACH ROW EXECUTE FUNCTION imapmig.drop_one()",
        )
        status, output = self.copy("--from", path, "--to", dsn)
        self.assertEqual(status, 1)
        self.assertIn(
            "the counts differ from the source's (outcomes of alice: 5 in the source, 4 in the target)",
            self.stderr.getvalue(),
        )
        self.assertIn("in the target:\njob", output)
        for table in ("messages", "journal", "folders", "job_holds", "budget_use", "job_transitions"):
            self.assertEqual(self.execute(dsn, f"SELECT count(*) FROM imapmig.{table}"), [(0,)])

    def test_mismatchIntoSQLite(self) -> None:
        """
        Into SQLite likewise: an existing file is left as it was, a file
        the copy created is removed.
        """
        path, _ = self.filled()
        dsn = sharedCluster().createDatabase()
        self.assertEqual(self.copy("--from", path, "--to", dsn)[0], 0)
        target = self.mktemp()
        store = self.sqlite(target)
        store.close()
        connection = sqlite3.connect(target)
        connection.execute(
            "CREATE TRIGGER drop_one BEFORE INSERT ON job_transitions"
            " WHEN NEW.seq = 2 BEGIN SELECT RAISE(IGNORE); END"
        )
        connection.commit()
        connection.close()
        self.assertEqual(self.copy("--from", dsn, "--to", target)[0], 1)
        self.assertIn("timeline of alice: 2 in the source, 1 in the target", self.stderr.getvalue())
        connection = sqlite3.connect(target)
        self.assertEqual(connection.execute("SELECT count(*) FROM messages").fetchone(), (0,))
        connection.close()

    def test_badInput(self) -> None:
        """
        A missing file, a URI with a password, a database that cannot be
        reached, a source with nothing in it, two files: exit 2, one line
        naming the argument (and never the password).
        """
        dsn = sharedCluster().createDatabase()
        missing = os.path.abspath(self.mktemp())
        self.assertEqual(self.assertRefused("--from", missing, "--to", dsn), f"--from {missing}: no such file\n")
        withPassword = dsn.replace("postgres@", "postgres:S3cret@")
        message = self.assertRefused("--from", self.filled()[0], "--to", withPassword)
        self.assertTrue(message.startswith("--to: a password in the URI"), message)
        self.assertNotIn("S3cret", message)
        cluster = sharedCluster()
        unreachable = f"postgresql://postgres@127.0.0.1:{cluster.port}/nosuchdb"
        message = self.assertRefused("--from", unreachable, "--to", self.mktemp())
        self.assertTrue(message.startswith("--from postgresql://postgres@127.0.0.1:"), message)
        self.assertIn("cannot connect", message)
        empty = self.mktemp()
        self.sqlite(empty).close()
        message = self.assertRefused("--from", empty, "--to", dsn)
        self.assertEqual(message, f"--from {os.path.abspath(empty)}: holds no state to copy (no job, no budget)\n")
        message = self.assertRefused("--from", empty, "--to", self.mktemp())
        self.assertIn("one must be a SQLite file and the other a postgresql:// URI", message)
        foreign = os.path.abspath(self.mktemp())
        connection = sqlite3.connect(foreign)
        connection.execute("CREATE TABLE other (x)")
        connection.close()
        message = self.assertRefused("--from", dsn, "--to", foreign)
        self.assertEqual(message, f"--to: {foreign}: not an imapmig state database (no schema_version)\n")
        connection = sqlite3.connect(foreign)
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
        connection.close()
        self.assertEqual(tables, [("other",)])

    def test_passwordFromConfig(self) -> None:
        """
        With C{--config}, the password of its C{state_password_file} logs
        in (the role needs one); it is printed nowhere.  A configuration
        naming another database is refused: its password is not sent.
        """
        cluster = sharedCluster()
        dsn = cluster.createDatabase(owner=PASSWORD_ROLE)
        uri = cluster.dsn(dsn.rsplit("/", 1)[1], user=PASSWORD_ROLE)
        secret = os.path.abspath(self.mktemp())
        with open(secret, "w") as f:
            f.write(cluster.password + "\n")
        os.chmod(secret, 0o600)
        maildir = os.path.abspath(self.mktemp())
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        config = self.mktemp()
        with open(config, "w") as f:
            f.write(_CONFIG.format(uri=uri, secret=secret, maildir=maildir))
        path, seen = self.filled()
        self.patch(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("PG")})
        message = self.assertRefused("--from", path, "--to", uri)
        self.assertIn("cannot connect", message)
        self.stderr.seek(0)
        self.stderr.truncate(0)
        status, output = self.copy("--from", path, "--to", uri, "--config", config)
        self.assertEqual((status, self.stderr.getvalue()), (0, ""))
        self.assertNotIn(cluster.password, output)
        self.assertEqual(contents(self, self.postgresql(dsn)), seen)
        other = uri.rsplit("/", 1)[0] + "/postgres"
        status, output = self.copy("--from", path, "--to", other, "--config", config)
        self.assertEqual(status, 2)
        self.assertIn("its password is not sent there", self.stderr.getvalue())
        self.assertNotIn(cluster.password, self.stderr.getvalue())


_CONFIG = """\
state: "{uri}"
state_password_file: {secret}
fleet: {{name: acme}}
servers:
  new: {{endpoint: "tcp:127.0.0.1:2143", starttls: "off"}}
jobs:
  - name: alice
    source: {{maildir: {maildir}}}
    destination: {{server: new, user: alice, password_file: {secret}}}
"""
