# -*- test-case-name: tests.test_job, tests.test_job_preparation, tests.test_job_messageid, tests.test_imap_appendlimit -*-
"""
Turning what a source read into messages for the destination's pipeline:
per message its flags, its literal kind and its INTERNALDATE argument, and
the messages that cannot go (unreadable, already present, too large, NUL or
8-bit octets a destination without BINARY cannot take) recorded at once
with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Sequence

from imapmig.mail.fidelity import decideFlags, needsBinary
from imapmig.imap.outgoing import OutgoingMessage, appendArguments
from imapmig.job.recording import JournalTicket, OutcomeRecorder, SentMessage, Target
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    withInternalDate,
)
from imapmig.mail.messagenames import namesOfBody
from imapmig.mail.octets import EIGHT_BIT, NUL, UNKNOWN
from imapmig.job.units import WorkUnit
from imapmig.job.presence import PresenceIndex
from imapmig.state import MessageOutcome, withNames


@dataclass
class DestinationTraits:
    """
    What the destination can store, as far as preparing a message goes.

    @ivar binary: it offers BINARY (RFC 3516): literal8 APPENDs.
    @ivar permanentFlags: the PERMANENTFLAGS of the selected mailbox, or
        L{None} when unknown.
    @ivar presence: what the mailbox already holds that no record accounts
        for, or L{None}.
    @ivar flagDecisions: by the source's flags, as decided for these
        traits: the note, and the flag list as an APPEND argument
        (L{appendArguments} without a date), alone and followed by the
        space before a date.
    @ivar sizeLimit: the largest message it accepts and where that limit
        comes from (L{messageSizeLimit}), or L{None}.
    """

    binary: bool
    permanentFlags: frozenset[str] | None
    presence: PresenceIndex | None = None
    sizeLimit: tuple[int, str] | None = None
    flagDecisions: dict[tuple[str, ...], tuple[str | None, bytes, bytes]] = field(
        default_factory=dict
    )


_ReadBody = bytes | bytearray | StreamedBody
"""
A body the source could read.
"""

_newObject = object.__new__

# The facts (imapmig.mail.octets) that make a body need a literal8.
_NEEDS_BINARY = NUL | EIGHT_BIT


def _factsOf(bodies: Sequence[MessageBody]) -> bytes | bytearray:
    """
    What the source's reader found of each body's octets (the facts a
    L{ReadBodies} carries), or L{UNKNOWN} for each where it found none.
    """
    if type(bodies) is ReadBodies and len(bodies.facts) == len(bodies):
        return bodies.facts
    return bytes((UNKNOWN,)) * len(bodies)


def _flagDecision(
    flags: tuple[str, ...], permanentFlags: frozenset[str] | None
) -> tuple[str | None, bytes, bytes]:
    """
    The decision on one set of source flags for a destination
    (L{DestinationTraits.flagDecisions}): the note of the flags dropped,
    and the flag list as an APPEND argument, alone and followed by the
    space before a date.
    """
    decision = decideFlags(flags, permanentFlags)
    note = None
    if decision.dropped:
        note = "; ".join(f"flag {flag!r} dropped: {why}" for flag, why in decision.dropped)
    flagList = appendArguments(decision.kept, None)
    return note, flagList, flagList + b" "


class MessagePreparation:
    """
    A job's preparation of messages for its destination.

    @ivar _recorder: where the messages that cannot go are recorded.
    @ivar _eightBitFails: the job's C{eight_bit} setting is C{fail}: a
        message with 8-bit octets fails against a destination without
        BINARY instead of travelling in a plain literal.
    """

    def __init__(self, recorder: OutcomeRecorder, eightBitFails: bool) -> None:
        self._recorder = recorder
        self._eightBitFails = eightBitFails

    def prepare(
        self,
        unit: WorkUnit,
        target: Target,
        chunk: Sequence[SourceMessage],
        bodies: Sequence[MessageBody],
        destination: DestinationTraits,
    ) -> list[OutgoingMessage]:
        """
        Turn what the source read into messages for the pipeline, deciding
        per message its flags and literal kind, and recording at once the
        messages that cannot go.

        The common messages are made by L{prepareMessages} (one C call for
        a run of them); each other one (its octets or flags not yet
        decided, too large, refused, or any where the destination's
        presence is to be checked) by L{_prepareOne}.
        """
        outgoing: list[OutgoingMessage] = []
        facts = _factsOf(bodies)
        count = min(len(chunk), len(bodies))
        sizeLimit = destination.sizeLimit
        limit = None if sizeLimit is None else sizeLimit[0]
        common = destination.presence is None
        index = 0
        while index < count:
            if common:
                index = prepareMessages(
                    chunk, bodies, facts, index, destination.flagDecisions,
                    destination.binary, limit, target, withInternalDate, outgoing,
                )  # fmt: skip
                if index >= count:
                    break
            message, body = chunk[index], bodies[index]
            self._prepareOne(unit, target, message, body, facts[index], destination, outgoing)
            index += 1
        return outgoing

    def _prepareOne(
        self,
        unit: WorkUnit,
        target: Target,
        message: SourceMessage,
        body: MessageBody,
        found: int,
        destination: DestinationTraits,
        outgoing: list[OutgoingMessage],
    ) -> None:
        """
        Prepare one message (L{prepare}): append it to C{outgoing}, or
        record it at once if it cannot go.
        """
        if found & UNKNOWN or type(body) is not bytes:
            if isinstance(body, UnreadableMessage):
                reason = f"unreadable in the source: {body.reason}"
                self.recordFailure(unit.folder, unit.mailbox, message, reason, target.ticket)
                return
            found = needsBinary(body, found)
        presence = destination.presence
        if presence is not None and self._present(unit, target, message, body, presence):
            return
        size = len(body)
        sizeLimit = destination.sizeLimit
        if sizeLimit is not None and size > sizeLimit[0]:
            self._tooLarge(unit, target, message, body, sizeLimit)
            return
        binary = False
        if found & _NEEDS_BINARY:
            binary = destination.binary
            if not binary and self._refused(unit, target, message, body, bool(found & NUL)):
                return
            # Otherwise 8-bit octets without NUL travel in a plain
            # literal: RFC 3501 literals are CHAR8, every octet but NUL.
        decided = _decided(message.flags, destination)
        outgoing.append(_sentMessage(message, body, size, binary, target, decided))


    def _present(
        self,
        unit: WorkUnit,
        target: Target,
        message: SourceMessage,
        body: _ReadBody,
        presence: PresenceIndex,
    ) -> bool:
        """
        Whether C{body} is a copy the destination mailbox already holds
        that no record accounts for (L{PresenceIndex.claim}): then it is
        recorded as present, under that copy's UID, and not sent.
        """
        claimed = presence.claim(body)
        if claimed is None:
            return False
        present = MessageOutcome(
            unit.folder.key,
            message.key,
            unit.mailbox,
            len(body),
            presence.uidValidity,
            claimed[0],
            alreadyPresent=True,
        )
        self._recorder.add(withNames(present, namesOfBody(body)), target.ticket)
        return True

    def _tooLarge(
        self,
        unit: WorkUnit,
        target: Target,
        message: SourceMessage,
        body: _ReadBody,
        sizeLimit: tuple[int, str],
    ) -> None:
        """
        Record C{body}, larger than the destination accepts, as failed:
        sent, it would be refused (or the connection dropped, after the
        octets had travelled).
        """
        limit, where = sizeLimit
        self.recordFailure(
            unit.folder,
            unit.mailbox,
            message,
            f"{len(body)} octets, larger than the {limit} the destination"
            f" accepts ({where}); not sent",
            target.ticket,
            body,
        )

    def _refused(
        self,
        unit: WorkUnit,
        target: Target,
        message: SourceMessage,
        body: _ReadBody,
        hasNUL: bool,
    ) -> bool:
        """
        Whether C{body}, with NUL or 8-bit octets, cannot go to a
        destination without BINARY: NUL octets never can, 8-bit ones not
        when the job's C{eight_bit} is C{fail}.  A refused message is
        recorded as failed.
        """
        if hasNUL:
            reason = (
                "contains NUL octets, which IMAP carries only in a BINARY"
                " literal8 (RFC 3516); the destination does not offer BINARY"
            )
        elif self._eightBitFails:
            reason = (
                "contains 8-bit octets and the destination does not offer BINARY"
                " (RFC 3516); the job's eight_bit setting is 'fail'"
            )
        else:
            return False
        self.recordFailure(unit.folder, unit.mailbox, message, reason, target.ticket, body)
        return True

    def recordFailure(
        self,
        folder: SourceFolder,
        mailbox: str,
        message: SourceMessage,
        reason: str,
        ticket: JournalTicket | None = None,
        body: MessageBody | None = None,
    ) -> None:
        """
        Record C{message} of C{folder} (for C{mailbox}) as failed with
        C{reason}, under the journal C{ticket} of its unit if it has one,
        with the names in the header of its C{body} if it was read (else
        the job reads them later: L{imapmig.job.naming}).
        """
        outcome = MessageOutcome(folder.key, message.key, mailbox, message.size, failure=reason)
        if body is None or isinstance(body, UnreadableMessage):
            self._recorder.add(outcome, ticket, named=False)
        else:
            self._recorder.add(withNames(outcome, namesOfBody(body)), ticket)

    def withinSizeLimit(
        self,
        folder: SourceFolder,
        mailbox: str,
        pending: list[SourceMessage],
        sizeLimit: tuple[int, str],
    ) -> list[SourceMessage]:
        """
        The messages of C{pending} whose listed size the destination
        accepts; the others are recorded as failed at once, never read nor
        counted against a budget.  (A body found larger than listed, once
        read, is refused by L{prepare}.)
        """
        limit, where = sizeLimit
        if all(message.size <= limit for message in pending):
            return pending
        kept = []
        for message in pending:
            if message.size <= limit:
                kept.append(message)
                continue
            self.recordFailure(
                folder,
                mailbox,
                message,
                f"listed at {message.size} octets, larger than the {limit} the"
                f" destination accepts ({where}); not sent",
            )
        return kept


def _decided(
    flags: tuple[str, ...], destination: DestinationTraits
) -> tuple[str | None, bytes, bytes]:
    """
    The decision on C{flags} for C{destination}, made once per folder:
    few distinct flag sets.
    """
    decided = destination.flagDecisions.get(flags)
    if decided is None:
        decided = destination.flagDecisions[flags] = _flagDecision(
            flags, destination.permanentFlags
        )
    return decided


def _sentMessage(
    message: SourceMessage,
    body: _ReadBody,
    size: int,
    binary: bool,
    target: Target,
    decided: tuple[str | None, bytes, bytes],
    dated: Callable[[bytes, datetime], bytes] = withInternalDate,
) -> SentMessage:
    """
    The L{SentMessage} of C{message}, its C{body} of C{size} octets, with
    its flags C{decided} (and its date by C{dated}: L{withInternalDate}).

    SentMessage(...) with its slots set here, as its __init__ sets them:
    calling a class costs Python 3.11 several times what setting nine
    slots does (tests.test_job_preparation checks the two agree on every
    slot).
    """
    note, flagList, beforeDate = decided
    internalDate = message.internalDate
    sent: SentMessage = _newObject(SentMessage)
    sent.body = body
    sent.arguments = (
        flagList if internalDate is None else dated(beforeDate, internalDate)
    )
    sent.origin = sent.source = message
    sent.mailbox = b""
    sent.binary = binary
    sent.target = target
    sent.note = note
    sent.converted = 1 if size != message.size else 0
    return sent


def prepareMessagesPython(
    chunk: Sequence[SourceMessage],
    bodies: Sequence[MessageBody],
    facts: bytes | bytearray,
    start: int,
    decisions: dict[tuple[str, ...], tuple[str | None, bytes, bytes]],
    binary: bool,
    sizeLimit: int | None,
    target: Target,
    dated: Callable[[bytes, datetime], bytes],
    out: list[OutgoingMessage],
) -> int:
    """
    Append to C{out} the L{SentMessage} of each common message of
    C{chunk} from C{start} on (a L{SourceMessage} whose body is C{bytes}
    with its C{facts} found, within C{sizeLimit}, needing no literal8 or
    going to a destination with C{binary}, its flags in C{decisions}),
    up to the first other one; return that one's index, or the end of
    C{chunk} (or of C{bodies} or C{facts}, if shorter).  C{dated} is
    L{withInternalDate}.

    The reference and the fallback of the C extension's
    L{prepareMessages} (imapmig/job/_sent.c), which takes no bytecode a
    message.
    """
    end = min(len(chunk), len(bodies), len(facts))
    index = start
    while index < end:
        message = chunk[index]
        body = bodies[index]
        found = facts[index]
        if type(message) is not SourceMessage or type(body) is not bytes or found & UNKNOWN:
            return index
        size = len(body)
        if sizeLimit is not None and size > sizeLimit:
            return index
        needs = bool(found & _NEEDS_BINARY)
        if needs and not binary:
            return index
        decided = decisions.get(message.flags)
        if decided is None:
            return index
        out.append(_sentMessage(message, body, size, needs, target, decided, dated))
        index += 1
    return index


try:
    # Bound to SentMessage and SourceMessage by imapmig.job.recording.
    from imapmig.job._sent import prepareMessages as prepareMessages
except ImportError:  # pragma: no cover (the extension is built in the checkout)
    prepareMessages = prepareMessagesPython
