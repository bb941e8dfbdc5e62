# -*- test-case-name: tests.test_sources_eml -*-
"""
A directory tree of C{.eml} files (one message per file, as mail clients
export them), migrated into one folder, as a
L{imapmig.sources.IMessageSource}.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Sequence

from attrs import frozen
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    utcFromTimestamp,
)
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    LeavesTree,
    OpenTree,
    carriedName,
    fileKind,
    linkProblem,
    notRegular,
    originalName,
    readOpenFile,
)

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
        try:
            self._checkDirectory()
        except SourceError as e:
            return fail(e)
        folders: list[SourceFolder] = [self.folder]
        return succeed(folders)

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The C{.eml} files, sorted by relative path.

        @return: a Deferred that fails with L{SourceError} when the path, or
            any directory under it, cannot be listed (rather than silently
            leaving its messages behind).
        """
        try:
            self._checkDirectory()
            try:
                tree = OpenTree(self.path)
            except OSError as e:
                raise SourceError(f"cannot list {carriedName(self.path)}: {e.strerror or e}")
            with tree:
                found = self._walk(tree)
        except SourceError as e:
            return fail(e)
        found.sort(key=lambda item: item[0])
        self._entries = dict(found)
        messages: list[SourceMessage] = []
        for key, entry in found:
            status = entry.status
            if status is None:
                # Gone since the walk, or not read at all: readBodies
                # will say why.
                messages.append(SourceMessage(key=key, flags=(), internalDate=None, size=0))
                continue
            messages.append(
                SourceMessage(
                    key=key,
                    flags=(),
                    internalDate=utcFromTimestamp(status.st_mtime),
                    size=status.st_size,
                )
            )
        return succeed(messages)

    def _walk(self, tree: OpenTree) -> list[tuple[str, _EmlEntry]]:
        """
        Every C{.eml} file under the directory, with its key, unsorted.

        @raise SourceError: a directory cannot be listed.
        """
        found: list[tuple[str, _EmlEntry]] = []
        pending: list[str] = [""]
        while pending:
            relative = pending.pop()
            directory = tree.path(relative)
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.startswith("."):
                            continue
                        entryRelative = os.path.join(relative, name)
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entryRelative)
                            continue
                        isMessage = name.lower().endswith(".eml")
                        if isMessage and entry.is_file(follow_symlinks=False):
                            found.append(
                                (carriedName(entryRelative), _entryOf(entry, entryRelative))
                            )
                            continue
                        irregular = _irregular(tree, entry, entryRelative, isMessage)
                        if irregular is not None:
                            found.append((carriedName(entryRelative), irregular))
            except OSError as e:
                raise SourceError(
                    f"cannot list {carriedName(directory)}: {e.strerror or e}"
                ) from e
        return found

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, with CRLF line endings; a
        file that is gone or cannot be read, or was listed as something
        else than a regular file, is an L{UnreadableMessage}.
        """
        bodies: list[MessageBody] = []
        if not messages:
            return succeed(bodies)
        shownRoot = carriedName(self.path)
        try:
            tree = OpenTree(self.path)
        except OSError as e:
            reason = f"cannot read {shownRoot}: {e.strerror or e}"
            return succeed([UnreadableMessage(reason) for _ in messages])
        with tree:
            for message in messages:
                entry = self._entries.get(message.key)
                if entry is None:
                    relative = originalName(message.key)
                    parts = relative.split("/")
                    if any(part in ("", ".", "..") for part in parts):
                        bodies.append(
                            UnreadableMessage(f"not a message of {shownRoot}: {message.key}")
                        )
                        continue
                    entry = _EmlEntry(relative)
                if entry.problem is not None:
                    bodies.append(UnreadableMessage(entry.problem))
                    continue
                bodies.append(_read(tree, shownRoot, entry.relative, message.size))
        return succeed(bodies)


def _entryOf(entry: os.DirEntry[str], relative: str) -> _EmlEntry:
    """
    A regular file found by the walk, with its status if it can be had.
    """
    try:
        return _EmlEntry(relative, status=entry.stat(follow_symlinks=False))
    except OSError:
        return _EmlEntry(relative)


def _irregular(
    tree: OpenTree, entry: os.DirEntry[str], relative: str, isMessage: bool
) -> _EmlEntry | None:
    """
    What an entry that is not a regular C{.eml} file is.

    @param isMessage: whether its name is that of a message.
    @return: the message it stands for (read through a symbolic link, or
        not read, with the reason), or L{None} when it is no message (a
        file of another name; a link to a directory inside the directory,
        whose files are listed where they are; an entry gone meanwhile).
    """
    shown = carriedName(entry.path)
    try:
        if not entry.is_symlink():
            if not isMessage:
                return None
            return _EmlEntry(relative, notRegular(shown, entry.stat(follow_symlinks=False).st_mode))
    except FileNotFoundError:
        return None
    except OSError as e:
        return _EmlEntry(relative, f"cannot read {shown}: {e.strerror or e}") if isMessage else None
    try:
        target = tree.resolve(relative)
        status = os.stat(os.path.join(tree.realRoot, target))
    except LeavesTree as e:
        # Out of the directory: a message, or a directory that may hold
        # some, is not read; anything else is no message.
        if isMessage or os.path.isdir(e.target):
            return _EmlEntry(relative, linkProblem(shown, e))
        return None
    except OSError as e:
        return _EmlEntry(relative, linkProblem(shown, e)) if isMessage else None
    if stat.S_ISDIR(status.st_mode) or not isMessage:
        return None
    if not stat.S_ISREG(status.st_mode):
        return _EmlEntry(
            relative, f"not a regular file: symbolic link to a {fileKind(status.st_mode)}: {shown}"
        )
    return _EmlEntry(relative, status=status)


def _read(tree: OpenTree, shownRoot: str, relative: str, size: int) -> MessageBody:
    """
    Read one message file beneath the directory.
    """
    try:
        fd = tree.open(relative)
    except FileNotFoundError:
        return UnreadableMessage(f"file vanished: {os.path.join(shownRoot, carriedName(relative))}")
    except LeavesTree as e:
        return UnreadableMessage(linkProblem(os.path.join(shownRoot, carriedName(relative)), e))
    except OSError as e:
        shown = os.path.join(shownRoot, carriedName(relative))
        if isinstance(e, PermissionError):
            return UnreadableMessage(f"permission denied: {shown}")
        if e.errno == errno.ELOOP:
            return UnreadableMessage(linkProblem(shown, e))
        return UnreadableMessage(f"cannot read {shown}: {e.strerror or e}")
    return readOpenFile(fd, shownRoot, relative, size)
