"""
Time a fleet's daemon's exit on SIGTERM, C{RUNS} times (default 20): each
run starts the daemon on a user list of 1,000 accounts whose logins fail
(C{fleet: {name: x, lease: 10}}, a private PostgreSQL and the shared
Dovecot), sends SIGTERM C{AFTER} seconds later (default 6) and times its
exit; a daemon not gone in 60 s has its threads' stacks written to its
log (faulthandler on SIGUSR1) and is killed.

    .venv/bin/python -m bench.fleet_stop [RUNS] [AFTER]

Measured on the shared development machine (2 cores), SIGTERM after 4 s:
before the fix of the scheduler's running jobs (issue 30), 4 of 15 runs
did not exit, each main thread spinning in JobQueueService._runAll's wait
for its jobs; after it, 20 of 20 exited (after 6 s: 20 of 20, in 0.06-0.85
s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from imapmig.testing.postgresql import PASSWORD_ROLE, PostgreSQLCluster
from tests.support import (
    SOURCE_TREE,
    freshUser,
    plainServer,
    sharedDovecot,
    sourceTreeEnvironment,
    writePasswordFile,
)

# The daemon, its threads' stacks dumped on SIGUSR1.
_DAEMON = (
    "import faulthandler, runpy, signal, sys;"
    " faulthandler.register(signal.SIGUSR1, all_threads=True);"
    " sys.argv[0] = 'imapmig.daemon'; runpy.run_module('imapmig.daemon', run_name='__main__')"
)


def writeFleet(directory: str, cluster: PostgreSQLCluster) -> str:
    """
    Write the configuration of a fleet of 1,000 accounts whose logins
    fail; return its path.
    """
    instance = sharedDovecot()
    user = freshUser(instance)
    password = writePasswordFile(os.path.join(directory, "user.pw"), "wrong-" + user.password)
    with open(os.path.join(directory, "users.csv"), "w") as f:
        f.write("destination_user\n")
        f.writelines(f"nobody{i}\n" for i in range(1000))
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(directory, "maildir", sub))
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "state": f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{cluster.port}/fleet",
                "state_password_file": writePasswordFile(
                    os.path.join(directory, "pg.pw"), cluster.password
                ),
                "fleet": {"name": "x", "lease": 10},
                "status": "off",
                "servers": {"new": plainServer(instance)},
                "jobs": [
                    {"name": "users", "jobs_from": "users.csv",
                     "source": {"maildir": os.path.join(directory, "maildir")},
                     "destination": {"server": "new", "password_file": password}},
                ],
            },
            f,
        )  # fmt: skip
    return path


def stopOnce(path: str, log: str, after: float) -> float | None:
    """
    Start the daemon, send it SIGTERM after C{after} seconds.

    @return: the seconds it took to exit, or L{None} if it did not in 60.
    """
    with open(log, "w") as output:
        daemon = subprocess.Popen(
            [sys.executable, "-c", _DAEMON, "--config", path],
            env=sourceTreeEnvironment(), cwd=SOURCE_TREE, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        time.sleep(after)
        sent = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
            return time.monotonic() - sent
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGUSR1)
            time.sleep(2)
            daemon.kill()
            daemon.wait()
            return None


def main(runs: int, after: float) -> None:
    """
    Stop the daemon C{runs} times, printing each exit's time.
    """
    directory = tempfile.mkdtemp()
    cluster = PostgreSQLCluster(os.path.join(directory, "pg"), dieWithParent=True)
    cluster.start()
    try:
        cluster.createDatabase("fleet", owner=PASSWORD_ROLE)
        path = writeFleet(directory, cluster)
        hung = 0
        for run in range(runs):
            log = os.path.join(directory, f"daemon{run}.log")
            took = stopOnce(path, log, after)
            if took is None:
                hung += 1
                print(f"run {run}: not exited in 60 s (stacks in {log})", flush=True)
            else:
                print(f"run {run}: exited in {took:.2f} s", flush=True)
        print(f"{runs - hung} of {runs} exited", flush=True)
    finally:
        cluster.destroy()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(
        int(arguments[0]) if arguments else 20,
        float(arguments[1]) if len(arguments) > 1 else 6.0,
    )
