"""
Tests for L{imapmig.job.sending} and L{imapmig.job.workshare}: a mailbox a
connection moves on from while its APPENDs there are still in flight is
handed to another connection only once they are all answered, so that each
destination mailbox holds its messages in the source's order.

The real job, session and pipeline against L{FakeIMAPServer}s over iosim
(L{tests.test_job.JobHarness}), one of them slow: it runs each APPEND a
second (of the L{Clock}) after it arrives, in order, so that its
connection's APPENDs are in flight while the other connections go on.
"""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.protocol import connectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.job import JobSettings
from imapmig.job.sending import CopyLoop
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.imapsyntax import Token
from imapmig.testing.fakestore import FakeMailStore
from tests.test_job import JOB, USER, JobHarness, MemoryEndpoint, body, populate


class Watch:
    """
    What every server of a test saw: by mailbox, the APPENDs each server
    has received and not yet run, and every APPEND that arrived while
    another server had one into the same mailbox not yet run.
    """

    def __init__(self) -> None:
        self.pending: dict[str, dict[int, int]] = {}
        self.overlaps: list[tuple[str, int, int]] = []
        self.appended: dict[int, list[str]] = {}

    def received(self, server: int, mailbox: str) -> None:
        pending = self.pending.setdefault(mailbox, {})
        for other, count in pending.items():
            if other != server and count:
                self.overlaps.append((mailbox, other, server))
        pending[server] = pending.get(server, 0) + 1
        self.appended.setdefault(server, []).append(mailbox)

    def ran(self, server: int, mailbox: str) -> None:
        self.pending[mailbox][server] -= 1

    def gone(self, server: int) -> None:
        """
        C{server}'s connection is closed: what it had not run never runs.
        """
        for pending in self.pending.values():
            pending.pop(server, None)


class WatchedServer(FakeIMAPServer):
    """
    A fake server that tells a L{Watch} of each APPEND as it arrives and
    as it runs; with a C{delay}, it runs each APPEND, and any command that
    arrives behind one, that many seconds after it arrives, in order.
    """

    def __init__(
        self,
        store: FakeMailStore,
        watch: Watch,
        number: int,
        clock: Clock,
        delay: float | None = None,
        dropAfterAppends: int | None = None,
    ) -> None:
        super().__init__(store, DEFAULT_CAPABILITIES, dropAfterAppends=dropAfterAppends)
        self.watch = watch
        self.number = number
        self.clock = clock
        self.delay = delay
        self.queued: list[tuple[list[Token], bytes | None]] = []

    def _appendTo(self, tokens: list[Token]) -> str | None:
        if len(tokens) > 2 and tokens[1].value.upper() == b"APPEND":
            return self._mailboxArgument(tokens[2:3])
        return None

    def _execute(self, tokens: list[Token], error: bytes | None) -> None:
        mailbox = self._appendTo(tokens)
        if mailbox is not None:
            self.watch.received(self.number, mailbox)
        if self.delay is None or (mailbox is None and not self.queued):
            self._run(tokens, error)
            return
        self.queued.append((tokens, error))
        self.clock.callLater(self.delay, self._runNext)

    def _close(self) -> None:
        self.watch.gone(self.number)
        super()._close()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.watch.gone(self.number)
        super().connectionLost(reason)

    def _runNext(self) -> None:
        tokens, error = self.queued.pop(0)
        if not self._closed:
            self._run(tokens, error)

    def _run(self, tokens: list[Token], error: bytes | None) -> None:
        mailbox = self._appendTo(tokens)
        if mailbox is not None:
            self.watch.ran(self.number, mailbox)
        super()._execute(tokens, error)


def harness(
    test: SynchronousTestCase,
    slow: Sequence[int] = (0,),
    dropAfterAppends: dict[int, int] | None = None,
) -> tuple[JobHarness, Watch]:
    """
    A L{JobHarness} whose servers (by connection attempt, from 0) in
    C{slow} run each APPEND (and what arrives behind one) a second after
    it arrives, and those in
    C{dropAfterAppends} drop their connection after that many APPENDs.
    """
    h = JobHarness(test)
    watch = Watch()
    drops = dropAfterAppends or {}

    def makeServer(attempt: int) -> FakeIMAPServer:
        delay = 1.0 if attempt in slow else None
        return WatchedServer(h.mail, watch, attempt, h.clock, delay, drops.get(attempt))

    h.endpoint = MemoryEndpoint(h.clock, makeServer)
    return h, watch


FIVE = (("A", 30), ("B", 28), ("C", 26), ("D", 24), ("E", 22))
THREE = (("A", 12), ("B", 40), ("C", 12))


def fill(h: JobHarness, folders: Sequence[tuple[str, int]]) -> dict[str, range]:
    """
    The source's C{folders}, by name and count, their messages numbered
    on.
    """
    numbers = {}
    start = 0
    for name, count in folders:
        populate(h.source, h.source.addFolder(name), count, start=start)
        numbers[name] = range(start, start + count)
        start += count
    return numbers


class HandoverTests(SynchronousTestCase):
    """
    A mailbox a connection moved on from, with APPENDs there unanswered
    (in flight, or queued), is not appended to by another connection until
    they are answered or the connection is lost; one that finds nothing
    else waits for it, then takes it.  Each of these failed before: the
    mailbox was free as soon as its connection took a share of another.
    """

    def setUp(self) -> None:
        self.waits: list[int] = []
        original = CopyLoop._released

        async def released(loop: CopyLoop, connection: Any) -> None:
            self.waits.append(connection.worker)
            await original(loop, connection)

        self.patch(CopyLoop, "_released", released)

    def copy(self, h: JobHarness, connections: int, batch: int, window: int) -> None:
        """
        Run the job to its end with C{connections} and the pipeline's
        C{batch} and C{window}.
        """
        settings = JobSettings(
            connections=connections, batchMessages=batch, windowMessages=window, unitMessages=500
        )
        self.assertTrue(h.run(h.job(settings)))

    def assertSourceOrder(self, h: JobHarness, numbers: dict[str, range]) -> None:
        """
        Each destination mailbox holds its folder's messages once each, in
        the source's order, and each is recorded appended once.
        """
        for name, expected in numbers.items():
            self.assertEqual(
                [m.body for m in h.mail.mailbox(USER, name)], [body(n) for n in expected], name
            )
        total = sum(len(n) for n in numbers.values())
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (total, 0))

    def handedOver(self, watch: Watch) -> set[str]:
        """
        The mailboxes more than one connection appended to.
        """
        seen = [set(mailboxes) for mailboxes in watch.appended.values()]
        return {m for m in set().union(*seen) if sum(m in s for s in seen) > 1}

    def test_waitsThenTakes(self) -> None:
        """
        Two connections, the second slow: no APPEND into a mailbox arrives
        while the other connection's APPENDs into it are not yet run; a
        connection that found only such a mailbox left waited, then took
        it (the mailboxes were handed over); every message landed once, in
        the source's order.
        """
        h, watch = harness(self, slow=(1,))
        numbers = fill(h, THREE)
        self.copy(h, 2, 4, 8)
        self.assertEqual(watch.overlaps, [])
        self.assertTrue(self.waits)
        self.assertTrue(self.handedOver(watch))
        self.assertSourceOrder(h, numbers)
        h.finish()

    def test_queuedNotYetSent(self) -> None:
        """
        Two connections, both fast: a mailbox is not handed over while the
        messages its connection queued for it are not all answered (before,
        the other connection's APPENDs overtook them).
        """
        h, watch = harness(self, slow=())
        numbers = fill(h, FIVE)
        self.copy(h, 2, 2, 16)
        self.assertTrue(self.handedOver(watch))
        self.assertSourceOrder(h, numbers)
        h.finish()

    def test_threeConnections(self) -> None:
        """
        Three connections, the third slow: the same.
        """
        h, watch = harness(self, slow=(2,))
        numbers = fill(h, FIVE)
        self.copy(h, 3, 4, 16)
        self.assertEqual(h.endpoint.attempts, 3)
        self.assertEqual(watch.overlaps, [])
        self.assertTrue(self.handedOver(watch))
        self.assertSourceOrder(h, numbers)
        h.finish()

    def test_lostReleases(self) -> None:
        """
        A connection lost with APPENDs unanswered in a mailbox another
        waits for releases it: the waiting connection takes it (no APPEND
        of it answered, only the loss could end the wait) and the job,
        once connected again, ends with every message once.
        """
        h, watch = harness(self, slow=(1,), dropAfterAppends={1: 0})
        numbers = fill(h, THREE)
        self.copy(h, 2, 4, 8)
        self.assertEqual(watch.overlaps, [])
        self.assertTrue(self.waits)
        # The slow connection had C; the first appended there after it.
        self.assertIn("C", watch.appended[1])
        self.assertIn("C", watch.appended[0])
        for name, expected in numbers.items():
            self.assertEqual(
                sorted(m.body for m in h.mail.mailbox(USER, name)),
                sorted(body(n) for n in expected),
            )
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (64, 0))
        h.finish()
