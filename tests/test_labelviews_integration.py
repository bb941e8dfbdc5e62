# -*- test-case-name: tests.test_labelviews_integration -*-
"""
A Gmail-shaped source without X-GM-EXT-1, for real: a private Dovecot
advertising Gmail's capabilities as far as Dovecot has them
(L{GMAIL_SHAPE}: no X-GM-EXT-1) holds an account laid out as Gmail shows
one over IMAP: labelled messages in INBOX, C{Work} and C{[Gmail].Sent
Mail}, each also in C{[Gmail].All Mail} (the same octets and
INTERNALDATE), flagged ones also in C{[Gmail].Starred}, some in
C{[Gmail].Important}, and L{ARCHIVED} messages in All Mail only (archived
mail).  The job reads it with C{preset: gmail} into another account.

  - C{imapmig plan} lists Starred and Important as left out, with their
    counts and why, and All Mail with its archived messages only, bound
    for C{Archive}.
  - The daemon (C{twistd}, in a child process) is killed with C{SIGKILL}
    while it copies the archived mail (its destination connection cut at
    a set number of octets by a L{FaultProxy}, as the crash test does), then
    run again to its end: every archived message is in C{Archive} exactly
    once, every labelled one in its label folders only, and C{imapmig
    verify} finds no difference.
  - With C{archive_folder: off}, nothing lands in C{Archive}; C{imapmig
    report} and C{imapmig verify} count the archived messages as not
    migrated, each with why.
"""

from __future__ import annotations

import io
import os
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml
from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.trial.unittest import TestCase

from imapmig.commands import plan as planCommand
from imapmig.config import loadConfig
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from imapmig.testing.faultproxy import FaultProxy
from imapmig.state.memory import MemoryStateStore
from tests.support import (
    freshUser,
    settleConnections,
    newDirectory,
    reportJobs,
    sharedDovecot,
    startDaemon,
    verifyDifferences,
    verifyJobs,
    writePasswordFile,
)
from tests.test_crash_integration import _cutAt
from tests.test_providers_integration import GMAIL_SHAPE

reactor: Any = _globalReactor

JOB = "gmail"

LABELLED = 30
"""
Messages with a label (INBOX, Work, Sent Mail), each also in All Mail.
"""

ARCHIVED = 20
"""
Messages in All Mail only.
"""

ARCHIVED_SIZE = 40_000
"""
Octets of each archived message: large enough that the kill falls while
they are copied.
"""

RUN_BOUND = 120.0
"""
Seconds a daemon run may take (generous: the suite may share the machine
with a CPU hog).
"""

ALL_MAIL = "[Gmail].All Mail"
STARRED = "[Gmail].Starred"
IMPORTANT = "[Gmail].Important"
SENT = "[Gmail].Sent Mail"


def _message(n: int, size: int = 0) -> bytes:
    """
    Message C{n}, with a Message-ID, padded to about C{size} octets.
    """
    head = (
        b"From: someone@example.org\r\nSubject: message %d\r\n"
        b"Message-ID: <%d.label-test@example.org>\r\n\r\nHello %d.\r\n" % (n, n, n)
    )
    return head + b"x" * 76 + b"\r\n" if not size else head + (b"y" * 78 + b"\r\n") * (size // 80)


def _populate(instance: DovecotInstance, user: DovecotUser) -> dict[int, set[str]]:
    """
    Lay C{user}'s account out as Gmail shows it over IMAP.

    @return: by message number, the label folders it is in (none: archived).
    """
    for name in ("Work", ALL_MAIL, STARRED, IMPORTANT, SENT):
        instance.createMailbox(user.name, name)
    labels: dict[int, set[str]] = {}
    start = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
    for n in range(1, LABELLED + ARCHIVED + 1):
        when = start + timedelta(minutes=n)
        if n > LABELLED:
            instance.appendMessage(user.name, ALL_MAIL, _message(n, ARCHIVED_SIZE), (), when)
            labels[n] = set()
            continue
        names = {("INBOX",), ("INBOX", "Work"), ("Work",), (SENT,)}
        chosen = sorted(names, key=repr)[n % 4]
        flags = ("\\Flagged",) if n % 5 == 0 else ()
        views = [*chosen, ALL_MAIL]
        if flags:
            views.append(STARRED)
        if n % 7 == 0:
            views.append(IMPORTANT)
        for name in views:
            instance.appendMessage(user.name, name, _message(n), flags, when)
        labels[n] = set(chosen)
    return labels


def _numbers(instance: DovecotInstance, user: DovecotUser) -> dict[str, list[int]]:
    """
    The numbers of the messages in each mailbox of C{user} holding any, in
    UID order (a number twice: a duplicate).
    """
    held = {}
    for name, messages in instance.fetchAll(user.name).items():
        numbers = [
            int(m.body.split(b"Subject: message ", 1)[1].split(b"\r\n", 1)[0]) for m in messages
        ]
        if numbers:
            held[name] = numbers
    return held


def _expected(labels: dict[int, set[str]]) -> dict[str, list[int]]:
    """
    Where each message should land: in each of its label folders, or in
    C{Archive}.
    """
    where: dict[str, list[int]] = {}
    for n, names in labels.items():
        for name in names or {"Archive"}:
            where.setdefault(name, []).append(n)
    return where


class GmailWithoutExtensionTests(TestCase):
    """
    The daemon and the commands on a Gmail-shaped Dovecot without
    X-GM-EXT-1.
    """

    def _setUp(self, proxyPort: int | None, archiveFolder: object = "Archive") -> tuple[
        DovecotInstance, DovecotUser, dict[int, set[str]], str
    ]:
        """
        Populate a source account, take a destination account, write the
        configuration (the destination through a proxy listening on
        C{proxyPort}, if given).
        """
        requireDovecot(self)
        instance = sharedDovecot(GMAIL_SHAPE)
        source, destination = freshUser(instance), freshUser(instance)
        labels = _populate(instance, source)
        directory = newDirectory(self)
        sourcePassword = writePasswordFile(os.path.join(directory, "source"), source.password)
        password = writePasswordFile(os.path.join(directory, "destination"), destination.password)
        port = instance.port if proxyPort is None else proxyPort
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": "off",
            "servers": {
                "gmail": {
                    "preset": "gmail",
                    "endpoint": f"tcp:127.0.0.1:{instance.port}",
                    "starttls": "off",
                    "archive_folder": archiveFolder,
                },
                "dovecot": {
                    "endpoint": f"tcp:127.0.0.1:{port}",
                    "starttls": "off",
                    "compress": "off",
                },
            },
            "jobs": [
                {
                    "name": JOB,
                    "connections": 1,
                    "source": {
                        "server": "gmail",
                        "user": source.name,
                        "password_file": sourcePassword,
                    },
                    "destination": {
                        "server": "dovecot",
                        "user": destination.name,
                        "password_file": password,
                    },
                }
            ],
        }
        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return instance, destination, labels, path

    async def _proxy(self, instance: DovecotInstance) -> tuple[FaultProxy, int]:
        """
        A fault proxy to C{instance}, stopped when the test ends, and its
        port.
        """
        proxy = FaultProxy(reactor, reactor, "127.0.0.1", instance.port, [])
        port = await proxy.listen()
        self.addCleanup(lambda: Deferred.fromCoroutine(proxy.stop()))
        return proxy, port

    async def _plan(self, path: str) -> str:
        """
        Run C{imapmig plan} on the job before any run (nothing recorded).

        @return: what it printed.
        """
        out = io.StringIO()
        status = await planCommand.plan(loadConfig(path), [JOB], MemoryStateStore(), reactor, False, out)
        await settleConnections(reactor)
        self.assertEqual(status, 0, out.getvalue())
        return out.getvalue()

    async def test_archivedIntoArchive(self) -> None:
        """
        C{imapmig plan} lists the views left out with their counts; the
        daemon, killed while copying the archived mail and run again,
        puts each archived message into C{Archive} once and each labelled
        one into its label folders only; C{imapmig verify} finds no
        difference.
        """
        requireDovecot(self)
        proxy, port = await self._proxy(sharedDovecot(GMAIL_SHAPE))
        instance, destination, labels, path = self._setUp(port)
        plan = await self._plan(path)
        starred = sum(1 for n in labels if n <= LABELLED and n % 5 == 0)
        important = sum(1 for n in labels if n <= LABELLED and n % 7 == 0)
        self.assertIn(f"left out [Gmail]/Starred: {starred} messages: a view of the flagged", plan)
        self.assertIn(f"left out [Gmail]/Important: {important} messages: a view of the", plan)
        self.assertRegex(plan, r"\[Gmail\]/All Mail\s+20\s+.*Archive \(new\)\s+archive")
        self.assertIn("(2 left out)", plan)

        # Cut the destination connection (and kill the daemon) once it
        # has carried the labelled messages and about half the archived.
        point = LABELLED * 1500 + ARCHIVED * ARCHIVED_SIZE // 2
        proxy.setFaults([_cutAt(point, range(1, 1000))])
        daemon = startDaemon(self, reactor, path)
        reached = proxy.whenFired(1)
        race: list[Deferred[Any]] = [reached, daemon.whenEnded()]
        settled = DeferredList(race, fireOnOneCallback=True)
        await settled.addTimeout(RUN_BOUND, reactor)
        killed = reached.called
        daemon.kill()
        await daemon.whenEnded()
        await proxy.whenIdle().addTimeout(RUN_BOUND, reactor)
        held = _numbers(instance, destination)
        proxy.setFaults([])
        self.assertTrue(killed, f"the daemon was not killed; it held {held}")
        # Killed while it copied the archived mail (10 of 20 had arrived,
        # every time it was measured: the cut is counted in octets).
        self.assertTrue(0 < len(held.get("Archive", [])) < ARCHIVED, held)

        daemon = startDaemon(self, reactor, path)
        status = await daemon.exited(reactor, RUN_BOUND)
        self.assertEqual(status, 0, daemon.tail())
        expected = _expected(labels)
        self.assertEqual(_numbers(instance, destination), expected)
        names = {name for _, _, name in instance.listMailboxes(destination.name)}
        self.assertFalse({ALL_MAIL, STARRED, IMPORTANT} & names, names)

        config = loadConfig(path)
        status, document, printed = await verifyJobs(reactor, config, [JOB])
        self.assertEqual((status, verifyDifferences(document)), (0, []), printed)
        self.assertEqual(reportJobs(self, config, [JOB])[JOB]["failed"], 0)

    async def test_archiveOff(self) -> None:
        """
        With C{archive_folder: off} nothing is copied into C{Archive}: the
        plan, C{imapmig report} and C{imapmig verify} count the archived
        messages as not migrated, each with why, its Subject and From.
        """
        instance, destination, labels, path = self._setUp(None, "off")
        plan = await self._plan(path)
        self.assertIn("not migrated [Gmail]/All Mail: 20 messages: found only in", plan)
        self.assertIn(", 20 not migrated;", plan)
        daemon = startDaemon(self, reactor, path)
        await daemon.exited(reactor, RUN_BOUND)
        held = _numbers(instance, destination)
        self.assertEqual(held, {k: v for k, v in _expected(labels).items() if k != "Archive"})

        config = loadConfig(path)
        entry = reportJobs(self, config, [JOB])[JOB]
        self.assertEqual(entry["failed"], ARCHIVED)
        reasons = {f["reason"] for f in entry["failures"]}
        self.assertEqual(len(reasons), 1)
        self.assertIn("archive_folder is off", reasons.pop())
        # Each named to its owner, as any message not migrated.
        self.assertTrue(
            all(
                f["subject"].startswith("message ") and f["from"] == "someone@example.org"
                for f in entry["failures"]
            ),
            entry["failures"][:3],
        )
        status, document, printed = await verifyJobs(reactor, config, [JOB])
        differences = verifyDifferences(document)
        self.assertEqual(status, 1)
        self.assertEqual(len(differences), ARCHIVED, printed)
        self.assertEqual({d[:3] for d in differences}, {("not migrated", "-", "[Gmail]/All Mail")})
