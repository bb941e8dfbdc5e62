"""
Interleaved wall-clock runs of imapmig from several trees and of the raw
writer (MULTIAPPEND 50 after SELECT, 2 connections), without the rest of
C{bench/run.py}'s matrix: one private Dovecot on tmpfs, each client run as a
whole process into a fresh account, once on the corpus and once on an empty
Maildir, round after round.

    .venv/bin/python -m bench.sidebyside CORPUS ROUNDS CLIENT...

CORPUS is a directory under C{bench/work/corpus} (C{bench/corpora.py}
builds them); a CLIENT is C{raw} or C{TREE:CONNECTIONS}, TREE a checkout of
imapmig (its C{imapmig} package is what runs, as in C{bench/instructions.py}).
It prints each run, then per client the rate of each round net of the
client's median empty run, and the imapmig process's CPU per message (user
and system, net of the empty run).  On a busy machine the start-up alone
moves by a second: say so with the figures.
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

from bench.clients.count import countMessages
from bench.contenders import Invocation, _raw, buildTools, imapmigArgv, imapmigConfig
from bench.servers import PASSWORD, VARIANTS, BenchServer

_WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")


def main() -> None:
    corpus, rounds, clients = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    rawBinary, timer = buildTools(_WORK)
    base = tempfile.mkdtemp(prefix="sidebyside-", dir="/dev/shm")
    server = BenchServer(base, accounts=8 * rounds * len(clients), fsync=False,
                         mailRoot=os.path.join(base, "mail"), capabilities=None, compress=False,
                         namespace=None, address="127.0.0.1", inNamespace=None)  # fmt: skip
    server.start()

    def run(client: str, maildir: str) -> tuple[float, float, int]:
        account = server.freshAccount()
        runDir = tempfile.mkdtemp(dir=base)
        invocation = Invocation(host=server.host, port=server.port, user=account,
                                maildir=os.path.join(_WORK, "corpus", maildir, "Maildir"),
                                runDir=runDir, server=VARIANTS["default"],
                                rawBinary=rawBinary)  # fmt: skip
        cwd, env = os.getcwd(), dict(os.environ)
        if client == "raw":
            argv = _raw(select=True, batch=50, connections=2)(invocation)
        else:
            tree, connections = client.rsplit(":", 1)
            argv = imapmigArgv(imapmigConfig(invocation, connections=int(connections)))
            cwd = os.path.abspath(tree)
            env["PYTHONPATH"] = cwd
        report = os.path.join(runDir, "timed.json")
        done = subprocess.run([timer, report, *argv], cwd=cwd, env=env, capture_output=True)
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
        return float(measured["seconds"]), cpu, counted

    results: dict[str, list[tuple[tuple[float, float, int], tuple[float, float, int]]]] = {}
    try:
        for r in range(rounds):
            for client in clients:
                full, empty = run(client, corpus), run(client, "empty")
                results.setdefault(client, []).append((full, empty))
                print(f"{r} {client}: {full[0]:.2f} s ({full[2]} messages, CPU {full[1]:.2f} s),"
                      f" empty {empty[0]:.2f} s", flush=True)  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    for client, runs in results.items():
        startup = statistics.median(e[0] for _, e in runs)
        count = runs[0][0][2]
        rates = [count / (f[0] - startup) for f, _ in runs]
        cpu = statistics.median((f[1] - e[1]) / count * 1e6 for f, e in runs)
        print(f"{client}: net rates {[round(x) for x in rates]}, median"
              f" {statistics.median(rates):,.0f}/s; CPU per message {cpu:.0f} us")  # fmt: skip


if __name__ == "__main__":
    main()
