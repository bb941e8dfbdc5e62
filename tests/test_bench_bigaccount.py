"""
Tests for the big-account rows of the benchmark (issue 31, point 4):
the spread corpus's folder sizes and files, and the rows' figures and
verdicts.
"""

from __future__ import annotations

import os
import sys

from twisted.trial.unittest import SynchronousTestCase

from bench.bigaccount import BigRow, Measured, measure, table, verdicts
from bench.clients.maildir import folders
from bench.corpora import BIG_FOLDERS, bigAccountCorpus, powerLawSizes
from bench.run import parseArguments


class PowerLawTests(SynchronousTestCase):
    def test_sizesFallByRank(self) -> None:
        """
        The sizes sum to the count, fall with the rank as 1/rank (the
        first folder twice the second, three times the third), and every
        folder gets a message when there are enough.
        """
        sizes = powerLawSizes(500_000, 20)
        self.assertEqual(sum(sizes), 500_000)
        self.assertEqual(sizes, sorted(sizes, reverse=True))
        self.assertAlmostEqual(sizes[0] / sizes[1], 2.0, places=2)
        self.assertAlmostEqual(sizes[0] / sizes[2], 3.0, places=2)
        self.assertEqual(powerLawSizes(20, 20), [1] * 20)
        self.assertEqual(sum(powerLawSizes(7, 20)), 7)


class BigCorpusTests(SynchronousTestCase):
    def test_spreadAndOne(self) -> None:
        """
        The spread corpus holds its messages in the twenty folders, each
        its power-law share; the one-folder corpus holds them all in INBOX;
        a second call reuses what the first wrote.
        """
        work = self.mktemp()
        spread = bigAccountCorpus(work, 60, "spread")
        self.assertEqual(spread.messages, 60)
        found = folders(spread.path)
        self.assertEqual(len(found), len(BIG_FOLDERS))
        counts = {
            name: sum(len(os.listdir(os.path.join(d, s))) for s in ("cur", "new"))
            for name, d in found
        }
        self.assertEqual(counts["INBOX"], powerLawSizes(60, 20)[0])
        self.assertEqual(counts["Archive"], powerLawSizes(60, 20)[1])
        self.assertEqual(sum(counts.values()), 60)
        one = bigAccountCorpus(work, 30, "one")
        self.assertEqual([name for name, _ in folders(one.path)], ["INBOX"])
        self.assertEqual(bigAccountCorpus(work, 30, "one"), one)


def _row(layout: str, messages: int, cpu: float, rss: float = 100, delta: float = 1.5) -> BigRow:
    return BigRow(
        layout=layout, messages=messages,
        imapmig=Measured(seconds=messages / 1000, cpuSeconds=cpu, maxRssMiB=rss, status=0),
        delta=Measured(seconds=delta, cpuSeconds=0.8, maxRssMiB=rss, status=0),
        raw=Measured(seconds=messages / 2000, cpuSeconds=0.1, maxRssMiB=5, status=0),
        stored=messages, loadAverage="1.00 1.00 1.00",
        empty=Measured(seconds=0.5, cpuSeconds=0.5, maxRssMiB=50, status=0),
    )  # fmt: skip


class BigRowTests(SynchronousTestCase):
    def test_cpuNetOfStartUp(self) -> None:
        """
        The CPU per message is net of the empty run's CPU (the start-up),
        so a fixed cost does not make the big run look cheaper.
        """
        self.assertEqual(_row("one", 5_000, 1.5).cpuPerMessageUs, 200.0)

    def test_verdicts(self) -> None:
        """
        Each row is judged against the smallest row of its layout: CPU per
        message within 10%, peak RSS under 500 MB, the delta pass under 5 s.
        """
        rows = [
            _row("spread", 5_000, 0.5 + 0.1), _row("spread", 500_000, 0.5 + 10.9),
            _row("one", 5_000, 0.5 + 0.1), _row("one", 500_000, 0.5 + 11.1, rss=600, delta=6),
        ]  # fmt: skip
        lines = verdicts(rows)
        self.assertNotIn("MISSED", lines[1])
        self.assertIn("1.09x", lines[1])
        self.assertIn("CPU per message 1.11x the 5,000-message figure: MISSED", lines[3])
        self.assertIn("peak RSS 600 MB: MISSED", lines[3])
        self.assertIn("delta pass 6.00 s: MISSED", lines[3])
        self.assertEqual(len(table(rows).splitlines()), 6)

    def test_noReference(self) -> None:
        """
        A smallest row whose CPU net of start-up is 0 or less (the
        start-up's CPU moved more than its work) judges nothing: the
        target is reported missed, not met by a negative ratio.
        """
        lines = verdicts([_row("spread", 5_000, 0.4), _row("spread", 500_000, 17.0)])
        self.assertIn("CPU per message nanx the 5,000-message figure: MISSED", lines[1])

    def test_options(self) -> None:
        """
        The sizes and layouts are options; the defaults are 5,000 and
        500,000 messages, spread and in one folder, each from a Maildir
        and from IMAP.
        """
        args = parseArguments(["--bigaccount", "--bigaccount-sizes", "5000,50000"])
        self.assertEqual(args.bigaccount_sizes, ["5000", "50000"])
        self.assertEqual(parseArguments(["--bigaccount"]).bigaccount_layouts,
                         ["spread", "one", "spread-imap", "one-imap"])  # fmt: skip


class SourceRowTests(SynchronousTestCase):
    def test_imapSourceConfig(self) -> None:
        """
        The configuration of a C{-imap} row reads the source account over
        IMAP from the bench server, its password from the run's file.
        """
        from bench.bigaccount import imapSourceConfig

        runDir = self.mktemp()
        os.makedirs(runDir)
        with open(imapSourceConfig(runDir, 1430, "user7", "user8")) as f:
            text = f.read()
        password = os.path.join(runDir, "password")
        self.assertIn(f"source: {{server: bench, user: user7, password_file: {password}}}", text)
        self.assertIn("destination: {server: bench, user: user8,", text)

    def test_listingCosts(self) -> None:
        """
        The listing's and the census's CPU are measured over the whole
        Maildir, each a number of seconds.
        """
        from bench.bigaccount import listingCosts

        listing, census = listingCosts(bigAccountCorpus(self.mktemp(), 40, "spread").path)
        self.assertGreater(listing, 0)
        self.assertGreater(census, 0)

    def test_warmMaildir(self) -> None:
        """
        Every file of the Maildir, its folders' included, is read once
        before the first pass.
        """
        from bench.bigaccount import warmMaildir

        corpus = bigAccountCorpus(self.mktemp(), 40, "spread")
        sizes = [os.path.getsize(os.path.join(directory, name))
                 for directory, _, names in os.walk(corpus.path) for name in names]  # fmt: skip
        self.assertGreaterEqual(len(sizes), 40)
        self.assertEqual(warmMaildir(corpus.path), sum(sizes))

    def test_leastCpu(self) -> None:
        """
        Of repeated first passes, the one with the least CPU is kept, as
        the least of the empty runs is: a failed run does not count.
        """
        from bench.bigaccount import leastCpu

        runs = [Measured(2.0, 0.80, 50, 0), Measured(1.0, 0.60, 50, 1), Measured(2.5, 0.70, 51, 0)]
        self.assertEqual(leastCpu(runs), runs[2])
        self.assertEqual(leastCpu(runs[1:2]), runs[1])


class MeasureTests(SynchronousTestCase):
    def test_peakRssIsTheChildsOwn(self) -> None:
        """
        A process measured while this one holds 300 MB reports its own
        peak RSS, not this process's (the timer forks it, not this
        process), with its exit status.
        """
        held = bytearray(300 * 1024 * 1024)
        held[::4096] = b"x" * len(held[::4096])
        log = self.mktemp()
        measured = measure([sys.executable, "-c", "import sys; sys.exit(3)"], log)
        self.assertEqual(measured.status, 3)
        self.assertLess(measured.maxRssMiB, 100)
        self.assertGreater(len(held), 0)
