"""
A diagnostic of the scale part's many-accounts row (issue 17, point 6):
where the time of one daemon migrating many small accounts goes.

Not a benchmark row: it starts a private Dovecot on tmpfs, migrates
C{--accounts} accounts of C{--per-account} small messages (the scale
part's corpus, split the same way) with one daemon and a CSV user list,
and prints, for each run:

  - the wall-clock time and the daemon's user+system CPU (C{wait4});
  - Dovecot's CPU over the run: every process of the private instance,
    its own time and its reaped children's (C{/proc/PID/stat}), before
    and after;
  - with C{--precreate}, each account is logged into once and its folders
    created (and selected) before the timed run, so that Dovecot's
    first-login cost (home, indexes, mailboxes) is paid outside it;
  - with C{--profile FILE}, the daemon runs under cProfile.

Usage::

  python -m bench.scale_probe --accounts 200 --per-account 20 \\
      --max-jobs 16 [--precreate] [--profile out.pstats] [--one]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from bench.contenders import REPOSITORY, imapmigArgv
from bench.corpora import buildCorpus, subsetCorpus
from bench.scale import mbsyncGroupConfig, precreateAccount, splitCorpus, userListConfig
from bench.servers import BenchServer

_TICK = os.sysconf("SC_CLK_TCK")


def _processTree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def treeCPU(root: int, byName: dict[str, float] | None = None) -> float:
    """
    The CPU seconds of C{root} and its live descendants, each with its
    reaped children's: exited C{imap} processes are counted in their
    parent's C{cutime}/C{cstime}.
    """
    total = 0
    for pid in _processTree(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        own = sum(int(x) for x in fields[11:15])
        total += own
        if byName is not None:
            name = text.split("(", 1)[1].rsplit(")", 1)[0]
            byName[name] = byName.get(name, 0.0) + own / _TICK
    return total / _TICK


def busySeconds() -> float:
    """
    The CPU seconds the whole machine has spent busy (C{/proc/stat}: all
    but idle and iowait), over every core.
    """
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / _TICK


def dovecotMaster(baseDir: str) -> int:
    """
    The pid of the instance's master (its C{master.pid}).
    """
    for root, _, files in os.walk(baseDir):
        if "master.pid" in files:
            with open(os.path.join(root, "master.pid")) as f:
                return int(f.read().split()[0])
    raise RuntimeError("no master.pid under " + baseDir)


def runLogged(argv: list[str], logPath: str, env: dict[str, str]) -> tuple[int, Any]:
    """
    Run C{argv} from the repository with C{env}, its output in C{logPath};
    return its wait status and resource usage (C{os.wait4}).
    """
    with open(logPath, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=REPOSITORY, env=env)  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
    return status, usage


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--per-account", type=int, default=20)
    parser.add_argument("--max-jobs", type=int, default=16)
    parser.add_argument("--precreate", action="store_true")
    parser.add_argument("--one", action="store_true", help="one account, the same messages")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--mbsync", action="store_true",
                        help="mbsync over a Group of one channel per account instead")
    parser.add_argument("--workdir", default="/tmp/ratio-work")
    parser.add_argument("--connections", type=int, default=None,
                        help="the job template's connections (default: imapmig's)")
    parser.add_argument("--reuse", action="store_true",
                        help="Dovecot reuses its login and imap processes (service_count = 0,"
                        " process_min_avail)")
    parser.add_argument("--keep", default=None, help="copy the daemon's log here")
    args = parser.parse_args()
    total = args.accounts * args.per_account
    whole = subsetCorpus(args.workdir, buildCorpus(args.workdir, "small", max(5000, total)), total)
    parts = [whole] if args.one else splitCorpus(args.workdir, whole, args.accounts)
    base = tempfile.mkdtemp(prefix="dovecot-probe-", dir=args.workdir)
    server = BenchServer(
        base, accounts=len(parts) + 1, fsync=False,
        mailRoot=tempfile.mkdtemp(prefix="imapmig-probe-", dir="/dev/shm"), capabilities=None,
        compress=False, namespace=None, address="127.0.0.1", inNamespace=None,
        reuseProcesses=4 if args.reuse else 0,
    )  # fmt: skip
    server.start()
    runDir = tempfile.mkdtemp(prefix="probe-run-", dir=args.workdir)
    try:
        rows = [(server.freshAccount(), part.path) for part in parts]
        master = dovecotMaster(base)
        if args.precreate:
            before = time.monotonic()
            for account, path in rows:
                precreateAccount(server.host, server.port, account, path)
            print(f"precreate: {time.monotonic() - before:.2f} s", flush=True)
        config = userListConfig(runDir, server.host, server.port, rows, args.max_jobs)
        if args.connections is not None:
            with open(config) as f:
                text = f.read()
            with open(config, "w") as f:
                f.write(text.replace("    jobs_from:", f"    connections: {args.connections}\n    jobs_from:"))
        argv = imapmigArgv(config)
        if args.mbsync:
            argv = mbsyncGroupConfig(runDir, server.host, server.port, rows)
        if args.profile:
            script = os.path.join(runDir, "twistd.py")
            with open(script, "w") as f:
                f.write(argv[2] + "\n")
            argv = [argv[0], "-m", "cProfile", "-o", args.profile, script, *argv[3:]]
        env = dict(os.environ, PYTHONPATH=REPOSITORY)
        namesBefore: dict[str, float] = {}
        dovecotBefore = treeCPU(master, namesBefore)
        busyBefore = busySeconds()
        started = time.monotonic()
        status, usage = runLogged(argv, os.path.join(runDir, "log"), env)
        wall = time.monotonic() - started
        busy = busySeconds() - busyBefore
        namesAfter: dict[str, float] = {}
        dovecotCPU = treeCPU(master, namesAfter) - dovecotBefore
        daemonCPU = usage.ru_utime + usage.ru_stime
        if args.keep:
            shutil.copy(os.path.join(runDir, "log"), args.keep)
        print(
            f"{'mbsync' if args.mbsync else 'imapmig'}"
            f"  accounts {len(rows)} x {total // len(rows)}  max_jobs {args.max_jobs}"
            f"  precreate {args.precreate}  status {status}\n"
            f"  wall {wall:.2f} s  ({total / wall:,.0f} msg/s gross)\n"
            f"  daemon CPU {daemonCPU:.2f} s (user {usage.ru_utime:.2f}, sys"
            f" {usage.ru_stime:.2f})  Dovecot CPU {dovecotCPU:.2f} s"
            f"  sum {daemonCPU + dovecotCPU:.2f} s of {2 * wall:.2f} core-s;"
            f" the machine busy {busy:.2f} core-s (others"
            f" {busy - daemonCPU - dovecotCPU:.2f})",
            flush=True,
        )
        print("  Dovecot CPU by process (the master's includes its reaped imap and"
              " imap-login children): " + ", ".join(
                  f"{name} {namesAfter[name] - namesBefore.get(name, 0.0):.2f}"
                  for name in sorted(namesAfter)), flush=True)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(runDir, ignore_errors=True)


if __name__ == "__main__":
    main()
