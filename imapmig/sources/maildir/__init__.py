# -*- test-case-name: tests.test_sources_maildir -*-
"""
A Maildir with Maildir++ subfolders, as Dovecot, Courier, mbsync and most
MDAs write it, as a L{imapmig.sources.IMessageSource}.

Listing reads no message: everything a L{SourceMessage} carries comes from
the file name (unique name, C{,S=} size, flags after C{2,}, the leading
delivery timestamp), with one C{stat} only for what the name lacks.  Bodies
are read whole, one C{read} per file, just before they are sent (very large
files are sent from the open file, a slice at a time).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage, UnreadableMessage, listedMessage
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    LARGE_MESSAGE,
    carriedName,
    hasUndecodable,
    originalName,
    readListedFile,
    readMessageFile,
)
from imapmig.sources.maildir.folders import decodeComponent, isFolderDirectory, isMaildirFolder
from imapmig.sources.maildir.names import LATEST_DIGITS, flagsOf, leadingTimestamp, readKeywords, sizeField
from imapmig.sources.maildir.opened import Irregular, OpenFolder
from imapmig.sources.maildir.scan import FolderFiles, Scanned, scanFolder

__all__ = ["MaildirSource", "SPECIAL_USE"]

log = Logger()


# Well-known top-level folder names and their RFC 6154 attributes, matched
# case-insensitively (the mbox source uses them too).
SPECIAL_USE = {
    "sent": "\\Sent",
    "sent messages": "\\Sent",
    "sent items": "\\Sent",
    "drafts": "\\Drafts",
    "trash": "\\Trash",
    "deleted messages": "\\Trash",
    "deleted items": "\\Trash",
    "junk": "\\Junk",
    "spam": "\\Junk",
    "archive": "\\Archive",
}

# Where listMessages sorts a message with no date: before any date.
_UNDATED = float("-inf")


@implementer(IMessageSource)
class MaildirSource:
    """
    Messages from a Maildir and its Maildir++ subfolders.

    Folders: the Maildir itself is C{INBOX} (when it has C{cur/} or
    C{new/}); each subdirectory C{.A.B} with C{cur/} or C{new/} is the
    folder C{("A", "B")}, keyed by its directory name.  Each level of the
    name is decoded from modified UTF-7 (as Dovecot and Courier write
    C{&APw-}); a level that does not decode keeps its raw form (a name
    that is not UTF-8 is carried in the reversible form of
    L{imapmig.sources.local.carriedName}, and a warning names it).
    Dovecot's C{.INBOX.x} is
    C{("INBOX", "x")}.  Missing parents (C{.A.B} without C{.A}) are not
    invented; the destination side creates them.  Top-level folders with a
    well-known name (C{Sent}, C{Sent Items}, C{Drafts}, C{Trash}, C{Junk},
    C{Archive}, ...) carry their RFC 6154 attribute, for information.

    Messages: the files of C{cur/} and C{new/}, keyed by their unique name
    (before C{:2,}), which survives flag changes.  Flags come from the
    letters after C{2,} (C{S R F D T}; C{P} has no IMAP counterpart), and
    Dovecot's keyword letters (C{a}-C{z}) are the keywords its
    C{dovecot-keywords} file names (a letter it does not name is dropped).  Files in
    C{new/} usually have no info part, hence no flags (not even
    C{\\Seen}); but Dovecot renames a file within C{new/} to
    C{name:2,FS} when its flags change before a client moves it to
    C{cur/}, so an info part counts wherever it is.
    INTERNALDATE is the delivery time the name starts with (seconds since
    1970-01-01 UTC, at any date up to the year 9999; L{leadingTimestamp}),
    else the file's mtime (whatever its date, before 1970 included); the
    size is the name's C{,S=} field, else the file's.
    Oldest first.

    What is not a message is recorded, never skipped silently: an entry of
    C{cur/} or C{new/} that is not a regular file (a FIFO, a socket, a
    device, a directory), a symbolic link leading out of the Maildir, to
    nothing, or into a loop, is listed (with the flags and date its name
    gives) and reading it gives an L{UnreadableMessage} saying why; a link
    to a regular file inside the Maildir is read.  A folder that cannot be
    listed (no permission, C{cur/} not a directory, a folder or its
    C{cur/} linked out of the Maildir) fails L{listMessages} with
    L{SourceError} naming it.  Names starting with C{.} are not messages
    (the Maildir specification) and are skipped.

    Files are opened beneath the Maildir as L{imapmig.sources.local}
    describes, on the calling thread, with blocking system calls.

    @ivar path: the Maildir's directory.
    """

    def __init__(self, path: str) -> None:
        """
        @param path: the Maildir's directory.
        """
        self.path = path
        self._folderDirectories: dict[str, str] = {}
        self._messageFiles: dict[str, FolderFiles] = {}

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder: C{INBOX} first, then the others sorted, parents before
        children.

        @return: a Deferred that fails with L{SourceError} when the path does
            not exist, cannot be read or holds no Maildir folder at all.
        """
        root = self.path
        try:
            with os.scandir(root) as entries:
                names = sorted(e.name for e in entries if isFolderDirectory(e))
        except FileNotFoundError:
            return fail(SourceError(f"no such Maildir: {carriedName(root)}"))
        except NotADirectoryError:
            return fail(SourceError(f"not a Maildir: {carriedName(root)} is not a directory"))
        except OSError as e:
            why = e.strerror or e
            return fail(SourceError(f"cannot read the Maildir {carriedName(root)}: {why}"))
        folders: list[SourceFolder] = []
        directories: dict[str, str] = {}
        if isMaildirFolder(root) is not False:
            folders.append(SourceFolder(path=("INBOX",), key=""))
            directories[""] = ""
        for name in names:
            if isMaildirFolder(os.path.join(root, name)) is False:
                continue
            path = tuple(decodeComponent(level) for level in name[1:].split("."))
            specialUse = SPECIAL_USE.get(path[0].casefold()) if len(path) == 1 else None
            key = carriedName(name)
            if hasUndecodable(name):
                log.warn(
                    "Source folder name is not valid UTF-8: carried as {folder} ({directory})",
                    folder=key,
                    directory=carriedName(os.path.join(root, name)),
                )
            folders.append(SourceFolder(path=path, key=key, specialUse=specialUse))
            directories[key] = name
        if not folders:
            return fail(
                SourceError(
                    f"not a Maildir: {carriedName(root)} has no cur/ or new/"
                    " and no Maildir++ folder"
                )
            )
        folders.sort(key=lambda f: (f.path[0] != "INBOX", f.path, f.key))
        self._folderDirectories = directories
        return succeed(folders)

    def _relativeOf(self, folder: SourceFolder) -> str:
        """
        The directory of C{folder}, relative to the Maildir.

        @raise SourceError: the key cannot be a folder of this Maildir.
        """
        directory = self._folderDirectories.get(folder.key)
        if directory is not None:
            return directory
        if folder.key == "":
            return ""
        name = originalName(folder.key)
        if not name.startswith(".") or name in (".", "..") or "/" in name:
            raise SourceError(
                f"not a Maildir++ folder name: {folder.key!r} in {carriedName(self.path)}"
            )
        return name

    def _open(self, folder: SourceFolder) -> tuple[OpenFolder, list[Scanned]]:
        """
        Open and scan C{folder}, and remember where each message's file is.

        @return: the folder, open (the caller closes it), and the scan.
        @raise SourceError: the folder is gone or cannot be listed.
        """
        opened = OpenFolder(self.path, self._relativeOf(folder))
        try:
            if not opened.found:
                directory = os.path.join(self.path, opened.relative)
                if os.path.islink(directory) and not os.path.exists(directory):
                    raise SourceError(
                        f"cannot list the Maildir folder {opened.shown}: symbolic link to nothing"
                    )
                raise SourceError(f"no such Maildir folder: {opened.shown} (no cur/ or new/)")
            try:
                scanned = scanFolder(opened)
            except OSError as e:
                raise SourceError(
                    f"cannot list the Maildir folder {opened.shown}: {e.strerror or e}"
                ) from e
        except BaseException:
            opened.close()
            raise
        self._messageFiles[folder.key] = FolderFiles(opened.relative, scanned)
        return opened, scanned

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, oldest first (by INTERNALDATE, then key).

        @return: a Deferred that fails with L{SourceError} when the folder's
            directory is gone or cannot be listed.
        """
        try:
            opened, scanned = self._open(folder)
        except SourceError as e:
            return fail(e)
        flagsByLetters: dict[str, tuple[str, ...]] = {}
        rows: list[tuple[float, str, tuple[str, ...], int | None, float | None]] = []
        with opened:
            keywords = readKeywords(opened.tree, opened.relative)
            for key, unique, index, name, letters, irregular in scanned:
                if not letters:
                    flags: tuple[str, ...] = ()
                else:
                    cached = flagsByLetters.get(letters)
                    if cached is None:
                        cached = flagsByLetters[letters] = flagsOf(letters, keywords)
                    flags = cached
                # leadingTimestamp's common case inline: at most 11 digits
                # (before the year 5138), all within its range.
                dot = unique.find(".")
                head = unique if dot < 0 else unique[:dot]
                when: float | None
                if 0 < len(head) < LATEST_DIGITS and head.isascii() and head.isdigit():
                    when = int(head)
                else:
                    when = leadingTimestamp(unique)
                size = sizeField(unique) if ",S=" in unique else None
                if when is None or size is None:
                    # Renamed or deleted since the scan: readBodies looks
                    # for it again; meanwhile let the server date it.
                    if irregular is None:
                        status = opened.stat(index, name)
                    else:
                        status = irregular.status
                    if status is not None:
                        if when is None:
                            when = status.st_mtime
                        if size is None:
                            size = status.st_size
                # Sorted as tuples (keys are unique, so the flags are never
                # compared): undated first (as if dated minus infinity); a
                # file dated before 1970 (a negative mtime) keeps its date.
                rows.append((_UNDATED if when is None else when, key, flags, size, when))
        rows.sort()
        fromTimestamp = datetime.fromtimestamp
        messages = [
            listedMessage(
                key,
                flags,
                None if when is None else fromTimestamp(when, timezone.utc),
                0 if size is None else size,
            )
            for _, key, flags, size, when in rows
        ]
        return succeed(messages)

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, with CRLF line endings.

        A file renamed since the listing (a flag change by a live MDA or
        client) is found again by scanning the folder once more (once per
        call); a file that is still missing, or cannot be read, or was
        listed as something else than a regular file, is an
        L{UnreadableMessage} saying why.
        """
        if not messages:
            return succeed([])
        files = self._messageFiles.get(folder.key)
        rescanned = False
        if files is None:
            files, rescanned = self._rescan(folder), True
        try:
            opened = OpenFolder(self.path, files.relative)
        except SourceError as e:
            return succeed([UnreadableMessage(str(e)) for _ in messages])
        bodies: list[MessageBody] = []
        try:
            for message in messages:
                body: MessageBody | None
                located = seen = files.locate(message.key)
                if located is None:
                    body = None
                else:
                    index, name, irregular = located
                    fd = opened.descriptors[index]
                    if irregular is None and fd is not None:
                        body = None
                        size = message.size
                        if 0 < size <= LARGE_MESSAGE:
                            # The common case: one open, read, close.
                            body = readListedFile(name, size, fd)
                        if body is None:
                            shown = opened.shownDirectory(index)
                            body = readMessageFile(name, size, fd, shown)
                    else:
                        body = opened.read(index, name, irregular, message.size)
                if body is None and not rescanned:
                    files, rescanned = self._rescan(folder), True
                    opened.close()
                    opened = OpenFolder(self.path, files.relative)
                    located = files.locate(message.key)
                    if located is not None:
                        seen = located
                        body = opened.read(*located, message.size)
                if body is None:
                    body = UnreadableMessage(
                        f"file vanished: {self._whereWas(opened, message, seen)}"
                    )
                bodies.append(body)
        except SourceError as e:
            # The folder became unreadable while being read again.
            bodies.extend(UnreadableMessage(str(e)) for _ in messages[len(bodies) :])
        finally:
            opened.close()
        return succeed(bodies)

    def _whereWas(
        self,
        opened: OpenFolder,
        message: SourceMessage,
        located: tuple[int, str, Irregular | None] | None,
    ) -> str:
        """
        Name the file of C{message} for the admin: its last known path, or
        its key and folder when it was never seen.
        """
        if located is not None:
            index, name, _ = located
            return os.path.join(opened.shownDirectory(index), carriedName(name))
        return f"{message.key} in {opened.shown}"

    def _rescan(self, folder: SourceFolder) -> FolderFiles:
        """
        Where the files of C{folder} are now; none if the folder is gone.
        """
        try:
            opened, _ = self._open(folder)
        except SourceError:
            self._messageFiles.pop(folder.key, None)
            try:
                relative = self._relativeOf(folder)
            except SourceError:
                relative = ""
            return FolderFiles(relative, [])
        opened.close()
        return self._messageFiles[folder.key]
