# -*- test-case-name: tests.test_imap_namespace -*-
"""
The NAMESPACE response (RFC 2342): where an account's personal folders,
other users' and shared folders live.

C{* NAMESPACE (("" "/")) (("~" "/")) (("#shared/" "/"))} holds three
lists (personal, other users', shared), each L{None} (C{NIL}) or a list
of namespaces: a prefix, a delimiter (or C{NIL}), and possibly extension
data (RFC 2342 section 5, RFC 5255), which is ignored.
"""

from __future__ import annotations

from typing import Sequence

import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)
from attrs import frozen

from imapmig.errors import ProtocolError
from imapmig.errors import FetchParseError
from imapmig.imap.syntax import Value, parseResponse
from imapmig.mail.folders import PersonalNamespace

MAX_NAMESPACES = 100
"""
The most namespaces of one kind read from a response; a server announcing
more is not believed.
"""


@frozen
class ServerNamespaces:
    """
    What a server's NAMESPACE response says.

    @ivar personal: the personal namespaces, the first one being where
        new folders go.
    @ivar others: other users' namespaces (C{"~"}, C{"#user/"}).
    @ivar shared: shared namespaces (C{"#shared/"}, C{"#public."}).
    """

    personal: tuple[PersonalNamespace, ...] = ()
    others: tuple[PersonalNamespace, ...] = ()
    shared: tuple[PersonalNamespace, ...] = ()

    def personalNamespace(self) -> PersonalNamespace:
        """
        The personal namespace folders are read from and created in: the
        first one announced, else the empty prefix without a delimiter.
        """
        return self.personal[0] if self.personal else PersonalNamespace()

    def foreignKind(self, mailbox: str) -> str | None:
        """
        Which non-personal namespace a mailbox name lies in: C{"other
        users'"}, C{"shared"}, or L{None} for neither.  The longest
        matching prefix decides, so C{"#shared/x"} is shared even when the
        personal prefix is empty (which every name starts with).
        """
        best: tuple[int, str | None] = (-1, None)
        personal = self.personalNamespace()
        if personal.holds(mailbox):
            best = (len(personal.prefix), None)
        for kind, spaces in (("other users'", self.others), ("shared", self.shared)):
            for space in spaces:
                if len(space.prefix) > best[0] and _liesIn(mailbox, space):
                    best = (len(space.prefix), kind)
        return best[1]


def _liesIn(mailbox: str, space: PersonalNamespace) -> bool:
    """
    Whether C{mailbox} lies in the non-personal namespace C{space}, or is
    its root itself (C{"#shared"} for C{"#shared/"}).
    """
    prefix = space.prefix
    return bool(prefix) and (
        mailbox.startswith(prefix) or mailbox + (space.delimiter or "") == prefix
    )


def _decode(value: bytes) -> str:
    """
    A prefix or delimiter: modified UTF-7 (RFC 3501 5.1.3), else UTF-8.
    """
    try:
        return value.decode("imap4-utf-7")
    except (UnicodeError, ValueError):
        return value.decode("utf-8", "replace")


def _prefixAndDelimiter(entry: Value, which: str, line: bytes) -> tuple[bytes, bytes | None]:
    """
    The prefix and the delimiter (or C{NIL}) of one namespace of a list,
    which may hold extension data after them.

    @raise ProtocolError: C{entry} is not a namespace.
    """
    if isinstance(entry, list) and len(entry) >= 2:
        prefix, delimiter = entry[0], entry[1]
        if isinstance(prefix, bytes) and (delimiter is None or isinstance(delimiter, bytes)):
            return prefix, delimiter
    raise ProtocolError(f"a malformed NAMESPACE response ({which})", line)


def _delimiter(raw: bytes | None, which: str, line: bytes) -> str | None:
    """
    A namespace's delimiter: one character, not NUL; L{None} for C{NIL}
    (or an empty string).

    @raise ProtocolError: it is longer, or NUL.
    """
    if not raw:
        return None
    delimiter = _decode(raw)
    if len(delimiter) != 1 or delimiter == "\0":
        raise ProtocolError(
            f"a malformed NAMESPACE response ({which}: a delimiter must be"
            " one character, not NUL)",
            line,
        )
    return delimiter


def _namespace(entry: Value, which: str, line: bytes, personal: bool) -> PersonalNamespace:
    """
    One namespace of a list; see L{_namespaces}.
    """
    rawPrefix, rawDelimiter = _prefixAndDelimiter(entry, which, line)
    prefix = _decode(rawPrefix)
    delimiter = _delimiter(rawDelimiter, which, line)
    if personal and prefix and delimiter is not None and not prefix.endswith(delimiter):
        prefix += delimiter
    return PersonalNamespace(prefix, delimiter)


def _namespaces(
    value: Value, which: str, line: bytes, personal: bool = False
) -> tuple[PersonalNamespace, ...]:
    """
    One of the three lists of a NAMESPACE response.

    @param personal: whether it is the personal list, where a non-empty
        prefix that does not end with its delimiter (C{("INBOX" ".")})
        takes it (C{INBOX.}), so that folder names are not glued onto it.
    @raise ProtocolError: it is neither C{NIL} nor a list of namespaces,
        or a delimiter is not one character (or is NUL).
    """
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ProtocolError(f"a malformed NAMESPACE response ({which})", line)
    if len(value) > MAX_NAMESPACES:
        raise ProtocolError(
            f"a NAMESPACE response with more than {MAX_NAMESPACES} {which} namespaces", line
        )
    return tuple(_namespace(entry, which, line, personal) for entry in value)


def parseNamespaceResponse(line: bytes) -> ServerNamespaces:
    """
    Read one untagged NAMESPACE response: the text after C{* }, starting
    with C{NAMESPACE}.

    A personal prefix that does not end with its delimiter takes it
    (C{("INBOX" ".")} is C{INBOX.}).

    @raise ProtocolError: it is malformed (not three lists or C{NIL}s, a
        namespace without a prefix and a delimiter, a delimiter that is
        not one character or is NUL, unbalanced parentheses, too many
        namespaces); the error names what was wrong and shows the start
        of the line, escaped.
    """
    try:
        parsed = parseResponse(line)
    except FetchParseError as e:
        raise ProtocolError(f"a malformed NAMESPACE response ({e})", line) from None
    if len(parsed) < 4 or not isinstance(parsed[0], bytes) or parsed[0].upper() != b"NAMESPACE":
        raise ProtocolError("a malformed NAMESPACE response (not three lists)", line)
    return ServerNamespaces(
        _namespaces(parsed[1], "personal", line, personal=True),
        _namespaces(parsed[2], "other users'", line),
        _namespaces(parsed[3], "shared", line),
    )


def namespaceResponse(lines: Sequence[bytes]) -> ServerNamespaces:
    """
    The NAMESPACE response among the untagged responses to a NAMESPACE
    command (others may have come meanwhile).

    @raise ProtocolError: there is none, or it is malformed.
    """
    for line in lines:
        if line[:10].upper() == b"NAMESPACE ":
            return parseNamespaceResponse(line)
    raise ProtocolError("no NAMESPACE response to NAMESPACE")
