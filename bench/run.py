# -*- test-case-name: tests.test_bench,tests.test_bench_summary -*-
"""
The benchmark of issue 3: imapmig against the tools admins use today and
against a raw writer that marks the server's ceiling.

    .venv/bin/python -m bench.run [options]

    make bench        --parts tls,s2s,scale,main,servers,compress,nagle --runs 3
                      (about 50 minutes; then python -m bench.summary --readme)
    make bench-big    --bigaccount (500,000 messages; an hour or more)
    make bench-fleet  --parts fleet (about 10 minutes)
    make bench-quick  --quick (under a minute)

It builds what it needs (the corpora under C{bench/work/}, the raw writer
C{bench/rawappend.c} with C{gcc -O2}), starts a private Dovecot for each
setting, runs every client the given number of times, and writes:

  - C{bench/results/results.md}: the table (client, RTT, corpus, store,
    messages/s, MB/s, ratio to the raw ceiling of the same setting, peak RSS,
    start-up time), the versions of every tool, the issue's targets, and
    each part's minutes and the load average at its start and end;
  - C{bench/results/summary.md}: issue 31's acceptance, one line per ratio
    (L{bench.summary}): the lines this run measured replace the file's;
  - C{bench/results/chart.png}: messages/s by client and RTT (log scale);
  - C{bench/results/raw/*.json}: every individual run.

How a figure is measured: each client runs as a whole process (reading the
Maildir included) into a fresh, never-used Dovecot account; the account's
message count is checked afterwards (STATUS MESSAGES of every mailbox).  Its
time is taken net of its start-up: the median of its runs on an empty
Maildir, measured the same way, C{--empty-runs} of them right after each
full run.  A figure is the median of C{--runs} runs; the peak RSS
(C{ru_maxrss} from C{os.wait4}) is the largest of them; results.md shows
how far the runs lie apart (L{bench.report.spreadTable}).  The Python
clients keep their bytecode between runs, as an installed daemon does
(C{PYTHONPYCACHEPREFIX=WORKDIR/pycache}), each run once unmeasured first
to fill it (L{Bench.warmUp}).  The
raw writer puts everything into INBOX; the other clients recreate the
folders, which costs a little.  The ceiling of a setting is its fastest raw
writer variant.

The clients (C{--clients}, comma-separated):
  imaplib              imaplib one-by-one loop (bench/clients/imaplib_loop.py)
  imaplib-nodelay      the same with TCP_NODELAY
  twisted              Twisted's stock IMAP4Client (bench/clients/twisted_stock.py)
  mbsync               mbsync (isync) pushing the Maildir (Create Far, Sync Push)
  imapmig-1            imapmig with connections: 1
  imapmig              imapmig with its defaults
  imapmig-4            imapmig with connections: 4
  imapmig-compress-off, imapmig-compress-on
                       imapmig with compress: off / on
  raw                  raw writer, one message per APPEND (LITERAL+)
  raw-select           the same after SELECT INBOX
  raw-multi50          raw writer, MULTIAPPEND batches of 50 after SELECT
  raw-multi50-2        the same on 2 connections, one mailbox each (imapmig's
                       default connections; issue 17)
  raw-wait             raw writer, one message per APPEND; a command with a
                       synchronizing literal starts once every earlier one
                       is answered (--sync-wait)
  raw-wait-2           the same on 2 connections (imapmig's default)

The parts of the matrix (C{--parts}, comma-separated):
  main      the Dovecot defaults (LITERAL+, MULTIAPPEND): every RTT of --rtt,
            every corpus of --corpus, every store of --store; without --store,
            the disk store (slow: Dovecot's fsyncs) runs only the realistic
            corpus on loopback, tmpfs everything; without --clients, the
            one-at-a-time clients (imaplib, twisted) run only the realistic
            corpus at an RTT above zero, where the RTT alone bounds them
  servers   Dovecot without MULTIAPPEND, and with LITERAL- only (no LITERAL+,
            no MULTIAPPEND, like Gmail): imapmig with 1, default and 4
            connections and the raw writers that fit; realistic corpus,
            tmpfs, at loopback and at the largest --rtt (where the LITERAL-
            server takes --cap-servers messages)
  compress  a 20 Mbit/s link at 20 ms, Dovecot offering COMPRESS=DEFLATE:
            imapmig with compress off and on, and the raw writer; skipped
            (and said so) when imapmig does not accept the compress key
  nagle     a server that leaves Nagle's algorithm on and offers
            synchronizing literals only (like Courier-IMAP): Dovecot with
            LITERAL+, LITERAL- and MULTIAPPEND hidden, run with
            bench/naglekeep.c preloaded (it ignores Dovecot's TCP_NODELAY
            and TCP_CORK, so Nagle stays on), and an identical Dovecot
            without it (no stall), both running at once and every client
            run on each in turn; imaplib with TCP_NODELAY, imapmig with 1
            and 2 connections, the raw writers; small corpus, tmpfs,
            loopback, --nagle-messages messages; then the same pair of
            servers offering LITERAL- only (like Gmail) with the realistic
            corpus (its messages above 4096 octets are synchronizing
            literals): imaplib and imapmig
  scale     speed at scale (bench/scale.py; loopback, tmpfs, small corpus):
            one daemon migrating --scale-accounts accounts of
            --scale-per-account messages from a CSV user list (max_jobs
            --scale-max-jobs when imapmig accepts it) against one account
            holding the same messages, mbsync over a Group of one channel
            per account and mbsync into one account; --scale-queued
            queued jobs: seconds to the first message stored and peak
            RSS; and bench/startup.py --runs --startup-runs
  s2s       server to server (bench/s2s.py): an IMAP account of the
            realistic corpus in one private Dovecot copied into a fresh
            account of another (tmpfs, loopback): imapmig with an IMAP
            source, Dovecot's `doveadm backup -R imapc:`, and a raw
            fetch-then-MULTIAPPEND client (bench/clients/s2s_raw.py)
  tls       the rows of issue 31 over each mode of --tls (bench/tlsrows.py;
            loopback, tmpfs, realistic corpus), side by side: imapmig with
            1 and 2 connections, the raw MULTIAPPEND 50 writer with as many
            (bench/rawappend.c --tls, OpenSSL), imapmig with an IMAP source
            and `doveadm backup -R imapc:` (imapc_ssl); each ratio over TLS
            beside its plain-TCP value
  fleet     a fleet of daemons on one private PostgreSQL (bench/fleet.py,
            bench/fleet_run.py; issue 30), its rows (--fleet-rows):
            scaleout: --fleet-accounts accounts through the delay line
            (--fleet-rtt) with 1, 2 and 3 daemons (--fleet-daemons), each
            capped at --fleet-connections connections; database: one
            daemon and one mailbox of --fleet-large messages, its commits,
            row writes and connections, and its heartbeat's cost holding 1
            and --fleet-held jobs; million: a user list of --fleet-queued
            rows (and of --fleet-queued-small) loaded by imapmig state
            load-jobs, --fleet-queued-daemons daemons' first messages,
            peak RSS, claims, heartbeats and pages; sqlite: one daemon on
            SQLite, this tree against --fleet-baseline (a commit or a
            checkout) with bench/sidebyside.py, --fleet-rounds rounds on
            the small and realistic corpora; writes fleet.md

Options:
  --runs N          runs per figure (default 5)
  --clients LIST    the clients to run (default: each part's own list)
  --rtt LIST        round-trip times in ms (default 0,2,20); above zero they
                    need bench/netns.py (two network namespaces and a delay
                    line); without it they are skipped and said so
  --corpus LIST     realistic,small (default both)
  --store LIST      disk,tmpfs (default both, see main above)
  --messages N      messages per corpus (default 5000)
  --cap-slow N      messages for the one-command-at-a-time clients (imaplib,
                    twisted) at an RTT above zero (default 300); their rate
                    is reported
  --cap-servers N   messages for the LITERAL- server at an RTT above zero,
                    where a synchronizing literal costs a round trip per
                    message above 4 KB (default 400)
  --compress-messages N
                    messages over the 20 Mbit/s link (default 500)
  --nagle-messages N
                    messages of the nagle part (default 2000)
  --parts LIST      main,servers,compress,nagle,scale,s2s,tls,fleet (default
                    all; make bench: all but fleet)
  --tls LIST        the modes of the tls part: none (plain TCP), implicit
                    (the imaps port), starttls (default all three)
  --quick           a smoke run: 300 messages, 1 run, loopback, tmpfs,
                    realistic corpus, main part only (under a minute); its
                    figures are dominated by start-up and mean nothing
  --scale-accounts N, --scale-per-account N, --scale-queued N,
  --scale-max-jobs N, --startup-runs N
                    the scale part's sizes (default 200 accounts x 20
                    messages, 10,000 queued jobs, max_jobs 16,
                    bench/startup.py --runs 10)
  --fleet-rows LIST, --fleet-accounts N, --fleet-per-account N,
  --fleet-daemons LIST, --fleet-rtt MS, --fleet-connections N,
  --fleet-large N, --fleet-held N, --fleet-queued N,
  --fleet-queued-small N, --fleet-queued-daemons N, --fleet-baseline C,
  --fleet-rounds N, --fleet-lease S
                    the fleet part's rows and sizes (default every row;
                    200 x 20, daemons 1,2,3, 20 ms, 4 connections, 20,000
                    messages, 1,000 held, 1,000,000 and 1,000 queued, 3
                    daemons, 2ee44a1, 5 rounds, lease 12 s)
  --fleet-dovecot-per-connection
                    the scale-out row's Dovecot in its default mode (a
                    login and an imap process forked per connection)
                    rather than its high-performance mode (processes
                    reused; bench/servers.py reusingSettings)
  --scale-precreate the many-accounts rows' accounts are logged into and
                    their folders created before each timed run, for
                    every contender alike (a destination's accounts
                    usually exist before a migration)
  --memory          the memory check instead: imapmig's peak RSS while
                    migrating a 50,000-message Maildir holding one 30 MB
                    message (target: under 150 MB); writes memory.md
  --memory-messages N
                    messages of the memory check (default 50000)
  --delta           the delta-pass check instead (bench/delta.py): a
                    server-to-server migration of a large account, then a
                    pass with nothing changed and one after 10 new
                    messages, each timed; writes delta.md
  --delta-messages N
                    messages of the delta check (default 100000)
  --bigaccount      the big-account rows instead (bench/bigaccount.py,
                    issue 31 point 4): imapmig, its delta pass and the raw
                    client on one account of each size; writes
                    bigaccount.md, and summary.md's lines of the
                    500,000-message rows
  --bigaccount-sizes LIST
                    its sizes, comma-separated (default 5000,500000; the
                    smallest is the reference of the targets)
  --bigaccount-layouts LIST
                    spread (twenty folders, power-law sizes), one (INBOX
                    only), the same from an IMAP account (spread-imap,
                    one-imap: against dsync), comma-separated (default
                    all four)
  --results DIR     where to write (default bench/results; with --quick
                    bench/work/quick-results, so a smoke run leaves the
                    real table alone)
  --workdir DIR     corpora, Dovecot instances, the raw writer (default
                    bench/work, reused between runs)
  --timeout S       seconds a single run may take before it is killed
                    (default 900)
  --empty-runs N    runs on an empty Maildir after each full run, whose
                    median (over the repetitions) is the start-up taken off
                    (default 3)
  --no-bytecode-cache
                    the Python clients compile their modules from source in
                    every run when the environment says so
                    (PYTHONDONTWRITEBYTECODE=1), as before 2026-12-07

Requires: root for the namespaces, Dovecot (dovecot-imapd), mbsync (isync),
gcc, iproute2; matplotlib for the chart (the table is written without it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, ContextManager, Iterator, Sequence

if __package__ in (None, ""):
    # Run as a script (python bench/run.py): import from this checkout.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attrs import asdict, frozen

from bench.contenders import (
    BENCH_DIR,
    COMPRESS_CLIENTS,
    CONTENDERS,
    MAIN_CLIENTS,
    NAGLE_CLIENTS,
    NAGLE_MINUS_CLIENTS,
    REPOSITORY,
    S2S_CLIENTS,
    SERVER_CLIENTS,
    TLS_MODES,
    Contender,
    Invocation,
    SourceAccount,
    buildTools,
    imapmigArgv,
    imapmigConfig,
)
from bench.corpora import BuiltCorpus, buildCorpus, emptyCorpus, memoryCorpus, subsetCorpus
from bench.fleet import FLEET_ROWS, FleetSizes
from bench.report import (
    Figure,
    RunResult,
    Setting,
    drawChart,
    figures,
    markdownTable,
    spreadTable,
)
from bench.scale import (
    ScaleRun,
    ScaleSizes,
    countAccount,
    fileTail,
    runScale,
    scaleFigures,
    scaleJSON,
    scaleTable,
    scaleTargets,
)
from bench.servers import (
    PASSWORD,
    VARIANTS,
    BenchServer,
    buildNagleShim,
    capabilitiesWithout,
    defaultCapabilities,
)
from bench.summary import (
    PartClock,
    RunContext,
    bigLines,
    figureLines,
    partsTable,
    scaleLines,
    writeSummary,
)

_LINK_MTU = 9000
_COMPRESS_RTT_MS = 20.0
_COMPRESS_RATE = 20_000_000
# The target, in MB (10^6 octets).
_MEMORY_TARGET_MB = 150


@frozen
class Network:
    """
    Where the server listens and where the clients run.

    @ivar serverNamespace: the server's network namespace (L{None}:
        loopback, this namespace).
    @ivar clientNamespace: the clients' network namespace.
    @ivar serverAddress: the address the server listens on.
    @ivar inNamespace: prefixes a command line to run it in a namespace.
    """

    serverNamespace: str | None
    clientNamespace: str | None
    serverAddress: str
    inNamespace: Callable[[str, list[str]], list[str]] | None

    def client(self, argv: list[str]) -> list[str]:
        """
        C{argv} as run in the clients' namespace.
        """
        if self.clientNamespace is None or self.inNamespace is None:
            return argv
        return self.inNamespace(self.clientNamespace, argv)


LOOPBACK = Network(None, None, "127.0.0.1", None)


@frozen
class Job:
    """
    One setting of the plan and the clients to run in it.
    """

    setting: Setting
    clients: tuple[str, ...]
    messages: int


class Bench:
    """
    Runs the plan and collects the results.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workDir = os.path.abspath(args.workdir)
        self.resultsDir = os.path.abspath(args.results)
        self.rawDir = os.path.join(self.resultsDir, "raw")
        self.runsDir = os.path.join(self.workDir, "runs")
        self.stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.sequence = 0
        self.results: list[RunResult] = []
        self.scaleRuns: list[ScaleRun] = []
        self.notes: list[str] = []
        self.parts = PartClock()
        self.rawBinary = ""
        self.timer = ""
        self._capabilities: list[str] | None = None
        self._delayLine: str | None = None
        self._corpora: dict[tuple[str, int], BuiltCorpus] = {}

    # -- preparation ---------------------------------------------------

    def prepare(self) -> None:
        """
        Make the directories and compile the raw writer.
        """
        # What failed runs of an earlier invocation left for inspection.
        shutil.rmtree(self.runsDir, ignore_errors=True)
        for directory in (self.workDir, self.resultsDir, self.rawDir, self.runsDir):
            os.makedirs(directory, exist_ok=True)
        self.rawBinary, self.timer = buildTools(self.workDir)
        global _bytecodeCache
        _bytecodeCache = None if self.args.no_bytecode_cache else os.path.join(self.workDir, "pycache")

    def warmUp(self, clients: Sequence[str]) -> None:
        """
        Run each Python client of C{clients} once, unmeasured, on the empty
        Maildir into a Dovecot of its own, so that it fills the bytecode
        cache (L{_environment}) and no measured run compiles; the others
        (C programs, mbsync, dsync) need none.  The server-to-server
        clients, which need a source account, are not run: imapmig's warm-up
        compiles nearly all that imapmig's IMAP source runs.
        """
        python = [name for name in dict.fromkeys(clients)
                  if CONTENDERS[name].python and name not in S2S_CLIENTS]  # fmt: skip
        if _bytecodeCache is None or not python:
            return
        # What the runs import beyond a plain run's: the TLS stack (part
        # tls) and the raw server-to-server client (parts s2s, tls).
        subprocess.run([sys.executable, "-c", _WARM_IMPORTS], cwd=REPOSITORY, env=_environment(),
                       capture_output=True, timeout=300)  # fmt: skip
        base = tempfile.mkdtemp(prefix="dovecot-warm-up-", dir=self.workDir)
        server = BenchServer(
            base, accounts=len(python), fsync=False,
            mailRoot=tempfile.mkdtemp(prefix="imapmig-warm-up-", dir="/dev/shm"),
            capabilities=None, compress=False, namespace=None, address="127.0.0.1",
            inNamespace=None,
        )  # fmt: skip
        setting = Setting("warm-up", "tmpfs", 0.0, None, "empty", "default")
        server.start()
        try:
            empty = emptyCorpus(self.workDir)
            for name in python:
                result = self.runOnce(LOOPBACK, server, setting, CONTENDERS[name], "empty", empty, -1)
                if not result.ok:
                    print(f"  warm-up of {name} failed: {result.problem}", flush=True)
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)

    def corpus(self, profile: str, count: int) -> BuiltCorpus:
        """
        The corpus of C{profile}: the first C{count} messages of the
        C{--messages} corpus.
        """
        key = (profile, count)
        if key not in self._corpora:
            full = buildCorpus(self.workDir, profile, max(self.args.messages, count))
            self._corpora[key] = subsetCorpus(self.workDir, full, count)
        return self._corpora[key]

    def capabilities(self, variant: str) -> str | None:
        """
        The C{imap_capability} override of a server variant.
        """
        if self._capabilities is None:
            self._capabilities = defaultCapabilities(self.workDir)
        return capabilitiesWithout(self._capabilities, VARIANTS[variant])

    # -- running -------------------------------------------------------

    @contextlib.contextmanager
    def network(self, rttMs: float, rate: int | None) -> Iterator[Network | None]:
        """
        The loopback or a delay line of C{rttMs} (and C{rate}); yields
        L{None} when a delay line cannot be made (the reason is noted).
        """
        if not rttMs and rate is None:
            yield LOOPBACK
            return
        try:
            # Written alongside; imported by name so this module type-checks
            # with or without it.
            netns: Any = importlib.import_module("bench.netns")
        except ImportError as e:
            self.note(f"RTT {rttMs:g} ms skipped: bench/netns.py is not available ({e})")
            yield None
            return
        try:
            if self._delayLine is None:
                self._delayLine = netns.compileDelayLine(self.workDir)
            # An unlimited link gets jumbo frames: with netns's default MTU
            # of 65000 the receiver's window stays at two segments (the TUN
            # device's buffers are large for their content, and Linux grows
            # the window only for well-filled ones), which throttles a long
            # MULTIAPPEND to about 5 MB/s at 20 ms.  1500 works too but
            # costs the relay more CPU than this machine can spare.
            mtu = _LINK_MTU if rate is None else None
            manager: ContextManager[Any] = netns.delayedLink(
                rttMs, rate, mtu=mtu, delayLine=self._delayLine
            )
            link = manager.__enter__()
        except Exception as e:  # noqa: BLE001 -- reported in the results
            self.note(f"RTT {rttMs:g} ms skipped: the delay line failed: {e!r}")
            yield None
            return
        try:
            yield Network(
                serverNamespace=link.serverNamespace,
                clientNamespace=link.clientNamespace,
                serverAddress=link.serverAddress,
                inNamespace=netns.inNamespace,
            )
        finally:
            manager.__exit__(None, None, None)

    def note(self, text: str) -> None:
        """
        Record a remark for the results and print it.
        """
        if text not in self.notes:
            self.notes.append(text)
        print("  note:", text, flush=True)

    def runSetting(
        self, network: Network, store: str, server: str, compress: bool, jobs: Sequence[Job]
    ) -> None:
        """
        Start one Dovecot and run the jobs that share it.
        """
        runs = self.args.runs
        accounts = sum(len(job.clients) for job in jobs) * runs * (1 + self.args.empty_runs) + 5
        base = tempfile.mkdtemp(prefix=f"dovecot-{store}-{server}-", dir=self.workDir)
        mailRoot = None
        if store == "tmpfs":
            mailRoot = tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm")
        bench = BenchServer(
            base,
            accounts=accounts,
            fsync=store == "disk",
            mailRoot=mailRoot,
            capabilities=self.capabilities(server),
            compress=compress,
            namespace=network.serverNamespace,
            address=network.serverAddress,
            inNamespace=network.inNamespace,
        )
        bench.start()
        try:
            for job in jobs:
                self.runJob(network, bench, job)
        finally:
            bench.stop()
            shutil.rmtree(base, ignore_errors=True)

    def runSideBySide(self, network: Network, jobs: Sequence[Job]) -> None:
        """
        Start one Dovecot per job (with the Nagle shim preloaded for a job
        whose setting says C{nagle}), all at once, and run every client on
        each in turn, so that the load of the machine weighs on all alike.

        @param jobs: jobs sharing store, server variant and clients.
        """
        runs = self.args.runs
        servers: list[BenchServer] = []
        bases: list[str] = []
        try:
            for job in jobs:
                setting = job.setting
                accounts = len(job.clients) * runs * (1 + self.args.empty_runs) + 5
                base = tempfile.mkdtemp(
                    prefix=f"dovecot-{setting.store}-{setting.server}-", dir=self.workDir
                )
                bases.append(base)
                mailRoot = None
                if setting.store == "tmpfs":
                    mailRoot = tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm")
                server = BenchServer(
                    base,
                    accounts=accounts,
                    fsync=setting.store == "disk",
                    mailRoot=mailRoot,
                    capabilities=self.capabilities(setting.server),
                    compress=setting.serverCompress,
                    namespace=network.serverNamespace,
                    address=network.serverAddress,
                    inNamespace=network.inNamespace,
                    preload=buildNagleShim(self.workDir) if setting.nagle else None,
                )
                servers.append(server)
                server.start()
            for repetition in range(runs):
                for name in jobs[0].clients:
                    for job, server in zip(jobs, servers):
                        self.runJob(network, server, job, repetition, (name,))
        finally:
            for server in servers:
                server.stop()
            for base in bases:
                shutil.rmtree(base, ignore_errors=True)

    def runJob(
        self,
        network: Network,
        server: BenchServer,
        job: Job,
        only: int | None = None,
        clients: Sequence[str] | None = None,
    ) -> None:
        """
        Run every client of a job C{--runs} times, interleaved, each once on
        the corpus and then C{--empty-runs} times on an empty Maildir.

        @param only: run that repetition only, not C{--runs} of them.
        @param clients: run these of the job's clients only.
        """
        setting = job.setting
        print(
            f"== {setting.part}: {setting.link()}, {setting.store}, {setting.corpus} corpus, "
            f"server {setting.server}",
            flush=True,
        )
        empty = emptyCorpus(self.workDir)
        repetitions = range(self.args.runs) if only is None else (only,)
        for repetition in repetitions:
            for name in job.clients if clients is None else clients:
                contender = CONTENDERS[name]
                count = job.messages
                if contender.slow and setting.rttMs > 0:
                    count = min(count, self.args.cap_slow)
                corpus = self.corpus(setting.corpus, count)
                for kind, maildir in runKinds(corpus, empty, self.args.empty_runs):
                    result = self.runOnce(network, server, setting, contender, kind, maildir,
                                          repetition)  # fmt: skip
                    self.record(result)

    def runOnce(
        self,
        network: Network,
        server: BenchServer,
        setting: Setting,
        contender: Contender,
        kind: str,
        corpus: BuiltCorpus,
        repetition: int,
        source: SourceAccount | None = None,
    ) -> RunResult:
        """
        Run one client once, as a process, and verify the account.

        @param source: the account a server-to-server client reads (part
            C{s2s}); L{None}: the client reads C{corpus}'s Maildir.
        """
        account = server.freshAccount()
        runDir = tempfile.mkdtemp(prefix=f"{contender.name}-", dir=self.runsDir)
        os.chmod(runDir, 0o755)
        invocation = Invocation(
            host=server.host,
            port=server.port,
            user=account,
            maildir=corpus.path,
            runDir=runDir,
            server=VARIANTS[setting.server],
            rawBinary=self.rawBinary,
            source=source,
            tls=setting.tls,
            tlsPort=server.tlsPort,
            caPath=server.caPath,
        )
        argv = network.client(contender.argv(invocation))
        seconds, status, usage = _timedProcess(self.timer, argv, runDir, self.args.timeout)
        problem = ""
        counted: int | None = None
        if status != 0:
            problem = f"exit status {status}: {fileTail(os.path.join(runDir, 'stderr'))}"
        else:
            try:
                counted = self.count(network, server, account)
            except Exception as e:  # noqa: BLE001 -- reported in the results
                problem = f"cannot count the messages: {e!r}"
            else:
                if counted != corpus.messages:
                    problem = f"{counted} messages in the account, {corpus.messages} expected"
        ok = not problem
        if ok:
            shutil.rmtree(runDir, ignore_errors=True)
        else:
            print(f"  FAILED {contender.name} ({kind}): {problem} (see {runDir})", flush=True)
        server.discard(account)
        result = RunResult(
            setting=setting,
            client=contender.name,
            kind=kind,
            repetition=repetition,
            messages=corpus.messages,
            octets=corpus.octets,
            seconds=seconds,
            maxRssKiB=usage.maxRssKiB,
            userSeconds=usage.userSeconds,
            systemSeconds=usage.systemSeconds,
            exitStatus=status,
            counted=counted,
            ok=ok,
            problem=problem,
        )
        if kind == "full" and ok:
            rate = corpus.messages / seconds if seconds else 0.0
            print(
                f"  {contender.label:32} {corpus.messages:>6} messages in {seconds:6.2f} s "
                f"({rate:,.0f}/s gross), {usage.maxRssKiB / 1024:.0f} MB",
                flush=True,
            )
        return result

    def count(self, network: Network, server: BenchServer, account: str) -> int:
        """
        The messages in every mailbox of C{account} (STATUS MESSAGES).
        """
        if network.clientNamespace is None:
            return countAccount(server, account)
        argv = network.client(
            [sys.executable, "-m", "bench.clients.count", "--host", server.host,
             "--port", str(server.port), "--user", account, "--password", PASSWORD]
        )  # fmt: skip
        completed = subprocess.run(
            argv, capture_output=True, cwd=REPOSITORY, env=_environment(), timeout=300
        )
        if completed.returncode != 0:
            raise RuntimeError(completed.stderr.decode("utf-8", "replace")[-500:])
        return int(json.loads(completed.stdout)["messages"])

    def record(self, result: RunResult) -> None:
        """
        Keep a run and write it to C{results/raw/}.
        """
        self.results.append(result)
        self.sequence += 1
        path = os.path.join(
            self.rawDir, f"{self.stamp}-{self.sequence:04d}-{result.client}-{result.kind}.json"
        )
        with open(path, "w") as f:
            json.dump(asdict(result), f, indent=1)

    def recordScale(self, run: ScaleRun) -> None:
        """
        Keep a run of the scale part and write it to C{results/raw/}.
        """
        self.scaleRuns.append(run)
        self.sequence += 1
        path = os.path.join(
            self.rawDir, f"{self.stamp}-{self.sequence:04d}-scale-{run.row}.json"
        )
        with open(path, "w") as f:
            json.dump(scaleJSON(run), f, indent=1)


_WARM_IMPORTS = """
import importlib
for name in ("twisted.internet.ssl", "service_identity", "imapmig.imap.tls",
             "bench.clients.s2s_raw"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""
"""
What L{Bench.warmUp} imports besides running the clients, to compile it.
"""

_bytecodeCache: str | None = None
"""
Where the Python clients keep their bytecode (C{PYTHONPYCACHEPREFIX}), set
by L{Bench.prepare}; L{None}: as the environment says (this development
environment's C{PYTHONDONTWRITEBYTECODE=1} compiles every module of the
checkout from source in every run).
"""


def _environment() -> dict[str, str]:
    """
    The clients' environment: this checkout first on the module path, so
    imapmig and the clients run from the working tree; and, unless
    C{--no-bytecode-cache}, their bytecode kept in L{_bytecodeCache}, as an
    installed daemon has it (pip compiles the C{.pyc} files at install):
    without it every run of imapmig compiled its 160 modules from source,
    0.25 s of CPU in the run, on an empty Maildir as on the corpus.
    """
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=REPOSITORY + (os.pathsep + path if path else ""))
    if _bytecodeCache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _bytecodeCache
    return env


@frozen
class Usage:
    """
    What L{_timedProcess} measured of a process.

    @ivar maxRssKiB: its peak resident set size (C{ru_maxrss}).
    @ivar userSeconds: its user CPU time.
    @ivar systemSeconds: its system CPU time.
    """

    maxRssKiB: int
    userSeconds: float
    systemSeconds: float


def _timedProcess(
    timer: str, argv: list[str], runDir: str, timeout: float
) -> tuple[float, int, Usage]:
    """
    Run C{argv} under the timer (C{bench/timed.c}: fork, exec, C{wait4});
    return its wall-clock time, exit status and resource usage.  Killed
    (with its process group) after C{timeout} seconds.
    """
    report = os.path.join(runDir, "timed.json")
    with open(os.path.join(runDir, "stdout"), "wb") as out, open(
        os.path.join(runDir, "stderr"), "wb"
    ) as err:
        process = subprocess.Popen(
            [timer, report, *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            cwd=REPOSITORY, env=_environment(), start_new_session=True,
        )  # fmt: skip
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return float(timeout), -signal.SIGKILL, Usage(0, 0.0, 0.0)
    with open(report) as f:
        measured = json.load(f)
    usage = Usage(
        maxRssKiB=int(measured["maxrss_kib"]),
        userSeconds=float(measured["user"]),
        systemSeconds=float(measured["system"]),
    )
    return float(measured["seconds"]), int(measured["status"]), usage


def runKinds(
    corpus: BuiltCorpus, empty: BuiltCorpus, emptyRuns: int
) -> list[tuple[str, BuiltCorpus]]:
    """
    What one repetition of a client runs, in order: the corpus once, then
    the empty Maildir C{emptyRuns} times (its start-up, subtracted from
    the repetitions' full runs as their median: L{bench.report.figures}).
    """
    return [("full", corpus)] + [("empty", empty)] * emptyRuns


def warmUpClients(plan: Sequence[Job], scale: bool) -> list[str]:
    """
    The clients L{Bench.warmUp} runs before C{plan}: its clients, and
    imapmig for a plan with server-to-server rows (which share most of its
    modules) or with the scale part.
    """
    clients = [name for job in plan for name in job.clients]
    if scale or any(job.setting.part in ("s2s", "tls") for job in plan):
        clients.append("imapmig")
    return list(dict.fromkeys(clients))


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parseArguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """
    Parse the command line (see the module docstring).
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", type=_split, default=None)
    parser.add_argument("--rtt", type=_split, default=["0", "2", "20"])
    parser.add_argument("--corpus", type=_split, default=["realistic", "small"])
    parser.add_argument("--store", type=_split, default=None)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--cap-slow", type=int, default=300)
    parser.add_argument("--cap-servers", type=int, default=400)
    parser.add_argument("--compress-messages", type=int, default=500)
    parser.add_argument("--nagle-messages", type=int, default=2000)
    parser.add_argument(
        "--parts", type=_split,
        default=["main", "servers", "compress", "nagle", "scale", "s2s", "tls", "fleet"],
    )  # fmt: skip
    fleet = FleetSizes()
    parser.add_argument("--tls", type=_split, default=list(TLS_MODES))
    parser.add_argument("--fleet-rows", type=_split, default=list(fleet.rows))
    parser.add_argument("--fleet-accounts", type=int, default=fleet.accounts)
    parser.add_argument("--fleet-per-account", type=int, default=fleet.perAccount)
    parser.add_argument("--fleet-daemons", type=_split,
                        default=[str(n) for n in fleet.daemons])  # fmt: skip
    parser.add_argument("--fleet-rtt", type=float, default=fleet.rttMs)
    parser.add_argument("--fleet-connections", type=int, default=fleet.connections)
    parser.add_argument("--fleet-large", type=int, default=fleet.large)
    parser.add_argument("--fleet-held", type=int, default=fleet.held)
    parser.add_argument("--fleet-queued", type=int, default=fleet.queued)
    parser.add_argument("--fleet-queued-small", type=int, default=fleet.queuedSmall)
    parser.add_argument("--fleet-queued-daemons", type=int, default=fleet.queuedDaemons)
    parser.add_argument("--fleet-baseline", default=fleet.baseline)
    parser.add_argument("--fleet-rounds", type=int, default=fleet.rounds)
    parser.add_argument("--fleet-lease", type=int, default=fleet.lease)
    parser.add_argument("--fleet-dovecot-per-connection", action="store_true")
    defaults = ScaleSizes()
    parser.add_argument("--scale-accounts", type=int, default=defaults.accounts)
    parser.add_argument("--scale-per-account", type=int, default=defaults.perAccount)
    parser.add_argument("--scale-queued", type=int, default=defaults.queued)
    parser.add_argument("--scale-max-jobs", type=int, default=defaults.maxJobs)
    parser.add_argument("--startup-runs", type=int, default=defaults.startupRuns)
    parser.add_argument("--scale-precreate", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-messages", type=int, default=50_000)
    parser.add_argument("--delta", action="store_true")
    parser.add_argument("--delta-messages", type=int, default=100_000)
    parser.add_argument("--bigaccount", action="store_true")
    parser.add_argument("--bigaccount-sizes", type=_split, default=["5000", "500000"])
    parser.add_argument("--bigaccount-layouts", type=_split, default=["spread", "one", "spread-imap", "one-imap"])
    parser.add_argument("--results", default=None)
    parser.add_argument("--workdir", default=os.path.join(BENCH_DIR, "work"))
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--empty-runs", type=int, default=3)
    parser.add_argument("--no-bytecode-cache", action="store_true")
    args = parser.parse_args(argv)
    if args.results is None:
        # A smoke run does not replace the real table.
        args.results = (
            os.path.join(args.workdir, "quick-results")
            if args.quick
            else os.path.join(BENCH_DIR, "results")
        )
    if args.quick:
        args.messages = 300
        args.runs = 1
        args.rtt = ["0"]
        args.store = args.store or ["tmpfs"]
        args.corpus = ["realistic"]
        args.parts = ["main"]
    problems = []
    for name in args.clients or ():
        if name not in CONTENDERS:
            problems.append(f"unknown client {name!r} (known: {', '.join(CONTENDERS)})")
    for name in args.corpus:
        if name not in ("realistic", "small"):
            problems.append(f"unknown corpus {name!r} (realistic, small)")
    for name in args.store or ():
        if name not in ("disk", "tmpfs"):
            problems.append(f"unknown store {name!r} (disk, tmpfs)")
    for name in args.parts:
        if name not in ("main", "servers", "compress", "nagle", "scale", "s2s", "tls", "fleet"):
            problems.append(
                f"unknown part {name!r} (main, servers, compress, nagle, scale, s2s, tls, fleet)"
            )
    for name in args.tls:
        if name not in TLS_MODES:
            problems.append(f"unknown TLS mode {name!r} ({', '.join(TLS_MODES)})")
    for name in args.fleet_rows:
        if name not in FLEET_ROWS:
            problems.append(f"unknown fleet row {name!r} ({', '.join(FLEET_ROWS)})")
    try:
        args.fleet_daemons = [int(n) for n in args.fleet_daemons]
    except ValueError:
        problems.append(f"--fleet-daemons takes numbers, not {args.fleet_daemons!r}")
    else:
        if 1 not in args.fleet_daemons or min(args.fleet_daemons) < 1:
            problems.append("--fleet-daemons must hold 1 (the rates are compared with it)")
    if args.scale_accounts < 1 or args.scale_per_account < 1:
        problems.append("--scale-accounts and --scale-per-account must be at least 1")
    if args.scale_queued < 0 or args.startup_runs < 0 or args.scale_max_jobs < 1:
        problems.append(
            "--scale-queued and --startup-runs must not be negative, --scale-max-jobs positive"
        )
    try:
        args.rtt = [float(r) for r in args.rtt]
    except ValueError:
        problems.append(f"--rtt takes numbers of milliseconds, not {args.rtt!r}")
    if args.runs < 1:
        problems.append("--runs must be at least 1")
    if args.empty_runs < 1:
        problems.append("--empty-runs must be at least 1")
    if problems:
        parser.error("; ".join(problems))
    return args


def fleetSizes(args: argparse.Namespace) -> FleetSizes | None:
    """
    The sizes of the fleet part, or L{None} when it is not to run.
    """
    if "fleet" not in args.parts:
        return None
    return FleetSizes(
        rows=tuple(args.fleet_rows),
        accounts=args.fleet_accounts,
        perAccount=args.fleet_per_account,
        daemons=tuple(args.fleet_daemons),
        rttMs=args.fleet_rtt,
        connections=args.fleet_connections,
        large=args.fleet_large,
        held=args.fleet_held,
        queued=args.fleet_queued,
        queuedSmall=args.fleet_queued_small,
        queuedDaemons=args.fleet_queued_daemons,
        baseline=args.fleet_baseline,
        rounds=args.fleet_rounds,
        lease=args.fleet_lease,
        reuseServerProcesses=not args.fleet_dovecot_per_connection,
    )


def scaleSizes(args: argparse.Namespace) -> ScaleSizes | None:
    """
    The sizes of the scale part, or L{None} when it is not to run.
    """
    if "scale" not in args.parts:
        return None
    return ScaleSizes(
        accounts=args.scale_accounts,
        perAccount=args.scale_per_account,
        queued=args.scale_queued,
        maxJobs=args.scale_max_jobs,
        startupRuns=args.startup_runs,
        precreate=args.scale_precreate,
    )


def makePlan(args: argparse.Namespace) -> list[Job]:
    """
    The settings to run and the clients of each.
    """
    plan: list[Job] = []

    def chosen(defaults: Sequence[str]) -> tuple[str, ...]:
        # A server-to-server client needs a source account: only the s2s
        # and tls parts have one.
        if args.clients:
            return tuple(c for c in args.clients if c not in S2S_CLIENTS)
        return tuple(defaults)

    if "main" in args.parts:
        for rtt in args.rtt:
            for store in args.store or ["disk", "tmpfs"]:
                for corpus in args.corpus:
                    if not args.store and store == "disk" and (rtt or corpus != "realistic"):
                        # By default the disk store, where Dovecot's fsyncs
                        # dominate, runs the realistic corpus on loopback
                        # only: elsewhere it adds time, not information.
                        continue
                    clients = chosen(MAIN_CLIENTS)
                    if not args.clients and rtt and corpus != "realistic":
                        # The one-at-a-time clients are bound by the RTT
                        # whatever the corpus: the realistic one shows them.
                        clients = tuple(c for c in clients if not CONTENDERS[c].slow)
                    plan.append(Job(Setting("main", store, rtt, None, corpus, "default"),
                                    clients, args.messages))  # fmt: skip
    if "servers" in args.parts:
        store = "tmpfs" if "tmpfs" in (args.store or ["tmpfs"]) else args.store[0]
        corpus = "realistic" if "realistic" in args.corpus else args.corpus[0]
        rtts = sorted({0.0, max(args.rtt)} & set(args.rtt))
        for variant in ("no-multiappend", "literal-minus"):
            for rtt in rtts:
                clients = tuple(
                    c for c in chosen(SERVER_CLIENTS) if CONTENDERS[c].applies(VARIANTS[variant])
                )
                if rtt and variant == "literal-minus":
                    count = min(args.messages, args.cap_servers)
                else:
                    count = args.messages
                plan.append(Job(Setting("servers", store, rtt, None, corpus, variant), clients,
                                count))  # fmt: skip
    if "nagle" in args.parts:
        clients = chosen(NAGLE_CLIENTS)
        count = min(args.messages, args.nagle_messages)
        for nagle in (True, False):
            plan.append(Job(Setting("nagle", "tmpfs", 0.0, None, "small", "sync-only",
                                    nagle=nagle), clients, count))  # fmt: skip
        # LITERAL- (Gmail's): a message above 4096 octets waits for the
        # replies to the small ones before it; the realistic corpus mixes
        # both sizes.
        minusClients = tuple(c for c in clients if c in NAGLE_MINUS_CLIENTS)
        for nagle in (True, False):
            plan.append(Job(Setting("nagle", "tmpfs", 0.0, None, "realistic", "literal-minus",
                                    nagle=nagle), minusClients, count))  # fmt: skip
    if "s2s" in args.parts:
        corpus = "realistic" if "realistic" in args.corpus else args.corpus[0]
        clients = tuple(c for c in S2S_CLIENTS if not args.clients or c in args.clients)
        if clients:
            plan.append(Job(Setting("s2s", "tmpfs", 0.0, None, corpus, "default"), clients,
                            args.messages))  # fmt: skip
    if "tls" in args.parts:
        from bench.tlsrows import TLS_CLIENTS

        corpus = "realistic" if "realistic" in args.corpus else args.corpus[0]
        clients = tuple(c for c in TLS_CLIENTS if not args.clients or c in args.clients)
        for mode in args.tls if clients else ():
            plan.append(Job(Setting("tls", "tmpfs", 0.0, None, corpus, "default", tls=mode),
                            clients, args.messages))  # fmt: skip
    if "compress" in args.parts:
        clients = tuple(
            c for c in COMPRESS_CLIENTS if not args.clients or c in args.clients
        )
        if clients:
            plan.append(
                Job(Setting("compress", "tmpfs", _COMPRESS_RTT_MS, _COMPRESS_RATE, "realistic",
                            "default", serverCompress=True),
                    clients, min(args.messages, args.compress_messages))
            )  # fmt: skip
    return plan


def compressAccepted(bench: Bench) -> bool:
    """
    Whether this imapmig accepts the C{compress} server key.
    """
    directory = tempfile.mkdtemp(prefix="compress-check-", dir=bench.runsDir)
    try:
        invocation = Invocation("127.0.0.1", 143, "probe", emptyCorpus(bench.workDir).path,
                                directory, VARIANTS["default"], bench.rawBinary)  # fmt: skip
        config = imapmigConfig(invocation, compress="on")
        argv = imapmigArgv(config, "--check-config")
        argv.remove("--exit-when-done")
        completed = subprocess.run(argv, capture_output=True, cwd=REPOSITORY, env=_environment())
        return completed.returncode == 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def execute(bench: Bench, plan: list[Job]) -> None:
    """
    Run the plan: one network at a time, one Dovecot per store and server.
    """
    if any(job.setting.part == "compress" for job in plan) and not compressAccepted(bench):
        bench.note(
            "compress part skipped: imapmig does not accept the `compress` server key yet"
        )
        plan = [job for job in plan if job.setting.part != "compress"]
    networks: dict[tuple[float, int | None], list[Job]] = {}
    for job in plan:
        key = (job.setting.rttMs, job.setting.rateBitsPerSecond)
        networks.setdefault(key, []).append(job)
    for (rtt, rate), jobs in networks.items():
        with bench.network(rtt, rate) as network:
            if network is None:
                continue
            sideBySide: dict[str, list[Job]] = {}
            for job in jobs:
                if job.setting.part == "nagle":
                    sideBySide.setdefault(job.setting.server, []).append(job)
            for nagle in sideBySide.values():
                with bench.parts.timed("nagle"):
                    bench.runSideBySide(network, nagle)
            servers: dict[tuple[str, str, bool], list[Job]] = {}
            for job in jobs:
                s = job.setting
                if s.part in ("nagle", "s2s", "tls"):
                    continue
                servers.setdefault((s.store, s.server, s.serverCompress), []).append(job)
            for job in jobs:
                if job.setting.part == "s2s":
                    from bench.s2s import runServerToServer

                    with bench.parts.timed("s2s"):
                        runServerToServer(bench, job)
            tlsJobs = [job for job in jobs if job.setting.part == "tls"]
            if tlsJobs:
                from bench.tlsrows import runTLS

                with bench.parts.timed("tls"):
                    runTLS(bench, tlsJobs)
            for (store, server, compress), serverJobs in servers.items():
                # main, servers and compress never share a Dovecot: each
                # has its server variant or COMPRESS.
                with bench.parts.timed(serverJobs[0].setting.part):
                    bench.runSetting(network, store, server, compress, serverJobs)


def _firstLine(argv: list[str]) -> str:
    try:
        completed = subprocess.run(argv, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e.__class__.__name__})"
    text = (completed.stdout or completed.stderr).decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else "unknown"


def toolVersions() -> dict[str, str]:
    """
    The versions of everything the figures depend on.
    """
    import twisted

    commit = _firstLine(["git", "-C", REPOSITORY, "rev-parse", "--short=12", "HEAD"])
    dirty = _firstLine(["git", "-C", REPOSITORY, "status", "--porcelain", "--", "imapmig"])
    if dirty and dirty != "unknown":
        commit += " (with uncommitted changes in imapmig/)"
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "imapmig": commit,
        "Python": platform.python_version(),
        "Twisted": twisted.__version__,
        "Dovecot": _firstLine([shutil.which("dovecot") or "/usr/sbin/dovecot", "--version"]),
        "mbsync": _firstLine(["mbsync", "--version"]),
        "gcc": _firstLine(["gcc", "--version"]),
        "iproute2": _firstLine(["ip", "-V"]),
        "kernel": f"{platform.system()} {platform.release()} {platform.machine()}",
        "CPU": f"{cpu}, {os.cpu_count()} logical CPUs",
    }


def _targets(rows: Sequence[Figure]) -> list[str]:
    """
    The issue's targets, each checked against the figures present.
    """
    lines = []

    def find(client: str, **where: Any) -> list[Figure]:
        return [
            f for f in rows
            if f.client == client and f.runs
            and all(getattr(f.setting, k) == v for k, v in where.items())
        ]  # fmt: skip

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    for store in ("disk", "tmpfs"):
        for f in find("imapmig", part="main", rttMs=0, corpus="realistic", store=store):
            if f.ceilingRatio is not None:
                lines.append(
                    f"- Loopback, realistic, {store}: imapmig (defaults) at "
                    f"{f.ceilingRatio:.2f}× the raw ceiling (target ≥ 0.9): "
                    f"{verdict(f.ceilingRatio >= 0.9)}"
                )
    for f in find("imapmig", part="main", rttMs=0):
        for raw in find("raw-multi50-2", part="main", rttMs=0, corpus=f.setting.corpus,
                        store=f.setting.store):  # fmt: skip
            factor = f.messagesPerSecond / raw.messagesPerSecond
            lines.append(
                f"- Loopback, {f.setting.corpus}, {f.setting.store}: imapmig with 2 "
                f"connections at {factor:.2f}× the raw MULTIAPPEND 50 writer with 2 "
                f"connections, same run (issue 17, target ≥ 0.9): {verdict(factor >= 0.9)}"
            )
    for f in find("imapmig", part="main", corpus="realistic"):
        if f.setting.rttMs > 0 and f.ceilingRatio is not None:
            lines.append(
                f"- {f.setting.link()}, realistic, {f.setting.store}: imapmig at "
                f"{f.ceilingRatio:.2f}× the raw ceiling (target ≥ 0.8): "
                f"{verdict(f.ceilingRatio >= 0.8)}"
            )
            nodelay = find("imaplib-nodelay", part="main", corpus="realistic",
                           rttMs=f.setting.rttMs, store=f.setting.store)  # fmt: skip
            if nodelay and f.setting.rttMs >= 20:
                factor = f.messagesPerSecond / nodelay[0].messagesPerSecond
                lines.append(
                    f"- {f.setting.link()}: imapmig at {factor:.0f}× the imaplib loop with "
                    f"TCP_NODELAY (target ≥ 20): {verdict(factor >= 20)}"
                )
    for f in find("imapmig", part="main", corpus="small"):
        if f.ceilingRatio is not None:
            lines.append(
                f"- Small corpus, {f.setting.link()}, {f.setting.store}: imapmig at "
                f"{f.ceilingRatio:.2f}× the raw ceiling (target ≥ 0.8): "
                f"{verdict(f.ceilingRatio >= 0.8)}"
            )
    for variant, what in (
        ("sync-only", "synchronizing literals only"),
        ("literal-minus", "LITERAL- only"),
    ):
        for name in ("imapmig-1", "imapmig"):
            stalled = find(name, part="nagle", nagle=True, server=variant)
            direct = find(name, part="nagle", nagle=False, server=variant)
            loop = find("imaplib-nodelay", part="nagle", nagle=True, server=variant)
            if stalled and direct:
                factor = stalled[0].messagesPerSecond / direct[0].messagesPerSecond
                lines.append(
                    f"- Server leaving Nagle on, {what}: "
                    f"{CONTENDERS[name].label} at {factor:.2f}× its rate without the stall "
                    f"(target ≥ 0.5): {verdict(factor >= 0.5)}"
                )
            if stalled and loop:
                factor = stalled[0].messagesPerSecond / loop[0].messagesPerSecond
                lines.append(
                    f"- Server leaving Nagle on, {what}: {CONTENDERS[name].label} at "
                    f"{factor:.2f}× the imaplib loop with TCP_NODELAY (target > 1): "
                    f"{verdict(factor > 1)}"
                )
    for f in find("imapmig-s2s", part="s2s"):
        for peer in find("dsync", part="s2s", corpus=f.setting.corpus):
            factor = f.messagesPerSecond / peer.messagesPerSecond
            lines.append(
                f"- Server to server: imapmig at {factor:.2f}× `doveadm backup -R imapc:` "
                f"(target ≥ 1): {verdict(factor >= 1)}"
            )
    for variant in ("no-multiappend", "literal-minus"):
        best: dict[float, Figure] = {}
        for name in ("imapmig", "imapmig-1", "imapmig-4"):
            for f in find(name, part="servers", server=variant):
                if f.setting.rttMs not in best or (
                    f.messagesPerSecond > best[f.setting.rttMs].messagesPerSecond
                ):
                    best[f.setting.rttMs] = f
        for rtt, f in sorted(best.items()):
            if f.ceilingRatio is not None:
                lines.append(
                    f"- Server {variant}, {f.setting.link()}: best imapmig "
                    f"({CONTENDERS[f.client].label}) at {f.ceilingRatio:.2f}× the best raw "
                    f"writer (target ≥ 0.9): {verdict(f.ceilingRatio >= 0.9)}"
                )
    return lines


def _partsSection(bench: Bench) -> list[str]:
    """
    The section of results.md that says what each part took and the load
    average at its start and end (none when no part was timed).
    """
    if not bench.parts.records:
        return []
    return [
        "## The parts: time taken and the load average around each",
        "",
        "The load average (1, 5 and 15 minutes, 2 cores) when each part started and "
        "ended: a wall-clock figure taken on a busy machine says so here.",
        "",
        partsTable(bench.parts.records),
        "",
    ]


def writeResults(bench: Bench, command: str, elapsed: float) -> str:
    """
    Write results.md and chart.png; return the Markdown.  A run with no
    figure of its own (no part but the fleet's) writes neither.
    """
    rows = figures(bench.results)
    order = list(CONTENDERS)
    main = [f for f in rows if f.setting.part == "main"]
    main.sort(key=lambda f: (f.setting.store, f.setting.corpus, f.setting.rttMs,
                             order.index(f.client)))  # fmt: skip
    servers = [f for f in rows if f.setting.part == "servers"]
    servers.sort(key=lambda f: (f.setting.server, f.setting.rttMs, order.index(f.client)))
    compress = [f for f in rows if f.setting.part == "compress"]
    nagle = [f for f in rows if f.setting.part == "nagle"]
    nagle.sort(key=lambda f: (f.setting.server, not f.setting.nagle, order.index(f.client)))
    serverToServer = [f for f in rows if f.setting.part == "s2s"]
    serverToServer.sort(key=lambda f: order.index(f.client))
    chartPath = os.path.join(bench.resultsDir, "chart.png")
    charted = drawChart(main, chartPath, order)
    versions = toolVersions()
    parts = [
        "# imapmig benchmark results",
        "",
        f"Written by `{command}` on {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"in {elapsed / 60:.1f} minutes; {bench.args.runs} run(s) per figure.",
        "",
        "Each client runs as a whole process (reading the Maildir included) into a fresh "
        "Dovecot account, the message count checked afterwards (STATUS MESSAGES). "
        "Times are net of each client's start-up (the median of its runs on an empty "
        "Maildir, shown in the last column); each figure is the median of the runs, peak "
        "RSS (`ru_maxrss`) the largest. **× raw ceiling** divides by the fastest raw-writer "
        "variant of the same setting (store, RTT, corpus, server). The raw writer "
        "(`bench/rawappend.c`) appends everything into INBOX; imapmig, mbsync and the "
        "Python loops recreate the folders, which costs a little. MB are 10^6 octets as "
        "sent (CRLF line endings). At an RTT above zero the one-command-at-a-time clients "
        f"(imaplib, Twisted) run the first {bench.args.cap_slow} messages only; their rate "
        "is reported. The raw writer uses one connection: where Dovecot's per-command cost "
        "is fsync latency (the disk store), clients with several connections overlap those "
        "waits and can exceed it.",
        "",
        "## Versions",
        "",
        "| tool | version |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in versions.items()],
        "",
    ]
    if any(f.setting.rttMs or f.setting.rateBitsPerSecond for f in rows):
        parts += [
            "Round-trip times above zero come from `bench/netns.py`: the server and the "
            "clients in two network namespaces joined by a user-space delay line on TUN "
            "devices (TCP stays end to end), MTU "
            f"{_LINK_MTU} on unlimited links and 1500 on the rate-limited one.",
            "",
        ]
    if main:
        parts += ["## Dovecot defaults (LITERAL+, MULTIAPPEND)", ""]
        if charted:
            parts += ["![messages/s by client and RTT](chart.png)", ""]
        parts += [markdownTable(main)]
    if servers:
        parts += [
            "## Servers without MULTIAPPEND, or with LITERAL- only",
            "",
            "`no-multiappend`: Dovecot with MULTIAPPEND hidden (`imap_capability`). "
            "`literal-minus`: LITERAL+ and MULTIAPPEND hidden, LITERAL- advertised, like "
            "Gmail: the raw writer sends synchronizing literals above 4096 octets.",
            "",
            markdownTable(servers, showServer=True),
        ]
    if compress:
        parts += [
            "## A 20 Mbit/s link at 20 ms: COMPRESS=DEFLATE",
            "",
            "Dovecot offers COMPRESS=DEFLATE (imap_zlib); the raw writer does not compress.",
            "",
            markdownTable(compress),
        ]
    if nagle:
        parts += [
            "## A server that leaves Nagle on, synchronizing literals only or LITERAL-",
            "",
            "`sync-only`: Dovecot with LITERAL+, LITERAL- and MULTIAPPEND hidden; "
            "`literal-minus`: LITERAL- only, no MULTIAPPEND (like Gmail), with the realistic "
            "corpus, whose messages above 4096 octets go as synchronizing literals. "
            "`loopback, server Nagle on`: that Dovecot with `bench/naglekeep.c` preloaded "
            "(LD_PRELOAD, passed to its children by `import_environment`), whose "
            "`setsockopt` ignores `TCP_NODELAY` and `TCP_CORK`, so the server leaves "
            "Nagle's algorithm on, as Courier-IMAP does; `loopback`: an identical Dovecot "
            "without it. Both run at once and every client runs on each in turn. "
            "The raw writer `raw 1/APPEND` "
            "puts the next command behind each literal (it stalls on the delayed ACK); "
            "`raw ... waits` starts a command with a synchronizing literal only once "
            "every earlier one is answered.",
            "",
            markdownTable(nagle, showServer=True),
        ]
    scale = scaleFigures(bench.scaleRuns)
    if scale:
        parts += [
            "## Speed at scale",
            "",
            "`bench/scale.py`, loopback, Dovecot on tmpfs, the small corpus. The many accounts "
            "and the one account hold the same messages (the corpus dealt into equal "
            "Maildirs, each keeping its folders); imapmig migrates the accounts in one daemon, "
            "one job per row of a CSV user list (`jobs_from`), mbsync syncs a `Group` of one "
            "channel per account. Seconds are the whole process, the median of the runs; "
            "messages/s are net of the client's start-up (its median run on an empty "
            "Maildir). Queued jobs: a user list of that many jobs, each the same small "
            "Maildir into its own account; *first message* is the time from the start of the "
            "process until the state database records a message stored, then the daemon is "
            "stopped (SIGTERM); peak RSS is `ru_maxrss`. Start-up: `bench/startup.py` "
            "(median of its runs, bytecode cached as an installed daemon has it), for each "
            "launcher: `twistd -n imapmig` and `python -m imapmig.daemon` (the systemd "
            "unit's).",
            "",
            scaleTable(scale),
        ]
    if serverToServer:
        parts += [
            "## Server to server",
            "",
            "An account of the corpus in one private Dovecot (tmpfs) copied into a fresh "
            "account of another, on loopback; the clients run interleaved. `doveadm backup "
            "-R imapc:` reads the source over IMAP (imapc) but writes the destination's "
            "store directly; imapmig and the raw client speak only IMAP on both sides. "
            "× raw ceiling: over the raw fetch-then-MULTIAPPEND client.",
            "",
            markdownTable(serverToServer),
        ]
    if any(f.setting.part == "tls" for f in rows):
        from bench.tlsrows import tlsTable

        parts += [
            "## TLS (issue 31)",
            "",
            "The same rows over plain TCP, implicit TLS (Dovecot's imaps port) and STARTTLS, "
            "interleaved in one run (loopback, tmpfs; the certificates of the private "
            "Dovecots' test CA verified by every client). Messages per second net of "
            "start-up; then each ratio per mode.",
            "",
            tlsTable(rows),
        ]
    spread = spreadTable(bench.results)
    if spread:
        parts += [
            "## How far the runs lie apart",
            "",
            f"Each repetition runs a client once on the corpus, then {bench.args.empty_runs} "
            "time(s) on an empty Maildir; every full run is taken net of the median of all "
            "of the client's empty runs in the setting, and the figure above is the median "
            "of those net rates.",
            "",
            spread,
        ]
    targets = _targets(rows)
    if targets:
        parts += ["## The targets of issues 3, 16 and 17", "", *targets, ""]
    if scale:
        parts += ["## The targets of issue 17 (speed at scale)", "", *scaleTargets(scale), ""]
    parts += _partsSection(bench)
    if bench.notes:
        parts += ["## Notes", "", *[f"- {n}" for n in bench.notes], ""]
    text = "\n".join(parts)
    if rows or scale:
        # A run with no table of its own (the fleet part alone: fleet.md)
        # leaves the last results.md as it was.
        with open(os.path.join(bench.resultsDir, "results.md"), "w") as f:
            f.write(text)
    return text


def memoryCheck(bench: Bench) -> int:
    """
    Migrate the 50,000-message Maildir with a 30 MB message with imapmig's
    defaults and report its peak RSS.
    """
    print(f"== Memory check: building the {bench.args.memory_messages}-message Maildir",
          flush=True)  # fmt: skip
    corpus = memoryCorpus(bench.workDir, bench.args.memory_messages)
    setting = Setting("memory", "tmpfs", 0, None, "memory", "default")
    base = tempfile.mkdtemp(prefix="dovecot-memory-", dir=bench.workDir)
    mailRoot = tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm")
    server = BenchServer(base, accounts=4, fsync=False, mailRoot=mailRoot, capabilities=None,
                         compress=False, namespace=None, address="127.0.0.1",
                         inNamespace=None)  # fmt: skip
    server.start()
    try:
        print(f"== Migrating {corpus.messages} messages ({corpus.octets / 1e6:,.0f} MB) "
              "with imapmig's defaults", flush=True)  # fmt: skip
        result = bench.runOnce(LOOPBACK, server, setting, CONTENDERS["imapmig"], "full",
                               corpus, 0)  # fmt: skip
        bench.record(result)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    peak = result.maxRssKiB * 1024 / 1e6
    verdict = "met" if result.ok and peak < _MEMORY_TARGET_MB else "**missed**"
    text = "\n".join(
        [
            "# imapmig memory check",
            "",
            f"Written by `python -m bench.run --memory` on {datetime.datetime.now():%Y-%m-%d %H:%M}.",
            "",
            f"- Maildir: {corpus.messages:,} messages, {corpus.octets / 1e6:,.0f} MB, one of "
            "them about 30 MB (a base64 attachment); Dovecot on tmpfs, loopback.",
            f"- imapmig with its defaults: {'OK' if result.ok else 'FAILED: ' + result.problem}, "
            f"{result.seconds:.1f} s, {result.messages / result.seconds:,.0f} messages/s gross.",
            f"- Peak RSS of the daemon (`ru_maxrss`): **{peak:.0f} MB** "
            f"({result.maxRssKiB / 1024:.0f} MiB; target < {_MEMORY_TARGET_MB} MB): {verdict}.",
            f"- CPU: {result.userSeconds:.1f} s user, {result.systemSeconds:.1f} s system.",
            "",
            "| tool | version |",
            "|---|---|",
            *[f"| {k} | {v} |" for k, v in toolVersions().items()],
            "",
        ]
    )
    with open(os.path.join(bench.resultsDir, "memory.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if result.ok and peak < _MEMORY_TARGET_MB else 1


def shortCommit() -> str:
    """
    This checkout's commit, abbreviated, marked when imapmig/ or bench/
    holds uncommitted changes.
    """
    def git(*argv: str) -> str | None:
        try:
            completed = subprocess.run(["git", "-C", REPOSITORY, *argv], capture_output=True,
                                       text=True, timeout=30)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        return completed.stdout.strip() if completed.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        # A tree from git archive, say.
        return "unknown (not a git checkout)"
    return commit + ("+" if git("status", "--porcelain", "--", "imapmig", "bench") else "")


def appendParts(bench: Bench, name: str) -> None:
    """
    Add the run's time and the load average at its start and end to the
    file C{name} a check (C{--memory}, C{--delta}, C{--bigaccount}) wrote.
    """
    path = os.path.join(bench.resultsDir, name)
    table = partsTable(bench.parts.records)
    with open(path, "a") as f:
        f.write(f"\nThe run's time, and the load average (1, 5, 15 minutes; 2 cores) at its "
                f"start and end:\n\n{table}\n")  # fmt: skip
    print(table, flush=True)


def writeSummaryOf(bench: Bench, command: str, commit: str, big: Sequence[Any] = ()) -> None:
    """
    Merge this run's lines of issue 31's acceptance into C{summary.md}
    (L{bench.summary}).

    @param commit: L{shortCommit} when the run started.
    @param big: the big-account rows (L{bench.bigaccount.BigRow}), if any.
    """
    context = RunContext(commit, command, bench.parts.records)
    lines = [*figureLines(figures(bench.results), context),
             *scaleLines(scaleFigures(bench.scaleRuns), context),
             *bigLines(big, context)]  # fmt: skip
    writeSummary(bench.resultsDir, lines)
    print(f"== Written: {os.path.join(bench.resultsDir, 'summary.md')} "
          f"({len(lines)} line(s) of issue 31's acceptance from this run)", flush=True)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the benchmark; return the exit status (1 when a run failed).

    @param argv: the command-line arguments (C{sys.argv[1:]} by default).
    """
    args = parseArguments(argv)
    started = time.monotonic()
    bench = Bench(args)
    bench.prepare()
    command = ("python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    # The code that runs: a commit made during the run is not it.
    commit = shortCommit()
    if args.memory:
        with bench.parts.timed("memory"):
            status = memoryCheck(bench)
        appendParts(bench, "memory.md")
        return status
    if args.delta:
        from bench.delta import deltaCheck

        with bench.parts.timed("delta"):
            status = deltaCheck(bench.workDir, bench.resultsDir, args.delta_messages,
                                toolVersions())  # fmt: skip
        appendParts(bench, "delta.md")
        return status
    if args.bigaccount:
        from bench.bigaccount import BigRow, bigAccountCheck

        rows: list[BigRow] = []
        with bench.parts.timed("bigaccount"):
            status = bigAccountCheck(bench.workDir, bench.resultsDir,
                                     [int(n) for n in args.bigaccount_sizes],
                                     args.bigaccount_layouts, commit,
                                     rowsOut=rows)  # fmt: skip
        appendParts(bench, "bigaccount.md")
        writeSummaryOf(bench, command, commit, rows)
        return status
    plan = makePlan(args)
    print(f"== Plan: {len(plan)} settings, {args.runs} run(s) each", flush=True)
    for job in plan:
        # Build the corpora before any timing.
        bench.corpus(job.setting.corpus, job.messages)
        if any(CONTENDERS[c].slow for c in job.clients) and job.setting.rttMs > 0:
            bench.corpus(job.setting.corpus, min(job.messages, args.cap_slow))
    sizes = scaleSizes(args)
    bench.warmUp(warmUpClients(plan, sizes is not None))
    execute(bench, plan)
    if sizes is not None:
        with bench.parts.timed("scale"):
            runScale(bench, sizes)
    fleet = fleetSizes(args)
    fleetOk = True
    if fleet is not None:
        # Imported here: it needs psycopg (imapmig[postgresql]).
        from bench.fleet_run import runFleet

        with bench.parts.timed("fleet"):
            fleetOk = runFleet(bench, fleet, command)
        bench.note("fleet part: its figures and targets are in fleet.md")
    text = writeResults(bench, command, time.monotonic() - started)
    print()
    print(text)
    if bench.results or bench.scaleRuns:
        print(f"== Written: {os.path.join(bench.resultsDir, 'results.md')}, chart.png, raw/")
    else:
        print("== results.md left as it was: this run has no table of its own")
    writeSummaryOf(bench, command, commit)
    ok = all(r.ok for r in bench.results) and all(r.ok for r in bench.scaleRuns) and fleetOk
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
