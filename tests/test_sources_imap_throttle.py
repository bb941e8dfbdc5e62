"""
Tests for the throttle of an L{IMAPSource}: its rates waited for before
each body FETCH, and a server's "wait" holding its buckets.
"""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock

from imapmig.config.limits import AccountLimits, ServerLimits
from imapmig.errors import ServerBusy
from imapmig.throttle import DOWNLOAD, ThrottleRegistry
from imapmig.sources.imap import IMAPSource
from imapmig.state.memory import MemoryStateStore
from tests.test_throttle import assertAdmittedAfter
from tests.test_sources_imap import SourceTestCase, body


class SourceThrottleTests(SourceTestCase):
    """
    L{IMAPSource} with a throttle of its server and account.
    """

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.limits = ServerLimits(
            messagesPerSecond=100, perAccount=AccountLimits(messagesPerSecond=1)
        )
        self.registry = ThrottleRegistry(self.clock, MemoryStateStore())
        self.throttle = self.registry.throttleFor("old", self.limits, "alice", DOWNLOAD)
        self.source = IMAPSource(self.harness.open, "alice at source", throttle=self.throttle)
        for n in range(1, 4):
            self.account.folders["INBOX"].add(body(n))

    def test_fetchWaitsForRate(self) -> None:
        """
        At one message per second for the account, the second FETCH is not
        written before a second has passed; then it is, and the bodies
        come as without a throttle.
        """
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        self.assertEqual(len(self.run_(self.source.readBodies(folder, messages[:1]))), 1)
        start = len(self.account.commands)
        d = self.source.readBodies(folder, messages[1:2])
        self.harness.pump()
        self.assertNoResult(d)
        self.assertEqual(self.commandsSince(start), [])
        self.clock.advance(1)
        self.assertEqual(self.run_(d), [self.account.folders["INBOX"].messages[2].body])
        self.assertEqual(self.commandsSince(start), [b"UID FETCH 2 (UID BODY.PEEK[])"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelledOnStop(self) -> None:
        """
        A FETCH waiting for the throttle fails with L{CancelledError} when
        the job stops (cancels the throttle's waits); nothing is sent.
        """
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        self.run_(self.source.readBodies(folder, messages[:1]))
        start = len(self.account.commands)
        d = self.source.readBodies(folder, messages[1:])
        assert self.throttle is not None
        self.throttle.cancelWaits()
        self.fails(d, CancelledError)
        self.assertEqual(self.commandsSince(start), [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_closeEndsThrottleWait(self) -> None:
        """
        Closing the source (the job's attempt ends) while a read waits for
        the throttle under its connection's lock ends that wait at once
        with L{CancelledError}: the close does not wait for the throttle,
        nothing is sent, no timer is left.
        """
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        self.run_(self.source.readBodies(folder, messages[:1]))
        start = len(self.account.commands)
        d = self.source.readBodies(folder, messages[1:])
        self.harness.pump()
        self.assertNoResult(d)
        closing = self.source.close()
        self.fails(d, CancelledError)
        self.run_(closing)
        self.assertEqual(self.commandsSince(start), [b"LOGOUT"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_serverWaitHoldsBuckets(self) -> None:
        """
        A source server's C{Suggested Backoff Time} is told to the throttle
        (the job then knows it came from the source) and holds the
        server's buckets for every job reading from it.
        """
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        self.account.interceptors.append(
            lambda tag, command: tag
            + b" NO Request is throttled. Suggested Backoff Time: 3000 milliseconds\r\n"
            if b"FETCH" in command
            else None
        )
        error = self.fails(self.source.readBodies(folder, messages[:1]), ServerBusy)
        assert self.throttle is not None
        self.assertIs(self.throttle.lastSignal, error)
        other = self.registry.throttleFor("old", self.limits, "bob", DOWNLOAD)
        assert other is not None
        assertAdmittedAfter(self, self.clock, other.admit(1, 1), 3)
        self.assertEqual(self.clock.getDelayedCalls(), [])
