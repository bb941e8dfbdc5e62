# -*- test-case-name: tests.test_imap_auth,tests.test_imap_oauth -*-
"""
Logging in on one connection: the server's capabilities, and the
LOGIN or AUTHENTICATE exchange that carries a user's credentials.

Split from imapmig/imap/session.py; the mechanisms themselves are
L{imapmig.imap.auth}'s.
"""

from __future__ import annotations

from typing import Any


def capabilitySet(caps: dict[bytes, Any] | None) -> frozenset[bytes]:
    """
    Twisted's capability mapping as a flat set: C{{b"AUTH": [b"PLAIN"],
    b"IDLE": None}} becomes C{{b"AUTH=PLAIN", b"IDLE"}}, all upper-case.
    """
    result: set[bytes] = set()
    for name, values in (caps or {}).items():
        name = name.upper()
        if values is None:
            result.add(name)
        else:
            for value in values:
                result.add(name if value is None else name + b"=" + value.upper())
    return frozenset(result)


def capabilitiesInReply(reply: bytes) -> frozenset[bytes] | None:
    """
    The capabilities of a C{CAPABILITY} response code in a tagged C{OK}
    (C{b"OK [CAPABILITY IMAP4rev1 LITERAL+] Logged in"}), upper-cased as
    L{capabilitySet} gives them, or L{None} when the reply has none.
    """
    if reply[:15].upper() != b"OK [CAPABILITY ":
        return None
    end = reply.find(b"]", 15)
    if end == -1:
        return None
    return frozenset(atom.upper() for atom in reply[15:end].split())


def quotedString(value: str) -> bytes:
    return b'"' + value.encode("ascii").replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
