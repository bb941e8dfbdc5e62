# -*- test-case-name: tests.test_imap_fetch -*-
"""
What one untagged FETCH response says: a L{FetchedItem}, made from the
response's parsed attribute list (L{itemOf}) or from a listing response
matched whole (L{listedItem}), and the RFC 3501 date-time
(L{parseInternalDate}).

Taken out of L{imapmig.imap.fetch} (964 lines), whose parser makes these
items; the session and the IMAP source read them.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from attrs import field, frozen

from imapmig.errors import FetchParseError
from imapmig.imap.spool import SpooledLiteral
from imapmig.imap.syntax import Value

__all__ = [
    "FetchedItem",
    "isMessageData",
    "itemOf",
    "listedItem",
    "madeItem",
    "parseInternalDate",
]

_MONTHS = {
    name: number
    for number, name in enumerate(
        b"Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1
    )
}

# Response items that carry message data (a section), keyed as written.
_MESSAGE_DATA_PREFIXES = (b"BODY[", b"BINARY[")
_MESSAGE_DATA_NAMES = frozenset([b"RFC822", b"RFC822.HEADER", b"RFC822.TEXT"])
# The full message, in the order L{FetchedItem.body} looks for it.
_FULL_BODY = (b"BODY[]", b"BINARY[]", b"RFC822")


# Shared by the many responses that carry no section or other item (a
# listing of a large folder): read-only, so sharing is safe.
_NO_SECTIONS: Mapping[bytes, bytes | None] = MappingProxyType({})
_NO_EXTRA: Mapping[bytes, Value] = MappingProxyType({})
_NO_SPOOLED: Mapping[bytes, SpooledLiteral] = MappingProxyType({})


def _describeSections(sections: Mapping[bytes, bytes | None]) -> str:
    """
    The C{repr} of L{FetchedItem.sections}: sizes, never message octets.
    """
    described = (
        f"{name!r}: {'NIL' if value is None else f'<{len(value)} octets>'}"
        for name, value in sections.items()
    )
    return "{" + ", ".join(described) + "}"


def _describeSpooled(spooled: Mapping[bytes, SpooledLiteral]) -> str:
    """
    The C{repr} of L{FetchedItem.spooled}.
    """
    return "{" + ", ".join(f"{name!r}: {value!r}" for name, value in spooled.items()) + "}"

@frozen
class FetchedItem:
    """
    One untagged C{FETCH} response, solicited or not.

    Every attribute is L{None} when the response did not carry that item
    (an unsolicited flag update carries only C{FLAGS}, perhaps C{UID} and
    C{MODSEQ}).

    @ivar sequence: the message sequence number.
    @ivar uid: C{UID}.
    @ivar flags: C{FLAGS}, as the server spelled them (C{\\Recent}
        included).
    @ivar internalDate: C{INTERNALDATE}, timezone-aware; L{None} also when
        the server sent a date this parser cannot read.
    @ivar size: C{RFC822.SIZE}.
    @ivar modSeq: C{MODSEQ} (RFC 7162).
    @ivar sections: the message data, keyed by the item name exactly as the
        server wrote it (C{b"BODY[]"}, C{b"BODY[]<0>"},
        C{b"BODY[HEADER.FIELDS (MESSAGE-ID)]"}, C{b"BINARY[]"},
        C{b"RFC822"}); L{None} where the server sent C{NIL}.  Its C{repr}
        shows sizes only.
    @ivar extra: every other item (C{ENVELOPE}, C{BODYSTRUCTURE},
        C{X-GM-LABELS}, ...), unconverted, keyed as written.
    @ivar spooled: message data the parser spooled to temporary files
        (L{FetchLimits.spoolAbove}), keyed as in C{sections}, where those
        items then are absent.  Only a parser with spooling on makes
        these; whoever receives the item owns them (close what is not
        kept).
    """

    sequence: int
    uid: int | None = None
    flags: tuple[str, ...] | None = None
    internalDate: datetime | None = None
    size: int | None = None
    modSeq: int | None = None
    sections: Mapping[bytes, bytes | None] = field(
        default=_NO_SECTIONS, repr=_describeSections
    )
    extra: Mapping[bytes, Value] = field(default=_NO_EXTRA, repr=False)
    spooled: Mapping[bytes, SpooledLiteral] = field(default=_NO_SPOOLED, repr=_describeSpooled)

    @property
    def hasBody(self) -> bool:
        """
        Whether the response carried the whole message (C{BODY[]},
        C{BINARY[]} or C{RFC822}), in memory, spooled, or C{NIL}.
        """
        return any(name in self.sections or name in self.spooled for name in _FULL_BODY)

    @property
    def spooledBody(self) -> SpooledLiteral | None:
        """
        The whole message, if the parser spooled it (then L{body} is
        L{None}).
        """
        spooled = self.spooled
        if spooled:
            for name in _FULL_BODY:
                value = spooled.get(name)
                if value is not None:
                    return value
        return None

    @property
    def body(self) -> bytes | None:
        """
        The whole message (C{BODY[]}, C{BINARY[]} or C{RFC822}) held in
        memory, or L{None} if the response carried none (or C{NIL}, or it
        was spooled: see L{spooledBody}).
        """
        sections = self.sections
        if sections:
            for name in _FULL_BODY:
                value = sections.get(name)
                if value is not None:
                    return value
        return None

@lru_cache(maxsize=64)
def _zone(minutes: int) -> timezone:
    return timezone(timedelta(minutes=minutes))


@lru_cache(maxsize=64)
def _zoneOf(zone: bytes) -> timezone:
    """
    The timezone of a date-time's zone, C{b"+0100"}: sign and four digits.
    """
    minutes = int(zone[1:3]) * 60 + int(zone[3:5])
    return _zone(-minutes if zone[0] == 0x2D else minutes)


def parseInternalDate(value: bytes) -> datetime:
    """
    Parse an RFC 3501 C{date-time} (without its quotes), such as
    C{b"22-Nov-2026 10:00:00 +0100"} or C{b" 2-Nov-2026 10:00:00 -0500"}.

    @return: a timezone-aware datetime.
    @raise ValueError: C{value} is not a date-time.
    """
    try:
        date, time, zone = value.split()
        day, month, year = date.split(b"-")
        hour, minute, second = time.split(b":")
        if len(zone) != 5 or zone[0] not in b"+-" or not zone[1:].isdigit():
            raise ValueError
        minutes = int(zone[1:3]) * 60 + int(zone[3:5])
        return datetime(
            int(year),
            _MONTHS[month.title()],
            int(day),
            int(hour),
            int(minute),
            int(second),
            tzinfo=_zone(-minutes if zone[0] == 0x2D else minutes),
        )
    except (ValueError, KeyError):
        raise ValueError(f"not an IMAP date-time: {value[:40]!r}") from None

def _integer(value: Value, name: bytes) -> int:
    """
    C{value} as a number, or an error naming the item C{name}.
    """
    if isinstance(value, bytes) and value.isdigit():
        return int(value)
    raise FetchParseError(f"{name.decode('ascii', 'replace')} is not a number")


def _text(value: bytes) -> str:
    """
    A flag as text: ASCII, else UTF-8 with replacements.
    """
    if value.isascii():
        return value.decode("ascii")
    return value.decode("utf-8", "replace")


def _dateOrNone(value: bytes) -> datetime | None:
    """
    The date-time C{value}, or L{None} if this parser cannot read it.
    """
    try:
        return parseInternalDate(value)
    except ValueError:
        return None


def _flags(value: Value, name: bytes) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FetchParseError("FLAGS is not a list")
    return tuple(_text(flag) for flag in value if isinstance(flag, bytes))


def _modSeq(value: Value, name: bytes) -> int:
    if not isinstance(value, list) or len(value) != 1:
        raise FetchParseError("MODSEQ is not a one-element list")
    return _integer(value[0], name)


_CONVERTERS: Mapping[bytes, tuple[str, Callable[[Value, bytes], Any]]] = {
    b"UID": ("uid", _integer),
    b"FLAGS": ("flags", _flags),
    b"RFC822.SIZE": ("size", _integer),
    b"MODSEQ": ("modSeq", _modSeq),
}
"""
The items with an attribute of their own, by upper-cased name: the
attribute, and what makes its value from the item's (given the name, for
errors).  C{INTERNALDATE} also has one, but a date that is not a string
leaves it as it was; message data goes to C{sections}, any other item to
C{extra}.
"""


def isMessageData(key: bytes) -> bool:
    """
    Whether the item named C{key} (upper-cased) carries message data
    (C{BODY[...]}, C{BINARY[...]}, C{RFC822...}).
    """
    return key.startswith(_MESSAGE_DATA_PREFIXES) or key in _MESSAGE_DATA_NAMES


_NO_PLACEHOLDERS: frozenset[int] = frozenset()


def _spools(
    spooled: Iterable[tuple[int, bytes, SpooledLiteral]], fields: dict[str, Any]
) -> set[int]:
    """
    Put the spooled literals in C{fields}, by item name (a later one of
    the same name replaces, and closes, an earlier one).

    @return: the indexes of their placeholders in the attribute list.
    """
    spools: dict[bytes, SpooledLiteral] = {}
    placeholders: set[int] = set()
    for index, spoolName, spool in spooled:
        earlier = spools.get(spoolName)
        if earlier is not None:
            earlier.close()
        spools[spoolName] = spool
        placeholders.add(index)
    fields["spooled"] = spools
    return placeholders


def itemOf(
    sequence: int,
    values: list[Value],
    spooled: list[tuple[int, bytes, SpooledLiteral]] | None = None,
) -> FetchedItem:
    """
    The L{FetchedItem} of a parsed FETCH attribute list
    (C{[name, value, name, value, ...]}).

    @param spooled: the literals spooled while the list was read: the
        index of each one's placeholder in C{values}, its item name, and
        the spool.
    """
    if len(values) % 2:
        raise FetchParseError("a FETCH item without a value")
    # FetchedItem's arguments; one absent keeps its default.
    fields: dict[str, Any] = {}
    placeholders = _spools(spooled, fields) if spooled else _NO_PLACEHOLDERS
    for i in range(0, len(values), 2):
        if i + 1 in placeholders:
            continue
        name, value = values[i], values[i + 1]
        if not isinstance(name, bytes):
            raise FetchParseError("a FETCH item name that is not an atom")
        key = name.upper()
        converter = _CONVERTERS.get(key)
        if converter is not None:
            fields[converter[0]] = converter[1](value, key)
        elif key == b"INTERNALDATE":
            if isinstance(value, bytes):
                fields["internalDate"] = _dateOrNone(value)
        elif key.startswith(_MESSAGE_DATA_PREFIXES) or key in _MESSAGE_DATA_NAMES:
            if isinstance(value, list):
                raise FetchParseError("message data that is a list")
            fields.setdefault("sections", {})[name] = value
        else:
            fields.setdefault("extra", {})[name] = value
    return FetchedItem(sequence=sequence, **fields)


# FetchedItem's slots, set directly by madeItem.
_SET_SEQUENCE, _SET_UID, _SET_FLAGS, _SET_DATE, _SET_SIZE, _SET_MODSEQ = (
    FetchedItem.__dict__[name].__set__
    for name in ("sequence", "uid", "flags", "internalDate", "size", "modSeq")
)
_SET_SECTIONS, _SET_EXTRA, _SET_SPOOLED = (
    FetchedItem.__dict__[name].__set__ for name in ("sections", "extra", "spooled")
)
_newObject = object.__new__
_newDate = datetime.__new__


def madeItem(
    sequence: int,
    uid: int,
    flags: tuple[str, ...] | None,
    internalDate: datetime | None,
    size: int | None,
    sections: Mapping[bytes, bytes | None],
) -> FetchedItem:
    """
    The same L{FetchedItem} as C{FetchedItem(sequence, uid, flags,
    internalDate, size, sections=sections)}, made in half the time, for
    the responses that come one per message (a listing's, a body's): a
    frozen attrs class's constructor sets each of its nine fields through
    C{object.__setattr__}; this sets its slots directly.  (L{FetchedItem}
    has no validator or converter for this to skip.)
    """
    item: FetchedItem = _newObject(FetchedItem)
    _SET_SEQUENCE(item, sequence)
    _SET_UID(item, uid)
    _SET_FLAGS(item, flags)
    _SET_DATE(item, internalDate)
    _SET_SIZE(item, size)
    _SET_MODSEQ(item, None)
    _SET_SECTIONS(item, sections)
    _SET_EXTRA(item, _NO_EXTRA)
    _SET_SPOOLED(item, _NO_SPOOLED)
    return item


def listedItem(match: re.Match[bytes]) -> FetchedItem:
    """
    The L{FetchedItem} of a listing response as servers write it, matched
    whole by L{imapmig.imap.fetch}: what L{itemOf} makes of it (C{NIL}
    among the flags left out, as a flag list holds atoms only; an
    impossible date is L{None}).  One per message listed: the date is made
    from the fields the match found (a third of a listing response's
    reading went to L{parseInternalDate}'s splits), its zone once per
    distinct offset.
    """
    (
        sequence, uid, flags, day, month, year, hour, minute, second, zone, size
    ) = match.groups()  # fmt: skip
    internalDate: datetime | None
    try:
        internalDate = _newDate(
            datetime, int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second),
            0, _zoneOf(zone),
        )  # fmt: skip
    except ValueError:
        internalDate = None
    return madeItem(
        int(sequence), int(uid), _listedFlags(flags), internalDate, int(size), _NO_SECTIONS
    )


@lru_cache(maxsize=256)
def _listedFlags(flags: bytes) -> tuple[str, ...]:
    """
    The flags of a listing response, from the octets between its
    parentheses: a folder's messages share a few sets of flags, each
    split and decoded once (rather than once per message).
    """
    return tuple(_text(flag) for flag in flags.split(b" ") if flag and flag.upper() != b"NIL")
