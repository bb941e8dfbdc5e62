# -*- test-case-name: tests.test_message -*-
"""
The message and folder types every source yields and the APPEND pipeline
sends.  This module imports nothing from the rest of imapmig but
L{imapmig.mail.octets}, the pass over a message's octets.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Iterable, Iterator

from attrs import frozen

from imapmig.mail.octets import EIGHT_BIT, ENDS_CR, NUL, UNKNOWN, crlfAndFacts

_MONTH_OCTETS = (
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun",
    b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
)  # fmt: skip
# The pieces of formatInternalDate's UTC form: 00 to 99, the opening quote
# and day of the month (1 to 31), and the month between its dashes (1 to 12).
_TWO_DIGITS = tuple(b"%02d" % n for n in range(100))
_DAY_OPENINGS = tuple(b'"%02d-' % day for day in range(32))
_MONTH_FIELDS = (b"",) + tuple(month + b"-" for month in _MONTH_OCTETS)

# Maildir info letters (after ":2,") and their IMAP flags, in the ASCII
# order the Maildir specification keeps them.
MAILDIR_FLAG_LETTERS = (
    ("D", "\\Draft"),
    ("F", "\\Flagged"),
    ("R", "\\Answered"),
    ("S", "\\Seen"),
    ("T", "\\Deleted"),
)


def maildirFlags(letters: str) -> tuple[str, ...]:
    """
    The IMAP flags of Maildir info letters, in a fixed order.  Letters with
    no IMAP counterpart (C{P}, "passed"; lowercase keyword letters) are
    ignored.
    """
    return tuple(flag for letter, flag in MAILDIR_FLAG_LETTERS if letter in letters)


@frozen
class SourceFolder:
    """
    One folder of a source.

    @ivar path: the folder's hierarchy, one decoded component per level,
        independent of any separator: C{("INBOX",)}, C{("Archive", "2019")}.
    @ivar key: a stable identifier of the folder within its source, used by
        the state store (for a Maildir, the Maildir++ directory name).
    @ivar specialUse: an RFC 6154 attribute such as C{"\\Sent"}, or L{None}.
    @ivar subscribed: whether the source's user is subscribed to it (a
        source that has no notion of subscriptions says C{True}).
    @ivar destination: the destination path the source asks for its
        messages (a label view's archived mail: L{imapmig.sources.labelviews}),
        unless a rename rule names the folder; L{None}: mapped as any
        folder.
    @ivar notMigrated: why the messages the source lists in it are not
        copied, but recorded as not migrated with this reason; L{None}
        for a folder that is copied.
    """

    path: tuple[str, ...]
    key: str
    specialUse: str | None = None
    subscribed: bool = True
    destination: tuple[str, ...] | None = None
    notMigrated: str | None = None


@frozen
class SourceMessage:
    """
    One message of a source folder, described without its body.

    Sources list these cheaply (a Maildir listing reads no file) and read the
    bodies later, in bounded batches, just before they are sent.

    @ivar key: identifies the message within its folder for as long as it
        exists in the source (a Maildir message's unique name, which survives
        flag changes).
    @ivar flags: IMAP flags, e.g. C{("\\Seen", "\\Flagged")}.
    @ivar internalDate: the delivery time, timezone-aware, or L{None} to let
        the server choose.
    @ivar size: the size in octets as the source stores it (a body converted
        to CRLF grows); used to bound batches before the body is read.
    """

    key: str
    flags: tuple[str, ...]
    internalDate: datetime | None
    size: int


# SourceMessage's slots, set directly by listedMessage.
_SET_KEY, _SET_FLAGS, _SET_DATE, _SET_SIZE = (
    SourceMessage.__dict__[name].__set__ for name in ("key", "flags", "internalDate", "size")
)
_newObject = object.__new__


def listedMessage(
    key: str, flags: tuple[str, ...], internalDate: datetime | None, size: int
) -> SourceMessage:
    """
    The same L{SourceMessage} as C{SourceMessage(key, flags, internalDate,
    size)}, made in less than half the time, for listings of thousands of
    messages: a frozen attrs class's constructor sets each field through
    C{object.__setattr__}, looking the field up by name every time; this
    sets its slots directly.  (L{SourceMessage} has no default, validator
    or converter for this to skip.)
    """
    message: SourceMessage = _newObject(SourceMessage)
    _SET_KEY(message, key)
    _SET_FLAGS(message, flags)
    _SET_DATE(message, internalDate)
    _SET_SIZE(message, size)
    return message


@frozen
class UnreadableMessage:
    """
    Stands in for a body that could not be read from the source.

    @ivar reason: why, for the state store and the admin.
    """

    reason: str


class StreamedBody:
    """
    A message too large to be held in memory: an open file, read and
    converted to CRLF line endings a slice at a time, each time it is sent.

    The file is opened (and its converted size counted) when the source
    reads the message; it stays open while the message is queued or in
    flight, so a Maildir file renamed meanwhile (a flag change) is still
    read.  A file whose content changes in the meantime no longer gives the
    size announced: L{slices} raises rather than send other octets.

    A source whose messages are not whole files (a region of an mbox
    file, unescaped as it is read) subclasses this and overrides
    L{_octets} and L{_unchanged}.

    @ivar name: the file's name, for messages.
    """

    __slots__ = ("_fd", "_sourceSize", "_size", "name", "hasNUL", "isASCII")

    def __init__(
        self,
        fd: int,
        sourceSize: int,
        size: int,
        name: str,
        hasNUL: bool = False,
        isASCII: bool = True,
    ) -> None:
        """
        @param fd: the open file; this object owns and closes it.
        @param sourceSize: its size in octets.
        @param size: its size converted to CRLF.
        @param name: the file's name.
        @param hasNUL: whether it holds a NUL octet.
        @param isASCII: whether every octet is 7-bit ASCII.
        """
        self._fd = fd
        self._sourceSize = sourceSize
        self._size = size
        self.name = name
        self.hasNUL = hasNUL
        self.isASCII = isASCII

    @classmethod
    def fromDescriptor(cls, fd: int, name: str, readSize: int = 1024 * 1024) -> StreamedBody:
        """
        Count the converted size of an open file and wrap it.

        @param fd: the open file; the result owns it.
        @param name: the file's name.
        @param readSize: octets per read.
        @raise OSError: it cannot be read.
        """
        sourceSize = 0

        def chunks() -> Iterator[bytes]:
            nonlocal sourceSize
            while chunk := os.pread(fd, readSize, sourceSize):
                sourceSize += len(chunk)
                yield chunk

        size, hasNUL, isASCII = measure(chunks())
        return cls(fd, sourceSize, size, name, hasNUL, isASCII)

    def __len__(self) -> int:
        return self._size

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """
        Close the file (done anyway when this object is collected).
        """
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def head(self, length: int) -> bytes:
        """
        The first C{length} octets of the converted message (all of it if
        shorter).
        """
        pieces: list[bytes] = []
        have = 0
        for piece in self.slices(max(length, 4096), verify=False):
            pieces.append(piece)
            have += len(piece)
            if have >= length:
                break
        return b"".join(pieces)[:length]

    def _octets(self, readSize: int) -> Iterator[bytes]:
        """
        The message as the source stores it, from its start, in non-empty
        pieces of about C{readSize} octets, never beyond the size counted
        when it was read.

        @raise OSError: it cannot be read.
        """
        offset = 0
        while offset < self._sourceSize:
            chunk = os.pread(self._fd, min(readSize, self._sourceSize - offset), offset)
            if not chunk:
                break
            offset += len(chunk)
            yield chunk

    def _unchanged(self) -> bool:
        """
        Whether the source still holds the message as it was counted
        (called after every octet of it was given).
        """
        return os.fstat(self._fd).st_size == self._sourceSize

    def slices(self, readSize: int, verify: bool = True) -> Iterator[bytes]:
        """
        The converted message, from its start, in pieces of about
        C{readSize} octets (at most twice that: each LF gains a CR).

        @param verify: check that the whole file still gives the size
            announced.
        @raise OSError: the file cannot be read, or no longer gives the
            size announced (raised before any octet beyond it is given).
        """
        given = 0
        afterCR = False
        for chunk in self._octets(readSize):
            piece, found = crlfAndFacts(chunk, afterCR, False)
            afterCR = bool(found & ENDS_CR)
            given += len(piece)
            if given > self._size:
                break
            yield piece
        if verify and (given != self._size or not self._unchanged()):
            raise OSError(f"{self.name} changed while being sent")


def measure(chunks: Iterable[bytes]) -> tuple[int, bool, bool]:
    """
    Count what L{StreamedBody} needs to know of a message before it is
    sent, in one pass over each chunk (L{crlfAndFacts}).

    @param chunks: the message as stored, in order, in non-empty pieces.
    @return: its size converted to CRLF, whether it holds a NUL octet, and
        whether every octet is 7-bit ASCII.
    """
    size = facts = 0
    afterCR = False
    for chunk in chunks:
        piece, found = crlfAndFacts(chunk, afterCR, False)
        size += len(piece)
        afterCR = bool(found & ENDS_CR)
        facts |= found
    return size, bool(facts & NUL), not facts & EIGHT_BIT


MessageBody = bytes | bytearray | StreamedBody | UnreadableMessage
"""
A message's body as a source reads it (a L{StreamedBody} for very large
messages), or why it could not be read.
"""


class ReadBodies(list[MessageBody]):
    """
    The bodies one read of a source gives, in order, with what its reader
    found of each body's octets as it converted them to CRLF
    (L{crlfAndFacts}): C{facts[i]}, the facts of body C{i}, or
    L{UNKNOWN} where none were found (a L{StreamedBody}, which carries
    its own, an L{UnreadableMessage}, or a body read on a rare path).  The
    job's preparation decides each literal's kind from them instead of
    looking at every octet again.

    A list, so that what takes the bodies of a read takes these; code that
    makes another list of them loses the facts, and the octets are then
    looked at again.

    @ivar facts: an octet per body.
    """

    __slots__ = ("facts",)

    def __init__(self) -> None:
        list.__init__(self)
        self.facts = bytearray()

    def add(self, body: MessageBody, facts: int = UNKNOWN) -> None:
        """
        Append C{body} and its C{facts}.
        """
        self.append(body)
        self.facts.append(facts)


def toCRLF(body: bytes) -> bytes:
    """
    Return C{body} with every bare LF turned into CRLF, as IMAP requires
    (L{crlfAndFacts}, whose facts a source's reader keeps: see
    L{ReadBodies}).  A body already in CRLF throughout is returned as the
    same object, uncopied.

    @param body: the message as stored.
    @return: the message with CRLF line endings.
    """
    return crlfAndFacts(body)[0]


def formatInternalDate(when: datetime) -> bytes:
    """
    Format C{when} as an RFC 3501 C{date-time}, with its quotes:
    C{b'"22-Nov-2026 04:38:25 +0000"'}.

    Called once per message sent: formatted as bytes directly, with UTC
    (the common case) taking no arithmetic.

    @param when: a timezone-aware datetime.
    @return: the quoted date-time, ready for the wire.
    """
    offset = when.utcoffset()
    if not offset:
        # Joined from tables: a third cheaper than the bytes formatting.
        year = when.year
        return b"".join(
            (
                _DAY_OPENINGS[when.day],
                _MONTH_FIELDS[when.month],
                _TWO_DIGITS[year // 100],
                _TWO_DIGITS[year % 100],
                b" ",
                _TWO_DIGITS[when.hour],
                b":",
                _TWO_DIGITS[when.minute],
                b":",
                _TWO_DIGITS[when.second],
                b' +0000"',
            )
        )
    minutes = int(offset.total_seconds()) // 60
    sign = b"+" if minutes >= 0 else b"-"
    minutes = abs(minutes)
    zone = b"%s%02d%02d" % (sign, minutes // 60, minutes % 60)
    return b'"%02d-%s-%04d %02d:%02d:%02d %s"' % (
        when.day,
        _MONTH_OCTETS[when.month - 1],
        when.year,
        when.hour,
        when.minute,
        when.second,
        zone,
    )


def withInternalDatePython(prefix: bytes, when: datetime) -> bytes:
    """
    C{prefix} followed by L{formatInternalDate} of C{when}: an APPEND's
    arguments before its literal.

    The Python twin of the C extension's L{withInternalDate}
    (C{tests.test_message} checks both give the same).
    """
    return prefix + formatInternalDate(when)


try:
    from imapmig.mail._octets import withInternalDate as withInternalDate
except ImportError:
    withInternalDate = withInternalDatePython
"""
C{prefix + formatInternalDate(when)} (L{withInternalDatePython}), what
preparation calls once per message: the C extension's where it is built, a
tenth of the instructions of the datetime's six attributes, its
C{utcoffset} and the join.
"""


def utcFromTimestamp(timestamp: float) -> datetime:
    """
    The UTC datetime of a POSIX timestamp.
    """
    return datetime.fromtimestamp(timestamp, timezone.utc)
