# -*- test-case-name: tests.test_bench -*-
"""
The benchmark's Maildirs: generated once by
L{imapmig.testing.corpus.writeMaildir} and kept under the work directory,
subsets of them (hard links to the first N messages, for capped runs), an
empty Maildir (to measure each client's start-up), and the 50,000-message
Maildir with a 30 MB message of the memory check.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil

from attrs import frozen

from bench.clients.maildir import folders, messages
from imapmig.testing.corpus import maildirFolderName, makeMaildirFolders, writeMaildir

# Bumped when what a corpus directory holds changes, so old ones are rebuilt.
_LAYOUT = 1
_BIG_MESSAGE_SIZE = 30 * 1024 * 1024


@frozen
class BuiltCorpus:
    """
    A Maildir ready for the clients.

    @ivar path: the Maildir (INBOX; subfolders in Maildir++ form).
    @ivar messages: how many messages it holds.
    @ivar octets: their total size with CRLF line endings, as sent.
    @ivar profile: C{"realistic"}, C{"small"}, C{"empty"} or C{"memory"}.
    """

    path: str
    messages: int
    octets: int
    profile: str


def _crlfSize(path: str) -> int:
    with open(path, "rb") as f:
        body = f.read()
    return len(body) + body.count(b"\n") - body.count(b"\r\n")


def _measure(path: str) -> tuple[int, int]:
    count = octets = 0
    for _name, directory in folders(path):
        for message in messages(directory):
            count += 1
            octets += _crlfSize(message.path)
    return count, octets


def _cached(directory: str, profile: str) -> BuiltCorpus | None:
    try:
        with open(os.path.join(directory, "corpus.json")) as f:
            description = json.load(f)
    except (OSError, ValueError):
        return None
    if description.get("layout") != _LAYOUT:
        return None
    return BuiltCorpus(
        path=os.path.join(directory, "Maildir"),
        messages=int(description["messages"]),
        octets=int(description["octets"]),
        profile=profile,
    )


def _record(directory: str, profile: str) -> BuiltCorpus:
    path = os.path.join(directory, "Maildir")
    count, octets = _measure(path)
    with open(os.path.join(directory, "corpus.json"), "w") as f:
        json.dump({"layout": _LAYOUT, "messages": count, "octets": octets}, f)
    _makeReadable(directory)
    return BuiltCorpus(path=path, messages=count, octets=octets, profile=profile)


def _makeReadable(directory: str) -> None:
    """
    Let every user read the tree: mbsync and the clients run as root, but
    keep it tidy for a non-root run too.
    """
    for parent, subdirectories, files in os.walk(directory):
        os.chmod(parent, 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o644)


def buildCorpus(workDir: str, profile: str, count: int, seed: int = 1) -> BuiltCorpus:
    """
    The generated Maildir of C{count} messages of C{profile}, written on
    first use and kept.

    @param workDir: the benchmark's work directory.
    @param profile: C{"realistic"} or C{"small"}.
    @param count: how many messages.
    @param seed: the generator's seed.
    """
    directory = os.path.join(workDir, "corpus", f"{profile}-{count}-seed{seed}")
    cached = _cached(directory, profile)
    if cached is not None:
        return cached
    shutil.rmtree(directory, ignore_errors=True)
    writeMaildir(os.path.join(directory, "Maildir"), count, seed=seed, profile=profile)
    return _record(directory, profile)


def subsetCorpus(workDir: str, corpus: BuiltCorpus, count: int) -> BuiltCorpus:
    """
    The C{count} oldest messages of C{corpus} (by file name, which starts
    with the delivery time), in their folders, as hard links.

    @param workDir: the benchmark's work directory.
    @param corpus: the complete corpus.
    @param count: how many to keep; C{corpus} itself when it holds no more.
    """
    if count >= corpus.messages:
        return corpus
    directory = os.path.join(
        workDir, "corpus", os.path.basename(os.path.dirname(corpus.path)) + f"-first{count}"
    )
    cached = _cached(directory, corpus.profile)
    if cached is not None:
        return cached
    shutil.rmtree(directory, ignore_errors=True)
    target = os.path.join(directory, "Maildir")
    everything = []
    for name, source in folders(corpus.path):
        relative = os.path.relpath(source, corpus.path)
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(target, relative, sub), exist_ok=True)
        if name != "INBOX" and os.path.exists(os.path.join(source, "maildirfolder")):
            shutil.copy2(
                os.path.join(source, "maildirfolder"),
                os.path.join(target, relative, "maildirfolder"),
            )
        for message in messages(source):
            everything.append((os.path.basename(message.path), relative, message.path))
    everything.sort()
    for fileName, relative, path in everything[:count]:
        sub = os.path.basename(os.path.dirname(path))
        os.link(path, os.path.join(target, relative, sub, fileName))
    return _record(directory, corpus.profile)


def emptyCorpus(workDir: str) -> BuiltCorpus:
    """
    A Maildir with no message and no subfolder: a client's run on it is its
    start-up cost (process, imports, connection, login, logout).

    @param workDir: the benchmark's work directory.
    """
    path = os.path.join(workDir, "corpus", "empty", "Maildir")
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
    _makeReadable(os.path.dirname(path))
    return BuiltCorpus(path=path, messages=0, octets=0, profile="empty")


def memoryCorpus(workDir: str, count: int = 50_000, seed: int = 1) -> BuiltCorpus:
    """
    The memory check's Maildir: C{count} realistic messages plus one
    message of about 30 MB (a base64 attachment) in INBOX.

    @param workDir: the benchmark's work directory.
    @param count: how many generated messages besides the big one.
    @param seed: the generator's seed.
    """
    directory = os.path.join(workDir, "corpus", f"memory-{count}-seed{seed}")
    cached = _cached(directory, "memory")
    if cached is not None:
        return cached
    shutil.rmtree(directory, ignore_errors=True)
    path = os.path.join(directory, "Maildir")
    writeMaildir(path, count, seed=seed, profile="realistic")
    rng = random.Random(seed)
    attachment = base64.encodebytes(rng.randbytes(_BIG_MESSAGE_SIZE * 3 // 4 - 4096))
    head = (
        b"From: Big Sender <big@example.org>\n"
        b"To: Owner <owner@example.org>\n"
        b"Subject: a 30 MB message\n"
        b"Date: Mon, 01 Jun 2020 10:00:00 +0000\n"
        b"Message-ID: <big.30mb@example.org>\n"
        b"MIME-Version: 1.0\n"
        b'Content-Type: multipart/mixed; boundary="big"\n\n'
        b"--big\nContent-Type: text/plain\n\nThe attachment is big.\n"
        b'--big\nContent-Type: application/octet-stream; name="big.bin"\n'
        b"Content-Transfer-Encoding: base64\n\n"
    )
    timestamp = 1591005600
    bigPath = os.path.join(path, "cur", f"{timestamp}.M99999999P1.bench:2,S")
    with open(bigPath, "wb") as f:
        f.write(head + attachment + b"--big--\n")
    os.utime(bigPath, (timestamp, timestamp))
    return _record(directory, "memory")


# The folders of the spread big account (issue 31, point 4), largest first:
# their sizes fall as a power law of their rank (L{powerLawSizes}), as a real
# mailbox's do: an INBOX and an archive or two hold most of the mail, a long
# tail of folders little.
BIG_FOLDERS: tuple[tuple[str, ...], ...] = (
    ("INBOX",), ("Archive",), ("Sent",), ("Archive", "2023"), ("Archive", "2022"),
    ("Lists", "twisted"), ("Lists", "python-dev"), ("Archive", "2021"), ("Projects",),
    ("Receipts",), ("Lists", "dovecot"), ("Travel",), ("Family",), ("Drafts",),
    ("Projects", "imapmig"), ("Newsletters",), ("Archive", "2020"), ("Junk",),
    ("Work",), ("Trash",),
)  # fmt: skip


def powerLawSizes(count: int, folders: int, exponent: float = 1.0) -> list[int]:
    """
    Share C{count} messages among C{folders} folders, the one of rank M{r}
    (from 1) holding a share proportional to M{1 / r ** exponent}, each at
    least one message when there are enough; the rounding's remainder goes
    to the first.

    @return: the sizes, largest first, summing to C{count}.
    """
    weights = [1 / (rank**exponent) for rank in range(1, folders + 1)]
    total = sum(weights)
    floor = 1 if count >= folders else 0
    rest = count - floor * folders
    sizes = [floor + int(rest * w / total) for w in weights]
    sizes[0] += count - sum(sizes)
    return sizes


def bigAccountCorpus(workDir: str, count: int, layout: str) -> BuiltCorpus:
    """
    The big account's Maildir of C{count} small messages, written on first
    use and kept: C{layout} C{"spread"} over L{BIG_FOLDERS} by
    L{powerLawSizes}, or C{"one"}, every message in INBOX.  Each folder is
    written by L{writeMaildir} with a seed of its own (its messages'
    Message-IDs carry the seed, so no two folders share one).

    @param workDir: the benchmark's work directory.
    @param count: how many messages.
    @param layout: C{"spread"} or C{"one"}.
    """
    directory = os.path.join(workDir, "corpus", f"big-{layout}-{count}")
    cached = _cached(directory, "small")
    if cached is not None:
        return cached
    shutil.rmtree(directory, ignore_errors=True)
    root = os.path.join(directory, "Maildir")
    chosen = BIG_FOLDERS if layout == "spread" else BIG_FOLDERS[:1]
    for rank, (folder, size) in enumerate(zip(chosen, powerLawSizes(count, len(chosen)))):
        makeMaildirFolders(root, [folder])
        path = root if folder == ("INBOX",) else os.path.join(root, maildirFolderName(folder))
        writeMaildir(path, size, seed=101 + rank, folders=(("INBOX",),), profile="small")
    return _record(directory, "small")
