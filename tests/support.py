# -*- test-case-name: tests.test_integration -*-
"""
Helpers shared by the tests that run against a real, private Dovecot.

Starting and stopping a Dovecot costs about 1.3 s, so the instances are
shared: L{sharedDovecot} starts one per distinct configuration the first time
a test asks for it and stops them all, in parallel, when the test process
exits.  Tests keep out of each other's way by taking a fresh account each
(L{freshUser}): an account's mailboxes are only ever touched by the one test
that took it.

Everything here that talks to Dovecot directly (starting, L{fetchAll}) is
synchronous; it runs between reactor turns, before and after the code under
test.
"""

from __future__ import annotations

import atexit
import hashlib
import imaplib
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence

import yaml
from attrs import frozen
import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)
from twisted.internet import defer, tcp
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

import imapmig
from imapmig.commands import cli
from imapmig.commands import verify as verifyCommand
from imapmig.config import Config
from imapmig.progress import JobProgress
from imapmig.daemon.service import buildService
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.corpus import Corpus, CorpusMessage, writeEmlDirectory, writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, FetchedMessage
from imapmig.testing.faultproxy import Fault, FaultProxy

USERS_PER_INSTANCE = 96
"""
Accounts each shared instance is started with; one per test that uses it
(the whole suite in one process takes more than 24; room to grow).
"""

_instances: dict[str | None, DovecotInstance] = {}
_usersTaken: dict[str | None, int] = {}
_root: str | None = None


def _rootDirectory() -> str:
    """
    The directory holding every shared instance, created on first use.  It
    lives under the system's temporary directory, not trial's, so its Unix
    socket paths stay short and it outlives any one test.
    """
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix="imapmig-it-")
        os.chmod(_root, 0o755)
        atexit.register(_stopAll)
    return _root


def _stopAll() -> None:
    """
    Stop every shared instance (in parallel: each takes about 1.1 s) and
    remove their files.
    """
    stoppers = [threading.Thread(target=i.stop) for i in _instances.values()]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()
    _instances.clear()
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)


def sharedDovecot(capabilities: str | None = None) -> DovecotInstance:
    """
    A running private Dovecot advertising C{capabilities} after login (its
    full default list when L{None}), started on first use and stopped when
    the process exits.

    @param capabilities: see L{DovecotInstance}'s parameter of that name.
    """
    instance = _instances.get(capabilities)
    if instance is None:
        name = f"dovecot{len(_instances)}"
        instance = DovecotInstance(
            os.path.join(_rootDirectory(), name),
            users=[
                DovecotUser(f"user{n:02d}", f"password-{n:02d}")
                for n in range(1, USERS_PER_INSTANCE + 1)
            ],
            capabilities=capabilities,
        )
        _instances[capabilities] = instance
        _usersTaken[capabilities] = 0
        instance.start()
    return instance


def freshUser(instance: DovecotInstance) -> DovecotUser:
    """
    An account of C{instance} (from L{sharedDovecot}) no other test has
    taken.

    @raise RuntimeError: every account is taken; raise
        L{USERS_PER_INSTANCE}.
    """
    for capabilities, each in _instances.items():
        if each is instance:
            taken = _usersTaken[capabilities]
            if taken >= len(instance.users):
                raise RuntimeError(f"all {taken} accounts of {instance!r} are taken")
            _usersTaken[capabilities] = taken + 1
            return instance.users[taken]
    raise ValueError(f"{instance!r} is not a shared instance")


def writePasswordFile(path: str, password: str) -> str:
    """
    Write C{password} into a new file at C{path} only its owner may read, as
    the configuration requires.

    @return: C{path}.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return path


def mailboxName(folder: tuple[str, ...], delimiter: str = ".") -> str:
    """
    The name a source folder gets on a server with hierarchy C{delimiter}.
    """
    if folder == ("INBOX",):
        return "INBOX"
    return delimiter.join(folder)


MessageView = tuple[str, tuple[str, ...], datetime]
"""
What a test compares of one message: the SHA-256 of its CRLF form, its
flags sorted (C{\\Recent} left out), and its INTERNALDATE in UTC.
"""


def corpusView(
    messages: Iterable[CorpusMessage], delimiter: str = "."
) -> dict[str, Counter[MessageView]]:
    """
    Per destination mailbox, the multiset of L{MessageView}s the source
    messages should become.
    """
    result: dict[str, Counter[MessageView]] = {}
    for message in messages:
        view = (
            message.sha256,
            tuple(sorted(message.flags)),
            message.internalDate.astimezone(timezone.utc),
        )
        result.setdefault(mailboxName(message.folder, delimiter), Counter())[view] += 1
    return result


def fetchedView(
    fetched: Mapping[str, list[FetchedMessage]],
) -> dict[str, Counter[MessageView]]:
    """
    Per mailbox holding any message, the multiset of L{MessageView}s that
    Dovecot holds.  Empty mailboxes (parents created for a hierarchy, an
    untouched INBOX) are left out.
    """
    result: dict[str, Counter[MessageView]] = {}
    for name, messages in fetched.items():
        if not messages:
            continue
        result[name] = Counter(
            (
                hashlib.sha256(message.body).hexdigest(),
                tuple(sorted(f for f in message.flags if f.lower() != "\\recent")),
                message.internalDate.astimezone(timezone.utc),
            )
            for message in messages
        )
    return result


_UID_AND_LITERAL = re.compile(rb"\bUID (\d+)")


def digestsByUID(
    instance: DovecotInstance, user: DovecotUser, mailbox: str
) -> tuple[int, dict[int, str]]:
    """
    Read C{mailbox} of C{user} with an independent client (L{imaplib}).

    @return: the mailbox's UIDVALIDITY, and the hex SHA-256 of every
        message's full body by UID.
    """
    client = imaplib.IMAP4("127.0.0.1", instance.port, timeout=60)
    try:
        client.login(user.name, user.password)
        encoded = mailbox.encode("imap4-utf-7").decode("ascii")
        typ, _ = client.select('"' + encoded + '"', readonly=True)
        if typ != "OK":
            raise imaplib.IMAP4.error(f"cannot select {mailbox!r}")
        typ, data = client.response("UIDVALIDITY")
        uidValidity = int(data[0])
        typ, data = client.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        digests: dict[int, str] = {}
        for item in data:
            if isinstance(item, tuple):
                match = _UID_AND_LITERAL.search(item[0])
                if match is None:
                    raise imaplib.IMAP4.error(f"no UID in {item[0][:100]!r}")
                digests[int(match.group(1))] = hashlib.sha256(item[1]).hexdigest()
    finally:
        client.logout()
    return uidValidity, digests


def denyAccess(testCase: SynchronousTestCase, path: str) -> None:
    """
    Make C{path} (a file or a directory) unreadable for the rest of the
    test: by its mode where that suffices, and, for root (whom modes do
    not stop), by making C{open}, C{os.open} and C{os.scandir} raise the
    C{PermissionError} the kernel would raise for anyone else.  Either way
    the code under test meets a real C{PermissionError} from the same
    calls.
    """
    import builtins
    import errno

    mode = os.stat(path).st_mode & 0o7777
    os.chmod(path, 0)
    testCase.addCleanup(os.chmod, path, mode)
    if os.geteuid() != 0:
        return

    def denied(name: object) -> bool:
        return isinstance(name, str) and os.path.abspath(name) == os.path.abspath(path)

    def refuse(name: str) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)

    realOpen, realOsOpen, realScandir = builtins.open, os.open, os.scandir

    def guardedOpen(file: Any, *args: Any, **kwargs: Any) -> Any:
        if denied(file):
            raise refuse(file)
        return realOpen(file, *args, **kwargs)

    def guardedOsOpen(file: Any, *args: Any, **kwargs: Any) -> int:
        if denied(file):
            raise refuse(file)
        return realOsOpen(file, *args, **kwargs)

    def guardedScandir(directory: Any = ".") -> Any:
        if denied(directory):
            raise refuse(directory)
        return realScandir(directory)

    testCase.patch(builtins, "open", guardedOpen)
    testCase.patch(os, "open", guardedOsOpen)
    testCase.patch(os, "scandir", guardedScandir)


def newDirectory(testCase: SynchronousTestCase) -> str:
    """
    A new directory for one test's files.
    """
    path = os.path.abspath(str(testCase.mktemp()))
    os.makedirs(path)
    return path


def plainServer(instance: DovecotInstance) -> dict[str, object]:
    """
    The C{servers} entry of C{instance}'s plain port, without STARTTLS.
    """
    return {"endpoint": f"tcp:127.0.0.1:{instance.port}", "starttls": "off"}


# Running the daemon as a child process, and what a resilience test needs
# around it: dedicated and private Dovecots, configuration files, and a
# message-by-message account of what arrived.


def dedicatedDovecot(purpose: str) -> DovecotInstance:
    """
    A running private Dovecot with Dovecot's default capabilities, shared
    only by the tests that name the same C{purpose}, started on first use
    and stopped with the others when the process exits.  Take accounts with
    L{freshUser}, as from L{sharedDovecot}: a suite that would take more
    accounts than one instance has gets instances of its own this way.

    @param purpose: a name for the instance, e.g. C{"resilience"}.
    """
    # The key cannot be a capability list, so it never meets sharedDovecot's.
    key = "\0" + purpose
    instance = _instances.get(key)
    if instance is None:
        instance = DovecotInstance(
            os.path.join(_rootDirectory(), f"dovecot{len(_instances)}"),
            users=[
                DovecotUser(f"user{n:02d}", f"password-{n:02d}")
                for n in range(1, USERS_PER_INSTANCE + 1)
            ],
        )
        _instances[key] = instance
        _usersTaken[key] = 0
        instance.start()
    return instance


def privateDovecot(testCase: SynchronousTestCase) -> DovecotInstance:
    """
    A running Dovecot of one test's own, with one account (C{user01}),
    stopped when the test ends: for a test that stops or restarts the
    server.
    """
    instance = DovecotInstance(
        tempfile.mkdtemp(prefix="private-", dir=_rootDirectory()),
        users=[DovecotUser("user01", "password-01")],
    )
    testCase.addCleanup(instance.stop)
    instance.start()
    return instance


def restartDovecot(reactor: Any, instance: DovecotInstance) -> Deferred[None]:
    """
    Stop C{instance} now and start it again with the same accounts and
    mail.  C{SIGTERM} goes, before this returns, to every process of the
    instance (its master runs in a process group of its own), as a
    machine's shutdown would send it: each IMAP session ends at once with
    C{* BYE Server shutting down.}  (Signalled alone, the master lets its
    sessions run on for up to 30 s.)  Waiting for it to exit and to greet again happens in a
    thread of C{reactor}'s pool, so that the reactor keeps running
    meanwhile.  It listens on new ports afterwards (C{instance.port}):
    point a proxy at them.

    @param reactor: the running reactor.
    @return: fires once it greets again.
    """
    if instance.pid is not None:
        os.killpg(instance.pid, signal.SIGTERM)

    def restart() -> None:
        instance.stop()
        instance.start()

    return deferToThreadPool(reactor, reactor.getThreadPool(), restart)


@frozen
class ProxiedMigration:
    """
    What L{proxiedMigration} set up: a Maildir corpus, a fault proxy before
    a Dovecot, and a daemon configuration migrating the one into the other
    through the proxy.
    """

    corpus: Corpus
    proxy: FaultProxy
    configPath: str


async def proxiedMigration(
    testCase: SynchronousTestCase,
    reactor: Any,
    instance: DovecotInstance,
    user: DovecotUser,
    messages: int,
    seed: int,
    folders: Iterable[tuple[str, ...]],
    profile: str = "small",
    faults: Iterable[Fault] = (),
    socketBuffer: int | None = None,
    server: Mapping[str, object] | None = None,
    **jobSettings: object,
) -> ProxiedMigration:
    """
    Write a Maildir of C{messages} messages, start a L{FaultProxy} to
    C{instance} (stopped when the test ends), and write the daemon's
    configuration: plain TCP to the proxy, no compression.

    @param server: more keys of the server (C{timeout}).
    @param jobSettings: more keys of the job (C{identity="off"}).
    """
    directory = newDirectory(testCase)
    maildir = os.path.join(directory, "Maildir")
    corpus = writeMaildir(maildir, messages, seed=seed, folders=tuple(folders), profile=profile)
    proxy = FaultProxy(reactor, reactor, "127.0.0.1", instance.port, faults, socketBuffer=socketBuffer)
    port = await proxy.listen()
    testCase.addCleanup(lambda: Deferred.fromCoroutine(proxy.stop()))
    configPath = writeDaemonConfig(
        directory,
        user,
        {"maildir": maildir},
        {"endpoint": f"tcp:127.0.0.1:{port}", "starttls": "off", "compress": "off", **(server or {})},
        **jobSettings,
    )
    return ProxiedMigration(corpus, proxy, configPath)


def writeDaemonConfig(
    directory: str,
    user: DovecotUser,
    source: Mapping[str, object],
    server: Mapping[str, object],
    **jobSettings: object,
) -> str:
    """
    Write the YAML configuration of one job, C{job}, migrating C{source} into
    C{user}'s account on C{server}, its state database and password file
    beside it in C{directory}, the status listener off.

    @param jobSettings: more keys of the job, e.g. C{identity="off"}
        (written quoted, as YAML needs it).
    @return: the configuration file's path.
    """
    passwordFile = os.path.join(directory, "password")
    if not os.path.exists(passwordFile):
        writePasswordFile(passwordFile, user.password)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"dovecot": dict(server)},
        "jobs": [
            {
                "name": "job",
                "source": dict(source),
                "destination": {
                    "server": "dovecot",
                    "user": user.name,
                    "password_file": passwordFile,
                },
                **jobSettings,
            }
        ],
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    return path


def writeEmlJobConfig(
    testCase: SynchronousTestCase,
    instance: DovecotInstance,
    user: DovecotUser,
    messages: int,
    **server: object,
) -> str:
    """
    Write, in a new directory of C{testCase}, an EML directory of
    C{messages} generated messages and the configuration of one job
    migrating it into C{user}'s account on C{instance}'s plain port
    (L{plainServer}, C{server} keys added), the status listener off.

    @return: the configuration file's path.
    """
    directory = newDirectory(testCase)
    eml = os.path.join(directory, "eml")
    writeEmlDirectory(eml, messages)
    return writeDaemonConfig(
        directory, user, {"eml_dir": eml}, {**plainServer(instance), **server}
    )


SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(imapmig.__file__)))
"""
The directory holding the C{imapmig} package under test (and its twistd
plugin), which a child process must import.
"""


def daemonCommand(configPath: str | None, *arguments: str) -> list[str]:
    """
    The command line running C{python -m imapmig.daemon} with this Python
    on C{configPath} (none: no C{--config}) with C{arguments}.
    """
    config = [] if configPath is None else ["--config", configPath]
    return [sys.executable, "-m", "imapmig.daemon", *config, *arguments]


def twistdCommand(configPath: str, exitWhenDone: bool = True) -> list[str]:
    """
    The command line that runs C{twistd -n imapmig --config configPath
    --exit-when-done} with this Python, from L{SOURCE_TREE}.

    @param exitWhenDone: with C{--exit-when-done}; without it the daemon
        serves until it is stopped.
    """
    return [
        sys.executable,
        # "python -m twisted.scripts.twistd" would exit 0 doing nothing:
        # that module has no __main__ block.
        "-c",
        "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()",
        "-n",
        "--pidfile=",
        "imapmig",
        "--config",
        configPath,
    ] + (["--exit-when-done"] if exitWhenDone else [])


def sourceTreeEnvironment() -> dict[str, str]:
    """
    This process's environment with L{SOURCE_TREE} first on C{PYTHONPATH}.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [SOURCE_TREE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


_OUTPUT_KEPT = 256 * 1024


class DaemonTimedOut(Exception):
    """
    The daemon did not exit within the time a test allowed; it was killed.
    """


class DaemonProcess(ProcessProtocol):
    """
    The daemon running as a child process (L{startDaemon}).

    @ivar status: once it has exited, its exit status, or minus the signal
        that killed it (as L{subprocess} reports it); L{None} before.
    @ivar output: the last 256 KiB (at least) of its standard output and
        error, interleaved as they arrived.
    @ivar pid: its process id.
    """

    def __init__(self) -> None:
        self.output = bytearray()
        self.pid = 0
        self.status: int | None = None
        self._waiting: list[Deferred[int]] = []

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.pid = self.transport.pid

    def outReceived(self, data: bytes) -> None:
        self.output += data
        if len(self.output) > 2 * _OUTPUT_KEPT:
            del self.output[:-_OUTPUT_KEPT]

    errReceived = outReceived

    def processEnded(self, reason: Failure) -> None:
        signal = getattr(reason.value, "signal", None)
        if signal is not None:
            self.status = -signal
        else:
            self.status = getattr(reason.value, "exitCode", 0) or 0
        waiting, self._waiting = self._waiting, []
        for each in waiting:
            each.callback(self.status)

    def whenEnded(self) -> Deferred[int]:
        """
        Fire with L{status} once it has exited (at once if it has).
        """
        if self.status is not None:
            return succeed(self.status)
        waiting: Deferred[int] = Deferred()
        self._waiting.append(waiting)
        return waiting

    def kill(self) -> None:
        """
        Kill it with C{SIGKILL} (no chance to clean up), unless it has ended.
        """
        if self.status is None and self.transport is not None:
            try:
                self.transport.signalProcess("KILL")
            except ProcessExitedAlready:
                pass

    def tail(self, lines: int = 30) -> str:
        """
        The last C{lines} lines of its output, for a failure message.
        """
        text = bytes(self.output).decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    async def exited(self, reactor: Any, timeout: float) -> int:
        """
        Wait until it exits, at most C{timeout} seconds, then kill it.

        @return: its exit status (see L{status}).
        @raise DaemonTimedOut: it had not exited in time; the message gives
            its output's tail.
        """
        try:
            return await self.whenEnded().addTimeout(timeout, reactor)
        except defer.TimeoutError:
            self.kill()
            await self.whenEnded()
            raise DaemonTimedOut(
                f"the daemon (pid {self.pid}) had not exited after {timeout} s and was"
                f" killed; its output ends:\n{self.tail()}"
            ) from None


def startDaemon(
    testCase: SynchronousTestCase,
    reactor: Any,
    configPath: str,
    command: Sequence[str] | None = None,
) -> DaemonProcess:
    """
    Start C{twistd -n imapmig --config configPath --exit-when-done} (from
    L{SOURCE_TREE}), or C{command} when given, in a child process of
    C{reactor}; it is killed, if still running, when the test ends.
    """
    daemon = DaemonProcess()
    reactor.spawnProcess(
        daemon,
        sys.executable,
        list(command) if command is not None else twistdCommand(configPath),
        env=sourceTreeEnvironment(),
        path=SOURCE_TREE,
    )

    async def reap() -> None:
        daemon.kill()
        await daemon.whenEnded()

    testCase.addCleanup(lambda: Deferred.fromCoroutine(reap()))
    return daemon


@frozen
class Deliveries:
    """
    What a destination account holds of a corpus, message by message (by
    mailbox and SHA-256 of the body).

    @ivar expected: how many source messages there are.
    @ivar held: how many messages the account holds.
    @ivar lost: the source messages the account does not hold.
    @ivar duplicated: each source message held more than once, with how
        many copies.
    @ivar unexpected: how many held messages are no source message.
    """

    expected: int
    held: int
    lost: tuple[CorpusMessage, ...]
    duplicated: tuple[tuple[CorpusMessage, int], ...]
    unexpected: int

    @property
    def exactlyOnce(self) -> bool:
        """
        Whether every source message is held exactly once, and nothing else.
        """
        return not (self.lost or self.duplicated or self.unexpected)

    @property
    def extraCopies(self) -> int:
        """
        How many copies beyond the first the duplicated messages have.
        """
        return sum(copies - 1 for _, copies in self.duplicated)

    def summary(self) -> str:
        """
        One line: expected, held, lost, duplicated, unexpected.
        """
        return (
            f"{self.expected} source messages, {self.held} held: {len(self.lost)} lost,"
            f" {len(self.duplicated)} duplicated ({self.extraCopies} extra copies),"
            f" {self.unexpected} unexpected"
        )


def deliveries(
    fetched: Mapping[str, list[FetchedMessage]], messages: Iterable[CorpusMessage]
) -> Deliveries:
    """
    Account for each of C{messages} in what an account holds.

    @param fetched: every mailbox of the account, read directly from the
        server (L{DovecotInstance.fetchAll}), not through any proxy.
    """
    held: Counter[tuple[str, str]] = Counter()
    for name, inMailbox in fetched.items():
        for each in inMailbox:
            held[(name, hashlib.sha256(each.body).hexdigest())] += 1
    total = sum(held.values())
    lost = []
    duplicated = []
    expected = 0
    for message in messages:
        expected += 1
        copies = held.pop((mailboxName(message.folder), message.sha256), 0)
        if copies == 0:
            lost.append(message)
        elif copies > 1:
            duplicated.append((message, copies))
    return Deliveries(
        expected=expected,
        held=total,
        lost=tuple(lost),
        duplicated=tuple(duplicated),
        unexpected=sum(held.values()),
    )


# Running the daemon in this process (on the global reactor, as the
# integration tests do), then imapmig verify and imapmig report on its jobs.


async def settleConnections(reactor: Any) -> None:
    """
    Wait until every TCP connection the code under test opened is closed
    (a session closes its connection a reactor turn or so after its LOGOUT
    reply); trial fails a test that leaves a socket behind.

    @raise AssertionError: connections are still open after 5 s.
    """
    for _ in range(500):
        if not any(
            isinstance(selectable, (tcp.Client, tcp.Server))
            for selectable in reactor.getReaders() + reactor.getWriters()
        ):
            return
        await deferLater(reactor, 0.01, lambda: None)
    raise AssertionError("connections still open 5 s after the run")


async def runDaemon(
    reactor: Any, config: Config, timeout: float = 60
) -> tuple[bool, dict[str, JobProgress]]:
    """
    Run the daemon built from C{config} until its queue is drained, then
    stop it and wait for its connections to close.

    @param timeout: seconds the run may take.
    @return: whether every job completed (what C{whenDone} reported), and
        each job's progress, by job name.
    """
    finished: Deferred[bool] = Deferred()
    service = buildService(config, reactor, whenDone=finished.callback)
    service.startService()
    try:
        completed = await finished.addTimeout(timeout, reactor)
    finally:
        await service.stopService()
        await settleConnections(reactor)
    return completed, {job.name: service.progress.job(job.name) for job in config.jobs}


async def migrate(
    testCase: SynchronousTestCase,
    reactor: Any,
    config: Config,
    timeout: float = 60,
) -> dict[str, JobProgress]:
    """
    Run the daemon (L{runDaemon}) and assert that every job completed.

    @param timeout: seconds the run may take.
    @return: each job's progress, by job name.
    """
    completed, progress = await runDaemon(reactor, config, timeout)
    testCase.assertTrue(
        completed,
        "a job did not complete: "
        + "; ".join(f"{name}: {p.error}" for name, p in progress.items()),
    )
    return progress


async def verifyJobs(
    reactor: Any, config: Config, jobs: Sequence[str]
) -> tuple[int, list[dict[str, Any]], str]:
    """
    Run C{imapmig verify} on C{jobs} of C{config} through L{verifyCommand.verify}.

    @return: its exit status, its JSON report and what it printed.
    """
    reportPath = os.path.join(os.path.dirname(config.path), "imapmig-verify.json")
    out = io.StringIO()
    store = SQLiteStateStore(config.statePath, seconds=reactor.seconds)
    try:
        status = await verifyCommand.verify(config, list(jobs), store, reactor, reportPath, out)
    finally:
        store.close()
    try:
        await settleConnections(reactor)
    except AssertionError as e:
        # Say what verify found too: the leak may hide another failure.
        raise AssertionError(f"after imapmig verify: {e}; it printed:\n{out.getvalue()}")
    with open(reportPath, encoding="utf-8") as f:
        document: list[dict[str, Any]] = json.load(f)
    return status, document, out.getvalue()


def reportJobs(
    testCase: SynchronousTestCase, config: Config, jobs: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """
    Run C{imapmig report --json} on C{jobs} of C{config} through
    L{cli.main}, asserting that it exits 0 when no job and no message
    failed, 1 otherwise.

    @return: each job's entry of the report, by job name.
    """
    out = io.StringIO()
    argv = ["report", "--config", config.path, "--json"]
    for job in jobs:
        argv += ["--job", job]
    status = cli.main(argv, out=out)
    entries: list[dict[str, Any]] = json.loads(out.getvalue())
    failed = any(e["failed"] or e["job_failure"] is not None for e in entries)
    testCase.assertEqual(status, 1 if failed else 0, out.getvalue())
    testCase.assertEqual(sorted(e["job"] for e in entries), sorted(jobs))
    return {entry["job"]: entry for entry in entries}


def verifyDifferences(document: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """
    Every difference of a verify report, as C{(kind, mailbox, folder,
    message key, UID)}, sorted.
    """
    return sorted(
        (d["kind"], mailbox["mailbox"], d["folder"], d["message_key"], d["uid"])
        for entry in document
        for mailbox in entry.get("mailboxes", ())
        for d in mailbox["differences"]
    )
