"""
Tests for L{imapmig.progress.telemetry} and the hooks that feed it: the APPEND
pipeline's latency and window, the throttles' waits, the grants'
connection counts.
"""

from __future__ import annotations

import calendar

from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.outgoing import LiteralMode, PipelineSettings
from imapmig.imap.pipeline import AppendPipeline
from imapmig.schedule.grants import ConnectionGrants, JobConnections
from imapmig.throttle import DOWNLOAD, UPLOAD, ThrottleRegistry
from imapmig.state.memory import MemoryStateStore
from imapmig.progress.telemetry import (
    LATENCY_BUCKETS,
    LatencyHistogram,
    ServerConnections,
    ServerTelemetry,
    Telemetry,
)
from tests.test_imap_pipeline import CountingTransport, RecordingOutcomes, message

NOON = float(calendar.timegm((2030, 1, 1, 12, 0, 0)))


class LatencyHistogramTests(SynchronousTestCase):
    """
    L{LatencyHistogram}: buckets as Prometheus's C{le}, cumulative when
    read.
    """

    def test_buckets(self) -> None:
        """
        A duration goes to the first bucket whose bound is at or above it
        (bounds are inclusive); beyond the last bound it goes to the
        unbounded bucket; the sum adds every duration.
        """
        histogram = LatencyHistogram((0.01, 0.1, 1.0))
        for seconds in (0.005, 0.01, 0.05, 2.0):
            histogram.observe(seconds)
        self.assertEqual(histogram.counts, [2, 1, 0, 1])
        self.assertEqual(histogram.count, 4)
        self.assertAlmostEqual(histogram.sum, 2.065)
        self.assertEqual(
            histogram.cumulative(), [(0.01, 2), (0.1, 3), (1.0, 3), (float("inf"), 4)]
        )

    def test_defaultBuckets(self) -> None:
        """
        The default buckets span 1 ms to 60 s, ascending.
        """
        self.assertEqual(LATENCY_BUCKETS[0], 0.001)
        self.assertEqual(LATENCY_BUCKETS[-1], 60.0)
        self.assertEqual(list(LATENCY_BUCKETS), sorted(LATENCY_BUCKETS))
        self.assertEqual(len(LatencyHistogram().counts), len(LATENCY_BUCKETS) + 1)


def connect(
    mode: LiteralMode, telemetry: ServerTelemetry, batchMessages: int = 1
) -> tuple[CountingTransport, AppendPipeline, RecordingOutcomes, MigrationIMAP4Client]:
    """
    A pipeline over a StringTransport, reporting to C{telemetry}.
    """
    client = MigrationIMAP4Client(Clock())
    transport = CountingTransport()
    client.makeConnection(transport)
    client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
    outcomes = RecordingOutcomes()
    settings = PipelineSettings(mode, batchMessages, 1 << 20, 100, 1 << 20)
    pipeline = AppendPipeline(client, settings, outcomes, telemetry)
    pipeline.selectMailbox("INBOX")
    transport.clear()
    return transport, pipeline, outcomes, client


class PipelineTelemetryTests(SynchronousTestCase):
    """
    The APPEND pipeline measures each command's latency by the
    telemetry's clock and lends it its window.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.telemetry = Telemetry(self.clock.seconds).server("dest")

    def test_latencyPerCommand(self) -> None:
        """
        Each command's latency runs from its last octet written to its
        tagged reply: a MULTIAPPEND of three messages is observed once.
        """
        transport, pipeline, outcomes, client = connect(
            LiteralMode.PLUS, self.telemetry, batchMessages=3
        )
        pipeline.enqueue([message(str(n), b"hello\r\n") for n in range(4)])
        pipeline.flushed()
        self.assertEqual(transport.take().count(b" APPEND "), 2)
        self.clock.advance(0.003)
        client.dataReceived(b"0001 OK done\r\n")
        self.clock.advance(2.0)
        client.dataReceived(b"0002 OK done\r\n")
        histogram = self.telemetry.appendLatency
        self.assertEqual(histogram.count, 2)
        self.assertAlmostEqual(histogram.sum, 2.006)
        cumulative = dict(histogram.cumulative())
        self.assertEqual(cumulative[0.0025], 0)
        self.assertEqual(cumulative[0.005], 1)
        self.assertEqual(cumulative[1.0], 1)
        self.assertEqual(cumulative[2.5], 2)
        self.assertEqual(len(outcomes.appended), 4)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_latencyFromLastOctet(self) -> None:
        """
        With a synchronizing literal the command's last octet leaves after
        the server's continuation: the latency runs from then.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC, self.telemetry)
        pipeline.enqueue([message("a", b"hello\r\n")])
        self.clock.advance(5.0)
        client.dataReceived(b"+ go ahead\r\n")
        self.clock.advance(0.02)
        client.dataReceived(b"0001 OK done\r\n")
        histogram = self.telemetry.appendLatency
        self.assertEqual(histogram.count, 1)
        self.assertAlmostEqual(histogram.sum, 0.02)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_refusedBeforeSent(self) -> None:
        """
        A command refused before its literal was sent was never whole on
        the wire: no latency is observed for it.
        """
        transport, pipeline, outcomes, client = connect(LiteralMode.SYNC, self.telemetry)
        pipeline.enqueue([message("a", b"hello\r\n")])
        self.clock.advance(1.0)
        client.dataReceived(b"0001 NO [TOOBIG] too big\r\n")
        self.assertEqual(len(outcomes.refused), 1)
        self.assertEqual(self.telemetry.appendLatency.count, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_window(self) -> None:
        """
        The server's window sums the messages and octets in flight of its
        open pipelines; a closed pipeline, or one whose connection was
        lost, counts no more.
        """
        _, first, _, firstClient = connect(LiteralMode.PLUS, self.telemetry)
        _, second, _, secondClient = connect(LiteralMode.PLUS, self.telemetry)
        first.enqueue([message("a", b"12345"), message("b", b"123")])
        second.enqueue([message("c", b"1234567")])
        self.assertEqual(self.telemetry.inFlight(), (3, 15))
        firstClient.dataReceived(b"0001 OK done\r\n")
        self.assertEqual(self.telemetry.inFlight(), (2, 10))
        secondClient.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.telemetry.inFlight(), (1, 3))
        firstClient.dataReceived(b"0002 OK done\r\n")
        first.close()
        self.assertEqual(self.telemetry.inFlight(), (0, 0))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_withoutTelemetry(self) -> None:
        """
        Without telemetry the pipeline measures nothing and works as
        before.
        """
        client = MigrationIMAP4Client(Clock())
        transport = CountingTransport()
        client.makeConnection(transport)
        client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
        outcomes = RecordingOutcomes()
        settings = PipelineSettings(LiteralMode.PLUS, 1, 1 << 20, 100, 1 << 20)
        pipeline = AppendPipeline(client, settings, outcomes)
        pipeline.selectMailbox("INBOX")
        pipeline.enqueue([message("a", b"hello\r\n")])
        client.dataReceived(b"0001 OK done\r\n")
        self.assertEqual(len(outcomes.appended), 1)
        self.assertEqual(self.telemetry.appendLatency.count, 0)


class ThrottleTelemetryTests(SynchronousTestCase):
    """
    Throttles count their waits, and the seconds waited, per server and
    direction.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOON)
        self.telemetry = Telemetry(self.clock.seconds)
        self.registry = ThrottleRegistry(self.clock, MemoryStateStore(), self.telemetry)

    def test_waitsCounted(self) -> None:
        """
        A request admitted at once is no wait; one held by the rate is
        counted when it begins, and the seconds it waited when it is
        served.
        """
        throttle = self.registry.throttleFor(
            "dest", ServerLimits(messagesPerSecond=2), "alice", UPLOAD
        )
        assert throttle is not None
        self.successResultOf(throttle.admit(1, 100))
        self.successResultOf(throttle.admit(1, 100))
        waits = self.telemetry.server("dest").throttleWaits[UPLOAD]
        self.assertEqual((waits.count, waits.seconds), (0, 0.0))
        held = throttle.admit(1, 100)
        self.assertNoResult(held)
        self.assertEqual(waits.count, 1)
        self.clock.advance(0.5)
        self.successResultOf(held)
        self.assertEqual(waits.count, 1)
        self.assertAlmostEqual(waits.seconds, 0.5)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelledWaitCounted(self) -> None:
        """
        A wait cancelled (its job stops) counts the seconds it waited until
        then; waits are kept apart by direction.
        """
        throttle = self.registry.throttleFor(
            "src", ServerLimits(messagesPerSecond=1), "alice", DOWNLOAD
        )
        assert throttle is not None
        self.successResultOf(throttle.admit(1, 1))
        held = throttle.admit(1, 1)
        self.clock.advance(0.25)
        throttle.cancelWaits()
        self.failureResultOf(held)
        server = self.telemetry.server("src")
        self.assertEqual(list(server.throttleWaits), [DOWNLOAD])
        waits = server.throttleWaits[DOWNLOAD]
        self.assertEqual(waits.count, 1)
        self.assertAlmostEqual(waits.seconds, 0.25)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_withoutTelemetry(self) -> None:
        """
        A registry without telemetry throttles as before.
        """
        registry = ThrottleRegistry(self.clock, MemoryStateStore())
        throttle = registry.throttleFor("dest", ServerLimits(messagesPerSecond=1), "a", UPLOAD)
        assert throttle is not None
        self.successResultOf(throttle.admit(1, 1))
        held = throttle.admit(1, 1)
        self.clock.advance(1.0)
        self.successResultOf(held)
        self.assertEqual(list(self.telemetry), [])
        self.assertEqual(self.clock.getDelayedCalls(), [])


class ConnectionTelemetryTests(SynchronousTestCase):
    """
    The connections per server follow the grants: granted (including the
    essential connections a running job keeps reserved) and open (held by
    a session).
    """

    def test_followsGrants(self) -> None:
        """
        A job's reserved essential connections are granted but not open
        until a session takes them; an extra connection is both while
        held; released, everything goes back.
        """
        grants = ConnectionGrants(
            4,
            {
                "dest": ServerLimits(maxConnections=5, perAccount=AccountLimits()),
                "src": ServerLimits(),
            },
        )
        telemetry = Telemetry(Clock().seconds)
        telemetry.watchConnections(grants.connectionCounts)
        self.assertEqual(
            telemetry.connections(),
            {"dest": ServerConnections(0, 0, 5), "src": ServerConnections(0, 0, None)},
        )
        job = JobConnections(grants, [("dest", "alice"), ("src", "alice")])
        self.successResultOf(job.reserve())
        self.assertEqual(telemetry.connections()["dest"], ServerConnections(1, 0, 5))
        self.assertEqual(telemetry.connections()["src"], ServerConnections(1, 0, None))
        essential = self.successResultOf(job.grantFor("dest", "alice", True)())
        extra = self.successResultOf(job.grantFor("dest", "alice", True)())
        self.assertEqual(telemetry.connections()["dest"], ServerConnections(2, 2, 5))
        extra.release()
        essential.release()
        self.assertEqual(telemetry.connections()["dest"], ServerConnections(1, 0, 5))
        job.end()
        self.assertEqual(
            telemetry.connections(),
            {"dest": ServerConnections(0, 0, 5), "src": ServerConnections(0, 0, None)},
        )

    def test_endWhileLent(self) -> None:
        """
        A job that ends while a session holds its essential connection
        gives it back when that session releases it: nothing stays
        counted.
        """
        grants = ConnectionGrants(4, {"dest": ServerLimits()})
        job = JobConnections(grants, [("dest", "alice")])
        self.successResultOf(job.reserve())
        lent = self.successResultOf(job.grantFor("dest", "alice", True)())
        job.end()
        self.assertEqual(grants.connectionCounts()["dest"], ServerConnections(1, 1, None))
        lent.release()
        self.assertEqual(grants.connectionCounts()["dest"], ServerConnections(0, 0, None))

    def test_nothingWatched(self) -> None:
        """
        Without grants watched there are no connection counts.
        """
        self.assertEqual(Telemetry(Clock().seconds).connections(), {})
