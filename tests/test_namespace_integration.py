"""
Integration tests of namespaces (RFC 2342) against a real Dovecot whose
inbox namespace has C{prefix = INBOX.}, as Courier and Cyrus (with
C{altnamespace: no}) have: into it, and out of it into a normal Dovecot.
"""

from __future__ import annotations

import os
import tempfile

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from imapmig.config import Config, parseConfig
from imapmig.progress import JobProgress
from imapmig.daemon.service import buildService
from imapmig.testing.corpus import CorpusMessage, writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import corpusView, fetchedView, freshUser, newDirectory, plainServer
from tests.support import sharedDovecot, writePasswordFile, _rootDirectory

JOB = "ns"

FOLDERS = (("INBOX",), ("Sent",), ("Archive",), ("Archive", "2019"), ("INBOX", "Lists"))


def _prefixedDovecot(testCase: TestCase) -> DovecotInstance:
    """
    A running Dovecot of one test's own whose inbox namespace has C{prefix =
    INBOX.}: every folder but INBOX lives under C{INBOX.}, and a name
    outside it is refused ("Client tried to access nonexistent
    namespace").  Stopped when the test ends.
    """
    instance = DovecotInstance(
        tempfile.mkdtemp(prefix="prefixed-", dir=_rootDirectory()),
        users=[DovecotUser("user01", "password-01")],
        inboxPrefix="INBOX.",
    )
    testCase.addCleanup(instance.stop)
    instance.start()
    return instance


def _config(
    testCase: TestCase,
    source: dict[str, object],
    destination: DovecotInstance,
    user: DovecotUser,
    servers: dict[str, dict[str, object]],
) -> Config:
    """
    One job, C{JOB}, from C{source} into C{user} on C{destination}.
    """
    directory = newDirectory(testCase)
    passwordFile = writePasswordFile(os.path.join(directory, "password"), user.password)
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {"destination": plainServer(destination), **servers},
        "jobs": [
            {
                "name": JOB,
                "source": source,
                "destination": {
                    "server": "destination",
                    "user": user.name,
                    "password_file": passwordFile,
                },
            }
        ],
    }
    return parseConfig(document, os.path.join(directory, "imapmig.yaml"))


async def _run(config: Config) -> JobProgress:
    """
    Run the daemon built from C{config} until its queue is drained.
    """
    finished: Deferred[bool] = Deferred()
    service = buildService(config, reactor, whenDone=finished.callback)
    service.startService()
    try:
        await finished.addTimeout(60, reactor)
    finally:
        await service.stopService()
    return service.progress.job(JOB)


def _prefixed(messages: tuple[CorpusMessage, ...]) -> dict[str, object]:
    """
    The mailboxes C{messages} should land in on the prefixed server: every
    folder under C{INBOX.}, C{INBOX}'s children as C{INBOX.x}.
    """
    view = corpusView(messages)
    return {
        name if name == "INBOX" or name.startswith("INBOX.") else "INBOX." + name: counts
        for name, counts in view.items()
    }


class PrefixedDestinationTests(TestCase):
    """
    Into a Dovecot with C{prefix = INBOX.}, and out of it.
    """

    async def test_maildirInto(self) -> None:
        """
        A Maildir's folders land under C{INBOX.} (C{Sent} in
        C{INBOX.Sent}, C{INBOX/Lists} in C{INBOX.Lists}) with every message
        exactly, none failed; a rerun appends nothing.
        """
        requireDovecot(self)
        instance = _prefixedDovecot(self)
        user = instance.users[0]
        maildir = os.path.join(newDirectory(self), "Maildir")
        corpus = writeMaildir(maildir, 150, seed=16, folders=FOLDERS)
        config = _config(self, {"maildir": maildir}, instance, user, {})

        progress = await _run(config)

        self.assertEqual((progress.messagesDone, progress.messagesFailed), (150, 0))
        self.assertEqual(fetchedView(instance.fetchAll(user.name)), _prefixed(corpus.messages))
        names = {name for _, _, name in instance.listMailboxes(user.name)}
        self.assertEqual(
            names,
            {"INBOX", "INBOX.Sent", "INBOX.Archive", "INBOX.Archive.2019", "INBOX.Lists"},
        )

        again = await _run(config)
        self.assertEqual(again.messagesFailed, 0)
        self.assertEqual(fetchedView(instance.fetchAll(user.name)), _prefixed(corpus.messages))

    async def test_imapSourceOutOf(self) -> None:
        """
        The prefixed Dovecot as an IMAP source into a normal one: its
        C{INBOX.Sent} is the folder C{Sent} there, C{INBOX.Archive.2019}
        is C{Archive.2019}; a rerun appends nothing.
        """
        requireDovecot(self)
        prefixed = _prefixedDovecot(self)
        sourceUser = prefixed.users[0]
        maildir = os.path.join(newDirectory(self), "Maildir")
        corpus = writeMaildir(maildir, 120, seed=17, folders=FOLDERS[:4])
        await _run(_config(self, {"maildir": maildir}, prefixed, sourceUser, {}))

        target = sharedDovecot()
        user = freshUser(target)
        directory = newDirectory(self)
        sourcePassword = writePasswordFile(
            os.path.join(directory, "source-password"), sourceUser.password
        )
        source: dict[str, object] = {
            "server": "prefixed",
            "user": sourceUser.name,
            "password_file": sourcePassword,
        }
        config = _config(self, source, target, user, {"prefixed": plainServer(prefixed)})

        progress = await _run(config)

        self.assertEqual((progress.messagesDone, progress.messagesFailed), (120, 0))
        fetched = fetchedView(target.fetchAll(user.name))
        self.assertEqual(sorted(fetched), ["Archive", "Archive.2019", "INBOX", "Sent"])
        self.assertEqual(fetched, corpusView(corpus.messages))

        again = await _run(config)
        self.assertEqual(again.messagesFailed, 0)
        self.assertEqual(fetchedView(target.fetchAll(user.name)), corpusView(corpus.messages))
