# -*- test-case-name: tests.test_messagenames -*-
"""
What a message's owner knows it by: its Message-ID, Date, From and
Subject, read from its header for the messages imapmig did not migrate
(failed, refused, too large, unreadable in part), so that each can be
named on the status page, in the manifests and in C{imapmig report}.

A module of its own rather than part of L{imapmig.mail.fidelity} (which reads
what recognises a message, as octets, on the hot path of presence checks)
or L{imapmig.job.presence}: this decodes text (RFC 2047 encoded words, any
charset, garbage) and is never called for a message that is appended.
It replaces C{presence.messageIdOfBody} and C{presence.recordedMessageId}.
"""

from __future__ import annotations

import binascii
import re
import unicodedata
from typing import Iterator

from imapmig.mail.fidelity import headerEnd
from imapmig.mail.message import StreamedBody
from imapmig.state import MESSAGE_ID_LENGTH, NAME_LENGTH, MessageNames

__all__ = ["HEADER_FIELDS", "namesOfBody", "namesOfHeader", "recordedMessageId"]

HEADER_OCTETS = 64 * 1024
"""
The most octets of a message's start read for its names: a header longer
than this names the message by what it holds within it.
"""

HEADER_FIELDS = b"(MESSAGE-ID DATE FROM SUBJECT)"
"""
The header fields the names come from, as an IMAP C{HEADER.FIELDS} list.
"""

# A field's raw value is cut to this many octets before it is decoded:
# enough for NAME_LENGTH characters of encoded words (about 4 octets per
# character in base64 UTF-8, plus the words' framing).
_VALUE_OCTETS = 8 * NAME_LENGTH

_FIELDS = {b"message-id": 0, b"date": 1, b"from": 2, b"subject": 3}


def _fields(header: bytes) -> Iterator[tuple[bytes, bytes]]:
    """
    Each field of a CRLF (or LF) header section as C{(lower-case name,
    unfolded raw value)}, in order.
    """
    name: bytes | None = None
    value: list[bytes] = []
    # The octets in value: a field folded over thousands of lines keeps
    # only its first _VALUE_OCTETS.
    held = 0
    for line in header.splitlines():
        if line[:1] in (b" ", b"\t"):
            if name is not None and held < _VALUE_OCTETS:
                value.append(line)
                held += len(line)
            continue
        if name is not None:
            yield name, b" ".join(value)
        colon = line.find(b":")
        if colon <= 0:
            name = None
            continue
        name = line[:colon].strip().lower()
        value = [line[colon + 1 :]]
        held = len(value[0])
    if name is not None:
        yield name, b" ".join(value)


def _text(raw: bytes) -> str:
    """
    Octets of a header as text: UTF-8 where they are (RFC 6532), else
    Latin-1 (never fails: each octet one character).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([QqBb])\?([^?\s]*)\?=")


def _decodeWord(charset: str, encoding: str, encoded: str) -> str | None:
    """
    One RFC 2047 encoded word's text, or L{None} if it cannot be decoded
    (an unknown charset, broken base64).
    """
    try:
        octets = encoded.encode("ascii")
        if encoding in "Bb":
            data = binascii.a2b_base64(octets + b"=" * (-len(octets) % 4), strict_mode=True)
        else:
            data = binascii.a2b_qp(octets.replace(b"_", b" "), header=True)
        # RFC 2231 lets a language follow the charset: "utf-8*en".
        return data.decode(charset.partition("*")[0], "replace")
    except (LookupError, ValueError, UnicodeError, binascii.Error):
        return None


def _decodeWords(text: str) -> str:
    """
    C{text} with its RFC 2047 encoded words decoded (white space between
    two of them dropped, as the RFC says); a word that cannot be decoded
    is left as it was written.
    """
    if "=?" not in text:
        return text
    pieces: list[str] = []
    end = 0
    previousDecoded = False
    for match in _ENCODED_WORD.finditer(text):
        between = text[end : match.start()]
        decoded = _decodeWord(*match.groups())
        if not (previousDecoded and decoded is not None and not between.strip()):
            pieces.append(between)
        pieces.append(match.group(0) if decoded is None else decoded)
        previousDecoded = decoded is not None
        end = match.end()
    pieces.append(text[end:])
    return "".join(pieces)


def _shown(text: str, limit: int) -> str | None:
    """
    C{text} as recorded: white space runs as one space, control characters
    (a terminal's escapes, NUL) dropped, cut at C{limit} characters (the
    last one then C{…}); L{None} when nothing is left.
    """
    words = " ".join(_printable(" ".join(text.split())).split())
    if not words:
        return None
    if len(words) > limit:
        words = words[: limit - 1] + "\u2026"
    return words


def _printable(text: str) -> str:
    """
    C{text} without control, format, surrogate and private-use characters
    (a terminal's escapes, NUL, bidirectional overrides).
    """
    return "".join(
        char for char in text if unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co")
    )


def recordedMessageId(messageId: bytes) -> str | None:
    """
    A Message-ID as the state store records it: text (octets that are not
    UTF-8 replaced) without control characters, which C{imapmig report
    --failures --csv} would otherwise print to the admin's terminal (an
    escape sequence sets its title or its clipboard); at most
    L{MESSAGE_ID_LENGTH} characters; L{None} for none.
    """
    text = _printable(messageId[: MESSAGE_ID_LENGTH * 4].decode("utf-8", "replace"))
    return text[:MESSAGE_ID_LENGTH] or None


def namesOfHeader(header: bytes) -> MessageNames:
    """
    The names of a message from its header section (or a
    C{BODY[HEADER.FIELDS (...)]} reply): the first Message-ID, Date, From
    and Subject fields, unfolded; Date, From and Subject decoded from RFC
    2047 and cut at L{NAME_LENGTH} characters.  Never raises, whatever the
    octets.
    """
    found: list[bytes | None] = [None, None, None, None]
    for name, value in _fields(header[:HEADER_OCTETS]):
        index = _FIELDS.get(name)
        if index is not None and found[index] is None:
            found[index] = value
            if all(each is not None for each in found):
                break
    messageId, date, sender, subject = found
    return MessageNames(
        messageId=None
        if messageId is None
        else recordedMessageId(b" ".join(messageId[:_VALUE_OCTETS].split())),
        date=None if date is None else _shown(_text(date[:_VALUE_OCTETS]), NAME_LENGTH),
        sender=None if sender is None else _decodedName(sender),
        subject=None if subject is None else _decodedName(subject),
    )


def _decodedName(raw: bytes) -> str | None:
    """
    A From or Subject field's raw value decoded and shown (L{_shown}).  A
    value longer than C{_VALUE_OCTETS} is cut at its last white space
    within them, so that no encoded word is left cut in two and shown as
    written (C{... ABAB =?utf-8?q?=41=}), and ends with C{…}.
    """
    cut = len(raw) > _VALUE_OCTETS
    if cut:
        raw = raw[:_VALUE_OCTETS]
        space = max(raw.rfind(b" "), raw.rfind(b"\t"))
        if space > 0:
            raw = raw[:space]
    return _shown(_decodeWords(_text(raw)) + ("\u2026" if cut else ""), NAME_LENGTH)


def namesOfBody(body: bytes | bytearray | StreamedBody) -> MessageNames:
    """
    The names of a message from its start (at most L{HEADER_OCTETS} of
    it; a L{StreamedBody} reads no more).  For the messages recorded
    without being appended: never called for those appended.
    """
    if isinstance(body, StreamedBody):
        try:
            start = body.head(HEADER_OCTETS)
        except (OSError, ValueError):
            return MessageNames()
    else:
        start = bytes(body[:HEADER_OCTETS])
    return namesOfHeader(start[: headerEnd(start)])
