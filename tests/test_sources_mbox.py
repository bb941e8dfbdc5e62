# -*- test-case-name: tests.test_sources_mbox -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.sources.mbox}, against mbox files built by hand in a
temporary directory.
"""

from __future__ import annotations

import os
import random
import re
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence

from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

import imapmig.sources.local as local
import imapmig.sources.messagefile as messagefile
import imapmig.sources.mbox.reading as module
import imapmig.sources.mbox.window as windowModule
from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    toCRLF,
)
from imapmig.mail.octets import BARE_LF, EIGHT_BIT, NUL, UNKNOWN
from imapmig.sources import IMessageSource
from imapmig.sources.mbox import MboxQuoting, MboxSource, parseFromLineDate
from tests.localfiles import describeUnprivileged, makeSocket, makeUnreadable

INBOX = SourceFolder(path=("INBOX",), key="")

FROM = b"From sender@example.com Tue Nov 22 10:00:00 2026"

# The body every round trip is checked with: lines that mboxrd and mboxo
# writers escape differently, at the start, in the middle and at the end.
TRICKY = (
    b"From x\n"
    b"Subject: tricky\n"
    b"\n"
    b"From x\n"
    b">From y\n"
    b">>From z\n"
    b"From\n"
    b"From: not a separator either\n"
    b" From indented\n"
    b"not >From at the start, nor >>From\n"
    b">> quoted\n"
    b">From y\n"
)


def escapeRD(body: bytes) -> bytes:
    """
    Escape C{body} as an mboxrd writer does: one more C{>} on every line
    matching C{>*From }.
    """
    return re.sub(rb"(?m)^(>*From )", rb">\1", body)


def escapeO(body: bytes) -> bytes:
    """
    Escape C{body} as an mboxo writer does: a C{>} before every line
    starting with C{From }.
    """
    return re.sub(rb"(?m)^(From )", rb">\1", body)


def mboxOf(
    bodies: Sequence[bytes],
    escape: Callable[[bytes], bytes] = escapeRD,
    fromLine: bytes = FROM,
    newline: bytes = b"\n",
) -> bytes:
    """
    An mbox file's content as a writer makes it: each message after its
    C{From} line, escaped, followed by an empty line.
    """
    return b"".join(fromLine + newline + escape(body) + newline for body in bodies)


def whole(body: MessageBody) -> MessageBody:
    """
    A body as it is sent: a streamed body's slices joined (checking it
    gives the length it announced).
    """
    if not isinstance(body, StreamedBody):
        return body
    data = b"".join(body.slices(64 * 1024))
    assert len(data) == len(body), (len(data), len(body))
    body.close()
    return data


class MboxTestCase(SynchronousTestCase):
    """
    Helpers for the tests of L{MboxSource}.
    """

    def directory(self) -> str:
        """
        A fresh empty directory.
        """
        root: str = self.mktemp()
        os.makedirs(root)
        return root

    def write(self, path: str, content: bytes) -> str:
        """
        Write C{content} to C{path}, creating its directories.

        @return: C{path}.
        """
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def mbox(self, content: bytes) -> str:
        """
        A fresh mbox file holding C{content}.

        @return: its path.
        """
        return self.write(self.mktemp(), content)

    def folders(self, source: MboxSource) -> list[SourceFolder]:
        """
        The folders C{source} lists.
        """
        folders = self.successResultOf(source.listFolders())
        return list(folders)

    def messages(self, source: MboxSource, folder: SourceFolder = INBOX) -> list[SourceMessage]:
        """
        The messages C{source} lists in C{folder}.
        """
        messages = self.successResultOf(source.listMessages(folder))
        return list(messages)

    def bodies(
        self, source: MboxSource, messages: Sequence[SourceMessage], folder: SourceFolder = INBOX
    ) -> list[MessageBody]:
        """
        The bodies C{source} reads for C{messages}.
        """
        bodies = self.successResultOf(source.readBodies(folder, messages))
        return list(bodies)

    def roundTrip(
        self, content: bytes, quoting: MboxQuoting = MboxQuoting.MBOXRD
    ) -> tuple[list[SourceMessage], list[MessageBody]]:
        """
        List and read every message of an mbox file holding C{content}.
        """
        source = MboxSource(self.mbox(content), quoting)
        messages = self.messages(source)
        return messages, self.bodies(source, messages)

    def assertBodies(
        self,
        content: bytes,
        originals: Sequence[bytes],
        quoting: MboxQuoting = MboxQuoting.MBOXRD,
    ) -> list[SourceMessage]:
        """
        Assert that an mbox file holding C{content} gives back
        C{originals}, converted to CRLF, each with its exact size before
        the conversion.

        @return: the messages listed.
        """
        messages, bodies = self.roundTrip(content, quoting)
        self.assertEqual([whole(b) for b in bodies], [toCRLF(o) for o in originals])
        self.assertEqual([m.size for m in messages], [len(o) for o in originals])
        return messages


class FolderTests(MboxTestCase):
    """
    L{MboxSource.listFolders}.
    """

    def test_interface(self) -> None:
        """
        L{MboxSource} provides L{IMessageSource}.
        """
        self.assertTrue(verifyObject(IMessageSource, MboxSource(self.mbox(b""))))

    def test_quoting(self) -> None:
        """
        The quoting is an L{MboxQuoting} or its value, mboxrd by default; any
        other value is a L{ValueError} naming it.
        """
        path = self.mbox(b"")
        self.assertIs(MboxSource(path).quoting, MboxQuoting.MBOXRD)
        self.assertIs(MboxSource(path, "mboxo").quoting, MboxQuoting.MBOXO)
        self.assertIs(MboxSource(path, MboxQuoting.MBOXO).quoting, MboxQuoting.MBOXO)
        with self.assertRaises(ValueError) as caught:
            MboxSource(path, "mboxcl")
        self.assertIn("'mboxcl'", str(caught.exception))

    def test_singleFile(self) -> None:
        """
        A file is the one folder INBOX, with key C{""}, whatever its name.
        """
        path = self.write(os.path.join(self.directory(), "Sent.mbox"), mboxOf([b"a\n"]))
        self.assertEqual(self.folders(MboxSource(path)), [INBOX])

    def test_hierarchy(self) -> None:
        """
        In a directory, each regular file is a folder named after it (a
        C{.mbox} or C{.mbx} suffix removed; C{Inbox} in any case at the top
        is INBOX); C{X.sbd/} and C{X/} hold the children of C{X}, at any
        depth, without inventing missing parents; keys are relative paths;
        INBOX comes first, then the others sorted, parents before children.
        Dotfiles, hidden directories, C{.msf} indexes and Thunderbird's
        metadata files are skipped.
        """
        root = self.directory()
        for relative in (
            "Inbox",
            "Inbox.msf",
            "Inbox.sbd/Lists",
            "Sent.mbox",
            "Archive.MBX",
            "Archive.sbd/2019",
            "Archive.sbd/2019.msf",
            "Archive.sbd/2019.sbd/Q1.mbox",
            "Archive.sbd/2019.sbd/Inbox",
            "Projects/alpha",
            "Projects/.alpha.swp",
            ".hidden",
            ".cache/x",
            "msgFilterRules.dat",
            "popstate.dat",
            "Zeta",
        ):
            self.write(os.path.join(root, *relative.split("/")), mboxOf([b"a\n"]))
        found = self.folders(MboxSource(root))
        self.assertEqual(
            [(f.path, f.key) for f in found],
            [
                (("INBOX",), "Inbox"),
                (("INBOX", "Lists"), "Inbox.sbd/Lists"),
                (("Archive",), "Archive.MBX"),
                (("Archive", "2019"), "Archive.sbd/2019"),
                (("Archive", "2019", "Inbox"), "Archive.sbd/2019.sbd/Inbox"),
                (("Archive", "2019", "Q1"), "Archive.sbd/2019.sbd/Q1.mbox"),
                (("Projects", "alpha"), "Projects/alpha"),
                (("Sent",), "Sent.mbox"),
                (("Zeta",), "Zeta"),
            ],
        )

    def test_childrenListed(self) -> None:
        """
        The messages of a nested folder are listed and read through its
        key.
        """
        root = self.directory()
        self.write(os.path.join(root, "A.sbd", "B"), mboxOf([b"nested\n"]))
        source = MboxSource(root)
        [folder] = self.folders(source)
        messages = self.messages(source, folder)
        self.assertEqual(self.bodies(source, messages, folder), [b"nested\r\n"])

    def test_appleMailBundle(self) -> None:
        """
        A directory C{X.mbox/} holding a file C{mbox} (an Apple Mail
        export) is the folder C{X}; its C{table_of_contents} is skipped and
        its sub-bundles are its children.
        """
        root = self.directory()
        for relative in ("Work.mbox/mbox", "Work.mbox/Sub.mbox/mbox", "INBOX.mbox/mbox"):
            self.write(os.path.join(root, *relative.split("/")), mboxOf([b"a\n"]))
        self.write(os.path.join(root, "Work.mbox", "table_of_contents"), b"\x00\x01binary")
        self.assertEqual(
            [(f.path, f.key) for f in self.folders(MboxSource(root))],
            [
                (("INBOX",), "INBOX.mbox/mbox"),
                (("Work",), "Work.mbox/mbox"),
                (("Work", "Sub"), "Work.mbox/Sub.mbox/mbox"),
            ],
        )

    def test_appleMailBundleAsRoot(self) -> None:
        """
        When the path is itself an Apple Mail export C{X.mbox/}, its C{mbox}
        file is INBOX and its sub-bundles are top-level folders.
        """
        root = os.path.join(self.directory(), "Work.mbox")
        for relative in ("mbox", "Sub.mbox/mbox"):
            self.write(os.path.join(root, *relative.split("/")), mboxOf([b"a\n"]))
        self.write(os.path.join(root, "table_of_contents"), b"\x00\x01binary")
        self.assertEqual(
            [(f.path, f.key) for f in self.folders(MboxSource(root + "/"))],
            [(("INBOX",), "mbox"), (("Sub",), "Sub.mbox/mbox")],
        )

    def test_specialUse(self) -> None:
        """
        Top-level folders with a well-known name, in any case and with any
        suffix, carry their RFC 6154 attribute; nested ones do not.
        """
        root = self.directory()
        for relative in ("Sent.mbox", "drafts", "Trash", "Junk", "Archive", "Other", "X.sbd/Sent"):
            self.write(os.path.join(root, *relative.split("/")), b"")
        self.assertEqual(
            {f.path: f.specialUse for f in self.folders(MboxSource(root))},
            {
                ("Archive",): "\\Archive",
                ("Junk",): "\\Junk",
                ("Other",): None,
                ("Sent",): "\\Sent",
                ("Trash",): "\\Trash",
                ("X", "Sent"): None,
                ("drafts",): "\\Drafts",
            },
        )

    def test_nonUTF8Name(self) -> None:
        """
        A file name that is not UTF-8 gives a folder name and key with each
        undecodable octet carried as C{%XX}, and a warning naming it; its
        messages are listed and read through that key, by this instance and
        by a fresh one.
        """
        root = self.directory()
        self.write(os.path.join(root, os.fsdecode(b"caf\xe9.mbox")), mboxOf([b"x\n"]))
        source = MboxSource(root)
        with capturedLogs() as events:
            [folder] = self.folders(source)
        self.assertEqual((folder.path, folder.key), (("caf%E9",), "caf%E9.mbox"))
        self.assertEqual(
            [formatEvent(e) for e in events],
            [f"Source folder name is not valid UTF-8: carried as caf%E9 ({root}/caf%E9.mbox)"],
        )
        self.assertEqual(events[0]["log_level"], LogLevel.warn)
        messages = self.messages(source, folder)
        self.assertEqual(self.bodies(source, messages, folder), [b"x\r\n"])
        self.assertEqual(self.bodies(MboxSource(root), messages, folder), [b"x\r\n"])

    def test_missing(self) -> None:
        """
        A path that does not exist fails with L{SourceError} naming it, on
        listing folders and messages alike.
        """
        path = self.mktemp()
        source = MboxSource(path)
        for d in (source.listFolders(), source.listMessages(INBOX)):
            failure = self.failureResultOf(d, SourceError)
            self.assertIn(path, str(failure.value))

    def test_emptyDirectory(self) -> None:
        """
        A directory without any mbox file fails with L{SourceError} naming
        it.
        """
        root = self.directory()
        self.write(os.path.join(root, "Inbox.msf"), b"index")
        failure = self.failureResultOf(MboxSource(root).listFolders(), SourceError)
        self.assertIn(root, str(failure.value))
        self.assertIn("no mbox files", str(failure.value))

    def test_unreadableDirectory(self) -> None:
        """
        A subdirectory that cannot be listed fails the listing with
        L{SourceError} naming it, rather than leaving its folders behind
        (checked where the kernel refuses: see L{tests.localfiles}).
        """
        root = os.path.abspath(self.directory())
        self.write(os.path.join(root, "A.sbd", "B"), b"")
        self.write(os.path.join(root, "A"), b"")
        locked = os.path.join(root, "A.sbd")
        makeUnreadable(self, locked)
        self.assertEqual(
            describeUnprivileged(self, "mbox", root),
            {"error": f"cannot list {locked}: Permission denied"},
        )

    def test_unreadableFile(self) -> None:
        """
        A file in the directory that cannot be read fails the listing of
        its own folder, naming it; the others are read.
        """
        root = os.path.abspath(self.directory())
        locked = self.write(os.path.join(root, "Locked"), mboxOf([b"a\n"]))
        self.write(os.path.join(root, "Open"), mboxOf([b"b\n"]))
        makeUnreadable(self, locked)
        self.assertEqual(
            describeUnprivileged(self, "mbox", root),
            {
                "folders": {
                    "Locked": {"error": f"permission denied: {locked}"},
                    "Open": {"0": 3},
                }
            },
        )

    def test_unknownFolder(self) -> None:
        """
        Listing the messages of a folder key the source does not have fails
        with L{SourceError} naming the key.
        """
        root = self.directory()
        self.write(os.path.join(root, "A"), b"")
        folder = SourceFolder(path=("B",), key="../B")
        failure = self.failureResultOf(MboxSource(root).listMessages(folder), SourceError)
        self.assertIn("'../B'", str(failure.value))


class NotMboxTests(MboxTestCase):
    """
    Files that are not mbox files.
    """

    def test_singleFile(self) -> None:
        """
        A file that does not start with C{From } is listed as a folder, but
        listing its messages fails with L{SourceError} naming it.
        """
        path = self.mbox(b"Subject: an eml, not an mbox\n\nbody\n")
        source = MboxSource(path)
        self.assertEqual(self.folders(source), [INBOX])
        failure = self.failureResultOf(source.listMessages(INBOX), SourceError)
        self.assertEqual(
            str(failure.value), f"not an mbox file: {path} does not start with a 'From ' line"
        )

    def test_inDirectory(self) -> None:
        """
        In a directory, a file that is not an mbox fails the listing of its
        own folder only, naming the file.
        """
        root = self.directory()
        bad = self.write(os.path.join(root, "notes.txt"), b"\n\nFrom later on\n")
        self.write(os.path.join(root, "Good"), mboxOf([b"a\n"]))
        source = MboxSource(root)
        good, notes = self.folders(source)
        self.assertEqual(len(self.messages(source, good)), 1)
        failure = self.failureResultOf(source.listMessages(notes), SourceError)
        self.assertIn(bad, str(failure.value))
        self.assertIn("not an mbox file", str(failure.value))

    def test_emptyFile(self) -> None:
        """
        An empty file is an empty folder.
        """
        self.assertEqual(self.messages(MboxSource(self.mbox(b""))), [])

    def test_unreadable(self) -> None:
        """
        A file that cannot be read fails the listing with L{SourceError}
        naming it (checked where the kernel refuses: see
        L{tests.localfiles}).
        """
        path = os.path.abspath(self.mbox(mboxOf([b"a\n"])))
        makeUnreadable(self, path)
        self.assertEqual(
            describeUnprivileged(self, "mbox", path),
            {"folders": {"": {"error": f"permission denied: {path}"}}},
        )


class SeparatorTests(MboxTestCase):
    """
    How messages are delimited, unescaped and measured.
    """

    def test_keysAndOrder(self) -> None:
        """
        Messages come in file order; each one's key is the decimal offset of
        its C{From} line.
        """
        bodies = [b"Subject: %d\n\nbody %d\n" % (i, i) for i in range(3)]
        content = mboxOf(bodies)
        messages = self.assertBodies(content, bodies)
        offsets = [m.start() for m in re.finditer(rb"(?m)^From ", content)]
        self.assertEqual([m.key for m in messages], [str(o) for o in offsets])

    def test_mboxrdRoundTrip(self) -> None:
        """
        A body with C{From }, C{>From } and C{>>From } lines, written as
        mboxrd, is read back identical, at every position in the file.
        """
        self.assertBodies(mboxOf([TRICKY, TRICKY, TRICKY]), [TRICKY] * 3)

    def test_mboxoRoundTrip(self) -> None:
        """
        A body with C{From } and C{>>From } lines, written as mboxo, is read
        back identical: C{>From } lines lose their C{>}, lines with more
        C{>} keep them all.
        """
        body = TRICKY.replace(b"\n>From y\n", b"\n")
        self.assertNotIn(b"\n>From ", body)
        self.assertBodies(mboxOf([body, body], escapeO), [body] * 2, MboxQuoting.MBOXO)

    def test_quotingsDiffer(self) -> None:
        """
        The same file read as mboxrd and as mboxo differs only in the lines
        with more than one C{>}.
        """
        content = mboxOf([b">From a\n>>From b\n>>>From c\n"], lambda b: b)
        self.assertBodies(content, [b"From a\n>From b\n>>From c\n"], MboxQuoting.MBOXRD)
        self.assertBodies(content, [b"From a\n>>From b\n>>>From c\n"], MboxQuoting.MBOXO)

    def test_notSeparators(self) -> None:
        """
        Only a line starting with C{From } separates messages: C{From:},
        C{From} alone, an indented C{From } and C{From } in the middle of
        a line do not.
        """
        body = b"From: a\nFrom\n From b\nsee From c\nFromage\n"
        self.assertBodies(mboxOf([body], lambda b: b), [body])

    def test_emptyLineRule(self) -> None:
        """
        Content ending with an empty line loses one LF; content ending with
        a single LF, or none, is kept whole; this holds for the last
        message too.
        """
        content = (
            b"From a Tue Nov 22 10:00:00 2026\nA: 1\n\nblank follows\n\n"
            b"From b Tue Nov 22 10:00:00 2026\nA: 2\n\nno blank\n"
            b"From c Tue Nov 22 10:00:00 2026\nA: 3\n\ntwo blanks\n\n\n"
            b"From d Tue Nov 22 10:00:00 2026\nA: 4\n\nlast, blank follows\n\n"
        )
        self.assertBodies(
            content,
            [
                b"A: 1\n\nblank follows\n",
                b"A: 2\n\nno blank\n",
                b"A: 3\n\ntwo blanks\n\n",
                b"A: 4\n\nlast, blank follows\n",
            ],
        )

    def test_lastWithoutNewline(self) -> None:
        """
        The last message may end without a newline: it is kept as it is.
        """
        content = mboxOf([b"A: 1\n\none\n"]) + FROM + b"\nA: 2\n\nno newline"
        self.assertBodies(content, [b"A: 1\n\none\n", b"A: 2\n\nno newline"])

    def test_headersOnly(self) -> None:
        """
        A message without body, with or without the empty line after its
        header, and a message with no content at all (two C{From} lines in
        a row, or a C{From} line ending the file) are read as they are.
        """
        content = (
            mboxOf([b"Subject: no body\n", b"Subject: empty body\n\n"])
            + FROM
            + b"\n"
            + FROM
            + b"\nSubject: x\n\n"
            + FROM
        )
        messages = self.assertBodies(
            content, [b"Subject: no body\n", b"Subject: empty body\n\n", b"", b"Subject: x\n", b""]
        )
        self.assertEqual(messages[-1].key, str(len(content) - len(FROM)))

    def test_crlf(self) -> None:
        """
        An mbox written with CRLF line ends: the CRLF empty line between
        messages is dropped, escaped lines are unescaped, and the bodies
        come back as written, CRLF included in their sizes.
        """
        original = TRICKY.replace(b"\n", b"\r\n")
        content = mboxOf([original, original], newline=b"\r\n")
        messages = self.assertBodies(content, [original, original])
        self.assertEqual(messages[1].key, str(len(FROM) + 2 + len(escapeRD(original)) + 2))

    def test_binary(self) -> None:
        """
        NUL and 8-bit octets, and a lone CR, pass through unchanged (apart
        from LF becoming CRLF).
        """
        body = b"Subject: \xe9t\xe9\n\n\x00\x01\xff\xfe\n\x80From \x00\nbare\rCR\n"
        self.assertBodies(mboxOf([body, body]), [body, body])

    def test_large(self) -> None:
        """
        A 6 MB message, with escaped lines and lines starting with C{>}
        scattered over it (some across the 1 MiB read boundaries), is
        listed with its exact size and read back identical, between two
        small messages.
        """
        rng = random.Random(6)
        pool = [b"text " * n for n in range(1, 30)] + [b"> quoted", b""]
        lines = []
        total = 0
        while total < 6 * 1024 * 1024:
            if rng.random() < 0.01:
                line = b">" * rng.randrange(0, 3) + b"From line %d" % total
            else:
                line = rng.choice(pool)
            lines.append(line)
            total += len(line) + 1
        big = b"Subject: big\n\n" + b"\n".join(lines) + b"\n"
        originals = [b"A: 1\n\nsmall\n", big, b"A: 3\n\nsmall\n"]
        messages = self.assertBodies(mboxOf(originals), originals)
        self.assertGreater(messages[1].size, 6 * 1024 * 1024)
        source = MboxSource(self.mbox(mboxOf(originals)))
        bodies = self.bodies(source, self.messages(source))
        self.assertIsInstance(bodies[1], StreamedBody)
        self.assertEqual([type(b) for b in bodies[::2]], [bytes, bytes])
        for body in bodies:
            whole(body)

    def test_smallReads(self) -> None:
        """
        Whatever the read size, and so wherever reads split separators,
        escaped lines, headers and empty lines, random mboxrd, mboxo and
        CRLF files give back exactly their messages and sizes, under the
        keys a full read gives.
        """
        rng = random.Random(11)
        pool = [
            b"From x",
            b">From y",
            b">>From z",
            b">>>From ",
            b"From",
            b"",
            b"text",
            b"> quoted",
            b"\x00\xff",
            b"Status: R",
        ]
        cases = []
        for seed in range(6):
            quoting = MboxQuoting.MBOXO if seed % 2 else MboxQuoting.MBOXRD
            newline = b"\r\n" if seed % 3 == 2 else b"\n"
            escape = escapeO if quoting is MboxQuoting.MBOXO else escapeRD
            bodies = []
            for _ in range(rng.randrange(1, 8)):
                lines = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
                if quoting is MboxQuoting.MBOXO:
                    lines = [line for line in lines if not line.startswith(b">From ")]
                header = [b"Subject: %d" % rng.randrange(100), b"X-Status: F"][: rng.randrange(3)]
                body = newline.join(header + [b""] + lines) + newline
                bodies.append(body)
            cases.append((mboxOf(bodies, escape, newline=newline), bodies, quoting))
        expected = [self.roundTrip(content, quoting)[0] for content, _, quoting in cases]
        for chunk in (1, 2, 3, 5, 7, 13, 64):
            self.patch(windowModule, "_CHUNK", chunk)
            for (content, bodies, quoting), keys in zip(cases, expected):
                messages = self.assertBodies(content, bodies, quoting)
                self.assertEqual(messages, keys)

    def test_keysStableWhenAppended(self) -> None:
        """
        Appending messages to the file keeps the keys of those already in
        it; the new ones are keyed by their offsets.
        """
        path = self.mbox(mboxOf([b"A: 1\n\none\n", b"A: 2\n\ntwo\n"]))
        source = MboxSource(path)
        before = self.messages(source)
        size = os.path.getsize(path)
        with open(path, "ab") as f:
            f.write(mboxOf([b"A: 3\n\nthree\n"]))
        after = self.messages(MboxSource(path))
        self.assertEqual(after[:2], before)
        self.assertEqual(after[2].key, str(size))
        self.assertEqual(
            self.bodies(source, after[1:]), [b"A: 2\r\n\r\ntwo\r\n", b"A: 3\r\n\r\nthree\r\n"]
        )


class ContentLengthTests(MboxTestCase):
    """
    C{Content-Length} fields (mboxcl, mboxcl2).
    """

    def message(self, body: bytes, length: int | None = None, extra: bytes = b"") -> bytes:
        """
        A message with a C{Content-Length} field giving C{length} (the
        body's length by default).
        """
        if length is None:
            length = len(body)
        return b"Content-Length: %d\nSubject: cl\n%s\n%s" % (length, extra, body)

    def test_honoured(self) -> None:
        """
        When the length leads to the next C{From} line, after an empty line
        or not, or to the end of the file, after an empty line or not, the
        message is exactly that long: a C{From } line in its body is no
        separator, and C{>From } lines are not unescaped.
        """
        body = b"From inside the body\n>From quoted\n\n"
        one = self.message(body)
        for tail in (b"\n" + FROM + b"\nA: 2\n\nnext\n", FROM + b"\nA: 2\n\nnext\n", b"", b"\n"):
            content = FROM + b"\n" + one + tail
            messages, bodies = self.roundTrip(content)
            self.assertEqual(bodies[0], toCRLF(one))
            self.assertEqual(messages[0].size, len(one))
            if tail.strip():
                self.assertEqual(bodies[1:], [b"A: 2\r\n\r\nnext\r\n"])
            else:
                self.assertEqual(len(bodies), 1)

    def test_nameCaseInsensitive(self) -> None:
        """
        The field's name is matched in any case, and the value may be
        surrounded by white space.
        """
        one = b"content-LENGTH:   6 \nA: 1\n\nFrom \n"
        messages, bodies = self.roundTrip(FROM + b"\n" + one)
        self.assertEqual(bodies, [toCRLF(one)])

    def test_crlf(self) -> None:
        """
        A Content-Length in a CRLF mbox counts CRLF octets, and is honoured
        before a CRLF empty line.
        """
        one = b"Content-Length: 14\r\n\r\nFrom x\r\nbody\r\n"
        content = FROM + b"\r\n" + one + b"\r\n" + FROM + b"\r\nA: 2\r\n\r\nnext\r\n"
        messages, bodies = self.roundTrip(content)
        self.assertEqual(bodies, [one, b"A: 2\r\n\r\nnext\r\n"])
        self.assertEqual(messages[0].size, len(one))

    def test_ignoredWhenWrong(self) -> None:
        """
        A length that does not lead to a C{From} line or to the end of the
        file (too short, ending mid-line, too long, beyond the end) or is
        not a number is ignored: the message ends at the next C{From } line
        and is unescaped as usual.
        """
        body = b"first\nFrom inside\n>From quoted\n"
        for length in (b"3", b"12", b"9", b"30", b"33", b"9999", b"x12", b""):
            one = b"Content-Length: " + length + b"\n\n" + body
            content = FROM + b"\n" + one + b"\n" + FROM + b"\nA: 2\n\nnext\n"
            messages, bodies = self.roundTrip(content)
            self.assertEqual(
                bodies,
                [
                    b"Content-Length: " + length + b"\r\n\r\nfirst\r\n",
                    b"From quoted\r\n",
                    b"A: 2\r\n\r\nnext\r\n",
                ],
                length,
            )

    def test_notFromTheNextMessage(self) -> None:
        """
        A message without an empty line (all header) is not delimited by
        a C{Content-Length} field of the message after it.
        """
        second = b"Content-Length: 7\n\nFrom x\n"
        content = FROM + b"\nSubject: all header\n" + FROM + b"\n" + second
        messages, bodies = self.roundTrip(content)
        self.assertEqual(bodies, [b"Subject: all header\r\n", toCRLF(second)])

    def test_onlyInHeader(self) -> None:
        """
        A C{Content-Length} line in the body, after the empty line, is not
        a field.
        """
        one = b"A: 1\n\nContent-Length: 8\n\nFrom inside\n"
        messages, bodies = self.roundTrip(FROM + b"\n" + one)
        self.assertEqual(len(bodies), 2)


class DateTests(MboxTestCase):
    """
    INTERNALDATE from the C{From} line.
    """

    def test_formats(self) -> None:
        """
        asctime dates (any four-digit year: the epoch, before 1970, after
        2099), with a space-padded day or without seconds, with a
        time zone after or before the year (numeric or a known
        abbreviation, an unknown one counting as UTC) or none (UTC), an
        RFC 5322 date, a missing sender and trailing UUCP words are read.
        """

        def at(
            year: int,
            month: int,
            day: int,
            hour: int,
            minute: int = 0,
            second: int = 0,
            minutes: int = 0,
        ) -> datetime:
            zone = timezone(timedelta(minutes=minutes))
            return datetime(year, month, day, hour, minute, second, tzinfo=zone)

        lines = {
            b"From a@b.example Tue Nov 22 10:00:00 2026": at(2026, 11, 22, 10, 0, 0),
            b"From MAILER-DAEMON Mon Nov  2 09:05:07 2026": at(2026, 11, 2, 9, 5, 7),
            b"From nobody Tue Nov 22 10:00 2026": at(2026, 11, 22, 10, 0),
            b"From a Tue Nov 22 10:00:00 2026 +0100": at(2026, 11, 22, 10, minutes=60),
            b"From a Tue Nov 22 10:00:00 2026 -0530": at(2026, 11, 22, 10, minutes=-330),
            b"From a Tue Nov 22 10:00:00 CET 2026": at(2026, 11, 22, 10, minutes=60),
            b"From a Tue Nov 22 10:00:00 PDT 2026": at(2026, 11, 22, 10, minutes=-420),
            b"From a Tue Nov 22 10:00:00 2026 UTC": at(2026, 11, 22, 10),
            b"From a Tue Nov 22 10:00:00 -0500 2026": at(2026, 11, 22, 10, minutes=-300),
            b"From a Tue Nov 22 10:00:00 XYZ 2026": at(2026, 11, 22, 10),
            b"From a Sat, 22 Nov 2026 10:00:00 +0100": at(2026, 11, 22, 10, minutes=60),
            b"From a Tue Nov 22 10:00:00 2026 remote from uucp": at(2026, 11, 22, 10),
            b"From  Tue Nov 22 10:00:00 2026": at(2026, 11, 22, 10),
            b"From a tue nov 22 23:59:60 2026": at(2026, 11, 22, 23, 59, 59),
            b"From MAILER-DAEMON Thu Jan  1 00:00:00 1970": at(1970, 1, 1, 0),
            b"From a Fri Dec 13 20:45:52 1901": at(1901, 12, 13, 20, 45, 52),
            b"From a Wed Dec 31 23:59:59 1969": at(1969, 12, 31, 23, 59, 59),
            b"From a Fri Jan  1 00:00:00 2100": at(2100, 1, 1, 0),
            b"From a Fri Dec 31 23:59:59 9999 +0100": at(9999, 12, 31, 23, 59, 59, minutes=60),
        }
        for line, expected in lines.items():
            self.assertEqual(parseFromLineDate(line), expected, line)
            self.assertEqual(parseFromLineDate(line + b"\r"), expected, line)
        content = mboxOf([b"a\n"], fromLine=b"From a Tue Nov 22 10:00 CET 2026")
        [message] = self.roundTrip(content)[0]
        self.assertEqual(message.internalDate, at(2026, 11, 22, 10, minutes=60))

    def test_unparseable(self) -> None:
        """
        A date that cannot be read, or whose year has not four digits, leaves the
        INTERNALDATE to the server (L{None}), and the message is listed and
        read all the same.
        """
        lines = [
            b"From a",
            b"From a yesterday",
            b"From a Tue Nov 31 10:00:00 2026",
            b"From a Tue Nov 22 25:00:00 2026",
            b"From a Tue Nov 22 10:00:00",
            b"From a Tue Nov 22 10:00:00 0999",
            b"From a Tue Nov 22 10:00:00 10000",
            b"From a Tue Nov 22 10:00:00 26",
            b"From \xff\xfe Tue Xyz 22 10:00:00 2026",
        ]
        for line in lines:
            self.assertIsNone(parseFromLineDate(line), line)
        content = b"".join(line + b"\nA: 1\n\nbody\n\n" for line in lines)
        messages, bodies = self.roundTrip(content)
        self.assertEqual([m.internalDate for m in messages], [None] * len(lines))
        self.assertEqual(bodies, [b"A: 1\r\n\r\nbody\r\n"] * len(lines))


class FlagTests(MboxTestCase):
    """
    Flags from the header fields mail programs write into mbox files.
    """

    def test_flags(self) -> None:
        """
        C{Status:} R is \\Seen (O is no flag); C{X-Status:} A F T D are
        \\Answered \\Flagged \\Draft \\Deleted; C{X-Mozilla-Status:} bits
        give \\Seen \\Answered \\Flagged \\Deleted and C{$Forwarded};
        C{X-Keywords:} and C{X-Mozilla-Keys:} give keywords, separated by
        commas or spaces, folded or not, each once; field names match in
        any case; system flags come first, in a fixed order.
        """
        headers = {
            b"Status: RO": ("\\Seen",),
            b"Status: O": (),
            b"X-Status: A": ("\\Answered",),
            b"X-Status: F": ("\\Flagged",),
            b"X-Status: T": ("\\Draft",),
            b"X-Status: D": ("\\Deleted",),
            b"Status: R\nX-Status: DTFA": (
                "\\Draft",
                "\\Flagged",
                "\\Answered",
                "\\Seen",
                "\\Deleted",
            ),
            b"x-status: F\nSTATUS: R": ("\\Flagged", "\\Seen"),
            b"X-Keywords: $label1 Junk": ("$label1", "Junk"),
            b"X-Keywords: a, b,c": ("a", "b", "c"),
            b"X-Keywords: a,\n\tb\nSubject: c": ("a", "b"),
            b"X-Keywords: a A a\nX-Keywords: b": ("a", "b"),
            b"X-Keywords:": (),
            b"X-Mozilla-Status: 0001": ("\\Seen",),
            b"X-Mozilla-Status: 100f": (
                "\\Flagged",
                "\\Answered",
                "\\Seen",
                "\\Deleted",
                "$Forwarded",
            ),
            b"X-Mozilla-Status: zz": (),
            b"X-Mozilla-Status2: 00000001": (),
            b"X-Mozilla-Keys: todo  $label2            ": ("todo", "$label2"),
            b"Status: R\nX-Keywords: NonJunk": ("\\Seen", "NonJunk"),
            b"Subject: none": (),
        }
        content = b"".join(
            FROM + b"\n" + header + b"\nSubject: x\n\nbody\n\n" for header in headers
        )
        messages, bodies = self.roundTrip(content)
        self.assertEqual([m.flags for m in messages], list(headers.values()))
        self.assertEqual(
            bodies, [toCRLF(header + b"\nSubject: x\n\nbody\n") for header in headers]
        )

    def test_invalidKeywords(self) -> None:
        """
        Keywords that are not IMAP atoms (non-ASCII, with atom-specials or
        a backslash) are dropped; the valid ones are kept.
        """
        header = b"X-Keywords: caf\xc3\xa9 ok (bad) a]b \\Seen 50% x*y \"q\" {1} fine\x01"
        [message] = self.roundTrip(mboxOf([header + b"\n\nbody\n"]))[0]
        self.assertEqual(message.flags, ("ok",))

    def test_headerOnly(self) -> None:
        """
        Fields in the body, after the first empty line, give no flags.
        """
        body = b"Subject: x\n\nStatus: R\nX-Status: F\nX-Keywords: k\n"
        [message] = self.roundTrip(mboxOf([body]))[0]
        self.assertEqual(message.flags, ())

    def test_notFromTheNextMessage(self) -> None:
        """
        A message without an empty line (all header) takes no flags from the
        header of the message after it.
        """
        content = FROM + b"\nSubject: all header\n" + FROM + b"\nStatus: R\n\nx\n"
        messages = self.roundTrip(content)[0]
        self.assertEqual([m.flags for m in messages], [(), ("\\Seen",)])

    def test_crlfHeader(self) -> None:
        """
        Fields in a CRLF mbox give the same flags.
        """
        body = b"Status: RO\r\nX-Keywords: a b\r\n\r\nStatus: \r\n"
        [message] = self.roundTrip(mboxOf([body], newline=b"\r\n"))[0]
        self.assertEqual(message.flags, ("\\Seen", "a", "b"))


class ReadBodiesTests(MboxTestCase):
    """
    L{MboxSource.readBodies}.
    """

    def test_orderAndSubset(self) -> None:
        """
        Bodies come in the order asked for, for any subset of the messages;
        no messages, no bodies.
        """
        bodies = [b"A: %d\n\n%d\n" % (i, i) for i in range(4)]
        source = MboxSource(self.mbox(mboxOf(bodies)))
        messages = self.messages(source)
        self.assertEqual(
            self.bodies(source, [messages[3], messages[1]]), [toCRLF(bodies[3]), toCRLF(bodies[1])]
        )
        self.assertEqual(self.bodies(source, []), [])

    def test_factsCarried(self) -> None:
        """
        The bodies come with the facts of their octets, found as they were
        unescaped and converted (L{ReadBodies}); a message sent from its
        region of the file carries its own, a message not found has none.
        """
        stored = [b"A: 1\n\nFrom me\n", b"A: 2\r\n\r\n\0\r\n", "A: é\n\n>From x\n".encode()]
        big = b"Subject: big\n\n" + b"line\n" * 20
        self.patch(module, "LARGE_MESSAGE", 50)
        source = MboxSource(self.mbox(mboxOf(stored + [big])))
        messages = self.messages(source)
        unknown = SourceMessage("7", (), None, 1)
        bodies = self.successResultOf(source.readBodies(INBOX, messages + [unknown]))
        assert isinstance(bodies, ReadBodies)
        self.assertEqual(bodies[:3], [toCRLF(body) for body in stored])
        self.assertEqual(
            list(bodies.facts), [BARE_LF, NUL, EIGHT_BIT | BARE_LF, UNKNOWN, UNKNOWN]
        )
        self.assertIsInstance(bodies[3], StreamedBody)

    def test_withoutListing(self) -> None:
        """
        Bodies can be read for messages listed by another source instance
        (as after a restart), in a directory as in a single file.
        """
        root = self.directory()
        path = self.write(os.path.join(root, "A.sbd", "B.mbox"), mboxOf([TRICKY]))
        for where in (root, path):
            source = MboxSource(where)
            [folder] = self.folders(source)
            messages = self.messages(source, folder)
            self.assertEqual(self.bodies(MboxSource(where), messages, folder), [toCRLF(TRICKY)])

    def test_unknownKey(self) -> None:
        """
        A key that is not the offset of a listed message, even after
        listing again, is an L{UnreadableMessage} naming the file; the
        others are read.
        """
        path = self.mbox(mboxOf([b"a\n"]))
        source = MboxSource(path)
        [message] = self.messages(source)
        unknown = [SourceMessage(key, (), None, 1) for key in ("7", "x", "-1", "", "9" * 5000)]
        self.assertEqual(
            self.bodies(source, unknown + [message]),
            [UnreadableMessage(f"no message at offset {m.key} in {path}") for m in unknown]
            + [b"a\r\n"],
        )

    def test_appendedSinceListing(self) -> None:
        """
        A message appended since the last listing is found by listing the
        file again.
        """
        path = self.mbox(mboxOf([b"a\n"]))
        source = MboxSource(path)
        self.messages(source)
        with open(path, "ab") as f:
            f.write(mboxOf([b"b\n"]))
        later = self.messages(MboxSource(path))
        self.assertEqual(self.bodies(source, later), [b"a\r\n", b"b\r\n"])

    def test_truncated(self) -> None:
        """
        A message the file no longer holds whole (the file was truncated
        since the listing) is an L{UnreadableMessage} naming the file.
        """
        path = self.mbox(mboxOf([b"a\n", b"b" * 100 + b"\n"]))
        source = MboxSource(path)
        messages = self.messages(source)
        os.truncate(path, os.path.getsize(path) - 50)
        [first, second] = self.bodies(source, messages)
        self.assertEqual(first, b"a\r\n")
        assert isinstance(second, UnreadableMessage)
        self.assertIn(f"{path} was truncated", second.reason)

    def test_rewritten(self) -> None:
        """
        A file rewritten since the listing (a message removed before the
        others) no longer has C{From} lines at the listed offsets: the
        messages are L{UnreadableMessage}s saying the file changed, not
        other octets.
        """
        path = self.mbox(mboxOf([b"A: 1\n\none\n", b"A: 2\n\ntwo\n", b"A: 3\n\nthree\n"]))
        source = MboxSource(path)
        messages = self.messages(source)
        self.write(path, mboxOf([b"A: 1\n\none\n", b"A: 3\n\nthree\n"]))
        bodies = self.bodies(source, messages)
        self.assertEqual(bodies[0], b"A: 1\r\n\r\none\r\n")
        for body in bodies[1:]:
            assert isinstance(body, UnreadableMessage)
            self.assertIn(f"{path} changed since it was listed", body.reason)

    def test_escapesChanged(self) -> None:
        """
        A message whose escaped lines changed since the listing (same
        length, same offsets) is an L{UnreadableMessage}, since its size
        would no longer be the one announced.
        """
        path = self.mbox(mboxOf([b">From a\n"], lambda b: b))
        source = MboxSource(path)
        messages = self.messages(source)
        self.write(path, mboxOf([b"xFrom a\n"], lambda b: b))
        [body] = self.bodies(source, messages)
        assert isinstance(body, UnreadableMessage)
        self.assertIn("changed since it was listed", body.reason)

    def test_vanished(self) -> None:
        """
        A file deleted since the listing makes each message an
        L{UnreadableMessage} naming it, not an exception.
        """
        path = self.mbox(mboxOf([b"a\n", b"b\n"]))
        source = MboxSource(path)
        messages = self.messages(source)
        os.unlink(path)
        self.assertEqual(
            self.bodies(source, messages), [UnreadableMessage(f"file vanished: {path}")] * 2
        )

    def test_vanishedBeforeListing(self) -> None:
        """
        When the file is gone and was never listed by this instance, each
        message is an L{UnreadableMessage} naming it.
        """
        path = self.mbox(mboxOf([b"a\n"]))
        messages = self.messages(MboxSource(path))
        source = MboxSource(path)
        os.unlink(path)
        [body] = self.bodies(source, messages)
        assert isinstance(body, UnreadableMessage)
        self.assertIn(path, body.reason)

    def test_openFailures(self) -> None:
        """
        Why a file listed earlier cannot be opened now is said for each
        message: permission denied, gone, a link loop, or the system's
        explanation.  (The kernel's refusal itself is checked by
        L{NotMboxTests.test_unreadable}.)
        """
        import errno

        cases = [
            (PermissionError(errno.EACCES, "Permission denied"), "permission denied: /m"),
            (FileNotFoundError(errno.ENOENT, "No such file"), "file vanished: /m"),
            (OSError(errno.ELOOP, "Too many levels"), "symbolic link loop: /m"),
            (OSError(errno.EIO, "Input/output error"), "cannot read /m: Input/output error"),
        ]
        for error, reason in cases:
            self.assertEqual(local.openProblem("/m", error), reason)

    def test_noDescriptorLeak(self) -> None:
        """
        Listing and reading, successful or not, leave no file open.
        """
        good = self.mbox(mboxOf([b"a\n", b"b\n"]))
        bad = self.mbox(b"not an mbox\n")
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            source = MboxSource(good)
            messages = self.messages(source)
            self.bodies(source, messages)
            self.failureResultOf(MboxSource(bad).listMessages(INBOX), SourceError)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)


class StreamingTests(MboxTestCase):
    """
    A message larger than L{LARGE_MESSAGE} is not held in memory: it is
    sent from its region of the file, unescaped and converted to CRLF a
    slice at a time.
    """

    def test_unescaperAsTheWholeMessage(self) -> None:
        """
        Fed in pieces of any size, L{Unescaper} gives what the regular
        expression gives over the whole message, for mboxrd and mboxo, with
        escapes across piece boundaries and runs of C{>} longer than it
        holds back.
        """
        from imapmig.sources.mbox.quoting import UNESCAPE
        from imapmig.sources.mbox.stream import Unescaper

        rng = random.Random(7)
        pool = [b">From x", b">>From y", b"From z", b">" * 200 + b"From w", b">" * 150, b">Fro",
                b">", b"", b"text", b"> quoted", b"\r", b">From", b">>>From "]
        for _ in range(400):
            data = b"\n".join(rng.choice(pool) for _ in range(rng.randrange(0, 30)))
            if rng.random() < 0.5:
                data += b"\n"
            for quoting in MboxQuoting:
                expected = UNESCAPE[quoting].sub(rb"\1", data)
                unescaper = Unescaper(quoting is MboxQuoting.MBOXO)
                pieces = []
                at = 0
                while at < len(data):
                    step = rng.choice([1, 2, 3, 5, 8, 64, 1000])
                    pieces.append(unescaper.feed(data[at : at + step]))
                    at += step
                pieces.append(unescaper.end())
                self.assertEqual(b"".join(pieces), expected, (quoting, data))

    def test_streamedAsWhole(self) -> None:
        """
        With a small threshold and small reads, random mboxrd, mboxo and
        CRLF files give streamed bodies with exactly the octets and length
        the whole message would have, under the same keys.
        """
        rng = random.Random(12)
        pool = [b"From x", b">From y", b">>From z", b">" * 80 + b"From w", b"", b"text",
                b"\x00\xff", b"a\rb", b"> q"]
        cases = []
        for seed in range(8):
            quoting = MboxQuoting.MBOXO if seed % 2 else MboxQuoting.MBOXRD
            newline = b"\r\n" if seed % 3 == 2 else b"\n"
            escape = escapeO if quoting is MboxQuoting.MBOXO else escapeRD
            bodies = []
            for _ in range(rng.randrange(1, 5)):
                lines = [rng.choice(pool) for _ in range(rng.randrange(0, 40))]
                if quoting is MboxQuoting.MBOXO:
                    lines = [line for line in lines if not line.startswith(b">")]
                bodies.append(newline.join([b"Subject: s", b""] + lines) + newline)
            cases.append((mboxOf(bodies, escape, newline=newline), bodies, quoting))
        self.patch(messagefile, "LARGE_MESSAGE", 20)
        self.patch(module, "LARGE_MESSAGE", 20)
        for readSize in (1, 3, 7, 64):
            self.patch(module, "READ_CHUNK", readSize)
            for content, originals, quoting in cases:
                source = MboxSource(self.mbox(content), quoting)
                messages = self.messages(source)
                read = self.bodies(source, messages)
                for body, original, message in zip(read, originals, messages):
                    if message.size > 20:
                        self.assertIsInstance(body, StreamedBody)
                    self.assertEqual(whole(body), toCRLF(original))

    def test_changedWhileQueued(self) -> None:
        """
        A streamed message whose file was rewritten after it was read
        raises, naming the file, rather than send other octets; one whose
        file was only appended to is sent.
        """
        self.patch(module, "LARGE_MESSAGE", 10)
        big = b"Subject: big\n\n" + b"line\n" * 20
        path = self.mbox(mboxOf([big]))
        source = MboxSource(path)
        messages = self.messages(source)
        [body] = self.bodies(source, messages)
        assert isinstance(body, StreamedBody)
        with open(path, "ab") as f:
            f.write(mboxOf([b"later\n"]))
        self.assertEqual(whole(body), toCRLF(big))
        [body] = self.bodies(source, messages)
        assert isinstance(body, StreamedBody)
        self.write(path, mboxOf([big.replace(b"line", b"LINE")], fromLine=FROM.upper()))
        with self.assertRaises(OSError) as caught:
            b"".join(body.slices(16))
        self.assertIn(path, str(caught.exception))
        body.close()

    def test_truncatedLarge(self) -> None:
        """
        A large message the file no longer holds whole is an
        L{UnreadableMessage}, and nothing of it is held.
        """
        self.patch(module, "LARGE_MESSAGE", 10)
        path = self.mbox(mboxOf([b"Subject: big\n\n" + b"line\n" * 20]))
        source = MboxSource(path)
        messages = self.messages(source)
        os.truncate(path, 60)
        [body] = self.bodies(source, messages)
        assert isinstance(body, UnreadableMessage)
        self.assertIn(f"{path} was truncated", body.reason)

    def test_noDescriptorLeak(self) -> None:
        """
        A streamed body holds one descriptor, closed with it.
        """
        self.patch(module, "LARGE_MESSAGE", 10)
        source = MboxSource(self.mbox(mboxOf([b"Subject: big\n\n" + b"line\n" * 20])))
        messages = self.messages(source)
        before = len(os.listdir("/proc/self/fd"))
        [body] = self.bodies(source, messages)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before + 1)
        del body
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)


class IrregularEntryTests(MboxTestCase):
    """
    What is not a regular mbox file in the directory is listed as a folder
    that cannot be read, with the reason, never read, followed out of the
    directory or skipped silently; a link inside the directory is read.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.directory())
        self.root = os.path.join(self.base, "Mail")
        self.write(os.path.join(self.root, "Good"), mboxOf([b"good\n"]))
        self.secret = self.write(os.path.join(self.base, "secret"), mboxOf([b"secret\n"]))
        os.makedirs(os.path.join(self.base, "outsideDir"))
        self.write(os.path.join(self.base, "outsideDir", "Hidden"), mboxOf([b"hidden\n"]))

    def listing(self) -> dict[str, object]:
        """
        Per folder key, its path and its messages' bodies, or why they
        cannot be listed.
        """
        source = MboxSource(self.root)
        result: dict[str, object] = {}
        for folder in self.folders(source):
            d = source.listMessages(folder)
            got: list[object] = []
            d.addBoth(got.append)
            [outcome] = got
            if isinstance(outcome, Failure):
                outcome.trap(SourceError)
                result[folder.key] = (folder.path, str(outcome.value))
            else:
                assert isinstance(outcome, list)
                result[folder.key] = (folder.path, self.bodies(source, outcome, folder))
        return result

    def test_special(self) -> None:
        """
        A FIFO, a socket and links leading out of the directory (to a file
        or a directory), to nothing or into a loop each give a folder whose
        listing fails saying why; a link to a file inside is read; a link to
        a directory inside is not followed (its folders are listed where
        they are, once).
        """
        root = self.root
        os.mkfifo(os.path.join(root, "Fifo"))
        makeSocket(self, os.path.join(root, "Socket"))
        os.symlink(self.secret, os.path.join(root, "Outside"))
        os.symlink(os.path.join(self.base, "outsideDir"), os.path.join(root, "OutsideDir"))
        os.symlink("Loop", os.path.join(root, "Loop"))
        os.symlink("missing", os.path.join(root, "Dangling"))
        os.symlink("Good", os.path.join(root, "Alias"))
        os.makedirs(os.path.join(root, "Sub.sbd"))
        self.write(os.path.join(root, "Sub.sbd", "Child"), mboxOf([b"child\n"]))
        os.symlink("Sub.sbd", os.path.join(root, "SubAlias.sbd"))
        leaves = "symbolic link leading out of the source directory, not followed:"
        self.assertEqual(
            self.listing(),
            {
                "Alias": (("Alias",), [b"good\r\n"]),
                "Dangling": (("Dangling",), f"symbolic link to nothing: {root}/Dangling"),
                "Fifo": (("Fifo",), f"not a regular file: FIFO: {root}/Fifo"),
                "Good": (("Good",), [b"good\r\n"]),
                "Loop": (("Loop",), f"symbolic link loop: {root}/Loop"),
                "Outside": (("Outside",), f"{leaves} {root}/Outside -> {self.secret}"),
                "OutsideDir": (
                    ("OutsideDir",),
                    f"{leaves} {root}/OutsideDir -> {self.base}/outsideDir",
                ),
                "Socket": (("Socket",), f"not a regular file: socket: {root}/Socket"),
                "Sub.sbd/Child": (("Sub", "Child"), [b"child\r\n"]),
            },
        )

    def test_swappedAfterListing(self) -> None:
        """
        A file replaced by a link out of the directory, or by a FIFO, after
        the listing is not read: its messages are unreadable, with the
        reason, and reading never blocks.
        """
        source = MboxSource(self.root)
        [folder] = self.folders(source)
        messages = self.messages(source, folder)
        path = os.path.join(self.root, "Good")
        os.unlink(path)
        os.symlink(self.secret, path)
        self.assertEqual(
            self.bodies(source, messages, folder),
            [
                UnreadableMessage(
                    "symbolic link leading out of the source directory, not followed:"
                    f" {path} -> {self.secret}"
                )
            ],
        )
        os.unlink(path)
        os.mkfifo(path)
        [body] = self.bodies(source, messages, folder)
        assert isinstance(body, UnreadableMessage)
        self.assertIn(path, body.reason)

    def test_singleFileSpecial(self) -> None:
        """
        A source path that is a FIFO fails with L{SourceError} saying so,
        without blocking.
        """
        path = os.path.join(self.base, "fifo")
        os.mkfifo(path)
        failure = self.failureResultOf(MboxSource(path).listFolders(), SourceError)
        self.assertEqual(
            str(failure.value), f"not an mbox file or directory: not a regular file: FIFO: {path}"
        )


class DeepTreeTests(MboxTestCase):
    """
    Deep directory trees neither recurse nor hang: the walk is iterative.
    """

    def test_deep(self) -> None:
        """
        Folders 300 levels deep are listed (the walk keeps no stack frame
        per level).
        """
        root = self.directory()
        relative = "/".join(["A.sbd"] * 300)
        self.write(os.path.join(root, relative, "Leaf"), mboxOf([b"deep\n"]))
        [folder] = self.folders(MboxSource(root))
        self.assertEqual(folder.path, ("A",) * 300 + ("Leaf",))

    def test_pathTooLong(self) -> None:
        """
        A directory whose path the system cannot take (longer than
        C{PATH_MAX}) fails the listing with L{SourceError}, naming it.
        """
        root = self.directory()
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(25):
            os.mkdir("d" * 200, dir_fd=fd)
            deeper = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(fd)
        self.write(os.path.join(root, "Top"), mboxOf([b"top\n"]))
        failure = self.failureResultOf(MboxSource(root).listFolders(), SourceError)
        self.assertIn("File name too long", str(failure.value))
        self.assertIn(root, str(failure.value))
