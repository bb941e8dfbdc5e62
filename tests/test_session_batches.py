"""
A pipelined batch of commands (C{SELECT}s, C{CREATE}s, C{SUBSCRIBE}s,
C{UID STORE}s) whose connection ends before the batch is answered: the
session raises the first error, and the commands behind it, which fail
with the same lost connection, are not left to be logged as "Unhandled
error in Deferred" (a critical traceback without the job's name) when
they are garbage-collected.
"""

from __future__ import annotations

import gc
from typing import Any, Callable, Coroutine

from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import ConnectionLost, ProtocolError, ServerBye
from imapmig.imap.session import IMAPSession
from imapmig.testing.hostile import Send, Step
from tests.test_hostile import Hostile

BYE = Send(b"* BYE Server shutting down\r\n", close=True)
GARBAGE = Send(b"\x00\x01 not an IMAP line\r\n")


class AbandonedBatchTests(SynchronousTestCase):
    """
    Each pipelined batch of L{IMAPSession}, its connection ended by the
    server's reply to its first command.
    """

    def assertOnlyFirstError(
        self,
        script: dict[str, Step],
        batch: Callable[[IMAPSession], Coroutine[Any, Any, object]],
        expected: type[ConnectionLost],
    ) -> None:
        """
        C{batch} fails with C{expected}, and once the commands behind the
        first are collected, no unhandled error is logged.
        """
        hostile = Hostile(self, script, logFields={"job": "alice"})
        self.successResultOf(hostile.run(hostile.session.login("alice", "pw")))
        failure = self.failureResultOf(hostile.run(batch(hostile.session)), ConnectionLost)
        self.assertIsInstance(failure.value, expected)
        del failure, hostile
        gc.collect()
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_selectEach(self) -> None:
        """
        A BYE in reply to the first of several pipelined SELECTs: the
        other SELECTs' failures are not logged as unhandled.
        """
        self.assertOnlyFirstError(
            {"SELECT": BYE}, lambda s: s.selectEach(["A", "B", "C", "D"]), ServerBye
        )

    def test_selectEachProtocolError(self) -> None:
        """
        A line that is not IMAP in reply to the first of several pipelined
        SELECTs: likewise.
        """
        self.assertOnlyFirstError(
            {"SELECT": GARBAGE}, lambda s: s.selectEach(["A", "B", "C"]), ProtocolError
        )

    def test_createMailboxes(self) -> None:
        """
        A BYE in reply to the first of several pipelined CREATEs: neither
        the other CREATEs' failures nor the SUBSCRIBEs' are logged as
        unhandled.
        """
        self.assertOnlyFirstError(
            {"CREATE": BYE}, lambda s: s.createMailboxes(["A", "B", "C"]), ServerBye
        )

    def test_createMailboxesSubscribeLost(self) -> None:
        """
        A BYE in reply to the first of the SUBSCRIBEs that follow the
        CREATEs: the other SUBSCRIBEs' failures are not logged as
        unhandled.
        """
        self.assertOnlyFirstError(
            {"SUBSCRIBE": BYE}, lambda s: s.createMailboxes(["A", "B", "C"]), ServerBye
        )

    def test_subscribeMailboxes(self) -> None:
        """
        A BYE in reply to the first of several pipelined SUBSCRIBEs.
        """
        self.assertOnlyFirstError(
            {"SUBSCRIBE": BYE}, lambda s: s.subscribeMailboxes(["A", "B", "C"]), ServerBye
        )

    def test_storeFlags(self) -> None:
        """
        A BYE in reply to the first of several pipelined UID STOREs.
        """
        self.assertOnlyFirstError(
            {"UID STORE": BYE},
            lambda s: s.storeFlags("INBOX", [(1, ("\\Seen",)), (2, ()), (3, ("\\Flagged",))]),
            ServerBye,
        )
