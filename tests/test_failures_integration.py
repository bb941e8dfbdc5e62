# -*- test-case-name: tests.test_failures_integration -*-
"""
Every message not migrated is named to its owner, from outside: the
daemon (C{python -m imapmig.daemon}, a child process) migrates a Maildir
and an IMAP account into a private Dovecot that advertises a small
C{APPENDLIMIT}, so that the large messages fail before their bodies are
read; then C{/jobs/NAME.json}, C{/manifest.csv} and C{imapmig report
--failures --csv} must name each of them by its Message-ID, Date, From and
Subject (decoded from RFC 2047), and C{imapmig report} must end with its
summary.
"""

from __future__ import annotations

import csv
import imaplib
import io
import os
import subprocess
import sys
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.corpus import maildirFolderName
from imapmig.testing.dovecot import requireDovecot
from tests.liverun import DaemonRun, StatusClient, pollUntil
from tests.support import (
    SOURCE_TREE,
    freshUser,
    newDirectory,
    sharedDovecot,
    sourceTreeEnvironment,
    writePasswordFile,
)

LIMIT = 4000
"""
The destination's C{APPENDLIMIT}: the large messages are above it.
"""

CAPABILITIES = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE NAMESPACE UIDPLUS CHILDREN"
    f" SPECIAL-USE LIST-EXTENDED LIST-STATUS ESEARCH MOVE UNSELECT LITERAL+ APPENDLIMIT={LIMIT}"
)

SUBJECT = "=?utf-8?q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?="
"""
The Subject of every message, RFC 2047-encoded: "Grüße aus Köln".
"""


def message(tag: str, padding: int) -> bytes:
    """
    A message named C{tag}, padded with C{padding} octets of body.
    """
    head = (
        f"Message-ID: <{tag}@example.org>\r\n"
        f"Date: Tue, 3 Mar 2020 10:00:00 +0100\r\n"
        f"From: =?iso-8859-1?q?J=F6rg?= <{tag}@example.org>\r\n"
        f"Subject: {SUBJECT} {tag}\r\n\r\n"
    ).encode("ascii")
    return head + (b"x" * 70 + b"\r\n") * (padding // 72 + 1)


def names(tag: str) -> dict[str, str]:
    """
    The names of L{message}C{(tag, ...)} as every view shows them.
    """
    return {
        "message_id": f"<{tag}@example.org>",
        "date": "Tue, 3 Mar 2020 10:00:00 +0100",
        "from": f"Jörg <{tag}@example.org>",
        "subject": f"Grüße aus Köln {tag}",
    }


class FailureNamesIntegrationTests(SynchronousTestCase):
    """
    The names of failed messages, through the real daemon and command.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def writeMaildir(self, maildir: str) -> None:
        """
        Two small messages and two large ones (m-big1, m-big2) in INBOX.
        """
        directory = os.path.join(maildir, maildirFolderName(("INBOX",)))
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
        for n, (tag, padding) in enumerate(
            [("m-small1", 100), ("m-big1", 3 * LIMIT), ("m-small2", 100), ("m-big2", 2 * LIMIT)]
        ):
            with open(os.path.join(directory, "cur", f"170000000{n}.M{n}P1.host:2,S"), "wb") as f:
                f.write(message(tag, padding))

    def fillAccount(self, instance: Any, user: Any) -> None:
        """
        One small and one large message (i-big) in the source account.
        """
        client = imaplib.IMAP4("127.0.0.1", instance.port, timeout=60)
        try:
            client.login(user.name, user.password)
            for tag, padding in (("i-small", 100), ("i-big", 3 * LIMIT)):
                typ, data = client.append("INBOX", "(\\Seen)", None, message(tag, padding))
                self.assertEqual(typ, "OK", data)
        finally:
            client.logout()

    def writeConfig(self, directory: str) -> str:
        """
        The daemon's configuration: a Maildir job and an IMAP job into the
        limited Dovecot, the status site on a free loopback port.
        """
        destination = sharedDovecot(CAPABILITIES)
        source = sharedDovecot()
        sourceUser = freshUser(source)
        self.fillAccount(source, sourceUser)
        maildir = os.path.join(directory, "Maildir")
        self.writeMaildir(maildir)
        jobs = []
        for name, sourceConfig in (
            ("maildir-job", {"maildir": maildir}),
            (
                "imap-job",
                {
                    "server": "source",
                    "user": sourceUser.name,
                    "password_file": writePasswordFile(
                        os.path.join(directory, "source-password"), sourceUser.password
                    ),
                },
            ),
        ):
            user = freshUser(destination)
            jobs.append(
                {
                    "name": name,
                    "source": sourceConfig,
                    "destination": {
                        "server": "limited",
                        "user": user.name,
                        "password_file": writePasswordFile(
                            os.path.join(directory, f"{name}-password"), user.password
                        ),
                    },
                }
            )
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": {"listen": "tcp:0:interface=127.0.0.1"},
            "servers": {
                "limited": {"endpoint": f"tcp:127.0.0.1:{destination.port}", "starttls": "off"},
                "source": {"endpoint": f"tcp:127.0.0.1:{source.port}", "starttls": "off"},
            },
            "jobs": jobs,
        }
        configPath = os.path.join(directory, "imapmig.yaml")
        with open(configPath, "w") as f:
            yaml.safe_dump(document, f, sort_keys=False)
        return configPath

    def report(self, configPath: str, *arguments: str) -> tuple[int, str]:
        """
        Run C{imapmig report --config CONFIG arguments...} as a process.
        """
        done = subprocess.run(
            [sys.executable, "-m", "imapmig.cli", "report", "--config", configPath, *arguments],
            cwd=SOURCE_TREE,
            env=sourceTreeEnvironment(),
            capture_output=True,
            timeout=120,
        )
        self.assertEqual(done.stderr, b"")
        return done.returncode, done.stdout.decode("utf-8")

    def test_failuresNamed(self) -> None:
        """
        The messages above APPENDLIMIT, from the Maildir and from the IMAP
        account, fail unsent, and each is named by its Message-ID, Date,
        From and Subject on C{/jobs/NAME.json}, in C{/manifest.csv} and in
        C{imapmig report --failures --csv}; C{imapmig report} ends with
        its summary.
        """
        directory = newDirectory(self)
        configPath = self.writeConfig(directory)
        daemon = DaemonRun(configPath, os.path.join(directory, "daemon.log"))
        self.addCleanup(daemon.kill)
        port = pollUntil("the status listener", daemon.statusPort, 120, detail=daemon.tail)
        status = StatusClient(port)

        def ended() -> bool:
            return all(job.get("state") == "done_with_failures" for job in status.status()["jobs"])

        pollUntil("both jobs done", ended, 300, detail=daemon.tail)
        failed = {"maildir-job": ["m-big1", "m-big2"], "imap-job": ["i-big"]}
        for job, tags in failed.items():
            reply = status.request("GET", f"/jobs/{job}.json")
            self.assertEqual(reply.code, 200)
            items = reply.json()["failures"]["items"]
            shown = sorted(
                ({k: item[k] for k in ("message_id", "date", "from", "subject")} for item in items),
                key=lambda n: n["message_id"],
            )
            self.assertEqual(shown, sorted((names(tag) for tag in tags), key=lambda n: n["message_id"]))
            for item in items:
                self.assertIn(f"larger than the {LIMIT} the destination accepts", item["reason"])
        reply = status.request("GET", "/manifest.csv")
        self.assertEqual(reply.code, 200)
        manifest = list(csv.DictReader(io.StringIO(reply.body.decode("utf-8"), newline="")))
        expected = sorted(
            (job, names(tag)["message_id"], names(tag)["from"], names(tag)["subject"])
            for job, tags in failed.items()
            for tag in tags
        )
        self.assertEqual(
            sorted((r["job"], r["message_id"], r["from"], r["subject"]) for r in manifest), expected
        )
        self.assertEqual({r["outcome"] for r in manifest}, {"failed"})
        self.assertEqual(daemon.stop(), 0)

        code, text = self.report(configPath, "--failures", "--csv")
        self.assertEqual(code, 1)
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        self.assertEqual(
            sorted((r["job"], r["message_id"], r["from"], r["subject"]) for r in rows), expected
        )
        self.assertEqual({r["date"] for r in rows}, {"Tue, 3 Mar 2020 10:00:00 +0100"})
        code, text = self.report(configPath)
        lines = text.splitlines()
        self.assertEqual(
            lines[-4:-1],
            [
                "summary: 2 jobs: 0 done, 2 done with failures, 0 failed, 0 held (0 paused,"
                " 0 cancelled), 0 not run",
                "summary: 3 messages in the destination (3 copied, 0 already present), 3 failed",
                lines[-2],
            ],
        )
        self.assertTrue(lines[-2].startswith("summary: "), lines[-2])
        self.assertEqual(
            lines[-1], "failed: maildir-job (2 messages failed), imap-job (1 message failed)"
        )
