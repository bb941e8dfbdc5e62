# -*- test-case-name: tests.test_sources_eml -*-
"""
A directory tree of C{.eml} files (one message per file, as mail clients
export them), migrated into one folder, as a
L{imapmig.sources.IMessageSource}.
"""

from __future__ import annotations

import os
from typing import Sequence

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    utcFromTimestamp,
)
from imapmig.sources import IMessageSource
from imapmig.sources.maildir import displayableName, readMessageFile

__all__ = ["EmlDirectorySource"]


@implementer(IMessageSource)
class EmlDirectorySource:
    """
    Every C{.eml} file (the suffix in any case) under a directory, at any
    depth, as the messages of one folder.

    Names starting with C{.} are skipped, files and directories alike: they
    are macOS AppleDouble companions (C{._x.eml}, not messages), editor
    leftovers, C{.Trash-1000} and the like.  Symbolic links to files are
    followed, to directories not (no loops).

    Each message's key is its path relative to the directory, with C{/}
    separators; messages come sorted by it.  Flags are none, INTERNALDATE
    is the file's mtime, the size is the file's.

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
        self._messagePaths: dict[str, str] = {}

    def _checkDirectory(self) -> None:
        """
        @raise SourceError: the path is not a readable directory.
        """
        if not os.path.isdir(self.path):
            if os.path.exists(self.path):
                raise SourceError(f"not a directory of .eml files: {self.path}")
            raise SourceError(f"no such directory of .eml files: {self.path}")

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
            found = self._walk()
        except SourceError as e:
            return fail(e)
        found.sort(key=lambda item: item[0])
        self._messagePaths = {key: entry.path for key, entry in found}
        messages: list[SourceMessage] = []
        for key, entry in found:
            try:
                status = entry.stat()
            except OSError:
                # Gone since the walk; readBodies will say so.
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

    def _walk(self) -> list[tuple[str, os.DirEntry[str]]]:
        """
        Every C{.eml} file under the directory, with its key, unsorted.

        @raise SourceError: a directory cannot be listed.
        """
        found: list[tuple[str, os.DirEntry[str]]] = []
        pending: list[tuple[str, str]] = [(self.path, "")]
        while pending:
            directory, prefix = pending.pop()
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.startswith("."):
                            continue
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((entry.path, prefix + displayableName(name) + "/"))
                        elif name.lower().endswith(".eml") and entry.is_file():
                            found.append((prefix + displayableName(name), entry))
            except OSError as e:
                raise SourceError(
                    f"cannot list {displayableName(directory)}: {e.strerror or e}"
                ) from e
        return found

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, with CRLF line endings; a
        file that is gone or cannot be read is an L{UnreadableMessage}.
        """
        bodies: list[MessageBody] = []
        for message in messages:
            path = self._messagePaths.get(message.key)
            if path is None:
                parts = message.key.split("/")
                if any(part in ("", ".", "..") for part in parts):
                    bodies.append(UnreadableMessage(f"not a message of {self.path}: {message.key}"))
                    continue
                path = os.path.join(self.path, *parts)
            body = readMessageFile(path)
            if body is None:
                body = UnreadableMessage(f"file vanished: {displayableName(path)}")
            bodies.append(body)
        return succeed(bodies)
