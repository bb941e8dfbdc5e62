# -*- test-case-name: tests.test_testing_corpus -*-
"""
A deterministic sample-mailbox generator for the tests, the demo and the
benchmark: the same arguments (above all the same seed) always write
byte-identical files, with the same names and modification times.

Two layouts: a Maildir++ tree (L{writeMaildir}), as Dovecot, Courier and
most migrations' sources keep mail, and a directory of C{.eml} files
(L{writeEmlDirectory}).  Bodies are stored with bare LF line endings, as
real Maildirs store them; the returned L{Corpus} describes every message,
including the SHA-256 of its CRLF form, which is what an IMAP server holds
after an APPEND, so a test can compare a destination with the source
without keeping the bodies in memory.

Profiles:
  - C{"realistic"}: sizes log-normal with a median of about 8 KB; about
    a fifth of the messages carry a base64 attachment, with a tail up to a
    few MB (capped at 5 MB); about an eighth have 8-bit UTF-8 bodies
    (C{Content-Transfer-Encoding: 8bit}).  The mean is about 35 KB
    (5,000 messages: about 170 MB, written in about 2 seconds).
  - C{"small"}: text-only messages of about 2 KB.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Sequence

from attrs import frozen

import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)
from imapmig.mail.message import maildirFlags, toCRLF

_PROFILES = ("realistic", "small")
_MAX_SIZE = 5 * 1024 * 1024
_HOST = "mx1.example.net"
_OWNER = ("Alice Example", "alice@example.org")
_FIRST_TIMESTAMP = 1104537600  # 2005-01-01
_LAST_TIMESTAMP = 1751328000  # 2025-07-01, well before 2038
_PEOPLE = (
    ("Bob Builder", "bob@example.com"),
    ("Carol Danvers", "carol@example.net"),
    ("Dave Null", "dave@lists.example.org"),
    ("Erin Ops", "erin@ops.example.com"),
    ("Frank Ledger", "frank@accounts.example.com"),
    ("Grace Hopper", "grace@navy.example.mil"),
    ("Heidi Klum", "heidi@example.de"),
    ("Ivan Petrov", "ivan@example.ru"),
    ("Judy Chen", "judy@example.cn"),
    ("Mallory Smith", "mallory@example.biz"),
    ("Niaj Kumar", "niaj@example.in"),
    ("Olivia Rossi", "olivia@example.it"),
    ("Peggy Sue", "peggy@example.co.uk"),
    ("Rupert Giles", "rupert@library.example.edu"),
    ("Sybil Trelawney", "sybil@hogwarts.example.uk"),
    ("Trent Reznor", "trent@example.com"),
    ("Victor Hugo", "victor@example.fr"),
    ("Walter White", "walter@example.com"),
)
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or "
    "his from at which but have an they you were her she there been one all "
    "would their we him has when who more will no if out so said what up its "
    "about than into them can only other time new some could these two may "
    "first then do any like my now over such our man me even most made after "
    "also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being "
    "under never day same another know while last might us great old year off "
    "come since against go came right used take three meeting invoice report "
    "deadline reactor deferred protocol mailbox folder migration server client "
    "release patch review branch ticket backup quota schedule budget agenda"
).split()
_UTF8_WORDS = (
    "Grüße Müller Straße naïve café déjà vu façade Ångström smörgåsbord "
    "Привет мир спасибо письмо Καλημέρα κόσμε 日本語 メール 東京 你好 邮件 "
    "שלום مرحبا ¡hola! año señor Zürich Łódź Kraków Dvořák Brno ðœ €uro"
).split()
_SUBJECTS = (
    "Re: meeting notes",
    "Invoice {n}",
    "Weekly report, week {n}",
    "Fwd: the patch for ticket #{n}",
    "Lunch on Friday?",
    "[twisted] Re: Deferred cancellation in {n}",
    "Your order {n} has shipped",
    "Backup finished: {n} files",
    "Quota warning",
    "Re: Re: release {n} schedule",
    "Holiday photos",
    "Question about the migration",
)
_ATTACHMENTS = (
    ("application/pdf", "report-{n}.pdf"),
    ("image/jpeg", "photo-{n}.jpg"),
    ("application/zip", "archive-{n}.zip"),
    ("application/octet-stream", "data-{n}.bin"),
)
_ZONES = tuple(
    timezone(timedelta(minutes=m)) for m in (0, 0, 60, 120, -300, -480, 330, 540)
)


@frozen
class CorpusMessage:
    """
    One generated message.

    @ivar folder: the folder's hierarchy, e.g. C{("Archive", "2019")}.
    @ivar key: the Maildir unique name (the file name without the C{:2,}
        info) or, in an C{.eml} directory, the file name.
    @ivar flags: IMAP system flags, in Maildir letter order (C{\\Draft},
        C{\\Flagged}, C{\\Answered}, C{\\Seen}, C{\\Deleted}).
    @ivar internalDate: the delivery time (UTC; also the file's mtime and
        the instant of its C{Date:} header).
    @ivar sha256: hex SHA-256 of the body with CRLF line endings.
    @ivar size: the size of the file as stored, with bare LF line endings.
    """

    folder: tuple[str, ...]
    key: str
    flags: tuple[str, ...]
    internalDate: datetime
    sha256: str
    size: int


@frozen
class Corpus:
    """
    What a generator wrote.

    @ivar messages: every message, in the order written (oldest first).
    @ivar folders: every folder created, in the order given.
    """

    messages: tuple[CorpusMessage, ...]
    folders: tuple[tuple[str, ...], ...]

    def inFolder(self, folder: tuple[str, ...]) -> tuple[CorpusMessage, ...]:
        """
        The messages of one folder, in the order written.

        @param folder: the folder's hierarchy.
        """
        return tuple(m for m in self.messages if m.folder == folder)


def maildirFolderName(folder: tuple[str, ...]) -> str:
    """
    The Maildir++ directory name of C{folder} relative to the Maildir root:
    C{""} for C{("INBOX",)}, C{".Archive.2019"} for C{("Archive", "2019")},
    non-ASCII names encoded in modified UTF-7 as Dovecot does.

    @param folder: the folder's hierarchy; no component may be empty or
        contain C{.} or C{/}.
    @raise ValueError: the folder cannot be stored in Maildir++.
    """
    _checkMaildirFolder(folder)
    if folder == ("INBOX",):
        return ""
    return "." + ".".join(c.encode("imap4-utf-7").decode("ascii") for c in folder)


def _checkMaildirFolder(folder: tuple[str, ...]) -> None:
    """
    @raise ValueError: C{folder} has no component, or one that is empty or
        holds C{.} or C{/}.
    """
    if not folder:
        raise ValueError("a folder needs at least one component")
    for component in folder:
        if not component or "." in component or "/" in component:
            raise ValueError(f"unusable Maildir++ folder component {component!r}")


def writeMaildir(
    path: str,
    count: int = 5000,
    *,
    seed: int = 1,
    folders: Sequence[tuple[str, ...]] = (
        ("INBOX",),
        ("Sent",),
        ("Archive",),
        ("Archive", "2019"),
        ("Lists", "twisted"),
    ),
    profile: str = "realistic",
) -> Corpus:
    """
    Write a Maildir++ tree of C{count} generated messages.

    Every folder gets C{cur}, C{new} and C{tmp} (subfolders also an empty
    C{maildirfolder} file), even when no message lands in it.  When there
    are at least as many messages as folders, each folder gets at least
    one; the rest are spread at random, INBOX receiving the most.  Seen,
    answered, flagged, draft and deleted messages are stored in C{cur}
    with their flag letters (C{<ts>.M<n>P<pid>.<host>:2,FRS}); some unseen
    ones in C{new}, without info.  Each file's mtime is its delivery time.

    @param path: the Maildir root (INBOX); created if missing.
    @param count: how many messages.
    @param seed: the seed of the only source of randomness.
    @param folders: the folders to create, each a hierarchy tuple.
    @param profile: C{"realistic"} or C{"small"}.
    @return: what was written.
    """
    return _writeMaildir(_Generator(seed, profile), path, count, folders, 0)


def writeMaildirs(
    paths: Sequence[str],
    count: int,
    *,
    seed: int = 1,
    folders: Sequence[tuple[str, ...]] = (("INBOX",),),
    profile: str = "small",
) -> list[Corpus]:
    """
    Write a Maildir++ tree of C{count} generated messages into each of
    C{paths} (as L{writeMaildir} does one), from one generator: cheaper
    than a L{writeMaildir} each for many small trees (a generator costs
    ~40 ms to make), and every message of every tree distinct.

    @return: what was written, one corpus per path, in order.
    """
    generator = _Generator(seed, profile)
    return [
        _writeMaildir(generator, path, count, folders, index * count)
        for index, path in enumerate(paths)
    ]


def _writeMaildir(
    generator: _Generator,
    path: str,
    count: int,
    folders: Sequence[tuple[str, ...]],
    first: int,
) -> Corpus:
    """
    Write one Maildir++ tree (L{writeMaildir}) with C{generator}, its
    messages numbered from C{first}.
    """
    folders = tuple(tuple(f) for f in folders)
    directories = makeMaildirFolders(path, folders)
    if not folders:
        return Corpus(messages=(), folders=())
    weights = [4 if f == ("INBOX",) else 1 for f in folders]
    messages = []
    for placed, timestamp in enumerate(generator.timestamps(count)):
        which = placed
        if placed >= len(folders) or count < len(folders):
            which = generator.rng.choices(range(len(folders)), weights)[0]
        messages.append(
            _writeMaildirMessage(
                generator, directories[which], folders[which], first + placed, timestamp
            )
        )
    return Corpus(messages=tuple(messages), folders=folders)


def makeMaildirFolders(path: str, folders: Sequence[tuple[str, ...]]) -> list[str]:
    """
    Make the Maildir++ tree at C{path} (the INBOX) with C{folders}, each
    with its C{cur}, C{new} and C{tmp}, every one but INBOX marked by an
    empty C{maildirfolder} file (its mtime that of the oldest generated
    message, so that the same call makes the same files).

    @return: the folders' directories, in order.
    """
    directories = [os.path.join(path, maildirFolderName(f)) for f in folders]
    os.makedirs(path, exist_ok=True)
    for directory in [path, *directories]:
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
    for folder, directory in zip(folders, directories):
        if folder != ("INBOX",):
            _writeFile(os.path.join(directory, "maildirfolder"), b"", _FIRST_TIMESTAMP)
    return directories


def _writeMaildirMessage(
    generator: _Generator, directory: str, folder: tuple[str, ...], index: int, timestamp: int
) -> CorpusMessage:
    """
    Write message number C{index} of C{generator} into the Maildir folder
    C{directory}: in C{cur} with its flag letters, or (some unseen ones)
    in C{new} without info.
    """
    rng = generator.rng
    letters = generator.flagLetters()
    inNew = not letters and rng.random() < 0.5
    key = f"{timestamp}.M{index}P{rng.randrange(1000, 65536)}.{_HOST}"
    body = generator.message(index, timestamp, folder)
    name = os.path.join("new", key) if inNew else os.path.join("cur", f"{key}:2,{letters}")
    _writeFile(os.path.join(directory, name), body, timestamp)
    return _corpusMessage(folder, key, maildirFlags(letters), body, timestamp)


def _corpusMessage(
    folder: tuple[str, ...], key: str, flags: tuple[str, ...], body: bytes, timestamp: int
) -> CorpusMessage:
    """
    What the corpus records of a message written: C{internalDate} its
    delivery time, C{sha256} and C{size} of its body as IMAP serves it.
    """
    return CorpusMessage(
        folder=folder,
        key=key,
        flags=flags,
        internalDate=datetime.fromtimestamp(timestamp, timezone.utc),
        sha256=hashlib.sha256(toCRLF(body)).hexdigest(),
        size=len(body),
    )


def writeEmlDirectory(
    path: str, count: int, *, seed: int = 1, profile: str = "realistic"
) -> Corpus:
    """
    Write C{count} generated messages as C{00001.eml}, C{00002.eml}, ...
    (bare LF line endings; each file's mtime is its delivery time).

    @param path: the directory; created if missing.
    @param count: how many messages.
    @param seed: the seed of the only source of randomness.
    @param profile: C{"realistic"} or C{"small"}.
    @return: what was written: every message in folder C{("INBOX",)},
        without flags, its key the file name.
    """
    generator = _Generator(seed, profile)
    os.makedirs(path, exist_ok=True)
    messages = []
    for index, timestamp in enumerate(generator.timestamps(count)):
        key = f"{index + 1:05d}.eml"
        body = generator.message(index, timestamp, ("INBOX",))
        _writeFile(os.path.join(path, key), body, timestamp)
        messages.append(_corpusMessage(("INBOX",), key, (), body, timestamp))
    return Corpus(messages=tuple(messages), folders=(("INBOX",),))


def _writeFile(path: str, body: bytes, timestamp: int) -> None:
    with open(path, "wb") as f:
        f.write(body)
    os.utime(path, (timestamp, timestamp))


class _Generator:
    """
    Makes message bodies from one L{random.Random}; every choice is drawn
    from it in a fixed order, so a seed determines every byte.
    """

    def __init__(self, seed: int, profile: str) -> None:
        if profile not in _PROFILES:
            raise ValueError(f"profile must be one of {_PROFILES}, not {profile!r}")
        self.rng = random.Random(seed)
        self.seed = seed
        self.profile = profile
        # Text is cut from two pools built once: slicing them is far
        # cheaper than drawing every word of every message.
        self._asciiPool = self._pool(_WORDS, 300_000)
        self._utf8Pool = self._pool(_WORDS + _UTF8_WORDS * 3, 300_000)

    def _pool(self, words: Sequence[str], size: int) -> bytes:
        rng = self.rng
        lines = []
        total = 0
        while total < size:
            line = " ".join(rng.choices(words, k=rng.randrange(4, 13)))
            line = line[0].upper() + line[1:] + rng.choice(".,.?!:")
            lines.append(line)
            total += len(line.encode("utf-8")) + 1
            if rng.random() < 0.15:
                lines.append("")
                total += 1
        pool = ("\n".join(lines) + "\n").encode("utf-8")
        return pool + pool

    def timestamps(self, count: int) -> list[int]:
        """
        C{count} delivery times, oldest first.
        """
        rng = self.rng
        return sorted(rng.randrange(_FIRST_TIMESTAMP, _LAST_TIMESTAMP) for _ in range(count))

    def flagLetters(self) -> str:
        """
        Maildir flag letters for one message, in ASCII order.
        """
        rng = self.rng
        letters = []
        seen = rng.random() < 0.85
        if rng.random() < 0.015:
            letters.append("D")
        if rng.random() < 0.06:
            letters.append("F")
        if seen and rng.random() < 0.12:
            letters.append("R")
        if seen:
            letters.append("S")
        if rng.random() < 0.01:
            letters.append("T")
        return "".join(letters)

    def _text(self, size: int, utf8: bool) -> bytes:
        """
        About C{size} octets of text, whole lines, ending with LF.
        """
        pool = self._utf8Pool if utf8 else self._asciiPool
        half = len(pool) // 2
        size = min(size, half - 1000)
        start = pool.index(b"\n", self.rng.randrange(half)) + 1
        end = pool.index(b"\n", start + size) + 1
        return pool[start:end]

    def message(self, index: int, timestamp: int, folder: tuple[str, ...]) -> bytes:
        """
        One complete message (headers and body) with bare LF line endings.
        """
        utf8 = self.rng.random() < 0.125
        textSize, attachmentSize = self._sizes()
        headers = self._headers(index, timestamp, folder, utf8)
        charset, encoding = ("utf-8", "8bit") if utf8 else ("us-ascii", "7bit")
        textHeaders = [
            f"Content-Type: text/plain; charset={charset}; format=flowed",
            f"Content-Transfer-Encoding: {encoding}",
        ]
        text = self._text(textSize, utf8)
        if not attachmentSize:
            head = "\n".join(headers + textHeaders) + "\n\n"
            return head.encode("ascii") + text
        return self._withAttachment(index, headers, textHeaders, text, attachmentSize)

    def _sizes(self) -> tuple[int, int]:
        """
        The sizes of a message's text and of its attachment (0: none).
        """
        rng = self.rng
        if self.profile != "realistic":
            return max(300, int(rng.gauss(1300, 150))), 0
        textSize = int(rng.lognormvariate(math.log(6000), 0.6))
        textSize = max(200, min(textSize, 200_000))
        if rng.random() >= 0.2:
            return textSize, 0
        attachmentSize = int(rng.lognormvariate(math.log(40_000), 1.4))
        # base64 grows by 4/3, plus a LF per 76 characters.
        budget = _MAX_SIZE - textSize - 4096
        return textSize, max(500, min(attachmentSize, budget * 3 * 76 // (4 * 77)))

    def _headers(
        self, index: int, timestamp: int, folder: tuple[str, ...], utf8: bool
    ) -> list[str]:
        """
        A message's header lines, up to C{MIME-Version}: from someone to
        the owner, or from the owner in C{Sent}; a C{List-Id} in C{Lists}.
        """
        rng = self.rng
        person = rng.choice(_PEOPLE)
        sender, recipient = (_OWNER, person) if folder[:1] == ("Sent",) else (person, _OWNER)
        when = datetime.fromtimestamp(timestamp, rng.choice(_ZONES))
        date = format_datetime(when)
        subjectHeader = self._subject(utf8)
        domain = sender[1].split("@")[1]
        messageId = f"<{timestamp}.{index}.{self.seed}.{rng.getrandbits(32):08x}@{domain}>"
        relay = f"192.0.2.{rng.randrange(1, 255)}"
        headers = [
            f"Return-Path: <{sender[1]}>",
            f"Received: from mail.{domain} (mail.{domain} [{relay}])",
            f"\tby {_HOST} with ESMTPS id {rng.getrandbits(40):010X}",
            f"\tfor <{recipient[1]}>; {date}",
            f"Date: {date}",
            f'From: "{sender[0]}" <{sender[1]}>',
            f'To: "{recipient[0]}" <{recipient[1]}>',
            f"Subject: {subjectHeader}",
            f"Message-ID: {messageId}",
        ]
        if folder[:1] == ("Lists",):
            listName = folder[-1].lower()
            headers.append(f"List-Id: {listName} <{listName}.lists.example.org>")
        headers.append("MIME-Version: 1.0")
        return headers

    def _subject(self, utf8: bool) -> str:
        """
        A C{Subject} field's value; with a non-ASCII word, RFC 2047 encoded.
        """
        rng = self.rng
        subject = rng.choice(_SUBJECTS).format(n=rng.randrange(100, 100_000))
        if not utf8:
            return subject
        subject += " " + rng.choice(_UTF8_WORDS)
        encoded = base64.b64encode(subject.encode("utf-8")).decode("ascii")
        return f"=?utf-8?b?{encoded}?="

    def _withAttachment(
        self,
        index: int,
        headers: list[str],
        textHeaders: list[str],
        text: bytes,
        attachmentSize: int,
    ) -> bytes:
        """
        A C{multipart/mixed} message: C{text}, then an attachment of
        C{attachmentSize} random octets in base64.
        """
        rng = self.rng
        boundary = f"=_imapmig_{index}_{rng.getrandbits(48):012x}"
        contentType, fileName = rng.choice(_ATTACHMENTS)
        fileName = fileName.format(n=rng.randrange(1000, 10_000))
        head = "\n".join(
            headers
            + [
                f'Content-Type: multipart/mixed; boundary="{boundary}"',
                "",
                "This is a multi-part message in MIME format.",
                "",
                f"--{boundary}",
            ]
            + textHeaders
        ) + "\n\n"
        partHead = "\n".join(
            [
                f"--{boundary}",
                f'Content-Type: {contentType}; name="{fileName}"',
                f'Content-Disposition: attachment; filename="{fileName}"',
                "Content-Transfer-Encoding: base64",
            ]
        ) + "\n\n"
        return b"".join(
            [
                head.encode("ascii"),
                text,
                partHead.encode("ascii"),
                base64.encodebytes(rng.randbytes(attachmentSize)),
                f"--{boundary}--\n".encode("ascii"),
            ]
        )
