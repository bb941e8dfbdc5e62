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

__all__ = ["Count", "octets", "plural"]

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
    for unit in _BINARY_UNITS:
        value /= 1024
        if value < 1024:
            break
    return f"{value:.{2 if value < 10 else 1}f} {unit}"


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


class Count(int):
    """
    A count as a log field: an integer (a JSON log writes C{50}, and
    C{jq 'select(.messages > 40)'} works) that a format string writes with
    its noun (C{"{messages}"} gives C{"50 messages"}, C{"{messages:,}"}
    C{"1,234 messages"}), so a line's text reads as before without a
    second field for the words.
    """

    _noun: str
    _nouns: str

    def __new__(cls, count: int, noun: str, nouns: str | None = None) -> Count:
        """
        @param count: how many.
        @param noun: the singular.
        @param nouns: the plural when it is not C{noun + "s"}.
        """
        self = super().__new__(cls, count)
        self._noun = noun
        self._nouns = noun + "s" if nouns is None else nouns
        return self

    def __format__(self, spec: str) -> str:
        """
        The count formatted by C{spec}, then its noun.
        """
        return f"{int(self):{spec}} {self._noun if self == 1 else self._nouns}"
