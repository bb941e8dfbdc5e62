"""
Telemetry through a whole job: the real L{MigrationJob}, session, client
and APPEND pipeline against the fake server (L{tests.test_job.JobHarness}),
and what C{/metrics} then says.
"""

from __future__ import annotations

import json

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings, MigrationJob
from imapmig.log.jsonlog import eventAsJSONLine
from imapmig.log.logfields import AccountName
from imapmig.progress import MigrationProgress
from imapmig.status.metrics import MigrationCollector
from imapmig.progress.telemetry import Telemetry
from tests.test_job import JOB, JobHarness, appendLines, memoryOpener, populate


class JobTelemetryTests(SynchronousTestCase):
    """
    A job given its destination server's telemetry reports every APPEND
    command's latency and its window, and the metrics agree with the
    progress model.
    """

    def test_job(self) -> None:
        """
        Every APPEND command of the run is observed once, by the job's
        clock; nothing is left in flight once the job is done; and the
        scraped counters are the progress model's.
        """
        h = JobHarness(self)
        progress = MigrationProgress(h.clock.seconds)
        h.progress = progress.addJob(JOB)
        populate(h.source, h.source.addFolder("INBOX"), 25)
        telemetry = Telemetry(h.clock.seconds)
        server = telemetry.server("dest")
        job = MigrationJob(
            JOB,
            h.source,
            h.store,
            h.progress,
            memoryOpener(h.endpoint, h.clock),
            h.clock,
            JobSettings(connections=1, batchMessages=4, windowMessages=8),
            jitter=lambda: 0.0,
            telemetry=server,
        )
        self.assertTrue(h.run(job))
        commands = len(appendLines(h.endpoint.servers[0]))
        self.assertEqual(commands, 7)
        self.assertEqual(server.appendLatency.count, commands)
        self.assertEqual(server.inFlight(), (0, 0))

        registry = CollectorRegistry(auto_describe=False)
        registry.register(MigrationCollector(progress, telemetry, {JOB: "dest"}))
        text = generate_latest(registry).decode("utf-8")
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        labels = (("job", JOB), ("server", "dest"))
        self.assertEqual(samples["imapmig_job_migrated_messages_total", labels], 25)
        self.assertEqual(
            samples["imapmig_job_migrated_bytes_total", labels], h.progress.bytesSent
        )
        self.assertEqual(samples["imapmig_job_source_messages", labels], 25)
        self.assertEqual(
            samples["imapmig_job_state", (*labels, ("state", "done"))], 1
        )
        self.assertEqual(
            samples["imapmig_server_append_latency_seconds_count", (("server", "dest"),)],
            commands,
        )
        h.finish()

    def test_logJoinsMetrics(self) -> None:
        """
        Every JSON log line of the job that names a server names it by the
        C{server} label of the job's C{/metrics} series, with the account's
        C{user}; the job's start, listing and end lines among them.
        """
        h = JobHarness(self)
        progress = MigrationProgress(h.clock.seconds)
        h.progress = progress.addJob(JOB)
        populate(h.source, h.source.addFolder("INBOX"), 5)
        job = MigrationJob(
            JOB,
            h.source,
            h.store,
            h.progress,
            memoryOpener(h.endpoint, h.clock),
            h.clock,
            JobSettings(connections=1, batchMessages=4, windowMessages=8),
            jitter=lambda: 0.0,
            destination=AccountName("dest", "alice", "tcp:mail.example:143"),
        )
        with capturedLogs() as events:
            self.assertTrue(h.run(job))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(MigrationCollector(progress, Telemetry(h.clock.seconds), {JOB: "dest"}))
        labels = {
            sample.labels["server"]
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples
            if sample.labels.get("job") == JOB
        }
        self.assertEqual(labels, {"dest"})
        records = [json.loads(eventAsJSONLine(event)) for event in events]
        named = [r for r in records if "server" in r]
        self.assertGreaterEqual(len(named), 2, records)
        for record in named:
            self.assertEqual((record["server"], record["user"]), ("dest", "alice"), record)
        ended = [r for r in named if r["message"].startswith(f"Job {JOB} done after")]
        self.assertEqual([r["copied"] for r in ended], [5])
        h.finish()
