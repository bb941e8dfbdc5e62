# -*- test-case-name: tests.test_providers_integration -*-
"""
Gmail- and Microsoft-365-shaped servers: a private Dovecot advertising
each provider's capabilities (C{imap_capability}), the realistic corpus
migrated into it by the daemon with the provider's C{preset}.

  - Gmail-shaped: LITERAL- only, no MULTIAPPEND, no BINARY, no COMPRESS
    on loopback, C{APPENDLIMIT=35651584}.
  - Microsoft-365-shaped: LITERAL+, no MULTIAPPEND, no COMPRESS, no
    BINARY, no APPENDLIMIT (Exchange Online advertises none): the
    C{microsoft365} preset's C{max_message_size} (35 MiB) is the limit.

A message larger than the limit is recorded as failed with the reason and
never sent; every other message lands exactly once, with its flags and
date (read back with an independent client), and a second run appends
nothing.  The provider's throttling replies are scripted against the fake
server instead (L{tests.test_providers}): Dovecot cannot be made to send
them.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.trial.unittest import TestCase

from imapmig.config import Config, parseConfig
from imapmig.progress import JobState
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.support import freshUser, newDirectory, runDaemon, sharedDovecot, writePasswordFile
from tests.test_integration import _addMaildirMessage, _assertContent, _Recorder

reactor: Any = _globalReactor

JOB = "provider"

MESSAGES = 250
"""
How many messages of the realistic corpus each test migrates.
"""

OVERSIZED = 37_000_000
"""
The size of the message too large for either provider: above Gmail's
APPENDLIMIT (35,651,584) and Microsoft's 35 MiB (36,700,160).
"""

GMAIL_SHAPE = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE NAMESPACE UIDPLUS CHILDREN"
    " SPECIAL-USE LIST-EXTENDED LIST-STATUS CONDSTORE ESEARCH MOVE UNSELECT"
    " LITERAL- APPENDLIMIT=35651584"
)
"""
Gmail's capabilities as far as Dovecot has them (it has no X-GM-EXT-1,
XLIST or UTF8=ACCEPT).
"""

MICROSOFT365_SHAPE = "IMAP4rev1 SASL-IR ID UNSELECT CHILDREN IDLE NAMESPACE LITERAL+ UIDPLUS"
"""
Exchange Online's capabilities after login (its only login, XOAUTH2,
aside).
"""


def _config(testCase: TestCase, server: dict[str, object], user: Any, maildir: str) -> Config:
    """
    One job migrating C{maildir} into C{user}'s account on C{server}.
    """
    directory = newDirectory(testCase)
    passwordFile = writePasswordFile(os.path.join(directory, "password"), user.password)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"provider": server},
        "jobs": [
            {
                "name": JOB,
                "source": {"maildir": maildir},
                "destination": {
                    "server": "provider",
                    "user": user.name,
                    "password_file": passwordFile,
                },
            }
        ],
    }
    return parseConfig(document, os.path.join(directory, "imapmig.yaml"))


def _failures(config: Config) -> list[tuple[str, str]]:
    """
    The messages the state store records as failed: key and reason.
    """
    connection = sqlite3.connect(config.statePath)
    try:
        rows = connection.execute(
            "SELECT message_key, failure FROM messages WHERE job = ? AND failure IS NOT NULL",
            (JOB,),
        ).fetchall()
    finally:
        connection.close()
    return [(str(key), str(failure)) for key, failure in rows]


class ProviderShapedTests(TestCase):
    """
    The realistic corpus into provider-shaped Dovecots, with the presets.
    """

    async def _migrate(
        self, capabilities: str, preset: str, reason: str
    ) -> tuple[_Recorder, Config]:
        """
        Migrate the corpus and one oversized message into a Dovecot
        advertising C{capabilities}, with C{preset}; check the result;
        run again and check that nothing more is appended.

        @param reason: what the oversized message's failure must say.
        """
        requireDovecot(self)
        instance = sharedDovecot(capabilities)
        user = freshUser(instance)
        maildir = os.path.join(newDirectory(self), "Maildir")
        corpus = writeMaildir(maildir, MESSAGES)
        big = _addMaildirMessage(
            maildir,
            ("INBOX",),
            1700000001,
            "S",
            b"Subject: too large\n\n" + (b"z" * 75 + b"\n") * (OVERSIZED // 76 + 1),
            ("\\Seen",),
        )
        server: dict[str, object] = {
            "preset": preset,
            "endpoint": f"tcp:127.0.0.1:{instance.port}",
            "starttls": "off",
        }
        config = _config(self, server, user, maildir)
        [serverConfig] = config.servers
        self.assertEqual(serverConfig.preset, preset)
        recorder = _Recorder(self)

        completed, progress = await runDaemon(reactor, config)
        job = progress[JOB]
        self.assertTrue(completed, job.error)
        self.assertEqual(
            (job.state, job.messagesTotal, job.messagesDone, job.messagesFailed),
            (JobState.DONE_WITH_FAILURES, MESSAGES + 1, MESSAGES, 1),
        )
        _assertContent(self, instance, user, corpus.messages)
        [(key, failure)] = _failures(config)
        self.assertEqual(key, big.key)
        self.assertIn(reason, failure)
        self.assertIn("not sent", failure)

        completed, progress = await runDaemon(reactor, config)
        self.assertTrue(completed, progress[JOB].error)
        _assertContent(self, instance, user, corpus.messages)
        self.assertEqual(progress[JOB].bytesSent, 0)
        return recorder, config

    async def test_gmailShaped(self) -> None:
        """
        Into a Gmail-shaped Dovecot (LITERAL-, no MULTIAPPEND,
        APPENDLIMIT=35651584) with C{preset: gmail}: every message but the
        one over APPENDLIMIT lands once, one message per APPEND, literals
        above 4096 octets synchronizing (the server's C{+} received).
        """
        recorder, _ = await self._migrate(
            GMAIL_SHAPE, "gmail", "larger than the 35651584 the destination accepts"
            " (the server's APPENDLIMIT)"
        )
        self.assertTrue(recorder.settings)
        for capabilities, settings in zip(recorder.capabilities, recorder.settings):
            self.assertIn(b"LITERAL-", capabilities)
            self.assertNotIn(b"MULTIAPPEND", capabilities)
            self.assertEqual(settings.batchMessages, 1)
        self.assertGreater(recorder.continuations, 0)

    async def test_microsoft365Shaped(self) -> None:
        """
        Into a Microsoft-365-shaped Dovecot (LITERAL+, no MULTIAPPEND, no
        APPENDLIMIT) with C{preset: microsoft365}: every message but the
        one over the preset's 35 MiB lands once, one message per APPEND,
        no literal waiting for C{+}.
        """
        recorder, config = await self._migrate(
            MICROSOFT365_SHAPE, "microsoft365", "larger than the 36700160 the destination"
            " accepts (the server's max_message_size setting)"
        )
        [server] = config.servers
        self.assertEqual(server.maxMessageSize, 36700160)
        self.assertTrue(recorder.settings)
        for capabilities, settings in zip(recorder.capabilities, recorder.settings):
            self.assertIn(b"LITERAL+", capabilities)
            self.assertNotIn(b"MULTIAPPEND", capabilities)
            self.assertNotIn(b"APPENDLIMIT=35651584", capabilities)
            self.assertEqual(settings.batchMessages, 1)
        self.assertEqual(recorder.continuations, 0)
