# -*- test-case-name: tests.test_sources_mbox -*-
"""
The date of an mbox C{From } line, which gives a message its INTERNALDATE
(taken out of the mbox source's module, which grew too big to read).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Sequence

__all__ = ["parseFromLineDate"]

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}

# Time zone abbreviations, in minutes east of UTC; ambiguous ones (IST)
# are left out.  CST is US Central, as in RFC 822.
_ZONES = {
    "UT": 0,
    "UTC": 0,
    "GMT": 0,
    "Z": 0,
    "WET": 0,
    "BST": 60,
    "WEST": 60,
    "CET": 60,
    "MET": 60,
    "CEST": 120,
    "MEST": 120,
    "EET": 120,
    "EEST": 180,
    "MSK": 180,
    "EST": -300,
    "EDT": -240,
    "CST": -360,
    "CDT": -300,
    "MST": -420,
    "MDT": -360,
    "PST": -480,
    "PDT": -420,
    "AKST": -540,
    "AKDT": -480,
    "HST": -600,
    "HKT": 480,
    "SGT": 480,
    "AWST": 480,
    "JST": 540,
    "KST": 540,
    "ACST": 570,
    "ACDT": 630,
    "AEST": 600,
    "AEDT": 660,
    "NZST": 720,
    "NZDT": 780,
}

# Any year an INTERNALDATE can carry (RFC 3501 date-year is 4DIGIT) is the
# From_ line's to give: a date before 1970 (a negative time_t, 1901-12-13
# from a 32-bit clamp) or after 2099 is still the date the source holds.
# What the destination does with it is the destination's (verify shows it).
_EARLIEST_YEAR = 1000
_LATEST_YEAR = 9999


def _number(token: str, low: int, high: int) -> int | None:
    """
    The integer C{token} spells in ASCII digits, if it lies in
    [C{low}, C{high}].
    """
    if not (token.isascii() and token.isdigit()):
        return None
    value = int(token)
    return value if low <= value <= high else None


def _clock(token: str) -> tuple[int, int, int] | None:
    """
    Hours, minutes and seconds of C{HH:MM:SS} or C{HH:MM} (a leap second
    becomes 59).
    """
    parts = token.split(":")
    if not 2 <= len(parts) <= 3:
        return None
    hour = _number(parts[0], 0, 23)
    minute = _number(parts[1], 0, 59)
    second = _number(parts[2], 0, 60) if len(parts) == 3 else 0
    if hour is None or minute is None or second is None:
        return None
    return hour, minute, min(second, 59)


def _zone(token: str) -> int | None:
    """
    The offset in minutes east of UTC of a zone token (C{+0100},
    C{-05:00}, C{CET}), or L{None} if C{token} is none.
    """
    if token[:1] in ("+", "-"):
        return _numericZone(token)
    return _ZONES.get(token.upper())


def _numericZone(token: str) -> int | None:
    """
    The offset in minutes east of UTC of C{+HHMM} or C{-HH:MM}, or L{None}
    if C{token} is neither (C{HH} up to 14).
    """
    digits = token[1:].replace(":", "", 1)
    hours = _number(digits[:2], 0, 14) if len(digits) == 4 else None
    minutes = _number(digits[2:], 0, 59)
    if hours is None or minutes is None:
        return None
    offset = hours * 60 + minutes
    return -offset if token[0] == "-" else offset


def _yearAndZone(tokens: Sequence[str]) -> tuple[int | None, int | None]:
    """
    The year and zone offset among the tokens after the time, in either
    order; anything else (UUCP's C{remote from host}, a comment such as
    C{(EST)}) ends them.  An unknown alphabetic zone counts as none.
    """
    year: int | None = None
    offset: int | None = None
    for token in tokens[:3]:
        if year is None and _isYear(token):
            year = int(token)
            continue
        if offset is not None:
            break
        offset = _zone(token)
        # An unknown zone name before the year is skipped (UTC).
        if offset is None and not (year is None and _isZoneName(token)):
            break
    return year, offset


def _isYear(token: str) -> bool:
    """
    Whether C{token} is four ASCII digits.
    """
    return len(token) == 4 and token.isascii() and token.isdigit()


def _isZoneName(token: str) -> bool:
    """
    Whether C{token} may be the abbreviation of a zone: up to five ASCII
    letters.
    """
    return token.isascii() and token.isalpha() and len(token) <= 5


def _makeDate(
    year: int | None, month: int, day: int, clock: tuple[int, int, int], offset: int | None
) -> datetime | None:
    """
    An aware datetime, or L{None} when the fields do not make a plausible
    date.
    """
    if year is None or not _EARLIEST_YEAR <= year <= _LATEST_YEAR:
        return None
    tz = timezone.utc if not offset else timezone(timedelta(minutes=offset))
    try:
        return datetime(year, month, day, *clock, tzinfo=tz)
    except ValueError:
        return None


def parseFromLineDate(line: bytes) -> datetime | None:
    """
    The date of an mbox C{From } line, timezone-aware.

    Understood: C{From sender Tue Nov 22 10:00:00 2026} (asctime: the
    weekday is optional, the day may be space-padded, seconds may be
    missing), with a time zone after the year or before it
    (C{... 10:00:00 2026 +0100}, C{... 10:00:00 CET 2026}); and
    C{From sender Tue, 22 Nov 2026 10:00:00 +0100}.  The sender may be
    missing.  Without a known zone, the time is taken as UTC.

    @param line: the C{From } line, with or without its line end.
    @return: the date, or L{None} when none can be read (its year must
        have four digits, 1000 to 9999, as an INTERNALDATE's).
    """
    tokens = line.decode("latin-1").split()
    for i in range(1, len(tokens) - 2):
        month = _month(tokens[i])
        if month is None:
            continue
        for order in (_asctimeOrder, _rfc5322Order):
            fields = order(tokens, i)
            if fields is not None:
                year, day, clock, offset = fields
                return _makeDate(year, month, day, clock, offset)
    return None


# The fields of a date around its month: year, day, time, zone offset.
_Fields = tuple[int | None, int, tuple[int, int, int], int | None]


def _month(word: str) -> int | None:
    """
    The month C{word} names (C{Nov}, in any case), if it names one.
    """
    return _MONTHS.get(word.lower()) if len(word) == 3 else None


def _asctimeOrder(tokens: Sequence[str], i: int) -> _Fields | None:
    """
    The fields of an asctime date whose month is C{tokens[i]}: month day
    time, then the year and the zone in either order; L{None} if the
    tokens are not in this order.
    """
    day = _number(tokens[i + 1], 1, 31)
    clock = _clock(tokens[i + 2])
    if day is None or clock is None:
        return None
    year, offset = _yearAndZone(tokens[i + 3 :])
    return year, day, clock, offset


def _rfc5322Order(tokens: Sequence[str], i: int) -> _Fields | None:
    """
    The fields of an RFC 5322 date whose month is C{tokens[i]}: day month
    year time [zone]; L{None} if the tokens are not in this order.
    """
    if i < 2:
        return None
    day = _number(tokens[i - 1], 1, 31)
    year = _number(tokens[i + 1], 1000, 9999)
    clock = _clock(tokens[i + 2])
    if day is None or year is None or clock is None:
        return None
    offset = _zone(tokens[i + 3]) if i + 3 < len(tokens) else None
    return year, day, clock, offset
