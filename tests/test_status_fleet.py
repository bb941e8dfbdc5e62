# -*- test-case-name: tests.test_status_fleet -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests for the fleet on the status pages (L{imapmig.status.fleet}):
C{/status.json}'s C{daemons} and each job's C{daemon}, C{/jobs/NAME.json}'s
holder and C{/metrics}' fleet series, served over HTTP in memory by
L{StubTreq}, with the single daemon's view (L{SingleDaemonView}) and a
fake fleet's (L{FakeFleetView}); and the single daemon's view itself.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families
from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

import imapmig
from imapmig.errors import QueueUnavailable
from imapmig.progress import JobState, MigrationProgress
from imapmig.progress.telemetry import Telemetry
from imapmig.queue.fleetview import (
    DaemonRow,
    Fleet,
    FoundJobs,
    Holder,
    IFleetView,
    JobRow,
    JobsPage,
    SingleDaemonView,
)
from imapmig.state.memory import MemoryStateStore
from imapmig.status.fleet import holderDocument, singleDaemon
from imapmig.status.metrics import buildMetricsResource
from imapmig.status.resource import StatusResource

BASE = "http://127.0.0.1:8080"

NOW = 1_700_000_000.0

MIG1 = DaemonRow(
    "11111111-1111-4111-8111-111111111111", "mig1", 101, "1.0", NOW - 600, NOW - 2, 2.0,
    NOW + 58, True, 2, 31.25, this=True,
)  # fmt: skip
MIG2 = DaemonRow(
    "22222222-2222-4222-8222-222222222222", "mig2", 202, "1.1", NOW - 500, NOW - 3, 3.0,
    NOW + 57, True, 1, None,
)  # fmt: skip
DEAD = DaemonRow(
    "33333333-3333-4333-8333-333333333333", "mig3", 303, "1.0", NOW - 900, NOW - 120, 120.0,
    NOW - 60, False, 1, 0.0,
)  # fmt: skip


@implementer(IFleetView)
class FakeFleetView:
    """
    A fleet as a test sets it: its daemons and holders, answered at once,
    or later (L{pending}), or failing (L{failure}).

    @ivar asked: the names each L{holders} call was given.
    @ivar pending: the Deferreds not yet answered, when L{later} is set.
    """

    def __init__(self, fleet: Fleet, holders: Mapping[str, Holder]) -> None:
        self.fleet = fleet
        self.held = dict(holders)
        self.failure: Exception | None = None
        self.later = False
        self.pending: list[Deferred[Any]] = []
        self.asked: list[list[str]] = []
        self.daemonReads = 0
        # The page of jobs jobsPage answers, the (after, limit) each asked.
        self.page = JobsPage((), None)
        self.pagesAsked: list[tuple[int | None, int]] = []
        self.counts: Mapping[str, int] = {}
        # What findJobs answers (None: it fails), what each call asked; the
        # jobs jobNamed knows.
        self.found: FoundJobs | None = None
        self.finds: list[tuple[tuple[str, ...], str, int, int]] = []
        self.named: dict[str, JobRow] = {}

    def _answer(self, value: Any) -> Deferred[Any]:
        if self.failure is not None:
            return fail(self.failure)
        if self.later:
            d: Deferred[Any] = Deferred()
            self.pending.append(d)
            return d
        return succeed(value)

    def daemons(self) -> Deferred[Fleet]:
        self.daemonReads += 1
        return self._answer(self.fleet)

    def holders(self, names: Sequence[str]) -> Deferred[Mapping[str, Holder]]:
        self.asked.append(list(names))
        return self._answer({n: self.held[n] for n in names if n in self.held})

    def jobsPage(self, after: int | None, limit: int) -> Deferred[JobsPage]:
        self.pagesAsked.append((after, limit))
        return self._answer(self.page)

    def jobCounts(self) -> Deferred[Mapping[str, int]]:
        return self._answer(self.counts)

    def findJobs(
        self, states: Sequence[str], text: str, start: int, limit: int
    ) -> Deferred[FoundJobs]:
        # Without a page set, the fleet's jobs cannot be read: the page
        # lists the jobs this daemon has.
        self.finds.append((tuple(states), text, start, limit))
        if self.found is None:
            return fail(QueueUnavailable("no page set"))
        return self._answer(self.found)

    def jobNamed(self, name: str) -> Deferred[JobRow | None]:
        return self._answer(self.named.get(name))


class FleetPagesTestCase(SynchronousTestCase):
    """
    A status site over three jobs and a fake fleet of three daemons.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.progress = MigrationProgress(self.clock.seconds)
        for name in ("alice", "bob", "carol"):
            self.progress.addJob(name)
        self.progress.job("alice").showState(lambda: JobState.RUNNING)
        self.fleet = FakeFleetView(
            Fleet((MIG1, MIG2, DEAD)),
            {
                "alice": Holder(MIG1.daemonId, "mig1"),
                "bob": Holder(DEAD.daemonId, "mig3", live=False),
            },
        )
        self.metrics = buildMetricsResource(
            self.progress, Telemetry(self.clock.seconds), {}, processMetrics=False, fleet=self.fleet
        )
        self.root = StatusResource(
            self.progress,
            self.clock.seconds,
            MemoryStateStore(),
            metrics=self.metrics,
            fleet=self.fleet,
        )
        self.treq: Any = StubTreq(self.root)

    def get(self, path: str, code: int = 200) -> bytes:
        """
        C{GET path}: its body, the answer C{code}.
        """
        response = self.successResultOf(self.treq.get(BASE + path))
        body: bytes = self.successResultOf(self.treq.content(response))
        self.assertEqual(response.code, code, body[:300])
        return body


class StatusJSONFleetTests(FleetPagesTestCase):
    """
    C{/status.json} lists the daemons and names each job's holder.
    """

    def test_fleetJobs(self) -> None:
        """
        A fleet's C{/status.json} counts the fleet's jobs by state from its
        database (C{fleet_jobs}; C{null} while unreadable), beside the
        totals of the jobs this daemon lists.
        """
        self.fleet.counts = {"queued": 999_990, "claimed": 10}
        document = json.loads(self.get("/status.json"))
        self.assertEqual(document["fleet_jobs"], {"queued": 999_990, "claimed": 10})
        self.assertEqual(document["totals"]["jobs_total"], 3)
        self.fleet.failure = QueueUnavailable("postgresql://db1/mig: connection refused")
        self.assertIsNone(json.loads(self.get("/status.json"))["fleet_jobs"])

    def test_listDiffers(self) -> None:
        """
        C{fleet_list_differs} says why this daemon's job list differs from
        the fleet's, C{null} while it does not (or for a daemon alone).
        """
        self.assertIsNone(json.loads(self.get("/status.json"))["fleet_list_differs"])
        why = "its file (digest d1) is not the fleet's list's"
        differs: list[str | None] = [why]
        root = StatusResource(
            self.progress, self.clock.seconds, MemoryStateStore(), fleet=self.fleet,
            listDiffers=lambda: differs[0],
        )  # fmt: skip
        self.treq = StubTreq(root)
        document = json.loads(self.get("/status.json"))
        self.assertEqual(document["fleet_list_differs"], why)
        differs[0] = None
        self.assertIsNone(json.loads(self.get("/status.json"))["fleet_list_differs"])

    def test_daemons(self) -> None:
        """
        C{daemons} has every daemon of the view, in its order, each with
        its host, pid, version, start, heartbeat and its age, lease, whether
        live, jobs held, rate and whether it serves the page; no error.
        """
        document = json.loads(self.get("/status.json"))
        self.assertIsNone(document["daemons_error"])
        self.assertEqual(
            document["daemons"][0],
            {
                "id": MIG1.daemonId,
                "host": "mig1",
                "pid": 101,
                "version": "1.0",
                "started_at": NOW - 600,
                "heartbeat_at": NOW - 2,
                "heartbeat_age_seconds": 2.0,
                "lease_until": NOW + 58,
                "live": True,
                "jobs": 2,
                "messages_per_second": 31.2,
                "this": True,
            },
        )
        self.assertEqual(
            [
                (d["host"], d["live"], d["this"], d["messages_per_second"])
                for d in document["daemons"]
            ],
            [("mig1", True, True, 31.2), ("mig2", True, False, None), ("mig3", False, False, 0.0)],
        )

    def test_holders(self) -> None:
        """
        Each job of the page has C{daemon}: its holder's id, host and
        whether its lease is live, or C{null} when no daemon holds it; the
        view is asked for the page's jobs only.
        """
        document = json.loads(self.get("/status.json?sort=order&limit=2"))
        self.assertEqual(
            [(job["name"], job["daemon"]) for job in document["jobs"]],
            [
                ("alice", {"id": MIG1.daemonId, "host": "mig1", "live": True}),
                ("bob", {"id": DEAD.daemonId, "host": "mig3", "live": False}),
            ],
        )
        self.assertEqual(self.fleet.asked, [["alice", "bob"]])
        document = json.loads(self.get("/status.json?q=carol"))
        self.assertEqual([job["daemon"] for job in document["jobs"]], [None])

    def test_emptyPageAsksNoHolder(self) -> None:
        """
        A page without jobs asks for no holder, and still lists the
        daemons.
        """
        document = json.loads(self.get("/status.json?q=nobody"))
        self.assertEqual(document["jobs"], [])
        self.assertEqual(len(document["daemons"]), 3)
        self.assertEqual(self.fleet.asked, [])

    def test_waitsForTheFleet(self) -> None:
        """
        The answer waits for the fleet's Deferreds (no call blocks): it
        comes once they fire, with the progress as it was at the request.
        """
        self.fleet.later = True
        response = self.treq.get(BASE + "/status.json")
        self.assertNoResult(response)
        # The daemons, the page's holders, the fleet's counts.
        self.assertEqual(len(self.fleet.pending), 3)
        self.progress.job("carol").showState(lambda: JobState.RUNNING)
        for d in self.fleet.pending:
            d.callback(self.fleet.fleet if d is self.fleet.pending[0] else {})
        self.treq.flush()
        body = self.successResultOf(self.treq.content(self.successResultOf(response)))
        document = json.loads(body)
        self.assertEqual(len(document["daemons"]), 3)
        self.assertEqual(
            {job["name"]: job["state"] for job in document["jobs"]}["carol"], "queued"
        )

    def test_fleetUnreadable(self) -> None:
        """
        When the fleet cannot be read (its database unreachable), the page
        is still served: C{daemons} is C{null}, C{daemons_error} says why,
        no job names a holder, and it is logged at debug level only.
        """
        self.fleet.failure = QueueUnavailable("postgresql://db1/mig: connection refused")
        with capturedLogs() as events:
            document = json.loads(self.get("/status.json"))
        self.assertIsNone(document["daemons"])
        self.assertEqual(document["daemons_error"], "postgresql://db1/mig: connection refused")
        self.assertEqual([job["daemon"] for job in document["jobs"]], [None, None, None])
        self.assertEqual(len(document["jobs"]), 3)
        self.assertEqual(
            [e["log_level"] for e in events if "fleet" in e.get("log_format", "")],
            [LogLevel.debug],
        )

    def test_fleetBug(self) -> None:
        """
        An unexpected error of the view is logged as a failure, and the
        page is served as when the fleet is unreadable.
        """
        self.fleet.failure = RuntimeError("a bug")
        document = json.loads(self.get("/status.json"))
        self.assertIsNone(document["daemons"])
        self.assertEqual(document["daemons_error"], "a bug")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class FleetJobsTests(FleetPagesTestCase):
    """
    C{/fleet/jobs.json}: the fleet's jobs by keyset, from the view.
    """

    def test_page(self) -> None:
        """
        A page lists the view's jobs with their state, request and holder,
        the next page's key and the counts by state; C{after} and
        C{limit} are passed on (100 by default).
        """
        self.fleet.page = JobsPage(
            (
                JobRow(7, "alice", "claimed", "pause", Holder(MIG1.daemonId, "mig1")),
                JobRow(9, "zed", "queued"),
            ),
            9,
        )
        self.fleet.counts = {"queued": 999_998, "claimed": 2}
        document = json.loads(self.get("/fleet/jobs.json?after=6&limit=2"))
        self.assertEqual(
            document,
            {
                "jobs": [
                    {"position": 7, "name": "alice", "state": "claimed", "requested": "pause",
                     "daemon": holderDocument(Holder(MIG1.daemonId, "mig1"))},
                    {"position": 9, "name": "zed", "state": "queued", "requested": None,
                     "daemon": None},
                ],
                "after": 9,
                "counts": {"queued": 999_998, "claimed": 2},
            },
        )  # fmt: skip
        self.get("/fleet/jobs.json")
        self.assertEqual(self.fleet.pagesAsked, [(6, 2), (None, 100)])

    def test_badQuery(self) -> None:
        """
        An C{after} or C{limit} that is not a number, or a limit out of
        bounds, is a 400 naming them; nothing is read.
        """
        for query in ("after=x", "limit=0", "limit=501"):
            self.get(f"/fleet/jobs.json?{query}", code=400)
        self.assertEqual(self.fleet.pagesAsked, [])

    def test_unreadable(self) -> None:
        """
        While the database cannot be read, the page is a 503 saying why.
        """
        self.fleet.failure = QueueUnavailable("postgresql://db1/mig: connection refused")
        body = json.loads(self.get("/fleet/jobs.json", code=503))
        self.assertEqual(body["error"], "postgresql://db1/mig: connection refused")


class FleetJobListTests(FleetPagesTestCase):
    """
    A fleet daemon's C{/status.json} and C{/jobs/NAME.json} list the
    fleet's jobs from its database, not only those it has in memory.
    """

    def setUp(self) -> None:
        super().setUp()
        self.progress.job("alice").messagesDone = 7
        self.fleet.found = FoundJobs(
            (
                JobRow(0, "alice", "claimed", holder=Holder(MIG1.daemonId, "mig1", this=True)),
                JobRow(4999, "t-d4999", "claimed", holder=Holder(MIG2.daemonId, "mig2")),
                JobRow(5000, "t-d5000", "queued"),
            ),
            50_000,
            True,
            5001,
        )

    def test_page(self) -> None:
        """
        The page's jobs are the fleet's: the one this daemon runs with its
        progress, one another daemon runs as the database knows it
        (C{running}, its holder, no counts), a queued one with no holder;
        C{matched} and C{next} are the fleet's; the query's state, search,
        offset and limit are asked of the database, the states as queue
        states.
        """
        document = json.loads(self.get("/status.json?state=running,done_with_failures&q=t-d&offset=20&limit=3"))
        jobs = document["jobs"]
        self.assertEqual([job["name"] for job in jobs], ["alice", "t-d4999", "t-d5000"])
        self.assertEqual(jobs[0]["messages_done"], 7)
        self.assertEqual(jobs[0]["daemon"]["id"], MIG1.daemonId)
        self.assertEqual(
            (jobs[1]["state"], jobs[1]["messages_done"], jobs[1]["daemon"]["host"]),
            ("running", None, "mig2"),
        )
        self.assertEqual((jobs[2]["state"], jobs[2]["daemon"]), ("queued", None))
        self.assertEqual(
            (document["page"]["matched"], document["page"]["matched_exact"], document["page"]["next"]),
            (50_000, True, 5001),
        )
        self.assertEqual(self.fleet.finds, [(("claimed", "done"), "t-d", 20, 3)])
        self.get("/status.json?errors=1")
        self.get("/status.json?errors=1&state=queued")
        self.assertEqual([find[0] for find in self.fleet.finds[1:]], [("failed",), ("none",)])

    def test_unreadable(self) -> None:
        """
        While the fleet's jobs cannot be read, the page lists the jobs this
        daemon has.
        """
        self.fleet.found = None
        document = json.loads(self.get("/status.json"))
        self.assertEqual([job["name"] for job in document["jobs"]], ["alice", "bob", "carol"])

    def test_jobOfAnother(self) -> None:
        """
        C{/jobs/NAME.json} of a job this daemon does not have shows what
        the database knows of it and its holder; a name the fleet does not
        have is a 404.
        """
        self.fleet.named["t-d4999"] = JobRow(
            4999, "t-d4999", "claimed", holder=Holder(MIG2.daemonId, "mig2")
        )
        document = json.loads(self.get("/jobs/t-d4999.json"))
        self.assertEqual(document["job"]["state"], "running")
        self.assertEqual(document["job"]["daemon"]["host"], "mig2")
        self.assertEqual(document["failures"]["matched"], 0)
        self.get("/jobs/nobody.json", 404)


class JobDocumentFleetTests(FleetPagesTestCase):
    """
    C{/jobs/NAME.json} names the job's holder, without reading the
    daemons.
    """

    def test_holder(self) -> None:
        """
        C{job.daemon} is the daemon holding the job; the view is asked for
        that job alone, and the daemons are not read.
        """
        document = json.loads(self.get("/jobs/alice.json"))
        self.assertEqual(
            document["job"]["daemon"], {"id": MIG1.daemonId, "host": "mig1", "live": True}
        )
        self.assertEqual(self.fleet.asked, [["alice"]])
        self.assertEqual(self.fleet.daemonReads, 0)

    def test_noHolder(self) -> None:
        """
        A job no daemon holds has C{daemon: null}; so has every job while
        the fleet cannot be read, and the page is served.
        """
        self.assertIsNone(json.loads(self.get("/jobs/carol.json"))["job"]["daemon"])
        self.fleet.failure = QueueUnavailable("down")
        self.assertIsNone(json.loads(self.get("/jobs/alice.json"))["job"]["daemon"])


class MetricsFleetTests(FleetPagesTestCase):
    """
    C{/metrics} gives the fleet's series, labelled by daemon.
    """

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = self.get("/metrics").decode("utf-8")
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def test_series(self) -> None:
        """
        C{imapmig_fleet_daemons_live} counts the live daemons; each daemon
        has its C{imapmig_fleet_daemon_*} series labelled C{daemon} and
        C{host} (its rate only where it reports one); C{imapmig_daemon_info}
        names the daemon scraped.
        """
        samples = self.samples()
        self.assertEqual(samples["imapmig_fleet_daemons_live", frozenset()], 2)

        def labels(daemon: DaemonRow, **more: str) -> frozenset[tuple[str, str]]:
            return frozenset(dict(daemon=daemon.daemonId, host=daemon.host, **more).items())

        for daemon in (MIG1, MIG2, DEAD):
            key = labels(daemon)
            self.assertEqual(samples["imapmig_fleet_daemon_jobs", key], daemon.jobs)
            self.assertEqual(samples["imapmig_fleet_daemon_live", key], float(daemon.live))
            self.assertEqual(
                samples["imapmig_fleet_daemon_heartbeat_age_seconds", key], daemon.heartbeatAge
            )
            self.assertEqual(
                samples["imapmig_fleet_daemon_info", labels(daemon, version=daemon.version)], 1
            )
        self.assertEqual(samples["imapmig_fleet_daemon_messages_per_second", labels(MIG1)], 31.25)
        self.assertNotIn(("imapmig_fleet_daemon_messages_per_second", labels(MIG2)), samples)
        self.assertEqual(
            [key for key in samples if key[0] == "imapmig_daemon_info"],
            [("imapmig_daemon_info", labels(MIG1, version="1.0"))],
        )
        # The rest of the scrape is there too.
        build = ("imapmig_build_info", frozenset({("version", imapmig.__version__)}))
        self.assertIn(build, samples)

    def test_waitsForTheFleet(self) -> None:
        """
        A scrape waits for the fleet's Deferred, and the series read for
        one scrape are not left for the next.
        """
        self.fleet.later = True
        response = self.treq.get(BASE + "/metrics")
        self.assertNoResult(response)
        self.fleet.pending.pop().callback(self.fleet.fleet)
        self.treq.flush()
        body = self.successResultOf(self.treq.content(self.successResultOf(response)))
        self.assertIn(b"imapmig_fleet_daemons_live 2.0", body)
        self.assertIsNone(self.metrics._fleetCollector.fleet)  # type: ignore[union-attr]

    def test_fleetUnreadable(self) -> None:
        """
        While the fleet cannot be read, a scrape has no fleet series (an
        alert on C{absent(imapmig_fleet_daemons_live)} sees it) and the
        rest.
        """
        self.fleet.failure = QueueUnavailable("down")
        body = self.get("/metrics")
        self.assertNotIn(b"imapmig_fleet_", body)
        self.assertIn(b"imapmig_build_info", body)

    def test_head(self) -> None:
        """
        HEAD waits as GET does and gives no body.
        """
        response = self.successResultOf(self.treq.head(BASE + "/metrics"))
        self.assertEqual(response.code, 200)
        self.assertEqual(self.successResultOf(self.treq.content(response)), b"")


class SingleDaemonTests(SynchronousTestCase):
    """
    A daemon alone (L{SingleDaemonView}, the status site's default) is one
    row, itself, live, holding every job.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.progress = MigrationProgress(self.clock.seconds)
        for name in ("alice", "bob"):
            self.progress.addJob(name)

    def test_interface(self) -> None:
        """
        It provides L{IFleetView}, as the fake does.
        """
        self.assertTrue(verifyObject(IFleetView, singleDaemon(self.progress, self.clock.seconds)))
        self.assertTrue(verifyObject(IFleetView, FakeFleetView(Fleet(()), {})))

    def test_oneRow(self) -> None:
        """
        Its fleet is one daemon: itself, on the host and pid given, of this
        version, started when the view was made, its heartbeat now (age
        0), no lease, live, holding every job, at the rate given.
        """
        view = SingleDaemonView(
            self.clock.seconds, lambda: 7, lambda: 12.5, host="mig1", pid=42
        )
        self.clock.advance(30)
        fleet = self.successResultOf(view.daemons())
        self.assertEqual(
            fleet,
            Fleet(
                (
                    DaemonRow(
                        view.daemonId, "mig1", 42, imapmig.__version__, NOW, NOW + 30, 0.0,
                        None, True, 7, 12.5, this=True,
                    ),
                )
            ),
        )  # fmt: skip
        self.assertEqual(fleet.live, 1)
        self.assertEqual(
            self.successResultOf(view.holders(["alice", "bob"])),
            {"alice": Holder(view.daemonId, "mig1"), "bob": Holder(view.daemonId, "mig1")},
        )

    def test_jobsPage(self) -> None:
        """
        Its jobs are paged in the order given, each claimed one held by
        it, the next page's key given until the last; its counts are by
        state.
        """
        states = [("a", "done"), ("b", "claimed"), ("c", "queued")]
        view = SingleDaemonView(self.clock.seconds, lambda: 3, host="mig1", states=lambda: states)
        holder = Holder(view.daemonId, "mig1")
        self.assertEqual(
            self.successResultOf(view.jobsPage(None, 2)),
            JobsPage((JobRow(0, "a", "done"), JobRow(1, "b", "claimed", holder=holder)), 1),
        )
        self.assertEqual(
            self.successResultOf(view.jobsPage(1, 2)), JobsPage((JobRow(2, "c", "queued"),), None)
        )
        self.assertEqual(
            self.successResultOf(view.jobCounts()), {"done": 1, "claimed": 1, "queued": 1}
        )

    def test_idPerView(self) -> None:
        """
        Each view (each process start) draws a new id, and this host's name
        and pid by default.
        """
        import os
        import socket

        first = SingleDaemonView(self.clock.seconds, lambda: 0)
        second = SingleDaemonView(self.clock.seconds, lambda: 0)
        self.assertNotEqual(first.daemonId, second.daemonId)
        row = self.successResultOf(first.daemons()).daemons[0]
        self.assertEqual((row.host, row.pid), (socket.gethostname(), os.getpid()))

    def test_statusDefault(self) -> None:
        """
        A status site given no view shows this daemon alone: one daemon
        row, itself, with every job and the progress's rate, and every job
        held by it.
        """
        treq: Any = StubTreq(StatusResource(self.progress, self.clock.seconds, MemoryStateStore()))
        response = self.successResultOf(treq.get(BASE + "/status.json"))
        document = json.loads(self.successResultOf(treq.content(response)))
        [daemon] = document["daemons"]
        self.assertEqual(
            (daemon["jobs"], daemon["live"], daemon["this"], daemon["messages_per_second"]),
            (2, True, True, 0.0),
        )
        self.assertNotIn("fleet_jobs", document)
        self.assertEqual(
            [job["daemon"]["id"] for job in document["jobs"]], [daemon["id"], daemon["id"]]
        )
        response = self.successResultOf(treq.get(BASE + "/jobs/bob.json"))
        detail = json.loads(self.successResultOf(treq.content(response)))
        self.assertEqual(detail["job"]["daemon"]["id"], daemon["id"])


class DocumentedTests(SynchronousTestCase):
    """
    The DAEMON object docs/dashboard-and-api.md shows is the one served.
    """

    def test_daemonExample(self) -> None:
        """
        The example after "A DAEMON object" has the keys of a served
        daemon, each of the same JSON type, and the table above it names
        every key.
        """
        import os
        import re

        from imapmig.status.fleet import daemonDocument

        path = os.path.join(os.path.dirname(__file__), "..", "docs", "dashboard-and-api.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        section = text[text.index("A DAEMON object") :]
        example = json.loads(section[section.index("```json") + 7 : section.index("```\n", 10)])
        served = daemonDocument(MIG1)
        self.assertEqual(sorted(example), sorted(served))
        for key, value in served.items():
            self.assertIsInstance(example[key], type(value), key)
        table = section[: section.index("```json")]
        named = set(re.findall(r"`([a-z_]+)`", table))
        self.assertEqual(set(served) - named, set())
