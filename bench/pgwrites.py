"""
What one job costs a PostgreSQL state database, per message: the daemon
(L{imapmig.daemon.service.buildService}, the real reactor) migrating one
Maildir of C{--messages} messages (or that many split among C{--jobs}
jobs, each an account) into a private Dovecot, its state in a
private PostgreSQL cluster (L{imapmig.testing.postgresql}) through
L{imapmig.state.postgresql.PostgreSQLStateStore}; not part of C{make
bench}.

    python -m bench.pgwrites [--messages 5000] [--jobs 1] [--small] [--fenced] [--dir DIR]

It prints the database's commits (C{pg_stat_database.xact_commit}) and
row writes of the store's tables (C{n_tup_ins + n_tup_upd + n_tup_del} of
C{pg_stat_user_tables} in schema C{imapmig}) from the store's open to its
close, each per message (C{--fenced}: through the store's view of a
claim of the job, in the queue's tables made for it): issue 30's acceptance asks at most one commit per
100 messages and 1.2 row writes per message.  The commits of the
measuring connection itself (one per reading of the counters) are taken
off.  The counters are read after the store's connections closed (a
backend flushes its statistics when it ends) and PostgreSQL's statistics
settled.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import psycopg
import yaml
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import react
from twisted.python.threadpool import ThreadPool

from imapmig.config import loadConfig
from imapmig.daemon.service import buildService
from imapmig.queue import _pgschema as queueschema
from imapmig.state.postgresql import PostgreSQLStateStore
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser
from imapmig.testing.postgresql import PostgreSQLCluster

_COUNTERS = """
    SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
           (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)
              FROM pg_stat_user_tables WHERE schemaname = 'imapmig')
"""


class Counters:
    """
    Reads the database's commits and the store's row writes, each time on
    a connection of its own, which adds commits of its own (two, on
    PostgreSQL 15), flushed when it ends.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def read(self) -> tuple[int, int]:
        """
        The counters now.
        """
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            row = connection.execute(_COUNTERS).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def settled(self) -> tuple[int, int, int, int]:
        """
        The counters once PostgreSQL's statistics have settled: three
        readings 1 s apart whose commits grow alike (by the readings' own)
        and whose row writes do not change.

        @return: the commits and row writes of the last reading, the
            commits a reading adds, and how many readings were made.
        """
        readings = [self.read()]
        while True:
            time.sleep(1.0)
            readings.append(self.read())
            if len(readings) >= 3:
                (c0, r0), (c1, r1), (c2, r2) = readings[-3:]
                if r0 == r1 == r2 and c2 - c1 == c1 - c0:
                    return c2, r2, c2 - c1, len(readings)


def writeConfig(
    directory: str, users: list[DovecotUser], maildirs: list[str], port: int
) -> str:
    """
    The daemon's configuration: a job from each of C{maildirs} into the
    account of its user, the status listener off.
    """
    jobs = []
    for n, (user, maildir) in enumerate(zip(users, maildirs)):
        passwordFile = os.path.join(directory, f"password{n}")
        fd = os.open(passwordFile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(user.password + "\n")
        jobs.append(
            {
                "name": f"job{n}",
                "source": {"maildir": maildir},
                "destination": {
                    "server": "dovecot",
                    "user": user.name,
                    "password_file": passwordFile,
                },
            }
        )
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {
            "dovecot": {"endpoint": f"tcp:127.0.0.1:{port}", "starttls": "off", "compress": "off"}
        },
        "jobs": jobs,
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    return path


def claimJob(dsn: str) -> tuple[str, int]:
    """
    Make the queue's tables in C{dsn}, a daemon whose lease lasts an hour,
    and job C{job0} claimed by it.

    @return: the daemon's id and the claim's generation.
    """
    owner = str(uuid.uuid4())
    with psycopg.connect(dsn, autocommit=True) as connection:
        queueschema.migrate(connection, "bench")
        connection.execute(
            "INSERT INTO imapmig_queue.daemons (daemon_id, incarnation, host, pid, version,"
            " started_at, heartbeat_at, lease_until) VALUES (%s,"
            " nextval('imapmig_queue.incarnations'), 'bench', 1, 'bench', now(), now(),"
            " now() + interval '1 hour')",
            (owner,),
        )
        connection.execute(
            "INSERT INTO imapmig_queue.jobs (name, position, state, owner, generation, digest)"
            " VALUES ('job0', 1, 'claimed', %s, 1, '')",
            (owner,),
        )
    return owner, 1


async def migrate(
    reactor: Any, configPath: str, dsn: str, fenced: bool
) -> tuple[int, int, bool, float]:
    """
    Run the daemon on C{configPath} with its state in C{dsn} until its
    job is done.

    @param fenced: give the daemon the store's view of a claim of the
        job (C{forClaim}), whose every write transaction begins with the
        fence.

    @return: the commits and row writes from the store's open to its
        close, whether the job completed, and the seconds it took.
    """
    config = loadConfig(configPath)
    pool = ThreadPool(minthreads=0, maxthreads=3, name="imapmig-state")
    pool.start()
    store = PostgreSQLStateStore(reactor, pool, dsn, reactor.seconds)
    measured = Counters(dsn)
    commits, rows, perReading, _ = measured.settled()
    started = time.monotonic()
    await store.open()
    finished: Deferred[bool] = Deferred()
    given: Any = store.forClaim("job0", *claimJob(dsn)) if fenced else store
    service = buildService(config, reactor, whenDone=finished.callback, store=given)
    service.startService()
    try:
        completed = await finished.addTimeout(600, reactor)
    finally:
        await service.stopService()
    for job in config.jobs:
        error = service.progress.job(job.name).error
        if error is not None:
            print(f"{job.name}: {error}", file=sys.stderr)
    elapsed = time.monotonic() - started
    # The service closed the store; wait for the writes it committed then.
    await maybeDeferred(getattr(store, "whenClosed", lambda: None))
    pool.stop()
    batcher = getattr(store, "_batcher", None)
    if batcher is not None:
        print(f"write transactions of the batcher: {batcher.commits}")
    afterCommits, afterRows, _, readings = measured.settled()

    # The last reading before, and every one after but the last, were
    # commits of their own.
    return afterCommits - commits - readings * perReading, afterRows - rows, completed, elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pgwrites")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=1, help="the messages split among jobs")
    parser.add_argument("--small", action="store_true", help="the corpus's small profile")
    parser.add_argument(
        "--fenced", action="store_true", help="through a view of a claim (one job only)"
    )
    parser.add_argument("--dir", help="where the servers and the Maildir live")
    options = parser.parse_args(argv)
    directory = options.dir or tempfile.mkdtemp(prefix="imapmig-pgwrites-")
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    cluster = PostgreSQLCluster(os.path.join(directory, "postgresql"))
    users = [DovecotUser(f"user{n:02d}", f"password-{n:02d}") for n in range(options.jobs)]
    dovecot = DovecotInstance(os.path.join(directory, "dovecot"), users=users)
    try:
        cluster.start()
        dovecot.start()
        maildirs = [os.path.join(directory, f"Maildir{n}") for n in range(options.jobs)]
        for n, maildir in enumerate(maildirs):
            writeMaildir(
                maildir, options.messages // options.jobs, seed=n, folders=(("INBOX",),),
                profile="small" if options.small else "realistic",
            )  # fmt: skip
        configPath = writeConfig(directory, users, maildirs, dovecot.port)
        dsn = cluster.createDatabase()
        results: list[tuple[int, int, bool, float]] = []

        async def run(reactor: Any) -> None:
            results.append(await migrate(reactor, configPath, dsn, options.fenced))

        try:
            react(run)
        except SystemExit as e:
            if e.code:
                raise
        commits, rows, completed, elapsed = results[0]
        n = options.messages
        print(f"messages {n}, completed {completed}, {elapsed:.1f} s ({n / elapsed:.0f}/s)")
        print(f"commits {commits}: one per {n / max(commits, 1):.0f} messages")
        print(f"row writes {rows}: {rows / n:.3f} per message")
    finally:
        dovecot.stop()
        cluster.destroy()
        if not options.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
