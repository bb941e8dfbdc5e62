# -*- test-case-name: tests.test_bench -*-
"""
The figures and targets of the C{fleet} part of the benchmark (issue 30's
acceptance): a fleet of daemons sharing one PostgreSQL.  Nothing here
starts a process; L{bench.fleet_run} runs the rows and hands their
measurements over, and this module turns them into ratios, statistics'
differences, verdicts and the Markdown of C{bench/results/fleet.md}.

The rows and their targets (never adjusted; a figure that was not
measured is said so, never passed):

  scale-out    200 accounts through the delay line (20 ms round trip),
               each daemon capped at 4 connections: two daemons at least
               1.8x the rate of one, three at least 2.5x
  database     one daemon, one large mailbox: at most 1 commit per 100
               messages (C{pg_stat_database.xact_commit}), at most 1.2 row
               writes per message (C{pg_stat_user_tables}: inserted,
               updated and deleted rows), at most 3 connections at any
               sample (C{pg_stat_activity}); the heartbeat's cost flat
               from 1 to 1,000 held jobs (C{pg_stat_statements})
  million      a user list of 1,000,000 rows loaded once by imapmig (not
               by each daemon's start); each daemon's first message within
               5 s of its start, its peak RSS under 500 MB; claims,
               renewals (the heartbeat) and the dashboard's pages costing
               the same at a million jobs as at a thousand, the pages timed
               while the fleets run the same real accounts at both sizes
               (L{QUEUED_MESSAGES})
  sqlite       one daemon on SQLite, this tree against the commit before
               issue 30 (C{bench/sidebyside.py}): within +-5%

"Flat" and "the same" are read as: the figure at the larger size at most
L{SAME_COST} times the figure at the smaller, for the statements in
shared buffers touched per call (what a statement reads does not move
with the machine's load; its time per call is shown beside), for the
pages in median time per request.
"""

from __future__ import annotations

import os
import re
import statistics
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from attrs import frozen

SCALE_OUT_TARGETS = {2: 1.8, 3: 2.5}
"""
The least rate of N daemons, as a multiple of one daemon's.
"""

COMMITS_PER_MESSAGE_TARGET = 1 / 100
ROW_WRITES_PER_MESSAGE_TARGET = 1.2
CONNECTIONS_TARGET = 3
SAME_COST = 1.2
FIRST_MESSAGE_TARGET_S = 5.0
RSS_TARGET_MB = 500
SQLITE_TOLERANCE = 0.05

HEARTBEAT_MARKER = "WITH beat AS"
"""
What the heartbeat's statement holds (L{imapmig.queue.postgresql}).
"""

CLAIM_MARKER = "generation = j.generation +"
"""
What the claim's statement holds (C{pg_stat_statements} shows its
literals as C{$n}: C{'claimed'} is not in its text).
"""

PAGE_READ_MARKERS = (
    "to_jsonb(d) ->>",
    "j.name = ANY(",
    "FROM imapmig_queue.job_counts GROUP BY state",
    "WITH scanned AS MATERIALIZED",
)
"""
What the statements of the fleet's pages hold (L{imapmig.queue._pgfleetview}'s
C{DAEMONS}, C{HOLDERS}, C{COUNTS} and C{FIND_JOBS}: the daemons, the holders
of a page's jobs, the counts by state, a page of the fleet's jobs).
"""

QUEUED_MESSAGES = 300
"""
The messages of each real account of the million row's lists: enough that
every daemon still runs real accounts (none of the absent ones reached)
while the pages are asked, at either size, so that the pages are timed
with the fleets doing the same work.
"""

FLEET_ROWS = ("scaleout", "database", "million", "sqlite")


@frozen
class FleetSizes:
    """
    How large the part's rows are.

    @ivar rows: which rows run (L{FLEET_ROWS}).
    @ivar accounts: the scale-out row's accounts.
    @ivar perAccount: messages in each.
    @ivar daemons: the numbers of daemons of the scale-out row.
    @ivar rttMs: its delay line's round trip.
    @ivar connections: each daemon's connections to the server (its
        C{max_jobs}, jobs of one connection each; the server's
        C{max_connections} this times the daemons, of which a fleet gives
        each daemon a fair share).
    @ivar large: the database row's mailbox.
    @ivar held: the most jobs held in the heartbeat's comparison.
    @ivar queued: the million row's list.
    @ivar queuedSmall: the list it is compared with.
    @ivar queuedDaemons: the daemons started on it.
    @ivar baseline: the commit before issue 30, or a checkout of it.
    @ivar rounds: rounds of the SQLite side-by-side row.
    @ivar lease: the fleet's lease (seconds): the heartbeat every twelfth.
    @ivar reuseServerProcesses: the scale-out row's Dovecot in its
        high-performance mode (L{bench.servers.reusingSettings}, as many
        processes kept started as the most daemons' connections), for every
        number of daemons alike; else Dovecot's default, a login and an
        imap process forked per connection.
    """

    rows: tuple[str, ...] = FLEET_ROWS
    accounts: int = 200
    perAccount: int = 20
    daemons: tuple[int, ...] = (1, 2, 3)
    rttMs: float = 20.0
    connections: int = 4
    large: int = 20_000
    held: int = 1000
    queued: int = 1_000_000
    queuedSmall: int = 1000
    queuedDaemons: int = 3
    baseline: str = "2ee44a1"
    rounds: int = 5
    lease: int = 12
    reuseServerProcesses: bool = True


def writeUserList(path: str, rows: Iterable[tuple[str, str]]) -> None:
    """
    Write a CSV user list (C{destination_user,maildir}).
    """
    with open(path, "w") as f:
        f.write("destination_user,maildir\n")
        f.writelines(f"{account},{maildir}\n" for account, maildir in rows)


def fleetConfig(
    path: str,
    *,
    uri: str,
    databasePassword: str,
    imapPassword: str,
    host: str,
    port: int,
    userList: str,
    maildir: str,
    maxJobs: int,
    maxConnections: int,
    lease: int,
    status: str | None = None,
) -> str:
    """
    Write a fleet's configuration and return its path: the PostgreSQL
    C{state}, its password file, the C{fleet} section, one server with
    C{max_connections}, one job template of one connection over a user
    list.

    @param path: the file to write.
    @param uri: the database's URI.
    @param databasePassword: the file of its password.
    @param imapPassword: the file of the accounts' password.
    @param host: the IMAP server's address.
    @param port: its plain IMAP port.
    @param userList: the user list (relative to the file, or absolute).
    @param maildir: the template's Maildir (each row names its own).
    @param maxJobs: C{max_jobs}.
    @param maxConnections: the server's C{max_connections}.
    @param lease: C{fleet: lease}.
    @param status: C{status: listen}, or L{None} for C{status: off}.
    """
    lines = [
        f'state: "{uri}"',
        f"state_password_file: {databasePassword}",
        "fleet:",
        "  name: bench",
        f"  lease: {lease}",
        f'status: {{listen: "{status}"}}' if status else "status: off",
        f"max_jobs: {maxJobs}",
        "servers:",
        "  bench:",
        f'    endpoint: "tcp:{host}:{port}"',
        "    starttls: off",
        "    allow_plaintext: true",
        f"    max_connections: {maxConnections}",
        "jobs:",
        "  - name: fleet",
        f"    jobs_from: {userList}",
        f"    source: {{maildir: {maildir}}}",
        f"    destination: {{server: bench, password_file: {imapPassword}}}",
        "    connections: 1",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def queuedRows(accounts: Sequence[str], jobs: int, maildir: str) -> Iterator[tuple[str, str]]:
    """
    The million row's user list: the real accounts first, then accounts
    the server does not have (their jobs' logins fail, well after every
    daemon's first message).
    """
    for account in accounts:
        yield account, maildir
    for index in range(jobs - len(accounts)):
        yield f"absent{index:07d}", maildir


def verdict(met: bool) -> str:
    """
    A target's verdict as the results write it.
    """
    return "met" if met else "**missed**"


@frozen
class TableWrites:
    """
    The rows one table had written (C{pg_stat_user_tables}).

    @ivar table: C{schema.table}.
    @ivar inserted: C{n_tup_ins}.
    @ivar updated: C{n_tup_upd}.
    @ivar deleted: C{n_tup_del}.
    """

    table: str
    inserted: int
    updated: int
    deleted: int

    @property
    def total(self) -> int:
        """
        Every row write: inserted, updated and deleted.
        """
        return self.inserted + self.updated + self.deleted


@frozen
class DatabaseStats:
    """
    A database's counters at one moment, or the difference of two.

    @ivar commits: C{pg_stat_database.xact_commit}.
    @ivar tables: every user table's writes.
    """

    commits: int
    tables: tuple[TableWrites, ...]

    @property
    def rowWrites(self) -> int:
        """
        The row writes of every table.
        """
        return sum(t.total for t in self.tables)

    def minus(self, before: DatabaseStats) -> DatabaseStats:
        """
        What happened between C{before} and this: each counter's
        difference, a table absent before counted whole (it was made
        meanwhile), tables with no write left out.
        """
        earlier = {t.table: t for t in before.tables}
        tables = []
        for t in self.tables:
            b = earlier.get(t.table, TableWrites(t.table, 0, 0, 0))
            change = TableWrites(
                t.table, t.inserted - b.inserted, t.updated - b.updated, t.deleted - b.deleted
            )
            if change.total:
                tables.append(change)
        return DatabaseStats(self.commits - before.commits, tuple(tables))


@frozen
class StatementCost:
    """
    What a statement cost over a run (C{pg_stat_statements}, summed over
    its entries).

    @ivar calls: how many times it ran.
    @ivar totalMs: its execution time in all.
    @ivar blocks: shared buffers it touched (hit and read).
    """

    calls: int
    totalMs: float
    blocks: int

    @property
    def meanMs(self) -> float | None:
        """
        Milliseconds per call, or L{None} without a call.
        """
        return self.totalMs / self.calls if self.calls else None

    @property
    def blocksPerCall(self) -> float | None:
        """
        Shared buffers per call, or L{None} without a call.
        """
        return self.blocks / self.calls if self.calls else None

    def minus(self, before: StatementCost) -> StatementCost:
        """
        The cost between two readings.
        """
        return StatementCost(
            self.calls - before.calls, self.totalMs - before.totalMs, self.blocks - before.blocks
        )


NO_CALLS = StatementCost(0, 0.0, 0)


def statementCost(rows: Sequence[tuple[str, int, float, int]], marker: str) -> StatementCost:
    """
    The cost of the statements whose text holds C{marker}.

    @param rows: C{(query, calls, total_exec_time, shared_blks_hit +
        shared_blks_read)} of C{pg_stat_statements}, one database's.
    @param marker: a piece of the statement's text.
    """
    found = [row for row in rows if marker in row[0]]
    return StatementCost(
        sum(r[1] for r in found), sum(r[2] for r in found), sum(r[3] for r in found)
    )


def sameCost(small: float | None, large: float | None, tolerance: float = SAME_COST) -> bool:
    """
    Whether C{large} is the same cost as C{small}: at most C{tolerance}
    times it (both measured).
    """
    if small is None or large is None:
        return False
    return large <= max(small, 1e-9) * tolerance


# -- scale-out ---------------------------------------------------------------


@frozen
class ScaleOutRun:
    """
    One run of the scale-out row: C{daemons} daemons on one configuration,
    launched together, each with C{--exit-when-done}.

    @ivar daemons: how many daemons.
    @ivar repetition: which repetition, from 0.
    @ivar accounts: jobs (one account each).
    @ivar messages: messages in all.
    @ivar seconds: from the launch of the first to the exit of the last.
    @ivar peakRssKiB: the largest daemon's peak RSS.
    @ivar maxConnections: the most database connections of the daemons
        seen at once (C{pg_stat_activity}, all daemons together).
    @ivar commits: the database's commits during the run.
    @ivar rowWrites: its row writes during the run.
    @ivar ok: every daemon exited 0 and every account holds its messages.
    @ivar problem: what went wrong, or C{""}.
    @ivar kind: C{"full"}, every account; C{"empty"}, one job per daemon on
        an empty Maildir: the fleet's start-up (start, registration, a
        claim, a login, the drain seen, the exit) that the rates are net
        of, as elsewhere in the benchmark.
    @ivar exits: each daemon's exit, seconds after the first launch.
    @ivar daemonCpu: each daemon's user and system CPU seconds (C{wait4}).
    @ivar dovecotCpu: Dovecot's CPU seconds over the run (every process of
        the instance, with its reaped children's).
    @ivar postgresqlCpu: the database cluster's, the same way (every
        cluster process, with the backends it reaped).
    @ivar delayCpu: the delay line's.
    @ivar busyCpu: what the whole machine spent busy over the run, every
        core (C{/proc/stat}): the rest is other work than the row's.
    @ivar firstTransition: the first job transition the daemons recorded
        (the first claimed job started), seconds after the first launch.
    @ivar lastTransition: the last (the last job done).
    @ivar jobSeconds: the mean of each job's first to last transition
        (claimed to done).
    """

    daemons: int
    repetition: int
    accounts: int
    messages: int
    seconds: float
    peakRssKiB: int
    maxConnections: int
    commits: int
    rowWrites: int
    ok: bool
    problem: str
    kind: str = "full"
    exits: tuple[float, ...] = ()
    daemonCpu: tuple[float, ...] = ()
    dovecotCpu: float = 0.0
    postgresqlCpu: float = 0.0
    delayCpu: float = 0.0
    busyCpu: float = 0.0
    firstTransition: float = 0.0
    lastTransition: float = 0.0
    jobSeconds: float = 0.0


@frozen
class ScaleOutFigure:
    """
    The scale-out row's figure for one number of daemons.

    @ivar daemons: how many daemons.
    @ivar runs: successful runs on every account.
    @ivar failed: failed runs (empty ones too).
    @ivar seconds: the median of the successful runs' times.
    @ivar messagesPerSecond: messages over that median, or L{None}.
    @ivar startupSeconds: the median of the successful empty runs, or
        L{None}.
    @ivar netMessagesPerSecond: messages over the median net of the
        start-up, or L{None} (no empty run, or a run no longer than it).
    """

    daemons: int
    runs: int
    failed: int
    seconds: float
    messagesPerSecond: float | None
    startupSeconds: float | None = None
    netMessagesPerSecond: float | None = None


def scaleOutFigures(runs: Sequence[ScaleOutRun]) -> list[ScaleOutFigure]:
    """
    One figure per number of daemons, in increasing order: the median time
    of its successful runs, and net of the median of its empty runs.
    """
    byCount: dict[int, list[ScaleOutRun]] = {}
    for run in runs:
        byCount.setdefault(run.daemons, []).append(run)
    result = []
    for daemons in sorted(byCount):
        good = [r for r in byCount[daemons] if r.ok and r.kind == "full"]
        empty = [r.seconds for r in byCount[daemons] if r.ok and r.kind == "empty"]
        failed = sum(1 for r in byCount[daemons] if not r.ok)
        if not good:
            result.append(ScaleOutFigure(daemons, 0, failed, 0.0, None))
            continue
        seconds = statistics.median(r.seconds for r in good)
        rate = good[0].messages / seconds if seconds > 0 else None
        startup = statistics.median(empty) if empty else None
        net = None
        if startup is not None and seconds > startup:
            net = good[0].messages / (seconds - startup)
        result.append(ScaleOutFigure(daemons, len(good), failed, seconds, rate, startup, net))
    return result


def scaleOutRatios(figures: Sequence[ScaleOutFigure], net: bool = True) -> dict[int, float]:
    """
    Each number of daemons' rate as a multiple of one daemon's (only
    those measured, and only when one daemon was).

    @param net: compare the rates net of start-up (else whole runs).
    """
    rates = {
        f.daemons: f.netMessagesPerSecond if net else f.messagesPerSecond
        for f in figures
    }  # fmt: skip
    one = rates.get(1)
    if not one:
        return {}
    return {daemons: rate / one for daemons, rate in rates.items() if rate}


def scaleOutLines(figures: Sequence[ScaleOutFigure], rttMs: float, connections: int) -> list[str]:
    """
    The scale-out targets, each checked on the rates net of start-up (the
    benchmark's way), the whole runs' ratio beside (or said not measured).
    """
    ratios, whole = scaleOutRatios(figures), scaleOutRatios(figures, net=False)
    found = {f.daemons: f for f in figures}
    lines = []
    for daemons, target in SCALE_OUT_TARGETS.items():
        figure, one = found.get(daemons), found.get(1)
        if daemons not in ratios or figure is None or one is None:
            lines.append(f"- {daemons} daemons against one, {rttMs:g} ms: not measured")
            continue
        lines.append(
            f"- {daemons} daemons against one ({rttMs:g} ms round trip, {connections} connections "
            f"per daemon): {ratios[daemons]:.2f}x net of start-up "
            f"({figure.netMessagesPerSecond or 0:,.0f} against "
            f"{one.netMessagesPerSecond or 0:,.0f} messages/s; whole runs "
            f"{whole.get(daemons, 0):.2f}x; target >= {target}): "
            f"{verdict(ratios[daemons] >= target)}"
        )
    return lines


def scaleOutTable(figures: Sequence[ScaleOutFigure], runs: Sequence[ScaleOutRun]) -> str:
    """
    The scale-out row's Markdown table.
    """
    ratios = scaleOutRatios(figures)
    header = ["daemons", "runs", "seconds (median)", "start-up (s)", "messages/s (whole)",
              "messages/s (net)", "x one daemon (net)", "peak RSS (MB)",
              "DB connections (most at once)", "commits", "row writes"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for f in figures:
        good = [r for r in runs if r.daemons == f.daemons and r.ok and r.kind == "full"]
        cells = [str(f.daemons), f"{f.runs}" + (f" ({f.failed} failed)" if f.failed else "")]
        if not good or f.messagesPerSecond is None:
            cells += ["FAILED"] + [""] * (len(header) - 3)
        else:
            cells += [
                f"{f.seconds:.2f}",
                "" if f.startupSeconds is None else f"{f.startupSeconds:.2f}",
                f"{f.messagesPerSecond:,.0f}",
                "" if f.netMessagesPerSecond is None else f"{f.netMessagesPerSecond:,.0f}",
                f"{ratios[f.daemons]:.2f}" if f.daemons in ratios else "",
                f"{max(r.peakRssKiB for r in good) * 1024 / 1e6:.0f}",
                str(max(r.maxConnections for r in good)),
                str(statistics.median(r.commits for r in good)),
                str(statistics.median(r.rowWrites for r in good)),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def scaleOutCpuTable(runs: Sequence[ScaleOutRun], slots: int) -> str:
    """
    Where the CPU of the scale-out row's full runs went, by process: the
    median over each number of daemons' successful runs of the daemons'
    CPU (all together; per job net of the median empty run's), Dovecot's,
    PostgreSQL's, the delay line's and the rest of the machine's, beside
    the core-seconds the run had (wall time x the cores); and its
    timeline: the first job's start, the last job's end (the daemons'
    clocks) and each daemon's exit (the first, second, ... to exit), in
    seconds after the first launch; a job's mean time from claimed to
    done, how busy the daemons' job slots (C{slots} each) were between the
    first start and the last end, and one daemon's span from the first
    start to the last end over this many daemons'.
    """
    header = ["daemons", "seconds", "core-s available", "busy (all)", "daemons CPU",
              "ms per job (net)", "Dovecot", "PostgreSQL", "delay line", "other work",
              "first job start (s)", "last job done (s)", "daemons' exits (s)",
              "job, claimed to done (s)", "slots busy", "x one daemon (jobs' span)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    byCount: dict[int, list[ScaleOutRun]] = {}
    for r in runs:
        if r.ok and r.daemonCpu:
            byCount.setdefault(r.daemons, []).append(r)
    full = {d: [r for r in rs if r.kind == "full"] for d, rs in byCount.items()}
    spans = {
        d: statistics.median(r.lastTransition - r.firstTransition for r in rs)
        for d, rs in full.items() if rs
    }  # fmt: skip
    for daemons in sorted(spans):
        cells = _cpuCells(byCount[daemons], daemons, slots)
        ratio = spans[daemons] and spans.get(1, 0.0) / spans[daemons]
        lines.append("| " + " | ".join(cells + [f"{ratio:.2f}" if ratio else ""]) + " |")
    return "\n".join(lines) + "\n"


def _cpuCells(measured: Sequence[ScaleOutRun], daemons: int, slots: int) -> list[str]:
    """
    L{scaleOutCpuTable}'s cells for C{daemons} daemons' full runs, net of
    their empty runs, among C{measured}.
    """
    good = [r for r in measured if r.kind == "full"]
    empty = [sum(r.daemonCpu) for r in measured if r.kind == "empty"]
    startup = statistics.median(empty) if empty else 0.0
    cores = os.cpu_count() or 1

    def median(value: Callable[[ScaleOutRun], float]) -> float:
        return statistics.median(value(r) for r in good)

    def busy(r: ScaleOutRun) -> float:
        # Of the daemons' job slots over the first job's start to the
        # last one's end, the share a claimed job held.
        span = (r.lastTransition - r.firstTransition) * slots * daemons
        return r.accounts * r.jobSeconds / span if span > 0 else 0.0

    def other(r: ScaleOutRun) -> float:
        return r.busyCpu - sum(r.daemonCpu) - r.dovecotCpu - r.postgresqlCpu - r.delayCpu

    return [
        str(daemons), f"{median(lambda r: r.seconds):.2f}",
        f"{median(lambda r: r.seconds * cores):.1f}", f"{median(lambda r: r.busyCpu):.1f}",
        f"{median(lambda r: sum(r.daemonCpu)):.2f}",
        f"{median(lambda r: 1000 * (sum(r.daemonCpu) - startup) / r.accounts):.1f}",
        f"{median(lambda r: r.dovecotCpu):.2f}", f"{median(lambda r: r.postgresqlCpu):.2f}",
        f"{median(lambda r: r.delayCpu):.2f}", f"{median(other):.2f}",
        f"{median(lambda r: r.firstTransition):.2f}", f"{median(lambda r: r.lastTransition):.2f}",
        ", ".join(f"{median(lambda r: sorted(r.exits)[i]):.2f}" for i in range(daemons)),
        f"{median(lambda r: r.jobSeconds):.3f}", f"{median(busy):.0%}",
    ]  # fmt: skip


# -- the database's cost -------------------------------------------------------


@frozen
class DatabaseCost:
    """
    The database row: one daemon migrating one large mailbox.

    @ivar messages: messages migrated.
    @ivar seconds: the daemon's whole run.
    @ivar stats: the database's counters' difference over the run.
    @ivar maxConnections: the most connections of the daemon seen at once.
    @ivar samples: how many times C{pg_stat_activity} was read.
    @ivar ok: the daemon exited 0 and the account holds every message.
    @ivar problem: what went wrong, or C{""}.
    """

    messages: int
    seconds: float
    stats: DatabaseStats
    maxConnections: int
    samples: int
    ok: bool
    problem: str

    @property
    def commitsPerMessage(self) -> float:
        """
        Commits per message migrated.
        """
        return self.stats.commits / self.messages if self.messages else float("inf")

    @property
    def rowWritesPerMessage(self) -> float:
        """
        Row writes per message migrated.
        """
        return self.stats.rowWrites / self.messages if self.messages else float("inf")


@frozen
class HeartbeatCost:
    """
    A daemon's heartbeats while it held about C{held} jobs.

    @ivar held: the jobs it was asked to hold (C{max_jobs}).
    @ivar heldSeen: the median of the claimed jobs counted while it ran.
    @ivar cost: its heartbeat statement's cost.
    @ivar problem: what went wrong, or C{""}.
    """

    held: int
    heldSeen: int
    cost: StatementCost
    problem: str = ""


def databaseLines(cost: DatabaseCost | None, heartbeats: Sequence[HeartbeatCost]) -> list[str]:
    """
    The database row's targets, each checked (or said not measured).
    """
    lines = []
    if cost is None or not cost.ok:
        why = f" ({cost.problem})" if cost is not None and cost.problem else ""
        lines.append(f"- Commits, row writes and connections per daemon: not measured{why}")
    else:
        lines += [
            f"- One daemon, one mailbox of {cost.messages:,} messages: {cost.stats.commits:,} "
            f"commits, {cost.commitsPerMessage * 100:.2f} per 100 messages (target <= 1): "
            f"{verdict(cost.commitsPerMessage <= COMMITS_PER_MESSAGE_TARGET)}",
            f"- The same run: {cost.stats.rowWrites:,} row writes, "
            f"{cost.rowWritesPerMessage:.3f} per message (target <= "
            f"{ROW_WRITES_PER_MESSAGE_TARGET}): "
            f"{verdict(cost.rowWritesPerMessage <= ROW_WRITES_PER_MESSAGE_TARGET)}",
            f"- The same run: at most {cost.maxConnections} connections at once in "
            f"{cost.samples} samples of pg_stat_activity (target <= {CONNECTIONS_TARGET}): "
            f"{verdict(0 < cost.maxConnections <= CONNECTIONS_TARGET)}",
        ]
    byHeld = {h.held: h for h in heartbeats if not h.problem and h.cost.calls}
    if len(byHeld) < 2:
        problems = "; ".join(h.problem for h in heartbeats if h.problem)
        lines.append("- Heartbeat cost from 1 to 1,000 held jobs: not measured"
                     + (f" ({problems})" if problems else ""))  # fmt: skip
        return lines
    low, high = byHeld[min(byHeld)], byHeld[max(byHeld)]
    flat = sameCost(low.cost.blocksPerCall, high.cost.blocksPerCall)
    lines.append(
        f"- Heartbeat holding {low.heldSeen:,} jobs: {low.cost.blocksPerCall or 0:.1f} buffers, "
        f"{low.cost.meanMs or 0:.3f} ms per call ({low.cost.calls} calls); holding "
        f"{high.heldSeen:,}: {high.cost.blocksPerCall or 0:.1f} buffers, "
        f"{high.cost.meanMs or 0:.3f} ms ({high.cost.calls} calls) (target: flat, at most "
        f"{SAME_COST}x the buffers): {verdict(flat)}"
    )
    return lines


def tableWritesTable(stats: DatabaseStats, messages: int) -> str:
    """
    The row writes of each table, per message: where the writes go.
    """
    lines = ["| table | inserted | updated | deleted | per message |", "|---|---|---|---|---|"]
    for t in sorted(stats.tables, key=lambda t: -t.total):
        share = t.total / messages if messages else 0.0
        lines.append(f"| {t.table} | {t.inserted:,} | {t.updated:,} | {t.deleted:,} | "
                     f"{share:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def statementsTable(rows: Sequence[tuple[str, int, float, int]], limit: int = 12) -> str:
    """
    The statements that ran most often (C{pg_stat_statements}), each
    with its calls, time and buffers: where the commits and writes come
    from.

    @param rows: as L{statementCost} takes them.
    @param limit: how many.
    """
    lines = ["| calls | ms in all | buffers | statement |", "|---|---|---|---|"]
    for query, calls, ms, blocks in sorted(rows, key=lambda r: (-r[1], r[0]))[:limit]:
        text = " ".join(query.split())
        text = (text[:117] + "...") if len(text) > 120 else text
        lines.append(f"| {calls:,} | {ms:,.1f} | {blocks:,} | `{text.replace('|', '/')}` |")
    return "\n".join(lines) + "\n"


# -- a million queued accounts -----------------------------------------------


@frozen
class DaemonStart:
    """
    One daemon's start in the million row.

    @ivar firstMessageSeconds: from its launch to the first message of a
        job it held being recorded as stored, or L{None}.
    @ivar peakRssKiB: its peak RSS (C{ru_maxrss}), 0 when unknown.
    @ivar problem: what went wrong, or C{""}.
    """

    firstMessageSeconds: float | None
    peakRssKiB: int
    problem: str = ""


@frozen
class QueuedRun:
    """
    The million row at one size of list.

    @ivar jobs: the rows of the user list.
    @ivar loadSeconds: how long C{imapmig state load-jobs} took, or
        L{None} when the list was not loaded apart.
    @ivar loadProblem: why not, or C{""}.
    @ivar insertedByStarts: job rows the daemons' starts inserted.
    @ivar starts: each daemon's start.
    @ivar claim: the claims' cost while they ran.
    @ivar heartbeat: the heartbeats' cost, from the daemons' first messages
        on (their first heartbeats left out).
    @ivar pages: the median milliseconds of each page asked.
    @ivar pagesLeast: the least milliseconds of each page asked: its own
        cost, without the wait behind the daemon's migration work that
        the median holds (the row's verdict; L{bench.fleet_run}'s
        C{_pages}).
    @ivar pageReads: the cost of the pages' statements (L{PAGE_READ_MARKERS})
        while they were asked.
    @ivar pagesHeld: the jobs the fleet held when the pages were first and
        last asked: the work the daemons did meanwhile.
    @ivar pagesFailed: the jobs failed by the last page (the absent
        accounts reached: 0 when the pages were timed on real accounts).
    """

    jobs: int
    loadSeconds: float | None
    loadProblem: str
    insertedByStarts: int
    starts: tuple[DaemonStart, ...]
    claim: StatementCost
    heartbeat: StatementCost
    pages: tuple[tuple[str, float], ...]
    pageReads: StatementCost = NO_CALLS
    pagesHeld: tuple[int, int] = (0, 0)
    pagesFailed: int = 0
    pagesLeast: tuple[tuple[str, float], ...] = ()


def pageReadCost(rows: Sequence[tuple[str, int, float, int]]) -> StatementCost:
    """
    The cost of the fleet's pages' statements (L{PAGE_READ_MARKERS}) among
    C{pg_stat_statements}' C{rows}.
    """
    costs = [statementCost(rows, marker) for marker in PAGE_READ_MARKERS]
    return StatementCost(sum(c.calls for c in costs), sum(c.totalMs for c in costs),
                         sum(c.blocks for c in costs))  # fmt: skip


def _held(run: QueuedRun) -> str:
    """
    The jobs held when the pages were first and last asked, in words.
    """
    first, last = run.pagesHeld
    return f"{first}" if first == last else f"{first}-{last}"


def queuedLines(large: QueuedRun | None, small: QueuedRun | None) -> list[str]:
    """
    The million row's targets, each checked (or said not measured).
    """
    if large is None:
        return ["- A million queued accounts: not measured"]
    lines = []
    size = f"{large.jobs:,}"
    if large.loadSeconds is None:
        lines.append(f"- {size} rows loaded by imapmig state load-jobs: not measured "
                     f"({large.loadProblem})")  # fmt: skip
    else:
        lines.append(
            f"- {size} rows loaded once by `imapmig state load-jobs` in {large.loadSeconds:.1f} s;"
            f" the daemons' starts inserted {large.insertedByStarts:,} job rows (target 0): "
            f"{verdict(large.insertedByStarts == 0)}"
        )
    for index, start in enumerate(large.starts):
        first = start.firstMessageSeconds
        if first is None:
            lines.append(f"- Daemon {index + 1} of {len(large.starts)}: no first message "
                         f"({start.problem or 'none recorded'}): **missed**")  # fmt: skip
        else:
            lines.append(f"- Daemon {index + 1} of {len(large.starts)}: first message after "
                         f"{first:.2f} s (target <= {FIRST_MESSAGE_TARGET_S:g} s): "
                         f"{verdict(first <= FIRST_MESSAGE_TARGET_S)}")  # fmt: skip
        if start.peakRssKiB:
            mb = start.peakRssKiB * 1024 / 1e6
            lines.append(f"- Daemon {index + 1}: peak RSS {mb:.0f} MB (target < {RSS_TARGET_MB} "
                         f"MB): {verdict(mb < RSS_TARGET_MB)}")  # fmt: skip
        else:
            lines.append(f"- Daemon {index + 1}: peak RSS not measured")
    if small is None:
        lines.append(f"- Claims, renewals and pages at {size} against a small list: not measured")
        return lines
    for what, a, b in (("Claim", small.claim, large.claim),
                       ("Heartbeat (renewal)", small.heartbeat, large.heartbeat),
                       ("The pages' reads of the fleet (daemons, holders, counts)",
                        small.pageReads, large.pageReads)):  # fmt: skip
        if not a.calls or not b.calls:
            lines.append(f"- {what} at {small.jobs:,} and {size} jobs: not measured "
                         f"({a.calls} and {b.calls} calls)")  # fmt: skip
            continue
        lines.append(
            f"- {what}: {a.blocksPerCall or 0:.1f} buffers, {a.meanMs or 0:.3f} ms per call at "
            f"{small.jobs:,} jobs ({a.calls} calls); {b.blocksPerCall or 0:.1f} buffers, "
            f"{b.meanMs or 0:.3f} ms at {size} ({b.calls} calls) (target: the same, at most "
            f"{SAME_COST}x the buffers): "
            f"{verdict(sameCost(a.blocksPerCall, b.blocksPerCall))}"
        )
    smallPages, smallLeast, largeLeast = dict(small.pages), dict(small.pagesLeast), dict(large.pagesLeast)
    for page, ms in large.pages:
        before, least, leastBefore = smallPages.get(page), largeLeast.get(page), smallLeast.get(page)
        if before is None:
            continue
        if least is None or leastBefore is None:
            lines.append(
                f"- Page {page}: {before:.1f} ms at {small.jobs:,} jobs, {ms:.1f} ms at {size} "
                f"(median; target: at most {SAME_COST}x): {verdict(sameCost(before, ms))}"
            )
            continue
        lines.append(
            f"- Page {page}: {leastBefore:.1f} ms at {small.jobs:,} jobs, {least:.1f} ms at {size}"
            f" (least of the requests, its own cost; median {before:.1f} and {ms:.1f} ms;"
            f" target: at most {SAME_COST}x): {verdict(sameCost(leastBefore, least))}"
        )
    if large.pages and small.pages:
        lines.append(
            f"- The pages were asked while the fleet held {_held(small)} jobs at "
            f"{small.jobs:,} ({small.pagesFailed} failed by then) and {_held(large)} at {size} "
            f"({large.pagesFailed} failed)"
        )
    if not large.pages:
        lines.append("- The dashboard's pages: not measured")
    return lines


# -- one daemon on SQLite, side by side ----------------------------------------

_SIDE_BY_SIDE = re.compile(
    r"^(?P<client>\S+): net rates \[(?P<rates>[^\]]*)\], median (?P<median>[0-9,.]+)/s"
)


def parseSideBySide(output: str) -> dict[str, tuple[float, ...]]:
    """
    The net rates of each client in C{bench/sidebyside.py}'s output.

    @return: C{{client: (rate of each round, ...)}}, in the output's order.
    """
    found: dict[str, tuple[float, ...]] = {}
    for line in output.splitlines():
        match = _SIDE_BY_SIDE.match(line.strip())
        if match is None:
            continue
        rates = tuple(float(r) for r in match["rates"].replace(" ", "").split(",") if r)
        found[match["client"]] = rates
    return found


@frozen
class SideBySide:
    """
    One corpus's side-by-side runs of the tree before and this tree.

    @ivar corpus: the corpus directory's name.
    @ivar before: the net rates of the commit before, one per round.
    @ivar after: this tree's.
    @ivar instructionsBefore: the commit before's user-space instructions
        per message (callgrind, C{bench/instructions.py}: the run on the
        corpus less the run on an empty Maildir, over its messages), or
        L{None}: a count repeatable where wall-clock rates move by tens of
        per cent on a shared machine.
    @ivar instructionsAfter: this tree's.
    """

    corpus: str
    before: tuple[float, ...]
    after: tuple[float, ...]
    instructionsBefore: float | None = None
    instructionsAfter: float | None = None

    @property
    def ratio(self) -> float | None:
        """
        The median rate of this tree over the median of the one before.
        """
        if not self.before or not self.after:
            return None
        return statistics.median(self.after) / statistics.median(self.before)


def sideBySideLines(results: Sequence[SideBySide], baseline: str) -> list[str]:
    """
    The SQLite row's targets, one per corpus: checked on the instructions
    per message where callgrind counted them (repeatable to a fraction of
    a per cent; the daemon is CPU-bound on loopback, so its rate follows
    them), the interleaved wall-clock rates shown beside (on a busy 2-core
    machine their net of start-up moves by tens of per cent); on the
    wall-clock rates where no count was made.
    """
    if not results:
        return ["- One daemon on SQLite against the commit before: not measured"]
    lines = []
    for r in results:
        ratio = r.ratio
        clock = (
            f"{statistics.median(r.after):,.0f} against {statistics.median(r.before):,.0f} "
            f"messages/s at {baseline} net of start-up, median of {len(r.after)} interleaved "
            f"rounds ({ratio:.3f}x)" if ratio is not None else "wall-clock rates not measured"
        )
        if r.instructionsBefore and r.instructionsAfter:
            change = r.instructionsAfter / r.instructionsBefore - 1
            lines.append(
                f"- One daemon on SQLite, {r.corpus}: {r.instructionsAfter / 1000:,.1f}k "
                f"instructions per message against {r.instructionsBefore / 1000:,.1f}k at "
                f"{baseline} ({change:+.1%}; callgrind); {clock} (target within "
                f"{SQLITE_TOLERANCE:.0%}): {verdict(abs(change) <= SQLITE_TOLERANCE)}"
            )
        elif ratio is not None:
            lines.append(
                f"- One daemon on SQLite, {r.corpus}: {clock} (target within "
                f"{SQLITE_TOLERANCE:.0%}): {verdict(abs(ratio - 1) <= SQLITE_TOLERANCE)}"
            )
        else:
            lines.append(f"- One daemon on SQLite, {r.corpus}: not measured")
    return lines


def loadLine(loads: Mapping[str, tuple[float, float, float]]) -> list[str]:
    """
    The machine's load average (1, 5, 15 minutes) at each named moment.
    """
    return [f"- Load average {when}: {a:.2f}, {b:.2f}, {c:.2f} (2 cores)"
            for when, (a, b, c) in loads.items()]  # fmt: skip
