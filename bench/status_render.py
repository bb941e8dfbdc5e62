"""
CPU time of one GET /status.json render with 10,000 jobs (default query),
run from a checkout's directory: python -m bench.status_render [QUERY]
"""
import sys, timeit, time, json
from twisted.internet.task import Clock
from twisted.web.test.requesthelper import DummyRequest
from twisted.web.resource import getChildForRequest
from imapmig.progress import MigrationProgress
from imapmig.status.resource import StatusResource

clock = Clock(); clock.advance(1_700_000_000)
progress = MigrationProgress(clock.seconds)
for n in range(10_000):
    job = progress.addJob(f"user{n:05d}@example.com")
    job.messagesTotal = 1000 + n
    job.messagesDone = n % 1000
    job.messagesFailed = n % 7
    job.bytesDone = 1000 * n
    if n % 3 == 0:
        job.started()
clock.advance(60)
from imapmig.state.memory import MemoryStateStore  # noqa: E402

root = StatusResource(progress, clock.seconds, MemoryStateStore())
query = sys.argv[1].encode() if len(sys.argv) > 1 else b""

def render() -> bytes:
    request = DummyRequest([b"status.json"])
    request.uri = b"/status.json" + (b"?" + query if query else b"")
    if query:
        for part in query.split(b"&"):
            k, _, v = part.partition(b"=")
            request.args.setdefault(k, []).append(v)
    resource = getChildForRequest(root, request)
    body = resource.render(request)
    return body if isinstance(body, bytes) else b"".join(request.written)

body = render()
assert json.loads(body)
timer = timeit.Timer(render, timer=time.process_time)
best = min(timer.repeat(repeat=5, number=3)) / 3
print(f"{len(body)} octets; best of 5x3: {best * 1000:.1f} ms CPU per render")
