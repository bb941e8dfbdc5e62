# -*- test-case-name: tests.test_fidelity -*-
"""
What it takes to carry a message over unchanged, decided per message
without I/O: which flags the destination can keep, whether the body needs a
C{literal8}, and how to recognise a message the destination already holds.

Everything here runs on the hot path: it looks at a message's bytes only
with C-speed searches (C{in}, C{find}, C{isascii}), and not at all where
the source's reader found what it needs (L{imapmig.mail.octets}); it never
decodes or copies a whole body.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Collection

from attrs import frozen

from imapmig.mail.message import StreamedBody
from imapmig.mail.octets import EIGHT_BIT, NUL, UNKNOWN

# RFC 3501 system flags a client may set (\Recent is the server's).
SYSTEM_FLAGS = frozenset({"\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"})

# Octets an RFC 3501 atom may not contain, besides controls and space
# ("]" is excluded too: flag-keyword is an atom, and "]" would end a
# response code).
_ATOM_SPECIALS = frozenset(b'(){%*"\\]')


def isValidKeyword(keyword: str) -> bool:
    """
    Whether C{keyword} can be sent as an IMAP flag keyword: a non-empty
    ASCII atom (no space, control, or any of C{( ) { % * " \\ ]}).

    A server answers C{BAD} to a command with an invalid flag, and under
    LITERAL+ it has not read the literal then: such keywords must never
    reach the wire.
    """
    if not keyword or not keyword.isascii():
        return False
    for octet in keyword.encode("ascii"):
        if octet <= 0x20 or octet == 0x7F or octet in _ATOM_SPECIALS:
            return False
    return True


@frozen
class FlagDecision:
    """
    The flags to send with a message, and those left behind with why.

    @ivar kept: the flags for the APPEND, in the source's order.
    @ivar dropped: C{(flag, reason)} for each flag not sent.
    """

    kept: tuple[str, ...]
    dropped: tuple[tuple[str, str], ...]


def decideFlags(
    flags: tuple[str, ...], permanentFlags: Collection[str] | None
) -> FlagDecision:
    """
    Choose what of C{flags} the destination can keep.

    System flags always go (C{\\Recent} never: only the server sets it).
    Keywords go where the destination's PERMANENTFLAGS list them or allow
    new ones (C{\\*}); a keyword that is not a valid atom never goes.

    @param permanentFlags: the PERMANENTFLAGS of the destination mailbox,
        as sent (C{"\\*"} included), or L{None} when unknown (then every
        valid keyword is sent, and the server decides).
    """
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    anyKeyword = permanentFlags is None or "\\*" in permanentFlags
    allowed = {f.lower() for f in permanentFlags} if permanentFlags is not None else set()
    for flag in flags:
        sent, why = _flagVerdict(flag, anyKeyword, allowed)
        if sent is None:
            dropped.append((flag, why))
        else:
            kept.append(sent)
    if not dropped:
        return FlagDecision(flags if len(kept) == len(flags) else tuple(kept), ())
    return FlagDecision(tuple(kept), tuple(dropped))


def _flagVerdict(flag: str, anyKeyword: bool, allowed: Collection[str]) -> tuple[str | None, str]:
    """
    What of one source flag goes (L{decideFlags}): the flag as sent, or
    L{None} and why it does not.

    @param anyKeyword: the destination takes any keyword.
    @param allowed: the keywords it takes, in lower case.
    """
    if flag.startswith("\\"):
        canonical = _canonicalSystemFlag(flag)
        if canonical is None:
            return None, "not a system flag a client can set"
        return canonical, ""
    if not isValidKeyword(flag):
        return None, "not a valid IMAP keyword"
    if anyKeyword or flag.lower() in allowed:
        return flag, ""
    return None, "the destination does not allow this keyword (PERMANENTFLAGS)"


_SYSTEM_BY_LOWER = {flag.lower(): flag for flag in SYSTEM_FLAGS}


def _canonicalSystemFlag(flag: str) -> str | None:
    if flag in SYSTEM_FLAGS:
        return flag
    return _SYSTEM_BY_LOWER.get(flag.lower())


# Literal kinds.


def needsBinary(body: bytes | bytearray | StreamedBody, facts: int = UNKNOWN) -> int:
    """
    What of a body needs a C{literal8}: whether it holds NUL octets
    (L{NUL}) and octets outside 7-bit ASCII (L{EIGHT_BIT}).

    A plain IMAP literal carries any octet but NUL (RFC 3501 CHAR8); a
    C{literal8} (RFC 3516 BINARY) carries everything.

    @param facts: what its source's reader found of its octets
        (L{imapmig.mail.octets.crlfAndFacts}, carried in a
        L{imapmig.mail.message.ReadBodies}); with L{UNKNOWN} (none found),
        the octets are looked at here.
    @return: those facts of it, L{NUL} and L{EIGHT_BIT} or'ed (0 for a
        body a plain literal carries as well as a C{literal8}).
    """
    if not facts & UNKNOWN:
        return facts & _NEEDS_BINARY
    if isinstance(body, StreamedBody):
        return (NUL if body.hasNUL else 0) | (0 if body.isASCII else EIGHT_BIT)
    # 0, not b"\x00": an integer needle is a plain memchr (C{b"\x00" in
    # body} first tries the needle as an integer, raising and clearing a
    # TypeError inside CPython).
    return (NUL if 0 in body else 0) | (0 if body.isascii() else EIGHT_BIT)


_NEEDS_BINARY = NUL | EIGHT_BIT


# Recognising messages already in the destination.

# The fingerprint covers at most this many octets of the header.
FINGERPRINT_OCTETS = 1024

# The header is looked for in at most this many octets.
_HEADER_SEARCH = 256 * 1024


@frozen
class MessageIdentity:
    """
    What recognises a message in a mailbox without reading it whole: its
    Message-ID, a digest of the start of its header, and its size.  Two
    different messages with the same Message-ID (it happens) differ in the
    other two; two byte-identical messages have the same identity, and are
    counted, not merged.

    @ivar messageId: the Message-ID's value, without surrounding white
        space, or C{b""} when there is none.
    @ivar fingerprint: SHA-256 of the header's first
        L{FINGERPRINT_OCTETS} octets (the whole header if shorter).
    @ivar size: the message's size in octets (CRLF line endings).
    """

    messageId: bytes
    fingerprint: bytes
    size: int


def headerEnd(start: bytes) -> int:
    """
    Where the header section ends in C{start} (the first octets of a CRLF
    message): the offset of its blank line, or C{len(start)} when there is
    none in it.
    """
    if start.startswith(b"\r\n"):
        return 0
    end = start.find(b"\r\n\r\n")
    return len(start) if end < 0 else end + 2


def fingerprintOf(start: bytes) -> bytes:
    """
    The fingerprint of a message from its first octets (at least
    L{FINGERPRINT_OCTETS} of them, or the whole message).
    """
    head = start[:FINGERPRINT_OCTETS]
    return hashlib.sha256(head[: headerEnd(head)]).digest()


def messageIdOf(header: bytes) -> bytes:
    """
    The Message-ID of a CRLF header section (or a
    C{BODY[HEADER.FIELDS (MESSAGE-ID)]} reply), unfolded and stripped;
    C{b""} when there is none.
    """
    lowered = header.lower()
    if lowered.startswith(b"message-id:"):
        start = 0
    else:
        start = lowered.find(b"\r\nmessage-id:")
        if start < 0:
            return b""
        start += 2
    valueStart = start + len(b"message-id:")
    end = valueStart
    while True:
        end = header.find(b"\r\n", end)
        if end < 0:
            end = len(header)
            break
        if header[end + 2 : end + 3] in (b" ", b"\t"):
            end += 2
            continue
        break
    value = header[valueStart:end].replace(b"\r\n", b"")
    return b" ".join(value.split())


def identityOf(body: bytes | bytearray | StreamedBody) -> MessageIdentity:
    """
    The identity of a message about to be sent (CRLF line endings).
    """
    if isinstance(body, StreamedBody):
        start = body.head(_HEADER_SEARCH)
    else:
        start = bytes(body[:_HEADER_SEARCH])
    header = start[: headerEnd(start)]
    return MessageIdentity(messageIdOf(header), fingerprintOf(start), len(body))


JOURNAL_HEAD_OCTETS = 1024
"""
How many first octets of a message the in-flight journal digests: enough
to tell apart messages of the same size, few enough to fetch back cheaply
(C{BODY.PEEK[]<0.1024>}) when reconciling.
"""


def journalHead(start: bytes | bytearray | StreamedBody) -> bytes:
    """
    The journal's digest (4 octets, a CRC-32) of a message's first
    L{JOURNAL_HEAD_OCTETS} octets, as sent (CRLF line endings), or as a
    server returns them with C{BODY[]<0>}.  A checksum, not a secure
    hash: it only tells apart messages of the same size in one mailbox,
    at well under a microsecond per message on the hot path.
    """
    if isinstance(start, StreamedBody):
        return zlib.crc32(start.head(JOURNAL_HEAD_OCTETS)).to_bytes(4, "big")
    # A slice of at most a kilobyte copies less than a memoryview costs.
    return zlib.crc32(start[:JOURNAL_HEAD_OCTETS]).to_bytes(4, "big")
