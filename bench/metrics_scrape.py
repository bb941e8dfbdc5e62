"""Time one /metrics scrape (collect + text format) for N jobs on 10 servers."""
import sys, time, timeit
from twisted.internet.task import Clock
from prometheus_client import generate_latest
from imapmig.progress import MigrationProgress, JobState
from imapmig.progress.telemetry import Telemetry
from imapmig.status.metrics import buildMetricsResource

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
perJob = sys.argv[2] != "0" if len(sys.argv) > 2 else True
clock = Clock(); clock.advance(1.7e9)
progress = MigrationProgress(clock.seconds)
servers = {}
for i in range(n):
    job = progress.addJob(f"user{i:05d}@example.com")
    job.messagesTotal = 12345 + i; job.foldersTotal = 7
    job.messagesDone = 6000 + i; job.messagesAlreadyMigrated = 1000
    job.messagesAlreadyPresent = 12; job.messagesFailed = 3; job.bytesDone = 123456789 + i
    job.startedAt = clock.seconds()
    job.showState(lambda: JobState.RUNNING)
    servers[job.name] = f"server{i % 10}"
telemetry = Telemetry(clock.seconds)
for s in set(servers.values()):
    h = telemetry.server(s).appendLatency
    for v in (0.002, 0.03, 0.4): h.observe(v)
resource = buildMetricsResource(progress, telemetry, servers, maxJobSeries=None if perJob else 0)
registry = resource._registry
body = generate_latest(registry)
t = timeit.Timer(lambda: generate_latest(registry), timer=time.process_time)
runs = 5
lines = body.count(b"\n")
best = min(t.repeat(repeat=runs, number=1))
print(f"{n} jobs, perJob={perJob}: best of {runs} scrapes (CPU time) {best*1000:.0f} ms, {len(body):,} octets, {lines:,} lines")
