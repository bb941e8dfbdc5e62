# -*- test-case-name: tests.test_imap_session,tests.test_imap_pipeline -*-
"""
Mailbox names on the wire: encoded as quoted strings in modified UTF-7 (RFC
3501 5.1.3) for the commands that name a mailbox, and decoded from what
LIST sends.

Split from imapmig/imap/pipeline.py and imapmig/imap/session.py, which
each held half of it.
"""

from __future__ import annotations

import re


def encodeMailboxName(name: str) -> bytes:
    """
    A mailbox name as an IMAP quoted string in modified UTF-7 (RFC 3501
    5.1.3).
    """
    import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

    encoded = name.encode("imap4-utf-7")
    return b'"' + encoded.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def decodeMailboxName(wire: bytes) -> str:
    """
    The name of a mailbox encoded by L{encodeMailboxName}.
    """
    import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

    if wire[:1] == b'"' and wire[-1:] == b'"':
        wire = re.sub(rb"\\(.)", rb"\1", wire[1:-1], flags=re.DOTALL)
    return wire.decode("imap4-utf-7", "replace")


def decodeListedName(name: bytes) -> str:
    """
    A mailbox name from modified UTF-7 (RFC 3501 5.1.3); a name that is
    not valid modified UTF-7 is read as UTF-8.  C{INBOX} is
    case-insensitive and always given as C{"INBOX"}.
    """
    import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

    try:
        decoded = name.decode("imap4-utf-7")
    except (UnicodeError, ValueError):
        decoded = name.decode("utf-8", "replace")
    if decoded.upper() == "INBOX":
        return "INBOX"
    return decoded


def _quotedWire(name: bytes) -> bytes:
    """
    A mailbox name as the server sent it, as a quoted string.
    """
    return b'"' + name.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def mailboxArgument(mailbox: str, wireName: bytes | None) -> bytes:
    """
    How a command names C{mailbox}: as the server listed it (C{wireName},
    quoted), or encoded from its name when L{None}.
    """
    if wireName is None:
        return encodeMailboxName(mailbox)
    return _quotedWire(wireName)
