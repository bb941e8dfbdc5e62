# -*- test-case-name: tests.test_sources_maildir -*-
"""
Which directories of a Maildir are folders, and what they are called
(taken out of the Maildir source's module, which grew too big to read).
"""

from __future__ import annotations

import os
import stat

import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)
from twisted.logger import Logger

from imapmig.errors import SourceError
from imapmig.mail.message import SourceFolder
from imapmig.sources.local import (
    carriedName,
    describe,
    hasUndecodable,
    inboxFirst,
    linksToNothing,
    localFolder,
)
from imapmig.sources.maildir.opened import SUBDIRS

__all__ = ["findFolders", "isFolderName", "isMaildirFolder"]

log = Logger()


def findFolders(root: str) -> tuple[list[SourceFolder], dict[str, str]]:
    """
    Every folder of a Maildir: C{INBOX} first, then the others sorted,
    parents before children (see L{imapmig.sources.maildir.MaildirSource}).

    @param root: the Maildir.
    @return: the folders, and each one's directory (relative to the
        Maildir) by key.
    @raise SourceError: the path does not exist, cannot be read or holds
        no Maildir folder at all.
    """
    names = _folderDirectories(root)
    folders: list[SourceFolder] = []
    directories: dict[str, str] = {}
    if isMaildirFolder(root) is not False:
        folders.append(SourceFolder(path=("INBOX",), key=""))
        directories[""] = ""
    for name in names:
        if isMaildirFolder(os.path.join(root, name)) is not False:
            folder = _subfolder(root, name)
            folders.append(folder)
            directories[folder.key] = name
    if not folders:
        raise SourceError(
            f"not a Maildir: {carriedName(root)} has no cur/ or new/ and no Maildir++ folder"
        )
    return inboxFirst(folders), directories


# What is said of a Maildir that cannot be read, by what reading it raised.
_UNREADABLE = {
    FileNotFoundError: "no such Maildir: {root}",
    NotADirectoryError: "not a Maildir: {root} is not a directory",
}


def _folderDirectories(root: str) -> list[str]:
    """
    The names of the entries of the Maildir that may be Maildir++ folders,
    sorted.

    @raise SourceError: the Maildir does not exist or cannot be read.
    """
    try:
        with os.scandir(root) as entries:
            return sorted(e.name for e in entries if isFolderDirectory(e))
    except OSError as e:
        problem = _UNREADABLE.get(type(e), "cannot read the Maildir {root}: {why}")
        raise SourceError(problem.format(root=carriedName(root), why=describe(e))) from None


def _subfolder(root: str, name: str) -> SourceFolder:
    """
    The folder of the Maildir++ directory C{name}: each level of its name
    decoded, keyed by the directory's name (carried, with a warning, when
    it is not UTF-8).
    """
    path = tuple(decodeComponent(level) for level in name[1:].split("."))
    key = carriedName(name)
    if hasUndecodable(name):
        log.warn(
            "Source folder name is not valid UTF-8: carried as {folder} ({directory})",
            folder=key,
            directory=carriedName(os.path.join(root, name)),
        )
    return localFolder(path, key)


def isMaildirFolder(directory: str) -> bool | None:
    """
    Whether C{directory} holds a Maildir folder (a C{cur} or C{new} in it).

    @return: L{None} when that cannot be told (no permission to look, a
        symbolic link loop): listing its messages will say why.
    """
    found = [_isDirectory(os.path.join(directory, subdir)) for subdir in SUBDIRS]
    if True in found:
        return True
    # A link to nothing (an unmounted shared folder?) may have been a
    # folder, and its listing says why it cannot be read.
    if None in found or linksToNothing(directory):
        return None
    return False


def _isDirectory(path: str) -> bool | None:
    """
    Whether C{path} is a directory (following symbolic links); L{None}
    when that cannot be told.
    """
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return None


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


def isFolderName(name: str) -> bool:
    """
    Whether C{name} may name a Maildir++ folder's directory: C{.X}.
    """
    return name.startswith(".") and name not in (".", "..")


def isFolderDirectory(entry: os.DirEntry[str]) -> bool:
    """
    Whether an entry of the Maildir may be a Maildir++ folder: a directory
    (or a link to one) named C{.X}; an entry that cannot be told (a
    symbolic link loop, a link to nothing) may be, and listing it says why
    it cannot be read.
    """
    if not isFolderName(entry.name):
        return False
    try:
        return entry.is_dir() or linksToNothing(entry.path)
    except OSError:
        return True
