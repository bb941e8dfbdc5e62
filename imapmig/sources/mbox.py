# -*- test-case-name: tests.test_sources_mbox -*-
"""
Mailbox files in the mbox family (mboxrd, mboxo, mboxcl, mboxcl2), one file
per folder, as a L{imapmig.sources.IMessageSource}.

Files and folders
=================
The source's path is either one mbox file, which is the single folder
C{INBOX} (key C{""}), or a directory of mbox files, as Thunderbird,
Evolution, mutt, Apple Mail exports and most archiving tools write them:

  - each regular file is one folder, named after its file name with a
    trailing C{.mbox} or C{.mbx} (in any case) removed.  Names are taken
    as they are on disk (UTF-8; a name that is not UTF-8 is carried in the
    reversible form of L{imapmig.sources.local.carriedName}, and a
    warning names it).  At the top level, a file named C{Inbox} (in any
    case) is C{INBOX};
  - a subdirectory C{X.sbd/} (Thunderbird), C{X.mbox/} or plain C{X/} holds
    the children of folder C{X}: C{X.sbd/child} is the folder
    C{("X", "child")}.  A parent that has no file of its own is not
    invented (the destination side creates it);
  - in a directory C{X.mbox/}, a file named exactly C{mbox} is the folder
    C{X} itself, and C{table_of_contents} is skipped: this is how Apple
    Mail exports a mailbox.  When the source's path is such a directory,
    its C{mbox} file is C{INBOX};
  - names starting with C{.} are skipped, as are Thunderbird's C{.msf}
    index files and the few metadata files Thunderbird keeps beside its
    mailboxes (C{msgFilterRules.dat}, C{popstate.dat}, C{filterlog.html},
    C{junklog.html}, C{feeds.json}, C{feeditems.json},
    C{virtualFolders.dat}).  Symbolic links to files inside the directory
    are followed; to directories inside it not (their target is listed
    where it is);
  - a folder's key is its file's path relative to the directory, with C{/}
    separators (C{Archive.sbd/2019}).  Two files may give the same folder
    name (C{Sent} and C{Sent.mbox}): they stay two folders with distinct
    keys, migrated into the same mailbox.

Top-level folders with a well-known name (C{Sent}, C{Drafts}, C{Trash},
C{Junk}, C{Archive}, ...) carry their RFC 6154 attribute, as for a Maildir.

A file that does not start with C{From } is not an mbox: listing its
messages fails with L{SourceError} naming it (which fails the job).  An
empty file is an empty folder.  Nothing is skipped silently: an entry that
is not a regular file (a FIFO, a socket, a device), or a symbolic link
leading out of the directory (to a file or a directory), to nothing or
into a loop, is listed as a folder (named as a file would be) whose
listing fails with L{SourceError} saying why; so does a file that cannot
be read.  A directory that cannot be listed fails L{listFolders}.  Files
are opened beneath the directory as L{imapmig.sources.local} describes.

Messages
========
A message starts at a line beginning with C{From } (at the start of the
file or after an LF; the rest of that line is the envelope sender and
date) and ends where the next such line starts, or at the end of the file.
Its content is what lies between, with one rule: writers put an empty line
between messages, so content ending with an empty line (C{LF LF}) loses
exactly one LF, and content ending with C{CR LF CR LF} (an mbox with CRLF
line ends) loses one C{CR LF}; content ending with a single line end, or
with none (the last message of a file may have no final newline), is kept
whole.  This applies to the last message of the file too.  (A message whose
own body ends with an empty line therefore loses it: the format cannot tell
the two apart.)

Content-Length (mboxcl, mboxcl2): when a message's header (up to its first
empty line) has a C{Content-Length: N} field, and the C{N} octets after the
empty line end exactly at the end of the file (optionally followed by one
empty line), or right before a C{From } line (optionally after one empty
line), the message is exactly those octets: C{From } lines inside it are
not separators, and nothing in it is unescaped (C{>From } lines an mboxcl
writer escaped stay as written).  Otherwise the field is ignored (it is
often wrong) and the message ends at the next C{From } line.

Quoting (the C{quoting} argument), for messages not delimited by
Content-Length:
  - C{mboxrd} (the default; mutt, Python's C{mailbox}, Dovecot, most
    exporters): every line matching C{>*From } was written with one more
    C{>}; every line starting with one or more C{>} then C{From } loses one
    C{>}.  This is lossless;
  - C{mboxo}: only C{From } lines were escaped, as C{>From }; a line
    starting with exactly C{>From } loses its C{>}, lines with more C{>}
    are kept.  A body line that really was C{>From } cannot be told apart
    and also loses its C{>}.
Nothing else in a message is changed: headers, NUL and 8-bit octets pass
through as they are; line ends become CRLF, as IMAP requires.

Each message's:
  - key is the decimal byte offset of its C{From } line in the file.  It
    stays the same as long as the file is only appended to (the usual case
    for exports and archives); a file rewritten in place (a mail client
    compacting it after deleting messages) gives other keys, and the
    messages would be migrated again;
  - size is the exact number of octets of its content after unescaping and
    before conversion to CRLF;
  - INTERNALDATE comes from the C{From } line: an asctime date such as
    C{Tue Nov 22 10:00:00 2026} (the day may be space-padded, the seconds
    may be missing) followed by the year and an optional time zone in
    either order (C{2026 +0100}, C{CET 2026}, C{2026 UTC}), or a date in
    the C{22 Nov 2026 10:00:00 +0100} order.  A numeric offset or a common
    zone abbreviation (C{UTC}, C{GMT}, C{CET}, C{CEST}, C{EST}, C{PDT},
    ...) is honoured; a date without one, or with one that is unknown or
    ambiguous (C{IST}), is taken as UTC.  Any four-digit year is honoured
    (the one an INTERNALDATE carries), before 1970 and after 2099
    included; a date that cannot be read, or whose year has not four
    digits, leaves the INTERNALDATE to the server;
  - flags come from its header section only (up to its first empty line,
    or the next C{From } line; never its body): C{Status:}
    C{R} is C{\\Seen} (C{O}, "old", is no flag); C{X-Status:} C{A} is
    C{\\Answered}, C{F} C{\\Flagged}, C{T} C{\\Draft}, C{D} C{\\Deleted};
    Thunderbird's C{X-Mozilla-Status:} (hexadecimal) 0x1 is C{\\Seen}, 0x2
    C{\\Answered}, 0x4 C{\\Flagged}, 0x8 C{\\Deleted} (deleted but not yet
    compacted away), 0x1000 the keyword C{$Forwarded}; C{X-Keywords:}
    (Dovecot and others) and C{X-Mozilla-Keys:} (Thunderbird tags) hold
    keywords separated by commas or spaces, kept as they are.  A keyword
    that is not a valid IMAP atom (non-ASCII, or containing one of
    C{( ) { % * " \\ ]} or a control character) is dropped.  Field names
    match in any case; the first C{Status}, C{X-Status} and
    C{X-Mozilla-Status} field counts, keywords come from every keyword
    field, each once (compared case-insensitively).  System flags come
    first, in the order C{\\Draft \\Flagged \\Answered \\Seen \\Deleted},
    then keywords in the order found.

Messages come in file order.

Listing reads each file once, in chunks of 1 MiB, finding separators with
C{bytes.find}; only the C{From} line and the header of each message are
copied out, and at most 256 KiB of a header is examined.  Bodies are read
just before they are sent, one C{pread} each, whole; a message larger than
4 MiB is not held in memory: it is read once to count its size, and sent
from its region of the file a slice at a time, unescaped and converted as
it is read (L{imapmig.sources.mboxstream}).  Before reading, the source checks
that the message's C{From } line is still the same at its offset, that the
next message's C{From} line is still where it was, and that the file
still holds the whole message: a file rewritten or truncated since the
listing gives L{UnreadableMessage}s rather than wrong messages (a rewrite
that keeps all of these in place cannot be noticed).  Files are
read on the calling thread, with blocking system calls.
"""

from __future__ import annotations

import enum
import errno
import os
import re
import stat
import zlib
from array import array
from bisect import bisect_left
from datetime import datetime, timedelta, timezone
from typing import Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from attrs import frozen
from twisted.logger import Logger

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    toCRLF,
)
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    FILE_FLAGS,
    LARGE_MESSAGE,
    READ_CHUNK,
    LeavesTree,
    OpenTree,
    carriedName,
    fileKind,
    hasUndecodable,
    linkProblem,
    notRegular,
)
from imapmig.sources.maildir import SPECIAL_USE
from imapmig.sources.mboxstream import RegionBody

__all__ = ["MboxSource", "MboxQuoting", "parseFromLineDate"]

log = Logger()


class MboxQuoting(enum.Enum):
    """
    How C{From } lines inside messages were escaped when the file was
    written.

    @cvar MBOXRD: every line matching C{>*From } got one more C{>}.
    @cvar MBOXO: only lines starting with C{From } got a C{>}.
    """

    MBOXRD = "mboxrd"
    MBOXO = "mboxo"


# Octets read per system call while listing.
_CHUNK = 1024 * 1024

# At most this much of a message's header is examined for flags and a
# Content-Length field.
_HEADER_LIMIT = 256 * 1024

# At most this much of a From line is examined for its date.
_FROM_LINE_LIMIT = 1000

# Searches over at most this many octets keep their range in view.
_KEEP = _HEADER_LIMIT + 2 * _FROM_LINE_LIMIT

_SEPARATOR = b"\nFrom "
_ESCAPED = b">From "

_UNESCAPE = {
    MboxQuoting.MBOXRD: re.compile(rb"^>(>*From )", re.MULTILINE),
    MboxQuoting.MBOXO: re.compile(rb"^>(From )", re.MULTILINE),
}

# Files Thunderbird keeps beside its mailboxes, which are not mailboxes
# (lower-cased).
_THUNDERBIRD_METADATA = frozenset(
    [
        "msgfilterrules.dat",
        "popstate.dat",
        "filterlog.html",
        "junklog.html",
        "feeds.json",
        "feeditems.json",
        "virtualfolders.dat",
    ]
)

# Suffixes removed from folder names, lower-case: for files, and for the
# directories holding a folder's children.
_FILE_SUFFIXES = (".mbox", ".mbx")
_DIRECTORY_SUFFIXES = (".sbd", ".mbox", ".mbx")

# Apple Mail's export: X.mbox/mbox is folder X, with an index beside it.
_BUNDLE_FILE = "mbox"
_BUNDLE_INDEX = "table_of_contents"


# Header fields carrying flags, each looked for at the start of a line
# (the header is searched lower-cased, with an LF prepended).
_STATUS = b"\nstatus:"
_X_STATUS = b"\nx-status:"
_X_KEYWORDS = b"\nx-keywords:"
_X_MOZILLA_STATUS = b"\nx-mozilla-status:"
_X_MOZILLA_KEYS = b"\nx-mozilla-keys:"
_FLAG_FIELDS = (_STATUS, _X_STATUS, _X_KEYWORDS, _X_MOZILLA_STATUS, _X_MOZILLA_KEYS)
_CONTENT_LENGTH = b"\ncontent-length:"

# System flags in the order they are given (that of the Maildir letters
# D F R S T).
_FLAG_ORDER = ("\\Draft", "\\Flagged", "\\Answered", "\\Seen", "\\Deleted")
_STATUS_LETTERS = ((b"R", "\\Seen"),)
_X_STATUS_LETTERS = (
    (b"A", "\\Answered"),
    (b"F", "\\Flagged"),
    (b"T", "\\Draft"),
    (b"D", "\\Deleted"),
)
_MOZILLA_BITS = ((0x1, "\\Seen"), (0x2, "\\Answered"), (0x4, "\\Flagged"), (0x8, "\\Deleted"))
_MOZILLA_FORWARDED = 0x1000

# The octets an IMAP atom may hold (RFC 3501: any CHAR except
# atom-specials), for keywords.
_ATOM_OCTETS = bytes(c for c in range(0x21, 0x7F) if c not in b'(){%*"\\]')

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}

# Time zone abbreviations, in minutes east of UTC; ambiguous ones (IST)
# are left out.  CST is US Central, as in RFC 822.
_ZONES = {
    "UT": 0,
    "UTC": 0,
    "GMT": 0,
    "Z": 0,
    "WET": 0,
    "BST": 60,
    "WEST": 60,
    "CET": 60,
    "MET": 60,
    "CEST": 120,
    "MEST": 120,
    "EET": 120,
    "EEST": 180,
    "MSK": 180,
    "EST": -300,
    "EDT": -240,
    "CST": -360,
    "CDT": -300,
    "MST": -420,
    "MDT": -360,
    "PST": -480,
    "PDT": -420,
    "AKST": -540,
    "AKDT": -480,
    "HST": -600,
    "HKT": 480,
    "SGT": 480,
    "AWST": 480,
    "JST": 540,
    "KST": 540,
    "ACST": 570,
    "ACDT": 630,
    "AEST": 600,
    "AEDT": 660,
    "NZST": 720,
    "NZDT": 780,
}

# Any year an INTERNALDATE can carry (RFC 3501 date-year is 4DIGIT) is the
# From_ line's to give: a date before 1970 (a negative time_t, 1901-12-13
# from a 32-bit clamp) or after 2099 is still the date the source holds.
# What the destination does with it is the destination's (verify shows it).
_EARLIEST_YEAR = 1000
_LATEST_YEAR = 9999


def _number(token: str, low: int, high: int) -> int | None:
    """
    The integer C{token} spells in ASCII digits, if it lies in
    [C{low}, C{high}].
    """
    if not (token.isascii() and token.isdigit()):
        return None
    value = int(token)
    return value if low <= value <= high else None


def _clock(token: str) -> tuple[int, int, int] | None:
    """
    Hours, minutes and seconds of C{HH:MM:SS} or C{HH:MM} (a leap second
    becomes 59).
    """
    parts = token.split(":")
    if not 2 <= len(parts) <= 3:
        return None
    hour = _number(parts[0], 0, 23)
    minute = _number(parts[1], 0, 59)
    second = _number(parts[2], 0, 60) if len(parts) == 3 else 0
    if hour is None or minute is None or second is None:
        return None
    return hour, minute, min(second, 59)


def _zone(token: str) -> int | None:
    """
    The offset in minutes east of UTC of a zone token (C{+0100},
    C{-05:00}, C{CET}), or L{None} if C{token} is none.
    """
    if token[:1] in ("+", "-"):
        digits = token[1:].replace(":", "", 1)
        if len(digits) != 4:
            return None
        hours = _number(digits[:2], 0, 14)
        minutes = _number(digits[2:], 0, 59)
        if hours is None or minutes is None:
            return None
        offset = hours * 60 + minutes
        return -offset if token[0] == "-" else offset
    return _ZONES.get(token.upper())


def _yearAndZone(tokens: Sequence[str]) -> tuple[int | None, int | None]:
    """
    The year and zone offset among the tokens after the time, in either
    order; anything else (UUCP's C{remote from host}, a comment such as
    C{(EST)}) ends them.  An unknown alphabetic zone counts as none.
    """
    year: int | None = None
    offset: int | None = None
    for token in tokens[:3]:
        if year is None and len(token) == 4 and token.isascii() and token.isdigit():
            year = int(token)
            continue
        if offset is None:
            offset = _zone(token)
            if offset is not None:
                continue
            if year is None and token.isascii() and token.isalpha() and len(token) <= 5:
                # An unknown zone name before the year: skip it (UTC).
                continue
        break
    return year, offset


def _makeDate(
    year: int | None, month: int, day: int, clock: tuple[int, int, int], offset: int | None
) -> datetime | None:
    """
    An aware datetime, or L{None} when the fields do not make a plausible
    date.
    """
    if year is None or not _EARLIEST_YEAR <= year <= _LATEST_YEAR:
        return None
    tz = timezone.utc if not offset else timezone(timedelta(minutes=offset))
    try:
        return datetime(year, month, day, *clock, tzinfo=tz)
    except ValueError:
        return None


def parseFromLineDate(line: bytes) -> datetime | None:
    """
    The date of an mbox C{From } line, timezone-aware.

    Understood: C{From sender Tue Nov 22 10:00:00 2026} (asctime: the
    weekday is optional, the day may be space-padded, seconds may be
    missing), with a time zone after the year or before it
    (C{... 10:00:00 2026 +0100}, C{... 10:00:00 CET 2026}); and
    C{From sender Tue, 22 Nov 2026 10:00:00 +0100}.  The sender may be
    missing.  Without a known zone, the time is taken as UTC.

    @param line: the C{From } line, with or without its line end.
    @return: the date, or L{None} when none can be read (its year must
        have four digits, 1000 to 9999, as an INTERNALDATE's).
    """
    tokens = line.decode("latin-1").split()
    for i in range(1, len(tokens) - 2):
        word = tokens[i]
        if len(word) != 3:
            continue
        month = _MONTHS.get(word.lower())
        if month is None:
            continue
        # asctime: month day time [year/zone in either order]
        day = _number(tokens[i + 1], 1, 31)
        clock = _clock(tokens[i + 2])
        if day is not None and clock is not None:
            year, offset = _yearAndZone(tokens[i + 3 :])
            return _makeDate(year, month, day, clock, offset)
        # RFC 5322 order: day month year time [zone]
        if i >= 2:
            day = _number(tokens[i - 1], 1, 31)
            year = _number(tokens[i + 1], 1000, 9999)
            clock = _clock(tokens[i + 2])
            if day is not None and year is not None and clock is not None:
                offset = _zone(tokens[i + 3]) if i + 3 < len(tokens) else None
                return _makeDate(year, month, day, clock, offset)
    return None


def _fieldValues(header: bytes, lowered: bytes, name: bytes) -> list[bytes]:
    """
    The values of every field called C{name} in a header, unfolded lines
    included, without the line end.

    @param header: the header section with an LF prepended.
    @param lowered: C{header.lower()}.
    @param name: the field's name, lower-case, with the LF before it and
        the colon after it.
    """
    values = []
    at = lowered.find(name)
    while at >= 0:
        start = at + len(name)
        end = header.find(b"\n", start)
        while end >= 0 and header[end + 1 : end + 2] in (b" ", b"\t"):
            end = header.find(b"\n", end + 1)
        if end < 0:
            end = len(header)
        values.append(header[start:end])
        at = lowered.find(name, end)
    return values


def _keywords(values: Sequence[bytes]) -> list[str]:
    """
    The valid IMAP keywords in C{X-Keywords}-like values, separated by
    commas or white space.
    """
    keywords = []
    for value in values:
        for word in value.replace(b",", b" ").split():
            if not word.translate(None, _ATOM_OCTETS):
                keywords.append(word.decode("ascii"))
    return keywords


def _flagsOf(fields: tuple[tuple[bytes, ...], ...]) -> tuple[str, ...]:
    """
    The IMAP flags of the values of the fields in L{_FLAG_FIELDS}, system
    flags first in a fixed order, then keywords in the order found, each
    once (keywords compared case-insensitively, as IMAP does).
    """
    status, xStatus, xKeywords, mozillaStatus, mozillaKeys = fields
    system: set[str] = set()
    keywords: list[str] = []
    for value in status[:1]:
        system.update(flag for letter, flag in _STATUS_LETTERS if letter in value)
    for value in xStatus[:1]:
        system.update(flag for letter, flag in _X_STATUS_LETTERS if letter in value)
    for value in mozillaStatus[:1]:
        try:
            bits = int(value.strip(), 16)
        except ValueError:
            continue
        system.update(flag for bit, flag in _MOZILLA_BITS if bits & bit)
        if bits & _MOZILLA_FORWARDED:
            keywords.append("$Forwarded")
    keywords += _keywords(xKeywords)
    keywords += _keywords(mozillaKeys)
    seen: set[str] = set()
    unique = []
    for keyword in keywords:
        folded = keyword.lower()
        if folded not in seen:
            seen.add(folded)
            unique.append(keyword)
    return tuple(flag for flag in _FLAG_ORDER if flag in system) + tuple(unique)


def _contentLength(header: bytes, lowered: bytes) -> int | None:
    """
    The value of the header's first C{Content-Length} field, if it is a
    number.
    """
    values = _fieldValues(header, lowered, _CONTENT_LENGTH)
    if not values:
        return None
    value = values[0].strip()
    if not (value.isdigit() and len(value) < 19):
        return None
    return int(value)


class _Window:
    """
    A sliding view of an open file, read in chunks of L{_CHUNK} octets with
    C{pread}, never beyond the size the file had when the scan started.

    @ivar size: that size.
    @ivar base: the file offset of C{data}'s first octet.
    @ivar data: the octets in view.
    """

    __slots__ = ("_fd", "size", "base", "data")

    def __init__(self, fd: int, size: int) -> None:
        """
        @param fd: the open file (not owned).
        @param size: its size.
        """
        self._fd = fd
        self.size = size
        self.base = 0
        self.data = b""

    def _read(self, offset: int) -> bytes:
        """
        Up to one chunk from C{offset}, not beyond L{size}.

        @raise OSError: the file got shorter than L{size}.
        """
        count = min(_CHUNK, self.size - offset)
        if count <= 0:
            return b""
        data = os.pread(self._fd, count, offset)
        if len(data) < count:
            raise OSError("the file got shorter while being read")
        return data

    def _moveTo(self, offset: int) -> None:
        """
        Make the view start at C{offset} unless it already holds it.
        """
        if not self.base <= offset <= self.base + len(self.data):
            self.base = offset
            self.data = self._read(offset)

    def _extend(self, keepFrom: int) -> bool:
        """
        Read the next chunk into view, dropping what lies before
        C{keepFrom}.

        @return: whether there was more to read.
        """
        end = self.base + len(self.data)
        more = self._read(end)
        if not more:
            return False
        if keepFrom >= end:
            self.data = more
        else:
            self.data = self.data[keepFrom - self.base :] + more
        self.base = keepFrom if keepFrom < end else end
        return True

    def find(self, needle: bytes, start: int, limit: int) -> int:
        """
        The offset of the first C{needle} lying entirely within
        [C{start}, C{limit}), or -1.

        A short search (a header's) keeps its whole range in view, for the
        slices that follow; a long one keeps only what it has not searched
        yet.
        """
        keep = start if limit - start <= _KEEP else -1
        limit = min(limit, self.size)
        self._moveTo(start)
        pos = start
        while True:
            base = self.base
            end = base + len(self.data)
            found = self.data.find(needle, pos - base, min(end, limit) - base)
            if found >= 0:
                return base + found
            if end >= limit:
                return -1
            pos = max(pos, end - len(needle) + 1)
            if not self._extend(pos if keep < 0 else keep):
                return -1

    def slice(self, start: int, end: int) -> bytes:
        """
        The octets in [C{start}, C{end}), cut at the end of the file.
        """
        end = min(end, self.size)
        self._moveTo(start)
        while self.base + len(self.data) < end and self._extend(start):
            pass
        return self.data[start - self.base : end - self.base]

    def _octetAt(self, offset: int) -> int:
        """
        The octet at C{offset}, or -1 past the end.
        """
        if self.base <= offset < self.base + len(self.data):
            return self.data[offset - self.base]
        octet = os.pread(self._fd, 1, offset)
        return octet[0] if octet else -1

    def _isEscape(self, offset: int, quoting: MboxQuoting) -> bool:
        """
        Whether the C{>From } at C{offset} starts an escaped line.
        """
        before = offset - 1
        if quoting is MboxQuoting.MBOXRD:
            while (octet := self._octetAt(before)) == 0x3E:
                before -= 1
            return octet == 0x0A
        return self._octetAt(before) == 0x0A

    def nextSeparator(self, start: int, quoting: MboxQuoting) -> tuple[int, int]:
        """
        Find the next separator: the LF before a line starting with
        C{From }, at or after C{start}; and count the escaped C{From }
        lines before it.

        @param start: an offset holding an LF (the end of a C{From} line),
            so that lines are recognised from the next octet on.
        @return: the separator's offset (-1 at the end of the file) and the
            number of escaped lines between C{start} and it.
        """
        self._moveTo(start)
        pos = start
        escapes = 0
        while True:
            data = self.data
            base = self.base
            separator = data.find(_SEPARATOR, pos - base)
            stop = separator if separator >= 0 else len(data)
            escaped = data.find(_ESCAPED, pos - base, stop)
            while escaped >= 0:
                if self._isEscape(base + escaped, quoting):
                    escapes += 1
                escaped = data.find(_ESCAPED, escaped + 1, stop)
            if separator >= 0:
                return base + separator, escapes
            # Both needles are 6 octets long: one starting in the last 5
            # octets is found, once, in the next view.  The 3 octets
            # before the search position stay in view too, for trimmedEnd.
            pos = max(pos, base + len(data) - len(_SEPARATOR) + 1)
            if not self._extend(max(start, pos - 3)):
                return -1, escapes

    def followingFrom(self, end: int) -> int:
        """
        Where a message delimited by Content-Length and ending at C{end}
        is followed by the next message's C{From } line, optionally after
        one empty line.

        @return: the offset of that line; L{size} when the file ends at
            C{end} (optionally after one empty line); -1 otherwise (the
            Content-Length is wrong).
        """
        if end > self.size:
            return -1
        if end == self.size:
            return end
        view = self.slice(end - 1, end + 8)
        before, rest = view[:1], view[1:]
        if rest in (b"\n", b"\r\n") and end + len(rest) == self.size:
            return self.size
        if before == b"\n" and rest.startswith(b"From "):
            return end
        if rest.startswith(b"\nFrom "):
            return end + 1
        if rest.startswith(b"\r\nFrom "):
            return end + 2
        return -1

    def trimmedEnd(self, start: int, end: int) -> int:
        """
        Where the content in [C{start}, C{end}) ends once the empty line
        writers put between messages is dropped: one LF of a final
        C{LF LF}, or one CRLF of a final C{CRLF CRLF}.
        """
        tail = self.slice(max(start, end - 4), end)
        if tail.endswith(b"\r\n\r\n"):
            return end - 2
        if tail.endswith(b"\n\n"):
            return end - 1
        return end


class _MessageIndex:
    """
    Where each message of one mbox file lies, as the last listing found:
    per message, in file order, the offset of its C{From} line (its key),
    of its content (one past the end of the file for a C{From} line that
    ends the file without a line end), the content's length in the file,
    the number of escaped lines in it, and a CRC-32 of its C{From} line
    (its first L{_FROM_LINE_LIMIT} octets).  Compact arrays: a listing of
    a large file costs 36 octets per message here.

    @ivar file: the file.
    """

    __slots__ = ("file", "offsets", "starts", "lengths", "escapes", "fromLineChecks")

    def __init__(self, file: _MboxFile) -> None:
        """
        @param file: the file.
        """
        self.file = file
        self.offsets: array[int] = array("q")
        self.starts: array[int] = array("q")
        self.lengths: array[int] = array("q")
        self.escapes: array[int] = array("q")
        self.fromLineChecks: array[int] = array("I")

    def add(self, offset: int, start: int, length: int, escapes: int, fromLine: bytes) -> None:
        """
        Record the next message (offsets must increase).

        @param fromLine: its C{From} line, cut at L{_FROM_LINE_LIMIT}
            octets, without its line end.
        """
        self.offsets.append(offset)
        self.starts.append(start)
        self.lengths.append(length)
        self.escapes.append(escapes)
        self.fromLineChecks.append(zlib.crc32(fromLine))

    def find(self, offset: int) -> int:
        """
        The index of the message whose C{From} line is at C{offset}, or -1.
        """
        index = bisect_left(self.offsets, offset)
        if index < len(self.offsets) and self.offsets[index] == offset:
            return index
        return -1


def _headerBounds(window: _Window, lineEnd: int, crlf: bool) -> tuple[int, int | None]:
    """
    Where the header section of the message whose C{From} line ends at
    C{lineEnd} ends: at its first empty line, or at the next separator if
    that comes first (a message with no body), and at most
    L{_HEADER_LIMIT} octets on.

    @param crlf: whether the C{From} line ended with CRLF (to look for an
        empty CRLF line first).
    @return: the end of the header section (after the line end of its last
        field) and the offset of the body (L{None} without an empty line).
    """
    limit = min(window.size, lineEnd + 1 + _HEADER_LIMIT)
    first, second = (b"\n\r\n", b"\n\n") if crlf else (b"\n\n", b"\n\r\n")
    blank, needle = window.find(first, lineEnd, limit), first
    other = window.find(second, lineEnd, limit if blank < 0 else blank + len(second) - 1)
    if other >= 0 and (blank < 0 or other < blank):
        blank, needle = other, second
    separator = window.find(_SEPARATOR, lineEnd, limit if blank < 0 else blank)
    if separator >= 0:
        return separator + 1, None
    if blank >= 0:
        return blank + 1, blank + len(needle)
    return limit, None


@frozen
class _MboxFile:
    """
    Where the file of one folder is.

    @ivar relative: its path relative to the source's directory, as the
        system takes it; L{None} when the source is this one file.
    @ivar shown: its path as shown to the admin.
    @ivar problem: why it is not read (not a regular file, a symbolic link
        leading out of the directory...), if so.
    """

    relative: str | None
    shown: str
    problem: str | None = None


def _openFile(root: str, file: _MboxFile) -> int:
    """
    Open the mbox file of a folder (with C{O_NONBLOCK}: a FIFO must not
    block), beneath the source's directory.

    @param root: the source's path.
    @raise LeavesTree: it is a symbolic link leading out of the directory.
    @raise OSError: it cannot be opened.
    """
    if file.relative is None:
        return os.open(root, FILE_FLAGS & ~os.O_NOFOLLOW)
    with OpenTree(root) as tree:
        return tree.open(file.relative)


def _scanFile(
    root: str, file: _MboxFile, quoting: MboxQuoting
) -> tuple[list[SourceMessage], _MessageIndex]:
    """
    List the messages of one mbox file.

    @param root: the source's path.
    @return: the messages, in file order, and where they lie.
    @raise SourceError: the file cannot be opened or read, or is not an
        mbox.
    """
    name = file.shown
    if file.problem is not None:
        raise SourceError(file.problem)
    try:
        fd = _openFile(root, file)
    except FileNotFoundError as e:
        raise SourceError(f"no such mbox file: {name}") from e
    except PermissionError as e:
        raise SourceError(f"permission denied: {name}") from e
    except (LeavesTree, OSError) as e:
        if isinstance(e, LeavesTree) or e.errno == errno.ELOOP:
            raise SourceError(linkProblem(name, e)) from e
        raise SourceError(f"cannot open the mbox file {name}: {e.strerror or e}") from e
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise SourceError(f"not an mbox file: {notRegular(name, status.st_mode)}")
        return _scanMessages(_Window(fd, status.st_size), file, quoting)
    except OSError as e:
        raise SourceError(f"cannot read the mbox file {name}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _scanMessages(
    window: _Window, file: _MboxFile, quoting: MboxQuoting
) -> tuple[list[SourceMessage], _MessageIndex]:
    """
    The scan of L{_scanFile}, over the open file's view.

    @raise OSError: the file cannot be read.
    @raise SourceError: the file is not an mbox.
    """
    size = window.size
    index = _MessageIndex(file)
    messages: list[SourceMessage] = []
    if size == 0:
        return messages, index
    if window.slice(0, 5) != b"From ":
        raise SourceError(
            f"not an mbox file: {file.shown} does not start with a 'From ' line"
        )
    flagCache: dict[tuple[tuple[bytes, ...], ...], tuple[str, ...]] = {}
    fromOffset = 0
    while fromOffset < size:
        lineEnd = window.find(b"\n", fromOffset, fromOffset + _FROM_LINE_LIMIT)
        if lineEnd < 0:
            lineEnd = window.find(b"\n", fromOffset, size)
        fromLine = window.slice(
            fromOffset, min(size if lineEnd < 0 else lineEnd, fromOffset + _FROM_LINE_LIMIT)
        )
        when = parseFromLineDate(fromLine)
        if lineEnd < 0:
            # A From line ending the file: an empty message.
            index.add(fromOffset, size + 1, 0, 0, fromLine)
            messages.append(SourceMessage(str(fromOffset), (), when, 0))
            break
        contentStart = lineEnd + 1
        headerEnd, bodyStart = _headerBounds(window, lineEnd, fromLine.endswith(b"\r"))
        header = b"\n" + window.slice(contentStart, headerEnd)
        lowered = header.lower()
        flags: tuple[str, ...] = ()
        # Every name in _FLAG_FIELDS ends with one of these.
        if b"status:" in lowered or b"keywords:" in lowered or b"-keys:" in lowered:
            fields = tuple(tuple(_fieldValues(header, lowered, f)) for f in _FLAG_FIELDS)
            cached = flagCache.get(fields)
            if cached is None:
                cached = flagCache[fields] = _flagsOf(fields)
            flags = cached
        nextFrom = -1
        escapes = 0
        if bodyStart is not None:
            length = _contentLength(header, lowered)
            if length is not None:
                contentEnd = bodyStart + length
                nextFrom = window.followingFrom(contentEnd)
        if nextFrom < 0:
            separator, escapes = window.nextSeparator(lineEnd, quoting)
            if separator < 0:
                contentEnd, nextFrom = window.trimmedEnd(contentStart, size), size
            else:
                contentEnd = window.trimmedEnd(contentStart, separator + 1)
                nextFrom = separator + 1
        length = contentEnd - contentStart
        index.add(fromOffset, contentStart, length, escapes, fromLine)
        messages.append(SourceMessage(str(fromOffset), flags, when, length - escapes))
        fromOffset = nextFrom
    return messages, index


def _levelName(name: str, suffixes: tuple[str, ...], top: bool) -> str:
    """
    The folder name for a file or directory name: a trailing suffix among
    C{suffixes} removed, a name that is not UTF-8 carried, and C{Inbox} at
    the top level made C{INBOX}.
    """
    lower = name.lower()
    for suffix in suffixes:
        if lower.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    name = carriedName(name)
    if top and name.casefold() == "inbox":
        return "INBOX"
    return name


# (folder path, key, file)
_Found = tuple[tuple[str, ...], str, _MboxFile]


def _problemOf(tree: OpenTree, relative: str, shown: str, entry: os.DirEntry[str]) -> str | None:
    """
    Why an entry that is not a regular file is not read as an mbox file.

    @return: the reason; L{None} for a symbolic link to a regular file
        inside the directory (read through the link).
    @raise FileNotFoundError: it is gone.
    @raise IsADirectoryError: it is a symbolic link to a directory inside
        the directory (whose folders are listed where it is).
    """
    try:
        isLink = entry.is_symlink()
        if not isLink:
            return notRegular(shown, entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        raise
    except OSError as e:
        return f"cannot read {shown}: {e.strerror or e}"
    try:
        target = tree.resolve(relative)
        mode = os.stat(os.path.join(tree.realRoot, target)).st_mode
    except (LeavesTree, OSError) as e:
        return linkProblem(shown, e)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(relative)
    if not stat.S_ISREG(mode):
        return f"not a regular file: symbolic link to a {fileKind(mode)}: {shown}"
    return None


def _walk(tree: OpenTree) -> list[_Found]:
    """
    Every mbox file under the source's directory, as a folder, unsorted;
    and every entry that is not a regular file, as a folder that cannot be
    read.

    @raise SourceError: a directory cannot be listed.
    """
    found: list[_Found] = []
    rootIsBundle = os.path.basename(os.path.normpath(tree.root)).lower().endswith(".mbox")
    pending: list[tuple[str, tuple[str, ...], str, bool]] = [("", (), "", rootIsBundle)]
    while pending:
        relative, parent, prefix, bundle = pending.pop()
        directory = tree.path(relative)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith("."):
                        continue
                    key = prefix + carriedName(name)
                    lower = name.lower()
                    entryRelative = os.path.join(relative, name)
                    if entry.is_dir(follow_symlinks=False):
                        level = _levelName(name, _DIRECTORY_SUFFIXES, not parent)
                        pending.append(
                            (entryRelative, parent + (level,), key + "/", lower.endswith(".mbox"))
                        )
                        continue
                    if (
                        lower.endswith(".msf")
                        or lower in _THUNDERBIRD_METADATA
                        or (bundle and name == _BUNDLE_INDEX)
                    ):
                        continue
                    shown = carriedName(entry.path)
                    problem = None
                    if not entry.is_file(follow_symlinks=False):
                        try:
                            problem = _problemOf(tree, entryRelative, shown, entry)
                        except (FileNotFoundError, IsADirectoryError):
                            continue
                    file = _MboxFile(entryRelative, shown, problem)
                    if bundle and name == _BUNDLE_FILE:
                        found.append((parent or ("INBOX",), key, file))
                    else:
                        level = _levelName(name, _FILE_SUFFIXES, not parent)
                        found.append((parent + (level,), key, file))
        except OSError as e:
            raise SourceError(f"cannot list {carriedName(directory)}: {e.strerror or e}") from e
    return found


@implementer(IMessageSource)
class MboxSource:
    """
    Messages from one mbox file, or from a directory tree of mbox files,
    one folder per file.  The module's documentation states the rules.

    @ivar path: the file or directory.
    @ivar quoting: how C{From } lines inside messages were escaped.
    """

    def __init__(self, path: str, quoting: MboxQuoting | str = MboxQuoting.MBOXRD) -> None:
        """
        @param path: an mbox file, or a directory of mbox files.
        @param quoting: an L{MboxQuoting}, or its value (C{"mboxrd"},
            C{"mboxo"}).
        @raise ValueError: C{quoting} is neither.
        """
        self.path = path
        try:
            self.quoting = MboxQuoting(quoting)
        except ValueError:
            raise ValueError(
                f"unknown mbox quoting {quoting!r}: expected 'mboxrd' or 'mboxo'"
            ) from None
        self._files: dict[str, _MboxFile] | None = None
        self._indexes: dict[str, _MessageIndex] = {}

    def _findFolders(self) -> list[SourceFolder]:
        """
        Every folder, sorted, remembering each one's file.

        @raise SourceError: the path is missing or cannot be read, or is a
            directory holding no mbox file.
        """
        root = self.path
        shown = carriedName(root)
        try:
            mode = os.stat(root).st_mode
        except FileNotFoundError as e:
            raise SourceError(f"no such mbox file or directory: {shown}") from e
        except OSError as e:
            raise SourceError(f"cannot read {shown}: {e.strerror or e}") from e
        if stat.S_ISREG(mode):
            self._files = {"": _MboxFile(None, shown)}
            return [SourceFolder(path=("INBOX",), key="")]
        if not stat.S_ISDIR(mode):
            raise SourceError(f"not an mbox file or directory: {notRegular(shown, mode)}")
        try:
            tree = OpenTree(root)
        except OSError as e:
            raise SourceError(f"cannot read {shown}: {e.strerror or e}") from e
        with tree:
            found = _walk(tree)
        if not found:
            raise SourceError(f"no mbox files in the directory {shown}")
        folders = []
        for path, key, file in found:
            if file.relative is not None and hasUndecodable(file.relative):
                log.warn(
                    "Source folder name is not valid UTF-8: carried as {folder} ({file})",
                    folder="/".join(path),
                    file=file.shown,
                )
            specialUse = SPECIAL_USE.get(path[0].casefold()) if len(path) == 1 else None
            folders.append(SourceFolder(path=path, key=key, specialUse=specialUse))
        folders.sort(key=lambda f: (f.path[0] != "INBOX", f.path, f.key))
        self._files = {key: file for _, key, file in found}
        return folders

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder: C{INBOX} first, then the others sorted, parents before
        children.

        @return: a Deferred that fails with L{SourceError} when the path
            does not exist or cannot be read, or is a directory without any
            mbox file.
        """
        try:
            folders = self._findFolders()
        except SourceError as e:
            return fail(e)
        result: Sequence[SourceFolder] = folders
        return succeed(result)

    def _fileOf(self, folder: SourceFolder) -> _MboxFile:
        """
        The file of C{folder}, looking for the folders first if that was
        not done yet.

        @raise SourceError: no folder has that key.
        """
        if self._files is None or folder.key not in self._files:
            self._findFolders()
        assert self._files is not None
        file = self._files.get(folder.key)
        if file is None:
            raise SourceError(f"no mbox folder {folder.key!r} in {carriedName(self.path)}")
        return file

    def _scan(self, folder: SourceFolder) -> list[SourceMessage]:
        """
        List C{folder}'s messages and remember where they lie.

        @raise SourceError: the file is gone, unreadable or not an mbox.
        """
        messages, index = _scanFile(self.path, self._fileOf(folder), self.quoting)
        self._indexes[folder.key] = index
        return messages

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, in file order.

        @return: a Deferred that fails with L{SourceError}, naming the
            file, when it is gone, cannot be read, or is not an mbox.
        """
        try:
            messages: Sequence[SourceMessage] = self._scan(folder)
        except SourceError as e:
            return fail(e)
        return succeed(messages)

    def fromLine(self, folder: SourceFolder, key: str) -> bytes | None:
        """
        The C{From } line at the start of the message keyed C{key}, as it
        is in the file (at most 1,000 octets, without its line end), for
        a check that reads its date independently (L{imapmig.commands.expected});
        L{None} when the key is not an offset or the file or line cannot
        be read there.
        """
        if not (key.isascii() and key.isdigit()):
            return None
        try:
            fd = _openFile(self.path, self._fileOf(folder))
        except (SourceError, LeavesTree, OSError):
            return None
        try:
            head = os.pread(fd, 1000, int(key))
        except OSError:
            return None
        finally:
            os.close(fd)
        line = head.split(b"\n", 1)[0].rstrip(b"\r")
        return line if line.startswith(b"From ") else None

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, unescaped, with CRLF line
        endings.

        Messages not found in the last listing of the folder (or when there
        was none, as after a restart) are looked for by listing the folder
        again, once per call.  A message that cannot be read (the file is
        gone, unreadable, truncated, or rewritten so that the message's
        C{From} line, or the next one, is no longer where it was) is an
        L{UnreadableMessage} saying why.
        """
        bodies: list[MessageBody] = []
        if not messages:
            return succeed(bodies)
        index = self._indexes.get(folder.key)
        if index is None:
            index, reason = self._rescan(folder)
            if index is None:
                bodies.extend(UnreadableMessage(reason) for _ in messages)
                return succeed(bodies)
            positions = [index.find(_offsetOf(m.key)) for m in messages]
        else:
            positions = [index.find(_offsetOf(m.key)) for m in messages]
            if -1 in positions:
                newIndex, _ = self._rescan(folder)
                if newIndex is not None:
                    index = newIndex
                    positions = [index.find(_offsetOf(m.key)) for m in messages]
        try:
            fd = _openFile(self.path, index.file)
        except (LeavesTree, OSError) as e:
            reason = _openFailure(index.file.shown, e)
            bodies.extend(UnreadableMessage(reason) for _ in messages)
            return succeed(bodies)
        try:
            for message, position in zip(messages, positions):
                if position < 0:
                    bodies.append(
                        UnreadableMessage(
                            f"no message at offset {message.key} in {index.file.shown}"
                        )
                    )
                else:
                    bodies.append(_readMessage(fd, index, position, self.quoting))
        finally:
            os.close(fd)
        return succeed(bodies)

    def _rescan(self, folder: SourceFolder) -> tuple[_MessageIndex | None, str]:
        """
        List C{folder} again for its index.

        @return: the index, or L{None} and why the folder cannot be read.
        """
        try:
            self._scan(folder)
        except SourceError as e:
            self._indexes.pop(folder.key, None)
            return None, str(e)
        return self._indexes[folder.key], ""


def _offsetOf(key: str) -> int:
    """
    The offset a message key stands for, or -1 if it is not one.
    """
    if key.isascii() and key.isdigit() and len(key) <= 18:
        return int(key)
    return -1


def _openFailure(name: str, error: LeavesTree | OSError) -> str:
    """
    Why an mbox file could not be opened, for an L{UnreadableMessage}.

    @param name: the file, as shown to the admin.
    """
    if isinstance(error, LeavesTree) or error.errno == errno.ELOOP:
        return linkProblem(name, error)
    if isinstance(error, FileNotFoundError):
        return f"file vanished: {name}"
    if isinstance(error, PermissionError):
        return f"permission denied: {name}"
    return f"cannot read {name}: {error.strerror or error}"


def _placeProblem(fd: int, index: _MessageIndex, position: int) -> str | None:
    """
    Why a message of an open mbox file is no longer where the listing
    found it, if it is not: the file may only have been appended to since,
    so the message's C{From} line, and the next one, must be where they
    were.

    @raise OSError: the file cannot be read.
    """
    offset = index.offsets[position]
    start = index.starts[position]
    following = index.offsets[position + 1] if position + 1 < len(index.offsets) else -1
    lineLength = min(start - 1 - offset, _FROM_LINE_LIMIT)
    if offset:
        before = os.pread(fd, lineLength + 1, offset - 1)
    else:
        before = b"\n" + os.pread(fd, lineLength, 0)
    after = os.pread(fd, 6, following - 1) if following > 0 else b"\nFrom "
    if (
        not before.startswith(b"\nFrom ")
        or zlib.crc32(before[1:]) != index.fromLineChecks[position]
        or after != b"\nFrom "
    ):
        return (
            f"{index.file.shown} changed since it was listed: the message at offset"
            f" {offset} moved"
        )
    return None


def _readMessage(fd: int, index: _MessageIndex, position: int, quoting: MboxQuoting) -> MessageBody:
    """
    Read, check and unescape one message of an open mbox file, and convert
    it to CRLF; a message larger than L{LARGE_MESSAGE} is sent from the
    file (a L{RegionBody} on a duplicate of C{fd}).

    @param index: where the file's messages lie.
    @param position: the message's place in C{index}.
    """
    offset = index.offsets[position]
    start = index.starts[position]
    length = index.lengths[position]
    escapes = index.escapes[position]
    name = index.file.shown
    truncated = UnreadableMessage(
        f"{name} was truncated: the message at offset {offset} ends at "
        f"{start + length}, beyond the end of the file"
    )
    differs = UnreadableMessage(
        f"{name} changed since it was listed: the message at offset {offset} differs"
    )
    try:
        problem = _placeProblem(fd, index, position)
        if problem is not None:
            return UnreadableMessage(problem)
        if length - escapes > LARGE_MESSAGE:
            if os.fstat(fd).st_size < start + length:
                return truncated
            body = RegionBody.measured(
                os.dup(fd),
                start,
                length,
                length - escapes,
                escapes > 0,
                quoting is MboxQuoting.MBOXO,
                name,
                lambda opened: _placeProblem(opened, index, position),
                READ_CHUNK,
            )
            return differs if body is None else body
        data = os.pread(fd, length, start)
    except OSError as e:
        return UnreadableMessage(f"cannot read {name}: {e.strerror or e}")
    if len(data) < length:
        return truncated
    if escapes:
        data = _UNESCAPE[quoting].sub(rb"\1", data)
        if len(data) != length - escapes:
            return differs
    return toCRLF(data)
