# -*- test-case-name: tests.test_userlist_scale_integration -*-
"""
Issue 17's acceptance run: a user list of 1,000 rows, one admin ("master
user") credential for all of them, migrated into a real, private Dovecot
under C{max_connections}; every account exact by C{imapmig verify}, and the
log, the status and the report telling the accounts apart.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.logger import ILogObserver, LogEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from imapmig.config import loadConfig
from imapmig.progress import JobState
from imapmig.testing.corpus import writeMaildirs
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.connectioncounter import countedRelay
from tests.support import (
    _rootDirectory,
    deliveries,
    migrate,
    newDirectory,
    reportJobs,
    verifyDifferences,
    verifyJobs,
    writePasswordFile,
)

reactor: Any = _globalReactor

ROWS = 1000
MESSAGES = 3
MAX_CONNECTIONS = 8
ADMIN = DovecotUser("admin", "admin-pw-of-the-migration")


@implementer(ILogObserver)
class _JobsLogged:
    """
    Counts the log events that name a job, by job.
    """

    def __init__(self) -> None:
        self.events: dict[str, int] = {}

    def __call__(self, event: LogEvent) -> None:
        job = event.get("job")
        if isinstance(job, str):
            self.events[job] = self.events.get(job, 0) + 1


class UserListAtScaleTests(TestCase):
    """
    A thousand accounts from one CSV, through one admin credential.
    """

    # 1,000 accounts: generous for a loaded CI machine.
    timeout = 600

    async def test_thousandRowsAsAdmin(self) -> None:
        """
        1,000 rows, each a Maildir of three messages into its own Dovecot
        account, the daemon logging in as the admin on each user's behalf:
        every job completes with its three messages, never more than
        C{max_connections} connections at once (counted by a relay in front
        of Dovecot) although jobs overlapped; C{imapmig verify} finds every
        account exact; each job's log events, status entry and report entry
        carry its own name.
        """
        requireDovecot(self)
        users = [DovecotUser(f"u{index:04d}", f"pw-{index:04d}") for index in range(ROWS)]
        instance = DovecotInstance(
            tempfile.mkdtemp(prefix="userlist-", dir=_rootDirectory()),
            users=users,
            masterUsers=[ADMIN],
        )
        self.addCleanup(instance.stop)
        instance.start()
        counter, relayPort = await countedRelay(self, instance.port)

        directory = newDirectory(self)
        corpora = writeMaildirs(
            [os.path.join(directory, "mail", user.name, "Maildir") for user in users],
            MESSAGES,
            folders=(("INBOX",), ("Archive",)),
        )
        expected = {user.name: corpus.messages for user, corpus in zip(users, corpora)}
        rows = ["destination_user,destination_credential"]
        rows.extend(f"{user.name},admin" for user in users)
        with open(os.path.join(directory, "users.csv"), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
        adminFile = writePasswordFile(os.path.join(directory, "admin.pw"), ADMIN.password)
        configPath = os.path.join(directory, "imapmig.yaml")
        with open(configPath, "w", encoding="utf-8") as f:
            f.write(
                f"state: {directory}/state.sqlite\n"
                "status: off\n"
                "max_jobs: 16\n"
                "credentials:\n"
                f"  admin: {{user: {ADMIN.name}, password_file: {adminFile}}}\n"
                "servers:\n"
                "  dovecot:\n"
                f"    endpoint: tcp:127.0.0.1:{relayPort}\n"
                "    starttls: off\n"
                "    compress: off\n"
                f"    max_connections: {MAX_CONNECTIONS}\n"
                "jobs:\n"
                "  - name: users\n"
                "    jobs_from: users.csv\n"
                f'    source: {{maildir: "{directory}/mail/{{destination_user}}/Maildir"}}\n'
                "    destination: {server: dovecot}\n"
                "    connections: 1\n"
            )
        config = loadConfig(configPath)
        names = [job.name for job in config.jobs]
        self.assertEqual(len(names), ROWS)
        self.assertEqual(names[0], "users-u0000")

        jobsLogged = _JobsLogged()
        globalLogPublisher.addObserver(jobsLogged)
        try:
            progress = await migrate(self, reactor, config, timeout=540)
        finally:
            globalLogPublisher.removeObserver(jobsLogged)

        # Under the limit, yet concurrent.
        self.assertLessEqual(counter.most, MAX_CONNECTIONS)
        self.assertGreater(counter.most, 1, "no two jobs ever overlapped")
        # The status: one entry per account, each done with its messages.
        self.assertEqual(sorted(progress), sorted(names))
        for name, entry in progress.items():
            self.assertEqual(
                (entry.state, entry.messagesDone, entry.messagesFailed),
                (JobState.DONE, MESSAGES, 0),
                name,
            )
        # The log: every job's events carry its name.
        self.assertEqual(set(jobsLogged.events), set(names))
        # The report: one entry per job, each with its own account's count.
        report = reportJobs(self, config, names)
        self.assertEqual(
            {name: (entry["copied"], entry["failed"]) for name, entry in report.items()},
            {name: (MESSAGES, 0) for name in names},
        )
        # verify: every account exact.
        status, document, printed = await verifyJobs(reactor, config, names)
        self.assertEqual((status, verifyDifferences(document)), (0, []), printed[-2000:])
        self.assertEqual(len(document), ROWS)
        # And read back directly, for a sample of accounts.
        for user in users[:: ROWS // 20]:
            held = deliveries(instance.fetchAll(user.name), expected[user.name])
            self.assertTrue(held.exactlyOnce, f"{user.name}: {held.summary()}")
