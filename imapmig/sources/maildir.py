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
import re
from typing import Sequence

import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    maildirFlags,
    toCRLF,
    utcFromTimestamp,
)
from imapmig.sources import IMessageSource

__all__ = ["MaildirSource", "readMessageFile", "displayableName"]

# Scanned in this order: for duplicate unique names, cur/ wins the plain key.
_SUBDIRS = ("cur", "new")


# Well-known top-level folder names and their RFC 6154 attributes, matched
# case-insensitively.
_SPECIAL_USE = {
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

# A leading integer outside [1980-01-01, 2100-01-01) is not taken for a
# delivery time (some writers use counters or random names).
_EARLIEST = 315532800
_LATEST = 4102444800

_SIZE_FIELD = re.compile(r",S=([0-9]+)")


def displayableName(name: str) -> str:
    """
    Return a file name as a string that can be encoded as UTF-8.

    Python decodes file names that are not UTF-8 with C{surrogateescape};
    such a string cannot be stored in SQLite nor sent as a mailbox name.
    Its undecodable bytes are shown as C{\\xNN} instead.

    @param name: a file name as C{os} returns it.
    @return: C{name} itself when it is valid Unicode.
    """
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


# Files larger than this are not read into memory: they are sent from the
# open file, converted to CRLF a slice at a time (see StreamedBody).
LARGE_FILE = 4 * 1024 * 1024
_CHUNK = 1024 * 1024


def readMessageFile(path: str, listedSize: int = 0) -> MessageBody | None:
    """
    Read one message file whole, in one read, with CRLF line endings; a
    file larger than L{LARGE_FILE} is left open and returned as a
    L{StreamedBody}.

    @param path: the file.
    @param listedSize: its size as the listing saw it, if known (else 0).
        A small file of known size is read with no C{fstat}: one C{read}
        asks for one octet more, which shows whether it grew since.
    @return: the body; an L{UnreadableMessage} saying why it could not be
        read; or L{None} when the file does not exist (the caller may look
        for it under another name).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        streamed = False
        try:
            size = listedSize if 0 < listedSize <= LARGE_FILE else os.fstat(fd).st_size
            data = b""
            grew = False
            if size <= LARGE_FILE:
                data = os.read(fd, size + 1)
                # An octet more than expected: it grew since it was listed
                # (or since the fstat); take its size now.
                grew = len(data) > size
                if grew:
                    size = os.fstat(fd).st_size
            if size > LARGE_FILE:
                body = StreamedBody.fromDescriptor(fd, displayableName(path), _CHUNK)
                streamed = True
                return body
            if grew:
                rest = [data]
                while chunk := os.read(fd, _CHUNK):
                    rest.append(chunk)
                data = b"".join(rest)
        finally:
            if not streamed:
                os.close(fd)
    except FileNotFoundError:
        return None
    except PermissionError:
        return UnreadableMessage(f"permission denied: {displayableName(path)}")
    except OSError as e:
        return UnreadableMessage(f"cannot read {displayableName(path)}: {e.strerror or e}")
    return toCRLF(data)


def _splitName(name: str) -> tuple[str, str | None]:
    """
    Split a Maildir file name into its unique part and its flag letters.

    @return: the unique part, and the letters after C{2,} (L{None} when the
        name has no C{2,} info).  The info starts at the first C{:}; some
        platforms write C{!} or C{;} instead, recognised only before C{2,}.
    """
    i = name.find(":")
    if i < 0:
        i = name.rfind("!2,")
        if i < 0:
            i = name.rfind(";2,")
            if i < 0:
                return name, None
    if name.startswith("2,", i + 1):
        return name[:i], name[i + 3 :]
    return name[:i], None


def _flagsOf(letters: str, keywords: dict[str, str]) -> tuple[str, ...]:
    """
    The IMAP flags of Maildir info letters: the system flags (C{P},
    "passed", has no IMAP counterpart and is dropped), then the keywords of
    Dovecot's lowercase letters, in letter order.

    @param keywords: the folder's C{dovecot-keywords}: letter to keyword.
    """
    flags = maildirFlags(letters)
    named = [keywords[c] for c in sorted(set(letters)) if "a" <= c <= "z" and c in keywords]
    return flags + tuple(named) if named else flags


# Dovecot names at most 26 keywords per folder, letters a-z, in this file.
KEYWORDS_FILE = "dovecot-keywords"


def readKeywords(directory: str) -> dict[str, str]:
    """
    Read a folder's C{dovecot-keywords} file: lines C{"<index> <keyword>"},
    index 0 being letter C{a}.

    @return: letter to keyword; empty when there is no such file (a Maildir
        not written by Dovecot), and malformed lines are skipped.
    """
    try:
        with open(os.path.join(directory, KEYWORDS_FILE), "rb") as f:
            content = f.read(64 * 1024)
    except OSError:
        return {}
    result: dict[str, str] = {}
    for line in content.splitlines():
        index, _, name = line.strip().partition(b" ")
        if not index.isdigit() or not name or int(index) >= 26:
            continue
        try:
            keyword = name.strip().decode("utf-8")
        except UnicodeDecodeError:
            continue
        result[chr(ord("a") + int(index))] = keyword
    return result


def _leadingTimestamp(unique: str) -> int | None:
    """
    The delivery time in a unique name such as C{1700000000.M123P45.host}:
    its leading integer, if that is a plausible POSIX time.
    """
    dot = unique.find(".")
    head = unique if dot < 0 else unique[:dot]
    if head.isascii() and head.isdigit():
        when = int(head)
        if _EARLIEST <= when < _LATEST:
            return when
    return None


def _sizeField(unique: str) -> int | None:
    """
    The size in the C{,S=NNNN} field of a unique name, if any.
    """
    if ",S=" not in unique:
        return None
    match = _SIZE_FIELD.search(unique)
    return None if match is None else int(match.group(1))


def _isMaildirFolder(directory: str) -> bool:
    """
    Whether C{directory} holds a Maildir folder (a C{cur} or C{new} in it).
    """
    return os.path.isdir(os.path.join(directory, "cur")) or os.path.isdir(
        os.path.join(directory, "new")
    )


def _decodeComponent(raw: str) -> str:
    """
    Decode one level of a Maildir++ folder name from modified UTF-7; a name
    that is not valid modified UTF-7 keeps its raw form.
    """
    try:
        return raw.encode("ascii").decode("imap4-utf-7")
    except UnicodeError:
        return displayableName(raw)


# (key, unique part, index into _SUBDIRS, file name, flag letters or None)
_Scanned = tuple[str, str, int, str, str | None]


def _scanFolder(directory: str) -> tuple[list[_Scanned], bool]:
    """
    List the message files of one Maildir folder: C{cur/} and C{new/},
    without dotfiles and subdirectories; C{tmp/} holds deliveries in
    progress and is never read.

    Each file's key is its unique part.  Files that share a unique part
    (copies, or a crash between the link and the unlink of a rename) all
    stay, with distinct deterministic keys: sorted with C{cur/} before
    C{new/} and then by file name, the first keeps the unique part, the
    others get C{"<unique>/<subdir>"}, or C{"<unique>/<subdir>/<file name>"}
    if that is taken too.

    Only names are kept (no C{DirEntry}, no full path): a listing of a
    large folder costs a few strings per message.

    @param directory: the folder's directory.
    @return: the files, in no particular order, and whether C{cur/} or
        C{new/} exists at all.
    @raise OSError: C{cur/} or C{new/} exists but cannot be listed.
    """
    first: dict[str, _Scanned] = {}
    duplicates: dict[str, list[_Scanned]] = {}
    found = False
    for index, subdir in enumerate(_SUBDIRS):
        try:
            entries = os.scandir(os.path.join(directory, subdir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        found = True
        with entries:
            for entry in entries:
                name = entry.name
                if name.startswith(".") or not entry.is_file():
                    continue
                unique, letters = _splitName(name)
                if not unique.isascii():
                    unique = displayableName(unique)
                scanned = (unique, unique, index, name, letters)
                if unique in first:
                    duplicates.setdefault(unique, [first[unique]]).append(scanned)
                else:
                    first[unique] = scanned
    result = list(first.values())
    if not duplicates:
        return result, found
    result = [s for s in result if s[0] not in duplicates]
    for unique, group in duplicates.items():
        group.sort(key=lambda s: (s[2], s[3]))
        taken = {unique}
        result.append(group[0])
        for _, _, index, name, letters in group[1:]:
            key = f"{unique}/{_SUBDIRS[index]}"
            if key in taken:
                key = f"{key}/{displayableName(name)}"
            taken.add(key)
            result.append((key, unique, index, name, letters))
    return result, found


class _FolderFiles:
    """
    Where the message files of one folder are: per key, the file's name in
    C{cur/} or C{new/} (the names the listing already holds, no paths).
    """

    __slots__ = ("directory", "_names", "_prefixes")

    def __init__(self, directory: str, scanned: list[_Scanned]) -> None:
        self.directory = directory
        self._names: tuple[dict[str, str], ...] = tuple({} for _ in _SUBDIRS)
        self._prefixes = _subdirectoryPrefixes(directory)
        for key, _, index, name, _ in scanned:
            self._names[index][key] = name

    def path(self, key: str) -> str | None:
        """
        The path of the file of C{key}, or L{None} if it was not listed.
        """
        for prefix, names in zip(self._prefixes, self._names):
            name = names.get(key)
            if name is not None:
                return prefix + name
        return None


class _SubdirectoryDescriptors:
    """
    A folder's C{cur/} and C{new/} opened as directories, each once, so
    that a file in them is looked up by its name alone (C{fstatat}): a
    listing that must C{stat} every file (names without C{S=}) does not
    walk the whole path again for each.
    """

    def __init__(self, directory: str) -> None:
        self._prefixes = _subdirectoryPrefixes(directory)
        self._descriptors: list[int | None] = [None] * len(_SUBDIRS)

    def __enter__(self) -> _SubdirectoryDescriptors:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for fd in self._descriptors:
            if fd is not None and fd >= 0:
                os.close(fd)

    def stat(self, index: int, name: str) -> os.stat_result | None:
        """
        The status of the file C{name} in subdirectory C{index}, or
        L{None} if it cannot be had (renamed or deleted since the scan).
        """
        fd = self._descriptors[index]
        if fd is None:
            try:
                fd = os.open(self._prefixes[index], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                fd = -1
            self._descriptors[index] = fd
        try:
            if fd < 0:
                return os.stat(self._prefixes[index] + name)
            return os.stat(name, dir_fd=fd)
        except OSError:
            return None


def _subdirectoryPrefixes(directory: str) -> tuple[str, ...]:
    """
    The paths of a folder's C{cur/} and C{new/}, each with its trailing
    slash: a file's path is one concatenation away (C{os.path.join} costs
    more than the C{open} it serves, for a small message).
    """
    return tuple(os.path.join(directory, subdir, "") for subdir in _SUBDIRS)


@implementer(IMessageSource)
class MaildirSource:
    """
    Messages from a Maildir and its Maildir++ subfolders.

    Folders: the Maildir itself is C{INBOX} (when it has C{cur/} or
    C{new/}); each subdirectory C{.A.B} with C{cur/} or C{new/} is the
    folder C{("A", "B")}, keyed by its directory name.  Each level of the
    name is decoded from modified UTF-7 (as Dovecot and Courier write
    C{&APw-}); a level that does not decode keeps its raw form (and
    non-UTF-8 bytes are shown as C{\\xNN}).  Dovecot's C{.INBOX.x} is
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
    INTERNALDATE is the leading timestamp of the name when plausible, else
    the file's mtime; the size is the name's C{,S=} field, else the file's.
    Oldest first.

    Files are read on the calling thread, with blocking system calls.

    @ivar path: the Maildir's directory.
    """

    def __init__(self, path: str) -> None:
        """
        @param path: the Maildir's directory.
        """
        self.path = path
        self._folderDirectories: dict[str, str] = {}
        self._messageFiles: dict[str, _FolderFiles] = {}

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
                names = sorted(e.name for e in entries if e.name.startswith(".") and e.is_dir())
        except FileNotFoundError:
            return fail(SourceError(f"no such Maildir: {root}"))
        except NotADirectoryError:
            return fail(SourceError(f"not a Maildir: {root} is not a directory"))
        except OSError as e:
            return fail(SourceError(f"cannot read the Maildir {root}: {e.strerror or e}"))
        folders: list[SourceFolder] = []
        directories: dict[str, str] = {}
        if _isMaildirFolder(root):
            folders.append(SourceFolder(path=("INBOX",), key=""))
            directories[""] = root
        for name in names:
            directory = os.path.join(root, name)
            if not _isMaildirFolder(directory):
                continue
            path = tuple(_decodeComponent(level) for level in name[1:].split("."))
            specialUse = _SPECIAL_USE.get(path[0].casefold()) if len(path) == 1 else None
            key = displayableName(name)
            folders.append(SourceFolder(path=path, key=key, specialUse=specialUse))
            directories[key] = directory
        if not folders:
            return fail(
                SourceError(f"not a Maildir: {root} has no cur/ or new/ and no Maildir++ folder")
            )
        folders.sort(key=lambda f: (f.path[0] != "INBOX", f.path, f.key))
        self._folderDirectories = directories
        return succeed(folders)

    def _directoryOf(self, folder: SourceFolder) -> str:
        """
        The directory of C{folder}.

        @raise SourceError: the key cannot be a folder of this Maildir.
        """
        directory = self._folderDirectories.get(folder.key)
        if directory is not None:
            return directory
        key = folder.key
        if key == "":
            return self.path
        if not key.startswith(".") or key in (".", "..") or "/" in key or os.sep in key:
            raise SourceError(f"not a Maildir++ folder name: {key!r} in {self.path}")
        return os.path.join(self.path, key)

    def _scan(self, folder: SourceFolder) -> tuple[str, list[_Scanned]]:
        """
        Scan C{folder}, remember where each message's file is, and return
        the folder's directory and the scan.

        @raise SourceError: the folder is gone or cannot be listed.
        """
        directory = self._directoryOf(folder)
        try:
            scanned, found = _scanFolder(directory)
        except OSError as e:
            raise SourceError(
                f"cannot list the Maildir folder {displayableName(directory)}: {e.strerror or e}"
            ) from e
        if not found:
            raise SourceError(
                f"no such Maildir folder: {displayableName(directory)} (no cur/ or new/)"
            )
        self._messageFiles[folder.key] = _FolderFiles(directory, scanned)
        return directory, scanned

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, oldest first (by INTERNALDATE, then key).

        @return: a Deferred that fails with L{SourceError} when the folder's
            directory is gone or cannot be listed.
        """
        try:
            directory, scanned = self._scan(folder)
        except SourceError as e:
            return fail(e)
        flagsByLetters: dict[str, tuple[str, ...]] = {}
        keywords = readKeywords(directory)
        rows: list[tuple[float, str, tuple[str, ...], int | None]] = []
        with _SubdirectoryDescriptors(directory) as descriptors:
            for key, unique, index, name, letters in scanned:
                if not letters:
                    flags: tuple[str, ...] = ()
                else:
                    cached = flagsByLetters.get(letters)
                    if cached is None:
                        cached = flagsByLetters[letters] = _flagsOf(letters, keywords)
                    flags = cached
                when: float | None = _leadingTimestamp(unique)
                size = _sizeField(unique)
                if when is None or size is None:
                    # Renamed or deleted since the scan: readBodies looks
                    # for it again; meanwhile let the server date it.
                    status = descriptors.stat(index, name)
                    if status is not None:
                        if when is None:
                            when = status.st_mtime
                        if size is None:
                            size = status.st_size
                rows.append((-1.0 if when is None else when, key, flags, size))
        rows.sort()
        messages = [
            SourceMessage(
                key=key,
                flags=flags,
                internalDate=None if when < 0 else utcFromTimestamp(when),
                size=0 if size is None else size,
            )
            for when, key, flags, size in rows
        ]
        return succeed(messages)

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, with CRLF line endings.

        A file renamed since the listing (a flag change by a live MDA or
        client) is found again by scanning the folder once more (once per
        call); a file that is still missing, or cannot be read, is an
        L{UnreadableMessage} saying why.
        """
        if not messages:
            return succeed([])
        files = self._messageFiles.get(folder.key)
        rescanned = False
        if files is None:
            files, rescanned = self._rescan(folder), True
        bodies: list[MessageBody] = []
        for message in messages:
            path = files.path(message.key)
            body = None if path is None else readMessageFile(path, message.size)
            if body is None and not rescanned:
                files, rescanned = self._rescan(folder), True
                found = files.path(message.key)
                if found is not None:
                    path = found
                    body = readMessageFile(path, message.size)
            if body is None:
                body = UnreadableMessage(f"file vanished: {self._whereWas(folder, message, path)}")
            bodies.append(body)
        return succeed(bodies)

    def _whereWas(self, folder: SourceFolder, message: SourceMessage, path: str | None) -> str:
        """
        Name the file of C{message} for the admin: its last known path, or
        its key and folder when it was never seen.
        """
        if path is not None:
            return displayableName(path)
        try:
            directory = self._directoryOf(folder)
        except SourceError:
            directory = self.path
        return f"{message.key} in {displayableName(directory)}"

    def _rescan(self, folder: SourceFolder) -> _FolderFiles:
        """
        Where the files of C{folder} are now; none if the folder is gone.
        """
        try:
            self._scan(folder)
        except SourceError:
            self._messageFiles.pop(folder.key, None)
            return _FolderFiles(self.path, [])
        return self._messageFiles[folder.key]
