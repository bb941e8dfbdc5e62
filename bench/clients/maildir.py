# -*- test-case-name: tests.test_bench -*-
"""
A Maildir++ tree listed the way a script written by hand would list it, for
the benchmark's Python clients: INBOX is the root, each C{.Name} directory a
folder, every file in C{cur} and C{new} a message, its flags from the
C{:2,} info and its delivery time from its mtime.
"""

from __future__ import annotations

import os
from typing import Iterator

from attrs import frozen

_FLAG_LETTERS = (
    ("D", "\\Draft"),
    ("F", "\\Flagged"),
    ("R", "\\Answered"),
    ("S", "\\Seen"),
    ("T", "\\Deleted"),
)


@frozen
class MaildirFile:
    """
    One message file.

    @ivar path: where it is.
    @ivar flags: its IMAP system flags.
    @ivar mtime: its delivery time (the file's mtime), in seconds.
    """

    path: str
    flags: tuple[str, ...]
    mtime: float


def folders(root: str) -> list[tuple[str, str]]:
    """
    The folders of a Maildir++ tree.

    @param root: the Maildir (INBOX).
    @return: C{(imapName, directory)} pairs, INBOX first, then the
        subfolders sorted; C{imapName} is the directory name without its
        leading dot (already modified UTF-7, with C{.} as separator).
    """
    result = [("INBOX", root)]
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(".") and name not in (".", "..") and os.path.isdir(path):
            result.append((name[1:], path))
    return result


def messages(directory: str) -> Iterator[MaildirFile]:
    """
    The message files of one folder, C{cur} then C{new}, sorted by name.

    @param directory: the folder's directory.
    """
    for sub in ("cur", "new"):
        subdirectory = os.path.join(directory, sub)
        try:
            names = sorted(os.listdir(subdirectory))
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith("."):
                continue
            path = os.path.join(subdirectory, name)
            _, _, info = name.partition(":2,")
            flags = tuple(flag for letter, flag in _FLAG_LETTERS if letter in info)
            yield MaildirFile(path=path, flags=flags, mtime=os.stat(path).st_mtime)
