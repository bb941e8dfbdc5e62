"""
The controls against a real, private Dovecot: a job paused mid-run holds
no connection (as the server sees it, through a counting relay) and,
resumed, ends with every message in its account exactly once.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from imapmig.config import parseConfig
from imapmig.progress import JobState
from imapmig.schedule.grants import JOB_SLOTS
from imapmig.schedule.scheduler import JobQueueService
from imapmig.daemon.service import buildService
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.connectioncounter import countedRelay
from tests.support import (
    deliveries,
    freshUser,
    newDirectory,
    settleConnections,
    sharedDovecot,
    writePasswordFile,
)

reactor: Any = _globalReactor


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """
    Wait (polling every 5 ms) until C{condition()}.

    @raise AssertionError: not within C{timeout} seconds.
    """
    for _ in range(int(timeout / 0.005)):
        if condition():
            return
        await deferLater(reactor, 0.005, lambda: None)
    raise AssertionError(f"not within {timeout} s: {what}")


class PauseResumeTests(TestCase):
    """
    Pause and resume a running job against Dovecot.
    """

    async def test_pausedHoldsNoConnection(self) -> None:
        """
        A job paused while it copies (rate-limited, so that it is mid-run)
        stops as a daemon stop does and closes every connection: the server
        sees none, and none is opened while it stays paused; resumed, it
        goes on and completes, and every message is in the account exactly
        once (nothing lost, nothing sent twice).
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        counter, port = await countedRelay(self, instance.port)
        maildir = os.path.join(directory, "Maildir")
        corpus = writeMaildir(maildir, 120, seed=18, folders=(("A",),), profile="small")
        passwordFile = writePasswordFile(os.path.join(directory, "u.pw"), user.password)
        config = parseConfig(
            {
                "state": os.path.join(directory, "state.sqlite"),
                "status": "off",
                "servers": {
                    "dovecot": {
                        "endpoint": f"tcp:127.0.0.1:{port}",
                        "starttls": "off",
                        "compress": "off",
                        "messages_per_second": 60,
                    }
                },
                "jobs": [
                    {
                        "name": "paused",
                        "source": {"maildir": maildir},
                        "destination": {
                            "server": "dovecot",
                            "user": user.name,
                            "password_file": passwordFile,
                        },
                        "connections": 2,
                        "batch_messages": 5,
                    }
                ],
            },
            os.path.join(directory, "imapmig.yaml"),
        )
        finished: Deferred[bool] = Deferred()
        service = buildService(config, reactor, whenDone=finished.callback)
        [scheduler] = [s for s in service if isinstance(s, JobQueueService)]
        progress = service.progress.job("paused")
        service.startService()
        try:
            await until(lambda: progress.messagesDone >= 20, "20 messages copied")
            self.assertEqual(self.successResultOf(scheduler.controls.pause("paused", "test")), JobState.PAUSED)
            await until(lambda: progress.state is JobState.PAUSED, "the job paused")
            await until(lambda: not counter.open, "every connection closed")
            self.assertEqual(
                (progress.waitingFor, progress.pausedByAdmin, progress.error),
                ("paused by the admin", True, None),
            )
            grants = scheduler._grants
            # A grant goes back once its session's connection has closed
            # on this side too.
            await until(lambda: grants.connectionsInUse("dovecot") == 0, "every grant back")
            copied = sum(len(held) for held in instance.fetchAll(user.name).values())
            self.assertGreater(copied, 0)
            self.assertLess(copied, 120, "the job completed before it was paused")
            self.assertEqual(copied, progress.messagesDone)
            accepted = counter.accepted
            # Paused: no connection is opened meanwhile.
            await deferLater(reactor, 0.5, lambda: None)
            self.assertEqual((counter.accepted, len(counter.open)), (accepted, 0))
            self.assertEqual(grants.connectionsInUse("dovecot"), 0)
            self.assertEqual(grants.pools.inUse(JOB_SLOTS), 0)
            self.assertFalse(finished.called)

            self.assertEqual(self.successResultOf(scheduler.controls.resume("paused", "test")), JobState.QUEUED)
            self.assertTrue(await finished.addTimeout(60, reactor))
        finally:
            await service.stopService()
            await settleConnections(reactor)
        self.assertEqual(progress.state, JobState.DONE)
        self.assertFalse(progress.pausedByAdmin)
        # The resumed run found what the first one copied.
        self.assertGreaterEqual(progress.messagesAlreadyMigrated, copied)
        held = deliveries(instance.fetchAll(user.name), corpus.messages)
        self.assertTrue(held.exactlyOnce, held.summary())
