# -*- test-case-name: tests.test_imap_pipeline -*-
"""
What the APPEND pipeline (L{imapmig.imap.pipeline}) is given and what it
reports: the messages (L{OutgoingMessage}), how it sends them
(L{PipelineSettings}, L{LiteralMode}), until when it may send
(L{SendDeadline}) and the receiver of their outcomes (L{AppendOutcomes}).

Split from imapmig/imap/pipeline.py, so that the job's preparation and
recording name the values without the machinery that sends them.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Callable, Collection, Protocol, Sequence

from attrs import frozen

from imapmig.errors import LeaseLost
from imapmig.mail.message import StreamedBody, formatInternalDate


LITERAL_MINUS_LIMIT = 4096
"""
The largest literal LITERAL- lets go without waiting for the server's
continuation (RFC 7888).
"""


class LiteralMode(Enum):
    """
    How message literals are sent.
    """

    PLUS = "LITERAL+"
    """Non-synchronizing literals of any size."""

    MINUS = "LITERAL-"
    """Non-synchronizing literals up to 4096 octets, synchronizing above."""

    SYNC = "synchronizing"
    """Every literal waits for the server's continuation."""


def chooseLiteralMode(capabilities: Collection[bytes]) -> LiteralMode:
    """
    The best literal mode the server's capabilities allow.

    @param capabilities: capability names, upper-case, e.g. C{b"LITERAL+"}.
    """
    if b"LITERAL+" in capabilities:
        return LiteralMode.PLUS
    if b"LITERAL-" in capabilities:
        return LiteralMode.MINUS
    return LiteralMode.SYNC


@frozen
class PipelineSettings:
    """
    How one connection's pipeline sends.

    @ivar literalMode: see L{LiteralMode}.
    @ivar batchMessages: messages per APPEND command; 1 without MULTIAPPEND.
    @ivar batchBytes: octets per APPEND command (a single larger message
        still goes alone).
    @ivar windowMessages: messages sent and awaiting their reply, at most.
    @ivar windowBytes: octets sent and awaiting their reply, at most (a
        single larger message still goes, alone in flight).
    @ivar batchGrowth: into a mailbox of more than C{batchGrowth *
        batchMessages} messages, a batch carries one message per
        C{batchGrowth} it holds (L{batchFor}); 0: always C{batchMessages}.
    """

    literalMode: LiteralMode
    batchMessages: int
    batchBytes: int
    windowMessages: int
    windowBytes: int
    batchGrowth: int = 0

    def batchFor(self, mailboxMessages: int) -> int:
        """
        The messages of a batch into a mailbox holding C{mailboxMessages}.

        A server whose cost a command grows with the mailbox (Dovecot's
        Maildir store: about 0.15 us of its CPU per message the mailbox
        holds, for every APPEND command; C{bench/results/bigaccount.md},
        fourth round) would spend more a message the fuller the mailbox
        with batches of one size; a batch that grows with the mailbox
        keeps that cost a message flat.  Never fewer than
        C{batchMessages}, never more than half the window (so that two
        commands are in flight); C{batchBytes} still bounds each command's
        octets, and without MULTIAPPEND every batch is one message.
        """
        batchMessages = self.batchMessages
        if batchMessages <= 1 or self.batchGrowth <= 0:
            return batchMessages
        grown = min(mailboxMessages // self.batchGrowth, self.windowMessages // 2)
        return grown if grown > batchMessages else batchMessages

    @classmethod
    def forServer(
        cls,
        capabilities: Collection[bytes],
        batchMessages: int,
        batchBytes: int,
        windowMessages: int,
        windowBytes: int,
        batchGrowth: int = 0,
    ) -> PipelineSettings:
        """
        Settings for a server with C{capabilities}: MULTIAPPEND batches only
        where offered, the best literal mode it allows.
        """
        if b"MULTIAPPEND" not in capabilities:
            batchMessages = 1
        return cls(
            literalMode=chooseLiteralMode(capabilities),
            batchMessages=max(1, batchMessages),
            batchBytes=batchBytes,
            windowMessages=max(1, windowMessages),
            windowBytes=windowBytes,
            batchGrowth=max(0, batchGrowth),
        )


class SendDeadline:
    """
    The time past which nothing more may be sent: a fleet's daemon's send
    deadline (docs/fleet-design.md "Sending stops before the lease can
    end: the timing rule"), moved by its owner
    (L{imapmig.schedule.member.FleetMember}) with each heartbeat answered.
    A pipeline given one compares it with its clock before each write, so
    that a reactor waking late from a stall does not send first and learn
    of the deadline's timer after; the job's other writes that change the
    destination (CREATE, SUBSCRIBE, UID STORE) call L{check} before each
    batch of them is written.

    @ivar seconds: the clock the deadline is on (the daemon's monotonic
        clock).
    @ivar at: the deadline, in C{seconds}'s seconds; C{-inf} while the
        daemon holds no lease (nothing may be sent).
    """

    __slots__ = ("seconds", "at")

    def __init__(self, seconds: Callable[[], float], at: float = float("-inf")) -> None:
        self.seconds = seconds
        self.at = at

    def passed(self) -> bool:
        """
        Whether the deadline has come.
        """
        return self.seconds() >= self.at

    def check(self, what: str) -> None:
        """
        Raise L{LeaseLost} if the deadline has come: C{what} (the
        commands about to be written, as the message names them) must
        not be written.
        """
        if self.seconds() >= self.at:
            raise LeaseLost(f"the send deadline passed before {what}")


class OutgoingMessage:
    """
    One message ready for the wire.

    @ivar body: the message, CRLF line endings, sent as one literal (a
        L{StreamedBody} for a very large message, read as it is sent).
    @ivar arguments: what precedes the literal in the APPEND command, with
        a leading space: C{b' (\\Seen) "01-Jan-2020 10:00:00 +0000"'}, or
        C{b""}.
    @ivar origin: whatever the caller needs to record the outcome (the
        pipeline never looks at it).
    @ivar mailbox: the destination mailbox, encoded and quoted; stamped by
        L{AppendPipeline.enqueue}.
    @ivar binary: send the body as a C{literal8} (C{~{N}}, RFC 3516), for
        content a plain literal cannot carry (NUL octets); only where the
        server offers BINARY.
    """

    __slots__ = ("body", "arguments", "origin", "mailbox", "binary")

    def __init__(
        self,
        body: bytes | bytearray | StreamedBody,
        arguments: bytes,
        origin: object,
        binary: bool = False,
    ) -> None:
        self.body = body
        self.arguments = arguments
        self.origin = origin
        self.mailbox = b""
        self.binary = binary


_flagArguments: dict[tuple[str, ...], bytes] = {}


def appendArguments(flags: tuple[str, ...], internalDate: datetime | None) -> bytes:
    """
    The optional APPEND arguments for a message: its flag list and its
    INTERNALDATE, each preceded by a space.  Flag lists are cached: a
    mailbox has few distinct ones.
    """
    encoded = _flagArguments.get(flags)
    if encoded is None:
        encoded = b" (" + " ".join(flags).encode("ascii") + b")" if flags else b""
        _flagArguments[flags] = encoded
    if internalDate is None:
        return encoded
    return encoded + b" " + formatInternalDate(internalDate)


class AppendOutcomes(Protocol):
    """
    Receives the outcome of every message the pipeline sent.
    """

    def messagesAppended(
        self,
        messages: Sequence[OutgoingMessage],
        uidValidity: int | None,
        uids: Sequence[int] | None,
    ) -> None:
        """
        The server stored C{messages}, the messages of one command, in
        order (one call per tagged C{OK}); C{uidValidity} and C{uids} (one
        per message) come from C{APPENDUID} where the server has UIDPLUS,
        else they are L{None}.
        """

    def messageRefused(self, message: OutgoingMessage, reason: str) -> None:
        """
        The server refused C{message} alone; C{reason} is its reply.
        """
