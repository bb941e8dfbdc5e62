# -*- test-case-name: tests.test_metrics, tests.test_status_fleet -*-
"""
C{/metrics}: the progress model and the telemetry in Prometheus's text
format, read when scraped (L{MigrationCollector}); nothing is updated on
the hot path for it.

Counters here count since the daemon started: a job's counters in the
progress model start again at each of its runs, and the collector carries
what a job's earlier runs counted (as last scraped) into its later ones,
so that C{rate()} and C{increase()} over a job, or a server's sum, never
see a run's start as a counter reset.

The fleet's daemons (L{FleetCollector}) are read from an
L{IFleetView<imapmig.queue.fleetview.IFleetView>} before each scrape is
formatted, as a Deferred: a fleet's database is never waited on in the
reactor's thread.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

import imapmig
from imapmig.progress import JobProgress, JobState, MigrationProgress
from imapmig.progress.telemetry import Telemetry
from imapmig.queue.fleetview import Fleet, IFleetView
from imapmig.status._http import bodyFor, refuseMethodAsText
from imapmig.status.fleet import FleetParts, readFleet

__all__ = [
    "FleetCollector",
    "MAX_JOB_SERIES",
    "SERIES_PER_JOB",
    "MetricsResource",
    "MigrationCollector",
    "buildMetricsResource",
    "isCounted",
    "jobCounters",
]

UNKNOWN_SERVER = ""
"""The C{server} label of a job whose destination server is not known."""

# The counters carried over a job's runs, in the order jobCounters gives
# them: (metric name without imapmig_job_/imapmig_server_ and _total, help).
_COUNTERS = (
    ("migrated_messages", "Messages appended to the destination"),
    ("migrated_bytes", "Octets of the messages appended to the destination"),
    ("failed_messages", "Messages that could not be migrated, each recorded with its reason"),
    (
        "already_present_messages",
        "Messages found already in the destination (copied by another tool or by hand)"
        " and not appended",
    ),
    ("reconnects", "Connections made again after a transient failure"),
)


def jobCounters(job: JobProgress) -> tuple[int, int, int, int, int]:
    """
    A job's counters of its current run, in the order of L{_COUNTERS}
    (L{JobProgress.runCounters}).
    """
    return job.runCounters()


def isCounted(job: JobProgress) -> bool:
    """
    Whether C{job}'s source has been counted (by the census or its own
    listing), so that its C{messagesTotal} is true.
    """
    return job.counted


# Where the sums of a server hold what follows the _COUNTERS.
_ALREADY, _SOURCE, _PENDING, _UNCOUNTED = (len(_COUNTERS) + n for n in range(4))


class MigrationCollector(Collector):
    """
    Collects the metrics of every job (by C{job} and destination
    C{server}), of every server, and of the build, from the progress model
    and the telemetry at scrape time.
    """

    def __init__(
        self,
        progress: MigrationProgress,
        telemetry: Telemetry,
        jobServers: Mapping[str, str],
        maxJobSeries: int | None = None,
    ) -> None:
        """
        @param jobServers: each job's destination server name (as under
            C{servers}), by job name; a job not in it is labelled
            C{server=""}.
        @param maxJobSeries: the most jobs for which a scrape gives the
            C{imapmig_job_*} series (L{SERIES_PER_JOB} per job); with more
            jobs at scrape time, only the C{imapmig_server_*} sums, which
            are given either way.  L{None}: no bound.
        """
        self._progress = progress
        self._telemetry = telemetry
        self._jobServers = jobServers
        self._maxJobSeries = maxJobSeries

    def collect(self) -> Iterable[Metric]:
        """
        Every metric, read now.
        """
        bound = self._maxJobSeries
        # Decided at each scrape: a reload may add or remove jobs.
        perJob = bound is None or len(self._progress) <= bound
        series = _JobSeries()
        servers, stateCounts = self._readJobs(series, perJob)
        if perJob:
            yield from series.families()
        yield from self._serverFamilies(servers, stateCounts)
        yield from self._telemetryFamilies()
        build = GaugeMetricFamily(
            "imapmig_build_info", "The running imapmig's version: always 1", labels=["version"]
        )
        build.add_metric([imapmig.__version__], 1)
        yield build

    def _readJobs(
        self, series: _JobSeries, perJob: bool
    ) -> tuple[dict[str, list[int]], dict[str, dict[str, int]]]:
        """
        Read every job once: add its series to C{series} if C{perJob} (not
        too many jobs for them), and sum its counters and count its state
        by destination server.

        @return: the sums of each server (the L{_COUNTERS}, then
            L{_ALREADY}, L{_SOURCE}, L{_PENDING}, L{_UNCOUNTED}), and its
            jobs in each state.
        """
        # Samples are appended directly, one labels dict shared by a job's
        # series: add_metric makes a dict per sample, the larger part of a
        # scrape's cost with thousands of jobs.
        counterSamples = [(family.samples, family.name + "_total") for family in series.counters]
        alreadySamples, alreadyName = series.already.samples, series.already.name
        sourceSamples, sourceName = series.source.samples, series.source.name
        pendingSamples, pendingName = series.pending.samples, series.pending.name
        stateSamples, stateName = series.state.samples, series.state.name
        states = [state.value for state in JobState]
        servers: dict[str, list[int]] = {}
        stateCounts: dict[str, dict[str, int]] = {}
        jobServers = self._jobServers
        for job in self._progress:
            name = job.name
            server = jobServers.get(name, UNKNOWN_SERVER)
            counters = job.lifetimeCounters()
            counted = isCounted(job)
            state = job.state.value
            already = job.messagesAlreadyMigrated
            sums = servers.get(server)
            if sums is None:
                sums = servers[server] = [0] * (_UNCOUNTED + 1)
                stateCounts[server] = dict.fromkeys(states, 0)
            for index, value in enumerate(counters):
                sums[index] += value
            sums[_ALREADY] += already
            if counted:
                pending = job.messagesPending
                sums[_SOURCE] += job.messagesTotal
                sums[_PENDING] += pending
            else:
                sums[_UNCOUNTED] += 1
            stateCounts[server][state] += 1
            if perJob:
                labels = {"job": name, "server": server}
                for (samples, sampleName), value in zip(counterSamples, counters):
                    samples.append(Sample(sampleName, labels, value))
                alreadySamples.append(Sample(alreadyName, labels, already))
                if counted:
                    sourceSamples.append(Sample(sourceName, labels, job.messagesTotal))
                    pendingSamples.append(Sample(pendingName, labels, pending))
                stateSamples.append(
                    Sample(stateName, {"job": name, "server": server, "state": state}, 1)
                )
        return servers, stateCounts

    def _serverFamilies(
        self, servers: dict[str, list[int]], stateCounts: dict[str, dict[str, int]]
    ) -> Iterable[Metric]:
        """
        The sums over the jobs of each destination server.
        """
        labels = ["server"]
        families = [
            CounterMetricFamily(
                f"imapmig_server_{name}",
                f"{text}, summed over the jobs to this destination server, since the daemon"
                " started",
                labels=labels,
            )
            for name, text in _COUNTERS
        ]
        alreadyMigrated = GaugeMetricFamily(
            "imapmig_server_already_migrated_messages",
            "Messages earlier runs appended, summed over the jobs to this destination server",
            labels=labels,
        )
        sourceMessages = GaugeMetricFamily(
            "imapmig_server_source_messages",
            "Messages in the sources of the jobs to this destination server that are counted",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "imapmig_server_pending_messages",
            "Messages of the counted jobs to this destination server neither in the destination"
            " nor failed",
            labels=labels,
        )
        uncounted = GaugeMetricFamily(
            "imapmig_server_uncounted_jobs",
            "Jobs to this destination server whose source is not counted yet"
            " (imapmig_server_source_messages leaves them out)",
            labels=labels,
        )
        jobs = GaugeMetricFamily(
            "imapmig_server_jobs",
            "Jobs to this destination server in each state",
            labels=["server", "state"],
        )
        for server, sums in servers.items():
            for family, value in zip(families, sums):
                family.add_metric([server], value)
            alreadyMigrated.add_metric([server], sums[_ALREADY])
            sourceMessages.add_metric([server], sums[_SOURCE])
            pending.add_metric([server], sums[_PENDING])
            uncounted.add_metric([server], sums[_UNCOUNTED])
            for state, count in stateCounts[server].items():
                jobs.add_metric([server, state], count)
        yield from families
        yield alreadyMigrated
        yield sourceMessages
        yield pending
        yield uncounted
        yield jobs

    def _telemetryFamilies(self) -> Iterable[Metric]:
        """
        Connections, APPEND windows, latencies and throttle waits, per
        server.
        """
        telemetry = self._telemetry
        granted = GaugeMetricFamily(
            "imapmig_server_connections_granted",
            "Connections to the server granted under its limits: open, opening, and those"
            " running jobs keep reserved between two sessions",
            labels=["server"],
        )
        opened = GaugeMetricFamily(
            "imapmig_server_connections_open",
            "Connections to the server a session holds (open or opening)",
            labels=["server"],
        )
        limit = GaugeMetricFamily(
            "imapmig_server_connections_limit",
            "The server's max_connections (only for servers that set one)",
            labels=["server"],
        )
        for name, counts in telemetry.connections().items():
            granted.add_metric([name], counts.granted)
            opened.add_metric([name], counts.open)
            if counts.limit is not None:
                limit.add_metric([name], counts.limit)
        yield granted
        yield opened
        yield limit
        yield from self._appendFamilies()

    def _appendFamilies(self) -> Iterable[Metric]:
        """
        APPEND windows, latencies and throttle waits, per server.
        """
        windowMessages = GaugeMetricFamily(
            "imapmig_server_append_in_flight_messages",
            "Messages sent to the server in APPEND commands and awaiting their reply",
            labels=["server"],
        )
        windowBytes = GaugeMetricFamily(
            "imapmig_server_append_in_flight_bytes",
            "Octets of the messages sent to the server and awaiting their reply",
            labels=["server"],
        )
        latency = HistogramMetricFamily(
            "imapmig_server_append_latency_seconds",
            "Seconds from an APPEND (or MULTIAPPEND) command's last octet written to its"
            " tagged reply",
            labels=["server"],
        )
        waits = CounterMetricFamily(
            "imapmig_server_throttle_waits",
            "Requests that waited for the server's or account's configured rates",
            labels=["server", "direction"],
        )
        waited = CounterMetricFamily(
            "imapmig_server_throttle_wait_seconds",
            "Seconds requests waited for the configured rates (counted when a wait ends)",
            labels=["server", "direction"],
        )
        for server in self._telemetry:
            messages, octets = server.inFlight()
            windowMessages.add_metric([server.name], messages)
            windowBytes.add_metric([server.name], octets)
            histogram = server.appendLatency
            latency.add_metric(
                [server.name],
                [(_bound(bound), count) for bound, count in histogram.cumulative()],
                histogram.sum,
            )
            for direction, counted in sorted(server.throttleWaits.items()):
                waits.add_metric([server.name, direction], counted.count)
                waited.add_metric([server.name, direction], counted.seconds)
        yield windowMessages
        yield windowBytes
        yield latency
        yield waits
        yield waited


class _JobSeries:
    """
    The C{imapmig_job_*} families of one scrape, each job's series
    appended by L{MigrationCollector._readJobs}.
    """

    def __init__(self) -> None:
        jobLabels = ["job", "server"]
        self.counters = [
            CounterMetricFamily(
                f"imapmig_job_{name}", f"{text}, per job, since the daemon started", labels=jobLabels
            )
            for name, text in _COUNTERS
        ]
        self.already = GaugeMetricFamily(
            "imapmig_job_already_migrated_messages",
            "Messages an earlier run appended, as the job's last listing found them recorded",
            labels=jobLabels,
        )
        self.source = GaugeMetricFamily(
            "imapmig_job_source_messages",
            "Messages in the job's source, all folders; only once the source is counted",
            labels=jobLabels,
        )
        self.pending = GaugeMetricFamily(
            "imapmig_job_pending_messages",
            "Messages of the job's source neither in the destination nor failed; only once the"
            " source is counted",
            labels=jobLabels,
        )
        self.state = GaugeMetricFamily(
            "imapmig_job_state",
            "The job's state: 1 for the state it is in (one series per job)",
            labels=["job", "server", "state"],
        )

    def families(self) -> Iterable[Metric]:
        """
        Every family, in the order they are written.
        """
        yield from self.counters
        yield self.already
        yield self.source
        yield self.pending
        yield self.state


def _bound(bound: float) -> str:
    """
    A bucket's C{le} label as Prometheus writes it (C{+Inf}, C{0.005}).
    """
    return "+Inf" if bound == float("inf") else repr(bound)


class FleetCollector(Collector):
    """
    The fleet's daemons, labelled C{daemon} (its id) and C{host}, as read
    for the scrape being formatted (L{MetricsResource} sets L{fleet}
    around it); nothing when they could not be read.

    @ivar fleet: the daemons, while a scrape is formatted.
    """

    def __init__(self) -> None:
        self.fleet: Fleet | None = None

    def collect(self) -> Iterable[Metric]:
        """
        The fleet's series, from L{fleet}.
        """
        fleet = self.fleet
        if fleet is None:
            return
        live = GaugeMetricFamily(
            "imapmig_fleet_daemons_live", "Daemons of the fleet whose lease is live"
        )
        live.add_metric([], fleet.live)
        labels = ["daemon", "host"]
        this = GaugeMetricFamily(
            "imapmig_daemon_info",
            "This daemon (the one scraped): always 1",
            labels=["daemon", "host", "version"],
        )
        info = GaugeMetricFamily(
            "imapmig_fleet_daemon_info",
            "A daemon of the fleet, live or whose lease ended recently: always 1",
            labels=["daemon", "host", "version"],
        )
        up = GaugeMetricFamily(
            "imapmig_fleet_daemon_live", "1 while the daemon's lease is live, else 0", labels=labels
        )
        jobs = GaugeMetricFamily(
            "imapmig_fleet_daemon_jobs", "Jobs the daemon holds", labels=labels
        )
        age = GaugeMetricFamily(
            "imapmig_fleet_daemon_heartbeat_age_seconds",
            "Seconds since the daemon's last heartbeat, by the database's clock",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "imapmig_fleet_daemon_messages_per_second",
            "Messages per second the daemon reported (where it reports one)",
            labels=labels,
        )
        for daemon in fleet.daemons:
            key = [daemon.daemonId, daemon.host]
            info.add_metric(key + [daemon.version], 1)
            if daemon.this:
                this.add_metric(key + [daemon.version], 1)
            up.add_metric(key, 1 if daemon.live else 0)
            jobs.add_metric(key, daemon.jobs)
            age.add_metric(key, daemon.heartbeatAge)
            if daemon.rate is not None:
                rate.add_metric(key, daemon.rate)
        yield from (live, this, info, up, jobs, age, rate)


class MetricsResource(Resource):
    """
    Serves a registry's metrics in Prometheus's text format (GET and
    HEAD; any other method: 405 with C{Allow}).
    """

    isLeaf = True
    allowedMethods = (b"GET", b"HEAD")

    def __init__(
        self,
        registry: CollectorRegistry,
        fleet: IFleetView | None = None,
        fleetCollector: FleetCollector | None = None,
    ) -> None:
        """
        @param registry: what to serve.
        @param fleet: the fleet, read before each scrape is formatted
            into C{fleetCollector} (registered in C{registry}); L{None}:
            none.
        """
        Resource.__init__(self)
        self._registry = registry
        self._fleet = fleet
        self._fleetCollector = fleetCollector

    def render(self, request: Request) -> bytes | int:
        """
        The metrics, collected now (the fleet's once read); for HEAD, only
        the headers GET would have.
        """
        refused = refuseMethodAsText(
            request, self.allowedMethods, b"Method not allowed: /metrics answers GET and HEAD.\n"
        )
        if refused is not None:
            return refused
        headers = request.responseHeaders
        headers.setRawHeaders(b"Content-Type", [CONTENT_TYPE_LATEST.encode("ascii")])
        headers.setRawHeaders(b"Cache-Control", [b"no-store"])
        collector = self._fleetCollector
        if self._fleet is None or collector is None:
            return bodyFor(request, generate_latest(self._registry))
        finished: list[object] = []
        request.notifyFinish().addBoth(finished.append)

        def answer(parts: FleetParts) -> None:
            if finished:
                return
            # Set and cleared in one call of the reactor's thread: another
            # scrape cannot see it.
            collector.fleet = parts.fleet
            try:
                body = generate_latest(self._registry)
            finally:
                collector.fleet = None
            request.write(bodyFor(request, body))
            request.finish()

        readFleet(self._fleet, ()).addCallback(answer)
        return NOT_DONE_YET


MAX_JOB_SERIES = 10_000
"""
The default of C{status.max_job_series}: the most jobs for which every
job has its own series.  A scrape costs 0.04 to 0.09 ms of CPU per job
with them (each job's L{SERIES_PER_JOB} series formatted by
prometheus_client): 0.4 to 0.9 s and 6 to 8 MB for 10,000 jobs, during
which the reactor serves nothing (C{bench/metrics_scrape.py}).  Without
them, 10,000 jobs cost 39 ms.
"""

SERIES_PER_JOB = 9
"""
The C{imapmig_job_*} series of one job once its source is counted: its
5 counters, C{already_migrated_messages}, C{source_messages},
C{pending_messages} and C{state} (7 before it is counted).
"""


def buildMetricsResource(
    progress: MigrationProgress,
    telemetry: Telemetry,
    jobServers: Mapping[str, str],
    maxJobSeries: int | None = MAX_JOB_SERIES,
    processMetrics: bool = True,
    fleet: IFleetView | None = None,
) -> MetricsResource:
    """
    The C{/metrics} resource over its own registry (never the global
    one): the daemon's L{MigrationCollector} and, with C{processMetrics},
    prometheus_client's process (CPU, memory, file descriptors) and
    garbage-collector metrics.

    @param jobServers: each job's destination server name, by job name.
    @param maxJobSeries: the most jobs for which every job has its own
        series (C{status.max_job_series}; see L{MigrationCollector}).
    @param fleet: the fleet's daemons (L{FleetCollector}); L{None}: no
        fleet series.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MigrationCollector(progress, telemetry, jobServers, maxJobSeries))
    collector = None
    if fleet is not None:
        collector = FleetCollector()
        registry.register(collector)
    if processMetrics:
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
    return MetricsResource(registry, fleet, collector)
