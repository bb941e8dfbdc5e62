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

import errno
import os
import re
import stat
from datetime import datetime, timezone
from typing import Sequence

import twisted.mail.imap4  # noqa: F401  (registers the imap4-utf-7 codec)
from attrs import frozen
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.mail.message import (
    MessageBody,
    SourceFolder,
    SourceMessage,
    UnreadableMessage,
    listedMessage,
    maildirFlags,
)
from imapmig.sources import IMessageSource
from imapmig.sources.local import (
    LARGE_MESSAGE,
    LeavesTree,
    OpenTree,
    carriedName,
    fileKind,
    hasUndecodable,
    linkProblem,
    notRegular,
    originalName,
    readListedFile,
    readMessageFile,
    readOpenFile,
)

__all__ = ["MaildirSource", "SPECIAL_USE"]

log = Logger()

# Scanned in this order: for duplicate unique names, cur/ wins the plain key.
_SUBDIRS = ("cur", "new")


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

# The Maildir specification starts a unique name with the delivery time in
# seconds since the start of 1970 (UTC): any such integer is honoured, from
# 0 (1970-01-01, which an INTERNALDATE expresses) up to the last second an
# INTERNALDATE's four-digit year can carry (9999-12-31 23:59:59).  A larger
# integer (a counter, milliseconds) holds no usable time.
_LATEST = 253402300800
_LATEST_DIGITS = len(str(_LATEST))

_SIZE_FIELD = re.compile(r",S=([0-9]+)")

# Where listMessages sorts a message with no date: before any date.
_UNDATED = float("-inf")


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


def readKeywords(tree: OpenTree, folder: str) -> dict[str, str]:
    """
    Read a folder's C{dovecot-keywords} file: lines C{"<index> <keyword>"},
    index 0 being letter C{a}.

    @param tree: the Maildir, open.
    @param folder: the folder's directory, relative to the Maildir.
    @return: letter to keyword; empty when there is no such file (a Maildir
        not written by Dovecot) or it is not a regular file inside the
        Maildir, and malformed lines are skipped.
    """
    try:
        fd = tree.open(os.path.join(folder, KEYWORDS_FILE))
    except (OSError, LeavesTree):
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        content = os.read(fd, 64 * 1024)
    except OSError:
        return {}
    finally:
        os.close(fd)
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
    its leading integer, seconds since 1970-01-01 UTC as the Maildir
    specification says, at any date an INTERNALDATE can express (1970 to
    9999; L{_LATEST}).  L{None} when the name starts with no integer or one
    beyond year 9999: only then has the name no usable time (and the
    caller falls back to the file's mtime).
    """
    dot = unique.find(".")
    head = unique if dot < 0 else unique[:dot]
    # By value, not length: leading zeros are allowed (as verify's own
    # reading, imapmig.commands.expected, allows them).
    if head.isascii() and head.isdigit() and len(head.lstrip("0")) <= _LATEST_DIGITS:
        when = int(head)
        if when < _LATEST:
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


def _isMaildirFolder(directory: str) -> bool | None:
    """
    Whether C{directory} holds a Maildir folder (a C{cur} or C{new} in it).

    @return: L{None} when that cannot be told (no permission to look, a
        symbolic link loop): listing its messages will say why.
    """
    unknown = False
    for subdir in _SUBDIRS:
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


def _decodeComponent(raw: str) -> str:
    """
    Decode one level of a Maildir++ folder name from modified UTF-7; a name
    that is not valid modified UTF-7 keeps its raw form (carried, if it is
    not UTF-8).
    """
    try:
        return raw.encode("ascii").decode("imap4-utf-7")
    except UnicodeError:
        return carriedName(raw)


@frozen
class _Irregular:
    """
    An entry of C{cur/} or C{new/} that is not a regular file.

    @ivar reason: why it is not read; L{None} for a symbolic link to a
        regular file inside the Maildir, which is read.
    @ivar target: that file, relative to the Maildir.
    @ivar status: that file's status.
    """

    reason: str | None
    target: str = ""
    status: os.stat_result | None = None


class _OpenFolder:
    """
    A Maildir folder's C{cur/} and C{new/}, opened beneath the Maildir (see
    L{imapmig.sources.local}) for one listing or one batch of reads, so
    that files are opened and looked up by their names alone.  A context
    manager: everything is closed on leaving.

    @ivar tree: the Maildir, open.
    @ivar relative: the folder's directory, relative to the Maildir.
    @ivar shown: the folder's directory, as shown to the admin.
    @ivar descriptors: per subdirectory, its descriptor, or L{None} when
        it does not exist.
    """

    def __init__(self, root: str, relative: str) -> None:
        """
        @param root: the Maildir.
        @param relative: the folder's directory, relative to it.
        @raise SourceError: the Maildir or a subdirectory that exists
            cannot be opened (no permission, not a directory, a symbolic
            link leading out of the Maildir or into a loop).
        """
        self.relative = relative
        self.shown = carriedName(os.path.join(root, relative) if relative else root)
        # Joined once: a path per message would cost more than its open.
        self._shownDirectories = tuple(os.path.join(self.shown, subdir) for subdir in _SUBDIRS)
        try:
            self.tree = OpenTree(root)
        except OSError as e:
            raise SourceError(f"cannot read the Maildir {carriedName(root)}: {e.strerror or e}")
        self.descriptors: list[int | None] = []
        try:
            for subdir in _SUBDIRS:
                self.descriptors.append(self._openSubdirectory(subdir))
        except BaseException:
            self.close()
            raise

    def _openSubdirectory(self, subdir: str) -> int | None:
        """
        Open C{cur/} or C{new/}; L{None} if it does not exist.
        """
        try:
            return self.tree.open(os.path.join(self.relative, subdir), os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return None
        except LeavesTree as e:
            why = linkProblem(carriedName(os.path.join(self.tree.root, e.path)), e)
        except NotADirectoryError:
            why = f"{subdir}/ is not a directory"
        except OSError as e:
            why = "symbolic link loop" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise SourceError(f"cannot list the Maildir folder {self.shown}: {why}")

    @property
    def found(self) -> bool:
        """
        Whether C{cur/} or C{new/} exists.
        """
        return any(fd is not None for fd in self.descriptors)

    def __enter__(self) -> _OpenFolder:
        return self

    def __exit__(self, *excInfo: object) -> None:
        self.close()

    def close(self) -> None:
        """
        Close everything.
        """
        for fd in self.descriptors:
            if fd is not None:
                os.close(fd)
        self.descriptors = [None] * len(self.descriptors)
        self.tree.close()

    def shownDirectory(self, index: int) -> str:
        """
        Subdirectory C{index}, as shown to the admin.
        """
        return self._shownDirectories[index]

    def stat(self, index: int, name: str) -> os.stat_result | None:
        """
        The status of the file C{name} in subdirectory C{index} (not
        following a symbolic link), or L{None} if it cannot be had (renamed
        or deleted since the scan).
        """
        fd = self.descriptors[index]
        if fd is None:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None

    def classify(self, index: int, entry: os.DirEntry[str]) -> _Irregular | None:
        """
        What to do with an entry of subdirectory C{index} that is not a
        regular file.

        @return: L{None} if it is gone.
        """
        shown = os.path.join(self.shownDirectory(index), carriedName(entry.name))
        try:
            if not entry.is_symlink():
                return _Irregular(notRegular(shown, entry.stat(follow_symlinks=False).st_mode))
        except FileNotFoundError:
            return None
        except OSError as e:
            return _Irregular(f"cannot read {shown}: {e.strerror or e}")
        relative = os.path.join(self.relative, _SUBDIRS[index], entry.name)
        try:
            target = self.tree.resolve(relative)
            status = os.stat(os.path.join(self.tree.realRoot, target))
        except (LeavesTree, OSError) as e:
            return _Irregular(linkProblem(shown, e))
        if not stat.S_ISREG(status.st_mode):
            return _Irregular(
                f"not a regular file: symbolic link to a {fileKind(status.st_mode)}: {shown}"
            )
        return _Irregular(None, target, status)

    def read(
        self, index: int, name: str, irregular: _Irregular | None, size: int
    ) -> MessageBody | None:
        """
        Read the file C{name} of subdirectory C{index}, as L{readMessageFile}
        does (L{None} when it is gone).

        @param irregular: what the listing found it to be, if not a
            regular file.
        @param size: its size as listed.
        """
        if irregular is None:
            fd = self.descriptors[index]
            if fd is None:
                return None
            return readMessageFile(name, size, fd, self._shownDirectories[index])
        if irregular.reason is not None:
            return UnreadableMessage(irregular.reason)
        try:
            fd = self.tree.open(irregular.target)
        except FileNotFoundError:
            return None
        except (LeavesTree, OSError) as e:
            shown = os.path.join(self.shownDirectory(index), carriedName(name))
            return UnreadableMessage(linkProblem(shown, e))
        return readOpenFile(fd, self.shownDirectory(index), name, size)


# (key, unique part, index into _SUBDIRS, file name, flag letters or None,
# what it is if not a regular file)
_Scanned = tuple[str, str, int, str, str | None, _Irregular | None]


def _scanFolder(folder: _OpenFolder) -> list[_Scanned]:
    """
    List the message files of one Maildir folder: C{cur/} and C{new/},
    without dotfiles; C{tmp/} holds deliveries in progress and is never
    read.  Entries that are not regular files are listed too, with what
    they are.

    Each file's key is its unique part (in the form of
    L{imapmig.sources.local.carriedName}).  Files that share a unique part
    (copies, or a crash between the link and the unlink of a rename) all
    stay, with distinct deterministic keys: sorted with C{cur/} before
    C{new/} and then by file name, the first keeps the unique part, the
    others get C{"<unique>/<subdir>"}, or C{"<unique>/<subdir>/<file name>"}
    if that is taken too.

    Only names are kept (no C{DirEntry}, no full path): a listing of a
    large folder costs a few strings per message.  A regular file costs no
    system call beyond the directory's reading.

    @param folder: the folder, open.
    @return: the files, in no particular order.
    @raise OSError: C{cur/} or C{new/} cannot be read.
    """
    first: dict[str, _Scanned] = {}
    duplicates: dict[str, list[_Scanned]] = {}
    for index, fd in enumerate(folder.descriptors):
        if fd is None:
            continue
        with os.scandir(fd) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                irregular = None
                if not entry.is_file(follow_symlinks=False):
                    irregular = folder.classify(index, entry)
                    if irregular is None:
                        continue
                unique, letters = _splitName(name)
                if not unique.isascii() or "%" in unique:
                    unique = carriedName(unique)
                scanned = (unique, unique, index, name, letters, irregular)
                if unique in first:
                    duplicates.setdefault(unique, [first[unique]]).append(scanned)
                else:
                    first[unique] = scanned
    result = list(first.values())
    if not duplicates:
        return result
    result = [s for s in result if s[0] not in duplicates]
    for unique, group in duplicates.items():
        group.sort(key=lambda s: (s[2], s[3]))
        taken = {unique}
        result.append(group[0])
        for _, _, index, name, letters, irregular in group[1:]:
            key = f"{unique}/{_SUBDIRS[index]}"
            if key in taken:
                key = f"{key}/{carriedName(name)}"
            taken.add(key)
            result.append((key, unique, index, name, letters, irregular))
    return result


class _FolderFiles:
    """
    Where the message files of one folder are: per key, the file's name in
    C{cur/} or C{new/} (the names the listing already holds, no paths), and
    what the entries that are not regular files are.

    @ivar relative: the folder's directory, relative to the Maildir.
    """

    __slots__ = ("relative", "_names", "_irregular")

    def __init__(self, relative: str, scanned: list[_Scanned]) -> None:
        self.relative = relative
        self._names: tuple[dict[str, str], ...] = tuple({} for _ in _SUBDIRS)
        self._irregular: dict[str, _Irregular] = {}
        for key, _, index, name, _, irregular in scanned:
            self._names[index][key] = name
            if irregular is not None:
                self._irregular[key] = irregular

    def locate(self, key: str) -> tuple[int, str, _Irregular | None] | None:
        """
        The subdirectory and name of the file of C{key}, and what it is if
        not a regular file; L{None} if it was not listed.
        """
        for index, names in enumerate(self._names):
            name = names.get(key)
            if name is not None:
                return index, name, self._irregular.get(key) if self._irregular else None
        return None


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
    1970-01-01 UTC, at any date up to the year 9999; L{_leadingTimestamp}),
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
                names = sorted(e.name for e in entries if _isFolderDirectory(e))
        except FileNotFoundError:
            return fail(SourceError(f"no such Maildir: {carriedName(root)}"))
        except NotADirectoryError:
            return fail(SourceError(f"not a Maildir: {carriedName(root)} is not a directory"))
        except OSError as e:
            why = e.strerror or e
            return fail(SourceError(f"cannot read the Maildir {carriedName(root)}: {why}"))
        folders: list[SourceFolder] = []
        directories: dict[str, str] = {}
        if _isMaildirFolder(root) is not False:
            folders.append(SourceFolder(path=("INBOX",), key=""))
            directories[""] = ""
        for name in names:
            if _isMaildirFolder(os.path.join(root, name)) is False:
                continue
            path = tuple(_decodeComponent(level) for level in name[1:].split("."))
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

    def _open(self, folder: SourceFolder) -> tuple[_OpenFolder, list[_Scanned]]:
        """
        Open and scan C{folder}, and remember where each message's file is.

        @return: the folder, open (the caller closes it), and the scan.
        @raise SourceError: the folder is gone or cannot be listed.
        """
        opened = _OpenFolder(self.path, self._relativeOf(folder))
        try:
            if not opened.found:
                directory = os.path.join(self.path, opened.relative)
                if os.path.islink(directory) and not os.path.exists(directory):
                    raise SourceError(
                        f"cannot list the Maildir folder {opened.shown}: symbolic link to nothing"
                    )
                raise SourceError(f"no such Maildir folder: {opened.shown} (no cur/ or new/)")
            try:
                scanned = _scanFolder(opened)
            except OSError as e:
                raise SourceError(
                    f"cannot list the Maildir folder {opened.shown}: {e.strerror or e}"
                ) from e
        except BaseException:
            opened.close()
            raise
        self._messageFiles[folder.key] = _FolderFiles(opened.relative, scanned)
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
                        cached = flagsByLetters[letters] = _flagsOf(letters, keywords)
                    flags = cached
                # _leadingTimestamp's common case inline: at most 11 digits
                # (before the year 5138), all within its range.
                dot = unique.find(".")
                head = unique if dot < 0 else unique[:dot]
                when: float | None
                if 0 < len(head) < _LATEST_DIGITS and head.isascii() and head.isdigit():
                    when = int(head)
                else:
                    when = _leadingTimestamp(unique)
                size = _sizeField(unique) if ",S=" in unique else None
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
            opened = _OpenFolder(self.path, files.relative)
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
                    opened = _OpenFolder(self.path, files.relative)
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
        opened: _OpenFolder,
        message: SourceMessage,
        located: tuple[int, str, _Irregular | None] | None,
    ) -> str:
        """
        Name the file of C{message} for the admin: its last known path, or
        its key and folder when it was never seen.
        """
        if located is not None:
            index, name, _ = located
            return os.path.join(opened.shownDirectory(index), carriedName(name))
        return f"{message.key} in {opened.shown}"

    def _rescan(self, folder: SourceFolder) -> _FolderFiles:
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
            return _FolderFiles(relative, [])
        opened.close()
        return self._messageFiles[folder.key]


def _isFolderDirectory(entry: os.DirEntry[str]) -> bool:
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
