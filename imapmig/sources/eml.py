# -*- test-case-name: tests.test_sources_eml -*-
"""
A directory tree of C{.eml} files (one message per file, as mail clients
export them), migrated into one folder, as a
L{imapmig.sources.IMessageSource}.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Sequence

from attrs import frozen
from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from imapmig.errors import LeavesTree, SourceError
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    utcFromTimestamp,
)
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    OpenTree,
    carriedName,
    followEntry,
    linkProblem,
    openProblem,
    openTree,
    originalName,
    settled,
    unreadableAll,
    walkTree,
)
from imapmig.mail.octets import UNKNOWN
from imapmig.sources.messagefile import readOpenFileNoting

__all__ = ["EmlDirectorySource"]


@frozen
class _EmlEntry:
    """
    One message file found under the directory.

    @ivar relative: its path relative to the directory, as the system
        takes it.
    @ivar problem: why it is not read (not a regular file, a symbolic link
        leading out of the directory...), if so.
    @ivar status: its status (its target's, for a symbolic link), if known.
    """

    relative: str
    problem: str | None = None
    status: os.stat_result | None = None

    def message(self, key: str) -> SourceMessage:
        """
        The message of this file: no flags, its mtime and size (none when
        its status is not known: it was gone since the walk, or is not
        read at all, and reading it will say why).
        """
        if self.status is None:
            return SourceMessage(key=key, flags=(), internalDate=None, size=0)
        when = utcFromTimestamp(self.status.st_mtime)
        return SourceMessage(key=key, flags=(), internalDate=when, size=self.status.st_size)


@implementer(IMessageSource)
class EmlDirectorySource:
    """
    Every C{.eml} file (the suffix in any case) under a directory, at any
    depth, as the messages of one folder.

    Names starting with C{.} are skipped, files and directories alike: they
    are macOS AppleDouble companions (C{._x.eml}, not messages), editor
    leftovers, C{.Trash-1000} and the like.  Symbolic links to files inside
    the directory are followed; to directories inside it not (their files
    are listed where they are, once).

    Nothing else is skipped silently: a C{.eml} entry that is not a regular
    file or a directory (a FIFO, a socket, a device), a
    symbolic link leading out of the directory (a C{.eml} file, or a
    directory of any name), to nothing or into a loop (a C{.eml} name), is
    listed as a message whose reading gives an L{UnreadableMessage} saying
    why.  Files are opened beneath the directory as
    L{imapmig.sources.local} describes.

    Each message's key is its path relative to the directory, with C{/}
    separators (a name that is not UTF-8 is carried in the reversible form
    of L{imapmig.sources.local.carriedName}); messages come sorted by it.
    Flags are none, INTERNALDATE is the file's mtime, the size is the
    file's.

    @ivar path: the directory.
    @ivar folder: the one folder, with key C{""}.
    """

    def __init__(self, path: str, folder: tuple[str, ...]) -> None:
        """
        @param path: the directory.
        @param folder: the folder's hierarchy, one component per level.
        """
        self.path = path
        self.folder = SourceFolder(path=tuple(folder), key="")
        self._entries: dict[str, _EmlEntry] = {}

    def _checkDirectory(self) -> None:
        """
        @raise SourceError: the path is not a readable directory.
        """
        if not os.path.isdir(self.path):
            if os.path.exists(self.path):
                raise SourceError(f"not a directory of .eml files: {carriedName(self.path)}")
            raise SourceError(f"no such directory of .eml files: {carriedName(self.path)}")

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        The one folder.

        @return: a Deferred that fails with L{SourceError} when the path is
            not a directory.
        """
        return settled(self._folders)

    def _folders(self) -> Sequence[SourceFolder]:
        """
        The one folder, if the path is a directory (L{listFolders}).
        """
        self._checkDirectory()
        return [self.folder]

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The C{.eml} files, sorted by relative path.

        @return: a Deferred that fails with L{SourceError} when the path, or
            any directory under it, cannot be listed (rather than silently
            leaving its messages behind).
        """
        return settled(self._listMessages)

    def _listMessages(self) -> Sequence[SourceMessage]:
        """
        The C{.eml} files (L{listMessages}), remembering where each is.
        """
        self._checkDirectory()
        found = _walk(self.path)
        found.sort(key=lambda item: item[0])
        self._entries = dict(found)
        return [entry.message(key) for key, entry in found]

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, with CRLF line endings
        (a L{ReadBodies}, with the facts of their octets); a file that is
        gone or cannot be read, or was listed as something else than a
        regular file, is an L{UnreadableMessage}.
        """
        if not messages:
            return succeed([])
        try:
            tree = openTree(self.path, "cannot read")
        except SourceError as e:
            return succeed(unreadableAll(str(e), messages))
        shownRoot = carriedName(self.path)
        bodies = ReadBodies()
        with tree:
            for message in messages:
                bodies.add(*self._body(tree, shownRoot, message))
        return succeed(bodies)

    def _body(
        self, tree: OpenTree, shownRoot: str, message: SourceMessage
    ) -> tuple[MessageBody, int]:
        """
        Read the file of one message (listed, or named by its key after a
        restart), with the facts of its octets.
        """
        entry = self._entries.get(message.key) or _unlisted(message.key)
        if entry is None:
            return UnreadableMessage(f"not a message of {shownRoot}: {message.key}"), UNKNOWN
        if entry.problem is not None:
            return UnreadableMessage(entry.problem), UNKNOWN
        return _read(tree, shownRoot, entry.relative, message.size)


def _read(tree: OpenTree, shownRoot: str, relative: str, size: int) -> tuple[MessageBody, int]:
    """
    Read one message file beneath the directory, with the facts of its
    octets.
    """
    try:
        fd = tree.open(relative)
    except (LeavesTree, OSError) as e:
        shown = os.path.join(shownRoot, carriedName(relative))
        return UnreadableMessage(openProblem(shown, e)), UNKNOWN
    return readOpenFileNoting(fd, shownRoot, relative, size)


def _unlisted(key: str) -> _EmlEntry | None:
    """
    The file a key names, when it was not listed by this instance; L{None}
    when the key cannot name a file beneath the directory.
    """
    relative = originalName(key)
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return None
    return _EmlEntry(relative)


def _walk(root: str) -> list[tuple[str, _EmlEntry]]:
    """
    Every C{.eml} file under the directory, with its key, unsorted.

    @raise SourceError: a directory cannot be listed.
    """
    tree = openTree(root, "cannot list")
    found: list[tuple[str, _EmlEntry]] = []
    with tree:
        walkTree(tree, None, lambda name, state: state, partial(_visit, tree, found))
    return found


def _visit(
    tree: OpenTree,
    found: list[tuple[str, _EmlEntry]],
    entry: os.DirEntry[str],
    relative: str,
    _: None,
) -> None:
    """
    Add the message an entry that is not a directory stands for, if any,
    to C{found}.
    """
    eml = _messageOf(tree, entry, relative)
    if eml is not None:
        found.append((carriedName(relative), eml))


def _messageOf(tree: OpenTree, entry: os.DirEntry[str], relative: str) -> _EmlEntry | None:
    """
    The message an entry that is not a directory stands for, if any: a
    C{.eml} file, read or not; or a symbolic link of another name leading
    out of the directory to a directory.
    """
    if not entry.name.lower().endswith(".eml"):
        return _outwardDirectory(tree, entry, relative)
    if entry.is_file(follow_symlinks=False):
        return _entryOf(entry, relative)
    return _irregular(tree, entry, relative)


def _entryOf(entry: os.DirEntry[str], relative: str) -> _EmlEntry:
    """
    A regular file found by the walk, with its status if it can be had.
    """
    try:
        return _EmlEntry(relative, status=entry.stat(follow_symlinks=False))
    except OSError:
        return _EmlEntry(relative)


def _irregular(tree: OpenTree, entry: os.DirEntry[str], relative: str) -> _EmlEntry | None:
    """
    The message a C{.eml} entry that is not a regular file stands for (see
    L{followEntry}): read through a symbolic link, or not read, with the
    reason; L{None} when it is gone, or a symbolic link to a directory
    inside the directory (whose files are listed where they are).
    """
    try:
        found = followEntry(tree, relative, carriedName(entry.path), entry)
    except FileNotFoundError:
        return None
    return None if found.toDirectory else _EmlEntry(relative, found.reason, found.status)


def _outwardDirectory(tree: OpenTree, entry: os.DirEntry[str], relative: str) -> _EmlEntry | None:
    """
    The message an entry of another name stands for: none, but for a
    symbolic link leading out of the directory to a directory (which may
    hold messages), which is not read.
    """
    try:
        if entry.is_symlink():
            tree.resolve(relative)
    except LeavesTree as e:
        if os.path.isdir(e.target):
            return _EmlEntry(relative, linkProblem(carriedName(entry.path), e))
    except OSError:
        pass
    return None
