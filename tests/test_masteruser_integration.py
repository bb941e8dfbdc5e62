# -*- test-case-name: tests.test_masteruser_integration -*-
"""
Integration tests of the admin ("master user") login: the daemon, on the
real reactor, logs in to a private Dovecot with a master passdb as an
admin on behalf of a user (SASL PLAIN with an authorization identity).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.trial.unittest import TestCase

from imapmig.config import Config, parseConfig
from imapmig.errors import AuthenticationFailed
from imapmig.imap.auth import AdminLogin
from imapmig.imap.opening import openSession
from imapmig.progress import JobProgress, JobState
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import (
    _rootDirectory,
    corpusView,
    fetchedView,
    newDirectory,
    plainServer,
    runDaemon,
    settleConnections,
    writePasswordFile,
)

# Only integration tests use the global reactor: they run the daemon for real.
reactor: Any = _globalReactor

JOB = "job"
USER = DovecotUser("user01", "password-01")
ADMIN = DovecotUser("admin", "admin-pw-of-the-migration")

# Dovecot's defaults after login, without SASL-IR before it: AUTHENTICATE
# must wait for the continuation request.
WITHOUT_SASL_IR = "IMAP4rev1 ID ENABLE IDLE NAMESPACE UIDPLUS LITERAL+ MULTIAPPEND"


def _masterDovecot(testCase: TestCase, capabilities: str | None = None) -> DovecotInstance:
    """
    A running Dovecot of one test's own with one account (C{user01}) and
    one master user (C{admin}), stopped when the test ends.
    """
    requireDovecot(testCase)
    instance = DovecotInstance(
        tempfile.mkdtemp(prefix="master-", dir=_rootDirectory()),
        users=[USER],
        masterUsers=[ADMIN],
        capabilities=capabilities,
    )
    testCase.addCleanup(instance.stop)
    instance.start()
    return instance


def _adminConfig(testCase: TestCase, instance: DovecotInstance, maildir: str, password: str) -> Config:
    """
    One job migrating C{maildir} into C{user01}'s account, logged in as
    C{admin} with C{password} (from a file); the user's password is
    nowhere in it.
    """
    directory = newDirectory(testCase)
    adminFile = writePasswordFile(os.path.join(directory, "admin.pw"), password)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"dovecot": plainServer(instance)},
        "jobs": [
            {
                "name": JOB,
                "source": {"maildir": maildir},
                "destination": {
                    "server": "dovecot",
                    "user": USER.name,
                    "admin": {"user": ADMIN.name, "password_file": adminFile},
                },
            }
        ],
    }
    return parseConfig(document, os.path.join(directory, "imapmig.yaml"))


async def _runService(config: Config) -> tuple[bool, JobProgress]:
    """
    Run the daemon built from C{config} (L{runDaemon}).

    @return: whether every job completed, and the progress of job C{JOB}.
    """
    completed, progress = await runDaemon(reactor, config)
    return completed, progress[JOB]


class MasterUserTests(TestCase):
    """
    A job whose destination names an admin credential.
    """

    async def test_migratesAsAdmin(self) -> None:
        """
        A Maildir lands in user01's account, every message with its folder,
        flags and date, the daemon logged in as the admin on behalf of
        user01 (the configuration holds no password of user01).
        """
        instance = _masterDovecot(self)
        maildir = os.path.join(newDirectory(self), "Maildir")
        corpus = writeMaildir(maildir, 40)
        config = _adminConfig(self, instance, maildir, ADMIN.password)
        self.assertEqual(config.jobs[0].destination.admin, ADMIN.name)

        completed, progress = await _runService(config)
        self.assertTrue(completed, progress.error)
        self.assertEqual(
            (progress.state, progress.messagesDone, progress.messagesFailed),
            (JobState.DONE, 40, 0),
        )
        fetched = fetchedView(instance.fetchAll(USER.name))
        self.assertEqual(fetched, corpusView(corpus.messages))
        # The admin has no mailbox of its own: what arrived is user01's.
        with open(os.path.join(instance.baseDir, "dovecot.log"), "rb") as f:
            log = f.read()
        self.assertIn(b"Login: user=<user01>", log)
        self.assertNotIn(b"Login: user=<admin>", log)

    async def test_wrongAdminPassword(self) -> None:
        """
        A wrong admin password fails the job (permanently: nothing is
        appended) with an error naming the account and the server's
        refusal, without the password.
        """
        instance = _masterDovecot(self)
        maildir = os.path.join(newDirectory(self), "Maildir")
        writeMaildir(maildir, 5)
        config = _adminConfig(self, instance, maildir, "not-the-admin-password")

        completed, progress = await _runService(config)
        self.assertFalse(completed)
        self.assertEqual((progress.state, progress.messagesDone), (JobState.FAILED, 0))
        error = progress.error or ""
        self.assertIn(f"user01 at tcp:127.0.0.1:{instance.port}: login refused", error)
        self.assertIn("AUTHENTICATIONFAILED", error)
        self.assertNotIn("not-the-admin-password", error)
        self.assertEqual(
            {name: m for name, m in instance.fetchAll(USER.name).items() if m}, {}
        )

    async def test_continuationWithoutSASLIR(self) -> None:
        """
        Against a server without SASL-IR the admin login answers Dovecot's
        continuation request, and the session is user01's.
        """
        instance = _masterDovecot(self, WITHOUT_SASL_IR)
        session = await openSession(
            TCP4ClientEndpoint(reactor, "127.0.0.1", instance.port),
            reactor,
            description="user01 at dovecot",
            credentials=AdminLogin(USER.name, ADMIN.name, ADMIN.password),
            starttls=False,
            tlsOptions=None,
            timeout=10,
        )
        try:
            self.assertNotIn(b"SASL-IR", session.capabilities)
            await session.create("Made-By-Admin")
        finally:
            await session.logout()
            await settleConnections(reactor)
        names = {name for _, _, name in instance.listMailboxes(USER.name)}
        self.assertIn("Made-By-Admin", names)

    async def test_unknownUser(self) -> None:
        """
        The admin acting for a user the server does not know is refused:
        an authentication failure.
        """
        instance = _masterDovecot(self)
        with self.assertRaises(AuthenticationFailed) as caught:
            await openSession(
                TCP4ClientEndpoint(reactor, "127.0.0.1", instance.port),
                reactor,
                description="nobody at dovecot",
                credentials=AdminLogin("nobody", ADMIN.name, ADMIN.password),
                starttls=False,
                tlsOptions=None,
                timeout=10,
            )
        self.assertIn("nobody at dovecot: login refused", str(caught.exception))
        await settleConnections(reactor)
