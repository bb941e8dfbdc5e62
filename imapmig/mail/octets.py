# -*- test-case-name: tests.test_mail_octets -*-
"""
The one pass over a message's octets: CRLF line endings, and what the
octets hold that decides how they travel (NUL and 8-bit octets for the
literal or C{literal8} decision, bare CR and LF), found once where a source
reads the message and carried with it (L{imapmig.mail.message.ReadBodies}),
so that no later stage looks at every octet again.

Before, a Maildir message took five passes: the CR scan, the two of
C{bytes.replace} (a C{memchr} and a C{memcpy} per line), the NUL scan and
C{isascii}, about 115k of its 212k instructions (C{bench/results/cpu.md},
"Third round").  No standard library call does them at once: the C
extension L{imapmig.mail._octets} does (built where a compiler is, see
docs/install.md); where it is not built, L{crlfAndFactsPython} gives the
same results with those passes.  This module replaces C{toCRLF}'s,
C{_crlfPiece}'s and C{needsBinary}'s scans of the body.
"""

from __future__ import annotations

__all__ = [
    "BARE_CR",
    "BARE_LF",
    "EIGHT_BIT",
    "ENDS_CR",
    "NUL",
    "UNKNOWN",
    "compiled",
    "crlfAndFacts",
    "crlfAndFactsPython",
]

NUL = 1
"""
A fact: the octets hold a NUL (only a C{literal8} carries it).
"""

EIGHT_BIT = 2
"""
A fact: the octets hold an octet above 0x7F.
"""

BARE_CR = 4
"""
A fact: the octets hold a CR not followed by an LF (kept as it is; a CR
ending the whole message is one).
"""

BARE_LF = 8
"""
A fact: the octets held an LF not preceded by a CR, which was given one
(the converted octets differ from those given).
"""

ENDS_CR = 16
"""
A fact of a piece that is not the last (C{last=False}): it ends with a CR,
which is bare or not depending on the next piece; pass C{afterCR=True}
with that piece.
"""

UNKNOWN = 128
"""
Not a result of L{crlfAndFacts}: where facts are carried (a byte per
body), a body whose octets were not looked at.
"""


def crlfAndFactsPython(data: bytes, afterCR: bool = False, last: bool = True) -> tuple[bytes, int]:
    """
    C{data} with a CR before every LF not preceded by one (C{data} itself,
    uncopied, when no LF needs one), and the facts found in it: L{NUL},
    L{EIGHT_BIT}, L{BARE_CR}, L{BARE_LF} and L{ENDS_CR} or'ed together.
    Every other octet, a bare CR included, is kept as it is.

    A message read whole is given alone.  A message read in pieces is
    given piece by piece, each but the last with C{last=False}, each after
    one whose facts have L{ENDS_CR} with C{afterCR=True} (its leading LF
    already has its CR); the pieces converted, joined, are the message
    converted, and their facts or'ed together (less L{ENDS_CR}) are the
    message's.

    This is the reference, in Python with C{bytes} methods, and what
    L{crlfAndFacts} is where the C extension was not built: a body with no
    CR at all (the common case) costs what the passes it replaces cost
    (two C{memchr}, C{isascii} and C{replace}'s two).  The C extension's
    gives the same results in one pass over most bodies (one read-only
    pass over those that need no CR added, and two over those with CRs
    that also need some; C{imapmig/mail/_crlf.c}); C{tests.test_mail_octets}
    runs both on the same bodies.

    @param data: the octets as stored.
    @param afterCR: the octet before C{data} was a CR.
    @param last: C{data} ends the message (else a CR at its end is not yet
        known to be bare: L{ENDS_CR}).
    @return: the converted octets and the facts.
    """
    facts = NUL if 0 in data else 0
    if not data.isascii():
        facts |= EIGHT_BIT
    leadingLF = afterCR and data[:1] == b"\n"
    if afterCR and data and not leadingLF:
        facts |= BARE_CR
    if 13 in data:
        converted, found = _withCR(data, leadingLF)
        facts |= found
        endsCR = data[-1] == 13
    else:
        converted = data.replace(b"\n", b"\r\n")
        if leadingLF:
            converted = converted[1:]
        endsCR = afterCR and not data
    if len(converted) != len(data):
        facts |= BARE_LF
    if endsCR:
        facts |= BARE_CR if last else ENDS_CR
    return converted, facts


def _withCR(data: bytes, leadingLF: bool) -> tuple[bytes, int]:
    """
    L{crlfAndFactsPython} of octets that hold a CR: converted, and
    L{BARE_CR} if a CR in them is followed by another octet than LF.

    @param leadingLF: they start with an LF that has its CR already.
    """
    # CRLF throughout (what IMAP servers send) is told by deleting the CRs
    # and giving each LF one: C{replace} of one octet runs C{memchr} from
    # line end to line end, the compare is a C{memcmp}; C{count} of one
    # octet would loop over every octet.
    if not leadingLF and data.replace(b"\r", b"").replace(b"\n", b"\r\n") == data:
        return data, 0
    crlfs = data.count(b"\r\n")
    facts = BARE_CR if data.count(b"\r") - crlfs - (data[-1] == 13) else 0
    if not data.count(b"\n") - crlfs - leadingLF:
        return data, facts
    converted = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    return (converted[1:] if leadingLF else converted), facts


compiled: bool
"""
Whether L{crlfAndFacts} is the C extension's (L{imapmig.mail._octets}).
"""

try:
    from imapmig.mail._octets import crlfAndFacts
except ImportError:
    compiled = False
    crlfAndFacts = crlfAndFactsPython
else:
    compiled = True
