# -*- test-case-name: tests.test_sources_maildir -*-
"""
What a Maildir file name says: its unique part, its flags (with Dovecot's
keyword letters, named by the folder's C{dovecot-keywords}), its delivery
time and its size (taken out of the Maildir source's module, which grew
too big to read).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Callable

from imapmig.errors import LeavesTree
from imapmig.mail.message import maildirFlags
from imapmig.sources.local import OpenTree

__all__ = [
    "flagsOf",
    "LARGEST_SIZE",
    "leadingTimestamp",
    "nameFields",
    "nameFieldsPython",
    "readKeywords",
    "sizeField",
    "splitName",
]

# The Maildir specification starts a unique name with the delivery time in
# seconds since the start of 1970 (UTC): any such integer is honoured, from
# 0 (1970-01-01, which an INTERNALDATE expresses) up to the last second an
# INTERNALDATE's four-digit year can carry (9999-12-31 23:59:59).  A larger
# integer (a counter, milliseconds) holds no usable time.
_LATEST = 253402300800
LATEST_DIGITS = len(str(_LATEST))

_SIZE_FIELD = re.compile(r",S=([0-9]+)")


def splitName(name: str) -> tuple[str, str | None]:
    """
    Split a Maildir file name into its unique part and its flag letters.

    @return: the unique part, and the letters after C{2,} (L{None} when the
        name has no C{2,} info).  The info starts at the first C{:}; some
        platforms write C{!} or C{;} instead, recognised only before C{2,}.
    """
    i = name.find(":")
    if i < 0:
        i = name.rfind("!2,")
        if i < 0:
            i = name.rfind(";2,")
            if i < 0:
                return name, None
    if name.startswith("2,", i + 1):
        return name[:i], name[i + 3 :]
    return name[:i], None


def flagsOf(letters: str | None, keywords: dict[str, str]) -> tuple[str, ...]:
    """
    The IMAP flags of Maildir info letters: the system flags (C{P},
    "passed", has no IMAP counterpart and is dropped), then the keywords of
    Dovecot's lowercase letters, in letter order.

    @param letters: the letters (L{None} for a name without info).
    @param keywords: the folder's C{dovecot-keywords}: lower-case letter
        to keyword.
    """
    if not letters:
        return ()
    # The keywords' letters are a to z (see readKeywords).
    return maildirFlags(letters) + tuple(keywords[c] for c in sorted(set(letters)) if c in keywords)


# Dovecot names at most 26 keywords per folder, letters a-z, in this file.
KEYWORDS_FILE = "dovecot-keywords"


def readKeywords(tree: OpenTree, folder: str) -> dict[str, str]:
    """
    Read a folder's C{dovecot-keywords} file: lines C{"<index> <keyword>"},
    index 0 being letter C{a}.

    @param tree: the Maildir, open.
    @param folder: the folder's directory, relative to the Maildir.
    @return: letter to keyword; empty when there is no such file (a Maildir
        not written by Dovecot) or it is not a regular file inside the
        Maildir, and malformed lines are skipped.
    """
    lines = _keywordsFile(tree, folder).splitlines()
    return dict(keyword for keyword in map(_keywordLine, lines) if keyword is not None)


def _keywordLine(line: bytes) -> tuple[str, str] | None:
    """
    The letter and keyword of a line of C{dovecot-keywords}; L{None} for
    a malformed line.
    """
    index, _, name = line.strip().partition(b" ")
    if not index.isdigit() or not name or int(index) >= 26:
        return None
    try:
        return chr(ord("a") + int(index)), name.strip().decode("utf-8")
    except UnicodeDecodeError:
        return None


def _keywordsFile(tree: OpenTree, folder: str) -> bytes:
    """
    The content of a folder's C{dovecot-keywords} file; empty when there is
    none or it is not a regular file inside the Maildir.
    """
    try:
        fd = tree.open(os.path.join(folder, KEYWORDS_FILE))
    except (OSError, LeavesTree):
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, 64 * 1024)
    except OSError:
        return b""
    finally:
        os.close(fd)


def leadingTimestamp(unique: str) -> int | None:
    """
    The delivery time in a unique name such as C{1700000000.M123P45.host}:
    its leading integer, seconds since 1970-01-01 UTC as the Maildir
    specification says, at any date an INTERNALDATE can express (1970 to
    9999; L{_LATEST}).  L{None} when the name starts with no integer or one
    beyond year 9999: only then has the name no usable time (and the
    caller falls back to the file's mtime).
    """
    dot = unique.find(".")
    head = unique if dot < 0 else unique[:dot]
    # The common case: at most 11 digits (before the year 5138), all
    # within range.
    if 0 < len(head) < LATEST_DIGITS and head.isascii() and head.isdigit():
        return int(head)
    return _longTimestamp(head)


def _longTimestamp(head: str) -> int | None:
    """
    L{leadingTimestamp} of a head of 12 digits or more (or none).
    """
    # By value, not length: leading zeros are allowed (as verify's own
    # reading, imapmig.commands.expected, allows them).
    if head.isascii() and head.isdigit() and len(head.lstrip("0")) <= LATEST_DIGITS:
        when = int(head)
        if when < _LATEST:
            return when
    return None


# The largest size a file can have (an off_t's): a C{,S=} field beyond it
# says nothing of the file, whose status gives its size instead (where an
# SQLite or PostgreSQL integer would not hold it).
LARGEST_SIZE = 2**63 - 1


def sizeField(unique: str) -> int | None:
    """
    The size in the C{,S=NNNN} field of a unique name, if any: the first
    such field, unless beyond L{LARGEST_SIZE}.
    """
    if ",S=" not in unique:
        return None
    match = _SIZE_FIELD.search(unique)
    if match is None:
        return None
    size = int(match.group(1))
    return size if size <= LARGEST_SIZE else None


def nameFieldsPython(unique: str, /) -> tuple[float | None, int | None]:
    """
    What a unique name says of its message: its delivery time
    (L{leadingTimestamp}, as a float: exact, at most 12 digits) and its
    size (L{sizeField}), each L{None} where the name does not say; the
    reference of the C extension's L{nameFields}, and its stand-in where
    it was not built.
    """
    # Where the extension is not built, once per message: the common cases
    # inline (a call costs about 500 instructions).
    head = unique.partition(".")[0]
    when: float | None
    if 0 < len(head) < LATEST_DIGITS and head.isascii() and head.isdigit():
        when = float(head)
    else:
        whole = leadingTimestamp(unique)
        when = None if whole is None else float(whole)
    return when, (sizeField(unique) if ",S=" in unique else None)


nameFields: Callable[[str], tuple[float | None, int | None]]
"""
L{nameFieldsPython}, in C where the extension L{imapmig.sources._listing}
was built (once per message of a Maildir listing: about 2,000 instructions
in Python).
"""

try:
    from imapmig.sources._listing import nameFields
except ImportError:
    nameFields = nameFieldsPython
