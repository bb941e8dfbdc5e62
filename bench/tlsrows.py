# -*- test-case-name: tests.test_bench -*-
"""
The TLS part of the benchmark (C{--parts tls}, issue 31 point 3): the
Maildir-to-IMAP rows (imapmig with 1 and 2 connections against the raw
writer C{bench/rawappend.c} with as many) and the server-to-server row
(imapmig with an IMAP source against C{doveadm backup -R imapc:}) run over
each of C{--tls} (plain TCP, implicit TLS on Dovecot's imaps port, STARTTLS
on its plain port), side by side in one run, so that what TLS costs imapmig
is told apart from what it costs the server and its peers.

Why a module of its own: the main part starts one Dovecot per setting and
runs its clients there; here two Dovecots (the destination, and the source
of the server-to-server row) serve every mode at once, and every client of
every mode runs once per repetition, interleaved, so that the load of the
shared machine weighs on all alike.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Sequence

from bench.contenders import CONTENDERS, TLS_MODES, SourceAccount
from bench.corpora import emptyCorpus
from bench.report import Figure
from bench.s2s import tmpfsServer

if TYPE_CHECKING:
    from bench.run import Bench, Job

# The rows of the part: Maildir to IMAP, then IMAP to IMAP.
TLS_CLIENTS = ("imapmig-1", "raw-multi50", "imapmig", "raw-multi50-2", "imapmig-s2s", "dsync")
_SERVER_TO_SERVER = ("imapmig-s2s", "dsync")

# Each ratio of issue 31: (label, imapmig's row, its peer's row).
RATIOS = (
    ("1 connection: imapmig / raw", "imapmig-1", "raw-multi50"),
    ("2 connections: imapmig / raw", "imapmig", "raw-multi50-2"),
    ("IMAP to IMAP: imapmig / dsync", "imapmig-s2s", "dsync"),
)
# A ratio over TLS within this fraction of its plain-TCP value meets the
# issue's target.
TOLERANCE = 0.10


def runTLS(bench: Bench, jobs: Sequence[Job]) -> None:
    """
    Run the jobs of part C{tls} (one per mode of C{--tls}) C{--runs} times,
    interleaved by repetition, mode and client, each client once on the
    corpus and then C{--empty-runs} times on nothing (an empty Maildir or
    source account), and record every run.
    """
    from bench.run import LOOPBACK, runKinds

    runs = bench.args.runs
    empty = emptyCorpus(bench.workDir)
    setting = jobs[0].setting
    corpus = bench.corpus(setting.corpus, jobs[0].messages)
    accounts = sum(len(job.clients) for job in jobs) * runs * (1 + bench.args.empty_runs) + 5
    source, sourceBase = tmpfsServer(bench, "source", 3, part="tls")
    destination, destinationBase = tmpfsServer(bench, "destination", accounts, part="tls")
    print(f"== tls: loopback, tmpfs, {setting.corpus} corpus ({corpus.messages} messages), "
          f"modes {', '.join(job.setting.tls for job in jobs)}", flush=True)  # fmt: skip
    try:
        source.start()
        destination.start()
        full, nothing = source.freshAccount(), source.freshAccount()
        source.loadMaildir(full, corpus.path)
        source.loadMaildir(nothing, empty.path)

        def account(user: str, tls: str) -> SourceAccount:
            return SourceAccount(source.host, source.port, user, destination.configPath,
                                 tls=tls, tlsPort=source.tlsPort, caPath=source.caPath)  # fmt: skip

        # The warm-up: Dovecot builds the source's indexes on first read.
        bench.runOnce(LOOPBACK, destination, setting, CONTENDERS["dsync"], "full", corpus, -1,
                      source=account(full, "none"))  # fmt: skip
        for repetition in range(runs):
            for job in jobs:
                for name in job.clients:
                    for kind, built in runKinds(corpus, empty, bench.args.empty_runs):
                        sourceAccount = None
                        if name in _SERVER_TO_SERVER:
                            user = full if kind == "full" else nothing
                            sourceAccount = account(user, job.setting.tls)
                        result = bench.runOnce(LOOPBACK, destination, job.setting,
                                               CONTENDERS[name], kind, built, repetition,
                                               source=sourceAccount)  # fmt: skip
                        bench.record(result)
    finally:
        source.stop()
        destination.stop()
        shutil.rmtree(sourceBase, ignore_errors=True)
        shutil.rmtree(destinationBase, ignore_errors=True)


def tlsRatios(rows: Sequence[Figure]) -> dict[str, dict[str, float]]:
    """
    Each ratio of L{RATIOS} per TLS mode, from the figures of part C{tls}.

    @return: mode -> ratio label -> imapmig's rate over its peer's, for the
        ratios whose two rows both have runs.
    """
    rates = {
        (f.setting.tls, f.client): f.messagesPerSecond
        for f in rows if f.setting.part == "tls" and f.runs
    }  # fmt: skip
    ratios: dict[str, dict[str, float]] = {}
    for mode in TLS_MODES:
        for label, ours, peer in RATIOS:
            if (mode, ours) in rates and (mode, peer) in rates:
                ratios.setdefault(mode, {})[label] = rates[mode, ours] / rates[mode, peer]
    return ratios


def _rateCell(figure: Figure | None) -> str:
    if figure is None:
        return ""
    return f"{figure.messagesPerSecond:,.0f}" if figure.runs else "FAILED"


def tlsVerdicts(ratios: dict[str, dict[str, float]]) -> list[str]:
    """
    One line per ratio and TLS mode: its value beside its plain-TCP value
    and the verdict of issue 31 (met when no more than L{TOLERANCE} below).

    @param ratios: L{tlsRatios}'s answer.
    """
    plain = ratios.get("none", {})
    lines = []
    for mode in TLS_MODES[1:]:
        for label, _, _ in RATIOS:
            value = ratios.get(mode, {}).get(label)
            if value is None or label not in plain:
                continue
            change = value / plain[label] - 1
            lines.append(
                f"- {label} over {mode} TLS: {value:.2f} against {plain[label]:.2f} in plain "
                f"TCP ({change:+.0%}; target: at most {TOLERANCE:.0%} below): "
                + ("met" if change >= -TOLERANCE else "**missed**")
            )
    return lines


def tlsTable(rows: Sequence[Figure]) -> str:
    """
    The part's Markdown: messages per second of each row in each mode (net
    of start-up), then each ratio per mode, then L{tlsVerdicts}.

    @param rows: every figure (those of other parts are left out).
    """
    tls = [f for f in rows if f.setting.part == "tls"]
    modes = [m for m in TLS_MODES if any(f.setting.tls == m for f in tls)]
    byKey = {(f.setting.tls, f.client): f for f in tls}
    lines = ["| row | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for client in TLS_CLIENTS:
        cells = [_rateCell(byKey.get((mode, client))) for mode in modes]
        if any(cells):
            lines.append(f"| {CONTENDERS[client].label} | " + " | ".join(cells) + " |")
    ratios = tlsRatios(rows)
    lines += ["", "| ratio | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for label, _, _ in RATIOS:
        cells = [
            "" if label not in ratios.get(mode, {}) else f"{ratios[mode][label]:.2f}"
            for mode in modes
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + tlsVerdicts(ratios)) + "\n"
