"""
Measure what a user list of N rows (default 1,000,000) costs a fleet's
daemon on PostgreSQL, phase by phase, on a private cluster: the
configuration read with the list kept as written (C{lazyUserLists}), the
job list's digest, the first load (every row read, checked and copied
once), a second start (the queue's C{connect}: its tables migrated, the
fleet joined), and three claims; each with the process's resident set
now and at its peak.  With C{--expanded}, the phases as they were: the
list parsed into a job per row, their digests, their load.

    .venv/bin/python -m bench.userlist_million [ROWS] [--expanded]

The rows name a credential for both accounts (no password file per row).
Measured at 1,000,000 rows on the shared development machine (2 cores,
PostgreSQL 15): expanded, loadConfig 17.1 s (920 MB), digests 14.4 s
(peak 1.2 GB), first load 12.6 s; kept as written, loadConfig 0.05 s
(64 MB), digest 0.3 ms, first load 45-99 s (peak 292 MB, a 706 MB table),
second start 7-12 ms, a claim 2.5-6 ms.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from typing import Callable, TypeVar

import psycopg
import yaml

from imapmig.config import loadConfig
from imapmig.queue._pgjoblist import JobList, joinFleet
from imapmig.queue._pgschema import migrate
from imapmig.queue.postgresql import PostgreSQLJobQueue
from imapmig.testing.postgresql import PostgreSQLCluster

_T = TypeVar("_T")


def _resident() -> str:
    with open("/proc/self/status") as f:
        now = next(line.split()[1] for line in f if line.startswith("VmRSS"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return f"RSS {int(now) / 1024:.0f} MB, peak {peak / 1024:.0f} MB"


def _timed(what: str, call: Callable[[], _T]) -> _T:
    began = time.perf_counter()
    result = call()
    print(f"{what}: {time.perf_counter() - began:.4f} s; {_resident()}", flush=True)
    return result


def writeList(directory: str, rows: int) -> str:
    """
    Write a configuration of one user list of C{rows} rows into
    C{directory}; its path.
    """
    admin = os.path.join(directory, "admin.pw")
    with open(os.open(admin, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("pw\n")
    with open(os.path.join(directory, "users.csv"), "w") as f:
        f.write("source_user,destination_user,source_credential,destination_credential\n")
        f.writelines(f"u{i},u{i}@example.org,admin,admin\n" for i in range(rows))
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "servers": {
            "old": {"endpoint": "tcp:old.example.org:143"},
            "new": {"endpoint": "tcp:new.example.org:143"},
        },
        "credentials": {"admin": {"user": "root", "password_file": admin}},
        "jobs": [
            {"name": "users", "jobs_from": "users.csv", "source": {"server": "old"},
             "destination": {"server": "new"}},
        ],
    }  # fmt: skip
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    return path


def main(rows: int, expanded: bool) -> None:
    """
    Write the files, start a cluster, measure each phase.
    """
    directory = tempfile.mkdtemp()
    path = writeList(directory, rows)
    print(f"{rows:,} rows; imports done: {_resident()}")
    config = _timed("loadConfig", lambda: loadConfig(path, lazyUserLists=not expanded))
    listed = _timed("JobList.of", lambda: JobList.of(config.jobs, config.userLists))
    cluster = PostgreSQLCluster(os.path.join(directory, "pg"), dieWithParent=True)
    cluster.start()
    try:
        uri = cluster.createDatabase()
        with psycopg.connect(uri) as connection:
            migrate(connection, "bench")
            with connection.transaction():
                _timed("first load", lambda: joinFleet(connection, "bench", listed, "bench"))
        queue = _timed(
            "second start",
            lambda: PostgreSQLJobQueue.connect(uri, config.jobs, "bench", userLists=config.userLists),
        )
        me = queue.register("bench", os.getpid(), "bench", 60.0)
        for _ in range(3):
            _timed("claim", lambda: queue.claim(me, time.time(), 60.0))
        queue.close()
    finally:
        cluster.destroy()


if __name__ == "__main__":
    arguments = [argument for argument in sys.argv[1:] if not argument.startswith("--")]
    main(int(arguments[0]) if arguments else 1_000_000, "--expanded" in sys.argv)
