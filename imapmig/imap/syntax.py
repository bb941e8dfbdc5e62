# -*- test-case-name: tests.test_imap_fetch -*-
"""
The syntax of IMAP responses, read without Twisted's parser, and the UID
sets imapmig writes.

A small tokenizer (L{scan}) splits the short, non-literal parts of a
response: atoms, quoted strings with backslash escapes, parenthesised
lists, C{NIL}, and the C{{N}} and C{~{N}} markers of literals, whose
octets it leaves to its caller.  L{parseResponse} reads a complete small
response with it; L{imapmig.imap.fetch} reads FETCH responses, bodies
included, with it.

Taken out of L{imapmig.imap.fetch} (964 lines), which it was part of; the
NAMESPACE reader and the session use it too.
"""

from __future__ import annotations

from typing import Iterable, TypeAlias, Union

from imapmig.errors import FetchParseError

__all__ = ["Value", "formatUIDSet", "parseResponse", "scan"]

Value: TypeAlias = Union[bytes, None, list["Value"]]
"""
One parsed element of a response: an atom, quoted string or literal as
bytes, C{NIL} as L{None}, a parenthesised list as a list.
"""

_SP = 0x20
_LPAREN = 0x28
_RPAREN = 0x29
_DQUOTE = 0x22
_LBRACE = 0x7B
_LBRACKET = 0x5B
_TILDE = 0x7E
# The first octets of a literal marker: C{{N}}, C{~{N}}.
_MARKERS = frozenset([_LBRACE, _TILDE])


def _quoted(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """
    Read a quoted string whose opening quote is just before C{pos}.

    @return: its value (escapes resolved) and the position after its
        closing quote.
    """
    pieces: list[bytes] | None = None
    start = pos
    while True:
        quote = data.find(b'"', pos, end)
        if quote < 0:
            raise FetchParseError("unterminated quoted string")
        backslash = data.find(b"\\", pos, quote)
        if backslash < 0:
            if pieces is None:
                return data[start:quote], quote + 1
            pieces.append(data[pos:quote])
            return b"".join(pieces), quote + 1
        if backslash + 1 >= end:
            raise FetchParseError("unterminated quoted string")
        if pieces is None:
            pieces = []
        pieces.append(data[pos:backslash])
        pieces.append(data[backslash + 1 : backslash + 2])
        pos = backslash + 2


def _atom(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """
    Read an atom-like token starting at C{pos}: everything up to a space or
    a parenthesis, where a bracketed part (C{BODY[HEADER.FIELDS (A B)]})
    may itself hold spaces and parentheses.

    @return: the token and the position after it.
    """
    scan = pos
    while True:
        stop = end
        for delimiter in (b" ", b")", b"(", b"["):
            found = data.find(delimiter, scan, stop)
            if found >= 0:
                stop = found
        if stop < end and data[stop] == _LBRACKET:
            close = data.find(b"]", stop, end)
            if close < 0:
                raise FetchParseError("unterminated section specification")
            scan = close + 1
            continue
        return data[pos:stop], stop


def _literalMarker(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """
    The literal marker (C{{N}}, or C{~{N}} for literal8) at C{pos}, if one
    starts there: the position after its C{}} and the size it announces.

    @return: L{None} for a C{~} that starts an atom instead.
    """
    if data[pos] == _LBRACE:
        start = pos + 1
    elif pos + 1 < end and data[pos + 1] == _LBRACE:
        start = pos + 2
    else:
        return None
    close = data.find(b"}", start, end)
    digits = data[start:close]
    if close < 0 or not digits.isdigit() or len(digits) > 18:
        raise FetchParseError("malformed literal marker")
    return close + 1, int(digits)


def scan(data: bytes, pos: int, end: int, stack: list[list[Value]]) -> tuple[int, int]:
    """
    Tokenize C{data[pos:end]} into the open lists of C{stack} (the
    innermost last), opening and closing lists as parentheses say, until
    the end or a literal marker.

    The tokens are told apart inline, by their first octet, rather than
    through a table of readers: this runs for every token of every FETCH
    response the fast paths of L{imapmig.imap.fetch} do not take, and a
    call per token cost 8% of such a response's CPU.

    @return: the position reached, and the size announced by the literal
        marker (C{{N}} or C{~{N}}) that stopped the scan, or -1 if it
        reached C{end}.
    @raise FetchParseError: malformed data.
    """
    while pos < end:
        octet = data[pos]
        if octet == _SP:
            pos += 1
            continue
        if not stack:
            raise FetchParseError("data after the closing parenthesis")
        if octet == _LPAREN:
            inner: list[Value] = []
            stack[-1].append(inner)
            stack.append(inner)
            pos += 1
        elif octet == _RPAREN:
            stack.pop()
            pos += 1
        elif octet == _DQUOTE:
            value, pos = _quoted(data, pos + 1, end)
            stack[-1].append(value)
        else:
            marker = _literalMarker(data, pos, end) if octet in _MARKERS else None
            if marker is not None:
                return marker
            atom, pos = _atom(data, pos, end)
            stack[-1].append(None if len(atom) == 3 and atom.upper() == b"NIL" else atom)
    return pos, -1


def parseResponse(data: bytes) -> list[Value]:
    """
    Parse a complete, small response (the text after C{* }, as Twisted's
    client hands it over: any literal inline, as C{{N}\\r\\n} followed by
    its octets) into its elements.  Not for message bodies: see
    L{FetchResponseParser}.

    @raise FetchParseError: malformed or unbalanced data.
    """
    top: list[Value] = []
    stack = [top]
    pos, end = 0, len(data)
    while True:
        pos, size = scan(data, pos, end, stack)
        if size < 0:
            break
        pos = _inlineLiteral(data, pos, size, stack)
    if len(stack) != 1:
        raise FetchParseError("unbalanced parentheses")
    return top


def _inlineLiteral(data: bytes, pos: int, size: int, stack: list[list[Value]]) -> int:
    """
    Read a literal of C{size} octets whose marker ends at C{pos}, inline as
    Twisted's client hands it over (CRLF, then its octets), into the
    innermost open list.

    @return: the position after it.
    """
    if not stack:
        raise FetchParseError("literal after the closing parenthesis")
    if data[pos : pos + 2] != b"\r\n" or pos + 2 + size > len(data):
        raise FetchParseError("truncated literal")
    stack[-1].append(data[pos + 2 : pos + 2 + size])
    return pos + 2 + size

def formatUIDSet(uids: Iterable[int]) -> bytes:
    """
    A compact IMAP sequence set of C{uids}: C{[7, 1, 2, 3, 9, 10]} gives
    C{b"1:3,7,9:10"}.

    @raise ValueError: C{uids} is empty or holds a number below 1.
    """
    ordered = sorted(set(uids))
    if not ordered or ordered[0] < 1:
        raise ValueError("a UID set needs UIDs of at least 1")
    ranges: list[bytes] = []
    first = last = ordered[0]
    for uid in ordered[1:]:
        if uid == last + 1:
            last = uid
            continue
        ranges.append(_range(first, last))
        first = last = uid
    ranges.append(_range(first, last))
    return b",".join(ranges)


def _range(first: int, last: int) -> bytes:
    """
    One range of a UID set: C{b"7"}, C{b"1:3"}.
    """
    return b"%d" % first if first == last else b"%d:%d" % (first, last)
