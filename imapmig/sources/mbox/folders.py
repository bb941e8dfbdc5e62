# -*- test-case-name: tests.test_sources_mbox -*-
"""
The folders of a directory of mbox files: which files are mailboxes and
what each is called (taken out of the mbox source's module, which grew too
big to read; the module's documentation states the rules).
"""

from __future__ import annotations

import os
import stat
from functools import partial

from twisted.logger import Logger

from imapmig.errors import SourceError
from imapmig.mail.message import SourceFolder
from imapmig.sources.local import (
    OpenTree,
    carriedName,
    describe,
    followEntry,
    hasUndecodable,
    inboxFirst,
    localFolder,
    notRegular,
    openTree,
    walkTree,
)
from imapmig.sources.mbox.scan import MboxFile

__all__ = ["findFolders"]

log = Logger()

# Files Thunderbird keeps beside its mailboxes, which are not mailboxes
# (lower-cased).
_THUNDERBIRD_METADATA = frozenset(
    [
        "msgfilterrules.dat",
        "popstate.dat",
        "filterlog.html",
        "junklog.html",
        "feeds.json",
        "feeditems.json",
        "virtualfolders.dat",
    ]
)

# Suffixes removed from folder names, lower-case: for files, and for the
# directories holding a folder's children.
_FILE_SUFFIXES = (".mbox", ".mbx")
_DIRECTORY_SUFFIXES = (".sbd", ".mbox", ".mbx")

# Apple Mail's export: X.mbox/mbox is folder X, with an index beside it.
_BUNDLE_FILE = "mbox"
_BUNDLE_INDEX = "table_of_contents"


# (folder path, key, file)
_Found = tuple[tuple[str, ...], str, MboxFile]

# What the entries of a directory are visited with: the directory's folder
# path, and whether it is an Apple Mail bundle (C{X.mbox/}).
_Place = tuple[tuple[str, ...], bool]


def findFolders(root: str) -> tuple[list[SourceFolder], dict[str, MboxFile]]:
    """
    Every folder of an mbox file or directory: C{INBOX} first, then the
    others sorted, parents before children.

    @param root: the source's path.
    @return: the folders, and each one's file by key.
    @raise SourceError: the path is missing or cannot be read, or is a
        directory holding no mbox file.
    """
    shown = carriedName(root)
    mode = _mode(root, shown)
    if stat.S_ISREG(mode):
        return [SourceFolder(path=("INBOX",), key="")], {"": MboxFile(None, shown)}
    if not stat.S_ISDIR(mode):
        raise SourceError(f"not an mbox file or directory: {notRegular(shown, mode)}")
    found = _walkDirectory(root, shown)
    folders = [_folderOf(path, key, file) for path, key, file in found]
    return inboxFirst(folders), {key: file for _, key, file in found}


def _mode(root: str, shown: str) -> int:
    """
    The C{st_mode} of the source's path.

    @param shown: the path, as shown to the admin.
    @raise SourceError: it is missing or cannot be read.
    """
    try:
        return os.stat(root).st_mode
    except FileNotFoundError as e:
        raise SourceError(f"no such mbox file or directory: {shown}") from e
    except OSError as e:
        raise SourceError(f"cannot read {shown}: {describe(e)}") from e


def _walkDirectory(root: str, shown: str) -> list[_Found]:
    """
    Every mbox file under the directory C{root}, as a folder, unsorted;
    and every entry that is not a regular file, as a folder that cannot be
    read.

    @param shown: the directory, as shown to the admin.
    @raise SourceError: a directory cannot be listed, or holds no mbox
        file.
    """
    tree = openTree(root, "cannot read")
    found: list[_Found] = []
    top: _Place = ((), os.path.basename(os.path.normpath(root)).lower().endswith(".mbox"))
    with tree:
        walkTree(tree, top, _descend, partial(_visit, tree, found))
    if not found:
        raise SourceError(f"no mbox files in the directory {shown}")
    return found


def _folderOf(path: tuple[str, ...], key: str, file: MboxFile) -> SourceFolder:
    """
    The folder of a file found, warning when its path is not UTF-8.
    """
    if file.relative is not None and hasUndecodable(file.relative):
        log.warn(
            "Source folder name is not valid UTF-8: carried as {folder} ({file})",
            folder="/".join(path),
            file=file.shown,
        )
    return localFolder(path, key)


def _levelName(name: str, suffixes: tuple[str, ...], top: bool) -> str:
    """
    The folder name for a file or directory name: a trailing suffix among
    C{suffixes} removed, a name that is not UTF-8 carried, and C{Inbox} at
    the top level made C{INBOX}.
    """
    name = carriedName(_withoutSuffix(name, suffixes))
    return "INBOX" if top and name.casefold() == "inbox" else name


def _withoutSuffix(name: str, suffixes: tuple[str, ...]) -> str:
    """
    C{name} without the first of C{suffixes} it ends with (in any case),
    unless that is all of it.
    """
    lower = name.lower()
    for suffix in suffixes:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _descend(name: str, place: _Place) -> _Place:
    """
    What the entries of the subdirectory C{name} are visited with: it holds
    the children of the folder it names.
    """
    parent, _ = place
    level = _levelName(name, _DIRECTORY_SUFFIXES, not parent)
    return parent + (level,), name.lower().endswith(".mbox")


def _visit(
    tree: OpenTree, found: list[_Found], entry: os.DirEntry[str], relative: str, place: _Place
) -> None:
    """
    Add the folder of one entry that is not a directory to C{found},
    unless it is no mailbox (see L{_isMetadata}), is gone, or is a symbolic
    link to a directory inside the source's (whose folders are found where
    it is).
    """
    name = entry.name
    if _isMetadata(name, place[1]):
        return
    shown = carriedName(entry.path)
    problem = None
    if not entry.is_file(follow_symlinks=False):
        try:
            irregular = followEntry(tree, relative, shown, entry)
        except FileNotFoundError:
            return
        if irregular.toDirectory:
            return
        problem = irregular.reason
    found.append(
        (_folderPath(name, place), carriedName(relative), MboxFile(relative, shown, problem))
    )


def _isMetadata(name: str, bundle: bool) -> bool:
    """
    Whether a file is one a mail client keeps beside its mailboxes, not a
    mailbox: Thunderbird's C{.msf} indexes and metadata, Apple Mail's
    bundle index.
    """
    lower = name.lower()
    return (
        lower.endswith(".msf")
        or lower in _THUNDERBIRD_METADATA
        or (bundle and name == _BUNDLE_INDEX)
    )


def _folderPath(name: str, place: _Place) -> tuple[str, ...]:
    """
    The folder path of the mbox file C{name}: in an Apple Mail bundle, its
    C{mbox} file is the bundle's folder.
    """
    parent, bundle = place
    if bundle and name == _BUNDLE_FILE:
        return parent or ("INBOX",)
    return parent + (_levelName(name, _FILE_SUFFIXES, not parent),)
