# -*- test-case-name: tests.test_bench -*-
"""
From the benchmark's individual runs to its figures: medians net of
start-up, ratios to the raw ceiling, the Markdown table and the chart.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence

from attrs import frozen

from bench.contenders import CONTENDERS


@frozen
class Setting:
    """
    What one group of runs shares.

    @ivar part: C{"main"}, C{"servers"}, C{"compress"} or C{"nagle"}.
    @ivar store: C{"disk"} or C{"tmpfs"}.
    @ivar rttMs: the round-trip time added by the delay line (0: loopback).
    @ivar rateBitsPerSecond: the delay line's rate limit, if any.
    @ivar corpus: C{"realistic"} or C{"small"}.
    @ivar server: the server variant's name.
    @ivar serverCompress: the server offers COMPRESS=DEFLATE.
    @ivar nagle: the server runs with C{bench/naglekeep.c} preloaded, which
        ignores its C{TCP_NODELAY} and C{TCP_CORK}: a server that leaves
        Nagle's algorithm on.
    @ivar tls: how the clients reach the servers (part C{tls}): C{"none"},
        C{"implicit"} or C{"starttls"}.
    """

    part: str
    store: str
    rttMs: float
    rateBitsPerSecond: int | None
    corpus: str
    server: str
    serverCompress: bool = False
    nagle: bool = False
    tls: str = "none"

    def link(self) -> str:
        """
        The link, for the table: C{loopback}, C{20 ms}, C{20 ms, 20 Mbit/s},
        C{loopback, server Nagle on}.
        """
        if self.tls != "none":
            return f"loopback, {self.tls} TLS"
        if not self.rttMs and self.rateBitsPerSecond is None:
            return "loopback, server Nagle on" if self.nagle else "loopback"
        text = f"{self.rttMs:g} ms"
        if self.rateBitsPerSecond is not None:
            text += f", {self.rateBitsPerSecond / 1e6:g} Mbit/s"
        return text


@frozen
class RunResult:
    """
    One run of one client.

    @ivar setting: where it ran.
    @ivar client: the contender's name.
    @ivar kind: C{"full"} (the corpus) or C{"empty"} (start-up only).
    @ivar repetition: which repetition, from 0.
    @ivar messages: messages in the Maildir it was given.
    @ivar octets: their size with CRLF line endings.
    @ivar seconds: wall-clock time of the whole process.
    @ivar maxRssKiB: its peak resident set size (C{ru_maxrss}).
    @ivar userSeconds: its user CPU time.
    @ivar systemSeconds: its system CPU time.
    @ivar exitStatus: its exit status (negative: killed by that signal).
    @ivar counted: messages found in the account afterwards (STATUS), or
        L{None} when not counted.
    @ivar ok: it exited 0 and every message arrived.
    @ivar problem: what went wrong, or C{""}.
    """

    setting: Setting
    client: str
    kind: str
    repetition: int
    messages: int
    octets: int
    seconds: float
    maxRssKiB: int
    userSeconds: float
    systemSeconds: float
    exitStatus: int
    counted: int | None
    ok: bool
    problem: str


@frozen
class Figure:
    """
    One line of the table: a client in a setting.

    @ivar setting: where.
    @ivar client: the contender's name.
    @ivar messages: messages per run.
    @ivar runs: successful full runs.
    @ivar failed: failed runs (full or empty).
    @ivar startupSeconds: median start-up (empty Maildir) time.
    @ivar netSeconds: median time net of start-up.
    @ivar messagesPerSecond: median rate net of start-up.
    @ivar megabytesPerSecond: median throughput net of start-up (10^6 octets).
    @ivar peakRssMiB: the largest peak RSS of its full runs.
    @ivar ceilingRatio: its rate over the best raw writer's in the same
        setting, or L{None}.
    """

    setting: Setting
    client: str
    messages: int
    runs: int
    failed: int
    startupSeconds: float
    netSeconds: float
    messagesPerSecond: float
    megabytesPerSecond: float
    peakRssMiB: float
    ceilingRatio: float | None


def figures(results: Iterable[RunResult]) -> list[Figure]:
    """
    Reduce the runs to one figure per client and setting: each run's time
    net of the client's median start-up, the median of the rates, and the
    ratio to the fastest raw writer of the same setting.

    @param results: every run.
    @return: the figures, in the order their settings and clients first
        appear.
    """
    groups: dict[tuple[Setting, str], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.setting, result.client), []).append(result)
    partial = []
    for (setting, client), runs in groups.items():
        full = [r for r in runs if r.kind == "full" and r.ok]
        empty = [r for r in runs if r.kind == "empty" and r.ok]
        failed = sum(1 for r in runs if not r.ok)
        if not full:
            partial.append(
                Figure(setting, client, runs[0].messages, 0, failed, 0.0, 0.0, 0.0, 0.0, 0.0, None)
            )
            continue
        startup = statistics.median(r.seconds for r in empty) if empty else 0.0
        nets = [max(r.seconds - startup, 1e-3) for r in full]
        messages = full[0].messages
        octets = full[0].octets
        rates = [messages / net for net in nets]
        net = statistics.median(nets)
        partial.append(
            Figure(
                setting=setting,
                client=client,
                messages=messages,
                runs=len(full),
                failed=failed,
                startupSeconds=startup,
                netSeconds=net,
                messagesPerSecond=statistics.median(rates),
                megabytesPerSecond=octets / net / 1e6,
                peakRssMiB=max(r.maxRssKiB for r in full) / 1024,
                ceilingRatio=None,
            )
        )
    ceilings: dict[Setting, float] = {}
    for figure in partial:
        if CONTENDERS[figure.client].raw and figure.runs:
            ceilings[figure.setting] = max(
                ceilings.get(figure.setting, 0.0), figure.messagesPerSecond
            )
    complete = []
    for figure in partial:
        ceiling = ceilings.get(figure.setting)
        ratio = figure.messagesPerSecond / ceiling if ceiling and figure.runs else None
        complete.append(
            Figure(
                figure.setting,
                figure.client,
                figure.messages,
                figure.runs,
                figure.failed,
                figure.startupSeconds,
                figure.netSeconds,
                figure.messagesPerSecond,
                figure.megabytesPerSecond,
                figure.peakRssMiB,
                ratio,
            )
        )
    return complete


def shortNumber(value: float) -> str:
    """
    A rate or size for a table: no decimals from 100 up (with thousands
    separators), one from 10, two below.

    @param value: the number.
    """
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def markdownTable(rows: Sequence[Figure], *, showServer: bool = False) -> str:
    """
    A Markdown table of figures.

    @param rows: the figures, in table order.
    @param showServer: add a column naming the server variant.
    """
    header = ["client", "RTT / link", "corpus", "store"]
    if showServer:
        header.append("server")
    header += ["messages", "messages/s", "MB/s", "× raw ceiling", "peak RSS (MB)",
               "start-up (s)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for figure in rows:
        contender = CONTENDERS[figure.client]
        label = contender.label + (f" ({contender.note})" if contender.note else "")
        cells = [label, figure.setting.link(), figure.setting.corpus, figure.setting.store]
        if showServer:
            cells.append(figure.setting.server)
        if not figure.runs:
            cells += [str(figure.messages), "FAILED", "", "", "", ""]
        else:
            ratio = "" if figure.ceilingRatio is None else f"{figure.ceilingRatio:.2f}"
            if contender.raw and figure.ceilingRatio is not None and figure.ceilingRatio >= 0.9995:
                ratio = "**1.00** (ceiling)"
            cells += [
                str(figure.messages),
                shortNumber(figure.messagesPerSecond),
                shortNumber(figure.megabytesPerSecond),
                ratio,
                f"{figure.peakRssMiB:.0f}",
                f"{figure.startupSeconds:.2f}",
            ]
            if figure.failed:
                cells[-6] += f" ({figure.failed} failed runs)"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def drawChart(rows: Sequence[Figure], path: str, order: Sequence[str]) -> bool:
    """
    Draw messages/s by client (groups) and RTT (bars), one panel per store
    and corpus, on a log scale, as a PNG.

    @param rows: the main matrix's figures.
    @param path: the PNG to write.
    @param order: client names in display order.
    @return: whether a chart was drawn (matplotlib present, data present).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [f for f in rows if f.runs]
    if not rows:
        return False
    panels = sorted({(f.setting.store, f.setting.corpus) for f in rows})
    links = sorted({(f.setting.rttMs, f.setting.link()) for f in rows})
    clients = [c for c in order if any(f.client == c for f in rows)]
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(max(8.0, 1.1 * len(clients) + 2), 4.2 * len(panels)),
        squeeze=False,
    )  # fmt: skip
    width = 0.8 / max(1, len(links))
    for axis, (store, corpus) in zip(axes[:, 0], panels):
        for index, (_rtt, link) in enumerate(links):
            xs, ys = [], []
            for position, client in enumerate(clients):
                for f in rows:
                    if (f.client, f.setting.store, f.setting.corpus, f.setting.link()) == (
                        client,
                        store,
                        corpus,
                        link,
                    ):
                        xs.append(position + (index - (len(links) - 1) / 2) * width)
                        ys.append(f.messagesPerSecond)
            if xs:
                axis.bar(xs, ys, width=width, label=link)
        axis.set_yscale("log")
        lowest = min(f.messagesPerSecond for f in rows if (f.setting.store, f.setting.corpus)
                     == (store, corpus))  # fmt: skip
        # Bars on a log scale start at the axis: put it at a round power of
        # ten so their lengths compare.
        axis.set_ylim(bottom=10 ** math.floor(math.log10(max(lowest, 1.0))))
        axis.set_ylabel("messages/s (log)")
        axis.set_title(f"{corpus} corpus, mail store on {store}")
        axis.set_xticks(range(len(clients)))
        axis.set_xticklabels(
            [CONTENDERS[c].label for c in clients], rotation=25, ha="right", fontsize=8
        )
        axis.grid(axis="y", which="both", alpha=0.3)
        axis.legend(title="RTT", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def spreadTable(results: Iterable[RunResult]) -> str:
    """
    How far the runs behind each figure of L{figures} lie apart: for each
    client and setting, its start-up (the empty runs: median, least and
    most, how many), its net rate's least and most among the full runs
    (each full run net of the median start-up) beside the median, and the
    client's own CPU (user and system, from C{wait4}) a full run takes net
    of an empty run's, both medians.  A figure whose start-up spreads as
    widely as its net time is a figure of the machine's load more than of
    the client.

    @param results: every run.
    @return: a Markdown table, or C{""} without a full run.
    """
    groups: dict[tuple[Setting, str], list[RunResult]] = {}
    for result in results:
        if result.ok:
            groups.setdefault((result.setting, result.client), []).append(result)
    lines = []
    for (setting, client), runs in groups.items():
        full = [r for r in runs if r.kind == "full"]
        empty = [r for r in runs if r.kind == "empty"]
        if not full:
            continue
        startups = [r.seconds for r in empty] or [0.0]
        startup = statistics.median(startups)
        rates = sorted(full[0].messages / max(r.seconds - startup, 1e-3) for r in full)
        fullCpu = statistics.median(r.userSeconds + r.systemSeconds for r in full)
        emptyCpu = (
            statistics.median(r.userSeconds + r.systemSeconds for r in empty) if empty else 0.0
        )
        lines.append(
            f"| {CONTENDERS[client].label} | {setting.link()}, {setting.corpus}, {setting.store}"
            f" | {startup:.3f} ({min(startups):.3f}-{max(startups):.3f}, {len(empty)})"
            f" | {shortNumber(statistics.median(rates))} ({shortNumber(rates[0])}-"
            f"{shortNumber(rates[-1])}, {len(full)})"
            f" | {fullCpu - emptyCpu:.3f} ({fullCpu:.3f} - {emptyCpu:.3f}) |"
        )
    if not lines:
        return ""
    header = [
        "| client | setting | start-up, s: median (least-most, empty runs) "
        "| messages/s net: median (least-most, full runs) "
        "| client CPU, s: full net of empty (full - empty, medians) |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(header + lines) + "\n"
