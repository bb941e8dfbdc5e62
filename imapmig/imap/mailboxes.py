# -*- test-case-name: tests.test_imap_session,tests.test_imap_client -*-
"""
What LIST, SELECT and EXAMINE tell about mailboxes: the values
L{imapmig.imap.session.IMAPSession} returns, and the reading of those
untagged responses into them.

Split from imapmig/imap/session.py: reading replies is apart from sending
commands.
"""

from __future__ import annotations

from typing import Sequence

from attrs import frozen
from twisted.logger import Logger

from imapmig.errors import FetchParseError
from imapmig.imap.syntax import Value, parseResponse
from imapmig.imap.mailboxname import decodeListedName


@frozen
class MailboxInfo:
    """
    A mailbox as LIST shows it.

    @ivar name: decoded from modified UTF-7.
    @ivar attributes: e.g. C{("\\HasNoChildren", "\\Sent")}.
    """

    name: str
    delimiter: str | None
    attributes: tuple[str, ...]


@frozen
class SelectedMailbox:
    """
    What SELECT tells about a mailbox.
    """

    name: str
    uidValidity: int | None
    exists: int
    permanentFlags: tuple[str, ...]


@frozen
class MailboxState:
    """
    What SELECT tells about a mailbox before messages are appended to it.

    @ivar name: the mailbox, decoded.
    @ivar exists: how many messages it holds.
    @ivar uidValidity: C{UIDVALIDITY}, or L{None} if the server sent none.
    @ivar permanentFlags: its C{PERMANENTFLAGS} (C{"\\*"} among them when
        new keywords may be created), or L{None} when the server did not
        say.
    @ivar uidNext: C{UIDNEXT}, the UID the next message will get at the
        least, or L{None} if the server sent none.
    """

    name: str
    exists: int
    uidValidity: int | None
    permanentFlags: frozenset[str] | None
    uidNext: int | None = None


@frozen
class ExaminedMailbox:
    """
    What EXAMINE tells about a mailbox opened read-only.

    @ivar name: the mailbox, decoded.
    @ivar exists: how many messages it holds.
    @ivar uidValidity: C{UIDVALIDITY}, or L{None} if the server sent none.
    @ivar uidNext: C{UIDNEXT} (the UID the next message will get), or
        L{None} if the server sent none.
    @ivar highestModSeq: C{HIGHESTMODSEQ} (RFC 7162) when the server has
        CONDSTORE and keeps mod-sequences for this mailbox, else L{None}.
    """

    name: str
    exists: int
    uidValidity: int | None
    uidNext: int | None
    highestModSeq: int | None


# RFC 6154 attributes (and RFC 8457's Important), by their lower-case form.
SPECIAL_USE_ATTRIBUTES = {
    attribute.lower(): attribute
    for attribute in (
        "\\All",
        "\\Archive",
        "\\Drafts",
        "\\Flagged",
        "\\Important",
        "\\Junk",
        "\\Sent",
        "\\Trash",
    )
}


@frozen
class ListedMailbox:
    """
    A mailbox as LIST (with LIST-EXTENDED, or LIST and LSUB) shows it.

    @ivar name: decoded from modified UTF-7 (a name that does not decode
        is read as UTF-8, invalid octets replaced); C{INBOX} in any case
        is C{"INBOX"}.
    @ivar wireName: the name exactly as the server sent it, to name the
        mailbox in later commands.
    @ivar delimiter: the hierarchy delimiter, or L{None} for a flat name.
    @ivar attributes: e.g. C{("\\HasChildren", "\\Sent")}, as sent.
    @ivar subscribed: whether the user is subscribed to it.
    """

    name: str
    wireName: bytes
    delimiter: str | None
    attributes: tuple[str, ...]
    subscribed: bool

    @property
    def selectable(self) -> bool:
        """
        Whether the mailbox can hold messages (neither C{\\Noselect} nor
        C{\\NonExistent}).
        """
        return not any(a.lower() in ("\\noselect", "\\nonexistent") for a in self.attributes)

    @property
    def specialUse(self) -> str | None:
        """
        Its RFC 6154 attribute (C{"\\Sent"}, ...) in canonical spelling, or
        L{None}.
        """
        for attribute in self.attributes:
            canonical = SPECIAL_USE_ATTRIBUTES.get(attribute.lower())
            if canonical is not None:
                return canonical
        return None


def openedState(
    lines: Sequence[bytes],
) -> tuple[int, dict[bytes, int | None], frozenset[str] | None]:
    """
    Read the untagged responses to SELECT or EXAMINE.

    @return: C{EXISTS}; the numeric response codes of the C{OK} responses
        (C{UIDVALIDITY}, C{UIDNEXT}, C{HIGHESTMODSEQ}; L{None} for a code
        without a number); and C{PERMANENTFLAGS}, or L{None} if not sent.
    """
    exists = 0
    codes: dict[bytes, int | None] = {}
    permanentFlags: frozenset[str] | None = None
    for line in lines:
        head, _, tail = line.partition(b" ")
        if head.isdigit():
            if tail[:6].upper() == b"EXISTS":
                exists = int(head)
        elif head.upper() == b"OK" and tail.startswith(b"["):
            if tail[:16].upper() == b"[PERMANENTFLAGS ":
                permanentFlags = _flagList(tail)
            else:
                _readCode(tail, codes)
    return exists, codes, permanentFlags


def _flagList(text: bytes) -> frozenset[str]:
    """
    The flags of a C{[PERMANENTFLAGS (...)]} response code.
    """
    inner = text[text.find(b"(") + 1 : text.find(b")")]
    return frozenset(flag.decode("ascii", "replace") for flag in inner.split())


def _readCode(text: bytes, codes: dict[bytes, int | None]) -> None:
    """
    Add the response code at the start of C{text} (C{[UIDNEXT 12] ...})
    to C{codes}: its number, or L{None} for a code without one.
    """
    code = text[1 : text.find(b"]")].split()
    if code:
        value = code[1] if len(code) > 1 else b""
        codes[code[0].upper()] = int(value) if value.isdigit() else None


def _rowParts(row: list[Value]) -> tuple[bytes, str | None, tuple[str, ...]]:
    """
    The name (as sent), the delimiter (L{None} for C{NIL}) and the
    attributes of a parsed LIST row (see L{listRows}).
    """
    attributes, delimiter, name = row[0], row[1], row[2]
    assert isinstance(attributes, list) and isinstance(name, bytes)
    return (
        name,
        _delimiter(delimiter),
        tuple(a.decode("utf-8", "replace") for a in attributes if isinstance(a, bytes)),
    )


def _delimiter(value: Value) -> str | None:
    """
    The hierarchy delimiter of a LIST row, or L{None} for C{NIL} (a flat
    name).
    """
    if isinstance(value, bytes) and value:
        return value.decode("utf-8", "replace")
    return None


def mailboxInfo(row: list[Value]) -> MailboxInfo:
    """
    A L{MailboxInfo} of a parsed LIST row (see L{listRows}).
    """
    name, delimiter, attributes = _rowParts(row)
    return MailboxInfo(name=decodeListedName(name), delimiter=delimiter, attributes=attributes)


def listRows(
    lines: Sequence[bytes], keyword: bytes, description: str, logger: Logger
) -> list[list[Value]]:
    """
    The parsed C{LIST} (or C{LSUB}) responses among C{lines}, each as
    C{[attributes, delimiter, name, ...]}; other untagged responses that
    came meanwhile, and malformed rows (logged), are left out.
    """
    head = keyword + b" "
    rows = []
    for line in lines:
        if line[: len(head)].upper() == head:
            row = _listRow(line, keyword, description, logger)
            if row is not None:
                rows.append(row)
    return rows


def _listRow(
    line: bytes, keyword: bytes, description: str, logger: Logger
) -> list[Value] | None:
    """
    The parsed C{keyword} (LIST or LSUB) response C{line} as C{[attributes,
    delimiter, name, ...]}, or L{None} where it is malformed (logged if it
    cannot be parsed at all).
    """
    try:
        row = parseResponse(line)[1:]
    except FetchParseError as e:
        logger.warn(
            "{session}: unreadable {keyword} response: {error}",
            session=description,
            keyword=keyword.decode("ascii"),
            error=str(e),
        )
        return None
    if len(row) >= 3 and isinstance(row[0], list) and isinstance(row[2], bytes):
        return row
    return None


def listedMailbox(row: list[Value], subscribed: bool | None) -> ListedMailbox:
    """
    A L{ListedMailbox} of a parsed LIST row.

    @param subscribed: whether it is subscribed, or L{None} to read its
        C{\\Subscribed} attribute (LIST-EXTENDED).
    """
    name, delimiter, attributes = _rowParts(row)
    if subscribed is None:
        subscribed = any(a.lower() == "\\subscribed" for a in attributes)
    return ListedMailbox(
        name=decodeListedName(name),
        wireName=name,
        delimiter=delimiter,
        attributes=attributes,
        subscribed=subscribed,
    )
