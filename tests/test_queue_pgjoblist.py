"""
Tests for L{imapmig.queue._pgjoblist}: the digests of a job list, and on a
private PostgreSQL (L{imapmig.testing.postgresql}) the fleet's list loaded
once, refused to another fleet or another list, and replaced by a reload.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from attrs import evolve
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase

from imapmig.access.secrets import Secret
from imapmig.config.model import JobConfig, RetryConfig
from imapmig.errors import FleetMismatch, JobListStale, PermanentError
from imapmig.queue import JobOutcome, QueueState
from imapmig.queue._pgjoblist import CHANGE_HINT, JobList, ListChange, _Encoder
from imapmig.queue.postgresql import PostgreSQLJobQueue, ThreadedJobQueue
from imapmig.testing.postgresql import PASSWORD_ROLE
from tests.support import sourceTreeEnvironment
from tests.test_queue import FakeUserList
from tests.test_queue_postgresql import PostgreSQLTestMixin
from tests.test_schedule_service import jobConfig


def jobsOf(count: int, prefix: str = "j") -> list[JobConfig]:
    """
    C{count} jobs, C{j0} first, sharing one server.
    """
    return [jobConfig(f"{prefix}{i}", f"u{i}") for i in range(count)]


def withPassword(job: JobConfig, password: str) -> JobConfig:
    """
    C{job} logging in to its destination with C{password}.
    """
    return evolve(job, destination=evolve(job.destination, password=Secret(password)))


_PRINT_DIGEST = """
from imapmig.queue._pgjoblist import JobList
from tests.test_queue_pgjoblist import digestedJobs
print(JobList.of(digestedJobs()).digest)
"""


def digestedJobs() -> list[JobConfig]:
    """
    Jobs with a secret, floats, tuples and values at and off their
    defaults: what the digests of two processes must agree on.
    """
    jobs = jobsOf(3)
    jobs[0] = withPassword(jobs[0], "hunter2")
    jobs[1] = evolve(jobs[1], retry=RetryConfig(attempts=3, maxDelay=60))
    return jobs


class DigestTests(SynchronousTestCase):
    """
    A job list's digests.
    """

    def test_stableAcrossProcesses(self) -> None:
        """
        Two Python processes (each with its own hash seed) compute the
        same list digest as this one.
        """
        digests = set()
        for seed in ("1", "2"):
            env = dict(sourceTreeEnvironment(), PYTHONHASHSEED=seed)
            digests.add(
                subprocess.run(
                    [sys.executable, "-c", _PRINT_DIGEST],
                    env=env, capture_output=True, text=True, check=True, timeout=120,
                ).stdout.strip()
            )  # fmt: skip
        self.assertEqual(digests, {JobList.of(digestedJobs()).digest})

    def test_noSecret(self) -> None:
        """
        A password's value is in nothing digested: two jobs differing only
        in their password have one digest.
        """
        job = jobConfig("j0", "u0")
        self.assertNotIn("hunter2", _Encoder().encode(withPassword(job, "hunter2")))
        self.assertEqual(
            JobList.of([withPassword(job, "hunter2")]).digests,
            JobList.of([withPassword(job, "other")]).digests,
        )
        self.assertNotEqual(
            JobList.of([withPassword(job, "hunter2")]).digests, JobList.of([job]).digests
        )

    def test_changes(self) -> None:
        """
        A job changed has another digest and makes another list; a setting
        written at its default does not; nor does the jobs' order.
        """
        jobs = jobsOf(3)
        listed = JobList.of(jobs)
        changed = JobList.of([jobs[0], jobConfig("j1", "other"), jobs[2]])
        self.assertNotEqual(changed.digests["j1"], listed.digests["j1"])
        self.assertEqual(changed.digests["j0"], listed.digests["j0"])
        self.assertNotEqual(changed.digest, listed.digest)
        self.assertEqual(
            JobList.of([evolve(jobs[0], retry=RetryConfig()), *jobs[1:]]).digest, listed.digest
        )
        self.assertEqual(JobList.of(reversed(jobs)).digest, listed.digest)

    def test_withAndWithout(self) -> None:
        """
        A list with a job added, replaced or removed has the digest of the
        list made of those jobs.
        """
        jobs = jobsOf(3)
        listed = JobList.of(jobs[:2])
        self.assertEqual(listed.withJob(jobs[2]).digest, JobList.of(jobs).digest)
        self.assertEqual(JobList.of(jobs).without("j2").digest, listed.digest)
        other = jobConfig("j1", "other")
        self.assertEqual(listed.withJob(other).digest, JobList.of([jobs[0], other]).digest)


class FleetTests(PostgreSQLTestMixin):
    """
    The fleet's row and its job list in the database.
    """

    def daemon(self, jobs: list[JobConfig], fleet: str = "acme") -> PostgreSQLJobQueue:
        """
        A daemon's queue of C{jobs} in fleet C{fleet}, started.
        """
        queue = PostgreSQLJobQueue.connect(self.uri, jobs, fleet)
        self.addCleanup(queue.close)
        return queue

    def rows(self) -> list[tuple[str, int, str, str | None]]:
        """
        The jobs' rows: name, position, state, request, by position.
        """
        return [
            (name, position, state, requested)
            for name, position, state, requested in self.sql(
                "SELECT name, position, state, requested FROM imapmig_queue.jobs ORDER BY position"
            )
        ]

    def fleetRow(self) -> tuple[object, ...]:
        """
        The fleet's row: name, digest, generation, jobs.
        """
        [row] = self.sql("SELECT name, jobs_digest, jobs_generation, jobs FROM imapmig_queue.fleet")
        return row

    def test_loadedOnce(self) -> None:
        """
        The first daemon loads the list and the fleet's row; the next one
        with the same list writes nothing.
        """
        jobs = jobsOf(3)
        self.daemon(jobs)
        self.assertEqual(self.fleetRow(), ("acme", JobList.of(jobs).digest, 1, 3))
        written = self.sql(
            "SELECT (SELECT xmin::text FROM imapmig_queue.fleet),"
            " (SELECT string_agg(xmin::text, ',') FROM imapmig_queue.jobs)"
        )
        self.daemon(list(reversed(jobs)))
        self.assertEqual(
            self.sql(
                "SELECT (SELECT xmin::text FROM imapmig_queue.fleet),"
                " (SELECT string_agg(xmin::text, ',') FROM imapmig_queue.jobs)"
            ),
            written,
        )
        self.assertEqual([name for name, *_ in self.rows()], ["j0", "j1", "j2"])

    def test_otherFleetRefused(self) -> None:
        """
        A daemon of another fleet is refused, naming the database without
        its password, both fleets, the jobs and who loaded them when.
        """
        self.daemon(jobsOf(2), "acme-2026")
        [(by, at)] = self.sql(
            "SELECT loaded_by, to_char(loaded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')"
            " FROM imapmig_queue.fleet"
        )
        error = self.assertRaises(FleetMismatch, self.daemon, jobsOf(2), "beta")
        database = self.uri.split("?")[0]
        self.assertEqual(
            str(error),
            f"{database}: this database holds fleet 'acme-2026' (2 jobs, loaded by {by}"
            f" at {at} UTC); this configuration is fleet 'beta': give it a database of its own",
        )

    def test_refusalShowsNoPassword(self) -> None:
        """
        The refusal names the database as its role reached it, without
        the password it logged in with.
        """
        uri = self.cluster.createDatabase("secretdb", owner=PASSWORD_ROLE)
        withPassword = self.cluster.dsn("secretdb", PASSWORD_ROLE, self.cluster.password)
        self.addCleanup(PostgreSQLJobQueue.connect(withPassword, jobsOf(1), "acme").close)
        error = self.assertRaises(
            FleetMismatch, PostgreSQLJobQueue.connect, withPassword, jobsOf(1), "beta"
        )
        self.assertTrue(str(error).startswith(
            f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{self.cluster.port}/secretdb: this database"
        ))  # fmt: skip
        self.assertNotIn(self.cluster.password, str(error))
        self.assertNotEqual(uri, withPassword)

    def test_otherListRefused(self) -> None:
        """
        A daemon of the fleet with another list is refused, naming the
        first job that differs, both digests and how to change the list;
        nothing is written.
        """
        jobs = jobsOf(4)
        self.daemon(jobs)
        mine = [jobs[0], jobs[1], jobConfig("j2", "other"), jobConfig("new", "u9")]
        error = str(self.assertRaises(FleetMismatch, self.daemon, mine))
        self.assertIn("fleet 'acme' has another job list (4 jobs, loaded by", error)
        self.assertIn(f"digest {JobList.of(jobs).digest}) than this configuration", error)
        self.assertIn(f"(digest {JobList.of(mine).digest})", error)
        self.assertIn(
            "job 'j2' (position 2 here) is configured otherwise in the fleet's list; " + CHANGE_HINT,
            error,
        )
        self.assertEqual(self.fleetRow(), ("acme", JobList.of(jobs).digest, 1, 4))
        fewer = str(self.assertRaises(FleetMismatch, self.daemon, jobs[:3]))
        self.assertIn("job 'j3' of the fleet's list is not in this configuration", fewer)
        more = str(self.assertRaises(FleetMismatch, self.daemon, [*jobs, jobConfig("x", "x")]))
        self.assertIn("job 'x' (position 4 here) is not in the fleet's list", more)

    def test_startRace(self) -> None:
        """
        Three daemons starting at once on an empty database load one list:
        one fleet row, one row per job, generation 1.
        """
        start = threading.Barrier(3)
        failures: list[BaseException] = []

        def connect() -> None:
            try:
                start.wait()
                self.daemon(jobsOf(50))
            except BaseException as e:
                failures.append(e)

        threads = [threading.Thread(target=connect) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(failures, [])
        self.assertEqual(self.fleetRow(), ("acme", JobList.of(jobsOf(50)).digest, 1, 50))
        self.assertEqual(self.sql("SELECT count(*), count(DISTINCT name) FROM imapmig_queue.jobs"), [(50, 50)])

    def test_reload(self) -> None:
        """
        A reload applies the difference: a claimed job removed leaves when
        its claim ends, an unclaimed one at once, a changed one gets its
        digest, new ones come after the last; the generation is raised.
        A daemon with the old list then claims nothing, and claims again
        once its reload gives it the same list (which writes nothing).
        """
        jobs = jobsOf(5)
        first, second = self.daemon(jobs), self.daemon(jobs)
        me = first.register("host", 1, "1.0", 600.0)
        held = [first.claim(me, 0.0, 600.0) for _ in range(2)]
        new = [jobs[1], jobConfig("j3", "changed"), jobs[4], jobConfig("n1", "x"), jobConfig("n0", "y")]
        change = first.replaceList(new)
        self.assertEqual(change, ListChange(2, added=2, removed=1, leaving=1, changed=1))
        self.assertEqual(
            self.rows(),
            [
                ("j0", 0, "claimed", "remove"),
                ("j1", 1, "claimed", None),
                ("j3", 3, "queued", None),
                ("j4", 4, "queued", None),
                ("n1", 5, "queued", None),
                ("n0", 6, "queued", None),
            ],
        )
        listed = JobList.of(new)
        self.assertEqual(self.fleetRow(), ("acme", listed.digest, 2, 5))
        self.assertEqual(
            dict(self.sql("SELECT name, digest FROM imapmig_queue.jobs WHERE requested IS NULL")),
            listed.digests,
        )
        changed = first.claim(me, 0.0, 600.0)
        assert changed is not None
        self.assertEqual((changed.job.name, changed.job.destination.user), ("j3", "changed"))
        # The next queued, j4, is alike in both lists: not claimed either.
        other = second.register("host", 2, "1.0", 600.0)
        self.assertIsNone(second.claim(other, 0.0, 600.0))
        said = second.listDiffers()
        assert said is not None
        self.assertTrue(said.startswith(
            f"this daemon's job list (digest {JobList.of(jobs).digest}) is not the one of fleet 'acme'"
            f" (generation 2, 5 jobs, loaded by "
        ))  # fmt: skip
        self.assertIsNone(first.listDiffers())
        self.assertEqual(second.replaceList(new), ListChange(2, loaded=False))
        self.assertIsNone(second.listDiffers())
        claim = second.claim(other, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job.name, "j4")
        assert held[0] is not None
        first.finish(held[0], JobOutcome.COMPLETED)
        self.assertEqual([name for name, *_ in self.rows()], ["j1", "j3", "j4", "n1", "n0"])

    def test_reloadLeavingListedAgain(self) -> None:
        """
        A claimed job a reload removed, listed again by the next reload
        before its claim ended, stays.
        """
        jobs = jobsOf(2)
        queue = self.daemon(jobs)
        me = queue.register("host", 1, "1.0", 600.0)
        queue.claim(me, 0.0, 600.0)
        queue.replaceList(jobs[1:])
        self.assertEqual(queue.replaceList(jobs), ListChange(3, added=1))
        self.assertEqual(self.rows(), [("j0", 0, "claimed", None), ("j1", 1, "queued", None)])

    def test_claimedRowOfAnotherConfiguration(self) -> None:
        """
        A claim that finds a row of another configuration than the
        daemon's (a reload committed during the claim) claims nothing and
        changes nothing.
        """
        queue = self.daemon(jobsOf(2))
        me = queue.register("host", 1, "1.0", 600.0)
        self.sql("UPDATE imapmig_queue.jobs SET digest = '\\x00' WHERE name = 'j0'")
        self.assertIsNone(queue.claim(me, 0.0, 600.0))
        self.assertEqual(
            self.sql("SELECT name, state, generation FROM imapmig_queue.jobs ORDER BY position"),
            [("j0", "queued", 0), ("j1", "queued", 0)],
        )

    def test_oneJobChangesOfAStaleList(self) -> None:
        """
        A daemon whose list another reload replaced is refused one job's
        add, remove or replace (nothing changes); its own changes raise the
        generation and keep the fleet's digest that of its list.
        """
        jobs = jobsOf(3)
        first, second = self.daemon(jobs), self.daemon(jobs)
        first.add(jobConfig("n0", "x"))
        self.assertEqual(first.replace(jobConfig("j0", "changed")), QueueState.QUEUED)
        self.assertEqual(first.remove("j1"), QueueState.QUEUED)
        listed = JobList.of([jobConfig("j0", "changed"), jobs[2], jobConfig("n0", "x")])
        self.assertEqual(self.fleetRow(), ("acme", listed.digest, 4, 3))
        for change in (
            lambda: second.add(jobConfig("n1", "x")),
            lambda: second.remove("j2"),
            lambda: second.replace(jobConfig("j2", "other")),
        ):
            self.assertRaises(JobListStale, change)
        self.assertEqual(self.fleetRow(), ("acme", listed.digest, 4, 3))
        self.assertEqual([name for name, *_ in self.rows()], ["j0", "j2", "n0"])

    def test_hundredThousand(self) -> None:
        """
        100,000 jobs are loaded once (by C{COPY}); the next start reads the
        fleet's row only.  The times are printed, not asserted.
        """
        # As a user list makes them: one template's settings shared.
        template = jobConfig("template", "template")
        jobs = [
            evolve(
                template,
                name=f"user{i:06d}@example.org",
                destination=evolve(template.destination, user=f"user{i:06d}"),
            )
            for i in range(100_000)
        ]
        began = time.monotonic()
        self.daemon(jobs)
        loaded = time.monotonic() - began
        began = time.monotonic()
        self.daemon(jobs)
        again = time.monotonic() - began
        began = time.monotonic()
        JobList.of(jobs)
        digests = time.monotonic() - began
        print(
            f"\n100,000 jobs: first start {loaded:.2f} s, second {again:.2f} s"
            f" (digests alone {digests:.2f} s)"
        )
        self.assertEqual(self.fleetRow()[2:], (1, 100_000))
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.jobs"), [(100_000,)])


class UserListDigestTests(SynchronousTestCase):
    """
    A user list's part of a job list's digest costs nothing per row.
    """

    def test_noRowRead(self) -> None:
        """
        The digest of a list with a user list reads none of its rows; it
        changes with the file's digest and with the template's settings,
        and is not the digest of the jobs alone.
        """
        users = FakeUserList(readable=False)
        listed = JobList.of(jobsOf(2), [users])
        self.assertNotEqual(listed.digest, JobList.of(jobsOf(2)).digest)
        self.assertEqual(JobList.of(jobsOf(2), [FakeUserList(readable=False)]).digest, listed.digest)
        self.assertNotEqual(
            JobList.of(jobsOf(2), [FakeUserList(fileDigest="e" * 64)]).digest, listed.digest
        )
        self.assertNotEqual(
            JobList.of(jobsOf(2), [FakeUserList(settings=("template", 4))]).digest, listed.digest
        )


class UserListFleetTests(PostgreSQLTestMixin):
    """
    A user list's jobs in the database: its template once, each row's
    params, and a claimed row's job built from them.
    """

    def daemon(self, users: FakeUserList, jobs: list[JobConfig] | None = None) -> PostgreSQLJobQueue:
        """
        A daemon's queue of C{jobs} (C{j0}, C{j1} if L{None}) and the user
        list C{users}, started.
        """
        queue = PostgreSQLJobQueue.connect(
            self.uri, jobsOf(2) if jobs is None else jobs, "acme", userLists=[users]
        )
        self.addCleanup(queue.close)
        return queue

    def test_loadedAsTemplateAndParams(self) -> None:
        """
        The first start stores the template once and each row with its
        template and params, after the configuration's jobs; the fleet
        counts every row.
        """
        users = FakeUserList()
        self.daemon(users)
        [(templateId, name, path, fileDigest)] = self.sql(
            "SELECT template_id, name, path, file_digest FROM imapmig_queue.templates"
        )
        self.assertEqual((name, path, fileDigest), ("users", users.path, users.fileDigest))
        self.assertEqual(
            self.sql(
                "SELECT name, position, template_id, params FROM imapmig_queue.jobs ORDER BY position"
            ),
            [("j0", 0, None, None), ("j1", 1, None, None)]
            + [
                (f"users-u{i}", i + 2, templateId, {"row": i + 2, "fields": {"user": f"u{i}"}})
                for i in range(3)
            ],
        )
        self.assertEqual(self.sql("SELECT jobs FROM imapmig_queue.fleet"), [(5,)])

    def test_secondStartReadsNoRow(self) -> None:
        """
        A second start with the same list reads no row of the user list
        and writes nothing; it claims a row's job, built from its params
        alone.
        """
        self.daemon(FakeUserList())
        written = self.sql("SELECT string_agg(xmin::text, ',') FROM imapmig_queue.jobs")
        users = FakeUserList(readable=False)
        queue = self.daemon(users)
        self.assertEqual(self.sql("SELECT string_agg(xmin::text, ',') FROM imapmig_queue.jobs"), written)
        self.sql("UPDATE imapmig_queue.jobs SET state = 'done' WHERE template_id IS NULL")
        me = queue.register("host", 1, "1.0", 600.0)
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job, jobConfig("users-u0", "u0"))
        self.assertEqual(users.built, 1)

    def test_claimedRowOfAnotherTemplate(self) -> None:
        """
        A claimed row whose digest is not its template's and params' (a
        reload committed during the claim) claims nothing.
        """
        queue = self.daemon(FakeUserList(), jobs=[])
        me = queue.register("host", 1, "1.0", 600.0)
        self.sql("UPDATE imapmig_queue.jobs SET params = '{\"row\": 9, \"fields\": {\"user\": \"x\"}}'")
        self.assertIsNone(queue.claim(me, 0.0, 600.0))

    def test_otherFileRefused(self) -> None:
        """
        A start whose user list's file differs is refused, naming the
        list; its rows are not read.
        """
        self.daemon(FakeUserList())
        error = self.assertRaises(
            FleetMismatch, self.daemon, FakeUserList(fileDigest="e" * 64, readable=False)
        )
        self.assertIn(
            f"the user list of jobs[0] (/lists/users.csv, file digest {'e' * 64})"
            " is not the fleet's: its file or its settings differ",
            str(error),
        )

    def test_reloadAppliesRows(self) -> None:
        """
        A reload with a user list of another file applies the difference
        of its rows: the new rows added after the last, the rows no longer
        listed removed, the others untouched.
        """
        queue = self.daemon(FakeUserList(), jobs=[])
        before = self.sql("SELECT name, xmin::text FROM imapmig_queue.jobs WHERE name = 'users-u0'")
        change = queue.replaceList([], [FakeUserList(fileDigest="e" * 64, count=4)])
        self.assertEqual((change.added, change.removed, change.changed), (1, 0, 0))
        self.assertEqual(
            self.sql("SELECT name, xmin::text FROM imapmig_queue.jobs WHERE name = 'users-u0'"), before
        )
        self.assertEqual(
            [name for name, in self.sql("SELECT name FROM imapmig_queue.jobs ORDER BY position")],
            ["users-u0", "users-u1", "users-u2", "users-u3"],
        )
        change = queue.replaceList([], [FakeUserList(fileDigest="d" * 64, count=1, settings=("t", 1))])
        self.assertEqual((change.removed, change.changed), (3, 1))
        self.assertEqual(len(self.sql("SELECT 1 FROM imapmig_queue.templates")), 1)

    def test_rowNotBuilt(self) -> None:
        """
        A row whose job cannot be built (its password file gone) fails,
        and the claim says why; the next claim takes the next row.
        """
        users = FakeUserList()
        queue = self.daemon(users, jobs=[])
        me = queue.register("host", 1, "1.0", 600.0)

        users.broken = True
        error = self.assertRaises(PermanentError, queue.claim, me, 0.0, 600.0)
        self.assertIn("row 2: destination_password_file: gone", str(error))
        self.assertEqual(
            self.sql("SELECT state, owner FROM imapmig_queue.jobs WHERE name = 'users-u0'"),
            [("failed", None)],
        )
        users.broken = False
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job.name, "users-u1")

    def test_sameListReloaded(self) -> None:
        """
        A reload with the same list changes nothing, and the daemon still
        claims its rows (their templates known).
        """
        queue = self.daemon(FakeUserList(), jobs=[])
        change = queue.replaceList([], [FakeUserList(readable=False)])
        self.assertFalse(change.loaded)
        me = queue.register("host", 1, "1.0", 600.0)
        claim = queue.claim(me, 0.0, 600.0)
        assert claim is not None
        self.assertEqual(claim.job.name, "users-u0")

    def test_threadedReload(self) -> None:
        """
        The threaded queue (a fleet's daemon's) reloads with its user
        lists: their rows are the fleet's afterwards.
        """
        from tests.test_queue_postgresql import Reactor

        pool = ThreadPool(1, 1)
        pool.start()
        self.addCleanup(pool.stop)
        reactor = Reactor()
        threaded = ThreadedJobQueue(self.daemon(FakeUserList(), jobs=[]), reactor, pool)  # type: ignore[arg-type]
        change = reactor.pump(threaded.replaceList([], [FakeUserList(fileDigest="e" * 64, count=4)]))
        self.assertEqual(change.added, 1)
        self.assertEqual(self.sql("SELECT count(*) FROM imapmig_queue.jobs"), [(4,)])
