# -*- test-case-name: tests.test_job -*-
"""
How a job copies: the settings of one migration job (connections, batches,
windows, units of work, recording, stopping), as the configuration gives
them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JobSettings"]


@dataclass(frozen=True)
class JobSettings:
    """
    How a job copies.

    @ivar connections: parallel connections to the destination.
    @ivar batchMessages: messages per MULTIAPPEND command.
    @ivar batchBytes: octets per MULTIAPPEND command.
    @ivar batchGrowth: into a mailbox of more than C{batchGrowth *
        batchMessages} messages, a MULTIAPPEND command carries one message
        per C{batchGrowth} it holds, up to half of C{windowMessages}
        (L{imapmig.imap.outgoing.PipelineSettings.batchFor}); 0: always
        C{batchMessages}.
    @ivar windowMessages: messages in flight per connection.
    @ivar windowBytes: octets in flight per connection.
    @ivar recordEvery: outcomes buffered before a state-store transaction.
    @ivar recordInterval: seconds after which buffered outcomes are
        recorded anyway.
    @ivar unitMessages: messages per unit of work (L{imapmig.job.units.cutUnits}).
    @ivar unitBytes: octets per unit of work, about.
    @ivar stopTimeout: seconds a stopping job waits for the replies to
        the messages in flight before it drops its connections (what was
        in flight is journaled, and settled by the next run).
    @ivar folderNameFallback: whether a folder whose name the destination
        refuses is created under a safe spelling
        (L{imapmig.job.foldernames}).
    @ivar maxMessageBytes: the largest message to send (the destination
        server's C{max_message_size}), or L{None}; the server's
        APPENDLIMIT, when smaller, wins.  A larger message is recorded as
        failed without being sent.
    @ivar journalQuiet: after imapmig gave a connection of the run up, seconds
        without a journaled message arriving after which the journal's
        missing messages are taken as never to arrive and sent again
        (L{imapmig.job.reconcile.reconcileJournal}'s C{settle}): the server may still be storing
        what that connection had sent.  The destination server's
        C{timeout}, the longest a live server is allowed between two
        replies; 0 looks only once.
    """

    connections: int = 2
    batchMessages: int = 200
    batchBytes: int = 8 * 1024 * 1024
    batchGrowth: int = 100
    windowMessages: int = 1000
    windowBytes: int = 32 * 1024 * 1024
    recordEvery: int = 2000
    recordInterval: float = 1.0
    unitMessages: int = 2000
    unitBytes: int = 64 * 1024 * 1024
    stopTimeout: float = 30.0
    folderNameFallback: bool = True
    maxMessageBytes: int | None = None
    journalQuiet: float = 120.0
