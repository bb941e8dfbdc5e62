# -*- test-case-name: tests.test_imap_pipeline -*-
"""
The APPENDUID response code (RFC 4315): the UIDs a server gave the
messages of one APPEND, the record of what arrived.

Split from imapmig/imap/pipeline.py: parsing a reply text is apart from
sending.
"""

from __future__ import annotations


# The largest UID or UIDVALIDITY (RFC 3501 nz-number: a 32-bit value).
_MAX_UID = 2**32 - 1


def _uid(text: bytes) -> int:
    """
    A UID or UIDVALIDITY (digits only, 1 to 2**32 - 1).

    @raise ValueError: it is not one.
    """
    if not text.isdigit() or len(text) > 10:
        raise ValueError(text)
    value = int(text)
    if not 0 < value <= _MAX_UID:
        raise ValueError(text)
    return value


def parseUIDSet(text: bytes, limit: int) -> list[int]:
    """
    Expand an IMAP UID set such as C{b"4:6,9"} into C{[4, 5, 6, 9]}.

    @param limit: the most UIDs the set may hold: a longer one (a hostile
        or broken server's C{1:4294967295}) is refused before anything is
        expanded.
    @raise ValueError: C{text} is not a UID set of at most C{limit} UIDs.
    """
    ranges: list[tuple[int, int]] = []
    count = 0
    for part in text.split(b","):
        low, sep, high = part.partition(b":")
        first = _uid(low)
        last = _uid(high) if sep else first
        if first > last:
            first, last = last, first
        count += last - first + 1
        if count > limit:
            raise ValueError(f"more than {limit} UIDs")
        ranges.append((first, last))
    uids: list[int] = []
    for first, last in ranges:
        uids.extend(range(first, last + 1))
    return uids


def parseAppendUID(text: bytes, messages: int) -> tuple[int, list[int]] | None:
    """
    The UIDVALIDITY and UIDs of an C{OK [APPENDUID v uids] ...} text (the
    part after C{OK}) answering an APPEND of C{messages} messages, or
    L{None} if it carries none, is malformed, or names more UIDs than
    that.
    """
    if not text.startswith(b"[APPENDUID "):
        return None
    end = text.find(b"]")
    parts = text[11:end].split()
    if end == -1 or len(parts) != 2:
        return None
    try:
        return _uid(parts[0]), parseUIDSet(parts[1], messages)
    except ValueError:
        return None
