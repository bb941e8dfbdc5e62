# -*- test-case-name: tests.test_integration -*-
"""
Integration tests: the real daemon, on the real reactor, against a real
private Dovecot on loopback.

These are the proof that the fakes the unit tests use tell the truth: every
byte here crosses a socket to Dovecot 2.3, and what arrived is read back
with an independent client (L{imaplib}, in L{DovecotInstance.fetchAll}) and
compared with what the corpus generator wrote, message by message.

The Dovecot instances are shared between tests (L{tests.support}); each
test migrates into accounts no other test touches.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from OpenSSL.SSL import Connection as TLSConnection
from twisted.internet import reactor as _globalReactor
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

import imapmig
from imapmig.config import Config, ServerConfig, parseConfig
from imapmig.imap.acks import ImmediateAcks, tcpSocketOf
from imapmig.imap.outgoing import AppendOutcomes, LiteralMode, PipelineSettings, SendDeadline
from imapmig.imap.pipeline import AppendPipeline
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import toCRLF
from imapmig.mail.folders import PersonalNamespace
from imapmig.progress import JobProgress, JobState
from imapmig.daemon.service import sessionOpener
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.progress.telemetry import ServerTelemetry
from imapmig.testing.corpus import (
    CorpusMessage,
    maildirFolderName,
    writeEmlDirectory,
    writeMaildir,
)
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import newDirectory as _directory
from tests.support import plainServer as _plainServer
from tests.support import (
    corpusView,
    digestsByUID,
    fetchedView,
    freshUser,
    mailboxName,
    runDaemon,
    sharedDovecot,
    writePasswordFile,
)

# Only these tests use the global reactor: they run the daemon for real.
reactor: Any = _globalReactor

JOB = "job"

_BASE_CAPABILITIES = "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE NAMESPACE UIDPLUS"
LITERAL_MINUS_AND_MULTIAPPEND = _BASE_CAPABILITIES + " LITERAL- MULTIAPPEND"
LITERAL_PLUS_ONLY = _BASE_CAPABILITIES + " LITERAL+"
SYNCHRONIZING_AND_MULTIAPPEND = _BASE_CAPABILITIES + " MULTIAPPEND"
# Without SASL-IR the session logs in with LOGIN rather than AUTHENTICATE.
SYNCHRONIZING_ONLY = "IMAP4rev1 ID ENABLE IDLE NAMESPACE UIDPLUS"

_SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(imapmig.__file__)))


# Building configurations and running the daemon.




def _implicitTLSServer(
    instance: DovecotInstance, hostname: str = "localhost", trusted: bool = True
) -> dict[str, object]:
    """
    The C{servers} entry of C{instance}'s implicit-TLS port, verifying its
    certificate for C{hostname} against the instance's private CA when
    C{trusted}, against the system's trust store otherwise.
    """
    server: dict[str, object] = {
        "endpoint": f"tls:127.0.0.1:{instance.tlsPort}",
        "tls_hostname": hostname,
    }
    if trusted:
        server["tls_ca"] = instance.caCertificatePath
    return server


def _starttlsServer(
    instance: DovecotInstance, hostname: str = "localhost", trusted: bool = True
) -> dict[str, object]:
    """
    The C{servers} entry of C{instance}'s plain port, upgraded with
    STARTTLS, verifying like L{_implicitTLSServer}.
    """
    server: dict[str, object] = {
        "endpoint": f"tcp:127.0.0.1:{instance.port}",
        "starttls": "required",
        "tls_hostname": hostname,
    }
    if trusted:
        server["tls_ca"] = instance.caCertificatePath
    return server


def _config(
    testCase: TestCase,
    user: DovecotUser,
    source: dict[str, object],
    server: dict[str, object],
    password: str | None = None,
    **jobSettings: object,
) -> Config:
    """
    A configuration of one job, C{JOB}, migrating C{source} into C{user}'s
    account on C{server}, its state database and password file in a new
    directory, the status listener off.
    """
    directory = _directory(testCase)
    passwordFile = writePasswordFile(
        os.path.join(directory, "password"),
        user.password if password is None else password,
    )
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"dovecot": server},
        "jobs": [
            {
                "name": JOB,
                "source": source,
                "destination": {
                    "server": "dovecot",
                    "user": user.name,
                    "password_file": passwordFile,
                },
                **jobSettings,
            }
        ],
    }
    return parseConfig(document, os.path.join(directory, "imapmig.yaml"))


async def _runService(config: Config) -> tuple[bool, JobProgress]:
    """
    Run the daemon built from C{config} (L{runDaemon}).

    @return: whether every job completed, and the progress of job C{JOB}.
    """
    completed, progress = await runDaemon(reactor, config)
    return completed, progress[JOB]


def _assertContent(
    testCase: TestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    messages: tuple[CorpusMessage, ...],
) -> None:
    """
    Assert that C{user}'s account holds exactly C{messages}: per mailbox,
    the same multiset of body digests, flag sets and INTERNALDATE instants.
    """
    fetched = fetchedView(instance.fetchAll(user.name))
    expected = corpusView(messages)
    testCase.assertEqual(sorted(fetched), sorted(expected))
    for name in expected:
        testCase.assertEqual(
            fetched[name], expected[name], f"mailbox {name!r} differs from its source"
        )


def _assertNothingAppended(
    testCase: TestCase, instance: DovecotInstance, user: DovecotUser
) -> None:
    """
    Assert that no mailbox of C{user} holds a message.
    """
    counts = {name: len(m) for name, m in instance.fetchAll(user.name).items() if m}
    testCase.assertEqual(counts, {})


def _assertRecordedUIDs(
    testCase: TestCase,
    config: Config,
    instance: DovecotInstance,
    user: DovecotUser,
    messages: tuple[CorpusMessage, ...],
) -> None:
    """
    Assert that the UIDVALIDITY and UID the state store recorded for each
    appended message (from C{APPENDUID}) are those under which Dovecot
    holds that very message, and that every message Dovecot holds has
    one.

    The store's interface does not expose UIDs, so this reads its SQLite
    table directly.
    """
    digests = {m.key: m.sha256 for m in messages}
    connection = sqlite3.connect(config.statePath)
    try:
        rows = connection.execute(
            "SELECT mailbox, message_key, uidvalidity, uid FROM messages"
            " WHERE job = ? AND failure IS NULL",
            (JOB,),
        ).fetchall()
    finally:
        connection.close()
    testCase.assertEqual(len(rows), len(messages))
    byMailbox: dict[str, list[tuple[str, int, int]]] = {}
    for mailbox, key, uidValidity, uid in rows:
        byMailbox.setdefault(mailbox, []).append((key, uidValidity, uid))
    for mailbox, recorded in byMailbox.items():
        uidValidity, held = digestsByUID(instance, user, mailbox)
        testCase.assertEqual({v for _, v, _ in recorded}, {uidValidity}, mailbox)
        testCase.assertEqual(sorted(u for _, _, u in recorded), sorted(held), mailbox)
        for key, _, uid in recorded:
            testCase.assertEqual(held[uid], digests[key], f"UID {uid} in {mailbox}")


class _Recorder:
    """
    Records, by patching the session and the pipeline classes, what the
    running daemon chose and what the server asked for: each session's
    capabilities after login and its pipeline's settings, and how many
    continuation requests (C{+}) the pipelines received.
    """

    def __init__(self, testCase: TestCase) -> None:
        self.capabilities: list[frozenset[bytes]] = []
        self.settings: list[PipelineSettings] = []
        self.continuations = 0
        originalPipeline = IMAPSession.appendPipeline
        originalContinuation = AppendPipeline.continuationReceived

        def appendPipeline(
            session: IMAPSession,
            batchMessages: int,
            batchBytes: int,
            windowMessages: int,
            windowBytes: int,
            outcomes: AppendOutcomes,
            telemetry: ServerTelemetry | None = None,
            deadline: SendDeadline | None = None,
            batchGrowth: int = 0,
        ) -> AppendPipeline:
            pipeline = originalPipeline(
                session, batchMessages, batchBytes, windowMessages, windowBytes, outcomes,
                telemetry, deadline, batchGrowth,
            )  # fmt: skip
            self.capabilities.append(session.capabilities)
            self.settings.append(pipeline.settings)
            return pipeline

        def continuationReceived(pipeline: AppendPipeline, text: bytes) -> None:
            self.continuations += 1
            originalContinuation(pipeline, text)

        testCase.patch(IMAPSession, "appendPipeline", appendPipeline)
        testCase.patch(AppendPipeline, "continuationReceived", continuationReceived)


# Writing extra source messages.


def _addMaildirMessage(
    maildir: str,
    folder: tuple[str, ...],
    timestamp: int,
    letters: str | None,
    body: bytes,
    flags: tuple[str, ...] = (),
) -> CorpusMessage:
    """
    Deliver one more message into a Maildir folder: into C{new} when
    C{letters} is L{None}, else into C{cur} with those flag letters.

    @return: its description, as the corpus generator would have given it.
    """
    key = f"{timestamp}.M{timestamp % 100000}P4242.extra.example"
    directory = os.path.join(maildir, maildirFolderName(folder))
    if letters is None:
        path = os.path.join(directory, "new", key)
    else:
        path = os.path.join(directory, "cur", f"{key}:2,{letters}")
    with open(path, "wb") as f:
        f.write(body)
    os.utime(path, (timestamp, timestamp))
    return CorpusMessage(
        folder=folder,
        key=key,
        flags=flags,
        internalDate=datetime.fromtimestamp(timestamp, timezone.utc),
        sha256=hashlib.sha256(toCRLF(body)).hexdigest(),
        size=len(body),
    )


def _extraBody(subject: str) -> bytes:
    """
    A small message with bare LF line endings, as a Maildir stores it.
    """
    return (
        b"From: Carol <carol@example.net>\n"
        b"To: Alice <alice@example.org>\n"
        b"Subject: " + subject.encode("ascii") + b"\n"
        b"Message-ID: <" + subject.replace(" ", ".").encode("ascii") + b"@example.net>\n"
        b"\n"
        b"Delivered after the first migration.\n"
    )


# The tests.


class AcceptanceTests(TestCase):
    """
    A realistic Maildir of 5,000 messages migrated by the daemon, then
    migrated again, then again after new mail arrived.
    """

    async def test_maildirMigratedCompletelyThenIncrementally(self) -> None:
        """
        Every message of a 5,000-message Maildir lands in Dovecot in its
        folder, with its flags and its INTERNALDATE, and the counters say
        5000 done, 0 failed; a second run of the same configuration appends
        nothing and reports 5000 already migrated; after 3 new messages
        arrive, a third run appends exactly those 3.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        maildir = os.path.join(_directory(self), "Maildir")
        corpus = writeMaildir(maildir, 5000)
        config = _config(self, user, {"maildir": maildir}, _starttlsServer(instance))

        completed, progress = await _runService(config)
        self.assertTrue(completed, progress.error)
        self.assertEqual(
            (progress.state, progress.messagesTotal, progress.messagesDone),
            (JobState.DONE, 5000, 5000),
        )
        self.assertEqual((progress.messagesFailed, progress.messagesAlreadyMigrated), (0, 0))
        self.assertEqual(progress.foldersTotal, len(corpus.folders))
        mailboxes = {name for _, _, name in instance.listMailboxes(user.name)}
        for folder in corpus.folders:
            self.assertIn(mailboxName(folder), mailboxes)
        _assertContent(self, instance, user, corpus.messages)
        _assertRecordedUIDs(self, config, instance, user, corpus.messages)

        completed, progress = await _runService(config)
        self.assertTrue(completed, progress.error)
        self.assertEqual(
            (
                progress.messagesTotal,
                progress.messagesDone,
                progress.messagesAlreadyMigrated,
                progress.messagesFailed,
                progress.bytesSent,
            ),
            (5000, 5000, 5000, 0, 0),
        )
        _assertContent(self, instance, user, corpus.messages)

        subjects = ("new one", "new two", "new three")
        extra = (
            _addMaildirMessage(maildir, ("INBOX",), 1700000001, None, _extraBody(subjects[0])),
            _addMaildirMessage(
                maildir,
                ("Archive", "2019"),
                1700000002,
                "FS",
                _extraBody(subjects[1]),
                ("\\Flagged", "\\Seen"),
            ),
            _addMaildirMessage(
                maildir,
                ("Lists", "twisted"),
                1700000003,
                "RS",
                _extraBody(subjects[2]),
                ("\\Answered", "\\Seen"),
            ),
        )
        completed, progress = await _runService(config)
        self.assertTrue(completed, progress.error)
        self.assertEqual(
            (
                progress.messagesTotal,
                progress.messagesDone,
                progress.messagesAlreadyMigrated,
                progress.messagesFailed,
                progress.bytesSent,
            ),
            (5003, 5003, 5000, 0, sum(len(toCRLF(_extraBody(s))) for s in subjects)),
        )
        self.assertEqual(progress.bytesDone, progress.bytesTotal)
        _assertContent(self, instance, user, corpus.messages + extra)
        _assertRecordedUIDs(self, config, instance, user, corpus.messages + extra)


class FallbackTests(TestCase):
    """
    The APPEND pipeline picks its literal mode and batching from what the
    server advertises after login, and each choice delivers every message
    intact through a real Dovecot told (with C{imap_capability}) to hide
    LITERAL+, MULTIAPPEND, or both kinds of non-synchronizing literal.
    """

    async def _migrateThrough(
        self, capabilities: str, literalMode: LiteralMode, batchMessages: int
    ) -> None:
        """
        Migrate 300 realistic messages (most above 4096 octets, some below)
        into a Dovecot advertising C{capabilities}, and check the mode and
        batch size every connection's pipeline chose, how many continuation
        requests that mode implies, and the content that arrived.
        """
        requireDovecot(self)
        instance = sharedDovecot(capabilities)
        user = freshUser(instance)
        maildir = os.path.join(_directory(self), "Maildir")
        corpus = writeMaildir(
            maildir,
            300,
            seed=7,
            folders=(("INBOX",), ("Archive",), ("Lists", "twisted")),
        )
        # Batches of 50: a whole batch per connection, so both connections open.
        config = _config(
            self, user, {"maildir": maildir}, _plainServer(instance), batch_messages=50
        )
        recorder = _Recorder(self)

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (300, 0))
        # Dovecot advertises exactly the configured list after login.
        self.assertEqual(
            set(recorder.capabilities),
            {frozenset(capabilities.upper().encode("ascii").split())},
        )
        self.assertEqual(len(recorder.settings), config.jobs[0].connections)
        self.assertEqual(
            {(s.literalMode, s.batchMessages) for s in recorder.settings},
            {(literalMode, batchMessages)},
        )
        crlfSizes = [len(body) for body in _bodies(instance, user)]
        large = sum(size > 4096 for size in crlfSizes)
        self.assertTrue(0 < large < 300, f"{large} of 300 messages above 4096 octets")
        expectedContinuations = {
            LiteralMode.PLUS: 0,
            LiteralMode.MINUS: large,
            LiteralMode.SYNC: 300,
        }[literalMode]
        self.assertEqual(recorder.continuations, expectedContinuations)
        _assertContent(self, instance, user, corpus.messages)
        _assertRecordedUIDs(self, config, instance, user, corpus.messages)

    async def test_literalMinusWithMultiappend(self) -> None:
        """
        A server offering LITERAL- and MULTIAPPEND (Gmail's kind, with
        MULTIAPPEND added) gets MULTIAPPEND batches of 50 with
        non-synchronizing literals up to 4096 octets and synchronizing
        ones above, one continuation request per large message.
        """
        await self._migrateThrough(LITERAL_MINUS_AND_MULTIAPPEND, LiteralMode.MINUS, 50)

    async def test_literalPlusWithoutMultiappend(self) -> None:
        """
        A server offering LITERAL+ but not MULTIAPPEND (Microsoft 365's
        kind) gets one message per APPEND, every literal non-synchronizing:
        no continuation request at all.
        """
        await self._migrateThrough(LITERAL_PLUS_ONLY, LiteralMode.PLUS, 1)

    async def test_synchronizingWithMultiappend(self) -> None:
        """
        A server offering MULTIAPPEND but neither LITERAL+ nor LITERAL-
        gets MULTIAPPEND batches whose every literal waits for its
        continuation request.
        """
        await self._migrateThrough(SYNCHRONIZING_AND_MULTIAPPEND, LiteralMode.SYNC, 50)

    async def test_synchronizingWithoutMultiappend(self) -> None:
        """
        A server offering neither kind of non-synchronizing literal nor
        MULTIAPPEND (nor SASL-IR, so the session logs in with LOGIN) gets
        one message per APPEND, each literal waiting for its continuation
        request.
        """
        await self._migrateThrough(SYNCHRONIZING_ONLY, LiteralMode.SYNC, 1)


def _bodies(instance: DovecotInstance, user: DovecotUser) -> list[bytes]:
    """
    Every message body in C{user}'s account, as Dovecot stores it (CRLF).
    """
    return [m.body for messages in instance.fetchAll(user.name).values() for m in messages]


def _serverConfig(testCase: TestCase, instance: DovecotInstance, **server: object) -> ServerConfig:
    """
    A validated L{ServerConfig} for C{instance} from C{servers} entry
    C{server}.
    """
    user = instance.users[0]
    return _config(testCase, user, {"eml_dir": _directory(testCase)}, dict(server)).servers[0]


def _tcpSocket(transport: Any) -> socket.socket:
    """
    The TCP socket under C{transport}: a plain TCP transport's own; the
    wrapped TCP transport's under an implicit-TLS wrapper (whose
    C{getHandle} gives the OpenSSL connection); and, after STARTTLS, the TCP
    transport's C{socket} attribute, its C{getHandle} then giving the
    OpenSSL connection too.
    """
    handle = transport.getHandle()
    if isinstance(handle, socket.socket):
        return handle
    inner = getattr(transport, "transport", None)
    if inner is not None:
        return _tcpSocket(inner)
    sock = transport.socket
    assert isinstance(sock, socket.socket)
    return sock


class NamespaceOverrideTests(TestCase):
    """
    A server's C{namespace} key reaches the sessions the daemon opens.
    """

    async def test_override(self) -> None:
        """
        With C{namespace: {prefix: "", separator: "/"}} on a Dovecot whose
        NAMESPACE says C{.}, the session believes the configured personal
        namespace (marked configured).
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        serverConfig = _serverConfig(
            self, instance, **_plainServer(instance), namespace={"prefix": "", "separator": "/"}
        )
        session = await sessionOpener(reactor, serverConfig, user.name, user.password)()
        try:
            spaces = await session.namespaces()
            self.assertEqual(
                spaces.personalNamespace(), PersonalNamespace("", "/", configured=True)
            )
        finally:
            await session.logout()
            await session.client.closed


class NoDelayTests(TestCase):
    """
    Every connection to the destination has Nagle's algorithm off, read back
    from the kernel, and can acknowledge each read at once (C{TCP_QUICKACK}):
    plain TCP, implicit TLS, and after STARTTLS.
    """

    async def _assertNoDelay(
        self, server: Callable[[DovecotInstance], dict[str, object]], tls: bool
    ) -> None:
        """
        Open a session to the shared Dovecot with the settings C{server}
        gives for it, and check C{TCP_NODELAY} on its socket and whether it
        runs TLS.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        serverConfig = _serverConfig(self, instance, **server(instance))
        session = await sessionOpener(reactor, serverConfig, user.name, user.password)()
        try:
            transport = session.client.connection
            self.assertEqual(isinstance(transport.getHandle(), TLSConnection), tls)
            sock = _tcpSocket(transport)
            self.assertNotEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 0)
            # Immediate ACKs (for synchronizing literals) find the same
            # socket through the same wrappers, and the kernel takes them.
            self.assertIs(tcpSocketOf(transport), sock)
            self.assertTrue(session.client.acknowledgeEachRead())
            ImmediateAcks(sock).rearm()
            self.assertEqual(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK), 1)
        finally:
            await session.logout()
            await session.client.closed

    async def test_plainTCP(self) -> None:
        """
        A plain TCP connection (C{starttls: off}) has C{TCP_NODELAY} set
        (Twisted leaves it off by default).
        """
        await self._assertNoDelay(_plainServer, tls=False)

    async def test_implicitTLS(self) -> None:
        """
        The TCP connection under an implicit TLS endpoint has C{TCP_NODELAY}
        set.
        """
        await self._assertNoDelay(_implicitTLSServer, tls=True)

    async def test_afterSTARTTLS(self) -> None:
        """
        A connection upgraded with STARTTLS has C{TCP_NODELAY} set.
        """
        await self._assertNoDelay(_starttlsServer, tls=True)


class _ProxySide(Protocol):
    """
    One side of a L{_StarttlsStrippingProxy} connection.
    """

    def write(self, data: bytes) -> None:
        """
        Send C{data} on this side's connection.
        """
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        """
        Close this side's connection.
        """
        if self.transport is not None:
            self.transport.loseConnection()


class _FromClient(_ProxySide):
    """
    The client's side: what the client sends goes to Dovecot as is; what
    Dovecot answers comes back without C{STARTTLS}.
    """

    def __init__(self, proxy: _StarttlsStrippingProxy) -> None:
        self._proxy = proxy
        self._server: _ToServer | None = None
        self._early = b""
        self._fromServer = b""

    def connectionMade(self) -> None:
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", self._proxy.port)
        connecting = endpoint.connect(Factory.forProtocol(lambda: _ToServer(self)))

        def failed(reason: Failure) -> None:
            self.close()

        connecting.addErrback(failed)

    def serverConnected(self, server: _ToServer) -> None:
        """
        The connection to Dovecot is up: pass on what the client sent
        meanwhile.
        """
        self._server = server
        if self._early:
            server.write(self._early)
            self._early = b""

    def dataReceived(self, data: bytes) -> None:
        self._proxy.fromClient += data
        if self._server is None:
            self._early += data
        else:
            self._server.write(data)

    def serverSaid(self, data: bytes) -> None:
        """
        Dovecot sent C{data}: pass it on, whole lines only, so that a
        capability list split across reads is still rewritten (a literal
        waits for the next line end, which is fine before login).
        """
        self._fromServer += data
        lines, end, self._fromServer = self._fromServer.rpartition(b"\r\n")
        if end:
            self.write(lines.replace(b" STARTTLS", b"") + end)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._server is not None:
            self._server.close()


class _ToServer(_ProxySide):
    """
    Dovecot's side.
    """

    def __init__(self, client: _FromClient) -> None:
        self._client = client

    def connectionMade(self) -> None:
        self._client.serverConnected(self)

    def dataReceived(self, data: bytes) -> None:
        self._client.serverSaid(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._client.close()


class _StarttlsStrippingProxy:
    """
    A proxy in front of a Dovecot's plain port that removes C{STARTTLS} from
    every capability list the server sends: a real server that does not
    offer STARTTLS, which L{DovecotInstance} cannot be configured to be.

    @ivar port: the Dovecot port it forwards to.
    @ivar fromClient: every octet the client sent.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.fromClient = b""

    async def listen(self, testCase: TestCase) -> int:
        """
        Listen on a free port of 127.0.0.1 until C{testCase} ends.

        @return: the port.
        """
        endpoint = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1")
        listening = await endpoint.listen(Factory.forProtocol(lambda: _FromClient(self)))
        testCase.addCleanup(listening.stopListening)
        port: int = listening.getHost().port
        return port


class TLSVerificationTests(TestCase):
    """
    A server whose certificate cannot be verified, or that cannot do
    STARTTLS when it is required, fails the job with a TLS error before any
    credential or message is sent.
    """

    async def _assertRefused(
        self,
        server: Callable[[DovecotInstance], dict[str, object]],
        *expectedInError: str,
    ) -> None:
        """
        Run a job of 5 messages into the shared Dovecot, reached with the
        C{servers} entry C{server} gives; check that it fails, with every
        one of C{expectedInError} in its error, that it did not crash, and
        that nothing was appended.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        emlDirectory = os.path.join(_directory(self), "eml")
        writeEmlDirectory(emlDirectory, 5)
        config = _config(self, user, {"eml_dir": emlDirectory}, server(instance))

        completed, progress = await _runService(config)

        crashes = [f.getErrorMessage() for f in self.flushLoggedErrors()]
        self.assertFalse(completed)
        self.assertEqual(progress.state, JobState.FAILED)
        error = progress.error or ""
        self.assertNotIn(
            "internal error",
            error,
            f"the job crashed, the session let a TLS failure escape unmapped: {error}",
        )
        for text in expectedInError:
            self.assertIn(text, error)
        self.assertEqual(crashes, [], "the job crashed instead of failing")
        self.assertEqual(progress.messagesDone, 0)
        _assertNothingAppended(self, instance, user)

    async def test_implicitTLSWrongHostname(self) -> None:
        """
        Implicit TLS to a server whose certificate does not carry
        C{tls_hostname} fails the job with a TLS error naming the expected
        host, and appends nothing.
        """
        await self._assertRefused(
            lambda instance: _implicitTLSServer(instance, hostname="wrong.example"),
            "TLS",
            "wrong.example",
        )

    async def test_starttlsWrongHostname(self) -> None:
        """
        STARTTLS to a server whose certificate does not carry
        C{tls_hostname} fails the job with a TLS error naming the expected
        host, and appends nothing.
        """
        await self._assertRefused(
            lambda instance: _starttlsServer(instance, hostname="wrong.example"),
            "TLS",
            "wrong.example",
        )

    async def test_implicitTLSUntrustedCertificate(self) -> None:
        """
        Without C{tls_ca} the system's trust store is used, which does not
        trust the test's private CA: implicit TLS fails the job with a
        certificate verification error, and nothing is appended.
        """
        await self._assertRefused(
            lambda instance: _implicitTLSServer(instance, trusted=False),
            "certificate verify failed",
        )

    async def test_starttlsUntrustedCertificate(self) -> None:
        """
        Without C{tls_ca}, STARTTLS fails the job with a certificate
        verification error, and nothing is appended.
        """
        await self._assertRefused(
            lambda instance: _starttlsServer(instance, trusted=False),
            "TLS handshake failed",
            "certificate verify failed",
        )

    async def test_starttlsRequiredButNotOffered(self) -> None:
        """
        With C{starttls: required}, a server that does not offer STARTTLS
        (a real Dovecot behind a proxy that hides it) fails the job, and
        neither the password nor any message is sent in clear text.
        """
        requireDovecot(self)
        proxy = _StarttlsStrippingProxy(sharedDovecot().port)
        proxyPort = await proxy.listen(self)

        def throughProxy(instance: DovecotInstance) -> dict[str, object]:
            server = _starttlsServer(instance)
            server["endpoint"] = f"tcp:127.0.0.1:{proxyPort}"
            return server

        await self._assertRefused(throughProxy, "does not offer STARTTLS")
        for command in (b"LOGIN", b"AUTHENTICATE", b"STARTTLS", b"APPEND"):
            self.assertNotIn(command, proxy.fromClient.upper())


class LoginTests(TestCase):
    """
    Credentials the server refuses.
    """

    async def test_wrongPassword(self) -> None:
        """
        A wrong password fails the job: its state is failed, its error says
        the login was refused and does not contain the password, C{whenDone}
        reports that not every job completed, and nothing is appended.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        emlDirectory = os.path.join(_directory(self), "eml")
        writeEmlDirectory(emlDirectory, 5)
        wrong = "not-the-password-8675309"
        config = _config(
            self, user, {"eml_dir": emlDirectory}, _plainServer(instance), password=wrong
        )

        completed, progress = await _runService(config)

        self.assertFalse(completed)
        self.assertEqual(progress.state, JobState.FAILED)
        error = progress.error or ""
        self.assertIn("login refused", error)
        self.assertIn(user.name, error)
        self.assertNotIn(wrong, error)
        self.assertNotIn(wrong, repr(config))
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (0, 0))
        _assertNothingAppended(self, instance, user)


class RefusedMessageTests(TestCase):
    """
    A message the server refuses is recorded as failed with the server's
    words, and the rest keep flowing.  Dovecot refuses an empty message
    (C{NO Can't save a zero byte message}); an empty file in a Maildir is
    one.
    """

    async def _refusedInBatch(self, capabilities: str | None, literalMode: LiteralMode) -> None:
        """
        Migrate 60 messages plus an empty one in the middle of INBOX into a
        Dovecot advertising C{capabilities}, with MULTIAPPEND batches of 50,
        and check that only the empty one failed, with Dovecot's text, in
        the state store, the counters and the mailbox.
        """
        requireDovecot(self)
        instance = sharedDovecot(capabilities)
        user = freshUser(instance)
        maildir = os.path.join(_directory(self), "Maildir")
        corpus = writeMaildir(
            maildir, 60, seed=3, folders=(("INBOX",), ("Archive",)), profile="small"
        )
        culprit = _addMaildirMessage(maildir, ("INBOX",), 1300000000, "S", b"")
        inbox = [m.internalDate for m in corpus.inFolder(("INBOX",))]
        # The culprit sits in the middle of INBOX's only batch.
        self.assertTrue(
            min(inbox) < culprit.internalDate < max(inbox) and len(inbox) < 50,
            (len(inbox), min(inbox), max(inbox)),
        )
        config = _config(
            self, user, {"maildir": maildir}, _plainServer(instance), batch_messages=50
        )
        recorder = _Recorder(self)

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual(
            {(s.literalMode, s.batchMessages) for s in recorder.settings},
            {(literalMode, 50)},
        )
        self.assertEqual(
            (progress.messagesTotal, progress.messagesDone, progress.messagesFailed),
            (61, 60, 1),
        )
        store = SQLiteStateStore(config.statePath, reactor.seconds)
        try:
            failures = await store.failures(JOB)
            summary = await store.summary(JOB)
        finally:
            store.close()
        self.assertEqual(summary, (60, 1))
        self.assertEqual(
            [(f.folderKey, f.messageKey, f.mailbox) for f in failures],
            [("", culprit.key, "INBOX")],
        )
        reason = failures[0].failure or ""
        self.assertTrue(reason.startswith("refused by server: NO"), reason)
        self.assertIn("Can't save a zero byte message", reason)
        _assertContent(self, instance, user, corpus.messages)
        _assertRecordedUIDs(self, config, instance, user, corpus.messages)

    async def test_literalPlus(self) -> None:
        """
        With LITERAL+ (Dovecot's defaults), the refused batch is split until
        only the empty message is refused; the others are appended.
        """
        await self._refusedInBatch(None, LiteralMode.PLUS)

    async def test_literalMinus(self) -> None:
        """
        With LITERAL- the empty message goes as a non-synchronizing literal;
        only it is refused.
        """
        await self._refusedInBatch(LITERAL_MINUS_AND_MULTIAPPEND, LiteralMode.MINUS)

    async def test_synchronizing(self) -> None:
        """
        With synchronizing literals the server may refuse the empty message
        before asking for it; only it is refused and the connection goes
        on.
        """
        await self._refusedInBatch(SYNCHRONIZING_AND_MULTIAPPEND, LiteralMode.SYNC)


class EmlSourceTests(TestCase):
    """
    A directory of C{.eml} files migrated into one named folder.
    """

    async def test_intoNestedFolderCreatedWhenMissing(self) -> None:
        """
        The messages of an C{.eml} directory land in the configured folder
        C{Archive/2019} (C{Archive.2019} on a Dovecot whose delimiter is
        C{.}), created with its parent when missing, each with no flag and
        its file's mtime as INTERNALDATE.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        emlDirectory = os.path.join(_directory(self), "eml")
        corpus = writeEmlDirectory(emlDirectory, 40, seed=5)
        config = _config(
            self,
            user,
            {"eml_dir": emlDirectory, "folder": "Archive/2019"},
            _plainServer(instance),
        )

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (40, 0))
        mailboxes = {name for _, _, name in instance.listMailboxes(user.name)}
        self.assertEqual(mailboxes, {"INBOX", "Archive", "Archive.2019"})
        expected = tuple(
            CorpusMessage(
                folder=("Archive", "2019"),
                key=m.key,
                flags=m.flags,
                internalDate=m.internalDate,
                sha256=m.sha256,
                size=m.size,
            )
            for m in corpus.messages
        )
        _assertContent(self, instance, user, expected)


class LargeMessageTests(TestCase):
    """
    Messages above the large-file threshold are streamed from their files;
    over TLS, bodies of a record or more are handed to OpenSSL in place
    (L{imapmig.imap.tls.TLSSender}); every octet arrives as it was.
    """

    async def _migrateIdentical(
        self, server: Callable[[DovecotInstance], dict[str, object]]
    ) -> None:
        """
        Two 6 MB messages (bare LF, and mixed line endings with a CR at
        what falls on slice boundaries), one of 40 KB, one of exactly a TLS
        record's 16,384 octets and a small one, in one MULTIAPPEND batch,
        to the server entry C{server} gives for the shared Dovecot, arrive
        with exactly the octets of L{toCRLF} of their files.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        maildir = os.path.join(_directory(self), "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        header = b"From: a@example.com\nSubject: big\n\n"
        line = b"A" * 75 + b"\n"
        bodies = {
            "1700000001.big1.host:2,S": header + line * 80_000,
            "1700000002.big2.host:2,": header
            + (b"x" * 62 + b"\r\n" + b"y" * 61 + b"\r") * 48_000
            + b"end\n",
            "1700000003.small.host:2,": header + b"small\n",
            "1700000004.mid.host:2,": header + bytes(range(1, 256)).replace(b"\n", b"") * 160,
            "1700000005.record.host:2,": header + b"r" * (16_384 - len(header)),
        }
        for name, content in bodies.items():
            with open(os.path.join(maildir, "cur", name), "wb") as f:
                f.write(content)
        config = _config(self, user, {"maildir": maildir}, server(instance))

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (5, 0))
        fetched = instance.fetchAll(user.name)["INBOX"]
        self.assertEqual(
            sorted(hashlib.sha256(m.body).hexdigest() for m in fetched),
            sorted(hashlib.sha256(toCRLF(b)).hexdigest() for b in bodies.values()),
        )

    async def test_streamedBytesIdentical(self) -> None:
        """
        Over plain TCP, every octet arrives as the file holds it.
        """
        await self._migrateIdentical(_plainServer)

    async def test_implicitTLSBytesIdentical(self) -> None:
        """
        Over implicit TLS, every octet arrives as the file holds it.
        """
        await self._migrateIdentical(_implicitTLSServer)

    async def test_starttlsBytesIdentical(self) -> None:
        """
        After STARTTLS, every octet arrives as the file holds it.
        """
        await self._migrateIdentical(_starttlsServer)

    async def test_inMemoryLargeBytesIdentical(self) -> None:
        """
        Messages between the stream threshold of the pipeline and the
        large-file threshold (held in memory, written in views of slices
        straight to the socket) arrive with exactly the octets of
        L{toCRLF} of their files, beside small ones in the same batch.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        maildir = os.path.join(_directory(self), "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        header = b"From: a@example.com\nSubject: mid\n\n"
        bodies = {
            "1700000001.mid1.host:2,S": header + (b"B" * 75 + b"\n") * 30_000,
            "1700000002.small.host:2,": header + b"small\n",
            "1700000003.mid2.host:2,": header + bytes(range(1, 256)) * 9_000 + b"\n",
        }
        for name, content in bodies.items():
            with open(os.path.join(maildir, "cur", name), "wb") as f:
                f.write(content)
        config = _config(self, user, {"maildir": maildir}, _plainServer(instance))

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (3, 0))
        fetched = instance.fetchAll(user.name)["INBOX"]
        self.assertEqual(
            [hashlib.sha256(m.body).hexdigest() for m in fetched],
            [hashlib.sha256(toCRLF(b)).hexdigest() for b in bodies.values()],
        )


class _ConnectionCounter(Protocol):
    """
    Counts, in C{counts}, the connections made to a port, closing each at
    once.
    """

    def __init__(self, counts: list[int]) -> None:
        self._counts = counts

    def connectionMade(self) -> None:
        self._counts.append(1)
        assert self.transport is not None
        self.transport.loseConnection()


async def _twistd(configPath: str) -> tuple[bytes, bytes, int]:
    """
    Run C{twistd -n imapmig --config configPath --exit-when-done} from the
    source tree, in a child process.

    @return: its standard output, standard error and exit status.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_SOURCE_TREE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    result: tuple[bytes, bytes, int] = await getProcessOutputAndValue(
        sys.executable,
        [
            # "python -m twisted.scripts.twistd" would exit 0 doing nothing:
            # that module has no __main__ block.
            "-c",
            "import sys; from twisted.scripts.twistd import run;"
            " sys.argv[0] = 'twistd'; run()",
            "-n",
            "--pidfile=",
            "imapmig",
            "--config",
            configPath,
            "--exit-when-done",
        ],
        env=env,
        path=_SOURCE_TREE,
        reactor=reactor,
    )
    return result


class TwistdPluginTests(TestCase):
    """
    The daemon as admins run it: C{twistd -n imapmig --config FILE
    --exit-when-done} in a child process, its exit status telling the
    outcome.
    """

    async def _runJob(
        self, wrongPassword: str | None = None
    ) -> tuple[bytes, bytes, int, DovecotInstance, DovecotUser]:
        """
        Run the plugin on a configuration migrating 5 C{.eml} messages into
        a fresh account of the shared Dovecot, over STARTTLS, logging in
        with the account's password or C{wrongPassword}.

        @return: the process's output, error output and exit status, the
            instance and the account.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = _directory(self)
        writeEmlDirectory(os.path.join(directory, "eml"), 5)
        writePasswordFile(
            os.path.join(directory, "password"),
            user.password if wrongPassword is None else wrongPassword,
        )
        configPath = os.path.join(directory, "imapmig.yaml")
        with open(configPath, "w") as f:
            # Relative paths are relative to the file's directory.
            f.write(
                f"""\
state: state.sqlite
status: off
servers:
  dovecot:
    endpoint: "tcp:127.0.0.1:{instance.port}"
    starttls: required
    tls_ca: {instance.caCertificatePath}
    tls_hostname: localhost
jobs:
  - name: {JOB}
    source: {{eml_dir: eml}}
    destination: {{server: dovecot, user: {user.name}, password_file: password}}
"""
            )
        out, err, status = await _twistd(configPath)
        return out, err, status, instance, user

    async def test_exitsZeroWhenDone(self) -> None:
        """
        A job that completes makes the process exit with status 0, after
        appending every message.
        """
        out, err, status, instance, user = await self._runJob()
        self.assertEqual(status, 0, (out + err).decode("utf-8", "replace"))
        self.assertEqual(len(_bodies(instance, user)), 5)

    async def test_exitsOneWhenLoginRefused(self) -> None:
        """
        A job whose login is refused makes the process exit with status 1,
        its log saying why without the password.
        """
        wrong = "not-the-password-31337"
        out, err, status, instance, user = await self._runJob(wrong)
        self.assertEqual(status, 1, (out + err).decode("utf-8", "replace"))
        self.assertIn(b"login refused", out + err)
        self.assertNotIn(wrong.encode("ascii"), out + err)
        _assertNothingAppended(self, instance, user)

    async def test_invalidConfigurationExitsTwo(self) -> None:
        """
        An invalid configuration makes the process exit with status 2 after
        printing one line per problem, each naming the file and the key, and
        without connecting to any server, not even the valid one a valid
        job names.
        """
        connections: list[int] = []
        listening = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
            Factory.forProtocol(lambda: _ConnectionCounter(connections))
        )
        self.addCleanup(listening.stopListening)
        directory = _directory(self)
        os.makedirs(os.path.join(directory, "eml"))
        writePasswordFile(os.path.join(directory, "password"), "secret")
        configPath = os.path.join(directory, "imapmig.yaml")
        with open(configPath, "w") as f:
            f.write(
                f"""\
state: state.sqlite
status: off
servers:
  guard:
    endpoint: "tcp:127.0.0.1:{listening.getHost().port}"
    starttls: "off"
defaults:
  batch_messages: 0
jobs:
  - name: valid
    source: {{eml_dir: eml}}
    destination: {{server: guard, user: someone, password_file: password}}
  - name: invalid
    windw_messages: 10
    source: {{eml_dir: eml}}
    destination: {{server: nwe, user: someone, password_file: password}}
"""
            )

        out, err, status = await _twistd(configPath)

        self.assertEqual(status, 2, (out + err).decode("utf-8", "replace"))
        problems = err.decode("utf-8").splitlines()
        self.assertEqual(len(problems), 3, problems)
        for problem in problems:
            self.assertTrue(problem.startswith(configPath + ": "), problem)
        keys = sorted(problem[len(configPath) + 2 :].split(":")[0] for problem in problems)
        self.assertEqual(
            keys,
            ["defaults.batch_messages", "jobs[1].destination.server", "jobs[1].windw_messages"],
        )
        self.assertEqual(connections, [])
