"""
Many jobs at once against a real, private Dovecot: the connections the
server sees stay within C{max_connections} and C{per_account}, jobs do
overlap, and every message lands exactly once.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from imapmig.config import parseConfig
from imapmig.testing.corpus import CorpusMessage, writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.connectioncounter import countedRelay
from tests.support import deliveries, freshUser, migrate, newDirectory, sharedDovecot, writePasswordFile

reactor: Any = _globalReactor


class ConcurrentJobsTests(TestCase):
    """
    The scheduler against Dovecot.
    """

    async def test_limitsHold(self) -> None:
        """
        Twelve jobs (three into each of four accounts), C{max_jobs: 4},
        C{max_connections: 3} and C{per_account.max_connections: 1}: the
        server never sees more than 3 connections at once, nor more than
        one per account, yet more than one job ran at a time; every job
        completes and every message is in its account exactly once.
        """
        requireDovecot(self)
        instance = sharedDovecot()
        users = [freshUser(instance) for _ in range(4)]
        directory = newDirectory(self)
        counter, port = await countedRelay(self, instance.port)
        jobs = []
        expected: dict[str, list[CorpusMessage]] = {user.name: [] for user in users}
        for index in range(12):
            user = users[index % 4]
            maildir = os.path.join(directory, f"Maildir{index}")
            corpus = writeMaildir(
                maildir, 12, seed=index, folders=((f"J{index}",), (f"J{index}", "sub")),
                profile="small",
            )  # fmt: skip
            expected[user.name].extend(corpus.messages)
            passwordFile = os.path.join(directory, f"{user.name}.pw")
            if not os.path.exists(passwordFile):
                writePasswordFile(passwordFile, user.password)
            jobs.append(
                {
                    "name": f"job{index:02d}",
                    "source": {"maildir": maildir},
                    "destination": {
                        "server": "dovecot",
                        "user": user.name,
                        "password_file": passwordFile,
                    },
                    "connections": 2,
                }
            )
        config = parseConfig(
            {
                "state": os.path.join(directory, "state.sqlite"),
                "status": "off",
                "max_jobs": 4,
                "servers": {
                    "dovecot": {
                        "endpoint": f"tcp:127.0.0.1:{port}",
                        "starttls": "off",
                        "compress": "off",
                        "max_connections": 3,
                        "per_account": {"max_connections": 1},
                    }
                },
                "jobs": jobs,
            },
            os.path.join(directory, "imapmig.yaml"),
        )
        progress = await migrate(self, reactor, config, timeout=120)
        # Let the last counts run.
        await Deferred.fromCoroutine(_turn())
        self.assertEqual(len(progress), 12)
        self.assertGreaterEqual(counter.accepted, 12)
        self.assertLessEqual(counter.most, 3)
        self.assertGreater(counter.most, 1, "no two jobs ever overlapped")
        self.assertEqual(set(counter.mostPerUser.values()), {1})
        self.assertEqual(
            sorted(name.decode() for name in counter.mostPerUser), sorted(expected)
        )
        for user in users:
            held = deliveries(instance.fetchAll(user.name), expected[user.name])
            self.assertTrue(held.exactlyOnce, f"{user.name}: {held.summary()}")


async def _turn() -> None:
    """
    Let the reactor run one turn.
    """
    await deferLater(reactor, 0, lambda: None)
