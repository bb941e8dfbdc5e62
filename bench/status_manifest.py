"""
CPU time and peak Python memory of one GET /jobs/alpha/manifest.csv of
100,000 failed messages (beside 200,000 appended) from a SQLite store,
over a real HTTP channel whose transport counts and drops what it gets.
Run from a checkout's directory with PYTHONPATH=.
"""
import os, sys, tempfile, time, tracemalloc
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.server import Site
from imapmig.progress import MigrationProgress
from imapmig.state import MessageOutcome
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.status.resource import StatusResource

kind = sys.argv[1] if len(sys.argv) > 1 else "csv"
traced = "--trace" in sys.argv
path = os.path.join(tempfile.mkdtemp(), "state.sqlite")
store = SQLiteStateStore(path, seconds=lambda: 1.0)
store.recordOutcomes("alpha", [("INBOX", f"a{n:07d}", "INBOX", 2000, 1, n, 0) for n in range(200_000)])
store.recordOutcomes("alpha", [
    MessageOutcome("INBOX", f"f{n:07d}", "INBOX", 12345, failure=f'refused by server: NO [LIMIT] "too big", n={n}',
                   messageId=f"<{n}@example.com>") for n in range(100_000)])
clock = Clock()
progress = MigrationProgress(clock.seconds)
progress.addJob("alpha")
site = Site(StatusResource(progress, clock.seconds, store), reactor=clock)

class Counting(StringTransport):
    octets = 0
    writes = 0
    def write(self, data: bytes) -> None:
        self.octets += len(data); self.writes += 1
    def writeSequence(self, data: list[bytes]) -> None:
        self.octets += sum(map(len, data)); self.writes += 1

channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
transport = Counting()  # type: ignore[no-untyped-call]
channel.makeConnection(transport)
if traced:
    tracemalloc.start()
start = time.process_time()
channel.dataReceived(b"GET /jobs/alpha/manifest.%s HTTP/1.1\r\nHost: a\r\n\r\n" % kind.encode())
cpu = time.process_time() - start
if traced:
    _, peak = tracemalloc.get_traced_memory()
    print(f"manifest.{kind}: {transport.octets:,} octets in {transport.writes} writes;"
          f" peak traced Python memory {peak / 2**20:.1f} MiB (CPU time not meaningful under tracemalloc)")
else:
    print(f"manifest.{kind}: {transport.octets:,} octets in {transport.writes} writes; {cpu:.2f} s CPU")
store.close()
