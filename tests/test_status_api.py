# -*- test-case-name: tests.test_status_api -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests for the read-only JSON API of the status site: C{/status.json}
(schema 2 and its query), C{/jobs/NAME.json}, C{/jobs/NAME/failures.json},
the audit manifests and C{/healthz}, served over real HTTP/1.1 in memory
by treq's L{StubTreq} (a twisted.web L{Site} on both ends of an in-memory
connection); and the plain parts beneath them.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any
from urllib.parse import quote

import attrs
from treq.testing import StubTreq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IResponse
from twisted.web.server import Request, Site
from twisted.web.test.requesthelper import DummyChannel

import imapmig
from imapmig.commands import verify as verifyCommand
from imapmig.config import parseConfig
from imapmig.errors import PermanentError
from imapmig.mail.folders import FolderRules
from imapmig.progress import FolderProgress, JobProgress, JobState, MigrationProgress
from imapmig.job.machine import JobMachine
from imapmig.state import MessageOutcome, Transition
from imapmig.state.memory import MemoryStateStore
from imapmig.status.manifest import (
    ManifestProducer,
    ManifestSection,
    excludedRows,
    exclusionReason,
    manifestFormat,
)
from imapmig.status.query import JobQuery, parseJobQuery, selectJobs
from imapmig.status.progressview import ProgressView
from imapmig.status.resource import StatusResource, buildStatusSite
from imapmig.status.verifyreport import REPORT_NAME, defaultReportPath
from tests.test_service import makeMaildir
from tests.test_status import running

BASE = "http://127.0.0.1:8080"


def failure(folder: str, key: str, reason: str, messageId: str | None = None) -> MessageOutcome:
    """
    A failed message's outcome.
    """
    return MessageOutcome(folder, key, folder, 1234, failure=reason, messageId=messageId)


def counted(job: JobProgress, total: int) -> None:
    """
    Give C{job} its total of C{total} messages, as its source's listing
    does: the job is counted.
    """
    job.messagesTotal = total
    job.foldersTotal = 1
    job.counted = True


class APITestCase(SynchronousTestCase):
    """
    A status site over a progress model, a memory state store and a verify
    report path, and requests to it.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.progress = MigrationProgress(self.clock.seconds)
        self.store = MemoryStateStore()
        self.stopping = False
        self.reportPath = os.path.join(os.path.abspath(self.mktemp()), REPORT_NAME)
        os.makedirs(os.path.dirname(self.reportPath))
        self.rules = {"alpha": FolderRules(include=("INBOX", "Archive/*"), exclude=("Junk",))}
        self.root = StatusResource(
            self.progress,
            self.clock.seconds,
            self.store,
            stopping=lambda: self.stopping,
            verifyReportPath=self.reportPath,
            rulesOf=self.rules.get,
        )
        self.treq: Any = StubTreq(self.root)

    def request(self, method: str, path: str) -> tuple[IResponse, bytes]:
        """
        Make a request of the site; the response and its body.
        """
        response: IResponse = self.successResultOf(self.treq.request(method, BASE + path))
        body: bytes = self.successResultOf(self.treq.content(response))
        return response, body

    def getJSON(self, path: str, code: int = 200) -> Any:
        """
        C{GET path}, which must answer C{code} with uncached JSON.
        """
        response, body = self.request("GET", path)
        self.assertEqual((path, response.code), (path, code), body[:300])
        self.assertEqual(
            response.headers.getRawHeaders(b"content-type"), [b"application/json; charset=utf-8"]
        )
        self.assertEqual(response.headers.getRawHeaders(b"cache-control"), [b"no-store"])
        return json.loads(body)

    def progressed(self, moves: dict[JobProgress, int], seconds: float) -> None:
        """
        Let C{seconds} pass while each job of C{moves} (running) migrates
        that many messages, at an even rate (the rates are sampled before
        and after the clock moves).
        """
        self.progress.sample()
        for job, messages in moves.items():
            job.messagesDone += messages
            job.messagesSettled += messages
        self.clock.advance(seconds)
        self.progress.sample()

    def addJobs(self, count: int) -> list[JobProgress]:
        """
        Add C{count} queued jobs C{job000}, ... with 100 messages each.
        """
        jobs = []
        for n in range(count):
            job = self.progress.addJob(f"job{n:03d}")
            counted(job, 100)
            jobs.append(job)
        return jobs


class StatusJSONTests(APITestCase):
    """
    C{/status.json}: schema 2, and its query.
    """

    def test_document(self) -> None:
        """
        The document carries the schema, the daemon's version, the time,
        the run, the totals, the throughput, the page and the page's jobs
        with the contract's keys.
        """
        alpha = self.progress.addJob("alpha")
        beta = self.progress.addJob("beta")
        running(alpha, self.clock)
        counted(alpha, 100)
        alpha.messagesFailed = 2
        self.progressed({alpha: 40}, 10)
        status = self.getJSON("/status.json")
        self.assertEqual(
            (status["schema"], status["version"], status["time"]),
            (2, imapmig.__version__, 1_700_000_010),
        )
        self.assertEqual(
            status["run"],
            {
                "started_at": 1_700_000_000,
                "finished_at": None,
                "elapsed_seconds": 10.0,
                "average_messages_per_second": 4.0,
                "verify": None,
            },
        )
        totals = status["totals"]
        self.assertEqual(
            {k: totals[k] for k in ("jobs_total", "jobs_counted", "messages_total",
                                    "messages_done", "messages_failed", "messages_pending",
                                    "percent_messages", "messages_per_second", "eta_seconds")},
            {"jobs_total": 2, "jobs_counted": 1, "messages_total": 100, "messages_done": 40,
             "messages_failed": 2, "messages_pending": 58, "percent_messages": 42.0,
             "messages_per_second": 4.0, "eta_seconds": None},
        )  # fmt: skip
        self.assertEqual((totals["jobs"]["running"], totals["jobs"]["queued"]), (1, 1))
        self.assertEqual(status["throughput"]["step_seconds"], 10)
        self.assertEqual(
            status["page"],
            {"offset": 0, "limit": 100, "matched": 2, "sort": "order", "state": [], "q": "",
             "errors": False},
        )  # fmt: skip
        first, second = status["jobs"]
        self.assertEqual(
            {k: first[k] for k in ("name", "state", "counted", "messages_total", "percent",
                                   "messages_per_second", "eta_seconds", "paused")},
            {"name": "alpha", "state": "running", "counted": True, "messages_total": 100,
             "percent": 42.0, "messages_per_second": 4.0, "eta_seconds": 14.5, "paused": False},
        )  # fmt: skip
        self.assertEqual(
            (second["name"], second["counted"], second["messages_total"], second["percent"]),
            ("beta", False, None, None),
        )
        del beta

    def test_paging(self) -> None:
        """
        C{offset} and C{limit} choose the page; C{matched} counts every
        matching job; a page past the end is empty.
        """
        self.addJobs(250)
        status = self.getJSON("/status.json?offset=100&limit=50")
        self.assertEqual([j["name"] for j in status["jobs"]], [f"job{n:03d}" for n in range(100, 150)])
        self.assertEqual((status["page"]["matched"], status["page"]["limit"]), (250, 50))
        self.assertEqual(len(self.getJSON("/status.json")["jobs"]), 100)
        self.assertEqual(len(self.getJSON("/status.json?limit=500")["jobs"]), 250)
        self.assertEqual(self.getJSON("/status.json?offset=300")["jobs"], [])

    def test_badNumbers(self) -> None:
        """
        An offset or limit that is not a whole number in range is a 400
        whose error names the parameter.
        """
        for query, name in (
            ("limit=501", "limit"), ("limit=0", "limit"), ("limit=-1", "limit"),
            ("offset=-1", "offset"), ("offset=abc", "offset"), ("offset=1e3", "offset"),
            ("offset=99999999999", "offset"), ("limit=%C2%B2", "limit"), ("limit=1&limit=2", "limit"),
            ("errors=maybe", "errors"), ("sort=size", "sort"), ("state=sleeping", "state"),
            ("q=%FF", "q"),
        ):  # fmt: skip
            error = self.getJSON("/status.json?" + query, 400)["error"]
            self.assertTrue(error.startswith(name + ":"), (query, error))

    def test_hugeQuery(self) -> None:
        """
        A query string longer than 4096 octets is refused with 414; one
        with too many parameters with 400; both with a JSON error.
        """
        error = self.getJSON("/status.json?q=" + "x" * 5000, 414)["error"]
        self.assertIn("4096", error)
        many = "&".join(f"p{n}=1" for n in range(40))
        self.assertIn("too many", self.getJSON("/status.json?" + many, 400)["error"])
        self.assertEqual(self.getJSON("/status.json?unknown=1")["page"]["offset"], 0)

    def test_filters(self) -> None:
        """
        C{state} keeps jobs in the states listed, C{q} jobs whose name
        holds the text in any case, C{errors=1} jobs that failed or have
        failed messages; together, all of them.
        """
        jobs = self.addJobs(6)
        running(jobs[1], self.clock)
        running(jobs[2], self.clock).fail("LOGIN refused")
        jobs[3].messagesFailed = 2
        jobs[4].name = "Other-Job"
        running(jobs[4], self.clock)

        def names(query: str) -> list[str]:
            return [j["name"] for j in self.getJSON("/status.json?" + query)["jobs"]]

        self.assertEqual(names("state=running"), ["job001", "Other-Job"])
        self.assertEqual(names("state=running,failed"), ["job001", "job002", "Other-Job"])
        self.assertEqual(names("q=OTHER"), ["Other-Job"])
        self.assertEqual(names("errors=1"), ["job002", "job003"])
        self.assertEqual(names("errors=1&state=queued"), ["job003"])
        status = self.getJSON("/status.json?state=running,failed&q=job00")
        self.assertEqual(status["page"]["matched"], 2)
        self.assertEqual(status["page"]["state"], ["running", "failed"])

    def test_sort(self) -> None:
        """
        C{sort} orders by name, state, progress, failed, rate or ETA,
        descending with a C{-}; ties keep the configuration's order, and
        jobs without a value (not counted, not running) come last.
        """
        jobs = self.addJobs(3)
        jobs.append(self.progress.addJob("job003"))
        for job in jobs[:3]:
            running(job, self.clock)
        jobs[1].messagesFailed = 3
        self.progressed({jobs[0]: 10, jobs[1]: 90, jobs[2]: 50}, 10)

        def names(query: str) -> list[str]:
            return [j["name"][-1] for j in self.getJSON("/status.json?" + query)["jobs"]]

        self.assertEqual(names("sort=progress"), ["0", "2", "1", "3"])
        self.assertEqual(names("sort=-progress"), ["1", "2", "0", "3"])
        self.assertEqual(names("sort=-failed"), ["1", "0", "2", "3"])
        self.assertEqual(names("sort=-name"), ["3", "2", "1", "0"])
        self.assertEqual(names("sort=rate"), ["0", "2", "1", "3"])
        self.assertEqual(names("sort=eta"), ["1", "2", "0", "3"])
        self.assertEqual(names("sort=state"), ["3", "0", "1", "2"])
        self.assertEqual(names("sort=-order"), ["3", "2", "1", "0"])
        self.assertEqual(self.getJSON("/status.json?sort=-rate")["page"]["sort"], "-rate")

    def test_sortAttention(self) -> None:
        """
        C{sort=attention} shows first what needs the admin: failed jobs,
        then jobs with failed messages, then jobs backing off or paused,
        then running ones, then the rest; ties in configuration order.
        """
        jobs = self.addJobs(7)
        running(jobs[1], self.clock)
        running(jobs[2], self.clock).fail("LOGIN refused")
        running(jobs[3], self.clock).succeed()
        jobs[3].messagesFailed = 2
        JobMachine(jobs[4].name, jobs[4], self.clock).pause("alice")
        running(jobs[5], self.clock).backOff("connection refused", 30)
        running(jobs[6], self.clock)
        names = [j["name"][-1] for j in self.getJSON("/status.json?sort=attention")["jobs"]]
        self.assertEqual(names, ["2", "3", "4", "5", "1", "6", "0"])

    def test_head(self) -> None:
        """
        C{HEAD} answers with C{GET}'s headers and length, and no body.
        """
        self.addJobs(3)
        _, body = self.request("GET", "/status.json")
        response, empty = self.request("HEAD", "/status.json")
        self.assertEqual((response.code, empty), (200, b""))
        self.assertEqual(response.headers.getRawHeaders(b"content-length"), [b"%d" % len(body)])

    def test_methodNotAllowed(self) -> None:
        """
        Other methods are a 405 with C{Allow} and a JSON error, on every
        read-only route.
        """
        self.progress.addJob("alpha")
        for path in (
            "/status.json", "/healthz", "/jobs/alpha.json", "/jobs/alpha/failures.json",
            "/jobs/alpha/manifest.csv", "/jobs/alpha/manifest.json",
        ):  # fmt: skip
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                response, body = self.request(method, path)
                self.assertEqual((path, method, response.code), (path, method, 405))
                self.assertEqual(response.headers.getRawHeaders(b"allow"), [b"GET, HEAD"])
                self.assertIn("not allowed", json.loads(body)["error"])


class VerifyReportTests(APITestCase):
    """
    C{run.verify} summarises C{imapmig verify}'s report beside the state
    database.
    """

    def writeReport(self, document: object) -> None:
        """
        Write C{document} as the verify report, as C{imapmig verify} does.
        """
        with open(self.reportPath, "w", encoding="utf-8") as f:
            json.dump(document, f)

    def verify(self) -> Any:
        """
        The C{run.verify} of C{/status.json}.
        """
        return self.getJSON("/status.json")["run"]["verify"]

    def test_summary(self) -> None:
        """
        A report's summary: its time, whether every job matched, how many
        jobs and differences; not where it is (the page is unauthenticated).
        """
        self.writeReport([{"job": "a", "differences": 0}, {"job": "b", "differences": 2}])
        os.utime(self.reportPath, ns=(1_700_000_000_500_000_000,) * 2)
        self.assertEqual(
            self.verify(),
            {"time": 1_700_000_000.5, "ok": False, "jobs": 2, "differences": 2,
             "unverified": 0},
        )  # fmt: skip
        self.writeReport([{"job": "a", "differences": 0}])
        self.assertEqual(self.verify()["ok"], True)
        self.writeReport([{"job": "a", "differences": 0}, {"job": "b", "error": "LOGIN"}])
        # A job that could not be verified is no difference, but counted.
        self.assertEqual(
            (self.verify()["ok"], self.verify()["jobs"], self.verify()["unverified"]), (False, 2, 1)
        )

    def test_readOnChange(self) -> None:
        """
        The report is read again only when its time or size changes.
        """
        self.writeReport([{"job": "a", "differences": 1}])
        stamp = os.stat(self.reportPath).st_mtime_ns
        self.assertEqual(self.verify()["differences"], 1)
        self.writeReport([{"job": "a", "differences": 7}])
        os.utime(self.reportPath, ns=(stamp, stamp))
        self.assertEqual(self.verify()["differences"], 1)
        os.utime(self.reportPath, ns=(stamp + 10**9, stamp + 10**9))
        self.assertEqual(self.verify()["differences"], 7)

    def test_missingOrCorrupt(self) -> None:
        """
        Without a report, or with one that is not a verify report,
        C{run.verify} is null; a corrupt report is warned about once.
        """
        self.assertIsNone(self.verify())
        with capturedLogs() as events:
            for n, document in enumerate(
                ("{not json", json.dumps({"job": "a"}), json.dumps([{"job": 1}]))
            ):
                with open(self.reportPath, "w") as f:
                    f.write(document)
                os.utime(self.reportPath, ns=((n + 1) * 10**9,) * 2)
                self.assertIsNone(self.verify())
                self.assertIsNone(self.verify())
        warnings = [e for e in events if e["log_level"] == LogLevel.warn]
        self.assertEqual(len(warnings), 3)
        self.assertEqual(warnings[0]["path"], self.reportPath)

    def test_defaultPath(self) -> None:
        """
        C{imapmig verify} writes its report beside the state database by
        default, where the daemon reads it.
        """
        self.assertEqual(
            defaultReportPath("/var/lib/imapmig/state.sqlite"),
            "/var/lib/imapmig/imapmig-verify.json",
        )


class JobRoutesTests(APITestCase):
    """
    C{/jobs/NAME.json} and C{/jobs/NAME/failures.json}.
    """

    def test_jobDocument(self) -> None:
        """
        A job's document: the job, its folders and excluded folders, and
        the first 50 of its failures with their count.
        """
        job = self.progress.addJob("alpha")
        counted(job, 80)
        failures = [failure("INBOX", f"{n:03d}", "NO [TOOBIG] too big") for n in range(60)]
        self.successResultOf(self.store.recordOutcomes("alpha", failures))
        document = self.getJSON("/jobs/alpha.json")
        self.assertEqual((document["schema"], document["version"]), (2, imapmig.__version__))
        self.assertEqual(document["job"]["name"], "alpha")
        self.assertEqual((document["folders"], document["excluded_folders"]), ([], []))
        page = document["failures"]
        self.assertEqual(
            {k: page[k] for k in ("offset", "limit", "matched", "q")},
            {"offset": 0, "limit": 50, "matched": 60, "q": ""},
        )
        self.assertEqual(len(page["items"]), 50)
        self.assertEqual(
            page["items"][0],
            {"folder": "INBOX", "mailbox": "INBOX", "key": "000", "size": 1234,
             "message_id": None, "date": None, "from": None, "subject": None,
             "reason": "NO [TOOBIG] too big"},
        )  # fmt: skip

    def test_timeline(self) -> None:
        """
        A job's document carries its C{timeline} as the store keeps it,
        oldest first, each transition C{{time, from, to, cause, by}}, its
        cause without filesystem paths; a job with none has an empty one.
        """
        self.progress.addJob("alpha")
        self.progress.addJob("beta")
        self.assertEqual(self.getJSON("/jobs/alpha.json")["timeline"], [])
        for transition in (
            Transition(1_700_000_000.0, "queued", "running", "started"),
            Transition(1_700_000_060.5, "running", "paused", "paused by the admin", "192.0.2.7"),
            Transition(1_700_000_090.0, "paused", "failed", "cannot read /srv/mail/alice/cur"),
        ):
            self.successResultOf(self.store.recordTransition("alpha", transition))
        self.assertEqual(
            self.getJSON("/jobs/alpha.json")["timeline"],
            [
                {"time": 1_700_000_000.0, "from": "queued", "to": "running",
                 "cause": "started", "by": None},
                {"time": 1_700_000_060.5, "from": "running", "to": "paused",
                 "cause": "paused by the admin", "by": "192.0.2.7"},
                {"time": 1_700_000_090.0, "from": "paused", "to": "failed",
                 "cause": "cannot read [path]", "by": None},
            ],
        )  # fmt: skip
        self.assertEqual(self.getJSON("/jobs/beta.json")["timeline"], [])

    def test_timelineStoreError(self) -> None:
        """
        A store that cannot read the timeline makes the job's document a
        500 with a JSON error, logged.
        """
        self.progress.addJob("alpha")

        def broken(job: str) -> Deferred[list[Transition]]:
            return fail(PermanentError("state.sqlite: cannot read the job's timeline"))

        self.patch(self.store, "timeline", broken)
        self.assertEqual(self.getJSON("/jobs/alpha.json", 500), {"error": "internal error"})
        self.assertEqual(len(self.flushLoggedErrors(PermanentError)), 1)

    def test_nameEncoded(self) -> None:
        """
        A job name is one percent-decoded path segment: it may hold a
        C{/}, spaces, non-ASCII letters, or end in C{.json}.
        """
        for name in ("a/b", "dü ß", "x.json", "100%"):
            self.progress.addJob(name)
            segment = quote(name, safe="")
            self.assertEqual(self.getJSON(f"/jobs/{segment}.json")["job"]["name"], name)
            self.assertEqual(self.getJSON(f"/jobs/{segment}/failures.json")["matched"], 0)

    def test_unknown(self) -> None:
        """
        An unknown job, or an unknown path under C{/jobs}, is a 404 with a
        JSON error.
        """
        self.progress.addJob("alpha")
        self.assertIn("'nobody'", self.getJSON("/jobs/nobody.json", 404)["error"])
        for path in (
            "/jobs/nobody/failures.json", "/jobs/nobody/manifest.csv", "/jobs", "/jobs/",
            "/jobs/alpha", "/jobs/alpha/", "/jobs/alpha/other.json", "/jobs/alpha.json/x",
            "/jobs/alpha/failures.json/x", "/jobs/%FF.json", "/nothing", "/status.json/x",
            "/healthz/", "/jobs/alpha/manifest.csv/x",
        ):  # fmt: skip
            self.assertIn("error", self.getJSON(path, 404))

    def test_failuresPage(self) -> None:
        """
        C{failures.json} pages the failures with C{offset} and C{limit},
        filtered by C{q} over folder, key, Message-ID and reason.
        """
        self.progress.addJob("alpha")
        recorded = [failure("INBOX", f"{n:03d}", "NO no") for n in range(30)] + [
            failure("Archive", "1", "NO [OVERQUOTA] quota", "<q@example.com>"),
        ]
        self.successResultOf(self.store.recordOutcomes("alpha", recorded))
        page = self.getJSON("/jobs/alpha/failures.json?offset=10&limit=5")
        self.assertEqual((page["job"], page["matched"], page["offset"], page["limit"]), ("alpha", 31, 10, 5))
        # Archive's failure comes first: folder, then key order.
        self.assertEqual([i["key"] for i in page["items"]], ["009", "010", "011", "012", "013"])
        page = self.getJSON("/jobs/alpha/failures.json?q=Q%40EXAMPLE")
        self.assertEqual(
            (page["matched"], [i["message_id"] for i in page["items"]]), (1, ["<q@example.com>"])
        )
        self.assertTrue(
            self.getJSON("/jobs/alpha/failures.json?limit=501", 400)["error"].startswith("limit:")
        )
        self.assertEqual(self.getJSON("/jobs/alpha/failures.json?offset=x", 400)["error"][:7], "offset:")
        self.getJSON("/jobs/alpha/failures.json?q=" + "y" * 5000, 414)

    def test_storeError(self) -> None:
        """
        A store that cannot answer makes a failures page a 500 with a JSON
        error, logged.
        """
        self.progress.addJob("alpha")
        self.store.close()
        self.assertEqual(self.getJSON("/jobs/alpha/failures.json", 500), {"error": "internal error"})
        self.flushLoggedErrors()


class ManifestTests(APITestCase):
    """
    C{/jobs/NAME/manifest.csv} and C{.json}: every message not copied, and
    the excluded folders, as a download.
    """

    def fill(self) -> list[MessageOutcome]:
        """
        Record for C{alpha} a failure whose reason holds a comma, quotes
        and line ends, an already present message, and an appended one.
        """
        self.progress.addJob("alpha")
        outcomes = [
            failure("INBOX", "1", 'NO [LIMIT] "big", very\r\nbig\nindeed', "<1@x>"),
            MessageOutcome("INBOX", "2", "INBOX", 50, 7, 12, alreadyPresent=True, messageId="<2@x>"),
            MessageOutcome("INBOX", "3", "INBOX", 60, 7, 13),
        ]
        self.successResultOf(self.store.recordOutcomes("alpha", outcomes))
        return outcomes

    def test_csv(self) -> None:
        """
        The CSV manifest is an RFC 4180 attachment: a header, then a row
        per message not copied; commas, quotes and line ends in a reason
        are quoted so that a CSV reader gets the reason back exactly.
        """
        self.fill()
        response, body = self.request("GET", "/jobs/alpha/manifest.csv")
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders(b"content-type"), [b"text/csv; charset=utf-8; header=present"]
        )
        self.assertEqual(
            response.headers.getRawHeaders(b"content-disposition"),
            [b"attachment; filename=\"imapmig-manifest-alpha.csv\"; filename*=UTF-8''imapmig-manifest-alpha.csv"],
        )
        self.assertTrue(body.startswith(b"job,outcome,folder,mailbox,key,size,message_id,date,from,subject,reason\r\n"))
        self.assertIn(b'"NO [LIMIT] ""big"", very\r\nbig\nindeed"', body)
        rows = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
        self.assertEqual(
            rows,
            [
                ["job", "outcome", "folder", "mailbox", "key", "size", "message_id", "date",
                 "from", "subject", "reason"],
                ["alpha", "failed", "INBOX", "INBOX", "1", "1234", "<1@x>", "", "", "",
                 'NO [LIMIT] "big", very\r\nbig\nindeed'],
                ["alpha", "already_present", "INBOX", "INBOX", "2", "50", "<2@x>", "", "", "",
                 "already in the destination as UID 12 (found by its identity); not copied again"],
            ],
        )  # fmt: skip

    def test_json(self) -> None:
        """
        The JSON manifest holds the same rows as objects.
        """
        self.fill()
        response, body = self.request("GET", "/jobs/alpha/manifest.json")
        self.assertIn(b"attachment;", response.headers.getRawHeaders(b"content-disposition")[0])
        rows = json.loads(body)
        self.assertEqual(
            [(r["outcome"], r["key"], r["size"], r["message_id"]) for r in rows],
            [("failed", "1", 1234, "<1@x>"), ("already_present", "2", 50, "<2@x>")],
        )
        self.assertEqual(rows[0]["reason"], 'NO [LIMIT] "big", very\r\nbig\nindeed')

    def test_csvFormulasInert(self) -> None:
        """
        A cell that a spreadsheet would run as a formula (a folder or a
        server's reason starting with C{=}, C{+}, C{-} or C{@}) is written
        with a leading C{'} in the CSV manifest, and as it is in the JSON.
        """
        self.progress.addJob("alpha")
        reason = '=HYPERLINK("http://x.example/","click")'
        self.successResultOf(
            self.store.recordOutcomes("alpha", [failure("@Folder", "1", reason)])
        )
        rows = list(
            csv.reader(
                io.StringIO(self.request("GET", "/jobs/alpha/manifest.csv")[1].decode("utf-8"))
            )
        )
        self.assertEqual((rows[1][2], rows[1][3], rows[1][10]), ("'@Folder", "'@Folder", "'" + reason))
        [row] = json.loads(self.request("GET", "/jobs/alpha/manifest.json")[1])
        self.assertEqual((row["folder"], row["reason"]), ("@Folder", reason))

    def test_folderNames(self) -> None:
        """
        Folders are named as the job's listing found them, not by their
        keys (a Maildir's INBOX has the empty key), in the manifest and the
        failures pages alike.
        """
        job = self.progress.addJob("alpha")
        job.listed([FolderProgress("INBOX", "", 1, 1234)], [], 0, 0)
        self.successResultOf(
            self.store.recordOutcomes("alpha", [failure("", "1", "NO too big", None)])
        )
        rows = json.loads(self.request("GET", "/jobs/alpha/manifest.json")[1])
        self.assertEqual([row["folder"] for row in rows], ["INBOX"])
        items = self.getJSON("/jobs/alpha/failures.json")["items"]
        self.assertEqual([item["folder"] for item in items], ["INBOX"])

    def test_empty(self) -> None:
        """
        A job with nothing left out has a manifest of its header alone (an
        empty JSON list).
        """
        self.progress.addJob("alpha")
        self.assertEqual(
            self.request("GET", "/jobs/alpha/manifest.csv")[1],
            b"job,outcome,folder,mailbox,key,size,message_id,date,from,subject,reason\r\n",
        )
        self.assertEqual(json.loads(self.request("GET", "/jobs/alpha/manifest.json")[1]), [])

    def test_manyRows(self) -> None:
        """
        A manifest of thousands of rows (more than one page of the store)
        holds every one, in key order, each once.
        """
        self.progress.addJob("alpha")
        keys = [f"{n:05d}" for n in range(2345)]
        self.successResultOf(
            self.store.recordOutcomes("alpha", [failure("F", k, "NO, no") for k in reversed(keys)])
        )
        rows = list(csv.reader(io.StringIO(self.request("GET", "/jobs/alpha/manifest.csv")[1].decode())))
        self.assertEqual([r[4] for r in rows[1:]], keys)
        self.assertEqual(len(json.loads(self.request("GET", "/jobs/alpha/manifest.json")[1])), 2345)

    def test_head(self) -> None:
        """
        C{HEAD} gives the manifest's headers and no body.
        """
        self.fill()
        response, body = self.request("HEAD", "/jobs/alpha/manifest.csv")
        self.assertEqual((response.code, body), (200, b""))
        self.assertIn(b"attachment;", response.headers.getRawHeaders(b"content-disposition")[0])

    def test_safeFilename(self) -> None:
        """
        The attachment's plain file name holds only letters, digits, dots,
        dashes and underscores; the exact name is given percent-encoded.
        """
        self.progress.addJob('a"b/ü;\r\n.x')
        response, _ = self.request("GET", "/jobs/" + quote('a"b/ü;\r\n.x', safe="") + "/manifest.csv")
        [disposition] = response.headers.getRawHeaders(b"content-disposition")
        self.assertEqual(
            disposition,
            b"attachment; filename=\"imapmig-manifest-a_b_.x.csv\";"
            b" filename*=UTF-8''imapmig-manifest-a%22b%2F%C3%BC%3B%0D%0A.x.csv",
        )


class HealthTests(APITestCase):
    """
    C{/healthz}.
    """

    def test_ok(self) -> None:
        """
        While the daemon serves and the store answers: 200, C{ok}, the
        version and the count of jobs per state.
        """
        jobs = self.addJobs(3)
        running(jobs[0], self.clock)
        health = self.getJSON("/healthz")
        self.assertEqual(
            (health["status"], health["version"], health["jobs"]["running"],
             health["jobs"]["queued"], health["jobs"]["failed"]),
            ("ok", imapmig.__version__, 1, 2, 0),
        )  # fmt: skip
        self.assertEqual(set(health["jobs"]), {state.value for state in JobState})
        response, body = self.request("HEAD", "/healthz")
        self.assertEqual((response.code, body), (200, b""))

    def test_stopping(self) -> None:
        """
        Once the daemon is stopping: 503 and C{stopping}.
        """
        self.stopping = True
        self.assertEqual(self.getJSON("/healthz", 503)["status"], "stopping")
        response, _ = self.request("HEAD", "/healthz")
        self.assertEqual(response.code, 503)

    def test_storeError(self) -> None:
        """
        When the store cannot answer: 503, C{store-error}, the store's own
        error (which may name the database's path) logged once however
        often it is asked, and never in the unauthenticated answer.
        """
        with capturedLogs() as events:
            self.store.close()
            for _ in range(3):
                health = self.getJSON("/healthz", 503)
                self.assertEqual(health["status"], "store-error")
                self.assertEqual(
                    health["error"], "the state store does not answer; see the daemon's log"
                )
        [error] = [e for e in events if e["log_level"] == LogLevel.error]
        self.assertIn("closed", error["why"])


class SelectJobsTests(SynchronousTestCase):
    """
    L{selectJobs} and L{parseJobQuery}, without HTTP.
    """

    def test_pageOnlyRendered(self) -> None:
        """
        Only the page's jobs are selected for rendering, whatever the
        number of jobs matched.
        """
        clock = Clock()
        progress = MigrationProgress(clock.seconds)
        for n in range(10_000):
            job = progress.addJob(f"j{n}")
            if n:
                counted(job, n)
        view = ProgressView(progress, clock.seconds)
        query = parseJobQuery(b"/status.json?sort=-progress&limit=3", {b"sort": [b"-progress"], b"limit": [b"3"]}, view.stateNames())
        self.assertEqual(query, JobQuery(limit=3, sort="progress", descending=True))
        matched, page = selectJobs(view, view.jobs(), query)
        self.assertEqual((matched, [j.name for j in page]), (10_000, ["j1", "j2", "j3"]))


class ChunkedBody:
    """
    Reads a chunked HTTP/1.1 response.
    """

    @staticmethod
    def of(response: bytes) -> bytes:
        """
        The body of C{response} so far (head, then chunks), its chunks
        joined.
        """
        _, _, chunked = response.partition(b"\r\n\r\n")
        body = b""
        while chunked:
            size, _, rest = chunked.partition(b"\r\n")
            length = int(size, 16)
            body += rest[:length]
            chunked = rest[length + 2 :]
            if length == 0:
                break
        return body


class CountingStore(MemoryStateStore):
    """
    A memory store that counts the manifest pages read, calls C{onRead}
    before each, and answers them later when C{held} is a list (the
    Deferreds wait there).
    """

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.onRead: Any = lambda: None
        self.held: list[tuple[Deferred[list[MessageOutcome]], list[MessageOutcome]]] | None = None

    def manifestOutcomes(
        self, job: str, after: tuple[str, str] | None, limit: int
    ) -> Deferred[list[MessageOutcome]]:
        self.reads += 1
        self.onRead()
        d = super().manifestOutcomes(job, after, limit)
        if self.held is None:
            return d
        later: Deferred[list[MessageOutcome]] = Deferred()
        self.held.append((later, self.successResultOf(d)))
        return later

    def successResultOf(self, d: Deferred[list[MessageOutcome]]) -> list[MessageOutcome]:
        results: list[list[MessageOutcome]] = []
        d.addCallback(results.append)
        return results[0]


class ManifestStreamingTests(SynchronousTestCase):
    """
    The manifest is written page by page as the client takes it, over a
    real HTTP channel.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.progress = MigrationProgress(self.clock.seconds)
        self.progress.addJob("alpha")
        self.store = CountingStore()
        self.successResultOf(
            self.store.recordOutcomes(
                "alpha", [failure("F", f"{n:05d}", "NO no") for n in range(1200)]
            )
        )
        site = Site(StatusResource(self.progress, self.clock.seconds, self.store), reactor=self.clock)
        self.channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)

    def get(self) -> None:
        """
        Ask for the CSV manifest.
        """
        self.channel.dataReceived(
            b"GET /jobs/alpha/manifest.csv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )

    def body(self) -> bytes:
        """
        The response body so far, its chunks joined.
        """
        return ChunkedBody.of(self.transport.value())

    def test_paused(self) -> None:
        """
        While the client's connection pauses the response no page is read;
        when it resumes, the rest is written, 500 rows a page, to the end.
        """
        producer = self.transport.producer
        assert producer is not None
        self.store.onRead = lambda: producer.pauseProducing() if self.store.reads == 2 else None
        self.get()
        self.assertEqual(self.store.reads, 2)
        self.assertEqual(self.body().count(b"\r\n"), 1 + 1000)
        producer.resumeProducing()
        self.assertEqual(self.store.reads, 4)
        self.assertTrue(self.transport.value().endswith(b"\r\n0\r\n\r\n"))
        self.assertEqual(self.body().count(b"\r\n"), 1 + 1200)

    def test_storeAnswersLater(self) -> None:
        """
        A store that answers later gets the next page asked once it has
        answered the previous one.
        """
        self.store.held = []
        self.get()
        for reads in (1, 2, 3, 4):
            self.assertEqual(self.store.reads, reads)
            d, page = self.store.held.pop()
            d.callback(page)
        self.assertEqual(self.store.held, [])
        self.assertEqual(self.body().count(b"\r\n"), 1 + 1200)

    def test_clientGone(self) -> None:
        """
        Once the client is gone, no page is read any more.
        """
        self.store.held = []
        self.get()
        self.channel.connectionLost(ConnectionDone())
        d, page = self.store.held.pop()
        d.callback(page)
        self.assertEqual((self.store.reads, self.store.held), (1, []))

    def test_storeFails(self) -> None:
        """
        A store that fails halfway cuts the download short: the connection
        is closed without the chunked body's end, so the client sees a
        truncated download, not a short manifest; the error is logged.
        """
        self.store.held = []
        self.get()
        d, page = self.store.held.pop()
        d.callback(page)
        d, _ = self.store.held.pop()
        d.errback(PermanentError("memory: the state store is closed"))
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse(self.transport.value().endswith(b"\r\n0\r\n\r\n"))


class LongRequestLineTests(SynchronousTestCase):
    """
    The status site answers a request line too long to read.
    """

    def test_tooLong(self) -> None:
        """
        A request line longer than 16 KiB (a huge query string) is
        answered with 400 and a JSON error, and the connection closed;
        without the site's channel, twisted.web would close it without an
        answer.
        """
        clock = Clock()
        root = StatusResource(MigrationProgress(clock.seconds), clock.seconds, MemoryStateStore())
        site = buildStatusSite(root, clock)
        channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        transport = StringTransport()
        channel.makeConnection(transport)
        request = b"GET /status.json?q=" + b"x" * 20000 + b" HTTP/1.1\r\nHost: a\r\n\r\n"
        for start in range(0, len(request), 4096):
            channel.dataReceived(request[start : start + 4096])
        head, _, body = transport.value().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400 Bad Request\r\n"))
        self.assertIn("longer than 16384 octets", json.loads(body)["error"])
        self.assertTrue(transport.disconnecting)
        channel.connectionLost(ConnectionDone())
        self.assertEqual(clock.getDelayedCalls(), [])


class ExcludedFolderTests(SynchronousTestCase):
    """
    The manifest's rows for the folders a job's folder rules leave out.
    """

    def test_reason(self) -> None:
        """
        The reason names the exclude pattern a folder matches, or the
        include patterns it matches none of.
        """
        rules = FolderRules(include=("INBOX", "Archive/*"), exclude=("Archive/Junk*", "Trash"))
        self.assertEqual(
            exclusionReason("Archive/Junk 2019", rules),
            "left out by the folder rules: matches exclude pattern 'Archive/Junk*'",
        )
        self.assertEqual(
            exclusionReason("Trash", rules),
            "left out by the folder rules: matches exclude pattern 'Trash'",
        )
        self.assertEqual(
            exclusionReason("Sent", rules),
            "left out by the folder rules: matches no include pattern ('INBOX', 'Archive/*')",
        )

    def test_rows(self) -> None:
        """
        One row per folder, outcome C{excluded}, with no mailbox, key, size
        or Message-ID.
        """
        self.assertEqual(
            excludedRows("alpha", ["Trash"], FolderRules(exclude=("Trash",))),
            [("alpha", "excluded", "Trash", "", "", None, None, None, None, None,
              "left out by the folder rules: matches exclude pattern 'Trash'")],
        )  # fmt: skip
        self.assertEqual(excludedRows("alpha", ["X"], None)[0][10], "left out by the folder rules")

    def test_written(self) -> None:
        """
        The producer writes the excluded folders' rows first, then the
        store's, then ends the response.
        """
        channel = DummyChannel()
        request = Request(channel)
        request.method, request.clientproto = b"GET", b"HTTP/1.1"
        store = MemoryStateStore()
        self.successResultOf(store.recordOutcomes("alpha", [failure("INBOX", "1", "NO")]))
        section = ManifestSection(
            "alpha",
            excludedRows("alpha", ["Trash", "Junk"], FolderRules(exclude=("Trash", "Junk"))),
            lambda after, limit: store.manifestOutcomes("alpha", after, limit),
        )
        ManifestProducer(request, [section], manifestFormat("csv")).start()
        written = channel.transport.written.getvalue()
        self.assertTrue(written.endswith(b"\r\n0\r\n\r\n"))
        rows = list(csv.reader(io.StringIO(ChunkedBody.of(written).decode())))
        self.assertEqual(
            [(r[1], r[2], r[4]) for r in rows],
            [("outcome", "folder", "key"), ("excluded", "Trash", ""), ("excluded", "Junk", ""),
             ("failed", "INBOX", "1")],
        )  # fmt: skip
        self.assertTrue(request.finished)


class MountedResourcesTests(SynchronousTestCase):
    """
    The resources of the other slices are mounted where the root is told.
    """

    def test_mounted(self) -> None:
        """
        C{dashboard} serves C{/} and its children (C{/static/...}),
        C{metrics} C{/metrics}, C{control} C{/control/...}; the API's
        routes stay the root's.
        """
        from twisted.web.static import Data

        clock = Clock()
        dashboard = Data(b"<html>dashboard</html>", "text/html")
        dashboard.putChild(b"static", Data(b"js", "text/javascript"))
        control = Data(b"control", "text/plain")
        control.putChild(b"pause-all", Data(b"paused", "text/plain"))
        root = StatusResource(
            MigrationProgress(clock.seconds), clock.seconds, MemoryStateStore(),
            dashboard=dashboard, metrics=Data(b"# metrics", "text/plain"), control=control,
        )  # fmt: skip
        treq: Any = StubTreq(root)

        def get(path: str) -> tuple[int, bytes]:
            response = self.successResultOf(treq.get(BASE + path))
            return response.code, self.successResultOf(treq.content(response))

        self.assertEqual(get("/"), (200, b"<html>dashboard</html>"))
        self.assertEqual(get("/static"), (200, b"js"))
        self.assertEqual(get("/metrics"), (200, b"# metrics"))
        self.assertEqual(get("/control/pause-all"), (200, b"paused"))
        self.assertEqual(get("/healthz")[0], 200)
        self.assertEqual(json.loads(get("/status.json")[1])["schema"], 2)


class VerifyCommandReportTests(SynchronousTestCase):
    """
    C{imapmig verify} writes its report whole, or says why it cannot.
    """

    def verify(self, reportPath: str) -> tuple[int, str]:
        """
        Run the verify command over no job, reporting to C{reportPath}.

        @return: its exit status and what it printed.
        """
        config = parseConfig(
            {
                "state": os.path.abspath(self.mktemp()),
                "servers": {"s": {"endpoint": "tcp:127.0.0.1:1143", "starttls": "off"}},
                "jobs": [
                    {
                        "name": "a",
                        "source": {"maildir": makeMaildir(self)},
                        "destination": {"server": "s", "user": "u", "password": "p"},
                    }
                ],
            },
            "test.yaml",
        )
        out = io.StringIO()
        status = self.successResultOf(
            Deferred.fromCoroutine(verifyCommand.verify(config, [], MemoryStateStore(), Clock(), reportPath, out))
        )
        return status, out.getvalue()

    def test_written(self) -> None:
        """
        The report is written whole (by a rename: no partial file is left).
        """
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        path = os.path.join(directory, REPORT_NAME)
        self.assertEqual(self.verify(path), (0, f"report written to {path}\n"))
        self.assertEqual(os.listdir(directory), [REPORT_NAME])
        with open(path) as f:
            self.assertEqual(json.load(f), [])

    def test_notWritable(self) -> None:
        """
        A report that cannot be written is said so, with exit status 1.
        """
        path = os.path.join(os.path.abspath(self.mktemp()), "missing", REPORT_NAME)
        status, printed = self.verify(path)
        self.assertEqual(status, 1)
        self.assertIn(f"cannot write the report {path}: No such file or directory", printed)
