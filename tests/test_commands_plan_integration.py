"""
C{imapmig plan} (L{imapmig.commands.plan.plan}, on the global reactor) against the
shared Dovecot, with a Maildir source part of which a daemon run already
copied: the plan shows the rest, writes nothing, and a second run then
does what it said.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from typing import Any

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from imapmig.commands import plan as planCommand
from imapmig.config import Config, loadConfig
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, requireDovecot
from tests.support import (
    freshUser,
    migrate,
    newDirectory,
    plainServer,
    reportJobs,
    settleConnections,
    sharedDovecot,
    writeDaemonConfig,
)

JOB = "job"
FOLDERS = (("INBOX",), ("Sent",), ("Archive",), ("Lists", "twisted"))


async def runPlan(config: Config, asJSON: bool) -> tuple[int, str]:
    """
    Run C{imapmig plan} on C{config}'s job as the command does: the state
    database opened read-only.

    @return: its exit status and what it printed.
    """
    out = io.StringIO()
    store = SQLiteStateStore(config.statePath, seconds=lambda: 0.0, readOnly=True)
    try:
        status = await planCommand.plan(config, [JOB], store, reactor, asJSON, out)
    finally:
        store.close()
    await settleConnections(reactor)
    return status, out.getvalue()


def destinationState(instance: DovecotInstance, user: DovecotUser) -> dict[str, list[Any]]:
    """
    Every mailbox of C{user} and its messages' octets and flags.
    """
    return {
        name: sorted((hashlib.sha256(m.body).hexdigest(), m.flags) for m in messages)
        for name, messages in instance.fetchAll(user.name).items()
    }



def fileState(directory: str) -> dict[str, str]:
    """
    The files of C{directory} (not its subdirectories) and the SHA-256 of
    each: the configuration, the state database and its lock.  SQLite's
    shared-memory index (C{-shm}), which a read-only connection to a WAL
    database makes, is left out, and so is an empty C{-wal}: neither holds
    a write; a C{-wal} with frames would.
    """
    result = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path) or name.endswith("-shm"):
            continue
        if name.endswith("-wal") and os.path.getsize(path) == 0:
            continue
        with open(os.path.join(directory, name), "rb") as f:
            result[name] = hashlib.sha256(f.read()).hexdigest()
    return result


class PlanIntegrationTests(TestCase):
    """
    C{imapmig plan} against a real Dovecot.
    """

    async def test_partlyMigrated(self) -> None:
        """
        After a run that copied part of a Maildir (a folder and some INBOX
        messages were moved away meanwhile), the plan counts the copied
        messages as migrated and the rest as to copy, and names the
        mailboxes missing; the destination's mailboxes and messages and the
        state database are exactly as before; a second run then copies as
        many messages and creates exactly those mailboxes.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        corpus = writeMaildir(maildir, 40, seed=17, folders=FOLDERS, profile="small")
        aside = os.path.join(directory, "aside")
        os.makedirs(os.path.join(aside, "cur"))
        inbox = [m for m in corpus.messages if m.folder == ("INBOX",)]
        held = inbox[:3]
        moved: list[tuple[str, str]] = []
        for message in held:
            for sub in ("cur", "new"):
                for name in os.listdir(os.path.join(maildir, sub)):
                    if name.startswith(message.key):
                        moved.append((os.path.join(maildir, sub, name), os.path.join(aside, name)))
        self.assertEqual(len(moved), len(held))
        listsDir = os.path.join(maildir, ".Lists.twisted")
        moved.append((listsDir, os.path.join(aside, ".Lists.twisted")))
        for here, there in moved:
            shutil.move(here, there)
        config = loadConfig(writeDaemonConfig(directory, user, {"maildir": maildir}, plainServer(instance)))
        await migrate(self, reactor, config)
        for here, there in moved:
            shutil.move(there, here)

        lists = corpus.inFolder(("Lists", "twisted"))
        before = destinationState(instance, user)
        stateBefore = fileState(directory)
        status, output = await runPlan(config, asJSON=True)
        self.assertEqual(status, 0, output)
        (entry,) = json.loads(output)
        toCopy = len(held) + len(lists)
        totals = entry["totals"]
        self.assertEqual(
            (totals["messages"], totals["migrated"], totals["to_copy"]),
            (len(corpus.messages), len(corpus.messages) - toCopy, toCopy),
        )
        byFolder = {f["folder"]: f for f in entry["folders"]}
        self.assertEqual(byFolder["INBOX"]["to_copy"], len(held))
        self.assertEqual(byFolder["INBOX"]["to_copy_size"], sum(m.size for m in held))
        self.assertEqual(byFolder["Lists/twisted"]["to_copy"], len(lists))
        self.assertFalse(byFolder["Lists/twisted"]["mailbox_exists"])
        self.assertEqual(byFolder["Sent"]["to_copy"], 0)
        created = [c["mailbox"] for c in entry["create"]]
        self.assertIn(byFolder["Lists/twisted"]["mailbox"], created)
        self.assertEqual(destinationState(instance, user), before)
        self.assertEqual(fileState(directory), stateBefore)

        status, text = await runPlan(config, asJSON=False)
        self.assertEqual(status, 0, text)
        self.assertIn(f"{toCopy} to copy", text)
        self.assertEqual(destinationState(instance, user), before)
        self.assertEqual(fileState(directory), stateBefore)

        copiedBefore = reportJobs(self, config, [JOB])[JOB]["copied"]
        await migrate(self, reactor, config)
        after = destinationState(instance, user)
        self.assertEqual(sorted(set(after) - set(before)), sorted(created))
        self.assertEqual(reportJobs(self, config, [JOB])[JOB]["copied"] - copiedBefore, toCopy)

    async def test_loginRefused(self) -> None:
        """
        A destination that refuses the login: exit status 1, and the job
        says why; nothing is created.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        writeMaildir(maildir, 5, seed=3, folders=FOLDERS, profile="small")
        path = writeDaemonConfig(directory, user, {"maildir": maildir}, plainServer(instance))
        with open(os.path.join(directory, "password"), "w") as f:
            f.write("not-the-password\n")
        config = loadConfig(path)
        before = destinationState(instance, user)
        out = io.StringIO()
        store = MemoryStateStore()
        status = await planCommand.plan(config, [JOB], store, reactor, False, out)
        await settleConnections(reactor)
        self.assertEqual(status, 1, out.getvalue())
        self.assertIn("cannot plan", out.getvalue())
        self.assertIn(user.name, out.getvalue())
        self.assertEqual(destinationState(instance, user), before)
