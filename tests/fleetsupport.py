# -*- test-case-name: tests.test_fleet_integration -*-
"""
What the fleet's integration tests (L{tests.test_fleet_integration}) run:
three daemons as child processes on one private PostgreSQL
(L{imapmig.testing.postgresql}) and one private Dovecot
(L{tests.support.dedicatedDovecot}), thirty jobs of small Maildirs, and
the instruments that watch them from outside:

  - L{AppendWatch}, a relay in front of Dovecot that every daemon reaches
    it through, which notes each APPEND command and each message's literal
    it carries, with the time it arrived and the daemon that sent it (the
    process owning the connection's socket, found in C{/proc}); all the
    daemons must share one configuration of the jobs (the fleet refuses a
    daemon whose jobs differ, endpoints included), so one relay serves
    them all.
  - L{QueueWatch}, which reads the queue's tables (C{imapmig_queue.jobs},
    C{imapmig_queue.daemons}) and the journal's row count per job
    (C{imapmig.journal}) about every 0.2 s in a thread of its own, straight
    from the cluster, and keeps every reading: who held each job when, and
    each daemon's lease as the database recorded it.
  - L{FleetDatabase}: the cluster, the database C{fleet} owned by
    L{PASSWORD_ROLE} (the daemons log in with its password, from a 0600
    file), and queries as the superuser.

Nothing here is imapmig's code under test, and nothing existed to
extend: L{tests.connectioncounter} counts connections, not commands, and
L{imapmig.testing.faultproxy.FaultProxy} counts octets (it stands between
one daemon and the database in the partition test).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterable, Mapping, Sequence

import psycopg
import yaml
from attrs import frozen, mutable
from twisted.internet.address import IPv4Address
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater
from twisted.protocols.portforward import ProxyFactory, ProxyServer
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.corpus import Corpus, writeMaildirs
from imapmig.testing.dovecot import DovecotInstance, DovecotUser
from imapmig.testing.postgresql import PASSWORD_ROLE, SUPERUSER, PostgreSQLCluster
from tests.connectioncounter import _loginName
from tests.support import (
    DaemonProcess,
    corpusView,
    deliveries,
    fetchedView,
    sourceTreeEnvironment,
    twistdCommand,
    writePasswordFile,
)

LEASE = 10.0
"""
The fleet's lease in seconds (C{fleet.lease}, its least value): a dead
daemon's jobs are taken over after at most this much.
"""

DESTINATION_TIMEOUT = 10.0
"""
Dovecot's C{timeout} in the configuration: the reconciliation's quiet
period after a takeover (docs/fleet-design.md "Takeover").
"""

FLEET_NAME = "fleetint"

_TROUBLE = re.compile(r"#(?:warn|error|critical)\]|^\S*(?:Error|Exception|Failure)\b|Traceback")


# -- the database ----------------------------------------------------------


class FleetDatabase:
    """
    A private PostgreSQL cluster (started, destroyed when the test ends)
    holding the database C{fleet} owned by L{PASSWORD_ROLE}, whose password
    is in L{passwordFile} (mode 0600).
    """

    DATABASE = "fleet"

    def __init__(self, testCase: SynchronousTestCase, directory: str) -> None:
        self.cluster = PostgreSQLCluster(os.path.join(directory, "postgresql"))
        testCase.addCleanup(self.cluster.destroy)
        self.cluster.start()
        self.cluster.createDatabase(self.DATABASE, owner=PASSWORD_ROLE)
        self.passwordFile = writePasswordFile(
            os.path.join(directory, "postgresql.password"), self.cluster.password
        )

    def uri(self, port: int | None = None) -> str:
        """
        The URI the daemons are given (no password in it), to the cluster
        or to C{port} on loopback (a proxy in front of it).
        """
        return (
            f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{port or self.cluster.port}/{self.DATABASE}"
        )

    def query(self, statement: str, parameters: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """
        Run C{statement} as the superuser, straight to the cluster, in a
        connection of its own (blocking: call it from a thread while the
        daemons run, or between their runs).
        """
        with psycopg.connect(
            self.cluster.dsn(self.DATABASE, SUPERUSER), autocommit=True, connect_timeout=5
        ) as connection:
            cursor = connection.execute(statement, parameters)
            return cursor.fetchall() if cursor.description else []


# -- the queue's tables, watched -------------------------------------------


@frozen
class JobRow:
    """
    One job's row of C{imapmig_queue.jobs} at one reading.
    """

    state: str
    owner: str | None
    generation: int


@frozen
class DaemonRow:
    """
    One daemon's row of C{imapmig_queue.daemons} at one reading; times in
    seconds since the epoch, by the database's clock.
    """

    daemonId: str
    pid: int
    leaseUntil: float
    retired: bool


@frozen
class Reading:
    """
    The queue's tables and the journal's rows per job as read at C{time}
    (this machine's clock, which the database shares).
    """

    time: float
    jobs: Mapping[str, JobRow]
    daemons: Mapping[str, DaemonRow]
    journal: Mapping[str, int]

    def held(self) -> dict[str, list[str]]:
        """
        The jobs each daemon holds (claimed), by daemon id.
        """
        result: dict[str, list[str]] = {}
        for name, row in self.jobs.items():
            if row.state == "claimed" and row.owner is not None:
                result.setdefault(row.owner, []).append(name)
        return result

    def idsOf(self, pid: int) -> set[str]:
        """
        Every daemon id (incarnation) the process C{pid} registered.
        """
        return {d.daemonId for d in self.daemons.values() if d.pid == pid}


_JOBS = "SELECT name, state, owner::text, generation FROM imapmig_queue.jobs"
_DAEMONS = (
    "SELECT daemon_id::text, pid, extract(epoch FROM lease_until)::float8,"
    " retired_at IS NOT NULL FROM imapmig_queue.daemons"
)
_JOURNAL = "SELECT job, count(*) FROM imapmig.journal GROUP BY job"


class QueueWatch:
    """
    Reads the queue's tables about every L{INTERVAL} seconds in a thread
    of its own, straight from the cluster (never through a proxy a test
    faults), and keeps every reading; a reading the database could not
    give (it is restarting, or the daemons have not made the tables yet)
    is left out.

    @ivar readings: every reading, oldest first.
    """

    INTERVAL = 0.2

    def __init__(self, database: FleetDatabase) -> None:
        self.readings: list[Reading] = []
        self.errors = 0
        self._dsn = database.cluster.dsn(database.DATABASE, SUPERUSER)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="QueueWatch", daemon=True)

    def start(self, testCase: SynchronousTestCase) -> None:
        """
        Start reading until the test ends.
        """
        self._thread.start()
        testCase.addCleanup(self.stop)

    def stop(self) -> None:
        """
        Stop reading, and wait for the thread.
        """
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        connection: psycopg.Connection[tuple[Any, ...]] | None = None
        while not self._stopping.is_set():
            try:
                if connection is None or connection.closed:
                    connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=2)
                self.readings.append(_read(connection))
            except psycopg.Error:
                self.errors += 1
                if connection is not None:
                    connection.close()
                connection = None
            self._stopping.wait(self.INTERVAL)
        if connection is not None:
            connection.close()

    @property
    def last(self) -> Reading | None:
        """
        The latest reading, if any.
        """
        return self.readings[-1] if self.readings else None

    def since(self, moment: float) -> list[Reading]:
        """
        The readings taken after C{moment}.
        """
        return [r for r in self.readings if r.time > moment]

    def firstDone(self, job: str, after: float) -> float | None:
        """
        When C{job} was first read C{done} after C{after}.
        """
        for reading in self.since(after):
            row = reading.jobs.get(job)
            if row is not None and row.state == "done":
                return reading.time
        return None


def _read(connection: psycopg.Connection[tuple[Any, ...]]) -> Reading:
    """
    One reading of the tables, in one snapshot.
    """
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        moment = time.time()
        jobs = {
            name: JobRow(state, owner, generation)
            for name, state, owner, generation in connection.execute(_JOBS).fetchall()
        }
        daemons = {
            row[0]: DaemonRow(row[0], row[1], row[2], row[3])
            for row in connection.execute(_DAEMONS).fetchall()
        }
        journal = dict(connection.execute(_JOURNAL).fetchall())
    return Reading(moment, jobs, daemons, journal)


# -- the APPENDs, watched ----------------------------------------------------


_APPEND = re.compile(rb"^\S+ (?:UID )?APPEND ", re.IGNORECASE)
_LITERAL = re.compile(rb"~?\{(\d+)[+-]?\}\r?\n\Z")
_HEAD = 128
_TAIL = 64


class CommandScanner:
    """
    Follows what an IMAP client sends and finds its APPEND commands and
    the messages (literals) each carries, skipping the literals' octets
    unread.
    """

    def __init__(self) -> None:
        self._inLiteral = 0
        self._head = b""
        self._tail = b""
        self._continuing = False
        self._appending = False

    def feed(self, data: bytes) -> tuple[int, int]:
        """
        Follow the next octets.

        @return: how many APPEND commands began, and how many messages of
            APPEND commands began, in C{data}.
        """
        commands = messages = 0
        position, end = 0, len(data)
        while position < end:
            if self._inLiteral:
                taken = min(self._inLiteral, end - position)
                self._inLiteral -= taken
                position += taken
                continue
            newline = data.find(b"\n", position)
            stop = end if newline < 0 else newline + 1
            piece = data[position:stop]
            if len(self._head) < _HEAD:
                self._head += piece[: _HEAD - len(self._head)]
            self._tail = (self._tail + piece)[-_TAIL:]
            position = stop
            if newline >= 0:
                began, literal = self._endLine()
                commands += began
                messages += literal
        return commands, messages

    def _endLine(self) -> tuple[int, int]:
        """
        A line ended: whether it began an APPEND, and whether it opened one
        of its messages.
        """
        began = 0
        if not self._continuing:
            self._appending = _APPEND.match(self._head) is not None
            began = int(self._appending)
        match = _LITERAL.search(self._tail)
        self._head = self._tail = b""
        self._continuing = match is not None
        if match is None:
            return began, 0
        self._inLiteral = int(match.group(1))
        return began, int(self._appending)


@frozen
class Append:
    """
    An APPEND command as the relay received it from a daemon.

    @ivar time: when (this machine's clock).
    @ivar pid: the daemon that sent it, or L{None} if its connection's
        socket was found in none.
    @ivar user: the account its connection logged in as.
    @ivar connection: the connection's number, from 1.
    """

    time: float
    pid: int | None
    user: str | None
    connection: int


class _WatchedConnection(ProxyServer):
    """
    One daemon's connection to Dovecot, relayed and watched.
    """

    factory: AppendWatch

    def connectionMade(self) -> None:
        self.number = self.factory.accepted()
        self.user: str | None = None
        self.sniffed = b""
        self.scanner = CommandScanner()
        self.pid = self.factory.ownerOf(self)
        ProxyServer.connectionMade(self)

    def dataReceived(self, data: bytes) -> None:
        if self.pid is None:
            self.pid = self.factory.ownerOf(self)
        if self.user is None and len(self.sniffed) < 4096:
            self.sniffed += data
            name = _loginName(self.sniffed)
            self.user = None if name is None else name.decode("ascii", "replace")
        commands, messages = self.scanner.feed(data)
        ProxyServer.dataReceived(self, data)
        if commands or messages:
            self.factory.appended(self, commands, messages)


@mutable
class _Trigger:
    pid: int
    action: Callable[[Append], None]


class AppendWatch(ProxyFactory):
    """
    A relay in front of Dovecot noting every APPEND command (L{appends})
    and counting the messages each daemon sent (L{messages}, by pid).

    @ivar pids: the daemons' process ids, whose sockets are searched for
        each connection's.
    """

    protocol = _WatchedConnection

    def __init__(self, host: str, port: int) -> None:
        ProxyFactory.__init__(self, host, port)
        self.pids: list[int] = []
        self.appends: list[Append] = []
        self.messages: dict[int | None, int] = {}
        self.connections = 0
        self.listenPort = 0
        self._trigger: _Trigger | None = None

    def accepted(self) -> int:
        self.connections += 1
        return self.connections

    def ownerOf(self, connection: _WatchedConnection) -> int | None:
        """
        The daemon whose socket is the other end of C{connection}.
        """
        assert connection.transport is not None
        peer = connection.transport.getPeer()
        assert isinstance(peer, IPv4Address)
        return socketOwner(peer.port, self.listenPort, self.pids)

    def appended(self, connection: _WatchedConnection, commands: int, messages: int) -> None:
        """
        C{connection} carried C{commands} new APPEND commands and
        C{messages} new messages to Dovecot.
        """
        self.messages[connection.pid] = self.messages.get(connection.pid, 0) + messages
        now = time.time()
        for _ in range(commands):
            append = Append(now, connection.pid, connection.user, connection.number)
            self.appends.append(append)
            trigger = self._trigger
            if trigger is not None and trigger.pid == connection.pid:
                self._trigger = None
                trigger.action(append)

    def onNextAppend(self, pid: int, action: Callable[[Append], None]) -> None:
        """
        Call C{action} in the reactor turn in which the relay passes on the
        next APPEND command of daemon C{pid} (its first octets, maybe not
        all of its message, are then on their way to Dovecot).
        """
        self._trigger = _Trigger(pid, action)

    def by(self, pid: int) -> list[Append]:
        """
        The APPEND commands daemon C{pid} sent.
        """
        return [a for a in self.appends if a.pid == pid]

    async def listen(self, testCase: SynchronousTestCase, reactor: Any) -> int:
        """
        Listen on a free loopback port until the test ends.

        @return: the port.
        """
        listening: IListeningPort = await TCP4ServerEndpoint(
            reactor, 0, interface="127.0.0.1"
        ).listen(self)
        testCase.addCleanup(listening.stopListening)
        address = listening.getHost()
        assert isinstance(address, IPv4Address)
        self.listenPort = address.port
        return address.port


def socketOwner(port: int, peerPort: int, pids: Iterable[int]) -> int | None:
    """
    Which of C{pids} owns the loopback TCP socket bound to C{port} and
    connected to C{peerPort}, from C{/proc/net/tcp} and the processes'
    file descriptors; L{None} if none does (or it is gone).
    """
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) == peerPort:
                inode = fields[9]
                break
        if inode is not None:
            break
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        directory = f"/proc/{pid}/fd"
        try:
            descriptors = os.listdir(directory)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(os.path.join(directory, descriptor)) == target:
                    return pid
            except OSError:
                continue
    return None


def health(port: int) -> tuple[int, str]:
    """
    Ask the status site on C{port} of loopback for C{/healthz} (blocking).

    @return: the HTTP status and the document's C{status} (C{"ok"},
        C{"degraded"}...), or C{(0, reason)} when nothing answered.
    """
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, json.load(response)["status"]
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)["status"]
    except OSError as e:
        return 0, str(e)


# -- the fleet ----------------------------------------------------------------


@frozen
class FleetJob:
    """
    One job of the fleet: its name, its source's corpus, its account.
    """

    name: str
    corpus: Corpus
    user: DovecotUser
    maildir: str


@frozen
class Outcome:
    """
    What the fleet left behind, read once every daemon has exited.

    @ivar states: each job's row state.
    @ivar journal: the journal's rows left: job, entry id, when written.
    @ivar failedMessages: the outcomes recorded as failed.
    @ivar lost, duplicated: per job, messages missing from, or held more
        than once by, its account (read from Dovecot directly).
    @ivar viewsDiffer: the jobs whose account's flags or dates differ.
    @ivar timelines: the state each job's timeline ends in (its latest
        transition's target) and why, by job.
    """

    states: Mapping[str, str]
    journal: frozenset[str]
    failedMessages: int
    lost: Mapping[str, int]
    duplicated: Mapping[str, int]
    viewsDiffer: tuple[str, ...]
    timelines: Mapping[str, tuple[str, str]]

    def problems(self) -> list[str]:
        """
        Every way it falls short of every job done, every message once
        (the timelines apart: L{unendedTimelines}).
        """
        found = []
        notDone = {name: state for name, state in self.states.items() if state != "done"}
        if notDone:
            found.append(f"jobs not done: {notDone}")
        if self.journal:
            found.append(f"journal rows left: {sorted(self.journal)}")
        if self.failedMessages:
            found.append(f"{self.failedMessages} messages recorded as failed")
        lost = {name: n for name, n in self.lost.items() if n}
        duplicated = {name: n for name, n in self.duplicated.items() if n}
        if lost:
            found.append(f"messages lost, by job: {lost}")
        if duplicated:
            found.append(f"messages held twice or more, by job: {duplicated}")
        if self.viewsDiffer:
            found.append(f"flags or dates differ in: {list(self.viewsDiffer)}")
        return found

    def unendedTimelines(self) -> dict[str, str]:
        """
        The jobs whose timeline does not end C{done}: the state it ends in
        and why.
        """
        return {
            job: f"{end} ({cause})" for job, (end, cause) in self.timelines.items() if end != "done"
        }


@mutable
class Daemon:
    """
    One daemon of the fleet: its process and configuration.
    """

    index: int
    process: DaemonProcess
    configPath: str
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid


class Fleet:
    """
    Thirty jobs migrating small Maildirs into thirty accounts of one
    Dovecot through an L{AppendWatch}, run by daemons sharing one
    L{FleetDatabase}, watched by a L{QueueWatch}.
    """

    def __init__(
        self,
        testCase: SynchronousTestCase,
        reactor: Any,
        instance: DovecotInstance,
        users: Sequence[DovecotUser],
        messagesPerJob: int,
        seed: int,
        maxJobs: int,
    ) -> None:
        self.testCase = testCase
        self.reactor = reactor
        self.instance = instance
        self.directory = os.path.abspath(str(testCase.mktemp()))
        os.makedirs(self.directory)
        self.database = FleetDatabase(testCase, self.directory)
        self.queue = QueueWatch(self.database)
        self.watch = AppendWatch("127.0.0.1", instance.port)
        self.maxJobs = maxJobs
        self.daemons: list[Daemon] = []
        paths = [os.path.join(self.directory, "sources", f"job{n:02d}") for n in range(len(users))]
        corpora = writeMaildirs(
            paths, messagesPerJob, seed=seed, folders=(("INBOX",), ("Archive",))
        )
        self.jobs = tuple(
            FleetJob(f"job{n:02d}", corpus, user, path)
            for n, (corpus, user, path) in enumerate(zip(corpora, users, paths))
        )
        self.byName = {job.name: job for job in self.jobs}
        self._dovecotPort = 0

    @property
    def messages(self) -> int:
        """
        How many messages the jobs migrate in all.
        """
        return sum(len(job.corpus.messages) for job in self.jobs)

    async def listen(self) -> None:
        """
        Start the relay in front of Dovecot and the queue's watch.
        """
        self._dovecotPort = await self.watch.listen(self.testCase, self.reactor)
        self.queue.start(self.testCase)

    def configuration(
        self, statePort: int | None = None, statusPort: int | None = None
    ) -> dict[str, object]:
        """
        The configuration every daemon runs: the same jobs, servers and
        fleet for all, but C{statePort}: reach the database through a proxy
        there, and C{statusPort}: serve the status site there (else none).
        """
        passwords = os.path.join(self.directory, "passwords")
        os.makedirs(passwords, exist_ok=True)
        jobs = []
        for job in self.jobs:
            passwordFile = os.path.join(passwords, job.name)
            if not os.path.exists(passwordFile):
                writePasswordFile(passwordFile, job.user.password)
            jobs.append(
                {
                    "name": job.name,
                    "source": {"maildir": job.maildir},
                    "destination": {
                        "server": "dovecot",
                        "user": job.user.name,
                        "password_file": passwordFile,
                    },
                    "connections": 1,
                    # Exactly once from the journal and the fences alone,
                    # not from recognising what is already there.
                    "identity": "off",
                }
            )
        return {
            "state": self.database.uri(statePort),
            "state_password_file": self.database.passwordFile,
            "fleet": {"name": FLEET_NAME, "lease": LEASE},
            "status": (
                "off" if statusPort is None else {"listen": f"tcp:{statusPort}:interface=127.0.0.1"}
            ),
            "max_jobs": self.maxJobs,
            "servers": {
                "dovecot": {
                    "endpoint": f"tcp:127.0.0.1:{self._dovecotPort}",
                    "starttls": "off",
                    "compress": "off",
                    "timeout": DESTINATION_TIMEOUT,
                }
            },
            "jobs": jobs,
        }

    def startDaemon(self, statePort: int | None = None, statusPort: int | None = None) -> Daemon:
        """
        Start one more daemon (C{twistd -n imapmig --exit-when-done}) in a
        working directory of its own; it is killed, if still running, when
        the test ends.
        """
        index = len(self.daemons) + 1
        home = os.path.join(self.directory, f"daemon{index}")
        os.makedirs(home)
        configPath = os.path.join(home, "imapmig.yaml")
        with open(configPath, "w") as f:
            yaml.safe_dump(self.configuration(statePort, statusPort), f)
        process = DaemonProcess()
        self.reactor.spawnProcess(
            process, sys.executable, twistdCommand(configPath),
            env=sourceTreeEnvironment(), path=home,
        )  # fmt: skip
        daemon = Daemon(index, process, configPath)
        self.daemons.append(daemon)
        self.watch.pids.append(process.pid)

        async def reap() -> None:
            process.kill()
            await process.whenEnded()

        self.testCase.addCleanup(lambda: Deferred.fromCoroutine(reap()))
        return daemon

    def daemonOf(self, pid: int) -> Daemon:
        """
        The daemon whose process is C{pid}.
        """
        [daemon] = [d for d in self.daemons if d.pid == pid]
        return daemon

    def pidOf(self, daemonId: str) -> int | None:
        """
        The process that registered C{daemonId}, by the latest reading.
        """
        last = self.queue.last
        row = None if last is None else last.daemons.get(daemonId)
        return None if row is None else row.pid

    async def until(
        self, condition: Callable[[], bool], timeout: float, what: str
    ) -> None:
        """
        Wait until C{condition()} holds, checking every 50 ms, at most
        C{timeout} seconds.

        @raise AssertionError: it did not, or every daemon exited, or one
            not L{Daemon.killed} exited with a status other than 0; naming
            C{what}, with the daemons' output tails.
        """
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout} s; {self.summary()}\n{self.tails()}"
                )
            failed = [d.index for d in self.daemons if d.process.status not in (None, 0) and not d.killed]
            if failed or all(d.process.status is not None for d in self.daemons):
                raise AssertionError(
                    f"{what}: the daemons exited first; {self.summary()}\n{self.tails()}"
                )
            await deferLater(self.reactor, 0.05, lambda: None)

    def summary(self) -> str:
        """
        For a failure message: the jobs by state and the daemons' rows, as
        last read, and the messages each daemon sent.
        """
        last = self.queue.last
        if last is None:
            return f"the queue's tables were never read ({self.queue.errors} errors)"
        states: dict[str, int] = {}
        for row in last.jobs.values():
            states[row.state] = states.get(row.state, 0) + 1
        daemons = [
            f"{d.daemonId[:8]} pid {d.pid} lease {d.leaseUntil - last.time:+.1f} s"
            f"{' retired' if d.retired else ''}"
            for d in last.daemons.values()
        ]
        return (
            f"jobs by state {states}, daemons {daemons}, messages sent by pid"
            f" {self.watch.messages}"
        )

    def tails(self, lines: int = 15) -> str:
        """
        For a failure message: every daemon's first 10 warnings and errors
        (and tracebacks' last lines), and the last lines of its output.
        """
        parts = []
        for d in self.daemons:
            text = bytes(d.process.output).decode("utf-8", "replace").splitlines()
            bad = [line for line in text if _TROUBLE.search(line)][:10]
            parts.append(
                f"--- daemon {d.index} (pid {d.pid}, status {d.process.status}),"
                f" its first warnings:\n" + "\n".join(bad)
                + f"\n--- daemon {d.index}'s last lines:\n" + "\n".join(text[-lines:])
            )
        return "\n".join(parts)

    async def exits(self, timeout: float) -> dict[int, int]:
        """
        Wait for every daemon to exit, at most C{timeout} seconds in all.

        @return: each one's exit status by its index (C{-9}: killed).
        @raise AssertionError: one had not exited in time (it is killed
            when the test ends), with what the daemons said.
        """
        statuses = {}
        deadline = time.monotonic() + timeout
        for daemon in self.daemons:
            left = max(1.0, deadline - time.monotonic())
            try:
                statuses[daemon.index] = await daemon.process.whenEnded().addTimeout(
                    left, self.reactor
                )
            except defer.TimeoutError:
                raise AssertionError(
                    f"daemon {daemon.index} (pid {daemon.pid}) had not exited {timeout} s"
                    f" after the fault; {self.summary()}\n{self.tails()}"
                ) from None
        return statuses

    def outcome(self) -> Outcome:
        """
        Read what the fleet left: the job rows, the journal, the failed
        outcomes, and every account's messages from Dovecot directly.
        """
        states = dict(self.database.query("SELECT name, state FROM imapmig_queue.jobs"))
        journal = {
            f"{job} entry {entry:#x} written at {written:.1f}"
            for job, entry, written in self.database.query(
                "SELECT job, entry_id, written_at FROM imapmig.journal"
            )
        }
        [(failed,)] = self.database.query(
            "SELECT count(*) FROM imapmig.messages WHERE failure IS NOT NULL"
        )
        # By time: each daemon chooses its rows' numbers (seq).
        timelines = {
            job: (target, cause)
            for job, target, cause in self.database.query(
                "SELECT DISTINCT ON (job) job, target, cause FROM imapmig.job_transitions"
                " ORDER BY job, time DESC, seq DESC"
            )
        }
        lost, duplicated, differ = {}, {}, []
        for job in self.jobs:
            fetched = self.instance.fetchAll(job.user.name)
            held = deliveries(fetched, job.corpus.messages)
            lost[job.name] = len(held.lost)
            duplicated[job.name] = held.extraCopies + held.unexpected
            if fetchedView(fetched) != corpusView(job.corpus.messages):
                differ.append(job.name)
        ended = {job.name: timelines.get(job.name, ("none", "")) for job in self.jobs}
        return Outcome(
            states, frozenset(journal), failed, lost, duplicated, tuple(differ), ended
        )
