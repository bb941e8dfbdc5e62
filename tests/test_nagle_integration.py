"""
Integration tests against a server that leaves Nagle's algorithm on and
offers synchronizing literals only (as Courier-IMAP does): a real Dovecot
with LITERAL+ and MULTIAPPEND hidden, reached through
L{imapmig.testing.naglerelay}.  They check that every message arrives
intact and that the pipeline never has another command's reply due while it
waits for a continuation; the speed is the benchmark's business
(C{python -m bench.run --parts nagle}).
"""

from __future__ import annotations

import os
from typing import Any

from twisted.trial.unittest import TestCase

from imapmig.imap.gather import Piece
from imapmig.imap.outgoing import LiteralMode
from imapmig.imap.pipeline import AppendPipeline
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import requireDovecot
from imapmig.testing.naglerelay import NagleRelay
from tests.support import freshUser, newDirectory, sharedDovecot
from tests.test_integration import (
    SYNCHRONIZING_ONLY,
    _assertContent,
    _assertRecordedUIDs,
    _config,
    _Recorder,
    _runService,
)

# LITERAL- only, without MULTIAPPEND (Gmail's kind): synchronizing literals
# for the messages above 4096 octets.
_LITERAL_MINUS_ONLY = SYNCHRONIZING_ONLY + " LITERAL-"


class _InFlightWatch:
    """
    Records, by wrapping the pipeline's C{_writeLiterals}, how many commands
    were in flight (the one being written included) each time a command
    line ending in a synchronizing literal was written.
    """

    def __init__(self, testCase: TestCase) -> None:
        self.inFlightAtSyncLiteral: list[int] = []
        original = AppendPipeline._writeLiterals

        def writeLiterals(
            pipeline: AppendPipeline, command: Any, start: int, out: list[Piece]
        ) -> None:
            original(pipeline, command, start, out)
            if pipeline._blocked is command:
                self.inFlightAtSyncLiteral.append(len(pipeline._inFlight))

        testCase.patch(AppendPipeline, "_writeLiterals", writeLiterals)


class NagleServerTests(TestCase):
    """
    Migrations into a server that leaves Nagle on, through the relay.
    """

    async def _migrate(
        self, capabilities: str, mode: LiteralMode, count: int, profile: str
    ) -> _InFlightWatch:
        """
        Migrate C{count} messages of C{profile} into a Dovecot advertising
        C{capabilities} through a Nagle relay; check the literal mode the
        pipelines chose, the content and the recorded UIDs.
        """
        requireDovecot(self)
        instance = sharedDovecot(capabilities)
        user = freshUser(instance)
        maildir = os.path.join(newDirectory(self), "Maildir")
        corpus = writeMaildir(
            maildir, count, seed=16, folders=(("INBOX",), ("Sent",)), profile=profile
        )
        relay = NagleRelay("127.0.0.1", instance.port)
        relay.start()
        self.addCleanup(relay.stop)
        server: dict[str, object] = {"endpoint": f"tcp:127.0.0.1:{relay.port}", "starttls": "off"}
        config = _config(self, user, {"maildir": maildir}, server)
        recorder = _Recorder(self)
        watch = _InFlightWatch(self)

        completed, progress = await _runService(config)

        self.assertTrue(completed, progress.error)
        self.assertEqual((progress.messagesDone, progress.messagesFailed), (count, 0))
        self.assertGreater(relay.connections, 0)
        self.assertEqual(
            {(s.literalMode, s.batchMessages) for s in recorder.settings}, {(mode, 1)}
        )
        _assertContent(self, instance, user, corpus.messages)
        _assertRecordedUIDs(self, config, instance, user, corpus.messages)
        return watch

    async def test_synchronizingOnly(self) -> None:
        """
        A few hundred small messages into a server offering synchronizing
        literals only arrive intact, each UID recorded; each command line
        asking for a continuation is written while no other command is in
        flight (no tagged reply of an earlier command is due, which the
        server would send first, leaving the C{+} behind it for the
        delayed ACK).
        """
        watch = await self._migrate(SYNCHRONIZING_ONLY, LiteralMode.SYNC, 300, "small")
        self.assertEqual(len(watch.inFlightAtSyncLiteral), 300)
        self.assertEqual(set(watch.inFlightAtSyncLiteral), {1})

    async def test_literalMinus(self) -> None:
        """
        With LITERAL- only, the realistic corpus (most messages above 4096
        octets, some below) arrives intact, and each large one's command
        line is written while no other command is in flight.
        """
        watch = await self._migrate(_LITERAL_MINUS_ONLY, LiteralMode.MINUS, 200, "realistic")
        self.assertTrue(0 < len(watch.inFlightAtSyncLiteral) < 200)
        self.assertEqual(set(watch.inFlightAtSyncLiteral), {1})

