# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq.testing are unannotated.)
"""
Tests that no part of the control token is logged and no filesystem path
is shown on the status site's pages, which anyone who reaches it reads:
control requests with the token in the wrong place, a job's error and a
failed message's reason holding paths, the verify report's path.
"""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyChannel

from imapmig.status.redact import PATH_SHOWN, withoutPaths
from imapmig.status.resource import QuietSite
from imapmig.status.verifyreport import REPORT_NAME
from tests.test_controls import ControlledScheduler
from tests.test_controls_resource import SITE, siteWith
from tests.test_schedule_service import jobConfig
from tests.test_state import failed
from tests.test_status_api import APITestCase

TOKEN = "Zq3vK9pW2mXr7tYb4nLc8hJd6fGs1aEu0oIiUyTtRrEeWwQqPpLlKkJjHhGgFfDd"


def tokenParts(text: str, width: int = 8) -> list[str]:
    """
    Each run of C{width} characters of L{TOKEN} found in C{text}.
    """
    return [
        TOKEN[n : n + width]
        for n in range(len(TOKEN) - width + 1)
        if TOKEN[n : n + width] in text
    ]


class WithoutPathsTests(SynchronousTestCase):
    """
    L{withoutPaths} hides absolute paths, and nothing else.
    """

    def test_paths(self) -> None:
        """
        An absolute path, up to the next blank (punctuation after it kept),
        or quoted with its spaces, becomes L{PATH_SHOWN}.
        """
        for text, shown in (
            ("/var/lib/imapmig/state.sqlite: cannot record: disk I/O error",
             f"{PATH_SHOWN}: cannot record: disk I/O error"),
            ("file vanished: /srv/mail/alice/cur/1700:2,S", f"file vanished: {PATH_SHOWN}"),
            ("no such directory of .eml files: '/srv/My Mail/eml'.",
             f"no such directory of .eml files: '{PATH_SHOWN}'."),
            ("(see ~/imapmig.yaml)", f"(see {PATH_SHOWN})"),
        ):  # fmt: skip
            self.assertEqual(withoutPaths(text), shown)

    def test_notPaths(self) -> None:
        """
        Folder names, rates, URLs and server replies without a path are
        left as they are.
        """
        for text in (
            "NO [TOOBIG] message too big",
            "cannot create INBOX/Sent: NO [ALREADYEXISTS]",
            "50/s at https://login.example/token, 1/2 done",
            "tcp:127.0.0.1:143",
        ):
            self.assertEqual(withoutPaths(text), text)


class ControlLogTests(SynchronousTestCase):
    """
    A control request refused with the token in the query string, the path
    or another header is logged without any part of the token.
    """

    def setUp(self) -> None:
        self.s = ControlledScheduler([jobConfig("a", "alice")], maxJobs=1)
        self.s.service.startService()

    def tearDown(self) -> None:
        stopping = self.s.service.stopService()
        assert stopping is not None
        self.successResultOf(stopping)

    def refusedLine(self, path: str, headers: dict[str, str]) -> str:
        """
        POST C{path} with C{headers} to a new site (so that its refusal is
        logged at once), which refuses it; the refusal's log line.
        """
        treq: Any = siteWith(self.s.service.controls, TOKEN)
        with capturedLogs() as events:
            response = self.successResultOf(
                treq.request("POST", SITE + path, headers=headers, data=b"{}")
            )
            self.successResultOf(treq.content(response))
        self.assertIn(response.code, (401, 403), path)
        [line] = [formatEvent(e) for e in events if "refused" in formatEvent(e)]
        return line

    def test_tokenInWrongPlaces(self) -> None:
        """
        Neither the token nor 8 characters of it appear in the line,
        whether it was sent in the query string (alone, after another
        parameter, percent-encoded), as a path segment, or in a header
        other than C{Authorization: Bearer}; the path without the query
        is still named.
        """
        json_ = {"Content-Type": "application/json"}
        encoded = "".join(f"%{ord(c):02X}" for c in TOKEN)
        for path, headers, shown in (
            (f"/control/pause-all?token={TOKEN}", json_, "/control/pause-all "),
            (f"/control/jobs/a/pause?x=1&access_token={TOKEN}", json_, "/control/jobs/a/pause "),
            (f"/control/pause-all?token={encoded}", json_, "/control/pause-all "),
            (f"/control/jobs/{TOKEN}/pause", json_, "/control/jobs/[redacted]/pause "),
            (f"/control/jobs/{encoded}/pause", json_, "/control/jobs/[redacted]/pause "),
            (f"/control/pause-all/{TOKEN[:20]}", json_, "/control/pause-all/[redacted] "),
            ("/control/pause-all", {**json_, "Authorization": f"Basic {TOKEN}"}, "/control/pause-all "),
            ("/control/pause-all", {**json_, "X-Token": TOKEN, "Cookie": f"t={TOKEN}"},
             "/control/pause-all "),
            (f"/control/pause-all?token={TOKEN}", {"Content-Type": "text/plain"},
             "/control/pause-all "),
        ):  # fmt: skip
            line = self.refusedLine(path, headers)
            self.assertEqual(tokenParts(line), [], line)
            self.assertIn(f"Control request {shown}", line)


class PagePathTests(APITestCase):
    """
    No page the status site serves without a credential shows a filesystem
    path: the job's error and a failed message's reason show L{PATH_SHOWN}
    instead, and C{run.verify} does not name its report.
    """

    def test_noPathOnPages(self) -> None:
        """
        With the state database's path in a job's error, a source file's
        in a failed message's reason and a verify report beside the
        database, none of C{/status.json}, C{/jobs/NAME.json}, its
        failures, its manifest in CSV and JSON, C{/healthz} or the
        dashboard shows the directory; the log keeps it.
        """
        directory = os.path.dirname(self.reportPath)
        with open(self.reportPath, "w") as f:
            json.dump([{"job": "alpha", "differences": 0}], f)
        job = self.progress.addJob("alpha")
        job.finished(
            f"cannot record outcomes in the state database: {directory}/state.sqlite:"
            f" cannot journal the batch: disk I/O error"
        )
        self.store.recordOutcomes(
            "alpha", [failed("INBOX", "cur/1:2,S", f"file vanished: {directory}/Maildir/cur/1:2,S")]
        )
        status = self.getJSON("/status.json")
        self.assertEqual(
            status["jobs"][0]["error"],
            f"cannot record outcomes in the state database: {PATH_SHOWN}:"
            f" cannot journal the batch: disk I/O error",
        )
        pages = [json.dumps(status)]
        for path in ("/jobs/alpha.json", "/jobs/alpha/failures.json", "/healthz"):
            pages.append(json.dumps(self.getJSON(path)))
        for path in ("/jobs/alpha/manifest.csv", "/jobs/alpha/manifest.json", "/"):
            response, body = self.request("GET", path)
            self.assertEqual(response.code, 200, path)
            pages.append(body.decode("utf-8"))
        self.assertIn(f"file vanished: {PATH_SHOWN}", pages[2])
        self.assertIn(f"file vanished: {PATH_SHOWN}", pages[4])
        for page in pages:
            self.assertNotIn(directory, page)

    def test_requestLogWithoutQuery(self) -> None:
        """
        The debug line of each request names its path without its query
        string, and nothing past C{/control/}.
        """
        site = QuietSite(self.root, reactor=self.clock)
        with capturedLogs() as events:
            for path in (f"/status.json?token={TOKEN}", f"/control/jobs/{TOKEN}/pause?t={TOKEN}"):
                request = _request(site, path)
                site.log(request)
        lines = [formatEvent(e) for e in events]
        self.assertEqual(tokenParts(" ".join(lines)), [], lines)
        self.assertIn("GET /status.json 200", lines[0])
        self.assertIn("GET /control/... 200", lines[1])


def _request(site: QuietSite, path: str) -> Any:
    """
    A request of C{site} for C{path}, as twisted.web parses one, answered
    200.
    """
    channel = DummyChannel()
    channel.site = site
    request = site.requestFactory(channel)
    request.method = b"GET"
    request.uri = path.encode("ascii")
    request.path = request.uri.split(b"?", 1)[0]
    request.code = 200
    return request

