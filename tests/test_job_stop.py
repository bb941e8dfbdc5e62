"""
Tests for stopping a L{imapmig.job.MigrationJob}'s run by cancelling its
Deferred (L{imapmig.job.attempt.stoppable}): while a destination
connection is still opening (connected to a server that never greets, or
waiting for its grant: a stopping job sends nothing more, so such a
connection is given up at once, and the run ends, whatever the server's
C{timeout}, none at all included), and while replies are in flight (they
are awaited and recorded: the cancellation reaches none of the run's own
waits).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from imapmig.imap.opening import openSession
from imapmig.imap.session import IMAPSession
from imapmig.job import JobSettings, MigrationJob
from imapmig.job.attempt import stoppable
from imapmig.progress import JobState, MigrationProgress
from imapmig.sources.imap import IMAPSource
from imapmig.state.memory import MemoryStateStore
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore

from tests.test_job import (
    hasResult,
    JOB,
    PASSWORD,
    USER,
    JobHarness,
    MemoryEndpoint,
    MemorySource,
    connectPumped,
    populate,
)


class SilentServer(Protocol):
    """
    Says its greeting, if any, on connecting, and then nothing ever.
    """

    def __init__(self, greeting: bytes) -> None:
        self.greeting = greeting

    def connectionMade(self) -> None:
        if self.greeting:
            assert self.transport is not None
            self.transport.write(self.greeting)


@implementer(IStreamClientEndpoint)
class SilentEndpoint:
    """
    Connects each client to a server that accepts and never says a word
    (no greeting, no reply, no TLS handshake), or only its greeting, over
    an iosim pump.

    @ivar servers: the silent server of each connection, in order.
    """

    def __init__(self, clock: Clock, greeting: bytes = b"") -> None:
        """
        @param greeting: what the server says on connecting, before it
            falls silent (nothing by default).
        """
        self._clock = clock
        self._greeting = greeting
        self.servers: list[SilentServer] = []
        self.pumps: list[iosim.IOPump] = []

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        "See L{IStreamClientEndpoint.connect}."
        server = SilentServer(self._greeting)
        client, pump = connectPumped(server, protocolFactory, self._clock)
        self.pumps.append(pump)
        self.servers.append(server)
        return succeed(client)

    def pump(self) -> None:
        """
        Move what is to be moved on every connection (a close, an abort).
        """
        for pump in self.pumps:
            pump.flush(advanceClock=False)


def silentOpener(
    endpoint: IStreamClientEndpoint, clock: Clock, timeout: float, starttls: bool = False
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a session through C{endpoint} as L{USER}, with the server's
    C{timeout}, and STARTTLS if C{starttls}.
    """

    def open() -> Awaitable[IMAPSession]:
        return openSession(
            endpoint,
            clock,
            description=f"{USER} at silent",
            user=USER,
            password=PASSWORD,
            starttls=starttls,
            tlsOptions=None,
            timeout=timeout,
        )

    return open


class StopWhileOpeningTests(SynchronousTestCase):
    """
    A job stopped while a destination connection is still opening.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.store = MemoryStateStore()
        self.progress = MigrationProgress(self.clock.seconds).addJob(JOB)
        self.source = MemorySource()
        populate(self.source, self.source.addFolder("INBOX"), 3)

    def job(
        self, openSession: Callable[[], Awaitable[IMAPSession]], connections: int = 1
    ) -> MigrationJob:
        """
        A job copying the source through C{openSession}, stopped within 5 s.
        """
        return MigrationJob(
            JOB,
            self.source,
            self.store,
            self.progress,
            openSession,
            self.clock,
            JobSettings(connections=connections, stopTimeout=5.0),
        )

    def assertStoppedAtOnce(
        self, timeout: float, greeting: bytes = b"", starttls: bool = False
    ) -> None:
        """
        Start a job whose first connection meets a server that never
        greets (or says only C{greeting}; the server's timeout
        C{timeout}), stop it while it waits, and check that the run ends
        stopped without the clock moving, its connection closed and
        nothing left on the clock.
        """
        endpoint = SilentEndpoint(self.clock, greeting)
        job = self.job(silentOpener(endpoint, self.clock, timeout, starttls))
        d = job.run()
        self.clock.advance(0)
        endpoint.pump()
        self.assertNoResult(d)
        self.assertEqual(self.progress.state, JobState.CONNECTING)
        self.assertEqual(len(endpoint.servers), 1)

        d.cancel()
        endpoint.pump()

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(self.progress.state, JobState.STOPPED)
        transport = endpoint.servers[0].transport
        assert transport is not None
        self.assertTrue(transport.disconnected)  # type: ignore[attr-defined]
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopWhileListing(self) -> None:
        """
        A job stopped between two folders of its listing reports no
        listing (no "N messages in F folders" line for the part listed)
        and leaves its totals as they were: a listing cut short is not
        the source's content.
        """
        populate(self.source, self.source.addFolder("Archive"), 2)
        endpoint = SilentEndpoint(self.clock)
        job = self.job(silentOpener(endpoint, self.clock, 120.0))
        with capturedLogs() as events:
            d = job.run()
            d.cancel()
            self.clock.advance(0)
            endpoint.pump()
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(self.progress.state, JobState.STOPPED)
        self.assertEqual([e for e in events if "pending" in e], [])
        self.assertFalse(self.progress.countedByListing)
        self.assertEqual(self.progress.messagesTotal, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopWhileAwaitingTheGreeting(self) -> None:
        """
        A job stopped while its first connection waits for the server's
        greeting gives the connection up at once and ends stopped, long
        before the server's timeout.
        """
        self.assertStoppedAtOnce(timeout=120.0)

    def test_stopWhileAwaitingTheGreetingWithoutTimeout(self) -> None:
        """
        Without a server timeout (C{timeout: 0}), a job stopped while its
        first connection waits for the greeting still ends at once.
        """
        self.assertStoppedAtOnce(timeout=0)

    def test_stopWhileAwaitingSTARTTLS(self) -> None:
        """
        A job stopped while its first connection waits for the server's
        answer to STARTTLS (greeted, then silence) gives the connection up
        at once and ends stopped.
        """
        self.assertStoppedAtOnce(
            timeout=120.0,
            greeting=b"* OK [CAPABILITY IMAP4rev1 STARTTLS] silent after this\r\n",
            starttls=True,
        )

    def test_stopWhileAwaitingTheGrant(self) -> None:
        """
        A job stopped while its first connection waits for its grant gives
        the wait up (cancelled) and ends stopped.
        """
        grant: Deferred[IMAPSession] = Deferred()
        cancelled: list[bool] = []

        def seen(failure: Failure) -> Failure:
            cancelled.append(failure.check(CancelledError) is not None)
            return failure

        grant.addErrback(seen)
        job = self.job(lambda: grant)
        d = job.run()
        self.clock.advance(0)
        self.assertNoResult(d)

        d.cancel()

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(cancelled, [True])
        self.assertEqual(self.progress.state, JobState.STOPPED)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stopWhileAnExtraConnectionAwaitsTheGreeting(self) -> None:
        """
        A job stopped while its first connection copies and its second
        waits for a greeting that never comes gives the second up and
        ends once the first has logged out.
        """
        mail = FakeMailStore({USER: PASSWORD})
        working = MemoryEndpoint(
            self.clock, lambda attempt: FakeIMAPServer(mail, DEFAULT_CAPABILITIES)
        )
        silent = SilentEndpoint(self.clock)
        openers = [silentOpener(working, self.clock, 120.0), silentOpener(silent, self.clock, 120.0)]
        populate(self.source, self.source.addFolder("Archive"), 200, start=10)
        job = MigrationJob(
            JOB,
            self.source,
            self.store,
            self.progress,
            lambda: openers.pop(0)() if len(openers) > 1 else openers[0](),
            self.clock,
            JobSettings(connections=2, batchMessages=1, stopTimeout=5.0),
        )
        d = job.run()
        self.clock.advance(0)
        working.pump(lambda: len(silent.servers) == 1)
        self.assertEqual(len(silent.servers), 1)
        self.assertNoResult(d)

        d.cancel()
        for _ in range(100):
            if hasResult(d):
                break
            working.pump()
            silent.pump()
            self.clock.advance(0)

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(self.progress.state, JobState.STOPPED)
        for server in [*working.servers, *silent.servers]:
            self.assertTrue(server.transport.disconnected)  # type: ignore[union-attr]
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_sourceConnectionGivenUpAtStopTimeout(self) -> None:
        """
        A job stopped while its IMAP source's connection waits for a
        greeting that never comes gives its destination connection up at
        once, and the source's at C{stopTimeout}; the run then ends
        stopped.
        """
        endpoint = SilentEndpoint(self.clock)
        source = IMAPSource(silentOpener(endpoint, self.clock, 120.0), job=JOB)
        job = MigrationJob(
            JOB,
            source,
            self.store,
            self.progress,
            silentOpener(endpoint, self.clock, 120.0),
            self.clock,
            JobSettings(connections=1, stopTimeout=5.0),
        )
        d = job.run()
        self.clock.advance(0)
        endpoint.pump()
        self.assertEqual(len(endpoint.servers), 2)

        d.cancel()
        endpoint.pump()
        self.clock.advance(4.9)
        endpoint.pump()
        self.assertNoResult(d)
        self.clock.advance(0.1)
        endpoint.pump()

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(self.progress.state, JobState.STOPPED)
        for server in endpoint.servers:
            self.assertTrue(server.transport.disconnected)  # type: ignore[union-attr]
        self.assertEqual(self.clock.getDelayedCalls(), [])


class StoppableTests(SynchronousTestCase):
    """
    L{stoppable}: a run's Deferred whose cancellation asks it to stop.
    """

    def test_cancelAsksToStop(self) -> None:
        """
        Cancelling asks the work to stop, each time, and cancels nothing of
        it; the Deferred fires with the work's own result once it has one.
        """
        work: Deferred[bool] = Deferred()
        asked: list[None] = []
        run = stoppable(work, lambda: asked.append(None))
        run.cancel()
        run.cancel()
        self.assertEqual(asked, [None, None])
        self.assertNoResult(run)
        self.assertFalse(work.called)
        work.callback(False)
        self.assertFalse(self.successResultOf(run))
        run.cancel()
        self.assertEqual(asked, [None, None])

    def test_failure(self) -> None:
        """
        The work's failure, after a cancellation or without one, is the
        run's.
        """
        work: Deferred[bool] = Deferred()
        run = stoppable(work, lambda: None)
        run.cancel()
        work.errback(ValueError("a bug"))
        self.failureResultOf(run, ValueError)

    def test_endedAlready(self) -> None:
        """
        Work that has its result already gives it at once.
        """
        self.assertTrue(self.successResultOf(stoppable(succeed(True), lambda: None)))


class HeldRepliesServer(FakeIMAPServer):
    """
    A fake server that stores each APPEND at once but holds every line it
    says after its first one until L{release}.
    """

    holding = False
    released = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        FakeIMAPServer.__init__(self, *args, **kwargs)  # type: ignore[arg-type]
        self.held: list[bytes] = []

    def _append(self, args: list[object]) -> bytes | None:  # type: ignore[override]
        reply = FakeIMAPServer._append(self, args)  # type: ignore[arg-type]
        self.holding = not self.released
        return reply

    def sendLine(self, line: bytes) -> None:
        if self.holding:
            self.held.append(line)
        else:
            FakeIMAPServer.sendLine(self, line)

    def release(self) -> None:
        """
        Say the lines held, and hold no more.
        """
        self.holding = False
        self.released = True
        held, self.held = self.held, []
        for line in held:
            FakeIMAPServer.sendLine(self, line)


class CancelWhileRepliesAwaitedTests(SynchronousTestCase):
    """
    A run cancelled while the replies to its APPENDs are in flight.
    """

    def test_repliesRecorded(self) -> None:
        """
        Cancelling the run of a job whose APPEND replies are in flight
        reads no more, awaits those replies and records them, and only then
        fires, C{False}, the job stopped, with nothing left on the clock;
        the next run copies the rest, each message once.
        """
        h = JobHarness(self)
        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: HeldRepliesServer(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("INBOX"), 20)
        job = h.job(
            JobSettings(connections=1, batchMessages=2, windowMessages=4, stopTimeout=5.0)
        )
        d = h.start(job)
        server = h.endpoint.servers[0]
        assert isinstance(server, HeldRepliesServer)
        self.assertTrue(server.held)
        self.assertGreater(len(h.mail.mailbox(USER, "INBOX")), 0)

        d.cancel()
        d.cancel()
        h.settle()
        self.assertNoResult(d)
        self.assertEqual(h.progress.state, JobState.STOPPING)

        server.release()
        h.settle(lambda: hasResult(d))

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        h.endpoint.pump()
        # Every message stored was recorded from its reply; the unit being
        # sent stays journaled, for the next run to settle.
        stored = len(h.mail.mailbox(USER, "INBOX"))
        self.assertLess(stored, 20)
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (stored, 0))
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        self.assertEqual(h.clock.getDelayedCalls(), [])

        self.assertTrue(h.run(job))
        h.assertHolds("INBOX", range(20))
        h.finish()
