# -*- test-case-name: tests.test_sources_maildir -*-
"""
Which directories of a Maildir are folders, and what they are called
(taken out of the Maildir source's module, which grew too big to read).
"""

from __future__ import annotations

import os
import stat

import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)

from imapmig.sources.local import carriedName
from imapmig.sources.maildir.opened import SUBDIRS

__all__ = ["decodeComponent", "isFolderDirectory", "isMaildirFolder"]

def isMaildirFolder(directory: str) -> bool | None:
    """
    Whether C{directory} holds a Maildir folder (a C{cur} or C{new} in it).

    @return: L{None} when that cannot be told (no permission to look, a
        symbolic link loop): listing its messages will say why.
    """
    unknown = False
    for subdir in SUBDIRS:
        try:
            if stat.S_ISDIR(os.stat(os.path.join(directory, subdir)).st_mode):
                return True
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            unknown = True
    if not unknown and os.path.islink(directory) and not os.path.exists(directory):
        # A link to nothing (an unmounted shared folder?): it may have been
        # a folder, and its listing says why it cannot be read.
        return None
    return None if unknown else False


def decodeComponent(raw: str) -> str:
    """
    Decode one level of a Maildir++ folder name from modified UTF-7; a name
    that is not valid modified UTF-7 keeps its raw form (carried, if it is
    not UTF-8).
    """
    try:
        return raw.encode("ascii").decode("imap4-utf-7")
    except UnicodeError:
        return carriedName(raw)


def isFolderDirectory(entry: os.DirEntry[str]) -> bool:
    """
    Whether an entry of the Maildir may be a Maildir++ folder: a directory
    (or a link to one) named C{.X}; an entry that cannot be told (a
    symbolic link loop, a link to nothing) may be, and listing it says why
    it cannot be read.
    """
    name = entry.name
    if not name.startswith(".") or name in (".", ".."):
        return False
    try:
        return entry.is_dir() or (entry.is_symlink() and not os.path.exists(entry.path))
    except OSError:
        return True
