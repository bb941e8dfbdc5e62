"""
Many jobs at once against a real, private Dovecot: the connections the
server sees stay within C{max_connections} and C{per_account}, jobs do
overlap, and every message lands exactly once.
"""

from __future__ import annotations

import base64
import os
import re
from collections import Counter
from typing import Any

from twisted.internet import reactor as _globalReactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater
from twisted.protocols.portforward import ProxyFactory, ProxyServer
from twisted.trial.unittest import TestCase

from imapmig.config import parseConfig
from imapmig.testing.corpus import CorpusMessage, writeMaildir
from imapmig.testing.dovecot import requireDovecot
from tests.support import deliveries, freshUser, migrate, newDirectory, sharedDovecot, writePasswordFile

reactor: Any = _globalReactor

_LOGIN = re.compile(rb'^\S+ LOGIN "?([^" \r\n]+)', re.MULTILINE)
_PLAIN = re.compile(rb"^\S+ AUTHENTICATE PLAIN ([A-Za-z0-9+/=]+)", re.MULTILINE)


class _CountingServer(ProxyServer):
    """
    One relayed client connection, counted while it is open, and by the
    user it logs in as.
    """

    factory: ConnectionCounter

    def connectionMade(self) -> None:
        self.user: bytes | None = None
        self.sniffed = b""
        self.factory.opened(self)
        ProxyServer.connectionMade(self)

    def dataReceived(self, data: bytes) -> None:
        if self.user is None and len(self.sniffed) < 4096:
            self.sniffed += data
            self.user = _loginName(self.sniffed)
            if self.user is not None:
                self.factory.loggedIn(self)
        ProxyServer.dataReceived(self, data)

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.closed(self)
        ProxyServer.connectionLost(self, reason)


def _loginName(sniffed: bytes) -> bytes | None:
    """
    The user a client's first commands log in as (LOGIN, or AUTHENTICATE
    PLAIN with an initial response), or L{None} until seen.
    """
    match = _LOGIN.search(sniffed)
    if match is not None:
        return match.group(1)
    match = _PLAIN.search(sniffed)
    if match is not None:
        authzid, user, _ = base64.b64decode(match.group(1)).split(b"\0", 2)
        return authzid or user
    return None


class ConnectionCounter(ProxyFactory):
    """
    A TCP relay to a server counting the connections open through it at
    once, in all and per user; the highest counts are kept.
    """

    protocol = _CountingServer

    def __init__(self, host: str, port: int) -> None:
        ProxyFactory.__init__(self, host, port)
        self.open: set[_CountingServer] = set()
        self.most = 0
        self.perUser: Counter[bytes] = Counter()
        self.mostPerUser: Counter[bytes] = Counter()
        self.accepted = 0

    def opened(self, connection: _CountingServer) -> None:
        self.accepted += 1
        self.open.add(connection)
        # Counted at the start of the next reactor turn: a connection the
        # client closed before opening this one may still await its EOF in
        # this turn's events.
        reactor.callLater(0, self._count)

    def _count(self) -> None:
        self.most = max(self.most, len(self.open))

    def loggedIn(self, connection: _CountingServer) -> None:
        assert connection.user is not None
        self.perUser[connection.user] += 1
        self.mostPerUser[connection.user] = max(
            self.mostPerUser[connection.user], self.perUser[connection.user]
        )

    def closed(self, connection: _CountingServer) -> None:
        self.open.discard(connection)
        if connection.user is not None:
            self.perUser[connection.user] -= 1


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
        counter = ConnectionCounter("127.0.0.1", instance.port)
        listening: IListeningPort = await TCP4ServerEndpoint(
            reactor, 0, interface="127.0.0.1"
        ).listen(counter)
        self.addCleanup(listening.stopListening)
        address = listening.getHost()
        assert isinstance(address, IPv4Address)
        port = address.port
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
