"""
Resilience integration tests: the real daemon (C{twistd -n imapmig
--exit-when-done} in a child process) migrates a Maildir into a real private
Dovecot through a L{FaultProxy} that breaks the connection in one way per
test: a reset or a FIN after so many octets, a stall both ways, a drip, a
literal cut in half, Dovecot itself restarted mid-run.

Each test requires the same outcome: the daemon exits 0 within a bounded
time, in the same run (reconnecting as often as it needs), and the account
holds every source message exactly once, checked message by message by
reading Dovecot directly, not through the proxy.  The jobs run with
C{identity: "off"}, so exactly-once cannot come from recognising content in
the destination: it must come from imapmig's own records.

Nothing waits on a delay: each test waits on events (the proxy's counters,
the process's exit), with timeouts only as a safety net.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Coroutine, Iterable

from attrs import frozen
from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.logger import Logger
from twisted.trial.unittest import TestCase

from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from imapmig.testing.faultproxy import FaultProxy
from imapmig.testing.faultrelay import ConnectionRelay
from imapmig.testing.faults import Close, CutLiteral, Direction, Drip, Fault, Reset, Stall
from tests.support import (
    proxiedMigration,
    DaemonProcess,
    DaemonTimedOut,
    Deliveries,
    corpusView,
    dedicatedDovecot,
    deliveries,
    fetchedView,
    freshUser,
    privateDovecot,
    restartDovecot,
    startDaemon,
)

# These tests run the daemon for real, on the global reactor.
reactor: Any = _globalReactor
log = Logger()

TO_SERVER = Direction.TO_SERVER
TO_CLIENT = Direction.TO_CLIENT

MESSAGES = 1500
FOLDERS = (("INBOX",), ("Archive",), ("Lists", "twisted"))
SERVER_TIMEOUT = 3
"""
The server's C{timeout:} in the daemon's configuration, in seconds: short,
so that a stalled or dripping connection is given up quickly.
"""
RUN_BOUND = 60.0
"""
Seconds a run may take before the daemon is killed and the test fails: the
migration itself takes 2-3 s; a reconnection adds the timeout and a backoff.
"""
SIDE_BOUND = 30.0
"""
Seconds an injected event (a Dovecot restart) may take after the daemon
exited.
"""
SOCKET_BUFFER = 65536
"""
The proxy's socket buffers, in octets (see L{FaultProxy}): a stall blocks
the daemon's writes after about this much more, not after megabytes.
"""
FAULT_POINT = 400_000
"""
Octets relayed to the server before a fault: well into the APPENDs (the
whole corpus is about 2.7 MB), well before the end.
"""


@frozen
class _Outcome:
    """
    What one run showed: the daemon's exit status and how long it ran, what
    the account holds, and the proxy's account of the faults.
    """

    status: int | None
    elapsed: float
    deliveries: Deliveries
    viewMatches: bool
    proxy: FaultProxy
    daemon: DaemonProcess
    problem: str | None

    def report(self, name: str) -> str:
        """
        A paragraph saying what happened, for the test's output and its
        failure message.
        """
        fired = ", ".join(
            f"{type(f.fault).__name__} on #{f.connection} at {f.toServer}/{f.toClient}"
            for f in self.proxy.fired
        )
        return (
            f"{name}: exit status {self.status} after {self.elapsed:.1f} s;"
            f" {self.deliveries.summary()};"
            f" flags and dates {'match' if self.viewMatches else 'DIFFER'};"
            f" {self.proxy.connections} connections"
            f" ({self.proxy.closedByServer} closed first by the server),"
            f" {self.proxy.octets[TO_SERVER]} octets to the server;"
            f" faults fired: [{fired}]"
            + (f"; {self.problem}" if self.problem else "")
        )


class ResilienceTests(TestCase):
    """
    The daemon finishes a migration, exactly once, whatever happens to its
    connections.
    """

    async def _migrate(
        self,
        faults: Iterable[Fault] = (),
        atFaultPoint: Callable[[FaultProxy], Coroutine[Any, Any, None]] | None = None,
        instance: DovecotInstance | None = None,
        user: DovecotUser | None = None,
        profile: str = "small",
        **jobSettings: object,
    ) -> _Outcome:
        """
        Migrate a Maildir of L{MESSAGES} messages in L{FOLDERS} into a
        fresh account through a L{FaultProxy} with C{faults}, running the
        daemon until it exits (at most L{RUN_BOUND} seconds); then account
        for every message.

        @param atFaultPoint: what to do, once L{FAULT_POINT} octets went to
            the server, if the daemon has not exited by then; it runs to its
            end before the account is read.
        @param instance: the Dovecot; the resilience tests' shared one by
            default.
        @param user: its account to migrate into; a fresh one by default.
        @param profile: the corpus's profile (see L{writeMaildir}).
        @param jobSettings: more settings of the job.
        """
        requireDovecot(self)
        if instance is None:
            instance = dedicatedDovecot("resilience")
        if user is None:
            user = freshUser(instance)
        migration = await proxiedMigration(
            self,
            reactor,
            instance,
            user,
            MESSAGES,
            15,
            FOLDERS,
            profile=profile,
            faults=faults,
            socketBuffer=SOCKET_BUFFER,
            server={"timeout": SERVER_TIMEOUT},
            identity="off",
            **jobSettings,
        )
        corpus, proxy, configPath = migration.corpus, migration.proxy, migration.configPath
        started = reactor.seconds()
        daemon = startDaemon(self, reactor, configPath)
        acting = None
        if atFaultPoint is not None:
            acting = Deferred.fromCoroutine(_actAtFaultPoint(proxy, daemon, atFaultPoint))
        problem = None
        status: int | None
        try:
            status = await daemon.exited(reactor, RUN_BOUND)
        except DaemonTimedOut:
            status = None
            problem = f"the daemon had not exited after {RUN_BOUND:.0f} s and was killed"
        elapsed = reactor.seconds() - started
        if acting is not None:
            await acting.addTimeout(SIDE_BOUND, reactor)
        await proxy.stop()
        fetched = instance.fetchAll(user.name)
        return _Outcome(
            status=status,
            elapsed=elapsed,
            deliveries=deliveries(fetched, corpus.messages),
            viewMatches=fetchedView(fetched) == corpusView(corpus.messages),
            proxy=proxy,
            daemon=daemon,
            problem=problem,
        )

    def _assertRecovered(self, outcome: _Outcome, faultsAtLeast: int = 1) -> None:
        """
        Assert that the fault happened (C{faultsAtLeast} fired), that the
        daemon exited 0 in time, and that every message arrived exactly once
        with its flags and date; report what the run showed either way.
        """
        name = self.id().rsplit(".", 1)[-1]
        report = outcome.report(name)
        sys.stdout.write("\n" + report + "\n")
        log.info("{report}", report=report)
        failure = f"{report}\n--- the daemon's output ends:\n{outcome.daemon.tail()}"
        self.assertGreaterEqual(
            len(outcome.proxy.fired), faultsAtLeast, "the fault never fired: " + failure
        )
        self.assertEqual(outcome.status, 0, failure)
        self.assertTrue(outcome.deliveries.exactlyOnce, failure)
        self.assertTrue(outcome.viewMatches, failure)

    async def test_passThrough(self) -> None:
        """
        Through the proxy without a fault, the migration completes and every
        message arrives exactly once: the proxy and the accounting tell the
        truth, so a failure of the other tests is the fault's doing.
        """
        outcome = await self._migrate()
        self._assertRecovered(outcome, faultsAtLeast=0)

    async def test_resetClientToServer(self) -> None:
        """
        Each of the first three connections is reset once it has carried
        L{FAULT_POINT} octets to the server, in the middle of the APPENDs:
        the daemon reconnects, and every message arrives exactly once.
        """
        outcome = await self._migrate([Reset(TO_SERVER, FAULT_POINT, connections=range(1, 4))])
        self._assertRecovered(outcome)

    async def test_resetServerToClient(self) -> None:
        """
        The busiest connection is reset one octet into the next reply from
        the server, once L{FAULT_POINT} octets went to the server: the
        server has stored what that reply acknowledges, the daemon never
        learns it, reconnects, and still every message arrives exactly once.
        """

        async def cutTheNextReply(proxy: FaultProxy) -> None:
            relay = _busiest(proxy)
            proxy.setFaults(
                [Reset(TO_CLIENT, relay.relayed[TO_CLIENT] + 1, connections=[relay.number])]
            )

        self._assertRecovered(await self._migrate(atFaultPoint=cutTheNextReply))

    async def test_finClientToServer(self) -> None:
        """
        The first connection is closed in order (FIN) once it has carried
        L{FAULT_POINT} octets to the server: the daemon reconnects and
        every message arrives exactly once.
        """
        outcome = await self._migrate([Close(TO_SERVER, FAULT_POINT, connections=[1])])
        self._assertRecovered(outcome)

    async def test_stallBothWays(self) -> None:
        """
        The first connection stops relaying both ways (its sockets open, no
        longer read) once it has carried L{FAULT_POINT} octets to the
        server, with realistic messages (some large) so that the daemon has
        more to write than the sockets' buffers take: after its C{timeout}
        of 3 s the daemon aborts the connection (a connection it merely
        closes would wait for ever to flush), reconnects, and every message
        arrives exactly once.
        """
        outcome = await self._migrate(
            [Stall(TO_SERVER, FAULT_POINT, connections=[1])], profile="realistic"
        )
        self._assertRecovered(outcome)

    async def test_dripSlowerThanTimeout(self) -> None:
        """
        The busiest connection's replies from the server drip at one octet
        per half second once L{FAULT_POINT} octets went to the server: no
        reply completes within the 3 s timeout; the daemon gives the
        connection up, reconnects, and every message arrives exactly once.
        """

        async def dripTheReplies(proxy: FaultProxy) -> None:
            relay = _busiest(proxy)
            proxy.setFaults(
                [Drip(TO_CLIENT, relay.relayed[TO_CLIENT], 0.5, connections=[relay.number])]
            )

        self._assertRecovered(await self._migrate(atFaultPoint=dripTheReplies))

    async def test_dripKeepsDataFlowing(self) -> None:
        """
        With one message per APPEND (C{batch_messages: 1}), the busiest
        connection's replies drip at one octet per 10 ms once L{FAULT_POINT}
        octets went to the server: a reply line arrives well within every
        3 s, yet the hundreds of replies in flight would take minutes.  Data
        trickling in must not extend a reply's deadline: the daemon gives
        the connection up, reconnects, and every message arrives exactly
        once, within the run's bound.
        """

        async def dripTheReplies(proxy: FaultProxy) -> None:
            relay = _busiest(proxy)
            proxy.setFaults(
                [Drip(TO_CLIENT, relay.relayed[TO_CLIENT], 0.01, connections=[relay.number])]
            )

        self._assertRecovered(
            await self._migrate(atFaultPoint=dripTheReplies, batch_messages=1)
        )

    async def test_literalCutInHalf(self) -> None:
        """
        The first connection is reset halfway through the 100th literal it
        sends (a message body in a MULTIAPPEND): the daemon reconnects and
        every message arrives exactly once.
        """
        outcome = await self._migrate([CutLiteral(100, connections=[1])])
        self._assertRecovered(outcome)

    async def test_dovecotRestarted(self) -> None:
        """
        Dovecot is stopped (every process of it sent C{SIGTERM}: each
        session ends at once with C{* BYE Server shutting down.}) and
        started again once L{FAULT_POINT} octets went to it: the daemon's
        attempts to reconnect fail until it is back, then it finishes, and
        every message arrives exactly once.
        """
        requireDovecot(self)
        instance = privateDovecot(self)
        restarts: list[int] = []

        async def restart(proxy: FaultProxy) -> None:
            restarts.append(proxy.connections)
            await restartDovecot(reactor, instance)
            proxy.retarget(instance.port)

        outcome = await self._migrate(
            atFaultPoint=restart, instance=instance, user=instance.users[0]
        )
        self.assertEqual(
            len(restarts),
            1,
            "the daemon exited before Dovecot could be restarted: "
            + outcome.report("test_dovecotRestarted"),
        )
        self._assertRecovered(outcome, faultsAtLeast=0)


async def _actAtFaultPoint(
    proxy: FaultProxy,
    daemon: DaemonProcess,
    action: Callable[[FaultProxy], Coroutine[Any, Any, None]],
) -> None:
    """
    Once L{FAULT_POINT} octets went to the server, run C{action} to its end;
    do nothing if the daemon exits first (it will never send them).
    """
    reached = proxy.whenOctets(TO_SERVER, FAULT_POINT)
    race: list[Deferred[Any]] = [reached, daemon.whenEnded()]
    await DeferredList(race, fireOnOneCallback=True, fireOnOneErrback=True)
    if not reached.called:
        reached.cancel()
        reached.addErrback(lambda reason: reason.trap(CancelledError))
        return
    await action(proxy)


def _busiest(proxy: FaultProxy) -> ConnectionRelay:
    """
    The open connection that has carried the most octets to the server.
    """
    open_ = [r for r in proxy.relays if not r.ended]
    return max(open_ or proxy.relays, key=lambda r: r.relayed[TO_SERVER])


class StopTests(TestCase):
    """
    C{SIGTERM} (C{systemctl stop}) in the middle of a migration.
    """

    async def test_sigtermThenRestart(self) -> None:
        """
        C{SIGTERM} once L{FAULT_POINT} octets went to the server: the daemon
        stops taking messages, records the replies in flight, logs that the
        job stopped and exits 0, having duplicated nothing; started again,
        it finishes, and every message is in the account exactly once
        (C{identity: "off"}).
        """
        requireDovecot(self)
        instance = dedicatedDovecot("resilience")
        user = freshUser(instance)
        migration = await proxiedMigration(
            self, reactor, instance, user, MESSAGES, 17, FOLDERS, identity="off"
        )
        corpus, proxy, configPath = migration.corpus, migration.proxy, migration.configPath
        daemon = startDaemon(self, reactor, configPath)
        reached = proxy.whenOctets(TO_SERVER, FAULT_POINT)
        race: list[Deferred[Any]] = [reached, daemon.whenEnded()]
        await DeferredList(race, fireOnOneCallback=True, fireOnOneErrback=True)
        self.assertTrue(reached.called, "the daemon ended before the signal: " + daemon.tail())
        assert daemon.transport is not None
        daemon.transport.signalProcess("TERM")
        status = await daemon.exited(reactor, RUN_BOUND)
        self.assertEqual(status, 0, daemon.tail())
        self.assertIn(b"Job job stopped after ", bytes(daemon.output), daemon.tail())
        self.assertNotIn(b"Traceback", bytes(daemon.output), daemon.tail())
        partial = deliveries(instance.fetchAll(user.name), corpus.messages)
        self.assertEqual((partial.duplicated, partial.unexpected), ((), 0), partial.summary())

        again = startDaemon(self, reactor, configPath)
        self.assertEqual(await again.exited(reactor, RUN_BOUND), 0, again.tail())
        fetched = instance.fetchAll(user.name)
        final = deliveries(fetched, corpus.messages)
        sys.stdout.write(
            f"\ntest_sigtermThenRestart: after SIGTERM {len(corpus.messages) - len(partial.lost)}"
            f" of {len(corpus.messages)} held; after the restart {final.summary()}\n"
        )
        self.assertTrue(final.exactlyOnce, final.summary())
        self.assertEqual(fetchedView(fetched), corpusView(corpus.messages))
