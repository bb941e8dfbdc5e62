"""
What the in-flight journal costs the state store, per message: a
micro-benchmark of L{imapmig.state.sqlite.SQLiteStateStore} alone (no
network, no IMAP), not part of C{make bench}.

    python -m bench.journal [--messages 5000] [--batch 50] [--repeat 21]
                            [--prefill 100000] [--dir DIR]

In a database already holding C{--prefill} outcomes (the cost of an upsert
grows with the table), for each cadence at which outcomes are recorded
(every batch of C{--batch} messages, and every 2,000 outcomes as the
daemon's recorder does), it times C{--messages} messages recorded with
C{recordOutcomes} alone, then the same with the journal: one
C{journalBatch} per batch before it leaves, and the settled entries
deleted by the C{recordOutcomes} that records their outcomes.  The two
alternate, C{--repeat} times each.  It prints medians in microseconds per
message, of wall-clock and of process CPU time (steadier on a busy
machine), and their difference: what the journal costs; and the time
spent in C{journalBatch} alone (building the messages and deleting the
settled entries are the rest).  The database lives
in C{--dir} (by default a new temporary directory; give one on the disk
the daemon's state will use).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Sequence, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from imapmig.state import JournalMessage, MessageOutcome
from imapmig.state.sqlite import SQLiteStateStore

_T = TypeVar("_T")
_MAILBOX = "Archive/2019"
# The daemon's recorder writes every 2,000 outcomes (or every second).
_RECORDER_BATCH = 2000


def _done(d: Deferred[_T]) -> _T:
    """
    The result of C{d}, which has fired (the SQLite store is synchronous).
    """
    results: list[_T | Failure] = []
    d.addBoth(results.append)
    (result,) = results
    if isinstance(result, Failure):
        result.raiseException()
    assert not isinstance(result, Failure)
    return result


def _keys(run: int, count: int) -> list[tuple[str, str]]:
    """
    Maildir-like folder and message keys, in a folder of their own for each
    run, in the order a job sends them.
    """
    folder = f".Archive.{run}"
    return [
        (folder, f"/{1600000000 + i}.M{i}P4242.mailhost.example.com,S=12345:2,S")
        for i in range(count)
    ]


def _timeRun(
    store: SQLiteStateStore,
    job: str,
    keys: Sequence[tuple[str, str]],
    batch: int,
    recordEvery: int,
    journal: bool,
) -> tuple[float, float, float]:
    """
    Record the outcomes of C{keys}, sent in batches of C{batch} and
    recorded every C{recordEvery} outcomes, journaling each batch first if
    C{journal}.

    @return: the wall-clock and the CPU seconds it took, and the
        wall-clock seconds spent in C{journalBatch}.
    """
    outcomes = [
        MessageOutcome(folder, key, _MAILBOX, 12345, 1700000000, uid + 1)
        for uid, (folder, key) in enumerate(keys)
    ]
    heads = [key.encode("ascii")[:8] for _, key in keys]
    pending: list[MessageOutcome] = []
    settled: list[int] = []
    inJournal = 0.0
    started = time.perf_counter()
    startedCPU = time.process_time()
    for start in range(0, len(keys), batch):
        if journal:
            messages = [
                JournalMessage(keys[i][0], keys[i][1], 12345, heads[i])
                for i in range(start, min(start + batch, len(keys)))
            ]
            before = time.perf_counter()
            entryId = _done(store.journalBatch(job, _MAILBOX, 1700000000, start + 1, messages))
            inJournal += time.perf_counter() - before
            settled.append(entryId)
        pending.extend(outcomes[start : start + batch])
        if len(pending) >= recordEvery:
            _done(store.recordOutcomes(job, pending, settled))
            pending, settled = [], []
    if pending or settled:
        _done(store.recordOutcomes(job, pending, settled))
    return time.perf_counter() - started, time.process_time() - startedCPU, inJournal


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the benchmark and print its table.
    """
    parser = argparse.ArgumentParser(description="What the in-flight journal costs.")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--prefill", type=int, default=100_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="imapmig-journal-bench-")
    path = os.path.join(directory, "state.sqlite")
    store = SQLiteStateStore(path, seconds=time.time)
    try:
        _timeRun(store, "prefill", _keys(0, args.prefill), 50, _RECORDER_BATCH, False)
        print(
            f"{args.messages} messages in batches of {args.batch}, {args.prefill} outcomes"
            f" recorded before; medians of {args.repeat} runs, microseconds per message"
        )
        print(
            f"{'recorded every':>14} | {'wall: outcomes':>14} {'+journal':>9} {'journal':>8}"
            f" | {'CPU: outcomes':>13} {'+journal':>9} {'journal':>8} | {'journalBatch':>12}"
        )
        run = 0
        for recordEvery in (args.batch, _RECORDER_BATCH):
            # plain wall, plain CPU, journaled wall, journaled CPU, in
            # journalBatch
            samples: tuple[list[float], ...] = ([], [], [], [], [])
            for repetition in range(args.repeat):
                # Alternate which goes first, so that a drift (the file
                # growing, the machine's load) falls on both alike.
                for journal in (False, True) if repetition % 2 else (True, False):
                    run += 1
                    wall, cpu, inJournal = _timeRun(
                        store, "job", _keys(run, args.messages), args.batch, recordEvery, journal
                    )
                    samples[2 * journal].append(wall * 1e6 / args.messages)
                    samples[2 * journal + 1].append(cpu * 1e6 / args.messages)
                    if journal:
                        samples[4].append(inJournal * 1e6 / args.messages)
            leftover = _done(store.journal("job"))
            assert leftover == [], leftover
            a, b, c, d, e = (statistics.median(each) for each in samples)
            print(
                f"{recordEvery:>14} | {a:>14.2f} {c:>9.2f} {c - a:>8.2f}"
                f" | {b:>13.2f} {d:>9.2f} {d - b:>8.2f} | {e:>12.2f}"
            )
    finally:
        store.close()
        if args.dir is None:
            shutil.rmtree(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
