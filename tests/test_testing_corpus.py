# -*- test-case-name: tests.test_testing_corpus -*-
"""
Tests for L{imapmig.testing.corpus}.
"""

from __future__ import annotations

import hashlib
import os
import statistics
from datetime import timezone
from email.utils import parsedate_to_datetime

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.message import toCRLF
from imapmig.testing.corpus import (
    Corpus,
    CorpusMessage,
    maildirFolderName,
    writeEmlDirectory,
    writeMaildir,
)

_LETTERS = {
    "\\Draft": "D",
    "\\Flagged": "F",
    "\\Answered": "R",
    "\\Seen": "S",
    "\\Deleted": "T",
}


def _snapshot(root: str) -> dict[str, tuple[str, int]]:
    """
    Every file below C{root}: relative path to (SHA-256 of the content,
    mtime).
    """
    result = {}
    for directory, _subdirectories, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                result[os.path.relpath(path, root)] = (
                    hashlib.sha256(f.read()).hexdigest(),
                    int(os.stat(path).st_mtime),
                )
    return result


def _headers(body: bytes) -> dict[str, str]:
    """
    The top-level header fields of a generated message (unfolded, ASCII).
    """
    head = body.split(b"\n\n", 1)[0].decode("ascii").replace("\n\t", " ")
    fields = {}
    for line in head.split("\n"):
        name, value = line.split(":", 1)
        fields[name.lower()] = value.strip()
    return fields


def _messagePath(root: str, message: CorpusMessage) -> str:
    """
    Where C{message} was written below the Maildir C{root}.
    """
    folder = os.path.join(root, maildirFolderName(message.folder))
    if message.flags or os.path.exists(os.path.join(folder, "cur", message.key + ":2,")):
        letters = "".join(_LETTERS[f] for f in message.flags)
        return os.path.join(folder, "cur", f"{message.key}:2,{letters}")
    return os.path.join(folder, "new", message.key)


class DeterminismTests(SynchronousTestCase):
    """
    The same seed writes the same bytes.
    """

    def test_sameSeedSameBytes(self) -> None:
        """
        Two Maildirs written with the same arguments hold the same files,
        byte for byte and with the same mtimes, and describe them equally.
        """
        first, second = self.mktemp(), self.mktemp()
        corpusA = writeMaildir(first, 300, seed=7)
        corpusB = writeMaildir(second, 300, seed=7)
        self.assertEqual(corpusA, corpusB)
        self.assertEqual(_snapshot(first), _snapshot(second))

    def test_differentSeedDifferentBytes(self) -> None:
        """
        Another seed gives other messages.
        """
        corpusA = writeMaildir(self.mktemp(), 50, seed=1, profile="small")
        corpusB = writeMaildir(self.mktemp(), 50, seed=2, profile="small")
        self.assertNotEqual(
            [m.sha256 for m in corpusA.messages], [m.sha256 for m in corpusB.messages]
        )

    def test_emlSameSeedSameBytes(self) -> None:
        """
        Two C{.eml} directories written with the same arguments are
        identical.
        """
        first, second = self.mktemp(), self.mktemp()
        self.assertEqual(
            writeEmlDirectory(first, 40, seed=3), writeEmlDirectory(second, 40, seed=3)
        )
        self.assertEqual(_snapshot(first), _snapshot(second))


class MaildirLayoutTests(SynchronousTestCase):
    """
    The Maildir++ tree looks like one Dovecot keeps.
    """

    def setUp(self) -> None:
        self.root = self.mktemp()
        self.folders = (("INBOX",), ("Sent",), ("Archive", "2019"), ("Grüße",))
        self.corpus = writeMaildir(
            self.root, 400, seed=5, folders=self.folders, profile="small"
        )

    def test_countAndFolders(self) -> None:
        """
        The corpus has the requested number of messages, its folders are
        the requested ones and each holds at least one message.
        """
        self.assertIsInstance(self.corpus, Corpus)
        self.assertEqual(len(self.corpus.messages), 400)
        self.assertEqual(self.corpus.folders, self.folders)
        for folder in self.folders:
            self.assertTrue(self.corpus.inFolder(folder), folder)
        self.assertEqual(
            len({(m.folder, m.key) for m in self.corpus.messages}), 400
        )

    def test_directories(self) -> None:
        """
        Every folder has C{cur}, C{new} and C{tmp}; subfolders are dot
        directories with a C{maildirfolder} file, non-ASCII names in
        modified UTF-7.
        """
        expected = {"", ".Sent", ".Archive.2019", ".Gr&APwA3w-e"}
        for name in expected:
            for sub in ("cur", "new", "tmp"):
                self.assertTrue(os.path.isdir(os.path.join(self.root, name, sub)), (name, sub))
            self.assertEqual(
                os.path.exists(os.path.join(self.root, name, "maildirfolder")), name != ""
            )
        self.assertEqual(
            {n for n in os.listdir(self.root) if n.startswith(".")}, expected - {""}
        )

    def test_filesMatchMessages(self) -> None:
        """
        Each message's file is in C{cur} named with its flag letters in
        ASCII order (or, unflagged, possibly in C{new} without info), its
        mtime is the internal date, and size and SHA-256 (of the CRLF form)
        describe its content.
        """
        files = 0
        for directory, _subdirectories, names in os.walk(self.root):
            files += sum(1 for n in names if n != "maildirfolder")
        self.assertEqual(files, 400)
        inNew = 0
        for message in self.corpus.messages:
            path = _messagePath(self.root, message)
            self.assertTrue(os.path.exists(path), path)
            inNew += os.path.basename(os.path.dirname(path)) == "new"
            self.assertEqual(os.stat(path).st_mtime, message.internalDate.timestamp())
            with open(path, "rb") as f:
                body = f.read()
            self.assertEqual(len(body), message.size)
            self.assertEqual(hashlib.sha256(toCRLF(body)).hexdigest(), message.sha256)
            self.assertTrue(message.key.startswith(f"{int(message.internalDate.timestamp())}.M"))
        self.assertTrue(0 < inNew < 100, inNew)

    def test_flagMix(self) -> None:
        """
        Most messages are seen, some answered or flagged, a few drafts or
        deleted, and the flags follow Maildir letter order.
        """
        counts = {flag: 0 for flag in _LETTERS}
        for message in self.corpus.messages:
            letters = [_LETTERS[f] for f in message.flags]
            self.assertEqual(letters, sorted(letters))
            for flag in message.flags:
                counts[flag] += 1
        self.assertTrue(280 < counts["\\Seen"] < 380, counts)
        self.assertTrue(10 < counts["\\Answered"] < 80, counts)
        self.assertTrue(5 < counts["\\Flagged"] < 50, counts)
        self.assertTrue(counts["\\Draft"] < 20, counts)
        self.assertTrue(counts["\\Deleted"] < 15, counts)

    def test_datesBefore2038(self) -> None:
        """
        Internal dates are aware UTC datetimes before 2038, oldest first.
        """
        dates = [m.internalDate for m in self.corpus.messages]
        self.assertEqual(dates, sorted(dates))
        for date in dates:
            self.assertEqual(date.tzinfo, timezone.utc)
            self.assertLess(date.year, 2038)

    def test_bareLF(self) -> None:
        """
        Bodies are stored with bare LF line endings.
        """
        for message in self.corpus.messages:
            with open(_messagePath(self.root, message), "rb") as f:
                body = f.read()
            self.assertNotIn(b"\r", body)
            self.assertTrue(body.endswith(b"\n"))

    def test_headers(self) -> None:
        """
        Each message has the usual header fields, a unique Message-ID and
        a Date naming the same instant as the internal date; some bodies
        are 8-bit UTF-8.
        """
        messageIds = set()
        eightBit = 0
        for message in self.corpus.messages:
            with open(_messagePath(self.root, message), "rb") as f:
                body = f.read()
            fields = _headers(body)
            for name in ("from", "to", "subject", "date", "message-id", "mime-version"):
                self.assertIn(name, fields)
            self.assertEqual(parsedate_to_datetime(fields["date"]), message.internalDate)
            messageIds.add(fields["message-id"])
            if b"Content-Transfer-Encoding: 8bit" in body:
                eightBit += 1
                body.decode("utf-8")
                self.assertTrue(any(b > 0x7F for b in body))
        self.assertEqual(len(messageIds), 400)
        self.assertTrue(10 < eightBit < 100, eightBit)


class ArgumentTests(SynchronousTestCase):
    """
    Arguments the generators cannot honour are refused.
    """

    def test_badFolder(self) -> None:
        """
        A folder component that Maildir++ cannot store is refused.
        """
        self.assertRaises(ValueError, writeMaildir, self.mktemp(), 1, folders=[("a.b",)])
        self.assertRaises(ValueError, writeMaildir, self.mktemp(), 1, folders=[("",)])

    def test_badProfile(self) -> None:
        """
        An unknown profile is refused.
        """
        self.assertRaises(ValueError, writeMaildir, self.mktemp(), 1, profile="huge")


class SizeTests(SynchronousTestCase):
    """
    Message sizes follow the profile.
    """

    def test_realistic(self) -> None:
        """
        Realistic sizes have a median near 8 KB, a tail of base64
        attachments above 100 KB, and nothing above 5 MB.
        """
        corpus = writeMaildir(self.mktemp(), 1000, seed=11)
        sizes = [m.size for m in corpus.messages]
        self.assertTrue(5_000 < statistics.median(sizes) < 12_000, statistics.median(sizes))
        self.assertLessEqual(max(sizes), 5 * 1024 * 1024)
        self.assertTrue(5 < sum(s > 100_000 for s in sizes) < 150)

    def test_small(self) -> None:
        """
        Small messages are about 2 KB each, none above 4 KB.
        """
        corpus = writeMaildir(self.mktemp(), 300, seed=11, profile="small")
        sizes = [m.size for m in corpus.messages]
        self.assertTrue(1_500 < statistics.median(sizes) < 2_500, statistics.median(sizes))
        self.assertLess(max(sizes), 4_096)


class EmlDirectoryTests(SynchronousTestCase):
    """
    L{writeEmlDirectory} writes numbered C{.eml} files.
    """

    def test_files(self) -> None:
        """
        Files are C{00001.eml} onwards, in INBOX without flags, with bare
        LF, mtimes at the internal date, and described by size and SHA-256.
        """
        root = self.mktemp()
        corpus = writeEmlDirectory(root, 12, seed=4)
        self.assertEqual(corpus.folders, (("INBOX",),))
        self.assertEqual(sorted(os.listdir(root)), [f"{i:05d}.eml" for i in range(1, 13)])
        self.assertEqual([m.key for m in corpus.messages], [f"{i:05d}.eml" for i in range(1, 13)])
        for message in corpus.messages:
            path = os.path.join(root, message.key)
            with open(path, "rb") as f:
                body = f.read()
            self.assertEqual(message.folder, ("INBOX",))
            self.assertEqual(message.flags, ())
            self.assertNotIn(b"\r", body)
            self.assertEqual(len(body), message.size)
            self.assertEqual(hashlib.sha256(toCRLF(body)).hexdigest(), message.sha256)
            self.assertEqual(os.stat(path).st_mtime, message.internalDate.timestamp())
