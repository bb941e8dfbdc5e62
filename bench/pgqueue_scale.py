"""
Measure the PostgreSQL job queue (L{imapmig.queue.postgresql}) at a
thousand and at a million jobs, on a private cluster: the milliseconds
of each call (median of several), with 300 jobs claimed by another live
daemon and 30 by a daemon whose lease ended (released by the next claim).

    .venv/bin/python -m bench.pgqueue_scale [ROWS ...]

ROWS defaults to 1000 1000000.  PYTHONPATH=/path/to/checkout measures
another checkout's queue (its C{connect} and tables).

Measured on the shared development machine (2 cores, PostgreSQL 15, runs
of the same day vary by 2x), 1,000 / 1,000,000 jobs, milliseconds: before
(f3d98c2) claim 1.45 / 0.96-1.79, heartbeat 0.39 / 0.12-0.25, counts
0.46 / 135-142, add 0.69 / 118-132; after, claim 1.3-5.8 / 1.3-3.2,
heartbeat 0.45-1.2 / 0.5-0.7, finish 0.5-1.2 / 0.5-0.8, counts 0.2-0.5 /
0.1-0.5, add 0.5-1.0 / 0.4-0.7; the heartbeat's buffers 8 with 1 and
with 1,000 held at a million (9 at a thousand once the fleet's row,
which always exists now, is read: claim 1.86, heartbeat 0.63 ms).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import psycopg

from imapmig.config.model import JobConfig
from imapmig.queue import JobOutcome
from imapmig.queue.postgresql import PostgreSQLJobQueue
from imapmig.testing.postgresql import PostgreSQLCluster
from tests.test_schedule_service import jobConfig

_RUNS = 15


class _EveryName(dict[str, bytes]):
    """
    Job digests by name where every name has the one digest C{digest}
    (the rows L{_fill} writes by hand).
    """

    def __init__(self, digests: dict[str, bytes], digest: bytes) -> None:
        super().__init__(digests)
        self._digest = digest

    def get(self, name: str, default: bytes | None = None) -> bytes:  # type: ignore[override]
        return self._digest


class BenchQueue(PostgreSQLJobQueue):
    """
    A queue whose jobs' configurations are made from their names, so
    that a million need not be held (their rows all hold j0's digest,
    which the claim's check of the claimed row then finds).
    """

    def load(self) -> None:
        super().load()
        self._list.digests = _EveryName(self._list.digests, self._list.digests["j0"])

    def _job(self, name: str) -> JobConfig:
        return jobConfig(name, "u" + name)


def _fill(uri: str, rows: int) -> None:
    """
    Add rows C{j1} to C{j<rows - 1>} by hand, each with j0's digest.
    """
    with psycopg.connect(uri, autocommit=True) as c:
        columns = {
            row[0]
            for row in c.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = 'imapmig_queue' AND table_name = 'jobs'"
            )
        }
        extra, values = "", ""
        if "accounts" in columns:
            extra, values = ", accounts", ", ARRAY['s/uj' || i]"
        if "digest" in columns:
            extra += ", digest"
            values += ", (SELECT digest FROM imapmig_queue.jobs WHERE name = 'j0')"
        c.execute(
            f"INSERT INTO imapmig_queue.jobs (name, position{extra})"
            f" SELECT 'j' || i, i{values} FROM generate_series(1, %s) i",
            (rows - 1,),
        )
        c.execute("VACUUM ANALYZE imapmig_queue.jobs")


def _hold(uri: str, owner: str, first: int, count: int) -> None:
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute(
            "UPDATE imapmig_queue.jobs SET state = 'claimed', owner = %s, generation = 1"
            " WHERE position >= %s AND position < %s",
            (owner, first, first + count),
        )


def _buffers(uri: str, owner: str) -> float:
    """
    The shared buffers one heartbeat of C{owner} touches (C{EXPLAIN
    (ANALYZE, BUFFERS)}, rolled back), the statistics fresh.
    """
    from imapmig.queue._pgstatements import HEARTBEAT

    with psycopg.connect(uri, autocommit=True) as c:
        c.execute("VACUUM ANALYZE imapmig_queue.jobs")
    with psycopg.connect(uri) as c:
        plan = c.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + HEARTBEAT,
            {"me": owner, "lease": 600.0, "connections": None, "rate": None},
        ).fetchone()
        c.rollback()
    assert plan is not None
    top = plan[0][0]["Plan"]
    return float(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


def _time(call: Callable[[], Any], runs: int = _RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(rows: int) -> dict[str, float]:
    """
    The median milliseconds of each call on a queue of C{rows} jobs.
    """
    cluster = PostgreSQLCluster(tempfile.mkdtemp(prefix="imapmig-pgqueue-scale-"))
    cluster.start()
    try:
        uri = cluster.createDatabase()
        queue = BenchQueue.connect(uri, [jobConfig("j0", "uj0")])
        _fill(uri, rows)
        me = queue.register("bench", 1, "1", 600.0)
        other = queue.register("bench", 2, "1", 600.0)
        dead = queue.register("bench", 3, "1", 0.01)
        _hold(uri, other, rows // 2, 300)
        _hold(uri, dead, rows // 2 + 300, 30)
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute("VACUUM ANALYZE imapmig_queue.jobs")
        results: dict[str, float] = {}
        claims: list[Any] = []
        results["claim"] = _time(lambda: claims.append(queue.claim(me, 0.0, 600.0)))
        results["heartbeat"] = _time(lambda: queue.heartbeat(me, 600.0))
        results["finish"] = _time(
            lambda: queue.finish(claims.pop(), JobOutcome.COMPLETED), runs=len(claims)
        )
        results["counts"] = _time(queue.counts)
        added = iter(range(_RUNS))
        results["add"] = _time(lambda: queue.add(jobConfig(f"new{next(added)}", "n")))
        last = f"j{rows - 1}"
        results["pause+resume"] = _time(lambda: (queue.pause(last), queue.resume(last)))
        results["nextDue"] = _time(queue.nextDue)
        holder = queue.register("bench", 4, "1", 600.0)
        _hold(uri, holder, rows // 4, 1)
        results["heartbeat buffers, 1 held"] = _buffers(uri, holder)
        _hold(uri, holder, rows // 4, 1000)
        results["heartbeat buffers, 1,000 held"] = _buffers(uri, holder)
        queue.close()
        return results
    finally:
        cluster.destroy()


def main(argv: list[str]) -> None:
    for rows in [int(a) for a in argv] or [1000, 1_000_000]:
        results = measure(rows)
        print(
            f"{rows:>9,} jobs: "
            + ", ".join(f"{k} {v:g}" if "buffers" in k else f"{k} {v:.2f} ms" for k, v in results.items())
        )


if __name__ == "__main__":
    main(sys.argv[1:])
