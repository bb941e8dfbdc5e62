"""
Tests for L{imapmig.status.metrics}: the collector's output, parsed back
with prometheus_client's own parser, checked against the progress model
and the telemetry; and the C{/metrics} resource.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from prometheus_client.exposition import generate_latest
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

import imapmig
from imapmig.config.limits import ServerLimits
from imapmig.progress import JobProgress, JobState, MigrationProgress
from imapmig.schedule.grants import ConnectionGrants, JobConnections
from imapmig.throttle import UPLOAD
from imapmig.status.metrics import (
    MAX_JOB_SERIES,
    SERIES_PER_JOB,
    MigrationCollector,
    buildMetricsResource,
    isCounted,
    jobCounters,
)
from imapmig.progress.telemetry import Telemetry

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(collector: MigrationCollector) -> tuple[Samples, dict[str, str]]:
    """
    The collector's output as Prometheus's text format, parsed back: each
    sample's value by its name and labels, and each family's type by its
    name.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode("utf-8")
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, key
            samples[key] = sample.value
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    """
    The value of the sample C{name} with exactly C{labels}.
    """
    return samples[name, frozenset(labels.items())]


def names(samples: Samples) -> set[str]:
    """
    The names of the samples.
    """
    return {name for name, _ in samples}


def fill(
    job: JobProgress,
    total: int,
    done: int,
    alreadyMigrated: int,
    present: int,
    failed: int,
    octets: int,
    state: JobState,
) -> None:
    """
    Set a job's counters as a run that listed its source would.
    """
    job.started()
    job.foldersTotal = 2
    job.counted = True
    job.messagesTotal = total
    job.messagesDone = done
    job.messagesAlreadyMigrated = alreadyMigrated
    job.messagesAlreadyPresent = present
    job.messagesFailed = failed
    job.bytesDone = octets
    job.bytesSent = octets
    job.showState(lambda: state)


class CollectorTests(SynchronousTestCase):
    """
    L{MigrationCollector} reads the progress model and the telemetry when
    scraped.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.telemetry = Telemetry(self.clock.seconds)
        # alice and bob on two servers; carol, not counted yet, on bob's.
        self.alice = self.progress.addJob("alice")
        self.bob = self.progress.addJob("bob")
        self.carol = self.progress.addJob("carol")
        fill(self.alice, 100, 40, 10, 5, 2, 25_000, JobState.RUNNING)
        self.alice.reconnects = 1
        fill(self.bob, 3, 3, 0, 0, 0, 300, JobState.DONE)
        self.servers = {"alice": "mx1", "bob": "mx2", "carol": "mx2"}
        self.collector = MigrationCollector(self.progress, self.telemetry, self.servers)

    def test_perJob(self) -> None:
        """
        Each job's counters, labelled with the job and its destination
        server: messages appended by this run (done less those already
        migrated or present), their octets, failed, already present,
        reconnects, already migrated; its source's and its pending messages
        only once counted; its state as one series.
        """
        samples, types = scrape(self.collector)
        alice = {"job": "alice", "server": "mx1"}
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **alice), 25)
        self.assertEqual(value(samples, "imapmig_job_migrated_bytes_total", **alice), 25_000)
        self.assertEqual(value(samples, "imapmig_job_failed_messages_total", **alice), 2)
        self.assertEqual(
            value(samples, "imapmig_job_already_present_messages_total", **alice), 5
        )
        self.assertEqual(value(samples, "imapmig_job_reconnects_total", **alice), 1)
        self.assertEqual(value(samples, "imapmig_job_already_migrated_messages", **alice), 10)
        self.assertEqual(value(samples, "imapmig_job_source_messages", **alice), 100)
        self.assertEqual(value(samples, "imapmig_job_pending_messages", **alice), 58)
        self.assertEqual(
            value(samples, "imapmig_job_state", state="running", **alice), 1
        )
        bob = {"job": "bob", "server": "mx2"}
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **bob), 3)
        self.assertEqual(value(samples, "imapmig_job_state", state="done", **bob), 1)
        carol = {"job": "carol", "server": "mx2"}
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **carol), 0)
        self.assertEqual(value(samples, "imapmig_job_state", state="queued", **carol), 1)
        # Not counted: no total, rather than a false 0.
        for name in ("imapmig_job_source_messages", "imapmig_job_pending_messages"):
            self.assertNotIn((name, frozenset(carol.items())), samples)
        states = [key for key in samples if key[0] == "imapmig_job_state"]
        self.assertEqual(len(states), 3)
        self.assertEqual(types["imapmig_job_migrated_messages"], "counter")
        self.assertEqual(types["imapmig_job_source_messages"], "gauge")

    def test_perServer(self) -> None:
        """
        Each destination server's sums over its jobs, the jobs in each
        state (every state, 0 included), and how many are not counted.
        """
        samples, _ = scrape(self.collector)
        self.assertEqual(
            value(samples, "imapmig_server_migrated_messages_total", server="mx1"), 25
        )
        self.assertEqual(
            value(samples, "imapmig_server_migrated_messages_total", server="mx2"), 3
        )
        self.assertEqual(
            value(samples, "imapmig_server_migrated_bytes_total", server="mx2"), 300
        )
        self.assertEqual(
            value(samples, "imapmig_server_failed_messages_total", server="mx1"), 2
        )
        self.assertEqual(value(samples, "imapmig_server_source_messages", server="mx2"), 3)
        self.assertEqual(value(samples, "imapmig_server_pending_messages", server="mx1"), 58)
        self.assertEqual(value(samples, "imapmig_server_pending_messages", server="mx2"), 0)
        self.assertEqual(value(samples, "imapmig_server_uncounted_jobs", server="mx2"), 1)
        self.assertEqual(value(samples, "imapmig_server_uncounted_jobs", server="mx1"), 0)
        for state in JobState:
            expected = {"done": 1, "queued": 1}.get(state.value, 0)
            self.assertEqual(
                value(samples, "imapmig_server_jobs", server="mx2", state=state.value),
                expected,
            )
        self.assertEqual(value(samples, "imapmig_build_info", version=imapmig.__version__), 1)

    def test_countersCarriedOverRuns(self) -> None:
        """
        A job's new run starts its progress counters again from 0; the
        metrics go on from what its earlier run had counted, so they never
        go down, nor jump while the new run has not listed its source.
        """
        scrape(self.collector)
        self.clock.advance(60)
        bob = {"job": "bob", "server": "mx2"}
        self.bob.started()
        # Not listed yet: done and already migrated are the last run's.
        samples, _ = scrape(self.collector)
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **bob), 3)
        self.bob.messagesDone = 3
        self.bob.messagesAlreadyMigrated = 3
        samples, _ = scrape(self.collector)
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **bob), 3)
        self.assertEqual(value(samples, "imapmig_job_migrated_bytes_total", **bob), 300)
        self.bob.messagesTotal = 4
        self.bob.messagesDone = 4
        self.bob.bytesDone = 50
        self.bob.bytesSent = 50
        samples, _ = scrape(self.collector)
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **bob), 4)
        self.assertEqual(value(samples, "imapmig_job_migrated_bytes_total", **bob), 350)
        self.assertEqual(
            value(samples, "imapmig_server_migrated_bytes_total", server="mx2"), 350
        )

    def test_runsBetweenScrapes(self) -> None:
        """
        Runs that end between two scrapes are counted all the same: the
        counters are the progress model's own, over every run.
        """
        bob = {"job": "bob", "server": "mx2"}
        samples, _ = scrape(self.collector)
        before = value(samples, "imapmig_job_migrated_messages_total", **bob)
        for _ in range(2):
            self.bob.started()
            # Its listing: what is done so far, earlier runs did.
            self.bob.messagesAlreadyMigrated = self.bob.messagesDone
            self.bob.messagesDone += 2
            self.bob.bytesSent = 20
        samples, _ = scrape(self.collector)
        self.assertEqual(value(samples, "imapmig_job_migrated_messages_total", **bob), before + 4)

    def test_telemetry(self) -> None:
        """
        Per server: the APPEND latency histogram, the window in flight,
        the throttle waits, and the connections granted, open and allowed.
        """
        server = self.telemetry.server("mx1")
        for seconds in (0.0005, 0.02, 0.02, 3.0):
            server.appendLatency.observe(seconds)
        waits = server.waitsOf(UPLOAD)
        waits.count = 2
        waits.seconds = 1.5
        grants = ConnectionGrants(4, {"mx1": ServerLimits(maxConnections=3)})
        self.telemetry.watchConnections(grants.connectionCounts)
        job = JobConnections(grants, [("mx1", "alice")])
        self.successResultOf(job.reserve())

        class Window:
            messagesInFlight = 7
            bytesInFlight = 7000

        window = Window()
        server.pipelineOpened(window)
        samples, types = scrape(self.collector)
        mx1 = {"server": "mx1"}
        latency = "imapmig_server_append_latency_seconds"
        self.assertEqual(types[latency], "histogram")
        self.assertEqual(value(samples, latency + "_bucket", le="0.001", **mx1), 1)
        self.assertEqual(value(samples, latency + "_bucket", le="0.025", **mx1), 3)
        self.assertEqual(value(samples, latency + "_bucket", le="2.5", **mx1), 3)
        self.assertEqual(value(samples, latency + "_bucket", le="+Inf", **mx1), 4)
        self.assertEqual(value(samples, latency + "_count", **mx1), 4)
        self.assertAlmostEqual(value(samples, latency + "_sum", **mx1), 3.0405)
        self.assertEqual(
            value(samples, "imapmig_server_append_in_flight_messages", **mx1), 7
        )
        self.assertEqual(value(samples, "imapmig_server_append_in_flight_bytes", **mx1), 7000)
        self.assertEqual(
            value(samples, "imapmig_server_throttle_waits_total", direction="upload", **mx1), 2
        )
        self.assertEqual(
            value(
                samples, "imapmig_server_throttle_wait_seconds_total", direction="upload", **mx1
            ),
            1.5,
        )
        self.assertEqual(value(samples, "imapmig_server_connections_granted", **mx1), 1)
        self.assertEqual(value(samples, "imapmig_server_connections_open", **mx1), 0)
        self.assertEqual(value(samples, "imapmig_server_connections_limit", **mx1), 3)
        self.successResultOf(job.grantFor("mx1", "alice", True)())
        samples, _ = scrape(self.collector)
        self.assertEqual(value(samples, "imapmig_server_connections_open", **mx1), 1)

    def test_perJobOff(self) -> None:
        """
        Without per-job series, only the servers' sums are given.
        """
        collector = MigrationCollector(self.progress, self.telemetry, self.servers, maxJobSeries=0)
        samples, _ = scrape(collector)
        self.assertEqual({name for name in names(samples) if name.startswith("imapmig_job_")}, set())
        self.assertEqual(
            value(samples, "imapmig_server_migrated_messages_total", server="mx1"), 25
        )

    def test_maxJobSeries(self) -> None:
        """
        C{maxJobSeries} bounds the jobs that have series of their own, at
        each scrape; L{None} bounds nothing.
        """
        collector = MigrationCollector(self.progress, self.telemetry, self.servers, 3)
        samples, _ = scrape(collector)
        carol = {"job": "carol", "server": "mx2", "state": "queued"}
        self.assertEqual(value(samples, "imapmig_job_state", **carol), 1)
        self.progress.addJob("dave")
        samples, _ = scrape(collector)
        self.assertFalse([n for n in names(samples) if n.startswith("imapmig_job_")])
        samples, _ = scrape(MigrationCollector(self.progress, self.telemetry, self.servers, None))
        dave = {"job": "dave", "server": "", "state": "queued"}
        self.assertEqual(value(samples, "imapmig_job_state", **dave), 1)

    def test_seriesPerJob(self) -> None:
        """
        A counted job has L{SERIES_PER_JOB} series (the number
        docs/dashboard-and-api.md gives), one not yet counted two fewer.
        """
        samples, _ = scrape(self.collector)

        def seriesOf(job: str) -> int:
            return sum(
                1
                for name, labels in samples
                if name.startswith("imapmig_job_") and ("job", job) in labels
            )

        self.assertEqual(seriesOf("alice"), SERIES_PER_JOB)
        self.assertEqual(seriesOf("carol"), SERIES_PER_JOB - 2)

    def test_unknownServer(self) -> None:
        """
        A job whose server is not known is labelled C{server=""}.
        """
        collector = MigrationCollector(self.progress, self.telemetry, {})
        samples, _ = scrape(collector)
        self.assertEqual(
            value(samples, "imapmig_job_migrated_messages_total", job="alice", server=""), 25
        )

    def test_oddJobNames(self) -> None:
        """
        A job name with quotes, backslashes, a newline or non-ASCII
        characters survives the text format.
        """
        name = 'odd "name" \\ with\nnewline, é'
        self.progress.addJob(name)
        samples, _ = scrape(self.collector)
        self.assertEqual(
            value(samples, "imapmig_job_state", job=name, server="", state="queued"), 1
        )


class JobReadingTests(SynchronousTestCase):
    """
    What the collector reads of one job.
    """

    def test_jobCounters(self) -> None:
        """
        Appended by this run: done, less those migrated earlier and those
        found present.
        """
        job = JobProgress("a", Clock().seconds)
        fill(job, 10, 8, 3, 1, 1, 400, JobState.RUNNING)
        job.reconnects = 2
        self.assertEqual(jobCounters(job), (4, 400, 1, 1, 2))

    def test_isCounted(self) -> None:
        """
        A job is counted once its source is (by the census or its own
        listing).
        """
        job = JobProgress("a", Clock().seconds)
        self.assertFalse(isCounted(job))
        job.census(3, None, 1, [])
        self.assertTrue(isCounted(job))


class MetricsResourceTests(SynchronousTestCase):
    """
    L{MetricsResource} serves the metrics to GET and HEAD.
    """

    def setUp(self) -> None:
        clock = Clock()
        self.progress = MigrationProgress(clock.seconds)
        fill(self.progress.addJob("alice"), 5, 2, 0, 0, 0, 20, JobState.RUNNING)
        self.telemetry = Telemetry(clock.seconds)
        self.treq: Any = StubTreq(
            buildMetricsResource(self.progress, self.telemetry, {"alice": "mx1"})
        )

    def request(self, method: str) -> tuple[Any, bytes]:
        response = self.successResultOf(self.treq.request(method, "http://127.0.0.1/metrics"))
        body: bytes = self.successResultOf(self.treq.content(response))
        return response, body

    def test_get(self) -> None:
        """
        GET gives the text format with its content type, the daemon's
        metrics and the process's.
        """
        response, body = self.request("GET")
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders(b"content-type"), [CONTENT_TYPE_LATEST.encode()]
        )
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-store"])
        families = {f.name for f in text_string_to_metric_families(body.decode("utf-8"))}
        self.assertIn("imapmig_job_migrated_messages", families)
        self.assertIn("imapmig_build_info", families)
        self.assertIn("python_gc_objects_collected", families)

    def test_head(self) -> None:
        """
        HEAD is answered as GET, without the body.
        """
        response, body = self.request("HEAD")
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders(b"content-type"), [CONTENT_TYPE_LATEST.encode()]
        )
        self.assertEqual(body, b"")

    def test_otherMethods(self) -> None:
        """
        Any other method: 405 with C{Allow: GET, HEAD}.
        """
        for method in ("POST", "PUT", "DELETE"):
            response, _ = self.request(method)
            self.assertEqual((method, response.code), (method, 405))
            self.assertEqual(response.headers.getRawHeaders(b"allow"), [b"GET, HEAD"])

    def test_ownRegistry(self) -> None:
        """
        The resource has a registry of its own: two of them do not clash,
        and nothing goes to prometheus_client's global registry.
        """
        from prometheus_client import REGISTRY

        before = set(REGISTRY._collector_to_names)
        second: Any = StubTreq(buildMetricsResource(self.progress, self.telemetry, {}))
        response = self.successResultOf(second.get("http://127.0.0.1/metrics"))
        self.assertEqual(response.code, 200)
        self.assertEqual(set(REGISTRY._collector_to_names), before)

    def test_perJobByDefaultUpToLimit(self) -> None:
        """
        By default every job has its own series while there are at most
        L{MAX_JOB_SERIES} jobs (at least 10,000); above, only the servers'
        sums.  The count is taken at each scrape: a reload adds jobs.
        """
        self.assertGreaterEqual(MAX_JOB_SERIES, 10_000)
        for n in range(MAX_JOB_SERIES - len(self.progress)):
            self.progress.addJob(f"job{n}")
        treq: Any = StubTreq(
            buildMetricsResource(self.progress, self.telemetry, {}, processMetrics=False)
        )

        def body() -> bytes:
            response = self.successResultOf(treq.get("http://127.0.0.1/metrics"))
            content: bytes = self.successResultOf(treq.content(response))
            return content

        self.assertEqual(body().count(b"imapmig_job_state{"), MAX_JOB_SERIES)
        self.progress.addJob("one too many")
        served = body()
        self.assertNotIn(b"imapmig_job_", served)
        self.assertIn(b"imapmig_server_jobs{", served)
