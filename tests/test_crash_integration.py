"""
The crash test: the real daemon (C{twistd -n imapmig --exit-when-done} in a
child process) is killed with C{SIGKILL} at 20 random moments of a
migration of 3,000 messages into a real private Dovecot, restarted each time
on the same configuration and state database, then run to completion; the
account must then hold every source message exactly once, checked message
by message by reading Dovecot directly.  It runs once with
C{identity: fingerprint} and once with C{identity: "off"}: with the
identity check off, exactly-once must come from imapmig's own records of
what it had in flight, not from recognising content.

The moments are chosen by octets, not by time (which would depend on the
machine's speed): the daemon reaches Dovecot through a L{FaultProxy} that
passes everything through until one of the run's connections has carried a
drawn number of octets to the server; there it stops relaying to the server
(L{Discard}: replies still flow) and the daemon is killed at once: the server has
received exactly that many octets.  The draws come from a seeded generator: the seed is
printed, and C{IMAPMIG_CRASH_SEED=N} repeats a run.  The kill points of one
configuration add up to less than the corpus, so the daemon does not
finish before its last kill.  After each kill the next run starts only once
Dovecot has closed every connection of the killed one.
"""

from __future__ import annotations

import os
import random
import re
import sys
from typing import Any

from attrs import frozen
from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.testing.dovecot import requireDovecot
from imapmig.testing.faults import Direction, Discard
from tests.support import (
    proxiedMigration,
    Deliveries,
    corpusView,
    dedicatedDovecot,
    deliveries,
    fetchedView,
    freshUser,
    startDaemon,
)

# These tests run the daemon for real, on the global reactor.
reactor: Any = _globalReactor
log = Logger()

TO_SERVER = Direction.TO_SERVER

SEED_VARIABLE = "IMAPMIG_CRASH_SEED"
KILLS = 20
MESSAGES = 3000
FOLDERS = (("INBOX",), ("Archive",), ("Lists", "twisted"))
CONNECTIONS = 2
"""
The job's connections (the default): a run is killed when one of them has
carried its kill point, by when the run has sent about this many times as
much.
"""
KILLED_SPAN = 0.9
"""
About the share of the corpus's octets the killed runs send in all: their
kill points add up to this share divided by L{CONNECTIONS}.  The daemon
still has a tenth of the corpus to send after its last kill, so it cannot
finish before.
"""
RUN_BOUND = 120.0
"""
Seconds any one run may take (a killed one, or the last) before the test
gives up on it.
"""
IDLE_BOUND = 30.0
"""
Seconds Dovecot may take to close the connections of a killed run.
"""


def crashSeed() -> int:
    """
    The seed of the kill points: C{IMAPMIG_CRASH_SEED} if set, else a new
    random one.
    """
    configured = os.environ.get(SEED_VARIABLE)
    if configured:
        return int(configured)
    return random.SystemRandom().randrange(2**32)


def killPoints(rng: random.Random, total: int, kills: int) -> list[int]:
    """
    How many octets each of C{kills} runs sends to the server before it is
    killed: the gaps between sorted uniform draws in C{[0, total)}, each at
    least 1, so that they add up to at most C{total} (plus C{kills}).

    @param rng: the generator to draw from.
    @param total: what the kill points may add up to.
    @param kills: how many.
    """
    cuts = sorted(rng.randrange(total) for _ in range(kills))
    return [max(1, after - before) for before, after in zip([0] + cuts, cuts)]


def _cutAt(point: int, connections: range) -> Discard:
    """
    Relay nothing more to the server after C{point} octets, replies still
    flowing, on the first of C{connections} to carry that many.
    """
    return Discard(TO_SERVER, point, connections=connections, times=1)


@frozen
class _CrashRun:
    """
    What a crash loop showed.

    @ivar seed: the seed of its kill points.
    @ivar killedAt: the octets one connection of each killed run had
        carried to the server when it was killed.
    @ivar statuses: each run's exit status, the last one's included
        (C{-9}: killed).
    """

    identity: str
    seed: int
    killedAt: tuple[int, ...]
    statuses: tuple[int, ...]
    deliveries: Deliveries
    viewMatches: bool
    elapsed: float
    finalOutput: str
    reconciled: tuple[int, int] = (0, 0)

    def report(self) -> str:
        """
        A paragraph saying what happened.
        """
        return (
            f"identity {self.identity}, seed {self.seed} ({SEED_VARIABLE}={self.seed}):"
            f" {len(self.killedAt)} kills, then exit status {self.statuses[-1]},"
            f" in {self.elapsed:.0f} s; {self.deliveries.summary()};"
            f" flags and dates {'match' if self.viewMatches else 'DIFFER'};"
            f" killed after {list(self.killedAt)} octets to the server;"
            f" exit statuses {list(self.statuses)};"
            f" the journal found {self.reconciled[0]} messages in flight already"
            f" stored and {self.reconciled[1]} to send again"
        )


_RECONCILED = re.compile(rb"(\d+) had arrived, (\d+) will be sent again")


def reconciledIn(output: bytes) -> tuple[int, int]:
    """
    What the daemon's reconciliations of its journal found, as it logged
    them: messages in flight already stored, and to be sent again.
    """
    arrived = again = 0
    for match in _RECONCILED.finditer(output):
        arrived += int(match.group(1))
        again += int(match.group(2))
    return arrived, again


class CrashTests(TestCase):
    """
    A migration killed 20 times and restarted ends with every message in
    the destination exactly once.
    """

    async def _crashLoop(self, identity: str) -> _CrashRun:
        """
        Migrate L{MESSAGES} small messages into a fresh account with the
        job's C{identity}, killing the daemon L{KILLS} times and restarting
        it, then run it to its end and account for every message.
        """
        requireDovecot(self)
        seed = crashSeed()
        sys.stdout.write(
            f"\ncrash test, identity {identity}: seed {seed}"
            f" (set {SEED_VARIABLE}={seed} to repeat it)\n"
        )
        log.info("Crash test, identity {identity}: seed {seed}", identity=identity, seed=seed)
        rng = random.Random(f"{seed}:{identity}")
        instance = dedicatedDovecot("crash")
        user = freshUser(instance)
        migration = await proxiedMigration(
            self, reactor, instance, user, MESSAGES, 16, FOLDERS,
            identity=identity, connections=CONNECTIONS,
        )  # fmt: skip
        corpus, proxy, configPath = migration.corpus, migration.proxy, migration.configPath
        total = int(sum(m.size for m in corpus.messages) * KILLED_SPAN / CONNECTIONS)
        started = reactor.seconds()
        killedAt: list[int] = []
        statuses: list[int] = []
        arrived = again = 0
        for point in killPoints(rng, total, KILLS):
            # The run's first connection to carry `point` octets to the
            # server stops there: what the server received is cut at that
            # very octet (not where a 64 KiB read happens to end) when the
            # daemon is killed, in the same reactor turn.
            first = proxy.connections + 1
            proxy.setFaults([_cutAt(point, range(first, first + 1000))])
            daemon = startDaemon(self, reactor, configPath)
            reached = proxy.whenFired(len(proxy.fired) + 1)
            race: list[Deferred[Any]] = [reached, daemon.whenEnded()]
            settled = DeferredList(race, fireOnOneCallback=True, fireOnOneErrback=True)
            await settled.addTimeout(RUN_BOUND, reactor)
            if reached.called:
                daemon.kill()
                killedAt.append(point)
            else:
                reached.cancel()
                reached.addErrback(lambda reason: reason.trap(CancelledError))
            statuses.append(await daemon.whenEnded())
            found = reconciledIn(bytes(daemon.output))
            arrived, again = arrived + found[0], again + found[1]
            await proxy.whenIdle().addTimeout(IDLE_BOUND, reactor)
        proxy.setFaults([])
        daemon = startDaemon(self, reactor, configPath)
        statuses.append(await daemon.exited(reactor, RUN_BOUND))
        found = reconciledIn(bytes(daemon.output))
        arrived, again = arrived + found[0], again + found[1]
        elapsed = reactor.seconds() - started
        await proxy.stop()
        fetched = instance.fetchAll(user.name)
        return _CrashRun(
            identity=identity,
            seed=seed,
            killedAt=tuple(killedAt),
            statuses=tuple(statuses),
            deliveries=deliveries(fetched, corpus.messages),
            viewMatches=fetchedView(fetched) == corpusView(corpus.messages),
            elapsed=elapsed,
            finalOutput=daemon.tail(),
            reconciled=(arrived, again),
        )

    def _assertExactlyOnce(self, run: _CrashRun) -> None:
        """
        Assert that the daemon was killed L{KILLS} times, that its last run
        exited 0, and that every message arrived exactly once with its flags
        and date: 0 lost, 0 duplicated.  Report what the run showed either
        way.
        """
        report = run.report()
        sys.stdout.write(report + "\n")
        log.info("{report}", report=report)
        failure = f"{report}\n--- the last run's output ends:\n{run.finalOutput}"
        self.assertEqual(len(run.killedAt), KILLS, failure)
        self.assertEqual(run.statuses[-1], 0, failure)
        self.assertEqual((len(run.deliveries.lost), run.deliveries.extraCopies), (0, 0), failure)
        self.assertTrue(run.deliveries.exactlyOnce, failure)
        self.assertTrue(run.viewMatches, failure)

    async def test_identityFingerprint(self) -> None:
        """
        With C{identity: fingerprint}, 20 kills and restarts leave every
        message in the destination exactly once.
        """
        self._assertExactlyOnce(await self._crashLoop("fingerprint"))

    async def test_identityOff(self) -> None:
        """
        With C{identity: "off"}, 20 kills and restarts leave every message
        in the destination exactly once: exactly-once comes from imapmig's
        records of what was in flight, not from recognising content.
        """
        self._assertExactlyOnce(await self._crashLoop("off"))


class KillPointTests(SynchronousTestCase):
    """
    L{killPoints} draws kill points that the daemon is sure to reach.
    """

    def test_pointsAddUpToLessThanTheCorpus(self) -> None:
        """
        There are as many points as kills, each at least 1, adding up to at
        most the total (plus one octet per kill), and the same seed draws
        the same points.
        """
        for seed in range(50):
            points = killPoints(random.Random(seed), 10_000, KILLS)
            self.assertEqual(len(points), KILLS)
            self.assertGreaterEqual(min(points), 1)
            self.assertLessEqual(sum(points), 10_000 + KILLS)
            self.assertEqual(points, killPoints(random.Random(seed), 10_000, KILLS))

    def test_seedFromEnvironment(self) -> None:
        """
        C{IMAPMIG_CRASH_SEED} sets the seed; without it each call draws a
        new one.
        """
        self.patch(os, "environ", {SEED_VARIABLE: "4242"})
        self.assertEqual(crashSeed(), 4242)
        self.patch(os, "environ", {})
        self.assertNotEqual({crashSeed() for _ in range(5)}, {crashSeed()})
