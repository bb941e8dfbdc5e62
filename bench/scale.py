# -*- test-case-name: tests.test_bench -*-
"""
The C{scale} part of the benchmark (issue 17, point 6): many small
accounts against one account holding the same messages, a queue of
thousands of jobs, and the daemon's start-up.

Its rows, each run C{--runs} times on loopback into a private Dovecot on
tmpfs:

  imapmig-accounts  one daemon migrating C{--scale-accounts} accounts
                    (default 200) of C{--scale-per-account} small messages
                    each (default 20), one job per row of a CSV user list
                    (C{jobs_from}), C{max_jobs: --scale-max-jobs} (default
                    16) when this imapmig accepts that key; every account's
                    count checked afterwards
  imapmig-one       imapmig, one job: the same messages in one Maildir into
                    one account
  mbsync-group      mbsync over a C{Group} of one channel per account, the
                    many-accounts peer
  mbsync-one        mbsync, one channel: the same messages into one account
  imapmig-queued    a user list of C{--scale-queued} jobs (default 10,000),
                    each the same small Maildir into its own account: the
                    seconds from the start of the process to the first
                    message recorded as stored in its state database, and
                    the daemon's peak RSS (C{ru_maxrss}); the daemon is
                    then stopped with SIGTERM
  imapmig-startup   C{bench/startup.py --runs --startup-runs}: one empty job,
                    from start to exit, status page off (and on), with
                    C{twistd -n imapmig}; imapmig-startup-daemon the same
                    with C{python -m imapmig.daemon} (the launcher the
                    systemd unit uses)

The many-accounts and one-account times are net of each client's start-up
(its median run on an empty Maildir), like the rest of the benchmark.  The
targets: the many-accounts rate at least 0.7 times the one-account rate,
the first of the queued jobs' messages within 5 s, their peak RSS under
300 MB, and the start-up under 0.4 s.
"""

from __future__ import annotations

import imaplib
import os
import resource
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Sequence

from attrs import asdict, frozen

from bench.clients.count import countMessages
from bench.clients.maildir import folders, messages
from bench.contenders import BENCH_DIR, CONTENDERS, REPOSITORY, imapmigArgv
from bench.corpora import BuiltCorpus, _cached, _record, emptyCorpus
from bench.report import Setting, shortNumber
from bench.servers import PASSWORD, BenchServer

if TYPE_CHECKING:
    from bench.run import Bench, Usage

    TimedProcess = Callable[[str, list[str], str, float], tuple[float, int, Usage]]

# The targets of issue 17, point 6.
ACCOUNTS_RATIO_TARGET = 0.7
FIRST_MESSAGE_TARGET_S = 5.0
QUEUED_RSS_TARGET_MB = 300
STARTUP_TARGET_S = 0.4

ROWS = {
    "imapmig-accounts": "imapmig, many accounts (one daemon, user list)",
    "imapmig-one": "imapmig, one account (the same messages)",
    "mbsync-group": "mbsync, a Group of one channel per account",
    "mbsync-one": "mbsync, one account (the same messages)",
    "imapmig-queued": "imapmig, queued jobs (user list): first message",
    "imapmig-startup": "imapmig start-up (twistd -n imapmig), one empty job, status off",
    "imapmig-startup-status": "imapmig start-up (twistd -n imapmig), one empty job, status on",
    "imapmig-startup-daemon": "imapmig start-up (python -m imapmig.daemon), one empty job, "
    "status off",
    "imapmig-startup-daemon-status": "imapmig start-up (python -m imapmig.daemon), one empty "
    "job, status on",
}
"""
Every row of the part, in table order, with its label.
"""

STARTUP_LAUNCHERS = {
    "imapmig-startup": "twistd -n imapmig",
    "imapmig-startup-daemon": "python -m imapmig.daemon",
}
"""
The start-up rows with a target (status off), by launcher.
"""

# The runs on an empty Maildir that the rates are net of.
_EMPTY_ROWS = {"imapmig-accounts": "imapmig-empty", "imapmig-one": "imapmig-empty",
               "mbsync-group": "mbsync-empty", "mbsync-one": "mbsync-empty"}  # fmt: skip


@frozen
class ScaleSizes:
    """
    How large the part's runs are.

    @ivar accounts: accounts of the many-accounts rows.
    @ivar perAccount: messages in each of them.
    @ivar queued: jobs of the queued row.
    @ivar maxJobs: the C{max_jobs} written when imapmig accepts it.
    @ivar startupRuns: C{bench/startup.py --runs}.
    @ivar precreate: the many-accounts rows' accounts exist before each
        run, for every contender alike (L{precreateAccount}): Dovecot's
        first-login work (the account's home, indexes and folders) is
        left out of the timed run, as a real destination's accounts
        usually exist before a migration.
    """

    accounts: int = 200
    perAccount: int = 20
    queued: int = 10_000
    maxJobs: int = 16
    startupRuns: int = 10
    precreate: bool = False

    @property
    def messages(self) -> int:
        """
        The messages of the many-accounts and one-account rows.
        """
        return self.accounts * self.perAccount


def scalePlan(sizes: ScaleSizes, runs: int) -> list[tuple[str, int]]:
    """
    The part's runs in the order they are made: each repetition runs the
    start-up runs on an empty Maildir, then each many-accounts row beside
    its one-account peer (so that the load of the machine weighs on both
    alike), then the queued jobs; C{bench/startup.py} runs once, last.

    @param sizes: the part's sizes.
    @param runs: C{--runs}.
    @return: C{(row, repetition)} pairs; a row of 0 jobs is left out.
    """
    plan: list[tuple[str, int]] = []
    for repetition in range(runs):
        plan += [(row, repetition) for row in (
            "imapmig-empty", "mbsync-empty", "imapmig-one", "imapmig-accounts", "mbsync-one",
            "mbsync-group")]  # fmt: skip
        if sizes.queued:
            plan.append(("imapmig-queued", repetition))
    if sizes.startupRuns:
        plan.append(("imapmig-startup", 0))
    return plan


@frozen
class ScaleRun:
    """
    One run of the part.

    @ivar row: its row (L{ROWS}, or an empty run C{imapmig-empty},
        C{mbsync-empty}).
    @ivar repetition: which repetition, from 0.
    @ivar accounts: accounts it migrated into (or jobs queued).
    @ivar messages: messages it had to migrate.
    @ivar seconds: wall-clock time of the whole process (for
        C{imapmig-startup}: C{bench/startup.py}'s median).
    @ivar maxRssKiB: its peak resident set size (C{ru_maxrss}).
    @ivar userSeconds: its user CPU time.
    @ivar systemSeconds: its system CPU time.
    @ivar ok: it exited 0 and every message arrived.
    @ivar problem: what went wrong, or C{""}.
    @ivar firstMessageSeconds: C{imapmig-queued}: seconds from the start to
        the first message stored; L{None} otherwise.
    @ivar maxJobs: the C{max_jobs} its configuration set, or L{None}.
    """

    row: str
    repetition: int
    accounts: int
    messages: int
    seconds: float
    maxRssKiB: int
    userSeconds: float
    systemSeconds: float
    ok: bool
    problem: str
    firstMessageSeconds: float | None = None
    maxJobs: int | None = None


@frozen
class ScaleFigure:
    """
    One line of the part's table.

    @ivar row: its row (L{ROWS}).
    @ivar accounts: accounts (or jobs queued).
    @ivar messages: messages per run.
    @ivar runs: successful runs.
    @ivar failed: failed runs.
    @ivar seconds: median wall-clock time of the whole process.
    @ivar startupSeconds: the median of the client's runs on an empty
        Maildir, or L{None} for a row that is not a rate.
    @ivar grossMessagesPerSecond: messages over the median whole-process
        time, or L{None} for a row that is not a rate.
    @ivar messagesPerSecond: median rate net of start-up, or L{None} (also
        when the start-up took as long as the run: a run too short to
        measure).
    @ivar peakRssMiB: the largest peak RSS.
    @ivar firstMessageSeconds: median seconds to the first message stored
        (C{imapmig-queued}), or L{None}.
    @ivar maxJobs: the C{max_jobs} of its runs, or L{None}.
    """

    row: str
    accounts: int
    messages: int
    runs: int
    failed: int
    seconds: float
    startupSeconds: float | None
    grossMessagesPerSecond: float | None
    messagesPerSecond: float | None
    peakRssMiB: float
    firstMessageSeconds: float | None
    maxJobs: int | None


def scaleFigures(results: Sequence[ScaleRun]) -> list[ScaleFigure]:
    """
    Reduce the part's runs to one figure per row, in L{ROWS} order: the
    medians, each rate net of the median of its client's empty runs.

    @param results: every run of the part.
    """
    byRow: dict[str, list[ScaleRun]] = {}
    for result in results:
        byRow.setdefault(result.row, []).append(result)

    def medianSeconds(row: str) -> float:
        good = [r.seconds for r in byRow.get(row, []) if r.ok]
        return statistics.median(good) if good else 0.0

    rows = []
    for row in ROWS:
        runs = byRow.get(row)
        if not runs:
            continue
        good = [r for r in runs if r.ok]
        failed = len(runs) - len(good)
        first = runs[0]
        if not good:
            rows.append(ScaleFigure(row, first.accounts, first.messages, 0, failed, 0.0, None,
                                    None, None, 0.0, None, first.maxJobs))  # fmt: skip
            continue
        seconds = statistics.median(r.seconds for r in good)
        startup = gross = rate = None
        if row in _EMPTY_ROWS:
            startup = medianSeconds(_EMPTY_ROWS[row])
            gross = first.messages / seconds if seconds > 0 else None
            nets = [r.seconds - startup for r in good]
            if all(net > 0 for net in nets):
                rate = statistics.median(first.messages / net for net in nets)
        firstMessage = None
        if row == "imapmig-queued":
            firstMessage = statistics.median(
                r.firstMessageSeconds for r in good if r.firstMessageSeconds is not None
            )
        rows.append(
            ScaleFigure(
                row=row,
                accounts=first.accounts,
                messages=first.messages,
                runs=len(good),
                failed=failed,
                seconds=seconds,
                startupSeconds=startup,
                grossMessagesPerSecond=gross,
                messagesPerSecond=rate,
                peakRssMiB=max(r.maxRssKiB for r in good) / 1024,
                firstMessageSeconds=firstMessage,
                maxJobs=first.maxJobs,
            )
        )
    return rows


def scaleTable(rows: Sequence[ScaleFigure]) -> str:
    """
    The part's Markdown table.

    @param rows: L{scaleFigures}' result.
    """
    header = ["row", "accounts / jobs", "messages", "max_jobs", "seconds", "start-up (s)",
              "messages/s (gross)", "messages/s (net)", "first message (s)",
              "peak RSS (MB)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for f in rows:
        cells = [ROWS[f.row], f"{f.accounts:,}", f"{f.messages:,}",
                 "" if f.maxJobs is None else str(f.maxJobs)]  # fmt: skip
        if not f.runs:
            cells += ["FAILED", "", "", "", "", ""]
        else:
            cells += [
                f"{f.seconds:.2f}" + (f" ({f.failed} failed runs)" if f.failed else ""),
                "" if f.startupSeconds is None else f"{f.startupSeconds:.2f}",
                "" if f.grossMessagesPerSecond is None else shortNumber(f.grossMessagesPerSecond),
                "" if f.messagesPerSecond is None else shortNumber(f.messagesPerSecond),
                "" if f.firstMessageSeconds is None else f"{f.firstMessageSeconds:.2f}",
                "" if f.row.startswith("imapmig-startup") else f"{f.peakRssMiB * 1.048576:.0f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def scaleTargets(rows: Sequence[ScaleFigure]) -> list[str]:
    """
    The targets of issue 17, point 6, each checked against the figures
    present (a missing or failed row: not measured).

    @param rows: L{scaleFigures}' result.
    """
    found = {f.row: f for f in rows if f.runs}

    def checked(measured: str, target: str, met: bool) -> str:
        # One line of a target: what was measured, the target, the verdict.
        return f"- {measured} (target {target}): {'met' if met else '**not met**'}"

    def rates(a: ScaleFigure, b: ScaleFigure) -> tuple[float, float, str] | None:
        # Net of start-up where both runs outlasted it, else whole process.
        if a.messagesPerSecond and b.messagesPerSecond:
            return a.messagesPerSecond, b.messagesPerSecond, ""
        if a.grossMessagesPerSecond and b.grossMessagesPerSecond:
            return (a.grossMessagesPerSecond, b.grossMessagesPerSecond,
                    " (whole processes: a run too short to take its start-up from)")  # fmt: skip
        return None

    lines = []
    many, one = found.get("imapmig-accounts"), found.get("imapmig-one")
    compared = rates(many, one) if many and one else None
    if many and compared:
        manyRate, oneRate, how = compared
        ratio = manyRate / oneRate
        concurrency = (
            f"max_jobs {many.maxJobs}" if many.maxJobs is not None
            else "jobs one at a time: this imapmig does not accept max_jobs"
        )
        lines.append(
            checked(
                f"{many.accounts} accounts x {many.messages // max(many.accounts, 1)} messages "
                f"({concurrency}): {shortNumber(manyRate)} messages/s, {ratio:.2f}x one "
                f"account's {shortNumber(oneRate)}{how}",
                f">= {ACCOUNTS_RATIO_TARGET}",
                ratio >= ACCOUNTS_RATIO_TARGET,
            )
        )
        group = found.get("mbsync-group")
        peer = rates(many, group) if group else None
        if group and peer:
            lines.append(
                f"- The same accounts: imapmig at {peer[0] / peer[1]:.2f}x mbsync over a Group"
                f" of {group.accounts} channels ({shortNumber(peer[1])} messages/s){peer[2]}"
            )
    else:
        lines.append("- Many accounts against one: not measured")
    queued = found.get("imapmig-queued")
    if queued and queued.firstMessageSeconds is not None:
        lines.append(
            checked(
                f"{queued.accounts:,} queued jobs: first message stored after "
                f"{queued.firstMessageSeconds:.2f} s",
                f"<= {FIRST_MESSAGE_TARGET_S:g} s",
                queued.firstMessageSeconds <= FIRST_MESSAGE_TARGET_S,
            )
        )
        peak = queued.peakRssMiB * 1.048576
        lines.append(
            checked(
                f"{queued.accounts:,} queued jobs: peak RSS {peak:.0f} MB",
                f"< {QUEUED_RSS_TARGET_MB} MB",
                peak < QUEUED_RSS_TARGET_MB,
            )
        )
    else:
        lines.append("- Queued jobs: not measured")
    measured = False
    for row, launcher in STARTUP_LAUNCHERS.items():
        startup = found.get(row)
        if startup:
            measured = True
            lines.append(
                checked(
                    f"Start-up with one empty job, {launcher} (bench/startup.py, status off,"
                    f" median of {startup.runs}): {startup.seconds:.3f} s",
                    f"< {STARTUP_TARGET_S:g} s",
                    startup.seconds < STARTUP_TARGET_S,
                )
            )
    if not measured:
        lines.append("- Start-up: not measured")
    return lines



_STARTUP_LINE = re.compile(
    r"^(?:(?P<launcher>twistd|imapmig-daemon) +)?status (?P<which>off|on) +"
    r"median (?P<median>[0-9.]+) s .*\((?P<runs>\d+) runs\)$"
)


def parseStartup(output: str) -> list[ScaleRun]:
    """
    The runs of C{bench/startup.py}'s output: for each launcher and
    configuration, one per measured run, each carrying the median as its
    C{seconds} (the script prints medians only), so that the figure's run
    count and median come out right.  A line without a launcher (the
    script's output before it measured two) is twistd's.

    @param output: what C{bench/startup.py} printed.
    """
    rows = []
    for line in output.splitlines():
        match = _STARTUP_LINE.match(line.strip())
        if match is None:
            continue
        row = "imapmig-startup"
        if match["launcher"] == "imapmig-daemon":
            row += "-daemon"
        if match["which"] == "on":
            row += "-status"
        for repetition in range(int(match["runs"])):
            rows.append(ScaleRun(row, repetition, 1, 0, float(match["median"]), 0, 0.0, 0.0,
                                 True, ""))  # fmt: skip
    return rows


def splitCorpus(workDir: str, corpus: BuiltCorpus, parts: int) -> list[BuiltCorpus]:
    """
    C{corpus}'s messages dealt into C{parts} Maildirs of equal size
    (oldest first, each keeping its folder), as hard links: the accounts
    of the many-accounts rows, together the one account's messages.

    @param workDir: the benchmark's work directory.
    @param corpus: the whole corpus; its message count a multiple of
        C{parts}.
    @param parts: how many Maildirs.
    """
    everything = []
    for name, source in folders(corpus.path):
        relative = os.path.relpath(source, corpus.path)
        for message in messages(source):
            everything.append((os.path.basename(message.path), relative, name, message.path))
    everything.sort()
    each = len(everything) // parts
    base = os.path.join(
        workDir, "corpus",
        os.path.basename(os.path.dirname(corpus.path)) + f"-split{parts}",
    )  # fmt: skip
    result = []
    for index in range(parts):
        directory = os.path.join(base, f"{index:05d}")
        cached = _cached(directory, corpus.profile)
        if cached is not None:
            result.append(cached)
            continue
        shutil.rmtree(directory, ignore_errors=True)
        target = os.path.join(directory, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(target, sub), exist_ok=True)
        for fileName, relative, name, path in everything[index * each:(index + 1) * each]:
            folder = os.path.join(target, relative)
            if name != "INBOX" and not os.path.exists(os.path.join(folder, "maildirfolder")):
                for sub in ("cur", "new", "tmp"):
                    os.makedirs(os.path.join(folder, sub), exist_ok=True)
                open(os.path.join(folder, "maildirfolder"), "w").close()
            sub = os.path.basename(os.path.dirname(path))
            os.link(path, os.path.join(folder, sub, fileName))
        result.append(_record(directory, corpus.profile))
    return result


def _writePassword(runDir: str) -> str:
    path = os.path.join(runDir, "password")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(PASSWORD + "\n")
    return path


def userListConfig(
    runDir: str,
    host: str,
    port: int,
    rows: Sequence[tuple[str, str]],
    maxJobs: int | None,
) -> str:
    """
    Write an imapmig configuration of one job template with a CSV user
    list (C{jobs_from}) and return its path: each row a Maildir into its
    own account, the template's password, no status page, plain TCP.

    @param runDir: the run's private directory.
    @param host: the server's address.
    @param port: its plain IMAP port.
    @param rows: C{(account, maildir)} of each job.
    @param maxJobs: C{max_jobs}, or L{None} to leave the key out.
    """
    passwordFile = _writePassword(runDir)
    with open(os.path.join(runDir, "users.csv"), "w") as f:
        f.write("destination_user,maildir\n")
        f.writelines(f"{account},{maildir}\n" for account, maildir in rows)
    lines = [
        f"state: {os.path.join(runDir, 'state.sqlite')}",
        "status: off",
    ]
    if maxJobs is not None:
        lines.append(f"max_jobs: {maxJobs}")
    lines += [
        "servers:",
        "  bench:",
        f'    endpoint: "tcp:{host}:{port}"',
        "    starttls: off",
        "    allow_plaintext: true",
        "jobs:",
        "  - name: scale",
        "    jobs_from: users.csv",
        f"    source: {{maildir: {rows[0][1]}}}",
        f"    destination: {{server: bench, password_file: {passwordFile}}}",
    ]
    path = os.path.join(runDir, "imapmig.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def mbsyncGroupConfig(runDir: str, host: str, port: int,
                      rows: Sequence[tuple[str, str]]) -> list[str]:  # fmt: skip
    """
    Write an mbsync configuration of one channel per account, all in one
    C{Group}, and return the command line that syncs the group.  Each
    channel pushes a copy of its Maildir (hard links: mbsync renames the
    files) into its account, as the C{mbsync} contender does.

    @param runDir: the run's private directory.
    @param host: the server's address.
    @param port: its plain IMAP port.
    @param rows: C{(account, maildir)} of each channel.
    """
    sections = []
    names = []
    for index, (account, maildir) in enumerate(rows):
        copy = os.path.join(runDir, "near", f"{index:05d}")
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        subprocess.run(["cp", "-al", maildir, copy], check=True)
        state = os.path.join(runDir, "state", f"{index:05d}")
        os.makedirs(state)
        name = f"c{index:05d}"
        names.append(name)
        sections.append(
            f"""\
MaildirStore near{index}
Inbox {copy}
SubFolders Maildir++

IMAPAccount far{index}
Host {host}
Port {port}
User {account}
Pass {PASSWORD}
SSLType None
AuthMechs LOGIN

IMAPStore far{index}
Account far{index}

Channel {name}
Far :far{index}:
Near :near{index}:
Patterns *
Create Far
Sync Push
CopyArrivalDate yes
SyncState {state}/
"""
        )
    sections.append("Group many\n" + "".join(f"Channel {name}\n" for name in names))
    config = os.path.join(runDir, "mbsyncrc")
    with open(config, "w") as f:
        f.write("\n".join(sections))
    return [shutil.which("mbsync") or "mbsync", "-q", "-c", config, "many"]


def maxJobsAccepted(python: str = sys.executable) -> bool:
    """
    Whether this imapmig accepts the C{max_jobs} key (concurrent jobs),
    asked with C{--check-config}.

    @param python: the interpreter that runs imapmig.
    """
    directory = tempfile.mkdtemp(prefix="max-jobs-check-")
    try:
        maildir = emptyCorpus(directory).path
        config = userListConfig(directory, "127.0.0.1", 143, [("probe", maildir)], 2)
        argv = imapmigArgv(config, "--check-config")
        argv[0] = python
        argv.remove("--exit-when-done")
        completed = subprocess.run(argv, capture_output=True, cwd=REPOSITORY, env=_environment())
        return completed.returncode == 0
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _environment() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=REPOSITORY + (os.pathsep + path if path else ""))


def firstStored(statePath: str) -> bool:
    """
    Whether imapmig's state database at C{statePath} records a message
    stored in its destination (read-only; L{False} while the database or
    its schema does not exist yet).

    @param statePath: the configuration's C{state} file.
    """
    if not os.path.exists(statePath):
        return False
    try:
        connection = sqlite3.connect(f"file:{statePath}?mode=ro", uri=True, timeout=0.1)
        try:
            row = connection.execute(
                "SELECT 1 FROM messages WHERE failure IS NULL AND present = 0 LIMIT 1"
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return False
    return row is not None


def runUntilFirstMessage(
    argv: list[str],
    runDir: str,
    statePath: str,
    timeout: float,
    settle: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[float | None, int, resource.struct_rusage | None, str]:
    """
    Start C{argv}, wait until its state database records the first message
    stored, let it run C{settle} seconds more, stop it with SIGTERM (a
    graceful stop) and reap it.

    @return: the seconds from its start to the first message (L{None}:
        none within C{timeout}), its exit status, its resource usage and a
        problem (C{""} if none).
    """
    with open(os.path.join(runDir, "stdout"), "wb") as out, open(
        os.path.join(runDir, "stderr"), "wb"
    ) as err:
        started = clock()
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPOSITORY,
            env=_environment(), start_new_session=True,
        )  # fmt: skip
    first: float | None = None
    problem = ""
    while clock() - started < timeout:
        if firstStored(statePath):
            first = clock() - started
            break
        if process.poll() is not None:
            problem = f"exited (status {process.returncode}) before storing a message"
            break
        time.sleep(0.01)
    else:
        problem = f"no message stored within {timeout:g} s"
    if process.returncode is not None:
        # Reaped by poll: its usage is lost.
        return first, process.returncode, None, problem
    if first is not None:
        time.sleep(settle)
    os.kill(process.pid, signal.SIGTERM)
    deadline = clock() + 120
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if clock() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(process.pid, 0)
            problem = problem or "did not stop within 120 s of SIGTERM"
            break
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0 and not problem:
        problem = f"exit status {process.returncode} after SIGTERM"
    return first, process.returncode, usage, problem


def runScale(bench: Bench, sizes: ScaleSizes) -> list[ScaleRun]:
    """
    Run the part: one Dovecot on tmpfs for the many-accounts and
    one-account rows, another with an account per queued job, then
    C{bench/startup.py}.  Each run is kept in C{bench.scaleRuns} and
    written to C{results/raw/}.

    @param bench: the benchmark (its C{--runs}, work and results
        directories, timer).
    @param sizes: the part's sizes.
    """
    from bench.run import LOOPBACK, _timedProcess

    args = bench.args
    plan = scalePlan(sizes, args.runs)
    maxJobs = sizes.maxJobs if maxJobsAccepted() else None
    if maxJobs is None:
        bench.note(
            "scale part: this imapmig does not accept max_jobs: its jobs run one at a time"
        )
    if sizes.precreate:
        bench.note(
            "scale part: the many-accounts rows' accounts were logged into and their folders"
            " created before each timed run, for every contender alike (--scale-precreate)"
        )
    print(f"== scale: {sizes.accounts} accounts x {sizes.perAccount} small messages, "
          f"{sizes.queued:,} queued jobs, max_jobs {maxJobs}"
          f"{', accounts pre-created' if sizes.precreate else ''}", flush=True)  # fmt: skip
    whole = bench.corpus("small", sizes.messages)
    if whole.messages != sizes.messages:
        raise RuntimeError(f"the small corpus holds {whole.messages} messages, not {sizes.messages}")
    parts = splitCorpus(bench.workDir, whole, sizes.accounts)
    empty = emptyCorpus(bench.workDir)
    results: list[ScaleRun] = []

    def keep(run: ScaleRun) -> None:
        results.append(run)
        bench.recordScale(run)
        if run.row.startswith("imapmig-startup"):
            if run.repetition == 0:
                print(f"  {run.row:22} median {run.seconds:.3f} s", flush=True)
        elif run.ok:
            detail = (
                f"first message {run.firstMessageSeconds:.2f} s, "
                if run.firstMessageSeconds is not None else ""
            )
            print(f"  {run.row:22} {run.messages:>6} messages in {run.seconds:6.2f} s, "
                  f"{detail}{run.maxRssKiB / 1024:.0f} MiB", flush=True)  # fmt: skip
        else:
            print(f"  FAILED {run.row}: {run.problem}", flush=True)

    perRepetition = 2 * sizes.accounts + 4
    serverBase = tempfile.mkdtemp(prefix="dovecot-scale-", dir=bench.workDir)
    server = BenchServer(
        serverBase, accounts=args.runs * perRepetition + 5, fsync=False,
        mailRoot=tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm"), capabilities=None,
        compress=False, namespace=None, address="127.0.0.1", inNamespace=None,
    )  # fmt: skip
    server.start()
    try:
        for row, repetition in plan:
            if row in ("imapmig-queued", "imapmig-startup"):
                continue
            if row in ("imapmig-empty", "mbsync-empty", "imapmig-one", "mbsync-one"):
                contender = CONTENDERS["imapmig" if row.startswith("imapmig") else "mbsync"]
                corpus = empty if row.endswith("empty") else whole
                setting = Setting("scale", "tmpfs", 0.0, None, "small", "default")
                result = bench.runOnce(LOOPBACK, server, setting, contender,
                                       "empty" if corpus is empty else "full", corpus,
                                       repetition)  # fmt: skip
                keep(ScaleRun(row, repetition, 1, corpus.messages, result.seconds,
                              result.maxRssKiB, result.userSeconds, result.systemSeconds,
                              result.ok, result.problem))  # fmt: skip
                continue
            keep(_manyAccounts(bench, server, row, repetition, parts, maxJobs, _timedProcess,
                               sizes.precreate))  # fmt: skip
    finally:
        server.stop()
        shutil.rmtree(serverBase, ignore_errors=True)
    if sizes.queued:
        queuedBase = tempfile.mkdtemp(prefix="dovecot-queued-", dir=bench.workDir)
        queuedServer = BenchServer(
            queuedBase, accounts=sizes.queued, fsync=False,
            mailRoot=tempfile.mkdtemp(prefix="imapmig-bench-", dir="/dev/shm"),
            capabilities=None, compress=False, namespace=None, address="127.0.0.1",
            inNamespace=None,
        )  # fmt: skip
        queuedServer.start()
        try:
            accounts = [queuedServer.freshAccount() for _ in range(sizes.queued)]
            for row, repetition in plan:
                if row == "imapmig-queued":
                    keep(_queued(bench, queuedServer, repetition, accounts, parts[0], maxJobs))
        finally:
            queuedServer.stop()
            shutil.rmtree(queuedBase, ignore_errors=True)
    if sizes.startupRuns:
        for run in _startup(sizes.startupRuns):
            keep(run)
    return results


def _manyAccounts(
    bench: Bench,
    server: BenchServer,
    row: str,
    repetition: int,
    parts: Sequence[BuiltCorpus],
    maxJobs: int | None,
    timedProcess: TimedProcess,
    precreate: bool = False,
) -> ScaleRun:
    """
    One run of C{imapmig-accounts} or C{mbsync-group}: every part into its
    own fresh account (with C{precreate}, logged into and its folders
    created before the timed run), the count of each checked afterwards.
    """
    accounts = [server.freshAccount() for _ in parts]
    rows = [(account, part.path) for account, part in zip(accounts, parts)]
    if precreate:
        for account, path in rows:
            precreateAccount(server.host, server.port, account, path)
    runDir = tempfile.mkdtemp(prefix=f"{row}-", dir=bench.runsDir)
    os.chmod(runDir, 0o755)
    if row == "imapmig-accounts":
        argv = imapmigArgv(userListConfig(runDir, server.host, server.port, rows, maxJobs))
    else:
        argv = mbsyncGroupConfig(runDir, server.host, server.port, rows)
        maxJobs = None
    seconds, status, usage = timedProcess(bench.timer, argv, runDir, bench.args.timeout)
    problem = ""
    if status != 0:
        problem = f"exit status {status}: {fileTail(os.path.join(runDir, 'stderr'))}"
    else:
        wrong = []
        for account, part in zip(accounts, parts):
            counted = countAccount(server, account)
            if counted != part.messages:
                wrong.append(f"{account}: {counted} of {part.messages}")
        if wrong:
            problem = f"{len(wrong)} accounts incomplete: " + ", ".join(wrong[:5])
    for account in accounts:
        server.discard(account)
    if not problem:
        shutil.rmtree(runDir, ignore_errors=True)
    messageCount = sum(part.messages for part in parts)
    return ScaleRun(row, repetition, len(parts), messageCount, seconds, usage.maxRssKiB,
                    usage.userSeconds, usage.systemSeconds, not problem, problem,
                    maxJobs=maxJobs)  # fmt: skip


def precreateAccount(host: str, port: int, account: str, maildir: str) -> None:
    """
    Log into C{account} once and create and select each folder
    C{maildir} holds (Maildir++ names, C{.} read as the server's
    hierarchy separator), as an account that existed before the
    migration would have them: Dovecot makes the account's home, indexes
    and mailboxes here, not in the timed run.

    @param host: the server's address.
    @param port: its plain IMAP port.
    @param account: the account (password L{PASSWORD}).
    @param maildir: the Maildir to be migrated into it.
    """
    imap = imaplib.IMAP4(host, port, timeout=120)
    try:
        imap.login(account, PASSWORD)
        _, listed = imap.list('""', '""')
        first = listed[0] if listed else None
        separator = first.split(b'"')[1].decode() if isinstance(first, bytes) else "/"
        for name, _ in folders(maildir):
            mailbox = name.replace(".", separator)
            if mailbox != "INBOX":
                imap.create(mailbox)
            imap.select(mailbox)
    finally:
        imap.logout()


def countAccount(server: BenchServer, account: str) -> int:
    """
    The messages in every mailbox of C{account} (STATUS MESSAGES), asked
    from here.
    """
    imap = imaplib.IMAP4(server.host, server.port, timeout=120)
    try:
        imap.login(account, PASSWORD)
        return sum(countMessages(imap).values())
    finally:
        imap.logout()


def _queued(
    bench: Bench,
    server: BenchServer,
    repetition: int,
    accounts: Sequence[str],
    part: BuiltCorpus,
    maxJobs: int | None,
) -> ScaleRun:
    """
    One run of C{imapmig-queued}: a user list of a job per account, each
    the same small Maildir; timed to the first message stored, then
    stopped.  The accounts are emptied afterwards, for the next
    repetition.
    """
    runDir = tempfile.mkdtemp(prefix="imapmig-queued-", dir=bench.runsDir)
    os.chmod(runDir, 0o755)
    config = userListConfig(runDir, server.host, server.port,
                            [(account, part.path) for account in accounts], maxJobs)  # fmt: skip
    started = time.monotonic()
    first, status, usage, problem = runUntilFirstMessage(
        imapmigArgv(config), runDir, os.path.join(runDir, "state.sqlite"), bench.args.timeout
    )
    seconds = time.monotonic() - started
    for account in accounts:
        server.discard(account)
    if problem:
        problem += f": {fileTail(os.path.join(runDir, 'stderr'))}"
    else:
        shutil.rmtree(runDir, ignore_errors=True)
    return ScaleRun(
        "imapmig-queued", repetition, len(accounts), len(accounts) * part.messages, seconds,
        usage.ru_maxrss if usage is not None else 0,
        usage.ru_utime if usage is not None else 0.0,
        usage.ru_stime if usage is not None else 0.0,
        not problem, problem, firstMessageSeconds=first, maxJobs=maxJobs,
    )  # fmt: skip


def _startup(runs: int) -> list[ScaleRun]:
    """
    Run C{bench/startup.py --runs RUNS} and read its medians.
    """
    completed = subprocess.run(
        [sys.executable, os.path.join(BENCH_DIR, "startup.py"), "--runs", str(runs)],
        capture_output=True, cwd=REPOSITORY, env=_environment(),
    )  # fmt: skip
    output = completed.stdout.decode("utf-8", "replace")
    rows = parseStartup(output)
    if completed.returncode != 0 or not rows:
        problem = f"bench/startup.py failed: {completed.stderr.decode('utf-8', 'replace')[-500:]}"
        return [ScaleRun("imapmig-startup", 0, 1, 0, 0.0, 0, 0.0, 0.0, False, problem)]
    return rows


def fileTail(path: str, size: int = 600) -> str:
    """
    The end of a file (a run's C{stderr}) for a problem line, or C{""} if
    it cannot be read.

    @param path: the file.
    @param size: how many octets from its end.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def scaleJSON(run: ScaleRun) -> dict[str, object]:
    """
    A run as the JSON written to C{results/raw/}.
    """
    return {"part": "scale", **asdict(run)}

