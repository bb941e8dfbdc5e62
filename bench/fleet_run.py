# -*- test-case-name: tests.test_bench -*-
"""
The C{fleet} part of the benchmark (issue 30): runs its rows against a
private PostgreSQL (L{imapmig.testing.postgresql.PostgreSQLCluster}, with
C{pg_stat_statements}), a private Dovecot on tmpfs and N daemon processes
on one configuration (a PostgreSQL C{state:}, C{state_password_file}, a
C{fleet:} section), reading the database's statistics before and after;
L{bench.fleet} turns the measurements into figures and verdicts.

    .venv/bin/python -m bench.run --parts fleet [--fleet-rows scaleout,database,million,sqlite]

The daemons reach the database through its Unix socket (a directory the
URI's C{host} names): the scale-out row runs them in the delay line's
client namespace (C{bench/netns.py}), where loopback TCP would not reach
the database, and a socket path does.  Each daemon has a working
directory of its own; all read one configuration file (the million row
gives each its own status port, the one key that differs).

New beside L{bench.scale}: that part runs one daemon on SQLite; nothing
there starts a database or more than one daemon.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import TYPE_CHECKING, Any, Callable, Sequence

import psycopg
from attrs import asdict, frozen

from bench.contenders import REPOSITORY, imapmigArgv
from bench.corpora import BuiltCorpus, buildCorpus, emptyCorpus
from bench.fleet import (
    CLAIM_MARKER,
    FleetSizes,
    HEARTBEAT_MARKER,
    QUEUED_MESSAGES,
    DaemonStart,
    DatabaseCost,
    DatabaseStats,
    HeartbeatCost,
    QueuedRun,
    ScaleOutRun,
    SideBySide,
    StatementCost,
    TableWrites,
    databaseLines,
    fleetConfig,
    loadLine,
    parseSideBySide,
    pageReadCost,
    queuedLines,
    scaleOutFigures,
    scaleOutLines,
    scaleOutCpuTable,
    scaleOutTable,
    sideBySideLines,
    queuedRows,
    statementCost,
    statementsTable,
    tableWritesTable,
    writeUserList,
)
from bench.scale import countAccount, fileTail, splitCorpus
from bench.scale_probe import busySeconds, treeCPU
from bench.servers import PASSWORD, BenchServer
from imapmig.testing.ports import freePorts
from imapmig.testing.postgresql import PASSWORD_ROLE, SUPERUSER, PostgreSQLCluster

if TYPE_CHECKING:
    from bench.run import Bench, Network

def _secret(path: str, value: str) -> str:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(value + "\n")
    return path


class FleetDatabase:
    """
    The part's private PostgreSQL, with C{pg_stat_statements}, and what the
    rows read of it.
    """

    def __init__(self, baseDir: str) -> None:
        self.cluster = PostgreSQLCluster(
            baseDir,
            settings={
                "shared_preload_libraries": "pg_stat_statements",
                "pg_stat_statements.track": "top",
                "max_connections": "100",
            },
        )

    def start(self) -> None:
        """
        Start it and create the statements' view.
        """
        self.cluster.start()
        with self.connect() as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def stop(self) -> None:
        """
        Stop it and remove its files.
        """
        self.cluster.destroy()

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple[Any, ...]]:
        """
        A connection as the superuser through the socket, in autocommit.
        """
        return psycopg.connect(
            host=self.cluster.socketDirectory, port=self.cluster.port, dbname=dbname,
            user=SUPERUSER, autocommit=True, application_name="bench",
        )  # fmt: skip

    def create(self, name: str) -> str:
        """
        A new database owned by the password role; its URI for imapmig.
        """
        self.cluster.createDatabase(name, owner=PASSWORD_ROLE)
        return (
            f"postgresql://{PASSWORD_ROLE}@:{self.cluster.port}/{name}"
            f"?host={self.cluster.socketDirectory}"
        )

    def passwordFile(self, directory: str) -> str:
        """
        The password role's password in a private file of C{directory}.
        """
        return _secret(os.path.join(directory, "db-password"), self.cluster.password)

    def stats(self, name: str) -> DatabaseStats:
        """
        The database's commits and every user table's row writes, read
        once every imapmig connection has gone (its counters flushed).
        """
        self.quiet(name)
        with self.connect(name) as c:
            rows = c.execute(
                "SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del"
                " FROM pg_stat_user_tables"
            ).fetchall()
        with self.connect() as c:
            found = c.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
            ).fetchone()
        tables = tuple(TableWrites(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows)
        return DatabaseStats(int(found[0]) if found else 0, tables)

    def statements(self, name: str) -> list[tuple[str, int, float, int]]:
        """
        C{pg_stat_statements}' rows of database C{name}.
        """
        with self.connect() as c:
            rows = c.execute(
                "SELECT s.query, s.calls, s.total_exec_time,"
                " s.shared_blks_hit + s.shared_blks_read"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = %s",
                (name,),
            ).fetchall()
        return [(str(r[0]), int(r[1]), float(r[2]), int(r[3])) for r in rows]

    def connections(self, c: psycopg.Connection[tuple[Any, ...]], name: str) -> int:
        """
        imapmig's connections to database C{name} now.
        """
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name LIKE 'imapmig%%'",
            (name,),
        ).fetchone()
        return int(row[0]) if row else 0

    def quiet(self, name: str, timeout: float = 30.0) -> None:
        """
        Wait until no imapmig connection to C{name} is left.
        """
        deadline = time.monotonic() + timeout
        with self.connect() as c:
            while self.connections(c, name) and time.monotonic() < deadline:
                time.sleep(0.1)


@frozen
class Daemon:
    """
    A daemon launched under the timer.

    @ivar process: the timer's process.
    @ivar report: the timer's report file.
    @ivar runDir: its working directory (its stdout and stderr there).
    @ivar started: C{time.monotonic()} at its launch.
    """

    process: subprocess.Popen[bytes]
    report: str
    runDir: str
    started: float

    def pid(self) -> int | None:
        """
        The daemon's process id (the timer's child), or L{None}.
        """
        try:
            with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children") as f:
                children = f.read().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def lastWords(self) -> str:
        """
        The last two lines of its standard error and output (a traceback's
        last line, or the one-line refusal of a daemon that exits 2), in
        one line, with where to read the rest.
        """
        lines = []
        for name in ("stderr", "stdout"):
            lines += [line for line in fileTail(os.path.join(self.runDir, name), 2000).splitlines()
                      if line.strip()][-2:]  # fmt: skip
        return " / ".join(lines[-3:]) + f" (in {self.runDir})"

    def terminate(self) -> int:
        """
        SIGTERM to the daemon (the timer passes no signal on).

        @return: its peak RSS so far (C{VmHWM}, KiB; 0 if unknown): the
            timer reports none for a daemon that has to be killed.
        """
        pid = self.pid()
        if pid is None:
            return 0
        peak = 0
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            pass
        return peak

    def _measured(self) -> dict[str, Any]:
        try:
            with open(self.report) as f:
                measured: dict[str, Any] = json.load(f)
        except (OSError, ValueError):
            return {}
        return measured

    def cpu(self) -> float:
        """
        Its user and system CPU seconds once reaped (0 if unknown).
        """
        measured = self._measured()
        return float(measured.get("user", 0.0)) + float(measured.get("system", 0.0))

    def exited(self, since: float) -> float:
        """
        When it exited, seconds after C{since} (C{time.monotonic()}), once
        reaped: its launch plus the timer's wall time.
        """
        return self.started - since + float(self._measured().get("seconds", 0.0))

    def result(self) -> tuple[int, int, str]:
        """
        Its exit status, peak RSS (KiB) and a problem (C{""}: none), once
        reaped.
        """
        try:
            with open(self.report) as f:
                measured = json.load(f)
        except (OSError, ValueError):
            return -1, 0, "no report from the timer: " + self.lastWords()
        status = int(measured["status"])
        problem = "" if status == 0 else f"exit status {status}: {self.lastWords()}"
        return status, int(measured["maxrss_kib"]), problem


def _cpuNow(server: BenchServer, database: FleetDatabase) -> tuple[float, float, float, float]:
    """
    CPU seconds so far of Dovecot's processes, the database cluster's and
    the delay line's (each process tree with its reaped children's, as
    L{bench.scale_probe} reads them), and the machine's busy time.
    """
    delay = sum(treeCPU(pid) for pid in _children(os.getpid(), "delayline"))
    return (
        treeCPU(server.pid) if server.pid else 0.0,
        treeCPU(database.cluster.pid) if database.cluster.pid else 0.0,
        delay,
        busySeconds(),
    )


def _transitions(database: FleetDatabase, name: str, since: float) -> tuple[float, float, float]:
    """
    The first and the last job transition the daemons recorded (their
    clocks, C{imapmig.job_transitions.time}), seconds after C{since}
    (C{time.time()}), and the mean of each job's first to last; zeros if
    none.
    """
    try:
        with database.connect(name) as c:
            row = c.execute(
                "SELECT min(t0), max(t1), avg(t1 - t0) FROM (SELECT min(time) AS t0,"
                " max(time) AS t1 FROM imapmig.job_transitions GROUP BY job) AS j"
            ).fetchone()
    except psycopg.Error:
        return 0.0, 0.0, 0.0
    if row is None or row[0] is None:
        return 0.0, 0.0, 0.0
    return float(row[0]) - since, float(row[1]) - since, float(row[2])


def _children(parent: int, name: str) -> list[int]:
    """
    The processes named C{name} whose parent is C{parent}.
    """
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            comm, rest = text.split("(", 1)[1].rsplit(")", 1)
            if comm == name and int(rest.split()[1]) == parent:
                found.append(int(entry))
    return found


def launch(timer: str, argv: list[str], runDir: str, wrap: Callable[[list[str]], list[str]]) -> Daemon:
    """
    Start C{argv} (wrapped, e.g. into a namespace) under the timer, in
    C{runDir}.
    """
    os.makedirs(runDir, exist_ok=True)
    os.chmod(runDir, 0o755)
    report = os.path.join(runDir, "timed.json")
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=REPOSITORY + (os.pathsep + path if path else ""))
    with open(os.path.join(runDir, "stdout"), "wb") as out, open(
        os.path.join(runDir, "stderr"), "wb"
    ) as err:
        process = subprocess.Popen(
            [timer, report, *wrap(argv)], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            cwd=runDir, env=env, start_new_session=True,
        )  # fmt: skip
    return Daemon(process, report, runDir, time.monotonic())


def reap(daemons: Sequence[Daemon], deadline: float) -> list[Daemon]:
    """
    Wait for every daemon; past C{deadline} (monotonic) kill the rest.

    @return: the daemons killed.
    """
    killed = []
    for daemon in daemons:
        try:
            daemon.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait()
            killed.append(daemon)
    return killed


def watch(database: FleetDatabase, name: str, daemons: Sequence[Daemon],
          timeout: float) -> tuple[int, int]:  # fmt: skip
    """
    Sample imapmig's connections every 0.2 s until every daemon exited
    (killed after C{timeout} s).

    @return: the most connections seen at once, and the samples.
    """
    most = samples = 0
    deadline = time.monotonic() + timeout
    with database.connect() as c:
        while any(d.process.poll() is None for d in daemons) and time.monotonic() < deadline:
            most = max(most, database.connections(c, name))
            samples += 1
            time.sleep(0.2)
    reap(daemons, deadline)
    return most, samples


def countAccounts(server: BenchServer, accounts: Sequence[str], network: Network | None) -> dict[str, int]:
    """
    Each account's messages, counted in the server's namespace (no delay)
    or here.
    """
    if network is None or network.serverNamespace is None or network.inNamespace is None:
        return {account: countAccount(server, account) for account in accounts}
    argv = [sys.executable, "-m", "bench.clients.count", "--host", server.host, "--port",
            str(server.port), "--password", PASSWORD]  # fmt: skip
    for account in accounts:
        argv += ["--user", account]
    completed = subprocess.run(
        network.inNamespace(network.serverNamespace, argv), capture_output=True, cwd=REPOSITORY,
        env=dict(os.environ, PYTHONPATH=REPOSITORY), timeout=600,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr.decode("utf-8", "replace")[-500:])
    data = json.loads(completed.stdout)
    # One account is counted as bench.clients.count always did.
    counted: dict[str, int] = data.get("accounts") or {accounts[0]: data["messages"]}
    return counted


def _missing(counted: dict[str, int], expected: dict[str, int]) -> str:
    wrong = [f"{a}: {counted.get(a)} of {n}" for a, n in expected.items() if counted.get(a) != n]
    return f"{len(wrong)} accounts incomplete: " + ", ".join(wrong[:5]) if wrong else ""


class FleetPart:
    """
    Runs the part's rows and writes C{fleet.md}.
    """

    def __init__(self, bench: Bench, sizes: FleetSizes) -> None:
        self.bench = bench
        self.sizes = sizes
        self.loads: dict[str, tuple[float, float, float]] = {}
        self.scaleOut: list[ScaleOutRun] = []
        self.cost: DatabaseCost | None = None
        self.heartbeats: list[HeartbeatCost] = []
        self.largeStatements: list[tuple[str, int, float, int]] = []
        self.queued: dict[int, QueuedRun] = {}
        self.sideBySide: list[SideBySide] = []
        self.notes: list[str] = []
        self._serial = 0

    def note(self, text: str) -> None:
        """
        A remark for fleet.md, printed too.
        """
        self.notes.append(text)
        self.bench.note("fleet: " + text)

    def _name(self, what: str) -> str:
        self._serial += 1
        return f"{what}{self._serial}"

    def _load(self, when: str) -> None:
        self.loads[when] = os.getloadavg()
        print(f"  load average {when}: {self.loads[when]}", flush=True)

    def run(self) -> bool:
        """
        Run the rows asked for; return whether every run succeeded.
        """
        self._load("at the start")
        base = tempfile.mkdtemp(prefix="fleet-pg-", dir=self.bench.workDir)
        database = FleetDatabase(os.path.join(base, "cluster"))
        database.start()
        ok = True
        try:
            for row, action in (("scaleout", self.runScaleOut), ("database", self.runDatabase),
                                ("million", self.runMillion)):  # fmt: skip
                if row in self.sizes.rows:
                    try:
                        ok = action(database) and ok
                    except Exception as e:  # noqa: BLE001 -- reported in the results
                        self.note(f"the {row} row failed: {e!r}")
                        ok = False
                    self._load(f"after the {row} row")
        finally:
            database.stop()
            shutil.rmtree(base, ignore_errors=True)
        if "sqlite" in self.sizes.rows:
            ok = self.runSideBySide() and ok
            self._load("after the sqlite row")
        return ok

    # -- scale-out ---------------------------------------------------------

    def runScaleOut(self, database: FleetDatabase) -> bool:
        """
        The scale-out row: for each repetition, each number of daemons in
        turn (rotated), through the delay line.
        """
        sizes = self.sizes
        whole = self.bench.corpus("small", sizes.accounts * sizes.perAccount)
        parts = splitCorpus(self.bench.workDir, whole, sizes.accounts)
        empty = emptyCorpus(self.bench.workDir)
        print(f"== fleet scale-out: {sizes.accounts} accounts x {sizes.perAccount} messages, "
              f"{sizes.rttMs:g} ms, daemons {sizes.daemons}", flush=True)  # fmt: skip
        with self.bench.network(sizes.rttMs, None) as network:
            if network is None:
                self.note("scale-out not measured: no delay line")
                return False
            runs = self.bench.args.runs
            serverBase = tempfile.mkdtemp(prefix="dovecot-fleet-", dir=self.bench.workDir)
            server = BenchServer(
                serverBase, fsync=False,
                accounts=runs * sum(sizes.accounts + n for n in sizes.daemons) + 5,
                mailRoot=tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm"),
                capabilities=None, compress=False, namespace=network.serverNamespace,
                address=network.serverAddress, inNamespace=network.inNamespace,
                reuseProcesses=(sizes.connections * max(sizes.daemons)
                                if sizes.reuseServerProcesses else 0),
            )  # fmt: skip
            server.start()
            try:
                for repetition in range(runs):
                    order = list(sizes.daemons)
                    shift = repetition % len(order)
                    for daemons in order[shift:] + order[:shift]:
                        for kind, accounts in (("empty", [empty] * daemons), ("full", parts)):
                            run = self._scaleOutOnce(database, network, server, accounts,
                                                     daemons, repetition, kind)  # fmt: skip
                            self.scaleOut.append(run)
                            self._record("scaleout", asdict(run))
                            print(f"  {daemons} daemon(s), {kind}: {run.messages} messages in "
                                  f"{run.seconds:.2f} s"
                                  + ("" if run.ok else f" FAILED: {run.problem}"),
                                  flush=True)  # fmt: skip
            finally:
                server.stop()
                shutil.rmtree(serverBase, ignore_errors=True)
        return all(r.ok for r in self.scaleOut)

    def _scaleOutOnce(self, database: FleetDatabase, network: Network, server: BenchServer,
                      parts: Sequence[BuiltCorpus], daemons: int, repetition: int,
                      kind: str) -> ScaleOutRun:  # fmt: skip
        sizes = self.sizes
        name = self._name(f"scaleout{daemons}_")
        uri = database.create(name)
        runDir = tempfile.mkdtemp(prefix=f"fleet-{name}-", dir=self.bench.runsDir)
        os.chmod(runDir, 0o755)
        accounts = [server.freshAccount() for _ in parts]
        writeUserList(os.path.join(runDir, "users.csv"),
                      ((a, p.path) for a, p in zip(accounts, parts)))  # fmt: skip
        config = fleetConfig(
            os.path.join(runDir, "imapmig.yaml"), uri=uri,
            databasePassword=database.passwordFile(runDir),
            imapPassword=_secret(os.path.join(runDir, "password"), PASSWORD),
            host=server.host, port=server.port, userList="users.csv", maildir=parts[0].path,
            maxJobs=sizes.connections, maxConnections=sizes.connections * daemons,
            lease=sizes.lease,
        )  # fmt: skip
        before = database.stats(name)
        cpuBefore = _cpuNow(server, database)
        started, startedAt = time.monotonic(), time.time()
        launched = [
            launch(self.bench.timer, _profiled(imapmigArgv(config), os.path.join(runDir, f"d{i}")),
                   os.path.join(runDir, f"d{i}"), network.client)
            for i in range(daemons)
        ]  # fmt: skip
        most, _ = watch(database, name, launched, self.bench.args.timeout)
        seconds = time.monotonic() - started
        cpu = [b - a for a, b in zip(cpuBefore, _cpuNow(server, database))]
        first, last, perJob = _transitions(database, name, startedAt)
        results = [d.result() for d in launched]
        after = database.stats(name).minus(before)
        problem = "; ".join(p for _, _, p in results if p)
        if not problem:
            try:
                counted = countAccounts(server, accounts, network)
                problem = _missing(counted, {a: p.messages for a, p in zip(accounts, parts)})
            except Exception as e:  # noqa: BLE001 -- reported in the results
                problem = f"cannot count the messages: {e!r}"
        for account in accounts:
            server.discard(account)
        if _KEEP:
            with open(os.path.join(runDir, "statements.md"), "w") as f:
                f.write(statementsTable(database.statements(name), limit=40))
        # Read from each daemon's timed.json before its directory goes.
        exits = tuple(d.exited(started) for d in launched)
        daemonCpu = tuple(d.cpu() for d in launched)
        if not problem and not _KEEP:
            shutil.rmtree(runDir, ignore_errors=True)
        return ScaleOutRun(
            daemons=daemons, repetition=repetition, accounts=len(parts),
            messages=sum(p.messages for p in parts), seconds=seconds,
            peakRssKiB=max(r[1] for r in results), maxConnections=most, commits=after.commits,
            rowWrites=after.rowWrites, ok=not problem, problem=problem, kind=kind,
            exits=exits, daemonCpu=daemonCpu, dovecotCpu=cpu[0],
            postgresqlCpu=cpu[1], delayCpu=cpu[2], busyCpu=cpu[3], firstTransition=first,
            lastTransition=last, jobSeconds=perJob,
        )  # fmt: skip

    # -- the database's cost -------------------------------------------------

    def runDatabase(self, database: FleetDatabase) -> bool:
        """
        The database row: one daemon, one large mailbox, on loopback; then
        the heartbeat while holding 1 and C{held} jobs.
        """
        from bench.run import LOOPBACK

        sizes = self.sizes
        corpus = buildCorpus(self.bench.workDir, "small", sizes.large)
        print(f"== fleet database: one mailbox of {corpus.messages:,} messages; heartbeats "
              f"holding 1 and {sizes.held} jobs", flush=True)  # fmt: skip
        serverBase = tempfile.mkdtemp(prefix="dovecot-fleetdb-", dir=self.bench.workDir)
        server = BenchServer(
            serverBase, accounts=sizes.held * 2 + 8, fsync=False,
            mailRoot=tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm"), capabilities=None,
            compress=False, namespace=None, address="127.0.0.1", inNamespace=None,
        )  # fmt: skip
        server.start()
        try:
            self.cost = self._largeMailbox(database, server, corpus)
            print(f"  {self.cost.messages} messages in {self.cost.seconds:.2f} s: "
                  f"{self.cost.stats.commits} commits, {self.cost.stats.rowWrites} row writes, "
                  f"at most {self.cost.maxConnections} connections"
                  + ("" if self.cost.ok else f" FAILED: {self.cost.problem}"), flush=True)  # fmt: skip
            self._record("database", asdict(self.cost))
            small = buildCorpus(self.bench.workDir, "small", 20)
            for held in (1, sizes.held):
                beat = self._heartbeats(database, server, small, held, LOOPBACK)
                self.heartbeats.append(beat)
                self._record("heartbeat", asdict(beat))
                print(f"  holding {beat.heldSeen} jobs: heartbeat {beat.cost.calls} calls, "
                      f"{beat.cost.blocksPerCall} buffers per call" + (
                          f" ({beat.problem})" if beat.problem else ""), flush=True)  # fmt: skip
        finally:
            server.stop()
            shutil.rmtree(serverBase, ignore_errors=True)
        return self.cost.ok and all(not h.problem for h in self.heartbeats)

    def _largeMailbox(self, database: FleetDatabase, server: BenchServer,
                      corpus: BuiltCorpus) -> DatabaseCost:  # fmt: skip
        name = self._name("large")
        uri = database.create(name)
        runDir = tempfile.mkdtemp(prefix=f"fleet-{name}-", dir=self.bench.runsDir)
        os.chmod(runDir, 0o755)
        account = server.freshAccount()
        writeUserList(os.path.join(runDir, "users.csv"), [(account, corpus.path)])
        config = fleetConfig(
            os.path.join(runDir, "imapmig.yaml"), uri=uri,
            databasePassword=database.passwordFile(runDir),
            imapPassword=_secret(os.path.join(runDir, "password"), PASSWORD),
            host=server.host, port=server.port, userList="users.csv", maildir=corpus.path,
            maxJobs=self.sizes.connections, maxConnections=self.sizes.connections,
            lease=self.sizes.lease,
        )  # fmt: skip
        before = database.stats(name)
        started = time.monotonic()
        daemon = launch(self.bench.timer, imapmigArgv(config), os.path.join(runDir, "d0"),
                        lambda argv: argv)  # fmt: skip
        most, samples = watch(database, name, [daemon], self.bench.args.timeout)
        seconds = time.monotonic() - started
        _, _, problem = daemon.result()
        stats = database.stats(name).minus(before)
        self.largeStatements = database.statements(name)
        if not problem:
            counted = countAccount(server, account)
            if counted != corpus.messages:
                problem = f"{counted} of {corpus.messages} messages in the account"
        server.discard(account)
        if not problem and not _KEEP:
            shutil.rmtree(runDir, ignore_errors=True)
        return DatabaseCost(corpus.messages, seconds, stats, most, samples, not problem, problem)

    def _heartbeats(self, database: FleetDatabase, server: BenchServer, small: BuiltCorpus,
                    held: int, network: Network) -> HeartbeatCost:  # fmt: skip
        """
        One daemon with C{max_jobs: held} over a list of C{held} + 100
        accounts, one connection to the server: it holds C{held} jobs
        (one running, the others waiting for the connection) for 12
        heartbeats; its heartbeat statement's cost read from
        C{pg_stat_statements}.
        """
        name = self._name(f"held{held}_")
        uri = database.create(name)
        runDir = tempfile.mkdtemp(prefix=f"fleet-{name}-", dir=self.bench.runsDir)
        os.chmod(runDir, 0o755)
        accounts = [server.freshAccount() for _ in range(held + 4)]
        rows = [(a, small.path) for a in accounts] + [
            (f"absent{i:05d}", small.path) for i in range(held + 100 - len(accounts))
        ]
        writeUserList(os.path.join(runDir, "users.csv"), rows)
        config = fleetConfig(
            os.path.join(runDir, "imapmig.yaml"), uri=uri,
            databasePassword=database.passwordFile(runDir),
            imapPassword=_secret(os.path.join(runDir, "password"), PASSWORD),
            host=server.host, port=server.port, userList="users.csv", maildir=small.path,
            maxJobs=held, maxConnections=1, lease=self.sizes.lease,
        )  # fmt: skip
        daemon = launch(self.bench.timer, _withoutExit(imapmigArgv(config)),
                        os.path.join(runDir, "d0"), network.client)  # fmt: skip
        # Until it holds its jobs (at most 60 s), then 12 heartbeats.
        problem = _holding(database, name, daemon, held, time.monotonic() + 60)
        before = statementCost(database.statements(name), HEARTBEAT_MARKER)
        seen: list[int] = []
        deadline = time.monotonic() + self.sizes.lease
        with database.connect(name) as c:
            while not problem and time.monotonic() < deadline:
                if daemon.process.poll() is not None:
                    problem = "the daemon exited early"
                    break
                seen.append(_claimed(c))
                time.sleep(0.5)
        cost = statementCost(database.statements(name), HEARTBEAT_MARKER).minus(before)
        daemon.terminate()
        if reap([daemon], time.monotonic() + 120):
            self.note(f"heartbeat row: the daemon holding {held} jobs did not exit within 120 s"
                      f" of SIGTERM (killed; in {daemon.runDir})")  # fmt: skip
        status, _, stopped = daemon.result()
        if status != 0:
            # Its heartbeats were measured before the stop: said apart.
            self.note(f"heartbeat row, holding {held}: the daemon's stop: {stopped}")
        for account in accounts:
            server.discard(account)
        if not problem and not _KEEP:
            shutil.rmtree(runDir, ignore_errors=True)
        heldSeen = int(statistics.median(seen)) if seen else 0
        if not problem and not cost.calls:
            problem = "no heartbeat statement in pg_stat_statements"
        return HeartbeatCost(held, heldSeen, cost, problem)

    # -- a million queued accounts -----------------------------------------

    def runMillion(self, database: FleetDatabase) -> bool:
        """
        The million row, at C{queuedSmall} then at C{queued} jobs.
        """
        sizes = self.sizes
        # Each real account big enough that the fleets still run real
        # accounts while the pages are asked (QUEUED_MESSAGES).
        small = buildCorpus(self.bench.workDir, "small", QUEUED_MESSAGES)
        print(f"== fleet queued: {sizes.queuedSmall:,} and {sizes.queued:,} jobs, "
              f"{sizes.queuedDaemons} daemons", flush=True)  # fmt: skip
        realAccounts = sizes.queuedDaemons * sizes.connections * 8
        serverBase = tempfile.mkdtemp(prefix="dovecot-fleetq-", dir=self.bench.workDir)
        server = BenchServer(
            serverBase, accounts=2 * realAccounts + 4, fsync=False,
            mailRoot=tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm"), capabilities=None,
            compress=False, namespace=None, address="127.0.0.1", inNamespace=None,
        )  # fmt: skip
        server.start()
        ok = True
        try:
            for jobs in (sizes.queuedSmall, sizes.queued):
                run = self._queued(database, server, small, jobs, realAccounts)
                self.queued[jobs] = run
                self._record("queued", asdict(run))
                ok = ok and all(s.firstMessageSeconds is not None for s in run.starts)
                print(f"  {jobs:,} jobs: load {run.loadSeconds} s, first messages "
                      f"{[s.firstMessageSeconds for s in run.starts]}, RSS "
                      f"{[s.peakRssKiB // 1024 for s in run.starts]} MiB, pages {run.pages}",
                      flush=True)  # fmt: skip
        finally:
            server.stop()
            shutil.rmtree(serverBase, ignore_errors=True)
        return ok

    def _queued(self, database: FleetDatabase, server: BenchServer, small: BuiltCorpus,
                jobs: int, realAccounts: int) -> QueuedRun:  # fmt: skip
        sizes = self.sizes
        name = self._name(f"queued{jobs}_")
        uri = database.create(name)
        runDir = tempfile.mkdtemp(prefix=f"fleet-{name}-", dir=self.bench.runsDir)
        os.chmod(runDir, 0o755)
        accounts = [server.freshAccount() for _ in range(min(jobs, realAccounts))]
        writeUserList(os.path.join(runDir, "users.csv"), queuedRows(accounts, jobs, small.path))
        ports = freePorts(sizes.queuedDaemons)
        configs = [
            fleetConfig(
                os.path.join(runDir, f"imapmig{i}.yaml"), uri=uri,
                databasePassword=database.passwordFile(runDir),
                imapPassword=_secret(os.path.join(runDir, "password"), PASSWORD),
                host=server.host, port=server.port, userList="users.csv", maildir=small.path,
                maxJobs=sizes.connections, maxConnections=sizes.connections * sizes.queuedDaemons,
                lease=sizes.lease, status=f"tcp:{port}:interface=127.0.0.1",
            )
            for i, port in enumerate(ports)
        ]  # fmt: skip
        loadSeconds, loadProblem = _loadJobs(configs[0], runDir)
        before = database.stats(name)
        statementsBefore = database.statements(name)
        launched = [
            launch(self.bench.timer, imapmigArgv(config), os.path.join(runDir, f"d{i}"),
                   _withoutExit)
            for i, config in enumerate(configs)
        ]  # fmt: skip
        firsts = _firstMessages(database, name, launched, timeout=self.bench.args.timeout / 2)
        # The renewals counted from here, each daemon's first heartbeats
        # done (their first plans and caches are a start's, not a
        # renewal's), over half a lease: about 6 per daemon.
        beforePages = database.statements(name)
        with database.connect(name) as c:
            heldFirst = _claimed(c)
            pages, least = _pages(ports[0]) if any(f is not None for f in firsts) else ((), ())
            held = (heldFirst, _claimed(c))
            failed = _failedJobs(c)
        pageReads = pageReadCost(database.statements(name)).minus(pageReadCost(beforePages))
        time.sleep(sizes.lease / 2)
        peaks = [daemon.terminate() for daemon in launched]
        killed = reap(launched, time.monotonic() + 120)
        starts = []
        for daemon, first, peak in zip(launched, firsts, peaks):
            status, rss, problem = daemon.result()
            if daemon in killed:
                problem = f"did not exit within 120 s of SIGTERM (killed; in {daemon.runDir})"
                self.note(f"million row, {jobs:,} jobs: a daemon {problem}")
            starts.append(DaemonStart(first, rss or peak, problem))
        after = database.stats(name).minus(before)
        statementsAfter = database.statements(name)
        inserted = sum(t.inserted for t in after.tables if t.table == "imapmig_queue.jobs")
        for account in accounts:
            server.discard(account)
        return QueuedRun(
            jobs=jobs, loadSeconds=loadSeconds, loadProblem=loadProblem,
            insertedByStarts=inserted, starts=tuple(starts),
            claim=_between(statementsBefore, statementsAfter, CLAIM_MARKER),
            heartbeat=_between(beforePages, statementsAfter, HEARTBEAT_MARKER),
            pages=pages, pageReads=pageReads, pagesHeld=held, pagesFailed=failed,
            pagesLeast=least,
        )  # fmt: skip

    # -- one daemon on SQLite ------------------------------------------------

    def runSideBySide(self) -> bool:
        """
        C{bench/sidebyside.py} on the small and realistic corpora: the
        commit before issue 30 against this tree, interleaved.
        """
        baseline = baselineTree(self.bench.workDir, self.sizes.baseline)
        print(f"== fleet sqlite: {baseline} against {REPOSITORY}, {self.sizes.rounds} rounds",
              flush=True)  # fmt: skip
        ok = True
        for corpus in ("small-5000-seed1", "realistic-5000-seed1"):
            self.bench.corpus(corpus.split("-")[0], 5000)
            completed = subprocess.run(
                [sys.executable, "-m", "bench.sidebyside", corpus, str(self.sizes.rounds),
                 f"{baseline}:2", f"{REPOSITORY}:2"],
                capture_output=True, cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=REPOSITORY),
            )  # fmt: skip
            output = completed.stdout.decode("utf-8", "replace")
            rates = parseSideBySide(output)
            before, after = rates.get(f"{baseline}:2", ()), rates.get(f"{REPOSITORY}:2", ())
            if completed.returncode != 0 or not before or not after:
                self.note(f"sqlite row, {corpus}: bench/sidebyside.py failed: "
                          + completed.stderr.decode("utf-8", "replace")[-500:])  # fmt: skip
                ok = False
            perMessage = self._instructions(baseline, corpus)
            self.sideBySide.append(SideBySide(corpus, before, after, *perMessage))
            self._record("sqlite", {"corpus": corpus, "output": output})
            print(output, flush=True)
        return ok

    def _instructions(self, baseline: str, corpus: str) -> tuple[float | None, float | None]:
        """
        Each tree's instructions per message on C{corpus}
        (C{bench/instructions.py}, 2 connections), net of its empty run;
        L{None} where callgrind is missing or failed (noted).
        """
        from bench.instructions import count

        if shutil.which("valgrind") is None:
            self.note("sqlite row: no valgrind, instructions per message not counted")
            return None, None
        messages = int(corpus.split("-")[1])
        counted: list[float | None] = []
        for tree in (baseline, REPOSITORY):
            try:
                full = count(tree, corpus, self.bench.workDir, 2)
                empty = count(tree, "empty", self.bench.workDir, 2)
            except Exception as e:  # noqa: BLE001 -- reported in the results
                self.note(f"sqlite row: callgrind of {tree} on {corpus} failed: {e!r}")
                counted.append(None)
                continue
            counted.append((full - empty) / messages)
        return counted[0], counted[1]

    # -- results ---------------------------------------------------------

    def _record(self, row: str, data: dict[str, Any]) -> None:
        self.bench.sequence += 1
        path = os.path.join(self.bench.rawDir,
                            f"{self.bench.stamp}-{self.bench.sequence:04d}-fleet-{row}.json")  # fmt: skip
        with open(path, "w") as f:
            json.dump({"part": "fleet", "row": row, **data}, f, indent=1, default=str)

    def markdown(self, command: str, versions: dict[str, str]) -> str:
        """
        C{fleet.md}: the command, the machine's load, each row's figures
        and verdicts.
        """
        sizes = self.sizes
        figures = scaleOutFigures(self.scaleOut)
        lines = [
            "# imapmig fleet benchmark (issue 30)",
            "",
            f"Written by `{command}`; {self.bench.args.runs} run(s) per scale-out figure. "
            "`bench/fleet.py` and `bench/fleet_run.py` say how each figure is measured.",
            "",
            *loadLine(self.loads),
            "",
            "## Targets",
            "",
        ]
        if "scaleout" in sizes.rows:
            lines += scaleOutLines(figures, sizes.rttMs, sizes.connections)
        if "database" in sizes.rows:
            lines += databaseLines(self.cost, self.heartbeats)
        if "million" in sizes.rows:
            lines += queuedLines(self.queued.get(sizes.queued), self.queued.get(sizes.queuedSmall))
        if "sqlite" in sizes.rows:
            lines += sideBySideLines(self.sideBySide, sizes.baseline)
        if figures:
            lines += ["", f"## Scale-out: {sizes.accounts} accounts x {sizes.perAccount} "
                      f"messages, {sizes.rttMs:g} ms round trip", "",
                      scaleOutTable(figures, self.scaleOut)]  # fmt: skip
            mode = ("in its high-performance mode (`service_count = 0`, processes kept "
                    "started)" if sizes.reuseServerProcesses
                    else "in its default mode (a login and an imap process per connection)")
            lines += ["", f"Where the CPU went (median of the full runs; Dovecot {mode}; CPU "
                      "seconds, the daemons' from `wait4`, Dovecot's and PostgreSQL's from "
                      "`/proc` with their reaped children's; other work: the machine's busy "
                      "time less these):", "", scaleOutCpuTable(self.scaleOut, sizes.connections)]  # fmt: skip
        if self.cost is not None and self.cost.ok:
            lines += ["", f"## Row writes by table: one mailbox of {self.cost.messages:,} "
                      f"messages ({self.cost.seconds:.1f} s)", "",
                      tableWritesTable(self.cost.stats, self.cost.messages),
                      "", "The statements of that run that ran most often "
                      "(`pg_stat_statements`, the database's own run):", "",
                      statementsTable(self.largeStatements)]  # fmt: skip
        if self.notes:
            lines += ["", "## Notes", "", *[f"- {n}" for n in self.notes]]
        lines += ["", "| tool | version |", "|---|---|",
                  *[f"| {k} | {v} |" for k, v in versions.items()], ""]  # fmt: skip
        return "\n".join(lines)


def _claimed(c: psycopg.Connection[tuple[Any, ...]]) -> int:
    """
    The jobs claimed now (0 before the queue's tables exist).
    """
    try:
        row = c.execute("SELECT count(*) FROM imapmig_queue.jobs WHERE state = 'claimed'").fetchone()
    except psycopg.Error:
        return 0
    return int(row[0]) if row else 0


def _failedJobs(c: psycopg.Connection[tuple[Any, ...]]) -> int:
    """
    The jobs failed now, by the queue's counts.
    """
    row = c.execute(
        "SELECT coalesce(sum(n), 0) FROM imapmig_queue.job_counts WHERE state = 'failed'"
    ).fetchone()
    return int(row[0]) if row else 0


def _holding(database: FleetDatabase, name: str, daemon: Daemon, held: int,
             deadline: float) -> str:  # fmt: skip
    """
    Wait until the daemon holds C{held} jobs (or 90% of them); a problem
    if it exited first, C{""} otherwise (also at the deadline).
    """
    with database.connect(name) as c:
        while time.monotonic() < deadline:
            if daemon.process.poll() is not None:
                return "the daemon exited early: " + daemon.lastWords()
            if _claimed(c) >= held * 0.9:
                break
            time.sleep(0.2)
    return ""


_KEEP = bool(os.environ.get("IMAPMIG_BENCH_KEEP"))
"""
C{IMAPMIG_BENCH_KEEP=1}: keep every run's directory (its configuration,
and each daemon's output), not only a failed run's.
"""


_PROFILE = os.environ.get("IMAPMIG_BENCH_PROFILE", "")
"""
C{IMAPMIG_BENCH_PROFILE=1}: the scale-out row's daemons run under
C{cProfile} timing each thread's CPU, each writing C{profile.pstats} (its
main thread) and C{profile.pstats.threads} (the others, merged) in its
directory (a diagnostic: the profiler slows them; with
C{IMAPMIG_BENCH_KEEP=1} to keep the files).  C{IMAPMIG_BENCH_PROFILE=threads}:
no profiler, each daemon writes C{threads.json}: its main thread's CPU
seconds and the whole process's, at its end.
"""


def _profiled(argv: list[str], runDir: str) -> list[str]:
    """
    C{argv} (L{imapmigArgv}'s: C{python -c SCRIPT ...}) under C{cProfile}
    when L{_PROFILE} asks, writing C{runDir/profile.pstats}.
    """
    if not _PROFILE:
        return argv
    os.makedirs(runDir, exist_ok=True)
    script = os.path.join(runDir, "profiled-script")
    template = _THREADS if _PROFILE == "threads" else _PROFILER
    with open(script, "w") as f:
        f.write(template.format(out=os.path.join(runDir, "profile.pstats"),
                                threads=os.path.join(runDir, "threads.json"), script=argv[2]))
    return [argv[0], script, *argv[3:]]


# The main thread's CPU time (not the wall clock, which a loaded machine
# stretches), written however the daemon's reactor ends.
_PROFILER = """\
import cProfile, sys, threading, time
profile = cProfile.Profile(time.thread_time)
others = []

def inThread(*args):
    # The first event of each new thread (the thread pool's workers):
    # a profile of its own, on its own CPU clock.
    threadProfile = cProfile.Profile(time.thread_time)
    others.append(threadProfile)
    sys.setprofile(None)
    threadProfile.enable()

threading.setprofile(inThread)
profile.enable()
try:
    exec(compile({script!r}, "twistd", "exec"))
finally:
    profile.disable()
    profile.dump_stats({out!r})
    if others:
        for each in others:
            each.disable()
        import pstats
        merged = pstats.Stats(others[0])
        for each in others[1:]:
            merged.add(each)
        merged.dump_stats({out!r} + ".threads")
"""

_THREADS = """\
import json, time
try:
    exec(compile({script!r}, "twistd", "exec"))
finally:
    with open({threads!r}, "w") as f:
        json.dump({{"main": time.thread_time(), "process": time.process_time()}}, f)
"""


def _withoutExit(argv: list[str]) -> list[str]:
    # The million row's daemons run until stopped.
    return [a for a in argv if a != "--exit-when-done"]


def _loadJobs(config: str, runDir: str) -> tuple[float | None, str]:
    """
    C{imapmig state load-jobs --config CONFIG}, timed.
    """
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "imapmig.cli", "state", "load-jobs", "--config", config],
        capture_output=True, cwd=runDir, env=dict(os.environ, PYTHONPATH=REPOSITORY),
    )  # fmt: skip
    seconds = time.monotonic() - started
    if completed.returncode != 0:
        return None, (
            f"exit status {completed.returncode}: "
            + completed.stderr.decode("utf-8", "replace").strip()[-300:]
            + "; the first daemon's start loaded the list"
        )
    return seconds, ""


_CLAIMED = """
SELECT j.name, d.pid FROM imapmig_queue.jobs j JOIN imapmig_queue.daemons d ON d.daemon_id = j.owner
 WHERE j.state = 'claimed'
"""

_STORED = "SELECT DISTINCT job FROM imapmig.messages WHERE failure IS NULL AND NOT present"


def _firstMessages(database: FleetDatabase, name: str, daemons: Sequence[Daemon],
                   timeout: float) -> list[float | None]:  # fmt: skip
    """
    For each daemon, the seconds from its launch until a message of a job
    it claimed is recorded as stored, or L{None}.  Every 20 ms the claimed
    jobs and their daemons (by pid) are read and kept, then the jobs with
    a message stored: a job claimed and finished between two readings is
    not seen, and its daemon's first message is then a later job's (the
    figure errs late, never early).
    """
    firsts: dict[int, float] = {}
    owners: dict[str, int] = {}
    byPid: dict[int, Daemon] = {}
    deadline = time.monotonic() + timeout
    with database.connect(name) as c:
        while len(firsts) < len(daemons) and time.monotonic() < deadline:
            try:
                owners.update((str(job), int(pid)) for job, pid in c.execute(_CLAIMED).fetchall())
                stored = [str(job) for (job,) in c.execute(_STORED).fetchall()]
            except psycopg.Error:
                stored = []
            now = time.monotonic()
            if len(byPid) < len(daemons):
                # Each daemon is its timer's child.
                byPid = {pid: d for d in daemons if (pid := d.pid()) is not None}
            for job in stored:
                daemon = byPid.get(owners.get(job, -1))
                if daemon is not None and daemon.process.pid not in firsts:
                    firsts[daemon.process.pid] = now - daemon.started
            if all(d.process.poll() is not None for d in daemons):
                break
            time.sleep(0.02)
    return [firsts.get(d.process.pid) for d in daemons]


_PAGES = ("/", "/status.json", "/metrics", "/fleet/jobs.json", "/healthz")
"""
The pages timed: the dashboard's three, and two that tell a request's
parts apart: C{/fleet/jobs.json} (the reader's thread and two statements,
little Python) and C{/healthz} (the reader's thread and a trivial query).
"""


def _pages(port: int, times: int = 30) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
    """
    The median and the least milliseconds of C{times} requests of each
    page, asked in turn (a burst of the shared machine's load falls on
    every page, not on one); a page that failed once is left out.

    The least is the page's own cost: the daemon asked is migrating
    meanwhile, and a request that arrives while its reactor is busy with
    that work waits for it, whatever the page (C{/healthz}, whose work
    does not grow with the jobs, moved by 1.2x between the two sizes by
    its median in a run on the idle machine).
    """
    spent: dict[str, list[float]] = {page: [] for page in _PAGES}
    for _ in range(times):
        for page in _PAGES:
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=30) as r:
                    r.read()
            except OSError:
                spent[page].append(float("nan"))
                continue
            spent[page].append((time.perf_counter() - started) * 1000)
    answered = [
        (page, samples) for page, samples in spent.items()
        if samples and not any(math.isnan(t) for t in samples)
    ]  # fmt: skip
    return (
        tuple((page, statistics.median(samples)) for page, samples in answered),
        tuple((page, min(samples)) for page, samples in answered),
    )


def _between(before: list[tuple[str, int, float, int]], after: list[tuple[str, int, float, int]],
             marker: str) -> StatementCost:  # fmt: skip
    return statementCost(after, marker).minus(statementCost(before, marker))


def baselineTree(workDir: str, baseline: str) -> str:
    """
    A checkout of C{baseline}: the directory itself when it is one, else
    a detached worktree of the commit beside this repository's, made once.
    """
    if os.path.isdir(baseline):
        return os.path.abspath(baseline)
    tree = os.path.join(os.path.dirname(REPOSITORY), f"{os.path.basename(REPOSITORY)}-{baseline}")
    if not os.path.isdir(tree):
        subprocess.run(["git", "-C", REPOSITORY, "worktree", "add", "--detach", tree, baseline],
                       check=True, capture_output=True)  # fmt: skip
    return tree


def runFleet(bench: Bench, sizes: FleetSizes, command: str) -> bool:
    """
    Run the part and write C{fleet.md} into the results directory.

    @return: whether every run succeeded.
    """
    from bench.run import toolVersions

    part = FleetPart(bench, sizes)
    ok = part.run()
    text = part.markdown(command, toolVersions())
    with open(os.path.join(bench.resultsDir, "fleet.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    return ok
