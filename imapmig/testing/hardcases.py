# -*- test-case-name: tests.test_testing_hardcases -*-
"""
The "hard cases" corpus: a small, fixed set of messages, each chosen
because a migration tool is likely to get it wrong, used to prove that a
migration copies every source and every folder byte for byte.

L{hardCases} returns the messages; L{imapmig.testing.hardfiles} stores
them as a source would keep them (Maildir, mbox, a private Dovecot) and
says what a faithful migration must produce.  Everything is
deterministic: the same call gives the same bytes.

The cases (each has a short stable L{HardMessage.name}):

  - folders: C{INBOX}; non-ASCII names (C{Entwürfe}, C{送信済み},
    C{Ärger} and its child C{Ärger/Ünter}); a five-level hierarchy
    C{Archive/2019/Q1/Jan/Week1} whose intermediate levels hold no
    message and, in Maildir++, do not exist; names with a space
    (C{Sent Items}) and with C{&} (C{Tom & Jerry}, C{Tom &- Jerry} in
    modified UTF-7); the special-use folders C{Sent}, C{Drafts},
    C{Trash}, C{Junk} and C{Archive}.
  - flags: each system flag alone, all five together, none; the keywords
    C{$Forwarded}, C{$Junk}, C{$NotJunk}, C{$label1} and C{Work}.
  - internal dates in several zones and years, among them a leap day, a
    +1400 zone, a -0330 zone, 1980 and 2021; no date in the future nor
    before 1970, which a destination may not keep (see below).
  - bodies: bare LF, CRLF, both mixed, a bare CR, a NUL byte, 8-bit UTF-8
    without C{Content-Transfer-Encoding}, an empty body, a body with
    C{From }, C{>From } and C{>>From } lines, a 2,000-character folded
    Subject with an unfolded 1,500-character References line, two
    different messages sharing a Message-ID, one without Message-ID, two
    byte-identical messages in one folder and (unless C{large=False}) a
    message of about 21 MB with a base64 attachment.

Apart from the large message the corpus is about 15 KB.

What Dovecot 2.3.19 does with the cases, as observed on Debian 12:

  - As a source (L{imapmig.testing.hardfiles.loadIntoDovecot}, read back with C{FETCH BODY[]}):
    every message comes back as L{HardMessage.imapBytes}, that is bare LF
    turned into CRLF, CRLF kept, mixed endings normalised, the bare CR
    kept, the empty body, 8-bit text and the long header lines untouched,
    except the NUL byte, served as C{0x80} (L{HardMessage.servedBytes}).
    C{FETCH BINARY[]} does return the NUL, but it also decodes base64
    parts (C{BINARY.SIZE[]} of the large message is 15,729,345 against
    an C{RFC822.SIZE} of 21,524,107), so no single FETCH gives the exact
    stored bytes of every message.  Flags and keywords come back as the
    file names and C{dovecot-keywords} say (plus C{\\Recent}).
    INTERNALDATE is the file's mtime (a 2038 date included),
    in the server's own zone: only the instant survives, as in any
    Maildir.  UIDs follow the leading time of the file names, then the
    number after C{M}.  The levels C{Archive/2019}, C{Archive/2019/Q1}
    and C{Archive/2019/Q1/Jan} are listed C{\\Noselect \\HasChildren};
    the special-use folders carry their attributes; LSUB lists every
    folder; Dovecot itself writes the same C{subscriptions} file, byte
    for byte, when the user subscribes to the same folders (and refuses
    to subscribe to a mailbox that does not exist).
  - As a destination (APPEND): a NUL is accepted, in a C{~{n}} literal8
    and even in a plain literal, stored, and served as above; a bare CR
    is kept.  An INTERNALDATE more than two hours ahead of the server's
    clock is replaced by the current time (so a 2038 date cannot be kept
    in a Dovecot destination today; the corpus has none), and one
    before 1970 becomes 1901-12-13 20:45:52 UTC (the smallest 32-bit
    time).
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Iterable, Sequence

from attrs import field, frozen

import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)
from imapmig.mail.message import MAILDIR_FLAG_LETTERS, toCRLF

SYSTEM_FLAGS = tuple(flag for _letter, flag in MAILDIR_FLAG_LETTERS)
"""
The IMAP system flags a message can carry, in Maildir letter order.
"""


LARGE_CASE = "large-attachment"
"""
The L{HardMessage.name} of the message of about 21 MB.
"""

_DOMAIN = "hardcases.example.org"
_LARGE_SEED = 20_190_101
_LARGE_PAYLOAD = 15 * 1024 * 1024
_CANONICAL = {flag.lower(): flag for flag in SYSTEM_FLAGS}
# What an IMAP atom cannot hold (RFC 3501 atom-specials, NUL), and any
# octet beyond ASCII.
_NOT_IN_KEYWORDS = re.compile('[(){ %*"\\\\\\]\r\n\0]|[^\x00-\x7f]')
_NOT_IN_FOLDERS = re.compile("[./]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def canonicalFlags(flags: Iterable[str]) -> tuple[str, ...]:
    """
    Put flags in the order the whole test suite compares them in: system
    flags in Maildir letter order (C{\\Draft}, C{\\Flagged},
    C{\\Answered}, C{\\Seen}, C{\\Deleted}, spelled so whatever the case
    given), then keywords sorted, duplicates dropped.

    @param flags: IMAP flags and keywords, without C{\\Recent}.
    @return: the same flags in canonical order.
    @raise ValueError: C{\\Recent} (which no source can set) or another
        unknown backslash flag is given, or a keyword holds a character
        IMAP forbids in an atom.
    """
    system = set()
    keywords = set()
    for flag in flags:
        if flag.startswith("\\"):
            system.add(_systemFlag(flag))
        else:
            keywords.add(_keyword(flag))
    return tuple(f for f in SYSTEM_FLAGS if f in system) + tuple(sorted(keywords))


def _systemFlag(flag: str) -> str:
    """
    The system flag C{flag} spelled as L{SYSTEM_FLAGS} spells it.

    @raise ValueError: not a settable system flag.
    """
    canonical = _CANONICAL.get(flag.lower())
    if canonical is None:
        raise ValueError(f"not a settable system flag: {flag!r}")
    return canonical


def _keyword(flag: str) -> str:
    """
    C{flag}, a keyword, checked.

    @raise ValueError: empty, or with a character IMAP forbids in an atom.
    """
    if not flag or _NOT_IN_KEYWORDS.search(flag):
        raise ValueError(f"unusable keyword {flag!r}")
    return flag


def _toFolder(value: Iterable[str]) -> tuple[str, ...]:
    """
    Convert a folder given as any iterable of names to a tuple.
    """
    return tuple(value)


def _checkFolder(instance: object, attribute: object, value: tuple[str, ...]) -> None:
    """
    Refuse a folder that Maildir++ or modified UTF-7 cannot carry.
    """
    if not value or any(not c or _NOT_IN_FOLDERS.search(c) for c in value):
        raise ValueError(f"unusable folder {value!r}: empty, or a component with . or /")
    # Twisted's imap4-utf-7 codec encodes TAB, CR and LF as "&-", which
    # decodes as "&": refuse every control character.
    if any(_CONTROL.search(c) for c in value):
        raise ValueError(f"unusable folder {value!r}: a control character")


def _checkAware(instance: object, attribute: object, value: datetime) -> None:
    """
    Refuse a naive or fractional internal date.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"internalDate must be timezone-aware, not {value!r}")
    if value.microsecond:
        raise ValueError(f"internalDate must be whole seconds, not {value!r}")


@frozen
class HardMessage:
    """
    One message of the hard-cases corpus, as its source stores it.

    @ivar folder: the folder's hierarchy, one decoded name per level, e.g.
        C{("Archive", "2019", "Q1", "Jan", "Week1")}; C{("INBOX",)} for
        the inbox.  No component is empty or contains C{.}, C{/} or a
        control character.
    @ivar name: a short stable identifier of the case, e.g.
        C{"nul-byte"}, unique within L{hardCases}.
    @ivar raw: the message exactly as stored in the source (it may use
        bare LF, CRLF or both).
    @ivar flags: system flags in Maildir letter order, then keywords
        sorted (see L{canonicalFlags}, which any order given goes through).
    @ivar internalDate: the INTERNALDATE, timezone-aware, in the zone it
        was generated in (a Maildir or an IMAP server keeps only the
        instant), whole seconds.
    """

    folder: tuple[str, ...] = field(converter=_toFolder, validator=_checkFolder)
    name: str
    raw: bytes
    flags: tuple[str, ...] = field(converter=canonicalFlags)
    internalDate: datetime = field(validator=_checkAware)

    @property
    def imapBytes(self) -> bytes:
        """
        The message as an IMAP server holds it after a faithful copy:
        L{raw} with every bare LF turned into CRLF (L{toCRLF}; a bare CR
        stays).
        """
        return toCRLF(self.raw)

    @property
    def sha256(self) -> str:
        """
        The hex SHA-256 of L{imapBytes}.
        """
        return hashlib.sha256(self.imapBytes).hexdigest()

    @property
    def servedBytes(self) -> bytes:
        """
        L{imapBytes} as Dovecot 2.3 answers C{FETCH BODY[]} for it,
        whether it read the message from a Maildir or received it by
        APPEND: every NUL byte replaced by C{0x80}.  Dovecot stores the
        NUL and returns it only in C{FETCH BINARY[]}, which however also
        decodes base64 and quoted-printable parts.
        """
        return self.imapBytes.replace(b"\0", b"\x80")

    @property
    def servedSha256(self) -> str:
        """
        The hex SHA-256 of L{servedBytes}, what
        L{imapmig.testing.dovecot.DovecotInstance.fetchAll} can see.
        """
        return hashlib.sha256(self.servedBytes).hexdigest()

    @property
    def systemFlags(self) -> tuple[str, ...]:
        """
        The system flags of L{flags}, in Maildir letter order.
        """
        return tuple(f for f in self.flags if f.startswith("\\"))

    @property
    def keywords(self) -> tuple[str, ...]:
        """
        The keywords of L{flags}, sorted.
        """
        return tuple(f for f in self.flags if not f.startswith("\\"))

    @property
    def utcDate(self) -> datetime:
        """
        L{internalDate} converted to UTC.
        """
        return self.internalDate.astimezone(timezone.utc)


# -- the corpus ---------------------------------------------------------------


def _zone(hours: int, minutes: int = 0) -> timezone:
    """
    A fixed UTC offset; C{minutes} take the sign of C{hours}.
    """
    sign = -1 if hours < 0 else 1
    return timezone(sign * timedelta(hours=abs(hours), minutes=minutes))


def _head(
    name: str,
    when: datetime,
    subject: str,
    *,
    messageId: str | None = "",
    contentType: str = "text/plain; charset=us-ascii",
    extra: Sequence[str] = (),
) -> list[str]:
    """
    The usual header fields of one case (without the empty line that ends
    them).  C{messageId=""} gives the case's own Message-ID, L{None} none.
    """
    lines = [
        "From: Hard Cases <sender@hardcases.example.org>",
        "To: Alice Example <alice@example.org>",
        f"Subject: {subject}",
        f"Date: {format_datetime(when)}",
    ]
    if messageId == "":
        messageId = f"<{name}@{_DOMAIN}>"
    if messageId is not None:
        lines.append(f"Message-ID: {messageId}")
    lines += [*extra, "MIME-Version: 1.0", f"Content-Type: {contentType}"]
    return lines


def _lf(
    name: str,
    when: datetime,
    subject: str,
    body: str,
    *,
    messageId: str | None = "",
    contentType: str = "text/plain; charset=us-ascii",
    extra: Sequence[str] = (),
) -> bytes:
    """
    A complete message with bare LF line endings: the header fields of
    L{_head}, an empty line, C{body} (encoded in UTF-8).
    """
    head = _head(name, when, subject, messageId=messageId, contentType=contentType, extra=extra)
    return ("\n".join(head) + "\n\n").encode("utf-8") + body.encode("utf-8")


def _foldedSubject(length: int) -> str:
    """
    A Subject field body of C{length} characters (unfolded), folded before
    a space whenever a line would pass 78 characters.
    """
    words = []
    total = -1
    index = 0
    while total < length:
        index += 1
        word = f"w{index:04d}"
        words.append(word)
        total += len(word) + 1
    text = " ".join(words)[:length]
    lines = []
    current = "Subject:"
    for word in text.split(" "):
        if len(current) + 1 + len(word) > 78:
            lines.append(current)
            current = ""
        current += " " + word
    lines.append(current)
    return "\n".join(lines)[len("Subject: ") :]


def _references(minimum: int) -> str:
    """
    A References field body of at least C{minimum} characters, on one line.
    """
    ids: list[str] = []
    while len(" ".join(ids)) < minimum:
        ids.append(f"<ref-{len(ids) + 1:04d}.thread@{_DOMAIN}>")
    return " ".join(ids)


def _largeMessage(when: datetime) -> bytes:
    """
    The message of about 21 MB: a short text part and a base64 attachment
    of 15 MiB of bytes drawn from a seeded L{random.Random}.
    """
    boundary = "=_hardcases_large_boundary"
    payload = random.Random(_LARGE_SEED).randbytes(_LARGE_PAYLOAD)
    head = _head(
        LARGE_CASE,
        when,
        "A large attachment (15 MiB)",
        contentType=f'multipart/mixed; boundary="{boundary}"',
    )
    parts = "\n".join(
        [
            *head,
            "",
            "This is a multi-part message in MIME format.",
            "",
            f"--{boundary}",
            "Content-Type: text/plain; charset=us-ascii",
            "",
            "The attachment holds 15 MiB of pseudo-random bytes.",
            "",
            f"--{boundary}",
            'Content-Type: application/octet-stream; name="random.bin"',
            'Content-Disposition: attachment; filename="random.bin"',
            "Content-Transfer-Encoding: base64",
            "",
            "",
        ]
    ).encode("ascii")
    return parts + base64.encodebytes(payload) + f"--{boundary}--\n".encode("ascii")


def hardCases(large: bool = True) -> tuple[HardMessage, ...]:
    """
    Every hard case, always the same bytes in the same order.

    @param large: include the message of about 21 MB (L{LARGE_CASE}),
        always the last one; leave it out for quick tests.
    @return: the messages; every folder named in the module docstring
        holds at least one.
    """
    inbox = ("INBOX",)
    utc = timezone.utc
    seen, answered, flagged = "\\Seen", "\\Answered", "\\Flagged"
    draft, deleted = "\\Draft", "\\Deleted"
    cases: list[HardMessage] = []

    def add(
        folder: tuple[str, ...],
        name: str,
        when: datetime,
        flags: Sequence[str],
        raw: bytes,
    ) -> None:
        cases.append(
            HardMessage(folder=folder, name=name, raw=raw, flags=tuple(flags), internalDate=when)
        )

    def plain(
        folder: tuple[str, ...],
        name: str,
        when: datetime,
        flags: Sequence[str],
        subject: str,
        body: str | None = None,
    ) -> None:
        if body is None:
            body = f"This is the hard case {name!r}.\n"
        add(folder, name, when, flags, _lf(name, when, subject, body))

    # Flags: none, each system flag alone, all of them, keywords.
    plain(inbox, "flags-none", datetime(2021, 3, 1, 8, 0, 0, tzinfo=utc), (), "No flags")
    plain(
        ("Drafts",), "flag-draft", datetime(2021, 3, 2, 9, 15, 0, tzinfo=_zone(1)),
        (draft,), "Only \\Draft",
    )
    plain(
        inbox, "flag-flagged", datetime(2021, 3, 3, 10, 30, 0, tzinfo=_zone(2)),
        (flagged,), "Only \\Flagged",
    )
    plain(
        inbox, "flag-answered", datetime(2021, 3, 4, 11, 45, 0, tzinfo=_zone(-5)),
        (answered,), "Only \\Answered",
    )
    plain(
        inbox, "flag-seen", datetime(2021, 3, 5, 12, 0, 0, tzinfo=_zone(9)),
        (seen,), "Only \\Seen",
    )
    plain(
        ("Trash",), "flag-deleted", datetime(2021, 3, 6, 13, 15, 0, tzinfo=utc),
        (deleted,), "Only \\Deleted",
    )
    plain(
        inbox, "flags-all-system", datetime(2021, 3, 7, 14, 30, 0, tzinfo=_zone(-8)),
        (draft, flagged, answered, seen, deleted), "Every system flag",
    )
    plain(
        inbox, "keywords-all", datetime(2021, 3, 8, 15, 45, 0, tzinfo=_zone(5, 30)),
        ("$Forwarded", "$Junk", "$NotJunk", "$label1", "Work"), "Every keyword, no system flag",
    )
    plain(
        ("Junk",), "keyword-junk", datetime(2021, 3, 9, 16, 0, 0, tzinfo=utc),
        (seen, "$Junk"), "Special offer (junk)",
    )
    plain(
        ("Sent",), "keyword-forwarded", datetime(2021, 3, 10, 17, 15, 0, tzinfo=_zone(1)),
        (seen, "$Forwarded"), "Fwd: forwarded from the Sent folder",
    )

    # Folders: non-ASCII, a child, deep, a space, an ampersand.
    plain(
        ("Entwürfe",), "folder-entwuerfe", datetime(2021, 4, 1, 8, 0, 0, tzinfo=_zone(2)),
        (draft, seen), "Entwurf (in a folder named in German)",
    )
    plain(
        ("Ärger",), "folder-aerger", datetime(2021, 4, 2, 8, 0, 0, tzinfo=_zone(2)),
        (seen,), "In a non-ASCII parent folder",
    )
    plain(
        ("Ärger", "Ünter"), "folder-aerger-uenter",
        datetime(2021, 4, 3, 8, 0, 0, tzinfo=_zone(2)), (seen,),
        "In a non-ASCII child folder",
    )
    plain(
        ("Archive", "2019", "Q1", "Jan", "Week1"), "folder-deep",
        datetime(2019, 1, 3, 9, 0, 0, tzinfo=_zone(1)), (seen,),
        "Five levels down",
    )
    plain(
        ("Sent Items",), "folder-space", datetime(2021, 4, 5, 8, 0, 0, tzinfo=utc),
        (seen,), "In a folder with a space",
    )
    plain(
        ("Tom & Jerry",), "folder-ampersand", datetime(2021, 4, 6, 8, 0, 0, tzinfo=utc),
        (seen, "$label1", "Work"), "In a folder with an ampersand",
    )
    plain(
        ("Archive",), "folder-archive", datetime(2021, 4, 7, 8, 0, 0, tzinfo=utc),
        (seen,), "In the special-use Archive folder",
    )

    # Internal dates across zones and years.
    dates = (
        ("date-1999-pst", ("Archive",), datetime(1999, 12, 31, 23, 59, 59, tzinfo=_zone(-8))),
        ("date-2000-leap-day", ("Archive",), datetime(2000, 2, 29, 12, 0, 0, tzinfo=utc)),
        ("date-2015-plus1400", ("Sent Items",),
         datetime(2015, 6, 30, 23, 59, 59, tzinfo=_zone(14))),
        ("date-2021-utc", ("Tom & Jerry",), datetime(2021, 7, 1, 0, 0, 1, tzinfo=utc)),
        ("date-1980-plus0530", ("Entwürfe",), datetime(1980, 1, 1, 0, 0, 0, tzinfo=_zone(5, 30))),
        ("date-minus0330", ("送信済み",),
         datetime(2007, 11, 4, 1, 30, 0, tzinfo=_zone(-3, 30))),
    )  # fmt: skip
    for name, folder, when in dates:
        plain(folder, name, when, (seen,), f"Dated {format_datetime(when)}")

    # Bodies.
    when = datetime(2022, 5, 1, 10, 0, 0, tzinfo=_zone(2))
    plain(inbox, "eol-lf", when, (seen,), "Bare LF line endings", "one\ntwo\n\nthree\n")
    crlf = _lf("eol-crlf", when, "CRLF line endings", "one\ntwo\n\nthree\n")
    add(inbox, "eol-crlf", when, (seen,), crlf.replace(b"\n", b"\r\n"))
    # Header lines alternate CRLF and LF, the empty line is LF after a
    # CRLF, the body mixes both.
    mixed = _head("eol-mixed", when, "Mixed line endings")
    mixedHead = "".join(line + ("\r\n" if i % 2 == 0 else "\n") for i, line in enumerate(mixed))
    if not mixedHead.endswith("\r\n"):
        mixedHead = mixedHead[:-1] + "\r\n"
    add(
        inbox, "eol-mixed", when, (seen,),
        mixedHead.encode("ascii") + b"\ncrlf line\r\nlf line\nanother crlf\r\n\r\nlast, lf\n",
    )  # fmt: skip
    plain(
        inbox, "bare-cr", when, (seen,), "A bare CR inside a line",
        "before the CR\rafter the CR, same line\n",
    )
    add(
        inbox, "nul-byte", when, (seen,),
        _lf("nul-byte", when, "A NUL byte in the body", "before NUL\0after NUL\n"),
    )  # fmt: skip
    add(
        inbox, "utf8-8bit-no-cte", when, (seen,),
        _lf(
            "utf8-8bit-no-cte", when, "8-bit UTF-8 body, no Content-Transfer-Encoding",
            "Gr\u00fc\u00dfe aus K\u00f6ln \u2014 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad"
            "\u30b9\u30c8 \u2014 \u041f\u0440\u0438\u0432\u0435\u0442\n",
            contentType="text/plain; charset=utf-8",
        ),
    )  # fmt: skip
    add(inbox, "empty-body", when, (seen,), _lf("empty-body", when, "An empty body", ""))
    plain(
        inbox, "from-lines", when, (seen,), "Lines an mbox must quote",
        "From here\n>From there\n>>From everywhere\nFromage is not quoted\n"
        " From with a leading space\nFrom the end\n",
    )
    add(
        inbox, "long-headers", when, (seen,),
        _lf(
            "long-headers", when, _foldedSubject(2000), "Long header lines above.\n",
            extra=(f"References: {_references(1500)}",),
        ),
    )  # fmt: skip
    sharedId = f"<shared-id@{_DOMAIN}>"
    for index, text in enumerate(("The first", "A different second"), start=1):
        name = f"same-message-id-{index}"
        add(
            inbox, name, when + timedelta(minutes=index), (seen,),
            _lf(name, when + timedelta(minutes=index), f"{text} message with a shared Message-ID",
                f"{text} message sharing Message-ID {sharedId}.\n", messageId=sharedId),
        )  # fmt: skip
    add(
        inbox, "no-message-id", when, (seen,),
        _lf("no-message-id", when, "No Message-ID", "This message has no Message-ID.\n",
            messageId=None),
    )  # fmt: skip
    duplicate = _lf("duplicate", when, "Two identical copies", "One of two identical copies.\n")
    for index in (1, 2):
        add(inbox, f"duplicate-{index}", when, (seen,), duplicate)
    plain(
        ("送信済み",), "folder-sent-japanese", datetime(2021, 4, 4, 8, 0, 0, tzinfo=_zone(9)),
        (seen, answered), "In a folder named in Japanese",
    )

    if large:
        bigDate = datetime(2020, 6, 15, 18, 30, 0, tzinfo=_zone(-4))
        add(("Archive",), LARGE_CASE, bigDate, (seen,), _largeMessage(bigDate))
    return tuple(cases)


def caseFolders(cases: Iterable[HardMessage]) -> tuple[tuple[str, ...], ...]:
    """
    The folders holding at least one of C{cases}, in order of first use.

    @param cases: hard cases.
    """
    return tuple(dict.fromkeys(case.folder for case in cases))


# -- Maildir ------------------------------------------------------------------


def allKeywords(cases: Iterable[HardMessage]) -> tuple[str, ...]:
    """
    Every keyword set on one of C{cases}, sorted: index C{i} of the result
    is the Maildir keyword letter C{chr(ord("a") + i)} in every folder
    L{imapmig.testing.hardfiles.writeHardMaildir} writes.

    @param cases: hard cases.
    @raise ValueError: more than 26 keywords (Maildir has only C{a}-C{z}).
    """
    keywords = tuple(sorted({k for case in cases for k in case.keywords}))
    if len(keywords) > 26:
        raise ValueError(f"{len(keywords)} keywords, but Maildir has 26 letters")
    return keywords


# -- mbox ---------------------------------------------------------------------


