# -*- test-case-name: tests.test_expected -*-
"""
The INTERNALDATE a message should have, read from the source by code of
its own, so that C{imapmig verify} does not take the source readers' word
for it: a reader that dates a message wrongly (Maildir names before 1980
were once dated by the file's mtime) would otherwise migrate the wrong
date and verify it as right.

Deliberately small and separate from L{imapmig.sources}: the rules are
those of the formats, written again, not imported.
  - Maildir (U{https://cr.yp.to/proto/maildir.html}): a unique name starts
    with the delivery time, in seconds since the start of 1970 UTC, up to
    its first C{.}.
  - mbox: the C{From } line ends with an asctime date
    (C{Thu Jan  1 00:00:00 1970}), UTC unless a numeric offset follows
    the year.  Other spellings (zone names, the RFC 5322 order) give no
    expectation: the reader's date is compared as it is.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["fromLineDate", "maildirDeliveryDate"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()

_ASCTIME = re.compile(
    rb" ([A-Za-z]{3}) +([0-9]{1,2}) ([0-9]{2}):([0-9]{2})(?::([0-9]{2}))? ([1-9][0-9]{3})"
    rb"(?: ([+-])([0-9]{2})([0-9]{2}))?(?: remote from .*)? *$"
)


def maildirDeliveryDate(unique: str) -> datetime | None:
    """
    The delivery time a Maildir unique name starts with, in UTC, or
    L{None} when it starts with no decimal number, or one past the year
    9999 (an INTERNALDATE has four digits for the year).

    @param unique: the name without its info part (C{:2,...}).
    """
    head = unique.partition(".")[0]
    if not head or not all("0" <= c <= "9" for c in head):
        return None
    # Value, not length: leading zeros are allowed, and twelve significant
    # digits already pass the year 9999.
    if len(head.lstrip("0")) > 12:
        return None
    try:
        when = _EPOCH + timedelta(seconds=int(head))
    except OverflowError:
        return None
    return when


def fromLineDate(line: bytes) -> datetime | None:
    """
    The date at the end of an mbox C{From } line, when it is an asctime
    date (with an optional numeric offset after the year, or a UUCP
    C{remote from} tail); L{None} otherwise.

    @param line: the line, without its line end.
    """
    match = _ASCTIME.search(line)
    if match is None:
        return None
    month, day, hour, minute, second, year, sign, zh, zm = match.groups()
    try:
        number = _MONTHS.index(month.decode("ascii").lower()) + 1
    except ValueError:
        return None
    zone = timezone.utc
    if sign is not None:
        minutes = int(zh) * 60 + int(zm)
        zone = timezone(timedelta(minutes=-minutes if sign == b"-" else minutes))
    try:
        return datetime(
            int(year), number, int(day), int(hour), int(minute), min(int(second or 0), 59),
            tzinfo=zone,
        )  # fmt: skip
    except ValueError:
        return None
