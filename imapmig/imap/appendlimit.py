# -*- test-case-name: tests.test_imap_appendlimit -*-
"""
The largest message a destination accepts: its C{APPENDLIMIT} (RFC 7889)
and the configured C{max_message_size} of its server.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["advertisedAppendLimit", "messageSizeLimit"]

_PREFIX = b"APPENDLIMIT="


def advertisedAppendLimit(capabilities: Iterable[bytes]) -> int | None:
    """
    The limit of C{APPENDLIMIT=n} among C{capabilities} (upper-case, as
    L{imapmig.imap.session.IMAPSession.capabilities} holds them), or
    L{None}: absent, or C{APPENDLIMIT} alone, which says each mailbox has
    its own limit (not asked for here), or a value that is not a number.
    """
    for capability in capabilities:
        if capability.upper().startswith(_PREFIX):
            value = capability[len(_PREFIX) :]
            if value.isdigit():
                return int(value)
    return None


def messageSizeLimit(
    capabilities: Iterable[bytes], configured: int | None
) -> tuple[int, str] | None:
    """
    The largest message to APPEND, and where that limit comes from: the
    smaller of the server's C{APPENDLIMIT} and the configured
    C{max_message_size}; L{None} if neither is set.
    """
    advertised = advertisedAppendLimit(capabilities)
    if advertised is not None and (configured is None or advertised <= configured):
        return advertised, "the server's APPENDLIMIT"
    if configured is not None:
        return configured, "the server's max_message_size setting"
    return None
