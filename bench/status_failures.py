"""
Reactor (CPU) time of GET /jobs/alpha/failures.json and /jobs/alpha.json
on a job with 300,000 failed messages (3 folders of 100,000, beside
100,000 appended messages) in a SQLite state store, each request through
a real HTTP channel of the status site (buildStatusSite).

Run from a checkout's directory:
    python -m bench.status_failures [DBPATH]
The database is built once at DBPATH (default /tmp/harden18-failures.sqlite)
and reused.  Each figure is the best of 3 of process_time per request.
"""
import json, os, sys, time
from typing import Any
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from imapmig.progress import MigrationProgress
from imapmig.state import MessageOutcome
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.status.resource import StatusResource, buildStatusSite

path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/harden18-failures.sqlite"
fresh = not os.path.exists(path)
store = SQLiteStateStore(path, seconds=lambda: 1.0)
if fresh:
    store.recordOutcomes("alpha", [("INBOX", f"a{n:07d}", "INBOX", 2000, 1, n, 0) for n in range(100_000)])
    for folder in ("Archive", "INBOX", "Sent"):
        for start in range(0, 100_000, 10_000):
            store.recordOutcomes("alpha", [
                MessageOutcome(folder, f"f{n:07d}", folder, 12345,
                               failure=f'refused by server: NO [LIMIT] "too big", n={n}',
                               messageId=f"<{n}.{folder}@example.com>")
                for n in range(start, start + 10_000)])
clock = Clock()
clock.advance(1_700_000_000)
progress = MigrationProgress(clock.seconds)
progress.addJob("alpha")
site = buildStatusSite(StatusResource(progress, clock.seconds, store), clock)


def get(target: bytes) -> tuple[float, dict[str, Any]]:
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
    transport = StringTransport()
    channel.makeConnection(transport)
    start = time.process_time()
    channel.dataReceived(b"GET " + target + b" HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    cpu = time.process_time() - start
    raw = transport.value()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], raw[:300]
    channel.connectionLost(None)
    return cpu, json.loads(body)


def measure(label: str, target: bytes) -> dict[str, Any]:
    best = min(get(target)[0] for _ in range(3))
    _, document = get(target)
    page = document.get("failures", document)
    info = {k: page.get(k) for k in ("offset", "limit", "matched", "matched_exact", "scanned_all") if k in page}
    info["items"] = len(page["items"])
    if page.get("next"):
        info["next"] = "yes"
    print(f"{label:<44} {best * 1000:8.1f} ms  {info}")
    result: dict[str, Any] = page
    return result


try:
    from imapmig.status.query import encodeCursor
    deep = encodeCursor(("Sent", "f0095000")).encode()
    cursorCases = [
        ("after= deep in the last folder (Sent/f0095000)", b"/jobs/alpha/failures.json?limit=50&after=" + deep),
        ("q=zzz after= deep", b"/jobs/alpha/failures.json?limit=50&q=zzz&after=" + deep),
    ]
except ImportError:  # before: no cursor
    cursorCases = []

for label, target in cursorCases + [
    ("job detail /jobs/alpha.json", b"/jobs/alpha.json"),
    ("first page", b"/jobs/alpha/failures.json?limit=50"),
    ("middle page offset=150000", b"/jobs/alpha/failures.json?offset=150000&limit=50"),
    ("last page offset=299950", b"/jobs/alpha/failures.json?offset=299950&limit=50"),
    ("q=n=99999 (3 matches, one per folder)", b"/jobs/alpha/failures.json?limit=50&q=n%3D99999"),
    ("q=sent (100,000 matches)", b"/jobs/alpha/failures.json?limit=50&q=sent"),
    ("q=zzz (no match)", b"/jobs/alpha/failures.json?limit=50&q=zzz"),
]:
    try:
        measure(label, target)
    except AssertionError as e:
        print(f"{label:<44} refused: {str(e)[:120]}")
