# -*- test-case-name: tests.test_testing_hardcases -*-
"""
Tests for L{imapmig.testing.hardcases}.
"""

from __future__ import annotations

import base64
import hashlib
import imaplib
import os
import random
import re
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.message import toCRLF
from imapmig.testing.corpus import maildirFolderName
from imapmig.testing.dovecot import DovecotInstance, requireDovecot
from imapmig.testing.hardcases import (
    LARGE_CASE,
    SYSTEM_FLAGS,
    HardMessage,
    allKeywords,
    canonicalFlags,
    caseFolders,
    hardCases,
)
from imapmig.testing.hardfiles import (
    expectedByMailbox,
    expectedFromMbox,
    loadIntoDovecot,
    maildirFileName,
    mboxFromLine,
    mboxPath,
    subscriptionsFile,
    writeHardMaildir,
    writeHardMbox,
)

_NAMES = (
    "flags-none", "flag-draft", "flag-flagged", "flag-answered", "flag-seen",
    "flag-deleted", "flags-all-system", "keywords-all", "keyword-junk",
    "keyword-forwarded", "folder-entwuerfe", "folder-aerger", "folder-aerger-uenter",
    "folder-deep", "folder-space", "folder-ampersand", "folder-archive",
    "folder-sent-japanese", "date-1999-pst", "date-2000-leap-day",
    "date-2015-plus1400", "date-2021-utc", "date-1980-plus0530",
    "date-minus0330", "eol-lf", "eol-crlf", "eol-mixed", "bare-cr", "nul-byte",
    "utf8-8bit-no-cte", "empty-body", "from-lines", "long-headers",
    "same-message-id-1", "same-message-id-2", "no-message-id", "duplicate-1",
    "duplicate-2",
)  # fmt: skip
_FOLDERS = {
    ("INBOX",): "",
    ("Entwürfe",): ".Entw&APw-rfe",
    ("送信済み",): ".&kAFP4W4IMH8-",
    ("Ärger",): ".&AMQ-rger",
    ("Ärger", "Ünter"): ".&AMQ-rger.&ANw-nter",
    ("Archive", "2019", "Q1", "Jan", "Week1"): ".Archive.2019.Q1.Jan.Week1",
    ("Sent Items",): ".Sent Items",
    ("Tom & Jerry",): ".Tom &- Jerry",
    ("Sent",): ".Sent",
    ("Drafts",): ".Drafts",
    ("Trash",): ".Trash",
    ("Junk",): ".Junk",
    ("Archive",): ".Archive",
}
_KEYWORDS = ("$Forwarded", "$Junk", "$NotJunk", "$label1", "Work")
_MAILDIR_NAME = re.compile(
    r"^(?P<time>\d+)\.M(?P<index>\d+)P1\.hard,S=(?P<size>\d+):2,(?P<letters>[A-Za-z]*)$"
)
_LETTERS = {"\\Draft": "D", "\\Flagged": "F", "\\Answered": "R", "\\Seen": "S", "\\Deleted": "T"}


def _byName(cases: tuple[HardMessage, ...]) -> dict[str, HardMessage]:
    """
    C{cases} by L{HardMessage.name}.
    """
    return {case.name: case for case in cases}


def _header(raw: bytes, name: bytes) -> list[bytes]:
    """
    The unfolded values of the top-level header field C{name} of C{raw}
    (any line endings).
    """
    head = re.split(rb"\r?\n\r?\n", raw, maxsplit=1)[0]
    unfolded = re.sub(rb"\r?\n[ \t]", b" ", head)
    prefix = name.lower() + b":"
    return [
        line[len(prefix) :].strip()
        for line in re.split(rb"\r?\n", unfolded)
        if line.lower().startswith(prefix)
    ]


def _readMbox(path: str) -> list[tuple[bytes, bytes]]:
    """
    Split an mbox file written by L{writeHardMbox}: one C{(From line,
    message bytes still quoted)} per message, the empty line that ends
    each message removed.
    """
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    messages: list[tuple[bytes, list[bytes]]] = []
    for line in lines:
        if line.startswith(b"From "):
            messages.append((line.rstrip(b"\n"), []))
        else:
            messages[-1][1].append(line)
    result = []
    for fromLine, body in messages:
        assert body[-1] == b"\n", body[-1]
        result.append((fromLine, b"".join(body[:-1])))
    return result


def _unquoteMboxrd(quoted: bytes) -> bytes:
    """
    Undo mboxrd quoting: one C{>} less on every line matching C{^>+From }.
    """
    return re.sub(rb"(?m)^>(>*From )", rb"\1", quoted)


def _unquoteMboxo(quoted: bytes) -> bytes:
    """
    Undo mboxo quoting: C{^>From } becomes C{From }.
    """
    return re.sub(rb"(?m)^>From ", b"From ", quoted)


def _stripStatus(raw: bytes) -> tuple[bytes, tuple[str, ...]]:
    """
    Remove the C{Status}, C{X-Status} and C{X-Keywords} fields from
    C{raw}'s header and return the rest with the flags they carried.
    """
    end = re.search(rb"\n\r?\n", raw)
    assert end is not None
    head, rest = raw[: end.start() + 1], raw[end.start() + 1 :]
    flags: list[str] = []
    letters = {
        "R": "\\Seen", "A": "\\Answered", "F": "\\Flagged", "T": "\\Draft", "D": "\\Deleted"
    }  # fmt: skip
    for name, value in re.findall(rb"(?m)^(Status|X-Status|X-Keywords): ([^\r\n]*)\r?\n", head):
        if name == b"X-Keywords":
            flags += value.decode("ascii").split()
        else:
            flags += [letters[c] for c in value.decode("ascii") if c != "O"]
    head = re.sub(rb"(?m)^(Status|X-Status|X-Keywords): [^\r\n]*\r?\n", b"", head)
    return head + rest, canonicalFlags(flags)


class CorpusTests(SynchronousTestCase):
    """
    L{hardCases} holds every listed case, always the same.
    """

    def test_deterministic(self) -> None:
        """
        Two calls return equal corpora, the large message included.
        """
        self.assertEqual(hardCases(large=False), hardCases(large=False))
        first, second = hardCases(), hardCases()
        self.assertEqual(first, second)
        self.assertEqual(
            _byName(first)[LARGE_CASE].sha256,
            hashlib.sha256(toCRLF(_byName(second)[LARGE_CASE].raw)).hexdigest(),
        )

    def test_names(self) -> None:
        """
        Every case is present under its name, each name once; the large
        case is last and only there with C{large=True}.
        """
        small = [case.name for case in hardCases(large=False)]
        self.assertEqual(sorted(small), sorted(_NAMES))
        self.assertEqual(len(set(small)), len(small))
        full = [case.name for case in hardCases()]
        self.assertEqual(full, small + [LARGE_CASE])

    def test_folders(self) -> None:
        """
        Every folder of the list holds at least one case, and no other
        folder is used.
        """
        self.assertEqual(set(caseFolders(hardCases(large=False))), set(_FOLDERS))
        self.assertEqual(caseFolders(hardCases(large=False))[0], ("INBOX",))

    def test_flags(self) -> None:
        """
        Each system flag appears alone on some case, all five together on
        another, no flag at all on a third; the five keywords are used.
        """
        flagSets = {case.flags for case in hardCases(large=False)}
        for flag in SYSTEM_FLAGS:
            self.assertIn((flag,), flagSets)
        self.assertIn(SYSTEM_FLAGS, flagSets)
        self.assertIn((), flagSets)
        self.assertIn(_KEYWORDS, flagSets)
        self.assertEqual(allKeywords(hardCases()), _KEYWORDS)
        for case in hardCases(large=False):
            self.assertEqual(canonicalFlags(case.flags), case.flags)

    def test_dates(self) -> None:
        """
        The internal dates span zones and years, keep their generated
        zone, and each matches the message's C{Date:} field.
        """
        cases = _byName(hardCases(large=False))
        expected = {
            "date-1999-pst": ("1999-12-31T23:59:59-08:00", 946713599),
            "date-2000-leap-day": ("2000-02-29T12:00:00+00:00", 951825600),
            "date-2015-plus1400": ("2015-06-30T23:59:59+14:00", 1435658399),
            "date-2021-utc": ("2021-07-01T00:00:01+00:00", 1625097601),
            "date-1980-plus0530": ("1980-01-01T00:00:00+05:30", 315513000),
            "date-minus0330": ("2007-11-04T01:30:00-03:30", 1194152400),
        }
        for name, (iso, timestamp) in expected.items():
            self.assertEqual(cases[name].internalDate.isoformat(), iso)
            self.assertEqual(cases[name].internalDate.timestamp(), timestamp)
        for case in cases.values():
            self.assertIsNotNone(case.internalDate.utcoffset())
            self.assertEqual(case.utcDate, case.internalDate)
            self.assertEqual(case.utcDate.utcoffset(), timedelta(0))
            (date,) = _header(case.raw, b"Date")
            self.assertEqual(parsedate_to_datetime(date.decode("ascii")), case.internalDate)

    def test_lineEndings(self) -> None:
        """
        One message has bare LF only, one CRLF only, one both, one a bare
        CR; L{HardMessage.imapBytes} is L{toCRLF} of the raw bytes.
        """
        cases = _byName(hardCases(large=False))
        self.assertNotIn(b"\r", cases["eol-lf"].raw)
        crlf = cases["eol-crlf"].raw
        self.assertEqual(crlf.count(b"\n"), crlf.count(b"\r\n"))
        self.assertEqual(crlf.count(b"\r"), crlf.count(b"\r\n"))
        mixed = cases["eol-mixed"].raw
        self.assertTrue(0 < mixed.count(b"\r\n") < mixed.count(b"\n"))
        self.assertIn(b"\r\n\n", mixed)
        self.assertIn(b"CR\rafter", cases["bare-cr"].raw)
        for case in cases.values():
            self.assertEqual(case.imapBytes, toCRLF(case.raw))
            self.assertEqual(case.sha256, hashlib.sha256(toCRLF(case.raw)).hexdigest())
        self.assertIn(b"CR\rafter", cases["bare-cr"].imapBytes)

    def test_bodies(self) -> None:
        """
        The NUL byte, the raw UTF-8 body without C{Content-Transfer-Encoding},
        the empty body and the lines an mbox must quote are there.
        """
        cases = _byName(hardCases(large=False))
        self.assertEqual(cases["nul-byte"].raw.count(b"\0"), 1)
        utf8 = cases["utf8-8bit-no-cte"].raw
        utf8.decode("utf-8")
        self.assertTrue(any(b > 0x7F for b in utf8.split(b"\n\n", 1)[1]))
        self.assertEqual(_header(utf8, b"Content-Transfer-Encoding"), [])
        self.assertEqual(_header(utf8, b"Content-Type"), [b"text/plain; charset=utf-8"])
        empty = cases["empty-body"].raw
        self.assertTrue(empty.endswith(b"\n\n"))
        self.assertEqual(empty.count(b"\n\n"), 1)
        body = cases["from-lines"].raw.split(b"\n\n", 1)[1]
        for line in (b"From here\n", b">From there\n", b">>From everywhere\n"):
            self.assertIn(line, body)
        self.assertTrue(body.startswith(b"From here\n"))
        for case in cases.values():
            self.assertTrue(case.raw.endswith(b"\n"), case.name)
            if case.name != "nul-byte":
                self.assertNotIn(b"\0", case.raw)
            if case.name != "utf8-8bit-no-cte":
                self.assertTrue(case.raw.isascii(), case.name)

    def test_longHeaders(self) -> None:
        """
        The Subject is 2,000 characters unfolded and folded into lines of
        at most 78; the References field is one line of at least 1,500.
        """
        raw = _byName(hardCases(large=False))["long-headers"].raw
        (subject,) = _header(raw, b"Subject")
        self.assertEqual(len(subject), 2000)
        head = raw.split(b"\n\n", 1)[0].split(b"\n")
        start = next(i for i, line in enumerate(head) if line.startswith(b"Subject:"))
        folded = [head[start]]
        for line in head[start + 1 :]:
            if not line.startswith(b" "):
                break
            folded.append(line)
        self.assertGreater(len(folded), 20)
        self.assertLessEqual(max(len(line) for line in folded), 78)
        (references,) = [line for line in head if line.startswith(b"References: ")]
        self.assertGreaterEqual(len(references), 1500)
        self.assertEqual(_header(raw, b"References"), [references[len(b"References: ") :]])

    def test_messageIds(self) -> None:
        """
        Two different messages share a Message-ID, one has none, two are
        byte-identical in the same folder with the same flags and date;
        every other message's Message-ID is unique.
        """
        cases = _byName(hardCases(large=False))
        first, second = cases["same-message-id-1"], cases["same-message-id-2"]
        self.assertEqual(_header(first.raw, b"Message-ID"), _header(second.raw, b"Message-ID"))
        self.assertNotEqual(first.raw, second.raw)
        self.assertEqual(_header(cases["no-message-id"].raw, b"Message-ID"), [])
        one, two = cases["duplicate-1"], cases["duplicate-2"]
        self.assertEqual(
            (one.raw, one.folder, one.flags, one.internalDate),
            (two.raw, two.folder, two.flags, two.internalDate),
        )
        others = [
            _header(case.raw, b"Message-ID")[0]
            for name, case in cases.items()
            if name not in {"same-message-id-2", "no-message-id", "duplicate-2"}
        ]
        self.assertEqual(len(set(others)), len(others))

    def test_sizes(self) -> None:
        """
        Without the large message the corpus is a few kilobytes; the large
        one is about 21 MB of base64 carrying 15 MiB of seeded random
        bytes, and the whole corpus stays under 25 MB.
        """
        small = hardCases(large=False)
        self.assertLess(sum(len(case.raw) for case in small), 50_000)
        full = hardCases()
        large = full[-1]
        self.assertEqual(large.name, LARGE_CASE)
        self.assertEqual(large.folder, ("Archive",))
        self.assertTrue(20_000_000 < len(large.raw) < 22_000_000, len(large.raw))
        self.assertLess(sum(len(case.raw) for case in full), 25_000_000)
        encoded = large.raw.split(b"Content-Transfer-Encoding: base64\n\n", 1)[1]
        encoded = encoded.split(b"\n--", 1)[0]
        payload = random.Random(20_190_101).randbytes(15 * 2**20)
        self.assertEqual(base64.b64decode(encoded), payload)


class HardMessageTests(SynchronousTestCase):
    """
    L{HardMessage} normalises flags and refuses what no source can store.
    """

    def message(self, **overrides: object) -> HardMessage:
        """
        A valid message, with C{overrides}.
        """
        arguments: dict[str, object] = {
            "folder": ("INBOX",),
            "name": "x",
            "raw": b"Subject: x\n\nx\n",
            "flags": (),
            "internalDate": datetime(2020, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        }
        arguments.update(overrides)
        return HardMessage(**arguments)  # type: ignore[arg-type]

    def test_flagOrder(self) -> None:
        """
        Flags in any order and case come out canonical: system flags in
        Maildir letter order, then keywords sorted, duplicates dropped.
        """
        message = self.message(flags=["Work", "\\seen", "$Junk", "\\DRAFT", "\\Seen"])
        self.assertEqual(message.flags, ("\\Draft", "\\Seen", "$Junk", "Work"))
        self.assertEqual(message.systemFlags, ("\\Draft", "\\Seen"))
        self.assertEqual(message.keywords, ("$Junk", "Work"))

    def test_refused(self) -> None:
        """
        C{\\Recent}, unknown system flags, keywords IMAP cannot carry,
        naive or fractional dates, folders Maildir++ cannot name and
        names with control characters (which Twisted's C{imap4-utf-7}
        codec mangles) are refused.
        """
        for flags in (["\\Recent"], ["\\Important"], ["two words"], ["K\u00e4se"], [""]):
            self.assertRaises(ValueError, self.message, flags=flags)
        self.assertRaises(ValueError, self.message, internalDate=datetime(2020, 1, 1))
        self.assertRaises(
            ValueError,
            self.message,
            internalDate=datetime(2020, 1, 1, 0, 0, 0, 5, tzinfo=timezone.utc),
        )
        for folder in ((), ("a.b",), ("a/b",), ("",), ("a\tb",), ("a\nb",), ("a\x7fb",)):
            self.assertRaises(ValueError, self.message, folder=folder)

    def test_imapBytes(self) -> None:
        """
        L{HardMessage.imapBytes} converts bare LF to CRLF and
        L{HardMessage.sha256} hashes it.
        """
        message = self.message(raw=b"a\nb\r\nc\n")
        self.assertEqual(message.imapBytes, b"a\r\nb\r\nc\r\n")
        self.assertEqual(message.sha256, hashlib.sha256(b"a\r\nb\r\nc\r\n").hexdigest())


class MaildirTests(SynchronousTestCase):
    """
    L{writeHardMaildir} writes a Maildir++ tree as Dovecot keeps one.
    """

    def setUp(self) -> None:
        self.root = self.mktemp()
        self.cases = hardCases(large=False)
        writeHardMaildir(self.root, self.cases)

    def test_directories(self) -> None:
        """
        INBOX is the root; every other folder is a dot directory named in
        modified UTF-7 with C{maildirfolder}; intermediate levels of the
        deep hierarchy get no directory.
        """
        for folder, name in _FOLDERS.items():
            self.assertEqual(maildirFolderName(folder), name)
            for sub in ("cur", "new", "tmp"):
                self.assertTrue(os.path.isdir(os.path.join(self.root, name, sub)), (name, sub))
            self.assertEqual(
                os.path.exists(os.path.join(self.root, name, "maildirfolder")), name != ""
            )
        self.assertEqual(
            {n for n in os.listdir(self.root) if n.startswith(".")}, set(_FOLDERS.values()) - {""}
        )

    def test_files(self) -> None:
        """
        Every case is one file in C{cur} named
        C{<time>.M<n>P1.hard,S=<size>:2,<letters>}: the time and the mtime
        are the internal date, the size that of the raw bytes, the letters
        the system flags' then the keywords' (C{a} for C{$Forwarded}, ...);
        C{new} is empty and the content is the raw bytes.
        """
        files = {}
        for folder, name in _FOLDERS.items():
            self.assertEqual(os.listdir(os.path.join(self.root, name, "new")), [])
            for fileName in os.listdir(os.path.join(self.root, name, "cur")):
                files[(folder, fileName)] = os.path.join(self.root, name, "cur", fileName)
        self.assertEqual(len(files), len(self.cases))
        for index, case in enumerate(self.cases):
            fileName = maildirFileName(index, case, _KEYWORDS)
            path = files[(case.folder, fileName)]
            match = _MAILDIR_NAME.match(fileName)
            assert match is not None, fileName
            self.assertEqual(int(match.group("time")), case.internalDate.timestamp())
            self.assertEqual(int(match.group("index")), index)
            self.assertEqual(int(match.group("size")), len(case.raw))
            letters = "".join(_LETTERS[f] for f in case.systemFlags) + "".join(
                "abcde"[_KEYWORDS.index(k)] for k in case.keywords
            )
            self.assertEqual(match.group("letters"), letters)
            self.assertEqual(os.stat(path).st_mtime, case.internalDate.timestamp())
            with open(path, "rb") as f:
                self.assertEqual(f.read(), case.raw)
        names = _byName(self.cases)
        self.assertTrue(
            maildirFileName(0, names["keywords-all"], _KEYWORDS).endswith(":2,abcde")
        )
        self.assertTrue(
            maildirFileName(0, names["flags-all-system"], _KEYWORDS).endswith(":2,DFRST")
        )
        self.assertTrue(
            maildirFileName(0, names["folder-ampersand"], _KEYWORDS).endswith(":2,Sde")
        )
        self.assertTrue(
            maildirFileName(7, names["date-2021-utc"], _KEYWORDS).startswith(
                "1625097601.M7P1.hard,S="
            )
        )

    def test_keywordsAndSubscriptions(self) -> None:
        """
        Each folder directory has the same C{dovecot-keywords} table; the
        root has a version 2 C{subscriptions} file naming every folder,
        levels separated by tabs, in modified UTF-7.
        """
        for name in _FOLDERS.values():
            with open(os.path.join(self.root, name, "dovecot-keywords"), "rb") as f:
                self.assertEqual(
                    f.read(), b"0 $Forwarded\n1 $Junk\n2 $NotJunk\n3 $label1\n4 Work\n"
                )
        with open(os.path.join(self.root, "subscriptions"), "rb") as f:
            content = f.read()
        self.assertEqual(content, subscriptionsFile(caseFolders(self.cases)))
        self.assertTrue(content.startswith(b"V\t2\n\nINBOX\n"))
        lines = content.split(b"\n")[2:-1]
        self.assertEqual(
            set(lines),
            {
                name[1:].replace(".", "\t").encode("ascii") if name else b"INBOX"
                for name in _FOLDERS.values()
            },
        )

    def test_deterministic(self) -> None:
        """
        Writing the same cases again elsewhere gives the same files, with
        the same mtimes.
        """
        other = self.mktemp()
        writeHardMaildir(other, self.cases)

        def snapshot(root: str) -> dict[str, tuple[str, float]]:
            result = {}
            for directory, _subdirectories, names in os.walk(root):
                for name in names:
                    path = os.path.join(directory, name)
                    with open(path, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                    mtime = os.stat(path).st_mtime if "/cur/" in path else 0.0
                    result[os.path.relpath(path, root)] = (digest, mtime)
            return result

        self.assertEqual(snapshot(self.root), snapshot(other))

    def test_noKeywords(self) -> None:
        """
        Cases without keywords get no C{dovecot-keywords} file, and INBOX
        is created even when no case lands there.
        """
        root = self.mktemp()
        cases = [c for c in self.cases if c.name == "flag-deleted"]
        writeHardMaildir(root, cases)
        self.assertTrue(os.path.isdir(os.path.join(root, "cur")))
        self.assertFalse(os.path.exists(os.path.join(root, ".Trash", "dovecot-keywords")))
        with open(os.path.join(root, "subscriptions"), "rb") as f:
            self.assertEqual(f.read(), b"V\t2\n\nINBOX\nTrash\n")

    def test_subscriptionsFile(self) -> None:
        """
        Levels are separated by tabs and written in modified UTF-7.
        """
        self.assertEqual(
            subscriptionsFile([("Ärger", "Ünter"), ("Tom & Jerry",)]),
            b"V\t2\n\n&AMQ-rger\t&ANw-nter\nTom &- Jerry\n",
        )


class ExpectedByMailboxTests(SynchronousTestCase):
    """
    L{expectedByMailbox} keys mailboxes as L{DovecotInstance.fetchAll}
    does and orders messages as Dovecot numbers Maildir files.
    """

    def test_keys(self) -> None:
        """
        The hierarchy is joined with the separator; every folder holding a
        case is there, intermediate levels are not.
        """
        cases = hardCases(large=False)
        for separator in ".", "/":
            expected = expectedByMailbox(cases, separator)
            self.assertEqual(set(expected), {separator.join(f) for f in _FOLDERS})
            self.assertEqual(sum(len(v) for v in expected.values()), len(cases))
        self.assertIn("Archive/2019/Q1/Jan/Week1", expectedByMailbox(cases, "/"))
        self.assertIn("Ärger.Ünter", expectedByMailbox(cases, "."))

    def test_values(self) -> None:
        """
        Each entry is the SHA-256 of the CRLF bytes, the flags and the
        internal date in UTC, oldest first, ties in corpus order.
        """
        cases = hardCases(large=False)
        archive = expectedByMailbox(cases, "/")["Archive"]
        names = _byName(cases)
        self.assertEqual(
            archive,
            [
                (names[n].servedSha256, names[n].flags, names[n].utcDate)
                for n in ("date-1999-pst", "date-2000-leap-day", "folder-archive")
            ],
        )
        for _sha, _flags, date in archive:
            self.assertEqual(date.tzinfo, timezone.utc)
        inbox = expectedByMailbox(cases, ".")["INBOX"]
        dates = [date for _sha, _flags, date in inbox]
        self.assertEqual(dates, sorted(dates))
        ties = [
            c.servedSha256
            for c in cases
            if c.folder == ("INBOX",) and c.utcDate == names["eol-lf"].utcDate
        ]
        self.assertEqual(
            [sha for sha, _flags, date in inbox if date == names["eol-lf"].utcDate], ties
        )

    def test_exact(self) -> None:
        """
        By default the NUL message is hashed as Dovecot serves it to
        C{FETCH BODY[]} (NUL as C{0x80}); with C{exact=True} as stored.
        Every other message is hashed the same either way.
        """
        cases = hardCases(large=False)
        served = expectedByMailbox(cases, "/")["INBOX"]
        exact = expectedByMailbox(cases, "/", exact=True)["INBOX"]
        nul = _byName(cases)["nul-byte"]
        self.assertIn(b"NUL\x80after", nul.servedBytes)
        self.assertEqual(nul.servedBytes.replace(b"\x80", b"\0"), nul.imapBytes)
        self.assertEqual(
            [(a, b) for a, b in zip(served, exact) if a != b],
            [((nul.servedSha256, nul.flags, nul.utcDate), (nul.sha256, nul.flags, nul.utcDate))],
        )


class MboxTests(SynchronousTestCase):
    """
    L{writeHardMbox} writes one mbox per folder, quoted so a reader gets
    the messages back.
    """

    def setUp(self) -> None:
        self.cases = hardCases(large=False)

    def read(self, directory: str) -> dict[tuple[str, ...], list[tuple[bytes, bytes]]]:
        """
        Every folder's messages from an mbox directory, read with
        L{_readMbox}.
        """
        return {
            folder: _readMbox(os.path.join(directory, mboxPath(folder)))
            for folder in caseFolders(self.cases)
        }

    def test_layout(self) -> None:
        """
        INBOX is the file C{INBOX}; a child lives in its parent's C{.sbd}
        directory; a parent without messages has no file of its own.
        """
        directory = self.mktemp()
        writeHardMbox(directory, self.cases)
        self.assertEqual(mboxPath(("INBOX",)), "INBOX")
        self.assertEqual(mboxPath(("Ärger", "Ünter")), "Ärger.sbd/Ünter")
        self.assertEqual(
            sorted(os.listdir(directory)),
            sorted(
                [
                    "INBOX", "Entwürfe", "送信済み", "Ärger", "Ärger.sbd", "Archive",
                    "Archive.sbd", "Sent Items", "Tom & Jerry", "Sent", "Drafts", "Trash",
                    "Junk",
                ]
            ),
        )  # fmt: skip
        deep = os.path.join(directory, "Archive.sbd", "2019.sbd", "Q1.sbd", "Jan.sbd")
        self.assertEqual(os.listdir(deep), ["Week1"])
        self.assertEqual(os.listdir(os.path.join(directory, "Archive.sbd")), ["2019.sbd"])

    def test_mboxrdRoundTrip(self) -> None:
        """
        With mboxrd quoting, every message comes back byte for byte after
        its C{From } line, which carries the internal date in UTC; the
        C{From} lines of the body were quoted.
        """
        directory = self.mktemp()
        writeHardMbox(directory, self.cases)
        expected = expectedFromMbox(self.cases)
        self.assertEqual([c.raw for c in expected], [c.raw for c in self.cases])
        got = self.read(directory)
        for folder in caseFolders(self.cases):
            inFolder = [c for c in expected if c.folder == folder]
            self.assertEqual(
                [(fromLine, _unquoteMboxrd(raw)) for fromLine, raw in got[folder]],
                [(mboxFromLine(c), c.raw) for c in inFolder],
            )
            for case, (fromLine, _raw) in zip(inFolder, got[folder]):
                self.assertEqual(case.flags, ())
                self.assertEqual(case.internalDate.utcoffset(), timedelta(0))
                stamp = fromLine.split(b" ", 2)[2].decode("ascii")
                parsed = datetime.strptime(stamp, "%a %b %d %H:%M:%S %Y")
                self.assertEqual(parsed.replace(tzinfo=timezone.utc), case.internalDate)
        quoted = dict(
            (c.name, raw) for c, (_f, raw) in zip(
                [c for c in self.cases if c.folder == ("INBOX",)], got[("INBOX",)]
            )
        )  # fmt: skip
        body = quoted["from-lines"].split(b"\n\n", 1)[1]
        self.assertTrue(
            body.startswith(b">From here\n>>From there\n>>>From everywhere\nFromage")
        )
        self.assertIn(b"\n From with", body)
        self.assertIn(b"\n>From the end\n", body)

    def test_fromLine(self) -> None:
        """
        The C{From } line is in C{asctime} form, day padded with a space,
        in UTC.
        """
        case = _byName(self.cases)["date-1999-pst"]
        self.assertEqual(
            mboxFromLine(case), b"From hardcases@example.com Sat Jan  1 07:59:59 2000"
        )

    def test_mboxoIsLossy(self) -> None:
        """
        With mboxo quoting, the C{>From there} line comes back as C{From
        there}, as L{expectedFromMbox} says; everything else is intact.
        """
        directory = self.mktemp()
        writeHardMbox(directory, self.cases, "mboxo")
        expected = expectedFromMbox(self.cases, "mboxo")
        got = self.read(directory)
        for folder in caseFolders(self.cases):
            self.assertEqual(
                [_unquoteMboxo(raw) for _fromLine, raw in got[folder]],
                [c.raw for c in expected if c.folder == folder],
            )
        changed = [
            e.name for e, c in zip(expected, self.cases) if e.raw != c.raw
        ]
        self.assertEqual(changed, ["from-lines"])
        self.assertIn(
            b"\nFrom here\nFrom there\n>>From everywhere\n", _byName(expected)["from-lines"].raw
        )

    def test_statusHeaders(self) -> None:
        """
        With C{withStatusHeaders}, each message carries its flags in
        C{Status}, C{X-Status} and C{X-Keywords} fields, with the line
        ending of its header; removing them gives the original bytes.
        """
        directory = self.mktemp()
        writeHardMbox(directory, self.cases, withStatusHeaders=True)
        expected = expectedFromMbox(self.cases, withStatusHeaders=True)
        got = self.read(directory)
        for folder in caseFolders(self.cases):
            inFolder = [c for c in expected if c.folder == folder]
            self.assertEqual(
                [_stripStatus(_unquoteMboxrd(raw)) for _fromLine, raw in got[folder]],
                [(c.raw, c.flags) for c in inFolder],
            )
        inbox = [raw for _fromLine, raw in got[("INBOX",)]]
        names = [c.name for c in self.cases if c.folder == ("INBOX",)]
        crlf = inbox[names.index("eol-crlf")]
        self.assertIn(b"\r\nStatus: RO\r\n\r\none\r\n", crlf)
        allFlags = inbox[names.index("flags-all-system")]
        self.assertIn(b"\nStatus: RO\nX-Status: AFTD\n\n", allFlags)
        keywords = inbox[names.index("keywords-all")]
        self.assertIn(
            b"\nStatus: O\nX-Keywords: $Forwarded $Junk $NotJunk $label1 Work\n\n", keywords
        )

    def test_badQuoting(self) -> None:
        """
        An unknown quoting is refused.
        """
        self.assertRaises(ValueError, writeHardMbox, self.mktemp(), self.cases, "mboxcl2")
        self.assertRaises(ValueError, expectedFromMbox, self.cases, "mboxcl2")


class DovecotSourceTests(SynchronousTestCase):
    """
    A private Dovecot serves the hard cases, loaded with
    L{loadIntoDovecot}, exactly as L{expectedByMailbox} says.
    """

    def setUp(self) -> None:
        requireDovecot(self)
        self.cases = hardCases(large=False)

    def startInstance(self, separator: str) -> DovecotInstance:
        """
        Load the cases into alice's account of a fresh instance, then
        start it; stopped at cleanup.
        """
        instance = DovecotInstance(self.mktemp(), separator=separator)
        loadIntoDovecot(instance, "alice", self.cases)
        instance.start()
        self.addCleanup(instance.stop)
        return instance

    def assertServed(self, separator: str) -> None:
        """
        Every message comes back with the expected bytes, flags and
        keywords and internal date instant, in the expected mailboxes and
        UID order.
        """
        instance = self.startInstance(separator)
        fetched = instance.fetchAll("alice")
        got = {
            name: [(hashlib.sha256(m.body).hexdigest(), m.flags, m.internalDate) for m in messages]
            for name, messages in fetched.items()
        }
        expected = expectedByMailbox(self.cases, separator)
        self.assertEqual(sorted(got), sorted(expected))
        for name in expected:
            self.assertEqual(got[name], expected[name], name)

    def test_dotSeparator(self) -> None:
        """
        With the C{.} separator Dovecot serves the corpus as expected.
        """
        self.assertServed(".")

    def test_slashSeparator(self) -> None:
        """
        With the C{/} separator Dovecot serves the corpus as expected.
        """
        self.assertServed("/")

    def test_nulByte(self) -> None:
        """
        Dovecot answers C{FETCH BODY[]} for the NUL message with the NUL
        replaced by C{0x80}, and C{FETCH BINARY[]} with the stored bytes.
        """
        instance = self.startInstance(".")
        nul = _byName(self.cases)["nul-byte"]
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            client.login("alice", "alice-pw")
            client.select("INBOX", readonly=True)
            typ, data = client.uid("SEARCH", "HEADER", "Message-ID", "nul-byte@")
            self.assertEqual(typ, "OK")
            (uid,) = data[0].split()
            typ, data = client.uid("FETCH", uid.decode(), "(BODY.PEEK[] BINARY.PEEK[])")
            self.assertEqual(typ, "OK")
        finally:
            client.logout()
        literals = [bytes(item[1]) for item in data if isinstance(item, tuple)]
        self.assertEqual(sorted(literals), sorted([nul.servedBytes, nul.imapBytes]))
        self.assertNotEqual(nul.servedBytes, nul.imapBytes)

    def test_largeMessage(self) -> None:
        """
        The message of about 21 MB is served with its exact bytes.
        """
        large = hardCases()[-1]
        self.cases = (large,)
        instance = self.startInstance("/")
        fetched = instance.fetchAll("alice")
        self.assertEqual(sorted(fetched), ["Archive", "INBOX"])
        self.assertEqual(fetched["INBOX"], [])
        (message,) = fetched["Archive"]
        self.assertEqual(len(message.body), len(large.imapBytes))
        self.assertEqual(hashlib.sha256(message.body).hexdigest(), large.sha256)
        self.assertEqual((message.flags, message.internalDate), (large.flags, large.internalDate))

    def test_listAndSubscriptions(self) -> None:
        """
        Every folder is listed and subscribed; the intermediate levels of
        the deep hierarchy are listed as non-selectable or not at all;
        special-use folders carry their attribute.
        """
        instance = self.startInstance("/")
        mailboxes = {name: attributes for attributes, _d, name in instance.listMailboxes("alice")}
        for folder in _FOLDERS:
            self.assertIn("/".join(folder), mailboxes)
        for use in ("Sent", "Drafts", "Trash", "Junk", "Archive"):
            self.assertIn("\\" + use, mailboxes[use])
        for parent in ("Archive/2019", "Archive/2019/Q1", "Archive/2019/Q1/Jan"):
            if parent in mailboxes:
                self.assertTrue(
                    {"\\noselect", "\\nonexistent"} & {a.lower() for a in mailboxes[parent]},
                    (parent, mailboxes[parent]),
                )
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            client.login("alice", "alice-pw")
            typ, data = client.lsub('""', "*")
        finally:
            client.logout()
        self.assertEqual(typ, "OK")
        subscribed = set()
        for line in data:
            assert isinstance(line, bytes)
            name = line.rsplit(b' "/" ', 1)[1]
            if name.startswith(b'"'):
                name = name[1:-1]
            subscribed.add(name.decode("imap4-utf-7"))
        self.assertEqual(subscribed, {"/".join(f) for f in _FOLDERS})

    def test_subscriptionsFileAsDovecotWritesIt(self) -> None:
        """
        The C{subscriptions} file L{writeHardMaildir} writes is the one
        Dovecot writes when the user subscribes to the same folders, in
        the same order.
        """
        instance = self.startInstance("/")
        folders = caseFolders(self.cases)
        path = os.path.join(instance.maildirPath("alice"), "subscriptions")
        os.remove(path)
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            client.login("alice", "alice-pw")
            for folder in folders:
                name = "/".join(folder).encode("imap4-utf-7").decode("ascii")
                typ, data = client.subscribe(f'"{name}"')
                self.assertEqual(typ, "OK", data)
        finally:
            client.logout()
        with open(path, "rb") as f:
            self.assertEqual(f.read(), subscriptionsFile(folders))
