# -*- test-case-name: tests.test_presence -*-
"""
Messages a destination mailbox already holds that no record of ours
accounts for: copied by another tool, by hand, or by a run whose outcome
was lost.  They are indexed by identity (L{imapmig.mail.fidelity}) so that the
same message from the source is recorded as already present instead of
being appended twice.

The index is built from one pipelined C{UID FETCH} of each message's size,
Message-ID and first header octets: a few hundred octets per message, never
a body.
"""

from __future__ import annotations

from typing import Collection

from imapmig.mail.fidelity import (
    FINGERPRINT_OCTETS,
    MessageIdentity,
    fingerprintOf,
    identityOf,
    messageIdOf,
)
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import StreamedBody
from imapmig.mail.messagenames import recordedMessageId

# What identifies a message, per the job's identity setting.
FINGERPRINT = "fingerprint"
MESSAGE_ID = "message-id"
OFF = "off"

_ITEMS = (
    b"UID RFC822.SIZE BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)] BODY.PEEK[]<0.%d>"
    % FINGERPRINT_OCTETS
)


def _key(identity: MessageIdentity, mode: str) -> MessageIdentity | None:
    """
    The part of C{identity} the mode compares; L{None} when the message
    cannot be recognised that way (no Message-ID in C{message-id} mode).
    """
    if mode == MESSAGE_ID:
        if not identity.messageId:
            return None
        return MessageIdentity(identity.messageId, b"", 0)
    return identity


class PresenceIndex:
    """
    The unaccounted messages of one destination mailbox, by identity.  Each
    destination message answers for one source message at most: two
    identical source messages need two copies.

    @ivar mailbox: the destination mailbox.
    @ivar uidValidity: its UIDVALIDITY.
    """

    def __init__(self, mailbox: str, mode: str, uidValidity: int | None) -> None:
        self.mailbox = mailbox
        self.uidValidity = uidValidity
        self._mode = mode
        self._uids: dict[MessageIdentity, list[int]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, identity: MessageIdentity, uid: int) -> None:
        """
        Note a destination message.
        """
        key = _key(identity, self._mode)
        if key is not None:
            self._uids.setdefault(key, []).append(uid)
            self._count += 1

    def take(self, body: bytes | bytearray | StreamedBody) -> int | None:
        """
        If the mailbox holds a message with the identity of C{body} (CRLF
        line endings) not yet claimed, claim it.

        @return: its UID, or L{None}.
        """
        claimed = self.claim(body)
        return None if claimed is None else claimed[0]

    def claim(self, body: bytes | bytearray | StreamedBody) -> tuple[int, str | None] | None:
        """
        As L{take}, with the Message-ID of C{body} read on the way (see
        L{recordedMessageId}).

        @return: the UID and the Message-ID, or L{None}.
        """
        if not self._count:
            return None
        identity = identityOf(body)
        key = _key(identity, self._mode)
        if key is None:
            return None
        uids = self._uids.get(key)
        if not uids:
            return None
        self._count -= 1
        return uids.pop(0), recordedMessageId(identity.messageId)


def holdsOthers(
    exists: int, uidValidity: int | None, accounted: Collection[tuple[int | None, int]]
) -> bool:
    """
    Whether a mailbox holding C{exists} messages under C{uidValidity} may
    hold some that our records do not place there.

    @param accounted: C{(uidValidity, uid)} of the messages our records
        place in the mailbox.
    """
    return exists > len(_placed(accounted, uidValidity))


def _placed(accounted: Collection[tuple[int | None, int]], uidValidity: int | None) -> set[int]:
    """
    The UIDs our records place in a mailbox under C{uidValidity}.
    """
    return {uid for validity, uid in accounted if validity == uidValidity}


async def indexMailbox(
    session: IMAPSession,
    mailbox: str,
    mode: str,
    accounted: Collection[tuple[int | None, int]],
) -> PresenceIndex | None:
    """
    Index what C{mailbox} holds beyond the messages our records place in
    it.

    @param session: a destination session, between pipelines; the mailbox
        is left examined.
    @param accounted: C{(uidValidity, uid)} of the messages our records
        place in the mailbox (left out of the index when the mailbox still
        has that UIDVALIDITY).
    @return: the index, or L{None} when the mailbox holds nothing else.
    """
    examined = await session.examine(mailbox)
    known = _placed(accounted, examined.uidValidity)
    if examined.exists <= len(known):
        # It holds nothing our records do not place there.
        return None
    index = PresenceIndex(mailbox, mode, examined.uidValidity)
    for item in await session.fetchMetadata(b"1:*", _ITEMS):
        uid = item.uid
        if uid is None or uid in known or item.size is None:
            continue
        header = item.sections.get(b"BODY[HEADER.FIELDS (MESSAGE-ID)]") or b""
        start = item.sections.get(b"BODY[]<0>") or b""
        index.add(MessageIdentity(messageIdOf(header), fingerprintOf(start), item.size), uid)
    return index if len(index) else None
