# -*- test-case-name: tests.test_sources_mbox -*-
"""
What the header of an mbox message tells a listing: its flags (C{Status},
C{X-Status}, C{X-Mozilla-Status}, C{X-Keywords}, C{X-Mozilla-Keys}) and
its C{Content-Length} (taken out of the mbox source's module, which grew
too big to read).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["FLAG_FIELDS", "contentLength", "fieldValues", "flagsOf"]


# Header fields carrying flags, each looked for at the start of a line
# (the header is searched lower-cased, with an LF prepended).
_STATUS = b"\nstatus:"
_X_STATUS = b"\nx-status:"
_X_KEYWORDS = b"\nx-keywords:"
_X_MOZILLA_STATUS = b"\nx-mozilla-status:"
_X_MOZILLA_KEYS = b"\nx-mozilla-keys:"
FLAG_FIELDS = (_STATUS, _X_STATUS, _X_KEYWORDS, _X_MOZILLA_STATUS, _X_MOZILLA_KEYS)
_CONTENT_LENGTH = b"\ncontent-length:"

# System flags in the order they are given (that of the Maildir letters
# D F R S T).
_FLAG_ORDER = ("\\Draft", "\\Flagged", "\\Answered", "\\Seen", "\\Deleted")
_STATUS_LETTERS = ((b"R", "\\Seen"),)
_X_STATUS_LETTERS = (
    (b"A", "\\Answered"),
    (b"F", "\\Flagged"),
    (b"T", "\\Draft"),
    (b"D", "\\Deleted"),
)
_MOZILLA_BITS = ((0x1, "\\Seen"), (0x2, "\\Answered"), (0x4, "\\Flagged"), (0x8, "\\Deleted"))
_MOZILLA_FORWARDED = 0x1000

# The octets an IMAP atom may hold (RFC 3501: any CHAR except
# atom-specials), for keywords.
_ATOM_OCTETS = bytes(c for c in range(0x21, 0x7F) if c not in b'(){%*"\\]')


def fieldValues(header: bytes, lowered: bytes, name: bytes) -> list[bytes]:
    """
    The values of every field called C{name} in a header, unfolded lines
    included, without the line end.

    @param header: the header section with an LF prepended.
    @param lowered: C{header.lower()}.
    @param name: the field's name, lower-case, with the LF before it and
        the colon after it.
    """
    values = []
    at = lowered.find(name)
    while at >= 0:
        start = at + len(name)
        end = _fieldEnd(header, start)
        values.append(header[start:end])
        at = lowered.find(name, end)
    return values


def _fieldEnd(header: bytes, start: int) -> int:
    """
    Where the field whose value starts at C{start} ends: at the line end
    before the next line that is not a continuation (starting with a space
    or a tab), or at the end of the header.
    """
    end = header.find(b"\n", start)
    while end >= 0 and header[end + 1 : end + 2] in (b" ", b"\t"):
        end = header.find(b"\n", end + 1)
    return len(header) if end < 0 else end


def _keywords(values: Sequence[bytes]) -> list[str]:
    """
    The valid IMAP keywords in C{X-Keywords}-like values, separated by
    commas or white space.
    """
    keywords = []
    for value in values:
        for word in value.replace(b",", b" ").split():
            if not word.translate(None, _ATOM_OCTETS):
                keywords.append(word.decode("ascii"))
    return keywords


def flagsOf(fields: tuple[tuple[bytes, ...], ...]) -> tuple[str, ...]:
    """
    The IMAP flags of the values of the fields in L{FLAG_FIELDS}, system
    flags first in a fixed order, then keywords in the order found, each
    once (keywords compared case-insensitively, as IMAP does).
    """
    status, xStatus, xKeywords, mozillaStatus, mozillaKeys = fields
    system = _letterFlags(status, _STATUS_LETTERS) | _letterFlags(xStatus, _X_STATUS_LETTERS)
    bits = _mozillaBits(mozillaStatus)
    system.update(flag for bit, flag in _MOZILLA_BITS if bits & bit)
    keywords = ["$Forwarded"] if bits & _MOZILLA_FORWARDED else []
    keywords += _keywords(xKeywords) + _keywords(mozillaKeys)
    return tuple(flag for flag in _FLAG_ORDER if flag in system) + _firstOfEach(keywords)


def _letterFlags(values: Sequence[bytes], letters: Sequence[tuple[bytes, str]]) -> set[str]:
    """
    The flags whose letters the first of C{values} (if any) holds.

    @param letters: letter and flag, per flag.
    """
    return {flag for value in values[:1] for letter, flag in letters if letter in value}


def _mozillaBits(values: Sequence[bytes]) -> int:
    """
    The bits of the first C{X-Mozilla-Status} value (hexadecimal); none
    without one, or when it is no number.
    """
    try:
        return int(values[0].strip(), 16) if values else 0
    except ValueError:
        return 0


def _firstOfEach(keywords: list[str]) -> tuple[str, ...]:
    """
    C{keywords} without repetitions (compared case-insensitively), each
    where it first comes.
    """
    seen: set[str] = set()
    unique = []
    for keyword in keywords:
        folded = keyword.lower()
        if folded not in seen:
            seen.add(folded)
            unique.append(keyword)
    return tuple(unique)


def contentLength(header: bytes, lowered: bytes) -> int | None:
    """
    The value of the header's first C{Content-Length} field, if it is a
    number.
    """
    values = fieldValues(header, lowered, _CONTENT_LENGTH)
    if not values:
        return None
    value = values[0].strip()
    if not (value.isdigit() and len(value) < 19):
        return None
    return int(value)
