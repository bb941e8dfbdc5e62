# -*- test-case-name: tests.test_bench -*-
"""
A diagnostic of the server-to-server part (issue 17, point 6): where the
wall-clock time of one copy goes, per process.

    python -m bench.s2s_probe [--runs N] [--clients imapmig,raw,dsync]
        [--strace DIR] [--tls MODE] [CORPUS]

Not a benchmark row.  It starts the two private Dovecots as C{--parts s2s}
does (tmpfs, loopback), loads CORPUS (default C{realistic-5000-seed1})
into one source account, reads it once (Dovecot builds its indexes), then
runs each client C{--runs} times, interleaved, each into a fresh
destination account whose message count is checked, and prints per run:
the wall-clock time, the client's CPU (C{wait4}), the source Dovecot's
and the destination Dovecot's CPU (every process of each instance, with
its reaped children's, from C{/proc/PID/stat}: L{bench.scale_probe.treeCPU})
and the machine's busy core-seconds.  With C{--strace DIR}, one more
imapmig run is made under C{strace -f -tt} (reads and writes of the
sockets, the first 120 octets of each) and the trace kept in DIR, for the
timeline and the commands sent; with C{--logs DIR} each run's output is
kept there.  imapmig runs from this checkout; a client named
C{imapmig=TREE} runs imapmig from the checkout TREE instead (its working
directory and C{PYTHONPATH}), so that two trees, before and after a change,
are compared in one interleaved run: C{--clients
imapmig=/tmp/base,imapmig=/tmp/new,dsync}.  With C{--tls implicit} or
C{--tls starttls} the clients reach the servers over TLS (as the C{tls}
part's server-to-server rows do; the raw client has no TLS), and each
server's CPU is also split by process name (C{imap}, C{imap-login}, ...),
from C{/proc} polled every 50 ms during the run (a process's last 50 ms
can be missed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from typing import Any

from bench.contenders import (
    REPOSITORY,
    TLS_MODES,
    Invocation,
    SourceAccount,
    _dsync,
    _rawServerToServer,
    imapmigArgv,
    imapmigServerToServerConfig,
)
from bench.s2s_instructions import _messages, _server, _warm
from bench.scale_probe import _TICK, busySeconds, dovecotMaster, treeCPU
from bench.servers import VARIANTS


def treeOf(client: str) -> str:
    """
    The checkout a client runs from: TREE for C{imapmig=TREE}, else this
    one.
    """
    name, _, tree = client.partition("=")
    return os.path.abspath(tree) if name == "imapmig" and tree else REPOSITORY


def _run(argv: list[str], logPath: str, tree: str) -> tuple[int, Any]:
    """
    Run C{argv} from C{tree} (its working directory, first on
    C{PYTHONPATH}), its output in C{logPath}; its wait status and
    resource usage (C{os.wait4}).
    """
    with open(logPath, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tree,
                                   env=dict(os.environ, PYTHONPATH=tree))  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
    return status, usage


class _Poller(threading.Thread):
    """
    The CPU seconds of each process below some Dovecot masters, polled
    from C{/proc} until stopped: per master, the last figure seen of each
    process, summed by process name.
    """

    def __init__(self, masters: list[int]) -> None:
        super().__init__(daemon=True)
        self._masters = masters
        self._seen: list[dict[int, tuple[str, float]]] = [{} for _ in masters]
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.05):
            stats: dict[int, str] = {}
            children: dict[int, list[int]] = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        text = f.read()
                except OSError:
                    continue
                stats[int(entry)] = text
                children.setdefault(int(text.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            for master, seen in zip(self._masters, self._seen):
                todo = list(children.get(master, []))
                while todo:
                    pid = todo.pop()
                    todo.extend(children.get(pid, []))
                    text = stats[pid]
                    fields = text.rsplit(")", 1)[1].split()
                    name = text.split("(", 1)[1].rsplit(")", 1)[0]
                    seen[pid] = (name, sum(int(x) for x in fields[11:13]) / _TICK)

    def stop(self) -> list[dict[str, float]]:
        self._halt.set()
        self.join()
        result: list[dict[str, float]] = []
        for seen in self._seen:
            byName: dict[str, float] = {}
            for name, seconds in seen.values():
                byName[name] = byName.get(name, 0.0) + seconds
            result.append(byName)
        return result


def _split(byName: dict[str, float]) -> str:
    return " ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(byName.items())
                    if seconds >= 0.01)  # fmt: skip


def _argv(client: str, invocation: Invocation) -> list[str]:
    if client.partition("=")[0] == "imapmig":
        return imapmigArgv(imapmigServerToServerConfig(invocation))
    if client == "raw":
        return _rawServerToServer(invocation)
    return _dsync(invocation)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", default="realistic-5000-seed1")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default="imapmig,raw,dsync")
    parser.add_argument("--strace", default=None)
    parser.add_argument("--logs", default=None, help="keep each run's output in this directory")
    parser.add_argument("--tls", choices=TLS_MODES, default="none")
    args = parser.parse_args()
    clients = args.clients.split(",")
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
    corpus = os.path.join(work, "corpus", args.corpus, "Maildir")
    base = tempfile.mkdtemp(prefix="s2s-probe-", dir="/dev/shm")
    source = _server(base, "source", 2)
    destination = _server(base, "destination", len(clients) * args.runs + 3)
    rows: dict[str, list[tuple[float, ...]]] = {client: [] for client in clients}
    try:
        source.start()
        destination.start()
        full = source.freshAccount()
        source.loadMaildir(full, corpus)
        _warm(source, full)
        expected = _messages(source, full)
        sourceMaster = dovecotMaster(os.path.join(base, "source"))
        destinationMaster = dovecotMaster(os.path.join(base, "destination"))
        account = SourceAccount(source.host, source.port, full, destination.configPath,
                                tls=args.tls, tlsPort=source.tlsPort, caPath=source.caPath)  # fmt: skip
        plan = [(run, client) for run in range(args.runs) for client in clients]
        if args.strace:
            plan.append((-1, "imapmig"))
        for run, client in plan:
            runDir = tempfile.mkdtemp(dir=base)
            user = destination.freshAccount()
            invocation = Invocation(
                host=destination.host, port=destination.port, user=user, maildir="",
                runDir=runDir, server=VARIANTS["default"], rawBinary="", source=account,
                tls=args.tls, tlsPort=destination.tlsPort, caPath=destination.caPath,
            )  # fmt: skip
            argv = _argv(client, invocation)
            if run < 0:
                os.makedirs(args.strace, exist_ok=True)
                argv = ["strace", "-f", "-tt", "-s", "120", "-e",
                        "trace=read,write,recvfrom,sendto,writev,sendmsg,connect",
                        "-o", os.path.join(args.strace, "imapmig.strace"), *argv]  # fmt: skip
            sourceBefore = treeCPU(sourceMaster)
            destinationBefore = treeCPU(destinationMaster)
            busyBefore = busySeconds()
            poller = _Poller([sourceMaster, destinationMaster])
            poller.start()
            started = time.monotonic()
            status, usage = _run(argv, os.path.join(runDir, "log"), treeOf(client))
            wall = time.monotonic() - started
            sourceSplit, destinationSplit = poller.stop()
            busy = busySeconds() - busyBefore
            sourceCPU = treeCPU(sourceMaster) - sourceBefore
            destinationCPU = treeCPU(destinationMaster) - destinationBefore
            clientCPU = usage.ru_utime + usage.ru_stime
            copied = _messages(destination, user)
            if status != 0 or copied != expected:
                with open(os.path.join(runDir, "log"), "rb") as f:
                    print(f.read()[-2000:].decode(errors="replace"))
                raise SystemExit(f"{client}: status {status}, {copied} of {expected} copied")
            row = (wall, clientCPU, usage.ru_utime, usage.ru_stime, sourceCPU, destinationCPU,
                   busy)  # fmt: skip
            if run >= 0:
                rows[client].append(row)
            print(f"{client:8} {'strace' if run < 0 else run}: wall {wall:.2f} s "
                  f"({expected / wall:,.0f} msg/s)  client {clientCPU:.2f} "
                  f"(user {usage.ru_utime:.2f} sys {usage.ru_stime:.2f})  source Dovecot "
                  f"{sourceCPU:.2f}  destination Dovecot {destinationCPU:.2f}  "
                  f"machine busy {busy:.2f} core-s", flush=True)  # fmt: skip
            print(f"{'':10} source: {_split(sourceSplit)}; destination: "
                  f"{_split(destinationSplit)}", flush=True)  # fmt: skip
            if args.logs:
                os.makedirs(args.logs, exist_ok=True)
                shutil.copy(os.path.join(runDir, "log"),
                            os.path.join(args.logs, f"{client}-{run}.log"))
            destination.discard(user)
            shutil.rmtree(runDir, ignore_errors=True)
        print("medians:")
        for client, got in rows.items():
            if got:
                m = [statistics.median(column) for column in zip(*got)]
                print(f"  {client:8} wall {m[0]:.2f}  client {m[1]:.2f} (user {m[2]:.2f} sys "
                      f"{m[3]:.2f})  source {m[4]:.2f}  destination {m[5]:.2f}  busy {m[6]:.2f}")
    finally:
        source.stop()
        destination.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
