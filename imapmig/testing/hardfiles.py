# -*- test-case-name: tests.test_testing_hardcases -*-
"""
The hard cases (L{imapmig.testing.hardcases}) stored as a source keeps
them and what a faithful migration must make of them:
L{writeHardMaildir} and L{writeHardMbox} write them, L{loadIntoDovecot}
makes a private Dovecot serve them as an IMAP source, and
L{expectedByMailbox} and L{expectedFromMbox} say what a migration must
produce.  Everything is deterministic: the same call writes the same
bytes, file names and modification times.  Taken out of C{hardcases.py},
which keeps the messages themselves.
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from typing import Iterable, Sequence

from imapmig.mail.message import MAILDIR_FLAG_LETTERS
from imapmig.testing.corpus import makeMaildirFolders, maildirFolderName
from imapmig.testing.dovecot import DovecotInstance
from imapmig.testing.hardcases import HardMessage, allKeywords, caseFolders

MBOX_SENDER = "hardcases@example.com"
"""
The address on every C{From } separator line L{writeHardMbox} writes.
"""


_MAILDIR_HOST = "hard"
_LETTER_OF = {flag.lower(): letter for letter, flag in MAILDIR_FLAG_LETTERS}
_MBOXRD_FROM = re.compile(rb"^(>*From )", re.MULTILINE)
_MBOXO_FROM = re.compile(rb"^From ", re.MULTILINE)
_MBOXO_QUOTED = re.compile(rb"^>From ", re.MULTILINE)
_QUOTINGS = ("mboxrd", "mboxo")
_X_STATUS = (("A", "\\Answered"), ("F", "\\Flagged"), ("T", "\\Draft"), ("D", "\\Deleted"))


def maildirFileName(index: int, case: HardMessage, keywords: Sequence[str]) -> str:
    """
    The name L{writeHardMaildir} gives C{case}'s file in C{cur/}:
    C{<unixtime>.M<index>P1.hard,S=<size>:2,<letters>}, the time the
    internal date, the size that of L{HardMessage.raw}, the letters the
    system flags' (C{DFRST}) then the keywords' (C{a} for C{keywords[0]},
    and so on), each group in ASCII order.

    @param index: the position of C{case} in the written sequence, which
        orders messages of the same second (Dovecot sorts new files by
        time, then by the number after C{M}).
    @param case: the message.
    @param keywords: the keyword table of its folder (L{allKeywords}).
    """
    letters = "".join(_LETTER_OF[f.lower()] for f in case.systemFlags)
    letters += "".join(sorted(chr(ord("a") + keywords.index(k)) for k in case.keywords))
    timestamp = int(case.internalDate.timestamp())
    return f"{timestamp}.M{index}P1.{_MAILDIR_HOST},S={len(case.raw)}:2,{letters}"


def subscriptionsFile(folders: Iterable[tuple[str, ...]]) -> bytes:
    """
    The content of a Dovecot 2.3 C{subscriptions} file subscribing to
    C{folders}: the version 2 header C{"V\\t2\\n\\n"}, then one line per
    folder with the levels in modified UTF-7 (the Maildir++ storage
    names) joined by tabs, whatever the namespace separator.  Dovecot
    tab-escapes C{\\x01}, tab, CR and LF in a level, which no
    L{HardMessage.folder} contains.

    @param folders: folder hierarchies, in the order to list them.
    """
    lines = [
        "\t".join(c.encode("imap4-utf-7").decode("ascii") for c in folder) + "\n"
        for folder in folders
    ]
    return ("V\t2\n\n" + "".join(lines)).encode("ascii")


def _writeFile(path: str, content: bytes, mtime: float | None = None) -> None:
    """
    Write C{content} to C{path} and, when given, set its mtime and atime.
    """
    with open(path, "wb") as f:
        f.write(content)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def writeHardMaildir(root: str, cases: Sequence[HardMessage]) -> None:
    """
    Write C{cases} as a Maildir++ tree the way Dovecot keeps one.

    INBOX is C{root} itself (C{cur}, C{new}, C{tmp}); every other folder
    holding a case is a directory C{root/.A.B} (L{maildirFolderName}) with
    C{cur}, C{new}, C{tmp} and an empty C{maildirfolder} file.  The
    intermediate levels of a hierarchy get no directory, as when Dovecot
    creates C{A.B} (so it lists C{A} as non-selectable).  Every message is
    a file in C{cur/} named by L{maildirFileName}, its mtime (and atime)
    its internal date, which is where Dovecot reads INTERNALDATE from.
    Each folder directory (INBOX included) gets a C{dovecot-keywords} file
    with the keyword table of L{allKeywords} (C{"0 $Forwarded"} and so
    on) when any case has a keyword; C{root/subscriptions} subscribes to
    every folder written (L{subscriptionsFile}).

    @param root: the Maildir root; created if missing.  Existing files of
        the same names are replaced; nothing else is removed.
    @param cases: the messages, e.g. L{hardCases}C{()}.
    """
    keywords = allKeywords(cases)
    folders = caseFolders(cases)
    if ("INBOX",) not in folders:
        folders = (("INBOX",),) + folders
    table = "".join(f"{i} {k}\n" for i, k in enumerate(keywords)).encode("ascii")
    for directory in makeMaildirFolders(root, folders):
        if keywords:
            _writeFile(os.path.join(directory, "dovecot-keywords"), table)
    for index, case in enumerate(cases):
        path = os.path.join(
            root,
            maildirFolderName(case.folder),
            "cur",
            maildirFileName(index, case, keywords),
        )
        _writeFile(path, case.raw, case.internalDate.timestamp())
    _writeFile(os.path.join(root, "subscriptions"), subscriptionsFile(folders))


def loadIntoDovecot(instance: DovecotInstance, user: str, cases: Sequence[HardMessage]) -> None:
    """
    Make a private Dovecot serve C{cases} from the account of C{user}, as
    the IMAP source of a migration test: the Maildir is written into the
    user's mail location (L{DovecotInstance.maildirPath}) and handed to
    the mail user (L{DovecotInstance.chownHome}).

    Call it before the user's first login, or at least while no session
    of that user is open.  What Dovecot then serves, per case, is what
    L{expectedByMailbox} describes (see the module docstring for what
    differs from the stored bytes: only the NUL byte).

    @param instance: the Dovecot, started or not.
    @param user: one of its users.
    @param cases: the messages.
    """
    writeHardMaildir(instance.maildirPath(user), cases)
    instance.chownHome(user)


def expectedByMailbox(
    cases: Sequence[HardMessage], separator: str, *, exact: bool = False
) -> dict[str, list[tuple[str, tuple[str, ...], datetime]]]:
    """
    What a faithful destination holds, keyed as
    L{DovecotInstance.fetchAll} reports mailboxes: the hierarchy joined
    with C{separator}, decoded, top-level folders as siblings of C{INBOX}.
    Only folders holding a case appear (not the intermediate levels of a
    hierarchy, which a Maildir++ source leaves non-selectable).

    @param cases: the messages, in the order written.
    @param separator: the destination's hierarchy delimiter.
    @param exact: hash L{HardMessage.imapBytes}, what the destination
        must store, instead of L{HardMessage.servedBytes}, what a Dovecot
        holding it returns to C{FETCH BODY[]} (and so to C{fetchAll}); the
        two differ only for a message with a NUL byte.
    @return: per mailbox, one C{(SHA-256, flags, internal date in UTC)}
        per message, in the UID order Dovecot gives the files of
        L{writeHardMaildir} (by internal date, then by position in
        C{cases}).
    """
    ordered = sorted(
        range(len(cases)), key=lambda i: (int(cases[i].internalDate.timestamp()), i)
    )
    result: dict[str, list[tuple[str, tuple[str, ...], datetime]]] = {}
    for folder in caseFolders(cases):
        result[separator.join(folder)] = []
    for i in ordered:
        case = cases[i]
        digest = case.sha256 if exact else case.servedSha256
        result[separator.join(case.folder)].append((digest, case.flags, case.utcDate))
    return result


def mboxPath(folder: tuple[str, ...]) -> str:
    """
    The file of C{folder} relative to an mbox directory, in Thunderbird's
    layout: C{"INBOX"}, C{"Sent Items"}, and for a child the parent's name
    with C{.sbd} as a directory: C{"Ärger.sbd/Ünter"}.

    @param folder: a folder's hierarchy.
    """
    return os.path.join(*(c + ".sbd" for c in folder[:-1]), folder[-1])


def mboxFromLine(case: HardMessage) -> bytes:
    """
    The separator line (without its LF) that introduces C{case} in an
    mbox: C{From hardcases@example.com} and the C{asctime} of the internal
    date in UTC, e.g. C{b"From hardcases@example.com Sat Jan  1 07:59:59
    2000"}.

    @param case: the message.
    """
    stamp = time.asctime(case.utcDate.timetuple())
    return f"From {MBOX_SENDER} {stamp}".encode("ascii")


def _statusHeaders(case: HardMessage, eol: bytes) -> bytes:
    """
    The C{Status}, C{X-Status} and C{X-Keywords} fields of C{case}, as
    mutt and Dovecot's mbox driver write them.
    """
    return b"".join(line.encode("ascii") + eol for line in _statusFields(case))


def _statusFields(case: HardMessage) -> list[str]:
    """
    The lines of L{_statusHeaders}: C{Status} always, C{X-Status} and
    C{X-Keywords} when they have something to say.
    """
    flags = set(case.flags)
    status = ("R" if "\\Seen" in flags else "") + "O"
    xStatus = "".join(letter for letter, flag in _X_STATUS if flag in flags)
    lines = [f"Status: {status}"]
    if xStatus:
        lines.append(f"X-Status: {xStatus}")
    if case.keywords:
        lines.append("X-Keywords: " + " ".join(case.keywords))
    return lines


def _withStatus(case: HardMessage) -> bytes:
    """
    C{case}'s bytes with L{_statusHeaders} added at the end of its header,
    with the line ending of the empty line that ends the header.
    """
    raw = case.raw
    at, eol = _headerEnd(raw)
    return raw[:at] + _statusHeaders(case, eol) + raw[at:]


def _headerEnd(raw: bytes) -> tuple[int, bytes]:
    """
    Where the header of C{raw} ends (before the empty line that ends it,
    or at the end), and the line ending of that empty line.
    """
    lf = raw.find(b"\n\n")
    crlf = raw.find(b"\r\n\r\n")
    if crlf != -1 and (lf == -1 or crlf + 1 < lf):
        return crlf + 2, b"\r\n"
    if lf != -1:
        return lf + 1, b"\r\n" if raw[lf - 1 : lf] == b"\r" else b"\n"
    return len(raw), b"\n"


def _mboxQuote(raw: bytes, quoting: str) -> bytes:
    """
    Quote the C{From } lines of C{raw} per C{quoting}.
    """
    if quoting == "mboxrd":
        return _MBOXRD_FROM.sub(rb">\1", raw)
    return _MBOXO_FROM.sub(b">From ", raw)


def _checkQuoting(quoting: str) -> None:
    """
    Refuse an unknown mbox quoting.
    """
    if quoting not in _QUOTINGS:
        raise ValueError(f"quoting must be one of {_QUOTINGS}, not {quoting!r}")


def writeHardMbox(
    directory: str,
    cases: Sequence[HardMessage],
    quoting: str = "mboxrd",
    *,
    withStatusHeaders: bool = False,
) -> None:
    """
    Write C{cases} as mbox files, one per folder (L{mboxPath}), messages
    in the order given.

    Each message is written as its C{From } line (L{mboxFromLine}), LF,
    its bytes quoted, then one empty line (a single LF).  Quoting is
    applied to every line, headers included: C{mboxrd} adds a C{>} to
    every line matching C{^>*From }, which a reader undoes exactly;
    C{mboxo} turns C{^From } into C{>From }, which a reader cannot tell
    from an original C{>From } (see L{expectedFromMbox}).  A message not
    ending with LF would get one (none of L{hardCases} needs it).  Lines
    are split at LF only, so a CRLF message keeps its CRs.

    The parent of a child folder gets its C{.sbd} directory but no mbox
    file of its own when it holds no message.

    @param directory: the mbox directory; created if missing.
    @param cases: the messages.
    @param quoting: C{"mboxrd"} or C{"mboxo"}.
    @param withStatusHeaders: add C{Status}, C{X-Status} and
        C{X-Keywords} fields at the end of each message's header to carry
        its flags; otherwise the mbox carries no flags.
    @raise ValueError: an unknown C{quoting}.
    """
    _checkQuoting(quoting)
    byFolder: dict[tuple[str, ...], list[HardMessage]] = {}
    for case in cases:
        byFolder.setdefault(case.folder, []).append(case)
    for folder, messages in byFolder.items():
        path = os.path.join(directory, mboxPath(folder))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            for case in messages:
                raw = _terminated(_withStatus(case) if withStatusHeaders else case.raw)
                f.write(mboxFromLine(case) + b"\n" + _mboxQuote(raw, quoting) + b"\n")


def expectedFromMbox(
    cases: Sequence[HardMessage],
    quoting: str = "mboxrd",
    *,
    withStatusHeaders: bool = False,
    keepStatusFields: bool = False,
) -> tuple[HardMessage, ...]:
    """
    What a faithful reader of L{writeHardMbox}'s files gets back: all an
    mbox can carry.

      - L{HardMessage.internalDate} becomes the instant of the C{From }
        line, in UTC.
      - L{HardMessage.flags} are empty, or with C{withStatusHeaders} the
        flags and keywords the status fields carry; the expected bytes are
        then those without the status fields (a reader removes the fields
        it interprets, as Dovecot's mbox driver does), or with
        C{keepStatusFields} those with them (imapmig's reader keeps every
        octet of the message).
      - L{HardMessage.raw} gains a final LF when it lacks one.  With
        C{mboxo} every line that started with C{>From } comes back as
        C{From } (the quoting is ambiguous); with C{mboxrd} the bytes come
        back unchanged.

    @param cases: the messages written.
    @param quoting: as given to L{writeHardMbox}.
    @param withStatusHeaders: as given to L{writeHardMbox}.
    @param keepStatusFields: the reader keeps the status fields in the
        message (with C{withStatusHeaders}).
    @raise ValueError: an unknown C{quoting}.
    """
    _checkQuoting(quoting)
    return tuple(
        HardMessage(
            folder=case.folder,
            name=case.name,
            raw=_readBack(case, quoting, withStatusHeaders and keepStatusFields),
            flags=case.flags if withStatusHeaders else (),
            internalDate=case.utcDate,
        )
        for case in cases
    )


def _readBack(case: HardMessage, quoting: str, statusFields: bool) -> bytes:
    """
    The bytes a faithful mbox reader gets back of C{case} (see
    L{expectedFromMbox}), with its status fields if C{statusFields}.
    """
    raw = _terminated(_withStatus(case) if statusFields else case.raw)
    return _MBOXO_QUOTED.sub(b"From ", raw) if quoting == "mboxo" else raw


def _terminated(raw: bytes) -> bytes:
    """
    C{raw} ending with LF, as an mbox stores it.
    """
    return raw if raw.endswith(b"\n") else raw + b"\n"
