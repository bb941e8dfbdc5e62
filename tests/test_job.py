"""
Tests for L{imapmig.job}: the real L{MigrationJob} driving the real session,
client and APPEND pipeline against L{imapmig.testing.fakeserver} over
L{twisted.test.iosim}, with an in-memory source and state store and a
L{Clock}; no socket, no reactor, no sleep.
"""

from __future__ import annotations

import base64
import os
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Iterable, Sequence

from attrs import evolve
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError, SourceError
from imapmig.mail.fidelity import journalHead
from imapmig.imap.opening import openSession
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.job import JobSettings, MigrationJob, RetryPolicy
from imapmig.job.migration import connectionsWorthOpening
from imapmig.job.inputs import JobInputs
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage, UnreadableMessage
from imapmig.progress import JobState, MigrationProgress
from imapmig.sources import IMessageSource
from imapmig.state import (
    AppendedOutcome,
    AppendedRun,
    FolderFallback,
    IStateStore,
    JournalMessage,
    MessageOutcome,
    asMessageOutcome,
    flatOutcomes,
)
from imapmig.state.memory import MemoryStateStore
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore

USER = "alice"
PASSWORD = "s3cret-pw"
JOB = "alice-job"
UTC = timezone.utc


@implementer(IMessageSource)
class MemorySource:
    """
    An L{IMessageSource} in memory.

    @ivar reads: how many times L{readBodies} was called.
    @ivar keysRead: the keys of the messages read, in order.
    @ivar holdAfter: if set, reads beyond that many wait in C{held} until
        L{release}.
    @ivar heldListings: the listings of folders (by key) put there, as a
        Deferred each fires, wait for the test to fire it.
    """

    def __init__(self) -> None:
        self._folders: list[SourceFolder] = []
        self._messages: dict[str, list[SourceMessage]] = {}
        self._bodies: dict[tuple[str, str], MessageBody] = {}
        self.reads = 0
        self.keysRead: list[str] = []
        self.listingErrors: dict[str, Exception] = {}
        self.foldersError: Exception | None = None
        self.onListing: Callable[[SourceFolder], None] = lambda folder: None
        self.holdAfter: int | None = None
        self.held: list[tuple[Deferred[Sequence[MessageBody]], list[MessageBody]]] = []
        self.heldListings: dict[str, Deferred[None]] = {}

    def addFolder(self, *path: str, use: str | None = None) -> SourceFolder:
        """
        Add a folder (parents are not implied), of special use C{use}.
        """
        folder = SourceFolder(tuple(path), "/".join(path), use)
        self._folders.append(folder)
        self._messages[folder.key] = []
        return folder

    def add(
        self,
        folder: SourceFolder,
        key: str,
        body: MessageBody,
        flags: tuple[str, ...] = (),
        internalDate: datetime | None = None,
        size: int | None = None,
    ) -> SourceMessage:
        """
        Add a message; an L{UnreadableMessage} body will fail to read.

        @param size: its size as stored, if not that of C{body} (a body
            the source converted to CRLF).
        """
        if size is None:
            size = len(body) if isinstance(body, bytes) else 100
        message = SourceMessage(key, flags, internalDate, size)
        self._messages[folder.key].append(message)
        self._bodies[folder.key, key] = body
        return message

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        "See L{IMessageSource.listFolders}; fails with C{foldersError} if set."
        if self.foldersError is not None:
            return fail(self.foldersError)
        return succeed(list(self._folders))

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        See L{IMessageSource.listMessages}: at once (like a Maildir), after
        calling C{onListing}; fails as C{listingErrors} says.
        """
        self.onListing(folder)
        if folder.key in self.listingErrors:
            return fail(self.listingErrors[folder.key])
        messages = list(self._messages[folder.key])
        held = self.heldListings.get(folder.key)
        if held is not None:
            return held.addCallback(lambda _: messages)
        return succeed(messages)

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        "See L{IMessageSource.readBodies}; counted, and held if asked."
        self.reads += 1
        self.keysRead.extend(m.key for m in messages)
        bodies = [self._bodies[folder.key, m.key] for m in messages]
        if self.holdAfter is not None and self.reads > self.holdAfter:
            d: Deferred[Sequence[MessageBody]] = Deferred()
            self.held.append((d, bodies))
            return d
        return succeed(bodies)

    def release(self) -> None:
        """
        Let the held reads complete.
        """
        held, self.held, self.holdAfter = self.held, [], None
        for d, bodies in held:
            d.callback(bodies)


class RecordingStateStore(MemoryStateStore):
    """
    A L{MemoryStateStore} that remembers every C{recordOutcomes} batch, and
    refuses to record them with C{failWith} if set.
    """

    def __init__(self) -> None:
        super().__init__()
        self.memory = self
        self.batches: list[list[MessageOutcome]] = []
        self.failWith: Exception | None = None
        self.journaled: list[list[JournalMessage]] = []
        self.journalFailWith: Exception | None = None

    def recordOutcomes(
        self,
        job: str,
        outcomes: Sequence[MessageOutcome | AppendedOutcome | AppendedRun],
        settled: Sequence[int] = (),
    ) -> Deferred[None]:
        "See L{IStateStore.recordOutcomes}; the batch is remembered, as L{MessageOutcome}s."
        self.batches.append([asMessageOutcome(outcome) for outcome in flatOutcomes(outcomes)])
        if self.failWith is not None:
            return fail(self.failWith)
        return super().recordOutcomes(job, outcomes, settled)

    def journalBatch(
        self,
        job: str,
        mailbox: str,
        uidValidity: int | None,
        uidFloor: int | None,
        messages: Sequence[JournalMessage],
    ) -> Deferred[int]:
        "See L{IStateStore.journalBatch}; the entry is remembered."
        self.journaled.append(list(messages))
        if self.journalFailWith is not None:
            return fail(self.journalFailWith)
        return super().journalBatch(job, mailbox, uidValidity, uidFloor, messages)

    def outcomes(self) -> dict[tuple[str, str], MessageOutcome]:
        """
        The latest recorded outcome of each message, by (folder, message) key.
        """
        return {(o.folderKey, o.messageKey): o for batch in self.batches for o in batch}


def connectPumped(
    server: Protocol, protocolFactory: IProtocolFactory, clock: Clock
) -> tuple[IProtocol, iosim.IOPump]:
    """
    Connect a client built by C{protocolFactory} to C{server} over an iosim
    pump timed by C{clock}, neither side greeted yet.

    @return: the client and the pump.
    """
    client = protocolFactory.buildProtocol(iosim.FakeAddress())
    assert client is not None
    pump = iosim.connect(
        server,
        iosim.makeFakeServer(server),
        client,
        iosim.makeFakeClient(client),
        greet=False,
        clock=clock,
    )
    return client, pump


@implementer(IStreamClientEndpoint)
class MemoryEndpoint:
    """
    Connects each client to a new L{FakeIMAPServer} over an iosim pump.

    @ivar servers: the server of each accepted connection, in order.
    @ivar attempts: how many connections were asked for.
    """

    def __init__(self, clock: Clock, makeServer: Callable[[int], FakeIMAPServer | None]) -> None:
        """
        @param makeServer: given the attempt number (from 0), the server to
            connect to, or L{None} to refuse the connection.
        """
        self._clock = clock
        self._makeServer = makeServer
        self.attempts = 0
        self.servers: list[FakeIMAPServer] = []
        self.pumps: list[iosim.IOPump] = []
        self.arrivals: list[list[int]] = []
        self._step = 0

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        "See L{IStreamClientEndpoint.connect}."
        attempt = self.attempts
        self.attempts += 1
        server = self._makeServer(attempt)
        if server is None:
            return fail(ConnectionRefusedError("memory endpoint refused"))
        client, pump = connectPumped(server, protocolFactory, self._clock)
        self.servers.append(server)
        self.pumps.append(pump)
        self.arrivals.append([])
        return succeed(client)

    def pump(self, until: Callable[[], bool] = lambda: False) -> None:
        """
        Move bytes on every connection, one step each in turn (so that
        connections progress together), until C{until()} or nothing moves.
        The clock is left alone: L{JobHarness.settle} runs the calls due
        once nothing moves, as a reactor runs its timed calls between
        rounds of I/O.
        """
        for _ in range(100000):
            if until():
                return
            moved = False
            for pump in list(self.pumps):
                moved = pump.pump(advanceClock=False) or moved
            self._step += 1
            for server, arrivals in zip(self.servers, self.arrivals):
                arrivals.extend([self._step] * (len(server.received) - len(arrivals)))
            if not moved:
                return
        raise AssertionError("the connections never went quiet")

    def flights(self, connection: int) -> list[list[bytes]]:
        """
        The command lines the server of C{connection} received, grouped by
        the pump step that carried them: commands in one group were sent
        without waiting for each other's replies.
        """
        groups: dict[int, list[bytes]] = {}
        for step, line in zip(self.arrivals[connection], self.servers[connection].received):
            groups.setdefault(step, []).append(line)
        return list(groups.values())

    def arrival(self, connection: int, command: bytes) -> int:
        """
        The pump step at which the server of C{connection} received its
        first C{command} (C{b"SELECT"}, C{b"LOGIN"}).
        """
        for step, line in zip(self.arrivals[connection], self.servers[connection].received):
            if line.split(b" ")[1:2] == [command]:
                return step
        raise AssertionError(f"connection {connection} never received {command!r}")


def appendLines(server: FakeIMAPServer) -> list[bytes]:
    """
    The APPEND command lines C{server} received.
    """
    return [line for line in server.received if line.split(b" ")[1:2] == [b"APPEND"]]



def memoryOpener(
    endpoint: MemoryEndpoint, clock: Clock, password: str = PASSWORD
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a session to the fake server behind C{endpoint}, logged in as
    C{USER} with C{password}, without TLS.
    """

    def open() -> Awaitable[IMAPSession]:
        return openSession(
            endpoint,
            clock,
            description=f"{USER} at memory",
            user=USER,
            password=password,
            starttls=False,
            tlsOptions=None,
            timeout=30,
        )

    return open

def hasResult(d: Deferred[Any]) -> bool:
    """
    Whether C{d} has its result.  A run's Deferred, once cancelled, is
    called at once but waits (paused) for the run's end, as Twisted
    cancels a coroutine's Deferred.
    """
    return d.called and not d.paused


class JobHarness:
    """
    A source, a destination account behind a L{MemoryEndpoint}, a state
    store, a progress model and a clock, and jobs running between them.
    """

    def __init__(
        self,
        test: SynchronousTestCase,
        capabilities: Sequence[str] = DEFAULT_CAPABILITIES,
        refuse: Callable[[bytes], str | None] = lambda body: None,
        dropAfterAppends: int | None = None,
        refuseConnections: Sequence[int] = (),
        delimiter: str = ".",
    ) -> None:
        self.test = test
        self.clock = Clock()
        self.mail = FakeMailStore({USER: PASSWORD}, delimiter)
        self.store = RecordingStateStore()
        self.progress = MigrationProgress(self.clock.seconds).addJob(JOB)
        self.source = MemorySource()

        def makeServer(attempt: int) -> FakeIMAPServer | None:
            if attempt in refuseConnections:
                return None
            return FakeIMAPServer(self.mail, capabilities, refuse, dropAfterAppends)

        self.endpoint = MemoryEndpoint(self.clock, makeServer)

    def job(
        self,
        settings: JobSettings = JobSettings(connections=1),
        password: str = PASSWORD,
        identity: str = "fingerprint",
        eightBit: str = "literal",
        retry: RetryPolicy = RetryPolicy(),
        sendDeadline: SendDeadline | None = None,
        takeover: float | None = None,
        machine: JobInputs | None = None,
    ) -> MigrationJob:
        """
        A job copying the source into the account (its backoff without
        jitter); C{takeover}, C{machine}: see L{MigrationJob}.
        """

        openDestination = memoryOpener(self.endpoint, self.clock, password)
        return MigrationJob(
            JOB, self.source, self.store, self.progress, openDestination, self.clock, settings,
            identity=identity, eightBit=eightBit, retry=retry, jitter=lambda: 0.0,
            sendDeadline=sendDeadline, takeover=takeover, machine=machine,
        )  # fmt: skip

    def start(self, job: MigrationJob) -> Deferred[bool]:
        """
        Start C{job} and pump until nothing moves.
        """
        d = job.run()
        self.settle(lambda: hasResult(d))
        return d

    def settle(self, until: Callable[[], bool] = lambda: False) -> None:
        """
        Pump the connections and run the calls due now on the clock (the
        job yields to the reactor between reads), until C{until()} or
        nothing moves.
        """
        while True:
            self.endpoint.pump(until)
            now = self.clock.seconds()
            if until() or not any(c.getTime() <= now for c in self.clock.getDelayedCalls()):
                return
            self.clock.advance(0)

    def run(self, job: MigrationJob) -> bool:
        """
        Run C{job} to its end, moving the clock on to the next timed call
        whenever nothing else moves (a backoff, a timeout), then let every
        connection close.
        """
        d = self.start(job)
        self.waitFor(d)
        result = self.test.successResultOf(d)
        self.endpoint.pump()
        return result

    def waitFor(self, d: Deferred[bool]) -> None:
        """
        Pump, and move the clock on to the next timed call whenever
        nothing moves, until C{d} has its result.
        """
        for _ in range(10000):
            self.settle(lambda: hasResult(d))
            calls = self.clock.getDelayedCalls()
            if hasResult(d) or not calls:
                return
            self.clock.advance(min(c.getTime() for c in calls) - self.clock.seconds())

    def assertHolds(self, mailbox: str, numbers: Iterable[int]) -> None:
        """
        Check that C{mailbox} holds exactly the messages L{body} numbers
        C{numbers}, in any order.
        """
        self.test.assertEqual(
            sorted(m.body for m in self.mail.mailbox(USER, mailbox)),
            sorted(body(n) for n in numbers),
        )

    def contents(self, mailbox: str) -> list[tuple[bytes, tuple[str, ...], str | None]]:
        """
        The destination mailbox's messages as (body, flags, date).
        """
        return [(m.body, m.flags, m.internalDate) for m in self.mail.mailbox(USER, mailbox)]

    def finish(self) -> None:
        """
        Check that nothing is left scheduled and every connection closed.
        """
        self.test.assertEqual(self.clock.getDelayedCalls(), [])
        for server in self.endpoint.servers:
            self.test.assertTrue(server.transport.disconnected)  # type: ignore[union-attr]


def _descriptorsUnder(directory: str) -> list[str]:
    """
    What this process has open under C{directory}.
    """
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target == directory or target.startswith(directory + "/"):
            found.append(target)
    return found


def body(n: int, size: int = 0) -> bytes:
    """
    A small message, padded to at least C{size} octets.
    """
    text = b"Subject: message %d\r\n\r\nHello %d.\r\n" % (n, n)
    return text + b"x" * max(0, size - len(text) - 2) + (b"\r\n" if size else b"")


def populate(source: MemorySource, folder: SourceFolder, count: int, start: int = 0) -> list[bytes]:
    """
    Add C{count} messages numbered from C{start} to C{folder}.

    @return: their bodies.
    """
    bodies = []
    for n in range(start, start + count):
        source.add(folder, f"m{n}", body(n))
        bodies.append(body(n))
    return bodies


class SourceAndStoreFakesTests(SynchronousTestCase):
    """
    The test fakes provide their interfaces.
    """

    def test_interfaces(self) -> None:
        """
        L{MemorySource} is an L{IMessageSource}, L{RecordingStateStore} an
        L{IStateStore}, L{MemoryEndpoint} an L{IStreamClientEndpoint}.
        """
        self.assertTrue(verifyObject(IMessageSource, MemorySource()))
        self.assertTrue(verifyObject(IStateStore, RecordingStateStore()))
        self.assertTrue(
            verifyObject(IStreamClientEndpoint, MemoryEndpoint(Clock(), lambda attempt: None))
        )


def refuseUnsafe(name: str) -> bytes | None:
    """
    Refuse a mailbox name with C{*} as Dovecot refuses an invalid one.
    """
    return b"NO [CANNOT] Invalid mailbox name" if "*" in name else None


class MigrationJobTests(SynchronousTestCase):
    """
    L{MigrationJob} end to end against the fake server.
    """

    def test_migratesEverything(self) -> None:
        """
        Every message lands in the right mailbox with its flags and date;
        missing folders and their parents are created (names in modified
        UTF-7 on the wire, a delimiter inside a name replaced); the source's
        subscribed folders are subscribed, INBOX included, parents that are
        no source folder are not;
        the progress says done with the right counters; the state store has
        every outcome with the APPENDUID UIDs.
        """
        h = JobHarness(self)
        source = h.source
        inbox = source.addFolder("INBOX")
        archive = source.addFolder("Archive", "2019")
        drafts = source.addFolder("Entwürfe")
        dotted = source.addFolder("a.b")
        when = datetime(2020, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
        source.add(inbox, "i1", body(1), ("\\Seen",), when)
        source.add(inbox, "i2", body(2), ("\\Seen", "\\Flagged", "$Label1"))
        source.add(inbox, "i3", body(3), (), datetime(2019, 12, 31, 23, 59, 59, tzinfo=UTC))
        source.add(archive, "a1", body(4), ("\\Answered",), datetime(2019, 6, 1, tzinfo=UTC))
        source.add(archive, "a2", body(5))
        source.add(drafts, "d1", body(6), ("\\Draft",))
        source.add(dotted, "x1", body(7))
        settings = JobSettings(connections=1, batchMessages=2, windowMessages=3)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(
            h.mail.mailboxes(USER), ["INBOX", "Archive", "Archive.2019", "Entwürfe", "a_b"]
        )
        self.assertEqual(h.mail.subscriptions(USER), ["Archive.2019", "Entwürfe", "a_b", "INBOX"])
        self.assertEqual(
            h.contents("INBOX"),
            [
                (body(1), ("\\Seen",), "02-Jan-2020 03:04:05 +0200"),
                (body(2), ("\\Seen", "\\Flagged", "$Label1"), None),
                (body(3), (), "31-Dec-2019 23:59:59 +0000"),
            ],
        )
        self.assertEqual(
            h.contents("Archive.2019"),
            [(body(4), ("\\Answered",), "01-Jun-2019 00:00:00 +0000"), (body(5), (), None)],
        )
        self.assertEqual(h.contents("Archive"), [])
        self.assertEqual(h.contents("Entwürfe"), [(body(6), ("\\Draft",), None)])
        self.assertEqual(h.contents("a_b"), [(body(7), (), None)])
        received = h.endpoint.servers[0].received
        self.assertIn(b'0007 CREATE "Entw&APw-rfe"', received)
        # Creations and subscriptions are pipelined: all written before
        # the first reply; each SELECT follows the previous folder's
        # APPENDs without waiting for their replies.
        self.assertEqual(
            [line for line in received if line[5:].startswith((b"CREATE", b"SUBSCRIBE"))],
            [
                b'0005 CREATE "Archive"',
                b'0006 CREATE "Archive.2019"',
                b'0007 CREATE "Entw&APw-rfe"',
                b'0008 CREATE "a_b"',
                b'0009 SUBSCRIBE "Archive.2019"',
                b'000A SUBSCRIBE "Entw&APw-rfe"',
                b'000B SUBSCRIBE "a_b"',
                b'000C SUBSCRIBE "INBOX"',
            ],
        )

        progress = h.progress
        self.assertEqual(progress.state, JobState.DONE)
        self.assertIsNone(progress.error)
        self.assertEqual(
            (
                progress.messagesTotal,
                progress.messagesDone,
                progress.messagesFailed,
                progress.messagesAlreadyMigrated,
                progress.messagesPending,
                progress.foldersTotal,
                progress.bytesDone,
            ),
            (7, 7, 0, 0, 0, 4, sum(len(body(n)) for n in range(1, 8))),
        )
        self.assertIsNone(progress.currentFolder)

        expected = {}
        for folder, mailbox, keys in [
            ("INBOX", "INBOX", ["i1", "i2", "i3"]),
            ("Archive/2019", "Archive.2019", ["a1", "a2"]),
            ("Entwürfe", "Entwürfe", ["d1"]),
            ("a.b", "a_b", ["x1"]),
        ]:
            validity = h.mail.uidValidity(USER, mailbox)
            for key, stored in zip(keys, h.mail.mailbox(USER, mailbox)):
                expected[folder, key] = MessageOutcome(
                    folder, key, mailbox, len(stored.body), validity, stored.uid
                )
        self.assertEqual(h.store.outcomes(), expected)
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (7, 0))
        self.assertEqual(
            self.successResultOf(h.store.appendedKeys(JOB, "INBOX")), {"i1", "i2", "i3"}
        )
        self.assertEqual(len(h.endpoint.servers), 1)
        h.finish()

    def test_slashDelimiter(self) -> None:
        """
        Folder hierarchies are joined with the destination's delimiter, and
        a dot in a folder name is kept where the delimiter is C{/}.
        """
        h = JobHarness(self, delimiter="/")
        populate(h.source, h.source.addFolder("Archive", "2019"), 1)
        populate(h.source, h.source.addFolder("a.b"), 1, start=1)

        self.assertTrue(h.run(h.job()))

        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "Archive", "Archive/2019", "a.b"])
        self.assertEqual(h.contents("Archive/2019"), [(body(0), (), None)])
        self.assertEqual(h.contents("a.b"), [(body(1), (), None)])
        h.finish()

    def test_rerun(self) -> None:
        """
        A second run appends nothing and counts every message as already
        migrated; a message added to the source since is migrated by a third
        run, alone.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        drafts = h.source.addFolder("Entwürfe")
        populate(h.source, inbox, 3)
        populate(h.source, drafts, 2, start=3)
        job = h.job()
        self.assertTrue(h.run(job))
        self.assertEqual(len(h.contents("INBOX")) + len(h.contents("Entwürfe")), 5)

        self.assertTrue(h.run(job))
        self.assertEqual(len(h.endpoint.servers), 2)
        self.assertEqual(appendLines(h.endpoint.servers[1]), [])
        self.assertFalse(any(b"CREATE" in line for line in h.endpoint.servers[1].received))
        progress = h.progress
        self.assertEqual(progress.state, JobState.DONE)
        self.assertEqual(
            (progress.messagesTotal, progress.messagesDone, progress.messagesAlreadyMigrated),
            (5, 5, 5),
        )
        self.assertEqual((progress.bytesSent, progress.messagesFailed), (0, 0))
        self.assertEqual((progress.bytesDone, progress.bytesTotal), (160, 160))

        h.source.add(drafts, "new", body(99))
        self.assertTrue(h.run(job))
        self.assertEqual(len(appendLines(h.endpoint.servers[2])), 1)
        self.assertEqual(
            [m.body for m in h.mail.mailbox(USER, "Entwürfe")], [body(3), body(4), body(99)]
        )
        self.assertEqual(
            (progress.messagesTotal, progress.messagesDone, progress.messagesAlreadyMigrated),
            (6, 6, 5),
        )
        self.assertEqual(progress.bytesSent, len(body(99)))
        self.assertEqual(progress.bytesDone, 160 + len(body(99)))
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (6, 0))
        h.finish()

    def test_refusedMessage(self) -> None:
        """
        A message the server refuses is recorded as failed with the server's
        text; the others of its MULTIAPPEND batch are appended; the job is
        done, not failed.
        """
        h = JobHarness(
            self, refuse=lambda b: "NO [LIMIT] too big" if b == body(3) else None
        )
        inbox = h.source.addFolder("INBOX")
        populate(h.source, inbox, 6)
        settings = JobSettings(connections=1, batchMessages=6)

        self.assertTrue(h.run(h.job(settings)))

        # The batch of six was refused whole and split until m3 was alone.
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 5)
        h.assertHolds("INBOX", [n for n in range(6) if n != 3])
        self.assertEqual(
            self.successResultOf(h.store.failures(JOB)),
            [
                MessageOutcome(
                    "INBOX", "m3", "INBOX", len(body(3)), failure="refused by server: NO [LIMIT] too big",
                    subject="message 3",
                )
            ],
        )
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (5, 1))
        progress = h.progress
        self.assertEqual(progress.state, JobState.DONE_WITH_FAILURES)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (5, 1))
        h.finish()

    def test_transientRefusal(self) -> None:
        """
        A refusal the server marks as temporary (C{[UNAVAILABLE]}) is not
        recorded as a failure of every message: the job backs off and tries
        again, and fails after its attempts in a row that migrated nothing,
        saying why; a next run tries the messages again.
        """
        h = JobHarness(self, refuse=lambda b: "NO [UNAVAILABLE] Temporary failure, try later")
        populate(h.source, h.source.addFolder("INBOX"), 4)

        result = h.run(h.job(JobSettings(connections=1, batchMessages=4), retry=RetryPolicy(attempts=2)))

        self.assertFalse(result)
        self.assertEqual(self.successResultOf(h.store.failures(JOB)), [])
        self.assertEqual(h.progress.state, JobState.FAILED)
        assert h.progress.error is not None
        self.assertIn("gave up after 2 attempts", h.progress.error)
        self.assertIn("UNAVAILABLE", h.progress.error)
        self.assertEqual(h.endpoint.attempts, 3)
        # The refused batch stays journaled: the next run settles it.
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        h.finish()

    def test_unreadableMessage(self) -> None:
        """
        A message the source cannot read is recorded as failed with its
        reason, and the job completes with the others.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        populate(h.source, inbox, 2)
        h.source.add(inbox, "bad", UnreadableMessage("permission denied"))
        populate(h.source, inbox, 2, start=2)

        self.assertTrue(h.run(h.job()))

        self.assertEqual([m.body for m in h.mail.mailbox(USER, "INBOX")], [body(n) for n in range(4)])
        self.assertEqual(
            self.successResultOf(h.store.failures(JOB)),
            [
                MessageOutcome(
                    "INBOX", "bad", "INBOX", 100, failure="unreadable in the source: permission denied"
                )
            ],
        )
        self.assertEqual(h.progress.state, JobState.DONE_WITH_FAILURES)
        self.assertEqual((h.progress.messagesDone, h.progress.messagesFailed), (4, 1))
        h.finish()

    def test_loginRefused(self) -> None:
        """
        When the server refuses the login, the job fails with an error that
        says so and carries no password, and C{run} returns C{False}.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)

        self.assertFalse(h.run(h.job(password="wrong-pw")))

        progress = h.progress
        self.assertEqual(progress.state, JobState.FAILED)
        assert progress.error is not None
        self.assertIn("login refused", progress.error)
        self.assertIn("AUTHENTICATIONFAILED", progress.error)
        for secret in ("wrong-pw", PASSWORD, base64.b64encode(b"\0alice\0wrong-pw").decode()):
            self.assertNotIn(secret, progress.error)
        self.assertEqual(h.mail.mailbox(USER, "INBOX"), [])
        self.assertEqual(h.store.batches, [])
        h.finish()

    def test_connectionDropped(self) -> None:
        """
        When the connection drops mid-run the job connects again, settles
        the batch that was in flight, and finishes in the same run: every
        message once in the destination, every outcome recorded, the
        journal empty.
        """
        h = JobHarness(self, dropAfterAppends=1)
        populate(h.source, h.source.addFolder("INBOX"), 6)
        settings = JobSettings(connections=1, batchMessages=2, windowMessages=6)

        self.assertTrue(h.run(h.job(settings, identity="off")))

        progress = h.progress
        self.assertEqual(progress.state, JobState.DONE)
        h.assertHolds("INBOX", range(6))
        validity = h.mail.uidValidity(USER, "INBOX")
        outcomes = h.store.outcomes()
        self.assertEqual(
            sorted((o.messageKey, o.uidValidity, o.failure) for o in outcomes.values()),
            [(f"m{n}", validity, None) for n in range(6)],
        )
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (6, 0))
        self.assertEqual(progress.reconnects, 2)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_maildirFoldersClosed(self) -> None:
        """
        The folders a Maildir source holds open between read steps are
        closed when an attempt ends (here by its connection dropped after
        its first append), and no descriptor of the Maildir is left open
        at the end.
        """
        from imapmig.sources.maildir import MaildirSource
        from imapmig.sources.maildir.opened import HeldFolders

        root = os.path.abspath(self.mktemp())
        for subdir in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(root, subdir))
        for n in range(6):
            with open(os.path.join(root, "cur", f"170000000{n}.m{n}.host:2,S"), "wb") as f:
                f.write(body(n))
        held = HeldFolders(4)
        h = JobHarness(self, dropAfterAppends=1)
        source = h.source = MaildirSource(root, held)  # type: ignore[assignment]
        closing: list[int] = []
        close = source.close

        def closeCounting() -> None:
            closing.append(len(held))
            close()

        self.patch(source, "close", closeCounting)
        # A window of two: the first attempt has read a few steps, not the
        # last, when its connection drops.
        settings = JobSettings(connections=1, batchMessages=1, windowMessages=2)

        self.assertTrue(h.run(h.job(settings, identity="off")))

        self.assertGreater(len(closing), 1)
        self.assertEqual(closing[0], 1)
        self.assertEqual(len(held), 0)
        self.assertEqual(_descriptorsUnder(root), [])
        self.assertEqual(len(h.contents("INBOX")), 6)
        h.finish()

    def test_connectionDroppedErrorSaysLost(self) -> None:
        """
        A job whose every connection drops fails after its attempts, with
        an error that says the connection was lost, not that it was closed
        cleanly.
        """
        h = JobHarness(self, dropAfterAppends=0)
        populate(h.source, h.source.addFolder("INBOX"), 2)

        self.assertFalse(h.run(h.job(retry=RetryPolicy(attempts=3, messageAttempts=10))))

        assert h.progress.error is not None
        self.assertNotIn("closed cleanly", h.progress.error)
        self.assertIn("connection lost", h.progress.error.lower())
        self.assertEqual(h.endpoint.attempts, 4)
        h.finish()

    def test_outcomesNotRecorded(self) -> None:
        """
        When the state store cannot record the outcomes, the job fails
        rather than reporting done: a next run would otherwise append every
        message again.
        """
        h = JobHarness(self)
        h.store.failWith = PermanentError("disk full")
        populate(h.source, h.source.addFolder("INBOX"), 3)

        result = h.run(h.job())

        self.flushLoggedErrors(PermanentError)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 3)
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (0, 0))
        self.assertEqual(h.progress.state, JobState.FAILED)
        self.assertFalse(result)
        h.finish()

    def test_stop(self) -> None:
        """
        A stopped job takes no new work, lets the messages in flight get
        their outcomes, and ends stopped.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 6)
        h.source.holdAfter = 1
        job = h.job(JobSettings(connections=1, batchMessages=1))
        d = h.start(job)
        self.assertNoResult(d)

        d.cancel()
        self.assertEqual(h.progress.state, JobState.STOPPING)
        h.source.release()
        h.settle(lambda: hasResult(d))

        self.assertFalse(self.successResultOf(d))
        h.endpoint.pump()
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.progress.error, "stopped before the end")
        appended = len(h.mail.mailbox(USER, "INBOX"))
        self.assertLess(appended, 6)
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (appended, 0))
        # The unit being sent stays journaled: the next run settles it and
        # copies the rest, each message once.
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        h.source.holdAfter = None
        self.assertTrue(h.run(job))
        h.assertHolds("INBOX", range(6))
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_twoConnections(self) -> None:
        """
        With two connections, two sessions are opened and both append; every
        message lands once.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        archive = h.source.addFolder("Archive")
        populate(h.source, inbox, 8)
        populate(h.source, archive, 8, start=8)
        settings = JobSettings(
            connections=2, batchMessages=1, windowMessages=2, unitMessages=2
        )

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, 2)
        first, second = h.endpoint.servers
        self.assertTrue(appendLines(first))
        self.assertTrue(appendLines(second))
        self.assertEqual(len(appendLines(first)) + len(appendLines(second)), 16)
        h.assertHolds("INBOX", range(8))
        h.assertHolds("Archive", range(8, 16))
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (16, 0))
        self.assertEqual(h.progress.state, JobState.DONE)
        h.finish()

    def test_oneConnectionPerMailbox(self) -> None:
        """
        Connections take shares of what is left, but never of a mailbox
        another connection is appending to (two connections in one Maildir
        mailbox make Dovecot re-read it for each batch): with a folder of
        30 messages and one of 10, each mailbox is appended to by one
        connection alone; the one that took the small folder ends when it
        is done.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 30)
        populate(h.source, h.source.addFolder("Archive"), 10, start=30)
        settings = JobSettings(connections=2, batchMessages=1, windowMessages=2, unitMessages=30)

        self.assertTrue(h.run(h.job(settings)))

        first, second = h.endpoint.servers
        self.assertEqual(len(appendLines(first)) + len(appendLines(second)), 40)
        mailboxes = [
            {line.split(b" APPEND ", 1)[1].split(b" ", 1)[0] for line in appendLines(server)}
            for server in (first, second)
        ]
        self.assertEqual(sorted(sorted(m) for m in mailboxes), [[b'"Archive"'], [b'"INBOX"']])
        h.assertHolds("INBOX", range(30))
        h.assertHolds("Archive", range(30, 40))
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (40, 0))
        h.finish()

    def test_smallerBatchesAtTheEnd(self) -> None:
        """
        With two connections, once less than a batch for each is left
        untaken (L{SharedUnits.ending}), the connections send batches of a
        quarter batch at most (here 1 message where a batch is 4), so
        that each ends with little in flight; one connection sends whole
        batches to the end.  Every message lands once either way.
        """
        appends: list[int] = []
        for connections in (1, 2):
            h = JobHarness(self)
            for index, name in enumerate(["INBOX", "Archive"]):
                populate(h.source, h.source.addFolder(name), 24, start=100 * index)
            settings = JobSettings(
                connections=connections, batchMessages=4, windowMessages=8, unitMessages=24
            )
            self.assertTrue(h.run(h.job(settings)))
            lines = [line for server in h.endpoint.servers for line in appendLines(server)]
            appends.append(len(lines))
            h.assertHolds("INBOX", range(24))
            h.assertHolds("Archive", range(100, 124))
            self.assertEqual(self.successResultOf(h.store.summary(JOB)), (48, 0))
            h.finish()
        # 48 messages in batches of 4: 13 APPENDs alone (one short), 21 on
        # two connections (16 with whole batches to the end).
        self.assertEqual(appends, [13, 21])

    def test_oneFolderOneConnection(self) -> None:
        """
        A job of one folder with two connections opens one: a second
        could not append into the mailbox the first is appending to.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 30)
        settings = JobSettings(connections=2, batchMessages=1, windowMessages=2, unitMessages=5)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, 1)
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 30)
        h.assertHolds("INBOX", range(30))
        h.finish()

    def test_preparedInOneRoundTrip(self) -> None:
        """
        Before appending, the job creates the missing mailboxes, subscribes
        them, and SELECTs every target mailbox (for its PERMANENTFLAGS) in
        one flight of pipelined commands, not a round trip per command: at
        20 ms of RTT each round trip costs the whole connection 20 ms.
        """
        h = JobHarness(self)
        for n, name in enumerate(["INBOX", "Archive", "Sent", "Lists"]):
            populate(h.source, h.source.addFolder(name), 2, start=2 * n)

        self.assertTrue(h.run(h.job()))

        flight = next(f for f in h.endpoint.flights(0) if any(b" SELECT " in line for line in f))
        commands = sorted(line.split(b" ", 1)[1] for line in flight)
        self.assertEqual(
            commands,
            [
                b'CREATE "Archive"',
                b'CREATE "Lists"',
                b'CREATE "Sent"',
                b'SELECT "Archive"',
                b'SELECT "INBOX"',
                b'SELECT "Lists"',
                b'SELECT "Sent"',
                b'SUBSCRIBE "Archive"',
                b'SUBSCRIBE "INBOX"',
                b'SUBSCRIBE "Lists"',
                b'SUBSCRIBE "Sent"',
            ],
        )
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 4)
        h.finish()

    def test_claimsInTheFlight(self) -> None:
        """
        A folder with a use the destination lacks has its mailbox created
        first, and the destination listed again right behind (the server
        may give the mailbox the use): in the same flight go the CREATEs of
        the folders without a use, and after the LIST the SELECTs of every
        target: one round trip in all.
        """
        h = JobHarness(self)
        # The server gives "Sent" its use when it is created.
        h.mail.specialUse["Sent"] = "\\Sent"
        populate(h.source, h.source.addFolder("INBOX"), 2)
        populate(h.source, h.source.addFolder("Sent", use="\\Sent"), 2, start=2)
        populate(h.source, h.source.addFolder("Lists"), 2, start=4)

        self.assertTrue(h.run(h.job()))

        flights = h.endpoint.flights(0)
        flight = next(f for f in flights if any(b" CREATE " in line for line in f))
        commands = [line.split(b" ", 1)[1] for line in flight]
        self.assertEqual(
            sorted(commands),
            [
                b'CREATE "Lists"',
                b'CREATE "Sent"',
                b'LIST "" "*"',
                b'SELECT "INBOX"',
                b'SELECT "Lists"',
                b'SELECT "Sent"',
                b'SUBSCRIBE "INBOX"',
                b'SUBSCRIBE "Lists"',
                b'SUBSCRIBE "Sent"',
            ],
        )
        # The claim first; each mailbox created before it is listed or
        # selected.
        self.assertEqual(commands[0], b'CREATE "Sent"')
        self.assertLess(commands.index(b'CREATE "Lists"'), commands.index(b'LIST "" "*"'))
        self.assertLess(commands.index(b'CREATE "Lists"'), commands.index(b'SELECT "INBOX"'))
        later = flights[flights.index(flight) + 1 :]
        self.assertFalse([line for f in later for line in f if b" CREATE " in line])
        self.assertEqual(sorted(h.mail.mailboxes(USER)), ["INBOX", "Lists", "Sent"])
        self.assertEqual(
            [len(h.mail.mailbox(USER, name)) for name in ["INBOX", "Lists", "Sent"]], [2, 2, 2]
        )
        h.finish()

    def test_claimedUseShared(self) -> None:
        """
        A second folder of a use claimed in the flight is mapped once the
        destination shows where the use went: the first goes to the
        mailbox of the use, the second keeps a mailbox of its own, created
        (without the use) and selected right after.
        """
        h = JobHarness(self)
        h.mail.specialUse["Sent"] = "\\Sent"
        populate(h.source, h.source.addFolder("INBOX"), 1)
        populate(h.source, h.source.addFolder("Sent", use="\\Sent"), 2, start=1)
        populate(h.source, h.source.addFolder("Sent Items", use="\\Sent"), 3, start=3)

        self.assertTrue(h.run(h.job()))

        creates = [
            [line.split(b" ", 1)[1] for line in f if b" CREATE " in line]
            for f in h.endpoint.flights(0)
        ]
        self.assertEqual(
            [c for c in creates if c], [[b'CREATE "Sent"'], [b'CREATE "Sent Items"']]
        )
        received = h.endpoint.servers[0].received
        self.assertLess(
            received.index(next(line for line in received if line.endswith(b'CREATE "Sent Items"'))),
            received.index(next(line for line in received if line.endswith(b'SELECT "Sent Items"'))),
        )
        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "Sent", "Sent Items"])
        self.assertEqual(
            [len(h.mail.mailbox(USER, name)) for name in ["INBOX", "Sent", "Sent Items"]],
            [1, 2, 3],
        )
        h.finish()

    def test_uncreatableMailboxInTheFlight(self) -> None:
        """
        With C{folderNameFallback} off, a mailbox the server refuses to
        create (and so to SELECT) in that flight fails only its own
        messages, each recorded with the reason.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)
        populate(h.source, h.source.addFolder("Bad*Name"), 2, start=2)
        h.mail.refuseCreate = refuseUnsafe

        self.assertTrue(h.run(h.job(JobSettings(folderNameFallback=False))))

        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 2)
        self.assertEqual(h.mail.mailboxes(USER), ["INBOX"])
        failures = sorted(o.failure or "" for o in h.store.outcomes().values() if o.failure)
        self.assertEqual(len(failures), 2)
        self.assertIn("cannot create mailbox 'Bad*Name'", failures[0])
        self.assertEqual(self.successResultOf(h.store.folderFallbacks(JOB)), [])
        h.finish()

    def test_folderNameFallback(self) -> None:
        """
        A folder whose name the server refuses as invalid is created under
        its safe spelling (parents too), its messages go there, and the
        fallback is recorded; a rerun appends nothing and does not ask for
        the refused name again.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)
        populate(h.source, h.source.addFolder("Bad*Name"), 2, start=2)
        populate(h.source, h.source.addFolder("Bad*Name", "child"), 1, start=4)
        h.mail.refuseCreate = refuseUnsafe

        self.assertTrue(h.run(h.job()))

        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "Bad_Name", "Bad_Name.child"])
        self.assertEqual(len(h.mail.mailbox(USER, "Bad_Name")), 2)
        self.assertEqual(len(h.mail.mailbox(USER, "Bad_Name.child")), 1)
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        self.assertEqual(
            self.successResultOf(h.store.folderFallbacks(JOB)),
            [
                FolderFallback("Bad*Name", "Bad_Name", "[CANNOT] Invalid mailbox name"),
                FolderFallback(
                    "Bad*Name.child", "Bad_Name.child", "[CANNOT] Invalid mailbox name"
                ),
            ],
        )

        self.assertTrue(h.run(h.job()))
        received = [line for server in h.endpoint.servers for line in server.received]
        self.assertEqual(
            len([line for line in received if line.endswith(b'CREATE "Bad*Name"')]), 1
        )
        self.assertEqual(len(h.mail.mailbox(USER, "Bad_Name")), 2)
        h.finish()

    def test_folderNameFallbackRefused(self) -> None:
        """
        When the safe spelling is refused too, the folder's messages are
        recorded as failed with both replies.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Bad*Name"), 2)

        def refuseBoth(name: str) -> bytes | None:
            if name.startswith("Bad"):
                return b"NO Invalid mailbox name"
            return None

        h.mail.refuseCreate = refuseBoth
        self.assertTrue(h.run(h.job()))

        failures = sorted(o.failure or "" for o in h.store.outcomes().values() if o.failure)
        self.assertEqual(len(failures), 2)
        self.assertEqual(
            failures[0],
            "cannot create mailbox 'Bad*Name': Invalid mailbox name; the fallback name"
            " 'Bad_Name' was refused too: Invalid mailbox name",
        )
        self.assertEqual(self.successResultOf(h.store.folderFallbacks(JOB)), [])
        h.finish()

    def test_folderNameFallbackToFolderCreatedThisRun(self) -> None:
        """
        A fallback that names a folder the same run created (the source
        has C{Bad*Name} and C{Bad_Name}) goes there: its messages are
        copied, not failed, the fallback is recorded, and a rerun appends
        nothing; every run agrees.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 1)
        populate(h.source, h.source.addFolder("Bad*Name"), 2, start=1)
        populate(h.source, h.source.addFolder("Bad_Name"), 2, start=3)
        h.mail.refuseCreate = refuseUnsafe

        self.assertTrue(h.run(h.job()))

        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "Bad_Name"])
        h.assertHolds("Bad_Name", range(1, 5))
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        self.assertEqual(
            self.successResultOf(h.store.folderFallbacks(JOB)),
            [FolderFallback("Bad*Name", "Bad_Name", "[CANNOT] Invalid mailbox name")],
        )
        received = [line for server in h.endpoint.servers for line in server.received]
        self.assertEqual(len([line for line in received if b'CREATE "Bad_Name"' in line]), 1)

        self.assertTrue(h.run(h.job()))
        h.assertHolds("Bad_Name", range(1, 5))
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        h.finish()

    def test_folderNameFallbackUnderParentCreatedThisRun(self) -> None:
        """
        The parent of a fallback that the same run created is not created
        a second time.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("P"), 1)
        populate(h.source, h.source.addFolder("P", "Bad*Name"), 2, start=1)
        h.mail.refuseCreate = refuseUnsafe

        self.assertTrue(h.run(h.job()))

        h.assertHolds("P.Bad_Name", [1, 2])
        received = [line for server in h.endpoint.servers for line in server.received]
        self.assertEqual(
            [line.partition(b" ")[2] for line in received if b" CREATE " in line],
            [b'CREATE "P"', b'CREATE "P.Bad*Name"', b'CREATE "P.Bad_Name"'],
        )
        h.finish()

    def test_folderNameFallbackAlreadyExists(self) -> None:
        """
        A fallback whose CREATE says it exists already (another client made
        it since the LIST) is used: the folder's messages go there.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Bad*Name"), 2)

        def madeMeanwhile(name: str) -> bytes | None:
            if name == "Bad_Name":
                h.mail.create(USER, name)
                return b"NO [ALREADYEXISTS] Mailbox already exists"
            return refuseUnsafe(name)

        h.mail.refuseCreate = madeMeanwhile
        self.assertTrue(h.run(h.job()))

        h.assertHolds("Bad_Name", [0, 1])
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        self.assertEqual(
            [f.fallback for f in self.successResultOf(h.store.folderFallbacks(JOB))],
            ["Bad_Name"],
        )
        h.finish()

    def test_createAlreadyExists(self) -> None:
        """
        A mailbox whose CREATE says it exists already (made since the LIST)
        is used, not failed.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Lists"), 2)

        def madeMeanwhile(name: str) -> bytes | None:
            h.mail.create(USER, name)
            return b"NO [ALREADYEXISTS] Mailbox already exists"

        h.mail.refuseCreate = madeMeanwhile
        self.assertTrue(h.run(h.job()))

        h.assertHolds("Lists", [0, 1])
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        h.finish()

    def test_codelessRefusalNoFallback(self) -> None:
        """
        A refusal without response code that does not say the name is
        invalid (a busy server) fails the folder's messages for this run
        without a fallback being taken or recorded; the next run creates
        the folder under its own name.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Café (alt) #1"), 2)
        refusals = [b"NO Server busy, try again later"]
        h.mail.refuseCreate = lambda name: refusals.pop() if refusals else None

        self.assertTrue(h.run(h.job()))

        self.assertEqual(h.mail.mailboxes(USER), ["INBOX"])
        self.assertEqual(self.successResultOf(h.store.folderFallbacks(JOB)), [])
        failures = {o.failure for o in h.store.outcomes().values() if o.failure}
        self.assertEqual(
            failures,
            {"cannot create mailbox 'Café (alt) #1': Server busy, try again later"},
        )

        self.assertTrue(h.run(h.job()))
        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "Café (alt) #1"])
        h.assertHolds("Café (alt) #1", [0, 1])
        h.finish()

    def test_folderNameFallbackSharedLogged(self) -> None:
        """
        Refused folders whose fallbacks are one mailbox are logged as
        merged there, once.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("Bad*Name"), 2)
        populate(h.source, h.source.addFolder("Bad?Name"), 2, start=2)
        h.mail.refuseCreate = lambda name: (
            b"NO [CANNOT] Invalid mailbox name" if "*" in name or "?" in name else None
        )

        with capturedLogs() as events:
            self.assertTrue(h.run(h.job()))

        h.assertHolds("Bad_Name", range(4))
        shared = [formatEvent(e) for e in events if "merged there" in e.get("log_format", "")]
        self.assertEqual(
            shared,
            [
                "Job alice-job: folders 'Bad*Name', 'Bad?Name' all go to 'Bad_Name';"
                " their messages are merged there"
            ],
        )
        h.finish()

    def test_sharedLoggedOnce(self) -> None:
        """
        Folders that map onto one mailbox without any fallback are logged
        as merged there once.
        """
        h = JobHarness(self, capabilities=DEFAULT_CAPABILITIES + ("NAMESPACE",))
        h.mail.prefix = "INBOX."
        populate(h.source, h.source.addFolder("INBOX", "x"), 1)
        populate(h.source, h.source.addFolder("x"), 1, start=1)
        populate(h.source, h.source.addFolder("Bad*Name"), 1, start=2)
        h.mail.refuseCreate = refuseUnsafe

        with capturedLogs() as events:
            self.assertTrue(h.run(h.job()))

        shared = [formatEvent(e) for e in events if "merged there" in e.get("log_format", "")]
        self.assertEqual(
            shared,
            [
                "Job alice-job: folders 'INBOX/x', 'x' all go to 'INBOX.x'; their messages"
                " are merged there"
            ],
        )
        h.finish()

    def test_prefixedDestination(self) -> None:
        """
        Into a server whose personal namespace is C{INBOX.} (Courier),
        folders go under the prefix: C{Sent} into C{INBOX.Sent}, the
        source's C{INBOX/x} and C{x} both into C{INBOX.x}; INBOX itself is
        not created; a rerun appends nothing.
        """
        h = JobHarness(self, capabilities=DEFAULT_CAPABILITIES + ("NAMESPACE",))
        h.mail.prefix = "INBOX."
        populate(h.source, h.source.addFolder("INBOX"), 2)
        populate(h.source, h.source.addFolder("Sent"), 1, start=2)
        populate(h.source, h.source.addFolder("INBOX", "x"), 1, start=3)
        populate(h.source, h.source.addFolder("x"), 1, start=4)

        self.assertTrue(h.run(h.job()))

        self.assertEqual(h.mail.mailboxes(USER), ["INBOX", "INBOX.Sent", "INBOX.x"])
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 2)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX.Sent")), 1)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX.x")), 2)
        self.assertFalse(any(o.failure for o in h.store.outcomes().values()))
        received = [line for server in h.endpoint.servers for line in server.received]
        self.assertIn(b"NAMESPACE", [line.partition(b" ")[2] for line in received])

        self.assertTrue(h.run(h.job()))
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX.x")), 2)
        h.finish()

    def test_extraConnectionsOpenEarly(self) -> None:
        """
        On a later run, the extra connections log in while the first
        prepares the destination (LIST, CREATE, SELECT), not after it.
        """
        h = JobHarness(self)
        names = ["INBOX", "Archive", "Sent"]
        folders = [h.source.addFolder(name) for name in names]
        for n, folder in enumerate(folders):
            populate(h.source, folder, 4, start=4 * n)
        settings = JobSettings(connections=3, unitMessages=2, batchMessages=2)
        self.assertTrue(h.run(h.job(settings)))
        first = h.endpoint.attempts
        for n, folder in enumerate(folders):
            populate(h.source, folder, 4, start=12 + 4 * n)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, first + 3)
        firstSelect = h.endpoint.arrival(first, b"SELECT")
        self.assertLess(h.endpoint.arrival(first + 1, b"AUTHENTICATE"), firstSelect)
        self.assertLess(h.endpoint.arrival(first + 2, b"AUTHENTICATE"), firstSelect)
        self.assertEqual(sum(len(h.mail.mailbox(USER, name)) for name in names), 24)
        h.finish()

    def test_createdWhileListed(self) -> None:
        """
        On a first run, the first connection creates, subscribes and
        SELECTs the folders' mailboxes (one flight) while their messages
        are still being listed, and nothing of it is sent again once the
        listing is done: only the APPENDs follow.
        """
        h = JobHarness(self)
        names = ["INBOX", "Archive", "Sent"]
        folders = [h.source.addFolder(name) for name in names]
        for n, folder in enumerate(folders):
            populate(h.source, folder, 2, start=2 * n)
        listing: Deferred[None] = Deferred()
        h.source.heldListings[folders[2].key] = listing

        d = h.start(h.job())
        h.settle()

        received = [line.split(b" ", 1)[1] for line in h.endpoint.servers[0].received]
        self.assertIn(b'CREATE "Archive"', received)
        self.assertIn(b'SELECT "Sent"', received)
        self.assertNotIn(b"APPEND", [line.split(b" ")[0] for line in received])
        listing.callback(None)
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        after = [line.split(b" ")[1:2] for line in h.endpoint.servers[0].received[len(received):]]
        self.assertNotIn([b"CREATE"], after)
        self.assertIn([b"APPEND"], after)
        self.assertEqual(sum(len(h.mail.mailbox(USER, name)) for name in names), 6)
        h.finish()

    def test_notMigratedFolderNotCreatedEarly(self) -> None:
        """
        A folder whose messages are not migrated (a label view's) has no
        part in the early creation of a first run, which then serves the
        folders migrated: the destination is listed once.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)
        skipped = h.source.addFolder("All Mail")
        populate(h.source, skipped, 2, start=2)
        h.source._folders[-1] = evolve(skipped, notMigrated="in another folder")

        self.assertTrue(h.run(h.job()))

        received = [line.split(b" ", 1)[1:] for line in h.endpoint.servers[0].received]
        self.assertNotIn([b'CREATE "All Mail"'], received)
        # Prepared early, as for the folders migrated alone: one LIST.
        self.assertEqual(received.count([b'LIST "" "*"']), 1)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 2)
        h.finish()

    def test_droppedWhileCreatingEarly(self) -> None:
        """
        A first connection dropped while it creates the mailboxes during
        the listing fails that attempt only: the job connects again,
        prepares the destination anew and copies every message once.
        """
        h = JobHarness(self)
        makeServer = h.endpoint._makeServer

        class DroppingAtCreate(FakeIMAPServer):
            def lineReceived(self, line: bytes) -> None:
                if line.split(b" ")[1:2] == [b"CREATE"]:
                    assert self.transport is not None
                    self.transport.loseConnection()
                    return
                super().lineReceived(line)

        def dropFirst(attempt: int) -> FakeIMAPServer | None:
            if attempt == 0:
                return DroppingAtCreate(h.mail)
            return makeServer(attempt)

        h.endpoint._makeServer = dropFirst
        names = ["INBOX", "Archive"]
        for n, name in enumerate(names):
            populate(h.source, h.source.addFolder(name), 2, start=2 * n)

        self.assertTrue(h.run(h.job()))

        self.assertGreaterEqual(h.endpoint.attempts, 2)
        h.assertHolds("INBOX", range(2))
        h.assertHolds("Archive", range(2, 4))
        h.finish()

    def test_listedFolderUnreadableAfterCreation(self) -> None:
        """
        A folder that cannot be listed after its mailbox was created early
        fails the job naming it; the other folders are prepared again from
        the start and copied.
        """
        h = JobHarness(self)
        names = ["INBOX", "Archive", "Sent"]
        folders = [h.source.addFolder(name) for name in names]
        for n, folder in enumerate(folders):
            populate(h.source, folder, 2, start=2 * n)
        h.source.listingErrors[folders[1].key] = SourceError("Archive: permission denied")

        self.assertFalse(h.run(h.job()))

        self.assertIn("permission denied", h.progress.error or "")
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 2)
        self.assertEqual(len(h.mail.mailbox(USER, "Sent")), 2)
        h.finish()

    def test_extraConnectionsOpenWhileListing(self) -> None:
        """
        On a first run (nothing recorded), the extra connections are
        opened as soon as what the listing found is worth them, while the
        rest of the source is listed; on a later run, only once the plan
        (the records read) says so.
        """
        h = JobHarness(self)
        names = ["INBOX", "Archive", "Sent"]
        folders = [h.source.addFolder(name) for name in names]
        for n, folder in enumerate(folders):
            populate(h.source, folder, 4, start=4 * n)
        seen: list[int] = []
        h.source.onListing = lambda folder: seen.append(h.endpoint.attempts)
        settings = JobSettings(connections=3, unitMessages=2, batchMessages=2)

        self.assertTrue(h.run(h.job(settings)))

        # Opening: the first connection as the listing starts; the second
        # once INBOX and Archive are listed, the third after Sent.
        self.assertEqual(seen, [1, 1, 2])
        self.assertEqual(h.endpoint.attempts, 3)
        self.assertEqual(sum(len(h.mail.mailbox(USER, name)) for name in names), 12)

        populate(h.source, folders[2], 4, start=12)
        populate(h.source, folders[0], 4, start=16)
        seen.clear()
        self.assertTrue(h.run(h.job(settings)))
        self.assertEqual(seen, [4, 4, 4])
        self.assertEqual(h.endpoint.attempts, 5)
        self.assertEqual(sum(len(h.mail.mailbox(USER, name)) for name in names), 20)
        h.finish()

    def test_logsInWhileListing(self) -> None:
        """
        The first connection logs in while the source is listed: a source
        that lists each folder at once (a Maildir) is listed with the
        reactor running before each folder, the first too, so the connect,
        the greeting and the login go on meanwhile.
        """
        h = JobHarness(self)
        names = ["INBOX", "A", "B", "C", "D", "E"]
        for n, name in enumerate(names):
            populate(h.source, h.source.addFolder(name), 1, start=n)
        seen: list[list[bytes]] = []
        h.source.onListing = lambda folder: seen.append(
            [line.split(b" ")[1] for server in h.endpoint.servers for line in server.received]
        )

        self.assertTrue(h.run(h.job()))

        self.assertEqual(len(seen), len(names))
        self.assertIn(b"AUTHENTICATE", seen[0])
        self.assertEqual(len(h.mail.mailbox(USER, "E")), 1)
        h.finish()

    def test_listingFailsConnectionDropped(self) -> None:
        """
        When the source cannot be listed at all, the job fails saying why,
        and the destination connection opened meanwhile is dropped.
        """
        h = JobHarness(self)
        h.source.foldersError = SourceError("no such Maildir: /x/Maildir")

        self.assertFalse(h.run(h.job()))

        self.assertIn("no such Maildir: /x/Maildir", h.progress.error or "")
        self.assertEqual(h.endpoint.attempts, 1)
        self.assertTrue(all(pump.clientIO.disconnected for pump in h.endpoint.pumps))
        self.assertEqual(h.store.batches, [])
        self.flushLoggedErrors()

    def test_extraConnectionsOnlyForFolders(self) -> None:
        """
        No more connections are opened than there are folders to copy (a
        connection never appends into another's mailbox).
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 3)
        populate(h.source, h.source.addFolder("Archive"), 3, start=3)
        settings = JobSettings(connections=4, unitMessages=2, batchMessages=1)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, 2)
        h.finish()

    def test_noExtraConnectionForLessThanABatch(self) -> None:
        """
        A job whose pending work is less than a batch per connection opens
        fewer connections than configured, however many units it has: four
        messages in two folders, a batch of three, two connections
        configured, go over one connection.  Every message arrives.
        """
        h = JobHarness(self)
        for n, name in enumerate(["INBOX", "Archive"]):
            populate(h.source, h.source.addFolder(name), 2, start=2 * n)
        settings = JobSettings(connections=2, batchMessages=3)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, 1)
        self.assertEqual(len(h.mail.mailbox(USER, "INBOX")) + len(h.mail.mailbox(USER, "Archive")), 4)
        h.finish()

    def test_extraConnectionsDroppedOnFailure(self) -> None:
        """
        When the first connection fails while it prepares the destination,
        the extra connections opened meanwhile are dropped with it; the job
        backs off, then connects again and finishes.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 4)
        populate(h.source, h.source.addFolder("Archive"), 4, start=4)

        class DropsOnSelect(FakeIMAPServer):
            def lineReceived(self, line: bytes) -> None:
                if b" SELECT " in line:
                    self.transport.loseConnection()  # type: ignore[union-attr]
                    return
                FakeIMAPServer.lineReceived(self, line)

        def makeServer(attempt: int) -> FakeIMAPServer:
            kind = DropsOnSelect if attempt == 0 else FakeIMAPServer
            return kind(h.mail, DEFAULT_CAPABILITIES)

        h.endpoint = MemoryEndpoint(h.clock, makeServer)
        d = h.start(h.job(JobSettings(connections=2, unitMessages=2, batchMessages=2)))
        h.endpoint.pump()

        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        self.assertEqual(h.endpoint.attempts, 2)
        self.assertTrue(all(pump.clientIO.disconnected for pump in h.endpoint.pumps))
        self.assertEqual(h.mail.mailbox(USER, "INBOX"), [])
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.assertHolds("INBOX", range(4))
        h.finish()

    def test_secondConnectionRefused(self) -> None:
        """
        If the second connection is refused, the job completes with the
        first alone.
        """
        h = JobHarness(self, refuseConnections=(1,))
        populate(h.source, h.source.addFolder("INBOX"), 8)
        populate(h.source, h.source.addFolder("Archive"), 8, start=8)
        settings = JobSettings(connections=2, batchMessages=1, windowMessages=2, unitMessages=2)

        self.assertTrue(h.run(h.job(settings)))

        self.assertEqual(h.endpoint.attempts, 2)
        self.assertEqual(len(h.endpoint.servers), 1)
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 16)
        self.assertEqual(
            [m.body for m in h.mail.mailbox(USER, "INBOX")], [body(n) for n in range(8)]
        )
        self.assertEqual(
            [m.body for m in h.mail.mailbox(USER, "Archive")], [body(n) for n in range(8, 16)]
        )
        self.assertEqual(h.progress.state, JobState.DONE)
        self.assertEqual(h.progress.messagesDone, 16)
        h.finish()

    def test_withoutMultiappend(self) -> None:
        """
        Without MULTIAPPEND (nor SASL-IR: LOGIN is used), every APPEND
        carries one message and everything is migrated.
        """
        h = JobHarness(self, capabilities=("IMAP4rev1", "LITERAL+", "UIDPLUS"))
        populate(h.source, h.source.addFolder("INBOX"), 5)

        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=50))))

        server = h.endpoint.servers[0]
        self.assertIn(f'0001 LOGIN "{USER}" "{PASSWORD}"'.encode(), server.received)
        self.assertEqual(len(appendLines(server)), 5)
        self.assertEqual([m.body for m in h.mail.mailbox(USER, "INBOX")], [body(n) for n in range(5)])
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (5, 0))
        h.finish()

    def test_synchronizingLiteralsOnly(self) -> None:
        """
        With neither LITERAL+ nor LITERAL-, every literal is synchronizing
        and everything is migrated, in MULTIAPPEND batches.
        """
        h = JobHarness(self, capabilities=("IMAP4rev1", "MULTIAPPEND", "UIDPLUS"))
        populate(h.source, h.source.addFolder("INBOX"), 5)

        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=2))))

        server = h.endpoint.servers[0]
        literals = [line for line in server.received if line.endswith(b"}")]
        self.assertEqual(len(literals), 5)
        self.assertFalse([line for line in literals if line.endswith(b"+}")])
        self.assertEqual(len(appendLines(server)), 3)
        self.assertEqual([m.body for m in h.mail.mailbox(USER, "INBOX")], [body(n) for n in range(5)])
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (5, 0))
        h.finish()

    def test_literalMinus(self) -> None:
        """
        With LITERAL- only, messages up to 4096 octets go as
        non-synchronizing literals, larger ones as synchronizing ones; all
        are migrated.
        """
        h = JobHarness(self, capabilities=("IMAP4rev1", "LITERAL-", "MULTIAPPEND", "UIDPLUS"))
        inbox = h.source.addFolder("INBOX")
        bodies = [body(0), body(1, 5000), body(2, 4096), body(3)]
        for n, b in enumerate(bodies):
            h.source.add(inbox, f"m{n}", b)

        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=4))))

        received = h.endpoint.servers[0].received
        self.assertIn(b"{5000}", b"".join(received))
        self.assertIn(b"{4096+}", b"".join(received))
        self.assertEqual([m.body for m in h.mail.mailbox(USER, "INBOX")], bodies)
        h.finish()

    def test_withoutUIDPLUS(self) -> None:
        """
        Without UIDPLUS the messages are recorded as appended without UIDs.
        """
        h = JobHarness(self, capabilities=("IMAP4rev1", "LITERAL+", "MULTIAPPEND"))
        populate(h.source, h.source.addFolder("INBOX"), 3)

        self.assertTrue(h.run(h.job()))

        outcomes = h.store.outcomes()
        self.assertEqual(len(outcomes), 3)
        for outcome in outcomes.values():
            self.assertEqual((outcome.appended, outcome.uidValidity, outcome.uid), (True, None, None))
        h.finish()

    def test_batchesGrowWithTheMailbox(self) -> None:
        """
        A MULTIAPPEND batch grows with the destination mailbox: into an
        INBOX that holds 400 messages (its SELECT's EXISTS), with
        C{batchMessages} 2 and one message a batch per 100 the mailbox
        holds, a command carries up to 4 of the 8 messages; with no
        growth, up to 2.
        """
        for growth, largest in ((100, 4), (0, 2)):
            h = JobHarness(self)
            old = [(b"Subject: old %d\r\n\r\n" % n, (), None) for n in range(400)]
            h.mail.append(USER, "INBOX", old)
            populate(h.source, h.source.addFolder("INBOX"), 8)

            settings = JobSettings(connections=1, batchMessages=2, batchGrowth=growth)
            self.assertTrue(h.run(h.job(settings)))

            server = h.endpoint.servers[0]
            received = server.received
            starts = [i for i, line in enumerate(received) if line in appendLines(server)]
            literals = [received.index(b"", start) - start for start in starts]
            self.assertEqual((sum(literals), max(literals)), (8, largest))
            self.assertEqual(len(h.mail.mailbox(USER, "INBOX")), 408)
            h.finish()

    def test_recordedInBatches(self) -> None:
        """
        Outcomes are recorded in batches of C{recordEvery} or more, not one
        transaction per message: a batch is written once it holds
        C{recordEvery}, and a tagged reply's outcomes are buffered together
        (so a batch holds fewer than C{recordEvery} plus a MULTIAPPEND
        batch's messages).  Those buffered when the last share is taken
        are written then, and from then on a tenth of C{recordEvery} or
        more at a time (here, a reply's): what is left to write after the
        last reply is that reply's outcomes alone.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 30)
        settings = JobSettings(
            connections=1, batchMessages=2, windowMessages=4, recordEvery=6, unitMessages=6
        )

        self.assertTrue(h.run(h.job(settings)))

        sizes = [len(batch) for batch in h.store.batches]
        self.assertEqual(sum(sizes), 30)
        # recordEvery (6) or one reply more at a time until the last share
        # is taken; then what was buffered (less than recordEvery); then
        # one reply's (2, the batch) at most each.
        ending = next(i for i, size in enumerate(sizes) if size < 6)
        self.assertGreaterEqual(ending, 2)
        self.assertTrue(all(6 <= size <= 7 for size in sizes[:ending]))
        self.assertTrue(all(size <= 2 for size in sizes[ending + 1 :]))
        self.assertLessEqual(sizes[-1], 2)
        self.assertEqual(self.successResultOf(h.store.summary(JOB)), (30, 0))
        h.finish()

    def test_recordedAfterInterval(self) -> None:
        """
        Outcomes waiting for their batch are recorded C{recordInterval}
        seconds after the first of them, while the job is still running.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 4)
        h.source.holdAfter = 2  # the job reads one batch (one message) per step
        settings = JobSettings(connections=1, batchMessages=1, recordEvery=100, recordInterval=5.0)

        d = h.start(h.job(settings))

        self.assertNoResult(d)
        self.assertEqual(len(h.source.held), 1)
        self.assertEqual(h.store.batches, [])
        self.assertEqual(h.progress.messagesDone, 2)
        h.clock.advance(4.9)
        self.assertEqual(h.store.batches, [])
        h.clock.advance(0.1)
        self.assertEqual([[o.messageKey for o in batch] for batch in h.store.batches], [["m0", "m1"]])

        h.source.release()
        h.settle(lambda: hasResult(d))
        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        # m2 was buffered when the last share (m3) was taken: written then.
        self.assertEqual(
            [[o.messageKey for o in batch] for batch in h.store.batches],
            [["m0", "m1"], ["m2"], ["m3"]],
        )
        h.finish()

    def test_emptySource(self) -> None:
        """
        A source with nothing to copy completes after logging out, without
        APPEND.
        """
        h = JobHarness(self)
        h.source.addFolder("INBOX")

        self.assertTrue(h.run(h.job()))

        self.assertEqual(appendLines(h.endpoint.servers[0]), [])
        self.assertIn(b"LOGOUT", h.endpoint.servers[0].received[-1])
        self.assertEqual(h.progress.state, JobState.DONE)
        h.finish()


class FidelityTests(SynchronousTestCase):
    """
    What a job decides per message: literal kinds, flags, and what it
    counts.
    """

    def test_nulWithoutBinary(self) -> None:
        """
        A message with a NUL octet cannot go to a destination without
        BINARY: it is recorded as failed with the reason, and the others
        go; 8-bit content without NUL goes in a plain literal.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "nul", b"Subject: x\r\n\r\na\x00b\r\n")
        eightBit = "Subject: é\r\n\r\nGrüße\r\n".encode()
        harness.source.add(inbox, "8bit", eightBit)
        self.assertTrue(harness.run(harness.job()))
        outcomes = harness.store.outcomes()
        self.assertIn("the destination does not offer BINARY", outcomes["INBOX", "nul"].failure or "")
        self.assertIsNone(outcomes["INBOX", "8bit"].failure)
        self.assertEqual([b for b, _, _ in harness.contents("INBOX")], [eightBit])
        self.assertEqual((harness.progress.messagesDone, harness.progress.messagesFailed), (1, 1))
        harness.finish()

    def test_eightBitFails(self) -> None:
        """
        With C{eight_bit: fail}, a message with 8-bit octets for a
        destination without BINARY is recorded as failed with the reason;
        an ASCII message goes.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "8bit", "Subject: é\r\n\r\nGrüße\r\n".encode())
        harness.source.add(inbox, "ascii", body(1))
        self.assertTrue(harness.run(harness.job(eightBit="fail")))
        outcomes = harness.store.outcomes()
        self.assertIn("contains 8-bit octets", outcomes["INBOX", "8bit"].failure or "")
        self.assertIn("eight_bit", outcomes["INBOX", "8bit"].failure or "")
        self.assertIsNone(outcomes["INBOX", "ascii"].failure)
        self.assertEqual([b for b, _, _ in harness.contents("INBOX")], [body(1)])
        harness.finish()

    def test_flagsAndNotes(self) -> None:
        """
        An invalid keyword is not sent: the message goes with its other
        flags and a note saying what was dropped and why, counted in the
        progress.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "m", body(1), flags=("\\Seen", "two words", "$Forwarded"))
        self.assertTrue(harness.run(harness.job()))
        outcome = harness.store.outcomes()["INBOX", "m"]
        self.assertIsNone(outcome.failure)
        self.assertEqual(
            outcome.note, "flag 'two words' dropped: not a valid IMAP keyword"
        )
        self.assertEqual(harness.contents("INBOX")[0][1], ("\\Seen", "$Forwarded"))
        self.assertEqual(harness.progress.messagesWithNotes, 1)
        harness.finish()

    def test_lineEndingsConvertedCounted(self) -> None:
        """
        A message whose body is longer than its stored size was converted
        to CRLF: recorded and counted as such; others are not.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        harness.source.add(inbox, "lf", body(1), size=len(body(1)) - 3)
        harness.source.add(inbox, "crlf", body(2))
        self.assertTrue(harness.run(harness.job()))
        outcomes = harness.store.outcomes()
        self.assertTrue(outcomes["INBOX", "lf"].lineEndingsConverted)
        self.assertFalse(outcomes["INBOX", "crlf"].lineEndingsConverted)
        self.assertEqual(harness.progress.lineEndingsConverted, 1)
        harness.finish()

    def test_unreadableFolder(self) -> None:
        """
        A folder the source cannot list does not stop the others: they are
        migrated, and the job then fails naming the folder and why.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        broken = harness.source.addFolder("Broken")
        populate(harness.source, inbox, 3)
        harness.source.listingErrors[broken.key] = SourceError("not an mbox file: /x/Broken")
        self.assertFalse(harness.run(harness.job()))
        self.assertEqual(len(harness.contents("INBOX")), 3)
        self.assertIn("Broken: not an mbox file: /x/Broken", harness.progress.error or "")
        self.flushLoggedErrors()
        harness.finish()

    def test_alreadyPresent(self) -> None:
        """
        Messages the destination already holds (copied by another tool) are
        recognised by their identity, recorded as already present with the
        destination's UID and not appended again; a byte-identical second
        source message still gets its own copy.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        first = b"Message-ID: <1@x>\r\nSubject: one\r\n\r\nbody\r\n"
        second = b"Message-ID: <2@x>\r\nSubject: two\r\n\r\nbody\r\n"
        harness.mail.append(USER, "INBOX", [(first, (), None)])
        harness.source.add(inbox, "m1", first)
        harness.source.add(inbox, "m2", second)
        harness.source.add(inbox, "m1-again", first)
        self.assertTrue(harness.run(harness.job()))
        outcomes = harness.store.outcomes()
        self.assertTrue(outcomes["INBOX", "m1"].alreadyPresent)
        self.assertEqual(outcomes["INBOX", "m1"].uid, 1)
        self.assertFalse(outcomes["INBOX", "m1-again"].alreadyPresent)
        self.assertEqual(
            [b for b, _, _ in harness.contents("INBOX")], [first, second, first]
        )
        self.assertEqual(harness.progress.messagesAlreadyPresent, 1)
        self.assertEqual(harness.progress.messagesDone, 3)
        harness.finish()

    def test_identityOff(self) -> None:
        """
        With the identity check off, only the state store counts: a copy
        already in the destination is appended again.
        """
        harness = JobHarness(self)
        inbox = harness.source.addFolder("INBOX")
        first = b"Message-ID: <1@x>\r\nSubject: one\r\n\r\nbody\r\n"
        harness.mail.append(USER, "INBOX", [(first, (), None)])
        harness.source.add(inbox, "m1", first)
        self.assertTrue(harness.run(harness.job(identity="off")))
        self.assertEqual(len(harness.contents("INBOX")), 2)
        harness.finish()


class StoreThenDropServer(FakeIMAPServer):
    """
    A fake server that stores the APPEND carrying a given body and then
    closes the connection without answering it: the reply is lost, the
    messages are in the mailbox.
    """

    dropOn: bytes = b""

    def _append(self, args: list[Any]) -> bytes | None:
        reply = FakeIMAPServer._append(self, args)
        if any(self.dropOn in m.body for m in self.store.mailbox(self.user or "", "INBOX")):
            if not getattr(self, "_dropped", False):
                self._dropped = True
                self._close()
                return None
        return reply


class SilentAppendServer(FakeIMAPServer):
    """
    A fake server that reads APPEND commands and never answers them.
    """

    def _append(self, args: list[Any]) -> bytes | None:
        return None


class KillerMessageServer(FakeIMAPServer):
    """
    A fake server that drops the connection, unanswered and unstored,
    whenever an APPEND carries a given body.
    """

    poison: bytes = b""

    def _append(self, args: list[Any]) -> bytes | None:
        if any(self.poison in a.value for a in args):
            self._close()
            return None
        return FakeIMAPServer._append(self, args)


class ResilienceTests(SynchronousTestCase):
    """
    L{MigrationJob} across lost connections and crashes: exactly once by
    the journal, never by recognising content (C{identity: off}).
    """

    def test_journaledBeforeSent(self) -> None:
        """
        Every message sent was journaled first; when the run ends every
        entry is settled.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 5)

        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=2), identity="off")))

        journaled = [m.messageKey for entry in h.store.journaled for m in entry]
        self.assertEqual(sorted(journaled), [f"m{n}" for n in range(5)])
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_journalUnwritable(self) -> None:
        """
        When the journal cannot be written, nothing is sent and the job
        fails at once with the store's error: no retry.
        """
        h = JobHarness(self)
        h.store.journalFailWith = PermanentError("state.sqlite: disk full")
        populate(h.source, h.source.addFolder("INBOX"), 3)

        self.assertFalse(h.run(h.job()))

        self.assertEqual(h.mail.mailbox(USER, "INBOX"), [])
        self.assertEqual(appendLines(h.endpoint.servers[0]), [])
        self.assertEqual(h.progress.state, JobState.FAILED)
        self.assertIn("disk full", h.progress.error or "")
        self.assertEqual(h.endpoint.attempts, 1)
        h.finish()

    def test_replyLostAfterStore(self) -> None:
        """
        The server stored a batch but its reply was lost with the
        connection: the next attempt finds those messages by the journal
        (UID, size and head) and does not send them again, though the
        identity check is off.
        """
        h = JobHarness(self)

        def makeServer(attempt: int) -> FakeIMAPServer:
            server = StoreThenDropServer(h.mail, DEFAULT_CAPABILITIES)
            server.dropOn = body(3) if attempt == 0 else b"\0never"
            return server

        h.endpoint = MemoryEndpoint(h.clock, makeServer)
        populate(h.source, h.source.addFolder("INBOX"), 6)
        settings = JobSettings(connections=1, batchMessages=2, windowMessages=2)

        self.assertTrue(h.run(h.job(settings, identity="off")))

        h.assertHolds("INBOX", range(6))
        validity = h.mail.uidValidity(USER, "INBOX")
        outcomes = h.store.outcomes()
        self.assertEqual(
            {k: (o.uidValidity, o.uid) for (_, k), o in outcomes.items() if k in ("m2", "m3")},
            {"m2": (validity, 3), "m3": (validity, 4)},
        )
        second = appendLines(h.endpoint.servers[1])
        self.assertEqual(len(second), 1)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_crashLeftJournal(self) -> None:
        """
        A run that starts with entries in the journal (the last run was
        killed) settles them first: messages that arrived are recorded with
        their UID and not sent again; the others are sent.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        populate(h.source, inbox, 4)
        validity = h.mail.uidValidity(USER, "INBOX")
        h.mail.append(USER, "INBOX", [(body(0), (), None), (body(1), (), None)])
        self.successResultOf(
            h.store.journalBatch(
                JOB,
                "INBOX",
                validity,
                1,
                [
                    JournalMessage("INBOX", f"m{n}", len(body(n)), journalHead(body(n)))
                    for n in range(3)
                ],
            )
        )

        self.assertTrue(h.run(h.job(identity="off")))

        h.assertHolds("INBOX", range(4))
        outcomes = h.store.outcomes()
        self.assertEqual((outcomes["INBOX", "m0"].uid, outcomes["INBOX", "m1"].uid), (1, 2))
        self.assertEqual(len(appendLines(h.endpoint.servers[0])), 1)
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_crashLeftJournalNewUIDValidity(self) -> None:
        """
        An entry journaled under another UIDVALIDITY (the mailbox was
        recreated since) cannot be matched by UID: its messages are sent
        again.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)
        validity = h.mail.uidValidity(USER, "INBOX")
        self.successResultOf(
            h.store.journalBatch(
                JOB, "INBOX", validity + 1, 1,
                [JournalMessage("INBOX", "m0", len(body(0)), journalHead(body(0)))],
            )
        )  # fmt: skip

        self.assertTrue(h.run(h.job(identity="off")))

        h.assertHolds("INBOX", range(2))
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_loginRefusedIsNotRetried(self) -> None:
        """
        An authentication failure fails the job once: one connection, no
        retry storm.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)

        self.assertFalse(h.run(h.job(password="wrong-pw")))

        self.assertEqual(h.endpoint.attempts, 1)
        self.assertEqual(h.progress.state, JobState.FAILED)
        h.finish()

    def test_failureRecordedInStore(self) -> None:
        """
        A job that fails (its login refused) records why in the state
        store, for C{imapmig report}; a later run that completes forgets
        it.
        """
        h = JobHarness(self)
        populate(h.source, h.source.addFolder("INBOX"), 2)

        self.assertFalse(h.run(h.job(password="wrong-pw")))
        reason = self.successResultOf(h.store.jobFailure(JOB))
        assert reason is not None
        self.assertIn("login refused", reason)
        self.assertEqual(reason, h.progress.error)

        self.assertTrue(h.run(h.job()))
        self.assertIsNone(self.successResultOf(h.store.jobFailure(JOB)))
        h.finish()

    def test_connectionRefusedThenAccepted(self) -> None:
        """
        Connections refused at first (the server restarting) are retried
        with backoff on the clock: 1 s, then 2 s; the job then finishes.
        """
        h = JobHarness(self, refuseConnections=(0, 1))
        populate(h.source, h.source.addFolder("INBOX"), 3)
        d = h.start(h.job())
        self.assertEqual(h.endpoint.attempts, 1)
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        h.clock.advance(1)
        h.settle(lambda: hasResult(d))
        self.assertEqual(h.endpoint.attempts, 2)
        h.clock.advance(1.9)
        self.assertEqual(h.endpoint.attempts, 2)
        h.clock.advance(0.1)
        h.waitFor(d)

        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.assertHolds("INBOX", range(3))
        self.assertEqual(h.progress.reconnects, 2)
        h.finish()

    def test_stopWhileBackingOff(self) -> None:
        """
        A job stopped while it waits to retry ends at once, stopped, with
        nothing left on the clock.
        """
        h = JobHarness(self, refuseConnections=range(100))
        populate(h.source, h.source.addFolder("INBOX"), 1)
        job = h.job()
        d = h.start(job)
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)

        d.cancel()

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(h.endpoint.attempts, 1)
        h.finish()

    def test_stopTimeout(self) -> None:
        """
        A stopping job whose replies do not come drops its connections
        after C{stopTimeout}; what was in flight stays journaled for the
        next run.
        """
        h = JobHarness(self)
        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: SilentAppendServer(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("INBOX"), 2)
        job = h.job(JobSettings(connections=1, stopTimeout=5.0))
        d = h.start(job)
        self.assertNoResult(d)

        d.cancel()
        h.clock.advance(4.9)
        h.settle(lambda: hasResult(d))
        self.assertNoResult(d)
        h.clock.advance(0.1)
        h.settle(lambda: hasResult(d))

        self.assertFalse(self.successResultOf(d))
        self.assertEqual(h.progress.state, JobState.STOPPED)
        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        h.endpoint.pump()
        h.finish()

    def test_messageThatKillsTheConnection(self) -> None:
        """
        A message that makes the server drop the connection every time is
        recorded as failed after C{messageAttempts} tries, with the last
        error; the others are migrated.
        """
        h = JobHarness(self)

        def makeServer(attempt: int) -> FakeIMAPServer:
            server = KillerMessageServer(h.mail, DEFAULT_CAPABILITIES)
            server.poison = body(2)
            return server

        h.endpoint = MemoryEndpoint(h.clock, makeServer)
        populate(h.source, h.source.addFolder("INBOX"), 5)
        settings = JobSettings(connections=1, batchMessages=1, windowMessages=1)

        self.assertTrue(h.run(h.job(settings, identity="off", retry=RetryPolicy(messageAttempts=3))))

        h.assertHolds("INBOX", [0, 1, 3, 4])
        failures = self.successResultOf(h.store.failures(JOB))
        self.assertEqual([f.messageKey for f in failures], ["m2"])
        assert failures[0].failure is not None
        self.assertIn("not stored after 3 attempts", failures[0].failure)
        self.assertIn("onnection", failures[0].failure)
        self.assertEqual(h.progress.state, JobState.DONE_WITH_FAILURES)
        h.finish()


class ServerSignalTests(SynchronousTestCase):
    """
    L{MigrationJob} acting on what a server says about itself.
    """

    def refusingFirst(self, h: JobHarness, reply: str, times: int = 1) -> None:
        """
        Make the server answer the first C{times} APPENDs with C{reply}.
        """
        count = [0]

        def refuse(body: bytes) -> str | None:
            count[0] += 1
            return reply if count[0] <= times else None

        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: FakeIMAPServer(h.mail, DEFAULT_CAPABILITIES, refuse)
        )

    def test_suggestedBackoff(self) -> None:
        """
        Microsoft 365's C{Suggested Backoff Time} is how long the job
        waits before it tries again, whatever its own backoff says.
        """
        h = JobHarness(self)
        self.refusingFirst(h, "NO Request is throttled. Suggested Backoff Time: 5000 milliseconds")
        populate(h.source, h.source.addFolder("INBOX"), 3)
        d = h.start(h.job(JobSettings(connections=1, batchMessages=3), identity="off"))

        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        self.assertEqual(h.progress.retryAt, h.clock.seconds() + 5.0)
        assert h.progress.waitingFor is not None
        self.assertIn("throttled", h.progress.waitingFor)
        h.clock.advance(4.9)
        self.assertEqual(h.endpoint.attempts, 1)
        h.waitFor(d)

        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.assertHolds("INBOX", range(3))
        self.assertEqual(self.successResultOf(h.store.failures(JOB)), [])
        h.finish()

    def test_overQuotaPauses(self) -> None:
        """
        C{[OVERQUOTA]} of a bandwidth limit pauses the job for its C{pause}
        seconds, showing the server's words; then it tries again and
        finishes.  (A full mailbox's: L{test_job_throttle}.)
        """
        h = JobHarness(self)
        self.refusingFirst(h, "NO [OVERQUOTA] Account exceeded command or bandwidth limits")
        populate(h.source, h.source.addFolder("INBOX"), 2)
        d = h.start(h.job(identity="off", retry=RetryPolicy(pause=600)))

        self.assertEqual(h.progress.state, JobState.PAUSED_BY_SERVER)
        self.assertEqual(h.progress.retryAt, h.clock.seconds() + 600)
        self.assertIn("OVERQUOTA", h.progress.waitingFor or "")
        h.waitFor(d)

        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.assertHolds("INBOX", range(2))
        h.finish()

    def test_tooBigFailsOneMessage(self) -> None:
        """
        C{[TOOBIG]} fails that message only, recorded with the server's
        reply; the job goes on without retrying.
        """
        h = JobHarness(
            self, refuse=lambda b: "NO [TOOBIG] Message too large" if b == body(1) else None
        )
        populate(h.source, h.source.addFolder("INBOX"), 3)

        self.assertTrue(h.run(h.job(JobSettings(connections=1, batchMessages=3))))

        h.assertHolds("INBOX", [0, 2])
        [failure] = self.successResultOf(h.store.failures(JOB))
        self.assertEqual(failure.messageKey, "m1")
        self.assertIn("TOOBIG", failure.failure or "")
        self.assertEqual(h.endpoint.attempts, 1)
        h.finish()

    def test_mailboxDeletedMidRun(self) -> None:
        """
        A destination mailbox deleted during the run (C{[TRYCREATE]}) is
        created again by the next attempt, and the messages go there.
        """
        h = JobHarness(self)
        self.refusingFirst(h, "NO [TRYCREATE] Mailbox doesn't exist: Archive")
        populate(h.source, h.source.addFolder("Archive"), 2)

        self.assertTrue(h.run(h.job(identity="off")))

        h.assertHolds("Archive", range(2))
        self.assertEqual(h.endpoint.attempts, 2)
        h.finish()


class ReconcileEdgeTests(SynchronousTestCase):
    """
    Reconciling the journal where a copy could be taken for the wrong
    message's.
    """

    def test_recordedWithoutUIDClaimsItsCopy(self) -> None:
        """
        On a server without UIDPLUS, a message recorded as appended (without
        a UID) claims its own copy when its unit is reconciled: an identical
        message of the same unit that was never sent is not taken for
        arrived, and is sent.
        """
        caps = tuple(c for c in DEFAULT_CAPABILITIES if c != "UIDPLUS")
        h = JobHarness(self, capabilities=caps)
        inbox = h.source.addFolder("INBOX")
        same = body(7)
        h.source.add(inbox, "m0", same)
        h.source.add(inbox, "m1", same)
        h.mail.append(USER, "INBOX", [(same, (), None)])
        validity = h.mail.uidValidity(USER, "INBOX")
        self.successResultOf(
            h.store.recordOutcomes(JOB, [MessageOutcome("INBOX", "m0", "INBOX", len(same))])
        )
        self.successResultOf(
            h.store.journalBatch(
                JOB, "INBOX", validity, 1,
                [JournalMessage("INBOX", "m0", 0, b""), JournalMessage("INBOX", "m1", 0, b"")],
            )
        )  # fmt: skip

        self.assertTrue(h.run(h.job(identity="off")))

        self.assertEqual([m.body for m in h.mail.mailbox(USER, "INBOX")], [same, same])
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()

    def test_unmeasurableKeepsTheEntry(self) -> None:
        """
        A journaled message that cannot be read again from the source (its
        folder cannot be listed now) while copies are unaccounted for keeps
        its entry in the journal: nothing is settled on a guess.
        """
        h = JobHarness(self)
        inbox = h.source.addFolder("INBOX")
        populate(h.source, inbox, 2)
        h.mail.append(USER, "INBOX", [(body(0), (), None)])
        validity = h.mail.uidValidity(USER, "INBOX")
        h.source.listingErrors["INBOX"] = SourceError("INBOX: Permission denied")
        self.successResultOf(
            h.store.journalBatch(
                JOB, "INBOX", validity, 1,
                [JournalMessage("INBOX", "m0", 0, b""), JournalMessage("INBOX", "m1", 0, b"")],
            )
        )  # fmt: skip

        self.assertFalse(h.run(h.job(identity="off")))

        self.assertEqual(len(self.successResultOf(h.store.journal(JOB))), 1)
        self.flushLoggedErrors()
        del h.source.listingErrors["INBOX"]
        self.assertTrue(h.run(h.job(identity="off")))
        h.assertHolds("INBOX", range(2))
        self.assertEqual(self.successResultOf(h.store.journal(JOB)), [])
        h.finish()


class CommandRefusedForNowTests(SynchronousTestCase):
    """
    A command other than APPEND refused "for now" is read as the APPEND
    pipeline reads its refusals.
    """

    def test_listUnavailable(self) -> None:
        """
        LIST refused with C{[UNAVAILABLE]} makes the job back off and try
        again, not fail; a refusal with no such meaning fails it.
        """
        h = JobHarness(self)
        refusals = [b"NO [UNAVAILABLE] Internal error, try again later"]

        class RefusesListOnce(FakeIMAPServer):
            def lineReceived(self, line: bytes) -> None:
                tag, _, rest = line.partition(b" ")
                if rest.startswith(b"LIST") and refusals:
                    self.sendLine(tag + b" " + refusals.pop())
                    return
                FakeIMAPServer.lineReceived(self, line)

        h.endpoint = MemoryEndpoint(
            h.clock, lambda attempt: RefusesListOnce(h.mail, DEFAULT_CAPABILITIES)
        )
        populate(h.source, h.source.addFolder("INBOX"), 2)
        d = h.start(h.job())
        self.assertEqual(h.progress.state, JobState.BACKING_OFF)
        h.waitFor(d)
        self.assertTrue(self.successResultOf(d))
        h.endpoint.pump()
        h.assertHolds("INBOX", range(2))

        refusals.append(b"NO [NOPERM] Permission denied")
        self.assertFalse(h.run(h.job()))
        self.assertEqual(h.progress.state, JobState.FAILED)
        self.assertIn("NOPERM", h.progress.error or "")
        h.finish()


class ConnectionsWorthOpeningTests(SynchronousTestCase):
    """
    L{connectionsWorthOpening}: how many connections a job's pending work
    is worth.
    """

    def test_atMostOnePerBatch(self) -> None:
        """
        Fewer messages than two batches are worth one connection; each
        whole batch of messages, one more, up to C{connections}.
        """
        settings = JobSettings(connections=3, batchMessages=50)
        self.assertEqual(connectionsWorthOpening(settings, 5, 20, 20_000), 1)
        self.assertEqual(connectionsWorthOpening(settings, 5, 99, 99_000), 1)
        self.assertEqual(connectionsWorthOpening(settings, 5, 100, 100_000), 2)
        self.assertEqual(connectionsWorthOpening(settings, 5, 10_000, 10**7), 3)

    def test_largeMessagesCountByOctets(self) -> None:
        """
        A few large messages are worth a connection per whole batch of
        octets (C{batchBytes}).
        """
        settings = JobSettings(connections=4, batchMessages=50, batchBytes=1000)
        self.assertEqual(connectionsWorthOpening(settings, 3, 3, 3000), 3)

    def test_atMostOnePerFolder(self) -> None:
        """
        No more connections than folders with pending messages (a
        connection never shares another's mailbox: a second one for one
        folder would log in and out for nothing), and at least one, even
        with nothing pending.
        """
        settings = JobSettings(connections=4, batchMessages=1)
        self.assertEqual(connectionsWorthOpening(settings, 2, 100, 100), 2)
        self.assertEqual(connectionsWorthOpening(settings, 1, 100_000, 10**8), 1)
        self.assertEqual(connectionsWorthOpening(settings, 0, 0, 0), 1)
