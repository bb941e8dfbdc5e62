"""
Instructions per octet of ways to check that a body is CRLF throughout,
on bodies of the realistic corpus made CRLF (as an IMAP server sends them).

    valgrind --tool=callgrind .venv/bin/python -m bench.s2s_crlfcheck WAY [COUNT]

WAY is C{none} (only loading the bodies: subtract its count), C{counts}
(C{toCRLF}'s two C{bytes.count}), C{asCRLF} (L{imapmig.sources.imap.asCRLF}),
C{crcr} (C{replace(b"\\r\\n", b"\\r\\r")} then looking for LF) or
C{pairsGone} (C{replace(b"\\r\\n", b"")} then looking for CR and LF); COUNT is
how many bodies (default 400).  It prints the octets checked, to divide the
difference of two counts by.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from imapmig.sources.imapreading import asCRLF


def _counts(body: bytes) -> bool:
    return body.count(b"\r\n") == body.count(b"\n")


def _asCRLF(body: bytes) -> bool:
    return asCRLF(body) is body


def _crcr(body: bytes) -> bool:
    return 10 not in body.replace(b"\r\n", b"\r\r")


def _pairsGone(body: bytes) -> bool:
    rest = body.replace(b"\r\n", b"")
    return 13 not in rest and 10 not in rest


WAYS: dict[str, Callable[[bytes], object]] = {
    "none": lambda body: None,
    "counts": _counts,
    "asCRLF": _asCRLF,
    "crcr": _crcr,
    "pairsGone": _pairsGone,
}


def main() -> None:
    way = WAYS[sys.argv[1]]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    here = os.path.dirname(os.path.abspath(__file__))
    cur = os.path.join(here, "work", "corpus", "realistic-5000-seed1", "Maildir", "cur")
    bodies = []
    for name in sorted(os.listdir(cur))[:count]:
        with open(os.path.join(cur, name), "rb") as f:
            bodies.append(f.read().replace(b"\n", b"\r\n"))
    for body in bodies:
        way(body)
    print(sum(map(len, bodies)), "octets in", len(bodies), "bodies")


if __name__ == "__main__":
    main()
