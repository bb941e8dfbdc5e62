# -*- test-case-name: tests.test_config_presets -*-
"""
Sizes as the configuration writes them: C{35651584}, C{500MB}, C{35MiB}.
"""

from __future__ import annotations

import math
import re

__all__ = ["parseSize"]

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B)?\s*", re.IGNORECASE)

_UNITS = {
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}


def parseSize(value: object) -> tuple[int, str] | tuple[None, str]:
    """
    Read a size in octets: a positive integer, or a number with a suffix
    KB, MB, GB, TB (decimal: 1 MB is 1,000,000 octets) or KiB, MiB, GiB,
    TiB (binary), case-insensitive.

    @return: the size and C{""}, or L{None} and why C{value} is not one.
    """
    usage = "a size in octets, e.g. 35651584, 500MB or 35MiB"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None, f"expected {usage}"
    size = value if isinstance(value, int) else _textSize(value, usage)
    if isinstance(size, str):
        return None, size
    if size < 1:
        return None, f"must be at least 1 octet, not {value!r}"
    return size, ""


def _textSize(value: str, usage: str) -> int | str:
    """
    The octets of a size written as text, or why it is not one.
    """
    match = _SIZE.fullmatch(value)
    if match is None:
        return f"{value!r} is not {usage}"
    unit = _UNITS[match.group(2).upper()] if match.group(2) else 1
    if unit == 1 and "." in match.group(1):
        return f"{value!r} is not a whole number of octets"
    return math.floor(float(match.group(1)) * unit)
