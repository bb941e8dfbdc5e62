"""
Measure a fleet's daemon started on a user list of N rows (default
1,000,000) already loaded into its PostgreSQL: the seconds from the
daemon's process start to its first message stored (polled in the
state's C{imapmig.messages}) and its peak RSS (C{VmHWM}) 3 s later, for
each of C{--runs} starts (default 2); the list is loaded once, first, by
C{imapmig state load-jobs}, and timed.

    .venv/bin/python -m bench.fleet_million [ROWS] [--runs N]

On a private cluster and a private Dovecot: the list's first row is a
real account (one message from a Maildir), the others accounts that do
not exist (their jobs fail at login).  Measured on the shared development
machine (2 cores, PostgreSQL 15) at 1,000,000 rows: load-jobs 37.9-60.8 s;
first message 0.79-2.15 s over 5 starts, peak RSS 72-73 MB (the same at 1,000
rows: 0.80 s and 1.67 s, 73 MB).  Before, the daemon parsed the list
into a million jobs (17.1 s, 920 MB) and digested them (14.4 s, peak
1.2 GB) at every start (bench/userlist_million.py).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import time

import psycopg
import yaml

from imapmig.commands import cli
from imapmig.testing.postgresql import PASSWORD_ROLE, PostgreSQLCluster
from tests.support import (
    SOURCE_TREE,
    daemonCommand,
    freshUser,
    plainServer,
    sharedDovecot,
    sourceTreeEnvironment,
    writePasswordFile,
)


def _maildir(directory: str) -> str:
    path = os.path.join(directory, "maildir")
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(path, sub))
    with open(os.path.join(path, "cur", "1600000000.M1P1.host:2,S"), "wb") as f:
        f.write(b"Subject: hi\n\nbody\n")
    return path


def writeFleet(directory: str, cluster: PostgreSQLCluster, rows: int) -> tuple[str, str]:
    """
    Write the configuration of a fleet whose one user list has C{rows}
    rows, the first a real account of the shared Dovecot.

    @return: its path, and that account's job's name.
    """
    instance = sharedDovecot()
    user = freshUser(instance)
    password = writePasswordFile(os.path.join(directory, "user.pw"), user.password)
    with open(os.path.join(directory, "users.csv"), "w") as f:
        f.write(f"destination_user\n{user.name}\n")
        f.writelines(f"nobody{i}\n" for i in range(1, rows))
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "state": f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{cluster.port}/fleet",
                "state_password_file": writePasswordFile(
                    os.path.join(directory, "pg.pw"), cluster.password
                ),
                "fleet": {"name": "bench"},
                "status": "off",
                "servers": {"new": plainServer(instance)},
                "jobs": [
                    {"name": "users", "jobs_from": "users.csv",
                     "source": {"maildir": _maildir(directory)},
                     "destination": {"server": "new", "password_file": password}},
                ],
            },
            f,
        )  # fmt: skip
    return path, f"users-{user.name}"


def _peak(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmHWM", "VmRSS")))
    return f"peak RSS {int(fields['VmHWM'].split()[0]) / 1024:.0f} MB"


def firstMessage(path: str, database: psycopg.Connection[tuple[object, ...]]) -> None:
    """
    Start a daemon on C{path}, print when its first message is stored and
    its peak RSS, and stop it.
    """
    started = time.monotonic()
    daemon = subprocess.Popen(
        daemonCommand(path), env=sourceTreeEnvironment(), cwd=SOURCE_TREE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        first = None
        while first is None and time.monotonic() - started < 120:
            try:
                row = database.execute("SELECT count(*) FROM imapmig.messages").fetchone()
            except psycopg.Error:
                row = None
            if row is not None and row[0]:
                first = time.monotonic() - started
            time.sleep(0.02)
        time.sleep(3)
        shown = "none in 120 s" if first is None else f"{first:.2f} s"
        print(f"first message {shown}; {_peak(daemon.pid)}", flush=True)
    finally:
        # Killed: only its start is measured (its claims are put back by
        # hand, or run out with its lease).
        daemon.kill()
        daemon.wait(60)


def main(rows: int, runs: int) -> None:
    """
    Load the list, then start the daemon C{runs} times.
    """
    directory = tempfile.mkdtemp()
    cluster = PostgreSQLCluster(os.path.join(directory, "pg"), dieWithParent=True)
    cluster.start()
    try:
        cluster.createDatabase("fleet", owner=PASSWORD_ROLE)
        path, first = writeFleet(directory, cluster, rows)
        began = time.monotonic()
        out = io.StringIO()
        if cli.main(["state", "load-jobs", "--config", path], out=out) != 0:
            raise SystemExit("load-jobs failed")
        print(f"{rows:,} rows: load-jobs {time.monotonic() - began:.1f} s", flush=True)
        with psycopg.connect(cluster.dsn("fleet"), autocommit=True) as database:
            for _ in range(runs):
                firstMessage(path, database)
                database.execute("TRUNCATE imapmig.messages")
                database.execute(
                    "UPDATE imapmig_queue.jobs SET state = 'queued', owner = NULL WHERE name = %s",
                    (first,),
                )
    finally:
        cluster.destroy()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    runs = 2
    if "--runs" in arguments:
        at = arguments.index("--runs")
        runs = int(arguments[at + 1])
        del arguments[at : at + 2]
    main(int(arguments[0]) if arguments else 1_000_000, runs)
