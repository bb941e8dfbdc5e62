# -*- test-case-name: tests.test_sources_mbox -*-
"""
How C{From } lines inside the messages of an mbox file were escaped, and
how they are unescaped (taken out of the mbox source's module, which grew
too big to read; L{imapmig.sources.mbox.stream} unescapes large messages
a slice at a time with the same patterns).
"""

from __future__ import annotations

import enum
import re

__all__ = ["MboxQuoting", "UNESCAPE"]


class MboxQuoting(enum.Enum):
    """
    How C{From } lines inside messages were escaped when the file was
    written.

    @cvar MBOXRD: every line matching C{>*From } got one more C{>}.
    @cvar MBOXO: only lines starting with C{From } got a C{>}.
    """

    MBOXRD = "mboxrd"
    MBOXO = "mboxo"


UNESCAPE = {
    MboxQuoting.MBOXRD: re.compile(rb"^>(>*From )", re.MULTILINE),
    MboxQuoting.MBOXO: re.compile(rb"^>(From )", re.MULTILINE),
}
