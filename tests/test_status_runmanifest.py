# -*- test-case-name: tests.test_status_runmanifest -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for C{/manifest.csv} and C{/manifest.json}: one manifest of what no
job migrated, every job's failed messages (with their names) and excluded
folders, and C{/jobs/NAME.json}'s failures with their names.
"""

from __future__ import annotations

import csv
import io
import json

from imapmig.state import MessageNames, MessageOutcome, withNames
from tests.test_status_api import APITestCase, failure

NAMES = MessageNames("<1@x>", "Tue, 3 Mar 2020 10:00:00 +0100", "Jörg <j@x>", "=Grüße")


class RunManifestTests(APITestCase):
    """
    The manifest of every job.
    """

    def fill(self) -> None:
        """
        Jobs alpha (a named failure, an already present and an appended
        message, an excluded folder), beta (nothing recorded) and gamma
        (an unnamed failure).
        """
        alpha = self.progress.addJob("alpha")
        alpha.excludedFolders = ["Junk"]
        self.progress.addJob("beta")
        self.progress.addJob("gamma")
        self.successResultOf(
            self.store.recordOutcomes(
                "alpha",
                [
                    withNames(failure("INBOX", "1", "NO [TOOBIG] big"), NAMES),
                    MessageOutcome("INBOX", "2", "INBOX", 50, 7, 12, alreadyPresent=True),
                    MessageOutcome("INBOX", "3", "INBOX", 60, 7, 13),
                ],
            )
        )
        self.successResultOf(
            self.store.recordOutcomes("gamma", [failure("Sent", "9", "unreadable")])
        )

    def test_csv(self) -> None:
        """
        C{/manifest.csv} is a CSV attachment with the job manifests'
        columns: per job, its excluded folders and its failed messages
        with their names (a formula-like Subject made inert), never those
        already present or appended.
        """
        self.fill()
        response, body = self.request("GET", "/manifest.csv")
        self.assertEqual(response.code, 200)
        self.assertEqual(
            response.headers.getRawHeaders(b"content-disposition"),
            [b'attachment; filename="imapmig-manifest.csv"'],
        )
        rows = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
        self.assertEqual(
            rows,
            [
                ["job", "outcome", "folder", "mailbox", "key", "size", "message_id", "date",
                 "from", "subject", "reason"],
                ["alpha", "excluded", "Junk", "", "", "", "", "", "", "",
                 "left out by the folder rules: matches exclude pattern 'Junk'"],
                ["alpha", "failed", "INBOX", "INBOX", "1", "1234", "<1@x>",
                 "Tue, 3 Mar 2020 10:00:00 +0100", "Jörg <j@x>", "'=Grüße", "NO [TOOBIG] big"],
                ["gamma", "failed", "Sent", "Sent", "9", "1234", "", "", "", "", "unreadable"],
            ],
        )  # fmt: skip

    def test_json(self) -> None:
        """
        C{/manifest.json} holds the same rows as objects.
        """
        self.fill()
        rows = json.loads(self.request("GET", "/manifest.json")[1])
        self.assertEqual([(r["job"], r["outcome"], r["subject"]) for r in rows], [
            ("alpha", "excluded", None), ("alpha", "failed", "=Grüße"), ("gamma", "failed", None),
        ])  # fmt: skip

    def test_empty(self) -> None:
        """
        With nothing left behind, the manifest is its header alone.
        """
        self.progress.addJob("alpha")
        self.assertEqual(
            self.request("GET", "/manifest.csv")[1],
            b"job,outcome,folder,mailbox,key,size,message_id,date,from,subject,reason\r\n",
        )

    def test_jobDocumentNames(self) -> None:
        """
        C{/jobs/NAME.json} and C{failures.json} show a failure's
        Message-ID, Date, From and Subject.
        """
        self.fill()
        for path in ("/jobs/alpha.json", "/jobs/alpha/failures.json"):
            document = self.getJSON(path)
            items = (document.get("failures") or document)["items"]
            self.assertEqual(
                {k: items[0][k] for k in ("message_id", "date", "from", "subject")},
                {"message_id": "<1@x>", "date": "Tue, 3 Mar 2020 10:00:00 +0100",
                 "from": "Jörg <j@x>", "subject": "=Grüße"},
            )  # fmt: skip
