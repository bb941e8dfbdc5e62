# -*- test-case-name: tests.test_bench -*-
"""
The server-to-server part of the benchmark (C{--parts s2s}, issue 17 point
6): an IMAP account copied into another, side by side in one run.

Two private Dovecots on tmpfs, on loopback: the source, holding the corpus
in one account (loaded as a Maildir into its home, read-only for every
client) and an empty account (for each client's start-up), and the
destination, where every run writes into a fresh account whose message
count is checked afterwards.  The clients (L{bench.contenders.S2S_CLIENTS}):

  - imapmig-s2s: imapmig with its defaults, an IMAP source;
  - dsync: C{doveadm backup -R -u USER imapc:} run against the destination
    Dovecot's configuration (Dovecot's own migration recipe: it reads the
    source through imapc and writes the destination's store directly, not
    over IMAP);
  - raw-s2s: L{bench.clients.s2s_raw}, a folder fetched whole with one UID
    FETCH, then written with pipelined MULTIAPPENDs (the ceiling of plain
    IMAP without overlap).

Every client runs once per repetition, interleaved, so the load of the
(shared) machine weighs on all alike.  Before the first timed run the
source is read once by dsync (a warm-up run, not recorded), so that no
client pays for building the source's indexes or for its first listing of
the messages' sizes.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import TYPE_CHECKING

from bench.contenders import CONTENDERS, SourceAccount
from bench.corpora import emptyCorpus
from bench.servers import BenchServer

if TYPE_CHECKING:
    from bench.run import Bench, Job


def tmpfsServer(bench: Bench, name: str, accounts: int, part: str = "s2s") -> tuple[BenchServer, str]:
    """
    A private Dovecot on loopback with its mail on tmpfs, not started, for
    C{part}'s rows; and its base directory, to remove after.
    """
    base = tempfile.mkdtemp(prefix=f"dovecot-{part}-{name}-", dir=bench.workDir)
    mailRoot = tempfile.mkdtemp(prefix=f"imapmig-{part}-{name}-", dir="/dev/shm")
    server = BenchServer(base, accounts=accounts, fsync=False, mailRoot=mailRoot,
                         capabilities=None, compress=False, namespace=None,
                         address="127.0.0.1", inNamespace=None)  # fmt: skip
    return server, base


def runServerToServer(bench: Bench, job: Job) -> None:
    """
    Run the clients of C{job} (part C{s2s}) C{--runs} times, interleaved,
    each once on the corpus and then C{--empty-runs} times on an empty
    source account, and record every run.
    """
    from bench.run import LOOPBACK, runKinds

    setting = job.setting
    runs = bench.args.runs
    corpus = bench.corpus(setting.corpus, job.messages)
    empty = emptyCorpus(bench.workDir)
    source, sourceBase = tmpfsServer(bench, "source", 3)
    destination, destinationBase = tmpfsServer(
        bench, "destination", len(job.clients) * runs * (1 + bench.args.empty_runs) + 3
    )
    print(f"== s2s: loopback, tmpfs, {setting.corpus} corpus ({corpus.messages} messages), "
          "IMAP source into IMAP destination", flush=True)  # fmt: skip
    try:
        source.start()
        destination.start()
        full, nothing = source.freshAccount(), source.freshAccount()
        source.loadMaildir(full, corpus.path)
        source.loadMaildir(nothing, empty.path)
        accounts = {
            "full": SourceAccount(source.host, source.port, full, destination.configPath),
            "empty": SourceAccount(source.host, source.port, nothing, destination.configPath),
        }
        # The warm-up: Dovecot builds the source's indexes on first read,
        # and computes the messages' RFC822.SIZE (the corpus's file names
        # carry none) on their first listing, then keeps them: dsync lists
        # with sizes, as imapmig does, so that no timed run pays them (0.3 s
        # of the source's CPU, bench/results/s2s.md "Third round"; the raw
        # client, which does not list, left them to the first imapmig run).
        bench.runOnce(LOOPBACK, destination, setting, CONTENDERS["dsync"], "full", corpus,
                      -1, source=accounts["full"])  # fmt: skip
        for repetition in range(runs):
            for name in job.clients:
                contender = CONTENDERS[name]
                for kind, built in runKinds(corpus, empty, bench.args.empty_runs):
                    result = bench.runOnce(LOOPBACK, destination, setting, contender, kind,
                                           built, repetition, source=accounts[kind])  # fmt: skip
                    bench.record(result)
    finally:
        source.stop()
        destination.stop()
        shutil.rmtree(sourceBase, ignore_errors=True)
        shutil.rmtree(destinationBase, ignore_errors=True)
