"""
Tests for the benchmark's pure parts: how runs become figures, and how
server variants hide capabilities.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from bench.report import RunResult, Setting, figures, markdownTable
from bench.run import makePlan, parseArguments
from bench.servers import VARIANTS, capabilitiesWithout

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
