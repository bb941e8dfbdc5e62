# -*- test-case-name: tests.test_bench_sidebyside -*-
"""
Interleaved wall-clock runs of imapmig from several trees and of the raw
writer (MULTIAPPEND 50 after SELECT), without the rest of
C{bench/run.py}'s matrix: one private Dovecot on tmpfs, each client run as a
whole process into a fresh account, once on the corpus and once on an empty
Maildir, round after round.

    .venv/bin/python -m bench.sidebyside [--tls MODE] CORPUS ROUNDS CLIENT...

CORPUS is a directory under C{bench/work/corpus} (C{bench/corpora.py}
builds them); a CLIENT is C{raw:N} (the raw writer, MULTIAPPEND 50 after
SELECT, on N connections, each into a mailbox of its own: C{INBOX},
C{INBOX-1}, ..., as imapmig's connections never append into one mailbox;
more rawappend arguments may follow, comma-separated, e.g.
C{raw:1:--batch,10}; C{unselected} among them appends without SELECT,
C{shared} makes every connection append into INBOX), C{raw} (the same as
C{raw:2}: the reference for imapmig's 2 connections, as C{make bench}'s
C{raw-multi50-2}) or C{TREE:CONNECTIONS}, TREE a checkout of imapmig
(its C{imapmig} package is what runs, as in C{bench/instructions.py}).
It prints each run, then per client the rate of each round net of the
client's median empty run, the client process's CPU per message (user and
system, net of the empty run) and Dovecot's: what every process of the
private Dovecot spent while the client ran (L{dovecotSeconds}: the master,
its live children and the children it reaped, from C{/proc}), net of the
same for the empty run; then each tree's median rate against the raw
writer's on as many connections.  With C{--tls implicit} or C{--tls
starttls} every client reaches Dovecot over TLS (the imaps port, or
STARTTLS on the plain port), its certificate verified against the private
Dovecot's CA.  CPU seconds hardly move with the machine's load;
on a busy machine the start-up alone moves by a second: say so with the
rates.
"""

from __future__ import annotations

import imaplib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.clients.count import countMessages
from bench.contenders import (
    TLS_MODES,
    Invocation,
    _raw,
    buildTools,
    imapmigArgv,
    imapmigConfig,
)
from bench.servers import PASSWORD, VARIANTS, BenchServer

_WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")


def _processes() -> dict[int, tuple[int, str, int]]:
    """
    Every process's parent, name and CPU ticks: its own user and system
    time and its reaped children's (C{/proc/PID/stat} fields 14-17).
    """
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = sum(int(t) for t in fields[11:15])
        found[int(entry)] = (int(fields[1]), name, ticks)
    return found


def dovecotSeconds(master: int) -> tuple[float, int]:
    """
    The CPU seconds (user and system) spent so far by the Dovecot whose
    master process is C{master}: the master's, and each live descendant's
    own and reaped children's (C{imap} and C{imap-login} processes,
    one of each per connection by default, are reaped by the master when
    their connection ends, their time then counted in the master's
    children's times); and how many C{imap} processes are alive.
    In clock ticks (10 ms each) per process: at 5,000 messages a tick is
    2 us a message.
    """
    processes = _processes()
    tree = {master}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _, _) in processes.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    ticks = sum(processes[pid][2] for pid in tree if pid in processes)
    serving = sum(1 for pid in tree if pid in processes and processes[pid][1] == "imap")
    return ticks / os.sysconf("SC_CLK_TCK"), serving


def _dovecotAfter(master: int) -> float:
    """
    L{dovecotSeconds} once the client's C{imap} processes have ended (a
    process ends a moment after its connection closes, and its time is
    counted once reaped), or after 10 s.  A reading is not one instant:
    a process that ends and is reaped while C{/proc} is walked, after
    the master's line was read, is in neither; so the reading kept is
    the second of two in a row that find no C{imap} process.
    """
    deadline = time.monotonic() + 10
    seconds, serving = dovecotSeconds(master)
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        quiet = quiet + 1 if serving == 0 else 0
        if quiet < 2:
            time.sleep(0.02)
            seconds, serving = dovecotSeconds(master)
    return seconds


def _rawArgv(client: str, invocation: Invocation) -> list[str]:
    """
    The raw writer's command line for C{client}: C{raw} (the same as
    C{raw:2}) or C{raw:N[:ARGS]} (see the module's docstring).
    """
    _, connections, *extra = (client if client != "raw" else "raw:2").split(":", 2)
    count = int(connections)
    more = extra[0].split(",") if extra else []
    shared = "shared" in more
    argv = _raw(
        select=True, batch=50, connections=count, mailboxPerConnection=count > 1 and not shared
    )(invocation)
    if shared:
        more.remove("shared")
    if "unselected" in more:
        more.remove("unselected")
        argv.remove("--select")
    return argv + more


Run = tuple[float, float, int, float]


def _reference(client: str) -> int | None:
    """
    How many connections C{client} has if it is the raw writer's
    reference (C{raw} or C{raw:N}, each connection into a mailbox of its
    own, no other argument), else L{None}.
    """
    if client == "raw":
        return 2
    kind, _, connections = client.partition(":")
    if kind == "raw" and connections.isdigit():
        return int(connections)
    return None


def summary(results: dict[str, list[tuple[Run, Run]]]) -> list[str]:
    """
    Per client: the rate of each round net of the client's median empty
    run, its CPU per message and Dovecot's, net of the empty run; then
    each imapmig tree's median rate against the raw writer's on as many
    connections (C{raw:N}, or C{raw} for 2), when it ran.

    @param results: by client, each round's (full, empty) runs: seconds,
        the client's CPU seconds, messages counted, Dovecot's CPU seconds.
    """
    lines = []
    medians = {}
    for client, runs in results.items():
        startup = statistics.median(e[0] for _, e in runs)
        count = runs[0][0][2]
        rates = [count / (f[0] - startup) for f, _ in runs]
        medians[client] = statistics.median(rates)
        cpu = statistics.median((f[1] - e[1]) / count * 1e6 for f, e in runs)
        served = [(f[3] - e[3]) / count * 1e6 for f, e in runs]
        lines.append(f"{client}: net rates {[round(x) for x in rates]}, median"
                     f" {medians[client]:,.0f}/s; CPU per message {cpu:.0f} us;"
                     f" Dovecot's CPU per message {[round(x) for x in served]}, median"
                     f" {statistics.median(served):.0f} us")  # fmt: skip
    references = {_reference(c): c for c in results if _reference(c) is not None}
    for client in results:
        if client.startswith("raw"):
            continue
        raw = references.get(int(client.rsplit(":", 1)[1]))
        if raw is not None:
            lines.append(f"{client} / {raw}: {medians[client] / medians[raw]:.2f}x")
    return lines


def parseArguments(arguments: list[str]) -> tuple[str, str, int, list[str]]:
    """
    The command line's C{[--tls MODE] CORPUS ROUNDS CLIENT...}.

    @return: the TLS mode (C{none} without C{--tls}), the corpus, the
        rounds and the clients.
    """
    tls = "none"
    if arguments[:1] == ["--tls"]:
        tls, arguments = arguments[1], arguments[2:]
        if tls not in TLS_MODES:
            raise SystemExit(f"--tls: one of {', '.join(TLS_MODES)}, not {tls!r}")
    return tls, arguments[0], int(arguments[1]), arguments[2:]


def main() -> None:
    tls, corpus, rounds, clients = parseArguments(sys.argv[1:])
    rawBinary, timer = buildTools(_WORK)
    base = tempfile.mkdtemp(prefix="sidebyside-", dir="/dev/shm")
    server = BenchServer(base, accounts=8 * rounds * len(clients), fsync=False,
                         mailRoot=os.path.join(base, "mail"), capabilities=None, compress=False,
                         namespace=None, address="127.0.0.1", inNamespace=None)  # fmt: skip
    server.start()

    master = server.pid
    assert master is not None

    def run(client: str, maildir: str) -> tuple[float, float, int, float]:
        account = server.freshAccount()
        runDir = tempfile.mkdtemp(dir=base)
        invocation = Invocation(host=server.host, port=server.port, user=account,
                                maildir=os.path.join(_WORK, "corpus", maildir, "Maildir"),
                                runDir=runDir, server=VARIANTS["default"],
                                rawBinary=rawBinary, tls=tls, tlsPort=server.tlsPort,
                                caPath=server.caPath)  # fmt: skip
        cwd, env = os.getcwd(), dict(os.environ)
        if client == "raw" or client.startswith("raw:"):
            argv = _rawArgv(client, invocation)
        else:
            tree, connections = client.rsplit(":", 1)
            argv = imapmigArgv(imapmigConfig(invocation, connections=int(connections)))
            cwd = os.path.abspath(tree)
            env["PYTHONPATH"] = cwd
        report = os.path.join(runDir, "timed.json")
        served = _dovecotAfter(master)
        done = subprocess.run([timer, report, *argv], cwd=cwd, env=env, capture_output=True)
        served = _dovecotAfter(master) - served
        with open(report) as f:
            measured = json.load(f)
        if measured["status"] != 0:
            raise SystemExit(f"{client} failed: {done.stderr[-2000:]!r}")
        imap = imaplib.IMAP4(server.host, server.port)
        imap.login(account, PASSWORD)
        counted = sum(countMessages(imap).values())
        imap.logout()
        server.discard(account)
        shutil.rmtree(runDir, ignore_errors=True)
        cpu = float(measured["user"]) + float(measured["system"])
        return float(measured["seconds"]), cpu, counted, served

    results: dict[str, list[tuple[Run, Run]]] = {}
    try:
        for r in range(rounds):
            for client in clients:
                full, empty = run(client, corpus), run(client, "empty")
                results.setdefault(client, []).append((full, empty))
                print(f"{r} {client}: {full[0]:.2f} s ({full[2]} messages, CPU {full[1]:.2f} s,"
                      f" Dovecot {full[3]:.2f} s), empty {empty[0]:.2f} s (Dovecot"
                      f" {empty[3]:.2f} s)", flush=True)  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    for line in summary(results):
        print(line)

if __name__ == "__main__":
    main()
