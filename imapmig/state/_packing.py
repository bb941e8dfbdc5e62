# -*- test-case-name: tests.test_state_journal -*-
"""
The compact binary form of a journal entry's messages: one BLOB per batch,
so that journaling a batch costs one row, not one per message.

Layout, little-endian::

    u8   format (1)
    u32  number of distinct folder keys F
    F x  (u32 length, UTF-8 folder key)
    then, per message, in order:
    u32  index of its folder key among the F
    u32  length of its message key
    i64  size
    u8   length of its head
         the UTF-8 message key, then the head

A batch usually comes from one folder, so each folder key is written once.

Format 2, for a L{FolderKeys} (one folder's keys, no sizes or heads),
packed in one step rather than per message::

    u8   format (2)
    u32  length of the UTF-8 folder key, then the folder key
         the UTF-8 message keys, each followed by a NUL (no source's key
         holds a NUL: file names cannot, IMAP keys are digits)
"""

from __future__ import annotations

import struct
from typing import Sequence

from imapmig.state.outcomes import FolderKeys, JournalMessage

_FORMAT = 1
_HEADER = struct.Struct("<BI")
_LENGTH = struct.Struct("<I")
_MESSAGE = struct.Struct("<IIqB")


def packMessages(messages: Sequence[JournalMessage]) -> bytes:
    """
    The packed form of C{messages}.

    @raise ValueError: a key is not valid Unicode (a lone surrogate), a size
        is beyond a signed 64-bit integer, or a head is longer than 255
        octets; the message says which.
    """
    if isinstance(messages, FolderKeys):
        return _packFolderKeys(messages)
    folders: dict[str, int] = {}
    parts: list[bytes] = []
    pack = _MESSAGE.pack
    try:
        for message in messages:
            folder = folders.setdefault(message.folderKey, len(folders))
            key = message.messageKey.encode("utf-8")
            head = message.head
            if len(head) > 255:
                raise ValueError(f"a journal head is at most 255 octets, not {len(head)}")
            parts.append(pack(folder, len(key), message.size, len(head)))
            parts.append(key)
            parts.append(head)
        header = [_HEADER.pack(_FORMAT, len(folders))]
        for name in folders:
            encoded = name.encode("utf-8")
            header.append(_LENGTH.pack(len(encoded)))
            header.append(encoded)
    except UnicodeEncodeError as e:
        raise ValueError(str(e)) from None
    except struct.error:
        raise ValueError(f"a size is out of range in {_sizes(messages)}") from None
    return b"".join(header + parts)


_KEYS_FORMAT = 2
_KEYS_HEADER = struct.Struct("<BI")


def _packFolderKeys(messages: FolderKeys) -> bytes:
    """
    The packed form (format 2) of one folder's keys.

    @raise ValueError: a key holds a NUL or is not valid Unicode.
    """
    try:
        folder = messages.folderKey.encode("utf-8")
        keys = "\0".join(messages.keys).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(str(e)) from None
    if keys.count(b"\0") != len(messages.keys) - 1:
        raise ValueError("a message key holds a NUL")
    if not messages.keys:
        return _KEYS_HEADER.pack(_KEYS_FORMAT, len(folder)) + folder
    return _KEYS_HEADER.pack(_KEYS_FORMAT, len(folder)) + folder + keys + b"\0"


def _unpackFolderKeys(blob: bytes) -> tuple[JournalMessage, ...]:
    """
    The messages of a format 2 C{blob}.
    """
    _, length = _KEYS_HEADER.unpack_from(blob, 0)
    start = _KEYS_HEADER.size
    folder = _take(blob, start, length).decode("utf-8")
    rest = blob[start + length :]
    if rest and not rest.endswith(b"\0"):
        raise ValueError("truncated")
    return tuple(
        JournalMessage(folder, key.decode("utf-8"), 0, b"") for key in rest.split(b"\0")[:-1]
    )


def _sizes(messages: Sequence[JournalMessage]) -> str:
    """
    The first size of C{messages} a signed 64-bit integer cannot hold,
    for an error message.
    """
    for message in messages:
        if not -(2**63) <= message.size < 2**63:
            return str(message.size)
    return "the batch"


def unpackMessages(blob: bytes) -> tuple[JournalMessage, ...]:
    """
    The messages C{blob}, made by L{packMessages}, holds.

    @raise ValueError: C{blob} is not of that form.
    """
    try:
        form, folderCount = _HEADER.unpack_from(blob, 0)
        if form == _KEYS_FORMAT:
            return _unpackFolderKeys(blob)
        if form != _FORMAT:
            raise ValueError(f"unknown journal format {form}")
        offset = _HEADER.size
        folders = []
        for _ in range(folderCount):
            (length,) = _LENGTH.unpack_from(blob, offset)
            offset += _LENGTH.size
            folders.append(_take(blob, offset, length).decode("utf-8"))
            offset += length
        messages = []
        while offset < len(blob):
            folder, keyLength, size, headLength = _MESSAGE.unpack_from(blob, offset)
            offset += _MESSAGE.size
            key = _take(blob, offset, keyLength).decode("utf-8")
            offset += keyLength
            head = _take(blob, offset, headLength)
            offset += headLength
            messages.append(JournalMessage(folders[folder], key, size, head))
    except (struct.error, ValueError, IndexError) as e:
        raise ValueError(f"malformed journal entry: {e}") from None
    return tuple(messages)


def _take(blob: bytes, offset: int, length: int) -> bytes:
    """
    The C{length} octets of C{blob} at C{offset}.

    @raise ValueError: C{blob} ends before.
    """
    if offset + length > len(blob):
        raise ValueError("truncated")
    return blob[offset : offset + length]
