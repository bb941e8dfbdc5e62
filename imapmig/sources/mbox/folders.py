# -*- test-case-name: tests.test_sources_mbox -*-
"""
The folders of a directory of mbox files: which files are mailboxes and
what each is called (taken out of the mbox source's module, which grew too
big to read; the module's documentation states the rules).
"""

from __future__ import annotations

import os
import stat

from imapmig.errors import SourceError
from imapmig.sources.local import LeavesTree, OpenTree, carriedName, fileKind, linkProblem, notRegular
from imapmig.sources.mbox.scan import MboxFile

__all__ = ["walk"]

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


def _levelName(name: str, suffixes: tuple[str, ...], top: bool) -> str:
    """
    The folder name for a file or directory name: a trailing suffix among
    C{suffixes} removed, a name that is not UTF-8 carried, and C{Inbox} at
    the top level made C{INBOX}.
    """
    lower = name.lower()
    for suffix in suffixes:
        if lower.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    name = carriedName(name)
    if top and name.casefold() == "inbox":
        return "INBOX"
    return name


# (folder path, key, file)
_Found = tuple[tuple[str, ...], str, MboxFile]


def _problemOf(tree: OpenTree, relative: str, shown: str, entry: os.DirEntry[str]) -> str | None:
    """
    Why an entry that is not a regular file is not read as an mbox file.

    @return: the reason; L{None} for a symbolic link to a regular file
        inside the directory (read through the link).
    @raise FileNotFoundError: it is gone.
    @raise IsADirectoryError: it is a symbolic link to a directory inside
        the directory (whose folders are listed where it is).
    """
    try:
        isLink = entry.is_symlink()
        if not isLink:
            return notRegular(shown, entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        raise
    except OSError as e:
        return f"cannot read {shown}: {e.strerror or e}"
    try:
        target = tree.resolve(relative)
        mode = os.stat(os.path.join(tree.realRoot, target)).st_mode
    except (LeavesTree, OSError) as e:
        return linkProblem(shown, e)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(relative)
    if not stat.S_ISREG(mode):
        return f"not a regular file: symbolic link to a {fileKind(mode)}: {shown}"
    return None


def walk(tree: OpenTree) -> list[_Found]:
    """
    Every mbox file under the source's directory, as a folder, unsorted;
    and every entry that is not a regular file, as a folder that cannot be
    read.

    @raise SourceError: a directory cannot be listed.
    """
    found: list[_Found] = []
    rootIsBundle = os.path.basename(os.path.normpath(tree.root)).lower().endswith(".mbox")
    pending: list[tuple[str, tuple[str, ...], str, bool]] = [("", (), "", rootIsBundle)]
    while pending:
        relative, parent, prefix, bundle = pending.pop()
        directory = tree.path(relative)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith("."):
                        continue
                    key = prefix + carriedName(name)
                    lower = name.lower()
                    entryRelative = os.path.join(relative, name)
                    if entry.is_dir(follow_symlinks=False):
                        level = _levelName(name, _DIRECTORY_SUFFIXES, not parent)
                        pending.append(
                            (entryRelative, parent + (level,), key + "/", lower.endswith(".mbox"))
                        )
                        continue
                    if (
                        lower.endswith(".msf")
                        or lower in _THUNDERBIRD_METADATA
                        or (bundle and name == _BUNDLE_INDEX)
                    ):
                        continue
                    shown = carriedName(entry.path)
                    problem = None
                    if not entry.is_file(follow_symlinks=False):
                        try:
                            problem = _problemOf(tree, entryRelative, shown, entry)
                        except (FileNotFoundError, IsADirectoryError):
                            continue
                    file = MboxFile(entryRelative, shown, problem)
                    if bundle and name == _BUNDLE_FILE:
                        found.append((parent or ("INBOX",), key, file))
                    else:
                        level = _levelName(name, _FILE_SUFFIXES, not parent)
                        found.append((parent + (level,), key, file))
        except OSError as e:
            raise SourceError(f"cannot list {carriedName(directory)}: {e.strerror or e}") from e
    return found
