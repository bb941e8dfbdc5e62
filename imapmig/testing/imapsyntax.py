# -*- test-case-name: tests.test_testing_fakeserver -*-
"""
The IMAP syntax L{imapmig.testing.fakeserver} reads and writes: a command
line split into atoms, quoted strings, literals and flat lists (L{tokenize}),
the messages of an APPEND (L{appendedMessages}), UID sets, header fields
and body parts of a FETCH response, quoting and mailbox names.  Taken out
of C{fakeserver.py}, which keeps the connection and the mail store.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum

from attrs import frozen

import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)

_SYSTEM_FLAGS = frozenset({"\\ANSWERED", "\\FLAGGED", "\\DELETED", "\\SEEN", "\\DRAFT"})
_ATOM = re.compile(rb"[^ ()]+")
_QUOTED = re.compile(rb'"((?:\\.|[^"\\])*)"', re.DOTALL)
_ESCAPED = re.compile(rb"\\(.)", re.DOTALL)


def canonicalName(name: str) -> str:
    """
    C{name}, with C{INBOX} in any case as C{"INBOX"}.
    """
    return "INBOX" if name.upper() == "INBOX" else name


def decodeName(value: bytes) -> str | None:
    """
    A mailbox name (or pattern) from modified UTF-7, or L{None} if invalid.
    """
    try:
        return canonicalName(value.decode("imap4-utf-7"))
    except (UnicodeDecodeError, ValueError):
        return None


class Kind(Enum):
    """
    What a L{Token} of a command line is.
    """

    ATOM = "atom"
    STRING = "string"
    LITERAL = "literal"
    LIST = "list"


@frozen
class Token:
    """
    One argument of a command line: an atom, a string or literal
    (C{value}), or a flat parenthesized list (C{items}).
    """

    kind: Kind
    value: bytes = b""
    items: tuple[bytes, ...] = ()


_PARTIAL = re.compile(rb"BODY\.PEEK\[\]<([0-9]+)\.([0-9]+)>")
_HEADER_FIELDS = re.compile(rb"HEADER\.FIELDS \(([^)]*)\)")
# Where a header field starts: after a CRLF not followed by a folded
# line's leading space or tab.
_FIELD_START = re.compile(rb"\r\n(?![ \t])")


def uidsIn(uidSet: bytes, largest: int) -> set[int]:
    """
    The UIDs a UID set names (C{*} being the largest UID in use).
    """
    result: set[int] = set()
    for part in uidSet.split(b","):
        low, _, high = part.partition(b":")
        first = largest if low == b"*" else int(low)
        last = first if not high else largest if high == b"*" else int(high)
        result.update(range(min(first, last), max(first, last) + 1))
    return result


def headerField(message: bytes, *names: bytes) -> bytes:
    """
    What C{BODY[HEADER.FIELDS (NAME ...)]} returns: the fields' lines, in
    the message's order, then a blank line.
    """
    end = message.find(b"\r\n\r\n")
    header = message[: end + 2] if end >= 0 else message
    wanted = tuple(name + b":" for name in names)
    kept = [field for field in _FIELD_START.split(header) if field.lower().startswith(wanted)]
    return b"".join(field + b"\r\n" for field in kept) + b"\r\n"


def tokenize(line: bytes) -> list[Token]:
    """
    Split a command line (without a trailing literal marker) into atoms,
    quoted strings and flat parenthesized lists.

    @raise ValueError: the line is malformed.
    """
    tokens = []
    i = 0
    while i < len(line):
        token, i = _READERS.get(line[i : i + 1], _atom)(line, i)
        if token is not None:
            tokens.append(token)
    return tokens


def _space(line: bytes, i: int) -> tuple[Token | None, int]:
    return None, i + 1


def _quoted(line: bytes, i: int) -> tuple[Token | None, int]:
    """
    The quoted string at C{line[i]}, its backslash escapes undone.
    """
    match = _QUOTED.match(line, i)
    if match is None:
        raise ValueError("unterminated quoted string")
    return Token(Kind.STRING, _ESCAPED.sub(rb"\1", match.group(1))), match.end()


def _list(line: bytes, i: int) -> tuple[Token | None, int]:
    """
    The flat parenthesized list at C{line[i]}.
    """
    end = line.find(b")", i)
    inner = line[i + 1 : end]
    if end == -1 or b"(" in inner or b'"' in inner:
        raise ValueError("unsupported parenthesized list")
    return Token(Kind.LIST, items=tuple(inner.split())), end + 1


def _atom(line: bytes, i: int) -> tuple[Token | None, int]:
    match = _ATOM.match(line, i)
    if match is None:
        raise ValueError("unexpected parenthesis")
    return Token(Kind.ATOM, match.group()), match.end()


_READERS = {b" ": _space, b'"': _quoted, b"(": _list}
"""
How to read the token starting with a given octet (L{_atom} for the rest).
"""


Appended = tuple[bytes, tuple[str, ...], str | None]
"""
A message of an APPEND: its body, flags and date-time (L{None}: none given).
"""


def bodyItems(body: bytes, upper: bytes) -> list[bytes]:
    """
    The header fields (C{BODY.PEEK[HEADER.FIELDS (NAME ...)]}) and the
    body (C{BODY.PEEK[]} or its part C{BODY.PEEK[]<START.LENGTH>}) asked
    for in the FETCH items C{upper}.
    """
    parts = []
    for fields in _HEADER_FIELDS.findall(upper):
        value = headerField(body, *fields.lower().split())
        parts.append(b"BODY[HEADER.FIELDS (%s)] {%d}\r\n%s" % (fields, len(value), value))
    partial = _PARTIAL.search(upper)
    if partial is not None:
        start, length = int(partial.group(1)), int(partial.group(2))
        piece = body[start : start + length]
        parts.append(b"BODY[]<%d> {%d}\r\n%s" % (start, len(piece), piece))
    elif b"BODY.PEEK[]" in upper:
        parts.append(b"BODY[] {%d}\r\n%s" % (len(body), body))
    return parts


def appendedMessages(args: list[Token]) -> list[Appended] | bytes:
    """
    The messages of an APPEND's arguments after the mailbox (several with
    MULTIAPPEND), or the C{BAD} reply that refuses them.
    """
    rest = list(args)
    messages: list[Appended] = []
    while rest:
        message = _nextAppended(rest)
        if isinstance(message, bytes):
            return message
        messages.append(message)
    return messages or b"BAD APPEND expects a message literal"


def _nextAppended(rest: list[Token]) -> Appended | bytes:
    """
    Take the next message (optional flags, optional date-time, literal)
    off C{rest}, or return the C{BAD} reply that refuses it.
    """
    flags = _appendedFlags(rest)
    if isinstance(flags, bytes):
        return flags
    date = _appendedDate(rest)
    if isinstance(date, bytes):
        return date
    if not rest or rest[0].kind is not Kind.LITERAL:
        return b"BAD APPEND expects a message literal"
    return (rest.pop(0).value, flags, date)


def _appendedFlags(rest: list[Token]) -> tuple[str, ...] | bytes:
    """
    Take a message's optional flag list off C{rest}.
    """
    if rest[0].kind is not Kind.LIST:
        return ()
    flags = tuple(f.decode("utf-8", "replace") for f in rest.pop(0).items)
    if any(f.startswith("\\") and f.upper() not in _SYSTEM_FLAGS for f in flags):
        return b"BAD Invalid system flag"
    return flags


def _appendedDate(rest: list[Token]) -> str | None | bytes:
    """
    Take a message's optional date-time off C{rest}.
    """
    if not rest or rest[0].kind is not Kind.STRING:
        return None
    date = rest.pop(0).value.decode("ascii", "replace")
    return date if _isDateTime(date) else b"BAD Invalid date-time"


def _isDateTime(value: str) -> bool:
    """
    Whether C{value} is an IMAP date-time (without its quotes).
    """
    try:
        datetime.strptime(value.strip(), "%d-%b-%Y %H:%M:%S %z")
    except ValueError:
        return False
    return True


def quote(value: bytes) -> bytes:
    """
    C{value} as an IMAP quoted string.
    """
    return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
