# -*- test-case-name: tests.test_bench_summary -*-
"""
Issue 31's acceptance in one table: C{summary.md} in the results directory,
one line per ratio (what is compared, the target, the measured figure from
the medians of the runs, met or missed, the commit, the date, the load
average at the start and end of the part that measured it), and README.md's
"Speed" section copied from it.

    .venv/bin/python -m bench.summary --readme   # README's table from bench/results/summary.md
    .venv/bin/python -m bench.summary --check    # exit 1 when they differ

C{python -m bench.run} calls L{writeSummary} at the end of every run: the
lines the run measured replace the file's, the others are kept as the file
had them (each with its own commit, date and load), so a run of one part
(C{--parts tls}, C{--bigaccount}) updates only its lines, and a line never
measured says so.

Why a module of its own: C{results.md} is one run's whole table, rewritten
by each run, and L{bench.report} reduces one part's runs to figures; this
reads the figures of several parts (L{bench.report}'s, L{bench.scale}'s,
L{bench.bigaccount}'s) against a file kept from one run to the next, and
writes the README, which nothing else in C{bench/} touches.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from attrs import frozen

if TYPE_CHECKING:
    from bench.bigaccount import BigRow
    from bench.report import Figure
    from bench.scale import ScaleFigure

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = os.path.join(REPOSITORY, "bench", "results", "summary.md")
README = os.path.join(REPOSITORY, "README.md")
README_BEGIN = "<!-- bench/results/summary.md: python -m bench.summary --readme rewrites this table -->"
README_END = "<!-- end of bench/results/summary.md -->"

NEVER = "never measured"
MET = "met"
MISSED = "**missed**"

_TLS_NAMES = {"implicit": "implicit TLS", "starttls": "STARTTLS"}
_TLS_RATIOS = (
    ("1 connection: imapmig / raw", "1 connection"),
    ("2 connections: imapmig / raw", "2 connections"),
    ("IMAP to IMAP: imapmig / dsync", "IMAP to IMAP"),
)
_LAYOUTS = {
    "spread": "spread over 20 folders",
    "one": "in one folder",
    "spread-imap": "spread over 20 folders, from IMAP",
    "one-imap": "in one folder, from IMAP",
}
BIG_SIZE = 500_000
# The acceptance's figures are of 5,000 messages, medians of 3 runs or more:
# a smaller run's lines say they judge nothing.
MESSAGES = 5000
RUNS = 3
# The figures that hold (issue 31: start-up 0.32 s, 200 accounts at 2.3x
# mbsync's Group, 10,000 queued jobs: first message at 1.6 s, 122 MB) stay
# where they are: within 10% of them, the issue's own tolerance for TLS and
# for CPU per message as an account grows.
HOLD_STARTUP_S = 0.35
HOLD_GROUP_RATIO = 2.1
HOLD_FIRST_MESSAGE_S = 1.8
HOLD_QUEUED_RSS_MB = 134


TWO_CONNECTIONS = "Maildir → IMAP, 2 connections: imapmig / raw writer with 2"
ONE_CONNECTION = "Maildir → IMAP, 1 connection: imapmig / raw writer with 1"
# imapmig's MULTIAPPEND batch is 200 messages, the raw writer's of the
# acceptance 50: the same writer with imapmig's batch is shown beside.
TWO_SAME_BATCH = "Maildir → IMAP, 2 connections: imapmig / raw writer with 2, MULTIAPPEND 200 as imapmig"
ONE_SAME_BATCH = "Maildir → IMAP, 1 connection: imapmig / raw writer with 1, MULTIAPPEND 200 as imapmig"
SERVER_TO_SERVER = "IMAP → IMAP: imapmig / `doveadm backup -R imapc:`"
STARTUP = "Start-up, `twistd -n imapmig`, one empty job"
ACCOUNTS = "200 accounts: imapmig / mbsync over a Group"
FIRST_MESSAGE = "10,000 queued jobs: first message stored"
QUEUED_RSS = "10,000 queued jobs: peak RSS"
_BIG_ITEMS = {
    "cpu": ("CPU per message / 5,000's", "≤ 1.10x"),
    "rss": ("peak RSS", "< 500 MB"),
    "delta": ("delta pass", "< 5 s"),
    "raw": ("imapmig's rate / the raw client's", "beside"),
}


def tlsWhat(mode: str, short: str) -> str:
    """
    The line of one ratio (C{short}: L{_TLS_RATIOS}) over one TLS mode.
    """
    return f"{short} over {_TLS_NAMES[mode]}: its ratio / the plain-TCP ratio"


def bigWhat(layout: str, item: str) -> str:
    """
    The line of one figure (C{item}: L{_BIG_ITEMS}) of the 500,000-message
    row of C{layout}.
    """
    name = _BIG_ITEMS[item][0]
    if layout.endswith("-imap") and item == "raw":
        name = "imapmig's rate / `doveadm backup -R imapc:`'s"
    return f"{BIG_SIZE:,} messages {_LAYOUTS[layout]}: {name}"


def _catalog() -> list[tuple[str, str]]:
    lines = [(TWO_CONNECTIONS, "≥ 0.95x"), (ONE_CONNECTION, "≥ 1.0x"),
             (TWO_SAME_BATCH, "beside"), (ONE_SAME_BATCH, "beside"),
             (SERVER_TO_SERVER, "≥ 1.1x")]  # fmt: skip
    lines += [(tlsWhat(mode, short), "≥ 0.90x") for mode in _TLS_NAMES for _, short in _TLS_RATIOS]
    lines += [(bigWhat(layout, item), target)
              for layout in _LAYOUTS for item, (_, target) in _BIG_ITEMS.items()]  # fmt: skip
    return lines + [
        (STARTUP, f"≤ {HOLD_STARTUP_S} s (0.32 s)"),
        (ACCOUNTS, f"≥ {HOLD_GROUP_RATIO}x (2.3x)"),
        (FIRST_MESSAGE, f"≤ {HOLD_FIRST_MESSAGE_S} s (1.6 s)"),
        (QUEUED_RSS, f"≤ {HOLD_QUEUED_RSS_MB} MB (122 MB)"),
    ]


CATALOG = _catalog()
"""
Every line of the table, in order: what is compared, and the target.
"""

HEADER = ("what is compared", "target", "measured", "verdict", "commit", "date (UTC)",
          "load average, start → end", "from")  # fmt: skip


@frozen
class PartRecord:
    """
    When a part of the benchmark ran and how busy the machine was.

    @ivar part: its name (C{main}, C{tls}, C{bigaccount}, ...).
    @ivar started: when it started, UTC, C{YYYY-MM-DD HH:MM}.
    @ivar seconds: how long it took.
    @ivar loadBefore: the load average (1, 5, 15 minutes) at its start.
    @ivar loadAfter: the load average at its end.
    """

    part: str
    started: str
    seconds: float
    loadBefore: tuple[float, float, float]
    loadAfter: tuple[float, float, float]

    def load(self) -> str:
        """
        The 1-minute load average at its start and end: C{"1.02 → 1.35"}.
        """
        return f"{self.loadBefore[0]:.2f} → {self.loadAfter[0]:.2f}"


class PartClock:
    """
    Times the parts of one run: L{timed} around each stretch of a part's
    work (a part may run in several, one per network); a part's record
    keeps its first start, its summed time and the load at its last end.

    @ivar records: the parts timed so far, by name.
    """

    def __init__(self, loadAverage: Callable[[], tuple[float, float, float]] = os.getloadavg,
                 now: Callable[[], datetime.datetime] | None = None,
                 monotonic: Callable[[], float] | None = None) -> None:  # fmt: skip
        self._loadAverage = loadAverage
        self._now = now or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self._monotonic = monotonic or time.monotonic
        self.records: dict[str, PartRecord] = {}

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """
        Time one stretch of C{part}'s work.
        """
        before = self._loadAverage()
        started = self._now().strftime("%Y-%m-%d %H:%M")
        start = self._monotonic()
        try:
            yield
        finally:
            seconds = self._monotonic() - start
            after = self._loadAverage()
            earlier = self.records.get(part)
            if earlier is not None:
                started, before = earlier.started, earlier.loadBefore
                seconds += earlier.seconds
            self.records[part] = PartRecord(part, started, seconds, before, after)
            print(f"  part {part}: {seconds / 60:.1f} minutes so far, load average "
                  f"{before[0]:.2f} at its start, {after[0]:.2f} now", flush=True)  # fmt: skip


def partsTable(records: Mapping[str, PartRecord]) -> str:
    """
    The Markdown table of what each part cost and the load around it.
    """
    lines = ["| part | started (UTC) | minutes | load average at its start | at its end |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in records.values():
        lines.append(f"| {r.part} | {r.started} | {r.seconds / 60:.1f} | "
                     + ", ".join(f"{v:.2f}" for v in r.loadBefore) + " | "
                     + ", ".join(f"{v:.2f}" for v in r.loadAfter) + " |")  # fmt: skip
    return "\n".join(lines)


@frozen
class SummaryLine:
    """
    One line of C{summary.md}: one ratio or figure of the acceptance.
    """

    what: str
    target: str
    measured: str = NEVER
    verdict: str = ""
    commit: str = ""
    date: str = ""
    load: str = ""
    source: str = ""

    def cells(self) -> tuple[str, ...]:
        return (self.what, self.target, self.measured, self.verdict, self.commit, self.date,
                self.load, self.source)  # fmt: skip


@frozen
class RunContext:
    """
    What every line of one run shares: the commit, the command and the
    parts' records.
    """

    commit: str
    command: str
    parts: Mapping[str, PartRecord]

    def line(self, part: str, what: str, measured: str, ok: bool | None,
             unjudged: str = "—") -> SummaryLine:  # fmt: skip
        """
        The line C{what} as measured by C{part} of this run.

        @param ok: met, missed, or L{None}: a figure without a verdict.
        @param unjudged: the verdict of a figure without one (a figure
            shown beside, no target).
        """
        target = dict(CATALOG)[what]
        record = self.parts.get(part)
        verdict = unjudged if ok is None else (MET if ok else MISSED)
        return SummaryLine(what, target, measured, verdict, self.commit,
                           record.started if record else "", record.load() if record else "",
                           f"`{self.command.removeprefix('python -m ')}`, part {part}")  # fmt: skip


def _find(rows: Sequence[Figure], client: str, part: str, **where: object) -> Figure | None:
    for f in rows:
        if f.client == client and f.setting.part == part and all(
            getattr(f.setting, k) == v for k, v in where.items()
        ):
            return f
    return None


def _pair(rows: Sequence[Figure], ours: str, peer: str,
          places: Sequence[tuple[str, dict[str, object]]]) -> tuple[str, Figure, Figure] | None:  # fmt: skip
    # The first place (part and setting) holding both rows.
    for part, where in places:
        a, b = _find(rows, ours, part, **where), _find(rows, peer, part, **where)
        if a is not None and b is not None:
            return part, a, b
    return None


def _ratioText(a: Figure, b: Figure) -> tuple[str, float | None]:
    if not a.runs or not b.runs:
        return "failed runs (see results.md)", None
    ratio = a.messagesPerSecond / b.messagesPerSecond
    return (f"{ratio:.2f}x ({a.messagesPerSecond:,.0f} / {b.messagesPerSecond:,.0f} msg/s, "
            f"medians of {min(a.runs, b.runs)})", ratio)  # fmt: skip


def _judged(*rows: Figure) -> str | None:
    """
    L{None} when C{rows} are of the acceptance's size (L{MESSAGES}
    messages, medians of at least L{RUNS}); else the verdict saying why
    they judge nothing (a smoke run's figures are mostly start-up).
    """
    messages, runs = min(f.messages for f in rows), min(f.runs for f in rows)
    if messages >= MESSAGES and runs >= RUNS:
        return None
    return f"not judged ({messages:,} messages, {runs} run{'s' if runs != 1 else ''})"


_PLAIN: dict[str, object] = {"rttMs": 0.0, "store": "tmpfs", "corpus": "realistic", "server": "default",
          "tls": "none"}  # fmt: skip


def figureLines(rows: Sequence[Figure], context: RunContext) -> Iterator[SummaryLine]:
    """
    The lines of the Maildir, server-to-server and TLS ratios: from the
    main and s2s parts, else from the tls part's plain TCP; the TLS ones
    from the tls part.
    """
    yield from _plainLines(rows, context)
    yield from _tlsLines(rows, context)


def _plainLines(rows: Sequence[Figure], context: RunContext) -> Iterator[SummaryLine]:
    tlsPlain: tuple[str, dict[str, object]] = ("tls", {"tls": "none", "corpus": "realistic"})
    ratios: tuple[tuple[str, str, str, list[tuple[str, dict[str, object]]], float | None], ...] = (
        (TWO_CONNECTIONS, "imapmig", "raw-multi50-2", [("main", _PLAIN), tlsPlain], 0.95),
        (ONE_CONNECTION, "imapmig-1", "raw-multi50", [("main", _PLAIN), tlsPlain], 1.0),
        (TWO_SAME_BATCH, "imapmig", "raw-multi200-2", [("main", _PLAIN)], None),
        (ONE_SAME_BATCH, "imapmig-1", "raw-multi200", [("main", _PLAIN)], None),
        (SERVER_TO_SERVER, "imapmig-s2s", "dsync", [("s2s", {}), tlsPlain], 1.1),
    )
    for what, ours, peer, places, threshold in ratios:
        found = _pair(rows, ours, peer, places)
        if found is None:
            continue
        part, a, b = found
        text, ratio = _ratioText(a, b)
        unjudged = _judged(a, b)
        ok: bool | None = None
        if threshold is not None and (ratio is None or not unjudged):
            ok = ratio is not None and ratio >= threshold
        yield context.line(part, what, text, ok, unjudged or "—")


def _tlsLines(rows: Sequence[Figure], context: RunContext) -> Iterator[SummaryLine]:
    from bench.tlsrows import TOLERANCE, tlsRatios

    byMode = tlsRatios(rows)
    plain = byMode.get("none", {})
    for mode in _TLS_NAMES:
        for label, short in _TLS_RATIOS:
            value = byMode.get(mode, {}).get(label)
            if value is None or label not in plain:
                continue
            change = value / plain[label]
            unjudged = _judged(*(f for f in rows if f.setting.part == "tls" and f.runs
                                 and f.setting.tls in (mode, "none")))  # fmt: skip
            yield context.line("tls", tlsWhat(mode, short),
                               f"{change:.2f}x ({value:.2f} / {plain[label]:.2f}, medians)",
                               None if unjudged else change >= 1 - TOLERANCE,
                               unjudged or "—")  # fmt: skip


def bigLines(rows: Sequence[BigRow], context: RunContext) -> Iterator[SummaryLine]:
    """
    The lines of the 500,000-message rows (other sizes are no line of the
    acceptance), against the smallest row of the same layout.
    """
    from bench.bigaccount import CPU_RATIO_TARGET, DELTA_TARGET_S, RSS_TARGET_MB

    for row in rows:
        if row.messages != BIG_SIZE or row.layout not in _LAYOUTS:
            continue
        what = {item: bigWhat(row.layout, item) for item in _BIG_ITEMS}
        smallest = min((r for r in rows if r.layout == row.layout), key=lambda r: r.messages)
        reference = smallest.cpuPerMessageUs
        if smallest is row or reference <= 0:
            # No smaller row, or one whose CPU net of start-up is not
            # above zero: nothing to judge by.
            cpu = f"{row.cpuPerMessageUs:.1f} us; no fair {smallest.messages:,} reference"
            yield context.line("bigaccount", what["cpu"], cpu, None, "not judged")
        else:
            ratio = row.cpuPerMessageUs / reference
            yield context.line("bigaccount", what["cpu"],
                               f"{ratio:.2f}x ({row.cpuPerMessageUs:.1f} / {reference:.1f} us; "
                               f"{smallest.messages:,})", ratio <= CPU_RATIO_TARGET)  # fmt: skip
        rss = row.imapmig.maxRssMiB
        yield context.line("bigaccount", what["rss"], f"{rss:.0f} MB",
                           rss < RSS_TARGET_MB)  # fmt: skip
        delta = row.delta.seconds
        yield context.line("bigaccount", what["delta"],
                           f"{delta:.2f} s ({row.delta.maxRssMiB:.0f} MB)",
                           delta < DELTA_TARGET_S)  # fmt: skip
        rate = row.messages / row.imapmig.seconds
        raw = row.messages / row.raw.seconds
        yield context.line("bigaccount", what["raw"],
                           f"{rate / raw:.2f}x ({rate:,.0f} / {raw:,.0f} msg/s)", None)


def scaleLines(rows: Sequence[ScaleFigure], context: RunContext) -> Iterator[SummaryLine]:
    """
    The lines of the figures that hold: start-up, many accounts against
    mbsync's Group, queued jobs.
    """
    found = {f.row: f for f in rows if f.runs}
    startup = found.get("imapmig-startup")
    if startup is not None:
        yield context.line("scale", STARTUP,
                           f"{startup.seconds:.3f} s (median of {startup.runs})",
                           startup.seconds <= HOLD_STARTUP_S)  # fmt: skip
    many, group = found.get("imapmig-accounts"), found.get("mbsync-group")
    if many is not None and group is not None:
        how = "net of start-up"
        a, b = many.messagesPerSecond, group.messagesPerSecond
        if not (a and b):
            how, a, b = "whole processes", many.grossMessagesPerSecond, group.grossMessagesPerSecond
        size = f"{many.accounts} × {many.messages // max(many.accounts, 1)}"
        if a and b:
            yield context.line("scale", ACCOUNTS,
                               f"{a / b:.2f}x ({a:,.0f} / {b:,.0f} msg/s {how}, {size})",
                               a / b >= HOLD_GROUP_RATIO if size == "200 × 20" else None,
                               f"not judged ({size})")  # fmt: skip
    queued = found.get("imapmig-queued")
    if queued is not None and queued.firstMessageSeconds is not None:
        first = queued.firstMessageSeconds
        jobs = f"{queued.accounts:,} jobs"
        judged = queued.accounts == 10_000
        yield context.line("scale", FIRST_MESSAGE, f"{first:.2f} s ({jobs})",
                           first <= HOLD_FIRST_MESSAGE_S if judged else None,
                           f"not judged ({jobs})")  # fmt: skip
        peak = queued.peakRssMiB * 1.048576
        yield context.line("scale", QUEUED_RSS, f"{peak:.0f} MB ({jobs})",
                           peak <= HOLD_QUEUED_RSS_MB if judged else None,
                           f"not judged ({jobs})")  # fmt: skip


def readSummary(path: str) -> dict[str, SummaryLine]:
    """
    The lines of a C{summary.md} (none when it does not exist), by what
    they compare.
    """
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        table = tableOf(f.read())
    lines = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        if len(cells) == len(HEADER):
            lines[cells[0]] = SummaryLine(*cells)
    return lines


def merged(earlier: Mapping[str, SummaryLine], new: Sequence[SummaryLine]) -> list[SummaryLine]:
    """
    Every line of L{CATALOG} in order: this run's, else the earlier file's,
    else never measured.
    """
    byWhat = {line.what: line for line in new}
    return [byWhat.get(what) or earlier.get(what) or SummaryLine(what, target)
            for what, target in CATALOG]  # fmt: skip


def summaryMarkdown(lines: Sequence[SummaryLine]) -> str:
    """
    The text of C{summary.md}.
    """
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(line.cells()) + " |" for line in lines]
    return "\n".join([
        "# Issue 31's acceptance, side by side",
        "",
        "One line per ratio of issue 31's acceptance (`python -m bench.run` rewrites the lines "
        "a run measures and keeps the others; docs/benchmark.md says how each is measured). "
        "A ratio is imapmig's median rate over its peer's median rate, both measured in the "
        "same run, interleaved; over TLS, each ratio over its plain-TCP value in the same run. "
        "The load average (1 minute, 2 cores) at the start and end of the part that measured "
        "a line says how busy the machine was: a wall-clock figure taken at a load above "
        "about 2 settles nothing.",
        "",
        *table,
        "",
    ])  # fmt: skip


def writeSummary(resultsDir: str, new: Sequence[SummaryLine]) -> str:
    """
    Merge this run's lines into C{resultsDir}'s C{summary.md}; return its
    text.
    """
    path = os.path.join(resultsDir, "summary.md")
    text = summaryMarkdown(merged(readSummary(path), new))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def tableOf(text: str) -> str:
    """
    The first Markdown table of C{text}.
    """
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return "\n".join(rows)


README_COLUMNS = ("what is compared", "target", "measured", "verdict", "load average, start → end")


def readmeTable(lines: Iterable[SummaryLine]) -> str:
    """
    The table README.md shows of C{lines}: the commit, date and command of
    each line stay in C{summary.md}, which README links.
    """
    keep = [HEADER.index(name) for name in README_COLUMNS]
    table = ["| " + " | ".join(README_COLUMNS) + " |", "|" + "---|" * len(keep)]
    table += ["| " + " | ".join(line.cells()[i] for i in keep) + " |" for line in lines]
    return "\n".join(table)


def readmeWithTable(readme: str, table: str) -> str:
    """
    C{readme} with the text between its markers replaced by C{table}.
    """
    head, begin, rest = readme.partition(README_BEGIN)
    _, end, tail = rest.partition(README_END)
    if not begin or not end:
        raise ValueError(f"README.md lacks its markers {README_BEGIN!r} and {README_END!r}")
    return f"{head}{README_BEGIN}\n{table}\n{README_END}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """
    Rewrite (C{--readme}) or check (C{--check}) README.md's Speed table.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--readme", action="store_true")
    action.add_argument("--check", action="store_true")
    parser.add_argument("--summary", default=SUMMARY)
    parser.add_argument("--readme-path", default=README)
    args = parser.parse_args(argv)
    table = readmeTable(readSummary(args.summary).values())
    with open(args.readme_path, encoding="utf-8") as f:
        readme = f.read()
    wanted = readmeWithTable(readme, table)
    if args.check:
        if wanted != readme:
            print(f"{args.readme_path}'s Speed table is not {args.summary}'s: "
                  "python -m bench.summary --readme", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    with open(args.readme_path, "w", encoding="utf-8") as f:
        f.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
