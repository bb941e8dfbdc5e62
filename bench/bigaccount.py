# -*- test-case-name: tests.test_bench_bigaccount -*-
"""
The big-account rows of issue 31, point 4: whether imapmig's own cost
stays flat from 5,000 to 500,000 messages in one account.

    .venv/bin/python -m bench.run --bigaccount \\
        [--bigaccount-sizes 5000,500000] \\
        [--bigaccount-layouts spread,one,spread-imap,one-imap]

For each layout (C{spread}: the messages over twenty folders whose sizes
fall as a power law of their rank, L{bench.corpora.powerLawSizes}; C{one}:
every message in INBOX; with C{-imap}, the same messages read from an
IMAP account of the same Dovecot, loaded from the Maildir, rather than
from the Maildir itself) and each size, on a private Dovecot whose mail
store is on tmpfs (loopback):

  imapmig  C{twistd -n imapmig --exit-when-done}, the source into a fresh
           account; its own CPU (user + system, from C{wait4}), peak RSS
           (C{ru_maxrss}) and wall-clock time
  delta    the same command again over the unchanged account (the state
           database kept): its wall-clock time, CPU and peak RSS
  raw      from a Maildir: C{bench/rawappend.c} (SELECT, then MULTIAPPEND
           batches of 50, LITERAL+: the benchmark's C{raw-multi} ceiling)
           into another fresh account, each folder into its own mailbox
           (one process a folder, in turn): the server's own pace on the
           same account.  From IMAP: Dovecot's own C{doveadm backup -R
           imapc:} (as C{bench/s2s.py}'s C{dsync} row), reading the source
           account over IMAP and writing the account's store directly
  empty    imapmig on an empty source into a third account, the least
           CPU of C{EMPTY_RUNS} runs: its start-up, taken from the first
           pass's CPU to give its CPU per message (up to
           C{REPEATED_UP_TO} messages, the least CPU of C{FIRST_RUNS}
           first passes, each into a fresh account: the same estimate on
           both sides of the difference)
  listing  in this process, the CPU time of listing every folder of the
           Maildir as the job does (C{MaildirSource.listMessages}) and of
           the census's count of it (C{countListedSource}), so that the
           listing's cost per message can be compared across sizes

An IMAP source is read once before the first pass (C{doveadm mailbox
status} of every folder's messages and virtual size, C{doveadm fetch
size.physical}), so that no run pays for building the source's indexes,
and each folder opened once read-write, as a used mailbox would have been
(L{warmSource}: else Dovecot rescans a big folder every 5 s of the run); a Maildir's files are read once
(L{warmMaildir}), so that no run reads them from the disk (the raw
client, which runs after imapmig, always found them in the page cache).

The targets (checked against the smallest size of the same layout):
imapmig's CPU per message within 10% of it, peak RSS under 500 MB, the
delta pass under 5 s.  Written to C{bench/results/bigaccount.md}.  No
other benchmark module measures one account this large; C{bench/delta.py}
times the delta pass server to server at 100,000.
"""

from __future__ import annotations

import datetime
import imaplib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

from attrs import frozen

from bench.clients.maildir import folders as maildirFolders
from bench.contenders import REPOSITORY, buildTools, imapmigArgv
from bench.corpora import BuiltCorpus, bigAccountCorpus, emptyCorpus
from bench.delta import singleJobConfig
from bench.scale import countAccount
from bench.servers import PASSWORD, BenchServer

TOOLS_DIR = os.path.join(REPOSITORY, "bench", "work")

CPU_RATIO_TARGET = 1.10
RSS_TARGET_MB = 500
DELTA_TARGET_S = 5.0
EMPTY_RUNS = 5
# The first pass of an account of at most REPEATED_UP_TO messages is run
# this many times (each into a fresh account, from a fresh state): its CPU
# net of start-up is a difference of two numbers of the same size, each
# moving by 0.1 s between runs under load (26 to 51 us a message at 5,000).
FIRST_RUNS = 5
REPEATED_UP_TO = 50_000
# The vsz_limit of the bench Dovecot's imap processes.
IMAP_MEMORY = "2G"


@frozen
class Measured:
    """
    What one process cost, from C{wait4}.

    @ivar seconds: its wall-clock time.
    @ivar cpuSeconds: its user and system CPU time.
    @ivar maxRssMiB: its peak resident set size.
    @ivar status: its exit status.
    """

    seconds: float
    cpuSeconds: float
    maxRssMiB: float
    status: int


@frozen
class BigRow:
    """
    One layout at one size: imapmig's first pass, its delta pass and the
    raw client's run.
    """

    layout: str
    messages: int
    imapmig: Measured
    delta: Measured
    raw: Measured
    stored: int
    loadAverage: str
    empty: Measured
    listingCpu: float = float("nan")
    censusCpu: float = float("nan")

    @property
    def cpuPerMessageUs(self) -> float:
        """
        imapmig's own CPU per message, net of its start-up (the empty run).
        """
        return (self.imapmig.cpuSeconds - self.empty.cpuSeconds) / self.messages * 1e6


def measure(argv: list[str], logPath: str) -> Measured:
    """
    Run C{argv} (from this checkout) under the timer (C{bench/timed.c}: fork,
    exec, C{wait4}) and read its cost.  Forked from this process, a client's
    C{ru_maxrss} would start at this process's own peak (Linux keeps it
    across C{execve}): the 500,000-message IMAP source's bench process
    reported 497 MB for an imapmig that /proc saw at 281 MB.
    """
    _, timer = buildTools(TOOLS_DIR)
    report = os.path.abspath(logPath) + ".timed.json"
    with open(logPath, "ab") as log:
        subprocess.run([timer, report, *argv], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                       cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=REPOSITORY), check=True)  # fmt: skip
    with open(report) as f:
        measured = json.load(f)
    os.unlink(report)
    return Measured(seconds=float(measured["seconds"]),
                    cpuSeconds=float(measured["user"]) + float(measured["system"]),
                    maxRssMiB=int(measured["maxrss_kib"]) / 1024,
                    status=int(measured["status"]))  # fmt: skip


def imapmigConfig(runDir: str, port: int, maildir: str, account: str) -> str:
    """
    An imapmig configuration: C{maildir} into C{account} over plain TCP,
    the state database in C{runDir}, no status listener.
    """
    return singleJobConfig(runDir, port, "big", f"{{{{maildir: {maildir}}}}}", account)


def imapSourceConfig(runDir: str, port: int, source: str, account: str) -> str:
    """
    An imapmig configuration: the IMAP account C{source} of the bench
    server into its account C{account}, over plain TCP.
    """
    return singleJobConfig(runDir, port, "big", "{{server: bench, user: %s, password_file:"
                           " {password}}}" % source, account)  # fmt: skip


def runDsync(server: BenchServer, source: str, account: str, log: str) -> Measured:
    """
    Dovecot's own migration, C{doveadm backup -R -u C{account} imapc:},
    reading C{source} over IMAP (as L{bench.contenders}' C{dsync}).
    """
    settings = {"imapc_host": "127.0.0.1", "imapc_port": str(server.port), "imapc_user": source,
                "imapc_password": PASSWORD, "imapc_ssl": "no", "imapc_features": "rfc822.size",
                "mail_prefetch_count": "20"}  # fmt: skip
    overrides = [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]
    doveadm = shutil.which("doveadm") or "/usr/bin/doveadm"
    return measure([doveadm, "-c", server.configPath, *overrides, "backup", "-R", "-u", account,
                    "imapc:"], log)  # fmt: skip


def warmSource(server: BenchServer, source: str, maildir: str) -> None:
    """
    Have Dovecot index every folder of C{source} (messages and virtual
    sizes, and physical sizes: C{doveadm fetch size.physical}), as a first
    reader would, then open each folder of C{maildir}
    (the Maildir C{source} was loaded from) once read-write
    (C{SELECT}), as its owner's mail client would have: Dovecot then moves
    the corpus's unseen files from C{new/} to C{cur/}.

    Left in C{new/}, they make every read-only session (C{EXAMINE}, as
    imapmig's) that fetches C{BINARY} (its NUL check) scan C{new/} and
    C{cur/} whole at its next full sync, once every 5 s while it issues
    commands: O(folder) a scan, quadratic over a run of one big folder
    (bench/results/bigaccount.md, round 5).
    """
    doveadm = shutil.which("doveadm") or "/usr/bin/doveadm"
    subprocess.run([doveadm, "-c", server.configPath, "mailbox", "status", "-u", source,
                    "messages vsize", "*"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    # The files' physical sizes into dovecot-uidlist, as Dovecot's own
    # delivery puts them in the file names (",S="): else each BINARY fetch
    # records them, and Dovecot rewrites the whole uidlist (27 MB at
    # 500,000) and rescans cur/ at the next full sync.
    subprocess.run([doveadm, "-c", server.configPath, "fetch", "-u", source, "size.physical",
                    "all"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    client = imaplib.IMAP4("127.0.0.1", server.port)
    try:
        client.login(source, PASSWORD)
        for name, _ in maildirFolders(maildir):
            status, _ = client.select(f'"{name}"')
            if status != "OK":
                raise RuntimeError(f"SELECT {name!r} of {source}: {status}")
    finally:
        client.logout()


def listingCosts(maildir: str) -> tuple[float, float]:
    """
    The CPU seconds of listing every folder of C{maildir} as a job does,
    and of the census's count of it, measured in a child process (the
    listing of 500,000 messages takes hundreds of MB, and a process
    forked from this one would report them as its own peak RSS: Linux
    keeps C{ru_maxrss} across C{execve}).
    """
    found = subprocess.run([sys.executable, "-m", "bench.bigaccount", "--listing-costs",
                            os.path.abspath(maildir)],
                           check=True, capture_output=True, cwd=REPOSITORY,
                           env=dict(os.environ, PYTHONPATH=REPOSITORY))  # fmt: skip
    listing, census = found.stdout.split()
    return float(listing), float(census)


def _listingCostsHere(maildir: str) -> tuple[float, float]:
    """
    L{listingCosts}, in this process.
    """
    from imapmig.mail.folders import FolderRules
    from imapmig.mail.message import SourceFolder
    from imapmig.sources.counting import countListedSource
    from imapmig.sources.maildir import MaildirSource

    source = MaildirSource(maildir)
    started = time.process_time()
    folders: list[SourceFolder] = []
    source.listFolders().addCallback(folders.extend)
    for folder in folders:
        source.listMessages(folder)
    listing = time.process_time() - started
    started = time.process_time()
    countListedSource(MaildirSource(maildir), FolderRules(), lambda: False)
    return listing, time.process_time() - started


def warmMaildir(maildir: str) -> int:
    """
    Read every file under C{maildir} once, so that the page cache holds
    them when the first pass runs, as it does for the raw client after it
    (a corpus of 500,000 files, 2 GB, read from the disk cost imapmig's
    first pass the kernel's time of reading it, its system CPU a message
    rising with it; at 5,000 the corpus is always cached).

    @return: the octets read.
    """
    octets = 0
    for directory, _, names in os.walk(maildir):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    octets += len(chunk)
    return octets


def runRaw(rawBinary: str, port: int, account: str, corpus: BuiltCorpus, runDir: str) -> Measured:
    """
    The raw client over C{corpus}, each folder into its own mailbox (the
    mailbox created first), one process a folder in turn; their wall
    times and CPU summed, the largest RSS kept.  rawappend reads a root's
    subfolders too: INBOX is handed to it as a tree of hard links to the
    root's C{cur} and C{new} alone.
    """
    inbox = os.path.join(runDir, "inbox")
    os.makedirs(inbox)
    for sub in ("cur", "new"):
        subprocess.run(["cp", "-al", os.path.join(corpus.path, sub), inbox], check=True)
    client = imaplib.IMAP4("127.0.0.1", port)
    client.login(account, PASSWORD)
    pairs = maildirFolders(corpus.path)
    for name, _ in pairs[1:]:
        client.create(f'"{name}"')
    client.logout()
    total = Measured(0.0, 0.0, 0.0, 0)
    for name, directory in pairs:
        argv = [rawBinary, "--host", "127.0.0.1", "--port", str(port), "--user", account,
                "--password", PASSWORD, "--maildir", inbox if name == "INBOX" else directory,
                "--literal", "plus", "--batch", "50", "--select", "--mailbox", name]  # fmt: skip
        one = measure(argv, os.path.join(runDir, "raw.json"))
        total = Measured(total.seconds + one.seconds, total.cpuSeconds + one.cpuSeconds,
                         max(total.maxRssMiB, one.maxRssMiB), total.status or one.status)  # fmt: skip
    return total


def loadAverage() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def runRow(workDir: str, rawBinary: str, layout: str, count: int) -> BigRow:
    """
    Build (or reuse) the corpus and run imapmig, its delta pass and the raw
    client (Dovecot's dsync for an IMAP source) on one fresh Dovecot.

    @param layout: C{spread} or C{one}, read from the Maildir; with
        C{-imap}, from an IMAP account holding it.
    """
    shape, _, via = layout.partition("-")
    corpus = bigAccountCorpus(workDir, count, shape)
    base = tempfile.mkdtemp(prefix="dovecot-big-", dir=workDir)
    mailRoot = tempfile.mkdtemp(prefix="imapmig-big-", dir="/dev/shm")
    runDir = tempfile.mkdtemp(prefix="big-run-", dir=workDir)
    log = os.path.join(runDir, "log")
    # One mailbox of 500,000 read over IMAP takes Dovecot's imap process
    # past its default 256 MB (it died 7 times in 14 minutes).
    server = BenchServer(base, accounts=5 + FIRST_RUNS, fsync=False, mailRoot=mailRoot,
                         capabilities=None, compress=False, namespace=None,
                         address="127.0.0.1", inNamespace=None,
                         imapMemory=IMAP_MEMORY)  # fmt: skip
    listing, census = listingCosts(corpus.path)
    print(f"== big account {layout} {count:,}: listing {listing:.2f} s CPU, census"
          f" {census:.2f} s", flush=True)  # fmt: skip
    server.start()
    try:
        config: Callable[[str, int, str, str], str] = imapmigConfig
        source, emptySource = corpus.path, emptyCorpus(workDir).path
        if via != "imap":
            warmMaildir(corpus.path)
        else:
            config = imapSourceConfig
            source, emptySource = server.freshAccount(), server.freshAccount()
            server.loadMaildir(source, corpus.path)
            server.loadMaildir(emptySource, emptyCorpus(workDir).path)
            warmSource(server, source, corpus.path)
        account = server.freshAccount()
        argv = imapmigArgv(config(runDir, server.port, source, account))
        load = loadAverage()
        print(f"== big account {layout} {count:,}: imapmig (load {load})", flush=True)
        first = measure(argv, log)
        stored = countAccount(server, account)
        print(f"   {first}; stored {stored:,}", flush=True)
        delta = measure(argv, log)
        print(f"   delta {delta}", flush=True)
        server.discard(account)
        rawAccount = server.freshAccount()
        if via == "imap":
            raw = runDsync(server, source, rawAccount, os.path.join(runDir, "dsync.log"))
        else:
            raw = runRaw(rawBinary, server.port, rawAccount, corpus, runDir)
        print(f"   raw {raw}", flush=True)
        server.discard(rawAccount)
        if count <= REPEATED_UP_TO:
            first = leastCpu([first, *repeatFirst(server, runDir, config, source, FIRST_RUNS - 1)])
            print(f"   least of {FIRST_RUNS} first passes {first}", flush=True)
        emptyDir = os.path.join(runDir, "empty")
        os.makedirs(emptyDir)
        emptyArgv = imapmigArgv(config(emptyDir, server.port, emptySource,
                                       server.freshAccount()))  # fmt: skip
        # The least of several: one start-up's CPU moves by 0.1-0.2 s under
        # load, 20-40 us a message at 5,000.
        empty = min((measure(emptyArgv, log) for _ in range(EMPTY_RUNS)),
                    key=lambda m: m.cpuSeconds)  # fmt: skip
        print(f"   empty {empty}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    if first.status or delta.status or stored != corpus.messages:
        with open(log, "rb") as f:
            print(f.read()[-3000:].decode("utf-8", "replace"))
    shutil.rmtree(runDir, ignore_errors=True)
    return BigRow(layout=layout, messages=corpus.messages, imapmig=first, delta=delta, raw=raw,
                  stored=stored, loadAverage=load, empty=empty, listingCpu=listing,
                  censusCpu=census)  # fmt: skip


def leastCpu(runs: list[Measured]) -> Measured:
    """
    The run of C{runs} that took the least CPU, of those that succeeded
    (the first, if none did).
    """
    return min([m for m in runs if not m.status] or runs[:1], key=lambda m: m.cpuSeconds)


def repeatFirst(server: BenchServer, runDir: str, config: Callable[[str, int, str, str], str],
                source: str, times: int) -> list[Measured]:  # fmt: skip
    """
    imapmig's first pass over C{source} again C{times} times, each from a
    fresh state into a fresh account (discarded once counted).
    """
    runs = []
    for index in range(times):
        again = os.path.join(runDir, f"again-{index}")
        os.makedirs(again)
        account = server.freshAccount()
        runs.append(measure(imapmigArgv(config(again, server.port, source, account)),
                            os.path.join(again, "log")))  # fmt: skip
        server.discard(account)
    return runs


def verdicts(rows: list[BigRow]) -> list[str]:
    """
    The targets of point 4 for each row against the smallest row of its
    layout: one line each, C{met} or C{MISSED}.
    """
    lines = []
    for row in rows:
        smallest = min((r for r in rows if r.layout == row.layout), key=lambda r: r.messages)
        reference = smallest.cpuPerMessageUs
        ratio = row.cpuPerMessageUs / reference if reference > 0 else float("nan")
        checks = [
            # A reference at or under 0 (the start-up's CPU moved more than
            # the small run's work) cannot judge anything: nan, MISSED.
            (f"CPU per message {ratio:.2f}x the {smallest.messages:,}-message figure",
             ratio <= CPU_RATIO_TARGET),
            (f"peak RSS {row.imapmig.maxRssMiB:.0f} MB", row.imapmig.maxRssMiB < RSS_TARGET_MB),
            (f"delta pass {row.delta.seconds:.2f} s", row.delta.seconds < DELTA_TARGET_S),
            (f"stored {row.stored:,} of {row.messages:,}", row.stored == row.messages
             and not row.imapmig.status and not row.delta.status),
        ]  # fmt: skip
        said = "; ".join(f"{text}: {'met' if ok else 'MISSED'}" for text, ok in checks)
        lines.append(f"- {row.layout} {row.messages:,}: {said}")
    return lines


def table(rows: list[BigRow]) -> str:
    head = [
        "| layout | messages | imapmig s | msg/s | CPU s | start-up CPU s | CPU us/msg |"
        " peak RSS MB |"
        " raw s | raw msg/s | imapmig/raw | delta s | delta CPU s | delta RSS MB |"
        " listing CPU us/msg | census CPU us/msg | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    body = [
        f"| {r.layout} | {r.messages:,} | {r.imapmig.seconds:.1f} |"
        f" {r.messages / r.imapmig.seconds:,.0f} | {r.imapmig.cpuSeconds:.2f} |"
        f" {r.empty.cpuSeconds:.2f} |"
        f" {r.cpuPerMessageUs:.1f} | {r.imapmig.maxRssMiB:.0f} | {r.raw.seconds:.1f} |"
        f" {r.messages / r.raw.seconds:,.0f} | {r.raw.seconds / r.imapmig.seconds:.2f} |"
        f" {r.delta.seconds:.2f} | {r.delta.cpuSeconds:.2f} | {r.delta.maxRssMiB:.0f} |"
        f" {r.listingCpu / r.messages * 1e6:.2f} | {r.censusCpu / r.messages * 1e6:.2f} |"
        f" {r.loadAverage} |"
        for r in rows
    ]
    return "\n".join(head + body)


def bigAccountCheck(workDir: str, resultsDir: str, sizes: list[int], layouts: list[str],
                    commit: str, rowsOut: list[BigRow] | None = None) -> int:  # fmt: skip
    """
    Run every row and write C{bigaccount.md}.

    @param rowsOut: where to put the rows too (for C{summary.md}).
    @return: 0 when every target was met.
    """
    rawBinary, _ = buildTools(workDir)
    rows = [runRow(workDir, rawBinary, layout, count)
            for layout in layouts for count in sorted(sizes)]  # fmt: skip
    if rowsOut is not None:
        rowsOut.extend(rows)
    lines = verdicts(rows)
    text = "\n".join([
        "# imapmig: one big account (issue 31, point 4)",
        "",
        f"Written by `python -m bench.run --bigaccount` at {commit} on"
        f" {datetime.datetime.now():%Y-%m-%d %H:%M}: Maildir (on disk; with -imap, an IMAP"
        " account of the same Dovecot) into a private Dovecot"
        " (tmpfs, loopback), small messages. imapmig's times and rates include its start-up;"
        " its CPU per message is net of it (the CPU of a run on an empty Maildir); imapmig/raw"
        " is the raw client's (from IMAP: dsync's) time over imapmig's (1.0: imapmig keeps the"
        " server's pace).",
        "",
        table(rows),
        "",
        *lines,
        "",
    ])  # fmt: skip
    with open(os.path.join(resultsDir, "bigaccount.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all("MISSED" not in line for line in lines) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--listing-costs"]:
        print(*_listingCostsHere(sys.argv[2]))
