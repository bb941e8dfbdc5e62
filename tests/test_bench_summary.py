"""
Tests for L{bench.summary}: issue 31's acceptance in one table, one line
per ratio from the medians of one run, merged into the results directory's
C{summary.md} run after run; the load average around each part; and
README.md's Speed table, which is C{bench/results/summary.md}'s.
"""

from __future__ import annotations

import datetime
import io
import os
import tempfile
from contextlib import redirect_stderr, redirect_stdout

from twisted.trial.unittest import SynchronousTestCase

import attrs

from bench.bigaccount import BigRow, Measured
from bench.report import Figure, RunResult, Setting
from bench import run
from bench.run import (
    Bench,
    appendParts,
    parseArguments,
    shortCommit,
    writeResults,
    writeSummaryOf,
)
from bench.scale import ScaleFigure
from bench.summary import (
    ACCOUNTS,
    CATALOG,
    FIRST_MESSAGE,
    MET,
    MISSED,
    NEVER,
    ONE_CONNECTION,
    ONE_SAME_BATCH,
    QUEUED_RSS,
    README,
    README_BEGIN,
    README_END,
    SERVER_TO_SERVER,
    STARTUP,
    SUMMARY,
    TWO_CONNECTIONS,
    TWO_SAME_BATCH,
    PartClock,
    PartRecord,
    RunContext,
    SummaryLine,
    bigLines,
    bigWhat,
    figureLines,
    main,
    merged,
    readSummary,
    readmeTable,
    readmeWithTable,
    scaleLines,
    summaryMarkdown,
    tableOf,
    tlsWhat,
    writeSummary,
)

RECORD = PartRecord("tls", "2026-12-07 08:00", 300.0, (1.5, 1.2, 1.0), (2.25, 1.5, 1.1))


def context(**parts: PartRecord) -> RunContext:
    return RunContext("abc1234", "python -m bench.run --parts tls", parts or {"tls": RECORD})


def figure(part: str, client: str, rate: float, tls: str = "none", runs: int = 3) -> Figure:
    setting = Setting(part, "tmpfs", 0.0, None, "realistic", "default", tls=tls)
    return Figure(setting, client, 5000, runs, 0, 0.3, 5000 / rate, rate, 0.0, 60.0, None)


def measured(seconds: float, cpu: float = 1.0, rss: float = 100.0) -> Measured:
    return Measured(seconds, cpu, rss, 0)


def bigRow(layout: str, messages: int, seconds: float, cpu: float, delta: float,
           raw: float) -> BigRow:  # fmt: skip
    return BigRow(layout, messages, measured(seconds, cpu, 250.0), measured(delta, 1.0, 400.0),
                  measured(raw), messages, "1.00 1.00 1.00", measured(0.5, 0.5))  # fmt: skip


class LineTests(SynchronousTestCase):
    """
    One run's figures become lines: the ratio of the medians, the target's
    verdict, the commit, the part's date and load.
    """

    def test_ratiosFromTheTLSPartsPlainRows(self) -> None:
        """
        Without main or s2s figures the three plain ratios come from the
        tls part's plain-TCP rows, each against its threshold, with the
        part's start date and its load at start and end.
        """
        rows = [figure("tls", "imapmig", 6489), figure("tls", "raw-multi50-2", 8039),
                figure("tls", "imapmig-1", 5000), figure("tls", "raw-multi50", 5000),
                figure("tls", "imapmig-s2s", 3300), figure("tls", "dsync", 3000)]  # fmt: skip
        lines = {line.what: line for line in figureLines(rows, context())}
        two = lines[TWO_CONNECTIONS]
        self.assertEqual(two.measured, "0.81x (6,489 / 8,039 msg/s, medians of 3)")
        self.assertEqual(two.verdict, MISSED)
        self.assertEqual((two.commit, two.date, two.load), ("abc1234", "2026-12-07 08:00",
                                                            "1.50 → 2.25"))  # fmt: skip
        self.assertEqual(two.source, "`bench.run --parts tls`, part tls")
        self.assertEqual(lines[ONE_CONNECTION].verdict, MET)
        self.assertEqual(lines[SERVER_TO_SERVER].measured[:5], "1.10x")
        self.assertEqual(lines[SERVER_TO_SERVER].verdict, MET)

    def test_mainAndS2SPartsFirst(self) -> None:
        """
        Where the main part (loopback, tmpfs, realistic) and the s2s part
        ran, their rows give the plain ratios, not the tls part's.
        """
        rows = [figure("tls", "imapmig", 1000), figure("tls", "raw-multi50-2", 1000),
                figure("main", "imapmig", 9600), figure("main", "raw-multi50-2", 10000),
                figure("s2s", "imapmig-s2s", 2000), figure("s2s", "dsync", 4000),
                figure("tls", "imapmig-s2s", 4000), figure("tls", "dsync", 2000)]  # fmt: skip
        ctx = context(main=RECORD, s2s=RECORD, tls=RECORD)
        lines = {line.what: line for line in figureLines(rows, ctx)}
        self.assertEqual(lines[TWO_CONNECTIONS].measured[:5], "0.96x")
        self.assertTrue(lines[TWO_CONNECTIONS].source.endswith("part main"))
        self.assertEqual(lines[SERVER_TO_SERVER].measured[:5], "0.50x")
        self.assertNotIn(ONE_CONNECTION, lines)

    def test_sameBatchBeside(self) -> None:
        """
        The raw writer with imapmig's batch (MULTIAPPEND 200) is shown
        beside the acceptance's, without a verdict.
        """
        rows = [figure("main", "imapmig", 9600), figure("main", "raw-multi50-2", 10000),
                figure("main", "raw-multi200-2", 12000)]  # fmt: skip
        lines = {line.what: line for line in figureLines(rows, context(main=RECORD))}
        self.assertEqual(lines[TWO_CONNECTIONS].verdict, MET)
        beside = lines[TWO_SAME_BATCH]
        self.assertEqual((beside.measured[:5], beside.verdict, beside.target),
                         ("0.80x", "—", "beside"))  # fmt: skip
        self.assertNotIn(ONE_SAME_BATCH, lines)

    def test_failedRows(self) -> None:
        """
        A row without a successful run gives no ratio: the line says so
        and is missed.
        """
        rows = [figure("main", "imapmig", 1000, runs=0), figure("main", "raw-multi50-2", 1000)]
        (line,) = figureLines(rows, context(main=RECORD))
        self.assertEqual((line.measured, line.verdict),
                         ("failed runs (see results.md)", MISSED))  # fmt: skip

    def test_tlsAgainstPlain(self) -> None:
        """
        Each TLS ratio is divided by its plain-TCP value of the same run:
        within 10% is met.
        """
        rows = [figure("tls", c, r, tls=t) for c, r, t in (
            ("imapmig", 900, "none"), ("raw-multi50-2", 1000, "none"),
            ("imapmig", 800, "implicit"), ("raw-multi50-2", 1000, "implicit"),
            ("imapmig", 400, "starttls"), ("raw-multi50-2", 1000, "starttls"))]  # fmt: skip
        lines = {line.what: line for line in figureLines(rows, context())}
        implicit = lines[tlsWhat("implicit", "2 connections")]
        self.assertEqual(implicit.measured, "0.89x (0.80 / 0.90, medians)")
        self.assertEqual(implicit.verdict, MISSED)
        self.assertEqual(lines[tlsWhat("starttls", "2 connections")].measured[:5], "0.44x")
        rows[2] = figure("tls", "imapmig", 820, tls="implicit")
        lines = {line.what: line for line in figureLines(rows, context())}
        self.assertEqual(lines[tlsWhat("implicit", "2 connections")].verdict, MET)

    def test_bigAccount(self) -> None:
        """
        The 500,000-message row of each layout gives its CPU per message
        against the smallest row's, its peak RSS, its delta pass and its
        rate beside the raw client's; other sizes give no line.
        """
        rows = [bigRow("spread", 5000, 1.0, 0.6, 0.5, 0.5),
                bigRow("spread", 50_000, 5.0, 1.5, 1.0, 4.0),
                bigRow("spread", 500_000, 50.0, 11.0, 8.3, 55.0)]  # fmt: skip
        lines = {line.what: line for line in bigLines(rows, context(bigaccount=RECORD))}
        self.assertEqual(len(lines), 4)
        cpu = lines[bigWhat("spread", "cpu")]
        self.assertEqual(cpu.measured, "1.05x (21.0 / 20.0 us; 5,000)")
        self.assertEqual(cpu.verdict, MET)
        self.assertEqual(lines[bigWhat("spread", "rss")].measured, "250 MB")
        self.assertEqual(lines[bigWhat("spread", "delta")].verdict, MISSED)
        raw = lines[bigWhat("spread", "raw")]
        self.assertEqual((raw.measured, raw.verdict), ("1.10x (10,000 / 9,091 msg/s)", "—"))

    def test_bigAccountWithoutAReference(self) -> None:
        """
        A smallest row whose CPU net of start-up is not above zero judges
        nothing: the CPU line says so.
        """
        rows = [bigRow("one", 5000, 1.0, 0.4, 0.5, 0.5),
                bigRow("one", 500_000, 50.0, 11.0, 2.0, 55.0)]  # fmt: skip
        lines = {line.what: line for line in bigLines(rows, context(bigaccount=RECORD))}
        cpu = lines[bigWhat("one", "cpu")]
        self.assertEqual((cpu.measured, cpu.verdict),
                         ("21.0 us; no fair 5,000 reference", "not judged"))  # fmt: skip

    def test_figuresThatHold(self) -> None:
        """
        Start-up, 200 accounts against mbsync's Group, and the queued
        jobs' first message and peak RSS, each within 10% of issue 31's.
        """
        def scale(row: str, **values: object) -> ScaleFigure:
            fields: dict[str, object] = dict(
                row=row, accounts=200, messages=4000, runs=3, failed=0, seconds=0.3,
                startupSeconds=None, grossMessagesPerSecond=None, messagesPerSecond=None,
                peakRssMiB=100.0, firstMessageSeconds=None, maxJobs=16)  # fmt: skip
            fields.update(values)
            return ScaleFigure(**fields)  # type: ignore[arg-type]

        rows = [scale("imapmig-startup", seconds=0.33),
                scale("imapmig-accounts", messagesPerSecond=900.0),
                scale("mbsync-group", messagesPerSecond=400.0),
                scale("imapmig-queued", accounts=10_000, firstMessageSeconds=1.9,
                      peakRssMiB=120.0)]  # fmt: skip
        lines = {line.what: line for line in scaleLines(rows, context(scale=RECORD))}
        self.assertEqual((lines[STARTUP].measured, lines[STARTUP].verdict),
                         ("0.330 s (median of 3)", MET))  # fmt: skip
        self.assertEqual(lines[ACCOUNTS].measured,
                         "2.25x (900 / 400 msg/s net of start-up, 200 × 20)")  # fmt: skip
        self.assertEqual(lines[ACCOUNTS].verdict, MET)
        self.assertEqual(lines[FIRST_MESSAGE].verdict, MISSED)
        self.assertEqual((lines[QUEUED_RSS].measured, lines[QUEUED_RSS].verdict),
                         ("126 MB (10,000 jobs)", MET))  # fmt: skip


class FileTests(SynchronousTestCase):
    """
    C{summary.md}: every line of the catalog, this run's replacing the
    file's, the others kept.
    """

    def test_mergedKeepsWhatThisRunDidNotMeasure(self) -> None:
        """
        A line this run measured replaces the file's; a line it did not is
        kept as the file had it; a line never measured says so.
        """
        earlier = {
            TWO_CONNECTIONS: SummaryLine(TWO_CONNECTIONS, "≥ 0.95x", "0.81x", MISSED, "old"),
            STARTUP: SummaryLine(STARTUP, "≤ 0.35 s (0.32 s)", "0.320 s", MET, "old"),
        }
        new = [SummaryLine(TWO_CONNECTIONS, "≥ 0.95x", "0.97x", MET, "new")]
        lines = merged(earlier, new)
        self.assertEqual([line.what for line in lines], [what for what, _ in CATALOG])
        byWhat = {line.what: line for line in lines}
        self.assertEqual(byWhat[TWO_CONNECTIONS].commit, "new")
        self.assertEqual(byWhat[STARTUP].commit, "old")
        self.assertEqual(byWhat[ONE_CONNECTION].measured, NEVER)

    def test_writtenAndReadBack(self) -> None:
        """
        What L{writeSummary} writes, L{readSummary} reads back, line for
        line; a second run's lines replace only their own.
        """
        directory = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(directory))
        first = SummaryLine(STARTUP, "≤ 0.35 s (0.32 s)", "0.320 s (median of 10)", MET,
                            "abc1234", "2026-12-07 08:00", "1.50 → 2.25", "`make bench`")  # fmt: skip
        writeSummary(directory, [first])
        second = SummaryLine(TWO_CONNECTIONS, "≥ 0.95x", "0.97x", MET, "def5678")
        text = writeSummary(directory, [second])
        read = readSummary(os.path.join(directory, "summary.md"))
        self.assertEqual(read[STARTUP], first)
        self.assertEqual(read[TWO_CONNECTIONS], second)
        self.assertEqual(len(read), len(CATALOG))
        self.assertEqual(len(tableOf(text).splitlines()), len(CATALOG) + 2)


class PartClockTests(SynchronousTestCase):
    """
    Each part's time and the load average at its start and end.
    """

    def test_stretchesOfOnePart(self) -> None:
        """
        A part run in two stretches keeps its first start and first load,
        its summed time and the load at its last end.
        """
        loads = iter([(1.0, 1.0, 1.0), (2.0, 2.0, 2.0), (3.0, 3.0, 3.0), (4.0, 4.0, 4.0)])
        times = iter([10.0, 70.0, 100.0, 130.0])
        clock = PartClock(loadAverage=lambda: next(loads), monotonic=lambda: next(times),
                          now=lambda: datetime.datetime(2026, 12, 7, 8, 1))  # fmt: skip
        with redirect_stdout(io.StringIO()):
            with clock.timed("main"):
                pass
            with clock.timed("main"):
                pass
        self.assertEqual(clock.records["main"],
                         PartRecord("main", "2026-12-07 08:01", 90.0, (1.0, 1.0, 1.0),
                                    (4.0, 4.0, 4.0)))  # fmt: skip
        self.assertEqual(clock.records["main"].load(), "1.00 → 4.00")


class ReadmeTests(SynchronousTestCase):
    """
    README.md's Speed section shows bench/results/summary.md's table.
    """

    def test_readmeShowsTheSummary(self) -> None:
        """
        The table between README.md's markers is bench/results/summary.md's
        (C{python -m bench.summary --readme} rewrites it), and that file
        holds every line of the catalog.
        """
        table = readmeTable(readSummary(SUMMARY).values())
        with open(README, encoding="utf-8") as f:
            readme = f.read()
        self.assertEqual(readmeWithTable(readme, table), readme)
        self.assertEqual(list(readSummary(SUMMARY)), [what for what, _ in CATALOG])
        self.assertEqual(main(["--check"]), 0)

    def test_readmeColumns(self) -> None:
        """
        README's table keeps what is compared, the target, the figure, the
        verdict and the load; the commit, date and command stay in
        C{summary.md}.
        """
        table = readmeTable(merged({}, []))
        rows = table.splitlines()
        self.assertEqual(rows[0], "| what is compared | target | measured | verdict "
                                  "| load average, start → end |")  # fmt: skip
        self.assertEqual(rows[1], "|---|---|---|---|---|")
        self.assertEqual(len(rows), len(CATALOG) + 2)
        self.assertTrue(all(row.count("|") == 6 for row in rows))

    def test_rewrite(self) -> None:
        """
        C{--readme} replaces only what lies between the markers.
        """
        directory = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(directory))
        readme = os.path.join(directory, "README.md")
        summary = os.path.join(directory, "summary.md")
        with open(readme, "w", encoding="utf-8") as f:
            f.write(f"# x\n\n## Speed\n\n{README_BEGIN}\n| old |\n{README_END}\n\nafter\n")
        with open(summary, "w", encoding="utf-8") as f:
            f.write(summaryMarkdown(merged({}, [])))
        argv = ["--summary", summary, "--readme-path", readme]
        with redirect_stderr(io.StringIO()):
            self.assertEqual(main(["--check", *argv]), 1)
        self.assertEqual(main(["--readme", *argv]), 0)
        with open(readme, encoding="utf-8") as f:
            self.assertEqual(f.read(), f"# x\n\n## Speed\n\n{README_BEGIN}\n"
                                       f"{readmeTable(merged({}, []))}\n{README_END}\n\nafter\n")  # fmt: skip
        self.assertEqual(main(["--check", *argv]), 0)


class SmokeRunTests(SynchronousTestCase):
    """
    A run smaller than the acceptance's (5,000 messages, medians of 3;
    200 accounts of 20; 10,000 queued jobs) gives its figures without a
    verdict.
    """

    def test_smallRun(self) -> None:
        """
        Figures of fewer messages or runs are not judged, and say why.
        """
        rows = [figure("tls", "imapmig", 6489, runs=1), figure("tls", "raw-multi50-2", 1000),
                figure("tls", "imapmig", 10, runs=1, tls="implicit"),
                figure("tls", "raw-multi50-2", 1000, tls="implicit")]  # fmt: skip
        lines = {line.what: line for line in figureLines(rows, context())}
        self.assertEqual(lines[TWO_CONNECTIONS].verdict, "not judged (5,000 messages, 1 run)")
        self.assertEqual(lines[tlsWhat("implicit", "2 connections")].verdict,
                         "not judged (5,000 messages, 1 run)")  # fmt: skip

    def test_smallScale(self) -> None:
        """
        The figures that hold are judged at their own sizes only.
        """
        rows = [ScaleFigure("imapmig-accounts", 3, 6, 1, 0, 1.0, 0.5, 6.0, 12.0, 50.0, None, 16),
                ScaleFigure("mbsync-group", 3, 6, 1, 0, 1.0, 0.1, 6.0, 6.0, 5.0, None, None),
                ScaleFigure("imapmig-queued", 20, 40, 1, 0, 1.0, None, None, None, 60.0, 0.5,
                            16)]  # fmt: skip
        lines = {line.what: line for line in scaleLines(rows, context(scale=RECORD))}
        self.assertEqual(lines[ACCOUNTS].verdict, "not judged (3 × 2)")
        self.assertEqual(lines[FIRST_MESSAGE].verdict, "not judged (20 jobs)")
        self.assertEqual(lines[QUEUED_RSS].verdict, "not judged (20 jobs)")


def tlsRun(client: str, kind: str, seconds: float, repetition: int) -> RunResult:
    setting = Setting("tls", "tmpfs", 0.0, None, "realistic", "default", tls="none")
    messages = 5000 if kind == "full" else 0
    return RunResult(setting, client, kind, repetition, messages, 10 * messages, seconds, 51200,
                     0.1, 0.1, 0, messages, True, "")  # fmt: skip


class RunWiringTests(SynchronousTestCase):
    """
    C{python -m bench.run} writes each part's time and load into
    results.md, and its lines of the acceptance into summary.md.
    """

    def bench(self, *argv: str) -> Bench:
        results, work = self.mktemp(), self.mktemp()
        bench = Bench(parseArguments(["--results", results, "--workdir", work, *argv]))
        os.makedirs(bench.resultsDir)
        return bench

    def test_partsAndSummary(self) -> None:
        """
        results.md ends with the parts' table (minutes, the load average at
        start and end); summary.md gets the run's lines, the catalog's
        others never measured.
        """
        bench = self.bench("--parts", "tls", "--runs", "3")
        for repetition in range(3):
            for client, seconds in (("imapmig", 1.3), ("raw-multi50-2", 1.1)):
                bench.results.append(tlsRun(client, "full", seconds, repetition))
                bench.results.append(tlsRun(client, "empty", 0.3, repetition))
        bench.parts.records["tls"] = RECORD
        with redirect_stdout(io.StringIO()):
            text = writeResults(bench, "python -m bench.run --parts tls", 60.0)
            writeSummaryOf(bench, "python -m bench.run --parts tls", "abc1234")
        self.assertIn("| tls | 2026-12-07 08:00 | 5.0 | 1.50, 1.20, 1.00 | 2.25, 1.50, 1.10 |",
                      text)  # fmt: skip
        with open(os.path.join(bench.resultsDir, "results.md")) as f:
            self.assertEqual(f.read(), text)
        lines = readSummary(os.path.join(bench.resultsDir, "summary.md"))
        two = lines[TWO_CONNECTIONS]
        self.assertEqual(two.measured, "0.80x (5,000 / 6,250 msg/s, medians of 3)")
        self.assertEqual((two.verdict, two.commit, two.date, two.load),
                         (MISSED, "abc1234", "2026-12-07 08:00", "1.50 → 2.25"))  # fmt: skip
        self.assertEqual(lines[STARTUP].measured, NEVER)

    def test_noTableOfItsOwn(self) -> None:
        """
        A run with no figure of its own (the fleet part alone) leaves
        results.md as it was.
        """
        bench = self.bench("--parts", "fleet")
        path = os.path.join(bench.resultsDir, "results.md")
        with open(path, "w") as f:
            f.write("the last full run\n")
        with redirect_stdout(io.StringIO()):
            writeResults(bench, "python -m bench.run --parts fleet", 60.0)
        with open(path) as f:
            self.assertEqual(f.read(), "the last full run\n")

    def test_checksCarryTheirLoad(self) -> None:
        """
        A check's file (C{--bigaccount}'s bigaccount.md) ends with the
        run's time and the load average at its start and end.
        """
        bench = self.bench("--bigaccount")
        path = os.path.join(bench.resultsDir, "bigaccount.md")
        with open(path, "w") as f:
            f.write("# rows\n")
        bench.parts.records["bigaccount"] = attrs.evolve(RECORD, part="bigaccount")
        with redirect_stdout(io.StringIO()):
            appendParts(bench, "bigaccount.md")
        with open(path) as f:
            text = f.read()
        self.assertTrue(text.startswith("# rows\n"))
        self.assertIn("| bigaccount | 2026-12-07 08:00 | 5.0 | 1.50, 1.20, 1.00 | "
                      "2.25, 1.50, 1.10 |\n", text)  # fmt: skip


class CommitTests(SynchronousTestCase):
    """
    The commit a summary line names.
    """

    def test_thisCheckout(self) -> None:
        """
        In a git checkout: the abbreviated commit, C{+} when imapmig/ or
        bench/ holds uncommitted changes.
        """
        commit = shortCommit()
        self.assertRegex(commit, r"^[0-9a-f]{7,}\+?$")

    def test_notACheckout(self) -> None:
        """
        Outside a git checkout (a tree from git archive) it says so, not
        git's error.
        """
        # Outside this checkout, whose git the test's own folder is in.
        directory = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, directory)
        self.patch(run, "REPOSITORY", directory)
        self.assertEqual(shortCommit(), "unknown (not a git checkout)")
