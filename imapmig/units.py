# -*- test-case-name: tests.test_units -*-
"""
Sizes and counts as the admin reads them, alike on the console, in the
logs and on the status page.

Sizes are in binary units (KiB, MiB, GiB, TiB, PiB: powers of 1024), as
the dashboard shows them (C{bytes()} in C{status/static/dashboard.js}),
with the same precision: two decimals below 10, one above.  A leaf:
imports nothing of imapmig.
"""

from __future__ import annotations

__all__ = ["octets", "plural"]

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def octets(size: int | float) -> str:
    """
    C{size} octets for a reader: C{"512 B"}, C{"1.50 KiB"}, C{"35.0 MiB"}.

    @param size: a number of octets, not negative.
    @return: the size in the largest binary unit that keeps it at 1 or
        more (up to PiB); octets below 1 KiB.
    """
    if size < 1024:
        return f"{int(size)} B"
    value = float(size)
    unit = -1
    while True:
        value /= 1024
        unit += 1
        if value < 1024 or unit == len(_BINARY_UNITS) - 1:
            break
    return f"{value:.{2 if value < 10 else 1}f} {_BINARY_UNITS[unit]}"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """
    C{count} and the noun that goes with it: C{"1 job"}, C{"0 jobs"},
    C{"2 mailboxes"}.

    @param count: how many.
    @param noun: the singular.
    @param nouns: the plural when it is not C{noun + "s"}.
    @return: C{"<count> <noun>"}.
    """
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {nouns if nouns is not None else noun + 's'}"
