"""
imapmig's version where the admin looks for it: the daemon's start line
under twistd (L{imapmig.tap.logStart}) and the dashboard's footer.  (The
version in C{/status.json}, C{/healthz} and C{/metrics}' build info is
checked by L{tests.test_status_api} and L{tests.test_metrics}; the
start lines of real runs, under twistd by L{tests.test_demo_signals} and
under C{imapmig-daemon} by L{tests.test_testing_dovecot}.)
"""

from __future__ import annotations

import os
from html.parser import HTMLParser

from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

import imapmig
from imapmig.config import loadConfig
from imapmig.status.dashboard import loadStaticFiles
from imapmig.tap import logStart


class StartLineTests(SynchronousTestCase):
    """
    L{logStart}: the line naming imapmig's version and the configuration.
    """

    def writeConfig(self, jobs: int) -> str:
        """
        A configuration of C{jobs} Maildir jobs and one server.
        """
        base = os.path.abspath(self.mktemp())
        lines = [f"state: {base}/state.sqlite", "servers: {s: {endpoint: 'tcp:127.0.0.1:143'}}"]
        lines.append("jobs:")
        password = os.path.join(base, "pw")
        os.makedirs(base)
        with open(os.open(password, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("p\n")
        for n in range(jobs):
            maildir = os.path.join(base, f"Maildir{n}")
            for sub in ("cur", "new", "tmp"):
                os.makedirs(os.path.join(maildir, sub))
            lines.append(
                f"  - {{name: j{n}, source: {{maildir: {maildir}}},"
                f" destination: {{server: s, user: u{n}, password_file: {password}}}}}"
            )
        path = os.path.join(base, "c.yaml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def test_line(self) -> None:
        """
        The line names the version, the configuration file, and its jobs
        and servers, in agreement with their counts; the fields stay
        structured.
        """
        for jobs, expected in [(1, "1 job, 1 server"), (2, "2 jobs, 1 server")]:
            path = self.writeConfig(jobs)
            with capturedLogs() as events:
                logStart(path, loadConfig(path))
            [event] = events
            self.assertEqual(
                formatEvent(event),
                f"imapmig {imapmig.__version__}: configuration {path}, {expected}",
            )
            self.assertEqual(
                (event["version"], event["jobs"], event["servers"]),
                (imapmig.__version__, jobs, 1),
            )


class _Footer(HTMLParser):
    """
    The ids of the elements inside C{<footer>}.
    """

    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "footer":
            self.inside = True
        elif self.inside:
            self.ids.extend(value for name, value in attrs if name == "id" and value)

    def handle_endtag(self, tag: str) -> None:
        if tag == "footer":
            self.inside = False


class DashboardFooterTests(SynchronousTestCase):
    """
    The dashboard's footer has a place for the version, which its script
    fills from C{/status.json} as it does the header's.  (The browser test
    renders the page; this checks the two files agree.)
    """

    def test_footerVersion(self) -> None:
        """
        The footer holds C{#footer-version}, and the script puts
        C{"v" + version} in it.
        """
        files = loadStaticFiles()
        footer = _Footer()
        footer.feed(files["index.html"].body.decode("utf-8"))
        self.assertIn("footer-version", footer.ids)
        self.assertIn(
            b'put($("footer-version"), s.version ? "v" + s.version : "");',
            files["dashboard.js"].body,
        )
