"""
Tests for the benchmark's pure parts: how runs become figures, and how
server variants hide capabilities; the scale part's plan, figures, targets
and files; the fleet part's statistics, ratios, verdicts and files; the TLS
part's plan, command lines and ratios, and the raw writer over TLS against
a private Dovecot.
"""

from __future__ import annotations

import imaplib
import io
import json
import os
import sqlite3
import ssl
import subprocess
import sys
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

import attrs
from attrs import asdict

from bench.corpora import BuiltCorpus
from bench.fleet import (
    CLAIM_MARKER,
    HEARTBEAT_MARKER,
    NO_CALLS,
    DaemonStart,
    DatabaseCost,
    DatabaseStats,
    FleetSizes,
    HeartbeatCost,
    QueuedRun,
    ScaleOutRun,
    SideBySide,
    StatementCost,
    TableWrites,
    databaseLines,
    fleetConfig,
    pageReadCost,
    parseSideBySide,
    queuedLines,
    queuedRows,
    sameCost,
    scaleOutCpuTable,
    scaleOutFigures,
    scaleOutLines,
    scaleOutRatios,
    scaleOutTable,
    sideBySideLines,
    statementCost,
    statementsTable,
    tableWritesTable,
    writeUserList,
)
from bench.contenders import CONTENDERS, Invocation, SourceAccount, buildTools
from bench.report import Figure, RunResult, Setting, figures, markdownTable, spreadTable
from imapmig.queue._pgfleetview import COUNTS, DAEMONS, HOLDERS
from imapmig.queue._pgstatements import CLAIM, HEARTBEAT
import bench.run
from bench.run import fleetSizes, makePlan, parseArguments, runKinds, scaleSizes, warmUpClients
from bench.scale import (
    ScaleRun,
    ScaleSizes,
    firstStored,
    mbsyncGroupConfig,
    parseStartup,
    scaleFigures,
    scalePlan,
    scaleTable,
    scaleTargets,
    splitCorpus,
    userListConfig,
)
from bench.servers import VARIANTS, BenchServer, capabilitiesWithout, reusingSettings
from bench.tlsrows import TLS_CLIENTS, tlsRatios, tlsTable
from tests.support import freshUser, sharedDovecot

SETTING = Setting("main", "tmpfs", 0.0, None, "realistic", "default")


def run(client: str, kind: str, seconds: float, repetition: int = 0, ok: bool = True) -> RunResult:
    return RunResult(
        setting=SETTING,
        client=client,
        kind=kind,
        repetition=repetition,
        messages=1000,
        octets=10_000_000,
        seconds=seconds,
        maxRssKiB=51200,
        userSeconds=0.1,
        systemSeconds=0.1,
        exitStatus=0 if ok else 1,
        counted=1000 if ok else 3,
        ok=ok,
        problem="" if ok else "count mismatch",
    )


class FigureTests(SynchronousTestCase):
    """
    bench.report.figures.
    """

    def test_netOfStartupMedianAndCeiling(self) -> None:
        """
        A figure is the median rate net of the median start-up; the ratio
        divides by the fastest raw writer of the same setting.
        """
        results = [
            run("imapmig", "empty", 0.5),
            run("imapmig", "empty", 0.7, 1),
            run("imapmig", "full", 1.6),
            run("imapmig", "full", 2.6, 1),
            run("imapmig", "full", 1.1, 2),
            run("raw-multi50", "empty", 0.0),
            run("raw-multi50", "full", 0.5),
        ]
        byClient = {f.client: f for f in figures(results)}
        imapmig = byClient["imapmig"]
        self.assertAlmostEqual(imapmig.startupSeconds, 0.6)
        self.assertAlmostEqual(imapmig.netSeconds, 1.0)
        self.assertAlmostEqual(imapmig.messagesPerSecond, 1000.0)
        self.assertAlmostEqual(imapmig.megabytesPerSecond, 10.0)
        self.assertEqual(imapmig.runs, 3)
        self.assertAlmostEqual(byClient["raw-multi50"].messagesPerSecond, 2000.0)
        assert imapmig.ceilingRatio is not None
        self.assertAlmostEqual(imapmig.ceilingRatio, 0.5)

    def test_failedRunsCounted(self) -> None:
        """
        Failed runs are not figures; they are counted, and a client with no
        successful run gets a zero figure rather than disappearing.
        """
        results = [
            run("mbsync", "empty", 0.1),
            run("mbsync", "full", 1.0, ok=False),
        ]
        [figure] = figures(results)
        self.assertEqual((figure.runs, figure.failed, figure.messagesPerSecond), (0, 1, 0.0))
        self.assertIn("mbsync", markdownTable([figure]))


class SpreadTests(SynchronousTestCase):
    """
    bench.report.spreadTable and how the runs of a repetition are laid out
    (bench.run.runKinds, warmUpClients, the clients' environment).
    """

    def test_spread(self) -> None:
        """
        Each client's start-up median with its least and most over its
        empty runs, its net rate's median, least and most, and its CPU net
        of an empty run's; failed runs left out.
        """
        results = [
            run("imapmig", "full", 1.6), run("imapmig", "empty", 0.5), run("imapmig", "empty", 0.6),
            run("imapmig", "full", 2.6, 1), run("imapmig", "empty", 0.7, 1),
            run("imapmig", "empty", 9.0, 1, ok=False), run("imapmig", "full", 1.1, 2),
        ]  # fmt: skip
        results[0] = attrs.evolve(results[0], userSeconds=0.5)
        table = spreadTable(results)
        self.assertIn("| imapmig, defaults | loopback, realistic, tmpfs | 0.600 (0.500-0.700, 3)"
                      " | 1,000 (500-2,000, 3) | 0.000 (0.200 - 0.200) |", table)  # fmt: skip
        self.assertEqual(spreadTable([run("imapmig", "empty", 0.5)]), "")

    def test_runKinds(self) -> None:
        """
        A repetition runs the corpus once, then the empty Maildir
        C{--empty-runs} times (3 unless told).
        """
        full = BuiltCorpus("/full", 10, 100, "realistic")
        empty = BuiltCorpus("/empty", 0, 0, "empty")
        self.assertEqual(runKinds(full, empty, 2), [("full", full), ("empty", empty), ("empty", empty)])
        self.assertEqual(parseArguments([]).empty_runs, 3)

    def test_warmUpClients(self) -> None:
        """
        The clients warmed up are the plan's, and imapmig where the plan
        has server-to-server rows or the scale part runs.
        """
        plan = makePlan(parseArguments(["--parts", "main", "--clients", "imapmig-1,raw",
                                        "--rtt", "0", "--corpus", "realistic"]))  # fmt: skip
        self.assertEqual(warmUpClients(plan, False), ["imapmig-1", "raw"])
        self.assertEqual(warmUpClients(plan, True), ["imapmig-1", "raw", "imapmig"])
        self.assertTrue(CONTENDERS["imapmig"].python)
        self.assertFalse(CONTENDERS["raw-multi50-2"].python)

    def test_bytecodeCache(self) -> None:
        """
        With a bytecode cache the clients write and read their bytecode
        there, whatever PYTHONDONTWRITEBYTECODE says; without one, the
        environment is left as it is.
        """
        self.patch(os, "environ", {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"})
        self.patch(bench.run, "_bytecodeCache", "/work/pycache")
        env = bench.run._environment()
        self.assertNotIn("PYTHONDONTWRITEBYTECODE", env)
        self.assertEqual(env["PYTHONPYCACHEPREFIX"], "/work/pycache")
        self.patch(bench.run, "_bytecodeCache", None)
        env = bench.run._environment()
        self.assertEqual(env["PYTHONDONTWRITEBYTECODE"], "1")
        self.assertNotIn("PYTHONPYCACHEPREFIX", env)


class CapabilityTests(SynchronousTestCase):
    """
    bench.servers.capabilitiesWithout.
    """

    def test_variants(self) -> None:
        """
        The default variant overrides nothing; the others hide and add
        capabilities, keeping the rest in order.
        """
        default = ["IMAP4rev1", "LITERAL+", "MULTIAPPEND", "UIDPLUS"]
        self.assertIsNone(capabilitiesWithout(default, VARIANTS["default"]))
        self.assertEqual(
            capabilitiesWithout(default, VARIANTS["no-multiappend"]),
            "IMAP4rev1 LITERAL+ UIDPLUS",
        )
        self.assertEqual(
            capabilitiesWithout(default, VARIANTS["literal-minus"]),
            "IMAP4rev1 UIDPLUS LITERAL-",
        )


class PlanTests(SynchronousTestCase):
    """
    bench.run.makePlan: which settings run, with how many messages.
    """

    def test_serversCapOnlyLiteralMinus(self) -> None:
        """
        At an RTT above zero only the LITERAL- server runs a capped number
        of messages (a synchronizing literal costs a round trip each); the
        server without MULTIAPPEND still pipelines, and a run of a few
        hundred messages there would be shorter than the noise of the
        start-up it is net of.
        """
        plan = makePlan(parseArguments(["--parts", "servers"]))
        counts = {(job.setting.server, job.setting.rttMs): job.messages for job in plan}
        self.assertEqual(
            counts,
            {
                ("no-multiappend", 0.0): 5000,
                ("no-multiappend", 20.0): 5000,
                ("literal-minus", 0.0): 5000,
                ("literal-minus", 20.0): 400,
            },
        )

    def test_naglePart(self) -> None:
        """
        The nagle part runs the synchronizing-only server with the Nagle
        shim preloaded and without it, on loopback with the small corpus, the imaplib
        loop, imapmig on 1 and 2 connections and the raw writers side by
        side in each, C{--nagle-messages} messages; then the LITERAL-
        server the same two ways with the realistic corpus, the imaplib
        loop and imapmig.
        """
        plan = makePlan(parseArguments(["--parts", "nagle", "--nagle-messages", "1500"]))
        self.assertEqual(
            [(j.setting.server, j.setting.nagle, j.setting.rttMs, j.setting.corpus,
              j.messages) for j in plan],
            [("sync-only", True, 0.0, "small", 1500), ("sync-only", False, 0.0, "small", 1500),
             ("literal-minus", True, 0.0, "realistic", 1500),
             ("literal-minus", False, 0.0, "realistic", 1500)],
        )  # fmt: skip
        self.assertEqual(
            [j.clients for j in plan],
            [("imaplib-nodelay", "imapmig-1", "imapmig", "raw", "raw-wait", "raw-wait-2")] * 2
            + [("imaplib-nodelay", "imapmig-1", "imapmig")] * 2,
        )
        self.assertEqual(plan[0].setting.link(), "loopback, server Nagle on")


def scaleRun(
    row: str,
    seconds: float,
    repetition: int = 0,
    *,
    ok: bool = True,
    accounts: int = 200,
    messages: int = 4000,
    first: float | None = None,
    rss: int = 102400,
    maxJobs: int | None = 16,
) -> ScaleRun:
    return ScaleRun(row, repetition, accounts, messages, seconds, rss, 0.1, 0.1, ok,
                    "" if ok else "3 accounts incomplete", firstMessageSeconds=first,
                    maxJobs=maxJobs)  # fmt: skip


class ScalePlanTests(SynchronousTestCase):
    """
    The scale part's arguments and the order of its runs.
    """

    def test_defaultPartsAndSizes(self) -> None:
        """
        The scale part runs by default, with the sizes of issue 17: 200
        accounts x 20 messages, 10,000 queued jobs, max_jobs 16, 10
        start-up runs; it adds no setting to the main matrix's plan.
        """
        args = parseArguments([])
        self.assertIn("scale", args.parts)
        self.assertEqual(scaleSizes(args), ScaleSizes(200, 20, 10_000, 16, 10))
        self.assertEqual(ScaleSizes().messages, 4000)
        self.assertEqual(makePlan(parseArguments(["--parts", "scale"])), [])
        self.assertIsNone(scaleSizes(parseArguments(["--parts", "main"])))
        self.assertIsNone(scaleSizes(parseArguments(["--quick"])))

    def test_sizesFromArguments(self) -> None:
        """
        Each size has its option.
        """
        args = parseArguments(["--parts", "scale", "--scale-accounts", "10",
                               "--scale-per-account", "5", "--scale-queued", "300",
                               "--scale-max-jobs", "4", "--startup-runs", "3"])  # fmt: skip
        self.assertEqual(scaleSizes(args), ScaleSizes(10, 5, 300, 4, 3))
        args = parseArguments(["--parts", "scale", "--scale-precreate"])
        self.assertEqual(scaleSizes(args), ScaleSizes(precreate=True))

    def test_badSizesRefused(self) -> None:
        """
        Sizes that make no run are refused.
        """
        self.patch(sys, "stderr", io.StringIO())
        for argv in (["--scale-accounts", "0"], ["--scale-queued", "-1"],
                     ["--scale-max-jobs", "0"], ["--parts", "scales"]):  # fmt: skip
            self.assertRaises(SystemExit, parseArguments, argv)

    def test_order(self) -> None:
        """
        Each repetition runs the empty runs first, then each many-accounts
        row beside its one-account peer, then the queued jobs;
        bench/startup.py runs once, last.  No queued jobs, no start-up
        runs: those rows are left out.
        """
        perRepetition = ["imapmig-empty", "mbsync-empty", "imapmig-one", "imapmig-accounts",
                         "mbsync-one", "mbsync-group", "imapmig-queued"]  # fmt: skip
        self.assertEqual(
            scalePlan(ScaleSizes(), 2),
            [(row, 0) for row in perRepetition] + [(row, 1) for row in perRepetition]
            + [("imapmig-startup", 0)],
        )
        self.assertEqual(
            [row for row, _ in scalePlan(ScaleSizes(queued=0, startupRuns=0), 1)],
            perRepetition[:-1],
        )


class ScaleFigureTests(SynchronousTestCase):
    """
    bench.scale.scaleFigures, scaleTable and scaleTargets.
    """

    def results(self) -> list[ScaleRun]:
        return [
            scaleRun("imapmig-empty", 0.5, accounts=1, messages=0),
            scaleRun("imapmig-empty", 0.7, 1, accounts=1, messages=0),
            scaleRun("mbsync-empty", 0.1, accounts=1, messages=0),
            scaleRun("imapmig-one", 2.6, accounts=1),
            scaleRun("imapmig-one", 2.2, 1, accounts=1),
            scaleRun("imapmig-accounts", 4.6),
            scaleRun("imapmig-accounts", 9.0, 1, ok=False),
            scaleRun("mbsync-group", 20.1, maxJobs=None),
            scaleRun("imapmig-queued", 6.0, accounts=10_000, messages=200_000, first=4.5,
                     rss=250 * 1024),  # fmt: skip
            scaleRun("imapmig-queued", 7.0, 1, accounts=10_000, messages=200_000, first=5.5,
                     rss=200 * 1024),  # fmt: skip
            scaleRun("imapmig-startup", 0.48, accounts=1, messages=0),
            scaleRun("imapmig-startup", 0.48, 1, accounts=1, messages=0),
            scaleRun("imapmig-startup-daemon", 0.38, accounts=1, messages=0),
            scaleRun("imapmig-startup-daemon", 0.38, 1, accounts=1, messages=0),
        ]

    def test_figures(self) -> None:
        """
        One figure per row in table order, the empty runs folded into the
        rates: each rate is net of the median of its client's empty runs;
        failed runs are counted, not figures; the queued row's first
        message is the median; peak RSS is the largest.
        """
        rows = {f.row: f for f in scaleFigures(self.results())}
        self.assertEqual(
            list(rows),
            ["imapmig-accounts", "imapmig-one", "mbsync-group", "imapmig-queued",
             "imapmig-startup", "imapmig-startup-daemon"],
        )  # fmt: skip
        one, many = rows["imapmig-one"], rows["imapmig-accounts"]
        self.assertAlmostEqual(one.startupSeconds or 0, 0.6)
        # Net 2.0 s and 1.6 s: 2,000 and 2,500 messages/s.
        self.assertAlmostEqual(one.messagesPerSecond or 0, 2250.0)
        self.assertAlmostEqual(many.messagesPerSecond or 0, 1000.0)
        self.assertEqual((many.runs, many.failed), (1, 1))
        self.assertAlmostEqual(rows["mbsync-group"].messagesPerSecond or 0, 200.0)
        queued = rows["imapmig-queued"]
        self.assertAlmostEqual(queued.firstMessageSeconds or 0, 5.0)
        self.assertEqual(queued.peakRssMiB, 250.0)
        self.assertIsNone(queued.messagesPerSecond)
        self.assertEqual(rows["imapmig-startup"].runs, 2)
        self.assertEqual(rows["imapmig-startup-daemon"].runs, 2)

    def test_targets(self) -> None:
        """
        Each target of issue 17, point 6 is shown as met or not met, with
        the concurrency the many-accounts run had and the mbsync peer.
        """
        lines = scaleTargets(scaleFigures(self.results()))
        self.assertEqual(
            lines,
            [
                "- 200 accounts x 20 messages (max_jobs 16): 1,000 messages/s, 0.44x one "
                "account's 2,250 (target >= 0.7): **not met**",
                "- The same accounts: imapmig at 5.00x mbsync over a Group of 200 channels "
                "(200 messages/s)",
                "- 10,000 queued jobs: first message stored after 5.00 s (target <= 5 s): met",
                "- 10,000 queued jobs: peak RSS 262 MB (target < 300 MB): met",
                "- Start-up with one empty job, twistd -n imapmig (bench/startup.py, status "
                "off, median of 2): 0.480 s (target < 0.4 s): **not met**",
                "- Start-up with one empty job, python -m imapmig.daemon (bench/startup.py, "
                "status off, median of 2): 0.380 s (target < 0.4 s): met",
            ],
        )

    def test_targetsBeforeTheScheduler(self) -> None:
        """
        Without max_jobs the many-accounts line says the jobs ran one at a
        time; a row that did not run is said to be not measured.
        """
        results = [
            scaleRun("imapmig-empty", 0.5, accounts=1, messages=0),
            scaleRun("imapmig-one", 2.5, accounts=1, maxJobs=None),
            scaleRun("imapmig-accounts", 8.5, maxJobs=None),
        ]
        lines = scaleTargets(scaleFigures(results))
        self.assertIn("jobs one at a time: this imapmig does not accept max_jobs", lines[0])
        self.assertIn("0.25x", lines[0])
        self.assertEqual(lines[1:], ["- Queued jobs: not measured", "- Start-up: not measured"])

    def test_runShorterThanStartup(self) -> None:
        """
        A run no longer than its client's start-up has no net rate; the
        ratio is then taken from whole processes, and says so.
        """
        results = [
            scaleRun("imapmig-empty", 1.5, accounts=1, messages=0),
            scaleRun("imapmig-one", 1.2, accounts=1, messages=400),
            scaleRun("imapmig-accounts", 4.0, accounts=20, messages=400),
        ]
        rows = {f.row: f for f in scaleFigures(results)}
        self.assertIsNone(rows["imapmig-one"].messagesPerSecond)
        self.assertAlmostEqual(rows["imapmig-one"].grossMessagesPerSecond or 0, 400 / 1.2)
        line = scaleTargets(list(rows.values()))[0]
        self.assertIn("0.30x one account's 333 (whole processes", line)

    def test_table(self) -> None:
        """
        The table has a line per row with its label; a row without a
        successful run says FAILED.
        """
        figures = scaleFigures(self.results() + [scaleRun("mbsync-one", 1.0, ok=False)])
        table = scaleTable(figures)
        self.assertIn("| imapmig, many accounts (one daemon, user list) | 200 | 4,000 | 16 | "
                      "4.60 (1 failed runs) | 0.60 | 870 | 1,000 |  | 105 |", table)  # fmt: skip
        self.assertIn("| mbsync, one account (the same messages) | 200 | 4,000 | 16 | FAILED |",
                      table)  # fmt: skip
        self.assertIn("| 5.00 |", table)


class StartupOutputTests(SynchronousTestCase):
    """
    bench.scale.parseStartup reads bench/startup.py's output.
    """

    def test_parse(self) -> None:
        """
        Each launcher's and configuration's median becomes that many runs
        carrying it.
        """
        output = (
            "twistd          status off  median 0.487 s  min 0.450  max 0.600  (3 runs)\n"
            "twistd          status on   median 0.520 s  min 0.500  max 0.700  (3 runs)\n"
            "imapmig-daemon  status off  median 0.387 s  min 0.350  max 0.600  (2 runs)\n"
            "imapmig-daemon  status on   median 0.420 s  min 0.400  max 0.700  (2 runs)\n"
            "import times (twistd -n imapmig): x\n"
        )
        rows = parseStartup(output)
        self.assertEqual(
            [r.row for r in rows],
            ["imapmig-startup"] * 3 + ["imapmig-startup-status"] * 3
            + ["imapmig-startup-daemon"] * 2 + ["imapmig-startup-daemon-status"] * 2,
        )  # fmt: skip
        self.assertEqual({r.seconds for r in rows[:3]}, {0.487})
        self.assertEqual({r.seconds for r in rows[6:8]}, {0.387})
        self.assertEqual(parseStartup("nothing\n"), [])

    def test_parseOneLauncher(self) -> None:
        """
        A line without a launcher (bench/startup.py before it measured two)
        is twistd's.
        """
        rows = parseStartup("status off  median 0.387 s  min 0.350  max 0.600  (3 runs)\n")
        self.assertEqual([r.row for r in rows], ["imapmig-startup"] * 3)


class ScaleFilesTests(SynchronousTestCase):
    """
    The files the scale part writes: the user list, the mbsync group, the
    corpus split into accounts, and how the first stored message is seen.
    """

    def test_userList(self) -> None:
        """
        A job template with a CSV user list of one row per account, each
        with its Maildir; max_jobs only when given.
        """
        directory = self.mktemp()
        os.makedirs(directory)
        path = userListConfig(directory, "127.0.0.1", 1143,
                              [("b00001", "/m/1"), ("b00002", "/m/2")], 16)  # fmt: skip
        with open(path) as f:
            document = yaml.safe_load(f)
        self.assertEqual(document["max_jobs"], 16)
        self.assertIs(document["status"], False)
        [template] = document["jobs"]
        self.assertEqual(template["jobs_from"], "users.csv")
        self.assertEqual(template["destination"]["server"], "bench")
        with open(os.path.join(directory, "users.csv")) as f:
            self.assertEqual(f.read(), "destination_user,maildir\nb00001,/m/1\nb00002,/m/2\n")
        path = userListConfig(directory, "127.0.0.1", 1143, [("b00001", "/m/1")], None)
        with open(path) as f:
            self.assertNotIn("max_jobs", yaml.safe_load(f))

    def test_mbsyncGroup(self) -> None:
        """
        One channel per account, each from its own copy of its Maildir,
        all in the group that the command line syncs.
        """
        directory = self.mktemp()
        maildir = os.path.join(directory, "source")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        run = os.path.join(directory, "run")
        os.makedirs(run)
        argv = mbsyncGroupConfig(run, "127.0.0.1", 1143, [("b1", maildir), ("b2", maildir)])
        self.assertEqual(argv[-1], "many")
        with open(os.path.join(run, "mbsyncrc")) as f:
            text = f.read()
        self.assertIn("Group many\nChannel c00000\nChannel c00001\n", text)
        self.assertIn("User b2\n", text)
        self.assertTrue(os.path.isdir(os.path.join(run, "near", "00001", "cur")))

    def test_splitCorpus(self) -> None:
        """
        The corpus is dealt oldest first into equal Maildirs, each message
        keeping its folder; together they hold every message once.
        """
        work = self.mktemp()
        root = os.path.join(work, "corpus", "small-6-seed1", "Maildir")
        names = []
        for index in range(6):
            folder = root if index % 2 == 0 else os.path.join(root, ".Sent")
            for sub in ("cur", "new", "tmp"):
                os.makedirs(os.path.join(folder, sub), exist_ok=True)
            name = f"{1000 + index}.M{index}P1.bench:2,S"
            names.append(name)
            with open(os.path.join(folder, "cur", name), "wb") as f:
                f.write(b"Subject: %d\n\nbody\n" % index)
        open(os.path.join(root, ".Sent", "maildirfolder"), "w").close()
        corpus = BuiltCorpus(path=root, messages=6, octets=0, profile="small")
        parts = splitCorpus(work, corpus, 3)
        self.assertEqual([p.messages for p in parts], [2, 2, 2])
        self.assertEqual(sorted(os.listdir(os.path.join(parts[1].path, "cur"))), [names[2]])
        self.assertEqual(os.listdir(os.path.join(parts[1].path, ".Sent", "cur")), [names[3]])
        self.assertTrue(os.path.exists(os.path.join(parts[1].path, ".Sent", "maildirfolder")))

    def test_firstStored(self) -> None:
        """
        A message counts once the state database records it stored (no
        failure, not found already there); a missing database or table is
        not yet.
        """
        path = os.path.join(self.mktemp() + ".sqlite")
        self.assertFalse(firstStored(path))
        connection = sqlite3.connect(path)
        connection.execute("CREATE TABLE other (x)")
        connection.commit()
        self.assertFalse(firstStored(path))
        connection.execute("CREATE TABLE messages (failure TEXT, present INTEGER)")
        connection.execute("INSERT INTO messages VALUES ('refused', 0), (NULL, 1)")
        connection.commit()
        self.assertFalse(firstStored(path))
        connection.execute("INSERT INTO messages VALUES (NULL, 0)")
        connection.commit()
        connection.close()
        self.assertTrue(firstStored(path))
    def test_serverToServerPart(self) -> None:
        """
        The s2s part runs imapmig with an IMAP source, Dovecot's
        C{doveadm backup -R imapc:} and the raw fetch-then-MULTIAPPEND
        client side by side, on loopback, tmpfs, the realistic corpus; it
        is in the default list of parts, and C{--clients} narrows it.
        """
        plan = makePlan(parseArguments(["--parts", "s2s", "--messages", "700"]))
        self.assertEqual(
            [(j.setting.part, j.setting.store, j.setting.rttMs, j.setting.corpus, j.clients,
              j.messages) for j in plan],
            [("s2s", "tmpfs", 0.0, "realistic", ("imapmig-s2s", "dsync", "raw-s2s"), 700)],
        )  # fmt: skip
        self.assertIn("s2s", parseArguments([]).parts)
        narrowed = makePlan(parseArguments(["--parts", "s2s", "--clients", "imapmig-s2s,dsync"]))
        self.assertEqual([j.clients for j in narrowed], [("imapmig-s2s", "dsync")])


class FleetStatisticsTests(SynchronousTestCase):
    """
    bench.fleet: the database's counters and statements between two
    readings, and what "the same cost" means.
    """

    def test_databaseDelta(self) -> None:
        """
        The difference of two readings: commits, each table's inserted,
        updated and deleted rows; a table made meanwhile counts whole, a
        table not written is left out.
        """
        before = DatabaseStats(100, (TableWrites("imapmig.messages", 10, 5, 0),
                                     TableWrites("imapmig.folders", 3, 0, 0)))  # fmt: skip
        after = DatabaseStats(130, (TableWrites("imapmig.messages", 2010, 25, 0),
                                    TableWrites("imapmig.folders", 3, 0, 0),
                                    TableWrites("imapmig.journal", 1, 0, 1)))  # fmt: skip
        delta = after.minus(before)
        self.assertEqual(delta.commits, 30)
        self.assertEqual(
            delta.tables,
            (TableWrites("imapmig.messages", 2000, 20, 0), TableWrites("imapmig.journal", 1, 0, 1)),
        )
        self.assertEqual(delta.rowWrites, 2022)

    def test_statementCost(self) -> None:
        """
        The statements whose text holds the marker, summed, and their
        difference between two readings; per call, or None without calls.
        """
        rows = [
            ("WITH beat AS (UPDATE imapmig_queue.daemons ...) SELECT $1", 10, 5.0, 40),
            ("WITH beat AS (UPDATE imapmig_queue.daemons ...) SELECT $2", 2, 1.0, 8),
            ("WITH next AS (...) UPDATE imapmig_queue.jobs j SET state = $3, owner = $1,"
             " generation = j.generation + $4", 7, 3.5, 70),
        ]
        beat = statementCost(rows, HEARTBEAT_MARKER)
        self.assertEqual(beat, StatementCost(12, 6.0, 48))
        self.assertEqual(beat.blocksPerCall, 4.0)
        self.assertEqual(beat.meanMs, 0.5)
        claim = statementCost(rows, CLAIM_MARKER).minus(StatementCost(2, 0.5, 20))
        self.assertEqual(claim, StatementCost(5, 3.0, 50))
        self.assertIsNone(NO_CALLS.blocksPerCall)
        self.assertIsNone(NO_CALLS.meanMs)

    def test_sameCost(self) -> None:
        """
        The larger size costs the same when at most 1.2x the smaller; an
        unmeasured side is never the same.
        """
        self.assertTrue(sameCost(10.0, 12.0))
        self.assertTrue(sameCost(10.0, 7.0))
        self.assertFalse(sameCost(10.0, 12.5))
        self.assertFalse(sameCost(None, 1.0))
        self.assertFalse(sameCost(1.0, None))
        self.assertTrue(sameCost(0.0, 0.0))


def scaleOutRun(daemons: int, seconds: float, ok: bool = True, repetition: int = 0,
                kind: str = "full") -> ScaleOutRun:  # fmt: skip
    return ScaleOutRun(daemons, repetition, 200, 4000 if kind == "full" else 0, seconds, 80_000,
                       3 * daemons, 50, 4100, ok, "" if ok else "exit status 1", kind)  # fmt: skip


def withStartup(runs: list[ScaleOutRun], seconds: float = 2.0) -> list[ScaleOutRun]:
    return runs + [scaleOutRun(n, seconds, kind="empty") for n in {r.daemons for r in runs}]


class FleetScaleOutTests(SynchronousTestCase):
    """
    bench.fleet: the scale-out row's figures, ratios and verdicts.
    """

    def test_ratios(self) -> None:
        """
        Each number of daemons' median time over its successful runs, its
        rate whole and net of the median of its empty runs, and those rates
        over one daemon's.
        """
        runs = [scaleOutRun(1, 42.0), scaleOutRun(1, 46.0, repetition=1),
                scaleOutRun(2, 23.0), scaleOutRun(2, 99.0, ok=False),
                scaleOutRun(3, 17.0), scaleOutRun(1, 1.0, kind="empty"),
                scaleOutRun(1, 3.0, kind="empty", repetition=1), scaleOutRun(2, 2.0, kind="empty"),
                scaleOutRun(3, 2.0, kind="empty"), scaleOutRun(3, 9.0, kind="empty", ok=False)]  # fmt: skip
        figures = scaleOutFigures(runs)
        self.assertEqual([(f.daemons, f.runs, f.failed, f.seconds, f.startupSeconds)
                          for f in figures],
                         [(1, 2, 0, 44.0, 2.0), (2, 1, 1, 23.0, 2.0), (3, 1, 1, 17.0, 2.0)])  # fmt: skip
        self.assertEqual(figures[0].netMessagesPerSecond, 4000 / 42.0)
        ratios = scaleOutRatios(figures)
        self.assertEqual(ratios[1], 1.0)
        self.assertAlmostEqual(ratios[2], 2.0)
        self.assertAlmostEqual(ratios[3], 2.8)
        whole = scaleOutRatios(figures, net=False)
        self.assertAlmostEqual(whole[2], 44 / 23)
        self.assertEqual(scaleOutRatios(scaleOutFigures([scaleOutRun(1, 40.0)])), {})

    def test_verdicts(self) -> None:
        """
        Two daemons must reach 1.8x one, three 2.5x: each checked, the
        figures beside.
        """
        lines = scaleOutLines(
            scaleOutFigures(withStartup([scaleOutRun(1, 42.0), scaleOutRun(2, 25.0),
                                         scaleOutRun(3, 17.0)])),
            20.0, 4,
        )  # fmt: skip
        self.assertEqual(len(lines), 2)
        self.assertIn("2 daemons against one (20 ms round trip, 4 connections per daemon): 1.74x"
                      " net of start-up (174 against 100 messages/s; whole runs 1.68x;",
                      lines[0])  # fmt: skip
        self.assertTrue(lines[0].endswith("target >= 1.8): **missed**"), lines[0])
        self.assertIn("2.67x", lines[1])
        self.assertTrue(lines[1].endswith("target >= 2.5): met"), lines[1])

    def test_notMeasured(self) -> None:
        """
        Without a successful run of one daemon, or of N, nothing passes.
        """
        for runs in ([scaleOutRun(1, 40.0, ok=False), scaleOutRun(2, 20.0)],
                     [scaleOutRun(1, 40.0), scaleOutRun(2, 20.0), scaleOutRun(3, 15.0)]):  # fmt: skip
            lines = scaleOutLines(scaleOutFigures(withStartup(runs)[:len(runs)]), 20.0, 4)
            self.assertEqual(lines, ["- 2 daemons against one, 20 ms: not measured",
                                     "- 3 daemons against one, 20 ms: not measured"])  # fmt: skip
        table = scaleOutTable(scaleOutFigures([scaleOutRun(1, 40.0, ok=False)]), [])
        self.assertIn("| 1 | 0 (1 failed) | FAILED |", table)

    def test_serverReusesProcesses(self) -> None:
        """
        The row's server in Dovecot's high-performance mode: its
        configuration ends with C{service_count = 0} and the processes kept
        started for C{imap-login} and C{imap}; by default, neither.
        """
        self.assertEqual(reusingSettings(12), [
            "service imap-login {", "  service_count = 0", "  process_min_avail = 12", "}",
            "service imap {", "  service_count = 0", "  process_min_avail = 12", "}",
        ])  # fmt: skip
        options: dict[str, Any] = dict(
            accounts=1, fsync=False, mailRoot=None, capabilities=None, compress=False,
            namespace=None, address="127.0.0.1", inNamespace=None,
        )  # fmt: skip
        reusing = BenchServer(self.mktemp(), reuseProcesses=12, **options)
        settings = reusing._instance._optionalSettings()
        self.assertEqual(settings[-8:], reusingSettings(12))
        default = BenchServer(self.mktemp(), **options)
        self.assertNotIn("  service_count = 0", default._instance._optionalSettings())
        self.assertEqual((reusing.reuseProcesses, default.reuseProcesses), (12, 0))

    def test_serverImapMemory(self) -> None:
        """
        The server's C{imap} processes may be given more memory than
        Dovecot's default C{vsz_limit}; by default they are not.
        """
        options: dict[str, Any] = dict(
            accounts=1, fsync=False, mailRoot=None, capabilities=None, compress=False,
            namespace=None, address="127.0.0.1", inNamespace=None,
        )  # fmt: skip
        roomy = BenchServer(self.mktemp(), imapMemory="2G", **options)
        self.assertEqual(roomy._instance._optionalSettings()[-3:],
                         ["service imap {", "  vsz_limit = 2G", "}"])  # fmt: skip
        both = BenchServer(self.mktemp(), imapMemory="1G", reuseProcesses=2, **options)
        self.assertEqual(both._instance._optionalSettings()[-11:-3], reusingSettings(2))
        default = BenchServer(self.mktemp(), **options)
        self.assertFalse([s for s in default._instance._optionalSettings() if "vsz_limit" in s])

    def test_cpuTable(self) -> None:
        """
        Where each number of daemons' CPU went: the medians over its
        successful full runs of the daemons' CPU (in all, and per job net
        of the empty runs'),
        Dovecot's, PostgreSQL's, the delay line's and other work's (the
        machine's busy time less the row's), and the timeline: first job
        start, last job done, each daemon's exit in order, a job's mean
        time, the slots' use and the jobs' span against one daemon's.
        """
        self.patch(os, "cpu_count", lambda: 2)

        def measured(daemons: int, seconds: float, dovecot: float, **kwargs: Any) -> ScaleOutRun:
            return attrs.evolve(
                scaleOutRun(daemons, seconds, **kwargs),
                exits=tuple(seconds - 0.5 * i for i in range(daemons)),
                daemonCpu=(1.0,) * daemons, dovecotCpu=dovecot, postgresqlCpu=1.0,
                delayCpu=0.5, busyCpu=10.0, firstTransition=1.5, lastTransition=seconds - 1,
                jobSeconds=0.2,
            )  # fmt: skip

        table = scaleOutCpuTable([
            measured(1, 16.0, 2.0), measured(1, 18.0, 4.0, repetition=1),
            measured(1, 99.0, 9.0, ok=False), measured(3, 8.0, 2.0),
            attrs.evolve(scaleOutRun(3, 2.0, kind="empty"), daemonCpu=(0.5,) * 3),
            attrs.evolve(scaleOutRun(1, 2.0, kind="empty"), daemonCpu=(0.5,)),
            scaleOutRun(2, 2.0, kind="empty"),
        ], 4)  # fmt: skip
        rows = table.splitlines()
        self.assertEqual(len(rows), 4, table)
        self.assertEqual(rows[2], "| 1 | 17.00 | 34.0 | 10.0 | 1.00 | 2.5 | 3.00 | 1.00 | 0.50 |"
                                  " 4.50 | 1.50 | 16.00 | 17.00 | 0.200 | 69% | 1.00 |")  # fmt: skip
        self.assertEqual(rows[3], "| 3 | 8.00 | 16.0 | 10.0 | 3.00 | 7.5 | 2.00 | 1.00 | 0.50 |"
                                  " 3.50 | 1.50 | 7.00 | 7.00, 7.50, 8.00 | 0.200 | 61% | 2.64 |")  # fmt: skip


class FleetDatabaseRowTests(SynchronousTestCase):
    """
    bench.fleet: the database row's verdicts.
    """

    def cost(self, commits: int, writes: int, connections: int) -> DatabaseCost:
        stats = DatabaseStats(commits, (TableWrites("imapmig.messages", writes, 0, 0),))
        return DatabaseCost(20_000, 10.0, stats, connections, 50, True, "")

    def beats(self, low: int, high: int) -> list[HeartbeatCost]:
        return [HeartbeatCost(1, 1, StatementCost(12, 1.2, low * 12)),
                HeartbeatCost(1000, 998, StatementCost(12, 1.5, high * 12))]  # fmt: skip

    def test_met(self) -> None:
        """
        200 commits and 24,000 row writes for 20,000 messages, 3
        connections, a heartbeat of equal buffers: every target met.
        """
        lines = databaseLines(self.cost(200, 24_000, 3), self.beats(8, 8))
        self.assertEqual(len(lines), 4)
        self.assertTrue(all(line.endswith(": met") for line in lines), lines)
        self.assertIn("1.00 per 100 messages", lines[0])
        self.assertIn("1.200 per message", lines[1])
        self.assertIn("holding 998: 8.0 buffers", lines[3])

    def test_missed(self) -> None:
        """
        One commit more, one row write more, a fourth connection, a
        heartbeat reading more with more jobs held: each missed.
        """
        lines = databaseLines(self.cost(201, 24_001, 4), self.beats(8, 10))
        self.assertTrue(all(line.endswith("**missed**") for line in lines), lines)

    def test_notMeasured(self) -> None:
        """
        A failed run, or a heartbeat not measured at both sizes, passes
        nothing.
        """
        failed = DatabaseCost(20_000, 1.0, DatabaseStats(0, ()), 0, 0, False, "exit status 2")
        lines = databaseLines(failed, [HeartbeatCost(1, 0, NO_CALLS, "the daemon exited early")])
        self.assertEqual(lines, [
            "- Commits, row writes and connections per daemon: not measured (exit status 2)",
            "- Heartbeat cost from 1 to 1,000 held jobs: not measured (the daemon exited early)",
        ])  # fmt: skip
        table = tableWritesTable(self.cost(1, 2000, 1).stats, 20_000)
        self.assertIn("| imapmig.messages | 2,000 | 0 | 0 | 0.100 |", table)

    def test_statements(self) -> None:
        """
        The statements that ran most often first, their text on one line.
        """
        table = statementsTable([("COMMIT", 5, 1.0, 0),
                                 ("INSERT INTO imapmig.messages\n  SELECT |x|", 40, 12.5, 900),
                                 ("SELECT 1", 1, 0.1, 0)], limit=2)  # fmt: skip
        self.assertEqual(table.splitlines()[2:],
                         ["| 40 | 12.5 | 900 | `INSERT INTO imapmig.messages SELECT /x/` |",
                          "| 5 | 1.0 | 0 | `COMMIT` |"])  # fmt: skip


def queuedRun(jobs: int, firsts: tuple[float | None, ...], rssKiB: int, claimBlocks: int,
              pageMs: float, inserted: int = 0, pageBlocks: int = 8) -> QueuedRun:  # fmt: skip
    return QueuedRun(
        jobs=jobs, loadSeconds=12.5, loadProblem="", insertedByStarts=inserted,
        starts=tuple(DaemonStart(f, rssKiB) for f in firsts),
        claim=StatementCost(10, 2.0, claimBlocks * 10), heartbeat=StatementCost(6, 0.6, 60),
        pages=(("/", pageMs), ("/status.json", pageMs / 2)),
        pageReads=StatementCost(45, 4.5, 45 * pageBlocks), pagesHeld=(12, 12),
    )  # fmt: skip


class FleetQueuedTests(SynchronousTestCase):
    """
    bench.fleet: the million row's verdicts.
    """

    def test_met(self) -> None:
        """
        Loaded once (no row inserted by a start), every daemon's first
        message within 5 s and its RSS under 500 MB, claims, heartbeats
        and pages within 1.2x of the small list's.
        """
        small = queuedRun(1000, (1.0, 1.1), 100_000, 20, 10.0)
        large = queuedRun(1_000_000, (4.9, 3.0), 400_000, 22, 11.0)
        lines = queuedLines(large, small)
        self.assertTrue(all(line.endswith(": met") for line in lines[:-1]), lines)
        self.assertIn("1,000,000 rows loaded once by `imapmig state load-jobs` in 12.5 s", lines[0])
        self.assertIn("- Claim: 20.0 buffers, 0.200 ms per call at 1,000 jobs (10 calls); 22.0 buffers,"
                      " 0.200 ms at 1,000,000 (10 calls)", "\n".join(lines))  # fmt: skip
        self.assertEqual(len(lines), 1 + 2 * 2 + 3 + 2 + 1)
        # The work the fleets did while the pages were asked, to compare
        # like with like.
        self.assertEqual(lines[-1], "- The pages were asked while the fleet held 12 jobs at 1,000"
                                    " (0 failed by then) and 12 at 1,000,000 (0 failed)")

    def test_missed(self) -> None:
        """
        Rows inserted by a start, a first message after 5 s or none, 500
        MB, claims, the pages' reads and a page dearer at a million:
        missed.
        """
        small = queuedRun(1000, (1.0,), 100_000, 20, 10.0)
        large = queuedRun(1_000_000, (5.1, None), 488_282, 25, 13.0, inserted=1_000_000,
                          pageBlocks=10)  # fmt: skip
        lines = queuedLines(large, small)
        missed = [line for line in lines if line.endswith("**missed**")]
        self.assertEqual(len(missed), 1 + 2 + 2 + 1 + 1 + 2, lines)
        self.assertIn("- The pages' reads of the fleet (daemons, holders, counts): 8.0 buffers",
                      "\n".join(lines))  # fmt: skip
        self.assertIn("- Heartbeat (renewal): 10.0 buffers", "\n".join(lines))

    def test_pagesByTheirLeast(self) -> None:
        """
        A page's verdict compares the least time of its requests at both
        sizes (its own cost), the medians (the wait behind the migrating
        daemon's work) shown beside: a median twice the small list's with
        the same least is met; a least dearer by more than 1.2x is missed.
        """
        small = attrs.evolve(queuedRun(1000, (1.0,), 100_000, 20, 10.0),
                             pagesLeast=(("/", 2.0), ("/status.json", 3.0)))  # fmt: skip
        large = attrs.evolve(queuedRun(1_000_000, (1.0,), 100_000, 20, 20.0),
                             pagesLeast=(("/", 2.1), ("/status.json", 3.7)))  # fmt: skip
        lines = [line for line in queuedLines(large, small) if line.startswith("- Page ")]
        self.assertEqual(lines, [
            "- Page /: 2.0 ms at 1,000 jobs, 2.1 ms at 1,000,000 (least of the requests, its own"
            " cost; median 10.0 and 20.0 ms; target: at most 1.2x): met",
            "- Page /status.json: 3.0 ms at 1,000 jobs, 3.7 ms at 1,000,000 (least of the"
            " requests, its own cost; median 5.0 and 10.0 ms; target: at most 1.2x): **missed**",
        ])

    def test_pageReadCost(self) -> None:
        """
        The pages' reads are the fleet view's three statements, summed,
        each found by its text as C{pg_stat_statements} keeps it (its
        literals as C{$n}), and no other statement of the queue.
        """
        rows = [(DAEMONS.replace("'rate'", "$3"), 10, 1.0, 40),
                (HOLDERS.replace("%(names)s", "$1"), 10, 0.5, 30), (COUNTS, 20, 0.4, 20),
                (CLAIM, 5, 1.0, 150), (HEARTBEAT, 5, 0.3, 45)]  # fmt: skip
        self.assertEqual(pageReadCost(rows), StatementCost(40, 1.9, 90))
        self.assertEqual(pageReadCost(rows).blocksPerCall, 2.25)

    def test_notMeasured(self) -> None:
        """
        No run: not measured; without the small list, the comparison is
        not measured; a list not loaded apart says why.
        """
        self.assertEqual(queuedLines(None, None), ["- A million queued accounts: not measured"])
        large = queuedRun(1_000_000, (1.0,), 1000, 20, 10.0)
        large = QueuedRun(**{**asdict(large, recurse=False), "loadSeconds": None,
                             "loadProblem": "no such command"})  # fmt: skip
        lines = queuedLines(large, None)
        self.assertIn("not measured (no such command)", lines[0])
        self.assertTrue(lines[-1].endswith("against a small list: not measured"))


class FleetSideBySideTests(SynchronousTestCase):
    """
    bench.fleet: the SQLite row read from bench/sidebyside.py's output.
    """

    OUTPUT = """\
0 /work/wt/base:2: 1.20 s (5000 messages, CPU 0.90 s), empty 0.40 s
/work/wt/base:2: net rates [6250, 6100, 6400], median 6,250/s; CPU per message 110 us
/work/wt/here:2: net rates [6000, 6300, 6200], median 6,200/s; CPU per message 111 us
"""

    def test_parse(self) -> None:
        """
        Each client's net rates per round.
        """
        self.assertEqual(
            parseSideBySide(self.OUTPUT),
            {"/work/wt/base:2": (6250.0, 6100.0, 6400.0),
             "/work/wt/here:2": (6000.0, 6300.0, 6200.0)},
        )  # fmt: skip

    def test_verdict(self) -> None:
        """
        Without callgrind's counts: this tree's median rate within 5% of
        the commit before's, met; beyond, missed; no rates, not measured.
        """
        rates = parseSideBySide(self.OUTPUT)
        same = SideBySide("small-5000-seed1", rates["/work/wt/base:2"], rates["/work/wt/here:2"])
        self.assertAlmostEqual(same.ratio or 0, 6200 / 6250)
        slower = SideBySide("realistic-5000-seed1", (1000.0,), (940.0,))
        lines = sideBySideLines([same, slower, SideBySide("x", (), ())], "2ee44a1")
        self.assertIn("6,200 against 6,250 messages/s at 2ee44a1 net of start-up, median of 3",
                      lines[0])  # fmt: skip
        self.assertTrue(lines[0].endswith("(target within 5%): met"), lines[0])
        self.assertTrue(lines[1].endswith("**missed**"), lines[1])
        self.assertEqual(lines[2], "- One daemon on SQLite, x: not measured")
        self.assertEqual(sideBySideLines([], "2ee44a1"),
                         ["- One daemon on SQLite against the commit before: not measured"])  # fmt: skip

    def test_instructions(self) -> None:
        """
        With callgrind's counts, the verdict is theirs: within 5%, met
        whatever the wall-clock rates did; beyond, missed.
        """
        noisy = SideBySide("small-5000-seed1", (4481.0,), (7203.0,), 107_300.0, 107_400.0)
        dearer = SideBySide("realistic-5000-seed1", (1000.0,), (1000.0,), 250_000.0, 265_000.0)
        lines = sideBySideLines([noisy, dearer], "2ee44a1")
        self.assertEqual(
            lines[0],
            "- One daemon on SQLite, small-5000-seed1: 107.4k instructions per message against"
            " 107.3k at 2ee44a1 (+0.1%; callgrind); 7,203 against 4,481 messages/s at 2ee44a1"
            " net of start-up, median of 1 interleaved rounds (1.607x) (target within 5%): met",
        )
        self.assertIn("(+6.0%; callgrind)", lines[1])
        self.assertTrue(lines[1].endswith("**missed**"), lines[1])


class FleetFilesTests(SynchronousTestCase):
    """
    bench.fleet: the fleet's configuration and user lists, and the part's
    arguments.
    """

    def test_config(self) -> None:
        """
        A PostgreSQL state with its password file, the fleet section, the
        server's max_connections, one job template of one connection over
        the user list.
        """
        directory = self.mktemp()
        os.makedirs(directory)
        path = fleetConfig(
            os.path.join(directory, "imapmig.yaml"),
            uri="postgresql://imapmig_password@:5433/fleet1?host=/tmp/pg",
            databasePassword="/r/db-password", imapPassword="/r/password", host="10.77.0.1",
            port=1143, userList="users.csv", maildir="/m/1", maxJobs=4, maxConnections=8,
            lease=12, status="tcp:8025:interface=127.0.0.1",
        )  # fmt: skip
        with open(path) as f:
            document = yaml.safe_load(f)
        self.assertEqual(document["state"], "postgresql://imapmig_password@:5433/fleet1?host=/tmp/pg")
        self.assertEqual(document["state_password_file"], "/r/db-password")
        self.assertEqual(document["fleet"], {"name": "bench", "lease": 12})
        self.assertEqual(document["status"], {"listen": "tcp:8025:interface=127.0.0.1"})
        self.assertEqual(document["max_jobs"], 4)
        self.assertEqual(document["servers"]["bench"]["max_connections"], 8)
        [template] = document["jobs"]
        self.assertEqual((template["jobs_from"], template["connections"]), ("users.csv", 1))
        writeUserList(os.path.join(directory, "users.csv"), queuedRows(["b00000"], 3, "/m/1"))
        with open(os.path.join(directory, "users.csv")) as f:
            self.assertEqual(f.read(), "destination_user,maildir\nb00000,/m/1\n"
                             "absent0000000,/m/1\nabsent0000001,/m/1\n")  # fmt: skip

    def test_arguments(self) -> None:
        """
        The fleet part runs by default with the sizes of issue 30; each
        size has its option; a list of daemons without 1 is refused.
        """
        args = parseArguments([])
        self.assertIn("fleet", args.parts)
        self.assertEqual(fleetSizes(args), FleetSizes())
        self.assertEqual(FleetSizes().daemons, (1, 2, 3))
        self.assertIsNone(fleetSizes(parseArguments(["--quick"])))
        args = parseArguments(["--parts", "fleet", "--fleet-rows", "scaleout", "--fleet-accounts",
                               "20", "--fleet-daemons", "1,2", "--fleet-queued", "5000"])  # fmt: skip
        sizes = fleetSizes(args)
        assert sizes is not None
        self.assertEqual((sizes.rows, sizes.accounts, sizes.daemons, sizes.queued),
                         (("scaleout",), 20, (1, 2), 5000))  # fmt: skip
        self.assertEqual(makePlan(args), [])
        self.assertTrue(FleetSizes().reuseServerProcesses)
        sizes = fleetSizes(parseArguments(["--fleet-dovecot-per-connection"]))
        assert sizes is not None
        self.assertFalse(sizes.reuseServerProcesses)
        self.patch(sys, "stderr", io.StringIO())
        for argv in (["--fleet-daemons", "2,3"], ["--fleet-rows", "scale"]):
            self.assertRaises(SystemExit, parseArguments, argv)


def tlsFigure(client: str, tls: str, rate: float) -> Figure:
    """
    A figure of part C{tls}: C{client} at C{rate} messages per second over
    C{tls}.
    """
    setting = Setting("tls", "tmpfs", 0.0, None, "realistic", "default", tls=tls)
    return Figure(setting, client, 5000, 3, 0, 0.3, 5000 / rate, rate, 0.0, 60.0, None)


class ServerToServerPartTests(SynchronousTestCase):
    """
    The server-to-server part's run (L{bench.s2s.runServerToServer}).
    """

    def test_warmUpListsSizes(self) -> None:
        """
        The warm-up run, before every timed one, is dsync's on the full
        account: it lists the messages with their sizes, which Dovecot then
        keeps, so that no timed client pays for computing them.
        """
        import bench.s2s

        class Server:
            host, port, configPath = "127.0.0.1", 143, "/dev/null"

            def start(self) -> None: ...
            def stop(self) -> None: ...
            def freshAccount(self) -> str:
                return "user"
            def loadMaildir(self, user: str, path: str) -> None: ...

        calls: list[tuple[str, str, int]] = []

        class Bench:
            args = attrs.make_class("Args", {"runs": attrs.field(default=1),
                                             "empty_runs": attrs.field(default=2)})()  # fmt: skip
            workDir = "/nonexistent"

            def corpus(self, name: str, messages: int) -> BuiltCorpus:
                return BuiltCorpus("/nonexistent", messages, 0, name)

            def runOnce(self, network: object, destination: object, setting: object,
                        contender: Any, kind: str, corpus: object, repetition: int,
                        source: object) -> None:  # fmt: skip
                calls.append((contender.name, kind, repetition))

            def record(self, result: object) -> None: ...

        self.patch(bench.s2s, "tmpfsServer", lambda *a, **k: (Server(), "/nonexistent"))
        self.patch(bench.s2s, "emptyCorpus", lambda work: BuiltCorpus("/nonexistent", 0, 0, "empty"))
        [job] = makePlan(parseArguments(["--parts", "s2s", "--clients", "imapmig-s2s"]))
        bench.s2s.runServerToServer(Bench(), job)  # type: ignore[arg-type]
        self.assertEqual(calls, [("dsync", "full", -1), ("imapmig-s2s", "full", 0),
                                 ("imapmig-s2s", "empty", 0), ("imapmig-s2s", "empty", 0)])  # fmt: skip


class TLSPartTests(SynchronousTestCase):
    """
    The TLS part (C{--parts tls}, L{bench.tlsrows}): its plan, the clients'
    command lines over TLS, and the ratios beside their plain-TCP values.
    """

    def test_plan(self) -> None:
        """
        The tls part is in the default list; it plans one job per mode of
        C{--tls} (all three by default), each with imapmig with 1 and 2
        connections, the raw writer with as many, imapmig IMAP to IMAP and
        dsync; an unknown mode is refused.
        """
        self.assertIn("tls", parseArguments([]).parts)
        plan = makePlan(parseArguments(["--parts", "tls", "--messages", "700"]))
        self.assertEqual([j.setting.tls for j in plan], ["none", "implicit", "starttls"])
        self.assertEqual({j.clients for j in plan}, {TLS_CLIENTS})
        self.assertEqual({(j.setting.part, j.setting.store, j.messages) for j in plan},
                         {("tls", "tmpfs", 700)})  # fmt: skip
        narrowed = makePlan(parseArguments(["--parts", "tls", "--tls", "none,starttls"]))
        self.assertEqual([j.setting.tls for j in narrowed], ["none", "starttls"])
        with self.assertRaises(SystemExit):
            parseArguments(["--tls", "ssl"])

    def test_planWithServerToServerClients(self) -> None:
        """
        C{--clients} naming the server-to-server clients beside the Maildir
        ones gives each part its own: the main part none of those that need
        a source account (a run of all four parts in one command stopped
        there), the s2s and tls parts theirs.
        """
        plan = makePlan(parseArguments([
            "--parts", "main,s2s,tls", "--rtt", "0", "--store", "tmpfs", "--corpus", "realistic",
            "--clients", "imapmig,raw-multi50-2,imapmig-s2s,dsync,raw-s2s"]))  # fmt: skip
        byPart = {j.setting.part: j.clients for j in plan}
        self.assertEqual(byPart["main"], ("imapmig", "raw-multi50-2"))
        self.assertEqual(byPart["s2s"], ("imapmig-s2s", "dsync", "raw-s2s"))
        self.assertEqual(byPart["tls"], ("imapmig", "raw-multi50-2", "imapmig-s2s", "dsync"))

    def invocation(self, tls: str) -> Invocation:
        runDir = self.mktemp()
        os.makedirs(runDir)
        source = SourceAccount("127.0.0.1", 1143, "src", "/d/dovecot.conf", tls=tls,
                               tlsPort=1993, caPath="/s/ca.pem")  # fmt: skip
        return Invocation("127.0.0.1", 143, "b00001", "/m", runDir, VARIANTS["default"],
                          "/raw", source, tls=tls, tlsPort=993, caPath="/d/ca.pem")  # fmt: skip

    def test_rawWriter(self) -> None:
        """
        Over implicit TLS the raw writer connects to the imaps port, over
        STARTTLS to the plain one, each with C{--tls} and the CA; over
        plain TCP it has no TLS option.
        """
        build = CONTENDERS["raw-multi50-2"].argv
        implicit = build(self.invocation("implicit"))
        self.assertEqual(implicit[implicit.index("--port") + 1], "993")
        self.assertEqual(implicit[-5:-1], ["--tls", "implicit", "--ca", "/d/ca.pem"])
        starttls = build(self.invocation("starttls"))
        self.assertEqual(starttls[starttls.index("--port") + 1], "143")
        self.assertEqual(starttls[-5:-1], ["--tls", "starttls", "--ca", "/d/ca.pem"])
        self.assertNotIn("--tls", build(self.invocation("none")))

    def servers(self, argv: list[str]) -> Any:
        with open(argv[argv.index("--config") + 1]) as f:
            return yaml.safe_load(f)["servers"]

    def test_imapmig(self) -> None:
        """
        imapmig's configuration reaches the destination (and the source,
        IMAP to IMAP) by a C{tls:} endpoint on the imaps port or by
        STARTTLS, trusting each server's CA; plain TCP stays as it was.
        """
        implicit = self.servers(CONTENDERS["imapmig-s2s"].argv(self.invocation("implicit")))
        self.assertEqual(implicit["bench"], {"endpoint": "tls:127.0.0.1:993",
                                             "starttls": "off", "tls_ca": "/d/ca.pem"})
        self.assertEqual(implicit["source"], {"endpoint": "tls:127.0.0.1:1993",
                                              "starttls": "off", "tls_ca": "/s/ca.pem"})
        starttls = self.servers(CONTENDERS["imapmig"].argv(self.invocation("starttls")))
        self.assertEqual(starttls["bench"], {"endpoint": "tcp:127.0.0.1:143",
                                             "starttls": "required", "tls_ca": "/d/ca.pem"})
        plain = self.servers(CONTENDERS["imapmig-s2s"].argv(self.invocation("none")))
        self.assertEqual(plain["source"], {"endpoint": "tcp:127.0.0.1:1143",
                                           "starttls": "off", "allow_plaintext": True})

    def test_dsync(self) -> None:
        """
        dsync reads the source through imapc with C{imapc_ssl} (imaps on
        the imaps port, or starttls), verifying the source's CA.
        """
        implicit = CONTENDERS["dsync"].argv(self.invocation("implicit"))
        for setting in ("imapc_ssl=imaps", "imapc_port=1993", "imapc_ssl_verify=yes",
                        "ssl_client_ca_file=/s/ca.pem"):  # fmt: skip
            self.assertIn(setting, implicit)
        starttls = CONTENDERS["dsync"].argv(self.invocation("starttls"))
        self.assertIn("imapc_ssl=starttls", starttls)
        self.assertIn("imapc_port=1143", starttls)
        self.assertIn("imapc_ssl=no", CONTENDERS["dsync"].argv(self.invocation("none")))

    def test_ratios(self) -> None:
        """
        Each ratio (imapmig over its peer) is computed per mode and set
        beside its plain-TCP value: a ratio more than 10% below it misses,
        one within it (or above) meets.
        """
        rows = [
            tlsFigure("imapmig-1", "none", 1000), tlsFigure("raw-multi50", "none", 1000),
            tlsFigure("imapmig", "none", 900), tlsFigure("raw-multi50-2", "none", 1000),
            tlsFigure("imapmig-1", "implicit", 950), tlsFigure("raw-multi50", "implicit", 1000),
            tlsFigure("imapmig", "implicit", 700), tlsFigure("raw-multi50-2", "implicit", 1000),
        ]  # fmt: skip
        ratios = tlsRatios(rows)
        self.assertAlmostEqual(ratios["none"]["2 connections: imapmig / raw"], 0.9)
        self.assertAlmostEqual(ratios["implicit"]["1 connection: imapmig / raw"], 0.95)
        self.assertNotIn("IMAP to IMAP: imapmig / dsync", ratios["none"])
        table = tlsTable(rows)
        self.assertIn("| imapmig, 1 connection | 1,000 | 950 |", table)
        self.assertIn("1 connection: imapmig / raw over implicit TLS: 0.95 against 1.00 in "
                      "plain TCP (-5%; target: at most 10% below): met", table)  # fmt: skip
        self.assertIn("2 connections: imapmig / raw over implicit TLS: 0.70 against 0.90 in "
                      "plain TCP (-22%; target: at most 10% below): **missed**", table)  # fmt: skip
        self.assertNotIn("starttls", table)

    def test_link(self) -> None:
        """
        A TLS setting names its mode in the table's link column.
        """
        self.assertEqual(tlsFigure("imapmig", "starttls", 1).setting.link(),
                         "loopback, starttls TLS")  # fmt: skip
        self.assertEqual(SETTING.link(), "loopback")


class RawWriterTLSTests(SynchronousTestCase):
    """
    The raw writer C{bench/rawappend.c} over TLS against a private Dovecot.
    """

    def test_implicitAndStartTLS(self) -> None:
        """
        Built as the benchmark builds it (with OpenSSL), the raw writer
        appends every message of a Maildir over implicit TLS (the imaps
        port) and over STARTTLS, verifying the server's certificate against
        its CA; a CA that did not sign it is refused.
        """
        instance = sharedDovecot()
        workDir = self.mktemp()
        rawBinary, _ = buildTools(workDir)
        maildir = os.path.join(workDir, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        for n in range(3):
            with open(os.path.join(maildir, "cur", f"{n}.bench:2,S"), "wb") as f:
                f.write(b"Subject: %d\n\n" % n + b"x" * (40_000 * n) + b"\n")
        for tls, port in (("implicit", instance.tlsPort), ("starttls", instance.port)):
            user = freshUser(instance)
            argv = [rawBinary, "--host", "127.0.0.1", "--port", str(port), "--user", user.name,
                    "--password", user.password, "--maildir", maildir, "--batch", "2",
                    "--select", "--tls", tls, "--ca", instance.caCertificatePath]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(json.loads(done.stdout)["ok"], 2)
            imap = imaplib.IMAP4("127.0.0.1", instance.port)
            imap.login(user.name, user.password)
            self.assertEqual(imap.select("INBOX")[1], [b"3"])
            imap.logout()
        otherCA = os.path.join(workDir, "other.pem")
        with open(otherCA, "w") as f:
            f.write(ssl.get_server_certificate(("127.0.0.1", instance.tlsPort)))
        user = freshUser(instance)
        refused = subprocess.run(
            [rawBinary, "--host", "localhost", "--port", str(instance.tlsPort), "--user",
             user.name, "--password", user.password, "--maildir", maildir, "--tls",
             "implicit", "--ca", otherCA], capture_output=True, timeout=120,
        )  # fmt: skip
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(b"TLS handshake failed", refused.stderr)


class ServerToServerProbeTests(SynchronousTestCase):
    """
    L{bench.s2s_probe}'s clients: imapmig from this checkout, or from the
    checkout a client named C{imapmig=TREE} gives.
    """

    def test_treeOf(self) -> None:
        """
        C{imapmig=TREE} runs from TREE (made absolute); C{imapmig} and the
        other clients from this checkout.
        """
        from bench.contenders import REPOSITORY
        from bench.s2s_probe import treeOf

        self.assertEqual(treeOf("imapmig=/tmp/s2s-base"), "/tmp/s2s-base")
        self.assertEqual(treeOf("imapmig=base"), os.path.abspath("base"))
        self.assertEqual(treeOf("imapmig"), REPOSITORY)
        self.assertEqual(treeOf("dsync"), REPOSITORY)

    def test_split(self) -> None:
        """
        A server's CPU by process name (C{--tls}'s split): names in order,
        two decimals, what is below 10 ms left out.
        """
        from bench.s2s_probe import _split

        self.assertEqual(_split({"imap-login": 0.456, "imap": 1.2, "auth": 0.004}),
                         "imap 1.20 imap-login 0.46")  # fmt: skip
        self.assertEqual(_split({}), "")
